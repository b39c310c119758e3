//! The coordinator: runs this machine's ranks (accel-test itself in worker mode) through accel-launch's
//! own supervisor — the same plan, contract, process groups, PDEATHSIG and per-rank guards, so nothing
//! outlives accel-test even when it is SIGKILLed — and turns the ranks' JSON events into the report as
//! they come.
//!
//! Unlike a training run, a failed world is not stopped at the first failure: the survivors are what
//! name the dead or wrong rank, so they get one timeout (plus a margin) to report before they are
//! stopped; a world in which nothing happens for longer than that is stopped too.

use std::ffi::OsString;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::os::unix::process::ExitStatusExt;

use super::probe::{self, ProbeData};
use super::report::{Event, RankEnd, Report};
use super::world::{Device, World};
use super::PreflightError;
use crate::contract::{EnvMap, Topology};
use crate::env_vars::{self, Environment};
use crate::error::Result;
use crate::exit_status::ExitStatus;
use crate::launch::{self, Capture, Captured, Console, OnFailure, Plan};

/// What every worker is asked to do, as worker-mode arguments.
#[derive(Debug, Clone)]
pub struct WorkerArgs {
    pub args: Vec<String>,
    /// --probe was asked for, with this threshold (a fraction): the report judges its measurements.
    pub probe_threshold: Option<f64>,
}

/// How long the survivors of a failure get to report it, beyond the check timeout itself: a survivor
/// can be blocked in a collective for the whole timeout, then waits up to 5 s for the living to say
/// they failed too before it names the silent ranks.
const REPORT_MARGIN: Duration = Duration::from_secs(10);
/// How long a world may show no sign of life, beyond the check timeout, before it is stopped.
const IDLE_MARGIN: Duration = Duration::from_secs(15);
/// SIGTERM to SIGKILL: a worker has nothing to save.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// The ranks' oom_score_adj: the first the kernel's OOM killer picks.
const RANK_OOM_SCORE_ADJ: i32 = 1000;

/// This machine's ranks as a launch plan: `exe --worker ARGS…` for each local rank, with exactly the
/// contract accel-launch exports (torchrun's worker variables), CUDA_VISIBLE_DEVICES from gpu_ids,
/// and torchrun's OMP_NUM_THREADS=1 for several ranks on one machine.
pub fn rank_plan(
    world: &World,
    port: u16,
    exe: &Path,
    worker: &WorkerArgs,
    env: &Environment,
) -> Plan {
    let topology = Topology {
        local_world_size: world.nproc_per_node as u32,
        node_rank: world.machine_rank as u32,
        num_nodes: world.num_machines as u32,
        master_addr: world.master_addr.clone(),
        master_port: port,
        run_id: "none".into(),
        role: "default".into(),
        max_restarts: 0,
        assembled: None,
    };
    let mut argv: Vec<OsString> = vec![exe.into(), "--worker".into()];
    argv.extend(worker.args.iter().map(OsString::from));
    let mut common = EnvMap::new();
    if env.get(env_vars::OMP_NUM_THREADS).is_none() && world.nproc_per_node > 1 {
        common.insert(env_vars::OMP_NUM_THREADS.into(), "1".into());
    }
    // libtorch's INFO chatter stays quiet unless asked for.
    if env.get(env_vars::TORCH_CPP_LOG_LEVEL).is_none() {
        common.insert(env_vars::TORCH_CPP_LOG_LEVEL.into(), "ERROR".into());
    }
    if let Some(ids) = &world.gpu_ids {
        common.insert(env_vars::CUDA_VISIBLE_DEVICES.into(), ids.clone());
    }
    // The port is the one the report names; a lost race shows up as a failed rendezvous check.
    Plan::build(Some(topology), &argv, &common, false, env)
}

/// Runs the world's local ranks to the end and prints the report.
pub fn supervise(
    world: &World,
    worker: &WorkerArgs,
    env: &Environment,
    timeout: Duration,
    json: bool,
    out: &mut (dyn FnMut(&str) -> Result<()> + Send),
) -> Result<ExitStatus> {
    let start = Instant::now();
    let port = match world.master_port {
        Some(p) => p,
        None => crate::launch::ports::free_port()?,
    };
    let backend = if world.device == Device::Cuda {
        "nccl"
    } else {
        "gloo"
    };
    let what = format!(
        "{} rank(s) on machine {} of {}, {}, {}:{}",
        world.nproc_per_node,
        world.machine_rank,
        world.num_machines,
        backend,
        world.master_addr,
        port
    );
    if !json {
        out(&format!(
            "accel-test: world of {} rank(s) on {} machine(s); this machine {} runs ranks {}..{} on {} ({}); master {}:{}; timeout {} s\n",
            world.world_size(),
            world.num_machines,
            world.machine_rank,
            world.global_rank(0),
            world.global_rank(world.nproc_per_node) - 1,
            world.device.name(),
            backend,
            world.master_addr,
            port,
            timeout.as_secs_f64()
        ))?;
    }
    if let Some(why) = &world.unmet_devices {
        return unmet_devices(world, why, port, backend, &what, start, json, out);
    }
    let exe = std::env::current_exe().map_err(PreflightError::Exe)?;
    let plan = rank_plan(world, port, &exe, worker, env);
    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let opts = launch::Options {
        tool: "accel-test",
        grace: STOP_GRACE,
        console: Console {
            prefix: Some("[rank {rank}] ".into()),
            local_ranks: None,
        },
        quiet: true,
        on_failure: OnFailure::Continue,
        capture: Some(Capture {
            sink: tx,
            stop: Arc::clone(&stop),
        }),
        // Short of memory, the kernel kills a rank (which the report names) rather than the
        // coordinator, which would leave no verdict, or another program of the machine.
        oom_score_adj: Some(RANK_OOM_SCORE_ADJ),
        ..launch::Options::default()
    };
    let mut report = Report::new(
        plan.ranks.iter().map(|r| r.rank as usize).collect(),
        world.world_size(),
    );
    let oom_before = oom_kills();
    let finished = AtomicBool::new(false);
    let follower = Follower {
        report: &mut report,
        stop: &stop,
        timeout,
        json,
        out: &mut *out,
    };
    let (outcome, followed) = std::thread::scope(|s| {
        let finished = &finished;
        let follower = s.spawn(move || follower.run(rx, finished));
        // The supervisor stays on this (the main) thread: PDEATHSIG follows the spawning thread.
        let outcome = launch::run(&plan, &opts, env);
        finished.store(true, Ordering::Relaxed);
        let followed = follower.join().unwrap_or(Ok(()));
        (outcome, followed)
    });
    let outcome = outcome?;
    if let Some(n) = oom_kills()
        .zip(oom_before)
        .map(|(a, b)| a.saturating_sub(b))
    {
        if n > 0 {
            report.notes.push(format!(
                "the kernel's OOM killer killed {n} process(es) on this machine during the check (it picks accel-test's ranks first): this machine ran out of memory"
            ));
        }
    }
    let rest = report.flush(true);
    let seconds = start.elapsed().as_secs_f64();
    let probe = judge_probe(&report, worker.probe_threshold);
    if json {
        out(&json_report(
            &report,
            world,
            port,
            backend,
            seconds,
            Some(&probe),
        ))?;
    } else {
        out(&rest)?;
        if let ProbeOutcome::Judged { data, verdict } = &probe {
            out(&super::probe::render(data, verdict))?;
        }
        out(&probe_verdict(&report, &probe, seconds, &what))?;
    }
    followed?;
    match outcome.signal {
        Some(s) if [libc::SIGINT, libc::SIGTERM, libc::SIGHUP].contains(&s) => {
            return Ok(ExitStatus::Signal(s))
        }
        Some(_) => return Ok(outcome.status),
        None => {}
    }
    Ok(match probe {
        _ if !report.passed() => ExitStatus::Failure,
        ProbeOutcome::Missing => ExitStatus::Failure,
        ProbeOutcome::Judged { verdict, .. } if !verdict.stragglers.is_empty() => {
            ExitStatus::Straggler
        }
        _ => ExitStatus::Success,
    })
}

/// How many processes the kernel's OOM killer has killed since boot (/proc/vmstat, Linux 4.13+).
fn oom_kills() -> Option<u64> {
    std::fs::read_to_string("/proc/vmstat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|v| v.trim().parse().ok())
}

/// What --probe came to on this node.
enum ProbeOutcome<'a> {
    NotAsked,
    /// Every check passed, yet no measurements came: the probe did not run to its end.
    Missing,
    Judged {
        data: &'a ProbeData,
        verdict: probe::Verdict,
    },
}

fn judge_probe(report: &Report, threshold: Option<f64>) -> ProbeOutcome<'_> {
    match (threshold, &report.probe) {
        (None, _) => ProbeOutcome::NotAsked,
        (Some(t), Some(data)) => ProbeOutcome::Judged {
            data,
            verdict: probe::analyze(data, t),
        },
        (Some(_), None) if report.passed() => ProbeOutcome::Missing,
        (Some(_), None) => ProbeOutcome::NotAsked,
    }
}

/// The last line, with the probe's word when the checks passed.
fn probe_verdict(report: &Report, probe: &ProbeOutcome, seconds: f64, what: &str) -> String {
    let plain = report.verdict(seconds, what);
    if !report.passed() {
        return plain;
    }
    match probe {
        ProbeOutcome::Missing => {
            format!("verdict: FAIL  the probe's measurements never came ({what}, {seconds:.1} s)\n")
        }
        ProbeOutcome::Judged { verdict, .. } if !verdict.stragglers.is_empty() => {
            let n = verdict.stragglers.len();
            let rest = plain.trim_start_matches("verdict: PASS  ");
            format!(
                "verdict: STRAGGLER  {} ({n} named by --probe); {rest}",
                verdict.stragglers[0].text
            )
        }
        _ => plain,
    }
}

/// Reads the ranks' events while the supervisor runs them; prints the report as it completes and asks
/// the supervisor to stop the world when it has failed and the survivors had their time, or when
/// nothing happens any more.
struct Follower<'a> {
    report: &'a mut Report,
    stop: &'a AtomicBool,
    timeout: Duration,
    json: bool,
    out: &'a mut (dyn FnMut(&str) -> Result<()> + Send),
}

impl Follower<'_> {
    fn run(self, rx: Receiver<Captured>, finished: &AtomicBool) -> Result<()> {
        let idle_limit = self.timeout + IDLE_MARGIN;
        let mut last_activity = Instant::now();
        // Once something failed, the survivors get one timeout to say so.
        let mut grace: Option<Instant> = None;
        let mut gave_up = false;
        let mut eof: Vec<u32> = Vec::new();
        // Ends wait for the rank's last lines (its Eof), so that its report is complete first.
        let mut pending: Vec<(u32, RankEnd)> = Vec::new();
        let mut failed_print: Option<crate::error::Error> = None;
        loop {
            let mut text = String::new();
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(Captured::Line { rank, line }) => {
                    last_activity = Instant::now();
                    match serde_json::from_str::<Event>(&line) {
                        Ok(ev) => {
                            if matches!(
                                ev,
                                Event::Check { ok: false, .. } | Event::Done { ok: false, .. }
                            ) && grace.is_none()
                            {
                                grace = Some(Instant::now() + self.timeout + REPORT_MARGIN);
                            }
                            text.push_str(&self.report.add(ev));
                        }
                        // Anything else a rank prints (a library's chatter) goes to stderr, marked.
                        Err(_) => eprintln!("[rank {rank}] {line}"),
                    }
                }
                Ok(Captured::Eof { rank }) => {
                    eof.push(rank);
                    if let Some(i) = pending.iter().position(|(r, _)| *r == rank) {
                        let (r, end) = pending.remove(i);
                        text.push_str(&self.report.ended(r as usize, end));
                    }
                }
                Ok(Captured::Ended { rank, end }) => {
                    last_activity = Instant::now();
                    let end = match (end.status.code(), end.status.signal()) {
                        (Some(c), _) => RankEnd::Exited(c),
                        (None, Some(_)) if end.stopped && gave_up => RankEnd::Killed,
                        (None, Some(s)) => RankEnd::Signaled(s),
                        _ => RankEnd::Exited(-1),
                    };
                    if end != RankEnd::Exited(0) && grace.is_none() {
                        grace = Some(Instant::now() + self.timeout + REPORT_MARGIN);
                    }
                    if eof.contains(&rank) {
                        text.push_str(&self.report.ended(rank as usize, end));
                    } else {
                        pending.push((rank, end));
                    }
                }
                Err(RecvTimeoutError::Timeout) if finished.load(Ordering::Relaxed) => break,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if !text.is_empty() && !self.json && failed_print.is_none() {
                if let Err(e) = (self.out)(&text) {
                    // Nowhere to report to: stop the world rather than run it blind.
                    failed_print = Some(e);
                    self.stop.store(true, Ordering::Relaxed);
                }
            }
            let now = Instant::now();
            if !gave_up {
                let why = if grace.is_some_and(|g| now >= g) {
                    Some(format!(
                        "ranks still running {:.0} s after the first failure were killed",
                        (self.timeout + REPORT_MARGIN).as_secs_f64()
                    ))
                } else if now.duration_since(last_activity) >= idle_limit {
                    Some(format!(
                        "no rank made progress for {:.0} s",
                        idle_limit.as_secs_f64()
                    ))
                } else {
                    None
                };
                if let Some(why) = why {
                    self.report.notes.push(why);
                    gave_up = true;
                    self.stop.store(true, Ordering::Relaxed);
                }
            }
        }
        // Ranks whose stdout a stray grandchild still holds: their ends are known all the same.
        let mut text = String::new();
        for (r, end) in pending {
            text.push_str(&self.report.ended(r as usize, end));
        }
        if !text.is_empty() && !self.json && failed_print.is_none() {
            (self.out)(&text)?;
        }
        match failed_print {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The pre-flight of a world that cannot run here (the config asks for GPUs this machine does not
/// have): every local rank fails `preflight.devices`, and no rank is started.
#[allow(clippy::too_many_arguments)]
fn unmet_devices(
    world: &World,
    why: &str,
    port: u16,
    backend: &str,
    what: &str,
    start: Instant,
    json: bool,
    out: &mut (dyn FnMut(&str) -> Result<()> + Send),
) -> Result<ExitStatus> {
    let ranks: Vec<usize> = (0..world.nproc_per_node)
        .map(|l| world.global_rank(l))
        .collect();
    let mut report = Report::new(ranks.clone(), world.world_size());
    let mut text = String::new();
    for &rank in &ranks {
        text += &report.add(Event::Check {
            rank,
            name: "preflight.devices".into(),
            ok: false,
            detail: why.to_string(),
            ms: 0.0,
        });
        text += &report.add(Event::Done { rank, ok: false });
    }
    text += &report.flush(true);
    let seconds = start.elapsed().as_secs_f64();
    if json {
        out(&json_report(&report, world, port, backend, seconds, None))?;
    } else {
        out(&text)?;
        out(&report.verdict(seconds, what))?;
    }
    Ok(ExitStatus::Failure)
}

fn json_report(
    report: &Report,
    world: &World,
    port: u16,
    backend: &str,
    seconds: f64,
    probe: Option<&ProbeOutcome>,
) -> String {
    let checks: Vec<serde_json::Value> = report
        .checks
        .iter()
        .map(|c| {
            let missing: Vec<usize> = report
                .ranks
                .iter()
                .copied()
                .filter(|r| !c.ranks.contains_key(r))
                .collect();
            serde_json::json!({
                "name": c.name,
                "ok": c.ok() && missing.is_empty(),
                "ranks": c.ranks.iter().map(|(r, (ok, detail, ms))| serde_json::json!({
                    "rank": r, "ok": ok, "detail": detail, "ms": ms
                })).collect::<Vec<_>>(),
                "missing_ranks": missing,
            })
        })
        .collect();
    let ends: serde_json::Map<String, serde_json::Value> = report
        .ends
        .iter()
        .map(|(r, e)| (r.to_string(), serde_json::Value::from(e.to_string())))
        .collect();
    let verdict = match probe {
        _ if !report.passed() => "FAIL",
        Some(ProbeOutcome::Missing) => "FAIL",
        Some(ProbeOutcome::Judged { verdict, .. }) if !verdict.stragglers.is_empty() => "STRAGGLER",
        _ => "PASS",
    };
    let probe = match probe {
        Some(ProbeOutcome::Judged { data, verdict }) => probe::to_json(data, verdict),
        _ => serde_json::Value::Null,
    };
    let doc = serde_json::json!({
        "verdict": verdict,
        "seconds": seconds,
        "world": {
            "world_size": world.world_size(),
            "num_machines": world.num_machines,
            "machine_rank": world.machine_rank,
            "local_ranks": report.ranks,
            "device": world.device.name(),
            "backend": backend,
            "master_addr": world.master_addr,
            "master_port": port,
        },
        "checks": checks,
        "bench": report.bench,
        "probe": probe,
        "rank_ends": ends,
        "notes": report.notes,
    });
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_plan_carries_the_launcher_contract() {
        let world = World {
            num_machines: 2,
            machine_rank: 1,
            nproc_per_node: 2,
            master_addr: "n0".into(),
            master_port: Some(29500),
            device: Device::Cpu,
            gpu_ids: Some("2,3".into()),
            unmet_devices: None,
        };
        let worker = WorkerArgs {
            args: vec!["--timeout".into(), "5".into()],
            probe_threshold: None,
        };
        let plan = rank_plan(
            &world,
            29500,
            Path::new("/bin/accel-test"),
            &worker,
            &Environment::default(),
        );
        assert_eq!(plan.ranks.len(), 2);
        let r = &plan.ranks[1];
        assert_eq!(
            r.argv,
            ["/bin/accel-test", "--worker", "--timeout", "5"].map(OsString::from)
        );
        assert_eq!((r.rank, r.local_rank), (3, 1));
        for (k, v) in [
            ("RANK", "3"),
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "4"),
            ("GROUP_RANK", "1"),
            ("MASTER_ADDR", "n0"),
            ("MASTER_PORT", "29500"),
            ("OMP_NUM_THREADS", "1"),
            ("TORCH_CPP_LOG_LEVEL", "ERROR"),
            ("CUDA_VISIBLE_DEVICES", "2,3"),
        ] {
            assert_eq!(r.env.get(k).map(String::as_str), Some(v), "{k}");
        }
        // The user's own settings win.
        let env = Environment::from_pairs([("OMP_NUM_THREADS", "8")]);
        let plan = rank_plan(&world, 29500, Path::new("x"), &worker, &env);
        assert!(!plan.ranks[0].env.contains_key("OMP_NUM_THREADS"));
    }
}
