//! accel-launch --hang_timeout with real gloo ranks (tests/fixtures/launch/hang_cases.py): injected
//! hangs are declared within the timeout + 20 s, the verdict names the rank and the line, the run is
//! stopped (exit 124, no process left); slow but healthy runs are not declared hung. Cases run in
//! parallel threads to keep the wall time near that of the slowest.

// Test helpers may panic, and the tests pass their own environment to the binaries.
#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

use crate::util::{bin, launcher, survivors, venv_bin};
#[allow(unused_imports)]
use crate::util::{ChildExt as _, CommandExt as _, WAIT};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const TIMEOUT: u64 = 10;

/// The ranks' script: tests/fixtures/launch/hang_cases.py.
pub fn hang_cases() -> PathBuf {
    crate::util::fixture("launch/hang_cases.py")
}

/// `hang_cases.py:N` of the line marked `# at:NAME`.
pub fn at(name: &str) -> String {
    let text = std::fs::read_to_string(hang_cases()).unwrap();
    let marker = format!("# at:{name}");
    let n = text
        .lines()
        .position(|l| l.trim_end().ends_with(&marker))
        .unwrap_or_else(|| panic!("no line marked {marker}"));
    format!("hang_cases.py:{}", n + 1)
}

struct Ran {
    code: i32,
    stderr: String,
    /// From the moment the rank entered its hang (DIR/hung) to the verdict line.
    to_verdict: Option<Duration>,
    to_exit: Option<Duration>,
}

/// The launcher's environment: `PATH` with or without py-spy, and the interpreter to run.
struct Setup {
    path: String,
    python: PathBuf,
}

fn with_py_spy() -> Setup {
    Setup {
        path: format!(
            "{}:{}",
            venv_bin().display(),
            std::env::var("PATH").unwrap_or_default()
        ),
        python: venv_bin().join("python"),
    }
}

/// py-spy neither on PATH nor next to the interpreter: a wrapper script in `dir` runs the venv's Python.
fn without_py_spy(dir: &Path) -> Setup {
    let path: Vec<String> = std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .filter(|d| !Path::new(d).join("py-spy").exists())
        .map(str::to_string)
        .collect();
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let python = bin.join("python");
    std::fs::write(
        &python,
        format!(
            "#!/bin/sh\nexec {} \"$@\"\n",
            venv_bin().join("python").display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    Setup {
        path: path.join(":"),
        python,
    }
}

/// `mode`: the fixture's MODE, then its SUSPECT and ARG if given, separated by spaces.
fn command(dir: &Path, mode: &str, extra: &[&str], setup: &Setup) -> Command {
    let mut c = launcher(dir);
    c.env("PATH", &setup.path)
        .env("ACCEL_PYTHON", &setup.python)
        // The watch's reasons (`accel::launch::hang=debug`), when a developer asks for them.
        .env("ACCEL_LOG", std::env::var("ACCEL_LOG").unwrap_or_default())
        .args(["--cpu", "--num_processes", "2", "--grace_period", "3"])
        .args(extra)
        .arg(hang_cases())
        .arg(dir)
        .args(mode.split(' '))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// When the fixture's suspect rank began to hang (it writes the time to `hung`).
pub fn hung_at(dir: &Path) -> Option<SystemTime> {
    let s = std::fs::read_to_string(dir.join("hung")).ok()?;
    let secs: f64 = s.trim().parse().ok()?;
    Some(UNIX_EPOCH + Duration::from_secs_f64(secs))
}

fn run(dir: &Path, mode: &str, extra: &[&str], setup: &Setup) -> Ran {
    let mut child = command(dir, mode, extra, setup).start();
    let verdict_time: Arc<Mutex<Option<SystemTime>>> = Arc::default();
    let vt = Arc::clone(&verdict_time);
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.starts_with("accel-launch: hang:") {
                *vt.lock().unwrap() = Some(SystemTime::now());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > Duration::from_secs(240) {
            let _ = child.kill();
            break child.wait_within(WAIT);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let exited = SystemTime::now();
    let stderr = reader.join().unwrap();
    let hung = hung_at(dir);
    let since = |t: SystemTime| hung.and_then(|h| t.duration_since(h).ok());
    let verdict = *verdict_time.lock().unwrap();
    Ran {
        code: status.code().unwrap_or(-1),
        stderr,
        to_verdict: verdict.and_then(since),
        to_exit: since(exited),
    }
}

/// Every pid the run recorded (ranks and their grandchildren) is gone.
fn assert_no_survivors(dir: &Path, what: &str) {
    survivors::assert_none_left(dir, what, 4, Duration::from_secs(10));
}

struct Hang {
    /// MODE [SUSPECT [ARG]]; `{logs}` stands for the run's --log_dir.
    mode: &'static str,
    verdict: String,
    no_py_spy: bool,
    /// Another line the report must hold.
    also: Option<String>,
}

#[test]
fn injected_hangs_are_declared_named_and_stopped() {
    let cases = vec![
        Hang {
            mode: "skip_allreduce",
            verdict: format!(
                "accel-launch: hang: rank 1 (node 0) is in stuck_in_data_loading ({}); rank 0 (node 0) waits in all_reduce ({})",
                at("sleep"),
                at("allreduce.skip_allreduce")
            ),
            no_py_spy: false,
            also: None,
        },
        Hang {
            mode: "order",
            verdict: format!(
                "accel-launch: hang: collectives do not match: rank 0 (node 0) waits in recv ({}); rank 1 (node 0) waits in all_reduce ({})",
                at("recv"),
                at("allreduce.order")
            ),
            no_py_spy: false,
            also: None,
        },
        Hang {
            mode: "sigstop",
            verdict: format!(
                "accel-launch: hang: rank 1 (node 0) is stopped (SIGSTOP) in freeze ({}); rank 0 (node 0) waits in all_reduce ({})",
                at("sigstop"),
                at("allreduce.sigstop")
            ),
            no_py_spy: false,
            also: None,
        },
        Hang {
            mode: "lock",
            verdict: format!(
                "accel-launch: hang: rank 1 (node 0) is in deadlocked_on_lock ({}); rank 0 (node 0) waits in all_reduce ({})",
                at("lock"),
                at("allreduce.lock")
            ),
            no_py_spy: false,
            also: None,
        },
        Hang {
            mode: "subprocess",
            verdict: format!(
                "accel-launch: hang: rank 1 (node 0) is in waits_for_child ({}); rank 0 (node 0) waits in all_reduce ({})",
                at("subprocess"),
                at("allreduce.subprocess")
            ),
            no_py_spy: false,
            also: None,
        },
        // The Flight Recorder's dumps, where the ranks wrote them (as NCCL ranks do when asked):
        // the collective rank 0 entered and rank 1 never did.
        Hang {
            mode: "flight_recorder 1 {logs}/hang",
            verdict: format!(
                "accel-launch: hang: rank 1 (node 0) is in stuck_in_data_loading ({}); rank 0 (node 0) waits in all_reduce ({})",
                at("sleep"),
                at("allreduce.flight_recorder")
            ),
            no_py_spy: false,
            also: Some(format!(
                "accel-launch: flight recorder: process group 0 (default_pg): collective #2 gloo:all_reduce [[4]] Float at {} was entered by rank 0; never by rank 1 (its last: #1 gloo:all_reduce, scheduled)",
                at("allreduce.flight_recorder")
            )),
        },
        // Without py-spy: a warning at start, and the verdict says what /proc knows.
        Hang {
            mode: "sigstop",
            verdict: "accel-launch: hang: rank 1 (node 0) is stopped (no Python stack: py-spy not found); rank 0 (node 0) is sleeping (no Python stack: py-spy not found)".into(),
            no_py_spy: true,
            also: None,
        },
    ];
    declare_all(cases);
}

/// Hangs as GPUs hang: the hung rank spins at 100% CPU with one unchanging stack (in one C call, in
/// a Python loop, on a helper thread), or every rank does, each at its own line.
#[test]
fn spinning_hangs_are_declared_within_the_timeout_and_named() {
    declare_all(vec![
        Hang {
            mode: "spin_regex 0",
            verdict: format!(
                "accel-launch: hang: rank 0 (node 0) is in spin_in_one_call ({}); rank 1 (node 0) is in stuck_in_data_loading ({})",
                at("regex"),
                at("sleep")
            ),
            no_py_spy: false,
            also: None,
        },
        Hang {
            mode: "spin_allreduce",
            verdict: format!(
                "accel-launch: hang: rank 1 (node 0) is in busy_poll ({}); rank 0 (node 0) waits in all_reduce ({})",
                at("busy_poll"),
                at("allreduce.spin_allreduce")
            ),
            no_py_spy: false,
            also: None,
        },
        Hang {
            mode: "spin_everywhere",
            verdict: format!(
                "accel-launch: hang: rank 0 (node 0) is in spin_at ({}); rank 1 (node 0) is in spin_at ({})",
                at("spin_even"),
                at("spin_odd")
            ),
            no_py_spy: false,
            also: None,
        },
        Hang {
            mode: "spin_thread",
            verdict: format!(
                "accel-launch: hang: rank 1 (node 0) is in waits_on_spinning_thread ({}); rank 0 (node 0) waits in all_reduce ({})",
                at("join"),
                at("allreduce.spin_thread")
            ),
            no_py_spy: false,
            also: None,
        },
    ]);
}

/// Runs each case in its own thread: exit 124, the verdict line, within the timeout + 10 s of the
/// hang's beginning, the report and dumps under --log_dir, nothing left.
fn declare_all(cases: Vec<Hang>) {
    let timeout = TIMEOUT.to_string();
    let handles: Vec<_> = cases
        .into_iter()
        .map(|case| {
            let timeout = timeout.clone();
            std::thread::spawn(move || {
                let tmp = tempfile::tempdir().unwrap();
                let dir = tmp.path().join("run");
                std::fs::create_dir_all(&dir).unwrap();
                let setup = if case.no_py_spy {
                    without_py_spy(tmp.path())
                } else {
                    with_py_spy()
                };
                let logs = tmp.path().join("logs");
                let logs_arg = logs.to_string_lossy().into_owned();
                let mode = case.mode.replace("{logs}", &logs_arg);
                let ran = run(
                    &dir,
                    &mode,
                    &["--hang_timeout", &timeout, "--log_dir", &logs_arg],
                    &setup,
                );
                let what = format!(
                    "{}{}",
                    case.mode,
                    if case.no_py_spy { " (no py-spy)" } else { "" }
                );
                assert_eq!(ran.code, 124, "{what}: {}", ran.stderr);
                let first = ran
                    .stderr
                    .lines()
                    .find(|l| l.starts_with("accel-launch: hang:"))
                    .unwrap_or_else(|| panic!("{what}: no verdict in {}", ran.stderr));
                assert_eq!(first, case.verdict, "{what}: {}", ran.stderr);
                if let Some(line) = &case.also {
                    assert!(
                        ran.stderr.lines().any(|l| l == line),
                        "{what}: no line\n{line}\nin\n{}",
                        ran.stderr
                    );
                }
                let to_verdict = ran.to_verdict.unwrap();
                assert!(
                    to_verdict <= Duration::from_secs(TIMEOUT + 10),
                    "{what}: verdict {to_verdict:?} after the hang began"
                );
                if case.no_py_spy {
                    let warning = ran
                        .stderr
                        .lines()
                        .position(|l| l.contains("warning: py-spy not found"))
                        .unwrap_or_else(|| panic!("{what}: no warning: {}", ran.stderr));
                    assert_eq!(
                        warning, 0,
                        "{what}: the warning comes first: {}",
                        ran.stderr
                    );
                } else {
                    let report = std::fs::read_to_string(logs.join("hang/report.txt")).unwrap();
                    assert!(report.starts_with(&case.verdict), "{what}: {report}");
                    assert!(logs.join("hang/rank_1.txt").exists(), "{what}");
                }
                assert_no_survivors(&dir, &what);
                (what, to_verdict, ran.to_exit)
            })
        })
        .collect();
    let mut failures = Vec::new();
    for h in handles {
        match h.join() {
            Ok((what, v, e)) => eprintln!("{what}: verdict after {v:?}, exit after {e:?}"),
            Err(p) => failures.push(
                p.downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_else(|| "panic".into()),
            ),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Slow but healthy runs under the same timeout, a failure with --stacks_on_failure, and
/// `--stacks PID` on a running launcher.
#[test]
fn slow_runs_are_not_hangs_and_stacks_come_on_demand_and_on_failure() {
    let mut handles = Vec::new();
    let server = slow_server(2_000_000, 100_000);
    let device = SlowDevice::new(5 << 20);
    let modes = vec![
        "compute".to_string(),
        "checkpoint".into(),
        "sleep_print".into(),
        "sync_point".into(),
        "pipe_write".into(),
        format!("recv_slow 0 {}", server.port),
        format!("fsync_slow 0 {}", device.arg()),
    ];
    for mode in modes {
        handles.push(std::thread::spawn(move || {
            let tmp = tempfile::tempdir().unwrap();
            let ran = run(
                tmp.path(),
                &mode,
                &["--hang_timeout", &TIMEOUT.to_string()],
                &with_py_spy(),
            );
            assert_eq!(ran.code, 0, "{mode}: {}", ran.stderr);
            assert!(!ran.stderr.contains("hang:"), "{mode}: {}", ran.stderr);
            for r in 0..2 {
                assert!(tmp.path().join(format!("done.{r}")).exists(), "{mode}");
            }
        }));
    }
    handles.push(std::thread::spawn(|| {
        let tmp = tempfile::tempdir().unwrap();
        let ran = run(tmp.path(), "fail", &["--stacks_on_failure"], &with_py_spy());
        assert_eq!(ran.code, 3, "{}", ran.stderr);
        let want = format!(
            "accel-launch: rank 1 failed; the others: rank 0 (node 0) waits in all_reduce ({})",
            at("allreduce.fail")
        );
        assert!(ran.stderr.contains(&want), "{want}\n{}", ran.stderr);
        assert_no_survivors(tmp.path(), "fail");
    }));
    handles.push(std::thread::spawn(|| {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut child = command(dir, "sleep_quiet", &[], &with_py_spy())
            .stderr(Stdio::null())
            .start();
        let t = Instant::now();
        while !(dir.join("pid.0").exists() && dir.join("pid.1").exists()) {
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "ranks never started"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let want0 = format!("rank 0 (node 0) is in main ({})", at("quiet"));
        let want1 = "rank 1 (node 0) waits in barrier (hang_cases.py:";
        // The ranks may still be on their way into the sleep and the barrier.
        let mut last = String::new();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(60) {
            let out = crate::util::tool("accel-launch")
                .env("PATH", with_py_spy().path)
                .args(["--stacks", &child.id().to_string()])
                .output_within(WAIT);
            assert_eq!(out.status.code(), Some(0));
            last = String::from_utf8_lossy(&out.stdout).into_owned();
            if last.contains(&want0) && last.contains(want1) {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        assert!(
            last.starts_with(&format!("accel-launch {}: ", child.id()))
                && last.contains(&want0)
                && last.contains(want1),
            "{last}"
        );
        // The run goes on.
        assert!(child.try_wait().unwrap().is_none());
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status_within(WAIT);
        assert_eq!(child.wait_within(WAIT).code(), Some(143));
        assert_no_survivors(dir, "--stacks");
        // Not a launcher: a usage error naming the PID.
        let out = Command::new(bin("accel-launch"))
            .args(["--stacks", &std::process::id().to_string()])
            .output_within(WAIT);
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("is not an accel-launch"));
    }));
    let mut failures = Vec::new();
    for h in handles {
        if let Err(p) = h.join() {
            failures.push(
                p.downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_else(|| "panic".into()),
            );
        }
    }
    assert!(
        server.sent() >= 2_000_000,
        "the slow server sent {}",
        server.sent()
    );
    drop(device);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Rank 0 computes for 25 s (2.5 timeouts) in `torch.mm(a, b, out=c)` with no step counter: one
/// line, the same tensors (py-spy shows `<Tensor at 0x…>`, the same address each step; the output
/// gets the same values each step), a whole core and no I/O, which is what a rank spinning in one C
/// call shows (issue 40 item 5). What tells it apart is where its CPU time goes: py-spy's native
/// samples put its thread in MKL's `mkl_blas_def_sgemm_kernel_0_zen`, a compute kernel, where a
/// catastrophic regex is in `sre_ucs1_match` and a GPU sync in libcuda; the watch takes them once the
/// run has been still for a third of the timeout, and a rank found computing restarts the timer.
#[test]
fn an_in_place_compute_loop_without_a_counter_is_not_a_hang() {
    let tmp = tempfile::tempdir().unwrap();
    let ran = run(
        tmp.path(),
        "compute_in_place",
        &["--hang_timeout", &TIMEOUT.to_string()],
        &with_py_spy(),
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(!ran.stderr.contains("hang:"), "{}", ran.stderr);
    for r in 0..2 {
        assert!(tmp.path().join(format!("done.{r}")).exists());
    }
}

/// A server on loopback that sends `total` bytes to its first client at `rate` bytes/s, then closes.
struct SlowServer {
    port: u16,
    sent: Arc<Mutex<usize>>,
}

impl SlowServer {
    fn sent(&self) -> usize {
        *self.sent.lock().unwrap()
    }
}

fn slow_server(total: usize, rate: usize) -> SlowServer {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let sent: Arc<Mutex<usize>> = Arc::default();
    let counter = Arc::clone(&sent);
    std::thread::spawn(move || {
        let t = Instant::now();
        let mut conn = loop {
            match listener.accept() {
                Ok((c, _)) => break c,
                Err(_) if t.elapsed() < Duration::from_secs(180) => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(_) => return,
            }
        };
        conn.set_nonblocking(false).unwrap();
        let chunk = vec![7u8; rate / 10];
        let mut n = 0;
        while n < total {
            let k = chunk.len().min(total - n);
            if conn.write_all(&chunk[..k]).is_err() {
                return;
            }
            n += k;
            *counter.lock().unwrap() = n;
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    SlowServer { port, sent }
}

/// A slow block device: an ext4 file system on a loop device, mounted in a temporary directory,
/// and a cgroup-v1 blkio group that throttles writes to it to `bps` bytes/s (the rank joins it).
/// Needs root, as the suite does for its network namespaces.
struct SlowDevice {
    _tmp: tempfile::TempDir,
    mount: PathBuf,
    loop_dev: String,
    cgroup: PathBuf,
}

impl SlowDevice {
    fn new(bps: u64) -> SlowDevice {
        let tmp = tempfile::tempdir().unwrap();
        let image = tmp.path().join("disk.img");
        std::fs::File::create(&image)
            .unwrap()
            .set_len(400 << 20)
            .unwrap();
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(&image)
            .output_within(WAIT);
        assert!(
            out.status.success(),
            "losetup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let loop_dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let mount = tmp.path().join("mnt");
        std::fs::create_dir_all(&mount).unwrap();
        let ok = |c: &mut Command| {
            let o = c.output_within(WAIT);
            assert!(
                o.status.success(),
                "{c:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        ok(Command::new("mkfs.ext4").args(["-q", &loop_dev]));
        ok(Command::new("mount").arg(&loop_dev).arg(&mount));
        use std::os::unix::fs::MetadataExt;
        let rdev = std::fs::metadata(&loop_dev).unwrap().rdev();
        let cgroup = PathBuf::from(format!(
            "/sys/fs/cgroup/blkio/accel-hang-test-{}",
            std::process::id()
        ));
        // A cgroup-v1 blkio hierarchy (this machine kind has one; the test fails without it).
        std::fs::create_dir_all(&cgroup)
            .and_then(|()| {
                std::fs::write(
                    cgroup.join("blkio.throttle.write_bps_device"),
                    format!("{}:{} {bps}", libc::major(rdev), libc::minor(rdev)),
                )
            })
            .unwrap_or_else(|e| panic!("a cgroup-v1 blkio throttle at {}: {e}", cgroup.display()));
        SlowDevice {
            _tmp: tmp,
            mount,
            loop_dev,
            cgroup,
        }
    }

    /// The fixture's ARG: DIR:CGROUP.
    fn arg(&self) -> String {
        format!("{}:{}", self.mount.display(), self.cgroup.display())
    }
}

impl Drop for SlowDevice {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status_within(WAIT);
        let _ = Command::new("losetup")
            .args(["-d", &self.loop_dev])
            .status_within(WAIT);
        let _ = std::fs::remove_dir(&self.cgroup);
    }
}
