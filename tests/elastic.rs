//! `--rdzv_backend c10d` hands the job to the real torchrun: accel's console and log options are
//! translated to torchrun's own, or refused — never silently dropped.

use crate::util::free_port;
use std::path::Path;

use crate::util::{tempdir, venv_python, Output, Run};

fn launch(home: &Path, args: &[&str]) -> Output {
    Run::new("accel-launch", home)
        .env("HF_HOME", home)
        .env("ACCEL_PYTHON", venv_python())
        .args(args.iter().copied())
        .run()
}

#[test]
fn console_and_log_options_reach_torchrun() {
    let d = tempdir();
    let logs = d.path().join("logs");
    let port = free_port().to_string();
    let script = d.path().join("hello.py");
    std::fs::write(
        &script,
        "import os\nprint('hello from', os.environ['RANK'], flush=True)\n",
    )
    .unwrap();
    let logs_s = logs.display().to_string();
    let script_s = script.display().to_string();
    let run_args = |dry: bool, prefix: &'static str| {
        let mut a: Vec<&str> = if dry { vec!["--dry-run"] } else { vec![] };
        a.extend([
            "--cpu",
            "--num_processes",
            "2",
            "--rdzv_backend",
            "c10d",
            "--main_process_port",
            &port,
            "--log_dir",
            &logs_s,
            "--rank_prefix",
            prefix,
            "--local_ranks_filter",
            "1",
            &script_s,
        ]);
        a
    };
    launch(d.path(), &run_args(true, "[r{rank} $x] "))
        .success()
        .stdout_contains("--log-dir")
        .stdout_contains("--local-ranks-filter 1")
        .stdout_contains("--tee 3")
        .stdout_contains("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=[r${rank} $$x] ");

    // For real: files under --log_dir, only local rank 1 on the console, with its prefix.
    let out = launch(d.path(), &run_args(false, "[r{rank}] "));
    out.success();
    let console = format!("{}{}", out.stdout, out.stderr);
    assert!(console.contains("[r1] hello from 1"), "{console}");
    assert!(!console.contains("hello from 0"), "{console}");
    let mut found = Vec::new();
    for entry in walk(&logs) {
        if entry.file_name().is_some_and(|n| n == "stdout.log") {
            found.push(std::fs::read_to_string(&entry).unwrap());
        }
    }
    assert_eq!(
        found.len(),
        2,
        "stdout.log per rank under {}",
        logs.display()
    );
    assert!(
        found.iter().any(|t| t.contains("hello from 0")),
        "{found:?}"
    );
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn what_torchrun_cannot_do_is_refused() {
    let d = tempdir();
    let base = [
        "--dry-run",
        "--cpu",
        "--num_processes",
        "2",
        "--rdzv_backend",
        "c10d",
    ];
    let mut a = base.to_vec();
    a.extend(["--rank_prefix", "[{node}] ", "x.py"]);
    launch(d.path(), &a)
        .code_is(2)
        .stderr_contains("`{node}` has no torchrun equivalent");
    let mut a = base.to_vec();
    a.extend([
        "--log_dir",
        "l",
        "--log_template",
        "{rank}.{stream}",
        "x.py",
    ]);
    launch(d.path(), &a)
        .code_is(2)
        .stderr_contains("--log_template cannot be used with --rdzv_backend c10d");
    // --rdzv_conf with the static rendezvous: c10d's keys are ignored, saying so (its `timeout` is
    // the join timeout: tests/torchrun.rs).
    launch(
        d.path(),
        &[
            "--dry-run",
            "--cpu",
            "--rdzv_conf",
            "read_timeout=5",
            "x.py",
        ],
    )
    .success()
    .stderr_contains("--rdzv_conf read_timeout ignored");
}
