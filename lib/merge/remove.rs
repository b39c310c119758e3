//! `--remove_checkpoint_dir`: deleting the checkpoint after its merge, and nothing else. A directory
//! given to the merge may hold more than the checkpoint it reads (accelerate's save_state directory
//! with a second model, optimizer state and RNG state; a DeepSpeed save directory with other tags; a
//! user's notes), so the removal is planned before anything is written: every file below the
//! directory must be one of the checkpoint's own files, compared by identity (device and inode, a
//! link by its target), or the merge is refused with the list of what else is there. After the
//! merge only those files are unlinked (each only if the path still names the file planned), then
//! the directories they leave empty.

use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A file's identity: device and inode.
type Id = (u64, u64);

fn id(m: &std::fs::Metadata) -> Id {
    (m.dev(), m.ino())
}

/// What the removal deletes, in order: files, then directories (deepest first).
#[derive(Debug)]
pub struct Plan {
    files: Vec<(PathBuf, Id)>,
    dirs: Vec<PathBuf>,
    /// The directory given, if it is a link to the directory walked (removed last).
    link: Option<PathBuf>,
}

/// Why the directory cannot be removed as asked.
#[derive(Debug, PartialEq)]
pub struct Refusal {
    /// What the merge does not read, relative to the directory: `name/` (with its file count) for
    /// a directory, `name` for a file.
    pub others: Vec<String>,
}

/// Plans the removal of `dir`, whose checkpoint consists of `files`.
pub fn plan(dir: &Path, files: &[PathBuf]) -> std::io::Result<Result<Plan, Refusal>> {
    let consumed: HashSet<Id> = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| id(&m))
        .collect();
    let link = std::fs::symlink_metadata(dir)?
        .file_type()
        .is_symlink()
        .then(|| dir.to_path_buf());
    let root = std::fs::canonicalize(dir)?;
    let mut plan = Plan {
        files: Vec::new(),
        dirs: Vec::new(),
        link,
    };
    // Top-level entry name → number of files below it the merge does not read.
    let mut others: BTreeMap<String, (bool, usize)> = BTreeMap::new();
    walk(&root, &root, &consumed, &mut plan, &mut others)?;
    if !others.is_empty() {
        return Ok(Err(Refusal {
            others: others
                .into_iter()
                .map(|(name, (is_dir, n))| match (is_dir, n) {
                    (false, _) => format!("`{name}`"),
                    (true, 1) => format!("`{name}/` (1 file)"),
                    (true, n) => format!("`{name}/` ({n} files)"),
                })
                .collect(),
        }));
    }
    plan.dirs.push(root);
    Ok(Ok(plan))
}

fn walk(
    root: &Path,
    dir: &Path,
    consumed: &HashSet<Id>,
    plan: &mut Plan,
    others: &mut BTreeMap<String, (bool, usize)>,
) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let meta = std::fs::symlink_metadata(&path)?;
        let top = || {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            let first = rel.components().next().map(|c| c.as_os_str());
            (
                first
                    .unwrap_or(rel.as_os_str())
                    .to_string_lossy()
                    .into_owned(),
                rel.components().count() > 1,
            )
        };
        if meta.is_dir() {
            walk(root, &path, consumed, plan, others)?;
            plan.dirs.push(path);
            continue;
        }
        // A link counts as the file it points to (and only the link is ever removed).
        let target = if meta.file_type().is_symlink() {
            std::fs::metadata(&path).ok()
        } else {
            Some(meta.clone())
        };
        if target.is_some_and(|t| consumed.contains(&id(&t))) {
            plan.files.push((path, id(&meta)));
        } else {
            let (name, below) = top();
            let o = others.entry(name).or_insert((below, 0));
            o.0 |= below;
            o.1 += 1;
        }
    }
    Ok(())
}

impl Plan {
    /// Deletes what was planned. A path that no longer names the planned file (replaced during the
    /// merge) and a directory that is no longer empty are kept; each is returned with the reason.
    pub fn execute(&self) -> std::io::Result<Vec<String>> {
        let mut kept = Vec::new();
        for (path, planned) in &self.files {
            match std::fs::symlink_metadata(path) {
                Ok(m) if id(&m) == *planned => std::fs::remove_file(path)?,
                Ok(_) => kept.push(format!(
                    "kept `{}`: it was replaced during the merge",
                    path.display()
                )),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        for d in &self.dirs {
            match std::fs::remove_dir(d) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty => kept.push(format!(
                    "kept `{}`: files appeared in it during the merge",
                    d.display()
                )),
                Err(e) => return Err(e),
            }
        }
        if let Some(link) = &self.link {
            if kept.is_empty() {
                std::fs::remove_file(link)?;
            }
        }
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_checkpoint_files_are_planned_and_the_rest_is_named() {
        let d = tempfile::tempdir().unwrap();
        let ck = d.path().join("ck");
        std::fs::create_dir_all(ck.join("model")).unwrap();
        std::fs::create_dir_all(ck.join("other/deep")).unwrap();
        for f in [
            "model/.metadata",
            "model/__0_0.distcp",
            "other/a",
            "other/deep/b",
            "notes.txt",
        ] {
            std::fs::write(ck.join(f), f).unwrap();
        }
        let files = vec![ck.join("model/.metadata"), ck.join("model/__0_0.distcp")];
        let r = plan(&ck, &files).unwrap().unwrap_err();
        assert_eq!(r.others, ["`notes.txt`", "`other/` (2 files)"]);
        std::fs::remove_dir_all(ck.join("other")).unwrap();
        std::fs::remove_file(ck.join("notes.txt")).unwrap();
        // A link to a checkpoint file counts as that file; only the link is removed.
        let outside = d.path().join("shard");
        std::fs::write(&outside, b"x").unwrap();
        std::os::unix::fs::symlink(&outside, ck.join("model/__1_0.distcp")).unwrap();
        let mut files = files;
        files.push(outside.clone());
        let p = plan(&ck, &files).unwrap().unwrap();
        assert_eq!(p.execute().unwrap(), Vec::<String>::new());
        assert!(!ck.exists() && outside.exists());
    }

    #[test]
    fn a_file_replaced_or_added_during_the_merge_is_kept() {
        let d = tempfile::tempdir().unwrap();
        let ck = d.path().join("ck");
        std::fs::create_dir_all(&ck).unwrap();
        std::fs::write(ck.join("a"), b"a").unwrap();
        std::fs::write(ck.join("b"), b"b").unwrap();
        let p = plan(&ck, &[ck.join("a"), ck.join("b")]).unwrap().unwrap();
        // `b` rewritten through a rename (a new inode), `c` new.
        std::fs::write(ck.join("b.new"), b"B").unwrap();
        std::fs::rename(ck.join("b.new"), ck.join("b")).unwrap();
        std::fs::write(ck.join("c"), b"c").unwrap();
        let kept = p.execute().unwrap();
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert!(!ck.join("a").exists());
        assert_eq!(std::fs::read(ck.join("b")).unwrap(), b"B");
        assert!(ck.join("c").exists());
    }
}
