//! Model families by formula: from a `config.json`, the exact tensor list (names, shapes, dtypes,
//! buffers included) of the model accelerate sizes — transformers' `AutoModel` (the base model, no task
//! head) built in float32 under `init_empty_weights`; for a multimodal config its vision tower and
//! projector beside the language model — plus the dimensions the per-GPU estimates need.
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
    "gemma3_text",
    "phi3",
    "gpt2",
    "gpt_neox",
    "bert",
    "t5",
    "gemma3",
    "llava",
    "qwen2_vl",
    "qwen2_5_vl",
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
    /// The attention transformers runs: config.json's `attn_implementation`, else SDPA where the
    /// family supports it, else eager (what `PreTrainedModel._check_and_adjust_attn_implementation`
    /// picks). Eager attention stores the S x S probabilities for backward; SDPA and flash kernels
    /// do not.
    pub attn_implementation: Attention,
    /// Gemma-2's `attn_logit_softcapping`: eager attention also keeps the tanh of the scores.
    pub attention_softcap: bool,
    /// Gemma-2's `final_logit_softcapping`: the logits pass through a tanh too.
    pub final_softcap: bool,
    /// Gemma-2 and Gemma 3 norm both sides of the attention and the MLP (four norms per layer).
    pub sandwich_norms: bool,
    /// An encoder-decoder (T5): how many of `num_layers` are decoder layers, each with a
    /// cross-attention over the encoder's output.
    pub decoder_layers: u64,
    /// T5's `dropout_rate` > 0: dropout after the embeddings, attention, MLP and residual branches.
    pub hidden_dropout: bool,
}

/// An attention implementation as transformers names it (`attn_implementation`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum Attention {
    /// transformers' own `eager_attention_forward`: matmul, softmax, dropout, matmul.
    #[value(name = "eager")]
    #[serde(rename = "eager")]
    Eager,
    /// torch's scaled_dot_product_attention.
    #[default]
    #[value(name = "sdpa")]
    #[serde(rename = "sdpa")]
    Sdpa,
    /// The flash-attn 2 package's kernels.
    #[value(name = "flash_attention_2")]
    #[serde(rename = "flash_attention_2")]
    FlashAttention2,
    /// The flash-attn 3 package's kernels (Hopper).
    #[value(name = "flash_attention_3")]
    #[serde(rename = "flash_attention_3")]
    FlashAttention3,
    /// torch's flex_attention.
    #[value(name = "flex_attention")]
    #[serde(rename = "flex_attention")]
    FlexAttention,
}

impl Attention {
    pub fn name(self) -> &'static str {
        match self {
            Attention::Eager => "eager",
            Attention::Sdpa => "sdpa",
            Attention::FlashAttention2 => "flash_attention_2",
            Attention::FlashAttention3 => "flash_attention_3",
            Attention::FlexAttention => "flex_attention",
        }
    }

    /// The implementation a config.json names; `paged|` (transformers' paged cache) changes no kernel.
    fn parse(name: &str) -> Option<Attention> {
        let name = name.strip_prefix("paged|").unwrap_or(name);
        [
            Attention::Eager,
            Attention::Sdpa,
            Attention::FlashAttention2,
            Attention::FlashAttention3,
            Attention::FlexAttention,
        ]
        .into_iter()
        .find(|a| a.name() == name)
    }

    /// Whether transformers 5's modelling code of `model_type` runs it (its `_supports_sdpa`,
    /// `_supports_flash_attn`, `_supports_flex_attn`); requesting one it does not support is an
    /// error there.
    pub fn supported_by(self, model_type: &str) -> bool {
        match self {
            Attention::Eager => true,
            Attention::Sdpa => model_type != "gemma2",
            // Gemma3ForConditionalGeneration: flash attention drops the bidirectional image mask.
            Attention::FlashAttention2 | Attention::FlashAttention3 => {
                !matches!(model_type, "t5" | "gemma3")
            }
            Attention::FlexAttention => !matches!(model_type, "gpt2" | "qwen2_vl" | "qwen2_5_vl"),
        }
    }

    /// What transformers picks when nothing is requested: SDPA, else eager.
    pub fn default_for(model_type: &str) -> Attention {
        if Attention::Sdpa.supported_by(model_type) {
            Attention::Sdpa
        } else {
            Attention::Eager
        }
    }
}

/// A config.json, read.
pub struct Config {
    map: Map<String, Value>,
    /// `model_type`, or the family of the class `architectures` names when it is absent.
    pub model_type: String,
    /// The first class `architectures` names, when the config has no `model_type`.
    pub architecture: Option<String>,
    /// The file it came from, for messages.
    pub source: String,
}

/// transformers' class-name prefixes of the families with formulas, longest first so that
/// `Qwen2Moe` wins over `Qwen2`; a class is the prefix followed by its head (`ForCausalLM`,
/// `Model`, `LMHeadModel`, `ForConditionalGeneration`...). From the auto mappings of transformers
/// 5 (`models/auto/modeling_auto.py`), where each such class maps to the family's model_type.
const CLASS_PREFIXES: &[(&str, &str)] = &[
    ("Qwen2_5_VL", "qwen2_5_vl"),
    ("Gemma3Text", "gemma3_text"),
    ("Qwen2Moe", "qwen2_moe"),
    ("Qwen3Moe", "qwen3_moe"),
    ("GPTNeoX", "gpt_neox"),
    ("Mistral", "mistral"),
    ("Mixtral", "mixtral"),
    ("Qwen2VL", "qwen2_vl"),
    ("Gemma2", "gemma2"),
    ("Gemma3", "gemma3"),
    ("Llama", "llama"),
    ("Llava", "llava"),
    ("Gemma", "gemma"),
    ("Qwen2", "qwen2"),
    ("Qwen3", "qwen3"),
    ("Phi3", "phi3"),
    ("GPT2", "gpt2"),
    ("Bert", "bert"),
    ("T5", "t5"),
];

/// The family of a transformers model class (`LlamaForCausalLM` → `llama`), for a config.json that
/// names `architectures` but no `model_type`.
pub fn family_of_class(class: &str) -> Option<&'static str> {
    // The text-only Gemma 3 causal LM is the one class of `gemma3_text` without `Text` in its name.
    if class == "Gemma3ForCausalLM" {
        return Some("gemma3_text");
    }
    CLASS_PREFIXES.iter().find_map(|(prefix, family)| {
        let head = class.strip_prefix(prefix)?;
        (head.starts_with("For")
            || matches!(
                head,
                "Model" | "LMHeadModel" | "EncoderModel" | "PreTrainedModel"
            ))
        .then_some(*family)
    })
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
        let mut model_type = map
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let mut architecture = None;
        if model_type.is_empty() {
            let classes: Vec<&str> = map
                .get("architectures")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            architecture = classes.first().map(|c| c.to_string());
            if let Some(family) = classes.iter().find_map(|c| family_of_class(c)) {
                model_type = family.to_string();
            }
        }
        Ok(Config {
            map,
            model_type,
            architecture,
            source: source.to_string(),
        })
    }

    /// How messages name the family: `model_type`, else the class `architectures` names.
    pub fn family_name(&self) -> String {
        match (&self.architecture, self.model_type.is_empty()) {
            (Some(class), true) => class.clone(),
            _ => self.model_type.clone(),
        }
    }

    /// An error about this config.
    fn refuse(&self, reason: String) -> EstimateError {
        EstimateError::BadConfig {
            path: self.source.clone(),
            reason,
        }
    }

    /// What transformers refuses about a width and its attention heads, naming the keys: no
    /// width, no heads (its modelling code divides by them: ZeroDivisionError), and where the
    /// family requires it a width that is not a whole number of heads (`validate_architecture`:
    /// "The hidden size (…) is not a multiple of the number of attention heads (…)").
    fn check_attention(
        &self,
        (width_key, width): (&str, u64),
        (heads_key, heads): (&str, u64),
        whole_heads: bool,
    ) -> Result<(), EstimateError> {
        if width == 0 {
            return Err(self.refuse(format!("`{width_key}` is 0: the model has no width")));
        }
        if heads == 0 {
            return Err(self.refuse(format!(
                "`{heads_key}` is 0: attention needs at least one head (transformers divides by it)"
            )));
        }
        if whole_heads && width % heads != 0 {
            return Err(self.refuse(format!(
                "`{width_key}` ({width}) is not a multiple of `{heads_key}` ({heads}), as transformers requires for {}",
                self.model_type
            )));
        }
        Ok(())
    }

    /// Grouped-query attention: every key/value head serves a whole group of query heads
    /// (transformers' `num_key_value_groups = heads // kv_heads`: 0 divides by zero, and a
    /// remainder leaves query heads without keys at the first forward).
    fn check_kv_heads(&self, heads: u64, kv: u64) -> Result<(), EstimateError> {
        if kv == 0 {
            return Err(self.refuse(
                "`num_key_value_heads` is 0: attention needs at least one key/value head (transformers divides by it)".into(),
            ));
        }
        if heads % kv != 0 {
            return Err(self.refuse(format!(
                "`num_attention_heads` ({heads}) is not a multiple of `num_key_value_heads` ({kv}): each key/value head must serve a whole group of query heads"
            )));
        }
        Ok(())
    }

    /// `layer_types`, where given, names one attention type per layer (transformers'
    /// `validate_layer_type`).
    fn check_layer_types(&self, layers: u64) -> Result<(), EstimateError> {
        if let Some(list) = self.get("layer_types").and_then(Value::as_array) {
            if list.len() as u64 != layers {
                return Err(self.refuse(format!(
                    "`layer_types` has {} entries but `num_hidden_layers` is {layers}: one per layer",
                    list.len()
                )));
            }
        }
        Ok(())
    }

    /// The language model's config: the top level, or `text_config` where a multimodal config
    /// nests it (Llava, Gemma 3, Qwen2-VL...).
    pub fn text(&self) -> Option<Config> {
        self.sub("text_config")
    }

    /// A nested config (`text_config`, `vision_config`), when it is an object.
    fn sub(&self, key: &str) -> Option<Config> {
        let Some(Value::Object(map)) = self.get(key) else {
            return None;
        };
        Some(Config {
            model_type: map
                .get("model_type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            architecture: None,
            map: map.clone(),
            source: format!("{} ({key})", self.source),
        })
    }

    /// A config of `model_type` holding only `map`: a missing sub-config takes its class defaults.
    fn with_type(map: Map<String, Value>, model_type: &str, source: String) -> Config {
        Config {
            map,
            model_type: model_type.to_string(),
            architecture: None,
            source,
        }
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

    /// A soft-capping value (Gemma-2's): on unless the key is present and null, or 0.
    fn softcap(&self, key: &str) -> bool {
        match self.map.get(key) {
            None => true,
            Some(v) => v.as_f64().is_some_and(|x| x != 0.0),
        }
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
    /// Tensors of `tensors` that the trained model ties to another one (T5's per-stack
    /// `embed_tokens` are `shared`): one parameter there, though accelerate's untied empty model
    /// counts each.
    pub tied: Vec<String>,
}

struct Out(Vec<Tensor>);

impl Out {
    fn w(&mut self, name: String, shape: &[u64]) {
        self.0.push(Tensor::new(name, shape));
    }
    /// A weight of a matrix product (autocast casts it).
    fn mm(&mut self, name: String, shape: &[u64]) {
        self.0.push(Tensor::matmul(name, shape));
    }
    fn linear(&mut self, prefix: &str, inp: u64, out: u64, bias: bool) {
        self.mm(format!("{prefix}.weight"), &[out, inp]);
        if bias {
            self.w(format!("{prefix}.bias"), &[out]);
        }
    }
    /// GPT-2's Conv1D (transformers/pytorch_utils.py): the weight is stored (in, out), the
    /// transpose of nn.Linear's; FSDP2 shards it on `in`.
    fn conv1d(&mut self, prefix: &str, inp: u64, out: u64) {
        self.mm(format!("{prefix}.weight"), &[inp, out]);
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
        self.rotary_named(&format!("{prefix}."), head_dim, factor);
    }
    /// As `rotary`, with the buffer names' whole prefix given (`rotary_emb.full_attention_`).
    fn rotary_named(&mut self, prefix: &str, head_dim: u64, factor: f64) {
        let dim = (head_dim as f64 * factor) as u64;
        let n = dim.div_ceil(2);
        self.0.push(Tensor::buffer(
            format!("{prefix}inv_freq"),
            DType::F32,
            &[n],
        ));
        self.0.push(Tensor::buffer(
            format!("{prefix}original_inv_freq"),
            DType::F32,
            &[n],
        ));
    }
    /// `nn.LayerNorm` with bias (vision towers).
    fn layer_norm(&mut self, prefix: &str, h: u64) {
        self.norm(prefix, h, true);
    }
}

/// Builds the tensor list for a known family, or says the architecture is unknown. The base model,
/// as `AutoModel` builds it; with an `auto_map` naming `AutoModelForCausalLM` (Phi-3), the causal LM
/// that accelerate then builds instead.
pub fn build(config: &Config) -> Result<Built, EstimateError> {
    let mut built = build_base(config)?;
    built.dims.attn_implementation = attention_of(config)?;
    // A tied LM head is the input embedding used as a linear layer: autocast casts it for that.
    if built.head.is_empty() && config.model_type != "bert" {
        let embedding = built.tensors.iter_mut().find(|t| {
            [
                "embed_tokens.weight",
                "wte.weight",
                "shared.weight",
                "embed_in.weight",
            ]
            .iter()
            .any(|n| t.name == *n || t.name.ends_with(&format!(".{n}")))
        });
        if let Some(e) = embedding {
            e.matmul = true;
        }
    }
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

/// The attention transformers runs for `config`: its `attn_implementation` (a name, or a dict
/// per sub-config whose `""` or `text_config` entry applies to the language model), else the
/// family's default. A name the family does not support is refused, as transformers refuses it.
pub fn attention_of(config: &Config) -> Result<Attention, EstimateError> {
    let requested = match config.get("attn_implementation") {
        None => None,
        Some(Value::String(name)) => Some(name.as_str()),
        Some(Value::Object(per)) => ["", "text_config"]
            .iter()
            .find_map(|k| per.get(*k).and_then(Value::as_str)),
        Some(other) => {
            return Err(config.refuse(format!("`attn_implementation` is not a string: {other}")))
        }
    };
    let Some(name) = requested else {
        return Ok(Attention::default_for(&config.model_type));
    };
    let attention = Attention::parse(name).ok_or_else(|| {
        config.refuse(format!(
            "`attn_implementation` is `{name}`; the ones sized here are eager, sdpa, flash_attention_2, flash_attention_3 and flex_attention"
        ))
    })?;
    check_supported(attention, &config.model_type)
        .map_err(|reason| config.refuse(format!("`attn_implementation`: {reason}")))?;
    Ok(attention)
}

/// Whether the family runs `attention`; the reason when it does not.
pub fn check_supported(attention: Attention, model_type: &str) -> Result<(), String> {
    if attention.supported_by(model_type) {
        Ok(())
    } else {
        Err(format!(
            "{model_type} does not support `{}` in transformers (its modelling code sets it off); use {}",
            attention.name(),
            if Attention::Sdpa.supported_by(model_type) {
                "sdpa or eager"
            } else {
                "eager"
            }
        ))
    }
}

/// The untied LM head: `lm_head.weight` [vocab, hidden], no bias.
fn lm_head(c: &Config, tied_default: bool, v: u64, h: u64) -> Vec<Tensor> {
    if c.tied_embeddings(tied_default) {
        Vec::new()
    } else {
        vec![Tensor::matmul("lm_head.weight", &[v, h])]
    }
}

fn build_base(config: &Config) -> Result<Built, EstimateError> {
    match config.model_type.as_str() {
        "llama" | "mistral" | "mixtral" | "qwen2" | "qwen2_moe" | "qwen3" | "qwen3_moe"
        | "gemma" | "gemma2" | "gemma3_text" | "phi3" => decoder(config),
        "gemma3" | "llava" | "qwen2_vl" | "qwen2_5_vl" => multimodal(config),
        "gpt2" => gpt2(config),
        "gpt_neox" => gpt_neox(config),
        "bert" => bert(config),
        "t5" => t5(config),
        "" if config.architecture.is_none() => Err(config.refuse(
            "it names neither `model_type` nor `architectures`, so the model family is unknown"
                .into(),
        )),
        _ => Err(EstimateError::UnknownArchitecture {
            model_type: config.family_name(),
            known: FAMILIES,
        }),
    }
}

/// The Llama-shaped decoders: embeddings, N decoder layers (attention, gated MLP or MoE, RMS norms),
/// final norm, rotary buffers.
fn decoder(c: &Config) -> Result<Built, EstimateError> {
    let s = DecoderShape::of(c)?;
    let t = s.t;
    let mut o = Out(Vec::new());
    o.w("embed_tokens.weight".into(), &[s.v, s.h]);
    if is_gemma(t) {
        o.0.push(Tensor::buffer("embed_tokens.embed_scale", DType::F32, &[]));
    }
    for i in 0..s.layers {
        decoder_layer(&mut o, c, &s, i)?;
    }
    o.norm("norm", s.h, false);
    if t == "gemma3_text" {
        // Gemma3RotaryEmbedding: one pair of frequency buffers per attention type in use, named
        // after it (sliding window layers rotate with their own base).
        for layer_type in gemma3_layer_types(c, s.layers) {
            o.rotary_named(&format!("rotary_emb.{layer_type}_"), s.hd, 1.0);
        }
    } else {
        o.rotary("rotary_emb", s.hd, c.partial_rotary_factor(1.0));
    }
    let top_k = match t {
        "mixtral" => c.uint(&["num_experts_per_tok"], Some(2))?,
        "qwen2_moe" => c.uint(&["num_experts_per_tok"], Some(4))?,
        "qwen3_moe" => c.uint(&["num_experts_per_tok"], Some(8))?,
        _ => 0,
    };
    let mlp_size = match t {
        "qwen2_moe" => shared_expert_size(c)?,
        _ if s.experts > 0 => 0,
        _ => s.inter,
    };
    Ok(Built {
        tensors: o.0,
        no_split: NoSplit {
            patterns: vec!["layers.#"],
        },
        dims: Dims {
            model_type: t.to_string(),
            hidden_size: s.h,
            num_layers: s.layers,
            num_attention_heads: s.heads,
            num_key_value_heads: s.kv,
            head_dim: s.hd,
            vocab_size: s.v,
            mlp_size,
            expert_mlp_size: top_k * s.moe_inter,
            experts_per_token: top_k,
            gated_mlp: true,
            experts: s.experts,
            attention_dropout: c.float("attention_dropout").unwrap_or(0.0) > 0.0,
            kv_per_token: 2 * s.kv * s.hd,
            // Gemma2Config's defaults: 50.0 and 30.0; null turns each off.
            attention_softcap: t == "gemma2" && c.softcap("attn_logit_softcapping"),
            final_softcap: t == "gemma2" && c.softcap("final_logit_softcapping"),
            sandwich_norms: s.sandwich(),
            ..Dims::default()
        },
        head: lm_head(c, is_gemma(t), s.v, s.h),
        tied: Vec::new(),
    })
}

/// The decoder family a model type builds: the language models of Qwen2-VL and Qwen2.5-VL are
/// Qwen2's decoder.
fn decoder_family(model_type: &str) -> &str {
    match model_type {
        "qwen2_vl_text" | "qwen2_5_vl_text" => "qwen2",
        t => t,
    }
}

/// The Gemma families: scaled embeddings, 256-wide heads by default, the LM head tied by default.
fn is_gemma(family: &str) -> bool {
    matches!(family, "gemma" | "gemma2" | "gemma3_text")
}

/// Qwen2-MoE's shared expert's width.
fn shared_expert_size(c: &Config) -> Result<u64, EstimateError> {
    c.uint(&["shared_expert_intermediate_size"], Some(5632))
}

/// A Llama-shaped decoder's sizes and options, from its config and its family's defaults.
struct DecoderShape<'c> {
    /// The family ([`decoder_family`]).
    t: &'c str,
    v: u64,
    h: u64,
    layers: u64,
    heads: u64,
    kv: u64,
    hd: u64,
    inter: u64,
    /// Biases of the q, k and v projections, and of the output projection.
    q_bias: bool,
    o_bias: bool,
    mlp_bias: bool,
    /// Experts of a mixture-of-experts MLP (0: dense) and each one's width.
    experts: u64,
    moe_inter: u64,
    /// Every `sparse_step`-th layer has experts, except those of `mlp_only`.
    sparse_step: u64,
    mlp_only: Vec<u64>,
}

impl<'c> DecoderShape<'c> {
    fn of(c: &'c Config) -> Result<Self, EstimateError> {
        let t = decoder_family(&c.model_type);
        // Gemma 3's text config is nested in its multimodal config, where Hub configs often leave
        // out what equals Gemma3TextConfig's defaults.
        let gemma3 = t == "gemma3_text";
        let or = |d: u64| if gemma3 { Some(d) } else { None };
        let v = c.uint(&["vocab_size"], or(262_208))?;
        let h = c.uint(&["hidden_size"], or(2304))?;
        let layers = c.uint(&["num_hidden_layers"], or(26))?;
        let heads = c.uint(&["num_attention_heads"], or(8))?;
        let kv = c.uint(
            &["num_key_value_heads"],
            Some(if gemma3 { 4 } else { heads }),
        )?;
        let default_head_dim = match t {
            _ if is_gemma(t) => 256,
            "qwen3" => 128,
            _ => h / heads.max(1),
        };
        let hd = c.uint(&["head_dim"], Some(default_head_dim))?;
        let inter = c.uint(&["intermediate_size"], or(9216))?;
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
        // LlamaConfig, Gemma2Config and Gemma3TextConfig check the width (`validate_architecture`);
        // the others derive head_dim by floor division and build.
        let whole_heads = matches!(t, "llama" | "gemma2" | "gemma3_text");
        c.check_attention(
            ("hidden_size", h),
            ("num_attention_heads", heads),
            whole_heads,
        )?;
        c.check_kv_heads(heads, kv)?;
        c.check_layer_types(layers)?;
        Ok(DecoderShape {
            t,
            v,
            h,
            layers,
            heads,
            kv,
            hd,
            inter,
            q_bias,
            o_bias,
            mlp_bias,
            experts,
            moe_inter,
            sparse_step,
            mlp_only,
        })
    }

    /// Gemma 2 and 3 norm before and after each block as well (sandwich norms).
    fn sandwich(&self) -> bool {
        matches!(self.t, "gemma2" | "gemma3_text")
    }

    /// Whether layer `i`'s MLP is a mixture of experts: every layer of Mixtral, every
    /// `decoder_sparse_step`-th of Qwen's MoE but those of `mlp_only_layers`.
    fn sparse(&self, i: u64) -> bool {
        self.experts > 0
            && (self.t == "mixtral"
                || (!self.mlp_only.contains(&i) && (i + 1) % self.sparse_step == 0))
    }
}

/// Decoder layer `i`: attention, the MLP, the norms.
fn decoder_layer(o: &mut Out, c: &Config, s: &DecoderShape, i: u64) -> Result<(), EstimateError> {
    let (h, hd, heads, kv) = (s.h, s.hd, s.heads, s.kv);
    let p = format!("layers.{i}");
    let a = format!("{p}.self_attn");
    if s.t == "phi3" {
        o.linear(&format!("{a}.o_proj"), heads * hd, h, false);
        o.linear(&format!("{a}.qkv_proj"), h, heads * hd + 2 * kv * hd, false);
    } else {
        o.linear(&format!("{a}.q_proj"), h, heads * hd, s.q_bias);
        o.linear(&format!("{a}.k_proj"), h, kv * hd, s.q_bias);
        o.linear(&format!("{a}.v_proj"), h, kv * hd, s.q_bias);
        o.linear(&format!("{a}.o_proj"), heads * hd, h, s.o_bias);
    }
    if matches!(s.t, "qwen3" | "qwen3_moe" | "gemma3_text") {
        o.norm(&format!("{a}.q_norm"), hd, false);
        o.norm(&format!("{a}.k_norm"), hd, false);
    }
    decoder_mlp(o, c, s, i, &format!("{p}.mlp"))?;
    o.norm(&format!("{p}.input_layernorm"), h, false);
    o.norm(&format!("{p}.post_attention_layernorm"), h, false);
    if s.sandwich() {
        o.norm(&format!("{p}.pre_feedforward_layernorm"), h, false);
        o.norm(&format!("{p}.post_feedforward_layernorm"), h, false);
    }
    Ok(())
}

/// Layer `i`'s MLP under `m`: the experts (with Qwen2-MoE's shared expert), Phi-3's fused gate
/// and up projection, or the gated MLP.
fn decoder_mlp(
    o: &mut Out,
    c: &Config,
    s: &DecoderShape,
    i: u64,
    m: &str,
) -> Result<(), EstimateError> {
    let (h, inter) = (s.h, s.inter);
    if s.sparse(i) {
        let (experts, moe_inter) = (s.experts, s.moe_inter);
        o.mm(format!("{m}.gate.weight"), &[experts, h]);
        o.w(
            format!("{m}.experts.gate_up_proj"),
            &[experts, 2 * moe_inter, h],
        );
        o.w(format!("{m}.experts.down_proj"), &[experts, h, moe_inter]);
        if s.t == "qwen2_moe" {
            let shared = shared_expert_size(c)?;
            o.linear(&format!("{m}.shared_expert.gate_proj"), h, shared, false);
            o.linear(&format!("{m}.shared_expert.up_proj"), h, shared, false);
            o.linear(&format!("{m}.shared_expert.down_proj"), shared, h, false);
            o.linear(&format!("{m}.shared_expert_gate"), h, 1, false);
        }
    } else if s.t == "phi3" {
        o.linear(&format!("{m}.gate_up_proj"), h, 2 * inter, false);
        o.linear(&format!("{m}.down_proj"), inter, h, false);
    } else {
        o.linear(&format!("{m}.gate_proj"), h, inter, s.mlp_bias);
        o.linear(&format!("{m}.up_proj"), h, inter, s.mlp_bias);
        o.linear(&format!("{m}.down_proj"), inter, h, s.mlp_bias);
    }
    Ok(())
}

/// Gemma 3's attention types in use, sorted as Gemma3RotaryEmbedding sorts them: `layer_types`,
/// else every `sliding_window_pattern`-th layer (default 6) full and the others sliding.
fn gemma3_layer_types(c: &Config, layers: u64) -> Vec<String> {
    let mut types: Vec<String> = match c.get("layer_types").and_then(Value::as_array) {
        Some(list) => list
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        None => {
            let pattern = c
                .uint(&["sliding_window_pattern"], Some(6))
                .unwrap_or(6)
                .max(1);
            (0..layers.min(pattern))
                .map(|i| {
                    if (i + 1) % pattern == 0 {
                        "full_attention".to_string()
                    } else {
                        "sliding_attention".to_string()
                    }
                })
                .collect()
        }
    };
    types.sort();
    types.dedup();
    types
}

fn gpt2(c: &Config) -> Result<Built, EstimateError> {
    let v = c.uint(&["vocab_size"], Some(50257))?;
    let h = c.uint(&["n_embd", "hidden_size"], Some(768))?;
    let layers = c.uint(&["n_layer", "num_hidden_layers"], Some(12))?;
    let heads = c.uint(&["n_head", "num_attention_heads"], Some(12))?;
    let positions = c.uint(&["n_positions", "max_position_embeddings"], Some(1024))?;
    let inner = c.uint(&["n_inner"], Some(4 * h))?;
    // GPT2Attention: "`embed_dim` must be divisible by num_heads".
    let width_key = if c.get("n_embd").is_some() {
        "n_embd"
    } else {
        "hidden_size"
    };
    let heads_key = if c.get("n_head").is_some() {
        "n_head"
    } else {
        "num_attention_heads"
    };
    c.check_attention((width_key, h), (heads_key, heads), true)?;
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
            ..Dims::default()
        },
        head: lm_head(c, true, v, h),
        tied: Vec::new(),
    })
}

fn gpt_neox(c: &Config) -> Result<Built, EstimateError> {
    let v = c.uint(&["vocab_size"], None)?;
    let h = c.uint(&["hidden_size"], None)?;
    let layers = c.uint(&["num_hidden_layers"], None)?;
    let heads = c.uint(&["num_attention_heads"], None)?;
    let inter = c.uint(&["intermediate_size"], None)?;
    let bias = c.flag("attention_bias", true);
    c.check_attention(("hidden_size", h), ("num_attention_heads", heads), true)?;
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
            ..Dims::default()
        },
        head: if c.tied_embeddings(false) {
            Vec::new()
        } else {
            vec![Tensor::matmul("embed_out.weight", &[v, h])]
        },
        tied: Vec::new(),
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
    // BertSelfAttention refuses a width that is not whole heads unless the config sets
    // `embedding_size`.
    c.check_attention(
        ("hidden_size", h),
        ("num_attention_heads", heads),
        c.get("embedding_size").is_none(),
    )?;
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
            ..Dims::default()
        },
        head: Vec::new(),
        tied: Vec::new(),
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
    let proj = match c.get("feed_forward_proj") {
        None => "relu",
        Some(v) => v
            .as_str()
            .ok_or_else(|| c.refuse(format!("`feed_forward_proj` is not a string: {v}")))?,
    };
    // T5Config.validate_architecture: `gated-{ACT_FN}` or `{ACT_FN}`.
    let parts: Vec<&str> = proj.split('-').collect();
    if (parts.len() > 1 && parts[0] != "gated") || parts.len() > 2 {
        return Err(c.refuse(format!(
            "`feed_forward_proj` is `{proj}`: not a valid activation; use `gated-{{ACT_FN}}` or `{{ACT_FN}}`, e.g. `gated-gelu` or `relu`"
        )));
    }
    let gated = parts.len() == 2;
    // T5Attention reshapes by `num_heads`; with none there is no attention to run.
    c.check_attention(("d_model", d), ("num_heads", heads), false)?;
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
            decoder_layers: dec_layers,
            hidden_dropout: c.float("dropout_rate").unwrap_or(0.1) > 0.0,
            ..Dims::default()
        },
        // T5ForConditionalGeneration ties both stacks' embed_tokens and, in transformers 5,
        // always the LM head to `shared` (T5Config forces tie_word_embeddings; a `false` in the
        // config only turns off the decoder output scaling).
        head: Vec::new(),
        tied: vec![
            "encoder.embed_tokens.weight".into(),
            "decoder.embed_tokens.weight".into(),
        ],
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

/// Dimensions of an architecture without a formula, from the keys most configs use; else what
/// the config lacks, for the message.
pub fn generic_dims(c: &Config) -> Result<Dims, String> {
    let need = |keys: &[&str], what: &str| -> Result<u64, String> {
        match c.uint(keys, None) {
            Ok(n) => Ok(n),
            Err(EstimateError::BadConfig { reason, .. })
                if keys.iter().any(|k| c.get(k).is_some()) =>
            {
                Err(reason)
            }
            Err(_) => Err(format!(
                "names no {what} ({})",
                keys.iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    };
    let h = need(&["hidden_size", "n_embd", "d_model"], "hidden size")?;
    let layers = need(
        &["num_hidden_layers", "n_layer", "num_layers"],
        "layer count",
    )?;
    let heads = need(&["num_attention_heads", "n_head", "num_heads"], "attention heads")
        .map_err(|reason| {
            // Mamba, RWKV and the like: a recurrent state instead of attention.
            let ssm = ["state_size", "ssm_state_size", "d_state", "mamba_d_state"]
                .iter()
                .any(|k| c.get(k).is_some())
                || ["mamba", "rwkv"].iter().any(|m| c.model_type.contains(m));
            if ssm {
                format!("{reason}: a state-space model keeps no KV cache and no attention scores, and its recurrent state is not modelled")
            } else {
                reason
            }
        })?;
    let bad = |e: EstimateError| e.to_string();
    let kv = c.uint(&["num_key_value_heads"], Some(heads)).map_err(bad)?;
    let hd = c.uint(&["head_dim"], Some(h / heads.max(1))).map_err(bad)?;
    let v = c.uint(&["vocab_size"], Some(0)).map_err(bad)?;
    let inter = c
        .uint(&["intermediate_size", "n_inner", "ffn_dim"], Some(4 * h))
        .map_err(bad)?;
    // Multi-head latent attention (transformers' DeepseekV2/V3 attention) caches the compressed
    // KV latent and the shared rotary key: kv_lora_rank + qk_rope_head_dim values per token.
    let kv_per_token = match (
        c.uint(&["kv_lora_rank"], None).ok(),
        c.uint(&["qk_rope_head_dim"], None).ok(),
    ) {
        (Some(rank), Some(rope)) => rank + rope,
        _ => 2 * kv * hd,
    };
    Ok(Dims {
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
        ..Dims::default()
    })
}

/// The multimodal families: a vision tower and a projector beside the language model of
/// `text_config`, as transformers' `Gemma3Model`, `LlavaModel` and `Qwen2VLModel` /
/// `Qwen2_5_VLModel` hold them (the vision tower built from `vision_config` with its class's
/// defaults for missing keys). The trained model, `*ForConditionalGeneration`, adds the LM head
/// unless the embeddings are tied.
fn multimodal(c: &Config) -> Result<Built, EstimateError> {
    let t = c.model_type.as_str();
    let (default_text, default_vision) = multimodal_parts(t);
    let language = multimodal_language(c, default_text)?;
    let vision = multimodal_vision_config(c, default_vision);
    let th = language.dims.hidden_size;
    let mut o = Out(Vec::new());
    let mut patterns = vec!["layers.#"];
    match t {
        "qwen2_vl" | "qwen2_5_vl" => {
            qwen2_vl_vision(&mut o, &vision, t == "qwen2_5_vl")?;
            patterns.push("blocks.#");
        }
        _ => {
            let vh = vision_tower(&mut o, t, &vision, default_vision)?;
            // The vision embeddings (CLIP/SigLIP) and SigLIP's pooling head are no-split
            // modules of their own.
            patterns.extend(["embeddings", "head"]);
            projector(&mut o, c, vh, th);
        }
    }
    let mut tensors = o.0;
    tensors.extend(language.tensors.into_iter().map(|mut x| {
        x.name.insert_str(0, "language_model.");
        x
    }));
    // transformers 5 ties by the outer config's tie_word_embeddings; Llava and Qwen2-VL also
    // honour a text_config that ties (configs saved before v5 put it there).
    let text_ties = language.head.is_empty();
    let tied = match t {
        "gemma3" => c.tied_embeddings(true),
        _ => c.tied_embeddings(false) || text_ties,
    };
    let v = language.dims.vocab_size;
    let mut dims = language.dims;
    dims.model_type = t.to_string();
    Ok(Built {
        tensors,
        no_split: NoSplit { patterns },
        dims,
        head: if tied {
            Vec::new()
        } else {
            vec![Tensor::matmul("lm_head.weight", &[v, th])]
        },
        tied: Vec::new(),
    })
}

/// A multimodal family's default text and vision model types.
fn multimodal_parts(model_type: &str) -> (&'static str, &'static str) {
    match model_type {
        "gemma3" => ("gemma3_text", "siglip_vision_model"),
        "llava" => ("llama", "clip_vision_model"),
        "qwen2_vl" => ("qwen2_vl_text", "qwen2_vl"),
        _ => ("qwen2_5_vl_text", "qwen2_5_vl"),
    }
}

/// What a nested text config of `model_type` takes from its class's defaults when it leaves it out
/// (Llava-1.5's names little more than the vocabulary size of its Llama).
fn text_defaults(model_type: &str) -> &'static [(&'static str, u64)] {
    match model_type {
        "llama" => &[
            ("vocab_size", 32000),
            ("hidden_size", 4096),
            ("intermediate_size", 11008),
            ("num_hidden_layers", 32),
            ("num_attention_heads", 32),
        ],
        "mistral" => &[
            ("vocab_size", 32000),
            ("hidden_size", 4096),
            ("intermediate_size", 14336),
            ("num_hidden_layers", 32),
            ("num_attention_heads", 32),
            ("num_key_value_heads", 8),
        ],
        "qwen2" => &[
            ("vocab_size", 151936),
            ("hidden_size", 4096),
            ("intermediate_size", 22016),
            ("num_hidden_layers", 32),
            ("num_attention_heads", 32),
        ],
        "qwen2_vl_text" | "qwen2_5_vl_text" => &[
            ("vocab_size", 152064),
            ("hidden_size", 8192),
            ("intermediate_size", 29568),
            ("num_hidden_layers", 80),
            ("num_attention_heads", 64),
            ("num_key_value_heads", 8),
        ],
        _ => &[],
    }
}

/// The language model of `text_config` (`default_text` when it names no type), built as its own
/// family.
fn multimodal_language(c: &Config, default_text: &str) -> Result<Built, EstimateError> {
    let t = c.model_type.as_str();
    let mut text = match c.text() {
        Some(text) => text,
        // Qwen2-VL's Hub configs are flat: the language model's keys sit at the top level.
        None if t.starts_with("qwen2") => {
            Config::with_type(c.map.clone(), default_text, c.source.clone())
        }
        None => Config::with_type(
            Map::new(),
            default_text,
            format!("{} (text_config)", c.source),
        ),
    };
    if text.model_type.is_empty() {
        text.model_type = default_text.to_string();
    }
    for (key, value) in text_defaults(&text.model_type) {
        if text.get(key).is_none() {
            text.map.insert(key.to_string(), Value::from(*value));
        }
    }
    match text.model_type.as_str() {
        "qwen2_vl_text" | "qwen2_5_vl_text" => decoder(&text),
        other if FAMILIES.contains(&other) && !is_multimodal(other) => build_base(&text),
        other => Err(EstimateError::UnknownArchitecture {
            model_type: format!("{t}` with text_config `{other}"),
            known: FAMILIES,
        }),
    }
}

/// `vision_config`, or the family's default vision tower. Llava's default is CLIP ViT-L/14 at
/// 336 px, not CLIPVisionConfig's defaults.
fn multimodal_vision_config(c: &Config, default_vision: &str) -> Config {
    match c.sub("vision_config") {
        Some(v) => v,
        None if c.model_type == "llava" => Config::with_type(
            serde_json::json!({"intermediate_size": 4096, "hidden_size": 1024, "patch_size": 14,
                "image_size": 336, "num_hidden_layers": 24, "num_attention_heads": 16})
            .as_object()
            .cloned()
            .unwrap_or_default(),
            default_vision,
            format!("{} (vision_config)", c.source),
        ),
        None => Config::with_type(
            Map::new(),
            default_vision,
            format!("{} (vision_config)", c.source),
        ),
    }
}

/// Gemma 3's or Llava's vision tower (SigLIP or CLIP, as `vision_config` says); returns its hidden
/// size.
fn vision_tower(
    o: &mut Out,
    t: &str,
    vision: &Config,
    default_vision: &str,
) -> Result<u64, EstimateError> {
    let vt = if vision.model_type.is_empty() {
        default_vision
    } else {
        vision.model_type.as_str()
    };
    match vt {
        "clip_vision_model" => vit(o, vision, false),
        "siglip_vision_model" => vit(o, vision, true),
        other => Err(EstimateError::UnknownArchitecture {
            model_type: format!("{t}` with vision_config `{other}"),
            known: FAMILIES,
        }),
    }
}

/// The projector from the vision tower's width `vh` to the language model's `th`: Gemma 3's
/// projection and soft-embedding norm, or Llava's two linear layers (over every feature layer
/// taken).
fn projector(o: &mut Out, c: &Config, vh: u64, th: u64) {
    let p = "multi_modal_projector";
    if c.model_type == "gemma3" {
        o.mm(format!("{p}.mm_input_projection_weight"), &[vh, th]);
        o.norm(&format!("{p}.mm_soft_emb_norm"), vh, false);
    } else {
        let layers = match c.get("vision_feature_layer") {
            Some(Value::Array(list)) => list.len() as u64,
            _ => 1,
        };
        let bias = c.flag("multimodal_projector_bias", true);
        o.linear(&format!("{p}.linear_1"), vh * layers, th, bias);
        o.linear(&format!("{p}.linear_2"), th, th, bias);
    }
}

fn is_multimodal(model_type: &str) -> bool {
    matches!(model_type, "gemma3" | "llava" | "qwen2_vl" | "qwen2_5_vl")
}

/// CLIP's or SigLIP's vision transformer (`CLIPVisionModel`, `SiglipVisionModel`) under
/// `vision_tower.`; returns its hidden size.
fn vit(o: &mut Out, c: &Config, siglip: bool) -> Result<u64, EstimateError> {
    let h = c.uint(&["hidden_size"], Some(768))?;
    let inter = c.uint(&["intermediate_size"], Some(3072))?;
    let layers = c.uint(&["num_hidden_layers"], Some(12))?;
    let channels = c.uint(&["num_channels"], Some(3))?;
    let image = c.uint(&["image_size"], Some(224))?;
    let patch = c.uint(&["patch_size"], Some(if siglip { 16 } else { 32 }))?;
    let side = image / patch.max(1);
    let patches = side * side;
    // CLIP prepends a class token; SigLIP has none.
    let positions = if siglip { patches } else { patches + 1 };
    let p = "vision_tower";
    if !siglip {
        o.w(format!("{p}.embeddings.class_embedding"), &[h]);
    }
    o.mm(
        format!("{p}.embeddings.patch_embedding.weight"),
        &[h, channels, patch, patch],
    );
    if siglip {
        o.w(format!("{p}.embeddings.patch_embedding.bias"), &[h]);
    }
    o.w(
        format!("{p}.embeddings.position_embedding.weight"),
        &[positions, h],
    );
    o.0.push(Tensor::buffer(
        format!("{p}.embeddings.position_ids"),
        DType::I64,
        &[1, positions],
    ));
    if !siglip {
        o.layer_norm(&format!("{p}.pre_layrnorm"), h);
    }
    for i in 0..layers {
        let l = format!("{p}.encoder.layers.{i}");
        for x in ["k_proj", "v_proj", "q_proj", "out_proj"] {
            o.linear(&format!("{l}.self_attn.{x}"), h, h, true);
        }
        o.layer_norm(&format!("{l}.layer_norm1"), h);
        o.linear(&format!("{l}.mlp.fc1"), h, inter, true);
        o.linear(&format!("{l}.mlp.fc2"), inter, h, true);
        o.layer_norm(&format!("{l}.layer_norm2"), h);
    }
    o.layer_norm(&format!("{p}.post_layernorm"), h);
    if siglip && c.flag("vision_use_head", true) {
        // SiglipMultiheadAttentionPoolingHead: a probe token and torch's MultiheadAttention.
        let hp = format!("{p}.head");
        o.w(format!("{hp}.probe"), &[1, 1, h]);
        o.mm(format!("{hp}.attention.in_proj_weight"), &[3 * h, h]);
        o.w(format!("{hp}.attention.in_proj_bias"), &[3 * h]);
        o.linear(&format!("{hp}.attention.out_proj"), h, h, true);
        o.layer_norm(&format!("{hp}.layernorm"), h);
        o.linear(&format!("{hp}.mlp.fc1"), h, inter, true);
        o.linear(&format!("{hp}.mlp.fc2"), inter, h, true);
    }
    Ok(h)
}

/// Qwen2-VL's (`Qwen2VisionTransformerPretrainedModel`) or Qwen2.5-VL's vision transformer under
/// `visual.`: a 3-D patch embedding, blocks, the patch merger into the language model's width, and
/// the 2-D rotary frequencies.
fn qwen2_vl_vision(o: &mut Out, c: &Config, v2_5: bool) -> Result<(), EstimateError> {
    let depth = c.uint(&["depth"], Some(32))?;
    let heads = c.uint(&["num_heads"], Some(16))?;
    let channels = c.uint(&["in_channels"], Some(3))?;
    let patch = c.uint(&["patch_size"], Some(14))?;
    let temporal = c.uint(&["temporal_patch_size"], Some(2))?;
    let merge = c.uint(&["spatial_merge_size"], Some(2))?;
    let (e, out, mlp) = if v2_5 {
        let e = c.uint(&["hidden_size"], Some(3584))?;
        let out = c.uint(&["out_hidden_size"], Some(3584))?;
        (e, out, c.uint(&["intermediate_size"], Some(3420))?)
    } else {
        let e = c.uint(&["embed_dim"], Some(1280))?;
        let out = c.uint(&["hidden_size"], Some(3584))?;
        let ratio = c.float("mlp_ratio").unwrap_or(4.0);
        (e, out, (e as f64 * ratio) as u64)
    };
    let p = "visual";
    o.mm(
        format!("{p}.patch_embed.proj.weight"),
        &[e, channels, temporal, patch, patch],
    );
    for i in 0..depth {
        let b = format!("{p}.blocks.{i}");
        // Qwen2.5-VL: RMS norms and a gated MLP with biases; Qwen2-VL: LayerNorms, fc1/fc2.
        o.norm(&format!("{b}.norm1"), e, !v2_5);
        o.norm(&format!("{b}.norm2"), e, !v2_5);
        o.linear(&format!("{b}.attn.qkv"), e, 3 * e, true);
        o.linear(&format!("{b}.attn.proj"), e, e, true);
        if v2_5 {
            o.linear(&format!("{b}.mlp.gate_proj"), e, mlp, true);
            o.linear(&format!("{b}.mlp.up_proj"), e, mlp, true);
            o.linear(&format!("{b}.mlp.down_proj"), mlp, e, true);
        } else {
            o.linear(&format!("{b}.mlp.fc1"), e, mlp, true);
            o.linear(&format!("{b}.mlp.fc2"), mlp, e, true);
        }
    }
    let merged = e * merge * merge;
    o.norm(&format!("{p}.merger.ln_q"), e, !v2_5);
    o.linear(&format!("{p}.merger.mlp.0"), merged, merged, true);
    o.linear(&format!("{p}.merger.mlp.2"), merged, out, true);
    // VisionRotaryEmbedding(head_dim / 2): frequencies for half of each head's dimensions.
    o.rotary("rotary_pos_emb", (e / heads.max(1)) / 2, 1.0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::parse(text, "config.json").unwrap()
    }

    #[test]
    fn decoder_families_and_their_defaults() {
        assert_eq!(decoder_family("qwen2_vl_text"), "qwen2");
        assert_eq!(decoder_family("qwen2_5_vl_text"), "qwen2");
        assert_eq!(decoder_family("qwen2_moe"), "qwen2_moe");
        assert!(is_gemma("gemma") && is_gemma("gemma2") && is_gemma("gemma3_text"));
        assert!(!is_gemma("gemma3") && !is_gemma("llama"));
        // Gemma 3's nested text config builds from Gemma3TextConfig's defaults alone.
        let gemma3 = config(r#"{"model_type": "gemma3_text"}"#);
        let s = DecoderShape::of(&gemma3).unwrap();
        assert_eq!(
            (s.v, s.h, s.layers, s.heads, s.kv, s.hd, s.inter),
            (262_208, 2304, 26, 8, 4, 256, 9216)
        );
        assert!(s.sandwich());
    }

    #[test]
    fn experts_sit_on_every_sparse_step_but_the_dense_layers() {
        let c = config(
            r#"{"model_type": "qwen2_moe", "vocab_size": 10, "hidden_size": 16,
                "num_hidden_layers": 6, "num_attention_heads": 2, "intermediate_size": 32,
                "decoder_sparse_step": 2, "mlp_only_layers": [3]}"#,
        );
        let s = DecoderShape::of(&c).unwrap();
        let sparse: Vec<u64> = (0..6).filter(|&i| s.sparse(i)).collect();
        assert_eq!(sparse, [1, 5]);
        assert!(!s.sandwich());
        // Every layer of Mixtral has experts, whatever the step.
        let c = config(
            r#"{"model_type": "mixtral", "vocab_size": 10, "hidden_size": 16,
                "num_hidden_layers": 3, "num_attention_heads": 2, "intermediate_size": 32,
                "decoder_sparse_step": 2, "mlp_only_layers": [1]}"#,
        );
        let s = DecoderShape::of(&c).unwrap();
        assert!((0..3).all(|i| s.sparse(i)));
        // A dense family has none.
        let c = config(
            r#"{"model_type": "llama", "vocab_size": 10, "hidden_size": 16,
                "num_hidden_layers": 3, "num_attention_heads": 2, "intermediate_size": 32}"#,
        );
        assert!(!(0..3).any(|i| DecoderShape::of(&c).unwrap().sparse(i)));
    }

    #[test]
    fn the_shared_expert_is_built_and_counted_as_the_dense_mlp() {
        let c = config(
            r#"{"model_type": "qwen2_moe", "vocab_size": 10, "hidden_size": 16,
                "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32,
                "shared_expert_intermediate_size": 24, "num_experts": 4}"#,
        );
        let built = decoder(&c).unwrap();
        let shared = built
            .tensors
            .iter()
            .find(|t| t.name == "layers.1.mlp.shared_expert.gate_proj.weight")
            .unwrap();
        assert_eq!(shared.numel, 24 * 16);
        assert_eq!(built.dims.mlp_size, 24);
        assert_eq!(built.dims.experts, 4);
    }

    #[test]
    fn multimodal_parts_and_nested_text_defaults() {
        assert_eq!(
            multimodal_parts("gemma3"),
            ("gemma3_text", "siglip_vision_model")
        );
        assert_eq!(multimodal_parts("llava"), ("llama", "clip_vision_model"));
        assert_eq!(multimodal_parts("qwen2_vl"), ("qwen2_vl_text", "qwen2_vl"));
        assert_eq!(
            multimodal_parts("qwen2_5_vl"),
            ("qwen2_5_vl_text", "qwen2_5_vl")
        );
        assert!(text_defaults("llama").contains(&("intermediate_size", 11008)));
        assert!(text_defaults("mistral").contains(&("num_key_value_heads", 8)));
        assert_eq!(
            text_defaults("qwen2_5_vl_text"),
            text_defaults("qwen2_vl_text")
        );
        assert!(text_defaults("gemma3_text").is_empty());
        // Llava's text config naming only its vocabulary builds the Llama of those defaults.
        let llava = config(r#"{"model_type": "llava", "text_config": {"vocab_size": 32064}}"#);
        let language = multimodal_language(&llava, "llama").unwrap();
        assert_eq!(
            (language.dims.vocab_size, language.dims.hidden_size),
            (32064, 4096)
        );
        assert_eq!(language.dims.mlp_size, 11008);
    }

    #[test]
    fn llava_s_default_vision_tower_is_clip_at_336_pixels() {
        let llava = config(r#"{"model_type": "llava"}"#);
        let vision = multimodal_vision_config(&llava, "clip_vision_model");
        let mut o = Out(Vec::new());
        assert_eq!(
            vision_tower(&mut o, "llava", &vision, "clip_vision_model").unwrap(),
            1024
        );
        let positions =
            o.0.iter()
                .find(|t| t.name == "vision_tower.embeddings.position_embedding.weight")
                .unwrap();
        // (336 / 14)² patches and the class token, 1024 wide.
        assert_eq!(positions.numel, (24 * 24 + 1) * 1024);
        let unknown = Config::with_type(Map::new(), "owlvit", "vision_config".into());
        assert!(matches!(
            vision_tower(&mut o, "llava", &unknown, "clip_vision_model"),
            Err(EstimateError::UnknownArchitecture { .. })
        ));
    }
}
