//! accel-launch --straggler_threshold with real gloo ranks (tests/fixtures/launch/straggler.py):
//! a rank doing twice the compute of the others is named within the window + 30 s, and nobody else;
//! a clean run and a run whose rank 0 logs a burst every 100 steps name nobody; a run of one rank,
//! or of ranks that never meet in a collective, says once that the detection does not apply; a rank
//! held to a CPU quota by its cgroup is named; on two nodes, a node whose ranks share their core with
//! busy processes is named as a node. The window is 10 s (5 s where nothing is to be named) to keep
//! each test's wall time small. They compare speeds: .config/nextest.toml runs them alone, and
//! each launcher runs in a cgroup weighted far above the rest of the machine (a clean run once named
//! a rank slowed by other work on a loaded machine).

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use crate::util::cgroup::Cgroup;
use crate::util::fabric::CpuGroup;
use crate::util::launcher::{launch_env, launcher, node_flags};
use crate::util::proc::busy_on;
use crate::util::{bin, fixture, skip, venv_bin, ChildExt as _, CommandExt as _, WAIT};

/// What one launcher said on stderr (each line with the seconds since it started), and its report.
struct Ran {
    code: i32,
    lines: Vec<(f64, String)>,
    report: serde_json::Value,
}

impl Ran {
    fn stragglers(&self) -> Vec<&(f64, String)> {
        self.lines
            .iter()
            .filter(|l| l.1.starts_with("accel-launch: straggler"))
            .collect()
    }
    fn all(&self) -> String {
        let l: Vec<&str> = self.lines.iter().map(|l| l.1.as_str()).collect();
        l.join("\n")
    }
}

/// accel-launch with py-spy on PATH, `flags` then the fixture's `mode` for `secs` seconds, in a
/// cgroup of its own ([`cpu_group`]).
fn launch(home: &Path, flags: &[&str], mode: &str, secs: u32) -> Ran {
    let report = home.join(format!("report.{}.json", std::process::id()));
    let weight = cpu_group();
    let mut c = weighted(
        home,
        &weight.as_ref().map(CpuGroup::wrap).unwrap_or_default(),
    );
    spawn_run(&mut c, home, &report, flags, mode, secs)
}

/// accel-launch behind `prefix` (a cgroup's [`CpuGroup::wrap`], taskset), or alone where it is empty.
fn weighted(home: &Path, prefix: &[String]) -> std::process::Command {
    let Some((program, rest)) = prefix.split_first() else {
        return launcher(home);
    };
    let mut c = launch_env(program, home);
    c.args(rest).arg(bin("accel-launch"));
    c
}

fn spawn_run(
    c: &mut std::process::Command,
    home: &Path,
    report: &Path,
    flags: &[&str],
    mode: &str,
    secs: u32,
) -> Ran {
    let path = format!(
        "{}:{}",
        venv_bin().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let t0 = Instant::now();
    let mut child = c
        .current_dir(home)
        .env("PATH", path)
        .arg("--report_json")
        .arg(report)
        .args(flags)
        .arg(fixture("launch/straggler.py"))
        .args([mode, &secs.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let lines: Vec<(f64, String)> = BufReader::new(err)
        .lines()
        .map_while(Result::ok)
        .map(|l| (t0.elapsed().as_secs_f64(), l))
        .collect();
    let code = child.wait_within(WAIT).code().unwrap_or(-1);
    let text = std::fs::read_to_string(report).unwrap_or_default();
    Ran {
        code,
        lines,
        report: serde_json::from_str(&text).unwrap_or_default(),
    }
}

const ON: [&str; 4] = ["--straggler_threshold", "20", "--straggler_window", "10"];

#[test]
fn a_rank_doing_twice_the_compute_is_named_within_the_window_and_30s_and_nobody_else() {
    let d = crate::util::tempdir();
    let mut flags = vec!["--cpu", "--num_processes", "4"];
    flags.extend(ON);
    let r = launch(d.path(), &flags, "slow", 50);
    assert_eq!(r.code, 0, "{}", r.all());
    let named = r.stragglers();
    assert_eq!(named.len(), 1, "{}", r.all());
    let (at, line) = named[0];
    assert!(
        line.starts_with("accel-launch: straggler: rank 3 (node 0, host ")
            && line.contains("× slower per step; where it was: straggler.py:"),
        "{line}"
    );
    // The ranks' start (about 5 s here), the window they start in, and the window that names it.
    assert!(*at <= 10.0 + 30.0, "named after {at:.1}s: {line}");
    let s = &r.report["stragglers"];
    assert_eq!(s.as_array().map(Vec::len), Some(1), "{}", r.report);
    assert_eq!(s[0]["rank"], 3);
    assert!(s[0]["slower"].as_f64().unwrap() > 1.2, "{}", r.report);
}

#[test]
fn a_clean_run_and_rank_0_logging_every_100_steps_name_nobody() {
    let d = crate::util::tempdir();
    let mut flags = vec!["--cpu", "--num_processes", "4"];
    flags.extend(ON);
    for mode in ["clean", "log0"] {
        let r = launch(d.path(), &flags, mode, 40);
        assert_eq!(r.code, 0, "{mode}: {}", r.all());
        assert!(r.stragglers().is_empty(), "{mode}: {}", r.all());
        assert_eq!(r.report["stragglers"], serde_json::json!([]), "{mode}");
    }
}

#[test]
fn one_rank_or_ranks_without_collectives_say_it_does_not_apply_once() {
    let d = crate::util::tempdir();
    let window = ["--straggler_threshold", "20", "--straggler_window", "5"];
    for (n, mode, why) in [
        ("1", "clean", "one rank, nothing to compare"),
        (
            "2",
            "alone",
            "no rank's samples wait in a torch.distributed collective",
        ),
    ] {
        let mut flags = vec!["--cpu", "--num_processes", n];
        flags.extend(window);
        let r = launch(d.path(), &flags, mode, 25);
        assert_eq!(r.code, 0, "{mode}: {}", r.all());
        let said: Vec<&str> = r.stragglers().iter().map(|l| l.1.as_str()).collect();
        assert_eq!(
            said,
            [format!(
                "accel-launch: straggler detection does not apply: {why}"
            )],
            "{}",
            r.all()
        );
    }
}

#[test]
fn two_nodes_rank_3_slowed_is_named_by_node_0_alone_and_nobody_else() {
    let d = crate::util::tempdir();
    let port = crate::util::free_port().to_string();
    let weight = cpu_group();
    let prefix = weight.as_ref().map(CpuGroup::wrap).unwrap_or_default();
    let runs: Vec<std::thread::JoinHandle<Ran>> = (0..2u32)
        .map(|n| {
            let (home, port, prefix) = (d.path().to_path_buf(), port.clone(), prefix.clone());
            std::thread::spawn(move || {
                let mut c = weighted(&home, &prefix);
                node_flags(&mut c, 2, n, "127.0.0.1", &port);
                c.args(["--num_processes", "4", "--rdzv_timeout", "60"]);
                let report = home.join(format!("report.{n}.json"));
                spawn_run(&mut c, &home, &report, &ON, "slow", 50)
            })
        })
        .collect();
    let runs: Vec<Ran> = runs.into_iter().map(|h| h.join().unwrap()).collect();
    for r in &runs {
        assert_eq!(r.code, 0, "{}", r.all());
    }
    let named = runs[0].stragglers();
    assert_eq!(named.len(), 1, "{}", runs[0].all());
    let (at, line) = named[0];
    assert!(
        line.starts_with("accel-launch: straggler: rank 3 (node 1, host "),
        "{line}"
    );
    assert!(*at <= 10.0 + 30.0, "named after {at:.1}s: {line}");
    assert!(runs[1].stragglers().is_empty(), "{}", runs[1].all());
    assert_eq!(runs[0].report["stragglers"][0]["rank"], 3);
    assert_eq!(runs[0].report["stragglers"][0]["node"], 1);
    assert_eq!(runs[1].report["stragglers"], serde_json::json!([]));
}

/// Rank 3 of 4 joins a cgroup whose CPU quota is a fifth of one CPU (the fixture writes its pid to
/// the group's `cgroup.procs` before its first step): it is named within the window + 30 s, and
/// nobody else.
#[test]
fn a_rank_held_to_a_cpu_quota_by_its_cgroup_is_named_and_nobody_else() {
    let d = crate::util::tempdir();
    let group = Cgroup::new("cpu").cpu_percent(20);
    let mut flags = vec!["--cpu", "--num_processes", "4"];
    flags.extend(ON);
    let report = d.path().join("report.json");
    // The other ranks in a group that outweighs the rest of the machine (a note where none can be
    // made): its unpinned work would otherwise slow some of them too.
    let weight = cpu_group();
    let mut c = weighted(
        d.path(),
        &weight.as_ref().map(CpuGroup::wrap).unwrap_or_default(),
    );
    c.env("STRAGGLER_CGROUP", group.procs_file());
    let r = spawn_run(&mut c, d.path(), &report, &flags, "clean", 40);
    assert_eq!(r.code, 0, "{}", r.all());
    let named = r.stragglers();
    assert_eq!(named.len(), 1, "{}", r.all());
    let (at, line) = named[0];
    assert!(
        line.starts_with("accel-launch: straggler: rank 3 (node 0, host "),
        "{line}"
    );
    assert!(*at <= 10.0 + 30.0, "named after {at:.1}s: {line}");
    assert_eq!(r.report["stragglers"][0]["rank"], 3, "{}", r.report);
}

/// The cgroup the launchers run in, weighted far above the rest of the machine (a note where none can
/// be made: the speeds are then exposed to whatever else runs here).
fn cpu_group() -> Option<CpuGroup> {
    let g = CpuGroup::create("straggler");
    if g.is_none() {
        eprintln!("note: no cgroup of its own (cgroup v1 cpu or v2 cpu.weight): measuring beside the machine's other work");
    }
    g
}

/// Two launchers on loopback, 2 ranks each: node 0's launcher (and so its ranks) pinned to CPU 0,
/// node 1's to CPU 1 beside two busy processes pinned there, all in a cgroup that outweighs the
/// rest of the machine (whose unpinned work would otherwise move to CPU 0). Both ranks of node 1
/// lag: node 0 names them and the node ("all its ranks (2,3) lag"), nobody else; node 1 says nothing.
#[test]
fn a_node_whose_ranks_share_their_core_with_busy_processes_is_named_as_a_node() {
    let test = "a_node_whose_ranks_share_their_core_with_busy_processes_is_named_as_a_node";
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        skip(
            test,
            "one CPU: a node cannot be slowed apart from the other here",
            "the node straggler",
        );
        return;
    }
    let d = crate::util::tempdir();
    let port = crate::util::free_port().to_string();
    let weight = cpu_group();
    let prefix = weight.as_ref().map(CpuGroup::wrap).unwrap_or_default();
    let _busy: Vec<_> = (0..2).map(|_| busy_on(&prefix, "1")).collect();
    let runs: Vec<std::thread::JoinHandle<Ran>> = (0..2u32)
        .map(|n| {
            let (home, port) = (d.path().to_path_buf(), port.clone());
            let mut argv = prefix.clone();
            argv.extend(["taskset".into(), "-c".into(), n.to_string()]);
            std::thread::spawn(move || {
                let mut c = weighted(&home, &argv);
                node_flags(&mut c, 2, n, "127.0.0.1", &port);
                c.args(["--num_processes", "4", "--rdzv_timeout", "60"]);
                let report = home.join(format!("report.{n}.json"));
                spawn_run(&mut c, &home, &report, &ON, "clean", 40)
            })
        })
        .collect();
    let runs: Vec<Ran> = runs.into_iter().map(|h| h.join().unwrap()).collect();
    for r in &runs {
        assert_eq!(r.code, 0, "{}", r.all());
    }
    let said: Vec<&str> = runs[0].stragglers().iter().map(|l| l.1.as_str()).collect();
    let node = said
        .iter()
        .position(|l| l.starts_with("accel-launch: straggler: node 1 (host "))
        .unwrap_or_else(|| panic!("node 1 not named: {}", runs[0].all()));
    assert!(
        said[node].ends_with("): all its ranks (2,3) lag"),
        "{}",
        said[node]
    );
    let ranks: Vec<&str> = said
        .iter()
        .filter(|l| l.starts_with("accel-launch: straggler: rank "))
        .map(|l| &l["accel-launch: straggler: rank ".len()..][..1])
        .collect();
    assert_eq!(ranks, ["2", "3"], "{}", runs[0].all());
    assert_eq!(said.len(), 3, "{}", runs[0].all());
    assert!(runs[1].stragglers().is_empty(), "{}", runs[1].all());
}

/// Each rank's environment (`env` run as the rank, `--no_python`), by rank.
fn rank_envs(home: &Path, flags: &[&str], extra: &[(&str, &str)]) -> Vec<Vec<(String, String)>> {
    let out = home.join("envs");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let mut c = launcher(home);
    for (k, v) in extra {
        c.env(k, v);
    }
    let o = c
        .current_dir(home)
        .args(["--cpu", "--num_processes", "2", "--no_python"])
        .args(flags)
        .args(["sh", "-c", r#"env > "$0/$RANK""#])
        .arg(&out)
        .output_within(WAIT);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (0..2)
        .map(|r| {
            std::fs::read_to_string(out.join(r.to_string()))
                .unwrap()
                .lines()
                .filter(|l| l.starts_with("TORCH_"))
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// NCCL ranks' Flight Recorder for the straggler watch: only with the watch on do the ranks get the
/// trace buffer, per-collective timing, and the dump file and debug-info pipe in a directory of the
/// run's own (gone once the run ends); a variable the user set (here the buffer's older name and the
/// timing) is left alone.
#[test]
fn the_ranks_get_the_flight_recorder_s_variables_only_with_the_watch_on() {
    let d = crate::util::tempdir();
    let get = |env: &[(String, String)], k: &str| {
        env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    };
    let off = rank_envs(d.path(), &[], &[]);
    for k in [
        "TORCH_FR_BUFFER_SIZE",
        "TORCH_NCCL_ENABLE_TIMING",
        "TORCH_FR_DUMP_TEMP_FILE",
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
    ] {
        assert_eq!(get(&off[0], k), None, "{k} without the watch: {:?}", off[0]);
    }
    let watch = ["--straggler_threshold", "20", "--straggler_window", "5"];
    let on = rank_envs(d.path(), &watch, &[]);
    for env in &on {
        assert_eq!(get(env, "TORCH_FR_BUFFER_SIZE").as_deref(), Some("2000"));
        assert_eq!(get(env, "TORCH_NCCL_ENABLE_TIMING").as_deref(), Some("1"));
        assert_eq!(
            get(env, "TORCH_NCCL_DUMP_ON_TIMEOUT"),
            None,
            "the hang watch's"
        );
        let dump = get(env, "TORCH_FR_DUMP_TEMP_FILE").unwrap();
        let pipe = get(env, "TORCH_NCCL_DEBUG_INFO_PIPE_FILE").unwrap();
        let dir = Path::new(&dump).parent().unwrap();
        assert_eq!(dump, dir.join("flight_recorder_").to_string_lossy());
        assert_eq!(pipe, dir.join("fr_pipe_").to_string_lossy());
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
    let user = [
        ("TORCH_NCCL_TRACE_BUFFER_SIZE", "50"),
        ("TORCH_NCCL_ENABLE_TIMING", "0"),
    ];
    let mine = rank_envs(d.path(), &watch, &user);
    assert_eq!(get(&mine[1], "TORCH_FR_BUFFER_SIZE"), None, "{:?}", mine[1]);
    assert_eq!(
        get(&mine[1], "TORCH_NCCL_TRACE_BUFFER_SIZE").as_deref(),
        Some("50")
    );
    assert_eq!(
        get(&mine[1], "TORCH_NCCL_ENABLE_TIMING").as_deref(),
        Some("0")
    );
    assert!(get(&mine[1], "TORCH_NCCL_DEBUG_INFO_PIPE_FILE").is_some());
}
