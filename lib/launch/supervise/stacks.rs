//! The ranks' stacks during an attempt: the hang watch (this node's verdict, or its part in node 0's
//! judgement of the world: stillness reported, stacks sent when asked, the verdict printed) and
//! `--stacks_on_failure`'s survivors, taken before they are stopped. Each report goes to stderr and,
//! with `--log_dir`, under `LOG_DIR/hang/` or `LOG_DIR/failure/`.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use super::options::{note, Options};
use super::processes::Running;
use crate::launch::control::{self, FailureReport};
use crate::launch::hang;
use crate::launch::hang::autopsy;
use crate::launch::hang::flight_recorder;
use crate::launch::hang::verdict;

/// Where the attempt runs, for the reports: this node's rank in the job, its host, the attempt.
#[derive(Debug, Clone, Copy)]
pub(super) struct Here<'a> {
    pub node: u32,
    pub host: &'a str,
    pub attempt: u32,
}

/// The hang watch of one attempt (`--hang_timeout`).
pub(super) struct HangWatch {
    watch: hang::Watch,
    /// Many nodes: this node reports its ranks' stillness; node 0 judges the world.
    world: Option<WorldHang>,
}

/// This node's state in the world's hang judgement.
struct WorldHang {
    reporter: verdict::Reporter,
    /// This node's ranks' stacks, as sent to node 0.
    own: Option<Vec<autopsy::RankStack>>,
}

impl HangWatch {
    /// The watch, when the run asks for one; its clock starts now.
    pub(super) fn new(opts: &Options) -> Option<HangWatch> {
        let timeout = opts.hang_timeout?;
        Some(HangWatch {
            watch: hang::Watch::new(timeout, opts.py_spy.clone(), Instant::now()),
            world: opts.control.as_ref().map(|_| WorldHang {
                reporter: verdict::Reporter::new(timeout),
                own: None,
            }),
        })
    }

    /// Ticks the watch with the live ranks. `true`: a hang is declared (and reported), and this
    /// node's ranks are to be stopped.
    pub(super) fn hung(&mut self, opts: &Options, here: Here, live: &[hang::Live]) -> bool {
        match (&opts.control, self.world.as_mut()) {
            (Some(link), Some(wh)) => world_hang(opts, here, &mut self.watch, link, wh, live),
            _ => match self.watch.tick(Instant::now(), live) {
                Some(hang::Decision::Hang { quiet, stacks }) => {
                    hang_report(opts, quiet, &stacks);
                    true
                }
                _ => false,
            },
        }
    }
}

/// The ranks still running, for the hang watch and the autopsy.
pub(super) fn live_ranks(running: &[Running], node: u32) -> Vec<hang::Live> {
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

/// This node's part in the world's hang judgement ([`verdict`]): reports its ranks' stillness to
/// node 0, answers its request for stacks, and prints its verdict. `true`: the world is hung and
/// this node's ranks are to be stopped.
fn world_hang(
    opts: &Options,
    here: Here,
    w: &mut hang::Watch,
    link: &control::Link,
    wh: &mut WorldHang,
    live: &[hang::Live],
) -> bool {
    let now = Instant::now();
    if let Some(quiet) = w.sample(now, live) {
        if let Some(report) = wh.reporter.quiet(quiet) {
            if let Some(q) = report {
                note(
                    opts,
                    &format!(
                        "no rank of node {} made progress for {:.0}s; node 0 judges whether every node is still",
                        here.node,
                        q.as_secs_f64()
                    ),
                );
            }
            link.report_quiet(here.attempt, report);
        }
    }
    let dir = opts
        .log_dir
        .as_ref()
        .map(|d| d.join("hang").join(format!("node_{}", here.node)));
    // Node 0's autopsy: every rank's stacks at once, in the background (the watch's sampler),
    // so that this loop goes on reaping and forwarding signals; answered once they are in.
    if let Some(stacks) = w.autopsy_ready() {
        log::debug!(
            "node {}: the stacks of {} ranks taken for node 0's autopsy",
            here.node,
            stacks.len()
        );
        link.send_stacks(here.attempt, verdict::to_wire(&stacks));
        wh.reporter.answered(Instant::now());
        if let Some(d) = &opts.log_dir {
            autopsy::flight_recorder_dump(&d.join("hang"), &stacks);
        }
        wh.own = Some(stacks);
    }
    match link.poll_hang(here.attempt) {
        Some(control::Msg::Autopsy { .. }) => {
            log::debug!("node {}: node 0 asks for the stacks", here.node);
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
                here.node
            ));
            out.push_str(&write_hang_dumps(opts, dir.as_deref(), &report, &own));
            let _ = std::io::stderr().write_all(out.as_bytes());
            link.local_failure(
                here.attempt,
                FailureReport {
                    what: format!(
                        "declared its ranks hung (node 0 gave no verdict): {}",
                        autopsy::verdict(&autopsy::group(&own))
                    ),
                    hang: true,
                    ..FailureReport::lost(here.node, here.host, "")
                },
            );
            true
        }
        _ => false,
    }
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
pub(super) fn stacks_on_failure(
    opts: &Options,
    running: &[Running],
    head: &str,
    node: u32,
    multi_node: bool,
) {
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
