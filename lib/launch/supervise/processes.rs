//! The ranks as processes: each [`Running`] rank leads its own group, which is what is signalled;
//! reaping the ones that ended, stopping those started so far when a later one cannot start, the
//! ones SIGKILL does not end, and, at an attempt's end, everything its ranks left behind (their
//! groups, the orphans the launcher adopted, their guards and output readers).

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::attempt::{Stop, KILL_WAIT};
use super::guard::{self, Strays};
use super::options::{RankEnd, RankResult};
use super::output::Tail;
use super::unkillable;
use crate::launch::control;

/// How long the end of a run keeps killing what its ranks left before giving up on the unkillable.
const STRAY_LIMIT: Duration = Duration::from_secs(2);

/// How often the run's processes outside the ranks' groups are recorded for the guards.
pub(super) const STRAY_SCAN: Duration = Duration::from_millis(100);

/// A started rank.
pub(super) struct Running {
    pub(super) rank: u32,
    pub(super) local_rank: u32,
    pub(super) child: Child,
    pub(super) pgid: Pid,
    pub(super) guard: Option<Pid>,
    pub(super) status: Option<ExitStatus>,
    /// When its end was seen, for the failure report (torchrun's `time`).
    pub(super) ended_at: Option<std::time::SystemTime>,
    /// Ended by a signal after the run began stopping.
    pub(super) stopped: bool,
    pub(super) tail: Arc<Mutex<Tail>>,
    pub(super) readers: Vec<JoinHandle<()>>,
    pub(super) error_file: Option<PathBuf>,
}

impl Running {
    /// How it ended; one that never reported an end counts as exit status 1.
    pub(super) fn status_or_failure(&self) -> ExitStatus {
        self.status.unwrap_or_else(|| ExitStatus::from_raw(1 << 8))
    }
}

/// Collects the ranks that ended since the last pass: their index and status.
pub(super) fn reap(running: &mut [Running]) -> Vec<(usize, ExitStatus)> {
    let mut ended = Vec::new();
    for (i, r) in running.iter_mut().enumerate() {
        if r.status.is_some() {
            continue;
        }
        if let Ok(Some(st)) = r.child.try_wait() {
            r.status = Some(st);
            r.ended_at = Some(std::time::SystemTime::now());
            ended.push((i, st));
        }
    }
    ended
}

/// `sig` to the group of every rank still running.
pub(super) fn signal_groups(running: &[Running], sig: i32) {
    for r in running.iter().filter(|r| r.status.is_none()) {
        let _ = killpg(r.pgid, Signal::try_from(sig).ok());
    }
}

/// `sig` to the group of every rank, ended or not (what its children left behind).
fn signal_groups_all(running: &[Running], sig: i32) {
    for r in running {
        let _ = killpg(r.pgid, Signal::try_from(sig).ok());
    }
}

/// Records the run's processes outside the ranks' groups for the guards, at most every
/// [`STRAY_SCAN`].
pub(super) fn record_strays(
    running: &[Running],
    strays: &mut Strays,
    scanned: &mut Option<Instant>,
) {
    if scanned.is_none_or(|t| t.elapsed() >= STRAY_SCAN) {
        let groups: Vec<i32> = running.iter().map(|r| r.pgid.as_raw()).collect();
        strays.record(&guard::descendants(), &groups);
        *scanned = Some(Instant::now());
    }
}

/// The ranks still there after SIGKILL, each named on this node's stderr as /proc sees it.
pub(super) fn left_behind(
    running: &[Running],
    tool: &str,
    node: u32,
    host: &str,
) -> Vec<control::Unkillable> {
    let mut out = Vec::new();
    for r in running.iter().filter(|r| r.status.is_none()) {
        let u = unkillable::describe(node, host, r.rank, r.pgid.as_raw());
        let _ = writeln!(
            std::io::stderr(),
            "{tool}: {}; left behind {} s after SIGKILL",
            u.describe(),
            KILL_WAIT.as_secs()
        );
        out.push(u);
    }
    out
}

/// Stops the ranks started so far without a grace period to watch (a later rank failed to spawn),
/// and cleans up after them. A rank still there after [`KILL_WAIT`] is not waited for (the kernel
/// holds it).
pub(super) fn abandon(running: &mut [Running]) {
    stop_and_wait(running, Stop::kill());
    guard::reap_strays(STRAY_LIMIT);
    release(running);
}

fn stop_and_wait(running: &mut [Running], stop: Stop) {
    signal_groups_all(running, stop.signal);
    let until = Instant::now() + KILL_WAIT;
    loop {
        for r in running.iter_mut().filter(|r| r.status.is_none()) {
            r.status = r.child.try_wait().ok().flatten();
        }
        if running.iter().all(|r| r.status.is_some()) || Instant::now() >= until {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The attempt's end: the leaders are gone; whatever is left in their groups (grandchildren) goes
/// too, and so does every other process of the run the launcher adopted (double-forked daemons).
pub(super) fn clean_up(running: &mut [Running]) {
    signal_groups_all(running, libc::SIGKILL);
    guard::reap_strays(STRAY_LIMIT);
    release(running);
}

/// Ends each rank's guard and waits (briefly) for its output readers.
fn release(running: &mut [Running]) {
    for r in running.iter_mut() {
        if let Some(g) = r.guard.take() {
            let _ = nix::sys::signal::kill(g, Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(g, None);
        }
        // Readers end at EOF, which a grandchild that left the group could hold off: wait briefly.
        let until = Instant::now() + Duration::from_millis(500);
        for h in r.readers.drain(..) {
            while !h.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
    }
}

/// How every rank of the attempt ended.
pub(super) fn results(running: &[Running]) -> Vec<RankResult> {
    running
        .iter()
        .map(|r| RankResult {
            rank: r.rank,
            local_rank: r.local_rank,
            end: RankEnd {
                status: r.status_or_failure(),
                stopped: r.stopped,
            },
        })
        .collect()
}
