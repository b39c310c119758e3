//! The world accel-test checks: resolved on the coordinator side from the config exactly as
//! accel-launch resolves it, and read back on the worker side from the torchrun rank contract
//! (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, …) that every rank receives.

use serde_json::Value;

use super::PreflightError;
use crate::cli::test::TestCli;
use crate::config::{self, CliValue, DistributedType};
use crate::contract::accelerate::{Machine, MergeInput};
use crate::contract::{LaunchArgs, Paradigm};
use crate::env_vars::{self, Environment};

/// Where rank tensors live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda,
}

impl Device {
    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
        }
    }
}

/// This machine's share of the world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct World {
    pub num_machines: usize,
    pub machine_rank: usize,
    pub nproc_per_node: usize,
    pub master_addr: String,
    /// None: pick a free port (single machine only).
    pub master_port: Option<u16>,
    pub device: Device,
    /// CUDA_VISIBLE_DEVICES for the ranks, from gpu_ids.
    pub gpu_ids: Option<String>,
}

impl World {
    pub fn world_size(&self) -> usize {
        self.num_machines * self.nproc_per_node
    }
    /// Global rank of this machine's `local`-th rank.
    pub fn global_rank(&self, local: usize) -> usize {
        self.machine_rank * self.nproc_per_node + local
    }
}

/// The command-line values that shape the world, as config keys (what accel-launch passes too).
fn cli_values(cli: &TestCli) -> Vec<CliValue> {
    let mut v = Vec::new();
    let mut push = |key: &str, value: Value, flag: &str| {
        v.push(CliValue {
            key: key.into(),
            value,
            flag: flag.into(),
        })
    };
    if cli.cpu {
        push("use_cpu", Value::from(true), "--cpu");
    }
    if let Some(n) = cli.num_processes {
        push("num_processes", Value::from(n), "--num_processes");
    }
    if let Some(n) = cli.num_machines {
        push("num_machines", Value::from(n), "--num_machines");
    }
    if let Some(n) = cli.machine_rank {
        push("machine_rank", Value::from(n), "--machine_rank");
    }
    if let Some(ip) = &cli.main_process_ip {
        push(
            "main_process_ip",
            Value::from(ip.clone()),
            "--main_process_ip",
        );
    }
    if let Some(p) = cli.main_process_port {
        push("main_process_port", Value::from(p), "--main_process_port");
    }
    if let Some(ids) = &cli.gpu_ids {
        push("gpu_ids", Value::from(ids.clone()), "--gpu_ids");
    }
    v
}

/// Resolves this machine's world exactly as accel-launch does: the same config-file choice (`--cpu`
/// ignores the default file, as in accelerate), accelerate's merge ([`LaunchArgs::merge`], including the
/// embedded default without a config), and the same node placement from SLURM/MPI/outside variables
/// ([`crate::launch::place_node`]).
pub fn resolve(
    cli: &TestCli,
    env: &Environment,
    gpus_here: usize,
) -> Result<World, crate::error::Error> {
    let explicit =
        cli.config_file.is_some() || env.non_empty(env_vars::ACCEL_CONFIG_FILE).is_some();
    let loaded = match config::choose_file(cli.config_file.as_deref(), env) {
        Some((path, _)) if explicit || !cli.cpu => Some(config::load(&path)?),
        _ => None,
    };
    let resolved = config::Resolved::resolve(loaded.as_ref(), env, &cli_values(cli))?;
    for w in &resolved.warnings {
        crate::error::warn("accel-test", &w.0, env);
    }
    let mut args = LaunchArgs::merge(MergeInput {
        resolved: &resolved,
        loaded: loaded.as_ref(),
        paradigm: Paradigm {
            cpu: cli.cpu,
            ..Paradigm::default()
        },
        num_cpu_threads_per_process: None,
        machine: Machine {
            gpus: gpus_here as u32,
            physical_cores: crate::devices::detect_cpu().physical_cores.max(1) as u32,
        },
        env,
    })?;
    crate::launch::place_node(env, &resolved, loaded.is_some(), &mut args)?;
    let num_machines = args.num_machines.max(1) as usize;
    let machine_rank = match (num_machines, args.machine_rank) {
        (1, r) => r.unwrap_or(0) as usize,
        (_, Some(r)) => r as usize,
        (n, None) => {
            return Err(PreflightError::Usage(format!(
                "{n} machines but no --machine_rank for this one"
            ))
            .into())
        }
    };
    if machine_rank >= num_machines {
        return Err(PreflightError::Usage(format!(
            "machine_rank {machine_rank} is out of range for {num_machines} machine(s)"
        ))
        .into());
    }
    if num_machines > 1 && args.main_process_ip.is_none() {
        return Err(PreflightError::Usage(
            "a multi-node job needs --main_process_ip (the address of machine 0)".into(),
        )
        .into());
    }
    if args.num_processes as usize % num_machines != 0 {
        return Err(PreflightError::Usage(format!(
            "num_processes ({}) is not a multiple of num_machines ({num_machines})",
            args.num_processes
        ))
        .into());
    }
    let mut master_port = args.main_process_port.filter(|p| *p != 0);
    if num_machines > 1 && master_port.is_none() {
        master_port = Some(29500);
    }
    let cpu = args.cpu_flag
        || args.use_cpu
        || args.distributed_type == DistributedType::MULTI_CPU
        || gpus_here == 0;
    Ok(World {
        num_machines,
        machine_rank,
        nproc_per_node: args.num_local_processes() as usize,
        master_addr: args
            .main_process_ip
            .clone()
            .unwrap_or_else(|| "127.0.0.1".into()),
        master_port,
        device: if cpu { Device::Cpu } else { Device::Cuda },
        gpu_ids: args.gpu_ids.clone().filter(|g| !g.is_empty() && g != "all"),
    })
}

/// What one rank was told by its launcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contract {
    pub rank: usize,
    pub local_rank: usize,
    pub world_size: usize,
    pub local_world_size: usize,
    pub num_nodes: usize,
    pub master_addr: String,
    pub master_port: u16,
}

impl Contract {
    /// Reads and validates the contract with the contract module's worker-side parser (the one
    /// accel-launch's ranks are checked with); every problem is named with its variable.
    pub fn from_env(env: &Environment) -> Result<Contract, PreflightError> {
        let c = crate::contract::WorkerContract::parse(env)
            .map_err(|e| PreflightError::Contract(e.to_string()))?;
        Ok(Contract {
            rank: c.rank as usize,
            local_rank: c.local_rank as usize,
            world_size: c.world_size as usize,
            local_world_size: c.local_world_size as usize,
            num_nodes: c
                .group_world_size
                .unwrap_or_else(|| c.world_size.div_ceil(c.local_world_size.max(1)))
                as usize,
            master_addr: c.master_addr,
            master_port: c.master_port,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn cli(args: &[&str]) -> TestCli {
        TestCli::parse_from(std::iter::once("accel-test").chain(args.iter().copied()))
    }

    #[test]
    fn resolves_like_the_launcher() {
        let env = Environment::from_pairs([("HF_HOME", "/nonexistent")]);
        let w = resolve(&cli(&["--cpu", "--num_processes", "4"]), &env, 8).unwrap();
        assert_eq!(
            (w.nproc_per_node, w.world_size(), w.device),
            (4, 4, Device::Cpu)
        );
        assert_eq!(w.master_port, None);
        // No config on a machine without GPUs: accel-launch's embedded default (2 CPU ranks, 1 on a
        // single-core machine).
        let w = resolve(&cli(&[]), &env, 0).unwrap();
        let want = if crate::devices::detect_cpu().physical_cores >= 2 {
            2
        } else {
            1
        };
        assert_eq!((w.world_size(), w.device), (want, Device::Cpu));
        let w = resolve(
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
            4,
        )
        .unwrap();
        assert_eq!(
            (w.nproc_per_node, w.global_rank(0), w.master_port),
            (4, 4, Some(29500))
        );
        assert!(resolve(&cli(&["--num_machines", "2"]), &env, 0).is_err());
        assert!(resolve(
            &cli(&[
                "--num_processes",
                "3",
                "--num_machines",
                "2",
                "--main_process_ip",
                "x"
            ]),
            &env,
            0
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
        let w = resolve(&cli(&["--cpu", "--num_processes", "4"]), &env, 0).unwrap();
        assert_eq!(
            (w.num_machines, w.machine_rank, w.master_addr.as_str()),
            (2, 1, "gpu07")
        );
        let job = crate::slurm::SlurmJob::detect(&env).unwrap().unwrap();
        assert_eq!(
            w.master_port,
            job.derived_port(),
            "the same port accel-launch derives"
        );
    }

    #[test]
    fn contract_validation() {
        let base = [
            ("RANK", "1"),
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
        ];
        let c = Contract::from_env(&Environment::from_pairs(base)).unwrap();
        assert_eq!((c.rank, c.local_world_size, c.num_nodes), (1, 2, 1));
        let mut bad = Environment::from_pairs(base);
        bad.set("RANK", "2");
        assert!(Contract::from_env(&bad)
            .unwrap_err()
            .to_string()
            .contains("RANK"));
        let mut bad = Environment::from_pairs(base);
        bad.set("MASTER_PORT", "70000");
        assert!(Contract::from_env(&bad).is_err());
        let mut bad = Environment::from_pairs(base);
        bad.remove("MASTER_ADDR");
        assert!(Contract::from_env(&bad)
            .unwrap_err()
            .to_string()
            .contains("MASTER_ADDR"));
    }
}
