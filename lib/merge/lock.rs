//! The output directory's lock: one merge at a time writes into a directory. Two merges into one
//! directory at once both pass the check for files already there, then rename their files in beside
//! each other's (shards of one and a single file of the other, which a loader takes first), or, with
//! --force, one moves the other's freshly reported output away. So a merge holds this lock from
//! before that check until its files are renamed into place and its staging directory is gone.
//!
//! The lock is an open-file-description lock (`fcntl(F_OFD_SETLK)`) on `.accel-merge.lock` in the
//! output directory: the kernel releases it when its holder ends, however it ends (SIGKILL, a
//! crash), so a lock that is free proves that no merge is writing there, on this host or, over NFS
//! (where fcntl locks go to the server), on another, whatever pid namespace it runs in. Unlike
//! classic `F_SETLK` locks, no other `close` of the file in this process drops it. The file holds
//! its holder's pid, host name and pid namespace, for the message of a merge refused; the holder
//! removes it before it lets go of the lock.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::MergeError;

/// The lock file's name in the output directory.
pub const LOCK_NAME: &str = ".accel-merge.lock";

/// The lock, held until dropped.
#[derive(Debug)]
pub struct OutputLock {
    file: File,
    path: PathBuf,
}

/// Who holds a lock, as its holder wrote it into the lock file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    pub host: String,
    /// The holder's pid namespace (`/proc/self/ns/pid`), to say when its pid is not one of ours.
    pub pidns: String,
}

impl Holder {
    fn ours() -> Holder {
        Holder {
            pid: std::process::id(),
            host: crate::host::hostname(),
            pidns: pid_namespace(),
        }
    }
    fn line(&self) -> String {
        format!("{} {} {}\n", self.pid, self.host, self.pidns)
    }
    fn parse(text: &str) -> Option<Holder> {
        let mut w = text.split_whitespace();
        Some(Holder {
            pid: w.next()?.parse().ok()?,
            host: w.next()?.to_owned(),
            pidns: w.next().unwrap_or_default().to_owned(),
        })
    }
    /// `process N on HOST`, and whether N is a pid of another pid namespace of this host (a
    /// container), where it names another process or none.
    pub fn describe(&self) -> String {
        let mut s = format!("process {} on {}", self.pid, self.host);
        let here = Holder::ours();
        if self.host == here.host && !self.pidns.is_empty() && self.pidns != here.pidns {
            s.push_str(", in another pid namespace");
        }
        s
    }
}

fn pid_namespace() -> String {
    std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// How often [`OutputLock::take`] opens the lock file again after finding that the one it locked
/// was removed by the holder before it (each time, another merge took the lock and let it go).
const REOPENS: usize = 16;

impl OutputLock {
    /// Takes the lock of `out_dir` (which exists), or says which merge holds it.
    pub fn take(out_dir: &Path) -> Result<OutputLock, MergeError> {
        let path = out_dir.join(LOCK_NAME);
        for _ in 0..REOPENS {
            let file = File::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
                .open(&path)
                .map_err(|e| MergeError::io("create", &path, e))?;
            if !try_lock(&file).map_err(|e| MergeError::io("lock", &path, e))? {
                let mut text = String::new();
                let _ = std::io::Read::read_to_string(&mut &file, &mut text);
                return Err(MergeError::Locked {
                    dir: out_dir.to_path_buf(),
                    lock: path,
                    holder: Holder::parse(&text),
                });
            }
            // The holder before us removes the file before it lets go: a lock taken on a file that
            // no longer has this name guards nothing, and the next merge would make a new one.
            if !still_named(&file, &path) {
                continue;
            }
            // Only for the message of a merge refused: on a full disk the lock holds without it.
            let _ = file
                .set_len(0)
                .and_then(|()| (&file).write_all(Holder::ours().line().as_bytes()));
            return Ok(OutputLock { file, path });
        }
        Err(MergeError::io(
            "lock",
            &path,
            std::io::Error::other("the lock file kept being replaced by other merges"),
        ))
    }
}

impl Drop for OutputLock {
    /// Removes the lock file, then (closing it) lets go of the lock: a merge that opened the file
    /// meanwhile finds it no longer named and opens the path again.
    fn drop(&mut self) {
        if still_named(&self.file, &self.path) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Whether `path` still names the file `file` is open on.
fn still_named(file: &File, path: &Path) -> bool {
    match (file.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// An exclusive lock on the whole of `file` if no one else holds one: `Ok(false)` if someone does.
fn try_lock(file: &File) -> std::io::Result<bool> {
    let lock = |cmd: libc::c_int| {
        // SAFETY: a zeroed flock is a valid "whole file from offset 0"; l_pid must be 0 for OFD locks.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        // SAFETY: fcntl on a descriptor `file` owns, with a valid flock.
        if unsafe { libc::fcntl(file.as_raw_fd(), cmd, &fl) } == 0 {
            Ok(true)
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    let r = match lock(libc::F_OFD_SETLK) {
        // Kernels before 3.15 have no OFD locks: a process-wide one does here, as this process
        // opens the file once.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => lock(libc::F_SETLK),
        r => r,
    };
    match r {
        Ok(_) => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_is_refused_with_the_holder_and_the_file_goes_with_the_lock() {
        let d = tempfile::tempdir().unwrap();
        let held = OutputLock::take(d.path()).unwrap();
        let lock = d.path().join(LOCK_NAME);
        let text = std::fs::read_to_string(&lock).unwrap();
        assert_eq!(Holder::parse(&text), Some(Holder::ours()));
        match OutputLock::take(d.path()) {
            Err(MergeError::Locked {
                dir,
                lock: l,
                holder,
            }) => {
                assert_eq!((dir.as_path(), l.as_path()), (d.path(), lock.as_path()));
                let h = holder.unwrap();
                assert_eq!(
                    h.describe(),
                    format!("process {} on {}", std::process::id(), h.host)
                );
            }
            other => panic!("{other:?}"),
        }
        drop(held);
        assert!(!lock.exists());
        let again = OutputLock::take(d.path()).unwrap();
        drop(again);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_lock_file_left_by_a_killed_merge_is_taken() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(LOCK_NAME), "7 elsewhere pid:[1]\n").unwrap();
        let held = OutputLock::take(d.path()).unwrap();
        let text = std::fs::read_to_string(d.path().join(LOCK_NAME)).unwrap();
        assert_eq!(Holder::parse(&text), Some(Holder::ours()));
        drop(held);
    }

    #[test]
    fn a_holder_in_another_pid_namespace_of_this_host_is_said_to_be() {
        let mut h = Holder::ours();
        h.pidns = "pid:[1]".into();
        assert!(h.describe().ends_with(", in another pid namespace"));
        h.host = "elsewhere".into();
        assert_eq!(h.describe(), format!("process {} on elsewhere", h.pid));
    }
}
