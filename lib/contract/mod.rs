//! The rank environment contract: what a training process must find in its environment to join a run —
//! torchrun 2.13's worker variables plus everything accelerate 1.15 exports for the configured run — in
//! one place, so `accel-launch`, `accel-env -- CMD` and `accel-test` produce exactly the same world that
//! `accelerate launch` would. Rank 0 hosts the TCPStore (`env://`): `TORCHELASTIC_USE_AGENT_STORE` is
//! never set, since there is no agent store. The worker side ([`WorkerContract::parse`]) reads it back
//! and names whatever is missing, empty or inconsistent.

pub mod accelerate;
pub mod scheduler;

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::env_vars::{self, Environment};
use crate::error::Diagnostic;
use crate::exit_status::ExitStatus;

pub use accelerate::{LaunchArgs, LaunchPath, Paradigm};

/// Variables a rank gets, in the order they are rendered.
pub type EnvMap = BTreeMap<String, String>;

/// The shape of a run as torchrun describes it to its workers (static rendezvous, homogeneous nodes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Workers on this node (`LOCAL_WORLD_SIZE`).
    pub local_world_size: u32,
    /// This node's index (`GROUP_RANK`, `--machine_rank`).
    pub node_rank: u32,
    /// Number of nodes (`GROUP_WORLD_SIZE`).
    pub num_nodes: u32,
    pub master_addr: String,
    pub master_port: u16,
    /// `TORCHELASTIC_RUN_ID`: `none` for a static rendezvous, as torchrun.
    pub run_id: String,
    pub role: String,
    pub max_restarts: u32,
    /// The world as the multi-node control plane's rendezvous assembled it, which lets nodes run
    /// different numbers of ranks; `None` before it (every node runs `local_world_size` ranks).
    pub assembled: Option<Assembled>,
}

/// A node's place in a world whose nodes may differ in rank count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Assembled {
    pub world_size: u32,
    /// The global rank of this node's local rank 0.
    pub rank_offset: u32,
}

impl Topology {
    pub fn world_size(&self) -> u32 {
        match self.assembled {
            Some(a) => a.world_size,
            None => self.local_world_size * self.num_nodes,
        }
    }
    /// Global rank of a local rank: nodes are filled in order, as torchrun's static rendezvous does.
    pub fn rank_of(&self, local_rank: u32) -> u32 {
        match self.assembled {
            Some(a) => a.rank_offset + local_rank,
            None => self.node_rank * self.local_world_size + local_rank,
        }
    }
}

/// torchrun's per-worker variables (`torch/distributed/elastic/agent/server/local_elastic_agent.py::_start_workers`), minus `TORCHELASTIC_USE_AGENT_STORE`.
/// `error_file` is `TORCHELASTIC_ERROR_FILE` (empty when there is no log directory, like
/// `--log-dir /dev/null`); `launcher_env` supplies `TORCH_NCCL_ASYNC_ERROR_HANDLING` when already set.
pub fn worker_env(
    t: &Topology,
    local_rank: u32,
    restart_count: u32,
    error_file: Option<&std::path::Path>,
    launcher_env: &Environment,
) -> EnvMap {
    let rank = t.rank_of(local_rank).to_string();
    let world = t.world_size().to_string();
    let mut m = EnvMap::new();
    let mut set = |k: &str, v: String| {
        m.insert(k.to_string(), v);
    };
    set(env_vars::RANK, rank.clone());
    set(env_vars::LOCAL_RANK, local_rank.to_string());
    set(env_vars::WORLD_SIZE, world.clone());
    set(env_vars::LOCAL_WORLD_SIZE, t.local_world_size.to_string());
    set(env_vars::GROUP_RANK, t.node_rank.to_string());
    set(env_vars::GROUP_WORLD_SIZE, t.num_nodes.to_string());
    set(env_vars::ROLE_NAME, t.role.clone());
    set(env_vars::ROLE_RANK, rank);
    set(env_vars::ROLE_WORLD_SIZE, world);
    set(env_vars::MASTER_ADDR, t.master_addr.clone());
    set(env_vars::MASTER_PORT, t.master_port.to_string());
    set(
        env_vars::TORCHELASTIC_RESTART_COUNT,
        restart_count.to_string(),
    );
    set(
        env_vars::TORCHELASTIC_MAX_RESTARTS,
        t.max_restarts.to_string(),
    );
    set(env_vars::TORCHELASTIC_RUN_ID, t.run_id.clone());
    set(
        env_vars::TORCHELASTIC_ERROR_FILE,
        error_file
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
    );
    set(
        env_vars::TORCH_NCCL_ASYNC_ERROR_HANDLING,
        launcher_env
            .get(env_vars::TORCH_NCCL_ASYNC_ERROR_HANDLING)
            .unwrap_or("1")
            .to_string(),
    );
    set(
        env_vars::TORCHELASTIC_SIGNALS_TO_HANDLE,
        "SIGTERM,SIGINT,SIGHUP,SIGQUIT".into(),
    );
    m
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ContractError {
    #[error("environment variable {0} is not set")]
    Missing(&'static str),
    #[error("environment variable {0} is empty")]
    Empty(&'static str),
    #[error("environment variable {name}=`{value}` is not {expected}")]
    Invalid {
        name: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("inconsistent rank contract: {0}")]
    Inconsistent(String),
    #[error("cannot derive a rank contract: {0}")]
    NoScheduler(String),
    #[error("inconsistent topology: {0}")]
    Topology(String),
    /// The same, for one task placed by its scheduler (`accel-env --`), which takes no topology flags.
    #[error("inconsistent topology: {0}")]
    TaskTopology(String),
}

impl Diagnostic for ContractError {
    fn hints(&self) -> Vec<String> {
        match self {
            ContractError::NoScheduler(_) => vec![
                "run it as `srun accel-env -- CMD` inside a SLURM allocation, under mpirun, or with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set".into(),
            ],
            ContractError::Topology(_) => vec![
                "check the allocation (nodes, tasks per node, GPUs per task) or pass --num_machines/--machine_rank/--main_process_ip explicitly".into(),
            ],
            ContractError::TaskTopology(_) => vec![
                "check the allocation (nodes, tasks per node, GPUs per task), or set RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for this task yourself".into(),
            ],
            _ => vec!["start this process with accel-launch, torchrun or `srun accel-env --`".into()],
        }
    }
    fn exit_status(&self) -> ExitStatus {
        ExitStatus::LauncherFailed
    }
}

/// The contract as a worker reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerContract {
    pub rank: u32,
    pub local_rank: u32,
    pub world_size: u32,
    pub local_world_size: u32,
    pub group_rank: Option<u32>,
    pub group_world_size: Option<u32>,
    pub master_addr: String,
    pub master_port: u16,
    pub restart_count: u32,
    pub error_file: Option<PathBuf>,
}

fn required<'a>(env: &'a Environment, name: &'static str) -> Result<&'a str, ContractError> {
    match env.get(name) {
        None => Err(ContractError::Missing(name)),
        Some(v) if v.trim().is_empty() => Err(ContractError::Empty(name)),
        Some(v) => Ok(v.trim()),
    }
}

fn number<T: std::str::FromStr>(
    name: &'static str,
    value: &str,
    expected: &'static str,
) -> Result<T, ContractError> {
    value.parse().map_err(|_| ContractError::Invalid {
        name,
        value: value.to_string(),
        expected,
    })
}

fn optional_number(env: &Environment, name: &'static str) -> Result<Option<u32>, ContractError> {
    match env.non_empty(name) {
        None => Ok(None),
        Some(v) => number(name, v.trim(), "a non-negative integer").map(Some),
    }
}

impl WorkerContract {
    /// Reads and checks the contract: every required variable present and non-empty, numbers that are
    /// numbers, ranks inside their worlds, a port in 1..=65535.
    pub fn parse(env: &Environment) -> Result<WorkerContract, ContractError> {
        let nat = "a non-negative integer";
        let rank = number(env_vars::RANK, required(env, env_vars::RANK)?, nat)?;
        let world_size: u32 = number(
            env_vars::WORLD_SIZE,
            required(env, env_vars::WORLD_SIZE)?,
            nat,
        )?;
        let local_rank = number(
            env_vars::LOCAL_RANK,
            required(env, env_vars::LOCAL_RANK)?,
            nat,
        )?;
        let local_world_size: u32 = match env.non_empty(env_vars::LOCAL_WORLD_SIZE) {
            Some(v) => number(env_vars::LOCAL_WORLD_SIZE, v.trim(), nat)?,
            None => world_size,
        };
        let master_addr = required(env, env_vars::MASTER_ADDR)?.to_string();
        let master_port: u16 = number(
            env_vars::MASTER_PORT,
            required(env, env_vars::MASTER_PORT)?,
            "a port number (1-65535)",
        )?;
        if master_port == 0 {
            return Err(ContractError::Invalid {
                name: env_vars::MASTER_PORT,
                value: "0".into(),
                expected: "a port number (1-65535)",
            });
        }
        if world_size == 0 {
            return Err(ContractError::Inconsistent("WORLD_SIZE is 0".into()));
        }
        if rank >= world_size {
            return Err(ContractError::Inconsistent(format!(
                "RANK={rank} is not below WORLD_SIZE={world_size}"
            )));
        }
        if local_world_size == 0 || local_world_size > world_size {
            return Err(ContractError::Inconsistent(format!(
                "LOCAL_WORLD_SIZE={local_world_size} must be between 1 and WORLD_SIZE={world_size}"
            )));
        }
        if local_rank >= local_world_size {
            return Err(ContractError::Inconsistent(format!(
                "LOCAL_RANK={local_rank} is not below LOCAL_WORLD_SIZE={local_world_size}"
            )));
        }
        let group_rank = optional_number(env, env_vars::GROUP_RANK)?;
        let group_world_size = optional_number(env, env_vars::GROUP_WORLD_SIZE)?;
        if let (Some(g), Some(n)) = (group_rank, group_world_size) {
            if g >= n {
                return Err(ContractError::Inconsistent(format!(
                    "GROUP_RANK={g} is not below GROUP_WORLD_SIZE={n}"
                )));
            }
            if n * local_world_size == world_size && rank != g * local_world_size + local_rank {
                return Err(ContractError::Inconsistent(format!(
                    "RANK={rank} does not match GROUP_RANK={g} × LOCAL_WORLD_SIZE={local_world_size} + LOCAL_RANK={local_rank}"
                )));
            }
        }
        Ok(WorkerContract {
            rank,
            local_rank,
            world_size,
            local_world_size,
            group_rank,
            group_world_size,
            master_addr,
            master_port,
            restart_count: optional_number(env, env_vars::TORCHELASTIC_RESTART_COUNT)?.unwrap_or(0),
            error_file: env
                .non_empty(env_vars::TORCHELASTIC_ERROR_FILE)
                .map(PathBuf::from),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo() -> Topology {
        Topology {
            local_world_size: 2,
            node_rank: 1,
            num_nodes: 2,
            master_addr: "10.0.0.1".into(),
            master_port: 29500,
            run_id: "none".into(),
            role: "default".into(),
            max_restarts: 0,
            assembled: None,
        }
    }

    #[test]
    fn renders_torchrun_variables_without_agent_store() {
        let env = worker_env(&topo(), 1, 2, None, &Environment::default());
        assert_eq!(env["RANK"], "3");
        assert_eq!(env["WORLD_SIZE"], "4");
        assert_eq!(env["GROUP_RANK"], "1");
        assert_eq!(env["ROLE_RANK"], "3");
        assert_eq!(env["TORCHELASTIC_RESTART_COUNT"], "2");
        assert_eq!(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
        assert!(!env.contains_key("TORCHELASTIC_USE_AGENT_STORE"));
        let parsed = WorkerContract::parse(&Environment::from_pairs(env.clone())).unwrap();
        assert_eq!(parsed.rank, 3);
        assert_eq!(parsed.restart_count, 2);
        assert_eq!(parsed.group_world_size, Some(2));
    }

    #[test]
    fn parse_names_missing_empty_and_inconsistent_values() {
        let good = worker_env(&topo(), 0, 0, None, &Environment::default());
        let with = |k: &str, v: Option<&str>| {
            let mut m = good.clone();
            match v {
                Some(v) => m.insert(k.into(), v.into()),
                None => m.remove(k),
            };
            WorkerContract::parse(&Environment::from_pairs(m)).unwrap_err()
        };
        assert_eq!(
            with("MASTER_ADDR", None),
            ContractError::Missing("MASTER_ADDR")
        );
        assert_eq!(
            with("MASTER_PORT", Some("")),
            ContractError::Empty("MASTER_PORT")
        );
        assert!(with("MASTER_PORT", Some("70000"))
            .to_string()
            .contains("MASTER_PORT=`70000`"));
        assert!(with("RANK", Some("9"))
            .to_string()
            .contains("RANK=9 is not below WORLD_SIZE=4"));
        assert!(with("LOCAL_RANK", Some("2"))
            .to_string()
            .contains("LOCAL_RANK=2"));
        assert!(with("RANK", Some("1"))
            .to_string()
            .contains("does not match GROUP_RANK"));
        assert!(with("WORLD_SIZE", Some("x"))
            .to_string()
            .contains("WORLD_SIZE=`x`"));
    }
}
