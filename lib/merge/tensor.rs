//! Tensors as they sit in a checkpoint: a dtype, a shape, and a strided view into one storage record of
//! a torch.save archive. This is what every reader produces and the writer consumes; reading the view
//! out (honouring storage offset, strides, byte order and a dtype cast) happens in `copy`.

use super::pickle::{Id, Node, Pickle};

/// The element types accel can write: every dtype safetensors 0.8 has a name for. Names are
/// safetensors' spellings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F64,
    F32,
    F16,
    BF16,
    I64,
    I32,
    I16,
    I8,
    U8,
    U16,
    U32,
    U64,
    Bool,
    F8E4M3,
    F8E5M2,
    F8E8M0,
    F8E4M3Fnuz,
    F8E5M2Fnuz,
    /// `torch.float4_e2m1fn_x2`: one byte holds two 4-bit values; torch's shape counts bytes,
    /// safetensors' (`F4`) counts values, so its last dimension is twice torch's.
    F4X2,
    C64,
}

/// Every dtype accel writes, in the order [`DType::from_safetensors`] searches.
const ALL: [DType; 20] = [
    DType::F64,
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::I32,
    DType::I16,
    DType::I8,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
    DType::Bool,
    DType::F8E4M3,
    DType::F8E5M2,
    DType::F8E8M0,
    DType::F8E4M3Fnuz,
    DType::F8E5M2Fnuz,
    DType::F4X2,
    DType::C64,
];

impl DType {
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 | DType::U64 | DType::C64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I8
            | DType::U8
            | DType::Bool
            | DType::F8E4M3
            | DType::F8E5M2
            | DType::F8E8M0
            | DType::F8E4M3Fnuz
            | DType::F8E5M2Fnuz
            | DType::F4X2 => 1,
        }
    }
    pub fn safetensors(self) -> &'static str {
        match self {
            DType::F64 => "F64",
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::I64 => "I64",
            DType::I32 => "I32",
            DType::I16 => "I16",
            DType::I8 => "I8",
            DType::U8 => "U8",
            DType::U16 => "U16",
            DType::U32 => "U32",
            DType::U64 => "U64",
            DType::Bool => "BOOL",
            DType::F8E4M3 => "F8_E4M3",
            DType::F8E5M2 => "F8_E5M2",
            DType::F8E8M0 => "F8_E8M0",
            DType::F8E4M3Fnuz => "F8_E4M3FNUZ",
            DType::F8E5M2Fnuz => "F8_E5M2FNUZ",
            DType::F4X2 => "F4",
            DType::C64 => "C64",
        }
    }
    pub fn from_safetensors(s: &str) -> Option<DType> {
        ALL.into_iter().find(|d| d.safetensors() == s)
    }
    /// The shape a safetensors header gives a tensor of torch shape `shape` (safetensors' Python
    /// writer doubles the last dimension of a float4_e2m1fn_x2 tensor: it counts 4-bit values).
    pub fn safetensors_shape(self, shape: &[u64]) -> Vec<u64> {
        let mut s = shape.to_vec();
        if self == DType::F4X2 {
            if let Some(last) = s.last_mut() {
                *last *= 2;
            }
        }
        s
    }
    /// The `torch.<name>` of this dtype.
    pub fn torch(self) -> &'static str {
        match self {
            DType::F64 => "float64",
            DType::F32 => "float32",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I64 => "int64",
            DType::I32 => "int32",
            DType::I16 => "int16",
            DType::I8 => "int8",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::Bool => "bool",
            DType::F8E4M3 => "float8_e4m3fn",
            DType::F8E5M2 => "float8_e5m2",
            DType::F8E8M0 => "float8_e8m0fnu",
            DType::F8E4M3Fnuz => "float8_e4m3fnuz",
            DType::F8E5M2Fnuz => "float8_e5m2fnuz",
            DType::F4X2 => "float4_e2m1fn_x2",
            DType::C64 => "complex64",
        }
    }
    /// The legacy `torch.<X>Storage` class of this dtype, if it has one.
    pub fn storage_class(self) -> Option<&'static str> {
        Some(match self {
            DType::F64 => "DoubleStorage",
            DType::F32 => "FloatStorage",
            DType::F16 => "HalfStorage",
            DType::BF16 => "BFloat16Storage",
            DType::I64 => "LongStorage",
            DType::I32 => "IntStorage",
            DType::I16 => "ShortStorage",
            DType::I8 => "CharStorage",
            DType::U8 => "ByteStorage",
            DType::Bool => "BoolStorage",
            DType::C64 => "ComplexFloatStorage",
            _ => return None,
        })
    }
    /// Parses a `torch.<name>` dtype; `Err` carries the name of a dtype torch has and we do not.
    pub fn from_torch(name: &str) -> Result<DType, String> {
        Ok(match name {
            "float64" | "double" => DType::F64,
            "float32" | "float" => DType::F32,
            "float16" | "half" => DType::F16,
            "bfloat16" => DType::BF16,
            "int64" | "long" => DType::I64,
            "int32" | "int" => DType::I32,
            "int16" | "short" => DType::I16,
            "int8" => DType::I8,
            "uint8" => DType::U8,
            "uint16" => DType::U16,
            "uint32" => DType::U32,
            "uint64" => DType::U64,
            "bool" => DType::Bool,
            "float8_e4m3fn" => DType::F8E4M3,
            "float8_e5m2" => DType::F8E5M2,
            "float8_e8m0fnu" => DType::F8E8M0,
            "float8_e4m3fnuz" => DType::F8E4M3Fnuz,
            "float8_e5m2fnuz" => DType::F8E5M2Fnuz,
            "float4_e2m1fn_x2" => DType::F4X2,
            "complex64" | "cfloat" => DType::C64,
            other => return Err(other.to_owned()),
        })
    }
    fn from_storage_class(name: &str) -> Result<Option<DType>, String> {
        let Some(stem) = name.strip_suffix("Storage") else {
            return Err(name.to_owned());
        };
        Ok(Some(match stem {
            "Double" => DType::F64,
            "Float" => DType::F32,
            "Half" => DType::F16,
            "BFloat16" => DType::BF16,
            "Long" => DType::I64,
            "Int" => DType::I32,
            "Short" => DType::I16,
            "Char" => DType::I8,
            "Byte" => DType::U8,
            "Bool" => DType::Bool,
            "ComplexFloat" => DType::C64,
            "Untyped" => return Ok(None),
            _ => return Err(name.to_owned()),
        }))
    }
    pub fn is_float(self) -> bool {
        matches!(self, DType::F64 | DType::F32 | DType::F16 | DType::BF16)
    }
}

/// A tensor inside a torch.save pickle: which storage record, and the view over it.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorRef {
    pub dtype: DType,
    /// The `data/<key>` record name.
    pub key: String,
    /// Offset into the storage, in elements.
    pub offset: u64,
    pub shape: Vec<u64>,
    pub strides: Vec<u64>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TensorError {
    #[error("unsupported dtype `torch.{0}`")]
    Dtype(String),
    #[error("this is not a tensor pickle: {0}")]
    NotATensor(&'static str),
}

impl TensorRef {
    pub fn numel(&self) -> u64 {
        self.shape.iter().product()
    }
    /// How many storage elements the view reaches (0 if the view is empty).
    pub fn extent(&self) -> Option<u64> {
        if self.shape.contains(&0) {
            return Some(0);
        }
        let mut last = self.offset;
        for (&n, &s) in self.shape.iter().zip(&self.strides) {
            last = last.checked_add((n - 1).checked_mul(s)?)?;
        }
        last.checked_add(1)
    }
    /// Reads a tensor value out of a torch.save pickle node (a `_rebuild_*` call).
    pub fn from_pickle(p: &Pickle, id: Id) -> Result<TensorRef, TensorError> {
        Self::from_pickle_at(p, id, 0)
    }

    fn from_pickle_at(p: &Pickle, id: Id, depth: u32) -> Result<TensorRef, TensorError> {
        use TensorError::NotATensor;
        // Parameters wrap tensors once; a deeper chain is a crafted file trying to exhaust the stack.
        if depth > 8 {
            return Err(NotATensor("tensor wrappers nested too deeply"));
        }
        let Node::Object { callable, args, .. } = p.node(id) else {
            return Err(NotATensor("the value is not a rebuilt tensor"));
        };
        let func = p
            .global(*callable)
            .ok_or(NotATensor("no rebuild function"))?;
        let args = p.seq(*args).ok_or(NotATensor("no argument tuple"))?;
        match func {
            ("torch._utils", "_rebuild_parameter")
            | ("torch._utils", "_rebuild_parameter_with_state")
            | ("torch.nn.parameter", "Parameter") => {
                let inner = *args.first().ok_or(NotATensor("empty parameter"))?;
                Self::from_pickle_at(p, inner, depth + 1)
            }
            ("torch._tensor", "_rebuild_from_type_v2") => {
                // (func, cls, args, state): evaluate func(*args), the plain tensor.
                let inner_fn = *args
                    .first()
                    .ok_or(NotATensor("empty _rebuild_from_type_v2"))?;
                let inner_args = *args
                    .get(2)
                    .ok_or(NotATensor("short _rebuild_from_type_v2"))?;
                match p.global(inner_fn) {
                    Some((
                        "torch._utils",
                        name @ ("_rebuild_tensor_v2" | "_rebuild_tensor_v3"),
                    )) => {
                        let a = p.seq(inner_args).ok_or(NotATensor("no argument tuple"))?;
                        Self::from_rebuild(p, a, Some(name))
                    }
                    _ => Err(NotATensor("an unknown tensor subclass")),
                }
            }
            ("torch._utils", name @ ("_rebuild_tensor_v2" | "_rebuild_tensor_v3")) => {
                Self::from_rebuild(p, args, Some(name))
            }
            _ => Err(NotATensor("an unsupported rebuild function")),
        }
    }

    fn from_rebuild(p: &Pickle, a: &[Id], func: Option<&str>) -> Result<TensorRef, TensorError> {
        use TensorError::NotATensor;
        if a.len() < 4 {
            return Err(NotATensor("short rebuild arguments"));
        }
        let Node::Persistent(pid) = p.node(a[0]) else {
            return Err(NotATensor("the storage is not a persistent reference"));
        };
        let pid = p
            .seq(*pid)
            .ok_or(NotATensor("a malformed storage reference"))?;
        if pid.len() < 5 || p.as_str(pid[0]) != Some("storage") {
            return Err(NotATensor("a malformed storage reference"));
        }
        let class = p.global(pid[1]).ok_or(NotATensor("no storage class"))?;
        let key = p
            .as_str(pid[2])
            .ok_or(NotATensor("a storage key that is not a string"))?
            .to_owned();
        let mut dtype = DType::from_storage_class(class.1).map_err(TensorError::Dtype)?;
        if func == Some("_rebuild_tensor_v3") {
            let d = a
                .get(6)
                .and_then(|&d| p.global(d))
                .ok_or(NotATensor("no dtype"))?;
            dtype = Some(DType::from_torch(d.1).map_err(TensorError::Dtype)?);
        }
        let dtype = dtype.ok_or(NotATensor("an untyped storage without a dtype"))?;
        let offset = p
            .as_int(a[1])
            .and_then(|v| u64::try_from(v).ok())
            .ok_or(NotATensor("a bad storage offset"))?;
        let shape = p.ints(a[2]).ok_or(NotATensor("a bad size"))?;
        let strides = p.ints(a[3]).ok_or(NotATensor("a bad stride"))?;
        if shape.len() != strides.len() {
            return Err(NotATensor("size and stride differ in length"));
        }
        let to_u = |v: Vec<i64>| -> Result<Vec<u64>, TensorError> {
            v.into_iter()
                .map(|x| u64::try_from(x).map_err(|_| NotATensor("a negative size or stride")))
                .collect()
        };
        Ok(TensorRef {
            dtype,
            key,
            offset,
            shape: to_u(shape)?,
            strides: to_u(strides)?,
        })
    }
}

/// Row-major strides of `shape`, in elements.
pub fn contiguous_strides(shape: &[u64]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1].saturating_mul(shape[d + 1]);
    }
    s
}
