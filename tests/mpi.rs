//! Real Open MPI (`mpirun.openmpi`) and MPICH (`mpiexec.mpich`) starting accel's ranks on this machine:
//! one process per rank through `accel-env --`, and accel-launch's `--mpirun_hostfile` hand-off. They
//! need Debian's openmpi-bin and mpich (scripts/setup); the tests fail, not skip, without them. Open MPI
//! refuses root unless told (`--allow-run-as-root`, or OMPI_ALLOW_RUN_AS_ROOT* for a command accel
//! builds).

use crate::util::free_port;
#[allow(unused_imports)]
use crate::util::{ChildExt as _, CommandExt as _, WAIT};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::slurm::{record, text, PROBE};
use crate::util::{bin, isolated, tempdir, venv_bin};

/// `program` with the built tools and the venv first on PATH; an MPI launcher must be installed.
fn mpi(program: &str, cwd: &Path) -> Command {
    let found = !program.starts_with("mpi")
        || std::env::var("PATH")
            .unwrap_or_default()
            .split(':')
            .any(|d| Path::new(d).join(program).is_file());
    assert!(
        found,
        "`{program}` is not installed: scripts/setup installs openmpi-bin and mpich"
    );
    let mut cmd = isolated(program);
    let tools = bin("accel-env").parent().unwrap().to_path_buf();
    let venv = venv_bin();
    let path = std::env::var("PATH").unwrap_or_default();
    cmd.env(
        "PATH",
        format!("{}:{}:{path}", tools.display(), venv.display()),
    )
    .env("HOME", cwd)
    .env("ACCEL_NO_PROGRESS", "1")
    .env("TORCH_CPP_LOG_LEVEL", "ERROR")
    .current_dir(cwd)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    cmd
}

fn run(mut cmd: Command) -> Output {
    cmd.output_within(WAIT)
}

fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = tempdir();
    let probe = d.path().join("probe.py");
    std::fs::write(&probe, PROBE).unwrap();
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    (d, probe, out)
}

/// The 4-rank single-node world: ranks in MPI order, all local, rendezvous on 127.0.0.1 (no
/// MASTER_ADDR needed when every rank is on one node), all_reduce of rank+1 = 10.
fn check_world(out: &Path, port: u16) {
    for rank in 0..4u32 {
        let r = record(out, rank);
        for (k, v) in [
            ("RANK", rank.to_string()),
            ("LOCAL_RANK", rank.to_string()),
            ("WORLD_SIZE", "4".into()),
            ("LOCAL_WORLD_SIZE", "4".into()),
            ("GROUP_RANK", "0".into()),
            ("MASTER_ADDR", "127.0.0.1".into()),
            ("MASTER_PORT", port.to_string()),
            ("dist_world", "4".into()),
            ("sum", "10".into()),
        ] {
            assert_eq!(r[k], v, "rank {rank}: {k} in {r:?}");
        }
    }
}

#[test]
fn open_mpi_mpirun_accel_env_forms_the_world() {
    let (d, probe, out) = setup();
    let port = free_port();
    let mut cmd = mpi("mpirun.openmpi", d.path());
    // 4 ranks on a 2-core machine: Open MPI counts cores as slots.
    cmd.args(["--allow-run-as-root", "--oversubscribe", "-np", "4", "-x"])
        .arg(format!("MASTER_PORT={port}"))
        .args(["accel-env", "--", "python"])
        .arg(&probe)
        .arg(&out);
    let o = run(cmd);
    assert!(o.status.success(), "{}", text(&o));
    check_world(&out, port);
}

#[test]
fn mpich_mpiexec_accel_env_forms_the_world() {
    let (d, probe, out) = setup();
    let port = free_port();
    let mut cmd = mpi("mpiexec.mpich", d.path());
    cmd.env("MASTER_PORT", port.to_string())
        .args(["-n", "4", "accel-env", "--", "python"])
        .arg(&probe)
        .arg(&out);
    let o = run(cmd);
    assert!(o.status.success(), "{}", text(&o));
    check_world(&out, port);
}

/// Ranks on several nodes need to be told where rank 0 is: refused before Python starts, naming it.
#[test]
fn mpi_ranks_over_nodes_without_master_addr_are_refused() {
    let (d, probe, out) = setup();
    let mut cmd = mpi(bin("accel-env").to_str().unwrap(), d.path());
    cmd.envs([
        ("OMPI_COMM_WORLD_RANK", "2"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
    ])
    .args(["--", "python"])
    .arg(&probe)
    .arg(&out);
    let o = run(cmd);
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "under MPI with 4 ranks over 2 nodes, MASTER_ADDR must name the host of rank 0"
        ),
        "{err}"
    );
    assert!(std::fs::read_dir(&out).unwrap().next().is_none());
}

/// A script written against accelerate, as `accelerate launch --mpirun_hostfile` runs it: every MPI
/// rank is a plain python process and accelerate's PartialState reads OMPI_COMM_WORLD_*.
const ACCELERATE_PROBE: &str = r#"
import os, sys
import torch
from accelerate import Accelerator
a = Accelerator()
t = a.reduce(torch.tensor([float(a.process_index + 1)]), reduction="sum")
with open(os.path.join(sys.argv[1], "rank%d.txt" % a.process_index), "w") as f:
    f.write("world=%d\nsum=%d\ntype=%s\nompi=%s\n" % (a.num_processes, int(t.item()),
            a.distributed_type, os.environ.get("OMPI_COMM_WORLD_RANK", "")))
a.wait_for_everyone()
# end_training destroys the process group: without it a rank can abort at interpreter exit
# ("terminate called without an active exception", gloo's threads outliving the group), as
# the reference run did once in a loaded full run.
a.end_training()
"#;

/// `--mpirun_hostfile` hands the job to mpirun (a hostfile of localhost slots): like `accelerate
/// launch` with the same flags it forms the 2-rank MULTI_CPU world, with MASTER_ADDR (main_process_ip
/// or 127.0.0.1) and MASTER_PORT exported as accelerate's prepare_simple_launcher_cmd_env does.
#[test]
fn accel_launch_mpirun_hostfile_handoff_forms_the_world() {
    let d = tempdir();
    let probe = d.path().join("probe.py");
    std::fs::write(&probe, ACCELERATE_PROBE).unwrap();
    std::fs::write(d.path().join("hostfile"), "localhost slots=2\n").unwrap();
    // `mpirun` on PATH is Open MPI (the hand-off passes Open MPI's flags), whatever the alternatives say.
    let shim = d.path().join("bin");
    std::fs::create_dir(&shim).unwrap();
    std::os::unix::fs::symlink("/usr/bin/mpirun.openmpi", shim.join("mpirun")).unwrap();
    for launcher in ["accelerate", "accel-launch"] {
        let out = d.path().join(launcher);
        std::fs::create_dir(&out).unwrap();
        let program = if launcher == "accel-launch" {
            bin(launcher).display().to_string()
        } else {
            venv_bin().join("accelerate").display().to_string()
        };
        let mut cmd = mpi(&program, d.path());
        let path = format!(
            "{}:{}",
            shim.display(),
            cmd.get_envs()
                .find(|(k, _)| *k == "PATH")
                .and_then(|(_, v)| v)
                .unwrap()
                .to_string_lossy()
        );
        cmd.env("PATH", path)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        if launcher == "accelerate" {
            cmd.arg("launch");
        }
        cmd.args([
            "--cpu",
            "--num_processes",
            "2",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "--mpirun_hostfile",
            "hostfile",
            "--main_process_port",
        ])
        .arg(free_port().to_string())
        .arg(&probe)
        .arg(&out);
        let o = run(cmd);
        assert!(o.status.success(), "{launcher}: {}", text(&o));
        for rank in 0..2u32 {
            let r = record(&out, rank);
            assert_eq!(
                (
                    r["world"].as_str(),
                    r["sum"].as_str(),
                    r["type"].as_str(),
                    r["ompi"].as_str()
                ),
                (
                    "2",
                    "3",
                    "DistributedType.MULTI_CPU",
                    rank.to_string().as_str()
                ),
                "{launcher} rank {rank}"
            );
        }
    }
}

const FOUR: &str = "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nnum_processes: 4\nnum_machines: 1\nuse_cpu: true\n";

/// A config file written for a world of 4 under an MPI world of 2 is refused before Python starts,
/// naming the file, both numbers and where the scheduler's came from; accelerate's default file (perhaps
/// a workstation's) only gets a warning, and the scheduler's world is used.
#[test]
fn mpi_world_that_differs_from_the_config_is_refused() {
    let (d, probe, out) = setup();
    let cfg = d.path().join("four.yaml");
    std::fs::write(&cfg, FOUR).unwrap();
    let mut cmd = mpi("mpirun.openmpi", d.path());
    cmd.args([
        "--allow-run-as-root",
        "-np",
        "2",
        "accel-env",
        "--config_file",
    ])
    .arg(&cfg)
    .args(["--", "python"])
    .arg(&probe)
    .arg(&out);
    let o = run(cmd);
    let t = text(&o);
    // 125 (LauncherFailed, accel-env(1) EXIT STATUS) from every process; mpirun passes it on.
    assert_eq!(o.status.code(), Some(125), "{t}");
    assert!(
        t.contains(&format!(
            "{} says num_processes: 4, but mpirun started 2 processes (OMPI_COMM_WORLD_SIZE or PMI_SIZE)",
            cfg.display()
        )),
        "{t}"
    );
    assert!(t.contains("set it to 2 in"), "{t}");
    assert_eq!(
        std::fs::read_dir(&out).unwrap().count(),
        0,
        "nothing ran: {t}"
    );

    // MPICH, with ACCEL_CONFIG_FILE: each rank exits 125 (mpiexec passes the highest code on).
    let mut cmd = mpi("mpiexec.mpich", d.path());
    cmd.env("ACCEL_CONFIG_FILE", &cfg)
        .args(["-n", "2", "accel-env", "--", "python"])
        .arg(&probe)
        .arg(&out);
    let o = run(cmd);
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    assert!(text(&o).contains("says num_processes: 4"), "{}", text(&o));

    // The default file: a warning, and the 2-rank world runs.
    let default = d.path().join(".cache/huggingface/accelerate");
    std::fs::create_dir_all(&default).unwrap();
    std::fs::write(default.join("default_config.yaml"), FOUR).unwrap();
    let port = free_port();
    let mut cmd = mpi("mpiexec.mpich", d.path());
    cmd.env("MASTER_PORT", port.to_string())
        .args(["-n", "2", "accel-env", "--", "python"])
        .arg(&probe)
        .arg(&out);
    let o = run(cmd);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("the scheduler's world is used"), "{t}");
    assert_eq!(record(&out, 1)["WORLD_SIZE"], "2", "{t}");
}
