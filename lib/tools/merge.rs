//! Runs `accel-merge-weights`: read and verify the checkpoint, lay out the output, stream it into a
//! staging directory, read it back, rename it into place; or, with `--inspect`, describe the checkpoint.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::cli::merge::{DtypeArg, MergeCli};
use crate::env_vars::{Environment, ACCEL_NO_PROGRESS};
use crate::error::Result;
use crate::exit_status::ExitStatus;
use crate::merge::lock::OutputLock;
use crate::merge::lookup;
use crate::merge::select::{self, Selection};
use crate::merge::tensor::DType;
use crate::merge::write::{self, Format};
use crate::merge::{self, Checkpoint, MergeError};

const TOOL: &str = "accel-merge-weights";

/// The signals that stop a merge cleanly: every one whose default action ends the process and that
/// can be caught, but the fault signals and SIGXFSZ (a write past RLIMIT_FSIZE then fails with
/// EFBIG, reported as such). SIGHUP is a closed terminal or ssh session, SIGQUIT Ctrl-\, SIGUSR1/2
/// and SIGXCPU what batch systems send before a time limit (SLURM's `--signal`, a CPU limit).
const STOPPING_SIGNALS: [i32; 9] = [
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
    signal_hook::consts::SIGQUIT,
    signal_hook::consts::SIGUSR1,
    signal_hook::consts::SIGUSR2,
    signal_hook::consts::SIGALRM,
    signal_hook::consts::SIGXCPU,
    signal_hook::consts::SIGVTALRM,
];

/// Files of a Hugging Face model directory that belong next to its weights.
const HF_FILES: &[&str] = &[
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
];

pub fn run(cli: MergeCli, env: &Environment) -> Result<ExitStatus> {
    let ckpt = merge::open(
        &cli.checkpoint_directory,
        cli.tag.as_deref(),
        cli.include_bytes,
        !cli.no_verify,
    )?;
    let sel = select::select(&ckpt, &selection(&cli))?;
    for n in &ckpt.notes {
        eprintln!("{TOOL}: note: {n}");
    }
    if cli.inspect {
        return inspect(&cli, &ckpt, &sel);
    }
    let Some(out_dir) = cli.output_path.clone() else {
        return Err(crate::error::Error::msg(
            ExitStatus::Usage,
            "OUTPUT_PATH is required",
        ));
    };
    let format = if cli.unsafe_serialization {
        Format::TorchBin
    } else {
        Format::Safetensors
    };
    let plan = write::plan(format, &sel.tensors, &ckpt.entries, cli.max_shard_size);
    let removal = plan_checkpoint_removal(&cli, &ckpt, &sel, &out_dir)?;
    let hf = match &cli.hf_reference {
        Some(dir) => hf_files(dir)?,
        None => Vec::new(),
    };
    let names = output_names(&plan, &hf);
    let interrupted = stop_on_signals();
    let (created, lock) = lock_output_dir(&out_dir)?;
    let staging = write::staging_dir(&out_dir, std::process::id());
    let mut staged = None;
    let result = (|| {
        if !created {
            remove_abandoned_staging(&out_dir, &lock);
        }
        if !cli.force {
            refuse_existing(&out_dir, &names)?;
        }
        std::fs::create_dir(&staging).map_err(|e| MergeError::io("create", &staging, e))?;
        staged = Some(staging.as_path());
        write_staged(
            &cli,
            env,
            &ckpt,
            &sel,
            &plan,
            &out_dir,
            &staging,
            &hf,
            &names,
            &interrupted,
        )
    })();
    let (elapsed, bytes) = match result {
        Ok(done) => {
            drop(lock);
            done
        }
        Err(e) => {
            discard_failed(staged, lock, &out_dir, created);
            let replaced = if cli.force {
                replaced_bytes(&out_dir, &names)
            } else {
                0
            };
            return Err(e.with_leftovers(&out_dir, replaced).into());
        }
    };
    if let Some(removal) = removal {
        remove_checkpoint(removal, &cli.checkpoint_directory)?;
    }
    if !cli.quiet {
        let target = target(&out_dir, &plan);
        eprintln!(
            "{}",
            summary(&sel, ckpt.kind, &ckpt.dir, &target, bytes, elapsed)
        );
    }
    Ok(ExitStatus::Success)
}

/// Plans `--remove_checkpoint_dir`, if given: refused, before anything is written, when the output
/// leaves out items the checkpoint is the only copy of, when the output is inside the checkpoint
/// directory, or when the directory holds more than the checkpoint ([`plan_removal`]).
fn plan_checkpoint_removal(
    cli: &MergeCli,
    ckpt: &Checkpoint,
    sel: &select::Selected,
    out_dir: &Path,
) -> Result<Option<merge::remove::Plan>> {
    if !cli.remove_checkpoint_dir {
        return Ok(None);
    }
    if !sel.skipped.is_empty() {
        // The checkpoint would be the only copy of what the output leaves out.
        return Err(crate::error::Error::msg(
            ExitStatus::Usage,
            format!(
                "--remove_checkpoint_dir would delete items the output leaves out: {} (keep them with --include-bytes, or keep the checkpoint)",
                sel.skipped.join(", ")
            ),
        ));
    }
    let c = std::fs::canonicalize(&cli.checkpoint_directory).unwrap_or_default();
    if canonical_or_parent(out_dir).starts_with(&c) {
        return Err(crate::error::Error::msg(
            ExitStatus::Usage,
            "--remove_checkpoint_dir with an output inside the checkpoint directory would delete the output",
        ));
    }
    Ok(Some(plan_removal(&cli.checkpoint_directory, ckpt)?))
}

/// The names the merge puts into the output directory: the weight files, the index, and the
/// --hf-reference files.
fn output_names(plan: &write::Plan, hf: &[PathBuf]) -> Vec<String> {
    let mut names: Vec<String> = plan.files.iter().map(|f| f.name.clone()).collect();
    names.extend(plan.index.iter().map(|(n, _)| n.clone()));
    names.extend(
        hf.iter()
            .filter_map(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned()),
    );
    names
}

/// From here on every signal whose default is to end the process (SIGKILL aside) stops the merge
/// between tensors, so that what was staged is removed instead of left behind. The flag holds the
/// signal's number once one came (0: none), for the exit status 128+N.
fn stop_on_signals() -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    let interrupted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for sig in STOPPING_SIGNALS {
        let _ = signal_hook::flag::register_usize(sig, interrupted.clone(), sig as usize);
    }
    interrupted
}

/// Removes the staging directories in `out_dir` of merges that are gone: all there are, as the
/// output's lock, held here, says that no other merge writes there. Not the pid in a staging
/// directory's name: it is a pid of the host and pid namespace the merge ran in, which may be another
/// (a container, another node over NFS), where a live merge's pid is no process here and a dead
/// one's can be a live process's (pid 1, in a container).
fn remove_abandoned_staging(out_dir: &Path, _held: &OutputLock) {
    for (dir, pid) in write::staging_dirs(out_dir) {
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => eprintln!(
                "{TOOL}: removed `{}`, left by a merge (process {pid}) that is gone",
                dir.display()
            ),
            Err(e) => eprintln!(
                "{TOOL}: warning: cannot remove `{}`, left by a merge (process {pid}) that is gone: {e}",
                dir.display()
            ),
        }
    }
}

/// Refuses to write over a file the output would replace (without --force).
fn refuse_existing(out_dir: &Path, names: &[String]) -> Result<(), MergeError> {
    for n in names {
        let p = out_dir.join(n);
        if p.exists() {
            return Err(MergeError::Exists(p));
        }
    }
    Ok(())
}

/// Makes the output directory if it is missing (and its parents); says whether this merge made it.
/// Only a directory this call's own `mkdir` made counts: one that appears meanwhile is someone
/// else's, as is one that was there.
fn make_output_dir(out_dir: &Path) -> Result<bool, MergeError> {
    if let Some(parent) = out_dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| MergeError::io("create", parent, lookup::mkdir_error(parent, e)))?;
    }
    match std::fs::create_dir(out_dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            match std::fs::metadata(out_dir) {
                Ok(m) if m.is_dir() => Ok(false),
                Ok(_) => Err(MergeError::OutputNotADirectory(out_dir.to_path_buf())),
                Err(e) => Err(MergeError::io("create", out_dir, e)),
            }
        }
        Err(e) => Err(MergeError::io("create", out_dir, e)),
    }
}

/// Makes the output directory if need be ([`make_output_dir`]) and takes its lock, which this merge
/// holds until its output is in place or discarded: whether it made the directory, and the lock.
fn lock_output_dir(out_dir: &Path) -> Result<(bool, OutputLock), MergeError> {
    let mut tries = 0;
    loop {
        let created = make_output_dir(out_dir)?;
        match OutputLock::take(out_dir) {
            Ok(lock) => return Ok((created, lock)),
            // Removed between the two steps, emptied, by a merge that had made it and failed.
            Err(MergeError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound && tries < 3 =>
            {
                tries += 1;
            }
            Err(e) => {
                if created {
                    let _ = std::fs::remove_dir(out_dir);
                }
                return Err(e);
            }
        }
    }
}

/// What a failed merge removes: the staging directory it made (`None` if it made none), and the output directory if it made it and nothing
/// else is in it. Whatever others put into the directory meanwhile (a user's file, another merge's
/// output) stays, and with it the directory: `rmdir` removes only an empty one, in one step, so
/// nothing written there at any moment is lost.
/// The lock goes (with its file) before the directory, which it would keep from being empty.
fn discard_failed(staging: Option<&Path>, lock: OutputLock, out_dir: &Path, created: bool) {
    if let Some(staging) = staging {
        let _ = std::fs::remove_dir_all(staging);
    }
    drop(lock);
    if created {
        let _ = std::fs::remove_dir(out_dir);
    }
}

/// The bytes of the files in `out_dir` that `--force` replaces ([`replaced_files`]).
fn replaced_bytes(out_dir: &Path, names: &[String]) -> u64 {
    replaced_files(out_dir, names)
        .iter()
        .filter_map(|p| p.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// Runs the planned `--remove_checkpoint_dir`, once the output is in place.
fn remove_checkpoint(removal: merge::remove::Plan, dir: &Path) -> Result<(), MergeError> {
    let kept = removal
        .execute()
        .map_err(|e| MergeError::io("remove", dir, e))?;
    for k in kept {
        eprintln!("{TOOL}: warning: --remove_checkpoint_dir {k}");
    }
    Ok(())
}

/// Where the summary says the output went: the one file, or the directory and its number of files.
fn target(out_dir: &Path, plan: &write::Plan) -> String {
    if plan.files.len() == 1 {
        out_dir.join(&plan.files[0].name).display().to_string()
    } else {
        format!("{} ({} files)", out_dir.display(), plan.files.len())
    }
}

/// The line a merge ends with: what was merged from which checkpoint into `target`, at what speed,
/// and what the selection took and left out.
fn summary(
    sel: &select::Selected,
    kind: merge::Kind,
    dir: &Path,
    target: &str,
    bytes: u64,
    elapsed: f64,
) -> String {
    let mut line = format!(
        "{TOOL}: merged {} tensors ({}) from {} checkpoint {} into {target} in {:.1}s ({}/s)",
        sel.tensors.len(),
        human(bytes),
        kind,
        dir.display(),
        elapsed,
        human((bytes as f64 / elapsed.max(1e-6)) as u64),
    );
    if !sel.skipped.is_empty() {
        line.push_str(&format!("; skipped {} non-tensor items", sel.skipped.len()));
    }
    line.push_str(&format!("; took {}", sel.layout));
    if !sel.left_out.is_empty() {
        line.push_str(&format!(
            "; left out top-level keys: {}",
            sel.left_out.join(", ")
        ));
    }
    if !sel.excluded.is_empty() {
        line.push_str(&format!(
            "; --exclude-key left out {} tensors",
            sel.excluded.len()
        ));
    }
    line
}

#[allow(clippy::too_many_arguments)]
fn write_staged(
    cli: &MergeCli,
    env: &Environment,
    ckpt: &Checkpoint,
    sel: &select::Selected,
    plan: &write::Plan,
    out_dir: &Path,
    staging: &Path,
    hf: &[PathBuf],
    names: &[String],
    interrupted: &std::sync::atomic::AtomicUsize,
) -> Result<(f64, u64), MergeError> {
    let start = Instant::now();
    let bar = progress_bar(cli, env, plan.tensor_bytes);
    let tick = |n: u64| {
        if let Some(b) = &bar {
            b.inc(n);
        }
    };
    write::write_files(
        plan,
        staging,
        &sel.tensors,
        &ckpt.entries,
        &ckpt.inputs,
        &tick,
        interrupted,
    )
    .map_err(merge::input::explain)?;
    // The bytes copied are the bytes checked only if no input changed since it was opened.
    merge::input::check_all(&ckpt.inputs)?;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    write::verify(plan, staging, &sel.tensors)?;
    for src in hf {
        if let Some(name) = src.file_name() {
            let dst = staging.join(name);
            std::fs::copy(src, &dst).map_err(|e| MergeError::io("copy", src, e))?;
        }
    }
    let sig = interrupted.load(std::sync::atomic::Ordering::Relaxed);
    if sig != 0 {
        return Err(MergeError::Interrupted(sig as i32));
    }
    commit(out_dir, staging, names, cli.force)?;
    std::fs::remove_dir_all(staging).map_err(|e| MergeError::io("remove", staging, e))?;
    Ok((start.elapsed().as_secs_f64(), plan.tensor_bytes))
}

/// Plans `--remove_checkpoint_dir`: refused, before anything is written, when the directory holds
/// anything but the files of the checkpoint this merge reads.
fn plan_removal(dir: &Path, ckpt: &Checkpoint) -> Result<merge::remove::Plan, MergeError> {
    let refusal = match merge::remove::plan(dir, &ckpt.files) {
        Ok(Ok(plan)) => return Ok(plan),
        Ok(Err(refusal)) => refusal,
        Err(e) => return Err(MergeError::io("read", dir, e)),
    };
    let mut hints = Vec::new();
    if ckpt.dir != dir {
        hints.push(format!(
            "to merge and delete only the checkpoint read, pass its own directory `{}`",
            ckpt.dir.display()
        ));
    }
    hints.push(
        "or merge without --remove_checkpoint_dir and delete what is no longer needed yourself"
            .into(),
    );
    Err(MergeError::RemoveRefused {
        dir: dir.to_path_buf(),
        others: refusal.others,
        hints,
    })
}

/// The canonical form of a path that may not exist yet: its nearest existing ancestor, canonicalized,
/// with the rest appended.
fn canonical_or_parent(p: &Path) -> PathBuf {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut tail = Vec::new();
    let mut cur = abs.as_path();
    loop {
        if let Ok(c) = std::fs::canonicalize(cur) {
            return tail.iter().rev().fold(c, |acc: PathBuf, n| acc.join(n));
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                tail.push(name.to_owned());
                cur = parent;
            }
            _ => return abs,
        }
    }
}

/// Whether a file name is one a loader takes for weights: `model*.safetensors`, `pytorch_model*.bin`
/// and their indexes (transformers' `modeling_utils` looks for these names, the single file first).
fn is_weight_file(name: &str) -> bool {
    (name.starts_with("model")
        && (name.ends_with(".safetensors") || name == "model.safetensors.index.json"))
        || (name.starts_with("pytorch_model")
            && (name.ends_with(".bin") || name == "pytorch_model.bin.index.json"))
}

/// Moves the staged files into `out_dir`. With `force`, every weight file already there (whatever its
/// format or sharding: an old `model.safetensors` next to new shards would be loaded first) is first
/// moved into the staging directory, and moved back if any step fails, so the directory ends with
/// exactly the new output's weights or exactly the old ones.
fn commit(out_dir: &Path, staging: &Path, names: &[String], force: bool) -> Result<(), MergeError> {
    let old_dir = staging.join(".replaced");
    let mut moved_out: Vec<String> = Vec::new();
    let mut moved_in: Vec<&String> = Vec::new();
    let undo = |moved_out: &[String], moved_in: &[&String]| {
        for n in moved_in {
            let _ = std::fs::remove_file(out_dir.join(n));
        }
        for n in moved_out {
            let _ = std::fs::rename(old_dir.join(n), out_dir.join(n));
        }
    };
    if force {
        std::fs::read_dir(out_dir).map_err(|e| MergeError::io("read", out_dir, e))?;
        let old: Vec<String> = replaced_files(out_dir, names)
            .iter()
            .filter_map(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        if !old.is_empty() {
            std::fs::create_dir(&old_dir).map_err(|e| MergeError::io("create", &old_dir, e))?;
        }
        for n in old {
            if let Err(e) = std::fs::rename(out_dir.join(&n), old_dir.join(&n)) {
                undo(&moved_out, &moved_in);
                return Err(MergeError::io("remove", out_dir.join(&n), e));
            }
            moved_out.push(n);
        }
    }
    for n in names {
        let to = out_dir.join(n);
        if let Err(e) = std::fs::rename(staging.join(n), &to) {
            undo(&moved_out, &moved_in);
            return Err(MergeError::io("rename", &to, e));
        }
        moved_in.push(n);
    }
    Ok(())
}

/// The files of `out_dir` that `--force` replaces: every weight file, and whatever has a name the
/// new output takes.
fn replaced_files(out_dir: &Path, names: &[String]) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(out_dir) else {
        return Vec::new();
    };
    let mut old: Vec<PathBuf> = rd
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink()))
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            is_weight_file(&n) || names.contains(&n)
        })
        .map(|e| e.path())
        .collect();
    old.sort();
    old
}

fn hf_files(dir: &Path) -> Result<Vec<PathBuf>, MergeError> {
    if !lookup::is_dir(dir)? {
        return Err(MergeError::NotADirectory(dir.to_path_buf()));
    }
    let mut found = Vec::new();
    for p in HF_FILES.iter().map(|n| dir.join(n)) {
        if lookup::is_file(&p)? {
            found.push(p);
        }
    }
    if found.is_empty() {
        return Err(MergeError::NotACheckpoint {
            path: dir.to_path_buf(),
            found: "no config.json or tokenizer files".into(),
            hint: "--hf-reference takes a Hugging Face model directory (with config.json)".into(),
        });
    }
    Ok(found)
}

fn selection(cli: &MergeCli) -> Selection {
    Selection {
        key: cli.key.clone(),
        all_keys: cli.all_keys,
        strip_prefix: cli.strip_prefix.clone(),
        exclude: cli.exclude_key.clone(),
        dtype: match cli.dtype {
            DtypeArg::Keep => None,
            DtypeArg::Fp32 => Some(DType::F32),
            DtypeArg::Bf16 => Some(DType::BF16),
            DtypeArg::Fp16 => Some(DType::F16),
        },
    }
}

fn progress_bar(cli: &MergeCli, env: &Environment, total: u64) -> Option<indicatif::ProgressBar> {
    let off = cli.quiet
        || !std::io::stderr().is_terminal()
        || env.get(ACCEL_NO_PROGRESS).is_some_and(|v| !v.is_empty());
    if off {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total);
    let style = indicatif::ProgressStyle::with_template(
        "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    Some(bar)
}

fn human(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

fn inspect(cli: &MergeCli, ckpt: &Checkpoint, sel: &select::Selected) -> Result<ExitStatus> {
    let rows: Vec<(String, &merge::Entry, DType)> = sel
        .tensors
        .iter()
        .map(|t| (t.name.clone(), &ckpt.entries[t.entry], t.dtype))
        .collect();
    let total_bytes: u64 = rows
        .iter()
        .map(|(_, e, d)| e.numel() * d.size() as u64)
        .sum();
    let total_chunks: usize = rows.iter().map(|(_, e, _)| e.pieces.len()).sum();
    if cli.json {
        let tensors: Vec<serde_json::Value> = rows
            .iter()
            .map(|(name, e, d)| {
                serde_json::json!({
                    "name": name,
                    "dtype": d.safetensors(),
                    "shape": e.shape,
                    "chunks": e.pieces.len(),
                    "bytes": e.numel() * d.size() as u64,
                })
            })
            .collect();
        let v = serde_json::json!({
            "format": ckpt.kind.to_string(),
            "directory": ckpt.dir,
            "unwrapped_key": sel.unwrapped,
            "left_out_keys": sel.left_out,
            "layout": sel.layout,
            "excluded": sel.excluded,
            "notes": ckpt.notes,
            "tensors": tensors,
            "skipped_non_tensor": sel.skipped,
            "files": ckpt.inputs.iter().map(|i| i.path.clone()).collect::<Vec<_>>(),
            "total": {"tensors": rows.len(), "chunks": total_chunks, "bytes": total_bytes},
        });
        crate::tools::print(&(serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"))?;
        return Ok(ExitStatus::Success);
    }
    let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(4).max(4);
    let mut out = format!(
        "{:w$}  {:5}  {:20}  {:>6}  {:>12}\n",
        "NAME", "DTYPE", "SHAPE", "CHUNKS", "BYTES"
    );
    for (name, e, d) in &rows {
        out.push_str(&format!(
            "{name:w$}  {:5}  {:20}  {:>6}  {:>12}\n",
            d.safetensors(),
            format!("{:?}", e.shape),
            e.pieces.len(),
            e.numel() * d.size() as u64
        ));
    }
    out.push_str(&format!(
        "{} checkpoint {}: {} tensors, {} chunks, {} in {} files",
        ckpt.kind,
        ckpt.dir.display(),
        rows.len(),
        total_chunks,
        human(total_bytes),
        ckpt.inputs.len()
    ));
    if !sel.skipped.is_empty() {
        out.push_str(&format!("; {} non-tensor items skipped", sel.skipped.len()));
    }
    if let Some(k) = &sel.unwrapped {
        out.push_str(&format!("; showing top-level key `{k}`"));
    }
    out.push('\n');
    crate::tools::print(&out)?;
    Ok(ExitStatus::Success)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::select::{OutTensor, Selected};
    use crate::merge::{Entry, Kind};

    fn entries(n: usize) -> (Vec<Entry>, Vec<OutTensor>) {
        let entries = (0..n)
            .map(|i| Entry {
                path: vec![format!("w{i}")],
                dtype: DType::F32,
                shape: vec![4],
                tile_shape: vec![4],
                pieces: Vec::new(),
            })
            .collect();
        let tensors = (0..n)
            .map(|i| OutTensor {
                name: format!("w{i}"),
                entry: i,
                dtype: DType::F32,
            })
            .collect();
        (entries, tensors)
    }

    #[test]
    fn the_output_names_are_the_shards_the_index_and_the_hf_files() {
        let (e, t) = entries(2);
        let plan = write::plan(Format::Safetensors, &t, &e, Some(16));
        let hf = [PathBuf::from("ref/config.json")];
        assert_eq!(
            output_names(&plan, &hf),
            [
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors",
                "model.safetensors.index.json",
                "config.json"
            ]
        );
        assert_eq!(target(Path::new("out"), &plan), "out (2 files)");
        let one = write::plan(Format::Safetensors, &t, &e, None);
        assert_eq!(output_names(&one, &[]), ["model.safetensors"]);
        assert_eq!(target(Path::new("out"), &one), "out/model.safetensors");
    }

    #[test]
    fn the_summary_says_what_was_merged_and_what_was_left_out() {
        let (_, tensors) = entries(2);
        let mut sel = Selected {
            tensors,
            layout: "the top-level key `model`".into(),
            ..Default::default()
        };
        let line = summary(&sel, Kind::Zero(3), Path::new("ck"), "out", 3 << 20, 2.0);
        assert_eq!(
            line,
            "accel-merge-weights: merged 2 tensors (3.0 MiB) from DeepSpeed ZeRO-3 checkpoint ck into out in 2.0s (1.5 MiB/s); took the top-level key `model`"
        );
        sel.skipped = vec!["extra".into()];
        sel.left_out = vec!["optim".into(), "rng".into()];
        sel.excluded = vec!["a".into(), "b".into(), "c".into()];
        let line = summary(&sel, Kind::Dcp, Path::new("ck"), "out", 100, 0.0);
        assert!(
            line.ends_with("; skipped 1 non-tensor items; took the top-level key `model`; left out top-level keys: optim, rng; --exclude-key left out 3 tensors"),
            "{line}"
        );
        assert!(
            line.contains("(100 B) from DCP checkpoint ck into out in 0.0s"),
            "{line}"
        );
    }
}
