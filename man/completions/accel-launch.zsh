#compdef accel-launch

autoload -U is-at-least

_accel-launch() {
    typeset -A opt_args
    typeset -a _arguments_options
    local ret=1

    if is-at-least 5.2; then
        _arguments_options=(-s -S -C)
    else
        _arguments_options=(-s -C)
    fi

    local context curcontext="$curcontext" state line
    _arguments "${_arguments_options[@]}" : \
'--config_file=[The config file (default\: ACCEL_CONFIG_FILE, else accelerate'\''s default config path)]:PATH:_files' \
'--config-file=[The config file (default\: ACCEL_CONFIG_FILE, else accelerate'\''s default config path)]:PATH:_files' \
'--grace_period=[Seconds between the stop signal and SIGKILL when ranks are stopped, \`inf\` for never (default\: ACCEL_LAUNCH_GRACE, else 30)]:SECONDS:' \
'--grace-period=[Seconds between the stop signal and SIGKILL when ranks are stopped, \`inf\` for never (default\: ACCEL_LAUNCH_GRACE, else 30)]:SECONDS:' \
'--log_template=[Log file name template under --log_dir\: {rank}, {local_rank}, {node}, {attempt}, {stream}; a relative path that stays inside --log_dir]:TEMPLATE:' \
'--log-template=[Log file name template under --log_dir\: {rank}, {local_rank}, {node}, {attempt}, {stream}; a relative path that stays inside --log_dir]:TEMPLATE:' \
'--rank_prefix=[Prefix each console line of a rank with this template, e.g. '\''\[{rank}\] '\'' ({rank}, {local_rank}, {node}, {role})]:TEMPLATE:' \
'--rank-prefix=[Prefix each console line of a rank with this template, e.g. '\''\[{rank}\] '\'' ({rank}, {local_rank}, {node}, {role})]:TEMPLATE:' \
'--local_ranks_filter=[Only these local ranks print to the console, e.g. 0 or 0,1 (all still write their log files)]:RANKS:' \
'--local-ranks-filter=[Only these local ranks print to the console, e.g. 0 or 0,1 (all still write their log files)]:RANKS:' \
'--rdzv_timeout=[Multi-node\: seconds every node'\''s launcher waits for all nodes to join the control plane (node 0, master port + 1); default\: --rdzv_conf timeout=SECONDS, else 300]:SECONDS:' \
'--rdzv-timeout=[Multi-node\: seconds every node'\''s launcher waits for all nodes to join the control plane (node 0, master port + 1); default\: --rdzv_conf timeout=SECONDS, else 300]:SECONDS:' \
'--report_json=[Write how the run ended as JSON to PATH (status; the failing node, host, rank, exit code or signal, stderr tail), also when it ended in the join before any rank started (\`ended_in_join\`\: true, the \`error\`, no ranks). Checked before any rank starts (a directory is exit 2, a path that cannot be created exit 4); a write that fails at the end leaves the run'\''s exit status as it is, unless the run succeeded (then 4)]:PATH:_files' \
'--report-json=[Write how the run ended as JSON to PATH (status; the failing node, host, rank, exit code or signal, stderr tail), also when it ended in the join before any rank started (\`ended_in_join\`\: true, the \`error\`, no ranks). Checked before any rank starts (a directory is exit 2, a path that cannot be created exit 4); a write that fails at the end leaves the run'\''s exit status as it is, unless the run succeeded (then 4)]:PATH:_files' \
'--exclude_file=[Multi-node, node 0\: append the host of each node lost during the run to PATH (one host a line, each once), for the next submission\: \`sbatch --exclude=\$(paste -sd, PATH)\`. See SPARE NODES]:PATH:_files' \
'--exclude-file=[Multi-node, node 0\: append the host of each node lost during the run to PATH (one host a line, each once), for the next submission\: \`sbatch --exclude=\$(paste -sd, PATH)\`. See SPARE NODES]:PATH:_files' \
'--num_cpu_threads_per_process=[Threads per rank (OMP_NUM_THREADS); default\: the environment'\''s OMP_NUM_THREADS, else 1 (CPU runs\: physical cores / ranks)]:N:' \
'--num-cpu-threads-per-process=[Threads per rank (OMP_NUM_THREADS); default\: the environment'\''s OMP_NUM_THREADS, else 1 (CPU runs\: physical cores / ranks)]:N:' \
'-t+[Tee rank output torchrun-style\: with accelerate'\''s flags any value but 0 prefixes console lines with \`\[{role}{local_rank}\]\:\`; with torchrun'\''s command line, torchrun'\''s tee (see TORCHRUN COMMAND LINE)]:0-3:' \
'--tee=[Tee rank output torchrun-style\: with accelerate'\''s flags any value but 0 prefixes console lines with \`\[{role}{local_rank}\]\:\`; with torchrun'\''s command line, torchrun'\''s tee (see TORCHRUN COMMAND LINE)]:0-3:' \
'--log_dir=[Write each rank'\''s stdout and stderr to files under DIR (see --log_template; torchrun'\''s layout for torchrun'\''s command line)]:DIR:_files' \
'--log-dir=[Write each rank'\''s stdout and stderr to files under DIR (see --log_template; torchrun'\''s layout for torchrun'\''s command line)]:DIR:_files' \
'--role=[Worker role (ROLE_NAME)]:ROLE:' \
'--rdzv_conf=[Rendezvous options KEY=VALUE,...\: passed to torchrun for --rdzv_backend c10d or etcd; with the static rendezvous only \`timeout\` counts (the join timeout, as torchrun'\''s static store waits)]:RDZV_CONF:' \
'--rdzv-conf=[Rendezvous options KEY=VALUE,...\: passed to torchrun for --rdzv_backend c10d or etcd; with the static rendezvous only \`timeout\` counts (the join timeout, as torchrun'\''s static store waits)]:RDZV_CONF:' \
'--max_restarts=[Restart all local ranks up to N times after a failure (TORCHELASTIC_RESTART_COUNT counts restarts)]:N:' \
'--max-restarts=[Restart all local ranks up to N times after a failure (TORCHELASTIC_RESTART_COUNT counts restarts)]:N:' \
'--monitor_interval=[Seconds between checks of the ranks]:SECONDS:' \
'--monitor-interval=[Seconds between checks of the ranks]:SECONDS:' \
'--hang_timeout=[Declare the run hung when no rank made progress (CPU, I/O, Python stack) for SECONDS\: print every rank'\''s stack, stop the run, exit 124 (default\: ACCEL_LAUNCH_HANG_TIMEOUT; 0\: off)]:SECONDS:' \
'--hang-timeout=[Declare the run hung when no rank made progress (CPU, I/O, Python stack) for SECONDS\: print every rank'\''s stack, stop the run, exit 124 (default\: ACCEL_LAUNCH_HANG_TIMEOUT; 0\: off)]:SECONDS:' \
'--straggler_threshold=[Name a straggler while the run goes on\: a rank whose share of time waiting in collectives is more than PCT points below the median rank'\''s over a whole --straggler_window (default\: ACCEL_LAUNCH_STRAGGLER_THRESHOLD; unset or 0\: off)]:PCT:' \
'--straggler-threshold=[Name a straggler while the run goes on\: a rank whose share of time waiting in collectives is more than PCT points below the median rank'\''s over a whole --straggler_window (default\: ACCEL_LAUNCH_STRAGGLER_THRESHOLD; unset or 0\: off)]:PCT:' \
'--straggler_window=[Seconds of stack samples each straggler judgement is made from]:SECONDS:' \
'--straggler-window=[Seconds of stack samples each straggler judgement is made from]:SECONDS:' \
'--stacks=[Print the Python stacks of the ranks of the running accel-launch PID, grouped, and exit; the run goes on]:PID:' \
'--requeue_signal=[The warning signal for --slurm_requeue, as in \`sbatch --signal=USR1@300\` (default\: ACCEL_LAUNCH_REQUEUE_SIGNAL, else USR1)]:SIGNAL:' \
'--requeue-signal=[The warning signal for --slurm_requeue, as in \`sbatch --signal=USR1@300\` (default\: ACCEL_LAUNCH_REQUEUE_SIGNAL, else USR1)]:SIGNAL:' \
'*--vm=[TPU pod VMs (not supported)]:VM:' \
'*--env=[TPU pod environment (not supported)]:KEY=VALUE:' \
'--aws_access_key_id=[SageMaker (not supported)]:ID:' \
'--aws-access-key-id=[SageMaker (not supported)]:ID:' \
'--aws_secret_access_key=[SageMaker (not supported)]:KEY:' \
'--aws-secret-access-key=[SageMaker (not supported)]:KEY:' \
'--mixed_precision=[Mixed precision\: no, fp16, bf16 or fp8 (config\: mixed_precision); fp8 needs Transformer Engine, MS-AMP or torchao >= 0.6.1 in the ranks'\'' Python, checked before any rank starts as accelerate launch checks it (exit 125)]:VALUE:(no fp16 bf16 fp8)' \
'--mixed-precision=[Mixed precision\: no, fp16, bf16 or fp8 (config\: mixed_precision); fp8 needs Transformer Engine, MS-AMP or torchao >= 0.6.1 in the ranks'\'' Python, checked before any rank starts as accelerate launch checks it (exit 125)]:VALUE:(no fp16 bf16 fp8)' \
'--num_processes=[Total number of processes over all machines (config\: num_processes)]:VALUE:' \
'--num-processes=[Total number of processes over all machines (config\: num_processes)]:VALUE:' \
'--num_machines=[Number of machines (config\: num_machines)]:VALUE:' \
'--num-machines=[Number of machines (config\: num_machines)]:VALUE:' \
'--dynamo_backend=[torch.compile backend (no, eager, aot_eager, inductor, …)]:VALUE:(NO EAGER AOT_EAGER INDUCTOR AOT_TS_NVFUSER NVPRIMS_NVFUSER CUDAGRAPHS OFI FX2TRT ONNXRT TENSORRT AOT_TORCHXLA_TRACE_ONCE TORCHXLA_TRACE_ONCE TVM HPU_BACKEND NEURON)' \
'--dynamo-backend=[torch.compile backend (no, eager, aot_eager, inductor, …)]:VALUE:(NO EAGER AOT_EAGER INDUCTOR AOT_TS_NVFUSER NVPRIMS_NVFUSER CUDAGRAPHS OFI FX2TRT ONNXRT TENSORRT AOT_TORCHXLA_TRACE_ONCE TORCHXLA_TRACE_ONCE TVM HPU_BACKEND NEURON)' \
'--dynamo_mode=[torch.compile mode\: default, reduce-overhead, max-autotune]:VALUE:(default reduce-overhead max-autotune max-autotune-no-cudagraphs)' \
'--dynamo-mode=[torch.compile mode\: default, reduce-overhead, max-autotune]:VALUE:(default reduce-overhead max-autotune max-autotune-no-cudagraphs)' \
'--gpu_ids=[GPUs to use on each machine, comma-separated, or \`all\` (exported as CUDA_VISIBLE_DEVICES)]:VALUE:' \
'--gpu-ids=[GPUs to use on each machine, comma-separated, or \`all\` (exported as CUDA_VISIBLE_DEVICES)]:VALUE:' \
'--machine_rank=[Rank of this machine, 0 .. num_machines-1 (SLURM\: SLURM_NODEID)]:VALUE:' \
'--machine-rank=[Rank of this machine, 0 .. num_machines-1 (SLURM\: SLURM_NODEID)]:VALUE:' \
'--main_process_ip=[Address of the machine of rank 0 (SLURM\: the first node of the job)]:VALUE:' \
'--main-process-ip=[Address of the machine of rank 0 (SLURM\: the first node of the job)]:VALUE:' \
'--main_process_port=[Rendezvous port on the main machine; 0 or unset on one node\: a free port (SLURM\: derived from SLURM_JOB_ID)]:VALUE:' \
'--main-process-port=[Rendezvous port on the main machine; 0 or unset on one node\: a free port (SLURM\: derived from SLURM_JOB_ID)]:VALUE:' \
'--rdzv_backend=[Rendezvous backend\: static (default; accel-launch itself) or c10d/etcd (elastic; runs torchrun)]:VALUE:(static c10d etcd etcd-v2)' \
'--rdzv-backend=[Rendezvous backend\: static (default; accel-launch itself) or c10d/etcd (elastic; runs torchrun)]:VALUE:(static c10d etcd etcd-v2)' \
'--main_training_function=[TPU\: the function to run (config\: main_training_function)]:NAME:' \
'--main-training-function=[TPU\: the function to run (config\: main_training_function)]:NAME:' \
'--mpirun_hostfile=[Hostfile for multi-node CPU runs through mpirun (config\: mpirun_config.mpirun_hostfile)]:PATH:_files' \
'--mpirun-hostfile=[Hostfile for multi-node CPU runs through mpirun (config\: mpirun_config.mpirun_hostfile)]:PATH:_files' \
'--deepspeed_config_file=[DeepSpeed JSON config file]:PATH:_files' \
'--deepspeed-config-file=[DeepSpeed JSON config file]:PATH:_files' \
'--zero_stage=[ZeRO stage (0-3)]:VALUE:(0 1 2 3)' \
'--zero-stage=[ZeRO stage (0-3)]:VALUE:(0 1 2 3)' \
'--offload_optimizer_device=[Optimizer offload\: none, cpu or nvme]:VALUE:(none cpu nvme)' \
'--offload-optimizer-device=[Optimizer offload\: none, cpu or nvme]:VALUE:(none cpu nvme)' \
'--offload_param_device=[Parameter offload\: none, cpu or nvme]:VALUE:(none cpu nvme)' \
'--offload-param-device=[Parameter offload\: none, cpu or nvme]:VALUE:(none cpu nvme)' \
'--offload_optimizer_nvme_path=[NVMe path for optimizer offload (exported, unlike accelerate 1.15)]:DIR:_files -/' \
'--offload-optimizer-nvme-path=[NVMe path for optimizer offload (exported, unlike accelerate 1.15)]:DIR:_files -/' \
'--offload_param_nvme_path=[NVMe path for parameter offload (exported, unlike accelerate 1.15)]:DIR:_files -/' \
'--offload-param-nvme-path=[NVMe path for parameter offload (exported, unlike accelerate 1.15)]:DIR:_files -/' \
'--gradient_accumulation_steps=[Gradient accumulation steps]:VALUE:' \
'--gradient-accumulation-steps=[Gradient accumulation steps]:VALUE:' \
'--gradient_clipping=[Gradient clipping value]:VALUE:' \
'--gradient-clipping=[Gradient clipping value]:VALUE:' \
'--zero3_init_flag=[ZeRO-3 zero.Init for large models (true/false)]:VALUE:(true false)' \
'--zero3-init-flag=[ZeRO-3 zero.Init for large models (true/false)]:VALUE:(true false)' \
'--zero3_save_16bit_model=[Save 16-bit model weights with ZeRO-3 (true/false)]:VALUE:(true false)' \
'--zero3-save-16bit-model=[Save 16-bit model weights with ZeRO-3 (true/false)]:VALUE:(true false)' \
'--deepspeed_hostfile=[Hostfile for multi-node DeepSpeed (runs the deepspeed launcher)]:PATH:_files' \
'--deepspeed-hostfile=[Hostfile for multi-node DeepSpeed (runs the deepspeed launcher)]:PATH:_files' \
'--deepspeed_exclusion_filter=[deepspeed --exclude filter]:VALUE:' \
'--deepspeed-exclusion-filter=[deepspeed --exclude filter]:VALUE:' \
'--deepspeed_inclusion_filter=[deepspeed --include filter]:VALUE:' \
'--deepspeed-inclusion-filter=[deepspeed --include filter]:VALUE:' \
'--deepspeed_multinode_launcher=[deepspeed multi-node launcher\: pdsh (default), standard, openmpi, mvapich, mpich, nossh, slurm]:VALUE:(pdsh standard openmpi mvapich mpich nossh slurm)' \
'--deepspeed-multinode-launcher=[deepspeed multi-node launcher\: pdsh (default), standard, openmpi, mvapich, mpich, nossh, slurm]:VALUE:(pdsh standard openmpi mvapich mpich nossh slurm)' \
'--deepspeed_moe_layer_cls_names=[Comma-separated MoE layer class names]:VALUE:' \
'--deepspeed-moe-layer-cls-names=[Comma-separated MoE layer class names]:VALUE:' \
'--fsdp_version=[FSDP version, 1 or 2]:VALUE:(1 2)' \
'--fsdp-version=[FSDP version, 1 or 2]:VALUE:(1 2)' \
'--fsdp_offload_params=[Offload parameters to CPU (true/false)]:VALUE:(true false)' \
'--fsdp-offload-params=[Offload parameters to CPU (true/false)]:VALUE:(true false)' \
'--fsdp_min_num_params=[Minimum parameters for size-based auto wrap]:VALUE:' \
'--fsdp-min-num-params=[Minimum parameters for size-based auto wrap]:VALUE:' \
'--fsdp_sharding_strategy=[FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2]:VALUE:(FULL_SHARD SHARD_GRAD_OP NO_SHARD HYBRID_SHARD HYBRID_SHARD_ZERO2)' \
'--fsdp-sharding-strategy=[FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2]:VALUE:(FULL_SHARD SHARD_GRAD_OP NO_SHARD HYBRID_SHARD HYBRID_SHARD_ZERO2)' \
'--fsdp_reshard_after_forward=[FSDP2\: reshard after forward (true/false); FSDP1\: a sharding strategy]:VALUE:(true false FULL_SHARD SHARD_GRAD_OP NO_SHARD HYBRID_SHARD HYBRID_SHARD_ZERO2)' \
'--fsdp-reshard-after-forward=[FSDP2\: reshard after forward (true/false); FSDP1\: a sharding strategy]:VALUE:(true false FULL_SHARD SHARD_GRAD_OP NO_SHARD HYBRID_SHARD HYBRID_SHARD_ZERO2)' \
'--fsdp_auto_wrap_policy=[TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP]:VALUE:(TRANSFORMER_BASED_WRAP SIZE_BASED_WRAP NO_WRAP)' \
'--fsdp-auto-wrap-policy=[TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP]:VALUE:(TRANSFORMER_BASED_WRAP SIZE_BASED_WRAP NO_WRAP)' \
'--fsdp_transformer_layer_cls_to_wrap=[Layer class names to wrap (exported as FSDP_TRANSFORMER_CLS_TO_WRAP)]:VALUE:' \
'--fsdp-transformer-layer-cls-to-wrap=[Layer class names to wrap (exported as FSDP_TRANSFORMER_CLS_TO_WRAP)]:VALUE:' \
'--fsdp_backward_prefetch=[BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH]:VALUE:(BACKWARD_PRE BACKWARD_POST NO_PREFETCH)' \
'--fsdp-backward-prefetch=[BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH]:VALUE:(BACKWARD_PRE BACKWARD_POST NO_PREFETCH)' \
'--fsdp_state_dict_type=[FULL_STATE_DICT, LOCAL_STATE_DICT or SHARDED_STATE_DICT]:VALUE:(FULL_STATE_DICT LOCAL_STATE_DICT SHARDED_STATE_DICT)' \
'--fsdp-state-dict-type=[FULL_STATE_DICT, LOCAL_STATE_DICT or SHARDED_STATE_DICT]:VALUE:(FULL_STATE_DICT LOCAL_STATE_DICT SHARDED_STATE_DICT)' \
'--fsdp_forward_prefetch=[Explicit forward prefetch (true/false)]:VALUE:(true false)' \
'--fsdp-forward-prefetch=[Explicit forward prefetch (true/false)]:VALUE:(true false)' \
'--fsdp_use_orig_params=[use_orig_params (true/false)]:VALUE:(true false)' \
'--fsdp-use-orig-params=[use_orig_params (true/false)]:VALUE:(true false)' \
'--fsdp_cpu_ram_efficient_loading=[Load pretrained weights on rank 0 only (true/false)]:VALUE:(true false)' \
'--fsdp-cpu-ram-efficient-loading=[Load pretrained weights on rank 0 only (true/false)]:VALUE:(true false)' \
'--fsdp_sync_module_states=[Broadcast module states from rank 0 (true/false)]:VALUE:(true false)' \
'--fsdp-sync-module-states=[Broadcast module states from rank 0 (true/false)]:VALUE:(true false)' \
'--fsdp_activation_checkpointing=[Activation checkpointing (true/false)]:VALUE:(true false)' \
'--fsdp-activation-checkpointing=[Activation checkpointing (true/false)]:VALUE:(true false)' \
'--fsdp_activation_checkpointing_offload=[Offload checkpointed activations to CPU (true/false)]:VALUE:(true false)' \
'--fsdp-activation-checkpointing-offload=[Offload checkpointed activations to CPU (true/false)]:VALUE:(true false)' \
'--megatron_lm_tp_degree=[Tensor parallelism degree]:VALUE:' \
'--megatron-lm-tp-degree=[Tensor parallelism degree]:VALUE:' \
'--megatron_lm_pp_degree=[Pipeline parallelism degree]:VALUE:' \
'--megatron-lm-pp-degree=[Pipeline parallelism degree]:VALUE:' \
'--megatron_lm_num_micro_batches=[Micro-batches with pipeline parallelism]:VALUE:' \
'--megatron-lm-num-micro-batches=[Micro-batches with pipeline parallelism]:VALUE:' \
'--megatron_lm_sequence_parallelism=[Sequence parallelism (true/false)]:VALUE:(true false)' \
'--megatron-lm-sequence-parallelism=[Sequence parallelism (true/false)]:VALUE:(true false)' \
'--megatron_lm_recompute_activations=[Selective activation recomputation (true/false)]:VALUE:(true false)' \
'--megatron-lm-recompute-activations=[Selective activation recomputation (true/false)]:VALUE:(true false)' \
'--megatron_lm_use_distributed_optimizer=[Distributed optimizer (true/false)]:VALUE:(true false)' \
'--megatron-lm-use-distributed-optimizer=[Distributed optimizer (true/false)]:VALUE:(true false)' \
'--megatron_lm_gradient_clipping=[Gradient clipping by global L2 norm]:VALUE:' \
'--megatron-lm-gradient-clipping=[Gradient clipping by global L2 norm]:VALUE:' \
'--megatron_lm_recompute_granularity=[full or selective]:VALUE:(full selective)' \
'--megatron-lm-recompute-granularity=[full or selective]:VALUE:(full selective)' \
'--megatron_lm_recompute_method=[uniform or block]:VALUE:(uniform block)' \
'--megatron-lm-recompute-method=[uniform or block]:VALUE:(uniform block)' \
'--megatron_lm_recompute_num_layers=[Layers to recompute]:VALUE:' \
'--megatron-lm-recompute-num-layers=[Layers to recompute]:VALUE:' \
'--megatron_lm_decoder_last_pipeline_num_layers=[Decoder layers in the last pipeline stage]:VALUE:' \
'--megatron-lm-decoder-last-pipeline-num-layers=[Decoder layers in the last pipeline stage]:VALUE:' \
'--megatron_lm_expert_model_parallel_size=[Expert model parallel size]:VALUE:' \
'--megatron-lm-expert-model-parallel-size=[Expert model parallel size]:VALUE:' \
'--megatron_lm_context_parallel_size=[Context parallel size]:VALUE:' \
'--megatron-lm-context-parallel-size=[Context parallel size]:VALUE:' \
'--megatron_lm_expert_tensor_parallel_size=[Expert tensor parallel size]:VALUE:' \
'--megatron-lm-expert-tensor-parallel-size=[Expert tensor parallel size]:VALUE:' \
'--megatron_lm_attention_dropout=[Attention dropout]:VALUE:' \
'--megatron-lm-attention-dropout=[Attention dropout]:VALUE:' \
'--megatron_lm_hidden_dropout=[Hidden dropout]:VALUE:' \
'--megatron-lm-hidden-dropout=[Hidden dropout]:VALUE:' \
'--megatron_lm_attention_backend=[Attention backend]:VALUE:' \
'--megatron-lm-attention-backend=[Attention backend]:VALUE:' \
'--megatron_lm_attention_softmax_in_fp32=[Softmax in fp32 (true/false)]:VALUE:(true false)' \
'--megatron-lm-attention-softmax-in-fp32=[Softmax in fp32 (true/false)]:VALUE:(true false)' \
'--megatron_lm_calculate_per_token_loss=[Per-token loss (true/false)]:VALUE:(true false)' \
'--megatron-lm-calculate-per-token-loss=[Per-token loss (true/false)]:VALUE:(true false)' \
'--megatron_lm_use_rotary_position_embeddings=[Rotary position embeddings (true/false)]:VALUE:(true false)' \
'--megatron-lm-use-rotary-position-embeddings=[Rotary position embeddings (true/false)]:VALUE:(true false)' \
'--megatron_lm_use_custom_fsdp=[Megatron custom FSDP (true/false; \`False\` is false, unlike accelerate)]:VALUE:(true false)' \
'--megatron-lm-use-custom-fsdp=[Megatron custom FSDP (true/false; \`False\` is false, unlike accelerate)]:VALUE:(true false)' \
'--megatron_lm_no_load_optim=[Do not load optimizer state (true/false)]:VALUE:(true false)' \
'--megatron-lm-no-load-optim=[Do not load optimizer state (true/false)]:VALUE:(true false)' \
'--megatron_lm_no_save_optim=[Do not save optimizer state (true/false)]:VALUE:(true false)' \
'--megatron-lm-no-save-optim=[Do not save optimizer state (true/false)]:VALUE:(true false)' \
'--megatron_lm_eod_mask_loss=[Mask loss at end-of-document tokens (true/false)]:VALUE:(true false)' \
'--megatron-lm-eod-mask-loss=[Mask loss at end-of-document tokens (true/false)]:VALUE:(true false)' \
'--megatron_lm_overlap_cpu_optimizer_d2h_h2d=[Overlap CPU optimizer copies (true/false)]:VALUE:(true false)' \
'--megatron-lm-overlap-cpu-optimizer-d2h-h2d=[Overlap CPU optimizer copies (true/false)]:VALUE:(true false)' \
'--megatron_lm_optimizer_cpu_offload=[Offload the optimizer to CPU (true/false)]:VALUE:(true false)' \
'--megatron-lm-optimizer-cpu-offload=[Offload the optimizer to CPU (true/false)]:VALUE:(true false)' \
'--megatron_lm_use_precision_aware_optimizer=[Precision-aware optimizer (true/false)]:VALUE:(true false)' \
'--megatron-lm-use-precision-aware-optimizer=[Precision-aware optimizer (true/false)]:VALUE:(true false)' \
'--fp8_backend=[FP8 backend\: ao, te or msamp (exported upper-case, which the child needs)]:VALUE:(AO TE MSAMP)' \
'--fp8-backend=[FP8 backend\: ao, te or msamp (exported upper-case, which the child needs)]:VALUE:(AO TE MSAMP)' \
'--fp8_margin=[TE\: scaling margin]:VALUE:' \
'--fp8-margin=[TE\: scaling margin]:VALUE:' \
'--fp8_interval=[TE\: scaling factor update interval]:VALUE:' \
'--fp8-interval=[TE\: scaling factor update interval]:VALUE:' \
'--fp8_format=[TE\: HYBRID, E4M3 or E5M2]:VALUE:(HYBRID E4M3 E5M2)' \
'--fp8-format=[TE\: HYBRID, E4M3 or E5M2]:VALUE:(HYBRID E4M3 E5M2)' \
'--fp8_amax_history_len=[TE\: amax history length]:VALUE:' \
'--fp8-amax-history-len=[TE\: amax history length]:VALUE:' \
'--fp8_amax_compute_algo=[TE\: max or most_recent]:VALUE:(max most_recent)' \
'--fp8-amax-compute-algo=[TE\: max or most_recent]:VALUE:(max most_recent)' \
'--fp8_override_linear_precision=[TE\: fprop,dgrad,wgrad in higher precision, e.g. false,false,true]:VALUE:' \
'--fp8-override-linear-precision=[TE\: fprop,dgrad,wgrad in higher precision, e.g. false,false,true]:VALUE:' \
'--fp8_opt_level=[MS-AMP\: O1 or O2]:VALUE:(O1 O2)' \
'--fp8-opt-level=[MS-AMP\: O1 or O2]:VALUE:(O1 O2)' \
'--fp8_enable_fsdp_float8_all_gather=[AO\: float8 all-gather under FSDP2 (true/false)]:VALUE:(true false)' \
'--fp8-enable-fsdp-float8-all-gather=[AO\: float8 all-gather under FSDP2 (true/false)]:VALUE:(true false)' \
'--fp8_pad_inner_dim=[AO\: pad the inner dimension (true/false)]:VALUE:(true false)' \
'--fp8-pad-inner-dim=[AO\: pad the inner dimension (true/false)]:VALUE:(true false)' \
'--parallelism_config_dp_replicate_size=[Data-parallel replicate size]:VALUE:' \
'--parallelism-config-dp-replicate-size=[Data-parallel replicate size]:VALUE:' \
'--parallelism_config_dp_shard_size=[Data-parallel shard size]:VALUE:' \
'--parallelism-config-dp-shard-size=[Data-parallel shard size]:VALUE:' \
'--parallelism_config_tp_size=[Tensor-parallel size]:VALUE:' \
'--parallelism-config-tp-size=[Tensor-parallel size]:VALUE:' \
'--parallelism_config_cp_size=[Context-parallel size]:VALUE:' \
'--parallelism-config-cp-size=[Context-parallel size]:VALUE:' \
'--parallelism_config_cp_backend=[Context-parallel backend (torch)]:VALUE:(torch)' \
'--parallelism-config-cp-backend=[Context-parallel backend (torch)]:VALUE:(torch)' \
'--parallelism_config_cp_comm_strategy=[allgather or alltoall]:VALUE:(allgather alltoall)' \
'--parallelism-config-cp-comm-strategy=[allgather or alltoall]:VALUE:(allgather alltoall)' \
'--parallelism_config_sp_size=[Sequence-parallel size]:VALUE:' \
'--parallelism-config-sp-size=[Sequence-parallel size]:VALUE:' \
'--parallelism_config_sp_backend=[Sequence-parallel backend (deepspeed)]:VALUE:(deepspeed)' \
'--parallelism-config-sp-backend=[Sequence-parallel backend (deepspeed)]:VALUE:(deepspeed)' \
'--parallelism_config_sp_seq_length=[Sequence length]:VALUE:' \
'--parallelism-config-sp-seq-length=[Sequence length]:VALUE:' \
'--parallelism_config_sp_seq_length_is_variable=[Variable sequence length (true/false)]:VALUE:(true false)' \
'--parallelism-config-sp-seq-length-is-variable=[Variable sequence length (true/false)]:VALUE:(true false)' \
'--parallelism_config_sp_attn_implementation=[Attention implementation (sdpa, …)]:VALUE:' \
'--parallelism-config-sp-attn-implementation=[Attention implementation (sdpa, …)]:VALUE:' \
'--nnodes=[Number of nodes N, or an elastic range MIN\:MAX (a range runs the real torchrun, and needs --rdzv_backend c10d or etcd)]:N|MIN:MAX:' \
'--nproc_per_node=[Ranks on this node\: a number, \`gpu\` (the visible GPUs), \`cpu\` (the CPUs this process may run on) or \`auto\` (GPUs if any, else CPUs); nodes may differ]:N|auto|cpu|gpu:' \
'--nproc-per-node=[Ranks on this node\: a number, \`gpu\` (the visible GPUs), \`cpu\` (the CPUs this process may run on) or \`auto\` (GPUs if any, else CPUs); nodes may differ]:N|auto|cpu|gpu:' \
'--node_rank=[This node'\''s rank, 0 .. nnodes-1 (= --machine_rank)]:RANK:' \
'--node-rank=[This node'\''s rank, 0 .. nnodes-1 (= --machine_rank)]:RANK:' \
'--master_addr=[Address of node 0 (= --main_process_ip)]:HOST:' \
'--master-addr=[Address of node 0 (= --main_process_ip)]:HOST:' \
'--master_port=[Rendezvous port on node 0 (= --main_process_port)]:PORT:' \
'--master-port=[Rendezvous port on node 0 (= --main_process_port)]:PORT:' \
'--rdzv_endpoint=[Rendezvous endpoint HOST\:PORT (\[IPv6\]\:PORT)\: with the static backend, node 0'\''s address and port; with c10d or etcd, the endpoint torchrun'\''s rendezvous uses]:HOST:PORT:' \
'--rdzv-endpoint=[Rendezvous endpoint HOST\:PORT (\[IPv6\]\:PORT)\: with the static backend, node 0'\''s address and port; with c10d or etcd, the endpoint torchrun'\''s rendezvous uses]:HOST:PORT:' \
'--rdzv_id=[Run id shared by every node (TORCHELASTIC_RUN_ID, the log directory'\''s prefix; default \`none\`)]:ID:' \
'--rdzv-id=[Run id shared by every node (TORCHELASTIC_RUN_ID, the log directory'\''s prefix; default \`none\`)]:ID:' \
'-r+[Streams written only to the log files, not the console\: 0-3 (none, stdout, stderr, both) or a per-local-rank map such as 0\:3,1\:1]:0-3:' \
'--redirects=[Streams written only to the log files, not the console\: 0-3 (none, stdout, stderr, both) or a per-local-rank map such as 0\:3,1\:1]:0-3:' \
'--local_addr=[This node'\''s address\: MASTER_ADDR of a one-node run torchrun would rendezvous locally (default\: this host'\''s FQDN)]:HOST:' \
'--local-addr=[This node'\''s address\: MASTER_ADDR of a one-node run torchrun would rendezvous locally (default\: this host'\''s FQDN)]:HOST:' \
'--signals_to_handle=[The signals forwarded to the ranks, each of which stops the run (default SIGTERM,SIGINT,SIGHUP,SIGQUIT forwarded and stopping, SIGUSR1,SIGUSR2 forwarded only)]:SIG,...:' \
'--signals-to-handle=[The signals forwarded to the ranks, each of which stops the run (default SIGTERM,SIGINT,SIGHUP,SIGQUIT forwarded and stopping, SIGUSR1,SIGUSR2 forwarded only)]:SIG,...:' \
'--shutdown_timeout=[Whole seconds between the stop signal and SIGKILL\: the same setting as --grace_period (default\: TORCH_ELASTIC_SHUTDOWN_TIMEOUT)]:SECONDS:' \
'--shutdown-timeout=[Whole seconds between the stop signal and SIGKILL\: the same setting as --grace_period (default\: TORCH_ELASTIC_SHUTDOWN_TIMEOUT)]:SECONDS:' \
'--duplicate_stdout_filters=[Tee'\''d stdout lines containing any of these comma-separated strings (\`,,\` is a comma) also go to attempt_N/filtered_stdout.log]:TEXT,...:' \
'--duplicate-stdout-filters=[Tee'\''d stdout lines containing any of these comma-separated strings (\`,,\` is a comma) also go to attempt_N/filtered_stdout.log]:TEXT,...:' \
'--duplicate_stderr_filters=[Tee'\''d stderr lines containing any of these comma-separated strings (\`,,\` is a comma) also go to attempt_N/filtered_stderr.log]:TEXT,...:' \
'--duplicate-stderr-filters=[Tee'\''d stderr lines containing any of these comma-separated strings (\`,,\` is a comma) also go to attempt_N/filtered_stderr.log]:TEXT,...:' \
'--numa_binding=[Pin each rank to the CPUs near its GPU (the GPU of its local rank)\: node, socket, exclusive or core-complex]:MODE:((node\:"Every CPU of the GPU'\''s NUMA node"
socket\:"Every CPU of the NUMA nodes of the GPU'\''s socket"
exclusive\:"An exclusive share of the physical cores of the GPU'\''s NUMA node"
core-complex\:"One core complex (the CPUs sharing a last-level cache) of the GPU'\''s NUMA node"))' \
'--numa-binding=[Pin each rank to the CPUs near its GPU (the GPU of its local rank)\: node, socket, exclusive or core-complex]:MODE:((node\:"Every CPU of the GPU'\''s NUMA node"
socket\:"Every CPU of the NUMA nodes of the GPU'\''s socket"
exclusive\:"An exclusive share of the physical cores of the GPU'\''s NUMA node"
core-complex\:"One core complex (the CPUs sharing a last-level cache) of the GPU'\''s NUMA node"))' \
'--start_method=[torchrun'\''s start method (spawn, fork, forkserver)\: no effect for a script, as in torchrun (every rank is a fresh process); with --run_path only spawn, its default]:METHOD:(spawn fork forkserver)' \
'--start-method=[torchrun'\''s start method (spawn, fork, forkserver)\: no effect for a script, as in torchrun (every rank is a fresh process); with --run_path only spawn, its default]:METHOD:(spawn fork forkserver)' \
'--logs_specs=[Refused\: a torchrun.logs_specs entry point is Python code loaded into torchrun'\''s agent]:NAME:' \
'--logs-specs=[Refused\: a torchrun.logs_specs entry point is Python code loaded into torchrun'\''s agent]:NAME:' \
'--event_log_handler=[torchrun'\''s event log handler\: only \`null\` (its default); a named handler is Python code in torchrun'\''s agent]:NAME:' \
'--event-log-handler=[torchrun'\''s event log handler\: only \`null\` (its default); a named handler is Python code in torchrun'\''s agent]:NAME:' \
'-q[Print only the failing rank'\''s report, no launcher notes]' \
'--quiet[Print only the failing rank'\''s report, no launcher notes]' \
'-m[Run the script as a module\: \`python -m MODULE\`]' \
'--module[Run the script as a module\: \`python -m MODULE\`]' \
'--no_python[Run the script directly, without python (any executable)]' \
'--no-python[Run the script directly, without python (any executable)]' \
'--dry-run[Print the resolved config with the origin of each value, the launch (accel-launch starts every rank itself; also the path accelerate launch would take) and each rank'\''s argv and environment; run nothing]' \
'--dry_run[Print the resolved config with the origin of each value, the launch (accel-launch starts every rank itself; also the path accelerate launch would take) and each rank'\''s argv and environment; run nothing]' \
'--json[With --dry-run\: print JSON]' \
'--replace_failing_nodes[Multi-node, node 0\: a node whose ranks fail, while --max_restarts remain and a spare waits, is replaced by the spare for the next attempt instead of being restarted in place (its launcher exits with its rank'\''s status). See SPARE NODES]' \
'--replace-failing-nodes[Multi-node, node 0\: a node whose ranks fail, while --max_restarts remain and a spare waits, is replaced by the spare for the next attempt instead of being restarted in place (its launcher exits with its rank'\''s status). See SPARE NODES]' \
'--drain_lost_nodes[Multi-node under SLURM, node 0\: drain each lost or replaced node (\`scontrol update NodeName=H State=DRAIN Reason=...\`) where this user may; a note says so when it may not. See SPARE NODES]' \
'--drain-lost-nodes[Multi-node under SLURM, node 0\: drain each lost or replaced node (\`scontrol update NodeName=H State=DRAIN Reason=...\`) where this user may; a note says so when it may not. See SPARE NODES]' \
'--cpu[Run on CPU\: N gloo ranks with --num_processes N (accelerate starts one process)]' \
'--multi_gpu[Distributed GPU training (DDP)]' \
'--multi-gpu[Distributed GPU training (DDP)]' \
'--tpu[TPU training (not supported by accel-launch; use accelerate launch)]' \
'--use_deepspeed[DeepSpeed training]' \
'--use-deepspeed[DeepSpeed training]' \
'--use_fsdp[Fully Sharded Data Parallel training]' \
'--use-fsdp[Fully Sharded Data Parallel training]' \
'--use_parallelism_config[N-D parallelism through parallelism_config (requires FSDP 2)]' \
'--use-parallelism-config[N-D parallelism through parallelism_config (requires FSDP 2)]' \
'--use_megatron_lm[Megatron-LM training]' \
'--use-megatron-lm[Megatron-LM training]' \
'--stacks_on_failure[When a rank fails, print the other ranks'\'' Python stacks before stopping them]' \
'--stacks-on-failure[When a rank fails, print the other ranks'\'' Python stacks before stopping them]' \
'--slurm_requeue[On SLURM'\''s warning signal (--requeue_signal), give the ranks --grace_period to save and exit, then requeue the job (\`scontrol requeue\`, once per job) and exit 123 (default\: ACCEL_LAUNCH_SLURM_REQUEUE)]' \
'--slurm-requeue[On SLURM'\''s warning signal (--requeue_signal), give the ranks --grace_period to save and exit, then requeue the job (\`scontrol requeue\`, once per job) and exit 123 (default\: ACCEL_LAUNCH_SLURM_REQUEUE)]' \
'--tpu_cluster[TPU pod (not supported)]' \
'--tpu-cluster[TPU pod (not supported)]' \
'--no_tpu_cluster[TPU\: internal (not supported)]' \
'--no-tpu-cluster[TPU\: internal (not supported)]' \
'--debug[Debug mode (ACCELERATE_DEBUG_MODE=true)]' \
'--enable_cpu_affinity[Pin each rank to CPU cores near its GPU (ACCELERATE_CPU_AFFINITY=1)]' \
'--enable-cpu-affinity[Pin each rank to CPU cores near its GPU (ACCELERATE_CPU_AFFINITY=1)]' \
'--dynamo_use_fullgraph[torch.compile with fullgraph=True]' \
'--dynamo-use-fullgraph[torch.compile with fullgraph=True]' \
'--dynamo_use_dynamic[torch.compile with dynamic shapes]' \
'--dynamo-use-dynamic[torch.compile with dynamic shapes]' \
'--dynamo_use_regional_compilation[Compile repeated blocks once (regional compilation)]' \
'--dynamo-use-regional-compilation[Compile repeated blocks once (regional compilation)]' \
'--same_network[All machines are on the same network (accepted; the rendezvous is the same either way)]' \
'--same-network[All machines are on the same network (accepted; the rendezvous is the same either way)]' \
'--tpu_use_sudo[TPU pod\: use sudo (config\: tpu_use_sudo)]' \
'--tpu-use-sudo[TPU pod\: use sudo (config\: tpu_use_sudo)]' \
'--downcast_bf16[TPU\: XLA_DOWNCAST_BF16 (config\: downcast_bf16)]' \
'--downcast-bf16[TPU\: XLA_DOWNCAST_BF16 (config\: downcast_bf16)]' \
'--fp8_use_autocast_during_eval[TE\: autocast during evaluation]' \
'--fp8-use-autocast-during-eval[TE\: autocast during evaluation]' \
'--standalone[One node, rendezvous on a free local port, a fresh UUID as run id (torchrun'\''s c10d on localhost\:0)]' \
'--run_path[Run the script with runpy.run_path in a fresh interpreter, as torchrun'\''s --run-path (takes precedence over --no_python)]' \
'--run-path[Run the script with runpy.run_path in a fresh interpreter, as torchrun'\''s --run-path (takes precedence over --no_python)]' \
'--virtual_local_rank[Each rank sees only its own GPU, as device 0\: LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES the rank'\''s entry of this node'\''s list]' \
'--virtual-local-rank[Each rank sees only its own GPU, as device 0\: LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES the rank'\''s entry of this node'\''s list]' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
'-V[Print version]' \
'--version[Print version]' \
'*::command -- The training script (or module with -m, or program with --no_python) and its arguments:_cmdambivalent' \
&& ret=0
}

(( $+functions[_accel-launch_commands] )) ||
_accel-launch_commands() {
    local commands; commands=()
    _describe -t commands 'accel-launch commands' commands "$@"
}

if [ "$funcstack[1]" = "_accel-launch" ]; then
    _accel-launch "$@"
else
    compdef _accel-launch accel-launch
fi
