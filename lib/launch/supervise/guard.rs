//! Making sure nothing a run started outlives it, even processes that left the ranks' groups.
//!
//! - The launcher is a child subreaper (`PR_SET_CHILD_SUBREAPER`, as systemd and tini use it): a daemon
//!   a rank double-forks into a session of its own is re-parented to the launcher instead of init, so
//!   [`descendants`] finds it, and the run's end kills and reaps it ([`reap_strays`]).
//! - A SIGKILLed launcher can do nothing: a small guard process per rank ([`spawn_guard`]) takes the
//!   rank's group down, and every process the launcher last saw outside the ranks' groups
//!   ([`Strays`], a table in memory shared with the guards), after the grace period.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

/// Most pids the guards can be told about.
const STRAY_SLOTS: usize = 4096;

/// Makes the launcher adopt its ranks' orphaned descendants; `false` turns it off again.
pub(super) fn set_subreaper(on: bool) {
    // SAFETY: a plain prctl on this process.
    unsafe {
        libc::prctl(
            libc::PR_SET_CHILD_SUBREAPER,
            libc::c_ulong::from(on),
            0,
            0,
            0,
        );
    }
}

/// Parent, state, process group and session of every process, from /proc.
fn process_table() -> HashMap<i32, (i32, u8, i32, i32)> {
    let mut table = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return table;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) S ppid …`: comm may hold spaces and parentheses, the last `)` ends it.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let mut f = rest.split_ascii_whitespace();
        let state = f.next().and_then(|s| s.bytes().next()).unwrap_or(b'?');
        let ppid = f.next().and_then(|p| p.parse::<i32>().ok());
        let pgrp = f.next().and_then(|p| p.parse::<i32>().ok());
        let sid = f.next().and_then(|p| p.parse::<i32>().ok());
        if let (Some(ppid), Some(pgrp), Some(sid)) = (ppid, pgrp, sid) {
            table.insert(pid, (ppid, state, pgrp, sid));
        }
    }
    table
}

/// A process below the launcher.
#[derive(Debug, Clone, Copy)]
pub(super) struct Descendant {
    pub pid: i32,
    pub state: u8,
    pub pgrp: i32,
    pub ppid: i32,
}

/// Every process of the run below the launcher: its children in sessions other than the launcher's
/// (each rank leads a session, and whatever descends from a rank can only keep that session or start
/// another, never join the launcher's), and all below them. The launcher's own-session children — the
/// guards, or processes other threads of the calling tool started — are not the run's.
pub(super) fn descendants() -> Vec<Descendant> {
    let table = process_table();
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (pid, (ppid, _, _, _)) in &table {
        children.entry(*ppid).or_default().push(*pid);
    }
    let me = std::process::id() as i32;
    // SAFETY: a plain syscall.
    let my_sid = unsafe { libc::getsid(0) };
    let mut out = Vec::new();
    let mut todo = vec![me];
    while let Some(p) = todo.pop() {
        for c in children.get(&p).into_iter().flatten() {
            let (ppid, state, pgrp, sid) = table[c];
            if p != me || sid != my_sid {
                out.push(Descendant {
                    pid: *c,
                    state,
                    pgrp,
                    ppid,
                });
                todo.push(*c);
            }
        }
    }
    out
}

/// Kills every process of the run still alive below the launcher, and reaps the ones it adopted,
/// until none is left (or `limit` has passed: something unkillable is not waited for forever).
pub(super) fn reap_strays(limit: Duration) {
    let me = std::process::id() as i32;
    let until = Instant::now() + limit;
    loop {
        let left = descendants();
        for d in &left {
            if d.state != b'Z' {
                let _ = kill(Pid::from_raw(d.pid), Signal::SIGKILL);
            }
            if d.ppid == me {
                let _ = waitpid(Pid::from_raw(d.pid), Some(WaitPidFlag::WNOHANG));
            }
        }
        if left.is_empty() || Instant::now() >= until {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The pids of the run's processes as the launcher last saw them, in memory the guards share.
pub(super) struct Strays {
    slots: *mut AtomicI32,
    used: usize,
}

impl Strays {
    /// Must be made before the guards are forked: they inherit the mapping.
    pub(super) fn new() -> Option<Strays> {
        let len = (STRAY_SLOTS + 1) * std::mem::size_of::<AtomicI32>();
        // SAFETY: an anonymous shared mapping, zero-filled by the kernel.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        Some(Strays {
            slots: p.cast(),
            used: 0,
        })
    }

    fn slot(&self, i: usize) -> &AtomicI32 {
        // SAFETY: i < STRAY_SLOTS, inside the mapping.
        unsafe { &*self.slots.add(i) }
    }

    /// Records the descendants outside the ranks' groups (zombies left out): the guards kill the
    /// groups themselves.
    pub(super) fn record(&mut self, found: &[Descendant], groups: &[i32]) {
        let mut n = 0;
        for d in found {
            if d.state != b'Z' && !groups.contains(&d.pgrp) && n < STRAY_SLOTS {
                self.slot(n).store(d.pid, Ordering::Relaxed);
                n += 1;
            }
        }
        for i in n..self.used {
            self.slot(i).store(0, Ordering::Relaxed);
        }
        self.used = n;
    }

    fn raw(&self) -> *const AtomicI32 {
        self.slots
    }
}

impl Drop for Strays {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`.
        unsafe {
            libc::munmap(
                self.slots.cast(),
                (STRAY_SLOTS + 1) * std::mem::size_of::<AtomicI32>(),
            );
        }
    }
}

/// Whether this guard is the one (of all the run's guards) that stops the strays, so that a daemon
/// gets one SIGTERM, not one per rank. Async-signal-safe.
fn claim_strays(table: *const AtomicI32) -> bool {
    if table.is_null() {
        return false;
    }
    // SAFETY: the slot after the pids, inside the inherited mapping.
    let claim = unsafe { &*table.add(STRAY_SLOTS) };
    claim
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
}

/// Signals every recorded pid. Async-signal-safe.
fn signal_strays(table: *const AtomicI32, sig: i32) {
    for i in 0..STRAY_SLOTS {
        // SAFETY: inside the inherited mapping.
        let pid = unsafe { &*table.add(i) }.load(Ordering::Relaxed);
        if pid > 1 {
            // SAFETY: a plain syscall.
            unsafe { libc::kill(pid, sig) };
        }
    }
}

/// Forks a guard that outlives a SIGKILLed launcher long enough to take the rank's group down: on the
/// launcher's death it sends SIGTERM to the recorded strays (the rank got SIGTERM from its own
/// PDEATHSIG), waits for the rank to end, at most the grace period, then SIGKILLs the group and the
/// strays. The launcher kills the guard when the run ends.
pub(super) fn spawn_guard(rank: Pid, grace: Duration, strays: Option<&Strays>) -> Option<Pid> {
    let launcher = nix::unistd::getpid().as_raw();
    let pgid = rank.as_raw();
    let grace_ms = grace.as_millis().min(u64::MAX as u128) as u64;
    let shared = strays.map_or(std::ptr::null(), Strays::raw);
    // Built before the fork: the child may not allocate.
    let stat_path = std::ffi::CString::new(format!("/proc/{pgid}/stat")).ok();
    // SAFETY: the child only makes async-signal-safe calls and ends with _exit.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return None;
        }
        if pid > 0 {
            return Some(Pid::from_raw(pid));
        }
        close_inherited_fds();
        libc::setpgid(0, 0);
        for s in [
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGHUP,
            libc::SIGTSTP,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGPIPE,
        ] {
            libc::signal(s, libc::SIG_IGN);
        }
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGTERM as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::getppid() == launcher {
            let mut sig: libc::c_int = 0;
            while libc::sigwait(&set, &mut sig) != 0 {}
        }
        // The launcher is gone.
        let strays = claim_strays(shared);
        if strays {
            signal_strays(shared, libc::SIGTERM);
        }
        let mut waited: u64 = 0;
        while waited < grace_ms && leader_running(stat_path.as_ref()) {
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 20_000_000,
            };
            libc::nanosleep(&ts, std::ptr::null_mut());
            waited += 20;
        }
        libc::killpg(pgid, libc::SIGKILL);
        if strays {
            signal_strays(shared, libc::SIGKILL);
        }
        libc::_exit(0);
    }
}

/// Closes every descriptor above stderr in a guard just forked. A fork copies all of the launcher's
/// descriptors, close-on-exec or not (no exec follows): a guard would hold the launcher's
/// control-plane connection open after a SIGKILL, so node 0 would learn of the death only when the
/// heartbeats stop, not when the connection closes, and likewise the ranks' pipes and listening
/// sockets. Async-signal-safe (close_range, else close).
unsafe fn close_inherited_fds() {
    // SAFETY: plain syscalls; the guard uses no descriptor above 2 from here on.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) == 0 {
            return;
        }
        // Kernels before 5.9: every descriptor up to the limit (capped: a huge hard limit would make
        // the guard spin for a long time).
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 {
            r.rlim_cur.min(1 << 20) as libc::c_int
        } else {
            1024
        };
        for fd in 3..max {
            libc::close(fd);
        }
    }
}

/// Whether the rank (group leader) still runs: its /proc entry exists and is not a zombie, which an
/// adopting init that does not reap would leave behind. Async-signal-safe (open/read/close only).
fn leader_running(stat_path: Option<&std::ffi::CString>) -> bool {
    let Some(path) = stat_path else { return false };
    // SAFETY: plain syscalls on a stack buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
        if fd < 0 {
            return false;
        }
        let mut buf = [0u8; 512];
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        if n <= 0 {
            return false;
        }
        let data = &buf[..n as usize];
        match data.iter().rposition(|b| *b == b')') {
            Some(i) => data
                .get(i + 2)
                .is_some_and(|state| *state != b'Z' && *state != b'X'),
            None => false,
        }
    }
}
