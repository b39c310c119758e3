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

/// `--log_template` keeps every log file inside `--log_dir`: an absolute template or one with `..`
/// is a usage error that names the flag and writes nothing anywhere; an unknown placeholder is
/// refused as `--rank_prefix` refuses one (it would be written out literally).
#[test]
fn log_template_cannot_leave_the_log_dir() {
    let d = tempdir();
    let logs = d.path().join("logs");
    let outside = d.path().join("abs");
    let abs = format!("{}/{{rank}}{{stream}}", outside.display());
    let logs_s = logs.to_str().unwrap();
    for (template, why) in [
        (abs.as_str(), "absolute"),
        ("../escaped_{rank}_{stream}.log", "`..`"),
        ("{rank}_{bogus}_{stream}", "`{bogus}`"),
    ] {
        launch(&["--log_dir", logs_s, "--log_template", template])
            .code_is(2)
            .stderr_contains("--log_template")
            .stderr_contains(why);
    }
    assert!(!outside.exists(), "{} was created", outside.display());
    let stray: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        stray.is_empty(),
        "files written beside the log dir: {stray:?}"
    );
    launch(&[
        "--log_dir",
        logs_s,
        "--log_template",
        "r{rank}/{stream}.txt",
    ])
    .success();
    assert!(logs.join("r1/stdout.txt").is_file());
}

/// A directory of the template's path that is a symbolic link out of `--log_dir` is refused (exit 4)
/// before any rank starts, naming the link, and nothing is written where it points (issue 41 item
/// 11: `logs/a -> elsewhere` with `a/{rank}.{stream}.log` wrote elsewhere). A `--log_dir` that is
/// itself a link is fine.
#[test]
fn log_template_cannot_leave_the_log_dir_through_a_link() {
    let d = tempdir();
    let (logs, elsewhere) = (d.path().join("logs"), d.path().join("elsewhere"));
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, logs.join("a")).unwrap();
    let logs_s = logs.to_str().unwrap();
    launch(&[
        "--log_dir",
        logs_s,
        "--log_template",
        "a/{rank}.{stream}.log",
    ])
    .code_is(4)
    .stderr_contains(&format!("symbolic link {}", logs.join("a").display()));
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "written through the link"
    );
    // A link as the last component of a file's directory chain is refused as well.
    std::fs::create_dir_all(logs.join("b")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, logs.join("b/0")).unwrap();
    launch(&[
        "--log_dir",
        logs_s,
        "--log_template",
        "b/{rank}/{stream}.log",
    ])
    .code_is(4);
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "written through the link"
    );
    // --log_dir itself may be a link.
    let link = d.path().join("logs_link");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    launch(&[
        "--log_dir",
        link.to_str().unwrap(),
        "--log_template",
        "c/{rank}.{stream}.log",
    ])
    .success();
    assert!(elsewhere.join("c/1.stdout.log").is_file());
}

/// Counts out of range are refused, never wrapped or dropped: 4294967296 processes once planned one
/// process with no rank variables. The same bound holds in a config file, for `validate` too.
#[test]
fn counts_out_of_range_are_refused() {
    for (flag, n) in [
        ("--num_processes", "4294967296"),
        ("--num_processes", "2147483648"),
        ("--num_machines", "4294967297"),
        ("--machine_rank", "4294967296"),
    ] {
        Run::new("accel-launch", tempdir().path())
            .args(["--dry-run", flag, n, "train.py"])
            .run()
            .code_is(2)
            .stderr_contains(flag)
            .stderr_contains(n);
    }
    let d = tempdir();
    let cfg = d.path().join("big.yaml");
    std::fs::write(
        &cfg,
        "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nnum_processes: 4294967296\nuse_cpu: true\n",
    )
    .unwrap();
    Run::new("accel-config", d.path())
        .args(["validate", cfg.to_str().unwrap()])
        .run()
        .code_is(1)
        .stderr_contains("num_processes");
    Run::new("accel-launch", d.path())
        .args([
            "--dry-run",
            "--config_file",
            cfg.to_str().unwrap(),
            "train.py",
        ])
        .run()
        .code_is(2)
        .stderr_contains("num_processes");
}

/// `--stacks PID` takes only an accel-launch: a Python parent whose child runs in a session of its
/// own (as ranks do) once had that child's stack printed as "rank 0", and `--stacks 1` named init's
/// children ranks.
#[test]
fn stacks_refuses_a_process_that_is_not_accel_launch() {
    use crate::util::{ChildExt as _, CommandExt as _};
    let d = tempdir();
    let mut parent = std::process::Command::new(crate::util::venv_python())
        .args([
            "-c",
            "import subprocess, sys, time\n\
             subprocess.Popen(['sleep', '60'], start_new_session=True)\n\
             print('up', flush=True)\n\
             time.sleep(60)\n",
        ])
        .stdout(std::process::Stdio::piped())
        .start();
    let _reaper = crate::util::proc::Reaper(parent.id() as i32);
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(parent.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "up");
    for pid in [parent.id().to_string(), "1".to_string()] {
        Run::new("accel-launch", d.path())
            .args(["--stacks", &pid])
            .run()
            .code_is(2)
            .stderr_contains(&format!("process {pid} is not an accel-launch"))
            .stderr_lacks("rank 0");
    }
    crate::util::proc::kill_tree(parent.id() as i32);
    let _ = parent.wait_within(crate::util::WAIT);
}

/// A script the kernel cannot start though it exists names what is missing: its `#!` interpreter
/// (with the CRLF hint when the line ends in `\r`), instead of "not found" for a file that is there.
#[test]
fn a_script_whose_interpreter_is_missing_names_it() {
    let d = tempdir();
    for (name, body, want) in [
        ("crlf.sh", "#!/bin/sh\r\necho hi\r\n", "\"/bin/sh\\r\""),
        (
            "gone.sh",
            "#!/no/such/shell -e\necho hi\n",
            "\"/no/such/shell\"",
        ),
    ] {
        let script = d.path().join(name);
        std::fs::write(&script, body).unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let out = Run::new("accel-launch", d.path())
            .env("HF_HOME", d.path())
            .args(["--cpu", "--num_processes", "1", "--no_python"])
            .arg(format!("./{name}"))
            .run();
        out.code_is(127)
            .stderr_contains(&format!("its interpreter {want}"))
            .stderr_lacks(": not found");
        if name == "crlf.sh" {
            out.stderr_contains("CRLF");
        }
    }
}

/// Issue 24 item 11: an unknown option names the option meant, by spelling or by another launcher's
/// name for it (accelerate launch's parser does the first; accel-launch takes unknown options as the
/// script, so it says so itself).
#[test]
fn an_unknown_option_names_the_option_meant() {
    launch(&["--num_proceses", "2"])
        .code_is(2)
        .stderr_contains("unknown option `--num_proceses`")
        .stderr_contains("hint: did you mean `--num_processes`?");
    launch(&["--mixed-precison=bf16"])
        .code_is(2)
        .stderr_contains("did you mean `--mixed_precision`?");
    // torchrun's own names (--master_port, --nnodes, ...) are accel-launch options since issue 27;
    // deepspeed's are not.
    launch(&["--num_gpus", "2"])
        .code_is(2)
        .stderr_contains("`--num_gpus` is deepspeed's name: here it is `--num_processes`");
    launch(&["--zzz"])
        .code_is(2)
        .stderr_contains("unknown option `--zzz`")
        .stderr_lacks("did you mean");
}

/// Issue 24 item 11: --dry-run says who starts the ranks: accel-launch itself, not the torchrun that
/// accelerate launch would run for the same config (the plan said `path = Torchrun`).
#[test]
fn dry_run_says_accel_launch_starts_the_ranks() {
    let home = tempdir();
    let out = Run::new("accel-launch", home.path())
        .args(["--multi_gpu", "--num_processes", "2", "--dry-run", "ok.py"])
        .run();
    out.success()
        .stdout_contains("started by = accel-launch (")
        .stdout_contains("accelerate launch would use = torchrun\n");
    assert!(!out.stdout.contains("path = "), "{}", out.stdout);
    let json = launch(&["--dry-run", "--json"]);
    json.success()
        .stdout_contains("\"started_by\": \"accel-launch\"");
    assert!(!json.stdout.contains("\"path\""), "{}", json.stdout);
}

/// Issue 24 item 11: `--mixed_precision fp8` without an FP8 backend in the ranks' Python is refused
/// before any rank starts, as accelerate launch refuses it ("FP8 is not available on this machine");
/// with one (a stand-in torchao 0.7.0 on PYTHONPATH) the run starts; torchao 0.6.0 is too old for
/// accelerate. In each case accel-launch decides as accelerate's own `is_fp8_available` does there.
#[test]
fn fp8_without_a_backend_is_refused_as_accelerate_refuses_it() {
    let home = tempdir();
    std::fs::write(home.path().join("ok.py"), "print('ok')\n").unwrap();
    let stub = crate::launch::fp8_stub(home.path());
    let old = home.path().join("old_stub");
    std::fs::create_dir_all(old.join("torchao")).unwrap();
    std::fs::write(old.join("torchao/__init__.py"), "").unwrap();
    std::fs::create_dir_all(old.join("torchao-0.6.0.dist-info")).unwrap();
    std::fs::write(
        old.join("torchao-0.6.0.dist-info/METADATA"),
        "Metadata-Version: 2.1\nName: torchao\nVersion: 0.6.0\n",
    )
    .unwrap();
    for (pythonpath, available) in [(None, false), (Some(&stub), true), (Some(&old), false)] {
        let mut envs = std::collections::BTreeMap::new();
        if let Some(p) = pythonpath {
            envs.insert("PYTHONPATH", p.display().to_string());
        }
        let accelerate = crate::util::python(
            "from accelerate.utils import is_fp8_available; print(is_fp8_available())",
            &envs,
        );
        assert_eq!(accelerate.trim(), if available { "True" } else { "False" });
        let mut run = Run::new("accel-launch", home.path()).args([
            "--cpu",
            "--num_processes",
            "2",
            "--mixed_precision",
            "fp8",
            "--fp8_backend",
            "te",
            "ok.py",
        ]);
        if let Some(p) = pythonpath {
            run = run.env("PYTHONPATH", p);
        }
        let out = run.run();
        if available {
            out.success().stdout_contains("ok");
        } else {
            out.code_is(125)
                .stderr_contains("FP8 is not available on this machine")
                .stderr_contains("torchao >= 0.6.1");
            assert!(
                !out.stdout.contains("ok"),
                "no rank may start: {}",
                out.stdout
            );
        }
    }
}
