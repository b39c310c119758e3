//! Runs a [`Plan`] and stays with it until every process of the run is gone. [`run`] is the entry
//! point; this module holds its attempts loop (a failure restarts every rank, up to `--max_restarts`;
//! on many nodes the world decides together). By concern: [`options`], what a caller hands in and
//! gets back; [`signals`], which signals are handed on and which stop the run; [`spawn`], a rank
//! started in its own session and group; [`attempt`], one attempt's decisions without I/O, carried
//! out by [`monitor`]; [`restart`], what follows an attempt; [`processes`] and [`guard`], reaping and
//! killing, so that nothing outlives the run; [`output`], where the ranks' output goes; [`stacks`],
//! the ranks' stacks on a hang or a failure.
//!
//! A tool that reads its ranks' output itself (accel-test's JSON events) runs them with a
//! [`Capture`]: stdout lines and rank ends come over a channel, a failure's survivors run on
//! ([`OnFailure::Continue`]) to report it, and the caller stops the run through [`Capture::stop`].

mod attempt;
mod error;
mod failure;
mod guard;
mod monitor;
mod options;
mod output;
mod processes;
mod restart;
mod signals;
mod spawn;
mod stacks;
mod straggler;
mod unkillable;

pub use attempt::{Stop, KILL_WAIT};
pub use error::SuperviseError;
pub use failure::{exit_code_of, Failure};
pub use options::{
    Capture, Captured, Console, OnFailure, Options, RankEnd, RankResult, RunOutcome,
    DEFAULT_LOG_TEMPLATE,
};
pub use output::render_template;
pub use signals::{SignalSet, Signals, FORWARDED, JOB_CONTROL, STOPPING};

use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use self::attempt::Outcome;
use self::failure::report;
use self::monitor::Monitor;
use self::options::note;
use self::output::{node_log_template, LogFiles};
use self::restart::{Again, Tries};
use self::signals::Event;
use self::spawn::Spawner;

use super::control::{self, Decision, FailureReport};
use super::plan::Plan;
use super::ports;
use crate::env_vars::{self, Environment};
use crate::error::Result;
use crate::exit_status::{signal_name, ExitStatus};

/// Starts every rank of `plan`, supervises them and returns how every rank and the run ended.
///
/// Must be called from a thread that outlives the ranks (the main thread): `PR_SET_PDEATHSIG` fires
/// when the spawning thread exits. One run at a time per process: the run adopts and, at its end,
/// kills every orphan of its ranks.
///
/// Multi-node: a local error that ends the run here (the program not found on this host, a log
/// directory refused) is sent to node 0 before this launcher goes, with its hints and exit status,
/// so that every node prints it and exits with that status instead of waiting for a replacement.
pub fn run(plan: &Plan, opts: &Options, env: &Environment) -> Result<RunOutcome> {
    let result = run_here(plan, opts, env);
    if let (Err(e), Some(link)) = (&result, &opts.control) {
        let node = plan.topology.as_ref().map_or(0, |t| t.node_rank);
        link.leave(local_error_report(e, node, &plan.host));
        link.close();
    }
    result
}

/// A local error as the other nodes are told of it.
fn local_error_report(e: &crate::error::Error, node: u32, host: &str) -> FailureReport {
    let mut what = format!("could not start its ranks: {e}");
    let mut cause = std::error::Error::source(e.inner());
    while let Some(c) = cause {
        what.push_str(&format!(": {c}"));
        cause = c.source();
    }
    FailureReport {
        what,
        status: Some(e.exit_status().code()),
        hints: e.hints(),
        ..FailureReport::lost(node, host, "")
    }
}

fn run_here(plan: &Plan, opts: &Options, env: &Environment) -> Result<RunOutcome> {
    let logs = match (&opts.log_dir, &opts.torchrun_logs) {
        (Some(dir), None) => {
            let node = plan.topology.as_ref().map_or(0, |t| t.node_rank);
            let template = node_log_template(plan, &opts.log_template)?;
            let logs = LogFiles::new(dir, &template, node);
            logs.check(&plan.ranks, opts.max_restarts)?;
            Some(logs)
        }
        _ => None,
    };
    let tmp_base = env
        .non_empty(env_vars::TMPDIR)
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let torchrun_logs = match &opts.torchrun_logs {
        Some(spec) => Some(spec.start(&tmp_base)?),
        None => None,
    };
    let own;
    let feed = match &opts.signals {
        Some(f) => f.as_ref(),
        None => {
            own = Signals::install(&opts.handled, opts.requeue_signal, env)?;
            &own
        }
    };
    let rx = feed.rx.lock().map_err(|_| SuperviseError::Launcher {
        what: "read the launcher's signals".into(),
        source: std::io::Error::other("poisoned"),
    })?;
    let tmp_root = match (&opts.log_dir, &torchrun_logs) {
        (None, None) => Some(tmp_base.join(format!("accel_launch_{}", std::process::id()))),
        _ => None,
    };
    guard::set_subreaper(true);
    let mut supervisor = Supervisor {
        opts,
        rx: &rx,
        spawner: Spawner::new(opts, tmp_root, logs, torchrun_logs),
        stopping: Arc::clone(&feed.stopping),
        stragglers: Vec::new(),
    };
    let result = supervisor.run_attempts(plan.clone()).map(|mut out| {
        out.stragglers = std::mem::take(&mut supervisor.stragglers);
        out
    });
    guard::set_subreaper(false);
    if let Some(t) = &supervisor.spawner.tmp_root {
        let _ = std::fs::remove_dir_all(t);
    }
    if let Some(t) = &supervisor.spawner.torchrun_logs {
        t.finish();
    }
    result
}

/// What the attempts of one run share.
struct Supervisor<'a> {
    opts: &'a Options,
    rx: &'a Receiver<Event>,
    spawner: Spawner<'a>,
    /// The first stopping signal the launcher got (0: none yet), for the spawning loop: the monitor
    /// that handles the signal runs only once every rank is started.
    stopping: Arc<AtomicI32>,
    /// Every rank named a straggler, over the attempts.
    stragglers: Vec<crate::launch::straggler::Finding>,
}

/// How one attempt ended.
struct AttemptEnd {
    outcome: Outcome<Failure>,
    ranks: Vec<RankResult>,
    /// Its ranks that did not exit after SIGKILL.
    unkillable: Vec<control::Unkillable>,
    stragglers: Vec<crate::launch::straggler::Finding>,
}

impl Supervisor<'_> {
    fn run_attempts(&mut self, mut plan: Plan) -> Result<RunOutcome> {
        let opts = self.opts;
        // A launcher replacing a lost node's joins the world's next attempt.
        let mut attempt = opts.control.as_ref().map_or(0, |l| l.first_attempt());
        let mut port_retries = 0u32;
        let node = plan.topology.as_ref().map_or(0, |t| t.node_rank);
        loop {
            let AttemptEnd {
                outcome,
                ranks,
                unkillable: left,
                stragglers,
            } = self.run_once(&plan, attempt)?;
            self.stragglers.extend(stragglers);
            // Multi-node: the world decides together whether to restart.
            if let Some(link) = &opts.control {
                if !left.is_empty() {
                    link.report_unkillable(attempt, left.clone());
                }
                let ok = matches!(outcome, Outcome::Success) && left.is_empty();
                match self.attempt_ended(link, attempt, ok) {
                    Decision::Restart(a) => {
                        attempt = a;
                        note(
                            opts,
                            &format!(
                                "restarting the ranks of every node (restart {attempt} of {})",
                                opts.max_restarts
                            ),
                        );
                        continue;
                    }
                    Decision::Leave(f) => {
                        link.close();
                        let end = restart::End {
                            status: f.exit_status(),
                            signal: f.signal,
                            failure: Some(f),
                        };
                        return Ok(end.outcome(ranks, left));
                    }
                    Decision::Finish(global) => {
                        link.close();
                        let (end, elsewhere) =
                            self.world_finished(link, &outcome, &ranks, global, node);
                        let mut out = end.outcome(ranks, left);
                        out.unkillable.extend(elsewhere);
                        return Ok(out);
                    }
                }
            }
            let tries = Tries {
                attempt,
                max_restarts: opts.max_restarts,
                port_auto: plan.port_auto,
                port_retries,
            };
            match (restart::again(&outcome, tries, !left.is_empty()), &outcome) {
                (Some(Again::NewPort), _) => {
                    port_retries += 1;
                    let port = ports::free_port()?;
                    note(
                        opts,
                        &format!(
                            "rendezvous port was taken by another process; retrying on port {port}"
                        ),
                    );
                    plan.set_port(port);
                    continue;
                }
                (Some(Again::Restart(next)), Outcome::Failed(f)) => {
                    attempt = next;
                    note(
                        opts,
                        &format!(
                            "rank {} {}; restarting all local ranks (restart {attempt} of {})",
                            f.rank,
                            f.describe(),
                            opts.max_restarts
                        ),
                    );
                    continue;
                }
                _ => {}
            }
            if let (Outcome::Failed(f), None) = (&outcome, &opts.capture) {
                report(opts, f, &ranks);
            }
            return Ok(restart::alone(&outcome, node).outcome(ranks, left));
        }
    }

    /// The world finished: how this node ends, said on its stderr (its rank's failure, what node 0
    /// added), and the other nodes' ranks left behind, as node 0 relayed them.
    fn world_finished(
        &self,
        link: &control::Link,
        outcome: &Outcome<Failure>,
        ranks: &[RankResult],
        global: Option<FailureReport>,
        node: u32,
    ) -> (restart::End, Vec<control::Unkillable>) {
        let opts = self.opts;
        if let Outcome::Failed(f) = outcome {
            report(opts, f, ranks);
        }
        let (end, said) = restart::world(outcome, global, node);
        if let Some(said) = said {
            note(opts, &said);
        }
        let elsewhere: Vec<_> = link
            .unkillable()
            .into_iter()
            .filter(|u| u.node != node)
            .collect();
        for u in &elsewhere {
            note(
                opts,
                &format!("node {} ({}): {}", u.node, u.host, u.describe()),
            );
        }
        (end, elsewhere)
    }

    /// Every rank of the attempt is gone here: waits for the world's decision (restart, or how the
    /// run ended). A stopping signal meanwhile — while the world waits for a lost node's
    /// replacement, or for the other nodes' ranks — is acted on at once: this launcher leaves the
    /// run, every node is told, and all end 128+N (SLURM's warning under --slurm_requeue: the job
    /// is requeued, 123).
    fn attempt_ended(&self, link: &control::Link, attempt: u32, ok: bool) -> Decision {
        let opts = self.opts;
        let rx = self.rx;
        let (node, host) = (link.node(), plan_host());
        link.attempt_ended(
            attempt,
            ok,
            |w| {
                note(
                    opts,
                    &format!(
                        "waiting up to {} s for a new launcher of {} (the same --machine_rank) to join restart {} of {}",
                        w.secs,
                        control::LostNode::list(&w.lost),
                        w.attempt,
                        opts.max_restarts
                    ),
                )
            },
            || {
                while let Ok(Event::Signal { sig, .. }) = rx.try_recv() {
                    if let Some(f) = stopped_between_attempts(opts, node, &host, sig) {
                        return Some(f);
                    }
                }
                None
            },
        )
    }

    /// One attempt: spawn every rank, watch them to the end, clean up everything they left.
    fn run_once(&mut self, plan: &Plan, attempt: u32) -> Result<AttemptEnd> {
        self.spawner.begin(plan, attempt)?;
        let mut running = Vec::new();
        let mut spawn_stopped = None;
        for spec in &plan.ranks {
            // A stop asked for while ranks start (a signal, the caller's stop) starts no more: with
            // many ranks on a machine short of memory, starting them all first can take minutes.
            let sig = self.stopping.load(Ordering::Relaxed);
            let asked = self
                .opts
                .capture
                .as_ref()
                .is_some_and(|c| c.stop.load(Ordering::Relaxed));
            if sig != 0 || asked {
                spawn_stopped = (sig != 0).then_some(sig);
                break;
            }
            match self.spawner.spawn(plan, spec, attempt) {
                Ok(r) => running.push(r),
                Err(e) => {
                    processes::abandon(&mut running);
                    return Err(e);
                }
            }
        }
        let watched = Monitor::new(self.opts, &mut running, plan, attempt, spawn_stopped)
            .watch(self.rx, self.spawner.strays.as_mut());
        processes::clean_up(&mut running);
        Ok(AttemptEnd {
            outcome: watched
                .outcome
                .map(|i| Failure::of(&running[i], &plan.host)),
            ranks: processes::results(&running),
            unkillable: watched.unkillable,
            stragglers: watched.stragglers,
        })
    }
}

/// This host's name, as the plan gives it to every report.
fn plan_host() -> String {
    crate::host::hostname()
}

/// A signal to a launcher that has no rank running (joining, or waiting for the world's decision):
/// the report it leaves the run with, when the signal stops it. `None` for a signal that does not.
pub fn stopped_between_attempts(
    opts: &Options,
    node: u32,
    host: &str,
    sig: i32,
) -> Option<FailureReport> {
    if sig == libc::SIGCHLD {
        return None;
    }
    if Some(sig) == opts.requeue_signal {
        note(
            opts,
            &format!(
                "{}: SLURM's warning while no rank runs: leaving the run; the job is requeued",
                signal_name(sig)
            ),
        );
        return Some(FailureReport {
            what: format!("received {} (SLURM's warning)", signal_name(sig)),
            signal: Some(sig),
            requeue: true,
            status: Some(ExitStatus::Requeued.code()),
            ..FailureReport::lost(node, host, "")
        });
    }
    if sig == libc::SIGTSTP {
        // No rank to stop first: the launcher stops as the terminal asks.
        let _ = signal_hook::low_level::emulate_default_handler(libc::SIGTSTP);
        return None;
    }
    if !STOPPING.contains(&sig) && !FORWARDED.contains(&sig) {
        return None;
    }
    note(
        opts,
        &format!(
            "{}: leaving the run (no rank of this node runs)",
            signal_name(sig)
        ),
    );
    Some(FailureReport {
        what: format!("left the run: its launcher received {}", signal_name(sig)),
        signal: Some(sig),
        status: Some(ExitStatus::Signal(sig).code()),
        ..FailureReport::lost(node, host, "")
    })
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::os::unix::process::ExitStatusExt;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::contract::EnvMap;
    use crate::exit_status::ExitStatus;

    /// The capturing mode accel-test relies on: lines come over the channel tagged with the rank, a
    /// failure leaves the others running, and the caller's stop ends them.
    #[test]
    fn capture_continue_and_stop() {
        let script = "echo hello $RANK; echo -n tail$RANK; [ $RANK = 1 ] && exit 3; exec sleep 30";
        let argv: Vec<OsString> = ["sh", "-c", script].iter().map(OsString::from).collect();
        let env = Environment::default();
        let mut plan = Plan::local(2, &argv, &EnvMap::new(), &env).unwrap();
        plan.port_auto = false;
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let opts = Options {
            tool: "test",
            grace: Duration::from_secs(5),
            quiet: true,
            on_failure: OnFailure::Continue,
            capture: Some(Capture {
                sink: tx,
                stop: Arc::clone(&stop),
            }),
            ..Options::default()
        };
        let stopper = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for c in rx.iter() {
                if let Captured::Ended { rank: 1, end } = &c {
                    assert_eq!(end.status.code(), Some(3));
                    // Rank 0 is still running, as asked; now stop it.
                    std::thread::sleep(Duration::from_millis(300));
                    stop.store(true, Ordering::Relaxed);
                }
                seen.push(c);
                let ends = seen
                    .iter()
                    .filter(|c| matches!(c, Captured::Ended { .. } | Captured::Eof { .. }))
                    .count();
                if ends == 4 {
                    break;
                }
            }
            seen
        });
        let started = Instant::now();
        let outcome = run(&plan, &opts, &env).unwrap();
        let seen = stopper.join().unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(outcome.status, ExitStatus::Worker(3));
        assert_eq!(outcome.signal, None);
        for r in 0..2u32 {
            let lines: Vec<&str> = seen
                .iter()
                .filter_map(|c| match c {
                    Captured::Line { rank, line } if *rank == r => Some(line.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(lines, [format!("hello {r}"), format!("tail{r}")]);
        }
        let r0 = &outcome.ranks[0];
        assert_eq!(r0.end.status.signal(), Some(libc::SIGTERM));
        assert!(r0.end.stopped, "rank 0 was stopped by the caller");
        assert!(!outcome.ranks[1].end.stopped);
    }
}
