//! A rank's failure: what is known of it (its status, the tail of its stderr, the message of its
//! torchelastic error file), how this node prints it, how the other nodes are told of it, and how
//! this node prints another node's.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use super::options::{Options, RankResult};
use super::processes::Running;
use crate::exit_status::signal_name;
use crate::launch::control::FailureReport;

/// A rank's end, as the summary reports it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub rank: u32,
    pub local_rank: u32,
    pub host: String,
    pub status: std::process::ExitStatus,
    pub stderr_tail: String,
    pub error_message: Option<String>,
    pub pid: u32,
    /// When its end was seen.
    pub ended_at: Option<SystemTime>,
    /// Its torchelastic error file (TORCHELASTIC_ERROR_FILE), where it had one.
    pub error_file: Option<PathBuf>,
}

impl Failure {
    /// What is known of a rank that ended, on `host`.
    pub(super) fn of(r: &Running, host: &str) -> Failure {
        Failure {
            rank: r.rank,
            local_rank: r.local_rank,
            host: host.to_string(),
            status: r.status_or_failure(),
            stderr_tail: r.tail.lock().map(|t| t.text()).unwrap_or_default(),
            error_message: r.error_file.as_ref().and_then(|p| read_error_file(p)),
            pid: r.child.id(),
            ended_at: r.ended_at,
            error_file: r.error_file.clone(),
        }
    }
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

/// A failed rank as the other nodes are told of it. Its stderr reader gets a moment to drain the
/// pipe, so the tail holds the rank's last words.
pub(super) fn told(r: &Running, host: &str, node: u32) -> FailureReport {
    let until = Instant::now() + Duration::from_millis(300);
    while !r.readers.iter().all(|h| h.is_finished()) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    Failure::of(r, host).to_report(node)
}

/// This node's failure, as it prints it — what torchrun's ChildFailedError summary holds
/// (`torch/distributed/elastic/multiprocessing/errors/__init__.py`): the root-cause rank and its
/// host, when it ended and its pid, its error file and the file's message, the last `--tail_lines`
/// lines of its stderr, and how this node's other ranks ended.
pub(super) fn report(opts: &Options, f: &Failure, ranks: &[RankResult]) {
    let mut out = format!(
        "{}: rank {} (local rank {}) on {} {}\n",
        opts.tool,
        f.rank,
        f.local_rank,
        f.host,
        f.describe()
    );
    let when = f.ended_at.map(local_time).unwrap_or_else(|| "-".into());
    let file = f
        .error_file
        .as_ref()
        .map_or_else(|| "<N/A>".to_string(), |p| p.display().to_string());
    out.push_str(&format!(
        "  time: {when}, pid {}, error file: {file}\n",
        f.pid
    ));
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
    out.push_str(&others(f, ranks));
    let _ = std::io::stderr().write_all(out.as_bytes());
}

/// How this node's other ranks ended, one line (torchrun's "Failures" besides the root cause).
fn others(f: &Failure, ranks: &[RankResult]) -> String {
    let ends: Vec<String> = ranks
        .iter()
        .filter(|r| r.rank != f.rank)
        .map(|r| {
            let s = &r.end.status;
            let how = match (s.code(), s.signal()) {
                (Some(0), _) => "succeeded".to_string(),
                (Some(c), _) => format!("exited with status {c}"),
                (None, Some(sig)) if r.end.stopped => format!("was stopped ({})", signal_name(sig)),
                (None, Some(sig)) => format!("was killed by {}", signal_name(sig)),
                _ => "ended".into(),
            };
            format!("rank {} (local rank {}) {how}", r.rank, r.local_rank)
        })
        .collect();
    if ends.is_empty() {
        String::new()
    } else {
        format!("  the other ranks here: {}\n", ends.join("; "))
    }
}

/// A time as torchrun's summary prints it (`time.strftime("%Y-%m-%d_%H:%M:%S")`, local time).
fn local_time(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as libc::time_t;
    // SAFETY: localtime_r writes the broken-down time into `tm`, which lives for the call.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::localtime_r(&secs, &mut tm) }.is_null() {
        return secs.to_string();
    }
    format!(
        "{:04}-{:02}-{:02}_{:02}:{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// Another node's failure, as this node prints it: the headline first, then the failing rank's stderr.
pub(super) fn report_remote(opts: &Options, lead: &str, g: &FailureReport) {
    let mut out = format!("{}: {lead}: {}\n", opts.tool, g.headline());
    if let Some(m) = &g.error_message {
        out.push_str(&format!("  error: {m}\n"));
    }
    // A node's local error comes with its launcher's hints.
    for h in &g.hints {
        out.push_str(&format!("  hint: {h}\n"));
    }
    let lines: Vec<&str> = g.stderr_tail.lines().collect();
    let start = lines.len().saturating_sub(opts.tail_lines);
    if let (Some(r), true) = (g.rank, start < lines.len()) {
        out.push_str(&format!(
            "  last lines of rank {r}'s stderr (node {}):\n",
            g.node
        ));
        for l in &lines[start..] {
            out.push_str(&format!("  | {l}\n"));
        }
    }
    let _ = std::io::stderr().write_all(out.as_bytes());
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

/// The message of a torchelastic error file (`@record`), if the rank wrote one.
fn read_error_file(p: &Path) -> Option<String> {
    let text = std::fs::read_to_string(p).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    match &v["message"] {
        serde_json::Value::String(s) => Some(s.clone()),
        m => m["message"].as_str().map(str::to_string),
    }
}
