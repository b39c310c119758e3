//! `accel-test --probe`: which node, link or rank is slow, before a job spends a day at its pace.
//!
//! Collectives run at the speed of the slowest link and the slowest rank, and nothing else names
//! them. After the correctness checks, the ranks measure (bin/accel-test/torch/probe.rs):
//! - links between nodes: one leading rank per node (local rank 0), the node pairs in the rounds of a
//!   round-robin tournament ([`rounds`]), so that each node is in one pair at a time; per pair the
//!   latency (ping-pong of a small message) and the bandwidth each way (messages of up to
//!   [`MAX_MESSAGE`], sized so that a slow link still takes about [`TARGET`]: [`transfer_plan`]);
//! - links within each node, the same way between its local ranks (every node at once);
//! - compute: the same matmul on every rank ([`Workload`]).
//!
//! This module holds what needs no libtorch: the schedule, the plan of a transfer, the data the
//! ranks send back, the verdict ([`analyze`]: what is slower than the median by more than the
//! threshold) and its table ([`render`]) and JSON ([`to_json`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::world::Device;

/// The largest message of a bandwidth measurement.
pub const MAX_MESSAGE: u64 = 64 << 20;
/// The smallest measured message, however slow the link.
pub const MIN_MESSAGE: u64 = 256 << 10;
/// How long one measurement of one direction of a link takes, about (two or more are made: see
/// [`Measurements`]): a fast link sends `MAX_MESSAGE` up to [`MAX_REPS`] times in less; a slow one
/// gets a smaller message.
pub const TARGET: Duration = Duration::from_millis(250);
/// Repeats of the measured message, at most.
pub const MAX_REPS: u32 = 8;
/// The growing first transfers that estimate a link's rate (each acknowledged): the first one that
/// takes [`ESTIMATE_TIME`] or more, or the last, gives the estimate. Growing, so that a token
/// bucket's burst (a policer, `tc tbf`) cannot pass for the link's rate.
pub const ESTIMATE_SIZES: [u64; 6] = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20];
pub const ESTIMATE_TIME: Duration = Duration::from_millis(20);
/// The latency message: one float64.
pub const LATENCY_BYTES: u64 = 8;
pub const LATENCY_WARMUP: u32 = 5;
/// Round trips timed per pair; half the median is the latency.
pub const LATENCY_ITERS: u32 = 30;
/// Times the compute workload runs per rank; the best counts.
pub const COMPUTE_TRIALS: u32 = 5;

/// What --probe measures (`--probe`, `--probe=links`, `--probe=compute`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parts {
    pub links: bool,
    pub compute: bool,
}

impl Parts {
    pub const ALL: Parts = Parts {
        links: true,
        compute: true,
    };

    /// `all`, or a comma-separated list of `links` and `compute`.
    pub fn parse(s: &str) -> Result<Parts, String> {
        let mut p = Parts {
            links: false,
            compute: false,
        };
        for w in s.split(',').map(str::trim) {
            match w {
                "all" => p = Parts::ALL,
                "links" => p.links = true,
                "compute" => p.compute = true,
                _ => {
                    return Err(format!(
                        "`{w}` is not a probe part (use links, compute or all)"
                    ))
                }
            }
        }
        Ok(p)
    }

    /// The value a worker gets (`links,compute`).
    pub fn arg(self) -> String {
        let mut v = Vec::new();
        if self.links {
            v.push("links");
        }
        if self.compute {
            v.push("compute");
        }
        v.join(",")
    }
}

/// The rounds of a round-robin tournament between `n` members (the circle method): every pair
/// exactly once, each member in at most one pair per round; `n - 1` rounds for an even `n`, `n` for
/// an odd one (each member sits one round out). Pairs are `(low, high)`.
pub fn rounds(n: usize) -> Vec<Vec<(usize, usize)>> {
    if n < 2 {
        return Vec::new();
    }
    // An odd count gets a phantom member `n`: its partner sits the round out.
    let m = n + n % 2;
    let mut ring: Vec<usize> = (0..m).collect();
    let mut out = Vec::with_capacity(m - 1);
    for _ in 0..m - 1 {
        let round = (0..m / 2)
            .map(|i| (ring[i], ring[m - 1 - i]))
            .filter(|&(a, b)| a < n && b < n)
            .map(|(a, b)| (a.min(b), a.max(b)))
            .collect();
        out.push(round);
        // Everyone but the first moves one seat around the circle.
        if let Some(last) = ring.pop() {
            ring.insert(1, last);
        }
    }
    out
}

/// `me`'s partners in round order.
pub fn partners(n: usize, me: usize) -> Vec<usize> {
    partners_in(&rounds(n), me)
}

/// `me`'s partners in `rounds`, in round order.
pub fn partners_in(rounds: &[Vec<(usize, usize)>], me: usize) -> Vec<usize> {
    rounds
        .iter()
        .filter_map(|r| {
            r.iter().find_map(|&(a, b)| {
                if a == me {
                    Some(b)
                } else if b == me {
                    Some(a)
                } else {
                    None
                }
            })
        })
        .collect()
}

/// The node pairs measured again before the verdict: on the first measurements between nodes
/// (`edges`: from node, to node, Gbit/s), every pair of a node the verdict would name and every pair
/// whose link it would name by itself, at `threshold`. A stall of the machine or a burst of other
/// traffic while a pair has its turn makes that pair slow once; a NIC that negotiated a lower rate,
/// or a bad cable, is slow again. Then the better of the two measurements of each direction counts
/// ([`keep_best`]), as within one measurement the best of its runs does. Pairs are `(low, high)`.
pub fn recheck_pairs(edges: &[(usize, usize, f64)], threshold: f64) -> Vec<(usize, usize)> {
    let edges: Vec<Edge> = edges
        .iter()
        .map(|&(from, to, gbps)| Edge { from, to, gbps })
        .collect();
    let (members, links) = judge(&edges, 1.0 - threshold);
    let mut pairs = BTreeSet::new();
    for m in &members {
        for e in edges
            .iter()
            .filter(|e| e.from == m.member || e.to == m.member)
        {
            pairs.insert((e.from.min(e.to), e.from.max(e.to)));
        }
    }
    for l in &links {
        pairs.insert((l.from.min(l.to), l.from.max(l.to)));
    }
    pairs.into_iter().filter(|(a, b)| a != b).collect()
}

/// The ranks whose compute is measured again before the verdict: those below (1 - `threshold`) ×
/// the median of the first measurements (`gflops`: rank, GFLOP/s), as the verdict would name them.
/// A core taken by something else for a few seconds is slow once; a throttled GPU or a core shared
/// for good is slow again. Sorted.
pub fn recheck_ranks(gflops: &[(usize, f64)], threshold: f64) -> Vec<usize> {
    if gflops.len() < 2 {
        return Vec::new();
    }
    let vals: Vec<f64> = gflops.iter().map(|g| g.1).collect();
    let Some(med) = median(&vals).filter(|m| *m > 0.0) else {
        return Vec::new();
    };
    let mut slow: Vec<usize> = gflops
        .iter()
        .filter(|g| g.1 < (1.0 - threshold) * med)
        .map(|g| g.0)
        .collect();
    slow.sort_unstable();
    slow.dedup();
    slow
}

/// `pairs` in rounds, each member in at most one pair per round: each pair goes into the first
/// round after its members' earlier pairs (so that every member meets its partners in round order,
/// and pairs that exchange blocking messages cannot wait on each other in a cycle).
pub fn pair_rounds(pairs: &[(usize, usize)]) -> Vec<Vec<(usize, usize)>> {
    let mut next: BTreeMap<usize, usize> = BTreeMap::new();
    let mut out: Vec<Vec<(usize, usize)>> = Vec::new();
    for &(a, b) in pairs {
        let r = next
            .get(&a)
            .copied()
            .unwrap_or(0)
            .max(next.get(&b).copied().unwrap_or(0));
        if out.len() <= r {
            out.resize_with(r + 1, Vec::new);
        }
        out[r].push((a.min(b), a.max(b)));
        next.insert(a, r + 1);
        next.insert(b, r + 1);
    }
    out
}

/// Keeps, for each direction measured `again`, the faster of its two measurements.
pub fn keep_best(links: &mut Vec<Link>, again: Vec<Link>) {
    for l in again {
        match links.iter_mut().find(|o| o.from == l.from && o.to == l.to) {
            Some(o) if o.gbps() >= l.gbps() => {}
            Some(o) => *o = l,
            None => links.push(l),
        }
    }
}

/// The measured transfer for a link estimated at `bytes_per_s`: a message of up to [`MAX_MESSAGE`]
/// (at least [`MIN_MESSAGE`], a multiple of 64 KiB) sent `reps` times, about [`TARGET`] in all.
pub fn transfer_plan(bytes_per_s: f64) -> (u64, u32) {
    let want = (bytes_per_s * TARGET.as_secs_f64()).max(0.0);
    let size = ((want as u64).clamp(MIN_MESSAGE, MAX_MESSAGE) >> 16) << 16;
    let reps = (want / size as f64).floor().clamp(1.0, f64::from(MAX_REPS)) as u32;
    (size, reps)
}

/// The measurements of one direction of a link: each sized by [`transfer_plan`] from the best rate
/// seen so far (the estimate first), until [`FULL_RUNS`] of them were full size (at least half of
/// [`TARGET`], or the largest plan there is) or [`MAX_RUNS`] were made. The best full one counts
/// (the best of all when none was full).
#[derive(Debug, Clone)]
pub struct Measurements {
    best_rate: f64,
    runs: Vec<(u64, f64, bool)>,
}

pub const FULL_RUNS: usize = 2;
pub const MAX_RUNS: usize = 4;

impl Measurements {
    /// From the estimate: `bytes` in `seconds`.
    pub fn new(bytes: u64, seconds: f64) -> Measurements {
        Measurements {
            best_rate: bytes as f64 / seconds.max(1e-9),
            runs: Vec::new(),
        }
    }

    /// The next transfer to make, or None when done.
    pub fn next_plan(&self) -> Option<(u64, u32)> {
        let full = self.runs.iter().filter(|r| r.2).count();
        (full < FULL_RUNS && self.runs.len() < MAX_RUNS).then(|| transfer_plan(self.best_rate))
    }

    pub fn add(&mut self, size: u64, reps: u32, seconds: f64) {
        let bytes = size * u64::from(reps);
        let full = seconds >= TARGET.as_secs_f64() / 2.0 || (size, reps) == (MAX_MESSAGE, MAX_REPS);
        self.best_rate = self.best_rate.max(bytes as f64 / seconds.max(1e-9));
        self.runs.push((bytes, seconds, full));
    }

    /// (bytes, seconds) of the measurement that counts.
    pub fn best(&self) -> (u64, f64) {
        let rate = |r: &&(u64, f64, bool)| r.0 as f64 / r.1.max(1e-9);
        let pick = |full: bool| {
            self.runs
                .iter()
                .filter(|r| r.2 || !full)
                .max_by(|a, b| rate(a).total_cmp(&rate(b)))
        };
        pick(true)
            .or_else(|| pick(false))
            .map_or((0, 0.0), |r| (r.0, r.1))
    }
}

/// A transfer header from the sending rank: `(0, 0)` ends the exchange (None); anything else must be
/// a size and repeat count the plan can produce, since it sizes the receiver's buffer.
pub fn check_header(size: i64, reps: i64) -> Result<Option<(u64, u32)>, String> {
    if size == 0 && reps == 0 {
        return Ok(None);
    }
    let ok_size = size >= 1 && size as u64 <= MAX_MESSAGE;
    let ok_reps = reps >= 1 && reps <= i64::from(MAX_REPS);
    if ok_size && ok_reps {
        Ok(Some((size as u64, reps as u32)))
    } else {
        Err(format!(
            "bad transfer header from the peer: {size} bytes × {reps} (at most {MAX_MESSAGE} × {MAX_REPS})"
        ))
    }
}

/// The compute workload: `reps` products of two `n`×`n` matrices of `dtype`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Workload {
    pub dtype: &'static str,
    pub n: i64,
    pub reps: u32,
}

/// How long one CPU trial lasts at least: many scheduler slices. A core shared with a busy process
/// gives a rank that just woke from its wait for its turn the core alone for its first slices; in a
/// trial of one 1024×1024 product (18 ms on an AVX-512 core) the best of the trials caught such a
/// start and the shared rank measured 78% of the others' rate, not about half.
pub const CPU_TRIAL: Duration = Duration::from_millis(100);
/// The most products in one CPU trial.
pub const MAX_CPU_REPS: u32 = 64;

/// The products in one CPU trial, from the time of one (`one`, measured by rank 0 and used by
/// every rank): enough for [`CPU_TRIAL`].
pub fn cpu_reps(one: Duration) -> u32 {
    let one = one.as_secs_f64();
    if !one.is_finite() || one <= 0.0 {
        return MAX_CPU_REPS;
    }
    (CPU_TRIAL.as_secs_f64() / one)
        .ceil()
        .clamp(1.0, f64::from(MAX_CPU_REPS)) as u32
}

impl Workload {
    /// float32 1024×1024 on CPU (repeated to at least [`CPU_TRIAL`] per trial: [`cpu_reps`]);
    /// bfloat16 8192×8192 ×4 on CUDA (a few ms on a current GPU), so that the GPU's time is not the
    /// launch overhead.
    pub fn of(device: Device) -> Workload {
        match device {
            Device::Cpu => Workload {
                dtype: "float32",
                n: 1024,
                reps: 1,
            },
            Device::Cuda => Workload {
                dtype: "bfloat16",
                n: 8192,
                reps: 4,
            },
        }
    }

    pub fn gflop(&self) -> f64 {
        2.0 * (self.n as f64).powi(3) * f64::from(self.reps) / 1e9
    }

    pub fn describe(&self, device: Device) -> String {
        let reps = if self.reps > 1 {
            format!(" ×{}", self.reps)
        } else {
            String::new()
        };
        let order = match device {
            Device::Cpu => "ranks one at a time",
            Device::Cuda => "every rank at once",
        };
        format!(
            "{} {n}×{n} matmul{reps} on {}, best of {COMPUTE_TRIALS}, {order}",
            self.dtype,
            device.name(),
            n = self.n
        )
    }
}

/// Where a rank runs. Nodes are numbered by machine rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankInfo {
    pub rank: usize,
    pub node: usize,
    pub local_rank: usize,
    pub host: String,
}

/// One direction of a link, as its sender timed it: `bytes` reached `to` in `seconds` (until its
/// acknowledgement came back).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    pub from: usize,
    pub to: usize,
    pub bytes: u64,
    pub seconds: f64,
}

impl Link {
    pub fn gbps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 * 8.0 / self.seconds / 1e9
        } else {
            0.0
        }
    }
}

/// One way latency between ranks `a` and `b`: half the median round trip.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub a: usize,
    pub b: usize,
    pub us: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compute {
    pub rank: usize,
    pub gflops: f64,
}

/// What one rank measured (the sender's side of each link).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub info: RankInfo,
    #[serde(default)]
    pub links: Vec<Link>,
    #[serde(default)]
    pub latency: Vec<Latency>,
    #[serde(default)]
    pub compute: Option<Compute>,
}

/// The whole world's measurements, as rank 0 gathers them and every node's first rank reports them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeData {
    pub parts: Parts,
    /// `cpu` (gloo) or `cuda` (NCCL).
    pub device: String,
    pub ranks: Vec<RankInfo>,
    pub links: Vec<Link>,
    pub latency: Vec<Latency>,
    pub compute: Vec<Compute>,
    /// Rounds between nodes and within nodes.
    pub node_rounds: usize,
    pub local_rounds: usize,
    /// The compute workload, in words.
    pub workload: String,
    /// Rank 0's time from the start of the probe to the gathered data.
    pub seconds: f64,
    /// The node pairs measured again before the verdict ([`recheck_pairs`]).
    #[serde(default)]
    pub rechecked: Vec<(usize, usize)>,
}

impl ProbeData {
    pub fn gather(
        parts: Parts,
        device: Device,
        measured: Vec<Measured>,
        workload: String,
        seconds: f64,
    ) -> ProbeData {
        let mut d = ProbeData {
            parts,
            device: device.name().into(),
            ranks: Vec::new(),
            links: Vec::new(),
            latency: Vec::new(),
            compute: Vec::new(),
            node_rounds: 0,
            local_rounds: 0,
            workload,
            seconds,
            rechecked: Vec::new(),
        };
        for m in measured {
            d.ranks.push(m.info);
            d.links.extend(m.links);
            d.latency.extend(m.latency);
            d.compute.extend(m.compute);
        }
        d.ranks.sort_by_key(|r| r.rank);
        let nodes = d.nodes().len();
        let per_node = d.ranks.iter().filter(|r| r.node == 0).count();
        if parts.links {
            d.node_rounds = rounds(nodes).len();
            d.local_rounds = rounds(per_node).len();
        }
        d
    }

    fn info(&self, rank: usize) -> Option<&RankInfo> {
        self.ranks.iter().find(|r| r.rank == rank)
    }

    fn node_of(&self, rank: usize) -> usize {
        self.info(rank).map_or(0, |r| r.node)
    }

    /// Node numbers, each with its host name (its first rank's).
    pub fn nodes(&self) -> BTreeMap<usize, String> {
        let mut out = BTreeMap::new();
        for r in &self.ranks {
            out.entry(r.node).or_insert_with(|| r.host.clone());
        }
        out
    }

    fn node_label(&self, node: usize) -> String {
        match self.nodes().get(&node) {
            Some(h) if !h.is_empty() => format!("n{node} ({h})"),
            _ => format!("n{node}"),
        }
    }

    fn rank_label(&self, rank: usize) -> String {
        format!("rank {rank} on {}", self.node_label(self.node_of(rank)))
    }

    /// Whether links within nodes are judged: between GPUs (NVLink, PCIe), not between CPU ranks.
    pub fn judges_local_links(&self) -> bool {
        self.device == Device::Cuda.name()
    }

    fn between_nodes(&self, l: &Link) -> bool {
        self.node_of(l.from) != self.node_of(l.to)
    }
}

/// What kind of thing a straggler is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Every link of a node to the other nodes.
    Node,
    /// One link between two nodes.
    NodeLink,
    /// Every link of a rank to the other ranks of its node.
    Rank,
    /// One link between two ranks of a node.
    LocalLink,
    /// A rank's compute.
    Compute,
}

/// Which way a slow link is slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Send,
    Receive,
    Both,
}

/// Something slower than the median by more than the threshold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Straggler {
    pub kind: Kind,
    /// The node (Node, NodeLink: the sending node) or the rank's node.
    pub node: usize,
    /// The rank (Rank, LocalLink: the sender, Compute).
    pub rank: Option<usize>,
    /// The other end of a link (a node for NodeLink, a rank for LocalLink).
    pub peer: Option<usize>,
    pub direction: Option<Direction>,
    /// value / median.
    pub ratio: f64,
    pub value: f64,
    pub median: f64,
    /// `Gbit/s` or `GFLOP/s`.
    pub unit: &'static str,
    pub text: String,
}

/// A node's slowest link (between nodes; within the node on a one-node world).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slowest {
    pub node: usize,
    pub from: usize,
    pub to: usize,
    pub within_node: bool,
    pub gbps: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// A fraction: 0.25 names what is below 0.75× the median.
    pub threshold: f64,
    pub stragglers: Vec<Straggler>,
    pub slowest: Vec<Slowest>,
}

pub use crate::median::median;

/// A directed, measured edge between members (nodes, or ranks within nodes).
#[derive(Debug, Clone, Copy)]
struct Edge {
    from: usize,
    to: usize,
    gbps: f64,
}

struct MemberSlow {
    member: usize,
    direction: Direction,
    ratio: f64,
    value: f64,
    median: f64,
}

struct EdgeSlow {
    from: usize,
    to: usize,
    both: bool,
    ratio: f64,
    value: f64,
    median: f64,
}

/// A member is slow when even its best link, sending or receiving, is below `cut` × the median of
/// the members' best links: every one of its links is slow, so the member is the cause. Only members
/// with two peers or more are judged (with one peer, a slow link cannot be pinned on either end),
/// and only among three members or more. Then the links between members not named: a link below
/// `cut` × their median is named by itself.
fn judge(edges: &[Edge], cut: f64) -> (Vec<MemberSlow>, Vec<EdgeSlow>) {
    let mut best_out: BTreeMap<usize, f64> = BTreeMap::new();
    let mut best_in: BTreeMap<usize, f64> = BTreeMap::new();
    let mut peers: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for e in edges {
        let o = best_out.entry(e.from).or_insert(0.0);
        *o = o.max(e.gbps);
        let i = best_in.entry(e.to).or_insert(0.0);
        *i = i.max(e.gbps);
        peers.entry(e.from).or_default().insert(e.to);
        peers.entry(e.to).or_default().insert(e.from);
    }
    let judged: Vec<usize> = peers
        .iter()
        .filter(|(_, p)| p.len() >= 2)
        .map(|(m, _)| *m)
        .collect();
    let mut members = Vec::new();
    if judged.len() >= 3 {
        let vals = |best: &BTreeMap<usize, f64>| -> Vec<f64> {
            judged.iter().filter_map(|m| best.get(m).copied()).collect()
        };
        let med_out = median(&vals(&best_out));
        let med_in = median(&vals(&best_in));
        for &m in &judged {
            let side = |best: &BTreeMap<usize, f64>, med: Option<f64>| match (best.get(&m), med) {
                (Some(&v), Some(md)) if md > 0.0 => Some((v / md, v, md)),
                _ => None,
            };
            let s = side(&best_out, med_out);
            let r = side(&best_in, med_in);
            let slow_s = s.filter(|x| x.0 < cut);
            let slow_r = r.filter(|x| x.0 < cut);
            let (direction, (ratio, value, median)) = match (slow_s, slow_r) {
                (Some(a), Some(b)) => (Direction::Both, if a.0 <= b.0 { a } else { b }),
                (Some(a), None) => (Direction::Send, a),
                (None, Some(b)) => (Direction::Receive, b),
                (None, None) => continue,
            };
            members.push(MemberSlow {
                member: m,
                direction,
                ratio,
                value,
                median,
            });
        }
    }
    let named: BTreeSet<usize> = members.iter().map(|m| m.member).collect();
    let rest: Vec<&Edge> = edges
        .iter()
        .filter(|e| !named.contains(&e.from) && !named.contains(&e.to))
        .collect();
    let mut links = Vec::new();
    if let Some(med) = median(&rest.iter().map(|e| e.gbps).collect::<Vec<_>>()) {
        let slow: Vec<&&Edge> = rest
            .iter()
            .filter(|e| med > 0.0 && e.gbps < cut * med)
            .collect();
        let mut seen = BTreeSet::new();
        for e in &slow {
            let key = (e.from.min(e.to), e.from.max(e.to));
            if !seen.insert(key) {
                continue;
            }
            let back = slow.iter().find(|o| o.from == e.to && o.to == e.from);
            let (from, to, value) = match back {
                // Both ways: named once, from the lower member, at the slower rate.
                Some(b) => (key.0, key.1, e.gbps.min(b.gbps)),
                None => (e.from, e.to, e.gbps),
            };
            links.push(EdgeSlow {
                from,
                to,
                both: back.is_some(),
                ratio: value / med,
                value,
                median: med,
            });
        }
    }
    (members, links)
}

/// Three significant digits, the way the tables print rates.
pub fn sig3(x: f64) -> String {
    let a = x.abs();
    if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

fn direction_words(d: Direction) -> &'static str {
    match d {
        Direction::Both => "",
        Direction::Send => " when sending",
        Direction::Receive => " when receiving",
    }
}

/// The unit of link rates.
const GBPS: &str = "Gbit/s";

impl MemberSlow {
    /// The straggler this slow member is: `who` names it, `others` says what its links reach.
    fn straggler(
        &self,
        kind: Kind,
        node: usize,
        rank: Option<usize>,
        who: String,
        others: &str,
    ) -> Straggler {
        Straggler {
            kind,
            node,
            rank,
            peer: None,
            direction: Some(self.direction),
            ratio: self.ratio,
            value: self.value,
            median: self.median,
            unit: GBPS,
            text: format!(
                "{who}: link to every other {others}{} {:.2}× the median ({} vs {} Gbit/s)",
                direction_words(self.direction),
                self.ratio,
                sig3(self.value),
                sig3(self.median)
            ),
        }
    }
}

impl EdgeSlow {
    /// How the text draws the link: both ways, or from sender to receiver.
    fn arrow(&self) -> &'static str {
        if self.both {
            "↔"
        } else {
            "→"
        }
    }

    /// The straggler this slow link is, with its `text`.
    fn straggler(&self, kind: Kind, node: usize, rank: Option<usize>, text: String) -> Straggler {
        Straggler {
            kind,
            node,
            rank,
            peer: Some(self.to),
            direction: Some(if self.both {
                Direction::Both
            } else {
                Direction::Send
            }),
            ratio: self.ratio,
            value: self.value,
            median: self.median,
            unit: GBPS,
            text,
        }
    }
}

/// The stragglers, then each node's slowest link, at `threshold` (a fraction: 0.25).
pub fn analyze(d: &ProbeData, threshold: f64) -> Verdict {
    let cut = 1.0 - threshold;
    let mut stragglers = node_stragglers(d, cut);
    stragglers.extend(local_stragglers(d, cut));
    stragglers.extend(compute_stragglers(d, cut));
    Verdict {
        threshold,
        stragglers,
        slowest: slowest_links(d),
    }
}

/// Between nodes: members are nodes.
fn node_stragglers(d: &ProbeData, cut: f64) -> Vec<Straggler> {
    let edges: Vec<Edge> = d
        .links
        .iter()
        .filter(|l| d.between_nodes(l))
        .map(|l| Edge {
            from: d.node_of(l.from),
            to: d.node_of(l.to),
            gbps: l.gbps(),
        })
        .collect();
    let (nodes, links) = judge(&edges, cut);
    let mut out: Vec<Straggler> = nodes
        .iter()
        .map(|m| {
            let who = format!("node {}", d.node_label(m.member));
            m.straggler(Kind::Node, m.member, None, who, "node")
        })
        .collect();
    out.extend(links.iter().map(|e| {
        let text = format!(
            "link {} {} {}: {:.2}× the median ({} vs {} Gbit/s)",
            d.node_label(e.from),
            e.arrow(),
            d.node_label(e.to),
            e.ratio,
            sig3(e.value),
            sig3(e.median)
        );
        e.straggler(Kind::NodeLink, e.from, None, text)
    }));
    out
}

/// Within nodes: members are ranks, edges only between ranks of one node; the medians are the
/// whole world's (the nodes of a job are alike). Only between GPUs: between CPU ranks the "link"
/// is the loopback device, as fast as the cores the ranks share, so its spread is scheduling.
fn local_stragglers(d: &ProbeData, cut: f64) -> Vec<Straggler> {
    let edges: Vec<Edge> = d
        .links
        .iter()
        .filter(|l| !d.between_nodes(l) && d.judges_local_links())
        .map(|l| Edge {
            from: l.from,
            to: l.to,
            gbps: l.gbps(),
        })
        .collect();
    let (ranks, links) = judge(&edges, cut);
    let mut out: Vec<Straggler> = ranks
        .iter()
        .map(|m| {
            let node = d.node_of(m.member);
            let who = d.rank_label(m.member);
            m.straggler(Kind::Rank, node, Some(m.member), who, "rank of its node")
        })
        .collect();
    out.extend(links.iter().map(|e| {
        let node = d.node_of(e.from);
        let text = format!(
            "link rank {} {} rank {} on {}: {:.2}× the median within nodes ({} vs {} Gbit/s)",
            e.from,
            e.arrow(),
            e.to,
            d.node_label(node),
            e.ratio,
            sig3(e.value),
            sig3(e.median)
        );
        e.straggler(Kind::LocalLink, node, Some(e.from), text)
    }));
    out
}

/// Ranks whose compute is below `cut` × the median, among two ranks or more, by rank.
fn compute_stragglers(d: &ProbeData, cut: f64) -> Vec<Straggler> {
    if d.compute.len() < 2 {
        return Vec::new();
    }
    let vals: Vec<f64> = d.compute.iter().map(|c| c.gflops).collect();
    let Some(med) = median(&vals).filter(|m| *m > 0.0) else {
        return Vec::new();
    };
    let mut slow: Vec<&Compute> = d.compute.iter().filter(|c| c.gflops < cut * med).collect();
    slow.sort_by_key(|c| c.rank);
    slow.into_iter()
        .map(|c| {
            let ratio = c.gflops / med;
            Straggler {
                kind: Kind::Compute,
                node: d.node_of(c.rank),
                rank: Some(c.rank),
                peer: None,
                direction: None,
                ratio,
                value: c.gflops,
                median: med,
                unit: "GFLOP/s",
                text: format!(
                    "{}: compute {ratio:.2}× the median ({} vs {} GFLOP/s)",
                    d.rank_label(c.rank),
                    sig3(c.gflops),
                    sig3(med)
                ),
            }
        })
        .collect()
}

/// Each node's slowest link: to or from another node, else within it.
fn slowest_links(d: &ProbeData) -> Vec<Slowest> {
    let mut slowest = Vec::new();
    for &node in d.nodes().keys() {
        let pick = |between: bool| {
            d.links
                .iter()
                .filter(|l| d.between_nodes(l) == between)
                .filter(|l| d.node_of(l.from) == node || d.node_of(l.to) == node)
                .min_by(|a, b| a.gbps().total_cmp(&b.gbps()))
        };
        let (l, within) = match pick(true) {
            Some(l) => (Some(l), false),
            None => (pick(false), true),
        };
        if let Some(l) = l {
            let (from, to) = if within {
                (l.from, l.to)
            } else {
                (d.node_of(l.from), d.node_of(l.to))
            };
            slowest.push(Slowest {
                node,
                from,
                to,
                within_node: within,
                gbps: l.gbps(),
            });
        }
    }
    slowest
}

fn pad(s: &str, w: usize) -> String {
    format!("{s:>w$}")
}

/// The width of a table's first column and of each of its cells.
const CELL: usize = 8;

/// A table's first column: the row's name, left-aligned.
fn row_name(name: &str) -> String {
    format!("{name:<CELL$}")
}

/// A node-by-node table's header: `corner`, then a column per node.
fn matrix_head(corner: &str, ids: &[usize]) -> String {
    let mut head = row_name(corner);
    for n in ids {
        head += &pad(&format!("n{n}"), CELL);
    }
    head
}

/// A node-by-node table's row for node `a`: `-` on the diagonal, `?` where `cell` has nothing.
fn matrix_row(a: usize, ids: &[usize], cell: impl Fn(usize, usize) -> Option<String>) -> String {
    let mut line = row_name(&format!("n{a}"));
    for &b in ids {
        let text = if a == b {
            "-".to_string()
        } else {
            cell(a, b).unwrap_or_else(|| "?".into())
        };
        line += &pad(&text, CELL);
    }
    line
}

/// The probe's part of the report: the tables, each node's slowest link, the stragglers, the time.
pub fn render(d: &ProbeData, v: &Verdict) -> String {
    let mut out = String::new();
    let nodes = d.nodes();
    let per_node = d.ranks.iter().filter(|r| r.node == 0).count().max(1);
    if d.parts.links {
        out += &format!(
            "probe: {} node(s): {}\n",
            nodes.len(),
            nodes
                .iter()
                .map(|(n, h)| format!("n{n} = {h}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let ids: Vec<usize> = nodes.keys().copied().collect();
        if ids.len() >= 2 {
            out += &node_bandwidth(d, v, &ids);
            out += &node_latency(d, &ids);
        }
        if per_node >= 2 {
            out += &local_links(d, &ids);
        }
    }
    if d.parts.compute && !d.compute.is_empty() {
        out += &compute_table(d, &nodes, per_node);
    }
    if !d.rechecked.is_empty() {
        out += &format!(
            "probe: measured again before the verdict (slow the first time; the faster measurement counts): {}\n",
            d.rechecked
                .iter()
                .map(|(a, b)| format!("n{a} ↔ n{b}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    out + &verdict_lines(d, v, nodes.len())
}

/// The bandwidth between nodes, row sends to column (the slowest of its measurements), with each
/// node's slowest link at the end of its row.
fn node_bandwidth(d: &ProbeData, v: &Verdict, ids: &[usize]) -> String {
    let mut out = format!(
        "probe: bandwidth between nodes, Gbit/s, row sends to column (first ranks of the nodes, {} round(s) of pairs)\n",
        d.node_rounds
    );
    out += &matrix_head("from\\to", ids);
    out += "  slowest link\n";
    let rate = |a: usize, b: usize| {
        d.links
            .iter()
            .filter(|l| d.node_of(l.from) == a && d.node_of(l.to) == b && d.between_nodes(l))
            .map(Link::gbps)
            .reduce(f64::min)
            .map(sig3)
    };
    for &a in ids {
        let mut line = matrix_row(a, ids, rate);
        if let Some(s) = v.slowest.iter().find(|s| s.node == a && !s.within_node) {
            line += &format!("  n{} → n{} {}", s.from, s.to, sig3(s.gbps));
        }
        out += line.trim_end();
        out.push('\n');
    }
    out
}

/// The one-way latency between nodes (the highest of its measurements, either way).
fn node_latency(d: &ProbeData, ids: &[usize]) -> String {
    let mut out = format!(
        "probe: latency between nodes, µs one way (half the median of {LATENCY_ITERS} round trips of {LATENCY_BYTES} bytes)\n"
    );
    let lat = |a: usize, b: usize| {
        d.latency
            .iter()
            .filter(|l| {
                let (x, y) = (d.node_of(l.a), d.node_of(l.b));
                x != y && ((x, y) == (a, b) || (x, y) == (b, a))
            })
            .map(|l| l.us)
            .reduce(f64::max)
            .map(|u| format!("{u:.0}"))
    };
    out += &matrix_head("", ids);
    out.push('\n');
    for &a in ids {
        out += &matrix_row(a, ids, lat);
        out.push('\n');
    }
    out
}

/// A line per node on the links between its ranks: their range and median, the slowest, the
/// latency.
fn local_links(d: &ProbeData, ids: &[usize]) -> String {
    let judged = if d.judges_local_links() {
        ""
    } else {
        "; shown, not judged: between CPU ranks it is the loopback of the cores they share"
    };
    let mut out = format!(
        "probe: links within nodes, Gbit/s (every pair of local ranks, {} round(s), every node at once{judged})\n",
        d.local_rounds
    );
    for &n in ids {
        let links: Vec<&Link> = d
            .links
            .iter()
            .filter(|l| !d.between_nodes(l) && d.node_of(l.from) == n)
            .collect();
        let rates: Vec<f64> = links.iter().map(|l| l.gbps()).collect();
        let lats: Vec<f64> = d
            .latency
            .iter()
            .filter(|l| d.node_of(l.a) == n && d.node_of(l.b) == n)
            .map(|l| l.us)
            .collect();
        let slow = links.iter().min_by(|a, b| a.gbps().total_cmp(&b.gbps()));
        let mut line = format!("n{n}: {} link(s)", links.len());
        if let (Some(lo), Some(hi), Some(med)) = (
            rates.iter().copied().reduce(f64::min),
            rates.iter().copied().reduce(f64::max),
            median(&rates),
        ) {
            line += &format!(", {}–{} (median {})", sig3(lo), sig3(hi), sig3(med));
        }
        if let Some(s) = slow {
            line += &format!(
                ", slowest rank {} → rank {} {}",
                s.from,
                s.to,
                sig3(s.gbps())
            );
        }
        if let Some(m) = median(&lats) {
            line += &format!(", latency {m:.0} µs");
        }
        out += &line;
        out.push('\n');
    }
    out
}

/// Each rank's compute, a row per node and a column per local rank.
fn compute_table(d: &ProbeData, nodes: &BTreeMap<usize, String>, per_node: usize) -> String {
    let mut out = format!("probe: compute, GFLOP/s ({}), by local rank\n", d.workload);
    out += &row_name("node");
    for lr in 0..per_node {
        out += &pad(&format!("{lr}"), CELL);
    }
    out.push('\n');
    for &n in nodes.keys() {
        let mut line = row_name(&format!("n{n}"));
        let mut mine: Vec<&RankInfo> = d.ranks.iter().filter(|r| r.node == n).collect();
        mine.sort_by_key(|r| r.local_rank);
        for r in mine {
            let cell = d
                .compute
                .iter()
                .find(|c| c.rank == r.rank)
                .map_or("?".into(), |c| sig3(c.gflops));
            line += &pad(&cell, CELL);
        }
        out += &line;
        out.push('\n');
    }
    out
}

/// The stragglers (or that there is none), then the world and the time it took.
fn verdict_lines(d: &ProbeData, v: &Verdict, nodes: usize) -> String {
    let mut out = String::new();
    let pct = v.threshold * 100.0;
    if v.stragglers.is_empty() {
        out += &format!(
            "probe: no straggler: nothing slower than the median by more than {pct:.0}%\n"
        );
    } else {
        for s in &v.stragglers {
            out += &format!("probe: STRAGGLER {}\n", s.text);
        }
    }
    out += &format!(
        "probe: {} rank(s) on {nodes} node(s) in {:.1} s (threshold {pct:.0}%)\n",
        d.ranks.len(),
        d.seconds
    );
    out
}

/// The probe's part of `--json`.
pub fn to_json(d: &ProbeData, v: &Verdict) -> serde_json::Value {
    let link = |l: &Link| {
        serde_json::json!({
            "from_rank": l.from,
            "to_rank": l.to,
            "from_node": d.node_of(l.from),
            "to_node": d.node_of(l.to),
            "within_node": !d.between_nodes(l),
            "gbps": l.gbps(),
            "bytes": l.bytes,
            "seconds": l.seconds,
        })
    };
    let latency = |l: &Latency| {
        serde_json::json!({
            "rank_a": l.a,
            "rank_b": l.b,
            "node_a": d.node_of(l.a),
            "node_b": d.node_of(l.b),
            "within_node": d.node_of(l.a) == d.node_of(l.b),
            "us": l.us,
        })
    };
    serde_json::json!({
        "seconds": d.seconds,
        "threshold": v.threshold,
        "parts": d.parts,
        "node_rounds": d.node_rounds,
        "local_rounds": d.local_rounds,
        "nodes": d.nodes().iter().map(|(n, h)| serde_json::json!({"node": n, "host": h})).collect::<Vec<_>>(),
        "ranks": d.ranks,
        "links": d.links.iter().map(link).collect::<Vec<_>>(),
        "latency": d.latency.iter().map(latency).collect::<Vec<_>>(),
        "rechecked": d.rechecked.iter().map(|(a, b)| serde_json::json!({"node_a": a, "node_b": b})).collect::<Vec<_>>(),
        "compute_workload": d.workload,
        "compute": d.compute,
        "slowest": v.slowest,
        "stragglers": v.stragglers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_trial_lasts_at_least_its_time() {
        // 18 ms per product (an AVX-512 core): 6 products, 108 ms.
        assert_eq!(cpu_reps(Duration::from_millis(18)), 6);
        assert_eq!(cpu_reps(Duration::from_millis(100)), 1);
        assert_eq!(cpu_reps(Duration::from_millis(250)), 1);
        assert_eq!(cpu_reps(Duration::from_micros(10)), MAX_CPU_REPS);
        assert_eq!(cpu_reps(Duration::ZERO), MAX_CPU_REPS);
    }

    #[test]
    fn what_looked_slow_is_measured_again_in_rounds() {
        // Four nodes at 2 Gbit/s; node 2 at 0.2 each way: its three pairs are measured again.
        let mut edges = Vec::new();
        for a in 0..4 {
            for b in 0..4 {
                if a != b {
                    edges.push((a, b, if a == 2 || b == 2 { 0.2 } else { 1.9 }));
                }
            }
        }
        assert_eq!(recheck_pairs(&edges, 0.25), vec![(0, 2), (1, 2), (2, 3)]);
        // Even: nothing. One pair stalled one way (2 → 0, 3 → 1 at 0.5): those two pairs.
        let even: Vec<_> = edges.iter().map(|&(a, b, _)| (a, b, 1.9)).collect();
        assert!(recheck_pairs(&even, 0.25).is_empty());
        let stalled: Vec<_> = even
            .iter()
            .map(|&(a, b, g)| {
                (
                    a,
                    b,
                    if (a, b) == (2, 0) || (a, b) == (3, 1) {
                        0.5
                    } else {
                        g
                    },
                )
            })
            .collect();
        assert_eq!(recheck_pairs(&stalled, 0.25), vec![(0, 2), (1, 3)]);

        assert_eq!(
            recheck_ranks(&[(0, 60.0), (1, 16.7), (2, 58.0)], 0.25),
            vec![1]
        );
        assert!(recheck_ranks(&[(0, 60.0), (1, 50.0), (2, 58.0)], 0.25).is_empty());
        assert!(recheck_ranks(&[(0, 60.0)], 0.25).is_empty());

        let rs = pair_rounds(&[(0, 2), (1, 2), (2, 3), (0, 1)]);
        assert_eq!(rs, vec![vec![(0, 2)], vec![(1, 2)], vec![(2, 3), (0, 1)]]);
        assert_eq!(partners_in(&rs, 2), vec![0, 1, 3]);
        assert_eq!(partners_in(&rs, 1), vec![2, 0]);
        assert_eq!(pair_rounds(&[(0, 2), (1, 3)]), vec![vec![(0, 2), (1, 3)]]);
        assert!(pair_rounds(&[]).is_empty());

        let l = |from, to, seconds| Link {
            from,
            to,
            bytes: 1_000_000,
            seconds,
        };
        let mut links = vec![l(0, 1, 0.1), l(1, 0, 0.01)];
        keep_best(&mut links, vec![l(0, 1, 0.01), l(1, 0, 0.1)]);
        assert_eq!(links, vec![l(0, 1, 0.01), l(1, 0, 0.01)]);
    }

    #[test]
    fn rounds_pair_everyone_once_one_pair_at_a_time() {
        for n in 0..=12 {
            let rs = rounds(n);
            let want = match n {
                0 | 1 => 0,
                _ if n % 2 == 0 => n - 1,
                _ => n,
            };
            assert_eq!(rs.len(), want, "n={n}");
            let mut seen = BTreeSet::new();
            for r in &rs {
                let mut busy = BTreeSet::new();
                for &(a, b) in r {
                    assert!(a < b && b < n, "n={n}: {a},{b}");
                    assert!(busy.insert(a) && busy.insert(b), "n={n}: twice in {r:?}");
                    assert!(seen.insert((a, b)), "n={n}: ({a},{b}) again");
                }
                assert_eq!(r.len(), n / 2, "n={n}: {r:?}");
            }
            assert_eq!(seen.len(), n * n.saturating_sub(1) / 2, "n={n}");
        }
        assert_eq!(
            rounds(4),
            vec![
                vec![(0, 3), (1, 2)],
                vec![(0, 2), (1, 3)],
                vec![(0, 1), (2, 3)]
            ]
        );
        assert_eq!(partners(4, 1), vec![2, 3, 0]);
        assert_eq!(partners(3, 2).len(), 2);
    }

    #[test]
    fn transfers_are_sized_to_the_link() {
        // 2.4 Gbit/s: one 64 MiB message (about 0.22 s).
        assert_eq!(transfer_plan(300e6), (MAX_MESSAGE, 1));
        // 200 Mbit/s: 6.25 MB, once.
        let (s, r) = transfer_plan(25e6);
        assert_eq!(r, 1);
        assert_eq!(s, (6_250_000 >> 16) << 16);
        // Fast: 64 MiB up to 8 times; slow: never below 256 KiB.
        assert_eq!(transfer_plan(100e9), (MAX_MESSAGE, MAX_REPS));
        assert_eq!(transfer_plan(1e3), (MIN_MESSAGE, 1));
        assert_eq!(transfer_plan(f64::NAN), (MIN_MESSAGE, 1));
        assert_eq!(transfer_plan(f64::INFINITY), (MAX_MESSAGE, MAX_REPS));
        assert_eq!(check_header(0, 0), Ok(None));
        assert_eq!(check_header(1 << 20, 2), Ok(Some((1 << 20, 2))));
        for (s, r) in [(-1, 1), (1, 0), (MAX_MESSAGE as i64 + 1, 1), (1, 9), (0, 1)] {
            assert!(check_header(s, r).is_err(), "{s} {r}");
        }
    }

    #[test]
    fn a_stall_or_a_bad_estimate_does_not_make_a_slow_link() {
        // A 2 Gbit/s link (250 MB/s) whose estimate hit a 30 ms stall at 64 KiB: the first plan is
        // small and quick, the next ones are sized from it, and two full runs count.
        let link = |size: u64, reps: u32| (size * u64::from(reps)) as f64 / 250e6;
        let mut m = Measurements::new(64 << 10, 0.030);
        let mut plans = Vec::new();
        while let Some((size, reps)) = m.next_plan() {
            plans.push((size, reps));
            // The second full-size run stalls for 0.2 s (a retransmission timeout).
            let stall = if plans.len() == 3 { 0.2 } else { 0.0 };
            m.add(size, reps, link(size, reps) + stall);
        }
        assert_eq!(plans[0], (512 << 10, 1));
        assert!(plans.len() <= MAX_RUNS, "{plans:?}");
        assert!(
            plans.iter().skip(1).all(|&(s, _)| s >= 32 << 20),
            "{plans:?}"
        );
        let (bytes, secs) = m.best();
        let gbps = bytes as f64 * 8.0 / secs / 1e9;
        assert!((gbps - 2.0).abs() < 0.01, "{gbps} from {plans:?}");
        // A fast link is done after two runs of the largest plan.
        let mut m = Measurements::new(64 << 20, 0.001);
        let mut n = 0;
        while let Some((size, reps)) = m.next_plan() {
            assert_eq!((size, reps), (MAX_MESSAGE, MAX_REPS));
            m.add(size, reps, 0.01);
            n += 1;
        }
        assert_eq!(n, FULL_RUNS);
    }

    #[test]
    fn parts() {
        assert_eq!(Parts::parse("all"), Ok(Parts::ALL));
        assert_eq!(
            Parts::parse("links"),
            Ok(Parts {
                links: true,
                compute: false
            })
        );
        assert_eq!(Parts::parse("compute,links"), Ok(Parts::ALL));
        assert!(Parts::parse("disk").unwrap_err().contains("disk"));
        assert_eq!(Parts::ALL.arg(), "links,compute");
    }

    /// `nodes` nodes of `per_node` ranks; every link between nodes at `rate(a, b)` (nodes), every
    /// link within a node at `local(rank_a, rank_b)`; compute `flops(rank)`.
    fn world(
        nodes: usize,
        per_node: usize,
        rate: impl Fn(usize, usize) -> f64,
        local: impl Fn(usize, usize) -> f64,
        flops: impl Fn(usize) -> f64,
    ) -> ProbeData {
        let mut measured = Vec::new();
        for rank in 0..nodes * per_node {
            let node = rank / per_node;
            let lr = rank % per_node;
            let mut m = Measured {
                info: RankInfo {
                    rank,
                    node,
                    local_rank: lr,
                    host: format!("h{node}"),
                },
                links: Vec::new(),
                latency: Vec::new(),
                compute: Some(Compute {
                    rank,
                    gflops: flops(rank),
                }),
            };
            let gbit = |g: f64| Link {
                from: 0,
                to: 0,
                bytes: 1_000_000_000,
                seconds: 8.0 / g,
            };
            if lr == 0 {
                for peer in 0..nodes {
                    if peer != node {
                        m.links.push(Link {
                            from: rank,
                            to: peer * per_node,
                            ..gbit(rate(node, peer))
                        });
                        if node < peer {
                            m.latency.push(Latency {
                                a: rank,
                                b: peer * per_node,
                                us: 50.0,
                            });
                        }
                    }
                }
            }
            for q in 0..per_node {
                if q != lr {
                    let to = node * per_node + q;
                    m.links.push(Link {
                        from: rank,
                        to,
                        ..gbit(local(rank, to))
                    });
                }
            }
            measured.push(m);
        }
        ProbeData::gather(Parts::ALL, Device::Cuda, measured, "w".into(), 1.0)
    }

    fn kinds(v: &Verdict) -> Vec<(Kind, usize, Option<usize>)> {
        v.stragglers
            .iter()
            .map(|s| (s.kind, s.node, s.rank))
            .collect()
    }

    #[test]
    fn a_throttled_node_is_named_not_its_partners() {
        for nodes in [3, 4, 6] {
            let d = world(
                nodes,
                1,
                |a, b| if a == 2 || b == 2 { 0.19 } else { 1.97 },
                |_, _| 10.0,
                |_| 20.0,
            );
            let v = analyze(&d, 0.25);
            assert_eq!(kinds(&v), vec![(Kind::Node, 2, None)], "{nodes}: {v:#?}");
            let s = &v.stragglers[0];
            assert_eq!(s.direction, Some(Direction::Both));
            assert!((s.value - 0.19).abs() < 1e-9 && (s.median - 1.97).abs() < 1e-9);
            assert_eq!(
                s.text,
                "node n2 (h2): link to every other node 0.10× the median (0.190 vs 1.97 Gbit/s)"
            );
            // Every node's slowest link is its link to n2 (n2's own: its lowest).
            assert!(
                v.slowest.iter().all(|s| s.from == 2 || s.to == 2),
                "{:?}",
                v.slowest
            );
            assert!((d.nodes().len() == nodes) && d.node_rounds == rounds(nodes).len());
        }
    }

    #[test]
    fn an_even_world_names_nothing_and_noise_within_the_threshold_is_not_a_straggler() {
        let d = world(
            4,
            2,
            |a, b| 1.9 + 0.05 * (a + b) as f64,
            |a, _| 10.0 + a as f64 * 0.3,
            |r| 20.0 - r as f64,
        );
        let v = analyze(&d, 0.25);
        assert!(v.stragglers.is_empty(), "{:#?}", v.stragglers);
        let text = render(&d, &v);
        assert!(text.contains("probe: no straggler"), "{text}");
        assert_eq!(v.slowest.len(), 4);
    }

    #[test]
    fn one_slow_direction_of_one_node_is_named_with_its_direction() {
        let d = world(
            4,
            1,
            |a, _| if a == 3 { 0.5 } else { 2.0 },
            |_, _| 1.0,
            |_| 1.0,
        );
        let v = analyze(&d, 0.25);
        assert_eq!(kinds(&v), vec![(Kind::Node, 3, None)]);
        assert_eq!(v.stragglers[0].direction, Some(Direction::Send));
        assert!(
            v.stragglers[0].text.contains("when sending 0.25×"),
            "{}",
            v.stragglers[0].text
        );
    }

    #[test]
    fn a_single_bad_cable_is_a_link_not_a_node() {
        let d = world(
            4,
            1,
            |a, b| {
                if (a, b) == (0, 1) || (a, b) == (1, 0) {
                    0.4
                } else {
                    2.0
                }
            },
            |_, _| 1.0,
            |_| 1.0,
        );
        let v = analyze(&d, 0.25);
        assert_eq!(kinds(&v), vec![(Kind::NodeLink, 0, None)], "{v:#?}");
        assert_eq!(v.stragglers[0].peer, Some(1));
        assert!(
            v.stragglers[0]
                .text
                .starts_with("link n0 (h0) ↔ n1 (h1): 0.20×"),
            "{}",
            v.stragglers[0].text
        );
        // Two nodes: one link, nothing to pin on either end; only a lopsided direction is named.
        let d = world(2, 1, |_, _| 0.2, |_, _| 1.0, |_| 1.0);
        assert!(analyze(&d, 0.25).stragglers.is_empty());
        let d = world(
            2,
            1,
            |a, _| if a == 1 { 0.5 } else { 2.0 },
            |_, _| 1.0,
            |_| 1.0,
        );
        assert_eq!(kinds(&analyze(&d, 0.25)), vec![(Kind::NodeLink, 1, None)]);
    }

    #[test]
    fn ranks_within_nodes_and_compute() {
        // Node 1 of 2, 4 ranks each: rank 6's links to its node's ranks are slow.
        let d = world(
            2,
            4,
            |_, _| 2.0,
            |a, b| if a == 6 || b == 6 { 3.0 } else { 12.0 },
            |r| if r == 5 { 10.0 } else { 19.0 },
        );
        let v = analyze(&d, 0.25);
        assert_eq!(
            kinds(&v),
            vec![(Kind::Rank, 1, Some(6)), (Kind::Compute, 1, Some(5))],
            "{v:#?}"
        );
        assert_eq!(
            v.stragglers[1].text,
            "rank 5 on n1 (h1): compute 0.53× the median (10.0 vs 19.0 GFLOP/s)"
        );
        // Between CPU ranks a node's links are its loopback: shown, not judged.
        let mut cpu = d.clone();
        cpu.device = "cpu".into();
        let v = analyze(&cpu, 0.25);
        assert_eq!(kinds(&v), vec![(Kind::Compute, 1, Some(5))], "{v:#?}");
        assert!(render(&cpu, &v).contains("shown, not judged"));
        // Two local ranks: the slow local link is named as a link.
        let d = world(
            2,
            2,
            |_, _| 2.0,
            |a, b| if a == 2 || b == 2 { 3.0 } else { 12.0 },
            |_| 1.0,
        );
        let v = analyze(&d, 0.25);
        assert_eq!(kinds(&v), vec![(Kind::LocalLink, 1, Some(2))], "{v:#?}");
        // A higher threshold names less.
        let d = world(
            1,
            2,
            |_, _| 0.0,
            |_, _| 1.0,
            |r| if r == 1 { 0.6 } else { 1.0 },
        );
        assert_eq!(analyze(&d, 0.25).stragglers.len(), 1);
        assert!(analyze(&d, 0.5).stragglers.is_empty());
    }

    #[test]
    fn the_table_shows_the_matrix_and_slowest_links() {
        let d = world(
            3,
            2,
            |a, b| if a == 2 || b == 2 { 0.19 } else { 1.97 },
            |_, _| 10.0,
            |_| 20.0,
        );
        let v = analyze(&d, 0.25);
        let t = render(&d, &v);
        assert!(
            t.contains("probe: 3 node(s): n0 = h0, n1 = h1, n2 = h2"),
            "{t}"
        );
        let row = t
            .lines()
            .find(|l| {
                l.starts_with("n0 ") && l.contains("slowest")
                    || l.starts_with("n0      ") && l.contains('→')
            })
            .unwrap();
        assert!(
            row.contains("1.97") && row.contains("0.190") && row.ends_with("n0 → n2 0.190"),
            "{row}"
        );
        assert!(
            t.contains("probe: STRAGGLER node n2 (h2): link to every other node"),
            "{t}"
        );
        assert!(
            t.contains("n1: 2 link(s), 10.0–10.0 (median 10.0), slowest rank 2 → rank 3 10.0"),
            "{t}"
        );
        assert!(
            t.contains("probe: 6 rank(s) on 3 node(s) in 1.0 s (threshold 25%)"),
            "{t}"
        );
        let j = to_json(&d, &v);
        assert_eq!(j["stragglers"][0]["kind"], "node");
        assert_eq!(j["stragglers"][0]["node"], 2);
        assert_eq!(j["nodes"].as_array().unwrap().len(), 3);
        assert!(j["links"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["within_node"] == true));
    }

    #[test]
    fn a_node_with_no_link_to_another_has_its_slowest_link_within() {
        let d = world(
            1,
            3,
            |_, _| 0.0,
            |a, b| if (a, b) == (2, 0) { 3.0 } else { 12.0 },
            |_| 1.0,
        );
        let s = slowest_links(&d);
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(
            (s[0].node, s[0].from, s[0].to, s[0].within_node),
            (0, 2, 0, true)
        );
        assert!((s[0].gbps - 3.0).abs() < 1e-9);
        // Between nodes the link is named by its nodes, and links within are not considered.
        let d = world(
            2,
            2,
            |a, _| if a == 1 { 1.0 } else { 2.0 },
            |_, _| 0.5,
            |_| 1.0,
        );
        let s = slowest_links(&d);
        assert_eq!(
            s.iter()
                .map(|s| (s.node, s.from, s.to, s.within_node))
                .collect::<Vec<_>>(),
            vec![(0, 1, 0, false), (1, 1, 0, false)]
        );
    }

    #[test]
    fn node_tables_mark_the_diagonal_and_what_was_not_measured() {
        let ids = [0, 1, 2];
        assert_eq!(
            matrix_head("from\\to", &ids),
            format!("{:<8}{:>8}{:>8}{:>8}", "from\\to", "n0", "n1", "n2")
        );
        let row = matrix_row(1, &ids, |a, b| (b == 0).then(|| format!("{a}{b}")));
        assert_eq!(row, format!("{:<8}{:>8}{:>8}{:>8}", "n1", "10", "-", "?"));
        assert_eq!(row_name("node"), "node    ");
    }
}
