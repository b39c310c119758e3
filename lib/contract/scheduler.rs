//! Where a node's place in a multi-node job comes from when the command line does not say: SLURM,
//! Open MPI / PMI, Kubeflow Trainer v2 (torchrun's `PET_*` variables), SkyPilot (`SKYPILOT_*`), or
//! torchrun-style variables set from outside (the Kubeflow PyTorchJob operator). Used two ways:
//! per node (`srun accel-launch`: which node am I, how many nodes, who hosts rank 0) and per task
//! (`srun accel-env -- python train.py`: the whole rank contract of this one task).

use std::net::ToSocketAddrs;

use super::{ContractError, EnvMap, Topology};
use crate::env_vars::{self, Environment};
use crate::slurm::SlurmJob;

/// Where the node topology came from, for `--dry-run` and error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Source {
    Flags,
    Slurm,
    Mpi,
    /// Kubeflow Trainer v2: torchrun's `PET_*` variables.
    Kubeflow,
    SkyPilot,
    External,
}

/// A node's place in the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePlace {
    pub source: Source,
    pub num_nodes: u32,
    pub node_rank: u32,
    pub master_addr: Option<String>,
    pub master_port: Option<u16>,
    /// Ranks per node when the scheduler says (`PET_NPROC_PER_NODE`, `SKYPILOT_NUM_GPUS_PER_NODE`).
    pub procs_per_node: Option<u32>,
}

fn get_u32(env: &Environment, name: &str) -> Result<Option<u32>, ContractError> {
    match env.non_empty(name) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| ContractError::Topology(format!("{name}=`{v}` is not a number"))),
    }
}

/// Detects the node's place from SLURM or from outside variables (`MASTER_ADDR` + `NODE_RANK`/`GROUP_RANK`,
/// as Kubernetes operators set). `None` when nothing says this is a multi-node job.
pub fn detect_node(env: &Environment) -> Result<Option<NodePlace>, ContractError> {
    let job = SlurmJob::detect(env).map_err(|e| ContractError::Topology(e.to_string()))?;
    if let Some(job) = job.filter(|j| !j.nodes.is_empty()) {
        let num_nodes = job.num_nodes();
        if num_nodes > 1 && job.node_id.is_none() {
            return Err(ContractError::Topology(format!(
                "SLURM_NODEID is not set on a {num_nodes}-node job, so every node would be rank 0 (start accel-launch with srun, one task per node)"
            )));
        }
        let node_rank = job.node_id.unwrap_or(0);
        if node_rank >= num_nodes {
            return Err(ContractError::Topology(format!(
                "SLURM_NODEID={node_rank} is not below the number of nodes ({num_nodes})"
            )));
        }
        if job.nodes.len() as u32 != num_nodes {
            return Err(ContractError::Topology(format!(
                "SLURM_NNODES={num_nodes} but the node list has {} hosts ({})",
                job.nodes.len(),
                job.nodes.join(",")
            )));
        }
        return Ok(Some(NodePlace {
            source: Source::Slurm,
            num_nodes,
            node_rank,
            master_addr: job.nodes.first().cloned(),
            master_port: job.derived_port(),
            procs_per_node: None,
        }));
    }
    // One launcher per node under mpirun (`mpirun -npernode 1 accel-launch …`): MPI ranks are nodes.
    let mpi = match (
        get_u32(env, env_vars::OMPI_COMM_WORLD_RANK)?.or(get_u32(env, env_vars::PMI_RANK)?),
        get_u32(env, env_vars::OMPI_COMM_WORLD_SIZE)?.or(get_u32(env, env_vars::PMI_SIZE)?),
    ) {
        (Some(r), Some(n)) if n > 1 => Some((r, n)),
        _ => None,
    };
    if let Some((rank, size)) = mpi {
        let local = get_u32(env, env_vars::OMPI_COMM_WORLD_LOCAL_SIZE)?
            .or(get_u32(env, env_vars::MPI_LOCALNRANKS)?);
        if local.is_some_and(|l| l > 1) {
            return Err(ContractError::Topology(format!(
                "mpirun started {} launchers on this node: accel-launch is one per node (mpirun -npernode 1), or use `mpirun accel-env -- CMD` for one process per rank",
                local.unwrap_or(0)
            )));
        }
        let addr = env.non_empty(env_vars::MASTER_ADDR).ok_or_else(|| {
            ContractError::Topology("under mpirun, MASTER_ADDR must name the host of the first node (mpirun -x MASTER_ADDR=host0)".into())
        })?;
        return Ok(Some(NodePlace {
            source: Source::Mpi,
            num_nodes: size,
            node_rank: rank,
            master_addr: Some(addr.to_string()),
            master_port: env
                .non_empty(env_vars::MASTER_PORT)
                .and_then(|p| p.trim().parse().ok()),
            procs_per_node: None,
        }));
    }
    if let Some(place) = kubeflow_trainer(env)? {
        return Ok(Some(place));
    }
    if let Some(place) = skypilot(env)? {
        return Ok(Some(place));
    }
    // Outside variables: NODE_RANK/NNODES (or GROUP_*), or a pod-level RANK/WORLD_SIZE as the
    // Kubernetes PyTorchJob operator sets for one launcher per pod (no LOCAL_RANK: not a worker).
    let pod = env.non_empty(env_vars::LOCAL_RANK).is_none();
    let nnodes = get_u32(env, env_vars::NNODES)?
        .or(get_u32(env, env_vars::GROUP_WORLD_SIZE)?)
        .or(if pod {
            get_u32(env, env_vars::WORLD_SIZE)?
        } else {
            None
        });
    let node_rank = get_u32(env, env_vars::NODE_RANK)?
        .or(get_u32(env, env_vars::GROUP_RANK)?)
        .or(if pod {
            get_u32(env, env_vars::RANK)?
        } else {
            None
        });
    if let (Some(addr), Some(n), Some(r)) =
        (env.non_empty(env_vars::MASTER_ADDR), nnodes, node_rank)
    {
        let port = match env.non_empty(env_vars::MASTER_PORT) {
            Some(p) => Some(p.trim().parse().map_err(|_| {
                ContractError::Topology(format!("MASTER_PORT=`{p}` is not a port number"))
            })?),
            None => None,
        };
        return Ok(Some(NodePlace {
            source: Source::External,
            num_nodes: n,
            node_rank: r,
            master_addr: Some(addr.to_string()),
            master_port: port,
            procs_per_node: None,
        }));
    }
    Ok(None)
}

fn port(env: &Environment, name: &str) -> Result<Option<u16>, ContractError> {
    match env.non_empty(name) {
        None => Ok(None),
        Some(p) => match p.trim().parse::<u16>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(ContractError::Topology(format!(
                "{name}=`{p}` is not a port number"
            ))),
        },
    }
}

/// Kubeflow Trainer v2's torch runtime gives every node torchrun's flags as `PET_*` variables
/// (torchrun reads `PET_<FLAG>` as the flag's default: torch/distributed/argparse_util.py::env):
/// PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT.
fn kubeflow_trainer(env: &Environment) -> Result<Option<NodePlace>, ContractError> {
    let Some(nnodes) = env.non_empty(env_vars::PET_NNODES) else {
        return Ok(None);
    };
    // torchrun accepts MIN:MAX; a fixed size is the only static rendezvous.
    let num_nodes = match nnodes.trim().split_once(':') {
        None => nnodes.trim().parse::<u32>().ok(),
        Some((lo, hi)) if lo.trim() == hi.trim() => lo.trim().parse().ok(),
        Some(_) => {
            return Err(ContractError::Topology(format!(
                "PET_NNODES=`{nnodes}` is an elastic range; accel-launch runs a fixed number of nodes (use torchrun with --rdzv_backend c10d for elastic jobs)"
            )))
        }
    }
    .filter(|n| *n > 0)
    .ok_or_else(|| {
        ContractError::Topology(format!("PET_NNODES=`{nnodes}` is not a number of nodes"))
    })?;
    let node_rank = get_u32(env, env_vars::PET_NODE_RANK)?.ok_or_else(|| {
        ContractError::Topology(format!(
            "PET_NNODES={num_nodes} but PET_NODE_RANK is not set, so every node would be rank 0"
        ))
    })?;
    if node_rank >= num_nodes {
        return Err(ContractError::Topology(format!(
            "PET_NODE_RANK={node_rank} is not below PET_NNODES={num_nodes}"
        )));
    }
    let master_addr = env.non_empty(env_vars::PET_MASTER_ADDR).map(str::to_string);
    if num_nodes > 1 && master_addr.is_none() {
        return Err(ContractError::Topology(format!(
            "PET_NNODES={num_nodes} but PET_MASTER_ADDR is not set (the host of node 0)"
        )));
    }
    // "auto", "gpu", "cpu" are torchrun's device-dependent counts: left to the launcher's default.
    let procs_per_node = match env.non_empty(env_vars::PET_NPROC_PER_NODE) {
        Some(v) if ["auto", "gpu", "cpu", "xpu"].contains(&v.trim()) => None,
        Some(v) => Some(
            v.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    ContractError::Topology(format!(
                        "PET_NPROC_PER_NODE=`{v}` is not a number of processes"
                    ))
                })?,
        ),
        None => None,
    };
    Ok(Some(NodePlace {
        source: Source::Kubeflow,
        num_nodes,
        node_rank,
        master_addr,
        master_port: port(env, env_vars::PET_MASTER_PORT)?,
        procs_per_node,
    }))
}

/// SkyPilot gives every node of a multi-node task the list of node IPs (one per line, head node
/// first), its rank and the node count; the rendezvous port is the launcher's default.
fn skypilot(env: &Environment) -> Result<Option<NodePlace>, ContractError> {
    let Some(ips) = env.non_empty(env_vars::SKYPILOT_NODE_IPS) else {
        return Ok(None);
    };
    let ips: Vec<&str> = ips.split_whitespace().collect();
    let num_nodes = get_u32(env, env_vars::SKYPILOT_NUM_NODES)?.unwrap_or(ips.len() as u32);
    if ips.len() as u32 != num_nodes {
        return Err(ContractError::Topology(format!(
            "SKYPILOT_NUM_NODES={num_nodes} but SKYPILOT_NODE_IPS lists {} addresses ({})",
            ips.len(),
            ips.join(",")
        )));
    }
    let node_rank = get_u32(env, env_vars::SKYPILOT_NODE_RANK)?.ok_or_else(|| {
        ContractError::Topology(
            "SKYPILOT_NODE_IPS is set but SKYPILOT_NODE_RANK is not, so every node would be rank 0"
                .into(),
        )
    })?;
    if node_rank >= num_nodes {
        return Err(ContractError::Topology(format!(
            "SKYPILOT_NODE_RANK={node_rank} is not below SKYPILOT_NUM_NODES={num_nodes}"
        )));
    }
    Ok(Some(NodePlace {
        source: Source::SkyPilot,
        num_nodes,
        node_rank,
        master_addr: ips.first().map(|s| s.to_string()),
        master_port: None,
        procs_per_node: get_u32(env, env_vars::SKYPILOT_NUM_GPUS_PER_NODE)?.filter(|n| *n > 0),
    }))
}

/// Whether `host` resolves only to loopback addresses (a multi-node rendezvous there cannot work).
pub fn is_loopback(host: &str) -> bool {
    match (host, 0u16).to_socket_addrs() {
        Ok(addrs) => {
            let addrs: Vec<_> = addrs.collect();
            !addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback())
        }
        Err(_) => false,
    }
}

/// One task's rank contract derived from the scheduler (one task per GPU: no supervisor process).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskPlace {
    pub source: Source,
    pub rank: u32,
    pub local_rank: u32,
    pub world_size: u32,
    pub local_world_size: u32,
    pub topology: Topology,
}

/// Derives this task's contract: SLURM (`SLURM_PROCID`, `SLURM_LOCALID`, `SLURM_NTASKS`, …), Open MPI
/// (`OMPI_COMM_WORLD_*`), PMI (`PMI_RANK`/`PMI_SIZE` + `MPI_LOCALRANKID`/`MPI_LOCALNRANKS`), or an existing
/// torchrun contract (`RANK`, `WORLD_SIZE`, … set from outside), in that order.
pub fn detect_task(env: &Environment, default_port: u16) -> Result<TaskPlace, ContractError> {
    let job = SlurmJob::detect(env).map_err(|e| ContractError::Topology(e.to_string()))?;
    if let Some(job) = job.filter(|j| j.procid.is_some()) {
        return slurm_task(&job, env, default_port);
    }
    for vars in [OPEN_MPI, PMI] {
        if let Some(t) = mpi_rank_task(vars, env, default_port)? {
            return Ok(t);
        }
    }
    if let Some(t) = pytorchjob_pod(env, default_port)? {
        return Ok(t);
    }
    if env.non_empty(env_vars::RANK).is_some() {
        return torchrun_task(env);
    }
    Err(ContractError::NoScheduler(
        "no SLURM task (SLURM_PROCID), MPI rank (OMPI_COMM_WORLD_RANK, PMI_RANK) or RANK in the environment".into(),
    ))
}

/// A SLURM task: SLURM's rank and layout, rank 0 on the step's first node.
fn slurm_task(
    job: &SlurmJob,
    env: &Environment,
    default_port: u16,
) -> Result<TaskPlace, ContractError> {
    let rank = job.procid.unwrap_or(0);
    let world = job.ntasks.ok_or_else(|| {
        ContractError::Topology("SLURM_PROCID is set but SLURM_NTASKS is not".into())
    })?;
    let local_rank = job.localid.unwrap_or(0);
    let num_nodes = job.num_nodes();
    let node = job.node_id.unwrap_or(0) as usize;
    let local_world = slurm_tasks_on_node(job.tasks_per_node.as_deref(), num_nodes, node, world)?;
    if let Some(gpus) = job.gpus_on_node.filter(|g| *g > 0) {
        if gpus != local_world && gpus != 1 {
            return Err(ContractError::Topology(format!(
                "{local_world} tasks per node but SLURM_GPUS_ON_NODE={gpus}: one task per GPU needs as many tasks as GPUs"
            )));
        }
    }
    let master = job
        .nodes
        .first()
        .cloned()
        .ok_or_else(|| ContractError::Topology("SLURM_JOB_NODELIST is not set".into()))?;
    if num_nodes > 1
        && job
            .nodes
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            > 1
        && is_loopback(&master)
    {
        return Err(ContractError::Topology(format!(
            "the rendezvous host `{master}` resolves to a loopback address on a {num_nodes}-node job"
        )));
    }
    task(
        Source::Slurm,
        rank,
        local_rank,
        world,
        local_world,
        job.node_id.unwrap_or(rank / local_world.max(1)),
        num_nodes,
        master,
        job.derived_port().unwrap_or(default_port),
        env,
    )
}

/// How many of the step's `world` tasks run on `node`. The step's real layout (`layout`, SLURM's
/// per-node counts: `2(x3),1` is three nodes of 2 and one of 1; `-n4` on nodes with room for 3
/// places 3 + 1) decides: each task's node runs as many ranks as SLURM put there, and RANK is
/// SLURM's own, so uneven nodes make a valid world. Without a layout the tasks must divide evenly.
fn slurm_tasks_on_node(
    layout: Option<&str>,
    num_nodes: u32,
    node: usize,
    world: u32,
) -> Result<u32, ContractError> {
    let counts = match layout {
        Some(v) => Some(
            crate::slurm::expand_counts(v)
                .filter(|l| !l.is_empty())
                .ok_or_else(|| {
                    ContractError::Topology(format!("`{v}` is not a SLURM task layout"))
                })?,
        ),
        None => None,
    };
    Ok(match &counts {
        // A layout as long as the node list names every node; a single count applies to all.
        Some(l) if l.len() == num_nodes as usize => {
            let total: u32 = l.iter().sum();
            if total != world {
                return Err(ContractError::Topology(format!(
                    "the task layout {} places {total} tasks but SLURM_NTASKS={world}",
                    layout.unwrap_or_default()
                )));
            }
            l[node.min(l.len() - 1)]
        }
        Some(l) if l.len() == 1 => l[0],
        _ => {
            if world % num_nodes != 0 {
                return Err(ContractError::Topology(format!(
                    "{world} tasks do not divide evenly over {num_nodes} nodes, and SLURM gave no per-node layout; use --ntasks-per-node"
                )));
            }
            world / num_nodes
        }
    })
}

/// The variables an MPI launcher gives each rank: its rank and the world's size, its rank on the
/// node and the node's rank count.
#[derive(Clone, Copy)]
struct MpiVars {
    rank: &'static str,
    size: &'static str,
    local_rank: &'static str,
    local_size: &'static str,
}

const OPEN_MPI: MpiVars = MpiVars {
    rank: env_vars::OMPI_COMM_WORLD_RANK,
    size: env_vars::OMPI_COMM_WORLD_SIZE,
    local_rank: env_vars::OMPI_COMM_WORLD_LOCAL_RANK,
    local_size: env_vars::OMPI_COMM_WORLD_LOCAL_SIZE,
};

const PMI: MpiVars = MpiVars {
    rank: env_vars::PMI_RANK,
    size: env_vars::PMI_SIZE,
    local_rank: env_vars::MPI_LOCALRANKID,
    local_size: env_vars::MPI_LOCALNRANKS,
};

/// An MPI rank, when `vars` give its rank and the world's size.
fn mpi_rank_task(
    vars: MpiVars,
    env: &Environment,
    default_port: u16,
) -> Result<Option<TaskPlace>, ContractError> {
    let (Some(rank), Some(world)) = (get_u32(env, vars.rank)?, get_u32(env, vars.size)?) else {
        return Ok(None);
    };
    let local_rank = get_u32(env, vars.local_rank)?.unwrap_or(0);
    let local_world = get_u32(env, vars.local_size)?.unwrap_or(world);
    mpi_task(
        Source::Mpi,
        rank,
        local_rank,
        world,
        local_world,
        env,
        default_port,
    )
    .map(Some)
}

/// A Kubeflow PyTorchJob (v1) pod: MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK per pod, no LOCAL_RANK —
/// one process per pod is the whole contract.
fn pytorchjob_pod(
    env: &Environment,
    default_port: u16,
) -> Result<Option<TaskPlace>, ContractError> {
    if env.non_empty(env_vars::RANK).is_none()
        || env.non_empty(env_vars::LOCAL_RANK).is_some()
        || env.non_empty(env_vars::MASTER_ADDR).is_none()
    {
        return Ok(None);
    }
    let rank = get_u32(env, env_vars::RANK)?.unwrap_or(0);
    let world = get_u32(env, env_vars::WORLD_SIZE)?
        .ok_or_else(|| ContractError::Topology("RANK is set but WORLD_SIZE is not".into()))?;
    let port = port(env, env_vars::MASTER_PORT)?.unwrap_or(default_port);
    task(
        Source::External,
        rank,
        0,
        world,
        1,
        rank,
        world,
        env.non_empty(env_vars::MASTER_ADDR)
            .unwrap_or_default()
            .to_string(),
        port,
        env,
    )
    .map(Some)
}

/// A whole torchrun contract set from outside (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`, …).
fn torchrun_task(env: &Environment) -> Result<TaskPlace, ContractError> {
    let c = super::WorkerContract::parse(env)?;
    let num_nodes = c
        .group_world_size
        .unwrap_or((c.world_size / c.local_world_size).max(1));
    let node = c.group_rank.unwrap_or(c.rank / c.local_world_size);
    task(
        Source::External,
        c.rank,
        c.local_rank,
        c.world_size,
        c.local_world_size,
        node,
        num_nodes,
        c.master_addr,
        c.master_port,
        env,
    )
}

fn mpi_task(
    source: Source,
    rank: u32,
    local_rank: u32,
    world: u32,
    local_world: u32,
    env: &Environment,
    default_port: u16,
) -> Result<TaskPlace, ContractError> {
    // Every rank on this node: rank 0 is local (accelerate's state.py asks for MASTER_ADDR only when
    // local_world_size != world_size).
    let master = match env.non_empty(env_vars::MASTER_ADDR) {
        Some(m) => m,
        None if local_world == world => "127.0.0.1",
        None => return Err(ContractError::Topology(format!(
            "under MPI with {world} ranks over {} nodes, MASTER_ADDR must name the host of rank 0 (e.g. mpirun -x MASTER_ADDR=host0)",
            (world / local_world.max(1)).max(1)
        ))),
    };
    let port = match env.non_empty(env_vars::MASTER_PORT) {
        Some(p) => p.trim().parse().map_err(|_| {
            ContractError::Topology(format!("MASTER_PORT=`{p}` is not a port number"))
        })?,
        None => default_port,
    };
    let num_nodes = (world / local_world.max(1)).max(1);
    task(
        source,
        rank,
        local_rank,
        world,
        local_world,
        rank / local_world.max(1),
        num_nodes,
        master.to_string(),
        port,
        env,
    )
}

#[allow(clippy::too_many_arguments)]
fn task(
    source: Source,
    rank: u32,
    local_rank: u32,
    world: u32,
    local_world: u32,
    node_rank: u32,
    num_nodes: u32,
    master: String,
    port: u16,
    _env: &Environment,
) -> Result<TaskPlace, ContractError> {
    if rank >= world {
        return Err(ContractError::Topology(format!(
            "rank {rank} is not below the world size {world}"
        )));
    }
    if local_rank >= local_world {
        return Err(ContractError::Topology(format!(
            "local rank {local_rank} is not below the tasks per node {local_world}"
        )));
    }
    Ok(TaskPlace {
        source,
        rank,
        local_rank,
        world_size: world,
        local_world_size: local_world,
        topology: Topology {
            local_world_size: local_world,
            node_rank,
            num_nodes,
            master_addr: master,
            master_port: port,
            run_id: "none".into(),
            role: "default".into(),
            max_restarts: 0,
            assembled: None,
        },
    })
}

impl TaskPlace {
    /// torchrun's variables for this task. `RANK` is the scheduler's, which need not follow node order.
    pub fn worker_env(&self, env: &Environment) -> EnvMap {
        let mut m = super::worker_env(&self.topology, self.local_rank, 0, None, env);
        m.insert(env_vars::RANK.into(), self.rank.to_string());
        m.insert(env_vars::ROLE_RANK.into(), self.rank.to_string());
        m.insert(env_vars::WORLD_SIZE.into(), self.world_size.to_string());
        m.insert(
            env_vars::ROLE_WORLD_SIZE.into(),
            self.world_size.to_string(),
        );
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_task_contract() {
        let env = Environment::from_pairs([
            ("SLURM_JOB_ID", "77"),
            ("SLURM_JOB_NODELIST", "gpu[07-08]"),
            ("SLURM_NNODES", "2"),
            ("SLURM_NODEID", "1"),
            ("SLURM_PROCID", "5"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_GPUS_ON_NODE", "4"),
        ]);
        let t = detect_task(&env, 29500).unwrap();
        assert_eq!(
            (t.rank, t.local_rank, t.world_size, t.local_world_size),
            (5, 1, 8, 4)
        );
        assert_eq!(t.topology.master_addr, "gpu07");
        assert_eq!(t.topology.node_rank, 1);
        let w = t.worker_env(&env);
        assert_eq!(w["RANK"], "5");
        assert_eq!(w["GROUP_RANK"], "1");
    }

    #[test]
    fn topology_errors_before_spawning() {
        let base = [
            ("SLURM_JOB_ID", "77"),
            ("SLURM_JOB_NODELIST", "gpu[07-08]"),
            ("SLURM_NNODES", "2"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "8"),
        ];
        let mut env = Environment::from_pairs(base);
        env.set("SLURM_GPUS_ON_NODE", "2");
        let e = detect_task(&env, 1).unwrap_err().to_string();
        assert!(e.contains("SLURM_GPUS_ON_NODE=2"), "{e}");
        let mut env = Environment::from_pairs(base);
        env.set("SLURM_NTASKS", "7");
        assert!(detect_task(&env, 1)
            .unwrap_err()
            .to_string()
            .contains("do not divide"));
        let mut env = Environment::from_pairs(base);
        env.set("SLURM_JOB_NODELIST", "localhost,127.0.0.1");
        assert!(detect_task(&env, 1)
            .unwrap_err()
            .to_string()
            .contains("loopback"));
        let mut env = Environment::from_pairs(base);
        env.set("SLURM_NODEID", "2");
        assert!(detect_node(&env)
            .unwrap_err()
            .to_string()
            .contains("SLURM_NODEID=2"));
        let env = Environment::from_pairs(base);
        assert!(detect_node(&env)
            .unwrap_err()
            .to_string()
            .contains("every node would be rank 0"));
        let mut env = Environment::from_pairs(base);
        env.set("SLURM_NNODES", "3");
        env.set("SLURM_NODEID", "0");
        assert!(detect_node(&env)
            .unwrap_err()
            .to_string()
            .contains("SLURM_NNODES=3"));
        assert!(matches!(
            detect_task(&Environment::default(), 1),
            Err(ContractError::NoScheduler(_))
        ));
    }

    #[test]
    fn mpi_and_external() {
        let env = Environment::from_pairs([
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("MASTER_ADDR", "h0"),
        ]);
        let t = detect_task(&env, 29500).unwrap();
        assert_eq!(
            (
                t.rank,
                t.topology.node_rank,
                t.topology.num_nodes,
                t.topology.master_port
            ),
            (3, 1, 2, 29500)
        );
        let env = Environment::from_pairs([
            ("MASTER_ADDR", "10.1.1.1"),
            ("MASTER_PORT", "1234"),
            ("NODE_RANK", "1"),
            ("NNODES", "2"),
        ]);
        let n = detect_node(&env).unwrap().unwrap();
        let k8s = Environment::from_pairs([
            ("MASTER_ADDR", "job-master-0"),
            ("MASTER_PORT", "23456"),
            ("RANK", "2"),
            ("WORLD_SIZE", "3"),
        ]);
        let k = detect_node(&k8s).unwrap().unwrap();
        assert_eq!(
            (k.num_nodes, k.node_rank, k.master_port),
            (3, 2, Some(23456))
        );
        let mpi = Environment::from_pairs([
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),
            ("MASTER_ADDR", "h0"),
        ]);
        let m = detect_node(&mpi).unwrap().unwrap();
        assert_eq!((m.source, m.num_nodes, m.node_rank), (Source::Mpi, 2, 1));
        let mut two = mpi.clone();
        two.set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
        assert!(detect_node(&two)
            .unwrap_err()
            .to_string()
            .contains("-npernode 1"));
        assert_eq!(
            (n.source, n.num_nodes, n.node_rank, n.master_port),
            (Source::External, 2, 1, Some(1234))
        );
    }

    #[test]
    fn kubeflow_trainer_v2() {
        let pet = [
            ("PET_NNODES", "2"),
            ("PET_NPROC_PER_NODE", "4"),
            ("PET_NODE_RANK", "1"),
            ("PET_MASTER_ADDR", "train-node-0-0.train"),
            ("PET_MASTER_PORT", "29400"),
        ];
        let p = detect_node(&Environment::from_pairs(pet)).unwrap().unwrap();
        assert_eq!(
            p,
            NodePlace {
                source: Source::Kubeflow,
                num_nodes: 2,
                node_rank: 1,
                master_addr: Some("train-node-0-0.train".into()),
                master_port: Some(29400),
                procs_per_node: Some(4),
            }
        );
        let with = |k: &str, v: &str| {
            let mut e = Environment::from_pairs(pet);
            e.set(k, v);
            detect_node(&e)
        };
        assert_eq!(with("PET_NNODES", "2:2").unwrap().unwrap().num_nodes, 2);
        assert_eq!(
            with("PET_NPROC_PER_NODE", "auto")
                .unwrap()
                .unwrap()
                .procs_per_node,
            None
        );
        for (k, v, msg) in [
            ("PET_NNODES", "1:4", "PET_NNODES=`1:4` is an elastic range"),
            ("PET_NNODES", "x", "PET_NNODES=`x`"),
            (
                "PET_NODE_RANK",
                "2",
                "PET_NODE_RANK=2 is not below PET_NNODES=2",
            ),
            ("PET_MASTER_PORT", "0", "PET_MASTER_PORT=`0`"),
            ("PET_NPROC_PER_NODE", "four", "PET_NPROC_PER_NODE=`four`"),
        ] {
            let e = with(k, v).unwrap_err().to_string();
            assert!(e.contains(msg), "{k}={v}: {e}");
        }
        let mut e = Environment::from_pairs(pet);
        e.remove("PET_NODE_RANK");
        assert!(detect_node(&e)
            .unwrap_err()
            .to_string()
            .contains("PET_NODE_RANK is not set"));
        let mut e = Environment::from_pairs(pet);
        e.remove("PET_MASTER_ADDR");
        assert!(detect_node(&e)
            .unwrap_err()
            .to_string()
            .contains("PET_MASTER_ADDR is not set"));
    }

    #[test]
    fn skypilot() {
        let sky = [
            ("SKYPILOT_NODE_IPS", "10.0.0.5\n10.0.0.6\n"),
            ("SKYPILOT_NODE_RANK", "1"),
            ("SKYPILOT_NUM_NODES", "2"),
            ("SKYPILOT_NUM_GPUS_PER_NODE", "8"),
        ];
        let p = detect_node(&Environment::from_pairs(sky)).unwrap().unwrap();
        assert_eq!(
            (p.source, p.num_nodes, p.node_rank, p.master_addr.as_deref()),
            (Source::SkyPilot, 2, 1, Some("10.0.0.5"))
        );
        assert_eq!((p.master_port, p.procs_per_node), (None, Some(8)));
        let mut e = Environment::from_pairs(sky);
        e.set("SKYPILOT_NUM_NODES", "3");
        let err = detect_node(&e).unwrap_err().to_string();
        assert!(
            err.contains("SKYPILOT_NUM_NODES=3 but SKYPILOT_NODE_IPS lists 2 addresses"),
            "{err}"
        );
        let mut e = Environment::from_pairs(sky);
        e.remove("SKYPILOT_NODE_RANK");
        assert!(detect_node(&e)
            .unwrap_err()
            .to_string()
            .contains("SKYPILOT_NODE_RANK is not"));
        // A CPU task: no GPUs per node leaves the count to the launcher.
        let mut e = Environment::from_pairs(sky);
        e.set("SKYPILOT_NUM_GPUS_PER_NODE", "0");
        assert_eq!(detect_node(&e).unwrap().unwrap().procs_per_node, None);
    }

    #[test]
    fn pytorchjob_v1_pod_is_one_task() {
        let pod = Environment::from_pairs([
            ("MASTER_ADDR", "job-master-0"),
            ("MASTER_PORT", "23456"),
            ("WORLD_SIZE", "3"),
            ("RANK", "2"),
        ]);
        let t = detect_task(&pod, 29500).unwrap();
        assert_eq!(
            (t.rank, t.local_rank, t.world_size, t.local_world_size),
            (2, 0, 3, 1)
        );
        assert_eq!(
            (
                t.topology.node_rank,
                t.topology.num_nodes,
                t.topology.master_port
            ),
            (2, 3, 23456)
        );
        let w = t.worker_env(&pod);
        assert_eq!(
            (
                w["RANK"].as_str(),
                w["LOCAL_RANK"].as_str(),
                w["GROUP_RANK"].as_str()
            ),
            ("2", "0", "2")
        );
        let mut bad = pod.clone();
        bad.set("RANK", "3");
        assert!(detect_task(&bad, 1)
            .unwrap_err()
            .to_string()
            .contains("rank 3 is not below the world size 3"));
    }

    #[test]
    fn tasks_on_a_node_follow_slurms_layout() {
        let on = |layout, nodes, node, world| slurm_tasks_on_node(layout, nodes, node, world);
        assert_eq!(on(Some("3,1"), 2, 0, 4).unwrap(), 3);
        assert_eq!(on(Some("3,1"), 2, 1, 4).unwrap(), 1);
        // A node id past the list takes the last count; one count applies to every node.
        assert_eq!(on(Some("2(x2),1"), 3, 7, 5).unwrap(), 1);
        assert_eq!(on(Some("4"), 3, 2, 12).unwrap(), 4);
        // No layout, or one that does not name every node: the tasks divide evenly.
        assert_eq!(on(None, 2, 0, 8).unwrap(), 4);
        assert_eq!(on(Some("2,2"), 3, 0, 6).unwrap(), 2);
        let err = |layout, nodes, world| on(layout, nodes, 0, world).unwrap_err().to_string();
        assert!(err(None, 2, 5).contains("5 tasks do not divide evenly over 2 nodes"));
        assert!(err(Some("3,1"), 2, 5)
            .contains("the task layout 3,1 places 4 tasks but SLURM_NTASKS=5"));
        assert!(err(Some("x"), 2, 4).contains("`x` is not a SLURM task layout"));
        assert!(err(Some(""), 2, 4).contains("`` is not a SLURM task layout"));
    }

    #[test]
    fn slurm_step_layout() {
        let base = [
            ("SLURM_JOB_ID", "9"),
            ("SLURM_JOB_NODELIST", "n[1-2]"),
            ("SLURM_NNODES", "2"),
            ("SLURM_NODEID", "0"),
            ("SLURM_PROCID", "2"),
            ("SLURM_LOCALID", "2"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_STEP_TASKS_PER_NODE", "3,1"),
        ];
        // An uneven layout is a valid world: this task's node runs 3 of the 4 ranks.
        let t = detect_task(&Environment::from_pairs(base), 1).unwrap();
        assert_eq!(
            (t.rank, t.local_rank, t.local_world_size, t.world_size),
            (2, 2, 3, 4)
        );
        let mut last = Environment::from_pairs(base);
        last.set("SLURM_NODEID", "1");
        last.set("SLURM_PROCID", "3");
        last.set("SLURM_LOCALID", "0");
        let t = detect_task(&last, 1).unwrap();
        assert_eq!(
            (t.rank, t.local_world_size, t.topology.node_rank),
            (3, 1, 1)
        );
        // SLURM_NTASKS_PER_NODE's `2(x3),1` (7 tasks on 4 nodes) is accepted too.
        let seven = Environment::from_pairs([
            ("SLURM_JOB_ID", "9"),
            ("SLURM_JOB_NODELIST", "n[1-4]"),
            ("SLURM_NNODES", "4"),
            ("SLURM_NODEID", "3"),
            ("SLURM_PROCID", "6"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NTASKS", "7"),
            ("SLURM_NTASKS_PER_NODE", "2(x3),1"),
        ]);
        let t = detect_task(&seven, 1).unwrap();
        assert_eq!((t.rank, t.local_world_size, t.world_size), (6, 1, 7));
        let mut wrong = Environment::from_pairs(base);
        wrong.set("SLURM_NTASKS", "5");
        assert!(detect_task(&wrong, 1)
            .unwrap_err()
            .to_string()
            .contains("places 4 tasks but SLURM_NTASKS=5"));
        let mut even = Environment::from_pairs(base);
        even.set("SLURM_STEP_TASKS_PER_NODE", "2(x2)");
        even.set("SLURM_LOCALID", "0");
        let t = detect_task(&even, 1).unwrap();
        assert_eq!((t.local_world_size, t.topology.num_nodes), (2, 2));
    }
}
