//! accel-launch's command line, decided once (as ripgrep turns its low-level flags into `HiArgs`):
//! every flag and variable that says how the run is started and supervised becomes a typed value
//! here, and what accel-launch cannot do is refused here, before anything is resolved. The rest of
//! the tool reads this [`Request`], never the clap type: which mode the command line is in
//! (accelerate's, or torchrun's only), the grace period, the signal set, the join timeout, the hang
//! and requeue settings, the console and log layout, and torchrun's flags as given, for a run handed
//! to the real torchrun.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::launch::{LaunchCli, LocalRanks};
use crate::cli::torchrun::TorchrunFlags;
use crate::config::CliValue;
use crate::contract::Paradigm;
use crate::duration::Wait;
use crate::env_vars::{self, Environment};
use crate::error::{warn, Error, Result};
use crate::launch::straggler;
use crate::launch::supervise::{SignalSet, DEFAULT_LOG_TEMPLATE};
use crate::launch::torchrun::{self, logs::LogsSpec};
use crate::launch::{RunInput, Scope};

use super::error::LaunchError;
use super::{pet, TOOL};

/// What to run in each rank and how (`python -u script`, `-m`, `--no_python`, `--run_path`).
#[derive(Debug, Clone)]
pub struct Program {
    /// The script (the module with `-m`, the program with `--no_python`).
    pub script: OsString,
    /// Its own arguments.
    pub args: Vec<OsString>,
    pub module: bool,
    pub no_python: bool,
    /// torchrun's `--run_path` (takes precedence over `--no_python`, as in torchrun).
    pub run_path: bool,
}

/// Where the ranks' output goes.
#[derive(Debug, Clone)]
pub struct Output {
    /// `-t/--tee` as given (torchrun's stream selector).
    pub tee: String,
    pub log_dir: Option<PathBuf>,
    /// `--log_template`, [`DEFAULT_LOG_TEMPLATE`] unless given.
    pub log_template: String,
    pub rank_prefix: Option<String>,
    pub local_ranks: Option<LocalRanks>,
    /// The run uses torchrun's log layout: a command line of torchrun's flags only, or one asking for
    /// what only that layout has (`-r/--redirects`, the duplicate filters).
    pub torchrun_layout: bool,
}

/// How the ranks are supervised: decided only for a run accel-launch starts itself (a run handed to
/// torchrun, deepspeed or mpirun leaves these flags to that launcher).
#[derive(Debug, Clone)]
pub struct Supervision {
    /// The time between the stop signal and SIGKILL.
    pub grace: Wait,
    /// The signals handed on to the ranks and those that stop the run.
    pub signals: SignalSet,
    /// TORCHELASTIC_SIGNALS_TO_HANDLE, as torchrun exports it (the list as given).
    pub signals_env: String,
    /// `--hang_timeout` (or ACCEL_LAUNCH_HANG_TIMEOUT); `None` is off.
    pub hang_timeout: Option<Duration>,
    /// `--straggler_threshold` (or ACCEL_LAUNCH_STRAGGLER_THRESHOLD) and `--straggler_window`;
    /// `None` is off.
    pub straggler: Option<straggler::Settings>,
    /// How long every node's launcher waits for the others to join.
    pub join_timeout: Duration,
}

/// accel-launch's whole command line, typed.
#[derive(Debug, Clone)]
pub struct Request {
    pub program: Program,
    pub config_file: Option<PathBuf>,
    pub paradigm: Paradigm,
    /// Config values given as flags (`--num_processes 4` → `num_processes`).
    pub config_values: Vec<CliValue>,
    pub num_cpu_threads_per_process: Option<u32>,
    pub role: String,
    pub max_restarts: u32,
    pub monitor_interval: Duration,
    /// torchrun's command line as the run's resolution takes it.
    pub torchrun: torchrun::Request,
    /// torchrun's flags as given, for a run handed to the real torchrun.
    pub torchrun_flags: TorchrunFlags,
    /// `--rdzv_conf` as given.
    pub rdzv_conf: String,
    pub rdzv_timeout: Option<Duration>,
    pub grace_period: Option<Wait>,
    pub hang_timeout: Option<Wait>,
    pub straggler_threshold: Option<f64>,
    pub straggler_window: Duration,
    pub stacks_on_failure: bool,
    /// `--slurm_requeue`'s warning signal; `None` is off.
    pub requeue_signal: Option<i32>,
    pub output: Output,
    pub dry_run: bool,
    pub json: bool,
    pub quiet: bool,
    pub report_json: Option<PathBuf>,
    pub exclude_file: Option<PathBuf>,
    pub replace_failing_nodes: bool,
    pub drain_lost_nodes: bool,
}

impl Request {
    /// The command line decided: refused where accel-launch cannot do what it asks.
    pub fn from_cli(mut cli: LaunchCli, env: &Environment) -> Result<Request> {
        let [script, args @ ..] = &cli.command[..] else {
            return Err(LaunchError::NoScript.into());
        };
        if script.to_string_lossy().starts_with('-') && script != "-" {
            return Err(unknown_option(&script.to_string_lossy()).into());
        }
        let (script, args) = (script.clone(), args.to_vec());
        refuse_unsupported(&cli)?;
        // torchrun's PET_<OPTION> defaults are torchrun's command line too.
        let pet = pet::defaults(&cli.given, env);
        let only = (any_torchrun_flag(&cli.torchrun) || pet::ask_for_torchrun(&pet, env))
            && !accelerate_asked(&cli, env);
        let pet_values = if only {
            pet::apply(&mut cli, &pet)?
        } else {
            Vec::new()
        };
        let program = Program {
            script,
            args,
            module: cli.module,
            no_python: cli.no_python,
            run_path: cli.torchrun.run_path,
        };
        let torchrun = torchrun_request(&cli, only, env)?;
        let t = &cli.torchrun;
        let output = Output {
            torchrun_layout: torchrun.only
                || t.redirects.is_some()
                || t.duplicate_stdout_filters.is_some()
                || t.duplicate_stderr_filters.is_some(),
            tee: cli.tee.clone(),
            log_dir: cli.log_dir.clone(),
            log_template: cli.log_template.clone(),
            rank_prefix: cli.rank_prefix.clone(),
            local_ranks: cli.local_ranks_filter.clone(),
        };
        Ok(Request {
            requeue_signal: requeue_signal(&cli, env)?,
            config_values: cli.config_values().into_iter().chain(pet_values).collect(),
            paradigm: Paradigm {
                cpu: cli.cpu,
                multi_gpu: cli.multi_gpu,
                tpu: cli.tpu,
                use_deepspeed: cli.use_deepspeed,
                use_fsdp: cli.use_fsdp,
                use_megatron_lm: cli.use_megatron_lm,
                use_parallelism_config: cli.use_parallelism_config,
            },
            monitor_interval: cli.monitor_interval,
            program,
            torchrun,
            output,
            config_file: cli.config_file,
            num_cpu_threads_per_process: cli.num_cpu_threads_per_process,
            role: cli.role,
            max_restarts: cli.max_restarts,
            torchrun_flags: cli.torchrun,
            rdzv_conf: cli.rdzv_conf,
            rdzv_timeout: cli.rdzv_timeout,
            grace_period: cli.grace_period,
            hang_timeout: cli.hang_timeout,
            straggler_threshold: cli.straggler_threshold,
            straggler_window: cli.straggler_window,
            stacks_on_failure: cli.stacks_on_failure,
            dry_run: cli.dry_run,
            json: cli.json,
            quiet: cli.quiet,
            report_json: cli.report_json,
            exclude_file: cli.exclude_file,
            replace_failing_nodes: cli.replace_failing_nodes,
            drain_lost_nodes: cli.drain_lost_nodes,
        })
    }

    /// The supervisor's settings, for a run accel-launch starts itself.
    pub fn supervision(&self, env: &Environment) -> Result<Supervision> {
        let (signals, signals_env) = signals(self.torchrun_flags.signals_to_handle.as_deref())?;
        Ok(Supervision {
            join_timeout: join_timeout(&self.rdzv_conf, self.rdzv_timeout, env)?,
            signals,
            signals_env,
            hang_timeout: hang_timeout(self.hang_timeout, env)?,
            straggler: straggler(self.straggler_threshold, self.straggler_window, env)?,
            grace: grace(self.grace_period, self.torchrun_flags.shutdown_timeout, env)?,
        })
    }

    /// What the run's resolution takes from the command line ([`crate::launch::resolve`]).
    pub fn run_input(&self) -> RunInput<'_> {
        RunInput {
            scope: Scope::Node,
            config_file: self.config_file.as_deref(),
            paradigm: self.paradigm,
            cli: self.config_values.clone(),
            num_cpu_threads_per_process: self.num_cpu_threads_per_process,
            role: self.role.clone(),
            max_restarts: self.max_restarts,
            allow_delegation: true,
            check_port: !self.dry_run,
            torchrun: self.torchrun.clone(),
        }
    }

    /// torchrun's log layout for this run (see [`crate::launch::torchrun::logs`]), when it has that
    /// layout; `--log_template` is accel's own layout, which cannot be both.
    pub fn torchrun_logs(&self, run_id: &str, env: &Environment) -> Result<Option<LogsSpec>> {
        let o = &self.output;
        if !o.torchrun_layout {
            return Ok(None);
        }
        if o.log_template != DEFAULT_LOG_TEMPLATE {
            return Err(LaunchError::LogTemplateWithTorchrunLayout.into());
        }
        let t = &self.torchrun_flags;
        let list = |v: &Option<String>| {
            v.as_deref()
                .map(torchrun::logs::comma_separated_list)
                .unwrap_or_default()
        };
        Ok(Some(LogsSpec {
            log_dir: o.log_dir.clone(),
            run_id: run_id.to_string(),
            role: self.role.clone(),
            redirects: t.redirects.clone().unwrap_or_else(|| "0".into()),
            tee: o.tee.clone(),
            local_ranks_filter: o.local_ranks.as_ref().map(|f| f.ranks.clone()),
            prefix_template: env
                .get(env_vars::TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)
                .map(str::to_string),
            duplicate_stdout: list(&t.duplicate_stdout_filters),
            duplicate_stderr: list(&t.duplicate_stderr_filters),
        }))
    }
}

/// What accelerate launch does elsewhere (TPU, SageMaker) or what cannot be both.
fn refuse_unsupported(cli: &LaunchCli) -> Result<(), LaunchError> {
    if cli.module && cli.no_python {
        return Err(LaunchError::ModuleAndNoPython);
    }
    if cli.tpu || cli.tpu_cluster {
        return Err(LaunchError::Tpu);
    }
    if cli.aws_access_key_id.is_some() || cli.aws_secret_access_key.is_some() {
        return Err(LaunchError::SageMaker);
    }
    Ok(())
}

/// A script that is an option (`--num_proceses 4 train.py`): the option meant, where one is close;
/// else where the options are listed.
fn unknown_option(given: &str) -> LaunchError {
    let help = "`accel-launch --help` lists the options; put the script before its own arguments";
    let cmd = (crate::cli::launch::doc().command)();
    let hint = crate::cli::suggest_option(given, &cmd, crate::cli::OTHER_LAUNCHERS_OPTIONS)
        .unwrap_or_else(|| help.to_string());
    LaunchError::UnknownOption {
        given: given.to_string(),
        hint,
    }
}

/// Whether any of torchrun's own flags was given.
fn any_torchrun_flag(t: &TorchrunFlags) -> bool {
    t.nnodes.is_some()
        || t.nproc_per_node.is_some()
        || t.node_rank.is_some()
        || t.master_addr.is_some()
        || t.master_port.is_some()
        || t.rdzv_endpoint.is_some()
        || t.rdzv_id.is_some()
        || t.standalone
        || t.run_path
        || t.redirects.is_some()
        || t.local_addr.is_some()
        || t.signals_to_handle.is_some()
        || t.shutdown_timeout.is_some()
        || t.virtual_local_rank
        || t.duplicate_stdout_filters.is_some()
        || t.duplicate_stderr_filters.is_some()
        || t.numa_binding.is_some()
        || t.start_method.is_some()
        || t.event_log_handler.is_some()
}

/// Whether anything asks for accelerate's run: a config file (given, or ACCEL_CONFIG_FILE), a config
/// value (a flag, ACCEL_CONFIG_<KEY>), a paradigm or thread flag. The rendezvous backend is both
/// tools' flag.
fn accelerate_asked(cli: &LaunchCli, env: &Environment) -> bool {
    cli.config_file.is_some()
        || env.non_empty(env_vars::ACCEL_CONFIG_FILE).is_some()
        || env
            .with_prefix(env_vars::ACCEL_CONFIG_OVERRIDE_PREFIX)
            .into_iter()
            .any(|(k, _)| k != env_vars::ACCEL_CONFIG_FILE)
        || cli.config_values().iter().any(|v| v.key != "rdzv_backend")
        || cli.cpu
        || cli.multi_gpu
        || cli.use_deepspeed
        || cli.use_fsdp
        || cli.use_megatron_lm
        || cli.use_parallelism_config
        || cli.num_cpu_threads_per_process.is_some()
}

/// torchrun's command line as the run's resolution takes it; what accel-launch cannot do of it is
/// refused.
fn torchrun_request(cli: &LaunchCli, only: bool, env: &Environment) -> Result<torchrun::Request> {
    let t = &cli.torchrun;
    if let Some(name) = &t.logs_specs {
        return Err(LaunchError::LogsSpecs(name.clone()).into());
    }
    // torchrun's start method is that of its agent's Python children: a script's workers are
    // subprocesses whatever it says (`run.py::config_from_args` uses it for --run-path only).
    if let Some(m) = t
        .start_method
        .as_deref()
        .filter(|m| *m != "spawn" && t.run_path)
    {
        return Err(LaunchError::StartMethod(m.to_string()).into());
    }
    if let Some(h) = t.event_log_handler.as_deref().filter(|h| *h != "null") {
        return Err(LaunchError::EventLogHandler(h.to_string()).into());
    }
    if t.standalone && (t.rdzv_endpoint.is_some() || t.rdzv_id.is_some()) {
        warn(
            TOOL,
            "--standalone ignores --rdzv_endpoint and --rdzv_id, as torchrun does: one node, a free local port, a fresh run id",
            env,
        );
    }
    Ok(torchrun::Request {
        only,
        nnodes: t.nnodes,
        nproc_per_node: t.nproc_per_node,
        node_rank: t.node_rank,
        master_addr: t.master_addr.clone(),
        master_port: t.master_port,
        rdzv_endpoint: t.rdzv_endpoint.clone().filter(|_| !t.standalone),
        rdzv_id: t.rdzv_id.clone().filter(|_| !t.standalone),
        standalone: t.standalone,
        local_addr: t.local_addr.clone(),
    })
}

/// The seconds between the stop signal and SIGKILL: `--grace_period` and `--shutdown_timeout` are one
/// setting (two different values are refused); else ACCEL_LAUNCH_GRACE, else torchrun's
/// TORCH_ELASTIC_SHUTDOWN_TIMEOUT (`launcher/api.py::LaunchConfig.__post_init__`), else 30.
fn grace(
    grace_period: Option<Wait>,
    shutdown_timeout: Option<u64>,
    env: &Environment,
) -> Result<Wait> {
    let shutdown = shutdown_timeout.map(|s| Wait::After(Duration::from_secs(s)));
    match (grace_period, shutdown) {
        (Some(g), Some(s)) if g != s => {
            return Err(LaunchError::GraceContradiction {
                grace: show(g),
                shutdown: show(s),
            }
            .into())
        }
        (Some(g), _) | (None, Some(g)) => return Ok(g),
        (None, None) => {}
    }
    if let Some(g) = env.non_empty(env_vars::ACCEL_LAUNCH_GRACE) {
        return crate::duration::parse_wait(g)
            .map_err(|e| LaunchError::GraceVar(e.to_string()).into());
    }
    if let Some(t) = env.non_empty(env_vars::TORCH_ELASTIC_SHUTDOWN_TIMEOUT) {
        return t
            .trim()
            .parse::<u64>()
            .map(|s| Wait::After(Duration::from_secs(s)))
            .map_err(|_| LaunchError::ShutdownTimeoutVar(t.to_string()).into());
    }
    Ok(Wait::After(Duration::from_secs(30)))
}

fn show(w: Wait) -> String {
    match w {
        Wait::Never => "inf".into(),
        Wait::After(d) => format!("{}", d.as_secs_f64()),
    }
}

/// `--signals_to_handle`: the supervisor's signal set and what the ranks find in
/// TORCHELASTIC_SIGNALS_TO_HANDLE (the text as given, as torchrun exports it).
fn signals(list: Option<&str>) -> Result<(SignalSet, String)> {
    match list {
        None => Ok((SignalSet::default(), torchrun::DEFAULT_SIGNALS.into())),
        Some(list) => {
            let named = torchrun::parse_signals(list).map_err(LaunchError::Signals)?;
            Ok((SignalSet::handle_only(&named), list.to_string()))
        }
    }
}

/// --hang_timeout, else ACCEL_LAUNCH_HANG_TIMEOUT; 0 is off.
fn hang_timeout(given: Option<Wait>, env: &Environment) -> Result<Option<Duration>> {
    let wait = match (given, env.non_empty(env_vars::ACCEL_LAUNCH_HANG_TIMEOUT)) {
        (Some(w), _) => w,
        (None, Some(s)) => crate::duration::parse_wait(s)
            .map_err(|e| LaunchError::HangTimeoutVar(e.to_string()))?,
        (None, None) => return Ok(None),
    };
    // 0 and `inf` (never declare a hang) both mean off.
    Ok(match wait {
        Wait::After(d) if !d.is_zero() => Some(d),
        _ => None,
    })
}

/// --straggler_threshold, else ACCEL_LAUNCH_STRAGGLER_THRESHOLD; 0 is off.
fn straggler(
    given: Option<f64>,
    window: Duration,
    env: &Environment,
) -> Result<Option<straggler::Settings>> {
    let threshold = match (
        given,
        env.non_empty(env_vars::ACCEL_LAUNCH_STRAGGLER_THRESHOLD),
    ) {
        (Some(t), _) => t,
        (None, Some(s)) => {
            straggler::parse_threshold(s).map_err(LaunchError::StragglerThresholdVar)?
        }
        (None, None) => return Ok(None),
    };
    Ok((threshold > 0.0).then_some(straggler::Settings { threshold, window }))
}

/// `--slurm_requeue` (or ACCEL_LAUNCH_SLURM_REQUEUE): the warning signal, `None` when off.
fn requeue_signal(cli: &LaunchCli, env: &Environment) -> Result<Option<i32>> {
    let on = cli.slurm_requeue
        || match env.non_empty(env_vars::ACCEL_LAUNCH_SLURM_REQUEUE) {
            None => false,
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => true,
                "0" | "false" | "no" | "off" => false,
                _ => return Err(LaunchError::SlurmRequeueVar(v.to_string()).into()),
            },
        };
    if !on {
        if cli.requeue_signal.is_some() {
            return Err(LaunchError::RequeueSignalAlone.into());
        }
        return Ok(None);
    }
    if let Some(s) = cli.requeue_signal.as_deref() {
        return crate::launch::requeue::parse_signal(s)
            .map(Some)
            .map_err(Error::from);
    }
    match env.non_empty(env_vars::ACCEL_LAUNCH_REQUEUE_SIGNAL) {
        None => Ok(Some(libc::SIGUSR1)),
        Some(s) => crate::launch::requeue::parse_signal(s)
            .map(Some)
            .map_err(|e| LaunchError::RequeueSignalVar(e.to_string()).into()),
    }
}

/// `--rdzv_conf` for the static rendezvous: its `timeout` (torchrun's static store waits that long
/// for the nodes, `static_tcp_rendezvous.create_rdzv_handler`) is the join timeout unless
/// --rdzv_timeout is given; other keys are c10d's and ignored, with a warning.
fn join_timeout(
    rdzv_conf: &str,
    rdzv_timeout: Option<Duration>,
    env: &Environment,
) -> Result<Duration> {
    let mut timeout = None;
    let mut ignored = Vec::new();
    for kv in rdzv_conf.split(',').filter(|s| !s.trim().is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .map(|(k, v)| (k.trim(), v.trim()))
            .filter(|(k, v)| !k.is_empty() && !v.is_empty())
            .ok_or_else(|| LaunchError::RdzvConf(kv.to_string()))?;
        if k == "timeout" {
            let secs = v
                .parse::<u64>()
                .map_err(|_| LaunchError::RdzvConfTimeout(v.to_string()))?;
            timeout = Some(Duration::from_secs(secs));
        } else {
            ignored.push(k.to_string());
        }
    }
    if !ignored.is_empty() {
        warn(
            TOOL,
            &format!("--rdzv_conf {} ignored: they configure torchrun's elastic rendezvous (--rdzv_backend c10d or etcd), not the static one", ignored.join(", ")),
            env,
        );
    }
    Ok(rdzv_timeout.or(timeout).unwrap_or(Duration::from_secs(300)))
}
