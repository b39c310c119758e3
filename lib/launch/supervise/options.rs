//! What a caller hands the supervisor and what it gets back: the settings of a run ([`Options`]), how
//! the ranks' output is shown or captured, and how each rank and the run ended. Kept apart from the
//! supervision itself so that the launch tools and accel-test build a run from these types alone.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

use super::signals::{SignalSet, Signals};
use crate::exit_status::ExitStatus;
use crate::launch::control::{self, FailureReport};
use crate::launch::torchrun::logs::LogsSpec;

/// `--log_template`'s default: each attempt's logs under `attempt_N/`, each local rank's in its own
/// folder.
pub const DEFAULT_LOG_TEMPLATE: &str = "attempt_{attempt}/{local_rank}/{stream}.log";

/// How to print a rank's console lines.
#[derive(Debug, Clone, Default)]
pub struct Console {
    /// Line prefix template (`{rank}`, `{local_rank}`, `{role}`, `{node}`); `None` passes output through.
    pub prefix: Option<String>,
    /// Only these local ranks reach the console (all reach their log files).
    pub local_ranks: Option<Vec<u32>>,
}

/// What a run that reads its ranks' output itself receives, in order per rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Captured {
    /// One line of a rank's stdout, without its newline.
    Line { rank: u32, line: String },
    /// The rank's stdout is closed: every line it wrote has been sent.
    Eof { rank: u32 },
    /// The rank's process ended (its last lines may still be on their way: wait for its `Eof`).
    Ended { rank: u32, end: RankEnd },
}

/// Hands the ranks' stdout to the caller instead of the console (stderr still goes to the console).
#[derive(Debug, Clone)]
pub struct Capture {
    pub sink: Sender<Captured>,
    /// Set by the caller to stop the run: the stop signal to every rank, the grace period, SIGKILL.
    pub stop: Arc<AtomicBool>,
}

/// What happens to the other ranks when one fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFailure {
    /// Stop them at once (torchrun's behaviour): the stop signal, the grace period, SIGKILL.
    #[default]
    StopAll,
    /// Let them run on: they end on their own, or when the caller sets [`Capture::stop`].
    Continue,
}

/// How one rank's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankEnd {
    pub status: std::process::ExitStatus,
    /// It ended by a signal after the supervisor had begun stopping the run (it was stopped, it did
    /// not die on its own).
    pub stopped: bool,
}

/// One rank of a finished run.
#[derive(Debug, Clone)]
pub struct RankResult {
    pub rank: u32,
    pub local_rank: u32,
    pub end: RankEnd,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// What the launcher exits with.
    pub status: ExitStatus,
    /// The launcher was told to stop by this signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT).
    pub signal: Option<i32>,
    /// Every rank of the last attempt.
    pub ranks: Vec<RankResult>,
    /// What ended the run: the first rank to fail here, or (multi-node) the failure or lost node the
    /// control plane reported.
    pub failure: Option<FailureReport>,
    /// Ranks that did not exit after SIGKILL (on any node of a multi-node run), left behind.
    pub unkillable: Vec<control::Unkillable>,
    /// Every rank named a straggler during the run (`--straggler_threshold`), in the order named.
    pub stragglers: Vec<crate::launch::straggler::Finding>,
}

/// Supervision settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Name for messages (`accel-launch`).
    pub tool: &'static str,
    /// Time between the stop signal and SIGKILL.
    pub grace: Duration,
    /// How often ranks are polled when nothing else wakes the supervisor.
    pub monitor_interval: Duration,
    /// Whole-group restarts after a failure (`TORCHELASTIC_RESTART_COUNT` counts them).
    pub max_restarts: u32,
    /// Per-rank log files under this directory.
    pub log_dir: Option<PathBuf>,
    /// File name template under `log_dir`: `{rank}`, `{local_rank}`, `{node}`, `{attempt}`, `{stream}`.
    pub log_template: String,
    pub console: Console,
    /// Lines of the failing rank's stderr to print.
    pub tail_lines: usize,
    /// Suppress the launcher's own progress notes (restarts).
    pub quiet: bool,
    pub on_failure: OnFailure,
    /// Send stdout and rank ends to the caller; it also prints failures itself.
    pub capture: Option<Capture>,
    /// `--hang_timeout`: stop the run (exit 124) once no rank made progress for this long
    /// ([`hang`](crate::launch::hang)).
    pub hang_timeout: Option<Duration>,
    /// `--straggler_threshold` and `--straggler_window`: name the rank the others wait for, while
    /// the run goes on ([`straggler`](crate::launch::straggler)); needs `py_spy`.
    pub straggler: Option<crate::launch::straggler::Settings>,
    /// Where the ranks' Flight Recorder pipes and dumps are, for the straggler watch's NCCL ranks
    /// ([`crate::launch::straggler::nccl`]); `None`: stacks only.
    pub flight_recorder_dir: Option<PathBuf>,
    /// `--stacks_on_failure`: take the survivors' stacks before stopping them after a failure.
    pub stacks_on_failure: bool,
    /// py-spy, for the stacks ([`autopsy`](crate::launch::hang::autopsy)); `None`: the verdicts say
    /// what /proc knows.
    pub py_spy: Option<PathBuf>,
    /// The control plane of a multi-node run: failures go to and come from the other nodes, and the
    /// world restarts together.
    pub control: Option<Arc<control::Link>>,
    /// `--slurm_requeue`: this signal (SLURM's warning) is forwarded, the ranks get `grace` to save
    /// and exit, and the run ends [`ExitStatus::Requeued`]; the caller then asks SLURM for the requeue.
    pub requeue_signal: Option<i32>,
    /// The ranks' /proc/PID/oom_score_adj (-1000 to 1000), set before they exec: accel-test makes its
    /// ranks the kernel's first choice when memory runs out, so that the coordinator lives to report.
    pub oom_score_adj: Option<i32>,
    /// The signals handed on to the ranks and those that stop the run (`--signals_to_handle`).
    pub handled: SignalSet,
    /// The launcher's signals, caught before the run (a multi-node launcher catches them from its
    /// join on); `None`: the run catches them itself.
    pub signals: Option<Arc<Signals>>,
    /// torchrun's log layout and console rules in place of `log_template` (a run given torchrun's
    /// command line); `log_dir` then holds only the hang and failure reports.
    pub torchrun_logs: Option<LogsSpec>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tool: "accel-launch",
            grace: Duration::from_secs(30),
            monitor_interval: Duration::from_millis(100),
            max_restarts: 0,
            log_dir: None,
            log_template: DEFAULT_LOG_TEMPLATE.into(),
            console: Console::default(),
            tail_lines: 20,
            quiet: false,
            on_failure: OnFailure::StopAll,
            capture: None,
            hang_timeout: None,
            straggler: None,
            flight_recorder_dir: None,
            stacks_on_failure: false,
            py_spy: None,
            control: None,
            requeue_signal: None,
            oom_score_adj: None,
            handled: SignalSet::default(),
            signals: None,
            torchrun_logs: None,
        }
    }
}

/// A progress note of the supervisor on stderr, unless `--quiet`.
pub(super) fn note(opts: &Options, msg: &str) {
    if !opts.quiet {
        let _ = writeln!(std::io::stderr(), "{}: {msg}", opts.tool);
    }
}
