//! Runs a [`Plan`] and stays with it until every process of the run is gone. Each rank leads its own
//! process group and session (so a terminal's Ctrl-C reaches only the launcher, which forwards it once) and gets
//! `PR_SET_PDEATHSIG`; the [`guard`] module makes sure nothing outlives the run, even daemons a rank
//! double-forks, and even when the launcher itself is SIGKILLed.
//!
//! Stopping is always a [`Stop`]: a signal (SIGTERM, or the one the launcher received) to every rank's
//! group, a grace period to checkpoint, then SIGKILL; a second Ctrl-C (or SIGTERM, …) kills at once.
//! The first rank to fail decides the exit status: its code, or 128+N for signal N. Ctrl-Z stops the
//! ranks with the launcher, and `fg`/`bg` resumes them (the ranks are not in the terminal's group).
//!
//! A tool that reads its ranks' output itself (accel-test reads its ranks' JSON events) runs them through
//! the same supervisor with a [`Capture`]: stdout lines and rank ends come to it over a channel, the
//! survivors of a failure are left running ([`OnFailure::Continue`]) so they can report it, and the
//! caller decides when to stop through [`Capture::stop`]. What the ranks write goes through [`output`].
//!
//! This module holds the run loop: attempts, spawning, the outcome of each attempt. Watching the
//! running ranks of one attempt (exits, signals, other nodes' stops, hangs) is [`monitor`]'s.

mod guard;
mod monitor;
mod output;
mod unkillable;

pub use output::{render_template, DEFAULT_LOG_TEMPLATE};

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use self::guard::Strays;
use self::monitor::Monitor;
use self::output::{LogFiles, Sink, Tail, Terminal};
use signal_hook::iterator::exfiltrator::WithOrigin;

use super::control::{self, Decision, FailureReport};
use super::hang;
use super::hang::autopsy;
use super::hang::flight_recorder;
use super::hang::verdict;
use super::plan::{Plan, RankSpec};
use super::ports;
use super::torchrun::logs::{AttemptLogs, LogsSpec, Route, RunLogs};
use crate::env_vars::{self, Environment};
use crate::error::{Diagnostic, Result};
use crate::exit_status::{signal_name, ExitStatus};

/// How long a rank may take to go after SIGKILL. The kernel ends a killed process at once unless it
/// holds it (uninterruptible sleep, a frozen cgroup); one still there after this is named with its
/// pid, state and wchan and left behind, and the attempt ends without it ([`ExitStatus::Unkillable`]).
pub const KILL_WAIT: Duration = Duration::from_secs(10);

/// Signals forwarded to every rank's group.
pub const FORWARDED: &[i32] = &[
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Of the forwarded signals, those that also stop the run (torchrun's `SignalException` set).
pub const STOPPING: &[i32] = &[libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// Which signals the launcher hands on to the ranks and which of them stop the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalSet {
    /// Sent on to every rank's group.
    pub forwarded: Vec<i32>,
    /// Stop the run: the signal itself to the ranks when it is forwarded, else SIGTERM; the grace
    /// period; SIGKILL.
    pub stopping: Vec<i32>,
}

impl Default for SignalSet {
    fn default() -> Self {
        SignalSet {
            forwarded: FORWARDED.to_vec(),
            stopping: STOPPING.to_vec(),
        }
    }
}

impl SignalSet {
    /// torchrun's `--signals-to-handle`: each named signal is forwarded and stops the run, as its
    /// agent's `SignalException` does (`elastic/agent/server/api.py::run`). The stop signals it does
    /// not name still stop the run, with SIGTERM to the ranks (torchrun would die of them and leave
    /// its workers running).
    pub fn handle_only(named: &[i32]) -> SignalSet {
        let mut stopping = named.to_vec();
        stopping.extend(STOPPING.iter().filter(|s| !named.contains(s)));
        SignalSet {
            forwarded: named.to_vec(),
            stopping,
        }
    }
    /// Every signal the launcher catches: these, and the default forwarded ones (caught so that a
    /// signal not handed on does not end the launcher).
    fn caught(&self) -> Vec<i32> {
        let mut all = self.forwarded.clone();
        for s in self.stopping.iter().chain(FORWARDED) {
            if !all.contains(s) {
                all.push(*s);
            }
        }
        all
    }
    pub fn forwards(&self, sig: i32) -> bool {
        self.forwarded.contains(&sig)
    }
    pub fn stops(&self, sig: i32) -> bool {
        self.stopping.contains(&sig)
    }
    /// What the ranks get when `sig` stops the run.
    pub fn stop_signal(&self, sig: i32) -> i32 {
        if self.forwards(sig) {
            sig
        } else {
            libc::SIGTERM
        }
    }
}

/// Job control: SIGTSTP stops the ranks (as SIGSTOP) and then the launcher, SIGCONT resumes them, as
/// if they were in the terminal's group (torchrun's workers share it).
pub const JOB_CONTROL: &[i32] = &[libc::SIGTSTP, libc::SIGCONT];

/// How ranks are stopped: `signal` to every rank's group, then SIGKILL after `grace` (after
/// watchexec's `Stop { signal, grace }`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stop {
    pub signal: i32,
    pub grace: Duration,
}

impl Stop {
    /// SIGTERM, then SIGKILL after `grace`: how a failure or the caller stops the others.
    pub fn term(grace: Duration) -> Stop {
        Stop {
            signal: libc::SIGTERM,
            grace,
        }
    }
    /// SIGKILL at once: a second Ctrl-C, a rank that could not be spawned.
    pub fn kill() -> Stop {
        Stop {
            signal: libc::SIGKILL,
            grace: Duration::ZERO,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    #[error("cannot run `{program}`: not found")]
    NotFound { program: String },
    /// The script exists, but the kernel cannot find what runs it (`execve` says ENOENT for both).
    #[error("cannot run `{program}`: its interpreter {interpreter:?} (its #! line) is not found")]
    InterpreterNotFound {
        program: String,
        interpreter: String,
    },
    #[error("cannot run `{program}`: the file exists, but its program loader is not found")]
    LoaderNotFound { program: String },
    #[error("cannot run `{program}`")]
    CannotExecute {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("--log_template `{template}` gives {first} and {second} the same file {path}")]
    LogCollision {
        template: String,
        path: String,
        first: String,
        second: String,
        missing: &'static str,
    },
    #[error("{path} is left from an earlier run: accel-launch does not overwrite logs")]
    LogExists { path: String },
    #[error("cannot {what}")]
    Launcher {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl Diagnostic for SuperviseError {
    fn hints(&self) -> Vec<String> {
        match self {
            SuperviseError::NotFound { program } => {
                let path = Path::new(program);
                let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
                if !program.contains('/') && path.is_file() {
                    // execvp looks a bare name up on PATH only, never in the current directory.
                    vec![format!("`{program}` is in the current directory, but a name without a `/` is looked up on PATH: run it as ./{program}")]
                } else if name.starts_with("python") {
                    vec!["set ACCEL_PYTHON to the interpreter of your training environment".into()]
                } else {
                    vec!["check the program's path (with --no_python the script itself is run)".into()]
                }
            }
            SuperviseError::InterpreterNotFound { program, interpreter } => {
                if interpreter.ends_with('\r') {
                    vec![format!("`{program}` has Windows (CRLF) line endings, so its #! line names `{}\\r`: convert it (`sed -i 's/\\r$//' {program}` or dos2unix)", interpreter.trim_end_matches('\r'))]
                } else {
                    vec![format!("install {interpreter} or change the first line of `{program}`")]
                }
            }
            SuperviseError::LoaderNotFound { .. } => vec![
                "a binary built for another system (its dynamic loader, e.g. /lib64/ld-linux-x86-64.so.2, is missing): rebuild it here".into(),
            ],
            SuperviseError::LogCollision { missing, .. } => {
                vec![format!("add {missing} to the template")]
            }
            SuperviseError::LogExists { .. } => vec![
                "give each run its own --log_dir (e.g. --log_dir logs/$(date +%Y%m%d-%H%M%S)), or move the old logs away".into(),
            ],
            _ => Vec::new(),
        }
    }
    fn exit_status(&self) -> ExitStatus {
        match self {
            SuperviseError::NotFound { .. }
            | SuperviseError::InterpreterNotFound { .. }
            | SuperviseError::LoaderNotFound { .. } => ExitStatus::NotFound,
            SuperviseError::CannotExecute { .. } => ExitStatus::CannotExecute,
            SuperviseError::LogCollision { .. } => ExitStatus::Usage,
            SuperviseError::LogExists { .. } => ExitStatus::Output,
            SuperviseError::Launcher { .. } => ExitStatus::LauncherFailed,
        }
    }
}

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
    /// `--hang_timeout`: stop the run (exit 124) once no rank made progress for this long ([`hang`]).
    pub hang_timeout: Option<Duration>,
    /// `--stacks_on_failure`: take the survivors' stacks before stopping them after a failure.
    pub stacks_on_failure: bool,
    /// py-spy, for the stacks ([`autopsy`]); `None`: the verdicts say what /proc knows.
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

enum Event {
    /// A signal to the launcher; `delivered`: its sender also signals every process of the run (the
    /// SLURM step daemon, for `scancel --signal`, `srun --signal` and its own SIGTERM), so the ranks
    /// already have it and forwarding it would deliver it twice.
    Signal { sig: i32, delivered: bool },
}

/// The launcher's signals, as [`Event`]s on a channel: installed by [`run`], or before it by a
/// launcher that must act on them while it joins the other nodes ([`Options::signals`]). Dropping
/// it stops the delivery.
pub struct Signals {
    rx: Mutex<Receiver<Event>>,
    handle: signal_hook::iterator::Handle,
    /// The first stopping signal received (0: none yet), for the spawning loop: the monitor that
    /// handles the signal runs only once every rank is started.
    stopping: Arc<AtomicI32>,
}

impl std::fmt::Debug for Signals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signals").finish()
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        self.handle.close();
    }
}

impl Signals {
    /// Catches the set's signals (the forwarded and stopping ones), the job-control signals,
    /// SIGCHLD and the requeue warning.
    pub fn install(
        set: &SignalSet,
        requeue_signal: Option<i32>,
        env: &Environment,
    ) -> Result<Signals> {
        let (tx, rx) = mpsc::channel();
        let stops = set.stopping.clone();
        let mut sigs = set.caught();
        sigs.extend_from_slice(JOB_CONTROL);
        sigs.push(libc::SIGCHLD);
        if let Some(s) = requeue_signal.filter(|s| !sigs.contains(s)) {
            sigs.push(s);
        }
        let mut signals =
            signal_hook::iterator::SignalsInfo::<WithOrigin>::new(&sigs).map_err(|e| {
                SuperviseError::Launcher {
                    what: "install signal handlers".into(),
                    source: e,
                }
            })?;
        let handle = signals.handle();
        // In a SLURM step the launcher's parent is slurmstepd, which signals every process of the
        // step (proctrack walks the ranks too): what it sends, the ranks already received.
        let in_step = env.non_empty(env_vars::SLURM_STEP_ID).is_some();
        let parent = nix::unistd::getppid().as_raw();
        let stopping = Arc::new(AtomicI32::new(0));
        let stopping_ = Arc::clone(&stopping);
        std::thread::spawn(move || {
            for info in signals.forever() {
                if stops.contains(&info.signal) {
                    let _ = stopping_.compare_exchange(
                        0,
                        info.signal,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                let delivered = in_step && info.process.is_some_and(|p| p.pid == parent);
                if tx
                    .send(Event::Signal {
                        sig: info.signal,
                        delivered,
                    })
                    .is_err()
                {
                    break;
                }
            }
        });
        Ok(Signals {
            rx: Mutex::new(rx),
            handle,
            stopping,
        })
    }

    /// The next signal received, if any (SIGCHLD left out). Does not block.
    pub fn next(&self) -> Option<i32> {
        let rx = self.rx.lock().ok()?;
        loop {
            match rx.try_recv() {
                Ok(Event::Signal { sig, .. }) if sig == libc::SIGCHLD => {}
                Ok(Event::Signal { sig, .. }) => return Some(sig),
                Err(_) => return None,
            }
        }
    }
}

struct Running {
    rank: u32,
    local_rank: u32,
    child: Child,
    pgid: Pid,
    guard: Option<Pid>,
    status: Option<std::process::ExitStatus>,
    /// Ended by a signal after the run began stopping.
    stopped: bool,
    tail: Arc<Mutex<Tail>>,
    readers: Vec<JoinHandle<()>>,
    error_file: Option<PathBuf>,
}

/// A rank's end, as the summary reports it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub rank: u32,
    pub local_rank: u32,
    pub host: String,
    pub status: std::process::ExitStatus,
    pub stderr_tail: String,
    pub error_message: Option<String>,
}

impl Failure {
    pub fn exit_code(&self) -> u8 {
        exit_code_of(&self.status)
    }
    /// The failure as the control plane and `--report_json` carry it.
    pub fn to_report(&self, node: u32) -> FailureReport {
        FailureReport {
            node,
            host: self.host.clone(),
            rank: Some(self.rank),
            local_rank: Some(self.local_rank),
            code: self.status.code(),
            signal: self.status.signal(),
            what: self.describe(),
            stderr_tail: last_lines(&self.stderr_tail, 50),
            error_message: self.error_message.clone(),
            requeue: false,
            step_wide: false,
            hang: false,
            status: None,
            hints: Vec::new(),
        }
    }
    pub fn describe(&self) -> String {
        match (self.status.code(), self.status.signal()) {
            (Some(c), _) => format!("exited with status {c}"),
            (None, Some(s)) => format!("was killed by signal {s} ({})", signal_name(s)),
            _ => "ended".into(),
        }
    }
}

/// A process's exit as a shell reports it: its code, or 128+N for signal N.
pub fn exit_code_of(s: &std::process::ExitStatus) -> u8 {
    match (s.code(), s.signal()) {
        (Some(c), _) => (c & 0xff) as u8,
        (None, Some(sig)) => (128 + sig).min(255) as u8,
        _ => 1,
    }
}

/// Starts every rank of `plan`, supervises them and returns the run's exit status.
///
/// Must be called from a thread that outlives the ranks (the main thread): `PR_SET_PDEATHSIG` fires
/// when the spawning thread exits. One run at a time per process: the run adopts and, at its end,
/// kills every orphan of its ranks.
pub fn supervise(plan: &Plan, opts: &Options, env: &Environment) -> Result<ExitStatus> {
    run(plan, opts, env).map(|o| o.status)
}

/// [`supervise`], returning how every rank ended.
///
/// Multi-node: a local error that ends the run here (the program not found on this host, a log
/// directory refused) is sent to node 0 before this launcher goes, with its hints and exit status,
/// so that every node prints it and exits with that status instead of waiting for a replacement.
pub fn run(plan: &Plan, opts: &Options, env: &Environment) -> Result<RunOutcome> {
    let result = run_here(plan, opts, env);
    if let (Err(e), Some(link)) = (&result, &opts.control) {
        let node = plan.topology.as_ref().map_or(0, |t| t.node_rank);
        link.leave(local_error_report(e, node, &plan.host));
        link.close();
    }
    result
}

/// A local error as the other nodes are told of it.
fn local_error_report(e: &crate::error::Error, node: u32, host: &str) -> FailureReport {
    let mut what = format!("could not start its ranks: {e}");
    let mut cause = std::error::Error::source(e.inner());
    while let Some(c) = cause {
        what.push_str(&format!(": {c}"));
        cause = c.source();
    }
    FailureReport {
        what,
        status: Some(e.exit_status().code()),
        hints: e.hints(),
        ..FailureReport::lost(node, host, "")
    }
}

fn run_here(plan: &Plan, opts: &Options, env: &Environment) -> Result<RunOutcome> {
    let logs = match (&opts.log_dir, &opts.torchrun_logs) {
        (Some(dir), None) => {
            let node = plan.topology.as_ref().map_or(0, |t| t.node_rank);
            let template = node_log_template(plan, &opts.log_template)?;
            let logs = LogFiles::new(dir, &template, node);
            logs.check(&plan.ranks, opts.max_restarts)?;
            Some(logs)
        }
        _ => None,
    };
    let tmp_base = env
        .non_empty(env_vars::TMPDIR)
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let torchrun_logs = match &opts.torchrun_logs {
        Some(spec) => Some(spec.start(&tmp_base)?),
        None => None,
    };
    let own;
    let feed = match &opts.signals {
        Some(f) => f.as_ref(),
        None => {
            own = Signals::install(&opts.handled, opts.requeue_signal, env)?;
            &own
        }
    };
    let rx = feed.rx.lock().map_err(|_| SuperviseError::Launcher {
        what: "read the launcher's signals".into(),
        source: std::io::Error::other("poisoned"),
    })?;
    let tmp_root = match (&opts.log_dir, &torchrun_logs) {
        (None, None) => Some(tmp_base.join(format!("accel_launch_{}", std::process::id()))),
        _ => None,
    };
    guard::set_subreaper(true);
    let mut session = Session {
        opts,
        rx: &rx,
        tmp_root,
        logs,
        torchrun_logs,
        attempt_logs: None,
        strays: Strays::new(),
        terminal: Terminal::new(opts.tool),
        stopping: Arc::clone(&feed.stopping),
        unkillable: Vec::new(),
    };
    let result = session.run_attempts(plan.clone());
    guard::set_subreaper(false);
    if let Some(t) = &session.tmp_root {
        let _ = std::fs::remove_dir_all(t);
    }
    if let Some(t) = &session.torchrun_logs {
        t.finish();
    }
    result
}

/// What the attempts of one run share.
struct Session<'a> {
    opts: &'a Options,
    rx: &'a Receiver<Event>,
    /// Where torchelastic error files go without `--log_dir`.
    tmp_root: Option<PathBuf>,
    logs: Option<LogFiles>,
    /// torchrun's layout, in place of `logs`, and the current attempt's part of it.
    torchrun_logs: Option<RunLogs>,
    attempt_logs: Option<AttemptLogs>,
    /// The run's processes outside the ranks' groups, for the guards.
    strays: Option<Strays>,
    /// The launcher's terminal, which ranks writing to the console see as theirs.
    terminal: Terminal,
    /// The first stopping signal the launcher got (0: none yet), for the spawning loop: the monitor
    /// that handles the signal runs only once every rank is started.
    stopping: Arc<AtomicI32>,
    /// The last attempt's ranks that did not exit after SIGKILL.
    unkillable: Vec<control::Unkillable>,
}

enum Outcome {
    Success,
    Hung,
    Failed(Failure),
    Signalled(i32),
    /// Stopped because another node failed or was lost.
    Remote(FailureReport),
    /// SLURM's warning signal came (`--slurm_requeue`): the ranks were given the grace period to save.
    Requeue,
}

impl Session<'_> {
    fn run_attempts(&mut self, mut plan: Plan) -> Result<RunOutcome> {
        let opts = self.opts;
        // A launcher replacing a lost node's joins the world's next attempt.
        let mut attempt = opts.control.as_ref().map_or(0, |l| l.first_attempt());
        let mut port_retries = 0u32;
        loop {
            let (outcome, ranks) = self.run_once(&plan, attempt)?;
            let node = plan.topology.as_ref().map_or(0, |t| t.node_rank);
            let left = std::mem::take(&mut self.unkillable);
            let done = |status, signal, failure| RunOutcome {
                // A rank left behind on this node says so first: the node may need attention.
                status: if left.is_empty() {
                    status
                } else {
                    ExitStatus::Unkillable
                },
                signal,
                ranks: ranks.clone(),
                failure,
                unkillable: left.clone(),
            };
            // Multi-node: the world decides together whether to restart.
            if let Some(link) = &opts.control {
                if !left.is_empty() {
                    link.report_unkillable(attempt, left.clone());
                }
                let ok = matches!(outcome, Outcome::Success) && left.is_empty();
                let decision = self.attempt_ended(link, attempt, ok);
                match decision {
                    Decision::Restart(a) => {
                        attempt = a;
                        note(
                            opts,
                            &format!(
                                "restarting the ranks of every node (restart {attempt} of {})",
                                opts.max_restarts
                            ),
                        );
                        continue;
                    }
                    Decision::Leave(f) => {
                        link.close();
                        return Ok(done(f.exit_status(), f.signal, Some(f)));
                    }
                    Decision::Finish(global) => {
                        link.close();
                        let mut out = match (outcome, global) {
                            (Outcome::Signalled(sig), g) => {
                                done(ExitStatus::Worker((128 + sig).min(255) as u8), Some(sig), g)
                            }
                            (Outcome::Failed(f), g) => {
                                report(opts, &f);
                                // What node 0 added to this failure (a node that never reported
                                // its end after the stop) is said here too.
                                let own = f.to_report(node);
                                if let Some(g) = g.filter(|g| g.what != own.what) {
                                    note(opts, &format!("the run ended: {}", g.headline()));
                                }
                                done(
                                    ExitStatus::Worker(f.exit_code()),
                                    None,
                                    Some(f.to_report(node)),
                                )
                            }
                            (Outcome::Hung, g) => done(ExitStatus::Hang, None, g),
                            (_, Some(g)) if g.requeue => {
                                note(opts, &format!("{}: the job is requeued", g.headline()));
                                done(ExitStatus::Requeued, None, Some(g))
                            }
                            (_, None) => done(ExitStatus::Success, None, None),
                            (_, Some(g)) => {
                                // The stderr tail was printed when the stop came.
                                note(opts, &format!("the run failed: {}", g.headline()));
                                done(g.exit_status(), None, Some(g))
                            }
                        };
                        // The other nodes' ranks left behind, as node 0 relayed them.
                        for u in link.unkillable().into_iter().filter(|u| u.node != node) {
                            note(
                                opts,
                                &format!("node {} ({}): {}", u.node, u.host, u.describe()),
                            );
                            out.unkillable.push(u);
                        }
                        return Ok(out);
                    }
                }
            }
            if !left.is_empty() {
                // No restart: the ranks left behind may hold the devices the next attempt needs.
                let (status, signal, failure) = match outcome {
                    Outcome::Failed(f) => {
                        if opts.capture.is_none() {
                            report(opts, &f);
                        }
                        (
                            ExitStatus::Worker(f.exit_code()),
                            None,
                            Some(f.to_report(node)),
                        )
                    }
                    Outcome::Signalled(sig) => (ExitStatus::Signal(sig), Some(sig), None),
                    Outcome::Remote(g) => (g.exit_status(), None, Some(g)),
                    _ => (ExitStatus::Failure, None, None),
                };
                return Ok(done(status, signal, failure));
            }
            match outcome {
                Outcome::Success => return Ok(done(ExitStatus::Success, None, None)),
                // A hang is not restarted: the same run would most likely hang again.
                Outcome::Hung => return Ok(done(ExitStatus::Hang, None, None)),
                // Nor a requeue: the job itself runs again, resuming from the ranks' checkpoint.
                Outcome::Requeue => return Ok(done(ExitStatus::Requeued, None, None)),
                Outcome::Remote(g) => return Ok(done(g.exit_status(), None, Some(g))),
                Outcome::Signalled(sig) => {
                    return Ok(done(
                        ExitStatus::Worker((128 + sig).min(255) as u8),
                        Some(sig),
                        None,
                    ))
                }
                Outcome::Failed(f) => {
                    let race = plan.port_auto
                        && f.local_rank == 0
                        && ports::is_addr_in_use(&f.stderr_tail);
                    if race && port_retries < 3 {
                        port_retries += 1;
                        let port = ports::free_port()?;
                        note(
                            opts,
                            &format!(
                            "rendezvous port was taken by another process; retrying on port {port}"
                        ),
                        );
                        plan.set_port(port);
                        continue;
                    }
                    if attempt < opts.max_restarts {
                        attempt += 1;
                        note(
                            opts,
                            &format!(
                                "rank {} {}; restarting all local ranks (restart {attempt} of {})",
                                f.rank,
                                f.describe(),
                                opts.max_restarts
                            ),
                        );
                        continue;
                    }
                    if opts.capture.is_none() {
                        report(opts, &f);
                    }
                    return Ok(done(
                        ExitStatus::Worker(f.exit_code()),
                        None,
                        Some(f.to_report(node)),
                    ));
                }
            }
        }
    }

    /// Every rank of the attempt is gone here: waits for the world's decision (restart, or how the
    /// run ended). A stopping signal meanwhile — while the world waits for a lost node's
    /// replacement, or for the other nodes' ranks — is acted on at once: this launcher leaves the
    /// run, every node is told, and all end 128+N (SLURM's warning under --slurm_requeue: the job
    /// is requeued, 123).
    fn attempt_ended(&self, link: &control::Link, attempt: u32, ok: bool) -> Decision {
        let opts = self.opts;
        let rx = self.rx;
        let (node, host) = (link.node(), plan_host());
        link.attempt_ended(
            attempt,
            ok,
            |w| {
                note(
                    opts,
                    &format!(
                        "waiting up to {} s for a new launcher of {} (the same --machine_rank) to join restart {} of {}",
                        w.secs,
                        control::LostNode::list(&w.lost),
                        w.attempt,
                        opts.max_restarts
                    ),
                )
            },
            || {
                while let Ok(Event::Signal { sig, .. }) = rx.try_recv() {
                    if let Some(f) = stopped_between_attempts(opts, node, &host, sig) {
                        return Some(f);
                    }
                }
                None
            },
        )
    }

    /// One attempt: spawn every rank, watch them to the end, clean up everything they left.
    fn run_once(&mut self, plan: &Plan, attempt: u32) -> Result<(Outcome, Vec<RankResult>)> {
        if let Some(t) = &self.torchrun_logs {
            let local: Vec<u32> = plan.ranks.iter().map(|r| r.local_rank).collect();
            self.attempt_logs = Some(t.attempt(attempt, &local)?);
        }
        let mut running: Vec<Running> = Vec::new();
        let mut spawn_stopped = None;
        for spec in &plan.ranks {
            // A stop asked for while ranks start (a signal, the caller's stop) starts no more: with
            // many ranks on a machine short of memory, starting them all first can take minutes.
            let sig = self.stopping.load(Ordering::Relaxed);
            let asked = self
                .opts
                .capture
                .as_ref()
                .is_some_and(|c| c.stop.load(Ordering::Relaxed));
            if sig != 0 || asked {
                spawn_stopped = (sig != 0).then_some(sig);
                break;
            }
            match self.spawn(plan, spec, attempt) {
                Ok(r) => running.push(r),
                Err(e) => {
                    stop_and_wait(&mut running, Stop::kill());
                    guard::reap_strays(STRAY_LIMIT);
                    finish(&mut running);
                    return Err(e);
                }
            }
        }
        let mut watched = Monitor::new(self.opts, &mut running, plan, attempt)
            .watch(self.rx, self.strays.as_mut());
        self.unkillable = std::mem::take(&mut watched.unkillable);
        // Leaders are gone; whatever is left in their groups (grandchildren) goes too, and so does
        // every other process of the run the launcher adopted (double-forked daemons).
        signal_groups_all(&running, libc::SIGKILL);
        guard::reap_strays(STRAY_LIMIT);
        finish(&mut running);
        let results = running
            .iter()
            .map(|r| RankResult {
                rank: r.rank,
                local_rank: r.local_rank,
                end: RankEnd {
                    status: r
                        .status
                        .unwrap_or_else(|| std::process::ExitStatus::from_raw(1 << 8)),
                    stopped: r.stopped,
                },
            })
            .collect();
        let outcome = match watched.remote {
            _ if watched.requeue && watched.stop_signal.is_none() => Outcome::Requeue,
            Some(g) if watched.stop_signal.is_none() && watched.first_failure.is_none() => {
                Outcome::Remote(g)
            }
            _ if watched.hung && watched.stop_signal.is_none() => Outcome::Hung,
            // A signal that stopped the spawning before any rank started never reached the monitor.
            _ => outcome_of(
                plan,
                &running,
                watched.stop_signal.or(spawn_stopped),
                watched.first_failure,
            ),
        };
        Ok((outcome, results))
    }

    /// Starts one rank in its own session, with its guard and the readers of its pipes.
    fn spawn(&mut self, plan: &Plan, spec: &RankSpec, attempt: u32) -> Result<Running> {
        let Some(program) = spec.argv.first() else {
            return Err(SuperviseError::NotFound {
                program: String::new(),
            }
            .into());
        };
        let (mut cmd, error_file) = self.command(plan, spec, attempt);
        // Log files first: a rank that could not log is not started.
        let mut files = [None, None];
        if let Some(logs) = self.logs.as_mut() {
            for (file, stream) in files.iter_mut().zip(["stdout", "stderr"]) {
                let path = logs.path(spec.rank, spec.local_rank, attempt, stream);
                *file = Some(logs.create(&path)?);
            }
        }
        let (stdout, stderr) = self.sinks(plan, spec, attempt);
        let (mut sinks, mut dups) = (None, [None, None]);
        if let Some(a) = &self.attempt_logs {
            let routes = [
                a.route(spec.rank, spec.local_rank, false)?,
                a.route(spec.rank, spec.local_rank, true)?,
            ];
            sinks = Some(self.torchrun_sinks(plan, spec, attempt, &routes));
            for (i, r) in routes.into_iter().enumerate() {
                files[i] = r.file;
                dups[i] = r.duplicate;
            }
        }
        let (stdout, stderr) = sinks.unwrap_or((stdout, stderr));
        let mut masters = [None, None];
        for (stream, pty) in self
            .terminal
            .ptys([&stdout, &stderr])
            .into_iter()
            .enumerate()
        {
            if let Some(pty) = pty {
                match stream {
                    0 => cmd.stdout(pty.slave),
                    _ => cmd.stderr(pty.slave),
                };
                masters[stream] = Some(pty.master);
            }
        }
        let spawned = cmd.spawn();
        // The launcher's copies of the ptys' slaves close here: a master reads EOF once the rank's do.
        drop(cmd);
        let mut child = spawned.map_err(|e| spawn_error(program, e))?;
        let pid = Pid::from_raw(child.id() as i32);
        let guard = guard::spawn_guard(pid, self.opts.grace, self.strays.as_ref());
        self.terminal.watch(&masters, pid);
        let (tail, readers) = output::relay(&mut child, [stdout, stderr], files, masters, dups);
        Ok(Running {
            rank: spec.rank,
            local_rank: spec.local_rank,
            child,
            pgid: pid,
            guard,
            status: None,
            stopped: false,
            tail,
            readers,
            error_file,
        })
    }

    /// A rank's command: its argv and variables, torchelastic's restart count and error file, pipes
    /// for its output (a stream that gets a pty is given it in [`Session::spawn`]), and its own session.
    fn command(&self, plan: &Plan, spec: &RankSpec, attempt: u32) -> (Command, Option<PathBuf>) {
        let mut cmd = Command::new(&spec.argv[0]);
        cmd.args(&spec.argv[1..]);
        cmd.envs(&spec.env);
        let torchrun_error_file = self
            .attempt_logs
            .as_ref()
            .map(|a| a.error_file(spec.local_rank));
        let error_file = plan.topology.as_ref().map(|_| {
            if let Some(f) = &torchrun_error_file {
                return f.clone();
            }
            let root = self
                .opts
                .log_dir
                .as_deref()
                .or(self.tmp_root.as_deref())
                .unwrap_or(Path::new("."));
            let root = match (&self.opts.log_dir, plan.topology.as_ref()) {
                // Nodes may share --log_dir (NFS, Lustre): each writes under its own directory.
                (Some(_), Some(t)) if t.num_nodes > 1 => root.join(format!("node_{}", t.node_rank)),
                _ => root.to_path_buf(),
            };
            root.join(format!("attempt_{attempt}"))
                .join(spec.local_rank.to_string())
                .join("error.json")
        });
        if plan.topology.is_some() {
            cmd.env(env_vars::TORCHELASTIC_RESTART_COUNT, attempt.to_string());
            if let Some(ef) = &error_file {
                if let Some(dir) = ef.parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                let _ = std::fs::remove_file(ef);
                cmd.env(env_vars::TORCHELASTIC_ERROR_FILE, ef);
            }
        }
        cmd.stdin(Stdio::inherit())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let parent = nix::unistd::getpid().as_raw();
        // Formatted here: between fork and exec nothing may allocate.
        let oom_score_adj = self.opts.oom_score_adj.map(|a| a.to_string().into_bytes());
        // --numa_binding: the CPUs set before exec, as torch's `numactl --physcpubind` does.
        let cpus = spec.numa_cpus.as_ref().map(|c| c.to_cpu_set());
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // Its own session and group, as torchrun's workers: the terminal's signals reach only
                // the launcher, and a rank reading stdin is not stopped as a background job.
                libc::setsid();
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGTERM as libc::c_ulong,
                    0,
                    0,
                    0,
                );
                if libc::getppid() != parent {
                    libc::_exit(128 + libc::SIGTERM);
                }
                // Under kernel.yama.ptrace_scope=1 only the launcher and its children (py-spy, for
                // --hang_timeout's stacks) may read the rank; a kernel without Yama says EINVAL.
                libc::prctl(libc::PR_SET_PTRACER, parent as libc::c_ulong, 0, 0, 0);
                if let Some(adj) = &oom_score_adj {
                    let fd = libc::open(
                        c"/proc/self/oom_score_adj".as_ptr(),
                        libc::O_WRONLY | libc::O_CLOEXEC,
                    );
                    if fd >= 0 {
                        libc::write(fd, adj.as_ptr().cast(), adj.len());
                        libc::close(fd);
                    }
                }
                if let Some(set) = &cpus {
                    if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        (cmd, error_file)
    }

    /// Where a rank's stdout and stderr go: the capturing caller takes stdout; the console gets what
    /// the local-rank filter lets through, prefixed as asked.
    fn sinks(&self, plan: &Plan, spec: &RankSpec, attempt: u32) -> (Sink, Sink) {
        let opts = self.opts;
        let show = opts
            .console
            .local_ranks
            .as_ref()
            .is_none_or(|l| l.contains(&spec.local_rank));
        let node = plan.topology.as_ref().map_or(0, |t| t.node_rank);
        let role = plan
            .topology
            .as_ref()
            .map_or("default", |t| t.role.as_str());
        let prefix = opts.console.prefix.as_ref().map(|p| {
            render_template(
                p,
                spec.rank,
                spec.local_rank,
                node,
                attempt,
                &[("role", role)],
            )
        });
        let console = |is_err| {
            if show {
                Sink::Console {
                    is_err,
                    prefix: prefix.clone(),
                }
            } else {
                Sink::Nowhere
            }
        };
        let stdout = match &opts.capture {
            Some(c) => Sink::Capture(spec.rank, c.sink.clone()),
            None => console(false),
        };
        (stdout, console(true))
    }
}

impl Session<'_> {
    /// torchrun's console rules for a rank's two streams; accel's `--rank_prefix`, when given, heads
    /// every line shown.
    fn torchrun_sinks(
        &self,
        plan: &Plan,
        spec: &RankSpec,
        attempt: u32,
        routes: &[Route; 2],
    ) -> (Sink, Sink) {
        let (own, _) = self.sinks(plan, spec, attempt);
        let own_prefix = match own {
            Sink::Console { prefix, .. } => prefix,
            _ => None,
        };
        let sink = |r: &Route, is_err: bool| match &r.console {
            None => Sink::Nowhere,
            Some(header) => Sink::Console {
                is_err,
                prefix: own_prefix.clone().or_else(|| header.clone()),
            },
        };
        let stdout = match &self.opts.capture {
            Some(c) => Sink::Capture(spec.rank, c.sink.clone()),
            None => sink(&routes[0], false),
        };
        (stdout, sink(&routes[1], true))
    }
}

/// The log file template for this node. Nodes of one run often share `--log_dir` (a network file
/// system), so on many nodes the default layout goes under `node_N/`, and a template of one's own must
/// name `{node}` — else the nodes would write each other's files.
fn node_log_template(plan: &Plan, template: &str) -> Result<String> {
    let Some(t) = plan.topology.as_ref().filter(|t| t.num_nodes > 1) else {
        return Ok(template.to_string());
    };
    if template == DEFAULT_LOG_TEMPLATE {
        return Ok(format!("node_{{node}}/{template}"));
    }
    if !template.contains("{node}") {
        return Err(SuperviseError::LogCollision {
            template: template.to_string(),
            path: format!("(the same path on each of the {} nodes)", t.num_nodes),
            first: "node 0".into(),
            second: "the other nodes".into(),
            missing: "{node}",
        }
        .into());
    }
    Ok(template.to_string())
}

/// This host's name, as the plan gives it to every report.
fn plan_host() -> String {
    crate::host::hostname()
}

/// A signal to a launcher that has no rank running (joining, or waiting for the world's decision):
/// the report it leaves the run with, when the signal stops it. `None` for a signal that does not.
pub fn stopped_between_attempts(
    opts: &Options,
    node: u32,
    host: &str,
    sig: i32,
) -> Option<FailureReport> {
    if sig == libc::SIGCHLD {
        return None;
    }
    if Some(sig) == opts.requeue_signal {
        note(
            opts,
            &format!(
                "{}: SLURM's warning while no rank runs: leaving the run; the job is requeued",
                signal_name(sig)
            ),
        );
        return Some(FailureReport {
            what: format!("received {} (SLURM's warning)", signal_name(sig)),
            signal: Some(sig),
            requeue: true,
            status: Some(ExitStatus::Requeued.code()),
            ..FailureReport::lost(node, host, "")
        });
    }
    if sig == libc::SIGTSTP {
        // No rank to stop first: the launcher stops as the terminal asks.
        let _ = signal_hook::low_level::emulate_default_handler(libc::SIGTSTP);
        return None;
    }
    if !STOPPING.contains(&sig) && !FORWARDED.contains(&sig) {
        return None;
    }
    note(
        opts,
        &format!(
            "{}: leaving the run (no rank of this node runs)",
            signal_name(sig)
        ),
    );
    Some(FailureReport {
        what: format!("left the run: its launcher received {}", signal_name(sig)),
        signal: Some(sig),
        status: Some(ExitStatus::Signal(sig).code()),
        ..FailureReport::lost(node, host, "")
    })
}

/// How long the end of a run keeps killing what its ranks left before giving up on the unkillable.
const STRAY_LIMIT: Duration = Duration::from_secs(2);

/// How often the run's processes outside the ranks' groups are recorded for the guards.
const STRAY_SCAN: Duration = Duration::from_millis(100);

fn note(opts: &Options, msg: &str) {
    if !opts.quiet {
        let _ = writeln!(std::io::stderr(), "{}: {msg}", opts.tool);
    }
}

fn report(opts: &Options, f: &Failure) {
    let mut out = format!(
        "{}: rank {} (local rank {}) on {} {}\n",
        opts.tool,
        f.rank,
        f.local_rank,
        f.host,
        f.describe()
    );
    if let Some(m) = &f.error_message {
        out.push_str(&format!("  error: {m}\n"));
    }
    let lines: Vec<&str> = f.stderr_tail.lines().collect();
    let start = lines.len().saturating_sub(opts.tail_lines);
    if start < lines.len() {
        out.push_str(&format!("  last lines of rank {}'s stderr:\n", f.rank));
        for l in &lines[start..] {
            out.push_str(&format!("  | {l}\n"));
        }
    }
    let _ = std::io::stderr().write_all(out.as_bytes());
}

fn spawn_error(program: &OsString, e: std::io::Error) -> SuperviseError {
    let program = program.to_string_lossy().into_owned();
    match e.kind() {
        std::io::ErrorKind::NotFound if program.contains('/') && Path::new(&program).is_file() => {
            match shebang_interpreter(Path::new(&program)) {
                Some(interpreter) => SuperviseError::InterpreterNotFound {
                    program,
                    interpreter,
                },
                None => SuperviseError::LoaderNotFound { program },
            }
        }
        std::io::ErrorKind::NotFound => SuperviseError::NotFound { program },
        _ => SuperviseError::CannotExecute { program, source: e },
    }
}

/// The interpreter a script's `#!` line names (its first word, a trailing `\r` kept), if it has one.
fn shebang_interpreter(path: &Path) -> Option<String> {
    let mut head = [0u8; 256];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let text = String::from_utf8_lossy(line);
    text.split([' ', '\t'])
        .find(|w| !w.is_empty())
        .map(str::to_string)
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    let mut s = lines[start..].join("\n");
    if !s.is_empty() {
        s.push('\n');
    }
    s
}

fn outcome_of(
    plan: &Plan,
    running: &[Running],
    stop_signal: Option<i32>,
    first_failure: Option<usize>,
) -> Outcome {
    if let Some(s) = stop_signal {
        return Outcome::Signalled(s);
    }
    match first_failure {
        None => Outcome::Success,
        Some(i) => {
            let r = &running[i];
            let error_message = r.error_file.as_ref().and_then(|p| read_error_file(p));
            Outcome::Failed(Failure {
                rank: r.rank,
                local_rank: r.local_rank,
                host: plan.host.clone(),
                status: r
                    .status
                    .unwrap_or_else(|| std::process::ExitStatus::from_raw(1 << 8)),
                stderr_tail: r.tail.lock().map(|t| t.text()).unwrap_or_default(),
                error_message,
            })
        }
    }
}

/// The message of a torchelastic error file (`@record`), if the rank wrote one.
fn read_error_file(p: &Path) -> Option<String> {
    let text = std::fs::read_to_string(p).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    match &v["message"] {
        serde_json::Value::String(s) => Some(s.clone()),
        m => m["message"].as_str().map(str::to_string),
    }
}

/// `sig` to the group of every rank still running.
fn signal_groups(running: &[Running], sig: i32) {
    for r in running.iter().filter(|r| r.status.is_none()) {
        let _ = killpg(r.pgid, Signal::try_from(sig).ok());
    }
}

/// `sig` to the group of every rank, ended or not (what its children left behind).
fn signal_groups_all(running: &[Running], sig: i32) {
    for r in running {
        let _ = killpg(r.pgid, Signal::try_from(sig).ok());
    }
}

/// Stops the ranks started so far without a grace period to watch (a later rank failed to spawn).
/// A rank still there after [`KILL_WAIT`] is not waited for (the kernel holds it).
fn stop_and_wait(running: &mut [Running], stop: Stop) {
    signal_groups_all(running, stop.signal);
    let until = Instant::now() + KILL_WAIT;
    loop {
        for r in running.iter_mut().filter(|r| r.status.is_none()) {
            r.status = r.child.try_wait().ok().flatten();
        }
        if running.iter().all(|r| r.status.is_some()) || Instant::now() >= until {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn finish(running: &mut [Running]) {
    for r in running.iter_mut() {
        if let Some(g) = r.guard.take() {
            let _ = nix::sys::signal::kill(g, Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(g, None);
        }
        // Readers end at EOF, which a grandchild that left the group could hold off: wait briefly.
        let until = Instant::now() + Duration::from_millis(500);
        for h in r.readers.drain(..) {
            while !h.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::EnvMap;

    /// The capturing mode accel-test relies on: lines come over the channel tagged with the rank, a
    /// failure leaves the others running, and the caller's stop ends them.
    #[test]
    fn capture_continue_and_stop() {
        let script = "echo hello $RANK; echo -n tail$RANK; [ $RANK = 1 ] && exit 3; exec sleep 30";
        let argv: Vec<OsString> = ["sh", "-c", script].iter().map(OsString::from).collect();
        let env = Environment::default();
        let mut plan = Plan::local(2, &argv, &EnvMap::new(), &env).unwrap();
        plan.port_auto = false;
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let opts = Options {
            tool: "test",
            grace: Duration::from_secs(5),
            quiet: true,
            on_failure: OnFailure::Continue,
            capture: Some(Capture {
                sink: tx,
                stop: Arc::clone(&stop),
            }),
            ..Options::default()
        };
        let stopper = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for c in rx.iter() {
                if let Captured::Ended { rank: 1, end } = &c {
                    assert_eq!(end.status.code(), Some(3));
                    // Rank 0 is still running, as asked; now stop it.
                    std::thread::sleep(Duration::from_millis(300));
                    stop.store(true, Ordering::Relaxed);
                }
                seen.push(c);
                let ends = seen
                    .iter()
                    .filter(|c| matches!(c, Captured::Ended { .. } | Captured::Eof { .. }))
                    .count();
                if ends == 4 {
                    break;
                }
            }
            seen
        });
        let started = Instant::now();
        let outcome = run(&plan, &opts, &env).unwrap();
        let seen = stopper.join().unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(outcome.status, ExitStatus::Worker(3));
        assert_eq!(outcome.signal, None);
        for r in 0..2u32 {
            let lines: Vec<&str> = seen
                .iter()
                .filter_map(|c| match c {
                    Captured::Line { rank, line } if *rank == r => Some(line.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(lines, [format!("hello {r}"), format!("tail{r}")]);
        }
        let r0 = &outcome.ranks[0];
        assert_eq!(r0.end.status.signal(), Some(libc::SIGTERM));
        assert!(r0.end.stopped, "rank 0 was stopped by the caller");
        assert!(!outcome.ranks[1].end.stopped);
    }
}
