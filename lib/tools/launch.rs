//! Runs `launch`; filled in by its own issue.

use crate::cli::launch::LaunchCli;
use crate::env_vars::Environment;
use crate::error::Result;
use crate::exit_status::ExitStatus;

pub fn run(_cli: LaunchCli, _env: &Environment) -> Result<ExitStatus> {
    super::not_built(crate::cli::launch::doc().name)
}
