//! Weight bytes of a quantized model as transformers loads it from a `quantization_config`: which
//! tensors a quantizer replaces and what each scheme stores per weight. bitsandbytes and the FP8
//! quantizers replace every linear layer but the LM head (transformers' `get_keys_to_not_convert`)
//! and the config's `llm_int8_skip_modules` / `modules_to_not_convert`; GPTQ and AWQ quantize the
//! linear layers of the language model's blocks. Embeddings, norms, convolutions and the LM head
//! stay in the compute dtype.

use serde_json::{Map, Value};

use super::tensors::Tensor;

/// What a scheme stores per weight of a linear layer [out, in].
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// bitsandbytes 4-bit (nf4/fp4), as a pre-quantized checkpoint loads
    /// (bitsandbytes/functional.py::QuantState.from_dict): the weights packed two per byte into
    /// `storage`-byte elements (bnb_4bit_quant_storage), an fp32 absmax per 64-weight block and
    /// the 16-entry fp32 quant map; with double quantization the absmax in 8 bits, plus an fp32
    /// absmax per 256 blocks, the 256-entry fp32 nested quant map and an fp32 offset.
    Bnb4 { double_quant: bool, storage: u64 },
    /// bitsandbytes LLM.int8(): one byte per weight and an fp32 scale per output row (`SCB`).
    Bnb8,
    /// GPTQ: `bits`-bit weights packed in int32 `qweight`, per group of `group_size` input rows an
    /// fp16 scale and a packed zero point per output column, and an int32 `g_idx` per input row.
    Gptq { bits: u64, group_size: u64 },
    /// AWQ: as GPTQ without `g_idx`.
    Awq { bits: u64, group_size: u64 },
    /// transformers' FP8Linear (`quant_method: fp8`): one byte per weight and a `weight_scale_inv`
    /// per `weight_block_size` block (one for the whole tensor without blocks), fp32 or, with
    /// `scale_fmt: ue8m0`, one byte; `activation_scheme: static` adds an fp32 activation scale.
    Fp8 {
        block: Option<(u64, u64)>,
        scale_bytes: u64,
        static_activation: bool,
    },
    /// FbgemmFp8Linear: one byte per weight, an fp32 scale per output row and the fp32
    /// `input_scale_ub` buffer.
    FbgemmFp8,
}

/// A quantization scheme and the modules it leaves alone.
#[derive(Debug, Clone, PartialEq)]
pub struct Scheme {
    pub kind: Kind,
    /// Module names or suffixes not converted: the config's skip list, which replaces
    /// transformers' default (the LM head) rather than adding to it.
    skip: Option<Vec<String>>,
}

impl Scheme {
    pub fn of(q: &Map<String, Value>) -> Option<Scheme> {
        let uint = |k: &str, d: u64| q.get(k).and_then(Value::as_u64).unwrap_or(d);
        let flag = |k: &str| q.get(k).and_then(Value::as_bool).unwrap_or(false);
        let text = |k: &str| q.get(k).and_then(Value::as_str).unwrap_or("");
        let method = text("quant_method");
        let kind = match method {
            "bitsandbytes" | "" if flag("load_in_4bit") => Kind::Bnb4 {
                double_quant: flag("bnb_4bit_use_double_quant"),
                storage: match text("bnb_4bit_quant_storage") {
                    "float16" | "bfloat16" | "int16" => 2,
                    "float32" | "int32" => 4,
                    _ => 1,
                },
            },
            "bitsandbytes" | "" if flag("load_in_8bit") => Kind::Bnb8,
            "gptq" => Kind::Gptq {
                bits: uint("bits", 4),
                group_size: group(q),
            },
            "awq" => Kind::Awq {
                bits: uint("bits", 4),
                group_size: group(q),
            },
            "fp8" => Kind::Fp8 {
                // FineGrainedFP8Config: blocks of 128 x 128 unless the config says otherwise;
                // an explicit null means one scale per tensor.
                block: match q.get("weight_block_size") {
                    None => Some((128, 128)),
                    Some(v) => v
                        .as_array()
                        .map(|a| a.iter().filter_map(Value::as_u64).collect::<Vec<_>>())
                        .filter(|a| a.len() == 2 && a[0] > 0 && a[1] > 0)
                        .map(|a| (a[0], a[1])),
                },
                scale_bytes: if text("scale_fmt") == "ue8m0" { 1 } else { 4 },
                static_activation: text("activation_scheme").eq_ignore_ascii_case("static"),
            },
            "fbgemm_fp8" => Kind::FbgemmFp8,
            _ => return None,
        };
        let skip = [
            "llm_int8_skip_modules",
            "modules_to_not_convert",
            "ignored_layers",
        ]
        .iter()
        .find_map(|k| q.get(*k).and_then(Value::as_array))
        .map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        });
        Some(Scheme { kind, skip })
    }

    /// Bytes of `t` under this scheme, or None when it is not quantized.
    pub fn bytes(&self, t: &Tensor) -> Option<f64> {
        let blocks_only = matches!(self.kind, Kind::Gptq { .. } | Kind::Awq { .. });
        if !is_linear_weight(t) || (blocks_only && !in_language_blocks(&t.name)) {
            return None;
        }
        let module = t.name.strip_suffix(".weight").unwrap_or(&t.name);
        // torch's MultiheadAttention (SigLIP's pooling head) projects through a Linear subclass,
        // which the quantizers leave alone (they match `type(module) is nn.Linear`); FP8 leaves
        // GPT-2's Conv1D too, bitsandbytes converts it.
        let fp8 = matches!(self.kind, Kind::Fp8 { .. } | Kind::FbgemmFp8);
        let last = module.rsplit('.').next().unwrap_or("");
        if module.ends_with("head.attention.out_proj")
            || (fp8 && matches!(last, "c_attn" | "c_proj" | "c_fc"))
        {
            return None;
        }
        let kept = match &self.skip {
            Some(skip) => skip.iter().any(|s| skipped(module, s)),
            None => module == "lm_head",
        };
        if kept || (blocks_only && module == "lm_head") {
            return None;
        }
        let rows = t.rows;
        let cols = t.numel / rows.max(1);
        // GPT-2's Conv1D stores its weight (in, out), the transpose of nn.Linear's (out, in);
        // bitsandbytes reads its features that way round too (transformers' integrations/bitsandbytes.py).
        let (out, inp) = if matches!(last, "c_attn" | "c_proj" | "c_fc") {
            (cols, rows)
        } else {
            (rows, cols)
        };
        let (out, inp, numel) = (out as f64, inp as f64, t.numel as f64);
        Some(match self.kind {
            Kind::Bnb4 {
                double_quant,
                storage,
            } => {
                let packed = ((t.numel + 1) / (2 * storage)) * storage;
                let blocks = t.numel.div_ceil(64);
                let absmax = if double_quant {
                    blocks + 4 * blocks.div_ceil(256) + 4 * 256 + 4
                } else {
                    4 * blocks
                };
                (packed + absmax + 4 * 16) as f64
            }
            Kind::Bnb8 => numel + 4.0 * out,
            Kind::Gptq { bits, group_size } => {
                let groups = cols.div_ceil(group_size.max(1)) as f64;
                numel * bits as f64 / 8.0 + groups * out * (2.0 + bits as f64 / 8.0) + 4.0 * inp
            }
            Kind::Awq { bits, group_size } => {
                let groups = cols.div_ceil(group_size.max(1)) as f64;
                numel * bits as f64 / 8.0 + groups * out * (2.0 + bits as f64 / 8.0)
            }
            Kind::Fp8 {
                block,
                scale_bytes,
                static_activation,
            } => {
                let scales = match block {
                    Some((bo, bi)) => (rows.div_ceil(bo) * cols.div_ceil(bi)) as f64,
                    // Without blocks, one fp32 scale for the tensor.
                    None => 1.0,
                };
                let scale_bytes = if block.is_some() { scale_bytes } else { 4 };
                numel + scale_bytes as f64 * scales + if static_activation { 4.0 } else { 0.0 }
            }
            Kind::FbgemmFp8 => numel + 4.0 * out + 4.0,
        })
    }
}

fn group(q: &Map<String, Value>) -> u64 {
    // GPTQ's group_size -1 means one group over all input rows; AWQ spells it q_group_size too.
    match q
        .get("group_size")
        .or_else(|| q.get("q_group_size"))
        .and_then(Value::as_i64)
    {
        Some(g) if g > 0 => g as u64,
        Some(_) => u64::MAX,
        None => 128,
    }
}

/// transformers' `should_convert_module` for a literal pattern: the module path starts with it at
/// a component boundary (the causal LM's paths carry a `model.` prefix that the base model's lack),
/// or ends with it.
fn skipped(module: &str, pattern: &str) -> bool {
    let starts = |pattern: &str| {
        module
            .strip_prefix(pattern)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    };
    starts(pattern)
        || pattern.strip_prefix("model.").is_some_and(starts)
        || module.ends_with(pattern)
}

/// The weight of a linear layer (torch's `nn.Linear`, GPT-2's `Conv1D`): a parameter named
/// `*.weight` with at least two columns that is not an embedding, a norm or a convolution over
/// patches.
fn is_linear_weight(t: &Tensor) -> bool {
    let n = t.name.as_str();
    !t.buffer
        && n.ends_with(".weight")
        && t.numel / t.rows.max(1) > 1
        && !n.contains("norm")
        && !n.contains("embed")
        && !n.contains("relative_attention_bias")
        && !matches!(n, "wte.weight" | "wpe.weight" | "shared.weight")
}

/// Inside a numbered block (`layers.N`, `h.N`, `block.N`, `layer.N`) of the language model, not of
/// a vision tower: what GPTQ's `block_name_to_quantize` and AWQ cover.
fn in_language_blocks(name: &str) -> bool {
    let parts: Vec<&str> = name.split('.').collect();
    !matches!(parts.first(), Some(&"vision_tower") | Some(&"visual"))
        && parts.windows(2).any(|w| {
            matches!(w[0], "layers" | "h" | "block" | "layer") && w[1].parse::<u64>().is_ok()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_per_scheme_by_hand() {
        let w = Tensor::new("layers.0.self_attn.q_proj.weight", &[4096, 4096]);
        let n = 4096.0 * 4096.0;
        let q = |v: Value| Scheme::of(v.as_object().expect("object"));
        let gptq = q(serde_json::json!({"quant_method":"gptq","bits":4,"group_size":128}));
        // qweight n/2, 32 groups x 4096 columns x (fp16 scale + 4-bit zero), g_idx 4096 x int32.
        assert_eq!(
            gptq.as_ref().and_then(|s| s.bytes(&w)),
            Some(n / 2.0 + 32.0 * 4096.0 * 2.5 + 4.0 * 4096.0)
        );
        let awq = q(serde_json::json!({"quant_method":"awq","bits":4,"group_size":128}));
        assert_eq!(
            awq.as_ref().and_then(|s| s.bytes(&w)),
            Some(n / 2.0 + 32.0 * 4096.0 * 2.5)
        );
        let nf4 = q(serde_json::json!({"quant_method":"bitsandbytes","load_in_4bit":true}));
        // Packed weights, an fp32 absmax per 64 weights, the 16-entry fp32 quant map.
        assert_eq!(
            nf4.as_ref().and_then(|s| s.bytes(&w)),
            Some(n / 2.0 + 4.0 * n / 64.0 + 64.0)
        );
        let int8 = q(serde_json::json!({"quant_method":"bitsandbytes","load_in_8bit":true}));
        assert_eq!(
            int8.as_ref().and_then(|s| s.bytes(&w)),
            Some(n + 4.0 * 4096.0)
        );
        let fp8 = q(serde_json::json!({"quant_method":"fp8","weight_block_size":[128,128]}));
        assert_eq!(
            fp8.as_ref().and_then(|s| s.bytes(&w)),
            Some(n + 4.0 * 32.0 * 32.0)
        );
        // Double quantization: 8-bit absmax per 64 weights, an fp32 one per 256 blocks, the
        // 256-entry nested quant map and the offset; bf16 storage packs 4 weights per element.
        let dq = q(
            serde_json::json!({"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_use_double_quant":true,"bnb_4bit_quant_storage":"bfloat16"}),
        );
        assert_eq!(
            dq.as_ref().and_then(|s| s.bytes(&w)),
            Some(n / 2.0 + n / 64.0 + 4.0 * (n / 64.0 / 256.0) + 1024.0 + 4.0 + 64.0)
        );
        let odd = Tensor::new("layers.0.mlp.down_proj.weight", &[3, 7]);
        // 21 weights in bf16 storage: (21 + 1) / 4 = 5 elements of 2 bytes; 1 block.
        assert_eq!(
            dq.as_ref().and_then(|s| s.bytes(&odd)),
            Some(10.0 + 1.0 + 4.0 + 1024.0 + 4.0 + 64.0)
        );
        // Without weight_block_size: one fp32 scale; ue8m0 scales are one byte; static
        // activations add one fp32 scale.
        let fp8 = q(serde_json::json!({"quant_method":"fp8","weight_block_size":null}));
        assert_eq!(fp8.as_ref().and_then(|s| s.bytes(&w)), Some(n + 4.0));
        // FineGrainedFP8Config's default blocks are 128 x 128.
        let fp8 = q(serde_json::json!({"quant_method":"fp8"}));
        assert_eq!(
            fp8.as_ref().and_then(|s| s.bytes(&w)),
            Some(n + 4.0 * 32.0 * 32.0)
        );
        let fp8 = q(
            serde_json::json!({"quant_method":"fp8","weight_block_size":[128,128],"scale_fmt":"ue8m0","activation_scheme":"static"}),
        );
        assert_eq!(
            fp8.as_ref().and_then(|s| s.bytes(&w)),
            Some(n + 32.0 * 32.0 + 4.0)
        );
        let fbgemm = q(serde_json::json!({"quant_method":"fbgemm_fp8"}));
        assert_eq!(
            fbgemm.as_ref().and_then(|s| s.bytes(&w)),
            Some(n + 4.0 * 4096.0 + 4.0)
        );
        // bitsandbytes converts the vision tower's linear layers too, GPTQ only the language
        // model's blocks; a skip list leaves modules alone.
        let vision = Tensor::new("vision_tower.encoder.layers.0.mlp.fc1.weight", &[64, 32]);
        assert!(int8.as_ref().and_then(|s| s.bytes(&vision)).is_some());
        assert_eq!(gptq.as_ref().and_then(|s| s.bytes(&vision)), None);
        let skip = q(
            serde_json::json!({"quant_method":"bitsandbytes","load_in_8bit":true,"llm_int8_skip_modules":["vision_tower","mlp.down_proj"]}),
        );
        assert_eq!(skip.as_ref().and_then(|s| s.bytes(&vision)), None);
        assert_eq!(skip.as_ref().and_then(|s| s.bytes(&odd)), None);
        assert!(skip.as_ref().and_then(|s| s.bytes(&w)).is_some());
        // A skip list replaces the default one: the LM head is converted then.
        let head = Tensor::new("lm_head.weight", &[1000, 64]);
        assert_eq!(
            skip.as_ref().and_then(|s| s.bytes(&head)),
            Some(64_000.0 + 4000.0)
        );
        assert_eq!(int8.as_ref().and_then(|s| s.bytes(&head)), None);
        // Embeddings, norms and the LM head are not converted.
        for name in [
            "embed_tokens.weight",
            "layers.0.input_layernorm.weight",
            "lm_head.weight",
            "wte.weight",
        ] {
            let t = Tensor::new(name, &[4096, 4096]);
            assert_eq!(gptq.as_ref().and_then(|s| s.bytes(&t)), None, "{name}");
            assert_eq!(int8.as_ref().and_then(|s| s.bytes(&t)), None, "{name}");
        }
    }
}
