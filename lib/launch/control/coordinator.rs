//! The control plane's decisions, as a pure state machine over joins, messages, closed connections
//! and time (the join's deadline, the wait for replacements, each node's deadline after a stop, the
//! world's hang): node 0's server (`server`) only carries its messages and its clock.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::super::hang::verdict::{self, NodeInfo, World};
use super::super::straggler::RankWindow;
use super::protocol::{FailureReport, Join, LostNode, Msg, Unkillable, NOT_EVERY_NODE, PROTOCOL};
use super::spares::{Note, Roster, Spares};
use crate::launch::supervise::KILL_WAIT;

/// Beyond a node's grace period and [`KILL_WAIT`], what its launcher may take to report its ranks'
/// end after a stop: killing what they left (2 s), draining their output, a stack dump with
/// `--stacks_on_failure` (4 s, held 2 s), the network.
pub const ENDED_SLACK: Duration = Duration::from_secs(15);

/// Ranks left behind after SIGKILL that node 0 relays, per node and in all.
const MAX_UNKILLABLE: usize = 64;

/// The most ranks one node may say it runs: far above any machine, and small enough that no sum
/// of them overflows the world size.
const MAX_LOCAL_RANKS: u32 = 1 << 16;

/// Keeps at most `max` bytes of `s`, at a character boundary.
/// The most ranks of one node's straggler window that node 0 is handed (more than any node runs).
const MAX_WINDOW_RANKS: usize = 512;

fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

/// Where a coordinator's message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum To {
    Node(u32),
    /// A spare, which from this message on is node `node` of the world: node 0's server moves its
    /// connection to that node rank before sending.
    Seat {
        spare: u32,
        node: u32,
    },
    /// Every node still connected.
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Joining,
    Running,
    /// Every rank of the attempt is gone; the next waits for replacements of the lost nodes.
    Waiting,
    Finished,
}

#[derive(Debug, Clone)]
struct Member {
    host: String,
    local_ranks: u32,
    /// Its `--grace_period` (`None`: it never SIGKILLs).
    grace: Option<Duration>,
    /// The world's total it was given (`--num_processes` with `--nproc_per_node`).
    world_size: Option<u32>,
}

impl Member {
    fn of(j: &Join) -> Member {
        let max = Duration::from_secs(crate::duration::MAX_SECONDS);
        Member {
            host: j.host.clone(),
            local_ranks: j.local_ranks,
            grace: j.grace_ms.map(Duration::from_millis).filter(|g| *g < max),
            world_size: j.world_size,
        }
    }

    /// How long after a stop this node has to report its ranks' end: its grace, SIGKILL's wait and
    /// [`ENDED_SLACK`]; `None` when it never SIGKILLs.
    fn ended_within(&self) -> Option<Duration> {
        self.grace.map(|g| g + KILL_WAIT + ENDED_SLACK)
    }
}

/// The server's decisions, as a state machine over joins, messages and closed connections.
#[derive(Debug)]
pub struct Coordinator {
    nodes: u32,
    run_id: Option<String>,
    max_restarts: Option<u32>,
    members: BTreeMap<u32, Member>,
    /// The members' ranks, summed, and the `--num_processes` of those that gave one, kept as they
    /// join and leave: a walk of every member per join made 20,000 joins quadratic (half of node
    /// 0's CPU while they joined).
    ranks_joined: u64,
    world_sizes: BTreeMap<u32, u32>,
    phase: Phase,
    attempt: u32,
    failure: Option<FailureReport>,
    ended: BTreeSet<u32>,
    /// Nodes whose connection is gone (after the run's end, or lost).
    gone: BTreeSet<u32>,
    /// `--hang_timeout`, as node 0's join (the reference) or else the first node to join gave it:
    /// every node must give the same.
    hang_timeout_ms: Option<Option<u64>>,
    /// The world's hang judgement of the running attempt ([`verdict`]).
    world: Option<World>,
    /// The coordinator's clock: the time of the last [`tick`](Coordinator::tick).
    now: Instant,
    /// Nodes lost and not replaced yet: the next attempt waits for a launcher of each.
    lost: BTreeMap<u32, String>,
    /// The join timeout (`--rdzv_timeout`): how long the first join and each wait for
    /// replacements last.
    join_timeout: Duration,
    /// When the first join gives up on the nodes still missing (`None`: never).
    join_until: Option<Instant>,
    /// When the running wait for replacements gives up.
    wait_until: Option<Instant>,
    /// The join timed out: the nodes joined were told, and node 0 serves no longer.
    timed_out: bool,
    /// When the running attempt was stopped: every node then has [`Member::ended_within`] to
    /// report its ranks' end.
    stopped_at: Option<Instant>,
    /// The deadlines of the nodes still to report their end after the stop, earliest first, made
    /// once at the stop; a node that ended or left since is skipped (and dropped) when reached.
    /// At 20,000 members a walk of them all on every turn of node 0's loop (each of the 20,000
    /// `ended` reports is a turn) kept node 0 from reading its members for longer than the loss
    /// window.
    due: BTreeSet<(Instant, u32)>,
    /// Why the run cannot restart whatever `--max_restarts` says (a node left it, ranks were left
    /// behind, a node never reported its end).
    no_restart: Option<String>,
    /// Ranks left behind after SIGKILL, every node's, as relayed.
    unkillable: usize,
    /// Launchers beyond the world's nodes, waiting to take a lost node's place ([`Spares`]), and
    /// the run's record of lost nodes.
    spares: Spares,
    /// What node 0 says of spares and lost nodes, until its server takes it.
    notes: Vec<Note>,
    /// `--replace_failing_nodes`: a node whose ranks failed is replaced by a waiting spare.
    replace_failing: bool,
}

impl Coordinator {
    pub fn new(nodes: u32) -> Coordinator {
        Coordinator {
            nodes,
            run_id: None,
            max_restarts: None,
            members: BTreeMap::new(),
            ranks_joined: 0,
            world_sizes: BTreeMap::new(),
            phase: Phase::Joining,
            attempt: 0,
            failure: None,
            ended: BTreeSet::new(),
            gone: BTreeSet::new(),
            hang_timeout_ms: None,
            world: None,
            now: Instant::now(),
            lost: BTreeMap::new(),
            join_timeout: Duration::from_secs(300),
            join_until: None,
            wait_until: None,
            timed_out: false,
            stopped_at: None,
            due: BTreeSet::new(),
            no_restart: None,
            unkillable: 0,
            spares: Spares::default(),
            notes: Vec::new(),
            replace_failing: false,
        }
    }

    /// Node 0's own join is the reference: its run id, `--max_restarts` and `--hang_timeout` are
    /// what every other node must give, whoever joins first.
    pub fn with_reference(mut self, j: &Join) -> Coordinator {
        self.run_id = Some(j.run_id.clone());
        self.max_restarts = Some(j.max_restarts);
        self.hang_timeout_ms = Some(j.hang_timeout_ms);
        self
    }

    /// The join timeout (`--rdzv_timeout`), counted from `start`: every node must have joined
    /// by `start + d` (else every node joined is refused, naming those missing), and each wait for
    /// replacements of lost nodes lasts `d` (else the run ends). Without it, the join waits for
    /// ever and a replacement 300 s.
    pub fn join_timeout(mut self, start: Instant, d: Duration) -> Coordinator {
        self.join_timeout = d;
        self.join_until = start.checked_add(d);
        self
    }

    /// `--replace_failing_nodes`: a node (not node 0) whose rank ended the attempt is replaced by a
    /// waiting spare for the next one, rather than restarted in place.
    pub fn replace_failing(mut self, on: bool) -> Coordinator {
        self.replace_failing = on;
        self
    }

    /// Every rank of the attempt is gone, and the next attempt waits for replacement launchers.
    pub fn waiting(&self) -> bool {
        self.phase == Phase::Waiting
    }

    /// The nodes not joined yet, while joining.
    fn missing(&self) -> Vec<u32> {
        (0..self.nodes)
            .filter(|n| !self.members.contains_key(n))
            .collect()
    }

    /// Nothing more to serve: every node has left after the run finished, or the join timed out.
    pub fn done(&self) -> bool {
        self.phase == Phase::Finished
            && (self.timed_out || (self.gone.len() == self.members.len() && self.spares.is_empty()))
    }

    /// What node 0 says of spares and lost nodes since the last call.
    pub fn take_notes(&mut self) -> Vec<Note> {
        std::mem::take(&mut self.notes)
    }

    /// The run's spares and lost nodes so far, for node 0's `--report_json`.
    pub fn roster(&self) -> &Roster {
        self.spares.roster()
    }

    /// A node's join: `Err` is the reason it is refused. Once the run has started, only a launcher
    /// replacing a lost node may join, for the next attempt, and spares (node ranks at or beyond
    /// the world's) at any time before its end.
    pub fn join(&mut self, j: &Join) -> Result<Vec<(To, Msg)>, String> {
        self.fits(j)?;
        match self.phase {
            Phase::Joining | Phase::Running | Phase::Waiting if j.node >= self.nodes => {
                return self.spare(j)
            }
            Phase::Joining => {}
            Phase::Finished => {
                let why = self
                    .failure
                    .as_ref()
                    .map(|f| format!(": {}", f.headline()))
                    .unwrap_or_default();
                return Err(format!(
                    "the run has ended (attempt {}){why}; node {} cannot join it",
                    self.attempt, j.node
                ));
            }
            Phase::Running | Phase::Waiting => return self.replace(j),
        }
        if let Some(m) = self.members.get(&j.node) {
            return Err(duplicate(j, &m.host));
        }
        if let Some(w) = j.world_size {
            let given = self.world_sizes.values().next().copied();
            if let Some(other) = given.filter(|o| *o != w) {
                return Err(format!(
                    "it says --num_processes {w} but another node says {other}: --num_processes is the world's total"
                ));
            }
        }
        self.run_id = Some(j.run_id.clone());
        self.max_restarts = Some(j.max_restarts);
        self.hang_timeout_ms = Some(j.hang_timeout_ms);
        self.ranks_joined += u64::from(j.local_ranks);
        if let Some(w) = j.world_size {
            self.world_sizes.insert(j.node, w);
        }
        self.members.insert(j.node, Member::of(j));
        if self.members.len() as u32 == self.nodes {
            if let Some(reason) = self.wrong_total() {
                // Every node is told, and the run ends before any rank starts.
                self.phase = Phase::Finished;
                return Ok(vec![(To::All, Msg::Reject { reason })]);
            }
            self.phase = Phase::Running;
            self.arm_world();
            if !self.spares.is_empty() {
                self.notes.push(Note::Started {
                    nodes: self.nodes,
                    world_size: self.ranks_joined,
                    spares: self.spares.waiting(),
                });
            }
            return Ok(self.starts());
        }
        Ok(Vec::new())
    }

    /// Whether a join fits the run at all, whatever its phase: the same protocol, node count, run
    /// id, restarts and hang timeout as node 0, a rank count a node may have and a world torch can
    /// hold.
    fn fits(&self, j: &Join) -> Result<(), String> {
        if j.protocol != PROTOCOL {
            return Err(format!(
                "protocol {} (this server speaks {PROTOCOL}): run the same accel-launch on every node",
                j.protocol
            ));
        }
        if j.nodes != self.nodes {
            return Err(format!(
                "it says --num_machines {} but node 0 says {}",
                j.nodes, self.nodes
            ));
        }
        if let Some(r) = &self.run_id {
            if *r != j.run_id {
                return Err(format!("run id `{}` is not this run's `{r}`", j.run_id));
            }
        }
        if let Some(m) = self.max_restarts {
            if m != j.max_restarts {
                return Err(format!(
                    "--max_restarts {} differs from the other nodes' {m}",
                    j.max_restarts
                ));
            }
        }
        if j.local_ranks == 0 {
            return Err("a node needs at least one rank".into());
        }
        if j.local_ranks > MAX_LOCAL_RANKS {
            return Err(format!(
                "{} ranks on one node (at most {MAX_LOCAL_RANKS})",
                j.local_ranks
            ));
        }
        let others = self.ranks_joined.saturating_sub(
            self.members
                .get(&j.node)
                .map_or(0, |m| u64::from(m.local_ranks)),
        );
        if others + u64::from(j.local_ranks) > i32::MAX as u64 {
            return Err("the world would exceed 2147483647 ranks (torch's limit)".into());
        }
        if let Some(h) = self.hang_timeout_ms.filter(|h| *h != j.hang_timeout_ms) {
            let say = |h: Option<u64>| match h {
                Some(ms) => format!("--hang_timeout {}", ms as f64 / 1000.0),
                None => "no --hang_timeout".to_string(),
            };
            return Err(format!(
                "it has {} but the other nodes have {}: the world's hang is judged against one timeout",
                say(j.hang_timeout_ms),
                say(h)
            ));
        }
        Ok(())
    }

    /// With uneven nodes (`--nproc_per_node`), a `--num_processes` given is the world's total: the
    /// nodes' ranks must add up to it.
    fn wrong_total(&self) -> Option<String> {
        let (node, want) = self
            .members
            .iter()
            .find_map(|(n, m)| m.world_size.map(|w| (*n, w)))?;
        let sum: u64 = self
            .members
            .values()
            .map(|m| u64::from(m.local_ranks))
            .sum();
        if sum == u64::from(want) {
            return None;
        }
        let parts: Vec<String> = self
            .members
            .values()
            .map(|m| m.local_ranks.to_string())
            .collect();
        Some(format!(
            "the nodes' ranks add up to {sum} ({}), but node {node} says --num_processes {want}: with --nproc_per_node, --num_processes is the world's total (or leave it out)",
            parts.join(" + ")
        ))
    }

    /// A join after the start: a launcher replacing a lost node joins the next attempt.
    fn replace(&mut self, j: &Join) -> Result<Vec<(To, Msg)>, String> {
        let Some(m) = self.members.get(&j.node).cloned() else {
            return Err(format!(
                "the run has already started (attempt {}); node {} cannot join late",
                self.attempt, j.node
            ));
        };
        if !self.lost.contains_key(&j.node) {
            return Err(duplicate(j, &m.host));
        }
        if j.node == 0 {
            return Err("node 0 hosts the control plane and cannot be replaced".into());
        }
        if !self.can_restart() {
            return Err(format!(
                "node {} was lost in attempt {} and no restart is left (--max_restarts {}): the run ends without it",
                j.node,
                self.attempt,
                self.max_restarts.unwrap_or(0)
            ));
        }
        if m.local_ranks != j.local_ranks {
            return Err(format!(
                "node {} ran {} rank(s) and its replacement has {}: the other nodes' ranks were placed for {}",
                j.node, m.local_ranks, j.local_ranks, m.local_ranks
            ));
        }
        self.lost.remove(&j.node);
        self.gone.remove(&j.node);
        self.members.insert(j.node, Member::of(j));
        // It has no ranks in this attempt: it counts as ended.
        self.ended.insert(j.node);
        if self.phase == Phase::Waiting && self.lost.is_empty() {
            return Ok(self.restart());
        }
        Ok(Vec::new())
    }

    /// A spare's join: it waits, and takes a lost node's place at once when the world waits for one.
    fn spare(&mut self, j: &Join) -> Result<Vec<(To, Msg)>, String> {
        self.spares.join(j)?;
        self.notes.push(Note::Joined {
            node: j.node,
            host: j.host.clone(),
            nodes: self.nodes,
        });
        let mut out = vec![(To::Node(j.node), Msg::Spare { nodes: self.nodes })];
        if self.phase == Phase::Waiting {
            out.extend(self.seat_spares());
            if self.lost.is_empty() {
                out.extend(self.restart());
            }
        }
        Ok(out)
    }

    /// Waiting spares take the lost nodes' places for the next attempt, each the node rank of the
    /// one it replaces: the other nodes keep theirs.
    fn seat_spares(&mut self) -> Vec<(To, Msg)> {
        let attempt = self.attempt + 1;
        let lost: Vec<u32> = self.lost.keys().copied().filter(|n| *n != 0).collect();
        let mut out = Vec::new();
        for node in lost {
            let ranks = self.members.get(&node).map_or(0, |m| m.local_ranks);
            let Some(j) = self.spares.take(ranks, node, attempt) else {
                continue;
            };
            let host = self.lost.remove(&node).unwrap_or_default();
            self.gone.remove(&node);
            self.members.insert(node, Member::of(&j));
            // It has no ranks in the attempt that ended: it counts as ended.
            self.ended.insert(node);
            self.notes.push(Note::Seated {
                spare: j.node,
                host: j.host.clone(),
                lost: LostNode {
                    node,
                    host,
                    attempt: self.attempt,
                    why: String::new(),
                },
                attempt,
            });
            out.push((
                To::Seat {
                    spare: j.node,
                    node,
                },
                Msg::Seated { node, attempt },
            ));
        }
        out
    }

    /// `--replace_failing_nodes`: the node whose rank ended the attempt leaves the world when a
    /// spare with as many ranks waits to take its place; its launcher is told the run's end for it
    /// (its rank's failure, so it exits with that rank's status).
    fn retire_failing(&mut self) -> Vec<(To, Msg)> {
        let Some(f) = self.failure.clone().filter(|_| self.replace_failing) else {
            return Vec::new();
        };
        let node = f.node;
        let ranks = self.members.get(&node).map_or(0, |m| m.local_ranks);
        if f.rank.is_none()
            || node == 0
            || self.lost.contains_key(&node)
            || !self.spares.fits(ranks)
        {
            return Vec::new();
        }
        self.lose(node, &format!("its ranks failed: {}", f.headline()));
        let mut told = f;
        told.what.push_str(&format!(
            "; node {node} leaves the run, replaced by a spare"
        ));
        vec![(
            To::Node(node),
            Msg::Finish {
                failure: Some(told),
            },
        )]
    }

    /// A node of the world lost (`why`): recorded for the report and the exclude file, and waited
    /// for (or replaced by a spare) before the next attempt.
    fn lose(&mut self, node: u32, why: &str) {
        let host = self.host(node);
        let l = LostNode {
            node,
            host: host.clone(),
            attempt: self.attempt,
            why: why.to_string(),
        };
        self.notes.push(Note::Lost(l.clone()));
        self.spares.lost(l);
        self.lost.insert(node, host);
    }

    /// A message from a spare still waiting: only its leaving matters (a signal to its launcher);
    /// the world goes on without it.
    fn spare_message(&mut self, node: u32, m: Msg) -> Vec<(To, Msg)> {
        match m {
            Msg::Leave { failure } => {
                let why = failure.what.clone();
                let mut out = self.spare_gone(node, &why);
                // Its own end of the join: it is told that it left.
                out.push((
                    To::Node(node),
                    Msg::Finish {
                        failure: Some(FailureReport { node, ..failure }),
                    },
                ));
                out
            }
            Msg::Bye => self.spare_gone(node, "it left"),
            _ => Vec::new(),
        }
    }

    /// A waiting spare's connection closed, its heartbeats stopped, or it left: noted, not a failure.
    fn spare_gone(&mut self, node: u32, why: &str) -> Vec<(To, Msg)> {
        let finished = self.phase == Phase::Finished;
        if let Some(host) = self.spares.gone(node, why) {
            if !finished {
                self.notes.push(Note::Gone {
                    node,
                    host,
                    why: why.to_string(),
                });
            }
        }
        Vec::new()
    }

    /// Whether the attempt that failed may be followed by another.
    fn can_restart(&self) -> bool {
        let requeue = self.failure.as_ref().is_some_and(|f| f.requeue);
        // A hang is not restarted: the same run would most likely hang again.
        let hang = self.failure.as_ref().is_some_and(|f| f.hang);
        self.failure.is_some()
            && !requeue
            && !hang
            && self.no_restart.is_none()
            && !self.lost.contains_key(&0)
            && self.attempt < self.max_restarts.unwrap_or(0)
    }

    /// The join's and the replacement wait's deadlines, once past: the run ends.
    fn waited(&mut self, now: Instant) -> Vec<(To, Msg)> {
        let past = |d: Option<Instant>| d.is_some_and(|d| now >= d);
        match self.phase {
            Phase::Joining if past(self.join_until) => {
                let reason = format!(
                    "{NOT_EVERY_NODE} joined within {} s: still waiting for node rank(s) {:?}",
                    self.join_timeout.as_secs(),
                    self.missing()
                );
                self.phase = Phase::Finished;
                self.timed_out = true;
                vec![(To::All, Msg::Reject { reason })]
            }
            Phase::Waiting if past(self.wait_until) => self.give_up(),
            _ => Vec::new(),
        }
    }

    /// The wait for replacements passed its time: the run ends with the failure that began it.
    fn give_up(&mut self) -> Vec<(To, Msg)> {
        let why = format!(
            "; no launcher replaced {} within {} s",
            LostNode::list(&self.lost_nodes()),
            self.join_timeout.as_secs()
        );
        if let Some(f) = &mut self.failure {
            f.what.push_str(&why);
        }
        self.finish()
    }

    fn lost_nodes(&self) -> Vec<LostNode> {
        self.lost
            .iter()
            .map(|(n, h)| LostNode {
                node: *n,
                host: h.clone(),
                attempt: self.attempt,
                why: String::new(),
            })
            .collect()
    }

    /// Each node's place in the world: rank offsets in node order.
    fn starts(&self) -> Vec<(To, Msg)> {
        let world_size = self.members.values().map(|m| m.local_ranks).sum();
        // Node 0 decides once the slowest node's deadline after a stop has passed.
        let stop_within_ms = self
            .members
            .values()
            .map(Member::ended_within)
            .try_fold(Duration::ZERO, |a, w| w.map(|w| a.max(w)))
            .map(|d| d.as_millis() as u64);
        let mut offset = 0;
        let mut out = Vec::new();
        for (n, m) in &self.members {
            out.push((
                To::Node(*n),
                Msg::Start {
                    attempt: self.attempt,
                    world_size,
                    rank_offset: offset,
                    nodes: self.nodes,
                    stop_within_ms,
                },
            ));
            offset += m.local_ranks;
        }
        out
    }

    /// A new attempt's hang judgement, with each node's ranks.
    fn arm_world(&mut self) {
        let Some(Some(ms)) = self.hang_timeout_ms else {
            return;
        };
        let mut first_rank = 0;
        let mut nodes = BTreeMap::new();
        for (n, m) in &self.members {
            nodes.insert(
                *n,
                NodeInfo {
                    host: m.host.clone(),
                    first_rank,
                    ranks: m.local_ranks,
                },
            );
            first_rank += m.local_ranks;
        }
        self.world = Some(World::new(Duration::from_millis(ms), nodes));
    }

    /// Advances the coordinator's clock: the world's hang judgement decides on time.
    pub fn tick(&mut self, now: Instant) -> Vec<(To, Msg)> {
        self.now = now;
        let acts = match self.world.as_mut() {
            Some(w) if self.phase == Phase::Running && self.failure.is_none() => w.tick(now),
            _ => Vec::new(),
        };
        let mut out = self.acts(acts);
        out.extend(self.overdue(now));
        out.extend(self.waited(now));
        out
    }

    /// When [`tick`](Coordinator::tick) next has something to decide.
    pub fn next_wake(&self) -> Option<Instant> {
        let world = match &self.world {
            Some(w) if self.phase == Phase::Running && self.failure.is_none() => w.next_wake(),
            _ => None,
        };
        // The first entry may belong to a node that ended since the last tick: an early wake.
        let ended = self
            .due
            .first()
            .filter(|_| self.phase == Phase::Running && self.stopped_at.is_some())
            .map(|(at, _)| *at);
        let waited = match self.phase {
            Phase::Joining => self.join_until,
            Phase::Waiting => self.wait_until,
            _ => None,
        };
        [world, ended, waited].into_iter().flatten().min()
    }

    /// The stop: every node still running has its own deadline to report its ranks' end.
    fn stop_clock(&mut self) {
        let at = self.now;
        self.stopped_at = Some(at);
        self.due = self
            .members
            .iter()
            .filter(|(n, _)| !self.ended.contains(n) && !self.gone.contains(n))
            .filter_map(|(n, m)| Some((at.checked_add(m.ended_within()?)?, *n)))
            .collect();
    }

    /// The earliest deadline still pending after the stop, dropping those of nodes that ended or
    /// left meanwhile.
    fn next_due(&mut self) -> Option<(Instant, u32)> {
        if self.phase != Phase::Running || self.stopped_at.is_none() {
            return None;
        }
        while let Some(&(at, n)) = self.due.first() {
            if !self.ended.contains(&n) && !self.gone.contains(&n) {
                return Some((at, n));
            }
            self.due.pop_first();
        }
        None
    }

    /// A node that did not report its ranks' end by its deadline after the stop is lost: its
    /// heartbeats alone do not keep the world waiting. Its ranks may still run, so no restart.
    fn overdue(&mut self, now: Instant) -> Vec<(To, Msg)> {
        let mut late = Vec::new();
        while let Some((at, n)) = self.next_due() {
            if now < at {
                break;
            }
            self.due.pop_first();
            late.push(n);
        }
        if late.is_empty() {
            return Vec::new();
        }
        for n in &late {
            let within = self
                .members
                .get(n)
                .and_then(Member::ended_within)
                .unwrap_or_default();
            let host = self.host(*n);
            if let Some(f) = &mut self.failure {
                f.what.push_str(&format!(
                    "; node {n} ({host}) did not report its ranks' end within {} s of the stop and was left",
                    within.as_secs()
                ));
            }
            self.no_restart
                .get_or_insert_with(|| format!("node {n}'s ranks may still run"));
            self.lose(*n, "it did not report its ranks' end after the stop");
            self.ended.insert(*n);
            self.gone.insert(*n);
        }
        self.maybe_next()
    }

    /// What the world's hang judgement decided, as messages.
    fn acts(&mut self, acts: Vec<verdict::Act>) -> Vec<(To, Msg)> {
        let mut out = Vec::new();
        for a in acts {
            match a {
                verdict::Act::Ask => out.push((
                    To::All,
                    Msg::Autopsy {
                        attempt: self.attempt,
                    },
                )),
                verdict::Act::Verdict(v) => {
                    if self.failure.is_some() {
                        continue;
                    }
                    self.failure = Some(FailureReport {
                        what: format!("declared the world hung: {}", v.line),
                        hang: true,
                        ..FailureReport::lost(0, &self.host(0), "")
                    });
                    self.stop_clock();
                    out.push((
                        To::All,
                        Msg::Verdict {
                            attempt: self.attempt,
                            line: v.line,
                            stacks: v.stacks,
                            quiet_ms: v.quiet.as_millis() as u64,
                        },
                    ));
                }
                verdict::Act::Lost { node, why } => {
                    let host = self.host(node);
                    out.extend(self.fail(FailureReport::lost(node, &host, &why)));
                }
            }
        }
        out
    }

    /// A message from a joined node.
    pub fn message(&mut self, node: u32, m: Msg) -> Vec<(To, Msg)> {
        if self.spares.waits(node) {
            return self.spare_message(node, m);
        }
        let now = self.now;
        match m {
            Msg::Quiet { attempt, quiet_ms } if attempt == self.attempt => {
                let acts = match self.world.as_mut() {
                    Some(w) if self.failure.is_none() => {
                        w.quiet(now, node, quiet_ms.map(Duration::from_millis))
                    }
                    _ => Vec::new(),
                };
                self.acts(acts)
            }
            Msg::Windows { attempt, ranks } if attempt == self.attempt => self.windows(node, ranks),
            Msg::Stacks { attempt, stacks } if attempt == self.attempt => {
                let acts = match self.world.as_mut() {
                    Some(w) if self.failure.is_none() => w.stacks(now, node, stacks),
                    _ => Vec::new(),
                };
                self.acts(acts)
            }
            Msg::Failed { attempt, failure } if attempt == self.attempt => {
                let failure = self.own_failure(node, failure);
                self.fail(failure)
            }
            Msg::Ended { attempt, ok } if attempt == self.attempt => {
                if !ok && self.failure.is_none() && self.phase == Phase::Running {
                    // A node that failed without saying why (it should send `Failed` first).
                    let host = self.host(node);
                    let mut out = self.fail(FailureReport::lost(node, &host, "its ranks failed"));
                    self.ended.insert(node);
                    out.extend(self.maybe_next());
                    return out;
                }
                self.ended.insert(node);
                let acts = match self.world.as_mut() {
                    Some(w) if self.failure.is_none() => w.ended(now, node),
                    _ => Vec::new(),
                };
                let mut out = self.acts(acts);
                out.extend(self.tick(now));
                out.extend(self.maybe_next());
                out
            }
            Msg::Leave { failure } => self.leave(node, failure),
            Msg::Left { attempt, ranks } if attempt == self.attempt => {
                let host = self.host(node);
                let room = MAX_UNKILLABLE.saturating_sub(self.unkillable);
                let ranks: Vec<Unkillable> = ranks
                    .into_iter()
                    .take(room)
                    .map(|mut u| {
                        // A node speaks only for its own ranks.
                        u.node = node;
                        u.host = host.clone();
                        truncate(&mut u.state, 4);
                        truncate(&mut u.wchan, 128);
                        if let Some(n) = u.note.as_mut() {
                            truncate(n, 512);
                        }
                        u
                    })
                    .collect();
                if ranks.is_empty() {
                    return Vec::new();
                }
                self.unkillable += ranks.len();
                self.no_restart
                    .get_or_insert_with(|| format!("node {node} left ranks behind"));
                vec![(
                    To::All,
                    Msg::Left {
                        attempt: self.attempt,
                        ranks,
                    },
                )]
            }
            Msg::Bye => self.bye(node),
            _ => Vec::new(),
        }
    }

    /// A node's straggler window, handed to node 0 (whose launcher judges the world's): the node
    /// speaks only for its own ranks (its node and host are set here), for at most
    /// [`MAX_WINDOW_RANKS`] of them, each place cut to 256 bytes, so that one message stays far
    /// below the line cap whatever a node sends; a device share is kept between 0 and 1.
    fn windows(&mut self, node: u32, ranks: Vec<RankWindow>) -> Vec<(To, Msg)> {
        if self.failure.is_some() || ranks.is_empty() {
            return Vec::new();
        }
        let host = self.host(node);
        let ranks: Vec<RankWindow> = ranks
            .into_iter()
            .take(MAX_WINDOW_RANKS)
            .map(|mut r| {
                r.node = node;
                r.host = host.clone();
                r.waiting = r.waiting.min(r.samples);
                r.arrival = r
                    .arrival
                    .filter(|a| a.is_finite())
                    .map(|a| a.clamp(0.0, 1.0));
                if let Some(p) = r.place.as_mut() {
                    truncate(&mut p.file, 256);
                    truncate(&mut p.function, 256);
                }
                r
            })
            .collect();
        vec![(
            To::Node(0),
            Msg::Windows {
                attempt: self.attempt,
                ranks,
            },
        )]
    }

    /// A node's goodbye. After the run's end it leaves without being lost. During the join it
    /// leaves the join, as its closing connection would: a launcher says bye when its own join
    /// fails (its `--rdzv_timeout` shorter than node 0's), and its connection may stay open
    /// meanwhile; counted as joined, its ranks would be in the start that the other nodes wait in,
    /// and a relaunch of it refused as already in the run. While the run goes on a bye is no
    /// leave (a node leaves a running world with `Leave`): its connection's closing speaks for it.
    fn bye(&mut self, node: u32) -> Vec<(To, Msg)> {
        match self.phase {
            Phase::Finished => {
                self.gone.insert(node);
                Vec::new()
            }
            Phase::Joining => self.closed(node, "it left the join"),
            Phase::Running | Phase::Waiting => Vec::new(),
        }
    }

    /// A node's launcher ends the run, at any phase (it could not start its ranks; a signal
    /// stopped it while joining or waiting): every node is stopped and then told, no restart.
    fn leave(&mut self, node: u32, failure: FailureReport) -> Vec<(To, Msg)> {
        let mut f = self.own_failure(node, failure);
        f.rank = None;
        f.local_rank = None;
        f.hints.truncate(8);
        for h in &mut f.hints {
            truncate(h, 1024);
        }
        // A node that ends the run ends it as a failure: never with status 0.
        if f.status == Some(0) {
            f.status = None;
        }
        if f.status.is_none() && f.code.is_none() && f.signal.is_none() && !f.requeue {
            f.status = Some(crate::exit_status::ExitStatus::LauncherFailed.code());
        }
        self.no_restart
            .get_or_insert_with(|| format!("node {node} left the run"));
        match self.phase {
            Phase::Joining => {
                self.failure = Some(f);
                self.finish()
            }
            Phase::Running => {
                let mut out = self.fail(f);
                self.ended.insert(node);
                out.extend(self.maybe_next());
                out
            }
            Phase::Waiting => {
                self.failure = Some(f);
                self.finish()
            }
            Phase::Finished => Vec::new(),
        }
    }

    /// A node's connection closed, or its heartbeats stopped.
    pub fn closed(&mut self, node: u32, why: &str) -> Vec<(To, Msg)> {
        if self.spares.waits(node) {
            return self.spare_gone(node, why);
        }
        if self.gone.contains(&node) || !self.members.contains_key(&node) {
            return Vec::new();
        }
        match self.phase {
            Phase::Joining => {
                // It may join again (a restarted launcher).
                if let Some(m) = self.members.remove(&node) {
                    self.ranks_joined = self.ranks_joined.saturating_sub(u64::from(m.local_ranks));
                }
                self.world_sizes.remove(&node);
                Vec::new()
            }
            Phase::Finished => {
                self.gone.insert(node);
                Vec::new()
            }
            Phase::Running => {
                self.gone.insert(node);
                // Lost while every node's ranks were still: a silent node in the hang's verdict, not
                // (yet) a failure.
                let silent = self.failure.is_none()
                    && self.world.as_mut().is_some_and(|w| w.lost(node, why));
                if silent {
                    self.lose(node, why);
                    self.ended.insert(node);
                    let now = self.now;
                    let mut out = self.tick(now);
                    out.extend(self.maybe_next());
                    return out;
                }
                let host = self.host(node);
                self.lose(node, why);
                let mut out = self.fail(FailureReport::lost(node, &host, why));
                self.ended.insert(node);
                out.extend(self.maybe_next());
                out
            }
            Phase::Waiting => {
                self.gone.insert(node);
                self.lose(node, why);
                if self.can_restart() {
                    let mut out = self.seat_spares();
                    if self.lost.is_empty() {
                        out.extend(self.restart());
                        return out;
                    }
                    // The survivors learn that they now wait for this one too.
                    out.push((To::All, self.wait_msg()));
                    out
                } else {
                    if let Some(f) = &mut self.failure {
                        f.what.push_str(&format!(
                            "; then node {node} was lost too, which cannot be replaced"
                        ));
                    }
                    self.finish()
                }
            }
        }
    }

    fn host(&self, node: u32) -> String {
        self.members
            .get(&node)
            .map(|m| m.host.clone())
            .unwrap_or_default()
    }

    /// A node speaks only for itself: its report names the node of its connection and the host it
    /// joined with, a rank of its own ranks (else none), and is capped in size; only node 0's
    /// server declares hangs.
    fn own_failure(&self, node: u32, mut f: FailureReport) -> FailureReport {
        f.node = node;
        f.host = self.host(node);
        let ranks = self.members.get(&node).map_or(0, |m| m.local_ranks);
        if f.local_rank.is_some_and(|l| l >= ranks) {
            f.local_rank = None;
            f.rank = None;
        }
        f.hang = false;
        truncate(&mut f.what, 1024);
        truncate(&mut f.stderr_tail, 16 * 1024);
        if let Some(m) = f.error_message.as_mut() {
            truncate(m, 16 * 1024);
        }
        f
    }

    fn fail(&mut self, failure: FailureReport) -> Vec<(To, Msg)> {
        if self.phase != Phase::Running || self.failure.is_some() {
            return Vec::new();
        }
        self.failure = Some(failure.clone());
        self.stop_clock();
        vec![(
            To::All,
            Msg::Stop {
                attempt: self.attempt,
                failure,
            },
        )]
    }

    /// Once every node's ranks of the attempt are gone: all restart together (once every lost node
    /// is replaced), or all finish.
    fn maybe_next(&mut self) -> Vec<(To, Msg)> {
        if self.phase != Phase::Running || self.ended.len() as u32 != self.nodes {
            return Vec::new();
        }
        if self.can_restart() {
            // Spares first: the next attempt starts now when they fill every lost place.
            let mut out = self.retire_failing();
            out.extend(self.seat_spares());
            if self.lost.is_empty() {
                out.extend(self.restart());
                return out;
            }
            self.phase = Phase::Waiting;
            self.wait_until = self.now.checked_add(self.join_timeout);
            out.push((To::All, self.wait_msg()));
            return out;
        }
        self.finish()
    }

    fn restart(&mut self) -> Vec<(To, Msg)> {
        self.attempt += 1;
        self.failure = None;
        self.stopped_at = None;
        self.wait_until = None;
        self.due.clear();
        self.ended.clear();
        self.phase = Phase::Running;
        self.arm_world();
        self.starts()
    }

    fn finish(&mut self) -> Vec<(To, Msg)> {
        self.phase = Phase::Finished;
        vec![(
            To::All,
            Msg::Finish {
                failure: self.failure.clone(),
            },
        )]
    }

    fn wait_msg(&self) -> Msg {
        Msg::Wait {
            attempt: self.attempt + 1,
            lost: self.lost_nodes(),
            secs: self.join_timeout.as_secs(),
        }
    }
}

/// Two launchers with one node rank: the second is refused, naming both hosts.
fn duplicate(j: &Join, host: &str) -> String {
    if j.node == 0 {
        // Node 0 hosts the control plane: it is never replaced, so a second one has no place.
        return format!(
            "node 0 is already in the run from host {host}, and this launcher (host {}) also says --machine_rank 0; node 0 hosts the control plane and is never replaced: give this launcher another --machine_rank, or another --main_process_port for another run",
            j.host
        );
    }
    format!(
        "node {} is already in the run from host {host}, and this launcher (host {}) has the same --machine_rank {}; a replacement may join only once node {} is lost",
        j.node, j.host, j.node, j.node
    )
}

#[cfg(test)]
mod tests {
    use super::super::super::hang::verdict::WireStack;
    use super::*;
    use crate::exit_status::ExitStatus;

    fn join(node: u32, ranks: u32) -> Join {
        Join {
            protocol: PROTOCOL,
            run_id: "none".into(),
            node,
            nodes: 2,
            local_ranks: ranks,
            host: format!("h{node}"),
            max_restarts: 1,
            hang_timeout_ms: None,
            grace_ms: Some(3_000),
            world_size: None,
        }
    }

    fn rank_failure(node: u32, rank: u32) -> FailureReport {
        FailureReport {
            node,
            host: format!("h{node}"),
            rank: Some(rank),
            local_rank: Some(1),
            code: Some(7),
            signal: None,
            what: "exited with status 7".into(),
            stderr_tail: "boom\n".into(),
            error_message: None,
            requeue: false,
            step_wide: false,
            hang: false,
            status: None,
            hints: Vec::new(),
        }
    }

    #[test]
    fn a_requeue_finishes_the_run_even_with_restarts_left() {
        let mut c = Coordinator::new(2);
        let mut j = join(0, 2);
        j.max_restarts = 3;
        c.join(&j).unwrap();
        let mut j = join(1, 2);
        j.max_restarts = 3;
        c.join(&j).unwrap();
        let warning = FailureReport {
            signal: Some(libc::SIGUSR1),
            requeue: true,
            ..FailureReport::lost(1, "h1", "")
        };
        let out = c.message(
            1,
            Msg::Failed {
                attempt: 0,
                failure: warning.clone(),
            },
        );
        assert!(
            matches!(&out[..], [(To::All, Msg::Stop { failure, .. })] if failure.requeue),
            "{out:?}"
        );
        assert!(c
            .message(
                0,
                Msg::Ended {
                    attempt: 0,
                    ok: false
                }
            )
            .is_empty());
        let out = c.message(
            1,
            Msg::Ended {
                attempt: 0,
                ok: false,
            },
        );
        assert!(
            matches!(&out[..], [(To::All, Msg::Finish { failure: Some(f) })] if f.requeue),
            "no restart after a requeue: {out:?}"
        );
        assert_eq!(warning.exit_status(), ExitStatus::Requeued);
    }

    /// Node 0's join is the reference, whoever joins first: a node 1 with another run id or
    /// restart count is refused even before node 0 has joined.
    #[test]
    fn node_0_is_the_reference_whoever_joins_first() {
        let mut j0 = join(0, 2);
        j0.run_id = "slurm:7.0".into();
        let mut c = Coordinator::new(2).with_reference(&j0);
        let mut j1 = join(1, 2);
        j1.run_id = "slurm:8.0".into();
        assert!(c
            .join(&j1)
            .unwrap_err()
            .contains("is not this run's `slurm:7.0`"));
        let mut j1 = join(1, 2);
        j1.run_id = "slurm:7.0".into();
        j1.max_restarts = 5;
        assert!(c.join(&j1).unwrap_err().contains("--max_restarts 5"));
        j1.max_restarts = 1;
        j1.local_ranks = u32::MAX;
        assert!(c.join(&j1).unwrap_err().contains("ranks on one node"));
        j1.local_ranks = 2;
        assert!(c.join(&j1).unwrap().is_empty());
        assert_eq!(c.join(&j0).unwrap().len(), 2);
    }

    /// A member speaks only for its own node: node 1's report of a failure "on node 0" is node
    /// 1's, with node 1's host, a rank outside its own ranks dropped, and no hang flag.
    #[test]
    fn a_member_speaks_only_for_its_own_node() {
        let mut c = Coordinator::new(2);
        c.join(&join(0, 2)).unwrap();
        c.join(&join(1, 2)).unwrap();
        let forged = FailureReport {
            local_rank: Some(9),
            hang: true,
            stderr_tail: "x".repeat(100_000),
            ..rank_failure(0, 1)
        };
        let out = c.message(
            1,
            Msg::Failed {
                attempt: 0,
                failure: forged,
            },
        );
        let [(To::All, Msg::Stop { failure, .. })] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!((failure.node, failure.host.as_str()), (1, "h1"));
        assert_eq!(
            (failure.rank, failure.local_rank, failure.hang),
            (None, None, false)
        );
        assert_eq!(failure.stderr_tail.len(), 16 * 1024);
    }

    #[test]
    fn uneven_nodes_get_offsets_in_node_order() {
        let mut c = Coordinator::new(2);
        assert!(c.join(&join(1, 1)).unwrap().is_empty());
        let out = c.join(&join(0, 3)).unwrap();
        assert_eq!(
            out,
            vec![
                (
                    To::Node(0),
                    Msg::Start {
                        attempt: 0,
                        world_size: 4,
                        rank_offset: 0,
                        nodes: 2,
                        // Node 0 decides within the slowest node's grace, SIGKILL's wait and slack.
                        stop_within_ms: Some(3_000 + 10_000 + 15_000),
                    }
                ),
                (
                    To::Node(1),
                    Msg::Start {
                        attempt: 0,
                        world_size: 4,
                        rank_offset: 3,
                        nodes: 2,
                        stop_within_ms: Some(28_000),
                    }
                ),
            ]
        );
    }

    #[test]
    fn joins_that_do_not_fit_are_refused() {
        let mut c = Coordinator::new(2);
        c.join(&join(0, 2)).unwrap();
        let mut twin = join(0, 2);
        twin.host = "h0b".into();
        let e = c.join(&twin).unwrap_err();
        assert!(
            e.contains("node 0 is already in the run from host h0, and this launcher (host h0b)"),
            "{e}"
        );
        // Node 0 is never replaced: a second one is told so, not to wait for node 0's loss.
        assert!(
            e.contains("node 0 hosts the control plane and is never replaced")
                && !e.contains("replacement may join"),
            "{e}"
        );
        let mut other = join(1, 2);
        other.nodes = 3;
        assert!(c.join(&other).unwrap_err().contains("--num_machines 3"));
        let mut other = join(1, 2);
        other.max_restarts = 0;
        assert!(c.join(&other).unwrap_err().contains("--max_restarts 0"));
        // A launcher that died while joining may join again.
        c.closed(0, "gone");
        c.join(&join(0, 2)).unwrap();
        c.join(&join(1, 2)).unwrap();
        // Once running, a second launcher of a node still in the run is a duplicate too.
        assert!(c
            .join(&join(1, 2))
            .unwrap_err()
            .contains("node 1 is already in the run from host h1"));
    }

    #[test]
    fn first_failure_stops_everyone_then_all_restart_together() {
        let mut c = Coordinator::new(2);
        c.join(&join(0, 2)).unwrap();
        c.join(&join(1, 2)).unwrap();
        let f = rank_failure(1, 3);
        let out = c.message(
            1,
            Msg::Failed {
                attempt: 0,
                failure: f.clone(),
            },
        );
        assert_eq!(
            out,
            vec![(
                To::All,
                Msg::Stop {
                    attempt: 0,
                    failure: f.clone()
                }
            )]
        );
        // A second failure of the same attempt is not broadcast again.
        assert!(c
            .message(
                0,
                Msg::Failed {
                    attempt: 0,
                    failure: rank_failure(0, 0)
                }
            )
            .is_empty());
        assert!(c
            .message(
                1,
                Msg::Ended {
                    attempt: 0,
                    ok: false
                }
            )
            .is_empty());
        let out = c.message(
            0,
            Msg::Ended {
                attempt: 0,
                ok: false,
            },
        );
        assert_eq!(out.len(), 2);
        assert!(matches!(out[0].1, Msg::Start { attempt: 1, .. }));
        // Attempt 1 succeeds everywhere.
        assert!(c
            .message(
                0,
                Msg::Ended {
                    attempt: 1,
                    ok: true
                }
            )
            .is_empty());
        let out = c.message(
            1,
            Msg::Ended {
                attempt: 1,
                ok: true,
            },
        );
        assert_eq!(out, vec![(To::All, Msg::Finish { failure: None })]);
        c.message(0, Msg::Bye);
        assert!(!c.done());
        c.closed(1, "closed");
        assert!(c.done());
    }

    fn started(nodes: u32, max_restarts: u32) -> Coordinator {
        let mut c = Coordinator::new(nodes).join_timeout(Instant::now(), Duration::from_secs(60));
        for n in 0..nodes {
            let mut j = join(n, 2);
            j.nodes = nodes;
            j.max_restarts = max_restarts;
            c.join(&j).unwrap();
        }
        c
    }

    fn ended(c: &mut Coordinator, node: u32, attempt: u32) -> Vec<(To, Msg)> {
        c.message(node, Msg::Ended { attempt, ok: false })
    }

    fn lost(nodes: &[u32]) -> Vec<LostNode> {
        nodes
            .iter()
            .map(|n| LostNode {
                node: *n,
                host: format!("h{n}"),
                attempt: 0,
                why: String::new(),
            })
            .collect()
    }

    #[test]
    fn a_lost_nodes_replacement_joins_the_next_attempt() {
        let mut c = started(2, 1);
        let out = c.closed(1, "its launcher's connection closed");
        assert!(
            matches!(&out[..], [(To::All, Msg::Stop { attempt: 0, .. })]),
            "{out:?}"
        );
        let out = ended(&mut c, 0, 0);
        assert_eq!(
            out,
            vec![(
                To::All,
                Msg::Wait {
                    attempt: 1,
                    lost: lost(&[1]),
                    secs: 60
                }
            )]
        );
        assert!(c.waiting());
        // The replacement, on another host: both nodes start attempt 1, in the same places.
        let mut r = join(1, 2);
        r.host = "h1b".into();
        let out = c.join(&r).unwrap();
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(out.iter().all(|(_, m)| matches!(
            m,
            Msg::Start {
                attempt: 1,
                world_size: 4,
                ..
            }
        )));
        assert!(matches!(
            out[1],
            (To::Node(1), Msg::Start { rank_offset: 2, .. })
        ));
        // Attempt 1 ends well: the run succeeds.
        assert!(c
            .message(
                0,
                Msg::Ended {
                    attempt: 1,
                    ok: true
                }
            )
            .is_empty());
        let out = c.message(
            1,
            Msg::Ended {
                attempt: 1,
                ok: true,
            },
        );
        assert_eq!(out, vec![(To::All, Msg::Finish { failure: None })]);
    }

    #[test]
    fn a_replacement_that_comes_while_the_others_stop_joins_the_next_attempt() {
        let mut c = started(2, 1);
        c.closed(1, "gone");
        // Node 0's ranks are still stopping.
        assert!(c.join(&join(1, 2)).unwrap().is_empty());
        let out = ended(&mut c, 0, 0);
        assert!(
            matches!(
                &out[..],
                [
                    (To::Node(0), Msg::Start { attempt: 1, .. }),
                    (To::Node(1), Msg::Start { attempt: 1, .. })
                ]
            ),
            "no wait once every lost node is back: {out:?}"
        );
    }

    #[test]
    fn the_wait_names_every_lost_node_and_is_bounded() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut c = started_at(3, 2, t0);
        c.closed(2, "gone");
        ended(&mut c, 0, 0);
        let out = ended(&mut c, 1, 0);
        assert!(
            matches!(&out[..], [(To::All, Msg::Wait { lost, .. })] if *lost == self::lost(&[2]))
        );
        // Another node is lost while waiting: the survivors hear of both.
        let out = c.closed(1, "no heartbeat for 5 s");
        assert_eq!(
            out,
            vec![(
                To::All,
                Msg::Wait {
                    attempt: 1,
                    lost: lost(&[1, 2]),
                    secs: 60
                }
            )]
        );
        // One replacement is not enough.
        assert!(c.join(&join3(1)).unwrap().is_empty());
        assert!(c.waiting());
        // Nobody replaces node 2 in time (the wait began at 0 s): the run ends with the failure
        // that began it, at 60 s and not before.
        assert_eq!(c.next_wake(), Some(s(60)));
        assert!(c.tick(s(59)).is_empty());
        assert!(c.waiting());
        let out = c.tick(s(60));
        let [(To::All, Msg::Finish { failure: Some(f) })] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(f.node, 2);
        assert_eq!(f.exit_status(), ExitStatus::NodeLost);
        assert!(
            f.headline()
                .ends_with("was lost: gone; no launcher replaced node 2 (h2) within 60 s"),
            "{}",
            f.headline()
        );
        let e = c.join(&join3(2)).unwrap_err();
        assert!(e.contains("the run has ended"), "{e}");
    }

    /// The first join is bounded by the join timeout, counted from node 0's start: a node that
    /// joins 30 s late (six loss windows) but within it starts the world with the others; a node
    /// that never comes ends the join at the deadline, and every node joined is told which is
    /// missing.
    #[test]
    fn the_join_waits_its_timeout_for_a_late_node_and_names_a_missing_one() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut c = Coordinator::new(2).join_timeout(t0, Duration::from_secs(90));
        c.tick(t0);
        assert_eq!(c.next_wake(), Some(s(90)));
        assert!(c.join(&join(0, 2)).unwrap().is_empty());
        for n in 1..=30 {
            assert!(c.tick(s(n)).is_empty(), "at {n}");
        }
        let out = c.join(&join(1, 2)).unwrap();
        assert!(
            matches!(
                &out[..],
                [
                    (To::Node(0), Msg::Start { attempt: 0, .. }),
                    (To::Node(1), Msg::Start { attempt: 0, .. })
                ]
            ),
            "{out:?}"
        );
        // Started: the join's deadline is due no more.
        assert_eq!(c.next_wake(), None);
        assert!(c.tick(s(90)).is_empty());
        assert!(!c.done());

        let mut c = Coordinator::new(3).join_timeout(t0, Duration::from_secs(12));
        c.join(&join3(0)).unwrap();
        // A launcher that died while joining no longer counts as joined.
        c.join(&join3(1)).unwrap();
        c.closed(1, "gone");
        c.join(&join3(2)).unwrap();
        assert!(c.tick(s(11)).is_empty());
        assert!(!c.done());
        let out = c.tick(s(12));
        assert_eq!(
            out,
            vec![(
                To::All,
                Msg::Reject {
                    reason: "not every node joined within 12 s: still waiting for node rank(s) [1]"
                        .into()
                }
            )]
        );
        assert!(c.done(), "node 0 serves no longer");
        assert!(c.tick(s(13)).is_empty(), "told once");
        let e = c.join(&join3(1)).unwrap_err();
        assert!(e.contains("the run has ended"), "{e}");
    }

    /// The wait for replacements lasts the join timeout from its start (the last survivor's end,
    /// not the stop), and a replacement within it restarts the world with no deadline left.
    #[test]
    fn the_wait_for_a_replacement_counts_from_its_start() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut c = started_at(2, 1, t0);
        c.closed(1, "gone");
        assert!(c.tick(s(20)).is_empty());
        let out = ended(&mut c, 0, 0);
        assert!(
            matches!(&out[..], [(To::All, Msg::Wait { secs: 60, .. })]),
            "{out:?}"
        );
        assert_eq!(c.next_wake(), Some(s(80)));
        assert!(c.tick(s(79)).is_empty());
        let out = c.join(&join(1, 2)).unwrap();
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(!c.waiting());
        assert_eq!(c.next_wake(), None);
        assert!(c.tick(s(80)).is_empty());
    }

    fn join3(node: u32) -> Join {
        let mut j = join(node, 2);
        j.nodes = 3;
        j.max_restarts = 2;
        j
    }

    /// A launcher whose own join timed out says bye and closes (`Link::join`): it leaves the join.
    /// Its ranks leave the count, so the world does not start without it, a relaunch of it joins
    /// (not "already in the run"), and the start counts the relaunch's ranks.
    #[test]
    fn a_node_that_says_bye_during_the_join_leaves_it() {
        let mut c = Coordinator::new(3);
        c.join(&join3(0)).unwrap();
        c.join(&join3(1)).unwrap();
        assert!(c.message(1, Msg::Bye).is_empty());
        assert!(c.closed(1, "closed").is_empty());
        assert_eq!(c.missing(), [1, 2]);
        assert!(
            c.join(&join3(2)).unwrap().is_empty(),
            "the world started without node 1"
        );
        // The bye alone, before the connection closes, is the leave (a relaunch may come first).
        let mut again = join3(1);
        again.local_ranks = 3;
        let out = c.join(&again).unwrap();
        let offsets: Vec<(To, u32, u32)> = out
            .iter()
            .map(|(to, m)| match m {
                Msg::Start {
                    world_size,
                    rank_offset,
                    ..
                } => (*to, *world_size, *rank_offset),
                m => panic!("{m:?}"),
            })
            .collect();
        assert_eq!(
            offsets,
            [
                (To::Node(0), 7, 0),
                (To::Node(1), 7, 2),
                (To::Node(2), 7, 5)
            ]
        );
        // The old connection closing after the relaunch joined changes nothing.
        let mut c = Coordinator::new(3);
        c.join(&join3(0)).unwrap();
        c.join(&join3(1)).unwrap();
        c.message(1, Msg::Bye);
        c.join(&join3(1)).unwrap();
        assert_eq!(c.missing(), [2]);
        // A bye while the run goes on is no leave: the closing that follows is a loss.
        let mut c = started(2, 0);
        assert!(c.message(1, Msg::Bye).is_empty());
        let out = c.closed(1, "its launcher's connection closed");
        assert!(
            matches!(&out[..], [(To::All, Msg::Stop { failure, .. })] if failure.node == 1),
            "{out:?}"
        );
        // After the finish, a bye is the goodbye it says: no loss, and the server is done.
        let out = ended(&mut c, 0, 0);
        assert!(
            matches!(&out[..], [(To::All, Msg::Finish { .. })]),
            "{out:?}"
        );
        c.message(0, Msg::Bye);
        assert!(c.done());
    }

    #[test]
    fn replacements_are_refused_without_a_restart_or_for_node_0() {
        // No restart left: the run ends, and a replacement is told why.
        let mut c = started(2, 0);
        c.closed(1, "gone");
        let mut r = join(1, 2);
        r.max_restarts = 0;
        let e = c.join(&r).unwrap_err();
        assert!(
            e.contains("node 1 was lost in attempt 0 and no restart is left (--max_restarts 0)"),
            "{e}"
        );
        let out = ended(&mut c, 0, 0);
        assert!(matches!(&out[..], [(To::All, Msg::Finish { failure: Some(f) })] if f.node == 1));
        // Restarts left, but node 0 (which hosts the plane) is lost: no wait, no replacement.
        let mut c = started(2, 1);
        c.closed(0, "gone");
        let e = c.join(&join(0, 2)).unwrap_err();
        assert!(
            e.contains("node 0 hosts the control plane and cannot be replaced"),
            "{e}"
        );
        let out = ended(&mut c, 1, 0);
        assert!(
            matches!(&out[..], [(To::All, Msg::Finish { failure: Some(f) })] if f.node == 0),
            "{out:?}"
        );
        // A replacement must run as many ranks as the node it replaces.
        let mut c = started(2, 1);
        c.closed(1, "gone");
        let e = c.join(&join(1, 3)).unwrap_err();
        assert!(
            e.contains("node 1 ran 2 rank(s) and its replacement has 3"),
            "{e}"
        );
    }

    #[test]
    fn a_lost_node_without_restarts_stops_the_world_and_ends_the_run() {
        let mut c = started(2, 0);
        let out = c.closed(1, "no heartbeat for 5 s");
        let Msg::Stop { failure, .. } = &out[0].1 else {
            panic!("{out:?}")
        };
        assert_eq!(failure.node, 1);
        assert_eq!(failure.exit_status(), ExitStatus::NodeLost);
        assert!(failure
            .headline()
            .starts_with("node 1 (h1) was lost: no heartbeat"));
        let out = c.message(
            0,
            Msg::Ended {
                attempt: 0,
                ok: false,
            },
        );
        assert!(
            matches!(&out[..], [(To::All, Msg::Finish { failure: Some(f) })] if f.node == 1),
            "{out:?}"
        );
    }

    fn hang_join(node: u32, ms: Option<u64>) -> Join {
        Join {
            hang_timeout_ms: ms,
            max_restarts: 3,
            ..join(node, 2)
        }
    }

    fn waiting(rank: u32, node: u32, func: &str, line: i64) -> WireStack {
        WireStack {
            rank,
            node,
            pid: 100 + rank as i32,
            state: 'S',
            threads: Some(vec![crate::launch::hang::autopsy::Thread {
                thread_name: Some("MainThread".into()),
                os_thread_id: None,
                pid: None,
                frames: vec![crate::launch::hang::autopsy::Frame {
                    name: func.into(),
                    filename: if func == "all_reduce" {
                        "/v/site-packages/torch/distributed/distributed_c10d.py".into()
                    } else {
                        "/w/train.py".into()
                    },
                    short_filename: Some("train.py".into()),
                    line,
                }],
            }]),
            error: None,
        }
    }

    #[test]
    fn a_nodes_straggler_window_goes_to_node_0_as_its_own_and_capped() {
        let mut c = Coordinator::new(2);
        c.join(&join(0, 2)).unwrap();
        c.join(&join(1, 2)).unwrap();
        let long = "x".repeat(10_000);
        let rw = |rank: u32| RankWindow {
            rank,
            // A node claiming another's ranks, more waits than samples, a huge place.
            node: 7,
            host: "forged".into(),
            samples: 40,
            waiting: 90,
            place: Some(crate::launch::straggler::Place {
                file: long.clone(),
                line: 1,
                function: long.clone(),
            }),
            arrival: Some(7.0),
        };
        let ranks: Vec<RankWindow> = (0..2000).map(rw).collect();
        let out = c.message(1, Msg::Windows { attempt: 0, ranks });
        let [(To::Node(0), Msg::Windows { attempt: 0, ranks })] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(ranks.len(), MAX_WINDOW_RANKS);
        let r = &ranks[0];
        assert_eq!((r.node, r.host.as_str(), r.waiting), (1, "h1", 40));
        assert_eq!(r.arrival, Some(1.0));
        assert_eq!(r.place.as_ref().unwrap().file.len(), 256);
        let line = Msg::Windows {
            attempt: 0,
            ranks: ranks.clone(),
        }
        .json();
        assert!(line.len() < 1 << 20, "{}", line.len());
        // Another attempt's window is dropped.
        assert!(c
            .message(
                1,
                Msg::Windows {
                    attempt: 5,
                    ranks: vec![rw(0)]
                }
            )
            .is_empty());
    }

    #[test]
    fn a_mismatched_hang_timeout_is_refused() {
        let mut c = Coordinator::new(2);
        c.join(&hang_join(0, Some(10_000))).unwrap();
        let e = c.join(&hang_join(1, Some(20_000))).unwrap_err();
        assert_eq!(
            e,
            "it has --hang_timeout 20 but the other nodes have --hang_timeout 10: the world's hang is judged against one timeout"
        );
        let e = c.join(&hang_join(1, None)).unwrap_err();
        assert!(e.starts_with("it has no --hang_timeout but"), "{e}");
        assert!(c.join(&hang_join(1, Some(10_000))).is_ok());
    }

    #[test]
    fn the_world_hang_is_declared_gathered_told_and_not_restarted() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut c = Coordinator::new(2);
        c.join(&hang_join(0, Some(10_000))).unwrap();
        c.join(&hang_join(1, Some(10_000))).unwrap();
        let quiet = |ms| Msg::Quiet {
            attempt: 0,
            quiet_ms: Some(ms),
        };
        c.tick(s(5));
        assert!(c.message(0, quiet(5_000)).is_empty());
        c.tick(s(6));
        assert!(c.message(1, quiet(5_000)).is_empty());
        // Still since 1 s on both: declared at 11 s, not before.
        assert_eq!(c.next_wake(), Some(s(11)));
        assert!(c.tick(s(10)).is_empty());
        assert_eq!(c.tick(s(11)), vec![(To::All, Msg::Autopsy { attempt: 0 })]);
        c.tick(s(12));
        let node1 = vec![
            waiting(2, 1, "all_reduce", 3000),
            waiting(3, 1, "stuck_in_data_loading", 42),
        ];
        assert!(c
            .message(
                1,
                Msg::Stacks {
                    attempt: 0,
                    stacks: node1
                }
            )
            .is_empty());
        let out = c.message(
            0,
            Msg::Stacks {
                attempt: 0,
                stacks: vec![
                    waiting(0, 0, "all_reduce", 3000),
                    waiting(1, 0, "all_reduce", 3000),
                ],
            },
        );
        let [(To::All, Msg::Verdict { line, quiet_ms, .. })] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(
            line,
            "rank 3 (node 1) is in stuck_in_data_loading (train.py:42); ranks 0,1,2 (nodes 0,1) wait in all_reduce (train.py:3000)"
        );
        assert_eq!(*quiet_ms, 10_000);
        // The ranks stopped for the hang fail as they go: no stop is broadcast, and no restart.
        assert!(c
            .message(
                0,
                Msg::Failed {
                    attempt: 0,
                    failure: rank_failure(0, 0)
                }
            )
            .is_empty());
        c.message(
            0,
            Msg::Ended {
                attempt: 0,
                ok: false,
            },
        );
        let out = c.message(
            1,
            Msg::Ended {
                attempt: 0,
                ok: false,
            },
        );
        let [(To::All, Msg::Finish { failure: Some(f) })] = &out[..] else {
            panic!("{out:?}")
        };
        assert!(f.hang);
        assert_eq!(f.exit_status(), ExitStatus::Hang);
    }

    #[test]
    fn a_node_busy_elsewhere_keeps_the_world_alive_and_a_silent_one_is_named() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut c = Coordinator::new(2);
        c.join(&hang_join(0, Some(10_000))).unwrap();
        c.join(&hang_join(1, Some(10_000))).unwrap();
        c.tick(s(5));
        c.message(
            0,
            Msg::Quiet {
                attempt: 0,
                quiet_ms: Some(5_000),
            },
        );
        // Node 1 computes: never reported still.
        for n in 5..60 {
            assert!(c.tick(s(n)).is_empty(), "at {n}");
        }
        // Node 1 still from 60 (reported at 65), then lost: silent, not a loss.
        c.tick(s(65));
        c.message(
            1,
            Msg::Quiet {
                attempt: 0,
                quiet_ms: Some(5_000),
            },
        );
        c.tick(s(66));
        assert!(c.closed(1, "no heartbeat for 5 s").is_empty());
        assert_eq!(c.tick(s(70)), vec![(To::All, Msg::Autopsy { attempt: 0 })]);
        let out = c.message(
            0,
            Msg::Stacks {
                attempt: 0,
                stacks: vec![
                    waiting(0, 0, "all_reduce", 3000),
                    waiting(1, 0, "all_reduce", 3000),
                ],
            },
        );
        let [(To::All, Msg::Verdict { line, .. })] = &out[..] else {
            panic!("{out:?}")
        };
        assert!(
            line.ends_with("ranks 2,3 (node 1): unknown, node 1 (h1) was lost before it sent its stacks (no heartbeat for 5 s)"),
            "{line}"
        );
        let out = c.message(
            0,
            Msg::Ended {
                attempt: 0,
                ok: false,
            },
        );
        assert!(
            matches!(&out[..], [(To::All, Msg::Finish { failure: Some(f) })] if f.hang),
            "{out:?}"
        );
    }

    fn started_at(nodes: u32, max_restarts: u32, t0: Instant) -> Coordinator {
        let mut c = started(nodes, max_restarts);
        c.tick(t0);
        c
    }

    #[test]
    fn a_node_that_does_not_report_its_end_after_a_stop_is_lost_and_the_run_not_restarted() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        // Restarts are left: a node that never reports its end still ends the run.
        let mut c = started_at(2, 1, t0);
        let out = c.message(
            0,
            Msg::Failed {
                attempt: 0,
                failure: rank_failure(0, 1),
            },
        );
        assert!(matches!(&out[..], [(To::All, Msg::Stop { .. })]), "{out:?}");
        assert!(ended(&mut c, 0, 0).is_empty());
        // Node 1 heartbeats on (its connection is open) but never says `ended`: its grace (3 s),
        // SIGKILL's wait (10 s) and the slack (15 s) are its deadline.
        assert_eq!(c.next_wake(), Some(s(28)));
        assert!(c.tick(s(27)).is_empty());
        let out = c.tick(s(28));
        let [(To::All, Msg::Finish { failure: Some(f) })] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(f.exit_status(), ExitStatus::Worker(7));
        assert!(
            f.what.ends_with(
                "; node 1 (h1) did not report its ranks' end within 28 s of the stop and was left"
            ),
            "{}",
            f.what
        );
        // Its late `ended` changes nothing.
        assert!(ended(&mut c, 1, 0).is_empty());
        // A node that never SIGKILLs (--grace_period inf) has no such deadline.
        let mut c = Coordinator::new(2);
        c.tick(t0);
        c.join(&join(0, 2)).unwrap();
        let mut j = join(1, 2);
        j.grace_ms = None;
        let out = c.join(&j).unwrap();
        assert!(
            matches!(
                &out[0].1,
                Msg::Start {
                    stop_within_ms: None,
                    ..
                }
            ),
            "{out:?}"
        );
        c.message(
            0,
            Msg::Failed {
                attempt: 0,
                failure: rank_failure(0, 1),
            },
        );
        ended(&mut c, 0, 0);
        assert_eq!(c.next_wake(), None, "node 1 never SIGKILLs: no deadline");
        assert!(c.tick(s(3600)).is_empty());
    }

    fn leaving(node: u32, status: Option<u8>) -> FailureReport {
        FailureReport {
            what: "could not start its ranks: cannot run `nosuch`: not found".into(),
            status,
            hints: vec!["check the program's path".into()],
            ..FailureReport::lost(node, "forged", "")
        }
    }

    #[test]
    fn a_node_that_leaves_ends_the_run_at_every_phase_with_its_status() {
        // While joining: every joined node is told at once; a later launcher hears why.
        let mut c = Coordinator::new(3);
        c.join(&join3(0)).unwrap();
        c.join(&join3(1)).unwrap();
        let out = c.message(
            1,
            Msg::Leave {
                failure: leaving(1, Some(143)),
            },
        );
        let [(To::All, Msg::Finish { failure: Some(f) })] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(f.exit_status(), ExitStatus::Worker(143));
        assert_eq!(f.host, "h1", "the host is the one it joined with");
        let e = c.join(&join3(2)).unwrap_err();
        assert!(
            e.contains("the run has ended (attempt 0): node 1 (h1) could not start its ranks"),
            "{e}"
        );
        // Running: a local error on node 1 stops node 0, and the run ends with node 1's status
        // (127), not restarted though a restart is left.
        let mut c = started(2, 1);
        let out = c.message(
            1,
            Msg::Leave {
                failure: leaving(1, Some(127)),
            },
        );
        let [(To::All, Msg::Stop { failure, .. })] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(failure.exit_status(), ExitStatus::NotFound);
        assert_eq!(failure.hints, ["check the program's path"]);
        let out = ended(&mut c, 0, 0);
        let [(To::All, Msg::Finish { failure: Some(f) })] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(f.exit_status(), ExitStatus::NotFound);
        // Waiting for a replacement: a node that leaves (Ctrl-C) ends the wait for every node.
        let mut c = started(3, 2);
        c.closed(2, "gone");
        ended(&mut c, 0, 0);
        ended(&mut c, 1, 0);
        assert!(c.waiting());
        let out = c.message(
            0,
            Msg::Leave {
                failure: leaving(0, Some(130)),
            },
        );
        let [(To::All, Msg::Finish { failure: Some(f) })] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(f.exit_status(), ExitStatus::Worker(130));
        // A node cannot make the run end "well": status 0 becomes the launcher's failure.
        let mut c = started(2, 0);
        c.message(
            1,
            Msg::Leave {
                failure: leaving(1, Some(0)),
            },
        );
        let out = ended(&mut c, 0, 0);
        let [(To::All, Msg::Finish { failure: Some(f) })] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(f.exit_status(), ExitStatus::LauncherFailed);
    }

    #[test]
    fn ranks_left_behind_are_relayed_and_end_the_run() {
        let mut c = started(2, 1);
        c.message(
            0,
            Msg::Failed {
                attempt: 0,
                failure: rank_failure(0, 1),
            },
        );
        let stuck = Unkillable {
            node: 0,
            host: "forged".into(),
            rank: 3,
            pid: 4242,
            state: "D".into(),
            wchan: "request_wait_answer".into(),
            note: None,
        };
        let out = c.message(
            1,
            Msg::Left {
                attempt: 0,
                ranks: vec![stuck; 100],
            },
        );
        let [(To::All, Msg::Left { ranks, .. })] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(ranks.len(), MAX_UNKILLABLE);
        assert!(ranks.iter().all(|u| u.node == 1 && u.host == "h1"));
        assert_eq!(
            ranks[0].describe(),
            "rank 3 (pid 4242) is in uninterruptible sleep (D, wchan request_wait_answer) and did not exit after SIGKILL"
        );
        ended(&mut c, 0, 0);
        let out = ended(&mut c, 1, 0);
        assert!(
            matches!(&out[..], [(To::All, Msg::Finish { failure: Some(_) })]),
            "no restart with ranks left behind: {out:?}"
        );
    }

    #[test]
    fn the_world_size_limit_counts_the_ranks_of_the_nodes_joined_now() {
        // 32,767 nodes of 65,536 ranks fill torch's limit but for 65,535 ranks: one more node of
        // 65,536 does not fit, until a node that left during the join makes room (its ranks no
        // longer count; its launcher rejoining with fewer counts those).
        let n = 32_768;
        let big = |node: u32| Join {
            nodes: n + 1,
            ..join(node, MAX_LOCAL_RANKS)
        };
        let mut c = Coordinator::new(n + 1);
        for node in 0..n - 1 {
            c.join(&big(node)).unwrap();
        }
        let e = c.join(&big(n - 1)).unwrap_err();
        assert!(e.contains("exceed 2147483647 ranks"), "{e}");
        c.closed(5, "gone");
        c.join(&big(n - 1)).unwrap();
        let e = c.join(&big(5)).unwrap_err();
        assert!(e.contains("exceed 2147483647 ranks"), "{e}");
        c.join(&Join {
            nodes: n + 1,
            ..join(5, MAX_LOCAL_RANKS - 1)
        })
        .unwrap();
    }

    #[test]
    fn uneven_nodes_say_their_own_counts_and_the_total_is_checked() {
        let three = |node: u32, ranks: u32, total: Option<u32>| Join {
            nodes: 3,
            world_size: total,
            ..join(node, ranks)
        };
        let mut c = Coordinator::new(3);
        c.join(&three(0, 1, Some(4))).unwrap();
        c.join(&three(1, 2, None)).unwrap();
        let out = c.join(&three(2, 1, Some(4))).unwrap();
        let offsets: Vec<u32> = out
            .iter()
            .map(|(_, m)| match m {
                Msg::Start {
                    world_size: 4,
                    rank_offset,
                    ..
                } => *rank_offset,
                m => panic!("{m:?}"),
            })
            .collect();
        assert_eq!(offsets, [0, 1, 3]);
        let mut c = Coordinator::new(3);
        c.join(&three(0, 1, Some(5))).unwrap();
        let e = c.join(&three(1, 2, Some(4))).unwrap_err();
        assert!(
            e.contains("says --num_processes 4 but another node says 5"),
            "{e}"
        );
        c.join(&three(1, 2, None)).unwrap();
        let out = c.join(&three(2, 1, None)).unwrap();
        let [(To::All, Msg::Reject { reason })] = &out[..] else {
            panic!("{out:?}")
        };
        assert!(
            reason.starts_with(
                "the nodes' ranks add up to 4 (1 + 2 + 1), but node 0 says --num_processes 5"
            ),
            "{reason}"
        );
    }
}
