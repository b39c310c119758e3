//! `accel-launch`: torchrun's own command line (`torch/distributed/run.py::get_args_parser`, torch
//! 2.13), in both spellings, so an sbatch script that calls `torchrun` can call accel-launch instead.
//! The flags torchrun shares with `accelerate launch` (`--max_restarts`, `--monitor_interval`,
//! `--role`, `-m`, `--no_python`, `--log_dir`, `-t/--tee`, `--local_ranks_filter`, `--rdzv_backend`,
//! `--rdzv_conf`) are [`super::launch::LaunchCli`]'s; what they mean in each mode is
//! `crate::launch::torchrun`'s.

use clap::Args;

use crate::launch::numa::NumaMode;
use crate::launch::torchrun::{Nnodes, NprocPerNode};

/// torchrun's flags that `accelerate launch` lacks.
#[derive(Debug, Clone, Default, Args)]
pub struct TorchrunFlags {
    /// Number of nodes N, or an elastic range MIN:MAX (a range runs the real torchrun, and needs --rdzv_backend c10d or etcd).
    #[arg(
        long = "nnodes",
        value_name = "N|MIN:MAX",
        value_parser = parse_nnodes,
        help_heading = "torchrun"
    )]
    pub nnodes: Option<Nnodes>,
    /// Ranks on this node: a number, `gpu` (the visible GPUs), `cpu` (the CPUs this process may run on) or `auto` (GPUs if any, else CPUs); nodes may differ.
    #[arg(
        long = "nproc_per_node",
        visible_alias = "nproc-per-node",
        value_name = "N|auto|cpu|gpu",
        value_parser = parse_nproc,
        help_heading = "torchrun"
    )]
    pub nproc_per_node: Option<NprocPerNode>,
    /// This node's rank, 0 .. nnodes-1 (= --machine_rank).
    #[arg(
        long = "node_rank",
        visible_alias = "node-rank",
        value_name = "RANK",
        help_heading = "torchrun"
    )]
    pub node_rank: Option<u32>,
    /// Address of node 0 (= --main_process_ip).
    #[arg(
        long = "master_addr",
        visible_alias = "master-addr",
        value_name = "HOST",
        help_heading = "torchrun"
    )]
    pub master_addr: Option<String>,
    /// Rendezvous port on node 0 (= --main_process_port).
    #[arg(
        long = "master_port",
        visible_alias = "master-port",
        value_name = "PORT",
        help_heading = "torchrun"
    )]
    pub master_port: Option<u16>,
    /// Rendezvous endpoint HOST:PORT ([IPv6]:PORT): with the static backend, node 0's address and port; with c10d or etcd, the endpoint torchrun's rendezvous uses.
    #[arg(
        long = "rdzv_endpoint",
        visible_alias = "rdzv-endpoint",
        value_name = "HOST:PORT",
        help_heading = "torchrun"
    )]
    pub rdzv_endpoint: Option<String>,
    /// Run id shared by every node (TORCHELASTIC_RUN_ID, the log directory's prefix; default `none`).
    #[arg(
        long = "rdzv_id",
        visible_alias = "rdzv-id",
        value_name = "ID",
        help_heading = "torchrun"
    )]
    pub rdzv_id: Option<String>,
    /// One node, rendezvous on a free local port, a fresh UUID as run id (torchrun's c10d on localhost:0).
    #[arg(long = "standalone", help_heading = "torchrun")]
    pub standalone: bool,
    /// Run the script with runpy.run_path in a fresh interpreter, as torchrun's --run-path (takes precedence over --no_python).
    #[arg(
        long = "run_path",
        visible_alias = "run-path",
        help_heading = "torchrun"
    )]
    pub run_path: bool,
    /// Streams written only to the log files, not the console: 0-3 (none, stdout, stderr, both) or a per-local-rank map such as 0:3,1:1.
    #[arg(
        short = 'r',
        long = "redirects",
        value_name = "0-3",
        value_parser = parse_std,
        help_heading = "torchrun"
    )]
    pub redirects: Option<String>,
    /// This node's address: MASTER_ADDR of a one-node run torchrun would rendezvous locally (default: this host's FQDN).
    #[arg(
        long = "local_addr",
        visible_alias = "local-addr",
        value_name = "HOST",
        help_heading = "torchrun"
    )]
    pub local_addr: Option<String>,
    /// The signals forwarded to the ranks, each of which stops the run (default SIGTERM,SIGINT,SIGHUP,SIGQUIT forwarded and stopping, SIGUSR1,SIGUSR2 forwarded only).
    #[arg(
        long = "signals_to_handle",
        visible_alias = "signals-to-handle",
        value_name = "SIG,...",
        help_heading = "torchrun"
    )]
    pub signals_to_handle: Option<String>,
    /// Whole seconds between the stop signal and SIGKILL: the same setting as --grace_period (default: TORCH_ELASTIC_SHUTDOWN_TIMEOUT).
    #[arg(
        long = "shutdown_timeout",
        visible_alias = "shutdown-timeout",
        value_name = "SECONDS",
        help_heading = "torchrun"
    )]
    pub shutdown_timeout: Option<u64>,
    /// Each rank sees only its own GPU, as device 0: LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES the rank's entry of this node's list.
    #[arg(
        long = "virtual_local_rank",
        visible_alias = "virtual-local-rank",
        help_heading = "torchrun"
    )]
    pub virtual_local_rank: bool,
    /// Tee'd stdout lines containing any of these comma-separated strings (`,,` is a comma) also go to attempt_N/filtered_stdout.log.
    #[arg(
        long = "duplicate_stdout_filters",
        visible_alias = "duplicate-stdout-filters",
        value_name = "TEXT,...",
        help_heading = "torchrun"
    )]
    pub duplicate_stdout_filters: Option<String>,
    /// Tee'd stderr lines containing any of these comma-separated strings (`,,` is a comma) also go to attempt_N/filtered_stderr.log.
    #[arg(
        long = "duplicate_stderr_filters",
        visible_alias = "duplicate-stderr-filters",
        value_name = "TEXT,...",
        help_heading = "torchrun"
    )]
    pub duplicate_stderr_filters: Option<String>,
    /// Pin each rank to the CPUs near its GPU (the GPU of its local rank): node, socket, exclusive or core-complex.
    #[arg(
        long = "numa_binding",
        visible_alias = "numa-binding",
        value_name = "MODE",
        value_enum,
        help_heading = "torchrun"
    )]
    pub numa_binding: Option<NumaMode>,
    /// torchrun's start method (spawn, fork, forkserver): no effect for a script, as in torchrun (every rank is a fresh process); with --run_path only spawn, its default.
    #[arg(
        long = "start_method",
        visible_alias = "start-method",
        value_name = "METHOD",
        value_parser = ["spawn", "fork", "forkserver"],
        help_heading = "torchrun"
    )]
    pub start_method: Option<String>,
    /// Refused: a torchrun.logs_specs entry point is Python code loaded into torchrun's agent.
    #[arg(
        long = "logs_specs",
        visible_alias = "logs-specs",
        value_name = "NAME",
        help_heading = "torchrun"
    )]
    pub logs_specs: Option<String>,
    /// torchrun's event log handler: only `null` (its default); a named handler is Python code in torchrun's agent.
    #[arg(
        long = "event_log_handler",
        visible_alias = "event-log-handler",
        value_name = "NAME",
        help_heading = "torchrun"
    )]
    pub event_log_handler: Option<String>,
}

fn parse_nnodes(s: &str) -> Result<Nnodes, String> {
    s.parse()
}

fn parse_nproc(s: &str) -> Result<NprocPerNode, String> {
    s.parse()
}

/// `-r/--redirects` (and `-t/--tee`): what torchrun's `Std.from_str`
/// (torch/distributed/elastic/multiprocessing/api.py) takes, a stream selector 0-3 (none, stdout,
/// stderr, both) or a per-local-rank map `0:1,1:2` (one-digit local ranks, as its regex has it).
pub fn parse_std(s: &str) -> Result<String, String> {
    let selector = |v: &str| matches!(v, "0" | "1" | "2" | "3");
    let ok = selector(s)
        || s.split(',').all(|m| {
            m.split_once(':').is_some_and(|(rank, v)| {
                rank.len() == 1 && rank.chars().all(|c| c.is_ascii_digit()) && selector(v)
            })
        });
    if ok {
        Ok(s.to_string())
    } else {
        Err("expected 0, 1, 2 or 3 (none, stdout, stderr, both), or a per-local-rank map such as 0:1,1:2".into())
    }
}

/// The accel-launch man page's TORCHRUN COMMAND LINE section.
pub const MAN_SECTION: &[&str] = &[
    "accel-launch takes torchrun's command line (torch 2.13, torch/distributed/run.py), every flag in both spellings (--nproc-per-node and --nproc_per_node): an sbatch script can call accel-launch where it called torchrun. A command line of torchrun's flags only (no --config_file, ACCEL_CONFIG_FILE or ACCEL_CONFIG_<KEY>, no flag that sets a config key, no --cpu, --multi_gpu, --use_deepspeed, --use_fsdp, --use_megatron_lm, --use_parallelism_config or --num_cpu_threads_per_process; the flags both tools have, such as --max_restarts, --role, --log_dir, --tee, -m, --no_python and --rdzv_backend, count for neither) is torchrun's run, and so is one given torchrun's PET_<OPTION> variables (torch/distributed/argparse_util.py: each is the default of that option where the command line does not give it, e.g. PET_NPROC_PER_NODE=4, PET_STANDALONE=1, PET_LOG_DIR; a value its flag refuses is exit 2 naming the variable; Kubeflow's placement, PET_NNODES with PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT and PET_NPROC_PER_NODE, places the node of either run and by itself makes it neither, and accelerate's run reads no other PET_ variable, as accelerate launch reads none): no config file is read, not even the default one; one rank per node unless --nproc_per_node says otherwise; every rank gets exactly torchrun's worker variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_NAME, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID, TORCHELASTIC_ERROR_FILE, TORCH_NCCL_ASYNC_ERROR_HANDLING, TORCHELASTIC_SIGNALS_TO_HANDLE, and OMP_NUM_THREADS=1 when it is unset and more than one rank runs on the node) and no ACCELERATE_* variable; the interpreter is PYTHON_EXEC if set, as torchrun's; the log files are laid out as torchrun lays them out (below). With a config file or an accelerate flag, the run is accelerate's and torchrun's flags are other spellings of its settings.",
    "Settings: --nnodes N is --num_machines, --node_rank --machine_rank, --master_addr --main_process_ip, --master_port --main_process_port, and --rdzv_endpoint HOST:PORT ([IPv6]:PORT) both of the last two (for the static rendezvous it needs the port). --nproc_per_node is this node's rank count: a number, gpu (the visible GPUs; an error without any, as torchrun's \"Cuda is not available\"), cpu (the CPUs this process may run on, as torch._utils.cpu_count) or auto (the GPUs if any, else the CPUs); the run's num_processes is that times the nodes the command line or config file names (a scheduler's nodes multiply it too), and on many nodes each node may give its own count (the world is assembled when the nodes join, as torchrun's agents assign ranks). Two flags that set the same value differently are a usage error (exit 2) naming both, e.g. --num_machines 2 with --nnodes 3, --main_process_port with another --master_port, --master_addr with another --rdzv_endpoint host, --num_processes 4 with --nproc_per_node 2 on one node, --grace_period with another --shutdown_timeout.",
    "Rendezvous: --standalone, and, as torchrun's run() decides, a one-node command line of torchrun's flags only without --rdzv_endpoint or --master_port, use torchrun's local rendezvous: TORCHELASTIC_RUN_ID is a fresh UUID, MASTER_ADDR is --local_addr or this host's fully qualified name (Python's socket.getfqdn(): the host name resolved, its address looked up back, the first name with a dot, else the official name), MASTER_PORT a free port. --standalone ignores --rdzv_endpoint and --rdzv_id (a warning says so) and is refused on more than one node. Otherwise the rendezvous is static: MASTER_ADDR and MASTER_PORT are node 0's (--master_addr/--master_port or --rdzv_endpoint; 127.0.0.1 and 29500 by default, as torchrun's) and TORCHELASTIC_RUN_ID is --rdzv_id (default none). An elastic --nnodes MIN:MAX range needs --rdzv_backend c10d or etcd, and such a run is handed to the real torchrun with the same command line (as every c10d or etcd run is; accelerate's variables go with it only when a config file or an accelerate flag asked for them); with the static rendezvous a range is refused (exit 2), since that rendezvous waits for a fixed number of nodes (torchrun's static backend would silently wait for MAX). --rdzv_conf KEY=VALUE,... goes to torchrun for c10d and etcd; for the static rendezvous only timeout=SECONDS counts, as the join timeout (--rdzv_timeout, if given, wins), and other keys are ignored with a warning. --local_addr has no other effect, as in torchrun's static rendezvous.",
    "Logs: for a run of torchrun's flags only, and for any run given -r/--redirects, --duplicate_stdout_filters or --duplicate_stderr_filters, the files are laid out as torch 2.13's DefaultLogsSpecs lays them: LOG_DIR/<run id>_<8 random characters>/attempt_<N>/<local rank>/stdout.log and stderr.log for the streams -r or -t select (0 none, 1 stdout, 2 stderr, 3 both, or a map per local rank such as 0:3,1:1), and error.json (TORCHELASTIC_ERROR_FILE) beside them; without --log_dir the run directory is in a new TMPDIR/torchelastic_<random>/, removed at the end unless it holds log files. A stream -r selects goes to its file only; one -t selects goes to its file and to the console, each line headed [<role><local rank>]: (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, with ${role_name}, ${rank} and ${local_rank}, replaces the header; accel's --rank_prefix heads every console line instead); the other streams reach the console as they are. --local_ranks_filter R,... keeps the other local ranks off the console (their files are written). --duplicate_stdout_filters and --duplicate_stderr_filters TEXT,... (,, is a comma) also write every tee'd line that holds one of the strings, headed, to attempt_<N>/filtered_stdout.log or filtered_stderr.log. --log_dir /dev/null writes no file and leaves TORCHELASTIC_ERROR_FILE empty. Each attempt of --max_restarts starts its directory empty. accel's --log_template cannot be combined with this layout (exit 2).",
    "Workers: -m runs `python -u -m MODULE`, --no_python runs the script itself, and --run_path runs `python -u -c 'runpy.run_path(...)'` with sys.argv set to the script and its arguments and sys.path[0] the directory of the torchrun on PATH (else the interpreter's), as in torchrun's spawned child of its agent, which inherits the agent's sys.path; it takes precedence over --no_python. --role sets ROLE_NAME and the console header; --max_restarts and --monitor_interval are as in torchrun.",
    "Signals: --signals_to_handle SIG,... (torchrun's names, e.g. SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1): each named signal is forwarded to every rank's process group and stops the run (the grace period, then SIGKILL), as torchrun's agent does, and TORCHELASTIC_SIGNALS_TO_HANDLE holds the list as given. A signal of accel-launch's default set that is not named is not forwarded: SIGINT, SIGTERM, SIGHUP and SIGQUIT still stop the run, with SIGTERM to the ranks (torchrun would die of them and leave its workers running), and SIGUSR1 and SIGUSR2 are noted and ignored. Refused (exit 2): SIGKILL and SIGSTOP, which cannot be caught; SIGCHLD, SIGTSTP, SIGCONT and SIGPIPE, which are the launcher's own; fault signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS). --shutdown_timeout SECONDS is --grace_period in whole seconds, one setting: the time between the stop signal and SIGKILL for every stop (a signal, a failed rank, a hang, another node's failure); without either, ACCEL_LAUNCH_GRACE, then TORCH_ELASTIC_SHUTDOWN_TIMEOUT (as torchrun reads it), then 30.",
    "--virtual_local_rank (torch's local_elastic_agent.py::_set_local_rank_env): every rank gets LOCAL_RANK=0 and, as CUDA_VISIBLE_DEVICES, the entry at its local rank of this node's list (accelerate's gpu_ids, else the launcher's CUDA_VISIBLE_DEVICES; without a list, the local rank itself), so it sees its one GPU as device 0; a local rank beyond the list is refused (exit 2), as torchrun raises. Its real local rank stays where torchrun keeps it: ${local_rank} in the script's arguments, attempt_N/<local rank>/ of the logs and TORCHELASTIC_ERROR_FILE, the console header, the GPU of --numa_binding, and accel-launch's own reports.",
    "--numa_binding MODE pins each rank, before it starts, to the CPUs near the GPU of its local rank (its entry among the visible GPUs, found by the PCI address nvidia-smi gives), as torch 2.13's torch/numa/binding.py computes them: node, every CPU of the GPU's NUMA node; socket, every CPU of the NUMA nodes of the GPU's socket; exclusive, the node's physical cores shared out among the node's GPUs in GPU order, the lowest GPUs taking one more core when they do not divide evenly (all threads of a core together); core-complex, one group of CPUs sharing a last-level cache of the node, largest first, one per GPU of the node in turn. Only the CPUs accel-launch itself may run on count. Everything is read from sys/bus/pci/devices/ADDR/numa_node (-1 is node 0), sys/devices/system/node/ and sys/devices/system/cpu/cpuN/{topology,cache}/ and proc/self/status under ACCEL_SYSFS_ROOT (default /). The binding is the CPU affinity, set on the rank between fork and exec (what torch's `numactl --physcpubind` sets; numactl is not needed); as in torch, memory is not bound: Linux allocates a page on the NUMA node of the CPU that first touches it, which the binding keeps on the GPU's node. --dry-run shows each rank's CPUs (numa_cpus). A rank without a GPU, a GPU whose PCI device sysfs does not show, or a mode that leaves a rank no CPU (exclusive with fewer cores than GPUs on a node) is exit 125 before any rank starts.",
    "--numa_binding and accelerate's --enable_cpu_affinity (enable_cpu_affinity: true): accelerate pins each rank's main thread when the rank builds its AcceleratorState (accelerate/utils/environment.py::set_numa_affinity: NVML's CPU set for GPU LOCAL_RANK), which would undo the launcher's binding of that thread. With both, --numa_binding wins: ACCELERATE_CPU_AFFINITY is not exported, and a warning says so. With --virtual_local_rank, LOCAL_RANK is 0 on every rank, so enable_cpu_affinity would pin every rank to GPU 0's CPUs: a warning says so (use --numa_binding).",
    "Refused, with the reason (exit 2): --start_method fork or forkserver with --run_path (torchrun's start method only applies to --run_path and Python functions started from its agent, which would fork or forkserver from the agent's interpreter; each rank here is a fresh process, torchrun's spawn; for a script, torchrun ignores the start method, and so does accel-launch); --logs_specs NAME (a torchrun.logs_specs entry point is Python code loaded into torchrun's agent, and accel-launch runs none); --event_log_handler other than null (likewise); --nproc_per_node xpu (NVIDIA GPUs only).",
];

/// The accel-launch man page's DIFFERENCES FROM TORCHRUN section.
pub const MAN_DIFFERENCES: &[&str] = &[
    "Exit status: the failing rank's own code, or 128+N for signal N (torchrun exits 1 for every failure).",
    "TORCHELASTIC_USE_AGENT_STORE is not set: rank 0 hosts the TCPStore on MASTER_PORT (torchrun's agent hosts it and sets True); with torchrun's local rendezvous MASTER_PORT is a free port accel-launch picks (and picks again if another process takes it first).",
    "Many nodes: the launchers also meet on a control plane at the master port + 1 (see MULTI-NODE CONTROL PLANE): a failed rank stops every node at once, and --max_restarts restarts every node together with one global TORCHELASTIC_RESTART_COUNT (torchrun restarts a node's workers and lets the others notice).",
    "The grace period applies to every stop; torchrun waits a fixed 30 s after a failed worker and uses --shutdown-timeout only for signals. A signal --signals_to_handle does not name never kills the launcher and leaves no rank running.",
    "A failed run is summed up in one report per node instead of ChildFailedError's table: the root-cause rank and its host, time, pid and error file (<N/A> when it has none), the error file's message, the last 20 lines of its stderr, then how this node's other ranks ended on one line.",
    "Without --nnodes, a SLURM, MPI, Kubeflow or SkyPilot placement is detected as for accelerate's flags (torchrun would start one separate world per node).",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_maps_as_torchrun_takes_them() {
        for ok in ["0", "3", "0:1", "0:3,1:0,2:1"] {
            assert!(parse_std(ok).is_ok(), "{ok}");
        }
        for bad in ["4", "10:1", "0:1,", "x", ""] {
            assert!(parse_std(bad).is_err(), "{bad}");
        }
    }
}
