//! What the ranks write and where it goes: per-rank log files (named by a template, never over a
//! previous run's), the stderr tail a failure report quotes, and the relay of each rank's pipes to the
//! console or to a capturing caller.
//!
//! The console gets whole lines: ranks print concurrently, and a line relayed in pieces would be cut
//! by another rank's (torchrun's `tail_log` reads whole lines too). A line that stays unfinished is
//! flushed after [`PARTIAL_DELAY`] or at [`MAX_PARTIAL`] bytes, so prompts and `\r` progress bars still
//! show and a rank writing one endless line neither blocks on its pipe nor grows the launcher's memory.
//!
//! Under torchrun and `accelerate launch` a rank that is not redirected writes straight to the
//! launcher's terminal: `isatty` is true and `shutil.get_terminal_size()` is the terminal's, so tqdm
//! draws full-width bars and colour libraries colour. Here every line passes through the launcher (to
//! keep it whole, prefixed, filtered and teed), so when a stream of the launcher is a terminal, each
//! rank stream that reaches it gets a [`Terminal`] pty of its own of the same size instead of a pipe,
//! resized (and sent SIGWINCH) when the launcher's terminal is.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::error::SuperviseError;
use super::options::{Captured, DEFAULT_LOG_TEMPLATE};
use crate::error::{IoError, Result};
use crate::launch::plan::{Plan, RankSpec};
use crate::launch::torchrun::logs::Duplicate;

/// How long an unfinished line waits for its end before the console gets it anyway.
pub(super) const PARTIAL_DELAY: Duration = Duration::from_millis(200);
/// The most of an unfinished line the relay holds.
pub(super) const MAX_PARTIAL: usize = 64 * 1024;
/// Bytes of a rank's stderr kept for the failure report.
const TAIL_BYTES: usize = 16 * 1024;

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

/// The per-rank log files of one run under `--log_dir`.
pub(super) struct LogFiles {
    dir: PathBuf,
    template: String,
    node: u32,
    /// Files this run made: a retry of the same attempt (a lost port race) may write them again.
    created: HashSet<PathBuf>,
}

impl LogFiles {
    pub(super) fn new(dir: &Path, template: &str, node: u32) -> Self {
        LogFiles {
            dir: dir.to_path_buf(),
            template: template.to_string(),
            node,
            created: HashSet::new(),
        }
    }

    pub(super) fn path(&self, rank: u32, local_rank: u32, attempt: u32, stream: &str) -> PathBuf {
        self.dir.join(render_template(
            &self.template,
            rank,
            local_rank,
            self.node,
            attempt,
            &[("stream", stream)],
        ))
    }

    /// Before anything is spawned: every file of every attempt is distinct (else a usage error naming
    /// the placeholder the template lacks), and none is left from an earlier run (torchrun makes a
    /// directory per run; accel-launch refuses rather than truncate it).
    pub(super) fn check(&self, ranks: &[RankSpec], max_restarts: u32) -> Result<()> {
        let mut seen: BTreeMap<PathBuf, (u32, u32, &str)> = BTreeMap::new();
        for attempt in 0..=max_restarts {
            for spec in ranks {
                for stream in ["stdout", "stderr"] {
                    let path = self.path(spec.rank, spec.local_rank, attempt, stream);
                    if let Some((rank, a, s)) =
                        seen.insert(path.clone(), (spec.rank, attempt, stream))
                    {
                        let missing = if s != stream {
                            "{stream}"
                        } else if rank != spec.rank {
                            "{rank} or {local_rank}"
                        } else {
                            "{attempt}"
                        };
                        return Err(SuperviseError::LogCollision {
                            template: self.template.clone(),
                            path: path.display().to_string(),
                            first: format!("rank {rank} {s} (attempt {a})"),
                            second: format!("rank {} {stream} (attempt {attempt})", spec.rank),
                            missing,
                        }
                        .into());
                    }
                    self.inside(&path)?;
                    if path.exists() {
                        return Err(SuperviseError::LogExists {
                            path: path.display().to_string(),
                        }
                        .into());
                    }
                }
            }
        }
        Ok(())
    }

    /// A file of the template stays inside the log directory: the template cannot name `..` or an
    /// absolute path (its parser refuses them), and no directory of its path below the log
    /// directory may be a symbolic link, which would lead the file anywhere (`--log_dir logs` with
    /// `logs/0 -> /etc`). The log directory itself may be a link (a scratch file system's).
    fn inside(&self, path: &Path) -> Result<()> {
        let Ok(rel) = path.strip_prefix(&self.dir) else {
            return Ok(());
        };
        let mut at = self.dir.clone();
        for c in rel.components() {
            at.push(c);
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(SuperviseError::LogThroughLink {
                        path: path.display().to_string(),
                        link: at.display().to_string(),
                    }
                    .into())
                }
                Ok(_) => {}
                // What does not exist yet is made by accel-launch, as a directory or the file.
                Err(_) => break,
            }
        }
        Ok(())
    }

    /// Creates a log file; one that appeared since [`LogFiles::check`] is not overwritten, and none
    /// is written through a link that leaves the log directory.
    pub(super) fn create(&mut self, path: &Path) -> Result<File> {
        self.inside(path)?;
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(|e| IoError::new("create", d, e))?;
        }
        self.inside(path)?;
        let mut o = std::fs::OpenOptions::new();
        o.write(true);
        if self.created.contains(path) {
            o.create(true).truncate(true);
        } else {
            o.create_new(true);
        }
        let f = o.open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                SuperviseError::LogExists {
                    path: path.display().to_string(),
                }
                .into()
            } else {
                crate::error::Error::from(IoError::new("create", path, e))
            }
        })?;
        self.created.insert(path.to_path_buf());
        Ok(f)
    }
}

/// The log file template for this node. Nodes of one run often share `--log_dir` (a network file
/// system), so on many nodes the default layout goes under `node_N/`, and a template of one's own must
/// name `{node}` — else the nodes would write each other's files.
pub(super) fn node_log_template(plan: &Plan, template: &str) -> Result<String> {
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

/// The last bytes a rank wrote to stderr.
#[derive(Default)]
pub(super) struct Tail {
    buf: VecDeque<u8>,
}

impl Tail {
    fn push(&mut self, data: &[u8]) {
        let data = &data[data.len().saturating_sub(TAIL_BYTES)..];
        let over = (self.buf.len() + data.len()).saturating_sub(TAIL_BYTES);
        self.buf.drain(..over.min(self.buf.len()));
        self.buf.extend(data);
    }
    pub(super) fn text(&self) -> String {
        let v: Vec<u8> = self.buf.iter().copied().collect();
        String::from_utf8_lossy(&v).into_owned()
    }
}

/// Where a reader sends what a rank writes.
pub(super) enum Sink {
    Nowhere,
    Console {
        is_err: bool,
        prefix: Option<String>,
    },
    /// Lines to the capturing caller, tagged with the rank.
    Capture(u32, Sender<Captured>),
}

/// One rank's stream cut into the pieces the console gets whole: lines ended by `\n`, or by `\r` (a
/// progress bar's redraw), each with the prefix where a line begins.
struct ConsoleLines {
    prefix: Option<Vec<u8>>,
    /// The unfinished line.
    pending: Vec<u8>,
    /// When `pending` got its first byte.
    since: Option<Instant>,
    /// The console is at the start of one of this rank's lines (after `\n`, or before anything).
    at_start: bool,
    /// The last byte relayed was `\r`: a new line begins unless `\n` follows (a `\r\n` ending).
    after_cr: bool,
}

impl ConsoleLines {
    fn new(prefix: Option<String>) -> Self {
        ConsoleLines {
            prefix: prefix.map(String::into_bytes),
            pending: Vec::new(),
            since: None,
            at_start: true,
            after_cr: false,
        }
    }

    /// Appends to `out` every line `data` finishes, keeping the unfinished rest.
    fn push(&mut self, data: &[u8], out: &mut Vec<u8>) {
        match data.iter().rposition(|b| *b == b'\n' || *b == b'\r') {
            None => {
                if self.pending.is_empty() {
                    self.since = Some(Instant::now());
                }
                self.pending.extend_from_slice(data);
                if self.pending.len() >= MAX_PARTIAL {
                    self.flush(out);
                }
            }
            Some(i) => {
                let held = std::mem::take(&mut self.pending);
                self.emit(&held, out);
                self.emit(&data[..=i], out);
                self.since = None;
                if i + 1 < data.len() {
                    self.push(&data[i + 1..], out);
                }
            }
        }
    }

    /// The unfinished line goes out as it is.
    fn flush(&mut self, out: &mut Vec<u8>) {
        let held = std::mem::take(&mut self.pending);
        self.emit(&held, out);
        self.since = None;
    }

    /// At the end of the stream: the rest, and a newline that ends a prefixed rank's last line so the
    /// next rank's prefix starts a line of its own.
    fn finish(&mut self, out: &mut Vec<u8>) {
        self.flush(out);
        if self.prefix.is_some() && !self.at_start {
            out.push(b'\n');
            self.at_start = true;
        }
    }

    /// When the unfinished line is due to go out.
    fn due(&self) -> Option<Instant> {
        self.since.map(|t| t + PARTIAL_DELAY)
    }

    fn emit(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        let Some(prefix) = self.prefix.take() else {
            out.extend_from_slice(bytes);
            return;
        };
        let mut rest = bytes;
        while let Some(&first) = rest.first() {
            let end = rest
                .iter()
                .position(|b| *b == b'\n' || *b == b'\r')
                .map_or(rest.len(), |i| i + 1);
            let (seg, tail) = rest.split_at(end);
            rest = tail;
            if seg == b"\r" && (self.at_start || self.after_cr) {
                // A redraw of a line not begun: the prefix waits for its text.
                out.push(b'\r');
                continue;
            }
            if self.at_start || (self.after_cr && first != b'\n') {
                out.extend_from_slice(&prefix);
            }
            out.extend_from_slice(seg);
            let last = seg[seg.len() - 1];
            self.at_start = last == b'\n';
            self.after_cr = last == b'\r';
        }
        self.prefix = Some(prefix);
    }
}

/// A rank's stdout cut into `\n`-ended lines for the capturing caller.
struct CaptureLines {
    rank: u32,
    pending: Vec<u8>,
}

impl CaptureLines {
    fn push(&mut self, data: &[u8], tx: &Sender<Captured>) {
        let mut rest = data;
        while let Some(i) = rest.iter().position(|b| *b == b'\n') {
            self.pending.extend_from_slice(&rest[..i]);
            let line = String::from_utf8_lossy(&self.pending).into_owned();
            self.pending.clear();
            let _ = tx.send(Captured::Line {
                rank: self.rank,
                line,
            });
            rest = &rest[i + 1..];
        }
        self.pending.extend_from_slice(rest);
    }
    fn finish(&mut self, tx: &Sender<Captured>) {
        if !self.pending.is_empty() {
            let line = String::from_utf8_lossy(&self.pending).into_owned();
            let _ = tx.send(Captured::Line {
                rank: self.rank,
                line,
            });
        }
        let _ = tx.send(Captured::Eof { rank: self.rank });
    }
}

fn console_write(is_err: bool, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    // One locked write per batch of whole lines: the relays of other ranks wait for the lock.
    if is_err {
        let _ = std::io::stderr().lock().write_all(data);
    } else {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(data);
        let _ = o.flush();
    }
}

/// Whether `fd` has data (or EOF) within `wait`.
fn readable_within(fd: i32, wait: Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = wait.as_millis().clamp(1, i32::MAX as u128) as i32;
    // SAFETY: one pollfd on the stack.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    // An error (EINTR) counts as readable: the read that follows tells.
    n != 0
}

/// Starts the readers of a rank's stdout and stderr (its pty where it got one, else its pipe), each to
/// its sink and log file; the stderr reader keeps the tail a failure report quotes.
pub(super) fn relay(
    child: &mut Child,
    sinks: [Sink; 2],
    files: [Option<File>; 2],
    ptys: [Option<Arc<File>>; 2],
    dups: [Option<Duplicate>; 2],
) -> (Arc<Mutex<Tail>>, Vec<JoinHandle<()>>) {
    let tail = Arc::new(Mutex::new(Tail::default()));
    let pipes = [
        child.stdout.take().map(|p| File::from(OwnedFd::from(p))),
        child.stderr.take().map(|p| File::from(OwnedFd::from(p))),
    ];
    let mut readers = Vec::new();
    let streams = pipes.into_iter().zip(ptys).zip(sinks).zip(files).zip(dups);
    for (((((pipe, pty), to), file), dup), is_err) in streams.zip([false, true]) {
        let Some(source) = pty.or(pipe.map(Arc::new)) else {
            continue;
        };
        let tail = is_err.then(|| tail.clone());
        let dup = dup.map(|d| DuplicateLines {
            to: d,
            pending: Vec::new(),
        });
        readers.push(std::thread::spawn(move || {
            forward(&source, to, file, tail, dup)
        }));
    }
    (tail, readers)
}

/// A tee'd stream's whole lines for torchrun's filtered-lines file.
struct DuplicateLines {
    to: Duplicate,
    pending: Vec<u8>,
}

impl DuplicateLines {
    fn push(&mut self, data: &[u8]) {
        let mut rest = data;
        while let Some(i) = rest.iter().position(|b| *b == b'\n') {
            self.pending.extend_from_slice(&rest[..=i]);
            self.to.line(&self.pending);
            self.pending.clear();
            rest = &rest[i + 1..];
        }
        self.pending.extend_from_slice(rest);
    }
    fn finish(&mut self) {
        if !self.pending.is_empty() {
            self.to.line(&self.pending);
        }
    }
}

/// Relays one pipe (or pty) of a rank until EOF (a pty's master reads EIO once every copy of its
/// slave is closed): to its log file, to the stderr tail, to torchrun's filtered-lines file, and to
/// the sink.
fn forward(
    source: &File,
    to: Sink,
    mut file: Option<File>,
    tail: Option<Arc<Mutex<Tail>>>,
    mut dup: Option<DuplicateLines>,
) {
    let mut pipe = source;
    let mut buf = vec![0u8; 64 * 1024];
    let (is_err, mut console) = match &to {
        Sink::Console { is_err, prefix } => (*is_err, Some(ConsoleLines::new(prefix.clone()))),
        _ => (false, None),
    };
    let mut capture = match &to {
        Sink::Capture(rank, _) => Some(CaptureLines {
            rank: *rank,
            pending: Vec::new(),
        }),
        _ => None,
    };
    let mut out = Vec::new();
    loop {
        if let Some(c) = console.as_mut() {
            if let Some(due) = c.due() {
                let wait = due.saturating_duration_since(Instant::now());
                if wait.is_zero() || !readable_within(pipe.as_raw_fd(), wait) {
                    c.flush(&mut out);
                    console_write(is_err, &out);
                    out.clear();
                    continue;
                }
            }
        }
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
        if let Some(d) = dup.as_mut() {
            d.push(data);
        }
        if let Some(c) = console.as_mut() {
            c.push(data, &mut out);
            console_write(is_err, &out);
            out.clear();
        }
        if let (Some(c), Sink::Capture(_, tx)) = (capture.as_mut(), &to) {
            c.push(data, tx);
        }
    }
    if let Some(c) = console.as_mut() {
        c.finish(&mut out);
        console_write(is_err, &out);
    }
    if let Some(d) = dup.as_mut() {
        d.finish();
    }
    if let (Some(c), Sink::Capture(_, tx)) = (capture.as_mut(), &to) {
        c.finish(tx);
    }
}

/// The launcher's terminal as its ranks see it: a rank stream that reaches the console while the
/// launcher's own stream (stdout or stderr) is a terminal writes to a pty of its own, whose size is the
/// launcher's terminal's and follows it (SIGWINCH to the launcher resizes every pty and is forwarded
/// to the rank's group). One pty per stream keeps stdout and stderr apart for the log files, the
/// failure report's tail and the console.
///
/// The pty is not the rank's controlling terminal (its session has none, as under torchrun, whose
/// workers start in a new session): `/dev/tty` is not the pty, so `getpass` and the like still read the
/// launcher's terminal, and nothing is ever typed into the pty. Its output processing is off (no
/// `\n` → `\r\n`): the bytes a rank writes reach the log files and the launcher's terminal, which does
/// its own, unchanged.
pub(super) struct Terminal {
    tool: &'static str,
    /// Whether the launcher's stdout and stderr are terminals.
    is_tty: [bool; 2],
    /// The ptys of the ranks started so far; a pty whose reader ended (its rank's stream closed) is gone.
    screens: Arc<Mutex<Vec<Screen>>>,
    /// The thread that resizes the ptys on SIGWINCH.
    winch: Option<signal_hook::iterator::Handle>,
    warned: std::sync::atomic::AtomicBool,
}

struct Screen {
    master: Weak<File>,
    /// 0 stdout, 1 stderr: whose size it takes.
    stream: usize,
    group: Pid,
}

/// A pty for one stream of a rank about to start: the slave becomes the stream, the master is read.
pub(super) struct Pty {
    pub(super) master: Arc<File>,
    pub(super) slave: File,
}

impl Terminal {
    pub(super) fn new(tool: &'static str) -> Terminal {
        // SAFETY: isatty only reads the descriptor's state.
        let is_tty =
            [libc::STDOUT_FILENO, libc::STDERR_FILENO].map(|fd| unsafe { libc::isatty(fd) } == 1);
        let screens: Arc<Mutex<Vec<Screen>>> = Arc::default();
        let winch = if is_tty.contains(&true) {
            match signal_hook::iterator::Signals::new([libc::SIGWINCH]) {
                Ok(mut signals) => {
                    let handle = signals.handle();
                    let screens = screens.clone();
                    std::thread::spawn(move || {
                        for _ in signals.forever() {
                            resize(&screens);
                        }
                    });
                    Some(handle)
                }
                Err(_) => None,
            }
        } else {
            None
        };
        Terminal {
            tool,
            is_tty,
            screens,
            winch,
            warned: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A pty for each of a rank's streams (stdout, stderr) that goes to the console while the
    /// launcher's own is a terminal; `None` where the stream is a pipe. A pty that cannot be opened
    /// (no /dev/pts, the kernel's pty limit) leaves that stream a pipe, said once.
    pub(super) fn ptys(&self, sinks: [&Sink; 2]) -> [Option<Pty>; 2] {
        let mut out = [None, None];
        for (stream, sink) in sinks.iter().enumerate() {
            if !self.is_tty[stream] || !matches!(sink, Sink::Console { .. }) {
                continue;
            }
            match open_pty(stream) {
                Ok(p) => out[stream] = Some(p),
                Err(e) => {
                    if !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
                        let _ = writeln!(
                            std::io::stderr(),
                            "{}: warning: cannot open a pty for the ranks ({e}): their output goes through pipes, and they see no terminal",
                            self.tool
                        );
                    }
                }
            }
        }
        out
    }

    /// Follows the ptys of a started rank: SIGWINCH resizes them and goes to `group`.
    pub(super) fn watch(&self, masters: &[Option<Arc<File>>; 2], group: Pid) {
        let Ok(mut screens) = self.screens.lock() else {
            return;
        };
        screens.retain(|s| s.master.strong_count() > 0);
        for (stream, m) in masters.iter().enumerate() {
            if let Some(m) = m {
                screens.push(Screen {
                    master: Arc::downgrade(m),
                    stream,
                    group,
                });
            }
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        if let Some(h) = self.winch.take() {
            h.close();
        }
    }
}

/// The window size of the launcher's stdout (0) or stderr (1); `None` when it is not a terminal.
fn window_size(stream: usize) -> Option<libc::winsize> {
    let fd = [libc::STDOUT_FILENO, libc::STDERR_FILENO][stream];
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize into `ws`.
    let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
    (rc == 0).then_some(ws)
}

fn set_window_size(pty: &impl AsRawFd, ws: &libc::winsize) {
    // SAFETY: TIOCSWINSZ reads one winsize.
    unsafe { libc::ioctl(pty.as_raw_fd(), libc::TIOCSWINSZ, ws) };
}

/// SIGWINCH: every live pty takes its stream's new size, then each rank's group is told. Without a
/// controlling terminal the kernel signals no one on TIOCSWINSZ, so the launcher does.
fn resize(screens: &Mutex<Vec<Screen>>) {
    let sizes = [window_size(0), window_size(1)];
    let mut groups = Vec::new();
    if let Ok(mut screens) = screens.lock() {
        screens.retain(|s| s.master.strong_count() > 0);
        for s in screens.iter() {
            let (Some(m), Some(ws)) = (s.master.upgrade(), sizes[s.stream].as_ref()) else {
                continue;
            };
            set_window_size(&*m, ws);
            if !groups.contains(&s.group) {
                groups.push(s.group);
            }
        }
    }
    for g in groups {
        let _ = killpg(g, Signal::SIGWINCH);
    }
}

/// A new pty pair for `stream`: both ends close-on-exec (another rank spawned meanwhile, or py-spy,
/// must not hold them: the master reads EOF only once every copy of the slave is closed), the slave not
/// made anyone's controlling terminal, output processing off, the size of the launcher's terminal.
fn open_pty(stream: usize) -> std::io::Result<Pty> {
    use nix::fcntl::OFlag;
    use nix::sys::termios;
    let master = nix::pty::posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    nix::pty::grantpt(&master)?;
    nix::pty::unlockpt(&master)?;
    let name = nix::pty::ptsname_r(&master)?;
    // std opens with O_CLOEXEC.
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(&name)?;
    let mut t = termios::tcgetattr(slave.as_fd())?;
    t.output_flags.remove(termios::OutputFlags::OPOST);
    termios::tcsetattr(slave.as_fd(), termios::SetArg::TCSANOW, &t)?;
    if let Some(ws) = window_size(stream) {
        set_window_size(&slave, &ws);
    }
    // SAFETY: the descriptor was just taken out of the PtyMaster, which no longer owns it.
    let master = unsafe { File::from_raw_fd(master.into_raw_fd()) };
    Ok(Pty {
        master: Arc::new(master),
        slave,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay(prefix: Option<&str>, chunks: &[&[u8]]) -> (Vec<Vec<u8>>, Vec<u8>) {
        let mut l = ConsoleLines::new(prefix.map(str::to_string));
        let mut writes = Vec::new();
        for c in chunks {
            let mut out = Vec::new();
            l.push(c, &mut out);
            writes.push(out);
        }
        let mut end = Vec::new();
        l.finish(&mut end);
        (writes, end)
    }

    #[test]
    fn console_gets_whole_lines_only() {
        let (w, end) = relay(None, &[b"rank", b" 1 step", b" 0\nrank 1", b" step 1\n"]);
        assert_eq!(w, [&b""[..], b"", b"rank 1 step 0\n", b"rank 1 step 1\n"]);
        assert!(end.is_empty());
    }

    #[test]
    fn prefix_at_each_line_start_and_after_a_carriage_return() {
        let (w, end) = relay(Some("[0] "), &[b"a\nb", b"\r 50%\r 100%", b"\r\n", b"x"]);
        assert_eq!(
            w,
            [&b"[0] a\n"[..], b"[0] b\r[0]  50%\r", b"[0]  100%\r\n", b""]
        );
        assert_eq!(end, b"[0] x\n");
    }

    #[test]
    fn a_redraw_before_any_text_waits_for_the_text_to_get_the_prefix() {
        let (w, end) = relay(Some("[0] "), &[b"\rprogress 50%", b"\rprogress 100%\n"]);
        assert_eq!(w, [&b"\r"[..], b"[0] progress 50%\r[0] progress 100%\n"]);
        assert!(end.is_empty());
    }

    #[test]
    fn an_endless_line_is_flushed_at_the_bound_without_a_second_prefix() {
        let chunk = vec![b'x'; MAX_PARTIAL / 2];
        let (w, end) = relay(Some("> "), &[&chunk, &chunk, &chunk, b"\n"]);
        assert!(w[0].is_empty());
        assert_eq!(w[1].len(), 2 + MAX_PARTIAL);
        assert!(w[2].is_empty());
        assert_eq!(w[3].len(), MAX_PARTIAL / 2 + 1);
        assert!(end.is_empty());
    }

    #[test]
    fn tail_keeps_the_last_bytes() {
        let mut t = Tail::default();
        t.push(&vec![b'a'; TAIL_BYTES * 3]);
        t.push(b"end");
        let s = t.text();
        assert_eq!(s.len(), TAIL_BYTES);
        assert!(s.ends_with("aend"));
    }
}
