//! Every environment variable accel reads or writes, declared once. Code names variables through these
//! constants, the man pages' ENVIRONMENT sections are generated from [`REGISTRY`], and the process
//! environment is read exactly once, into an [`Environment`] snapshot that is passed down — so tests can
//! hand a tool any environment they like, and `accel-env` reports what the tools will actually see.

use std::collections::BTreeMap;
use std::ffi::OsString;

/// Who cares about a variable; the man page of each tool lists the groups it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    /// Knobs of accel itself.
    Accel,
    /// Where accelerate (and so accel) keeps its config.
    Paths,
    /// Set by accel-launch for each rank: torchrun's worker contract.
    Contract,
    /// Set by accel-launch for each rank: what `accelerate launch` exports for the configured run.
    Accelerate,
    /// Read from the job scheduler: a SLURM allocation (`srun`/`sbatch`), Kubeflow Trainer, SkyPilot.
    Slurm,
    /// Read from MPI launchers (Open MPI, MPICH/PMI, MVAPICH).
    Mpi,
    /// GPU and communication-library settings reported by accel-env.
    Device,
    /// Terminal and output behaviour.
    Output,
    /// Hugging Face Hub access (accel-estimate-memory).
    Hub,
}

/// One documented variable.
#[derive(Debug, Clone, Copy)]
pub struct EnvVar {
    pub name: &'static str,
    pub group: Group,
    pub doc: &'static str,
}

macro_rules! vars {
    ($( $(#[$meta:meta])* $ident:ident = $name:literal, $group:ident, $doc:literal; )*) => {
        $( $(#[$meta])* pub const $ident: &str = $name; )*
        /// All declared variables, in declaration order.
        pub static REGISTRY: &[EnvVar] = &[
            $( EnvVar { name: $name, group: Group::$group, doc: $doc }, )*
        ];
        /// The constants' own names, in the same order, to check each names its variable.
        #[cfg(test)]
        static IDENTS: &[&str] = &[ $( stringify!($ident), )* ];
    };
}

vars! {
    ACCEL_CONFIG_FILE = "ACCEL_CONFIG_FILE", Accel,
        "Config file to use when --config_file is not given (accelerate has no such variable).";
    ACCEL_NO_PROGRESS = "ACCEL_NO_PROGRESS", Accel,
        "When set and non-empty, never draw progress bars.";
    ACCEL_LOG = "ACCEL_LOG", Accel,
        "Debug logging to stderr: `debug`, `trace`, or env_logger filters such as `accel::launch=trace`.";
    ACCEL_PYTHON = "ACCEL_PYTHON", Accel,
        "The Python interpreter to run scripts and probes with (default: `python3`, then `python`, on PATH); accel-test asks it first for torch, then the Python beside accel-test, then PATH's.";
    ACCEL_TEST_TIMEOUT = "ACCEL_TEST_TIMEOUT", Accel,
        "Set by accel-test --python for its embedded torch.distributed check: the timeout in seconds.";
    ACCEL_TEST_DEVICE = "ACCEL_TEST_DEVICE", Accel,
        "Set by accel-test --python for its embedded torch.distributed check: `cpu` or `cuda`.";
    ACCEL_CONFIG_OVERRIDE_PREFIX = "ACCEL_CONFIG_", Accel,
        "ACCEL_CONFIG_<KEY> (e.g. ACCEL_CONFIG_MIXED_PRECISION=bf16, ACCEL_CONFIG_FSDP_CONFIG__FSDP_VERSION=2) overrides that config key; it beats the file and loses to a command-line flag. A double underscore separates a section from its key.";
    HF_HOME = "HF_HOME", Paths,
        "Hugging Face home; the default config is $HF_HOME/accelerate/default_config.yaml.";
    XDG_CACHE_HOME = "XDG_CACHE_HOME", Paths,
        "Used when HF_HOME is unset: ${XDG_CACHE_HOME:-~/.cache}/huggingface/accelerate/default_config.yaml.";
    HOME = "HOME", Paths,
        "Home directory, for `~` in the default paths.";
    PATH = "PATH", Paths,
        "Searched for python, nvidia-smi, torchrun, deepspeed and mpirun.";

    RANK = "RANK", Contract, "Global rank of the worker (0..WORLD_SIZE).";
    LOCAL_RANK = "LOCAL_RANK", Contract, "Rank of the worker on its node (0..LOCAL_WORLD_SIZE).";
    WORLD_SIZE = "WORLD_SIZE", Contract, "Total number of workers.";
    LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE", Contract, "Number of workers on this node.";
    GROUP_RANK = "GROUP_RANK", Contract, "Rank of this node (torchrun's worker group rank).";
    GROUP_WORLD_SIZE = "GROUP_WORLD_SIZE", Contract, "Number of nodes.";
    ROLE_RANK = "ROLE_RANK", Contract, "Rank of the worker among workers of the same role.";
    ROLE_NAME = "ROLE_NAME", Contract, "The worker role (`default`, or --role).";
    ROLE_WORLD_SIZE = "ROLE_WORLD_SIZE", Contract, "Number of workers with the same role.";
    MASTER_ADDR = "MASTER_ADDR", Contract, "Host of rank 0, which hosts the TCPStore rendezvous.";
    MASTER_PORT = "MASTER_PORT", Contract, "Port of the TCPStore rendezvous on MASTER_ADDR.";
    TORCHELASTIC_RESTART_COUNT = "TORCHELASTIC_RESTART_COUNT", Contract, "How many times the worker group was restarted.";
    TORCHELASTIC_MAX_RESTARTS = "TORCHELASTIC_MAX_RESTARTS", Contract, "--max_restarts.";
    TORCHELASTIC_RUN_ID = "TORCHELASTIC_RUN_ID", Contract, "Run id: `none`, or --rdzv_id, as torchrun sets it for a static rendezvous; a fresh UUID for --standalone and for a one-node run given only torchrun's flags without a port, as torchrun's local c10d rendezvous.";
    TORCHELASTIC_USE_AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE", Contract, "Never set by accel: rank 0 hosts the store.";
    TORCHELASTIC_ERROR_FILE = "TORCHELASTIC_ERROR_FILE", Contract, "Per-rank file where @record writes a failing rank's traceback.";
    TORCH_NCCL_ASYNC_ERROR_HANDLING = "TORCH_NCCL_ASYNC_ERROR_HANDLING", Contract, "Set to 1, as torchrun does.";
    OMP_NUM_THREADS = "OMP_NUM_THREADS", Contract, "Threads per rank; read from the environment as accelerate does, exported to ranks.";
    PYTHONUNBUFFERED = "PYTHONUNBUFFERED", Contract, "Set to 1 so rank output reaches the launcher line by line.";

    ACCELERATE_MIXED_PRECISION = "ACCELERATE_MIXED_PRECISION", Accelerate, "no, fp16, bf16 or fp8.";
    ACCELERATE_USE_CPU = "ACCELERATE_USE_CPU", Accelerate, "True/False: run on CPU.";
    ACCELERATE_DEBUG_MODE = "ACCELERATE_DEBUG_MODE", Accelerate, "true when debug is on.";
    ACCELERATE_CPU_AFFINITY = "ACCELERATE_CPU_AFFINITY", Accelerate, "1 when enable_cpu_affinity is on.";
    ACCELERATE_DYNAMO_BACKEND = "ACCELERATE_DYNAMO_BACKEND", Accelerate, "torch.compile backend, upper-case.";
    ACCELERATE_DYNAMO_MODE = "ACCELERATE_DYNAMO_MODE", Accelerate, "torch.compile mode.";
    ACCELERATE_DYNAMO_USE_FULLGRAPH = "ACCELERATE_DYNAMO_USE_FULLGRAPH", Accelerate, "True/False.";
    ACCELERATE_DYNAMO_USE_DYNAMIC = "ACCELERATE_DYNAMO_USE_DYNAMIC", Accelerate, "True/False.";
    ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION = "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", Accelerate, "True/False.";
    ACCELERATE_USE_FSDP = "ACCELERATE_USE_FSDP", Accelerate, "true for FSDP runs; the FSDP_* variables carry fsdp_config.";
    ACCELERATE_USE_DEEPSPEED = "ACCELERATE_USE_DEEPSPEED", Accelerate, "true for DeepSpeed runs; ACCELERATE_DEEPSPEED_* carry deepspeed_config.";
    ACCELERATE_USE_MEGATRON_LM = "ACCELERATE_USE_MEGATRON_LM", Accelerate, "true for Megatron-LM runs; MEGATRON_LM_* carry megatron_lm_config.";
    ACCELERATE_USE_PARALLELISM_CONFIG = "ACCELERATE_USE_PARALLELISM_CONFIG", Accelerate, "true when parallelism_config is set; PARALLELISM_CONFIG_* carry it.";
    ACCELERATE_CONFIG_DS_FIELDS = "ACCELERATE_CONFIG_DS_FIELDS", Accelerate, "DeepSpeed keys that came from the config file.";
    ACCELERATE_GRADIENT_ACCUMULATION_STEPS = "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", Accelerate, "DeepSpeed gradient accumulation steps.";
    ACCELERATE_GRADIENT_CLIPPING = "ACCELERATE_GRADIENT_CLIPPING", Accelerate, "DeepSpeed gradient clipping.";
    CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES", Device, "GPUs a rank may use; set from gpu_ids.";
    NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES", Device, "GPUs a container exposes (reported only).";
    NCCL_DEBUG = "NCCL_DEBUG", Device, "NCCL logging (reported; every NCCL_* variable is reported).";
    GLOO_SOCKET_IFNAME = "GLOO_SOCKET_IFNAME", Device, "Network interfaces (comma-separated) gloo binds to; accel-test's gloo process group honours it as torch.distributed does.";
    TORCH_CPP_LOG_LEVEL = "TORCH_CPP_LOG_LEVEL", Device, "libtorch's C++ log level; accel-test sets ERROR for its ranks unless it is set.";

    SLURM_JOB_ID = "SLURM_JOB_ID", Slurm, "Job id; the rendezvous port is derived from it when none is given.";
    SLURM_JOB_NODELIST = "SLURM_JOB_NODELIST", Slurm, "Nodes of the job (hostlist syntax, e.g. node[01-04,07]); the first is the rendezvous host.";
    SLURM_NODELIST = "SLURM_NODELIST", Slurm, "Older name of SLURM_JOB_NODELIST.";
    SLURM_NNODES = "SLURM_NNODES", Slurm, "Number of nodes of the job step.";
    SLURM_NODEID = "SLURM_NODEID", Slurm, "This node's index in the step (machine rank).";
    SLURM_PROCID = "SLURM_PROCID", Slurm, "Global task rank (one-task-per-GPU mode).";
    SLURM_LOCALID = "SLURM_LOCALID", Slurm, "Task rank on this node (one-task-per-GPU mode).";
    SLURM_NTASKS = "SLURM_NTASKS", Slurm, "Number of tasks in the step.";
    SLURM_NTASKS_PER_NODE = "SLURM_NTASKS_PER_NODE", Slurm, "Tasks per node.";
    SLURM_GPUS_ON_NODE = "SLURM_GPUS_ON_NODE", Slurm, "GPUs allocated on this node.";
    SLURM_STEP_NUM_TASKS = "SLURM_STEP_NUM_TASKS", Slurm, "Number of tasks in this step.";
    SLURM_STEP_ID = "SLURM_STEP_ID", Slurm, "Set inside an srun step: tells a step's tasks from the batch script itself.";
    SLURM_CONF = "SLURM_CONF", Slurm, "SLURM's configuration file (default /etc/slurm/slurm.conf): a multi-node run under SLURM reaches munged at its `AuthInfo=socket=PATH` to authenticate the control plane with MUNGE.";
    SLURM_RESTART_COUNT = "SLURM_RESTART_COUNT", Slurm, "How many times the job was requeued (set by SLURM from the first requeue on); passed to the ranks, so a script can tell a resumed job from a fresh one.";
    SLURM_STEP_TASKS_PER_NODE = "SLURM_STEP_TASKS_PER_NODE", Slurm, "Tasks of this srun step on each node (`2(x3),1`); accel-launch and accel-test refuse more than one on a node.";
    PET_OPTION_PREFIX = "PET_", Slurm, "torchrun's option defaults (torch/distributed/argparse_util.py): PET_<OPTION> (the option's long name in capitals, dashes as underscores: PET_NPROC_PER_NODE, PET_MAX_RESTARTS, PET_STANDALONE=1) is the default of that option of torchrun's command line where the command line does not give it, as torchrun reads it (all of torchrun's options but --logs_specs and --numa_binding; a switch is a whole number, 0 off). They are torchrun's command line: a run given them and no accelerate flag or config file is torchrun's run, where every PET_<OPTION> applies. Kubeflow's placement (PET_NNODES with the four below) places the node in either run and by itself asks for neither; an accelerate run reads nothing else of them.";
    PET_NNODES = "PET_NNODES", Slurm, "Kubeflow Trainer v2 (torchrun's --nnodes): the number of nodes; read with PET_NODE_RANK when no --num_machines is given. An elastic MIN:MAX range is refused.";
    PET_NPROC_PER_NODE = "PET_NPROC_PER_NODE", Slurm, "Kubeflow Trainer v2 (torchrun's --nproc_per_node): ranks per node.";
    PET_NODE_RANK = "PET_NODE_RANK", Slurm, "Kubeflow Trainer v2 (torchrun's --node_rank): this node's rank.";
    PET_MASTER_ADDR = "PET_MASTER_ADDR", Slurm, "Kubeflow Trainer v2 (torchrun's --master_addr): the host of node 0.";
    PET_MASTER_PORT = "PET_MASTER_PORT", Slurm, "Kubeflow Trainer v2 (torchrun's --master_port): the rendezvous port.";
    SKYPILOT_NODE_IPS = "SKYPILOT_NODE_IPS", Slurm, "SkyPilot: the IP addresses of the task's nodes, one per line, head node first (the rendezvous host).";
    SKYPILOT_NODE_RANK = "SKYPILOT_NODE_RANK", Slurm, "SkyPilot: this node's rank.";
    SKYPILOT_NUM_NODES = "SKYPILOT_NUM_NODES", Slurm, "SkyPilot: the number of nodes; must match SKYPILOT_NODE_IPS.";
    SKYPILOT_NUM_GPUS_PER_NODE = "SKYPILOT_NUM_GPUS_PER_NODE", Slurm, "SkyPilot: GPUs per node (ranks per node).";

    OMPI_COMM_WORLD_SIZE = "OMPI_COMM_WORLD_SIZE", Mpi, "Open MPI world size.";
    OMPI_COMM_WORLD_RANK = "OMPI_COMM_WORLD_RANK", Mpi, "Open MPI rank.";
    OMPI_COMM_WORLD_LOCAL_RANK = "OMPI_COMM_WORLD_LOCAL_RANK", Mpi, "Open MPI local rank.";
    OMPI_COMM_WORLD_LOCAL_SIZE = "OMPI_COMM_WORLD_LOCAL_SIZE", Mpi, "Open MPI local size (also sizes OMP threads).";
    PMI_SIZE = "PMI_SIZE", Mpi, "MPICH/PMI world size.";
    PMI_RANK = "PMI_RANK", Mpi, "MPICH/PMI rank.";
    MPI_LOCALNRANKS = "MPI_LOCALNRANKS", Mpi, "Intel MPI/MPICH local size.";
    MPI_LOCALRANKID = "MPI_LOCALRANKID", Mpi, "Intel MPI/MPICH local rank.";
    MV2_COMM_WORLD_LOCAL_SIZE = "MV2_COMM_WORLD_LOCAL_SIZE", Mpi, "MVAPICH local size.";

    NO_COLOR = "NO_COLOR", Output, "When set and non-empty, no colour in diagnostics.";
    TERM = "TERM", Output, "Terminal type (reported).";

    TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", Accelerate, "torchrun's header of tee'd console lines (`${rank}`, `${local_rank}`, `${role_name}`): read for torchrun's command line, as torchrun does; set for torchrun (--rdzv_backend c10d) from --rank_prefix.";
    TORCHELASTIC_SIGNALS_TO_HANDLE = "TORCHELASTIC_SIGNALS_TO_HANDLE", Contract, "Signals torchrun's agent handles: --signals_to_handle as given, else torchrun's default SIGTERM,SIGINT,SIGHUP,SIGQUIT.";
    TORCH_ELASTIC_SHUTDOWN_TIMEOUT = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", Accel, "torchrun's default for --shutdown_timeout: read when neither it, --grace_period nor ACCEL_LAUNCH_GRACE is given (whole seconds).";
    PYTHON_EXEC = "PYTHON_EXEC", Accel, "torchrun's worker interpreter: used in place of ACCEL_PYTHON for a run given only torchrun's flags, as torchrun does.";
    ACCEL_SYSFS_ROOT = "ACCEL_SYSFS_ROOT", Accel, "Root under which --numa_binding reads sys/ and proc/self/status (default /): a host's sysfs mounted elsewhere.";
    KMP_AFFINITY = "KMP_AFFINITY", Accelerate, "Set for CPU runs, as accelerate does (granularity=fine,compact,1,0).";
    KMP_BLOCKTIME = "KMP_BLOCKTIME", Accelerate, "Set to 1 for CPU runs, as accelerate does.";
    PYTHONPATH = "PYTHONPATH", Accelerate, "DeepSpeed runs append the launch directory, as accelerate does.";
    FSDP_VARS = "FSDP_*", Accelerate, "FSDP runs: FSDP_VERSION, FSDP_SHARDING_STRATEGY, FSDP_OFFLOAD_PARAMS, … carry fsdp_config.";
    MEGATRON_LM_VARS = "MEGATRON_LM_*", Accelerate, "Megatron-LM runs: one variable per megatron_lm_config key.";
    PARALLELISM_CONFIG_VARS = "PARALLELISM_CONFIG_*", Accelerate, "N-D parallelism sizes and backends from parallelism_config.";
    ACCELERATE_FP8_VARS = "ACCELERATE_FP8_*", Accelerate, "fp8 runs: backend and recipe from fp8_config.";
    ACCELERATE_DEEPSPEED_VARS = "ACCELERATE_DEEPSPEED_*", Accelerate, "DeepSpeed runs: zero stage, offload devices and NVMe paths, config file.";
    NODE_RANK = "NODE_RANK", Contract, "Read (with MASTER_ADDR and NNODES) as this node's rank when set from outside, e.g. by a Kubernetes operator. A Kubeflow PyTorchJob (v1) pod's MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK without LOCAL_RANK are read as the pod's place: one launcher (or one process) per pod.";
    NNODES = "NNODES", Contract, "Read (with MASTER_ADDR and NODE_RANK) as the number of nodes when set from outside.";
    ACCEL_LAUNCH_HANG_TIMEOUT = "ACCEL_LAUNCH_HANG_TIMEOUT", Accel, "Default for accel-launch --hang_timeout (seconds without progress of any rank before the run is declared hung; 0 or unset: off).";
    ACCEL_LAUNCH_STRAGGLER_THRESHOLD = "ACCEL_LAUNCH_STRAGGLER_THRESHOLD", Accel, "Default for accel-launch --straggler_threshold (percentage points below the median rank's share of time waiting in collectives that names a straggler; 0 or unset: off).";
    TORCH_FR_BUFFER_SIZE = "TORCH_FR_BUFFER_SIZE", Accelerate, "Set to 2000 by accel-launch --hang_timeout and --straggler_threshold (unless it or TORCH_NCCL_TRACE_BUFFER_SIZE is set): torch's Flight Recorder keeps the last collectives.";
    TORCH_NCCL_TRACE_BUFFER_SIZE = "TORCH_NCCL_TRACE_BUFFER_SIZE", Accelerate, "torch's older name for TORCH_FR_BUFFER_SIZE: where it is set, accel-launch sets neither.";
    TORCH_NCCL_ENABLE_TIMING = "TORCH_NCCL_ENABLE_TIMING", Accelerate, "Set to 1 by accel-launch --straggler_threshold (unless set): NCCL ranks time each collective on the device (a start event each), which the straggler watch reads from their Flight Recorder.";
    TORCH_FR_DUMP_TEMP_FILE = "TORCH_FR_DUMP_TEMP_FILE", Accelerate, "With --hang_timeout and --log_dir: where NCCL ranks dump their Flight Recorder (LOG_DIR/hang/flight_recorder_RANK); with --straggler_threshold, there or in a directory of the run's own.";
    TORCH_NCCL_DUMP_ON_TIMEOUT = "TORCH_NCCL_DUMP_ON_TIMEOUT", Accelerate, "Set to 1 by accel-launch --hang_timeout with --log_dir: NCCL's watchdog dumps the Flight Recorder on a collective timeout.";
    TORCH_NCCL_DEBUG_INFO_PIPE_FILE = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE", Accelerate, "Set by accel-launch --hang_timeout with --log_dir, and by --straggler_threshold: the pipe through which the launcher asks NCCL ranks for a Flight Recorder dump (on a hang; once per half --straggler_window).";
    ACCEL_LAUNCH_SLURM_REQUEUE = "ACCEL_LAUNCH_SLURM_REQUEUE", Accel, "Set to 1 (or true/yes): accel-launch --slurm_requeue (0, false, no or unset: off). accelerate refuses unknown keys in its config files, so this has no config key.";
    ACCEL_LAUNCH_REQUEUE_SIGNAL = "ACCEL_LAUNCH_REQUEUE_SIGNAL", Accel, "Default for accel-launch --requeue_signal (the warning signal SLURM sends before the time limit; USR1 when unset).";
    ACCEL_LAUNCH_GRACE = "ACCEL_LAUNCH_GRACE", Accel, "Default for accel-launch --grace_period (seconds between SIGTERM and SIGKILL when stopping ranks).";
    ACCEL_LAUNCH_SECRET = "ACCEL_LAUNCH_SECRET", Accel, "Multi-node runs: a secret (16 bytes or more) every node's accel-launch is given; the launchers prove it to each other (HMAC-SHA256 challenge-response) and authenticate every control-plane message with it. Under SLURM without it, MUNGE authenticates the launchers instead (same uid); without either, the control plane is open to anyone who reaches it and listens only on the rendezvous address.";
    ACCEL_LAUNCH_SECRET_FILE = "ACCEL_LAUNCH_SECRET_FILE", Accel, "A file holding the ACCEL_LAUNCH_SECRET (a trailing newline is ignored); it must not be readable by group or others.";
    ACCEL_LAUNCH_SECRET_TO_RANKS = "ACCEL_LAUNCH_SECRET_TO_RANKS", Accel, "Set to 1: the ranks inherit ACCEL_LAUNCH_SECRET and ACCEL_LAUNCH_SECRET_FILE from accel-launch. By default both are removed from the ranks' environment: the secret is the launchers' alone.";
    DS_ENV_FILE = "DS_ENV_FILE", Paths, "File the deepspeed launcher exports to every node (default ./.deepspeed_env); accel-launch merges the run's variables into it before handing a multi-node DeepSpeed job over.";
    TMPDIR = "TMPDIR", Paths, "Where accel-launch keeps per-run error files when --log_dir is not given.";

    HF_ENDPOINT = "HF_ENDPOINT", Hub, "Hub base URL (default https://huggingface.co).";
    HF_TOKEN = "HF_TOKEN", Hub, "Bearer token for gated or private repositories.";
    HUGGING_FACE_HUB_TOKEN = "HUGGING_FACE_HUB_TOKEN", Hub, "Older name of HF_TOKEN, used when HF_TOKEN is unset or empty (as huggingface_hub does).";
    HF_TOKEN_PATH = "HF_TOKEN_PATH", Hub, "The token file `hf auth login` writes, read when neither HF_TOKEN nor HUGGING_FACE_HUB_TOKEN is set (default $HF_HOME/token; ~ and $VARS expanded).";
    HF_HUB_OFFLINE = "HF_HUB_OFFLINE", Hub, "When 1, never contact the Hub.";
    HTTPS_PROXY = "HTTPS_PROXY", Hub, "Proxy for Hub requests (not used for a loopback HF_ENDPOINT).";
    HF_HUB_CACHE = "HF_HUB_CACHE", Hub, "huggingface_hub's download cache (default $HF_HOME/hub, else ${XDG_CACHE_HOME:-~/.cache}/huggingface/hub); a Hub id is read from it when HF_HUB_OFFLINE is set or the Hub cannot be reached.";
}

/// Prefixes whose variables are reported by accel-env and warned about when they would leak into a run.
pub const LEAKY_PREFIXES: &[&str] = &[
    "ACCELERATE_",
    "FSDP_",
    "MEGATRON_LM_",
    "PARALLELISM_CONFIG_",
];
/// Prefixes reported by accel-env as relevant to a distributed run.
pub const REPORTED_PREFIXES: &[&str] = &[
    "NCCL_", "SLURM_", "MASTER_", "TORCH_", "CUDA_", "GLOO_", "OMP_",
];

/// The process environment, read once at start-up.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    vars: BTreeMap<String, String>,
}

impl Environment {
    /// Reads the process environment. The only place in accel that does; variables that are not UTF-8
    /// are kept lossily (none of the ones accel interprets may legitimately be non-UTF-8).
    #[allow(clippy::disallowed_methods)]
    pub fn capture() -> Self {
        let vars = std::env::vars_os()
            .map(|(k, v): (OsString, OsString)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.to_string_lossy().into_owned(),
                )
            })
            .collect();
        Environment { vars }
    }

    /// An environment from explicit pairs (tests, and worker-side parsing of a rendered contract).
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Environment {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// The value if set and not empty: most variables treat empty as unset.
    pub fn non_empty(&self, name: &str) -> Option<&str> {
        self.get(name).filter(|v| !v.is_empty())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn with_prefix<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.iter().filter(move |(k, _)| k.starts_with(prefix))
    }

    pub fn set(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.vars.insert(name.into(), value.into());
    }

    pub fn remove(&mut self, name: &str) {
        self.vars.remove(name);
    }

    pub fn len(&self) -> usize {
        self.vars.len()
    }

    pub fn is_empty(&self) -> bool {
        self.vars.is_empty()
    }
}

/// The registry entries of the given groups, for a man page's ENVIRONMENT section.
pub fn documented(groups: &[Group]) -> Vec<&'static EnvVar> {
    REGISTRY
        .iter()
        .filter(|v| groups.contains(&v.group))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_names_are_unique_and_match_constants() {
        let mut names: Vec<_> = REGISTRY.iter().map(|v| v.name).collect();
        names.sort();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "duplicate variable in REGISTRY");
        // A constant spelled after one variable but holding another would pass every other test.
        assert_eq!(IDENTS.len(), REGISTRY.len());
        // Families (`FSDP_*`) are named `FSDP_VARS`; a prefix (`ACCEL_CONFIG_`) `…_PREFIX`.
        for (ident, var) in IDENTS.iter().zip(REGISTRY) {
            let ok = match var.name.strip_suffix('*') {
                Some(family) => *ident == format!("{family}VARS"),
                None if var.name.ends_with('_') => {
                    ident.starts_with(var.name) && ident.ends_with("_PREFIX")
                }
                None => *ident == var.name,
            };
            assert!(ok, "constant {ident} holds {}", var.name);
        }
    }

    #[test]
    fn snapshot_lookup() {
        let env = Environment::from_pairs([("A", "1"), ("EMPTY", "")]);
        assert_eq!(env.get("A"), Some("1"));
        assert_eq!(env.non_empty("EMPTY"), None);
        assert_eq!(env.get("B"), None);
    }
}
