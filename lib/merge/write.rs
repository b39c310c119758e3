//! Output files, laid out completely before any tensor is read: safetensors' header depends only on
//! names, dtypes and shapes, and a torch.save zip's local headers only on record sizes, so every tensor's
//! final offset is known up front and tensors can be written in parallel straight to their place. Files
//! are written under a staging directory next to the output and renamed into place only after the whole
//! write has succeeded and read back correctly.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::copy::{self, Target};
use super::input::Input;
use super::select::OutTensor;
use super::tensor::{contiguous_strides, DType};
use super::{Entry, MergeError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Safetensors,
    TorchBin,
}

impl Format {
    fn stem(self) -> &'static str {
        match self {
            Format::Safetensors => "model",
            Format::TorchBin => "pytorch_model",
        }
    }
    fn ext(self) -> &'static str {
        match self {
            Format::Safetensors => "safetensors",
            Format::TorchBin => "bin",
        }
    }
    /// The single-file name (`model.safetensors` / `pytorch_model.bin`).
    pub fn single_name(self) -> String {
        format!("{}.{}", self.stem(), self.ext())
    }
    pub fn index_name(self) -> String {
        format!("{}.index.json", self.single_name())
    }
}

/// One output file: its bytes outside the tensors, and where each tensor goes.
#[derive(Debug)]
pub struct FilePlan {
    pub name: String,
    /// `(offset, bytes)` pieces of the file that are not tensor data, written first.
    pub fixed: Vec<(u64, Vec<u8>)>,
    /// `(index into the selection, absolute byte offset)`.
    pub tensors: Vec<(usize, u64)>,
    pub len: u64,
    /// For torch.save zips: what is needed to finish the file once CRCs are known.
    pub zip: Option<ZipTail>,
}

#[derive(Debug)]
pub struct ZipTail {
    /// All records in order: (name, local header offset, data offset, size, crc if fixed).
    records: Vec<ZipRecord>,
    cd_offset: u64,
}

#[derive(Debug, Clone)]
struct ZipRecord {
    name: String,
    header: u64,
    data: u64,
    size: u64,
    crc: Option<u32>,
}

/// All output files.
#[derive(Debug)]
pub struct Plan {
    pub format: Format,
    pub files: Vec<FilePlan>,
    /// `(file name, contents)` of the shard index.
    pub index: Option<(String, String)>,
    pub tensor_bytes: u64,
}

fn tensor_bytes(e: &Entry, dtype: DType) -> u64 {
    e.numel() * dtype.size() as u64
}

/// Lays out the output files.
pub fn plan(format: Format, sel: &[OutTensor], entries: &[Entry], max_shard: Option<u64>) -> Plan {
    // Greedy in checkpoint order: a tensor larger than the limit gets a shard of its own.
    let mut groups: Vec<Vec<usize>> = vec![Vec::new()];
    let mut size = 0u64;
    for (i, t) in sel.iter().enumerate() {
        let b = tensor_bytes(&entries[t.entry], t.dtype);
        if let Some(max) = max_shard {
            if size > 0 && size + b > max {
                groups.push(Vec::new());
                size = 0;
            }
        }
        size += b;
        if let Some(g) = groups.last_mut() {
            g.push(i);
        }
    }
    let n = groups.len();
    let mut files = Vec::new();
    let mut weight_map = BTreeMap::new();
    for (k, group) in groups.into_iter().enumerate() {
        let name = if n == 1 {
            format.single_name()
        } else {
            format!(
                "{}-{:05}-of-{:05}.{}",
                format.stem(),
                k + 1,
                n,
                format.ext()
            )
        };
        for &i in &group {
            weight_map.insert(sel[i].name.clone(), name.clone());
        }
        files.push(match format {
            Format::Safetensors => plan_safetensors(name, &group, sel, entries),
            Format::TorchBin => plan_torch_zip(name, &group, sel, entries),
        });
    }
    let total: u64 = sel
        .iter()
        .map(|t| tensor_bytes(&entries[t.entry], t.dtype))
        .sum();
    let index = (n > 1).then(|| {
        let json = serde_json::json!({
            "metadata": {"total_size": total},
            "weight_map": weight_map,
        });
        let text = serde_json::to_string_pretty(&json).unwrap_or_default() + "\n";
        (format.index_name(), text)
    });
    Plan {
        format,
        files,
        index,
        tensor_bytes: total,
    }
}

fn plan_safetensors(
    name: String,
    group: &[usize],
    sel: &[OutTensor],
    entries: &[Entry],
) -> FilePlan {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
    let mut off = 0u64;
    let mut rel = Vec::new();
    for &i in group {
        let t = &sel[i];
        let e = &entries[t.entry];
        let b = tensor_bytes(e, t.dtype);
        header.insert(
            t.name.clone(),
            serde_json::json!({
                "dtype": t.dtype.safetensors(),
                "shape": t.dtype.safetensors_shape(&e.shape),
                "data_offsets": [off, off + b],
            }),
        );
        rel.push((i, off));
        off += b;
    }
    let mut json = serde_json::to_vec(&serde_json::Value::Object(header)).unwrap_or_default();
    while json.len() % 8 != 0 {
        json.push(b' ');
    }
    let start = 8 + json.len() as u64;
    let mut fixed = (json.len() as u64).to_le_bytes().to_vec();
    fixed.extend_from_slice(&json);
    FilePlan {
        name,
        fixed: vec![(0, fixed)],
        tensors: rel.into_iter().map(|(i, o)| (i, start + o)).collect(),
        len: start + off,
        zip: None,
    }
}

// ---- torch.save zip ----

fn pickle_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'X');
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn pickle_int(out: &mut Vec<u8>, v: u64) {
    if v < 256 {
        out.extend_from_slice(&[b'K', v as u8]);
    } else if v < 65536 {
        out.push(b'M');
        out.extend_from_slice(&(v as u16).to_le_bytes());
    } else if v < (1 << 31) {
        out.push(b'J');
        out.extend_from_slice(&(v as u32).to_le_bytes());
    } else {
        // LONG1, two's complement: a ninth zero byte keeps values >= 2^63 positive.
        out.extend_from_slice(&[0x8a, 9]);
        out.extend_from_slice(&v.to_le_bytes());
        out.push(0);
    }
}

fn pickle_ints(out: &mut Vec<u8>, vs: &[u64]) {
    if vs.is_empty() {
        out.push(b')');
        return;
    }
    out.push(b'(');
    for &v in vs {
        pickle_int(out, v);
    }
    out.push(b't');
}

/// `data.pkl` for a dict of tensors, storage `i` for the i-th tensor (torch.save's protocol 2).
fn torch_pickle(tensors: &[(String, DType, Vec<u64>)]) -> Vec<u8> {
    let mut p = vec![0x80, 2, b'}', b'('];
    for (i, (name, dtype, shape)) in tensors.iter().enumerate() {
        pickle_str(&mut p, name);
        let numel: u64 = shape.iter().product();
        let v3 = dtype.storage_class().is_none();
        p.extend_from_slice(if v3 {
            b"ctorch._utils\n_rebuild_tensor_v3\n"
        } else {
            b"ctorch._utils\n_rebuild_tensor_v2\n"
        });
        p.push(b'(');
        p.push(b'(');
        pickle_str(&mut p, "storage");
        match dtype.storage_class() {
            Some(c) => p.extend_from_slice(format!("ctorch\n{c}\n").as_bytes()),
            None => p.extend_from_slice(b"ctorch.storage\nUntypedStorage\n"),
        }
        pickle_str(&mut p, &i.to_string());
        pickle_str(&mut p, "cpu");
        pickle_int(
            &mut p,
            if v3 {
                numel * dtype.size() as u64
            } else {
                numel
            },
        );
        p.push(b't');
        p.push(b'Q');
        pickle_int(&mut p, 0);
        pickle_ints(&mut p, shape);
        pickle_ints(&mut p, &contiguous_strides(shape));
        p.push(0x89);
        p.extend_from_slice(b"ccollections\nOrderedDict\n)R");
        if v3 {
            p.extend_from_slice(format!("ctorch\n{}\n", dtype.torch()).as_bytes());
        }
        p.push(b't');
        p.push(b'R');
    }
    p.extend_from_slice(b"u.");
    p
}

const ZIP64_LIMIT: u64 = 0xffff_ffff;

fn local_header(name: &str, at: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(30 + name.len() + 64);
    h.extend_from_slice(b"PK\x03\x04");
    h.extend_from_slice(&20u16.to_le_bytes());
    h.extend_from_slice(&0x0808u16.to_le_bytes());
    h.extend_from_slice(&[0u8; 2 + 4 + 4 + 4 + 4]); // method, time+date, crc, sizes
    h.extend_from_slice(&(name.len() as u16).to_le_bytes());
    // The "FB" padding extra field puts the data on a 64-byte boundary, as torch does.
    let end = at + 30 + name.len() as u64 + 4;
    let pad = (64 - end % 64) % 64;
    h.extend_from_slice(&(4 + pad as u16).to_le_bytes());
    h.extend_from_slice(name.as_bytes());
    h.extend_from_slice(b"FB");
    h.extend_from_slice(&(pad as u16).to_le_bytes());
    h.resize(h.len() + pad as usize, b'Z');
    h
}

fn descriptor(crc: u32, size: u64) -> Vec<u8> {
    let mut d = b"PK\x07\x08".to_vec();
    d.extend_from_slice(&crc.to_le_bytes());
    if size >= ZIP64_LIMIT {
        d.extend_from_slice(&size.to_le_bytes());
        d.extend_from_slice(&size.to_le_bytes());
    } else {
        d.extend_from_slice(&(size as u32).to_le_bytes());
        d.extend_from_slice(&(size as u32).to_le_bytes());
    }
    d
}

fn descriptor_len(size: u64) -> u64 {
    if size >= ZIP64_LIMIT {
        24
    } else {
        16
    }
}

fn plan_torch_zip(name: String, group: &[usize], sel: &[OutTensor], entries: &[Entry]) -> FilePlan {
    let prefix = name.strip_suffix(".bin").unwrap_or(&name).to_string();
    let list: Vec<(String, DType, Vec<u64>)> = group
        .iter()
        .map(|&i| {
            (
                sel[i].name.clone(),
                sel[i].dtype,
                entries[sel[i].entry].shape.clone(),
            )
        })
        .collect();
    let small: Vec<(String, Vec<u8>)> = vec![
        ("data.pkl".into(), torch_pickle(&list)),
        (".format_version".into(), b"1".to_vec()),
        (".storage_alignment".into(), b"64".to_vec()),
        ("byteorder".into(), b"little".to_vec()),
    ];
    let mut fixed = Vec::new();
    let mut records = Vec::new();
    let mut at = 0u64;
    let put_small = |rname: String,
                     data: Vec<u8>,
                     at: &mut u64,
                     fixed: &mut Vec<(u64, Vec<u8>)>,
                     records: &mut Vec<ZipRecord>| {
        let full = format!("{prefix}/{rname}");
        let mut h = local_header(&full, *at);
        let data_at = *at + h.len() as u64;
        let crc = crc32fast::hash(&data);
        let size = data.len() as u64;
        records.push(ZipRecord {
            name: full,
            header: *at,
            data: data_at,
            size,
            crc: Some(crc),
        });
        h.extend_from_slice(&data);
        h.extend_from_slice(&descriptor(crc, size));
        *at += h.len() as u64;
        fixed.push((records[records.len() - 1].header, h));
    };
    for (n, d) in small {
        put_small(n, d, &mut at, &mut fixed, &mut records);
    }
    let mut tensors = Vec::new();
    for (k, &i) in group.iter().enumerate() {
        let full = format!("{prefix}/data/{k}");
        let h = local_header(&full, at);
        let data_at = at + h.len() as u64;
        let size = tensor_bytes(&entries[sel[i].entry], sel[i].dtype);
        records.push(ZipRecord {
            name: full,
            header: at,
            data: data_at,
            size,
            crc: None,
        });
        fixed.push((at, h));
        tensors.push((i, data_at));
        at = data_at + size + descriptor_len(size);
    }
    put_small(
        "version".into(),
        b"3\n".to_vec(),
        &mut at,
        &mut fixed,
        &mut records,
    );
    let cd_len: u64 = records
        .iter()
        .map(|r| {
            let extra =
                8 * (2 * u64::from(r.size >= ZIP64_LIMIT) + u64::from(r.header >= ZIP64_LIMIT));
            46 + r.name.len() as u64 + if extra > 0 { 4 + extra } else { 0 }
        })
        .sum::<u64>()
        + 56
        + 20
        + 22;
    FilePlan {
        name,
        fixed,
        tensors,
        len: at + cd_len,
        zip: Some(ZipTail {
            records,
            cd_offset: at,
        }),
    }
}

/// Writes the descriptors of the tensor records, the central directory and the end records.
fn finish_zip(
    f: &File,
    tail: &ZipTail,
    crcs: &BTreeMap<u64, u32>,
    path: &Path,
) -> Result<(), MergeError> {
    let werr = |e| MergeError::io("write", path, e);
    let mut cd = Vec::new();
    for r in &tail.records {
        let crc = match r.crc {
            Some(c) => c,
            None => {
                let c = crcs.get(&r.data).copied().unwrap_or(0);
                f.write_all_at(&descriptor(c, r.size), r.data + r.size)
                    .map_err(werr)?;
                c
            }
        };
        let big_size = r.size >= ZIP64_LIMIT;
        let big_off = r.header >= ZIP64_LIMIT;
        let mut extra = Vec::new();
        if big_size {
            extra.extend_from_slice(&r.size.to_le_bytes());
            extra.extend_from_slice(&r.size.to_le_bytes());
        }
        if big_off {
            extra.extend_from_slice(&r.header.to_le_bytes());
        }
        let mut e = b"PK\x01\x02".to_vec();
        let version: u16 = if extra.is_empty() { 20 } else { 45 };
        e.extend_from_slice(&version.to_le_bytes());
        e.extend_from_slice(&version.to_le_bytes());
        e.extend_from_slice(&0x0808u16.to_le_bytes());
        e.extend_from_slice(&[0u8; 6]); // method, time, date
        e.extend_from_slice(&crc.to_le_bytes());
        let s32 = if big_size {
            ZIP64_LIMIT as u32
        } else {
            r.size as u32
        };
        e.extend_from_slice(&s32.to_le_bytes());
        e.extend_from_slice(&s32.to_le_bytes());
        e.extend_from_slice(&(r.name.len() as u16).to_le_bytes());
        let extra_len = if extra.is_empty() { 0 } else { 4 + extra.len() };
        e.extend_from_slice(&(extra_len as u16).to_le_bytes());
        e.extend_from_slice(&[0u8; 2 + 2 + 2 + 4]); // comment, disk, internal, external attrs
        let o32 = if big_off {
            ZIP64_LIMIT as u32
        } else {
            r.header as u32
        };
        e.extend_from_slice(&o32.to_le_bytes());
        e.extend_from_slice(r.name.as_bytes());
        if !extra.is_empty() {
            e.extend_from_slice(&1u16.to_le_bytes());
            e.extend_from_slice(&(extra.len() as u16).to_le_bytes());
            e.extend_from_slice(&extra);
        }
        cd.extend_from_slice(&e);
    }
    let n = tail.records.len() as u64;
    let cd_size = cd.len() as u64;
    let z64 = tail.cd_offset + cd_size;
    cd.extend_from_slice(b"PK\x06\x06");
    cd.extend_from_slice(&44u64.to_le_bytes());
    cd.extend_from_slice(&45u16.to_le_bytes());
    cd.extend_from_slice(&45u16.to_le_bytes());
    cd.extend_from_slice(&[0u8; 8]);
    cd.extend_from_slice(&n.to_le_bytes());
    cd.extend_from_slice(&n.to_le_bytes());
    cd.extend_from_slice(&cd_size.to_le_bytes());
    cd.extend_from_slice(&tail.cd_offset.to_le_bytes());
    cd.extend_from_slice(b"PK\x06\x07");
    cd.extend_from_slice(&0u32.to_le_bytes());
    cd.extend_from_slice(&z64.to_le_bytes());
    cd.extend_from_slice(&1u32.to_le_bytes());
    cd.extend_from_slice(b"PK\x05\x06");
    cd.extend_from_slice(&[0u8; 4]);
    let n16 = n.min(0xffff) as u16;
    cd.extend_from_slice(&n16.to_le_bytes());
    cd.extend_from_slice(&n16.to_le_bytes());
    cd.extend_from_slice(&(cd_size.min(ZIP64_LIMIT) as u32).to_le_bytes());
    cd.extend_from_slice(&(tail.cd_offset.min(ZIP64_LIMIT) as u32).to_le_bytes());
    cd.extend_from_slice(&0u16.to_le_bytes());
    f.write_all_at(&cd, tail.cd_offset).map_err(werr)?;
    Ok(())
}

/// CRC-32 of `len` bytes of `f` at `at`, read back in bounded pieces.
fn crc_of(f: &File, at: u64, len: u64) -> io::Result<u32> {
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; (copy::PIECE as u64).min(len) as usize];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(buf.len() as u64) as usize;
        f.read_exact_at(&mut buf[..n], at + done)?;
        h.update(&buf[..n]);
        done += n as u64;
    }
    Ok(h.finalize())
}

/// Writes every file of `plan` into `dir`; returns the paths written.
pub fn write_files(
    plan: &Plan,
    dir: &Path,
    sel: &[OutTensor],
    entries: &[Entry],
    inputs: &[Input],
    progress: &(dyn Fn(u64) + Sync),
    interrupted: &std::sync::atomic::AtomicUsize,
) -> Result<Vec<PathBuf>, MergeError> {
    let mut handles = Vec::new();
    for fp in &plan.files {
        let path = dir.join(&fp.name);
        let f = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| MergeError::io("create", &path, e))?;
        // Reserve the space up front so a full disk fails now, not halfway through.
        preallocate(&f, fp.len).map_err(|e| MergeError::io("write", &path, e))?;
        for (at, bytes) in &fp.fixed {
            f.write_all_at(bytes, *at)
                .map_err(|e| MergeError::io("write", &path, e))?;
        }
        handles.push((path, f));
    }
    let jobs: Vec<(usize, usize, u64)> = plan
        .files
        .iter()
        .enumerate()
        .flat_map(|(k, fp)| fp.tensors.iter().map(move |&(i, at)| (k, i, at)))
        .collect();
    jobs.par_iter().try_for_each(|&(k, i, at)| {
        let sig = interrupted.load(std::sync::atomic::Ordering::Relaxed);
        if sig != 0 {
            return Err(MergeError::Interrupted(sig as i32));
        }
        let t = &sel[i];
        let e = &entries[t.entry];
        let (path, f) = &handles[k];
        copy::write_tensor(
            &Target {
                out: f,
                base: at,
                dtype: t.dtype,
                tile_shape: &e.tile_shape,
                pieces: &e.pieces,
            },
            inputs,
            progress,
        )
        .map_err(|err| match copy::input_of(&err) {
            // The piece's own file, whichever of the tensor's pieces it is.
            Some(i) => MergeError::io("read", &inputs[i].path, err),
            None => MergeError::io("write", path, err),
        })
    })?;
    for (fp, (path, f)) in plan.files.iter().zip(&handles) {
        if let Some(tail) = &fp.zip {
            let crcs: Result<BTreeMap<u64, u32>, MergeError> = tail
                .records
                .par_iter()
                .filter(|r| r.crc.is_none())
                .map(|r| {
                    crc_of(f, r.data, r.size)
                        .map(|c| (r.data, c))
                        .map_err(|e| MergeError::io("read back", path, e))
                })
                .collect();
            finish_zip(f, tail, &crcs?, path)?;
        }
        f.sync_all().map_err(|e| MergeError::io("write", path, e))?;
    }
    let mut paths: Vec<PathBuf> = handles.into_iter().map(|(p, _)| p).collect();
    if let Some((name, text)) = &plan.index {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| MergeError::io("write", &path, e))?;
        paths.push(path);
    }
    Ok(paths)
}

fn preallocate(f: &File, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: plain syscall on a file descriptor we own.
    let r = unsafe {
        libc::posix_fallocate(
            std::os::unix::io::AsRawFd::as_raw_fd(f),
            0,
            len as libc::off_t,
        )
    };
    match r {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => f.set_len(len),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// Re-reads what was written and compares it with the plan: every file has the planned length, and
/// its header (safetensors) or record table (zip) names the planned tensors at the planned offsets.
pub fn verify(plan: &Plan, dir: &Path, sel: &[OutTensor]) -> Result<(), MergeError> {
    for fp in &plan.files {
        let path = dir.join(&fp.name);
        let bad = |message: String| MergeError::Verify {
            path: path.clone(),
            message,
        };
        let input = super::input::open_written(&path)?;
        let bytes = input.bytes();
        if bytes.len() as u64 != fp.len {
            return Err(bad(format!("{} bytes, expected {}", bytes.len(), fp.len)));
        }
        match plan.format {
            Format::Safetensors => {
                let (n, meta) = safetensors::SafeTensors::read_metadata(bytes)
                    .map_err(|e| bad(format!("{e:?}")))?;
                let tensors = meta.tensors();
                for &(i, at) in &fp.tensors {
                    let info = tensors
                        .get(&sel[i].name)
                        .ok_or_else(|| bad(format!("`{}` is missing", sel[i].name)))?;
                    if (8 + n + info.data_offsets.0) as u64 != at {
                        return Err(bad(format!("`{}` is at the wrong offset", sel[i].name)));
                    }
                }
            }
            Format::TorchBin => {
                let zip = super::torchzip::open(bytes).map_err(|e| bad(e.to_string()))?;
                for (k, &(_, at)) in fp.tensors.iter().enumerate() {
                    let r = zip
                        .get(&format!("data/{k}"))
                        .map_err(|e| bad(e.to_string()))?;
                    if r.start as u64 != at {
                        return Err(bad(format!("record data/{k} is at the wrong offset")));
                    }
                }
                let pkl = zip.get("data.pkl").map_err(|e| bad(e.to_string()))?;
                super::pickle::load(&bytes[pkl], super::pickle::Globals::TorchWeights)
                    .map_err(|e| bad(e.to_string()))?;
            }
        }
    }
    Ok(())
}

/// The staging directory a merge by process `pid` writes into, inside the output directory so that the
/// final renames stay on one file system.
pub fn staging_dir(out_dir: &Path, pid: u32) -> PathBuf {
    out_dir.join(format!("{STAGING_PREFIX}{pid}{STAGING_SUFFIX}"))
}

const STAGING_PREFIX: &str = ".accel-merge-";
const STAGING_SUFFIX: &str = ".tmp";

/// The staging directories in `out_dir` with the pid of the merge that made each.
pub fn staging_dirs(out_dir: &Path) -> Vec<(PathBuf, u32)> {
    let Ok(rd) = std::fs::read_dir(out_dir) else {
        return Vec::new();
    };
    let mut v: Vec<(PathBuf, u32)> = rd
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_owned();
            let pid = name
                .strip_prefix(STAGING_PREFIX)?
                .strip_suffix(STAGING_SUFFIX)?
                .parse()
                .ok()?;
            Some((e.path(), pid))
        })
        .collect();
    v.sort();
    v
}

/// The total size of the files below `dir` (for messages).
pub fn dir_size(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            _ => e.metadata().map(|m| m.len()).unwrap_or(0),
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::pickle::{load, Globals};
    use crate::merge::tensor::TensorRef;

    fn entry(shape: &[u64], dtype: DType) -> Entry {
        Entry {
            path: vec!["x".into()],
            dtype,
            shape: shape.to_vec(),
            tile_shape: shape.to_vec(),
            pieces: Vec::new(),
        }
    }

    #[test]
    fn shards_are_greedy_and_oversized_tensors_stand_alone() {
        let entries = vec![
            entry(&[10], DType::F32),
            entry(&[10], DType::F32),
            entry(&[100], DType::F32),
            entry(&[5], DType::BF16),
        ];
        let sel: Vec<OutTensor> = (0..4)
            .map(|i| OutTensor {
                name: format!("t{i}"),
                entry: i,
                dtype: entries[i].dtype,
            })
            .collect();
        let plan = plan(Format::Safetensors, &sel, &entries, Some(80));
        let names: Vec<&str> = plan.files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "model-00001-of-00003.safetensors",
                "model-00002-of-00003.safetensors",
                "model-00003-of-00003.safetensors"
            ]
        );
        assert_eq!(plan.files[0].tensors.len(), 2);
        let (name, index) = plan.index.as_ref().unwrap();
        assert_eq!(name, "model.safetensors.index.json");
        let v: serde_json::Value = serde_json::from_str(index).unwrap();
        assert_eq!(v["metadata"]["total_size"], 80 + 400 + 10);
        assert_eq!(v["weight_map"]["t3"], "model-00003-of-00003.safetensors");
        // Headers are 8-byte aligned and data follows immediately.
        let f = &plan.files[0];
        assert_eq!(f.tensors[0].1 % 8, 0);
        assert_eq!(f.len, f.tensors[0].1 + 80);
    }

    #[test]
    fn torch_pickle_reads_back_as_tensors() {
        let list = vec![
            ("a".to_string(), DType::F32, vec![3, 1 << 33]),
            ("b".to_string(), DType::U16, vec![]),
        ];
        let p = load(&torch_pickle(&list), Globals::TorchWeights).unwrap();
        let pairs = p.pairs(p.root).unwrap();
        let a = TensorRef::from_pickle(&p, pairs[0].1).unwrap();
        assert_eq!(a.shape, vec![3, 1 << 33]);
        assert_eq!(a.strides, vec![1 << 33, 1]);
        assert_eq!(a.key, "0");
        let b = TensorRef::from_pickle(&p, pairs[1].1).unwrap();
        assert_eq!((b.dtype, b.key.as_str()), (DType::U16, "1"));
    }
}
