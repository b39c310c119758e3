//! `accel-test`: command-line definition. (Filled in by its own issue; until then the tool says so.)

use std::ffi::OsString;

use clap::Parser;

use super::ToolDoc;
use crate::env_vars::Group;

/// Check the configured distributed world with real collectives.
#[derive(Debug, Parser)]
#[command(name = "accel-test", version, about, long_about, max_term_width = 100)]
pub struct TestCli {
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
        name: "accel-test",
        command: super::command_of::<TestCli>,
        env_groups: &[Group::Accel, Group::Output],
        examples: &[],
        launcher_codes: false,
        extra_sections: &[],
    }
}
