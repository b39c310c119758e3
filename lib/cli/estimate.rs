//! `accel-estimate-memory`: command-line definition — accelerate's flags plus the per-GPU ones.

use clap::Parser;

use super::ToolDoc;
use crate::env_vars::Group;
use crate::estimate::arch::Attention;
use crate::estimate::input::From;
use crate::estimate::per_gpu::{Precision, StoreDtype, Strategy, FORMULAS};
use crate::estimate::table::TableDtype;

/// Estimate model memory per dtype and per GPU, offline, from headers and configs only.
///
/// With only a model, prints the same table as `accelerate estimate-memory`, with the same numbers:
/// largest layer, total size and training with Adam, per dtype. Unlike accelerate it reads a local
/// `.safetensors` file, a directory of shards with `model.safetensors.index.json`, a
/// `pytorch_model.bin.index.json` with its config, or a `config.json`, and never the weights
/// themselves; a Hub id (`org/name`) fetches `config.json`, the index and only the safetensors
/// headers, with HTTP range requests (offline, or with the Hub out of reach, from huggingface_hub's
/// download cache). No Python, no transformers, no remote code.
///
/// With --strategy/--num-gpus (training) or --context (inference) it adds memory per GPU — weights,
/// gradients, optimizer state, master weights, activations, KV cache — and with --gpu-memory (or the
/// detected GPUs) whether it fits and the largest batch or context that does. The FORMULAS section
/// states every formula and assumption.
#[derive(Debug, Parser)]
#[command(name = "accel-estimate-memory", version, max_term_width = 100)]
pub struct EstimateCli {
    /// The model: a .safetensors file, a model directory, a config.json or index, or a Hub id (org/name).
    #[arg(value_name = "MODEL_NAME", value_hint = clap::ValueHint::AnyPath)]
    pub model_name: String,

    /// Accepted for compatibility with accelerate; the library does not change how tensors are counted.
    #[arg(long = "library_name", visible_alias = "library-name", value_name = "LIBRARY", value_parser = ["timm", "transformers"])]
    pub library_name: Option<String>,

    /// Rows of the table, in the order given (accelerate's choices and default).
    #[arg(long, value_enum, num_args = 1.., value_name = "DTYPE",
          default_values_t = [TableDtype::Float32, TableDtype::Float16, TableDtype::Int8, TableDtype::Int4])]
    pub dtypes: Vec<TableDtype>,

    /// Accepted for compatibility with accelerate; no repository code is ever run.
    #[arg(long = "trust_remote_code", visible_alias = "trust-remote-code")]
    pub trust_remote_code: bool,

    /// Print JSON (sizes in bytes) instead of tables.
    #[arg(long)]
    pub json: bool,

    /// Size the model from its config formula, its safetensors headers, or (auto) the formula when the
    /// architecture is known.
    #[arg(long, value_enum, default_value_t = From::Auto)]
    pub from: From,

    /// Hub revision (branch, tag or commit) for a Hub id.
    #[arg(long, default_value = "main")]
    pub revision: String,

    /// Training strategy for the per-GPU estimate.
    #[arg(long, value_enum)]
    pub strategy: Option<Strategy>,

    /// GPUs the model is trained or served on (default: the detected GPUs, else 1).
    #[arg(long = "num_gpus", visible_alias = "num-gpus", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub num_gpus: Option<u64>,

    /// Offload optimizer state (and, with zero3/fsdp, parameters) to CPU memory.
    #[arg(long)]
    pub offload: bool,

    /// Training precision: bf16/fp16 mixed precision (fp32 master weights) or pure fp32.
    #[arg(long, value_enum, default_value_t = Precision::Bf16)]
    pub precision: Precision,

    /// Micro-batch size per GPU (training), or sequences served at once (inference).
    #[arg(long = "batch_size", visible_alias = "batch-size", value_name = "B", value_parser = clap::value_parser!(u64).range(1..))]
    pub batch_size: Option<u64>,

    /// Training sequence length, for activation memory.
    #[arg(long = "seq_len", visible_alias = "seq-len", value_name = "S", value_parser = clap::value_parser!(u64).range(1..))]
    pub seq_len: Option<u64>,

    /// Activation (gradient) checkpointing: keep only each layer's input.
    #[arg(long = "grad_checkpointing", visible_alias = "grad-checkpointing")]
    pub grad_checkpointing: bool,

    /// Attention implementation the model is trained with, as transformers names it (default:
    /// config.json's attn_implementation, else what transformers picks: sdpa, or eager for a
    /// family without SDPA such as gemma2).
    #[arg(
        long = "attn_implementation",
        visible_alias = "attn-implementation",
        value_enum,
        value_name = "IMPL"
    )]
    pub attn_implementation: Option<Attention>,

    /// Inference: KV cache for this many tokens per sequence.
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u64).range(1..))]
    pub context: Option<u64>,

    /// Inference: dtype of the weights.
    #[arg(long, value_enum, default_value_t = StoreDtype::Float16)]
    pub dtype: StoreDtype,

    /// Inference: dtype of the KV cache.
    #[arg(long = "kv_dtype", visible_alias = "kv-dtype", value_enum, default_value_t = StoreDtype::Float16)]
    pub kv_dtype: StoreDtype,

    /// Memory of one GPU (e.g. 80GB, 81920MiB; binary units); default: the first detected GPU's.
    #[arg(long = "gpu_memory", visible_alias = "gpu-memory", value_name = "SIZE")]
    pub gpu_memory: Option<String>,
}

pub fn doc() -> ToolDoc {
    ToolDoc {
        name: "accel-estimate-memory",
        command: super::command_of::<EstimateCli>,
        env_groups: &[Group::Accel, Group::Hub, Group::Output],
        examples: &[
            (
                "accel-estimate-memory ./Llama-3.1-8B",
                "accelerate's table for a downloaded model, from its config.json.",
            ),
            (
                "accel-estimate-memory model.safetensors --dtypes float16",
                "Sizes from one safetensors file's header.",
            ),
            (
                "accel-estimate-memory meta-llama/Llama-3.1-70B --from weights --json",
                "From the Hub, reading only the safetensors headers; JSON in bytes.",
            ),
            (
                "accel-estimate-memory ./Llama-3.1-70B --strategy fsdp --num-gpus 8 --batch-size 1 --seq-len 4096 --grad-checkpointing --gpu-memory 80GB",
                "Per-GPU training memory under FSDP, whether it fits, and the largest batch that does.",
            ),
            (
                "accel-estimate-memory ./Llama-3.1-8B --context 32768 --batch-size 4 --kv-dtype fp8 --gpu-memory 24GB",
                "Inference weights plus KV cache, and the longest context that fits.",
            ),
        ],
        codes: crate::exit_status::Codes::Plain,
        extra_sections: &[("FORMULAS", FORMULAS)],
    }
}
