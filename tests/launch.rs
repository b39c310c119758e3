//! accel-launch and `accel-env -- CMD` with real processes: parity of every rank's environment and of
//! what accelerate makes of it against the real `accelerate launch`, real gloo training, fault drills
//! with real signals, and a two-node run across network namespaces.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_accel-launch");
const ENV_BIN: &str = env!("CARGO_BIN_EXE_accel-env");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn python() -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python"));
    assert!(p.exists(), "the test venv is missing: {}", p.display());
    p
}

fn fixture(name: &str) -> PathBuf {
    Path::new(ROOT).join("tests/fixtures/launch").join(name)
}

/// A controlled environment: no config file anywhere, the venv's Python.
fn base_cmd(program: impl AsRef<std::ffi::OsStr>, hf_home: &Path) -> Command {
    let mut c = Command::new(program);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", hf_home)
        .env("HF_HOME", hf_home)
        .env("ACCEL_PYTHON", python())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("ACCEL_NO_PROGRESS", "1");
    c
}

fn read_ranks(dir: &Path) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        if let Some(r) = name.strip_prefix("rank") {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            out.insert(r.to_string(), v);
        }
    }
    out
}

fn env_of(v: &Value) -> BTreeMap<String, String> {
    v["env"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
        .collect()
}

/// Values that differ between any two runs (or by design: no agent store).
const RUN_SPECIFIC: &[&str] = &[
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_USE_AGENT_STORE",
    "_",
];

/// torchrun's worker variables, which accelerate's single plain child does not get.
const TORCHRUN_VARS: &[&str] = &[
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_NAME",
    "ROLE_RANK", "ROLE_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCHELASTIC_SIGNALS_TO_HANDLE", "MASTER_ADDR",
];

struct Case {
    name: &'static str,
    yaml: &'static str,
    flags: &'static [&'static str],
    /// Deliberate differences: variables only accel-launch sets (name, value).
    accel_only: &'static [(&'static str, &'static str)],
    /// Variables only accelerate sets (accel-launch fixes them away).
    accelerate_only: &'static [&'static str],
    /// accelerate starts one plain process where accel-launch starts N ranks.
    one_vs_n: bool,
}

const CASES: &[Case] = &[
    Case {
        name: "no",
        yaml: "distributed_type: 'NO'\nmixed_precision: fp16\nuse_cpu: true\n",
        flags: &[],
        accel_only: &[],
        accelerate_only: &[],
        one_vs_n: false,
    },
    Case {
        name: "multi_cpu",
        yaml: "distributed_type: MULTI_CPU\nnum_processes: 2\nuse_cpu: true\nmixed_precision: 'no'\n",
        flags: &[],
        accel_only: &[],
        accelerate_only: &[],
        one_vs_n: true,
    },
    Case {
        name: "multi_gpu_bf16_ids_dynamo",
        yaml: "distributed_type: MULTI_GPU\nmixed_precision: bf16\nnum_processes: 2\ngpu_ids: 0,1\ndynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_mode: max-autotune\n  dynamo_use_fullgraph: true\n",
        flags: &[],
        accel_only: &[],
        accelerate_only: &[],
        one_vs_n: false,
    },
    Case {
        name: "multi_gpu_fp16_cli",
        yaml: "distributed_type: MULTI_GPU\nmixed_precision: 'no'\nnum_processes: 2\nenable_cpu_affinity: false\n",
        flags: &["--mixed_precision", "fp16", "--dynamo-backend", "eager", "--dynamo_use_dynamic", "--num_cpu_threads_per_process", "3", "--debug"],
        accel_only: &[],
        accelerate_only: &[],
        one_vs_n: false,
    },
    Case {
        name: "fsdp1",
        yaml: "distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 2\nfsdp_config:\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  fsdp_backward_prefetch: BACKWARD_PRE\n  fsdp_forward_prefetch: false\n  fsdp_offload_params: true\n  fsdp_sharding_strategy: SHARD_GRAD_OP\n  fsdp_state_dict_type: SHARDED_STATE_DICT\n  fsdp_sync_module_states: true\n  fsdp_transformer_layer_cls_to_wrap: GPT2Block\n  fsdp_use_orig_params: true\n  fsdp_cpu_ram_efficient_loading: true\n  fsdp_activation_checkpointing: true\n",
        flags: &[],
        accel_only: &[],
        accelerate_only: &[],
        one_vs_n: false,
    },
    Case {
        name: "fsdp2",
        yaml: "distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: true\n  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n  fsdp_min_num_params: 2000\n  fsdp_state_dict_type: FULL_STATE_DICT\n  fsdp_cpu_ram_efficient_loading: false\n  fsdp_activation_checkpointing_offload: true\n",
        flags: &["--fsdp_offload_params", "true", "--fsdp-forward-prefetch", "true"],
        accel_only: &[],
        accelerate_only: &[],
        one_vs_n: false,
    },
    Case {
        name: "deepspeed",
        yaml: "distributed_type: DEEPSPEED\nmixed_precision: bf16\nnum_processes: 2\ndeepspeed_config:\n  gradient_accumulation_steps: 4\n  gradient_clipping: 1.0\n  offload_optimizer_device: cpu\n  offload_param_device: nvme\n  offload_param_nvme_path: /nvme/p\n  zero3_init_flag: true\n  zero3_save_16bit_model: false\n  zero_stage: 3\n",
        flags: &[],
        accel_only: &[("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH", "/nvme/p")],
        accelerate_only: &[],
        one_vs_n: false,
    },
    Case {
        name: "deepspeed_config_file",
        yaml: "distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n  deepspeed_config_file: /tmp/ds_config.json\n  zero3_init_flag: false\n",
        flags: &["--gradient_accumulation_steps", "2"],
        accel_only: &[],
        accelerate_only: &[],
        one_vs_n: false,
    },
    Case {
        name: "megatron",
        yaml: "distributed_type: MEGATRON_LM\nnum_processes: 2\nmegatron_lm_config:\n  megatron_lm_tp_degree: 2\n  megatron_lm_pp_degree: 1\n  megatron_lm_num_micro_batches: 2\n  megatron_lm_sequence_parallelism: true\n  megatron_lm_recompute_activations: true\n  megatron_lm_use_distributed_optimizer: false\n  megatron_lm_gradient_clipping: 1.0\n",
        flags: &[],
        accel_only: &[],
        accelerate_only: &[],
        one_vs_n: false,
    },
    Case {
        name: "fp8",
        yaml: "distributed_type: MULTI_GPU\nmixed_precision: fp8\nnum_processes: 2\nfp8_config:\n  backend: TE\n  fp8_format: E4M3\n  amax_history_len: 32\n  amax_compute_algo: max\n  margin: 1\n  use_mxfp8_block_scaling: true\n",
        flags: &[],
        accel_only: &[],
        accelerate_only: &[],
        one_vs_n: false,
    },
    Case {
        name: "fp8_questionnaire_names",
        yaml: "distributed_type: MULTI_GPU\nmixed_precision: fp8\nnum_processes: 2\nfp8_config:\n  backend: MSAMP\n  optimization_level: O1\n  amax_history_length: 16\n",
        flags: &[],
        accel_only: &[("ACCELERATE_FP8_OPT_LEVEL", "O1"), ("ACCELERATE_FP8_AMAX_HISTORY_LEN", "16")],
        accelerate_only: &["ACCELERATE_FP8_OPTIMIZATION_LEVEL", "ACCELERATE_FP8_AMAX_HISTORY_LENGTH"],
        one_vs_n: false,
    },
];

fn run_case(case: &Case, root: &Path) -> Result<(), String> {
    let dir = root.join(case.name);
    let (a, b, hf) = (dir.join("a"), dir.join("b"), dir.join("hf"));
    for d in [&a, &b, &hf] {
        std::fs::create_dir_all(d).unwrap();
    }
    let cfg = dir.join("config.yaml");
    std::fs::write(&cfg, case.yaml).unwrap();
    let probe = fixture("probe.py");
    let mut acc = base_cmd(python(), &hf);
    acc.current_dir(&dir)
        .arg(fixture("accelerate_launch.py"))
        .args(["launch", "--config_file"])
        .arg(&cfg)
        .args(["--main_process_port", "0"])
        .args(case.flags)
        .arg(&probe)
        .arg(&a);
    let mut ours = base_cmd(BIN, &hf);
    ours.current_dir(&dir)
        .arg("--config_file")
        .arg(&cfg)
        .args(case.flags)
        .arg(&probe)
        .arg(&b);
    let ha = acc.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let hb = ours.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let (oa, ob) = (ha.wait_with_output().unwrap(), hb.wait_with_output().unwrap());
    let show = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();
    if !oa.status.success() || !ob.status.success() {
        return Err(format!("{}: accelerate {:?} / accel-launch {:?}\n--- accelerate:\n{}\n--- accel-launch:\n{}", case.name, oa.status, ob.status, show(&oa), show(&ob)));
    }
    let (ra, rb) = (read_ranks(&a), read_ranks(&b));
    let mut problems = Vec::new();
    let pairs: Vec<(String, String)> = if case.one_vs_n {
        if ra.len() != 1 || rb.len() < 2 {
            return Err(format!("{}: expected 1 accelerate process and N accel ranks, got {:?} / {:?}", case.name, ra.keys(), rb.keys()));
        }
        rb.keys().map(|k| ("x".to_string(), k.clone())).collect()
    } else {
        if ra.keys().collect::<Vec<_>>() != rb.keys().collect::<Vec<_>>() {
            return Err(format!("{}: ranks differ: {:?} / {:?}", case.name, ra.keys(), rb.keys()));
        }
        ra.keys().map(|k| (k.clone(), k.clone())).collect()
    };
    for (ka, kb) in pairs {
        let (mut ea, mut eb) = (env_of(&ra[&ka]), env_of(&rb[&kb]));
        for k in RUN_SPECIFIC {
            ea.remove(*k);
            eb.remove(*k);
        }
        for (k, v) in case.accel_only {
            if eb.remove(*k).as_deref() != Some(*v) {
                problems.push(format!("rank {kb}: accel-launch should set {k}={v}"));
            }
            ea.remove(*k);
        }
        for k in case.accelerate_only {
            if ea.remove(*k).is_none() {
                problems.push(format!("rank {ka}: accelerate was expected to set {k}"));
            }
            if eb.contains_key(*k) {
                problems.push(format!("rank {kb}: accel-launch should not set {k}"));
            }
        }
        if case.one_vs_n {
            for k in TORCHRUN_VARS {
                ea.remove(*k);
                if eb.remove(*k).is_none() {
                    problems.push(format!("rank {kb}: accel-launch rank lacks {k}"));
                }
            }
        }
        let keys: BTreeSet<&String> = ea.keys().chain(eb.keys()).collect();
        for k in keys {
            if ea.get(k) != eb.get(k) {
                problems.push(format!("rank {kb}: {k}: accelerate {:?} / accel-launch {:?}", ea.get(k), eb.get(k)));
            }
        }
        let (sa, sb) = (&ra[&ka]["state"], &rb[&kb]["state"]);
        if case.one_vs_n {
            let n = rb.len() as u64;
            if sb["type"] != "DistributedType.MULTI_CPU" || sb["num_processes"] != n || sb["index"].as_str().is_some() {
                problems.push(format!("rank {kb}: accel-launch rank state {sb} (want MULTI_CPU over {n})"));
            }
            if sb["index"].as_u64() != kb.parse().ok() {
                problems.push(format!("rank {kb}: process index {}", sb["index"]));
            }
            if sa["type"] != "DistributedType.NO" {
                problems.push(format!("accelerate's single process: {sa}"));
            }
        } else if sa != sb {
            problems.push(format!(
                "rank {kb}: accelerate state {sa} ({}) / accel-launch state {sb} ({})",
                ra[&ka]["message"], rb[&kb]["message"]
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{}:\n  {}", case.name, problems.join("\n  ")))
    }
}

/// Every config of the matrix, probed for real on every rank under both launchers (three cases at a time).
#[test]
fn parity_with_accelerate_launch() {
    let root = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    // PARITY_CASES=a,b runs only those cases (for debugging).
    #[allow(clippy::disallowed_methods)]
    let only = std::env::var("PARITY_CASES").ok();
    let cases: Vec<&Case> = CASES
        .iter()
        .filter(|c| only.as_deref().is_none_or(|o| o.split(',').any(|n| n == c.name)))
        .collect();
    for chunk in cases.chunks(3) {
        let results: Vec<Result<(), String>> = std::thread::scope(|s| {
            let hs: Vec<_> = chunk.iter().map(|c| s.spawn(|| run_case(c, root.path()))).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        failures.extend(results.into_iter().filter_map(Result::err));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
