//! Runs `accel-test`: the coordinator by default, one rank with the internal `--worker`.
//!
//! The rank itself needs libtorch, which only the accel-test binary links (lib/torch, compiled into the
//! binary so that no other tool links libtorch even in a `--features torch` build): the binary passes
//! it in as a [`Ranks`]. Without it — a build without the `torch` feature — accel-test says so.

use std::time::Duration;

use crate::cli::test::TestCli;
use crate::env_vars::Environment;
use crate::error::Result;
use crate::exit_status::ExitStatus;
use crate::preflight::coordinator::{self, WorkerArgs};
use crate::preflight::world::{self, Device};
use crate::preflight::PreflightError;

/// What the libtorch side provides.
pub struct Ranks {
    /// Runs one rank (`--worker`).
    pub worker: fn(&TestCli, Duration, &Environment) -> ExitStatus,
    /// Whether the binary can make NCCL process groups.
    pub nccl: bool,
}

/// The entry of a build without libtorch.
pub fn run(cli: TestCli, env: &Environment) -> Result<ExitStatus> {
    run_with(cli, env, None)
}

pub fn run_with(cli: TestCli, env: &Environment, ranks: Option<&Ranks>) -> Result<ExitStatus> {
    let Some(ranks) = ranks else {
        return Err(PreflightError::NoTorch.into());
    };
    if !(cli.timeout.is_finite() && cli.timeout > 0.0) {
        return Err(PreflightError::Timeout(cli.timeout).into());
    }
    let timeout = Duration::from_secs_f64(cli.timeout);
    if cli.worker {
        return Ok((ranks.worker)(&cli, timeout, env));
    }
    let gpus = if cli.cpu {
        0
    } else {
        crate::devices::detect_gpus(env).gpus.len()
    };
    let mut world = world::resolve(&cli, env, gpus)?;
    if world.device == Device::Cuda && !ranks.nccl {
        crate::error::warn(
            "accel-test",
            "this accel-test was built without NCCL support: checking the world on CPU (gloo)",
            env,
        );
        world.device = Device::Cpu;
    }
    let mut args = vec![
        "--timeout".to_string(),
        cli.timeout.to_string(),
        "--device".into(),
        world.device.name().into(),
        "--max_size".into(),
        cli.max_size.to_string(),
    ];
    for c in &cli.checks {
        args.push("--check".into());
        args.push(c.clone());
    }
    if cli.bench {
        args.push("--bench".into());
    }
    if cli.python {
        args.push("--python".into());
    }
    let mut out = |s: &str| crate::tools::print(s);
    coordinator::supervise(
        &world,
        &WorkerArgs { args },
        env,
        timeout,
        cli.json,
        &mut out,
    )
}
