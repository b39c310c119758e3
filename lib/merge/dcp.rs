//! torch.distributed.checkpoint (DCP) directories: the `.metadata` pickle says which tensors exist,
//! how they are chunked, and where each chunk's torch.save archive (or safetensors blob) sits inside
//! the `__<rank>_<n>.distcp` files. This module turns that into [`Entry`]s with resolved [`Piece`]s,
//! checking every offset against the files before anything is written.

use std::collections::{HashMap, HashSet};
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

/// Where each chunk is stored (`storage_data`), keyed by its fqn and offsets (none for a bytes item).
pub type Storage = HashMap<(String, Option<Vec<u64>>), StorageInfo>;

/// The parts of `Metadata` a merge needs.
#[derive(Debug)]
pub struct Metadata {
    pub items: Vec<Item>,
    pub storage: Storage,
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
    let storage = storage_data(&p)?;
    let items = state_dict_items(&p, storage.len())?;
    let paths = planner_paths(&p, &items)?;
    Ok(Metadata {
        items,
        storage,
        paths,
    })
}

/// `Metadata.storage_data`: where each chunk, keyed by its fqn and offsets, is stored.
fn storage_data(p: &Pickle) -> Result<Storage, MergeError> {
    let mut storage = HashMap::new();
    let sd = field(p, p.root, "storage_data", "Metadata")?;
    let Some(pairs) = p.pairs(sd) else {
        return Ok(storage);
    };
    for &(k, v) in pairs {
        let (fqn, offset, info) = storage_entry(p, k, v)?;
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
    Ok(storage)
}

/// One `storage_data` item: the `MetadataIndex` key's fqn and offsets (none for a bytes item), and
/// the `_StorageInfo` value.
fn storage_entry(
    p: &Pickle,
    k: Id,
    v: Id,
) -> Result<(String, Option<Vec<u64>>, StorageInfo), MergeError> {
    let fqn = p
        .get(k, "fqn")
        .and_then(|f| p.as_str(f))
        .ok_or_else(|| bad("a storage_data key has no fqn"))?
        .to_owned();
    let offset = match p.get(k, "offset") {
        Some(o) if !matches!(p.node(o), Node::None) => Some(uints(p, o, "an index offset")?),
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
    Ok((fqn, offset, info))
}

/// `Metadata.state_dict_metadata`: every item of the saved state dict, in order. `storage_entries`
/// bounds the number of chunks.
fn state_dict_items(p: &Pickle, storage_entries: usize) -> Result<Vec<Item>, MergeError> {
    let sdm = field(p, p.root, "state_dict_metadata", "Metadata")?;
    let mut items = Vec::new();
    let mut total_chunks = 0usize;
    let mut seen = HashSet::new();
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
                let item = tensor_item(p, v, fqn, &mut total_chunks, storage_entries)?;
                items.push(item);
            }
            _ => return Err(bad(format!("{fqn}: unknown storage metadata"))),
        }
    }
    Ok(items)
}

/// A `TensorStorageMetadata`: dtype, size and chunks. `total_chunks` counts the chunks of the items
/// so far.
fn tensor_item(
    p: &Pickle,
    v: Id,
    fqn: String,
    total_chunks: &mut usize,
    storage_entries: usize,
) -> Result<Item, MergeError> {
    let props = field(p, v, "properties", &fqn)?;
    let dtype = tensor_dtype(p, props, &fqn)?;
    let size = uints(p, field(p, v, "size", &fqn)?, "size")?;
    let list = p
        .seq(field(p, v, "chunks", &fqn)?)
        .ok_or_else(|| bad(format!("{fqn}: chunks is not a list")))?;
    // Every chunk has its own storage entry; more chunks than entries can only be repeated
    // references, which would make work and memory grow past the file's size.
    *total_chunks += list.len();
    if *total_chunks > storage_entries {
        return Err(bad(format!(
            "{fqn}: the metadata lists more chunks ({total_chunks} so far) than storage entries ({storage_entries})"
        )));
    }
    let mut chunks = Vec::with_capacity(list.len());
    for &c in list {
        let o = uints(p, field(p, c, "offsets", &fqn)?, "chunk offsets")?;
        let s = uints(p, field(p, c, "sizes", &fqn)?, "chunk sizes")?;
        chunks.push((o, s));
    }
    Ok(Item::Tensor {
        fqn,
        dtype,
        size,
        chunks,
    })
}

/// The dtype of `TensorProperties`, pickled as its state tuple (dtype first) or a dict: a torch
/// dtype, or `Err` with the name of one accel cannot write.
fn tensor_dtype(p: &Pickle, props: Id, fqn: &str) -> Result<Result<DType, String>, MergeError> {
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
    match p.global(dtype_id) {
        Some(("torch", name)) => Ok(DType::from_torch(name)),
        _ => Err(bad(format!("{fqn}: the dtype is not a torch dtype"))),
    }
}

/// `Metadata.planner_data`: each key's path in the nested state dict, checked against the keys
/// ([`check_planner_data`]); empty when the writer did not flatten.
fn planner_paths(p: &Pickle, items: &[Item]) -> Result<HashMap<String, Vec<String>>, MergeError> {
    let mut paths = HashMap::new();
    // torch pickles the field since DCP has planners (2.0), `None` when the writer did not flatten;
    // without it the keys would be taken as they are, so a damaged field name would silently give
    // every tensor another name.
    let pd = field(p, p.root, "planner_data", "Metadata")?;
    if matches!(p.node(pd), Node::None) {
        return Ok(paths);
    }
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
    check_planner_data(items, &paths)?;
    Ok(paths)
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
    let mut r = Reading {
        dir,
        meta_path,
        meta: &meta,
        inputs: Vec::new(),
        by_name: HashMap::new(),
        crcs: Vec::new(),
        used: HashSet::new(),
        spans: Vec::new(),
    };
    r.open_all()?;
    let mut entries = Vec::new();
    let mut bytes_items = Vec::new();
    let mut unwritable = Vec::new();
    for item in &meta.items {
        match item {
            Item::Bytes { fqn } if include_bytes => entries.push(r.bytes_entry(fqn)?),
            Item::Bytes { fqn } => bytes_items.push(meta.path_of(fqn)),
            Item::Tensor {
                fqn,
                dtype: Err(name),
                ..
            } => unwritable.push(super::Unwritable {
                path: meta.path_of(fqn),
                dtype: name.clone(),
            }),
            Item::Tensor {
                fqn,
                dtype: Ok(dtype),
                size,
                chunks,
            } => entries.push(r.tensor_entry(fqn, *dtype, size, chunks)?),
        }
    }
    disjoint(&mut r.spans, &r.inputs).map_err(|e| e.at(meta_path))?;
    let mut files = vec![meta_path.to_path_buf()];
    files.extend(r.inputs.iter().map(|i| i.path.clone()));
    Ok(Checkpoint {
        kind: Kind::Dcp,
        dir: dir.to_path_buf(),
        inputs: r.inputs,
        entries,
        bytes_items,
        notes: Vec::new(),
        crcs: r.crcs,
        unwritable,
        files,
    })
}

impl Metadata {
    /// Where `fqn` sits in the nested state dict: its `planner_data` path, or the key itself when
    /// the writer did not flatten.
    fn path_of(&self, fqn: &str) -> Vec<String> {
        self.paths
            .get(fqn)
            .cloned()
            .unwrap_or_else(|| vec![fqn.to_owned()])
    }
}

/// What [`read`] gathers while it resolves the items of the metadata against the data files.
struct Reading<'m> {
    dir: &'m Path,
    meta_path: &'m Path,
    meta: &'m Metadata,
    inputs: Vec<Input>,
    by_name: HashMap<String, usize>,
    crcs: Vec<super::Crc>,
    /// (input, offset, fqn) of every chunk read: a blob listed twice is refused.
    used: HashSet<(usize, u64, &'m str)>,
    /// (input, bytes, fqn) of every chunk and bytes item read, to check that none share bytes.
    spans: Vec<(usize, std::ops::Range<usize>, &'m str)>,
}

impl<'m> Reading<'m> {
    /// Opens every referenced file first, so a missing shard is reported before any parsing.
    fn open_all(&mut self) -> Result<(), MergeError> {
        let mut rels: Vec<&String> = self
            .meta
            .storage
            .values()
            .map(|s| &s.relative_path)
            .collect();
        rels.sort();
        rels.dedup();
        for rel in rels {
            input_index(self.dir, rel, &mut self.inputs, &mut self.by_name)?;
        }
        Ok(())
    }

    fn input(&mut self, rel: &str) -> Result<usize, MergeError> {
        input_index(self.dir, rel, &mut self.inputs, &mut self.by_name)
    }

    /// A bytes item (`--include-bytes`) as a 1-D uint8 entry of its stored bytes.
    fn bytes_entry(&mut self, fqn: &'m str) -> Result<Entry, MergeError> {
        let info = self
            .meta
            .storage
            .get(&(fqn.to_owned(), None))
            .ok_or_else(|| bad(format!("bytes item `{fqn}` has no storage entry")))?;
        let i = self.input(&info.relative_path)?;
        let len = self.inputs[i].bytes().len() as u64;
        if info
            .offset
            .checked_add(info.length)
            .is_none_or(|end| end > len)
        {
            return Err(MergeError::Truncated {
                path: self.inputs[i].path.clone(),
                what: format!(
                    "bytes item `{fqn}` is recorded at {}..{}",
                    info.offset,
                    info.offset.saturating_add(info.length)
                ),
                len,
            });
        }
        let at = info.offset as usize;
        self.spans.push((i, at..at + info.length as usize, fqn));
        Ok(Entry {
            path: self.meta.path_of(fqn),
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
        })
    }

    /// A tensor of a writable dtype, with every chunk resolved in its data file.
    fn tensor_entry(
        &mut self,
        fqn: &'m str,
        dtype: DType,
        size: &[u64],
        chunks: &[(Vec<u64>, Vec<u64>)],
    ) -> Result<Entry, MergeError> {
        let mut pieces = Vec::with_capacity(chunks.len());
        for (offsets, sizes) in chunks {
            pieces.push(self.chunk(fqn, dtype, offsets, sizes)?);
        }
        Ok(Entry {
            path: self.meta.path_of(fqn),
            dtype,
            shape: size.to_vec(),
            tile_shape: size.to_vec(),
            pieces,
        })
    }

    /// One chunk of `fqn`, at `offsets` with `sizes`: found in its data file, checked against the
    /// metadata, its zip records noted for the CRC-32 check.
    fn chunk(
        &mut self,
        fqn: &'m str,
        dtype: DType,
        offsets: &[u64],
        sizes: &[u64],
    ) -> Result<Piece, MergeError> {
        let info = self
            .meta
            .storage
            .get(&(fqn.to_owned(), Some(offsets.to_vec())))
            .ok_or_else(|| bad(format!("`{fqn}` chunk at {offsets:?} has no storage entry")))?;
        let i = self.input(&info.relative_path)?;
        // Each chunk is its own write item: a blob listed twice is a crafted or corrupt file, and
        // re-reading it would make work grow without the input.
        if !self.used.insert((i, info.offset, fqn)) {
            return Err(bad(format!(
                "`{fqn}` chunk at {offsets:?} reuses the bytes at {} of `{}` that another chunk has",
                info.offset, info.relative_path
            ))
            .at(self.meta_path));
        }
        let r = resolve_chunk(fqn, info, &self.inputs[i].path, self.inputs[i].bytes())?;
        self.spans.push((i, r.data.clone(), fqn));
        for (range, expected, name) in r.records {
            self.crcs.push(super::Crc {
                input: i,
                range,
                expected,
                name,
            });
        }
        let (storage_start, t, big) = (r.storage_start, r.tensor, r.big_endian);
        // Only the archive's headers were read; keep resident memory independent of the number of
        // chunks.
        let end = info.offset.saturating_add(info.length) as usize;
        self.inputs[i].release(info.offset as usize, end);
        if let Some(message) = chunk_mismatch(&t, sizes, dtype) {
            return Err(MergeError::Chunk {
                path: self.inputs[i].path.clone(),
                fqn: fqn.to_owned(),
                offset: info.offset,
                message,
            });
        }
        Ok(Piece {
            offsets: offsets.to_vec(),
            sizes: sizes.to_vec(),
            input: i,
            storage_start,
            dtype: t.dtype,
            offset: t.offset,
            strides: t.strides,
            big_endian: big,
        })
    }
}

/// How a stored chunk disagrees with the metadata's `sizes` and `dtype`, if it does.
fn chunk_mismatch(t: &TensorRef, sizes: &[u64], dtype: DType) -> Option<String> {
    if t.shape != sizes {
        return Some(format!(
            "the stored chunk has shape {:?}, the metadata says {sizes:?}",
            t.shape
        ));
    }
    if t.dtype != dtype {
        return Some(format!(
            "the stored chunk is {}, the metadata says {}",
            t.dtype.torch(),
            dtype.torch()
        ));
    }
    None
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
pub fn metadata_path(dir: &Path) -> Result<Option<PathBuf>, MergeError> {
    let p = dir.join(".metadata");
    Ok(super::lookup::is_file(&p)?.then_some(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pickle built value by value, as the unpickler would leave it.
    #[derive(Default)]
    struct Arena(Vec<Node>);

    impl Arena {
        fn add(&mut self, n: Node) -> Id {
            self.0.push(n);
            (self.0.len() - 1) as Id
        }
        fn str(&mut self, s: &str) -> Id {
            self.add(Node::Str(s.into()))
        }
        /// A tuple of path elements: strings, or ints where `s` parses as one.
        fn path(&mut self, elements: &[&str]) -> Id {
            let ids = elements
                .iter()
                .map(|e| match e.parse() {
                    Ok(i) => self.add(Node::Int(i)),
                    Err(_) => self.str(e),
                })
                .collect();
            self.add(Node::Tuple(ids))
        }
        /// The pickle whose root holds `planner_data` = `value`.
        fn with_planner_data(mut self, value: Id) -> Pickle {
            let k = self.str("planner_data");
            let root = self.add(Node::Dict(vec![(k, value)]));
            Pickle {
                nodes: self.0,
                root,
            }
        }
    }

    fn tensor(fqn: &str) -> Item {
        Item::Tensor {
            fqn: fqn.into(),
            dtype: Ok(DType::F32),
            size: vec![1],
            chunks: Vec::new(),
        }
    }

    fn metadata_error(r: Result<HashMap<String, Vec<String>>, MergeError>) -> String {
        match r {
            Err(MergeError::Metadata(m)) => m,
            other => panic!("not a metadata error: {other:?}"),
        }
    }

    #[test]
    fn planner_data_gives_each_key_its_path_with_ints_as_names() {
        let mut a = Arena::default();
        let (k1, k2) = (a.str("model.layers.0.w"), a.str("step"));
        let (p1, p2) = (a.path(&["model", "layers", "0", "w"]), a.path(&["step"]));
        let pd = a.add(Node::Dict(vec![(k1, p1), (k2, p2)]));
        let p = a.with_planner_data(pd);
        let items = [
            tensor("model.layers.0.w"),
            Item::Bytes { fqn: "step".into() },
        ];
        let paths = planner_paths(&p, &items).unwrap();
        assert_eq!(paths["model.layers.0.w"], ["model", "layers", "0", "w"]);
        assert_eq!(paths["step"], ["step"]);
        let meta = Metadata {
            items: Vec::new(),
            storage: HashMap::new(),
            paths,
        };
        assert_eq!(
            meta.path_of("model.layers.0.w"),
            ["model", "layers", "0", "w"]
        );
        assert_eq!(meta.path_of("other.w"), ["other.w"]);
    }

    #[test]
    fn no_planner_data_takes_the_keys_as_they_are() {
        let mut a = Arena::default();
        let none = a.add(Node::None);
        let p = a.with_planner_data(none);
        assert!(planner_paths(&p, &[tensor("a.b")]).unwrap().is_empty());
    }

    #[test]
    fn a_path_that_does_not_name_its_key_is_bad_metadata() {
        let one = |key: &str, path: &[&str], element: Option<Node>| {
            let mut a = Arena::default();
            let k = a.str(key);
            let mut v = a.path(path);
            if let Some(e) = element {
                let e = a.add(e);
                v = a.add(Node::Tuple(vec![e]));
            }
            let pd = a.add(Node::Dict(vec![(k, v)]));
            planner_paths(&a.with_planner_data(pd), &[tensor(key)])
        };
        assert_eq!(
            metadata_error(one("a.b", &["a", "c"], None)),
            "planner_data gives `a.b` the path [\"a\", \"c\"], which names `a.c`"
        );
        assert_eq!(
            metadata_error(one("a", &[], None)),
            "planner_data of `a` is an empty path"
        );
        assert_eq!(
            metadata_error(one("a", &[], Some(Node::Float(1.0)))),
            "planner_data of `a` holds a path element that is neither a string nor an integer"
        );
        // A key of the state dict with no path at all.
        let mut a = Arena::default();
        let pd = a.add(Node::Dict(Vec::new()));
        assert_eq!(
            metadata_error(planner_paths(&a.with_planner_data(pd), &[tensor("w")])),
            "planner_data has no path for `w`"
        );
    }

    #[test]
    fn the_dtype_is_the_first_field_of_the_tensor_properties() {
        let mut a = Arena::default();
        let g = a.add(Node::Global("torch".into(), "bfloat16".into()));
        let state = a.add(Node::Tuple(vec![g]));
        let (callable, args) = (a.add(Node::None), a.add(Node::Tuple(Vec::new())));
        let props = a.add(Node::Object {
            callable,
            args,
            state: Some(state),
            items: Vec::new(),
            appends: Vec::new(),
        });
        let not_torch = a.add(Node::Global("numpy".into(), "float32".into()));
        let state2 = a.add(Node::Tuple(vec![not_torch]));
        let props2 = a.add(Node::Object {
            callable,
            args,
            state: Some(state2),
            items: Vec::new(),
            appends: Vec::new(),
        });
        let p = Pickle {
            nodes: a.0,
            root: props,
        };
        assert_eq!(tensor_dtype(&p, props, "w").unwrap(), Ok(DType::BF16));
        assert!(matches!(
            tensor_dtype(&p, props2, "w"),
            Err(MergeError::Metadata(m)) if m == "w: the dtype is not a torch dtype"
        ));
        assert!(matches!(
            tensor_dtype(&p, g, "w"),
            Err(MergeError::Metadata(m)) if m == "w: tensor properties carry no dtype"
        ));
    }

    #[test]
    fn a_stored_chunk_must_have_the_shape_and_dtype_the_metadata_says() {
        let t = TensorRef {
            dtype: DType::BF16,
            key: "0".into(),
            offset: 0,
            shape: vec![2, 3],
            strides: vec![3, 1],
        };
        assert_eq!(chunk_mismatch(&t, &[2, 3], DType::BF16), None);
        assert_eq!(
            chunk_mismatch(&t, &[3, 2], DType::BF16).as_deref(),
            Some("the stored chunk has shape [2, 3], the metadata says [3, 2]")
        );
        assert_eq!(
            chunk_mismatch(&t, &[2, 3], DType::F32).as_deref(),
            Some("the stored chunk is bfloat16, the metadata says float32")
        );
    }
}
