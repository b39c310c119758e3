//! Every rank's main thread, sampled over one period (half a `--straggler_window`): one `py-spy record --nonblocking --idle
//! --threads --format raw` per rank, all started at once, so that the ranks of a node are sampled
//! over the same seconds. One process attached for the whole window costs one start (the ~13 ms of
//! CPU a `py-spy dump` takes, most of it reading the interpreter's symbols) and then a fraction of
//! a millisecond per sample, where a dump per sample would cost the start each time. `--idle`
//! keeps the samples of a thread that waits off the CPU (a rank in a gloo collective); without it
//! py-spy drops them. The raw output's lines are `thread (TID): NAME;outer (file:line);…;inner
//! (file:line) COUNT`, parsed by [`parse_raw`] (pure, unit-tested). At the end of each period the
//! NCCL ranks among them are asked for their Flight Recorder ([`super::nccl`]), where the launcher
//! gave them a dump directory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::score::{Place, RankWindow};
use crate::launch::hang::autopsy::is_library_file;
use crate::launch::hang::Live;

/// Samples per second per rank: about 16 a second in all on a node, at most 5 and at least 1 per
/// rank. Measured on 2 cores with torch imported (scripts/bench/straggler), one rank attached at 2
/// a second costs py-spy about 0.09% of a core, at 5 a second 0.19%: 8 ranks at 2 a second stay
/// under 1% of a core.
pub fn rate_for(local_ranks: usize) -> u32 {
    (16 / local_ranks.max(1) as u32).clamp(1, 5)
}

/// The file of torch.distributed's collective API, whose frames mean the rank waits in one
/// (`all_reduce`, `barrier`, `broadcast`, `Work.wait` through `_coalescing_manager`, …).
const C10D: &str = "torch/distributed/distributed_c10d.py";

/// What one rank's raw output says of its main thread.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Counts {
    pub samples: u32,
    pub waiting: u32,
    /// Samples outside the collectives, by the innermost frame of the user's code.
    pub places: HashMap<Place, u32>,
}

impl Counts {
    /// The place most often seen outside the collectives (the first of equals, in order).
    pub fn top_place(&self) -> Option<Place> {
        self.places
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
            .map(|(p, _)| p.clone())
    }
}

/// One frame of the raw format: `function (file:line)`.
fn frame(text: &str) -> Option<(&str, &str, i64)> {
    let (func, rest) = text.rsplit_once(" (")?;
    let (file, line) = rest.strip_suffix(')')?.rsplit_once(':')?;
    Some((func, file, line.parse().ok()?))
}

/// Parses py-spy's raw output for the process `pid`: its main thread's samples (the thread named
/// MainThread, or whose id is the process's).
pub fn parse_raw(text: &str, pid: i32) -> Counts {
    let mut c = Counts::default();
    for line in text.lines() {
        let Some((stack, count)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(count) = count.parse::<u32>() else {
            continue;
        };
        let mut parts = stack.split(';');
        let Some(thread) = parts.next() else { continue };
        let main =
            thread.ends_with(": MainThread") || thread.starts_with(&format!("thread ({pid})"));
        if !main {
            continue;
        }
        let frames: Vec<(&str, &str, i64)> = parts.filter_map(frame).collect();
        c.samples = c.samples.saturating_add(count);
        if frames.iter().any(|f| f.1.ends_with(C10D)) {
            c.waiting = c.waiting.saturating_add(count);
            continue;
        }
        if let Some((func, file, line)) = frames.iter().rev().find(|f| !is_library_file(f.1)) {
            let file = Path::new(file)
                .file_name()
                .map_or_else(|| file.to_string(), |n| n.to_string_lossy().into_owned());
            let p = Place {
                file,
                line: *line,
                function: func.to_string(),
            };
            *c.places.entry(p).or_default() += count;
        }
    }
    c
}

/// The node's sampler: one period of every live rank at a time, taken in the background.
pub struct Sampler {
    py_spy: PathBuf,
    window: Duration,
    rate: u32,
    host: String,
    /// Where the ranks' Flight Recorder pipes and dumps are ([`super::nccl::env`]).
    fr_dir: Option<PathBuf>,
    batch: Option<mpsc::Receiver<Vec<RankWindow>>>,
}

impl Sampler {
    pub fn new(
        py_spy: PathBuf,
        window: Duration,
        local_ranks: usize,
        host: &str,
        fr_dir: Option<PathBuf>,
    ) -> Sampler {
        Sampler {
            py_spy,
            window,
            rate: rate_for(local_ranks),
            host: host.to_string(),
            fr_dir,
            batch: None,
        }
    }

    /// The last window's samples once it ended; the next window starts at the next call.
    pub fn poll(&mut self, live: &[Live]) -> Option<Vec<RankWindow>> {
        if let Some(rx) = &self.batch {
            return match rx.try_recv() {
                Ok(w) => {
                    self.batch = None;
                    Some(w)
                }
                Err(mpsc::TryRecvError::Empty) => None,
                Err(mpsc::TryRecvError::Disconnected) => {
                    self.batch = None;
                    None
                }
            };
        }
        if !live.is_empty() {
            self.start(live);
        }
        None
    }

    fn start(&mut self, live: &[Live]) {
        let (tx, rx) = mpsc::channel();
        let (py_spy, window, rate, host, fr_dir) = (
            self.py_spy.clone(),
            self.window,
            self.rate,
            self.host.clone(),
            self.fr_dir.clone(),
        );
        let live = live.to_vec();
        let spawned = std::thread::Builder::new()
            .name("straggler sampler".into())
            .spawn(move || {
                let since_ns = super::nccl::now_ns();
                let mut w = record_window(&py_spy, &live, window, rate, &host);
                if let Some(dir) = fr_dir {
                    let ranks: Vec<u32> = live.iter().map(|l| l.rank).collect();
                    let shares =
                        super::nccl::shares(&dir, &ranks, since_ns, super::nccl::DUMP_WAIT);
                    for r in &mut w {
                        r.arrival = shares.get(&r.rank).copied();
                    }
                }
                let _ = tx.send(w);
            });
        if let Err(e) = spawned {
            log::debug!("straggler: cannot start the sampler: {e}");
            return;
        }
        self.batch = Some(rx);
    }
}

/// Records every rank for `window` at once and reads what each saw.
fn record_window(
    py_spy: &Path,
    live: &[Live],
    window: Duration,
    rate: u32,
    host: &str,
) -> Vec<RankWindow> {
    let dir = match tempfile::Builder::new()
        .prefix("accel-straggler-")
        .tempdir()
    {
        Ok(d) => d,
        Err(e) => {
            log::debug!("straggler: no directory for the samples: {e}");
            std::thread::sleep(window);
            return Vec::new();
        }
    };
    let secs = window.as_secs_f64().ceil().max(1.0) as u64;
    let children: Vec<(Live, PathBuf, Option<Child>)> = live
        .iter()
        .map(|l| {
            let out = dir.path().join(format!("rank{}.txt", l.rank));
            let child = Command::new(py_spy)
                .args([
                    "record",
                    "--nonblocking",
                    "--idle",
                    "--threads",
                    "--full-filenames",
                ])
                .args(["--format", "raw", "--rate", &rate.to_string()])
                .args(["--duration", &secs.to_string()])
                .arg("-o")
                .arg(&out)
                .args(["--pid", &l.pid.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| log::debug!("straggler: cannot run py-spy: {e}"))
                .ok();
            (*l, out, child)
        })
        .collect();
    // py-spy needs a few seconds past the window to attach and write; one that takes far longer
    // (a machine saturated by its ranks) is dropped from this window.
    let until = Instant::now() + window + Duration::from_secs(15);
    let mut windows = Vec::new();
    for (l, out, child) in children {
        let Some(mut child) = child else { continue };
        let ended = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s.success(),
                Ok(None) if Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break false;
                }
            }
        };
        let text = if ended {
            std::fs::read_to_string(&out).unwrap_or_default()
        } else {
            String::new()
        };
        let c = parse_raw(&text, l.pid);
        windows.push(RankWindow {
            rank: l.rank,
            node: l.node,
            host: host.to_string(),
            samples: c.samples,
            waiting: c.waiting,
            place: c.top_place(),
            arrival: None,
        });
    }
    windows
}

#[cfg(test)]
mod tests {
    use super::*;

    const RAW: &str = "\
thread (23922): Thread-1 (bg);Thread._bootstrap (/usr/lib/python3.12/threading.py:1002);bg (/w/t.py:3) 49
thread (23918): MainThread;<module> (/w/train.py:9);train_step (/w/train.py:30);all_reduce (/v/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py:2950) 30
thread (23918): MainThread;<module> (/w/train.py:9);forward (/w/train.py:42);_call_impl (/v/lib/python3.12/site-packages/torch/nn/modules/module.py:1750) 12
thread (23918): MainThread;<module> (/w/train.py:9);forward (/w/train.py:42) 5
thread (23918): MainThread;<module> (/w/train.py:9) 3
garbage line
";

    #[test]
    fn the_main_thread_s_waits_and_places() {
        let c = parse_raw(RAW, 23918);
        assert_eq!((c.samples, c.waiting), (50, 30));
        let top = c.top_place().unwrap();
        assert_eq!(top.to_string(), "train.py:42 in forward");
        assert_eq!(c.places.values().sum::<u32>(), 20);
        // A main thread without its name: by its id.
        let unnamed = RAW.replace(": MainThread", ": ");
        assert_eq!(parse_raw(&unnamed, 23918).samples, 50);
        assert_eq!(parse_raw("", 1), Counts::default());
    }

    #[test]
    fn the_rate_keeps_a_node_near_16_samples_a_second() {
        assert_eq!(rate_for(1), 5);
        assert_eq!(rate_for(4), 4);
        assert_eq!(rate_for(8), 2);
        assert_eq!(rate_for(64), 1);
    }
}
