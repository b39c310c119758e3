//! The wheel `pip install accel-cli` installs (scripts/wheel: maturin --zig, manylinux_2_28), built once
//! by scripts/setup, whose binaries the whole suite runs (target/manylinux/bin), installed offline into
//! fresh venvs, then used from them alone: only the venv's
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

use crate::util::{repo, CommandExt as _, WAIT};

const TOOLS: [&str; 6] = [
    "accel-config",
    "accel-env",
    "accel-launch",
    "accel-test",
    "accel-estimate-memory",
    "accel-merge-weights",
];

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

/// The wheel scripts/setup built (scripts/wheel) and unpacked into target/manylinux, with what
/// auditwheel said of it. This suite's binaries must be that wheel's (scripts/test runs it with
/// `ACCEL_TEST_BIN_DIR=target/manylinux/bin`): the wheel then ships what the suite tested.
fn wheel() -> (PathBuf, String) {
    let unpacked = repo().join("target/manylinux");
    let path = std::fs::read_to_string(unpacked.join("wheel.path")).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: scripts/setup builds the wheel (run the suite with scripts/test or scripts/test-wheel)",
            unpacked.join("wheel.path").display()
        )
    });
    let wheel = repo().join(path.trim());
    assert!(wheel.is_file(), "{} is missing", wheel.display());
    let tested = crate::util::bin("accel-launch");
    assert_eq!(
        tested.parent(),
        Some(unpacked.join("bin").as_path()),
        "this suite ran {}, not the wheel's binaries: run it with scripts/test or scripts/test-wheel \
         (ACCEL_TEST_BIN_DIR=target/manylinux/bin)",
        tested.display()
    );
    let log = std::fs::read_to_string(unpacked.join("wheel.log")).unwrap_or_default();
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
            Command::new(repo().join(".venv/bin/uv"))
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

/// pip installed, byte for byte, the binaries this suite ran (and accel-test's part that its ranks loaded).
fn same_binaries_as_the_suite(venv: &Path) {
    let tested = repo().join("target/manylinux");
    for (installed, suite) in TOOLS
        .iter()
        .map(|t| (venv.join("bin").join(t), tested.join("bin").join(t)))
        .chain([(
            venv.join("lib/accel/libaccel_test_torch.so"),
            tested.join("lib/accel/libaccel_test_torch.so"),
        )])
    {
        let a =
            std::fs::read(&installed).unwrap_or_else(|e| panic!("{}: {e}", installed.display()));
        let b = std::fs::read(&suite).unwrap_or_else(|e| panic!("{}: {e}", suite.display()));
        assert!(
            a == b,
            "{} is not the {} the suite ran",
            installed.display(),
            suite.display()
        );
    }
}

/// The licence the project declares is in the wheel (PEP 639: `.dist-info/licenses/`, and
/// `License-Expression`), with the project's URLs (pyproject.toml `[project.urls]`).
fn licence_and_urls(venv: &Path) {
    let site = venv.join("lib/python3.11/site-packages");
    let dist = std::fs::read_dir(&site)
        .expect("site-packages")
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with("accel_cli-") && n.ends_with(".dist-info")
            })
        })
        .expect("accel_cli's .dist-info");
    let licence = std::fs::read(dist.join("licenses/LICENSE")).expect("licenses/LICENSE");
    assert_eq!(
        licence,
        std::fs::read(repo().join("LICENSE")).unwrap(),
        "the wheel's LICENSE"
    );
    let metadata = std::fs::read_to_string(dist.join("METADATA")).expect("METADATA");
    for want in [
        "License-Expression: Apache-2.0",
        "License-File: LICENSE",
        "Project-URL: Accelerate, https://github.com/huggingface/accelerate",
        "Project-URL: torchrun reference, https://docs.pytorch.org/docs/stable/elastic/run.html",
    ] {
        assert!(
            metadata.lines().any(|l| l == want),
            "METADATA lacks `{want}`:\n{metadata}"
        );
    }
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
    same_binaries_as_the_suite(&with);
    licence_and_urls(&with);
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
