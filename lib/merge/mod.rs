//! Merging sharded checkpoints into one set of weight files without torch and without holding the model
//! in memory. A reader (DCP in [`dcp`], DeepSpeed ZeRO in [`zero`]) turns a checkpoint directory into
//! [`Entry`]s: each output tensor with the pieces of input files it is assembled from. Every piece is
//! resolved and every tiling verified before an output file exists; then [`write`] lays the output out
//! from sizes alone and streams each tensor to its place, in parallel.

pub mod copy;
pub mod dcp;
pub mod fsdp_ranks;
pub mod input;
pub mod lock;
pub mod lookup;
pub mod pickle;
mod ptfile;
pub mod remove;
pub mod select;
pub mod tensor;
pub mod tiling;
pub mod torchzip;
pub mod write;
pub mod zero;

use std::path::{Path, PathBuf};

use crate::error::Diagnostic;
use crate::exit_status::ExitStatus;

use copy::Piece;
use input::Input;
use tensor::DType;

/// One tensor of the checkpoint: where it sits in the saved structure, and its pieces.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Path in the saved (nested) state dict, e.g. `["model", "0.weight"]`.
    pub path: Vec<String>,
    /// The dtype the tensor has in the checkpoint (or, for ZeRO, the dtype zero_to_fp32 gives it).
    pub dtype: DType,
    pub shape: Vec<u64>,
    /// The shape the pieces tile: `shape` for DCP, the flat `[numel]` for ZeRO partitions.
    pub tile_shape: Vec<u64>,
    pub pieces: Vec<Piece>,
}

impl Entry {
    pub fn numel(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// What kind of checkpoint a directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dcp,
    Zero(u8),
    /// accelerate's FSDP2 save with `use_dcp=False`: one torch.save file per rank.
    FsdpRanks,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kind::Dcp => f.write_str("DCP"),
            Kind::Zero(0) => f.write_str("DeepSpeed stage 0"),
            Kind::Zero(s) => write!(f, "DeepSpeed ZeRO-{s}"),
            Kind::FsdpRanks => f.write_str("FSDP2 per-rank"),
        }
    }
}

/// A checkpoint read and verified, ready to be written.
pub struct Checkpoint {
    pub kind: Kind,
    /// The directory the data was read from (may be below the one given).
    pub dir: PathBuf,
    pub inputs: Vec<Input>,
    pub entries: Vec<Entry>,
    /// Paths of non-tensor items (DCP bytes items) that are reported and skipped.
    pub bytes_items: Vec<Vec<String>>,
    /// What the reader wants the user to know about how it read the checkpoint.
    pub notes: Vec<String>,
    /// The zip records whose data the merge reads, with the CRC-32 each archive records.
    pub crcs: Vec<Crc>,
    /// Tensors whose dtype no output format here can hold: an error only if the selection takes one.
    pub unwritable: Vec<Unwritable>,
    /// Every file of the checkpoint that was merged (metadata, data files, DeepSpeed's `latest`):
    /// what `--remove_checkpoint_dir` may delete.
    pub files: Vec<PathBuf>,
}

/// A tensor of a dtype accel cannot write (`torch.complex32`, a quantized dtype, ...).
#[derive(Debug, Clone)]
pub struct Unwritable {
    pub path: Vec<String>,
    /// torch's name of the dtype.
    pub dtype: String,
}

/// A zip record of an input to check: its absolute byte range and recorded CRC-32.
#[derive(Debug, Clone)]
pub struct Crc {
    pub input: usize,
    pub range: std::ops::Range<usize>,
    pub expected: u32,
    pub name: String,
}

/// Checks the CRC-32 of every record in `crcs` (each once, in parallel, streaming through the
/// mapping and releasing it behind), as torch.load's zip reader does for the records it reads.
pub fn verify_crcs(inputs: &[Input], crcs: &[Crc]) -> Result<(), MergeError> {
    use rayon::prelude::*;
    let mut todo: Vec<&Crc> = crcs.iter().collect();
    todo.sort_by_key(|c| (c.input, c.range.start, c.range.end));
    todo.dedup_by_key(|c| (c.input, c.range.start, c.range.end));
    todo.par_iter().try_for_each(|c| {
        let input = &inputs[c.input];
        let Some(bytes) = input.bytes().get(c.range.clone()) else {
            return Err(MergeError::Truncated {
                path: input.path.clone(),
                what: format!(
                    "record `{}` needs bytes {}..{}",
                    c.name, c.range.start, c.range.end
                ),
                len: input.bytes().len() as u64,
            });
        };
        let mut h = crc32fast::Hasher::new();
        let mut at = c.range.start;
        for part in bytes.chunks(8 << 20) {
            h.update(part);
            input.release(at, at + part.len());
            at += part.len();
        }
        let found = h.finalize();
        if found != c.expected {
            return Err(MergeError::Crc {
                path: input.path.clone(),
                name: c.name.clone(),
                expected: c.expected,
                found,
            });
        }
        Ok(())
    })
}

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("`{0}` is not a directory")]
    NotADirectory(PathBuf),
    #[error("the output path `{0}` exists and is not a directory")]
    OutputNotADirectory(PathBuf),
    #[error("cannot {action} `{path}`")]
    DiskFull {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
        /// Staging directories of merges that are gone, left in the output directory (they could not
        /// be removed), with their sizes.
        leftovers: Vec<(PathBuf, u64)>,
        /// The bytes of earlier output that --force replaces, kept until the new output is complete.
        replaced: u64,
    },
    #[error("`{path}` is not a checkpoint: {found}")]
    NotACheckpoint {
        path: PathBuf,
        found: String,
        hint: String,
    },
    #[error("cannot {action} `{path}`")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid checkpoint metadata: {0}")]
    Metadata(String),
    #[error("invalid checkpoint file `{path}`: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("unsafe or malformed pickle")]
    Pickle(#[source] pickle::PickleError),
    #[error("`{path}` has {len} bytes, but {what}: the file is truncated or the offsets are out of range")]
    Truncated {
        path: PathBuf,
        what: String,
        len: u64,
    },
    #[error("bad chunk of `{fqn}` at byte {offset} of `{path}`: {message}")]
    Chunk {
        path: PathBuf,
        fqn: String,
        offset: u64,
        message: String,
    },
    #[error("the chunks of `{fqn}` do not cover it exactly: {problem}")]
    Tiling { fqn: String, problem: String },
    #[error("`{fqn}` has dtype `{dtype}`, which cannot be written")]
    Dtype { fqn: String, dtype: String },
    #[error("{}", unwritable_message(.0))]
    Unwritable(Vec<(String, String)>),
    #[error("record `{name}` of `{path}` fails its CRC-32 check (recorded {expected:08x}, computed {found:08x})")]
    Crc {
        path: PathBuf,
        name: String,
        expected: u32,
        found: u32,
    },
    #[error("unsupported checkpoint feature: {0}")]
    Unsupported(String),
    #[error("`{0}` already exists")]
    Exists(PathBuf),
    #[error("`{}` is being written by another merge ({})", .dir.display(), .holder.as_ref().map_or_else(|| "whose process is not recorded yet".to_string(), lock::Holder::describe))]
    Locked {
        dir: PathBuf,
        lock: PathBuf,
        holder: Option<lock::Holder>,
    },
    #[error("{0}")]
    Selection(String),
    #[error("--remove_checkpoint_dir would delete what this merge does not read: `{}` also holds {}", .dir.display(), .others.join(", "))]
    RemoveRefused {
        dir: PathBuf,
        others: Vec<String>,
        hints: Vec<String>,
    },
    #[error("interrupted by {}; nothing was written", crate::exit_status::signal_name(*.0))]
    Interrupted(i32),
    #[error("the written file `{path}` does not read back as expected: {message}")]
    Verify { path: PathBuf, message: String },
    #[error("`{path}` changed during the merge: {what}")]
    Changed { path: PathBuf, what: String },
}

fn unwritable_message(list: &[(String, String)]) -> String {
    let shown: Vec<String> = list
        .iter()
        .take(8)
        .map(|(n, d)| format!("`{n}` (torch.{d})"))
        .collect();
    format!(
        "{} selected tensor(s) have a dtype that cannot be written: {}{}",
        list.len(),
        shown.join(", "),
        if list.len() > 8 { ", …" } else { "" }
    )
}

impl MergeError {
    pub fn io(action: &'static str, path: impl AsRef<Path>, source: std::io::Error) -> Self {
        MergeError::Io {
            action,
            path: path.as_ref().to_path_buf(),
            source,
        }
    }
    /// A full disk names the staging directories of gone merges left in `out_dir`, which may be
    /// what filled it, and the `replaced` bytes of earlier output that stay until the new output is complete.
    pub fn with_leftovers(self, out_dir: &Path, replaced: u64) -> Self {
        match self {
            MergeError::Io {
                action,
                path,
                source,
            } if source.raw_os_error() == Some(libc::ENOSPC) => MergeError::DiskFull {
                action,
                path,
                source,
                leftovers: write::staging_dirs(out_dir)
                    .into_iter()
                    .map(|(d, _)| {
                        let size = write::dir_size(&d);
                        (d, size)
                    })
                    .collect(),
                replaced,
            },
            e => e,
        }
    }
    /// Attaches the file a metadata/pickle problem was found in.
    pub fn at(self, path: &Path) -> Self {
        match self {
            MergeError::Metadata(m) => MergeError::Invalid {
                path: path.to_path_buf(),
                message: m,
            },
            MergeError::Pickle(e) => MergeError::Invalid {
                path: path.to_path_buf(),
                message: e.to_string(),
            },
            e => e,
        }
    }
}

impl Diagnostic for MergeError {
    fn exit_status(&self) -> ExitStatus {
        match self {
            MergeError::Exists(_)
            | MergeError::Locked { .. }
            | MergeError::Verify { .. }
            | MergeError::OutputNotADirectory(_)
            | MergeError::DiskFull { .. } => ExitStatus::Output,
            MergeError::Io { action, .. }
                if action.starts_with("write")
                    || action.starts_with("create")
                    || action.starts_with("rename")
                    || action.starts_with("lock")
                    || action.starts_with("remove") =>
            {
                ExitStatus::Output
            }
            MergeError::Selection(_) | MergeError::RemoveRefused { .. } => ExitStatus::Usage,
            MergeError::Interrupted(sig) => ExitStatus::Signal(*sig),
            _ => ExitStatus::Input,
        }
    }
    fn hints(&self) -> Vec<String> {
        match self {
            MergeError::Exists(_) => vec!["pass --force to replace it".into()],
            MergeError::Locked { lock, .. } => vec![
                format!(
                    "one merge at a time writes into a directory: it holds the lock on `{}`, released when it ends, however it ends",
                    lock.display()
                ),
                "wait for that merge to end and run this one again, or merge into another directory".into(),
            ],
            MergeError::RemoveRefused { hints, .. } => hints.clone(),
            MergeError::NotACheckpoint { hint, .. } => vec![hint.clone()],
            MergeError::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC) => {
                vec!["the disk is full: free space or choose another output directory".into()]
            }
            MergeError::DiskFull {
                leftovers,
                replaced,
                ..
            } => {
                let mut h =
                    vec!["the disk is full: free space or choose another output directory".into()];
                if *replaced > 0 {
                    h.push(format!(
                        "the output already there ({replaced} bytes) is kept until the new one is complete, so that an error never leaves neither: replacing it with --force needs room for both; delete it first if the disk cannot hold two copies"
                    ));
                }
                for (dir, size) in leftovers {
                    h.push(format!(
                        "`{}` ({size} bytes) is the staging directory of a merge that is gone, which could not be removed: \
                         deleting it frees that space",
                        dir.display()
                    ));
                }
                h
            }
            MergeError::OutputNotADirectory(_) => {
                vec!["OUTPUT_PATH is the directory the merged files are written into".into()]
            }
            MergeError::Crc { .. } => vec![
                "the file was damaged in storage or transfer; --no-verify skips this check".into(),
            ],
            MergeError::Changed { .. } => vec![
                "another process rewrote it (a save into the same directory?); nothing was written: merge again once the checkpoint is complete".into(),
            ],
            MergeError::Truncated { .. } => {
                vec!["the checkpoint was probably copied or saved incompletely".into()]
            }
            MergeError::Dtype { .. } => {
                vec!["safetensors has no such dtype; --dtype converts floating tensors only".into()]
            }
            MergeError::Unwritable(list) => vec![format!(
                "neither safetensors nor this tool's torch.save writer has these dtypes; leave the tensors out with {}",
                list.iter()
                    .take(3)
                    .map(|(n, _)| format!("--exclude-key '{n}'"))
                    .collect::<Vec<_>>()
                    .join(" ")
            )],
            _ => Vec::new(),
        }
    }
}

/// Opens and maps one input file, watched for changes (see [`input`]).
pub fn open_input(path: &Path) -> Result<Input, MergeError> {
    input::open(path)
}

/// Finds and reads the checkpoint in `dir`, whatever its kind, and verifies every tiling.
/// With `include_bytes`, DCP bytes items become uint8 entries of their stored bytes instead of being skipped.
/// With `verify`, the CRC-32 of every zip record read is checked.
pub fn open(
    dir: &Path,
    tag: Option<&str>,
    include_bytes: bool,
    verify: bool,
) -> Result<Checkpoint, MergeError> {
    match lookup::stat(dir)? {
        Some(m) if m.is_dir() => {}
        Some(_) => return Err(MergeError::NotADirectory(dir.to_path_buf())),
        None => {
            return Err(MergeError::io(
                "read",
                dir,
                std::io::Error::from_raw_os_error(libc::ENOENT),
            ))
        }
    }
    let ckpt = read(dir, tag, include_bytes).map_err(input::explain)?;
    for e in &ckpt.entries {
        let boxes: Vec<(&[u64], &[u64])> = e
            .pieces
            .iter()
            .map(|p| (p.offsets.as_slice(), p.sizes.as_slice()))
            .collect();
        tiling::verify(&e.tile_shape, &boxes).map_err(|t| MergeError::Tiling {
            fqn: e.path.join("."),
            problem: t.to_string(),
        })?;
    }
    if verify {
        verify_crcs(&ckpt.inputs, &ckpt.crcs).map_err(input::explain)?;
    }
    // What was parsed and checked is what the files hold now.
    input::check_all(&ckpt.inputs)?;
    Ok(ckpt)
}

/// Reads whatever checkpoint `dir` holds.
fn read(dir: &Path, tag: Option<&str>, include_bytes: bool) -> Result<Checkpoint, MergeError> {
    Ok(if let Some(meta) = dcp::metadata_path(dir)? {
        dcp::read(dir, &meta, include_bytes)?
    } else if let Some((sub, meta)) = save_state_model(dir)? {
        let mut c = dcp::read(&sub, &meta, include_bytes)?;
        c.notes.push(format!(
            "accelerate's save_state layout: the model is read from `{}`",
            sub.display()
        ));
        c
    } else if let Some(found) = zero::detect(dir, tag)? {
        zero::read(found)?
    } else if let Some(found) = fsdp_ranks::detect(dir)? {
        fsdp_ranks::read(found)?
    } else {
        return Err(not_a_checkpoint(dir));
    })
}

/// accelerate's save_state directory: the model's DCP checkpoint is one level down, the directory
/// and its `.metadata`.
fn save_state_model(dir: &Path) -> Result<Option<(PathBuf, PathBuf)>, MergeError> {
    for sub in ["pytorch_model_fsdp_0", "pytorch_model_fsdp"].map(|s| dir.join(s)) {
        if let Some(meta) = dcp::metadata_path(&sub)? {
            return Ok(Some((sub, meta)));
        }
    }
    Ok(None)
}

/// Says what a directory that is no known checkpoint contains, and what is missing.
fn not_a_checkpoint(dir: &Path) -> MergeError {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let distcp = names.iter().filter(|n| n.ends_with(".distcp")).count();
    let per_rank_meta = names
        .iter()
        .any(|n| n.starts_with("__") && n.ends_with(".metadata"));
    let found = if names.is_empty() {
        "the directory is empty".to_string()
    } else if distcp > 0 {
        format!("it has {distcp} .distcp data file(s) but no `.metadata`")
    } else {
        let shown: Vec<&str> = names.iter().take(8).map(String::as_str).collect();
        format!(
            "found {}{}, but no `.metadata` (DCP) and no `latest` or `*_model_states.pt` (DeepSpeed)",
            shown.join(", "),
            if names.len() > 8 { ", …" } else { "" }
        )
    };
    let hint = if per_rank_meta {
        "per-rank `__<r>.metadata` files (use_collectives=False) are not supported; save with the default writer"
    } else if distcp > 0 {
        "the `.metadata` file is written last by rank 0; the save probably did not finish"
    } else {
        "pass the directory that holds `.metadata` (e.g. <output_dir>/pytorch_model_fsdp_0) or a DeepSpeed save dir"
    };
    MergeError::NotACheckpoint {
        path: dir.to_path_buf(),
        found,
        hint: hint.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_full_names_the_staging_dirs_of_other_merges() {
        let d = tempfile::tempdir().unwrap();
        let st = write::staging_dir(d.path(), 1);
        std::fs::create_dir(&st).unwrap();
        std::fs::write(st.join("model.safetensors"), [0u8; 10]).unwrap();
        let e = MergeError::io(
            "write",
            d.path().join("model.safetensors"),
            std::io::Error::from_raw_os_error(libc::ENOSPC),
        )
        .with_leftovers(d.path(), 0);
        let h = e.hints().join("\n");
        assert!(h.contains(&format!("`{}` (10 bytes)", st.display())), "{h}");
        assert_eq!(e.exit_status(), ExitStatus::Output);
    }
}
