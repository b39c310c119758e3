//! `accel-merge-weights`: command-line definition. (Filled in by its own issue; until then the tool says so.)

use std::ffi::OsString;

use clap::Parser;

use super::ToolDoc;
use crate::env_vars::Group;

/// Merge sharded FSDP/DCP or DeepSpeed checkpoints into safetensors.
#[derive(Debug, Parser)]
#[command(
    name = "accel-merge-weights",
    version,
    about,
    long_about,
    max_term_width = 100
)]
pub struct MergeCli {
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
        name: "accel-merge-weights",
        command: super::command_of::<MergeCli>,
        env_groups: &[Group::Accel, Group::Output],
        examples: &[],
        launcher_codes: false,
        extra_sections: &[],
    }
}
