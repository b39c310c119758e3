//! `accel-estimate-memory`: command-line definition. (Filled in by its own issue; until then the tool says so.)

use std::ffi::OsString;

use clap::Parser;

use super::ToolDoc;
use crate::env_vars::Group;

/// Estimate model memory per dtype and per GPU, offline.
#[derive(Debug, Parser)]
#[command(
    name = "accel-estimate-memory",
    version,
    about,
    long_about,
    max_term_width = 100
)]
pub struct EstimateCli {
    /// Arguments.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<OsString>,
}

pub fn doc() -> ToolDoc {
    ToolDoc {
        name: "accel-estimate-memory",
        command: super::command_of::<EstimateCli>,
        env_groups: &[Group::Accel, Group::Output],
        examples: &[],
        launcher_codes: false,
        extra_sections: &[],
    }
}
