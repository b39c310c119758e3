//! Times given in seconds (`--grace_period`, `--monitor_interval`, `ACCEL_LAUNCH_GRACE`, accel-test
//! `--timeout`): `inf` means never where that makes sense; NaN, negatives, non-numbers and values no
//! `Duration` can hold are usage errors (exit 2) naming the flag or variable — never a panic.

use std::path::Path;

use crate::util::{tempdir, Run};

/// A script whose ranks exit 0 (`ok.py`) and one whose rank 1 fails while rank 0 waits to be
/// stopped (`fail.py`): rank 0 handles SIGTERM by winding down for [`WIND_DOWN`] s, then writes
/// `wound_down` beside the script and exits 0; rank 1 exits 3 once rank 0's handler is in place
/// (`ready`), so that the SIGTERM never finds rank 0 without it.
fn scripts(dir: &Path) {
    std::fs::write(dir.join("ok.py"), "print('ok')\n").unwrap();
    std::fs::write(
        dir.join("fail.py"),
        format!(
            r#"import os, signal, sys, time
here = os.path.dirname(os.path.abspath(__file__))
if os.environ['RANK'] == '1':
    t = time.time()
    while not os.path.exists(os.path.join(here, 'ready')) and time.time() - t < 120:
        time.sleep(0.05)
    sys.exit(3)
stopped = []
signal.signal(signal.SIGTERM, lambda *_: stopped.append(time.time()))
open(os.path.join(here, 'ready'), 'w').close()
t = time.time()
while not stopped and time.time() - t < 600:
    time.sleep(0.1)
time.sleep({WIND_DOWN})
open(os.path.join(here, 'wound_down'), 'w').close()
"#
        ),
    )
    .unwrap();
}

/// How long `fail.py`'s rank 0 takes to stop after SIGTERM: any grace period shorter than this
/// SIGKILLs it before it is done.
const WIND_DOWN: u32 = 3;

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

/// `--grace_period inf` and `ACCEL_LAUNCH_GRACE=inf`: a rank stopped after another's failure gets
/// all the time it takes. Rank 0 of `fail.py` takes [`WIND_DOWN`] s after SIGTERM: it finishes (a
/// finite grace shorter than that, 0 s included, would SIGKILL it first), and the run still ends,
/// with the failing rank's status.
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
    let wound_down = home.path().join("wound_down");
    for (args, env) in [
        (&["--grace_period", "inf", "fail.py"][..], None),
        (&["fail.py"][..], Some("inf")),
    ] {
        for f in ["ready", "wound_down"] {
            let _ = std::fs::remove_file(home.path().join(f));
        }
        let mut run = launch(home.path(), args);
        if let Some(grace) = env {
            run = run.env("ACCEL_LAUNCH_GRACE", grace);
        }
        let out = run.run();
        out.code_is(3);
        assert!(
            wound_down.exists(),
            "{args:?} ACCEL_LAUNCH_GRACE={env:?}: rank 0 was killed before it wound down:\n{}",
            out.stderr
        );
    }
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
