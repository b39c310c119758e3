//! What accel-launch refuses before any rank starts, and why: a command line it cannot run (exit 2),
//! a program or launcher it cannot find (127) or execute (126), a machine that lacks what the run
//! needs (125). Each error says what to do instead (its hint).

use crate::env_vars;
use crate::error::Diagnostic;
use crate::exit_status::ExitStatus;

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("no training script given")]
    NoScript,
    #[error("unknown option `{given}`")]
    UnknownOption { given: String, hint: String },
    #[error("--module and --no_python cannot be used together")]
    ModuleAndNoPython,
    #[error("TPU launches are not supported by accel-launch")]
    Tpu,
    #[error("SageMaker launches are not supported by accel-launch")]
    SageMaker,
    #[error("--logs_specs {0} is not supported: a torchrun.logs_specs entry point is Python code that torchrun loads into its agent, and accel-launch runs no Python agent")]
    LogsSpecs(String),
    #[error("--start_method {0} is not supported: every rank is a fresh process of its own (torchrun's `spawn`, its default); torchrun's start method only applies to --run_path and Python functions, which would {0} from its Python agent")]
    StartMethod(String),
    #[error("--event_log_handler {0} is not supported: a named handler is Python code registered in torchrun's agent")]
    EventLogHandler(String),
    #[error("`--grace_period {grace}` and `--shutdown_timeout {shutdown}` contradict each other (both are the time between the stop signal and SIGKILL)")]
    GraceContradiction { grace: String, shutdown: String },
    #[error("invalid {var}: {0}", var = env_vars::ACCEL_LAUNCH_GRACE)]
    GraceVar(String),
    #[error("invalid {var}: `{0}` is not a whole number of seconds", var = env_vars::TORCH_ELASTIC_SHUTDOWN_TIMEOUT)]
    ShutdownTimeoutVar(String),
    #[error("{0}")]
    Signals(String),
    #[error("invalid {var}: {0}", var = env_vars::ACCEL_LAUNCH_HANG_TIMEOUT)]
    HangTimeoutVar(String),
    #[error("invalid {var}: {0}", var = env_vars::ACCEL_LAUNCH_STRAGGLER_THRESHOLD)]
    StragglerThresholdVar(String),
    #[error("invalid {var}: `{0}`", var = env_vars::ACCEL_LAUNCH_SLURM_REQUEUE)]
    SlurmRequeueVar(String),
    #[error("--requeue_signal needs --slurm_requeue")]
    RequeueSignalAlone,
    #[error("invalid {var}: {0}", var = env_vars::ACCEL_LAUNCH_REQUEUE_SIGNAL)]
    RequeueSignalVar(String),
    #[error("--rdzv_conf: `{0}` is not KEY=VALUE")]
    RdzvConf(String),
    #[error("--rdzv_conf timeout={0}: not a whole number of seconds")]
    RdzvConfTimeout(String),
    #[error("--log_template names accel's own log files; torchrun's command line (-r/--redirects, the duplicate filters, or only torchrun's flags) lays them out as torchrun does")]
    LogTemplateWithTorchrunLayout,
    #[error("--log_template cannot be used with --rdzv_backend {0}")]
    LogTemplateWithElastic(String),
    #[error("--rank_prefix: `{{{placeholder}}}` has no torchrun equivalent with --rdzv_backend {backend}")]
    RankPrefixForTorchrun {
        placeholder: String,
        backend: String,
    },
    #[error("--local_ranks_filter: this node runs local ranks 0 to {}, not {given}", local.saturating_sub(1))]
    LocalRankBeyond { given: u32, local: u32 },
    #[error("--slurm_requeue works with the ranks accel-launch starts and supervises itself, not with a run handed to torchrun, deepspeed or mpirun")]
    RequeueDelegated,
    #[error("multi-node DeepSpeed needs a hostfile")]
    DeepSpeedHostfile,
    #[error("this run needs `{0}`, which is not installed (not on PATH)")]
    NotInstalled(&'static str),
    #[error("cannot run `{program}`: {error}")]
    CannotRun { program: String, error: String },
    #[error("no Python interpreter found (python3 or python on PATH)")]
    NoPython,
    #[error("{0}")]
    VirtualLocalRank(String),
    #[error("--numa_binding {mode}: nvidia-smi gives no PCI address for GPU {gpu}")]
    NumaNoPci { mode: &'static str, gpu: u32 },
    #[error("--numa_binding {mode}: {why}")]
    Numa { mode: &'static str, why: String },
    #[error("FP8 is not available on this machine: none of Transformer Engine (transformer-engine), MS-AMP (ms-amp) or torchao >= 0.6.1 is installed for {0}")]
    NoFp8(String),
    #[error("--report_json `{0}` is a directory")]
    ReportIsDir(std::path::PathBuf),
    #[error("--stacks {pid}: process {pid} is not an accel-launch ({what})")]
    StacksNotLauncher { pid: i32, what: String },
    #[error("invalid {var}: {why}")]
    PetVar { var: String, why: String },
    #[error("--stacks {0}: process {0} is not an accel-launch with running ranks")]
    StacksNoRanks(i32),
}

impl Diagnostic for LaunchError {
    fn hints(&self) -> Vec<String> {
        use LaunchError::*;
        let hint = match self {
            NoScript => "usage: accel-launch [OPTIONS] SCRIPT [ARGS]...",
            UnknownOption { hint, .. } => hint,
            ModuleAndNoPython => "pick one",
            Tpu => "use `accelerate launch --tpu`",
            SageMaker => "use `accelerate launch`",
            LogsSpecs(_) => "use --log_dir with -r/--redirects and -t/--tee (torchrun's default layout), or --log_template",
            StartMethod(_) => "drop --start_method (or give spawn)",
            EventLogHandler(_) => "drop it (null, torchrun's default, logs no events), or use --report_json for how the run ended",
            GraceContradiction { .. } => "give one of them",
            GraceVar(_) => "a number of seconds, e.g. 30, or inf never to SIGKILL",
            ShutdownTimeoutVar(_) => "e.g. 30",
            Signals(_) => "signal names as torchrun takes them, e.g. SIGTERM,SIGINT,SIGUSR1",
            StragglerThresholdVar(_) => {
                "percentage points, e.g. ACCEL_LAUNCH_STRAGGLER_THRESHOLD=20; 0 for off"
            }
            HangTimeoutVar(_) => {
                "a number of seconds, e.g. ACCEL_LAUNCH_HANG_TIMEOUT=600; 0 or inf for off"
            }
            SlurmRequeueVar(_) => {
                "1 (or true) to requeue on SLURM's warning signal, 0 (or false) not to"
            }
            RequeueSignalAlone => "add --slurm_requeue (or ACCEL_LAUNCH_SLURM_REQUEUE=1)",
            RequeueSignalVar(_) => "e.g. USR1, as in sbatch --signal=USR1@300",
            RdzvConf(_) | RdzvConfTimeout(_) => "e.g. --rdzv_conf timeout=900",
            LogTemplateWithTorchrunLayout => "drop --log_template (files go to LOG_DIR/<run id>_<random>/attempt_N/<local rank>/), or use accelerate's flags",
            LogTemplateWithElastic(_) => "torchrun names its log files itself (<log_dir>/<run id>/attempt_N/<local rank>/stdout.log)",
            RankPrefixForTorchrun { .. } => {
                "torchrun's prefix knows {rank}, {local_rank} and {role}"
            }
            LocalRankBeyond { .. } => {
                "local ranks count from 0 on each node; --local_ranks_filter 0 shows the first"
            }
            RequeueDelegated => "drop --slurm_requeue (ACCEL_LAUNCH_SLURM_REQUEUE), or use the static rendezvous without a hostfile",
            DeepSpeedHostfile => {
                "pass --deepspeed_hostfile, or --deepspeed_multinode_launcher standard"
            }
            NotInstalled("torchrun") => {
                "install torch in the environment on PATH, or use --rdzv_backend static"
            }
            NotInstalled("deepspeed") => {
                "pip install deepspeed, or use --deepspeed_multinode_launcher standard"
            }
            NotInstalled(_) => "install Open MPI or MPICH (mpirun), or drop --mpirun_hostfile",
            NoPython => "set ACCEL_PYTHON to the interpreter of your training environment",
            VirtualLocalRank(_) => {
                "give CUDA_VISIBLE_DEVICES one GPU per local rank, or fewer ranks"
            }
            Numa { .. } => "every rank needs a GPU of its own (its local rank's among the visible GPUs) on a NUMA node with CPUs this launcher may use",
            NoFp8(_) => "install one into the training environment (e.g. `pip install torchao`), or use --mixed_precision bf16",
            ReportIsDir(path) => {
                return vec![format!(
                    "give a file's path, e.g. --report_json {}",
                    path.join("report.json").display()
                )]
            }
            StacksNotLauncher { .. } | StacksNoRanks(_) => "give the PID of accel-launch itself (e.g. from `pgrep -f accel-launch`), not of a rank",
            PetVar { var, .. } => {
                return vec![format!(
                    "{var} is the default of torchrun's --{} (as torchrun reads it): fix or unset it",
                    var.trim_start_matches(env_vars::PET_OPTION_PREFIX)
                        .to_ascii_lowercase()
                )]
            }
            CannotRun { .. } | NumaNoPci { .. } => return Vec::new(),
        };
        vec![hint.to_string()]
    }

    fn exit_status(&self) -> ExitStatus {
        use LaunchError::*;
        match self {
            NotInstalled(_) | NoPython => ExitStatus::NotFound,
            CannotRun { .. } => ExitStatus::CannotExecute,
            NumaNoPci { .. } | Numa { .. } | NoFp8(_) => ExitStatus::LauncherFailed,
            _ => ExitStatus::Usage,
        }
    }
}
