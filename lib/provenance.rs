//! Where a tool's binary came from, for `--version`: how it was built (a wheel build says so through
//! `ACCEL_BUILD` at compile time, scripts/wheel) and how it was installed — a wheel installed by pip or
//! uv into an environment (read from the distribution's own `*.dist-info` records: installer, wheel
//! tag, and the file it came from), a cargo target directory, `cargo install`, or a copied binary. A bug
//! report then says which of several accel installations on a login node ran.

use std::path::{Component, Path, PathBuf};

/// The name the tools are published under on PyPI (`pip install accel-cli`).
pub const DISTRIBUTION: &str = "accel-cli";

/// The text after the tool's name in `--version`: the version, how it was built and installed, and
/// `extra` lines from the tool.
pub fn long_version(extra: String) -> String {
    let mut text = format!("{}\nbuilt: {}", env!("CARGO_PKG_VERSION"), built());
    if let Some(exe) = std::env::current_exe()
        .ok()
        .and_then(|e| e.canonicalize().ok())
    {
        text.push_str("\ninstalled: ");
        text.push_str(&installed(&exe));
    }
    if !extra.is_empty() {
        text.push('\n');
        text.push_str(extra.trim_end());
    }
    text
}

fn built() -> String {
    match option_env!("ACCEL_BUILD") {
        Some(how) if !how.is_empty() => how.to_string(),
        _ => format!(
            "cargo ({})",
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
        ),
    }
}

/// How the binary at `exe` (symlinks resolved) was installed.
pub fn installed(exe: &Path) -> String {
    let dir = exe.parent().unwrap_or(Path::new("/"));
    if let Some(w) = wheel_install(exe) {
        return w;
    }
    let names: Vec<&str> = dir
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => n.to_str(),
            _ => None,
        })
        .collect();
    if names.contains(&"target") {
        format!("a cargo build, {}", dir.display())
    } else if dir.ends_with(".cargo/bin") {
        format!("cargo install, {}", dir.display())
    } else {
        format!("{} (not by pip: scripts/install, or a copy)", dir.display())
    }
}

/// A pip/uv install of the wheel: the `accel_cli-*.dist-info` of the environment whose `bin` holds
/// `exe` and whose RECORD lists it.
fn wheel_install(exe: &Path) -> Option<String> {
    let prefix = exe.parent()?.parent()?;
    let dist = format!("{}-", DISTRIBUTION.replace('-', "_"));
    for site in site_dirs(prefix) {
        let Ok(entries) = std::fs::read_dir(&site) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(version) = name
                .strip_prefix(&dist)
                .and_then(|n| n.strip_suffix(".dist-info"))
            else {
                continue;
            };
            let info = e.path();
            if !records(&info, &site, exe) {
                continue;
            }
            let read = |f: &str| std::fs::read_to_string(info.join(f)).unwrap_or_default();
            let installer = read("INSTALLER").trim().to_string();
            let tags: Vec<String> = read("WHEEL")
                .lines()
                .filter_map(|l| l.strip_prefix("Tag:").map(|t| t.trim().to_string()))
                .collect();
            let mut text = format!(
                "{DISTRIBUTION} {version} wheel ({}) by {} into {}",
                tags.join(", "),
                if installer.is_empty() {
                    "an installer"
                } else {
                    &installer
                },
                prefix.display()
            );
            if let Some(url) = direct_url(&read("direct_url.json")) {
                text.push_str(&format!(", from {url}"));
            }
            return Some(text);
        }
    }
    None
}

/// `PREFIX/lib*/python3*/{site,dist}-packages`: where pip puts a wheel's dist-info for a prefix whose
/// `bin` got its scripts (venv, conda env, `--user`'s ~/.local, a system prefix).
fn site_dirs(prefix: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for lib in ["lib", "lib64"] {
        let Ok(entries) = std::fs::read_dir(prefix.join(lib)) else {
            continue;
        };
        for e in entries.flatten() {
            if !e.file_name().to_string_lossy().starts_with("python3") {
                continue;
            }
            for sp in ["site-packages", "dist-packages"] {
                let d = e.path().join(sp);
                if d.is_dir() {
                    dirs.push(d);
                }
            }
        }
    }
    dirs.sort();
    dirs
}

/// Whether the RECORD of `info` (paths relative to `site`) lists `exe`.
fn records(info: &Path, site: &Path, exe: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(info.join("RECORD")) else {
        return false;
    };
    let Some(file) = exe.file_name() else {
        return false;
    };
    text.lines()
        .filter_map(|l| l.split(',').next())
        .filter(|p| Path::new(p).file_name() == Some(file))
        .filter_map(|p| site.join(p).canonicalize().ok())
        .any(|p| p == exe)
}

/// The `url` of a PEP 610 `direct_url.json` (what pip records for a wheel installed from a file or URL
/// rather than an index).
fn direct_url(json: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    v.get("url")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A venv laid out as pip leaves it after `pip install accel_cli-….whl`.
    #[test]
    fn a_wheel_install_is_read_from_its_records() {
        let d = tempfile::tempdir().unwrap();
        let venv = d.path().canonicalize().unwrap().join("venv");
        let bin = venv.join("bin");
        let site = venv.join("lib/python3.12/site-packages");
        let info = site.join("accel_cli-0.1.0.dist-info");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&info).unwrap();
        let exe = bin.join("accel-launch");
        std::fs::write(&exe, "").unwrap();
        std::fs::write(
            info.join("RECORD"),
            "../../../bin/accel-launch,sha256=x,1\naccel_cli-0.1.0.dist-info/RECORD,,\n",
        )
        .unwrap();
        std::fs::write(info.join("INSTALLER"), "pip\n").unwrap();
        std::fs::write(
            info.join("WHEEL"),
            "Wheel-Version: 1.0\nTag: py3-none-manylinux_2_28_x86_64\n",
        )
        .unwrap();
        std::fs::write(
            info.join("direct_url.json"),
            r#"{"archive_info": {}, "url": "file:///tmp/accel_cli-0.1.0-py3-none-manylinux_2_28_x86_64.whl"}"#,
        )
        .unwrap();
        let exe = exe.canonicalize().unwrap();
        assert_eq!(
            installed(&exe),
            format!(
                "accel-cli 0.1.0 wheel (py3-none-manylinux_2_28_x86_64) by pip into {}, from file:///tmp/accel_cli-0.1.0-py3-none-manylinux_2_28_x86_64.whl",
                venv.display()
            )
        );
        // A binary the RECORD does not list is not the wheel's.
        let other = bin.join("accel-other");
        std::fs::write(&other, "").unwrap();
        assert!(installed(&other.canonicalize().unwrap()).contains("not by pip"));
        assert_eq!(
            installed(Path::new("/src/accel/target/release/accel-launch")),
            "a cargo build, /src/accel/target/release"
        );
        assert_eq!(
            installed(Path::new("/home/u/.cargo/bin/accel-launch")),
            "cargo install, /home/u/.cargo/bin"
        );
    }
}
