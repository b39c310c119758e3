//! Hang detection for `--hang_timeout`: the supervisor ticks a [`Watch`] with its live ranks, and the
//! watch says when no rank has made progress for the timeout. Progress is judged from outside, with
//! no code in the training script:
//!
//! - I/O: the bytes a rank (with its descendants) read or wrote (`rchar`/`wchar` of /proc/<pid>/io:
//!   its stdout/stderr, checkpoints, data) grew;
//! - CPU: its CPU time (utime+stime, children's included) grew by at least [`BUSY_FRACTION`] of the
//!   sampling interval — unless its last Python stack shows it waiting in a torch.distributed
//!   collective, where a busy-polling wait is not progress;
//! - stack: once the run has been quiet for half the timeout, Python stacks are sampled with py-spy
//!   every few seconds, and a rank whose stack changed is progressing.
//!
//! A rank that waits in a collective uses almost no CPU and does no I/O (gloo: ~0.5% of a core for
//! torch's background threads), so one rank computing while the others wait keeps the run alive, and a
//! run is declared hung only when every rank is still.
//!
//! The decision ([`Judge`]) is pure and unit-tested; [`Watch`] adds the /proc reads and py-spy.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::autopsy::{self, Frame};

/// CPU use, as a fraction of one core over a sampling interval, that counts as computing.
pub const BUSY_FRACTION: f64 = 0.05;

/// A rank's cumulative resource use (its process and live descendants).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// utime+stime+cutime+cstime, in clock ticks.
    pub cpu_ticks: u64,
    /// rchar+wchar.
    pub io_bytes: u64,
}

/// One observation of a rank.
#[derive(Debug, Clone, Default)]
pub struct Obs {
    pub pid: i32,
    pub usage: Option<Usage>,
    /// The main thread's frames, when stacks were sampled this time.
    pub stack: Option<Vec<Frame>>,
}

#[derive(Debug, Default)]
struct Seen {
    usage: Option<Usage>,
    stack: Option<Vec<Frame>>,
    waits_in_collective: bool,
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

    /// Records one observation of every live rank; returns the ranks that made progress since the
    /// last one (a rank that appeared or ended counts as a change of the run).
    pub fn observe(&mut self, now: Instant, obs: &[Obs]) -> Vec<i32> {
        let mut moved = Vec::new();
        let before = self.seen.len();
        self.seen.retain(|pid, _| obs.iter().any(|o| o.pid == *pid));
        let ended = self.seen.len() != before;
        for o in obs {
            let new = !self.seen.contains_key(&o.pid);
            let s = self.seen.entry(o.pid).or_default();
            let mut progress = new;
            if let (Some(a), Some(b)) = (s.usage, o.usage) {
                if b.io_bytes > a.io_bytes {
                    progress = true;
                }
                let cpu = b.cpu_ticks.saturating_sub(a.cpu_ticks);
                if cpu >= self.busy_ticks && !s.waits_in_collective {
                    progress = true;
                }
            }
            if o.usage.is_some() {
                s.usage = o.usage;
            }
            if let Some(st) = &o.stack {
                if s.stack.as_ref().is_some_and(|old| old != st) {
                    progress = true;
                }
                s.waits_in_collective = st.iter().any(|f| {
                    f.filename
                        .ends_with("torch/distributed/distributed_c10d.py")
                });
                s.stack = Some(st.clone());
            }
            if progress {
                moved.push(o.pid);
            }
        }
        if ended || !moved.is_empty() {
            self.last_progress = now;
        }
        moved
    }

    /// How long the run has been still.
    pub fn quiet(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.last_progress)
    }

    pub fn hung(&self, now: Instant) -> bool {
        self.quiet(now) >= self.timeout
    }
}

/// Reads a rank's usage: its process and every live descendant (through
/// /proc/<pid>/task/<tid>/children). `None` once the process is gone.
pub fn usage_of(pid: i32) -> Option<Usage> {
    let mut total = Usage::default();
    let mut todo = vec![pid];
    let mut found = false;
    let mut visited = 0;
    while let Some(p) = todo.pop() {
        visited += 1;
        if visited > 4096 {
            break;
        }
        let Some(cpu) = cpu_ticks(p) else { continue };
        found = true;
        total.cpu_ticks += cpu;
        total.io_bytes += io_bytes(p).unwrap_or(0);
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) {
            for t in tasks.flatten() {
                if let Ok(c) = std::fs::read_to_string(t.path().join("children")) {
                    todo.extend(c.split_whitespace().filter_map(|x| x.parse::<i32>().ok()));
                }
            }
        }
    }
    found.then_some(total)
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

fn io_bytes(pid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    let mut total = 0;
    for l in s.lines() {
        if let Some(v) = l
            .strip_prefix("rchar: ")
            .or_else(|| l.strip_prefix("wchar: "))
        {
            total += v.trim().parse::<u64>().unwrap_or(0);
        }
    }
    Some(total)
}

/// A live rank as the supervisor knows it.
#[derive(Debug, Clone, Copy)]
pub struct Live {
    pub rank: u32,
    pub node: u32,
    pub pid: i32,
}

/// What the watch decided on a tick.
#[derive(Debug)]
pub enum Decision {
    /// No rank made progress for this long: the autopsy, taken before anything was stopped.
    Hang {
        quiet: Duration,
        stacks: Vec<autopsy::RankStack>,
    },
}

/// The supervisor's hang watcher: ticked from its monitor loop.
#[derive(Debug)]
pub struct Watch {
    judge: Judge,
    timeout: Duration,
    py_spy: Option<PathBuf>,
    interval: Duration,
    stack_every: Duration,
    next_sample: Instant,
    next_stacks: Instant,
}

impl Watch {
    pub fn new(timeout: Duration, py_spy: Option<PathBuf>, now: Instant) -> Watch {
        // Sampling is a few /proc reads per rank; once a second is plenty for timeouts of seconds.
        let interval = (timeout / 10).clamp(Duration::from_millis(200), Duration::from_secs(2));
        let stack_every = (timeout / 5).clamp(Duration::from_secs(1), Duration::from_secs(30));
        // SAFETY: sysconf has no preconditions.
        let tps = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        Watch {
            judge: Judge::new(timeout, interval, tps, now),
            timeout,
            py_spy,
            interval,
            stack_every,
            next_sample: now,
            next_stacks: now,
        }
    }

    /// Samples when due; returns a decision when the run is hung.
    pub fn tick(&mut self, now: Instant, live: &[Live]) -> Option<Decision> {
        self.sample(now, live)?;
        if !self.judge.hung(now) {
            return None;
        }
        // The autopsy: fresh stacks of every rank, before anything is stopped.
        let stacks = autopsy::take(self.py_spy.as_deref(), &triples(live));
        Some(Decision::Hang {
            quiet: self.judge.quiet(now),
            stacks,
        })
    }

    /// Samples when due (`None` when not): how long these ranks have been still. On many nodes this
    /// is all a node judges; the world's hang is node 0's to declare ([`super::verdict`]).
    pub fn sample(&mut self, now: Instant, live: &[Live]) -> Option<Duration> {
        if now < self.next_sample {
            return None;
        }
        self.next_sample = now + self.interval;
        // Stacks cost a py-spy run per rank: only while the run looks still.
        let want_stacks = self.py_spy.is_some()
            && self.judge.quiet(now) >= self.timeout / 2
            && now >= self.next_stacks;
        let mut dumped = Vec::new();
        let obs: Vec<Obs> = live
            .iter()
            .map(|l| {
                let stack = if want_stacks {
                    let taken = autopsy::take(self.py_spy.as_deref(), &[(l.rank, l.node, l.pid)]);
                    let main = taken
                        .first()
                        .and_then(|s| s.main_frames().map(<[Frame]>::to_vec));
                    dumped.extend(taken);
                    main
                } else {
                    None
                };
                Obs {
                    pid: l.pid,
                    usage: usage_of(l.pid),
                    stack,
                }
            })
            .collect();
        if want_stacks {
            self.next_stacks = now + self.stack_every;
        }
        self.judge.observe(now, &obs);
        Some(self.judge.quiet(now))
    }
}

pub fn triples(live: &[Live]) -> Vec<(u32, u32, i32)> {
    live.iter().map(|l| (l.rank, l.node, l.pid)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(pid: i32, cpu: u64, io: u64) -> Obs {
        Obs {
            pid,
            usage: Some(Usage {
                cpu_ticks: cpu,
                io_bytes: io,
            }),
            stack: None,
        }
    }

    fn frame(name: &str, file: &str) -> Frame {
        Frame {
            name: name.into(),
            filename: file.into(),
            short_filename: None,
            line: 1,
        }
    }

    #[test]
    fn one_busy_rank_keeps_the_run_alive_and_stillness_is_a_hang() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        // 1 s samples, 100 ticks/s: 5 ticks count as busy.
        let mut j = Judge::new(Duration::from_secs(10), Duration::from_secs(1), 100, t0);
        j.observe(s(0), &[obs(1, 0, 0), obs(2, 0, 0)]);
        // Rank 1 computes (100 ticks a second), rank 2 waits (background noise of 1 tick).
        for n in 1..=30 {
            j.observe(s(n), &[obs(1, 100 * n, 0), obs(2, n, 0)]);
            assert!(!j.hung(s(n)));
        }
        // Now both are still: hung after exactly the timeout.
        for n in 31..=39 {
            j.observe(s(n), &[obs(1, 3000, 0), obs(2, n, 0)]);
            assert!(!j.hung(s(n)), "at {n}");
        }
        j.observe(s(40), &[obs(1, 3000, 0), obs(2, 40, 0)]);
        assert!(j.hung(s(40)));
    }

    #[test]
    fn output_and_a_moving_stack_are_progress() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut j = Judge::new(Duration::from_secs(10), Duration::from_secs(1), 100, t0);
        j.observe(s(0), &[obs(1, 0, 0)]);
        // A sleep loop printing a line every 8 s.
        for n in 1..=40 {
            j.observe(s(n), &[obs(1, 0, (n / 8) * 30)]);
            assert!(!j.hung(s(n)));
        }
        // A stack that changes between samples, without CPU or I/O.
        let mut j = Judge::new(Duration::from_secs(10), Duration::from_secs(1), 100, t0);
        for n in 0..=40 {
            let mut o = obs(1, 0, 0);
            o.stack = Some(vec![frame(&format!("f{}", n % 2), "/w/a.py")]);
            j.observe(s(n), &[o]);
            assert!(!j.hung(s(n)));
        }
    }

    #[test]
    fn busy_polling_in_a_collective_is_not_progress() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut j = Judge::new(Duration::from_secs(10), Duration::from_secs(1), 100, t0);
        let c10d = "/v/site-packages/torch/distributed/distributed_c10d.py";
        for n in 0..=10 {
            let mut o = obs(1, 100 * n, 0);
            o.stack = Some(vec![frame("all_reduce", c10d)]);
            j.observe(s(n), &[o]);
        }
        assert!(j.hung(s(10)));
    }

    #[test]
    fn a_rank_ending_is_a_change() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut j = Judge::new(Duration::from_secs(10), Duration::from_secs(1), 100, t0);
        j.observe(s(0), &[obs(1, 0, 0), obs(2, 0, 0)]);
        j.observe(s(9), &[obs(1, 0, 0)]);
        assert!(!j.hung(s(18)));
        assert!(j.hung(s(19)));
    }

    #[test]
    fn reads_this_process() {
        let u = usage_of(std::process::id() as i32).unwrap();
        assert!(u.io_bytes > 0 || u.cpu_ticks > 0);
        assert!(usage_of(i32::MAX).is_none());
    }
}
