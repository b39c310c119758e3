//! Which tensors go into the output and under what names. A checkpoint saved as `{"model": …,
//! "optim": …}` (or by accelerate as `{"model": …}`) is usually wanted as the model's own state dict, so
//! the model subtree is taken and its top-level key dropped, as `accelerate merge-weights` does for a
//! single key; other subtrees, prefixes and dtypes are chosen on the command line.

use std::collections::{BTreeSet, HashSet};

use super::tensor::DType;
use super::{Checkpoint, MergeError};

#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Take this top-level key's subtree (and drop the key from names).
    pub key: Option<String>,
    /// Keep everything, with full names.
    pub all_keys: bool,
    /// Prefixes removed from names that start with them.
    pub strip_prefix: Vec<String>,
    /// Cast floating tensors to this dtype; `None` keeps each tensor's own.
    pub dtype: Option<DType>,
}

#[derive(Debug, Clone)]
pub struct OutTensor {
    pub name: String,
    pub entry: usize,
    pub dtype: DType,
}

#[derive(Debug, Default)]
pub struct Selected {
    pub tensors: Vec<OutTensor>,
    /// Non-tensor items inside the selection, skipped.
    pub skipped: Vec<String>,
    /// The top-level key that was unwrapped, if any.
    pub unwrapped: Option<String>,
    /// Top-level keys left out.
    pub left_out: Vec<String>,
}

pub fn select(ckpt: &Checkpoint, sel: &Selection) -> Result<Selected, MergeError> {
    let paths = ckpt
        .entries
        .iter()
        .map(|e| &e.path)
        .chain(ckpt.bytes_items.iter());
    let mut tops: Vec<String> = Vec::new();
    let mut seen = HashSet::new();
    for p in paths {
        if let Some(t) = p.first() {
            if seen.insert(t.clone()) {
                tops.push(t.clone());
            }
        }
    }
    let unwrap: Option<String> = if sel.all_keys {
        None
    } else if let Some(k) = &sel.key {
        if !seen.contains(k) {
            return Err(MergeError::Selection(format!(
                "the checkpoint has no top-level key `{k}`; it has: {}",
                tops.join(", ")
            )));
        }
        Some(k.clone())
    } else if tops.len() == 1 {
        tops.first().cloned()
    } else if seen.contains("model") {
        Some("model".to_string())
    } else {
        None
    };
    let name_of = |path: &[String]| -> Option<String> {
        match &unwrap {
            Some(k) if path.first() == Some(k) => {
                if path.len() == 1 {
                    Some(k.clone())
                } else {
                    Some(path[1..].join("."))
                }
            }
            Some(_) => None,
            None => Some(path.join(".")),
        }
    };
    let strip = |mut name: String| -> String {
        for p in &sel.strip_prefix {
            if let Some(rest) = name.strip_prefix(p.as_str()) {
                if !rest.is_empty() {
                    name = rest.to_string();
                }
            }
        }
        name
    };
    let mut out = Selected {
        unwrapped: unwrap.clone(),
        ..Default::default()
    };
    let mut names = HashSet::new();
    for (i, e) in ckpt.entries.iter().enumerate() {
        let Some(name) = name_of(&e.path).map(strip) else {
            continue;
        };
        if !names.insert(name.clone()) {
            return Err(MergeError::Selection(format!(
                "two tensors would both be named `{name}`; choose a --key or another --strip-prefix"
            )));
        }
        let dtype = match sel.dtype {
            Some(d) if e.dtype.is_float() => d,
            _ => e.dtype,
        };
        out.tensors.push(OutTensor {
            name,
            entry: i,
            dtype,
        });
    }
    for p in &ckpt.bytes_items {
        if let Some(name) = name_of(p) {
            out.skipped.push(strip(name));
        }
    }
    if let Some(k) = &unwrap {
        let left: BTreeSet<&String> = tops.iter().filter(|t| *t != k).collect();
        out.left_out = left.into_iter().cloned().collect();
    }
    if out.tensors.is_empty() {
        return Err(MergeError::Selection(format!(
            "no tensors selected (top-level keys: {})",
            tops.join(", ")
        )));
    }
    Ok(out)
}
