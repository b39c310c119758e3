//! accel-env: the report's JSON holds every field a bug report needs, Markdown mirrors `accelerate env`,
//! leaking variables are warned about, and no non-torch binary links libtorch.

use std::fs;

use serde_json::Value;

use crate::util::{bin, tempdir, Run};

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
    assert_eq!(r["python"]["packages"]["torch"], "2.13.0");
    assert_eq!(r["python"]["packages"]["accelerate"], "1.15.0");
    assert!(r["python"]["packages"]["numpy"].is_string());
    assert!(r["python"]["version"].as_str().unwrap().starts_with("3."));
    assert!(r["cpu"]["logical_cores"].as_u64().unwrap() >= 1);
    assert!(r["cpu"]["ram_bytes"].as_u64().unwrap() > 1 << 30);
    assert!(r["gpus"].is_array());
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
        .stdout_contains("- `Accelerate` version: 1.15.0")
        .stdout_contains("- PyTorch version: 2.13.0")
        .stdout_contains("- System RAM: ")
        .stdout_contains("- `Accelerate` default config:\n\tNot found");
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
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "ldd {tool} failed");
        assert!(
            !text.contains("libtorch") && !text.contains("libc10"),
            "{tool} links libtorch:\n{text}"
        );
    }
}
