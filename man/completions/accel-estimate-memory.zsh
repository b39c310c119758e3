#compdef accel-estimate-memory

autoload -U is-at-least

_accel-estimate-memory() {
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
'--library_name=[Accepted for compatibility with accelerate; the library does not change how tensors are counted]:LIBRARY:(timm transformers)' \
'--library-name=[Accepted for compatibility with accelerate; the library does not change how tensors are counted]:LIBRARY:(timm transformers)' \
'*--dtypes=[Rows of the table, in the order given (accelerate'\''s choices and default)]:DTYPE:(float32 float16 int8 int4)' \
'--from=[Size the model from its config formula, its safetensors headers, or (auto) the formula when the architecture is known]:FROM:((auto\:"The config formula when the family is known, else the safetensors headers"
config\:"Always the config formula (accelerate'\''s AutoModel)"
weights\:"Always the safetensors headers (the checkpoint as stored, task head included)"))' \
'--revision=[Hub revision (branch, tag or commit) for a Hub id]:REVISION:' \
'--strategy=[Training strategy for the per-GPU estimate]:STRATEGY:((ddp\:"Everything replicated on every GPU"
fsdp\:"FSDP FULL_SHARD\: parameters, gradients and optimizer state sharded"
zero1\:"ZeRO stage 1\: optimizer state (and master weights) sharded"
zero2\:"ZeRO stage 2\: plus gradients"
zero3\:"ZeRO stage 3\: plus parameters"))' \
'--num_gpus=[GPUs the model is trained or served on (default\: the detected GPUs, else 1)]:N:' \
'--num-gpus=[GPUs the model is trained or served on (default\: the detected GPUs, else 1)]:N:' \
'--precision=[Training precision\: bf16/fp16 mixed precision (fp32 master weights) or pure fp32]:PRECISION:((fp32\:"Pure fp32\: 4-byte weights and gradients, no master copy"
bf16\:"bf16 mixed precision\: 2-byte weights and gradients, fp32 master weights"
fp16\:"fp16 mixed precision\: as bf16"))' \
'--batch_size=[Micro-batch size per GPU (training), or sequences served at once (inference)]:B:' \
'--batch-size=[Micro-batch size per GPU (training), or sequences served at once (inference)]:B:' \
'--seq_len=[Training sequence length, for activation memory]:S:' \
'--seq-len=[Training sequence length, for activation memory]:S:' \
'--attn_implementation=[Attention implementation the model is trained with, as transformers names it (default\: config.json'\''s attn_implementation, else what transformers picks\: sdpa, or eager for a family without SDPA such as gemma2)]:IMPL:((eager\:"transformers'\'' own \`eager_attention_forward\`\: matmul, softmax, dropout, matmul"
sdpa\:"torch'\''s scaled_dot_product_attention"
flash_attention_2\:"The flash-attn 2 package'\''s kernels"
flash_attention_3\:"The flash-attn 3 package'\''s kernels (Hopper)"
flex_attention\:"torch'\''s flex_attention"))' \
'--attn-implementation=[Attention implementation the model is trained with, as transformers names it (default\: config.json'\''s attn_implementation, else what transformers picks\: sdpa, or eager for a family without SDPA such as gemma2)]:IMPL:((eager\:"transformers'\'' own \`eager_attention_forward\`\: matmul, softmax, dropout, matmul"
sdpa\:"torch'\''s scaled_dot_product_attention"
flash_attention_2\:"The flash-attn 2 package'\''s kernels"
flash_attention_3\:"The flash-attn 3 package'\''s kernels (Hopper)"
flex_attention\:"torch'\''s flex_attention"))' \
'--context=[Inference\: KV cache for this many tokens per sequence]:TOKENS:' \
'--dtype=[Inference\: dtype of the weights]:DTYPE:(float32 float16 bfloat16 fp8 int8 int4)' \
'--kv_dtype=[Inference\: dtype of the KV cache]:KV_DTYPE:(float32 float16 bfloat16 fp8 int8 int4)' \
'--kv-dtype=[Inference\: dtype of the KV cache]:KV_DTYPE:(float32 float16 bfloat16 fp8 int8 int4)' \
'--gpu_memory=[Memory of one GPU (e.g. 80GB, 81920MiB; binary units); default\: the first detected GPU'\''s]:SIZE:' \
'--gpu-memory=[Memory of one GPU (e.g. 80GB, 81920MiB; binary units); default\: the first detected GPU'\''s]:SIZE:' \
'--trust_remote_code[Accepted for compatibility with accelerate; no repository code is ever run]' \
'--trust-remote-code[Accepted for compatibility with accelerate; no repository code is ever run]' \
'--json[Print JSON (sizes in bytes) instead of tables]' \
'--offload[Offload optimizer state (and, with zero3/fsdp, parameters) to CPU memory]' \
'--grad_checkpointing[Activation (gradient) checkpointing\: keep only each layer'\''s input]' \
'--grad-checkpointing[Activation (gradient) checkpointing\: keep only each layer'\''s input]' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
'-V[Print version]' \
'--version[Print version]' \
':model_name -- The model\: a .safetensors file, a model directory, a config.json or index, or a Hub id (org/name):_files' \
&& ret=0
}

(( $+functions[_accel-estimate-memory_commands] )) ||
_accel-estimate-memory_commands() {
    local commands; commands=()
    _describe -t commands 'accel-estimate-memory commands' commands "$@"
}

if [ "$funcstack[1]" = "_accel-estimate-memory" ]; then
    _accel-estimate-memory "$@"
else
    compdef _accel-estimate-memory accel-estimate-memory
fi
