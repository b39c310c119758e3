//! Runs a [`Plan`] and stays with it until every process of the run is gone. Each rank leads its own
//! process group and session (so a terminal's Ctrl-C reaches only the launcher, which forwards it once) and gets
//! `PR_SET_PDEATHSIG`; a small guard process per rank takes the rank's whole group down should the
//! launcher itself be SIGKILLed (PDEATHSIG reaches only the direct child, not its children).
//!
//! Stopping is always the same: the signal (SIGTERM, or the one the launcher received) to every rank's
//! group, a grace period to checkpoint, then SIGKILL. The first rank to fail decides the exit status:
//! its code, or 128+N for signal N.
//!
//! A tool that reads its ranks' output itself (accel-test reads its ranks' JSON events) runs them through
//! the same supervisor with a [`Capture`]: stdout lines and rank ends come to it over a channel, the
//! survivors of a failure are left running ([`OnFailure::Continue`]) so they can report it, and the
//! caller decides when to stop through [`Capture::stop`].

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::plan::Plan;
use super::ports;
use crate::env_vars::{self, Environment};
use crate::error::{Diagnostic, Result};
use crate::exit_status::ExitStatus;

/// Signals forwarded to every rank's group. The first four also stop the run.
pub const FORWARDED: &[i32] = &[
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    #[error("cannot run `{program}`: not found")]
    NotFound { program: String },
    #[error("cannot run `{program}`")]
    CannotExecute {
        program: String,
        #[source]
        source: std::io::Error,
    },
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
            SuperviseError::NotFound { .. } => {
                vec!["check the script path, or set ACCEL_PYTHON to the interpreter to use".into()]
            }
            _ => Vec::new(),
        }
    }
    fn exit_status(&self) -> ExitStatus {
        match self {
            SuperviseError::NotFound { .. } => ExitStatus::NotFound,
            SuperviseError::CannotExecute { .. } => ExitStatus::CannotExecute,
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
        }
    }
}

pub const DEFAULT_LOG_TEMPLATE: &str = "attempt_{attempt}/{local_rank}/{stream}.log";

/// Renders a template's `{name}` placeholders.
pub fn render_template(
    t: &str,
    rank: u32,
    local_rank: u32,
    node: u32,
    attempt: u32,
    extra: &[(&str, &str)],
) -> String {
    let mut s = t
        .replace("{rank}", &rank.to_string())
        .replace("{local_rank}", &local_rank.to_string())
        .replace("{node}", &node.to_string())
        .replace("{attempt}", &attempt.to_string());
    for (k, v) in extra {
        s = s.replace(&format!("{{{k}}}"), v);
    }
    s
}

enum Event {
    Signal(i32),
}

/// The last bytes a rank wrote to stderr.
#[derive(Default)]
struct Tail {
    buf: VecDeque<u8>,
}

const TAIL_BYTES: usize = 16 * 1024;

impl Tail {
    fn push(&mut self, data: &[u8]) {
        self.buf.extend(data);
        while self.buf.len() > TAIL_BYTES {
            self.buf.pop_front();
        }
    }
    fn text(&self) -> String {
        let v: Vec<u8> = self.buf.iter().copied().collect();
        String::from_utf8_lossy(&v).into_owned()
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

pub fn signal_name(sig: i32) -> &'static str {
    Signal::try_from(sig)
        .map(|s| s.as_str())
        .unwrap_or("unknown")
}

/// Starts every rank of `plan`, supervises them and returns the run's exit status.
///
/// Must be called from a thread that outlives the ranks (the main thread): `PR_SET_PDEATHSIG` fires
/// when the spawning thread exits.
pub fn supervise(plan: &Plan, opts: &Options, env: &Environment) -> Result<ExitStatus> {
    run(plan, opts, env).map(|o| o.status)
}

/// [`supervise`], returning how every rank ended.
pub fn run(plan: &Plan, opts: &Options, env: &Environment) -> Result<RunOutcome> {
    let (tx, rx) = mpsc::channel();
    let mut sigs = FORWARDED.to_vec();
    sigs.push(libc::SIGCHLD);
    let mut signals =
        signal_hook::iterator::Signals::new(&sigs).map_err(|e| SuperviseError::Launcher {
            what: "install signal handlers".into(),
            source: e,
        })?;
    let handle = signals.handle();
    std::thread::spawn(move || {
        for s in signals.forever() {
            if tx.send(Event::Signal(s)).is_err() {
                break;
            }
        }
    });
    let result = run_attempts(plan.clone(), opts, env, &rx);
    handle.close();
    result
}

fn run_attempts(
    mut plan: Plan,
    opts: &Options,
    env: &Environment,
    rx: &Receiver<Event>,
) -> Result<RunOutcome> {
    let tmp_root = match &opts.log_dir {
        Some(_) => None,
        None => {
            let base = env
                .non_empty(env_vars::TMPDIR)
                .map(PathBuf::from)
                .unwrap_or_else(std::env::temp_dir);
            Some(base.join(format!("accel_launch_{}", std::process::id())))
        }
    };
    let mut attempt = 0u32;
    let mut port_retries = 0u32;
    let result = loop {
        let (outcome, ranks) = run_once(&plan, opts, env, rx, attempt, tmp_root.as_deref())?;
        let done = |status, signal| RunOutcome {
            status,
            signal,
            ranks: ranks.clone(),
        };
        match outcome {
            Outcome::Success => break Ok(done(ExitStatus::Success, None)),
            Outcome::Signalled(sig) => {
                break Ok(done(
                    ExitStatus::Worker((128 + sig).min(255) as u8),
                    Some(sig),
                ))
            }
            Outcome::Failed(f) => {
                let race =
                    plan.port_auto && f.local_rank == 0 && ports::is_addr_in_use(&f.stderr_tail);
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
                break Ok(done(ExitStatus::Worker(f.exit_code()), None));
            }
        }
    };
    if let Some(t) = tmp_root {
        let _ = std::fs::remove_dir_all(t);
    }
    result
}

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

enum Outcome {
    Success,
    Failed(Failure),
    Signalled(i32),
}

fn spawn_error(program: &OsString, e: std::io::Error) -> SuperviseError {
    let program = program.to_string_lossy().into_owned();
    match e.kind() {
        std::io::ErrorKind::NotFound => SuperviseError::NotFound { program },
        _ => SuperviseError::CannotExecute { program, source: e },
    }
}

fn run_once(
    plan: &Plan,
    opts: &Options,
    _env: &Environment,
    rx: &Receiver<Event>,
    attempt: u32,
    tmp_root: Option<&Path>,
) -> Result<(Outcome, Vec<RankResult>)> {
    let launcher = nix::unistd::getpid();
    let node = plan.topology.as_ref().map_or(0, |t| t.node_rank);
    let role = plan
        .topology
        .as_ref()
        .map_or("default".to_string(), |t| t.role.clone());
    let mut running: Vec<Running> = Vec::new();
    for spec in &plan.ranks {
        let Some(program) = spec.argv.first() else {
            return Err(SuperviseError::NotFound {
                program: String::new(),
            }
            .into());
        };
        let mut cmd = Command::new(program);
        cmd.args(&spec.argv[1..]);
        cmd.envs(&spec.env);
        let error_file = plan.topology.as_ref().map(|_| {
            let root = opts
                .log_dir
                .as_deref()
                .or(tmp_root)
                .unwrap_or(Path::new("."));
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
        let parent = launcher.as_raw();
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
                Ok(())
            });
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                stop_all(&mut running, libc::SIGKILL, Duration::ZERO, rx, opts);
                finish(&mut running);
                return Err(spawn_error(program, e).into());
            }
        };
        let pid = Pid::from_raw(child.id() as i32);
        let guard = spawn_guard(pid, opts.grace);
        let tail = Arc::new(Mutex::new(Tail::default()));
        let mut readers = Vec::new();
        let show = opts
            .console
            .local_ranks
            .as_ref()
            .is_none_or(|l| l.contains(&spec.local_rank));
        let prefix = opts.console.prefix.as_ref().map(|p| {
            render_template(
                p,
                spec.rank,
                spec.local_rank,
                node,
                attempt,
                &[("role", &role)],
            )
        });
        for (stream, is_err) in [("stdout", false), ("stderr", true)] {
            let file = match &opts.log_dir {
                Some(dir) => {
                    let path = dir.join(render_template(
                        &opts.log_template,
                        spec.rank,
                        spec.local_rank,
                        node,
                        attempt,
                        &[("stream", stream)],
                    ));
                    if let Some(d) = path.parent() {
                        std::fs::create_dir_all(d)
                            .map_err(|e| crate::error::IoError::new("create", d, e))?;
                    }
                    Some(
                        std::fs::File::create(&path)
                            .map_err(|e| crate::error::IoError::new("create", &path, e))?,
                    )
                }
                None => None,
            };
            let pipe: Option<Box<dyn Read + Send>> = if is_err {
                child
                    .stderr
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>)
            } else {
                child
                    .stdout
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>)
            };
            if let Some(pipe) = pipe {
                let tail = is_err.then(|| tail.clone());
                let prefix = prefix.clone();
                let to = match (&opts.capture, is_err) {
                    (Some(c), false) => Sink::Capture(spec.rank, c.sink.clone()),
                    _ if !show => Sink::Nowhere,
                    _ => Sink::Console { is_err, prefix },
                };
                readers.push(std::thread::spawn(move || forward(pipe, to, file, tail)));
            }
        }
        running.push(Running {
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
        });
    }

    let mut first_failure: Option<usize> = None;
    let mut stop_signal: Option<i32> = None;
    // Set once the run is being stopped: the time SIGKILL follows.
    let mut deadline: Option<Instant> = None;
    let mut killed = false;
    loop {
        for r in running.iter_mut().filter(|r| r.status.is_none()) {
            if let Ok(Some(st)) = r.child.try_wait() {
                r.status = Some(st);
                r.stopped = deadline.is_some() && st.signal().is_some();
                if let Some(c) = &opts.capture {
                    let end = RankEnd {
                        status: st,
                        stopped: r.stopped,
                    };
                    let _ = c.sink.send(Captured::Ended { rank: r.rank, end });
                }
            }
        }
        if first_failure.is_none() && stop_signal.is_none() {
            if let Some(i) = running
                .iter()
                .position(|r| r.status.is_some_and(|s| !s.success()))
            {
                first_failure = Some(i);
                if opts.on_failure == OnFailure::StopAll && deadline.is_none() {
                    signal_groups(&running, libc::SIGTERM);
                    deadline = Some(Instant::now() + opts.grace);
                }
            }
        }
        let stop_asked = opts
            .capture
            .as_ref()
            .is_some_and(|c| c.stop.load(Ordering::Relaxed));
        if stop_asked && deadline.is_none() {
            signal_groups(&running, libc::SIGTERM);
            deadline = Some(Instant::now() + opts.grace);
        }
        if running.iter().all(|r| r.status.is_some()) {
            break;
        }
        if let Some(d) = deadline {
            if !killed && Instant::now() >= d {
                signal_groups(&running, libc::SIGKILL);
                killed = true;
            }
        }
        let wait = match deadline {
            Some(d) if !killed => d
                .saturating_duration_since(Instant::now())
                .min(opts.monitor_interval),
            _ => opts.monitor_interval,
        };
        match rx.recv_timeout(wait) {
            Ok(Event::Signal(s)) if s == libc::SIGCHLD => {}
            Ok(Event::Signal(s)) => {
                signal_groups(&running, s);
                if [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT].contains(&s)
                    && stop_signal.is_none()
                {
                    stop_signal = Some(s);
                    if deadline.is_none() {
                        deadline = Some(Instant::now() + opts.grace);
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(wait),
        }
    }
    // Leaders are gone; whatever is left in their groups (grandchildren) goes too.
    signal_groups_all(&running, libc::SIGKILL);
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
    let outcome = outcome_of(plan, &running, stop_signal, first_failure);
    Ok((outcome, results))
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

fn signal_groups(running: &[Running], sig: i32) {
    for r in running.iter().filter(|r| r.status.is_none()) {
        let _ = killpg(r.pgid, Signal::try_from(sig).ok());
    }
}

fn signal_groups_all(running: &[Running], sig: i32) {
    for r in running {
        let _ = killpg(r.pgid, Signal::try_from(sig).ok());
    }
}

fn stop_all(
    running: &mut [Running],
    sig: i32,
    _grace: Duration,
    _rx: &Receiver<Event>,
    _opts: &Options,
) {
    signal_groups_all(running, sig);
    for r in running.iter_mut() {
        if r.status.is_none() {
            r.status = r.child.wait().ok();
        }
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

/// Where a reader sends what a rank writes.
enum Sink {
    Nowhere,
    Console {
        is_err: bool,
        prefix: Option<String>,
    },
    /// Lines to the capturing caller, tagged with the rank.
    Capture(u32, Sender<Captured>),
}

fn forward(
    mut pipe: Box<dyn Read + Send>,
    to: Sink,
    mut file: Option<std::fs::File>,
    tail: Option<Arc<Mutex<Tail>>>,
) {
    let mut buf = [0u8; 8192];
    let mut pending: Vec<u8> = Vec::new();
    let emit = |is_err: bool, data: &[u8]| {
        if is_err {
            let _ = std::io::stderr().lock().write_all(data);
        } else {
            let mut o = std::io::stdout().lock();
            let _ = o.write_all(data);
            let _ = o.flush();
        }
    };
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let data = &buf[..n];
        if let Some(f) = file.as_mut() {
            let _ = f.write_all(data);
        }
        if let Some(t) = &tail {
            if let Ok(mut t) = t.lock() {
                t.push(data);
            }
        }
        match &to {
            Sink::Nowhere => {}
            Sink::Console {
                is_err,
                prefix: None,
            } => emit(*is_err, data),
            Sink::Console {
                is_err,
                prefix: Some(p),
            } => {
                pending.extend_from_slice(data);
                let mut out = Vec::new();
                while let Some(i) = pending.iter().position(|b| *b == b'\n') {
                    out.extend_from_slice(p.as_bytes());
                    out.extend(pending.drain(..=i));
                }
                if !out.is_empty() {
                    emit(*is_err, &out);
                }
            }
            Sink::Capture(rank, tx) => {
                pending.extend_from_slice(data);
                while let Some(i) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=i).collect();
                    let line = String::from_utf8_lossy(&line[..i]).into_owned();
                    let _ = tx.send(Captured::Line { rank: *rank, line });
                }
            }
        }
    }
    match &to {
        Sink::Console {
            is_err,
            prefix: Some(p),
        } if !pending.is_empty() => {
            let mut out = p.as_bytes().to_vec();
            out.extend_from_slice(&pending);
            out.push(b'\n');
            emit(*is_err, &out);
        }
        Sink::Capture(rank, tx) => {
            if !pending.is_empty() {
                let line = String::from_utf8_lossy(&pending).into_owned();
                let _ = tx.send(Captured::Line { rank: *rank, line });
            }
            let _ = tx.send(Captured::Eof { rank: *rank });
        }
        _ => {}
    }
}

/// Forks a guard that outlives a SIGKILLed launcher long enough to take the rank's group down: on the
/// launcher's death it waits for the rank (which got SIGTERM from its own PDEATHSIG) to end, at most
/// the grace period, then SIGKILLs the group. The launcher kills the guard when the run ends.
fn spawn_guard(rank: Pid, grace: Duration) -> Option<Pid> {
    let launcher = nix::unistd::getpid().as_raw();
    let pgid = rank.as_raw();
    let grace_ms = grace.as_millis().min(u64::MAX as u128) as u64;
    // Built before the fork: the child may not allocate.
    let stat_path = std::ffi::CString::new(format!("/proc/{pgid}/stat")).ok();
    // SAFETY: the child only makes async-signal-safe calls and ends with _exit.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return None;
        }
        if pid > 0 {
            return Some(Pid::from_raw(pid));
        }
        libc::setpgid(0, 0);
        for s in [
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGHUP,
            libc::SIGTSTP,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGPIPE,
        ] {
            libc::signal(s, libc::SIG_IGN);
        }
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGTERM as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::getppid() == launcher {
            let mut sig: libc::c_int = 0;
            while libc::sigwait(&set, &mut sig) != 0 {}
        }
        // The launcher is gone.
        let mut waited: u64 = 0;
        while waited < grace_ms && leader_running(stat_path.as_ref()) {
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 20_000_000,
            };
            libc::nanosleep(&ts, std::ptr::null_mut());
            waited += 20;
        }
        libc::killpg(pgid, libc::SIGKILL);
        libc::_exit(0);
    }
}

/// Whether the rank (group leader) still runs: its /proc entry exists and is not a zombie, which an
/// adopting init that does not reap would leave behind. Async-signal-safe (open/read/close only).
fn leader_running(stat_path: Option<&std::ffi::CString>) -> bool {
    let Some(path) = stat_path else { return false };
    // SAFETY: plain syscalls on a stack buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
        if fd < 0 {
            return false;
        }
        let mut buf = [0u8; 512];
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        if n <= 0 {
            return false;
        }
        let data = &buf[..n as usize];
        match data.iter().rposition(|b| *b == b')') {
            Some(i) => data
                .get(i + 2)
                .is_some_and(|state| *state != b'Z' && *state != b'X'),
            None => false,
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
