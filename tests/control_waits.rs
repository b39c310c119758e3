//! Every wait of the multi-node control plane ends, and what ends a run on one node reaches every
//! node (issue 22 items 0, 4, 5, 6), with real launchers on loopback: a rank that SIGKILL cannot end
//! (frozen in a cgroup-v1 freezer; blocked on a FUSE read that never returns, from a real FUSE
//! server), a joined node that never reports its end, signals while joining and while waiting for a
//! replacement, a local error on one node, and uneven nodes (1 + 2 + 1 ranks).

#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

use crate::util::launcher::{launcher, node_flags};
use crate::util::{alive, fixture, free_port, venv_python};
#[allow(unused_imports)]
use crate::util::{ChildExt as _, CommandExt as _, WAIT};
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET: &str = "drill-secret-0123456789abcdef";
const GRACE: u64 = 3;
/// accel-launch's wait for a rank after SIGKILL (`supervise::KILL_WAIT`).
const KILL_WAIT: u64 = 10;

/// One node's launcher of an `nodes`-node run on loopback, authenticated, `--grace_period 3`.
fn node_command(dir: &Path, port: u16, nodes: u32, node: u32, extra: &[&str]) -> Command {
    let mut c = launcher(dir);
    c.env("ACCEL_LAUNCH_SECRET", SECRET);
    node_flags(&mut c, nodes, node, "127.0.0.1", &port.to_string())
        .args(["--grace_period", &GRACE.to_string()]);
    if !extra.contains(&"--rdzv_timeout") {
        c.args(["--rdzv_timeout", "120"]);
    }
    c.args(extra).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

/// A launcher whose stderr is read as it comes.
struct Watched {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: std::thread::JoinHandle<()>,
}

impl Watched {
    fn spawn(mut c: Command) -> Watched {
        let mut child = c.start();
        let err = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = Arc::clone(&lines);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { return };
                l.lock().unwrap().push(line);
            }
        });
        Watched {
            child,
            lines,
            reader,
        }
    }

    fn text(&self) -> String {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .map(|l| format!("{l}\n"))
            .collect()
    }

    fn wait_line(&self, pat: &str, limit: Duration) {
        let t = Instant::now();
        while !self.text().contains(pat) {
            assert!(
                t.elapsed() < limit,
                "no line with {pat:?} within {limit:?}:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: a plain kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Waits (at most `limit`) for the launcher's end: its status, stderr and when it ended.
    fn finish_within(self, limit: Duration) -> (i32, String, Instant) {
        let Watched {
            mut child,
            lines,
            reader,
        } = self;
        let status = child.wait_within(limit);
        let at = Instant::now();
        reader.join().unwrap();
        let text = lines
            .lock()
            .unwrap()
            .iter()
            .map(|l| format!("{l}\n"))
            .collect();
        (status.code().unwrap_or(-1), text, at)
    }
}

fn wait_file(path: &Path, limit: Duration) -> String {
    let t = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if !s.is_empty() {
                return s;
            }
        }
        assert!(t.elapsed() < limit, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_gone(pid: i32, limit: Duration) {
    let t = Instant::now();
    while alive(pid) {
        assert!(
            t.elapsed() < limit,
            "pid {pid} is still there after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A cgroup-v1 freezer group of the test's own; thawed and removed on drop, whatever happened.
struct Freezer(PathBuf);

impl Freezer {
    fn new() -> Freezer {
        let root = Path::new("/sys/fs/cgroup/freezer");
        assert!(
            root.join("freezer.state").exists() || root.join("cgroup.procs").exists(),
            "this test needs the cgroup-v1 freezer mounted at {}",
            root.display()
        );
        let dir = root.join(format!("accel-test-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir(&dir).unwrap();
        Freezer(dir)
    }

    fn freeze(&self, pid: i32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).unwrap();
        std::fs::write(self.0.join("freezer.state"), "FROZEN").unwrap();
        let t = Instant::now();
        while std::fs::read_to_string(self.0.join("freezer.state"))
            .unwrap()
            .trim()
            != "FROZEN"
        {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "pid {pid} did not freeze"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn thaw(&self) {
        let _ = std::fs::write(self.0.join("freezer.state"), "THAWED");
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        self.thaw();
        let t = Instant::now();
        // The group empties once its (killed) processes run again and die.
        while std::fs::remove_dir(&self.0).is_err() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A real FUSE file system (tests/fixtures/fuse_never.py, the kernel's /dev/fuse) whose reads
/// never return. Dropping it kills the server, which aborts the connection and releases every
/// reader, and unmounts it.
struct NeverFs {
    server: Child,
    mnt: PathBuf,
    lines: Arc<Mutex<Vec<String>>>,
}

impl NeverFs {
    fn mount(dir: &Path) -> NeverFs {
        assert!(Path::new("/dev/fuse").exists(), "this test needs /dev/fuse");
        let mnt = dir.join("never");
        std::fs::create_dir(&mnt).unwrap();
        let mut server = Command::new(venv_python())
            .arg(fixture("fuse_never.py"))
            .arg(&mnt)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .start();
        let out = server.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                l.lock().unwrap().push(line);
            }
        });
        let fs = NeverFs { server, mnt, lines };
        fs.wait("ready", 1);
        fs
    }

    /// Waits until the server printed `what` `n` times.
    fn wait(&self, what: &str, n: usize) {
        let t = Instant::now();
        while self
            .lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| *l == what)
            .count()
            < n
        {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "the FUSE server never said {what:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn file(&self) -> PathBuf {
        self.mnt.join("file")
    }

    fn release(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait_within(Duration::from_secs(10));
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.mnt)
            .output_within(Duration::from_secs(10));
    }
}

impl Drop for NeverFs {
    fn drop(&mut self) {
        self.release();
    }
}

/// Two nodes × 2 ranks of tests/fixtures/launch/stuck.py; rank 3 (node 1) is made unkillable by
/// `hold` (given its pid), then rank 0 (node 0) fails with 7. Every node must end within grace +
/// the SIGKILL wait (+ 6 s for the cleanup and the network), node 1 with 121 naming rank 3's pid,
/// state and wchan, node 0 with the rank's 7 naming it too. Returns node 1's stderr and rank 3's pid.
fn unkillable_drill(dir: &Path, env: &[(&str, String)], hold: impl FnOnce(i32)) -> (String, i32) {
    let port = free_port();
    let script = fixture("launch/stuck.py");
    let start = |node| {
        let mut c = node_command(dir, port, 2, node, &["--nproc_per_node", "2"]);
        c.env("STUCK_RANK", "3");
        for (k, v) in env {
            c.env(k, v);
        }
        c.arg(&script).arg(dir);
        Watched::spawn(c)
    };
    let n0 = start(0);
    let n1 = start(1);
    let pid: i32 = wait_file(&dir.join("pid.3"), Duration::from_secs(60))
        .trim()
        .parse()
        .unwrap();
    wait_file(&dir.join("pid.0"), Duration::from_secs(60));
    hold(pid);
    let t = Instant::now();
    std::fs::write(dir.join("go"), "").unwrap();
    let limit = Duration::from_secs(GRACE + KILL_WAIT + 6);
    let (c1, e1, at1) = n1.finish_within(WAIT);
    let (c0, e0, at0) = n0.finish_within(WAIT);
    let (d0, d1) = (at0 - t, at1 - t);
    eprintln!("node 0 ended {d0:?}, node 1 {d1:?} after rank 0's failure");
    assert_eq!((c0, c1), (7, 121), "node 0:\n{e0}\nnode 1:\n{e1}");
    let named = format!("rank 3 (pid {pid}) is in uninterruptible sleep (D, wchan ");
    assert!(
        e1.contains(&named) && e1.contains("did not exit after SIGKILL"),
        "node 1 must name the rank, its state and wchan:\n{e1}"
    );
    assert!(
        e0.contains("node 1 (") && e0.contains(&named),
        "node 0 must name node 1's rank left behind:\n{e0}"
    );
    assert!(
        d0 < limit && d1 < limit,
        "the run must end within grace + {KILL_WAIT} s on every node: node 0 after {d0:?}, node 1 after {d1:?}"
    );
    (e1, pid)
}

/// A rank frozen in a cgroup-v1 freezer ignores SIGKILL until thawed: the run ends anyway, node 1
/// exits 121 naming it (D, frozen), node 0 exits with the failing rank's 7 naming it too; once the
/// test thaws it, it dies of its pending SIGKILL.
#[test]
fn a_rank_frozen_in_a_cgroup_ends_the_run_within_grace_and_the_kill_wait() {
    let d = crate::util::tempdir();
    let freezer = Freezer::new();
    let (e1, pid) = unkillable_drill(d.path(), &[], |pid| freezer.freeze(pid));
    assert!(
        e1.contains("frozen: cgroup freezer /accel-test-") && e1.contains("is FROZEN"),
        "{e1}"
    );
    assert!(alive(pid), "rank 3 is frozen until the test thaws it");
    freezer.thaw();
    wait_gone(pid, Duration::from_secs(10));
}

/// A rank blocked on a FUSE read that never returns (a real FUSE server that never answers READ):
/// killed, it waits uninterruptibly in request_wait_answer. The run ends anyway on both nodes, the
/// report names the rank in D state; the test then aborts the FUSE connection and the rank is gone.
#[test]
fn a_rank_blocked_on_a_fuse_read_ends_the_run_within_grace_and_the_kill_wait() {
    let d = crate::util::tempdir();
    let mut fs = NeverFs::mount(d.path());
    let file = fs.file().to_string_lossy().into_owned();
    let (e1, pid) = unkillable_drill(d.path(), &[("FUSE_FILE", file)], |_| fs.wait("read", 1));
    assert!(e1.contains("wchan request_wait_answer"), "{e1}");
    assert!(alive(pid), "rank 3 waits for the FUSE server's answer");
    fs.release();
    wait_gone(pid, Duration::from_secs(10));
}

/// A joined node that heartbeats but never reports its ranks' end after a stop (a stranger speaking
/// the protocol as node 1, on a run without a secret) is lost at its deadline — its grace (3 s),
/// SIGKILL's wait (10 s) and 15 s — and node 0 ends with the failing rank's status, naming it.
#[test]
fn a_node_that_never_reports_its_end_is_lost_at_its_deadline() {
    let d = crate::util::tempdir();
    let port = free_port();
    let mut c = node_command(
        d.path(),
        port,
        2,
        0,
        &[
            "--nproc_per_node",
            "2",
            "--max_restarts",
            "1",
            "--no_python",
        ],
    );
    c.env_remove("ACCEL_LAUNCH_SECRET").args([
        "sh",
        "-c",
        "[ \"$RANK\" = 0 ] && { sleep 2; echo failing >&2; exit 7; }; exec sleep 300",
    ]);
    let n0 = Watched::spawn(c);
    let t = Instant::now();
    let s = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port + 1)) {
            Ok(s) => break s,
            Err(e) => {
                assert!(t.elapsed() < Duration::from_secs(30), "{e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let nonce = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    writeln!(
        w,
        r#"{{"t":"hello","protocol":5,"node":1,"nonce":"{nonce}"}}"#
    )
    .unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.contains(r#""auth":"none""#), "{line}");
    writeln!(
        w,
        r#"{{"t":"join","protocol":5,"run_id":"port:{}","node":1,"nodes":2,"local_ranks":2,"host":"silent","max_restarts":1,"grace_ms":3000}}"#,
        port + 1
    )
    .unwrap();
    let mut start = String::new();
    r.read_line(&mut start).unwrap();
    assert!(start.contains(r#""t":"start""#), "{start}");
    // Heartbeats, and nothing else, ever.
    let beating = std::thread::spawn(move || {
        while writeln!(w, r#"{{"t":"hb"}}"#).is_ok() {
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    n0.wait_line("failing", Duration::from_secs(60));
    let t = Instant::now();
    let (c0, e0, at) = n0.finish_within(WAIT);
    drop(r);
    let took = at - t;
    eprintln!("node 0 ended {took:?} after its rank failed");
    assert_eq!(c0, 7, "{e0}");
    assert!(
        e0.contains(
            "node 1 (silent) did not report its ranks' end within 28 s of the stop and was left"
        ),
        "{e0}"
    );
    assert!(
        !e0.contains("restarting"),
        "no restart while node 1's ranks may still run:\n{e0}"
    );
    assert!(took < Duration::from_secs(28 + 8), "{took:?}\n{e0}");
    let _ = beating.join();
}

/// A launcher still joining acts on its signals at once: SIGUSR1 to node 1 (joined; node 2 never
/// comes) ends the join on both joined nodes with 138 (128 + 10) and says why; SIGTERM to node 0
/// ends it with 143 on node 0 and on node 1.
#[test]
fn usr1_and_sigterm_to_a_launcher_still_joining_end_the_join_at_once() {
    for (sig, to, code, name) in [
        (libc::SIGUSR1, 1usize, 138, "SIGUSR1"),
        (libc::SIGTERM, 0, 143, "SIGTERM"),
    ] {
        let d = crate::util::tempdir();
        let port = free_port();
        // Node 2 never comes: nodes 0 and 1 are still joining.
        let nodes = 3;
        let start = |node: u32| {
            let mut c = node_command(
                d.path(),
                port,
                nodes,
                node,
                &["--num_processes", "3", "--no_python", "true"],
            );
            c.env("ACCEL_LOG", "accel::launch::control=debug");
            Watched::spawn(c)
        };
        let n = [start(0), start(1)];
        for w in &n {
            w.wait_line("joined the control plane", Duration::from_secs(60));
        }
        let t = Instant::now();
        n[to].signal(sig);
        let [n0, n1] = n;
        let (c0, e0, a0) = n0.finish_within(WAIT);
        let (c1, e1, a1) = n1.finish_within(WAIT);
        eprintln!(
            "{name} to node {to}: node 0 ended {:?}, node 1 {:?} after",
            a0 - t,
            a1 - t
        );
        assert_eq!(
            (c0, c1),
            (code, code),
            "{name}\nnode 0:\n{e0}\nnode 1:\n{e1}"
        );
        let (signalled, other) = if to == 0 { (&e0, &e1) } else { (&e1, &e0) };
        assert!(
            signalled.contains(&format!(
                "node {to} left the run: its launcher received {name}"
            )),
            "{signalled}"
        );
        assert!(
            other.contains(&format!("the run ended before it started: node {to} ("))
                && other.contains(&format!("left the run: its launcher received {name}")),
            "{other}"
        );
        for (a, e) in [(a0, &e0), (a1, &e1)] {
            assert!(a - t < Duration::from_secs(8), "{name}: {:?}\n{e}", a - t);
        }
    }
}

/// Ctrl-C during "waiting up to N s for a new launcher" ends the wait at once: exit 130.
#[test]
fn ctrl_c_during_a_replacement_wait_ends_it_at_once() {
    let d = crate::util::tempdir();
    let port = free_port();
    let script = ["--max_restarts", "1", "--no_python", "sleep", "300"];
    let n0 = Watched::spawn(node_command(d.path(), port, 2, 0, &script));
    let mut n1 = node_command(d.path(), port, 2, 1, &script).start();
    // Both nodes' ranks run once node 1 has joined; then node 1's launcher dies.
    let t = Instant::now();
    loop {
        let up = Command::new("pgrep")
            .args(["-P", &n1.id().to_string(), "sleep"])
            .output_within(WAIT);
        if up.status.success() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "node 1's ranks never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(n1.id() as i32, libc::SIGKILL) };
    n1.wait_within(WAIT);
    n0.wait_line(
        "waiting up to 120 s for a new launcher",
        Duration::from_secs(60),
    );
    let t = Instant::now();
    n0.signal(libc::SIGINT);
    let (c0, e0, at) = n0.finish_within(WAIT);
    assert_eq!(c0, 130, "{e0}");
    assert!(e0.contains("SIGINT: leaving the run"), "{e0}");
    assert!(at - t < Duration::from_secs(8), "{:?}\n{e0}", at - t);
}

/// A program found on node 0 but not on node 1: node 1 cannot start its ranks (127, its error and
/// hint), and node 0 prints node 1's error and hint and exits 127 too, at once — not after
/// --rdzv_timeout, and not 122.
#[test]
fn a_local_error_on_node_1_only_reaches_node_0_with_its_status() {
    let d = crate::util::tempdir();
    let port = free_port();
    let bin0 = d.path().join("bin0");
    std::fs::create_dir(&bin0).unwrap();
    let prog = bin0.join("only-on-node-0");
    std::fs::write(&prog, "#!/bin/sh\nexec sleep 300\n").unwrap();
    std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    let args = ["--rdzv_timeout", "60", "--no_python", "only-on-node-0"];
    let mut c0 = node_command(d.path(), port, 2, 0, &args);
    c0.env("PATH", format!("{}:{path}", bin0.display()));
    let n0 = Watched::spawn(c0);
    let n1 = Watched::spawn(node_command(d.path(), port, 2, 1, &args));
    let (c1, e1, a1) = n1.finish_within(WAIT);
    let (c0, e0, a0) = n0.finish_within(WAIT);
    assert_eq!((c0, c1), (127, 127), "node 0:\n{e0}\nnode 1:\n{e1}");
    assert!(
        e1.contains("cannot run `only-on-node-0`: not found"),
        "{e1}"
    );
    assert!(
        e0.contains("node 1 (")
            && e0.contains("could not start its ranks: cannot run `only-on-node-0`: not found"),
        "{e0}"
    );
    assert!(e0.contains("hint: check the program's path"), "{e0}");
    assert!(!e0.contains("waiting up to"), "{e0}");
    assert!(
        a0.saturating_duration_since(a1) < Duration::from_secs(GRACE + 8),
        "node 0 ended {:?} after node 1",
        a0.saturating_duration_since(a1)
    );
}

/// Three uneven nodes, 1 + 2 + 1 ranks, each saying its own count with --nproc_per_node, with
/// --num_processes 4 (the world's total, accelerate's meaning) and without it: real gloo ranks
/// all-reduce across all four with the right RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and GROUP_RANK.
/// A total the nodes do not add up to is refused on every node before any rank starts.
#[test]
fn three_uneven_nodes_1_2_1_form_one_world() {
    for total in [Some("4"), None, Some("5")] {
        let d = crate::util::tempdir();
        let port = free_port();
        let script = fixture("launch/control.py");
        let nodes: Vec<Watched> = [1u32, 2, 1]
            .iter()
            .enumerate()
            .map(|(n, k)| {
                let mut extra = vec!["--nproc_per_node".to_string(), k.to_string()];
                if let Some(t) = total {
                    extra.extend(["--num_processes".to_string(), t.to_string()]);
                }
                let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
                let mut c = node_command(d.path(), port, 3, n as u32, &extra);
                c.arg(&script).arg(d.path()).arg("allreduce");
                Watched::spawn(c)
            })
            .collect();
        let ends: Vec<(i32, String, Instant)> =
            nodes.into_iter().map(|n| n.finish_within(WAIT)).collect();
        if total == Some("5") {
            for (c, e, _) in &ends {
                assert_eq!(*c, 125, "{e}");
                assert!(
                    e.contains("the nodes' ranks add up to 4 (1 + 2 + 1), but node 0 says --num_processes 5"),
                    "{e}"
                );
            }
            assert!(!d.path().join("rank0.json").exists());
            continue;
        }
        for (c, e, _) in &ends {
            assert_eq!(*c, 0, "{total:?}: {e}");
        }
        for (r, (group, local, local_world)) in [(0, 0, 1), (1, 0, 2), (1, 1, 2), (2, 0, 1)]
            .into_iter()
            .enumerate()
        {
            let v: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(d.path().join(format!("rank{r}.json"))).unwrap(),
            )
            .unwrap();
            assert_eq!(v["sum"], 10.0, "rank {r}: {v}");
            let env = &v["env"];
            assert_eq!(env["RANK"], r.to_string(), "{v}");
            assert_eq!(env["WORLD_SIZE"], "4", "{v}");
            assert_eq!(env["GROUP_RANK"], group.to_string(), "{v}");
            assert_eq!(env["LOCAL_RANK"], local.to_string(), "{v}");
            assert_eq!(env["LOCAL_WORLD_SIZE"], local_world.to_string(), "{v}");
        }
    }
}

/// Node 0's refusal of the world reaches every node, however many: sixteen launchers of one rank
/// each, node 0 saying a total they do not add up to. Node 0's own launcher read the refusal first
/// and exited while its server was still writing it to the others, which then saw only the close
/// ("the server closed the connection"), in 3 of 5 tries before node 0 waited for its server.
#[test]
fn a_refused_world_of_16_nodes_is_told_why_on_every_node() {
    const NODES: u32 = 16;
    for round in 0..3 {
        let d = crate::util::tempdir();
        let port = free_port();
        let total = (NODES + 1).to_string();
        let nodes: Vec<Watched> = (0..NODES)
            .map(|n| {
                let extra = ["--nproc_per_node", "1", "--num_processes", &total];
                let mut c = node_command(d.path(), port, NODES, n, &extra);
                c.arg(fixture("launch/control.py"))
                    .arg(d.path())
                    .arg("allreduce");
                Watched::spawn(c)
            })
            .collect();
        for (n, (code, e, _)) in nodes.into_iter().map(|w| w.finish_within(WAIT)).enumerate() {
            assert_eq!(code, 125, "round {round}, node {n}: {e}");
            assert!(
                e.contains("the nodes' ranks add up to 16 (1 + 1 + "),
                "round {round}, node {n}: {e}"
            );
        }
        assert!(!d.path().join("rank0.json").exists());
    }
}

/// Three nodes, one rank each: node 1's own `--rdzv_timeout 8` passes first, so its launcher gives
/// up and says bye while node 0 (120 s) still waits; node 1 is relaunched at once, and node 2
/// arrives 15 s late. The leaver's rank leaves the count: the relaunch joins (not "already in the
/// run"), the world starts once with the three nodes there, and every rank all-reduces 1+2+3.
#[test]
fn a_node_that_gives_up_on_the_join_leaves_it_and_its_relaunch_joins() {
    let d = crate::util::tempdir();
    let port = free_port();
    let script = fixture("launch/control.py");
    let start = |node: u32, extra: &[&str]| {
        let mut extra = extra.to_vec();
        extra.extend(["--num_processes", "3"]);
        let mut c = node_command(d.path(), port, 3, node, &extra);
        c.arg(&script).arg(d.path()).arg("allreduce");
        Watched::spawn(c)
    };
    let t0 = Instant::now();
    let n0 = start(0, &[]);
    let n1 = start(1, &["--rdzv_timeout", "8"]);
    let (c1, e1, _) = n1.finish_within(Duration::from_secs(60));
    assert_eq!(c1, 125, "{e1}");
    assert!(
        e1.contains("node 1 could not join the control plane at 127.0.0.1:")
            && e1.contains("within 8 s"),
        "{e1}"
    );
    let mut again = start(1, &[]);
    while t0.elapsed() < Duration::from_secs(15) {
        if let Some(status) = again.child.try_wait().unwrap() {
            panic!(
                "the relaunched node 1 ended before node 2 came ({status}):\n{}",
                again.text()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let n2 = start(2, &[]);
    let ends: Vec<(i32, String, Instant)> = [n0, again, n2]
        .into_iter()
        .map(|n| n.finish_within(Duration::from_secs(120)))
        .collect();
    for (n, (c, e, _)) in ends.iter().enumerate() {
        assert_eq!(*c, 0, "node {n}:\n{e}");
    }
    for r in 0..3 {
        let v: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(d.path().join(format!("rank{r}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(v["sum"], 6.0, "rank {r}: {v}");
        assert_eq!(v["env"]["WORLD_SIZE"], "3", "rank {r}: {v}");
        assert_eq!(v["env"]["RANK"], r.to_string(), "rank {r}: {v}");
    }
}

/// Holds one thread of a child stopped (ptrace: PTRACE_SEIZE then PTRACE_INTERRUPT stop that thread
/// alone, the process's other threads run on) until dropped, which lets it go.
struct ThreadStop(i32);

/// ptrace(2) with null address and data, as the requests here take.
fn ptrace(request: libc::c_uint, tid: i32) -> libc::c_long {
    // SAFETY: ptrace on the test's own child, no memory passed.
    unsafe {
        libc::ptrace(
            request,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    }
}

impl ThreadStop {
    fn new(tid: i32) -> ThreadStop {
        for (request, name) in [
            (libc::PTRACE_SEIZE, "PTRACE_SEIZE"),
            (libc::PTRACE_INTERRUPT, "PTRACE_INTERRUPT"),
        ] {
            let r = ptrace(request, tid);
            assert_eq!(r, 0, "{name} {tid}: {}", std::io::Error::last_os_error());
        }
        let mut status = 0;
        // SAFETY: waitpid(2) for the trace stop of that thread.
        let got = unsafe { libc::waitpid(tid, &mut status, libc::__WALL) };
        assert_eq!(
            got,
            tid,
            "waitpid {tid}: {}",
            std::io::Error::last_os_error()
        );
        ThreadStop(tid)
    }
}

impl Drop for ThreadStop {
    fn drop(&mut self) {
        // Detaching a thread this test traces (stopped, as PTRACE_DETACH needs) lets it run on.
        ptrace(libc::PTRACE_DETACH, self.0);
    }
}

/// A launcher whose supervision is stuck (its main thread, which watches the ranks, stopped by
/// ptrace while its heartbeat thread runs on, as when the launcher blocks writing to a hung
/// filesystem) stops heartbeating after `link::STALL` (30 s), so that node 0 counts its node as lost
/// and ends the run (122) instead of waiting on a node that only looks alive.
#[test]
fn a_stuck_supervision_stops_heartbeating_and_its_node_is_lost() {
    let d = crate::util::tempdir();
    let port = free_port();
    // The shell's pid from its child's /proc entry: the launcher's `$local_rank` substitution
    // (torchrun's string.Template) would turn `$$` into `$`.
    let rank = format!(
        "cut -d' ' -f4 /proc/self/stat > {}/rank.$RANK; exec sleep 300",
        d.path().display()
    );
    let args = ["--no_python", "sh", "-c", rank.as_str()];
    let n0 = Watched::spawn(node_command(d.path(), port, 2, 0, &args));
    let n1 = Watched::spawn(node_command(d.path(), port, 2, 1, &args));
    wait_file(&d.path().join("rank.0"), Duration::from_secs(60));
    let r1 = wait_file(&d.path().join("rank.1"), Duration::from_secs(60));
    let r1: i32 = r1
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("rank 1's pid {r1:?}: {e}\n{}\n{}", n0.text(), n1.text()));
    let stuck = ThreadStop::new(n1.child.id() as i32);
    let t = Instant::now();
    n1.wait_line(
        "node 1's supervision has not moved for 30 s: no more heartbeats",
        Duration::from_secs(60),
    );
    let (c0, e0, at) = n0.finish_within(WAIT);
    let took = at - t;
    eprintln!("node 0 ended {took:?} after node 1's supervision stopped");
    assert_eq!(c0, 122, "{e0}");
    assert!(
        e0.contains("node 1 (") && e0.contains("was lost: no heartbeat for 5 s"),
        "{e0}"
    );
    assert!(
        took >= Duration::from_secs(30) && took < Duration::from_secs(30 + 5 + GRACE + 10),
        "{took:?}\n{e0}"
    );
    drop(stuck);
    let (c1, e1, _) = n1.finish_within(WAIT);
    assert_ne!(c1, 0, "{e1}");
    wait_gone(r1, Duration::from_secs(GRACE + KILL_WAIT + 5));
}
