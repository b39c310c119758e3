//! DeepSpeed ZeRO checkpoints (stages 1–3), read with `zero_to_fp32.py`'s semantics: trainable params are
//! rebuilt in fp32 from each rank's flat partitions of the optimizer's master weights, buffers come from
//! rank 0's model file (cast to fp32, as `.float()` does), frozen params keep their saved dtype, and tied
//! aliases repeat their source. Each param becomes a flat tiling of slices of the ranks' tensors, so the
//! writer streams ZeRO exactly as it streams DCP chunks.

use std::path::{Path, PathBuf};

use super::copy::Piece;
use super::input::Input;
use super::lookup;
use super::pickle::{Globals, Id, Node};
use super::ptfile::PtFile;
use super::tensor::{DType, TensorRef};
use super::{Checkpoint, Entry, Kind, MergeError};

/// A DeepSpeed save directory resolved to its tag directory and files.
pub struct Found {
    pub dir: PathBuf,
    pub model_files: Vec<PathBuf>,
    pub optim_files: Vec<PathBuf>,
    /// The save directory's own files when a save directory (not a tag directory) was given:
    /// `latest` and the recovery scripts DeepSpeed copies beside the tags.
    pub save_dir_files: Vec<PathBuf>,
}

/// The scripts DeepSpeed writes into a save directory (deepspeed/runtime/engine.py::_copy_recovery_script).
const RECOVERY_SCRIPTS: &[&str] = &["zero_to_fp32.py", "zero_to_torch.py"];

fn natural_key(p: &Path) -> Vec<(String, u64)> {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut out = Vec::new();
    let mut text = String::new();
    let mut num = String::new();
    for c in name.chars() {
        if c.is_ascii_digit() {
            num.push(c);
        } else {
            if !num.is_empty() {
                out.push((std::mem::take(&mut text), num.parse().unwrap_or(0)));
                num.clear();
            }
            text.push(c);
        }
    }
    out.push((text, num.parse().unwrap_or(0)));
    out
}

fn list(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().ends_with(suffix))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort_by_key(|p| natural_key(p));
    v
}

/// Recognises a DeepSpeed save directory (with `latest`) or a tag directory.
pub fn detect(dir: &Path, tag: Option<&str>) -> Result<Option<Found>, MergeError> {
    let latest = dir.join("latest");
    let tag_dir = if let Some(t) = tag {
        dir.join(t)
    } else if lookup::is_file(&latest)? {
        let t = std::fs::read_to_string(&latest).map_err(|e| MergeError::io("read", &latest, e))?;
        dir.join(t.trim())
    } else if !list(dir, "_model_states.pt").is_empty() {
        dir.to_path_buf()
    } else {
        return Ok(None);
    };
    if !lookup::is_dir(&tag_dir)? {
        return Err(MergeError::NotACheckpoint {
            path: dir.to_path_buf(),
            found: format!(
                "a DeepSpeed save directory whose tag directory `{}` is missing",
                tag_dir.display()
            ),
            hint: "check `latest`, or pass --tag".into(),
        });
    }
    let model_files = list(&tag_dir, "_model_states.pt");
    let optim_files = list(&tag_dir, "_optim_states.pt");
    if model_files.is_empty() {
        return Err(MergeError::NotACheckpoint {
            path: tag_dir.clone(),
            found: format!(
                "a DeepSpeed checkpoint with no `*_model_states.pt` file and {} `*_optim_states.pt` files",
                optim_files.len()
            ),
            hint: "the model state files are needed (zero_to_fp32 semantics); was the save interrupted?"
                .into(),
        });
    }
    let mut save_dir_files = Vec::new();
    if tag_dir != dir {
        for p in std::iter::once("latest")
            .chain(RECOVERY_SCRIPTS.iter().copied())
            .map(|n| dir.join(n))
        {
            if lookup::is_file(&p)? {
                save_dir_files.push(p);
            }
        }
    }
    Ok(Some(Found {
        dir: tag_dir,
        model_files,
        optim_files,
        save_dir_files,
    }))
}

/// ZeRO's pieces: flat runs of a tensor that has at most one dim larger than 1.
impl PtFile {
    fn piece(&self, t: &TensorRef, start: usize, skip: u64, tile_at: u64, len: u64) -> Piece {
        let stride = flat_stride(t);
        Piece {
            offsets: vec![tile_at],
            sizes: vec![len],
            input: self.input,
            storage_start: start,
            dtype: t.dtype,
            offset: t.offset + skip * stride,
            strides: vec![stride],
            big_endian: self.big_endian,
        }
    }
}

/// The element stride of a tensor with at most one dim larger than 1.
fn flat_stride(t: &TensorRef) -> u64 {
    t.shape
        .iter()
        .zip(&t.strides)
        .find(|(&n, _)| n != 1)
        .map_or(1, |(_, &s)| s)
}

fn as_1d(t: &TensorRef) -> bool {
    t.shape.len() == 1 || t.numel() <= 1 || t.shape.iter().filter(|&&s| s != 1).count() <= 1
}

/// Reads a ZeRO checkpoint into entries, in zero_to_fp32's order
/// (zero_to_fp32.py::_get_fp32_state_dict_from_zero_checkpoint): buffers, frozen params, trainable
/// params, tied aliases.
pub fn read(found: Found) -> Result<Checkpoint, MergeError> {
    let mut inputs = Vec::new();
    if found.optim_files.is_empty() {
        return read_stage0(found, &mut inputs);
    }
    let mut optim = Vec::new();
    for p in &found.optim_files {
        optim.push(PtFile::load(p, &mut inputs, Globals::Any)?);
    }
    let (stage, world) = stage_and_world(&optim[0], &inputs)?;
    missing_ranks(&found.dir, &found.optim_files, world, "optim")?;
    if stage == 3 {
        missing_ranks(&found.dir, &found.model_files, world, "model")?;
    }
    let m = PtFile::load(&found.model_files[0], &mut inputs, Globals::Any)?;
    let root = m.pickle.root;
    let module = m
        .get(root, "module")
        .ok_or_else(|| m.bad(&inputs, "no `module`"))?;
    let mut unwritable = Vec::new();
    let mut entries = buffers(&m, module, &inputs, &mut unwritable)?;
    let mut crcs = Vec::new();
    let frozen_shapes = m
        .get(root, "frozen_param_shapes")
        .filter(|&f| m.pickle.pairs(f).is_some());
    if let Some(shapes) = frozen_shapes {
        let mut extra = Vec::new();
        if stage == 3 {
            for p in &found.model_files[1..] {
                extra.push(PtFile::load(p, &mut inputs, Globals::Any)?);
            }
        }
        let models: Vec<&PtFile> = std::iter::once(&m).chain(&extra).collect();
        entries.extend(frozen_params(&models, shapes, stage, &inputs)?);
        for f in &extra {
            crcs.extend(f.read.take());
        }
    }
    let groups = param_groups(&m, &inputs)?;
    let flats = rank_flats(&optim, stage, &inputs)?;
    if stage < 3 {
        entries.extend(partitioned_params(
            &optim, &flats, &groups, &found.dir, &inputs,
        )?);
    } else {
        entries.extend(stage3_params(&optim, &flats, &groups, &found.dir)?);
    }
    let notes = match frozen_shapes {
        None => unrecorded_frozen(
            &m,
            module,
            stage,
            &found.model_files[0],
            &mut entries,
            &mut unwritable,
            &inputs,
        )?,
        Some(_) => Vec::new(),
    };
    tie_aliases(&m, &mut entries);
    for f in optim.iter().chain([&m]) {
        crcs.extend(f.read.take());
    }
    let files = checkpoint_files(&found, stage);
    Ok(Checkpoint {
        kind: Kind::Zero(stage as u8),
        dir: found.dir,
        inputs,
        entries,
        bytes_items: Vec::new(),
        notes,
        crcs,
        unwritable,
        files,
    })
}

/// The ZeRO stage and the world size the optimizer state was saved with (rank 0's file).
fn stage_and_world(o0: &PtFile, inputs: &[Input]) -> Result<(i64, i64), MergeError> {
    let osd = o0
        .get(o0.pickle.root, "optimizer_state_dict")
        .ok_or_else(|| o0.bad(inputs, "no `optimizer_state_dict`"))?;
    let stage = o0
        .get(osd, "zero_stage")
        .and_then(|z| o0.int(z))
        .ok_or_else(|| {
            o0.bad(
                inputs,
                "no `zero_stage`: not a ZeRO checkpoint (a BF16_Optimizer one?)",
            )
        })?;
    if !(1..=3).contains(&stage) {
        return Err(o0.bad(inputs, format!("unknown zero stage {stage}")));
    }
    let world = o0
        .get(osd, "partition_count")
        .and_then(|pc| {
            o0.int(pc).or_else(|| {
                o0.pickle
                    .seq(pc)
                    .and_then(|v| v.iter().filter_map(|&x| o0.pickle.as_int(x)).max())
            })
        })
        .ok_or_else(|| o0.bad(inputs, "no `partition_count`"))?;
    Ok((stage, world))
}

/// The dtype a buffer is written in: floating ones as fp32, the rest as saved (zero_to_fp32's
/// `v.float() if v.is_floating_point() else v`; a float8 buffer is kept as saved).
fn buffer_dtype(saved: DType) -> DType {
    if saved.is_float() {
        DType::F32
    } else {
        saved
    }
}

/// The buffers, from rank 0's module (`buffer_names`), in [`buffer_dtype`].
fn buffers(
    m: &PtFile,
    module: Id,
    inputs: &[Input],
    unwritable: &mut Vec<super::Unwritable>,
) -> Result<Vec<Entry>, MergeError> {
    let mut entries = Vec::new();
    let Some(names) = m
        .get(m.pickle.root, "buffer_names")
        .and_then(|b| m.pickle.seq(b))
    else {
        return Ok(entries);
    };
    for &n in names {
        let name = m
            .pickle
            .as_str(n)
            .ok_or_else(|| m.bad(inputs, "a buffer name is not a string"))?;
        let t = m
            .get(module, name)
            .ok_or_else(|| m.bad(inputs, format!("buffer `{name}` is not in `module`")))?;
        let Some((t, start)) = m.tensor_or_unwritable(inputs, t, name, unwritable)? else {
            continue;
        };
        entries.push(whole(m, &t, start, name, buffer_dtype(t.dtype)));
    }
    Ok(entries)
}

/// The frozen params `frozen_param_shapes` records (from stage 2 on), in their saved dtype. `models`
/// is rank 0's model state, then at stage 3 the other ranks' in rank order.
fn frozen_params(
    models: &[&PtFile],
    shapes: Id,
    stage: i64,
    inputs: &[Input],
) -> Result<Vec<Entry>, MergeError> {
    let m = models[0];
    let mut entries = Vec::new();
    for &(k, v) in m.pickle.pairs(shapes).unwrap_or(&[]) {
        let name = m.pickle.as_str(k).unwrap_or_default().to_owned();
        let shape = uints(m.pickle.ints(v))
            .ok_or_else(|| m.bad(inputs, format!("`{name}`: bad frozen shape")))?;
        entries.extend(frozen_param(models, name, shape, stage, inputs)?);
    }
    Ok(entries)
}

/// One frozen param from its `frozen_param_fragments`: below stage 3 rank 0 holds it whole; at
/// stage 3 it is the ranks' flat fragments laid end to end, cut at its size
/// (zero_to_fp32.py::_zero3_merge_frozen_params). A param of no elements gets no entry below stage 3.
fn frozen_param(
    models: &[&PtFile],
    name: String,
    shape: Vec<u64>,
    stage: i64,
    inputs: &[Input],
) -> Result<Option<Entry>, MergeError> {
    let n: u64 = shape.iter().product();
    let mut pieces = Vec::new();
    let mut dtype = None;
    let mut at = 0u64;
    for mf in models {
        if at >= n {
            break;
        }
        let frags = mf
            .get(mf.pickle.root, "frozen_param_fragments")
            .ok_or_else(|| mf.bad(inputs, "no `frozen_param_fragments`"))?;
        let t = mf
            .get(frags, &name)
            .ok_or_else(|| mf.bad(inputs, format!("no fragment of `{name}`")))?;
        let (t, start) = mf.tensor(inputs, t, &name)?;
        if !as_1d(&t) && stage == 3 {
            return Err(mf.bad(
                inputs,
                format!("`{name}`: a frozen fragment that is not flat"),
            ));
        }
        dtype = Some(t.dtype);
        if stage < 3 {
            // The full param, possibly multi-dim: tile it as a whole.
            return Ok(Some(whole(mf, &t, start, &name, t.dtype)));
        }
        let len = t.numel().min(n - at);
        pieces.push(mf.piece(&t, start, 0, at, len));
        at += len;
    }
    if stage < 3 {
        return Ok(None);
    }
    Ok(Some(Entry {
        path: vec![name],
        dtype: dtype.unwrap_or(DType::BF16),
        shape,
        tile_shape: vec![n],
        pieces,
    }))
}

/// The trainable params' names and shapes (`param_shapes`), per param group, in the order the flat
/// fp32 vectors hold them.
type Groups = Vec<Vec<(String, Vec<u64>)>>;

fn param_groups(m: &PtFile, inputs: &[Input]) -> Result<Groups, MergeError> {
    let groups = m
        .get(m.pickle.root, "param_shapes")
        .and_then(|ps| m.pickle.seq(ps))
        .ok_or_else(|| m.bad(inputs, "no `param_shapes`"))?;
    Ok(groups
        .iter()
        .map(|&g| {
            m.pickle
                .pairs(g)
                .unwrap_or(&[])
                .iter()
                .map(|&(k, v)| {
                    let name = m.pickle.as_str(k).unwrap_or_default().to_owned();
                    (name, uints(m.pickle.ints(v)).unwrap_or_default())
                })
                .collect()
        })
        .collect())
}

/// Per rank, its flat fp32 tensors and their storage starts.
type Flats = Vec<Vec<(TensorRef, usize)>>;

/// Each rank's flat fp32 tensors: one partition per param group (stage 1/2,
/// `single_partition_of_fp32_groups`) or its sub-groups (stage 3, `fp32_flat_groups`).
fn rank_flats(optim: &[PtFile], stage: i64, inputs: &[Input]) -> Result<Flats, MergeError> {
    let key = if stage == 3 {
        "fp32_flat_groups"
    } else {
        "single_partition_of_fp32_groups"
    };
    let mut flats = Vec::new();
    for o in optim {
        let osd = o
            .get(o.pickle.root, "optimizer_state_dict")
            .ok_or_else(|| o.bad(inputs, "no `optimizer_state_dict`"))?;
        let list = o
            .get(osd, key)
            .and_then(|l| o.pickle.seq(l))
            .ok_or_else(|| o.bad(inputs, format!("no `{key}`")))?;
        let mut v = Vec::new();
        for &t in list {
            let (t, start) = o.tensor(inputs, t, key)?;
            if !as_1d(&t) {
                return Err(o.bad(inputs, format!("`{key}` holds a tensor that is not flat")));
            }
            v.push((t, start));
        }
        flats.push(v);
    }
    Ok(flats)
}

/// A trainable param: fp32, tiled flat from `pieces`.
fn trainable(name: &str, shape: &[u64], pieces: Vec<Piece>) -> Entry {
    Entry {
        path: vec![name.to_owned()],
        dtype: DType::F32,
        shape: shape.to_vec(),
        tile_shape: vec![shape.iter().product()],
        pieces,
    }
}

/// The trainable params at stage 1 and 2: a param group's full flat vector is the ranks' partitions,
/// concatenated, and each param a span of it (zero_to_fp32.py::_zero2_merge_trainable_params).
fn partitioned_params(
    optim: &[PtFile],
    flats: &Flats,
    groups: &Groups,
    dir: &Path,
    inputs: &[Input],
) -> Result<Vec<Entry>, MergeError> {
    let mut entries = Vec::new();
    for (g, params) in groups.iter().enumerate() {
        let mut parts = Vec::new();
        for (r, o) in optim.iter().enumerate() {
            let (t, start) = flats[r]
                .get(g)
                .ok_or_else(|| o.bad(inputs, format!("no partition for param group {g}")))?;
            parts.push((t, *start));
        }
        let lens: Vec<u64> = parts.iter().map(|(t, _)| t.numel()).collect();
        let mut o = 0u64;
        for (name, shape) in params {
            let n: u64 = shape.iter().product();
            let pieces = overlaps(&lens, o, n)
                .into_iter()
                .map(|s| {
                    let (t, start) = parts[s.part];
                    optim[s.part].piece(t, start, s.skip, s.at, s.len)
                })
                .collect();
            entries.push(trainable(name, shape, pieces));
            o += n;
        }
        let total: u64 = lens.iter().sum();
        if !fills_partitions(o, total, optim.len() as u64) {
            return Err(MergeError::Invalid {
                path: dir.to_path_buf(),
                message: format!(
                    "param group {g}: the params need {o} elements but the partitions hold {total}"
                ),
            });
        }
    }
    Ok(entries)
}

/// Whether params of `need` elements fill partitions of `held` elements saved by `world` ranks: both
/// are padded to a multiple of 2 × world (zero_to_fp32.py::_zero2_merge_trainable_params,
/// `zero2_align`).
fn fills_partitions(need: u64, held: u64, world: u64) -> bool {
    let align = 2 * world;
    need.div_ceil(align) * align == held.div_ceil(align) * align
}

/// The trainable params at stage 3: every param is split evenly across the ranks (the last ones
/// padded), and each rank's share sits in its sub-groups laid end to end
/// (zero_to_fp32.py::_zero3_merge_trainable_params).
fn stage3_params(
    optim: &[PtFile],
    flats: &Flats,
    groups: &Groups,
    dir: &Path,
) -> Result<Vec<Entry>, MergeError> {
    let w = optim.len() as u64;
    let lens: Vec<Vec<u64>> = flats
        .iter()
        .map(|rank| rank.iter().map(|(t, _)| t.numel()).collect())
        .collect();
    let mut entries = Vec::new();
    let mut o = 0u64;
    for (name, shape) in groups.iter().flatten() {
        let n: u64 = shape.iter().product();
        let mut pieces = Vec::new();
        let p = stage3_per_rank(n, w);
        for (r, rank) in flats.iter().enumerate() {
            let valid = stage3_valid(n, p, r as u64);
            // Rank r's share is elements [o, o+valid) of its sub-groups laid end to end.
            for s in overlaps(&lens[r], o, valid) {
                let (t, start) = &rank[s.part];
                pieces.push(optim[r].piece(t, *start, s.skip, r as u64 * p + s.at, s.len));
            }
        }
        entries.push(trainable(name, shape, pieces));
        o += p;
    }
    let held: u64 = lens[0].iter().sum();
    if o != held {
        return Err(MergeError::Invalid {
            path: dir.to_path_buf(),
            message: format!("the params need {o} elements per rank but rank 0 holds {held}"),
        });
    }
    Ok(entries)
}

/// The elements each of `world` ranks holds of a stage-3 param of `numel`, padding included
/// (zero_to_fp32.py::_zero3_partitioned_param_info: `math.ceil(unpartitioned_numel / world_size)`).
fn stage3_per_rank(numel: u64, world: u64) -> u64 {
    numel.div_ceil(world)
}

/// How many of the `per_rank` elements rank `rank` holds of a stage-3 param of `numel` are the
/// param's own; the rest is padding.
fn stage3_valid(numel: u64, per_rank: u64, rank: u64) -> u64 {
    per_rank.min(numel.saturating_sub(rank * per_rank))
}

/// Where the span `[from, from + len)` of a vector laid out as parts of `lens` elements, end to
/// end, lies: each part it overlaps, with the offset into the part, the offset into the span and
/// the length of the overlap.
fn overlaps(lens: &[u64], from: u64, len: u64) -> Vec<Overlap> {
    let mut out = Vec::new();
    let mut lo = 0u64;
    for (part, &n) in lens.iter().enumerate() {
        let hi = lo + n;
        let a = from.max(lo);
        let b = (from + len).min(hi);
        if a < b {
            out.push(Overlap {
                part,
                skip: a - lo,
                at: a - from,
                len: b - a,
            });
        }
        lo = hi;
    }
    out
}

/// One part's share of a span (see [`overlaps`]).
#[derive(Debug, PartialEq, Eq)]
struct Overlap {
    part: usize,
    /// Elements of the part before the span begins in it.
    skip: u64,
    /// Where in the span the part's share begins.
    at: u64,
    len: u64,
}

/// Params the save does not record as frozen. DeepSpeed records frozen params
/// (`frozen_param_shapes`) only from stage 2 on (deepspeed/runtime/engine.py::_save_checkpoint); at
/// stage 1 zero_to_fp32 drops them. Rank 0's module state (in `file`) holds every param in the
/// training dtype: the ones nothing else covers are taken from it, and a note says which.
fn unrecorded_frozen(
    m: &PtFile,
    module: Id,
    stage: i64,
    file: &Path,
    entries: &mut Vec<Entry>,
    unwritable: &mut Vec<super::Unwritable>,
    inputs: &[Input],
) -> Result<Vec<String>, MergeError> {
    let aliases: Vec<&str> = m
        .get(m.pickle.root, "shared_params")
        .and_then(|s| m.pickle.pairs(s))
        .unwrap_or(&[])
        .iter()
        .filter_map(|&(a, _)| m.pickle.as_str(a))
        .collect();
    let mut included: Vec<(String, DType)> = Vec::new();
    let mut lost = Vec::new();
    for &(k, v) in m.pickle.pairs(module).unwrap_or(&[]) {
        let Some(name) = m.pickle.as_str(k) else {
            continue;
        };
        if aliases.contains(&name) || entries.iter().any(|e| e.path == [name]) {
            continue;
        }
        // A module entry that is no tensor (a module's `_extra_state`) is not a parameter.
        if matches!(
            TensorRef::from_pickle(&m.pickle, v),
            Err(super::tensor::TensorError::NotATensor(_))
        ) {
            continue;
        }
        let Some((t, start)) = m.tensor_or_unwritable(inputs, v, name, unwritable)? else {
            continue;
        };
        if stage == 3 || t.numel() == 0 {
            lost.push(name.to_owned());
            continue;
        }
        entries.push(whole(m, &t, start, name, t.dtype));
        included.push((name.to_owned(), t.dtype));
    }
    if !lost.is_empty() {
        return Err(MergeError::Unsupported(format!(
            "the ZeRO-{stage} checkpoint records no frozen parameters, and {} of the module ({}) hold no data: they cannot be rebuilt",
            lost.len(),
            lost.join(", ")
        )));
    }
    if included.is_empty() {
        return Ok(Vec::new());
    }
    let mut dtypes: Vec<&str> = included.iter().map(|(_, d)| d.torch()).collect();
    dtypes.sort();
    dtypes.dedup();
    Ok(vec![format!(
        "{} frozen parameter(s) ({}) are not in the ZeRO-{stage} optimizer state; included from the module state of `{}` in their saved dtype {} (zero_to_fp32 leaves them out)",
        included.len(),
        included.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", "),
        file_name(file),
        dtypes.join(", ")
    )])
}

/// Tied weights (`shared_params`, alias → source): the alias gets a copy of its source.
fn tie_aliases(m: &PtFile, entries: &mut Vec<Entry>) {
    let Some(shared) = m
        .get(m.pickle.root, "shared_params")
        .and_then(|s| m.pickle.pairs(s))
    else {
        return;
    };
    for &(a, s) in shared {
        let (Some(alias), Some(src)) = (m.pickle.as_str(a), m.pickle.as_str(s)) else {
            continue;
        };
        if let Some(e) = entries.iter().find(|e| e.path == [src]).cloned() {
            entries.push(Entry {
                path: vec![alias.to_owned()],
                ..e
            });
        }
    }
}

/// The checkpoint's files: the save directory's own, every rank's optimizer state, rank 0's model
/// state, and at stage 3 every rank's model state (their number checked against the world size).
fn checkpoint_files(found: &Found, stage: i64) -> Vec<PathBuf> {
    let mut files = found.save_dir_files.clone();
    files.extend(found.optim_files.iter().cloned());
    if stage == 3 {
        files.extend(found.model_files.iter().cloned());
    } else {
        files.push(found.model_files[0].clone());
    }
    files
}

/// A file's name, for the notes.
fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The rank a `*zero_pp_rank_<r>_mp_rank_*` file was written by.
fn rank_of(p: &Path) -> Option<i64> {
    let name = p.file_name()?.to_str()?;
    let rest = &name[name.find("zero_pp_rank_")? + "zero_pp_rank_".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Checks that every rank of `world` has its `*_{what}_states.pt` file, naming the missing ones.
fn missing_ranks(dir: &Path, files: &[PathBuf], world: i64, what: &str) -> Result<(), MergeError> {
    let have: Vec<i64> = files.iter().filter_map(|f| rank_of(f)).collect();
    let prefix = files
        .iter()
        .filter_map(|f| {
            f.file_name()?
                .to_str()?
                .split("zero_pp_rank_")
                .next()
                .map(str::to_owned)
        })
        .next()
        .unwrap_or_default();
    let missing: Vec<String> = (0..world)
        .filter(|r| !have.contains(r))
        .map(|r| format!("`{prefix}zero_pp_rank_{r}_mp_rank_00_{what}_states.pt`"))
        .collect();
    if missing.is_empty() && files.len() as i64 == world {
        return Ok(());
    }
    Err(MergeError::NotACheckpoint {
        path: dir.to_path_buf(),
        found: if missing.is_empty() {
            format!(
                "{} `*_{what}_states.pt` files, but the checkpoint was saved by {world} ranks",
                files.len()
            )
        } else {
            format!(
                "a checkpoint saved by {world} ranks without {}",
                missing.join(", ")
            )
        },
        hint: "copy every rank's files; was the save interrupted?".into(),
    })
}

/// A save without ZeRO optimizer files: DeepSpeed stage 0 keeps the complete module weights in
/// `mp_rank_00_model_states.pt` (deepspeed/runtime/engine.py::_save_checkpoint), with the optimizer's
/// state beside them; a ZeRO save whose optimizer files are missing is an incomplete checkpoint.
/// With bf16 or fp16 the optimizer (deepspeed/runtime/fp16/unfused_optimizer.py) keeps an fp32
/// master of every trainable param in `optimizer.fp32_groups`: those are taken, as zero_to_fp32
/// takes ZeRO's, with frozen params as saved and floating buffers as fp32. Without masters the
/// module is read as saved. The notes say which.
fn read_stage0(found: Found, inputs: &mut Vec<Input>) -> Result<Checkpoint, MergeError> {
    let m = PtFile::load(&found.model_files[0], inputs, Globals::Any)?;
    let root = m.pickle.root;
    let stage = m
        .get(root, "ds_config")
        .and_then(|c| m.get(c, "zero_optimization"))
        .and_then(|z| m.get(z, "stage"))
        .and_then(|s| m.int(s))
        .unwrap_or(0);
    let has_shapes = m
        .get(root, "param_shapes")
        .is_some_and(|p| !matches!(m.pickle.node(p), Node::None));
    if stage != 0 || has_shapes {
        return Err(MergeError::NotACheckpoint {
            path: found.dir.clone(),
            found: format!(
                "a DeepSpeed ZeRO-{stage} checkpoint with {} `*_model_states.pt` and no `*_optim_states.pt` files",
                found.model_files.len()
            ),
            hint: "ZeRO keeps the weights in the optimizer state files (zero_to_fp32 semantics); copy every rank's files; was the save interrupted?".into(),
        });
    }
    let module = m
        .get(root, "module")
        .ok_or_else(|| m.bad(inputs, "no `module`"))?;
    let buffers: Vec<&str> = m
        .get(root, "buffer_names")
        .and_then(|b| m.pickle.seq(b))
        .unwrap_or(&[])
        .iter()
        .filter_map(|&n| m.pickle.as_str(n))
        .collect();
    let mut unwritable = Vec::new();
    // The module's tensors in order: (name, view, storage start, is a buffer).
    let mut saved: Vec<(String, TensorRef, usize, bool)> = Vec::new();
    for &(k, v) in m
        .pickle
        .pairs(module)
        .ok_or_else(|| m.bad(inputs, "`module` is not a dict"))?
    {
        let name = m
            .pickle
            .as_str(k)
            .ok_or_else(|| m.bad(inputs, "a module key is not a string"))?;
        let Some((t, start)) = m.tensor_or_unwritable(inputs, v, name, &mut unwritable)? else {
            continue;
        };
        saved.push((name.to_owned(), t, start, buffers.contains(&name)));
    }
    let file = file_name(&found.model_files[0]);
    let masters = stage0_masters(&m, inputs, &saved)?;
    let mut entries = Vec::new();
    let notes = match masters {
        Ok((masters, trained)) => {
            let mut frozen = Vec::new();
            for (i, (name, t, start, buffer)) in saved.iter().enumerate() {
                if let Some((mt, mstart)) = &masters[i] {
                    entries.push(whole(&m, mt, *mstart, name, DType::F32));
                } else if *buffer {
                    entries.push(whole(&m, t, *start, name, buffer_dtype(t.dtype)));
                } else {
                    frozen.push(format!("{name} ({})", t.dtype.torch()));
                    entries.push(whole(&m, t, *start, name, t.dtype));
                }
            }
            let mut note = format!(
                "a DeepSpeed stage 0 save (no ZeRO): the {trained} trainable parameter(s) are taken from the optimizer's fp32 master weights (`optimizer.fp32_groups` of `{file}`), as zero_to_fp32 takes ZeRO's; floating buffers as fp32"
            );
            if !frozen.is_empty() {
                note.push_str(&format!(
                    "; frozen parameters as saved: {}",
                    frozen.join(", ")
                ));
            }
            vec![note]
        }
        Err(why) => {
            let mut dtypes = Vec::new();
            for (name, t, start, _) in &saved {
                dtypes.push(t.dtype.torch());
                entries.push(whole(&m, t, *start, name, t.dtype));
            }
            dtypes.sort();
            dtypes.dedup();
            vec![format!(
                "a DeepSpeed stage 0 save (no ZeRO): the module weights are read from `{}` as saved ({}): {why}",
                found.model_files[0].display(),
                dtypes.join(", ")
            )]
        }
    };
    let crcs = m.read.take();
    let files = checkpoint_files(&found, 0);
    Ok(Checkpoint {
        kind: Kind::Zero(0),
        dir: found.dir,
        inputs: std::mem::take(inputs),
        entries,
        bytes_items: Vec::new(),
        notes,
        crcs,
        unwritable,
        files,
    })
}

/// Per module tensor: its fp32 master view and storage start, if it has one.
type Masters = Vec<Option<(TensorRef, usize)>>;

/// The fp32 master of each of the module's tensors (`None` for buffers, frozen params and dtypes
/// with no master) and the number of masters, or why there are none to take.
///
/// `fp32_groups` names nothing: it holds, per param group, the masters of the group's params in
/// the optimizer's order, and the module state dict lists every param (frozen ones too) in the
/// model's order. Each group is matched as a subsequence of the module's params, in order (as
/// `model.parameters()` and the decay / no-decay groups of the usual trainers list them), a param
/// taking a master of its shape whose values, rounded as DeepSpeed rounds them into the param after
/// each step, are the param's saved values. A tied param (one storage under two names) takes its
/// source's master. Every master must find its param, or none is taken.
fn stage0_masters(
    m: &PtFile,
    inputs: &[Input],
    saved: &[(String, TensorRef, usize, bool)],
) -> Result<Result<(Masters, usize), String>, MergeError> {
    let root = m.pickle.root;
    let Some(opt) = m
        .get(root, "optimizer")
        .filter(|&o| !matches!(m.pickle.node(o), Node::None))
    else {
        return Ok(Err("the save holds no optimizer state".into()));
    };
    let Some(groups) = m.get(opt, "fp32_groups").and_then(|g| m.pickle.seq(g)) else {
        let why = if m.get(opt, "fp32_groups_flat").is_some() {
            "its fp32 master weights are kept flat (`optimizer.fp32_groups_flat`, fp16's fused optimizer), which this tool does not map to names"
        } else {
            "the optimizer state holds no fp32 master weights (`optimizer.fp32_groups`)"
        };
        return Ok(Err(why.into()));
    };
    let mut out: Masters = vec![None; saved.len()];
    // A param stored where an earlier one is: a tied name (the state dict lists both).
    let alias_of = |i: usize| {
        let t = &saved[i].1;
        (0..i).find(|&j| {
            let u = &saved[j].1;
            !saved[j].3
                && u.key == t.key
                && u.offset == t.offset
                && u.shape == t.shape
                && u.strides == t.strides
        })
    };
    let aliases: Vec<Option<usize>> = (0..saved.len()).map(alias_of).collect();
    let bytes = inputs[m.input].bytes();
    let mut count = 0;
    for (g, &group) in groups.iter().enumerate() {
        let list = m.pickle.seq(group).ok_or_else(|| {
            m.bad(
                inputs,
                format!("`optimizer.fp32_groups[{g}]` is not a list"),
            )
        })?;
        let mut at = 0;
        for (k, &id) in list.iter().enumerate() {
            let (mt, mstart) = m.tensor(inputs, id, &format!("optimizer.fp32_groups[{g}][{k}]"))?;
            if mt.dtype != DType::F32 {
                return Ok(Err(format!(
                    "`optimizer.fp32_groups[{g}][{k}]` is {}, not float32",
                    mt.dtype.torch()
                )));
            }
            let found = (at..saved.len()).find(|&i| {
                let (_, t, start, buffer) = &saved[i];
                !buffer
                    && aliases[i].is_none()
                    && out[i].is_none()
                    && t.shape == mt.shape
                    && rounds_to(bytes, &mt, mstart, t, *start)
            });
            let Some(i) = found else {
                return Ok(Err(format!(
                    "the master `optimizer.fp32_groups[{g}][{k}]` (shape {:?}) matches no parameter of the module in order",
                    mt.shape
                )));
            };
            out[i] = Some((mt, mstart));
            at = i + 1;
            count += 1;
        }
    }
    if count == 0 {
        return Ok(Err("`optimizer.fp32_groups` is empty".into()));
    }
    for i in 0..saved.len() {
        if let Some(j) = aliases[i] {
            out[i] = out[j].clone();
        }
    }
    Ok(Ok((out, count)))
}

/// The storage element index of each element of `t`, in row-major order.
fn element_indices(t: &TensorRef) -> impl Iterator<Item = u64> + '_ {
    let n = t.numel();
    let mut idx = vec![0u64; t.shape.len()];
    (0..n).map(move |_| {
        let e = t.offset + idx.iter().zip(&t.strides).map(|(i, s)| i * s).sum::<u64>();
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < t.shape[d] {
                break;
            }
            idx[d] = 0;
        }
        e
    })
}

/// Whether the fp32 master `mt` (storage at `mstart`), cast to the dtype of the saved param `t`
/// (at `start`) as torch casts (round to nearest even; any NaN matches a NaN), gives the param's bytes.
fn rounds_to(bytes: &[u8], mt: &TensorRef, mstart: usize, t: &TensorRef, start: usize) -> bool {
    use super::copy::{f32_to_bf16, f32_to_f16};
    let es = t.dtype.size();
    if !matches!(t.dtype, DType::BF16 | DType::F16 | DType::F32) {
        return false;
    }
    element_indices(mt).zip(element_indices(t)).all(|(a, b)| {
        let at = mstart + a as usize * 4;
        let bt = start + b as usize * es;
        let (Some(x), Some(y)) = (bytes.get(at..at + 4), bytes.get(bt..bt + es)) else {
            return false;
        };
        let x = f32::from_le_bytes([x[0], x[1], x[2], x[3]]);
        match t.dtype {
            DType::F32 => x.to_bits() == u32::from_le_bytes([y[0], y[1], y[2], y[3]]),
            DType::BF16 => {
                let y = u16::from_le_bytes([y[0], y[1]]);
                if x.is_nan() {
                    y & 0x7f80 == 0x7f80 && y & 0x7f != 0
                } else {
                    f32_to_bf16(x) == y
                }
            }
            _ => {
                let y = u16::from_le_bytes([y[0], y[1]]);
                if x.is_nan() {
                    y & 0x7c00 == 0x7c00 && y & 0x3ff != 0
                } else {
                    f32_to_f16(x) == y
                }
            }
        }
    })
}

fn uints(v: Option<Vec<i64>>) -> Option<Vec<u64>> {
    v?.into_iter().map(|x| u64::try_from(x).ok()).collect()
}

/// A whole tensor as one piece of an entry of the given output dtype.
fn whole(f: &PtFile, t: &TensorRef, start: usize, name: &str, dtype: DType) -> Entry {
    Entry {
        path: vec![name.to_owned()],
        dtype,
        shape: t.shape.clone(),
        tile_shape: t.shape.clone(),
        pieces: vec![Piece {
            offsets: vec![0; t.shape.len()],
            sizes: t.shape.clone(),
            input: f.input,
            storage_start: start,
            dtype: t.dtype,
            offset: t.offset,
            strides: t.strides.clone(),
            big_endian: f.big_endian,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(part: usize, skip: u64, at: u64, len: u64) -> Overlap {
        Overlap {
            part,
            skip,
            at,
            len,
        }
    }

    #[test]
    fn a_span_is_cut_where_the_parts_meet() {
        // Parts [0,4) [4,10) [10,12): the span [3,11) takes 1 of the first, all of the second and 1
        // of the third.
        assert_eq!(
            overlaps(&[4, 6, 2], 3, 8),
            vec![o(0, 3, 0, 1), o(1, 0, 1, 6), o(2, 0, 7, 1)]
        );
        // Inside one part, and past the end (the padding of the last rank).
        assert_eq!(overlaps(&[4, 6, 2], 5, 2), vec![o(1, 1, 0, 2)]);
        assert_eq!(overlaps(&[4, 6, 2], 11, 5), vec![o(2, 1, 0, 1)]);
        // Empty parts and an empty span take nothing.
        assert_eq!(
            overlaps(&[0, 3, 0, 2], 2, 2),
            vec![o(1, 2, 0, 1), o(3, 0, 1, 1)]
        );
        assert_eq!(overlaps(&[4, 6], 4, 0), vec![]);
    }

    #[test]
    fn stage3_ranks_hold_an_even_share_with_the_padding_last() {
        // 10 elements over 4 ranks: 3 each, the last rank holds 1 and 2 of padding.
        let p = stage3_per_rank(10, 4);
        assert_eq!(p, 3);
        let valid: Vec<u64> = (0..4).map(|r| stage3_valid(10, p, r)).collect();
        assert_eq!(valid, [3, 3, 3, 1]);
        // 2 elements over 4 ranks: ranks 2 and 3 hold padding only.
        let p = stage3_per_rank(2, 4);
        assert_eq!(p, 1);
        let valid: Vec<u64> = (0..4).map(|r| stage3_valid(2, p, r)).collect();
        assert_eq!(valid, [1, 1, 0, 0]);
        assert_eq!(stage3_per_rank(0, 4), 0);
        assert_eq!(stage3_valid(0, 0, 3), 0);
    }

    #[test]
    fn partitions_are_padded_to_twice_the_world() {
        // 2 ranks align to 4: 13 elements fill partitions of 16, not of 12 or 20.
        assert!(fills_partitions(13, 16, 2));
        assert!(fills_partitions(16, 16, 2));
        assert!(!fills_partitions(13, 12, 2));
        assert!(!fills_partitions(13, 20, 2));
        assert!(fills_partitions(0, 0, 3));
        assert!(!fills_partitions(7, 0, 3));
    }

    #[test]
    fn buffers_are_fp32_only_when_floating() {
        assert_eq!(buffer_dtype(DType::BF16), DType::F32);
        assert_eq!(buffer_dtype(DType::F16), DType::F32);
        assert_eq!(buffer_dtype(DType::F64), DType::F32);
        assert_eq!(buffer_dtype(DType::I64), DType::I64);
        assert_eq!(buffer_dtype(DType::Bool), DType::Bool);
    }

    #[test]
    fn the_files_are_every_rank_s_state_the_stage_reads() {
        let p = |n: &str| PathBuf::from(n);
        let found = Found {
            dir: p("tag"),
            model_files: vec![p("m0"), p("m1")],
            optim_files: vec![p("o0"), p("o1")],
            save_dir_files: vec![p("latest")],
        };
        assert_eq!(
            checkpoint_files(&found, 2),
            [p("latest"), p("o0"), p("o1"), p("m0")]
        );
        assert_eq!(
            checkpoint_files(&found, 3),
            [p("latest"), p("o0"), p("o1"), p("m0"), p("m1")]
        );
        let stage0 = Found {
            optim_files: Vec::new(),
            ..found
        };
        assert_eq!(checkpoint_files(&stage0, 0), [p("latest"), p("m0")]);
    }
}
