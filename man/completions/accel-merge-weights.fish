complete -c accel-merge-weights -l max_shard_size -l max-shard-size -d 'Split the output into files of at most SIZE (e.g. 5GB, 500MiB, 1000000) named `model-0000K-of-0000N.safetensors`, plus `model.safetensors.index.json`' -r -f
complete -c accel-merge-weights -l dtype -d 'Dtype of floating-point tensors in the output; integer and bool tensors are never cast' -r -f -a "keep\t'Each tensor keeps the dtype it has in the checkpoint (fp32 for DeepSpeed master weights)'
fp32\t''
bf16\t''
fp16\t''"
complete -c accel-merge-weights -l key -d 'Write this top-level key\'s subtree, without the key in the names. By default: the only key; else `model` (accelerate, plain DCP); else, when model keys sit at the top level beside training state (torchtitan), everything but `optimizer`, `lr_scheduler`, `dataloader`, `train_state` and the like. The summary line says which' -r -f
complete -c accel-merge-weights -l exclude-key -l exclude_key -d 'Leave out tensors whose full dotted name (e.g. `optimizer.state.0.exp_avg`) or output name matches GLOB (`*` any run of characters, `?` one). Repeatable' -r -f
complete -c accel-merge-weights -l strip_prefix -l strip-prefix -d 'Remove PREFIX from tensor names that start with it (e.g. `_orig_mod.` or `module.`). Repeatable' -r -f
complete -c accel-merge-weights -l hf_reference -l hf-reference -d 'Copy config, generation config and tokenizer files from this Hugging Face model directory next to the output, so the result loads with `from_pretrained`' -r -F
complete -c accel-merge-weights -l tag -d 'DeepSpeed: the tag (subdirectory) to read, instead of the one named in `latest`' -r -f
complete -c accel-merge-weights -l unsafe_serialization -l unsafe-serialization -d 'Write `pytorch_model.bin` (torch.save format, loadable by `torch.load`) instead of safetensors'
complete -c accel-merge-weights -l remove_checkpoint_dir -l remove-checkpoint-dir -d 'Delete the checkpoint directory after the merged weights were written and read back. Only the checkpoint\'s own files are deleted (the DCP `.metadata` and the data files it names; a DeepSpeed tag\'s model and optimizer state files, with `latest` and DeepSpeed\'s recovery scripts when a save directory is given; the per-rank FSDP2 files merged), then the directories they leave empty. A directory that holds anything else (accelerate\'s save_state directory with optimizer and RNG state or a second model, other DeepSpeed tags, your own files) is refused before anything is written, with the list of what else is there: pass the directory the model is read from instead. Optimizer state stored in the checkpoint\'s own files goes with them'
complete -c accel-merge-weights -l no-verify -l no_verify -d 'Skip the CRC-32 check of the zip records read from torch.save files (checked by default, as torch.load does)'
complete -c accel-merge-weights -l all_keys -l all-keys -d 'Write every tensor under every top-level key, with full dotted names'
complete -c accel-merge-weights -s f -l force -d 'Replace existing output files. They are kept until the new output is complete, so the disk needs room for both'
complete -c accel-merge-weights -l inspect -d 'List the checkpoint\'s tensors (name, dtype, shape, chunks, bytes) and totals; write nothing'
complete -c accel-merge-weights -l json -d 'With --inspect: print JSON'
complete -c accel-merge-weights -s q -l quiet -d 'No progress bar and no summary line'
complete -c accel-merge-weights -l include-bytes -l include_bytes -d 'Keep non-tensor items (DCP bytes items such as a pickled step counter) as 1-D uint8 tensors of their stored bytes instead of skipping them. The bytes are torch.save\'s serialisation of the object: `torch.load(io.BytesIO(t.numpy().tobytes()))` recovers it. Nothing is unpickled here'
complete -c accel-merge-weights -s h -l help -d 'Print help (see more with \'--help\')'
complete -c accel-merge-weights -s V -l version -d 'Print version'
