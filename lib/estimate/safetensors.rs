//! Safetensors headers, and only headers: an 8-byte little-endian length and a JSON table of tensor
//! names, dtypes, shapes and byte ranges. The `safetensors` crate wants the whole buffer to validate
//! against, which is exactly what must not be read (or downloaded) here, so the header is parsed
//! directly and checked against the file's length instead.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use super::error::EstimateError;
use super::tensors::{DType, Tensor};
use crate::error::{IoError, Result};

/// The safetensors crate's own limit; anything larger is not a header.
pub const MAX_HEADER: u64 = 100_000_000;

/// The header length from a file's first 8 bytes.
pub fn header_len(prefix: &[u8], path: &str) -> Result<u64, EstimateError> {
    let Some(bytes) = prefix.get(..8) else {
        return Err(EstimateError::NotSafetensors {
            path: path.into(),
            reason: format!("only {} bytes long", prefix.len()),
        });
    };
    let mut le = [0u8; 8];
    le.copy_from_slice(bytes);
    let n = u64::from_le_bytes(le);
    if !(2..=MAX_HEADER).contains(&n) {
        return Err(EstimateError::NotSafetensors {
            path: path.into(),
            reason: format!("its first 8 bytes give a header length of {n}"),
        });
    }
    if let Some(&first) = prefix.get(8) {
        if first != b'{' {
            return Err(EstimateError::NotSafetensors {
                path: path.into(),
                reason: "the header does not start with `{`".into(),
            });
        }
    }
    Ok(n)
}

/// A parsed header: the tensors and how many bytes of data they say follow the header.
#[derive(Debug)]
pub struct Header {
    pub tensors: Vec<Tensor>,
    pub data_len: u64,
}

/// One header entry as stored; borrowed so thousands of tensors parse without a copy each.
#[derive(serde::Deserialize)]
struct Entry<'a> {
    #[serde(borrow)]
    dtype: std::borrow::Cow<'a, str>,
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

/// The header's top-level object: tensors, plus `__metadata__` which is skipped. A typed visitor
/// rather than `serde_json::Value`, because a 36k-tensor MoE header is parsed per run.
struct Entries<'a>(Vec<(std::borrow::Cow<'a, str>, Entry<'a>)>);

impl<'de> serde::Deserialize<'de> for Entries<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Entries<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object of tensors")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if key == "__metadata__" {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    } else {
                        let entry = map.next_value::<Entry<'de>>().map_err(|e| {
                            serde::de::Error::custom(format!("tensor `{key}`: {e}"))
                        })?;
                        out.push((key, entry));
                    }
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// Parses the JSON header (the bytes after the length).
pub fn parse_header(json: &[u8], path: &str) -> Result<Header, EstimateError> {
    let bad = |reason: String| EstimateError::BadHeader {
        path: path.into(),
        reason,
    };
    let Entries(entries) = serde_json::from_slice(json).map_err(|e| bad(e.to_string()))?;
    let mut tensors = Vec::with_capacity(entries.len());
    let mut data_len = 0u64;
    // safetensors' `Metadata::validate` (tensor.rs): sorted by offsets, the byte ranges tile the
    // data from 0 without gaps, and each range is exactly numel x dtype size (checked products).
    // The crate keeps `validate` private and `read_metadata` wants the whole file in memory, which
    // is what must not be read here, so its rules are applied to the header alone.
    let mut ranges: Vec<(u64, u64, usize)> = Vec::with_capacity(entries.len());
    for (name, entry) in entries {
        let dtype = DType::from_safetensors(&entry.dtype).ok_or_else(|| {
            bad(format!(
                "tensor `{name}` has unknown dtype `{}`",
                entry.dtype
            ))
        })?;
        let numel = entry
            .shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .ok_or_else(|| bad(format!("tensor `{name}` is impossibly large")))?;
        let [start, end] = entry.data_offsets;
        let nbytes = numel
            .checked_mul(dtype.storage_bytes())
            .ok_or_else(|| bad(format!("tensor `{name}` is impossibly large")))?;
        if end < start || end - start != nbytes {
            return Err(bad(format!(
                "tensor `{name}`: shape {:?} of {} is {nbytes} bytes, but data_offsets [{start}, {end}] hold {}",
                entry.shape,
                dtype.name(),
                end.saturating_sub(start)
            )));
        }
        ranges.push((start, end, tensors.len()));
        data_len = data_len.max(end);
        // Headers give no module types: a weight of two dimensions that no embedding's name
        // fits is taken for a linear layer's.
        let matmul = entry.shape.len() == 2
            && name.ends_with("weight")
            && !["embed", "wte", "wpe", "shared", "position", "token_type"]
                .iter()
                .any(|e| name.contains(e));
        tensors.push(Tensor {
            name: name.into_owned(),
            dtype,
            numel,
            rows: entry.shape.first().copied().unwrap_or(1),
            buffer: false,
            matmul,
        });
    }
    ranges.sort_unstable();
    let mut next = 0u64;
    for (start, end, i) in ranges {
        if start != next {
            return Err(bad(format!(
                "tensor `{}`: data_offsets start at {start}, expected {next} (ranges must tile the data without gaps or overlaps)",
                tensors[i].name
            )));
        }
        next = end;
    }
    Ok(Header { tensors, data_len })
}

/// Reads the header of a local file, checking that the file is as long as the header says.
pub fn read_file(path: &Path) -> Result<Header> {
    let shown = path.display().to_string();
    let mut file = File::open(path).map_err(|e| IoError::new("open", path, e))?;
    let file_len = file
        .metadata()
        .map_err(|e| IoError::new("read", path, e))?
        .len();
    let mut prefix = [0u8; 9];
    let got = read_up_to(&mut file, &mut prefix).map_err(|e| IoError::new("read", path, e))?;
    let n = header_len(&prefix[..got], &shown)?;
    if file_len < 8 + n {
        return Err(EstimateError::TruncatedHeader {
            path: shown,
            need: n,
            have: file_len.saturating_sub(8),
        }
        .into());
    }
    let mut json = vec![0u8; n as usize];
    json[0] = prefix[8];
    file.read_exact(&mut json[1..])
        .map_err(|e| IoError::new("read", path, e))?;
    let header = parse_header(&json, &shown)?;
    if file_len < 8 + n + header.data_len {
        return Err(EstimateError::TruncatedData {
            path: shown,
            need: 8 + n + header.data_len,
            have: file_len,
        }
        .into());
    }
    Ok(header)
}

fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..])? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

/// The shard names of an index's `weight_map`, deduplicated while parsing: an index of a 36k-tensor
/// MoE is megabytes of JSON naming a hundred files.
struct WeightMap(Vec<String>);

impl<'de> serde::Deserialize<'de> for WeightMap {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = WeightMap;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of tensor names to shard files")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut shards: Vec<String> = Vec::new();
                let mut seen = std::collections::HashSet::new();
                while let Some((_, file)) =
                    map.next_entry::<serde::de::IgnoredAny, std::borrow::Cow<'de, str>>()?
                {
                    if !seen.contains(file.as_ref()) {
                        seen.insert(file.to_string());
                        shards.push(file.into_owned());
                    }
                }
                Ok(WeightMap(shards))
            }
        }
        d.deserialize_map(Visit)
    }
}

#[derive(serde::Deserialize)]
struct Index {
    weight_map: Option<WeightMap>,
}

/// The shard files a `*.index.json` names, in first-mention order.
pub fn parse_index(text: &str, path: &str) -> Result<Vec<String>, EstimateError> {
    let bad = |reason: String| EstimateError::BadIndex {
        path: path.into(),
        reason,
    };
    let index: Index = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let WeightMap(shards) = index
        .weight_map
        .ok_or_else(|| bad("no `weight_map` object".into()))?;
    // An empty map would size an empty model: a cut-short or hand-edited index, never a model.
    if shards.is_empty() {
        return Err(bad(
            "`weight_map` is empty: it names no tensor and no shard".into(),
        ));
    }
    for file in &shards {
        if file.starts_with('/') || file.split('/').any(|part| part == "..") {
            return Err(bad(format!(
                "shard name `{file}` points outside the directory"
            )));
        }
    }
    Ok(shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_length_rejects_other_formats() {
        // A zip (torch.save) starts with "PK\x03\x04".
        let zip = b"PK\x03\x04\x14\x00\x00\x00\x08\x00";
        assert!(matches!(
            header_len(zip, "x"),
            Err(EstimateError::NotSafetensors { .. })
        ));
        let mut ok = 20u64.to_le_bytes().to_vec();
        ok.push(b'{');
        assert_eq!(header_len(&ok, "x").unwrap_or(0), 20);
        let mut not_json = 20u64.to_le_bytes().to_vec();
        not_json.push(b'x');
        assert!(header_len(&not_json, "x").is_err());
    }

    #[test]
    fn parses_tensors_and_data_length() {
        let json = br#"{"__metadata__":{"format":"pt"},"a.weight":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},"b":{"dtype":"I64","shape":[],"data_offsets":[12,20]}}"#;
        let h = parse_header(json, "x").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(h.data_len, 20);
        assert_eq!(h.tensors.len(), 2);
        assert_eq!(h.tensors[0].numel, 6);
        assert_eq!(h.tensors[1].numel, 1);
        let bad = br#"{"a":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}}"#;
        assert!(parse_header(bad, "x").is_err());
    }

    #[test]
    fn offsets_are_validated_as_the_safetensors_crate_does() {
        // A shape of 10^12 elements cannot live in 16 bytes.
        let huge = br#"{"a":{"dtype":"F32","shape":[1000000,1000000],"data_offsets":[0,16]}}"#;
        let err = parse_header(huge, "x")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("data_offsets [0, 16]"), "{err}");
        let gap = br#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}}"#;
        assert!(parse_header(gap, "x").is_err());
        let overlap = br#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
        assert!(parse_header(overlap, "x").is_err());
        let overflow =
            br#"{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}"#;
        assert!(parse_header(overflow, "x").is_err());
        let ok = br#"{"b":{"dtype":"BOOL","shape":[3],"data_offsets":[8,11]},"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}}"#;
        assert!(parse_header(ok, "x").is_ok());
    }

    #[test]
    fn index_lists_unique_shards() {
        let text = r#"{"metadata":{},"weight_map":{"a":"s1.safetensors","b":"s2.safetensors","c":"s1.safetensors"}}"#;
        assert_eq!(
            parse_index(text, "i").unwrap_or_default(),
            ["s1.safetensors", "s2.safetensors"]
        );
        let escape = r#"{"weight_map":{"a":"../x.safetensors"}}"#;
        assert!(parse_index(escape, "i").is_err());
    }
}
