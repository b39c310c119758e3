//! The user's Python, asked once and quickly: which interpreter, and the versions of the packages a
//! distributed run depends on. Versions come from package metadata (importlib.metadata), never from
//! importing torch, so the probe takes tens of milliseconds instead of seconds.

use std::path::PathBuf;
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::env_vars::{self, Environment};

/// The interpreter accel runs: `ACCEL_PYTHON`, else `python3`, else `python` on PATH.
pub fn find_python(env: &Environment) -> Option<PathBuf> {
    if let Some(p) = env.non_empty(env_vars::ACCEL_PYTHON) {
        return Some(PathBuf::from(p));
    }
    let path = env.get(env_vars::PATH)?;
    ["python3", "python"]
        .iter()
        .find_map(|name| which::which_in(name, Some(path), "/").ok())
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PythonInfo {
    pub executable: String,
    pub version: String,
    pub platform: String,
    /// Package name → version (None when not installed).
    pub packages: std::collections::BTreeMap<String, Option<String>>,
    /// NCCL version of the pip `nvidia-nccl-*` package, if any.
    pub nccl: Option<String>,
    pub accelerate_cli: Option<String>,
}

const PROBE: &str = r#"
import json, platform, shutil, sys
try:
    from importlib import metadata
except ImportError:
    metadata = None
def v(name):
    try:
        return metadata.version(name)
    except Exception:
        return None
pk = {n: v(n) for n in ("torch", "accelerate", "numpy", "transformers", "safetensors", "deepspeed")}
nccl = None
if metadata is not None:
    for d in metadata.distributions():
        n = (d.metadata.get("Name") or "").lower()
        if n.startswith("nvidia-nccl"):
            nccl = d.version
print(json.dumps({"executable": sys.executable, "version": platform.python_version(),
                  "platform": platform.platform(), "packages": pk, "nccl": nccl,
                  "accelerate_cli": shutil.which("accelerate")}))
"#;

/// Runs the probe. `Err` carries a one-line reason for the report.
pub fn probe(env: &Environment) -> Result<PythonInfo, String> {
    let python = find_python(env).ok_or_else(|| "no python3 or python on PATH".to_string())?;
    let out = Command::new(&python)
        .args(["-c", PROBE])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{} failed: {}",
            python.display(),
            err.lines().last().unwrap_or("")
        ));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("unexpected probe output from {}: {e}", python.display()))
}
