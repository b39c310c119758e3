//! Hang detection for `--hang_timeout`: the supervisor ticks a [`Watch`] with its live ranks, and the
//! watch says when no rank has made progress for the timeout. Progress is judged from outside, with
//! no code in the training script. A rank is *still* while nothing observable about it changes:
//!
//! - its Python execution: every rank's stacks are sampled with `py-spy dump --locals` from the start
//!   of the run, in the background, every [`Schedule::period`] (a third of the timeout, 2–30 s), but
//!   only for a rank whose usage (below) did not move since its stacks were last due; what
//!   is compared is the digest of [`autopsy::parse_dump`]: the thread set, and each frame with its
//!   local variables, so a loop's step counter or batch moves even where the line does not. A rank
//!   whose stacks came out the same twice, or whose dump failed, is sampled again every
//!   [`Schedule::recheck`] (a tenth of the timeout, at least 1 s) until they change or the timeout
//!   passes, so a loop whose locals only cycle among a few values is not judged from three samples;
//! - its I/O (its process and every live descendant): `rchar`/`wchar` (bytes through read/write
//!   calls that returned), `read_bytes`/`write_bytes` (pages read from and dirtied for storage, which
//!   move during one long `write` or `fsync`), and the TCP bytes received and acknowledged on its
//!   sockets ([`super::sockets`]: data streamed with `recv()`, a `send` draining to a slow peer);
//! - its process tree: a rank or a child of one appearing or ending.
//!
//! CPU time alone is not progress for a rank whose stacks can be read: a rank spinning in one C call
//! (a regex, `cudaStreamSynchronize`, a busy-polling collective) uses a whole core with one
//! unchanging stack. But so does an in-place compute loop with no counter (`torch.mm(a, b, out=c)`),
//! whose memory contents do not change either. What tells them apart is where the CPU time goes:
//! a rank whose stacks came out the same while it was busy gets a native look once the run has been
//! still for a while, and CPU time in a compute kernel
//! ([`autopsy::computing`]: MKL, BLAS, oneDNN, ATen's CPU operators) is progress. Where py-spy cannot
//! read a rank at all (not installed, not a Python process, not allowed, or its last two dumps
//! failed) its CPU time counts, at [`BUSY_FRACTION`] of a core.
//!
//! The decision ([`Judge`]) is pure; [`Watch`] holds the sampling rule and asks a [`Probe`] for the
//! observations, so the unit tests run the real rule on a scripted probe.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::autopsy::{self, RankStack, Sampled};
use super::sockets;

/// CPU use, as a fraction of one core over a sampling interval, that counts as computing for a rank
/// whose stacks cannot be read.
pub const BUSY_FRACTION: f64 = 0.05;

/// The bound of one rank's dump in the single-node autopsy and `--stacks`.
pub const AUTOPSY_DUMP: Duration = Duration::from_secs(10);

/// How long before the timeout the spinning ranks get their native look (for a timeout of 45 s or
/// more; a third of it for less): room for [`autopsy::NATIVE_LIMIT`].
const NATIVE_LEAD: Duration = Duration::from_secs(15);

/// How long the verdict waits for a native look under way (its samplers are bounded by
/// [`autopsy::NATIVE_LIMIT`]).
const NATIVE_WAIT: Duration = Duration::from_secs(14);

/// The bound of one rank's dump while sampling: a dump of a live rank takes tens of milliseconds,
/// but seconds on a machine saturated by ranks starting up; one that takes longer is dropped.
pub const SAMPLE_DUMP: Duration = Duration::from_secs(8);

/// A rank's cumulative resource use (its process and live descendants).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// utime+stime+cutime+cstime, in clock ticks.
    pub cpu_ticks: u64,
    /// rchar, wchar, read_bytes, write_bytes of /proc/<pid>/io.
    pub io: [u64; 4],
    /// bytes_received + bytes_acked of the TCP sockets the processes hold.
    pub tcp_bytes: u64,
    /// How many processes (the rank and its descendants).
    pub procs: u32,
    /// Sectors written so far to the block devices its threads wait to flush ([`flushing_sectors`]).
    pub flushed: u64,
}

impl Usage {
    /// Something other than CPU time moved between two readings.
    fn moved_since(&self, before: &Usage) -> bool {
        self.io != before.io
            || self.tcp_bytes != before.tcp_bytes
            || self.procs != before.procs
            || self.flushed != before.flushed
    }
}

#[derive(Debug, Default)]
struct Seen {
    usage: Option<Usage>,
    /// The last digest of its stacks.
    digest: Option<u64>,
    /// A dump of it ever succeeded.
    ever_read: bool,
    /// Its dumps that failed since the last that succeeded. One failure now and then (a loaded
    /// machine) changes nothing; from two in a row its stacks count as unreadable.
    failed_in_a_row: u32,
    /// Its last two stacks were the same.
    same: bool,
    /// It used at least [`BUSY_FRACTION`] of a core over the last usage interval.
    busy: bool,
}

/// Decides, from successive observations, when the run last made progress.
#[derive(Debug)]
pub struct Judge {
    timeout: Duration,
    /// Clock ticks that count as busy per sampling interval.
    busy_ticks: u64,
    last_progress: Instant,
    seen: HashMap<i32, Seen>,
}

impl Judge {
    pub fn new(timeout: Duration, interval: Duration, ticks_per_sec: u64, now: Instant) -> Judge {
        let busy = (interval.as_secs_f64() * ticks_per_sec as f64 * BUSY_FRACTION).ceil() as u64;
        Judge {
            timeout,
            busy_ticks: busy.max(1),
            last_progress: now,
            seen: HashMap::new(),
        }
    }

    /// Records one reading of every live rank's usage; returns the ranks that made progress since
    /// the last one (a rank that appeared or ended counts as a change of the run), each with whether
    /// its usage other than CPU moved.
    pub fn observe(&mut self, now: Instant, obs: &[(i32, Option<Usage>)]) -> Vec<(i32, bool)> {
        let mut moved = Vec::new();
        let before = self.seen.len();
        self.seen.retain(|pid, _| obs.iter().any(|o| o.0 == *pid));
        let ended = self.seen.len() != before;
        for &(pid, usage) in obs {
            let new = !self.seen.contains_key(&pid);
            let s = self.seen.entry(pid).or_default();
            let mut progress = new;
            let mut by_usage = false;
            if let (Some(a), Some(b)) = (s.usage, usage) {
                let cpu = b.cpu_ticks.saturating_sub(a.cpu_ticks);
                s.busy = cpu >= self.busy_ticks;
                if b.moved_since(&a) {
                    log::debug!("hang watch: pid {pid} moved: {a:?} -> {b:?}");
                    progress = true;
                    by_usage = true;
                } else if cpu >= self.busy_ticks && (!s.ever_read || s.failed_in_a_row >= 2) {
                    log::debug!("hang watch: pid {pid} computes ({cpu} ticks) and its stacks cannot be read");
                    progress = true;
                }
            }
            if usage.is_some() {
                s.usage = usage;
            }
            if progress {
                moved.push((pid, by_usage));
            }
        }
        if ended || !moved.is_empty() {
            self.last_progress = self.last_progress.max(now);
        }
        moved
    }

    /// Records a rank's stacks taken at `at` (`None`: the dump failed, which tells nothing). Returns
    /// whether they differ from the last ones (`None`: nothing to compare).
    pub fn observe_stack(&mut self, at: Instant, pid: i32, digest: Option<u64>) -> Option<bool> {
        let s = self.seen.get_mut(&pid)?;
        let Some(d) = digest else {
            s.failed_in_a_row += 1;
            return None;
        };
        s.ever_read = true;
        s.failed_in_a_row = 0;
        // A first digest is a baseline, not a change.
        let before = s.digest.replace(d);
        let changed = before.is_some_and(|before| before != d);
        s.same = before == Some(d);
        if changed {
            log::debug!("hang watch: pid {pid}: its stacks changed");
            self.last_progress = self.last_progress.max(at);
        }
        Some(changed)
    }

    /// The ranks that look like a spinning hang: readable stacks, the same twice, while their CPU
    /// moves. Only these are worth a native look ([`autopsy::computing`]).
    pub fn spinning(&self) -> Vec<i32> {
        let mut v: Vec<i32> = self
            .seen
            .iter()
            .filter(|(_, s)| s.same && s.busy && s.ever_read && s.failed_in_a_row < 2)
            .map(|(pid, _)| *pid)
            .collect();
        v.sort_unstable();
        v
    }

    /// A rank whose stacks stay the same was found computing in a CPU kernel at `at`: progress.
    pub fn computed(&mut self, at: Instant, pid: i32) {
        if self.seen.contains_key(&pid) {
            log::debug!("hang watch: pid {pid} computes in a CPU kernel");
            self.last_progress = self.last_progress.max(at);
        }
    }

    /// How long the run has been still.
    pub fn quiet(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.last_progress)
    }

    /// When the run last made progress.
    pub fn last_progress(&self) -> Instant {
        self.last_progress
    }

    pub fn hung(&self, now: Instant) -> bool {
        self.quiet(now) >= self.timeout
    }
}

/// A live rank as the supervisor knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Live {
    pub rank: u32,
    pub node: u32,
    pub pid: i32,
}

/// Where the watch's observations come from: /proc and py-spy ([`ProcProbe`]), or a script in tests.
pub trait Probe {
    /// Each rank's usage (its process and live descendants); `None` once a rank is gone.
    fn usages(&mut self, pids: &[i32]) -> Vec<Option<Usage>>;
    /// Whether stacks can be sampled at all (py-spy was found).
    fn can_sample(&self) -> bool;
    /// Starts taking these ranks' stacks, in the background, each dump bounded by `per_dump`
    /// (sampling: with the frames' local variables). One batch of each kind at a time.
    fn start(&mut self, kind: Kind, ranks: &[Live], per_dump: Duration);
    /// The started batch's stacks, once every dump of it has ended.
    fn poll(&mut self, kind: Kind) -> Option<Vec<Sampled>>;
    /// Starts taking these ranks' native samples, in the background ([`autopsy::native_samples`]):
    /// one batch at a time.
    fn start_native(&mut self, pids: &[i32]);
    /// The started native batch's answer, once it has ended: for each rank, whether it computes in
    /// a CPU kernel ([`autopsy::computing`]).
    fn poll_native(&mut self) -> Option<Vec<(i32, bool)>>;
}

/// What a batch of dumps is for: they run side by side, so that an autopsy never waits for a
/// sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Sample,
    Autopsy,
}

/// The sampling rule's periods, from the timeout.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// How often usage is read: a few /proc reads per rank and one sock_diag dump.
    pub interval: Duration,
    /// How often each rank's stacks are taken.
    pub period: Duration,
    /// How often a rank whose stacks came out the same twice is sampled again.
    pub recheck: Duration,
}

impl Schedule {
    pub fn of(timeout: Duration) -> Schedule {
        let period = (timeout / 3).clamp(Duration::from_secs(2), Duration::from_secs(30));
        Schedule {
            interval: (timeout / 10).clamp(Duration::from_millis(200), Duration::from_secs(2)),
            period,
            recheck: (timeout / 10).clamp(Duration::from_secs(1), period),
        }
    }
}

/// What the watch decided on a tick.
#[derive(Debug)]
pub enum Decision {
    /// No rank made progress for this long: the autopsy, taken before anything was stopped.
    Hang {
        quiet: Duration,
        stacks: Vec<RankStack>,
    },
}

/// The autopsy: every rank's stacks, for the verdict.
#[derive(Debug)]
enum Autopsy {
    None,
    /// Asked for, with this bound per dump.
    Wanted(Duration),
    Running,
    Done(Vec<RankStack>),
}

/// The supervisor's hang watcher: ticked from its monitor loop, never blocking it (dumps run in the
/// background).
pub struct Watch<P: Probe = ProcProbe> {
    judge: Judge,
    probe: P,
    schedule: Schedule,
    next_usage: Instant,
    /// When each rank's stacks are next due.
    due: HashMap<i32, Instant>,
    /// A sampling batch in flight, started then.
    sampling: Option<Instant>,
    autopsy: Autopsy,
    /// Each rank's last readable stacks, and when they were taken.
    latest: HashMap<i32, (Instant, RankStack)>,
    /// Ranks whose usage moved since their stacks were last due: they are progressing, and their
    /// stacks are not taken (a rank in collectives over TCP, or writing, costs no dump).
    moving: std::collections::HashSet<i32>,
    /// How long the run must have been still before its spinning ranks get a native look.
    native_at: Duration,
    /// A native batch in flight, started then.
    native: Option<Instant>,
    /// When the last native batch started: one per stillness, unless it found progress.
    native_started: Option<Instant>,
}

impl Watch<ProcProbe> {
    pub fn new(timeout: Duration, py_spy: Option<PathBuf>, now: Instant) -> Self {
        Watch::with_probe(timeout, ProcProbe::new(py_spy), now)
    }
}

impl<P: Probe> Watch<P> {
    pub fn with_probe(timeout: Duration, probe: P, now: Instant) -> Self {
        let schedule = Schedule::of(timeout);
        // SAFETY: sysconf has no preconditions.
        let tps = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        Watch {
            judge: Judge::new(timeout, schedule.interval, tps, now),
            probe,
            schedule,
            next_usage: now,
            due: HashMap::new(),
            sampling: None,
            autopsy: Autopsy::None,
            latest: HashMap::new(),
            moving: std::collections::HashSet::new(),
            native_at: (timeout / 3).max(timeout.saturating_sub(NATIVE_LEAD)),
            native: None,
            native_started: None,
        }
    }

    /// One node: samples what is due; returns the decision once the run is hung and every rank's
    /// stacks are in (taken in the background: the caller goes on reaping and forwarding signals).
    pub fn tick(&mut self, now: Instant, live: &[Live]) -> Option<Decision> {
        self.sample(now, live);
        // A native look under way may yet find a rank computing: the verdict waits for it, within
        // its bound.
        let looking = self
            .native
            .is_some_and(|t| now.saturating_duration_since(t) < NATIVE_WAIT);
        if self.judge.hung(now) && !looking {
            self.request_autopsy(live, AUTOPSY_DUMP);
            self.advance(now, live);
        }
        let stacks = self.autopsy_ready()?;
        Some(Decision::Hang {
            quiet: self.judge.quiet(now),
            stacks,
        })
    }

    /// Samples what is due. On a usage round returns how long these ranks have been still (`None`
    /// between rounds). On many nodes this is all a node judges; the world's hang is node 0's to
    /// declare ([`super::verdict`]).
    pub fn sample(&mut self, now: Instant, live: &[Live]) -> Option<Duration> {
        self.advance(now, live);
        if now < self.next_usage {
            return None;
        }
        self.next_usage = now + self.schedule.interval;
        let pids: Vec<i32> = live.iter().map(|l| l.pid).collect();
        let usages = self.probe.usages(&pids);
        let obs: Vec<(i32, Option<Usage>)> = pids.into_iter().zip(usages).collect();
        let moved = self.judge.observe(now, &obs);
        self.moving
            .extend(moved.into_iter().filter(|m| m.1).map(|m| m.0));
        Some(self.judge.quiet(now))
    }

    /// Asks for every live rank's stacks (node 0's autopsy on many nodes; the hang's on one): they
    /// come from [`Watch::autopsy_ready`]. When every rank's stacks were sampled since the run last
    /// made progress they are its stacks now, and are the answer at once, with each process's state
    /// read again; otherwise they are taken afresh in the background, and sampling pauses meanwhile.
    pub fn request_autopsy(&mut self, live: &[Live], per_dump: Duration) {
        if !matches!(self.autopsy, Autopsy::None) {
            return;
        }
        let since = self.judge.last_progress();
        let fresh: Option<Vec<RankStack>> = live
            .iter()
            .map(|l| {
                let (at, stack) = self.latest.get(&l.pid)?;
                (*at >= since && stack.rank == l.rank).then(|| RankStack {
                    state: autopsy::proc_state(l.pid),
                    ..stack.clone()
                })
            })
            .collect();
        self.autopsy = match fresh {
            Some(stacks) if !live.is_empty() => Autopsy::Done(stacks),
            _ => Autopsy::Wanted(per_dump),
        };
    }

    /// The asked-for stacks, once taken; sampling resumes after.
    pub fn autopsy_ready(&mut self) -> Option<Vec<RankStack>> {
        match std::mem::replace(&mut self.autopsy, Autopsy::None) {
            Autopsy::Done(stacks) => Some(stacks),
            other => {
                self.autopsy = other;
                None
            }
        }
    }

    /// How long the run has been still.
    pub fn quiet(&self, now: Instant) -> Duration {
        self.judge.quiet(now)
    }

    /// Collects the batches that have ended, and starts the next ones when due.
    fn advance(&mut self, now: Instant, live: &[Live]) {
        self.look_natively(now, live);
        if let Some(at) = self.sampling {
            if let Some(results) = self.probe.poll(Kind::Sample) {
                self.sampling = None;
                for s in results {
                    let pid = s.stack.pid;
                    let same = self.judge.observe_stack(at, pid, s.digest) == Some(false);
                    let failed = s.digest.is_none();
                    if !failed {
                        self.latest.insert(pid, (at, s.stack));
                    }
                    // A repeat, or a failed dump, is sampled again soon.
                    let wait = if same || failed {
                        self.schedule.recheck
                    } else {
                        self.schedule.period
                    };
                    self.due.insert(pid, at + wait);
                }
            }
        }
        match self.autopsy {
            Autopsy::Wanted(per_dump) => {
                self.probe.start(Kind::Autopsy, live, per_dump);
                self.autopsy = Autopsy::Running;
            }
            Autopsy::Running => {
                if let Some(results) = self.probe.poll(Kind::Autopsy) {
                    self.autopsy = Autopsy::Done(results.into_iter().map(|s| s.stack).collect());
                }
            }
            _ => {}
        }
        if self.sampling.is_some()
            || !matches!(self.autopsy, Autopsy::None)
            || !self.probe.can_sample()
        {
            return;
        }
        self.due.retain(|pid, _| live.iter().any(|l| l.pid == *pid));
        self.latest
            .retain(|pid, _| live.iter().any(|l| l.pid == *pid));
        self.moving.retain(|pid| live.iter().any(|l| l.pid == *pid));
        let mut due = Vec::new();
        for l in live {
            if self.due.get(&l.pid).is_some_and(|t| *t > now) {
                continue;
            }
            if self.moving.remove(&l.pid) {
                // Moved since it was last due: progress already, no dump. Looked at again soon, so
                // that once it stops moving its stacks are taken within about a second.
                self.due.insert(l.pid, now + self.schedule.recheck);
            } else {
                due.push(*l);
            }
        }
        if !due.is_empty() {
            self.probe.start(Kind::Sample, &due, SAMPLE_DUMP);
            self.sampling = Some(now);
        }
    }

    /// CPU time in a compute kernel is progress, CPU time anywhere else is not: a rank whose stacks
    /// stay the same while its CPU moves (an in-place `torch.mm(a, b, out=c)` loop with no counter
    /// looks like a regex stuck in one C call) gets a native look once the run has been still for
    /// `native_at`, and again only after progress; a rank found computing restarts the timer.
    fn look_natively(&mut self, now: Instant, live: &[Live]) {
        if let Some(at) = self.native {
            if let Some(found) = self.probe.poll_native() {
                self.native = None;
                for (pid, computing) in found {
                    if computing {
                        self.judge.computed(now, pid);
                    } else {
                        log::debug!("hang watch: pid {pid} spins outside any compute kernel");
                    }
                }
            } else if now.saturating_duration_since(at) >= NATIVE_WAIT {
                // Its samplers are bounded (NATIVE_LIMIT); their answer, if it comes, is stale.
                self.native = None;
            }
            return;
        }
        let since = self.judge.last_progress();
        if !self.probe.can_sample()
            || !matches!(self.autopsy, Autopsy::None)
            || self.judge.quiet(now) < self.native_at
            || self.native_started.is_some_and(|t| t >= since)
        {
            return;
        }
        let pids: Vec<i32> = self
            .judge
            .spinning()
            .into_iter()
            .filter(|p| live.iter().any(|l| l.pid == *p))
            .collect();
        if !pids.is_empty() {
            self.probe.start_native(&pids);
            self.native = Some(now);
            self.native_started = Some(now);
        }
    }
}

/// The real observations: /proc, sock_diag, and py-spy on background threads.
pub struct ProcProbe {
    py_spy: Option<PathBuf>,
    tcp: sockets::TcpBytes,
    batches: HashMap<Kind, mpsc::Receiver<Vec<Sampled>>>,
    native: Option<mpsc::Receiver<Vec<(i32, bool)>>>,
}

impl ProcProbe {
    pub fn new(py_spy: Option<PathBuf>) -> ProcProbe {
        ProcProbe {
            py_spy,
            tcp: sockets::TcpBytes::new(),
            batches: HashMap::new(),
            native: None,
        }
    }
}

impl Probe for ProcProbe {
    fn usages(&mut self, pids: &[i32]) -> Vec<Option<Usage>> {
        let trees: Vec<Vec<i32>> = pids.iter().map(|p| process_tree(*p)).collect();
        let by_inode = self.tcp.by_inode();
        trees
            .iter()
            .map(|tree| usage_of_tree(tree, by_inode.as_ref()))
            .collect()
    }

    fn can_sample(&self) -> bool {
        self.py_spy.is_some()
    }

    fn start(&mut self, kind: Kind, ranks: &[Live], per_dump: Duration) {
        let locals = kind == Kind::Sample;
        let (tx, rx) = mpsc::channel();
        let py_spy = self.py_spy.clone();
        let triples = triples(ranks);
        let spawned = std::thread::Builder::new()
            .name("hang sampler".into())
            .spawn(move || {
                let _ = tx.send(autopsy::sample_parallel(
                    py_spy.as_deref(),
                    &triples,
                    per_dump,
                    locals,
                ));
            });
        let rx = match spawned {
            Ok(_) => rx,
            Err(e) => {
                // No thread for the batch: every dump of it failed, said so.
                let (tx, rx) = mpsc::channel();
                let why = format!("cannot start a thread for py-spy: {e}");
                let _ = tx.send(
                    ranks
                        .iter()
                        .map(|l| Sampled {
                            stack: RankStack {
                                rank: l.rank,
                                node: l.node,
                                pid: l.pid,
                                state: autopsy::proc_state(l.pid),
                                threads: Err(why.clone()),
                            },
                            digest: None,
                        })
                        .collect(),
                );
                rx
            }
        };
        self.batches.insert(kind, rx);
    }

    fn poll(&mut self, kind: Kind) -> Option<Vec<Sampled>> {
        let got = match self.batches.get(&kind)?.try_recv() {
            Ok(r) => r,
            Err(mpsc::TryRecvError::Empty) => return None,
            Err(mpsc::TryRecvError::Disconnected) => Vec::new(),
        };
        self.batches.remove(&kind);
        Some(got)
    }

    fn start_native(&mut self, pids: &[i32]) {
        let Some(py_spy) = self.py_spy.clone() else {
            return;
        };
        let (tx, rx) = mpsc::channel();
        let pids = pids.to_vec();
        let spawned = std::thread::Builder::new()
            .name("hang native".into())
            .spawn(move || {
                // One py-spy per rank, side by side: the batch takes as long as one.
                let handles: Vec<_> = pids
                    .iter()
                    .map(|&pid| {
                        let py_spy = py_spy.clone();
                        std::thread::Builder::new()
                            .name(format!("py-spy native {pid}"))
                            .spawn(move || match autopsy::native_samples(&py_spy, pid) {
                                Ok(samples) => autopsy::computing(&samples),
                                Err(e) => {
                                    log::debug!("py-spy native on pid {pid}: {e}");
                                    false
                                }
                            })
                    })
                    .collect();
                let found = pids
                    .iter()
                    .zip(handles)
                    .map(|(&pid, h)| (pid, h.ok().and_then(|h| h.join().ok()).unwrap_or(false)))
                    .collect();
                let _ = tx.send(found);
            });
        self.native = Some(match spawned {
            Ok(_) => rx,
            Err(e) => {
                // No thread: the batch found nothing.
                log::debug!("cannot start a thread for py-spy: {e}");
                let (tx, rx) = mpsc::channel();
                let _ = tx.send(Vec::new());
                rx
            }
        });
    }

    fn poll_native(&mut self) -> Option<Vec<(i32, bool)>> {
        let got = match self.native.as_ref()?.try_recv() {
            Ok(r) => r,
            Err(mpsc::TryRecvError::Empty) => return None,
            Err(mpsc::TryRecvError::Disconnected) => Vec::new(),
        };
        self.native = None;
        Some(got)
    }
}

/// A process and its live descendants (through /proc/<pid>/task/<tid>/children), at most 4096.
pub fn process_tree(pid: i32) -> Vec<i32> {
    let mut tree = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        if tree.len() >= 4096 {
            break;
        }
        tree.push(p);
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) {
            for t in tasks.flatten() {
                if let Ok(c) = std::fs::read_to_string(t.path().join("children")) {
                    todo.extend(c.split_whitespace().filter_map(|x| x.parse::<i32>().ok()));
                }
            }
        }
    }
    tree
}

/// A rank's usage from its process tree; `None` once its first process is gone.
fn usage_of_tree(tree: &[i32], by_inode: Option<&HashMap<u64, u64>>) -> Option<Usage> {
    let mut total = Usage::default();
    let mut found = false;
    for &p in tree {
        let Some(cpu) = cpu_ticks(p) else { continue };
        found = true;
        total.procs += 1;
        total.cpu_ticks += cpu;
        if let Some(io) = io_counters(p) {
            for (t, v) in total.io.iter_mut().zip(io) {
                *t = t.wrapping_add(v);
            }
        }
        total.flushed = total.flushed.wrapping_add(flushing_sectors(p));
        if let Some(map) = by_inode {
            for inode in sockets::socket_inodes(p) {
                total.tcp_bytes = total
                    .tcp_bytes
                    .wrapping_add(map.get(&inode).copied().unwrap_or(0));
            }
        }
    }
    found.then_some(total)
}

/// Sectors written so far to the block devices that this process's threads are flushing to: a thread
/// in fsync, fdatasync or sync_file_range (/proc/<pid>/task/<tid>/syscall) on a file of a block
/// device (its /sys/dev/block/MAJOR:MINOR/stat). During one long fsync nothing of /proc/<pid>/io
/// moves (the pages were counted when they were dirtied), but the device's written sectors do, while
/// it writes; a flush stuck on a dead device, or on a network file system (no block device), moves
/// nothing.
fn flushing_sectors(pid: i32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    let mut total = 0u64;
    for t in tasks.flatten().take(1024) {
        let Ok(call) = std::fs::read_to_string(t.path().join("syscall")) else {
            continue;
        };
        let mut f = call.split_whitespace();
        // "running" for a thread on a CPU; otherwise the number and the arguments in hex.
        let Some(nr) = f.next().and_then(|n| n.parse::<libc::c_long>().ok()) else {
            continue;
        };
        if ![
            libc::SYS_fsync,
            libc::SYS_fdatasync,
            libc::SYS_sync_file_range,
        ]
        .contains(&nr)
        {
            continue;
        }
        let Some(fd) = f
            .next()
            .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
        else {
            continue;
        };
        let Ok(meta) = std::fs::metadata(format!("/proc/{pid}/fd/{fd}")) else {
            continue;
        };
        let dev = meta.dev();
        let stat = format!(
            "/sys/dev/block/{}:{}/stat",
            libc::major(dev),
            libc::minor(dev)
        );
        // The 7th field: sectors written.
        if let Some(sectors) = std::fs::read_to_string(stat)
            .ok()
            .and_then(|s| s.split_whitespace().nth(6)?.parse::<u64>().ok())
        {
            total = total.wrapping_add(sectors);
        }
    }
    total
}

/// Reads a rank's usage: its process and every live descendant. `None` once the process is gone.
pub fn usage_of(pid: i32) -> Option<Usage> {
    let by_inode = sockets::TcpBytes::new().by_inode();
    usage_of_tree(&process_tree(pid), by_inode.as_ref())
}

fn cpu_ticks(pid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    // Fields after the name: state is 3rd overall; utime..cstime are 14th..17th.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| {
        f.get(i - 3)
            .and_then(|x| x.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Some(n(14) + n(15) + n(16) + n(17))
}

/// rchar, wchar, read_bytes, write_bytes of /proc/<pid>/io.
fn io_counters(pid: i32) -> Option<[u64; 4]> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    let mut io = [0; 4];
    for l in s.lines() {
        let Some((key, value)) = l.split_once(':') else {
            continue;
        };
        let i = match key {
            "rchar" => 0,
            "wchar" => 1,
            "read_bytes" => 2,
            "write_bytes" => 3,
            _ => continue,
        };
        io[i] = value.trim().parse().unwrap_or(0);
    }
    Some(io)
}

pub fn triples(live: &[Live]) -> Vec<(u32, u32, i32)> {
    live.iter().map(|l| (l.rank, l.node, l.pid)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// What a scripted rank shows at each moment: usage and the digest of its stacks (`None`: the
    /// dump fails).
    type Script = Box<dyn Fn(Duration) -> (Usage, Option<u64>)>;

    /// A probe that plays scripts on a clock the test advances, and records each dump it was
    /// asked for.
    struct Scripted {
        t0: Instant,
        now: Rc<RefCell<Instant>>,
        ranks: HashMap<i32, Script>,
        dumps: Rc<RefCell<Vec<(Duration, i32)>>>,
        pending: HashMap<Kind, Vec<Sampled>>,
        py_spy: bool,
        /// Whether a rank is in a compute kernel at a moment, for its native samples, which take
        /// [`NATIVE_TAKES`]; and when each native look began.
        kernel: Box<dyn Fn(i32, Duration) -> bool>,
        natives: Rc<RefCell<Vec<(Duration, i32)>>>,
        native: Option<(Duration, Vec<(i32, bool)>)>,
    }

    const NATIVE_TAKES: Duration = Duration::from_secs(4);

    impl Probe for Scripted {
        fn usages(&mut self, pids: &[i32]) -> Vec<Option<Usage>> {
            let t = self.now.borrow().duration_since(self.t0);
            pids.iter()
                .map(|p| self.ranks.get(p).map(|s| s(t).0))
                .collect()
        }
        fn can_sample(&self) -> bool {
            self.py_spy
        }
        fn start(&mut self, kind: Kind, ranks: &[Live], _: Duration) {
            let t = self.now.borrow().duration_since(self.t0);
            self.pending.insert(
                kind,
                ranks
                    .iter()
                    .map(|l| {
                        self.dumps.borrow_mut().push((t, l.pid));
                        let digest = self.ranks.get(&l.pid).and_then(|s| s(t).1);
                        Sampled {
                            stack: RankStack {
                                rank: l.rank,
                                node: 0,
                                pid: l.pid,
                                state: 'S',
                                threads: Ok(Vec::new()),
                            },
                            digest,
                        }
                    })
                    .collect(),
            );
        }
        fn poll(&mut self, kind: Kind) -> Option<Vec<Sampled>> {
            self.pending.remove(&kind)
        }
        fn start_native(&mut self, pids: &[i32]) {
            let t = self.now.borrow().duration_since(self.t0);
            let found = pids
                .iter()
                .map(|p| {
                    self.natives.borrow_mut().push((t, *p));
                    // The majority of samples spread over the look: its middle.
                    (*p, (self.kernel)(*p, t + NATIVE_TAKES / 2))
                })
                .collect();
            self.native = Some((t + NATIVE_TAKES, found));
        }
        fn poll_native(&mut self) -> Option<Vec<(i32, bool)>> {
            let t = self.now.borrow().duration_since(self.t0);
            if self.native.as_ref()?.0 > t {
                return None;
            }
            self.native.take().map(|n| n.1)
        }
    }

    struct Run {
        watch: Watch<Scripted>,
        now: Rc<RefCell<Instant>>,
        t0: Instant,
        live: Vec<Live>,
        dumps: Rc<RefCell<Vec<(Duration, i32)>>>,
        natives: Rc<RefCell<Vec<(Duration, i32)>>>,
    }

    impl Run {
        fn new(timeout: u64, py_spy: bool, ranks: Vec<(i32, Script)>) -> Run {
            Run::with_kernel(timeout, py_spy, ranks, Box::new(|_, _| false))
        }

        fn with_kernel(
            timeout: u64,
            py_spy: bool,
            ranks: Vec<(i32, Script)>,
            kernel: Box<dyn Fn(i32, Duration) -> bool>,
        ) -> Run {
            let t0 = Instant::now();
            let now = Rc::new(RefCell::new(t0));
            let dumps = Rc::default();
            let natives = Rc::default();
            let live = ranks
                .iter()
                .map(|(pid, _)| Live {
                    rank: *pid as u32,
                    node: 0,
                    pid: *pid,
                })
                .collect();
            let probe = Scripted {
                t0,
                now: Rc::clone(&now),
                ranks: ranks.into_iter().collect(),
                dumps: Rc::clone(&dumps),
                pending: HashMap::new(),
                py_spy,
                kernel,
                natives: Rc::clone(&natives),
                native: None,
            };
            Run {
                watch: Watch::with_probe(Duration::from_secs(timeout), probe, t0),
                now,
                t0,
                live,
                dumps,
                natives,
            }
        }

        /// Ticks as the monitor does (every 100 ms) until `until`; the time of the verdict.
        fn until(&mut self, until: Duration) -> Option<Duration> {
            loop {
                let t = self.now.borrow().duration_since(self.t0);
                if t > until {
                    return None;
                }
                let now = *self.now.borrow();
                if self.watch.tick(now, &self.live).is_some() {
                    return Some(t);
                }
                *self.now.borrow_mut() += Duration::from_millis(100);
            }
        }
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// 100 ticks a second of CPU: a whole core.
    fn spinning(t: Duration) -> u64 {
        (t.as_secs_f64() * 100.0) as u64
    }

    fn usage(cpu: u64, io: u64) -> Usage {
        Usage {
            cpu_ticks: cpu,
            io: [io, 0, 0, 0],
            tcp_bytes: 0,
            procs: 1,
            flushed: 0,
        }
    }

    #[test]
    fn a_rank_spinning_with_one_stack_is_still_whatever_its_cpu() {
        // Rank 1 spins at 100% CPU in one C call from t=5 s; rank 2 sleeps from t=5 s. Before, both
        // move (a step counter). Timeout 10: declared within timeout + one sampling period.
        let mut run = Run::new(
            10,
            true,
            vec![
                (
                    1,
                    Box::new(|t| (usage(spinning(t), 0), Some(t.as_secs().min(5)))),
                ),
                (
                    2,
                    Box::new(|t| (usage(1, 0), Some(100 + t.as_secs().min(5)))),
                ),
            ],
        );
        let at = run.until(secs(60.0)).expect("declared");
        assert!(at >= secs(15.0) && at <= secs(5.0 + 10.0 + 3.4), "{at:?}");
    }

    #[test]
    fn a_rank_computing_in_a_kernel_with_one_stack_is_not_still_and_is_looked_at_rarely() {
        // Rank 1: `torch.mm(a, b, out=c)` in a loop with no counter from the start (one stack, a
        // whole core, in MKL's kernel); rank 2 waits in a barrier. Then rank 1 leaves the kernel
        // at 40 s and spins elsewhere with the same stack (a regex): declared within the timeout,
        // one native look and one sampling period of that.
        let mut run = Run::with_kernel(
            10,
            true,
            vec![
                (1, Box::new(|t| (usage(spinning(t), 0), Some(1)))),
                (2, Box::new(|_| (usage(1, 0), Some(2)))),
            ],
            Box::new(|pid, t| pid == 1 && t < secs(40.0)),
        );
        // The timer runs from the last look that found it computing, a few seconds before 40 s.
        let at = run.until(secs(120.0)).expect("declared");
        assert!(
            at > secs(45.0) && at <= secs(40.0) + NATIVE_TAKES + secs(10.0 + 3.4),
            "{at:?}"
        );
        let natives = run.natives.borrow();
        // Only the spinning rank, once per stillness: every few seconds at this timeout, never twice
        // in one stillness.
        assert!(natives.iter().all(|n| n.1 == 1), "{natives:?}");
        assert!((4..=12).contains(&natives.len()), "{natives:?}");
        assert!(
            natives.windows(2).all(|w| w[1].0 - w[0].0 >= NATIVE_TAKES),
            "{natives:?}"
        );
    }

    #[test]
    fn a_spinning_rank_outside_any_kernel_is_looked_at_once_and_declared_in_time() {
        let mut run = Run::new(
            10,
            true,
            vec![
                (1, Box::new(|t| (usage(spinning(t), 0), Some(1)))),
                (2, Box::new(|_| (usage(1, 0), Some(2)))),
            ],
        );
        let at = run.until(secs(40.0)).expect("declared");
        assert!(at <= secs(10.5), "{at:?}");
        assert_eq!(run.natives.borrow().len(), 1);
        // A sleeping rank (no CPU) gets no native look.
        let mut run = Run::new(10, true, vec![(1, Box::new(|_| (usage(1, 0), Some(1))))]);
        run.until(secs(40.0)).expect("declared");
        assert!(run.natives.borrow().is_empty());
    }

    #[test]
    fn a_rank_whose_step_counter_moves_is_not_still_though_its_line_stays() {
        // 95% of each 1 s step in one call: the stack differs only in the step counter.
        let mut run = Run::new(
            10,
            true,
            vec![
                (1, Box::new(|t| (usage(spinning(t), 0), Some(t.as_secs())))),
                (2, Box::new(|_| (usage(0, 0), Some(7)))),
            ],
        );
        assert_eq!(run.until(secs(60.0)), None);
    }

    #[test]
    fn locals_that_cycle_among_a_few_values_are_sampled_again_until_they_differ() {
        // A loop without a counter whose tensor's address cycles among 3 values, one per 1.1 s, in
        // step with the sampling period (3.3 s at timeout 10): every periodic sample sees the same
        // value. A repeat is sampled again each second, which sees the others.
        let mut run = Run::new(
            10,
            true,
            vec![
                (
                    1,
                    Box::new(|t| {
                        let tick = (t.as_millis() as u64 + 50) / 100;
                        (usage(spinning(t), 0), Some(tick % 33 / 11))
                    }),
                ),
                (2, Box::new(|_| (usage(0, 0), Some(7)))),
            ],
        );
        assert_eq!(run.until(secs(60.0)), None);
        let dumps = run.dumps.borrow();
        let of_1 = dumps.iter().filter(|d| d.1 == 1).count();
        // A dump every period or two, more after repeats: far fewer than the 600 ticks.
        assert!((18..=60).contains(&of_1), "{of_1}");
    }

    #[test]
    fn cpu_counts_only_where_stacks_cannot_be_read() {
        let spinner = || -> Script { Box::new(|t| (usage(spinning(t), 0), None)) };
        // Without py-spy: the spinning rank keeps the run alive.
        let mut run = Run::new(
            10,
            false,
            vec![(1, spinner()), (2, Box::new(|_| (usage(0, 0), None)))],
        );
        assert_eq!(run.until(secs(40.0)), None);
        assert!(run.dumps.borrow().is_empty(), "no py-spy: nothing sampled");
        // With py-spy but a rank it cannot read: the same.
        let mut run = Run::new(
            10,
            true,
            vec![(1, spinner()), (2, Box::new(|_| (usage(0, 0), Some(3))))],
        );
        assert_eq!(run.until(secs(40.0)), None);
        // Readable, the same spinning is still.
        let mut run = Run::new(
            10,
            true,
            vec![
                (1, Box::new(|t| (usage(spinning(t), 0), Some(1)))),
                (2, Box::new(|_| (usage(0, 0), Some(3)))),
            ],
        );
        let at = run.until(secs(40.0)).expect("declared");
        assert!(at <= secs(10.5), "{at:?}");
        // Dumps that fail now and then (a loaded machine) leave the spinning rank still.
        let mut run = Run::new(
            10,
            true,
            vec![
                (
                    1,
                    Box::new(|t| {
                        let ok = (t.as_millis() / 1000) % 2 == 0;
                        (usage(spinning(t), 0), ok.then_some(1))
                    }),
                ),
                (2, Box::new(|_| (usage(0, 0), Some(3)))),
            ],
        );
        let at = run.until(secs(40.0)).expect("declared");
        assert!(at <= secs(10.5), "{at:?}");
    }

    #[test]
    fn any_io_counter_or_a_process_appearing_is_progress() {
        // Each counter moves alone, every 8 s, with a timeout of 10 and an unchanging stack.
        for i in 0..7 {
            let mut run = Run::new(
                10,
                true,
                vec![(
                    1,
                    Box::new(move |t| {
                        let step = t.as_secs() / 8;
                        let mut u = usage(0, 0);
                        match i {
                            0..=3 => u.io[i] = step,
                            4 => u.tcp_bytes = step * 1000,
                            5 => u.flushed = step * 8,
                            _ => u.procs = 1 + (step % 2) as u32,
                        }
                        (u, Some(1))
                    }),
                )],
            );
            assert_eq!(run.until(secs(40.0)), None, "counter {i}");
        }
    }

    #[test]
    fn a_rank_whose_io_moves_costs_no_dump_and_is_sampled_once_it_stops() {
        // Rank 1 moves bytes (collectives over TCP) for 30 s, then spins still; rank 2 is still.
        let mut run = Run::new(
            10,
            true,
            vec![
                (
                    1,
                    Box::new(|t| {
                        let mut u = usage(spinning(t), 0);
                        u.tcp_bytes = t.min(secs(30.0)).as_millis() as u64;
                        (u, Some(1))
                    }),
                ),
                (2, Box::new(|_| (usage(0, 0), Some(2)))),
            ],
        );
        // Still from 30 s: declared within the timeout and one sampling period.
        let at = run.until(secs(80.0)).expect("declared");
        assert!(at >= secs(40.0) && at <= secs(30.0 + 10.0 + 3.4), "{at:?}");
        let dumps = run.dumps.borrow();
        let of_1: Vec<Duration> = dumps.iter().filter(|d| d.1 == 1).map(|d| d.0).collect();
        // Its baseline at the start (and one recheck before the first reading), then none while
        // it moves.
        assert!(
            of_1.iter().all(|t| *t <= secs(1.0) || *t > secs(30.0)),
            "{of_1:?}"
        );
        assert!(
            !of_1.is_empty() && of_1.iter().any(|t| *t > secs(30.0)),
            "{of_1:?}"
        );
    }

    #[test]
    fn a_rank_ending_is_a_change() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut j = Judge::new(Duration::from_secs(10), Duration::from_secs(1), 100, t0);
        j.observe(s(0), &[(1, Some(usage(0, 0))), (2, Some(usage(0, 0)))]);
        j.observe(s(9), &[(1, Some(usage(0, 0)))]);
        assert!(!j.hung(s(18)));
        assert!(j.hung(s(19)));
    }

    #[test]
    fn the_autopsy_runs_beside_a_sample_in_flight_and_sampling_resumes_after() {
        let mut run = Run::new(10, true, vec![(1, Box::new(|_| (usage(0, 0), Some(1))))]);
        let now = run.t0;
        run.watch.sample(now, &run.live);
        // A sampling batch is in flight (the scripted probe answers on the next poll).
        run.watch.request_autopsy(&run.live, Duration::from_secs(1));
        assert!(run.watch.autopsy_ready().is_none());
        run.watch.sample(now, &run.live);
        run.watch.sample(now, &run.live);
        let stacks = run.watch.autopsy_ready().expect("taken");
        assert_eq!(stacks.len(), 1);
        assert!(run.watch.autopsy_ready().is_none());
        assert_eq!(
            run.dumps.borrow().len(),
            2,
            "a sample, then the autopsy's dump"
        );
    }

    #[test]
    fn stacks_sampled_since_the_last_progress_are_the_autopsy_at_once() {
        // Still from the start: every sample since is the rank's stack now.
        let mut run = Run::new(10, true, vec![(1, Box::new(|_| (usage(0, 0), Some(1))))]);
        let t = |s: f64| run.t0 + secs(s);
        for n in 0..40 {
            run.watch.sample(t(n as f64 * 0.1), &run.live);
        }
        let before = run.dumps.borrow().len();
        run.watch.request_autopsy(&run.live, Duration::from_secs(1));
        assert_eq!(run.watch.autopsy_ready().map(|s| s.len()), Some(1));
        assert_eq!(run.dumps.borrow().len(), before, "no dump taken for it");
        // A rank whose last dump failed is dumped afresh.
        let mut run = Run::new(10, true, vec![(1, Box::new(|_| (usage(0, 0), None)))]);
        run.watch.sample(run.t0, &run.live);
        run.watch.sample(run.t0, &run.live);
        run.watch.request_autopsy(&run.live, Duration::from_secs(1));
        assert!(run.watch.autopsy_ready().is_none());
    }

    #[test]
    fn reads_this_process() {
        let u = usage_of(std::process::id() as i32).unwrap();
        assert!(u.io[0] > 0 || u.cpu_ticks > 0);
        assert!(u.procs >= 1);
        assert!(usage_of(i32::MAX).is_none());
    }
}
