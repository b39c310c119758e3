//! The shape of an accelerate 1.15 config file: every key of `ClusterConfig` in dataclass order, the keys
//! each section may hold, their kinds, defaults and allowed values. Validation, `accel-config get/set`,
//! unknown-key suggestions, defaults and the provenance report are all driven from these tables, so a
//! key is described in exactly one place.

use serde_json::Value;

/// What a value may be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Bool,
    Int {
        min: i64,
        max: i64,
    },
    Float,
    Str,
    /// One of the listed strings. `ci` matches case-insensitively and stores the listed spelling.
    /// `legacy_int` also accepts 1-based indexes, which old FSDP configs used.
    Choice {
        values: &'static [&'static str],
        ci: bool,
        legacy_int: bool,
    },
    /// An integer from a closed set, written as a number (`zero_stage`, `fsdp_version`).
    IntChoice(&'static [i64]),
    /// A list of strings (or one string, read as a one-element list).
    List,
    /// FSDP's `reshard_after_forward`: a bool (FSDP2) or a sharding strategy name (FSDP1).
    BoolOrChoice(&'static [&'static str]),
    /// A nested mapping with its own keys.
    Section(&'static Section),
    /// Anything: carried through unvalidated (accelerate's tuple-ish values).
    Any,
}

impl Kind {
    /// The allowed values, for error messages.
    pub fn describe(&self) -> String {
        match self {
            Kind::Bool => "true or false".into(),
            Kind::Int { min, max } if *max == i64::MAX => format!("an integer ≥ {min}"),
            Kind::Int { min, max } => format!("an integer from {min} to {max}"),
            Kind::Float => "a number".into(),
            Kind::Str => "a string".into(),
            Kind::Choice { values, .. } => format!("one of {}", values.join(", ")),
            Kind::IntChoice(values) => {
                format!(
                    "one of {}",
                    values
                        .iter()
                        .map(i64::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
            Kind::List => "a list of strings".into(),
            Kind::BoolOrChoice(values) => format!("true, false or one of {}", values.join(", ")),
            Kind::Section(_) => "a mapping".into(),
            Kind::Any => "any value".into(),
        }
    }
}

/// One key: its name, kind, the default accelerate's dataclass gives it, and a one-line description.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeySpec {
    pub name: &'static str,
    pub kind: Kind,
    pub default: DefaultValue,
    pub doc: &'static str,
}

/// A default, as data that can live in a static table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DefaultValue {
    None,
    Bool(bool),
    Int(i64),
    Str(&'static str),
}

impl DefaultValue {
    pub fn to_value(self) -> Option<Value> {
        match self {
            DefaultValue::None => None,
            DefaultValue::Bool(b) => Some(Value::Bool(b)),
            DefaultValue::Int(i) => Some(Value::from(i)),
            DefaultValue::Str(s) => Some(Value::from(s)),
        }
    }
}

/// A config section (`fsdp_config`, …).
#[derive(Debug, PartialEq)]
pub struct Section {
    pub name: &'static str,
    /// Prefix accelerate adds to keys that lack it when copying the section into launch arguments.
    pub prefix: Option<&'static str>,
    pub keys: &'static [KeySpec],
}

impl Section {
    /// The spec for `key`, accepting the key with or without the section's prefix.
    pub fn key(&self, key: &str) -> Option<&'static KeySpec> {
        let found = self.keys.iter().find(|k| k.name == key);
        found.or_else(|| {
            let prefix = self.prefix?;
            let alt = match key.strip_prefix(prefix) {
                Some(stripped) => stripped.to_string(),
                None => format!("{prefix}{key}"),
            };
            self.keys.iter().find(|k| k.name == alt)
        })
    }
}

const fn k(name: &'static str, kind: Kind, default: DefaultValue, doc: &'static str) -> KeySpec {
    KeySpec {
        name,
        kind,
        default,
        doc,
    }
}

const BOOL: Kind = Kind::Bool;
const STR: Kind = Kind::Str;
const FLOAT: Kind = Kind::Float;
const UINT: Kind = Kind::Int {
    min: 0,
    max: i64::MAX,
};
/// Counts, sizes and degrees: torch and accelerate hold them in a C `int` (a world size, a rank, a
/// parallel degree), so a larger number is refused here rather than wrapped or dropped downstream.
const POS: Kind = Kind::Int {
    min: 1,
    max: i32::MAX as i64,
};
const RANK: Kind = Kind::Int {
    min: 0,
    max: i32::MAX as i64 - 1,
};
const N: DefaultValue = DefaultValue::None;

pub const DISTRIBUTED_TYPES: &[&str] = &[
    "NO",
    "MULTI_CPU",
    "MULTI_GPU",
    "MULTI_NPU",
    "MULTI_MLU",
    "MULTI_SDAA",
    "MULTI_MUSA",
    "MULTI_XPU",
    "DEEPSPEED",
    "FSDP",
    "XLA",
    "MEGATRON_LM",
    "MULTI_HPU",
    "MULTI_NEURON",
];
pub const MIXED_PRECISION: &[&str] = &["no", "fp16", "bf16", "fp8"];
pub const DYNAMO_BACKENDS: &[&str] = &[
    "NO",
    "EAGER",
    "AOT_EAGER",
    "INDUCTOR",
    "AOT_TS_NVFUSER",
    "NVPRIMS_NVFUSER",
    "CUDAGRAPHS",
    "OFI",
    "FX2TRT",
    "ONNXRT",
    "TENSORRT",
    "AOT_TORCHXLA_TRACE_ONCE",
    "TORCHXLA_TRACE_ONCE",
    "TVM",
    "HPU_BACKEND",
    "NEURON",
];
pub const SHARDING_STRATEGIES: &[&str] = &[
    "FULL_SHARD",
    "SHARD_GRAD_OP",
    "NO_SHARD",
    "HYBRID_SHARD",
    "HYBRID_SHARD_ZERO2",
];
pub const AUTO_WRAP_POLICIES: &[&str] = &["TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"];
pub const BACKWARD_PREFETCH: &[&str] = &["BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"];
pub const STATE_DICT_TYPES: &[&str] =
    &["FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT"];
pub const OFFLOAD_DEVICES: &[&str] = &["none", "cpu", "nvme"];
/// Transformer Engine's FP8 formats (`fp8_format`), the questionnaire's menu order.
pub const FP8_FORMATS: &[&str] = &["HYBRID", "E4M3", "E5M2"];
/// Transformer Engine's amax algorithms (`amax_compute_algo`).
pub const AMAX_COMPUTE_ALGOS: &[&str] = &["max", "most_recent"];
/// MS-AMP's optimisation levels (`opt_level`).
pub const MSAMP_OPT_LEVELS: &[&str] = &["O1", "O2"];
/// Context parallelism's communication strategies (`parallelism_config_cp_comm_strategy`).
pub const CP_COMM_STRATEGIES: &[&str] = &["allgather", "alltoall"];
pub const DS_LAUNCHERS: &[&str] = &[
    "pdsh", "standard", "openmpi", "mvapich", "mpich", "nossh", "slurm",
];

const fn choice(values: &'static [&'static str]) -> Kind {
    Kind::Choice {
        values,
        ci: false,
        legacy_int: false,
    }
}
const fn choice_ci(values: &'static [&'static str]) -> Kind {
    Kind::Choice {
        values,
        ci: true,
        legacy_int: false,
    }
}
const fn choice_legacy(values: &'static [&'static str]) -> Kind {
    Kind::Choice {
        values,
        ci: true,
        legacy_int: true,
    }
}

pub static DEEPSPEED: Section = Section {
    name: "deepspeed_config",
    prefix: None,
    keys: &[
        k(
            "deepspeed_config_file",
            STR,
            N,
            "DeepSpeed JSON config; its values win over the keys below",
        ),
        k(
            "zero_stage",
            Kind::IntChoice(&[0, 1, 2, 3]),
            N,
            "ZeRO optimisation stage",
        ),
        k(
            "offload_optimizer_device",
            choice_ci(OFFLOAD_DEVICES),
            N,
            "where optimizer states are offloaded",
        ),
        k(
            "offload_param_device",
            choice_ci(OFFLOAD_DEVICES),
            N,
            "where parameters are offloaded (stage 3)",
        ),
        k(
            "offload_optimizer_nvme_path",
            STR,
            N,
            "NVMe path for optimizer offload",
        ),
        k(
            "offload_param_nvme_path",
            STR,
            N,
            "NVMe path for parameter offload",
        ),
        k(
            "gradient_accumulation_steps",
            POS,
            N,
            "gradient accumulation steps",
        ),
        k("gradient_clipping", FLOAT, N, "gradient clipping value"),
        k(
            "zero3_init_flag",
            BOOL,
            N,
            "deepspeed.zero.Init for huge models (stage 3)",
        ),
        k(
            "zero3_save_16bit_model",
            BOOL,
            N,
            "save 16-bit weights under stage 3",
        ),
        k(
            "deepspeed_moe_layer_cls_names",
            STR,
            N,
            "comma-separated MoE layer class names",
        ),
        k(
            "deepspeed_multinode_launcher",
            choice(DS_LAUNCHERS),
            N,
            "DeepSpeed multi-node launcher",
        ),
        k(
            "deepspeed_hostfile",
            STR,
            N,
            "DeepSpeed hostfile for multi-node runs",
        ),
        k("deepspeed_exclusion_filter", STR, N, "DeepSpeed --exclude"),
        k("deepspeed_inclusion_filter", STR, N, "DeepSpeed --include"),
    ],
};

pub static FSDP: Section = Section {
    name: "fsdp_config",
    prefix: Some("fsdp_"),
    keys: &[
        k("fsdp_version", Kind::IntChoice(&[1, 2]), N, "FSDP version"),
        k(
            "fsdp_reshard_after_forward",
            Kind::BoolOrChoice(SHARDING_STRATEGIES),
            N,
            "reshard after forward",
        ),
        k(
            "fsdp_offload_params",
            BOOL,
            N,
            "offload parameters and gradients to CPU",
        ),
        k(
            "fsdp_sharding_strategy",
            choice_legacy(SHARDING_STRATEGIES),
            N,
            "FSDP1 sharding strategy",
        ),
        k(
            "fsdp_auto_wrap_policy",
            choice_legacy(AUTO_WRAP_POLICIES),
            N,
            "auto wrap policy",
        ),
        k(
            "fsdp_transformer_layer_cls_to_wrap",
            STR,
            N,
            "comma-separated layer classes to wrap",
        ),
        k(
            "fsdp_min_num_params",
            UINT,
            N,
            "minimum parameters for SIZE_BASED_WRAP",
        ),
        k(
            "fsdp_backward_prefetch",
            choice_legacy(BACKWARD_PREFETCH),
            N,
            "FSDP1 backward prefetch",
        ),
        k(
            "fsdp_backward_prefetch_policy",
            choice_legacy(BACKWARD_PREFETCH),
            N,
            "legacy name of fsdp_backward_prefetch",
        ),
        k(
            "fsdp_state_dict_type",
            choice_legacy(STATE_DICT_TYPES),
            N,
            "state dict type for checkpoints",
        ),
        k("fsdp_forward_prefetch", BOOL, N, "FSDP1 forward prefetch"),
        k("fsdp_use_orig_params", BOOL, N, "FSDP1 use_orig_params"),
        k(
            "fsdp_cpu_ram_efficient_loading",
            BOOL,
            N,
            "load weights on rank 0 only",
        ),
        k(
            "fsdp_sync_module_states",
            BOOL,
            N,
            "broadcast module states from rank 0",
        ),
        k(
            "fsdp_activation_checkpointing",
            BOOL,
            N,
            "activation checkpointing",
        ),
        k(
            "fsdp_activation_checkpointing_offload",
            BOOL,
            N,
            "offload checkpointed activations to CPU",
        ),
        k("fsdp_ignored_modules", STR, N, "modules FSDP ignores"),
    ],
};

pub static MEGATRON_LM: Section = Section {
    name: "megatron_lm_config",
    prefix: None,
    keys: &[
        k("megatron_lm_tp_degree", POS, N, "tensor parallel degree"),
        k("megatron_lm_pp_degree", POS, N, "pipeline parallel degree"),
        k(
            "megatron_lm_num_micro_batches",
            POS,
            N,
            "micro batches for pipeline parallelism",
        ),
        k(
            "megatron_lm_sequence_parallelism",
            BOOL,
            N,
            "sequence parallelism",
        ),
        k(
            "megatron_lm_recompute_activations",
            BOOL,
            N,
            "selective activation recomputation",
        ),
        k(
            "megatron_lm_use_distributed_optimizer",
            BOOL,
            N,
            "distributed optimizer",
        ),
        k(
            "megatron_lm_gradient_clipping",
            FLOAT,
            N,
            "gradient clipping",
        ),
        k(
            "megatron_lm_recompute_granularity",
            choice(&["full", "selective"]),
            N,
            "recompute granularity",
        ),
        k(
            "megatron_lm_recompute_method",
            choice(&["uniform", "block"]),
            N,
            "recompute method",
        ),
        k(
            "megatron_lm_recompute_num_layers",
            UINT,
            N,
            "layers to recompute",
        ),
        k(
            "megatron_lm_decoder_last_pipeline_num_layers",
            UINT,
            N,
            "layers in the last pipeline stage",
        ),
        k(
            "megatron_lm_expert_model_parallel_size",
            POS,
            N,
            "expert model parallel size",
        ),
        k(
            "megatron_lm_context_parallel_size",
            POS,
            N,
            "context parallel size",
        ),
        k(
            "megatron_lm_expert_tensor_parallel_size",
            POS,
            N,
            "expert tensor parallel size",
        ),
        k(
            "megatron_lm_attention_dropout",
            FLOAT,
            N,
            "attention dropout",
        ),
        k("megatron_lm_hidden_dropout", FLOAT, N, "hidden dropout"),
        k("megatron_lm_attention_backend", STR, N, "attention backend"),
        k(
            "megatron_lm_attention_softmax_in_fp32",
            BOOL,
            N,
            "softmax in fp32",
        ),
        k(
            "megatron_lm_calculate_per_token_loss",
            BOOL,
            N,
            "per-token loss",
        ),
        k(
            "megatron_lm_use_rotary_position_embeddings",
            BOOL,
            N,
            "rotary position embeddings",
        ),
        k("megatron_lm_use_custom_fsdp", BOOL, N, "custom FSDP"),
        k(
            "megatron_lm_no_load_optim",
            BOOL,
            N,
            "do not load optimizer state",
        ),
        k(
            "megatron_lm_no_save_optim",
            BOOL,
            N,
            "do not save optimizer state",
        ),
        k(
            "megatron_lm_eod_mask_loss",
            BOOL,
            N,
            "mask loss at end-of-document",
        ),
        k(
            "megatron_lm_overlap_cpu_optimizer_d2h_h2d",
            BOOL,
            N,
            "overlap CPU optimizer copies",
        ),
        k(
            "megatron_lm_optimizer_cpu_offload",
            BOOL,
            N,
            "offload optimizer to CPU",
        ),
        k(
            "megatron_lm_use_precision_aware_optimizer",
            BOOL,
            N,
            "precision-aware optimizer",
        ),
    ],
};

pub static DYNAMO: Section = Section {
    name: "dynamo_config",
    prefix: Some("dynamo_"),
    keys: &[
        k(
            "dynamo_backend",
            choice_ci(DYNAMO_BACKENDS),
            N,
            "torch.compile backend",
        ),
        k(
            "dynamo_mode",
            choice(&[
                "default",
                "reduce-overhead",
                "max-autotune",
                "max-autotune-no-cudagraphs",
            ]),
            N,
            "torch.compile mode",
        ),
        k("dynamo_use_fullgraph", BOOL, N, "compile the whole graph"),
        k("dynamo_use_dynamic", BOOL, N, "dynamic shapes"),
        k(
            "dynamo_use_regional_compilation",
            BOOL,
            N,
            "compile repeated blocks once",
        ),
    ],
};

pub static FP8: Section = Section {
    name: "fp8_config",
    prefix: Some("fp8_"),
    keys: &[
        k(
            "backend",
            choice_ci(&["AO", "TE", "MSAMP"]),
            N,
            "FP8 backend",
        ),
        k(
            "use_autocast_during_eval",
            BOOL,
            N,
            "TE: autocast during evaluation",
        ),
        k("margin", UINT, N, "TE: scaling margin"),
        k("interval", POS, N, "TE: scaling factor update interval"),
        k("fp8_format", choice_ci(FP8_FORMATS), N, "TE: FP8 format"),
        k("amax_history_len", POS, N, "TE: amax history length"),
        k(
            "amax_compute_algo",
            choice(AMAX_COMPUTE_ALGOS),
            N,
            "TE: amax algorithm",
        ),
        k(
            "override_linear_precision",
            Kind::Any,
            N,
            "TE: (fprop, dgrad, wgrad) in higher precision",
        ),
        k(
            "use_mxfp8_block_scaling",
            BOOL,
            N,
            "TE: MXFP8 block scaling",
        ),
        k(
            "opt_level",
            choice(MSAMP_OPT_LEVELS),
            N,
            "MS-AMP optimisation level",
        ),
        k(
            "enable_fsdp_float8_all_gather",
            BOOL,
            N,
            "AO: float8 all-gather under FSDP2",
        ),
        k("pad_inner_dim", BOOL, N, "AO: pad inner dimension"),
        // Names the questionnaire of accelerate writes but its launcher never reads
        // (`accelerate/commands/config/cluster.py` vs `accelerate/utils/launch.py::setup_fp8_env`);
        // accel maps them onto the names above when exporting, so they are accepted here.
        k(
            "amax_history_length",
            POS,
            N,
            "questionnaire name of amax_history_len",
        ),
        k(
            "amax_compute_algorithm",
            choice(AMAX_COMPUTE_ALGOS),
            N,
            "questionnaire name of amax_compute_algo",
        ),
        k(
            "optimization_level",
            choice(MSAMP_OPT_LEVELS),
            N,
            "questionnaire name of opt_level",
        ),
    ],
};

pub static MPIRUN: Section = Section {
    name: "mpirun_config",
    prefix: None,
    keys: &[k(
        "mpirun_hostfile",
        STR,
        N,
        "hostfile for mpirun multi-CPU runs",
    )],
};

pub static PARALLELISM: Section = Section {
    name: "parallelism_config",
    prefix: Some("parallelism_config_"),
    keys: &[
        k(
            "parallelism_config_dp_replicate_size",
            POS,
            N,
            "data-parallel replicate size",
        ),
        k(
            "parallelism_config_dp_shard_size",
            POS,
            N,
            "data-parallel shard size",
        ),
        k("parallelism_config_tp_size", POS, N, "tensor parallel size"),
        k(
            "parallelism_config_cp_size",
            POS,
            N,
            "context parallel size",
        ),
        k(
            "parallelism_config_cp_backend",
            choice(&["torch"]),
            N,
            "context parallel backend",
        ),
        k(
            "parallelism_config_cp_comm_strategy",
            choice(CP_COMM_STRATEGIES),
            N,
            "context parallel strategy",
        ),
        k(
            "parallelism_config_sp_size",
            POS,
            N,
            "sequence parallel size",
        ),
        k(
            "parallelism_config_sp_backend",
            choice(&["deepspeed"]),
            N,
            "sequence parallel backend",
        ),
        k(
            "parallelism_config_sp_seq_length",
            STR,
            N,
            "sequence length",
        ),
        k(
            "parallelism_config_sp_seq_length_is_variable",
            BOOL,
            N,
            "variable sequence length",
        ),
        k(
            "parallelism_config_sp_attn_implementation",
            STR,
            N,
            "attention implementation",
        ),
    ],
};

/// Top-level keys of `ClusterConfig`, in dataclass order (which is also the order `accelerate env` prints).
pub static TOP: &[KeySpec] = &[
    k(
        "compute_environment",
        choice(&["LOCAL_MACHINE", "AMAZON_SAGEMAKER"]),
        DefaultValue::Str("LOCAL_MACHINE"),
        "where the run happens",
    ),
    k(
        "distributed_type",
        choice_ci(DISTRIBUTED_TYPES),
        N,
        "kind of distributed run (required in a file)",
    ),
    k(
        "mixed_precision",
        choice_ci(MIXED_PRECISION),
        N,
        "mixed precision mode",
    ),
    k(
        "use_cpu",
        BOOL,
        DefaultValue::Bool(false),
        "run on CPU even when GPUs exist",
    ),
    k(
        "debug",
        BOOL,
        DefaultValue::Bool(false),
        "distributed debug checks",
    ),
    k(
        "num_processes",
        Kind::Int {
            min: -1,
            max: i32::MAX as i64,
        },
        DefaultValue::Int(-1),
        "total processes across all machines",
    ),
    k(
        "machine_rank",
        RANK,
        DefaultValue::Int(0),
        "rank of this machine",
    ),
    k(
        "num_machines",
        POS,
        DefaultValue::Int(1),
        "number of machines",
    ),
    k(
        "gpu_ids",
        STR,
        N,
        "GPUs to use on each machine (comma-separated ids, or all)",
    ),
    k(
        "main_process_ip",
        STR,
        N,
        "address of the machine with rank 0",
    ),
    k(
        "main_process_port",
        Kind::Int { min: 0, max: 65535 },
        N,
        "rendezvous port on the main machine (0: pick one)",
    ),
    k(
        "rdzv_backend",
        choice(&["static", "c10d", "etcd", "etcd-v2"]),
        DefaultValue::Str("static"),
        "rendezvous backend",
    ),
    k(
        "same_network",
        BOOL,
        DefaultValue::Bool(false),
        "all machines on the same network",
    ),
    k(
        "main_training_function",
        STR,
        DefaultValue::Str("main"),
        "function to run (TPU)",
    ),
    k(
        "enable_cpu_affinity",
        BOOL,
        DefaultValue::Bool(false),
        "pin ranks to CPU cores (NVIDIA GPUs)",
    ),
    k("fp8_config", Kind::Section(&FP8), N, "FP8 settings"),
    k(
        "deepspeed_config",
        Kind::Section(&DEEPSPEED),
        N,
        "DeepSpeed settings",
    ),
    k("fsdp_config", Kind::Section(&FSDP), N, "FSDP settings"),
    k(
        "parallelism_config",
        Kind::Section(&PARALLELISM),
        N,
        "N-D parallelism settings",
    ),
    k(
        "megatron_lm_config",
        Kind::Section(&MEGATRON_LM),
        N,
        "Megatron-LM settings",
    ),
    k(
        "mpirun_config",
        Kind::Section(&MPIRUN),
        N,
        "mpirun settings",
    ),
    k(
        "downcast_bf16",
        BOOL,
        DefaultValue::Bool(false),
        "TPU: downcast to bf16",
    ),
    k("tpu_name", STR, N, "TPU name"),
    k("tpu_zone", STR, N, "TPU zone"),
    k(
        "tpu_use_cluster",
        BOOL,
        DefaultValue::Bool(false),
        "TPU pod",
    ),
    k(
        "tpu_use_sudo",
        BOOL,
        DefaultValue::Bool(false),
        "sudo on TPU pod workers",
    ),
    k("command_file", STR, N, "TPU setup command file"),
    k("commands", Kind::List, N, "TPU setup commands"),
    k("tpu_vm", Kind::List, N, "TPU VMs"),
    k("tpu_env", Kind::List, N, "TPU environment"),
    k(
        "dynamo_config",
        Kind::Section(&DYNAMO),
        N,
        "torch.compile settings",
    ),
];

/// Keys accelerate itself migrates on load (`process_config`) or removed in recent versions.
pub const LEGACY_TOP: &[&str] = &["fp16", "dynamo_backend", "ipex_config"];

pub fn top(key: &str) -> Option<&'static KeySpec> {
    TOP.iter().find(|k| k.name == key)
}

pub fn section(name: &str) -> Option<&'static Section> {
    match top(name)?.kind {
        Kind::Section(s) => Some(s),
        _ => None,
    }
}

/// The spec of a dotted key (`num_processes`, `fsdp_config.fsdp_version`).
pub fn lookup(path: &str) -> Option<&'static KeySpec> {
    match path.split_once('.') {
        None => top(path),
        Some((sec, key)) => section(sec)?.key(key),
    }
}

/// A dotted key as the schema spells it (`fsdp_config.version` → `fsdp_config.fsdp_version`), with
/// its spec; for a key the schema lacks, the closest known key when one is close (a likely typo).
pub fn canonical(key: &str) -> Result<(String, &'static KeySpec), Option<String>> {
    let found = match key.split_once('.') {
        None => top(key).map(|s| (s.name.to_string(), s)),
        Some((sec, inner)) => section(sec).and_then(|section| {
            let spec = section.key(inner)?;
            Some((format!("{}.{}", section.name, spec.name), spec))
        }),
    };
    found.ok_or_else(|| {
        let all = all_paths();
        closest(key, all.iter().map(String::as_str)).map(str::to_string)
    })
}

/// The `accelerate launch` argument that sets a dotted key: a top-level key is its own argument; a
/// section key gets the section's prefix when it lacks it (`fp8_config.margin` → `fp8_margin`), as
/// `accelerate/commands/launch.py::_validate_launch_command` copies sections into arguments.
pub fn launch_arg(path: &str) -> Option<String> {
    match path.split_once('.') {
        None => top(path).map(|_| path.to_string()),
        Some((sec, key)) => {
            let section = section(sec)?;
            let spec = section.keys.iter().find(|k| k.name == key)?;
            Some(match section.prefix {
                Some(p) if !spec.name.starts_with(p) => format!("{p}{}", spec.name),
                _ => spec.name.to_string(),
            })
        }
    }
}

/// Every dotted key accelerate knows, for suggestions and completion.
pub fn all_paths() -> Vec<String> {
    let mut out = Vec::new();
    for spec in TOP {
        match spec.kind {
            Kind::Section(s) => out.extend(s.keys.iter().map(|k| format!("{}.{}", s.name, k.name))),
            _ => out.push(spec.name.to_string()),
        }
    }
    out
}

/// The closest known name to `name` among `candidates`, if it is close enough to be a likely typo.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(name, c), c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_with_and_without_prefix() {
        assert!(lookup("fsdp_config.fsdp_version").is_some());
        assert!(lookup("fsdp_config.version").is_some());
        assert!(lookup("fp8_config.fp8_backend").is_some());
        assert!(lookup("nope").is_none());
        assert_eq!(
            closest("num_proceses", TOP.iter().map(|k| k.name)),
            Some("num_processes")
        );
        assert_eq!(closest("zzzz", TOP.iter().map(|k| k.name)), None);
    }
}
