_accel__launch() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="accel__launch"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        accel__launch)
            opts="-q -m -t -r -h -V --config-file --config_file --quiet --module --no-python --no_python --dry_run --dry-run --json --grace-period --grace_period --log-template --log_template --rank-prefix --rank_prefix --local-ranks-filter --local_ranks_filter --rdzv-timeout --rdzv_timeout --report-json --report_json --exclude-file --exclude_file --replace-failing-nodes --replace_failing_nodes --drain-lost-nodes --drain_lost_nodes --cpu --multi-gpu --multi_gpu --tpu --num-cpu-threads-per-process --num_cpu_threads_per_process --use-deepspeed --use_deepspeed --use-fsdp --use_fsdp --use-parallelism-config --use_parallelism_config --use-megatron-lm --use_megatron_lm --tee --log-dir --log_dir --role --rdzv-conf --rdzv_conf --max-restarts --max_restarts --monitor-interval --monitor_interval --hang-timeout --hang_timeout --straggler-threshold --straggler_threshold --straggler-window --straggler_window --stacks-on-failure --stacks_on_failure --stacks --slurm-requeue --slurm_requeue --requeue-signal --requeue_signal --tpu-cluster --tpu_cluster --no-tpu-cluster --no_tpu_cluster --vm --env --aws-access-key-id --aws_access_key_id --aws-secret-access-key --aws_secret_access_key --debug --mixed-precision --mixed_precision --num-processes --num_processes --num-machines --num_machines --enable-cpu-affinity --enable_cpu_affinity --dynamo-backend --dynamo_backend --dynamo-mode --dynamo_mode --dynamo-use-fullgraph --dynamo_use_fullgraph --dynamo-use-dynamic --dynamo_use_dynamic --dynamo-use-regional-compilation --dynamo_use_regional_compilation --gpu-ids --gpu_ids --same-network --same_network --machine-rank --machine_rank --main-process-ip --main_process_ip --main-process-port --main_process_port --rdzv-backend --rdzv_backend --tpu-use-sudo --tpu_use_sudo --main-training-function --main_training_function --downcast-bf16 --downcast_bf16 --mpirun-hostfile --mpirun_hostfile --deepspeed-config-file --deepspeed_config_file --zero-stage --zero_stage --offload-optimizer-device --offload_optimizer_device --offload-param-device --offload_param_device --offload-optimizer-nvme-path --offload_optimizer_nvme_path --offload-param-nvme-path --offload_param_nvme_path --gradient-accumulation-steps --gradient_accumulation_steps --gradient-clipping --gradient_clipping --zero3-init-flag --zero3_init_flag --zero3-save-16bit-model --zero3_save_16bit_model --deepspeed-hostfile --deepspeed_hostfile --deepspeed-exclusion-filter --deepspeed_exclusion_filter --deepspeed-inclusion-filter --deepspeed_inclusion_filter --deepspeed-multinode-launcher --deepspeed_multinode_launcher --deepspeed-moe-layer-cls-names --deepspeed_moe_layer_cls_names --fsdp-version --fsdp_version --fsdp-offload-params --fsdp_offload_params --fsdp-min-num-params --fsdp_min_num_params --fsdp-sharding-strategy --fsdp_sharding_strategy --fsdp-reshard-after-forward --fsdp_reshard_after_forward --fsdp-auto-wrap-policy --fsdp_auto_wrap_policy --fsdp-transformer-layer-cls-to-wrap --fsdp_transformer_layer_cls_to_wrap --fsdp-backward-prefetch --fsdp_backward_prefetch --fsdp-state-dict-type --fsdp_state_dict_type --fsdp-forward-prefetch --fsdp_forward_prefetch --fsdp-use-orig-params --fsdp_use_orig_params --fsdp-cpu-ram-efficient-loading --fsdp_cpu_ram_efficient_loading --fsdp-sync-module-states --fsdp_sync_module_states --fsdp-activation-checkpointing --fsdp_activation_checkpointing --fsdp-activation-checkpointing-offload --fsdp_activation_checkpointing_offload --megatron-lm-tp-degree --megatron_lm_tp_degree --megatron-lm-pp-degree --megatron_lm_pp_degree --megatron-lm-num-micro-batches --megatron_lm_num_micro_batches --megatron-lm-sequence-parallelism --megatron_lm_sequence_parallelism --megatron-lm-recompute-activations --megatron_lm_recompute_activations --megatron-lm-use-distributed-optimizer --megatron_lm_use_distributed_optimizer --megatron-lm-gradient-clipping --megatron_lm_gradient_clipping --megatron-lm-recompute-granularity --megatron_lm_recompute_granularity --megatron-lm-recompute-method --megatron_lm_recompute_method --megatron-lm-recompute-num-layers --megatron_lm_recompute_num_layers --megatron-lm-decoder-last-pipeline-num-layers --megatron_lm_decoder_last_pipeline_num_layers --megatron-lm-expert-model-parallel-size --megatron_lm_expert_model_parallel_size --megatron-lm-context-parallel-size --megatron_lm_context_parallel_size --megatron-lm-expert-tensor-parallel-size --megatron_lm_expert_tensor_parallel_size --megatron-lm-attention-dropout --megatron_lm_attention_dropout --megatron-lm-hidden-dropout --megatron_lm_hidden_dropout --megatron-lm-attention-backend --megatron_lm_attention_backend --megatron-lm-attention-softmax-in-fp32 --megatron_lm_attention_softmax_in_fp32 --megatron-lm-calculate-per-token-loss --megatron_lm_calculate_per_token_loss --megatron-lm-use-rotary-position-embeddings --megatron_lm_use_rotary_position_embeddings --megatron-lm-use-custom-fsdp --megatron_lm_use_custom_fsdp --megatron-lm-no-load-optim --megatron_lm_no_load_optim --megatron-lm-no-save-optim --megatron_lm_no_save_optim --megatron-lm-eod-mask-loss --megatron_lm_eod_mask_loss --megatron-lm-overlap-cpu-optimizer-d2h-h2d --megatron_lm_overlap_cpu_optimizer_d2h_h2d --megatron-lm-optimizer-cpu-offload --megatron_lm_optimizer_cpu_offload --megatron-lm-use-precision-aware-optimizer --megatron_lm_use_precision_aware_optimizer --fp8-backend --fp8_backend --fp8-use-autocast-during-eval --fp8_use_autocast_during_eval --fp8-margin --fp8_margin --fp8-interval --fp8_interval --fp8-format --fp8_format --fp8-amax-history-len --fp8_amax_history_len --fp8-amax-compute-algo --fp8_amax_compute_algo --fp8-override-linear-precision --fp8_override_linear_precision --fp8-opt-level --fp8_opt_level --fp8-enable-fsdp-float8-all-gather --fp8_enable_fsdp_float8_all_gather --fp8-pad-inner-dim --fp8_pad_inner_dim --parallelism-config-dp-replicate-size --parallelism_config_dp_replicate_size --parallelism-config-dp-shard-size --parallelism_config_dp_shard_size --parallelism-config-tp-size --parallelism_config_tp_size --parallelism-config-cp-size --parallelism_config_cp_size --parallelism-config-cp-backend --parallelism_config_cp_backend --parallelism-config-cp-comm-strategy --parallelism_config_cp_comm_strategy --parallelism-config-sp-size --parallelism_config_sp_size --parallelism-config-sp-backend --parallelism_config_sp_backend --parallelism-config-sp-seq-length --parallelism_config_sp_seq_length --parallelism-config-sp-seq-length-is-variable --parallelism_config_sp_seq_length_is_variable --parallelism-config-sp-attn-implementation --parallelism_config_sp_attn_implementation --nnodes --nproc-per-node --nproc_per_node --node-rank --node_rank --master-addr --master_addr --master-port --master_port --rdzv-endpoint --rdzv_endpoint --rdzv-id --rdzv_id --standalone --run-path --run_path --redirects --local-addr --local_addr --signals-to-handle --signals_to_handle --shutdown-timeout --shutdown_timeout --virtual-local-rank --virtual_local_rank --duplicate-stdout-filters --duplicate_stdout_filters --duplicate-stderr-filters --duplicate_stderr_filters --numa-binding --numa_binding --start-method --start_method --logs-specs --logs_specs --event-log-handler --event_log_handler --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --config_file)
                    local oldifs
                    if [ -n "${IFS+x}" ]; then
                        oldifs="$IFS"
                    fi
                    IFS=$'\n'
                    COMPREPLY=($(compgen -f "${cur}"))
                    if [ -n "${oldifs+x}" ]; then
                        IFS="$oldifs"
                    fi
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o filenames
                    fi
                    return 0
                    ;;
                --config-file)
                    local oldifs
                    if [ -n "${IFS+x}" ]; then
                        oldifs="$IFS"
                    fi
                    IFS=$'\n'
                    COMPREPLY=($(compgen -f "${cur}"))
                    if [ -n "${oldifs+x}" ]; then
                        IFS="$oldifs"
                    fi
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o filenames
                    fi
                    return 0
                    ;;
                --grace_period)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --grace-period)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --log_template)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --log-template)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --rank_prefix)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --rank-prefix)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --local_ranks_filter)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --local-ranks-filter)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --rdzv_timeout)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --rdzv-timeout)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --report_json)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --report-json)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --exclude_file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --exclude-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --num_cpu_threads_per_process)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --num-cpu-threads-per-process)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --tee)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                -t)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --log_dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --role)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --rdzv_conf)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --rdzv-conf)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --max_restarts)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --max-restarts)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --monitor_interval)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --monitor-interval)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --hang_timeout)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --hang-timeout)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --straggler_threshold)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --straggler-threshold)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --straggler_window)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --straggler-window)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --stacks)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --requeue_signal)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --requeue-signal)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --vm)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --env)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --aws_access_key_id)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --aws-access-key-id)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --aws_secret_access_key)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --aws-secret-access-key)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --mixed_precision)
                    COMPREPLY=($(compgen -W "no fp16 bf16 fp8" -- "${cur}"))
                    return 0
                    ;;
                --mixed-precision)
                    COMPREPLY=($(compgen -W "no fp16 bf16 fp8" -- "${cur}"))
                    return 0
                    ;;
                --num_processes)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --num-processes)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --num_machines)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --num-machines)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --dynamo_backend)
                    COMPREPLY=($(compgen -W "NO EAGER AOT_EAGER INDUCTOR AOT_TS_NVFUSER NVPRIMS_NVFUSER CUDAGRAPHS OFI FX2TRT ONNXRT TENSORRT AOT_TORCHXLA_TRACE_ONCE TORCHXLA_TRACE_ONCE TVM HPU_BACKEND NEURON" -- "${cur}"))
                    return 0
                    ;;
                --dynamo-backend)
                    COMPREPLY=($(compgen -W "NO EAGER AOT_EAGER INDUCTOR AOT_TS_NVFUSER NVPRIMS_NVFUSER CUDAGRAPHS OFI FX2TRT ONNXRT TENSORRT AOT_TORCHXLA_TRACE_ONCE TORCHXLA_TRACE_ONCE TVM HPU_BACKEND NEURON" -- "${cur}"))
                    return 0
                    ;;
                --dynamo_mode)
                    COMPREPLY=($(compgen -W "default reduce-overhead max-autotune max-autotune-no-cudagraphs" -- "${cur}"))
                    return 0
                    ;;
                --dynamo-mode)
                    COMPREPLY=($(compgen -W "default reduce-overhead max-autotune max-autotune-no-cudagraphs" -- "${cur}"))
                    return 0
                    ;;
                --gpu_ids)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --gpu-ids)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --machine_rank)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --machine-rank)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --main_process_ip)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --main-process-ip)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --main_process_port)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --main-process-port)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --rdzv_backend)
                    COMPREPLY=($(compgen -W "static c10d etcd etcd-v2" -- "${cur}"))
                    return 0
                    ;;
                --rdzv-backend)
                    COMPREPLY=($(compgen -W "static c10d etcd etcd-v2" -- "${cur}"))
                    return 0
                    ;;
                --main_training_function)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --main-training-function)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --mpirun_hostfile)
                    local oldifs
                    if [ -n "${IFS+x}" ]; then
                        oldifs="$IFS"
                    fi
                    IFS=$'\n'
                    COMPREPLY=($(compgen -f "${cur}"))
                    if [ -n "${oldifs+x}" ]; then
                        IFS="$oldifs"
                    fi
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o filenames
                    fi
                    return 0
                    ;;
                --mpirun-hostfile)
                    local oldifs
                    if [ -n "${IFS+x}" ]; then
                        oldifs="$IFS"
                    fi
                    IFS=$'\n'
                    COMPREPLY=($(compgen -f "${cur}"))
                    if [ -n "${oldifs+x}" ]; then
                        IFS="$oldifs"
                    fi
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o filenames
                    fi
                    return 0
                    ;;
                --deepspeed_config_file)
                    local oldifs
                    if [ -n "${IFS+x}" ]; then
                        oldifs="$IFS"
                    fi
                    IFS=$'\n'
                    COMPREPLY=($(compgen -f "${cur}"))
                    if [ -n "${oldifs+x}" ]; then
                        IFS="$oldifs"
                    fi
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o filenames
                    fi
                    return 0
                    ;;
                --deepspeed-config-file)
                    local oldifs
                    if [ -n "${IFS+x}" ]; then
                        oldifs="$IFS"
                    fi
                    IFS=$'\n'
                    COMPREPLY=($(compgen -f "${cur}"))
                    if [ -n "${oldifs+x}" ]; then
                        IFS="$oldifs"
                    fi
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o filenames
                    fi
                    return 0
                    ;;
                --zero_stage)
                    COMPREPLY=($(compgen -W "0 1 2 3" -- "${cur}"))
                    return 0
                    ;;
                --zero-stage)
                    COMPREPLY=($(compgen -W "0 1 2 3" -- "${cur}"))
                    return 0
                    ;;
                --offload_optimizer_device)
                    COMPREPLY=($(compgen -W "none cpu nvme" -- "${cur}"))
                    return 0
                    ;;
                --offload-optimizer-device)
                    COMPREPLY=($(compgen -W "none cpu nvme" -- "${cur}"))
                    return 0
                    ;;
                --offload_param_device)
                    COMPREPLY=($(compgen -W "none cpu nvme" -- "${cur}"))
                    return 0
                    ;;
                --offload-param-device)
                    COMPREPLY=($(compgen -W "none cpu nvme" -- "${cur}"))
                    return 0
                    ;;
                --offload_optimizer_nvme_path)
                    COMPREPLY=()
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o plusdirs
                    fi
                    return 0
                    ;;
                --offload-optimizer-nvme-path)
                    COMPREPLY=()
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o plusdirs
                    fi
                    return 0
                    ;;
                --offload_param_nvme_path)
                    COMPREPLY=()
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o plusdirs
                    fi
                    return 0
                    ;;
                --offload-param-nvme-path)
                    COMPREPLY=()
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o plusdirs
                    fi
                    return 0
                    ;;
                --gradient_accumulation_steps)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --gradient-accumulation-steps)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --gradient_clipping)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --gradient-clipping)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --zero3_init_flag)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --zero3-init-flag)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --zero3_save_16bit_model)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --zero3-save-16bit-model)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --deepspeed_hostfile)
                    local oldifs
                    if [ -n "${IFS+x}" ]; then
                        oldifs="$IFS"
                    fi
                    IFS=$'\n'
                    COMPREPLY=($(compgen -f "${cur}"))
                    if [ -n "${oldifs+x}" ]; then
                        IFS="$oldifs"
                    fi
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o filenames
                    fi
                    return 0
                    ;;
                --deepspeed-hostfile)
                    local oldifs
                    if [ -n "${IFS+x}" ]; then
                        oldifs="$IFS"
                    fi
                    IFS=$'\n'
                    COMPREPLY=($(compgen -f "${cur}"))
                    if [ -n "${oldifs+x}" ]; then
                        IFS="$oldifs"
                    fi
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o filenames
                    fi
                    return 0
                    ;;
                --deepspeed_exclusion_filter)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --deepspeed-exclusion-filter)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --deepspeed_inclusion_filter)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --deepspeed-inclusion-filter)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --deepspeed_multinode_launcher)
                    COMPREPLY=($(compgen -W "pdsh standard openmpi mvapich mpich nossh slurm" -- "${cur}"))
                    return 0
                    ;;
                --deepspeed-multinode-launcher)
                    COMPREPLY=($(compgen -W "pdsh standard openmpi mvapich mpich nossh slurm" -- "${cur}"))
                    return 0
                    ;;
                --deepspeed_moe_layer_cls_names)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --deepspeed-moe-layer-cls-names)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --fsdp_version)
                    COMPREPLY=($(compgen -W "1 2" -- "${cur}"))
                    return 0
                    ;;
                --fsdp-version)
                    COMPREPLY=($(compgen -W "1 2" -- "${cur}"))
                    return 0
                    ;;
                --fsdp_offload_params)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --fsdp-offload-params)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --fsdp_min_num_params)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --fsdp-min-num-params)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --fsdp_sharding_strategy)
                    COMPREPLY=($(compgen -W "FULL_SHARD SHARD_GRAD_OP NO_SHARD HYBRID_SHARD HYBRID_SHARD_ZERO2" -- "${cur}"))
                    return 0
                    ;;
                --fsdp-sharding-strategy)
                    COMPREPLY=($(compgen -W "FULL_SHARD SHARD_GRAD_OP NO_SHARD HYBRID_SHARD HYBRID_SHARD_ZERO2" -- "${cur}"))
                    return 0
                    ;;
                --fsdp_reshard_after_forward)
                    COMPREPLY=($(compgen -W "true false FULL_SHARD SHARD_GRAD_OP NO_SHARD HYBRID_SHARD HYBRID_SHARD_ZERO2" -- "${cur}"))
                    return 0
                    ;;
                --fsdp-reshard-after-forward)
                    COMPREPLY=($(compgen -W "true false FULL_SHARD SHARD_GRAD_OP NO_SHARD HYBRID_SHARD HYBRID_SHARD_ZERO2" -- "${cur}"))
                    return 0
                    ;;
                --fsdp_auto_wrap_policy)
                    COMPREPLY=($(compgen -W "TRANSFORMER_BASED_WRAP SIZE_BASED_WRAP NO_WRAP" -- "${cur}"))
                    return 0
                    ;;
                --fsdp-auto-wrap-policy)
                    COMPREPLY=($(compgen -W "TRANSFORMER_BASED_WRAP SIZE_BASED_WRAP NO_WRAP" -- "${cur}"))
                    return 0
                    ;;
                --fsdp_transformer_layer_cls_to_wrap)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --fsdp-transformer-layer-cls-to-wrap)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --fsdp_backward_prefetch)
                    COMPREPLY=($(compgen -W "BACKWARD_PRE BACKWARD_POST NO_PREFETCH" -- "${cur}"))
                    return 0
                    ;;
                --fsdp-backward-prefetch)
                    COMPREPLY=($(compgen -W "BACKWARD_PRE BACKWARD_POST NO_PREFETCH" -- "${cur}"))
                    return 0
                    ;;
                --fsdp_state_dict_type)
                    COMPREPLY=($(compgen -W "FULL_STATE_DICT LOCAL_STATE_DICT SHARDED_STATE_DICT" -- "${cur}"))
                    return 0
                    ;;
                --fsdp-state-dict-type)
                    COMPREPLY=($(compgen -W "FULL_STATE_DICT LOCAL_STATE_DICT SHARDED_STATE_DICT" -- "${cur}"))
                    return 0
                    ;;
                --fsdp_forward_prefetch)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --fsdp-forward-prefetch)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --fsdp_use_orig_params)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --fsdp-use-orig-params)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --fsdp_cpu_ram_efficient_loading)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --fsdp-cpu-ram-efficient-loading)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --fsdp_sync_module_states)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --fsdp-sync-module-states)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --fsdp_activation_checkpointing)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --fsdp-activation-checkpointing)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --fsdp_activation_checkpointing_offload)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --fsdp-activation-checkpointing-offload)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron_lm_tp_degree)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron-lm-tp-degree)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron_lm_pp_degree)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron-lm-pp-degree)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron_lm_num_micro_batches)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron-lm-num-micro-batches)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron_lm_sequence_parallelism)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron-lm-sequence-parallelism)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron_lm_recompute_activations)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron-lm-recompute-activations)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron_lm_use_distributed_optimizer)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron-lm-use-distributed-optimizer)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron_lm_gradient_clipping)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron-lm-gradient-clipping)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron_lm_recompute_granularity)
                    COMPREPLY=($(compgen -W "full selective" -- "${cur}"))
                    return 0
                    ;;
                --megatron-lm-recompute-granularity)
                    COMPREPLY=($(compgen -W "full selective" -- "${cur}"))
                    return 0
                    ;;
                --megatron_lm_recompute_method)
                    COMPREPLY=($(compgen -W "uniform block" -- "${cur}"))
                    return 0
                    ;;
                --megatron-lm-recompute-method)
                    COMPREPLY=($(compgen -W "uniform block" -- "${cur}"))
                    return 0
                    ;;
                --megatron_lm_recompute_num_layers)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron-lm-recompute-num-layers)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron_lm_decoder_last_pipeline_num_layers)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron-lm-decoder-last-pipeline-num-layers)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron_lm_expert_model_parallel_size)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron-lm-expert-model-parallel-size)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron_lm_context_parallel_size)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron-lm-context-parallel-size)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron_lm_expert_tensor_parallel_size)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron-lm-expert-tensor-parallel-size)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron_lm_attention_dropout)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron-lm-attention-dropout)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron_lm_hidden_dropout)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron-lm-hidden-dropout)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron_lm_attention_backend)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron-lm-attention-backend)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --megatron_lm_attention_softmax_in_fp32)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron-lm-attention-softmax-in-fp32)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron_lm_calculate_per_token_loss)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron-lm-calculate-per-token-loss)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron_lm_use_rotary_position_embeddings)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron-lm-use-rotary-position-embeddings)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron_lm_use_custom_fsdp)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron-lm-use-custom-fsdp)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron_lm_no_load_optim)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron-lm-no-load-optim)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron_lm_no_save_optim)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron-lm-no-save-optim)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron_lm_eod_mask_loss)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron-lm-eod-mask-loss)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron_lm_overlap_cpu_optimizer_d2h_h2d)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron-lm-overlap-cpu-optimizer-d2h-h2d)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron_lm_optimizer_cpu_offload)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron-lm-optimizer-cpu-offload)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron_lm_use_precision_aware_optimizer)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --megatron-lm-use-precision-aware-optimizer)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --fp8_backend)
                    COMPREPLY=($(compgen -W "AO TE MSAMP" -- "${cur}"))
                    return 0
                    ;;
                --fp8-backend)
                    COMPREPLY=($(compgen -W "AO TE MSAMP" -- "${cur}"))
                    return 0
                    ;;
                --fp8_margin)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --fp8-margin)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --fp8_interval)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --fp8-interval)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --fp8_format)
                    COMPREPLY=($(compgen -W "HYBRID E4M3 E5M2" -- "${cur}"))
                    return 0
                    ;;
                --fp8-format)
                    COMPREPLY=($(compgen -W "HYBRID E4M3 E5M2" -- "${cur}"))
                    return 0
                    ;;
                --fp8_amax_history_len)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --fp8-amax-history-len)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --fp8_amax_compute_algo)
                    COMPREPLY=($(compgen -W "max most_recent" -- "${cur}"))
                    return 0
                    ;;
                --fp8-amax-compute-algo)
                    COMPREPLY=($(compgen -W "max most_recent" -- "${cur}"))
                    return 0
                    ;;
                --fp8_override_linear_precision)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --fp8-override-linear-precision)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --fp8_opt_level)
                    COMPREPLY=($(compgen -W "O1 O2" -- "${cur}"))
                    return 0
                    ;;
                --fp8-opt-level)
                    COMPREPLY=($(compgen -W "O1 O2" -- "${cur}"))
                    return 0
                    ;;
                --fp8_enable_fsdp_float8_all_gather)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --fp8-enable-fsdp-float8-all-gather)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --fp8_pad_inner_dim)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --fp8-pad-inner-dim)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --parallelism_config_dp_replicate_size)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --parallelism-config-dp-replicate-size)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --parallelism_config_dp_shard_size)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --parallelism-config-dp-shard-size)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --parallelism_config_tp_size)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --parallelism-config-tp-size)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --parallelism_config_cp_size)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --parallelism-config-cp-size)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --parallelism_config_cp_backend)
                    COMPREPLY=($(compgen -W "torch" -- "${cur}"))
                    return 0
                    ;;
                --parallelism-config-cp-backend)
                    COMPREPLY=($(compgen -W "torch" -- "${cur}"))
                    return 0
                    ;;
                --parallelism_config_cp_comm_strategy)
                    COMPREPLY=($(compgen -W "allgather alltoall" -- "${cur}"))
                    return 0
                    ;;
                --parallelism-config-cp-comm-strategy)
                    COMPREPLY=($(compgen -W "allgather alltoall" -- "${cur}"))
                    return 0
                    ;;
                --parallelism_config_sp_size)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --parallelism-config-sp-size)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --parallelism_config_sp_backend)
                    COMPREPLY=($(compgen -W "deepspeed" -- "${cur}"))
                    return 0
                    ;;
                --parallelism-config-sp-backend)
                    COMPREPLY=($(compgen -W "deepspeed" -- "${cur}"))
                    return 0
                    ;;
                --parallelism_config_sp_seq_length)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --parallelism-config-sp-seq-length)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --parallelism_config_sp_seq_length_is_variable)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --parallelism-config-sp-seq-length-is-variable)
                    COMPREPLY=($(compgen -W "true false" -- "${cur}"))
                    return 0
                    ;;
                --parallelism_config_sp_attn_implementation)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --parallelism-config-sp-attn-implementation)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --nnodes)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --nproc_per_node)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --nproc-per-node)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --node_rank)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --node-rank)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --master_addr)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --master-addr)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --master_port)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --master-port)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --rdzv_endpoint)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --rdzv-endpoint)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --rdzv_id)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --rdzv-id)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --redirects)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                -r)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --local_addr)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --local-addr)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --signals_to_handle)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --signals-to-handle)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --shutdown_timeout)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --shutdown-timeout)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --duplicate_stdout_filters)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --duplicate-stdout-filters)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --duplicate_stderr_filters)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --duplicate-stderr-filters)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --numa_binding)
                    COMPREPLY=($(compgen -W "node socket exclusive core-complex" -- "${cur}"))
                    return 0
                    ;;
                --numa-binding)
                    COMPREPLY=($(compgen -W "node socket exclusive core-complex" -- "${cur}"))
                    return 0
                    ;;
                --start_method)
                    COMPREPLY=($(compgen -W "spawn fork forkserver" -- "${cur}"))
                    return 0
                    ;;
                --start-method)
                    COMPREPLY=($(compgen -W "spawn fork forkserver" -- "${cur}"))
                    return 0
                    ;;
                --logs_specs)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --logs-specs)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --event_log_handler)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --event-log-handler)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _accel__launch -o nosort -o bashdefault -o default accel-launch
else
    complete -F _accel__launch -o bashdefault -o default accel-launch
fi
