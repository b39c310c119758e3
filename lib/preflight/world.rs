//! The world accel-test checks: on the coordinator side this node's share of the run that
//! [`crate::launch::resolve`] decided (the same resolution accel-launch uses), and on the worker side the
//! torchrun rank contract (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, …) every rank reads back.

use super::PreflightError;
use crate::config::DistributedType;
use crate::env_vars::Environment;
use crate::launch::Run;

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
    /// What the config asks of GPUs that this machine does not have (`the config asks for 8 GPUs per
    /// node (MULTI_GPU); none is visible`): the pre-flight fails on it without starting ranks.
    pub unmet_devices: Option<String>,
}

impl World {
    /// This machine's share of a resolved run.
    pub fn of(run: &Run) -> World {
        let args = &run.args;
        let cpu = args.cpu_flag
            || args.use_cpu
            || args.distributed_type == DistributedType::MULTI_CPU
            || run.visible_gpus == 0;
        let unmet_devices = run
            .gpus_unmet
            .as_ref()
            .map(|asked| format!("{asked}; none is visible"));
        let (num_machines, machine_rank, nproc_per_node, master_addr, master_port) =
            match &run.topology {
                Some(t) => (
                    t.num_nodes as usize,
                    t.node_rank as usize,
                    t.local_world_size as usize,
                    t.master_addr.clone(),
                    // A port picked here may be lost before rank 0 binds it: the coordinator picks
                    // its own just before starting the ranks.
                    (!run.port_auto).then_some(t.master_port),
                ),
                // accelerate's single plain child: still a world of one rank for the checks.
                None => (1, 0, 1, "127.0.0.1".to_string(), None),
            };
        World {
            num_machines,
            machine_rank,
            nproc_per_node,
            master_addr,
            master_port,
            device: if cpu && unmet_devices.is_none() {
                Device::Cpu
            } else {
                Device::Cuda
            },
            gpu_ids: args.gpu_ids.clone().filter(|g| !g.is_empty() && g != "all"),
            unmet_devices,
        }
    }

    pub fn world_size(&self) -> usize {
        self.num_machines * self.nproc_per_node
    }
    /// Global rank of this machine's `local`-th rank.
    pub fn global_rank(&self, local: usize) -> usize {
        self.machine_rank * self.nproc_per_node + local
    }
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
