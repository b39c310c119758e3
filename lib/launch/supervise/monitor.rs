//! Watching the ranks of one attempt until it ends: their exits, the signals the launcher gets
//! (forwarded, escalated, SLURM's requeue warning), the other nodes' stops over the control plane,
//! and hangs (this node's, or the world's as node 0 judges it). [`Monitor::watch`] returns what
//! happened; the run loop in the parent module turns it into the attempt's outcome.

use super::*;

/// What watching an attempt found.
pub(super) struct Watched {
    pub(super) first_failure: Option<usize>,
    /// The hang watch declared a hang and stopped the run.
    pub(super) hung: bool,
    /// Another node failed or was lost (multi-node), and this node's ranks were stopped for it.
    pub(super) remote: Option<FailureReport>,
    /// The launcher was told to stop by this signal.
    pub(super) stop_signal: Option<i32>,
    /// SLURM's requeue warning came, here or on another node.
    pub(super) requeue: bool,
    /// Ranks still there [`KILL_WAIT`] after SIGKILL: named and left behind.
    pub(super) unkillable: Vec<control::Unkillable>,
}

/// Watches the ranks of one attempt until every one has ended: reaps them, stops the others on a
/// failure or the caller's request, forwards signals, escalates to SIGKILL.
pub(super) struct Monitor<'a> {
    opts: &'a Options,
    ranks: &'a mut [Running],
    first_failure: Option<usize>,
    stop_signal: Option<i32>,
    /// Set once the run is being stopped: when SIGKILL follows.
    deadline: Option<Instant>,
    killed: bool,
    /// When SIGKILL was first sent: a rank still there [`KILL_WAIT`] later is left behind.
    killed_at: Option<Instant>,
    /// This node's rank in the job, for the hang and failure reports.
    node: u32,
    plan: &'a Plan,
    attempt: u32,
    /// Another node failed or was lost: this node's ranks are being stopped for it.
    remote: Option<FailureReport>,
    /// SLURM's requeue warning came (here or on another node): the ranks are saving and exiting, and
    /// how they end is not a failure.
    requeue: bool,
    /// Another node got SLURM's warning from its step daemon, which delivers it to this node's ranks
    /// too: until when this node waits for that delivery before forwarding the warning itself.
    awaiting_warning: Option<(i32, Instant)>,
}

impl<'a> Monitor<'a> {
    pub(super) fn new(
        opts: &'a Options,
        ranks: &'a mut [Running],
        plan: &'a Plan,
        attempt: u32,
    ) -> Self {
        Monitor {
            opts,
            ranks,
            first_failure: None,
            stop_signal: None,
            deadline: None,
            killed: false,
            killed_at: None,
            node: plan.topology.as_ref().map_or(0, |t| t.node_rank),
            plan,
            attempt,
            remote: None,
            requeue: false,
            awaiting_warning: None,
        }
    }

    pub(super) fn watch(
        mut self,
        rx: &Receiver<Event>,
        mut strays: Option<&mut Strays>,
    ) -> Watched {
        let opts = self.opts;
        let mut scanned: Option<Instant> = None;
        let mut watch = opts
            .hang_timeout
            .map(|t| hang::Watch::new(t, opts.py_spy.clone(), Instant::now()));
        // Many nodes: this node reports its ranks' stillness; node 0 judges the world.
        let mut world = match (&opts.control, opts.hang_timeout) {
            (Some(_), Some(t)) => Some(WorldHang {
                reporter: verdict::Reporter::new(t),
                own: None,
            }),
            _ => None,
        };
        let mut hung = false;
        let mut unkillable = Vec::new();
        loop {
            if let Some(link) = &opts.control {
                link.pulse();
            }
            self.reap();
            if self.first_failure.is_none()
                && self.stop_signal.is_none()
                && self.remote.is_none()
                && !self.requeue
            {
                if let Some(i) = self
                    .ranks
                    .iter()
                    .position(|r| r.status.is_some_and(|s| !s.success()))
                {
                    self.first_failure = Some(i);
                    // Multi-node: tell the other nodes first, with the rank's stderr tail, so that
                    // with --stacks_on_failure they take their ranks' stacks while these are taken.
                    if let Some(link) = &opts.control {
                        link.local_failure(self.attempt, failure_report(self.plan, &self.ranks[i]));
                    }
                    if opts.stacks_on_failure && self.deadline.is_none() {
                        let head = format!(
                            "{}: rank {} failed; the others",
                            opts.tool, self.ranks[i].rank
                        );
                        stacks_on_failure(opts, self.ranks, &head, self.node, self.multi_node());
                    }
                    if opts.on_failure == OnFailure::StopAll && self.deadline.is_none() {
                        self.stop(Stop::term(opts.grace));
                    }
                }
            }
            // Another node failed or was lost: stop as for a local failure.
            if let (Some(link), None, None, None, false) = (
                &opts.control,
                &self.remote,
                self.first_failure,
                self.stop_signal,
                self.requeue,
            ) {
                if let Some(g) = link.poll_stop() {
                    match g.signal.filter(|_| g.requeue) {
                        // SLURM delivered its warning on another node, and delivers it here too
                        // (srun --signal, scancel --signal: every process of the step): forwarding
                        // it as well would give the ranks here a second one. Wait for SLURM's.
                        Some(sig) if self.deadline.is_none() && g.step_wide => {
                            note(
                                opts,
                                &format!(
                                    "{}: waiting up to {} s for SLURM to deliver it here",
                                    g.headline(),
                                    WARNING_WAIT.as_secs()
                                ),
                            );
                            self.awaiting_warning = Some((sig, Instant::now() + WARNING_WAIT));
                        }
                        // SLURM's warning reached another node: the ranks here get it too.
                        Some(sig) if self.deadline.is_none() => {
                            note(
                                opts,
                                &format!(
                                    "{}: forwarding {} to {}, then the job is requeued",
                                    g.headline(),
                                    signal_name(sig),
                                    ranks(self.live())
                                ),
                            );
                            self.requeue = true;
                            self.stop(Stop {
                                signal: sig,
                                grace: opts.grace,
                            });
                        }
                        _ => {
                            report_remote(opts, "stopping this node's ranks", &g);
                            if self.deadline.is_none() {
                                // --stacks_on_failure: each node dumps its own survivors.
                                if opts.stacks_on_failure && !g.hang {
                                    let head = format!(
                                        "{}: {}; node {}'s ranks",
                                        opts.tool,
                                        g.headline(),
                                        self.node
                                    );
                                    stacks_on_failure(opts, self.ranks, &head, self.node, true);
                                }
                                self.stop(Stop::term(opts.grace));
                            }
                        }
                    }
                    self.remote = Some(g);
                }
            }
            if let Some((sig, until)) = self.awaiting_warning {
                if self.requeue || self.deadline.is_some() {
                    self.awaiting_warning = None;
                } else if Instant::now() >= until {
                    self.awaiting_warning = None;
                    note(
                        opts,
                        &format!(
                            "SLURM did not deliver {} here within {} s: forwarding it to {}, then the job is requeued",
                            signal_name(sig),
                            WARNING_WAIT.as_secs(),
                            ranks(self.live())
                        ),
                    );
                    self.requeue = true;
                    self.stop(Stop {
                        signal: sig,
                        grace: opts.grace,
                    });
                }
            }
            let stop_asked = opts
                .capture
                .as_ref()
                .is_some_and(|c| c.stop.load(Ordering::Relaxed));
            if stop_asked && self.deadline.is_none() {
                self.stop(Stop::term(opts.grace));
            }
            // The hang watch, ticked with the live ranks: a hang is reported, then the run stopped.
            if let (Some(w), None) = (watch.as_mut(), self.deadline) {
                let live = live_ranks(self.ranks, self.node);
                match (&opts.control, world.as_mut()) {
                    (Some(link), Some(wh)) => {
                        if self.world_hang(w, link, wh, &live) {
                            hung = true;
                            self.stop(Stop::term(opts.grace));
                        }
                    }
                    _ => {
                        if let Some(hang::Decision::Hang { quiet, stacks }) =
                            w.tick(Instant::now(), &live)
                        {
                            hang_report(opts, quiet, &stacks);
                            hung = true;
                            self.stop(Stop::term(opts.grace));
                        }
                    }
                }
            }
            if self.ranks.iter().all(|r| r.status.is_some()) {
                break;
            }
            // SIGKILL is not waited for forever: a rank the kernel holds (D state, a frozen
            // cgroup) is named and left, and the attempt ends without it.
            if self.killed_at.is_some_and(|k| k.elapsed() >= KILL_WAIT) {
                unkillable = self.unkillable();
                break;
            }
            if self
                .deadline
                .is_some_and(|d| !self.killed && Instant::now() >= d)
            {
                self.stop(Stop::kill());
            }
            if let Some(s) = strays.as_deref_mut() {
                if scanned.is_none_or(|t| t.elapsed() >= STRAY_SCAN) {
                    let groups: Vec<i32> = self.ranks.iter().map(|r| r.pgid.as_raw()).collect();
                    s.record(&guard::descendants(), &groups);
                    scanned = Some(Instant::now());
                }
            }
            let mut wait = match (self.deadline, self.killed_at) {
                (Some(d), _) if !self.killed => d
                    .saturating_duration_since(Instant::now())
                    .min(opts.monitor_interval),
                (_, Some(k)) => (k + KILL_WAIT)
                    .saturating_duration_since(Instant::now())
                    .min(opts.monitor_interval),
                _ => opts.monitor_interval,
            };
            if opts.control.is_some() {
                // Another node's stop is read between waits: at most a heartbeat late.
                wait = wait.min(control::HEARTBEAT);
            }
            match rx.recv_timeout(wait) {
                Ok(Event::Signal { sig, delivered }) => self.on_signal(sig, delivered),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => std::thread::sleep(wait),
            }
        }
        Watched {
            first_failure: self.first_failure,
            hung,
            remote: self.remote.take(),
            stop_signal: self.stop_signal,
            requeue: self.requeue,
            unkillable,
        }
    }

    /// The ranks still there after SIGKILL, each named on this node's stderr as /proc sees it.
    fn unkillable(&self) -> Vec<control::Unkillable> {
        let mut out = Vec::new();
        for r in self.ranks.iter().filter(|r| r.status.is_none()) {
            let u = unkillable::describe(self.node, &self.plan.host, r.rank, r.pgid.as_raw());
            let _ = writeln!(
                std::io::stderr(),
                "{}: {}; left behind {} s after SIGKILL",
                self.opts.tool,
                u.describe(),
                KILL_WAIT.as_secs()
            );
            out.push(u);
        }
        out
    }

    fn multi_node(&self) -> bool {
        self.plan.topology.as_ref().is_some_and(|t| t.num_nodes > 1)
    }

    /// This node's part in the world's hang judgement ([`verdict`]): reports its ranks' stillness to
    /// node 0, answers its request for stacks, and prints its verdict. `true`: the world is hung and
    /// this node's ranks are to be stopped.
    fn world_hang(
        &self,
        w: &mut hang::Watch,
        link: &control::Link,
        wh: &mut WorldHang,
        live: &[hang::Live],
    ) -> bool {
        let opts = self.opts;
        let now = Instant::now();
        if let Some(quiet) = w.sample(now, live) {
            if let Some(report) = wh.reporter.quiet(quiet) {
                if let Some(q) = report {
                    note(
                        opts,
                        &format!(
                            "no rank of node {} made progress for {:.0}s; node 0 judges whether every node is still",
                            self.node,
                            q.as_secs_f64()
                        ),
                    );
                }
                link.report_quiet(self.attempt, report);
            }
        }
        let dir = opts
            .log_dir
            .as_ref()
            .map(|d| d.join("hang").join(format!("node_{}", self.node)));
        // Node 0's autopsy: every rank's stacks at once, in the background (the watch's sampler),
        // so that this loop goes on reaping and forwarding signals; answered once they are in.
        if let Some(stacks) = w.autopsy_ready() {
            log::debug!(
                "node {}: the stacks of {} ranks taken for node 0's autopsy",
                self.node,
                stacks.len()
            );
            link.send_stacks(self.attempt, verdict::to_wire(&stacks));
            wh.reporter.answered(Instant::now());
            if let Some(d) = &opts.log_dir {
                autopsy::flight_recorder_dump(&d.join("hang"), &stacks);
            }
            wh.own = Some(stacks);
        }
        match link.poll_hang(self.attempt) {
            Some(control::Msg::Autopsy { .. }) => {
                log::debug!("node {}: node 0 asks for the stacks", self.node);
                w.request_autopsy(live, verdict::DUMP_TIMEOUT);
                false
            }
            Some(control::Msg::Verdict {
                line,
                stacks,
                quiet_ms,
                ..
            }) => {
                let mut report = format!(
                    "{}: hang: {line}
{stacks}",
                    opts.tool
                );
                // This node's ranks' Flight Recorder dumps, asked for with their stacks.
                if let (Some(d), Some(own)) = (&opts.log_dir, &wh.own) {
                    let ranks: Vec<u32> = own.iter().map(|s| s.rank).collect();
                    for l in flight_recorder::report(&d.join("hang"), &ranks) {
                        report.push_str(&format!("{}: flight recorder: {l}\n", opts.tool));
                    }
                }
                let mut out = report.clone();
                out.push_str(&format!(
                    "{}: no rank of any node made progress for {:.0}s (--hang_timeout); stopping the run
",
                    opts.tool,
                    quiet_ms as f64 / 1000.0
                ));
                out.push_str(&write_hang_dumps(
                    opts,
                    dir.as_deref(),
                    &report,
                    wh.own.as_deref().unwrap_or(&[]),
                ));
                let _ = std::io::stderr().write_all(out.as_bytes());
                true
            }
            _ if wh.reporter.verdict_overdue(now) => {
                // Node 0 asked for the stacks but gave no verdict: this node says what it knows.
                let own = wh.own.take().unwrap_or_default();
                let head = format!("{}: hang", opts.tool);
                let report = autopsy::report(&head, &own);
                let mut out = report.clone();
                out.push_str(&format!(
                    "{}: node 0 gave no verdict within {} s of the stacks: the above are node {}'s ranks only; stopping them
",
                    opts.tool,
                    verdict::NO_VERDICT_AFTER.as_secs(),
                    self.node
                ));
                out.push_str(&write_hang_dumps(opts, dir.as_deref(), &report, &own));
                let _ = std::io::stderr().write_all(out.as_bytes());
                link.local_failure(
                    self.attempt,
                    FailureReport {
                        what: format!(
                            "declared its ranks hung (node 0 gave no verdict): {}",
                            autopsy::verdict(&autopsy::group(&own))
                        ),
                        hang: true,
                        ..FailureReport::lost(self.node, &self.plan.host, "")
                    },
                );
                true
            }
            _ => false,
        }
    }

    /// Collects the ranks that ended.
    fn reap(&mut self) {
        let stopping = self.deadline.is_some();
        for r in self.ranks.iter_mut().filter(|r| r.status.is_none()) {
            if let Ok(Some(st)) = r.child.try_wait() {
                r.status = Some(st);
                r.stopped = stopping && st.signal().is_some();
                if let Some(c) = &self.opts.capture {
                    let end = RankEnd {
                        status: st,
                        stopped: r.stopped,
                    };
                    let _ = c.sink.send(Captured::Ended { rank: r.rank, end });
                }
            }
        }
    }

    fn live(&self) -> usize {
        self.ranks.iter().filter(|r| r.status.is_none()).count()
    }

    /// Sends the stop signal to the live ranks' groups and sets when SIGKILL follows (never later
    /// than an earlier stop's).
    fn stop(&mut self, stop: Stop) {
        signal_groups(self.ranks, stop.signal);
        if stop.signal == libc::SIGKILL {
            self.killed = true;
            self.killed_at.get_or_insert_with(Instant::now);
        } else {
            // A rank stopped by Ctrl-Z would keep the signal pending until it runs again.
            signal_groups(self.ranks, libc::SIGCONT);
        }
        let at = Instant::now() + stop.grace;
        self.deadline = Some(self.deadline.map_or(at, |d| d.min(at)));
    }

    fn on_signal(&mut self, s: i32, delivered: bool) {
        match s {
            libc::SIGCHLD => {}
            libc::SIGTSTP => {
                // Ctrl-Z: the ranks stop, then the launcher, as the terminal's group would; the
                // shell's `fg`/`bg` sends the launcher SIGCONT, which comes back here. SIGSTOP, not
                // SIGTSTP: each rank leads a group with no parent in its session, an orphaned group,
                // where the kernel discards SIGTSTP (POSIX job control).
                signal_groups(self.ranks, libc::SIGSTOP);
                let _ = signal_hook::low_level::emulate_default_handler(libc::SIGTSTP);
            }
            _ if Some(s) == self.opts.requeue_signal => self.on_requeue_signal(s, delivered),
            _ if self.opts.handled.stops(s) && self.stop_signal.is_some() && !self.killed => {
                note(self.opts, &format!("killing {}", ranks(self.live())));
                self.stop(Stop::kill());
            }
            _ if self.opts.handled.stops(s)
                && self.deadline.is_some()
                && (self.first_failure.is_some() || self.remote.is_some() || self.requeue) =>
            {
                // Already stopping for a failure (here or on another node): the run ends with that
                // failure's status, not as if this signal had stopped it (srun --kill-on-bad-exit
                // SIGTERMs the other nodes' launchers when the failing one exits). A user's own stop
                // signal then means "now", as a second Ctrl-C does.
                if delivered || self.killed {
                    note(
                        self.opts,
                        &format!("{} while stopping for a failure", signal_name(s)),
                    );
                } else {
                    note(self.opts, &format!("killing {}", ranks(self.live())));
                    self.stop(Stop::kill());
                }
            }
            _ if self.opts.handled.stops(s) && self.stop_signal.is_none() => {
                self.stop_signal = Some(s);
                // Multi-node: a stopped launcher stops the whole world.
                if let (Some(link), None, None) =
                    (&self.opts.control, &self.remote, self.first_failure)
                {
                    link.local_failure(
                        self.attempt,
                        FailureReport {
                            what: format!("was stopped: its launcher received {}", signal_name(s)),
                            signal: Some(s),
                            ..FailureReport::lost(self.node, &self.plan.host, "")
                        },
                    );
                }
                let how = if s == libc::SIGINT {
                    "(Ctrl-C again to kill)".to_string()
                } else {
                    format!("on {} (send it again to kill)", signal_name(s))
                };
                note(self.opts, &format!("stopping {} {how}", ranks(self.live())));
                self.stop(Stop {
                    // Sent already by the step daemon: only the grace period and SIGKILL remain.
                    signal: if delivered {
                        0
                    } else {
                        self.opts.handled.stop_signal(s)
                    },
                    grace: self.opts.grace,
                });
            }
            _ if delivered => {}
            // fg/bg's SIGCONT resumes the ranks Ctrl-Z stopped.
            _ if s == libc::SIGCONT || self.opts.handled.forwards(s) => {
                signal_groups(self.ranks, s)
            }
            _ => note(
                self.opts,
                &format!(
                    "{} not forwarded (--signals_to_handle does not name it)",
                    signal_name(s)
                ),
            ),
        }
    }
}

impl Monitor<'_> {
    /// `--slurm_requeue`'s warning: forwarded (unless the step daemon delivered it to every process
    /// already), the grace period to save and exit, then SIGKILL; the other nodes are told, so the
    /// warning reaching any one node requeues the whole job. A warning while the run is already
    /// stopping, or a second one, changes nothing.
    fn on_requeue_signal(&mut self, s: i32, delivered: bool) {
        if self.requeue || self.deadline.is_some() {
            if !delivered {
                note(
                    self.opts,
                    &format!(
                        "{} while the run is stopping: not forwarded again",
                        signal_name(s)
                    ),
                );
            }
            return;
        }
        self.requeue = true;
        // Another node reported it already (and is waiting for this one): nothing to tell.
        let reported = self.awaiting_warning.take().is_some();
        if let (Some(link), false) = (&self.opts.control, reported) {
            link.local_failure(
                self.attempt,
                FailureReport {
                    what: format!("received {} (SLURM's warning)", signal_name(s)),
                    signal: Some(s),
                    requeue: true,
                    step_wide: delivered,
                    ..FailureReport::lost(self.node, &self.plan.host, "")
                },
            );
        }
        note(
            self.opts,
            &format!(
                "{}: {} {} get {} to save and exit, then the job is requeued",
                signal_name(s),
                if delivered {
                    "SLURM delivered it to every process;"
                } else {
                    "forwarded;"
                },
                ranks(self.live()),
                match self.opts.grace {
                    g if g.as_secs() >= crate::duration::MAX_SECONDS => {
                        "all the time they need".to_string()
                    }
                    g => format!("{} s", g.as_secs_f64()),
                },
            ),
        );
        self.stop(Stop {
            signal: if delivered { 0 } else { s },
            grace: self.opts.grace,
        });
    }
}

/// How long a node waits for SLURM's own delivery of a warning that SLURM delivered on another node
/// (slurmctld tells every node's daemon at once; they deliver within moments of each other).
const WARNING_WAIT: Duration = Duration::from_secs(5);

fn ranks(n: usize) -> String {
    match n {
        1 => "1 rank".into(),
        n => format!("{n} ranks"),
    }
}

/// Another node's failure, as this node prints it: the headline first, then the failing rank's stderr.
fn report_remote(opts: &Options, lead: &str, g: &FailureReport) {
    let mut out = format!("{}: {lead}: {}\n", opts.tool, g.headline());
    if let Some(m) = &g.error_message {
        out.push_str(&format!("  error: {m}\n"));
    }
    // A node's local error comes with its launcher's hints.
    for h in &g.hints {
        out.push_str(&format!("  hint: {h}\n"));
    }
    let lines: Vec<&str> = g.stderr_tail.lines().collect();
    let start = lines.len().saturating_sub(opts.tail_lines);
    if let (Some(r), true) = (g.rank, start < lines.len()) {
        out.push_str(&format!(
            "  last lines of rank {r}'s stderr (node {}):\n",
            g.node
        ));
        for l in &lines[start..] {
            out.push_str(&format!("  | {l}\n"));
        }
    }
    let _ = std::io::stderr().write_all(out.as_bytes());
}

/// A failed rank as the other nodes are told of it. Its stderr reader gets a moment to drain the
/// pipe, so the tail holds the rank's last words.
fn failure_report(plan: &Plan, r: &Running) -> FailureReport {
    let until = Instant::now() + Duration::from_millis(300);
    while !r.readers.iter().all(|h| h.is_finished()) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = r
        .status
        .unwrap_or_else(|| std::process::ExitStatus::from_raw(1 << 8));
    let f = Failure {
        rank: r.rank,
        local_rank: r.local_rank,
        host: plan.host.clone(),
        status,
        stderr_tail: r.tail.lock().map(|t| t.text()).unwrap_or_default(),
        error_message: r.error_file.as_ref().and_then(|p| read_error_file(p)),
    };
    f.to_report(plan.topology.as_ref().map_or(0, |t| t.node_rank))
}

/// The ranks still running, for the hang watch and the autopsy.
fn live_ranks(running: &[Running], node: u32) -> Vec<hang::Live> {
    running
        .iter()
        .filter(|r| r.status.is_none())
        .map(|r| hang::Live {
            rank: r.rank,
            node,
            pid: r.pgid.as_raw(),
        })
        .collect()
}

/// Prints the hang's verdict and grouped stacks, and writes the dumps under --log_dir/hang.
fn hang_report(opts: &Options, quiet: Duration, stacks: &[autopsy::RankStack]) {
    let head = format!("{}: hang", opts.tool);
    let mut report = autopsy::report(&head, stacks);
    // NCCL ranks dump their Flight Recorder when asked through their pipe; any rank's dump under
    // LOG_DIR/hang (NCCL's own on its watchdog's timeout too) is read into the report.
    if let Some(dir) = &opts.log_dir {
        let dir = dir.join("hang");
        autopsy::flight_recorder_dump(&dir, stacks);
        let ranks: Vec<u32> = stacks.iter().map(|s| s.rank).collect();
        for line in flight_recorder::report(&dir, &ranks) {
            report.push_str(&format!("{}: flight recorder: {line}\n", opts.tool));
        }
    }
    let mut out = report.clone();
    out.push_str(&format!(
        "{}: no rank made progress for {:.0}s (--hang_timeout); stopping the run\n",
        opts.tool,
        quiet.as_secs_f64()
    ));
    if let Some(dir) = &opts.log_dir {
        let dir = dir.join("hang");
        match autopsy::write_dumps(&dir, &report, stacks) {
            Ok(()) => out.push_str(&format!(
                "{}: stacks written to {}\n",
                opts.tool,
                dir.display()
            )),
            Err(e) => out.push_str(&format!(
                "{}: cannot write {}: {e}\n",
                opts.tool,
                dir.display()
            )),
        }
    }
    let _ = std::io::stderr().write_all(out.as_bytes());
}

/// `--stacks_on_failure`: the survivors' stacks, before they are stopped. On many nodes each node
/// takes its own (LOG_DIR/failure/node_N/), the ranks in parallel.
fn stacks_on_failure(opts: &Options, running: &[Running], head: &str, node: u32, multi_node: bool) {
    let live = live_ranks(running, node);
    if live.is_empty() {
        return;
    }
    let began = Instant::now();
    // Many nodes: within node 0's answer deadline; one node: the single-node autopsy's bound.
    let per_dump = if multi_node {
        verdict::DUMP_TIMEOUT
    } else {
        hang::AUTOPSY_DUMP
    };
    let stacks = autopsy::take_parallel(opts.py_spy.as_deref(), &hang::triples(&live), per_dump);
    let report = autopsy::report(head, &stacks);
    if let Some(dir) = &opts.log_dir {
        let dir = dir.join("failure");
        let dir = if multi_node {
            dir.join(format!("node_{node}"))
        } else {
            dir
        };
        let _ = autopsy::write_dumps(&dir, &report, &stacks);
    }
    let _ = std::io::stderr().write_all(report.as_bytes());
    if multi_node {
        // Every node takes its stacks at about this moment (the failure went over the control plane
        // first). Stopping these ranks at once would break the others' collectives under their
        // dumps (gloo tells a peer's closed connection at once), so the stop waits until the others
        // have had the time for theirs: a dump of a still rank takes well under a second.
        std::thread::sleep(FAILURE_DUMP_HOLD.saturating_sub(began.elapsed()));
    }
}

/// On many nodes with --stacks_on_failure: how long after its dump began a node stops its ranks.
const FAILURE_DUMP_HOLD: Duration = Duration::from_secs(2);

/// This node's part of the world's hang: the report and its ranks' full stacks under `dir`
/// (LOG_DIR/hang/node_N/). Returns the line saying where they went.
fn write_hang_dumps(
    opts: &Options,
    dir: Option<&Path>,
    report: &str,
    stacks: &[autopsy::RankStack],
) -> String {
    let Some(dir) = dir else {
        return String::new();
    };
    match autopsy::write_dumps(dir, report, stacks) {
        Ok(()) => format!("{}: stacks written to {}\n", opts.tool, dir.display()),
        Err(e) => format!("{}: cannot write {}: {e}\n", opts.tool, dir.display()),
    }
}

/// This node's state in the world's hang judgement.
struct WorldHang {
    reporter: verdict::Reporter,
    /// This node's ranks' stacks, as sent to node 0.
    own: Option<Vec<autopsy::RankStack>>,
}
