//! The wheel `pip install accel-cli` installs (scripts/wheel: maturin --zig, manylinux_2_28), built once
//! per suite run and installed offline into fresh venvs, then used from them alone: only the venv's
//! `bin` and the system's on PATH, no checkout binary and no cargo. With torch 2.13 (and accelerate, which
//! examples/train.py uses) the six tools work, accel-test finds the venv's torch by itself and runs
//! real gloo ranks, and man finds the pages in the venv; without torch five tools work and accel-test
//! names the torch it needs (exit 5) instead of failing in the dynamic loader.
//!
//! torch comes from uv's cache, which scripts/setup fills (`uv pip install --offline` links the files,
//! seconds instead of unpacking 4 GB); the wheel itself is installed by the venv's own pip, offline.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::util::{repo, suite, CommandExt as _, WAIT};

const TOOLS: [&str; 6] = [
    "accel-config",
    "accel-env",
    "accel-launch",
    "accel-test",
    "accel-estimate-memory",
    "accel-merge-weights",
];

/// A fresh wheel build compiles every crate twice for glibc 2.28 (the tools, and accel-test's libtorch
/// part with tch's C++): minutes on two cores, niced so the suite's timing-sensitive tests keep the CPU.
const BUILD: Duration = Duration::from_secs(1500);

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    what: String,
}

impl Out {
    fn ok(&self) -> &Self {
        assert_eq!(
            self.code,
            Some(0),
            "`{}` failed:\n{}\n{}",
            self.what,
            self.stdout,
            self.stderr
        );
        self
    }
}

fn run(cmd: &mut Command, limit: Duration) -> Out {
    let what = crate::util::proc::describe(cmd);
    let o = cmd.output_within(limit);
    Out {
        code: o.status.code(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        what,
    }
}

/// The wheel, built by scripts/wheel once per suite run, with what auditwheel said of it.
fn wheel() -> (PathBuf, String) {
    let dir = suite::fixture("wheel", |d| {
        let o = run(
            Command::new("nice")
                .args(["-n", "19"])
                .arg(repo().join("scripts/wheel"))
                .current_dir(repo()),
            BUILD,
        );
        o.ok();
        let wheel = PathBuf::from(o.stdout.trim());
        let name = wheel.file_name().expect("a wheel file name");
        std::fs::copy(repo().join(&wheel), d.join(name)).expect("copy the wheel");
        std::fs::write(d.join("build.log"), &o.stderr).expect("write the log");
    });
    let wheel = std::fs::read_dir(&dir)
        .expect("the wheel fixture")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .expect("a .whl in the wheel fixture");
    let log = std::fs::read_to_string(dir.join("build.log")).unwrap_or_default();
    (wheel, log)
}

/// A fresh venv of the project's Python, with `packages` linked from uv's cache (offline) and the
/// wheel installed by its own pip (offline, no dependencies looked up).
fn venv(dir: &Path, packages: &[&str], wheel: &Path) -> PathBuf {
    let venv = dir.join("venv");
    run(
        Command::new(crate::util::venv_python())
            .args(["-m", "venv"])
            .arg(&venv),
        WAIT,
    )
    .ok();
    if !packages.is_empty() {
        run(
            Command::new(repo().join(".venv-wheel/bin/uv"))
                .args(["pip", "install", "--offline", "--quiet", "--python"])
                .arg(venv.join("bin/python"))
                .args(packages),
            WAIT,
        )
        .ok();
    }
    run(
        Command::new(venv.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--no-index",
                "--no-deps",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg(wheel),
        WAIT,
    )
    .ok();
    venv
}

/// A command run as a user of `venv` would: its `bin` and the system's directories on PATH, nothing
/// of the checkout, no cargo; a HOME of its own.
fn user(venv: &Path, home: &Path, program: &str) -> Command {
    let mut c = crate::util::isolated(program);
    c.env(
        "PATH",
        format!(
            "{}:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
            venv.join("bin").display()
        ),
    )
    .env("HOME", home)
    .env("ACCEL_NO_PROGRESS", "1")
    .current_dir(home);
    c
}

/// `readelf -d`: no tool links libtorch, and none has a run path.
fn links_no_libtorch(venv: &Path) {
    for t in TOOLS {
        let o = run(
            Command::new("readelf")
                .arg("-d")
                .arg(venv.join("bin").join(t)),
            WAIT,
        );
        o.ok();
        for bad in ["libtorch", "libc10", "RPATH", "RUNPATH"] {
            assert!(!o.stdout.contains(bad), "{t} has {bad}:\n{}", o.stdout);
        }
    }
}

// In the suite (CI): building the wheel compiles every crate twice more, niced, first of the run
// (.config/nextest.toml gives it priority) so that its minutes overlap the other tests. scripts/test-wheel
// runs it alone.
#[test]
fn pip_install_offline_into_fresh_venvs_with_and_without_torch() {
    let (wheel, log) = wheel();
    let size = std::fs::metadata(&wheel).expect("wheel").len();
    eprintln!("wheel: {} ({size} bytes)\n{log}", wheel.display());
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("accel_cli-") && name.ends_with("-py3-none-manylinux_2_28_x86_64.whl"),
        "{name}"
    );
    // auditwheel show, as scripts/wheel ran it: the tag it meets, and no library outside the policy.
    // auditwheel wraps its sentences to the terminal's width: compared with single spaces.
    let said = log.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        said.contains("is consistent with the following platform tag: \"manylinux_2_28_x86_64\""),
        "{log}"
    );
    assert!(
        !said.contains("external shared libraries"),
        "the wheel needs libraries outside the manylinux policy:\n{log}"
    );

    let d = crate::util::tempdir();
    let home = d.path().join("home");
    std::fs::create_dir_all(&home).unwrap();

    // With torch 2.13 (and accelerate, which examples/train.py imports).
    let with = venv(
        &d.path().join("with"),
        &["torch==2.13.0", "accelerate==1.15.0"],
        &wheel,
    );
    links_no_libtorch(&with);
    for t in TOOLS {
        let o = run(user(&with, &home, t).arg("--version"), WAIT);
        o.ok();
        assert!(
            o.stdout.contains(&format!(
                "installed: accel-cli 0.1.0 wheel (py3-none-manylinux_2_28_x86_64) by pip into {}",
                with.display()
            )) && o.stdout.contains("built: wheel for manylinux_2_28_x86_64"),
            "{t} --version:\n{}",
            o.stdout
        );
    }
    let o = run(user(&with, &home, "accel-test").arg("--version"), WAIT);
    let site = with.join("lib/python3.11/site-packages/torch");
    for want in [
        format!("torch: 2.13.0+cu130 at {}", site.display()),
        format!(
            "libtorch part: {}",
            with.join("lib/accel/libaccel_test_torch.so").display()
        ),
        "collectives: gloo, NCCL".to_string(),
    ] {
        assert!(o.stdout.contains(&want), "{want}\n{}", o.stdout);
    }

    let out = d.path().join("losses.json");
    run(
        user(&with, &home, "accel-launch")
            .args(["--cpu", "--num_processes", "2"])
            .arg(repo().join("examples/train.py"))
            .args(["--epochs", "2", "--output"])
            .arg(&out),
        WAIT,
    )
    .ok();
    let losses: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("train.py's losses")).unwrap();
    assert!(
        losses.to_string().contains("loss"),
        "train.py wrote no losses: {losses}"
    );

    let o = run(
        user(&with, &home, "accel-test").args(["--cpu", "--num_processes", "2", "--timeout", "60"]),
        WAIT,
    );
    o.ok();
    assert!(o.stdout.contains("verdict: PASS"), "{}", o.stdout);

    // A c10d exception raised in torch (rank 0's TCPStore on a port that is taken) and caught in the
    // part's C++ shim, through the part's own frames: the unwinder is the one torch raised it with.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let o = run(
        user(&with, &home, "accel-test")
            .args(["--worker", "--device", "cpu", "--timeout", "3"])
            .envs([
                ("RANK", "0"),
                ("LOCAL_RANK", "0"),
                ("WORLD_SIZE", "1"),
                ("LOCAL_WORLD_SIZE", "1"),
                ("MASTER_ADDR", "127.0.0.1"),
            ])
            .env(
                "MASTER_PORT",
                taken.local_addr().unwrap().port().to_string(),
            ),
        WAIT,
    );
    drop(taken);
    assert_eq!(o.code, Some(1), "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stdout
            .contains("\"name\":\"rendezvous.host_store\",\"ok\":false")
            && o.stdout.contains("address already in use"),
        "{}\n{}",
        o.stdout,
        o.stderr
    );

    let o = run(user(&with, &home, "man").args(["-w", "accel-launch"]), WAIT);
    o.ok();
    assert_eq!(
        o.stdout.trim(),
        with.join("share/man/man1/accel-launch.1")
            .display()
            .to_string()
    );
    for f in [
        "share/bash-completion/completions/accel-launch",
        "share/zsh/site-functions/_accel-launch",
        "share/fish/vendor_completions.d/accel-launch.fish",
    ] {
        assert!(with.join(f).is_file(), "{f} is not installed");
    }
    merge_and_estimate(&with, &home, d.path(), "with");

    // Without torch: five tools work; accel-test names the torch it needs, exit 5, no loader error.
    let without = venv(&d.path().join("without"), &[], &wheel);
    links_no_libtorch(&without);
    for t in TOOLS {
        run(user(&without, &home, t).arg("--version"), WAIT).ok();
    }
    let o = run(
        user(&without, &home, "accel-launch")
            .args(["--cpu", "--num_processes", "2", "--no_python", "sh", "-c"])
            .arg("echo rank $RANK of $WORLD_SIZE"),
        WAIT,
    );
    o.ok();
    assert!(
        o.stdout.contains("rank 0 of 2") && o.stdout.contains("rank 1 of 2"),
        "{}",
        o.stdout
    );
    run(
        user(&without, &home, "accel-config").args(["default", "--mixed_precision", "bf16"]),
        WAIT,
    )
    .ok();
    let o = run(
        user(&without, &home, "accel-config").args(["get", "mixed_precision"]),
        WAIT,
    );
    o.ok();
    assert_eq!(o.stdout.trim(), "bf16");
    run(user(&without, &home, "accel-env").arg("--json"), WAIT).ok();
    merge_and_estimate(&without, &home, d.path(), "without");

    let o = run(
        user(&without, &home, "accel-test").args(["--cpu", "--num_processes", "2"]),
        WAIT,
    );
    assert_eq!(o.code, Some(5), "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains(
            "accel-test: error: torch is not installed in this environment: accel-test needs torch==2.13.*"
        ) && o.stderr.contains(&without.join("bin/python3").display().to_string())
            && o.stderr.contains("hint: pip install 'torch==2.13.*'"),
        "{}",
        o.stderr
    );
    assert!(!o.stderr.contains("shared librar"), "{}", o.stderr);
    let o = run(user(&without, &home, "accel-test").arg("--version"), WAIT);
    o.ok();
    assert!(
        o.stdout
            .contains("collectives: unavailable here: torch is not installed in this environment"),
        "{}",
        o.stdout
    );
}

/// accel-merge-weights on the suite's FSDP2 checkpoint (checked against torch's own conversion by the
/// merge tests' check.py), and accel-estimate-memory on the merged file and a config, each the same as
/// the checkout's build says.
fn merge_and_estimate(venv: &Path, home: &Path, dir: &Path, tag: &str) {
    let ckpt = crate::merge::fixture("fsdp2");
    let out = dir.join(format!("merged-{tag}"));
    run(
        user(venv, home, "accel-merge-weights").arg(&ckpt).arg(&out),
        WAIT,
    )
    .ok();
    crate::merge::check(&ckpt, &out, &[]);
    let config = dir.join(format!("config-{tag}.json"));
    std::fs::write(
        &config,
        r#"{"model_type":"llama","vocab_size":1000,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2}"#,
    )
    .unwrap();
    for input in [out, config] {
        let args = ["--json", "--num-gpus", "2", "--gpu-memory", "80GB"];
        let wheel = run(
            user(venv, home, "accel-estimate-memory")
                .arg(&input)
                .args(args),
            WAIT,
        );
        wheel.ok();
        let checkout = run(
            user(
                venv,
                home,
                crate::util::bin("accel-estimate-memory").to_str().unwrap(),
            )
            .arg(&input)
            .args(args),
            WAIT,
        );
        checkout.ok();
        assert_eq!(wheel.stdout, checkout.stdout, "{}", input.display());
    }
}
