//! Spare nodes under the real local SLURM cluster (scripts/cluster), one of three nodes of its own
//! (the suite's shared cluster has two): `srun -N3 accel-launch --num_machines 2` makes n1 and n2
//! (SLURM node ids 0 and 1) the world and n3 a spare; each node has its own network namespace and
//! host name. The ranks are tests/fixtures/launch/control.py's real gloo ranks, 2 per node.

#[allow(unused_imports)]
use crate::util::{ChildExt as _, CommandExt as _, WAIT};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use crate::control::{now, ready, wait_for};
use crate::slurm::text;
use crate::util::{bin, isolated, proc, repo, suite, venv_bin};

/// The 3-node cluster's slurm.conf, the cluster started once per test process (`up` keeps a
/// healthy one running in the same directory).
fn conf() -> &'static PathBuf {
    static CONF: OnceLock<PathBuf> = OnceLock::new();
    CONF.get_or_init(|| {
        let runner = suite::runner();
        let dir = std::env::temp_dir().join(format!("accel-cluster3-{runner}"));
        let _held = suite::lock(&suite::dir().join("cluster3.lock"));
        let out = Command::new(repo().join("scripts/cluster"))
            .args(["up", "--nodes", "3", "--owner", &runner.to_string()])
            .env("ACCEL_CLUSTER_DIR", &dir)
            .env_remove(proc::OWNER_VAR)
            .output_within(Duration::from_secs(180));
        assert!(
            out.status.success(),
            "scripts/cluster up --nodes 3 failed (scripts/setup installs SLURM and munge; root is needed):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir.join("slurm.conf")
    })
}

/// Held for a whole test: one job at a time on the 3-node cluster, since a test cuts, kills or
/// drains its n2, which another test's job would take for its own node's loss.
fn one_at_a_time() -> std::fs::File {
    suite::lock(&suite::dir().join("cluster3.jobs.lock"))
}

/// A SLURM client command against the 3-node cluster, with the launchers on PATH.
fn slurm3(program: &str, cwd: &Path) -> Command {
    let mut cmd = isolated(program);
    let tools = bin("accel-launch").parent().unwrap().to_path_buf();
    let path = std::env::var("PATH").unwrap_or_default();
    cmd.env(
        "PATH",
        format!("{}:{}:{path}", tools.display(), venv_bin().display()),
    )
    .env("SLURM_CONF", conf())
    .env("HOME", cwd)
    .env("ACCEL_NO_PROGRESS", "1")
    .env("TORCH_CPP_LOG_LEVEL", "ERROR")
    .current_dir(cwd)
    .stdin(Stdio::null())
    .marked();
    cmd
}

/// `srun -N3 accel-launch --num_machines 2 --max_restarts 1` running control.py in `mode` into
/// `out`, each launcher's report in `out/report.NODEID.json`.
fn srun3(d: &Path, out: &Path, mode: &str, extra: &str) -> std::process::Child {
    let o = out.display();
    let launch = format!(
        "exec accel-launch --num_machines 2 --max_restarts 1 --grace_period 3 \
         --report_json {o}/report.$SLURM_NODEID.json {extra} {} {o} {mode}",
        crate::util::fixture("launch/control.py").display()
    );
    slurm3("srun", d)
        .args([
            "-N3",
            "--ntasks-per-node=1",
            "--time=5",
            "--kill-on-bad-exit=0",
        ])
        .args(["sh", "-c", &launch])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .start()
}

/// Node `i`'s link to the cluster's bridge (its host side), by the cluster's id.
fn link_of(i: u32) -> String {
    let env = std::fs::read_to_string(conf().parent().unwrap().join("cluster.env")).unwrap();
    let id = env
        .lines()
        .find_map(|l| l.strip_prefix("ID="))
        .unwrap_or_else(|| panic!("no ID in cluster.env: {env}"));
    format!("acc{id}n{i}h")
}

fn set_link(link: &str, state: &str) {
    let ok = Command::new("ip")
        .args(["link", "set", link, state])
        .status_within(WAIT)
        .success();
    assert!(ok, "ip link set {link} {state}");
}

fn rank_sums(out: &Path, attempts: &str) {
    for r in 0..4 {
        let v: Value = serde_json::from_str(&read(out, &format!("rank{r}.json"))).unwrap();
        assert_eq!(v["sum"], 10.0, "rank {r}: {v}");
        assert_eq!(
            v["env"]["TORCHELASTIC_RESTART_COUNT"], attempts,
            "rank {r}: {v}"
        );
    }
}

fn read(out: &Path, name: &str) -> String {
    std::fs::read_to_string(out.join(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .trim()
        .to_string()
}

/// `srun -N3 accel-launch --num_machines 2 --max_restarts 1`: n3 (node id 2) waits as a spare;
/// node 1's launcher (on n2) SIGKILLed, n3 takes node rank 1, attempt 1 all-reduces over the 4
/// ranks with TORCHELASTIC_RESTART_COUNT=1, n1 and n3 exit 0 (n2's task alone was killed), and node
/// 0's report and exclude file name n2, and with --drain_lost_nodes (the suite runs as root, whom
/// SLURM lets drain) node 0 drains n2 (resumed at the end). Prints the time from the SIGKILL to the spare's ranks
/// started (its first rank's pid file of attempt 1) and to every rank in the rendezvous.
#[test]
fn srun_a_spare_takes_the_place_of_a_sigkilled_node() {
    let _alone = one_at_a_time();
    let d = crate::util::tempdir();
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let o = out.display();
    let launch = format!(
        "exec accel-launch --num_machines 2 --max_restarts 1 --grace_period 3 \
         --report_json {o}/report.$SLURM_NODEID.json --exclude_file {o}/exclude --drain_lost_nodes \
         {} {o} replace",
        crate::util::fixture("launch/control.py").display()
    );
    let child = slurm3("srun", d.path())
        .args([
            "-N3",
            "--ntasks-per-node=1",
            "--time=5",
            "--kill-on-bad-exit=0",
        ])
        .args(["sh", "-c", &launch])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .start();
    ready(&out, 0);
    // Rank 2 is node 1's first; its parent is node 1's launcher (same pid namespace as the test).
    let launcher = read(&out, "launcher.2.0");
    let killed = now();
    Command::new("kill")
        .args(["-9", &launcher])
        .status_within(WAIT);
    wait_for(&out, &["pid.2.1".to_string()], Duration::from_secs(60));
    let started = now();
    ready(&out, 1);
    let world = now();
    let o = child.output_within(WAIT);
    let all = text(&o);
    eprintln!(
        "srun take-over: {:.2} s from the SIGKILL to the spare's first rank in the rendezvous, {:.2} s to every rank of attempt 1",
        started - killed,
        world - killed
    );
    // Node 0 names the spare: at the world's start when it joined before (srun starts the three
    // launchers in no set order), else as it joins.
    assert!(
        all.contains("with 1 spare(s) waiting: node 2 (n3)")
            || all.contains("spare node 2 (n3) joined"),
        "{all}"
    );
    assert!(
        all.contains("spare node 2 (n3) takes the place of lost node 1 (n2) from attempt 1"),
        "{all}"
    );
    assert!(!all.contains("waiting up to"), "no replacement wait: {all}");
    for r in 0..4 {
        let v: Value = serde_json::from_str(&read(&out, &format!("rank{r}.json"))).unwrap();
        assert_eq!(v["sum"], 10.0, "rank {r}: {v}");
        assert_eq!(v["env"]["TORCHELASTIC_RESTART_COUNT"], "1", "rank {r}: {v}");
    }
    let r0: Value = serde_json::from_str(&read(&out, "report.0.json")).unwrap();
    assert_eq!(r0["status"], 0, "{r0}");
    assert_eq!(r0["lost_nodes"][0]["host"], "n2", "{r0}");
    assert_eq!(r0["lost_nodes"][0]["node"], 1, "{r0}");
    assert_eq!(
        (
            r0["spares"][0]["host"].clone(),
            r0["spares"][0]["took"].clone()
        ),
        ("n3".into(), 1.into()),
        "{r0}"
    );
    // The spare (SLURM node id 2) ran as node 1.
    let r2: Value = serde_json::from_str(&read(&out, "report.2.json")).unwrap();
    assert_eq!(
        (r2["node"].clone(), r2["status"].clone()),
        (1.into(), 0.into()),
        "{r2}"
    );
    assert_eq!(read(&out, "exclude"), "n2");
    let show = slurm3("scontrol", d.path())
        .args(["show", "node", "n2"])
        .output_within(WAIT);
    let node = String::from_utf8_lossy(&show.stdout).into_owned();
    let _ = slurm3("scontrol", d.path())
        .args(["update", "NodeName=n2", "State=RESUME"])
        .output_within(WAIT);
    assert!(all.contains("node n2 drained"), "{all}");
    assert!(
        node.contains("DRAIN") && node.contains("accel-launch: lost in job"),
        "{node}"
    );
    // n2's task alone was killed: srun's status is not the world's (the man page's sbatch lines).
    assert!(!o.status.success(), "{all}");
    assert!(!all.contains("n1: task 0: Exited"), "{all}");
}

/// n2's network cut (its link to the cluster's bridge down) under `srun -N3`: node 0 counts node 1
/// as lost after the 5 s heartbeat window and n3 takes node rank 1; attempt 1 all-reduces over the
/// 4 ranks, node 0's report names n2 and why. The link comes back up once the world has moved on,
/// so that n2's step daemon can report its launcher's end (122: it lost node 0) to srun.
#[test]
fn srun_a_spare_takes_the_place_of_a_node_cut_off() {
    let _alone = one_at_a_time();
    let d = crate::util::tempdir();
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let child = srun3(d.path(), &out, "replace", "");
    ready(&out, 0);
    let link = link_of(2);
    let cut = now();
    set_link(&link, "down");
    wait_for(&out, &["pid.2.1".to_string()], Duration::from_secs(60));
    let started = now();
    ready(&out, 1);
    set_link(&link, "up");
    let o = child.output_within(WAIT);
    let all = text(&o);
    eprintln!(
        "srun take-over after a network cut: {:.2} s from the cut to the spare's first rank in the rendezvous",
        started - cut
    );
    assert!(
        all.contains("spare node 2 (n3) takes the place of lost node 1 (n2) from attempt 1"),
        "{all}"
    );
    rank_sums(&out, "1");
    let r0: Value = serde_json::from_str(&read(&out, "report.0.json")).unwrap();
    assert_eq!(r0["status"], 0, "{r0}");
    assert_eq!(r0["lost_nodes"][0]["host"], "n2", "{r0}");
    let why = r0["lost_nodes"][0]["why"].as_str().unwrap_or_default();
    assert!(why.contains("no heartbeat for 5 s"), "{r0}");
    let r1: Value = serde_json::from_str(&read(&out, "report.1.json")).unwrap();
    assert_eq!(r1["status"], 122, "n2's launcher lost node 0: {r1}");
}

/// `--replace_failing_nodes` under `srun -N3`: rank 2 (on n2) exits 7 in attempt 0; n3 takes node
/// rank 1 instead of n2 restarting in place; n2's launcher exits 7 (srun says so), attempt 1
/// all-reduces, and node 0's report names n2 with its failing rank.
#[test]
fn srun_replace_failing_nodes_puts_the_spare_in_place() {
    let _alone = one_at_a_time();
    let d = crate::util::tempdir();
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let o = srun3(d.path(), &out, "restart", "--replace_failing_nodes").output_within(WAIT);
    let all = text(&o);
    assert!(
        all.contains("n2: task 1: Exited with exit code 7"),
        "n2's launcher exits with its rank's status: {all}"
    );
    assert!(
        all.contains("spare node 2 (n3) takes the place of lost node 1 (n2) from attempt 1"),
        "{all}"
    );
    rank_sums(&out, "1");
    let r0: Value = serde_json::from_str(&read(&out, "report.0.json")).unwrap();
    assert_eq!(r0["status"], 0, "{r0}");
    assert_eq!(r0["lost_nodes"][0]["host"], "n2", "{r0}");
    let why = r0["lost_nodes"][0]["why"].as_str().unwrap_or_default();
    assert!(why.starts_with("its ranks failed: rank 2"), "{r0}");
}
