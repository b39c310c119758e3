//! Runs `accel-launch`. The command line is decided once ([`request`]); [`launch::resolve`] decides
//! what the run is (config, accelerate's merge, this node's place, topology, port); the run is then
//! printed ([`dry_run`]), handed to the launcher that owns it ([`delegate`]: torchrun for an elastic
//! rendezvous, deepspeed or mpirun for hostfile runs), or started and supervised here: a multi-node
//! launcher first [`join`]s the others, each rank gets its argv and environment ([`workers`]), the
//! supervisor runs them, and the end goes to `--report_json` ([`report`]) and, after SLURM's
//! warning, back to the queue.

mod delegate;
mod dry_run;
mod error;
mod join;
mod pet;
mod report;
mod request;
mod stacks;
mod workers;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use crate::cli::launch::LaunchCli;
use crate::env_vars::Environment;
use crate::error::{render, warn, Error, Result};
use crate::exit_status::ExitStatus;
use crate::launch::requeue::Requeue;
use crate::launch::supervise::Signals;
use crate::launch::torchrun::logs::LogsSpec;
use crate::launch::{self, Run};

use error::LaunchError;
use join::Joined;
use report::Report;
use request::{Request, Supervision};

const TOOL: &str = "accel-launch";

pub fn run(cli: LaunchCli, env: &Environment) -> Result<ExitStatus> {
    if let Some(pid) = cli.stacks {
        return stacks::print(pid, env);
    }
    let req = Request::from_cli(cli, env)?;
    let input = req.run_input();
    let run = launch::resolve(&input, env)?;
    for w in &run.warnings {
        warn(TOOL, w, env);
    }
    if let Some(asked) = &run.gpus_unmet {
        // accelerate launch starts such a config anyway, and every rank falls back to a separate
        // non-distributed CPU process; keep the parity, but say so before anything starts.
        warn(
            TOOL,
            &format!(
                "{asked}, but no GPU is visible here: its {} ranks will run on CPU, each as a separate process that does not join the others (as under accelerate launch)",
                run.args.num_processes
            ),
            env,
        );
    }
    if run.args.mixed_precision.eq_ignore_ascii_case("fp8") {
        workers::fp8_available(env)?;
    }
    let argv = workers::argv(&req, &run.args, env)?;
    if let Some(handoff) = delegate::handoff(&req, &run, &argv, env)? {
        return delegate::exec(&handoff, env, req.dry_run);
    }
    let sup = req.supervision(env)?;
    let run_id = run
        .topology
        .as_ref()
        .map_or_else(|| "none".to_string(), |t| t.run_id.clone());
    let torchrun_logs = req.torchrun_logs(&run_id, env)?;
    if let Some(f) = &req.output.local_ranks {
        let n = run.topology.as_ref().map_or(1, |t| t.local_world_size);
        if let Some(bad) = f.ranks.iter().find(|r| **r >= n) {
            return Err(LaunchError::LocalRankBeyond {
                given: *bad,
                local: n,
            }
            .into());
        }
    }
    if req.dry_run {
        // The straggler watch's dump directory is made by the run itself: a dry run shows none.
        let plan = workers::plan(&req, &sup, &run, run.topology.clone(), &argv, None, env)?;
        return dry_run::print(&req, &run, &plan, sup.join_timeout);
    }
    supervised(&req, &sup, &run, &argv, torchrun_logs, env)
}

/// Starts this node's ranks and supervises them: a multi-node launcher joins the others first.
fn supervised(
    req: &Request,
    sup: &Supervision,
    run: &Run,
    argv: &[OsString],
    torchrun_logs: Option<LogsSpec>,
    env: &Environment,
) -> Result<ExitStatus> {
    let hang_dir = req.output.log_dir.as_ref().map(|d| d.join("hang"));
    let hang_dir = hang_dir.filter(|_| sup.hang_timeout.is_some());
    if let Some(d) = &hang_dir {
        let _ = std::fs::create_dir_all(d);
    }
    // The straggler watch's Flight Recorder pipes and dumps (NCCL ranks): the hang watch's
    // directory where it has one (the ranks get one set of paths), else one of this run's own,
    // removed when the run ends.
    let mut own_fr_dir = None;
    let fr_dir = match (&sup.straggler, hang_dir) {
        (None, _) => None,
        (Some(_), Some(d)) => Some(d),
        (Some(_), None) => {
            match tempfile::Builder::new().prefix("accel-fr-").tempdir() {
                Ok(t) => own_fr_dir = Some(t),
                Err(e) => {
                    log::debug!("straggler: no directory for the Flight Recorder's dumps: {e}")
                }
            }
            own_fr_dir.as_ref().map(|t| t.path().to_path_buf())
        }
    };
    let py_spy = (sup.hang_timeout.is_some() || sup.straggler.is_some() || req.stacks_on_failure)
        .then(|| find_py_spy(req, argv, env))
        .flatten();
    // Before anything starts: a report that cannot be written would only be known after the run,
    // and a requeue that would fail at the end of the time limit loses the job.
    let mut report = req.report_json.as_deref().map(Report::open).transpose()?;
    let node = run.topology.as_ref().map_or(0, |t| t.node_rank);
    let requeue = req
        .requeue_signal
        .map(|sig| Requeue::prepare(env, sig, node == 0))
        .transpose()?;
    // Multi-node: signals are acted on from the join on (a launcher still joining, or waiting for
    // a replacement, leaves the run at once), through the same channel the run then reads.
    let signals = match &run.control {
        Some(_) => Some(Arc::new(Signals::install(
            &sup.signals,
            req.requeue_signal,
            env,
        )?)),
        None => None,
    };
    // Multi-node: the world (each node's rank offset) is assembled at the join.
    let mut topology = run.topology.clone();
    let link = match (&run.control, &mut topology) {
        (Some(cp), Some(t)) => {
            let cx = join::Context {
                req,
                sup,
                signals: signals.as_ref(),
                requeue: requeue.as_ref(),
                env,
            };
            // Uneven nodes: a --num_processes given is the world's total, checked at the join.
            let world_size = req
                .torchrun
                .nproc_per_node
                .filter(|_| run.args.num_processes_given)
                .map(|_| run.args.num_processes);
            match join::join(&cx, cp, t, world_size, &mut report)? {
                Joined::Link(link) => Some(link),
                Joined::Ended(status) => return Ok(status),
            }
        }
        _ => None,
    };
    let plan = workers::plan(req, sup, run, topology, argv, fr_dir.as_deref(), env)?;
    let opts = workers::options(req, sup, torchrun_logs, py_spy, fr_dir, link, signals);
    let outcome = launch::run(&plan, &opts, env)?;
    drop(own_fr_dir);
    // The requeue first: a report that fails to be written must not lose the job.
    let mut status = outcome.status;
    if let Some(r) = requeue.filter(|r| r.requeuer && outcome.status == ExitStatus::Requeued) {
        // Every node's ranks are gone (node 0 hears it over the control plane): ask once. slurmctld
        // then ends the job's steps, this launcher with them, and queues the job again.
        match r.request() {
            Ok(()) if !req.quiet => eprintln!("{TOOL}: job {} requeued (scontrol requeue)", r.job),
            Ok(()) => {}
            Err(e) => status = render(TOOL, &Error::from(e), env),
        }
    }
    if let Some(report) = report {
        let roster = opts.control.as_ref().and_then(|l| l.roster());
        if let Err(e) = report.write(&plan, &outcome, roster) {
            // The run's own status stands; only a run that succeeded turns into an output failure.
            let code = render(TOOL, &e, env);
            if status == ExitStatus::Success {
                status = code;
            }
        }
    }
    Ok(status)
}

/// py-spy, for the hang watch's and the failure report's stacks: on PATH or beside the ranks'
/// interpreter; without it, a warning says what the reports will lack.
fn find_py_spy(req: &Request, argv: &[OsString], env: &Environment) -> Option<PathBuf> {
    let interpreter = argv
        .first()
        .map(PathBuf::from)
        .filter(|_| !req.program.no_python);
    let found = launch::hang::autopsy::find_py_spy(env, interpreter.as_deref());
    if found.is_none() {
        warn(
            TOOL,
            "py-spy not found (on PATH or next to the Python interpreter): hang and failure reports will name each rank's process state but not its Python stack, and stragglers are not looked for; `pip install py-spy` to get them",
            env,
        );
    }
    found
}
