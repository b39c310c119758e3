complete -c accel-estimate-memory -l library_name -l library-name -d 'Accepted for compatibility with accelerate; the library does not change how tensors are counted' -r -f -a "timm\t''
transformers\t''"
complete -c accel-estimate-memory -l dtypes -d 'Rows of the table, in the order given (accelerate\'s choices and default)' -r -f -a "float32\t''
float16\t''
int8\t''
int4\t''"
complete -c accel-estimate-memory -l from -d 'Size the model from its config formula, its safetensors headers, or (auto) the formula when the architecture is known' -r -f -a "auto\t'The config formula when the family is known, else the safetensors headers'
config\t'Always the config formula (accelerate\'s AutoModel)'
weights\t'Always the safetensors headers (the checkpoint as stored, task head included)'"
complete -c accel-estimate-memory -l revision -d 'Hub revision (branch, tag or commit) for a Hub id' -r -f
complete -c accel-estimate-memory -l strategy -d 'Training strategy for the per-GPU estimate' -r -f -a "ddp\t'Everything replicated on every GPU'
fsdp\t'FSDP FULL_SHARD: parameters, gradients and optimizer state sharded'
zero1\t'ZeRO stage 1: optimizer state (and master weights) sharded'
zero2\t'ZeRO stage 2: plus gradients'
zero3\t'ZeRO stage 3: plus parameters'"
complete -c accel-estimate-memory -l num_gpus -l num-gpus -d 'GPUs the model is trained or served on (default: the detected GPUs, else 1)' -r -f
complete -c accel-estimate-memory -l precision -d 'Training precision: bf16/fp16 mixed precision (fp32 master weights) or pure fp32' -r -f -a "fp32\t'Pure fp32: 4-byte weights and gradients, no master copy'
bf16\t'bf16 mixed precision: 2-byte weights and gradients, fp32 master weights'
fp16\t'fp16 mixed precision: as bf16'"
complete -c accel-estimate-memory -l batch_size -l batch-size -d 'Micro-batch size per GPU (training), or sequences served at once (inference)' -r -f
complete -c accel-estimate-memory -l seq_len -l seq-len -d 'Training sequence length, for activation memory' -r -f
complete -c accel-estimate-memory -l attn_implementation -l attn-implementation -d 'Attention implementation the model is trained with, as transformers names it (default: config.json\'s attn_implementation, else what transformers picks: sdpa, or eager for a family without SDPA such as gemma2)' -r -f -a "eager\t'transformers\' own `eager_attention_forward`: matmul, softmax, dropout, matmul'
sdpa\t'torch\'s scaled_dot_product_attention'
flash_attention_2\t'The flash-attn 2 package\'s kernels'
flash_attention_3\t'The flash-attn 3 package\'s kernels (Hopper)'
flex_attention\t'torch\'s flex_attention'"
complete -c accel-estimate-memory -l context -d 'Inference: KV cache for this many tokens per sequence' -r -f
complete -c accel-estimate-memory -l dtype -d 'Inference: dtype of the weights' -r -f -a "float32\t''
float16\t''
bfloat16\t''
fp8\t''
int8\t''
int4\t''"
complete -c accel-estimate-memory -l kv_dtype -l kv-dtype -d 'Inference: dtype of the KV cache' -r -f -a "float32\t''
float16\t''
bfloat16\t''
fp8\t''
int8\t''
int4\t''"
complete -c accel-estimate-memory -l gpu_memory -l gpu-memory -d 'Memory of one GPU (e.g. 80GB, 81920MiB; binary units); default: the first detected GPU\'s' -r -f
complete -c accel-estimate-memory -l trust_remote_code -l trust-remote-code -d 'Accepted for compatibility with accelerate; no repository code is ever run'
complete -c accel-estimate-memory -l json -d 'Print JSON (sizes in bytes) instead of tables'
complete -c accel-estimate-memory -l offload -d 'Offload optimizer state (and, with zero3/fsdp, parameters) to CPU memory'
complete -c accel-estimate-memory -l grad_checkpointing -l grad-checkpointing -d 'Activation (gradient) checkpointing: keep only each layer\'s input'
complete -c accel-estimate-memory -s h -l help -d 'Print help (see more with \'--help\')'
complete -c accel-estimate-memory -s V -l version -d 'Print version'
