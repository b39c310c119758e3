//! `accel-env -- CMD`: one task of a job started by the scheduler itself (`srun accel-env -- python
//! train.py`, one task per GPU), with no supervisor: the run is resolved for this task
//! ([`crate::launch::resolve`] in task scope: its contract from SLURM/MPI, accelerate's variables for the
//! resolved config) and the command is exec'd in place.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;

use crate::env_vars::Environment;
use crate::error::{Error, Result};
use crate::exit_status::ExitStatus;
use crate::launch::{self, RunInput, Scope};

/// Execs `command` with this task's contract; returns only on failure.
pub fn exec(
    command: &[OsString],
    config_file: Option<&Path>,
    env: &Environment,
) -> Result<ExitStatus> {
    let Some(program) = command.first() else {
        return Err(Error::msg(ExitStatus::Usage, "no command given after `--`"));
    };
    let run = launch::resolve(
        &RunInput {
            config_file,
            ..RunInput::new(Scope::Task)
        },
        env,
    )?;
    for w in &run.warnings {
        crate::error::warn("accel-env", w, env);
    }
    let vars = run.task_env(env);
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
