//! The typed view of a resolved config: what the launcher and the other tools consume. Built from the
//! validated, coerced value tree, so every field here already has the right type; keys a section holds
//! beyond the known ones are kept in `extra` (accelerate copies them into launch arguments as they are).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum ComputeEnvironment {
    #[default]
    #[serde(rename = "LOCAL_MACHINE")]
    LocalMachine,
    #[serde(rename = "AMAZON_SAGEMAKER")]
    AmazonSagemaker,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
pub enum DistributedType {
    #[default]
    NO,
    MULTI_CPU,
    MULTI_GPU,
    MULTI_NPU,
    MULTI_MLU,
    MULTI_SDAA,
    MULTI_MUSA,
    MULTI_XPU,
    DEEPSPEED,
    FSDP,
    XLA,
    MEGATRON_LM,
    MULTI_HPU,
    MULTI_NEURON,
}

impl DistributedType {
    pub fn as_str(self) -> &'static str {
        match self {
            DistributedType::NO => "NO",
            DistributedType::MULTI_CPU => "MULTI_CPU",
            DistributedType::MULTI_GPU => "MULTI_GPU",
            DistributedType::MULTI_NPU => "MULTI_NPU",
            DistributedType::MULTI_MLU => "MULTI_MLU",
            DistributedType::MULTI_SDAA => "MULTI_SDAA",
            DistributedType::MULTI_MUSA => "MULTI_MUSA",
            DistributedType::MULTI_XPU => "MULTI_XPU",
            DistributedType::DEEPSPEED => "DEEPSPEED",
            DistributedType::FSDP => "FSDP",
            DistributedType::XLA => "XLA",
            DistributedType::MEGATRON_LM => "MEGATRON_LM",
            DistributedType::MULTI_HPU => "MULTI_HPU",
            DistributedType::MULTI_NEURON => "MULTI_NEURON",
        }
    }

    /// The `MULTI_*` accelerator types that `accelerate launch` runs through torchrun as plain DDP.
    pub fn is_multi_accelerator(self) -> bool {
        matches!(
            self,
            DistributedType::MULTI_GPU
                | DistributedType::MULTI_NPU
                | DistributedType::MULTI_MLU
                | DistributedType::MULTI_SDAA
                | DistributedType::MULTI_MUSA
                | DistributedType::MULTI_XPU
                | DistributedType::MULTI_HPU
                | DistributedType::MULTI_NEURON
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MixedPrecision {
    No,
    Fp16,
    Bf16,
    Fp8,
}

impl MixedPrecision {
    pub fn as_str(self) -> &'static str {
        match self {
            MixedPrecision::No => "no",
            MixedPrecision::Fp16 => "fp16",
            MixedPrecision::Bf16 => "bf16",
            MixedPrecision::Fp8 => "fp8",
        }
    }
}

/// `reshard_after_forward`: FSDP2 takes a bool, FSDP1 a sharding strategy name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ReshardAfterForward {
    Bool(bool),
    Strategy(String),
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FsdpConfig {
    pub fsdp_version: Option<u8>,
    pub fsdp_reshard_after_forward: Option<ReshardAfterForward>,
    pub fsdp_offload_params: Option<bool>,
    pub fsdp_sharding_strategy: Option<String>,
    pub fsdp_auto_wrap_policy: Option<String>,
    pub fsdp_transformer_layer_cls_to_wrap: Option<String>,
    pub fsdp_min_num_params: Option<u64>,
    pub fsdp_backward_prefetch: Option<String>,
    pub fsdp_backward_prefetch_policy: Option<String>,
    pub fsdp_state_dict_type: Option<String>,
    pub fsdp_forward_prefetch: Option<bool>,
    pub fsdp_use_orig_params: Option<bool>,
    pub fsdp_cpu_ram_efficient_loading: Option<bool>,
    pub fsdp_sync_module_states: Option<bool>,
    pub fsdp_activation_checkpointing: Option<bool>,
    pub fsdp_activation_checkpointing_offload: Option<bool>,
    pub fsdp_ignored_modules: Option<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeepSpeedConfig {
    pub deepspeed_config_file: Option<String>,
    pub zero_stage: Option<u8>,
    pub offload_optimizer_device: Option<String>,
    pub offload_param_device: Option<String>,
    pub offload_optimizer_nvme_path: Option<String>,
    pub offload_param_nvme_path: Option<String>,
    pub gradient_accumulation_steps: Option<u64>,
    pub gradient_clipping: Option<f64>,
    pub zero3_init_flag: Option<bool>,
    pub zero3_save_16bit_model: Option<bool>,
    pub deepspeed_moe_layer_cls_names: Option<String>,
    pub deepspeed_multinode_launcher: Option<String>,
    pub deepspeed_hostfile: Option<String>,
    pub deepspeed_exclusion_filter: Option<String>,
    pub deepspeed_inclusion_filter: Option<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MegatronLmConfig {
    pub megatron_lm_tp_degree: Option<u64>,
    pub megatron_lm_pp_degree: Option<u64>,
    pub megatron_lm_num_micro_batches: Option<u64>,
    pub megatron_lm_sequence_parallelism: Option<bool>,
    pub megatron_lm_recompute_activations: Option<bool>,
    pub megatron_lm_use_distributed_optimizer: Option<bool>,
    pub megatron_lm_gradient_clipping: Option<f64>,
    pub megatron_lm_recompute_granularity: Option<String>,
    pub megatron_lm_recompute_method: Option<String>,
    pub megatron_lm_recompute_num_layers: Option<u64>,
    pub megatron_lm_decoder_last_pipeline_num_layers: Option<u64>,
    pub megatron_lm_expert_model_parallel_size: Option<u64>,
    pub megatron_lm_context_parallel_size: Option<u64>,
    pub megatron_lm_expert_tensor_parallel_size: Option<u64>,
    pub megatron_lm_attention_dropout: Option<f64>,
    pub megatron_lm_hidden_dropout: Option<f64>,
    pub megatron_lm_attention_backend: Option<String>,
    pub megatron_lm_attention_softmax_in_fp32: Option<bool>,
    pub megatron_lm_calculate_per_token_loss: Option<bool>,
    pub megatron_lm_use_rotary_position_embeddings: Option<bool>,
    pub megatron_lm_use_custom_fsdp: Option<bool>,
    pub megatron_lm_no_load_optim: Option<bool>,
    pub megatron_lm_no_save_optim: Option<bool>,
    pub megatron_lm_eod_mask_loss: Option<bool>,
    pub megatron_lm_overlap_cpu_optimizer_d2h_h2d: Option<bool>,
    pub megatron_lm_optimizer_cpu_offload: Option<bool>,
    pub megatron_lm_use_precision_aware_optimizer: Option<bool>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DynamoConfig {
    pub dynamo_backend: Option<String>,
    pub dynamo_mode: Option<String>,
    pub dynamo_use_fullgraph: Option<bool>,
    pub dynamo_use_dynamic: Option<bool>,
    pub dynamo_use_regional_compilation: Option<bool>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Fp8Config {
    pub backend: Option<String>,
    pub use_autocast_during_eval: Option<bool>,
    pub margin: Option<i64>,
    pub interval: Option<i64>,
    pub fp8_format: Option<String>,
    pub amax_history_len: Option<i64>,
    pub amax_compute_algo: Option<String>,
    pub override_linear_precision: Option<Value>,
    pub use_mxfp8_block_scaling: Option<bool>,
    pub opt_level: Option<String>,
    pub enable_fsdp_float8_all_gather: Option<bool>,
    pub pad_inner_dim: Option<bool>,
    pub amax_history_length: Option<i64>,
    pub amax_compute_algorithm: Option<String>,
    pub optimization_level: Option<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MpirunConfig {
    pub mpirun_hostfile: Option<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ParallelismConfig {
    pub parallelism_config_dp_replicate_size: Option<u64>,
    pub parallelism_config_dp_shard_size: Option<u64>,
    pub parallelism_config_tp_size: Option<u64>,
    pub parallelism_config_cp_size: Option<u64>,
    pub parallelism_config_cp_backend: Option<String>,
    pub parallelism_config_cp_comm_strategy: Option<String>,
    pub parallelism_config_sp_size: Option<u64>,
    pub parallelism_config_sp_backend: Option<String>,
    pub parallelism_config_sp_seq_length: Option<String>,
    pub parallelism_config_sp_seq_length_is_variable: Option<bool>,
    pub parallelism_config_sp_attn_implementation: Option<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// accelerate 1.15's `ClusterConfig`, field for field, after defaults and normalisation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterConfig {
    pub compute_environment: ComputeEnvironment,
    pub distributed_type: DistributedType,
    pub mixed_precision: Option<MixedPrecision>,
    pub use_cpu: bool,
    pub debug: bool,
    pub num_processes: i64,
    pub machine_rank: u32,
    pub num_machines: u32,
    pub gpu_ids: Option<String>,
    pub main_process_ip: Option<String>,
    pub main_process_port: Option<u16>,
    pub rdzv_backend: String,
    pub same_network: bool,
    pub main_training_function: String,
    pub enable_cpu_affinity: bool,
    #[serde(default)]
    pub fp8_config: Fp8Config,
    #[serde(default)]
    pub deepspeed_config: DeepSpeedConfig,
    #[serde(default)]
    pub fsdp_config: FsdpConfig,
    #[serde(default)]
    pub parallelism_config: ParallelismConfig,
    #[serde(default)]
    pub megatron_lm_config: MegatronLmConfig,
    #[serde(default)]
    pub mpirun_config: MpirunConfig,
    pub downcast_bf16: bool,
    pub tpu_name: Option<String>,
    pub tpu_zone: Option<String>,
    pub tpu_use_cluster: bool,
    pub tpu_use_sudo: bool,
    pub command_file: Option<String>,
    pub commands: Option<Vec<String>>,
    pub tpu_vm: Option<Vec<String>>,
    pub tpu_env: Option<Vec<String>>,
    #[serde(default)]
    pub dynamo_config: DynamoConfig,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The typed view reads exactly the schema's `mixed_precision` values, so the two cannot drift.
    #[test]
    fn mixed_precision_is_the_schemas_list() {
        for name in crate::config::schema::MIXED_PRECISION {
            let mp: MixedPrecision = serde_json::from_value(Value::from(*name))
                .unwrap_or_else(|e| panic!("schema value {name}: {e}"));
            assert_eq!(mp.as_str(), *name);
        }
        let all = [
            MixedPrecision::No,
            MixedPrecision::Fp16,
            MixedPrecision::Bf16,
            MixedPrecision::Fp8,
        ];
        let names: Vec<&str> = all.iter().map(|m| m.as_str()).collect();
        assert_eq!(names, crate::config::schema::MIXED_PRECISION);
    }
}
