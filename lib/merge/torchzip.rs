//! The `torch.save` zip container, read in place: torch writes every record stored (never compressed)
//! and 64-byte aligned, so a record is just a byte range of the file. We find the ranges from the
//! central directory and the *local* headers (the alignment padding lives only in the local extra
//! field), and never copy record data.

use std::ops::Range;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ZipError {
    #[error("not a torch.save archive: {0}")]
    Format(&'static str),
    #[error("record `{0}` is compressed; torch.save never compresses")]
    Compressed(String),
    #[error("record `{name}` lies outside the archive ({end} > {len} bytes)")]
    OutOfRange { name: String, end: u64, len: u64 },
    #[error("the archive has no record `{0}`")]
    Missing(String),
}

/// One stored record: its full name and where its bytes are, relative to the archive start.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub name: String,
    pub data: Range<usize>,
    /// The CRC-32 the central directory records for the data.
    pub crc32: u32,
}

/// An opened archive: the record prefix (`archive`, or the file's stem) and the records.
#[derive(Debug)]
pub struct Archive {
    pub prefix: String,
    pub records: Vec<Record>,
}

fn le16(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 2)
        .map(|s| u64::from(u16::from_le_bytes([s[0], s[1]])))
}
fn le32(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 4)
        .map(|s| u64::from(u32::from_le_bytes([s[0], s[1], s[2], s[3]])))
}
fn le64(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_le_bytes(a))
}

const EOCD: &[u8] = b"PK\x05\x06";
const ZIP64_LOCATOR: &[u8] = b"PK\x06\x07";
const ZIP64_EOCD: &[u8] = b"PK\x06\x06";
const CENTRAL: &[u8] = b"PK\x01\x02";
const LOCAL: &[u8] = b"PK\x03\x04";

/// Opens the archive that is exactly `data`.
pub fn open(data: &[u8]) -> Result<Archive, ZipError> {
    use ZipError::Format;
    let len = data.len();
    if len < 22 || !data.starts_with(LOCAL) {
        return Err(Format("it does not start with a zip local header"));
    }
    // The classic end record is the last 22 bytes unless a comment follows; torch writes none, but
    // allow one as any zip reader would.
    let lo = len.saturating_sub(22 + 0xffff);
    let eocd = (lo..=len - 22)
        .rev()
        .find(|&i| &data[i..i + 4] == EOCD)
        .ok_or(Format("no end-of-central-directory record"))?;
    let mut count = le16(data, eocd + 10).ok_or(Format("short end record"))?;
    let mut cd_size = le32(data, eocd + 12).ok_or(Format("short end record"))?;
    let mut cd_off = le32(data, eocd + 16).ok_or(Format("short end record"))?;
    if eocd >= 20 && &data[eocd - 20..eocd - 16] == ZIP64_LOCATOR {
        let z = le64(data, eocd - 12).ok_or(Format("short zip64 locator"))?;
        let z = usize::try_from(z).map_err(|_| Format("zip64 record out of range"))?;
        if data.get(z..z + 4) != Some(ZIP64_EOCD) {
            return Err(Format("the zip64 locator points at no zip64 end record"));
        }
        count = le64(data, z + 32).ok_or(Format("short zip64 end record"))?;
        cd_size = le64(data, z + 40).ok_or(Format("short zip64 end record"))?;
        cd_off = le64(data, z + 48).ok_or(Format("short zip64 end record"))?;
    }
    let cd_end = cd_off
        .checked_add(cd_size)
        .filter(|&e| e <= len as u64)
        .ok_or(Format("the central directory lies outside the file"))?;
    if count > cd_size / 46 {
        return Err(Format("more entries than the central directory can hold"));
    }
    let mut records = Vec::with_capacity(count as usize);
    let mut at = cd_off as usize;
    for _ in 0..count {
        if data.get(at..at + 4) != Some(CENTRAL) || at as u64 + 46 > cd_end {
            return Err(Format("a central directory entry is malformed"));
        }
        let method = le16(data, at + 10).ok_or(Format("short entry"))?;
        let crc32 = le32(data, at + 16).ok_or(Format("short entry"))? as u32;
        let mut csize = le32(data, at + 20).ok_or(Format("short entry"))?;
        let mut usize_ = le32(data, at + 24).ok_or(Format("short entry"))?;
        let name_len = le16(data, at + 28).ok_or(Format("short entry"))? as usize;
        let extra_len = le16(data, at + 30).ok_or(Format("short entry"))? as usize;
        let comment_len = le16(data, at + 32).ok_or(Format("short entry"))? as usize;
        let mut local = le32(data, at + 42).ok_or(Format("short entry"))?;
        let name_at = at + 46;
        let name = data
            .get(name_at..name_at + name_len)
            .ok_or(Format("an entry name runs past the file"))?;
        let name = String::from_utf8_lossy(name).into_owned();
        let extra = data
            .get(name_at + name_len..name_at + name_len + extra_len)
            .ok_or(Format("an extra field runs past the file"))?;
        // zip64 extended information: the 0xFFFFFFFF fields, in order, as u64.
        let mut e = 0;
        while e + 4 <= extra.len() {
            let id = le16(extra, e).unwrap_or(0);
            let sz = le16(extra, e + 2).unwrap_or(0) as usize;
            if id == 1 {
                let mut f = e + 4;
                for field in [&mut usize_, &mut csize, &mut local] {
                    if *field == 0xffff_ffff {
                        *field = le64(extra, f).ok_or(Format("short zip64 extra field"))?;
                        f += 8;
                    }
                }
            }
            e += 4 + sz;
        }
        if method != 0 {
            return Err(ZipError::Compressed(name));
        }
        if csize != usize_ {
            return Err(Format("a stored record whose sizes differ"));
        }
        let l = usize::try_from(local).map_err(|_| Format("local header out of range"))?;
        if data.get(l..l + 4) != Some(LOCAL) {
            return Err(Format("an entry points at no local header"));
        }
        let lname = le16(data, l + 26).ok_or(Format("short local header"))?;
        let lextra = le16(data, l + 28).ok_or(Format("short local header"))?;
        let start = local + 30 + lname + lextra;
        let end = start.saturating_add(csize);
        if end > len as u64 {
            return Err(ZipError::OutOfRange {
                name,
                end,
                len: len as u64,
            });
        }
        records.push(Record {
            name,
            data: start as usize..end as usize,
            crc32,
        });
        at = name_at + name_len + extra_len + comment_len;
    }
    let prefix = records
        .first()
        .and_then(|r| r.name.split_once('/'))
        .map(|(p, _)| p.to_owned())
        .ok_or(Format("the archive is empty"))?;
    Ok(Archive { prefix, records })
}

impl Archive {
    /// The byte range of `<prefix>/<rel>`.
    pub fn find(&self, rel: &str) -> Option<Range<usize>> {
        self.record(rel).map(|r| r.data.clone())
    }
    /// The record `<prefix>/<rel>`.
    pub fn record(&self, rel: &str) -> Option<&Record> {
        self.records.iter().find(|r| {
            r.name
                .strip_prefix(self.prefix.as_str())
                .and_then(|s| s.strip_prefix('/'))
                == Some(rel)
        })
    }
    /// The record `<prefix>/<rel>`, or which is missing.
    pub fn get_record(&self, rel: &str) -> Result<&Record, ZipError> {
        self.record(rel)
            .ok_or_else(|| ZipError::Missing(format!("{}/{rel}", self.prefix)))
    }
    pub fn get(&self, rel: &str) -> Result<Range<usize>, ZipError> {
        self.find(rel)
            .ok_or_else(|| ZipError::Missing(format!("{}/{rel}", self.prefix)))
    }
    /// Whether storages are big-endian (`byteorder` record; absent means little).
    pub fn big_endian(&self, data: &[u8]) -> bool {
        self.find("byteorder")
            .and_then(|r| data.get(r))
            .is_some_and(|b| b.starts_with(b"big"))
    }
}
