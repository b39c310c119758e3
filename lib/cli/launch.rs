//! `accel-launch`: command-line definition. Every `accelerate launch` flag, in both spellings, plus
//! accel's supervision, logging and `--dry-run` options.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use clap::Parser;

use super::torchrun::TorchrunFlags;
use super::ToolDoc;
use crate::config::schema;
use crate::duration::{self, Wait};
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
///
/// torchrun's command line is taken too (--nnodes, --nproc-per-node, --standalone, …): given only
/// torchrun's flags, the ranks get exactly torchrun's environment and log layout.
#[derive(Debug, Parser)]
#[command(name = "accel-launch", version, max_term_width = 100)]
pub struct LaunchCli {
    /// Which options the command line itself gave (first: the fields after it take their values
    /// out of clap's matches).
    #[command(flatten)]
    pub given: Given,
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

    /// Print the resolved config with the origin of each value, the launch (accel-launch starts every rank itself; also the path accelerate launch would take) and each rank's argv and environment; run nothing.
    #[arg(long = "dry-run", visible_alias = "dry_run", help_heading = "accel")]
    pub dry_run: bool,
    /// With --dry-run: print JSON.
    #[arg(long = "json", requires = "dry_run", help_heading = "accel")]
    pub json: bool,
    /// Seconds between the stop signal and SIGKILL when ranks are stopped, `inf` for never (default: ACCEL_LAUNCH_GRACE, else 30).
    #[arg(
        long = "grace_period",
        visible_alias = "grace-period",
        value_name = "SECONDS",
        value_parser = duration::parse_wait,
        allow_negative_numbers = true,
        help_heading = "accel"
    )]
    pub grace_period: Option<Wait>,
    /// Log file name template under --log_dir: {rank}, {local_rank}, {node}, {attempt}, {stream}; a relative path that stays inside --log_dir.
    #[arg(long = "log_template", visible_alias = "log-template", value_name = "TEMPLATE", default_value = crate::launch::supervise::DEFAULT_LOG_TEMPLATE, value_parser = parse_log_template, help_heading = "accel")]
    pub log_template: String,
    /// Prefix each console line of a rank with this template, e.g. '[{rank}] ' ({rank}, {local_rank}, {node}, {role}).
    #[arg(
        long = "rank_prefix",
        visible_alias = "rank-prefix",
        value_name = "TEMPLATE",
        value_parser = parse_rank_prefix,
        help_heading = "accel"
    )]
    pub rank_prefix: Option<String>,
    /// Only these local ranks print to the console, e.g. 0 or 0,1 (all still write their log files).
    #[arg(
        long = "local_ranks_filter",
        visible_alias = "local-ranks-filter",
        value_name = "RANKS",
        value_parser = parse_local_ranks,
        help_heading = "accel"
    )]
    pub local_ranks_filter: Option<LocalRanks>,
    /// Multi-node: seconds every node's launcher waits for all nodes to join the control plane (node 0, master port + 1); default: --rdzv_conf timeout=SECONDS, else 300.
    #[arg(
        long = "rdzv_timeout",
        visible_alias = "rdzv-timeout",
        value_name = "SECONDS",
        value_parser = duration::parse_timeout,
        allow_negative_numbers = true,
        help_heading = "accel"
    )]
    pub rdzv_timeout: Option<Duration>,
    /// Write how the run ended as JSON to PATH (status; the failing node, host, rank, exit code or signal, stderr tail), also when it ended in the join before any rank started (`ended_in_join`: true, the `error`, no ranks). Checked before any rank starts (a directory is exit 2, a path that cannot be created exit 4); a write that fails at the end leaves the run's exit status as it is, unless the run succeeded (then 4).
    #[arg(
        long = "report_json",
        visible_alias = "report-json",
        value_name = "PATH",
        help_heading = "accel"
    )]
    pub report_json: Option<PathBuf>,
    /// Multi-node, node 0: append the host of each node lost during the run to PATH (one host a line, each once), for the next submission: `sbatch --exclude=$(paste -sd, PATH)`. See SPARE NODES.
    #[arg(
        long = "exclude_file",
        visible_alias = "exclude-file",
        value_name = "PATH",
        help_heading = "accel"
    )]
    pub exclude_file: Option<PathBuf>,
    /// Multi-node, node 0: a node whose ranks fail, while --max_restarts remain and a spare waits, is replaced by the spare for the next attempt instead of being restarted in place (its launcher exits with its rank's status). See SPARE NODES.
    #[arg(
        long = "replace_failing_nodes",
        visible_alias = "replace-failing-nodes",
        help_heading = "accel"
    )]
    pub replace_failing_nodes: bool,
    /// Multi-node under SLURM, node 0: drain each lost or replaced node (`scontrol update NodeName=H State=DRAIN Reason=...`) where this user may; a note says so when it may not. See SPARE NODES.
    #[arg(
        long = "drain_lost_nodes",
        visible_alias = "drain-lost-nodes",
        help_heading = "accel"
    )]
    pub drain_lost_nodes: bool,

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

    /// Tee rank output torchrun-style: with accelerate's flags any value but 0 prefixes console lines with `[{role}{local_rank}]:`; with torchrun's command line, torchrun's tee (see TORCHRUN COMMAND LINE).
    #[arg(
        short = 't',
        long = "tee",
        default_value = "0",
        value_name = "0-3",
        value_parser = parse_tee,
        help_heading = "Distributed GPUs"
    )]
    pub tee: String,
    /// Write each rank's stdout and stderr to files under DIR (see --log_template; torchrun's layout for torchrun's command line).
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
    /// Rendezvous options KEY=VALUE,...: passed to torchrun for --rdzv_backend c10d or etcd; with the static rendezvous only `timeout` counts (the join timeout, as torchrun's static store waits).
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
        default_value = "0.1",
        value_name = "SECONDS",
        value_parser = duration::parse_interval,
        allow_negative_numbers = true,
        help_heading = "Distributed GPUs"
    )]
    pub monitor_interval: Duration,

    // --- hang detection (lib/launch/hang.rs, lib/launch/autopsy.rs) ---
    /// Declare the run hung when no rank made progress (CPU, I/O, Python stack) for SECONDS: print every rank's stack, stop the run, exit 124 (default: ACCEL_LAUNCH_HANG_TIMEOUT; 0: off).
    #[arg(
        long = "hang_timeout",
        visible_alias = "hang-timeout",
        value_name = "SECONDS",
        value_parser = duration::parse_wait,
        allow_negative_numbers = true,
        help_heading = "accel"
    )]
    pub hang_timeout: Option<Wait>,
    /// Name a straggler while the run goes on: a rank whose share of time waiting in collectives is more than PCT points below the median rank's over a whole --straggler_window (default: ACCEL_LAUNCH_STRAGGLER_THRESHOLD; unset or 0: off).
    #[arg(
        long = "straggler_threshold",
        visible_alias = "straggler-threshold",
        value_name = "PCT",
        value_parser = parse_percent,
        help_heading = "accel"
    )]
    pub straggler_threshold: Option<f64>,
    /// Seconds of stack samples each straggler judgement is made from.
    #[arg(
        long = "straggler_window",
        visible_alias = "straggler-window",
        value_name = "SECONDS",
        default_value = "60",
        value_parser = parse_window,
        help_heading = "accel"
    )]
    pub straggler_window: Duration,
    /// When a rank fails, print the other ranks' Python stacks before stopping them.
    #[arg(
        long = "stacks_on_failure",
        visible_alias = "stacks-on-failure",
        help_heading = "accel"
    )]
    pub stacks_on_failure: bool,
    /// Print the Python stacks of the ranks of the running accel-launch PID, grouped, and exit; the run goes on.
    #[arg(long = "stacks", value_name = "PID", help_heading = "accel")]
    pub stacks: Option<i32>,

    // --- SLURM requeue on preemption (lib/launch/requeue.rs) ---
    /// On SLURM's warning signal (--requeue_signal), give the ranks --grace_period to save and exit, then requeue the job (`scontrol requeue`, once per job) and exit 123 (default: ACCEL_LAUNCH_SLURM_REQUEUE).
    #[arg(
        long = "slurm_requeue",
        visible_alias = "slurm-requeue",
        help_heading = "accel"
    )]
    pub slurm_requeue: bool,
    /// The warning signal for --slurm_requeue, as in `sbatch --signal=USR1@300` (default: ACCEL_LAUNCH_REQUEUE_SIGNAL, else USR1).
    #[arg(
        long = "requeue_signal",
        visible_alias = "requeue-signal",
        value_name = "SIGNAL",
        help_heading = "accel"
    )]
    pub requeue_signal: Option<String>,
    // --- end hang detection ---
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
    /// TPU pod VMs (not supported).
    #[arg(long = "vm", value_name = "VM", help_heading = "TPU")]
    pub vm: Vec<String>,
    /// TPU pod environment (not supported).
    #[arg(long = "env", value_name = "KEY=VALUE", help_heading = "TPU")]
    pub env: Vec<String>,

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

    /// Every flag that sets a config key ([`CONFIG_FLAGS`]).
    #[command(flatten)]
    pub config: ConfigFlags,

    /// torchrun's flags that accelerate lacks ([`super::torchrun`]).
    #[command(flatten)]
    pub torchrun: TorchrunFlags,

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
        self.config.values()
    }
}

/// One config-backed flag. Its long name is the `accelerate launch` argument of `key`
/// ([`schema::launch_arg`]), its alias that name with dashes, and the value it gives `key` is the
/// flag's value, or `true` for a switch.
#[derive(Debug)]
pub struct ConfigFlag {
    /// Dotted config key (`num_processes`, `fsdp_config.fsdp_version`).
    pub key: &'static str,
    /// The value name shown in help; `None`: a switch.
    pub value_name: Option<&'static str>,
    pub help: &'static str,
}

/// Flags shown under one help heading (`None`: the plain options).
#[derive(Debug)]
pub struct FlagGroup {
    pub heading: Option<&'static str>,
    pub flags: &'static [ConfigFlag],
}

const fn value(key: &'static str, help: &'static str) -> ConfigFlag {
    named(key, "VALUE", help)
}
const fn named(key: &'static str, value_name: &'static str, help: &'static str) -> ConfigFlag {
    ConfigFlag {
        key,
        value_name: Some(value_name),
        help,
    }
}
const fn switch(key: &'static str, help: &'static str) -> ConfigFlag {
    ConfigFlag {
        key,
        value_name: None,
        help,
    }
}

/// Every `accelerate launch` flag that sets a config key, in help order. A new config-backed flag is
/// one line here.
#[rustfmt::skip]
pub static CONFIG_FLAGS: &[FlagGroup] = &[
    FlagGroup {
        heading: None,
        flags: &[
            switch("debug", "Debug mode (ACCELERATE_DEBUG_MODE=true)"),
        ],
    },
    FlagGroup {
        heading: Some("Resource Selection Arguments"),
        flags: &[
            value("mixed_precision", "Mixed precision: no, fp16, bf16 or fp8 (config: mixed_precision); fp8 needs Transformer Engine, MS-AMP or torchao >= 0.6.1 in the ranks' Python, checked before any rank starts as accelerate launch checks it (exit 125)"),
            value("num_processes", "Total number of processes over all machines (config: num_processes)"),
            value("num_machines", "Number of machines (config: num_machines)"),
            switch("enable_cpu_affinity", "Pin each rank to CPU cores near its GPU (ACCELERATE_CPU_AFFINITY=1)"),
            value("dynamo_config.dynamo_backend", "torch.compile backend (no, eager, aot_eager, inductor, …)"),
            value("dynamo_config.dynamo_mode", "torch.compile mode: default, reduce-overhead, max-autotune"),
            switch("dynamo_config.dynamo_use_fullgraph", "torch.compile with fullgraph=True"),
            switch("dynamo_config.dynamo_use_dynamic", "torch.compile with dynamic shapes"),
            switch("dynamo_config.dynamo_use_regional_compilation", "Compile repeated blocks once (regional compilation)"),
        ],
    },
    FlagGroup {
        heading: Some("Distributed GPUs"),
        flags: &[
            value("gpu_ids", "GPUs to use on each machine, comma-separated, or `all` (exported as CUDA_VISIBLE_DEVICES)"),
            switch("same_network", "All machines are on the same network (accepted; the rendezvous is the same either way)"),
            value("machine_rank", "Rank of this machine, 0 .. num_machines-1 (SLURM: SLURM_NODEID)"),
            value("main_process_ip", "Address of the machine of rank 0 (SLURM: the first node of the job)"),
            value("main_process_port", "Rendezvous port on the main machine; 0 or unset on one node: a free port (SLURM: derived from SLURM_JOB_ID)"),
            value("rdzv_backend", "Rendezvous backend: static (default; accel-launch itself) or c10d/etcd (elastic; runs torchrun)"),
        ],
    },
    FlagGroup {
        heading: Some("TPU"),
        flags: &[
            switch("tpu_use_sudo", "TPU pod: use sudo (config: tpu_use_sudo)"),
            named("main_training_function", "NAME", "TPU: the function to run (config: main_training_function)"),
            switch("downcast_bf16", "TPU: XLA_DOWNCAST_BF16 (config: downcast_bf16)"),
        ],
    },
    FlagGroup {
        heading: Some("MPI Arguments"),
        flags: &[
            named("mpirun_config.mpirun_hostfile", "PATH", "Hostfile for multi-node CPU runs through mpirun (config: mpirun_config.mpirun_hostfile)"),
        ],
    },
    FlagGroup {
        heading: Some("DeepSpeed Arguments"),
        flags: &[
            named("deepspeed_config.deepspeed_config_file", "PATH", "DeepSpeed JSON config file"),
            value("deepspeed_config.zero_stage", "ZeRO stage (0-3)"),
            value("deepspeed_config.offload_optimizer_device", "Optimizer offload: none, cpu or nvme"),
            value("deepspeed_config.offload_param_device", "Parameter offload: none, cpu or nvme"),
            named("deepspeed_config.offload_optimizer_nvme_path", "DIR", "NVMe path for optimizer offload (exported, unlike accelerate 1.15)"),
            named("deepspeed_config.offload_param_nvme_path", "DIR", "NVMe path for parameter offload (exported, unlike accelerate 1.15)"),
            value("deepspeed_config.gradient_accumulation_steps", "Gradient accumulation steps"),
            value("deepspeed_config.gradient_clipping", "Gradient clipping value"),
            value("deepspeed_config.zero3_init_flag", "ZeRO-3 zero.Init for large models (true/false)"),
            value("deepspeed_config.zero3_save_16bit_model", "Save 16-bit model weights with ZeRO-3 (true/false)"),
            named("deepspeed_config.deepspeed_hostfile", "PATH", "Hostfile for multi-node DeepSpeed (runs the deepspeed launcher)"),
            value("deepspeed_config.deepspeed_exclusion_filter", "deepspeed --exclude filter"),
            value("deepspeed_config.deepspeed_inclusion_filter", "deepspeed --include filter"),
            value("deepspeed_config.deepspeed_multinode_launcher", "deepspeed multi-node launcher: pdsh (default), standard, openmpi, mvapich, mpich, nossh, slurm"),
            value("deepspeed_config.deepspeed_moe_layer_cls_names", "Comma-separated MoE layer class names"),
        ],
    },
    FlagGroup {
        heading: Some("FSDP Arguments"),
        flags: &[
            value("fsdp_config.fsdp_version", "FSDP version, 1 or 2"),
            value("fsdp_config.fsdp_offload_params", "Offload parameters to CPU (true/false)"),
            value("fsdp_config.fsdp_min_num_params", "Minimum parameters for size-based auto wrap"),
            value("fsdp_config.fsdp_sharding_strategy", "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2"),
            value("fsdp_config.fsdp_reshard_after_forward", "FSDP2: reshard after forward (true/false); FSDP1: a sharding strategy"),
            value("fsdp_config.fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP"),
            value("fsdp_config.fsdp_transformer_layer_cls_to_wrap", "Layer class names to wrap (exported as FSDP_TRANSFORMER_CLS_TO_WRAP)"),
            value("fsdp_config.fsdp_backward_prefetch", "BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH"),
            value("fsdp_config.fsdp_state_dict_type", "FULL_STATE_DICT, LOCAL_STATE_DICT or SHARDED_STATE_DICT"),
            value("fsdp_config.fsdp_forward_prefetch", "Explicit forward prefetch (true/false)"),
            value("fsdp_config.fsdp_use_orig_params", "use_orig_params (true/false)"),
            value("fsdp_config.fsdp_cpu_ram_efficient_loading", "Load pretrained weights on rank 0 only (true/false)"),
            value("fsdp_config.fsdp_sync_module_states", "Broadcast module states from rank 0 (true/false)"),
            value("fsdp_config.fsdp_activation_checkpointing", "Activation checkpointing (true/false)"),
            value("fsdp_config.fsdp_activation_checkpointing_offload", "Offload checkpointed activations to CPU (true/false)"),
        ],
    },
    FlagGroup {
        heading: Some("Megatron-LM Arguments"),
        flags: &[
            value("megatron_lm_config.megatron_lm_tp_degree", "Tensor parallelism degree"),
            value("megatron_lm_config.megatron_lm_pp_degree", "Pipeline parallelism degree"),
            value("megatron_lm_config.megatron_lm_num_micro_batches", "Micro-batches with pipeline parallelism"),
            value("megatron_lm_config.megatron_lm_sequence_parallelism", "Sequence parallelism (true/false)"),
            value("megatron_lm_config.megatron_lm_recompute_activations", "Selective activation recomputation (true/false)"),
            value("megatron_lm_config.megatron_lm_use_distributed_optimizer", "Distributed optimizer (true/false)"),
            value("megatron_lm_config.megatron_lm_gradient_clipping", "Gradient clipping by global L2 norm"),
            value("megatron_lm_config.megatron_lm_recompute_granularity", "full or selective"),
            value("megatron_lm_config.megatron_lm_recompute_method", "uniform or block"),
            value("megatron_lm_config.megatron_lm_recompute_num_layers", "Layers to recompute"),
            value("megatron_lm_config.megatron_lm_decoder_last_pipeline_num_layers", "Decoder layers in the last pipeline stage"),
            value("megatron_lm_config.megatron_lm_expert_model_parallel_size", "Expert model parallel size"),
            value("megatron_lm_config.megatron_lm_context_parallel_size", "Context parallel size"),
            value("megatron_lm_config.megatron_lm_expert_tensor_parallel_size", "Expert tensor parallel size"),
            value("megatron_lm_config.megatron_lm_attention_dropout", "Attention dropout"),
            value("megatron_lm_config.megatron_lm_hidden_dropout", "Hidden dropout"),
            value("megatron_lm_config.megatron_lm_attention_backend", "Attention backend"),
            value("megatron_lm_config.megatron_lm_attention_softmax_in_fp32", "Softmax in fp32 (true/false)"),
            value("megatron_lm_config.megatron_lm_calculate_per_token_loss", "Per-token loss (true/false)"),
            value("megatron_lm_config.megatron_lm_use_rotary_position_embeddings", "Rotary position embeddings (true/false)"),
            value("megatron_lm_config.megatron_lm_use_custom_fsdp", "Megatron custom FSDP (true/false; `False` is false, unlike accelerate)"),
            value("megatron_lm_config.megatron_lm_no_load_optim", "Do not load optimizer state (true/false)"),
            value("megatron_lm_config.megatron_lm_no_save_optim", "Do not save optimizer state (true/false)"),
            value("megatron_lm_config.megatron_lm_eod_mask_loss", "Mask loss at end-of-document tokens (true/false)"),
            value("megatron_lm_config.megatron_lm_overlap_cpu_optimizer_d2h_h2d", "Overlap CPU optimizer copies (true/false)"),
            value("megatron_lm_config.megatron_lm_optimizer_cpu_offload", "Offload the optimizer to CPU (true/false)"),
            value("megatron_lm_config.megatron_lm_use_precision_aware_optimizer", "Precision-aware optimizer (true/false)"),
        ],
    },
    FlagGroup {
        heading: Some("FP8 Arguments"),
        flags: &[
            value("fp8_config.backend", "FP8 backend: ao, te or msamp (exported upper-case, which the child needs)"),
            switch("fp8_config.use_autocast_during_eval", "TE: autocast during evaluation"),
            value("fp8_config.margin", "TE: scaling margin"),
            value("fp8_config.interval", "TE: scaling factor update interval"),
            value("fp8_config.fp8_format", "TE: HYBRID, E4M3 or E5M2"),
            value("fp8_config.amax_history_len", "TE: amax history length"),
            value("fp8_config.amax_compute_algo", "TE: max or most_recent"),
            value("fp8_config.override_linear_precision", "TE: fprop,dgrad,wgrad in higher precision, e.g. false,false,true"),
            value("fp8_config.opt_level", "MS-AMP: O1 or O2"),
            value("fp8_config.enable_fsdp_float8_all_gather", "AO: float8 all-gather under FSDP2 (true/false)"),
            value("fp8_config.pad_inner_dim", "AO: pad the inner dimension (true/false)"),
        ],
    },
    FlagGroup {
        heading: Some("ParallelismConfig Arguments"),
        flags: &[
            value("parallelism_config.parallelism_config_dp_replicate_size", "Data-parallel replicate size"),
            value("parallelism_config.parallelism_config_dp_shard_size", "Data-parallel shard size"),
            value("parallelism_config.parallelism_config_tp_size", "Tensor-parallel size"),
            value("parallelism_config.parallelism_config_cp_size", "Context-parallel size"),
            value("parallelism_config.parallelism_config_cp_backend", "Context-parallel backend (torch)"),
            value("parallelism_config.parallelism_config_cp_comm_strategy", "allgather or alltoall"),
            value("parallelism_config.parallelism_config_sp_size", "Sequence-parallel size"),
            value("parallelism_config.parallelism_config_sp_backend", "Sequence-parallel backend (deepspeed)"),
            value("parallelism_config.parallelism_config_sp_seq_length", "Sequence length"),
            value("parallelism_config.parallelism_config_sp_seq_length_is_variable", "Variable sequence length (true/false)"),
            value("parallelism_config.parallelism_config_sp_attn_implementation", "Attention implementation (sdpa, …)"),
        ],
    },
];

/// A flag of [`CONFIG_FLAGS`] with its heading and derived names.
struct Named {
    flag: &'static ConfigFlag,
    heading: Option<&'static str>,
    long: String,
    alias: String,
}

/// Each flag of [`CONFIG_FLAGS`] with its long name and dashed alias.
fn config_flags() -> &'static [Named] {
    static FLAGS: OnceLock<Vec<Named>> = OnceLock::new();
    FLAGS.get_or_init(|| {
        CONFIG_FLAGS
            .iter()
            .flat_map(|g| g.flags.iter().map(move |f| (g.heading, f)))
            .map(|(heading, f)| {
                // The table is checked against the schema by a unit test; an unknown key here is a
                // programming error caught there, so the key itself stands in as the name.
                let long = schema::launch_arg(f.key).unwrap_or_else(|| f.key.to_string());
                let alias = long.replace('_', "-");
                Named {
                    flag: f,
                    heading,
                    long,
                    alias,
                }
            })
            .collect()
    })
}

/// The values of a config-backed flag that shell completion offers: the key's choices, from the
/// schema; `None` for a free value.
fn completion(flag: &ConfigFlag) -> Option<Vec<&'static str>> {
    const NUMBERS: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    let bools = ["true", "false"];
    match schema::lookup(flag.key)?.kind {
        schema::Kind::Choice { values, .. } => Some(values.to_vec()),
        schema::Kind::IntChoice(values) => Some(
            values
                .iter()
                .filter_map(|v| {
                    usize::try_from(*v)
                        .ok()
                        .and_then(|i| NUMBERS.get(i).copied())
                })
                .collect(),
        ),
        schema::Kind::Bool => Some(bools.to_vec()),
        schema::Kind::BoolOrChoice(values) => Some(bools.iter().chain(values).copied().collect()),
        _ => None,
    }
}

/// The config-backed flags given on the command line, built from [`CONFIG_FLAGS`].
#[derive(Debug, Clone, Default)]
pub struct ConfigFlags {
    given: Vec<(&'static ConfigFlag, &'static str, String)>,
}

impl ConfigFlags {
    /// The flags given, as config values (key, value, flag), in table order.
    pub fn values(&self) -> Vec<crate::config::CliValue> {
        self.given
            .iter()
            .map(|(f, long, value)| crate::config::CliValue {
                key: f.key.into(),
                value: serde_json::Value::from(value.as_str()),
                flag: format!("--{long}"),
            })
            .collect()
    }
}

/// The ids of the options the command line itself gave (clap's value source), not a default: a
/// default that torchrun takes from `PET_<OPTION>` never overrides a flag given, as in torchrun.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Given(pub Vec<String>);

impl Given {
    pub fn contains(&self, id: &str) -> bool {
        self.0.iter().any(|g| g == id)
    }
}

impl clap::FromArgMatches for Given {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut given = Given::default();
        given.update_from_arg_matches(matches)?;
        Ok(given)
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        for id in matches.ids() {
            if matches.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine) {
                self.0.push(id.as_str().to_string());
            }
        }
        Ok(())
    }
}

impl clap::Args for Given {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        cmd
    }
}

impl clap::FromArgMatches for ConfigFlags {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = ConfigFlags::default();
        flags.update_from_arg_matches(matches)?;
        Ok(flags)
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        for Named { flag, long, .. } in config_flags() {
            let value = match flag.value_name {
                None => matches.get_flag(long).then(|| "true".to_string()),
                Some(_) => matches.get_one::<String>(long).cloned(),
            };
            if let Some(value) = value {
                self.given.retain(|(f, _, _)| f.key != flag.key);
                self.given.push((flag, long.as_str(), value));
            }
        }
        Ok(())
    }
}

impl clap::Args for ConfigFlags {
    fn augment_args(mut cmd: clap::Command) -> clap::Command {
        for Named {
            flag,
            heading,
            long,
            alias,
        } in config_flags()
        {
            let mut arg = clap::Arg::new(long.as_str())
                .long(long.as_str())
                .help(flag.help)
                .help_heading(*heading);
            if alias != long {
                arg = arg.visible_alias(alias.as_str());
            }
            cmd = cmd.arg(match flag.value_name {
                None => arg.action(clap::ArgAction::SetTrue),
                Some(name) => {
                    let arg = arg.action(clap::ArgAction::Set).value_name(name);
                    // What shell completion offers: the key's values, a path, or nothing (not the
                    // file names it offers an option that says nothing).
                    match completion(flag) {
                        Some(values) => arg
                            .value_parser(super::Candidates(values))
                            .hide_possible_values(true),
                        None if name == "PATH" => arg
                            .value_parser(clap::value_parser!(String))
                            .value_hint(clap::ValueHint::FilePath),
                        None if name == "DIR" => arg
                            .value_parser(clap::value_parser!(String))
                            .value_hint(clap::ValueHint::DirPath),
                        None => arg
                            .value_parser(clap::value_parser!(String))
                            .value_hint(clap::ValueHint::Other),
                    }
                }
            });
        }
        cmd
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// The placeholders a `--rank_prefix` may hold (`launch::supervise::render_template` fills them).
pub const RANK_PREFIX_PLACEHOLDERS: &[&str] = &["rank", "local_rank", "node", "role"];

/// The placeholders a `--log_template` may hold (`launch::supervise::LogFiles` fills them).
pub const LOG_TEMPLATE_PLACEHOLDERS: &[&str] = &["rank", "local_rank", "node", "attempt", "stream"];

/// Every `{name}` in `s` is one of `known`: an unknown one would be written out literally.
fn check_placeholders(s: &str, known: &[&str]) -> Result<(), String> {
    let mut rest = s;
    while let Some(open) = rest.find('{') {
        rest = &rest[open + 1..];
        let Some(close) = rest.find('}') else { break };
        let name = &rest[..close];
        let is_placeholder =
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if is_placeholder && !known.contains(&name) {
            let known: Vec<String> = known.iter().map(|p| format!("{{{p}}}")).collect();
            return Err(format!(
                "unknown placeholder `{{{name}}}`; the known ones are {}",
                known.join(", ")
            ));
        }
        if is_placeholder {
            rest = &rest[close + 1..];
        }
    }
    Ok(())
}

/// `--rank_prefix`: every `{name}` must be a placeholder the prefix is rendered with; an unknown
/// one would be printed literally on every line.
fn parse_rank_prefix(s: &str) -> Result<String, String> {
    check_placeholders(s, RANK_PREFIX_PLACEHOLDERS)?;
    Ok(s.to_string())
}

/// `--log_template`: known placeholders only, and a relative path without `..`, so that every log
/// file lands inside `--log_dir` (the placeholders render to numbers and `stdout`/`stderr`, which
/// cannot leave it).
fn parse_log_template(s: &str) -> Result<String, String> {
    check_placeholders(s, LOG_TEMPLATE_PLACEHOLDERS)?;
    let path = std::path::Path::new(s);
    if s.trim().is_empty() || s.ends_with('/') {
        return Err(
            "the template must name a file under --log_dir (e.g. {rank}/{stream}.log)".into(),
        );
    }
    if path.is_absolute() {
        return Err("an absolute path would leave --log_dir: give a path relative to it".into());
    }
    if path
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err("`..` would leave --log_dir: every log file stays inside it".into());
    }
    Ok(s.to_string())
}

/// `--local_ranks_filter`: the local ranks that print to the console, and the text as given (a run
/// handed to torchrun passes it on as written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalRanks {
    pub ranks: Vec<u32>,
    pub text: String,
}

/// `--local_ranks_filter`: comma-separated local ranks, at least one (an empty filter would hide
/// every rank).
fn parse_local_ranks(s: &str) -> Result<LocalRanks, String> {
    let items: Vec<&str> = s
        .split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .collect();
    if items.is_empty() {
        return Err("no local rank given (e.g. 0 or 0,1)".into());
    }
    let ranks = items
        .iter()
        .map(|r| {
            r.parse::<u32>()
                .map_err(|_| format!("`{r}` is not a local rank (e.g. 0 or 0,1)"))
        })
        .collect::<Result<_, _>>()?;
    Ok(LocalRanks {
        ranks,
        text: s.to_string(),
    })
}

/// `--tee`: what torchrun's `Std.from_str` (torch/distributed/elastic/multiprocessing/api.py)
/// takes, a stream selector 0-3 (none, stdout, stderr, both) or a per-local-rank map `0:1,1:2`.
fn parse_percent(s: &str) -> Result<f64, String> {
    crate::launch::straggler::parse_threshold(s)
}

fn parse_window(s: &str) -> Result<Duration, String> {
    crate::launch::straggler::parse_window(s)
}

fn parse_tee(s: &str) -> Result<String, String> {
    super::torchrun::parse_std(s)
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
            ("srun accel-launch --slurm_requeue --grace_period 120 train.py --checkpoint_dir ckpt", "In an sbatch script with --signal=USR1@300 and --requeue: on SLURM's warning the ranks save, and the job is requeued and resumes."),
        ],
        codes: crate::exit_status::Codes::Launcher,
        extra_sections: &[
            ("DEFAULTS", &[
                "Without a config file, accel-launch uses every visible GPU (one rank per GPU). On a machine without GPUs it starts two CPU (gloo) ranks, or one on a single-core machine; --num_processes overrides either. --cpu ignores the default config file, as accelerate does (an explicit --config_file is still read).",
                "Ports: on one node, without --main_process_port (or with 0), a free port is picked; should another process take it before rank 0 binds it, the run is retried on a new port. A port that is given and already in use is an error. On many nodes the port is --main_process_port, else one derived from SLURM_JOB_ID (15000 + 2 × (id mod 8500): the control plane takes the next one, so jobs sharing a node never collide), else 29500.",
                "Stopping: SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to every rank's process group and stop the run (accel-launch says \"stopping N ranks (Ctrl-C again to kill)\"); SIGUSR1 and SIGUSR2 are forwarded only (e.g. SLURM's warning before the time limit; with --slurm_requeue see SLURM REQUEUE); --signals_to_handle changes the set (see TORCHRUN COMMAND LINE). Ranks get --grace_period (or --shutdown_timeout) seconds (default 30) to exit before SIGKILL; a second stop signal (Ctrl-C again) kills them at once. When a rank fails, the others get SIGTERM the same way. Ctrl-Z (SIGTSTP) stops the ranks with accel-launch, and fg/bg (SIGCONT) resumes them. Nothing a run started outlives it: accel-launch is a child subreaper, so even daemons a rank double-forks are killed when the run ends, and ranks, their children and those daemons are killed if accel-launch itself is SIGKILLed.",
                "Output: the console gets whole lines of each rank, never cut by another rank's; a line left unfinished (a prompt, a progress bar redrawn with \\r) is shown after 0.2 s or every 64 KiB. --log_dir files are named by --log_template, which must give every rank, stream (and attempt, with --max_restarts) a file of its own (else exit 2); a run never overwrites the files of an earlier one (exit 4: use a new --log_dir per run). The template is a path relative to --log_dir without `..` and holds only the placeholders above (else exit 2), so every log file stays inside --log_dir. On many nodes, which often share --log_dir over a network file system, the default layout goes under node_N/ and a template of one's own must contain {node}.",
                "Terminal: when accel-launch's stdout (or stderr) is a terminal, each rank's stdout (or stderr) that reaches the console is a pty of its own rather than a pipe, so a rank sees a terminal as under torchrun and accelerate launch, whose ranks write to the terminal itself: isatty() is true, and the window size (shutil.get_terminal_size(), tqdm's bar width) is the terminal's. When the terminal is resized, every rank's pty takes the new size and the rank's process group gets SIGWINCH (torchrun's ranks, in a session of their own, get none). The pty is not the rank's controlling terminal: each rank runs in a session of its own, as torchrun's workers do, so it has no controlling terminal and opening /dev/tty fails (ENXIO: getpass and prompts cannot read the terminal; give the script its input another way), and the pty passes the bytes unchanged (no \\n to \\r\\n): the console lines stay whole and prefixed as above, and --log_dir files get what the rank wrote. A stream accel-launch writes to a pipe or a file, and a rank --local_ranks_filter leaves off the console, get pipes as before.",
            ]),
            ("HANGS", &[
                "--hang_timeout SECONDS (or ACCEL_LAUNCH_HANG_TIMEOUT) watches the ranks from outside, with no code in the training script, and declares the run hung when no rank has made progress for that long. A rank is still while nothing observable about it changes, whatever CPU it uses: a rank spinning in one C call (a GPU sync waiting on a hung NCCL kernel, a regex, a busy-polling collective) or in a Python loop is still. What counts as progress: (1) its Python execution: from the start of the run, each rank's stacks, with the frames' local variables, are taken with `py-spy dump` every timeout/3 seconds (2 to 30 s), in the background, all ranks at once, unless the rank's I/O (2, 3) moved since its stacks were last due (it is progressing; a rank in collectives over TCP costs no dump); progress is a change of its set of Python threads, or of any frame (function, file, line) or local variable (name and value as py-spy shows it: a step counter, a batch, a tensor's address) of its main thread or of a thread running the user's code (threads made only of library frames, such as a DataLoader's pin-memory thread, count by their presence only). A rank whose stacks came out the same twice, or whose dump failed, is sampled again every timeout/10 seconds (at least 1 s) until they change. A rank that spends 95% of every step in one call is moving: its step counter changes. (2) Its I/O, with its child processes: rchar, wchar, read_bytes and write_bytes of /proc/PID/io (data read or written, pages dirtied for storage), the TCP bytes received and acknowledged on its sockets (tcp_info through sock_diag, for the sockets in /proc/PID/fd: data streamed with recv(), a send to a slow peer), and, while one of its threads is in fsync, fdatasync or sync_file_range on a file of a block device, that device's written sectors (/sys/dev/block/M:m/stat). A single write into a pipe counts through the child that drains it. (3) A rank or a child process appearing or ending. (4) CPU time in a compute kernel: a rank whose stacks came out the same twice while it used at least 5% of a core (what a spinning hang shows, and also an in-place loop with no counter, such as `torch.mm(a, b, out=c)`) gets a native look once the run has been still for timeout/3, or for timeout minus 15 s when that is later: `py-spy record --native` for 2 s at 5 samples a second, the ranks side by side, at most 12 s each, and the verdict waits for it. The rank is computing when at least 3 samples were taken and more than half of them (the samples of its active threads) have, past the C runtime's helpers (memcpy in libc) and JIT code of no file (oneDNN's kernels), one of the next 3 native frames in a CPU compute kernel before any Python frame, GPU or collective runtime (libcuda, libcudart, NCCL, libtorch_cuda, c10d, gloo) or OpenMP barrier: MKL's compute domains (mkl_blas_, mkl_lapack_, mkl_dft_, mkl_vml_, mkl_spblas_, mkl_sparse_; not mkl_serv_, its thread and memory service), any gemm or gemv, oneDNN (dnnl::, dnnl_, mkldnn, ideep::), ATen's CPU operators and vectors (at::native::, at::vec::, Sleef_), and OpenBLAS's library (but its thread server). A rank found computing restarts the timer; the next look comes only after a new stillness of that length, so a rank that leaves the kernel and spins elsewhere (a regex in sre_ucs1_match, a GPU sync spinning in libcuda, a Python loop) is declared within the timeout and one look. The look pauses the rank: py-spy cannot take native stacks without stopping it (--nonblocking refuses --native), for each sample and, for the first, while it reads its libraries' unwind tables (about a second with libtorch_cpu.so; about 0.7 s of py-spy's CPU); this happens only for a rank that shows one stack while busy, at most once per stillness of timeout/3 (or timeout minus 15 s). CPU time elsewhere counts (at 5% of a core) only for a rank whose stacks cannot be read: py-spy missing (a warning says so), not a Python process, not permitted, or its last two dumps failed (one failure now and then, as on a loaded machine, changes nothing). Cost: at most one py-spy dump (about 20 ms of CPU) per rank per timeout/3, and a few /proc reads per rank and one sock_diag query every timeout/10 (0.2 to 2 s): with 8 ranks and --hang_timeout 60, measured on 2 cores (scripts/bench/hang), the watch adds 0.2% of a core when the ranks' collectives move TCP bytes and 0.5% when every rank's stacks are sampled. Limits: one C call longer than the timeout that neither moves its locals nor does I/O the above sees, outside a CPU compute kernel (a flush to NFS or Lustre, which have no block device; a GPU kernel that really takes that long) is judged still; a thread whose locals keep changing (a polling loop of the user's with a counter) keeps its rank moving; a module-level loop has no locals to compare, only its line. A rank waiting in a collective does not move, so one rank computing while the others wait keeps the run alive; only a run in which every rank is still is declared hung.",
                "On a hang, before anything is stopped, every rank's Python stacks are taken with py-spy (all at once, at most 10 s each, while accel-launch goes on reaping ranks and handling signals), ranks with identical stacks are grouped, and one verdict line comes first, the ranks that are elsewhere than the others first, e.g. `accel-launch: hang: rank 1 (node 0) is in load_batch (train.py:42); ranks 0,2,3 (node 0) wait in all_reduce (train.py:57)` (the file:line is the innermost line of the user's code), then the grouped stacks. With --log_dir the report and each rank's full stacks are written to LOG_DIR/hang/. Then the run is stopped as on a failure (SIGTERM to every rank's process group, --grace_period, SIGKILL, children included) and accel-launch exits 124. A hung run is not restarted by --max_restarts.",
                "Flight Recorder: with --hang_timeout the ranks get TORCH_FR_BUFFER_SIZE=2000 unless it or TORCH_NCCL_TRACE_BUFFER_SIZE is set (torch reads the first before the second). With --log_dir, NCCL ranks also get TORCH_NCCL_DUMP_ON_TIMEOUT=1, TORCH_FR_DUMP_TEMP_FILE=LOG_DIR/hang/flight_recorder_ and TORCH_NCCL_DEBUG_INFO_PIPE_FILE=LOG_DIR/hang/fr_pipe_; on a hang the launcher writes to each rank's pipe and waits up to 5 s for LOG_DIR/hang/flight_recorder_RANK. Every dump found there (NCCL's, on the pipe or on its own watchdog's timeout; any rank's that wrote one itself with torch._C._distributed_c10d._dump_fr_trace()) is read with a safe unpickler (nothing in it is executed) and summarized after the verdict, per process group, e.g. `accel-launch: flight recorder: process group 0 (default_pg): collective #2 nccl:all_reduce [[4]] Float at train.py:57 was entered by ranks 0,2; never by rank 1 (its last: #1 nccl:all_reduce, completed)`, or `collectives do not match at #N: …`; the dumps stay for `python -m torch.distributed.flight_recorder.fr_trace LOG_DIR/hang -p flight_recorder_`. torch 2.13 records gloo collectives too, but offers no outside trigger and no dump on timeout for gloo: gloo runs get the stacks only, unless the ranks dump themselves. On many nodes each node reads its own ranks' dumps.",
                "py-spy is looked for on PATH, then next to the ranks' interpreter (scripts/setup installs it into .venv). It reads the ranks' memory (process_vm_readv, without pausing them, except for the native look of (4) above), which needs ptrace access to the ranks: as root; or as the same user where kernel.yama.ptrace_scope is 0, or 1 (each rank names the launcher its ptracer with PR_SET_PTRACER, which admits the launcher's py-spy; accel-launch --stacks from another shell needs 0); scope 2 needs CAP_SYS_PTRACE, 3 forbids it. In containers, CAP_SYS_PTRACE (docker run --cap-add SYS_PTRACE). Without py-spy a warning is printed at start and the verdict says what /proc knows (each rank's state: sleeping, stopped, ...).",
                "On demand: `accel-launch --stacks PID` prints the same grouped report for the running accel-launch PID (the PID of the launcher, not of a rank) on stdout and leaves the run alone; no signal is involved (SIGUSR1 and SIGUSR2 are forwarded to the ranks). --stacks_on_failure prints the surviving ranks' grouped stacks when a rank fails, before they are stopped (and writes them to LOG_DIR/failure/).",
                "Many nodes: a node's ranks may wait in a collective for a rank of another node that is busy, so no node's launcher declares a hang from its own ranks alone. Each watches its own ranks as above and, over the control plane (see MULTI-NODE CONTROL PLANE), tells node 0 when they have been still for half the timeout (accel-launch says \"no rank of node N made progress for Ss\") and again when they move. Node 0 declares the hang only when every node's ranks have been still for the whole --hang_timeout (a node whose ranks all ended counts as still), so a rank of node 1 computing while every other rank waits keeps the run alive. Every node must give the same --hang_timeout: a node with another one (or none) is refused at the join. On the hang, node 0 asks every node for its ranks' stacks; each node takes its own with py-spy, all ranks at once and at most 4 s per rank, writes them to LOG_DIR/hang/node_N/ and sends them to node 0, which groups the world's stacks into one verdict, e.g. `accel-launch: hang: rank 3 (node 1) is in load_batch (train.py:42); ranks 0,1,2 (nodes 0,1) wait in all_reduce (train.py:57)`, and sends it to every node. Each node prints the verdict and the grouped stacks, writes them to LOG_DIR/hang/node_N/report.txt, stops its ranks (SIGTERM, --grace_period, SIGKILL) and exits 124; there is no restart. A node that sends no stacks within 10 s is named in the verdict as silent (`ranks 2,3 (node 1): unknown, node 1 (host) is silent`), as is a node lost once every node was still; a node that sent its stacks and hears no verdict within 20 s prints its own ranks' report, stops them and exits 124. With --stacks_on_failure, a rank's failure on any node makes every node print and write its own surviving ranks' stacks (LOG_DIR/failure/node_N/) before stopping them; each node stops its ranks 2 s after its dump began, so that no node's stop disturbs the ranks another node is dumping. `accel-launch --stacks PID` stays local: it reports the ranks of the launcher PID on this host only; run it on each node for the others.",
            ]),
            ("STRAGGLERS", &[
                "--straggler_threshold PCT (or ACCEL_LAUNCH_STRAGGLER_THRESHOLD; unset or 0: off) names the rank that slows a synchronous run while it goes on, with no code in the training script: in synchronous training every rank waits in the collectives for the slowest one, so the straggler is the rank that waits least. Over each --straggler_window SECONDS (default 60, at least 5) every rank's main thread is sampled with py-spy's `record` (all ranks of a node over the same seconds, without pausing them, keeping the samples of a thread that waits off the CPU), and each rank's share of samples waiting in a torch.distributed collective (a frame of torch/distributed/distributed_c10d.py: all_reduce, barrier, broadcast, …) is compared with the median of the other ranks' shares. A rank whose share is more than PCT percentage points below that median for a whole window is named once on stderr, e.g. `accel-launch: straggler: rank 3 (node 1, host n2) waits in collectives 2% of the time where the median rank waits 48%: about 1.9× slower per step; where it was: train.py:42 in forward`, and once more when it no longer lags: when its share is back within PCT/2 points of the median (`... recovered: ...`; the half keeps a rank slowed by about PCT from being named and recovered by turns); a node all of whose ranks lag is named too (on two or more nodes). The slowdown: a rank waiting a share w of each step computes (1 - w) of it, so the straggler's compute is (1 - s)/(1 - m) times the median rank's (s, m: their wait shares). \"where it was\" is the innermost frame of the user's code the straggler was seen at most often outside the collectives. The ranks are sampled half a window at a time, and every half window the last whole window is judged; the first judgement in which any rank waits holds the ranks' start and names nobody, so a straggler is named about one and a half windows after the ranks start (measured: see Cost). A run of one rank, or whose ranks' samples never wait in a collective for two windows, says once `straggler detection does not apply` and why. On many nodes each node samples its own ranks and sends each window to node 0 over the control plane (see MULTI-NODE CONTROL PLANE; at most 512 ranks a message, each place cut to 256 bytes, the node and host set by node 0 from the node's join, so a node speaks only for its own ranks); node 0 judges the world's windows once it holds one of every node and alone prints the lines. Every node must give --straggler_threshold: a node without it sends nothing, and node 0 then judges nothing (this is not checked at the join yet). --report_json gets `stragglers`: each rank named (rank, node, host, wait_share, median_wait_share, slower, where, judged_by: `stacks` or `arrival`), on node 0 of many. The detection never stops the run and never changes its exit status.",
                "NCCL ranks: their host threads wait at the same sync points (`.item()`, a CUDA synchronize) whatever their GPUs do, so the stacks do not show a slow GPU; their Flight Recorder does. With --straggler_threshold the ranks get TORCH_FR_BUFFER_SIZE=2000 (unless it or TORCH_NCCL_TRACE_BUFFER_SIZE is set), TORCH_NCCL_ENABLE_TIMING=1 (a start event for each collective, so that torch records its duration on the device), TORCH_FR_DUMP_TEMP_FILE=DIR/flight_recorder_ and TORCH_NCCL_DEBUG_INFO_PIPE_FILE=DIR/fr_pipe_, DIR being LOG_DIR/hang with --hang_timeout and --log_dir, else a directory of the run's own removed at its end (a variable the user set is left alone, and then the dumps may not be found). At the end of each half window the launcher writes to the pipe of every rank that made one (only NCCL ranks do: torch's default process group makes it) and reads its dump within 5 s (read with the same safe unpickler as the hang watch's, then removed). Every collective of an NCCL world ends for all its ranks at once and starts on each GPU when that rank reaches it, so the straggler's collectives are the shortest: each rank's share of the half window its collectives took on the device (the durations of those it enqueued in it) stands in for its share of stack samples, and where every rank of the world has one the window is judged by it, the line then saying `..., judged by arrival in collectives (Flight Recorder): about 1.8× slower per step` (`judged_by: arrival` in --report_json); the threshold and the slowdown are read as for the stacks. A window in which some rank has no share (gloo ranks, whose Flight Recorder has no durations and no outside trigger; a dump that did not come) is judged by the stacks. Each share is one number per rank, so on many nodes it goes to node 0 with the samples and no clock needs to agree across nodes.",
                "Cost: one py-spy process per rank per half window, sampling each rank about 16/N times a second (N: the node's ranks; 1 to 5 a second). Attached for the whole window, py-spy costs one start (about 13 ms of CPU) and a fraction of a millisecond per sample: measured on 2 cores with scripts/bench/straggler, 8 ranks at 2 samples a second. Limits: the ranks' stacks are Python's, so a collective that waits in C++ without a Python frame of torch.distributed (DDP's gradient all-reduce inside backward(), an async op's Work.wait()) is not seen as waiting; NCCL ranks are judged by the device durations their Flight Recorder holds (above), at the cost of a start event per collective (torch warns that the watchdog's query of it may hang in rare cases) and one dump per rank per half window (a few MiB for 2000 entries with their stacks); this is tested without a GPU on dumps torch's gloo ranks wrote and by scripts/gpu-check on two GPUs. Needs py-spy, as the hang watch does.",
            ]),
            ("MULTI-NODE CONTROL PLANE", &[
                "On more than one node (--num_machines 2 or more, static rendezvous, accel-launch starting the ranks), the launchers of the run form a control plane. Node 0's launcher hosts it at the rendezvous address (--main_process_ip) on the master port + 1 (the master port - 1 when that is 65535); --dry-run shows it. Every launcher, node 0's included, joins it with the run id, its node rank, its rank count and its host name; no other service is involved, so it works the same under SLURM, MPI-placed launchers, Kubernetes pods and nodes started by hand.",
                "Authentication (node 0 states the one in force in a note when it starts, unless --quiet): with ACCEL_LAUNCH_SECRET (or ACCEL_LAUNCH_SECRET_FILE, a file only its owner can read; at least 16 bytes: a variable set but empty is refused, exit 2) set to the same secret on every node, each launcher and node 0 prove to each other that they hold it (HMAC-SHA256 over both sides' fresh nonces, the run id and the node rank, checked in constant time), and every later line on the connection carries an HMAC under a key derived from that handshake, its direction and its sequence number. The seal gives integrity, not secrecy: lines cross the network in clear, a failed rank's stderr tail and a hang's stacks among them. The ranks do not inherit ACCEL_LAUNCH_SECRET or ACCEL_LAUNCH_SECRET_FILE (unless ACCEL_LAUNCH_SECRET_TO_RANKS=1), and no output of the tools prints the secret (accel-env shows it as <redacted>). Under SLURM without a secret, MUNGE (which a SLURM cluster with auth/munge runs on every node) does the same with no configuration: node 0's challenge carries a MUNGE credential and each launcher answers with its own; both are encoded by the local munged, restricted to the user's uid, and bind the side, the run id, the node rank, both nonces and a random share of the session key; the receiver decodes with its own munged and requires the same uid, a fresh credential (munged refuses forged, expired and replayed ones; default time-to-live 300 s) and exactly that payload; later lines are sealed as with the secret, under a key derived from both shares. libmunge (libmunge.so.2) is loaded at run time, and munged is reached at SLURM's own socket (AuthInfo=socket=PATH in SLURM_CONF, else /etc/slurm/slurm.conf; else libmunge's default). A secret takes precedence over MUNGE. Where MUNGE cannot be used (no libmunge, munged silent, SLURM's auth/slurm) node 0 says why and runs as without either; a launcher never follows node 0 to less than it can do itself (with a secret it requires node 0's proof of the secret, with MUNGE a MUNGE or secret handshake). A connection that fails the handshake is refused with the reason and noted on node 0 with the peer's address (the first 20; after them still the first refusal of each address and of each reason, 64 of each at most, so that a flood does not hide why a real node was refused; the rest are counted by reason in a note at the run's end), and a forged, replayed or altered line closes the connection. A node without the secret, or with another, exits 125. Without either the run works as with accelerate launch, node 0 notes once that its control plane is open to anyone who reaches it, and it listens only on the rendezvous address (when that is one of its own, and not a host name this host resolves to loopback). The run id is SLURM's job and step (slurm:JOB.STEP) under SLURM, else the control port; node 0's run id, --max_restarts and --hang_timeout are the reference every other node must match. A node speaks only for itself: a failure it reports is its own node's. A connection has 10 s to authenticate and join; at most 256 are in that handshake at once: a new connection is always taken, and when 256 are under way the oldest handshake of the address holding the most of them is closed to make room. A stranger holding every handshake open without a word (and reopening each as it closes) thus closes its own, not a node's: a node proves itself in one round trip, and its handshake, the newest of an address holding one, goes only when no address holds more and 256 connections have come after it (a cap per address alone fails against many addresses, a shorter timeout only shortens the wait, and a slot kept for addresses that proved the secret before does nothing for a first join). A refused connection's last words get 2 s before it is closed, 256 such connections at most (beyond them a refusal closes at once), and at most 64 connections are accepted per turn of node 0's event loop, so a flood of strangers' connections takes neither the descriptors node 0's launcher needs (its ranks' pipes, py-spy) nor the members' heartbeats; lines are capped at 16 KiB during the handshake and 1 MiB after.",

                "Join: every launcher waits at most --rdzv_timeout seconds (default 300) for every node to join, then exits 125 naming the node ranks still missing. A second launcher with a node rank already taken (both hosts are named), a late one (after the run started, unless it replaces a lost node: see Restarts), or one with another --num_machines, --max_restarts, --hang_timeout or accel-launch protocol version is refused with the reason. Once all have joined, each node is told the world size and its first rank, so nodes may run different numbers of ranks: each says its own count with --nproc_per_node (torchrun's per-node count), and --num_processes keeps accelerate's meaning, the world's total, which then need not be a multiple of --num_machines and may be left out (1 + 2 + 1 ranks: --nproc_per_node 1, 2 and 1 with --num_machines 3, and --num_processes 4 or none); node 0 checks a --num_processes given against the sum of every node's count and refuses the run on every node when they differ. RANK, WORLD_SIZE and GROUP_RANK are right on every node. A second node-0 launcher is refused: node 0 hosts the control plane and is never replaced. Signals while joining: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are acted on at once: the launcher leaves the join, says so, node 0 ends the join on every node that joined with that reason, and all exit 128+N; under --slurm_requeue SLURM's warning ends the join the same way and node 0 requeues the job (every node exits 123).",
                "Failure: the first failure of an attempt anywhere is sent to every node: a rank's exit (with its node, host, rank, exit code or signal and the last 50 lines of its stderr), a launcher stopped by a signal, a launcher's connection closing (it died, SIGKILL included), or a node silent for 5 heartbeats (network cut, host down). Each node stops its ranks as for a local failure (SIGTERM, --grace_period, SIGKILL) and prints the failure as its first line. The node whose rank failed exits with the rank's code; the others exit with the same code, or 122 when a node was lost. A launcher that cannot start its ranks (the program not found on that host, a --log_dir it may not write) sends its error, hints and exit status to node 0 before it goes: every node prints it (`node 1 (host) could not start its ranks: cannot run `x`: not found`, with the hint) and exits with that status (127 there), and there is no restart. --report_json PATH writes how the run ended (status, the failure, every local rank's end) on each node.",
                "Restarts: with --max_restarts N, once every node's ranks of the attempt are gone, all nodes start the next attempt together, and TORCHELASTIC_RESTART_COUNT is the same global count on every rank; the rendezvous port is reused, which is safe because no rank of the old attempt is left anywhere. A lost node (its launcher died, or its heartbeats stopped) ends the attempt like a failed rank; with a restart left, once every other node's ranks are gone, the surviving launchers wait at most --rdzv_timeout seconds (node 0's) for a new launcher of each lost node, and say so, naming every node lost by then. The replacement is started by hand, by the scheduler or by a supervisor (systemd, a restarted Kubernetes pod) with the same flags and --machine_rank, on any host; it joins the next attempt, in the lost node's place in the world, and the restart count stays global. Without a replacement in time every launcher exits 122, saying so. Refused, with the reason: a replacement when no restart is left; one for a node that is still in the run (both hosts are named: during a network cut the old launcher counts as in the run until its heartbeats have stopped for 5 s); one with another rank count; and any for node 0, which hosts the control plane and cannot be replaced, so that its loss ends the run on every node.",
                "Heartbeats: one line ({\"t\":\"hb\"}, 11 bytes, 76 with its seal) each way per node every second (node 0 sends none to a node while something else is queued for it); a side that hears nothing for 5 s counts the other as lost. The wire protocol is one JSON object per line over TCP.",
                "Every wait ends. A rank that does not exit within 10 s after SIGKILL (uninterruptible sleep in a hung driver or an NFS, Lustre or FUSE read; a process in a frozen cgroup-v1 freezer) is named with its pid, state and wchan (`rank 3 (pid 4242) is in uninterruptible sleep (D, wchan request_wait_answer) and did not exit after SIGKILL`, and the freezer when it is frozen), left behind, and the attempt ends anyway within --grace_period + 10 s (+ 2 s for the cleanup); its node exits 121, every other node names it too and exits with the run's status, and there is no restart. After a stop, node 0 gives each node its own --grace_period + 10 s + 15 s to report that its ranks are gone; a node that does not (its heartbeats alone do not keep it in the run) is counted as lost, named in the run's failure, and the run ends without a restart; a node with --grace_period inf has no such deadline. A node waits for node 0's decision after a stop at most the slowest node's deadline + 5 s, and for replacements what node 0 said + 5 s. A launcher whose supervision has not moved for 30 s stops heartbeating, so node 0 counts it as lost. While a node waits for the other nodes or for a replacement (no rank of its own runs), a stop signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) is acted on at once: the launcher leaves the run, every node is told and exits 128+N (SLURM's warning under --slurm_requeue: requeued, 123).",
                "Limits: the plane is a star, with a fan-out of N at node 0, served by one event loop on one thread (epoll through mio; MUNGE's calls to munged on two helper threads): one descriptor and a few KiB per node; accel-launch raises its open-file limit to the hard limit, which must exceed the node count. Each node has its own outgoing queue at node 0 (at most 4 MiB; a message to every node is serialized once and shared), so no node waits behind another: a node that leaves what node 0 sent it unread for 5 s (its queue, or the kernel's, not moving) is lost, it alone, and one that would need more than 4 MiB queued is lost at once. Partial lines of all nodes together are held up to 64 MiB (beyond it the nodes with long partial lines are read later); a hang verdict keeps at most 768 KiB of stacks per node (as each node sends them) and 64 MiB in all (beyond it a node's stacks are replaced by a note; its full dumps stay on its own disk). Heartbeats: each node beats to node 0 every second and node 0 to each node every 2 s (its fan-out is N); either side counts the other as lost after 5 s without a byte: at 10,000 nodes node 0 reads 10,000 and writes 5,000 messages/s. Measured on a 2-core machine, authenticated (ACCEL_LAUNCH_SECRET), with N simulated nodes in one process (scripts/bench/control --simulate; each a real TCP connection speaking the protocol): 1,000 nodes all started 0.07 s after the first connection, a failure's stop at all of them 0.017 s after it was reported, node 0 at 2.1% of a core in steady heartbeats, 7.4 MiB peak RSS; 4,000 nodes 0.29 s, 0.053 s, 4.5%, 12.2 MiB; 10,000 nodes 0.57-0.62 s, 0.11 s, 8.4-8.7%, 21 MiB; 19,900 nodes (the most a 20,000-descriptor limit holds) 1.14 s, 0.30 s, 15.9%, 36.6 MiB. Real launchers on the same machine (one per node, one rank each): 16 nodes joined in 0.20 s and were gone 0.12 s after a rank's failure, 256 in 5.1 s and 1.9 s (256 launcher processes starting on 2 cores); torchrun's 16 agents met in its static rendezvous in 18.8 s.",

            ]),
            ("SPARE NODES", &[
                "Spares: on two or more nodes, a launcher whose --machine_rank is at or beyond --num_machines (`--num_machines 2 --machine_rank 2`) is a spare. It joins node 0's control plane as every node does (the same flags, proven by the same secret or MUNGE; refused with another --max_restarts, --hang_timeout or version), heartbeats, runs no ranks and waits without the --rdzv_timeout deadline: only the run's end, or node 0 silent for 5 s, ends its wait. It says `node 2 is a spare (the world has 2 nodes)`; node 0 notes each spare as it joins (`spare node 2 (host) joined: ...`) and, when the world starts with spares waiting, names them (`the world starts on 2 nodes (4 ranks) with 1 spare(s) waiting: node 2 (host)`). Each spare needs a node rank of its own (a second one is refused, naming both hosts); outside SLURM a launcher without --machine_rank is still refused (exit 125): a spare is asked for, never guessed. Under SLURM, `srun -N N+K accel-launch --num_machines N` makes the first N nodes by SLURM's node id (SLURM_NODEID 0..N-1) the world and the other K spares, node 0 (the job's first node) hosting the rendezvous; without the spare nodes (srun -N N) --num_machines on the command line still wants --machine_rank, as before. A spare joins at any time before the run's end; node 0 names it at the world's start only when it joined before. One node (--num_machines 1) has no spares: node 0 hosts the control plane and is never replaced. A run whose rendezvous is not static (--rdzv_backend c10d, which --nnodes MIN:MAX needs) is handed to torchrun (see TORCHRUN COMMAND LINE), and torchrun's rules for agents beyond MAX apply there.",
                "torchrun: agents beyond --nnodes MAX wait and are admitted at the next rendezvous round, at whatever rank that round gives them (`torch/distributed/elastic/rendezvous/dynamic_rendezvous.py`), so every rank of the world may move. accel differs: a spare enters only in a lost node's place, with that node's node rank, so its ranks get that node's RANKs, GROUP_RANK and rank offset, and every other node keeps its own; a spare never enlarges the world, and a lost node's place is taken without a new rendezvous round.",
                "Take-over: when a node of the world is lost (its launcher's connection closes: killed, SIGKILL included; or its heartbeats stop for 5 s: a network cut, the host down) while a restart is left (--max_restarts), every node stops its ranks as for any loss (see MULTI-NODE CONTROL PLANE); once the surviving nodes' ranks are gone, the waiting spare with the lowest node rank among those with as many ranks as the lost node takes its node rank, and the next attempt starts at once on every node, without the wait for a replacement launcher. Node 0 says `spare node 2 (h2) takes the place of lost node 1 (h1) from attempt 1`, the spare `spare node 2 takes the place of lost node 1: joining restart 1 of N`, and every node `restarting the ranks of every node (restart 1 of N)`. Restarts are counted as without spares: the take-over uses one, and TORCHELASTIC_RESTART_COUNT is the same global count on every rank. Several lost nodes take several spares; a lost node for which no spare is left is waited for as without spares (a replacement launcher with its --machine_rank, at most --rdzv_timeout, else every node exits 122). A rank's failure is restarted in place, its node kept, unless node 0 has --replace_failing_nodes: then a node (not node 0) whose rank ended the attempt is replaced by a waiting spare with as many ranks, as a lost node is (it counts as lost, in the report and the exclude file); its launcher is told the run's end for it, `... ; node 1 leaves the run, replaced by a spare`, and exits with its rank's status; with no such spare it is restarted in place. A spare lost or stopped while it waits is noted by node 0 (`spare node 3 (h3) is gone (...); the world goes on without it`) and is no failure of the world. Node 0 cannot be taken over: its loss ends the run. Measured on loopback (scripts/bench/spares: 2 shared cores, 2 + 2 CPU ranks of tests/fixtures/launch/control.py, 5 runs): from the SIGKILL of node 1's launcher to the spare starting its ranks, median 0.16 s, worst 0.20 s; to every rank of the new attempt in gloo's rendezvous (the ranks' Python and torch imports included), median 4.5 s, worst 4.8 s. A network cut adds the 5 s heartbeat window (tests/spares.rs: 5.1 s from the cut to the spare's ranks started). torchrun (torch 2.13, c10d rendezvous, --nnodes 2 --max_restarts 1, a third agent beyond --nnodes, node 1's agent and workers SIGKILLed): in none of 5 runs did the ranks of a next round start within 120 s; the surviving agent restarted its workers and the new round then failed in the rendezvous (its store's 60 s timeouts).",
                "Exclusion: node 0's --report_json gets `spares` (node, host, took: the node rank it took or null, attempt, gone: why it left while waiting or null) and `lost_nodes`, one per loss (node, host, attempt, why); the other nodes' reports have neither. With --exclude_file PATH on node 0, each lost node's host is appended to PATH when it is lost, one host a line, each once, for the next submission: `sbatch --exclude=$(paste -sd, PATH) job.sh`. A host that cannot be written there is a warning; the run goes on. With --drain_lost_nodes under SLURM, node 0 also drains each lost or replaced node (`scontrol update NodeName=H State=DRAIN Reason=\"accel-launch: lost in job J: why\"`, off its event loop) and says `node H drained`; SLURM lets only root, SlurmUser and its administrators drain, so for anyone else node 0 notes that the node was not drained, scontrol's reason and who may, and the run goes on.",
                "Signals and the end: a stop signal to a waiting spare (Ctrl-C, SIGTERM, SIGHUP, SIGQUIT) makes it leave alone: node 0 notes it gone and the world goes on; SLURM's warning under --slurm_requeue reaches the spare too (it leaves, exiting 123) and node 0 alone requeues the job, once. A signal to a node of the world ends the run as without spares, and every spare then exits with the run's status. Every spare exits when the run ends, and runs nothing meanwhile.",
                "Exit status: every spare exits with the run's status: 0 when every rank of the world succeeded, else what the world's nodes exit with (the failing rank's code, 122 for a lost node not replaced, 124 for a hang); a spare that took a node's place exits as that node does; a spare stopped by a signal while it waits exits 128+N alone. The lost node's own launcher, killed or on a dead host, leaves its srun task with a non-zero status even when the world then succeeds, so srun's (and the batch script's) status is not the world's. Make the job's result the world's by keeping the step alive through the loss and exiting with node 0's report: `#SBATCH --no-kill` (a failed node does not end the job), `srun --kill-on-bad-exit=0 sh -c 'exec accel-launch --num_machines 2 --max_restarts 3 --report_json rep/$SLURM_NODEID.json --exclude_file bad_hosts train.py'`, then `exit $(jq .status rep/0.json)`.",
            ]),
            ("SLURM REQUEUE", &[
                "--slurm_requeue (or ACCEL_LAUNCH_SLURM_REQUEUE=1; accelerate's config files admit no key of accel's own) turns SLURM's warning before a time limit or a preemption into a requeue of the job. Submit with `#SBATCH --signal=USR1@300` (without B:, so that the step's processes get it) and `#SBATCH --requeue`; run `srun accel-launch --slurm_requeue train.py` with a training script that saves its state on SIGUSR1 (examples/train.py --checkpoint_dir does, with accelerate's save_state) and resumes from it on start (load_state).",
                "On the warning signal (--requeue_signal, default USR1; SIGINT, SIGTERM, SIGHUP and SIGQUIT are refused because they stop the run) every node's ranks get it once: SLURM's step daemon delivers it to every process of the step itself, and a launcher that got it otherwise (kill, scancel on one node) forwards it to its ranks and tells the other nodes over the control plane, which forward it to theirs. When SLURM's step daemon delivered it on one node, the other nodes wait up to 5 s for SLURM's own delivery there (it signals the step on every node) before forwarding it themselves, so no rank gets it twice. The ranks then have --grace_period seconds to save and exit, then SIGKILL; how they exit is not a failure and is not restarted by --max_restarts. Once every node's ranks are gone, node 0's launcher alone runs `scontrol requeue $SLURM_JOB_ID` (exactly once per job, whichever node got the warning) and every launcher exits 123. SLURM then ends the job and queues it again; the next run's ranks see SLURM_RESTART_COUNT (1, 2, …).",
                "Checked before any rank starts, because a requeue that fails at the time limit loses the job: SLURM_JOB_ID is set (else exit 2), `scontrol` is on PATH (on every node), and, on node 0, `scontrol show job` answers and says Requeue=1 (a job submitted with --no-requeue, or a cluster with JobRequeue=0, is refused); each is exit 125 with the reason. A requeue that fails at the end prints scontrol's message, the command to requeue by hand, and exits 125. Only the ranks accel-launch starts itself can be requeued: with torchrun, deepspeed or mpirun owning the run, --slurm_requeue is refused.",
            ]),
            ("TORCHRUN COMMAND LINE", super::torchrun::MAN_SECTION),
            ("DIFFERENCES FROM TORCHRUN", super::torchrun::MAN_DIFFERENCES),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// Every `--flag` of `accelerate launch` 1.15 (accelerate/commands/launch.py::launch_command_parser);
    /// tests/launch_flags.rs checks this list against the installed accelerate.
    pub(crate) const ACCELERATE_LAUNCH_FLAGS: &[&str] = &[
        "aws_access_key_id",
        "aws_secret_access_key",
        "config_file",
        "cpu",
        "debug",
        "deepspeed_config_file",
        "deepspeed_exclusion_filter",
        "deepspeed_hostfile",
        "deepspeed_inclusion_filter",
        "deepspeed_moe_layer_cls_names",
        "deepspeed_multinode_launcher",
        "downcast_bf16",
        "dynamo_backend",
        "dynamo_mode",
        "dynamo_use_dynamic",
        "dynamo_use_fullgraph",
        "dynamo_use_regional_compilation",
        "enable_cpu_affinity",
        "env",
        "fp8_amax_compute_algo",
        "fp8_amax_history_len",
        "fp8_backend",
        "fp8_enable_fsdp_float8_all_gather",
        "fp8_format",
        "fp8_interval",
        "fp8_margin",
        "fp8_opt_level",
        "fp8_override_linear_precision",
        "fp8_pad_inner_dim",
        "fp8_use_autocast_during_eval",
        "fsdp_activation_checkpointing",
        "fsdp_activation_checkpointing_offload",
        "fsdp_auto_wrap_policy",
        "fsdp_backward_prefetch",
        "fsdp_cpu_ram_efficient_loading",
        "fsdp_forward_prefetch",
        "fsdp_min_num_params",
        "fsdp_offload_params",
        "fsdp_reshard_after_forward",
        "fsdp_sharding_strategy",
        "fsdp_state_dict_type",
        "fsdp_sync_module_states",
        "fsdp_transformer_layer_cls_to_wrap",
        "fsdp_use_orig_params",
        "fsdp_version",
        "gpu_ids",
        "gradient_accumulation_steps",
        "gradient_clipping",
        "help",
        "log_dir",
        "machine_rank",
        "main_process_ip",
        "main_process_port",
        "main_training_function",
        "max_restarts",
        "megatron_lm_attention_backend",
        "megatron_lm_attention_dropout",
        "megatron_lm_attention_softmax_in_fp32",
        "megatron_lm_calculate_per_token_loss",
        "megatron_lm_context_parallel_size",
        "megatron_lm_decoder_last_pipeline_num_layers",
        "megatron_lm_eod_mask_loss",
        "megatron_lm_expert_model_parallel_size",
        "megatron_lm_expert_tensor_parallel_size",
        "megatron_lm_gradient_clipping",
        "megatron_lm_hidden_dropout",
        "megatron_lm_no_load_optim",
        "megatron_lm_no_save_optim",
        "megatron_lm_num_micro_batches",
        "megatron_lm_optimizer_cpu_offload",
        "megatron_lm_overlap_cpu_optimizer_d2h_h2d",
        "megatron_lm_pp_degree",
        "megatron_lm_recompute_activations",
        "megatron_lm_recompute_granularity",
        "megatron_lm_recompute_method",
        "megatron_lm_recompute_num_layers",
        "megatron_lm_sequence_parallelism",
        "megatron_lm_tp_degree",
        "megatron_lm_use_custom_fsdp",
        "megatron_lm_use_distributed_optimizer",
        "megatron_lm_use_precision_aware_optimizer",
        "megatron_lm_use_rotary_position_embeddings",
        "mixed_precision",
        "module",
        "monitor_interval",
        "mpirun_hostfile",
        "multi_gpu",
        "no_python",
        "no_tpu_cluster",
        "num_cpu_threads_per_process",
        "num_machines",
        "num_processes",
        "offload_optimizer_device",
        "offload_optimizer_nvme_path",
        "offload_param_device",
        "offload_param_nvme_path",
        "parallelism_config_cp_backend",
        "parallelism_config_cp_comm_strategy",
        "parallelism_config_cp_size",
        "parallelism_config_dp_replicate_size",
        "parallelism_config_dp_shard_size",
        "parallelism_config_sp_attn_implementation",
        "parallelism_config_sp_backend",
        "parallelism_config_sp_seq_length",
        "parallelism_config_sp_seq_length_is_variable",
        "parallelism_config_sp_size",
        "parallelism_config_tp_size",
        "quiet",
        "rdzv_backend",
        "rdzv_conf",
        "role",
        "same_network",
        "tee",
        "tpu",
        "tpu_cluster",
        "tpu_use_sudo",
        "use_deepspeed",
        "use_fsdp",
        "use_megatron_lm",
        "use_parallelism_config",
        "vm",
        "zero3_init_flag",
        "zero3_save_16bit_model",
        "zero_stage",
    ];

    fn table() -> Vec<&'static ConfigFlag> {
        CONFIG_FLAGS.iter().flat_map(|g| g.flags.iter()).collect()
    }

    /// Every leaf key of the schema with the launch argument it derives.
    fn schema_args() -> Vec<(String, String)> {
        schema::all_paths()
            .into_iter()
            .filter_map(|p| schema::launch_arg(&p).map(|a| (p, a)))
            .collect()
    }

    #[test]
    fn every_config_flag_maps_to_one_schema_key_and_back() {
        let args = schema_args();
        let mut by_arg: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (path, arg) in &args {
            by_arg.entry(arg).or_default().push(path);
        }
        let mut keys = BTreeSet::new();
        for f in table() {
            let spec =
                schema::lookup(f.key).unwrap_or_else(|| panic!("{}: not a schema key", f.key));
            assert!(
                !matches!(spec.kind, schema::Kind::Section(_)),
                "{}: a section",
                f.key
            );
            assert!(keys.insert(f.key), "{}: two flags set it", f.key);
            let long = schema::launch_arg(f.key).unwrap();
            // Back: the flag names this key and no other.
            assert_eq!(by_arg[long.as_str()], vec![f.key], "--{long}");
        }
        assert_eq!(keys.len(), 99);
        let mut longs: Vec<_> = config_flags().iter().map(|n| &n.long).collect();
        longs.sort();
        longs.dedup();
        assert_eq!(longs.len(), keys.len(), "two flags share a name");
    }

    #[test]
    fn every_accelerate_flag_for_a_schema_key_is_here() {
        let ours: BTreeSet<&str> = table().iter().map(|f| f.key).collect();
        let missing: Vec<_> = schema_args()
            .into_iter()
            .filter(|(path, arg)| {
                ACCELERATE_LAUNCH_FLAGS.contains(&arg.as_str()) && !ours.contains(path.as_str())
            })
            .collect();
        assert!(
            missing.is_empty(),
            "accelerate flags without a row: {missing:?}"
        );
        // And every row is an accelerate flag: the table adds no spelling of its own.
        for Named { long, .. } in config_flags() {
            assert!(ACCELERATE_LAUNCH_FLAGS.contains(&long.as_str()), "--{long}");
        }
    }

    #[test]
    fn config_values_name_key_value_and_flag() {
        let mut argv = vec!["accel-launch".to_string()];
        for Named { flag: f, long, .. } in config_flags() {
            argv.push(format!("--{long}"));
            if f.value_name.is_some() {
                argv.push(format!("v-{long}"));
            }
        }
        argv.push("train.py".into());
        let cli = LaunchCli::try_parse_from(&argv).unwrap();
        let values = cli.config_values();
        assert_eq!(values.len(), 99);
        for (v, Named { flag: f, long, .. }) in values.iter().zip(config_flags()) {
            assert_eq!(v.key, f.key);
            assert_eq!(v.flag, format!("--{long}"));
            let want = match f.value_name {
                None => "true".to_string(),
                Some(_) => format!("v-{long}"),
            };
            assert_eq!(v.value, serde_json::Value::from(want));
        }
        // A few by hand: a renamed FP8 key, a nested top-level section, a switch, the dashed alias.
        let cli = LaunchCli::try_parse_from([
            "accel-launch",
            "--fp8-backend",
            "te",
            "--mpirun_hostfile",
            "hosts",
            "--debug",
            "--dynamo_backend",
            "inductor",
            "train.py",
        ])
        .unwrap();
        let got: Vec<_> = cli
            .config_values()
            .into_iter()
            .map(|v| (v.key, v.value, v.flag))
            .collect();
        let want: Vec<(String, serde_json::Value, String)> = [
            ("debug", "true", "--debug"),
            (
                "dynamo_config.dynamo_backend",
                "inductor",
                "--dynamo_backend",
            ),
            (
                "mpirun_config.mpirun_hostfile",
                "hosts",
                "--mpirun_hostfile",
            ),
            ("fp8_config.backend", "te", "--fp8_backend"),
        ]
        .into_iter()
        .map(|(k, v, f)| (k.to_string(), serde_json::Value::from(v), f.to_string()))
        .collect();
        assert_eq!(got, want);
        assert!(LaunchCli::try_parse_from(["accel-launch", "train.py"])
            .unwrap()
            .config_values()
            .is_empty());
    }

    #[test]
    fn tee_takes_what_torchrun_takes() {
        for ok in ["0", "1", "2", "3", "0:1", "0:3,1:0,2:1"] {
            assert!(parse_tee(ok).is_ok(), "{ok}");
        }
        for bad in ["x", "", "4", "01", "0:4", "10:1", "0:1,", "0=1", ":1"] {
            assert!(parse_tee(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rank_prefix_placeholders() {
        assert!(parse_rank_prefix("[{rank}/{local_rank}@{node}:{role}] ").is_ok());
        assert!(parse_rank_prefix("{ literal } {").is_ok());
        let e = parse_rank_prefix("[{rnak}] ").unwrap_err();
        assert!(e.contains("`{rnak}`") && e.contains("{local_rank}"), "{e}");
        assert!(parse_rank_prefix("{attempt}").is_err());
    }

    #[test]
    fn log_template_stays_inside_the_log_dir() {
        for ok in [
            crate::launch::supervise::DEFAULT_LOG_TEMPLATE,
            "{rank}.{stream}",
            "./n{node}/a{attempt}/{local_rank}_{stream}.log",
            "x..y/{rank}{stream}",
        ] {
            assert!(parse_log_template(ok).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("/abs/{rank}{stream}", "absolute"),
            ("../escaped_{rank}_{stream}.log", "`..`"),
            ("a/../../{rank}{stream}", "`..`"),
            ("{rank}_{bogus}_{stream}", "`{bogus}`"),
            ("{rank}/", "name a file"),
            ("", "name a file"),
        ] {
            let e = parse_log_template(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn local_ranks_filter() {
        assert_eq!(parse_local_ranks("0").map(|f| f.ranks), Ok(vec![0]));
        assert_eq!(
            parse_local_ranks("0, 1,"),
            Ok(LocalRanks {
                ranks: vec![0, 1],
                text: "0, 1,".into()
            })
        );
        assert!(parse_local_ranks("").is_err());
        assert!(parse_local_ranks(" , ").is_err());
        assert!(parse_local_ranks("0,x").is_err());
    }
}
