//! The control plane between the node launchers of one multi-node run. Each node's launcher only
//! sees its own ranks; without this, a rank failing on node 1 leaves node 0's ranks running until
//! their next collective times out (NCCL's watchdog: tens of minutes), and `--max_restarts` restarts
//! one node while the others stay in the old attempt.
//!
//! The node-0 launcher hosts a small TCP server at the rendezvous address on [`control_port`] (the
//! master port + 1); every launcher, node 0's included, joins it with the run id, its node rank, its
//! rank count and host, after proving it holds the run's secret when there is one ([`auth`]).
//! Messages are one JSON object per line ([`Msg`]), sealed with an HMAC once authenticated. The server's
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
//!   declared, its stacks gathered and its one verdict sent to every node here ([`verdict`](super::hang::verdict));
//! - **spares**: launchers beyond the world's node count wait, heartbeating, and one takes a lost
//!   node's node rank for the next attempt, with no wait for a replacement (`spares`).
//!
//! Each node beats to node 0 every [`HEARTBEAT`], node 0 to each node every two (its fan-out is N);
//! a side that hears nothing for [`MISSES`] intervals (5 s) counts the other as lost. torchrun's agents meet in the elastic rendezvous and learn of a failure
//! only through it (`torch/distributed/elastic/agent/server/api.py::SimpleElasticAgent._invoke_run`);
//! this keeps the same shape without a store, and one line per event.
//!
//! The parts, each side's protocol pure and its I/O thin:
//!
//! - `protocol` (the messages) and `frame` (how a line is cut and sealed);
//! - `auth` (the handshake's proofs and session keys), with `munge` (MUNGE under SLURM);
//! - node 0: `admission` (one connection's handshake), `handshakes` (which connection gives way
//!   when too many are in their handshake) and `coordinator` (the run's decisions and deadlines),
//!   all pure, with `spares` (who waits, who takes which lost node, the run's record of them),
//!   and `server`, the event loop that carries them (its notes, `--exclude_file`, and `drain`:
//!   `--drain_lost_nodes` under SLURM);
//! - every node: [`peer`] (one node's protocol, a pure state machine over bytes and time) and
//!   `link`, the blocking connection that drives it (the `control-sim` benchmark and the tests'
//!   raw members drive the same peer over their own sockets).

mod admission;
mod auth;
mod coordinator;
mod drain;
#[cfg(test)]
mod fixtures;
mod frame;
mod handshakes;
mod link;
mod munge;
pub mod peer;
mod protocol;
mod server;
mod spares;

use crate::error::Diagnostic;
use crate::exit_status::ExitStatus;

pub use auth::{Credentials, Secret};
pub use coordinator::{Coordinator, To};
pub use drain::Drain;
pub use link::{Decision, Joined, Link, Settings, Waiting};
pub use munge::Munge;
pub use protocol::{
    lost_after, FailureReport, Join, LostNode, Msg, Place, Unkillable, HEARTBEAT, MISSES, PROTOCOL,
};
pub use spares::{Roster, SpareNode};

/// The control plane's port: the master port + 1 (the master port − 1 when that is 65535), on the
/// rendezvous host.
pub fn control_port(master_port: u16) -> u16 {
    if master_port == u16::MAX {
        master_port - 1
    } else {
        master_port + 1
    }
}

/// The control plane's address: node 0's rendezvous host, on [`control_port`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlPlane {
    pub addr: String,
    pub port: u16,
    /// The run id every node's launcher gives at the join ([`run_id`]).
    pub run_id: String,
}

/// The run id every node's launcher must give: the scheduler's job (and step) under SLURM, so that a
/// launcher of another job meeting on the same port is refused; else the rendezvous port (not the
/// address: nodes may spell node 0's address differently). The ranks' TORCHELASTIC_RUN_ID stays
/// torchrun's (`none` without `--rdzv_id`).
pub fn run_id(env: &crate::env_vars::Environment, port: u16) -> String {
    use crate::env_vars::{SLURM_JOB_ID, SLURM_STEP_ID};
    match (env.non_empty(SLURM_JOB_ID), env.non_empty(SLURM_STEP_ID)) {
        (Some(job), Some(step)) => format!("slurm:{job}.{step}"),
        (Some(job), None) => format!("slurm:{job}"),
        _ => format!("port:{port}"),
    }
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
    #[error("{var}: {why}")]
    Secret { var: String, why: String },
    #[error("cannot resolve --main_process_ip `{host}`: {reason}")]
    Unresolvable { host: String, reason: String },
    /// This launcher left the join (a signal): the other nodes were told.
    #[error("node {node} {} while joining", report.what)]
    Left {
        node: u32,
        report: Box<FailureReport>,
    },
    /// Another node ended the run before it started (it left the join).
    #[error("the run ended before it started: {}", report.headline())]
    Ended { report: Box<FailureReport> },
    #[error("control plane at {addr}: {what}")]
    Io {
        addr: String,
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl ControlError {
    /// The run ended in the join for SLURM's warning (`--slurm_requeue`): the job is to be requeued.
    pub fn requeue(&self) -> bool {
        matches!(self, ControlError::Left { report, .. } | ControlError::Ended { report } if report.requeue)
    }

    /// What ended the run in the join, when a launcher left it (a signal on this node or another).
    pub fn failure(&self) -> Option<&FailureReport> {
        match self {
            ControlError::Left { report, .. } | ControlError::Ended { report } => Some(report),
            _ => None,
        }
    }
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
            ControlError::Secret { .. } => vec![
                "every node of the run needs the same secret: ACCEL_LAUNCH_SECRET, or ACCEL_LAUNCH_SECRET_FILE naming a file only you can read (e.g. `openssl rand -hex 32`)".into(),
            ],
            ControlError::Unresolvable { .. } => vec![
                "--main_process_ip (main_process_ip in the config) names node 0's host: an address or a name every node resolves".into(),
            ],
            ControlError::Ended { report } => report.hints.clone(),
            ControlError::Left { .. } | ControlError::Io { .. } => Vec::new(),
        }
    }
    fn exit_status(&self) -> ExitStatus {
        match self {
            ControlError::Left { report, .. } | ControlError::Ended { report } => {
                report.exit_status()
            }
            ControlError::Unresolvable { .. } | ControlError::Secret { .. } => ExitStatus::Usage,
            _ => ExitStatus::LauncherFailed,
        }
    }
}
