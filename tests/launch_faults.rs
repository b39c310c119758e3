//! Fault drills for accel-launch with real processes and real signals: each asserts the exit status,
//! generous bounds on timing, and that no process of the run survives, grandchildren included.

// Test helpers may panic, and the tests pass their own environment to the binaries.
#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

#[allow(unused_imports)]
use crate::util::{ChildExt as _, CommandExt as _, WAIT};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{launcher, survivors, venv_bin};

/// accel-launch running tests/fixtures/launch/drill.py in `mode` on two CPU ranks, its records in `dir`.
fn drill(dir: &Path, mode: &str, extra: &[&str]) -> Command {
    let mut c = launcher(dir);
    c.args(["--cpu", "--num_processes", "2"])
        .args(extra)
        .arg(crate::util::fixture("launch/drill.py"))
        .arg(dir)
        .arg(mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn wait_for(dir: &Path, names: &[&str], limit: Duration) {
    let t = Instant::now();
    while !names.iter().all(|n| dir.join(n).exists()) {
        assert!(t.elapsed() < limit, "ranks never became ready: {names:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every pid the drill recorded (its two ranks and their grandchildren) is gone `within`.
fn assert_no_survivors(dir: &Path, within: Duration) {
    survivors::assert_none_left(dir, "the drill", 4, within);
}

fn finish(child: Child) -> (i32, String, Duration) {
    let t = Instant::now();
    let out = child.output_within(WAIT);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        t.elapsed(),
    )
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status_within(WAIT);
    assert!(ok.success());
}

#[test]
fn a_rank_exit_code_passes_through_and_the_others_stop() {
    let d = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let (code, err, _) = finish(drill(d.path(), "exit7", &["--grace_period", "20"]).start());
    let took = t.elapsed();
    assert_eq!(code, 7, "{err}");
    assert!(
        err.contains("rank 1 (local rank 1)") && err.contains("exited with status 7"),
        "{err}"
    );
    assert!(
        err.contains("| rank 1 failing on purpose"),
        "the failing rank's stderr tail: {err}"
    );
    // What torchrun's ChildFailedError summary holds: when, which pid, the error file, and how the
    // other ranks here ended (it printed none of them before).
    let when = err
        .lines()
        .find_map(|l| l.strip_prefix("  time: "))
        .unwrap_or_else(|| panic!("no time line: {err}"));
    let (stamp, rest) = when
        .split_once(", pid ")
        .unwrap_or_else(|| panic!("{when}"));
    assert!(
        stamp.len() == 19 && stamp.as_bytes()[10] == b'_' && stamp.as_bytes()[4] == b'-',
        "time as torchrun's %Y-%m-%d_%H:%M:%S: {when}"
    );
    let (pid, file) = rest
        .split_once(", error file: ")
        .unwrap_or_else(|| panic!("{when}"));
    assert!(pid.parse::<u32>().is_ok(), "{when}");
    assert!(
        file.ends_with("/1/error.json"),
        "rank 1's error file: {when}"
    );
    assert!(
        err.contains("  the other ranks here: rank 0 (local rank 0) was stopped (SIGTERM)"),
        "{err}"
    );
    // The other rank honours SIGTERM at once: nowhere near the 20 s grace.
    assert!(took < Duration::from_secs(15), "{took:?}");
    assert_no_survivors(d.path(), Duration::from_secs(2));
}

#[test]
fn a_sigkilled_rank_gives_128_plus_9() {
    let d = tempfile::tempdir().unwrap();
    let (code, err, _) = finish(drill(d.path(), "sigkill", &[]).start());
    assert_eq!(code, 137, "{err}");
    assert!(err.contains("killed by signal 9 (SIGKILL)"), "{err}");
    assert_no_survivors(d.path(), Duration::from_secs(2));
}

fn stop_drill(sig: &str, code: i32) {
    let d = tempfile::tempdir().unwrap();
    // The launcher leads its own process group, as a shell's foreground job does, and the signal goes
    // to that whole group, as a terminal's Ctrl-C does: ranks must still get it exactly once.
    let child = drill(d.path(), "checkpoint", &["--grace_period", "20"])
        .process_group(0)
        .start();
    wait_for(
        d.path(),
        &["ready.0.0", "ready.1.0"],
        Duration::from_secs(60),
    );
    let t = Instant::now();
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), "--", &format!("-{}", child.id())])
        .status_within(WAIT);
    assert!(ok.success());
    let (got, err, _) = finish(child);
    assert_eq!(got, code, "{err}");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    for r in 0..2 {
        let ckpt = std::fs::read_to_string(d.path().join(format!("ckpt.{r}.SIG{sig}")))
            .unwrap_or_default();
        assert!(
            ckpt == "checkpoint\n",
            "rank {r} must checkpoint exactly once on SIG{sig}, got {ckpt:?}: {err}"
        );
    }
    assert_no_survivors(d.path(), Duration::from_secs(2));
}

#[test]
fn sigterm_to_the_launcher_reaches_every_rank_once_then_143() {
    stop_drill("TERM", 143);
}

#[test]
fn sigint_to_the_launcher_reaches_every_rank_once_then_130() {
    stop_drill("INT", 130);
}

/// An ssh disconnect: 128 + SIGHUP, as accel-launch(1) EXIT STATUS says.
#[test]
fn sighup_to_the_launcher_reaches_every_rank_once_then_129() {
    stop_drill("HUP", 129);
}

#[test]
fn ranks_ignoring_sigterm_are_killed_after_the_grace() {
    let d = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let (code, err, _) = finish(drill(d.path(), "ignore_term", &["--grace_period", "1.5"]).start());
    let ended = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let took = t.elapsed();
    assert_eq!(code, 3, "{err}");
    // From rank 0's own exit (the failure that starts the grace), not from spawn: interpreter
    // start-up must not count towards the grace.
    let failed: f64 = std::fs::read_to_string(d.path().join("exit.0"))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        ended - failed >= 1.5,
        "SIGKILL came before the grace: {:.3} s after the failure",
        ended - failed
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert_no_survivors(d.path(), Duration::from_secs(2));
}

/// While the launcher stops the others after a failure (rank 1 ignores SIGTERM, grace 60 s), a Ctrl-C
/// means "now": SIGKILL at once, and the run still ends with the failing rank's status, not 130.
#[test]
fn ctrl_c_while_stopping_for_a_failure_kills_and_keeps_its_status() {
    let d = tempfile::tempdir().unwrap();
    let child = drill(d.path(), "ignore_term", &["--grace_period", "60"]).start();
    wait_for(d.path(), &["exit.0"], Duration::from_secs(60));
    // The launcher has seen rank 0 fail and sent SIGTERM, which rank 1 ignores.
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    signal(&child, "INT");
    let (code, err, _) = finish(child);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("killing 1 rank"), "{err}");
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "{:?}\n{err}",
        t.elapsed()
    );
    assert_no_survivors(d.path(), Duration::from_secs(2));
}

#[test]
fn a_sigkilled_launcher_leaves_no_survivors() {
    let d = tempfile::tempdir().unwrap();
    let child = drill(d.path(), "sleep", &["--grace_period", "20"]).start();
    wait_for(
        d.path(),
        &["ready.0.0", "ready.1.0"],
        Duration::from_secs(60),
    );
    signal(&child, "KILL");
    let _ = finish(child);
    // Ranks get SIGTERM from PDEATHSIG and end; the guards then kill what is left of their groups
    // (grandchildren) at once, well before the 20 s grace.
    assert_no_survivors(d.path(), Duration::from_secs(8));
}

#[test]
fn a_failed_rank_restarts_the_whole_group() {
    let d = tempfile::tempdir().unwrap();
    let (code, err, _) = finish(
        drill(
            d.path(),
            "fail_restart",
            &["--max_restarts", "2", "--grace_period", "5"],
        )
        .start(),
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("restarting all local ranks (restart 1 of 2)"),
        "{err}"
    );
    for r in 0..2 {
        assert!(
            d.path().join(format!("pid.{r}.1")).exists(),
            "rank {r} not restarted with TORCHELASTIC_RESTART_COUNT=1"
        );
        assert!(d.path().join(format!("done.{r}")).exists());
        assert!(
            !d.path().join(format!("pid.{r}.2")).exists(),
            "restarted once too often"
        );
    }
    assert_no_survivors(d.path(), Duration::from_secs(2));
}

#[test]
fn sigusr1_reaches_every_rank() {
    let d = tempfile::tempdir().unwrap();
    let child = drill(d.path(), "usr1", &[]).start();
    wait_for(
        d.path(),
        &["ready.0.0", "ready.1.0"],
        Duration::from_secs(60),
    );
    signal(&child, "USR1");
    let (code, err, _) = finish(child);
    assert_eq!(code, 0, "SIGUSR1 must not stop the run by itself: {err}");
    for r in 0..2 {
        assert!(
            d.path().join(format!("usr1.{r}")).exists(),
            "rank {r} did not get SIGUSR1"
        );
    }
    assert_no_survivors(d.path(), Duration::from_secs(2));
}

#[test]
fn launcher_failures_have_their_own_codes() {
    let d = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = launcher(d.path()).args(args).output_within(WAIT);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--no_python", "/nonexistent/prog"]);
    assert_eq!(code, 127, "{err}");
    assert!(err.contains("not found"), "{err}");
    let noexec = d.path().join("noexec.sh");
    std::fs::write(&noexec, "#!/bin/sh\n").unwrap();
    let (code, err) = run(&["--no_python", noexec.to_str().unwrap()]);
    assert_eq!(code, 126, "{err}");
    let busy = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let (code, err) = run(&[
        "--cpu",
        "--num_processes",
        "2",
        "--main_process_port",
        &port,
        "--no_python",
        "true",
    ]);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains(&format!("port {port} is already in use")),
        "{err}"
    );
    let (code, err) = run(&["--num_proceses", "2", "x.py"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--num_proceses"), "{err}");
}

#[test]
fn logs_go_to_per_rank_files_with_console_prefix_and_filter() {
    let d = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let out = launcher(d.path())
            .args(["--cpu", "--num_processes", "2"])
            .args(extra)
            .args([
                "--no_python",
                "sh",
                "-c",
                "echo out $RANK; echo err $LOCAL_RANK >&2",
            ])
            .output_within(WAIT);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let logs = d.path().join("logs");
    let (out, err) = run(&[
        "--log_dir",
        logs.to_str().unwrap(),
        "--rank_prefix",
        "[{rank}] ",
        "--local_ranks_filter",
        "1",
    ]);
    assert_eq!(out, "[1] out 1\n");
    assert_eq!(err, "[1] err 1\n");
    for r in 0..2 {
        let f =
            |s: &str| std::fs::read_to_string(logs.join(format!("attempt_0/{r}/{s}.log"))).unwrap();
        assert_eq!(f("stdout"), format!("out {r}\n"));
        assert_eq!(f("stderr"), format!("err {r}\n"));
    }
    let (out, _) = run(&[
        "--tee",
        "3",
        "--log_dir",
        logs.to_str().unwrap(),
        "--log_template",
        "n{node}/r{rank}-a{attempt}.{stream}",
    ]);
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(lines, ["[default0]:out 0", "[default1]:out 1"]);
    assert!(logs.join("n0/r1-a0.stdout").exists());
}

#[test]
fn delegation_to_torchrun_deepspeed_and_mpirun_names_the_program() {
    let d = tempfile::tempdir().unwrap();
    let venv_bin = venv_bin();
    let run = |path: &std::ffi::OsStr, args: &[&str]| {
        let out = launcher(d.path())
            .env("PATH", path)
            .args(args)
            .output_within(WAIT);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let with_venv =
        std::env::join_paths([venv_bin.as_os_str(), "/usr/bin".as_ref(), "/bin".as_ref()]).unwrap();
    let (code, out, err) = run(
        &with_venv,
        &[
            "--dry-run",
            "--cpu",
            "--num_processes",
            "4",
            "--num_machines",
            "2",
            "--main_process_ip",
            "10.0.0.1",
            "--rdzv_backend",
            "c10d",
            "train.py",
            "--x",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(&format!(
            "# delegated to {}",
            venv_bin.join("torchrun").display()
        )),
        "{out}"
    );
    assert!(
        out.contains(
            "--nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 10.0.0.1:29400"
        ),
        "{out}"
    );
    assert!(
        out.contains(" train.py --x\n") && out.contains("ACCELERATE_USE_CPU=True"),
        "{out}"
    );
    let bare = std::ffi::OsString::from("/nonexistent");
    let (code, _, err) = run(&bare, &["--rdzv_backend", "c10d", "train.py"]);
    assert_eq!(code, 127, "{err}");
    assert!(
        err.contains("needs `torchrun`, which is not installed"),
        "{err}"
    );
    let (code, _, err) = run(
        &bare,
        &[
            "--use_deepspeed",
            "--num_processes",
            "4",
            "--num_machines",
            "2",
            "--machine_rank",
            "0",
            "--main_process_ip",
            "10.0.0.1",
            "--deepspeed_hostfile",
            "/etc/hostfile",
            "train.py",
        ],
    );
    assert_eq!(code, 127, "{err}");
    assert!(err.contains("needs `deepspeed`"), "{err}");
    let (code, _, err) = run(
        &bare,
        &[
            "--cpu",
            "--num_processes",
            "4",
            "--mpirun_hostfile",
            "/etc/hostfile",
            "train.py",
        ],
    );
    assert_eq!(code, 127, "{err}");
    assert!(err.contains("needs `mpirun`"), "{err}");
}

#[test]
fn topology_errors_come_before_anything_is_spawned() {
    let d = tempfile::tempdir().unwrap();
    let run = |envs: &[(&str, &str)], args: &[&str]| {
        let out = launcher(d.path())
            .envs(envs.iter().copied())
            .args(args)
            .args(["--no_python", "touch"])
            .arg(d.path().join("spawned"))
            .output_within(WAIT);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(
        &[],
        &[
            "--cpu",
            "--num_processes",
            "4",
            "--num_machines",
            "2",
            "--main_process_ip",
            "10.0.0.1",
        ],
    );
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("no --machine_rank"), "{err}");
    let (code, err) = run(
        &[],
        &[
            "--cpu",
            "--num_processes",
            "4",
            "--num_machines",
            "2",
            "--machine_rank",
            "1",
        ],
    );
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("no --main_process_ip"), "{err}");
    let slurm = [
        ("SLURM_JOB_ID", "9"),
        ("SLURM_JOB_NODELIST", "localhost,127.0.0.1"),
        ("SLURM_NNODES", "2"),
        ("SLURM_NODEID", "1"),
    ];
    let (code, err) = run(&slurm, &["--cpu"]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("loopback"), "{err}");
    let mut per_node = slurm.to_vec();
    per_node.push(("SLURM_NTASKS_PER_NODE", "4"));
    let (code, err) = run(&per_node, &["--cpu"]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("4 tasks per node"), "{err}");
    assert!(!d.path().join("spawned").exists());
}

#[test]
fn a_lost_port_race_is_retried_on_a_new_port_and_error_files_are_reported() {
    let d = tempfile::tempdir().unwrap();
    let seen = d.path().join("first_port");
    // Rank 0 plays a TCPStore that lost its automatically chosen port once.
    let script = format!(
        "if [ \"$RANK\" = 0 ] && [ ! -e {p} ]; then echo $MASTER_PORT > {p}; echo 'code: -98, name: EADDRINUSE, message: address already in use' >&2; exit 1; fi; \
         if [ \"$RANK\" = 0 ] && [ \"$(cat {p})\" = \"$MASTER_PORT\" ]; then exit 9; fi; exit 0",
        p = seen.display()
    );
    let out = launcher(d.path())
        .args([
            "--cpu",
            "--num_processes",
            "2",
            "--no_python",
            "sh",
            "-c",
            &script,
        ])
        .output_within(WAIT);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("retrying on port"), "{err}");

    // A rank that fails the way torch's @record does leaves its message in TORCHELASTIC_ERROR_FILE.
    let record = r#"if [ "$RANK" = 1 ]; then printf '{"message": {"message": "ValueError: boom from rank 1", "extraInfo": {"py_callstack": "", "timestamp": "1"}}}' > "$TORCHELASTIC_ERROR_FILE"; exit 1; fi; sleep 30"#;
    let out = launcher(d.path())
        .args([
            "--cpu",
            "--num_processes",
            "2",
            "--no_python",
            "sh",
            "-c",
            record,
        ])
        .output_within(WAIT);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("error: ValueError: boom from rank 1"), "{err}");
}

/// The daemons the ranks double-forked, by pid.
fn daemons(dir: &Path) -> Vec<i32> {
    let pids: Vec<i32> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().to_string_lossy().into_owned();
            (name.starts_with("gc.daemon.") && !name.ends_with(".tmp"))
                .then(|| std::fs::read_to_string(e.path()).ok()?.trim().parse().ok())
                .flatten()
        })
        .collect();
    assert_eq!(pids.len(), 2, "each rank records its daemon: {pids:?}");
    pids
}

fn daemon_drill(mode: &str, code: i32) {
    let d = tempfile::tempdir().unwrap();
    let (got, err, _) = finish(drill(d.path(), mode, &["--grace_period", "20"]).start());
    assert_eq!(got, code, "{err}");
    let _ = daemons(d.path());
    // Daemons are in sessions of their own, re-parented away from their rank: only a launcher
    // that adopted them (a child subreaper) can find them.
    assert_no_survivors(d.path(), Duration::from_secs(5));
}

#[test]
fn a_double_forked_daemon_dies_with_a_clean_run() {
    daemon_drill("daemon_ok", 0);
}

#[test]
fn a_double_forked_daemon_dies_with_a_failed_run() {
    daemon_drill("daemon_fail", 5);
}

#[test]
fn a_double_forked_daemon_dies_with_a_sigkilled_launcher() {
    let d = tempfile::tempdir().unwrap();
    let child = drill(d.path(), "daemon_sleep", &["--grace_period", "3"]).start();
    wait_for(
        d.path(),
        &["ready.0.0", "ready.1.0"],
        Duration::from_secs(60),
    );
    let _ = daemons(d.path());
    // The launcher records the processes of the run outside the ranks' groups for the guards
    // every 100 ms: give it a few rounds.
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, "KILL");
    let _ = finish(child);
    assert_no_survivors(d.path(), Duration::from_secs(10));
}

/// The process state letter in /proc (`T` stopped), or None once it is gone.
fn state(pid: i32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit(')').next()?.trim_start().chars().next()
}

fn wait_state(pids: &[i32], want: impl Fn(char) -> bool, what: &str) {
    let t = Instant::now();
    loop {
        let states: Vec<Option<char>> = pids.iter().map(|p| state(*p)).collect();
        if states.iter().all(|s| s.is_some_and(&want)) {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{what}: states of {pids:?} are {states:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Lines of the launcher's stderr as they come.
fn stderr_lines(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_line(rx: &std::sync::mpsc::Receiver<String>, needle: &str) -> String {
    let mut seen = String::new();
    let until = Instant::now() + Duration::from_secs(30);
    while let Ok(l) = rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
        seen.push_str(&l);
        seen.push('\n');
        if l.contains(needle) {
            return seen;
        }
    }
    panic!("no `{needle}` on stderr: {seen}");
}

#[test]
fn ctrl_c_says_what_it_stops_and_a_second_ctrl_c_kills() {
    let d = tempfile::tempdir().unwrap();
    // The ranks ignore SIGINT: only the second Ctrl-C ends the run before the 60 s grace.
    let mut child = drill(d.path(), "ignore_int", &["--grace_period", "60"])
        .process_group(0)
        .start();
    let lines = stderr_lines(&mut child);
    wait_for(
        d.path(),
        &["ready.0.0", "ready.1.0"],
        Duration::from_secs(60),
    );
    let ctrl_c = || {
        let ok = Command::new("kill")
            .args(["-INT", "--", &format!("-{}", child.id())])
            .status_within(WAIT);
        assert!(ok.success());
    };
    ctrl_c();
    wait_line(&lines, "stopping 2 ranks (Ctrl-C again to kill)");
    let t = Instant::now();
    ctrl_c();
    let status = child.wait_within(WAIT);
    assert_eq!(status.code(), Some(130));
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "the second Ctrl-C did not kill: {:?}",
        t.elapsed()
    );
    assert_no_survivors(d.path(), Duration::from_secs(2));
}

#[test]
fn ctrl_z_stops_the_ranks_and_fg_resumes_them() {
    let d = tempfile::tempdir().unwrap();
    // As a shell's foreground job: the launcher leads its own group and the terminal's signals go
    // to that group (the ranks lead groups of their own).
    let mut child = drill(d.path(), "checkpoint", &["--grace_period", "20"])
        .process_group(0)
        .start();
    let _lines = stderr_lines(&mut child);
    wait_for(
        d.path(),
        &["ready.0.0", "ready.1.0"],
        Duration::from_secs(60),
    );
    let group = |sig: &str| {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), "--", &format!("-{}", child.id())])
            .status_within(WAIT);
        assert!(ok.success());
    };
    let ranks: Vec<i32> = (0..2)
        .map(|r| {
            std::fs::read_to_string(d.path().join(format!("pid.{r}.0")))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        })
        .collect();
    let launcher_pid = child.id() as i32;
    group("TSTP");
    wait_state(&ranks, |s| s == 'T', "Ctrl-Z must stop the ranks");
    wait_state(&[launcher_pid], |s| s == 'T', "and the launcher");
    group("CONT");
    wait_state(&ranks, |s| s != 'T', "fg must resume the ranks");
    wait_state(&[launcher_pid], |s| s != 'T', "and the launcher");
    group("TERM");
    let status = child.wait_within(WAIT);
    assert_eq!(status.code(), Some(143));
    for r in 0..2 {
        let ckpt =
            std::fs::read_to_string(d.path().join(format!("ckpt.{r}.SIGTERM"))).unwrap_or_default();
        assert_eq!(
            ckpt, "checkpoint\n",
            "rank {r} stopped normally after resuming"
        );
    }
    assert_no_survivors(d.path(), Duration::from_secs(2));
}

#[test]
fn a_stopped_run_still_ends_on_sigterm() {
    let d = tempfile::tempdir().unwrap();
    let mut child = drill(d.path(), "checkpoint", &["--grace_period", "20"])
        .process_group(0)
        .start();
    let _lines = stderr_lines(&mut child);
    wait_for(
        d.path(),
        &["ready.0.0", "ready.1.0"],
        Duration::from_secs(60),
    );
    let ranks: Vec<i32> = (0..2)
        .map(|r| {
            std::fs::read_to_string(d.path().join(format!("pid.{r}.0")))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        })
        .collect();
    let group = |sig: &str| {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), "--", &format!("-{}", child.id())])
            .status_within(WAIT);
        assert!(ok.success());
    };
    group("TSTP");
    wait_state(&ranks, |s| s == 'T', "Ctrl-Z must stop the ranks");
    wait_state(&[child.id() as i32], |s| s == 'T', "and the launcher");
    // What a shell's `kill %1` does to a stopped job: SIGTERM, then SIGCONT.
    group("TERM");
    group("CONT");
    let status = child.wait_within(WAIT);
    assert_eq!(status.code(), Some(143));
    for r in 0..2 {
        let ckpt =
            std::fs::read_to_string(d.path().join(format!("ckpt.{r}.SIGTERM"))).unwrap_or_default();
        assert_eq!(ckpt, "checkpoint\n", "rank {r}");
    }
    assert_no_survivors(d.path(), Duration::from_secs(2));
}
