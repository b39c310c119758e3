//! What each rank runs and finds beyond the plan's contract: the worker argv (torchrun's `python -u
//! script`, `-m`, `--no_python`, `--run_path`), and what the command line adds to every rank of the
//! [`Plan`] — TORCHELASTIC_SIGNALS_TO_HANDLE, the Flight Recorder's variables for the hang watch, the
//! NUMA binding and torchrun's `--virtual_local_rank`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::contract::{LaunchArgs, LaunchPath};
use crate::env_vars::{self, Environment};
use crate::error::{warn, Result};
use crate::launch::numa::{self, NumaMode, Sysfs};
use crate::launch::{Plan, Run};

use super::error::LaunchError;
use super::request::{Program, Request, Supervision};
use super::TOOL;

/// torchrun's worker argv (`torch/distributed/run.py::config_from_args`: `python -u script`); the
/// plain child of accelerate's simple path has no `-u`.
pub fn argv(req: &Request, args: &LaunchArgs, env: &Environment) -> Result<Vec<OsString>> {
    let p: &Program = &req.program;
    // torchrun's interpreter is PYTHON_EXEC, else its own (`run.py::config_from_args`).
    let python = || {
        env.non_empty(env_vars::PYTHON_EXEC)
            .filter(|_| req.torchrun.only)
            .map(PathBuf::from)
            .or_else(|| crate::python::find_python(env))
            .ok_or(LaunchError::NoPython)
    };
    let mut argv: Vec<OsString> = Vec::new();
    if p.run_path {
        // torchrun runs `runpy.run_path(script, run_name="__main__")` with `sys.argv = [script,
        // *args]` in a spawned child of its agent (`run.py::run_script_path`), which inherits the
        // agent's sys.path: its [0] is the directory of the torchrun script. So does this. It takes
        // precedence over --no_python, as in torchrun.
        let python = python()?;
        let torchrun_dir = env
            .get(env_vars::PATH)
            .and_then(|path| which::which_in("torchrun", Some(path), "/").ok())
            // Python's sys.path[0] is the directory of the script's target, symlinks resolved.
            .and_then(|t| std::fs::canonicalize(t).ok())
            .and_then(|t| t.parent().map(PathBuf::from))
            .or_else(|| python.parent().map(PathBuf::from))
            .unwrap_or_default();
        argv.extend([
            python.into_os_string(),
            "-u".into(),
            "-c".into(),
            "import runpy, sys; sys.path[0] = sys.argv[1]; sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')".into(),
            torchrun_dir.into_os_string(),
        ]);
    } else if !p.no_python {
        argv.push(python()?.into_os_string());
        if args.path != LaunchPath::Simple {
            argv.push("-u".into());
        }
        if p.module {
            argv.push("-m".into());
        }
    }
    argv.push(p.script.clone());
    argv.extend(p.args.iter().cloned());
    Ok(argv)
}

/// What the command line changes in each rank's plan: the Flight Recorder's variables when hangs or
/// stragglers are watched (the straggler watch's dumps under `fr_dir`), TORCHELASTIC_SIGNALS_TO_HANDLE, the NUMA binding (before `--virtual_local_rank` narrows
/// CUDA_VISIBLE_DEVICES), the virtual local rank.
pub fn apply(
    req: &Request,
    sup: &Supervision,
    run: &Run,
    plan: &mut Plan,
    fr_dir: Option<&Path>,
    env: &Environment,
) -> Result<()> {
    let mut fr = Vec::new();
    if sup.hang_timeout.is_some() {
        let dump_dir = req.output.log_dir.as_ref().map(|d| d.join("hang"));
        fr = crate::launch::hang::autopsy::flight_recorder_env(dump_dir.as_deref());
    }
    // The straggler watch's NCCL ranks: the same directory as the hang watch's where it has one.
    if let (Some(_), Some(d)) = (sup.straggler, fr_dir) {
        for (name, value) in crate::launch::straggler::nccl::env(d) {
            if !fr.iter().any(|(n, _)| *n == name) {
                fr.push((name, value));
            }
        }
    }
    for (name, value) in fr {
        // torch reads TORCH_FR_BUFFER_SIZE first: setting it would override the older name's value.
        let older = name == env_vars::TORCH_FR_BUFFER_SIZE
            && env.get(env_vars::TORCH_NCCL_TRACE_BUFFER_SIZE).is_some();
        if env.get(name).is_none() && !older {
            for r in &mut plan.ranks {
                r.env
                    .entry(name.to_string())
                    .or_insert_with(|| value.clone());
            }
        }
    }
    if plan.topology.is_some() {
        for r in &mut plan.ranks {
            r.env.insert(
                env_vars::TORCHELASTIC_SIGNALS_TO_HANDLE.into(),
                sup.signals_env.clone(),
            );
        }
    }
    let t = &req.torchrun_flags;
    if let Some(mode) = t.numa_binding {
        bind_numa(mode, run, plan, env)?;
    }
    if t.virtual_local_rank {
        plan.virtual_local_rank(env)
            .map_err(LaunchError::VirtualLocalRank)?;
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
fn bind_numa(mode: NumaMode, run: &Run, plan: &mut Plan, env: &Environment) -> Result<()> {
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
                .ok_or(LaunchError::NumaNoPci {
                    mode: mode.name(),
                    gpu: g.index,
                })
        })
        .collect::<Result<_, LaunchError>>()?;
    let root = env
        .non_empty(env_vars::ACCEL_SYSFS_ROOT)
        .map_or_else(|| PathBuf::from("/"), PathBuf::from);
    let sys = Sysfs::new(&root);
    for r in &mut plan.ranks {
        let cpus = numa::cpus_for(&sys, mode, &gpus, r.local_rank as usize).map_err(|e| {
            LaunchError::Numa {
                mode: mode.name(),
                why: e.to_string(),
            }
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

/// `--mixed_precision fp8` needs an FP8 backend in the ranks' Python: accelerate launch refuses the
/// run without one (`utils/launch.py`, every launch path: "FP8 is not available on this machine"),
/// before any rank starts, and so does accel-launch, asking the interpreter the ranks run.
pub fn fp8_available(env: &Environment) -> Result<()> {
    match crate::python::fp8_available(env) {
        Ok((true, _)) => Ok(()),
        Ok((false, python)) => Err(LaunchError::NoFp8(python.to_string()).into()),
        // No interpreter to ask: the ranks' own start will say so (--no_python runs no Python).
        Err(why) => {
            log::debug!("FP8 availability not checked: {why}");
            Ok(())
        }
    }
}

/// This node's ranks, as the plan builds them from the run, with what the command line adds.
pub fn plan(
    req: &Request,
    sup: &Supervision,
    run: &Run,
    topology: Option<crate::contract::Topology>,
    argv: &[OsString],
    fr_dir: Option<&Path>,
    env: &Environment,
) -> Result<Plan> {
    let mut plan = Plan::build(topology, argv, &run.common, run.port_auto, env);
    apply(req, sup, run, &mut plan, fr_dir, env)?;
    Ok(plan)
}

/// The supervisor's options for this node's ranks.
pub fn options(
    req: &Request,
    sup: &Supervision,
    torchrun_logs: Option<crate::launch::torchrun::logs::LogsSpec>,
    py_spy: Option<PathBuf>,
    fr_dir: Option<PathBuf>,
    control: Option<std::sync::Arc<crate::launch::control::Link>>,
    signals: Option<std::sync::Arc<crate::launch::supervise::Signals>>,
) -> crate::launch::Options {
    let o = &req.output;
    // torchrun's layout heads only tee'd lines itself; accel's own prefixes every console line.
    let prefix = o.rank_prefix.clone().or_else(|| {
        (o.tee != "0" && torchrun_logs.is_none()).then(|| "[{role}{local_rank}]:".to_string())
    });
    // torchrun's layout filters the console itself.
    let local_ranks = o
        .local_ranks
        .as_ref()
        .filter(|_| torchrun_logs.is_none())
        .map(|f| f.ranks.clone());
    crate::launch::Options {
        tool: TOOL,
        grace: sup.grace.as_duration(),
        monitor_interval: req.monitor_interval.clamp(
            std::time::Duration::from_millis(1),
            std::time::Duration::from_secs(60),
        ),
        max_restarts: req.max_restarts,
        log_dir: o.log_dir.clone(),
        log_template: o.log_template.clone(),
        console: crate::launch::Console {
            prefix,
            local_ranks,
        },
        tail_lines: 20,
        quiet: req.quiet,
        hang_timeout: sup.hang_timeout,
        straggler: sup.straggler,
        flight_recorder_dir: fr_dir,
        stacks_on_failure: req.stacks_on_failure,
        py_spy,
        control,
        requeue_signal: req.requeue_signal,
        handled: sup.signals.clone(),
        signals,
        torchrun_logs,
        ..crate::launch::Options::default()
    }
}
