//! torch.distributed.checkpoint (DCP) directories: the `.metadata` pickle says which tensors exist,
//! how they are chunked, and where each chunk's torch.save archive (or safetensors blob) sits inside
//! the `__<rank>_<n>.distcp` files. This module turns that into [`Entry`]s with resolved [`Piece`]s,
//! checking every offset against the files before anything is written.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::copy::Piece;
use super::input::Input;
use super::pickle::{self, Globals, Id, Node, Pickle};
use super::tensor::{DType, TensorRef};
use super::torchzip;
use super::{Checkpoint, Entry, Kind, MergeError};

/// One `state_dict_metadata` item.
#[derive(Debug)]
pub enum Item {
    Tensor {
        fqn: String,
        dtype: Result<DType, String>,
        size: Vec<u64>,
        chunks: Vec<(Vec<u64>, Vec<u64>)>,
    },
    Bytes {
        fqn: String,
    },
}

#[derive(Debug, Clone)]
pub struct StorageInfo {
    pub relative_path: String,
    pub offset: u64,
    pub length: u64,
    pub transforms: Vec<String>,
}

/// The parts of `Metadata` a merge needs.
#[derive(Debug)]
pub struct Metadata {
    pub items: Vec<Item>,
    pub storage: HashMap<(String, Option<Vec<u64>>), StorageInfo>,
    /// fqn → path tuple, stringified (`planner_data`); empty when the writer did not flatten.
    pub paths: HashMap<String, Vec<String>>,
}

fn bad(what: impl Into<String>) -> MergeError {
    MergeError::Metadata(what.into())
}

fn uints(p: &Pickle, id: Id, what: &str) -> Result<Vec<u64>, MergeError> {
    p.ints(id)
        .and_then(|v| v.into_iter().map(|x| u64::try_from(x).ok()).collect())
        .ok_or_else(|| bad(format!("{what} is not a tuple of sizes")))
}

fn field(p: &Pickle, obj: Id, key: &str, of: &str) -> Result<Id, MergeError> {
    p.get(obj, key)
        .ok_or_else(|| bad(format!("{of} has no `{key}`")))
}

/// Parses a `.metadata` pickle.
pub fn parse_metadata(bytes: &[u8]) -> Result<Metadata, MergeError> {
    let p = pickle::load(bytes, Globals::DcpMetadata).map_err(MergeError::Pickle)?;
    if p.class_of(p.root).map(|c| c.1) != Some("Metadata") {
        return Err(bad("the pickle is not a DCP `Metadata` object"));
    }
    let mut storage = HashMap::new();
    let sd = field(&p, p.root, "storage_data", "Metadata")?;
    if let Some(pairs) = p.pairs(sd) {
        for &(k, v) in pairs {
            let fqn = p
                .get(k, "fqn")
                .and_then(|f| p.as_str(f))
                .ok_or_else(|| bad("a storage_data key has no fqn"))?
                .to_owned();
            let offset = match p.get(k, "offset") {
                Some(o) if !matches!(p.node(o), Node::None) => {
                    Some(uints(&p, o, "an index offset")?)
                }
                _ => None,
            };
            let rel = p
                .get(v, "relative_path")
                .and_then(|r| p.as_str(r))
                .ok_or_else(|| bad(format!("{fqn}: storage info has no relative_path")))?
                .to_owned();
            let num = |key: &str| -> Result<u64, MergeError> {
                p.get(v, key)
                    .and_then(|x| p.as_int(x))
                    .and_then(|x| u64::try_from(x).ok())
                    .ok_or_else(|| bad(format!("{fqn}: storage info has no valid `{key}`")))
            };
            let transforms = p
                .get(v, "transform_descriptors")
                .and_then(|t| p.seq(t))
                .map(|t| {
                    t.iter()
                        .filter_map(|&s| p.as_str(s).map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let info = StorageInfo {
                relative_path: rel,
                offset: num("offset")?,
                length: num("length")?,
                transforms,
            };
            // A pickled dict cannot hold a key twice; a damaged or crafted file can.
            if storage
                .insert((fqn.clone(), offset.clone()), info)
                .is_some()
            {
                return Err(bad(format!(
                    "storage_data lists the chunk of `{fqn}` at {:?} twice",
                    offset.unwrap_or_default()
                )));
            }
        }
    }
    let sdm = field(&p, p.root, "state_dict_metadata", "Metadata")?;
    let mut items = Vec::new();
    let mut total_chunks = 0usize;
    let mut seen = std::collections::HashSet::new();
    for &(k, v) in p
        .pairs(sdm)
        .ok_or_else(|| bad("state_dict_metadata is not a dict"))?
    {
        let fqn = p
            .as_str(k)
            .ok_or_else(|| bad("a state_dict_metadata key is not a string"))?
            .to_owned();
        if !seen.insert(fqn.clone()) {
            return Err(bad(format!("state_dict_metadata lists `{fqn}` twice")));
        }
        match p.class_of(v) {
            Some((_, "BytesStorageMetadata")) => items.push(Item::Bytes { fqn }),
            Some((_, "TensorStorageMetadata")) => {
                let props = field(&p, v, "properties", &fqn)?;
                let dtype_id = match p.node(props) {
                    Node::Object {
                        state: Some(st), ..
                    } => match p.seq(*st) {
                        Some(t) => t.first().copied(),
                        None => p.get(props, "dtype"),
                    },
                    _ => None,
                }
                .ok_or_else(|| bad(format!("{fqn}: tensor properties carry no dtype")))?;
                let dtype = match p.global(dtype_id) {
                    Some(("torch", name)) => DType::from_torch(name),
                    _ => return Err(bad(format!("{fqn}: the dtype is not a torch dtype"))),
                };
                let size = uints(&p, field(&p, v, "size", &fqn)?, "size")?;
                let list = p
                    .seq(field(&p, v, "chunks", &fqn)?)
                    .ok_or_else(|| bad(format!("{fqn}: chunks is not a list")))?;
                // Every chunk has its own storage entry; more chunks than entries can only be
                // repeated references, which would make work and memory grow past the file's size.
                total_chunks += list.len();
                if total_chunks > storage.len() {
                    return Err(bad(format!(
                        "{fqn}: the metadata lists more chunks ({total_chunks} so far) than storage entries ({})",
                        storage.len()
                    )));
                }
                let mut chunks = Vec::with_capacity(list.len());
                for &c in list {
                    let o = uints(&p, field(&p, c, "offsets", &fqn)?, "chunk offsets")?;
                    let s = uints(&p, field(&p, c, "sizes", &fqn)?, "chunk sizes")?;
                    chunks.push((o, s));
                }
                items.push(Item::Tensor {
                    fqn,
                    dtype,
                    size,
                    chunks,
                });
            }
            _ => return Err(bad(format!("{fqn}: unknown storage metadata"))),
        }
    }
    let mut paths = HashMap::new();
    // torch pickles the field since DCP has planners (2.0), `None` when the writer did not flatten;
    // without it the keys would be taken as they are, so a damaged field name would silently give
    // every tensor another name.
    let pd = field(&p, p.root, "planner_data", "Metadata")?;
    if !matches!(p.node(pd), Node::None) {
        // A name that does not decode is an error, never a key to leave out: the tensor would
        // silently move under a made-up top-level key (torch's reader fails with "Missing key").
        let pairs = p
            .pairs(pd)
            .ok_or_else(|| bad("planner_data is not a dict"))?;
        for &(k, v) in pairs {
            let k = p
                .as_str(k)
                .ok_or_else(|| bad("a planner_data key is not a string"))?;
            let parts = p
                    .seq(v)
                    .ok_or_else(|| bad(format!("planner_data of `{k}` is not a tuple of names")))?
                    .iter()
                    .map(|&x| match p.node(x) {
                        Node::Str(s) => Ok(s.clone()),
                        Node::Int(i) => Ok(i.to_string()),
                        _ => Err(bad(format!(
                            "planner_data of `{k}` holds a path element that is neither a string nor an integer"
                        ))),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
            if parts.is_empty() {
                return Err(bad(format!("planner_data of `{k}` is an empty path")));
            }
            if paths.insert(k.to_owned(), parts).is_some() {
                return Err(bad(format!("planner_data lists `{k}` twice")));
            }
        }
        check_planner_data(&items, &paths)?;
    }
    Ok(Metadata {
        items,
        storage,
        paths,
    })
}

/// Checks `planner_data` against the state-dict keys it unflattens. torch's writer makes each key
/// by joining its path (torch/distributed/checkpoint/_nested_dict.py::flatten_state_dict:
/// `".".join(map(str, path))`), and its reader needs a path for every key
/// (`unflatten_state_dict`: "Missing key" otherwise). A key and its path are separate strings of the
/// pickle, so a damaged byte in either shows as a mismatch here, instead of a tensor written under
/// another name or left out with its top-level key.
fn check_planner_data(
    items: &[Item],
    paths: &HashMap<String, Vec<String>>,
) -> Result<(), MergeError> {
    for item in items {
        let fqn = match item {
            Item::Tensor { fqn, .. } | Item::Bytes { fqn } => fqn,
        };
        let path = paths
            .get(fqn)
            .ok_or_else(|| bad(format!("planner_data has no path for `{fqn}`")))?;
        let joined = path.join(".");
        if &joined != fqn {
            return Err(bad(format!(
                "planner_data gives `{fqn}` the path {path:?}, which names `{joined}`"
            )));
        }
    }
    Ok(())
}

/// Opens (and maps) a data file once; files are named by the metadata, so refuse anything that could
/// point outside the checkpoint directory.
fn input_index(
    dir: &Path,
    rel: &str,
    inputs: &mut Vec<Input>,
    by_name: &mut HashMap<String, usize>,
) -> Result<usize, MergeError> {
    if let Some(&i) = by_name.get(rel) {
        return Ok(i);
    }
    if rel.is_empty() || rel.contains('/') || rel.contains('\\') || rel == ".." || rel == "." {
        return Err(bad(format!(
            "a data file name `{rel}` that is not a plain file name"
        )));
    }
    let path = dir.join(rel);
    let input = super::open_input(&path)?;
    inputs.push(input);
    by_name.insert(rel.to_owned(), inputs.len() - 1);
    Ok(inputs.len() - 1)
}

/// A chunk found in its data file.
pub struct Resolved {
    /// The byte offset of the view's storage in the file.
    pub storage_start: usize,
    pub tensor: TensorRef,
    pub big_endian: bool,
    /// The zip records read (absolute byte range, recorded CRC-32, name); none for safetensors.
    pub records: Vec<(std::ops::Range<usize>, u32, String)>,
    /// The bytes of the file that hold the chunk's storage.
    pub data: std::ops::Range<usize>,
}

/// Resolves one chunk: finds its archive in the data file `bytes` (read from `path`) and the tensor
/// view inside it. Every offset is checked against `bytes`.
pub fn resolve_chunk(
    fqn: &str,
    info: &StorageInfo,
    path: &Path,
    bytes: &[u8],
) -> Result<Resolved, MergeError> {
    let file_len = bytes.len() as u64;
    let end = info.offset.saturating_add(info.length);
    if end > file_len {
        return Err(MergeError::Truncated {
            path: path.to_path_buf(),
            what: format!("`{fqn}` needs bytes {}..{end}", info.offset),
            len: file_len,
        });
    }
    if !info.transforms.is_empty() {
        return Err(MergeError::Unsupported(format!(
            "`{fqn}` is stored with transforms {:?}",
            info.transforms
        )));
    }
    let start = info.offset as usize;
    let blob = &bytes[start..end as usize];
    let chunk_err = |e: String| MergeError::Chunk {
        path: path.to_path_buf(),
        fqn: fqn.to_owned(),
        offset: info.offset,
        message: e,
    };
    if blob.starts_with(b"PK\x03\x04") {
        let zip = torchzip::open(blob).map_err(|e| chunk_err(e.to_string()))?;
        let pkl_rec = zip
            .get_record("data.pkl")
            .map_err(|e| chunk_err(e.to_string()))?;
        let pkl = pkl_rec.data.clone();
        let p = pickle::load(&blob[pkl.clone()], Globals::TorchWeights)
            .map_err(|e| chunk_err(e.to_string()))?;
        let t = TensorRef::from_pickle(&p, p.root).map_err(|e| match e {
            super::tensor::TensorError::Dtype(d) => MergeError::Dtype {
                fqn: fqn.to_owned(),
                dtype: d,
            },
            e => chunk_err(e.to_string()),
        })?;
        let data_rec = zip
            .get_record(&format!("data/{}", t.key))
            .map_err(|e| chunk_err(e.to_string()))?;
        let rec = data_rec.data.clone();
        let need = t
            .extent()
            .and_then(|x| x.checked_mul(t.dtype.size() as u64))
            .unwrap_or(u64::MAX);
        if need > rec.len() as u64 {
            return Err(chunk_err(format!(
                "the tensor view needs {need} bytes but its storage has {}",
                rec.len()
            )));
        }
        let big = zip.big_endian(blob);
        let records = vec![
            (
                start + pkl.start..start + pkl.end,
                pkl_rec.crc32,
                pkl_rec.name.clone(),
            ),
            (
                start + rec.start..start + rec.end,
                data_rec.crc32,
                data_rec.name.clone(),
            ),
        ];
        Ok(Resolved {
            storage_start: start + rec.start,
            tensor: t,
            big_endian: big,
            records,
            data: start + rec.start..start + rec.end,
        })
    } else {
        // The safetensors serialization (B7): one blob for all tensors of the file, keyed by fqn;
        // it runs to the end of the file.
        let tail = &bytes[start..];
        let (n, meta) = safetensors::SafeTensors::read_metadata(tail)
            .map_err(|e| chunk_err(format!("neither a torch.save archive nor safetensors: {e}")))?;
        let tensors = meta.tensors();
        let info = tensors
            .get(fqn)
            .ok_or_else(|| chunk_err("the safetensors blob has no such tensor".into()))?;
        let dtype =
            DType::from_safetensors(&info.dtype.to_string()).ok_or_else(|| MergeError::Dtype {
                fqn: fqn.to_owned(),
                dtype: format!("{:?}", info.dtype),
            })?;
        let mut shape: Vec<u64> = info.shape.iter().map(|&x| x as u64).collect();
        if dtype == DType::F4X2 {
            // safetensors counts 4-bit values, torch counts the bytes that hold two.
            if let Some(last) = shape.last_mut() {
                *last /= 2;
            }
        }
        let t = TensorRef {
            dtype,
            key: String::new(),
            offset: 0,
            strides: super::tensor::contiguous_strides(&shape),
            shape,
        };
        let at = start + 8 + n;
        Ok(Resolved {
            storage_start: at + info.data_offsets.0,
            tensor: t,
            big_endian: false,
            records: Vec::new(),
            data: at + info.data_offsets.0..at + info.data_offsets.1,
        })
    }
}

/// Reads a DCP directory into entries. `bytes_items` collects the fqns of non-tensor items, unless
/// `include_bytes` turns each into a 1-D uint8 entry of its stored bytes. A tensor of a dtype accel
/// cannot write is listed in `unwritable` and not resolved: it blocks only a merge that selects it.
pub fn read(dir: &Path, meta_path: &Path, include_bytes: bool) -> Result<Checkpoint, MergeError> {
    let meta_bytes = std::fs::read(meta_path).map_err(|e| MergeError::io("read", meta_path, e))?;
    let meta = parse_metadata(&meta_bytes).map_err(|e| e.at(meta_path))?;
    let mut inputs = Vec::new();
    let mut by_name = HashMap::new();
    let mut entries = Vec::new();
    let mut bytes_items = Vec::new();
    let mut crcs = Vec::new();
    let mut unwritable = Vec::new();
    let mut used = std::collections::HashSet::new();
    // (input, bytes, fqn) of every chunk and bytes item read, to check that none share bytes.
    let mut spans: Vec<(usize, std::ops::Range<usize>, &str)> = Vec::new();
    let path_of = |fqn: &str| -> Vec<String> {
        meta.paths
            .get(fqn)
            .cloned()
            .unwrap_or_else(|| vec![fqn.to_owned()])
    };
    // Open every referenced file first, so a missing shard is reported before any parsing.
    let mut rels: Vec<&String> = meta.storage.values().map(|s| &s.relative_path).collect();
    rels.sort();
    rels.dedup();
    for rel in rels {
        input_index(dir, rel, &mut inputs, &mut by_name)?;
    }
    for item in &meta.items {
        match item {
            Item::Bytes { fqn } if include_bytes => {
                let info = meta
                    .storage
                    .get(&(fqn.clone(), None))
                    .ok_or_else(|| bad(format!("bytes item `{fqn}` has no storage entry")))?;
                let i = input_index(dir, &info.relative_path, &mut inputs, &mut by_name)?;
                let len = inputs[i].bytes().len() as u64;
                if info
                    .offset
                    .checked_add(info.length)
                    .is_none_or(|end| end > len)
                {
                    return Err(MergeError::Truncated {
                        path: inputs[i].path.clone(),
                        what: format!(
                            "bytes item `{fqn}` is recorded at {}..{}",
                            info.offset,
                            info.offset.saturating_add(info.length)
                        ),
                        len,
                    });
                }
                let at = info.offset as usize;
                spans.push((i, at..at + info.length as usize, fqn.as_str()));
                entries.push(Entry {
                    path: path_of(fqn),
                    dtype: DType::U8,
                    shape: vec![info.length],
                    tile_shape: vec![info.length],
                    pieces: vec![Piece {
                        offsets: vec![0],
                        sizes: vec![info.length],
                        input: i,
                        storage_start: info.offset as usize,
                        dtype: DType::U8,
                        offset: 0,
                        strides: vec![1],
                        big_endian: false,
                    }],
                });
            }
            Item::Bytes { fqn } => bytes_items.push(path_of(fqn)),
            Item::Tensor {
                fqn,
                dtype,
                size,
                chunks,
            } => {
                let dtype = match dtype {
                    Ok(d) => *d,
                    Err(name) => {
                        unwritable.push(super::Unwritable {
                            path: path_of(fqn),
                            dtype: name.clone(),
                        });
                        continue;
                    }
                };
                let mut pieces = Vec::with_capacity(chunks.len());
                for (offsets, sizes) in chunks {
                    let info = meta
                        .storage
                        .get(&(fqn.clone(), Some(offsets.clone())))
                        .ok_or_else(|| {
                            bad(format!("`{fqn}` chunk at {offsets:?} has no storage entry"))
                        })?;
                    let i = input_index(dir, &info.relative_path, &mut inputs, &mut by_name)?;
                    // Each chunk is its own write item: a blob listed twice is a crafted or
                    // corrupt file, and re-reading it would make work grow without the input.
                    if !used.insert((i, info.offset, fqn.as_str())) {
                        return Err(bad(format!(
                            "`{fqn}` chunk at {offsets:?} reuses the bytes at {} of `{}` that another chunk has",
                            info.offset, info.relative_path
                        ))
                        .at(meta_path));
                    }
                    let r = resolve_chunk(fqn, info, &inputs[i].path, inputs[i].bytes())?;
                    spans.push((i, r.data.clone(), fqn.as_str()));
                    for (range, expected, name) in r.records {
                        crcs.push(super::Crc {
                            input: i,
                            range,
                            expected,
                            name,
                        });
                    }
                    let (storage_start, t, big) = (r.storage_start, r.tensor, r.big_endian);
                    // Only the archive's headers were read; keep resident memory independent of the
                    // number of chunks.
                    let end = info.offset.saturating_add(info.length) as usize;
                    inputs[i].release(info.offset as usize, end);
                    if &t.shape != sizes {
                        return Err(MergeError::Chunk {
                            path: inputs[i].path.clone(),
                            fqn: fqn.clone(),
                            offset: info.offset,
                            message: format!(
                                "the stored chunk has shape {:?}, the metadata says {sizes:?}",
                                t.shape
                            ),
                        });
                    }
                    if t.dtype != dtype {
                        return Err(MergeError::Chunk {
                            path: inputs[i].path.clone(),
                            fqn: fqn.clone(),
                            offset: info.offset,
                            message: format!(
                                "the stored chunk is {}, the metadata says {}",
                                t.dtype.torch(),
                                dtype.torch()
                            ),
                        });
                    }
                    pieces.push(Piece {
                        offsets: offsets.clone(),
                        sizes: sizes.clone(),
                        input: i,
                        storage_start,
                        dtype: t.dtype,
                        offset: t.offset,
                        strides: t.strides,
                        big_endian: big,
                    });
                }
                entries.push(Entry {
                    path: path_of(fqn),
                    dtype,
                    shape: size.clone(),
                    tile_shape: size.clone(),
                    pieces,
                });
            }
        }
    }
    disjoint(&mut spans, &inputs).map_err(|e| e.at(meta_path))?;
    let mut files = vec![meta_path.to_path_buf()];
    files.extend(inputs.iter().map(|i| i.path.clone()));
    Ok(Checkpoint {
        kind: Kind::Dcp,
        dir: dir.to_path_buf(),
        inputs,
        entries,
        bytes_items,
        notes: Vec::new(),
        crcs,
        unwritable,
        files,
    })
}

/// Checks that no two chunks are read from the same bytes. torch's writer gives every write item its
/// own bytes; two items on one range mean a damaged name (e.g. a `relative_path` pointing at another
/// rank's file, whose chunks sit at the same offsets when the shards are even), which torch's reader
/// would follow silently.
fn disjoint(
    spans: &mut Vec<(usize, std::ops::Range<usize>, &str)>,
    inputs: &[Input],
) -> Result<(), MergeError> {
    spans.retain(|(_, r, _)| !r.is_empty());
    spans.sort_by_key(|(i, r, _)| (*i, r.start, r.end));
    for w in spans.windows(2) {
        let ((i, a, fa), (j, b, fb)) = (&w[0], &w[1]);
        if i == j && b.start < a.end {
            return Err(bad(format!(
                "`{fa}` and `{fb}` are both stored at bytes {}..{} of `{}`",
                b.start,
                a.end.min(b.end),
                inputs[*i].path.display()
            )));
        }
    }
    Ok(())
}

/// Where the metadata of a DCP directory is, if it is one.
pub fn metadata_path(dir: &Path) -> Option<PathBuf> {
    let p = dir.join(".metadata");
    p.is_file().then_some(p)
}
