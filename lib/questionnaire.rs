//! The interactive `accel-config` questionnaire (filled in below).

use std::path::Path;

use crate::env_vars::Environment;
use crate::error::Result;
use crate::exit_status::ExitStatus;

pub fn run(_path: &Path, _env: &Environment) -> Result<ExitStatus> {
    crate::tools::not_built("the accel-config questionnaire")
}
