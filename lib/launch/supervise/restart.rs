//! What follows an attempt, without I/O: whether a run on its own starts its ranks again (a restart
//! counted against `--max_restarts`, as torchrun's `elastic/agent/server/api.py::_invoke_run` counts
//! `remaining_restarts`, or a new rendezvous port), and with which status, signal and failure a run
//! ends, on its own or as the world's decision ends it.

use super::attempt::Outcome;
use super::failure::Failure;
use super::options::{RankResult, RunOutcome};
use crate::exit_status::ExitStatus;
use crate::launch::control::{self, FailureReport};
use crate::launch::ports;

/// How many times a run takes a new rendezvous port after losing its own to another process.
const PORT_RETRIES: u32 = 3;

/// Why a run on its own starts its ranks again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Again {
    /// The rendezvous port accel chose was taken by another process before rank 0 bound it: the same
    /// attempt on a new port (not a restart).
    NewPort,
    /// The next restart, numbered.
    Restart(u32),
}

/// What a run on its own has done so far, for [`again`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Tries {
    /// The attempt that ended (0: the first; each restart counts one).
    pub attempt: u32,
    pub max_restarts: u32,
    /// accel chose the rendezvous port (it may take another).
    pub port_auto: bool,
    /// New ports taken so far.
    pub port_retries: u32,
}

/// Whether a run without a control plane goes on after this attempt: only a failure restarts it. A
/// hang would most likely hang again; a requeue runs the job itself again, resuming from the ranks'
/// checkpoint; a signal or another node's stop ends the run; and a rank left behind may hold the
/// devices the next attempt needs.
pub(super) fn again(outcome: &Outcome<Failure>, tries: Tries, left_behind: bool) -> Option<Again> {
    let Outcome::Failed(f) = outcome else {
        return None;
    };
    if left_behind {
        return None;
    }
    let race = tries.port_auto && f.local_rank == 0 && ports::is_addr_in_use(&f.stderr_tail);
    if race && tries.port_retries < PORT_RETRIES {
        return Some(Again::NewPort);
    }
    (tries.attempt < tries.max_restarts).then_some(Again::Restart(tries.attempt + 1))
}

/// How a run ended: what the launcher exits with, the signal that stopped it, what ended it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct End {
    pub status: ExitStatus,
    pub signal: Option<i32>,
    pub failure: Option<FailureReport>,
}

impl End {
    /// The run's outcome, with every rank of its last attempt and this node's ranks left behind: one
    /// left behind says so first (the node may need attention).
    pub(super) fn outcome(
        self,
        ranks: Vec<RankResult>,
        left: Vec<control::Unkillable>,
    ) -> RunOutcome {
        RunOutcome {
            status: if left.is_empty() {
                self.status
            } else {
                ExitStatus::Unkillable
            },
            signal: self.signal,
            ranks,
            failure: self.failure,
            unkillable: left,
            stragglers: Vec::new(),
        }
    }

    fn of(status: ExitStatus, signal: Option<i32>, failure: Option<FailureReport>) -> End {
        End {
            status,
            signal,
            failure,
        }
    }
}

/// A run stopped by signal N exits 128+N, as the ranks it stopped report it.
fn signalled(sig: i32) -> ExitStatus {
    ExitStatus::Worker((128 + sig).min(255) as u8)
}

/// How a run without a control plane ends with this attempt (`node`: this node's rank in the job).
pub(super) fn alone(outcome: &Outcome<Failure>, node: u32) -> End {
    match outcome {
        Outcome::Success => End::of(ExitStatus::Success, None, None),
        Outcome::Hung => End::of(ExitStatus::Hang, None, None),
        Outcome::Requeue => End::of(ExitStatus::Requeued, None, None),
        Outcome::Remote(g) => End::of(g.exit_status(), None, Some(g.clone())),
        Outcome::Signalled(sig) => End::of(signalled(*sig), Some(*sig), None),
        Outcome::Failed(f) => End::of(
            ExitStatus::Worker(f.exit_code()),
            None,
            Some(f.to_report(node)),
        ),
    }
}

/// How a multi-node run ends on this node when the world finished (`global`: what node 0 says ended
/// it), and the note that says what node 0 knows beyond this node's own outcome.
pub(super) fn world(
    outcome: &Outcome<Failure>,
    global: Option<FailureReport>,
    node: u32,
) -> (End, Option<String>) {
    match (outcome, global) {
        (Outcome::Signalled(sig), g) => (End::of(signalled(*sig), Some(*sig), g), None),
        (Outcome::Failed(f), g) => {
            // What node 0 added to this failure (a node that never reported its end after the stop)
            // is said here too.
            let own = f.to_report(node);
            let note = g
                .filter(|g| g.what != own.what)
                .map(|g| format!("the run ended: {}", g.headline()));
            let end = End::of(ExitStatus::Worker(f.exit_code()), None, Some(own));
            (end, note)
        }
        (Outcome::Hung, g) => (End::of(ExitStatus::Hang, None, g), None),
        (_, Some(g)) if g.requeue => {
            let note = format!("{}: the job is requeued", g.headline());
            (End::of(ExitStatus::Requeued, None, Some(g)), Some(note))
        }
        (_, None) => (End::of(ExitStatus::Success, None, None), None),
        (_, Some(g)) => {
            // The stderr tail was printed when the stop came.
            let note = format!("the run failed: {}", g.headline());
            (End::of(g.exit_status(), None, Some(g)), Some(note))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn failure(local_rank: u32, code: i32, stderr_tail: &str) -> Outcome<Failure> {
        Outcome::Failed(Failure {
            rank: 4 + local_rank,
            local_rank,
            host: "h".into(),
            status: std::process::ExitStatus::from_raw(code << 8),
            stderr_tail: stderr_tail.into(),
            error_message: None,
            pid: 7,
            ended_at: None,
            error_file: None,
        })
    }

    fn tries(attempt: u32, max_restarts: u32) -> Tries {
        Tries {
            attempt,
            max_restarts,
            port_auto: false,
            port_retries: 0,
        }
    }

    #[test]
    fn a_failure_restarts_until_max_restarts_then_ends_with_its_code() {
        let f = failure(1, 3, "");
        assert_eq!(again(&f, tries(0, 2), false), Some(Again::Restart(1)));
        assert_eq!(again(&f, tries(1, 2), false), Some(Again::Restart(2)));
        assert_eq!(again(&f, tries(2, 2), false), None);
        assert_eq!(again(&f, tries(0, 0), false), None);
        let end = alone(&f, 2);
        assert_eq!(end.status, ExitStatus::Worker(3));
        assert_eq!(end.signal, None);
        let report = end.failure.unwrap();
        assert_eq!(
            (report.node, report.rank, report.code),
            (2, Some(5), Some(3))
        );
    }

    #[test]
    fn only_a_failure_restarts() {
        let g = FailureReport::lost(1, "h1", "its heartbeats stopped");
        for o in [
            Outcome::Success,
            Outcome::Hung,
            Outcome::Requeue,
            Outcome::Signalled(libc::SIGTERM),
            Outcome::Remote(g),
        ] {
            assert_eq!(again(&o, tries(0, 5), false), None, "{o:?}");
        }
        // A rank left behind may hold the devices the next attempt needs.
        assert_eq!(again(&failure(0, 1, ""), tries(0, 5), true), None);
    }

    #[test]
    fn a_taken_rendezvous_port_is_retried_three_times_without_counting_a_restart() {
        let race = failure(0, 1, "RuntimeError: ... EADDRINUSE\n");
        let auto = |port_retries| Tries {
            port_auto: true,
            port_retries,
            ..tries(0, 1)
        };
        assert_eq!(again(&race, auto(0), false), Some(Again::NewPort));
        assert_eq!(again(&race, auto(2), false), Some(Again::NewPort));
        assert_eq!(again(&race, auto(3), false), Some(Again::Restart(1)));
        // The port was the user's, or another rank failed: a plain failure.
        assert_eq!(again(&race, tries(0, 1), false), Some(Again::Restart(1)));
        let other = failure(1, 1, "EADDRINUSE");
        assert_eq!(again(&other, auto(0), false), Some(Again::Restart(1)));
    }

    #[test]
    fn the_run_ends_with_the_outcomes_status() {
        assert_eq!(alone(&Outcome::Success, 0).status, ExitStatus::Success);
        assert_eq!(alone(&Outcome::Hung, 0).status, ExitStatus::Hang);
        assert_eq!(alone(&Outcome::Requeue, 0).status, ExitStatus::Requeued);
        let s = alone(&Outcome::Signalled(libc::SIGINT), 0);
        assert_eq!(
            (s.status, s.signal),
            (ExitStatus::Worker(130), Some(libc::SIGINT))
        );
        // A rank left behind here says so first.
        let out = alone(&Outcome::Success, 0).outcome(
            Vec::new(),
            vec![control::Unkillable {
                node: 0,
                host: "h".into(),
                rank: 1,
                pid: 99,
                state: "D".into(),
                wchan: "nfs".into(),
                note: None,
            }],
        );
        assert_eq!(out.status, ExitStatus::Unkillable);
        assert_eq!(out.unkillable.len(), 1);
        assert_eq!(
            alone(&Outcome::Success, 0)
                .outcome(Vec::new(), Vec::new())
                .status,
            ExitStatus::Success
        );
    }

    #[test]
    fn the_worlds_end_says_what_node_0_adds() {
        // This node's own failure is what ended the run: nothing to add.
        let f = failure(0, 7, "");
        let own = match &f {
            Outcome::Failed(x) => x.to_report(1),
            _ => unreachable!(),
        };
        let (end, note) = world(&f, Some(own.clone()), 1);
        assert_eq!((end.status, note), (ExitStatus::Worker(7), None));
        let lost = FailureReport::lost(2, "h2", "its heartbeats stopped");
        let (end, note) = world(&f, Some(lost), 1);
        assert_eq!(end.failure, Some(own));
        assert_eq!(
            note.as_deref(),
            Some("the run ended: node 2 (h2) was lost: its heartbeats stopped")
        );
        // Stopped for another node: its status, said.
        let (end, note) = world(
            &Outcome::Success,
            Some(FailureReport::lost(2, "h2", "gone")),
            1,
        );
        assert_eq!(end.status, ExitStatus::NodeLost);
        assert_eq!(
            note.as_deref(),
            Some("the run failed: node 2 (h2) was lost: gone")
        );
        let requeue = FailureReport {
            requeue: true,
            what: "received SIGUSR1 (SLURM's warning)".into(),
            ..FailureReport::lost(0, "h0", "")
        };
        let (end, note) = world(&Outcome::Requeue, Some(requeue), 1);
        assert_eq!(end.status, ExitStatus::Requeued);
        assert_eq!(
            note.as_deref(),
            Some("node 0 (h0) received SIGUSR1 (SLURM's warning): the job is requeued")
        );
        let (end, _) = world(&Outcome::Signalled(libc::SIGTERM), None, 1);
        assert_eq!(
            (end.status, end.signal),
            (ExitStatus::Worker(143), Some(libc::SIGTERM))
        );
        assert_eq!(
            world(&Outcome::Success, None, 1),
            (End::of(ExitStatus::Success, None, None), None)
        );
        assert_eq!(world(&Outcome::Hung, None, 1).0.status, ExitStatus::Hang);
    }
}
