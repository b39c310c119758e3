//! Runs `accel-test`: the coordinator by default, one rank with the internal `--worker`.
//!
//! The rank itself needs libtorch, which no binary links: accel-test loads its libtorch part
//! (bin/accel-test/torch) from the environment's torch when it needs the ranks
//! ([`crate::preflight::libtorch`]), after the world is resolved, so a topology mistake reads the same
//! with or without torch. Without a usable torch it says what it found and which torch it needs
//! (exit 5).

use crate::cli::test::TestCli;
use crate::contract::Paradigm;
use crate::env_vars::Environment;
use crate::error::Result;
use crate::exit_status::ExitStatus;
use crate::launch::{self, RunInput, Scope};
use crate::preflight::coordinator::{self, WorkerArgs};
use crate::preflight::libtorch::Libtorch;
use crate::preflight::memory;
use crate::preflight::world::{Device, World};

/// This machine's share of the world, resolved exactly as accel-launch resolves its run (the same
/// [`launch::resolve`]: config file choice, merge, embedded default, SLURM/MPI placement, visible GPUs).
#[cfg(test)]
fn world(cli: &TestCli, env: &Environment) -> Result<World> {
    resolve_world(cli, env).map(|(w, _)| w)
}

/// This machine's share of the world and the GPUs visible here.
fn resolve_world(cli: &TestCli, env: &Environment) -> Result<(World, u32)> {
    let run = launch::resolve(
        &RunInput {
            config_file: cli.config_file.as_deref(),
            paradigm: Paradigm {
                cpu: cli.cpu,
                ..Paradigm::default()
            },
            cli: cli.config_values(),
            ..RunInput::new(Scope::Node)
        },
        env,
    )?;
    for w in &run.warnings {
        crate::error::warn("accel-test", w, env);
    }
    Ok((World::of(&run), run.visible_gpus))
}

/// `accel-test --version`'s own lines: the torch found and what the libtorch part can check, or why
/// there is none.
pub fn version_lines(env: &Environment) -> String {
    match Libtorch::load(env) {
        Ok(t) => t.describe(),
        Err(e) => crate::preflight::libtorch::describe_unavailable(&e),
    }
}

pub fn run(cli: TestCli, env: &Environment) -> Result<ExitStatus> {
    run_with(cli, env, Libtorch::load)
}

/// [`run`], with the libtorch part loaded by `load` (a test's stand-in).
fn run_with(
    cli: TestCli,
    env: &Environment,
    load: impl FnOnce(&Environment) -> Result<Libtorch, crate::preflight::libtorch::LibtorchError>,
) -> Result<ExitStatus> {
    let timeout = cli.timeout;
    // The world is resolved before libtorch is needed, so a topology mistake reads the same in every build.
    let world = if cli.worker {
        None
    } else {
        Some(resolve_world(&cli, env)?)
    };
    if let Some((w, _)) = &world {
        unknown_check(&cli.checks, w.num_machines * w.nproc_per_node)?;
    }
    let torch = load(env)?;
    let Some((mut world, visible_gpus)) = world else {
        return Ok(torch.worker());
    };
    let nccl = torch.has_nccl();
    if nccl && visible_gpus == 0 && !cli.cpu && world.unmet_devices.is_none() {
        crate::error::warn(
            "accel-test",
            "CUDA is not available here (no GPU visible): checking the world on CPU with gloo; NCCL is built in for GPU machines",
            env,
        );
    }
    if world.device == Device::Cuda && !nccl {
        crate::error::warn(
            "accel-test",
            "this accel-test was built without NCCL support: checking the world on CPU (gloo)",
            env,
        );
        world.device = Device::Cpu;
    }
    if world.unmet_devices.is_none() {
        // Before any rank starts: a world far too large for this machine never gives a verdict.
        let bench = cli.bench.then_some(cli.max_size);
        let need = memory::estimate(world.nproc_per_node, world.world_size(), bench);
        memory::check(&need, bench, memory::available())?;
    }
    let mut args = vec![
        "--timeout".to_string(),
        timeout.as_secs_f64().to_string(),
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
    if let Some(parts) = cli.probe {
        args.push(format!("--probe={}", parts.arg()));
        // The ranks measure again what looks slow at this threshold before they report.
        args.push(format!("--probe_threshold={}", cli.probe_threshold * 100.0));
    }
    let mut out = |s: &str| crate::tools::print(s);
    coordinator::supervise(
        &world,
        &WorkerArgs {
            args,
            probe_threshold: cli.probe.map(|_| cli.probe_threshold),
        },
        env,
        timeout,
        cli.json,
        &mut out,
    )
}

/// A `--check PREFIX` that selects no check of this world's plan would run only the pre-flight and
/// pass: a usage error naming the checks there are.
fn unknown_check(prefixes: &[String], world_size: usize) -> Result<()> {
    let names: Vec<String> = crate::preflight::plan::plan(world_size.max(1))
        .iter()
        .map(|c| c.name())
        .collect();
    let Some(bad) = prefixes
        .iter()
        .find(|p| !names.iter().any(|n| n.starts_with(p.as_str())))
    else {
        return Ok(());
    };
    let mut ops: Vec<&str> = names
        .iter()
        .map(|n| n.split(' ').next().unwrap_or(n))
        .collect();
    ops.dedup();
    ops.sort();
    ops.dedup();
    Err(crate::error::Error::msg_hint(
        ExitStatus::Usage,
        format!("--check {bad}: no check of this world's plan starts with `{bad}`"),
        format!(
            "the checks are {} (each with a dtype and size, e.g. `all_reduce.sum float32[1009]`)",
            ops.join(", ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn cli(args: &[&str]) -> TestCli {
        TestCli::parse_from(std::iter::once("accel-test").chain(args.iter().copied()))
    }

    #[test]
    fn a_check_filter_that_selects_nothing_is_a_usage_error() {
        assert!(unknown_check(&["all_reduce.sum".into(), "barrier".into()], 2).is_ok());
        let e = unknown_check(&["allreduce.sum".into()], 2).unwrap_err();
        assert_eq!(e.exit_status(), ExitStatus::Usage);
        let shown = format!("{e:?}");
        assert!(
            shown.contains("allreduce.sum") && shown.contains("all_reduce.sum"),
            "{shown}"
        );
    }

    /// An environment whose Python has no torch: the world resolves, then accel-test says which torch it
    /// needs (exit 5), before anything is loaded. The wheel test checks the same from a wheel
    /// installed into a venv without torch (tests/wheel.rs).
    #[test]
    fn without_torch_it_says_which_it_needs() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let python = d.path().join("python3");
        std::fs::write(&python, "#!/bin/sh\necho '[\"\"]'\n").unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        let env = Environment::from_pairs([
            ("HF_HOME", "/nonexistent".to_string()),
            ("ACCEL_PYTHON", python.display().to_string()),
        ]);
        let err = run(cli(&["--cpu"]), &env).unwrap_err();
        assert_eq!(err.exit_status(), ExitStatus::NoTorch);
        assert_eq!(err.exit_status().code(), 5);
        let text = crate::error::format_error("accel-test", &err, false);
        assert!(
            text.contains("accel-test: error: torch is not installed in this environment: accel-test needs torch==2.13.*"),
            "{text}"
        );
        assert!(text.contains("hint: pip install 'torch==2.13.*'"), "{text}");
        // A topology mistake still reads as one, torch or not.
        let err = run(cli(&["--num_machines", "2"]), &env).unwrap_err();
        assert_eq!(err.exit_status(), ExitStatus::LauncherFailed);
    }

    #[test]
    fn resolves_like_the_launcher() {
        let env = Environment::from_pairs([("HF_HOME", "/nonexistent")]);
        let w = world(&cli(&["--cpu", "--num_processes", "4"]), &env).unwrap();
        assert_eq!(
            (w.nproc_per_node, w.world_size(), w.device),
            (4, 4, Device::Cpu)
        );
        assert_eq!(w.master_port, None);
        // No config on a machine without GPUs: accel-launch's embedded default (2 CPU ranks, 1 on a
        // single-core machine).
        let w = world(&cli(&[]), &env).unwrap();
        let want = if physical_cores_from_sysfs() >= 2 {
            2
        } else {
            1
        };
        assert_eq!((w.world_size(), w.device), (want, Device::Cpu));
        let w = world(
            &cli(&[
                "--num_processes",
                "8",
                "--num_machines",
                "2",
                "--machine_rank",
                "1",
                "--main_process_ip",
                "n0",
            ]),
            &env,
        )
        .unwrap();
        assert_eq!(
            (w.nproc_per_node, w.global_rank(0), w.master_port),
            (4, 4, Some(29500))
        );
        assert!(world(&cli(&["--num_machines", "2"]), &env).is_err());
        assert!(world(
            &cli(&[
                "--num_processes",
                "3",
                "--num_machines",
                "2",
                "--main_process_ip",
                "x"
            ]),
            &env,
        )
        .is_err());
    }

    #[test]
    fn slurm_allocation() {
        let env = Environment::from_pairs([
            ("HF_HOME", "/nonexistent"),
            ("SLURM_NNODES", "2"),
            ("SLURM_NODEID", "1"),
            ("SLURM_JOB_NODELIST", "gpu[07-08]"),
            ("SLURM_JOB_ID", "1234"),
        ]);
        let w = world(&cli(&["--cpu", "--num_processes", "4"]), &env).unwrap();
        assert_eq!(
            (w.num_machines, w.machine_rank, w.master_addr.as_str()),
            (2, 1, "gpu07")
        );
        // 15000 + 2 × (job id mod 8500), as accel-launch derives it for SLURM jobs.
        assert_eq!(w.master_port, Some(17468));
    }

    /// Physical cores counted from sysfs topology (the code under test reads /proc/cpuinfo).
    fn physical_cores_from_sysfs() -> usize {
        let mut cores = std::collections::BTreeSet::new();
        for e in std::fs::read_dir("/sys/devices/system/cpu")
            .unwrap()
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name
                .strip_prefix("cpu")
                .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()) && !n.is_empty())
            {
                continue;
            }
            let t = e.path().join("topology");
            let read = |f: &str| {
                std::fs::read_to_string(t.join(f))
                    .unwrap_or_default()
                    .trim()
                    .to_string()
            };
            cores.insert((read("physical_package_id"), read("core_id")));
        }
        cores.len().max(1)
    }
}
