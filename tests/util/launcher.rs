//! accel-launch as the launch tests start it, in one place: a run sees PATH, a HOME of the test's
//! own (HOME and HF_HOME, so no config file of this machine is found) and the venv's python for its
//! ranks, nothing else of the caller's environment, and carries the test's mark. Each test file
//! adds its own flags (nodes, secret, fixture script) on top.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

/// `program` (accel-launch, accel-env, or a wrapper such as `ip netns exec` that runs one) with the
/// launch tests' environment rooted at `home`.
pub fn launch_env(program: impl AsRef<OsStr>, home: &Path) -> Command {
    let mut c = super::isolated(program);
    c.env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("HF_HOME", home)
        .env("ACCEL_PYTHON", super::venv_python())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        // DeepSpeed's shm_comm op, built once by scripts/setup, not once per test's HOME (minutes each).
        .env(
            "TORCH_EXTENSIONS_DIR",
            super::repo().join("target/torch-extensions"),
        );
    c
}

/// accel-launch with the launch tests' environment rooted at `home`.
pub fn launcher(home: &Path) -> Command {
    launch_env(super::bin("accel-launch"), home)
}

/// The flags that make `c` (an accel-launch) node `node` of a `nodes`-node CPU run whose node 0 is
/// at `master`, rendezvous port `port` (its control plane on `port + 1`).
pub fn node_flags<'c>(
    c: &'c mut Command,
    nodes: u32,
    node: u32,
    master: &str,
    port: &str,
) -> &'c mut Command {
    c.args(["--cpu", "--num_machines", &nodes.to_string()])
        .args(["--machine_rank", &node.to_string()])
        .args(["--main_process_ip", master, "--main_process_port", port])
}
