//! The control-plane drills of tests/control.rs under the real local SLURM cluster (the one
//! tests/slurm.rs starts and shares): `srun -N2 --ntasks-per-node=1 accel-launch` starts one launcher
//! per node, each in its own network namespace with its own host name (n1, n2), and they meet on n1.
//! The ranks are tests/fixtures/launch/control.py's real gloo ranks, 2 per node.

#[allow(unused_imports)]
use crate::util::{ChildExt as _, CommandExt as _, WAIT};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::control::{all_gone, now, ready, wait_for};
use crate::slurm::{job_field, slurm, text};
use crate::util::repo;

const GRACE: u64 = 3;

/// One launcher per node of a 2-node step, its ranks writing into `out`.
fn srun(d: &Path, out: &Path, mode: &str, extra: &[&str]) -> Child {
    slurm("srun", d)
        .args(["-N2", "--ntasks-per-node=1", "--time=5", "accel-launch"])
        .args(["--grace_period", &GRACE.to_string()])
        .args(extra)
        .arg(repo().join("tests/fixtures/launch/control.py"))
        .arg(out)
        .arg(mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn out_dir(d: &Path) -> PathBuf {
    let out = d.join("out");
    std::fs::create_dir(&out).unwrap();
    out
}

fn read(out: &Path, name: &str) -> String {
    std::fs::read_to_string(out.join(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .trim()
        .to_string()
}

/// Rank 3 (on n2) exits 7 while every other rank sleeps outside any collective: both launchers exit
/// 7, so srun and SLURM's record of the job say 7, n1's launcher names the failing rank and node, and
/// every process of the run on both nodes is gone within grace + 3 s of the failure.
#[test]
fn srun_a_rank_failing_on_node_1_stops_every_node() {
    let d = crate::util::tempdir();
    let out = out_dir(d.path());
    let child = srun(d.path(), &out, "fail", &[]);
    ready(&out, 0);
    wait_for(&out, &["fail.time".to_string()], Duration::from_secs(60));
    let gone_at = all_gone(&out, Duration::from_secs(GRACE + 60));
    let o = child.output_within(WAIT);
    let all = text(&o);
    let failed_at: f64 = read(&out, "fail.time").parse().unwrap();
    assert_eq!(o.status.code(), Some(7), "{all}");
    assert!(
        all.contains("rank 3 (local rank 1) on node 1 (n2) exited with status 7"),
        "{all}"
    );
    assert!(
        all.contains("n1: task 0: Exited with exit code 7"),
        "node 0's launcher exits with the rank's code: {all}"
    );
    let job: u32 = read(&out, "job.0.0").parse().unwrap();
    assert_eq!(job_field(d.path(), job, "ExitCode"), "7:0");
    let took = gone_at - failed_at;
    eprintln!("srun, rank failing on node 1: every process gone {took:.2} s after the failure");
    assert!(
        took < (GRACE + 3) as f64,
        "every process gone {took:.2} s after the failure (grace {GRACE} s)"
    );
}

/// n2's launcher SIGKILLed: n1's launcher sees its connection close, stops its ranks and exits 122
/// naming the lost node; n2's ranks go with their launcher's guards. Nothing of the run survives.
#[test]
fn srun_a_sigkilled_launcher_on_node_1_stops_node_0() {
    let d = crate::util::tempdir();
    let out = out_dir(d.path());
    let child = srun(d.path(), &out, "sleep", &[]);
    ready(&out, 0);
    // Rank 2 is node 1's first; its parent is node 1's launcher (same pid namespace as the test).
    let launcher = read(&out, "launcher.2.0");
    let killed_at = now();
    Command::new("kill")
        .args(["-9", &launcher])
        .status_within(WAIT);
    let gone_at = all_gone(&out, Duration::from_secs(GRACE + 60));
    let o = child.output_within(WAIT);
    let all = text(&o);
    assert!(all.contains("node 1 (n2) was lost"), "{all}");
    assert!(
        all.contains("n1: task 0: Exited with exit code 122"),
        "node 0's launcher exits 122: {all}"
    );
    assert!(!o.status.success(), "{all}");
    let took = gone_at - killed_at;
    eprintln!("srun, node 1's launcher SIGKILLed: every process gone {took:.2} s after");
    assert!(
        took < (GRACE + 3) as f64,
        "every process gone {took:.2} s after the SIGKILL (grace {GRACE} s)"
    );
}

/// `--max_restarts 1` and rank 2 (on n2) failing in attempt 0 only: both nodes restart together, and
/// attempt 1 all-reduces over all 4 ranks with TORCHELASTIC_RESTART_COUNT=1 on every one.
#[test]
fn srun_max_restarts_restarts_both_nodes_together() {
    let d = crate::util::tempdir();
    let out = out_dir(d.path());
    let o = srun(d.path(), &out, "restart", &["--max_restarts", "1"]).output_within(WAIT);
    let all = text(&o);
    assert!(o.status.success(), "{all}");
    assert!(
        all.contains("restarting the ranks of every node (restart 1 of 1)"),
        "{all}"
    );
    for r in 0..4 {
        let v: Value = serde_json::from_str(&read(&out, &format!("rank{r}.json"))).unwrap();
        assert_eq!(v["sum"], 10.0, "rank {r}: {v}");
        assert_eq!(v["env"]["TORCHELASTIC_RESTART_COUNT"], "1", "rank {r}: {v}");
    }
    assert!(out.join("pid.0.0").exists() && out.join("pid.3.0").exists());
}
