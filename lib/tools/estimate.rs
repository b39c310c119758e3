//! Runs `estimate`; filled in by its own issue.

use crate::cli::estimate::EstimateCli;
use crate::env_vars::Environment;
use crate::error::Result;
use crate::exit_status::ExitStatus;

pub fn run(_cli: EstimateCli, _env: &Environment) -> Result<ExitStatus> {
    super::not_built(crate::cli::estimate::doc().name)
}
