//! Times given in seconds (`--grace_period`, `--monitor_interval`, `ACCEL_LAUNCH_GRACE`, accel-test
//! `--timeout`): `inf` means never where that makes sense; NaN, negatives, non-numbers and values no
//! `Duration` can hold are usage errors (exit 2) naming the flag or variable — never a panic.

use std::path::Path;

use crate::util::{tempdir, Run};

/// A script whose ranks exit 0 (`ok.py`) and one whose rank 1 fails while rank 0 waits to be
/// stopped (`fail.py`).
fn scripts(dir: &Path) {
    std::fs::write(dir.join("ok.py"), "print('ok')\n").unwrap();
    std::fs::write(
        dir.join("fail.py"),
        "import os, sys, time\nif os.environ['RANK'] == '1':\n    sys.exit(3)\ntime.sleep(600)\n",
    )
    .unwrap();
}

fn launch(home: &Path, args: &[&str]) -> Run {
    Run::new("accel-launch", home)
        .args(["--cpu", "--num_processes", "2"])
        .args(args)
}

#[test]
fn bad_launch_flag_seconds_are_usage_errors() {
    let home = tempdir();
    for (flag, value) in [
        ("--grace_period", "1e100"),
        ("--grace_period", "-1"),
        ("--grace_period", "abc"),
        ("--grace_period", "nan"),
        ("--monitor_interval", "nan"),
        ("--monitor_interval", "inf"),
        ("--monitor_interval", "-1"),
        ("--monitor_interval", "1e100"),
        ("--rdzv_timeout", "0"),
        ("--rdzv_timeout", "inf"),
        ("--rdzv_timeout", "-5"),
        ("--hang_timeout", "nan"),
        ("--hang_timeout", "-1"),
    ] {
        launch(home.path(), &[flag, value, "ok.py"])
            .run()
            .code_is(2)
            .stderr_contains(flag)
            .stderr_lacks("panicked");
    }
}

#[test]
fn bad_accel_launch_hang_timeout_is_a_usage_error() {
    let home = tempdir();
    scripts(home.path());
    for value in ["-1", "abc", "nan"] {
        launch(home.path(), &["ok.py"])
            .env("ACCEL_LAUNCH_HANG_TIMEOUT", value)
            .run()
            .code_is(2)
            .stderr_contains("ACCEL_LAUNCH_HANG_TIMEOUT")
            .stderr_lacks("panicked");
    }
}

#[test]
fn bad_accel_launch_grace_is_a_usage_error() {
    let home = tempdir();
    scripts(home.path());
    for value in ["-1", "abc", "nan", "1e100"] {
        launch(home.path(), &["ok.py"])
            .env("ACCEL_LAUNCH_GRACE", value)
            .run()
            .code_is(2)
            .stderr_contains("ACCEL_LAUNCH_GRACE")
            .stderr_lacks("panicked");
    }
}

#[test]
fn infinite_grace_means_never() {
    let home = tempdir();
    scripts(home.path());
    launch(home.path(), &["--grace_period", "inf", "ok.py"])
        .run()
        .success();
    launch(home.path(), &["ok.py"])
        .env("ACCEL_LAUNCH_GRACE", "inf")
        .run()
        .success();
    // A failing rank: the other is stopped with SIGTERM (it does not ignore it), so never
    // escalating to SIGKILL still ends the run with the failing rank's status.
    launch(home.path(), &["--grace_period", "inf", "fail.py"])
        .run()
        .code_is(3);
}

#[test]
fn bad_accel_test_timeouts_are_usage_errors() {
    let home = tempdir();
    for value in ["1e30", "inf", "nan", "-1", "abc", "0"] {
        Run::new("accel-test", home.path())
            .args(["--cpu", "--timeout", value])
            .run()
            .code_is(2)
            .stderr_contains("--timeout")
            .stderr_lacks("panicked");
    }
}

/// `--bench --max_size` below the first message size would measure nothing and print nothing: a usage
/// error naming the flag and the smallest size, before any rank starts.
#[test]
fn a_bench_max_size_below_the_first_message_is_a_usage_error() {
    let home = tempdir();
    for value in ["1", "1023", "0"] {
        Run::new("accel-test", home.path())
            .args(["--cpu", "--bench", "--max_size", value])
            .run()
            .code_is(2)
            .stderr_contains("--max_size")
            .stderr_lacks("panicked");
    }
    Run::new("accel-test", home.path())
        .args(["--cpu", "--bench", "--max_size", "1"])
        .run()
        .stderr_contains("below the smallest --bench size, 1K (1024 bytes)");
}
