//! `accel-launch`: torchrun's own command line (`torch/distributed/run.py::get_args_parser`, torch
//! 2.13), in both spellings, so an sbatch script that calls `torchrun` can call accel-launch instead.
//! The flags torchrun shares with `accelerate launch` (`--max_restarts`, `--monitor_interval`,
//! `--role`, `-m`, `--no_python`, `--log_dir`, `-t/--tee`, `--local_ranks_filter`, `--rdzv_backend`,
//! `--rdzv_conf`) are [`super::launch::LaunchCli`]'s; what they mean in each mode is
//! `crate::launch::torchrun`'s.

use clap::Args;

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
    /// torchrun's start method: only `spawn` (its default, and what every rank here is: a fresh process); fork and forkserver are refused.
    #[arg(
        long = "start_method",
        visible_alias = "start-method",
        value_name = "METHOD",
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

/// `--nnodes`: torchrun's `parse_min_max_nnodes`, with its `0 < MIN <= MAX` check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nnodes {
    pub min: u32,
    pub max: u32,
}

impl Nnodes {
    /// A range torchrun would treat elastically (nodes may join up to MAX).
    pub fn is_range(&self) -> bool {
        self.min != self.max
    }
}

impl std::fmt::Display for Nnodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_range() {
            write!(f, "{}:{}", self.min, self.max)
        } else {
            write!(f, "{}", self.max)
        }
    }
}

fn parse_nnodes(s: &str) -> Result<Nnodes, String> {
    let num = |v: &str| {
        v.trim()
            .parse::<u32>()
            .map_err(|_| format!("`{v}` is not a node count (N or MIN:MAX)"))
    };
    let (min, max) = match s.split(':').collect::<Vec<_>>()[..] {
        [n] => (num(n)?, num(n)?),
        [a, b] => (num(a)?, num(b)?),
        _ => return Err(format!("`{s}` is not in N or MIN:MAX form")),
    };
    if min == 0 || min > max {
        return Err(format!(
            "`{s}`: torchrun needs 0 < MIN <= MAX (got MIN={min}, MAX={max})"
        ));
    }
    Ok(Nnodes { min, max })
}

/// `--nproc_per_node`: torchrun's `determine_local_world_size` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NprocPerNode {
    Count(u32),
    Auto,
    Cpu,
    Gpu,
}

impl std::fmt::Display for NprocPerNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NprocPerNode::Count(n) => write!(f, "{n}"),
            NprocPerNode::Auto => write!(f, "auto"),
            NprocPerNode::Cpu => write!(f, "cpu"),
            NprocPerNode::Gpu => write!(f, "gpu"),
        }
    }
}

fn parse_nproc(s: &str) -> Result<NprocPerNode, String> {
    match s {
        "auto" => Ok(NprocPerNode::Auto),
        "cpu" => Ok(NprocPerNode::Cpu),
        "gpu" => Ok(NprocPerNode::Gpu),
        "xpu" => Err("`xpu`: accel-launch counts NVIDIA GPUs only (use a number)".into()),
        _ => match s.trim().parse::<u32>() {
            Ok(0) => Err("0 ranks: at least 1 is needed".into()),
            Ok(n) => Ok(NprocPerNode::Count(n)),
            Err(_) => Err(format!(
                "`{s}` is not a rank count: a number, auto, cpu or gpu"
            )),
        },
    }
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

/// `--numa_binding`: torch 2.13's `torch.numa.binding.AffinityMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NumaMode {
    /// Every CPU of the GPU's NUMA node.
    Node,
    /// Every CPU of the NUMA nodes of the GPU's socket.
    Socket,
    /// An exclusive share of the physical cores of the GPU's NUMA node.
    Exclusive,
    /// One core complex (the CPUs sharing a last-level cache) of the GPU's NUMA node.
    CoreComplex,
}

impl NumaMode {
    pub fn name(self) -> &'static str {
        match self {
            NumaMode::Node => "node",
            NumaMode::Socket => "socket",
            NumaMode::Exclusive => "exclusive",
            NumaMode::CoreComplex => "core-complex",
        }
    }
}

/// torchrun's `comma_separated_list` (torch/distributed/run.py::get_args_parser): `,,` is a literal
/// comma; an empty item stays (it matches every line, as `"" in line` does in Python).
pub fn comma_separated_list(value: &str) -> Vec<String> {
    const PLACEHOLDER: &str = "\u{0}COMMA\u{0}";
    value
        .replace(",,", PLACEHOLDER)
        .split(',')
        .map(|item| item.replace(PLACEHOLDER, ","))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nnodes_as_torchrun_parses_it() {
        assert_eq!(parse_nnodes("2"), Ok(Nnodes { min: 2, max: 2 }));
        assert_eq!(parse_nnodes("1:4"), Ok(Nnodes { min: 1, max: 4 }));
        assert!(!parse_nnodes("3:3").unwrap().is_range());
        for bad in ["0", "4:1", "x", "1:2:3", "", "-1"] {
            assert!(parse_nnodes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn nproc_values() {
        assert_eq!(parse_nproc("8"), Ok(NprocPerNode::Count(8)));
        assert_eq!(parse_nproc("auto"), Ok(NprocPerNode::Auto));
        assert_eq!(parse_nproc("gpu"), Ok(NprocPerNode::Gpu));
        assert_eq!(parse_nproc("cpu"), Ok(NprocPerNode::Cpu));
        assert!(parse_nproc("0").is_err());
        assert!(parse_nproc("xpu").unwrap_err().contains("NVIDIA"));
        assert!(parse_nproc("two").is_err());
    }

    #[test]
    fn redirect_maps_as_torchrun_takes_them() {
        for ok in ["0", "3", "0:1", "0:3,1:0,2:1"] {
            assert!(parse_std(ok).is_ok(), "{ok}");
        }
        for bad in ["4", "10:1", "0:1,", "x", ""] {
            assert!(parse_std(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn double_comma_is_a_comma() {
        assert_eq!(comma_separated_list("err,,x,err 1"), ["err,x", "err 1"]);
        assert_eq!(comma_separated_list("a"), ["a"]);
        assert_eq!(comma_separated_list(""), [""]);
    }
}
