//! accel-launch's side of torchrun's command line ([`crate::cli::torchrun`]): which mode a command
//! line is in, what is refused and why, and what torchrun's flags do to the plan and the supervisor
//! (the grace period, the signal set, the log layout, `--virtual_local_rank`, `--numa_binding`, the
//! arguments of a run handed to the real torchrun). The semantics themselves are
//! [`crate::launch::torchrun`]'s and [`crate::launch::numa`]'s.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::launch::LaunchCli;
use crate::cli::torchrun::TorchrunFlags;
use crate::contract::EnvMap;
use crate::duration::Wait;
use crate::env_vars::{self, Environment};
use crate::error::{warn, Error, Result};
use crate::exit_status::ExitStatus;
use crate::launch::numa::{self, Sysfs};
use crate::launch::supervise::SignalSet;
use crate::launch::torchrun::logs::comma_separated_list;
use crate::launch::torchrun::{self, logs::LogsSpec, Request};
use crate::launch::{Plan, Run};

const TOOL: &str = "accel-launch";

fn usage(msg: impl Into<String>, hint: impl Into<String>) -> Error {
    Error::msg_hint(ExitStatus::Usage, msg, hint)
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

/// torchrun's command line as the run's resolution takes it; what accel-launch cannot do is refused
/// here, before anything is resolved.
pub(super) fn request(cli: &LaunchCli, env: &Environment) -> Result<Request> {
    let t = &cli.torchrun;
    if let Some(name) = &t.logs_specs {
        return Err(usage(
            format!("--logs_specs {name} is not supported: a torchrun.logs_specs entry point is Python code that torchrun loads into its agent, and accel-launch runs no Python agent"),
            "use --log_dir with -r/--redirects and -t/--tee (torchrun's default layout), or --log_template",
        ));
    }
    if let Some(m) = t.start_method.as_deref().filter(|m| *m != "spawn") {
        return Err(usage(
            format!("--start_method {m} is not supported: every rank is a fresh process of its own (torchrun's `spawn`, its default); torchrun's start method only applies to --run_path and Python functions, which would {m} from its Python agent"),
            "drop --start_method (or give spawn)",
        ));
    }
    if let Some(h) = t.event_log_handler.as_deref().filter(|h| *h != "null") {
        return Err(usage(
            format!("--event_log_handler {h} is not supported: a named handler is Python code registered in torchrun's agent"),
            "drop it (null, torchrun's default, logs no events), or use --report_json for how the run ended",
        ));
    }
    if t.standalone && (t.rdzv_endpoint.is_some() || t.rdzv_id.is_some()) {
        warn(
            TOOL,
            "--standalone ignores --rdzv_endpoint and --rdzv_id, as torchrun does: one node, a free local port, a fresh run id",
            env,
        );
    }
    Ok(Request {
        only: any_torchrun_flag(t) && !accelerate_asked(cli, env),
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
pub(super) fn grace(cli: &LaunchCli, env: &Environment) -> Result<Wait> {
    let shutdown = cli
        .torchrun
        .shutdown_timeout
        .map(|s| Wait::After(Duration::from_secs(s)));
    match (cli.grace_period, shutdown) {
        (Some(g), Some(s)) if g != s => {
            return Err(usage(
                format!(
                    "`--grace_period {}` and `--shutdown_timeout {}` contradict each other (both are the time between the stop signal and SIGKILL)",
                    show(g),
                    show(s)
                ),
                "give one of them",
            ))
        }
        (Some(g), _) | (None, Some(g)) => return Ok(g),
        (None, None) => {}
    }
    if let Some(g) = env.non_empty(env_vars::ACCEL_LAUNCH_GRACE) {
        return crate::duration::parse_wait(g).map_err(|e| {
            usage(
                format!("invalid {}: {e}", env_vars::ACCEL_LAUNCH_GRACE),
                "a number of seconds, e.g. 30, or inf never to SIGKILL",
            )
        });
    }
    if let Some(t) = env.non_empty(env_vars::TORCH_ELASTIC_SHUTDOWN_TIMEOUT) {
        return t
            .trim()
            .parse::<u64>()
            .map(|s| Wait::After(Duration::from_secs(s)))
            .map_err(|_| {
                usage(
                    format!(
                        "invalid {}: `{t}` is not a whole number of seconds",
                        env_vars::TORCH_ELASTIC_SHUTDOWN_TIMEOUT
                    ),
                    "e.g. 30",
                )
            });
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
pub(super) fn signals(cli: &LaunchCli) -> Result<(SignalSet, String)> {
    match &cli.torchrun.signals_to_handle {
        None => Ok((SignalSet::default(), torchrun::DEFAULT_SIGNALS.into())),
        Some(list) => {
            let named = torchrun::parse_signals(list).map_err(|e| {
                usage(
                    e,
                    "signal names as torchrun takes them, e.g. SIGTERM,SIGINT,SIGUSR1",
                )
            })?;
            Ok((SignalSet::handle_only(&named), list.clone()))
        }
    }
}

/// Whether the run uses torchrun's log layout: a run given only torchrun's flags, or one asking for
/// what only that layout has (`-r/--redirects`, the duplicate filters).
pub(super) fn uses_torchrun_logs(cli: &LaunchCli, only: bool) -> bool {
    only || cli.torchrun.redirects.is_some()
        || cli.torchrun.duplicate_stdout_filters.is_some()
        || cli.torchrun.duplicate_stderr_filters.is_some()
}

/// torchrun's log layout for this run (see [`crate::launch::torchrun::logs`]); `--log_template` is
/// accel's own layout, which cannot be both.
pub(super) fn logs_spec(cli: &LaunchCli, run_id: &str, env: &Environment) -> Result<LogsSpec> {
    if cli.log_template != crate::launch::supervise::DEFAULT_LOG_TEMPLATE {
        return Err(usage(
            "--log_template names accel's own log files; torchrun's command line (-r/--redirects, the duplicate filters, or only torchrun's flags) lays them out as torchrun does",
            "drop --log_template (files go to LOG_DIR/<run id>_<random>/attempt_N/<local rank>/), or use accelerate's flags",
        ));
    }
    let filter = cli.local_ranks_filter.as_ref().map(|s| {
        s.split(',')
            .filter_map(|x| x.trim().parse::<u32>().ok())
            .collect()
    });
    let list = |v: &Option<String>| v.as_deref().map(comma_separated_list).unwrap_or_default();
    Ok(LogsSpec {
        log_dir: cli.log_dir.clone(),
        run_id: run_id.to_string(),
        role: cli.role.clone(),
        redirects: cli.torchrun.redirects.clone().unwrap_or_else(|| "0".into()),
        tee: cli.tee.clone(),
        local_ranks_filter: filter,
        prefix_template: env
            .get(env_vars::TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)
            .map(str::to_string),
        duplicate_stdout: list(&cli.torchrun.duplicate_stdout_filters),
        duplicate_stderr: list(&cli.torchrun.duplicate_stderr_filters),
    })
}

/// What torchrun's flags change in each rank's plan: TORCHELASTIC_SIGNALS_TO_HANDLE, the NUMA
/// binding (before `--virtual_local_rank` narrows CUDA_VISIBLE_DEVICES), the virtual local rank.
pub(super) fn apply(
    cli: &LaunchCli,
    run: &Run,
    plan: &mut Plan,
    signals_env: &str,
    env: &Environment,
) -> Result<()> {
    if plan.topology.is_some() {
        for r in &mut plan.ranks {
            r.env.insert(
                env_vars::TORCHELASTIC_SIGNALS_TO_HANDLE.into(),
                signals_env.to_string(),
            );
        }
    }
    if let Some(mode) = cli.torchrun.numa_binding {
        bind_numa(mode, run, plan, env)?;
    }
    if cli.torchrun.virtual_local_rank {
        plan.virtual_local_rank(env).map_err(|e| {
            usage(
                e,
                "give CUDA_VISIBLE_DEVICES one GPU per local rank, or fewer ranks",
            )
        })?;
        if plan
            .ranks
            .iter()
            .any(|r| r.env.contains_key(env_vars::ACCELERATE_CPU_AFFINITY))
        {
            warn(TOOL, "--virtual_local_rank with enable_cpu_affinity: accelerate pins each rank to the CPUs NVML gives for GPU LOCAL_RANK, which is now 0 for every rank (use --numa_binding instead)", env);
        }
    }
    Ok(())
}

/// `--numa_binding`: each rank's CPUs (see [`crate::launch::numa`]). accelerate's
/// `--enable_cpu_affinity` would pin each rank's main thread again when it starts
/// (`accelerate/state.py` → `utils/environment.py::set_numa_affinity`, NVML's CPU set for GPU
/// LOCAL_RANK), undoing the binding: with both, ACCELERATE_CPU_AFFINITY is not exported.
fn bind_numa(
    mode: crate::launch::numa::NumaMode,
    run: &Run,
    plan: &mut Plan,
    env: &Environment,
) -> Result<()> {
    let found = crate::devices::detect_gpus(env).gpus;
    // The list the ranks inherit: accelerate's gpu_ids, else the launcher's.
    let mut visible_env = env.clone();
    if let Some(ids) = run.common.get(env_vars::CUDA_VISIBLE_DEVICES) {
        visible_env.set(env_vars::CUDA_VISIBLE_DEVICES, ids);
    }
    let gpus: Vec<String> = crate::devices::visible_list(&visible_env, &found)
        .iter()
        .map(|g| {
            g.pci_bus_id
                .as_deref()
                .and_then(numa::sysfs_pci_address)
                .ok_or_else(|| {
                    Error::msg(
                        ExitStatus::LauncherFailed,
                        format!(
                            "--numa_binding {}: nvidia-smi gives no PCI address for GPU {}",
                            mode.name(),
                            g.index
                        ),
                    )
                })
        })
        .collect::<Result<_>>()?;
    let root = env
        .non_empty(env_vars::ACCEL_SYSFS_ROOT)
        .map_or_else(|| PathBuf::from("/"), PathBuf::from);
    let sys = Sysfs::new(&root);
    for r in &mut plan.ranks {
        let cpus = numa::cpus_for(&sys, mode, &gpus, r.local_rank as usize).map_err(|e| {
            Error::msg_hint(
                ExitStatus::LauncherFailed,
                format!("--numa_binding {}: {e}", mode.name()),
                "every rank needs a GPU of its own (its local rank's among the visible GPUs) on a NUMA node with CPUs this launcher may use",
            )
        })?;
        r.numa_cpus = Some(cpus);
    }
    let mut dropped = false;
    for r in &mut plan.ranks {
        dropped |= r.env.remove(env_vars::ACCELERATE_CPU_AFFINITY).is_some();
    }
    if dropped {
        warn(TOOL, &format!("--numa_binding {} replaces enable_cpu_affinity: ACCELERATE_CPU_AFFINITY is not exported, since accelerate would pin each rank's main thread again to NVML's CPUs for its GPU", mode.name()), env);
    }
    Ok(())
}

/// `--rdzv_conf` for the static rendezvous: its `timeout` (torchrun's static store waits that long
/// for the nodes, `static_tcp_rendezvous.create_rdzv_handler`) is the join timeout unless
/// --rdzv_timeout is given; other keys are c10d's and ignored, with a warning.
pub(super) fn join_timeout(cli: &LaunchCli, env: &Environment) -> Result<Duration> {
    let mut timeout = None;
    let mut ignored = Vec::new();
    for kv in cli.rdzv_conf.split(',').filter(|s| !s.trim().is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .map(|(k, v)| (k.trim(), v.trim()))
            .filter(|(k, v)| !k.is_empty() && !v.is_empty())
            .ok_or_else(|| {
                usage(
                    format!("--rdzv_conf: `{kv}` is not KEY=VALUE"),
                    "e.g. --rdzv_conf timeout=900",
                )
            })?;
        if k == "timeout" {
            let secs = v.parse::<u64>().map_err(|_| {
                usage(
                    format!("--rdzv_conf timeout={v}: not a whole number of seconds"),
                    "e.g. --rdzv_conf timeout=900",
                )
            })?;
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
    Ok(cli
        .rdzv_timeout
        .or(timeout)
        .unwrap_or(Duration::from_secs(300)))
}

/// The worker argv of `--run_path`: torchrun runs `runpy.run_path(script, run_name="__main__")` with
/// `sys.argv = [script, *args]` in a child interpreter (`run.py::run_script_path`); so does this.
pub(super) fn run_path_argv(
    python: OsString,
    script: &OsString,
    rest: &[OsString],
) -> Vec<OsString> {
    let mut argv = vec![
        python,
        "-u".into(),
        "-c".into(),
        "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
            .into(),
        script.clone(),
    ];
    argv.extend(rest.iter().cloned());
    argv
}

/// A run given only torchrun's flags with an elastic rendezvous (`--rdzv_backend c10d` or `etcd`,
/// or a MIN:MAX node range) runs the real torchrun with the same command line.
pub(super) fn passthrough(cli: &LaunchCli, backend: &str) -> Vec<OsString> {
    let t = &cli.torchrun;
    let mut a: Vec<String> = Vec::new();
    let mut opt = |flag: &str, v: Option<String>| {
        if let Some(v) = v {
            a.push(flag.into());
            a.push(v);
        }
    };
    opt("--nnodes", t.nnodes.map(|n| n.to_string()));
    opt("--nproc-per-node", t.nproc_per_node.map(|n| n.to_string()));
    opt("--rdzv-backend", Some(backend.to_string()));
    opt("--rdzv-endpoint", t.rdzv_endpoint.clone());
    opt("--rdzv-id", t.rdzv_id.clone());
    opt(
        "--rdzv-conf",
        Some(cli.rdzv_conf.clone()).filter(|c| !c.is_empty()),
    );
    opt("--node-rank", t.node_rank.map(|n| n.to_string()));
    opt("--master-addr", t.master_addr.clone());
    opt("--master-port", t.master_port.map(|p| p.to_string()));
    opt("--local-addr", t.local_addr.clone());
    opt("--max-restarts", Some(cli.max_restarts.to_string()));
    opt(
        "--monitor-interval",
        Some(cli.monitor_interval.as_secs_f64().to_string()),
    );
    opt("--role", Some(cli.role.clone()));
    opt(
        "--log-dir",
        cli.log_dir.as_ref().map(|d| d.display().to_string()),
    );
    opt("--redirects", t.redirects.clone());
    opt("--tee", Some(cli.tee.clone()));
    opt("--local-ranks-filter", cli.local_ranks_filter.clone());
    opt(
        "--duplicate-stdout-filters",
        t.duplicate_stdout_filters.clone(),
    );
    opt(
        "--duplicate-stderr-filters",
        t.duplicate_stderr_filters.clone(),
    );
    opt(
        "--numa-binding",
        t.numa_binding.map(|m| m.name().to_string()),
    );
    opt("--signals-to-handle", t.signals_to_handle.clone());
    opt(
        "--shutdown-timeout",
        t.shutdown_timeout
            .or(match cli.grace_period {
                Some(Wait::After(d)) => Some(d.as_secs()),
                _ => None,
            })
            .map(|s| s.to_string()),
    );
    for (on, flag) in [
        (t.virtual_local_rank, "--virtual-local-rank"),
        (t.run_path, "--run-path"),
        (cli.module, "--module"),
        (cli.no_python, "--no-python"),
    ] {
        if on {
            a.push(flag.into());
        }
    }
    let mut out: Vec<OsString> = a.into_iter().map(OsString::from).collect();
    out.extend(cli.command.iter().cloned());
    out
}

/// torchrun's newer flags on a run handed to torchrun from accelerate's command line, as torchrun
/// spells them.
pub(super) fn extra_delegated(cli: &LaunchCli) -> Vec<String> {
    let t = &cli.torchrun;
    let mut a = Vec::new();
    let mut opt = |flag: &str, v: Option<String>| {
        if let Some(v) = v {
            a.push(flag.to_string());
            a.push(v);
        }
    };
    opt("--rdzv-id", t.rdzv_id.clone());
    opt("--local-addr", t.local_addr.clone());
    opt("--redirects", t.redirects.clone());
    opt(
        "--duplicate-stdout-filters",
        t.duplicate_stdout_filters.clone(),
    );
    opt(
        "--duplicate-stderr-filters",
        t.duplicate_stderr_filters.clone(),
    );
    opt(
        "--numa-binding",
        t.numa_binding.map(|m| m.name().to_string()),
    );
    opt("--signals-to-handle", t.signals_to_handle.clone());
    opt(
        "--shutdown-timeout",
        t.shutdown_timeout.map(|s| s.to_string()),
    );
    if t.virtual_local_rank {
        a.push("--virtual-local-rank".into());
    }
    if t.run_path {
        a.push("--run-path".into());
    }
    a
}

/// For a run handed to torchrun: no variables of accelerate's when only torchrun's flags were given.
pub(super) fn delegated_env(only: bool, common: &EnvMap) -> EnvMap {
    if only {
        EnvMap::new()
    } else {
        common.clone()
    }
}
