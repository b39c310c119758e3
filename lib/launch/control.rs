//! The control plane between the node launchers of one multi-node run. Each node's launcher only
//! sees its own ranks; without this, a rank failing on node 1 leaves node 0's ranks running until
//! their next collective times out (NCCL's watchdog: tens of minutes), and `--max_restarts` restarts
//! one node while the others stay in the old attempt.
//!
//! The node-0 launcher hosts a small TCP server at the rendezvous address on [`control_port`] (the
//! master port + 1); every launcher, node 0's included, joins it with the run id, its node rank, its
//! rank count and host. Messages are one JSON object per line ([`Msg`]). The server's
//! [`Coordinator`] (pure, unit-tested) decides:
//!
//! - **start**: once every node has joined, each gets the world size and its rank offset, so nodes
//!   may run different numbers of ranks;
//! - **stop**: the first failure of an attempt — a rank's exit, a launcher's connection closing (its
//!   death, SIGKILL included), or its heartbeats stopping (a network cut) — is sent to every node,
//!   which stops its ranks as it does for a local failure (stop signal, grace, SIGKILL);
//! - **restart or finish**: once every node's ranks of the attempt are gone, either all nodes start the
//!   next attempt together (the same global restart count everywhere), or all are told how the run
//!   ended;
//! - **hang** (`--hang_timeout`): nodes report their ranks' stillness, and the world's hang is
//!   declared, its stacks gathered and its one verdict sent to every node here ([`verdict`]).
//!
//! Heartbeats go both ways every [`HEARTBEAT`]; a side that hears nothing for [`MISSES`] intervals
//! counts the other as lost. torchrun's agents meet in the elastic rendezvous and learn of a failure
//! only through it (`torch/distributed/elastic/agent/server/api.py::SimpleElasticAgent._invoke_run`);
//! this keeps the same shape without a store, and one line per event.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::verdict::{self, NodeInfo, WireStack, World};
use crate::error::Diagnostic;
use crate::exit_status::ExitStatus;

/// Time between heartbeats, each way.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// Heartbeat intervals without a word before the other side counts as lost.
pub const MISSES: u32 = 5;
/// The protocol's version: a launcher of another version is refused at the join.
pub const PROTOCOL: u32 = 2;
/// The longest line either side accepts (a stderr tail is at most 16 KiB).
const MAX_LINE: u64 = 1 << 20;

/// The control plane's port: the master port + 1 (the master port − 1 when that is 65535), on the
/// rendezvous host.
pub fn control_port(master_port: u16) -> u16 {
    if master_port == u16::MAX {
        master_port - 1
    } else {
        master_port + 1
    }
}

/// How long a side waits for a word from the other before counting it as lost.
pub fn lost_after(heartbeat: Duration) -> Duration {
    heartbeat * MISSES
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("cannot host the control plane on port {port}")]
    Bind {
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("node {node} could not join the control plane at {addr} within {secs} s")]
    JoinTimeout {
        node: u32,
        addr: String,
        secs: u64,
        /// What the rendezvous was still waiting for, when the server said.
        detail: Option<String>,
    },
    #[error("the control plane at {addr} refused node {node}: {reason}")]
    Refused {
        node: u32,
        addr: String,
        reason: String,
    },
    #[error("control plane at {addr}: {what}")]
    Io {
        addr: String,
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl Diagnostic for ControlError {
    fn hints(&self) -> Vec<String> {
        match self {
            ControlError::Bind { .. } => vec![
                "the control plane uses the master port + 1; pick another --main_process_port".into(),
            ],
            ControlError::JoinTimeout { detail, .. } => {
                let mut h: Vec<String> = detail.iter().cloned().collect();
                h.push("start every node's accel-launch with the same --num_machines, --main_process_ip and --main_process_port, or raise --rdzv_timeout".into());
                h
            }
            ControlError::Refused { .. } => vec![
                "every node must run the same accel-launch version with the same --num_machines, --max_restarts, --hang_timeout and a distinct --machine_rank".into(),
            ],
            ControlError::Io { .. } => Vec::new(),
        }
    }
    fn exit_status(&self) -> ExitStatus {
        ExitStatus::LauncherFailed
    }
}

/// A node's join.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Join {
    pub protocol: u32,
    pub run_id: String,
    pub node: u32,
    pub nodes: u32,
    pub local_ranks: u32,
    pub host: String,
    pub max_restarts: u32,
    /// `--hang_timeout` in milliseconds (`None`: off): the world's hang is judged on node 0 against
    /// one timeout, so every node must give the same.
    #[serde(default)]
    pub hang_timeout_ms: Option<u64>,
}

/// What ended an attempt, as every node reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureReport {
    pub node: u32,
    pub host: String,
    /// The failing rank; `None` when a node was lost or its launcher was stopped.
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    /// The rank's exit code, or the signal that killed it.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// What happened, as a sentence's predicate: `exited with status 7`, `was lost: …`.
    pub what: String,
    /// The last lines of the failing rank's stderr.
    #[serde(default)]
    pub stderr_tail: String,
    /// The torchelastic error file's message, if the rank wrote one.
    #[serde(default)]
    pub error_message: Option<String>,
    /// Not a failure: SLURM's warning signal (`--slurm_requeue`) reached this node; every node stops
    /// its ranks with that signal and the grace period, and node 0 then requeues the job.
    #[serde(default)]
    pub requeue: bool,
    /// With `requeue`: SLURM's step daemon delivered the warning on that node, and it delivers it to
    /// every process of the step on every node — the other nodes' ranks get it from SLURM too.
    #[serde(default)]
    pub step_wide: bool,
    /// Not a failure: node 0 declared the world hung (`--hang_timeout`); `what` holds the verdict.
    /// No restart follows, and every node exits 124.
    #[serde(default)]
    pub hang: bool,
}

impl FailureReport {
    /// A node lost: its launcher's connection closed, or its heartbeats stopped.
    pub fn lost(node: u32, host: &str, why: &str) -> FailureReport {
        FailureReport {
            node,
            host: host.into(),
            rank: None,
            local_rank: None,
            code: None,
            signal: None,
            what: format!("was lost: {why}"),
            stderr_tail: String::new(),
            error_message: None,
            requeue: false,
            step_wide: false,
            hang: false,
        }
    }

    /// What the launchers of the other nodes exit with: the failing rank's code (128+N for signal N),
    /// or [`ExitStatus::NodeLost`] when no rank failed.
    pub fn exit_status(&self) -> ExitStatus {
        if self.requeue {
            return ExitStatus::Requeued;
        }
        if self.hang {
            return ExitStatus::Hang;
        }
        match (self.code, self.signal) {
            (Some(c), _) => ExitStatus::Worker((c & 0xff) as u8),
            (None, Some(s)) => ExitStatus::Worker((128 + s).min(255) as u8),
            _ => ExitStatus::NodeLost,
        }
    }

    /// One line: `rank 3 (local rank 1) on node 1 (host) exited with status 7`.
    pub fn headline(&self) -> String {
        match (self.rank, self.local_rank) {
            (Some(r), Some(l)) => format!(
                "rank {r} (local rank {l}) on node {} ({}) {}",
                self.node, self.host, self.what
            ),
            _ => format!("node {} ({}) {}", self.node, self.host, self.what),
        }
    }
}

/// One line of the protocol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Msg {
    /// Node → server, first line.
    Join(Join),
    /// Server → node: start attempt `attempt` with this place in the world.
    Start {
        attempt: u32,
        world_size: u32,
        rank_offset: u32,
        nodes: u32,
    },
    /// Server → node: the join is refused; the connection closes.
    Reject { reason: String },
    /// Node → server: this node's first failure of the attempt.
    Failed {
        attempt: u32,
        failure: FailureReport,
    },
    /// Server → every node: stop the ranks of `attempt`.
    Stop {
        attempt: u32,
        failure: FailureReport,
    },
    /// Node → server: every rank of the attempt on this node is gone.
    Ended { attempt: u32, ok: bool },
    /// Server → every node: no further attempt; the run ended so.
    Finish { failure: Option<FailureReport> },
    /// Node → server: leaving after `Finish`.
    Bye,
    /// Both ways, every [`HEARTBEAT`].
    Hb,
    /// Node → server (`--hang_timeout`): this node's ranks have been still for `quiet_ms`, or
    /// (`None`) move again ([`verdict::Reporter`]).
    Quiet {
        attempt: u32,
        #[serde(default)]
        quiet_ms: Option<u64>,
    },
    /// Server → every node: the world is hung; send your ranks' stacks.
    Autopsy { attempt: u32 },
    /// Node → server: this node's ranks' stacks, in answer to `Autopsy`.
    Stacks {
        attempt: u32,
        stacks: Vec<WireStack>,
    },
    /// Server → every node: the world's hang verdict; print it and stop the ranks.
    Verdict {
        attempt: u32,
        line: String,
        stacks: String,
        quiet_ms: u64,
    },
    /// Server → the surviving nodes: every rank of the attempt is gone, and attempt `attempt` starts
    /// once a launcher replaces each of the `lost` nodes (same --machine_rank) within `secs` seconds;
    /// sent again, naming them all, when another node is lost meanwhile.
    Wait {
        attempt: u32,
        lost: Vec<LostNode>,
        secs: u64,
    },
}

/// A node whose launcher was lost, as [`Msg::Wait`] names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostNode {
    pub node: u32,
    pub host: String,
}

impl LostNode {
    /// `node 1 (host)`, `node 1 (host) and node 2 (host)`, …
    pub fn list(lost: &[LostNode]) -> String {
        let names: Vec<String> = lost
            .iter()
            .map(|l| format!("node {} ({})", l.node, l.host))
            .collect();
        match names.split_last() {
            None => String::new(),
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        }
    }
}

impl Msg {
    fn line(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).unwrap_or_default();
        v.push(b'\n');
        v
    }
}

/// Where a coordinator's message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum To {
    Node(u32),
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
}

/// The server's decisions, as a state machine over joins, messages and closed connections.
#[derive(Debug)]
pub struct Coordinator {
    nodes: u32,
    run_id: Option<String>,
    max_restarts: Option<u32>,
    members: BTreeMap<u32, Member>,
    phase: Phase,
    attempt: u32,
    failure: Option<FailureReport>,
    ended: BTreeSet<u32>,
    /// Nodes whose connection is gone (after `Bye`, or lost).
    gone: BTreeSet<u32>,
    /// A node was lost: the world cannot restart without it.
    /// `--hang_timeout`, as the first node to join gave it (every node must give the same).
    hang_timeout_ms: Option<Option<u64>>,
    /// The world's hang judgement of the running attempt ([`verdict`]).
    world: Option<World>,
    /// The coordinator's clock: the time of the last [`tick`](Coordinator::tick).
    now: Instant,
    /// Nodes lost and not replaced yet: the next attempt waits for a launcher of each.
    lost: BTreeMap<u32, String>,
    /// How long the survivors wait for replacements (the server's join timeout).
    replace_within: Duration,
}

impl Coordinator {
    pub fn new(nodes: u32) -> Coordinator {
        Coordinator {
            nodes,
            run_id: None,
            max_restarts: None,
            members: BTreeMap::new(),
            phase: Phase::Joining,
            attempt: 0,
            failure: None,
            ended: BTreeSet::new(),
            gone: BTreeSet::new(),
            hang_timeout_ms: None,
            world: None,
            now: Instant::now(),
            lost: BTreeMap::new(),
            replace_within: Duration::from_secs(300),
        }
    }

    /// How long the survivors of a lost node wait for its replacement (default 300 s).
    pub fn replacing_within(mut self, d: Duration) -> Coordinator {
        self.replace_within = d;
        self
    }

    /// Every rank of the attempt is gone, and the next attempt waits for replacement launchers.
    pub fn waiting(&self) -> bool {
        self.phase == Phase::Waiting
    }

    /// The nodes not joined yet, while joining.
    pub fn missing(&self) -> Vec<u32> {
        (0..self.nodes)
            .filter(|n| !self.members.contains_key(n))
            .collect()
    }

    pub fn joining(&self) -> bool {
        self.phase == Phase::Joining
    }

    /// Every node has left after the run finished.
    pub fn done(&self) -> bool {
        self.phase == Phase::Finished && self.gone.len() == self.members.len()
    }

    /// A node's join: `Err` is the reason it is refused. Once the run has started, only a launcher
    /// replacing a lost node may join, for the next attempt.
    pub fn join(&mut self, j: &Join) -> Result<Vec<(To, Msg)>, String> {
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
        if j.node >= self.nodes {
            return Err(format!(
                "--machine_rank {} is not below --num_machines {}",
                j.node, self.nodes
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
        match self.phase {
            Phase::Joining => {}
            Phase::Finished => {
                return Err(format!(
                    "the run has ended (attempt {}); node {} cannot join it",
                    self.attempt, j.node
                ))
            }
            Phase::Running | Phase::Waiting => return self.replace(j),
        }
        if let Some(m) = self.members.get(&j.node) {
            return Err(duplicate(j, &m.host));
        }
        self.run_id = Some(j.run_id.clone());
        self.max_restarts = Some(j.max_restarts);
        self.hang_timeout_ms = Some(j.hang_timeout_ms);
        self.members.insert(
            j.node,
            Member {
                host: j.host.clone(),
                local_ranks: j.local_ranks,
            },
        );
        if self.members.len() as u32 == self.nodes {
            self.phase = Phase::Running;
            self.arm_world();
            return Ok(self.starts());
        }
        Ok(Vec::new())
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
        self.members.insert(
            j.node,
            Member {
                host: j.host.clone(),
                local_ranks: j.local_ranks,
            },
        );
        // It has no ranks in this attempt: it counts as ended.
        self.ended.insert(j.node);
        if self.phase == Phase::Waiting && self.lost.is_empty() {
            return Ok(self.restart());
        }
        Ok(Vec::new())
    }

    /// Whether the attempt that failed may be followed by another.
    fn can_restart(&self) -> bool {
        let requeue = self.failure.as_ref().is_some_and(|f| f.requeue);
        // A hang is not restarted: the same run would most likely hang again.
        let hang = self.failure.as_ref().is_some_and(|f| f.hang);
        self.failure.is_some()
            && !requeue
            && !hang
            && !self.lost.contains_key(&0)
            && self.attempt < self.max_restarts.unwrap_or(0)
    }

    /// The wait for replacements passed its time: the run ends with the failure that began it.
    pub fn give_up(&mut self) -> Vec<(To, Msg)> {
        if self.phase != Phase::Waiting {
            return Vec::new();
        }
        let why = format!(
            "; no launcher replaced {} within {} s",
            LostNode::list(&self.lost_nodes()),
            self.replace_within.as_secs()
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
            })
            .collect()
    }

    /// Each node's place in the world: rank offsets in node order.
    fn starts(&self) -> Vec<(To, Msg)> {
        let world_size = self.members.values().map(|m| m.local_ranks).sum();
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
            _ => return Vec::new(),
        };
        self.acts(acts)
    }

    /// When [`tick`](Coordinator::tick) next has something to decide.
    pub fn next_wake(&self) -> Option<Instant> {
        match &self.world {
            Some(w) if self.phase == Phase::Running && self.failure.is_none() => w.next_wake(),
            _ => None,
        }
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
            Msg::Stacks { attempt, stacks } if attempt == self.attempt => {
                let acts = match self.world.as_mut() {
                    Some(w) if self.failure.is_none() => w.stacks(now, node, stacks),
                    _ => Vec::new(),
                };
                self.acts(acts)
            }
            Msg::Failed { attempt, failure } if attempt == self.attempt => self.fail(failure),
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
            Msg::Bye => {
                self.gone.insert(node);
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    /// A node's connection closed, or its heartbeats stopped.
    pub fn closed(&mut self, node: u32, why: &str) -> Vec<(To, Msg)> {
        if self.gone.contains(&node) || !self.members.contains_key(&node) {
            return Vec::new();
        }
        match self.phase {
            Phase::Joining => {
                // It may join again (a restarted launcher).
                self.members.remove(&node);
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
                    self.lost.insert(node, self.host(node));
                    self.ended.insert(node);
                    let now = self.now;
                    let mut out = self.tick(now);
                    out.extend(self.maybe_next());
                    return out;
                }
                let host = self.host(node);
                self.lost.insert(node, host.clone());
                let mut out = self.fail(FailureReport::lost(node, &host, why));
                self.ended.insert(node);
                out.extend(self.maybe_next());
                out
            }
            Phase::Waiting => {
                self.gone.insert(node);
                let host = self.host(node);
                self.lost.insert(node, host);
                if self.can_restart() {
                    // The survivors learn that they now wait for this one too.
                    vec![(To::All, self.wait_msg())]
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

    fn fail(&mut self, failure: FailureReport) -> Vec<(To, Msg)> {
        if self.phase != Phase::Running || self.failure.is_some() {
            return Vec::new();
        }
        self.failure = Some(failure.clone());
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
            if self.lost.is_empty() {
                return self.restart();
            }
            self.phase = Phase::Waiting;
            return vec![(To::All, self.wait_msg())];
        }
        self.finish()
    }

    fn restart(&mut self) -> Vec<(To, Msg)> {
        self.attempt += 1;
        self.failure = None;
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
            secs: self.replace_within.as_secs(),
        }
    }
}

/// Two launchers with one node rank: the second is refused, naming both hosts.
fn duplicate(j: &Join, host: &str) -> String {
    format!(
        "node {} is already in the run from host {host}, and this launcher (host {}) has the same --machine_rank {}; a replacement may join only once node {} is lost",
        j.node, j.host, j.node, j.node
    )
}

// ---------------------------------------------------------------------------------------------
// Wire: line reading and writing.

fn read_msg<R: BufRead>(r: &mut R) -> std::io::Result<Option<Msg>> {
    let mut line = String::new();
    let n = r.by_ref().take(MAX_LINE).read_line(&mut line)?;
    if n == 0 {
        return Ok(None);
    }
    serde_json::from_str(line.trim_end())
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

fn write_msg(w: &Mutex<TcpStream>, m: &Msg) -> std::io::Result<()> {
    let mut s = w.lock().map_err(|_| std::io::Error::other("poisoned"))?;
    s.write_all(&m.line())
}

fn why_closed(e: Option<&std::io::Error>, window: Duration) -> String {
    match e {
        None => "its launcher's connection closed (the launcher ended or was killed)".into(),
        Some(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            format!(
                "no heartbeat for {:.0} s (network cut, or the host is down)",
                window.as_secs_f64()
            )
        }
        Some(e) => format!("its launcher's connection failed: {e}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Server (node 0).

enum HubEvent {
    Joined {
        conn: u64,
        join: Join,
        writer: TcpStream,
    },
    Msg {
        conn: u64,
        msg: Msg,
    },
    Closed {
        conn: u64,
        why: String,
    },
}

/// The server, hosted by node 0's launcher.
struct Server {
    done: Arc<AtomicBool>,
}

fn start_server(
    port: u16,
    nodes: u32,
    join_timeout: Duration,
    heartbeat: Duration,
) -> Result<Server, ControlError> {
    raise_open_files();
    let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))
        .map_err(|source| ControlError::Bind { port, source })?;
    let (tx, rx) = mpsc::channel::<HubEvent>();
    let window = lost_after(heartbeat);
    let done = Arc::new(AtomicBool::new(false));
    std::thread::spawn(move || {
        let mut next = 0u64;
        for s in listener.incoming() {
            let Ok(s) = s else { continue };
            next += 1;
            let conn = next;
            let tx = tx.clone();
            std::thread::spawn(move || serve_conn(conn, s, tx, join_timeout, window));
        }
    });
    let d = Arc::clone(&done);
    std::thread::spawn(move || hub(rx, nodes, join_timeout, heartbeat, d));
    Ok(Server { done })
}

/// One descriptor per node: the soft open-file limit (often 1024) is raised to the hard one.
fn raise_open_files() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a stack struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

fn serve_conn(
    conn: u64,
    s: TcpStream,
    tx: Sender<HubEvent>,
    join_timeout: Duration,
    window: Duration,
) {
    let _ = s.set_nodelay(true);
    let Ok(writer) = s.try_clone() else { return };
    let _ = writer.set_write_timeout(Some(window));
    let _ = s.set_read_timeout(Some(join_timeout));
    let mut r = BufReader::new(s);
    let join = match read_msg(&mut r) {
        Ok(Some(Msg::Join(j))) => j,
        _ => return,
    };
    if tx.send(HubEvent::Joined { conn, join, writer }).is_err() {
        return;
    }
    let _ = r.get_ref().set_read_timeout(Some(window));
    loop {
        match read_msg(&mut r) {
            Ok(Some(Msg::Hb)) => {}
            Ok(Some(msg)) => {
                if tx.send(HubEvent::Msg { conn, msg }).is_err() {
                    return;
                }
            }
            Ok(None) => {
                let _ = tx.send(HubEvent::Closed {
                    conn,
                    why: why_closed(None, window),
                });
                return;
            }
            Err(e) => {
                let _ = tx.send(HubEvent::Closed {
                    conn,
                    why: why_closed(Some(&e), window),
                });
                return;
            }
        }
    }
}

fn hub(
    rx: Receiver<HubEvent>,
    nodes: u32,
    join_timeout: Duration,
    heartbeat: Duration,
    done: Arc<AtomicBool>,
) {
    let mut c = Coordinator::new(nodes).replacing_within(join_timeout);
    let mut wait_deadline: Option<Instant> = None;
    let mut writers: BTreeMap<u32, Mutex<TcpStream>> = BTreeMap::new();
    let mut node_of: HashMap<u64, u32> = HashMap::new();
    let join_deadline = Instant::now() + join_timeout;
    let mut next_beat = Instant::now() + heartbeat;
    let send = |writers: &mut BTreeMap<u32, Mutex<TcpStream>>, out: Vec<(To, Msg)>| {
        for (to, m) in out {
            match to {
                To::Node(n) => {
                    if let Some(w) = writers.get(&n) {
                        let _ = write_msg(w, &m);
                    }
                }
                To::All => {
                    for w in writers.values() {
                        let _ = write_msg(w, &m);
                    }
                }
            }
        }
    };
    loop {
        if c.done() {
            break;
        }
        let wake = c.next_wake().map_or(next_beat, |w| w.min(next_beat));
        let wait = wake.saturating_duration_since(Instant::now());
        let event = rx.recv_timeout(wait);
        let out = c.tick(Instant::now());
        send(&mut writers, out);
        match event {
            Ok(HubEvent::Joined { conn, join, writer }) => {
                let node = join.node;
                match c.join(&join) {
                    Ok(out) => {
                        node_of.insert(conn, node);
                        writers.insert(node, Mutex::new(writer));
                        send(&mut writers, out);
                    }
                    Err(reason) => {
                        let mut w = writer;
                        let _ = w.write_all(&Msg::Reject { reason }.line());
                        let _ = w.shutdown(std::net::Shutdown::Both);
                    }
                }
            }
            Ok(HubEvent::Msg { conn, msg }) => {
                if let Some(n) = node_of.get(&conn).copied() {
                    let out = c.message(n, msg);
                    send(&mut writers, out);
                }
            }
            Ok(HubEvent::Closed { conn, why }) => {
                if let Some(n) = node_of.remove(&conn) {
                    writers.remove(&n);
                    let out = c.closed(n, &why);
                    send(&mut writers, out);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        // A wait for replacements is bounded like the first join.
        if !c.waiting() {
            wait_deadline = None;
        } else if wait_deadline.is_none() {
            wait_deadline = Some(Instant::now() + join_timeout);
        }
        if wait_deadline.is_some_and(|d| Instant::now() >= d) {
            let out = c.give_up();
            send(&mut writers, out);
        }
        if Instant::now() >= next_beat {
            next_beat = Instant::now() + heartbeat;
            send(&mut writers, vec![(To::All, Msg::Hb)]);
            if c.joining() && Instant::now() >= join_deadline {
                let missing = c.missing();
                let reason = format!(
                    "not every node joined within {} s: still waiting for node rank(s) {missing:?}",
                    join_timeout.as_secs()
                );
                send(&mut writers, vec![(To::All, Msg::Reject { reason })]);
                break;
            }
        }
    }
    done.store(true, Ordering::Relaxed);
}

// ---------------------------------------------------------------------------------------------
// Client (every node, node 0 included).

/// This node's settings for the control plane.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The rendezvous host (node 0's address).
    pub addr: String,
    pub port: u16,
    pub join: Join,
    pub join_timeout: Duration,
    pub heartbeat: Duration,
}

/// This node's place in the world, as the rendezvous assembled it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub world_size: u32,
    pub rank_offset: u32,
    /// The attempt this node starts with: 0, or the next one when it replaces a lost node's launcher.
    pub attempt: u32,
}

/// What follows an attempt whose ranks are all gone on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Every node starts this attempt.
    Restart(u32),
    /// No further attempt: how the run ended (`None`: every rank of every node succeeded).
    Finish(Option<FailureReport>),
}

/// The next attempt waits (at most `secs` seconds) for launchers replacing the lost nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub attempt: u32,
    pub lost: Vec<LostNode>,
    pub secs: u64,
}

enum Incoming {
    Msg(Msg),
    Lost(String),
}

/// This launcher's connection to the control plane.
pub struct Link {
    node: u32,
    addr: String,
    writer: Arc<Mutex<TcpStream>>,
    inbox: Mutex<Receiver<Incoming>>,
    /// The world's hang judgement's requests and verdict (`Autopsy`, `Verdict`), read by the
    /// supervisor apart from the stops and decisions.
    hang_inbox: Mutex<Receiver<Msg>>,
    pending: Mutex<VecDeque<Msg>>,
    /// Set once contact with the server is lost: its reason.
    lost: Mutex<Option<String>>,
    closing: Arc<AtomicBool>,
    server: Option<Server>,
    first_attempt: u32,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("node", &self.node)
            .field("addr", &self.addr)
            .finish()
    }
}

impl Link {
    /// Joins the run's control plane (hosting it first on node 0) and waits, at most the join
    /// timeout, until every node has joined.
    pub fn join(s: &Settings) -> Result<(Link, Place), ControlError> {
        let server = if s.join.node == 0 {
            Some(start_server(
                s.port,
                s.join.nodes,
                s.join_timeout,
                s.heartbeat,
            )?)
        } else {
            None
        };
        let addr = format!("{}:{}", s.addr, s.port);
        let deadline = Instant::now() + s.join_timeout;
        let timeout = || ControlError::JoinTimeout {
            node: s.join.node,
            addr: addr.clone(),
            secs: s.join_timeout.as_secs(),
            detail: None,
        };
        let stream = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(timeout());
            }
            match connect(&addr, left.min(Duration::from_secs(5))) {
                Ok(st) => break st,
                Err(_) => std::thread::sleep(Duration::from_millis(100).min(left)),
            }
        };
        let io = |what: &str, source| ControlError::Io {
            addr: addr.clone(),
            what: what.into(),
            source,
        };
        let _ = stream.set_nodelay(true);
        let writer = stream.try_clone().map_err(|e| io("clone", e))?;
        let window = lost_after(s.heartbeat);
        let _ = writer.set_write_timeout(Some(window));
        let writer = Arc::new(Mutex::new(writer));
        write_msg(&writer, &Msg::Join(s.join.clone())).map_err(|e| io("send the join", e))?;
        let mut reader = BufReader::new(stream);
        // The server says which nodes are missing when its own join timeout passes: give it a
        // heartbeat or two beyond ours to say so.
        let deadline = deadline + s.heartbeat * 2;
        let place = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(timeout());
            }
            let _ = reader.get_ref().set_read_timeout(Some(left));
            match read_msg(&mut reader) {
                Ok(Some(Msg::Start {
                    attempt,
                    world_size,
                    rank_offset,
                    ..
                })) => {
                    break Place {
                        world_size,
                        rank_offset,
                        attempt,
                    }
                }
                Ok(Some(Msg::Reject { reason })) if reason.starts_with("not every node") => {
                    return Err(ControlError::JoinTimeout {
                        node: s.join.node,
                        addr: addr.clone(),
                        secs: s.join_timeout.as_secs(),
                        detail: Some(reason),
                    })
                }
                Ok(Some(Msg::Reject { reason })) => {
                    return Err(ControlError::Refused {
                        node: s.join.node,
                        addr: addr.clone(),
                        reason,
                    })
                }
                Ok(Some(_)) => {}
                Ok(None) => {
                    return Err(io(
                        "wait for every node to join",
                        std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "the server closed the connection",
                        ),
                    ))
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(timeout())
                }
                Err(e) => return Err(io("wait for every node to join", e)),
            }
        };
        let _ = reader.get_ref().set_read_timeout(Some(window));
        let (tx, rx) = mpsc::channel();
        let (hang_tx, hang_rx) = mpsc::channel();
        let closing = Arc::new(AtomicBool::new(false));
        {
            let closing = Arc::clone(&closing);
            std::thread::spawn(move || loop {
                match read_msg(&mut reader) {
                    Ok(Some(Msg::Hb)) => {}
                    Ok(Some(m @ (Msg::Autopsy { .. } | Msg::Verdict { .. }))) => {
                        let _ = hang_tx.send(m);
                    }
                    Ok(Some(m)) => {
                        if tx.send(Incoming::Msg(m)).is_err() {
                            return;
                        }
                    }
                    Ok(None) => {
                        if !closing.load(Ordering::Relaxed) {
                            let _ = tx.send(Incoming::Lost(
                                "its launcher's connection closed (the launcher ended or was killed)"
                                    .into(),
                            ));
                        }
                        return;
                    }
                    Err(e) => {
                        if !closing.load(Ordering::Relaxed) {
                            let _ = tx.send(Incoming::Lost(why_closed(Some(&e), window)));
                        }
                        return;
                    }
                }
            });
        }
        {
            let w = Arc::clone(&writer);
            let closing = Arc::clone(&closing);
            let beat = s.heartbeat;
            std::thread::spawn(move || {
                while !closing.load(Ordering::Relaxed) {
                    if write_msg(&w, &Msg::Hb).is_err() {
                        return;
                    }
                    std::thread::sleep(beat);
                }
            });
        }
        Ok((
            Link {
                node: s.join.node,
                addr: s.addr.clone(),
                writer,
                inbox: Mutex::new(rx),
                hang_inbox: Mutex::new(hang_rx),
                pending: Mutex::new(VecDeque::new()),
                lost: Mutex::new(None),
                closing,
                server,
                first_attempt: place.attempt,
            },
            place,
        ))
    }

    pub fn node(&self) -> u32 {
        self.node
    }

    /// The attempt this node's ranks start with: above 0 for a launcher that replaced a lost one.
    pub fn first_attempt(&self) -> u32 {
        self.first_attempt
    }

    fn lost_report(&self, why: &str) -> FailureReport {
        let mut f = FailureReport::lost(0, &self.addr, why);
        if self.node != 0 {
            // Unlike another node, node 0 cannot be replaced: the plane and its state die with it.
            f.what
                .push_str("; node 0 hosts the control plane, so the run cannot go on without it");
        }
        f
    }

    fn take(&self, wait: Option<Duration>) -> Option<Incoming> {
        let rx = self.inbox.lock().ok()?;
        match wait {
            None => rx.try_recv().ok(),
            Some(d) => rx.recv_timeout(d).ok(),
        }
    }

    /// A stop sent by the server (another node's failure), or the loss of the server itself. Does
    /// not block.
    pub fn poll_stop(&self) -> Option<FailureReport> {
        if let Some(why) = self.lost.lock().ok()?.clone() {
            return Some(self.lost_report(&why));
        }
        while let Some(i) = self.take(None) {
            match i {
                Incoming::Msg(Msg::Stop { failure, .. }) => return Some(failure),
                Incoming::Msg(m) => {
                    if let Ok(mut p) = self.pending.lock() {
                        p.push_back(m);
                    }
                }
                Incoming::Lost(why) => {
                    if let Ok(mut l) = self.lost.lock() {
                        *l = Some(why.clone());
                    }
                    return Some(self.lost_report(&why));
                }
            }
        }
        None
    }

    /// Tells node 0 that this node's ranks have been still for `quiet`, or (`None`) move again.
    pub fn report_quiet(&self, attempt: u32, quiet: Option<Duration>) {
        let quiet_ms = quiet.map(|q| q.as_millis() as u64);
        let _ = write_msg(&self.writer, &Msg::Quiet { attempt, quiet_ms });
    }

    /// Answers node 0's `Autopsy` with this node's ranks' stacks.
    pub fn send_stacks(&self, attempt: u32, stacks: Vec<WireStack>) {
        let _ = write_msg(&self.writer, &Msg::Stacks { attempt, stacks });
    }

    /// Node 0's request for stacks or its verdict, for `attempt`. Does not block.
    pub fn poll_hang(&self, attempt: u32) -> Option<Msg> {
        let rx = self.hang_inbox.lock().ok()?;
        while let Ok(m) = rx.try_recv() {
            match &m {
                Msg::Autopsy { attempt: a } | Msg::Verdict { attempt: a, .. } if *a == attempt => {
                    return Some(m)
                }
                _ => {}
            }
        }
        None
    }

    /// Tells every node that this one failed (its first failure of the attempt).
    pub fn local_failure(&self, attempt: u32, failure: FailureReport) {
        let _ = write_msg(&self.writer, &Msg::Failed { attempt, failure });
    }

    /// Every rank of `attempt` on this node is gone: waits for the world's decision (bounded by the
    /// heartbeats: a lost server ends the wait).
    /// `on_wait` is told each time the world waits for replacements of lost nodes (the server
    /// bounds that wait).
    pub fn attempt_ended(
        &self,
        attempt: u32,
        ok: bool,
        mut on_wait: impl FnMut(&Waiting),
    ) -> Decision {
        if let Some(why) = self.lost.lock().ok().and_then(|l| l.clone()) {
            return Decision::Finish(Some(self.lost_report(&why)));
        }
        if write_msg(&self.writer, &Msg::Ended { attempt, ok }).is_err() {
            return Decision::Finish(Some(self.lost_report("its launcher's connection failed")));
        }
        loop {
            let next = self
                .pending
                .lock()
                .ok()
                .and_then(|mut p| p.pop_front())
                .map(Incoming::Msg)
                .or_else(|| self.take(Some(Duration::from_millis(200))));
            match next {
                Some(Incoming::Msg(Msg::Start { attempt: a, .. })) if a > attempt => {
                    return Decision::Restart(a)
                }
                Some(Incoming::Msg(Msg::Finish { failure })) => return Decision::Finish(failure),
                Some(Incoming::Msg(Msg::Wait {
                    attempt: a,
                    lost,
                    secs,
                })) if a > attempt => on_wait(&Waiting {
                    attempt: a,
                    lost,
                    secs,
                }),
                Some(Incoming::Lost(why)) => {
                    if let Ok(mut l) = self.lost.lock() {
                        *l = Some(why.clone());
                    }
                    return Decision::Finish(Some(self.lost_report(&why)));
                }
                _ => {}
            }
        }
    }

    /// Leaves the control plane after `Finish`. Node 0 hosts it, so it stays (at most a few
    /// heartbeats) until the other nodes have left, so each receives the run's end.
    pub fn close(&self) {
        self.closing.store(true, Ordering::Relaxed);
        let _ = write_msg(&self.writer, &Msg::Bye);
        if let Some(s) = &self.server {
            let until = Instant::now() + Duration::from_secs(5);
            while !s.done.load(Ordering::Relaxed) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

fn connect(addr: &str, timeout: Duration) -> std::io::Result<TcpStream> {
    let addrs: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

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
                        nodes: 2
                    }
                ),
                (
                    To::Node(1),
                    Msg::Start {
                        attempt: 0,
                        world_size: 4,
                        rank_offset: 3,
                        nodes: 2
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
        let mut c = Coordinator::new(nodes).replacing_within(Duration::from_secs(60));
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
        let mut c = started(3, 2);
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
        // Nobody replaces node 2 in time: the run ends with the failure that began it.
        let out = c.give_up();
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

    fn join3(node: u32) -> Join {
        let mut j = join(node, 2);
        j.nodes = 3;
        j.max_restarts = 2;
        j
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
            threads: Some(vec![crate::launch::autopsy::Thread {
                thread_name: Some("MainThread".into()),
                os_thread_id: None,
                pid: None,
                frames: vec![crate::launch::autopsy::Frame {
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

    #[test]
    fn wire_format_is_one_tagged_object_per_line() {
        let m = Msg::Ended {
            attempt: 2,
            ok: true,
        };
        let line = m.line();
        assert_eq!(line, b"{\"t\":\"ended\",\"attempt\":2,\"ok\":true}\n");
        let back = read_msg(&mut BufReader::new(&line[..])).unwrap().unwrap();
        assert_eq!(back, m);
        let f = rank_failure(1, 3);
        assert_eq!(f.exit_status(), ExitStatus::Worker(7));
        assert_eq!(
            f.headline(),
            "rank 3 (local rank 1) on node 1 (h1) exited with status 7"
        );
        assert_eq!(control_port(29500), 29501);
        assert_eq!(control_port(65535), 65534);
    }
}
