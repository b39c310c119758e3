//! `accel-launch --report_json`: checked before any rank starts, written under a name of its own
//! (two launchers writing into one directory never meet), and never in place of the run's status.

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::time::Duration;

use crate::util::{launcher, CommandExt as _};

/// accel-launch in its own process group (tests/util/launcher.rs's environment), bounded: past
/// `limit` its process tree is killed and the test fails naming the command.
fn launch_within(home: &Path, args: &[&str], limit: Duration) -> (i32, String) {
    let out = launcher(home)
        .current_dir(home)
        .args(args)
        .process_group(0)
        .output_within(limit);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const LIMIT: Duration = Duration::from_secs(60);

fn status_in(report: &Path) -> i64 {
    let text =
        std::fs::read_to_string(report).unwrap_or_else(|e| panic!("{}: {e}", report.display()));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["status"].as_i64().unwrap()
}

/// A report path in a missing directory, or a directory, is refused before the ranks start (the
/// rank would leave `started`), and no temporary file is left behind.
#[test]
fn an_unwritable_report_path_is_refused_before_any_rank_starts() {
    let d = crate::util::tempdir();
    let marker = d.path().join("started");
    let rank = format!("touch {}; exit 3", marker.display());
    let dir = d.path().join("rjdir.json");
    std::fs::create_dir(&dir).unwrap();
    for (path, code, says) in [
        ("missing/report.json", 4, "missing/report.json"),
        ("rjdir.json", 2, "is a directory"),
    ] {
        let (c, err) = launch_within(
            d.path(),
            &[
                "--cpu",
                "--num_processes",
                "1",
                "--report_json",
                path,
                "--no_python",
                "sh",
                "-c",
                &rank,
            ],
            LIMIT,
        );
        assert_eq!(c, code, "--report_json {path}: {err}");
        assert!(err.contains(says), "--report_json {path}: {err}");
        assert!(!marker.exists(), "--report_json {path}: the rank ran");
    }
    let left: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["rjdir.json"], "files left: {left:?}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

/// The report's directory vanishes while the rank runs: the write fails at the end, says so, and
/// the rank's exit status 3 is still the launcher's.
#[test]
fn a_report_that_cannot_be_written_at_the_end_keeps_the_ranks_status() {
    let d = crate::util::tempdir();
    let rep = d.path().join("rep");
    std::fs::create_dir(&rep).unwrap();
    let rank = format!("rm -rf {}; exit 3", rep.display());
    let (c, err) = launch_within(
        d.path(),
        &[
            "--cpu",
            "--num_processes",
            "1",
            "--report_json",
            "rep/node.0",
            "--no_python",
            "sh",
            "-c",
            &rank,
        ],
        LIMIT,
    );
    assert_eq!(c, 3, "{err}");
    assert!(err.contains("cannot write `rep/node.0`"), "{err}");
}

/// `rep/node.0` and `rep/node.1` written at the same moment, 20 times over: each launcher's report
/// is its own (the ranks exit 10+i and 20+i), complete, and nothing else is left in the directory;
/// a file named as the other's temporary file would have been (`rep/node.json.tmp`) is not touched.
#[test]
fn concurrent_reports_in_one_directory_never_share_a_temporary_file() {
    let d = crate::util::tempdir();
    let rep = d.path().join("rep");
    std::fs::create_dir(&rep).unwrap();
    let runs: Vec<_> = (0..20)
        .flat_map(|i| [(i, 0, 10 + i), (i, 1, 20 + i)])
        .map(|(i, node, code)| {
            let home = d.path().to_path_buf();
            std::thread::spawn(move || {
                let sub = rep_dir(&home, i);
                let report = format!("{sub}/node.{node}");
                let rank = format!("exit {code}");
                let (c, err) = launch_within(
                    &home,
                    &[
                        "--cpu",
                        "--num_processes",
                        "1",
                        "--report_json",
                        &report,
                        "--no_python",
                        "sh",
                        "-c",
                        &rank,
                    ],
                    LIMIT,
                );
                assert_eq!(c, code, "{report}: {err}");
                (home.join(report), code)
            })
        })
        .collect();
    // What another launcher's old-style temporary file would be: left alone.
    std::fs::write(rep.join("node.json.tmp"), "other").unwrap();
    let (c, err) = launch_within(
        d.path(),
        &[
            "--cpu",
            "--num_processes",
            "1",
            "--report_json",
            "rep/node.0",
            "--no_python",
            "true",
        ],
        LIMIT,
    );
    assert_eq!(c, 0, "{err}");
    assert_eq!(status_in(&rep.join("node.0")), 0);
    assert_eq!(
        std::fs::read_to_string(rep.join("node.json.tmp"))
            .ok()
            .as_deref(),
        Some("other"),
        "rep/node.0's report went through rep/node.json.tmp"
    );
    for r in runs {
        let (report, code) = r.join().unwrap();
        assert_eq!(status_in(&report), code as i64, "{}", report.display());
    }
    for i in 0..20 {
        let mut names: Vec<_> = std::fs::read_dir(d.path().join(rep_dir(d.path(), i)))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["node.0", "node.1"]);
    }
}

fn rep_dir(home: &Path, i: i32) -> String {
    let sub = format!("rep/{i}");
    std::fs::create_dir_all(home.join(&sub)).unwrap();
    sub
}
