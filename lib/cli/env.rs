//! `accel-env`: the environment report, and `accel-env -- CMD` to exec a command with the rank contract.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;

use super::ToolDoc;
use crate::env_vars::Group;

/// Report the environment for a bug report, or run a command as one rank of a distributed job.
///
/// Without a command, prints what `accelerate env` prints and more — accel, Python, torch, accelerate and
/// numpy versions, CPU and RAM, every GPU, NCCL, relevant environment variables (warning about
/// ACCELERATE_*/FSDP_* ones that would leak into a run), network interfaces, and the effective config with
/// the origin of each value — as Markdown to paste into an issue, or JSON with --json.
///
/// With `-- CMD [ARGS…]`, derives this task's rank contract (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR,
/// … and accelerate's variables for the resolved config) from SLURM or MPI variables and execs CMD, so
/// `srun accel-env -- python train.py` runs one task per GPU with no supervisor process.
#[derive(Debug, Parser)]
#[command(name = "accel-env", version, max_term_width = 100)]
pub struct EnvCli {
    /// Print JSON instead of Markdown.
    #[arg(long)]
    pub json: bool,
    /// Do not run Python to find torch/accelerate/numpy versions.
    #[arg(long = "no-python", visible_alias = "no_python")]
    pub no_python: bool,
    /// Config file to report (default: accelerate's default config path).
    #[arg(long = "config_file", visible_alias = "config-file", value_name = "PATH", value_hint = clap::ValueHint::FilePath)]
    pub config_file: Option<PathBuf>,
    /// Command to exec with the rank contract (after `--`).
    #[arg(last = true, value_name = "CMD", value_hint = clap::ValueHint::CommandWithArguments)]
    pub command: Vec<OsString>,
}

pub fn doc() -> ToolDoc {
    ToolDoc {
        name: "accel-env",
        command: super::command_of::<EnvCli>,
        env_groups: &[
            Group::Accel,
            Group::Paths,
            Group::Device,
            Group::Slurm,
            Group::Mpi,
            Group::Output,
        ],
        examples: &[
            ("accel-env", "Markdown report to paste into a bug report."),
            ("accel-env --json | jq .gpus", "The GPUs, for scripts."),
            (
                "accel-env --no-python",
                "Skip the Python probe (no interpreter needed).",
            ),
        ],
        codes: crate::exit_status::Codes::Launcher,
        extra_sections: &[],
    }
}
