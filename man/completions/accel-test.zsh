#compdef accel-test

autoload -U is-at-least

_accel-test() {
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
'--config_file=[Config file (default\: ACCEL_CONFIG_FILE, else accelerate'\''s default config path)]:PATH:_files' \
'--config-file=[Config file (default\: ACCEL_CONFIG_FILE, else accelerate'\''s default config path)]:PATH:_files' \
'--num_processes=[Total number of ranks, over all machines]:N:' \
'--num-processes=[Total number of ranks, over all machines]:N:' \
'--num_machines=[Number of machines (nodes) in the job]:N:' \
'--num-machines=[Number of machines (nodes) in the job]:N:' \
'--machine_rank=[Rank of this machine (0 hosts the rendezvous)]:N:' \
'--machine-rank=[Rank of this machine (0 hosts the rendezvous)]:N:' \
'--main_process_ip=[Address of machine 0 (MASTER_ADDR). Required on multi-node jobs]:HOST:' \
'--main-process-ip=[Address of machine 0 (MASTER_ADDR). Required on multi-node jobs]:HOST:' \
'--main_process_port=[Port of the rendezvous on machine 0 (MASTER_PORT). Default\: 29500 on multi-node jobs, a free port on a single machine]:PORT:' \
'--main-process-port=[Port of the rendezvous on machine 0 (MASTER_PORT). Default\: 29500 on multi-node jobs, a free port on a single machine]:PORT:' \
'--gpu_ids=[GPUs to use on this machine, as CUDA_VISIBLE_DEVICES (e.g. \`0,1\`), or \`all\`]:IDS:' \
'--gpu-ids=[GPUs to use on this machine, as CUDA_VISIBLE_DEVICES (e.g. \`0,1\`), or \`all\`]:IDS:' \
'--timeout=[Seconds any single wait may take (rendezvous, a collective, a rank'\''s answer)]:SECONDS:' \
'--max_size=[Largest message size of --bench, in bytes, with an optional K/M/G suffix (powers of 1024)]:SIZE:' \
'--max-size=[Largest message size of --bench, in bytes, with an optional K/M/G suffix (powers of 1024)]:SIZE:' \
'--probe=[After the checks, measure bandwidth and latency between nodes (node pairs in rounds) and within them, and compute on every rank; name what is slower than the median (see PROBE). \`--probe=links\` or \`--probe=compute\` measures one part only]::PARTS:' \
'--probe_threshold=[--probe names a node, link or rank slower than the median by more than PCT percent]:PCT:' \
'--probe-threshold=[--probe names a node, link or rank slower than the median by more than PCT percent]:PCT:' \
'*--check=[Run only the checks whose name starts with PREFIX (repeatable), e.g. \`all_reduce.sum\`]:PREFIX:' \
'--device=[Internal\: the device workers use (\`cpu\` or \`cuda\`)]:DEVICE:' \
'--cpu[Run on CPU (gloo) even when GPUs are present]' \
'--bench[Also measure all_reduce and all_gather latency and bandwidth (algbw and busbw as nccl-tests defines them) from 1 KB up to --max_size]' \
'--python[Also run a torch.distributed check with the user'\''s python (ACCEL_PYTHON, else python3 or python on PATH) in the same world, to test that side of the installation]' \
'--json[Print the report as one JSON document instead of lines]' \
'--worker[Internal\: run as one rank of the world, from the rank contract in the environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), printing JSON events]' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
'-V[Print version]' \
'--version[Print version]' \
&& ret=0
}

(( $+functions[_accel-test_commands] )) ||
_accel-test_commands() {
    local commands; commands=()
    _describe -t commands 'accel-test commands' commands "$@"
}

if [ "$funcstack[1]" = "_accel-test" ]; then
    _accel-test "$@"
else
    compdef _accel-test accel-test
fi
