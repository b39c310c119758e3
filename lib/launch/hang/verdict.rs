//! The world's hang verdict on many nodes. A node's launcher sees only its own ranks, and ranks that
//! wait in a collective may be waiting for a rank of another node that is busy computing: on many
//! nodes no launcher may declare a hang from its own ranks alone. Instead:
//!
//! - each node reports its ranks' stillness to node 0 over the [`control`](crate::launch::control) plane once
//!   they have been still for half of `--hang_timeout`, and again when they move ([`Reporter`]);
//! - node 0's [`World`] declares the hang only when every node's ranks have been still for the whole
//!   timeout, then asks every node for its ranks' stacks; each node takes them itself, in parallel
//!   ([`DUMP_TIMEOUT`] per rank), writes its full dumps and answers;
//! - once every node has answered (a node that does not within [`SILENT_AFTER`] is named as silent),
//!   node 0 groups the world's stacks into one verdict and sends it to every node; each prints it and
//!   stops its ranks, and every launcher exits 124;
//! - a node that answered and hears no verdict within [`NO_VERDICT_AFTER`] reports on its own.
//!
//! [`World`] and [`Reporter`] are pure (unit-tested below); the wire and the ranks are the
//! control plane's and the supervisor's.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::autopsy::{self, RankStack, Thread};

/// The bound on one rank's py-spy dump when node 0 asks for the stacks.
pub const DUMP_TIMEOUT: Duration = Duration::from_secs(4);
/// A node that sends no stacks this long after node 0 asked is named as silent in the verdict.
pub const SILENT_AFTER: Duration = Duration::from_secs(10);
/// A node that sent its stacks and hears no verdict this long after reports on its own.
pub const NO_VERDICT_AFTER: Duration = Duration::from_secs(20);
/// The stacks of one node, serialized, beyond which only main threads are sent (the control plane
/// takes lines of at most 1 MiB; the full dumps are on the node's disk).
const WIRE_LIMIT: usize = 768 << 10;

/// One rank's stacks as a node sends them to node 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireStack {
    pub rank: u32,
    pub node: u32,
    pub pid: i32,
    pub state: char,
    #[serde(default)]
    pub threads: Option<Vec<Thread>>,
    /// Why the stacks could not be taken.
    #[serde(default)]
    pub error: Option<String>,
}

impl WireStack {
    fn of(s: &RankStack) -> WireStack {
        let (threads, error) = match &s.threads {
            Ok(t) => (Some(t.clone()), None),
            Err(e) => (None, Some(e.clone())),
        };
        WireStack {
            rank: s.rank,
            node: s.node,
            pid: s.pid,
            state: s.state,
            threads,
            error,
        }
    }

    fn stack(&self) -> RankStack {
        RankStack {
            rank: self.rank,
            node: self.node,
            pid: self.pid,
            state: self.state,
            threads: match &self.threads {
                Some(t) => Ok(t.clone()),
                None => Err(self.error.clone().unwrap_or_else(|| "unknown".into())),
            },
        }
    }
}

/// A node's stacks for the wire: every thread, or only the main ones when that is too long.
pub fn to_wire(stacks: &[RankStack]) -> Vec<WireStack> {
    let mut v: Vec<WireStack> = stacks.iter().map(WireStack::of).collect();
    let size = serde_json::to_vec(&v).map_or(usize::MAX, |b| b.len());
    if size > WIRE_LIMIT {
        for (w, s) in v.iter_mut().zip(stacks) {
            w.threads = s.main_frames().map(|f| {
                vec![Thread {
                    thread_name: Some("MainThread".into()),
                    os_thread_id: None,
                    pid: None,
                    frames: f.iter().take(200).cloned().collect(),
                }]
            });
        }
    }
    v
}

/// What node 0 knows of a node of the run, for the verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub host: String,
    pub first_rank: u32,
    pub ranks: u32,
}

/// The verdict node 0 sends to every node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The line after `accel-launch: hang: `.
    pub line: String,
    /// The grouped stacks, as printed after the line.
    pub stacks: String,
    /// How long every node's ranks had been still when the hang was declared.
    pub quiet: Duration,
}

/// What node 0's judgement asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Act {
    /// Every node's ranks have been still for the timeout: ask every node for its stacks.
    Ask,
    /// The stacks are in (or the silent nodes named): tell every node.
    Verdict(Verdict),
    /// A node lost while the world was still turned out not to be part of a hang (another node
    /// moved): its loss is a failure after all.
    Lost { node: u32, why: String },
}

#[derive(Debug)]
struct Asked {
    at: Instant,
    quiet: Duration,
    answers: BTreeMap<u32, Vec<WireStack>>,
}

/// Node 0's judgement of one attempt: which nodes' ranks are still since when, and the autopsy.
#[derive(Debug)]
pub struct World {
    timeout: Duration,
    nodes: BTreeMap<u32, NodeInfo>,
    /// Since when each node's ranks have been still; `None` while they move.
    still: BTreeMap<u32, Option<Instant>>,
    /// Nodes whose ranks have all ended: still, and with nothing to dump.
    ended: BTreeSet<u32>,
    /// Nodes lost while every node was still, with why: silent in the verdict.
    lost: BTreeMap<u32, String>,
    asked: Option<Asked>,
    done: bool,
}

impl World {
    pub fn new(timeout: Duration, nodes: BTreeMap<u32, NodeInfo>) -> World {
        let still = nodes.keys().map(|n| (*n, None)).collect();
        World {
            timeout,
            nodes,
            still,
            ended: BTreeSet::new(),
            lost: BTreeMap::new(),
            asked: None,
            done: false,
        }
    }

    /// Whether the hang was declared (the stacks asked for): the decision stands from then on.
    pub fn declared(&self) -> bool {
        self.asked.is_some() || self.done
    }

    /// A node's report: its ranks have been still for `quiet`, or (`None`) they move.
    pub fn quiet(&mut self, now: Instant, node: u32, quiet: Option<Duration>) -> Vec<Act> {
        if self.declared() || !self.still.contains_key(&node) || self.ended.contains(&node) {
            return Vec::new();
        }
        self.still
            .insert(node, quiet.map(|q| now.checked_sub(q).unwrap_or(now)));
        if quiet.is_none() {
            // The world moves: a node lost meanwhile was lost, not hung.
            return std::mem::take(&mut self.lost)
                .into_iter()
                .map(|(node, why)| Act::Lost { node, why })
                .collect();
        }
        Vec::new()
    }

    /// Every rank of the node ended: it is still from now on, and has nothing to dump. Ranks ending
    /// are a change of the world: a node lost meanwhile was lost, not hung.
    pub fn ended(&mut self, now: Instant, node: u32) -> Vec<Act> {
        if let Some(s) = self.still.get_mut(&node) {
            s.get_or_insert(now);
        }
        self.ended.insert(node);
        if self.declared() {
            return Vec::new();
        }
        std::mem::take(&mut self.lost)
            .into_iter()
            .map(|(node, why)| Act::Lost { node, why })
            .collect()
    }

    /// A node was lost. `true`: the judgement keeps it as a silent node (every node was still, or
    /// the hang is declared), and the caller does not stop the world for it (yet).
    pub fn lost(&mut self, node: u32, why: &str) -> bool {
        if self.done || !self.still.contains_key(&node) || self.ended.contains(&node) {
            return false;
        }
        let all_still = self.still.values().all(Option::is_some);
        // Someone must be left to be hung: with every other node ended or lost, this is a loss.
        let left = self
            .nodes
            .len()
            .saturating_sub(self.ended.len() + self.lost.len());
        if !(self.declared() || all_still) || left <= 1 {
            return false;
        }
        self.lost.insert(node, why.to_string());
        true
    }

    /// A node's stacks, in answer to [`Act::Ask`].
    pub fn stacks(&mut self, now: Instant, node: u32, stacks: Vec<WireStack>) -> Vec<Act> {
        if let Some(a) = self.asked.as_mut() {
            a.answers.insert(node, stacks);
        }
        self.tick(now)
    }

    /// Time-driven decisions: the hang once every node has been still for the timeout; the verdict
    /// once every node answered or [`SILENT_AFTER`] passed.
    pub fn tick(&mut self, now: Instant) -> Vec<Act> {
        if self.done {
            return Vec::new();
        }
        if let Some(a) = &self.asked {
            let all = self.nodes.keys().all(|n| {
                a.answers.contains_key(n) || self.ended.contains(n) || self.lost.contains_key(n)
            });
            if all || now.saturating_duration_since(a.at) >= SILENT_AFTER {
                self.done = true;
                return vec![Act::Verdict(self.verdict())];
            }
            return Vec::new();
        }
        // Nodes whose ranks all ended are not a hang on their own: someone must be waiting.
        if self.ended.len() + self.lost.len() >= self.nodes.len() {
            return Vec::new();
        }
        match self.still_since() {
            Some(since) if now.saturating_duration_since(since) >= self.timeout => {
                self.asked = Some(Asked {
                    at: now,
                    quiet: now.saturating_duration_since(since),
                    answers: BTreeMap::new(),
                });
                // Lost nodes cannot answer: a world of only lost nodes has its verdict at once.
                let mut out = vec![Act::Ask];
                out.extend(self.tick(now));
                out
            }
            _ => Vec::new(),
        }
    }

    /// When the world has been still since: the latest of the nodes' `since`, once all are still.
    fn still_since(&self) -> Option<Instant> {
        let mut latest: Option<Instant> = None;
        for s in self.still.values() {
            let s = (*s)?;
            latest = Some(latest.map_or(s, |l| l.max(s)));
        }
        latest
    }

    /// When [`tick`](World::tick) next has something to decide.
    pub fn next_wake(&self) -> Option<Instant> {
        if self.done {
            return None;
        }
        match &self.asked {
            Some(a) => Some(a.at + SILENT_AFTER),
            None => self.still_since().map(|s| s + self.timeout),
        }
    }

    fn verdict(&self) -> Verdict {
        let empty = BTreeMap::new();
        let answers = self.asked.as_ref().map_or(&empty, |a| &a.answers);
        let stacks: Vec<RankStack> = answers.values().flatten().map(WireStack::stack).collect();
        let groups = autopsy::group(&stacks);
        let mut parts = Vec::new();
        if !groups.is_empty() {
            parts.push(autopsy::verdict(&groups));
        }
        for (n, info) in &self.nodes {
            if answers.contains_key(n) {
                continue;
            }
            let who = ranks_of(*n, info);
            let host = &info.host;
            if self.ended.contains(n) {
                parts.push(format!("{who} had ended"));
            } else if let Some(why) = self.lost.get(n) {
                parts.push(format!(
                    "{who}: unknown, node {n} ({host}) was lost before it sent its stacks ({why})"
                ));
            } else {
                parts.push(format!(
                    "{who}: unknown, node {n} ({host}) is silent (no stacks within {} s)",
                    SILENT_AFTER.as_secs()
                ));
            }
        }
        Verdict {
            line: parts.join("; "),
            stacks: autopsy::render_groups(&groups),
            quiet: self.asked.as_ref().map_or(self.timeout, |a| a.quiet),
        }
    }
}

fn ranks_of(node: u32, info: &NodeInfo) -> String {
    let list: Vec<String> = (info.first_rank..info.first_rank + info.ranks)
        .map(|r| r.to_string())
        .collect();
    let rank = if info.ranks == 1 { "rank" } else { "ranks" };
    format!("{rank} {} (node {node})", list.join(","))
}

/// A node's side: when to report its ranks' stillness to node 0, and when to stop waiting for the
/// world's verdict.
#[derive(Debug)]
pub struct Reporter {
    half: Duration,
    reported_still: bool,
    answered: Option<Instant>,
}

impl Reporter {
    pub fn new(timeout: Duration) -> Reporter {
        Reporter {
            half: timeout / 2,
            reported_still: false,
            answered: None,
        }
    }

    /// This node's ranks have been still for `quiet`: what to report, if anything (`Some(None)`:
    /// they move again after a report of stillness).
    pub fn quiet(&mut self, quiet: Duration) -> Option<Option<Duration>> {
        match (self.reported_still, quiet >= self.half) {
            (false, true) => {
                self.reported_still = true;
                Some(Some(quiet))
            }
            (true, false) => {
                self.reported_still = false;
                Some(None)
            }
            _ => None,
        }
    }

    /// This node sent its stacks at `now`.
    pub fn answered(&mut self, now: Instant) {
        self.answered.get_or_insert(now);
    }

    /// The node sent its stacks and no verdict came: it reports on its own.
    pub fn verdict_overdue(&self, now: Instant) -> bool {
        self.answered
            .is_some_and(|t| now.saturating_duration_since(t) >= NO_VERDICT_AFTER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::hang::autopsy::Frame;

    fn world(timeout: u64) -> World {
        let nodes = (0..2)
            .map(|n| {
                (
                    n,
                    NodeInfo {
                        host: format!("h{n}"),
                        first_rank: 2 * n,
                        ranks: 2,
                    },
                )
            })
            .collect();
        World::new(Duration::from_secs(timeout), nodes)
    }

    fn frame(name: &str, file: &str, line: i64) -> Frame {
        Frame {
            name: name.into(),
            filename: file.into(),
            short_filename: Some(file.rsplit('/').next().unwrap_or(file).into()),
            line,
        }
    }

    fn wire(rank: u32, node: u32, frames: Vec<Frame>) -> WireStack {
        WireStack {
            rank,
            node,
            pid: 100 + rank as i32,
            state: 'S',
            threads: Some(vec![Thread {
                thread_name: Some("MainThread".into()),
                os_thread_id: None,
                pid: None,
                frames,
            }]),
            error: None,
        }
    }

    const C10D: &str = "/v/site-packages/torch/distributed/distributed_c10d.py";

    fn waiting(rank: u32, node: u32) -> WireStack {
        wire(
            rank,
            node,
            vec![
                frame("all_reduce", C10D, 3000),
                frame("main", "/w/train.py", 57),
            ],
        )
    }

    #[test]
    fn one_still_node_is_not_a_hang_while_another_moves() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut w = world(10);
        // Node 0's ranks wait from t=0 (reported at half the timeout); node 1 computes until 25.
        assert!(w.quiet(s(5), 0, Some(Duration::from_secs(5))).is_empty());
        for n in 5..=30 {
            assert!(w.tick(s(n)).is_empty(), "at {n}");
        }
        assert_eq!(w.next_wake(), None);
        // Node 1 stops moving at 25 and says so at 30: the world is still since 25.
        w.quiet(s(30), 1, Some(Duration::from_secs(5)));
        assert_eq!(w.next_wake(), Some(s(35)));
        assert!(w.tick(s(34)).is_empty());
        assert_eq!(w.tick(s(35)), vec![Act::Ask]);
        assert!(w.declared());
    }

    #[test]
    fn moving_again_withdraws_a_report() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut w = world(10);
        w.quiet(s(5), 0, Some(Duration::from_secs(5)));
        w.quiet(s(5), 1, Some(Duration::from_secs(5)));
        w.quiet(s(8), 1, None);
        assert!(w.tick(s(12)).is_empty());
        w.quiet(s(13), 1, Some(Duration::from_secs(5)));
        assert!(w.tick(s(17)).is_empty());
        assert_eq!(w.tick(s(18)), vec![Act::Ask]);
    }

    #[test]
    fn the_verdict_names_the_rank_of_the_other_node_and_the_waiting_ones() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut w = world(10);
        w.quiet(s(5), 0, Some(Duration::from_secs(5)));
        w.quiet(s(6), 1, Some(Duration::from_secs(5)));
        assert_eq!(w.tick(s(11)), vec![Act::Ask]);
        assert!(w
            .stacks(
                s(12),
                1,
                vec![
                    waiting(2, 1),
                    wire(
                        3,
                        1,
                        vec![frame("stuck_in_data_loading", "/w/train.py", 42)]
                    ),
                ]
            )
            .is_empty());
        let out = w.stacks(s(12), 0, vec![waiting(0, 0), waiting(1, 0)]);
        let [Act::Verdict(v)] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(
            v.line,
            "rank 3 (node 1) is in stuck_in_data_loading (train.py:42); ranks 0,1,2 (nodes 0,1) wait in all_reduce (train.py:57)"
        );
        assert!(v.stacks.contains("ranks 0,1,2 (nodes 0,1)"), "{}", v.stacks);
        assert_eq!(v.quiet, Duration::from_secs(10));
        // Once given, nothing more.
        assert!(w.tick(s(30)).is_empty());
    }

    #[test]
    fn a_node_that_does_not_answer_is_named_silent() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut w = world(10);
        w.quiet(s(5), 0, Some(Duration::from_secs(5)));
        w.quiet(s(5), 1, Some(Duration::from_secs(5)));
        assert_eq!(w.tick(s(10)), vec![Act::Ask]);
        assert!(w
            .stacks(s(11), 0, vec![waiting(0, 0), waiting(1, 0)])
            .is_empty());
        assert_eq!(w.next_wake(), Some(s(20)));
        assert!(w.tick(s(19)).is_empty());
        let out = w.tick(s(20));
        let [Act::Verdict(v)] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(
            v.line,
            "ranks 0,1 (node 0) wait in all_reduce (train.py:57); ranks 2,3 (node 1): unknown, node 1 (h1) is silent (no stacks within 10 s)"
        );
    }

    #[test]
    fn a_node_lost_while_the_world_is_still_is_silent_unless_the_world_moves() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        // Lost before every node was still: a plain loss.
        let mut w = world(10);
        w.quiet(s(5), 0, Some(Duration::from_secs(5)));
        assert!(!w.lost(1, "no heartbeat for 5 s"));
        // Lost once every node was still: kept for the verdict, which comes without waiting for it.
        let mut w = world(10);
        w.quiet(s(5), 0, Some(Duration::from_secs(5)));
        w.quiet(s(5), 1, Some(Duration::from_secs(5)));
        assert!(w.lost(1, "no heartbeat for 5 s"));
        assert_eq!(w.tick(s(10)), vec![Act::Ask]);
        let out = w.stacks(s(11), 0, vec![waiting(0, 0), waiting(1, 0)]);
        let [Act::Verdict(v)] = &out[..] else {
            panic!("{out:?}")
        };
        assert!(
            v.line.ends_with("ranks 2,3 (node 1): unknown, node 1 (h1) was lost before it sent its stacks (no heartbeat for 5 s)"),
            "{}",
            v.line
        );
        // Lost while still, then node 0 moves: the loss is a failure after all.
        let mut w = world(10);
        w.quiet(s(5), 0, Some(Duration::from_secs(5)));
        w.quiet(s(5), 1, Some(Duration::from_secs(5)));
        assert!(w.lost(1, "gone"));
        assert_eq!(
            w.quiet(s(7), 0, None),
            vec![Act::Lost {
                node: 1,
                why: "gone".into()
            }]
        );
    }

    #[test]
    fn ended_nodes_count_as_still_and_need_no_answer() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut w = world(10);
        assert!(w.ended(s(2), 1).is_empty());
        // With node 1's ranks ended, node 0 is the last one left: its loss is a loss.
        assert!(!w.lost(0, "gone"));
        w.quiet(s(5), 0, Some(Duration::from_secs(5)));
        // Still since node 1's end, the later of the two.
        assert!(w.tick(s(11)).is_empty());
        assert_eq!(w.tick(s(12)), vec![Act::Ask]);
        let out = w.stacks(s(13), 0, vec![waiting(0, 0), waiting(1, 0)]);
        let [Act::Verdict(v)] = &out[..] else {
            panic!("{out:?}")
        };
        assert!(
            v.line.ends_with("; ranks 2,3 (node 1) had ended"),
            "{}",
            v.line
        );
    }

    #[test]
    fn the_reporter_reports_at_half_the_timeout_and_on_change() {
        let mut r = Reporter::new(Duration::from_secs(10));
        assert_eq!(r.quiet(Duration::from_secs(4)), None);
        assert_eq!(
            r.quiet(Duration::from_secs(5)),
            Some(Some(Duration::from_secs(5)))
        );
        assert_eq!(r.quiet(Duration::from_secs(9)), None);
        assert_eq!(r.quiet(Duration::ZERO), Some(None));
        assert_eq!(r.quiet(Duration::from_secs(1)), None);
        let t0 = Instant::now();
        assert!(!r.verdict_overdue(t0));
        r.answered(t0);
        assert!(!r.verdict_overdue(t0 + Duration::from_secs(19)));
        assert!(r.verdict_overdue(t0 + NO_VERDICT_AFTER));
    }

    #[test]
    fn stacks_cross_the_wire_and_shrink_when_too_long() {
        let s = waiting(0, 0).stack();
        let w = to_wire(std::slice::from_ref(&s));
        let text = serde_json::to_string(&w).unwrap();
        let back: Vec<WireStack> = serde_json::from_str(&text).unwrap();
        assert_eq!(back[0].stack(), s);
        let mut big = s.clone();
        let mut threads = big.threads.clone().unwrap();
        let many = Thread {
            thread_name: Some("worker".into()),
            os_thread_id: Some(1),
            pid: Some(100),
            frames: (0..10_000)
                .map(|i| frame("f", "/w/long_file_name.py", i))
                .collect(),
        };
        threads.push(many);
        big.threads = Ok(threads);
        let w = to_wire(&[big]);
        assert_eq!(w[0].threads.as_ref().unwrap().len(), 1);
        assert!(serde_json::to_vec(&w).unwrap().len() < WIRE_LIMIT);
    }
}
