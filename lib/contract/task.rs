//! `accel-env -- CMD`: one task of a job started by the scheduler itself (`srun accel-env -- python
//! train.py`, one task per GPU), with no supervisor: derive this task's contract from SLURM/MPI, add
//! accelerate's variables for the resolved config, and exec the command in place.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;

use serde_json::Value;

use super::accelerate::{Machine, MergeInput};
use super::scheduler;
use super::{EnvMap, LaunchArgs, Paradigm};
use crate::config::{self, CliValue};
use crate::env_vars::{self, Environment};
use crate::error::{Error, Result};
use crate::exit_status::ExitStatus;

/// The variables this task gets: torchrun's contract and accelerate's export for the config.
pub fn task_env(config_file: Option<&Path>, env: &Environment) -> Result<EnvMap> {
    let place = scheduler::detect_task(env, 29500)?;
    let cli = [
        ("num_processes", place.world_size.to_string()),
        ("num_machines", place.topology.num_nodes.to_string()),
        ("machine_rank", place.topology.node_rank.to_string()),
    ]
    .map(|(k, v)| CliValue {
        key: k.into(),
        value: Value::from(v),
        flag: format!("the scheduler ({:?})", place.source),
    });
    let loaded = match config::choose_file(config_file, env) {
        Some((p, _)) => Some(config::load(&p)?),
        None => None,
    };
    let resolved = config::Resolved::resolve(loaded.as_ref(), env, &cli)?;
    let gpus = match env.get(env_vars::CUDA_VISIBLE_DEVICES) {
        Some(v) => v.split(',').filter(|s| !s.trim().is_empty()).count() as u32,
        None => crate::devices::detect_gpus(env).gpus.len() as u32,
    };
    let args = LaunchArgs::merge(MergeInput {
        resolved: &resolved,
        loaded: loaded.as_ref(),
        paradigm: Paradigm::default(),
        num_cpu_threads_per_process: None,
        machine: Machine {
            gpus,
            physical_cores: crate::devices::detect_cpu().physical_cores.max(1) as u32,
        },
        env,
    })?;
    let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
    let mut m = args.accelerate_env(env, &cwd)?;
    m.remove(env_vars::MASTER_ADDR);
    m.remove(env_vars::MASTER_PORT);
    m.extend(place.worker_env(env));
    // SLURM binding one GPU per task (--gpus-per-task=1) leaves each task one visible device: its
    // local rank must then be 0, as torchrun's --virtual-local-rank does.
    if gpus == 1 && place.local_world_size > 1 {
        m.insert(env_vars::LOCAL_RANK.into(), "0".into());
    }
    Ok(m)
}

/// Execs `command` with this task's contract; returns only on failure.
pub fn exec(
    command: &[OsString],
    config_file: Option<&Path>,
    env: &Environment,
) -> Result<ExitStatus> {
    let vars = task_env(config_file, env)?;
    let Some(program) = command.first() else {
        return Err(Error::msg(ExitStatus::Usage, "no command given after `--`"));
    };
    let err = std::process::Command::new(program)
        .args(&command[1..])
        .envs(&vars)
        .exec();
    let status = if err.kind() == std::io::ErrorKind::NotFound {
        ExitStatus::NotFound
    } else {
        ExitStatus::CannotExecute
    };
    Err(Error::msg(
        status,
        format!("cannot run `{}`: {err}", program.to_string_lossy()),
    ))
}
