//! The multi-node control plane with real launchers: two nodes are two accel-launch processes on
//! loopback (`--num_machines 2 --machine_rank 0/1 --main_process_ip 127.0.0.1`), with real gloo ranks,
//! real failures and real SIGKILLs. Each drill asserts the documented exit statuses, what every node
//! says, and that no process of the run (ranks and their grandchildren) outlives grace + 3 s.

// Test helpers may panic, and the tests pass their own environment to the binaries.
#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

use crate::util::launcher::{launch_env, launcher, node_flags};
use crate::util::{bin, fixture, free_port, survivors, Netns};
#[allow(unused_imports)]
use crate::util::{ChildExt as _, CommandExt as _, WAIT};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// The drills' shared secret (ACCEL_LAUNCH_SECRET).
const SECRET: &str = "drill-secret-0123456789abcdef";
const GRACE: u64 = 3;

/// One node's launcher: 2 + 2 ranks by default (`--nproc_per_node` in `extra` changes it).
fn node(dir: &Path, port: &str, node: u32, mode: &str, extra: &[&str]) -> Child {
    node_command(None, dir, "127.0.0.1", port, node, mode, extra).start()
}

/// The command of one node's launcher running tests/fixtures/launch/control.py in `mode`, in network
/// namespace `ns.names[node]` when given (then gloo is told that namespace's interface).
fn node_command(
    ns: Option<&Netns>,
    dir: &Path,
    master: &str,
    port: &str,
    node: u32,
    mode: &str,
    extra: &[&str],
) -> Command {
    let mut c = match ns {
        Some(ns) => {
            let mut c = launch_env("ip", dir);
            c.args(["netns", "exec", &ns.names[node as usize]])
                .arg(bin("accel-launch"));
            c
        }
        None => launcher(dir),
    };
    // Every drill runs authenticated unless it removes the secret.
    c.env("ACCEL_LAUNCH_SECRET", SECRET);
    if let Some(ns) = ns {
        c.env("GLOO_SOCKET_IFNAME", &ns.ifaces[node as usize]);
    }
    node_flags(&mut c, 2, node, master, port);
    if !extra.contains(&"--num_processes") {
        c.args(["--num_processes", "4"]);
    }
    // Defaults, unless `extra` sets them.
    if !extra.contains(&"--grace_period") {
        c.args(["--grace_period", &GRACE.to_string()]);
    }
    if !extra.contains(&"--rdzv_timeout") {
        c.args(["--rdzv_timeout", "120"]);
    }
    c.args(extra)
        .arg(fixture("launch/control.py"))
        .arg(dir)
        .arg(mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Node 0's launcher, its stderr watched.
fn node0(dir: &Path, port: &str, mode: &str, extra: &[&str]) -> Watched {
    Watched::spawn(node_command(None, dir, "127.0.0.1", port, 0, mode, extra))
}

/// Every one of the 4 ranks wrote its all_reduce of 1+2+3+4.
fn assert_all_reduced(dir: &Path) {
    for r in 0..4 {
        let v: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("rank{r}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(v["sum"], 10.0, "rank {r}: {v}");
    }
}

/// A launcher whose stderr is read as it comes, each line with the time it was seen.
struct Watched {
    child: Child,
    lines: Arc<Mutex<Vec<(f64, String)>>>,
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
                l.lock().unwrap().push((now(), line));
            }
        });
        Watched {
            child,
            lines,
            reader,
        }
    }

    /// When (UNIX seconds) a line containing `pat` was printed, waiting for it at most `limit`.
    fn wait_line(&self, pat: &str, limit: Duration) -> f64 {
        let t = Instant::now();
        loop {
            if let Some((at, _)) = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .find(|(_, l)| l.contains(pat))
            {
                return *at;
            }
            assert!(
                t.elapsed() < limit,
                "no line with {pat:?} within {limit:?}:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn text(&self) -> String {
        let lines = self.lines.lock().unwrap();
        lines.iter().map(|(_, l)| format!("{l}\n")).collect()
    }

    fn finish(self) -> (i32, String) {
        let Watched {
            mut child,
            lines,
            reader,
        } = self;
        let status = child.wait_within(WAIT);
        reader.join().unwrap();
        let text = lines
            .lock()
            .unwrap()
            .iter()
            .map(|(_, l)| format!("{l}\n"))
            .collect();
        (status.code().unwrap_or(-1), text)
    }
}

fn finish(child: Child) -> (i32, String) {
    let out = child.output_within(WAIT);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub(crate) fn wait_for(dir: &Path, names: &[String], limit: Duration) {
    let t = Instant::now();
    while !names.iter().all(|n| dir.join(n).exists()) {
        assert!(t.elapsed() < limit, "ranks never became ready: {names:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn ready(dir: &Path, attempt: u32) {
    let names: Vec<String> = (0..4).map(|r| format!("ready.{r}.{attempt}")).collect();
    wait_for(dir, &names, Duration::from_secs(120));
}

pub(crate) fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Waits until every recorded process of the run (4 ranks and 4 grandchildren, both nodes) is gone;
/// returns when (UNIX seconds) it saw that.
pub(crate) fn all_gone(dir: &Path, limit: Duration) -> f64 {
    survivors::assert_none_left(dir, "4 ranks and 4 grandchildren", 8, limit)
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Node 1's last rank exits 7 after the rendezvous while every other rank sleeps outside any
/// collective: node 1 exits 7, node 0 exits 7 too and names node 1 and rank 3 with its stderr, and
/// every process of the run on both nodes is gone within grace + 3 s of the failure.
#[test]
fn a_rank_failing_on_node_1_stops_every_node() {
    let d = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let report = d.path().join("report0.json");
    let n0 = node(
        d.path(),
        &port,
        0,
        "fail",
        &["--report_json", report.to_str().unwrap()],
    );
    let n1 = node(d.path(), &port, 1, "fail", &[]);
    ready(d.path(), 0);
    let watcher = {
        let dir = d.path().to_path_buf();
        std::thread::spawn(move || {
            wait_for(&dir, &["fail.time".to_string()], Duration::from_secs(60));
            all_gone(&dir, Duration::from_secs(GRACE + 30))
        })
    };
    // Bounded first: a node 0 that never stops would keep the launchers waiting for its ranks.
    let gone_at = watcher.join().unwrap();
    let (c1, e1) = finish(n1);
    let (c0, e0) = finish(n0);
    let failed_at: f64 = std::fs::read_to_string(d.path().join("fail.time"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(c1, 7, "node 1: {e1}");
    assert_eq!(c0, 7, "node 0: {e0}");
    // Node 0's notes of its control plane (the authentication in force) come before.
    let first = first_word(&e0);
    assert!(
        first.contains("rank 3 (local rank 1) on node 1") && first.contains("exited with status 7"),
        "node 0's first word must say what happened: {e0}"
    );
    assert!(e0.contains("| rank 3 failing on purpose"), "{e0}");
    let took = gone_at - failed_at;
    assert!(
        took < (GRACE + 3) as f64,
        "every process gone {took:.2} s after the failure (grace {GRACE} s)"
    );
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r["status"], 7, "{r}");
    assert_eq!(r["failure"]["node"], 1, "{r}");
    assert_eq!(r["failure"]["rank"], 3, "{r}");
    assert_eq!(r["failure"]["code"], 7, "{r}");
    assert!(r["failure"]["stderr_tail"]
        .as_str()
        .unwrap()
        .contains("rank 3 failing on purpose"));
}

/// A SIGKILLed launcher (node 1's, then node 0's, which hosts the control plane): its connection
/// drops, the surviving node stops its ranks and exits 122 naming the lost node, and nothing of the
/// run survives on either node.
#[test]
fn a_sigkilled_launcher_on_either_node_stops_the_other() {
    for victim in [1u32, 0] {
        let d = tempfile::tempdir().unwrap();
        let port = free_port().to_string();
        let mut kids = vec![
            Some(node(d.path(), &port, 0, "sleep", &[])),
            Some(node(d.path(), &port, 1, "sleep", &[])),
        ];
        ready(d.path(), 0);
        let killed = kids[victim as usize].take().unwrap();
        let t = now();
        kill9(killed.id());
        let (code, _) = finish(killed);
        assert_eq!(code, -1, "SIGKILLed");
        let survivor = kids.into_iter().flatten().next().unwrap();
        let (c, e) = finish(survivor);
        let gone_at = all_gone(d.path(), Duration::from_secs(GRACE + 30));
        assert_eq!(c, 122, "the survivor of node {victim}'s death: {e}");
        assert!(
            e.contains(&format!("node {victim} (")) && e.contains("was lost"),
            "{e}"
        );
        let took = gone_at - t;
        assert!(
            took < (GRACE + 3) as f64,
            "node {victim} killed: every process gone after {took:.2} s"
        );
    }
}

/// `--max_restarts 1` and a rank that fails only in attempt 0: both nodes restart together, and
/// attempt 1 all-reduces across all 4 ranks with TORCHELASTIC_RESTART_COUNT=1 on every rank.
#[test]
fn max_restarts_restarts_the_whole_world_together() {
    let d = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let n0 = node(d.path(), &port, 0, "restart", &["--max_restarts", "1"]);
    let n1 = node(d.path(), &port, 1, "restart", &["--max_restarts", "1"]);
    let (c1, e1) = finish(n1);
    let (c0, e0) = finish(n0);
    assert_eq!((c0, c1), (0, 0), "node 0: {e0}\nnode 1: {e1}");
    assert!(
        e0.contains("restarting the ranks of every node (restart 1 of 1)"),
        "{e0}"
    );
    for r in 0..4 {
        let v: Value = serde_json::from_str(
            &std::fs::read_to_string(d.path().join(format!("rank{r}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(v["sum"], 10.0, "rank {r}: {v}");
        assert_eq!(v["env"]["TORCHELASTIC_RESTART_COUNT"], "1", "rank {r}: {v}");
    }
    // Attempt 0 ran on both nodes before the restart.
    assert!(d.path().join("pid.0.0").exists() && d.path().join("pid.3.0").exists());
}

/// Uneven nodes, 3 + 1 ranks: the world is assembled when the nodes join, so every rank gets the
/// right RANK/WORLD_SIZE/GROUP_RANK and the all_reduce sums over all four.
#[test]
fn uneven_nodes_get_their_rank_offsets_from_the_rendezvous() {
    let d = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let n0 = node(d.path(), &port, 0, "allreduce", &["--nproc_per_node", "3"]);
    let n1 = node(d.path(), &port, 1, "allreduce", &["--nproc_per_node", "1"]);
    let (c1, e1) = finish(n1);
    let (c0, e0) = finish(n0);
    assert_eq!((c0, c1), (0, 0), "node 0: {e0}\nnode 1: {e1}");
    for (r, (group, local, local_world)) in [(0, 0, 3), (0, 1, 3), (0, 2, 3), (1, 0, 1)]
        .into_iter()
        .enumerate()
    {
        let v: Value = serde_json::from_str(
            &std::fs::read_to_string(d.path().join(format!("rank{r}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(v["sum"], 10.0, "rank {r}: {v}");
        let env = &v["env"];
        assert_eq!(env["RANK"], r.to_string(), "{v}");
        assert_eq!(env["WORLD_SIZE"], "4", "{v}");
        assert_eq!(env["ROLE_WORLD_SIZE"], "4", "{v}");
        assert_eq!(env["GROUP_RANK"], group.to_string(), "{v}");
        assert_eq!(env["LOCAL_RANK"], local.to_string(), "{v}");
        assert_eq!(env["LOCAL_WORLD_SIZE"], local_world.to_string(), "{v}");
    }
}

/// `--dry-run` shows where the launchers meet; a node that never comes is a bounded wait.
#[test]
fn dry_run_shows_the_control_plane_and_a_missing_node_times_out() {
    let d = tempfile::tempdir().unwrap();
    let out = launcher(d.path())
        .args([
            "--cpu",
            "--num_processes",
            "4",
            "--num_machines",
            "2",
            "--machine_rank",
            "1",
        ])
        .args([
            "--main_process_ip",
            "10.1.2.3",
            "--main_process_port",
            "29500",
            "--dry-run",
        ])
        .args(["--no_python", "true"])
        .output_within(WAIT);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("control plane = 10.1.2.3:29501 (master port + 1"),
        "{text}"
    );
    let port = free_port().to_string();
    let t = Instant::now();
    let n1 = launcher(d.path())
        .args([
            "--cpu",
            "--num_processes",
            "4",
            "--num_machines",
            "2",
            "--machine_rank",
            "0",
        ])
        .args([
            "--main_process_ip",
            "127.0.0.1",
            "--main_process_port",
            &port,
        ])
        .args(["--rdzv_timeout", "3", "--no_python", "true"])
        .output_within(WAIT);
    let e = String::from_utf8_lossy(&n1.stderr);
    assert_eq!(n1.status.code(), Some(125), "{e}");
    assert!(e.contains("could not join the control plane"), "{e}");
    assert!(e.contains("still waiting for node rank(s) [1]"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(30));
}

/// The heartbeat window: a side silent this long is lost (HEARTBEAT × MISSES, lib/launch/control.rs).
const WINDOW: u64 = 5;

fn kill9(pid: u32) {
    Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status_within(WAIT);
}

/// The first line the launcher printed of its own (not a rank's, nor node 0's notes of its control
/// plane: the authentication in force, a refused connection).
fn first_word(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| {
            l.starts_with("accel-launch:") && !l.starts_with("accel-launch: note: control plane:")
        })
        .unwrap_or_default()
}

/// Node 1's network cut (its veth link down; the nodes are two network namespaces with their own
/// addresses): nothing closes, the heartbeats just stop. Both launchers count the other as lost after
/// the heartbeat window, stop their ranks and exit 122; every process of the run on both nodes is gone
/// within the window + grace + 3 s of the cut.
#[test]
fn a_network_cut_stops_both_nodes_within_the_heartbeat_window() {
    let Some(ns) = Netns::create("c") else {
        crate::util::skip(
            "a_network_cut_stops_both_nodes_within_the_heartbeat_window",
            "network namespaces (`ip netns add`, veth) are unavailable here (needs root and iproute2)",
            "the network cut",
        );
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let master = ns.ips[0].clone();
    let n0 = Watched::spawn(node_command(
        Some(&ns),
        d.path(),
        &master,
        &port,
        0,
        "sleep",
        &[],
    ));
    let n1 = Watched::spawn(node_command(
        Some(&ns),
        d.path(),
        &master,
        &port,
        1,
        "sleep",
        &[],
    ));
    ready(d.path(), 0);
    let cut = now();
    ns.cut(1);
    let gone_at = all_gone(d.path(), Duration::from_secs(WINDOW + GRACE + 60));
    let (c0, e0) = n0.finish();
    let (c1, e1) = n1.finish();
    assert_eq!(c0, 122, "node 0: {e0}");
    assert_eq!(c1, 122, "node 1: {e1}");
    let first = first_word(&e0);
    assert!(
        first.contains("node 1 (") && first.contains("was lost: no heartbeat for 5 s"),
        "node 0 must name the lost node first: {e0}"
    );
    assert!(
        first_word(&e1).contains("node 0 (") && e1.contains("was lost"),
        "node 1: {e1}"
    );
    let took = gone_at - cut;
    eprintln!("network cut: every process of the run gone {took:.2} s after the cut");
    assert!(
        took < (WINDOW + GRACE + 3) as f64,
        "every process gone {took:.2} s after the cut (window {WINDOW} s, grace {GRACE} s)"
    );
}

/// A SIGKILLed launcher whose ranks outlive it for a while (they ignore SIGTERM, so its guards wait
/// out a 10 s grace period before SIGKILL): the guards must not hold its control-plane connection
/// open, so node 0 sees the connection close at once, not the heartbeats stop 5 s later.
#[test]
fn a_sigkilled_launchers_connection_closes_though_its_guards_live_on() {
    let d = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let n0 = Watched::spawn(node_command(
        None,
        d.path(),
        "127.0.0.1",
        &port,
        0,
        "sleep",
        &[],
    ));
    let mut n1 = node(d.path(), &port, 1, "stubborn", &["--grace_period", "10"]);
    ready(d.path(), 0);
    let t = now();
    kill9(n1.id());
    n1.wait_within(WAIT);
    let seen = n0.wait_line("was lost", Duration::from_secs(60));
    let (c0, e0) = n0.finish();
    all_gone(d.path(), Duration::from_secs(60));
    assert_eq!(c0, 122, "{e0}");
    assert!(
        first_word(&e0).contains("node 1 (") && e0.contains("its launcher's connection closed"),
        "node 0 must see the connection close, not the heartbeats stop: {e0}"
    );
    let took = seen - t;
    eprintln!("SIGKILLed launcher with live guards: node 0 knew after {took:.2} s");
    assert!(
        took < WINDOW as f64,
        "node 0 learned of the SIGKILL after {took:.2} s: by the heartbeats, not by the connection closing"
    );
}

/// A node's launcher is SIGKILLed with a restart left: node 0 waits for a new launcher of that node,
/// which joins the next attempt; both nodes then run it together (TORCHELASTIC_RESTART_COUNT=1 on
/// every rank, an all_reduce over all 4) and exit 0. A second launcher with a node rank that is still
/// in the run is refused, naming both hosts.
#[test]
fn a_lost_nodes_replacement_joins_the_next_attempt() {
    let d = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let restarts = ["--max_restarts", "1"];
    let n0 = Watched::spawn(node_command(
        None,
        d.path(),
        "127.0.0.1",
        &port,
        0,
        "replace",
        &restarts,
    ));
    let mut n1 = node(d.path(), &port, 1, "replace", &restarts);
    ready(d.path(), 0);
    let twin = node(d.path(), &port, 1, "replace", &restarts);
    let (c, e) = finish(twin);
    assert_eq!(c, 125, "{e}");
    assert!(
        e.contains("node 1 is already in the run from host ")
            && e.contains("and this launcher (host "),
        "{e}"
    );
    kill9(n1.id());
    n1.wait_within(WAIT);
    n0.wait_line(
        "waiting up to 120 s for a new launcher of node 1 (",
        Duration::from_secs(60),
    );
    let replacement = Watched::spawn(node_command(
        None,
        d.path(),
        "127.0.0.1",
        &port,
        1,
        "replace",
        &restarts,
    ));
    let (c1, e1) = replacement.finish();
    let (c0, e0) = n0.finish();
    assert_eq!((c0, c1), (0, 0), "node 0: {e0}\nnode 1: {e1}");
    assert!(
        first_word(&e0).contains("node 1 (") && e0.contains("was lost"),
        "{e0}"
    );
    assert!(
        e0.contains("restarting the ranks of every node (restart 1 of 1)"),
        "{e0}"
    );
    assert!(
        e1.contains("node 1 replaces its lost launcher: joining restart 1 of 1"),
        "{e1}"
    );
    for r in 0..4 {
        let v: Value = serde_json::from_str(
            &std::fs::read_to_string(d.path().join(format!("rank{r}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(v["sum"], 10.0, "rank {r}: {v}");
        assert_eq!(v["env"]["TORCHELASTIC_RESTART_COUNT"], "1", "rank {r}: {v}");
    }
    // Nothing of attempt 0 is left (node 1's old ranks went with its launcher's guards).
    all_gone(d.path(), Duration::from_secs(30));
}

/// No launcher replaces the lost node within --rdzv_timeout: node 0 stops waiting and exits 122,
/// saying so.
#[test]
fn a_lost_node_not_replaced_in_time_ends_the_run() {
    let d = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let args = [
        "--max_restarts",
        "1",
        "--rdzv_timeout",
        "3",
        "--num_processes",
        "2",
    ];
    let n0 = Watched::spawn(node_command(
        None,
        d.path(),
        "127.0.0.1",
        &port,
        0,
        "replace",
        &args,
    ));
    let mut n1 = node(d.path(), &port, 1, "replace", &args);
    let names: Vec<String> = (0..2).map(|r| format!("ready.{r}.0")).collect();
    wait_for(d.path(), &names, Duration::from_secs(120));
    kill9(n1.id());
    n1.wait_within(WAIT);
    let t = Instant::now();
    let (c0, e0) = n0.finish();
    assert_eq!(c0, 122, "{e0}");
    assert!(
        e0.contains("waiting up to 3 s for a new launcher of node 1 ("),
        "{e0}"
    );
    assert!(
        e0.contains("no launcher replaced node 1 (") && e0.contains(") within 3 s"),
        "{e0}"
    );
    assert!(t.elapsed() < Duration::from_secs(GRACE + 3 + 30), "{e0}");
}

/// A node that never starts: node 0 waits the whole `--rdzv_timeout` (here 12 s, beyond the
/// heartbeat window) and then names the missing node rank. The real-socket check of the join's
/// timing: node 0's own link, joined from the start, hears node 0's heartbeats through the wait
/// (node 0 once dropped it after the 5 s window, exit 125 without naming the missing node); a node
/// starting late within the timeout is the unit tests' (`coordinator`: the late node starts the
/// world; `peer`: 30 s of heartbeats keep a node waiting).
#[test]
fn a_node_that_never_starts_ends_the_join_at_the_rdzv_timeout() {
    let d = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let t = Instant::now();
    let n0 = node(d.path(), &port, 0, "allreduce", &["--rdzv_timeout", "12"]);
    let (c0, e0) = finish(n0);
    let took = t.elapsed();
    assert_eq!(c0, 125, "{e0}");
    assert!(e0.contains("still waiting for node rank(s) [1]"), "{e0}");
    assert!(
        took >= Duration::from_secs(12) && took < Duration::from_secs(40),
        "node 0 left after {took:?}:\n{e0}"
    );
}

/// A node-0 address that no resolver can turn into an address is a usage error at once, not a
/// wait of the whole `--rdzv_timeout`.
#[test]
fn an_unresolvable_main_process_ip_is_refused_at_once() {
    let d = tempfile::tempdir().unwrap();
    for ip in ["nosuchhost.invalid", "1.2.3.4.5", ""] {
        let t = Instant::now();
        let out = launcher(d.path())
            .args(["--cpu", "--num_processes", "4", "--num_machines", "2"])
            .args(["--machine_rank", "1", "--main_process_ip", ip])
            .args(["--rdzv_timeout", "60", "--no_python", "true"])
            .output_within(WAIT);
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{ip:?}: {e}");
        assert!(
            e.contains(&format!("cannot resolve --main_process_ip `{ip}`")),
            "{ip:?}: {e}"
        );
        assert!(t.elapsed() < Duration::from_secs(20), "{ip:?}: {e}");
    }
}

/// A stranger on node 0's control port: one TCP connection, lines read with a bound.
struct Stranger {
    w: std::net::TcpStream,
    r: BufReader<std::net::TcpStream>,
}

impl Stranger {
    fn connect(port: u16) -> Stranger {
        let t = Instant::now();
        let s = loop {
            match std::net::TcpStream::connect(("127.0.0.1", port)) {
                Ok(s) => break s,
                Err(e) => {
                    assert!(
                        t.elapsed() < Duration::from_secs(30),
                        "control port {port}: {e}"
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        };
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(15))).unwrap();
        Stranger {
            w: s.try_clone().unwrap(),
            r: BufReader::new(s),
        }
    }

    fn send(&mut self, line: &str) {
        use std::io::Write as _;
        let _ = self.w.write_all(line.as_bytes());
        let _ = self.w.write_all(b"\n");
    }

    /// Every line node 0 sends until it closes the connection (bounded by the read timeout).
    fn rest(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            let mut l = String::new();
            match self.r.read_line(&mut l) {
                Ok(0) | Err(_) => return out,
                Ok(_) => out.push(l.trim_end().to_string()),
            }
        }
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        l.trim_end().to_string()
    }
}

const NONCE: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// What a stranger's forged lines say: a failure of node 1's rank with code 0 (once made every node
/// print "the run failed" and exit 0), and a stop.
const FORGED: [&str; 3] = [
    r#"{"t":"failed","attempt":0,"failure":{"node":1,"host":"x","rank":3,"local_rank":1,"code":0,"signal":null,"what":"exited with status 0"}}"#,
    r#"{"t":"stop","attempt":0,"failure":{"node":1,"host":"x","rank":3,"local_rank":1,"code":0,"signal":null,"what":"forged"}}"#,
    r#"{"t":"join","protocol":3,"run_id":"x","node":1,"nodes":2,"local_ranks":2,"host":"x","max_restarts":0}"#,
];

fn raise_open_files() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a stack struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max.min(8192);
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// With ACCEL_LAUNCH_SECRET, strangers on node 0's control port change nothing: a join as the
/// missing node 1 before the real one (with a forged proof, or the old unauthenticated join),
/// forged `failed`/`stop` lines on that connection and on fresh ones, garbage, a 100 MiB line and
/// 1,000 connections that never authenticate. None is sent the world's layout; the real node 1
/// then joins, both nodes exit 0 and the all_reduce is right; node 0 names each stranger's address.
#[test]
fn strangers_neither_join_nor_stop_an_authenticated_run() {
    raise_open_files();
    let d = tempfile::tempdir().unwrap();
    let port = free_port();
    let cport = port + 1;
    let n0 = node0(
        d.path(),
        &port.to_string(),
        "allreduce",
        &["--rdzv_timeout", "120"],
    );
    let mut seen: Vec<String> = Vec::new();
    // A hello as node 1, then a forged proof.
    let mut a = Stranger::connect(cport);
    a.send(&format!(
        r#"{{"t":"hello","protocol":5,"node":1,"nonce":"{NONCE}"}}"#
    ));
    let challenge = a.line();
    assert!(challenge.contains(r#""auth":"hmac""#), "{challenge}");
    a.send(&format!(r#"{{"t":"prove","proof":"{}"}}"#, "ab".repeat(32)));
    seen.push(challenge);
    let rest = a.rest();
    assert!(
        rest.iter().any(|l| l.contains("failed authentication")),
        "{rest:?}"
    );
    seen.extend(rest);
    // Forged lines instead of a proof, on a fresh connection each, and the old join.
    for forged in FORGED {
        let mut b = Stranger::connect(cport);
        b.send(&format!(
            r#"{{"t":"hello","protocol":5,"node":1,"nonce":"{NONCE}"}}"#
        ));
        seen.push(b.line());
        b.send(forged);
        seen.extend(b.rest());
        let mut c = Stranger::connect(cport);
        c.send(forged);
        seen.extend(c.rest());
    }
    // Garbage, and a 100 MiB line.
    let mut g = Stranger::connect(cport);
    g.send("\u{1}garbage{{{ not json");
    seen.extend(g.rest());
    let mut big = Stranger::connect(cport);
    {
        use std::io::Write as _;
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..100 {
            if big.w.write_all(&chunk).is_err() {
                break;
            }
        }
    }
    seen.extend(big.rest());
    for l in &seen {
        assert!(
            !l.contains("\"start\"") && !l.contains("world_size") && !l.contains("rank_offset"),
            "a stranger was sent the world's layout: {l}"
        );
    }
    // 1,000 connections that say nothing, held while the real node 1 joins.
    let idle: Vec<std::net::TcpStream> = (0..1000)
        .filter_map(|_| std::net::TcpStream::connect(("127.0.0.1", cport)).ok())
        .collect();
    assert!(idle.len() >= 900, "only {} connections opened", idle.len());
    let n1 = node(
        d.path(),
        &port.to_string(),
        1,
        "allreduce",
        &["--rdzv_timeout", "120"],
    );
    // And a forged failure on a fresh connection while the ranks start.
    let mut f = Stranger::connect(cport);
    f.send(FORGED[0]);
    let _ = f.rest();
    let (c1, e1) = finish(n1);
    drop(idle);
    let (c0, e0) = n0.finish();
    assert_eq!((c0, c1), (0, 0), "node 0:\n{e0}\nnode 1:\n{e1}");
    assert_all_reduced(d.path());
    assert!(
        e0.contains("control plane: refused 127.0.0.1:") && e0.contains("failed authentication"),
        "{e0}"
    );
    assert!(!e0.contains("is not authenticated"), "{e0}");
}

/// A launcher without the run's secret, or with another one, is refused with the reason and exits
/// 125; the run goes on as if it had not come.
#[test]
fn a_launcher_without_the_secret_is_refused_and_changes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let n0 = node0(d.path(), &port, "allreduce", &["--rdzv_timeout", "120"]);
    let mut none = node_command(None, d.path(), "127.0.0.1", &port, 1, "allreduce", &[]);
    none.env_remove("ACCEL_LAUNCH_SECRET");
    let (c, e) = finish(none.start());
    assert_eq!(c, 125, "{e}");
    assert!(e.contains("node 0 requires the run's secret"), "{e}");
    let mut wrong = node_command(None, d.path(), "127.0.0.1", &port, 1, "allreduce", &[]);
    wrong.env("ACCEL_LAUNCH_SECRET", "another-secret-0123456789");
    let (c, e) = finish(wrong.start());
    assert_eq!(c, 125, "{e}");
    assert!(
        e.contains("could not prove it holds this run's secret"),
        "{e}"
    );
    let n1 = node(d.path(), &port, 1, "allreduce", &[]);
    let (c1, e1) = finish(n1);
    let (c0, e0) = n0.finish();
    assert_eq!((c0, c1), (0, 0), "node 0:\n{e0}\nnode 1:\n{e1}");
    for r in 0..4 {
        assert!(d.path().join(format!("rank{r}.json")).exists(), "rank {r}");
    }
}

/// A launcher holding the run's secret that joins with `--num_machines nodes` through the library's
/// own protocol: what node 0 answers when it refuses the join.
fn refused_join(port: u16, nodes: u32) -> String {
    use accel::launch::control::peer::{Event, Peer};
    use accel::launch::control::{Credentials, Join, Secret, PROTOCOL};
    use std::io::{Read as _, Write as _};
    let mut s = Stranger::connect(port + 1).w;
    let join = Join {
        protocol: PROTOCOL,
        run_id: format!("port:{}", port + 1),
        node: 1,
        nodes,
        local_ranks: 2,
        host: "raw-peer".into(),
        max_restarts: 0,
        hang_timeout_ms: None,
        grace_ms: Some(3_000),
        world_size: None,
    };
    let creds = Credentials {
        secret: Some(Secret::new(SECRET.as_bytes())),
        munge: None,
    };
    let (mut peer, hello) = Peer::new(join, creds).unwrap();
    s.write_all(&hello).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "node 0 closed the connection without a word");
        let (back, events) = peer.feed(&buf[..n]);
        s.write_all(&back).unwrap();
        for e in events {
            match e {
                Event::Over(why) => return why.to_string(),
                Event::Started(p) => panic!("the join was taken: {p:?}"),
                Event::Joined(_) | Event::Msg(_) => {}
            }
        }
    }
}

/// Node 0 notes each connection it refuses (a stranger's garbage; a launcher that proves the
/// secret but says another `--num_machines`), but not under `--quiet`, like every other note: the
/// refusals themselves stand.
#[test]
fn node_0_notes_the_connections_it_refuses_but_not_under_quiet() {
    for quiet in [true, false] {
        let d = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut extra = vec!["--rdzv_timeout", "4"];
        if quiet {
            extra.push("--quiet");
        }
        let n0 = node0(d.path(), &port.to_string(), "allreduce", &extra);
        let mut g = Stranger::connect(port + 1);
        g.send("garbage");
        let rest = g.rest();
        assert!(
            rest.iter().any(|l| l.contains("it did not say hello")),
            "{rest:?}"
        );
        let why = refused_join(port, 3);
        assert!(
            why.contains("it says --num_machines 3 but node 0 says 2"),
            "{why}"
        );
        let (c0, e0) = n0.finish();
        assert_eq!(c0, 125, "{e0}");
        assert!(e0.contains("still waiting for node rank(s) [1]"), "{e0}");
        let notes = e0.matches("note: control plane: refused").count();
        assert_eq!(notes, if quiet { 0 } else { 2 }, "--quiet {quiet}:\n{e0}");
    }
}

/// Without a secret the run works as `accelerate launch --num_machines 2` does; node 0 says once
/// that its control plane is open, and listens on the rendezvous address only.
#[test]
fn without_a_secret_node_0_says_so_and_listens_on_the_rendezvous_address_only() {
    let d = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut c0 = node_command(
        None,
        d.path(),
        "127.0.0.1",
        &port.to_string(),
        0,
        "allreduce",
        &[],
    );
    c0.env_remove("ACCEL_LAUNCH_SECRET");
    let n0 = Watched::spawn(c0);
    let _ = Stranger::connect(port + 1);
    let ss = Command::new("ss")
        .args(["-Hltn", &format!("sport = :{}", port + 1)])
        .output_within(WAIT);
    let listening = String::from_utf8_lossy(&ss.stdout).into_owned();
    // State, Recv-Q, Send-Q, local address, peer address.
    let local: Vec<&str> = listening
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3))
        .collect();
    assert_eq!(local, [format!("127.0.0.1:{}", port + 1)], "{listening}");
    let mut c1 = node_command(
        None,
        d.path(),
        "127.0.0.1",
        &port.to_string(),
        1,
        "allreduce",
        &[],
    );
    c1.env_remove("ACCEL_LAUNCH_SECRET");
    let (c1, e1) = finish(c1.start());
    let (c0, e0) = n0.finish();
    assert_eq!((c0, c1), (0, 0), "node 0:\n{e0}\nnode 1:\n{e1}");
    assert_eq!(
        e0.matches("is not authenticated: anyone who reaches it can join or stop this run; set ACCEL_LAUNCH_SECRET")
            .count(),
        1,
        "{e0}"
    );
    assert!(!e1.contains("is not authenticated"), "{e1}");
}

/// A node's rank script for drills without torch (`--no_python sh`): records its pid; rank 3 (node
/// 1's second) writes 16 KiB to stderr and exits 7 two seconds in; every other rank sleeps.
const SH_RANK: &str = r#"echo $$ > "$1/pid.$RANK"
if [ "$RANK" = 3 ]; then
  sleep 2
  yes "rank 3's stderr, a long tail line of the failing rank" | head -c 16384 >&2
  echo "the last line of rank 3" >&2
  date +%s.%N > "$1/fail.time"
  exit 7
fi
exec sleep 300
"#;

/// One launcher of a 3-node run of 2 `SH_RANK` ranks per node.
fn sh_launcher(dir: &Path, port: u16, node: u32) -> Command {
    let script = dir.join("rank.sh");
    std::fs::write(&script, SH_RANK).unwrap();
    let mut c = launcher(dir);
    c.env("ACCEL_LAUNCH_SECRET", SECRET);
    node_flags(&mut c, 3, node, "127.0.0.1", &port.to_string())
        .args(["--num_processes", "6"])
        .args([
            "--grace_period",
            &GRACE.to_string(),
            "--rdzv_timeout",
            "120",
        ])
        .args(["--no_python", "sh"])
        .arg(&script)
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// A node of the run played by the test with the library's own protocol ([`Peer`]): it connects
/// with a receive buffer of the kernel's minimum, proves the secret, joins as `node` with 2 ranks
/// and reads until the world starts. What it does then (through its sending side) is the drill's.
fn raw_member(
    port: u16,
    node: u32,
    nodes: u32,
) -> (std::net::TcpStream, accel::launch::control::peer::Sender) {
    use accel::launch::control::peer::{Event, Peer};
    use accel::launch::control::{Credentials, Join, Secret, PROTOCOL};
    use std::io::{Read as _, Write as _};
    // The smallest receive buffer, set before connecting: the window it advertises from the first
    // segment on is then a few KiB, so what node 0 sends beyond it stays in node 0's kernel unread.
    // (Set after the connection, the kernel keeps the window it already advertised, and whether a
    // 16 KiB stop is taken in then varies from run to run.)
    let mut s = {
        use std::os::fd::FromRawFd as _;
        let one: libc::c_int = 1;
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: (port + 1).to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
            },
            sin_zero: [0; 8],
        };
        let t = Instant::now();
        let s = loop {
            // SAFETY: a socket we create and own, an int option, a sockaddr_in of the right size;
            // the descriptor is closed on failure or handed to TcpStream, which closes it.
            unsafe {
                let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
                assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUF,
                    (&one as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
                let rc = libc::connect(
                    fd,
                    (&addr as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                );
                if rc == 0 {
                    break std::net::TcpStream::from_raw_fd(fd);
                }
                let e = std::io::Error::last_os_error();
                libc::close(fd);
                assert!(
                    t.elapsed() < Duration::from_secs(30),
                    "control port {}: {e}",
                    port + 1
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(15))).unwrap();
        s
    };
    let join = Join {
        protocol: PROTOCOL,
        run_id: format!("port:{}", port + 1),
        node,
        nodes,
        local_ranks: 2,
        host: "raw-peer".into(),
        max_restarts: 0,
        hang_timeout_ms: None,
        grace_ms: Some(3_000),
        world_size: None,
    };
    let creds = Credentials {
        secret: Some(Secret::new(SECRET.as_bytes())),
        munge: None,
    };
    let (mut peer, hello) = Peer::new(join, creds).unwrap();
    s.write_all(&hello).unwrap();
    let mut buf = [0u8; 4096];
    let mut sender = None;
    loop {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "node 0 closed the raw member's connection");
        let (back, events) = peer.feed(&buf[..n]);
        s.write_all(&back).unwrap();
        for e in events {
            match e {
                Event::Joined(tx) => sender = Some(tx),
                Event::Started(_) => return (s, sender.expect("started before its join")),
                Event::Over(why) => panic!("the raw member was refused: {why}"),
                Event::Msg(_) => {}
            }
        }
    }
}

/// Three nodes; node 2 is a member that joins, heartbeats, and then never reads nor ends (its
/// receive buffer is the kernel's smallest). Rank 3 on node 1 fails with a 16 KiB stderr tail: the
/// stop with that tail stays unread in node 0's queue for node 2, which is lost alone after the loss
/// window; node 1 hears node 0's heartbeats all along, and both real nodes exit with the rank's 7
/// (not 122, and not a wait for node 2's `ended` that never comes).
#[test]
fn a_member_that_never_reads_is_lost_alone_and_the_ranks_code_stands() {
    use accel::launch::control::Msg;
    use std::io::Write as _;
    let d = tempfile::tempdir().unwrap();
    let port = free_port();
    let n0 = Watched::spawn(sh_launcher(d.path(), port, 0));
    let n1 = sh_launcher(d.path(), port, 1).start();
    let (mut s, mut peer) = raw_member(port, 2, 3);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let beats = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if s.write_all(&peer.line(&Msg::Hb)).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    let (c1, e1) = finish(n1);
    let (c0, e0) = n0.finish();
    let ended = now();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    beats.join().unwrap();
    assert_eq!((c0, c1), (7, 7), "node 0:\n{e0}\nnode 1:\n{e1}");
    assert!(
        e0.contains("rank 3 (local rank 1) on node 1") && e0.contains("the last line of rank 3"),
        "{e0}"
    );
    assert!(!e1.contains("was lost"), "node 1 lost node 0:\n{e1}");
    let failed: f64 = std::fs::read_to_string(d.path().join("fail.time"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let took = ended - failed;
    assert!(
        took < 5.0 + (GRACE + 5) as f64,
        "node 0 ended {took:.1} s after the failure:\n{e0}"
    );
}

/// A stranger's flood of node 0's control port (tests/fixtures/launch/flood.py), for `seconds`.
fn flood(cport: u16, mode: &str, count: u32, addrs: u32, seconds: u32) -> Child {
    Command::new(crate::util::venv_python())
        .arg(fixture("launch/flood.py"))
        .args([
            cport.to_string(),
            mode.to_string(),
            count.to_string(),
            addrs.to_string(),
            seconds.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .start()
}

/// The flood's end: how many connections it opened (it exits 0).
fn flood_end(f: Child) -> u64 {
    let out = f.output_within(WAIT);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.trim().parse().unwrap()
}

/// A stranger without the secret holds every handshake slot, each reopened as node 0 closes it
/// (256 connections from one address; 300 from 50): the real node 1, started 3 s into the flood
/// with `--rdzv_timeout 6`, still joins (node 0 once closed every newcomer while 256 handshakes
/// were under way, so node 1, retrying every ~200 ms, could come only in the moments after the
/// flood's handshakes expired, 10 s after they opened: never within its timeout), the run ends
/// well and node 0 says why it closed the stranger's connections.
#[test]
fn a_stranger_holding_every_handshake_slot_does_not_keep_a_node_out() {
    for (count, addrs) in [(256, 1), (300, 50)] {
        let d = tempfile::tempdir().unwrap();
        let port = free_port();
        let n0 = node0(d.path(), &port.to_string(), "allreduce", &[]);
        drop(Stranger::connect(port + 1));
        let f = flood(port + 1, "hold", count, addrs, 30);
        std::thread::sleep(Duration::from_secs(3));
        let n1 = node(
            d.path(),
            &port.to_string(),
            1,
            "allreduce",
            &["--rdzv_timeout", "6"],
        );
        let (c1, e1) = finish(n1);
        let (c0, e0) = n0.finish();
        let opened = flood_end(f);
        assert_eq!(
            (c0, c1),
            (0, 0),
            "{count} from {addrs}: node 0:\n{e0}\nnode 1:\n{e1}"
        );
        assert!(opened >= u64::from(count), "{opened}");
        assert_all_reduced(d.path());
        assert!(
            e0.contains("control plane: refused 127.0.0.")
                && e0.contains("256 connections were in their handshake"),
            "{e0}"
        );
    }
}

/// Floods during an authenticated run, while node 1 joins and the ranks start and run 8 s: a
/// stranger's connections that each send a line that is no hello and stay open unread (each
/// refusal once lingered 2 s at node 0 with a descriptor, uncounted), from two processes of up to
/// 1,500 a second each from 50 addresses, and connections reset at once, 500 a second. Node 0's
/// launcher has 1,024 descriptors (soft and hard). Nothing changes: no node is lost, every rank
/// starts, both exit 0.
#[test]
fn a_connect_flood_during_a_run_changes_nothing() {
    raise_open_files();
    let d = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut c = node_command(
        None,
        d.path(),
        "127.0.0.1",
        &port.to_string(),
        0,
        "late_allreduce",
        &[],
    );
    // SAFETY: setrlimit(2) on the child, between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt as _;
        c.pre_exec(|| {
            let r = libc::rlimit {
                rlim_cur: 1024,
                rlim_max: 1024,
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
            Ok(())
        });
    }
    let n0 = Watched::spawn(c);
    drop(Stranger::connect(port + 1));
    let garbage = [
        flood(port + 1, "garbage", 1500, 50, 25),
        flood(port + 1, "garbage", 1500, 50, 25),
    ];
    let reset = flood(port + 1, "reset", 500, 50, 25);
    std::thread::sleep(Duration::from_secs(4));
    let n1 = node(d.path(), &port.to_string(), 1, "late_allreduce", &[]);
    let (c1, e1) = finish(n1);
    let (c0, e0) = n0.finish();
    let opened = (garbage.map(flood_end).iter().sum::<u64>(), flood_end(reset));
    assert_eq!((c0, c1), (0, 0), "node 0:\n{e0}\nnode 1:\n{e1}");
    assert!(opened.0 >= 2000 && opened.1 >= 1000, "{opened:?}");
    assert_all_reduced(d.path());
    for e in [&e0, &e1] {
        assert!(!e.contains("lost"), "{e}");
    }
}

/// The run's secret is the launchers' alone: a set but empty ACCEL_LAUNCH_SECRET is refused as too
/// short (it once meant no authentication, silently); the ranks do not inherit the secret (unless
/// ACCEL_LAUNCH_SECRET_TO_RANKS=1, here on node 0 only); and neither `--dry-run --json`, the
/// launchers' stderr, `--report_json`, the logs under `--log_dir` nor accel-env's report prints it.
#[test]
fn the_secret_stays_with_the_launchers_and_an_empty_one_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let out = node_command(None, d.path(), "127.0.0.1", &port, 0, "allreduce", &[])
        .env("ACCEL_LAUNCH_SECRET", "")
        .output_within(WAIT);
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(
        e.contains("ACCEL_LAUNCH_SECRET: a secret needs at least 16 bytes (it has 0)"),
        "{e}"
    );
    let mut printed = Vec::new();
    let dry = node_command(
        None,
        d.path(),
        "127.0.0.1",
        &port,
        0,
        "allreduce",
        &["--dry-run", "--json"],
    )
    .output_within(WAIT);
    assert!(
        dry.status.success(),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    printed.push((
        "--dry-run --json".to_string(),
        [dry.stdout, dry.stderr].concat(),
    ));
    let env = launch_env(bin("accel-env"), d.path())
        .env("ACCEL_LAUNCH_SECRET", SECRET)
        .output_within(WAIT);
    assert!(env.status.success());
    printed.push(("accel-env".to_string(), [env.stdout, env.stderr].concat()));
    let logs = d.path().join("logs");
    let report = d.path().join("report.json");
    let mut c0 = node_command(
        None,
        d.path(),
        "127.0.0.1",
        &port,
        0,
        "allreduce",
        &[
            "--log_dir",
            logs.to_str().unwrap(),
            "--report_json",
            report.to_str().unwrap(),
        ],
    );
    c0.env("ACCEL_LAUNCH_SECRET_TO_RANKS", "1");
    let n0 = Watched::spawn(c0);
    let (c1, e1) = finish(node(d.path(), &port, 1, "allreduce", &[]));
    let (c0, e0) = n0.finish();
    assert_eq!((c0, c1), (0, 0), "node 0:\n{e0}\nnode 1:\n{e1}");
    assert_all_reduced(d.path());
    for r in 0..4 {
        let v: Value = serde_json::from_str(
            &std::fs::read_to_string(d.path().join(format!("rank{r}.json"))).unwrap(),
        )
        .unwrap();
        let inherited: &[&str] = if r < 2 { &["ACCEL_LAUNCH_SECRET"] } else { &[] };
        assert_eq!(v["secret"], serde_json::json!(inherited), "rank {r}: {v}");
    }
    printed.push(("node 0's stderr".into(), e0.into_bytes()));
    printed.push(("node 1's stderr".into(), e1.into_bytes()));
    printed.push(("--report_json".into(), std::fs::read(&report).unwrap()));
    let mut dirs = vec![logs];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                printed.push((p.display().to_string(), std::fs::read(&p).unwrap()));
            }
        }
    }
    assert!(printed.len() > 6, "no logs under --log_dir");
    for (what, bytes) in &printed {
        assert!(
            !String::from_utf8_lossy(bytes).contains(SECRET),
            "{what} prints the secret"
        );
    }
}
