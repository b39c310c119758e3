//! Every wait of the suite has an end: a test that starts a process waits for it through these
//! helpers, which kill the process's whole tree after a limit and fail naming the command and its
//! last output lines, so a launcher that never returns is a red test with its own message, not a
//! silent runner timeout. Every process a test starts carries `ACCEL_TEST_OWNER` (set on the test
//! process at start, re-added where a test clears the environment), so what a failing or killed
//! test leaves behind is found by that mark: killed when the test panics, and reported and killed by
//! the next test that starts.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The mark every process started by a test inherits: `PID:TEST` of the test process.
pub const OWNER_VAR: &str = "ACCEL_TEST_OWNER";

/// The default bound of one wait: below the runner's per-test bound (.config/nextest.toml), so the
/// test's own message comes first.
pub const WAIT: Duration = Duration::from_secs(150);

/// This test process's mark (`PID:TEST`).
pub fn owner() -> String {
    std::env::var(OWNER_VAR).unwrap_or_else(|_| format!("{}:?", std::process::id()))
}

/// Runs before the test harness's main (no other thread exists yet, so setting the environment is
/// safe): marks this process, kills and reports what dead test processes left behind, and makes a
/// panicking test take its process trees with it.
#[ctor::ctor]
fn start() {
    let test = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_else(|| "?".into());
    // Before main, while this process has one thread: no other thread can read the environment now.
    std::env::set_var(OWNER_VAR, format!("{}:{test}", std::process::id()));
    reap_leftovers();
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        // One test per process (nextest): everything marked with this process is the failing test's.
        // Under plain `cargo test` tests share the process and its mark, so nothing is killed here.
        if std::env::var("NEXTEST_EXECUTION_MODE").as_deref() == Ok("process-per-test") {
            let mine = marked()
                .into_iter()
                .filter(|(_, m)| mark_pid(m) == Some(std::process::id()));
            for (pid, _) in mine {
                kill_hard(pid);
            }
        }
    }));
}

fn mark_pid(mark: &str) -> Option<u32> {
    mark.split(':').next()?.parse().ok()
}

/// Every live process (not this one) with an `ACCEL_TEST_OWNER` mark, with the mark.
pub fn marked() -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let prefix = format!("{OWNER_VAR}=");
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me && crate::util::alive(pid))
        .filter_map(|pid| {
            let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            let mark = env
                .split(|b| *b == 0)
                .find_map(|kv| kv.strip_prefix(prefix.as_bytes()))?;
            Some((pid, String::from_utf8_lossy(mark).into_owned()))
        })
        .collect()
}

/// Processes left by test processes that have ended (a test killed by the runner, or one that did
/// not wait for what it started) disturb the tests after them: each is named and killed.
fn reap_leftovers() {
    let mut left: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (pid, mark) in marked() {
        if mark_pid(&mark).is_some_and(|owner| !crate::util::alive(owner as i32)) {
            left.entry(mark).or_default().push(pid);
        }
    }
    for (mark, pids) in left {
        let test = mark.split_once(':').map_or("?", |(_, t)| t);
        eprintln!(
            "accel tests: leftovers of the earlier test `{test}` (its process has ended): killing {} process(es): {}",
            pids.len(),
            pids.iter()
                .map(|p| format!("{p} ({})", cmdline(*p)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        for p in pids {
            kill_hard(p);
        }
    }
}

fn cmdline(pid: i32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let s: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let s = s.join(" ");
    if s.chars().count() > 300 {
        format!("{}…", s.chars().take(300).collect::<String>())
    } else {
        s
    }
}

/// SIGCONT first (a stopped process holds SIGTERM pending; SIGKILL ends it anyway, but its stopped
/// children would otherwise only see their parent die), then SIGKILL.
fn kill_hard(pid: i32) {
    unsafe {
        libc::kill(pid, libc::SIGCONT);
        libc::kill(pid, libc::SIGKILL);
    }
}

/// `pid` and every descendant (by parent pid), deepest last, read from /proc.
pub fn tree(pid: i32) -> Vec<i32> {
    let mut parent: Vec<(i32, i32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let ppid = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
                .and_then(|s| s.parse().ok());
            if let Some(pp) = ppid {
                parent.push((p, pp));
            }
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parent.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out
}

/// Kills `pid`'s whole tree, and everything else marked by this test (ranks in their own process
/// groups, reparented daemons), SIGCONT first.
pub fn kill_tree(pid: i32) {
    for p in tree(pid) {
        kill_hard(p);
    }
}

/// The last `n` lines of `bytes`.
pub fn tail(bytes: &[u8], n: usize) -> String {
    let s = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// What a command is, for messages: its program and arguments.
pub fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Reads a pipe into a shared buffer as it comes (so that what arrived is there when the wait ends).
fn drain(
    pipe: Option<impl Read + Send + 'static>,
) -> (Arc<Mutex<Vec<u8>>>, Option<std::thread::JoinHandle<()>>) {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let handle = pipe.map(|mut p| {
        let b = Arc::clone(&buf);
        std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            while let Ok(n) = p.read(&mut chunk) {
                if n == 0 {
                    return;
                }
                b.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend_from_slice(&chunk[..n]);
            }
        })
    });
    (buf, handle)
}

/// Joins a reader thread, giving up after `limit` (a grandchild that escaped may hold the pipe).
fn join_within(h: Option<std::thread::JoinHandle<()>>, limit: Duration) {
    let Some(h) = h else { return };
    let t = Instant::now();
    while !h.is_finished() && t.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(10));
    }
    if h.is_finished() {
        let _ = h.join();
    }
}

fn timed_out(what: &str, limit: Duration, stdout: &[u8], stderr: &[u8]) -> ! {
    panic!(
        "`{what}` timed out: still running after {limit:?}; its process tree was killed\n\
         --- last stdout lines ---\n{}\n--- last stderr lines ---\n{}",
        tail(stdout, 20),
        tail(stderr, 20)
    )
}

/// The child's exit status if it ends within `limit`; else its tree is killed and reaped, and `None`.
fn exit_within(child: &mut Child, limit: Duration, what: &mut String) -> Option<ExitStatus> {
    let t = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(e) => panic!("wait for `{what}`: {e}"),
        }
        if t.elapsed() > limit {
            if what.is_empty() {
                // Read at spawn, the command line can still be empty (seen under load): read it again.
                *what = cmdline(child.id() as i32);
            }
            if what.is_empty() {
                *what = format!("pid {}", child.id());
            }
            kill_tree(child.id() as i32);
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Bounded waits on a started process; a timeout names the process by its command line.
pub trait ChildExt {
    /// Waits at most `limit`; past it, kills the tree and fails naming the command and its last output.
    fn wait_within(&mut self, limit: Duration) -> ExitStatus;
    /// `wait_with_output`, bounded the same way.
    fn output_within(self, limit: Duration) -> Output;
    /// [`ChildExt::output_within`] with the command's description given.
    fn output_named(self, limit: Duration, what: &str) -> Output;
}

impl ChildExt for Child {
    fn wait_within(&mut self, limit: Duration) -> ExitStatus {
        let mut what = cmdline(self.id() as i32);
        if let Some(status) = exit_within(self, limit, &mut what) {
            return status;
        }
        // The pipes the test did not take are closed now that the tree is dead.
        let (out, ho) = drain(self.stdout.take());
        let (err, he) = drain(self.stderr.take());
        join_within(ho, Duration::from_secs(2));
        join_within(he, Duration::from_secs(2));
        let (o, e) = (out.lock().unwrap().clone(), err.lock().unwrap().clone());
        timed_out(&what, limit, &o, &e)
    }

    fn output_within(self, limit: Duration) -> Output {
        let what = cmdline(self.id() as i32);
        self.output_named(limit, &what)
    }

    fn output_named(mut self, limit: Duration, what: &str) -> Output {
        let (out, ho) = drain(self.stdout.take());
        let (err, he) = drain(self.stderr.take());
        let t = Instant::now();
        let mut what = what.to_string();
        let Some(status) = exit_within(&mut self, limit, &mut what) else {
            join_within(ho, Duration::from_secs(2));
            join_within(he, Duration::from_secs(2));
            let (o, e) = (out.lock().unwrap().clone(), err.lock().unwrap().clone());
            timed_out(&what, limit, &o, &e)
        };
        // The process ended; a grandchild that outlived it may still hold a pipe: not waited on for long.
        join_within(
            ho,
            limit
                .saturating_sub(t.elapsed())
                .max(Duration::from_secs(5)),
        );
        join_within(
            he,
            limit
                .saturating_sub(t.elapsed())
                .max(Duration::from_secs(5)),
        );
        let stdout = std::mem::take(&mut *out.lock().unwrap_or_else(|e| e.into_inner()));
        let stderr = std::mem::take(&mut *err.lock().unwrap_or_else(|e| e.into_inner()));
        Output {
            status,
            stdout,
            stderr,
        }
    }
}

/// Bounded `output()`/`status()` for a command.
pub trait CommandExt {
    /// `output()` (stdin closed, stdout and stderr captured), at most `limit`.
    fn output_within(&mut self, limit: Duration) -> Output;
    /// `status()` (stdio inherited), at most `limit`.
    fn status_within(&mut self, limit: Duration) -> ExitStatus;
    /// Puts back the test's mark after `env_clear()`.
    fn marked(&mut self) -> &mut Self;
    /// `spawn()`, marked: the way a test starts a process it waits on or signals itself (then
    /// through [`ChildExt`], bounded); fails naming the command if it cannot start.
    fn start(&mut self) -> Child;
}

impl CommandExt for Command {
    fn output_within(&mut self, limit: Duration) -> Output {
        let what = describe(self);
        self.marked();
        let child = self
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{what}`: {e}"));
        child.output_named(limit, &what)
    }

    fn status_within(&mut self, limit: Duration) -> ExitStatus {
        let what = describe(self);
        self.marked();
        let mut child = self
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{what}`: {e}"));
        child.wait_within(limit)
    }

    fn marked(&mut self) -> &mut Self {
        // A command that removed the mark on purpose (daemons meant to outlive this test, such as the
        // suite's SLURM cluster) keeps it removed: marked, they would be killed as leftovers by the
        // first test process started after this one ends.
        let removed = self
            .get_envs()
            .any(|(k, v)| k == std::ffi::OsStr::new(OWNER_VAR) && v.is_none());
        if !removed {
            self.env(OWNER_VAR, owner());
        }
        self
    }

    fn start(&mut self) -> Child {
        let what = describe(self);
        self.marked()
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{what}`: {e}"))
    }
}

/// Kills a process tree when dropped unless it already ended: for a test that holds a started
/// process across assertions that may panic.
pub struct Reaper(pub i32);

impl Drop for Reaper {
    fn drop(&mut self) {
        if crate::util::alive(self.0) {
            kill_tree(self.0);
        }
    }
}

/// A process that keeps one CPU busy, `prefix` (e.g. a cgroup's [`CpuGroup::wrap`]) then
/// `taskset -c CPU sh -c 'while :; do :; done'`: the neighbour that slows what shares its core.
/// Killed with the [`Reaper`] when that is dropped.
///
/// [`CpuGroup::wrap`]: crate::util::fabric::CpuGroup::wrap
pub fn busy_on(prefix: &[String], cpu: &str) -> (Child, Reaper) {
    let mut argv: Vec<String> = prefix.to_vec();
    argv.extend(["taskset", "-c", cpu, "sh", "-c", "while :; do :; done"].map(String::from));
    let c = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .start();
    let reaper = Reaper(c.id() as i32);
    (c, reaper)
}

/// A bound for a test that reads a process's output as it comes (a read that waits for the next
/// line is a wait too): past `limit`, the process's tree is killed, so the read ends, and the test
/// fails with this message on its stderr beside its own assertion.
pub struct Deadline {
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl Deadline {
    pub fn new(pid: u32, limit: Duration) -> Deadline {
        use std::sync::atomic::Ordering;
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = Arc::clone(&done);
        let what = cmdline(pid as i32);
        std::thread::spawn(move || {
            let t = Instant::now();
            while t.elapsed() < limit {
                if d.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if !d.load(Ordering::Relaxed) {
                eprintln!(
                    "`{what}` timed out: still running after {limit:?}; killing its process tree"
                );
                kill_tree(pid as i32);
            }
        });
        Deadline { done }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner_seen(cmd: &mut Command) -> String {
        let out = cmd
            .args(["-c", "printf %s \"${ACCEL_TEST_OWNER-unset}\""])
            .output_within(Duration::from_secs(20));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn a_bounded_command_carries_the_tests_mark() {
        assert_eq!(owner_seen(&mut Command::new("/bin/sh")), owner());
        let mut cleared = Command::new("/bin/sh");
        cleared.env_clear();
        assert_eq!(owner_seen(&mut cleared), owner());
    }

    #[test]
    fn a_command_that_removed_the_mark_is_not_marked_again() {
        let mut cmd = Command::new("/bin/sh");
        cmd.env_remove(OWNER_VAR);
        assert_eq!(owner_seen(&mut cmd), "unset");
    }
}
