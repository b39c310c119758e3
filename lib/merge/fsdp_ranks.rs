//! accelerate's per-rank FSDP2 checkpoints: `save_fsdp_model(..., use_dcp=False)` with
//! `SHARDED_STATE_DICT` (accelerate/utils/fsdp_utils.py::save_fsdp_model) has every rank
//! `torch.save` its own shard of the model's state dict into `pytorch_model_fsdp_{i}_rank{r}.bin`,
//! with no metadata file. Each sharded value is a DTensor, pickled with its local shard, its global
//! shape, its placements on the device mesh, the mesh's shape and the rank's coordinate on it
//! (torch/distributed/tensor/_api.py::DTensor.__reduce_ex__). They are read as data (the pickle
//! policy [`Globals::FsdpShards`] names their classes; nothing is built): each rank's local shard
//! becomes a piece of the global tensor at the offset torch gives it, and the tiling check proves
//! that the ranks' pieces cover every tensor exactly. FSDP1's files (ShardedTensor values) are
//! refused by name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::copy::Piece;
use super::input::Input;
use super::pickle::{Globals, Id, Node, Pickle, PickleError};
use super::ptfile::PtFile;
use super::tensor::{DType, TensorRef};
use super::{Checkpoint, Entry, Kind, MergeError};

/// The rank files of one model of a per-rank checkpoint.
#[derive(Debug)]
pub struct Found {
    pub dir: PathBuf,
    /// save_fsdp_model's `model_index`.
    pub model: u32,
    /// In rank order, ranks 0..N.
    pub files: Vec<PathBuf>,
    /// The other models' indexes found beside it.
    pub others: Vec<u32>,
}

/// `(model_index, rank)` of a file named `pytorch_model_fsdp_{model_index}_rank{rank}.bin`.
fn parse_name(name: &str) -> Option<(u32, u32)> {
    let rest = name
        .strip_prefix("pytorch_model_fsdp_")?
        .strip_suffix(".bin")?;
    let (model, rank) = rest.split_once("_rank")?;
    let number = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    Some((number(model)?, number(rank)?))
}

/// Recognises the per-rank files in `dir`; of several models, the one of the lowest index (model 0,
/// as accelerate's save_state layout reads `pytorch_model_fsdp_0/`). Refuses a set with a rank
/// missing below the highest.
pub fn detect(dir: &Path) -> Result<Option<Found>, MergeError> {
    let rd = std::fs::read_dir(dir).map_err(|e| MergeError::io("read", dir, e))?;
    let mut models: BTreeMap<u32, BTreeMap<u32, PathBuf>> = BTreeMap::new();
    for e in rd.flatten() {
        let name = e.file_name();
        if let Some((m, r)) = name.to_str().and_then(parse_name) {
            models.entry(m).or_default().insert(r, e.path());
        }
    }
    let Some((&model, ranks)) = models.iter().next() else {
        return Ok(None);
    };
    if let Some(missing) = (0..).zip(ranks.keys()).find(|(want, &have)| *want != have) {
        return Err(MergeError::NotACheckpoint {
            path: dir.to_path_buf(),
            found: format!(
                "accelerate's per-rank FSDP files of model {model} for ranks {}, without `pytorch_model_fsdp_{model}_rank{}.bin`",
                ranks.keys().map(u32::to_string).collect::<Vec<_>>().join(", "),
                missing.0
            ),
            hint: "every rank saves its own file: the save did not finish, or a file was not copied"
                .into(),
        });
    }
    Ok(Some(Found {
        dir: dir.to_path_buf(),
        model,
        files: ranks.values().cloned().collect(),
        others: models.keys().skip(1).copied().collect(),
    }))
}

/// Reads the rank files into entries, in rank 0's key order.
pub fn read(found: Found) -> Result<Checkpoint, MergeError> {
    let mut inputs = Vec::new();
    let mut files = Vec::new();
    for p in &found.files {
        files.push(PtFile::load_or(p, &mut inputs, Globals::FsdpShards, |e| {
            fsdp1_refusal(p, e)
        })?);
    }
    let keys = state_dict(&files[0], &inputs)?;
    let mut entries = Vec::new();
    let mut bytes_items = Vec::new();
    let mut unwritable = Vec::new();
    let mut mesh_checked = false;
    for (key, id0) in keys {
        let f0 = &files[0];
        match shard_kind(&f0.pickle, id0) {
            ShardKind::Plain => {
                // Replicated: every rank holds the whole tensor; rank 0's is taken.
                let Some((t, start)) =
                    f0.tensor_or_unwritable(&inputs, id0, &key, &mut unwritable)?
                else {
                    continue;
                };
                entries.push(whole(f0, &t, start, &key));
            }
            ShardKind::Other => bytes_items.push(vec![key]),
            kind => {
                let mut pieces = Vec::new();
                let mut global: Option<(Vec<u64>, DType)> = None;
                for f in &files {
                    let id = value_of(f, &key, &inputs)?;
                    let shard = local_shards(f, id, &key, &inputs, kind)?;
                    if !mesh_checked {
                        if let Some(n) = shard.mesh_ranks {
                            check_world(n, &found, &inputs, f)?;
                        }
                        mesh_checked = true;
                    }
                    if global.as_ref().is_some_and(|g| *g != shard.global) {
                        return Err(f.bad(
                            &inputs,
                            format!("`{key}` has another global shape or dtype than on rank 0"),
                        ));
                    }
                    global = Some(shard.global.clone());
                    pieces.extend(shard.pieces);
                }
                let Some((shape, dtype)) = global else {
                    continue;
                };
                entries.push(Entry {
                    path: vec![key],
                    dtype,
                    tile_shape: shape.clone(),
                    shape,
                    pieces,
                });
            }
        }
    }
    let mut notes = vec![format!(
        "accelerate's per-rank FSDP checkpoint (save_fsdp_model with use_dcp=False): model {} from {} rank files",
        found.model,
        found.files.len()
    )];
    if !found.others.is_empty() {
        notes.push(format!(
            "the directory also holds the rank files of model(s) {}, not read",
            found
                .others
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let crcs = files.iter().flat_map(|f| f.read.take()).collect();
    Ok(Checkpoint {
        kind: Kind::FsdpRanks,
        dir: found.dir,
        inputs,
        entries,
        bytes_items,
        notes,
        crcs,
        unwritable,
        files: found.files,
    })
}

/// FSDP1's rank files hold ShardedTensors (torch/distributed/_shard/sharded_tensor/api.py), which
/// the policy does not name: said as what they are rather than as an unexpected global.
fn fsdp1_refusal(path: &Path, e: &PickleError) -> Option<MergeError> {
    match e {
        PickleError::Global { module, .. } if module.starts_with("torch.distributed._shard") => {
            Some(MergeError::Unsupported(format!(
                "`{}` is FSDP1's per-rank state dict (ShardedTensor values); only FSDP2's \
                 (DTensor values) is read from per-rank files: save FSDP1 with use_dcp=True \
                 (the default) or with a FULL_STATE_DICT",
                path.display()
            )))
        }
        _ => None,
    }
}

/// The `(key, value)` pairs of a rank file's state dict (a dict or an `OrderedDict`).
fn state_dict(f: &PtFile, inputs: &[Input]) -> Result<Vec<(String, Id)>, MergeError> {
    let p = &f.pickle;
    let pairs = p
        .pairs(p.root)
        .ok_or_else(|| f.bad(inputs, "the file holds no state dict"))?;
    pairs
        .iter()
        .map(|&(k, v)| {
            p.as_str(k)
                .map(|k| (k.to_owned(), v))
                .ok_or_else(|| f.bad(inputs, "a state dict key is not a string"))
        })
        .collect()
}

/// `key`'s value in another rank's file.
fn value_of(f: &PtFile, key: &str, inputs: &[Input]) -> Result<Id, MergeError> {
    f.get(f.pickle.root, key).ok_or_else(|| {
        f.bad(
            inputs,
            format!("`{key}` is missing, though rank 0 saved it"),
        )
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ShardKind {
    DTensor,
    /// A plain tensor (or parameter).
    Plain,
    /// Not a tensor.
    Other,
}

/// What a state dict value is: a tensor subclass torch rebuilds with `_rebuild_wrapper_subclass`
/// (`torch/_tensor.py::_reduce_ex_internal`), a plain tensor, or something else.
fn shard_kind(p: &Pickle, id: Id) -> ShardKind {
    match wrapper(p, id) {
        Some((("torch.distributed.tensor", "DTensor"), ..)) => ShardKind::DTensor,
        Some(_) => ShardKind::Other,
        None => match p.node(id) {
            Node::Object { .. } if TensorRef::from_pickle(p, id).is_ok() => ShardKind::Plain,
            // A tensor of a dtype that cannot be written is still a tensor (reported when selected).
            Node::Object { .. } if p.class_of(id).is_some_and(|(m, _)| m.starts_with("torch")) => {
                ShardKind::Plain
            }
            _ => ShardKind::Other,
        },
    }
}

/// A `_rebuild_from_type_v2(_rebuild_wrapper_subclass, cls, args, state)` value: its class, the
/// wrapper's arguments `(cls, dtype, size, stride, storage_offset, layout, device, requires_grad)`
/// and the object's state.
fn wrapper(p: &Pickle, id: Id) -> Option<((&str, &str), Id, Id)> {
    let Node::Object { callable, args, .. } = p.node(id) else {
        return None;
    };
    if p.global(*callable) != Some(("torch._tensor", "_rebuild_from_type_v2")) {
        return None;
    }
    let a = p.seq(*args)?;
    if a.len() != 4 || p.global(a[0]) != Some(("torch._utils", "_rebuild_wrapper_subclass")) {
        return None;
    }
    Some((p.global(a[1])?, a[2], a[3]))
}

/// An attribute of a pickled object: its `BUILD` state is a dict, or the pair `(dict, slots)` that
/// `copyreg`'s `__reduce_ex__` gives objects with `__slots__`.
fn attr(p: &Pickle, obj: Id, name: &str) -> Option<Id> {
    match p.node(obj) {
        Node::Object {
            state: Some(st), ..
        } => in_state(p, *st, name),
        _ => None,
    }
}

fn in_state(p: &Pickle, state: Id, name: &str) -> Option<Id> {
    match p.node(state) {
        Node::Dict(_) => p.get(state, name),
        Node::Tuple(parts) => parts.iter().find_map(|&d| match p.node(d) {
            Node::Dict(_) => p.get(d, name),
            _ => None,
        }),
        _ => None,
    }
}

fn uints(p: &Pickle, id: Id) -> Option<Vec<u64>> {
    p.ints(id)?
        .into_iter()
        .map(|v| u64::try_from(v).ok())
        .collect()
}

/// One rank's part of a sharded value.
struct RankShard {
    /// The global shape and dtype.
    global: (Vec<u64>, DType),
    pieces: Vec<Piece>,
    /// How many ranks the DTensor's mesh has.
    mesh_ranks: Option<u64>,
}

fn local_shards(
    f: &PtFile,
    id: Id,
    key: &str,
    inputs: &[Input],
    kind: ShardKind,
) -> Result<RankShard, MergeError> {
    let p = &f.pickle;
    let bad = |m: &str| f.bad(inputs, format!("`{key}`: {m}"));
    let Some((_, wargs, state)) = wrapper(p, id).filter(|_| shard_kind(p, id) == kind) else {
        return Err(bad("not sharded as on rank 0"));
    };
    let wargs = p.seq(wargs).ok_or_else(|| bad("no wrapper arguments"))?;
    let dtype = wargs
        .get(1)
        .and_then(|&d| p.global(d))
        .ok_or_else(|| bad("no dtype"))?;
    let dtype = DType::from_torch(dtype.1).map_err(|d| MergeError::Dtype {
        fqn: key.to_owned(),
        dtype: d,
    })?;
    let shape = wargs
        .get(2)
        .and_then(|&s| uints(p, s))
        .ok_or_else(|| bad("no global size"))?;
    let mut out = RankShard {
        global: (shape.clone(), dtype),
        pieces: Vec::new(),
        mesh_ranks: None,
    };
    let mut add = |t: Id, offsets: Vec<u64>, sizes: Vec<u64>| -> Result<(), MergeError> {
        let (t, start) = f.tensor(inputs, t, key)?;
        if t.shape != sizes || t.dtype != dtype {
            return Err(bad(&format!(
                "the local shard is {:?} {}, where its placement gives {sizes:?} {}",
                t.shape,
                t.dtype.torch(),
                dtype.torch()
            )));
        }
        out.pieces.push(box_piece(f, &t, start, offsets));
        Ok(())
    };
    let local = in_state(p, state, "_local_tensor").ok_or_else(|| bad("no local tensor"))?;
    let spec = in_state(p, state, "_spec").ok_or_else(|| bad("no DTensorSpec"))?;
    let layout = MeshLayout::of(p, spec).map_err(|m| bad(&m))?;
    let (offsets, sizes) = layout.local_box(&shape).map_err(|m| bad(&m))?;
    add(local, offsets, sizes)?;
    out.mesh_ranks = Some(layout.mesh.iter().product());
    Ok(out)
}

/// A DTensor's mesh and placements, as its `DTensorSpec` records them.
#[derive(Debug, PartialEq)]
struct MeshLayout {
    /// The size of each mesh dim.
    mesh: Vec<u64>,
    /// This rank's coordinate on each.
    coord: Vec<u64>,
    /// Per mesh dim: `Some(d)` for `Shard(d)`, `None` for `Replicate()`.
    placements: Vec<Option<usize>>,
}

impl MeshLayout {
    fn of(p: &Pickle, spec: Id) -> Result<MeshLayout, String> {
        let mesh = attr(p, spec, "mesh").ok_or("no device mesh")?;
        // torch 2.9 on: `_layout`, one `_FlatLayout` per mesh dim, of `shape` (its size is their
        // product); before: the `mesh` tensor of ranks, of the mesh's shape.
        let sizes = match attr(p, mesh, "_layout").and_then(|l| attr(p, l, "axes")) {
            Some(axes) => p
                .seq(axes)
                .ok_or("mesh axes that are not a tuple")?
                .iter()
                .map(|&a| attr(p, a, "shape").and_then(|s| uints(p, s)))
                .map(|s| s.map(|s| s.iter().product()))
                .collect::<Option<Vec<u64>>>()
                .ok_or("a mesh axis without a shape")?,
            None => {
                let t = attr(p, mesh, "mesh").ok_or("a device mesh without its layout")?;
                TensorRef::from_pickle(p, t)
                    .map_err(|e| format!("the device mesh's ranks: {e}"))?
                    .shape
            }
        };
        let coord = attr(p, mesh, "_coordinate_on_dim")
            .and_then(|c| uints(p, c))
            .ok_or("this rank is not on the device mesh")?;
        let placements = attr(p, spec, "placements")
            .and_then(|pl| p.seq(pl))
            .ok_or("no placements")?
            .iter()
            .map(|&pl| match p.class_of(pl) {
                Some((_, "Shard")) => attr(p, pl, "dim")
                    .and_then(|d| p.as_int(d))
                    .and_then(|d| usize::try_from(d).ok())
                    .map(Some)
                    .ok_or_else(|| "a Shard placement without its dim".to_string()),
                Some((_, "Replicate")) => Ok(None),
                Some((_, other)) => Err(format!(
                    "placement `{other}` is not supported (only Shard and Replicate)"
                )),
                None => Err("a placement that is not an object".into()),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if sizes.len() != coord.len() || sizes.len() != placements.len() {
            return Err("mesh, coordinate and placements differ in length".into());
        }
        Ok(MeshLayout {
            mesh: sizes,
            coord,
            placements,
        })
    }

    /// The box (global offsets, sizes) of this rank's local shard of a tensor of `global` shape:
    /// torch's `_compute_local_shape_and_global_offset` (torch/distributed/tensor/_utils.py) for
    /// Shard and Replicate placements, shards taken from left to right with `torch.chunk`'s sizes,
    /// and an empty shard placed at the end of its dim.
    fn local_box(&self, global: &[u64]) -> Result<(Vec<u64>, Vec<u64>), String> {
        let mut sizes = global.to_vec();
        let mut offsets = vec![0; global.len()];
        for (i, pl) in self.placements.iter().enumerate() {
            let Some(d) = *pl else { continue };
            let (n, r) = (self.mesh[i], self.coord[i]);
            if d >= global.len() || n == 0 || r >= n {
                return Err(format!(
                    "Shard({d}) on mesh dim {i} of size {n} at coordinate {r}, for a tensor of {} dims",
                    global.len()
                ));
            }
            let (size, off) = chunk(sizes[d], n, r);
            offsets[d] = if size == 0 {
                global[d]
            } else {
                offsets[d] + off
            };
            sizes[d] = size;
        }
        Ok((offsets, sizes))
    }
}

/// The size and offset of chunk `r` of `n` of a dim of length `len`, as `torch.chunk` cuts it
/// (torch/distributed/tensor/placement_types.py::Shard.local_shard_size_and_offset).
fn chunk(len: u64, n: u64, r: u64) -> (u64, u64) {
    let full = len.div_ceil(n);
    let start = full * r;
    let end = len.min(start + full);
    (end.saturating_sub(start), len.min(start))
}

/// A DTensor mesh of another number of ranks than there are rank files.
fn check_world(ranks: u64, found: &Found, inputs: &[Input], f: &PtFile) -> Result<(), MergeError> {
    let n = found.files.len() as u64;
    if ranks == n {
        return Ok(());
    }
    Err(f.bad(
        inputs,
        format!(
            "its tensors are sharded over {ranks} ranks, but {n} rank files of model {} are here",
            found.model
        ),
    ))
}

/// A piece covering `t` whole, at `offsets` in the global tensor.
fn box_piece(f: &PtFile, t: &TensorRef, start: usize, offsets: Vec<u64>) -> Piece {
    Piece {
        offsets,
        sizes: t.shape.clone(),
        input: f.input,
        storage_start: start,
        dtype: t.dtype,
        offset: t.offset,
        strides: t.strides.clone(),
        big_endian: f.big_endian,
    }
}

fn whole(f: &PtFile, t: &TensorRef, start: usize, key: &str) -> Entry {
    Entry {
        path: vec![key.to_owned()],
        dtype: t.dtype,
        shape: t.shape.clone(),
        tile_shape: t.shape.clone(),
        pieces: vec![box_piece(f, t, start, vec![0; t.shape.len()])],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_give_the_model_and_the_rank() {
        assert_eq!(parse_name("pytorch_model_fsdp_0_rank1.bin"), Some((0, 1)));
        assert_eq!(parse_name("pytorch_model_fsdp_2_rank10.bin"), Some((2, 10)));
        for n in [
            "pytorch_model_fsdp_rank0.bin",
            "pytorch_model_fsdp_0_rank+1.bin",
            "pytorch_model_fsdp_0_rank1.pt",
            "pytorch_model_fsdp_0.bin",
        ] {
            assert_eq!(parse_name(n), None, "{n}");
        }
    }

    #[test]
    fn local_boxes_follow_torch_chunk() {
        let one = |n, r, placements: Vec<Option<usize>>| MeshLayout {
            mesh: vec![n],
            coord: vec![r],
            placements,
        };
        // 5 rows on 2 ranks: 3 + 2; 1 row: 1 + an empty shard at the end.
        assert_eq!(
            one(2, 0, vec![Some(0)]).local_box(&[5, 6]),
            Ok((vec![0, 0], vec![3, 6]))
        );
        assert_eq!(
            one(2, 1, vec![Some(0)]).local_box(&[5, 6]),
            Ok((vec![3, 0], vec![2, 6]))
        );
        assert_eq!(
            one(2, 1, vec![Some(0)]).local_box(&[1, 4]),
            Ok((vec![1, 0], vec![0, 4]))
        );
        assert_eq!(
            one(2, 1, vec![Some(1)]).local_box(&[3, 5]),
            Ok((vec![0, 3], vec![3, 2]))
        );
        assert_eq!(
            one(2, 1, vec![None]).local_box(&[3]),
            Ok((vec![0], vec![3]))
        );
        // HSDP: Replicate over 2 groups, Shard(0) over 2 ranks in each.
        let hsdp = MeshLayout {
            mesh: vec![2, 2],
            coord: vec![1, 1],
            placements: vec![None, Some(0)],
        };
        assert_eq!(hsdp.local_box(&[7]), Ok((vec![4], vec![3])));
        // Shard(0) twice (dims of 2 and 2): chunks of chunks.
        let twice = MeshLayout {
            mesh: vec![2, 2],
            coord: vec![1, 0],
            placements: vec![Some(0), Some(0)],
        };
        assert_eq!(twice.local_box(&[8]), Ok((vec![4], vec![2])));
        assert!(one(2, 2, vec![Some(0)]).local_box(&[4]).is_err());
        assert!(one(2, 0, vec![Some(1)]).local_box(&[4]).is_err());
    }
}
