//! `accel-launch --stacks PID`: the Python stacks of a running launcher's ranks, grouped, on stdout;
//! the run goes on.

use crate::env_vars::Environment;
use crate::error::{warn, Result};
use crate::exit_status::ExitStatus;
use crate::launch::hang::{autopsy, AUTOPSY_DUMP};

use super::error::LaunchError;
use super::TOOL;

/// `accel-launch --stacks PID`: the grouped stacks of a running launcher's ranks, on stdout.
pub fn print(pid: i32, env: &Environment) -> Result<ExitStatus> {
    if let Err(what) = autopsy::is_accel_launch(pid) {
        return Err(LaunchError::StacksNotLauncher { pid, what }.into());
    }
    let (ranks, interpreter) = autopsy::ranks_of_launcher(pid);
    if ranks.is_empty() {
        return Err(LaunchError::StacksNoRanks(pid).into());
    }
    let py_spy = autopsy::find_py_spy(env, interpreter.as_deref());
    if py_spy.is_none() {
        warn(TOOL, "py-spy not found (on PATH or next to the ranks' interpreter): only process states are known; `pip install py-spy`", env);
    }
    let stacks = autopsy::take_parallel(py_spy.as_deref(), &ranks, AUTOPSY_DUMP);
    let report = autopsy::report(&format!("{TOOL} {pid}"), &stacks);
    print!("{report}");
    Ok(ExitStatus::Success)
}
