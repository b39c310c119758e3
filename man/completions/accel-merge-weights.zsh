#compdef accel-merge-weights

autoload -U is-at-least

_accel-merge-weights() {
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
'--max_shard_size=[Split the output into files of at most SIZE (e.g. 5GB, 500MiB, 1000000) named \`model-0000K-of-0000N.safetensors\`, plus \`model.safetensors.index.json\`]:SIZE:' \
'--max-shard-size=[Split the output into files of at most SIZE (e.g. 5GB, 500MiB, 1000000) named \`model-0000K-of-0000N.safetensors\`, plus \`model.safetensors.index.json\`]:SIZE:' \
'--dtype=[Dtype of floating-point tensors in the output; integer and bool tensors are never cast]:DTYPE:((keep\:"Each tensor keeps the dtype it has in the checkpoint (fp32 for DeepSpeed master weights)"
fp32\:""
bf16\:""
fp16\:""))' \
'(--all_keys)--key=[Write this top-level key'\''s subtree, without the key in the names. By default\: the only key; else \`model\` (accelerate, plain DCP); else, when model keys sit at the top level beside training state (torchtitan), everything but \`optimizer\`, \`lr_scheduler\`, \`dataloader\`, \`train_state\` and the like. The summary line says which]:KEY:' \
'*--exclude-key=[Leave out tensors whose full dotted name (e.g. \`optimizer.state.0.exp_avg\`) or output name matches GLOB (\`*\` any run of characters, \`?\` one). Repeatable]:GLOB:' \
'*--exclude_key=[Leave out tensors whose full dotted name (e.g. \`optimizer.state.0.exp_avg\`) or output name matches GLOB (\`*\` any run of characters, \`?\` one). Repeatable]:GLOB:' \
'*--strip_prefix=[Remove PREFIX from tensor names that start with it (e.g. \`_orig_mod.\` or \`module.\`). Repeatable]:PREFIX:' \
'*--strip-prefix=[Remove PREFIX from tensor names that start with it (e.g. \`_orig_mod.\` or \`module.\`). Repeatable]:PREFIX:' \
'--hf_reference=[Copy config, generation config and tokenizer files from this Hugging Face model directory next to the output, so the result loads with \`from_pretrained\`]:DIR:_files' \
'--hf-reference=[Copy config, generation config and tokenizer files from this Hugging Face model directory next to the output, so the result loads with \`from_pretrained\`]:DIR:_files' \
'--tag=[DeepSpeed\: the tag (subdirectory) to read, instead of the one named in \`latest\`]:TAG:' \
'--unsafe_serialization[Write \`pytorch_model.bin\` (torch.save format, loadable by \`torch.load\`) instead of safetensors]' \
'--unsafe-serialization[Write \`pytorch_model.bin\` (torch.save format, loadable by \`torch.load\`) instead of safetensors]' \
'--remove_checkpoint_dir[Delete the checkpoint directory after the merged weights were written and read back. Only the checkpoint'\''s own files are deleted (the DCP \`.metadata\` and the data files it names; a DeepSpeed tag'\''s model and optimizer state files, with \`latest\` and DeepSpeed'\''s recovery scripts when a save directory is given; the per-rank FSDP2 files merged), then the directories they leave empty. A directory that holds anything else (accelerate'\''s save_state directory with optimizer and RNG state or a second model, other DeepSpeed tags, your own files) is refused before anything is written, with the list of what else is there\: pass the directory the model is read from instead. Optimizer state stored in the checkpoint'\''s own files goes with them]' \
'--remove-checkpoint-dir[Delete the checkpoint directory after the merged weights were written and read back. Only the checkpoint'\''s own files are deleted (the DCP \`.metadata\` and the data files it names; a DeepSpeed tag'\''s model and optimizer state files, with \`latest\` and DeepSpeed'\''s recovery scripts when a save directory is given; the per-rank FSDP2 files merged), then the directories they leave empty. A directory that holds anything else (accelerate'\''s save_state directory with optimizer and RNG state or a second model, other DeepSpeed tags, your own files) is refused before anything is written, with the list of what else is there\: pass the directory the model is read from instead. Optimizer state stored in the checkpoint'\''s own files goes with them]' \
'--no-verify[Skip the CRC-32 check of the zip records read from torch.save files (checked by default, as torch.load does)]' \
'--no_verify[Skip the CRC-32 check of the zip records read from torch.save files (checked by default, as torch.load does)]' \
'--all_keys[Write every tensor under every top-level key, with full dotted names]' \
'--all-keys[Write every tensor under every top-level key, with full dotted names]' \
'-f[Replace existing output files. They are kept until the new output is complete, so the disk needs room for both]' \
'--force[Replace existing output files. They are kept until the new output is complete, so the disk needs room for both]' \
'--inspect[List the checkpoint'\''s tensors (name, dtype, shape, chunks, bytes) and totals; write nothing]' \
'--json[With --inspect\: print JSON]' \
'-q[No progress bar and no summary line]' \
'--quiet[No progress bar and no summary line]' \
'--include-bytes[Keep non-tensor items (DCP bytes items such as a pickled step counter) as 1-D uint8 tensors of their stored bytes instead of skipping them. The bytes are torch.save'\''s serialisation of the object\: \`torch.load(io.BytesIO(t.numpy().tobytes()))\` recovers it. Nothing is unpickled here]' \
'--include_bytes[Keep non-tensor items (DCP bytes items such as a pickled step counter) as 1-D uint8 tensors of their stored bytes instead of skipping them. The bytes are torch.save'\''s serialisation of the object\: \`torch.load(io.BytesIO(t.numpy().tobytes()))\` recovers it. Nothing is unpickled here]' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
'-V[Print version]' \
'--version[Print version]' \
':checkpoint_directory -- The checkpoint directory\: a DCP directory with `.metadata`, accelerate'\''s save_state directory (the model is read from its `pytorch_model_fsdp_0/`), a directory of accelerate'\''s per-rank FSDP2 files (`pytorch_model_fsdp_0_rank<r>.bin`, one per rank), or a DeepSpeed save directory (with `latest`) or tag directory:_files' \
'::output_path -- The directory to write the merged weights into (created if missing). Not needed with --inspect:_files' \
&& ret=0
}

(( $+functions[_accel-merge-weights_commands] )) ||
_accel-merge-weights_commands() {
    local commands; commands=()
    _describe -t commands 'accel-merge-weights commands' commands "$@"
}

if [ "$funcstack[1]" = "_accel-merge-weights" ]; then
    _accel-merge-weights "$@"
else
    compdef _accel-merge-weights accel-merge-weights
fi
