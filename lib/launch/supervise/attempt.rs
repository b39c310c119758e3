//! The decisions of one attempt, without I/O: what the supervisor does when a rank exits, a signal
//! comes, node 0 stops the attempt, the hang watch declares a hang, or time passes. [`Attempt`] takes
//! these as [`Input`]s, each with the clock, and answers with [`Action`]s (signal the ranks, stop
//! them with a grace period, tell node 0, print a note, end the attempt with its [`Outcome`]); the
//! loop in [`super::monitor`] reads the world and carries the actions out.
//!
//! Stopping is always a [`Stop`]: a signal (SIGTERM, or the one the launcher received) to every rank's
//! group, a grace period to checkpoint, then SIGKILL; a second Ctrl-C (or SIGTERM, …) kills at once.
//! The first rank to fail stops the others (torchrun's agent stops every worker on a failure:
//! `torch/distributed/elastic/agent/server/api.py::SimpleElasticAgent._invoke_run`) and decides the
//! exit status: its code, or 128+N for signal N. A stop's grace counts from when its signal goes
//! out, which may be seconds after the decision (the survivors' stacks are taken first): the loop
//! hands every [`Action::Stop`] back as [`Input::Sent`] with the clock.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use super::options::{OnFailure, RankEnd};
use super::signals::SignalSet;
use crate::exit_status::signal_name;
use crate::launch::control::{self, FailureReport};

/// How long a rank may take to go after SIGKILL. The kernel ends a killed process at once unless it
/// holds it (uninterruptible sleep, a frozen cgroup); one still there after this is named with its
/// pid, state and wchan and left behind, and the attempt ends without it
/// ([`ExitStatus::Unkillable`](crate::exit_status::ExitStatus::Unkillable)).
pub const KILL_WAIT: Duration = Duration::from_secs(10);

/// How long a node waits for SLURM's own delivery of a warning that SLURM delivered on another node
/// (slurmctld tells every node's daemon at once; they deliver within moments of each other).
pub(super) const WARNING_WAIT: Duration = Duration::from_secs(5);

/// How ranks are stopped: `signal` to every rank's group, then SIGKILL after `grace` (after
/// watchexec's `Stop { signal, grace }`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stop {
    pub signal: i32,
    pub grace: Duration,
}

impl Stop {
    /// SIGTERM, then SIGKILL after `grace`: how a failure or the caller stops the others.
    pub fn term(grace: Duration) -> Stop {
        Stop {
            signal: libc::SIGTERM,
            grace,
        }
    }
    /// SIGKILL at once: a second Ctrl-C, a rank that could not be spawned.
    pub fn kill() -> Stop {
        Stop {
            signal: libc::SIGKILL,
            grace: Duration::ZERO,
        }
    }
}

/// How an attempt ended; `F` is the failing rank (its index while the attempt runs, then its
/// [`Failure`](super::failure::Failure)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome<F> {
    Success,
    Hung,
    Failed(F),
    Signalled(i32),
    /// Stopped because another node failed or was lost.
    Remote(FailureReport),
    /// SLURM's warning signal came (`--slurm_requeue`): the ranks were given the grace period to save.
    Requeue,
}

impl<F> Outcome<F> {
    pub(super) fn map<G>(self, f: impl FnOnce(F) -> G) -> Outcome<G> {
        match self {
            Outcome::Success => Outcome::Success,
            Outcome::Hung => Outcome::Hung,
            Outcome::Failed(x) => Outcome::Failed(f(x)),
            Outcome::Signalled(s) => Outcome::Signalled(s),
            Outcome::Remote(g) => Outcome::Remote(g),
            Outcome::Requeue => Outcome::Requeue,
        }
    }
}

/// The settings an attempt's decisions follow (from the run's options and plan).
#[derive(Debug, Clone)]
pub(super) struct Rules {
    /// Time between the stop signal and SIGKILL.
    pub grace: Duration,
    /// How often the ranks are polled when nothing else wakes the supervisor.
    pub monitor_interval: Duration,
    pub on_failure: OnFailure,
    /// `--stacks_on_failure`: the survivors' stacks before they are stopped.
    pub stacks_on_failure: bool,
    /// A multi-node run's control plane is there: failures and stops go to node 0, and its stops come.
    pub linked: bool,
    /// More than one node: the survivors' stacks go under `node_N/` and wait for the other nodes'.
    pub multi_node: bool,
    /// `--slurm_requeue`'s warning signal.
    pub requeue_signal: Option<i32>,
    pub handled: SignalSet,
    /// This node's rank in the job and its host, for the reports to node 0.
    pub node: u32,
    pub host: String,
}

/// What happened, as the loop saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Input {
    /// Ranks found ended by one pass of reaping (by their index in the attempt), in index order.
    Exited(Vec<(usize, ExitStatus)>),
    /// The control plane was read: node 0's stop of this attempt, if one came (it is read only while
    /// [`Attempt::listening`]).
    ControlPlane(Option<FailureReport>),
    /// The capturing caller asks to stop the run (`Capture::stop`).
    StopAsked,
    /// The hang watch declared a hang (this node's, or node 0's verdict on the world) and reported
    /// it; it is asked only while the attempt is not [`Attempt::stopping`].
    Hang,
    /// A signal to the launcher; `delivered`: its sender signalled every process of the run too.
    Signal { sig: i32, delivered: bool },
    /// Nothing new: time passed (SIGKILL after the grace period, the wait after SIGKILL).
    Clock,
    /// A [`Action::Stop`] went out.
    Sent(Stop),
}

/// What the loop is to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Action {
    /// A rank ended: recorded on it, and sent to a capturing caller.
    Ended { index: usize, end: RankEnd },
    /// Tell node 0 that this rank failed (the loop adds its stderr tail and error file).
    TellRankFailure(usize),
    /// Tell node 0 of this failure or stop of the node.
    Tell(FailureReport),
    /// Take the survivors' stacks (`--stacks_on_failure`), headed `TOOL: what`.
    Stacks { what: String, multi_node: bool },
    /// Print another node's failure, after `lead`: its headline and its rank's stderr tail.
    ShowRemote {
        lead: String,
        failure: FailureReport,
    },
    /// A progress note (not under `--quiet`).
    Note(String),
    /// This signal to the group of every live rank.
    Signal(i32),
    /// The stop's signal to the group of every live rank (then SIGCONT, which a rank stopped by
    /// Ctrl-Z needs to see it), and [`Input::Sent`] back with the clock.
    Stop(Stop),
    /// The launcher stops itself as its terminal asked (Ctrl-Z), after its ranks.
    Suspend,
    /// Name every live rank, still there [`KILL_WAIT`] after SIGKILL, and leave it behind.
    LeaveBehind,
    /// The attempt is over.
    End(Outcome<usize>),
}

/// One attempt's state: how its ranks ended, and whether and why it is stopping.
pub(super) struct Attempt {
    rules: Rules,
    /// The global rank of each of the attempt's ranks, and its end once reaped.
    ranks: Vec<u32>,
    ends: Vec<Option<RankEnd>>,
    first_failure: Option<usize>,
    /// The launcher was told to stop by this signal.
    stop_signal: Option<i32>,
    /// A signal that stopped the spawning before every rank started (it may have reached no monitor).
    spawn_stopped: Option<i32>,
    /// Set once the stop's signal went out: when SIGKILL follows.
    deadline: Option<Instant>,
    killed: bool,
    /// When SIGKILL was first sent: a rank still there [`KILL_WAIT`] later is left behind.
    killed_at: Option<Instant>,
    /// Another node failed or was lost: this node's ranks are being stopped for it.
    remote: Option<FailureReport>,
    /// SLURM's requeue warning came (here or on another node): the ranks are saving and exiting, and
    /// how they end is not a failure.
    requeue: bool,
    /// The hang watch declared a hang and stopped the run.
    hung: bool,
    /// Another node got SLURM's warning from its step daemon, which delivers it to this node's ranks
    /// too: until when this node waits for that delivery before forwarding the warning itself.
    awaiting_warning: Option<(i32, Instant)>,
}

impl Attempt {
    /// `ranks`: the global rank of each rank started (in the order of their indices).
    pub(super) fn new(rules: Rules, ranks: Vec<u32>, spawn_stopped: Option<i32>) -> Attempt {
        Attempt {
            rules,
            ends: vec![None; ranks.len()],
            ranks,
            first_failure: None,
            stop_signal: None,
            spawn_stopped,
            deadline: None,
            killed: false,
            killed_at: None,
            remote: None,
            requeue: false,
            hung: false,
            awaiting_warning: None,
        }
    }

    pub(super) fn on(&mut self, now: Instant, input: Input) -> Vec<Action> {
        match input {
            Input::Exited(ended) => self.exited(ended),
            Input::ControlPlane(Some(g)) => self.remote_stop(now, g),
            Input::ControlPlane(None) => self.warning_due(now),
            Input::StopAsked if self.deadline.is_none() => {
                vec![Action::Stop(Stop::term(self.grace()))]
            }
            Input::StopAsked => Vec::new(),
            Input::Hang => {
                self.hung = true;
                vec![Action::Stop(Stop::term(self.grace()))]
            }
            Input::Signal { sig, delivered } => self.signal(sig, delivered),
            Input::Clock => self.clock(now),
            Input::Sent(stop) => {
                self.sent(now, stop);
                Vec::new()
            }
        }
    }

    /// The stop's signal went out: when SIGKILL follows (never later than an earlier stop's).
    fn sent(&mut self, now: Instant, stop: Stop) {
        if stop.signal == libc::SIGKILL {
            self.killed = true;
            self.killed_at.get_or_insert(now);
        }
        let at = now + stop.grace;
        self.deadline = Some(self.deadline.map_or(at, |d| d.min(at)));
    }

    /// Once the stop's signal went out: the ranks are being stopped (the hang watch rests).
    pub(super) fn stopping(&self) -> bool {
        self.deadline.is_some()
    }

    /// Whether a stop from node 0 would be acted on: none came yet, and nothing else stops the run.
    pub(super) fn listening(&self) -> bool {
        self.remote.is_none()
            && self.first_failure.is_none()
            && self.stop_signal.is_none()
            && !self.requeue
    }

    /// How long the loop may wait for a signal before it looks again.
    pub(super) fn wait(&self, now: Instant) -> Duration {
        let interval = self.rules.monitor_interval;
        let wait = match (self.deadline, self.killed_at) {
            (Some(d), _) if !self.killed => d.saturating_duration_since(now).min(interval),
            (_, Some(k)) => (k + KILL_WAIT).saturating_duration_since(now).min(interval),
            _ => interval,
        };
        if self.rules.linked {
            // Another node's stop is read between waits: at most a heartbeat late.
            wait.min(control::HEARTBEAT)
        } else {
            wait
        }
    }

    fn grace(&self) -> Duration {
        self.rules.grace
    }

    fn live(&self) -> usize {
        self.ends.iter().filter(|e| e.is_none()).count()
    }

    /// Records the ranks that ended; the first to fail stops the others (fail-fast), unless the run
    /// is stopping for another cause already.
    fn exited(&mut self, ended: Vec<(usize, ExitStatus)>) -> Vec<Action> {
        let stopping = self.deadline.is_some();
        let mut acts = Vec::new();
        for (index, status) in ended {
            let end = RankEnd {
                status,
                stopped: stopping && status.signal().is_some(),
            };
            self.ends[index] = Some(end);
            acts.push(Action::Ended { index, end });
        }
        if !self.listening() {
            return acts;
        }
        let failed = self
            .ends
            .iter()
            .position(|e| e.is_some_and(|e| !e.status.success()));
        let Some(i) = failed else { return acts };
        self.first_failure = Some(i);
        // Multi-node: tell the other nodes first, with the rank's stderr tail, so that with
        // --stacks_on_failure they take their ranks' stacks while these are taken.
        if self.rules.linked {
            acts.push(Action::TellRankFailure(i));
        }
        if self.rules.stacks_on_failure && self.deadline.is_none() {
            acts.push(Action::Stacks {
                what: format!("rank {} failed; the others", self.ranks[i]),
                multi_node: self.rules.multi_node,
            });
        }
        if self.rules.on_failure == OnFailure::StopAll && self.deadline.is_none() {
            acts.push(Action::Stop(Stop::term(self.grace())));
        }
        acts
    }

    /// Another node failed or was lost (or SLURM's warning reached it): stop as for a local failure.
    fn remote_stop(&mut self, now: Instant, g: FailureReport) -> Vec<Action> {
        let mut acts = Vec::new();
        match g.signal.filter(|_| g.requeue) {
            // SLURM delivered its warning on another node, and delivers it here too (srun --signal,
            // scancel --signal: every process of the step): forwarding it as well would give the
            // ranks here a second one. Wait for SLURM's.
            Some(sig) if self.deadline.is_none() && g.step_wide => {
                acts.push(Action::Note(format!(
                    "{}: waiting up to {} s for SLURM to deliver it here",
                    g.headline(),
                    WARNING_WAIT.as_secs()
                )));
                self.awaiting_warning = Some((sig, now + WARNING_WAIT));
            }
            // SLURM's warning reached another node: the ranks here get it too.
            Some(sig) if self.deadline.is_none() => {
                acts.push(Action::Note(format!(
                    "{}: forwarding {} to {}, then the job is requeued",
                    g.headline(),
                    signal_name(sig),
                    ranks(self.live())
                )));
                self.requeue = true;
                acts.push(Action::Stop(Stop {
                    signal: sig,
                    grace: self.grace(),
                }));
            }
            _ => {
                acts.push(Action::ShowRemote {
                    lead: "stopping this node's ranks".into(),
                    failure: g.clone(),
                });
                if self.deadline.is_none() {
                    // --stacks_on_failure: each node dumps its own survivors.
                    if self.rules.stacks_on_failure && !g.hang {
                        acts.push(Action::Stacks {
                            what: format!("{}; node {}'s ranks", g.headline(), self.rules.node),
                            multi_node: true,
                        });
                    }
                    acts.push(Action::Stop(Stop::term(self.grace())));
                }
            }
        }
        self.remote = Some(g);
        acts
    }

    /// SLURM did not deliver the warning another node got within [`WARNING_WAIT`]: this node
    /// forwards it itself.
    fn warning_due(&mut self, now: Instant) -> Vec<Action> {
        let Some((sig, until)) = self.awaiting_warning else {
            return Vec::new();
        };
        if self.requeue || self.deadline.is_some() {
            self.awaiting_warning = None;
            return Vec::new();
        }
        if now < until {
            return Vec::new();
        }
        self.awaiting_warning = None;
        self.requeue = true;
        vec![
            Action::Note(format!(
                "SLURM did not deliver {} here within {} s: forwarding it to {}, then the job is requeued",
                signal_name(sig),
                WARNING_WAIT.as_secs(),
                ranks(self.live())
            )),
            Action::Stop(Stop {
                signal: sig,
                grace: self.grace(),
            }),
        ]
    }

    /// Every rank gone ends the attempt; SIGKILL follows the grace period; a rank SIGKILL does not
    /// end within [`KILL_WAIT`] is left behind.
    fn clock(&mut self, now: Instant) -> Vec<Action> {
        if self.ends.iter().all(Option::is_some) {
            return vec![Action::End(self.outcome())];
        }
        // SIGKILL is not waited for forever: a rank the kernel holds (D state, a frozen cgroup) is
        // named and left, and the attempt ends without it.
        if self
            .killed_at
            .is_some_and(|k| now.saturating_duration_since(k) >= KILL_WAIT)
        {
            return vec![Action::LeaveBehind, Action::End(self.outcome())];
        }
        if self.deadline.is_some_and(|d| !self.killed && now >= d) {
            return vec![Action::Stop(Stop::kill())];
        }
        Vec::new()
    }

    /// How the attempt ended: a requeue, another node's failure or a hang unless a signal stopped the
    /// launcher; else the signal, the first failure, or success.
    fn outcome(&mut self) -> Outcome<usize> {
        match self.remote.take() {
            _ if self.requeue && self.stop_signal.is_none() => Outcome::Requeue,
            Some(g) if self.stop_signal.is_none() && self.first_failure.is_none() => {
                Outcome::Remote(g)
            }
            _ if self.hung && self.stop_signal.is_none() => Outcome::Hung,
            // A signal that stopped the spawning before any rank started never reached the monitor.
            _ => match (self.stop_signal.or(self.spawn_stopped), self.first_failure) {
                (Some(s), _) => Outcome::Signalled(s),
                (None, Some(i)) => Outcome::Failed(i),
                (None, None) => Outcome::Success,
            },
        }
    }

    fn signal(&mut self, s: i32, delivered: bool) -> Vec<Action> {
        let handled = &self.rules.handled;
        match s {
            libc::SIGCHLD => Vec::new(),
            // Ctrl-Z: the ranks stop, then the launcher, as the terminal's group would; the shell's
            // `fg`/`bg` sends the launcher SIGCONT, which comes back here. SIGSTOP, not SIGTSTP: each
            // rank leads a group with no parent in its session, an orphaned group, where the kernel
            // discards SIGTSTP (POSIX job control).
            libc::SIGTSTP => vec![Action::Signal(libc::SIGSTOP), Action::Suspend],
            _ if Some(s) == self.rules.requeue_signal => self.requeue_signal(s, delivered),
            _ if handled.stops(s) && self.stop_signal.is_some() && !self.killed => vec![
                Action::Note(format!("killing {}", ranks(self.live()))),
                Action::Stop(Stop::kill()),
            ],
            _ if handled.stops(s)
                && self.deadline.is_some()
                && (self.first_failure.is_some() || self.remote.is_some() || self.requeue) =>
            {
                // Already stopping for a failure (here or on another node): the run ends with that
                // failure's status, not as if this signal had stopped it (srun --kill-on-bad-exit
                // SIGTERMs the other nodes' launchers when the failing one exits). A user's own stop
                // signal then means "now", as a second Ctrl-C does.
                if delivered || self.killed {
                    vec![Action::Note(format!(
                        "{} while stopping for a failure",
                        signal_name(s)
                    ))]
                } else {
                    vec![
                        Action::Note(format!("killing {}", ranks(self.live()))),
                        Action::Stop(Stop::kill()),
                    ]
                }
            }
            _ if handled.stops(s) && self.stop_signal.is_none() => self.stopped_by(s, delivered),
            _ if delivered => Vec::new(),
            // fg/bg's SIGCONT resumes the ranks Ctrl-Z stopped.
            _ if s == libc::SIGCONT || handled.forwards(s) => vec![Action::Signal(s)],
            _ => vec![Action::Note(format!(
                "{} not forwarded (--signals_to_handle does not name it)",
                signal_name(s)
            ))],
        }
    }

    /// A stopping signal, the first: the ranks get it (or SIGTERM), the grace period, then SIGKILL.
    fn stopped_by(&mut self, s: i32, delivered: bool) -> Vec<Action> {
        self.stop_signal = Some(s);
        let mut acts = Vec::new();
        // Multi-node: a stopped launcher stops the whole world.
        if self.rules.linked && self.remote.is_none() && self.first_failure.is_none() {
            acts.push(Action::Tell(FailureReport {
                what: format!("was stopped: its launcher received {}", signal_name(s)),
                signal: Some(s),
                ..FailureReport::lost(self.rules.node, &self.rules.host, "")
            }));
        }
        let how = if s == libc::SIGINT {
            "(Ctrl-C again to kill)".to_string()
        } else {
            format!("on {} (send it again to kill)", signal_name(s))
        };
        acts.push(Action::Note(format!(
            "stopping {} {how}",
            ranks(self.live())
        )));
        acts.push(Action::Stop(Stop {
            // Sent already by the step daemon: only the grace period and SIGKILL remain.
            signal: if delivered {
                0
            } else {
                self.rules.handled.stop_signal(s)
            },
            grace: self.grace(),
        }));
        acts
    }

    /// `--slurm_requeue`'s warning: forwarded (unless the step daemon delivered it to every process
    /// already), the grace period to save and exit, then SIGKILL; the other nodes are told, so the
    /// warning reaching any one node requeues the whole job. A warning while the run is already
    /// stopping, or a second one, changes nothing.
    fn requeue_signal(&mut self, s: i32, delivered: bool) -> Vec<Action> {
        if self.requeue || self.deadline.is_some() {
            if delivered {
                return Vec::new();
            }
            return vec![Action::Note(format!(
                "{} while the run is stopping: not forwarded again",
                signal_name(s)
            ))];
        }
        self.requeue = true;
        let mut acts = Vec::new();
        // Another node reported it already (and is waiting for this one): nothing to tell.
        let reported = self.awaiting_warning.take().is_some();
        if self.rules.linked && !reported {
            acts.push(Action::Tell(FailureReport {
                what: format!("received {} (SLURM's warning)", signal_name(s)),
                signal: Some(s),
                requeue: true,
                step_wide: delivered,
                ..FailureReport::lost(self.rules.node, &self.rules.host, "")
            }));
        }
        acts.push(Action::Note(format!(
            "{}: {} {} get {} to save and exit, then the job is requeued",
            signal_name(s),
            if delivered {
                "SLURM delivered it to every process;"
            } else {
                "forwarded;"
            },
            ranks(self.live()),
            match self.grace() {
                g if g.as_secs() >= crate::duration::MAX_SECONDS => {
                    "all the time they need".to_string()
                }
                g => format!("{} s", g.as_secs_f64()),
            },
        )));
        acts.push(Action::Stop(Stop {
            signal: if delivered { 0 } else { s },
            grace: self.grace(),
        }));
        acts
    }
}

fn ranks(n: usize) -> String {
    match n {
        1 => "1 rank".into(),
        n => format!("{n} ranks"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(30);
    const INTERVAL: Duration = Duration::from_millis(100);

    fn rules() -> Rules {
        Rules {
            grace: GRACE,
            monitor_interval: INTERVAL,
            on_failure: OnFailure::StopAll,
            stacks_on_failure: false,
            linked: false,
            multi_node: false,
            requeue_signal: None,
            handled: SignalSet::default(),
            node: 1,
            host: "h1".into(),
        }
    }

    /// A multi-node run's node 1, with `--slurm_requeue` (SIGUSR1).
    fn linked() -> Rules {
        Rules {
            linked: true,
            multi_node: true,
            requeue_signal: Some(libc::SIGUSR1),
            ..rules()
        }
    }

    fn exit(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    fn killed(sig: i32) -> ExitStatus {
        ExitStatus::from_raw(sig)
    }

    /// Ranks 0..n (global ranks 10, 11, …).
    fn attempt(rules: Rules, n: u32) -> Attempt {
        Attempt::new(rules, (10..10 + n).collect(), None)
    }

    /// Feeds `input` at `now` and carries every stop out at once, as the loop does when nothing
    /// comes between (each [`Action::Stop`] handed back as [`Input::Sent`] at `now`).
    fn step(a: &mut Attempt, now: Instant, input: Input) -> Vec<Action> {
        let acts = a.on(now, input);
        for act in &acts {
            if let Action::Stop(s) = act {
                assert!(a.on(now, Input::Sent(*s)).is_empty());
            }
        }
        acts
    }

    fn ended(index: usize, status: ExitStatus, stopped: bool) -> Action {
        Action::Ended {
            index,
            end: RankEnd { status, stopped },
        }
    }

    fn note(s: &str) -> Action {
        Action::Note(s.into())
    }

    fn sig(sig: i32) -> Input {
        Input::Signal {
            sig,
            delivered: false,
        }
    }

    fn remote_failure() -> FailureReport {
        FailureReport {
            rank: Some(3),
            local_rank: Some(1),
            code: Some(7),
            what: "exited with status 7".into(),
            ..FailureReport::lost(0, "h0", "")
        }
    }

    fn warning(step_wide: bool) -> FailureReport {
        FailureReport {
            what: "received SIGUSR1 (SLURM's warning)".into(),
            signal: Some(libc::SIGUSR1),
            requeue: true,
            step_wide,
            ..FailureReport::lost(0, "h0", "")
        }
    }

    #[test]
    fn the_first_failure_stops_the_others_then_sigkill_follows_the_grace() {
        let t0 = Instant::now();
        let mut a = attempt(rules(), 3);
        assert!(step(&mut a, t0, Input::Exited(vec![])).is_empty());
        // Ranks 1 and 2 fail in the same pass: the lower index is the first failure.
        assert_eq!(
            step(&mut a, t0, Input::Exited(vec![(1, exit(3)), (2, exit(4))])),
            vec![
                ended(1, exit(3), false),
                ended(2, exit(4), false),
                Action::Stop(Stop::term(GRACE)),
            ]
        );
        assert!(a.stopping());
        let almost = t0 + GRACE - Duration::from_millis(1);
        assert!(step(&mut a, almost, Input::Clock).is_empty());
        assert_eq!(
            step(&mut a, t0 + GRACE, Input::Clock),
            vec![Action::Stop(Stop::kill())]
        );
        // SIGKILL is sent once.
        assert!(step(&mut a, t0 + GRACE, Input::Clock).is_empty());
        // A rank that ends by a signal once the stop began was stopped; the attempt ends with the
        // first failure.
        assert_eq!(
            step(&mut a, t0 + GRACE, Input::Exited(vec![(0, killed(9))])),
            vec![ended(0, killed(9), true)]
        );
        assert_eq!(
            step(&mut a, t0 + GRACE, Input::Clock),
            vec![Action::End(Outcome::Failed(1))]
        );
    }

    #[test]
    fn the_grace_counts_from_when_the_stop_went_out_after_the_stacks() {
        let t0 = Instant::now();
        let mut a = attempt(
            Rules {
                stacks_on_failure: true,
                ..linked()
            },
            2,
        );
        let acts = a.on(t0, Input::Exited(vec![(0, killed(libc::SIGSEGV))]));
        assert_eq!(
            acts,
            vec![
                ended(0, killed(libc::SIGSEGV), false),
                Action::TellRankFailure(0),
                Action::Stacks {
                    what: "rank 10 failed; the others".into(),
                    multi_node: true,
                },
                Action::Stop(Stop::term(GRACE)),
            ]
        );
        // The stacks took 3 s: the stop went out then.
        let sent = t0 + Duration::from_secs(3);
        assert!(!a.stopping());
        a.on(sent, Input::Sent(Stop::term(GRACE)));
        assert!(a.stopping());
        assert!(a.on(t0 + GRACE, Input::Clock).is_empty());
        assert_eq!(
            a.on(sent + GRACE, Input::Clock),
            vec![Action::Stop(Stop::kill())]
        );
    }

    #[test]
    fn on_failure_continue_leaves_the_others_until_the_caller_stops_them() {
        let t0 = Instant::now();
        let mut a = attempt(
            Rules {
                on_failure: OnFailure::Continue,
                ..rules()
            },
            2,
        );
        assert_eq!(
            step(&mut a, t0, Input::Exited(vec![(1, exit(3))])),
            vec![ended(1, exit(3), false)]
        );
        assert!(!a.stopping());
        assert!(step(&mut a, t0, Input::Clock).is_empty());
        assert_eq!(
            step(&mut a, t0, Input::StopAsked),
            vec![Action::Stop(Stop::term(GRACE))]
        );
        // The caller's flag stays set: it is not a second stop.
        assert!(step(&mut a, t0, Input::StopAsked).is_empty());
        step(&mut a, t0, Input::Exited(vec![(0, killed(libc::SIGTERM))]));
        assert_eq!(
            step(&mut a, t0, Input::Clock),
            vec![Action::End(Outcome::Failed(1))]
        );
    }

    #[test]
    fn a_second_stop_signal_kills_at_once() {
        let t0 = Instant::now();
        let mut a = attempt(rules(), 2);
        assert_eq!(
            step(&mut a, t0, sig(libc::SIGINT)),
            vec![
                note("stopping 2 ranks (Ctrl-C again to kill)"),
                Action::Stop(Stop {
                    signal: libc::SIGINT,
                    grace: GRACE
                }),
            ]
        );
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(
            step(&mut a, t1, sig(libc::SIGTERM)),
            vec![note("killing 2 ranks"), Action::Stop(Stop::kill())]
        );
        // Killed already: a third one is only handed on.
        assert_eq!(
            step(&mut a, t1, sig(libc::SIGINT)),
            vec![Action::Signal(libc::SIGINT)]
        );
        // A rank that had exited with an error before it was killed is not the outcome: the signal is.
        step(
            &mut a,
            t1,
            Input::Exited(vec![(0, exit(1)), (1, killed(libc::SIGKILL))]),
        );
        assert_eq!(
            step(&mut a, t1, Input::Clock),
            vec![Action::End(Outcome::Signalled(libc::SIGINT))]
        );
    }

    #[test]
    fn signals_to_handle_decides_what_is_handed_on_and_what_stops() {
        let t0 = Instant::now();
        let only_usr1 = || Rules {
            handled: SignalSet::handle_only(&[libc::SIGUSR1]),
            ..rules()
        };
        // A stop signal it does not name still stops the run, with SIGTERM to the ranks.
        let mut a = attempt(only_usr1(), 1);
        assert_eq!(
            step(&mut a, t0, sig(libc::SIGHUP)),
            vec![
                note("stopping 1 rank on SIGHUP (send it again to kill)"),
                Action::Stop(Stop::term(GRACE)),
            ]
        );
        // One it names is handed on and stops the run.
        let mut b = attempt(only_usr1(), 1);
        assert_eq!(
            step(&mut b, t0, sig(libc::SIGUSR2)),
            vec![note(
                "SIGUSR2 not forwarded (--signals_to_handle does not name it)"
            )]
        );
        assert_eq!(
            step(&mut b, t0, sig(libc::SIGUSR1)),
            vec![
                note("stopping 1 rank on SIGUSR1 (send it again to kill)"),
                Action::Stop(Stop {
                    signal: libc::SIGUSR1,
                    grace: GRACE
                }),
            ]
        );
        // By default SIGUSR1 is handed on and the run goes on.
        let mut c = attempt(rules(), 1);
        assert_eq!(
            step(&mut c, t0, sig(libc::SIGUSR1)),
            vec![Action::Signal(libc::SIGUSR1)]
        );
        assert!(!c.stopping());
    }

    #[test]
    fn a_signal_the_step_daemon_delivered_is_not_sent_again() {
        let t0 = Instant::now();
        let delivered = |sig| Input::Signal {
            sig,
            delivered: true,
        };
        let mut a = attempt(rules(), 2);
        assert!(step(&mut a, t0, delivered(libc::SIGUSR2)).is_empty());
        assert_eq!(
            step(&mut a, t0, delivered(libc::SIGTERM)),
            vec![
                note("stopping 2 ranks on SIGTERM (send it again to kill)"),
                // Only the grace period and SIGKILL remain.
                Action::Stop(Stop {
                    signal: 0,
                    grace: GRACE
                }),
            ]
        );
        assert!(a.stopping());
        assert_eq!(
            step(&mut a, t0 + GRACE, Input::Clock),
            vec![Action::Stop(Stop::kill())]
        );
    }

    #[test]
    fn a_stop_signal_while_stopping_for_a_failure_keeps_the_failures_status() {
        let t0 = Instant::now();
        let mut a = attempt(rules(), 2);
        step(&mut a, t0, Input::Exited(vec![(1, exit(5))]));
        // srun --kill-on-bad-exit's SIGTERM, from the step daemon: the failure goes on.
        assert_eq!(
            step(
                &mut a,
                t0,
                Input::Signal {
                    sig: libc::SIGTERM,
                    delivered: true
                }
            ),
            vec![note("SIGTERM while stopping for a failure")]
        );
        // The user's own: now.
        assert_eq!(
            step(&mut a, t0, sig(libc::SIGINT)),
            vec![note("killing 1 rank"), Action::Stop(Stop::kill())]
        );
        step(&mut a, t0, Input::Exited(vec![(0, killed(libc::SIGKILL))]));
        assert_eq!(
            step(&mut a, t0, Input::Clock),
            vec![Action::End(Outcome::Failed(1))]
        );
    }

    #[test]
    fn a_stop_signal_on_many_nodes_stops_the_world() {
        let t0 = Instant::now();
        let mut a = attempt(linked(), 2);
        let acts = step(&mut a, t0, sig(libc::SIGTERM));
        assert_eq!(
            acts[0],
            Action::Tell(FailureReport {
                what: "was stopped: its launcher received SIGTERM".into(),
                signal: Some(libc::SIGTERM),
                ..FailureReport::lost(1, "h1", "")
            })
        );
        assert_eq!(acts.len(), 3);
        // Stopping for its own signal, the node no longer takes node 0's stop.
        assert!(!a.listening());
    }

    #[test]
    fn node_0s_stop_stops_this_nodes_ranks_and_ends_the_attempt_remote() {
        let t0 = Instant::now();
        let mut a = attempt(
            Rules {
                stacks_on_failure: true,
                ..linked()
            },
            2,
        );
        assert!(a.listening());
        assert!(step(&mut a, t0, Input::ControlPlane(None)).is_empty());
        let g = remote_failure();
        assert_eq!(
            step(&mut a, t0, Input::ControlPlane(Some(g.clone()))),
            vec![
                Action::ShowRemote {
                    lead: "stopping this node's ranks".into(),
                    failure: g.clone(),
                },
                Action::Stacks {
                    what:
                        "rank 3 (local rank 1) on node 0 (h0) exited with status 7; node 1's ranks"
                            .into(),
                    multi_node: true,
                },
                Action::Stop(Stop::term(GRACE)),
            ]
        );
        assert!(!a.listening());
        // The ranks stopped for it are no failure of this node's, and are not told.
        assert_eq!(
            step(
                &mut a,
                t0,
                Input::Exited(vec![(0, killed(libc::SIGTERM)), (1, exit(1))])
            ),
            vec![
                ended(0, killed(libc::SIGTERM), true),
                ended(1, exit(1), false),
            ]
        );
        assert_eq!(
            step(&mut a, t0, Input::Clock),
            vec![Action::End(Outcome::Remote(g))]
        );
    }

    #[test]
    fn a_hang_stops_the_run_and_ends_it_hung() {
        let t0 = Instant::now();
        let mut a = attempt(rules(), 2);
        assert!(!a.stopping());
        assert_eq!(
            step(&mut a, t0, Input::Hang),
            vec![Action::Stop(Stop::term(GRACE))]
        );
        assert!(a.stopping());
        step(
            &mut a,
            t0,
            Input::Exited(vec![(0, killed(libc::SIGTERM)), (1, killed(libc::SIGTERM))]),
        );
        assert_eq!(
            step(&mut a, t0, Input::Clock),
            vec![Action::End(Outcome::Hung)]
        );
    }

    #[test]
    fn the_requeue_warning_is_forwarded_once_told_and_ends_requeued() {
        let t0 = Instant::now();
        let mut a = attempt(linked(), 2);
        assert_eq!(
            step(&mut a, t0, sig(libc::SIGUSR1)),
            vec![
                Action::Tell(FailureReport {
                    what: "received SIGUSR1 (SLURM's warning)".into(),
                    signal: Some(libc::SIGUSR1),
                    requeue: true,
                    ..FailureReport::lost(1, "h1", "")
                }),
                note("SIGUSR1: forwarded; 2 ranks get 30 s to save and exit, then the job is requeued"),
                Action::Stop(Stop {
                    signal: libc::SIGUSR1,
                    grace: GRACE
                }),
            ]
        );
        assert_eq!(
            step(&mut a, t0, sig(libc::SIGUSR1)),
            vec![note(
                "SIGUSR1 while the run is stopping: not forwarded again"
            )]
        );
        // Ranks that save and exit with an error are no failure.
        step(&mut a, t0, Input::Exited(vec![(0, exit(0)), (1, exit(1))]));
        assert_eq!(
            step(&mut a, t0, Input::Clock),
            vec![Action::End(Outcome::Requeue)]
        );
    }

    #[test]
    fn a_warning_slurm_delivers_on_every_node_is_awaited_then_forwarded() {
        let t0 = Instant::now();
        let mut a = attempt(linked(), 2);
        assert_eq!(
            step(&mut a, t0, Input::ControlPlane(Some(warning(true)))),
            vec![note("node 0 (h0) received SIGUSR1 (SLURM's warning): waiting up to 5 s for SLURM to deliver it here")]
        );
        assert!(!a.stopping());
        let almost = t0 + WARNING_WAIT - Duration::from_millis(1);
        assert!(step(&mut a, almost, Input::ControlPlane(None)).is_empty());
        assert_eq!(
            step(&mut a, t0 + WARNING_WAIT, Input::ControlPlane(None)),
            vec![
                note("SLURM did not deliver SIGUSR1 here within 5 s: forwarding it to 2 ranks, then the job is requeued"),
                Action::Stop(Stop {
                    signal: libc::SIGUSR1,
                    grace: GRACE
                }),
            ]
        );
        // SLURM's own delivery, once it came, is neither told to node 0 (it knows) nor sent again.
        let mut b = attempt(linked(), 2);
        step(&mut b, t0, Input::ControlPlane(Some(warning(true))));
        let acts = step(
            &mut b,
            t0 + Duration::from_secs(1),
            Input::Signal {
                sig: libc::SIGUSR1,
                delivered: true,
            },
        );
        assert_eq!(
            acts,
            vec![
                note("SIGUSR1: SLURM delivered it to every process; 2 ranks get 30 s to save and exit, then the job is requeued"),
                Action::Stop(Stop {
                    signal: 0,
                    grace: GRACE
                }),
            ]
        );
        assert!(step(&mut b, t0 + WARNING_WAIT, Input::ControlPlane(None)).is_empty());
        // Delivered on another node only: forwarded here at once.
        let mut c = attempt(linked(), 1);
        assert_eq!(
            step(&mut c, t0, Input::ControlPlane(Some(warning(false)))),
            vec![
                note("node 0 (h0) received SIGUSR1 (SLURM's warning): forwarding SIGUSR1 to 1 rank, then the job is requeued"),
                Action::Stop(Stop {
                    signal: libc::SIGUSR1,
                    grace: GRACE
                }),
            ]
        );
        step(&mut c, t0, Input::Exited(vec![(0, exit(0))]));
        assert_eq!(
            step(&mut c, t0, Input::Clock),
            vec![Action::End(Outcome::Requeue)]
        );
    }

    #[test]
    fn a_rank_sigkill_does_not_end_is_left_behind_after_the_kill_wait() {
        let t0 = Instant::now();
        let mut a = attempt(rules(), 2);
        step(&mut a, t0, Input::Exited(vec![(0, exit(2))]));
        step(&mut a, t0 + GRACE, Input::Clock);
        let killed_at = t0 + GRACE;
        assert_eq!(
            a.wait(killed_at + Duration::from_secs(2)),
            INTERVAL,
            "polled while SIGKILL is awaited"
        );
        let almost = killed_at + KILL_WAIT - Duration::from_millis(1);
        assert!(step(&mut a, almost, Input::Clock).is_empty());
        assert_eq!(
            step(&mut a, killed_at + KILL_WAIT, Input::Clock),
            vec![Action::LeaveBehind, Action::End(Outcome::Failed(0))]
        );
    }

    #[test]
    fn job_control_stops_the_ranks_before_the_launcher_and_resumes_them() {
        let t0 = Instant::now();
        let mut a = attempt(rules(), 1);
        assert_eq!(
            step(&mut a, t0, sig(libc::SIGTSTP)),
            vec![Action::Signal(libc::SIGSTOP), Action::Suspend]
        );
        assert_eq!(
            step(&mut a, t0, sig(libc::SIGCONT)),
            vec![Action::Signal(libc::SIGCONT)]
        );
        assert!(step(&mut a, t0, sig(libc::SIGCHLD)).is_empty());
        assert!(!a.stopping());
    }

    #[test]
    fn the_wait_ends_at_the_next_deadline_and_at_most_a_heartbeat_on_many_nodes() {
        let t0 = Instant::now();
        let slow = Rules {
            monitor_interval: Duration::from_secs(5),
            grace: Duration::from_secs(2),
            ..rules()
        };
        let mut a = attempt(slow.clone(), 1);
        assert_eq!(a.wait(t0), Duration::from_secs(5));
        step(&mut a, t0, sig(libc::SIGTERM));
        assert_eq!(
            a.wait(t0 + Duration::from_millis(500)),
            Duration::from_millis(1500)
        );
        let b = attempt(
            Rules {
                linked: true,
                ..slow
            },
            1,
        );
        assert_eq!(b.wait(t0), control::HEARTBEAT);
    }

    #[test]
    fn an_attempt_stopped_while_its_ranks_started_ends_signalled() {
        let t0 = Instant::now();
        let mut a = Attempt::new(rules(), Vec::new(), Some(libc::SIGINT));
        assert_eq!(
            step(&mut a, t0, Input::Clock),
            vec![Action::End(Outcome::Signalled(libc::SIGINT))]
        );
        let mut b = attempt(rules(), 1);
        step(&mut b, t0, Input::Exited(vec![(0, exit(0))]));
        assert_eq!(
            step(&mut b, t0, Input::Clock),
            vec![Action::End(Outcome::Success)]
        );
    }
}
