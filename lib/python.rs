//! The user's Python, asked once and quickly: which interpreter, its version and `sys.path`. Package
//! versions are then read from the `*.dist-info` directory names on that path, in Rust — importing
//! `importlib.metadata` alone costs ~50 ms and importing torch seconds, while this probe takes ~15 ms.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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
    /// Package name → version (None when not installed).
    pub packages: BTreeMap<String, Option<String>>,
    /// NCCL version of the pip `nvidia-nccl-*` package, if any.
    pub nccl: Option<String>,
}

/// The packages the report names.
pub const PACKAGES: &[&str] = &[
    "torch",
    "accelerate",
    "numpy",
    "transformers",
    "safetensors",
    "deepspeed",
];

const PROBE: &str =
    "import sys, json; print(json.dumps([sys.executable, sys.version.split()[0], sys.path]))";

/// Runs the probe. `Err` carries a one-line reason for the report.
pub fn probe(env: &Environment) -> Result<PythonInfo, String> {
    let (executable, version, path) = interpreter(env)?;
    let mut installed = installed_distributions(path.iter().map(Path::new));
    if let Some(local) = torch_local_version(path.iter().map(Path::new)) {
        installed.insert("torch".into(), local);
    }
    let packages = PACKAGES
        .iter()
        .map(|p| (p.to_string(), installed.get(&normalize(p)).cloned()))
        .collect();
    let nccl = installed
        .iter()
        .find(|(name, _)| name.starts_with("nvidia_nccl"))
        .map(|(_, v)| v.clone());
    Ok(PythonInfo {
        executable,
        version,
        packages,
        nccl,
    })
}

/// accelerate's `is_fp8_available` (`utils/imports.py`), for the interpreter the ranks run: MS-AMP
/// (`msamp`, ms-amp), Transformer Engine (`transformer_engine`, transformer-engine) or torchao ≥ 0.6.1
/// importable and installed, as its `_is_package_available` asks (the module found on `sys.path` and the
/// distribution's metadata present). `Err`: the interpreter could not be asked, with the reason.
pub fn fp8_available(env: &Environment) -> Result<(bool, String), String> {
    let (executable, _, path) = interpreter(env)?;
    let dirs = || path.iter().map(Path::new);
    let installed = installed_distributions(dirs());
    let has =
        |module: &str, dist: &str| module_on_path(module, dirs()) && installed.contains_key(dist);
    let torchao = has("torchao", "torchao")
        && installed
            .get("torchao")
            .is_some_and(|v| version_at_least(v, &[0, 6, 1]));
    Ok((
        has("msamp", "ms_amp") || has("transformer_engine", "transformer_engine") || torchao,
        executable,
    ))
}

/// Whether `import name` finds something on `dirs` (a package, a namespace package, a module or an
/// extension), as `importlib.util.find_spec` would for a top-level name.
fn module_on_path<'a>(name: &str, dirs: impl Iterator<Item = &'a Path>) -> bool {
    dirs.into_iter().any(|d| {
        d.join(name).is_dir()
            || d.join(format!("{name}.py")).is_file()
            || std::fs::read_dir(d).is_ok_and(|entries| {
                entries.flatten().any(|e| {
                    e.file_name().to_str().is_some_and(|n| {
                        n.strip_prefix(name)
                            .is_some_and(|rest| rest.starts_with('.') && rest.ends_with(".so"))
                    })
                })
            })
    })
}

/// `version` ≥ `min`, comparing the leading numeric release parts (`0.7.0+cu126` → 0, 7, 0).
fn version_at_least(version: &str, min: &[u64]) -> bool {
    let parts: Vec<u64> = version
        .split(['.', '+', '-'])
        .map_while(|p| {
            let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect();
    for (i, m) in min.iter().enumerate() {
        let v = parts.get(i).copied().unwrap_or(0);
        if v != *m {
            return v > *m;
        }
    }
    true
}

/// The interpreter's `sys.executable`, version and `sys.path`.
fn interpreter(env: &Environment) -> Result<(String, String, Vec<String>), String> {
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

/// torch's full version with its local part (`2.13.0+cu130`, `2.13.0+cpu`), which is what
/// `accelerate env` prints (`torch.__version__`) and what a bug report needs: the wheel's dist-info
/// name drops the `+…` part. Read from `torch/version.py` beside the first `torch-*.dist-info` on the
/// path, without importing torch (seconds).
fn torch_local_version<'a>(dirs: impl Iterator<Item = &'a Path>) -> Option<String> {
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let has_dist = entries.flatten().any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("torch-") && n.ends_with(".dist-info"))
        });
        if !has_dist {
            continue;
        }
        let text = std::fs::read_to_string(dir.join("torch").join("version.py")).ok()?;
        return text.lines().find_map(|l| {
            let v = l
                .strip_prefix("__version__")?
                .trim_start()
                .strip_prefix('=')?;
            let v = v.trim().trim_matches(['\'', '"']);
            (!v.is_empty()).then(|| v.to_string())
        });
    }
    None
}

/// PEP 503-style normalisation as used in dist-info directory names.
fn normalize(name: &str) -> String {
    name.to_ascii_lowercase().replace(['-', '.'], "_")
}

/// `name → version` from `<name>-<version>.dist-info` directories; the first one on the path wins, as
/// for imports.
pub fn installed_distributions<'a>(
    dirs: impl Iterator<Item = &'a Path>,
) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".dist-info")) else {
                continue;
            };
            if let Some((pkg, version)) = stem.split_once('-') {
                found
                    .entry(normalize(pkg))
                    .or_insert_with(|| version.to_string());
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_by_release_numbers() {
        assert!(version_at_least("0.6.1", &[0, 6, 1]));
        assert!(version_at_least("0.13.0+cu126", &[0, 6, 1]));
        assert!(!version_at_least("0.6.0", &[0, 6, 1]));
        assert!(!version_at_least("0.5.9", &[0, 6, 1]));
        assert!(version_at_least("1", &[0, 6, 1]));
    }

    #[test]
    fn reads_dist_info_names() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("torch-2.13.0.dist-info")).unwrap();
        std::fs::create_dir(dir.path().join("nvidia_nccl_cu13-2.29.7.dist-info")).unwrap();
        let found = installed_distributions(std::iter::once(dir.path()));
        assert_eq!(found["torch"], "2.13.0");
        assert_eq!(found["nvidia_nccl_cu13"], "2.29.7");
        assert_eq!(torch_local_version(std::iter::once(dir.path())), None);
        std::fs::create_dir(dir.path().join("torch")).unwrap();
        std::fs::write(
            dir.path().join("torch/version.py"),
            "__all__ = ['__version__']\n__version__ = '2.13.0+cpu'\n",
        )
        .unwrap();
        assert_eq!(
            torch_local_version(std::iter::once(dir.path())).as_deref(),
            Some("2.13.0+cpu")
        );
    }
}
