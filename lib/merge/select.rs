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
    let tops = top_keys(ckpt);
    let layout = Layout::choose(sel, &tops)?;
    let mut out = Selected {
        unwrapped: layout.unwrap.clone(),
        layout: layout.words.clone(),
        ..Default::default()
    };
    out.tensors = tensors(ckpt, sel, &layout, &mut out.excluded)?;
    out.skipped = ckpt
        .bytes_items
        .iter()
        .filter_map(|p| layout.output_name(sel, p))
        .collect();
    let mut blocked = Vec::new();
    for u in &ckpt.unwritable {
        let Some(name) = layout.output_name(sel, &u.path) else {
            continue;
        };
        if sel.excludes(&u.path.join("."), &name) {
            out.excluded.push(name);
        } else {
            blocked.push((name, u.dtype.clone()));
        }
    }
    if !blocked.is_empty() {
        return Err(MergeError::Unwritable(blocked));
    }
    out.left_out = layout.left_out(&tops);
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

/// The checkpoint's top-level keys (of tensors, non-tensor items and unwritable tensors alike), in
/// the order they first appear.
fn top_keys(ckpt: &Checkpoint) -> Vec<String> {
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
    tops
}

/// The tensors the selection takes, under their output names and dtypes; the names of those
/// --exclude-key leaves out go to `excluded`. Two tensors under one name are an error.
fn tensors(
    ckpt: &Checkpoint,
    sel: &Selection,
    layout: &Layout,
    excluded: &mut Vec<String>,
) -> Result<Vec<OutTensor>, MergeError> {
    let mut out = Vec::new();
    // Output name → the full dotted name it came from.
    let mut names: HashMap<String, String> = HashMap::new();
    for (i, e) in ckpt.entries.iter().enumerate() {
        let Some(name) = layout.output_name(sel, &e.path) else {
            continue;
        };
        let full = e.path.join(".");
        if sel.excludes(&full, &name) {
            excluded.push(name);
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
        out.push(OutTensor {
            name,
            entry: i,
            dtype: sel.out_dtype(e.dtype),
        });
    }
    Ok(out)
}

impl Selection {
    /// A name with every --strip-prefix it starts with removed, in order; never down to nothing.
    fn strip(&self, mut name: String) -> String {
        for p in &self.strip_prefix {
            if let Some(rest) = name.strip_prefix(p.as_str()) {
                if !rest.is_empty() {
                    name = rest.to_string();
                }
            }
        }
        name
    }

    /// Whether --exclude-key leaves out the tensor of full dotted name `full` and output `name`.
    fn excludes(&self, full: &str, name: &str) -> bool {
        self.exclude
            .iter()
            .any(|g| glob_match(g, full) || glob_match(g, name))
    }

    /// The output dtype of a tensor saved as `saved`: --dtype casts floating tensors only.
    fn out_dtype(&self, saved: DType) -> DType {
        match self.dtype {
            Some(d) if saved.is_float() => d,
            _ => saved,
        }
    }
}

/// Which part of the checkpoint is the model, chosen from the top-level keys.
#[derive(Debug, PartialEq)]
struct Layout {
    /// The top-level key whose subtree is taken, without the key in the names.
    unwrap: Option<String>,
    /// Training state beside model keys that were flattened to the top level (torchtitan).
    dropped: Vec<String>,
    /// How the model was picked, in words.
    words: String,
}

impl Layout {
    fn choose(sel: &Selection, tops: &[String]) -> Result<Layout, MergeError> {
        let has = |k: &str| tops.iter().any(|t| t == k);
        let training = |t: &&String| TRAINING_STATE_KEYS.contains(&t.as_str());
        let layout = |unwrap: Option<String>, words: String| Layout {
            unwrap,
            dropped: Vec::new(),
            words,
        };
        Ok(if sel.all_keys {
            layout(None, "every top-level key (--all-keys)".into())
        } else if let Some(k) = &sel.key {
            if !has(k) {
                return Err(MergeError::Selection(format!(
                    "the checkpoint has no top-level key `{k}`; it has: {}",
                    tops.join(", ")
                )));
            }
            layout(Some(k.clone()), format!("the top-level key `{k}` (--key)"))
        } else if tops.len() == 1 {
            let k = tops[0].clone();
            let l = format!("its only top-level key `{k}`");
            layout(Some(k), l)
        } else if has("model") {
            layout(
                Some("model".to_string()),
                "the top-level key `model` (the layout of accelerate and plain DCP saves)".into(),
            )
        } else if tops.iter().any(|t| training(&t)) && tops.iter().any(|t| !training(&t)) {
            let dropped: Vec<String> = tops.iter().filter(training).cloned().collect();
            let words = format!(
                "model keys at the top level beside training state (torchtitan's layout); leaving out {}",
                dropped.join(", ")
            );
            Layout {
                unwrap: None,
                dropped,
                words,
            }
        } else {
            layout(
                None,
                "every tensor, with full names (no `model` key and no training state)".into(),
            )
        })
    }

    /// The name a checkpoint path takes in the output before --strip-prefix, or `None` when the
    /// layout leaves it out.
    fn name_of(&self, path: &[String]) -> Option<String> {
        if path.first().is_some_and(|t| self.dropped.contains(t)) {
            return None;
        }
        match &self.unwrap {
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
    }

    /// The output name of a checkpoint path: the layout's, then --strip-prefix.
    fn output_name(&self, sel: &Selection, path: &[String]) -> Option<String> {
        self.name_of(path).map(|n| sel.strip(n))
    }

    /// The top-level keys the output leaves out, sorted.
    fn left_out(&self, tops: &[String]) -> Vec<String> {
        if let Some(k) = &self.unwrap {
            let left: BTreeSet<&String> = tops.iter().filter(|t| *t != k).collect();
            left.into_iter().cloned().collect()
        } else {
            let mut left = self.dropped.clone();
            left.sort();
            left
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::Entry;

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

    fn keys(k: &[&str]) -> Vec<String> {
        k.iter().map(|s| s.to_string()).collect()
    }

    fn path(p: &str) -> Vec<String> {
        p.split('.').map(str::to_owned).collect()
    }

    #[test]
    fn the_model_is_the_key_asked_for_the_only_key_or_model() {
        let sel = Selection::default();
        let l = Layout::choose(&sel, &keys(&["model", "optim"])).unwrap();
        assert_eq!(l.unwrap.as_deref(), Some("model"));
        assert_eq!(l.left_out(&keys(&["model", "optim"])), ["optim"]);
        let l = Layout::choose(&sel, &keys(&["net"])).unwrap();
        assert_eq!(l.unwrap.as_deref(), Some("net"));
        assert_eq!(l.words, "its only top-level key `net`");
        let key = Selection {
            key: Some("ema".into()),
            ..Default::default()
        };
        let tops = keys(&["model", "ema", "optim"]);
        let l = Layout::choose(&key, &tops).unwrap();
        assert_eq!(l.unwrap.as_deref(), Some("ema"));
        assert_eq!(l.left_out(&tops), ["model", "optim"]);
        let err = Layout::choose(&key, &keys(&["model", "optim"])).unwrap_err();
        assert!(
            matches!(&err, MergeError::Selection(m)
                if m == "the checkpoint has no top-level key `ema`; it has: model, optim"),
            "{err}"
        );
        let all = Selection {
            all_keys: true,
            ..Default::default()
        };
        let l = Layout::choose(&all, &keys(&["model", "optim"])).unwrap();
        assert_eq!((l.unwrap, l.dropped), (None, Vec::<String>::new()));
    }

    #[test]
    fn training_state_beside_flat_model_keys_is_left_out() {
        let tops = keys(&["tok_embeddings", "optimizer", "layers", "lr_scheduler"]);
        let l = Layout::choose(&Selection::default(), &tops).unwrap();
        assert_eq!(l.unwrap, None);
        assert_eq!(l.dropped, ["optimizer", "lr_scheduler"]);
        assert_eq!(l.left_out(&tops), ["lr_scheduler", "optimizer"]);
        assert_eq!(l.name_of(&path("optimizer.state.0")), None);
        assert_eq!(
            l.name_of(&path("layers.0.w")).as_deref(),
            Some("layers.0.w")
        );
        // Training state alone is no model to pick: everything, with full names.
        let l = Layout::choose(&Selection::default(), &keys(&["optim", "scheduler"])).unwrap();
        assert_eq!((l.unwrap, l.dropped), (None, Vec::<String>::new()));
    }

    #[test]
    fn an_unwrapped_key_leaves_its_names_and_drops_the_rest() {
        let l = Layout {
            unwrap: Some("model".into()),
            dropped: Vec::new(),
            words: String::new(),
        };
        assert_eq!(
            l.name_of(&path("model.0.weight")).as_deref(),
            Some("0.weight")
        );
        // A tensor saved as the key itself keeps the key as its name.
        assert_eq!(l.name_of(&path("model")).as_deref(), Some("model"));
        assert_eq!(l.name_of(&path("optim.state")), None);
    }

    #[test]
    fn prefixes_strip_in_order_but_never_to_nothing() {
        let sel = Selection {
            strip_prefix: vec!["_orig_mod.".into(), "module.".into()],
            ..Default::default()
        };
        assert_eq!(sel.strip("_orig_mod.module.w".into()), "w");
        assert_eq!(sel.strip("module._orig_mod.w".into()), "_orig_mod.w");
        assert_eq!(sel.strip("module.".into()), "module.");
        assert_eq!(sel.strip("w".into()), "w");
    }

    #[test]
    fn dtype_casts_floats_only_and_exclusion_sees_both_names() {
        let sel = Selection {
            dtype: Some(DType::BF16),
            exclude: vec!["optim.*".into(), "*.bias".into()],
            ..Default::default()
        };
        assert_eq!(sel.out_dtype(DType::F32), DType::BF16);
        assert_eq!(sel.out_dtype(DType::I64), DType::I64);
        assert_eq!(Selection::default().out_dtype(DType::F32), DType::F32);
        assert!(sel.excludes("optim.state.0", "state.0"));
        assert!(sel.excludes("model.0.bias", "0.bias"));
        assert!(!sel.excludes("model.0.weight", "0.weight"));
    }

    fn checkpoint(paths: &[&str]) -> Checkpoint {
        Checkpoint {
            kind: crate::merge::Kind::Dcp,
            dir: "ckpt".into(),
            inputs: Vec::new(),
            entries: paths
                .iter()
                .map(|p| Entry {
                    path: path(p),
                    dtype: DType::F32,
                    shape: vec![1],
                    tile_shape: vec![1],
                    pieces: Vec::new(),
                })
                .collect(),
            bytes_items: Vec::new(),
            notes: Vec::new(),
            crcs: Vec::new(),
            unwritable: Vec::new(),
            files: Vec::new(),
        }
    }

    #[test]
    fn two_tensors_under_one_output_name_are_refused() {
        let ckpt = checkpoint(&["model.module.w", "model.w"]);
        let sel = Selection {
            strip_prefix: vec!["module.".into()],
            ..Default::default()
        };
        let err = select(&ckpt, &sel).unwrap_err();
        assert!(matches!(err, MergeError::Selection(_)), "{err}");
        assert!(
            err.to_string()
                .contains("named `w` (`model.module.w` and `model.w`)"),
            "{err}"
        );
        let err = select(&checkpoint(&["model.w", "model.w"]), &Selection::default()).unwrap_err();
        assert!(matches!(err, MergeError::Invalid { .. }), "{err}");
        let ok = select(&checkpoint(&["model.w", "model.b"]), &Selection::default()).unwrap();
        let names: Vec<&str> = ok.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["w", "b"]);
    }
}
