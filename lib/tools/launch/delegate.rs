//! A run handed to the launcher that owns it: torchrun for an elastic rendezvous (`--rdzv_backend
//! c10d` or `etcd`), deepspeed for a multi-node hostfile run, mpirun for `--mpirun_hostfile`
//! (`accelerate/commands/launch.py::launch_command` makes the same choice). The hand-off is one
//! [`Handoff`]: the options as fields, written out by one table of each launcher's spellings, so a
//! flag given is never dropped by one of several hand-written argv builders. It is exec'd (the other
//! launcher then owns the job and its signals) or, with `--dry-run`, printed.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use crate::contract::{EnvMap, LaunchArgs};
use crate::duration::Wait;
use crate::env_vars::{self, Environment};
use crate::error::{warn, Result};
use crate::exit_status::ExitStatus;
use crate::launch::supervise::DEFAULT_LOG_TEMPLATE;
use crate::launch::{Engine, Run};

use super::error::LaunchError;
use super::request::Request;
use super::TOOL;

/// The launchers a run is handed to, as columns of [`SPELLINGS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    Torchrun,
    DeepSpeed,
    OpenMpi,
    /// MPICH, Intel MPI and MVAPICH's `mpiexec` dialect.
    Mpich,
}

impl Launcher {
    fn column(self) -> usize {
        self as usize
    }

    fn program(self, mpi: &'static str) -> &'static str {
        match self {
            Launcher::Torchrun => "torchrun",
            Launcher::DeepSpeed => "deepspeed",
            Launcher::OpenMpi | Launcher::Mpich => mpi,
        }
    }
}

/// An option of a hand-off, whatever launcher takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Field {
    Hostfile,
    Nnodes,
    NprocPerNode,
    WorldSize,
    BindTo,
    RdzvBackend,
    RdzvEndpoint,
    RdzvId,
    RdzvConf,
    NodeRank,
    NoSsh,
    NoLocalRank,
    DeepSpeedLauncher,
    Exclude,
    Include,
    MasterAddr,
    MasterPort,
    LocalAddr,
    MaxRestarts,
    MonitorInterval,
    Role,
    LogDir,
    Redirects,
    Tee,
    LocalRanksFilter,
    DuplicateStdoutFilters,
    DuplicateStderrFilters,
    NumaBinding,
    SignalsToHandle,
    ShutdownTimeout,
    VirtualLocalRank,
    RunPath,
    Module,
    NoPython,
}

/// Each field as torchrun (torch 2.13's `torch/distributed/run.py::get_args_parser`, its first
/// spelling), deepspeed (`deepspeed/launcher/runner.py::parse_args`), Open MPI's mpirun and MPICH's
/// mpiexec (`accelerate/utils/launch.py::_get_mpirun_args`) spell it, in the order they are written;
/// `None`: that launcher has no such option.
const SPELLINGS: &[(Field, [Option<&str>; 4])] = {
    const fn t(s: &'static str) -> [Option<&'static str>; 4] {
        [Some(s), None, None, None]
    }
    use Field::*;
    &[
        (
            Hostfile,
            [None, Some("--hostfile"), Some("--hostfile"), Some("-f")],
        ),
        (Nnodes, t("--nnodes")),
        (
            NprocPerNode,
            [
                Some("--nproc-per-node"),
                Some("--num_gpus"),
                Some("--npernode"),
                Some("-ppn"),
            ],
        ),
        (WorldSize, [None, None, Some("-n"), Some("-n")]),
        (BindTo, [None, None, Some("--bind-to"), None]),
        (RdzvBackend, t("--rdzv-backend")),
        (RdzvEndpoint, t("--rdzv-endpoint")),
        (RdzvId, t("--rdzv-id")),
        (RdzvConf, t("--rdzv-conf")),
        (
            NodeRank,
            [Some("--node-rank"), Some("--node_rank"), None, None],
        ),
        (NoSsh, [None, Some("--no_ssh"), None, None]),
        (NoLocalRank, [None, Some("--no_local_rank"), None, None]),
        (DeepSpeedLauncher, [None, Some("--launcher"), None, None]),
        (Exclude, [None, Some("--exclude"), None, None]),
        (Include, [None, Some("--include"), None, None]),
        (
            MasterAddr,
            [Some("--master-addr"), Some("--master_addr"), None, None],
        ),
        (
            MasterPort,
            [Some("--master-port"), Some("--master_port"), None, None],
        ),
        (LocalAddr, t("--local-addr")),
        (MaxRestarts, t("--max-restarts")),
        (MonitorInterval, t("--monitor-interval")),
        (Role, t("--role")),
        (LogDir, t("--log-dir")),
        (Redirects, t("--redirects")),
        (Tee, t("--tee")),
        (LocalRanksFilter, t("--local-ranks-filter")),
        (DuplicateStdoutFilters, t("--duplicate-stdout-filters")),
        (DuplicateStderrFilters, t("--duplicate-stderr-filters")),
        (NumaBinding, t("--numa-binding")),
        (SignalsToHandle, t("--signals-to-handle")),
        (ShutdownTimeout, t("--shutdown-timeout")),
        (VirtualLocalRank, t("--virtual-local-rank")),
        (RunPath, t("--run-path")),
        (Module, [Some("--module"), Some("--module"), None, None]),
        (
            NoPython,
            [Some("--no-python"), Some("--no_python"), None, None],
        ),
    ]
};

/// A field's value: an option's text, or a switch given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Text(String),
    Switch,
}

/// A run handed to another launcher: its options, what follows them, and the variables it gets.
#[derive(Debug, Clone)]
pub struct Handoff {
    pub launcher: Launcher,
    /// The program as found for the MPI launchers (`mpirun` or `mpiexec`).
    mpi_program: &'static str,
    pub fields: BTreeMap<Field, Value>,
    /// The worker command (script and its arguments; mpirun's the whole worker argv).
    pub rest: Vec<OsString>,
    pub env: EnvMap,
}

impl Handoff {
    fn new(launcher: Launcher, rest: Vec<OsString>, env: EnvMap) -> Handoff {
        Handoff {
            launcher,
            mpi_program: "mpirun",
            fields: BTreeMap::new(),
            rest,
            env,
        }
    }

    fn set(&mut self, field: Field, value: impl ToString) -> &mut Self {
        self.fields.insert(field, Value::Text(value.to_string()));
        self
    }

    fn set_opt(&mut self, field: Field, value: Option<impl ToString>) -> &mut Self {
        if let Some(v) = value {
            self.set(field, v);
        }
        self
    }

    fn switch(&mut self, field: Field, on: bool) -> &mut Self {
        if on {
            self.fields.insert(field, Value::Switch);
        }
        self
    }

    /// The command line after the program, through [`SPELLINGS`].
    pub fn argv(&self) -> Vec<OsString> {
        let col = self.launcher.column();
        let mut out: Vec<OsString> = Vec::new();
        for (field, spelled) in SPELLINGS {
            let Some(value) = self.fields.get(field) else {
                continue;
            };
            // A field this launcher cannot take is a mistake of the table or of the builder below;
            // the unit tests hold every builder to the table.
            let Some(flag) = spelled[col] else {
                debug_assert!(false, "{field:?} has no spelling for {:?}", self.launcher);
                continue;
            };
            out.push(flag.into());
            if let Value::Text(v) = value {
                out.push(v.into());
            }
        }
        out.extend(self.rest.iter().cloned());
        out
    }

    pub fn program(&self) -> &'static str {
        self.launcher.program(self.mpi_program)
    }
}

/// The hand-off of a run another launcher owns; `None` when accel-launch starts the ranks itself.
pub fn handoff(
    req: &Request,
    run: &Run,
    worker_argv: &[OsString],
    env: &Environment,
) -> Result<Option<Handoff>> {
    if run.engine != Engine::Own && req.requeue_signal.is_some() {
        return Err(LaunchError::RequeueDelegated.into());
    }
    let args = &run.args;
    Ok(Some(match &run.engine {
        Engine::Own => return Ok(None),
        Engine::Torchrun if req.torchrun.only => torchrun_as_given(req, &args.rdzv_backend),
        Engine::Torchrun => torchrun_for_accelerate(req, args, run.common.clone())?,
        Engine::DeepSpeed { launcher } => deepspeed(req, args, launcher, run.common.clone())?,
        Engine::Mpirun { hostfile } => mpirun(env, args, hostfile, worker_argv, &run.common),
    }))
}

/// The worker command a launcher of Python scripts runs: the script and its arguments.
fn script_and_args(req: &Request) -> Vec<OsString> {
    let mut rest = vec![req.program.script.clone()];
    rest.extend(req.program.args.iter().cloned());
    rest
}

/// A run given only torchrun's flags with an elastic rendezvous (`--rdzv_backend c10d` or `etcd`,
/// or a MIN:MAX node range) runs the real torchrun with the same command line, and none of
/// accelerate's variables.
fn torchrun_as_given(req: &Request, backend: &str) -> Handoff {
    let t = &req.torchrun_flags;
    let o = &req.output;
    let mut h = Handoff::new(Launcher::Torchrun, script_and_args(req), EnvMap::new());
    let shutdown = t.shutdown_timeout.or(match req.grace_period {
        Some(Wait::After(d)) => Some(d.as_secs()),
        _ => None,
    });
    h.set_opt(Field::Nnodes, t.nnodes)
        .set_opt(Field::NprocPerNode, t.nproc_per_node)
        .set(Field::RdzvBackend, backend)
        .set_opt(Field::RdzvEndpoint, t.rdzv_endpoint.as_ref())
        .set_opt(Field::RdzvId, t.rdzv_id.as_ref())
        .set_opt(
            Field::RdzvConf,
            Some(&req.rdzv_conf).filter(|c| !c.is_empty()),
        )
        .set_opt(Field::NodeRank, t.node_rank)
        .set_opt(Field::MasterAddr, t.master_addr.as_ref())
        .set_opt(Field::MasterPort, t.master_port)
        .set_opt(Field::LocalAddr, t.local_addr.as_ref())
        .set(Field::MaxRestarts, req.max_restarts)
        .set(Field::MonitorInterval, req.monitor_interval.as_secs_f64())
        .set(Field::Role, &req.role)
        .set_opt(Field::LogDir, o.log_dir.as_ref().map(|d| d.display()))
        .set_opt(Field::Redirects, t.redirects.as_ref())
        .set(Field::Tee, &o.tee)
        .set_opt(
            Field::LocalRanksFilter,
            o.local_ranks.as_ref().map(|f| &f.text),
        )
        .set_opt(Field::ShutdownTimeout, shutdown);
    torchrun_only_flags(&mut h, req);
    h
}

/// The flags only torchrun has that a hand-off passes on as given, whichever command line it came
/// from; `--shutdown_timeout` is handled by the caller (a command line of torchrun's flags only
/// also passes `--grace_period` as torchrun's).
fn torchrun_only_flags(h: &mut Handoff, req: &Request) {
    let t = &req.torchrun_flags;
    h.set_opt(Field::RdzvId, t.rdzv_id.as_ref())
        .set_opt(Field::LocalAddr, t.local_addr.as_ref())
        .set_opt(Field::Redirects, t.redirects.as_ref())
        .set_opt(
            Field::DuplicateStdoutFilters,
            t.duplicate_stdout_filters.as_ref(),
        )
        .set_opt(
            Field::DuplicateStderrFilters,
            t.duplicate_stderr_filters.as_ref(),
        )
        .set_opt(Field::NumaBinding, t.numa_binding.map(|m| m.name()))
        .set_opt(Field::SignalsToHandle, t.signals_to_handle.as_ref())
        .switch(Field::VirtualLocalRank, t.virtual_local_rank)
        .switch(Field::RunPath, t.run_path)
        .switch(Field::Module, req.program.module)
        .switch(Field::NoPython, req.program.no_python);
}

/// torchrun for an elastic rendezvous of accelerate's run, with accel's console and log options
/// translated to torchrun's own (`torch/distributed/run.py`): `--log_dir` writes files there and
/// still shows the console (`--tee 3`); `--rank_prefix` becomes
/// `TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE` (torchrun prefixes only teed output, so it tees);
/// `--local_ranks_filter` is torchrun's own (likewise on teed output). What torchrun cannot do is
/// refused rather than dropped.
fn torchrun_for_accelerate(req: &Request, args: &LaunchArgs, mut env: EnvMap) -> Result<Handoff> {
    let o = &req.output;
    if o.log_template != DEFAULT_LOG_TEMPLATE {
        return Err(LaunchError::LogTemplateWithElastic(args.rdzv_backend.clone()).into());
    }
    let mut tee = o.tee.clone();
    if let Some(p) = &o.rank_prefix {
        env.insert(
            env_vars::TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE.into(),
            torchrun_prefix(p, &args.rdzv_backend)?,
        );
        tee = "3".into();
    }
    if o.log_dir.is_some() || o.local_ranks.is_some() {
        tee = "3".into();
    }
    let ip = args.main_process_ip.as_deref().unwrap_or("127.0.0.1");
    let port = args.main_process_port.filter(|p| *p != 0).unwrap_or(29400);
    let t = &req.torchrun_flags;
    let mut h = Handoff::new(Launcher::Torchrun, script_and_args(req), env);
    h.set(
        Field::Nnodes,
        t.nnodes
            .map_or_else(|| args.num_machines.to_string(), |n| n.to_string()),
    )
    .set(Field::NprocPerNode, args.num_local_processes())
    .set(Field::RdzvBackend, &args.rdzv_backend)
    .set(Field::RdzvEndpoint, format!("{ip}:{port}"))
    .set_opt(
        Field::RdzvConf,
        Some(&req.rdzv_conf).filter(|c| !c.is_empty()),
    )
    .set(Field::MaxRestarts, req.max_restarts)
    .set(Field::MonitorInterval, req.monitor_interval.as_secs_f64())
    .set(Field::Role, &req.role)
    .set_opt(Field::LogDir, o.log_dir.as_ref().map(|d| d.display()))
    .set(Field::Tee, tee)
    .set_opt(
        Field::LocalRanksFilter,
        o.local_ranks.as_ref().map(|f| &f.text),
    )
    .set_opt(Field::ShutdownTimeout, t.shutdown_timeout);
    torchrun_only_flags(&mut h, req);
    Ok(h)
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
                return Err(LaunchError::RankPrefixForTorchrun {
                    placeholder: other.to_string(),
                    backend: backend.to_string(),
                }
                .into())
            }
        };
        out.push_str(macro_);
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The deepspeed launcher over a hostfile (`accelerate/utils/launch.py::prepare_deepspeed_cmd_env`).
fn deepspeed(req: &Request, args: &LaunchArgs, launcher: &str, env: EnvMap) -> Result<Handoff> {
    let s = |k: &str| {
        args.values
            .get(k)
            .and_then(serde_json::Value::as_str)
            .map(str::to_string)
    };
    let hostfile = s("deepspeed_hostfile").ok_or(LaunchError::DeepSpeedHostfile)?;
    let nossh = launcher == "nossh";
    let mut h = Handoff::new(Launcher::DeepSpeed, script_and_args(req), env);
    h.set(Field::Hostfile, hostfile);
    if nossh {
        h.set(Field::NodeRank, args.machine_rank.unwrap_or(0))
            .switch(Field::NoSsh, true);
    } else {
        h.switch(Field::NoLocalRank, true)
            .set(Field::DeepSpeedLauncher, launcher);
    }
    if let Some(x) = s("deepspeed_exclusion_filter") {
        h.set(Field::Exclude, x);
    } else if let Some(x) = s("deepspeed_inclusion_filter") {
        h.set(Field::Include, x);
    } else {
        h.set(Field::NprocPerNode, args.num_local_processes());
    }
    h.set_opt(Field::MasterAddr, args.main_process_ip.as_ref())
        .set(
            Field::MasterPort,
            args.main_process_port.filter(|p| *p != 0).unwrap_or(29500),
        )
        .switch(Field::Module, req.program.module)
        .switch(Field::NoPython, req.program.no_python);
    Ok(h)
}

/// mpirun over a hostfile, in the dialect of the MPI found first on PATH
/// (`accelerate/utils/launch.py::_get_mpirun_args`): Open MPI's `--hostfile/--npernode/--bind-to`,
/// or MPICH/Intel MPI/MVAPICH's `-f/-ppn`. accelerate exports the rendezvous for the ranks mpirun
/// starts (`accelerate/utils/launch.py::prepare_simple_launcher_cmd_env`).
fn mpirun(
    env: &Environment,
    args: &LaunchArgs,
    hostfile: &str,
    worker_argv: &[OsString],
    common: &EnvMap,
) -> Handoff {
    let path = env.get(env_vars::PATH);
    let program = ["mpirun", "mpiexec"]
        .into_iter()
        .find(|p| path.is_some_and(|path| which::which_in(p, Some(path), "/").is_ok()))
        .unwrap_or("mpirun");
    let open_mpi = path
        .and_then(|path| which::which_in(program, Some(path), "/").ok())
        .and_then(|p| std::process::Command::new(p).arg("--version").output().ok())
        .is_none_or(|o| String::from_utf8_lossy(&o.stdout).contains("Open MPI"));
    let mut vars = common.clone();
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
    let launcher = if open_mpi {
        Launcher::OpenMpi
    } else {
        Launcher::Mpich
    };
    let mut h = Handoff::new(launcher, worker_argv.to_vec(), vars);
    h.mpi_program = program;
    h.set(Field::Hostfile, hostfile)
        .set(Field::NprocPerNode, args.num_local_processes())
        .set(Field::WorldSize, args.num_processes);
    if open_mpi {
        h.set(Field::BindTo, "socket");
    }
    h
}

/// Execs the launcher with its variables (it then owns the job and its signals), or prints what
/// would be run.
pub fn exec(h: &Handoff, env: &Environment, dry_run: bool) -> Result<ExitStatus> {
    let program = h.program();
    let path = env
        .get(env_vars::PATH)
        .and_then(|p| which::which_in(program, Some(p), "/").ok())
        .ok_or(LaunchError::NotInstalled(program))?;
    let args = h.argv();
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
        for (k, v) in &h.env {
            text.push_str(&format!("{k}={v}\n"));
        }
        crate::tools::print(&text)?;
        return Ok(ExitStatus::Success);
    }
    if h.launcher == Launcher::DeepSpeed {
        write_deepspeed_env(&h.env, env)?;
    }
    let err = std::process::Command::new(&path)
        .args(&args)
        .envs(&h.env)
        .exec();
    Err(LaunchError::CannotRun {
        program: path.display().to_string(),
        error: err.to_string(),
    }
    .into())
}

/// The deepspeed launcher ships this file's variables to every node.
fn write_deepspeed_env(common: &EnvMap, env: &Environment) -> Result<()> {
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
    Ok(())
}

pub(super) fn shell_quote(s: &OsStr) -> String {
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

#[cfg(test)]
mod tests {
    use clap::{Args, Parser};

    use super::*;
    use crate::cli::launch::LaunchCli;
    use crate::cli::torchrun::TorchrunFlags;
    use crate::config::Resolved;
    use crate::contract::accelerate::{Machine, MergeInput, Paradigm};

    fn parse(args: &[&str]) -> LaunchCli {
        LaunchCli::try_parse_from(std::iter::once("accel-launch").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    fn request(args: &[&str]) -> Request {
        Request::from_cli(parse(args), &Environment::default())
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    /// A value, different from its default, for every flag of torchrun's that accel-launch takes
    /// (torch 2.13's `run.py::get_args_parser`), by clap id.
    const SAMPLES: &[(&str, Option<&str>)] = &[
        ("nnodes", Some("1:3")),
        ("nproc_per_node", Some("2")),
        ("node_rank", Some("1")),
        ("master_addr", Some("10.1.2.3")),
        ("master_port", Some("29555")),
        ("rdzv_endpoint", Some("h:29400")),
        ("rdzv_id", Some("job7")),
        ("run_path", None),
        ("redirects", Some("0:3,1:1")),
        ("local_addr", Some("10.9.9.9")),
        ("signals_to_handle", Some("SIGTERM,SIGUSR1")),
        ("shutdown_timeout", Some("7")),
        ("virtual_local_rank", None),
        ("duplicate_stdout_filters", Some("err,,x")),
        ("duplicate_stderr_filters", Some("warn")),
        ("numa_binding", Some("socket")),
    ];

    /// torchrun's flags that are never handed on, and why.
    const NOT_HANDED_ON: &[(&str, &str)] = &[
        (
            "standalone",
            "a --standalone run is one node, which accel-launch runs itself",
        ),
        (
            "start_method",
            "no effect on a script, as in torchrun; with --run_path only spawn, its default",
        ),
        ("logs_specs", "refused"),
        (
            "event_log_handler",
            "only null, torchrun's default, is taken",
        ),
    ];

    /// The flags accelerate launch and torchrun share, with values different from their defaults.
    const SHARED: &[&str] = &[
        "--max_restarts",
        "3",
        "--monitor_interval",
        "0.5",
        "--role",
        "trainer",
        "--log_dir",
        "/tmp/logs",
        "--tee",
        "2",
        "--local_ranks_filter",
        "0,1",
        "--rdzv_conf",
        "join_timeout=9",
        "--rdzv_backend",
        "c10d",
    ];

    /// Every torchrun flag on one command line (`--module` or `--no_python` as `program`).
    fn every_flag(program: &str) -> Vec<String> {
        let mut argv: Vec<String> = SHARED.iter().map(|s| s.to_string()).collect();
        for (id, value) in SAMPLES {
            argv.push(format!("--{id}"));
            argv.extend(value.map(str::to_string));
        }
        argv.extend([program.into(), "train.py".into(), "--lr".into(), "1".into()]);
        argv
    }

    /// What a command line says of torchrun's flags and the shared ones, for comparison.
    fn torchrun_view(cli: &LaunchCli) -> String {
        format!(
            "{:?} {} {:?} {} {:?} {} {:?} {:?} {} {} {:?}",
            cli.torchrun,
            cli.max_restarts,
            cli.monitor_interval,
            cli.role,
            cli.log_dir,
            cli.tee,
            cli.local_ranks_filter,
            cli.rdzv_conf,
            cli.module,
            cli.no_python,
            cli.command,
        )
    }

    /// The sample table covers every flag torchrun has and accel-launch takes: a flag added to
    /// [`TorchrunFlags`] without a sample here (and so without a check that it is handed on) fails.
    #[test]
    fn every_torchrun_flag_has_a_sample_or_a_reason() {
        let cmd = TorchrunFlags::augment_args(clap::Command::new("t"));
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            assert!(
                SAMPLES.iter().any(|(s, _)| *s == id)
                    || NOT_HANDED_ON.iter().any(|(s, _)| *s == id),
                "torchrun's --{id} has no sample: add one and hand it on, or say why it is not"
            );
        }
    }

    /// A command line of torchrun's flags only, handed to the real torchrun: each flag reaches it
    /// with its value (torchrun's spelling, read back by the same parser accel-launch uses, which
    /// takes torchrun's command line).
    #[test]
    fn every_torchrun_flag_survives_delegation_with_its_value() {
        for program in ["--module", "--no_python"] {
            let given = every_flag(program);
            let given: Vec<&str> = given.iter().map(String::as_str).collect();
            let req = request(&given);
            assert!(req.torchrun.only, "torchrun's flags only");
            let h = torchrun_as_given(&req, "c10d");
            let argv: Vec<String> = h
                .argv()
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            let back: Vec<&str> = argv.iter().map(String::as_str).collect();
            let (before, after) = (parse(&given), parse(&back));
            assert_eq!(torchrun_view(&after), torchrun_view(&before), "{argv:?}");
            assert_eq!(
                after.config_values()[0].value,
                serde_json::Value::from("c10d"),
                "{argv:?}"
            );
            assert!(h.env.is_empty(), "no accelerate variables: {:?}", h.env);
        }
    }

    /// `--grace_period` is torchrun's `--shutdown-timeout` on a command line of torchrun's flags.
    #[test]
    fn a_grace_period_is_handed_on_as_the_shutdown_timeout() {
        let req = request(&[
            "--nnodes",
            "1:2",
            "--rdzv_backend",
            "c10d",
            "--grace_period",
            "9",
            "x.py",
        ]);
        let argv = torchrun_as_given(&req, "c10d").argv();
        let pos = argv.iter().position(|a| a == "--shutdown-timeout");
        assert_eq!(
            pos.map(|i| argv[i + 1].clone()),
            Some("9".into()),
            "{argv:?}"
        );
    }

    fn merged(req: &Request) -> LaunchArgs {
        let env = Environment::default();
        let resolved = Resolved::resolve(None, &env, &req.config_values).unwrap();
        LaunchArgs::merge(MergeInput {
            view: &resolved.view().unwrap(),
            loaded: None,
            paradigm: Paradigm {
                cpu: true,
                ..Paradigm::default()
            },
            num_cpu_threads_per_process: None,
            machine: Machine {
                gpus: 0,
                physical_cores: 2,
                nodes: 1,
                procs_per_node: None,
                own_ranks: None,
            },
            env: &env,
        })
        .unwrap()
    }

    /// accelerate's run handed to torchrun (an elastic rendezvous): its settings become torchrun's
    /// world flags, and every flag only torchrun has reaches it with its value.
    #[test]
    fn torchrun_flags_of_an_accelerate_run_survive_delegation() {
        for program in ["--module", "--no_python"] {
            let mut given = vec!["--cpu", "--num_processes", "4", "--num_machines", "2"];
            given.extend(["--main_process_ip", "10.0.0.1"]);
            let flags = every_flag(program);
            // The world comes from accelerate's flags here; the rest of torchrun's stay.
            let skip = [
                "--nproc_per_node",
                "--node_rank",
                "--master_addr",
                "--master_port",
                "--rdzv_endpoint",
                "--nnodes",
            ];
            let mut it = flags.iter().map(String::as_str);
            while let Some(f) = it.next() {
                if skip.contains(&f) {
                    it.next();
                } else {
                    given.push(f);
                }
            }
            let req = request(&given);
            assert!(!req.torchrun.only);
            let args = merged(&req);
            let h = torchrun_for_accelerate(&req, &args, EnvMap::new()).unwrap();
            let argv: Vec<String> = h
                .argv()
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            let text = argv.join(" ");
            assert!(
                text.starts_with("--nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 10.0.0.1:29400 "),
                "{text}"
            );
            let back: Vec<&str> = argv.iter().map(String::as_str).collect();
            let (before, after) = (parse(&given), parse(&back));
            let t = (&before.torchrun, &after.torchrun);
            assert_eq!(
                format!(
                    "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {} {} {:?}",
                    t.0.rdzv_id,
                    t.0.local_addr,
                    t.0.redirects,
                    t.0.duplicate_stdout_filters,
                    t.0.duplicate_stderr_filters,
                    t.0.numa_binding,
                    t.0.signals_to_handle,
                    t.0.virtual_local_rank,
                    t.0.run_path,
                    t.0.shutdown_timeout
                ),
                format!(
                    "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {} {} {:?}",
                    t.1.rdzv_id,
                    t.1.local_addr,
                    t.1.redirects,
                    t.1.duplicate_stdout_filters,
                    t.1.duplicate_stderr_filters,
                    t.1.numa_binding,
                    t.1.signals_to_handle,
                    t.1.virtual_local_rank,
                    t.1.run_path,
                    t.1.shutdown_timeout
                ),
                "{text}"
            );
            // --log_dir and --local_ranks_filter make torchrun tee (it prefixes and filters only
            // tee'd output).
            assert_eq!(
                (
                    after.max_restarts,
                    after.monitor_interval,
                    &after.role,
                    &after.log_dir,
                    after.tee.as_str()
                ),
                (
                    before.max_restarts,
                    before.monitor_interval,
                    &before.role,
                    &before.log_dir,
                    "3"
                ),
                "{text}"
            );
            assert_eq!(
                after.local_ranks_filter, before.local_ranks_filter,
                "{text}"
            );
            assert_eq!(
                (after.module, after.no_python),
                (before.module, before.no_python)
            );
            assert_eq!(after.rdzv_conf, before.rdzv_conf);
            assert_eq!(after.command, before.command);
        }
    }

    /// Every field a hand-off can set has a spelling for the launchers that take it, and the writer
    /// never writes a field twice.
    #[test]
    fn spellings_are_one_table_without_repeats() {
        let mut seen = std::collections::BTreeSet::new();
        for (field, spelled) in SPELLINGS {
            assert!(seen.insert(*field), "{field:?} twice");
            assert!(
                spelled.iter().any(Option::is_some),
                "{field:?} has no spelling"
            );
        }
    }
}
