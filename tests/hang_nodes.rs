//! accel-launch --hang_timeout on many nodes: two launchers × 2 gloo ranks (a 4-rank world) on
//! loopback, with the injected hangs of tests/fixtures/launch/hang_cases.py. Node 0 declares the
//! world's hang only once every node's ranks are still, prints one verdict naming the rank of the
//! other node and its line, every node prints it and exits 124, and nothing of the run survives; a
//! rank of node 1 computing while the others wait is not a hang; a node that never answers is named.

// Test helpers may panic, and the tests pass their own environment to the binaries.
#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

use crate::hang::{at, hang_cases};
use crate::util::launcher::{launcher, node_flags};
use crate::util::{free_port, survivors, venv_path};
#[allow(unused_imports)]
use crate::util::{ChildExt as _, CommandExt as _, WAIT};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

const TIMEOUT: u64 = 10;
const GRACE: u64 = 3;
const VERDICT: &str = "accel-launch: hang:";

fn base(dir: &Path, port: &str, node: u32, rdzv: &str, extra: &[&str]) -> Command {
    let mut c = launcher(dir);
    c.env("PATH", venv_path())
        // The watch's reasons (`accel::launch::hang=debug`), when a developer asks for them.
        .env("ACCEL_LOG", std::env::var("ACCEL_LOG").unwrap_or_default());
    node_flags(&mut c, 2, node, "127.0.0.1", port);
    // Nodes that say their own counts (--nproc_per_node) form the world at the join: a total of 4
    // would contradict 1 + 8.
    if !extra.contains(&"--nproc_per_node") {
        c.args(["--num_processes", "4"]);
    }
    c.args(["--grace_period", &GRACE.to_string(), "--rdzv_timeout", rdzv])
        .args(extra);
    c
}

/// One node's launcher with its stderr read line by line: the lines come over `lines` as they are
/// written, with when.
struct Node {
    child: Child,
    lines: mpsc::Receiver<(SystemTime, String)>,
    all: Arc<Mutex<String>>,
}

impl Node {
    fn start(dir: &Path, logs: &Path, port: &str, node: u32, mode: &str, suspect: u32) -> Node {
        let timeout = TIMEOUT.to_string();
        Node::with(
            dir,
            logs,
            port,
            node,
            mode,
            suspect,
            &["--hang_timeout", &timeout],
        )
    }

    fn with(
        dir: &Path,
        logs: &Path,
        port: &str,
        node: u32,
        mode: &str,
        suspect: u32,
        extra: &[&str],
    ) -> Node {
        let mut child = base(dir, port, node, "120", extra)
            .args(["--log_dir", logs.to_str().unwrap()])
            .arg(hang_cases())
            .arg(dir)
            .arg(mode)
            .arg(suspect.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .start();
        let (tx, rx) = mpsc::channel();
        let all: Arc<Mutex<String>> = Arc::default();
        let a = Arc::clone(&all);
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                {
                    let mut a = a.lock().unwrap();
                    a.push_str(&line);
                    a.push('\n');
                }
                let _ = tx.send((SystemTime::now(), line));
            }
        });
        Node {
            child,
            lines: rx,
            all,
        }
    }

    /// Waits at most `limit` for the exit; the code and every line of stderr.
    fn finish(mut self, limit: Duration) -> (i32, String) {
        let t = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if t.elapsed() > limit {
                let _ = self.child.kill();
                break self.child.wait_within(WAIT);
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        // The reader ends at EOF, just after the exit.
        let until = Instant::now() + Duration::from_secs(5);
        while self.lines.recv_timeout(Duration::from_millis(100)).is_ok() && Instant::now() < until
        {
        }
        (
            status.code().unwrap_or(-1),
            self.all.lock().unwrap().clone(),
        )
    }

    /// When the first line starting with `prefix` came, if it did.
    fn first(&self, prefix: &str, limit: Duration) -> Option<(SystemTime, String)> {
        let until = Instant::now() + limit;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left.max(Duration::from_millis(1))) {
                Ok((t, l)) if l.starts_with(prefix) => return Some((t, l)),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }
}

/// Every pid the run recorded (ranks and their grandchildren, both nodes) is gone.
fn assert_no_survivors(dir: &Path, what: &str) {
    survivors::assert_none_left(dir, what, 8, Duration::from_secs(GRACE + 10));
}

struct Case {
    mode: &'static str,
    suspect: u32,
    /// The verdict line both nodes print; `None`: not a hang, both exit 0.
    verdict: Option<String>,
}

/// (a) rank 3 on node 1 never joins an all_reduce; (b) rank 0 (node 0) and rank 3 (node 1) call
/// collectives in a different order; (c) rank 3 on node 1 computes for 25 s while the others wait
/// in a barrier, which is not a hang; (d) rank 3's steps wait in one call, its step counter moving,
/// which is not a hang either. In parallel, each its own pair of launchers.
#[test]
fn the_world_is_judged_on_node_0_and_every_node_stops() {
    let cases = vec![
        Case {
            mode: "skip_allreduce",
            suspect: 3,
            verdict: Some(format!(
                "{VERDICT} rank 3 (node 1) is in stuck_in_data_loading ({}); ranks 0,1,2 (nodes 0,1) wait in all_reduce ({})",
                at("sleep"),
                at("allreduce.skip_allreduce")
            )),
        },
        Case {
            mode: "order",
            suspect: 3,
            verdict: Some(format!(
                "{VERDICT} collectives do not match: rank 0 (node 0) waits in recv ({}); ranks 1,2,3 (nodes 0,1) wait in all_reduce ({})",
                at("recv"),
                at("allreduce.order")
            )),
        },
        Case {
            mode: "compute",
            suspect: 3,
            verdict: None,
        },
        // Rank 3 spends 95% of each 1 s step in one C call for 40 s: only its step counter moves.
        Case {
            mode: "sync_point",
            suspect: 3,
            verdict: None,
        },
    ];
    judge_all(cases);
}

/// Hangs as GPUs hang, across two nodes: rank 3 spins with one stack, in Python while the others
/// wait in all_reduce, or in one C call while the others sleep; every rank spins, at one of two
/// lines; rank 3's main thread joins a spinning thread.
#[test]
fn spinning_hangs_across_nodes_are_declared_and_named() {
    judge_all(vec![
        Case {
            mode: "spin_allreduce",
            suspect: 3,
            verdict: Some(format!(
                "{VERDICT} rank 3 (node 1) is in busy_poll ({}); ranks 0,1,2 (nodes 0,1) wait in all_reduce ({})",
                at("busy_poll"),
                at("allreduce.spin_allreduce")
            )),
        },
        Case {
            mode: "spin_regex",
            suspect: 3,
            verdict: Some(format!(
                "{VERDICT} ranks 0,1,2 (nodes 0,1) are in stuck_in_data_loading ({}); rank 3 (node 1) is in spin_in_one_call ({})",
                at("sleep"),
                at("regex")
            )),
        },
        Case {
            mode: "spin_everywhere",
            suspect: 3,
            verdict: Some(format!(
                "{VERDICT} ranks 0,2 (nodes 0,1) are in spin_at ({}); ranks 1,3 (nodes 0,1) are in spin_at ({})",
                at("spin_even"),
                at("spin_odd")
            )),
        },
        Case {
            mode: "spin_thread",
            suspect: 3,
            verdict: Some(format!(
                "{VERDICT} rank 3 (node 1) is in waits_on_spinning_thread ({}); ranks 0,1,2 (nodes 0,1) wait in all_reduce ({})",
                at("join"),
                at("allreduce.spin_thread")
            )),
        },
    ]);
}

/// Runs each case with its own pair of launchers, in parallel.
fn judge_all(cases: Vec<Case>) {
    let handles: Vec<_> = cases
        .into_iter()
        .map(|case| {
            std::thread::spawn(move || {
                let tmp = tempfile::tempdir().unwrap();
                let dir = tmp.path().join("run");
                let logs = tmp.path().join("logs");
                std::fs::create_dir_all(&dir).unwrap();
                let port = free_port().to_string();
                let n0 = Node::start(&dir, &logs, &port, 0, case.mode, case.suspect);
                let n1 = Node::start(&dir, &logs, &port, 1, case.mode, case.suspect);
                let what = case.mode;
                let limit = Duration::from_secs(240);
                let verdict0 = case.verdict.as_ref().and_then(|_| n0.first(VERDICT, limit));
                let (c0, e0) = n0.finish(limit);
                let (c1, e1) = n1.finish(Duration::from_secs(30));
                let Some(want) = case.verdict else {
                    assert_eq!((c0, c1), (0, 0), "{what}: node 0: {e0}\nnode 1: {e1}");
                    assert!(
                        !e0.contains("hang:") && !e1.contains("hang:"),
                        "{what}: {e0}\n{e1}"
                    );
                    for r in 0..4 {
                        assert!(dir.join(format!("done.{r}")).exists(), "{what}: rank {r}");
                    }
                    return (what, None);
                };
                assert_eq!((c0, c1), (124, 124), "{what}: node 0: {e0}\nnode 1: {e1}");
                for (n, e) in [(0, &e0), (1, &e1)] {
                    let first = e.lines().find(|l| l.starts_with(VERDICT));
                    assert_eq!(first, Some(want.as_str()), "{what}: node {n}: {e}");
                    // No node declares on its own, and no restart.
                    assert_eq!(e.matches(VERDICT).count(), 1, "{what}: node {n}: {e}");
                    let report =
                        std::fs::read_to_string(logs.join(format!("hang/node_{n}/report.txt")))
                            .unwrap();
                    assert!(report.starts_with(&want), "{what}: node {n}: {report}");
                }
                for (n, r) in [(0, 0), (0, 1), (1, 2), (1, 3)] {
                    assert!(
                        logs.join(format!("hang/node_{n}/rank_{r}.txt")).exists(),
                        "{what}: rank {r}'s full stacks on node {n}"
                    );
                }
                let to_verdict = verdict0
                    .and_then(|(t, _)| t.duration_since(crate::hang::hung_at(&dir).unwrap()).ok())
                    .unwrap();
                assert!(
                    to_verdict <= Duration::from_secs(TIMEOUT + 10),
                    "{what}: verdict {to_verdict:?} after the hang began"
                );
                assert_no_survivors(&dir, what);
                (what, Some(to_verdict))
            })
        })
        .collect();
    let mut failures = Vec::new();
    for h in handles {
        match h.join() {
            Ok((what, v)) => eprintln!("{what}: verdict after {v:?}"),
            Err(p) => failures.push(
                p.downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_else(|| "panic".into()),
            ),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Node 1 runs 8 ranks (node 0 one): rank 8 sleeps, the other 8 wait in all_reduce. Node 1 takes
/// its 8 ranks' stacks at once and answers node 0 within its deadline (no node named silent): the
/// verdict groups all 9 ranks, and every rank's full stacks are written.
#[test]
fn a_node_with_8_ranks_answers_in_time_with_every_stack() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let logs = tmp.path().join("logs");
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port().to_string();
    let timeout = TIMEOUT.to_string();
    let extra = |n: &'static str| ["--hang_timeout", timeout.as_str(), "--nproc_per_node", n];
    let n0 = Node::with(&dir, &logs, &port, 0, "skip_allreduce", 8, &extra("1"));
    let n1 = Node::with(&dir, &logs, &port, 1, "skip_allreduce", 8, &extra("8"));
    let limit = Duration::from_secs(240);
    let (c0, e0) = n0.finish(limit);
    let (c1, e1) = n1.finish(Duration::from_secs(30));
    let want = format!(
        "{VERDICT} rank 8 (node 1) is in stuck_in_data_loading ({}); ranks 0,1,2,3,4,5,6,7 (nodes 0,1) wait in all_reduce ({})",
        at("sleep"),
        at("allreduce.skip_allreduce")
    );
    assert_eq!((c0, c1), (124, 124), "node 0: {e0}\nnode 1: {e1}");
    for e in [&e0, &e1] {
        let first = e.lines().find(|l| l.starts_with(VERDICT));
        assert_eq!(first, Some(want.as_str()), "node 0: {e0}\nnode 1: {e1}");
    }
    assert!(logs.join("hang/node_0/rank_0.txt").exists());
    for r in 1..=8 {
        let f = logs.join(format!("hang/node_1/rank_{r}.txt"));
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(text.contains("hang_cases.py"), "rank {r}: {text}");
    }
    survivors::assert_none_left(&dir, "8 ranks", 18, Duration::from_secs(GRACE + 10));
}

/// Node 1's launcher is SIGSTOPped once it has told node 0 that its ranks are still: node 0 still
/// gives the world's verdict, naming node 1 as the node that sent no stacks, and exits 124; node 1,
/// resumed, finds node 0 gone and stops its ranks; nothing survives.
#[test]
fn a_node_that_does_not_answer_is_named_in_the_verdict() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let logs = tmp.path().join("logs");
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port().to_string();
    let n0 = Node::start(&dir, &logs, &port, 0, "skip_allreduce", 3);
    let n1 = Node::start(&dir, &logs, &port, 1, "skip_allreduce", 3);
    let limit = Duration::from_secs(240);
    n1.first("accel-launch: no rank of node 1 made progress", limit)
        .unwrap_or_else(|| panic!("node 1 never reported: {}", n1.all.lock().unwrap()));
    // Node 0's ranks must be still too before node 1 goes silent: a node lost while another node's
    // ranks still move is a lost node, not a silent one (ranks start seconds apart under load).
    n0.first("accel-launch: no rank of node 0 made progress", limit)
        .unwrap_or_else(|| panic!("node 0 never reported: {}", n0.all.lock().unwrap()));
    let stopped = n1.child.id().to_string();
    Command::new("kill")
        .args(["-STOP", &stopped])
        .status_within(WAIT);
    let verdict = n0.first(VERDICT, Duration::from_secs(TIMEOUT + 30));
    let (c0, e0) = n0.finish(Duration::from_secs(60));
    Command::new("kill")
        .args(["-CONT", &stopped])
        .status_within(WAIT);
    let (c1, e1) = n1.finish(Duration::from_secs(60));
    let (_, line) = verdict.unwrap_or_else(|| panic!("no verdict on node 0: {e0}"));
    assert_eq!(c0, 124, "node 0: {e0}");
    assert!(
        line.starts_with(&format!(
            "{VERDICT} ranks 0,1 (node 0) wait in all_reduce ({}); ranks 2,3 (node 1): unknown, node 1 (",
            at("allreduce.skip_allreduce")
        )),
        "{line}"
    );
    assert!(
        line.contains("was lost before it sent its stacks") || line.contains("is silent"),
        "{line}"
    );
    // Node 1, resumed, finds node 0 gone (or its rank 2 failed when node 0's ranks went): it stops
    // what is left and exits with that.
    assert!(c1 > 0, "node 1: {c1}: {e1}");
    assert_no_survivors(&dir, "silent node");
}

/// --stacks_on_failure on many nodes: rank 3 of node 1 exits 3 while the others wait in an
/// all_reduce; each node prints and writes its own surviving ranks' stacks before stopping them.
#[test]
fn stacks_on_failure_each_node_dumps_its_own_survivors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let logs = tmp.path().join("logs");
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port().to_string();
    let flag = ["--stacks_on_failure"];
    let n0 = Node::with(&dir, &logs, &port, 0, "fail", 3, &flag);
    let n1 = Node::with(&dir, &logs, &port, 1, "fail", 3, &flag);
    let limit = Duration::from_secs(240);
    let (c0, e0) = n0.finish(limit);
    let (c1, e1) = n1.finish(Duration::from_secs(30));
    assert_eq!((c0, c1), (3, 3), "node 0: {e0}\nnode 1: {e1}");
    let waits = format!("wait in all_reduce ({})", at("allreduce.fail"));
    let line0 = e0
        .lines()
        .find(|l| l.contains("; node 0's ranks: "))
        .unwrap_or_else(|| panic!("node 0: {e0}"));
    assert!(
        line0.starts_with("accel-launch: rank 3 (local rank 1) on node 1 (")
            && line0.contains("exited with status 3; node 0's ranks: ranks 0,1 (node 0) ")
            && line0.ends_with(&waits),
        "{line0}"
    );
    assert!(
        e1.contains("accel-launch: rank 3 failed; the others: rank 2 (node 1) "),
        "node 1: {e1}"
    );
    for (n, r) in [(0, 0), (0, 1), (1, 2)] {
        assert!(
            logs.join(format!("failure/node_{n}/rank_{r}.txt")).exists(),
            "rank {r}'s stacks on node {n}"
        );
    }
    assert_no_survivors(&dir, "stacks on failure");
}

/// Nodes that disagree on --hang_timeout are refused at the join, saying so.
#[test]
fn a_mismatched_hang_timeout_is_refused_at_the_join() {
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let run = |node: u32, timeout: &str| {
        base(tmp.path(), &port, node, "5", &["--hang_timeout", timeout])
            .args(["--no_python", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .start()
    };
    let n0 = run(0, "10");
    let n1 = run(1, "20");
    let o1 = n1.output_within(WAIT);
    let o0 = n0.output_within(WAIT);
    let e0 = String::from_utf8_lossy(&o0.stderr);
    let e1 = String::from_utf8_lossy(&o1.stderr);
    assert_eq!(
        (o0.status.code(), o1.status.code()),
        (Some(125), Some(125)),
        "node 0: {e0}\nnode 1: {e1}"
    );
    // Whichever joined second is refused: the first one's timeout is the world's.
    let refused = [
        "refused node 1: it has --hang_timeout 20 but the other nodes have --hang_timeout 10",
        "refused node 0: it has --hang_timeout 10 but the other nodes have --hang_timeout 20",
    ];
    assert!(
        refused.iter().any(|r| e0.contains(r) || e1.contains(r)),
        "node 0: {e0}\nnode 1: {e1}"
    );
}
