//! Weight bytes of a quantized model as transformers loads it from a `quantization_config`: which
//! tensors a quantizer replaces (the decoder layers' linear weights; embeddings, norms and the LM
//! head stay in the compute dtype, transformers' `modules_to_not_convert` default) and what each
//! scheme stores per weight.

use serde_json::{Map, Value};

use super::tensors::Tensor;

/// A quantization scheme, with what it stores per weight of a linear layer [out, in].
#[derive(Debug, Clone, PartialEq)]
pub enum Scheme {
    /// bitsandbytes 4-bit (nf4/fp4): two weights per byte, an fp32 absmax per 64-weight block,
    /// or with double quantization an 8-bit absmax plus an fp32 one per 256 blocks
    /// (bitsandbytes/functional.py::quantize_4bit).
    Bnb4 { double_quant: bool },
    /// bitsandbytes LLM.int8(): one byte per weight and an fp32 scale per output row (`SCB`).
    Bnb8,
    /// GPTQ: `bits`-bit weights packed in int32 `qweight`, per group of `group_size` input rows an
    /// fp16 scale and a packed zero point per output column, and an int32 `g_idx` per input row.
    Gptq { bits: u64, group_size: u64 },
    /// AWQ: as GPTQ without `g_idx`.
    Awq { bits: u64, group_size: u64 },
    /// FP8 (DeepSeek-V3 style): one byte per weight and an fp32 scale per block.
    Fp8 { block: (u64, u64) },
}

impl Scheme {
    pub fn of(q: &Map<String, Value>) -> Option<Scheme> {
        let uint = |k: &str, d: u64| q.get(k).and_then(Value::as_u64).unwrap_or(d);
        let flag = |k: &str| q.get(k).and_then(Value::as_bool).unwrap_or(false);
        let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("");
        Some(match method {
            "bitsandbytes" | "" if flag("load_in_4bit") => Scheme::Bnb4 {
                double_quant: flag("bnb_4bit_use_double_quant"),
            },
            "bitsandbytes" | "" if flag("load_in_8bit") => Scheme::Bnb8,
            "gptq" => Scheme::Gptq {
                bits: uint("bits", 4),
                group_size: group(q),
            },
            "awq" => Scheme::Awq {
                bits: uint("bits", 4),
                group_size: group(q),
            },
            "fp8" => {
                let block = q
                    .get("weight_block_size")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_u64).collect::<Vec<_>>())
                    .filter(|a| a.len() == 2)
                    .map_or((0, 0), |a| (a[0], a[1]));
                Scheme::Fp8 { block }
            }
            _ => return None,
        })
    }

    /// Bytes of `t` under this scheme, or None when it is not quantized.
    pub fn bytes(&self, t: &Tensor) -> Option<f64> {
        if !is_quantized_linear(t) {
            return None;
        }
        let out = t.rows as f64;
        let numel = t.numel as f64;
        let inp = numel / out;
        Some(match *self {
            Scheme::Bnb4 { double_quant } => {
                let blocks = (t.numel.div_ceil(64)) as f64;
                let absmax = if double_quant {
                    blocks + 4.0 * (t.numel.div_ceil(64 * 256)) as f64
                } else {
                    4.0 * blocks
                };
                (t.numel.div_ceil(2)) as f64 + absmax
            }
            Scheme::Bnb8 => numel + 4.0 * out,
            Scheme::Gptq { bits, group_size } => {
                let groups = (inp as u64).div_ceil(group_size.max(1)) as f64;
                numel * bits as f64 / 8.0 + groups * out * (2.0 + bits as f64 / 8.0) + 4.0 * inp
            }
            Scheme::Awq { bits, group_size } => {
                let groups = (inp as u64).div_ceil(group_size.max(1)) as f64;
                numel * bits as f64 / 8.0 + groups * out * (2.0 + bits as f64 / 8.0)
            }
            Scheme::Fp8 { block: (bo, bi) } => {
                let scales = if bo == 0 || bi == 0 {
                    1.0
                } else {
                    ((t.rows.div_ceil(bo)) * ((inp as u64).div_ceil(bi))) as f64
                };
                numel + 4.0 * scales
            }
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

/// A linear weight inside the repeated blocks: two dimensions larger than one, under a numbered
/// layer list, not a norm and not an embedding.
fn is_quantized_linear(t: &Tensor) -> bool {
    let in_layers =
        t.name.split('.').collect::<Vec<_>>().windows(2).any(|w| {
            matches!(w[0], "layers" | "h" | "block" | "layer") && w[1].parse::<u64>().is_ok()
        });
    !t.buffer
        && in_layers
        && t.name.ends_with(".weight")
        && t.rows > 1
        && t.numel / t.rows.max(1) > 1
        && !t.name.contains("norm")
        && !t.name.contains("embed")
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
        assert_eq!(
            nf4.as_ref().and_then(|s| s.bytes(&w)),
            Some(n / 2.0 + 4.0 * n / 64.0)
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
        // Embeddings, norms and the LM head are not converted.
        for name in [
            "embed_tokens.weight",
            "layers.0.input_layernorm.weight",
            "lm_head.weight",
        ] {
            let t = Tensor::new(name, &[4096, 4096]);
            assert_eq!(gptq.as_ref().and_then(|s| s.bytes(&t)), None, "{name}");
        }
    }
}
