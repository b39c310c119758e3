//! Spare nodes with real launchers on loopback: a world of two nodes (`--num_machines 2
//! --machine_rank 0/1`) and a spare (`--machine_rank 2`), real gloo ranks, a real SIGKILL of node
//! 1's launcher. Each asserts what every launcher says and exits with, node 0's `--report_json`
//! and `--exclude_file`, and that nothing of the run is left.

// Test helpers may panic, and the tests pass their own environment to the binaries.
#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

use crate::util::launcher::{launch_env, launcher, node_flags};
use crate::util::{bin, fixture, free_port, repo, survivors, Netns};
#[allow(unused_imports)]
use crate::util::{ChildExt as _, CommandExt as _, WAIT};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

const SECRET: &str = "spare-drill-secret-0123456789abcdef";

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A launcher of the 2-node world (2 ranks a node) or a spare (`node` 2 and up), authenticated,
/// with `--report_json DIR/report.N.json`, running `script`.
fn node_command(dir: &Path, port: &str, node: u32, extra: &[&str], script: &[&str]) -> Command {
    command_in(None, dir, port, node, extra, script)
}

/// [`node_command`], in network namespace `ns.names[i]` with node 0 at `ns.ips[0]` when given as
/// `(ns, i)`.
fn command_in(
    ns: Option<(&Netns, usize)>,
    dir: &Path,
    port: &str,
    node: u32,
    extra: &[&str],
    script: &[&str],
) -> Command {
    let (mut c, master) = match ns {
        Some((ns, i)) => {
            let mut c = launch_env("ip", dir);
            c.args(["netns", "exec", &ns.names[i]])
                .arg(bin("accel-launch"))
                .env("GLOO_SOCKET_IFNAME", &ns.ifaces[i]);
            (c, ns.ips[0].clone())
        }
        None => (launcher(dir), "127.0.0.1".to_string()),
    };
    c.env("ACCEL_LAUNCH_SECRET", SECRET);
    node_flags(&mut c, 2, node, &master, port);
    c.args(["--num_processes", "4", "--grace_period", "3"])
        .args(["--rdzv_timeout", "120"])
        .arg("--report_json")
        .arg(dir.join(format!("report.{node}.json")))
        .args(extra)
        .args(script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// tests/fixtures/launch/control.py in `mode`, writing to `dir`.
fn control_py(dir: &Path, mode: &str) -> Vec<String> {
    vec![
        fixture("launch/control.py").display().to_string(),
        dir.display().to_string(),
        mode.to_string(),
    ]
}

/// A launcher whose stderr is read as it comes, each line with the time it was seen; its stdout
/// is kept whole.
struct Watched {
    child: Child,
    lines: Arc<Mutex<Vec<(f64, String)>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
    stdout: Arc<Mutex<String>>,
}

impl Watched {
    fn spawn(mut c: Command) -> Watched {
        let mut child = c.start();
        let err = child.stderr.take().unwrap();
        let out = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stdout = Arc::new(Mutex::new(String::new()));
        let l = Arc::clone(&lines);
        let o = Arc::clone(&stdout);
        let readers = vec![
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines() {
                    let Ok(line) = line else { return };
                    l.lock().unwrap().push((now(), line));
                }
            }),
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { return };
                    o.lock().unwrap().push_str(&(line + "\n"));
                }
            }),
        ];
        Watched {
            child,
            lines,
            readers,
            stdout,
        }
    }

    /// When (UNIX seconds) a line containing `pat` was printed, waiting for it at most `limit`.
    fn wait_line(&self, pat: &str, limit: Duration) -> f64 {
        let t = Instant::now();
        loop {
            let found = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .find(|(_, l)| l.contains(pat))
                .map(|(at, _)| *at);
            if let Some(at) = found {
                return at;
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

    /// The exit code, stderr and stdout.
    fn finish(mut self) -> (i32, String, String) {
        let status = self.child.wait_within(WAIT);
        for r in self.readers.drain(..) {
            r.join().unwrap();
        }
        let out = self.stdout.lock().unwrap().clone();
        (status.code().unwrap_or(-1), self.text(), out)
    }
}

fn wait_for(dir: &Path, names: &[String], limit: Duration) -> f64 {
    let t = Instant::now();
    while !names.iter().all(|n| dir.join(n).exists()) {
        assert!(t.elapsed() < limit, "ranks never became ready: {names:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    now()
}

fn ready(dir: &Path, ranks: std::ops::Range<u32>, attempt: u32) -> f64 {
    let names: Vec<String> = ranks.map(|r| format!("ready.{r}.{attempt}")).collect();
    wait_for(dir, &names, Duration::from_secs(120))
}

fn report(dir: &Path, node: u32) -> Value {
    let p = dir.join(format!("report.{node}.json"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p:?}: {e}")))
        .unwrap()
}

fn kill9(pid: u32) {
    Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status_within(WAIT);
}

/// `--dry_run` of a spare says it is one; one machine has no spare (`--machine_rank 1` of 1 is
/// refused as before).
#[test]
fn a_spares_dry_run_says_so_and_one_machine_has_none() {
    let d = tempfile::tempdir().unwrap();
    let mut c = launcher(d.path());
    node_flags(&mut c, 2, 2, "127.0.0.1", "29555");
    let o = c.args(["--dry_run", "train.py"]).output_within(WAIT);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("spare = node 2 of a 2-node world: it runs no ranks until it takes the place of a lost node"),
        "{out}"
    );
    let mut c = launcher(d.path());
    node_flags(&mut c, 1, 1, "127.0.0.1", "29555");
    let o = c.args(["--dry_run", "train.py"]).output_within(WAIT);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("machine_rank (1) must be below num_machines (1)"),
        "{err}"
    );
}

/// Under SLURM, `srun -N3 accel-launch --num_machines 2`: SLURM's node id 2 is a spare of the
/// 2-node world whose rendezvous is the job's first node; a launcher started by hand in the
/// allocation (no SLURM_NODEID) with its own --machine_rank names the machines itself, as before.
#[test]
fn slurm_node_ids_beyond_num_machines_are_spares() {
    let d = tempfile::tempdir().unwrap();
    let job = [
        ("SLURM_JOB_ID", "4242"),
        ("SLURM_JOB_NODELIST", "n[1-3]"),
        ("SLURM_NNODES", "3"),
    ];
    let dry = |step: bool, args: &[&str]| {
        let mut c = launcher(d.path());
        c.envs(job);
        if step {
            c.envs([
                ("SLURM_NODEID", "2"),
                ("SLURM_STEP_ID", "0"),
                ("SLURM_STEP_TASKS_PER_NODE", "1(x3)"),
            ]);
        }
        let o = c
            .args(["--cpu", "--num_machines", "2", "--num_processes", "4"])
            .args(args)
            .args(["--dry_run", "train.py"])
            .output_within(WAIT);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success(),
            "{out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        out
    };
    let out = dry(true, &[]);
    assert!(
        out.contains("\nmachine_rank = 2\nrendezvous = n1:"),
        "{out}"
    );
    assert!(out.contains("spare = node 2 of a 2-node world"), "{out}");
    let args = [
        "--machine_rank",
        "1",
        "--main_process_ip",
        "10.0.0.1",
        "--main_process_port",
        "29500",
    ];
    let out = dry(false, &args);
    assert!(
        out.contains("\nmachine_rank = 1\nrendezvous = 10.0.0.1:29500"),
        "{out}"
    );
    assert!(!out.contains("spare ="), "{out}");
}

/// A spare joins, heartbeats and runs no rank: node 0's start note and report list it; when the
/// world succeeds the spare exits 0, and when a rank fails it exits with the world's status.
#[test]
fn a_spare_waits_and_exits_with_the_world() {
    for (mode, want) in [("allreduce", 0), ("fail", 7)] {
        let d = tempfile::tempdir().unwrap();
        let port = free_port().to_string();
        let script = control_py(d.path(), mode);
        let script: Vec<&str> = script.iter().map(String::as_str).collect();
        // The spare joins before the world is whole: it waits for it to form.
        let n0 = Watched::spawn(node_command(d.path(), &port, 0, &[], &script));
        let spare = Watched::spawn(node_command(d.path(), &port, 2, &[], &script));
        n0.wait_line("spare node 2 (", Duration::from_secs(60));
        let n1 = Watched::spawn(node_command(d.path(), &port, 1, &[], &script));
        let (c0, e0, _) = n0.finish();
        let (c1, e1, _) = n1.finish();
        let (c2, e2, _) = spare.finish();
        assert_eq!(
            (c0, c1, c2),
            (want, want, want),
            "{mode}\nnode 0: {e0}\nnode 1: {e1}\nspare: {e2}"
        );
        assert!(
            e0.contains("with 1 spare(s) waiting: node 2 ("),
            "node 0 names the spare at the start: {e0}"
        );
        assert!(
            e2.contains("node 2 is a spare (the world has 2 nodes)"),
            "{e2}"
        );
        assert!(
            e2.contains("--max_restarts 0: no node's place can be taken"),
            "a spare without a restart to take says so: {e2}"
        );
        let r0 = report(d.path(), 0);
        assert_eq!(r0["spares"][0]["node"], 2, "{r0}");
        assert_eq!(r0["spares"][0]["took"], Value::Null, "{r0}");
        assert_eq!(r0["lost_nodes"], serde_json::json!([]), "{r0}");
        let r2 = report(d.path(), 2);
        assert_eq!(
            (r2["spare"].clone(), r2["status"].clone()),
            (Value::Bool(true), want.into()),
            "{r2}"
        );
        // The spare ran no rank: 4 ranks, none of them its.
        assert!(!d.path().join("ready.4.0").exists());
        if mode == "allreduce" {
            assert!(
                e2.contains("spare node 2: the run succeeded without it"),
                "{e2}"
            );
            for r in 0..4 {
                let v: Value = serde_json::from_str(
                    &std::fs::read_to_string(d.path().join(format!("rank{r}.json"))).unwrap(),
                )
                .unwrap();
                assert_eq!(v["sum"], 10.0, "rank {r}: {v}");
            }
        } else {
            assert!(
                e2.contains("spare node 2: the run ended before it was needed: rank 3"),
                "{e2}"
            );
        }
        survivors::assert_none_left(d.path(), "the world's ranks", 8, Duration::from_secs(30));
    }
}

/// SIGKILL of node 1's launcher with a spare waiting: the spare takes node rank 1 for the next
/// attempt, with no wait for a replacement; every rank of attempt 1 all-reduces over the 4 ranks
/// with TORCHELASTIC_RESTART_COUNT=1 (restarts counted as without spares), all exit 0, and node
/// 0's report and exclude file name node 1's host. Prints the time from the SIGKILL to the spare's
/// ranks started (its note) and to the whole world's ranks of attempt 1 in the rendezvous.
#[test]
fn a_spare_takes_the_place_of_a_sigkilled_node() {
    let d = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let script = control_py(d.path(), "replace");
    let script: Vec<&str> = script.iter().map(String::as_str).collect();
    let exclude = d.path().join("exclude");
    let ex = exclude.display().to_string();
    let restarts = ["--max_restarts", "1", "--exclude_file", &ex];
    let n0 = Watched::spawn(node_command(d.path(), &port, 0, &restarts, &script));
    let n1 = Watched::spawn(node_command(d.path(), &port, 1, &restarts, &script));
    let spare = Watched::spawn(node_command(d.path(), &port, 2, &restarts, &script));
    ready(d.path(), 0..4, 0);
    spare.wait_line("node 2 is a spare", Duration::from_secs(60));
    n0.wait_line("spare node 2 (", Duration::from_secs(60));
    let killed = now();
    kill9(n1.child.id());
    let (c1, _, _) = n1.finish();
    assert_eq!(c1, -1, "node 1's launcher was SIGKILLed");
    let took = spare.wait_line(
        "spare node 2 takes the place of lost node 1: joining restart 1 of 1",
        Duration::from_secs(60),
    );
    let world = ready(d.path(), 0..4, 1);
    let (c2, e2, _) = spare.finish();
    let (c0, e0, _) = n0.finish();
    assert_eq!((c0, c2), (0, 0), "node 0: {e0}\nspare: {e2}");
    eprintln!(
        "take-over: {:.2} s from the SIGKILL to the spare's ranks started, {:.2} s to every rank of attempt 1 in the rendezvous",
        took - killed,
        world - killed
    );
    assert!(
        !e0.contains("waiting up to"),
        "no wait for a replacement launcher: {e0}"
    );
    assert!(
        e0.contains("spare node 2 (") && e0.contains("takes the place of lost node 1 ("),
        "{e0}"
    );
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
    // The spare's ranks are ranks 2 and 3, in node rank 1.
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("rank3.json")).unwrap())
            .unwrap();
    assert_eq!(v["env"]["GROUP_RANK"], "1", "{v}");
    let host = crate::util::python(
        "import socket; print(socket.gethostname())",
        &Default::default(),
    );
    let host = host.trim();
    let r0 = report(d.path(), 0);
    let lost = &r0["lost_nodes"][0];
    assert_eq!(
        (
            lost["node"].clone(),
            lost["host"].as_str(),
            lost["attempt"].clone()
        ),
        (1.into(), Some(host), 0.into()),
        "{r0}"
    );
    assert!(
        lost["why"].as_str().unwrap().contains("connection closed"),
        "{r0}"
    );
    assert_eq!(r0["spares"][0]["took"], 1, "{r0}");
    assert_eq!(
        std::fs::read_to_string(&exclude).unwrap(),
        format!("{host}\n")
    );
    survivors::assert_none_left(
        d.path(),
        "both attempts' ranks",
        16,
        Duration::from_secs(30),
    );
}

/// Two spares and two losses: node 1's launcher SIGKILLed, spare 2 takes node rank 1; then spare
/// 2 (node 1 now) SIGKILLed, spare 3 takes it; attempt 2 all-reduces over the 4 ranks with
/// TORCHELASTIC_RESTART_COUNT=2, node 0 and spare 3 exit 0, and node 0's report has both losses.
#[test]
fn two_spares_take_two_losses() {
    let d = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let script = control_py(d.path(), "replace2");
    let script: Vec<&str> = script.iter().map(String::as_str).collect();
    let restarts = ["--max_restarts", "2"];
    let n0 = Watched::spawn(node_command(d.path(), &port, 0, &restarts, &script));
    let n1 = Watched::spawn(node_command(d.path(), &port, 1, &restarts, &script));
    let s2 = Watched::spawn(node_command(d.path(), &port, 2, &restarts, &script));
    let s3 = Watched::spawn(node_command(d.path(), &port, 3, &restarts, &script));
    ready(d.path(), 0..4, 0);
    n0.wait_line("spare node 3 (", Duration::from_secs(60));
    n0.wait_line("spare node 2 (", Duration::from_secs(60));
    kill9(n1.child.id());
    n1.finish();
    ready(d.path(), 0..4, 1);
    s2.wait_line(
        "spare node 2 takes the place of lost node 1",
        Duration::from_secs(60),
    );
    kill9(s2.child.id());
    s2.finish();
    let (c3, e3, _) = s3.finish();
    let (c0, e0, _) = n0.finish();
    assert_eq!((c0, c3), (0, 0), "node 0: {e0}\nspare 3: {e3}");
    assert!(
        e3.contains("spare node 3 takes the place of lost node 1: joining restart 2 of 2"),
        "{e3}"
    );
    for r in 0..4 {
        let v: Value = serde_json::from_str(
            &std::fs::read_to_string(d.path().join(format!("rank{r}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(v["sum"], 10.0, "rank {r}: {v}");
        assert_eq!(v["env"]["TORCHELASTIC_RESTART_COUNT"], "2", "rank {r}: {v}");
    }
    let r0 = report(d.path(), 0);
    let lost: Vec<(Value, Value)> = r0["lost_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["node"].clone(), l["attempt"].clone()))
        .collect();
    assert_eq!(lost, [(1.into(), 0.into()), (1.into(), 1.into())], "{r0}");
    let took: Vec<(Value, Value)> = r0["spares"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["node"].clone(), s["attempt"].clone()))
        .collect();
    assert!(
        took.contains(&(2.into(), 1.into())) && took.contains(&(3.into(), 2.into())),
        "{r0}"
    );
    survivors::assert_none_left(
        d.path(),
        "three attempts' ranks",
        24,
        Duration::from_secs(30),
    );
}

/// Node 1's network cut (its namespace's link down) with a spare waiting beside node 0: node 0
/// counts node 1 as lost after the 5 s heartbeat window, and the spare takes node rank 1 for the
/// next attempt; node 0 and the spare exit 0, node 1 (which lost node 0) exits 122, and node 1's
/// host is in node 0's report. Prints the time from the cut to the spare's ranks started.
#[test]
fn a_spare_takes_the_place_of_a_node_cut_off() {
    let Some(ns) = Netns::create("p") else {
        crate::util::skip(
            "a_spare_takes_the_place_of_a_node_cut_off",
            "network namespaces (`ip netns add`, veth) are unavailable here (needs root and iproute2)",
            "the network cut",
        );
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let script = control_py(d.path(), "replace");
    let script: Vec<&str> = script.iter().map(String::as_str).collect();
    let restarts = ["--max_restarts", "1"];
    let at = |i| Some((&ns, i));
    let n0 = Watched::spawn(command_in(at(0), d.path(), &port, 0, &restarts, &script));
    let n1 = Watched::spawn(command_in(at(1), d.path(), &port, 1, &restarts, &script));
    let spare = Watched::spawn(command_in(at(0), d.path(), &port, 2, &restarts, &script));
    ready(d.path(), 0..4, 0);
    n0.wait_line("spare node 2 (", Duration::from_secs(60));
    let cut = now();
    ns.cut(1);
    let took = spare.wait_line(
        "spare node 2 takes the place of lost node 1: joining restart 1 of 1",
        Duration::from_secs(60),
    );
    let world = ready(d.path(), 0..4, 1);
    let (c2, e2, _) = spare.finish();
    let (c0, e0, _) = n0.finish();
    let (c1, e1, _) = n1.finish();
    assert_eq!(
        (c0, c1, c2),
        (0, 122, 0),
        "node 0: {e0}\nnode 1: {e1}\nspare: {e2}"
    );
    eprintln!(
        "take-over after a network cut: {:.2} s from the cut to the spare's ranks started, {:.2} s to every rank of attempt 1 in the rendezvous",
        took - cut,
        world - cut
    );
    assert!(e0.contains("was lost: no heartbeat for 5 s"), "{e0}");
    let r0 = report(d.path(), 0);
    let why = r0["lost_nodes"][0]["why"].as_str().unwrap_or_default();
    assert!(why.contains("no heartbeat"), "{r0}");
    for r in 0..4 {
        let v: Value = serde_json::from_str(
            &std::fs::read_to_string(d.path().join(format!("rank{r}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(v["sum"], 10.0, "rank {r}: {v}");
    }
    survivors::assert_none_left(
        d.path(),
        "both attempts' ranks",
        16,
        Duration::from_secs(30),
    );
}

/// `--replace_failing_nodes`: rank 2 (node 1's first) exits 7 in attempt 0 with a spare waiting;
/// node 1 is replaced by the spare instead of being restarted in place: node 1's launcher exits 7
/// (its rank's status), saying it was replaced; attempt 1 runs on node 0 and the spare, which exit 0.
/// Without the flag the same failure restarts node 1 in place (tests/control.rs).
#[test]
fn replace_failing_nodes_puts_the_spare_in_the_failing_nodes_place() {
    let d = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let script = control_py(d.path(), "restart");
    let script: Vec<&str> = script.iter().map(String::as_str).collect();
    let exclude = d.path().join("exclude");
    let ex = exclude.display().to_string();
    let flags = [
        "--max_restarts",
        "1",
        "--replace_failing_nodes",
        "--exclude_file",
        &ex,
    ];
    let n0 = Watched::spawn(node_command(d.path(), &port, 0, &flags, &script));
    let spare = Watched::spawn(node_command(d.path(), &port, 2, &flags, &script));
    n0.wait_line("spare node 2 (", Duration::from_secs(60));
    let n1 = Watched::spawn(node_command(d.path(), &port, 1, &flags, &script));
    let (c1, e1, _) = n1.finish();
    let (c2, e2, _) = spare.finish();
    let (c0, e0, _) = n0.finish();
    assert_eq!(
        (c0, c1, c2),
        (0, 7, 0),
        "node 0: {e0}\nnode 1: {e1}\nspare: {e2}"
    );
    assert!(
        e1.contains("node 1 leaves the run, replaced by a spare"),
        "{e1}"
    );
    assert!(e2.contains("takes the place of lost node 1"), "{e2}");
    for r in 0..4 {
        let v: Value = serde_json::from_str(
            &std::fs::read_to_string(d.path().join(format!("rank{r}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(v["sum"], 10.0, "rank {r}: {v}");
        assert_eq!(v["env"]["TORCHELASTIC_RESTART_COUNT"], "1", "rank {r}: {v}");
    }
    let r0 = report(d.path(), 0);
    let why = r0["lost_nodes"][0]["why"].as_str().unwrap_or_default();
    assert!(why.starts_with("its ranks failed: rank 2"), "{r0}");
    assert!(std::fs::read_to_string(&exclude).unwrap().ends_with('\n'));
    survivors::assert_none_left(
        d.path(),
        "both attempts' ranks",
        16,
        Duration::from_secs(30),
    );
}

fn signal(pid: u32, sig: &str) {
    Command::new("kill")
        .args([sig, &pid.to_string()])
        .status_within(WAIT);
}

/// Signals while a spare waits: SIGTERM to the spare leaves the world alone (the spare exits 143,
/// node 0 notes it gone, the world succeeds); SIGTERM to node 0's launcher ends the run, and the
/// spare follows it with 143 too. Nothing is left running either way.
#[test]
fn signals_while_a_spare_waits() {
    for target in ["spare", "node 0"] {
        let d = tempfile::tempdir().unwrap();
        let port = free_port().to_string();
        let script = control_py(d.path(), "late_allreduce");
        let script: Vec<&str> = script.iter().map(String::as_str).collect();
        let n0 = Watched::spawn(node_command(d.path(), &port, 0, &[], &script));
        let spare = Watched::spawn(node_command(d.path(), &port, 2, &[], &script));
        n0.wait_line("spare node 2 (", Duration::from_secs(60));
        let n1 = Watched::spawn(node_command(d.path(), &port, 1, &[], &script));
        ready(d.path(), 0..4, 0);
        let pid = if target == "spare" {
            spare.child.id()
        } else {
            n0.child.id()
        };
        signal(pid, "-TERM");
        let (c2, e2, _) = spare.finish();
        let (c0, e0, _) = n0.finish();
        let (c1, e1, _) = n1.finish();
        let want = if target == "spare" {
            (0, 0, 143)
        } else {
            (143, 143, 143)
        };
        assert_eq!(
            (c0, c1, c2),
            want,
            "{target}\nnode 0: {e0}\nnode 1: {e1}\nspare: {e2}"
        );
        if target == "spare" {
            assert!(
                e0.contains("spare node 2 (")
                    && e0.contains("is gone (left the run: its launcher received SIGTERM)"),
                "{e0}"
            );
        } else {
            assert!(
                e2.contains("spare node 2: the run ended before it was needed"),
                "{e2}"
            );
        }
        survivors::assert_none_left(d.path(), "the world's ranks", 8, Duration::from_secs(30));
    }
}

/// The final loss of examples/train.py, as its main process prints it.
fn final_loss(out: &str) -> String {
    out.lines()
        .find_map(|x| x.strip_prefix("final_loss=").map(str::to_string))
        .unwrap_or_else(|| panic!("no final_loss in:\n{out}"))
}

/// Training on two nodes, node 1's launcher SIGKILLed once a checkpoint is saved: the spare takes
/// node rank 1, examples/train.py resumes from the checkpoint and ends with the final loss of a run
/// never interrupted (4 ranks on one node).
#[test]
fn training_resumes_on_the_spare_with_the_same_final_loss() {
    let train = repo().join("examples/train.py").display().to_string();
    let d = tempfile::tempdir().unwrap();
    let plain = launcher(d.path())
        .args(["--cpu", "--num_processes", "4"])
        .arg(&train)
        .args(["--epochs", "6"])
        .output_within(WAIT);
    let want = final_loss(&String::from_utf8_lossy(&plain.stdout));
    let ckpt = d.path().join("ckpt");
    let ckpt_s = ckpt.display().to_string();
    let script = [
        train.as_str(),
        "--epochs",
        "6",
        "--checkpoint_dir",
        &ckpt_s,
        "--checkpoint_every",
        "4",
    ];
    let port = free_port().to_string();
    let restarts = ["--max_restarts", "1"];
    let n0 = Watched::spawn(node_command(d.path(), &port, 0, &restarts, &script));
    let n1 = Watched::spawn(node_command(d.path(), &port, 1, &restarts, &script));
    let spare = Watched::spawn(node_command(d.path(), &port, 2, &restarts, &script));
    let t = Instant::now();
    while !ckpt.join("latest").is_dir() {
        assert!(
            t.elapsed() < Duration::from_secs(180),
            "no checkpoint:\n{}",
            n0.text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    kill9(n1.child.id());
    n1.finish();
    let (c2, e2, _) = spare.finish();
    let (c0, e0, out0) = n0.finish();
    assert_eq!((c0, c2), (0, 0), "node 0: {e0}\nspare: {e2}");
    assert!(e2.contains("takes the place of lost node 1"), "{e2}");
    assert!(out0.contains("resumed from "), "{out0}");
    assert_eq!(final_loss(&out0), want, "node 0: {out0}\n{e0}");
}
