//! Runs `accel-launch`: [`launch::resolve`] decides what the run is (config, accelerate's merge, this
//! node's place, topology, port); this module turns it into each rank's argv and environment, then
//! either prints it (`--dry-run`), hands the job to the engine that owns it (torchrun for elastic
//! rendezvous, deepspeed/mpirun for hostfile runs) or starts and supervises the ranks.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::cli::launch::LaunchCli;
use crate::contract::Assembled;
use crate::contract::{EnvMap, LaunchArgs, LaunchPath, Paradigm};
use crate::env_vars::{self, Environment};
use crate::error::{warn, Error, Result};
use crate::exit_status::ExitStatus;
use crate::launch::{self, control, Engine, Plan, Run, RunInput, Scope};
use crate::tools::torchrun;

const TOOL: &str = "accel-launch";

fn usage(msg: impl Into<String>, hint: impl Into<String>) -> Error {
    Error::msg_hint(ExitStatus::Usage, msg, hint)
}

pub fn run(cli: LaunchCli, env: &Environment) -> Result<ExitStatus> {
    if let Some(pid) = cli.stacks {
        return stacks_of(pid, env);
    }
    let Some(script) = cli.command.first().cloned() else {
        return Err(usage(
            "no training script given",
            "usage: accel-launch [OPTIONS] SCRIPT [ARGS]...",
        ));
    };
    if script.to_string_lossy().starts_with('-') && script != "-" {
        let given = script.to_string_lossy();
        let help =
            "`accel-launch --help` lists the options; put the script before its own arguments";
        let cmd = crate::cli::launch::doc().command;
        // The option meant, where one is close; else where the options are listed.
        let hint = crate::cli::suggest_option(&given, &cmd(), crate::cli::OTHER_LAUNCHERS_OPTIONS)
            .unwrap_or_else(|| help.to_string());
        return Err(usage(format!("unknown option `{given}`"), hint));
    }
    if cli.module && cli.no_python {
        return Err(usage(
            "--module and --no_python cannot be used together",
            "pick one",
        ));
    }
    if cli.tpu || cli.tpu_cluster {
        return Err(usage(
            "TPU launches are not supported by accel-launch",
            "use `accelerate launch --tpu`",
        ));
    }
    if cli.aws_access_key_id.is_some() || cli.aws_secret_access_key.is_some() {
        return Err(usage(
            "SageMaker launches are not supported by accel-launch",
            "use `accelerate launch`",
        ));
    }

    let request = torchrun::request(&cli, env)?;
    let only = request.only;
    let run = launch::resolve(
        &RunInput {
            scope: Scope::Node,
            config_file: cli.config_file.as_deref(),
            paradigm: Paradigm {
                cpu: cli.cpu,
                multi_gpu: cli.multi_gpu,
                tpu: cli.tpu,
                use_deepspeed: cli.use_deepspeed,
                use_fsdp: cli.use_fsdp,
                use_megatron_lm: cli.use_megatron_lm,
                use_parallelism_config: cli.use_parallelism_config,
            },
            cli: cli.config_values(),
            num_cpu_threads_per_process: cli.num_cpu_threads_per_process,
            role: cli.role.clone(),
            max_restarts: cli.max_restarts,
            allow_delegation: true,
            check_port: !cli.dry_run,
            torchrun: request,
        },
        env,
    )?;
    for w in &run.warnings {
        warn(TOOL, w, env);
    }
    if let Some(asked) = run.gpus_asked().filter(|_| run.visible_gpus == 0) {
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
    let args = &run.args;
    if args.mixed_precision.eq_ignore_ascii_case("fp8") {
        fp8_available(env)?;
    }
    let argv = worker_argv(&cli, env, args, &script, only)?;
    let requeue_signal = requeue_signal(&cli, env)?;
    if requeue_signal.is_some() && run.engine != Engine::Own {
        return Err(usage(
            "--slurm_requeue works with the ranks accel-launch starts and supervises itself, not with a run handed to torchrun, deepspeed or mpirun",
            "drop --slurm_requeue (ACCEL_LAUNCH_SLURM_REQUEUE), or use the static rendezvous without a hostfile",
        ));
    }

    // Engines that own the job.
    match &run.engine {
        Engine::Own => {}
        Engine::Torchrun if only => {
            let targs = torchrun::passthrough(&cli, &args.rdzv_backend);
            let vars = torchrun::delegated_env(only, &run.common);
            return delegate(env, "torchrun", targs, &vars, cli.dry_run);
        }
        Engine::Torchrun => {
            let (targs, extra) = torchrun_args(&cli, args, &script)?;
            let mut vars = run.common.clone();
            vars.extend(extra);
            return delegate(env, "torchrun", targs, &vars, cli.dry_run);
        }
        Engine::DeepSpeed { launcher } => {
            return delegate(
                env,
                "deepspeed",
                deepspeed_args(&cli, args, launcher, &script)?,
                &run.common,
                cli.dry_run,
            )
        }
        Engine::Mpirun { hostfile } => {
            let (program, a) = mpirun_args(env, args, hostfile, &argv);
            // accelerate exports the rendezvous for the ranks mpirun starts
            // (`accelerate/utils/launch.py::prepare_simple_launcher_cmd_env`).
            let mut vars = run.common.clone();
            if args.num_processes > 1 || args.num_machines > 1 {
                vars.insert(
                    env_vars::MASTER_ADDR.into(),
                    args.main_process_ip
                        .clone()
                        .unwrap_or_else(|| "127.0.0.1".into()),
                );
                vars.insert(
                    env_vars::MASTER_PORT.into(),
                    args.main_process_port.unwrap_or(29500).to_string(),
                );
            }
            return delegate(env, program, a, &vars, cli.dry_run);
        }
    }

    let join_timeout = torchrun::join_timeout(&cli, env)?;
    let (handled, signals_env) = torchrun::signals(&cli)?;
    let run_id = run
        .topology
        .as_ref()
        .map_or_else(|| "none".to_string(), |t| t.run_id.clone());
    let torchrun_logs = torchrun::uses_torchrun_logs(&cli, only)
        .then(|| torchrun::logs_spec(&cli, &run_id, env))
        .transpose()?;
    let filter = match &cli.local_ranks_filter {
        None => None,
        Some(s) => Some(
            s.split(',')
                .filter(|x| !x.trim().is_empty())
                .map(|x| {
                    x.trim().parse::<u32>().map_err(|_| {
                        usage(
                            format!("--local_ranks_filter: `{x}` is not a rank"),
                            "e.g. --local_ranks_filter 0,1",
                        )
                    })
                })
                .collect::<Result<Vec<_>>>()?,
        ),
    };
    if let Some(f) = &filter {
        let n = run.topology.as_ref().map_or(1, |t| t.local_world_size);
        if let Some(bad) = f.iter().find(|r| **r >= n) {
            return Err(usage(
                format!(
                    "--local_ranks_filter: this node runs local ranks 0 to {}, not {bad}",
                    n.saturating_sub(1)
                ),
                "local ranks count from 0 on each node; --local_ranks_filter 0 shows the first",
            ));
        }
    }
    let hang_timeout = hang_timeout(&cli, env)?;
    let hang_env = |plan: &mut Plan| {
        if hang_timeout.is_none() {
            return;
        }
        let dump_dir = cli.log_dir.as_ref().map(|d| d.join("hang"));
        for (name, value) in launch::hang::autopsy::flight_recorder_env(dump_dir.as_deref()) {
            if env.get(name).is_none() {
                for r in &mut plan.ranks {
                    r.env
                        .entry(name.to_string())
                        .or_insert_with(|| value.clone());
                }
            }
        }
    };
    if cli.dry_run {
        let mut plan = Plan::build(run.topology.clone(), &argv, &run.common, run.port_auto, env);
        hang_env(&mut plan);
        torchrun::apply(&cli, &run, &mut plan, &signals_env, env)?;
        return dry_run(&cli, &run, &plan, requeue_signal, join_timeout);
    }
    if hang_timeout.is_some() {
        if let Some(d) = cli.log_dir.as_ref().map(|d| d.join("hang")) {
            let _ = std::fs::create_dir_all(d);
        }
    }
    let py_spy = if hang_timeout.is_some() || cli.stacks_on_failure {
        let interpreter = argv.first().map(PathBuf::from).filter(|_| !cli.no_python);
        let found = launch::hang::autopsy::find_py_spy(env, interpreter.as_deref());
        if found.is_none() {
            warn(
                TOOL,
                "py-spy not found (on PATH or next to the Python interpreter): hang and failure reports will name each rank's process state but not its Python stack; `pip install py-spy` to get them",
                env,
            );
        }
        found
    } else {
        None
    };
    let grace = torchrun::grace(&cli, env)?;

    // Before anything starts: a report that cannot be written would only be known after the run.
    let report = cli.report_json.as_deref().map(Report::open).transpose()?;
    // Before anything starts: a requeue that would fail at the end of the time limit loses the job.
    let requeue = match requeue_signal {
        Some(sig) => {
            let node = run.topology.as_ref().map_or(0, |t| t.node_rank);
            Some(launch::requeue::Requeue::prepare(env, sig, node == 0)?)
        }
        None => None,
    };

    // Multi-node: join the other nodes' launchers first; the world (each node's rank offset) is
    // assembled there.
    let mut topology = run.topology.clone();
    // Multi-node: signals are acted on from the join on (a launcher still joining, or waiting for
    // a replacement, leaves the run at once), through the same channel the run then reads.
    let signals = match &run.control {
        Some(_) => Some(Arc::new(launch::supervise::Signals::install(
            &handled,
            requeue_signal,
            env,
        )?)),
        None => None,
    };
    let link = match (&run.control, &mut topology) {
        (Some(cp), Some(t)) => {
            let secret = control::Secret::from_env(
                env.non_empty(env_vars::ACCEL_LAUNCH_SECRET),
                env.non_empty(env_vars::ACCEL_LAUNCH_SECRET_FILE),
            )?;
            // Under SLURM, MUNGE proves the run's launchers to each other with no configuration;
            // a secret, when set, takes precedence.
            let munge = match (&secret, env.non_empty(env_vars::SLURM_JOB_ID)) {
                (None, Some(_)) => {
                    match control::Munge::for_slurm(env.non_empty(env_vars::SLURM_CONF)) {
                        Ok(m) => Some(m),
                        Err(why) => {
                            if t.node_rank == 0 && !cli.quiet {
                                eprintln!("{TOOL}: note: control plane: MUNGE cannot authenticate it: {why}");
                            }
                            None
                        }
                    }
                }
                _ => None,
            };
            let noting = launch::Options {
                tool: TOOL,
                quiet: cli.quiet,
                requeue_signal,
                ..launch::Options::default()
            };
            let (node, host) = (t.node_rank, crate::host::hostname());
            let stopped = || {
                let sig = signals.as_ref()?.next()?;
                launch::supervise::stopped_between_attempts(&noting, node, &host, sig)
            };
            let joined = control::Link::join(
                &control::Settings {
                    addr: cp.addr.clone(),
                    port: cp.port,
                    secret,
                    munge,
                    quiet: cli.quiet,
                    join: control::Join {
                        protocol: control::PROTOCOL,
                        run_id: control::run_id(env, cp),
                        node: t.node_rank,
                        nodes: t.num_nodes,
                        local_ranks: t.local_world_size,
                        host: crate::host::hostname(),
                        max_restarts: cli.max_restarts,
                        hang_timeout_ms: hang_timeout.map(|d| d.as_millis() as u64),
                        grace_ms: match grace {
                            crate::duration::Wait::Never => None,
                            g => Some(g.as_duration().as_millis() as u64),
                        },
                        // Uneven nodes: a --num_processes given is the world's total, checked at the join.
                        world_size: cli
                            .torchrun
                            .nproc_per_node
                            .filter(|_| run.args.num_processes_given)
                            .map(|_| run.args.num_processes),
                    },
                    join_timeout,
                    heartbeat: control::HEARTBEAT,
                },
                stopped,
            );
            let (link, place) = match joined {
                Ok(j) => j,
                Err(e) => {
                    let failure = e.failure().cloned();
                    let requeued = e.requeue();
                    let error = Error::from(e);
                    let message = error.to_string();
                    let mut status = crate::error::render(TOOL, &error, env);
                    // SLURM's warning while joining: the job is requeued (node 0 asks), as once
                    // ranks run.
                    if let Some(r) = requeue.filter(|r| requeued && r.requeuer) {
                        match r.request() {
                            Ok(()) if !cli.quiet => {
                                eprintln!("{TOOL}: job {} requeued (scontrol requeue)", r.job)
                            }
                            Ok(()) => {}
                            Err(e) => status = crate::error::render(TOOL, &Error::from(e), env),
                        }
                    }
                    if let Some(report) = report {
                        let ended = Unstarted {
                            node: t.node_rank,
                            num_nodes: t.num_nodes,
                            status,
                            failure,
                            error: message,
                        };
                        if let Err(e) = report.write_unstarted(&ended) {
                            crate::error::render(TOOL, &e, env);
                        }
                    }
                    return Ok(status);
                }
            };
            t.assembled = Some(Assembled {
                world_size: place.world_size,
                rank_offset: place.rank_offset,
            });
            if place.attempt > 0 && !cli.quiet {
                eprintln!(
                    "{TOOL}: node {} replaces its lost launcher: joining restart {} of {}",
                    t.node_rank, place.attempt, cli.max_restarts
                );
            }
            Some(Arc::new(link))
        }
        _ => None,
    };
    let mut plan = Plan::build(topology, &argv, &run.common, run.port_auto, env);
    hang_env(&mut plan);
    torchrun::apply(&cli, &run, &mut plan, &signals_env, env)?;
    // torchrun's layout heads only tee'd lines itself; accel's own prefixes every console line.
    let prefix = cli.rank_prefix.clone().or_else(|| {
        (cli.tee != "0" && torchrun_logs.is_none()).then(|| "[{role}{local_rank}]:".to_string())
    });
    // torchrun's layout filters the console itself.
    let filter = filter.filter(|_| torchrun_logs.is_none());
    let opts = launch::Options {
        tool: TOOL,
        grace: grace.as_duration(),
        monitor_interval: cli
            .monitor_interval
            .clamp(Duration::from_millis(1), Duration::from_secs(60)),
        max_restarts: cli.max_restarts,
        log_dir: cli.log_dir.clone(),
        log_template: cli.log_template.clone(),
        console: launch::Console {
            prefix,
            local_ranks: filter,
        },
        tail_lines: 20,
        quiet: cli.quiet,
        hang_timeout,
        stacks_on_failure: cli.stacks_on_failure,
        py_spy,
        control: link,
        requeue_signal,
        handled,
        signals,
        torchrun_logs,
        ..launch::Options::default()
    };
    let outcome = launch::run(&plan, &opts, env)?;
    // The requeue first: a report that fails to be written must not lose the job.
    let mut status = outcome.status;
    if let Some(r) = requeue.filter(|r| r.requeuer && outcome.status == ExitStatus::Requeued) {
        // Every node's ranks are gone (node 0 hears it over the control plane): ask once. slurmctld
        // then ends the job's steps, this launcher with them, and queues the job again.
        match r.request() {
            Ok(()) if !cli.quiet => eprintln!("{TOOL}: job {} requeued (scontrol requeue)", r.job),
            Ok(()) => {}
            Err(e) => status = crate::error::render(TOOL, &Error::from(e), env),
        }
    }
    if let Some(report) = report {
        if let Err(e) = report.write(&plan, &outcome) {
            // The run's own status stands; only a run that succeeded turns into an output failure.
            let code = crate::error::render(TOOL, &e, env);
            if status == ExitStatus::Success {
                status = code;
            }
        }
    }
    Ok(status)
}

/// `--slurm_requeue` (or ACCEL_LAUNCH_SLURM_REQUEUE): the warning signal, `None` when off.
fn requeue_signal(cli: &LaunchCli, env: &Environment) -> Result<Option<i32>> {
    let on = cli.slurm_requeue
        || match env.non_empty(env_vars::ACCEL_LAUNCH_SLURM_REQUEUE) {
            None => false,
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => true,
                "0" | "false" | "no" | "off" => false,
                _ => {
                    return Err(usage(
                        format!("invalid {}: `{v}`", env_vars::ACCEL_LAUNCH_SLURM_REQUEUE),
                        "1 (or true) to requeue on SLURM's warning signal, 0 (or false) not to",
                    ))
                }
            },
        };
    let given = cli
        .requeue_signal
        .as_deref()
        .map(|s| ("--requeue_signal", s))
        .or_else(|| {
            env.non_empty(env_vars::ACCEL_LAUNCH_REQUEUE_SIGNAL)
                .map(|s| (env_vars::ACCEL_LAUNCH_REQUEUE_SIGNAL, s))
        });
    if !on {
        if cli.requeue_signal.is_some() {
            return Err(usage(
                "--requeue_signal needs --slurm_requeue",
                "add --slurm_requeue (or ACCEL_LAUNCH_SLURM_REQUEUE=1)",
            ));
        }
        return Ok(None);
    }
    match given {
        None => Ok(Some(libc::SIGUSR1)),
        Some((from, s)) => launch::requeue::parse_signal(s)
            .map(Some)
            .map_err(|e| match from {
                "--requeue_signal" => e.into(),
                _ => usage(
                    format!("invalid {from}: {e}"),
                    "e.g. USR1, as in sbatch --signal=USR1@300",
                ),
            }),
    }
}

/// How a run that never started its ranks ended (in the join), for its `--report_json`.
struct Unstarted {
    node: u32,
    num_nodes: u32,
    status: ExitStatus,
    failure: Option<control::FailureReport>,
    error: String,
}

/// `--report_json`: how the run ended, for a scheduler or a wrapper script to read without parsing
/// the logs. Its temporary file is made before any rank starts, so that a path that cannot be
/// written is refused then; it has a name of its own (`tempfile`), so that launchers writing
/// `rep/node.0` and `rep/node.1` at once never share one, and the rename makes the report whole.
struct Report {
    path: PathBuf,
    tmp: tempfile::NamedTempFile,
}

impl Report {
    fn open(path: &std::path::Path) -> Result<Report> {
        if path.is_dir() {
            return Err(usage(
                format!("--report_json `{}` is a directory", path.display()),
                format!(
                    "give a file's path, e.g. --report_json {}",
                    path.join("report.json").display()
                ),
            ));
        }
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => std::path::Path::new("."),
        };
        let name = path
            .file_name()
            .map_or_else(|| "report".into(), |n| n.to_string_lossy().into_owned());
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(|e| Error::from(crate::error::IoError::new("create", path, e)))?;
        Ok(Report {
            path: path.to_path_buf(),
            tmp,
        })
    }

    /// A run that ended in the join: no rank started; `error` is what this launcher said.
    fn write_unstarted(self, u: &Unstarted) -> Result<()> {
        let v = json!({
            "status": u.status.code(),
            "ok": false,
            "node": u.node,
            "num_nodes": u.num_nodes,
            "world_size": null,
            "host": crate::host::hostname(),
            "signal": u.failure.as_ref().and_then(|f| f.signal),
            "failure": u.failure,
            "ended_in_join": true,
            "error": u.error,
            "ranks": [],
        });
        self.persist(&v)
    }

    fn write(self, plan: &Plan, o: &launch::RunOutcome) -> Result<()> {
        let t = plan.topology.as_ref();
        let v = json!({
            "status": o.status.code(),
            "ok": o.status == ExitStatus::Success,
            "node": t.map(|t| t.node_rank),
            "num_nodes": t.map(|t| t.num_nodes),
            "world_size": t.map(|t| t.world_size()),
            "host": plan.host,
            "signal": o.signal,
            "failure": o.failure,
            "ranks": o.ranks.iter().map(|r| json!({
                "rank": r.rank,
                "local_rank": r.local_rank,
                "code": r.end.status.code(),
                "signal": std::os::unix::process::ExitStatusExt::signal(&r.end.status),
                "stopped": r.end.stopped,
            })).collect::<Vec<_>>(),
        });
        self.persist(&v)
    }

    fn persist(self, v: &serde_json::Value) -> Result<()> {
        let text = serde_json::to_string_pretty(v).unwrap_or_default() + "\n";
        let write_err = |e| Error::from(crate::error::IoError::new("write", &self.path, e));
        let mut f = self.tmp.as_file();
        std::io::Write::write_all(&mut f, text.as_bytes()).map_err(write_err)?;
        self.tmp
            .persist(&self.path)
            .map_err(|e| write_err(e.error))?;
        Ok(())
    }
}

/// --hang_timeout, else ACCEL_LAUNCH_HANG_TIMEOUT; 0 is off.
fn hang_timeout(cli: &LaunchCli, env: &Environment) -> Result<Option<Duration>> {
    let wait = match (
        cli.hang_timeout,
        env.non_empty(env_vars::ACCEL_LAUNCH_HANG_TIMEOUT),
    ) {
        (Some(w), _) => w,
        (None, Some(s)) => crate::duration::parse_wait(s).map_err(|e| {
            usage(
                format!("invalid {}: {e}", env_vars::ACCEL_LAUNCH_HANG_TIMEOUT),
                "a number of seconds, e.g. ACCEL_LAUNCH_HANG_TIMEOUT=600; 0 or inf for off",
            )
        })?,
        (None, None) => return Ok(None),
    };
    // 0 and `inf` (never declare a hang) both mean off.
    Ok(match wait {
        crate::duration::Wait::After(d) if !d.is_zero() => Some(d),
        _ => None,
    })
}

/// `accel-launch --stacks PID`: the grouped stacks of a running launcher's ranks, on stdout.
fn stacks_of(pid: i32, env: &Environment) -> Result<ExitStatus> {
    if let Err(what) = launch::hang::autopsy::is_accel_launch(pid) {
        return Err(usage(
            format!("--stacks {pid}: process {pid} is not an accel-launch ({what})"),
            "give the PID of accel-launch itself (e.g. from `pgrep -f accel-launch`), not of a rank",
        ));
    }
    let (ranks, interpreter) = launch::hang::autopsy::ranks_of_launcher(pid);
    if ranks.is_empty() {
        return Err(usage(
            format!("--stacks {pid}: process {pid} is not an accel-launch with running ranks"),
            "give the PID of accel-launch itself (e.g. from `pgrep -f accel-launch`), not of a rank",
        ));
    }
    let py_spy = launch::hang::autopsy::find_py_spy(env, interpreter.as_deref());
    if py_spy.is_none() {
        warn(TOOL, "py-spy not found (on PATH or next to the ranks' interpreter): only process states are known; `pip install py-spy`", env);
    }
    let stacks =
        launch::hang::autopsy::take_parallel(py_spy.as_deref(), &ranks, launch::hang::AUTOPSY_DUMP);
    let report = launch::hang::autopsy::report(&format!("{TOOL} {pid}"), &stacks);
    print!("{report}");
    Ok(ExitStatus::Success)
}

/// `--mixed_precision fp8` needs an FP8 backend in the ranks' Python: accelerate launch refuses the run
/// without one (`utils/launch.py`, every launch path: "FP8 is not available on this machine"), before
/// any rank starts, and so does accel-launch, asking the interpreter the ranks run.
fn fp8_available(env: &Environment) -> Result<()> {
    match crate::python::fp8_available(env) {
        Ok((true, _)) => Ok(()),
        Ok((false, python)) => Err(Error::msg_hint(
            ExitStatus::LauncherFailed,
            format!("FP8 is not available on this machine: none of Transformer Engine (transformer-engine), MS-AMP (ms-amp) or torchao >= 0.6.1 is installed for {python}"),
            "install one into the training environment (e.g. `pip install torchao`), or use --mixed_precision bf16",
        )),
        // No interpreter to ask: the ranks' own start will say so (--no_python runs no Python).
        Err(why) => {
            log::debug!("FP8 availability not checked: {why}");
            Ok(())
        }
    }
}

/// torchrun's worker argv (`torch/distributed/run.py::config_from_args`: `python -u script`); the plain child of accelerate's simple path has no `-u`.
fn worker_argv(
    cli: &LaunchCli,
    env: &Environment,
    args: &LaunchArgs,
    script: &OsString,
    only: bool,
) -> Result<Vec<OsString>> {
    let rest = &cli.command[1..];
    let mut argv: Vec<OsString> = Vec::new();
    // torchrun's interpreter is PYTHON_EXEC, else its own (`run.py::config_from_args`).
    let python = || {
        env.non_empty(env_vars::PYTHON_EXEC)
            .filter(|_| only)
            .map(PathBuf::from)
            .or_else(|| crate::python::find_python(env))
    };
    if cli.torchrun.run_path {
        // --run_path takes precedence over --no_python, as in torchrun.
        let python = python().ok_or_else(|| {
            Error::msg_hint(
                ExitStatus::NotFound,
                "no Python interpreter found (python3 or python on PATH)",
                "set ACCEL_PYTHON to the interpreter of your training environment",
            )
        })?;
        return Ok(torchrun::run_path_argv(
            python.into_os_string(),
            script,
            rest,
        ));
    }
    if cli.no_python {
        argv.push(script.clone());
    } else {
        let python = python().ok_or_else(|| {
            Error::msg_hint(
                ExitStatus::NotFound,
                "no Python interpreter found (python3 or python on PATH)",
                "set ACCEL_PYTHON to the interpreter of your training environment",
            )
        })?;
        argv.push(python.into_os_string());
        if args.path != LaunchPath::Simple {
            argv.push("-u".into());
        }
        if cli.module {
            argv.push("-m".into());
        }
        argv.push(script.clone());
    }
    argv.extend(rest.iter().cloned());
    Ok(argv)
}

/// torchrun's arguments for an elastic rendezvous, with accel's console and log options translated to
/// torchrun's own (`torch/distributed/run.py`): `--log_dir` writes files there and still shows the
/// console (`--tee 3`); `--rank_prefix` becomes `TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE` (torchrun
/// prefixes only teed output, so it tees); `--local_ranks_filter` is torchrun's own (likewise on teed
/// output). What torchrun cannot do is refused rather than dropped.
fn torchrun_args(
    cli: &LaunchCli,
    args: &LaunchArgs,
    script: &OsString,
) -> Result<(Vec<OsString>, EnvMap)> {
    let ip = args
        .main_process_ip
        .clone()
        .unwrap_or_else(|| "127.0.0.1".into());
    let port = args.main_process_port.filter(|p| *p != 0).unwrap_or(29400);
    let mut extra_env = EnvMap::new();
    let mut tee = cli.tee.clone();
    if cli.log_template != crate::launch::supervise::DEFAULT_LOG_TEMPLATE {
        return Err(usage(
            format!("--log_template cannot be used with --rdzv_backend {}", args.rdzv_backend),
            "torchrun names its log files itself (<log_dir>/<run id>/attempt_N/<local rank>/stdout.log)",
        ));
    }
    if let Some(p) = &cli.rank_prefix {
        extra_env.insert(
            env_vars::TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE.into(),
            torchrun_prefix(p, &args.rdzv_backend)?,
        );
        tee = "3".into();
    }
    let mut a: Vec<String> = vec![
        "--nnodes".into(),
        cli.torchrun
            .nnodes
            .map_or_else(|| args.num_machines.to_string(), |n| n.to_string()),
        "--nproc_per_node".into(),
        args.num_local_processes().to_string(),
        "--rdzv_backend".into(),
        args.rdzv_backend.clone(),
        "--rdzv_endpoint".into(),
        format!("{ip}:{port}"),
        "--max_restarts".into(),
        cli.max_restarts.to_string(),
        "--monitor_interval".into(),
        cli.monitor_interval.as_secs_f64().to_string(),
        "--role".into(),
        cli.role.clone(),
    ];
    if !cli.rdzv_conf.is_empty() {
        a.extend(["--rdzv_conf".into(), cli.rdzv_conf.clone()]);
    }
    if let Some(d) = &cli.log_dir {
        a.extend(["--log_dir".into(), d.display().to_string()]);
        tee = "3".into();
    }
    if let Some(f) = &cli.local_ranks_filter {
        a.extend(["--local_ranks_filter".into(), f.clone()]);
        tee = "3".into();
    }
    a.extend(["--tee".into(), tee]);
    a.extend(torchrun::extra_delegated(cli));
    if cli.module {
        a.push("-m".into());
    }
    if cli.no_python {
        a.push("--no_python".into());
    }
    let mut out: Vec<OsString> = a.into_iter().map(OsString::from).collect();
    out.push(script.clone());
    out.extend(cli.command[1..].iter().cloned());
    Ok((out, extra_env))
}

/// accel's `--rank_prefix` placeholders as torchrun's `string.Template` macros
/// (`local_elastic_agent.py`: `${role_name}`, `${local_rank}`, `${rank}`).
fn torchrun_prefix(template: &str, backend: &str) -> Result<String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(i) = rest.find(['{', '$']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(t) = tail.strip_prefix('$') {
            out.push_str("$$");
            rest = t;
            continue;
        }
        let Some(end) = tail.find('}') else {
            out.push_str(tail);
            rest = "";
            break;
        };
        let macro_ = match &tail[1..end] {
            "rank" => "${rank}",
            "local_rank" => "${local_rank}",
            "role" => "${role_name}",
            other => {
                return Err(usage(
                    format!("--rank_prefix: `{{{other}}}` has no torchrun equivalent with --rdzv_backend {backend}"),
                    "torchrun's prefix knows {rank}, {local_rank} and {role}",
                ))
            }
        };
        out.push_str(macro_);
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn deepspeed_args(
    cli: &LaunchCli,
    args: &LaunchArgs,
    launcher: &str,
    script: &OsString,
) -> Result<Vec<OsString>> {
    let s = |k: &str| {
        args.values
            .get(k)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let hostfile = s("deepspeed_hostfile").ok_or_else(|| {
        usage(
            "multi-node DeepSpeed needs a hostfile",
            "pass --deepspeed_hostfile, or --deepspeed_multinode_launcher standard",
        )
    })?;
    let mut a: Vec<String> = vec!["--hostfile".into(), hostfile];
    if launcher == "nossh" {
        a.extend([
            "--node_rank".into(),
            args.machine_rank.unwrap_or(0).to_string(),
            "--no_ssh".into(),
        ]);
    } else {
        a.extend([
            "--no_local_rank".into(),
            "--launcher".into(),
            launcher.into(),
        ]);
    }
    if let Some(x) = s("deepspeed_exclusion_filter") {
        a.extend(["--exclude".into(), x]);
    } else if let Some(x) = s("deepspeed_inclusion_filter") {
        a.extend(["--include".into(), x]);
    } else {
        a.extend(["--num_gpus".into(), args.num_local_processes().to_string()]);
    }
    if let Some(ip) = &args.main_process_ip {
        a.extend(["--master_addr".into(), ip.clone()]);
    }
    a.extend([
        "--master_port".into(),
        args.main_process_port
            .filter(|p| *p != 0)
            .unwrap_or(29500)
            .to_string(),
    ]);
    if cli.module {
        a.push("--module".into());
    }
    if cli.no_python {
        a.push("--no_python".into());
    }
    let mut out: Vec<OsString> = a.into_iter().map(OsString::from).collect();
    out.push(script.clone());
    out.extend(cli.command[1..].iter().cloned());
    Ok(out)
}

/// mpirun's arguments for a hostfile run, in the dialect of the MPI found first on PATH
/// (`accelerate/utils/launch.py::_get_mpirun_args`): Open MPI's `--hostfile/--npernode/--bind-to`, or
/// MPICH/Intel MPI/MVAPICH's `-f/-ppn`.
fn mpirun_args(
    env: &Environment,
    args: &LaunchArgs,
    hostfile: &str,
    argv: &[OsString],
) -> (&'static str, Vec<OsString>) {
    let path = env.get(env_vars::PATH);
    let program = ["mpirun", "mpiexec"]
        .into_iter()
        .find(|p| path.is_some_and(|path| which::which_in(p, Some(path), "/").is_ok()))
        .unwrap_or("mpirun");
    let open_mpi = path
        .and_then(|path| which::which_in(program, Some(path), "/").ok())
        .and_then(|p| std::process::Command::new(p).arg("--version").output().ok())
        .is_none_or(|o| String::from_utf8_lossy(&o.stdout).contains("Open MPI"));
    let nppn = args.num_local_processes().to_string();
    let n = args.num_processes.to_string();
    let mut a: Vec<OsString> = if open_mpi {
        vec![
            "--hostfile".into(),
            hostfile.into(),
            "--npernode".into(),
            nppn.into(),
            "-n".into(),
            n.into(),
            "--bind-to".into(),
            "socket".into(),
        ]
    } else {
        vec![
            "-f".into(),
            hostfile.into(),
            "-ppn".into(),
            nppn.into(),
            "-n".into(),
            n.into(),
        ]
    };
    a.extend(argv.iter().cloned());
    (program, a)
}

/// Execs another launcher with accelerate's variables (it then owns the job and its signals).
fn delegate(
    env: &Environment,
    program: &str,
    args: Vec<OsString>,
    common: &EnvMap,
    dry_run: bool,
) -> Result<ExitStatus> {
    let path = env
        .get(env_vars::PATH)
        .and_then(|p| which::which_in(program, Some(p), "/").ok())
        .ok_or_else(|| {
            Error::msg_hint(
                ExitStatus::NotFound,
                format!("this run needs `{program}`, which is not installed (not on PATH)"),
                match program {
                    "torchrun" => {
                        "install torch in the environment on PATH, or use --rdzv_backend static"
                    }
                    "deepspeed" => {
                        "pip install deepspeed, or use --deepspeed_multinode_launcher standard"
                    }
                    _ => "install Open MPI or MPICH (mpirun), or drop --mpirun_hostfile",
                },
            )
        })?;
    if dry_run {
        let mut text = format!(
            "# delegated to {}\n{}",
            path.display(),
            shell_quote(path.as_os_str())
        );
        for a in &args {
            text.push(' ');
            text.push_str(&shell_quote(a));
        }
        text.push('\n');
        for (k, v) in common {
            text.push_str(&format!("{k}={v}\n"));
        }
        crate::tools::print(&text)?;
        return Ok(ExitStatus::Success);
    }
    if program == "deepspeed" {
        // The deepspeed launcher ships this file's variables to every node.
        let file = env
            .non_empty(env_vars::DS_ENV_FILE)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(".deepspeed_env"));
        let existing = std::fs::read_to_string(&file).unwrap_or_default();
        let (text, skipped) = crate::contract::accelerate::merge_deepspeed_env(&existing, common);
        std::fs::write(&file, text).map_err(|e| crate::error::IoError::new("write", &file, e))?;
        for k in skipped {
            warn(TOOL, &format!("{k} is not written to {} (DeepSpeed refuses empty values and values with spaces or ;<>)", file.display()), env);
        }
    }
    let err = std::process::Command::new(&path)
        .args(&args)
        .envs(common)
        .exec();
    Err(Error::msg(
        ExitStatus::CannotExecute,
        format!("cannot run `{}`: {err}", path.display()),
    ))
}

fn shell_quote(s: &std::ffi::OsStr) -> String {
    let s = s.to_string_lossy();
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
    {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn dry_run(
    cli: &LaunchCli,
    run: &Run,
    plan: &Plan,
    requeue_signal: Option<i32>,
    join_timeout: Duration,
) -> Result<ExitStatus> {
    let (args, source) = (&run.args, run.source);
    let config: Vec<Value> = run
        .resolved
        .entries()
        .into_iter()
        .map(|(k, v, o)| json!({"key": k, "value": v, "origin": o.to_string()}))
        .collect();
    let ranks: Vec<Value> = plan
        .ranks
        .iter()
        .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
        .collect();
    // accelerate launch's path (a plain process, torchrun, deepspeed's torchrun) is what it would
    // start; here accel-launch starts and supervises every rank itself.
    let accelerate_path = match args.path {
        LaunchPath::Simple => "one plain process",
        LaunchPath::Torchrun => "torchrun",
        LaunchPath::DeepSpeed => "torchrun with DeepSpeed's variables",
    };
    let launch = json!({
        "started_by": "accel-launch",
        "accelerate_launch_would_use": accelerate_path,
        "num_processes": args.num_processes,
        "num_machines": args.num_machines,
        "machine_rank": plan.topology.as_ref().map(|t| t.node_rank),
        "topology_source": source,
        "master_addr": plan.topology.as_ref().map(|t| t.master_addr.clone()),
        "master_port": plan.topology.as_ref().map(|t| t.master_port),
        "port_auto": plan.port_auto,
        "control_plane": run.control.as_ref().map(|c| json!({
            "addr": c.addr,
            "port": c.port,
            "heartbeat_s": control::HEARTBEAT.as_secs_f64(),
            "lost_after_s": control::lost_after(control::HEARTBEAT).as_secs_f64(),
            "join_timeout_s": join_timeout.as_secs_f64(),
        })),
        "slurm_requeue": requeue_signal.map(|s| json!({
            "signal": crate::exit_status::signal_name(s),
            "requeued_by": "node 0",
        })),
        "defaulted": args.defaulted,
    });
    if cli.json {
        let v = json!({"config": config, "launch": launch, "ranks": ranks});
        crate::tools::print(&(serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"))?;
        return Ok(ExitStatus::Success);
    }
    let mut o = String::from("# resolved config (value, origin)\n");
    for c in &config {
        let v = match &c["value"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        o.push_str(&format!(
            "{} = {}  ({})\n",
            c["key"].as_str().unwrap_or(""),
            v,
            c["origin"].as_str().unwrap_or("")
        ));
    }
    o.push_str(&format!(
        "\n# launch\nstarted by = accel-launch (every rank its own child, supervised; no torchrun, deepspeed or mpirun process)\naccelerate launch would use = {accelerate_path}\nnum_processes = {}\nnum_machines = {}\ntopology from = {:?}\n",
        args.num_processes, args.num_machines, source
    ));
    for d in &args.defaulted {
        o.push_str(&format!("no config file: {}\n", d.trim_start_matches('\t')));
    }
    if let Some(t) = &plan.topology {
        o.push_str(&format!(
            "machine_rank = {}\nrendezvous = {}:{}{}\n",
            t.node_rank,
            t.master_addr,
            t.master_port,
            if plan.port_auto {
                " (free port picked now; another is picked at launch)"
            } else {
                ""
            }
        ));
    }
    if let Some(c) = &run.control {
        o.push_str(&format!(
            "control plane = {}:{} (master port + 1; hosted by node 0; heartbeat {} s, a node is lost after {} s of silence; join timeout {} s)\n",
            c.addr,
            c.port,
            control::HEARTBEAT.as_secs(),
            control::lost_after(control::HEARTBEAT).as_secs(),
            join_timeout.as_secs_f64()
        ));
        if cli.torchrun.nproc_per_node.is_some() {
            o.push_str("world = assembled when every node has joined (ranks below assume every node runs this node's count)\n");
        }
    }
    if let Some(s) = requeue_signal {
        o.push_str(&format!(
            "slurm_requeue = on {}: the ranks get the grace period, then node 0 runs `scontrol requeue $SLURM_JOB_ID`\n",
            crate::exit_status::signal_name(s)
        ));
    }
    for r in &plan.ranks {
        o.push_str(&format!(
            "\n# rank {} (local rank {})\nargv =",
            r.rank, r.local_rank
        ));
        for a in &r.argv {
            o.push(' ');
            o.push_str(&shell_quote(a));
        }
        o.push('\n');
        for (k, v) in &r.env {
            o.push_str(&format!("{k}={v}\n"));
        }
    }
    crate::tools::print(&o)?;
    Ok(ExitStatus::Success)
}
