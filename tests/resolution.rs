//! One run resolution for every tool: accel-launch (`--dry-run --json`), accel-test and `accel-env --`
//! must plan the same world from the same inputs — GPUs as CUDA_VISIBLE_DEVICES narrows them, SLURM
//! allocations with GPUs per node, and the same error for the same topology mistake.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::util::{tempdir, Output, Run};

/// A directory with a stand-in `nvidia-smi` that reports `n` GPUs (with UUIDs), first on PATH.
fn fake_gpus(dir: &Path, n: u32) -> PathBuf {
    let bin = dir.join(format!("smi{n}"));
    std::fs::create_dir_all(&bin).unwrap();
    let mut lines = String::new();
    for i in 0..n {
        lines.push_str(&format!(
            "echo '{i}, NVIDIA H200, 143771, 570.86.15, GPU-{i:04}aaaa'\n"
        ));
    }
    let script = format!(
        "#!/bin/sh\ncase \"$1\" in --query-gpu*) {lines};; *) echo '| NVIDIA-SMI 570.86.15   Driver Version: 570.86.15   CUDA Version: 12.8 |';; esac\n"
    );
    let smi = bin.join("nvidia-smi");
    std::fs::write(&smi, script).unwrap();
    std::fs::set_permissions(&smi, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    bin
}

fn with_path(run: Run, bin: &Path) -> Run {
    let path = format!(
        "{}:{}:{}",
        bin.display(),
        crate::util::venv_bin().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    run.env("PATH", path)
}

fn dry_run(home: &Path, bin: &Path, envs: &[(&str, &str)], args: &[&str]) -> Output {
    let mut r = with_path(Run::new("accel-launch", home), bin)
        .args(["--dry-run", "--json"])
        .args(args.iter().copied());
    for (k, v) in envs {
        r = r.env(k, v);
    }
    r.arg("train.py").run()
}

fn json(out: &Output) -> Value {
    out.success();
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

/// The SLURM variables of node `node` of an `nodes`-node job, one task per node, `gpus` GPUs each.
fn slurm(nodes: u32, node: u32, gpus: u32) -> Vec<(&'static str, String)> {
    vec![
        ("SLURM_JOB_ID", "777".into()),
        ("SLURM_JOB_NODELIST", format!("gpu[01-{nodes:02}]")),
        ("SLURM_NNODES", nodes.to_string()),
        ("SLURM_NODEID", node.to_string()),
        ("SLURM_PROCID", node.to_string()),
        ("SLURM_LOCALID", "0".into()),
        ("SLURM_NTASKS", nodes.to_string()),
        ("SLURM_NTASKS_PER_NODE", "1".into()),
        ("SLURM_STEP_ID", "0".into()),
        ("SLURM_STEP_TASKS_PER_NODE", format!("1(x{nodes})")),
        ("SLURM_GPUS_ON_NODE", gpus.to_string()),
        (
            "CUDA_VISIBLE_DEVICES",
            (0..gpus)
                .map(|g| g.to_string())
                .collect::<Vec<_>>()
                .join(","),
        ),
    ]
}

/// `srun accel-launch train.py` inside a GPU allocation: the ranks per node are the node's GPUs and the
/// world is that times the nodes — with no config (the embedded default) and with a config file that
/// states the totals, for 1, 2 and 8 GPUs on 1, 2 and 4 nodes.
#[test]
fn srun_in_a_gpu_allocation_plans_every_gpu_of_every_node() {
    let d = tempdir();
    for gpus in [1u32, 2, 8] {
        let bin = fake_gpus(d.path(), gpus);
        for nodes in [1u32, 2, 4] {
            let config = d.path().join(format!("c{gpus}x{nodes}.yaml"));
            std::fs::write(
                &config,
                format!(
                    "compute_environment: LOCAL_MACHINE\ndistributed_type: {}\nmixed_precision: bf16\nnum_machines: {nodes}\nnum_processes: {}\nmachine_rank: 0\ngpu_ids: all\nrdzv_backend: static\nsame_network: true\n",
                    if gpus > 1 || nodes > 1 { "MULTI_GPU" } else { "NO" },
                    gpus * nodes
                ),
            )
            .unwrap();
            for with_config in [false, true] {
                for node in [0, nodes - 1] {
                    let env = slurm(nodes, node, gpus);
                    let envs: Vec<(&str, &str)> =
                        env.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    let cfg = config.display().to_string();
                    let args: Vec<&str> = if with_config {
                        vec!["--config_file", &cfg]
                    } else {
                        vec![]
                    };
                    let out = dry_run(d.path(), &bin, &envs, &args);
                    let case =
                        format!("{gpus} GPUs × {nodes} nodes, node {node}, config {with_config}");
                    assert_eq!(out.code, Some(0), "{case}: {}", out.stderr);
                    let v = json(&out);
                    assert_eq!(v["launch"]["num_processes"], gpus * nodes, "{case}");
                    assert_eq!(v["launch"]["num_machines"], nodes, "{case}");
                    let ranks = v["ranks"].as_array().unwrap();
                    if gpus * nodes == 1 {
                        // accelerate's single plain child.
                        assert_eq!(ranks.len(), 1, "{case}");
                        continue;
                    }
                    assert_eq!(ranks.len() as u32, gpus, "{case}: ranks on this node");
                    assert_eq!(v["launch"]["machine_rank"], node, "{case}");
                    for (i, r) in ranks.iter().enumerate() {
                        assert_eq!(r["env"]["WORLD_SIZE"], (gpus * nodes).to_string(), "{case}");
                        assert_eq!(r["env"]["LOCAL_WORLD_SIZE"], gpus.to_string(), "{case}");
                        assert_eq!(
                            r["env"]["RANK"],
                            (node * gpus + i as u32).to_string(),
                            "{case}"
                        );
                        assert_eq!(
                            r["env"]["MASTER_ADDR"],
                            if nodes > 1 { "gpu01" } else { "127.0.0.1" },
                            "{case}"
                        );
                    }
                }
            }
        }
    }
}

/// The dry run shows the run that is planned: without a config on a machine without GPUs, two CPU
/// ranks, and under SLURM the machine count from SLURM, not accelerate's "set to 1" defaults.
#[test]
fn dry_run_reports_the_derived_values() {
    let d = tempdir();
    let bin = fake_gpus(d.path(), 0);
    let out = with_path(Run::new("accel-launch", d.path()), &bin)
        .args(["--dry-run", "--no_python", "true"])
        .run();
    out.success();
    let n = crate::util::cpu_default_ranks();
    out.stdout_contains(&format!(
        "num_processes = {n}  (default (embedded default: no config file))"
    ));
    if n == 2 {
        out.stdout_contains("use_cpu = true  (default (embedded default: no GPU visible))");
    }
    let env = slurm(2, 1, 0);
    let mut r = with_path(Run::new("accel-launch", d.path()), &bin).args([
        "--dry-run",
        "--cpu",
        "--no_python",
        "true",
    ]);
    for (k, v) in &env {
        if *k != "SLURM_GPUS_ON_NODE" && *k != "CUDA_VISIBLE_DEVICES" {
            r = r.env(k, v);
        }
    }
    let out = r.run();
    out.success()
        .stdout_contains("num_machines = 2  (default (placed by SLURM))")
        .stdout_contains("machine_rank = 1  (default (placed by SLURM))")
        .stdout_lacks_line("no config file: `--num_machines` was set to a value of `1`");
}

trait LacksLine {
    fn stdout_lacks_line(&self, s: &str) -> &Self;
}

impl LacksLine for Output {
    fn stdout_lacks_line(&self, s: &str) -> &Self {
        assert!(
            !self.stdout.lines().any(|l| l == s),
            "stdout has {s:?}:\n{}",
            self.stdout
        );
        self
    }
}

/// CUDA_VISIBLE_DEVICES narrows the GPUs as CUDA does (a negative entry ends the list), and accel-launch,
/// accel-test and `accel-env --` agree on what is left.
#[test]
fn visible_gpus_agree_between_launch_test_and_env() {
    let d = tempdir();
    let bin = fake_gpus(d.path(), 4);
    for (cvd, visible) in [
        (None, 4u32),
        (Some("0,1"), 2),
        (Some("-1"), 0),
        (Some("0,-1,2"), 1),
    ] {
        let case = format!("CUDA_VISIBLE_DEVICES={cvd:?}");
        let envs: Vec<(&str, &str)> = cvd
            .map(|v| ("CUDA_VISIBLE_DEVICES", v))
            .into_iter()
            .collect();
        // accel-launch: one rank per visible GPU; none visible: the CPU default.
        let v = json(&dry_run(d.path(), &bin, &envs, &[]));
        let cpu_default = crate::util::cpu_default_ranks();
        let want = if visible == 0 { cpu_default } else { visible };
        assert_eq!(v["launch"]["num_processes"], want, "{case}");
        // accel-test: the same world size in its report (one collective after the pre-flight).
        if cfg!(feature = "torch") {
            let mut t = with_path(Run::new("accel-test", d.path()), &bin).args([
                "--json",
                "--timeout",
                "20",
                "--check",
                "barrier",
            ]);
            for (k, val) in &envs {
                t = t.env(k, val);
            }
            let out = t.run();
            let doc: Value = serde_json::from_str(&out.stdout)
                .unwrap_or_else(|e| panic!("{case}: {e}\n{}\n{}", out.stdout, out.stderr));
            assert_eq!(doc["world"]["world_size"], want, "{case}: {}", out.stderr);
        }
        // accel-env --: a SLURM task of two on this node uses its own device only when the node shows
        // exactly one (torchrun's --virtual-local-rank), which needs the same count.
        let mut e = with_path(Run::new("accel-env", d.path()), &bin)
            .envs_of(&[
                ("SLURM_JOB_ID", "5"),
                ("SLURM_JOB_NODELIST", "gpu01"),
                ("SLURM_NNODES", "1"),
                ("SLURM_NODEID", "0"),
                ("SLURM_PROCID", "1"),
                ("SLURM_LOCALID", "1"),
                ("SLURM_NTASKS", "2"),
            ])
            .args(["--", "env"]);
        for (k, val) in &envs {
            e = e.env(k, val);
        }
        let out = e.run();
        out.success();
        let local = if visible == 1 {
            "LOCAL_RANK=0"
        } else {
            "LOCAL_RANK=1"
        };
        assert!(
            out.stdout.lines().any(|l| l == local),
            "{case}: want {local}\n{}",
            out.stdout
        );
        let use_cpu = out.stdout.lines().any(|l| l == "ACCELERATE_USE_CPU=True");
        assert_eq!(use_cpu, visible == 0, "{case}:\n{}", out.stdout);
    }
}

trait Envs {
    fn envs_of(self, vars: &[(&str, &str)]) -> Self;
}

impl Envs for Run {
    fn envs_of(mut self, vars: &[(&str, &str)]) -> Self {
        for (k, v) in vars {
            self = self.env(k, v);
        }
        self
    }
}

/// The same topology mistake reads the same, with the same exit status, from accel-launch and
/// accel-test.
#[test]
fn a_missing_machine_rank_is_the_same_error_everywhere() {
    let d = tempdir();
    let bin = fake_gpus(d.path(), 0);
    let args = [
        "--cpu",
        "--num_processes",
        "4",
        "--num_machines",
        "2",
        "--main_process_ip",
        "10.0.0.1",
    ];
    let launch = with_path(Run::new("accel-launch", d.path()), &bin)
        .args(args)
        .args(["--no_python", "true"])
        .run();
    let test = with_path(Run::new("accel-test", d.path()), &bin)
        .args(args)
        .run();
    launch.code_is(125);
    test.code_is(125);
    assert_eq!(
        launch.stderr.replace("accel-launch", "accel-test"),
        test.stderr
    );
    launch.stderr_contains("2 machines but no --machine_rank for this one");
}

/// A GPU config on a machine without GPUs: accel-test fails its pre-flight naming what the config asks
/// for; accel-launch keeps accelerate's behaviour but says so.
#[cfg(feature = "torch")]
#[test]
fn a_gpu_config_without_gpus_fails_the_preflight() {
    let d = tempdir();
    let bin = fake_gpus(d.path(), 0);
    let cfg = crate::util::repo().join("configs/ddp-8gpu.yaml");
    let out = with_path(Run::new("accel-test", d.path()), &bin)
        .arg("--config_file")
        .arg(&cfg)
        .run();
    out.code_is(1)
        .stdout_contains("FAIL  preflight.devices")
        .stdout_contains("the config asks for 8 GPUs per node (MULTI_GPU); none is visible")
        .stdout_contains("verdict: FAIL");
    let out = with_path(Run::new("accel-test", d.path()), &bin)
        .args(["--gpu_ids", "0,1", "--num_processes", "2"])
        .run();
    out.code_is(1)
        .stdout_contains("(gpu_ids 0,1); none is visible");
    let out = with_path(Run::new("accel-launch", d.path()), &bin)
        .arg("--config_file")
        .arg(&cfg)
        .args(["--dry-run", "--no_python", "true"])
        .run();
    out.success().stderr_contains(
        "the config asks for 8 GPUs per node (MULTI_GPU), but no GPU is visible here",
    );
}

/// Several srun tasks on one node would each start a world of their own: refused, as on many nodes.
/// The batch script itself (no step) may run accel-launch whatever --ntasks-per-node says.
#[test]
fn several_srun_tasks_on_one_node_are_refused() {
    let d = tempdir();
    let bin = fake_gpus(d.path(), 0);
    let job = [
        ("SLURM_JOB_ID", "31"),
        ("SLURM_JOB_NODELIST", "n1"),
        ("SLURM_NNODES", "1"),
        ("SLURM_NODEID", "0"),
        ("SLURM_NTASKS_PER_NODE", "2"),
        ("SLURM_PROCID", "0"),
    ];
    let step = [("SLURM_STEP_ID", "0"), ("SLURM_STEP_TASKS_PER_NODE", "2")];
    let out = with_path(Run::new("accel-launch", d.path()), &bin)
        .envs_of(&job)
        .envs_of(&step)
        .args(["--cpu", "--dry-run", "--no_python", "true"])
        .run();
    out.code_is(125)
        .stderr_contains("srun started 2 tasks per node");
    let out = with_path(Run::new("accel-test", d.path()), &bin)
        .envs_of(&job)
        .envs_of(&step)
        .args(["--cpu"])
        .run();
    out.code_is(125)
        .stderr_contains("srun started 2 tasks per node");
    // In the batch script (no step variables) it plans one world.
    let out = with_path(Run::new("accel-launch", d.path()), &bin)
        .envs_of(&job)
        .args([
            "--cpu",
            "--num_processes",
            "2",
            "--dry-run",
            "--no_python",
            "true",
        ])
        .run();
    out.success();
}

/// Every build compiles and links accel-test's NCCL path (scripts/setup installs the CUDA headers), and
/// on a machine without a GPU it says plainly that it checks on CPU with gloo.
#[cfg(feature = "torch")]
#[test]
fn accel_test_has_nccl_and_says_when_cuda_is_unavailable() {
    let d = tempdir();
    let out = Run::new("accel-test", d.path()).arg("--version").run();
    out.success().stdout_contains("collectives: gloo, NCCL");
    let gpu_here = std::path::Path::new("/proc/driver/nvidia/gpus").exists();
    if gpu_here {
        return;
    }
    out.stdout_contains("CUDA not available on this machine");
    let bin = fake_gpus(d.path(), 0);
    let out = with_path(Run::new("accel-test", d.path()), &bin)
        .args([
            "--num_processes",
            "2",
            "--check",
            "barrier",
            "--timeout",
            "30",
        ])
        .run();
    out.success()
        .stderr_contains(
            "CUDA is not available here (no GPU visible): checking the world on CPU with gloo",
        )
        .stdout_contains("on cpu (gloo)");
}

/// A console filter naming a rank this node does not run would hide everything: refused.
#[test]
fn local_ranks_filter_must_name_ranks_of_this_node() {
    let d = tempdir();
    let bin = fake_gpus(d.path(), 0);
    with_path(Run::new("accel-launch", d.path()), &bin)
        .args([
            "--cpu",
            "--num_processes",
            "2",
            "--local_ranks_filter",
            "5",
            "--dry-run",
            "--no_python",
            "true",
        ])
        .run()
        .code_is(2)
        .stderr_contains("--local_ranks_filter: this node runs local ranks 0 to 1, not 5");
}

/// `accel-env --` takes no topology flags: its errors point at the allocation or the contract
/// variables (all of them, LOCAL_RANK included), never at accel-launch's flags.
#[test]
fn accel_env_hints_name_what_it_reads() {
    let d = tempdir();
    let bin = fake_gpus(d.path(), 0);
    let out = with_path(Run::new("accel-env", d.path()), &bin)
        .envs_of(&[
            ("SLURM_JOB_ID", "5"),
            ("SLURM_JOB_NODELIST", "gpu[01-02]"),
            ("SLURM_NNODES", "2"),
            ("SLURM_NODEID", "0"),
            ("SLURM_PROCID", "1"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_STEP_TASKS_PER_NODE", "3,2"),
        ])
        .args(["--", "true"])
        .run();
    out.code_is(125)
        .stderr_contains("places 5 tasks but SLURM_NTASKS=4")
        .stderr_contains("set RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT")
        .stderr_lacks("--num_machines");
    let out = with_path(Run::new("accel-env", d.path()), &bin)
        .args(["--", "true"])
        .run();
    out.code_is(125)
        .stderr_contains("RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT");
    // The uneven layout SLURM writes as `2(x3),1` is a valid world of 7.
    let out = with_path(Run::new("accel-env", d.path()), &bin)
        .envs_of(&[
            ("SLURM_JOB_ID", "5"),
            ("SLURM_JOB_NODELIST", "gpu[01-04]"),
            ("SLURM_NNODES", "4"),
            ("SLURM_NODEID", "3"),
            ("SLURM_PROCID", "6"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NTASKS", "7"),
            ("SLURM_NTASKS_PER_NODE", "2(x3),1"),
        ])
        .args(["--", "env"])
        .run();
    out.success();
    for want in [
        "RANK=6",
        "WORLD_SIZE=7",
        "LOCAL_WORLD_SIZE=1",
        "GROUP_RANK=3",
    ] {
        assert!(
            out.stdout.lines().any(|l| l == want),
            "missing {want}:\n{}",
            out.stdout
        );
    }
}
