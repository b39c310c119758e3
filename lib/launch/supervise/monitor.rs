//! Watching the ranks of one attempt until it ends: the loop around the attempt's decisions
//! ([`Attempt`]). Each pass reaps the ranks, reads node 0's stops (multi-node), the caller's stop and
//! the hang watch, looks at the clock and waits for the launcher's next signal; each is handed to the
//! attempt, and what it answers is carried out here: the ranks' groups signalled, node 0 told, notes
//! and reports printed, the survivors' stacks taken.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Instant;

use super::attempt::{Action, Attempt, Input, Outcome, Rules};
use super::failure::{self, report_remote};
use super::guard::Strays;
use super::options::{note, Captured, Options};
use super::processes::{self, signal_groups, Running};
use super::signals::Event;
use super::stacks::{self, live_ranks, HangWatch, Here};
use super::straggler::StragglerWatch;
use crate::launch::control;
use crate::launch::plan::Plan;

/// What watching an attempt found.
pub(super) struct Watched {
    pub(super) outcome: Outcome<usize>,
    /// Ranks still there [`KILL_WAIT`](super::KILL_WAIT) after SIGKILL: named and left behind.
    pub(super) unkillable: Vec<control::Unkillable>,
    /// The ranks named stragglers during the attempt.
    pub(super) stragglers: Vec<crate::launch::straggler::Finding>,
}

/// Watches the ranks of one attempt until every one has ended (or is left behind).
pub(super) struct Monitor<'a> {
    opts: &'a Options,
    ranks: &'a mut [Running],
    here: Here<'a>,
    state: Attempt,
    unkillable: Vec<control::Unkillable>,
    /// The world's ranks and nodes, for the straggler watch.
    world_size: u32,
    num_nodes: u32,
}

impl<'a> Monitor<'a> {
    /// `spawn_stopped`: a signal stopped the spawning before every rank of the plan started.
    pub(super) fn new(
        opts: &'a Options,
        ranks: &'a mut [Running],
        plan: &'a Plan,
        attempt: u32,
        spawn_stopped: Option<i32>,
    ) -> Self {
        let node = plan.topology.as_ref().map_or(0, |t| t.node_rank);
        let rules = Rules {
            grace: opts.grace,
            monitor_interval: opts.monitor_interval,
            on_failure: opts.on_failure,
            stacks_on_failure: opts.stacks_on_failure,
            linked: opts.control.is_some(),
            multi_node: plan.topology.as_ref().is_some_and(|t| t.num_nodes > 1),
            requeue_signal: opts.requeue_signal,
            handled: opts.handled.clone(),
            node,
            host: plan.host.clone(),
        };
        let state = Attempt::new(rules, ranks.iter().map(|r| r.rank).collect(), spawn_stopped);
        Monitor {
            opts,
            ranks,
            here: Here {
                node,
                host: &plan.host,
                attempt,
            },
            state,
            unkillable: Vec::new(),
            world_size: plan
                .topology
                .as_ref()
                .map_or(plan.ranks.len() as u32, |t| t.world_size()),
            num_nodes: plan.topology.as_ref().map_or(1, |t| t.num_nodes),
        }
    }

    pub(super) fn watch(
        mut self,
        rx: &Receiver<Event>,
        mut strays: Option<&mut Strays>,
    ) -> Watched {
        let opts = self.opts;
        let mut scanned: Option<Instant> = None;
        let mut hangs = HangWatch::new(opts);
        let mut stragglers = StragglerWatch::new(
            opts,
            self.world_size,
            self.num_nodes,
            self.ranks.len(),
            self.here.host,
        );
        loop {
            if let Some(link) = &opts.control {
                link.pulse();
            }
            let ended = processes::reap(self.ranks);
            self.feed(Input::Exited(ended));
            if let Some(link) = &opts.control {
                let stop = self.state.listening().then(|| link.poll_stop()).flatten();
                self.feed(Input::ControlPlane(stop));
            }
            let stop_asked = opts
                .capture
                .as_ref()
                .is_some_and(|c| c.stop.load(Ordering::Relaxed));
            if stop_asked {
                self.feed(Input::StopAsked);
            }
            // The hang watch, ticked with the live ranks: a hang is reported, then the run stopped.
            if let (Some(h), false) = (hangs.as_mut(), self.state.stopping()) {
                let live = live_ranks(self.ranks, self.here.node);
                if h.hung(opts, self.here, &live) {
                    self.feed(Input::Hang);
                }
            }
            if let (Some(s), false) = (stragglers.as_mut(), self.state.stopping()) {
                s.tick(opts, self.here, &live_ranks(self.ranks, self.here.node));
            }
            if let Some(outcome) = self.feed(Input::Clock) {
                return Watched {
                    outcome,
                    unkillable: self.unkillable,
                    stragglers: stragglers.map(|s| s.findings()).unwrap_or_default(),
                };
            }
            if let Some(s) = strays.as_deref_mut() {
                processes::record_strays(self.ranks, s, &mut scanned);
            }
            let wait = self.state.wait(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(Event::Signal { sig, delivered }) => {
                    self.feed(Input::Signal { sig, delivered });
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => std::thread::sleep(wait),
            }
        }
    }

    /// Hands the attempt one input, with the clock, and carries out what it answers; the outcome once
    /// the attempt is over.
    fn feed(&mut self, input: Input) -> Option<Outcome<usize>> {
        let opts = self.opts;
        let mut end = None;
        for act in self.state.on(Instant::now(), input) {
            match act {
                Action::Ended { index, end } => {
                    let r = &mut self.ranks[index];
                    r.stopped = end.stopped;
                    if let Some(c) = &opts.capture {
                        let _ = c.sink.send(Captured::Ended { rank: r.rank, end });
                    }
                }
                Action::TellRankFailure(i) => {
                    if let Some(link) = &opts.control {
                        let f = failure::told(&self.ranks[i], self.here.host, self.here.node);
                        link.local_failure(self.here.attempt, f);
                    }
                }
                Action::Tell(f) => {
                    if let Some(link) = &opts.control {
                        link.local_failure(self.here.attempt, f);
                    }
                }
                Action::Stacks { what, multi_node } => {
                    let head = format!("{}: {what}", opts.tool);
                    stacks::stacks_on_failure(opts, self.ranks, &head, self.here.node, multi_node);
                }
                Action::ShowRemote { lead, failure } => report_remote(opts, &lead, &failure),
                Action::Note(msg) => note(opts, &msg),
                Action::Signal(sig) => signal_groups(self.ranks, sig),
                Action::Stop(stop) => {
                    signal_groups(self.ranks, stop.signal);
                    if stop.signal != libc::SIGKILL {
                        // A rank stopped by Ctrl-Z would keep the signal pending until it runs again.
                        signal_groups(self.ranks, libc::SIGCONT);
                    }
                    self.feed(Input::Sent(stop));
                }
                Action::Suspend => {
                    let _ = signal_hook::low_level::emulate_default_handler(libc::SIGTSTP);
                }
                Action::LeaveBehind => {
                    self.unkillable = processes::left_behind(
                        self.ranks,
                        opts.tool,
                        self.here.node,
                        self.here.host,
                    );
                }
                Action::End(outcome) => end = Some(outcome),
            }
        }
        let _ = std::io::stderr().flush();
        end
    }
}
