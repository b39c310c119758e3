//! Runs `merge`; filled in by its own issue.

use crate::cli::merge::MergeCli;
use crate::env_vars::Environment;
use crate::error::Result;
use crate::exit_status::ExitStatus;

pub fn run(_cli: MergeCli, _env: &Environment) -> Result<ExitStatus> {
    super::not_built(crate::cli::merge::doc().name)
}
