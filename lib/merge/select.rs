//! Which tensors go into the output and under what names. A checkpoint saved as `{"model": …,
//! "optim": …}` (or by accelerate as `{"model": …}`) is usually wanted as the model's own state dict, so
//! the model subtree is taken and its top-level key dropped, as `accelerate merge-weights` does for a
//! single key; other subtrees, prefixes and dtypes are chosen on the command line.

use std::collections::{BTreeSet, HashMap, HashSet};

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
    /// Leave out tensors whose full dotted name (or output name) matches one of these globs.
    pub exclude: Vec<String>,
}

/// Top-level keys under which trainers save training state next to the model: torchtitan
/// (torchtitan/components/checkpoint.py: `optimizer`, `lr_scheduler`, `dataloader`, `train_state`),
/// accelerate and plain DCP scripts (`optim`, `optimizer`, `scheduler`, `rng_state`, `scaler`).
const TRAINING_STATE_KEYS: &[&str] = &[
    "optimizer",
    "optimizers",
    "optim",
    "optimizer_state",
    "lr_scheduler",
    "lr_schedulers",
    "scheduler",
    "dataloader",
    "train_state",
    "rng_state",
    "rng",
    "scaler",
];

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
    /// How the model was picked, in words.
    pub layout: String,
    /// Names of tensors left out by --exclude-key.
    pub excluded: Vec<String>,
}

/// `*` matches any run of characters (dots included), `?` one character.
pub fn glob_match(pat: &str, s: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pat.chars().collect(), s.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

pub fn select(ckpt: &Checkpoint, sel: &Selection) -> Result<Selected, MergeError> {
    let paths = ckpt
        .entries
        .iter()
        .map(|e| &e.path)
        .chain(ckpt.bytes_items.iter())
        .chain(ckpt.unwritable.iter().map(|u| &u.path));
    let mut tops: Vec<String> = Vec::new();
    let mut seen = HashSet::new();
    for p in paths {
        if let Some(t) = p.first() {
            if seen.insert(t.clone()) {
                tops.push(t.clone());
            }
        }
    }
    // Training state beside model keys that were flattened to the top level (torchtitan).
    let mut dropped: Vec<String> = Vec::new();
    let (unwrap, layout): (Option<String>, String) = if sel.all_keys {
        (None, "every top-level key (--all-keys)".into())
    } else if let Some(k) = &sel.key {
        if !seen.contains(k) {
            return Err(MergeError::Selection(format!(
                "the checkpoint has no top-level key `{k}`; it has: {}",
                tops.join(", ")
            )));
        }
        (Some(k.clone()), format!("the top-level key `{k}` (--key)"))
    } else if tops.len() == 1 {
        let k = tops[0].clone();
        let l = format!("its only top-level key `{k}`");
        (Some(k), l)
    } else if seen.contains("model") {
        (
            Some("model".to_string()),
            "the top-level key `model` (the layout of accelerate and plain DCP saves)".into(),
        )
    } else if tops
        .iter()
        .any(|t| TRAINING_STATE_KEYS.contains(&t.as_str()))
        && tops
            .iter()
            .any(|t| !TRAINING_STATE_KEYS.contains(&t.as_str()))
    {
        dropped = tops
            .iter()
            .filter(|t| TRAINING_STATE_KEYS.contains(&t.as_str()))
            .cloned()
            .collect();
        (
            None,
            format!(
                "model keys at the top level beside training state (torchtitan's layout); leaving out {}",
                dropped.join(", ")
            ),
        )
    } else {
        (
            None,
            "every tensor, with full names (no `model` key and no training state)".into(),
        )
    };
    let name_of = |path: &[String]| -> Option<String> {
        if path.first().is_some_and(|t| dropped.contains(t)) {
            return None;
        }
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
        layout,
        ..Default::default()
    };
    let excluded = |full: &str, name: &str| {
        sel.exclude
            .iter()
            .any(|g| glob_match(g, full) || glob_match(g, name))
    };
    // Output name → the full dotted name it came from.
    let mut names: HashMap<String, String> = HashMap::new();
    for (i, e) in ckpt.entries.iter().enumerate() {
        let Some(name) = name_of(&e.path).map(strip) else {
            continue;
        };
        let full = e.path.join(".");
        if excluded(&full, &name) {
            out.excluded.push(name);
            continue;
        }
        if let Some(first) = names.insert(name.clone(), full.clone()) {
            if first == full {
                // Not a naming choice: the checkpoint itself lists the tensor twice.
                return Err(MergeError::Invalid {
                    path: ckpt.dir.clone(),
                    message: format!("the checkpoint has two tensors named `{full}`"),
                });
            }
            return Err(MergeError::Selection(format!(
                "two tensors would both be named `{name}` (`{first}` and `{full}`); choose a --key or another --strip-prefix"
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
    let mut blocked = Vec::new();
    for u in &ckpt.unwritable {
        let Some(name) = name_of(&u.path).map(strip) else {
            continue;
        };
        if excluded(&u.path.join("."), &name) {
            out.excluded.push(name);
        } else {
            blocked.push((name, u.dtype.clone()));
        }
    }
    if !blocked.is_empty() {
        return Err(MergeError::Unwritable(blocked));
    }
    if let Some(k) = &unwrap {
        let left: BTreeSet<&String> = tops.iter().filter(|t| *t != k).collect();
        out.left_out = left.into_iter().cloned().collect();
    } else {
        out.left_out = dropped.clone();
        out.left_out.sort();
    }
    if out.tensors.is_empty() {
        return Err(MergeError::Selection(format!(
            "no tensors selected (top-level keys: {}{})",
            tops.join(", "),
            if out.excluded.is_empty() {
                String::new()
            } else {
                format!("; --exclude-key left out {}", out.excluded.len())
            }
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match("optimizer.*", "optimizer.state.0.exp_avg"));
        assert!(glob_match("*.exp_avg*", "optimizer.state.0.exp_avg_sq"));
        assert!(glob_match("layers.?.w", "layers.3.w"));
        assert!(!glob_match("layers.?.w", "layers.13.w"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("a*b", "acbd"));
        assert!(glob_match("a*b*", "acbd"));
    }
}
