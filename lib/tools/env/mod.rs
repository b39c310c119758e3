//! `accel-env`: the environment report (Markdown or JSON). `accel-env -- CMD` (one task of a scheduler,
//! no supervisor) is [`task`], over the launcher's run resolution.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

mod task;

use crate::cli::env::EnvCli;
use crate::config;
use crate::devices;
use crate::env_vars::{self, Environment};
use crate::error::{warn, Result};
use crate::exit_status::ExitStatus;
use crate::python;

const TOOL: &str = "accel-env";

pub fn run(cli: EnvCli, env: &Environment) -> Result<ExitStatus> {
    if !cli.command.is_empty() {
        return task::exec(&cli.command, cli.config_file.as_deref(), env);
    }
    let report = collect(&cli, env);
    for name in report["leaking"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        warn(
            TOOL,
            &format!("{name} is set in this shell and would leak into every rank of a run"),
            env,
        );
    }
    let text = if cli.json {
        serde_json::to_string_pretty(&report).unwrap_or_default() + "\n"
    } else {
        markdown(&report)
    };
    super::print(&text)?;
    Ok(ExitStatus::Success)
}

/// Python's `platform.platform()` for Linux: `Linux-<release>-<machine>-with-glibc<version>`.
fn platform_string(os: &str, kernel: &str, arch: &str) -> String {
    // SAFETY: gnu_get_libc_version returns a pointer to a static NUL-terminated string.
    let glibc = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) }
        .to_string_lossy()
        .into_owned();
    format!("{os}-{kernel}-{arch}-with-glibc{glibc}")
}

fn uname() -> (String, String, String) {
    match nix::sys::utsname::uname() {
        Ok(u) => (
            u.sysname().to_string_lossy().into_owned(),
            u.release().to_string_lossy().into_owned(),
            u.machine().to_string_lossy().into_owned(),
        ),
        Err(_) => (
            "unknown".into(),
            "unknown".into(),
            std::env::consts::ARCH.into(),
        ),
    }
}

fn network() -> Vec<Value> {
    let mut by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if let Ok(addrs) = nix::ifaddrs::getifaddrs() {
        for ifa in addrs {
            let entry = by_name.entry(ifa.interface_name.clone()).or_default();
            if let Some(addr) = ifa.address {
                if let Some(v4) = addr.as_sockaddr_in() {
                    entry.push(v4.ip().to_string());
                } else if let Some(v6) = addr.as_sockaddr_in6() {
                    entry.push(v6.ip().to_string());
                }
            }
        }
    }
    by_name
        .into_iter()
        .map(|(name, addresses)| json!({"name": name, "addresses": addresses}))
        .collect()
}

/// Everything the report holds, as JSON (the Markdown is rendered from it).
pub fn collect(cli: &EnvCli, env: &Environment) -> Value {
    let (os, kernel, arch) = uname();
    let py = if cli.no_python {
        json!({"skipped": true})
    } else {
        match python::probe(env) {
            Ok(info) => serde_json::to_value(info).unwrap_or(Value::Null),
            Err(e) => json!({"error": e}),
        }
    };
    let gpus = devices::detect_gpus(env);
    let cpu = devices::detect_cpu();

    let mut relevant = Map::new();
    let mut leaking = Vec::new();
    for (k, v) in env.iter() {
        let leaky = env_vars::LEAKY_PREFIXES.iter().any(|p| k.starts_with(p));
        let reported = env_vars::REPORTED_PREFIXES.iter().any(|p| k.starts_with(p))
            || k.starts_with("ACCEL_")
            || [
                env_vars::CUDA_VISIBLE_DEVICES,
                env_vars::NVIDIA_VISIBLE_DEVICES,
                env_vars::HF_HOME,
                env_vars::XDG_CACHE_HOME,
            ]
            .contains(&k)
            || env_vars::REGISTRY.iter().any(|r| {
                r.name == k
                    && r.group != env_vars::Group::Paths
                    && r.group != env_vars::Group::Output
            });
        if leaky {
            leaking.push(Value::from(k));
        }
        if leaky || reported {
            // Never paste a token into a bug report.
            let shown = if k.contains("TOKEN") || k.contains("SECRET") || k.contains("PASSWORD") {
                "<redacted>"
            } else {
                v
            };
            relevant.insert(k.to_string(), Value::from(shown));
        }
    }

    // One shape whether a file was found, read or not (scripts read the same keys every time):
    // `values`/`warnings` empty and `error` null where they do not apply.
    let default_path = config::default_config_path(env).display().to_string();
    let config = match config::choose_file(cli.config_file.as_deref(), env) {
        None => {
            json!({"path": Value::Null, "found": false, "explicit": false, "default_path": default_path, "values": {}, "warnings": [], "error": Value::Null})
        }
        Some((path, _)) => {
            match config::load(&path).and_then(|l| config::Resolved::resolve(Some(&l), env, &[])) {
                Ok(resolved) => {
                    let mut values = Map::new();
                    for (key, value, origin) in resolved.entries() {
                        values.insert(key, json!({"value": value, "origin": origin.to_string()}));
                    }
                    let warnings: Vec<_> = resolved.warnings.iter().map(|w| w.0.clone()).collect();
                    json!({"path": path.display().to_string(), "found": true, "explicit": cli.config_file.is_some(), "default_path": default_path, "values": values, "warnings": warnings, "error": Value::Null})
                }
                Err(e) => {
                    json!({"path": path.display().to_string(), "found": path.exists(), "explicit": cli.config_file.is_some(), "default_path": default_path, "values": {}, "warnings": [], "error": e.to_string()})
                }
            }
        }
    };

    json!({
        "accel_version": env!("CARGO_PKG_VERSION"),
        "platform": {"os": os, "kernel": kernel, "arch": arch, "description": platform_string(&os, &kernel, &arch)},
        "accelerate_cli": env.get(env_vars::PATH).and_then(|p| which::which_in("accelerate", Some(p), "/").ok()).map(|p| p.display().to_string()),
        "python": py,
        "cpu": cpu,
        "gpus": gpus.gpus,
        "cuda_driver_version": gpus.cuda_driver_version,
        "gpu_source": gpus.source,
        "environment": relevant,
        "leaking": leaking,
        "network": network(),
        "config": config,
    })
}

fn s<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(k))
}

fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => "Not found".into(),
        Some(other) => other.to_string(),
    }
}

/// The report as Markdown, in the order `accelerate env` prints, then accel's additions.
pub fn markdown(r: &Value) -> String {
    let mut o = String::from("\nCopy-and-paste the text below in your GitHub issue\n\n");
    o += &versions(r);
    o += &hardware(r);
    o += &config_section(r);
    o += &environment_section(r);
    o += &network_section(r);
    o
}

/// accel, accelerate, the platform, and Python with its packages (or why it was not probed).
fn versions(r: &Value) -> String {
    let pkg = |name: &str| text(s(r, &["python", "packages", name]));
    let mut o = format!("- `accel` version: {}\n", text(r.get("accel_version")));
    o.push_str(&format!("- `Accelerate` version: {}\n", pkg("accelerate")));
    o.push_str(&format!(
        "- Platform: {}\n",
        text(s(r, &["platform", "description"]))
    ));
    o.push_str(&format!(
        "- `accelerate` bash location: {}\n",
        text(r.get("accelerate_cli"))
    ));
    if let Some(err) = s(r, &["python", "error"]) {
        o.push_str(&format!("- Python: {}\n", text(Some(err))));
    } else if s(r, &["python", "skipped"]).is_some() {
        o.push_str("- Python: not probed (--no-python)\n");
    } else {
        o.push_str(&format!(
            "- Python version: {}\n",
            text(s(r, &["python", "version"]))
        ));
        o.push_str(&format!(
            "- Python executable: {}\n",
            text(s(r, &["python", "executable"]))
        ));
        o.push_str(&format!("- Numpy version: {}\n", pkg("numpy")));
        o.push_str(&format!("- PyTorch version: {}\n", pkg("torch")));
        o.push_str(&format!(
            "- Transformers version: {}\n",
            pkg("transformers")
        ));
        o.push_str(&format!("- DeepSpeed version: {}\n", pkg("deepspeed")));
    }
    o
}

/// The accelerator, memory, CPU, each GPU, the CUDA driver and NCCL.
fn hardware(r: &Value) -> String {
    let gpus = r
        .get("gpus")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut o = format!(
        "- PyTorch accelerator: {}\n",
        if gpus.is_empty() { "N/A" } else { "CUDA" }
    );
    let ram = s(r, &["cpu", "ram_bytes"])
        .and_then(Value::as_u64)
        .unwrap_or(0) as f64
        / 1024f64.powi(3);
    o.push_str(&format!("- System RAM: {ram:.2} GB\n"));
    o.push_str(&format!(
        "- CPU: {} ({} logical, {} physical cores)\n",
        text(s(r, &["cpu", "model"])),
        text(s(r, &["cpu", "logical_cores"])),
        text(s(r, &["cpu", "physical_cores"]))
    ));
    if let Some(first) = gpus.first() {
        o.push_str(&format!("- GPU type: {}\n", text(first.get("name"))));
    }
    for g in &gpus {
        let mem = g
            .get("memory_mib")
            .and_then(Value::as_u64)
            .map(|m| format!("{m} MiB"))
            .unwrap_or_else(|| "? MiB".into());
        o.push_str(&format!(
            "- GPU {}: {}, {mem}, driver {}, {}\n",
            text(g.get("index")),
            text(g.get("name")),
            text(g.get("driver")),
            text(g.get("uuid"))
        ));
    }
    if !gpus.is_empty() {
        o.push_str(&format!(
            "- CUDA (driver): {}\n",
            text(r.get("cuda_driver_version"))
        ));
    }
    o.push_str(&format!(
        "- NCCL version: {}\n",
        text(s(r, &["python", "nccl"]))
    ));
    o
}

/// The config file passed or found by default: each value with where it came from, or why there
/// is none.
fn config_section(r: &Value) -> String {
    let cfg = r.get("config").cloned().unwrap_or(Value::Null);
    let explicit = cfg
        .get("explicit")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut o = String::from(if explicit {
        "- `Accelerate` config passed:\n"
    } else {
        "- `Accelerate` default config:\n"
    });
    let found = cfg.get("found").and_then(Value::as_bool).unwrap_or(false);
    if let Some(err) = cfg.get("error").filter(|e| !e.is_null()) {
        o.push_str(&format!("\tError: {}\n", text(Some(err))));
    } else if let Some(Value::Object(values)) = cfg.get("values").filter(|_| found) {
        o.push_str(&format!("\t(from {})\n", text(cfg.get("path"))));
        for (k, v) in values {
            let value = match v.get("value") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            o.push_str(&format!("\t- {k}: {value}  ({})\n", text(v.get("origin"))));
        }
    } else {
        o.push_str("\tNot found\n");
    }
    o
}

/// The variables that shape a distributed run, and those of the shell that would leak into it.
fn environment_section(r: &Value) -> String {
    let mut o = String::new();
    if let Some(Value::Object(vars)) = r.get("environment") {
        o.push_str("- Environment:\n");
        if vars.is_empty() {
            o.push_str("\tnone of the variables that shape a distributed run is set\n");
        }
        for (k, v) in vars {
            o.push_str(&format!("\t- {k}={}\n", text(Some(v))));
        }
    }
    if let Some(Value::Array(leaks)) = r.get("leaking") {
        if !leaks.is_empty() {
            let names: Vec<String> = leaks.iter().map(|l| text(Some(l))).collect();
            o.push_str(&format!(
                "- Warning: set in the shell, would leak into every rank: {}\n",
                names.join(", ")
            ));
        }
    }
    o
}

/// Each network interface with its addresses.
fn network_section(r: &Value) -> String {
    let mut o = String::new();
    if let Some(Value::Array(ifs)) = r.get("network") {
        o.push_str("- Network interfaces:\n");
        for i in ifs {
            let addrs: Vec<String> = i
                .get("addresses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|a| text(Some(a)))
                .collect();
            o.push_str(&format!(
                "\t- {}: {}\n",
                text(i.get("name")),
                if addrs.is_empty() {
                    "-".into()
                } else {
                    addrs.join(", ")
                }
            ));
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_lines_say_why_it_was_not_probed() {
        let skipped = json!({"accel_version": "1", "python": {"skipped": true}});
        let v = versions(&skipped);
        assert!(v.starts_with("- `accel` version: 1\n- `Accelerate` version: Not found\n"));
        assert!(v.ends_with("- Python: not probed (--no-python)\n"), "{v}");
        assert!(!v.contains("Numpy"));
        let failed = json!({"python": {"error": "no python3"}});
        assert!(versions(&failed).ends_with("- Python: no python3\n"));
        let found = json!({"python": {"version": "3.12", "packages": {"torch": "2.13"}}});
        let v = versions(&found);
        assert!(v.contains("- Python version: 3.12\n"));
        assert!(v.contains("- PyTorch version: 2.13\n- Transformers version: Not found\n"));
    }

    #[test]
    fn gpu_lines_only_with_gpus() {
        let none = json!({"cpu": {"ram_bytes": 2u64 << 30, "model": "x", "logical_cores": 4}});
        assert_eq!(
            hardware(&none),
            "- PyTorch accelerator: N/A\n- System RAM: 2.00 GB\n- CPU: x (4 logical, Not found physical cores)\n- NCCL version: Not found\n"
        );
        let two = json!({"gpus": [
            {"index": 0, "name": "H100", "memory_mib": 81559, "driver": "570", "uuid": "GPU-a"},
            {"index": 1, "name": "H100", "driver": "570", "uuid": "GPU-b"},
        ], "cuda_driver_version": "12.8"});
        let h = hardware(&two);
        assert!(h.starts_with("- PyTorch accelerator: CUDA\n"));
        assert!(h.contains("- GPU type: H100\n- GPU 0: H100, 81559 MiB, driver 570, GPU-a\n- GPU 1: H100, ? MiB, driver 570, GPU-b\n- CUDA (driver): 12.8\n"), "{h}");
    }

    #[test]
    fn config_lines_give_each_value_its_origin() {
        let found = json!({"config": {"explicit": true, "found": true, "path": "/c.yaml",
            "values": {"num_processes": {"value": 2, "origin": "file"},
                       "mixed_precision": {"value": "bf16", "origin": "default"}}}});
        assert_eq!(
            config_section(&found),
            "- `Accelerate` config passed:\n\t(from /c.yaml)\n\t- num_processes: 2  (file)\n\t- mixed_precision: bf16  (default)\n"
        );
        let broken = json!({"config": {"found": true, "error": "bad yaml", "values": {}}});
        assert_eq!(
            config_section(&broken),
            "- `Accelerate` default config:\n\tError: bad yaml\n"
        );
        assert_eq!(
            config_section(&json!({})),
            "- `Accelerate` default config:\n\tNot found\n"
        );
    }

    #[test]
    fn environment_and_network_lines() {
        assert_eq!(environment_section(&json!({})), "");
        assert_eq!(
            environment_section(&json!({"environment": {}, "leaking": []})),
            "- Environment:\n\tnone of the variables that shape a distributed run is set\n"
        );
        assert_eq!(
            environment_section(&json!({"environment": {"NCCL_DEBUG": "INFO"}, "leaking": ["RANK", "WORLD_SIZE"]})),
            "- Environment:\n\t- NCCL_DEBUG=INFO\n- Warning: set in the shell, would leak into every rank: RANK, WORLD_SIZE\n"
        );
        assert_eq!(network_section(&json!({})), "");
        assert_eq!(
            network_section(
                &json!({"network": [{"name": "lo", "addresses": ["127.0.0.1"]}, {"name": "eth0"}]})
            ),
            "- Network interfaces:\n\t- lo: 127.0.0.1\n\t- eth0: -\n"
        );
    }
}
