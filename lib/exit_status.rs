//! The exit statuses every accel tool uses, in one place, so scripts can tell a failed check from a bad
//! command line from a launcher that could not start its ranks. The man pages' EXIT STATUS sections are
//! generated from [`ExitStatus::documented`].

use std::process::ExitCode;

/// A signal's name as kill(1) and torch print it (`SIGTERM`), `unknown` for a number Linux lacks.
pub fn signal_name(sig: i32) -> &'static str {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str())
        .unwrap_or("unknown")
}

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
    /// Interrupted before finishing: Ctrl-C or end of input at a questionnaire prompt.
    Interrupted,
    /// Stopped by signal N (SIGINT, SIGTERM, SIGHUP) before finishing: 128+N, as a shell reports it.
    Signal(i32),
    /// accel-launch / accel-env could not start the run (no free port, bad topology, spawn failure).
    LauncherFailed,
    /// The program to run was found but could not be executed.
    CannotExecute,
    /// The program to run was not found on PATH.
    NotFound,
    /// accel-launch --hang_timeout: no rank made progress for that long; the run was stopped.
    Hang,
    /// Another node of a multi-node run was lost (its launcher died, or its heartbeats stopped), so
    /// this node stopped its ranks.
    NodeLost,
    /// accel-launch --slurm_requeue: SLURM's warning signal came, the ranks were stopped, and the job
    /// was put back in the queue.
    Requeued,
    /// A rank did not exit within [`KILL_WAIT`](crate::launch::supervise::KILL_WAIT) of SIGKILL
    /// (uninterruptible sleep in a driver or a file system, a frozen cgroup): it was named and left.
    Unkillable,
    /// accel-test: no usable torch (none in the environment, another version than its libtorch part
    /// binds, or its libraries or the part could not be loaded), so no rank can run.
    NoTorch,
    /// accel-test --probe: the checks passed and the probe named a slow node, link or rank.
    Straggler,
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
            ExitStatus::NoTorch => 5,
            ExitStatus::Straggler => 6,
            ExitStatus::Interrupted => 130,
            ExitStatus::Signal(n) => (128 + n).clamp(129, 255) as u8,
            ExitStatus::LauncherFailed => 125,
            ExitStatus::CannotExecute => 126,
            ExitStatus::NotFound => 127,
            ExitStatus::Hang => 124,
            ExitStatus::NodeLost => 122,
            ExitStatus::Requeued => 123,
            ExitStatus::Unkillable => 121,
            ExitStatus::Worker(code) => code,
        }
    }

    /// The status whose [`code`](ExitStatus::code) is `code` (a status another node's launcher
    /// reported over the control plane); codes of no status of ours are a rank's own.
    pub fn from_code(code: u8) -> ExitStatus {
        match code {
            0 => ExitStatus::Success,
            121 => ExitStatus::Unkillable,
            122 => ExitStatus::NodeLost,
            123 => ExitStatus::Requeued,
            124 => ExitStatus::Hang,
            125 => ExitStatus::LauncherFailed,
            126 => ExitStatus::CannotExecute,
            127 => ExitStatus::NotFound,
            c => ExitStatus::Worker(c),
        }
    }

    /// Every status a tool can return, with its meaning, for the man pages.
    pub fn documented(codes: Codes) -> Vec<(String, &'static str)> {
        let launcher = codes == Codes::Launcher;
        let mut rows = vec![
            ("0".to_string(), "Success."),
            ("1".to_string(), "The tool ran and what it checked is not right (invalid config, failed check, does not fit)."),
            ("2".to_string(), "Usage error: bad command line, or an invalid or missing config file."),
            ("3".to_string(), "An input file (checkpoint, safetensors, model config) is missing or malformed."),
            ("4".to_string(), "An output could not be written, or exists and --force was not given."),
        ];
        if launcher {
            rows.extend([
                ("121".to_string(), "A rank did not exit within 10 s after SIGKILL (uninterruptible sleep: a hung driver after an Xid error, an NFS, Lustre or FUSE read that never returns; a cgroup-v1-frozen process): it is named with its pid, state and wchan and left behind, and the run ends anyway (no restart). This node's status; the other nodes name it too and exit with the run's own status."),
                ("122".to_string(), "Multi-node run: another node was lost (its launcher died, or its heartbeats stopped), and this node stopped its ranks."),
                ("123".to_string(), "--slurm_requeue: SLURM's warning signal came, the ranks were given --grace_period to save and exit, and the job was requeued (scontrol requeue, by node 0's launcher); every node exits 123."),
                ("124".to_string(), "--hang_timeout: no rank made progress for that long; the stacks were reported and the run stopped."),
                ("125".to_string(), "The launcher itself failed: bad topology, no free port, could not spawn; with --slurm_requeue also no scontrol, a job that is not requeueable, slurmctld unreachable (checked before the ranks start), or a requeue that failed."),
                ("126".to_string(), "The command was found but could not be executed."),
                ("127".to_string(), "The command was not found."),
                // The launcher ends as the signal that stopped it would end a shell's job: 128+N
                // (`launch/supervise` forwards it to the ranks first).
                (
                    "130, 143, 129, 131".to_string(),
                    "Stopped by SIGINT, SIGTERM, SIGHUP or SIGQUIT (128+N), after the ranks were stopped.",
                ),
                (
                    "N".to_string(),
                    "Any other status is the exit code of the first rank that failed (on any node of a multi-node run), or 128+N if it was killed by signal N.",
                ),
            ]);
        } else {
            if codes == Codes::Test {
                rows.push((
                    "5".to_string(),
                    "No usable torch: none is installed in this environment, or another version than 2.13.*, or its libraries (or accel-test's libtorch part) could not be loaded. The message names which, and the torch accel-test needs.",
                ));
                rows.push((
                    "6".to_string(),
                    "--probe: every check passed and the probe named a straggler, a node, link or rank slower than the median by more than --probe_threshold (see PROBE).",
                ));
                rows.push((
                    "125".to_string(),
                    "The world could not be started: a busy --main_process_port, a bad topology, ranks that could not be spawned.",
                ));
            }
            rows.push((
                "130, 143, 129".to_string(),
                "Interrupted by SIGINT (or end of input at a questionnaire prompt), SIGTERM or SIGHUP (128+N); nothing was left half-written.",
            ));
        }
        rows
    }
}

/// Which statuses a tool's man page lists beyond 0–4 and the signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codes {
    /// accel-config, accel-estimate-memory, accel-merge-weights.
    Plain,
    /// accel-test: also 5, no usable torch, 6, a straggler named by --probe, and 125, a world that could not be started.
    Test,
    /// accel-launch and `accel-env -- CMD`: the launcher's statuses and the ranks' own.
    Launcher,
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> Self {
        ExitCode::from(status.code())
    }
}
