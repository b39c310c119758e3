//! accelerate 1.15's launch semantics (`accelerate/commands/launch.py::_validate_launch_command` and
//! `accelerate/utils/launch.py::prepare_*_env`) as data: the merged launch arguments ([`LaunchArgs`])
//! built from a resolved config, and the variables accelerate exports for them ([`LaunchArgs::accelerate_env`]). Values are rendered as
//! Python's `str()` renders them (`True`, `1.0`), since the child parses those strings.
//!
//! Deliberate differences from accelerate 1.15 (each listed in the accel-launch man page and tested):
//! `--cpu`/`MULTI_CPU` with N processes really starts N ranks (so `ACCELERATE_USE_CPU=True` is set for
//! `MULTI_CPU`); NVMe offload paths are exported; fp8 questionnaire key names are mapped onto the names
//! the child reads, the backend is upper-cased and a string `override_linear_precision` is parsed;
//! config-only scalars (`enable_cpu_affinity`, …) are honoured; `type=bool` flags read `False` as false;
//! the FSDP ram-efficient-loading check compares booleans, and the parallelism check the numeric version.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::EnvMap;
use crate::config::{DistributedType, Loaded, Origin, View};
use crate::env_vars::{self, Environment};
use crate::error::Diagnostic;
use crate::exit_status::ExitStatus;

#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    #[error("{0}")]
    Invalid(String),
    /// A config file without `num_processes` (or with -1) and none on the command line: what
    /// accelerate's `_validate_launch_command` raises then, verbatim.
    #[error("You need to manually pass in `--num_processes` using this config yaml.")]
    NumProcessesNeeded,
    #[error("{0} is not supported by accel-launch")]
    Unsupported(&'static str),
}

impl Diagnostic for ArgsError {
    fn hints(&self) -> Vec<String> {
        match self {
            ArgsError::Unsupported(_) => {
                vec!["use `accelerate launch` for TPU and SageMaker jobs".into()]
            }
            ArgsError::Invalid(_) | ArgsError::NumProcessesNeeded => Vec::new(),
        }
    }
    fn exit_status(&self) -> ExitStatus {
        ExitStatus::Usage
    }
}

/// How accelerate would start the ranks (`accelerate/commands/launch.py::launch_command`): one child (or N CPU ranks, accel's fix),
/// torchrun for DDP/FSDP/Megatron, or the DeepSpeed variant of torchrun.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum LaunchPath {
    Simple,
    Torchrun,
    DeepSpeed,
}

/// The paradigm flags given on the command line (`--cpu`, `--multi_gpu`, …).
#[derive(Debug, Clone, Copy, Default)]
pub struct Paradigm {
    pub cpu: bool,
    pub multi_gpu: bool,
    pub tpu: bool,
    pub use_deepspeed: bool,
    pub use_fsdp: bool,
    pub use_megatron_lm: bool,
    pub use_parallelism_config: bool,
}

impl Paradigm {
    fn any_platform(&self) -> bool {
        self.multi_gpu || self.tpu || self.use_deepspeed || self.use_fsdp || self.use_megatron_lm
    }
}

/// What the machine offers, for the embedded default (no config file).
#[derive(Debug, Clone, Copy)]
pub struct Machine {
    /// GPUs a rank on this node can use.
    pub gpus: u32,
    pub physical_cores: u32,
    /// Nodes of the job as its scheduler placed it (1 when it did not): the embedded default's rank
    /// count is per node, and `num_processes` is the total over all nodes.
    pub nodes: u32,
    /// Ranks per node as the scheduler gives them (`PET_NPROC_PER_NODE`, SkyPilot's GPUs per node),
    /// for the embedded default in place of the GPU count.
    pub procs_per_node: Option<u32>,
    /// This node's own rank count (accel-launch's `--nproc_per_node`, torchrun's per-node count),
    /// when nodes differ: `num_processes` keeps accelerate's meaning, the world's total, which then
    /// need not be a multiple of `num_machines` (the control plane's join checks the sum).
    pub own_ranks: Option<u32>,
}

/// accelerate's merged `args` namespace after `_validate_launch_command`.
#[derive(Debug, Clone)]
pub struct LaunchArgs {
    pub path: LaunchPath,
    pub distributed_type: DistributedType,
    pub multi_gpu: bool,
    pub use_fsdp: bool,
    pub use_deepspeed: bool,
    pub use_megatron_lm: bool,
    pub use_parallelism_config: bool,
    /// `--cpu`.
    pub cpu_flag: bool,
    /// `ACCELERATE_USE_CPU`.
    pub use_cpu: bool,
    pub debug: bool,
    pub gpu_ids: Option<String>,
    pub mixed_precision: String,
    pub num_processes: u32,
    pub num_machines: u32,
    pub machine_rank: Option<u32>,
    pub main_process_ip: Option<String>,
    pub main_process_port: Option<u16>,
    pub rdzv_backend: String,
    pub same_network: bool,
    pub num_cpu_threads_per_process: u32,
    pub enable_cpu_affinity: bool,
    /// Section values flattened as accelerate copies them into `args` (`fsdp_version`, `zero_stage`, …).
    pub values: BTreeMap<String, Value>,
    /// `ACCELERATE_CONFIG_DS_FIELDS`.
    pub ds_fields: String,
    /// What was defaulted because no config file was found (accelerate's warning lines).
    pub defaulted: Vec<String>,
    /// [`Machine::own_ranks`]: this node's rank count when nodes differ.
    pub own_ranks: Option<u32>,
    /// `num_processes` was given (flag, environment or config file), not defaulted.
    pub num_processes_given: bool,
}

/// accelerate's argparse defaults for section keys (None-defaults are absent).
const CLI_DEFAULTS: &[(&str, ArgDefault)] = &[
    ("fsdp_version", ArgDefault::S("1")),
    ("fsdp_offload_params", ArgDefault::S("false")),
    ("fsdp_min_num_params", ArgDefault::I(100_000_000)),
    ("fsdp_sharding_strategy", ArgDefault::S("FULL_SHARD")),
    ("fsdp_reshard_after_forward", ArgDefault::S("true")),
    ("fsdp_forward_prefetch", ArgDefault::S("false")),
    ("fsdp_use_orig_params", ArgDefault::S("true")),
    ("fsdp_cpu_ram_efficient_loading", ArgDefault::S("true")),
    ("fsdp_sync_module_states", ArgDefault::S("true")),
    ("fsdp_activation_checkpointing", ArgDefault::S("false")),
    (
        "fsdp_activation_checkpointing_offload",
        ArgDefault::S("false"),
    ),
    ("megatron_lm_tp_degree", ArgDefault::I(1)),
    ("megatron_lm_pp_degree", ArgDefault::I(1)),
    ("megatron_lm_gradient_clipping", ArgDefault::F(1.0)),
    ("megatron_lm_use_custom_fsdp", ArgDefault::B(false)),
    ("megatron_lm_no_load_optim", ArgDefault::B(false)),
    ("megatron_lm_eod_mask_loss", ArgDefault::B(false)),
    (
        "megatron_lm_overlap_cpu_optimizer_d2h_h2d",
        ArgDefault::B(false),
    ),
    ("megatron_lm_no_save_optim", ArgDefault::B(false)),
    ("megatron_lm_optimizer_cpu_offload", ArgDefault::B(false)),
    (
        "megatron_lm_use_precision_aware_optimizer",
        ArgDefault::B(false),
    ),
    ("dynamo_mode", ArgDefault::S("default")),
    ("dynamo_use_fullgraph", ArgDefault::B(false)),
    ("dynamo_use_dynamic", ArgDefault::B(false)),
    ("dynamo_use_regional_compilation", ArgDefault::B(false)),
    ("fp8_use_autocast_during_eval", ArgDefault::B(false)),
    ("fp8_margin", ArgDefault::I(0)),
    ("fp8_interval", ArgDefault::I(1)),
    ("fp8_format", ArgDefault::S("HYBRID")),
    ("fp8_amax_history_len", ArgDefault::I(1024)),
    ("fp8_amax_compute_algo", ArgDefault::S("most_recent")),
    ("fp8_opt_level", ArgDefault::S("O2")),
    ("fp8_enable_fsdp_float8_all_gather", ArgDefault::I(1)),
    ("fp8_pad_inner_dim", ArgDefault::I(1)),
    ("parallelism_config_dp_replicate_size", ArgDefault::I(1)),
    ("parallelism_config_dp_shard_size", ArgDefault::I(1)),
    ("parallelism_config_tp_size", ArgDefault::I(1)),
    ("parallelism_config_cp_size", ArgDefault::I(1)),
    ("parallelism_config_cp_backend", ArgDefault::S("torch")),
    (
        "parallelism_config_cp_comm_strategy",
        ArgDefault::S("allgather"),
    ),
    ("parallelism_config_sp_size", ArgDefault::I(1)),
    ("parallelism_config_sp_backend", ArgDefault::S("deepspeed")),
    (
        "parallelism_config_sp_seq_length_is_variable",
        ArgDefault::B(true),
    ),
    (
        "parallelism_config_sp_attn_implementation",
        ArgDefault::S("sdpa"),
    ),
];

#[derive(Debug, Clone, Copy)]
enum ArgDefault {
    S(&'static str),
    I(i64),
    F(f64),
    B(bool),
}

impl ArgDefault {
    fn value(self) -> Value {
        match self {
            ArgDefault::S(s) => Value::from(s),
            ArgDefault::I(i) => Value::from(i),
            ArgDefault::F(f) => Value::from(f),
            ArgDefault::B(b) => Value::from(b),
        }
    }
}

/// Python's `str()` of a value as accelerate holds it.
pub fn py_str(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
                if f.fract() == 0.0 && f.abs() < 1e16 {
                    format!("{f:.1}")
                } else {
                    format!("{f}")
                }
            } else {
                n.to_string()
            }
        }
        Value::String(s) => s.clone(),
        Value::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .map(|i| match i {
                    Value::String(s) => format!("'{s}'"),
                    other => py_str(other),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Object(_) => v.to_string(),
    }
}

fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => matches!(
            s.to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "y" | "on" | "t"
        ),
        Some(_) => true,
    }
}

fn as_u32(v: Option<&Value>) -> Option<u32> {
    match v? {
        Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Given by a file, the environment or the command line, not defaulted or derived.
fn given(view: &View, key: &str) -> bool {
    view.given.contains_key(key)
}

/// FSDP1 and FSDP2 read different keys and values (accelerate's
/// `utils/dataclasses.py::FullyShardedDataParallelPlugin.__post_init__`): under FSDP2
/// `reshard_after_forward` is a bool (a strategy name is a ValueError in every rank) and
/// `sharding_strategy` is ignored, so an FSDP1 strategy left in the file silently becomes full
/// resharding; under FSDP1 a bool is an error. Refused before any rank starts, the way
/// `accel-config to-fsdp2` would have converted it named.
fn fsdp_version_fits(
    view: &View,
    values: &BTreeMap<String, Value>,
    version: u32,
) -> Result<(), String> {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let explicit = |k: &str| given(view, &format!("fsdp_config.{k}"));
    let reshard = values
        .get("fsdp_reshard_after_forward")
        .filter(|_| explicit("fsdp_reshard_after_forward"))
        .map(text);
    let strategy = values
        .get("fsdp_sharding_strategy")
        .filter(|_| explicit("fsdp_sharding_strategy"))
        .map(text);
    let as_bool = |s: &str| match s.to_ascii_lowercase().as_str() {
        "y" | "yes" | "t" | "true" | "on" | "1" => Some(true),
        "n" | "no" | "f" | "false" | "off" | "0" => Some(false),
        _ => None,
    };
    // FSDP1's strategy as FSDP2's reshard_after_forward, as accelerate's to_fsdp2 maps it.
    let fsdp2_of = |s: &str| {
        matches!(
            s.to_ascii_uppercase().as_str(),
            "FULL_SHARD" | "HYBRID_SHARD" | "1" | "4"
        )
    };
    let hint = "`accel-config to-fsdp2 --config_file FILE --overwrite` converts an FSDP1 file";
    if version == 2 {
        if let Some(v) = &reshard {
            if as_bool(v).is_none() {
                return Err(format!(
                    "fsdp_config.fsdp_reshard_after_forward is `{v}`, an FSDP1 sharding strategy, but fsdp_version is 2: FSDP2 takes true or false ({hint})"
                ));
            }
        }
        if let Some(st) = &strategy {
            let effective = reshard.as_deref().and_then(as_bool).unwrap_or(true);
            if fsdp2_of(st) != effective {
                return Err(format!(
                    "fsdp_config.fsdp_sharding_strategy is `{st}` but fsdp_version is 2, which ignores it and reshards {}: set fsdp_reshard_after_forward: {} instead ({hint})",
                    if effective { "after every forward" } else { "never after forward" },
                    fsdp2_of(st)
                ));
            }
        }
    } else if let Some(v) = &reshard {
        if as_bool(v).is_some() && !v.chars().all(|c| c.is_ascii_digit()) {
            return Err(format!(
                "fsdp_config.fsdp_reshard_after_forward is `{v}` but fsdp_version is 1: FSDP1 takes a sharding strategy (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2); set fsdp_version: 2 for a bool"
            ));
        }
    }
    Ok(())
}

/// The config's sections flattened into accelerate's argument names over its argparse defaults,
/// and the config as a map.
fn flatten_sections(map: &Map<String, Value>) -> BTreeMap<String, Value> {
    let mut values: BTreeMap<String, Value> = CLI_DEFAULTS
        .iter()
        .map(|(k, d)| (k.to_string(), d.value()))
        .collect();
    for (section, inner) in map {
        let Value::Object(inner) = inner else {
            continue;
        };
        for (key, value) in inner {
            let name = match section.as_str() {
                "fsdp_config" if !key.starts_with("fsdp") => format!("fsdp_{key}"),
                "fp8_config" if !key.starts_with("fp8") => format!("fp8_{key}"),
                "dynamo_config" if !key.starts_with("dynamo_") => format!("dynamo_{key}"),
                _ => key.clone(),
            };
            values.insert(name, value.clone());
        }
    }
    fix_fp8(&mut values);
    values
}

/// Inputs of the merge besides the resolved config.
pub struct MergeInput<'a> {
    /// The resolved config ([`crate::config::Resolved::view`]).
    pub view: &'a View,
    /// The config file that was read, if any (for `ACCELERATE_CONFIG_DS_FIELDS` in file order).
    pub loaded: Option<&'a Loaded>,
    pub paradigm: Paradigm,
    pub num_cpu_threads_per_process: Option<u32>,
    pub machine: Machine,
    pub env: &'a Environment,
}

impl LaunchArgs {
    /// accelerate's `_validate_launch_command` and `launch_command` launcher choice, on resolved values.
    pub fn merge(input: MergeInput<'_>) -> Result<LaunchArgs, ArgsError> {
        let view = input.view;
        let p = input.paradigm;
        if [p.multi_gpu, p.cpu, p.tpu, p.use_deepspeed, p.use_fsdp]
            .iter()
            .filter(|b| **b)
            .count()
            > 1
        {
            return Err(ArgsError::Invalid(
                "You can only use one of `--cpu`, `--multi_gpu`, `--tpu`, `--use_deepspeed`, `--use_fsdp` at a time.".into(),
            ));
        }
        let np_explicit = given(view, "num_processes");
        let np_value = Some(view.config.num_processes);
        if p.multi_gpu && np_explicit && np_value.is_some_and(|n| n < 2) {
            return Err(ArgsError::Invalid(
                "You need to use at least 2 processes to use `--multi_gpu`.".into(),
            ));
        }
        let mut a = LaunchArgs::from_view(view, p, flatten_sections(&view.map));
        let has_file = input.loaded.is_some()
            || view
                .given
                .values()
                .any(|o| matches!(o, Origin::File { .. }));
        a.own_ranks = input.machine.own_ranks;
        a.num_processes_given = np_explicit || has_file;
        if has_file {
            a.apply_file(p, &view.map, np_value)?;
        } else {
            a.embedded_default(&input, np_explicit, np_value);
        }
        if a.distributed_type == DistributedType::MULTI_CPU && !p.any_platform() {
            a.use_cpu = true;
        }
        a.check_world(p)?;
        a.num_cpu_threads_per_process = a.threads(&input);
        a.choose_path(&input)?;
        Ok(a)
    }

    /// The merged arguments before the file or the embedded default decides the rest.
    fn from_view(view: &View, p: Paradigm, values: BTreeMap<String, Value>) -> LaunchArgs {
        let c = &view.config;
        let mut a = LaunchArgs {
            path: LaunchPath::Simple,
            distributed_type: c.distributed_type,
            multi_gpu: p.multi_gpu,
            use_fsdp: p.use_fsdp,
            use_deepspeed: p.use_deepspeed,
            use_megatron_lm: p.use_megatron_lm,
            use_parallelism_config: p.use_parallelism_config,
            cpu_flag: p.cpu,
            use_cpu: p.cpu || c.use_cpu,
            debug: c.debug,
            gpu_ids: c.gpu_ids.clone(),
            mixed_precision: c
                .mixed_precision
                .map_or("no", |m| m.as_str())
                .to_ascii_lowercase(),
            num_processes: 1,
            num_machines: c.num_machines.max(1),
            machine_rank: Some(c.machine_rank),
            main_process_ip: c.main_process_ip.clone(),
            main_process_port: c.main_process_port,
            rdzv_backend: c.rdzv_backend.clone(),
            same_network: c.same_network,
            num_cpu_threads_per_process: 1,
            enable_cpu_affinity: c.enable_cpu_affinity,
            values,
            ds_fields: String::new(),
            defaulted: Vec::new(),
            own_ranks: None,
            num_processes_given: false,
        };
        if !given(view, "machine_rank") && a.num_machines > 1 {
            a.machine_rank = None;
        }
        a
    }

    /// A config file's run: its distributed type picks the paradigm unless a flag did, and its
    /// num_processes is required.
    fn apply_file(
        &mut self,
        p: Paradigm,
        map: &Map<String, Value>,
        np_value: Option<i64>,
    ) -> Result<(), ArgsError> {
        let a = self;
        let dt = a.distributed_type;
        if !p.any_platform() {
            a.use_deepspeed = dt == DistributedType::DEEPSPEED;
            a.multi_gpu = dt.is_multi_accelerator();
            a.use_fsdp = dt == DistributedType::FSDP;
            a.use_megatron_lm = dt == DistributedType::MEGATRON_LM;
            if dt == DistributedType::XLA {
                return Err(ArgsError::Unsupported("TPU (distributed_type XLA)"));
            }
            a.use_parallelism_config = map
                .get("parallelism_config")
                .is_some_and(|v| v.as_object().is_some_and(|o| !o.is_empty()));
        }
        if a.gpu_ids.is_none() {
            a.gpu_ids = Some("all".into());
        }
        let ids = a.gpu_ids.as_deref().unwrap_or("all");
        if ids.split(',').count() < 2 && ids != "all" && a.multi_gpu && a.num_machines <= 1 {
            return Err(ArgsError::Invalid("Less than two GPU ids were configured and tried to run on multiple GPUs. Please ensure at least two are specified for `--gpu_ids`, or use `--gpu_ids='all'`.".into()));
        }
        match np_value {
            Some(-1) | None => return Err(ArgsError::NumProcessesNeeded),
            Some(n) => a.num_processes = u32::try_from(n).unwrap_or(1),
        }
        Ok(())
    }

    /// No config file: accelerate's embedded default, every visible GPU, or on a machine without
    /// GPUs two CPU ranks (one on a single-core machine), so the distributed path is what runs.
    fn embedded_default(
        &mut self,
        input: &MergeInput<'_>,
        np_explicit: bool,
        np_value: Option<i64>,
    ) {
        let a = self;
        let (view, p) = (input.view, input.paradigm);
        let gpus = input.machine.gpus;
        let nodes = input.machine.nodes.max(1);
        let cpu_mode = p.cpu || gpus == 0;
        if !np_explicit {
            let per_node = if let Some(n) = input.machine.own_ranks {
                n
            } else if let Some(n) = input.machine.procs_per_node {
                n
            } else if cpu_mode {
                if input.machine.physical_cores >= 2 {
                    2
                } else {
                    1
                }
            } else {
                gpus
            };
            // This node's own count stands for every node of the --num_machines it says.
            let nodes = if input.machine.own_ranks.is_some() {
                a.num_machines.max(nodes)
            } else {
                nodes
            };
            a.num_processes = per_node * nodes;
            a.defaulted.push(if nodes > 1 {
                format!(
                    "`--num_processes` was set to a value of `{}` ({per_node} per node on {nodes} nodes)",
                    a.num_processes
                )
            } else {
                format!(
                    "`--num_processes` was set to a value of `{}`",
                    a.num_processes
                )
            });
        } else {
            a.num_processes = np_value.and_then(|n| u32::try_from(n).ok()).unwrap_or(1);
        }
        if cpu_mode && !p.any_platform() {
            a.use_cpu = true;
        }
        if !p.any_platform() && !cpu_mode && a.num_processes > 1 && gpus > 1 {
            a.multi_gpu = true;
        }
        if !given(view, "num_machines") && nodes == 1 {
            a.defaulted
                .push("`--num_machines` was set to a value of `1`".into());
        }
        if !given(view, "mixed_precision") {
            a.defaulted
                .push("`--mixed_precision` was set to a value of `'no'`".into());
        }
        if !values_has(&a.values, "dynamo_backend") {
            a.defaulted
                .push("`--dynamo_backend` was set to a value of `'no'`".into());
        }
    }

    /// What the merged world must satisfy.
    fn check_world(&self, p: Paradigm) -> Result<(), ArgsError> {
        let a = self;
        if p.tpu {
            return Err(ArgsError::Unsupported("TPU (--tpu)"));
        }
        if p.use_parallelism_config && (!a.use_fsdp || a.fsdp_version() == 1) {
            return Err(ArgsError::Invalid("You cannot use `--use_parallelism_config` without `--use_fsdp` and `--fsdp_version=2`. ".into()));
        }
        if a.num_processes == 0 {
            return Err(ArgsError::Invalid(
                "num_processes is 0: nothing to launch".into(),
            ));
        }
        // On many machines a machine_rank at or beyond num_machines is a spare (accel-launch's
        // control plane); one machine has none.
        if let Some(r) = a
            .machine_rank
            .filter(|r| *r >= a.num_machines && a.num_machines == 1)
        {
            return Err(ArgsError::Invalid(format!(
                "machine_rank ({r}) must be below num_machines ({}): machines are ranked 0 to {}",
                a.num_machines,
                a.num_machines - 1
            )));
        }
        // Uneven nodes each say their own count; the join checks that they add up.
        if a.own_ranks.is_none() && a.num_processes % a.num_machines != 0 {
            return Err(ArgsError::Invalid(format!(
            "num_processes ({}) is the total over all machines and must be a multiple of num_machines ({})",
            a.num_processes, a.num_machines
        )));
        }

        Ok(())
    }

    /// Threads per rank (`_validate_launch_command`'s num_cpu_threads_per_process block).
    fn threads(&self, input: &MergeInput<'_>) -> u32 {
        let a = self;
        let omp = input
            .env
            .non_empty(env_vars::OMP_NUM_THREADS)
            .and_then(|v| v.trim().parse::<u32>().ok());
        match input.num_cpu_threads_per_process {
            Some(n) => n,
            None => {
                let mut n = omp.unwrap_or(1);
                if a.use_cpu && omp.unwrap_or(0) == 0 {
                    let local = [
                        env_vars::MPI_LOCALNRANKS,
                        env_vars::OMPI_COMM_WORLD_LOCAL_SIZE,
                        env_vars::MV2_COMM_WORLD_LOCAL_SIZE,
                    ]
                    .iter()
                    .find_map(|k| input.env.non_empty(k).and_then(|v| v.parse::<u32>().ok()))
                    .unwrap_or(a.own_ranks.unwrap_or(
                        (a.num_processes / a.num_machines.max(input.machine.nodes)).max(1),
                    ));
                    let threads = input.machine.physical_cores / local.max(1);
                    if threads > 1 {
                        n = threads;
                    }
                }
                n
            }
        }
    }

    /// accelerate's launcher choice (`launch_command`) and the checks of that launcher.
    fn choose_path(&mut self, input: &MergeInput<'_>) -> Result<(), ArgsError> {
        let view = input.view;
        let a = self;
        a.path = if a.use_deepspeed && !a.cpu_flag {
            LaunchPath::DeepSpeed
        } else if (a.use_fsdp || a.use_megatron_lm || a.multi_gpu) && !a.cpu_flag {
            LaunchPath::Torchrun
        } else {
            LaunchPath::Simple
        };
        if a.path == LaunchPath::DeepSpeed {
            let mut fields: Vec<String> = match input.loaded {
                Some(l) => l
                    .map
                    .get("deepspeed_config")
                    .and_then(Value::as_object)
                    .map(|o| o.keys().cloned().collect())
                    .unwrap_or_default(),
                None => Vec::new(),
            };
            if matches!(
                view.given.get("mixed_precision"),
                Some(Origin::File { .. } | Origin::Env(_))
            ) {
                fields.push("mixed_precision".into());
            }
            a.ds_fields = fields.join(",").to_lowercase();
        }
        if a.path == LaunchPath::Torchrun && a.use_fsdp {
            let ram = truthy(a.values.get("fsdp_cpu_ram_efficient_loading"));
            let sync = truthy(a.values.get("fsdp_sync_module_states"));
            if ram && !sync {
                return Err(ArgsError::Invalid("When using `--fsdp_cpu_ram_efficient_loading` set `--fsdp_sync_module_states` to `True`".into()));
            }
        }
        if a.use_fsdp {
            fsdp_version_fits(view, &a.values, a.fsdp_version()).map_err(ArgsError::Invalid)?;
        }
        Ok(())
    }

    fn fsdp_version(&self) -> u32 {
        self.values
            .get("fsdp_version")
            .and_then(|v| as_u32(Some(v)))
            .unwrap_or(1)
    }

    /// Whether ranks are started as torchrun workers (every path but a single simple child).
    pub fn num_local_processes(&self) -> u32 {
        self.own_ranks
            .unwrap_or((self.num_processes / self.num_machines).max(1))
    }

    fn val(&self, key: &str) -> Option<&Value> {
        self.values.get(key).filter(|v| !v.is_null())
    }

    fn s(&self, key: &str) -> String {
        self.val(key).map(py_str).unwrap_or_else(|| "None".into())
    }

    /// The variables accelerate 1.15 exports for this run (`accelerate/utils/launch.py`:
    /// `prepare_simple_launcher_cmd_env`, `prepare_multi_gpu_env`, `prepare_deepspeed_cmd_env`), with accel's fixes.
    /// `cwd` is the launch directory (DeepSpeed's `PYTHONPATH`).
    pub fn accelerate_env(&self, env: &Environment, cwd: &Path) -> Result<EnvMap, ArgsError> {
        let mut m = EnvMap::new();
        let set = |m: &mut EnvMap, k: &str, v: String| {
            m.insert(k.to_string(), v);
        };
        if self.path == LaunchPath::Simple {
            set(
                &mut m,
                env_vars::ACCELERATE_USE_CPU,
                py_str(&Value::Bool(self.use_cpu)),
            );
        }
        if self.debug {
            set(&mut m, env_vars::ACCELERATE_DEBUG_MODE, "true".into());
        }
        if let Some(ids) = self.gpu_ids.as_deref().filter(|i| *i != "all") {
            set(&mut m, env_vars::CUDA_VISIBLE_DEVICES, ids.to_string());
        }
        if self.path == LaunchPath::Simple && self.use_cpu {
            set(
                &mut m,
                env_vars::KMP_AFFINITY,
                "granularity=fine,compact,1,0".into(),
            );
            set(&mut m, env_vars::KMP_BLOCKTIME, "1".into());
        }
        let mp = self.mixed_precision.to_ascii_lowercase();
        if !crate::config::schema::MIXED_PRECISION.contains(&mp.as_str()) {
            // accelerate's message verbatim (`utils/launch.py::prepare_simple_launcher_cmd_env`), which lists
            // `PrecisionType` in its enum order.
            return Err(ArgsError::Invalid(format!(
                "Unknown mixed_precision mode: {mp}. Choose between ['no', 'fp8', 'fp16', 'bf16']."
            )));
        }
        if self.path == LaunchPath::DeepSpeed {
            let here = cwd.display().to_string();
            let pp = match env.non_empty(env_vars::PYTHONPATH) {
                Some(existing) => format!("{existing}:{here}"),
                None => here,
            };
            set(&mut m, env_vars::PYTHONPATH, pp);
        }
        set(&mut m, env_vars::ACCELERATE_MIXED_PRECISION, mp.clone());
        if mp == "fp8" {
            self.fp8_env(&mut m);
        }
        if self.path != LaunchPath::DeepSpeed {
            let backend = self
                .val("dynamo_backend")
                .map(py_str)
                .unwrap_or_else(|| "no".into())
                .to_ascii_uppercase();
            if !crate::config::schema::DYNAMO_BACKENDS.contains(&backend.as_str()) {
                return Err(ArgsError::Invalid(format!(
                    "Unknown dynamo backend: {backend}. Choose between {:?}.",
                    crate::config::schema::DYNAMO_BACKENDS
                )));
            }
            set(&mut m, env_vars::ACCELERATE_DYNAMO_BACKEND, backend);
            set(
                &mut m,
                env_vars::ACCELERATE_DYNAMO_MODE,
                self.s("dynamo_mode"),
            );
            for (var, key) in [
                (
                    env_vars::ACCELERATE_DYNAMO_USE_FULLGRAPH,
                    "dynamo_use_fullgraph",
                ),
                (
                    env_vars::ACCELERATE_DYNAMO_USE_DYNAMIC,
                    "dynamo_use_dynamic",
                ),
                (
                    env_vars::ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION,
                    "dynamo_use_regional_compilation",
                ),
            ] {
                set(&mut m, var, py_str(&Value::Bool(truthy(self.val(key)))));
            }
        }
        if self.path == LaunchPath::Torchrun && self.use_fsdp {
            self.fsdp_env(&mut m);
        }
        if self.path == LaunchPath::Torchrun && self.use_megatron_lm {
            self.megatron_env(&mut m);
        }
        if self.path == LaunchPath::DeepSpeed {
            self.deepspeed_env(&mut m);
        }
        if self.path != LaunchPath::DeepSpeed {
            set(
                &mut m,
                env_vars::OMP_NUM_THREADS,
                self.num_cpu_threads_per_process.to_string(),
            );
        }
        if self.enable_cpu_affinity {
            set(&mut m, env_vars::ACCELERATE_CPU_AFFINITY, "1".into());
        }
        if self.use_parallelism_config && self.path != LaunchPath::Simple {
            self.parallelism_env(&mut m);
        }
        Ok(m)
    }

    fn fsdp_env(&self, m: &mut EnvMap) {
        let lower = |k: &str| self.s(k).to_lowercase();
        m.insert(env_vars::ACCELERATE_USE_FSDP.into(), "true".into());
        m.insert("FSDP_VERSION".into(), self.s("fsdp_version"));
        m.insert(
            "FSDP_SHARDING_STRATEGY".into(),
            self.s("fsdp_sharding_strategy"),
        );
        m.insert(
            "FSDP_RESHARD_AFTER_FORWARD".into(),
            lower("fsdp_reshard_after_forward"),
        );
        m.insert("FSDP_OFFLOAD_PARAMS".into(), lower("fsdp_offload_params"));
        m.insert("FSDP_MIN_NUM_PARAMS".into(), self.s("fsdp_min_num_params"));
        for (var, key) in [
            ("FSDP_AUTO_WRAP_POLICY", "fsdp_auto_wrap_policy"),
            (
                "FSDP_TRANSFORMER_CLS_TO_WRAP",
                "fsdp_transformer_layer_cls_to_wrap",
            ),
            ("FSDP_BACKWARD_PREFETCH", "fsdp_backward_prefetch"),
            ("FSDP_STATE_DICT_TYPE", "fsdp_state_dict_type"),
        ] {
            if self.val(key).is_some() {
                m.insert(var.into(), self.s(key));
            }
        }
        for (var, key) in [
            ("FSDP_FORWARD_PREFETCH", "fsdp_forward_prefetch"),
            ("FSDP_USE_ORIG_PARAMS", "fsdp_use_orig_params"),
            (
                "FSDP_CPU_RAM_EFFICIENT_LOADING",
                "fsdp_cpu_ram_efficient_loading",
            ),
            ("FSDP_SYNC_MODULE_STATES", "fsdp_sync_module_states"),
            (
                "FSDP_ACTIVATION_CHECKPOINTING",
                "fsdp_activation_checkpointing",
            ),
            (
                "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD",
                "fsdp_activation_checkpointing_offload",
            ),
        ] {
            m.insert(var.into(), lower(key));
        }
        if self.val("fsdp_ignored_modules").is_some() {
            m.insert(
                "FSDP_IGNORED_MODULES".into(),
                self.s("fsdp_ignored_modules"),
            );
        }
    }

    fn megatron_env(&self, m: &mut EnvMap) {
        m.insert(env_vars::ACCELERATE_USE_MEGATRON_LM.into(), "true".into());
        for (key, value) in &self.values {
            if let Some(suffix) = key.strip_prefix("megatron_lm_") {
                if value.is_null() {
                    continue;
                }
                m.insert(
                    format!("MEGATRON_LM_{}", suffix.to_ascii_uppercase()),
                    py_str(value),
                );
            }
        }
    }

    fn deepspeed_env(&self, m: &mut EnvMap) {
        m.insert(
            env_vars::ACCELERATE_CONFIG_DS_FIELDS.into(),
            self.ds_fields.clone(),
        );
        m.insert(env_vars::ACCELERATE_USE_DEEPSPEED.into(), "true".into());
        let pairs: [(&str, &str, bool); 11] = [
            ("ACCELERATE_DEEPSPEED_ZERO_STAGE", "zero_stage", false),
            (
                "ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
                "gradient_accumulation_steps",
                false,
            ),
            ("ACCELERATE_GRADIENT_CLIPPING", "gradient_clipping", true),
            (
                "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE",
                "offload_optimizer_device",
                true,
            ),
            (
                "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE",
                "offload_param_device",
                true,
            ),
            ("ACCELERATE_DEEPSPEED_ZERO3_INIT", "zero3_init_flag", true),
            (
                "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL",
                "zero3_save_16bit_model",
                true,
            ),
            (
                "ACCELERATE_DEEPSPEED_CONFIG_FILE",
                "deepspeed_config_file",
                false,
            ),
            (
                "ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES",
                "deepspeed_moe_layer_cls_names",
                false,
            ),
            // accelerate never exports these two although its plugin reads them (accel's fix).
            (
                "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH",
                "offload_optimizer_nvme_path",
                false,
            ),
            (
                "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH",
                "offload_param_nvme_path",
                false,
            ),
        ];
        for (var, key, lower) in pairs {
            if self.val(key).is_some() {
                let v = self.s(key);
                m.insert(var.into(), if lower { v.to_lowercase() } else { v });
            }
        }
    }

    fn fp8_env(&self, m: &mut EnvMap) {
        for (key, value) in &self.values {
            let Some(suffix) = key.strip_prefix("fp8_") else {
                continue;
            };
            if value.is_null() {
                continue;
            }
            if suffix == "override_linear_precision" {
                let parts = override_parts(value);
                for (name, v) in ["FPROP", "DGRAD", "WGRAD"].iter().zip(parts) {
                    m.insert(
                        format!("ACCELERATE_FP8_OVERRIDE_{name}"),
                        py_str(&Value::Bool(v)),
                    );
                }
                continue;
            }
            m.insert(
                format!("ACCELERATE_FP8_{}", suffix.to_ascii_uppercase()),
                py_str(value),
            );
        }
        if !self.values.contains_key("fp8_override_linear_precision") {
            for name in ["FPROP", "DGRAD", "WGRAD"] {
                m.insert(format!("ACCELERATE_FP8_OVERRIDE_{name}"), "False".into());
            }
        }
    }

    fn parallelism_env(&self, m: &mut EnvMap) {
        m.insert(
            env_vars::ACCELERATE_USE_PARALLELISM_CONFIG.into(),
            "true".into(),
        );
        for k in [
            "DP_REPLICATE_SIZE",
            "DP_SHARD_SIZE",
            "TP_SIZE",
            "CP_SIZE",
            "CP_BACKEND",
            "SP_SIZE",
            "SP_BACKEND",
        ] {
            m.insert(
                format!("PARALLELISM_CONFIG_{k}"),
                self.s(&format!("parallelism_config_{}", k.to_lowercase())),
            );
        }
        let num = |k: &str| self.val(k).and_then(|v| as_u32(Some(v))).unwrap_or(1);
        if num("parallelism_config_cp_size") > 1 {
            m.insert(
                "PARALLELISM_CONFIG_CP_COMM_STRATEGY".into(),
                self.s("parallelism_config_cp_comm_strategy"),
            );
        }
        if num("parallelism_config_sp_size") > 1 {
            for k in [
                "SP_SEQ_LENGTH",
                "SP_SEQ_LENGTH_IS_VARIABLE",
                "SP_ATTN_IMPLEMENTATION",
            ] {
                m.insert(
                    format!("PARALLELISM_CONFIG_{k}"),
                    self.s(&format!("parallelism_config_{}", k.to_lowercase())),
                );
            }
        }
    }
}

fn values_has(values: &BTreeMap<String, Value>, key: &str) -> bool {
    values.get(key).is_some_and(|v| !v.is_null())
}

/// accelerate's fp8 plumbing bugs, fixed (`accelerate/utils/launch.py::setup_fp8_env`): questionnaire key names mapped onto the
/// names the child reads, the backend upper-cased.
fn fix_fp8(values: &mut BTreeMap<String, Value>) {
    for (from, to) in [
        ("fp8_amax_history_length", "fp8_amax_history_len"),
        ("fp8_amax_compute_algorithm", "fp8_amax_compute_algo"),
        ("fp8_optimization_level", "fp8_opt_level"),
    ] {
        if let Some(v) = values.remove(from) {
            if !v.is_null() {
                values.insert(to.into(), v);
            }
        }
    }
    if let Some(Value::String(b)) = values.get_mut("fp8_backend") {
        *b = b.to_ascii_uppercase();
    }
}

/// `(fprop, dgrad, wgrad)` from a list, a comma string or a `(false, false, true)` string.
fn override_parts(v: &Value) -> [bool; 3] {
    let items: Vec<bool> = match v {
        Value::Array(a) => a.iter().map(|x| truthy(Some(x))).collect(),
        Value::String(s) => s
            .trim_matches(|c| c == '(' || c == ')' || c == '[' || c == ']')
            .split(',')
            .map(|x| truthy(Some(&Value::from(x.trim()))))
            .collect(),
        Value::Bool(b) => vec![*b; 3],
        _ => Vec::new(),
    };
    [
        items.first().copied().unwrap_or(false),
        items.get(1).copied().unwrap_or(false),
        items.get(2).copied().unwrap_or(false),
    ]
}

/// The resolved config's nested map, for callers that need to inspect a section.
pub fn section<'a>(map: &'a Map<String, Value>, name: &str) -> Option<&'a Map<String, Value>> {
    map.get(name).and_then(Value::as_object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{normalize, Document, Resolved};

    fn args(yaml: &str, p: Paradigm) -> LaunchArgs {
        let doc = Document::parse(Path::new("/t/c.yaml"), yaml.into()).unwrap();
        let loaded = normalize(doc).unwrap();
        let env = Environment::default();
        let r = Resolved::resolve(Some(&loaded), &env, &[]).unwrap();
        LaunchArgs::merge(MergeInput {
            view: &r.view().unwrap(),
            loaded: Some(&loaded),
            paradigm: p,
            num_cpu_threads_per_process: None,
            machine: Machine {
                gpus: 0,
                physical_cores: 2,
                nodes: 1,
                procs_per_node: None,
                own_ranks: None,
            },
            env: &env,
        })
        .unwrap()
    }

    #[test]
    fn py_str_matches_python() {
        assert_eq!(py_str(&Value::from(1.0)), "1.0");
        assert_eq!(py_str(&Value::from(0.5)), "0.5");
        assert_eq!(py_str(&Value::from(true)), "True");
        assert_eq!(py_str(&Value::from(3)), "3");
    }

    #[test]
    fn fsdp_env_has_defaults_and_renamed_key() {
        let a = args(
            "distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_version: 2\n  fsdp_transformer_layer_cls_to_wrap: Block\n  fsdp_offload_params: false\n",
            Paradigm::default(),
        );
        assert_eq!(a.path, LaunchPath::Torchrun);
        let env = a
            .accelerate_env(&Environment::default(), Path::new("/w"))
            .unwrap();
        assert_eq!(env["FSDP_VERSION"], "2");
        assert_eq!(env["FSDP_TRANSFORMER_CLS_TO_WRAP"], "Block");
        assert_eq!(env["FSDP_MIN_NUM_PARAMS"], "100000000");
        assert_eq!(env["FSDP_OFFLOAD_PARAMS"], "false");
        assert_eq!(env["ACCELERATE_DYNAMO_BACKEND"], "NO");
        assert!(!env.contains_key("ACCELERATE_USE_CPU"));
    }

    #[test]
    fn deepspeed_exports_nvme_paths_and_fields_in_file_order() {
        let a = args(
            "distributed_type: DEEPSPEED\nnum_processes: 2\nmixed_precision: bf16\ndeepspeed_config:\n  zero_stage: 3\n  offload_param_nvme_path: /nvme\n  gradient_clipping: 1.0\n",
            Paradigm::default(),
        );
        let env = a
            .accelerate_env(&Environment::default(), Path::new("/w"))
            .unwrap();
        assert_eq!(
            env["ACCELERATE_CONFIG_DS_FIELDS"],
            "zero_stage,offload_param_nvme_path,gradient_clipping,mixed_precision"
        );
        assert_eq!(env["ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH"], "/nvme");
        assert_eq!(env["ACCELERATE_GRADIENT_CLIPPING"], "1.0");
        assert_eq!(env["PYTHONPATH"], "/w");
        assert!(!env.contains_key("ACCELERATE_DYNAMO_BACKEND"));
    }

    #[test]
    fn fp8_questionnaire_names_and_backend_case_are_fixed() {
        let a = args(
            "distributed_type: MULTI_GPU\nnum_processes: 2\nmixed_precision: fp8\nfp8_config:\n  backend: te\n  amax_history_length: 16\n  override_linear_precision: (false, true, false)\n",
            Paradigm::default(),
        );
        let env = a
            .accelerate_env(&Environment::default(), Path::new("/w"))
            .unwrap();
        assert_eq!(env["ACCELERATE_FP8_BACKEND"], "TE");
        assert_eq!(env["ACCELERATE_FP8_AMAX_HISTORY_LEN"], "16");
        assert!(!env.contains_key("ACCELERATE_FP8_AMAX_HISTORY_LENGTH"));
        assert_eq!(env["ACCELERATE_FP8_OVERRIDE_DGRAD"], "True");
        assert_eq!(env["ACCELERATE_FP8_OVERRIDE_FPROP"], "False");
    }

    #[test]
    fn multi_cpu_config_runs_n_cpu_ranks() {
        let a = args(
            "distributed_type: MULTI_CPU\nnum_processes: 4\n",
            Paradigm::default(),
        );
        assert_eq!(a.path, LaunchPath::Simple);
        assert_eq!(a.num_processes, 4);
        assert!(a.use_cpu);
        let env = a
            .accelerate_env(&Environment::default(), Path::new("/w"))
            .unwrap();
        assert_eq!(env["ACCELERATE_USE_CPU"], "True");
        assert_eq!(env["KMP_BLOCKTIME"], "1");
    }
}

/// The DeepSpeed launcher's `.deepspeed_env` (exported to every node through pdsh/ssh), with `vars`
/// merged in by name: accelerate appends its whole environment on every launch, so the file grows
/// without end; here each variable appears once. Values DeepSpeed would refuse (empty, or holding
/// `;`, a newline, `<`, `>` or a space) are left out and returned by name.
pub fn merge_deepspeed_env(existing: &str, vars: &EnvMap) -> (String, Vec<String>) {
    let bad = |s: &str| s.is_empty() || s.contains([';', '\n', '<', '>', ' ']);
    let mut skipped = Vec::new();
    let mut out: Vec<String> = existing
        .lines()
        .filter(|l| l.split_once('=').is_none_or(|(k, _)| !vars.contains_key(k)))
        .map(str::to_string)
        .collect();
    for (k, v) in vars {
        if bad(k) || bad(v) {
            skipped.push(k.clone());
        } else {
            out.push(format!("{k}={v}"));
        }
    }
    let mut text = out.join("\n");
    text.push('\n');
    (text, skipped)
}

#[cfg(test)]
mod ds_env_tests {
    use super::*;

    #[test]
    fn deepspeed_env_file_is_merged_not_appended() {
        let mut vars = EnvMap::new();
        vars.insert("ACCELERATE_USE_DEEPSPEED".into(), "true".into());
        vars.insert("BAD".into(), "a b".into());
        let (text, skipped) =
            merge_deepspeed_env("NCCL_DEBUG=INFO\nACCELERATE_USE_DEEPSPEED=old\n", &vars);
        assert_eq!(text, "NCCL_DEBUG=INFO\nACCELERATE_USE_DEEPSPEED=true\n");
        assert_eq!(skipped, ["BAD"]);
        let (again, _) = merge_deepspeed_env(&text, &vars);
        assert_eq!(again, text);
    }
}
