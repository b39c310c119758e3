//! `accel-merge-weights`: command-line definition. Accepts `accelerate merge-weights`' arguments
//! (positional checkpoint directory and output path, `--unsafe_serialization`,
//! `--remove_checkpoint_dir`) and adds what the accelerate command lacks.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

use super::ToolDoc;
use crate::env_vars::Group;

/// Merge sharded FSDP/DCP or DeepSpeed ZeRO checkpoints into safetensors.
///
/// Reads a torch.distributed.checkpoint (DCP) directory (`.metadata` plus `__<rank>_<n>.distcp`
/// files, as written by FSDP's SHARDED_STATE_DICT, FSDP2 and accelerate's `save_state`), accelerate's
/// per-rank FSDP2 files (`pytorch_model_fsdp_0_rank<r>.bin`, saved with `use_dcp=False`) or a
/// DeepSpeed ZeRO 1/2/3 save directory, and writes one merged `model.safetensors` (or sharded files with an
/// index) into OUTPUT_PATH. Needs neither torch nor Python, never executes anything from the
/// checkpoint, and streams: memory stays small whatever the model size.
///
/// Nothing is written until every chunk of every tensor has been found and checked to cover its tensor
/// exactly; files are written under a temporary name and renamed at the end, so an error leaves no
/// partial output. With --force every weight file already in OUTPUT_PATH (`model*.safetensors`,
/// `pytorch_model*.bin`, their indexes) is replaced by the new ones, once those are complete: until
/// then both are on disk.
///
/// One merge at a time writes into a directory. A merge holds a lock on `.accel-merge.lock` in
/// OUTPUT_PATH from its check for files already there until its files are in place (the file goes
/// when it ends), and a second merge into the same directory meanwhile fails at once with exit
/// status 4, naming the lock and the merge that holds it (process and host), instead of waiting for
/// it: two merges into one directory are a mistake either way, as one's files would end up beside
/// the other's, or, with --force, replace them. The kernel releases the lock when its merge ends,
/// however it ends; on NFS, when its host does.
#[derive(Debug, Parser)]
#[command(name = "accel-merge-weights", version, max_term_width = 100)]
pub struct MergeCli {
    /// The checkpoint directory: a DCP directory with `.metadata`, accelerate's save_state directory
    /// (the model is read from its `pytorch_model_fsdp_0/`), a directory of accelerate's per-rank
    /// FSDP2 files (`pytorch_model_fsdp_0_rank<r>.bin`, one per rank), or a DeepSpeed save directory
    /// (with `latest`) or tag directory.
    #[arg(value_name = "CHECKPOINT_DIRECTORY")]
    pub checkpoint_directory: PathBuf,

    /// The directory to write the merged weights into (created if missing). Not needed with --inspect.
    #[arg(value_name = "OUTPUT_PATH", required_unless_present = "inspect")]
    pub output_path: Option<PathBuf>,

    /// Write `pytorch_model.bin` (torch.save format, loadable by `torch.load`) instead of safetensors.
    #[arg(long = "unsafe_serialization", visible_alias = "unsafe-serialization")]
    pub unsafe_serialization: bool,

    /// Delete the checkpoint directory after the merged weights were written and read back. Only
    /// the checkpoint's own files are deleted (the DCP `.metadata` and the data files it names; a
    /// DeepSpeed tag's model and optimizer state files, with `latest` and DeepSpeed's recovery scripts
    /// when a save directory is given; the per-rank FSDP2 files merged), then the directories they leave empty. A directory that holds
    /// anything else (accelerate's save_state directory with optimizer and RNG state or a second
    /// model, other DeepSpeed tags, your own files) is refused before anything is written, with the
    /// list of what else is there: pass the directory the model is read from instead. Optimizer
    /// state stored in the checkpoint's own files goes with them.
    #[arg(
        long = "remove_checkpoint_dir",
        visible_alias = "remove-checkpoint-dir"
    )]
    pub remove_checkpoint_dir: bool,

    /// Split the output into files of at most SIZE (e.g. 5GB, 500MiB, 1000000) named
    /// `model-0000K-of-0000N.safetensors`, plus `model.safetensors.index.json`.
    #[arg(long = "max_shard_size", visible_alias = "max-shard-size", value_name = "SIZE", value_parser = parse_size)]
    pub max_shard_size: Option<u64>,

    /// Dtype of floating-point tensors in the output; integer and bool tensors are never cast.
    #[arg(long, value_enum, default_value_t = DtypeArg::Keep)]
    pub dtype: DtypeArg,

    /// Write this top-level key's subtree, without the key in the names. By default: the only key;
    /// else `model` (accelerate, plain DCP); else, when model keys sit at the top level beside
    /// training state (torchtitan), everything but `optimizer`, `lr_scheduler`, `dataloader`,
    /// `train_state` and the like. The summary line says which.
    #[arg(long, value_name = "KEY", conflicts_with = "all_keys")]
    pub key: Option<String>,

    /// Leave out tensors whose full dotted name (e.g. `optimizer.state.0.exp_avg`) or output name
    /// matches GLOB (`*` any run of characters, `?` one). Repeatable.
    #[arg(
        long = "exclude-key",
        visible_alias = "exclude_key",
        value_name = "GLOB"
    )]
    pub exclude_key: Vec<String>,

    /// Skip the CRC-32 check of the zip records read from torch.save files (checked by default, as
    /// torch.load does).
    #[arg(long = "no-verify", visible_alias = "no_verify")]
    pub no_verify: bool,

    /// Write every tensor under every top-level key, with full dotted names.
    #[arg(long = "all_keys", visible_alias = "all-keys")]
    pub all_keys: bool,

    /// Remove PREFIX from tensor names that start with it (e.g. `_orig_mod.` or `module.`). Repeatable.
    #[arg(
        long = "strip_prefix",
        visible_alias = "strip-prefix",
        value_name = "PREFIX"
    )]
    pub strip_prefix: Vec<String>,

    /// Copy config, generation config and tokenizer files from this Hugging Face model directory next
    /// to the output, so the result loads with `from_pretrained`.
    #[arg(
        long = "hf_reference",
        visible_alias = "hf-reference",
        value_name = "DIR"
    )]
    pub hf_reference: Option<PathBuf>,

    /// DeepSpeed: the tag (subdirectory) to read, instead of the one named in `latest`.
    #[arg(long, value_name = "TAG")]
    pub tag: Option<String>,

    /// Replace existing output files. They are kept until the new output is complete, so the disk
    /// needs room for both.
    #[arg(long, short = 'f')]
    pub force: bool,

    /// List the checkpoint's tensors (name, dtype, shape, chunks, bytes) and totals; write nothing.
    #[arg(long)]
    pub inspect: bool,

    /// With --inspect: print JSON.
    #[arg(long, requires = "inspect")]
    pub json: bool,

    /// No progress bar and no summary line.
    #[arg(long, short = 'q')]
    pub quiet: bool,

    /// Keep non-tensor items (DCP bytes items such as a pickled step counter) as 1-D uint8 tensors of
    /// their stored bytes instead of skipping them. The bytes are torch.save's serialisation of the
    /// object: `torch.load(io.BytesIO(t.numpy().tobytes()))` recovers it. Nothing is unpickled here.
    #[arg(long = "include-bytes", visible_alias = "include_bytes")]
    pub include_bytes: bool,
}

/// Output dtype choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DtypeArg {
    /// Each tensor keeps the dtype it has in the checkpoint (fp32 for DeepSpeed master weights).
    Keep,
    Fp32,
    Bf16,
    Fp16,
}

/// Parses `5GB`, `500MiB`, `10gb`, `1000000` (decimal units as in transformers, binary with `i`).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size like 5GB or 500MiB"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "tb" | "t" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024f64.powi(4),
        _ => {
            return Err(format!(
                "`{s}` has an unknown unit (use B, KB, MB, GB, KiB, MiB, GiB)"
            ))
        }
    };
    let v = num * mult;
    if v.is_nan() || v < 1.0 || v > u64::MAX as f64 {
        return Err(format!("`{s}` is not a positive size"));
    }
    Ok(v as u64)
}

pub fn doc() -> ToolDoc {
    ToolDoc {
        name: "accel-merge-weights",
        command: super::command_of::<MergeCli>,
        env_groups: &[Group::Accel, Group::Output],
        examples: &[
            (
                "accel-merge-weights ckpt/pytorch_model_fsdp_0 merged/",
                "Merge an FSDP SHARDED_STATE_DICT checkpoint into merged/model.safetensors.",
            ),
            (
                "accel-merge-weights ckpt/ merged/ --max-shard-size 5GB --dtype bf16 --hf-reference base-model/",
                "Write bf16 shards of at most 5 GB with an index, plus the base model's config and tokenizer.",
            ),
            (
                "accel-merge-weights --inspect --json ckpt/",
                "List the tensors of a checkpoint as JSON without writing anything.",
            ),
            (
                "accel-merge-weights ds_out/ merged/",
                "Merge a DeepSpeed ZeRO checkpoint (the tag named in ds_out/latest) into fp32 safetensors.",
            ),
        ],
        codes: crate::exit_status::Codes::Plain,
        extra_sections: &[
            (
                "MEMORY",
                &["Input files are memory-mapped and output files laid out from the metadata alone, so each tensor is copied straight to its place: resident memory stays at a few buffers of 8 MiB per thread, independent of model size. Contiguous chunks are copied inside the kernel (copy_file_range)."],
            ),
            (
                "DTYPES",
                &["Every dtype safetensors has is written, in safetensors and in pytorch_model.bin: float64, float32, float16, bfloat16, the integer types, bool, float8_e4m3fn, float8_e5m2, float8_e8m0fnu, float8_e4m3fnuz, float8_e5m2fnuz, float4_e2m1fn_x2 (F4, whose last dimension safetensors counts in 4-bit values) and complex64 (C64, e.g. torchtitan's freqs_cis). A tensor of another dtype (complex32, complex128, ...) is an error only if the output would include it: --exclude-key leaves it out, as does a --key that does not select it."],
            ),
            (
                "CHECKPOINTS CHANGED DURING THE MERGE",
                &["A checkpoint saved again into the same directory while it is merged (torch's FileSystemWriter truncates and rewrites its shards in place) is detected: each input's size, inode and modification time are compared with what they were when it was opened, after the check and after the copy, and a read of a truncated memory-mapped input is caught (instead of SIGBUS). The merge then ends with exit status 3, names the file, and leaves nothing staged; no output is ever made of bytes that did not pass the check. A writer that rewrites a file in place and then sets its old modification time back is not detected."],
            ),
            (
                "DEEPSPEED",
                &["A ZeRO 1/2/3 checkpoint is read as zero_to_fp32 reads it: trainable parameters from the fp32 master partitions of every rank, frozen parameters as saved, floating buffers as fp32, tied names repeating their source. A stage 0 save in bf16 or fp16 keeps an fp32 master of each trainable parameter in the optimizer state (optimizer.fp32_groups), which names nothing: each master is matched, in order, to the module parameter of its shape whose saved values it rounds to; the masters are then taken, frozen parameters as saved. Where there are no masters, or they cannot all be matched, the module is read as saved. The note on stderr says which."],
            ),
            (
                "SIGNALS",
                &["SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU and SIGVTALRM stop the merge between tensors, remove what was staged (and OUTPUT_PATH if the merge created it) and end it with status 128 + the signal's number. SIGKILL cannot be caught: a merge killed by it (or by a crash or power loss) leaves its staging directory `.accel-merge-<pid>.tmp` inside OUTPUT_PATH, and OUTPUT_PATH itself if the merge had created it. The next merge into the same OUTPUT_PATH removes such a directory once its process is gone, and says so; one into another directory does not look for it, so remove it yourself if you merge elsewhere."],
            ),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("5GB"), Ok(5_000_000_000));
        assert_eq!(parse_size("500MiB"), Ok(500 << 20));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("1.5kb"), Ok(1500));
        assert!(parse_size("0").is_err());
        assert!(parse_size("5XB").is_err());
        assert!(parse_size("").is_err());
    }
}
