complete -c accel-launch -l config_file -l config-file -d 'The config file (default: ACCEL_CONFIG_FILE, else accelerate\'s default config path)' -r -F
complete -c accel-launch -l grace_period -l grace-period -d 'Seconds between the stop signal and SIGKILL when ranks are stopped, `inf` for never (default: ACCEL_LAUNCH_GRACE, else 30)' -r -f
complete -c accel-launch -l log_template -l log-template -d 'Log file name template under --log_dir: {rank}, {local_rank}, {node}, {attempt}, {stream}; a relative path that stays inside --log_dir' -r -f
complete -c accel-launch -l rank_prefix -l rank-prefix -d 'Prefix each console line of a rank with this template, e.g. \'[{rank}] \' ({rank}, {local_rank}, {node}, {role})' -r -f
complete -c accel-launch -l local_ranks_filter -l local-ranks-filter -d 'Only these local ranks print to the console, e.g. 0 or 0,1 (all still write their log files)' -r -f
complete -c accel-launch -l rdzv_timeout -l rdzv-timeout -d 'Multi-node: seconds every node\'s launcher waits for all nodes to join the control plane (node 0, master port + 1); default: --rdzv_conf timeout=SECONDS, else 300' -r -f
complete -c accel-launch -l report_json -l report-json -d 'Write how the run ended as JSON to PATH (status; the failing node, host, rank, exit code or signal, stderr tail), also when it ended in the join before any rank started (`ended_in_join`: true, the `error`, no ranks). Checked before any rank starts (a directory is exit 2, a path that cannot be created exit 4); a write that fails at the end leaves the run\'s exit status as it is, unless the run succeeded (then 4)' -r -F
complete -c accel-launch -l exclude_file -l exclude-file -d 'Multi-node, node 0: append the host of each node lost during the run to PATH (one host a line, each once), for the next submission: `sbatch --exclude=$(paste -sd, PATH)`. See SPARE NODES' -r -F
complete -c accel-launch -l num_cpu_threads_per_process -l num-cpu-threads-per-process -d 'Threads per rank (OMP_NUM_THREADS); default: the environment\'s OMP_NUM_THREADS, else 1 (CPU runs: physical cores / ranks)' -r -f
complete -c accel-launch -s t -l tee -d 'Tee rank output torchrun-style: with accelerate\'s flags any value but 0 prefixes console lines with `[{role}{local_rank}]:`; with torchrun\'s command line, torchrun\'s tee (see TORCHRUN COMMAND LINE)' -r -f
complete -c accel-launch -l log_dir -l log-dir -d 'Write each rank\'s stdout and stderr to files under DIR (see --log_template; torchrun\'s layout for torchrun\'s command line)' -r -F
complete -c accel-launch -l role -d 'Worker role (ROLE_NAME)' -r -f
complete -c accel-launch -l rdzv_conf -l rdzv-conf -d 'Rendezvous options KEY=VALUE,...: passed to torchrun for --rdzv_backend c10d or etcd; with the static rendezvous only `timeout` counts (the join timeout, as torchrun\'s static store waits)' -r -f
complete -c accel-launch -l max_restarts -l max-restarts -d 'Restart all local ranks up to N times after a failure (TORCHELASTIC_RESTART_COUNT counts restarts)' -r -f
complete -c accel-launch -l monitor_interval -l monitor-interval -d 'Seconds between checks of the ranks' -r -f
complete -c accel-launch -l hang_timeout -l hang-timeout -d 'Declare the run hung when no rank made progress (CPU, I/O, Python stack) for SECONDS: print every rank\'s stack, stop the run, exit 124 (default: ACCEL_LAUNCH_HANG_TIMEOUT; 0: off)' -r -f
complete -c accel-launch -l straggler_threshold -l straggler-threshold -d 'Name a straggler while the run goes on: a rank whose share of time waiting in collectives is more than PCT points below the median rank\'s over a whole --straggler_window (default: ACCEL_LAUNCH_STRAGGLER_THRESHOLD; unset or 0: off)' -r -f
complete -c accel-launch -l straggler_window -l straggler-window -d 'Seconds of stack samples each straggler judgement is made from' -r -f
complete -c accel-launch -l stacks -d 'Print the Python stacks of the ranks of the running accel-launch PID, grouped, and exit; the run goes on' -r -f
complete -c accel-launch -l requeue_signal -l requeue-signal -d 'The warning signal for --slurm_requeue, as in `sbatch --signal=USR1@300` (default: ACCEL_LAUNCH_REQUEUE_SIGNAL, else USR1)' -r -f
complete -c accel-launch -l vm -d 'TPU pod VMs (not supported)' -r -f
complete -c accel-launch -l env -d 'TPU pod environment (not supported)' -r -f
complete -c accel-launch -l aws_access_key_id -l aws-access-key-id -d 'SageMaker (not supported)' -r -f
complete -c accel-launch -l aws_secret_access_key -l aws-secret-access-key -d 'SageMaker (not supported)' -r -f
complete -c accel-launch -l mixed_precision -l mixed-precision -d 'Mixed precision: no, fp16, bf16 or fp8 (config: mixed_precision); fp8 needs Transformer Engine, MS-AMP or torchao >= 0.6.1 in the ranks\' Python, checked before any rank starts as accelerate launch checks it (exit 125)' -r -f -a "no\t''
fp16\t''
bf16\t''
fp8\t''"
complete -c accel-launch -l num_processes -l num-processes -d 'Total number of processes over all machines (config: num_processes)' -r -f
complete -c accel-launch -l num_machines -l num-machines -d 'Number of machines (config: num_machines)' -r -f
complete -c accel-launch -l dynamo_backend -l dynamo-backend -d 'torch.compile backend (no, eager, aot_eager, inductor, …)' -r -f -a "NO\t''
EAGER\t''
AOT_EAGER\t''
INDUCTOR\t''
AOT_TS_NVFUSER\t''
NVPRIMS_NVFUSER\t''
CUDAGRAPHS\t''
OFI\t''
FX2TRT\t''
ONNXRT\t''
TENSORRT\t''
AOT_TORCHXLA_TRACE_ONCE\t''
TORCHXLA_TRACE_ONCE\t''
TVM\t''
HPU_BACKEND\t''
NEURON\t''"
complete -c accel-launch -l dynamo_mode -l dynamo-mode -d 'torch.compile mode: default, reduce-overhead, max-autotune' -r -f -a "default\t''
reduce-overhead\t''
max-autotune\t''
max-autotune-no-cudagraphs\t''"
complete -c accel-launch -l gpu_ids -l gpu-ids -d 'GPUs to use on each machine, comma-separated, or `all` (exported as CUDA_VISIBLE_DEVICES)' -r -f
complete -c accel-launch -l machine_rank -l machine-rank -d 'Rank of this machine, 0 .. num_machines-1 (SLURM: SLURM_NODEID)' -r -f
complete -c accel-launch -l main_process_ip -l main-process-ip -d 'Address of the machine of rank 0 (SLURM: the first node of the job)' -r -f
complete -c accel-launch -l main_process_port -l main-process-port -d 'Rendezvous port on the main machine; 0 or unset on one node: a free port (SLURM: derived from SLURM_JOB_ID)' -r -f
complete -c accel-launch -l rdzv_backend -l rdzv-backend -d 'Rendezvous backend: static (default; accel-launch itself) or c10d/etcd (elastic; runs torchrun)' -r -f -a "static\t''
c10d\t''
etcd\t''
etcd-v2\t''"
complete -c accel-launch -l main_training_function -l main-training-function -d 'TPU: the function to run (config: main_training_function)' -r -f
complete -c accel-launch -l mpirun_hostfile -l mpirun-hostfile -d 'Hostfile for multi-node CPU runs through mpirun (config: mpirun_config.mpirun_hostfile)' -r -F
complete -c accel-launch -l deepspeed_config_file -l deepspeed-config-file -d 'DeepSpeed JSON config file' -r -F
complete -c accel-launch -l zero_stage -l zero-stage -d 'ZeRO stage (0-3)' -r -f -a "0\t''
1\t''
2\t''
3\t''"
complete -c accel-launch -l offload_optimizer_device -l offload-optimizer-device -d 'Optimizer offload: none, cpu or nvme' -r -f -a "none\t''
cpu\t''
nvme\t''"
complete -c accel-launch -l offload_param_device -l offload-param-device -d 'Parameter offload: none, cpu or nvme' -r -f -a "none\t''
cpu\t''
nvme\t''"
complete -c accel-launch -l offload_optimizer_nvme_path -l offload-optimizer-nvme-path -d 'NVMe path for optimizer offload (exported, unlike accelerate 1.15)' -r -f -a "(__fish_complete_directories)"
complete -c accel-launch -l offload_param_nvme_path -l offload-param-nvme-path -d 'NVMe path for parameter offload (exported, unlike accelerate 1.15)' -r -f -a "(__fish_complete_directories)"
complete -c accel-launch -l gradient_accumulation_steps -l gradient-accumulation-steps -d 'Gradient accumulation steps' -r -f
complete -c accel-launch -l gradient_clipping -l gradient-clipping -d 'Gradient clipping value' -r -f
complete -c accel-launch -l zero3_init_flag -l zero3-init-flag -d 'ZeRO-3 zero.Init for large models (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l zero3_save_16bit_model -l zero3-save-16bit-model -d 'Save 16-bit model weights with ZeRO-3 (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l deepspeed_hostfile -l deepspeed-hostfile -d 'Hostfile for multi-node DeepSpeed (runs the deepspeed launcher)' -r -F
complete -c accel-launch -l deepspeed_exclusion_filter -l deepspeed-exclusion-filter -d 'deepspeed --exclude filter' -r -f
complete -c accel-launch -l deepspeed_inclusion_filter -l deepspeed-inclusion-filter -d 'deepspeed --include filter' -r -f
complete -c accel-launch -l deepspeed_multinode_launcher -l deepspeed-multinode-launcher -d 'deepspeed multi-node launcher: pdsh (default), standard, openmpi, mvapich, mpich, nossh, slurm' -r -f -a "pdsh\t''
standard\t''
openmpi\t''
mvapich\t''
mpich\t''
nossh\t''
slurm\t''"
complete -c accel-launch -l deepspeed_moe_layer_cls_names -l deepspeed-moe-layer-cls-names -d 'Comma-separated MoE layer class names' -r -f
complete -c accel-launch -l fsdp_version -l fsdp-version -d 'FSDP version, 1 or 2' -r -f -a "1\t''
2\t''"
complete -c accel-launch -l fsdp_offload_params -l fsdp-offload-params -d 'Offload parameters to CPU (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l fsdp_min_num_params -l fsdp-min-num-params -d 'Minimum parameters for size-based auto wrap' -r -f
complete -c accel-launch -l fsdp_sharding_strategy -l fsdp-sharding-strategy -d 'FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2' -r -f -a "FULL_SHARD\t''
SHARD_GRAD_OP\t''
NO_SHARD\t''
HYBRID_SHARD\t''
HYBRID_SHARD_ZERO2\t''"
complete -c accel-launch -l fsdp_reshard_after_forward -l fsdp-reshard-after-forward -d 'FSDP2: reshard after forward (true/false); FSDP1: a sharding strategy' -r -f -a "true\t''
false\t''
FULL_SHARD\t''
SHARD_GRAD_OP\t''
NO_SHARD\t''
HYBRID_SHARD\t''
HYBRID_SHARD_ZERO2\t''"
complete -c accel-launch -l fsdp_auto_wrap_policy -l fsdp-auto-wrap-policy -d 'TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP' -r -f -a "TRANSFORMER_BASED_WRAP\t''
SIZE_BASED_WRAP\t''
NO_WRAP\t''"
complete -c accel-launch -l fsdp_transformer_layer_cls_to_wrap -l fsdp-transformer-layer-cls-to-wrap -d 'Layer class names to wrap (exported as FSDP_TRANSFORMER_CLS_TO_WRAP)' -r -f
complete -c accel-launch -l fsdp_backward_prefetch -l fsdp-backward-prefetch -d 'BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH' -r -f -a "BACKWARD_PRE\t''
BACKWARD_POST\t''
NO_PREFETCH\t''"
complete -c accel-launch -l fsdp_state_dict_type -l fsdp-state-dict-type -d 'FULL_STATE_DICT, LOCAL_STATE_DICT or SHARDED_STATE_DICT' -r -f -a "FULL_STATE_DICT\t''
LOCAL_STATE_DICT\t''
SHARDED_STATE_DICT\t''"
complete -c accel-launch -l fsdp_forward_prefetch -l fsdp-forward-prefetch -d 'Explicit forward prefetch (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l fsdp_use_orig_params -l fsdp-use-orig-params -d 'use_orig_params (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l fsdp_cpu_ram_efficient_loading -l fsdp-cpu-ram-efficient-loading -d 'Load pretrained weights on rank 0 only (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l fsdp_sync_module_states -l fsdp-sync-module-states -d 'Broadcast module states from rank 0 (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l fsdp_activation_checkpointing -l fsdp-activation-checkpointing -d 'Activation checkpointing (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l fsdp_activation_checkpointing_offload -l fsdp-activation-checkpointing-offload -d 'Offload checkpointed activations to CPU (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l megatron_lm_tp_degree -l megatron-lm-tp-degree -d 'Tensor parallelism degree' -r -f
complete -c accel-launch -l megatron_lm_pp_degree -l megatron-lm-pp-degree -d 'Pipeline parallelism degree' -r -f
complete -c accel-launch -l megatron_lm_num_micro_batches -l megatron-lm-num-micro-batches -d 'Micro-batches with pipeline parallelism' -r -f
complete -c accel-launch -l megatron_lm_sequence_parallelism -l megatron-lm-sequence-parallelism -d 'Sequence parallelism (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l megatron_lm_recompute_activations -l megatron-lm-recompute-activations -d 'Selective activation recomputation (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l megatron_lm_use_distributed_optimizer -l megatron-lm-use-distributed-optimizer -d 'Distributed optimizer (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l megatron_lm_gradient_clipping -l megatron-lm-gradient-clipping -d 'Gradient clipping by global L2 norm' -r -f
complete -c accel-launch -l megatron_lm_recompute_granularity -l megatron-lm-recompute-granularity -d 'full or selective' -r -f -a "full\t''
selective\t''"
complete -c accel-launch -l megatron_lm_recompute_method -l megatron-lm-recompute-method -d 'uniform or block' -r -f -a "uniform\t''
block\t''"
complete -c accel-launch -l megatron_lm_recompute_num_layers -l megatron-lm-recompute-num-layers -d 'Layers to recompute' -r -f
complete -c accel-launch -l megatron_lm_decoder_last_pipeline_num_layers -l megatron-lm-decoder-last-pipeline-num-layers -d 'Decoder layers in the last pipeline stage' -r -f
complete -c accel-launch -l megatron_lm_expert_model_parallel_size -l megatron-lm-expert-model-parallel-size -d 'Expert model parallel size' -r -f
complete -c accel-launch -l megatron_lm_context_parallel_size -l megatron-lm-context-parallel-size -d 'Context parallel size' -r -f
complete -c accel-launch -l megatron_lm_expert_tensor_parallel_size -l megatron-lm-expert-tensor-parallel-size -d 'Expert tensor parallel size' -r -f
complete -c accel-launch -l megatron_lm_attention_dropout -l megatron-lm-attention-dropout -d 'Attention dropout' -r -f
complete -c accel-launch -l megatron_lm_hidden_dropout -l megatron-lm-hidden-dropout -d 'Hidden dropout' -r -f
complete -c accel-launch -l megatron_lm_attention_backend -l megatron-lm-attention-backend -d 'Attention backend' -r -f
complete -c accel-launch -l megatron_lm_attention_softmax_in_fp32 -l megatron-lm-attention-softmax-in-fp32 -d 'Softmax in fp32 (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l megatron_lm_calculate_per_token_loss -l megatron-lm-calculate-per-token-loss -d 'Per-token loss (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l megatron_lm_use_rotary_position_embeddings -l megatron-lm-use-rotary-position-embeddings -d 'Rotary position embeddings (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l megatron_lm_use_custom_fsdp -l megatron-lm-use-custom-fsdp -d 'Megatron custom FSDP (true/false; `False` is false, unlike accelerate)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l megatron_lm_no_load_optim -l megatron-lm-no-load-optim -d 'Do not load optimizer state (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l megatron_lm_no_save_optim -l megatron-lm-no-save-optim -d 'Do not save optimizer state (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l megatron_lm_eod_mask_loss -l megatron-lm-eod-mask-loss -d 'Mask loss at end-of-document tokens (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l megatron_lm_overlap_cpu_optimizer_d2h_h2d -l megatron-lm-overlap-cpu-optimizer-d2h-h2d -d 'Overlap CPU optimizer copies (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l megatron_lm_optimizer_cpu_offload -l megatron-lm-optimizer-cpu-offload -d 'Offload the optimizer to CPU (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l megatron_lm_use_precision_aware_optimizer -l megatron-lm-use-precision-aware-optimizer -d 'Precision-aware optimizer (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l fp8_backend -l fp8-backend -d 'FP8 backend: ao, te or msamp (exported upper-case, which the child needs)' -r -f -a "AO\t''
TE\t''
MSAMP\t''"
complete -c accel-launch -l fp8_margin -l fp8-margin -d 'TE: scaling margin' -r -f
complete -c accel-launch -l fp8_interval -l fp8-interval -d 'TE: scaling factor update interval' -r -f
complete -c accel-launch -l fp8_format -l fp8-format -d 'TE: HYBRID, E4M3 or E5M2' -r -f -a "HYBRID\t''
E4M3\t''
E5M2\t''"
complete -c accel-launch -l fp8_amax_history_len -l fp8-amax-history-len -d 'TE: amax history length' -r -f
complete -c accel-launch -l fp8_amax_compute_algo -l fp8-amax-compute-algo -d 'TE: max or most_recent' -r -f -a "max\t''
most_recent\t''"
complete -c accel-launch -l fp8_override_linear_precision -l fp8-override-linear-precision -d 'TE: fprop,dgrad,wgrad in higher precision, e.g. false,false,true' -r -f
complete -c accel-launch -l fp8_opt_level -l fp8-opt-level -d 'MS-AMP: O1 or O2' -r -f -a "O1\t''
O2\t''"
complete -c accel-launch -l fp8_enable_fsdp_float8_all_gather -l fp8-enable-fsdp-float8-all-gather -d 'AO: float8 all-gather under FSDP2 (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l fp8_pad_inner_dim -l fp8-pad-inner-dim -d 'AO: pad the inner dimension (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l parallelism_config_dp_replicate_size -l parallelism-config-dp-replicate-size -d 'Data-parallel replicate size' -r -f
complete -c accel-launch -l parallelism_config_dp_shard_size -l parallelism-config-dp-shard-size -d 'Data-parallel shard size' -r -f
complete -c accel-launch -l parallelism_config_tp_size -l parallelism-config-tp-size -d 'Tensor-parallel size' -r -f
complete -c accel-launch -l parallelism_config_cp_size -l parallelism-config-cp-size -d 'Context-parallel size' -r -f
complete -c accel-launch -l parallelism_config_cp_backend -l parallelism-config-cp-backend -d 'Context-parallel backend (torch)' -r -f -a "torch\t''"
complete -c accel-launch -l parallelism_config_cp_comm_strategy -l parallelism-config-cp-comm-strategy -d 'allgather or alltoall' -r -f -a "allgather\t''
alltoall\t''"
complete -c accel-launch -l parallelism_config_sp_size -l parallelism-config-sp-size -d 'Sequence-parallel size' -r -f
complete -c accel-launch -l parallelism_config_sp_backend -l parallelism-config-sp-backend -d 'Sequence-parallel backend (deepspeed)' -r -f -a "deepspeed\t''"
complete -c accel-launch -l parallelism_config_sp_seq_length -l parallelism-config-sp-seq-length -d 'Sequence length' -r -f
complete -c accel-launch -l parallelism_config_sp_seq_length_is_variable -l parallelism-config-sp-seq-length-is-variable -d 'Variable sequence length (true/false)' -r -f -a "true\t''
false\t''"
complete -c accel-launch -l parallelism_config_sp_attn_implementation -l parallelism-config-sp-attn-implementation -d 'Attention implementation (sdpa, …)' -r -f
complete -c accel-launch -l nnodes -d 'Number of nodes N, or an elastic range MIN:MAX (a range runs the real torchrun, and needs --rdzv_backend c10d or etcd)' -r -f
complete -c accel-launch -l nproc_per_node -l nproc-per-node -d 'Ranks on this node: a number, `gpu` (the visible GPUs), `cpu` (the CPUs this process may run on) or `auto` (GPUs if any, else CPUs); nodes may differ' -r -f
complete -c accel-launch -l node_rank -l node-rank -d 'This node\'s rank, 0 .. nnodes-1 (= --machine_rank)' -r -f
complete -c accel-launch -l master_addr -l master-addr -d 'Address of node 0 (= --main_process_ip)' -r -f
complete -c accel-launch -l master_port -l master-port -d 'Rendezvous port on node 0 (= --main_process_port)' -r -f
complete -c accel-launch -l rdzv_endpoint -l rdzv-endpoint -d 'Rendezvous endpoint HOST:PORT ([IPv6]:PORT): with the static backend, node 0\'s address and port; with c10d or etcd, the endpoint torchrun\'s rendezvous uses' -r -f
complete -c accel-launch -l rdzv_id -l rdzv-id -d 'Run id shared by every node (TORCHELASTIC_RUN_ID, the log directory\'s prefix; default `none`)' -r -f
complete -c accel-launch -s r -l redirects -d 'Streams written only to the log files, not the console: 0-3 (none, stdout, stderr, both) or a per-local-rank map such as 0:3,1:1' -r -f
complete -c accel-launch -l local_addr -l local-addr -d 'This node\'s address: MASTER_ADDR of a one-node run torchrun would rendezvous locally (default: this host\'s FQDN)' -r -f
complete -c accel-launch -l signals_to_handle -l signals-to-handle -d 'The signals forwarded to the ranks, each of which stops the run (default SIGTERM,SIGINT,SIGHUP,SIGQUIT forwarded and stopping, SIGUSR1,SIGUSR2 forwarded only)' -r -f
complete -c accel-launch -l shutdown_timeout -l shutdown-timeout -d 'Whole seconds between the stop signal and SIGKILL: the same setting as --grace_period (default: TORCH_ELASTIC_SHUTDOWN_TIMEOUT)' -r -f
complete -c accel-launch -l duplicate_stdout_filters -l duplicate-stdout-filters -d 'Tee\'d stdout lines containing any of these comma-separated strings (`,,` is a comma) also go to attempt_N/filtered_stdout.log' -r -f
complete -c accel-launch -l duplicate_stderr_filters -l duplicate-stderr-filters -d 'Tee\'d stderr lines containing any of these comma-separated strings (`,,` is a comma) also go to attempt_N/filtered_stderr.log' -r -f
complete -c accel-launch -l numa_binding -l numa-binding -d 'Pin each rank to the CPUs near its GPU (the GPU of its local rank): node, socket, exclusive or core-complex' -r -f -a "node\t'Every CPU of the GPU\'s NUMA node'
socket\t'Every CPU of the NUMA nodes of the GPU\'s socket'
exclusive\t'An exclusive share of the physical cores of the GPU\'s NUMA node'
core-complex\t'One core complex (the CPUs sharing a last-level cache) of the GPU\'s NUMA node'"
complete -c accel-launch -l start_method -l start-method -d 'torchrun\'s start method (spawn, fork, forkserver): no effect for a script, as in torchrun (every rank is a fresh process); with --run_path only spawn, its default' -r -f -a "spawn\t''
fork\t''
forkserver\t''"
complete -c accel-launch -l logs_specs -l logs-specs -d 'Refused: a torchrun.logs_specs entry point is Python code loaded into torchrun\'s agent' -r -f
complete -c accel-launch -l event_log_handler -l event-log-handler -d 'torchrun\'s event log handler: only `null` (its default); a named handler is Python code in torchrun\'s agent' -r -f
complete -c accel-launch -s q -l quiet -d 'Print only the failing rank\'s report, no launcher notes'
complete -c accel-launch -s m -l module -d 'Run the script as a module: `python -m MODULE`'
complete -c accel-launch -l no_python -l no-python -d 'Run the script directly, without python (any executable)'
complete -c accel-launch -l dry-run -l dry_run -d 'Print the resolved config with the origin of each value, the launch (accel-launch starts every rank itself; also the path accelerate launch would take) and each rank\'s argv and environment; run nothing'
complete -c accel-launch -l json -d 'With --dry-run: print JSON'
complete -c accel-launch -l replace_failing_nodes -l replace-failing-nodes -d 'Multi-node, node 0: a node whose ranks fail, while --max_restarts remain and a spare waits, is replaced by the spare for the next attempt instead of being restarted in place (its launcher exits with its rank\'s status). See SPARE NODES'
complete -c accel-launch -l drain_lost_nodes -l drain-lost-nodes -d 'Multi-node under SLURM, node 0: drain each lost or replaced node (`scontrol update NodeName=H State=DRAIN Reason=...`) where this user may; a note says so when it may not. See SPARE NODES'
complete -c accel-launch -l cpu -d 'Run on CPU: N gloo ranks with --num_processes N (accelerate starts one process)'
complete -c accel-launch -l multi_gpu -l multi-gpu -d 'Distributed GPU training (DDP)'
complete -c accel-launch -l tpu -d 'TPU training (not supported by accel-launch; use accelerate launch)'
complete -c accel-launch -l use_deepspeed -l use-deepspeed -d 'DeepSpeed training'
complete -c accel-launch -l use_fsdp -l use-fsdp -d 'Fully Sharded Data Parallel training'
complete -c accel-launch -l use_parallelism_config -l use-parallelism-config -d 'N-D parallelism through parallelism_config (requires FSDP 2)'
complete -c accel-launch -l use_megatron_lm -l use-megatron-lm -d 'Megatron-LM training'
complete -c accel-launch -l stacks_on_failure -l stacks-on-failure -d 'When a rank fails, print the other ranks\' Python stacks before stopping them'
complete -c accel-launch -l slurm_requeue -l slurm-requeue -d 'On SLURM\'s warning signal (--requeue_signal), give the ranks --grace_period to save and exit, then requeue the job (`scontrol requeue`, once per job) and exit 123 (default: ACCEL_LAUNCH_SLURM_REQUEUE)'
complete -c accel-launch -l tpu_cluster -l tpu-cluster -d 'TPU pod (not supported)'
complete -c accel-launch -l no_tpu_cluster -l no-tpu-cluster -d 'TPU: internal (not supported)'
complete -c accel-launch -l debug -d 'Debug mode (ACCELERATE_DEBUG_MODE=true)'
complete -c accel-launch -l enable_cpu_affinity -l enable-cpu-affinity -d 'Pin each rank to CPU cores near its GPU (ACCELERATE_CPU_AFFINITY=1)'
complete -c accel-launch -l dynamo_use_fullgraph -l dynamo-use-fullgraph -d 'torch.compile with fullgraph=True'
complete -c accel-launch -l dynamo_use_dynamic -l dynamo-use-dynamic -d 'torch.compile with dynamic shapes'
complete -c accel-launch -l dynamo_use_regional_compilation -l dynamo-use-regional-compilation -d 'Compile repeated blocks once (regional compilation)'
complete -c accel-launch -l same_network -l same-network -d 'All machines are on the same network (accepted; the rendezvous is the same either way)'
complete -c accel-launch -l tpu_use_sudo -l tpu-use-sudo -d 'TPU pod: use sudo (config: tpu_use_sudo)'
complete -c accel-launch -l downcast_bf16 -l downcast-bf16 -d 'TPU: XLA_DOWNCAST_BF16 (config: downcast_bf16)'
complete -c accel-launch -l fp8_use_autocast_during_eval -l fp8-use-autocast-during-eval -d 'TE: autocast during evaluation'
complete -c accel-launch -l standalone -d 'One node, rendezvous on a free local port, a fresh UUID as run id (torchrun\'s c10d on localhost:0)'
complete -c accel-launch -l run_path -l run-path -d 'Run the script with runpy.run_path in a fresh interpreter, as torchrun\'s --run-path (takes precedence over --no_python)'
complete -c accel-launch -l virtual_local_rank -l virtual-local-rank -d 'Each rank sees only its own GPU, as device 0: LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES the rank\'s entry of this node\'s list'
complete -c accel-launch -s h -l help -d 'Print help (see more with \'--help\')'
complete -c accel-launch -s V -l version -d 'Print version'
