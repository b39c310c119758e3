//! What accelerate does not answer: memory per GPU for a training strategy over N GPUs (weights,
//! gradients, Adam states, fp32 master weights, the all-gather buffer of sharded strategies,
//! activations) or for inference (weights and KV cache), whether it fits, and the largest batch or
//! context that does. Every formula here is stated in the man page (`FORMULAS` below).

use super::arch::Dims;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Everything replicated on every GPU.
    Ddp,
    /// FSDP FULL_SHARD: parameters, gradients and optimizer state sharded.
    Fsdp,
    /// ZeRO stage 1: optimizer state (and master weights) sharded.
    Zero1,
    /// ZeRO stage 2: plus gradients.
    Zero2,
    /// ZeRO stage 3: plus parameters.
    Zero3,
}

impl Strategy {
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Ddp => "ddp",
            Strategy::Fsdp => "fsdp",
            Strategy::Zero1 => "zero1",
            Strategy::Zero2 => "zero2",
            Strategy::Zero3 => "zero3",
        }
    }
    fn shards_optimizer(self) -> bool {
        self != Strategy::Ddp
    }
    fn shards_gradients(self) -> bool {
        matches!(self, Strategy::Zero2 | Strategy::Zero3 | Strategy::Fsdp)
    }
    fn shards_parameters(self) -> bool {
        matches!(self, Strategy::Zero3 | Strategy::Fsdp)
    }
}

/// Training precision: the dtype of the working weights, gradients and activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Pure fp32: 4-byte weights and gradients, no master copy.
    Fp32,
    /// bf16 mixed precision: 2-byte weights and gradients, fp32 master weights.
    Bf16,
    /// fp16 mixed precision: as bf16.
    Fp16,
}

impl Precision {
    fn bytes(self) -> f64 {
        match self {
            Precision::Fp32 => 4.0,
            Precision::Bf16 | Precision::Fp16 => 2.0,
        }
    }
    fn mixed(self) -> bool {
        self != Precision::Fp32
    }
}

/// Data type of the KV cache or of inference weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreDtype {
    Float32,
    Float16,
    Bfloat16,
    Fp8,
    Int8,
    Int4,
}

impl StoreDtype {
    pub fn bytes(self) -> f64 {
        match self {
            StoreDtype::Float32 => 4.0,
            StoreDtype::Float16 | StoreDtype::Bfloat16 => 2.0,
            StoreDtype::Fp8 | StoreDtype::Int8 => 1.0,
            StoreDtype::Int4 => 0.5,
        }
    }
}

/// A training setup.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Training {
    pub strategy: Strategy,
    pub num_gpus: u64,
    pub offload: bool,
    pub precision: Precision,
    /// Micro-batch size per GPU and sequence length; activations need both.
    pub batch_size: Option<u64>,
    pub seq_len: Option<u64>,
    pub grad_checkpointing: bool,
}

/// Per-GPU bytes, by component. Components that do not apply are zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Breakdown {
    pub weights: f64,
    pub gradients: f64,
    pub optimizer_states: f64,
    pub master_weights: f64,
    pub gather_buffer: f64,
    pub activations: f64,
    pub kv_cache: f64,
    /// Per-GPU share of what `--offload` moves to CPU memory.
    pub cpu_offloaded: f64,
}

impl Breakdown {
    /// What must fit on the GPU.
    pub fn gpu_total(&self) -> f64 {
        self.weights
            + self.gradients
            + self.optimizer_states
            + self.master_weights
            + self.gather_buffer
            + self.activations
            + self.kv_cache
    }
}

/// Adam keeps two fp32 moments per parameter.
const ADAM_BYTES: f64 = 8.0;
/// Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"), eq. 1:
/// a transformer layer stores s·b·h·(34 + 5·a·s/h) bytes of 16-bit activations; with fused
/// (flash/SDPA) attention the a·s term, the attention matrix, is not stored.
const LAYER_ACTIVATION_FACTOR: f64 = 34.0;

/// Activation bytes per GPU for micro-batch `b` and sequence `s`.
pub fn activations(dims: &Dims, b: u64, s: u64, checkpointing: bool, precision: Precision) -> f64 {
    let (b, s, h, l) = (
        b as f64,
        s as f64,
        dims.hidden_size as f64,
        dims.num_layers as f64,
    );
    let scale = precision.bytes() / 2.0;
    let layer = LAYER_ACTIVATION_FACTOR * s * b * h * scale;
    let layers = if checkpointing {
        // Each layer's input is kept; one layer at a time is recomputed in full during backward.
        l * 2.0 * s * b * h * scale + layer
    } else {
        l * layer
    };
    // fp32 logits for the loss.
    layers + 4.0 * s * b * dims.vocab_size as f64
}

/// Per-GPU memory for a training setup. `params` are the trained parameters, `largest_layer_params`
/// those of the largest no-split layer (what sharded strategies gather at once).
pub fn training(
    params: u64,
    largest_layer_params: u64,
    dims: Option<&Dims>,
    t: &Training,
) -> Breakdown {
    let p = params as f64;
    let n = t.num_gpus.max(1) as f64;
    let w = t.precision.bytes();
    let mut out = Breakdown {
        weights: w * p,
        gradients: w * p,
        optimizer_states: ADAM_BYTES * p,
        master_weights: if t.precision.mixed() { 4.0 * p } else { 0.0 },
        ..Breakdown::default()
    };
    if t.strategy.shards_optimizer() {
        out.optimizer_states /= n;
        out.master_weights /= n;
    }
    if t.strategy.shards_gradients() {
        out.gradients /= n;
    }
    if t.strategy.shards_parameters() {
        out.weights /= n;
        // One unit's full parameters and full gradients exist at once (all-gather, reduce-scatter).
        out.gather_buffer = 2.0 * w * largest_layer_params as f64;
    }
    if t.offload {
        out.cpu_offloaded = out.optimizer_states + out.master_weights;
        out.optimizer_states = 0.0;
        out.master_weights = 0.0;
        if t.strategy.shards_parameters() {
            out.cpu_offloaded += out.weights + out.gradients;
            out.weights = 0.0;
            out.gradients = 0.0;
        }
    }
    if let (Some(dims), Some(b), Some(s)) = (dims, t.batch_size, t.seq_len) {
        out.activations = activations(dims, b, s, t.grad_checkpointing, t.precision);
    }
    out
}

/// KV-cache bytes for `context` tokens of `batch` sequences: K and V for every layer and KV head.
pub fn kv_cache(dims: &Dims, context: u64, batch: u64, dtype: StoreDtype) -> f64 {
    2.0 * dims.num_layers as f64
        * dims.num_key_value_heads as f64
        * dims.head_dim as f64
        * context as f64
        * batch as f64
        * dtype.bytes()
}

/// Per-GPU memory for inference: weights at `weight_bytes` in total and the KV cache, both split
/// evenly over `num_gpus` (tensor parallelism).
pub fn inference(weight_bytes: f64, kv: f64, num_gpus: u64) -> Breakdown {
    let n = num_gpus.max(1) as f64;
    Breakdown {
        weights: weight_bytes / n,
        kv_cache: kv / n,
        ..Breakdown::default()
    }
}

/// The largest `x` ≥ 0 with `fixed + x·per_unit ≤ budget`, when memory grows linearly in `x`.
pub fn largest_fitting(budget: f64, fixed: f64, per_unit: f64) -> u64 {
    if per_unit <= 0.0 || fixed > budget {
        return 0;
    }
    ((budget - fixed) / per_unit).floor() as u64
}

/// Parses a memory size: a number with an optional unit B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB.
/// Units are binary (GB = 2^30 bytes), as in accelerate's own output.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a size like 80GB or 81920MiB"))?;
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit.trim_end_matches('b').trim_end_matches('i');
    let shift = match unit {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return Err(format!("`{text}`: unknown unit (use B, KB, MB, GB or TB)")),
    };
    Ok((value * (1u64 << shift) as f64).round() as u64)
}

/// The FORMULAS section of the man page.
pub const FORMULAS: &[&str] = &[
    "Default table (exactly accelerate estimate-memory): T = sum over every parameter and buffer of numel x bytes, where floating-point tensors count 4 bytes (accelerate builds the model in float32) and integer/bool tensors their own size (bool 1/8). Largest Layer walks the root's tensors and child modules: a module with no child modules, or whose class is in _no_split_modules (decoder layers, BERT embeddings, T5 blocks), is one layer; other modules are expanded into their child modules. float16, int8 and int4 divide both columns by 2, 4 and 8. Training using Adam is 4T for float32, 2T for float16 and N/A for int8/int4. Sizes are printed as accelerate's convert_bytes does: divided by 1024 until below 1024, rounded to 2 decimals, units bytes, KB, MB, GB, TB, PB.",
    "Per-GPU training (--strategy, --num-gpus N): P = trained parameters (floating-point tensors that are not buffers). w = 2 bytes for --precision bf16/fp16 (default bf16), 4 for fp32. Weights = w.P, gradients = w.P, Adam optimizer states = 8.P (two fp32 moments), master weights = 4.P with bf16/fp16 mixed precision, 0 with fp32. ddp divides nothing; zero1 divides optimizer states and master weights by N; zero2 also gradients; zero3 and fsdp also weights, and add an all-gather buffer of 2.w.Lp, where Lp = parameters of the largest layer (one unit's full weights and gradients in flight).",
    "--offload moves the optimizer states and master weights to CPU memory (DeepSpeed offload_optimizer, FSDP cpu_offload); with zero3 and fsdp also the sharded weights and gradients (offload_param). The moved per-GPU share is reported as CPU offloaded and not counted against GPU memory. --offload does not apply to ddp.",
    "Activations (--batch-size b per GPU, --seq-len s): after Korthikanti et al. 2022, each of the L layers stores 34.s.b.h bytes of 16-bit activations (h = hidden size), assuming fused flash/SDPA attention, which does not store the s x s attention matrix; fp32 training doubles it. --grad-checkpointing keeps only each layer's input, 2.s.b.h bytes per layer, plus one layer recomputed in full (34.s.b.h). Add 4.s.b.V bytes of fp32 logits (V = vocabulary size). Activations are not sharded by ZeRO or FSDP.",
    "Inference (--context C, --batch-size B, default 1): weights = T converted to --dtype (default float16: T/2; bfloat16 T/2; fp8 and int8 T/4; int4 T/8; float32 T); KV cache = 2 . L . kv_heads . head_dim . C . B . bytes(--kv-dtype, default float16), which accounts for grouped-query (GQA) and multi-query (MQA) attention through the config's num_key_value_heads; sliding-window layers are counted at full context. With --num-gpus N both are split evenly (tensor parallelism).",
    "Fitting (--gpu-memory SIZE, else the memory of the first detected GPU): the total per GPU must be at most SIZE. Sizes use binary units: 80GB = 80 x 2^30 bytes. The largest micro-batch (training, needs --seq-len) or context (inference) that fits is found by solving the linear formula above. Not counted: the CUDA context and kernels (typically 0.5 to 1 GiB), allocator fragmentation, communication buffers other than the gather buffer, and temporary tensors; leave headroom. Exit status 1 when it does not fit.",
    "Architectures with formulas (from config.json): llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gemma, gemma2, phi3, gpt2, gpt_neox, bert, t5 — the base model transformers' AutoModel builds, without task head, as accelerate sizes it. Any other architecture is sized from its safetensors headers; those count the checkpoint as stored (task head included, tied weights once, non-persistent buffers absent), with floating-point tensors at 4 bytes.",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn dims() -> Dims {
        Dims {
            model_type: "llama".into(),
            hidden_size: 4096,
            num_layers: 32,
            num_attention_heads: 32,
            num_key_value_heads: 8,
            head_dim: 128,
            vocab_size: 128_256,
        }
    }

    fn setup(strategy: Strategy, offload: bool) -> Training {
        Training {
            strategy,
            num_gpus: 8,
            offload,
            precision: Precision::Bf16,
            batch_size: None,
            seq_len: None,
            grad_checkpointing: false,
        }
    }

    #[test]
    fn strategies_by_hand() {
        // 1000 parameters, largest layer 100, 8 GPUs, bf16 mixed precision.
        let b = training(1000, 100, None, &setup(Strategy::Ddp, false));
        assert_eq!(
            (b.weights, b.gradients, b.optimizer_states, b.master_weights),
            (2000.0, 2000.0, 8000.0, 4000.0)
        );
        assert_eq!(b.gpu_total(), 16000.0);
        let b = training(1000, 100, None, &setup(Strategy::Zero1, false));
        assert_eq!(
            (b.weights, b.gradients, b.optimizer_states, b.master_weights),
            (2000.0, 2000.0, 1000.0, 500.0)
        );
        let b = training(1000, 100, None, &setup(Strategy::Zero2, false));
        assert_eq!(b.gradients, 250.0);
        assert_eq!(b.gpu_total(), 2000.0 + 250.0 + 1000.0 + 500.0);
        let b = training(1000, 100, None, &setup(Strategy::Zero3, false));
        assert_eq!((b.weights, b.gather_buffer), (250.0, 400.0));
        assert_eq!(b.gpu_total(), 250.0 + 250.0 + 1000.0 + 500.0 + 400.0);
        assert_eq!(training(1000, 100, None, &setup(Strategy::Fsdp, false)), b);
        let b = training(1000, 100, None, &setup(Strategy::Zero2, true));
        assert_eq!((b.optimizer_states, b.cpu_offloaded), (0.0, 1500.0));
        let b = training(1000, 100, None, &setup(Strategy::Zero3, true));
        assert_eq!((b.gpu_total(), b.cpu_offloaded), (400.0, 2000.0));
    }

    #[test]
    fn activations_and_kv_by_hand() {
        let d = dims();
        // 34·s·b·h per layer, 32 layers, plus fp32 logits.
        let a = activations(&d, 1, 4096, false, Precision::Bf16);
        assert_eq!(a, 32.0 * 34.0 * 4096.0 * 4096.0 + 4.0 * 4096.0 * 128_256.0);
        let a = activations(&d, 2, 1024, true, Precision::Bf16);
        assert_eq!(
            a,
            32.0 * 2.0 * 2048.0 * 4096.0 + 34.0 * 2048.0 * 4096.0 + 4.0 * 2048.0 * 128_256.0
        );
        // Llama-3-8B: 128 KiB of fp16 KV per token (8 KV heads, not 32).
        assert_eq!(kv_cache(&d, 1, 1, StoreDtype::Float16), 131_072.0);
        assert_eq!(
            kv_cache(&d, 8192, 2, StoreDtype::Int4),
            131_072.0 * 8192.0 * 2.0 / 4.0
        );
    }

    #[test]
    fn sizes_and_fitting() {
        assert_eq!(parse_size("80GB"), Ok(80 << 30));
        assert_eq!(parse_size("81920MiB"), Ok(80 << 30));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("512"), Ok(512));
        assert!(parse_size("80 parsecs").is_err());
        assert_eq!(largest_fitting(100.0, 40.0, 7.0), 8);
        assert_eq!(largest_fitting(100.0, 140.0, 7.0), 0);
    }
}
