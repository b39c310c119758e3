//! The one way the integration tests reach what they run: the built tools ([`bin`], [`tool`]), the
//! project's venv and fixtures, a cleared environment that keeps the test's mark ([`isolated`]), a
//! skip that fails under CI ([`skip`]), and a small fluent runner for the built binaries ([`Run`]):
//! isolated environment (a temp HOME, no ACCEL_*/ACCELERATE_* leaking in from the developer's
//! shell), arguments, stdin, then assertions on code/stdout/stderr. accel-launch's environment is
//! in [`launcher`], the check that nothing of a run survives in [`survivors`].

#![allow(dead_code)]

pub mod cgroup;
pub mod fabric;
pub mod launcher;
pub mod proc;
pub mod suite;
pub mod survivors;

pub use launcher::launcher;
pub use proc::{ChildExt, CommandExt, WAIT};

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One of the six built tools.
///
/// `ACCEL_TEST_BIN_DIR` (scripts/test sets it to `target/manylinux/bin`, the wheel's binaries unpacked by
/// scripts/setup) runs the suite on the binaries the wheel ships instead of cargo's: the wheel then holds
/// what was tested (tests/wheel.rs checks that they are the same files).
pub fn bin(name: &str) -> PathBuf {
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    #[allow(clippy::disallowed_methods)]
    let dir = DIR.get_or_init(|| {
        std::env::var_os("ACCEL_TEST_BIN_DIR")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
    });
    if let Some(dir) = dir {
        let path = dir.join(name);
        assert!(
            path.is_file(),
            "{} is missing (ACCEL_TEST_BIN_DIR): scripts/setup unpacks the wheel there",
            path.display()
        );
        return path;
    }
    let path = match name {
        "accel-config" => env!("CARGO_BIN_EXE_accel-config"),
        "accel-env" => env!("CARGO_BIN_EXE_accel-env"),
        "accel-launch" => env!("CARGO_BIN_EXE_accel-launch"),
        "accel-test" => env!("CARGO_BIN_EXE_accel-test"),
        "accel-estimate-memory" => env!("CARGO_BIN_EXE_accel-estimate-memory"),
        "accel-merge-weights" => env!("CARGO_BIN_EXE_accel-merge-weights"),
        other => panic!("unknown binary {other}"),
    };
    PathBuf::from(path)
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The project's venv (scripts/setup makes it): its `bin`, with python, accelerate, torchrun and py-spy.
pub fn venv_bin() -> PathBuf {
    repo().join(".venv/bin")
}

/// The project's venv python; tests that need it fail loudly without it.
pub fn venv_python() -> PathBuf {
    let p = venv_bin().join("python");
    assert!(
        p.exists(),
        "{} is missing: run scripts/setup first",
        p.display()
    );
    p
}

/// This process's PATH with the venv's `bin` first.
pub fn venv_path() -> String {
    format!(
        "{}:{}",
        venv_bin().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A file or directory under tests/fixtures.
pub fn fixture(rel: &str) -> PathBuf {
    repo().join("tests/fixtures").join(rel)
}

/// `program` with none of this process's environment (no SLURM_*/ACCEL_*/MASTER_* of the caller's
/// shell or job changes what it does) but the test's mark: the caller adds what it is to see.
pub fn isolated(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    c.env_clear().marked();
    c
}

/// One of the built tools (`accel-launch`, …), [`isolated`].
pub fn tool(name: &str) -> Command {
    isolated(bin(name))
}

/// For a test that cannot run on this machine: it says so on its stderr (`SKIP TEST: WHY; WHAT was
/// NOT tested`), then returns; under CI (`CI` set) such a machine is broken, and the test fails here.
pub fn skip(test: &str, why: &str, what: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{test} cannot run under CI: {why}; {what} would not be tested"
    );
    eprintln!("SKIP {test}: {why}; {what} was NOT tested");
}

pub struct Run {
    cmd: Command,
    stdin: Option<Vec<u8>>,
    desc: String,
    limit: std::time::Duration,
}

#[derive(Debug)]
pub struct Output {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    desc: String,
}

impl Run {
    /// A tool with a clean environment rooted at `home` (HOME and XDG_CACHE_HOME under it).
    pub fn new(tool: &str, home: &Path) -> Run {
        let mut cmd = self::tool(tool);
        cmd.env("PATH", venv_path());
        cmd.env("HOME", home);
        cmd.env("ACCEL_NO_PROGRESS", "1");
        cmd.current_dir(home);
        Run {
            cmd,
            stdin: None,
            desc: tool.to_string(),
            limit: WAIT,
        }
    }
    pub fn arg(mut self, a: impl Into<OsString>) -> Self {
        let a = a.into();
        self.desc.push(' ');
        self.desc.push_str(&a.to_string_lossy());
        self.cmd.arg(a);
        self
    }
    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Self {
        for a in args {
            self = self.arg(a);
        }
        self
    }
    pub fn env(mut self, k: &str, v: impl AsRef<std::ffi::OsStr>) -> Self {
        self.cmd.env(k, v);
        self
    }
    pub fn env_remove(mut self, k: &str) -> Self {
        self.cmd.env_remove(k);
        self
    }
    pub fn stdin(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(data.into());
        self
    }
    /// How long `run` waits before it kills the tool's tree and fails (default [`WAIT`]).
    pub fn within(mut self, limit: std::time::Duration) -> Self {
        self.limit = limit;
        self
    }
    pub fn run(mut self) -> Output {
        self.cmd.stdin(if self.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        self.cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = self
            .cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.desc));
        if let Some(data) = self.stdin.take() {
            child.stdin.take().unwrap().write_all(&data).unwrap();
        }
        let out = child.output_named(self.limit, &self.desc);
        Output {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            desc: self.desc,
        }
    }
}

impl Output {
    pub fn code_is(&self, code: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(code),
            "`{}` exit code\nstdout:\n{}\nstderr:\n{}",
            self.desc,
            self.stdout,
            self.stderr
        );
        self
    }
    pub fn success(&self) -> &Self {
        self.code_is(0)
    }
    pub fn stdout_is(&self, s: &str) -> &Self {
        assert_eq!(
            self.stdout, s,
            "`{}` stdout (stderr: {})",
            self.desc, self.stderr
        );
        self
    }
    pub fn stdout_contains(&self, s: &str) -> &Self {
        assert!(
            self.stdout.contains(s),
            "`{}` stdout lacks {s:?}:\n{}\nstderr:\n{}",
            self.desc,
            self.stdout,
            self.stderr
        );
        self
    }
    pub fn stderr_contains(&self, s: &str) -> &Self {
        assert!(
            self.stderr.contains(s),
            "`{}` stderr lacks {s:?}:\n{}",
            self.desc,
            self.stderr
        );
        self
    }
    pub fn stderr_lacks(&self, s: &str) -> &Self {
        assert!(
            !self.stderr.contains(s),
            "`{}` stderr has {s:?}:\n{}",
            self.desc,
            self.stderr
        );
        self
    }
}

/// Runs a Python snippet with the venv python; returns stdout, panicking with stderr on failure.
pub fn python(code: &str, envs: &BTreeMap<&str, String>) -> String {
    let out = Command::new(venv_python())
        .arg("-c")
        .arg(code)
        .envs(envs)
        .output_within(WAIT);
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        code
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("accel-test-")
        .tempdir()
        .unwrap()
}

/// Whether process `pid` still runs: a zombie (ended, not yet reaped by whoever adopted it) and a
/// dead process do not count.
pub fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        .is_some_and(|state| state != "Z" && state != "X")
}

/// Two network namespaces joined by a veth pair (`None` where they cannot be made).
pub struct Netns {
    pub names: [String; 2],
    pub ips: [String; 2],
    /// The veth end in each namespace (gloo must be told: the host name resolves to loopback).
    pub ifaces: [String; 2],
}

impl Netns {
    pub fn create(tag: &str) -> Option<Netns> {
        // A slot no other live test process holds (nextest runs tests side by side in processes).
        let id = suite::slot(&format!("netns-{tag}"), 200, std::process::id() % 200) + 20;
        let names = [format!("accel{tag}{id}a"), format!("accel{tag}{id}b")];
        // A subnet per tag: pairs made by tests running at once stay apart.
        let sub = match tag {
            "s" => 201,
            "c" => 202,
            _ => 200,
        };
        let ips = [format!("10.{sub}.{id}.1"), format!("10.{sub}.{id}.2")];
        let ip = |args: &[&str]| {
            Command::new("ip")
                .args(args)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let va = format!("va{tag}{id}");
        let vb = format!("vb{tag}{id}");
        // What a test killed by the runner left under this slot's names goes first.
        for n in &names {
            let _ = Command::new("ip")
                .args(["netns", "del", n])
                .stderr(Stdio::null())
                .status_within(WAIT);
        }
        let ns = Netns {
            names: names.clone(),
            ips: ips.clone(),
            ifaces: [va.clone(), vb.clone()],
        };
        let ok = ip(&["netns", "add", &names[0]])
            && ip(&["netns", "add", &names[1]])
            && ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb])
            && ip(&["link", "set", &va, "netns", &names[0]])
            && ip(&["link", "set", &vb, "netns", &names[1]])
            && ip(&[
                "-n",
                &names[0],
                "addr",
                "add",
                &format!("{}/24", ips[0]),
                "dev",
                &va,
            ])
            && ip(&[
                "-n",
                &names[1],
                "addr",
                "add",
                &format!("{}/24", ips[1]),
                "dev",
                &vb,
            ])
            && ip(&["-n", &names[0], "link", "set", &va, "up"])
            && ip(&["-n", &names[1], "link", "set", &vb, "up"])
            && ip(&["-n", &names[0], "link", "set", "lo", "up"])
            && ip(&["-n", &names[1], "link", "set", "lo", "up"]);
        ok.then_some(ns)
    }

    /// Cuts node `i`'s network: its veth end goes down, so nothing reaches the other namespace and
    /// nothing says so (no reset, no error: packets are lost, as when a cable is pulled).
    pub fn cut(&self, i: usize) {
        let ok = Command::new("ip")
            .args(["-n", &self.names[i], "link", "set", &self.ifaces[i], "down"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "could not down {} in {}", self.ifaces[i], self.names[i]);
    }

    /// `/etc/netns/NAME/hosts`, which `ip netns exec` mounts over /etc/hosts.
    pub fn hosts(&self, text: &str) {
        for n in &self.names {
            let dir = Path::new("/etc/netns").join(n);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("hosts"), format!("127.0.0.1 localhost\n{text}")).unwrap();
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
            let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(n));
        }
    }
}

/// A port for a test's rendezvous (and the one after it, the control plane's), reserved for this
/// test process: ports from 10000–14999 (below the kernel's ephemeral range, where a rank's outgoing
/// connection could take a port that was merely free when it was chosen, and below the ports accel
/// derives from a SLURM job id), each pair locked machine-wide for this process's life
/// (`suite::try_lock`), so tests running side by side in other processes never get the same one,
/// and bindable, with its successor, when handed out.
pub fn free_port() -> u16 {
    let locks = std::env::temp_dir().join("accel-slots");
    std::fs::create_dir_all(&locks).unwrap();
    let start = (std::process::id() * 7919) % 2500;
    for i in 0..2500 {
        let p = 10000 + 2 * ((start + i) % 2500) as u16;
        let Some(held) = suite::try_lock(&locks.join(format!("port.{p}"))) else {
            continue;
        };
        let free = |port: u16| std::net::TcpListener::bind(("0.0.0.0", port)).is_ok();
        if free(p) && free(p + 1) {
            suite::keep(held);
            return p;
        }
    }
    panic!("no free port pair left in 10000-14999")
}

/// The CPU default's rank count as accel-launch should plan it (2 with at least two physical cores,
/// else 1: the embedded default config), from `lscpu`, not from accel's own detection, so that a
/// detection bug cannot also move the expectation. Cores are unique (core, socket) pairs, bounded by
/// the CPUs this process may use.
pub fn cpu_default_ranks() -> u32 {
    let out = Command::new("lscpu")
        .arg("-p=Core,Socket")
        .output()
        .expect("lscpu (util-linux) is needed");
    let cores: std::collections::BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    let usable = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores.len().min(usable) >= 2 {
        2
    } else {
        1
    }
}
