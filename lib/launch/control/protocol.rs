//! The control plane's wire: one JSON object per line ([`Msg`]), what each side says, and what a
//! node learns from node 0's `start` ([`Place`]). How a line is cut and sealed is `frame`'s.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::super::hang::verdict::WireStack;
use super::super::straggler::RankWindow;
use crate::exit_status::ExitStatus;

/// Time between heartbeats, each way.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// Heartbeat intervals without a word before the other side counts as lost.
pub const MISSES: u32 = 5;
/// The protocol's version: a launcher of another version is refused at the join.
pub const PROTOCOL: u32 = 5;

/// How long a side waits for a word from the other before counting it as lost.
pub fn lost_after(heartbeat: Duration) -> Duration {
    heartbeat * MISSES
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
    /// `--grace_period` in milliseconds (`None`: never SIGKILL): after a stop, node 0 gives this
    /// node its grace, [`KILL_WAIT`](super::super::supervise::KILL_WAIT) and a margin to report its
    /// ranks' end, then counts it as lost.
    #[serde(default)]
    pub grace_ms: Option<u64>,
    /// `--num_processes` when given with `--nproc_per_node`: the world's total, checked by node 0
    /// against the sum of every node's ranks once all have joined.
    #[serde(default)]
    pub world_size: Option<u32>,
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
    /// What every node exits with, when it is not the rank's code: a launcher that could not start
    /// its ranks (127: the program is not found there), or one stopped by a signal before or
    /// between attempts (128+N).
    #[serde(default)]
    pub status: Option<u8>,
    /// The failing launcher's hints (`hint: …` lines), with a local error.
    #[serde(default)]
    pub hints: Vec<String>,
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
            status: None,
            hints: Vec::new(),
        }
    }

    /// What the launchers of the other nodes exit with: the failing rank's code (128+N for signal N),
    /// or [`ExitStatus::NodeLost`] when no rank failed.
    pub fn exit_status(&self) -> ExitStatus {
        if let Some(s) = self.status {
            return ExitStatus::from_code(s);
        }
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Msg {
    /// Node → server, the first line (never sealed): the node's protocol, rank and nonce.
    Hello {
        protocol: u32,
        node: u32,
        nonce: String,
    },
    /// Server → node, in answer (never sealed): node 0's run id, whether the run has a secret
    /// (`auth`: `hmac` or `none`), node 0's nonce and, with a secret, its proof of holding it.
    Challenge {
        run_id: String,
        auth: String,
        nonce: String,
        #[serde(default)]
        proof: Option<String>,
    },
    /// Node → server (with a secret; never sealed): the node's proof of holding it. Every later
    /// line both ways is sealed with the session key.
    Prove { proof: String },
    /// Node → server: the node's part of the world.
    Join(Join),
    /// Server → node: start attempt `attempt` with this place in the world.
    Start {
        attempt: u32,
        world_size: u32,
        rank_offset: u32,
        nodes: u32,
        /// Once the attempt is stopped, node 0 decides within this (the slowest node's
        /// [`Join::grace_ms`], the SIGKILL wait and margins); `None`: a node never SIGKILLs.
        #[serde(default)]
        stop_within_ms: Option<u64>,
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
    /// From each node every [`HEARTBEAT`], from node 0 every two.
    Hb,
    /// Node → server (`--hang_timeout`): this node's ranks have been still for `quiet_ms`, or
    /// (`None`) move again ([`Reporter`](super::super::hang::verdict::Reporter)).
    Quiet {
        attempt: u32,
        #[serde(default)]
        quiet_ms: Option<u64>,
    },
    /// Node → server (`--straggler_threshold`): this node's ranks' samples over its last window;
    /// the server hands them to node 0, which judges the world's
    /// ([`straggler`](super::super::straggler)).
    Windows {
        attempt: u32,
        ranks: Vec<RankWindow>,
    },
    /// Server → every node: the world is hung; send your ranks' stacks.
    Autopsy { attempt: u32 },
    /// Node → server: this node's ranks' stacks, in answer to `Autopsy`.
    Stacks {
        attempt: u32,
        stacks: Vec<WireStack>,
    },
    /// Server → a spare (a launcher whose node rank is at or beyond the world's `nodes`): it is
    /// admitted, runs no ranks and waits, without the join's deadline, until it takes a lost node's
    /// place (`Seated`, then that node's `Start`) or the run ends (`Finish`).
    Spare { nodes: u32 },
    /// Server → a spare: from now on it is node `node` of the world, for attempt `attempt` (its
    /// `Start` follows). Node 0's server moves the spare's connection to that node rank as it
    /// sends this.
    Seated { node: u32, attempt: u32 },
    /// Server → every node: the world's hang verdict; print it and stop the ranks.
    Verdict {
        attempt: u32,
        line: String,
        stacks: String,
        quiet_ms: u64,
    },
    /// Node → server, at any phase: this node's launcher ends the run (it could not start its
    /// ranks, or a signal stopped it while joining or waiting): `failure` says why and what every
    /// node exits with. No restart follows.
    Leave { failure: FailureReport },
    /// Node → server, then server → every node: ranks of `attempt` that did not exit after SIGKILL
    /// (uninterruptible sleep, a frozen cgroup) and were left behind. No restart follows.
    Left {
        attempt: u32,
        ranks: Vec<Unkillable>,
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

/// A rank that did not exit after SIGKILL, as /proc saw it then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unkillable {
    pub node: u32,
    pub host: String,
    pub rank: u32,
    pub pid: i32,
    /// /proc/PID/stat's state letter (`D`: uninterruptible sleep).
    pub state: String,
    /// /proc/PID/wchan: the kernel function it sleeps in (`fuse_…`, `request_wait_answer`).
    pub wchan: String,
    /// Why, where /proc tells more: `frozen: cgroup freezer /x is FROZEN`.
    #[serde(default)]
    pub note: Option<String>,
}

impl Unkillable {
    /// `rank 3 (pid 4242) is in uninterruptible sleep (D, wchan fuse_…) and did not exit after SIGKILL`.
    pub fn describe(&self) -> String {
        let name = match self.state.as_str() {
            "D" => "uninterruptible sleep",
            "R" => "running",
            "S" => "sleep",
            "T" => "stopped",
            "t" => "a tracing stop",
            "Z" => "a zombie",
            _ => "an unknown state",
        };
        let mut how = format!("{}, wchan {}", self.state, self.wchan);
        if let Some(n) = &self.note {
            how.push_str("; ");
            how.push_str(n);
        }
        format!(
            "rank {} (pid {}) is in {name} ({how}) and did not exit after SIGKILL",
            self.rank, self.pid
        )
    }
}

/// A node whose launcher was lost, as [`Msg::Wait`] names it and `--report_json`'s `lost_nodes`
/// lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostNode {
    pub node: u32,
    pub host: String,
    /// The attempt it was lost in.
    #[serde(default)]
    pub attempt: u32,
    /// Why: `its launcher's connection closed …`, `no heartbeat for 5 s …`.
    #[serde(default)]
    pub why: String,
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
    /// The message's JSON, without the newline.
    pub(super) fn json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The message a line's JSON holds; `Err` is why it holds none.
    pub(super) fn parse(json: &str) -> Result<Msg, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    /// The place in the world of node `node`, when the message is node 0's `start` to it.
    pub fn place(&self, node: u32) -> Option<Place> {
        match self {
            Msg::Start {
                attempt,
                world_size,
                rank_offset,
                stop_within_ms,
                ..
            } => Some(Place {
                node,
                world_size: *world_size,
                rank_offset: *rank_offset,
                attempt: *attempt,
                stop_within: stop_within_ms.map(Duration::from_millis),
            }),
            _ => None,
        }
    }
}

/// This node's place in the world, as the rendezvous assembled it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// This node's rank among the nodes: its `--machine_rank`, or for a spare the lost node's
    /// whose place it took.
    pub node: u32,
    pub world_size: u32,
    pub rank_offset: u32,
    /// The attempt this node starts with: 0, or the next one when it replaces a lost node's launcher.
    pub attempt: u32,
    /// Once an attempt is stopped, node 0 decides within this (`None`: a node never SIGKILLs).
    pub stop_within: Option<Duration>,
}

/// How node 0's refusal of every node at its join timeout begins: a node then reports a timeout
/// (naming what node 0 still waited for), not a refusal.
pub(super) const NOT_EVERY_NODE: &str = "not every node";

pub(super) fn why_closed(e: Option<&std::io::Error>, window: Duration) -> String {
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

#[cfg(test)]
mod tests {
    use super::super::control_port;
    use super::super::frame::{Lines, MAX_LINE};
    use super::*;

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
    fn wire_format_is_one_tagged_object_per_line() {
        let m = Msg::Ended {
            attempt: 2,
            ok: true,
        };
        let mut line = m.json();
        assert_eq!(line, b"{\"t\":\"ended\",\"attempt\":2,\"ok\":true}");
        line.push(b'\n');
        let mut lines = Lines::default();
        lines.push(&line);
        let back = Msg::parse(&lines.next(MAX_LINE as usize).unwrap().unwrap()).unwrap();
        assert_eq!(back, m);
        let start = Msg::Start {
            attempt: 1,
            world_size: 4,
            rank_offset: 2,
            nodes: 2,
            stop_within_ms: Some(28_000),
        };
        assert_eq!(
            start.place(1),
            Some(Place {
                node: 1,
                world_size: 4,
                rank_offset: 2,
                attempt: 1,
                stop_within: Some(Duration::from_secs(28)),
            })
        );
        assert_eq!(m.place(1), None);
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
