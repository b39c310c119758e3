//! Whether a path names a file or a directory, as the merge asks it of what it reads and where it
//! writes. `Path::exists`, `is_file` and `is_dir` answer "no" to every error of the `stat`: a symlink
//! loop (ELOOP) or a directory that cannot be searched (EACCES) then read as "missing", and the
//! merge said "No such file or directory", "File exists" or "not a checkpoint" for a name that is
//! there but cannot be followed. Here only ENOENT and ENOTDIR mean absent; any other error is the
//! answer, said with the path it is about.

use std::fs::Metadata;
use std::path::Path;

use super::MergeError;

/// What `path` names (following symlinks), `None` where nothing is there.
pub fn stat(path: &Path) -> Result<Option<Metadata>, MergeError> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if absent(&e) => Ok(None),
        Err(e) => Err(MergeError::io("read", path, e)),
    }
}

/// Whether `path` is a regular file (or a symlink to one).
pub fn is_file(path: &Path) -> Result<bool, MergeError> {
    Ok(stat(path)?.is_some_and(|m| m.is_file()))
}

/// Whether `path` is a directory (or a symlink to one).
pub fn is_dir(path: &Path) -> Result<bool, MergeError> {
    Ok(stat(path)?.is_some_and(|m| m.is_dir()))
}

/// Whether an error of a `stat` says only that nothing is there: no such name, or a name on the way
/// that is a file.
fn absent(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

/// Why `mkdir path` failed: it says EEXIST for a name taken by what is no directory, a symlink loop
/// and a dangling symlink among them, where the `stat` of the name says which (ELOOP, ENOENT).
pub fn mkdir_error(path: &Path, e: std::io::Error) -> std::io::Error {
    if e.kind() != std::io::ErrorKind::AlreadyExists {
        return e;
    }
    std::fs::metadata(path).err().unwrap_or(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_loop_is_an_error_and_a_missing_name_is_absent() {
        let d = tempfile::tempdir().unwrap();
        let lp = d.path().join("loop");
        std::os::unix::fs::symlink("loop", &lp).unwrap();
        let e = stat(&lp.join(".metadata")).unwrap_err();
        assert!(
            matches!(&e, MergeError::Io { source, .. } if source.raw_os_error() == Some(libc::ELOOP)),
            "{e:?}"
        );
        assert!(is_dir(&lp).is_err());
        assert!(!is_file(&d.path().join("none")).unwrap());
        std::fs::write(d.path().join("f"), "x").unwrap();
        // A name under a file: ENOTDIR, nothing there.
        assert!(!is_dir(&d.path().join("f").join("g")).unwrap());
        assert!(is_file(&d.path().join("f")).unwrap());
        let made = std::fs::create_dir(&lp).unwrap_err();
        assert_eq!(mkdir_error(&lp, made).raw_os_error(), Some(libc::ELOOP));
    }
}
