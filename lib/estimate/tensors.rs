//! The one model description every input is reduced to — a list of named tensors with shapes and dtypes —
//! and accelerate's `calculate_maximum_sizes` over it. Safetensors headers and the per-architecture
//! formulas both produce this list, so the two routes cannot disagree on the arithmetic.

/// Element types as safetensors names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    Bool,
    U8,
    I8,
    F8E4M3,
    F8E5M2,
    F8E8M0,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    I64,
    U64,
    F64,
}

impl DType {
    /// The dtype from a safetensors header's `dtype` string.
    pub fn from_safetensors(s: &str) -> Option<DType> {
        Some(match s {
            "BOOL" => DType::Bool,
            "U8" => DType::U8,
            "I8" => DType::I8,
            "F8_E4M3" => DType::F8E4M3,
            "F8_E5M2" => DType::F8E5M2,
            "F8_E8M0" => DType::F8E8M0,
            "I16" => DType::I16,
            "U16" => DType::U16,
            "F16" => DType::F16,
            "BF16" => DType::BF16,
            "I32" => DType::I32,
            "U32" => DType::U32,
            "F32" => DType::F32,
            "I64" => DType::I64,
            "U64" => DType::U64,
            "F64" => DType::F64,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "BOOL",
            DType::U8 => "U8",
            DType::I8 => "I8",
            DType::F8E4M3 => "F8_E4M3",
            DType::F8E5M2 => "F8_E5M2",
            DType::F8E8M0 => "F8_E8M0",
            DType::I16 => "I16",
            DType::U16 => "U16",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::I32 => "I32",
            DType::U32 => "U32",
            DType::F32 => "F32",
            DType::I64 => "I64",
            DType::U64 => "U64",
            DType::F64 => "F64",
        }
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F8E4M3
                | DType::F8E5M2
                | DType::F8E8M0
                | DType::F16
                | DType::BF16
                | DType::F32
                | DType::F64
        )
    }

    /// Bits per element as stored (`BOOL` is one bit in accelerate's `dtype_byte_size`).
    pub fn bits(self) -> u64 {
        match self {
            DType::Bool => 1,
            DType::U8 | DType::I8 | DType::F8E4M3 | DType::F8E5M2 | DType::F8E8M0 => 8,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 16,
            DType::I32 | DType::U32 | DType::F32 => 32,
            DType::I64 | DType::U64 | DType::F64 => 64,
        }
    }

    /// Bytes per element in a safetensors file (`BOOL` takes a whole byte there).
    pub fn storage_bytes(self) -> u64 {
        self.bits().max(8) / 8
    }

    /// Bits per element in the model accelerate sizes: it builds every model with
    /// `torch_dtype=float32`, so floating-point tensors count 4 bytes whatever a checkpoint stores,
    /// while integer and bool tensors keep their own size.
    pub fn accelerate_bits(self) -> u64 {
        if self.is_float() {
            32
        } else {
            self.bits()
        }
    }
}

/// One parameter or buffer.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub dtype: DType,
    pub numel: u64,
    /// Size of the first dimension (1 for a scalar): FSDP2 shards every parameter on it.
    pub rows: u64,
    /// A buffer (not trained): rotary frequencies, position ids. Safetensors files do not say, so
    /// tensors read from them are all parameters.
    pub buffer: bool,
    /// A weight that enters a matrix product or convolution (nn.Linear, GPT-2's Conv1D, a tied
    /// LM head's embedding, a patch convolution): what torch's autocast casts to 16 bits, and
    /// keeps cast for the step.
    pub matmul: bool,
}

impl Tensor {
    /// A float32 parameter. Shapes come from configs, so the element count saturates rather than
    /// wraps; the formulas refuse sizes that large before building anything (arch::MAX_ELEMENTS).
    pub fn new(name: impl Into<String>, shape: &[u64]) -> Tensor {
        Tensor::of(name, DType::F32, shape, false)
    }
    pub fn buffer(name: impl Into<String>, dtype: DType, shape: &[u64]) -> Tensor {
        Tensor::of(name, dtype, shape, true)
    }
    pub fn of(name: impl Into<String>, dtype: DType, shape: &[u64], buffer: bool) -> Tensor {
        Tensor {
            name: name.into(),
            dtype,
            numel: shape.iter().fold(1u64, |n, &d| n.saturating_mul(d)),
            rows: shape.first().copied().unwrap_or(1),
            buffer,
            matmul: false,
        }
    }
    /// A float32 weight of a matrix product.
    pub fn matmul(name: impl Into<String>, shape: &[u64]) -> Tensor {
        Tensor {
            matmul: true,
            ..Tensor::new(name, shape)
        }
    }
    fn bits(&self) -> u128 {
        u128::from(self.numel) * u128::from(self.dtype.accelerate_bits())
    }
}

/// A size in bytes as accelerate's Python holds it: an `int`, or a `float` once a bool tensor
/// (1/8 byte) took part. The distinction shows in the output (`512 bytes` vs `512.0 bytes`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bytes {
    pub value: f64,
    pub is_float: bool,
}

impl Bytes {
    fn from_bits(bits: u128, is_float: bool) -> Bytes {
        Bytes {
            value: bits as f64 / 8.0,
            is_float,
        }
    }
    pub fn int(value: u64) -> Bytes {
        Bytes {
            value: value as f64,
            is_float: false,
        }
    }
    /// Python's `self / d`: true division always gives a float.
    pub fn divided(self, d: f64) -> Bytes {
        Bytes {
            value: self.value / d,
            is_float: true,
        }
    }
    /// Python's `self * k` for an int `k`.
    pub fn times(self, k: u64) -> Bytes {
        Bytes {
            value: self.value * k as f64,
            is_float: self.is_float,
        }
    }
}

/// Which modules are never split (transformers' `_no_split_modules`), as path patterns matched
/// against the end of a module path; `#` matches one numeric component.
#[derive(Debug, Clone, Default)]
pub struct NoSplit {
    pub patterns: Vec<&'static str>,
}

impl NoSplit {
    pub fn matches(&self, path: &str) -> bool {
        let parts: Vec<&str> = path.split('.').collect();
        self.patterns.iter().any(|pattern| {
            let want: Vec<&str> = pattern.split('.').collect();
            want.len() <= parts.len()
                && want
                    .iter()
                    .zip(&parts[parts.len() - want.len()..])
                    .all(|(w, p)| {
                        if *w == "#" {
                            !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())
                        } else {
                            w == p
                        }
                    })
        })
    }
}

/// accelerate's `(total_size, largest_layer)` in float32 bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MaximumSizes {
    pub total: Bytes,
    pub largest_layer: Bytes,
}

/// `calculate_maximum_sizes`: the total over all tensors, and the largest "layer" found by walking the
/// root's direct tensors and children, where a layer is a module with no child modules or a no-split
/// module, and other modules are expanded into their child *modules* only (their own direct tensors are
/// never candidates, exactly as in `get_max_layer_size`).
///
/// The module tree is not built: sorted by name, every module's tensors are one contiguous run (they
/// share the prefix `path.`), so the walk splits runs by the next name component. A 36k-tensor MoE
/// would otherwise allocate a map per module.
pub fn maximum_sizes(tensors: &[Tensor], no_split: &NoSplit) -> MaximumSizes {
    let mut entries: Vec<Entry> = tensors
        .iter()
        .map(|t| Entry {
            parts: t.name.split('.').collect(),
            size: Size {
                bits: t.bits(),
                bool: t.dtype == DType::Bool,
            },
        })
        .collect();
    entries.sort_unstable_by(|a, b| a.parts.cmp(&b.parts));
    let total = sum(&entries);
    let mut largest = Size::default();
    for group in runs(&entries, 0) {
        let candidate = if group.len() == 1 && group[0].parts.len() == 1 {
            group[0].size
        } else {
            let mut path = group[0].parts[0].to_string();
            largest_in(group, 1, &mut path, no_split)
        };
        if candidate.bits > largest.bits {
            largest = candidate;
        }
    }
    MaximumSizes {
        total: Bytes::from_bits(total.bits, total.bool),
        largest_layer: Bytes::from_bits(largest.bits, largest.bool),
    }
}

/// A size in bits, and whether a bool tensor is part of it (which makes Python's sum a float).
#[derive(Debug, Clone, Copy, Default)]
struct Size {
    bits: u128,
    bool: bool,
}

struct Entry<'a> {
    parts: Vec<&'a str>,
    size: Size,
}

fn sum(entries: &[Entry]) -> Size {
    entries.iter().fold(Size::default(), |acc, e| Size {
        bits: acc.bits + e.size.bits,
        bool: acc.bool || e.size.bool,
    })
}

/// Consecutive runs of `entries` with the same component at `depth`.
fn runs<'e, 'a>(entries: &'e [Entry<'a>], depth: usize) -> impl Iterator<Item = &'e [Entry<'a>]> {
    entries.chunk_by(move |a, b| a.parts.get(depth) == b.parts.get(depth))
}

/// The largest layer inside the module whose tensors are `module` (names share `depth` components).
fn largest_in(module: &[Entry], depth: usize, path: &mut String, no_split: &NoSplit) -> Size {
    let has_child_modules = module.iter().any(|e| e.parts.len() > depth + 1);
    if !has_child_modules || no_split.matches(path) {
        return sum(module);
    }
    let mut largest = Size::default();
    for child in runs(module, depth) {
        if child.iter().all(|e| e.parts.len() == depth + 1) {
            continue;
        }
        let len = path.len();
        path.push('.');
        path.push_str(child[0].parts[depth]);
        let candidate = largest_in(child, depth + 1, path, no_split);
        if candidate.bits > largest.bits {
            largest = candidate;
        }
        path.truncate(len);
    }
    largest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_split_patterns_match_suffixes() {
        let ns = NoSplit {
            patterns: vec!["layers.#", "embeddings"],
        };
        assert!(ns.matches("layers.0"));
        assert!(ns.matches("model.layers.12"));
        assert!(!ns.matches("layers"));
        assert!(!ns.matches("layers.x"));
        assert!(ns.matches("bert.embeddings"));
        assert!(!ns.matches("embeddings.word"));
    }

    #[test]
    fn direct_tensors_of_expanded_modules_are_not_layers() {
        // `a` has a big direct tensor and one small child module: accelerate only looks at `a.b`.
        let tensors = vec![
            Tensor::new("a.big", &[1000]),
            Tensor::new("a.b.w", &[10]),
            Tensor::new("c", &[20]),
        ];
        let sizes = maximum_sizes(&tensors, &NoSplit::default());
        assert_eq!(sizes.total.value, 4.0 * 1030.0);
        assert_eq!(sizes.largest_layer.value, 80.0);
        let sizes = maximum_sizes(
            &tensors,
            &NoSplit {
                patterns: vec!["a"],
            },
        );
        assert_eq!(sizes.largest_layer.value, 4040.0);
    }

    #[test]
    fn integers_keep_their_size_and_bools_make_floats() {
        let tensors = vec![
            Tensor::buffer("ids", DType::I64, &[1, 512]),
            Tensor {
                name: "w".into(),
                dtype: DType::BF16,
                numel: 10,
                rows: 10,
                buffer: false,
                matmul: false,
            },
        ];
        let sizes = maximum_sizes(&tensors, &NoSplit::default());
        assert_eq!(sizes.total, Bytes::int(4096 + 40));
        let with_bool = vec![Tensor::buffer("mask", DType::Bool, &[12])];
        let sizes = maximum_sizes(&with_bool, &NoSplit::default());
        assert_eq!(sizes.total.value, 1.5);
        assert!(sizes.total.is_float);
    }
}
