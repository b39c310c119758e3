//! Checkpoint files as the merge reads them: mapped read-only, and watched. A checkpoint can be
//! rewritten while it is merged: torch's `FileSystemWriter` reopens its shards with `"wb"`, so a save
//! into the same directory truncates them in place. Reading a mapped page past the new end raises
//! SIGBUS, and bytes changed after the CRC-32 check would be copied unchecked. So a SIGBUS on a
//! mapped input is caught (the page is replaced by zeros and the file marked), and each input's
//! identity (device, inode, size, modification time) is compared with what it was when
//! opened after every pass that reads it: a fault or a change is an error naming the file, and the
//! staged output is removed, so no output is made of bytes that did not pass the check.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use memmap2::Mmap;

use super::MergeError;

/// A mapped input file.
pub struct Input {
    pub path: PathBuf,
    pub file: File,
    /// `None` for an empty file (which cannot be mapped).
    pub map: Option<Mmap>,
    /// What the file was when opened.
    stat: Stat,
    /// The mapping's entry in the SIGBUS handler's list.
    guard: Option<&'static Guard>,
}

/// The parts of a file's status that a rewrite changes: a write or truncation sets the modification
/// time; a rename over the path gives another inode. (Not the change time: a hard link, `chmod` or
/// a backup tool's `cp -al` also sets it, and none of them changes a byte. A writer that rewrites a
/// file in place and then sets its old modification time back is not seen.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
}

impl Stat {
    fn of(m: &std::fs::Metadata) -> Stat {
        Stat {
            dev: m.dev(),
            ino: m.ino(),
            size: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
        }
    }
    fn mtime(&self) -> SystemTime {
        let (s, ns) = self.mtime;
        match u64::try_from(s) {
            Ok(s) => UNIX_EPOCH + Duration::new(s, ns.clamp(0, 999_999_999) as u32),
            Err(_) => UNIX_EPOCH,
        }
    }
}

/// How long after a file's last change its timestamps are trusted to tell a later change apart:
/// the kernel stamps files from a clock that advances once per tick (1–10 ms), so a change within
/// the tick of the previous one can carry the same times.
const SETTLE: Duration = Duration::from_millis(50);

/// Opens and maps one input file.
pub fn open(path: &Path) -> Result<Input, MergeError> {
    open_with(path, true)
}

/// Opens and maps a file this process has just written (for reading it back): no wait for its
/// times to settle, since nothing else writes it.
pub fn open_written(path: &Path) -> Result<Input, MergeError> {
    open_with(path, false)
}

fn open_with(path: &Path, settle: bool) -> Result<Input, MergeError> {
    let file = File::open(path).map_err(|e| MergeError::io("open", path, e))?;
    let stat_of = |f: &File| {
        f.metadata()
            .map(|m| Stat::of(&m))
            .map_err(|e| MergeError::io("stat", path, e))
    };
    let mut stat = stat_of(&file)?;
    // A file changed moments ago (still being written, or just copied): wait until a further
    // change would show in its times, and make sure none came meanwhile.
    let since = SystemTime::now()
        .duration_since(stat.mtime())
        .unwrap_or(Duration::ZERO);
    if settle && since < SETTLE {
        std::thread::sleep(SETTLE - since);
        let now = stat_of(&file)?;
        if now != stat {
            return Err(changed(path, &stat, &now, "it is being written"));
        }
        stat = now;
    }
    let (map, guard) = if stat.size == 0 {
        (None, None)
    } else {
        // SAFETY: a read-only shared mapping. The file may be truncated or rewritten by another
        // process while mapped: a read past its new end raises SIGBUS, which the handler installed
        // by `watch` turns into a zero page and a mark on this input, checked after every pass
        // (`Input::check`); a changed byte is caught by the status comparison there.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| MergeError::io("map", path, e))?;
        let guard = watch(map.as_ptr() as usize, map.len(), path, stat);
        (Some(map), Some(guard))
    };
    Ok(Input {
        path: path.to_path_buf(),
        file,
        map,
        stat,
        guard,
    })
}

fn changed(path: &Path, was: &Stat, now: &Stat, how: &str) -> MergeError {
    let what = if now.ino != was.ino || now.dev != was.dev {
        format!("{how}: another file now has its name")
    } else if now.size != was.size {
        format!("{how}: it had {} bytes and now has {}", was.size, now.size)
    } else {
        format!("{how}: its contents were written to")
    };
    MergeError::Changed {
        path: path.to_path_buf(),
        what,
    }
}

impl Input {
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
    /// Tells the kernel we are done with `range` of the mapping, so it stops counting as our memory.
    pub(crate) fn release(&self, start: usize, end: usize) {
        let Some(map) = &self.map else { return };
        // Whole pages around the range: neighbours that are still needed simply fault back in.
        let page = 4096;
        let lo = (start / page) * page;
        let hi = end.min(map.len());
        if hi > lo {
            // SAFETY: the mapping is a read-only shared file mapping; dropping its pages only makes a
            // later access fault them back in from the page cache with the same contents.
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, lo, hi - lo)
            };
        }
    }
    /// Whether the file is still what it was when opened: no read of its mapping faulted, and its
    /// status (through the open descriptor, and by name) is unchanged.
    pub fn check(&self) -> Result<(), MergeError> {
        if self
            .guard
            .is_some_and(|g| g.faulted.load(Ordering::Acquire))
        {
            let now = self.file.metadata().map(|m| m.len()).unwrap_or(0);
            return Err(MergeError::Changed {
                path: self.path.clone(),
                what: format!(
                    "it was truncated while it was read: it had {} bytes and now has {now}",
                    self.stat.size
                ),
            });
        }
        let now = self
            .file
            .metadata()
            .map_err(|e| MergeError::io("stat", &self.path, e))?;
        let now = Stat::of(&now);
        if now != self.stat {
            return Err(changed(
                &self.path,
                &self.stat,
                &now,
                "it changed while it was merged",
            ));
        }
        Ok(())
    }
}

/// The first input that changed since it was opened, as an error.
pub fn check_all(inputs: &[Input]) -> Result<(), MergeError> {
    inputs.iter().try_for_each(Input::check)
}

/// An error met while reading or copying, or the reason behind it: an input file of this process
/// that faulted or changed since it was opened (a zero page read from a truncated file can make a
/// header unreadable or a copy end early; the change is what the user needs to hear about).
pub fn explain(e: MergeError) -> MergeError {
    let mut p = GUARDS.load(Ordering::Acquire);
    while !p.is_null() {
        // SAFETY: list entries are leaked boxes, never freed.
        let g = unsafe { &*p };
        if g.faulted.load(Ordering::Acquire) {
            let now = std::fs::metadata(&g.path).map(|m| m.len()).unwrap_or(0);
            return MergeError::Changed {
                path: g.path.clone(),
                what: format!(
                    "it was truncated while it was read: it had {} bytes and now has {now}",
                    g.stat.size
                ),
            };
        }
        if let Ok(m) = std::fs::metadata(&g.path) {
            let now = Stat::of(&m);
            if now != g.stat {
                return changed(&g.path, &g.stat, &now, "it changed while it was merged");
            }
        }
        p = g.next.load(Ordering::Acquire);
    }
    e
}

impl Drop for Input {
    fn drop(&mut self) {
        // The range is unmapped next and may be reused: faults there are no longer this file's.
        if let Some(g) = self.guard {
            g.len.store(0, Ordering::Release);
        }
    }
}

// ---- SIGBUS on a mapped input ----

/// One mapped range, in a list the signal handler walks without locks or allocation.
struct Guard {
    start: AtomicUsize,
    len: AtomicUsize,
    faulted: AtomicBool,
    next: AtomicPtr<Guard>,
    /// The file, for [`explain`] (never touched by the handler).
    path: PathBuf,
    stat: Stat,
}

static GUARDS: AtomicPtr<Guard> = AtomicPtr::new(ptr::null_mut());
static PAGE: AtomicUsize = AtomicUsize::new(4096);
/// The SIGBUS disposition found when the handler was installed, called for faults not ours.
static PREVIOUS: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static PREVIOUS_FLAGS: AtomicUsize = AtomicUsize::new(0);

/// Adds a mapped range to the handler's list (installing the handler once). Entries live for the
/// process: one per input file of one merge.
fn watch(start: usize, len: usize, path: &Path, stat: Stat) -> &'static Guard {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(install);
    let g: &'static Guard = Box::leak(Box::new(Guard {
        start: AtomicUsize::new(start),
        len: AtomicUsize::new(len),
        faulted: AtomicBool::new(false),
        next: AtomicPtr::new(ptr::null_mut()),
        path: path.to_path_buf(),
        stat,
    }));
    let mut head = GUARDS.load(Ordering::Acquire);
    loop {
        g.next.store(head, Ordering::Release);
        match GUARDS.compare_exchange(
            head,
            g as *const Guard as *mut Guard,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return g,
            Err(h) => head = h,
        }
    }
}

fn install() {
    // SAFETY: sysconf and sigaction with plain, fully initialised arguments.
    unsafe {
        let page = libc::sysconf(libc::_SC_PAGESIZE);
        if page > 0 {
            PAGE.store(page as usize, Ordering::Relaxed);
        }
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigbus as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut sa.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, &sa, &mut old) == 0 {
            PREVIOUS.store(old.sa_sigaction, Ordering::Relaxed);
            PREVIOUS_FLAGS.store(old.sa_flags as usize, Ordering::Relaxed);
        }
    }
}

/// Async-signal-safe: atomics, `mmap` and `sigaction` only.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = PAGE.load(Ordering::Relaxed);
    let mut p = GUARDS.load(Ordering::Acquire);
    while !p.is_null() {
        // SAFETY: list entries are leaked boxes, never freed.
        let g = unsafe { &*p };
        let (start, len) = (
            g.start.load(Ordering::Acquire),
            g.len.load(Ordering::Acquire),
        );
        if addr >= start && addr < start + len {
            // The page past the file's new end becomes a private zero page: the read completes,
            // and the mark makes the pass that read it fail.
            // SAFETY: replaces one page of our own read-only file mapping in place (MAP_FIXED).
            let r = unsafe {
                libc::mmap(
                    (addr & !(page - 1)) as *mut libc::c_void,
                    page,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if r != libc::MAP_FAILED {
                g.faulted.store(true, Ordering::Release);
                return;
            }
            break;
        }
        p = g.next.load(Ordering::Acquire);
    }
    // Not a mapped input: what was there before (Rust's stack-overflow handler, or the default,
    // restored so that the faulting access, run again, ends the process as SIGBUS does).
    let previous = PREVIOUS.load(Ordering::Relaxed);
    let flags = PREVIOUS_FLAGS.load(Ordering::Relaxed) as libc::c_int;
    // SAFETY: `previous` is the handler the kernel reported, called the way it was installed.
    unsafe {
        if previous == libc::SIG_DFL || previous == libc::SIG_IGN {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGBUS, &sa, ptr::null_mut());
        } else if flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(previous);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(previous);
            f(sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_truncated_under_its_mapping_is_reported_not_fatal() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("shard");
        std::fs::write(&p, vec![7u8; 3 * 4096]).unwrap();
        let input = open(&p).unwrap();
        input.check().unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(4096)
            .unwrap();
        // Past the new end: SIGBUS without the handler.
        let b = input.bytes();
        let v = std::hint::black_box(b[2 * 4096 + 5]);
        assert_eq!(v, 0);
        assert_eq!(b[10], 7);
        let e = input.check().unwrap_err().to_string();
        assert!(e.contains("truncated while it was read"), "{e}");
        assert!(e.contains("12288 bytes and now has 4096"), "{e}");
    }

    #[test]
    fn a_rewrite_of_the_same_size_is_a_change() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("shard");
        std::fs::write(&p, b"abcdef").unwrap();
        let input = open(&p).unwrap();
        std::fs::write(&p, b"abcdeX").unwrap();
        let e = input.check().unwrap_err().to_string();
        assert!(e.contains("changed while it was merged"), "{e}");
    }
}
