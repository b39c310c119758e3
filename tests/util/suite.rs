//! What one suite run shares across its test processes (nextest runs each test in its own process):
//! one SLURM cluster, the checkpoints and other fixtures that take a minute to make, and the ports
//! and network-namespace names that tests running side by side must not both take. The run is the
//! test processes' parent (the nextest runner, or cargo for `cargo test`); its directory is removed
//! by the first test of a later run once that parent has ended.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// The suite run's process: this test process's parent.
pub fn runner() -> u32 {
    std::os::unix::process::parent_id()
}

/// The directory this suite run shares between its test processes (`/tmp/accel-suite-PID`).
pub fn dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let tmp = std::env::temp_dir();
        // Runs that have ended leave theirs; the first test of a later run removes them.
        if let Ok(entries) = std::fs::read_dir(&tmp) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(pid) = name
                    .strip_prefix("accel-suite-")
                    .and_then(|p| p.parse::<i32>().ok())
                {
                    if !crate::util::alive(pid) {
                        let _ = std::fs::remove_dir_all(e.path());
                    }
                }
            }
        }
        let d = tmp.join(format!("accel-suite-{}", runner()));
        std::fs::create_dir_all(&d).expect("create the suite run's directory");
        d
    })
}

/// An exclusive lock on `path` (created if need be), held until the returned file is dropped or
/// the process ends, whichever is first.
pub fn lock(path: &Path) -> File {
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open lock {}: {e}", path.display()));
    // SAFETY: flock on a descriptor this function owns.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock {}", path.display());
    f
}

/// The lock on `path` if no other process holds it now.
pub fn try_lock(path: &Path) -> Option<File> {
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .ok()?;
    // SAFETY: flock on a descriptor this function owns.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    (rc == 0).then_some(f)
}

/// A fixture made once per suite run, whichever test process asks first: `make(dir)` fills `dir`
/// (`SUITE/name`); the others wait on the lock and reuse it. A `make` that panics leaves no marker,
/// so the next asker tries again (and fails with its own message).
pub fn fixture(name: &str, make: impl FnOnce(&Path)) -> PathBuf {
    let d = dir().join(name);
    let _held = lock(&dir().join(format!("{name}.lock")));
    let done = dir().join(format!("{name}.done"));
    if !done.exists() {
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        make(&d);
        std::fs::write(&done, b"").unwrap();
    }
    d
}

/// Locks held for the rest of this process (reserved ports, network namespace slots).
pub fn keep(f: File) {
    static HELD: Mutex<Vec<File>> = Mutex::new(Vec::new());
    HELD.lock().unwrap_or_else(|e| e.into_inner()).push(f);
}

/// A slot among `n` reserved machine-wide for this process under `kind` (`/tmp/accel-slots/KIND.I`):
/// no two live test processes hold the same one, and a dead process's slot is free again.
pub fn slot(kind: &str, n: u32, start: u32) -> u32 {
    let d = std::env::temp_dir().join("accel-slots");
    std::fs::create_dir_all(&d).unwrap();
    for k in 0..n {
        let i = (start + k) % n;
        if let Some(f) = try_lock(&d.join(format!("{kind}.{i}"))) {
            keep(f);
            return i;
        }
    }
    panic!("all {n} {kind} slots are taken by other test processes")
}
