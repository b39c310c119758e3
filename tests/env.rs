//! accel-env: the report's JSON holds every field a bug report needs, Markdown mirrors `accelerate env`,
//! leaking variables are warned about, and no non-torch binary links libtorch.

#[allow(unused_imports)]
use crate::util::{ChildExt as _, CommandExt as _, WAIT};
use std::fs;

use serde_json::Value;

use crate::util::{bin, python, tempdir, Run};

/// What the venv's torch itself says: its full version (`2.13.0+cu130`, `2.13.0+cpu`) and how many
/// CUDA devices it sees.
fn torch_facts() -> (String, u64) {
    let out = python(
        "import json, torch; print(json.dumps([torch.__version__, torch.cuda.device_count()]))",
        &std::collections::BTreeMap::new(),
    );
    serde_json::from_str(out.trim()).unwrap()
}

/// The `- Field: value` lines of a Markdown report, in order.
fn fields(markdown: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in markdown.lines() {
        if let Some((k, v)) = line.strip_prefix("- ").and_then(|l| l.split_once(':')) {
            out.push((k.to_string(), v.trim().to_string()));
        }
    }
    out
}

#[test]
fn json_report_has_the_fields() {
    let home = tempdir();
    let cfg = home.path().join("c.yaml");
    fs::write(&cfg, "distributed_type: MULTI_GPU\nnum_processes: 2\n").unwrap();
    let out = Run::new("accel-env", home.path())
        .env("NCCL_DEBUG", "INFO")
        .env("ACCELERATE_USE_FSDP", "true")
        .env("HF_TOKEN", "hf_secret")
        .args(["--json", "--config_file"])
        .arg(&cfg)
        .run();
    out.success()
        .stderr_contains("ACCELERATE_USE_FSDP is set in this shell and would leak");
    let r: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(r["accel_version"], env!("CARGO_PKG_VERSION"));
    let (torch_version, cuda_devices) = torch_facts();
    assert!(torch_version.starts_with("2.13.0"), "{torch_version}");
    // The local part (`+cu130`, `+cpu`) is kept: the CUDA build is the point of a bug report.
    assert_eq!(r["python"]["packages"]["torch"], torch_version.as_str());
    assert_eq!(r["python"]["packages"]["accelerate"], "1.15.0");
    assert!(r["python"]["packages"]["numpy"].is_string());
    assert!(r["python"]["version"].as_str().unwrap().starts_with("3."));
    assert!(r["cpu"]["logical_cores"].as_u64().unwrap() >= 1);
    assert!(r["cpu"]["ram_bytes"].as_u64().unwrap() > 1 << 30);
    assert_eq!(
        r["gpus"].as_array().map(Vec::len),
        Some(cuda_devices as usize),
        "accel-env's GPUs against torch.cuda.device_count()"
    );
    assert_eq!(r["environment"]["NCCL_DEBUG"], "INFO");
    assert_eq!(r["leaking"], serde_json::json!(["ACCELERATE_USE_FSDP"]));
    assert!(!out.stdout.contains("hf_secret"), "tokens must be redacted");
    assert!(r["network"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i["name"] == "lo"));
    assert_eq!(r["config"]["values"]["num_processes"]["value"], 2);
    assert_eq!(
        r["config"]["values"]["num_processes"]["origin"],
        format!("{}:2", cfg.display())
    );
    assert_eq!(r["config"]["values"]["rdzv_backend"]["origin"], "default");
}

#[test]
fn markdown_like_accelerate_env() {
    let home = tempdir();
    let out = Run::new("accel-env", home.path()).run();
    out.success()
        .stdout_contains("Copy-and-paste the text below in your GitHub issue")
        .stdout_contains("- `Accelerate` default config:\n\tNot found");
    // The real `accelerate env`, same PATH and HOME: every field it prints appears in accel-env's
    // report in the same order, with the same value where the value does not depend on the tool.
    let theirs = crate::util::isolated(crate::util::venv_bin().join("accelerate"))
        .arg("env")
        .env("PATH", crate::util::venv_path())
        .env("HOME", home.path())
        .current_dir(home.path())
        .output_within(WAIT);
    assert!(theirs.status.success(), "accelerate env failed");
    let theirs = fields(&String::from_utf8_lossy(&theirs.stdout));
    let ours = fields(&out.stdout);
    assert!(theirs.len() >= 8, "accelerate env printed {theirs:?}");
    let mut at = 0;
    for (key, value) in &theirs {
        let Some(pos) = ours[at..].iter().position(|(k, _)| k == key) else {
            panic!(
                "accel-env lacks `{key}` (or has it out of accelerate's order):\n{}",
                out.stdout
            );
        };
        at += pos;
        let same_value = [
            "`Accelerate` version",
            "Platform",
            "`accelerate` bash location",
            "Python version",
            "Numpy version",
            "PyTorch version",
            "PyTorch accelerator",
        ];
        if same_value.contains(&key.as_str()) {
            assert_eq!(&ours[at].1, value, "`{key}` differs from accelerate env");
        }
        at += 1;
    }
    let out = Run::new("accel-env", home.path()).arg("--no-python").run();
    out.success().stdout_contains("not probed (--no-python)");
}

#[test]
fn broken_config_is_reported_not_fatal() {
    let home = tempdir();
    let cfg = home.path().join("c.yaml");
    fs::write(&cfg, "distributed_type: NO\nmixed_precision: fp17\n").unwrap();
    let out = Run::new("accel-env", home.path())
        .args(["--no-python", "--json", "--config_file"])
        .arg(&cfg)
        .run();
    out.success();
    let r: Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(r["config"]["error"]
        .as_str()
        .unwrap()
        .contains("mixed_precision"));
}

#[test]
fn non_torch_binaries_do_not_link_libtorch() {
    for tool in [
        "accel-config",
        "accel-env",
        "accel-launch",
        "accel-estimate-memory",
        "accel-merge-weights",
    ] {
        let out = std::process::Command::new("ldd")
            .arg(bin(tool))
            .output_within(WAIT);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "ldd {tool} failed");
        assert!(
            !text.contains("libtorch") && !text.contains("libc10"),
            "{tool} links libtorch:\n{text}"
        );
    }
}

/// The default config path as accelerate computes it (`config_args.default_config_file`) when HOME is
/// unset (Python falls back to the password database) and when HF_HOME, XDG_CACHE_HOME or HOME is
/// set but empty; accel once made a literal `./~/.cache/…` with HOME unset. `accel-env --json`'s
/// `config` object has the same keys whether or not a file was found.
#[test]
fn default_config_path_matches_accelerate_with_unset_and_empty_variables() {
    let d = crate::util::tempdir();
    let cases: [&[(&str, &str)]; 4] = [
        &[],
        &[("HOME", "/home/u"), ("HF_HOME", "")],
        &[("HOME", "/home/u"), ("XDG_CACHE_HOME", "")],
        &[("HOME", "")],
    ];
    for vars in cases {
        let mut theirs = crate::util::isolated(crate::util::venv_python());
        theirs
            .envs(vars.iter().copied())
            .current_dir(d.path())
            .args([
            "-c",
            "from accelerate.commands.config.config_args import default_config_file as f; print(f)",
        ]);
        let out = theirs.output_within(WAIT);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let want = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let mut ours = Run::new("accel-env", d.path()).env_remove("HOME");
        for (k, v) in vars {
            ours = ours.env(k, v);
        }
        let got = ours.args(["--json"]).run();
        got.success();
        let r: serde_json::Value = serde_json::from_str(&got.stdout).unwrap();
        let c = &r["config"];
        for key in [
            "path",
            "found",
            "explicit",
            "default_path",
            "values",
            "warnings",
            "error",
        ] {
            assert!(c.get(key).is_some(), "{vars:?}: config lacks `{key}`: {c}");
        }
        assert_eq!(c["default_path"], want.as_str(), "{vars:?}");
    }
    assert!(
        !d.path().join("~").exists(),
        "a literal ~ directory was made"
    );
}
