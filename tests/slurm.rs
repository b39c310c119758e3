//! Real SLURM: a two-node cluster (scripts/cluster: slurmctld, one slurmd per node in its own network
//! namespace with its own address and host name) started once per test process and shared by these
//! tests. Jobs are 2 nodes × 2 CPU ranks; each node announces 2 CPUs, so jobs queue instead of
//! oversubscribing the machine. Everything here needs root and the SLURM packages (scripts/setup): the
//! tests fail, not skip, without them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::util::{
    alive, bin, isolated, proc, repo, suite, venv_bin, venv_python, ChildExt, CommandExt, WAIT,
};

pub struct Cluster {
    pub conf: PathBuf,
}

/// The suite run's cluster: started by the first test process that needs it, shared by the others
/// (nextest runs each test in a process of its own), and taken down by its watcher once the suite's
/// runner has exited (`--owner`). A start that failed once fails every later SLURM test at once
/// with the same reason instead of each trying again.
pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let runner = suite::runner();
        let dir = std::env::temp_dir().join(format!("accel-cluster-{runner}"));
        let _held = suite::lock(&suite::dir().join("cluster.lock"));
        let failed = suite::dir().join("cluster.failed");
        if let Ok(why) = std::fs::read_to_string(&failed) {
            panic!("the suite's SLURM cluster failed to start earlier in this run:\n{why}");
        }
        // Started once per run: `scripts/cluster up` on a running cluster restarts it when its health
        // check fails (as it can on a loaded machine), which would kill the jobs of tests running beside.
        let up = suite::dir().join("cluster.up");
        if up.exists() {
            if let Some(gone) = dead_daemon(&dir) {
                panic!(
                    "the suite's SLURM cluster (started earlier in this run) has lost {gone}; the end of \
                     its slurmctld log:\n{}",
                    log_tail(&dir.join("log/slurmctld.log"), 15)
                );
            }
            return Cluster {
                conf: dir.join("slurm.conf"),
            };
        }
        // The daemons outlive this test process: they must not carry its mark, or the next test would
        // take them for leftovers.
        let out = Command::new(repo().join("scripts/cluster"))
            .args(["up", "--owner", &runner.to_string()])
            .env("ACCEL_CLUSTER_DIR", &dir)
            .env_remove(proc::OWNER_VAR)
            .output_within(Duration::from_secs(120));
        if !out.status.success() {
            let why = format!(
                "scripts/cluster up failed (scripts/setup installs SLURM and munge; root is needed):\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let _ = std::fs::write(&failed, &why);
            panic!("{why}");
        }
        std::fs::write(&up, b"").unwrap();
        let marked = daemons(&dir)
            .into_iter()
            .filter(|(_, pid)| {
                proc::marked().iter().any(|(p, _)| *p == *pid as i32)
            })
            .map(|(name, pid)| format!("{name} ({pid})"))
            .collect::<Vec<_>>();
        assert!(
            marked.is_empty(),
            "the suite's cluster daemons carry this test's {} mark, so the next test would kill them \
             as its leftovers: {}",
            proc::OWNER_VAR,
            marked.join(", ")
        );
        Cluster {
            conf: dir.join("slurm.conf"),
        }
    })
}

/// The cluster's daemons (`run/NAME.pid` of `scripts/cluster`: munged, slurmctld, a slurmd per
/// node, the watcher) with their pids.
fn daemons(dir: &Path) -> Vec<(String, u32)> {
    let Ok(entries) = std::fs::read_dir(dir.join("run")) else {
        return Vec::new();
    };
    let mut out: Vec<(String, u32)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.strip_suffix(".pid")?.to_string();
            let pid = std::fs::read_to_string(e.path())
                .ok()?
                .trim()
                .parse()
                .ok()?;
            Some((name, pid))
        })
        .collect();
    out.sort();
    out
}

/// The first of the cluster's daemons that is no longer running, named with its pid.
fn dead_daemon(dir: &Path) -> Option<String> {
    let all = daemons(dir);
    if all.is_empty() {
        return Some(format!(
            "its pid files (none in {})",
            dir.join("run").display()
        ));
    }
    all.into_iter()
        .find(|(_, pid)| !alive(*pid as i32))
        .map(|(name, pid)| format!("{name} (pid {pid})"))
}

fn log_tail(path: &Path, n: usize) -> String {
    std::fs::read(path)
        .map(|b| proc::tail(&b, n))
        .unwrap_or_else(|e| format!("({}: {e})", path.display()))
}

/// The suite's cluster outlives every test: its daemons carry no test's mark (or the first test
/// process started after the one that brought it up would kill them as that test's leftovers, and
/// every later SLURM test would fail with "Unable to contact slurm controller"), and they are all
/// still running after the test that started them has ended.
#[test]
fn the_suites_cluster_daemons_carry_no_test_mark_and_stay_up() {
    let c = cluster();
    let dir = c.conf.parent().unwrap().to_path_buf();
    let names: Vec<String> = daemons(&dir).into_iter().map(|(n, _)| n).collect();
    for want in ["munged", "slurmctld", "slurmd-n1", "slurmd-n2"] {
        assert!(names.iter().any(|n| n == want), "no {want} in {names:?}");
    }
    let marks = proc::marked();
    for (name, pid) in daemons(&dir) {
        assert!(alive(pid as i32), "{name} (pid {pid}) is not running");
        let mark = marks.iter().find(|(p, _)| *p == pid as i32);
        assert!(
            mark.is_none(),
            "{name} (pid {pid}) carries the test mark {:?}",
            mark.map(|(_, m)| m)
        );
    }
}

/// A SLURM client command (srun, sbatch, scontrol, scancel) against the test cluster, run in `cwd`
/// with the built tools and the venv's python first on PATH (SLURM hands this environment to the tasks).
pub fn slurm(program: &str, cwd: &Path) -> Command {
    let c = cluster();
    let mut cmd = isolated(program);
    let tools = bin("accel-launch").parent().unwrap().to_path_buf();
    let venv = venv_bin();
    let path = std::env::var("PATH").unwrap_or_default();
    cmd.env(
        "PATH",
        format!("{}:{}:{path}", tools.display(), venv.display()),
    )
    .env("SLURM_CONF", &c.conf)
    .env("HOME", cwd)
    .env("ACCEL_NO_PROGRESS", "1")
    .env("TORCH_CPP_LOG_LEVEL", "ERROR")
    .current_dir(cwd)
    .stdin(Stdio::null())
    .marked();
    cmd
}

pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every rank's record of its contract and of a gloo all_reduce: `key=value` lines in rank<R>.txt.
pub const PROBE: &str = r#"
import os, socket, sys
import torch
import torch.distributed as dist
out = sys.argv[1]
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
rec = {k: os.environ.get(k, "") for k in ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
       "GROUP_RANK", "GROUP_WORLD_SIZE", "NODE_RANK", "SLURM_NODEID", "MASTER_ADDR", "MASTER_PORT",
       "SLURM_JOB_ID"]}
rec.update(host=socket.gethostname(), dist_rank=dist.get_rank(), dist_world=dist.get_world_size(),
           sum=int(t.item()))
with open(os.path.join(out, "rank%d.txt" % dist.get_rank()), "w") as f:
    f.write("".join("%s=%s\n" % kv for kv in rec.items()))
dist.barrier()
dist.destroy_process_group()
"#;

pub fn record(dir: &Path, rank: u32) -> std::collections::BTreeMap<String, String> {
    let p = dir.join(format!("rank{rank}.txt"));
    let s = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("rank {rank} left no record at {}: {e}", p.display()));
    s.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Checks the 4-rank world of a 2-node job: ranks fill n1 then n2, rendezvous on n1 at the port
/// derived from the job id, and the all_reduce of rank+1 is 10 everywhere.
fn check_world(out: &Path) {
    let mut job = None;
    for rank in 0..4u32 {
        let r = record(out, rank);
        let node = rank / 2;
        let want = [
            ("RANK", rank.to_string()),
            ("LOCAL_RANK", (rank % 2).to_string()),
            ("WORLD_SIZE", "4".into()),
            ("LOCAL_WORLD_SIZE", "2".into()),
            ("GROUP_RANK", node.to_string()),
            ("GROUP_WORLD_SIZE", "2".into()),
            ("SLURM_NODEID", node.to_string()),
            // The node rank reaches a rank as GROUP_RANK, as under torchrun and `accelerate launch`
            // (torch/distributed/elastic/agent/server/api.py sets GROUP_RANK); NODE_RANK is not part of
            // that contract, and a leaked one would make a rank's own launcher read it as its place.
            ("NODE_RANK", String::new()),
            ("MASTER_ADDR", "n1".into()),
            ("host", format!("n{}", node + 1)),
            ("dist_rank", rank.to_string()),
            ("dist_world", "4".into()),
            ("sum", "10".into()),
        ];
        for (k, v) in want {
            assert_eq!(r[k], v, "rank {rank}: {k} in {r:?}");
        }
        let id: u32 = r["SLURM_JOB_ID"].parse().unwrap();
        assert_eq!(
            r["MASTER_PORT"],
            (15000 + 2 * (id % 8500)).to_string(),
            "rank {rank}: the port derived from the job id"
        );
        assert_eq!(*job.get_or_insert(id), id, "one job");
    }
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

#[test]
fn srun_one_accel_launch_per_node_forms_the_world_from_slurm_alone() {
    let d = crate::util::tempdir();
    let probe = write(d.path(), "probe.py", PROBE);
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let o = slurm("srun", d.path())
        .args(["-N2", "--ntasks-per-node=1", "--time=5", "accel-launch"])
        .arg(&probe)
        .arg(&out)
        .output_within(WAIT);
    assert!(o.status.success(), "{}", text(&o));
    check_world(&out);
}

#[test]
fn srun_accel_env_per_task_forms_the_world_from_slurm_alone() {
    let d = crate::util::tempdir();
    let probe = write(d.path(), "probe.py", PROBE);
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let o = slurm("srun", d.path())
        .args(["-N2", "-n4", "--time=5", "accel-env", "--", "python"])
        .arg(&probe)
        .arg(&out)
        .output_within(WAIT);
    assert!(o.status.success(), "{}", text(&o));
    check_world(&out);
}

#[test]
fn srun_accel_test_passes_on_two_nodes() {
    let d = crate::util::tempdir();
    let o = slurm("srun", d.path())
        .args(["-N2", "--ntasks-per-node=1", "--time=5", "accel-test"])
        .output_within(WAIT);
    let all = text(&o);
    assert!(o.status.success(), "{all}");
    for m in ["machine 0 of 2", "machine 1 of 2"] {
        assert!(
            all.lines()
                .any(|l| l.starts_with("verdict: PASS") && l.contains(m) && l.contains("n1:")),
            "no PASS verdict for {m}: {all}"
        );
    }
}

/// A task layout accel cannot turn into a world is refused by every task before Python starts.
#[test]
fn srun_layouts_accel_refuses_fail_before_python() {
    let d = crate::util::tempdir();
    let marker = d.path().join("started");
    let script = write(
        d.path(),
        "mark.py",
        &format!("open({:?}, 'w').close()\n", marker.display().to_string()),
    );
    let script = script.display().to_string();
    let o = slurm("srun", d.path())
        .args([
            "-N2",
            "--ntasks-per-node=2",
            "--time=2",
            "accel-launch",
            &script,
        ])
        .output_within(WAIT);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(125), "{all}");
    assert!(all.contains("srun started 2 tasks per node"), "{all}");
    assert!(!marker.exists(), "a rank started");
}

/// An uneven step (`-N2 -n3`: 2 + 1 tasks) is a valid world for one task per rank: RANK is SLURM's,
/// LOCAL_WORLD_SIZE is each node's own count.
#[test]
fn srun_uneven_tasks_form_one_world() {
    let d = crate::util::tempdir();
    let script = write(
        d.path(),
        "world.py",
        "import os, torch.distributed as dist\n\
         dist.init_process_group('gloo')\n\
         import torch\n\
         t = torch.ones(1)\n\
         dist.all_reduce(t)\n\
         print('RANK', os.environ['RANK'], 'WORLD', os.environ['WORLD_SIZE'], 'LOCAL_WORLD', os.environ['LOCAL_WORLD_SIZE'], 'SUM', int(t.item()), flush=True)\n\
         dist.destroy_process_group()\n",
    );
    let o = slurm("srun", d.path())
        .args([
            "-N2",
            "-n3",
            "--time=2",
            "accel-env",
            "--",
            "python",
            &script.display().to_string(),
        ])
        .output_within(WAIT);
    let all = text(&o);
    assert!(o.status.success(), "{all}");
    let mut lines: Vec<&str> = all.lines().filter(|l| l.starts_with("RANK ")).collect();
    lines.sort();
    assert_eq!(lines.len(), 3, "{all}");
    for l in &lines {
        assert!(l.contains("WORLD 3") && l.ends_with("SUM 3"), "{all}");
    }
    let local: Vec<&str> = lines
        .iter()
        .map(|l| l.split(' ').nth(5).unwrap_or(""))
        .collect();
    let mut sorted = local.clone();
    sorted.sort();
    assert_eq!(sorted, ["1", "2", "2"], "{all}");
}

// ---- sbatch: the two example files, as users submit them ----

fn sbatch_example(cwd: &Path, file: &str, overrides: &[&str], command: &[&str]) -> (u32, Output) {
    let o = slurm("sbatch", cwd)
        .args(["--parsable", "--wait", "--time=10", "--output=job-%j.out"])
        .args(overrides)
        .arg(repo().join("scripts/sbatch").join(file))
        .args(command)
        .output_within(WAIT);
    let id = String::from_utf8_lossy(&o.stdout)
        .trim()
        .split(';')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no job id from sbatch: {}", text(&o)));
    (id, o)
}

/// `scontrol show job`'s field, e.g. ExitCode=7:0 or JobState=COMPLETED.
pub fn job_field(cwd: &Path, id: u32, field: &str) -> String {
    let o = slurm("scontrol", cwd)
        .args(["show", "job", &id.to_string()])
        .output_within(WAIT);
    let s = String::from_utf8_lossy(&o.stdout).into_owned();
    s.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{field}=")).map(str::to_string))
        .unwrap_or_else(|| panic!("no {field} for job {id}: {}", text(&o)))
}

fn job_log(cwd: &Path, id: u32) -> String {
    std::fs::read_to_string(cwd.join(format!("job-{id}.out"))).unwrap_or_default()
}

const PER_NODE: &[&str] = &["--gpus-per-node=0", "--cpus-per-task=2"];
const PER_TASK: &[&str] = &[
    "--ntasks-per-node=2",
    "--gpus-per-node=0",
    "--cpus-per-task=1",
];

fn train() -> String {
    repo().join("examples/train.py").display().to_string()
}

/// The final loss line of train.py.
fn final_loss(log: &str) -> String {
    log.lines()
        .find_map(|l| l.strip_prefix("final_loss=").map(str::to_string))
        .unwrap_or_else(|| panic!("no final_loss in:\n{log}"))
}

#[test]
fn sbatch_examples_train_on_two_nodes() {
    let d = crate::util::tempdir();
    let t = train();
    let (a, o) = sbatch_example(
        d.path(),
        "one-task-per-node.sbatch",
        PER_NODE,
        &[&t, "--epochs", "2"],
    );
    let log_a = job_log(d.path(), a);
    assert!(o.status.success(), "{}\n{log_a}", text(&o));
    assert_eq!(job_field(d.path(), a, "ExitCode"), "0:0");
    assert!(log_a.contains("4 processes"), "{log_a}");
    assert!(
        d.path().join(format!("logs/{a}/run0")).is_dir(),
        "--log_dir logs/$SLURM_JOB_ID/run$SLURM_RESTART_COUNT"
    );
    let py = venv_python().display().to_string();
    let (b, o) = sbatch_example(
        d.path(),
        "one-task-per-gpu.sbatch",
        PER_TASK,
        &[&py, &t, "--epochs", "2"],
    );
    let log_b = job_log(d.path(), b);
    assert!(o.status.success(), "{}\n{log_b}", text(&o));
    assert_eq!(job_field(d.path(), b, "ExitCode"), "0:0");
    assert!(log_b.contains("4 processes"), "{log_b}");
    // Same world, same split batches: the same trajectory either way.
    assert_eq!(final_loss(&log_a), final_loss(&log_b));
}

const FAIL: &str = r#"
import os, sys, time
if os.environ["RANK"] == "3":
    time.sleep(1)
    sys.exit(7)
time.sleep(120)
"#;

/// A rank that exits 7 on n2, under both examples: SLURM's own record of that task (srun's line) names 7.
/// Under one launcher per node the job's exit code as SLURM records it is the failing rank's: the other
/// node learns of the failure over the control plane and exits with its code, and the SIGTERM
/// `srun --kill-on-bad-exit` then sends it does not turn that into 143. Under one task per GPU there is
/// no launcher between SLURM and the ranks: srun terminates the other tasks and exits with the highest
/// task code, 143 (128 + SIGTERM), which SLURM records as the job's.
#[test]
fn sbatch_examples_record_the_failing_task_and_its_exit_code() {
    let d = crate::util::tempdir();
    let fail = write(d.path(), "fail.py", FAIL).display().to_string();
    let (a, o) = sbatch_example(d.path(), "one-task-per-node.sbatch", PER_NODE, &[&fail]);
    let log = job_log(d.path(), a);
    assert_eq!(o.status.code(), Some(7), "{log}");
    assert!(
        log.contains("rank 3 (local rank 1) on n2 exited with status 7"),
        "{log}"
    );
    assert!(log.contains("n2: task 1: Exited with exit code 7"), "{log}");
    assert_eq!(job_field(d.path(), a, "JobState"), "FAILED");
    assert_eq!(job_field(d.path(), a, "ExitCode"), "7:0");
    let py = venv_python().display().to_string();
    let (b, o) = sbatch_example(d.path(), "one-task-per-gpu.sbatch", PER_TASK, &[&py, &fail]);
    let log = job_log(d.path(), b);
    assert_eq!(o.status.code(), Some(143), "{log}");
    assert!(log.contains("n2: task 3: Exited with exit code 7"), "{log}");
    assert_eq!(job_field(d.path(), b, "JobState"), "FAILED");
    assert_eq!(job_field(d.path(), b, "ExitCode"), "143:0");
}

// ---- stopping: scancel and SLURM's signals ----

fn wait_for_files(dir: &Path, names: &[String], limit: Duration) {
    let t = Instant::now();
    while !names.iter().all(|n| dir.join(n).exists()) {
        assert!(
            t.elapsed() < limit,
            "never appeared in {}: {names:?}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Each rank records its pid, its launcher's and a grandchild's in a session of its own, then waits.
const HANG: &str = r#"
import os, subprocess, sys, time
out = sys.argv[1]
gc = subprocess.Popen(["sleep", "1000"], start_new_session=True)
with open(os.path.join(out, "pids%s" % os.environ["RANK"]), "w") as f:
    f.write("%d %d %d\n" % (os.getpid(), os.getppid(), gc.pid))
time.sleep(1000)
"#;

#[test]
fn scancel_leaves_no_process_on_any_node() {
    let d = crate::util::tempdir();
    let hang = write(d.path(), "hang.py", HANG).display().to_string();
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let o = slurm("sbatch", d.path())
        .args(["--parsable", "--time=10", "--output=job-%j.out"])
        .args(PER_NODE)
        .arg(repo().join("scripts/sbatch/one-task-per-node.sbatch"))
        .arg(&hang)
        .arg(&out)
        .output_within(WAIT);
    assert!(o.status.success(), "{}", text(&o));
    let id: u32 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    let names: Vec<String> = (0..4).map(|r| format!("pids{r}")).collect();
    wait_for_files(&out, &names, Duration::from_secs(180));
    let pids: Vec<i32> = names
        .iter()
        .flat_map(|n| {
            std::fs::read_to_string(out.join(n))
                .unwrap()
                .split_whitespace()
                .map(|p| p.parse::<i32>().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(pids.iter().all(|p| alive(*p)), "{pids:?}");
    let o = slurm("scancel", d.path())
        .arg(id.to_string())
        .output_within(WAIT);
    assert!(o.status.success(), "{}", text(&o));
    // KillWait is 10 s: SIGTERM, then SIGKILL for whatever is left; generous on a loaded machine.
    let left = crate::util::survivors::survivors(&pids, Duration::from_secs(90));
    assert!(
        left.is_empty(),
        "survived scancel: {left:?} of {pids:?}\n{}",
        job_log(d.path(), id)
    );
    // The processes can be gone before slurmctld has heard the nodes' cleanup: the job is
    // COMPLETING for that moment, then CANCELLED.
    let t = Instant::now();
    let mut state = job_field(d.path(), id, "JobState");
    while state == "COMPLETING" && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
        state = job_field(d.path(), id, "JobState");
    }
    assert_eq!(state, "CANCELLED");
}

/// Each rank counts SIGUSR1 deliveries until 3 s after the first, then records the count and exits 0.
/// Counted through the wakeup fd (one byte per delivery): Python runs its handler once for signals
/// that arrive before it gets to run, which would hide a second delivery.
const USR1: &str = r#"
import os, signal, socket, sys, time
r, w = socket.socketpair()
r.setblocking(False)
w.setblocking(False)
signal.signal(signal.SIGUSR1, lambda s, f: None)
signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
out = sys.argv[1]
rank = os.environ["RANK"]
got = 0
def drain():
    global got
    try:
        got += sum(1 for b in r.recv(64) if b == signal.SIGUSR1)
    except BlockingIOError:
        pass
open(os.path.join(out, "ready%s" % rank), "w").close()
deadline = time.time() + 240
while not got and time.time() < deadline:
    time.sleep(0.1)
    drain()
time.sleep(3)
drain()
with open(os.path.join(out, "usr1-%s" % rank), "w") as f:
    f.write(str(got))
"#;

fn usr1_counts(out: &Path) -> Vec<String> {
    (0..4)
        .map(|r| std::fs::read_to_string(out.join(format!("usr1-{r}"))).unwrap_or_default())
        .collect()
}

fn spawn_usr1_job(d: &Path, name: &str, extra: &[&str]) -> (Child, PathBuf) {
    let script = write(d, "usr1.py", USR1);
    let out = d.join("out");
    std::fs::create_dir(&out).unwrap();
    let child = slurm("srun", d)
        .args(["-N2", "--ntasks-per-node=1", "-J", name])
        .args(extra)
        .arg("accel-launch")
        .arg(&script)
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .start();
    (child, out)
}

/// `srun --signal=USR1@…` starts a 1-minute job whose warning is due 20 s in (slurmctld checks time
/// limits every ~30 s), and returns every rank's USR1 count.
fn srun_signal_counts() -> Vec<String> {
    let d = crate::util::tempdir();
    let (child, out) = spawn_usr1_job(d.path(), "usr1-timer", &["--time=1", "--signal=USR1@40"]);
    // slurmctld checks time limits on its own timer, so the warning (and so the job's end) can come a
    // minute or more after the 20 s it is due.
    let o = child.output_within(Duration::from_secs(300));
    assert!(o.status.success(), "{}", text(&o));
    usr1_counts(&out)
}

/// `scancel --signal=USR1` on a running job, returning every rank's USR1 count.
fn scancel_signal_counts() -> Vec<String> {
    let d = crate::util::tempdir();
    let name = format!("usr1-scancel-{}", std::process::id());
    let (child, out) = spawn_usr1_job(d.path(), &name, &["--time=5"]);
    let names: Vec<String> = (0..4).map(|r| format!("ready{r}")).collect();
    wait_for_files(&out, &names, Duration::from_secs(180));
    let o = slurm("scancel", d.path())
        .args(["--signal=USR1", "--name", &name])
        .output_within(WAIT);
    assert!(o.status.success(), "{}", text(&o));
    let o = child.output_within(WAIT);
    assert!(o.status.success(), "{}", text(&o));
    usr1_counts(&out)
}

/// Every rank gets SLURM's signal once, not twice: SLURM signals every process of the step itself
/// (proctrack/linuxproc and proctrack/cgroup alike), the ranks included, so accel-launch does not
/// forward a signal whose sender (si_pid) is its parent slurmstepd.
#[test]
fn srun_signal_reaches_every_rank_once() {
    assert_eq!(srun_signal_counts(), ["1", "1", "1", "1"]);
}

#[test]
fn scancel_signal_reaches_every_rank_once() {
    assert_eq!(scancel_signal_counts(), ["1", "1", "1", "1"]);
}

// ---- schedulers without a local engine: their variables as they set them ----

fn dry_run(vars: &[(&str, &str)]) -> String {
    let d = crate::util::tempdir();
    let mut r = crate::util::Run::new("accel-launch", d.path());
    for (k, v) in vars {
        r = r.env(k, v);
    }
    let o = r.args(["--cpu", "--dry-run", "--json", "train.py"]).run();
    o.success();
    o.stdout
}

fn has(json: &str, pairs: &[&str]) {
    for p in pairs {
        assert!(json.contains(p), "lacks {p}:\n{json}");
    }
}

#[test]
fn kubeflow_trainer_skypilot_and_pytorchjob_place_the_node() {
    // Kubeflow Trainer v2's torch runtime: torchrun's flags as PET_* on every node.
    has(
        &dry_run(&[
            ("PET_NNODES", "2"),
            ("PET_NPROC_PER_NODE", "2"),
            ("PET_NODE_RANK", "1"),
            ("PET_MASTER_ADDR", "10.0.0.1"),
            ("PET_MASTER_PORT", "29400"),
        ]),
        &[
            "\"topology_source\": \"Kubeflow\"",
            "\"num_machines\": 2",
            "\"machine_rank\": 1",
            "\"master_addr\": \"10.0.0.1\"",
            "\"master_port\": 29400",
            "\"RANK\": \"3\"",
        ],
    );
    // SkyPilot: node IPs one per line, head first; the port is accel's default.
    has(
        &dry_run(&[
            ("SKYPILOT_NODE_IPS", "10.0.0.5\n10.0.0.6"),
            ("SKYPILOT_NODE_RANK", "1"),
            ("SKYPILOT_NUM_NODES", "2"),
            ("SKYPILOT_NUM_GPUS_PER_NODE", "0"),
        ]),
        &[
            "\"topology_source\": \"SkyPilot\"",
            "\"num_machines\": 2",
            "\"machine_rank\": 1",
            "\"master_addr\": \"10.0.0.5\"",
        ],
    );
    // PyTorchJob v1: MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK per pod (the pod is the node).
    has(
        &dry_run(&[
            ("MASTER_ADDR", "job-master-0"),
            ("MASTER_PORT", "23456"),
            ("WORLD_SIZE", "2"),
            ("RANK", "1"),
        ]),
        &[
            "\"topology_source\": \"External\"",
            "\"num_machines\": 2",
            "\"machine_rank\": 1",
            "\"master_addr\": \"job-master-0\"",
        ],
    );
    // …and one process per pod under `accel-env --`.
    let d = crate::util::tempdir();
    let o = crate::util::Run::new("accel-env", d.path())
        .env("MASTER_ADDR", "job-master-0")
        .env("MASTER_PORT", "23456")
        .env("WORLD_SIZE", "3")
        .env("RANK", "2")
        .args(["--", "sh", "-c", "echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR:$MASTER_PORT"])
        .run();
    o.success().stdout_is("2 0 3 1 2 job-master-0:23456\n");
    // A mismatch is refused, naming the variables.
    let d = crate::util::tempdir();
    crate::util::Run::new("accel-launch", d.path())
        .env("SKYPILOT_NODE_IPS", "10.0.0.5\n10.0.0.6")
        .env("SKYPILOT_NODE_RANK", "0")
        .env("SKYPILOT_NUM_NODES", "3")
        .args(["--cpu", "--dry-run", "train.py"])
        .run()
        .code_is(125)
        .stderr_contains("SKYPILOT_NUM_NODES=3 but SKYPILOT_NODE_IPS lists 2 addresses");
}

// ---- requeue preparation: examples/train.py resumes to the same losses ----

/// `examples/train.py --checkpoint_dir`: SIGUSR1 to accel-launch after the second of 20 epochs (forwarded to the ranks) saves
/// the state with accelerate's save_state and exits 0; the same command again resumes from it
/// (load_state) and ends with exactly the losses of a run that was never interrupted.
#[test]
fn train_py_stopped_by_usr1_resumes_to_the_same_losses() {
    use std::io::{BufRead, BufReader};
    let d = crate::util::tempdir();
    let train = train();
    let losses = |args: &[&str], out: &str| {
        let mut r = crate::util::Run::new("accel-launch", d.path())
            .arg(&train)
            .args(["--epochs", "20", "--output", out]);
        r = r.args(args);
        r.run().success();
        std::fs::read_to_string(d.path().join(out)).unwrap()
    };
    let full = losses(&[], "full.json");

    let mut child = crate::util::tool("accel-launch")
        .env("PATH", crate::util::venv_path())
        .env("HOME", d.path())
        .env("ACCEL_NO_PROGRESS", "1")
        // Lines as they are printed (accelerate's simple path leaves Python's pipe buffering on).
        .env("PYTHONUNBUFFERED", "1")
        .current_dir(d.path())
        .arg(&train)
        .args(["--epochs", "20", "--checkpoint_dir", "ckpt"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .start();
    let mut seen = String::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if line.starts_with("epoch 1:") {
            Command::new("kill")
                .args(["-USR1", &child.id().to_string()])
                .status_within(WAIT);
        }
    }
    assert!(child.wait_within(WAIT).success(), "{seen}");
    assert!(seen.contains("checkpointed at epoch"), "{seen}");
    assert!(
        !seen.contains("final_loss"),
        "the run ended before the signal: {seen}"
    );
    let resumed = losses(&["--checkpoint_dir", "ckpt"], "resumed.json");
    assert_eq!(resumed, full);
}

// ---- scripts/cluster itself ----

/// `scripts/cluster` as a user drives it, on a cluster of its own (the suite's stays untouched): `up`
/// prints the export; a second `up` keeps the running daemons (same pids) and prints the same; `env`
/// prints it; `status` lists the nodes; `down` stops every process by pid and removes the node
/// namespaces and the bridge; then `env` refuses and a second `down` is harmless.
#[test]
fn scripts_cluster_up_is_idempotent_and_down_leaves_nothing() {
    let d = crate::util::tempdir();
    let dir = d.path().join("state");
    let cluster = |args: &[&str]| {
        let o = Command::new(repo().join("scripts/cluster"))
            .args(args)
            .env("ACCEL_CLUSTER_DIR", &dir)
            .stdin(Stdio::null())
            .output_within(WAIT);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            text(&o),
        )
    };
    let pids = || -> Vec<i32> {
        let mut v: Vec<i32> = std::fs::read_dir(dir.join("run"))
            .map(|rd| {
                rd.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
                    .filter_map(|s| s.trim().parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let export = format!("export SLURM_CONF={}\n", dir.join("slurm.conf").display());
    // --owner: taken down when this test process ends, should an assertion stop it first.
    let owner = std::process::id().to_string();
    let (code, out, all) = cluster(&["up", "--nodes", "2", "--owner", &owner]);
    assert_eq!((code, out.as_str()), (Some(0), export.as_str()), "{all}");
    // munged, slurmctld, one slurmd per node and the owner's watcher (which notes its pid itself,
    // moments after `up` returns).
    let t = Instant::now();
    while pids().len() < 5 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let first = pids();
    assert_eq!(first.len(), 5, "{first:?}");
    assert!(first.iter().all(|p| alive(*p)), "{first:?}");
    let id = std::fs::read_to_string(dir.join("cluster.env"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("ID=").map(str::to_string))
        .expect("ID in cluster.env");

    let (code, out, all) = cluster(&["up", "--nodes", "2", "--owner", &owner]);
    assert_eq!((code, out.as_str()), (Some(0), export.as_str()), "{all}");
    assert_eq!(pids(), first, "a second up keeps the running cluster");
    let (code, out, all) = cluster(&["env"]);
    assert_eq!((code, out.as_str()), (Some(0), export.as_str()), "{all}");
    let (code, out, all) = cluster(&["status"]);
    assert_eq!(code, Some(0), "{all}");
    assert!(
        out.contains("n1") && out.contains("n2") && out.contains("idle"),
        "{out}"
    );

    let (code, _, all) = cluster(&["down"]);
    assert_eq!(code, Some(0), "{all}");
    let t = Instant::now();
    while first.iter().any(|p| alive(*p)) && t.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        first.iter().all(|p| !alive(*p)),
        "left running after down: {first:?}"
    );
    let netns = Command::new("ip")
        .args(["netns", "list"])
        .output_within(WAIT);
    let netns = String::from_utf8_lossy(&netns.stdout);
    assert!(!netns.contains(&format!("accel-{id}-n")), "{netns}");
    let bridge = Command::new("ip")
        .args(["link", "show", &format!("accbr{id}")])
        .output_within(WAIT);
    assert!(!bridge.status.success(), "the bridge accbr{id} is left");
    let (code, _, all) = cluster(&["env"]);
    assert_eq!(code, Some(1), "{all}");
    assert!(all.contains("no cluster running in"), "{all}");
    let (code, _, all) = cluster(&["down"]);
    assert_eq!(code, Some(0), "{all}");
}
