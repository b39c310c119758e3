//! accel-launch's flags against the installed `accelerate launch` parser, and the flag values that
//! are refused as usage errors (exit 2) instead of being silently accepted.

use std::collections::BTreeSet;

use crate::util::{tempdir, Run};

/// Every `--flag` of the installed accelerate's `launch_command_parser` (`add_argument("--x", …)`).
fn accelerate_launch_flags() -> BTreeSet<String> {
    let site = crate::util::repo().join(".venv/lib");
    let launch_py = std::fs::read_dir(&site)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/setup)", site.display()))
        .map(|e| {
            e.unwrap()
                .path()
                .join("site-packages/accelerate/commands/launch.py")
        })
        .find(|p| p.is_file())
        .expect("accelerate/commands/launch.py in the venv");
    let src = std::fs::read_to_string(launch_py).unwrap();
    let mut flags = BTreeSet::new();
    for call in src.split("add_argument(").skip(1) {
        let mut rest = call.trim_start();
        while let Some(s) = rest.strip_prefix('"') {
            let end = s.find('"').unwrap();
            if let Some(flag) = s[..end].strip_prefix("--") {
                flags.insert(flag.to_string());
            } else if !s[..end].starts_with('-') {
                break;
            }
            rest = s[end + 1..]
                .trim_start()
                .trim_start_matches(',')
                .trim_start();
        }
    }
    flags
}

#[test]
fn every_accelerate_flag_for_a_config_key_is_a_config_flag() {
    let accelerate = accelerate_launch_flags();
    assert!(accelerate.len() > 100, "parser not found: {accelerate:?}");
    let ours: BTreeSet<&str> = accel::cli::launch::CONFIG_FLAGS
        .iter()
        .flat_map(|g| g.flags.iter().map(|f| f.key))
        .collect();
    for path in accel::config::schema::all_paths() {
        let Some(arg) = accel::config::schema::launch_arg(&path) else {
            continue;
        };
        if accelerate.contains(&arg) {
            assert!(ours.contains(path.as_str()), "--{arg} ({path}) has no row");
        }
    }
    for key in &ours {
        let arg = accel::config::schema::launch_arg(key).unwrap();
        assert!(
            accelerate.contains(&arg),
            "--{arg} is not an accelerate flag"
        );
    }
}

/// accel-launch with two CPU ranks of a script that exits 0, so that only a refused flag fails.
fn launch(args: &[&str]) -> crate::util::Output {
    let home = tempdir();
    std::fs::write(home.path().join("ok.py"), "print('ok')\n").unwrap();
    Run::new("accel-launch", home.path())
        .args(["--cpu", "--num_processes", "2"])
        .args(args)
        .arg("ok.py")
        .run()
}

#[test]
fn tee_takes_torchruns_values_only() {
    launch(&["--tee", "x"]).code_is(2).stderr_contains("--tee");
    launch(&["--tee", "4"]).code_is(2);
    for ok in ["3", "0:1,1:2"] {
        launch(&["--tee", ok]).success().stdout_contains("ok");
    }
}

#[test]
fn json_needs_dry_run() {
    launch(&["--json"]).code_is(2).stderr_contains("--dry-run");
    launch(&["--dry-run", "--json"])
        .success()
        .stdout_contains("\"ranks\"");
}

#[test]
fn rank_prefix_placeholders_are_checked() {
    launch(&["--rank_prefix", "[{rnak}] "])
        .code_is(2)
        .stderr_contains("--rank_prefix")
        .stderr_contains("{rnak}")
        .stderr_contains("{rank}, {local_rank}, {node}, {role}");
    launch(&["--rank_prefix", "[{role}{rank}] "])
        .success()
        .stdout_contains("[default1] ok");
}

#[test]
fn empty_local_ranks_filter_is_refused() {
    launch(&["--local_ranks_filter", ""])
        .code_is(2)
        .stderr_contains("--local_ranks_filter");
    launch(&["--local_ranks_filter", ","]).code_is(2);
    launch(&["--local_ranks_filter", "0,a"])
        .code_is(2)
        .stderr_contains("`a`");
}

/// `--no_python run.sh` with run.sh in the current directory: execvp never looks there, so the hint
/// says to write ./run.sh (not to set ACCEL_PYTHON).
#[test]
fn a_script_in_the_cwd_without_a_slash_gets_the_right_hint() {
    let d = tempdir();
    let script = d.path().join("run.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    Run::new("accel-launch", d.path())
        .env("HF_HOME", d.path())
        .args(["--cpu", "--num_processes", "1", "--no_python", "run.sh"])
        .run()
        .code_is(127)
        .stderr_contains("run it as ./run.sh")
        .stderr_lacks("ACCEL_PYTHON");
    Run::new("accel-launch", d.path())
        .env("HF_HOME", d.path())
        .args(["--cpu", "--num_processes", "1", "--no_python", "./run.sh"])
        .run()
        .success();
}
