complete -c accel-test -l config_file -l config-file -d 'Config file (default: ACCEL_CONFIG_FILE, else accelerate\'s default config path)' -r -F
complete -c accel-test -l num_processes -l num-processes -d 'Total number of ranks, over all machines' -r -f
complete -c accel-test -l num_machines -l num-machines -d 'Number of machines (nodes) in the job' -r -f
complete -c accel-test -l machine_rank -l machine-rank -d 'Rank of this machine (0 hosts the rendezvous)' -r -f
complete -c accel-test -l main_process_ip -l main-process-ip -d 'Address of machine 0 (MASTER_ADDR). Required on multi-node jobs' -r -f
complete -c accel-test -l main_process_port -l main-process-port -d 'Port of the rendezvous on machine 0 (MASTER_PORT). Default: 29500 on multi-node jobs, a free port on a single machine' -r -f
complete -c accel-test -l gpu_ids -l gpu-ids -d 'GPUs to use on this machine, as CUDA_VISIBLE_DEVICES (e.g. `0,1`), or `all`' -r -f
complete -c accel-test -l timeout -d 'Seconds any single wait may take (rendezvous, a collective, a rank\'s answer)' -r -f
complete -c accel-test -l max_size -l max-size -d 'Largest message size of --bench, in bytes, with an optional K/M/G suffix (powers of 1024)' -r -f
complete -c accel-test -l probe -d 'After the checks, measure bandwidth and latency between nodes (node pairs in rounds) and within them, and compute on every rank; name what is slower than the median (see PROBE). `--probe=links` or `--probe=compute` measures one part only' -r -f
complete -c accel-test -l probe_threshold -l probe-threshold -d '--probe names a node, link or rank slower than the median by more than PCT percent' -r -f
complete -c accel-test -l check -d 'Run only the checks whose name starts with PREFIX (repeatable), e.g. `all_reduce.sum`' -r -f
complete -c accel-test -l device -d 'Internal: the device workers use (`cpu` or `cuda`)' -r -f
complete -c accel-test -l cpu -d 'Run on CPU (gloo) even when GPUs are present'
complete -c accel-test -l bench -d 'Also measure all_reduce and all_gather latency and bandwidth (algbw and busbw as nccl-tests defines them) from 1 KB up to --max_size'
complete -c accel-test -l python -d 'Also run a torch.distributed check with the user\'s python (ACCEL_PYTHON, else python3 or python on PATH) in the same world, to test that side of the installation'
complete -c accel-test -l json -d 'Print the report as one JSON document instead of lines'
complete -c accel-test -l worker -d 'Internal: run as one rank of the world, from the rank contract in the environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), printing JSON events'
complete -c accel-test -s h -l help -d 'Print help (see more with \'--help\')'
complete -c accel-test -s V -l version -d 'Print version'
