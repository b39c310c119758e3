//! What a run is, decided once. Every tool that starts or joins ranks — accel-launch (and its
//! `--dry-run`), accel-test and `accel-env -- CMD` — hands its low-level inputs (config file flag, paradigm
//! flags, config values given on the command line) to [`resolve`] and reads the [`Run`] it returns: the
//! config file chosen, the values resolved with their provenance, accelerate's merge, the visible GPUs,
//! the node's (or task's) place from SLURM/MPI/outside variables, the engine that starts the ranks, the
//! topology and the rendezvous port. Nothing downstream re-derives any of it, so the tools cannot plan
//! different worlds for the same inputs, and a mistake in the topology reads the same from all of them.

use std::path::Path;

use serde_json::Value;

use crate::config::{self, CliValue, DistributedType, Loaded, Origin, Resolved};
use crate::contract::accelerate::{Machine, MergeInput};
use crate::contract::scheduler::{self, NodePlace, Source, TaskPlace};
use crate::contract::{ContractError, EnvMap, LaunchArgs, LaunchPath, Paradigm, Topology};
use crate::env_vars::{self, Environment};
use crate::error::Result;
use crate::exit_status::ExitStatus;
use crate::launch::control::{self, ControlPlane};
use crate::launch::{ports, torchrun};

/// Whose place is being resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// One launcher per node that starts this node's ranks (accel-launch, accel-test).
    Node,
    /// This process is itself one rank, placed by its scheduler (`srun accel-env -- CMD`, one task per GPU).
    Task,
}

/// The low-level inputs: what the command line said, before anything is derived.
#[derive(Debug, Clone)]
pub struct RunInput<'a> {
    pub scope: Scope,
    /// `--config_file`.
    pub config_file: Option<&'a Path>,
    /// `--cpu`, `--multi_gpu`, `--use_fsdp`, …
    pub paradigm: Paradigm,
    /// Config values given as flags (`--num_processes 4` → `num_processes`).
    pub cli: Vec<CliValue>,
    pub num_cpu_threads_per_process: Option<u32>,
    /// `--role` (ROLE_NAME).
    pub role: String,
    /// `--max_restarts` (TORCHELASTIC_MAX_RESTARTS).
    pub max_restarts: u32,
    /// Whether another launcher may own the job (torchrun for elastic rendezvous, deepspeed/mpirun for
    /// hostfile runs). accel-test always starts its own ranks.
    pub allow_delegation: bool,
    /// Whether a port given for rank 0 is checked to be free now (not for `--dry-run`).
    pub check_port: bool,
    /// torchrun's command line ([`torchrun::Request`]): `--nproc_per_node` is this node's rank count
    /// (nodes may differ: the world is then assembled at the control plane's rendezvous), and a run
    /// given only torchrun's flags is torchrun's run.
    pub torchrun: torchrun::Request,
}

impl RunInput<'_> {
    /// Inputs with nothing given: the default config file (or the embedded default), node scope.
    pub fn new(scope: Scope) -> RunInput<'static> {
        RunInput {
            scope,
            config_file: None,
            paradigm: Paradigm::default(),
            cli: Vec::new(),
            num_cpu_threads_per_process: None,
            role: "default".into(),
            max_restarts: 0,
            allow_delegation: false,
            check_port: true,
            torchrun: torchrun::Request::default(),
        }
    }
}

/// Who starts the ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Engine {
    /// accel's own supervisor, from [`Run::topology`] (or one plain child when there is none).
    Own,
    /// torchrun with an elastic rendezvous (`rdzv_backend` other than `static`).
    Torchrun,
    /// The deepspeed launcher over a hostfile (multi-node DeepSpeed, `deepspeed_multinode_launcher`).
    DeepSpeed { launcher: String },
    /// mpirun over `mpirun_hostfile` (multi-node CPU).
    Mpirun { hostfile: String },
}

/// Every derived decision about a run, made once.
#[derive(Debug, Clone)]
pub struct Run {
    /// The config file that was read, if any.
    pub loaded: Option<Loaded>,
    /// The config as resolved, with the origin of each value; values the launch derives (the embedded
    /// default's rank count, the machine count from SLURM, …) are recorded here too, so `--dry-run`
    /// shows what is planned.
    pub resolved: Resolved,
    /// accelerate's merged launch arguments (`_validate_launch_command`), placed on this node.
    pub args: LaunchArgs,
    /// Where the node topology came from.
    pub source: Source,
    /// GPUs a rank started here can use (CUDA_VISIBLE_DEVICES applied as CUDA applies it).
    pub visible_gpus: u32,
    pub engine: Engine,
    /// The torchrun contract of this node's ranks (node scope, [`Engine::Own`]); `None` for accelerate's
    /// single plain child, or when another engine owns the job.
    pub topology: Option<Topology>,
    /// The rendezvous port was picked here (a lost race is retried with another).
    pub port_auto: bool,
    /// Where the launchers of a multi-node run meet ([`crate::launch::control`]): accel's own
    /// supervisor on more than one node.
    pub control: Option<ControlPlane>,
    /// accelerate's variables for every rank (ACCELERATE_*, FSDP_*, OMP_NUM_THREADS, …).
    pub common: EnvMap,
    /// Task scope: this task's place as its scheduler gives it.
    pub task: Option<TaskPlace>,
    /// The config's warnings (unknown keys, migrated values), for the tool to print.
    pub warnings: Vec<String>,
    /// What the config asks of GPUs ([`Run::gpus_asked`]) when none is visible here: accel-launch
    /// says so, accel-test's pre-flight fails.
    pub gpus_unmet: Option<String>,
}

/// Resolves a run from its low-level inputs.
pub fn resolve(input: &RunInput<'_>, env: &Environment) -> Result<Run> {
    // Which file: accelerate ignores the *default* config file with --cpu (an explicit one is read),
    // as `accelerate/commands/launch.py::_validate_launch_command` does for `args.cpu`.
    let explicit =
        input.config_file.is_some() || env.non_empty(env_vars::ACCEL_CONFIG_FILE).is_some();
    // A run given only torchrun's flags reads no config file: torchrun never did.
    let tr = &input.torchrun;
    let loaded = match config::choose_file(input.config_file, env) {
        Some((path, _))
            if !tr.only && (explicit || !input.paradigm.cpu || input.scope == Scope::Task) =>
        {
            Some(config::load(&path)?)
        }
        _ => None,
    };

    // The task's place comes first: it fixes the world the config is resolved for.
    let task = match input.scope {
        Scope::Task => Some(scheduler::detect_task(env, 29500).map_err(task_error)?),
        Scope::Node => None,
    };
    let mut cli = input.cli.clone();
    let mut warnings = Vec::new();
    if let Some(place) = &task {
        task_values(place, loaded.as_ref(), explicit, &mut cli, &mut warnings)?;
    }
    let visible_gpus = crate::devices::visible_gpus(env);
    let nproc = torchrun_values(tr, loaded.as_ref(), visible_gpus, &mut cli)?;
    let mut resolved = Resolved::resolve(loaded.as_ref(), env, &cli)?;

    let place = match input.scope {
        Scope::Node => place_node(env, &resolved)?,
        Scope::Task => None,
    };
    let nodes = place.as_ref().map_or(1, |p| p.num_nodes);
    let mut args = LaunchArgs::merge(MergeInput {
        view: &resolved.view()?,
        loaded: loaded.as_ref(),
        paradigm: input.paradigm,
        num_cpu_threads_per_process: input.num_cpu_threads_per_process,
        machine: Machine {
            gpus: visible_gpus,
            physical_cores: crate::devices::detect_cpu().physical_cores.max(1) as u32,
            nodes,
            procs_per_node: nproc.or(place.as_ref().and_then(|p| p.procs_per_node)),
            own_ranks: nproc,
        },
        env,
    })?;
    if tr.only {
        // torchrun gives every worker its contract, one worker too, and says nothing of defaults.
        args.path = LaunchPath::Torchrun;
        args.defaulted.clear();
    }
    let source = match &place {
        Some(p) => {
            apply_place(env, &resolved, p, &mut args)?;
            p.source
        }
        None => Source::Flags,
    };
    check_node_count(nproc, &args, &input.cli)?;
    record_derived(&mut resolved, &args, loaded.is_some(), &place);

    warnings.extend(resolved.warnings.iter().map(|w| w.0.clone()));
    let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
    let mut common = if tr.only {
        torchrun::common_env(env, nproc.unwrap_or_else(|| args.num_local_processes()))
    } else {
        args.accelerate_env(env, &cwd)?
    };
    // torchrun sets OMP_NUM_THREADS=1 for its workers when it is unset and more than one runs; only the
    // DeepSpeed path leaves it to torchrun (accelerate sets it everywhere else).
    if input.scope == Scope::Node
        && args.path == LaunchPath::DeepSpeed
        && args.num_local_processes() > 1
        && env.get(env_vars::OMP_NUM_THREADS).is_none()
    {
        common.insert(env_vars::OMP_NUM_THREADS.into(), "1".into());
    }

    // --standalone is one node whatever the backend (torchrun ignores the rendezvous flags with it).
    let engine = if input.allow_delegation && !tr.standalone {
        engine_of(&args)
    } else {
        Engine::Own
    };
    if tr.standalone && args.num_machines > 1 {
        return Err(crate::error::Error::msg_hint(
            ExitStatus::Usage,
            format!(
                "--standalone runs one node, but this run has {} (--num_machines/--nnodes or the scheduler)",
                args.num_machines
            ),
            "drop --standalone, and give node 0's address and port (--master_addr/--master_port)",
        ));
    }
    let rdzv = tr.rendezvous(
        args.num_machines,
        args.main_process_port.is_some_and(|p| p != 0),
    );
    let (topology, port_auto) = match (&task, &engine) {
        (Some(t), _) => (Some(t.topology.clone()), false),
        (None, Engine::Own) => node_topology(input, &args, nproc, &rdzv)?,
        (None, _) => (None, false),
    };
    let control = match (&topology, input.scope) {
        (Some(t), Scope::Node) if t.num_nodes > 1 && engine == Engine::Own => {
            let port = control::control_port(t.master_port);
            Some(ControlPlane {
                addr: t.master_addr.clone(),
                port,
                run_id: control::run_id(env, port),
            })
        }
        _ => None,
    };
    let mut run = Run {
        loaded,
        control,
        resolved,
        args,
        source,
        visible_gpus,
        engine,
        topology,
        port_auto,
        common,
        task,
        warnings,
        gpus_unmet: None,
    };
    run.gpus_unmet = run.gpus_asked().filter(|_| visible_gpus == 0);
    Ok(run)
}

/// Task scope: the scheduler's world as config values (`num_processes`, and `num_machines` and
/// `machine_rank` when the layout is even); a config file that says another world is refused when
/// it was named for this job, and warned about when it is the default file.
fn task_values(
    place: &TaskPlace,
    loaded: Option<&Loaded>,
    explicit: bool,
    cli: &mut Vec<CliValue>,
    warnings: &mut Vec<String>,
) -> Result<()> {
    if let Some(l) = loaded {
        if let Some(n) = l.map.get("num_processes").and_then(Value::as_u64) {
            if n != u64::from(place.world_size) {
                let what = format!(
                    "{} says num_processes: {n}, but {} started {} processes ({})",
                    l.path().display(),
                    scheduler_name(place.source),
                    place.world_size,
                    world_variables(place.source)
                );
                // An explicit file was written for this job; the default file may be a workstation's.
                if !explicit {
                    warnings.push(format!("{what}: the scheduler's world is used"));
                } else {
                    return Err(crate::error::Error::msg_hint(
                        crate::exit_status::ExitStatus::LauncherFailed,
                        what,
                        format!(
                            "the config's num_processes is the world size of the whole job: set it to {} in {}, or start {n} processes",
                            place.world_size,
                            l.path().display()
                        ),
                    ));
                }
            }
        }
    }
    let by = format!("the scheduler ({:?})", place.source);
    // An uneven layout (SLURM's `2(x3),1`) is a valid world of tasks, but not accelerate's
    // `num_processes` over `num_machines`: the machine count is then left out of the config.
    let nodes = place.topology.num_nodes;
    let even = nodes > 0 && place.world_size % nodes == 0;
    let values = [
        Some(("num_processes", place.world_size)),
        even.then_some(("num_machines", nodes)),
        even.then_some(("machine_rank", place.topology.node_rank)),
    ];
    for (key, value) in values.into_iter().flatten() {
        cli.push(CliValue {
            key: key.into(),
            value: Value::from(value),
            flag: by.clone(),
        });
    }
    Ok(())
}

impl Run {
    /// `accel-env -- CMD`: the variables this task gets — accelerate's for the resolved config and
    /// torchrun's contract from its scheduler.
    pub fn task_env(&self, env: &Environment) -> EnvMap {
        let mut m = self.common.clone();
        let Some(place) = &self.task else {
            return m;
        };
        m.remove(env_vars::MASTER_ADDR);
        m.remove(env_vars::MASTER_PORT);
        m.extend(place.worker_env(env));
        // SLURM binding one GPU per task (--gpus-per-task=1) leaves each task one visible device: its
        // local rank must then be 0, as torchrun's --virtual-local-rank does.
        if self.visible_gpus == 1 && place.local_world_size > 1 {
            m.insert(env_vars::LOCAL_RANK.into(), "0".into());
        }
        m
    }

    /// The GPUs the config asks for and why, when it asks for any (`8 GPUs (MULTI_GPU)`), so a
    /// pre-flight on a machine without them can fail, and a launch can say it.
    pub fn gpus_asked(&self) -> Option<String> {
        let args = &self.args;
        // A CPU run asked for (`--cpu`, `use_cpu`, MULTI_CPU) asks for no GPU; the embedded default's
        // CPU fallback on a machine without GPUs is not a request.
        let cpu_asked = args.cpu_flag
            || args.distributed_type == DistributedType::MULTI_CPU
            || (is_given(&self.resolved, "use_cpu")
                && self.resolved.get("use_cpu") == Some(&Value::Bool(true)));
        if cpu_asked {
            return None;
        }
        gpu_request(args)
    }
}

/// What the config asks of GPUs: a GPU distributed type, `--multi_gpu`, or explicit gpu_ids.
fn gpu_request(args: &LaunchArgs) -> Option<String> {
    let gpu_type = matches!(
        args.distributed_type,
        DistributedType::MULTI_GPU
            | DistributedType::FSDP
            | DistributedType::DEEPSPEED
            | DistributedType::MEGATRON_LM
    );
    let ids = args
        .gpu_ids
        .as_deref()
        .filter(|g| !g.is_empty() && *g != "all");
    if !(gpu_type || args.multi_gpu || ids.is_some()) {
        return None;
    }
    let what = if gpu_type {
        format!("{:?}", args.distributed_type)
    } else if args.multi_gpu {
        "--multi_gpu".into()
    } else {
        format!("gpu_ids {}", ids.unwrap_or_default())
    };
    let n = args.num_local_processes();
    Some(format!(
        "the config asks for {n} GPU{} per node ({what})",
        if n == 1 { "" } else { "s" }
    ))
}

/// Who started the processes of a task-scope run, for messages.
fn scheduler_name(source: Source) -> &'static str {
    match source {
        Source::Slurm => "SLURM",
        Source::Mpi => "mpirun",
        Source::Kubeflow => "Kubeflow",
        Source::SkyPilot => "SkyPilot",
        Source::Flags | Source::External => "the job",
    }
}

/// The variables a scheduler's world size was read from.
fn world_variables(source: Source) -> &'static str {
    match source {
        Source::Slurm => "SLURM_NTASKS",
        Source::Mpi => "OMPI_COMM_WORLD_SIZE or PMI_SIZE",
        _ => "WORLD_SIZE",
    }
}

fn task_error(e: ContractError) -> crate::error::Error {
    match e {
        ContractError::Topology(m) => ContractError::TaskTopology(m).into(),
        other => other.into(),
    }
}

fn is_given(resolved: &Resolved, key: &str) -> bool {
    !matches!(
        resolved.origin(key),
        None | Some(Origin::Default) | Some(Origin::Derived(_))
    )
}

/// Given on the command line or through `ACCEL_CONFIG_*`: the user's word for this node, which a
/// scheduler's placement does not override (a config file's value is shared by every node).
fn on_command_line(resolved: &Resolved, key: &str) -> bool {
    matches!(
        resolved.origin(key),
        Some(Origin::Cli(_)) | Some(Origin::Env(_))
    )
}

/// Where this node sits in a multi-node job: SLURM, MPI or outside variables, unless the command line
/// names the machines itself. A config file's `num_machines` must then agree with the scheduler, whose
/// node rank wins over the file's `machine_rank` (one file serves every node). `None` on one node.
///
/// `srun -N N+K accel-launch --num_machines N`: the world is the first N nodes by SLURM's node id,
/// and the other K launchers are spares ([`spares_of_slurm`]).
fn place_node(env: &Environment, resolved: &Resolved) -> Result<Option<NodePlace>> {
    let machines = resolved
        .get("num_machines")
        .and_then(Value::as_u64)
        .unwrap_or(1);
    if machines > 1 && on_command_line(resolved, "num_machines") {
        return Ok(spares_of_slurm(env, resolved, machines));
    }
    check_tasks_per_node(env)?;
    let Some(place) = scheduler::detect_node(env)?.filter(|p| p.num_nodes > 1) else {
        return Ok(None);
    };
    if machines > 1 && machines != u64::from(place.num_nodes) {
        let origin = resolved
            .origin("num_machines")
            .map(ToString::to_string)
            .unwrap_or_default();
        return Err(ContractError::Topology(format!(
            "num_machines is {machines} ({origin}) but {} placed this job on {} nodes",
            source_name(place.source),
            place.num_nodes
        ))
        .into());
    }
    Ok(Some(place))
}

/// `--num_machines N` (and no `--machine_rank`) on the command line under a SLURM step of more
/// than N nodes: SLURM's place, for a world of N nodes, so that the node id is this launcher's node
/// rank and node ids N and beyond are spares; node 0 (the first node of the job) is the rendezvous
/// host. `None` otherwise: the command line names the machines itself, as it always did, and what
/// SLURM's variables say is not read (a launcher started by hand in an allocation has no node id).
fn spares_of_slurm(env: &Environment, resolved: &Resolved, machines: u64) -> Option<NodePlace> {
    if on_command_line(resolved, "machine_rank") {
        return None;
    }
    let place = scheduler::detect_node(env)
        .ok()
        .flatten()
        .filter(|p| p.source == Source::Slurm && u64::from(p.num_nodes) > machines)?;
    // One task per node, as for any SLURM placement: a refusal here is the old error, not a spare.
    check_tasks_per_node(env).ok()?;
    Some(NodePlace {
        num_nodes: machines as u32,
        ..place
    })
}

fn source_name(source: Source) -> &'static str {
    match source {
        Source::Slurm => "SLURM",
        Source::Mpi => "mpirun",
        Source::Kubeflow => "Kubeflow Trainer (PET_*)",
        Source::SkyPilot => "SkyPilot",
        Source::External => "NNODES/NODE_RANK/MASTER_ADDR",
        Source::Flags => "the command line",
    }
}

/// accel-launch and accel-test are one task per node: srun starting several on one node would start
/// several separate worlds (each its own ranks 0..n on its own port).
fn check_tasks_per_node(env: &Environment) -> Result<()> {
    let Some(job) =
        crate::slurm::SlurmJob::detect(env).map_err(|e| ContractError::Topology(e.to_string()))?
    else {
        return Ok(());
    };
    // On one node, only inside an srun step: a batch script is one process whatever
    // --ntasks-per-node says, and running accel-launch in it directly is right.
    if job.num_nodes() <= 1 && !job.in_step {
        return Ok(());
    }
    if let Some(here) = job.tasks_on_this_node().filter(|n| *n > 1) {
        return Err(ContractError::Topology(format!(
            "srun started {here} tasks per node: accel-launch is one task per node and starts the ranks itself (use --ntasks-per-node=1, or `srun accel-env -- python train.py` for one task per GPU)"
        ))
        .into());
    }
    Ok(())
}

/// Applies a scheduler's placement to the merged arguments: flags and the config win, the scheduler
/// fills in the rest.
fn apply_place(
    env: &Environment,
    resolved: &Resolved,
    place: &NodePlace,
    args: &mut LaunchArgs,
) -> Result<()> {
    args.num_machines = place.num_nodes;
    if args.own_ranks.is_none() && args.num_processes % place.num_nodes != 0 {
        return Err(ContractError::Topology(format!(
            "num_processes ({}) is the total over all nodes and is not a multiple of the {} nodes",
            args.num_processes, place.num_nodes
        ))
        .into());
    }
    if !on_command_line(resolved, "machine_rank") {
        args.machine_rank = Some(place.node_rank);
    }
    if !is_given(resolved, "main_process_ip") {
        args.main_process_ip = place.master_addr.clone().or(args.main_process_ip.take());
    }
    if args.main_process_port.is_none() {
        args.main_process_port = place.master_port;
    }
    if place.source == Source::Slurm {
        check_slurm_gpus(env, args)?;
        let distinct = crate::slurm::SlurmJob::detect(env)
            .ok()
            .flatten()
            .map(|j| {
                j.nodes
                    .iter()
                    .collect::<std::collections::BTreeSet<_>>()
                    .len()
            })
            .unwrap_or(0);
        if let Some(ip) = &args.main_process_ip {
            if place.node_rank != 0 && distinct > 1 && scheduler::is_loopback(ip) {
                return Err(ContractError::Topology(format!(
                    "the rendezvous host `{ip}` resolves to a loopback address on a {}-node job",
                    place.num_nodes
                ))
                .into());
            }
        }
    }
    Ok(())
}

/// A GPU job's ranks per node must match the GPUs SLURM gave the node. Checked on the per-node count,
/// after the total has been decided.
fn check_slurm_gpus(env: &Environment, args: &LaunchArgs) -> Result<()> {
    if args.path == LaunchPath::Simple {
        return Ok(());
    }
    if let Some(g) = env
        .non_empty(env_vars::SLURM_GPUS_ON_NODE)
        .and_then(|v| v.trim().parse::<u32>().ok())
    {
        let local = args.num_local_processes();
        if g > 0 && local != g {
            return Err(ContractError::Topology(format!(
                "{local} ranks per node but SLURM_GPUS_ON_NODE={g}"
            ))
            .into());
        }
    }
    Ok(())
}

/// Records what the launch derived in the resolved config, so the provenance report (`--dry-run`)
/// shows the run that is planned rather than the defaults it started from.
fn record_derived(
    resolved: &mut Resolved,
    args: &LaunchArgs,
    have_file: bool,
    place: &Option<NodePlace>,
) {
    if !have_file && !is_given(resolved, "num_processes") {
        resolved.set_derived(
            "num_processes",
            Value::from(args.num_processes),
            "embedded default: no config file",
        );
    }
    if args.use_cpu && !is_given(resolved, "use_cpu") {
        resolved.set_derived(
            "use_cpu",
            Value::from(true),
            if have_file {
                "distributed_type is MULTI_CPU"
            } else {
                "embedded default: no GPU visible"
            },
        );
    }
    if let Some(p) = place {
        let why = match p.source {
            Source::Slurm => "placed by SLURM",
            Source::Mpi => "placed by mpirun",
            Source::Kubeflow => "placed by Kubeflow Trainer (PET_*)",
            Source::SkyPilot => "placed by SkyPilot",
            _ => "placed by NNODES/NODE_RANK/MASTER_ADDR",
        };
        if !is_given(resolved, "num_machines") {
            resolved.set_derived("num_machines", Value::from(args.num_machines), why);
        }
        if !on_command_line(resolved, "machine_rank") {
            if let Some(r) = args.machine_rank {
                resolved.set_derived("machine_rank", Value::from(r), why);
            }
        }
        if let Some(ip) = &args.main_process_ip {
            if !is_given(resolved, "main_process_ip") {
                resolved.set_derived("main_process_ip", Value::from(ip.clone()), why);
            }
        }
    }
}

fn engine_of(args: &LaunchArgs) -> Engine {
    if args.rdzv_backend != "static" {
        return Engine::Torchrun;
    }
    if args.path == LaunchPath::DeepSpeed && args.num_machines > 1 {
        let launcher = args
            .values
            .get("deepspeed_multinode_launcher")
            .and_then(Value::as_str)
            .unwrap_or("pdsh")
            .to_string();
        if launcher != "standard" {
            return Engine::DeepSpeed { launcher };
        }
    }
    if args.path == LaunchPath::Simple {
        if let Some(h) = args.values.get("mpirun_hostfile").and_then(Value::as_str) {
            return Engine::Mpirun {
                hostfile: h.to_string(),
            };
        }
    }
    Engine::Own
}

/// `--nproc_per_node` against `--num_processes` once the node count is known: on one node both are
/// its rank count.
fn check_node_count(nproc: Option<u32>, args: &LaunchArgs, cli: &[CliValue]) -> Result<()> {
    if let Some(n) = nproc.filter(|_| args.num_machines == 1) {
        // On one node the total is the node's count (placement may have made it one node).
        if let Some(v) = cli.iter().find(|v| v.key == "num_processes") {
            let np = crate::contract::accelerate::py_str(&v.value);
            if np.trim().parse::<u32>().ok() != Some(n) {
                return Err(crate::error::Error::msg(
                    ExitStatus::Usage,
                    format!(
                        "`{} {np}` and `--nproc_per_node {n}` contradict each other on one node (both set its rank count)",
                        v.flag
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// torchrun's flags as config values (`--nnodes` is num_machines, …) added to `cli`, checked against
/// the accelerate flags that set the same values; returns this node's `--nproc_per_node`, resolved.
/// The per-node count becomes num_processes where the node count is known here (from the command
/// line or the config file); otherwise the embedded default multiplies it by the nodes a scheduler
/// placed. Given with `--num_processes` on many nodes, it is this node's own count (nodes may differ).
fn torchrun_values(
    tr: &torchrun::Request,
    loaded: Option<&Loaded>,
    visible_gpus: u32,
    cli: &mut Vec<CliValue>,
) -> Result<Option<u32>> {
    let usage = |m: String| crate::error::Error::msg(ExitStatus::Usage, m);
    // torchrun's default is one rank per node.
    let nproc = match (tr.nproc_per_node, tr.only) {
        (Some(n), _) => Some(torchrun::local_world_size(n, visible_gpus).map_err(usage)?),
        (None, true) => Some(1),
        (None, false) => None,
    };
    let given = |key: &str| cli.iter().find(|v| v.key == key).map(|v| v.value.clone());
    let from_file = |key: &str| loaded.and_then(|l| l.map.get(key)).cloned();
    let backend = given("rdzv_backend")
        .or_else(|| from_file("rdzv_backend"))
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "static".into());
    let as_nodes = |v: Value| match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    let nodes = tr
        .nnodes
        .map(|n| u64::from(n.max))
        .or_else(|| given("num_machines").and_then(as_nodes))
        .or_else(|| from_file("num_machines").and_then(as_nodes));
    let np_flag = given("num_processes").is_some();
    // On many nodes without a config file the total is left to the embedded default (this node's
    // count times the nodes), not given: a given total is checked at the join against the sum of
    // every node's count, and nodes may differ (1 + 2 + 1). A config file needs its total given.
    let total = match (nproc, nodes) {
        (Some(p), Some(n)) if n <= 1 || (!np_flag && loaded.is_some()) => {
            Some(u64::from(p) * n.max(1))
        }
        _ => None,
    };
    let values = tr.values(&backend, total).map_err(usage)?;
    cli.extend(values);
    torchrun::check_conflicts(cli).map_err(usage)?;
    Ok(nproc)
}

/// This node's torchrun contract and the rendezvous port: the node rank, rank 0's address, and the port
/// (given → checked free on node 0; not given on one node → a free one, retried if lost; not given on
/// many nodes → 29500, or the one derived from the SLURM job id).
fn node_topology(
    input: &RunInput<'_>,
    args: &LaunchArgs,
    nproc: Option<u32>,
    rdzv: &torchrun::Rendezvous,
) -> Result<(Option<Topology>, bool)> {
    let nnodes = args.num_machines;
    if args.path == LaunchPath::Simple && args.num_processes == 1 && nnodes == 1 {
        // accelerate's single plain child: no rank variables at all.
        return Ok((None, false));
    }
    let node_rank = match (nnodes, args.machine_rank) {
        (1, r) => r.unwrap_or(0),
        (_, Some(r)) => r,
        (_, None) => {
            return Err(ContractError::Topology(format!(
                "{nnodes} machines but no --machine_rank for this one"
            ))
            .into())
        }
    };
    // On many nodes a launcher at or beyond --num_machines is a spare: it joins, runs no ranks, and
    // takes a lost node's place (the control plane's `spares`). One node has no spare: node 0 hosts
    // the control plane and is never replaced.
    if node_rank >= nnodes && nnodes == 1 {
        return Err(ContractError::Topology(format!(
            "--machine_rank {node_rank} is not below --num_machines {nnodes}"
        ))
        .into());
    }
    let master_addr = match (&args.main_process_ip, nnodes) {
        // torchrun's local c10d rendezvous: the address its rank-0 agent publishes
        // (`RendezvousStoreInfo.build`: `--local-addr`, else `socket.getfqdn()`).
        _ if rdzv.local => rdzv.local_addr.clone().unwrap_or_else(crate::host::fqdn),
        (Some(ip), _) => ip.clone(),
        (None, 1) => "127.0.0.1".into(),
        (None, _) => {
            return Err(ContractError::Topology(format!(
            "{nnodes} machines but no --main_process_ip (the address of the machine with rank 0)"
        ))
            .into())
        }
    };
    let mut port_auto = false;
    let port = match args.main_process_port.filter(|p| *p != 0 && !rdzv.local) {
        Some(p) => {
            if node_rank == 0 && input.check_port {
                ports::check_free(p)?;
            }
            p
        }
        None if nnodes == 1 || rdzv.local => {
            port_auto = true;
            ports::free_port()?
        }
        None => 29500,
    };
    Ok((
        Some(Topology {
            local_world_size: nproc.unwrap_or_else(|| args.num_local_processes()),
            node_rank,
            num_nodes: nnodes,
            master_addr,
            master_port: port,
            run_id: rdzv.run_id.clone(),
            role: input.role.clone(),
            max_restarts: input.max_restarts,
            assembled: None,
        }),
        port_auto,
    ))
}
