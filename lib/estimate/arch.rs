//! Model families by formula: from a `config.json`, the exact tensor list (names, shapes, dtypes,
//! buffers included) of the model accelerate sizes — transformers' `AutoModel` (the base model, no task
//! head) built in float32 under `init_empty_weights` — plus the dimensions the per-GPU estimates need.
//! Shapes follow transformers 5's modelling code; the exactness tests compare against it.

use serde_json::{Map, Value};

use super::error::EstimateError;
use super::tensors::{DType, NoSplit, Tensor};

/// The families built by formula, as `model_type` spells them.
pub const FAMILIES: &[&str] = &[
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "phi3",
    "gpt2",
    "gpt_neox",
    "bert",
    "t5",
];

/// Sizes past these are not models but typos or overflow probes; refusing them keeps the work
/// bounded (a formula builds one entry per tensor) and every product below within u64.
const MAX_LAYERS: u64 = 100_000;
const MAX_DIM: u64 = 1 << 24;

/// What the activation and KV-cache formulas need to know about a transformer.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Dims {
    pub model_type: String,
    pub hidden_size: u64,
    /// Layers that hold a KV cache and activations (encoder plus decoder layers for T5).
    pub num_layers: u64,
    pub num_attention_heads: u64,
    pub num_key_value_heads: u64,
    pub head_dim: u64,
    pub vocab_size: u64,
    /// The dense MLP's intermediate size (a mixture of experts: its shared expert's, or 0).
    pub mlp_size: u64,
    /// A mixture of experts: experts per token x an expert's intermediate size.
    pub expert_mlp_size: u64,
    /// A mixture of experts: experts each token is routed to.
    pub experts_per_token: u64,
    /// A gated (SwiGLU) MLP rather than GPT-2's up-activation-down.
    pub gated_mlp: bool,
    /// Routed experts (0: a dense MLP).
    pub experts: u64,
    /// The attention drops out probabilities in training (GPT-2's attn_pdrop): SDPA then stores the
    /// attention matrix.
    pub attention_dropout: bool,
    /// Values cached per token per layer: 2 x kv heads x head dim, or for multi-head latent attention
    /// (DeepSeek-V2/V3) the compressed latent, kv_lora_rank + qk_rope_head_dim.
    pub kv_per_token: u64,
}

/// A config.json, read.
pub struct Config {
    map: Map<String, Value>,
    pub model_type: String,
    /// The file it came from, for messages.
    pub source: String,
}

impl Config {
    pub fn parse(text: &str, source: &str) -> Result<Config, EstimateError> {
        let value: Value = serde_json::from_str(text).map_err(|e| EstimateError::BadConfig {
            path: source.to_string(),
            reason: e.to_string(),
        })?;
        let Value::Object(map) = value else {
            return Err(EstimateError::BadConfig {
                path: source.to_string(),
                reason: "not a JSON object".into(),
            });
        };
        let model_type = map
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        Ok(Config {
            map,
            model_type,
            source: source.to_string(),
        })
    }

    /// The language model's config: the top level, or `text_config` where a multimodal config
    /// nests it (Llava, Gemma 3, Qwen2-VL...).
    pub fn text(&self) -> Option<Config> {
        let Some(Value::Object(map)) = self.get("text_config") else {
            return None;
        };
        Some(Config {
            model_type: map
                .get("model_type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            map: map.clone(),
            source: format!("{} (text_config)", self.source),
        })
    }

    /// The class accelerate builds when `auto_map` names one: its first `AutoModelFor*` key
    /// (accelerate/commands/estimate.py::create_empty_model).
    pub fn auto_model_for(&self) -> Option<&str> {
        self.get("auto_map")
            .and_then(Value::as_object)?
            .keys()
            .find(|k| k.starts_with("AutoModelFor"))
            .map(String::as_str)
    }

    /// Whether the output embedding shares the input embedding's weight (transformers'
    /// `tie_word_embeddings`, whose default differs per family).
    pub fn tied_embeddings(&self, default: bool) -> bool {
        self.flag("tie_word_embeddings", default)
    }

    pub fn quantization(&self) -> Option<&Map<String, Value>> {
        self.get("quantization_config").and_then(Value::as_object)
    }

    pub fn is_known(&self) -> bool {
        FAMILIES.contains(&self.model_type.as_str())
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// The first of `keys` that is set, else `default`, else an error naming the key.
    fn uint(&self, keys: &[&str], default: Option<u64>) -> Result<u64, EstimateError> {
        for key in keys {
            if let Some(v) = self.get(key) {
                let n = v.as_u64().ok_or_else(|| EstimateError::BadConfig {
                    path: self.source.clone(),
                    reason: format!("`{key}` is not a non-negative integer: {v}"),
                })?;
                let max = if key.contains("layer") {
                    MAX_LAYERS
                } else {
                    MAX_DIM
                };
                if n > max {
                    return Err(EstimateError::BadConfig {
                        path: self.source.clone(),
                        reason: format!("`{key}` is {n}; no model has more than {max}"),
                    });
                }
                return Ok(n);
            }
        }
        default.ok_or_else(|| EstimateError::BadConfig {
            path: self.source.clone(),
            reason: format!("`{}` is missing", keys[0]),
        })
    }

    pub fn flag(&self, key: &str, default: bool) -> bool {
        self.get(key).and_then(Value::as_bool).unwrap_or(default)
    }

    fn float(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(Value::as_f64)
    }

    /// `partial_rotary_factor` wherever transformers may find it (rope_parameters, rope_scaling, top
    /// level, GPT-NeoX's `rotary_pct`).
    fn partial_rotary_factor(&self, default: f64) -> f64 {
        for section in ["rope_parameters", "rope_scaling"] {
            if let Some(f) = self
                .get(section)
                .and_then(|s| s.get("partial_rotary_factor"))
                .and_then(Value::as_f64)
            {
                return f;
            }
        }
        self.float("partial_rotary_factor")
            .or_else(|| self.float("rotary_pct"))
            .unwrap_or(default)
    }

    fn uint_list(&self, key: &str) -> Vec<u64> {
        self.get(key)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default()
    }
}

/// The base model's tensors, its no-split modules and its dimensions.
pub struct Built {
    pub tensors: Vec<Tensor>,
    pub no_split: NoSplit,
    pub dims: Dims,
    /// The causal-LM head when it is a weight of its own (untied): what
    /// `AutoModelForCausalLM` adds to the base model, and what training updates.
    pub head: Vec<Tensor>,
}

struct Out(Vec<Tensor>);

impl Out {
    fn w(&mut self, name: String, shape: &[u64]) {
        self.0.push(Tensor::new(name, shape));
    }
    fn linear(&mut self, prefix: &str, inp: u64, out: u64, bias: bool) {
        self.w(format!("{prefix}.weight"), &[out, inp]);
        if bias {
            self.w(format!("{prefix}.bias"), &[out]);
        }
    }
    /// GPT-2's Conv1D (transformers/pytorch_utils.py): the weight is stored (in, out), the
    /// transpose of nn.Linear's; FSDP2 shards it on `in`.
    fn conv1d(&mut self, prefix: &str, inp: u64, out: u64) {
        self.w(format!("{prefix}.weight"), &[inp, out]);
        self.w(format!("{prefix}.bias"), &[out]);
    }
    fn norm(&mut self, prefix: &str, h: u64, bias: bool) {
        self.w(format!("{prefix}.weight"), &[h]);
        if bias {
            self.w(format!("{prefix}.bias"), &[h]);
        }
    }
    /// Rotary embeddings keep `inv_freq` and `original_inv_freq` (non-persistent, float32), one entry
    /// per pair of rotated dimensions.
    fn rotary(&mut self, prefix: &str, head_dim: u64, factor: f64) {
        let dim = (head_dim as f64 * factor) as u64;
        let n = dim.div_ceil(2);
        self.0.push(Tensor::buffer(
            format!("{prefix}.inv_freq"),
            DType::F32,
            &[n],
        ));
        self.0.push(Tensor::buffer(
            format!("{prefix}.original_inv_freq"),
            DType::F32,
            &[n],
        ));
    }
}

/// Builds the tensor list for a known family, or says the architecture is unknown. The base model,
/// as `AutoModel` builds it; with an `auto_map` naming `AutoModelForCausalLM` (Phi-3), the causal LM
/// that accelerate then builds instead.
pub fn build(config: &Config) -> Result<Built, EstimateError> {
    let mut built = build_base(config)?;
    let tensor_elements = built
        .tensors
        .iter()
        .chain(&built.head)
        .try_fold(0u64, |n, t| n.checked_add(t.numel));
    if tensor_elements.is_none() || built.tensors.iter().any(|t| t.numel == u64::MAX) {
        return Err(EstimateError::BadConfig {
            path: config.source.clone(),
            reason: "the sizes multiply past 2^64 elements".into(),
        });
    }
    if config.auto_model_for() == Some("AutoModelForCausalLM") {
        for t in &mut built.tensors {
            t.name.insert_str(0, "model.");
        }
        built.tensors.append(&mut built.head.clone());
    }
    Ok(built)
}

/// The untied LM head: `lm_head.weight` [vocab, hidden], no bias.
fn lm_head(c: &Config, tied_default: bool, v: u64, h: u64) -> Vec<Tensor> {
    if c.tied_embeddings(tied_default) {
        Vec::new()
    } else {
        vec![Tensor::new("lm_head.weight", &[v, h])]
    }
}

fn build_base(config: &Config) -> Result<Built, EstimateError> {
    match config.model_type.as_str() {
        "llama" | "mistral" | "mixtral" | "qwen2" | "qwen2_moe" | "qwen3" | "qwen3_moe"
        | "gemma" | "gemma2" | "phi3" => decoder(config),
        "gpt2" => gpt2(config),
        "gpt_neox" => gpt_neox(config),
        "bert" => bert(config),
        "t5" => t5(config),
        other => Err(EstimateError::UnknownArchitecture {
            model_type: other.to_string(),
        }),
    }
}

/// The Llama-shaped decoders: embeddings, N decoder layers (attention, gated MLP or MoE, RMS norms),
/// final norm, rotary buffers.
fn decoder(c: &Config) -> Result<Built, EstimateError> {
    let t = c.model_type.as_str();
    let v = c.uint(&["vocab_size"], None)?;
    let h = c.uint(&["hidden_size"], None)?;
    let layers = c.uint(&["num_hidden_layers"], None)?;
    let heads = c.uint(&["num_attention_heads"], None)?;
    let kv = c.uint(&["num_key_value_heads"], Some(heads))?;
    let default_head_dim = match t {
        "gemma" | "gemma2" => 256,
        "qwen3" => 128,
        _ => h / heads.max(1),
    };
    let hd = c.uint(&["head_dim"], Some(default_head_dim))?;
    let inter = c.uint(&["intermediate_size"], None)?;
    let (q_bias, o_bias) = match t {
        "qwen2" => (true, false),
        "qwen2_moe" => (c.flag("qkv_bias", true), false),
        "mistral" | "mixtral" | "phi3" => (false, false),
        _ => {
            let b = c.flag("attention_bias", false);
            (b, b)
        }
    };
    let mlp_bias = t == "llama" && c.flag("mlp_bias", false);
    let experts = match t {
        "mixtral" => c.uint(&["num_local_experts"], Some(8))?,
        "qwen2_moe" => c.uint(&["num_experts"], Some(60))?,
        "qwen3_moe" => c.uint(&["num_experts"], Some(128))?,
        _ => 0,
    };
    let moe_inter = match t {
        "mixtral" => inter,
        "qwen2_moe" => c.uint(&["moe_intermediate_size"], Some(1408))?,
        "qwen3_moe" => c.uint(&["moe_intermediate_size"], Some(768))?,
        _ => 0,
    };
    let sparse_step = c.uint(&["decoder_sparse_step"], Some(1))?.max(1);
    let mlp_only = c.uint_list("mlp_only_layers");

    let mut o = Out(Vec::new());
    o.w("embed_tokens.weight".into(), &[v, h]);
    if matches!(t, "gemma" | "gemma2") {
        o.0.push(Tensor::buffer("embed_tokens.embed_scale", DType::F32, &[]));
    }
    for i in 0..layers {
        let p = format!("layers.{i}");
        let a = format!("{p}.self_attn");
        if t == "phi3" {
            o.linear(&format!("{a}.o_proj"), heads * hd, h, false);
            o.linear(&format!("{a}.qkv_proj"), h, heads * hd + 2 * kv * hd, false);
        } else {
            o.linear(&format!("{a}.q_proj"), h, heads * hd, q_bias);
            o.linear(&format!("{a}.k_proj"), h, kv * hd, q_bias);
            o.linear(&format!("{a}.v_proj"), h, kv * hd, q_bias);
            o.linear(&format!("{a}.o_proj"), heads * hd, h, o_bias);
        }
        if matches!(t, "qwen3" | "qwen3_moe") {
            o.norm(&format!("{a}.q_norm"), hd, false);
            o.norm(&format!("{a}.k_norm"), hd, false);
        }
        let m = format!("{p}.mlp");
        let sparse = experts > 0
            && (t == "mixtral" || (!mlp_only.contains(&i) && (i + 1) % sparse_step == 0));
        if sparse {
            o.w(format!("{m}.gate.weight"), &[experts, h]);
            o.w(
                format!("{m}.experts.gate_up_proj"),
                &[experts, 2 * moe_inter, h],
            );
            o.w(format!("{m}.experts.down_proj"), &[experts, h, moe_inter]);
            if t == "qwen2_moe" {
                let s = c.uint(&["shared_expert_intermediate_size"], Some(5632))?;
                o.linear(&format!("{m}.shared_expert.gate_proj"), h, s, false);
                o.linear(&format!("{m}.shared_expert.up_proj"), h, s, false);
                o.linear(&format!("{m}.shared_expert.down_proj"), s, h, false);
                o.linear(&format!("{m}.shared_expert_gate"), h, 1, false);
            }
        } else if t == "phi3" {
            o.linear(&format!("{m}.gate_up_proj"), h, 2 * inter, false);
            o.linear(&format!("{m}.down_proj"), inter, h, false);
        } else {
            o.linear(&format!("{m}.gate_proj"), h, inter, mlp_bias);
            o.linear(&format!("{m}.up_proj"), h, inter, mlp_bias);
            o.linear(&format!("{m}.down_proj"), inter, h, mlp_bias);
        }
        o.norm(&format!("{p}.input_layernorm"), h, false);
        o.norm(&format!("{p}.post_attention_layernorm"), h, false);
        if t == "gemma2" {
            o.norm(&format!("{p}.pre_feedforward_layernorm"), h, false);
            o.norm(&format!("{p}.post_feedforward_layernorm"), h, false);
        }
    }
    o.norm("norm", h, false);
    o.rotary("rotary_emb", hd, c.partial_rotary_factor(1.0));
    let top_k = match t {
        "mixtral" => c.uint(&["num_experts_per_tok"], Some(2))?,
        "qwen2_moe" => c.uint(&["num_experts_per_tok"], Some(4))?,
        "qwen3_moe" => c.uint(&["num_experts_per_tok"], Some(8))?,
        _ => 0,
    };
    let mlp_size = match t {
        "qwen2_moe" => c.uint(&["shared_expert_intermediate_size"], Some(5632))?,
        _ if experts > 0 => 0,
        _ => inter,
    };
    Ok(Built {
        tensors: o.0,
        no_split: NoSplit {
            patterns: vec!["layers.#"],
        },
        dims: Dims {
            model_type: t.to_string(),
            hidden_size: h,
            num_layers: layers,
            num_attention_heads: heads,
            num_key_value_heads: kv,
            head_dim: hd,
            vocab_size: v,
            mlp_size,
            expert_mlp_size: top_k * moe_inter,
            experts_per_token: top_k,
            gated_mlp: true,
            experts,
            attention_dropout: c.float("attention_dropout").unwrap_or(0.0) > 0.0,
            kv_per_token: 2 * kv * hd,
        },
        head: lm_head(c, matches!(t, "gemma" | "gemma2"), v, h),
    })
}

fn gpt2(c: &Config) -> Result<Built, EstimateError> {
    let v = c.uint(&["vocab_size"], Some(50257))?;
    let h = c.uint(&["n_embd", "hidden_size"], Some(768))?;
    let layers = c.uint(&["n_layer", "num_hidden_layers"], Some(12))?;
    let heads = c.uint(&["n_head", "num_attention_heads"], Some(12))?;
    let positions = c.uint(&["n_positions", "max_position_embeddings"], Some(1024))?;
    let inner = c.uint(&["n_inner"], Some(4 * h))?;
    let mut o = Out(Vec::new());
    o.w("wte.weight".into(), &[v, h]);
    o.w("wpe.weight".into(), &[positions, h]);
    for i in 0..layers {
        let p = format!("h.{i}");
        o.norm(&format!("{p}.ln_1"), h, true);
        o.conv1d(&format!("{p}.attn.c_attn"), h, 3 * h);
        o.conv1d(&format!("{p}.attn.c_proj"), h, h);
        o.norm(&format!("{p}.ln_2"), h, true);
        o.conv1d(&format!("{p}.mlp.c_fc"), h, inner);
        o.conv1d(&format!("{p}.mlp.c_proj"), inner, h);
    }
    o.norm("ln_f", h, true);
    Ok(Built {
        tensors: o.0,
        no_split: NoSplit {
            patterns: vec!["h.#"],
        },
        dims: Dims {
            model_type: "gpt2".into(),
            hidden_size: h,
            num_layers: layers,
            num_attention_heads: heads,
            num_key_value_heads: heads,
            head_dim: h / heads.max(1),
            vocab_size: v,
            mlp_size: inner,
            expert_mlp_size: 0,
            experts_per_token: 0,
            gated_mlp: false,
            experts: 0,
            attention_dropout: c.float("attn_pdrop").unwrap_or(0.1) > 0.0,
            kv_per_token: 2 * h,
        },
        head: lm_head(c, true, v, h),
    })
}

fn gpt_neox(c: &Config) -> Result<Built, EstimateError> {
    let v = c.uint(&["vocab_size"], None)?;
    let h = c.uint(&["hidden_size"], None)?;
    let layers = c.uint(&["num_hidden_layers"], None)?;
    let heads = c.uint(&["num_attention_heads"], None)?;
    let inter = c.uint(&["intermediate_size"], None)?;
    let bias = c.flag("attention_bias", true);
    let hd = h / heads.max(1);
    let mut o = Out(Vec::new());
    o.w("embed_in.weight".into(), &[v, h]);
    for i in 0..layers {
        let p = format!("layers.{i}");
        o.norm(&format!("{p}.input_layernorm"), h, true);
        o.norm(&format!("{p}.post_attention_layernorm"), h, true);
        o.linear(&format!("{p}.attention.query_key_value"), h, 3 * h, bias);
        o.linear(&format!("{p}.attention.dense"), h, h, bias);
        o.linear(&format!("{p}.mlp.dense_h_to_4h"), h, inter, true);
        o.linear(&format!("{p}.mlp.dense_4h_to_h"), inter, h, true);
    }
    o.norm("final_layer_norm", h, true);
    o.rotary("rotary_emb", hd, c.partial_rotary_factor(0.25));
    Ok(Built {
        tensors: o.0,
        no_split: NoSplit {
            patterns: vec!["layers.#"],
        },
        dims: Dims {
            model_type: "gpt_neox".into(),
            hidden_size: h,
            num_layers: layers,
            num_attention_heads: heads,
            num_key_value_heads: heads,
            head_dim: hd,
            vocab_size: v,
            mlp_size: inter,
            expert_mlp_size: 0,
            experts_per_token: 0,
            gated_mlp: false,
            experts: 0,
            attention_dropout: c.float("attention_dropout").unwrap_or(0.0) > 0.0,
            kv_per_token: 2 * h,
        },
        head: if c.tied_embeddings(false) {
            Vec::new()
        } else {
            vec![Tensor::new("embed_out.weight", &[v, h])]
        },
    })
}

fn bert(c: &Config) -> Result<Built, EstimateError> {
    let v = c.uint(&["vocab_size"], Some(30522))?;
    let h = c.uint(&["hidden_size"], Some(768))?;
    let layers = c.uint(&["num_hidden_layers"], Some(12))?;
    let heads = c.uint(&["num_attention_heads"], Some(12))?;
    let inter = c.uint(&["intermediate_size"], Some(3072))?;
    let positions = c.uint(&["max_position_embeddings"], Some(512))?;
    let types = c.uint(&["type_vocab_size"], Some(2))?;
    let mut o = Out(Vec::new());
    o.w("embeddings.word_embeddings.weight".into(), &[v, h]);
    o.w(
        "embeddings.position_embeddings.weight".into(),
        &[positions, h],
    );
    o.w(
        "embeddings.token_type_embeddings.weight".into(),
        &[types, h],
    );
    o.norm("embeddings.LayerNorm", h, true);
    for i in 0..layers {
        let p = format!("encoder.layer.{i}");
        for x in ["query", "key", "value"] {
            o.linear(&format!("{p}.attention.self.{x}"), h, h, true);
        }
        o.linear(&format!("{p}.attention.output.dense"), h, h, true);
        o.norm(&format!("{p}.attention.output.LayerNorm"), h, true);
        o.linear(&format!("{p}.intermediate.dense"), h, inter, true);
        o.linear(&format!("{p}.output.dense"), inter, h, true);
        o.norm(&format!("{p}.output.LayerNorm"), h, true);
    }
    o.linear("pooler.dense", h, h, true);
    o.0.push(Tensor::buffer(
        "embeddings.position_ids",
        DType::I64,
        &[1, positions],
    ));
    o.0.push(Tensor::buffer(
        "embeddings.token_type_ids",
        DType::I64,
        &[1, positions],
    ));
    Ok(Built {
        tensors: o.0,
        no_split: NoSplit {
            patterns: vec!["embeddings", "encoder.layer.#"],
        },
        dims: Dims {
            model_type: "bert".into(),
            hidden_size: h,
            num_layers: layers,
            num_attention_heads: heads,
            num_key_value_heads: heads,
            head_dim: h / heads.max(1),
            vocab_size: v,
            mlp_size: inter,
            expert_mlp_size: 0,
            experts_per_token: 0,
            gated_mlp: false,
            experts: 0,
            attention_dropout: c.float("attention_probs_dropout_prob").unwrap_or(0.1) > 0.0,
            kv_per_token: 2 * h,
        },
        head: Vec::new(),
    })
}

fn t5(c: &Config) -> Result<Built, EstimateError> {
    let v = c.uint(&["vocab_size"], Some(32128))?;
    let d = c.uint(&["d_model"], Some(512))?;
    let dkv = c.uint(&["d_kv"], Some(64))?;
    let ff = c.uint(&["d_ff"], Some(2048))?;
    let enc_layers = c.uint(&["num_layers"], Some(6))?;
    let dec_layers = c.uint(&["num_decoder_layers"], Some(enc_layers))?;
    let heads = c.uint(&["num_heads"], Some(8))?;
    let buckets = c.uint(&["relative_attention_num_buckets"], Some(32))?;
    let gated = c
        .get("feed_forward_proj")
        .and_then(Value::as_str)
        .is_some_and(|s| s.starts_with("gated-"));
    let inner = heads * dkv;
    let mut o = Out(Vec::new());
    // Under `init_empty_weights` transformers 5 leaves the embeddings untied, so accelerate counts
    // `shared` and both stacks' `embed_tokens`.
    o.w("shared.weight".into(), &[v, d]);
    for (stack, n) in [("encoder", enc_layers), ("decoder", dec_layers)] {
        o.w(format!("{stack}.embed_tokens.weight"), &[v, d]);
        for i in 0..n {
            let b = format!("{stack}.block.{i}");
            let sa = format!("{b}.layer.0.SelfAttention");
            for x in ["q", "k", "v"] {
                o.linear(&format!("{sa}.{x}"), d, inner, false);
            }
            o.linear(&format!("{sa}.o"), inner, d, false);
            if i == 0 {
                o.w(
                    format!("{sa}.relative_attention_bias.weight"),
                    &[buckets, heads],
                );
            }
            o.norm(&format!("{b}.layer.0.layer_norm"), d, false);
            let mut ff_index = 1;
            if stack == "decoder" {
                let ca = format!("{b}.layer.1.EncDecAttention");
                for x in ["q", "k", "v"] {
                    o.linear(&format!("{ca}.{x}"), d, inner, false);
                }
                o.linear(&format!("{ca}.o"), inner, d, false);
                o.norm(&format!("{b}.layer.1.layer_norm"), d, false);
                ff_index = 2;
            }
            let f = format!("{b}.layer.{ff_index}");
            if gated {
                o.linear(&format!("{f}.DenseReluDense.wi_0"), d, ff, false);
                o.linear(&format!("{f}.DenseReluDense.wi_1"), d, ff, false);
            } else {
                o.linear(&format!("{f}.DenseReluDense.wi"), d, ff, false);
            }
            o.linear(&format!("{f}.DenseReluDense.wo"), ff, d, false);
            o.norm(&format!("{f}.layer_norm"), d, false);
        }
        o.norm(&format!("{stack}.final_layer_norm"), d, false);
    }
    Ok(Built {
        tensors: o.0,
        no_split: NoSplit {
            patterns: vec!["block.#"],
        },
        dims: Dims {
            model_type: "t5".into(),
            hidden_size: d,
            num_layers: enc_layers + dec_layers,
            num_attention_heads: heads,
            num_key_value_heads: heads,
            head_dim: dkv,
            vocab_size: v,
            mlp_size: ff,
            expert_mlp_size: 0,
            experts_per_token: 0,
            gated_mlp: gated,
            experts: 0,
            attention_dropout: c.float("dropout_rate").unwrap_or(0.1) > 0.0,
            kv_per_token: 2 * inner,
        },
        head: Vec::new(),
    })
}

/// The no-split modules of a checkpoint whose family is known only from its tensor names (a lone
/// `.safetensors` file): blocks of a numbered list (`layers.N`, `h.N`, `block.N`) are whole layers in
/// every family here, plus BERT's embeddings.
pub fn no_split_for(model_type: Option<&str>, tensors: &[Tensor]) -> NoSplit {
    let bertish = model_type == Some("bert")
        || (model_type.is_none()
            && tensors
                .iter()
                .any(|t| t.name.contains("encoder.layer.") && t.name.contains("attention.self")));
    let mut patterns = vec!["layers.#", "h.#", "block.#", "layer.#"];
    if bertish {
        patterns.push("embeddings");
    }
    NoSplit { patterns }
}

/// Dimensions of an architecture without a formula, from the keys most configs use.
pub fn generic_dims(c: &Config) -> Option<Dims> {
    let h = c.uint(&["hidden_size", "n_embd", "d_model"], None).ok()?;
    let layers = c
        .uint(&["num_hidden_layers", "n_layer", "num_layers"], None)
        .ok()?;
    let heads = c
        .uint(&["num_attention_heads", "n_head", "num_heads"], None)
        .ok()?;
    let kv = c.uint(&["num_key_value_heads"], Some(heads)).ok()?;
    let hd = c.uint(&["head_dim"], Some(h / heads.max(1))).ok()?;
    let v = c.uint(&["vocab_size"], Some(0)).ok()?;
    let inter = c
        .uint(&["intermediate_size", "n_inner", "ffn_dim"], Some(4 * h))
        .ok()?;
    // Multi-head latent attention (transformers' DeepseekV2/V3 attention) caches the compressed
    // KV latent and the shared rotary key: kv_lora_rank + qk_rope_head_dim values per token.
    let kv_per_token = match (
        c.uint(&["kv_lora_rank"], None).ok(),
        c.uint(&["qk_rope_head_dim"], None).ok(),
    ) {
        (Some(rank), Some(rope)) => rank + rope,
        _ => 2 * kv * hd,
    };
    Some(Dims {
        model_type: c.model_type.clone(),
        hidden_size: h,
        num_layers: layers,
        num_attention_heads: heads,
        num_key_value_heads: kv,
        head_dim: hd,
        vocab_size: v,
        mlp_size: inter,
        expert_mlp_size: 0,
        experts_per_token: 0,
        gated_mlp: true,
        experts: 0,
        attention_dropout: false,
        kv_per_token,
    })
}
