//! `accel-test`: a pre-flight of the configured world with libtorch's own collectives.

use std::path::PathBuf;

use clap::Parser;

use super::ToolDoc;
use crate::env_vars::Group;

/// Check the configured distributed world with real collectives, in seconds.
///
/// Resolves the config exactly as accel-launch does (command line > ACCEL_CONFIG_* > file >
/// defaults), starts the world's local ranks (accel-test itself, in worker mode) and runs in every
/// rank: a pre-flight (MASTER_ADDR resolves, is not loopback on a multi-node job, the master port is
/// reachable, the devices the rank should see are visible), the rendezvous through a c10d TCPStore
/// hosted by rank 0, and collectives through the same c10d process group the training will use (gloo
/// for CPU tensors, NCCL for CUDA tensors): all_reduce (sum, max, min, avg), reduce and gather to rank
/// 0, all_gather, broadcast and barrier, on several dtypes and sizes with exactly known results.
///
/// Every check prints a PASS or FAIL line; a failure names the check, the rank, and what was expected
/// against what came back. The last line is the verdict. Every wait is bounded by --timeout: a rank
/// that never arrives or dies is named, instead of a 30-minute NCCL timeout.
///
/// On a multi-node job run accel-test on every node with the same flags and its --machine_rank, as
/// with accel-launch (under SLURM the node rank and the master are taken from the allocation).
///
/// With --probe it then names what would slow the job down: it measures the links between nodes and
/// within them, and the same matmul on every rank, prints the matrix, and names any node, link or
/// rank slower than the median by more than --probe_threshold (exit status 6; see PROBE).
#[derive(Debug, Parser)]
#[command(name = "accel-test", version, max_term_width = 100)]
pub struct TestCli {
    /// Config file (default: ACCEL_CONFIG_FILE, else accelerate's default config path).
    #[arg(long = "config_file", visible_alias = "config-file", value_name = "PATH", value_hint = clap::ValueHint::FilePath)]
    pub config_file: Option<PathBuf>,

    /// Run on CPU (gloo) even when GPUs are present.
    #[arg(long)]
    pub cpu: bool,

    /// Total number of ranks, over all machines.
    #[arg(
        long = "num_processes",
        visible_alias = "num-processes",
        value_name = "N"
    )]
    pub num_processes: Option<u32>,

    /// Number of machines (nodes) in the job.
    #[arg(
        long = "num_machines",
        visible_alias = "num-machines",
        value_name = "N"
    )]
    pub num_machines: Option<u32>,

    /// Rank of this machine (0 hosts the rendezvous).
    #[arg(
        long = "machine_rank",
        visible_alias = "machine-rank",
        value_name = "N"
    )]
    pub machine_rank: Option<u32>,

    /// Address of machine 0 (MASTER_ADDR). Required on multi-node jobs.
    #[arg(
        long = "main_process_ip",
        visible_alias = "main-process-ip",
        value_name = "HOST"
    )]
    pub main_process_ip: Option<String>,

    /// Port of the rendezvous on machine 0 (MASTER_PORT). Default: 29500 on multi-node jobs, a free
    /// port on a single machine.
    #[arg(
        long = "main_process_port",
        visible_alias = "main-process-port",
        value_name = "PORT"
    )]
    pub main_process_port: Option<u16>,

    /// GPUs to use on this machine, as CUDA_VISIBLE_DEVICES (e.g. `0,1`), or `all`.
    #[arg(long = "gpu_ids", visible_alias = "gpu-ids", value_name = "IDS")]
    pub gpu_ids: Option<String>,

    /// Seconds any single wait may take (rendezvous, a collective, a rank's answer).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value = "60",
        value_parser = crate::duration::parse_timeout,
        allow_negative_numbers = true
    )]
    pub timeout: std::time::Duration,

    /// Also measure all_reduce and all_gather latency and bandwidth (algbw and busbw as nccl-tests
    /// defines them) from 1 KB up to --max_size.
    #[arg(long)]
    pub bench: bool,

    /// Largest message size of --bench, in bytes, with an optional K/M/G suffix (powers of 1024).
    #[arg(long = "max_size", visible_alias = "max-size", value_name = "SIZE", default_value = "256M", value_parser = parse_bench_size)]
    pub max_size: u64,

    /// After the checks, measure bandwidth and latency between nodes (node pairs in rounds) and within
    /// them, and compute on every rank; name what is slower than the median (see PROBE). `--probe=links`
    /// or `--probe=compute` measures one part only.
    #[arg(
        long,
        value_name = "PARTS",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "all",
        value_parser = parse_probe
    )]
    pub probe: Option<crate::preflight::probe::Parts>,

    /// --probe names a node, link or rank slower than the median by more than PCT percent.
    #[arg(
        long = "probe_threshold",
        visible_alias = "probe-threshold",
        value_name = "PCT",
        default_value = "25",
        value_parser = parse_threshold
    )]
    pub probe_threshold: f64,

    /// Also run a torch.distributed check with the user's python (ACCEL_PYTHON, else python3 or python
    /// on PATH) in the same world, to test that side of the installation.
    #[arg(long)]
    pub python: bool,

    /// Run only the checks whose name starts with PREFIX (repeatable), e.g. `all_reduce.sum`.
    #[arg(long = "check", value_name = "PREFIX")]
    pub checks: Vec<String>,

    /// Print the report as one JSON document instead of lines.
    #[arg(long)]
    pub json: bool,

    /// Internal: run as one rank of the world, from the rank contract in the environment (RANK,
    /// LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), printing JSON events.
    #[arg(long, hide = true)]
    pub worker: bool,

    /// Internal: the device workers use (`cpu` or `cuda`).
    #[arg(long, hide = true, default_value = "cpu")]
    pub device: String,
}

impl TestCli {
    /// The command-line values that shape the world, as config keys (as accel-launch passes them).
    pub fn config_values(&self) -> Vec<crate::config::CliValue> {
        let mut v = Vec::new();
        let mut push = |key: &str, value: serde_json::Value, flag: &str| {
            v.push(crate::config::CliValue {
                key: key.into(),
                value,
                flag: flag.into(),
            })
        };
        if self.cpu {
            push("use_cpu", true.into(), "--cpu");
        }
        if let Some(n) = self.num_processes {
            push("num_processes", n.into(), "--num_processes");
        }
        if let Some(n) = self.num_machines {
            push("num_machines", n.into(), "--num_machines");
        }
        if let Some(n) = self.machine_rank {
            push("machine_rank", n.into(), "--machine_rank");
        }
        if let Some(ip) = &self.main_process_ip {
            push("main_process_ip", ip.clone().into(), "--main_process_ip");
        }
        if let Some(p) = self.main_process_port {
            push("main_process_port", p.into(), "--main_process_port");
        }
        if let Some(ids) = &self.gpu_ids {
            push("gpu_ids", ids.clone().into(), "--gpu_ids");
        }
        v
    }
}

/// `4096`, `64K`, `256M`, `1G` (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(format!("unknown size suffix `{c}` (use K, M or G)")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a size (e.g. 4096, 64K, 256M)"))?;
    n.checked_mul(mult)
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("`{s}` is out of range"))
}

/// --max_size: a size no smaller than --bench's first message (1K), which would otherwise measure
/// nothing and print nothing.
pub fn parse_bench_size(s: &str) -> Result<u64, String> {
    let n = parse_size(s)?;
    if n < 1024 {
        return Err(format!(
            "`{s}` is below the smallest --bench size, 1K (1024 bytes)"
        ));
    }
    Ok(n)
}

/// --probe's value: `all`, `links`, `compute` (comma-separated).
pub fn parse_probe(s: &str) -> Result<crate::preflight::probe::Parts, String> {
    crate::preflight::probe::Parts::parse(s)
}

/// --probe_threshold: a percentage strictly between 0 and 100 (`25` or `25%`), as a fraction.
pub fn parse_threshold(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("`{s}` is not a percentage (e.g. 25)"))?;
    if v.is_finite() && v > 0.0 && v < 100.0 {
        Ok(v / 100.0)
    } else {
        Err(format!(
            "`{s}` is out of range: a percentage above 0 and below 100"
        ))
    }
}

pub fn doc() -> ToolDoc {
    ToolDoc {
        name: "accel-test",
        command: super::command_of::<TestCli>,
        env_groups: &[
            Group::Accel,
            Group::Paths,
            Group::Contract,
            Group::Slurm,
            Group::Device,
            Group::Output,
        ],
        examples: &[
            ("accel-test", "Check the world of the default config: pre-flight, rendezvous, every collective."),
            ("accel-test --cpu --num_processes 4", "Four CPU ranks on this machine, over gloo."),
            ("accel-test --bench --max_size 64M --json", "Also measure all_reduce/all_gather bandwidth; JSON report."),
            ("accel-test --num_machines 2 --machine_rank 1 --main_process_ip node0 --timeout 10", "The second node of a two-node job; fails in 10 s if node0 is unreachable."),
            ("accel-test --python", "Also run a torch.distributed check with the python on PATH."),
            ("srun --ntasks-per-node=1 accel-test --probe --timeout 30", "In an allocation, one accel-test per node: check the world, then name a slow node, link or rank (exit 6) before the job is started."),
            ("accel-test --probe=links --probe_threshold 40 --json", "Measure only the links; name only what is more than 40% below the median; JSON report."),
        ],
        codes: crate::exit_status::Codes::Test,
        extra_sections: &[
            (
                "TORCH",
                &[
                    "accel-test links no libtorch. Its ranks run its libtorch part (libaccel_test_torch.so, built against torch 2.13), which it loads at run time from the torch of the environment it runs in: it asks ACCEL_PYTHON if set, then python3 and python in the directory of the accel-test binary (a venv's or conda env's bin), then python3 and python on PATH, where torch is (without importing it; the first whose torch is 2.13.* is used), loads torch's own libraries from there, then the part from ../lib/accel/ beside the binary's directory (where pip puts it) or from beside the binary (a cargo build). No run path and no LD_LIBRARY_PATH is involved.",
                    "Without torch, with another torch than 2.13.*, or when torch's libraries or the part cannot be loaded, accel-test exits 5 naming what it found and which torch it needs. --version names the torch and the part found, or why none. The world is resolved first, so a topology mistake reads the same with or without torch.",
                ],
            ),
            (
                "PROCESSES",
                &[
                    "The ranks are run by accel-launch's own supervisor: each rank leads its own process group and session, gets PR_SET_PDEATHSIG, and has a small guard process that takes the rank's whole group down (the rank's own children included) should accel-test itself be SIGKILLed. Nothing outlives accel-test.",
                    "A failure does not stop the world at once, as it would in accel-launch: the survivors are what name the dead or wrong rank, so they get --timeout plus 10 s to report before they are stopped (SIGTERM, 2 s, SIGKILL). A world in which no rank makes progress for --timeout plus 15 s is stopped as well. SIGINT, SIGTERM and SIGHUP are forwarded to every rank's group, also while the ranks are still being started (no rank is started after them); accel-test then exits 128+N (130 for SIGINT, 143 for SIGTERM).",
                    "Memory: before any rank starts, accel-test estimates the memory this machine's ranks need at least and refuses (exit 125, nothing started) a world that does not fit in the memory available: the least of MemAvailable (/proc/meminfo) and the room under the memory cgroup limits of accel-test's group and its ancestors (cgroup v1 or v2). Each CPU rank takes at least 180 MiB (libtorch and its process group), plus 2 MiB for each rank of the world (the all_gather and gather outputs every rank holds), plus 3 x --max_size with --bench (measured with torch 2.13: 183 MiB, 2.2 MiB, 3.2 x); CUDA ranks take more host memory (the CUDA context), which the estimate leaves out. The error names the estimate, the figure it was compared with and how many ranks would fit. A world that does not fit would otherwise page libtorch's code in and out without a verdict for as long as the kernel lets it. Should memory still run out, the ranks are the kernel's first choice (oom_score_adj 1000), so accel-test lives to report the rank killed (SIGKILL) and says that the OOM killer ran.",
                    "A rank's stdout carries its JSON events to accel-test; anything else a rank writes reaches stderr with a `[rank N]` prefix.",
                ],
            ),
            (
            "OUTPUT",
            &[
                "One line per check: `PASS` or `FAIL`, the check (e.g. `all_reduce.sum float32[1009]`), the ranks, and on failure the rank with what was expected and what came back. The last line is `verdict: PASS` or `verdict: FAIL` with the reason.",
                "Sums use the values (rank+1)*(i%7+1) (half types: (rank+i)%4), so every expected result is exact. Gloo has no AVG reduction: all_reduce.avg is a sum divided by the world size, as accelerate's reduce(\"mean\") does; NCCL uses its native AVG.",
                "--bench columns follow nccl-tests: size is the bytes per rank for all_reduce and the total gathered bytes for all_gather; algbw = size / time; busbw = algbw * 2(n-1)/n for all_reduce and algbw * (n-1)/n for all_gather.",
            ],
        ),
            (
                "PROBE",
                &[
                    "--probe runs after the checks, on the same process group (gloo for CPU tensors, NCCL for CUDA tensors), and measures three things. Every wait in it is bounded by --timeout; a peer that stops answering fails the probe.links or probe.compute check, naming it.",
                    "Links between nodes: the first rank of each node (local rank 0) leads it. The node pairs are scheduled as a round-robin tournament, so that each node is in one pair at a time and every pair is measured once: N-1 rounds for N nodes (N rounds when N is odd: each node sits one round out). In a pair, the latency is half the median round trip of 30 8-byte messages (after 5 warm-up ones), and the bandwidth is measured each way, timed by the sender from its first byte to the receiver's acknowledgement: first an estimate with growing messages (64 KiB to 64 MiB, until one takes 20 ms, so that a token bucket's burst does not pass for the link's rate), then measurements sized from the best rate so far to take about 0.25 s each (64 MiB messages sent up to 8 times on a fast link; one smaller message, at least 256 KiB, on a slow one), until two took at least half of that (at most four). The faster of those two counts: a stall (a lost packet's retransmission timeout, a rank descheduled on a busy machine) does not make a slow link, a slow link is slow both times. Then rank 0 looks at every pair at --probe_threshold, as the verdict will: the pairs of a node it would name, and of a link it would name, are measured again, in rounds of their own, and the faster of the two measurements of each direction counts (a machine or a switch busy for a few seconds slows a pair once; a NIC at a lower rate, or a bad cable, is slow again). The report lists them: `measured again before the verdict`, JSON `rechecked`.",
                    "Links within nodes: every pair of local ranks, in the same rounds, every node at once, measured the same way. They are judged between GPUs (NVLink, PCIe) only: between CPU ranks the link is the loopback of the cores the ranks share, and its spread is the scheduler's; it is shown, not judged.",
                    "Compute: the same matmul on every rank, five times, the best time counting (a rank that is slow every time is slow; one that was interrupted once is not): float32 1024x1024 on CPU, repeated for at least 0.1 s per trial (as many products as rank 0's time for one says: a shorter trial of a rank sharing its core with a busy process can fall in the first scheduler slices after its wait, when it has the core alone), with the ranks taking turns over the whole world, trial by trial (ranks sharing a machine's cores would otherwise measure each other); bfloat16 8192x8192 four times on CUDA, every rank at once on its own GPU. The ranks below (1 - threshold) times the median then run the five trials again (taking turns among themselves on CPU), and the better result counts: a core taken by other work for a few seconds is slow once, a throttled GPU or a core shared for good is slow again (probe.compute says `measured again: rank(s) …`). Reported in GFLOP/s (2n^3 per product).",
                    "The verdict compares like with like, against the median. A node whose best link to any other node (sending, or receiving) is below (1 - threshold) times the median node's best link has every link slow: it is named as \"node n3 (host): link to every other node 0.31× the median (1.9 vs 6.2 Gbit/s)\", with \"when sending\" or \"when receiving\" if only one way is slow. Then a link between two nodes not named is named by itself when it is below (1 - threshold) times the median of those links (\"link n0 (a) ↔ n1 (b)\", ↔ when both ways are slow). Nodes are judged only among three nodes or more: with two, a slow link cannot be pinned on either end. Ranks within nodes (on GPUs) are judged the same way against the whole world's links within nodes, and compute as \"rank 5 on n2 (host): compute 0.52× the median\". --probe_threshold sets the threshold (default 25%). When most nodes are slow the slow rate is the median, and nothing is named.",
                    "Reading the report: the first table is the bandwidth between nodes in Gbit/s (10^9 bits per second), a row sends to a column, with each node's slowest link at the end of its row; the second the one-way latency in microseconds. Then one line per node for the links within it (range, median, the slowest, the latency), the compute table (nodes by local rank), one `probe: STRAGGLER` line per thing named (or `probe: no straggler`), and the probe's own time. --json has all of it under `probe` (every link with its bytes and seconds, the stragglers with their ratio, value and median).",
                    "Exit status: 6 when the checks passed and the probe named a straggler (the verdict line starts `verdict: STRAGGLER`, the JSON verdict is STRAGGLER), so that an sbatch prolog or an init container can refuse the allocation; 0 when it named none; 1 when a check, the probe included, failed. Every node of a multi-node run prints the same probe report and exits the same way.",
                ],
            ),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("256m"), Ok(256 << 20));
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_bench_size("1")
            .unwrap_err()
            .contains("smallest --bench size"));
        assert_eq!(parse_bench_size("1K"), Ok(1024));
    }

    #[test]
    fn probe_flags() {
        use crate::preflight::probe::Parts;
        let cli = TestCli::parse_from(["accel-test", "--probe", "--json"]);
        assert_eq!(
            (cli.probe, cli.probe_threshold, cli.json),
            (Some(Parts::ALL), 0.25, true)
        );
        let cli = TestCli::parse_from(["accel-test", "--probe=links", "--probe-threshold", "40%"]);
        assert_eq!(cli.probe.map(|p| (p.links, p.compute)), Some((true, false)));
        assert!((cli.probe_threshold - 0.4).abs() < 1e-12);
        assert_eq!(TestCli::parse_from(["accel-test"]).probe, None);
        for bad in ["0", "100", "-5", "x", "nan"] {
            assert!(parse_threshold(bad).is_err(), "{bad}");
        }
        assert!(TestCli::try_parse_from(["accel-test", "--probe=disk"]).is_err());
    }
}
