//! The straggler judgement, a pure function of each window's samples: in synchronous training every
//! rank waits in the collectives for the slowest one, so the straggler is the rank that waits
//! least. Each rank's share of samples waiting in a `torch.distributed` collective is compared with
//! the median of the other ranks' shares; a rank whose share is below it by more than the threshold
//! (in percentage points) over a whole window is named, once, and once more when it recovers: when its
//! gap is back under half the threshold, so that a rank slowed by about the threshold is not named,
//! recovered and named again as its windows fall either side of it. The
//! gap must also be [`Z`] standard errors of the two shares (binomial, from the samples' counts), so
//! that a short window's few samples do not name a healthy rank. Where every rank has a share of the
//! window its collectives took on the device (NCCL ranks' Flight Recorder,
//! [`arrival::collective_share`](super::arrival::collective_share)), that share is judged in place of
//! the samples' ([`Basis::Arrival`]): under NCCL the stacks of every rank look alike.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::median::median;
use serde::{Deserialize, Serialize};

/// Fewer samples of a rank than this in a window tell too little: the rank is left out of it.
pub const MIN_SAMPLES: u32 = 8;

/// How many standard errors the gap must also be, so that a window's few samples do not name a
/// rank by chance: with 40 samples a rank waiting 45% of the time is seen between 30% and 60%.
pub const Z: f64 = 3.0;

/// Judgements in which no rank waited in a collective, on more than one rank, before detection is
/// said not to apply: the first may be the ranks' start (imports, loading data) alone. Judged every
/// half window over the last whole one ([`merge`]), three are two windows.
pub const QUIET_WINDOWS: u32 = 3;

/// Where a rank's main thread was, outside the collectives: the innermost frame of the user's code.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Place {
    pub file: String,
    pub line: i64,
    pub function: String,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{} in {}", self.file, self.line, self.function)
    }
}

/// One rank's samples over one window (on many nodes, as a node sends them to node 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankWindow {
    pub rank: u32,
    pub node: u32,
    pub host: String,
    /// Samples of its main thread.
    pub samples: u32,
    /// Of them, those in a `torch.distributed` collective (`distributed_c10d.py`).
    pub waiting: u32,
    /// Where it was most often when not waiting.
    pub place: Option<Place>,
    /// The share of the window its collectives took on the device, from its Flight Recorder (NCCL
    /// ranks with timing); absent from a node that sends none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival: Option<f64>,
}

impl RankWindow {
    fn share(&self, basis: Basis) -> f64 {
        match (basis, self.arrival) {
            (Basis::Arrival, Some(a)) => a,
            _ => f64::from(self.waiting) / f64::from(self.samples.max(1)),
        }
    }
}

/// What a window was judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Basis {
    /// The share of stack samples waiting in a `torch.distributed` collective.
    Stacks,
    /// The share of the window the rank's collectives took on the device (Flight Recorder): the
    /// straggler arrives last, so its collectives are the shortest.
    Arrival,
}

/// A rank named a straggler (or recovered), as printed and as `--report_json`'s `stragglers` holds it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub rank: u32,
    pub node: u32,
    pub host: String,
    /// Its share of samples waiting in collectives, 0 to 1.
    pub wait_share: f64,
    /// The median of the other ranks' shares.
    pub median_wait_share: f64,
    /// About how many times longer its compute per step takes than the median rank's.
    pub slower: f64,
    #[serde(rename = "where")]
    pub place: Option<Place>,
    /// `stacks` or `arrival`.
    pub judged_by: Basis,
}

impl Finding {
    fn by(&self) -> &'static str {
        match self.judged_by {
            Basis::Stacks => "",
            Basis::Arrival => ", judged by arrival in collectives (Flight Recorder)",
        }
    }
}

/// What a window's judgement says.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Straggler(Finding),
    Recovered(Finding),
    /// Every rank of this node lags (two or more nodes).
    Node {
        node: u32,
        host: String,
        ranks: Vec<u32>,
    },
    NodeRecovered {
        node: u32,
        host: String,
    },
    /// Nothing to compare: one rank, or ranks whose samples never wait in a collective.
    DoesNotApply(&'static str),
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Straggler(s) => {
                write!(
                    f,
                    "straggler: rank {} (node {}, host {}) waits in collectives {} of the time where the median rank waits {}{}: about {:.1}× slower per step",
                    s.rank,
                    s.node,
                    s.host,
                    pct(s.wait_share),
                    pct(s.median_wait_share),
                    s.by(),
                    s.slower
                )?;
                if let Some(p) = &s.place {
                    write!(f, "; where it was: {p}")?;
                }
                Ok(())
            }
            Event::Recovered(s) => write!(
                f,
                "straggler: rank {} (node {}, host {}) recovered: it waits in collectives {} of the time where the median rank waits {}{}",
                s.rank,
                s.node,
                s.host,
                pct(s.wait_share),
                pct(s.median_wait_share),
                s.by()
            ),
            Event::Node { node, host, ranks } => {
                let list: Vec<String> = ranks.iter().map(u32::to_string).collect();
                write!(
                    f,
                    "straggler: node {node} (host {host}): all its ranks ({}) lag",
                    list.join(",")
                )
            }
            Event::NodeRecovered { node, host } => {
                write!(f, "straggler: node {node} (host {host}) recovered")
            }
            Event::DoesNotApply(why) => {
                write!(f, "straggler detection does not apply: {why}")
            }
        }
    }
}

/// The slowdown from the wait shares. In a synchronous step of length T every rank computes, then
/// waits for the slowest: a rank waiting a share w of the time computes (1 - w)·T. The straggler
/// barely waits, so its compute is (1 - s)·T, and the median rank's is (1 - m)·T: the straggler's
/// step would be (1 - s)/(1 - m) times the median rank's if it did not wait for it. E.g. s = 2%,
/// m = 48%: 0.98 / 0.52 = about 1.9× slower.
pub fn slower(s: f64, m: f64) -> f64 {
    if m >= 1.0 {
        return f64::INFINITY;
    }
    (1.0 - s) / (1.0 - m)
}

/// A whole window from its two halves: each rank of the later half with the earlier half's samples
/// added (a rank that started or ended between them has one half only); the place is the later
/// half's, where it has one. Judging each half window over the last whole one names a straggler
/// half a window sooner than judging whole windows one after the other, from as many samples.
pub fn merge(earlier: &[RankWindow], later: &[RankWindow]) -> Vec<RankWindow> {
    later
        .iter()
        .map(|r| {
            let mut m = r.clone();
            if let Some(e) = earlier.iter().find(|e| e.rank == r.rank) {
                m.samples = m.samples.saturating_add(e.samples);
                m.waiting = m.waiting.saturating_add(e.waiting);
                if m.place.is_none() {
                    m.place = e.place.clone();
                }
                // Two halves' shares of the device's time, each over its own half.
                m.arrival = match (e.arrival, r.arrival) {
                    (Some(a), Some(b)) => Some((a + b) / 2.0),
                    _ => None,
                };
            }
            m
        })
        .collect()
}

/// The judgement across windows: who is named, and what was said.
#[derive(Debug)]
pub struct Judge {
    /// Percentage points below the median, as a fraction (20 → 0.2).
    threshold: f64,
    world_size: u32,
    named: BTreeMap<u32, Finding>,
    named_nodes: BTreeSet<u32>,
    /// Windows judged so far in which no rank waited.
    quiet: u32,
    /// A window with waits was seen: the next ones are judged (the first is the ranks' start).
    warmed: bool,
    said_not_apply: bool,
    /// Every rank ever named, for `--report_json`.
    history: Vec<Finding>,
}

impl Judge {
    /// `threshold_pct`: percentage points (0 to 100).
    pub fn new(threshold_pct: f64, world_size: u32) -> Judge {
        Judge {
            threshold: threshold_pct / 100.0,
            world_size,
            named: BTreeMap::new(),
            named_nodes: BTreeSet::new(),
            quiet: 0,
            warmed: false,
            said_not_apply: false,
            history: Vec::new(),
        }
    }

    /// Every finding so far, in the order named.
    pub fn history(&self) -> &[Finding] {
        &self.history
    }

    fn not_apply(&mut self, why: &'static str) -> Vec<Event> {
        if self.said_not_apply {
            return Vec::new();
        }
        self.said_not_apply = true;
        vec![Event::DoesNotApply(why)]
    }

    /// Judges one window of every rank's samples (ranks with too few samples are left out).
    pub fn window(&mut self, ranks: &[RankWindow]) -> Vec<Event> {
        if self.world_size < 2 {
            return self.not_apply("one rank, nothing to compare");
        }
        // The device's shares where every rank has one (NCCL), else the stacks'.
        let basis = if ranks.len() >= 2 && ranks.iter().all(|r| r.arrival.is_some()) {
            Basis::Arrival
        } else {
            Basis::Stacks
        };
        let judged: Vec<&RankWindow> = ranks
            .iter()
            .filter(|r| basis == Basis::Arrival || r.samples >= MIN_SAMPLES)
            .collect();
        if judged.len() < 2 {
            return Vec::new();
        }
        if basis == Basis::Stacks && judged.iter().all(|r| r.waiting == 0) {
            // NCCL ranks' stacks never wait in c10d: while some have a device share (the others'
            // dumps late), the detection still applies.
            if ranks.iter().any(|r| r.arrival.is_some()) {
                return Vec::new();
            }
            self.quiet += 1;
            if self.quiet >= QUIET_WINDOWS && !self.warmed {
                return self.not_apply("no rank's samples wait in a torch.distributed collective");
            }
            return Vec::new();
        }
        if !self.warmed {
            self.warmed = true;
            return Vec::new();
        }
        let mut events = Vec::new();
        for r in &judged {
            let others: Vec<f64> = judged
                .iter()
                .filter(|o| o.rank != r.rank)
                .map(|o| o.share(basis))
                .collect();
            let others_samples: u32 = judged
                .iter()
                .filter(|o| o.rank != r.rank)
                .map(|o| o.samples)
                .sum();
            let Some(m) = median(&others) else { continue };
            let s = r.share(basis);
            // The device's durations are measured, not sampled: no chance to allow for.
            let se = match basis {
                Basis::Stacks => (s * (1.0 - s) / f64::from(r.samples.max(1))
                    + m * (1.0 - m) / f64::from(others_samples.max(1)))
                .sqrt(),
                Basis::Arrival => 0.0,
            };
            let finding = Finding {
                rank: r.rank,
                node: r.node,
                host: r.host.clone(),
                wait_share: s,
                median_wait_share: m,
                slower: slower(s, m),
                place: r.place.clone(),
                judged_by: basis,
            };
            let gap = m - s;
            match (gap > self.threshold, self.named.contains_key(&r.rank)) {
                (true, false) if gap >= Z * se => {
                    self.named.insert(r.rank, finding.clone());
                    self.history.push(finding.clone());
                    events.push(Event::Straggler(finding));
                }
                (_, true) if gap < self.threshold / 2.0 => {
                    self.named.remove(&r.rank);
                    events.push(Event::Recovered(finding));
                }
                _ => {}
            }
        }
        events.extend(self.nodes(ranks));
        events
    }

    /// A node is named once every one of its ranks is (on two or more nodes).
    fn nodes(&mut self, ranks: &[RankWindow]) -> Vec<Event> {
        let mut by_node: BTreeMap<u32, (String, Vec<u32>)> = BTreeMap::new();
        for r in ranks {
            by_node
                .entry(r.node)
                .or_insert_with(|| (r.host.clone(), Vec::new()))
                .1
                .push(r.rank);
        }
        let mut events = Vec::new();
        if by_node.len() < 2 {
            return events;
        }
        for (node, (host, members)) in by_node {
            let all = members.iter().all(|m| self.named.contains_key(m));
            match (all, self.named_nodes.contains(&node)) {
                (true, false) => {
                    self.named_nodes.insert(node);
                    events.push(Event::Node {
                        node,
                        host,
                        ranks: members,
                    });
                }
                (false, true) => {
                    self.named_nodes.remove(&node);
                    events.push(Event::NodeRecovered { node, host });
                }
                _ => {}
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rw(rank: u32, node: u32, samples: u32, waiting: u32) -> RankWindow {
        RankWindow {
            rank,
            node,
            host: format!("n{}", node + 1),
            samples,
            waiting,
            place: Some(Place {
                file: "train.py".into(),
                line: 42,
                function: "forward".into(),
            }),
            arrival: None,
        }
    }

    /// 4 ranks on 2 nodes, rank 3 waiting `w3` of 100 samples, the others 48.
    fn world(w3: u32) -> Vec<RankWindow> {
        vec![
            rw(0, 0, 100, 48),
            rw(1, 0, 100, 47),
            rw(2, 1, 100, 49),
            rw(3, 1, 100, w3),
        ]
    }

    #[test]
    fn the_rank_that_waits_least_is_named_once_and_once_more_when_it_recovers() {
        let mut j = Judge::new(20.0, 4);
        assert!(j.window(&world(48)).is_empty(), "the first window warms up");
        let e = j.window(&world(2));
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(
            e[0].to_string(),
            "straggler: rank 3 (node 1, host n2) waits in collectives 2% of the time where the median rank waits 48%: about 1.9× slower per step; where it was: train.py:42 in forward"
        );
        assert!(j.window(&world(2)).is_empty(), "said once");
        let e = j.window(&world(46));
        assert_eq!(e.len(), 1);
        assert!(matches!(&e[0], Event::Recovered(f) if f.rank == 3), "{e:?}");
        assert!(j.window(&world(46)).is_empty());
        assert_eq!(j.history().len(), 1);
    }

    /// A rank slowed by about the threshold: its windows fall either side of it (CI: 11%, 13%, 8%
    /// against a median of 34%, 32%, 37% at a threshold of 20: named, recovered, named).
    #[test]
    fn a_named_rank_recovers_only_under_half_the_threshold() {
        let mut j = Judge::new(20.0, 4);
        j.window(&world(48));
        assert_eq!(j.window(&world(2)).len(), 1);
        for w3 in [30, 35, 30] {
            assert!(j.window(&world(w3)).is_empty(), "{w3}: still named");
        }
        let e = j.window(&world(40));
        assert!(
            matches!(&e[..], [Event::Recovered(f)] if f.rank == 3),
            "{e:?}"
        );
        assert_eq!(j.history().len(), 1);
    }

    #[test]
    fn a_gap_within_the_threshold_is_no_straggler() {
        let mut j = Judge::new(20.0, 4);
        j.window(&world(48));
        // Rank 0 logging now and then: 10 points less waiting.
        for _ in 0..5 {
            assert!(j.window(&world(38)).is_empty());
        }
    }

    #[test]
    fn a_node_whose_ranks_all_lag_is_named() {
        let mut j = Judge::new(20.0, 4);
        let w = |a: u32, b: u32| {
            vec![
                rw(0, 0, 100, 50),
                rw(1, 0, 100, 50),
                rw(2, 1, 100, a),
                rw(3, 1, 100, b),
                rw(4, 2, 100, 50),
                rw(5, 2, 100, 50),
            ]
        };
        j.window(&w(50, 50));
        let e = j.window(&w(3, 4));
        let text: Vec<String> = e.iter().map(Event::to_string).collect();
        assert_eq!(e.len(), 3, "{text:?}");
        assert_eq!(
            text[2],
            "straggler: node 1 (host n2): all its ranks (2,3) lag"
        );
        let e = j.window(&w(50, 50));
        assert!(e.contains(&Event::NodeRecovered {
            node: 1,
            host: "n2".into()
        }));
    }

    #[test]
    fn one_rank_or_no_collective_does_not_apply_said_once() {
        let mut j = Judge::new(20.0, 1);
        let e = j.window(&[rw(0, 0, 100, 0)]);
        assert_eq!(
            e[0].to_string(),
            "straggler detection does not apply: one rank, nothing to compare"
        );
        assert!(j.window(&[rw(0, 0, 100, 0)]).is_empty());
        let mut j = Judge::new(20.0, 2);
        let none = [rw(0, 0, 100, 0), rw(1, 0, 100, 0)];
        for _ in 1..QUIET_WINDOWS {
            assert!(j.window(&none).is_empty(), "the first may be the start");
        }
        assert_eq!(j.window(&none).len(), 1);
        for _ in 0..3 {
            assert!(j.window(&none).is_empty());
        }
    }

    #[test]
    fn a_gap_the_samples_cannot_tell_from_chance_names_nobody() {
        let mut j = Judge::new(20.0, 4);
        let w = |n: u32, w3: u32| {
            vec![
                rw(0, 0, n, n * 45 / 100),
                rw(1, 0, n, n * 45 / 100),
                rw(2, 1, n, n * 45 / 100),
                rw(3, 1, n, w3),
            ]
        };
        j.window(&w(20, 9));
        // 20 samples: 45% against 20% (25 points) is within 3 standard errors (about 11 points each).
        assert!(j.window(&w(20, 4)).is_empty());
        // 200 samples: the same shares are not chance.
        assert_eq!(j.window(&w(200, 40)).len(), 1);
    }

    #[test]
    fn ranks_with_too_few_samples_are_left_out() {
        let mut j = Judge::new(20.0, 4);
        let mut w = world(48);
        j.window(&w);
        w[3] = rw(3, 1, MIN_SAMPLES - 1, 0);
        assert!(j.window(&w).is_empty());
    }

    #[test]
    fn two_halves_make_a_window() {
        let a = [rw(0, 0, 20, 10), rw(1, 0, 20, 5)];
        let mut b = vec![rw(1, 0, 20, 1), rw(2, 0, 20, 7)];
        b[0].place = None;
        let m = merge(&a, &b);
        assert_eq!(m.len(), 2, "rank 0 ended: the later half's ranks");
        assert_eq!((m[0].rank, m[0].samples, m[0].waiting), (1, 40, 6));
        assert!(m[0].place.is_some(), "the earlier half's place");
        assert_eq!((m[1].rank, m[1].samples, m[1].waiting), (2, 20, 7));
    }

    #[test]
    fn where_every_rank_has_the_device_s_share_it_judges_and_the_line_says_so() {
        let mut j = Judge::new(20.0, 4);
        // NCCL: the stacks of every rank alike (never in a c10d frame), the device's shares apart.
        let w = |a3: f64| -> Vec<RankWindow> {
            (0..4)
                .map(|r| RankWindow {
                    arrival: Some(if r == 3 { a3 } else { 0.45 }),
                    ..rw(r, r / 2, 100, 0)
                })
                .collect()
        };
        assert!(j.window(&w(0.45)).is_empty(), "the first window warms up");
        let e = j.window(&w(0.03));
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(
            e[0].to_string(),
            "straggler: rank 3 (node 1, host n2) waits in collectives 3% of the time where the median rank waits 45%, judged by arrival in collectives (Flight Recorder): about 1.8× slower per step; where it was: train.py:42 in forward"
        );
        assert!(matches!(&e[0], Event::Straggler(f) if f.judged_by == Basis::Arrival));
        let e = j.window(&w(0.44));
        assert!(
            e[0].to_string()
                .ends_with(", judged by arrival in collectives (Flight Recorder)"),
            "{e:?}"
        );
        // One rank without a share: the stacks judge the window (here: nobody waits, nobody named).
        let mut part = w(0.03);
        part[0].arrival = None;
        assert!(j.window(&part).is_empty());
        // Ranks whose stacks never wait and some of whose dumps are late: not "does not apply".
        let mut fresh = Judge::new(20.0, 4);
        for _ in 0..QUIET_WINDOWS + 1 {
            assert!(fresh.window(&part).is_empty());
        }
        // Halves: the mean of their shares.
        let m = merge(&w(0.1), &w(0.3));
        assert!((m[3].arrival.unwrap() - 0.2).abs() < 1e-9);
        let mut no = w(0.3);
        no[3].arrival = None;
        assert_eq!(merge(&w(0.1), &no)[3].arrival, None);
    }

    #[test]
    fn the_slowdown_follows_the_shares() {
        assert!((slower(0.02, 0.48) - 1.8846).abs() < 1e-3);
        assert!((slower(0.0, 0.5) - 2.0).abs() < 1e-9);
        assert_eq!(slower(0.0, 1.0), f64::INFINITY);
        assert_eq!(median(&[0.1, 0.5, 0.3]), Some(0.3));
        assert_eq!(median(&[0.1, 0.5]), Some(0.3));
    }
}
