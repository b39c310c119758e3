//! What accelerate does not answer: memory per GPU for a training strategy over N GPUs (weights,
//! gradients, Adam states, fp32 master weights, the all-gather buffer of sharded strategies,
//! DeepSpeed's gradient reduction bucket, activations) or for inference (weights and KV cache),
//! whether it fits, and the largest batch or context that does. Every formula here is stated in the man page (`FORMULAS` below).

use super::arch::{Attention, Dims};

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
    /// DeepSpeed's gradient reduction bucket (reduce_bucket_size elements in the training dtype).
    pub reduce_bucket: f64,
    /// torch DDP under bf16/fp16 autocast: the 16-bit copies of the matrix-product weights that
    /// autocast casts in forward and keeps for the step (saved for backward).
    pub autocast_cache: f64,
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
            + self.reduce_bucket
            + self.autocast_cache
            + self.activations
            + self.kv_cache
    }
}

/// Adam keeps two fp32 moments per parameter, and torch.optim.Adam a `step` counter per parameter
/// tensor: a 0-dim float32 tensor (torch/optim/adam.py::_init_group; on the CPU unless capturable or
/// fused).
const ADAM_BYTES: f64 = 8.0;
const ADAM_STEP_BYTES: f64 = 4.0;

/// One trained parameter tensor: its element count and first dimension (FSDP2 shards on it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Param {
    pub numel: u64,
    pub rows: u64,
    /// A weight of a matrix product (autocast casts it).
    pub matmul: bool,
}

impl Param {
    /// FSDP2's shard on `rank` of `n`: torch.chunk on dim 0, so chunks of ceil(rows/n) rows and a
    /// short or empty last ones (torch/distributed/fsdp/_fully_shard/_fsdp_param.py
    /// `_init_sharded_param`). Returns (padded, local) elements: the sharded parameter's storage is
    /// padded to the full chunk on every rank (and so is the reduce-scattered gradient buffer);
    /// tensors made from the local shard, like Adam's moments, are not.
    fn fsdp_shard(self, rank: u64, n: u64) -> (u64, u64) {
        if self.rows == 0 || self.numel == 0 {
            return (0, 0);
        }
        let rest = self.numel / self.rows;
        let chunk = self.rows.div_ceil(n.max(1));
        let local = self
            .rows
            .saturating_sub(rank.saturating_mul(chunk))
            .min(chunk);
        (chunk * rest, local * rest)
    }
}

/// DeepSpeed ZeRO settings the estimate is not told, at their defaults
/// (deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig): `reduce_bucket_size`,
/// `stage3_param_persistence_threshold` and `sub_group_size`.
const DS_REDUCE_BUCKET: f64 = 5e8;
const DS_PERSISTENCE_THRESHOLD: u64 = 100_000;
const DS_SUB_GROUP: u64 = 1_000_000_000;
/// stage_1_and_2.py `nccl_start_alignment_factor`: every rank's partition of the flat buffer starts
/// 4-byte aligned, so the flat buffer is padded to a multiple of 2·N elements.
const DS_ALIGNMENT: u64 = 2;

/// ZeRO-1/2 (deepspeed/runtime/zero/stage_1_and_2.py, DeepSpeedZeroOptimizer) on `rank`.
///
/// `__init__` flattens the parameters, in module order, into one buffer of the training dtype
/// (`flatten_dense_tensors_aligned`, padded by `align_dense_tensors` to a multiple of 2·N): the
/// module's weights are views into it, so every rank holds all F elements. `get_data_parallel_partitions`
/// cuts it into N partitions of F/N; each rank clones its partition to fp32
/// (`single_partition_of_fp32_groups`: `.clone()` then `.to(float32)`, a copy even when training
/// in fp32) and the optimizer sees only that tensor, so Adam holds 8·F/N plus one 4-byte step.
///
/// Gradients: `setup_buckets` allocates the reduction bucket (`torch.empty(reduce_bucket_size)`) at
/// the first gradient of each backward and `_release_ipg_buffers` frees it after. ZeRO-2 copies each
/// gradient into the bucket as autograd produces it and keeps the rank's share in
/// `grads_in_partition`, sized by `get_partition_info`'s `params_in_partition`: every parameter
/// that overlaps the partition, whole, so the parameters straddling its edges count in full on both
/// sides; `_get_flat_partition_unpadded` adds a zero tensor for what no parameter covers (the padding
/// of the last rank). ZeRO-1 keeps every parameter's full `.grad` until `reduce_gradients` at the end
/// of backward, so its peak holds all of them.
fn zero_1_2(params: &[Param], t: &Training, rank: u64) -> Breakdown {
    let w = t.precision.bytes();
    let n = t.num_gpus.max(1);
    let total: u64 = params.iter().map(|p| p.numel).sum();
    let flat = total.div_ceil(DS_ALIGNMENT * n) * DS_ALIGNMENT * n;
    let part = flat / n;
    let gradients = if t.strategy == Strategy::Zero1 {
        w * total as f64
    } else {
        let (start, end) = (rank * part, (rank + 1) * part);
        let (mut held, mut covered, mut offset) = (0u64, 0u64, 0u64);
        for p in params {
            let (a, b) = (offset, offset.saturating_add(p.numel));
            if a < end && b > start {
                held += p.numel;
                covered += b.min(end) - a.max(start);
            }
            offset = b;
        }
        w * (held + (part - covered)) as f64
    };
    Breakdown {
        weights: w * flat as f64,
        gradients,
        optimizer_states: ADAM_BYTES * part as f64 + ADAM_STEP_BYTES,
        master_weights: 4.0 * part as f64,
        reduce_bucket: w * DS_REDUCE_BUCKET,
        ..Breakdown::default()
    }
}

/// ZeRO-3 (deepspeed/runtime/zero/stage3.py, DeepSpeedZeroOptimizer_Stage3; partition_parameters.py).
///
/// Each parameter is partitioned on its own: `_partition_param` gives every rank ceil(numel/N)
/// elements (`_aligned_size` pads to a multiple of N), gathered into one flat buffer
/// (`_create_fp16_partitions_with_defragmentation`, `lp_param_buffer`) of S = sum of ceil(numel/N).
/// Parameters of at most `stage3_param_persistence_threshold` elements are persistent
/// (parameter_offload.py `mark_persistent_parameters`): once gathered they stay whole on every rank,
/// on top of their partition, in the buffer the all-gather allocates (partition_parameters.py
/// `_allgather_param`: the aligned size, N·ceil(numel/N)). Gradients: `grad_partitions_flat_buffer`, S elements, and the
/// reduction bucket, allocated once at init (`torch.empty(reduce_bucket_size)`) and kept. Master
/// weights: `_create_fp32_partitions` clones the partitions to fp32 in fp32 training too (its
/// shortcut compares a torch.device with the device name string, which never matches). Adam: 8·S,
/// plus a 4-byte step per sub-group (`_create_fp16_sub_groups`: parameters in order until
/// `sub_group_size` partition elements).
fn zero_3(params: &[Param], num_gpus: u64, w: f64) -> Breakdown {
    let n = num_gpus.max(1);
    let parts: Vec<u64> = params.iter().map(|p| p.numel.div_ceil(n)).collect();
    let s: u64 = parts.iter().sum();
    let persistent: u64 = params
        .iter()
        .zip(&parts)
        .filter(|(p, _)| p.numel <= DS_PERSISTENCE_THRESHOLD)
        .map(|(_, part)| part * n)
        .sum();
    let sub_groups = if s <= DS_SUB_GROUP {
        1
    } else {
        let (mut groups, mut size) = (0u64, 0u64);
        for (i, part) in parts.iter().enumerate() {
            size = size.saturating_add(*part);
            if size >= DS_SUB_GROUP || i + 1 == parts.len() {
                groups += 1;
                size = 0;
            }
        }
        groups
    };
    Breakdown {
        weights: w * (s + persistent) as f64,
        gradients: w * s as f64,
        optimizer_states: ADAM_BYTES * s as f64 + ADAM_STEP_BYTES * sub_groups as f64,
        master_weights: 4.0 * s as f64,
        reduce_bucket: w * DS_REDUCE_BUCKET,
        ..Breakdown::default()
    }
}

/// Per-GPU memory for a training setup on rank 0 (the largest shard). `params` are the trained
/// parameter tensors, `largest_layer_params` those of the largest no-split layer (what sharded
/// strategies gather at once).
pub fn training(
    params: &[Param],
    largest_layer_params: u64,
    dims: Option<&Dims>,
    t: &Training,
) -> Breakdown {
    training_on_rank(params, largest_layer_params, dims, t, 0)
}

/// As `training`, for one rank: FSDP2's uneven shards differ between ranks.
pub fn training_on_rank(
    params: &[Param],
    largest_layer_params: u64,
    dims: Option<&Dims>,
    t: &Training,
    rank: u64,
) -> Breakdown {
    let p: f64 = params.iter().map(|x| x.numel as f64).sum();
    let tensors = params.len() as f64;
    let w = t.precision.bytes();
    let mut out = match t.strategy {
        // torch's DDP and FSDP2 keep fp32 parameters under mixed precision (autocast, or FSDP2's
        // MixedPrecisionPolicy casting at all-gather): those are the master weights, and their
        // gradients are fp32 too.
        Strategy::Ddp => Breakdown {
            weights: 4.0 * p,
            gradients: 4.0 * p,
            optimizer_states: ADAM_BYTES * p + ADAM_STEP_BYTES * tensors,
            // torch/csrc/autograd: autocast caches the cast of every fp32 leaf parameter an
            // autocast op (linear, matmul, conv) takes, until the autocast region ends; the
            // copies are saved for backward. FSDP2's bf16 parameters and DeepSpeed's bf16 module
            // need no cast.
            autocast_cache: if t.precision.mixed() {
                w * params
                    .iter()
                    .filter(|x| x.matmul)
                    .map(|x| x.numel as f64)
                    .sum::<f64>()
            } else {
                0.0
            },
            ..Breakdown::default()
        },
        Strategy::Fsdp => {
            let (padded, local) = params.iter().fold((0.0, 0.0), |(a, b), x| {
                let (pad, loc) = x.fsdp_shard(rank, t.num_gpus);
                (a + pad as f64, b + loc as f64)
            });
            Breakdown {
                weights: 4.0 * padded,
                gradients: 4.0 * padded,
                optimizer_states: ADAM_BYTES * local + ADAM_STEP_BYTES * tensors,
                // One unit's full parameters and full gradients exist at once (all-gather,
                // reduce-scatter), in the compute dtype.
                gather_buffer: 2.0 * w * largest_layer_params as f64,
                ..Breakdown::default()
            }
        }
        Strategy::Zero1 | Strategy::Zero2 => zero_1_2(params, t, rank),
        Strategy::Zero3 => {
            let mut out = zero_3(params, t.num_gpus, w);
            out.gather_buffer = 2.0 * w * largest_layer_params as f64;
            out
        }
    };
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

/// Bytes stored for backward per token, by term, fitted to torch's profiler on transformers'
/// modelling code (scripts/bench/estimate-vs-measured): (fp32, bf16 autocast).
struct PerToken {
    /// x hidden size, per layer: norms, attention inputs and outputs, residuals.
    layer_hidden: (f64, f64),
    /// x attention width (heads x head_dim), per layer, where the family's fit separates it from
    /// the hidden size (Gemma-2's widths differ; the others' fits hold it in `layer_hidden`).
    layer_inner: (f64, f64),
    /// x MLP size, per layer: SwiGLU keeps gate, up, act(gate) and their product.
    gated_mlp: (f64, f64),
    /// x MLP size, per layer: GPT-2's up, GELU and its tanh-approximation intermediates.
    plain_mlp: (f64, f64),
    /// x experts-per-token x expert size, per layer: the routed experts' SwiGLU (kept in fp32
    /// under autocast too, as transformers computes them).
    expert_mlp: (f64, f64),
    /// x experts, per layer: router logits and probabilities.
    router: (f64, f64),
    /// x hidden size, per layer per routed expert choice: the gathered token copies and weighted
    /// outputs.
    expert_hidden: (f64, f64),
    /// x hidden size, once: embeddings output and final norm.
    hidden: (f64, f64),
    /// x vocabulary, once: logits, their fp32 copy and log-softmax for the loss.
    logits: (f64, f64),
    /// x vocabulary, once: Gemma-2's final logit soft-capping (tanh).
    final_softcap: (f64, f64),
}

/// The Llama-shaped decoders, GPT-2, GPT-NeoX and BERT, with SDPA.
const PER_TOKEN: PerToken = PerToken {
    layer_hidden: (37.0, 33.0),
    layer_inner: (0.0, 0.0),
    gated_mlp: (16.0, 8.75),
    plain_mlp: (20.0, 10.5),
    expert_mlp: (16.0, 16.0),
    router: (4.0, 4.25),
    expert_hidden: (10.3, 11.6),
    hidden: (11.0, 11.0),
    logits: (12.0, 12.0),
    final_softcap: (0.0, 0.0),
};

/// Gemma-2 (fitted under the eager attention transformers runs it with): four norms per layer,
/// the attention width apart from the hidden size, final soft-capping.
const GEMMA2: PerToken = PerToken {
    layer_hidden: (40.0, 42.0),
    layer_inner: (16.0, 8.0),
    gated_mlp: (16.0, 8.0),
    hidden: (12.0, 10.5),
    logits: (12.0, 12.0),
    final_softcap: (4.0, 2.0),
    ..PER_TOKEN
};

/// Per query head, per (query, key) pair, per attention: what the attention implementation keeps
/// for backward, (fp32, bf16 autocast). Eager keeps the probabilities (in bf16 also their fp32
/// softmax), the tanh of soft-capped scores, and with dropout its mask and the dropped
/// probabilities; SDPA on the math kernel (what the CPU runs with dropout) keeps scores,
/// probabilities, mask and dropped probabilities; without dropout SDPA, flash and flex keep
/// none.
struct Scores {
    eager: (f64, f64),
    eager_softcap: (f64, f64),
    eager_dropout: (f64, f64),
    sdpa_dropout: (f64, f64),
    /// x attention width per token per layer: eager's extra copies (transposed output) over SDPA.
    eager_inner: (f64, f64),
}

const SCORES: Scores = Scores {
    eager: (4.0, 6.0),
    eager_softcap: (4.0, 2.0),
    eager_dropout: (8.0, 4.0),
    sdpa_dropout: (12.0, 12.0),
    eager_inner: (3.75, 1.75),
};

/// T5 (T5ForConditionalGeneration), fitted with and without dropout (`dropout_rate`, which T5
/// applies after embeddings, attention, MLP and residual branches alike): per token per encoder
/// and decoder layer x d_model; per token per attention x its width (a decoder layer has two:
/// self and cross); per token per layer x d_ff for the ReLU and the gated-GELU MLP; once per
/// token x d_model and x vocabulary (fitted under SDPA; eager's measured up to a few percent
/// less in bf16). Per (query, key) pair per head, per encoder and per decoder layer: what the
/// attention keeps (SDPA adds the position bias as a float mask, so the CPU runs its math
/// kernel), (fp32, bf16) for eager. And per (query, key) pair once, whatever the batch: the
/// relative-position bucket indices (int64, both stacks), plus under SDPA a bias mask per decoder
/// layer and, without dropout, per head.
struct T5Terms {
    encoder_hidden: (f64, f64),
    decoder_hidden: (f64, f64),
    inner: (f64, f64),
    relu_mlp: (f64, f64),
    gated_mlp: (f64, f64),
    hidden: (f64, f64),
    logits: (f64, f64),
    sdpa_encoder_pairs: f64,
    sdpa_decoder_pairs: f64,
    eager_encoder_pairs: (f64, f64),
    eager_decoder_pairs: (f64, f64),
    bias_pairs: f64,
    sdpa_bias_pairs_per_decoder_layer: f64,
    sdpa_bias_pairs_per_head: f64,
}

const T5_DROPOUT: T5Terms = T5Terms {
    encoder_hidden: (32.0, 28.25),
    decoder_hidden: (48.0, 46.5),
    inner: (16.0, 15.5),
    relu_mlp: (12.0, 5.5),
    gated_mlp: (32.0, 16.0),
    hidden: (40.0, 33.25),
    logits: (12.0, 12.0),
    sdpa_encoder_pairs: 12.0,
    sdpa_decoder_pairs: 24.0,
    eager_encoder_pairs: (12.0, 10.0),
    eager_decoder_pairs: (24.0, 16.0),
    bias_pairs: 16.0,
    sdpa_bias_pairs_per_decoder_layer: 1.0,
    sdpa_bias_pairs_per_head: 0.0,
};

const T5_NO_DROPOUT: T5Terms = T5Terms {
    encoder_hidden: (24.0, 24.25),
    decoder_hidden: (36.5, 34.25),
    inner: (16.0, 12.25),
    relu_mlp: (4.0, 4.0),
    gated_mlp: (28.0, 15.0),
    hidden: (23.5, 25.25),
    logits: (12.0, 12.0),
    sdpa_encoder_pairs: 4.0,
    sdpa_decoder_pairs: 4.0,
    eager_encoder_pairs: (4.0, 6.0),
    eager_decoder_pairs: (8.0, 8.0),
    bias_pairs: 16.0,
    sdpa_bias_pairs_per_decoder_layer: 1.0,
    sdpa_bias_pairs_per_head: 4.0,
};

/// What one forward and backward keep, by what it scales with.
struct Stored {
    /// Bytes per token of each encoder-side (or decoder-only) layer, and of each decoder layer of
    /// an encoder-decoder.
    layer: f64,
    decoder_layer: f64,
    /// Bytes per (query, key) pair of one sequence, per layer.
    layer_pairs: f64,
    decoder_layer_pairs: f64,
    /// Bytes per token once (embeddings, final norm, logits and loss).
    once: f64,
    /// Bytes per (query, key) pair once per micro-batch, whatever its size (T5's bias indices).
    once_pairs: f64,
}

fn stored(dims: &Dims, precision: Precision) -> Stored {
    let pick = |c: (f64, f64)| if precision.mixed() { c.1 } else { c.0 };
    let h = dims.hidden_size as f64;
    let heads = dims.num_attention_heads as f64;
    let inner = heads * dims.head_dim as f64;
    if dims.model_type == "t5" {
        let t = if dims.hidden_dropout {
            &T5_DROPOUT
        } else {
            &T5_NO_DROPOUT
        };
        let mlp = pick(if dims.gated_mlp {
            t.gated_mlp
        } else {
            t.relu_mlp
        }) * dims.mlp_size as f64;
        // Flex attention takes the bias as a score modification and keeps no matrix.
        let (encoder_pairs, decoder_pairs, bias) = match dims.attn_implementation {
            Attention::Eager => (
                pick(t.eager_encoder_pairs),
                pick(t.eager_decoder_pairs),
                t.bias_pairs,
            ),
            Attention::Sdpa => (
                t.sdpa_encoder_pairs,
                t.sdpa_decoder_pairs,
                t.bias_pairs
                    + t.sdpa_bias_pairs_per_decoder_layer * dims.decoder_layers as f64
                    + t.sdpa_bias_pairs_per_head * heads,
            ),
            _ => (0.0, 0.0, t.bias_pairs),
        };
        return Stored {
            layer: pick(t.encoder_hidden) * h + pick(t.inner) * inner + mlp,
            decoder_layer: pick(t.decoder_hidden) * h + 2.0 * pick(t.inner) * inner + mlp,
            layer_pairs: encoder_pairs * heads,
            decoder_layer_pairs: decoder_pairs * heads,
            once: pick(t.hidden) * h + pick(t.logits) * dims.vocab_size as f64,
            once_pairs: bias,
        };
    }
    let p = if dims.model_type == "gemma2" {
        &GEMMA2
    } else {
        &PER_TOKEN
    };
    let mlp = if dims.gated_mlp {
        pick(p.gated_mlp)
    } else {
        pick(p.plain_mlp)
    };
    let mut layer =
        pick(p.layer_hidden) * h + pick(p.layer_inner) * inner + mlp * dims.mlp_size as f64;
    if dims.experts > 0 {
        layer += pick(p.expert_mlp) * dims.expert_mlp_size as f64
            + pick(p.router) * dims.experts as f64
            + pick(p.expert_hidden) * h * dims.experts_per_token as f64;
    }
    let per_pair = match dims.attn_implementation {
        Attention::Eager => {
            // Gemma-2's profile was fitted under eager attention: its extra copies are in it.
            if dims.model_type != "gemma2" {
                layer += pick(SCORES.eager_inner) * inner;
            }
            pick(SCORES.eager)
                + if dims.attention_softcap {
                    pick(SCORES.eager_softcap)
                } else {
                    0.0
                }
                + if dims.attention_dropout {
                    pick(SCORES.eager_dropout)
                } else {
                    0.0
                }
        }
        Attention::Sdpa if dims.attention_dropout => pick(SCORES.sdpa_dropout),
        _ => 0.0,
    };
    let mut once = pick(p.hidden) * h + pick(p.logits) * dims.vocab_size as f64;
    if dims.final_softcap {
        once += pick(p.final_softcap) * dims.vocab_size as f64;
    }
    Stored {
        layer,
        decoder_layer: layer,
        layer_pairs: per_pair * heads,
        decoder_layer_pairs: per_pair * heads,
        once,
        once_pairs: 0.0,
    }
}

/// Activation bytes per GPU for micro-batch `b` and sequence `s` (for an encoder-decoder, `s`
/// tokens on each side).
pub fn activations(dims: &Dims, b: u64, s: u64, checkpointing: bool, precision: Precision) -> f64 {
    let st = stored(dims, precision);
    let tokens = b as f64 * s as f64;
    let pairs = b as f64 * s as f64 * s as f64;
    let decoders = dims.decoder_layers.min(dims.num_layers) as f64;
    let encoders = dims.num_layers as f64 - decoders;
    let full = |layer: f64, layer_pairs: f64| tokens * layer + pairs * layer_pairs;
    let once = tokens * st.once + s as f64 * s as f64 * st.once_pairs;
    if checkpointing {
        // transformers checkpoints every layer: its input (the residual stream, fp32 under
        // autocast too) is all a layer keeps. The peak is the larger of the end of forward (those
        // inputs, the logits and the loss) and the recompute of one layer in backward, once the
        // logits are gone.
        let inputs = dims.num_layers as f64 * CHECKPOINT_INPUT * tokens * dims.hidden_size as f64;
        let layer = full(st.layer, st.layer_pairs).max(if decoders > 0.0 {
            full(st.decoder_layer, st.decoder_layer_pairs)
        } else {
            0.0
        });
        return inputs + once.max(layer);
    }
    encoders * full(st.layer, st.layer_pairs)
        + decoders * full(st.decoder_layer, st.decoder_layer_pairs)
        + once
}

/// Bytes per hidden unit per token a checkpointed layer keeps: its fp32 input.
const CHECKPOINT_INPUT: f64 = 4.0;

/// KV-cache bytes for `context` tokens of `batch` sequences: K and V for every layer and KV head.
pub fn kv_cache(dims: &Dims, context: u64, batch: u64, dtype: StoreDtype) -> f64 {
    dims.num_layers as f64
        * dims.kv_per_token as f64
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
    "Default table (exactly accelerate estimate-memory): T = sum over every parameter and buffer of numel x bytes, where floating-point tensors count 4 bytes (accelerate builds the model in float32) and integer/bool tensors their own size (bool 1/8). Largest Layer walks the root's tensors and child modules: a module with no child modules, or whose class is in _no_split_modules (decoder layers, BERT embeddings, T5 blocks), is one layer; other modules are expanded into their child modules. float16, int8 and int4 divide both columns by 2, 4 and 8. Training using Adam is 4T for float32, 2T for float16 and N/A for int8/int4. Sizes are printed as accelerate's convert_bytes does: divided by 1024 until below 1024, rounded to 2 decimals, units bytes, KB, MB, GB, TB, PB. In --json, parameters and tensors describe the same model as total_size (parameters: the elements of its tensors that are not buffers), trained_parameters the model trained (P below).",
    "Per-GPU training (--strategy, --num-gpus N): P = trained parameters of the model that is trained, the causal LM (for T5 T5ForConditionalGeneration): the base model plus its LM head when untied (tie_word_embeddings), each tied tensor once (T5's encoder and decoder embed_tokens and its LM head are its shared embedding, which accelerate's untied empty model, and so the table, counts three times), floating-point tensors that are not buffers; t = their number of tensors. ddp (torch DDP; also a single process with N = 1): weights 4.P and gradients 4.P whatever --precision, because bf16/fp16 mixed precision in torch (autocast) computes in 16 bits but keeps fp32 parameters, which are the master weights; Adam optimizer states 8.P + 4.t (two fp32 moments, and torch.optim.Adam's 4-byte step counter per tensor); master weights 0; under bf16/fp16, autocast weight copies 2 x the weights that enter a matrix product or convolution (linear layers, GPT-2's Conv1D, the LM head or the embedding a tied head uses, patch convolutions; not the routed experts, which transformers computes in fp32): autocast casts each once per forward and keeps the copy, saved for backward, for the step. fsdp (FSDP2 fully_shard, FULL_SHARD): each parameter is split on its first dimension r into chunks of c = ceil(r/N) rows, rank k holding min(c, max(0, r - k.c)) rows; the sharded parameters and the reduce-scattered gradients are stored padded to c rows on every rank, so weights = gradients = 4 x sum of c.(numel/r); Adam states are made from the unpadded local shard: 8 x sum of local rows.(numel/r) + 4.t, so ranks past the first may hold less (--json lists every rank under per_gpu.ranks for N <= 64; the table shows rank 0, the largest); plus an all-gather buffer of 2.w.Lp (w = 2 bytes for bf16/fp16, 4 for fp32; Lp = parameters of the largest layer: one unit's full weights and gradients in flight). zero1/zero2/zero3 (DeepSpeed ZeRO at its defaults; bf16/fp16 train the module in 16 bits): zero1 and zero2 flatten the parameters, in module order, into one buffer of F elements, P rounded up to a multiple of 2.N, held whole on every rank: weights w.F; each rank clones its partition of F/N elements to fp32, also when training in fp32: master weights 4.F/N; Adam 8.F/N + 4. zero1 gradients w.P: every parameter keeps its full gradient until the reduction at the end of backward. zero2 gradients: w x (the elements of every parameter that overlaps the rank's partition, counted whole, so a parameter straddling two partitions counts on both ranks and one larger than a partition on every rank it touches; plus the padding inside the partition). Both allocate a reduction bucket of reduce_bucket_size = 5e8 elements during each backward (w.5e8 bytes: 1 GB in bf16, whatever the model). zero3 partitions every parameter on its own into ceil(numel/N) elements, S in all: weights w.S plus w.N.ceil(numel/N) for every parameter of at most 1e5 elements (stage3_param_persistence_threshold: those stay whole, in their padded all-gather buffer, once gathered), gradients w.S, master weights 4.S (fp32 too), Adam 8.S + 4 per sub-group (sub_group_size = 1e9 partition elements), the reduction bucket w.5e8 held from initialisation, and the 2.w.Lp all-gather buffer. Other DeepSpeed settings than these defaults are not modelled. These byte counts for ddp, fsdp and zero1/2/3 are checked against real training steps on CPU ranks with torch's DDP, FSDP2 and DeepSpeed (scripts/bench/estimate-vs-measured): they equal the measured tensor storages to the byte.",
    "--offload moves the optimizer states and master weights to CPU memory (DeepSpeed offload_optimizer, FSDP cpu_offload); with zero3 and fsdp also the sharded weights and gradients (offload_param). The moved per-GPU share is reported as CPU offloaded and not counted against GPU memory. --offload does not apply to ddp.",
    "Activations (--batch-size b per GPU, --seq-len s; n = b.s tokens): the peak that forward and backward add, fitted term by term to torch's profiler on transformers' modelling code, with the attention implementation transformers runs the model with: --attn-implementation, else config.json's attn_implementation, else sdpa, or eager for a family without SDPA (gemma2). Per layer and token: 37.h bytes in fp32 (33.h under bf16/fp16 autocast) for norms, attention inputs and outputs and residuals (h = hidden size); a gated (SwiGLU) MLP of intermediate size I adds 16.I (bf16: 8.75.I), GPT-2's MLP 20.I (bf16: 10.5.I); a mixture of experts adds 16 x experts-per-token x expert size, 4 (bf16: 4.25) x number of experts for the router, and 10.3.h (bf16: 11.6.h) per expert choice, plus the shared expert as a gated MLP; with attention dropout > 0 (GPT-2's attn_pdrop), SDPA's math kernel stores the attention matrix: 12 x heads x s. Eager attention stores the probabilities, per head and (query, key) pair: 4 x heads x s in fp32 (6 under bf16, with their fp32 softmax), plus 4 (bf16: 2) for Gemma-2's soft-capped scores and 8 (bf16: 4) with attention dropout, and 3.75 (bf16: 1.75) x the attention width per token. Gemma-2 has its own per-token terms (four norms per layer, its attention width apart from h, final logit soft-capping), T5 (T5ForConditionalGeneration, encoder and decoder of s tokens each) its own per encoder and decoder layer, with and without dropout_rate, plus its relative position bias per (query, key) pair: the bucket indices once, and under SDPA a float mask per decoder layer (and per head without dropout). Once per token: 11.h for the embeddings and final norm and 12.V for the logits and the loss (V = vocabulary size). Activations = n x (L x per-layer + once), L layers. --grad-checkpointing keeps each layer's input instead (4.h per token per layer: the fp32 residual stream, under autocast too) plus the larger of the end of forward (the once-per-token terms) and one layer recomputed in full. For fsdp the measured peak also holds the gathered units, compared with activations plus the all-gather buffer. Error band, over the benchmark grid (scripts/bench/estimate-vs-measured --grid: configs x batch {1,4} x seq {128,512} x fp32/bf16 x ddp/fsdp on 2 CPU ranks). t5 (SDPA, dropout 0.1) and gemma2 (eager), 64 rank-measurements: median 0.3%, max 4.3%; ddp within 0.7% (t5 fp32 exact), fsdp 0.0% to 4.3% over, most in bf16. llama, qwen2_moe and gpt2, 96 rank-measurements, measured before autocast's 16-bit weight copies were counted (ddp bf16 now adds them): median 2.6%, max 21.9%; ddp fp32 within 1.4%; fsdp fp32 0.7% to 11.2% under, most at 1 x 128 tokens; ddp bf16 within 4.4% from 512 tokens on, 12.6% to 18.5% under at 1 x 128 then; fsdp bf16 within 9.4% for llama and gpt2, but 10.2% to 21.9% over for the mixture of experts (FSDP2's bf16 parameters keep the routed experts in 16 bits, where the formula assumes autocast's fp32). With --grad-checkpointing (--grid --grad-checkpointing, llama and gemma2, 64 rank-measurements): median 4.4%, max 28.5%, mostly under: llama within 10% but fsdp fp32 at 1 x 128 (28.5% under, the gathered units outweigh the small activations); gemma2 within 5.3% at 128 tokens but 11.9% to 23.8% under at 512, where the recomputed layer's eager S² terms are not all in the formula. Small micro-batches are thus the least certain. On a GPU, fused and flash kernels store less: treat the figure as an upper estimate there, and scripts/gpu-check measures it with torch.cuda.max_memory_allocated. Activations are not sharded by ZeRO or FSDP.",
    "Inference (--context C, --batch-size B, default 1): weights = the causal LM's tensors (T plus the untied LM head) converted to --dtype (default float16: T/2; bfloat16 T/2; fp8 and int8 T/4; int4 T/8; float32 T), where integer tensors (GPTQ/AWQ packed I32 from safetensors headers) keep their stored size; with a quantization_config in config.json the linear layers take what transformers' quantizer stores for a pre-quantized checkpoint: bitsandbytes and FP8 convert every nn.Linear (bitsandbytes also GPT-2's Conv1D; neither the Linear inside torch's MultiheadAttention) but the LM head, or, when the config has a skip list (llm_int8_skip_modules, modules_to_not_convert), all but the modules it names, the LM head included then; GPTQ and AWQ convert the linear layers of the language model's numbered blocks; embeddings, norms, convolutions and unconverted layers stay in --dtype. Per converted weight: bitsandbytes 4-bit (nf4 or fp4) 1/2 byte (in bnb_4bit_quant_storage elements) plus an fp32 absmax per 64 and a 64-byte quant map per layer (double quantization: an 8-bit absmax per 64, an fp32 one per 16384, and 1028 bytes of nested quant map and offset per layer); bitsandbytes 8-bit 1 byte plus 4 per output row; GPTQ bits/8 plus, per group of group_size input rows (-1: one group), (2 + bits/8) per output column, plus a 4-byte g_idx per input row; AWQ the same without g_idx; FP8 (quant_method fp8) 1 byte plus a 4-byte scale per weight_block_size block (default 128 x 128; null: one per tensor; scale_fmt ue8m0: 1-byte scales) and 4 bytes more with activation_scheme static; fbgemm_fp8 1 byte plus 4 per output row plus 4. FP8's fused mixture-of-experts weights are left in --dtype (an overestimate); KV cache = L . kv . C . B . bytes(--kv-dtype, default float16), with kv = 2 . kv_heads . head_dim values per token per layer (grouped-query and multi-query attention through num_key_value_heads), or for multi-head latent attention (DeepSeek-V2/V3: kv_lora_rank in the config) the cached latent kv_lora_rank + qk_rope_head_dim. Multimodal configs (Llava, Gemma 3...) take these dimensions from text_config. Sliding-window layers are counted at full context. With --num-gpus N both are split evenly (tensor parallelism).",
    "Fitting (--gpu-memory SIZE, else the memory of the first detected GPU): the total per GPU must be at most SIZE. Sizes use binary units: 80GB = 80 x 2^30 bytes. The largest micro-batch (training, needs --seq-len) or context (inference) that fits is found by solving the linear formula above. Not counted: the CUDA context and kernels (typically 0.5 to 1 GiB), allocator fragmentation, communication buffers other than the gather buffer, and temporary tensors; leave headroom. Exit status 1 when it does not fit.",
    "Architectures with formulas (from config.json; a config without model_type takes the family of the first class in architectures that has one, LlamaForCausalLM being llama; what transformers refuses is refused naming the key: no width or no attention heads, num_key_value_heads 0 or not dividing num_attention_heads, a hidden size that is not a whole number of heads for llama, gemma2, gemma3_text, gpt2, gpt_neox and bert, layer_types of another length than num_hidden_layers, T5's feed_forward_proj not ACT or gated-ACT; an attn_implementation the family does not support): llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gemma, gemma2, gemma3_text, phi3, gpt2, gpt_neox, bert, t5, and the multimodal gemma3 (SigLIP vision tower), llava (CLIP or SigLIP vision tower, any of these decoders as language model), qwen2_vl and qwen2_5_vl, whose vision tower and projector are counted from vision_config and the language model from text_config (or, for Qwen2-VL's flat configs, the top level), missing keys taking their config classes' defaults; the trained model is then *ForConditionalGeneration, its LM head untied unless tie_word_embeddings is set (at the top level, or for Llava and Qwen2-VL in text_config) — for the table, the model accelerate sizes: the base model transformers' AutoModel builds, without task head, or, when the config's auto_map names AutoModelForCausalLM (Phi-3), the causal LM with its untied LM head, as accelerate's create_empty_model does. Per-GPU training always counts the causal LM (the LM head of untied models included). Any other architecture is sized from its safetensors headers; those count the checkpoint as stored (task head included, tied weights once, non-persistent buffers absent), with floating-point tensors at 4 bytes.",
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
            mlp_size: 14336,
            gated_mlp: true,
            kv_per_token: 2 * 8 * 128,
            ..Dims::default()
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

    /// 1000 parameters in one [100, 10] tensor.
    fn one() -> Vec<Param> {
        vec![Param {
            numel: 1000,
            rows: 100,
            matmul: true,
        }]
    }

    #[test]
    fn strategies_by_hand() {
        // torch DDP keeps fp32 weights and gradients under bf16 autocast; Adam adds a step.
        let b = training(&one(), 100, None, &setup(Strategy::Ddp, false));
        assert_eq!(
            (b.weights, b.gradients, b.optimizer_states, b.master_weights),
            (4000.0, 4000.0, 8004.0, 0.0)
        );
        // DeepSpeed ZeRO-1: a bf16 flat buffer padded to a multiple of 2·8 = 16 (1008), partitions
        // of 126 cloned to fp32 with Adam on them, full bf16 gradients until the end of backward,
        // and a 5e8-element bf16 reduction bucket.
        let b = training(&one(), 100, None, &setup(Strategy::Zero1, false));
        assert_eq!(
            (b.weights, b.gradients, b.optimizer_states, b.master_weights),
            (2016.0, 2000.0, 1012.0, 504.0)
        );
        assert_eq!(b.reduce_bucket, 1e9);
        // ZeRO-2: a rank keeps the whole gradient of every parameter its partition overlaps; the
        // last rank also a zero tensor for the 8 padding elements.
        let b = training(&one(), 100, None, &setup(Strategy::Zero2, false));
        assert_eq!(b.gradients, 2000.0);
        let b = training_on_rank(&one(), 100, None, &setup(Strategy::Zero2, false), 7);
        assert_eq!(b.gradients, 2016.0);
        // Two parameters of 600 elements over 2 ranks: the flat buffer is 1200, partitions of 600.
        let two = [Param {
            numel: 600,
            rows: 6,
            matmul: true,
        }; 2];
        let t = Training {
            num_gpus: 2,
            ..setup(Strategy::Zero2, false)
        };
        assert_eq!(training_on_rank(&two, 600, None, &t, 1).gradients, 1200.0);
        // ZeRO-3: partitions of ceil(1000/8) = 125; the tensor is under the persistence threshold,
        // so it also stays whole on every rank once gathered.
        let b = training(&one(), 100, None, &setup(Strategy::Zero3, false));
        assert_eq!(
            (b.weights, b.gradients, b.optimizer_states, b.master_weights),
            (2250.0, 250.0, 1004.0, 500.0)
        );
        assert_eq!((b.gather_buffer, b.reduce_bucket), (400.0, 1e9));
        let big = [Param {
            numel: 100_001,
            rows: 100_001,
            matmul: true,
        }];
        let b = training(&big, 100, None, &setup(Strategy::Zero3, false));
        assert_eq!(b.weights, 2.0 * 12_501.0);
        // An odd tensor: partitions of 126, gathered whole into 8·126 elements.
        let odd = [Param {
            numel: 1001,
            rows: 1001,
            matmul: true,
        }];
        let b = training(&odd, 100, None, &setup(Strategy::Zero3, false));
        assert_eq!((b.weights, b.gradients), (2.0 * (126.0 + 1008.0), 252.0));
        let b = training(&one(), 100, None, &setup(Strategy::Zero2, true));
        assert_eq!((b.optimizer_states, b.cpu_offloaded), (0.0, 1516.0));
        // FSDP2: 100 rows over 8 ranks are chunks of 13; rank 7 holds 9 rows, stored padded to 13.
        let b = training(&one(), 100, None, &setup(Strategy::Fsdp, false));
        assert_eq!((b.weights, b.optimizer_states), (520.0, 1044.0));
        let b = training_on_rank(&one(), 100, None, &setup(Strategy::Fsdp, false), 7);
        assert_eq!(
            (b.weights, b.gradients, b.optimizer_states),
            (520.0, 520.0, 724.0)
        );
    }

    #[test]
    fn activations_and_kv_by_hand() {
        let d = dims();
        let a = activations(&d, 1, 4096, false, Precision::Bf16);
        let per_layer = 33.0 * 4096.0 + 8.75 * 14336.0;
        assert_eq!(
            a,
            32.0 * per_layer * 4096.0 + (11.0 * 4096.0 + 12.0 * 128_256.0) * 4096.0
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
