//! What ranks tell the coordinator (one JSON event per line on their stdout), and how the coordinator
//! turns the events of all local ranks into PASS/FAIL lines, a bandwidth table and a verdict.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One line of a rank's stdout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A check finished on `rank`.
    Check {
        rank: usize,
        name: String,
        ok: bool,
        #[serde(default)]
        detail: String,
        #[serde(default)]
        ms: f64,
    },
    /// One --bench measurement (sent by rank 0, times are the slowest rank's).
    Bench { rank: usize, row: BenchRow },
    /// The rank is done; `ok` is its own verdict.
    Done { rank: usize, ok: bool },
    /// --probe: the whole world's measurements (sent by every node's first rank).
    Probe {
        rank: usize,
        data: Box<super::probe::ProbeData>,
    },
}

impl Event {
    pub fn to_line(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// A --bench row, in nccl-tests' terms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchRow {
    /// `all_reduce` or `all_gather`.
    pub op: String,
    pub dtype: String,
    /// Bytes: per rank for all_reduce, gathered total for all_gather (nccl-tests' `size`).
    pub size: u64,
    pub count: u64,
    pub iters: u32,
    /// Mean time of one operation, microseconds.
    pub time_us: f64,
    /// GB/s (1e9 bytes).
    pub algbw: f64,
    pub busbw: f64,
}

/// nccl-tests' bus-bandwidth factor: 2(n-1)/n for all_reduce, (n-1)/n for all_gather.
pub fn bus_factor(op: &str, n: usize) -> f64 {
    let n = n.max(1) as f64;
    match op {
        "all_reduce" => 2.0 * (n - 1.0) / n,
        _ => (n - 1.0) / n,
    }
}

/// algbw and busbw in GB/s for `size` bytes in `time_us`.
pub fn bandwidth(op: &str, n: usize, size: u64, time_us: f64) -> (f64, f64) {
    if time_us <= 0.0 {
        return (0.0, 0.0);
    }
    let algbw = size as f64 / (time_us * 1e-6) / 1e9;
    (algbw, algbw * bus_factor(op, n))
}

/// How one rank's process ended, as the coordinator saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum RankEnd {
    Exited(i32),
    Signaled(i32),
    /// Killed by the coordinator after the timeout.
    Killed,
}

impl std::fmt::Display for RankEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RankEnd::Exited(c) => write!(f, "exited with status {c}"),
            RankEnd::Signaled(s) => write!(
                f,
                "died: killed by signal {s} ({})",
                nix::sys::signal::Signal::try_from(*s)
                    .map(|s| s.as_str())
                    .unwrap_or("?")
            ),
            RankEnd::Killed => write!(f, "did not finish in time and was killed"),
        }
    }
}

/// One check's results over the local ranks.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckResult {
    pub name: String,
    /// rank → (ok, detail, ms)
    pub ranks: BTreeMap<usize, (bool, String, f64)>,
    #[serde(skip)]
    printed: bool,
}

impl CheckResult {
    pub fn ok(&self) -> bool {
        self.ranks.values().all(|(ok, _, _)| *ok)
    }
}

/// Collects events and renders lines as soon as every local rank has answered a check.
#[derive(Debug, Default)]
pub struct Report {
    pub ranks: Vec<usize>,
    pub checks: Vec<CheckResult>,
    pub bench: Vec<BenchRow>,
    pub done: BTreeMap<usize, bool>,
    pub ends: BTreeMap<usize, RankEnd>,
    /// --probe's measurements, once a rank of this node sent them.
    pub probe: Option<super::probe::ProbeData>,
    pub notes: Vec<String>,
    world_size: usize,
    bench_header: bool,
}

/// The check-name column: wide enough for the embedded Python check's names
/// (`python.all_reduce.sum float32[16777216]`), so its lines align with the native ones.
const NAME_WIDTH: usize = 40;

fn rank_list(ranks: &[usize]) -> String {
    match ranks {
        [] => "no rank".into(),
        [r] => format!("rank {r}"),
        _ if ranks.windows(2).all(|w| w[1] == w[0] + 1) => {
            format!("ranks {}-{}", ranks[0], ranks[ranks.len() - 1])
        }
        _ => format!(
            "ranks {}",
            ranks
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

impl Report {
    pub fn new(ranks: Vec<usize>, world_size: usize) -> Report {
        Report {
            ranks,
            world_size,
            ..Report::default()
        }
    }

    /// Takes one event; returns the text that can be printed now.
    pub fn add(&mut self, event: Event) -> String {
        match event {
            Event::Check {
                rank,
                name,
                ok,
                detail,
                ms,
            } => {
                let idx = match self.checks.iter().position(|c| c.name == name) {
                    Some(i) => i,
                    None => {
                        self.checks.push(CheckResult {
                            name,
                            ..CheckResult::default()
                        });
                        self.checks.len() - 1
                    }
                };
                self.checks[idx].ranks.insert(rank, (ok, detail, ms));
                self.flush(false)
            }
            Event::Bench { row, .. } => {
                let mut out = self.flush(false);
                if !self.bench_header {
                    self.bench_header = true;
                    out.push_str(&format!(
                        "{:<11} {:>12} {:>11} {:>6} {:>12} {:>11} {:>11}\n",
                        "bench",
                        "size(B)",
                        "count",
                        "iters",
                        "time(us)",
                        "algbw(GB/s)",
                        "busbw(GB/s)"
                    ));
                }
                out.push_str(&format!(
                    "{:<11} {:>12} {:>11} {:>6} {:>12.1} {:>11.3} {:>11.3}\n",
                    row.op, row.size, row.count, row.iters, row.time_us, row.algbw, row.busbw
                ));
                self.bench.push(row);
                out
            }
            Event::Done { rank, ok } => {
                self.done.insert(rank, ok);
                self.flush(false)
            }
            Event::Probe { data, .. } => {
                self.probe.get_or_insert(*data);
                self.flush(false)
            }
        }
    }

    /// A rank's process ended.
    pub fn ended(&mut self, rank: usize, end: RankEnd) -> String {
        self.ends.insert(rank, end);
        self.flush(false)
    }

    fn finished(&self, rank: usize) -> bool {
        self.ends.contains_key(&rank) || self.done.contains_key(&rank)
    }

    /// Prints checks in order while every rank that is still running has answered them; with `all`,
    /// everything left, naming the ranks that never answered.
    pub fn flush(&mut self, all: bool) -> String {
        let mut out = String::new();
        for i in 0..self.checks.len() {
            if self.checks[i].printed {
                continue;
            }
            let c = &self.checks[i];
            let missing: Vec<usize> = self
                .ranks
                .iter()
                .copied()
                .filter(|r| !c.ranks.contains_key(r))
                .collect();
            let waiting = missing.iter().any(|r| !self.finished(*r));
            if waiting && !all {
                break;
            }
            out.push_str(&self.render(i, &missing));
            self.checks[i].printed = true;
        }
        out
    }

    fn render(&self, i: usize, missing: &[usize]) -> String {
        let c = &self.checks[i];
        let answered: Vec<usize> = c.ranks.keys().copied().collect();
        let failed: Vec<(&usize, &(bool, String, f64))> =
            c.ranks.iter().filter(|(_, (ok, _, _))| !ok).collect();
        let ms = c.ranks.values().map(|v| v.2).fold(0.0, f64::max);
        if failed.is_empty() && missing.is_empty() {
            let detail = c
                .ranks
                .values()
                .map(|v| v.1.as_str())
                .find(|d| !d.is_empty())
                .map(|d| format!("  {d}"))
                .unwrap_or_default();
            return format!(
                "PASS  {:<NAME_WIDTH$} {:<11} {:>9.2} ms{detail}\n",
                c.name,
                rank_list(&answered),
                ms
            );
        }
        let mut out = format!("FAIL  {}\n", c.name);
        for (rank, (_, detail, _)) in failed {
            out.push_str(&format!("        rank {rank}: {detail}\n"));
        }
        for rank in missing {
            let why = self
                .ends
                .get(rank)
                .map(|e| e.to_string())
                .unwrap_or_else(|| "never answered".into());
            out.push_str(&format!("        rank {rank}: no result ({why})\n"));
        }
        out
    }

    /// Whether everything passed: every check on every rank, every rank done and exited 0.
    pub fn passed(&self) -> bool {
        !self.checks.is_empty()
            && self
                .checks
                .iter()
                .all(|c| c.ok() && self.ranks.iter().all(|r| c.ranks.contains_key(r)))
            && self.ranks.iter().all(|r| {
                self.done.get(r) == Some(&true) && self.ends.get(r) == Some(&RankEnd::Exited(0))
            })
    }

    /// The last line.
    pub fn verdict(&self, seconds: f64, what: &str) -> String {
        let n = self.checks.len();
        if self.passed() {
            return format!(
                "verdict: PASS  {n} checks passed on {} ({what}) in {seconds:.1} s\n",
                rank_list(&self.ranks)
            );
        }
        let failed = self
            .checks
            .iter()
            .filter(|c| !c.ok() || self.ranks.iter().any(|r| !c.ranks.contains_key(r)))
            .count();
        let mut why = vec![format!("{failed} of {n} checks failed")];
        for (rank, end) in &self.ends {
            if *end != RankEnd::Exited(0) && *end != RankEnd::Exited(1) {
                why.push(format!("rank {rank} {end}"));
            }
        }
        why.extend(self.notes.iter().cloned());
        format!(
            "verdict: FAIL  {} ({what}, {seconds:.1} s)\n",
            why.join("; ")
        )
    }

    pub fn world_size(&self) -> usize {
        self.world_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(rank: usize, name: &str, ok: bool) -> Event {
        Event::Check {
            rank,
            name: name.into(),
            ok,
            detail: if ok {
                String::new()
            } else {
                "expected 3, got 2".into()
            },
            ms: 0.5,
        }
    }

    #[test]
    fn lines_wait_for_every_rank_and_name_the_dead() {
        let mut r = Report::new(vec![0, 1], 2);
        assert_eq!(r.add(check(0, "a", true)), "");
        assert!(r.add(check(1, "a", true)).starts_with("PASS  a"));
        assert_eq!(r.add(check(0, "b", false)), "");
        let text = r.ended(1, RankEnd::Signaled(9));
        assert!(
            text.contains("FAIL  b") && text.contains("rank 0: expected 3, got 2"),
            "{text}"
        );
        assert!(
            text.contains("rank 1: no result (died: killed by signal 9 (SIGKILL))"),
            "{text}"
        );
        r.add(Event::Done { rank: 0, ok: false });
        r.ended(0, RankEnd::Exited(1));
        assert!(!r.passed());
        let v = r.verdict(1.0, "gloo");
        assert!(
            v.starts_with("verdict: FAIL") && v.contains("rank 1 died"),
            "{v}"
        );
    }

    #[test]
    fn columns_align_for_python_names_and_bench_has_units() {
        let mut r = Report::new(vec![0], 1);
        let a = r.add(check(0, "all_reduce.sum float32[1048576]", true));
        let b = r.add(check(0, "python.all_reduce.sum float32[1048576]", true));
        let col = |l: &str| l.find("rank 0").unwrap();
        assert_eq!(col(&a), col(&b), "{a}{b}");
        let t = r.add(Event::Bench {
            rank: 0,
            row: BenchRow {
                op: "all_reduce".into(),
                dtype: "float32".into(),
                size: 1024,
                count: 256,
                iters: 100,
                time_us: 12.5,
                algbw: 0.08,
                busbw: 0.0,
            },
        });
        let mut lines = t.lines();
        let header = lines.next().unwrap();
        assert!(
            header.contains("time(us)")
                && header.contains("algbw(GB/s)")
                && header.contains("busbw(GB/s)"),
            "{header}"
        );
        let row = lines.next().unwrap();
        assert_eq!(header.len(), row.len(), "{header}\n{row}");
    }

    #[test]
    fn all_pass() {
        let mut r = Report::new(vec![0], 1);
        r.add(check(0, "a", true));
        r.add(Event::Done { rank: 0, ok: true });
        r.ended(0, RankEnd::Exited(0));
        assert!(r.passed());
        assert!(r
            .verdict(0.2, "gloo")
            .starts_with("verdict: PASS  1 checks passed on rank 0"));
    }

    #[test]
    fn nccl_tests_bandwidth() {
        let (alg, bus) = bandwidth("all_reduce", 4, 1_000_000_000, 1e6);
        assert!((alg - 1.0).abs() < 1e-9 && (bus - 1.5).abs() < 1e-9);
        let (_, bus) = bandwidth("all_gather", 4, 1_000_000_000, 1e6);
        assert!((bus - 0.75).abs() < 1e-9);
        assert_eq!(bus_factor("all_reduce", 1), 0.0);
    }

    #[test]
    fn events_round_trip() {
        let e = check(3, "x", true);
        let back: Event = serde_json::from_str(e.to_line().trim()).unwrap();
        assert_eq!(back, e);
    }
}
