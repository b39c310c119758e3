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
#[derive(Debug, Parser)]
#[command(name = "accel-test", version, about, long_about, max_term_width = 100)]
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
                    "A failure does not stop the world at once, as it would in accel-launch: the survivors are what name the dead or wrong rank, so they get --timeout plus 10 s to report before they are stopped (SIGTERM, 2 s, SIGKILL). A world in which no rank makes progress for --timeout plus 15 s is stopped as well. SIGINT and SIGTERM are forwarded to every rank's group; accel-test then exits 130.",
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
}
