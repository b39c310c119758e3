//! `accel-test --probe` on real gloo ranks: one accel-test per node, each node a network namespace on
//! a switched veth network (tests/util/fabric.rs), links throttled with `tc tbf`, a rank slowed by a
//! busy process pinned to its core with `taskset`.
//!
//! The machine may be shared and busy (2 cores here, other builds beside, every session its own
//! autogroup): the nodes run in a cgroup of a large CPU weight (tests/util/fabric.rs, CpuGroup), so
//! that what is measured is the links and the ranks, not the neighbours, and a busy process pinned
//! beside a rank takes half of its core as it would on a node of its own; the links that are not
//! under test are held at 2 Gbit/s (also `tc tbf`), a rate the cores sustain, so that their spread
//! is the network's, not the scheduler's.
//!
//! The bar is 10 of 10: the throttled node named in every one of ten runs, and nothing named
//! in every one of ten runs without a throttle. So each case runs [`RUNS`] times in one test (a fresh
//! world each time, on the same fabric; ACCEL_PROBE_RUNS=N for another count) and every run must
//! pass; a probe of four nodes takes a few seconds, the ten runs well under the test's bound.
#![allow(clippy::unwrap_used)]

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::fabric::{CpuGroup, Fabric};
use crate::util::proc::{busy_on, kill_tree, Deadline, Reaper};
use crate::util::{bin, free_port, skip, ChildExt as _, CommandExt as _, WAIT};
/// The rate of the links not under test, and of a throttled one, in Mbit/s.
const BASE: u32 = 2000;
const THROTTLED: u32 = 200;

/// How many times each case runs by default.
const RUNS: usize = 10;

fn runs() -> usize {
    std::env::var("ACCEL_PROBE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(RUNS)
        .max(1)
}

/// A fabric of `n` nodes, or None (and a SKIP line) where namespaces cannot be made; in CI that is
/// a broken machine.
fn fabric(n: usize, test: &str) -> Option<Fabric> {
    let f = Fabric::create(n);
    if f.is_none() {
        skip(
            test,
            "network namespaces (`ip netns add`, veth, bridge) are unavailable here (needs root and iproute2)",
            "the probe across nodes",
        );
    }
    f
}

/// The cgroup the nodes run in (a note where none can be made: the measurement is then exposed to
/// whatever else runs here).
fn cpu_group() -> Option<CpuGroup> {
    let g = CpuGroup::create("probe");
    if g.is_none() {
        eprintln!("note: no cgroup of its own (cgroup v1 cpu or v2 cpu.weight): measuring beside the machine's other work");
    }
    g
}

/// accel-test on node `i` of `f` (host name `pnodeI`), in `group`, behind `wrap` (e.g. taskset),
/// with the isolated environment of tests/accel_test.rs and gloo on the node's eth0.
fn node(
    f: &Fabric,
    group: Option<&CpuGroup>,
    i: usize,
    port: u16,
    per_node: usize,
    wrap: &[&str],
    args: &[&str],
) -> Command {
    // The group first: inside the namespace the cgroup file system may not be there.
    let mut argv: Vec<OsString> = group
        .map(CpuGroup::wrap)
        .unwrap_or_default()
        .into_iter()
        .chain(f.argv(i, &format!("pnode{i}")))
        .map(OsString::from)
        .collect();
    argv.extend(wrap.iter().map(OsString::from));
    argv.push(bin("accel-test").into());
    let n = f.names.len();
    let mut c = crate::util::isolated(&argv[0]);
    crate::accel_test::isolated(&mut c);
    c.args(&argv[1..])
        .args([
            "--cpu",
            "--num_processes",
            &(n * per_node).to_string(),
            "--num_machines",
            &n.to_string(),
            "--machine_rank",
            &i.to_string(),
            "--main_process_ip",
            &f.ips[0],
            "--main_process_port",
            &port.to_string(),
        ])
        .args(args)
        .env("GLOO_SOCKET_IFNAME", "eth0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

struct NodeOut {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl NodeOut {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {}", self.text()))
    }
    fn text(&self) -> String {
        format!("{}\n--- stderr ---\n{}", self.stdout, self.stderr)
    }
}

/// Every node's accel-test at once; each node's `wrap` (a prefix of its command line).
fn run_world(
    f: &Fabric,
    group: Option<&CpuGroup>,
    per_node: usize,
    wrap: impl Fn(usize) -> Vec<&'static str>,
    args: &[&str],
) -> Vec<NodeOut> {
    let port = free_port();
    let children: Vec<Child> = (0..f.names.len())
        .map(|i| node(f, group, i, port, per_node, &wrap(i), args).start())
        .collect();
    children
        .into_iter()
        .map(|c| {
            let o = c.output_within(WAIT);
            NodeOut {
                code: o.status.code(),
                stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
            }
        })
        .collect()
}

fn stragglers(doc: &serde_json::Value) -> Vec<(String, i64, Option<i64>)> {
    doc["probe"]["stragglers"]
        .as_array()
        .unwrap_or_else(|| panic!("no probe.stragglers in {doc}"))
        .iter()
        .map(|s| {
            (
                s["kind"].as_str().unwrap().to_string(),
                s["node"].as_i64().unwrap(),
                s["rank"].as_i64(),
            )
        })
        .collect()
}

/// Every node reports the same verdict and stragglers (each computed on its own from the same data).
fn same_everywhere(outs: &[NodeOut]) -> serde_json::Value {
    let docs: Vec<serde_json::Value> = outs.iter().map(NodeOut::json).collect();
    for (i, d) in docs.iter().enumerate() {
        assert_eq!(
            d["verdict"],
            docs[0]["verdict"],
            "node {i}: {}",
            outs[i].text()
        );
        assert_eq!(
            d["probe"]["stragglers"], docs[0]["probe"]["stragglers"],
            "node {i}"
        );
        assert_eq!(outs[i].code, outs[0].code, "node {i}: {}", outs[i].text());
    }
    docs.into_iter().next().unwrap()
}

fn links_of(doc: &serde_json::Value, node: i64) -> Vec<(i64, i64, f64)> {
    doc["probe"]["links"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["within_node"] == false)
        .filter(|l| l["from_node"] == node || l["to_node"] == node)
        .map(|l| {
            (
                l["from_node"].as_i64().unwrap(),
                l["to_node"].as_i64().unwrap(),
                l["gbps"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// Four nodes, node 2's link at 200 Mbit/s and the others at 2 Gbit/s: in every one of [`RUNS`]
/// runs node 2 alone is named, every one of its links, each way, is measured within ±15% of
/// 200 Mbit/s, and every node exits 6.
#[test]
fn a_throttled_node_is_named_and_measured_at_its_tc_rate() {
    let Some(f) = fabric(4, "a_throttled_node_is_named_and_measured_at_its_tc_rate") else {
        return;
    };
    for i in 0..4 {
        f.limit(i, if i == 2 { THROTTLED } else { BASE }).unwrap();
    }
    let limit = f64::from(THROTTLED) / 1000.0;
    let group = cpu_group();
    for run in 0..runs() {
        let t = Instant::now();
        let outs = run_world(
            &f,
            group.as_ref(),
            1,
            |_| vec![],
            &[
                "--check",
                "barrier",
                "--probe=links",
                "--json",
                "--timeout",
                "30",
            ],
        );
        let doc = same_everywhere(&outs);
        assert_eq!(outs[0].code, Some(6), "run {run}: {}", outs[0].text());
        assert_eq!(doc["verdict"], "STRAGGLER");
        assert_eq!(
            stragglers(&doc),
            vec![("node".to_string(), 2, None)],
            "run {run}: {}",
            outs[0].text()
        );
        let s = &doc["probe"]["stragglers"][0];
        let text = s["text"].as_str().unwrap();
        assert!(
            text.starts_with("node n2 (pnode2): link to every other node 0."),
            "{text}"
        );
        let mut rates = links_of(&doc, 2);
        assert_eq!(rates.len(), 6, "{rates:?}");
        rates.push((2, -1, s["value"].as_f64().unwrap()));
        for (a, b, g) in &rates {
            assert!(
                (g - limit).abs() <= 0.15 * limit,
                "run {run}: n{a} → n{b} measured {g:.3} Gbit/s, the tc limit is {limit} Gbit/s: {}",
                outs[0].text()
            );
        }
        // The other links are at 2 Gbit/s: far above.
        let others: Vec<f64> = links_of(&doc, 0)
            .into_iter()
            .filter(|l| l.0 != 2 && l.1 != 2)
            .map(|l| l.2)
            .collect();
        assert!(others.iter().all(|g| *g > 4.0 * limit), "{others:?}");
        eprintln!(
            "run {run}: n2 at {:.3} Gbit/s (limit {limit}), others {others:.2?}, probe {:.1} s, wall {:.1} s",
            s["value"].as_f64().unwrap(),
            doc["probe"]["seconds"].as_f64().unwrap(),
            t.elapsed().as_secs_f64()
        );
    }
}

/// The same four nodes with every link at 2 Gbit/s: in every one of [`RUNS`] runs nothing is named,
/// and every node exits 0.
#[test]
fn no_node_is_named_when_no_link_is_throttled() {
    let Some(f) = fabric(4, "no_node_is_named_when_no_link_is_throttled") else {
        return;
    };
    for i in 0..4 {
        f.limit(i, BASE).unwrap();
    }
    let group = cpu_group();
    for run in 0..runs() {
        let outs = run_world(
            &f,
            group.as_ref(),
            1,
            |_| vec![],
            &[
                "--check",
                "barrier",
                "--probe=links",
                "--json",
                "--timeout",
                "30",
            ],
        );
        let doc = same_everywhere(&outs);
        assert_eq!(outs[0].code, Some(0), "run {run}: {}", outs[0].text());
        assert_eq!(doc["verdict"], "PASS");
        assert_eq!(stragglers(&doc), vec![], "run {run}: {}", outs[0].text());
        let links = doc["probe"]["links"].as_array().unwrap();
        assert_eq!(links.len(), 12, "{doc}");
        assert_eq!(doc["probe"]["node_rounds"], 3);
        assert_eq!(doc["probe"]["latency"].as_array().unwrap().len(), 6);
        let rates: Vec<f64> = links.iter().map(|l| l["gbps"].as_f64().unwrap()).collect();
        eprintln!(
            "run {run}: links {rates:.2?} Gbit/s, probe {:.1} s",
            doc["probe"]["seconds"].as_f64().unwrap()
        );
    }
}

/// Three nodes of one rank (one thread each), the rank of node 1 pinned to CPU 1 and the others to
/// CPU 0 (`taskset`): with a busy process sharing CPU 1 the rank of node 1 is named as the compute
/// straggler (exit 6); without it nothing is named; [`RUNS`] times each.
#[test]
fn a_rank_sharing_its_core_with_a_busy_process_is_a_compute_straggler() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        skip(
            "a_rank_sharing_its_core_with_a_busy_process_is_a_compute_straggler",
            "one CPU: a rank cannot be slowed apart from the others here",
            "the compute straggler",
        );
        return;
    }
    let Some(f) = fabric(
        3,
        "a_rank_sharing_its_core_with_a_busy_process_is_a_compute_straggler",
    ) else {
        return;
    };
    let args = [
        "--check",
        "barrier",
        "--probe=compute",
        "--json",
        "--timeout",
        "30",
    ];
    let pinned = |i: usize| {
        // The others on CPU 0: an unpinned rank could start its turn on CPU 1 too.
        let cpu = if i == 1 { "1" } else { "0" };
        vec!["taskset", "-c", cpu, "env", "OMP_NUM_THREADS=1"]
    };
    let group = cpu_group();
    for run in 0..runs() {
        let (mut busy, _reaper) =
            busy_on(&group.as_ref().map(CpuGroup::wrap).unwrap_or_default(), "1");
        let outs = run_world(&f, group.as_ref(), 1, pinned, &args);
        kill_tree(busy.id() as i32);
        let _ = busy.wait();
        let doc = same_everywhere(&outs);
        assert_eq!(outs[0].code, Some(6), "run {run}: {}", outs[0].text());
        assert_eq!(
            stragglers(&doc),
            vec![("compute".to_string(), 1, Some(1))],
            "run {run}: {}",
            outs[0].text()
        );
        let text = doc["probe"]["stragglers"][0]["text"].as_str().unwrap();
        assert!(
            text.starts_with("rank 1 on n1 (pnode1): compute 0."),
            "{text}"
        );
        eprintln!("run {run}, slowed: {text}");

        let outs = run_world(&f, group.as_ref(), 1, pinned, &args);
        let doc = same_everywhere(&outs);
        assert_eq!(outs[0].code, Some(0), "run {run}: {}", outs[0].text());
        assert_eq!(stragglers(&doc), vec![], "run {run}: {}", outs[0].text());
        let flops: Vec<f64> = doc["probe"]["compute"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["gflops"].as_f64().unwrap())
            .collect();
        assert_eq!(flops.len(), 3);
        eprintln!("run {run}, none slowed: {flops:.1?} GFLOP/s");
    }
}

/// Three nodes of two ranks, every part of the probe, the human report: the matrix, the slowest
/// links, the links within nodes, the compute table, the straggler and the verdict line. Node 1's
/// link is at 100 Mbit/s; at --probe_threshold 90 only what is ten times slower is named.
#[test]
fn two_ranks_per_node_the_report_names_the_slow_node() {
    let Some(f) = fabric(3, "two_ranks_per_node_the_report_names_the_slow_node") else {
        return;
    };
    for i in 0..3 {
        f.limit(i, if i == 1 { 100 } else { BASE }).unwrap();
    }
    let group = cpu_group();
    let outs = run_world(
        &f,
        group.as_ref(),
        2,
        |_| vec![],
        &[
            "--check",
            "barrier",
            "--probe",
            "--probe_threshold",
            "90",
            "--timeout",
            "30",
        ],
    );
    for (i, o) in outs.iter().enumerate() {
        let t = o.text();
        assert_eq!(o.code, Some(6), "node {i}: {t}");
        for want in [
            "PASS  probe.links",
            "PASS  probe.compute",
            "PASS  probe.report",
            "probe: 3 node(s): n0 = pnode0, n1 = pnode1, n2 = pnode2",
            "probe: bandwidth between nodes, Gbit/s, row sends to column (first ranks of the nodes, 3 round(s) of pairs)",
            "probe: latency between nodes, µs one way",
            "probe: links within nodes, Gbit/s (every pair of local ranks, 1 round(s), every node at once; shown, not judged",
            // A CPU trial repeats the product for 0.1 s: " ×6" on an AVX-512 core.
            "probe: compute, GFLOP/s (float32 1024×1024 matmul",
            " on cpu, best of 5, ranks one at a time), by local rank",
            "probe: STRAGGLER node n1 (pnode1): link to every other node 0.0",
            "probe: 6 rank(s) on 3 node(s) in ",
            "(threshold 90%)",
            "verdict: STRAGGLER  node n1 (pnode1): link to every other node",
        ] {
            assert!(t.contains(want), "node {i}: `{want}` missing:\n{t}");
        }
        assert_eq!(t.matches("probe: STRAGGLER").count(), 1, "node {i}: {t}");
        // Rows n0 and n2 end with their slowest link, one to or from n1.
        for row in ["n0 ", "n2 "] {
            let line = t
                .lines()
                .find(|l| l.starts_with(row) && l.contains('→'))
                .unwrap_or_else(|| panic!("no row {row}: {t}"));
            let slowest: Vec<&str> = line.split_whitespace().rev().take(4).collect();
            assert!(
                slowest.contains(&"n1") && slowest[0].starts_with("0.0"),
                "{line}"
            );
        }
        for n in 0..3 {
            assert!(
                t.lines()
                    .any(|l| l.starts_with(&format!("n{n}: 2 link(s), "))),
                "node {i}: no line for the links within n{n}: {t}"
            );
        }
    }
}

/// One machine, two ranks: the probe runs without namespaces, and the JSON has every part.
#[test]
fn on_one_machine_the_probe_json_has_every_part() {
    let o = crate::util::tool("accel-test")
        .args([
            "--cpu",
            "--num_processes",
            "2",
            "--check",
            "barrier",
            "--probe",
            "--probe_threshold",
            "90",
            "--json",
            "--timeout",
            "30",
        ])
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", crate::util::venv_bin().display()),
        )
        .env("HOME", "/nonexistent-accel-test-home")
        .env("HF_HOME", "/nonexistent-accel-test-home")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .start()
        .output_within(WAIT);
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0), "{text}");
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["verdict"], "PASS");
    let p = &doc["probe"];
    assert_eq!(p["threshold"], 0.9);
    assert_eq!(p["nodes"].as_array().unwrap().len(), 1);
    assert_eq!(p["compute"].as_array().unwrap().len(), 2);
    assert_eq!(p["links"].as_array().unwrap().len(), 2, "{p}");
    assert!(p["links"]
        .as_array()
        .unwrap()
        .iter()
        .all(|l| l["within_node"] == true && l["gbps"].as_f64().unwrap() > 0.0));
    assert_eq!(p["latency"].as_array().unwrap().len(), 1);
    assert_eq!(p["slowest"].as_array().unwrap().len(), 1);
    assert!(p["seconds"].as_f64().unwrap() > 0.0);
    let names: Vec<&str> = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for c in ["probe.links", "probe.compute", "probe.report"] {
        assert!(names.contains(&c), "{names:?}");
    }
}

/// A node whose accel-test is SIGKILLed once the probe has started: the others fail probe.links
/// (exit 1) within --timeout and the report margin, not after the probe's own length.
#[test]
fn a_node_lost_in_the_probe_fails_it_within_the_timeout() {
    let Some(f) = fabric(3, "a_node_lost_in_the_probe_fails_it_within_the_timeout") else {
        return;
    };
    for i in 0..3 {
        f.limit(i, if i == 2 { 20 } else { BASE }).unwrap();
    }
    let port = free_port();
    let args = ["--check", "barrier", "--probe=links", "--timeout", "10"];
    let others: Vec<Child> = (0..2)
        .map(|i| node(&f, None, i, port, 1, &[], &args).start())
        .collect();
    let mut victim = node(&f, None, 2, port, 1, &[], &args).start();
    let _reaper = Reaper(victim.id() as i32);
    let lines = BufReader::new(victim.stdout.take().unwrap());
    let started = {
        let _deadline = Deadline::new(victim.id(), WAIT);
        let mut seen = String::new();
        let mut ok = false;
        for l in lines.lines().map_while(Result::ok) {
            seen += &l;
            seen.push('\n');
            if l.starts_with("PASS  barrier") {
                ok = true;
                break;
            }
        }
        assert!(ok, "node 2 never passed its checks: {seen}");
        Instant::now()
    };
    // The probe starts right after the checks; its links to n2 take seconds at 20 Mbit/s.
    std::thread::sleep(Duration::from_millis(300));
    kill_tree(victim.id() as i32);
    let _ = victim.wait();
    for (i, c) in others.into_iter().enumerate() {
        let o = c.output_within(WAIT);
        let t = format!(
            "{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(o.status.code(), Some(1), "node {i}: {t}");
        assert!(t.contains("FAIL  probe.links"), "node {i}: {t}");
        assert!(t.contains("verdict: FAIL"), "node {i}: {t}");
        let took = started.elapsed().as_secs_f64();
        // --timeout 10: the wait that notices, then the coordinator's report margin (10 s).
        assert!(took < 10.0 + 10.0 + 10.0, "node {i} took {took:.1} s: {t}");
    }
}
