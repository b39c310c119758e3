//! Runs `test`; filled in by its own issue.

use crate::cli::test::TestCli;
use crate::env_vars::Environment;
use crate::error::Result;
use crate::exit_status::ExitStatus;

pub fn run(_cli: TestCli, _env: &Environment) -> Result<ExitStatus> {
    super::not_built(crate::cli::test::doc().name)
}
