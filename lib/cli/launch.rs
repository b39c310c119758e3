//! `accel-launch`: command-line definition. Every `accelerate launch` flag, in both spellings, plus
//! accel's supervision, logging and `--dry-run` options.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;

use super::ToolDoc;
use crate::env_vars::Group;

/// Launch a training script on one or many nodes, as `accelerate launch` does — without the overhead.
///
/// Reads the same config file as `accelerate launch` (--config_file, else ACCEL_CONFIG_FILE, else
/// accelerate's default path) and starts one process per rank with exactly the environment
/// `accelerate launch` + torchrun would give it, so `accelerate.Accelerator()` sees the same world.
/// Each rank is its own process group; signals are forwarded once; the first rank to fail stops the
/// others (SIGTERM, --grace_period, SIGKILL) and its exit status becomes accel-launch's.
///
/// Multi-node: pass --num_machines/--machine_rank/--main_process_ip, or run it under `srun` (SLURM is
/// detected: node list, node id, job id) or with MASTER_ADDR/NODE_RANK/NNODES set from outside.
#[derive(Debug, Parser)]
#[command(
    name = "accel-launch",
    version,
    about,
    long_about,
    max_term_width = 100
)]
pub struct LaunchCli {
    /// The config file (default: ACCEL_CONFIG_FILE, else accelerate's default config path).
    #[arg(long = "config_file", visible_alias = "config-file", value_name = "PATH", value_hint = clap::ValueHint::FilePath)]
    pub config_file: Option<PathBuf>,
    /// Print only the failing rank's report, no launcher notes.
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,
    /// Run the script as a module: `python -m MODULE`.
    #[arg(short = 'm', long = "module")]
    pub module: bool,
    /// Run the script directly, without python (any executable).
    #[arg(long = "no_python", visible_alias = "no-python")]
    pub no_python: bool,
    /// Debug mode (ACCELERATE_DEBUG_MODE=true).
    #[arg(long = "debug")]
    pub debug: bool,

    /// Print the resolved config with the origin of each value, and each rank's argv and environment; run nothing.
    #[arg(long = "dry-run", visible_alias = "dry_run", help_heading = "accel")]
    pub dry_run: bool,
    /// With --dry-run: print JSON.
    #[arg(long = "json", help_heading = "accel")]
    pub json: bool,
    /// Seconds between the stop signal and SIGKILL when ranks are stopped (default: ACCEL_LAUNCH_GRACE, else 30).
    #[arg(
        long = "grace_period",
        visible_alias = "grace-period",
        value_name = "SECONDS",
        help_heading = "accel"
    )]
    pub grace_period: Option<f64>,
    /// Log file name template under --log_dir: {rank}, {local_rank}, {node}, {attempt}, {stream}.
    #[arg(long = "log_template", visible_alias = "log-template", value_name = "TEMPLATE", default_value = crate::launch::supervise::DEFAULT_LOG_TEMPLATE, help_heading = "accel")]
    pub log_template: String,
    /// Prefix each console line of a rank with this template, e.g. '[{rank}] ' ({rank}, {local_rank}, {node}, {role}).
    #[arg(
        long = "rank_prefix",
        visible_alias = "rank-prefix",
        value_name = "TEMPLATE",
        help_heading = "accel"
    )]
    pub rank_prefix: Option<String>,
    /// Only these local ranks print to the console, e.g. 0 or 0,1 (all still write their log files).
    #[arg(
        long = "local_ranks_filter",
        visible_alias = "local-ranks-filter",
        value_name = "RANKS",
        help_heading = "accel"
    )]
    pub local_ranks_filter: Option<String>,

    /// Run on CPU: N gloo ranks with --num_processes N (accelerate starts one process).
    #[arg(long = "cpu", help_heading = "Hardware Selection Arguments")]
    pub cpu: bool,
    /// Distributed GPU training (DDP).
    #[arg(
        long = "multi_gpu",
        visible_alias = "multi-gpu",
        help_heading = "Hardware Selection Arguments"
    )]
    pub multi_gpu: bool,
    /// TPU training (not supported by accel-launch; use accelerate launch).
    #[arg(long = "tpu", help_heading = "Hardware Selection Arguments")]
    pub tpu: bool,

    /// Threads per rank (OMP_NUM_THREADS); default: the environment's OMP_NUM_THREADS, else 1 (CPU runs: physical cores / ranks).
    #[arg(
        long = "num_cpu_threads_per_process",
        visible_alias = "num-cpu-threads-per-process",
        value_name = "N",
        help_heading = "Resource Selection Arguments"
    )]
    pub num_cpu_threads_per_process: Option<u32>,

    /// DeepSpeed training.
    #[arg(
        long = "use_deepspeed",
        visible_alias = "use-deepspeed",
        help_heading = "Training Paradigm Arguments"
    )]
    pub use_deepspeed: bool,
    /// Fully Sharded Data Parallel training.
    #[arg(
        long = "use_fsdp",
        visible_alias = "use-fsdp",
        help_heading = "Training Paradigm Arguments"
    )]
    pub use_fsdp: bool,
    /// N-D parallelism through parallelism_config (requires FSDP 2).
    #[arg(
        long = "use_parallelism_config",
        visible_alias = "use-parallelism-config",
        help_heading = "Training Paradigm Arguments"
    )]
    pub use_parallelism_config: bool,
    /// Megatron-LM training.
    #[arg(
        long = "use_megatron_lm",
        visible_alias = "use-megatron-lm",
        help_heading = "Training Paradigm Arguments"
    )]
    pub use_megatron_lm: bool,

    /// Tee rank output torchrun-style: any value but 0 prefixes console lines with `[{role}{local_rank}]:`.
    #[arg(
        short = 't',
        long = "tee",
        default_value = "0",
        value_name = "0-3",
        help_heading = "Distributed GPUs"
    )]
    pub tee: String,
    /// Write each rank's stdout and stderr to files under DIR (see --log_template).
    #[arg(
        long = "log_dir",
        visible_alias = "log-dir",
        value_name = "DIR",
        help_heading = "Distributed GPUs"
    )]
    pub log_dir: Option<PathBuf>,
    /// Worker role (ROLE_NAME).
    #[arg(
        long = "role",
        default_value = "default",
        help_heading = "Distributed GPUs"
    )]
    pub role: String,
    /// Rendezvous options for --rdzv_backend c10d (passed to torchrun).
    #[arg(
        long = "rdzv_conf",
        visible_alias = "rdzv-conf",
        default_value = "",
        help_heading = "Distributed GPUs"
    )]
    pub rdzv_conf: String,
    /// Restart all local ranks up to N times after a failure (TORCHELASTIC_RESTART_COUNT counts restarts).
    #[arg(
        long = "max_restarts",
        visible_alias = "max-restarts",
        default_value_t = 0,
        value_name = "N",
        help_heading = "Distributed GPUs"
    )]
    pub max_restarts: u32,
    /// Seconds between checks of the ranks.
    #[arg(
        long = "monitor_interval",
        visible_alias = "monitor-interval",
        default_value_t = 0.1,
        value_name = "SECONDS",
        help_heading = "Distributed GPUs"
    )]
    pub monitor_interval: f64,

    /// TPU pod (not supported).
    #[arg(
        long = "tpu_cluster",
        visible_alias = "tpu-cluster",
        help_heading = "TPU"
    )]
    pub tpu_cluster: bool,
    /// TPU: internal (not supported).
    #[arg(
        long = "no_tpu_cluster",
        visible_alias = "no-tpu-cluster",
        help_heading = "TPU"
    )]
    pub no_tpu_cluster: bool,
    /// TPU pod: use sudo (config: tpu_use_sudo).
    #[arg(
        long = "tpu_use_sudo",
        visible_alias = "tpu-use-sudo",
        help_heading = "TPU"
    )]
    pub tpu_use_sudo: bool,
    /// TPU pod VMs (not supported).
    #[arg(long = "vm", value_name = "VM", help_heading = "TPU")]
    pub vm: Vec<String>,
    /// TPU pod environment (not supported).
    #[arg(long = "env", value_name = "KEY=VALUE", help_heading = "TPU")]
    pub env: Vec<String>,
    /// TPU: the function to run (config: main_training_function).
    #[arg(
        long = "main_training_function",
        visible_alias = "main-training-function",
        value_name = "NAME",
        help_heading = "TPU"
    )]
    pub main_training_function: Option<String>,
    /// TPU: XLA_DOWNCAST_BF16 (config: downcast_bf16).
    #[arg(
        long = "downcast_bf16",
        visible_alias = "downcast-bf16",
        help_heading = "TPU"
    )]
    pub downcast_bf16: bool,

    /// SageMaker (not supported).
    #[arg(
        long = "aws_access_key_id",
        visible_alias = "aws-access-key-id",
        value_name = "ID",
        help_heading = "AWS Arguments"
    )]
    pub aws_access_key_id: Option<String>,
    /// SageMaker (not supported).
    #[arg(
        long = "aws_secret_access_key",
        visible_alias = "aws-secret-access-key",
        value_name = "KEY",
        help_heading = "AWS Arguments"
    )]
    pub aws_secret_access_key: Option<String>,

    /// Hostfile for multi-node CPU runs through mpirun (config: mpirun_config.mpirun_hostfile).
    #[arg(
        long = "mpirun_hostfile",
        visible_alias = "mpirun-hostfile",
        value_name = "PATH",
        help_heading = "MPI Arguments"
    )]
    pub mpirun_hostfile: Option<String>,

    #[command(flatten)]
    pub resource: ResourceFlags,
    #[command(flatten)]
    pub distributed: DistributedFlags,
    #[command(flatten)]
    pub deepspeed: DeepSpeedFlags,
    #[command(flatten)]
    pub fsdp: FsdpFlags,
    #[command(flatten)]
    pub megatron: MegatronFlags,
    #[command(flatten)]
    pub fp8: Fp8Flags,
    #[command(flatten)]
    pub parallelism: ParallelismFlags,

    /// The training script (or module with -m, or program with --no_python) and its arguments.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "SCRIPT [ARGS]",
        value_hint = clap::ValueHint::CommandWithArguments
    )]
    pub command: Vec<OsString>,
}

impl LaunchCli {
    /// Every config value given on the command line, for `config::resolve`.
    pub fn config_values(&self) -> Vec<crate::config::CliValue> {
        let mut v: Vec<(&'static str, String, &'static str)> = Vec::new();
        v.extend(self.resource.values());
        v.extend(self.distributed.values());
        v.extend(self.deepspeed.values());
        v.extend(self.fsdp.values());
        v.extend(self.megatron.values());
        v.extend(self.fp8.values());
        v.extend(self.parallelism.values());
        if self.debug {
            v.push(("debug", "true".into(), "--debug"));
        }
        if self.tpu_use_sudo {
            v.push(("tpu_use_sudo", "true".into(), "--tpu_use_sudo"));
        }
        if self.downcast_bf16 {
            v.push(("downcast_bf16", "true".into(), "--downcast_bf16"));
        }
        if let Some(f) = &self.main_training_function {
            v.push((
                "main_training_function",
                f.clone(),
                "--main_training_function",
            ));
        }
        if let Some(h) = &self.mpirun_hostfile {
            v.push((
                "mpirun_config.mpirun_hostfile",
                h.clone(),
                "--mpirun_hostfile",
            ));
        }
        v.into_iter()
            .map(|(key, value, flag)| crate::config::CliValue {
                key: key.into(),
                value: serde_json::Value::from(value),
                flag: flag.into(),
            })
            .collect()
    }
}

/// Resource Selection Arguments.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Resource Selection Arguments")]
pub struct ResourceFlags {
    /// Mixed precision: no, fp16, bf16 or fp8 (config: mixed_precision).
    #[arg(
        long = "mixed_precision",
        visible_alias = "mixed-precision",
        value_name = "VALUE"
    )]
    pub mixed_precision: Option<String>,
    /// Total number of processes over all machines (config: num_processes).
    #[arg(
        long = "num_processes",
        visible_alias = "num-processes",
        value_name = "VALUE"
    )]
    pub num_processes: Option<String>,
    /// Number of machines (config: num_machines).
    #[arg(
        long = "num_machines",
        visible_alias = "num-machines",
        value_name = "VALUE"
    )]
    pub num_machines: Option<String>,
    /// Pin each rank to CPU cores near its GPU (ACCELERATE_CPU_AFFINITY=1).
    #[arg(long = "enable_cpu_affinity", visible_alias = "enable-cpu-affinity")]
    pub enable_cpu_affinity: bool,
    /// torch.compile backend (no, eager, aot_eager, inductor, …).
    #[arg(
        long = "dynamo_backend",
        visible_alias = "dynamo-backend",
        value_name = "VALUE"
    )]
    pub dynamo_backend: Option<String>,
    /// torch.compile mode: default, reduce-overhead, max-autotune.
    #[arg(
        long = "dynamo_mode",
        visible_alias = "dynamo-mode",
        value_name = "VALUE"
    )]
    pub dynamo_mode: Option<String>,
    /// torch.compile with fullgraph=True.
    #[arg(long = "dynamo_use_fullgraph", visible_alias = "dynamo-use-fullgraph")]
    pub dynamo_use_fullgraph: bool,
    /// torch.compile with dynamic shapes.
    #[arg(long = "dynamo_use_dynamic", visible_alias = "dynamo-use-dynamic")]
    pub dynamo_use_dynamic: bool,
    /// Compile repeated blocks once (regional compilation).
    #[arg(
        long = "dynamo_use_regional_compilation",
        visible_alias = "dynamo-use-regional-compilation"
    )]
    pub dynamo_use_regional_compilation: bool,
}

impl ResourceFlags {
    /// The flags given, as config values (key, value, flag).
    pub fn values(&self) -> Vec<(&'static str, String, &'static str)> {
        let mut v = Vec::new();
        if let Some(x) = &self.mixed_precision {
            v.push(("mixed_precision", x.clone(), "--mixed_precision"));
        }
        if let Some(x) = &self.num_processes {
            v.push(("num_processes", x.clone(), "--num_processes"));
        }
        if let Some(x) = &self.num_machines {
            v.push(("num_machines", x.clone(), "--num_machines"));
        }
        if self.enable_cpu_affinity {
            v.push((
                "enable_cpu_affinity",
                "true".to_string(),
                "--enable_cpu_affinity",
            ));
        }
        if let Some(x) = &self.dynamo_backend {
            v.push((
                "dynamo_config.dynamo_backend",
                x.clone(),
                "--dynamo_backend",
            ));
        }
        if let Some(x) = &self.dynamo_mode {
            v.push(("dynamo_config.dynamo_mode", x.clone(), "--dynamo_mode"));
        }
        if self.dynamo_use_fullgraph {
            v.push((
                "dynamo_config.dynamo_use_fullgraph",
                "true".to_string(),
                "--dynamo_use_fullgraph",
            ));
        }
        if self.dynamo_use_dynamic {
            v.push((
                "dynamo_config.dynamo_use_dynamic",
                "true".to_string(),
                "--dynamo_use_dynamic",
            ));
        }
        if self.dynamo_use_regional_compilation {
            v.push((
                "dynamo_config.dynamo_use_regional_compilation",
                "true".to_string(),
                "--dynamo_use_regional_compilation",
            ));
        }
        v
    }
}

/// Distributed GPUs.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Distributed GPUs")]
pub struct DistributedFlags {
    /// GPUs to use on each machine, comma-separated, or `all` (exported as CUDA_VISIBLE_DEVICES).
    #[arg(long = "gpu_ids", visible_alias = "gpu-ids", value_name = "VALUE")]
    pub gpu_ids: Option<String>,
    /// All machines are on the same network (accepted; the rendezvous is the same either way).
    #[arg(long = "same_network", visible_alias = "same-network")]
    pub same_network: bool,
    /// Rank of this machine, 0 .. num_machines-1 (SLURM: SLURM_NODEID).
    #[arg(
        long = "machine_rank",
        visible_alias = "machine-rank",
        value_name = "VALUE"
    )]
    pub machine_rank: Option<String>,
    /// Address of the machine of rank 0 (SLURM: the first node of the job).
    #[arg(
        long = "main_process_ip",
        visible_alias = "main-process-ip",
        value_name = "VALUE"
    )]
    pub main_process_ip: Option<String>,
    /// Rendezvous port on the main machine; 0 or unset on one node: a free port (SLURM: derived from SLURM_JOB_ID).
    #[arg(
        long = "main_process_port",
        visible_alias = "main-process-port",
        value_name = "VALUE"
    )]
    pub main_process_port: Option<String>,
    /// Rendezvous backend: static (default; accel-launch itself) or c10d/etcd (elastic; runs torchrun).
    #[arg(
        long = "rdzv_backend",
        visible_alias = "rdzv-backend",
        value_name = "VALUE"
    )]
    pub rdzv_backend: Option<String>,
}

impl DistributedFlags {
    /// The flags given, as config values (key, value, flag).
    pub fn values(&self) -> Vec<(&'static str, String, &'static str)> {
        let mut v = Vec::new();
        if let Some(x) = &self.gpu_ids {
            v.push(("gpu_ids", x.clone(), "--gpu_ids"));
        }
        if self.same_network {
            v.push(("same_network", "true".to_string(), "--same_network"));
        }
        if let Some(x) = &self.machine_rank {
            v.push(("machine_rank", x.clone(), "--machine_rank"));
        }
        if let Some(x) = &self.main_process_ip {
            v.push(("main_process_ip", x.clone(), "--main_process_ip"));
        }
        if let Some(x) = &self.main_process_port {
            v.push(("main_process_port", x.clone(), "--main_process_port"));
        }
        if let Some(x) = &self.rdzv_backend {
            v.push(("rdzv_backend", x.clone(), "--rdzv_backend"));
        }
        v
    }
}

/// DeepSpeed Arguments.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "DeepSpeed Arguments")]
pub struct DeepSpeedFlags {
    /// DeepSpeed JSON config file.
    #[arg(
        long = "deepspeed_config_file",
        visible_alias = "deepspeed-config-file",
        value_name = "VALUE"
    )]
    pub deepspeed_config_file: Option<String>,
    /// ZeRO stage (0-3).
    #[arg(
        long = "zero_stage",
        visible_alias = "zero-stage",
        value_name = "VALUE"
    )]
    pub zero_stage: Option<String>,
    /// Optimizer offload: none, cpu or nvme.
    #[arg(
        long = "offload_optimizer_device",
        visible_alias = "offload-optimizer-device",
        value_name = "VALUE"
    )]
    pub offload_optimizer_device: Option<String>,
    /// Parameter offload: none, cpu or nvme.
    #[arg(
        long = "offload_param_device",
        visible_alias = "offload-param-device",
        value_name = "VALUE"
    )]
    pub offload_param_device: Option<String>,
    /// NVMe path for optimizer offload (exported, unlike accelerate 1.15).
    #[arg(
        long = "offload_optimizer_nvme_path",
        visible_alias = "offload-optimizer-nvme-path",
        value_name = "VALUE"
    )]
    pub offload_optimizer_nvme_path: Option<String>,
    /// NVMe path for parameter offload (exported, unlike accelerate 1.15).
    #[arg(
        long = "offload_param_nvme_path",
        visible_alias = "offload-param-nvme-path",
        value_name = "VALUE"
    )]
    pub offload_param_nvme_path: Option<String>,
    /// Gradient accumulation steps.
    #[arg(
        long = "gradient_accumulation_steps",
        visible_alias = "gradient-accumulation-steps",
        value_name = "VALUE"
    )]
    pub gradient_accumulation_steps: Option<String>,
    /// Gradient clipping value.
    #[arg(
        long = "gradient_clipping",
        visible_alias = "gradient-clipping",
        value_name = "VALUE"
    )]
    pub gradient_clipping: Option<String>,
    /// ZeRO-3 zero.Init for large models (true/false).
    #[arg(
        long = "zero3_init_flag",
        visible_alias = "zero3-init-flag",
        value_name = "VALUE"
    )]
    pub zero3_init_flag: Option<String>,
    /// Save 16-bit model weights with ZeRO-3 (true/false).
    #[arg(
        long = "zero3_save_16bit_model",
        visible_alias = "zero3-save-16bit-model",
        value_name = "VALUE"
    )]
    pub zero3_save_16bit_model: Option<String>,
    /// Hostfile for multi-node DeepSpeed (runs the deepspeed launcher).
    #[arg(
        long = "deepspeed_hostfile",
        visible_alias = "deepspeed-hostfile",
        value_name = "VALUE"
    )]
    pub deepspeed_hostfile: Option<String>,
    /// deepspeed --exclude filter.
    #[arg(
        long = "deepspeed_exclusion_filter",
        visible_alias = "deepspeed-exclusion-filter",
        value_name = "VALUE"
    )]
    pub deepspeed_exclusion_filter: Option<String>,
    /// deepspeed --include filter.
    #[arg(
        long = "deepspeed_inclusion_filter",
        visible_alias = "deepspeed-inclusion-filter",
        value_name = "VALUE"
    )]
    pub deepspeed_inclusion_filter: Option<String>,
    /// deepspeed multi-node launcher: pdsh (default), standard, openmpi, mvapich, mpich, nossh, slurm.
    #[arg(
        long = "deepspeed_multinode_launcher",
        visible_alias = "deepspeed-multinode-launcher",
        value_name = "VALUE"
    )]
    pub deepspeed_multinode_launcher: Option<String>,
    /// Comma-separated MoE layer class names.
    #[arg(
        long = "deepspeed_moe_layer_cls_names",
        visible_alias = "deepspeed-moe-layer-cls-names",
        value_name = "VALUE"
    )]
    pub deepspeed_moe_layer_cls_names: Option<String>,
}

impl DeepSpeedFlags {
    /// The flags given, as config values (key, value, flag).
    pub fn values(&self) -> Vec<(&'static str, String, &'static str)> {
        let mut v = Vec::new();
        if let Some(x) = &self.deepspeed_config_file {
            v.push((
                "deepspeed_config.deepspeed_config_file",
                x.clone(),
                "--deepspeed_config_file",
            ));
        }
        if let Some(x) = &self.zero_stage {
            v.push(("deepspeed_config.zero_stage", x.clone(), "--zero_stage"));
        }
        if let Some(x) = &self.offload_optimizer_device {
            v.push((
                "deepspeed_config.offload_optimizer_device",
                x.clone(),
                "--offload_optimizer_device",
            ));
        }
        if let Some(x) = &self.offload_param_device {
            v.push((
                "deepspeed_config.offload_param_device",
                x.clone(),
                "--offload_param_device",
            ));
        }
        if let Some(x) = &self.offload_optimizer_nvme_path {
            v.push((
                "deepspeed_config.offload_optimizer_nvme_path",
                x.clone(),
                "--offload_optimizer_nvme_path",
            ));
        }
        if let Some(x) = &self.offload_param_nvme_path {
            v.push((
                "deepspeed_config.offload_param_nvme_path",
                x.clone(),
                "--offload_param_nvme_path",
            ));
        }
        if let Some(x) = &self.gradient_accumulation_steps {
            v.push((
                "deepspeed_config.gradient_accumulation_steps",
                x.clone(),
                "--gradient_accumulation_steps",
            ));
        }
        if let Some(x) = &self.gradient_clipping {
            v.push((
                "deepspeed_config.gradient_clipping",
                x.clone(),
                "--gradient_clipping",
            ));
        }
        if let Some(x) = &self.zero3_init_flag {
            v.push((
                "deepspeed_config.zero3_init_flag",
                x.clone(),
                "--zero3_init_flag",
            ));
        }
        if let Some(x) = &self.zero3_save_16bit_model {
            v.push((
                "deepspeed_config.zero3_save_16bit_model",
                x.clone(),
                "--zero3_save_16bit_model",
            ));
        }
        if let Some(x) = &self.deepspeed_hostfile {
            v.push((
                "deepspeed_config.deepspeed_hostfile",
                x.clone(),
                "--deepspeed_hostfile",
            ));
        }
        if let Some(x) = &self.deepspeed_exclusion_filter {
            v.push((
                "deepspeed_config.deepspeed_exclusion_filter",
                x.clone(),
                "--deepspeed_exclusion_filter",
            ));
        }
        if let Some(x) = &self.deepspeed_inclusion_filter {
            v.push((
                "deepspeed_config.deepspeed_inclusion_filter",
                x.clone(),
                "--deepspeed_inclusion_filter",
            ));
        }
        if let Some(x) = &self.deepspeed_multinode_launcher {
            v.push((
                "deepspeed_config.deepspeed_multinode_launcher",
                x.clone(),
                "--deepspeed_multinode_launcher",
            ));
        }
        if let Some(x) = &self.deepspeed_moe_layer_cls_names {
            v.push((
                "deepspeed_config.deepspeed_moe_layer_cls_names",
                x.clone(),
                "--deepspeed_moe_layer_cls_names",
            ));
        }
        v
    }
}

/// FSDP Arguments.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "FSDP Arguments")]
pub struct FsdpFlags {
    /// FSDP version, 1 or 2.
    #[arg(
        long = "fsdp_version",
        visible_alias = "fsdp-version",
        value_name = "VALUE"
    )]
    pub fsdp_version: Option<String>,
    /// Offload parameters to CPU (true/false).
    #[arg(
        long = "fsdp_offload_params",
        visible_alias = "fsdp-offload-params",
        value_name = "VALUE"
    )]
    pub fsdp_offload_params: Option<String>,
    /// Minimum parameters for size-based auto wrap.
    #[arg(
        long = "fsdp_min_num_params",
        visible_alias = "fsdp-min-num-params",
        value_name = "VALUE"
    )]
    pub fsdp_min_num_params: Option<String>,
    /// FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2.
    #[arg(
        long = "fsdp_sharding_strategy",
        visible_alias = "fsdp-sharding-strategy",
        value_name = "VALUE"
    )]
    pub fsdp_sharding_strategy: Option<String>,
    /// FSDP2: reshard after forward (true/false); FSDP1: a sharding strategy.
    #[arg(
        long = "fsdp_reshard_after_forward",
        visible_alias = "fsdp-reshard-after-forward",
        value_name = "VALUE"
    )]
    pub fsdp_reshard_after_forward: Option<String>,
    /// TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP.
    #[arg(
        long = "fsdp_auto_wrap_policy",
        visible_alias = "fsdp-auto-wrap-policy",
        value_name = "VALUE"
    )]
    pub fsdp_auto_wrap_policy: Option<String>,
    /// Layer class names to wrap (exported as FSDP_TRANSFORMER_CLS_TO_WRAP).
    #[arg(
        long = "fsdp_transformer_layer_cls_to_wrap",
        visible_alias = "fsdp-transformer-layer-cls-to-wrap",
        value_name = "VALUE"
    )]
    pub fsdp_transformer_layer_cls_to_wrap: Option<String>,
    /// BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH.
    #[arg(
        long = "fsdp_backward_prefetch",
        visible_alias = "fsdp-backward-prefetch",
        value_name = "VALUE"
    )]
    pub fsdp_backward_prefetch: Option<String>,
    /// FULL_STATE_DICT, LOCAL_STATE_DICT or SHARDED_STATE_DICT.
    #[arg(
        long = "fsdp_state_dict_type",
        visible_alias = "fsdp-state-dict-type",
        value_name = "VALUE"
    )]
    pub fsdp_state_dict_type: Option<String>,
    /// Explicit forward prefetch (true/false).
    #[arg(
        long = "fsdp_forward_prefetch",
        visible_alias = "fsdp-forward-prefetch",
        value_name = "VALUE"
    )]
    pub fsdp_forward_prefetch: Option<String>,
    /// use_orig_params (true/false).
    #[arg(
        long = "fsdp_use_orig_params",
        visible_alias = "fsdp-use-orig-params",
        value_name = "VALUE"
    )]
    pub fsdp_use_orig_params: Option<String>,
    /// Load pretrained weights on rank 0 only (true/false).
    #[arg(
        long = "fsdp_cpu_ram_efficient_loading",
        visible_alias = "fsdp-cpu-ram-efficient-loading",
        value_name = "VALUE"
    )]
    pub fsdp_cpu_ram_efficient_loading: Option<String>,
    /// Broadcast module states from rank 0 (true/false).
    #[arg(
        long = "fsdp_sync_module_states",
        visible_alias = "fsdp-sync-module-states",
        value_name = "VALUE"
    )]
    pub fsdp_sync_module_states: Option<String>,
    /// Activation checkpointing (true/false).
    #[arg(
        long = "fsdp_activation_checkpointing",
        visible_alias = "fsdp-activation-checkpointing",
        value_name = "VALUE"
    )]
    pub fsdp_activation_checkpointing: Option<String>,
    /// Offload checkpointed activations to CPU (true/false).
    #[arg(
        long = "fsdp_activation_checkpointing_offload",
        visible_alias = "fsdp-activation-checkpointing-offload",
        value_name = "VALUE"
    )]
    pub fsdp_activation_checkpointing_offload: Option<String>,
}

impl FsdpFlags {
    /// The flags given, as config values (key, value, flag).
    pub fn values(&self) -> Vec<(&'static str, String, &'static str)> {
        let mut v = Vec::new();
        if let Some(x) = &self.fsdp_version {
            v.push(("fsdp_config.fsdp_version", x.clone(), "--fsdp_version"));
        }
        if let Some(x) = &self.fsdp_offload_params {
            v.push((
                "fsdp_config.fsdp_offload_params",
                x.clone(),
                "--fsdp_offload_params",
            ));
        }
        if let Some(x) = &self.fsdp_min_num_params {
            v.push((
                "fsdp_config.fsdp_min_num_params",
                x.clone(),
                "--fsdp_min_num_params",
            ));
        }
        if let Some(x) = &self.fsdp_sharding_strategy {
            v.push((
                "fsdp_config.fsdp_sharding_strategy",
                x.clone(),
                "--fsdp_sharding_strategy",
            ));
        }
        if let Some(x) = &self.fsdp_reshard_after_forward {
            v.push((
                "fsdp_config.fsdp_reshard_after_forward",
                x.clone(),
                "--fsdp_reshard_after_forward",
            ));
        }
        if let Some(x) = &self.fsdp_auto_wrap_policy {
            v.push((
                "fsdp_config.fsdp_auto_wrap_policy",
                x.clone(),
                "--fsdp_auto_wrap_policy",
            ));
        }
        if let Some(x) = &self.fsdp_transformer_layer_cls_to_wrap {
            v.push((
                "fsdp_config.fsdp_transformer_layer_cls_to_wrap",
                x.clone(),
                "--fsdp_transformer_layer_cls_to_wrap",
            ));
        }
        if let Some(x) = &self.fsdp_backward_prefetch {
            v.push((
                "fsdp_config.fsdp_backward_prefetch",
                x.clone(),
                "--fsdp_backward_prefetch",
            ));
        }
        if let Some(x) = &self.fsdp_state_dict_type {
            v.push((
                "fsdp_config.fsdp_state_dict_type",
                x.clone(),
                "--fsdp_state_dict_type",
            ));
        }
        if let Some(x) = &self.fsdp_forward_prefetch {
            v.push((
                "fsdp_config.fsdp_forward_prefetch",
                x.clone(),
                "--fsdp_forward_prefetch",
            ));
        }
        if let Some(x) = &self.fsdp_use_orig_params {
            v.push((
                "fsdp_config.fsdp_use_orig_params",
                x.clone(),
                "--fsdp_use_orig_params",
            ));
        }
        if let Some(x) = &self.fsdp_cpu_ram_efficient_loading {
            v.push((
                "fsdp_config.fsdp_cpu_ram_efficient_loading",
                x.clone(),
                "--fsdp_cpu_ram_efficient_loading",
            ));
        }
        if let Some(x) = &self.fsdp_sync_module_states {
            v.push((
                "fsdp_config.fsdp_sync_module_states",
                x.clone(),
                "--fsdp_sync_module_states",
            ));
        }
        if let Some(x) = &self.fsdp_activation_checkpointing {
            v.push((
                "fsdp_config.fsdp_activation_checkpointing",
                x.clone(),
                "--fsdp_activation_checkpointing",
            ));
        }
        if let Some(x) = &self.fsdp_activation_checkpointing_offload {
            v.push((
                "fsdp_config.fsdp_activation_checkpointing_offload",
                x.clone(),
                "--fsdp_activation_checkpointing_offload",
            ));
        }
        v
    }
}

/// Megatron-LM Arguments.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Megatron-LM Arguments")]
pub struct MegatronFlags {
    /// Tensor parallelism degree.
    #[arg(
        long = "megatron_lm_tp_degree",
        visible_alias = "megatron-lm-tp-degree",
        value_name = "VALUE"
    )]
    pub megatron_lm_tp_degree: Option<String>,
    /// Pipeline parallelism degree.
    #[arg(
        long = "megatron_lm_pp_degree",
        visible_alias = "megatron-lm-pp-degree",
        value_name = "VALUE"
    )]
    pub megatron_lm_pp_degree: Option<String>,
    /// Micro-batches with pipeline parallelism.
    #[arg(
        long = "megatron_lm_num_micro_batches",
        visible_alias = "megatron-lm-num-micro-batches",
        value_name = "VALUE"
    )]
    pub megatron_lm_num_micro_batches: Option<String>,
    /// Sequence parallelism (true/false).
    #[arg(
        long = "megatron_lm_sequence_parallelism",
        visible_alias = "megatron-lm-sequence-parallelism",
        value_name = "VALUE"
    )]
    pub megatron_lm_sequence_parallelism: Option<String>,
    /// Selective activation recomputation (true/false).
    #[arg(
        long = "megatron_lm_recompute_activations",
        visible_alias = "megatron-lm-recompute-activations",
        value_name = "VALUE"
    )]
    pub megatron_lm_recompute_activations: Option<String>,
    /// Distributed optimizer (true/false).
    #[arg(
        long = "megatron_lm_use_distributed_optimizer",
        visible_alias = "megatron-lm-use-distributed-optimizer",
        value_name = "VALUE"
    )]
    pub megatron_lm_use_distributed_optimizer: Option<String>,
    /// Gradient clipping by global L2 norm.
    #[arg(
        long = "megatron_lm_gradient_clipping",
        visible_alias = "megatron-lm-gradient-clipping",
        value_name = "VALUE"
    )]
    pub megatron_lm_gradient_clipping: Option<String>,
    /// full or selective.
    #[arg(
        long = "megatron_lm_recompute_granularity",
        visible_alias = "megatron-lm-recompute-granularity",
        value_name = "VALUE"
    )]
    pub megatron_lm_recompute_granularity: Option<String>,
    /// uniform or block.
    #[arg(
        long = "megatron_lm_recompute_method",
        visible_alias = "megatron-lm-recompute-method",
        value_name = "VALUE"
    )]
    pub megatron_lm_recompute_method: Option<String>,
    /// Layers to recompute.
    #[arg(
        long = "megatron_lm_recompute_num_layers",
        visible_alias = "megatron-lm-recompute-num-layers",
        value_name = "VALUE"
    )]
    pub megatron_lm_recompute_num_layers: Option<String>,
    /// Decoder layers in the last pipeline stage.
    #[arg(
        long = "megatron_lm_decoder_last_pipeline_num_layers",
        visible_alias = "megatron-lm-decoder-last-pipeline-num-layers",
        value_name = "VALUE"
    )]
    pub megatron_lm_decoder_last_pipeline_num_layers: Option<String>,
    /// Expert model parallel size.
    #[arg(
        long = "megatron_lm_expert_model_parallel_size",
        visible_alias = "megatron-lm-expert-model-parallel-size",
        value_name = "VALUE"
    )]
    pub megatron_lm_expert_model_parallel_size: Option<String>,
    /// Context parallel size.
    #[arg(
        long = "megatron_lm_context_parallel_size",
        visible_alias = "megatron-lm-context-parallel-size",
        value_name = "VALUE"
    )]
    pub megatron_lm_context_parallel_size: Option<String>,
    /// Expert tensor parallel size.
    #[arg(
        long = "megatron_lm_expert_tensor_parallel_size",
        visible_alias = "megatron-lm-expert-tensor-parallel-size",
        value_name = "VALUE"
    )]
    pub megatron_lm_expert_tensor_parallel_size: Option<String>,
    /// Attention dropout.
    #[arg(
        long = "megatron_lm_attention_dropout",
        visible_alias = "megatron-lm-attention-dropout",
        value_name = "VALUE"
    )]
    pub megatron_lm_attention_dropout: Option<String>,
    /// Hidden dropout.
    #[arg(
        long = "megatron_lm_hidden_dropout",
        visible_alias = "megatron-lm-hidden-dropout",
        value_name = "VALUE"
    )]
    pub megatron_lm_hidden_dropout: Option<String>,
    /// Attention backend.
    #[arg(
        long = "megatron_lm_attention_backend",
        visible_alias = "megatron-lm-attention-backend",
        value_name = "VALUE"
    )]
    pub megatron_lm_attention_backend: Option<String>,
    /// Softmax in fp32 (true/false).
    #[arg(
        long = "megatron_lm_attention_softmax_in_fp32",
        visible_alias = "megatron-lm-attention-softmax-in-fp32",
        value_name = "VALUE"
    )]
    pub megatron_lm_attention_softmax_in_fp32: Option<String>,
    /// Per-token loss (true/false).
    #[arg(
        long = "megatron_lm_calculate_per_token_loss",
        visible_alias = "megatron-lm-calculate-per-token-loss",
        value_name = "VALUE"
    )]
    pub megatron_lm_calculate_per_token_loss: Option<String>,
    /// Rotary position embeddings (true/false).
    #[arg(
        long = "megatron_lm_use_rotary_position_embeddings",
        visible_alias = "megatron-lm-use-rotary-position-embeddings",
        value_name = "VALUE"
    )]
    pub megatron_lm_use_rotary_position_embeddings: Option<String>,
    /// Megatron custom FSDP (true/false; `False` is false, unlike accelerate).
    #[arg(
        long = "megatron_lm_use_custom_fsdp",
        visible_alias = "megatron-lm-use-custom-fsdp",
        value_name = "VALUE"
    )]
    pub megatron_lm_use_custom_fsdp: Option<String>,
    /// Do not load optimizer state (true/false).
    #[arg(
        long = "megatron_lm_no_load_optim",
        visible_alias = "megatron-lm-no-load-optim",
        value_name = "VALUE"
    )]
    pub megatron_lm_no_load_optim: Option<String>,
    /// Do not save optimizer state (true/false).
    #[arg(
        long = "megatron_lm_no_save_optim",
        visible_alias = "megatron-lm-no-save-optim",
        value_name = "VALUE"
    )]
    pub megatron_lm_no_save_optim: Option<String>,
    /// Mask loss at end-of-document tokens (true/false).
    #[arg(
        long = "megatron_lm_eod_mask_loss",
        visible_alias = "megatron-lm-eod-mask-loss",
        value_name = "VALUE"
    )]
    pub megatron_lm_eod_mask_loss: Option<String>,
    /// Overlap CPU optimizer copies (true/false).
    #[arg(
        long = "megatron_lm_overlap_cpu_optimizer_d2h_h2d",
        visible_alias = "megatron-lm-overlap-cpu-optimizer-d2h-h2d",
        value_name = "VALUE"
    )]
    pub megatron_lm_overlap_cpu_optimizer_d2h_h2d: Option<String>,
    /// Offload the optimizer to CPU (true/false).
    #[arg(
        long = "megatron_lm_optimizer_cpu_offload",
        visible_alias = "megatron-lm-optimizer-cpu-offload",
        value_name = "VALUE"
    )]
    pub megatron_lm_optimizer_cpu_offload: Option<String>,
    /// Precision-aware optimizer (true/false).
    #[arg(
        long = "megatron_lm_use_precision_aware_optimizer",
        visible_alias = "megatron-lm-use-precision-aware-optimizer",
        value_name = "VALUE"
    )]
    pub megatron_lm_use_precision_aware_optimizer: Option<String>,
}

impl MegatronFlags {
    /// The flags given, as config values (key, value, flag).
    pub fn values(&self) -> Vec<(&'static str, String, &'static str)> {
        let mut v = Vec::new();
        if let Some(x) = &self.megatron_lm_tp_degree {
            v.push((
                "megatron_lm_config.megatron_lm_tp_degree",
                x.clone(),
                "--megatron_lm_tp_degree",
            ));
        }
        if let Some(x) = &self.megatron_lm_pp_degree {
            v.push((
                "megatron_lm_config.megatron_lm_pp_degree",
                x.clone(),
                "--megatron_lm_pp_degree",
            ));
        }
        if let Some(x) = &self.megatron_lm_num_micro_batches {
            v.push((
                "megatron_lm_config.megatron_lm_num_micro_batches",
                x.clone(),
                "--megatron_lm_num_micro_batches",
            ));
        }
        if let Some(x) = &self.megatron_lm_sequence_parallelism {
            v.push((
                "megatron_lm_config.megatron_lm_sequence_parallelism",
                x.clone(),
                "--megatron_lm_sequence_parallelism",
            ));
        }
        if let Some(x) = &self.megatron_lm_recompute_activations {
            v.push((
                "megatron_lm_config.megatron_lm_recompute_activations",
                x.clone(),
                "--megatron_lm_recompute_activations",
            ));
        }
        if let Some(x) = &self.megatron_lm_use_distributed_optimizer {
            v.push((
                "megatron_lm_config.megatron_lm_use_distributed_optimizer",
                x.clone(),
                "--megatron_lm_use_distributed_optimizer",
            ));
        }
        if let Some(x) = &self.megatron_lm_gradient_clipping {
            v.push((
                "megatron_lm_config.megatron_lm_gradient_clipping",
                x.clone(),
                "--megatron_lm_gradient_clipping",
            ));
        }
        if let Some(x) = &self.megatron_lm_recompute_granularity {
            v.push((
                "megatron_lm_config.megatron_lm_recompute_granularity",
                x.clone(),
                "--megatron_lm_recompute_granularity",
            ));
        }
        if let Some(x) = &self.megatron_lm_recompute_method {
            v.push((
                "megatron_lm_config.megatron_lm_recompute_method",
                x.clone(),
                "--megatron_lm_recompute_method",
            ));
        }
        if let Some(x) = &self.megatron_lm_recompute_num_layers {
            v.push((
                "megatron_lm_config.megatron_lm_recompute_num_layers",
                x.clone(),
                "--megatron_lm_recompute_num_layers",
            ));
        }
        if let Some(x) = &self.megatron_lm_decoder_last_pipeline_num_layers {
            v.push((
                "megatron_lm_config.megatron_lm_decoder_last_pipeline_num_layers",
                x.clone(),
                "--megatron_lm_decoder_last_pipeline_num_layers",
            ));
        }
        if let Some(x) = &self.megatron_lm_expert_model_parallel_size {
            v.push((
                "megatron_lm_config.megatron_lm_expert_model_parallel_size",
                x.clone(),
                "--megatron_lm_expert_model_parallel_size",
            ));
        }
        if let Some(x) = &self.megatron_lm_context_parallel_size {
            v.push((
                "megatron_lm_config.megatron_lm_context_parallel_size",
                x.clone(),
                "--megatron_lm_context_parallel_size",
            ));
        }
        if let Some(x) = &self.megatron_lm_expert_tensor_parallel_size {
            v.push((
                "megatron_lm_config.megatron_lm_expert_tensor_parallel_size",
                x.clone(),
                "--megatron_lm_expert_tensor_parallel_size",
            ));
        }
        if let Some(x) = &self.megatron_lm_attention_dropout {
            v.push((
                "megatron_lm_config.megatron_lm_attention_dropout",
                x.clone(),
                "--megatron_lm_attention_dropout",
            ));
        }
        if let Some(x) = &self.megatron_lm_hidden_dropout {
            v.push((
                "megatron_lm_config.megatron_lm_hidden_dropout",
                x.clone(),
                "--megatron_lm_hidden_dropout",
            ));
        }
        if let Some(x) = &self.megatron_lm_attention_backend {
            v.push((
                "megatron_lm_config.megatron_lm_attention_backend",
                x.clone(),
                "--megatron_lm_attention_backend",
            ));
        }
        if let Some(x) = &self.megatron_lm_attention_softmax_in_fp32 {
            v.push((
                "megatron_lm_config.megatron_lm_attention_softmax_in_fp32",
                x.clone(),
                "--megatron_lm_attention_softmax_in_fp32",
            ));
        }
        if let Some(x) = &self.megatron_lm_calculate_per_token_loss {
            v.push((
                "megatron_lm_config.megatron_lm_calculate_per_token_loss",
                x.clone(),
                "--megatron_lm_calculate_per_token_loss",
            ));
        }
        if let Some(x) = &self.megatron_lm_use_rotary_position_embeddings {
            v.push((
                "megatron_lm_config.megatron_lm_use_rotary_position_embeddings",
                x.clone(),
                "--megatron_lm_use_rotary_position_embeddings",
            ));
        }
        if let Some(x) = &self.megatron_lm_use_custom_fsdp {
            v.push((
                "megatron_lm_config.megatron_lm_use_custom_fsdp",
                x.clone(),
                "--megatron_lm_use_custom_fsdp",
            ));
        }
        if let Some(x) = &self.megatron_lm_no_load_optim {
            v.push((
                "megatron_lm_config.megatron_lm_no_load_optim",
                x.clone(),
                "--megatron_lm_no_load_optim",
            ));
        }
        if let Some(x) = &self.megatron_lm_no_save_optim {
            v.push((
                "megatron_lm_config.megatron_lm_no_save_optim",
                x.clone(),
                "--megatron_lm_no_save_optim",
            ));
        }
        if let Some(x) = &self.megatron_lm_eod_mask_loss {
            v.push((
                "megatron_lm_config.megatron_lm_eod_mask_loss",
                x.clone(),
                "--megatron_lm_eod_mask_loss",
            ));
        }
        if let Some(x) = &self.megatron_lm_overlap_cpu_optimizer_d2h_h2d {
            v.push((
                "megatron_lm_config.megatron_lm_overlap_cpu_optimizer_d2h_h2d",
                x.clone(),
                "--megatron_lm_overlap_cpu_optimizer_d2h_h2d",
            ));
        }
        if let Some(x) = &self.megatron_lm_optimizer_cpu_offload {
            v.push((
                "megatron_lm_config.megatron_lm_optimizer_cpu_offload",
                x.clone(),
                "--megatron_lm_optimizer_cpu_offload",
            ));
        }
        if let Some(x) = &self.megatron_lm_use_precision_aware_optimizer {
            v.push((
                "megatron_lm_config.megatron_lm_use_precision_aware_optimizer",
                x.clone(),
                "--megatron_lm_use_precision_aware_optimizer",
            ));
        }
        v
    }
}

/// FP8 Arguments.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "FP8 Arguments")]
pub struct Fp8Flags {
    /// FP8 backend: ao, te or msamp (exported upper-case, which the child needs).
    #[arg(
        long = "fp8_backend",
        visible_alias = "fp8-backend",
        value_name = "VALUE"
    )]
    pub fp8_backend: Option<String>,
    /// TE: autocast during evaluation.
    #[arg(
        long = "fp8_use_autocast_during_eval",
        visible_alias = "fp8-use-autocast-during-eval"
    )]
    pub fp8_use_autocast_during_eval: bool,
    /// TE: scaling margin.
    #[arg(
        long = "fp8_margin",
        visible_alias = "fp8-margin",
        value_name = "VALUE"
    )]
    pub fp8_margin: Option<String>,
    /// TE: scaling factor update interval.
    #[arg(
        long = "fp8_interval",
        visible_alias = "fp8-interval",
        value_name = "VALUE"
    )]
    pub fp8_interval: Option<String>,
    /// TE: HYBRID, E4M3 or E5M2.
    #[arg(
        long = "fp8_format",
        visible_alias = "fp8-format",
        value_name = "VALUE"
    )]
    pub fp8_format: Option<String>,
    /// TE: amax history length.
    #[arg(
        long = "fp8_amax_history_len",
        visible_alias = "fp8-amax-history-len",
        value_name = "VALUE"
    )]
    pub fp8_amax_history_len: Option<String>,
    /// TE: max or most_recent.
    #[arg(
        long = "fp8_amax_compute_algo",
        visible_alias = "fp8-amax-compute-algo",
        value_name = "VALUE"
    )]
    pub fp8_amax_compute_algo: Option<String>,
    /// TE: fprop,dgrad,wgrad in higher precision, e.g. false,false,true.
    #[arg(
        long = "fp8_override_linear_precision",
        visible_alias = "fp8-override-linear-precision",
        value_name = "VALUE"
    )]
    pub fp8_override_linear_precision: Option<String>,
    /// MS-AMP: O1 or O2.
    #[arg(
        long = "fp8_opt_level",
        visible_alias = "fp8-opt-level",
        value_name = "VALUE"
    )]
    pub fp8_opt_level: Option<String>,
    /// AO: float8 all-gather under FSDP2 (true/false).
    #[arg(
        long = "fp8_enable_fsdp_float8_all_gather",
        visible_alias = "fp8-enable-fsdp-float8-all-gather",
        value_name = "VALUE"
    )]
    pub fp8_enable_fsdp_float8_all_gather: Option<String>,
    /// AO: pad the inner dimension (true/false).
    #[arg(
        long = "fp8_pad_inner_dim",
        visible_alias = "fp8-pad-inner-dim",
        value_name = "VALUE"
    )]
    pub fp8_pad_inner_dim: Option<String>,
}

impl Fp8Flags {
    /// The flags given, as config values (key, value, flag).
    pub fn values(&self) -> Vec<(&'static str, String, &'static str)> {
        let mut v = Vec::new();
        if let Some(x) = &self.fp8_backend {
            v.push(("fp8_config.backend", x.clone(), "--fp8_backend"));
        }
        if self.fp8_use_autocast_during_eval {
            v.push((
                "fp8_config.use_autocast_during_eval",
                "true".to_string(),
                "--fp8_use_autocast_during_eval",
            ));
        }
        if let Some(x) = &self.fp8_margin {
            v.push(("fp8_config.margin", x.clone(), "--fp8_margin"));
        }
        if let Some(x) = &self.fp8_interval {
            v.push(("fp8_config.interval", x.clone(), "--fp8_interval"));
        }
        if let Some(x) = &self.fp8_format {
            v.push(("fp8_config.fp8_format", x.clone(), "--fp8_format"));
        }
        if let Some(x) = &self.fp8_amax_history_len {
            v.push((
                "fp8_config.amax_history_len",
                x.clone(),
                "--fp8_amax_history_len",
            ));
        }
        if let Some(x) = &self.fp8_amax_compute_algo {
            v.push((
                "fp8_config.amax_compute_algo",
                x.clone(),
                "--fp8_amax_compute_algo",
            ));
        }
        if let Some(x) = &self.fp8_override_linear_precision {
            v.push((
                "fp8_config.override_linear_precision",
                x.clone(),
                "--fp8_override_linear_precision",
            ));
        }
        if let Some(x) = &self.fp8_opt_level {
            v.push(("fp8_config.opt_level", x.clone(), "--fp8_opt_level"));
        }
        if let Some(x) = &self.fp8_enable_fsdp_float8_all_gather {
            v.push((
                "fp8_config.enable_fsdp_float8_all_gather",
                x.clone(),
                "--fp8_enable_fsdp_float8_all_gather",
            ));
        }
        if let Some(x) = &self.fp8_pad_inner_dim {
            v.push(("fp8_config.pad_inner_dim", x.clone(), "--fp8_pad_inner_dim"));
        }
        v
    }
}

/// ParallelismConfig Arguments.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "ParallelismConfig Arguments")]
pub struct ParallelismFlags {
    /// Data-parallel replicate size.
    #[arg(
        long = "parallelism_config_dp_replicate_size",
        visible_alias = "parallelism-config-dp-replicate-size",
        value_name = "VALUE"
    )]
    pub parallelism_config_dp_replicate_size: Option<String>,
    /// Data-parallel shard size.
    #[arg(
        long = "parallelism_config_dp_shard_size",
        visible_alias = "parallelism-config-dp-shard-size",
        value_name = "VALUE"
    )]
    pub parallelism_config_dp_shard_size: Option<String>,
    /// Tensor-parallel size.
    #[arg(
        long = "parallelism_config_tp_size",
        visible_alias = "parallelism-config-tp-size",
        value_name = "VALUE"
    )]
    pub parallelism_config_tp_size: Option<String>,
    /// Context-parallel size.
    #[arg(
        long = "parallelism_config_cp_size",
        visible_alias = "parallelism-config-cp-size",
        value_name = "VALUE"
    )]
    pub parallelism_config_cp_size: Option<String>,
    /// Context-parallel backend (torch).
    #[arg(
        long = "parallelism_config_cp_backend",
        visible_alias = "parallelism-config-cp-backend",
        value_name = "VALUE"
    )]
    pub parallelism_config_cp_backend: Option<String>,
    /// allgather or alltoall.
    #[arg(
        long = "parallelism_config_cp_comm_strategy",
        visible_alias = "parallelism-config-cp-comm-strategy",
        value_name = "VALUE"
    )]
    pub parallelism_config_cp_comm_strategy: Option<String>,
    /// Sequence-parallel size.
    #[arg(
        long = "parallelism_config_sp_size",
        visible_alias = "parallelism-config-sp-size",
        value_name = "VALUE"
    )]
    pub parallelism_config_sp_size: Option<String>,
    /// Sequence-parallel backend (deepspeed).
    #[arg(
        long = "parallelism_config_sp_backend",
        visible_alias = "parallelism-config-sp-backend",
        value_name = "VALUE"
    )]
    pub parallelism_config_sp_backend: Option<String>,
    /// Sequence length.
    #[arg(
        long = "parallelism_config_sp_seq_length",
        visible_alias = "parallelism-config-sp-seq-length",
        value_name = "VALUE"
    )]
    pub parallelism_config_sp_seq_length: Option<String>,
    /// Variable sequence length (true/false).
    #[arg(
        long = "parallelism_config_sp_seq_length_is_variable",
        visible_alias = "parallelism-config-sp-seq-length-is-variable",
        value_name = "VALUE"
    )]
    pub parallelism_config_sp_seq_length_is_variable: Option<String>,
    /// Attention implementation (sdpa, …).
    #[arg(
        long = "parallelism_config_sp_attn_implementation",
        visible_alias = "parallelism-config-sp-attn-implementation",
        value_name = "VALUE"
    )]
    pub parallelism_config_sp_attn_implementation: Option<String>,
}

impl ParallelismFlags {
    /// The flags given, as config values (key, value, flag).
    pub fn values(&self) -> Vec<(&'static str, String, &'static str)> {
        let mut v = Vec::new();
        if let Some(x) = &self.parallelism_config_dp_replicate_size {
            v.push((
                "parallelism_config.parallelism_config_dp_replicate_size",
                x.clone(),
                "--parallelism_config_dp_replicate_size",
            ));
        }
        if let Some(x) = &self.parallelism_config_dp_shard_size {
            v.push((
                "parallelism_config.parallelism_config_dp_shard_size",
                x.clone(),
                "--parallelism_config_dp_shard_size",
            ));
        }
        if let Some(x) = &self.parallelism_config_tp_size {
            v.push((
                "parallelism_config.parallelism_config_tp_size",
                x.clone(),
                "--parallelism_config_tp_size",
            ));
        }
        if let Some(x) = &self.parallelism_config_cp_size {
            v.push((
                "parallelism_config.parallelism_config_cp_size",
                x.clone(),
                "--parallelism_config_cp_size",
            ));
        }
        if let Some(x) = &self.parallelism_config_cp_backend {
            v.push((
                "parallelism_config.parallelism_config_cp_backend",
                x.clone(),
                "--parallelism_config_cp_backend",
            ));
        }
        if let Some(x) = &self.parallelism_config_cp_comm_strategy {
            v.push((
                "parallelism_config.parallelism_config_cp_comm_strategy",
                x.clone(),
                "--parallelism_config_cp_comm_strategy",
            ));
        }
        if let Some(x) = &self.parallelism_config_sp_size {
            v.push((
                "parallelism_config.parallelism_config_sp_size",
                x.clone(),
                "--parallelism_config_sp_size",
            ));
        }
        if let Some(x) = &self.parallelism_config_sp_backend {
            v.push((
                "parallelism_config.parallelism_config_sp_backend",
                x.clone(),
                "--parallelism_config_sp_backend",
            ));
        }
        if let Some(x) = &self.parallelism_config_sp_seq_length {
            v.push((
                "parallelism_config.parallelism_config_sp_seq_length",
                x.clone(),
                "--parallelism_config_sp_seq_length",
            ));
        }
        if let Some(x) = &self.parallelism_config_sp_seq_length_is_variable {
            v.push((
                "parallelism_config.parallelism_config_sp_seq_length_is_variable",
                x.clone(),
                "--parallelism_config_sp_seq_length_is_variable",
            ));
        }
        if let Some(x) = &self.parallelism_config_sp_attn_implementation {
            v.push((
                "parallelism_config.parallelism_config_sp_attn_implementation",
                x.clone(),
                "--parallelism_config_sp_attn_implementation",
            ));
        }
        v
    }
}

pub fn doc() -> ToolDoc {
    ToolDoc {
        name: "accel-launch",
        command: super::command_of::<LaunchCli>,
        env_groups: &[
            Group::Accel,
            Group::Paths,
            Group::Contract,
            Group::Accelerate,
            Group::Slurm,
            Group::Mpi,
            Group::Output,
        ],
        examples: &[
            ("accel-launch train.py --lr 1e-4", "Run with the default config file, or the embedded default (all GPUs; two CPU ranks on a machine without GPUs)."),
            ("accel-launch --cpu --num_processes 4 train.py", "Four gloo ranks on CPU."),
            ("accel-launch --config_file fsdp.yaml --dry-run train.py", "Show the resolved config (with the origin of each value) and every rank's argv and environment."),
            ("accel-launch --log_dir logs --rank_prefix '[{rank}] ' --local_ranks_filter 0 train.py", "Per-rank log files; only rank 0 on the console, prefixed."),
            ("srun accel-launch train.py", "In an sbatch script, one task per node: nodes, node rank and rendezvous come from SLURM."),
            ("srun accel-env -- python train.py", "One task per GPU: each task gets its rank contract from SLURM, no supervisor."),
        ],
        launcher_codes: true,
        extra_sections: &[
            ("DEFAULTS", &[
                "Without a config file, accel-launch uses every visible GPU (one rank per GPU). On a machine without GPUs it starts two CPU (gloo) ranks, or one on a single-core machine; --num_processes overrides either. --cpu ignores the default config file, as accelerate does (an explicit --config_file is still read).",
                "Ports: on one node, without --main_process_port (or with 0), a free port is picked; should another process take it before rank 0 binds it, the run is retried on a new port. A port that is given and already in use is an error. On many nodes the port is --main_process_port, else one derived from SLURM_JOB_ID, else 29500.",
                "Stopping: SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to every rank's process group and stop the run; SIGUSR1 and SIGUSR2 are forwarded only (e.g. SLURM's requeue warning). Ranks get --grace_period seconds (default 30) to exit before SIGKILL. When a rank fails, the others get SIGTERM the same way. Ranks and their children are killed if accel-launch itself is SIGKILLed.",
            ]),
            ("DIFFERENCES FROM ACCELERATE LAUNCH", &[
                "Exit status: the failing rank's own code (or 128+N for signal N), not always 1; 125/126/127 for the launcher's own failures.",
                "--cpu --num_processes N and MULTI_CPU configs start N gloo ranks with torchrun's worker variables (accelerate starts one process); MULTI_CPU ranks get ACCELERATE_USE_CPU=True. Any run that accelerate would start as one plain process is started as N ranks when num_processes is N > 1; with 1 the single process gets no rank variables, as under accelerate.",
                "TORCHELASTIC_USE_AGENT_STORE is not set: rank 0 hosts the TCPStore; there is no agent process.",
                "NVMe offload paths (offload_optimizer_nvme_path, offload_param_nvme_path) are exported as ACCELERATE_DEEPSPEED_OFFLOAD_*_NVME_PATH, which accelerate's DeepSpeed plugin reads but accelerate launch never sets.",
                "FP8: the questionnaire's key names (amax_history_length, amax_compute_algorithm, optimization_level) are exported under the names the child reads (AMAX_HISTORY_LEN, AMAX_COMPUTE_ALGO, OPT_LEVEL); --fp8_backend is upper-cased; a string override_linear_precision such as '(false, false, true)' is parsed, not indexed by character.",
                "Config scalars accelerate ignores (rdzv_backend, same_network, enable_cpu_affinity, downcast_bf16, tpu_use_sudo) are honoured; config values are validated (unknown keys are warnings with a suggestion).",
                "Boolean flags that accelerate parses with Python's bool() (--megatron_lm_use_custom_fsdp False, …) read False as false.",
                "The FSDP check 'cpu_ram_efficient_loading needs sync_module_states' compares booleans (accelerate tests the truthiness of strings), and --use_parallelism_config checks the numeric FSDP version.",
                "An occupied port on one node is an error when given explicitly (accelerate silently switches to a random port), and retried when picked automatically.",
                "accel-env -- CMD under SLURM with one visible GPU per task (--gpus-per-task=1) sets LOCAL_RANK=0, as torchrun's --virtual-local-rank does, so accelerate picks the task's only device.",
                "Multi-node DeepSpeed: the run's variables are merged into .deepspeed_env (DS_ENV_FILE) by name; accelerate appends its whole environment to it on every launch.",
                "Elastic rendezvous (--rdzv_backend c10d/etcd) runs torchrun with translated arguments; multi-node DeepSpeed with a hostfile runs the deepspeed launcher; multi-node CPU with --mpirun_hostfile runs mpirun. TPU and SageMaker are not supported.",
            ]),
        ],
    }
}
