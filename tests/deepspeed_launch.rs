//! accelerate's DeepSpeed path, for real (deepspeed 0.19.8, `DS_BUILD_OPS=0`, CPU): the same script
//! (tests/fixtures/deepspeed_accelerate_probe.py) with the same DeepSpeed config, launched by `accelerate
//! launch` and by `accel-launch` on 2 CPU ranks, must see the same environment and reach the same loss.
//!
//! accelerate 1.15 itself does not run DeepSpeed on CPU: its state reports process_index 0 of 1 on both
//! ranks, so `prepare` builds a DeepSpeed config for one process and DeepSpeed refuses it ("train_batch_size
//! is not equal to micro_batch_per_gpu * gradient_acc_step * world_size 4 != 4 * 1 * 2"). The test records
//! that message under both launchers, then trains with `deepspeed.initialize` (ZeRO-2, gloo) in the same
//! ranks and compares the losses.

#[allow(unused_imports)]
use crate::util::{ChildExt as _, CommandExt as _, WAIT};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;

use crate::util::{bin, isolated, tempdir, venv_bin, venv_path};

const CONFIG: &str = "compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  zero_stage: 2
  gradient_accumulation_steps: 1
  offload_optimizer_device: none
  offload_param_device: none
  zero3_init_flag: false
mixed_precision: 'no'
num_machines: 1
num_processes: 2
machine_rank: 0
main_training_function: main
use_cpu: false
rdzv_backend: static
same_network: true
";

fn launch(program: &Path, sub: Option<&str>, home: &Path, out: &Path) -> BTreeMap<u32, String> {
    std::fs::create_dir(out).unwrap();
    let mut cmd = isolated(program);
    cmd.env("PATH", venv_path())
        .env("HOME", home)
        .env("ACCEL_NO_PROGRESS", "1")
        .env("TORCH_CPP_LOG_LEVEL", "ERROR")
        .current_dir(home)
        .stdin(Stdio::null());
    if let Some(s) = sub {
        cmd.arg(s);
    }
    let o = cmd
        .arg("--config_file")
        .arg(home.join("ds.yaml"))
        .arg(crate::util::fixture("deepspeed_accelerate_probe.py"))
        .arg(out)
        .output_within(WAIT);
    assert!(
        o.status.success(),
        "{}: {}\n{}",
        program.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (0..2)
        .map(|r| {
            let p = out.join(format!("rank{r}.txt"));
            let s = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (r, s)
        })
        .collect()
}

#[test]
fn accelerate_deepspeed_path_same_env_and_loss_as_accelerate_launch() {
    let d = tempdir();
    std::fs::write(d.path().join("ds.yaml"), CONFIG).unwrap();
    let reference = launch(
        &venv_bin().join("accelerate"),
        Some("launch"),
        d.path(),
        &d.path().join("accelerate"),
    );
    let ours = launch(
        &bin("accel-launch"),
        None,
        d.path(),
        &d.path().join("accel"),
    );
    for r in 0..2u32 {
        assert_eq!(
            ours[&r], reference[&r],
            "rank {r}: accel-launch vs accelerate launch"
        );
        let rec = &ours[&r];
        for want in [
            format!("env.RANK={r}"),
            "env.WORLD_SIZE=2".into(),
            "env.ACCELERATE_USE_DEEPSPEED=true".into(),
            "env.ACCELERATE_DEEPSPEED_ZERO_STAGE=2".into(),
            "accelerate.distributed_type=DistributedType.DEEPSPEED".into(),
            "accelerate.prepare=AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size 4 != 4 * 1 * 2".into(),
            "deepspeed.world=2".into(),
        ] {
            assert!(rec.lines().any(|l| l == want), "rank {r} lacks {want:?}:\n{rec}");
        }
    }
    assert!(ours[&0].contains("deepspeed.loss="));
}
