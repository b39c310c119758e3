//! The exit statuses every accel tool uses, in one place, so scripts can tell a failed check from a bad
//! command line from a launcher that could not start its ranks. The man pages' EXIT STATUS sections are
//! generated from [`ExitStatus::documented`].

use std::process::ExitCode;

/// How an accel tool ends. Rank exit codes pass through `accel-launch` unchanged and are not listed here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// Everything asked for was done.
    Success,
    /// The tool ran, and what it checked is not right: an invalid config (`validate`), a failed
    /// collective (`accel-test`), a model that does not fit (`accel-estimate-memory --gpu-memory`).
    Failure,
    /// The command line or a config file is wrong: unknown flag, bad value, missing or invalid file.
    Usage,
    /// An input the tool reads (a checkpoint, a safetensors file, a model config) is missing or malformed.
    Input,
    /// An output could not be written, or would overwrite something without `--force`.
    Output,
    /// Interrupted by a signal (SIGINT/SIGTERM) before finishing.
    Interrupted,
    /// accel-launch / accel-env could not start the run (no free port, bad topology, spawn failure).
    LauncherFailed,
    /// The program to run was found but could not be executed.
    CannotExecute,
    /// The program to run was not found on PATH.
    NotFound,
    /// A worker's own exit code or `128+N` for a worker killed by signal N, passed through.
    Worker(u8),
}

impl ExitStatus {
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Failure => 1,
            ExitStatus::Usage => 2,
            ExitStatus::Input => 3,
            ExitStatus::Output => 4,
            ExitStatus::Interrupted => 130,
            ExitStatus::LauncherFailed => 125,
            ExitStatus::CannotExecute => 126,
            ExitStatus::NotFound => 127,
            ExitStatus::Worker(code) => code,
        }
    }

    /// Every status a tool can return, with its meaning, for the man pages.
    pub fn documented(launcher: bool) -> Vec<(String, &'static str)> {
        let mut rows = vec![
            ("0".to_string(), "Success."),
            ("1".to_string(), "The tool ran and what it checked is not right (invalid config, failed check, does not fit)."),
            ("2".to_string(), "Usage error: bad command line, or an invalid or missing config file."),
            ("3".to_string(), "An input file (checkpoint, safetensors, model config) is missing or malformed."),
            ("4".to_string(), "An output could not be written, or exists and --force was not given."),
            ("130".to_string(), "Interrupted by SIGINT or SIGTERM."),
        ];
        if launcher {
            rows.extend([
                ("125".to_string(), "The launcher itself failed: bad topology, no free port, could not spawn."),
                ("126".to_string(), "The command was found but could not be executed."),
                ("127".to_string(), "The command was not found."),
                (
                    "N".to_string(),
                    "Any other status is the exit code of the first rank that failed, or 128+N if it was killed by signal N.",
                ),
            ]);
        }
        rows
    }
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> Self {
        ExitCode::from(status.code())
    }
}
