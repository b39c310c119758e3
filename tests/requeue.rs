//! `accel-launch --slurm_requeue` on the real local SLURM cluster (see tests/slurm.rs): SLURM's warning
//! signal, the ranks' checkpoint, `scontrol requeue` once per job, and the requeued job resuming to the
//! same final loss as a run that was never interrupted. Also its refusals before anything starts.

#[allow(unused_imports)]
use crate::util::{ChildExt as _, CommandExt as _, WAIT};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::slurm::{job_field, slurm, text};
use crate::util::{repo, tempdir, Run};

/// The batch script: its output appended across requeues. On each node a launcher writes its report
/// (node N, restart R) and each rank notes its restart count and its launcher (the parent of the shell
/// that execs Python) before training.
fn job_script(dir: &Path, name: &str, launch_flags: &str) -> std::path::PathBuf {
    let train = repo().join("examples/train.py");
    std::fs::write(
        dir.join("rank.sh"),
        "echo \"restart=${SLURM_RESTART_COUNT:-0} rank=$RANK launcher=$PPID host=$(hostname)\" >> ranks.txt\nexec python -u \"$@\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("node.sh"),
        format!(
            "exec accel-launch --cpu {launch_flags} --grace_period 60 --report_json report.$SLURM_NODEID.${{SLURM_RESTART_COUNT:-0}}.json --no_python sh rank.sh {} --epochs 16 --checkpoint_dir ckpt\n",
            train.display()
        ),
    )
    .unwrap();
    let body = "#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=1 --cpus-per-task=2 --gpus-per-node=0 --time=10\n#SBATCH --requeue --open-mode=append\necho \"start restart=${SLURM_RESTART_COUNT:-0}\"\nsrun --kill-on-bad-exit=1 sh node.sh\necho \"srun exit $?\"\n";
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

/// `status` in a launcher's --report_json.
fn reported(dir: &Path, node: u32, restart: u32) -> i64 {
    let p = dir.join(format!("report.{node}.{restart}.json"));
    let text = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("no report from node {node} in run {restart}: {e}"));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["status"].as_i64().unwrap()
}

fn submit(dir: &Path, script: &Path, extra: &[&str]) -> u32 {
    // `sbatch --wait` lasts as long as the whole job (a training run on two nodes of a loaded machine).
    let limit = if extra.contains(&"--wait") {
        Duration::from_secs(360)
    } else {
        WAIT
    };
    let o = slurm("sbatch", dir)
        .args(["--parsable", "--output=job-%j.out"])
        .args(extra)
        .arg(script)
        .output_within(limit);
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .split(';')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no job id from sbatch: {}", text(&o)))
}

fn log(dir: &Path, id: u32) -> String {
    std::fs::read_to_string(dir.join(format!("job-{id}.out"))).unwrap_or_default()
}

/// Waits until `ready(log)`, failing with the log after `limit`.
fn wait_log(dir: &Path, id: u32, what: &str, limit: Duration, ready: impl Fn(&str) -> bool) {
    let t = Instant::now();
    loop {
        let l = log(dir, id);
        if ready(&l) {
            return;
        }
        assert!(
            t.elapsed() < limit,
            "job {id}: no {what} after {limit:?}:\n{l}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn wait_state(dir: &Path, id: u32, want: &[&str], limit: Duration) -> String {
    let t = Instant::now();
    loop {
        let s = job_field(dir, id, "JobState");
        if want.contains(&s.as_str()) {
            return s;
        }
        assert!(
            t.elapsed() < limit,
            "job {id} is {s}, not {want:?}, after {limit:?}:\n{}",
            log(dir, id)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The part of the log after the last line that starts with `start restart=N`.
fn run_part(l: &str, restart: u32) -> &str {
    let marker = format!("start restart={restart}\n");
    l.rfind(&marker).map_or("", |i| &l[i + marker.len()..])
}

fn final_loss(l: &str) -> String {
    l.lines()
        .find_map(|x| x.strip_prefix("final_loss=").map(str::to_string))
        .unwrap_or_else(|| panic!("no final_loss in:\n{l}"))
}

fn release(dir: &Path, id: u32) {
    // A requeued job waits for its BeginTime (about 2 minutes); the test need not.
    let o = slurm("scontrol", dir)
        .args(["update", &format!("jobid={id}"), "StartTime=now"])
        .output_within(WAIT);
    assert!(o.status.success(), "{}", text(&o));
}

/// A 2-node job warned twice: first by SLURM itself (`scancel --signal=USR1`, which the step daemon
/// delivers to every process of the step on both nodes), then on node 1's launcher alone (the warning
/// must travel to node 0 over the control plane). Each time the ranks checkpoint, node 0 requeues the
/// job exactly once, and every launcher exits 123; the third run completes with the final loss of an
/// uninterrupted job, and each run's ranks saw SLURM_RESTART_COUNT 0, 1, 2.
#[test]
fn a_warned_job_is_requeued_once_and_ends_with_the_uninterrupted_loss() {
    let d = tempdir();
    let minutes = Duration::from_secs(240);

    // The uninterrupted job: same world, same script, no warning.
    let plain = d.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let script = job_script(&plain, "plain.sbatch", "");
    let id = submit(&plain, &script, &["--wait"]);
    let want = final_loss(&log(&plain, id));
    assert_eq!(job_field(&plain, id, "ExitCode"), "0:0");

    let w = d.path().join("warned");
    std::fs::create_dir(&w).unwrap();
    let script = job_script(&w, "warned.sbatch", "--slurm_requeue");
    let id = submit(&w, &script, &[]);

    // Run 0: SLURM's own delivery, once training is under way.
    wait_log(&w, id, "epoch 1", minutes, |l| {
        run_part(l, 0).contains("epoch 1:")
    });
    let o = slurm("scancel", &w)
        .args(["--signal=USR1", &id.to_string()])
        .output_within(WAIT);
    assert!(o.status.success(), "{}", text(&o));
    wait_state(&w, id, &["PENDING"], minutes);
    assert_eq!(job_field(&w, id, "Restarts"), "1", "{}", log(&w, id));
    let l = log(&w, id);
    let run0 = run_part(&l, 0);
    assert!(run0.contains("checkpointed at epoch"), "{l}");
    assert!(
        !run0.contains("final_loss"),
        "the run ended before the warning: {l}"
    );
    assert_eq!(
        run0.matches(&format!("job {id} requeued (scontrol requeue)"))
            .count(),
        1,
        "node 0 alone requeues, once: {l}"
    );
    assert!(run0.contains("SLURM delivered it to every process"), "{l}");
    // The requeue ends the batch script too; each launcher's report says 123.
    assert_eq!((reported(&w, 0, 0), reported(&w, 1, 0)), (123, 123), "{l}");

    // Run 1: the warning reaches node 1's launcher only.
    release(&w, id);
    wait_log(&w, id, "a resumed epoch", minutes, |l| {
        let p = run_part(l, 1);
        p.contains("resumed from") && p.contains("epoch ")
    });
    let ranks = std::fs::read_to_string(w.join("ranks.txt")).unwrap();
    let launcher: i32 = ranks
        .lines()
        .filter(|x| x.starts_with("restart=1 ") && x.contains(" rank=2 "))
        .find_map(|x| {
            x.split_whitespace()
                .find_map(|kv| kv.strip_prefix("launcher="))
        })
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("rank 2 of run 1 noted no launcher:\n{ranks}"));
    let o = std::process::Command::new("kill")
        .args(["-USR1", &launcher.to_string()])
        .output_within(WAIT);
    assert!(o.status.success(), "{}", text(&o));
    wait_state(&w, id, &["PENDING"], minutes);
    assert_eq!(job_field(&w, id, "Restarts"), "2", "{}", log(&w, id));
    let l = log(&w, id);
    let run1 = run_part(&l, 1);
    assert!(run1.contains("checkpointed at epoch"), "{l}");
    assert!(
        run1.contains("node 1 (n2) received SIGUSR1 (SLURM's warning): forwarding SIGUSR1"),
        "node 0 learns of node 1's warning and forwards it: {l}"
    );
    assert_eq!(
        run1.matches(&format!("job {id} requeued (scontrol requeue)"))
            .count(),
        1,
        "{l}"
    );
    assert_eq!((reported(&w, 0, 1), reported(&w, 1, 1)), (123, 123), "{l}");

    // Run 2: to the end, with the uninterrupted job's loss.
    release(&w, id);
    let end = wait_state(&w, id, &["COMPLETED", "FAILED"], minutes);
    let l = log(&w, id);
    assert_eq!(end, "COMPLETED", "{l}");
    assert_eq!(final_loss(run_part(&l, 2)), want, "{l}");
    assert_eq!((reported(&w, 0, 2), reported(&w, 1, 2)), (0, 0), "{l}");
    let ranks = std::fs::read_to_string(w.join("ranks.txt")).unwrap();
    for restart in 0..3 {
        for rank in 0..4 {
            assert!(
                ranks.contains(&format!("restart={restart} rank={rank} ")),
                "rank {rank} of run {restart} did not see SLURM_RESTART_COUNT={restart}:\n{ranks}"
            );
        }
    }
}

/// SLURM's own timer rather than scancel: a 1-minute job submitted with `--signal=USR2@50`, the warning
/// signal changed through ACCEL_LAUNCH_REQUEUE_SIGNAL. Every rank gets USR2 once (and not USR1's
/// default handling), node 0 requeues the job once, both launchers exit 123.
#[test]
fn slurms_timed_warning_with_a_custom_signal_requeues_the_job() {
    let d = tempdir();
    let w = d.path();
    std::fs::write(
        w.join("rank.py"),
        "import os, signal, sys, time\n\
         r = os.environ['RANK']\n\
         def warned(s, f):\n\
         \x20   with open('got-' + r, 'a') as f:\n\
         \x20       f.write(signal.Signals(s).name + '\\n')\n\
         \x20   time.sleep(1)\n\
         \x20   sys.exit(0)\n\
         signal.signal(signal.SIGUSR2, warned)\n\
         time.sleep(300)\n",
    )
    .unwrap();
    std::fs::write(
        w.join("timed.sbatch"),
        "#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=1 --cpus-per-task=2 --gpus-per-node=0 --time=1\n#SBATCH --requeue --open-mode=append --signal=USR2@50\necho \"start restart=${SLURM_RESTART_COUNT:-0}\"\nexport ACCEL_LAUNCH_REQUEUE_SIGNAL=USR2\nsrun --kill-on-bad-exit=1 sh -c 'exec accel-launch --cpu --slurm_requeue --grace_period 20 --report_json report.$SLURM_NODEID.${SLURM_RESTART_COUNT:-0}.json rank.py'\necho \"srun exit $?\"\n",
    )
    .unwrap();
    let id = submit(w, &w.join("timed.sbatch"), &[]);
    wait_state(w, id, &["RUNNING"], Duration::from_secs(60));
    // slurmctld checks time limits about every 30 s: the warning comes 10–45 s in.
    let state = wait_state(
        w,
        id,
        &["PENDING", "COMPLETED", "FAILED", "TIMEOUT"],
        Duration::from_secs(180),
    );
    let l = log(w, id);
    assert_eq!(state, "PENDING", "the job was not requeued:\n{l}");
    assert_eq!(job_field(w, id, "Restarts"), "1", "{l}");
    let o = slurm("scancel", w).arg(id.to_string()).output_within(WAIT);
    assert!(o.status.success(), "{}", text(&o));
    let run0 = run_part(&l, 0);
    assert_eq!(
        run0.matches(&format!("job {id} requeued (scontrol requeue)"))
            .count(),
        1,
        "{l}"
    );
    for r in 0..4 {
        let got = std::fs::read_to_string(w.join(format!("got-{r}"))).unwrap_or_default();
        assert_eq!(got, "SIGUSR2\n", "rank {r}:\n{l}");
    }
    assert_eq!((reported(w, 0, 0), reported(w, 1, 0)), (123, 123), "{l}");
}

/// SLURM's warning to a launcher still joining (node 1's launcher starts 5 minutes late): node 0
/// leaves the join at once and requeues the job, once, as it does once ranks run, and exits 123;
/// no rank ever started.
#[test]
fn the_warning_to_a_launcher_still_joining_requeues_the_job() {
    let d = tempdir();
    let w = d.path();
    std::fs::write(
        w.join("join.sbatch"),
        "#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=1 --cpus-per-task=2 --gpus-per-node=0 --time=10\n#SBATCH --requeue --open-mode=append\necho \"start restart=${SLURM_RESTART_COUNT:-0}\"\nsrun --kill-on-bad-exit=1 sh -c '[ \"$SLURM_NODEID\" = 1 ] && sleep 300; echo $$ > launcher.$SLURM_NODEID; exec accel-launch --cpu --slurm_requeue --grace_period 20 --report_json report.$SLURM_NODEID.${SLURM_RESTART_COUNT:-0}.json --no_python touch started.$SLURM_NODEID'\necho \"srun exit $?\"\n",
    )
    .unwrap();
    let id = submit(w, &w.join("join.sbatch"), &[]);
    let t = Instant::now();
    let launcher = loop {
        if let Some(pid) = std::fs::read_to_string(w.join("launcher.0"))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        {
            break pid;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "node 0's launcher never started:\n{}",
            log(w, id)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // Past its start: joining, with its signal handlers in place, and node 1 still far off.
    std::thread::sleep(Duration::from_secs(3));
    let o = std::process::Command::new("kill")
        .args(["-USR1", &launcher.to_string()])
        .output_within(WAIT);
    assert!(o.status.success(), "{}", text(&o));
    let warned = Instant::now();
    let state = wait_state(
        w,
        id,
        &["PENDING", "COMPLETED", "FAILED", "CANCELLED"],
        Duration::from_secs(120),
    );
    let took = warned.elapsed();
    let l = log(w, id);
    let restarts = job_field(w, id, "Restarts");
    let o = slurm("scancel", w).arg(id.to_string()).output_within(WAIT);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(state, "PENDING", "the job was not requeued:\n{l}");
    assert_eq!(restarts, "1", "{l}");
    assert!(
        took < Duration::from_secs(60),
        "requeued {took:?} after the warning, not at once (node 1 comes after 300 s):\n{l}"
    );
    let run0 = run_part(&l, 0);
    assert_eq!(
        run0.matches(&format!("job {id} requeued (scontrol requeue)"))
            .count(),
        1,
        "{l}"
    );
    assert!(run0.contains("while joining"), "{l}");
    assert_eq!(reported(w, 0, 0), 123, "{l}");
    assert!(!w.join("started.0").exists(), "a rank started:\n{l}");
}

/// A job submitted with --no-requeue is refused before any rank starts, naming the job.
#[test]
fn a_job_that_cannot_be_requeued_is_refused_before_the_run() {
    let d = tempdir();
    std::fs::write(
        d.path().join("noreq.sbatch"),
        "#!/bin/bash\n#SBATCH --nodes=1 --ntasks=1 --cpus-per-task=2 --time=5\nsrun accel-launch --cpu --slurm_requeue --no_python touch started\necho \"srun exit $?\"\n",
    )
    .unwrap();
    let id = submit(
        d.path(),
        &d.path().join("noreq.sbatch"),
        &["--wait", "--no-requeue"],
    );
    let l = log(d.path(), id);
    assert!(
        l.contains(&format!(
            "accel-launch: error: --slurm_requeue: job {id} is not requeueable"
        )),
        "{l}"
    );
    assert!(l.contains("sbatch --requeue"), "{l}");
    assert!(l.contains("srun exit 125"), "{l}");
    assert!(!d.path().join("started").exists(), "{l}");
}

/// What can be checked without a cluster: outside a job, no scontrol, slurmctld unreachable, bad
/// signals and values; each a clear error with its documented status, and nothing started.
#[test]
fn slurm_requeue_refusals_have_their_status_and_start_nothing() {
    let d = tempdir();
    let touch = ["--cpu", "--no_python", "touch", "started"];
    let launch = |env: &[(&str, &str)], flags: &[&str]| {
        let mut r = Run::new("accel-launch", d.path()).args(flags).args(touch);
        for (k, v) in env {
            r = r.env(k, v);
        }
        r.run()
    };
    let o = launch(&[], &["--slurm_requeue"]);
    o.code_is(2)
        .stderr_contains("--slurm_requeue needs a SLURM job");
    let o = launch(&[("ACCEL_LAUNCH_SLURM_REQUEUE", "1")], &[]);
    o.code_is(2).stderr_contains("SLURM_JOB_ID is not set");
    let o = launch(&[("ACCEL_LAUNCH_SLURM_REQUEUE", "maybe")], &[]);
    o.code_is(2)
        .stderr_contains("invalid ACCEL_LAUNCH_SLURM_REQUEUE: `maybe`");
    let o = launch(&[], &["--requeue_signal", "USR2"]);
    o.code_is(2)
        .stderr_contains("--requeue_signal needs --slurm_requeue");
    let o = launch(&[], &["--slurm_requeue", "--requeue_signal", "TERM"]);
    o.code_is(2)
        .stderr_contains("--requeue_signal SIGTERM cannot be the requeue warning");
    let o = launch(&[], &["--slurm_requeue", "--requeue_signal", "USR9"]);
    o.code_is(2)
        .stderr_contains("--requeue_signal `USR9` is not a signal name or number");
    let o = launch(
        &[("SLURM_JOB_ID", "7"), ("PATH", "/nonexistent")],
        &["--slurm_requeue"],
    );
    o.code_is(125)
        .stderr_contains("`scontrol` was not found on PATH");
    let o = launch(
        &[("SLURM_JOB_ID", "7")],
        &[
            "--slurm_requeue",
            "--rdzv_backend",
            "c10d",
            "--num_processes",
            "2",
        ],
    );
    o.code_is(2)
        .stderr_contains("--slurm_requeue works with the ranks accel-launch starts");

    // slurmctld at a port where nothing listens: scontrol's own message, before anything starts.
    let conf = std::fs::read_to_string(&crate::slurm::cluster().conf).unwrap();
    let dead: String = conf
        .lines()
        .map(|l| {
            if l.starts_with("SlurmctldPort=") {
                "SlurmctldPort=9".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let dead_conf = d.path().join("dead.conf");
    std::fs::write(&dead_conf, dead).unwrap();
    let o = launch(
        &[
            ("SLURM_JOB_ID", "7"),
            ("SLURM_CONF", dead_conf.to_str().unwrap()),
        ],
        &["--slurm_requeue"],
    );
    o.code_is(125).stderr_contains(
        "`scontrol show job 7` failed: slurm_load_jobs error: Unable to contact slurm controller",
    );
    assert!(!d.path().join("started").exists());

    // --dry-run shows it.
    let o = Run::new("accel-launch", d.path())
        .args(["--slurm_requeue", "--requeue_signal", "usr2", "--dry-run"])
        .args(touch)
        .env("SLURM_JOB_ID", "7")
        .run();
    o.success()
        .stdout_contains("slurm_requeue = on SIGUSR2: the ranks get the grace period, then node 0 runs `scontrol requeue $SLURM_JOB_ID`");
}
