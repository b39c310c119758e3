//! accel-estimate-memory against accelerate's own arithmetic (run in .venv), hand-computed per-GPU
//! figures, a loopback Hub with range support, and the errors users meet.

use crate::util::{bin, repo, venv_python};
#[allow(unused_imports)]
use crate::util::{ChildExt as _, CommandExt as _, WAIT};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

/// An empty directory as the whole PATH: a host's nvidia-smi must not change the numbers (GPU count
/// and memory come from it when --num-gpus/--gpu-memory are not given).
fn empty_path() -> String {
    let dir = concat!(env!("CARGO_TARGET_TMPDIR"), "/estimate-empty-path");
    std::fs::create_dir_all(dir).expect("mkdir");
    dir.to_string()
}

fn run_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = crate::util::tool("accel-estimate-memory");
    cmd.args(args).current_dir(dir);
    cmd.env("PATH", empty_path());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output_within(WAIT)
}

fn run(args: &[&str]) -> Output {
    run_in(Path::new("/"), args, &[])
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs tests/estimate_reference.py: accelerate's `estimate_command` on models built from configs.
fn reference(dir: &Path, jobs: &Value) -> Vec<Value> {
    run_reference(
        &repo().join("tests/estimate_reference.py"),
        &dir.join("jobs.json"),
        jobs,
    )
}

/// Runs a reference script of the venv's python on `jobs` (written to `jobs_path`): its stdout is
/// a JSON list, one result per job.
fn run_reference(script: &Path, jobs_path: &Path, jobs: &Value) -> Vec<Value> {
    let python = venv_python();
    assert!(
        python.exists(),
        "{} is missing: these tests need the project's .venv (torch, transformers, accelerate)",
        python.display()
    );
    std::fs::write(jobs_path, jobs.to_string()).expect("write jobs");
    let out = Command::new(python)
        .arg(script)
        .arg(jobs_path)
        .env("TRANSFORMERS_VERBOSITY", "error")
        .env("HF_HUB_OFFLINE", "1")
        .output_within(WAIT);
    assert!(
        out.status.success(),
        "{} failed:\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let results = serde_json::from_slice::<Value>(&out.stdout)
        .expect("reference JSON")
        .as_array()
        .cloned()
        .expect("a list");
    // Callers zip these with their cases: one result per job, or the zip would hide the missing.
    assert_eq!(
        Some(results.len()),
        jobs.as_array().map(Vec::len),
        "{}: one result per job",
        script.display()
    );
    results
}

/// (case name, config.json) for every family, tiny and real-sized.
fn configs() -> Vec<(&'static str, Value)> {
    vec![
        (
            "tiny-llama",
            json!({"model_type":"llama","vocab_size":1000,"hidden_size":64,"intermediate_size":176,"num_hidden_layers":3,"num_attention_heads":8,"num_key_value_heads":2}),
        ),
        (
            "llama-3.1-8b",
            json!({"model_type":"llama","architectures":["LlamaForCausalLM"],"vocab_size":128256,"hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"max_position_embeddings":131072,"rope_theta":500000.0,"rope_scaling":{"factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192,"rope_type":"llama3"},"tie_word_embeddings":false,"torch_dtype":"bfloat16"}),
        ),
        (
            "llama-2-70b",
            json!({"model_type":"llama","vocab_size":32000,"hidden_size":8192,"intermediate_size":28672,"num_hidden_layers":80,"num_attention_heads":64,"num_key_value_heads":8,"max_position_embeddings":4096}),
        ),
        (
            "mistral-7b",
            json!({"model_type":"mistral","vocab_size":32768,"hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,"sliding_window":null}),
        ),
        (
            "mixtral-8x7b",
            json!({"model_type":"mixtral","vocab_size":32000,"hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"num_local_experts":8,"num_experts_per_tok":2}),
        ),
        (
            "qwen2.5-7b",
            json!({"model_type":"qwen2","vocab_size":152064,"hidden_size":3584,"intermediate_size":18944,"num_hidden_layers":28,"num_attention_heads":28,"num_key_value_heads":4,"tie_word_embeddings":false}),
        ),
        (
            "qwen1.5-moe",
            json!({"model_type":"qwen2_moe","vocab_size":151936,"hidden_size":2048,"intermediate_size":5632,"moe_intermediate_size":1408,"shared_expert_intermediate_size":5632,"num_experts":60,"num_experts_per_tok":4,"num_hidden_layers":24,"num_attention_heads":16,"num_key_value_heads":16,"decoder_sparse_step":1,"mlp_only_layers":[]}),
        ),
        (
            "qwen3-8b",
            json!({"model_type":"qwen3","vocab_size":151936,"hidden_size":4096,"intermediate_size":12288,"num_hidden_layers":36,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":128}),
        ),
        (
            "qwen3-30b-a3b",
            json!({"model_type":"qwen3_moe","vocab_size":151936,"hidden_size":2048,"intermediate_size":6144,"moe_intermediate_size":768,"num_experts":128,"num_experts_per_tok":8,"num_hidden_layers":48,"num_attention_heads":32,"num_key_value_heads":4,"head_dim":128,"mlp_only_layers":[0]}),
        ),
        (
            "gemma-2b",
            json!({"model_type":"gemma","vocab_size":256000,"hidden_size":2048,"intermediate_size":16384,"num_hidden_layers":18,"num_attention_heads":8,"num_key_value_heads":1,"head_dim":256}),
        ),
        (
            "gemma2-2b",
            json!({"model_type":"gemma2","vocab_size":256000,"hidden_size":2304,"intermediate_size":9216,"num_hidden_layers":26,"num_attention_heads":8,"num_key_value_heads":4,"head_dim":256}),
        ),
        (
            "phi3-mini",
            json!({"model_type":"phi3","vocab_size":32064,"hidden_size":3072,"intermediate_size":8192,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":32,"pad_token_id":32000}),
        ),
        (
            // auto_map names AutoModelForCausalLM (as Phi-3-mini's config does): accelerate builds
            // the causal LM, untied LM head included.
            "tiny-phi3-auto-map",
            json!({"model_type":"phi3","vocab_size":320,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":4,"pad_token_id":0,"auto_map":{"AutoConfig":"configuration_phi3.Phi3Config","AutoModelForCausalLM":"modeling_phi3.Phi3ForCausalLM"}}),
        ),
        (
            "gpt2",
            json!({"model_type":"gpt2","vocab_size":50257,"n_embd":768,"n_layer":12,"n_head":12,"n_positions":1024,"n_ctx":1024}),
        ),
        (
            "pythia-160m",
            json!({"model_type":"gpt_neox","vocab_size":50304,"hidden_size":768,"intermediate_size":3072,"num_hidden_layers":12,"num_attention_heads":12,"rotary_pct":0.25,"max_position_embeddings":2048}),
        ),
        (
            "bert-base-cased",
            json!({"model_type":"bert","vocab_size":28996,"hidden_size":768,"intermediate_size":3072,"num_hidden_layers":12,"num_attention_heads":12,"max_position_embeddings":512,"type_vocab_size":2}),
        ),
        (
            "t5-small",
            json!({"model_type":"t5","vocab_size":32128,"d_model":512,"d_kv":64,"d_ff":2048,"num_layers":6,"num_heads":8,"feed_forward_proj":"relu"}),
        ),
        (
            "flan-t5-base",
            json!({"model_type":"t5","vocab_size":32128,"d_model":768,"d_kv":64,"d_ff":2048,"num_layers":12,"num_decoder_layers":12,"num_heads":12,"feed_forward_proj":"gated-gelu"}),
        ),
    ]
}

#[test]
fn tables_match_accelerate_from_configs_and_safetensors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut jobs = Vec::new();
    let mut cases = Vec::new();
    for (name, config) in configs() {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("config.json"), config.to_string()).expect("write config");
        let config_path = dir.join("config.json").display().to_string();
        let st = tmp.path().join(format!("{name}.safetensors"));
        let st_path = st.display().to_string();
        // Long names take accelerate's widening path for long titles, short ones the plain path.
        jobs.push(
            json!({"dir": dir, "names": [config_path, "config.json", st_path, name], "safetensors": st}),
        );
        cases.push((name, dir, config_path, st_path));
    }
    let refs = reference(tmp.path(), &Value::Array(jobs));
    assert_eq!(refs.len(), cases.len(), "one reference per case");
    for ((name, dir, config_path, st_path), r) in cases.iter().zip(&refs) {
        let tables = r["tables"].as_array().expect("tables");
        assert_eq!(tables.len(), 4, "{name}: one table per name");
        let from_config = stdout(&run(&[config_path]));
        assert_eq!(
            from_config,
            tables[0].as_str().unwrap_or(""),
            "{name}: config.json"
        );
        let short = stdout(&run_in(dir, &["config.json"], &[]));
        assert_eq!(
            short,
            tables[1].as_str().unwrap_or(""),
            "{name}: short title"
        );
        let from_weights = stdout(&run(&[st_path]));
        assert_eq!(
            from_weights,
            tables[2].as_str().unwrap_or(""),
            "{name}: safetensors"
        );
        let json: Value =
            serde_json::from_str(&stdout(&run(&["--json", config_path]))).expect("json output");
        assert_eq!(json["total_size"], r["total"], "{name}: total bytes");
        assert_eq!(
            json["largest_layer"], r["largest_layer"],
            "{name}: largest layer bytes"
        );
        // The directory route (config.json present, family known) is the formula.
        let from_dir = stdout(&run_in(tmp.path(), &[name], &[]));
        assert_eq!(
            from_dir,
            tables[3].as_str().unwrap_or(""),
            "{name}: directory"
        );
    }
    // accelerate's published reference numbers for bert-base-cased.
    let bert = &refs[configs()
        .iter()
        .position(|c| c.0 == "bert-base-cased")
        .unwrap_or(0)];
    assert_eq!(bert["total"], 433_249_280);
    assert_eq!(bert["largest_layer"], 90_669_056);
}

#[test]
fn dtypes_order_and_duplicates_are_kept() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("m");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("config.json"), configs()[0].1.to_string()).expect("write");
    let refs = reference(
        tmp.path(),
        &json!([{"dir": dir, "names": ["m"], "dtypes": ["int4", "float32", "int4"]}]),
    );
    let ours = stdout(&run_in(
        tmp.path(),
        &["m", "--dtypes", "int4", "float32", "int4"],
        &[],
    ));
    assert_eq!(ours, refs[0]["tables"][0].as_str().unwrap_or(""));
    // accelerate's other spellings are accepted.
    let ours = stdout(&run_in(
        tmp.path(),
        &[
            "m",
            "--library_name",
            "transformers",
            "--trust-remote-code",
            "--dtypes",
            "int4",
            "float32",
            "int4",
        ],
        &[],
    ));
    assert_eq!(ours, refs[0]["tables"][0].as_str().unwrap_or(""));
    let bad = run_in(tmp.path(), &["m", "--dtypes", "bfloat16"], &[]);
    assert_eq!(bad.status.code(), Some(2));
}

/// Writes a safetensors file: `tensors` are (name, dtype, shape); the data region is sparse.
fn write_safetensors(path: &Path, tensors: &[(&str, &str, Vec<u64>)]) -> u64 {
    let mut header = serde_json::Map::new();
    let mut offset = 0u64;
    for (name, dtype, shape) in tensors {
        let size = match *dtype {
            "F32" | "I32" => 4,
            "BF16" | "F16" => 2,
            "I64" => 8,
            _ => 1,
        };
        let n = shape.iter().product::<u64>() * size;
        header.insert(
            name.to_string(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}),
        );
        offset += n;
    }
    let text = Value::Object(header).to_string();
    let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(text.as_bytes());
    std::fs::write(path, &bytes).expect("write safetensors");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open");
    file.set_len(bytes.len() as u64 + offset).expect("extend");
    bytes.len() as u64 + offset
}

fn llama_shard_tensors(
    layers: std::ops::Range<u64>,
    h: u64,
    i: u64,
    kv: u64,
) -> Vec<(String, Vec<u64>)> {
    let mut out = Vec::new();
    for l in layers {
        let p = format!("model.layers.{l}");
        for (n, s) in [
            ("self_attn.q_proj.weight", vec![h, h]),
            ("self_attn.k_proj.weight", vec![kv, h]),
            ("self_attn.v_proj.weight", vec![kv, h]),
            ("self_attn.o_proj.weight", vec![h, h]),
            ("mlp.gate_proj.weight", vec![i, h]),
            ("mlp.up_proj.weight", vec![i, h]),
            ("mlp.down_proj.weight", vec![h, i]),
            ("input_layernorm.weight", vec![h]),
            ("post_attention_layernorm.weight", vec![h]),
        ] {
            out.push((format!("{p}.{n}"), s));
        }
    }
    out
}

/// A sharded bf16 checkpoint directory with an index; returns its fp32 total in bytes.
fn sharded_checkpoint(dir: &Path, shards: u64, layers_per_shard: u64) -> u64 {
    std::fs::create_dir_all(dir).expect("mkdir");
    let (h, i, kv, v) = (256u64, 512u64, 64u64, 1000u64);
    let mut weight_map = serde_json::Map::new();
    let mut numel = 0u64;
    for s in 0..shards {
        let file = format!("model-{:05}-of-{shards:05}.safetensors", s + 1);
        let mut tensors =
            llama_shard_tensors(s * layers_per_shard..(s + 1) * layers_per_shard, h, i, kv);
        if s == 0 {
            tensors.push(("model.embed_tokens.weight".into(), vec![v, h]));
        }
        if s == shards - 1 {
            tensors.push(("model.norm.weight".into(), vec![h]));
            tensors.push(("lm_head.weight".into(), vec![v, h]));
        }
        for (name, shape) in &tensors {
            weight_map.insert(name.clone(), json!(file));
            numel += shape.iter().product::<u64>();
        }
        let refs: Vec<(&str, &str, Vec<u64>)> = tensors
            .iter()
            .map(|(n, s)| (n.as_str(), "BF16", s.clone()))
            .collect();
        write_safetensors(&dir.join(&file), &refs);
    }
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        json!({"metadata": {"total_size": numel * 2}, "weight_map": weight_map}).to_string(),
    )
    .expect("write index");
    numel * 4
}

#[test]
fn sharded_directory_counts_bf16_as_float32_like_accelerate() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("ckpt");
    let total = sharded_checkpoint(&dir, 3, 2);
    let out: Value =
        serde_json::from_str(&stdout(&run(&["--json", &dir.display().to_string()]))).expect("json");
    assert_eq!(out["total_size"], total);
    assert_eq!(out["source"]["kind"], "safetensors");
    assert_eq!(out["source"]["files"].as_array().map(Vec::len), Some(3));
    // Largest layer: a decoder layer (no-split `layers.N`): 2·256² + 2·64·256 + 3·512·256 + 2·256
    // parameters, more than the 1000×256 embedding or lm_head.
    assert_eq!(
        out["largest_layer"],
        (2 * 65536 + 2 * 16384 + 3 * 131072 + 512) * 4
    );
    // The index file itself is accepted too.
    let index = dir.join("model.safetensors.index.json");
    let again: Value =
        serde_json::from_str(&stdout(&run(&["--json", &index.display().to_string()])))
            .expect("json");
    assert_eq!(again["total_size"], total);
}

#[test]
fn real_save_pretrained_checkpoints_are_read() {
    // transformers writes the shards, the index and the config; safetensors writes the headers.
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("saved");
    let script = r#"
import json, sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
from safetensors.torch import save_file
cfg = LlamaConfig(vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
model = LlamaForCausalLM(cfg).to(torch.bfloat16)
model.save_pretrained(sys.argv[1], max_shard_size="100KB")
sd = model.state_dict()
odd = {"mask": torch.ones(3, 5, dtype=torch.bool), "ids": torch.arange(7), "w": torch.zeros(4, 4, dtype=torch.float16)}
save_file(odd, sys.argv[2], metadata={"format": "pt"})
print(json.dumps({"total": sum(t.numel() * 4 for t in sd.values()), "tensors": len(sd)}))
"#;
    let odd = tmp.path().join("odd.safetensors");
    let out = Command::new(venv_python())
        .args(["-c", script])
        .arg(&dir)
        .arg(&odd)
        .env("TRANSFORMERS_VERBOSITY", "error")
        .output_within(WAIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The last line: with DeepSpeed installed, importing it prints a log line to stdout first.
    let text = String::from_utf8_lossy(&out.stdout);
    let want: Value = serde_json::from_str(text.lines().last().unwrap_or("")).expect("json");
    assert!(
        dir.join("model.safetensors.index.json").is_file(),
        "expected shards"
    );
    let (v, code) = run_json(&["--json", "--from", "weights", &dir.display().to_string()]);
    assert_eq!(code, Some(0));
    assert_eq!(v["total_size"], want["total"]);
    assert_eq!(v["tensors"], want["tensors"]);
    assert!(v["source"]["files"].as_array().map_or(0, Vec::len) > 1);
    // The directory in auto mode is accelerate's AutoModel, exactly.
    let refs = reference(tmp.path(), &json!([{"dir": dir, "names": ["saved"]}]));
    assert_eq!(
        stdout(&run_in(tmp.path(), &["saved"], &[])),
        refs[0]["tables"][0].as_str().unwrap_or("")
    );
    // bool (1/8 byte, which makes accelerate's sizes floats), int64 at 8 bytes, fp16 counted as fp32.
    let (v, _) = run_json(&["--json", &odd.display().to_string()]);
    assert_eq!(v["total_size"], 15.0 / 8.0 + 7.0 * 8.0 + 16.0 * 4.0);
    let text = stdout(&run(&[&odd.display().to_string(), "--dtypes", "float32"]));
    // Python: round(121.875, 2) == 121.88 (an exact tie, to even).
    // The largest layer, `w`, holds no bool: an int in Python, printed without `.0`.
    assert!(
        text.contains("│float32│   64 bytes  │121.88 bytes│"),
        "{text}"
    );
}

#[test]
fn pytorch_bin_index_is_sized_by_its_config() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("bin-ckpt");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("pytorch_model.bin.index.json"),
        json!({"metadata": {"total_size": 8}, "weight_map": {"model.norm.weight": "pytorch_model-00001-of-00001.bin"}}).to_string(),
    )
    .expect("write index");
    let out = run(&[&dir.display().to_string()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("has a PyTorch .bin index but no config.json"),
        "{}",
        stderr(&out)
    );
    let config = hand_config(&tmp.path().join("cfg"));
    std::fs::copy(&config, dir.join("config.json")).expect("copy");
    let (from_bin, code) = run_json(&[
        "--json",
        &dir.join("pytorch_model.bin.index.json")
            .display()
            .to_string(),
    ]);
    assert_eq!(code, Some(0));
    let (from_config, _) = run_json(&["--json", &config.display().to_string()]);
    assert_eq!(from_bin["total_size"], from_config["total_size"]);
    assert_eq!(from_bin["source"]["kind"], "config");
}

fn run_json(args: &[&str]) -> (Value, Option<i32>) {
    let out = run(args);
    let code = out.status.code();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("not JSON ({code:?}): {}", stderr(&out)));
    (v, code)
}

/// A config whose numbers are easy by hand: P = 1000·64 + 2·(layer) + 64 parameters.
fn hand_config(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).expect("mkdir");
    let path = dir.join("config.json");
    std::fs::write(
        &path,
        json!({"model_type":"llama","vocab_size":1000,"hidden_size":64,"intermediate_size":128,
               "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2})
        .to_string(),
    )
    .expect("write");
    path
}

#[test]
fn per_gpu_strategies_match_hand_computed_values() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = hand_config(&tmp.path().join("m")).display().to_string();
    // Per layer: q 64·64, k 32·64, v 32·64, o 64·64, gate/up/down 3·128·64, two norms 2·64.
    let layer: u64 = 4096 + 2048 + 2048 + 4096 + 3 * 8192 + 128;
    // The trained model is LlamaForCausalLM: embeddings, layers, norm and the untied 1000×64
    // lm_head (Llama's tie_word_embeddings defaults to false).
    let p: f64 = (1000 * 64 + 2 * layer + 64 + 1000 * 64) as f64;
    // Parameter tensors: embeddings, 9 per layer, norm, lm_head; Adam keeps a 4-byte step each.
    let steps = 4.0 * (1 + 2 * 9 + 1 + 1) as f64;
    // The largest layer is the 1000×64 embedding, bigger than a decoder layer.
    let lp = layer.max(64_000) as f64;
    let n = 4.0;
    // Every first dimension divides by 4, so FSDP2's shards are exactly P/4; P divides by 2·4, so
    // DeepSpeed's flat buffer needs no padding, and every tensor does, so ZeRO-3's partitions are
    // exactly P/4 too. ZeRO-2's rank 0 partition (the first P/4 = 50512 elements) lies inside the
    // 64000-element embedding, whose gradient it keeps whole. ZeRO-3 keeps every tensor (all under
    // 1e5 elements) whole as well as partitioned. Adam's step: one per flat fp32 partition.
    let cases: [(&str, bool, [f64; 5]); 7] = [
        // torch DDP under bf16 autocast keeps fp32 parameters and gradients.
        ("ddp", false, [4.0 * p, 4.0 * p, 8.0 * p + steps, 0.0, 0.0]),
        (
            "zero1",
            false,
            [2.0 * p, 2.0 * p, 8.0 * p / n + 4.0, 4.0 * p / n, 0.0],
        ),
        (
            "zero2",
            false,
            [2.0 * p, 2.0 * 64000.0, 8.0 * p / n + 4.0, 4.0 * p / n, 0.0],
        ),
        (
            "zero3",
            false,
            [
                2.0 * (p / n + p),
                2.0 * p / n,
                8.0 * p / n + 4.0,
                4.0 * p / n,
                4.0 * lp,
            ],
        ),
        (
            "fsdp",
            false,
            [4.0 * p / n, 4.0 * p / n, 8.0 * p / n + steps, 0.0, 4.0 * lp],
        ),
        ("zero2", true, [2.0 * p, 2.0 * 64000.0, 0.0, 0.0, 0.0]),
        ("fsdp", true, [0.0, 0.0, 0.0, 0.0, 4.0 * lp]),
    ];
    for (strategy, offload, [w, g, o, m, gather]) in cases {
        let mut args = vec![
            "--json",
            cfg.as_str(),
            "--strategy",
            strategy,
            "--num-gpus",
            "4",
        ];
        if offload {
            args.push("--offload");
        }
        let (v, code) = run_json(&args);
        assert_eq!(code, Some(0));
        let b = &v["per_gpu"]["bytes"];
        let got = [
            b["weights"].as_f64(),
            b["gradients"].as_f64(),
            b["optimizer_states"].as_f64(),
            b["master_weights"].as_f64(),
            b["gather_buffer"].as_f64(),
        ];
        let want = [w, g, o, m, gather].map(|x| Some(x.ceil()));
        assert_eq!(got, want, "{strategy} offload={offload}");
        assert_eq!(v["per_gpu"]["setup"]["parameters"].as_f64(), Some(p));
        // DeepSpeed's default reduce_bucket_size: 5e8 bf16 elements.
        let bucket = if strategy.starts_with("zero") {
            1e9
        } else {
            0.0
        };
        assert_eq!(b["reduce_bucket"].as_f64(), Some(bucket), "{strategy}");
    }
    // fp32 DeepSpeed: 4-byte weights and gradients, and still the fp32 clone of the partition
    // (the master weights), which on one GPU is the whole model; the reduction bucket is 2 GB.
    let (v, _) = run_json(&[
        "--json",
        &cfg,
        "--strategy",
        "zero1",
        "--num-gpus",
        "1",
        "--precision",
        "fp32",
    ]);
    assert_eq!(
        v["per_gpu"]["bytes"]["master_weights"].as_f64(),
        Some(4.0 * p)
    );
    assert_eq!(
        v["per_gpu"]["bytes"]["gpu_total"].as_f64(),
        Some(20.0 * p + 4.0 + 2e9)
    );
}

/// The documented activation formula (FORMULAS), bf16, for the hand config: per layer
/// s·b·(33·h + 8.75·I), plus s·b·(11·h + 12·V) once.
fn hand_activations(b: f64, s: f64) -> f64 {
    let (h, i, l, vocab) = (64.0, 128.0, 2.0, 1000.0);
    l * (33.0 * h + 8.75 * i) * s * b + (11.0 * h + 12.0 * vocab) * s * b
}

#[test]
fn activations_fit_and_largest_batch_by_hand() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = hand_config(&tmp.path().join("m")).display().to_string();
    let layer: u64 = 4096 + 2048 + 2048 + 4096 + 3 * 8192 + 128;
    let p = (1000 * 64 + 2 * layer + 64 + 1000 * 64) as f64;
    let s = 128.0;
    let per_sample = hand_activations(1.0, s);
    // DDP under bf16 autocast also holds 16-bit copies of the linear weights: q, k, v, o and
    // the MLP's three of each layer, and the LM head.
    let linear = (2 * (4096 + 2048 + 2048 + 4096 + 3 * 8192) + 1000 * 64) as f64;
    let fixed = 16.0 * p + 4.0 * 21.0 + 2.0 * linear;
    // Budget for exactly 3 samples and a bit.
    let budget = (fixed + 3.0 * per_sample + 100.0).ceil() as u64;
    let budget_arg = budget.to_string();
    let (v, code) = run_json(&[
        "--json",
        &cfg,
        "--strategy",
        "ddp",
        "--num-gpus",
        "1",
        "--batch-size",
        "2",
        "--seq-len",
        "128",
        "--gpu-memory",
        &budget_arg,
    ]);
    assert_eq!(code, Some(0));
    assert_eq!(
        v["per_gpu"]["bytes"]["activations"].as_f64(),
        Some(hand_activations(2.0, s).ceil())
    );
    assert_eq!(
        v["per_gpu"]["bytes"]["autocast_cache"].as_f64(),
        Some(2.0 * linear)
    );
    assert_eq!(v["per_gpu"]["fits"], true);
    assert_eq!(v["per_gpu"]["largest_batch_size"], 3);
    // Batch 4 does not fit: exit status 1, and the text says so.
    let out = run(&[
        &cfg,
        "--strategy",
        "ddp",
        "--batch-size",
        "4",
        "--seq-len",
        "128",
        "--gpu-memory",
        &budget_arg,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("does NOT fit"), "{text}");
    assert!(
        text.contains("Largest micro-batch per GPU that fits: 3"),
        "{text}"
    );
    // Checkpointing: each layer's fp32 input (4·s·b·h, bf16 too), plus the larger of the end of
    // forward (embeddings, final norm, logits and loss) and one layer recomputed in full.
    let (v, _) = run_json(&[
        "--json",
        &cfg,
        "--num-gpus",
        "1",
        "--batch-size",
        "1",
        "--seq-len",
        "128",
        "--grad-checkpointing",
    ]);
    let one_layer = (33.0 * 64.0 + 8.75 * 128.0) * s;
    assert_eq!(
        v["per_gpu"]["bytes"]["activations"].as_f64(),
        Some((2.0 * 4.0 * s * 64.0 + one_layer.max((11.0 * 64.0 + 12.0 * 1000.0) * s)).ceil())
    );
}

#[test]
fn detected_gpus_give_the_count_and_memory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = hand_config(&tmp.path().join("m")).display().to_string();
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let smi = bin.join("nvidia-smi");
    std::fs::write(
        &smi,
        "#!/bin/sh\necho '0, NVIDIA H200, 143771, 570.86.15, GPU-a'\necho '1, NVIDIA H200, 143771, 570.86.15, GPU-b'\n",
    )
    .expect("write");
    std::fs::set_permissions(&smi, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let out = run_in(
        tmp.path(),
        &["--json", &cfg, "--strategy", "zero2"],
        &[("PATH", &path)],
    );
    let v: Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(v["per_gpu"]["setup"]["num_gpus"], 2);
    assert_eq!(v["per_gpu"]["gpu_memory"], 143_771u64 << 20);
    assert_eq!(v["per_gpu"]["fits"], true);
    // CUDA_VISIBLE_DEVICES narrows them, as it does for accel-launch.
    let out = run_in(
        tmp.path(),
        &["--json", &cfg, "--strategy", "zero2"],
        &[("PATH", &path), ("CUDA_VISIBLE_DEVICES", "1")],
    );
    let v: Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(v["per_gpu"]["setup"]["num_gpus"], 1);
    // Explicit flags win over detection.
    let out = run_in(
        tmp.path(),
        &["--json", &cfg, "--num-gpus", "3", "--gpu-memory", "1KB"],
        &[("PATH", &path)],
    );
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["per_gpu"]["setup"]["num_gpus"], 3);
    assert_eq!(v["per_gpu"]["gpu_memory"], 1024);
}

#[test]
fn kv_cache_is_gqa_aware_and_longest_context_fits() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = hand_config(&tmp.path().join("m")).display().to_string();
    // 2 layers · 2 KV heads · head_dim 16 · K and V · 2 bytes = 256 bytes per token.
    let (v, code) = run_json(&["--json", &cfg, "--context", "1000", "--batch-size", "2"]);
    assert_eq!(code, Some(0));
    assert_eq!(v["per_gpu"]["bytes"]["kv_cache"], 256.0 * 1000.0 * 2.0);
    // The table sizes the base model; inference serves the causal LM, with its untied 1000x64 head.
    let total = v["total_size"].as_f64().unwrap_or(0.0) + 4.0 * 64_000.0;
    assert_eq!(v["per_gpu"]["bytes"]["weights"].as_f64(), Some(total / 2.0));
    let (v, _) = run_json(&[
        "--json",
        &cfg,
        "--context",
        "1000",
        "--kv-dtype",
        "int4",
        "--dtype",
        "int8",
    ]);
    assert_eq!(v["per_gpu"]["bytes"]["kv_cache"], 64.0 * 1000.0);
    assert_eq!(v["per_gpu"]["bytes"]["weights"].as_f64(), Some(total / 4.0));
    // Room for the fp16 weights plus exactly 500 tokens.
    let budget = (total / 2.0 + 256.0 * 500.0) as u64;
    let (v, code) = run_json(&[
        "--json",
        &cfg,
        "--context",
        "501",
        "--gpu-memory",
        &budget.to_string(),
    ]);
    assert_eq!(code, Some(1));
    assert_eq!(v["per_gpu"]["fits"], false);
    assert_eq!(v["per_gpu"]["largest_context"], 500);
    // Two GPUs split both.
    let (v, _) = run_json(&["--json", &cfg, "--context", "1000", "--num-gpus", "2"]);
    assert_eq!(v["per_gpu"]["bytes"]["kv_cache"], 128.0 * 1000.0);
}

#[test]
fn clear_errors_for_bad_inputs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    // Truncated header: declares 1000 bytes, has 10.
    let mut bytes = 1000u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{\"a\":{\"dt");
    std::fs::write(t.join("cut.safetensors"), &bytes).expect("write");
    let out = run(&[&t.join("cut.safetensors").display().to_string()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("truncated safetensors header"),
        "{}",
        stderr(&out)
    );
    // Truncated data.
    let full = write_safetensors(&t.join("short.safetensors"), &[("w", "F32", vec![1000])]);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(t.join("short.safetensors"))
        .expect("open");
    f.set_len(full - 10).expect("truncate");
    let out = run(&[&t.join("short.safetensors").display().to_string()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("truncated safetensors file"),
        "{}",
        stderr(&out)
    );
    // Not safetensors: a zip (torch.save) file.
    std::fs::write(
        t.join("model.bin"),
        b"PK\x03\x04\x14\x00\x00\x00\x08\x00rest",
    )
    .expect("write");
    let out = run(&[&t.join("model.bin").display().to_string()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("is not a safetensors file"),
        "{}",
        stderr(&out)
    );
    // Index naming a missing shard.
    let dir = t.join("ckpt");
    sharded_checkpoint(&dir, 2, 1);
    std::fs::remove_file(dir.join("model-00002-of-00002.safetensors")).expect("rm");
    let out = run(&[&dir.display().to_string()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out)
            .contains("names shard `model-00002-of-00002.safetensors`, which does not exist"),
        "{}",
        stderr(&out)
    );
    // Unknown architecture: a config alone.
    std::fs::create_dir_all(t.join("mamba")).expect("mkdir");
    std::fs::write(
        t.join("mamba/config.json"),
        r#"{"model_type":"mamba","hidden_size":8}"#,
    )
    .expect("write");
    let out = run(&[&t.join("mamba").display().to_string()]);
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert!(err.contains("unknown architecture `mamba`"), "{err}");
    assert!(
        err.contains("hint: pass the model's .safetensors file"),
        "{err}"
    );
    // ...but with its safetensors it is sized from the headers.
    write_safetensors(
        &t.join("mamba/model.safetensors"),
        &[("backbone.layers.0.mixer.A_log", "F32", vec![8, 16])],
    );
    let (v, code) = run_json(&["--json", &t.join("mamba").display().to_string()]);
    assert_eq!(code, Some(0));
    assert_eq!(v["total_size"], 512);
    // KV cache without dimensions.
    let lone = t.join("lone.safetensors");
    write_safetensors(&lone, &[("w", "F32", vec![4])]);
    let out = run(&[&lone.display().to_string(), "--context", "10"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("needs the model's dimensions"),
        "{}",
        stderr(&out)
    );
    // Neither a path nor a Hub id.
    let out = run(&["./nope/x.safetensors"]);
    assert_eq!(out.status.code(), Some(3));
    // Usage errors.
    let out = run(&[&lone.display().to_string(), "--offload"]);
    assert_eq!(out.status.code(), Some(2));
}

mod hub {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    /// A loopback Hub: `/{repo}/resolve/main/{file}` from `root/{repo}/{file}`, honouring `Range`,
    /// answering 401 with `X-Error-Code: GatedRepo` for repos named `gated*` without the token.
    pub(super) struct Server {
        pub(super) url: String,
        sent: Arc<AtomicU64>,
        log: Arc<Mutex<Vec<String>>>,
    }

    pub(super) fn serve(root: PathBuf) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let sent = Arc::new(AtomicU64::new(0));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (sent2, log2) = (sent.clone(), log.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (root, sent, log) = (root.clone(), sent2.clone(), log2.clone());
                std::thread::spawn(move || handle(stream, &root, &sent, &log));
            }
        });
        Server { url, sent, log }
    }

    fn handle(
        stream: std::net::TcpStream,
        root: &Path,
        sent: &AtomicU64,
        log: &Mutex<Vec<String>>,
    ) {
        let mut reader = BufReader::new(stream.try_clone().expect("clone"));
        let mut out = stream;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            let (mut range, mut auth) = (None, None);
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
                let lower = h.to_ascii_lowercase();
                if let Some(r) = lower.strip_prefix("range: bytes=") {
                    let (a, b) = r.trim().split_once('-').unwrap_or(("0", ""));
                    range = Some((a.parse::<u64>().unwrap_or(0), b.parse::<u64>().ok()));
                }
                if lower.starts_with("authorization:") {
                    auth = h.split_once(':').map(|(_, v)| v.trim().to_string());
                }
            }
            log.lock().expect("log").push(format!("{path} {range:?}"));
            let rel = path.replacen("/resolve/main/", "/", 1);
            let file = root.join(rel.trim_start_matches('/'));
            let gated = path.contains("/gated") && auth.as_deref() != Some("Bearer sesame");
            let response: (String, Vec<u8>) = if let Some(rest) = path.strip_prefix("/moved/") {
                (
                    format!("307 Temporary Redirect\r\nLocation: /org/{rest}"),
                    Vec::new(),
                )
            } else if gated {
                (
                    "401 Unauthorized\r\nX-Error-Code: GatedRepo".into(),
                    b"gated".to_vec(),
                )
            } else if let Ok(mut f) = std::fs::File::open(&file) {
                let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                match range {
                    Some((a, b)) => {
                        let b = b.unwrap_or(len - 1).min(len - 1);
                        let mut body = vec![0; (b + 1 - a) as usize];
                        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(a)).expect("seek");
                        f.read_exact(&mut body).expect("read");
                        (
                            format!("206 Partial Content\r\nContent-Range: bytes {a}-{b}/{len}"),
                            body,
                        )
                    }
                    None => {
                        let mut body = Vec::new();
                        f.read_to_end(&mut body).expect("read");
                        ("200 OK".into(), body)
                    }
                }
            } else {
                (
                    "404 Not Found\r\nX-Error-Code: EntryNotFound".into(),
                    b"nope".to_vec(),
                )
            };
            let head = format!(
                "HTTP/1.1 {}\r\nContent-Length: {}\r\n\r\n",
                response.0,
                response.1.len()
            );
            // Counted before writing, so the count is complete once the client has its bytes.
            sent.fetch_add(response.1.len() as u64, Ordering::SeqCst);
            if out
                .write_all(head.as_bytes())
                .and_then(|_| out.write_all(&response.1))
                .is_err()
            {
                return;
            }
        }
    }

    #[test]
    fn hub_reads_only_headers_with_range_requests() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("hub");
        let repo = root.join("org/big");
        let total = sharded_checkpoint(&repo, 4, 2);
        std::fs::write(repo.join("config.json"), json!({"model_type":"llama","vocab_size":1000,"hidden_size":256,"intermediate_size":512,"num_hidden_layers":8,"num_attention_heads":4,"num_key_value_heads":1}).to_string()).expect("config");
        let on_disk: u64 = std::fs::read_dir(&repo)
            .expect("ls")
            .flatten()
            .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
            .sum();
        let server = serve(root.clone());
        let env = [("HF_ENDPOINT", server.url.as_str())];
        let out = run_in(
            tmp.path(),
            &["--json", "--from", "weights", "org/big"],
            &env,
        );
        let v: Value = serde_json::from_str(&stdout(&out)).expect("json");
        assert_eq!(v["total_size"], total);
        let sent = server.sent.load(Ordering::SeqCst);
        // Exactly config.json, the index, and each shard's 8-byte length and header.
        let mut expected = 0;
        for entry in std::fs::read_dir(&repo).expect("ls").flatten() {
            let bytes = std::fs::read(entry.path()).expect("read");
            if entry.path().extension().is_some_and(|e| e == "safetensors") {
                let mut len = [0u8; 8];
                len.copy_from_slice(&bytes[..8]);
                expected += 8 + u64::from_le_bytes(len);
            } else {
                expected += bytes.len() as u64;
            }
        }
        assert_eq!(sent, expected, "of {on_disk} bytes in the repository");
        assert!(on_disk > 100 * sent, "sent {sent} bytes of {on_disk}");
        assert_eq!(v["hub"]["bytes_received"], sent);
        let log = server.log.lock().expect("log").clone();
        let ranged = log.iter().filter(|l| l.contains(".safetensors ")).count();
        assert_eq!(ranged, 8, "{log:?}");
        assert!(
            log.iter()
                .filter(|l| l.contains(".safetensors "))
                .all(|l| l.contains("Some((")),
            "{log:?}"
        );
        // Same numbers as the local directory.
        let local: Value = serde_json::from_str(&stdout(&run(&[
            "--json",
            "--from",
            "weights",
            &repo.display().to_string(),
        ])))
        .expect("json");
        assert_eq!(local["total_size"], v["total_size"]);
        // Known family in auto mode: config.json alone, accelerate's table.
        let before = server.sent.load(Ordering::SeqCst);
        let out = run_in(tmp.path(), &["org/big"], &env);
        assert!(stdout(&out).contains("Memory Usage for loading `org/big`"));
        assert!(server.sent.load(Ordering::SeqCst) - before < 1024);
    }

    #[test]
    fn hub_reads_a_large_header_of_thousands_of_tensors() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("hub");
        let repo = root.join("org/many");
        std::fs::create_dir_all(&repo).expect("mkdir");
        let names: Vec<String> = (0..3000).map(|i| format!("blocks.{i}.weight")).collect();
        let tensors: Vec<(&str, &str, Vec<u64>)> = names
            .iter()
            .map(|n| (n.as_str(), "F16", vec![64, 64]))
            .collect();
        write_safetensors(&repo.join("model.safetensors"), &tensors);
        let server = serve(root);
        let out = run_in(
            tmp.path(),
            &["--json", "org/many"],
            &[("HF_ENDPOINT", &server.url)],
        );
        let v: Value = serde_json::from_str(&stdout(&out)).expect("json");
        assert_eq!(v["total_size"], 3000 * 64 * 64 * 4);
        assert_eq!(v["tensors"], 3000);
    }

    #[test]
    fn hub_gated_offline_and_unreachable_suggest_a_local_path() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("hub");
        let repo = root.join("org/gated-model");
        std::fs::create_dir_all(&repo).expect("mkdir");
        std::fs::write(repo.join("config.json"), json!({"model_type":"gpt2","n_embd":8,"n_layer":1,"n_head":2,"vocab_size":10,"n_positions":4}).to_string()).expect("config");
        let server = serve(root);
        let out = run_in(
            tmp.path(),
            &["org/gated-model"],
            &[("HF_ENDPOINT", &server.url)],
        );
        assert_eq!(out.status.code(), Some(3));
        let err = stderr(&out);
        assert!(err.contains("gated or private"), "{err}");
        assert!(
            err.contains("HF_TOKEN") && err.contains("local path"),
            "{err}"
        );
        // The token opens it.
        let out = run_in(
            tmp.path(),
            &["org/gated-model"],
            &[("HF_ENDPOINT", &server.url), ("HF_TOKEN", "sesame")],
        );
        assert!(stdout(&out).contains("`org/gated-model`"));
        // A renamed repository: the same-host redirect keeps the token (and, for headers, the Range).
        let out = run_in(
            tmp.path(),
            &["--json", "--from", "weights", "moved/gated-model"],
            &[("HF_ENDPOINT", &server.url), ("HF_TOKEN", "sesame")],
        );
        assert_eq!(out.status.code(), Some(3));
        assert!(
            stderr(&out).contains("`moved/gated-model` has no `model.safetensors` on the Hub"),
            "{}",
            stderr(&out)
        );
        let out = run_in(
            tmp.path(),
            &["moved/gated-model"],
            &[("HF_ENDPOINT", &server.url), ("HF_TOKEN", "sesame")],
        );
        assert!(stdout(&out).contains("`moved/gated-model`"));
        // Offline: refused before any request.
        let out = run_in(
            tmp.path(),
            &["org/gated-model"],
            &[("HF_ENDPOINT", &server.url), ("HF_HUB_OFFLINE", "1")],
        );
        assert_eq!(out.status.code(), Some(3));
        assert!(
            stderr(&out).contains("HF_HUB_OFFLINE") && stderr(&out).contains("local path"),
            "{}",
            stderr(&out)
        );
        // Offline but in huggingface_hub's download cache: read from there.
        let snapshot = tmp
            .path()
            .join("hf/hub/models--org--gated-model/snapshots/abc123");
        std::fs::create_dir_all(&snapshot).expect("mkdir");
        std::fs::create_dir_all(tmp.path().join("hf/hub/models--org--gated-model/refs"))
            .expect("mkdir");
        std::fs::write(
            tmp.path().join("hf/hub/models--org--gated-model/refs/main"),
            "abc123",
        )
        .expect("ref");
        std::fs::copy(repo.join("config.json"), snapshot.join("config.json")).expect("copy");
        let hf_home = tmp.path().join("hf").display().to_string();
        let out = run_in(
            tmp.path(),
            &["org/gated-model"],
            &[("HF_HOME", &hf_home), ("HF_HUB_OFFLINE", "1")],
        );
        assert!(stdout(&out).contains("`org/gated-model`"));
        // Unreachable endpoint.
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        let dead = format!("http://127.0.0.1:{port}");
        let out = run_in(tmp.path(), &["org/x"], &[("HF_ENDPOINT", &dead)]);
        assert_eq!(out.status.code(), Some(3));
        assert!(
            stderr(&out).contains("cannot reach the Hub") && stderr(&out).contains("local path"),
            "{}",
            stderr(&out)
        );
    }
}

/// Runs scripts/bench/estimate-vs-measured: real training steps on CPU ranks started by the built
/// accel-launch, against accel-estimate-memory's per-rank figures.
fn measured(configs: &[&Path], strategies: &[&str], precisions: &str) -> (Vec<Value>, Option<i32>) {
    measured_at(configs, strategies, precisions, "1x32", &[])
}

const MEASURED_WAIT: std::time::Duration = std::time::Duration::from_secs(420);

/// As `measured`, at the (batch x sequence) `points` given ("1x64,2x256"), with `extra` flags.
fn measured_at(
    configs: &[&Path],
    strategies: &[&str],
    precisions: &str,
    points: &str,
    extra: &[&str],
) -> (Vec<Value>, Option<i32>) {
    let estimate = bin("accel-estimate-memory");
    let bin_dir = estimate.parent().expect("bin dir");
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo().join("scripts/bench/estimate-vs-measured"))
        .args(["--json", "--check", "--ranks", "2", "--points", points])
        .args(extra)
        .args(["--precision", precisions])
        .env("ACCEL_BIN", bin_dir)
        .env("PYTHON", venv_python())
        .env("TRANSFORMERS_VERBOSITY", "error")
        .env("HF_HUB_OFFLINE", "1");
    for s in strategies {
        cmd.args(["--strategy", s]);
    }
    cmd.args(configs);
    // One launch of real ranks trains every strategy x precision x config in turn (and one more
    // the single-process setup): on a loaded 2-core machine a grid of six takes a minute or more
    // (its nextest bound is 8: .config/nextest.toml).
    let out = cmd.output_within(MEASURED_WAIT);
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "estimate-vs-measured: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (rows, out.status.code())
}

/// Tiny llama, qwen2-MoE and gpt2 configs. Uneven first dimensions (1001 rows, 175 rows) make
/// FSDP2's shards differ between 2 ranks; gpt2's odd width makes odd tensors (ZeRO-3 pads each to
/// 2 ranks) and an odd total of 45705 parameters (ZeRO-1/2 pad the flat buffer to 45708, the last
/// rank's gradients hold the padding).
fn tiny_configs(dir: &Path) -> [PathBuf; 3] {
    let llama = dir.join("llama.json");
    std::fs::write(&llama, json!({"model_type":"llama","vocab_size":1001,"hidden_size":64,"intermediate_size":175,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"max_position_embeddings":256}).to_string()).expect("write");
    let moe = dir.join("qwen2_moe.json");
    std::fs::write(&moe, json!({"model_type":"qwen2_moe","vocab_size":500,"hidden_size":32,"intermediate_size":64,"moe_intermediate_size":24,"shared_expert_intermediate_size":48,"num_experts":4,"num_experts_per_tok":2,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"max_position_embeddings":256}).to_string()).expect("write");
    let gpt2 = dir.join("gpt2.json");
    std::fs::write(&gpt2, json!({"model_type":"gpt2","vocab_size":501,"n_embd":33,"n_layer":2,"n_head":3,"n_positions":64}).to_string()).expect("write");
    [llama, moe, gpt2]
}

#[test]
fn weights_gradients_optimizer_and_master_bytes_equal_a_real_training_step() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let [llama, moe, gpt2] = tiny_configs(tmp.path());
    let (rows, code) = measured(
        &[&llama, &moe, &gpt2],
        &["single", "ddp", "fsdp"],
        "fp32,bf16",
    );
    // 3 configs x (1 single rank + 2 DDP ranks + 2 FSDP ranks) x fp32 and bf16 autocast.
    assert_eq!(rows.len(), 30, "{rows:?}");
    for r in &rows {
        for k in ["weights", "gradients", "optimizer_states", "master_weights"] {
            assert_eq!(
                r[k]["estimate"].as_f64(),
                r[k]["measured"].as_f64(),
                "{k}: {r}"
            );
        }
        assert!(
            r["weights"]["measured"].as_f64().unwrap_or(0.0) > 0.0,
            "{r}"
        );
        assert!(
            r["activations"]["measured"].as_f64().unwrap_or(0.0) > 0.0,
            "{r}"
        );
    }
    assert_eq!(code, Some(0));
    // The uneven shard: rank 1 holds fewer embedding and MLP rows, so less Adam state.
    let fsdp_llama: Vec<&Value> = rows
        .iter()
        .filter(|r| {
            r["strategy"] == "fsdp"
                && r["precision"] == "fp32"
                && r["config"]
                    .as_str()
                    .is_some_and(|c| c.ends_with("llama.json"))
        })
        .collect();
    assert_eq!(fsdp_llama.len(), 2);
    assert!(
        fsdp_llama[0]["optimizer_states"]["measured"].as_f64()
            > fsdp_llama[1]["optimizer_states"]["measured"].as_f64()
    );
    // Padding: both ranks' parameter storage is the padded chunk.
    assert_eq!(
        fsdp_llama[0]["weights"]["measured"],
        fsdp_llama[1]["weights"]["measured"]
    );
}

#[test]
fn the_trained_causal_lm_counts_its_untied_head() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (name, config) = configs()
        .into_iter()
        .find(|c| c.0 == "llama-3.1-8b")
        .expect("case");
    let path = tmp.path().join("config.json");
    std::fs::write(&path, config.to_string()).expect("write");
    let (v, code) = run_json(&["--json", &path.display().to_string(), "--strategy", "ddp"]);
    assert_eq!(code, Some(0), "{name}");
    // LlamaForCausalLM of Llama-3.1-8B: 8 030 261 248 parameters (the base model has 7 504 924 672).
    assert_eq!(v["per_gpu"]["setup"]["parameters"], 8_030_261_248u64);
    assert_eq!(v["per_gpu"]["setup"]["num_gpus"], 1);
}

#[test]
fn mla_caches_the_compressed_latent() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("dsv2");
    std::fs::create_dir_all(&dir).expect("mkdir");
    // DeepSeek-V2-Lite's attention dimensions; the family has no formula, so the weights are read
    // from the safetensors header and the dimensions from config.json.
    std::fs::write(dir.join("config.json"), json!({"model_type":"deepseek_v2","vocab_size":102400,"hidden_size":2048,"num_hidden_layers":27,"num_attention_heads":16,"num_key_value_heads":16,"kv_lora_rank":512,"qk_rope_head_dim":64,"qk_nope_head_dim":128,"v_head_dim":128,"q_lora_rank":null}).to_string()).expect("write");
    write_safetensors(&dir.join("model.safetensors"), &[("w", "BF16", vec![4, 4])]);
    let (v, code) = run_json(&["--json", &dir.display().to_string(), "--context", "8192"]);
    assert_eq!(code, Some(0));
    // 27 layers x (512 + 64) values x 8192 tokens x 2 bytes, not 2·27·16·128·8192·2.
    assert_eq!(
        v["per_gpu"]["bytes"]["kv_cache"].as_f64(),
        Some(27.0 * 576.0 * 8192.0 * 2.0)
    );
}

#[test]
fn partial_downloads_oversized_configs_and_bad_headers_are_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    // Two of nine shards, no index.
    let dir = t.join("partial");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for i in 1..=2 {
        write_safetensors(
            &dir.join(format!("model-{i:05}-of-00009.safetensors")),
            &[(&format!("w{i}"), "BF16", vec![8, 8])],
        );
    }
    let out = run(&[&dir.display().to_string()]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("holds 2 of the 9 shards"),
        "{}",
        stderr(&out)
    );
    // 4294967295 layers: refused at once, not built.
    let huge = t.join("layers.json");
    std::fs::write(&huge, json!({"model_type":"llama","vocab_size":100,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":4294967295u64,"num_attention_heads":4}).to_string()).expect("write");
    let started = std::time::Instant::now();
    let out = run(&[&huge.display().to_string()]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("num_hidden_layers"),
        "{}",
        stderr(&out)
    );
    // Generous: the unbounded build took seconds and gigabytes; a refusal takes milliseconds.
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    // hidden_size = vocab_size = 2^40 would wrap.
    let wrap = t.join("wrap.json");
    std::fs::write(&wrap, json!({"model_type":"llama","vocab_size":1u64 << 40,"hidden_size":1u64 << 40,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4}).to_string()).expect("write");
    let out = run(&["--json", &wrap.display().to_string()]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    // A header whose shape does not fit its byte range (safetensors' own validation rejects it).
    let bad = t.join("bad.safetensors");
    let header = br#"{"a":{"dtype":"F32","shape":[1000000,1000000],"data_offsets":[0,16]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    bytes.extend_from_slice(&[0u8; 16]);
    std::fs::write(&bad, bytes).expect("write");
    let out = run(&[&bad.display().to_string()]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("data_offsets [0, 16]"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn messages_name_the_right_file_and_reason() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    let missing = t.join("missing.json");
    std::fs::write(&missing, json!({"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4}).to_string()).expect("write");
    let out = run(&[&missing.display().to_string()]);
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert!(
        err.contains("missing.json") && err.contains("`vocab_size` is missing"),
        "{err}"
    );
    // Mamba: a config, but no attention heads.
    let dir = t.join("mamba");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("config.json"),
        json!({"model_type":"mamba","hidden_size":768,"num_hidden_layers":24,"vocab_size":50280})
            .to_string(),
    )
    .expect("write");
    write_safetensors(&dir.join("model.safetensors"), &[("w", "F32", vec![4])]);
    let out = run(&[&dir.display().to_string(), "--context", "100"]);
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert!(!err.contains("has no config.json"), "{err}");
    assert!(err.contains("model_type `mamba`"), "{err}");
    // Llava: the language model's dimensions sit under text_config.
    let dir = t.join("llava");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("config.json"), json!({"model_type":"llava","text_config":{"model_type":"llama","vocab_size":1000,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2},"vision_config":{"model_type":"clip_vision_model"}}).to_string()).expect("write");
    write_safetensors(&dir.join("model.safetensors"), &[("w", "F32", vec![4])]);
    let (v, code) = run_json(&["--json", &dir.display().to_string(), "--context", "100"]);
    assert_eq!(code, Some(0));
    // 2 layers x 2 KV heads x head_dim 16 x K and V x 100 tokens x 2 bytes.
    assert_eq!(
        v["per_gpu"]["bytes"]["kv_cache"],
        2.0 * 2.0 * 16.0 * 2.0 * 100.0 * 2.0
    );
}

#[test]
fn the_hub_token_file_from_hf_auth_login_is_sent() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("hub");
    let repo = root.join("org/gated-model");
    std::fs::create_dir_all(&repo).expect("mkdir");
    std::fs::write(repo.join("config.json"), json!({"model_type":"gpt2","n_embd":8,"n_layer":1,"n_head":2,"vocab_size":10,"n_positions":4}).to_string()).expect("config");
    let server = hub::serve(root);
    let hf_home = tmp.path().join("hf");
    std::fs::create_dir_all(&hf_home).expect("mkdir");
    std::fs::write(hf_home.join("token"), "sesame\n").expect("token");
    let home = hf_home.display().to_string();
    let out = run_in(
        tmp.path(),
        &["org/gated-model"],
        &[("HF_ENDPOINT", &server.url), ("HF_HOME", &home)],
    );
    assert!(stdout(&out).contains("`org/gated-model`"));
    // HF_TOKEN comes first.
    let out = run_in(
        tmp.path(),
        &["org/gated-model"],
        &[
            ("HF_ENDPOINT", &server.url),
            ("HF_HOME", &home),
            ("HF_TOKEN", "wrong"),
        ],
    );
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn inference_weights_count_the_head_and_quantized_layers_as_stored() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("m");
    let cfg = hand_config(&dir).display().to_string();
    // fp16 weights of LlamaForCausalLM: embeddings, 2 layers, norm, untied lm_head, and the rotary
    // buffers (2 x 8 floats).
    let layer: f64 = (4096 + 2048 + 2048 + 4096 + 3 * 8192 + 128) as f64;
    let fp16 = 2.0 * (64_000.0 + 2.0 * layer + 64.0 + 64_000.0 + 16.0);
    let (v, code) = run_json(&["--json", &cfg, "--context", "10", "--num-gpus", "1"]);
    assert_eq!(code, Some(0));
    assert_eq!(v["per_gpu"]["bytes"]["weights"].as_f64(), Some(fp16));
    // GPTQ 4-bit, groups of 32 input rows: each linear [out, in] stores out.in/2 bytes of packed
    // weights, ceil(in/32).out fp16 scales and 4-bit zeros, and an int32 g_idx per input row.
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg).expect("read")).expect("json");
    config["quantization_config"] = json!({"quant_method": "gptq", "bits": 4, "group_size": 32});
    std::fs::write(&cfg, config.to_string()).expect("write");
    let linears: [(f64, f64); 7] = [
        (64.0, 64.0),
        (32.0, 64.0),
        (32.0, 64.0),
        (64.0, 64.0),
        (128.0, 64.0),
        (128.0, 64.0),
        (64.0, 128.0),
    ];
    let gptq: f64 = linears
        .iter()
        .map(|(out, inp)| out * inp / 2.0 + (inp / 32.0).ceil() * out * 2.5 + 4.0 * inp)
        .sum::<f64>()
        * 2.0;
    let unquantized = 2.0 * (64_000.0 + 2.0 * 128.0 + 64.0 + 64_000.0 + 16.0);
    let (v, code) = run_json(&["--json", &cfg, "--context", "10", "--num-gpus", "1"]);
    assert_eq!(code, Some(0));
    assert_eq!(
        v["per_gpu"]["bytes"]["weights"].as_f64(),
        Some(gptq + unquantized)
    );
    // From headers: packed I32 keeps its stored size (it was halved as if fp32); F16 scales
    // follow --dtype.
    let st_dir = tmp.path().join("gptq");
    hand_config(&st_dir);
    write_safetensors(
        &st_dir.join("model.safetensors"),
        &[
            ("model.layers.0.mlp.down_proj.qweight", "I32", vec![16, 64]),
            ("model.layers.0.mlp.down_proj.scales", "F16", vec![4, 64]),
        ],
    );
    let (v, code) = run_json(&[
        "--json",
        "--from",
        "weights",
        &st_dir.display().to_string(),
        "--context",
        "10",
        "--num-gpus",
        "1",
    ]);
    assert_eq!(code, Some(0));
    assert_eq!(
        v["per_gpu"]["bytes"]["weights"].as_f64(),
        Some(16.0 * 64.0 * 4.0 + 4.0 * 64.0 * 2.0)
    );
}

/// Runs tests/estimate_trained_reference.py: the trained or served model as transformers builds
/// it on the meta device (through its own quantizer where that runs without GPU kernels).
fn trained_reference(dir: &Path, jobs: &Value) -> Vec<Value> {
    run_reference(
        &repo().join("tests/estimate_trained_reference.py"),
        &dir.join("trained-jobs.json"),
        jobs,
    )
}

/// Multimodal and Gemma 3 configs, tiny but with every optional part exercised.
fn multimodal_configs() -> Vec<(&'static str, &'static str, Value)> {
    let clip = json!({"model_type":"clip_vision_model","hidden_size":32,"intermediate_size":64,"num_hidden_layers":2,"num_attention_heads":4,"image_size":56,"patch_size":14});
    let siglip = json!({"model_type":"siglip_vision_model","hidden_size":32,"intermediate_size":64,"num_hidden_layers":2,"num_attention_heads":4,"image_size":56,"patch_size":14});
    let llama = json!({"model_type":"llama","vocab_size":1000,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2});
    let it = "AutoModelForImageTextToText";
    vec![
        (
            // Both attention types (pattern 2), tied embeddings (Gemma3Config's default), the
            // SigLIP pooling head.
            "gemma3",
            it,
            json!({"model_type":"gemma3","text_config":{"model_type":"gemma3_text","vocab_size":1000,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"sliding_window_pattern":2},"vision_config":siglip,"mm_tokens_per_image":4}),
        ),
        (
            // Only sliding layers, untied, no pooling head (Gemma 3's real vision config).
            "gemma3-untied",
            it,
            json!({"model_type":"gemma3","tie_word_embeddings":false,"text_config":{"model_type":"gemma3_text","vocab_size":1000,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":3,"num_attention_heads":4,"num_key_value_heads":1,"head_dim":16,"layer_types":["sliding_attention","sliding_attention","sliding_attention"]},"vision_config":{"model_type":"siglip_vision_model","hidden_size":32,"intermediate_size":64,"num_hidden_layers":1,"num_attention_heads":4,"image_size":56,"patch_size":14,"vision_use_head":false},"mm_tokens_per_image":4}),
        ),
        (
            "gemma3-text",
            "AutoModelForCausalLM",
            json!({"model_type":"gemma3_text","vocab_size":1000,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":7,"num_attention_heads":4,"num_key_value_heads":1,"head_dim":32}),
        ),
        (
            // Two feature layers feed the projector.
            "llava",
            it,
            json!({"model_type":"llava","text_config":llama,"vision_config":clip,"vision_feature_layer":[-2,-1]}),
        ),
        (
            // A SigLIP tower, a Qwen2 that ties in its text_config, no projector bias.
            "llava-siglip-qwen2",
            it,
            json!({"model_type":"llava","text_config":{"model_type":"qwen2","vocab_size":1000,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"tie_word_embeddings":true},"vision_config":{"model_type":"siglip_vision_model","hidden_size":32,"intermediate_size":64,"num_hidden_layers":2,"num_attention_heads":4,"image_size":56,"patch_size":14,"vision_use_head":false},"multimodal_projector_bias":false}),
        ),
        (
            // Llava-1.5-7B's shape by defaults alone: CLIP ViT-L/336 and a Llama-2-7B text
            // config that names only its vocabulary, as the Hub config does.
            "llava-1.5-7b",
            it,
            json!({"model_type":"llava","text_config":{"model_type":"llama","vocab_size":32064,"max_position_embeddings":4096}}),
        ),
        (
            "qwen2-vl",
            it,
            json!({"model_type":"qwen2_vl","text_config":{"model_type":"qwen2_vl_text","vocab_size":1000,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"rope_scaling":{"type":"mrope","mrope_section":[2,3,3]}},"vision_config":{"depth":2,"embed_dim":32,"hidden_size":64,"num_heads":4,"mlp_ratio":2,"patch_size":14,"spatial_merge_size":2,"temporal_patch_size":2}}),
        ),
        (
            // The Hub's flat layout: the language model's keys at the top level.
            "qwen2-vl-flat",
            it,
            json!({"model_type":"qwen2_vl","vocab_size":1000,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"tie_word_embeddings":true,"rope_scaling":{"type":"mrope","mrope_section":[2,3,3]},"vision_config":{"depth":1,"embed_dim":32,"hidden_size":64,"num_heads":4,"mlp_ratio":3}}),
        ),
        (
            "qwen2.5-vl",
            it,
            json!({"model_type":"qwen2_5_vl","text_config":{"model_type":"qwen2_5_vl_text","vocab_size":1000,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"rope_scaling":{"type":"mrope","mrope_section":[2,3,3]}},"vision_config":{"depth":2,"hidden_size":32,"intermediate_size":48,"out_hidden_size":64,"num_heads":4,"patch_size":14,"spatial_merge_size":2,"temporal_patch_size":2,"fullatt_block_indexes":[1]}}),
        ),
    ]
}

#[test]
fn multimodal_models_match_transformers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cases = multimodal_configs();
    let mut jobs = Vec::new();
    let mut trained_jobs = Vec::new();
    for (name, class, config) in &cases {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("config.json"), config.to_string()).expect("write config");
        jobs.push(json!({"dir": dir, "names": [dir.join("config.json")]}));
        trained_jobs.push(json!({"config": dir, "class": class, "dtype": "float16"}));
    }
    let tables = reference(tmp.path(), &Value::Array(jobs));
    let trained = trained_reference(tmp.path(), &Value::Array(trained_jobs));
    for (((name, _, _), table), model) in cases.iter().zip(&tables).zip(&trained) {
        let config = tmp.path().join(name).join("config.json");
        let config = config.display().to_string();
        // accelerate's table: the base model (vision tower, projector, language model).
        assert_eq!(
            stdout(&run(&[&config])),
            table["tables"][0].as_str().unwrap_or(""),
            "{name}: table"
        );
        let (v, code) = run_json(&["--json", &config]);
        assert_eq!(code, Some(0), "{name}");
        assert_eq!(v["total_size"], table["total"], "{name}: total");
        assert_eq!(
            v["largest_layer"], table["largest_layer"],
            "{name}: largest layer"
        );
        // Training: the parameters of *ForConditionalGeneration (or ForCausalLM).
        let (v, code) = run_json(&["--json", &config, "--strategy", "ddp"]);
        assert_eq!(code, Some(0), "{name}");
        assert_eq!(
            v["per_gpu"]["setup"]["parameters"], model["parameters"],
            "{name}: trained parameters of {}",
            model["class"]
        );
        // Serving in float16: every tensor of that model, the vision tower included.
        let (v, code) = run_json(&["--json", &config, "--context", "1", "--num-gpus", "1"]);
        assert_eq!(code, Some(0), "{name}");
        assert_eq!(
            v["per_gpu"]["bytes"]["weights"].as_f64(),
            model["weight_bytes"].as_f64(),
            "{name}: float16 weights"
        );
    }
    // --context reads the attention dimensions under text_config, for a config.json alone and
    // for a directory with it: Llava's 2 layers x 2 KV heads x head_dim 16 x K and V x 100
    // tokens x 2 bytes; Gemma 3's the same with its head_dim 16.
    for name in ["llava", "gemma3"] {
        let dir = tmp.path().join(name);
        for target in [dir.clone(), dir.join("config.json")] {
            let (v, code) =
                run_json(&["--json", &target.display().to_string(), "--context", "100"]);
            assert_eq!(code, Some(0), "{name}");
            assert_eq!(
                v["per_gpu"]["bytes"]["kv_cache"].as_f64(),
                Some(2.0 * 2.0 * 16.0 * 2.0 * 100.0 * 2.0),
                "{name}"
            );
        }
    }
    // The trained Llava-1.5-7B (LlavaForConditionalGeneration, Vicuna's 32064-token vocabulary):
    // 7 063 427 072 parameters, the untied 32064 x 4096 LM head included.
    let llava = cases
        .iter()
        .position(|c| c.0 == "llava-1.5-7b")
        .expect("case");
    assert_eq!(trained[llava]["parameters"], 7_063_427_072u64);
}

#[test]
fn unknown_families_and_parts_are_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    for (file, config, named) in [
        (
            "idefics3.json",
            json!({"model_type":"idefics3"}),
            "unknown architecture `idefics3`",
        ),
        (
            "llava-mamba.json",
            json!({"model_type":"llava","text_config":{"model_type":"mamba"}}),
            "unknown architecture `llava` with text_config `mamba`",
        ),
        (
            "llava-dinov2.json",
            json!({"model_type":"llava","text_config":{"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2},"vision_config":{"model_type":"dinov2"}}),
            "unknown architecture `llava` with vision_config `dinov2`",
        ),
    ] {
        let path = t.join(file);
        std::fs::write(&path, config.to_string()).expect("write");
        let out = run(&[&path.display().to_string()]);
        assert_eq!(out.status.code(), Some(3), "{file}");
        let err = stderr(&out);
        assert!(err.contains(named), "{err}");
        // The hint names every family with a formula, the multimodal ones included.
        let families = err
            .lines()
            .find_map(|l| l.strip_prefix("  hint: architectures with formulas: "))
            .unwrap_or_else(|| panic!("no list of families: {err}"));
        for family in [
            "llama",
            "gemma3",
            "gemma3_text",
            "llava",
            "qwen2_vl",
            "qwen2_5_vl",
        ] {
            assert!(
                families.split(", ").any(|f| f == family),
                "{family} in {families}"
            );
        }
    }
}

/// A served tiny Llama (`hand_config`) with `quantization` added to its config.json: the weights
/// row of `--context 1` in float16.
fn quantized_weights(dir: &Path, quantization: &Value) -> f64 {
    let cfg = hand_config(dir);
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg).expect("read")).expect("json");
    config["quantization_config"] = quantization.clone();
    std::fs::write(&cfg, config.to_string()).expect("write");
    let (v, code) = run_json(&[
        "--json",
        &cfg.display().to_string(),
        "--context",
        "1",
        "--num-gpus",
        "1",
    ]);
    assert_eq!(code, Some(0), "{quantization}");
    v["per_gpu"]["bytes"]["weights"]
        .as_f64()
        .expect("weights bytes")
}

#[test]
fn quantized_weight_bytes_by_hand_for_every_scheme() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // hand_config's linear layers per decoder layer, [out, in]: q, k, v, o, gate, up, down.
    let linears: [(f64, f64); 7] = [
        (64.0, 64.0),
        (32.0, 64.0),
        (32.0, 64.0),
        (64.0, 64.0),
        (128.0, 64.0),
        (128.0, 64.0),
        (64.0, 128.0),
    ];
    // What stays in float16: embeddings 1000 x 64, the untied LM head 1000 x 64, 2 x 2 norms and
    // the final one of 64, the rotary buffers 2 x 8.
    let kept = 2.0 * (64_000.0 + 64_000.0 + 4.0 * 64.0 + 64.0 + 16.0);
    let sum = |per: &dyn Fn(f64, f64) -> f64| -> f64 {
        2.0 * linears.iter().map(|&(o, i)| per(o, i)).sum::<f64>()
    };
    let mut n = 0;
    let mut check = |quantization: Value, expected: f64| {
        n += 1;
        let got = quantized_weights(&tmp.path().join(format!("q{n}")), &quantization);
        assert_eq!(got, expected, "{quantization}");
    };
    // bitsandbytes 4-bit, nf4 and fp4 alike: two weights per byte, an fp32 absmax per 64
    // weights, the 16-entry fp32 quant map (QuantState.from_dict of a pre-quantized checkpoint).
    let nf4 = sum(&|o, i| o * i / 2.0 + 4.0 * (o * i / 64.0).ceil() + 64.0);
    for quant_type in ["nf4", "fp4"] {
        check(
            json!({"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_quant_type":quant_type}),
            kept + nf4,
        );
    }
    // Double quantization in bfloat16 storage: 4 weights per 2-byte element, the absmax in
    // 8 bits per 64 weights plus an fp32 one per 256 blocks, the 256-entry fp32 nested quant
    // map, the fp32 offset, and the quant map.
    check(
        json!({"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_use_double_quant":true,"bnb_4bit_quant_storage":"bfloat16"}),
        kept + sum(&|o, i| {
            let blocks = (o * i / 64.0).ceil();
            (o * i / 4.0) * 2.0 + blocks + 4.0 * (blocks / 256.0).ceil() + 1024.0 + 4.0 + 64.0
        }),
    );
    // LLM.int8(): a byte per weight and an fp32 SCB per output row.
    check(
        json!({"quant_method":"bitsandbytes","load_in_8bit":true}),
        kept + sum(&|o, i| o * i + 4.0 * o),
    );
    // A skip list (suffixes or paths from the root) replaces transformers' default one: the
    // MLPs stay in float16, and the LM head, no longer skipped, is converted (64 000 bytes plus
    // 1000 row scales, not 128 000).
    check(
        json!({"quant_method":"bitsandbytes","load_in_8bit":true,"llm_int8_skip_modules":["gate_proj","up_proj","model.layers.0.mlp.down_proj","model.layers.1.mlp"]}),
        kept - 128_000.0
            + 64_000.0
            + 4000.0
            + 2.0
                * linears[..4]
                    .iter()
                    .map(|&(o, i)| o * i + 4.0 * o)
                    .sum::<f64>()
            + 2.0 * linears[4..].iter().map(|&(o, i)| 2.0 * o * i).sum::<f64>(),
    );
    // GPTQ: bits/8 bytes per weight packed in int32, per group of input rows and output column
    // an fp16 scale and a bits-wide zero point, an int32 g_idx per input row (desc_act does
    // not change what is stored); group_size -1 is one group.
    for (bits, group, groups_of) in [
        (2.0, json!(32), 32.0),
        (3.0, json!(-1), f64::INFINITY),
        (8.0, json!(64), 64.0),
    ] {
        check(
            json!({"quant_method":"gptq","bits":bits as u64,"group_size":group,"desc_act":true,"sym":false}),
            kept + sum(&|o, i| {
                let groups = if groups_of == f64::INFINITY {
                    1.0
                } else {
                    (i / groups_of).ceil()
                };
                o * i * bits / 8.0 + groups * o * (2.0 + bits / 8.0) + 4.0 * i
            }),
        );
    }
    // AWQ (GEMM): packed weights, scales and zeros per group, no g_idx.
    check(
        json!({"quant_method":"awq","bits":4,"group_size":64,"version":"gemm","zero_point":true}),
        kept + sum(&|o, i| o * i / 2.0 + (i / 64.0).ceil() * o * 2.5),
    );
    // FBGEMM FP8: a byte per weight, an fp32 scale per output row, the fp32 input_scale_ub.
    check(
        json!({"quant_method":"fbgemm_fp8","activation_scale_ub":1200.0}),
        kept + sum(&|o, i| o * i + 4.0 * o + 4.0),
    );
}

#[test]
fn fp8_weight_bytes_equal_transformers_quantizer() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let llama = json!({"model_type":"llama","vocab_size":1000,"hidden_size":64,"intermediate_size":176,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"tie_word_embeddings":false});
    let mut cases: Vec<(&str, Value, &str)> = [
        // FineGrainedFP8Config's default 128 x 128 blocks.
        ("default", json!({"quant_method":"fp8"})),
        // Blocks that do not divide the shapes (176 rows, 64 columns).
        (
            "blocks",
            json!({"quant_method":"fp8","weight_block_size":[32,48]}),
        ),
        // One scale per tensor, and a static activation scale.
        (
            "per-tensor",
            json!({"quant_method":"fp8","weight_block_size":null,"activation_scheme":"static"}),
        ),
        // One-byte ue8m0 scales and a skip list (which then converts the LM head).
        (
            "ue8m0-skip",
            json!({"quant_method":"fp8","weight_block_size":[48,40],"scale_fmt":"ue8m0","modules_to_not_convert":["down_proj","model.layers.1.self_attn"]}),
        ),
    ]
    .into_iter()
    .map(|(name, q)| {
        let mut config = llama.clone();
        config["quantization_config"] = q;
        (name, config, "AutoModelForCausalLM")
    })
    .collect();
    // Multimodal: the vision tower's and projector's linear layers are converted too, but not
    // SigLIP's pooling-head attention (torch's MultiheadAttention).
    for (name, _, config) in multimodal_configs() {
        if matches!(name, "gemma3" | "llava" | "qwen2.5-vl") {
            let mut config = config.clone();
            config["quantization_config"] =
                json!({"quant_method":"fp8","weight_block_size":[16,16]});
            cases.push((name, config, "AutoModelForImageTextToText"));
        }
    }
    let mut jobs = Vec::new();
    for (name, config, class) in &cases {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("config.json"), config.to_string()).expect("write");
        jobs.push(json!({"config": dir, "class": class, "dtype": "float16"}));
    }
    let refs = trained_reference(tmp.path(), &Value::Array(jobs));
    for ((name, _, _), r) in cases.iter().zip(&refs) {
        let dir = tmp.path().join(name).display().to_string();
        let (v, code) = run_json(&["--json", &dir, "--context", "1", "--num-gpus", "1"]);
        assert_eq!(code, Some(0), "{name}");
        assert_eq!(
            v["per_gpu"]["bytes"]["weights"].as_f64(),
            r["weight_bytes"].as_f64(),
            "{name}"
        );
    }
}

#[test]
fn deepspeed_zero1_zero2_and_zero3_bytes_equal_a_real_training_step() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let [llama, moe, gpt2] = tiny_configs(tmp.path());
    let (rows, code) = measured(
        &[&llama, &moe, &gpt2],
        &["zero1", "zero2", "zero3"],
        "fp32,bf16",
    );
    // 3 configs x 3 stages x 2 precisions x 2 ranks.
    assert_eq!(rows.len(), 36, "{rows:?}");
    for r in &rows {
        for k in [
            "weights",
            "gradients",
            "optimizer_states",
            "master_weights",
            "reduce_bucket",
        ] {
            assert_eq!(
                r[k]["estimate"].as_f64(),
                r[k]["measured"].as_f64(),
                "{k}: {r}"
            );
            assert!(r[k]["measured"].as_f64().unwrap_or(0.0) > 0.0, "{k}: {r}");
        }
    }
    assert_eq!(code, Some(0));
    let row = |strategy: &str, precision: &str, config: &str, rank: u64| {
        rows.iter()
            .find(|r| {
                r["strategy"] == strategy
                    && r["precision"] == precision
                    && r["rank"] == rank
                    && r["config"].as_str().is_some_and(|c| c.ends_with(config))
            })
            .unwrap_or_else(|| panic!("{strategy} {precision} {config} {rank}"))
    };
    let bytes = |r: &Value, k: &str| r[k]["measured"].as_f64().unwrap_or(0.0);
    // The fp32 clone of the partition exists in fp32 training too: as large as Adam's one moment.
    let z1 = row("zero1", "fp32", "llama.json", 0);
    assert_eq!(
        2.0 * bytes(z1, "master_weights") + 4.0,
        bytes(z1, "optimizer_states")
    );
    // ZeRO-1 holds every gradient until the end of backward; ZeRO-2 only those of the parameters
    // its partition overlaps, which differ between the ranks.
    let z2 = [0, 1].map(|r| row("zero2", "bf16", "llama.json", r));
    assert!(bytes(z2[0], "gradients") < bytes(row("zero1", "bf16", "llama.json", 0), "gradients"));
    assert_ne!(bytes(z2[0], "gradients"), bytes(z2[1], "gradients"));
    // ZeRO-3 keeps the small (persistent) parameters whole as well as partitioned: more than the
    // partitions alone (its gradients).
    let z3 = row("zero3", "bf16", "llama.json", 0);
    assert!(bytes(z3, "weights") > bytes(z3, "gradients"));
}

/// The error of an estimate against a measurement, as a fraction of the measurement.
fn rel_error(r: &Value, k: &str) -> f64 {
    let (e, m) = (
        r[k]["estimate"].as_f64().unwrap_or(0.0),
        r[k]["measured"].as_f64().unwrap_or(0.0),
    );
    (e - m) / m
}

/// Issue 25 item 6: T5ForConditionalGeneration ties both stacks' `embed_tokens` and its LM head
/// to `shared`, so the model trained (and served) holds the embedding once, while accelerate's
/// table keeps sizing its untied empty model.
#[test]
fn t5_trains_and_serves_its_shared_embedding_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cases = [
        (
            "t5-base",
            json!({"model_type":"t5","vocab_size":32128,"d_model":768,"d_kv":64,"d_ff":3072,"num_layers":12,"num_heads":12,"feed_forward_proj":"relu"}),
        ),
        (
            // T5 v1.1's `tie_word_embeddings: false` no longer unties the head in transformers 5.
            "flan-t5-small",
            json!({"model_type":"t5","vocab_size":32128,"d_model":512,"d_kv":64,"d_ff":1024,"num_layers":8,"num_decoder_layers":8,"num_heads":6,"feed_forward_proj":"gated-gelu","tie_word_embeddings":false}),
        ),
    ];
    let mut jobs = Vec::new();
    let mut trained_jobs = Vec::new();
    for (name, config) in &cases {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("config.json"), config.to_string()).expect("write");
        jobs.push(json!({"dir": dir, "names": [dir.join("config.json")]}));
        trained_jobs
            .push(json!({"config": dir, "class": "AutoModelForSeq2SeqLM", "dtype": "float16"}));
    }
    let tables = reference(tmp.path(), &Value::Array(jobs));
    let trained = trained_reference(tmp.path(), &Value::Array(trained_jobs));
    for (((name, _), table), model) in cases.iter().zip(&tables).zip(&trained) {
        let config = tmp.path().join(name).join("config.json");
        let config = config.display().to_string();
        assert_eq!(model["class"], "T5ForConditionalGeneration");
        // The table stays accelerate's: its empty model counts `shared` and both copies.
        assert_eq!(
            stdout(&run(&[&config])),
            table["tables"][0].as_str().unwrap_or(""),
            "{name}: table"
        );
        let (v, code) = run_json(&["--json", &config, "--strategy", "ddp"]);
        assert_eq!(code, Some(0), "{name}");
        assert_eq!(v["total_size"], table["total"], "{name}");
        assert_eq!(
            v["per_gpu"]["setup"]["parameters"], model["parameters"],
            "{name}: trained parameters"
        );
        assert_eq!(v["trained_parameters"], model["parameters"], "{name}");
        // DDP holds fp32 weights: 4 bytes per trained parameter.
        assert_eq!(
            v["per_gpu"]["bytes"]["weights"].as_f64(),
            model["parameters"].as_f64().map(|p| 4.0 * p),
            "{name}"
        );
        let (v, code) = run_json(&["--json", &config, "--context", "1"]);
        assert_eq!(code, Some(0), "{name}");
        assert_eq!(
            v["per_gpu"]["bytes"]["weights"].as_f64(),
            model["weight_bytes"].as_f64(),
            "{name}: float16 weights served"
        );
    }
    assert_eq!(trained[0]["parameters"], 222_903_552u64);
}

/// Tiny T5 (SDPA, dropout 0.1 as t5-small), Gemma-2 (eager; attention width 96 beside hidden
/// 64) and Llama run with `attn_implementation: eager` from its config.
fn attention_configs(dir: &Path) -> [PathBuf; 3] {
    let t5 = dir.join("t5.json");
    std::fs::write(&t5, json!({"model_type":"t5","vocab_size":1000,"d_model":64,"d_kv":16,"d_ff":128,"num_layers":2,"num_heads":4,"feed_forward_proj":"relu","decoder_start_token_id":0}).to_string()).expect("write");
    let gemma2 = dir.join("gemma2.json");
    std::fs::write(&gemma2, json!({"model_type":"gemma2","vocab_size":1000,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":24}).to_string()).expect("write");
    let llama = dir.join("llama_eager.json");
    std::fs::write(&llama, json!({"model_type":"llama","vocab_size":1000,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"attn_implementation":"eager"}).to_string()).expect("write");
    [t5, gemma2, llama]
}

/// Issue 25 items 6 and 7: activations of T5 (its S x S relative position bias and
/// cross-attention) and of eager attention (Gemma-2, which transformers never runs with SDPA;
/// Llama when its config asks), against a real training step, up to sequences where the S x S
/// terms weigh most; the exact components of T5 are those of its tied model.
#[test]
fn t5_and_eager_attention_activations_follow_a_real_training_step() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let [t5, gemma2, llama] = attention_configs(tmp.path());
    let (rows, code) = measured_at(
        &[&t5, &gemma2, &llama],
        &["single"],
        "fp32,bf16",
        "1x64,2x256",
        &[],
    );
    // 3 configs x 2 precisions x 2 points.
    assert_eq!(rows.len(), 12, "{rows:?}");
    for r in &rows {
        for k in ["weights", "gradients", "optimizer_states"] {
            assert_eq!(
                r[k]["estimate"].as_f64(),
                r[k]["measured"].as_f64(),
                "{k}: {r}"
            );
        }
        let config = r["config"].as_str().unwrap_or("");
        let expected = if config.ends_with("t5.json") {
            "sdpa"
        } else {
            "eager"
        };
        assert_eq!(r["attn_implementation"], expected, "{r}");
        let e = rel_error(r, "activations");
        assert!(e.abs() <= 0.06, "activations off by {:.1}%: {r}", 100.0 * e);
    }
    assert_eq!(code, Some(0));
}

/// Issue 25 item 7: the verdict and the largest micro-batch follow the activations. With a GPU
/// budget that a real Gemma-2 training step (eager attention, fp32, 256 tokens) fills at six
/// samples, the estimate's largest micro-batch is six, give or take one.
#[test]
fn gemma2_largest_micro_batch_matches_what_is_measured() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let [_, gemma2, _] = attention_configs(tmp.path());
    let (rows, code) = measured_at(&[&gemma2], &["single"], "fp32", "1x256,2x256", &[]);
    assert_eq!(code, Some(0));
    assert_eq!(rows.len(), 2, "{rows:?}");
    let m = |r: &Value, k: &str| r[k]["measured"].as_f64().unwrap_or(0.0);
    let fixed = m(&rows[0], "weights") + m(&rows[0], "gradients") + m(&rows[0], "optimizer_states");
    let (a1, a2) = (m(&rows[0], "activations"), m(&rows[1], "activations"));
    // Measured: fixed + a1 + (b - 1)(a2 - a1); the budget fits b = 6 with half a sample to spare.
    let budget = fixed + a1 + 5.5 * (a2 - a1);
    let (v, code) = run_json(&[
        "--json",
        &gemma2.display().to_string(),
        "--strategy",
        "ddp",
        "--num-gpus",
        "1",
        "--precision",
        "fp32",
        "--batch-size",
        "1",
        "--seq-len",
        "256",
        "--gpu-memory",
        &format!("{}", budget as u64),
    ]);
    assert_eq!(code, Some(0));
    let largest = v["per_gpu"]["largest_batch_size"].as_u64().unwrap_or(0);
    assert!(
        (5..=7).contains(&largest),
        "largest micro-batch {largest}: {v}"
    );
    // And the verdict at that batch and one past it.
    let at = |b: u64| {
        run(&[
            &gemma2.display().to_string(),
            "--strategy",
            "ddp",
            "--num-gpus",
            "1",
            "--precision",
            "fp32",
            "--batch-size",
            &b.to_string(),
            "--seq-len",
            "256",
            "--gpu-memory",
            &format!("{}", budget as u64),
        ])
        .status
        .code()
    };
    assert_eq!(at(largest), Some(0));
    assert_eq!(at(largest + 1), Some(1));
}

/// Issue 25 item 7: the attention implementation comes from config.json or the flag, and one the
/// family does not support is refused as transformers refuses it.
#[test]
fn attention_implementation_from_config_or_flag() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let [t5, gemma2, llama] = attention_configs(tmp.path());
    let act = |config: &Path, extra: &[&str]| {
        let mut args = vec![
            "--json".to_string(),
            config.display().to_string(),
            "--batch-size".into(),
            "1".into(),
            "--seq-len".into(),
            "1024".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (v, code) = run_json(&args);
        assert_eq!(code, Some(0), "{v}");
        (
            v["per_gpu"]["bytes"]["activations"].as_f64().unwrap_or(0.0),
            v["per_gpu"]["setup"]["attn_implementation"].clone(),
        )
    };
    // Gemma-2 runs eager; flash attention keeps no S x S probabilities, so less.
    let (eager, name) = act(&gemma2, &[]);
    assert_eq!(name, "eager");
    let (flash, name) = act(&gemma2, &["--attn-implementation", "flash_attention_2"]);
    assert_eq!(name, "flash_attention_2");
    assert!(flash < eager, "{flash} {eager}");
    // Llama's config asks for eager; the flag overrides it.
    let (eager, name) = act(&llama, &[]);
    assert_eq!(name, "eager");
    let (sdpa, name) = act(&llama, &["--attn-implementation", "sdpa"]);
    assert_eq!(name, "sdpa");
    assert!(sdpa < eager);
    // Unsupported: Gemma-2 has no SDPA, T5 no flash attention.
    let out = run(&[
        &gemma2.display().to_string(),
        "--seq-len",
        "8",
        "--attn-implementation",
        "sdpa",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--attn-implementation: gemma2 does not support `sdpa`"),
        "{}",
        stderr(&out)
    );
    let out = run(&[
        &t5.display().to_string(),
        "--seq-len",
        "8",
        "--attn-implementation",
        "flash_attention_2",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let bad = tmp.path().join("gemma2-sdpa.json");
    std::fs::write(&bad, json!({"model_type":"gemma2","vocab_size":1000,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"attn_implementation":"sdpa"}).to_string()).expect("write");
    let out = run(&[&bad.display().to_string()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("gemma2-sdpa.json")
            && stderr(&out).contains("`attn_implementation`: gemma2 does not support `sdpa`"),
        "{}",
        stderr(&out)
    );
}

/// Issue 25 item 8: what transformers refuses (its config classes' `validate_architecture`, or
/// its modelling code dividing by zero) is refused, naming the key; what it builds is sized as
/// it builds it.
#[test]
fn configs_transformers_rejects_are_refused_naming_the_key() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let llama = json!({"model_type":"llama","vocab_size":1000,"hidden_size":4096,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":32,"num_key_value_heads":8});
    let with = |base: &Value, changes: Value| {
        let mut v = base.clone();
        for (k, x) in changes.as_object().expect("object") {
            v[k] = x.clone();
        }
        v
    };
    let refused = [
        (
            "llama-heads0",
            with(&llama, json!({"num_attention_heads":0})),
            "`num_attention_heads` is 0",
        ),
        (
            "llama-heads31",
            with(
                &llama,
                json!({"num_attention_heads":31,"num_key_value_heads":31}),
            ),
            "`hidden_size` (4096) is not a multiple of `num_attention_heads` (31)",
        ),
        (
            "llama-kv0",
            with(&llama, json!({"num_key_value_heads":0})),
            "`num_key_value_heads` is 0",
        ),
        (
            "gemma2-heads31",
            with(
                &llama,
                json!({"model_type":"gemma2","num_attention_heads":31,"num_key_value_heads":31}),
            ),
            "`hidden_size` (4096) is not a multiple of `num_attention_heads` (31)",
        ),
        (
            "gemma2-layer-types",
            with(
                &llama,
                json!({"model_type":"gemma2","layer_types":["full_attention","sliding_attention"]}),
            ),
            "`layer_types` has 2 entries but `num_hidden_layers` is 1",
        ),
        (
            "mixtral-heads0",
            with(
                &llama,
                json!({"model_type":"mixtral","num_attention_heads":0}),
            ),
            "`num_attention_heads` is 0",
        ),
        (
            "gpt2-heads",
            json!({"model_type":"gpt2","vocab_size":1000,"n_embd":4096,"n_layer":1,"n_head":31}),
            "`n_embd` (4096) is not a multiple of `n_head` (31)",
        ),
        (
            "gpt-neox-heads",
            json!({"model_type":"gpt_neox","vocab_size":1000,"hidden_size":4096,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":31}),
            "`hidden_size` (4096) is not a multiple of `num_attention_heads` (31)",
        ),
        (
            "bert-heads",
            json!({"model_type":"bert","vocab_size":1000,"hidden_size":4096,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":31}),
            "`hidden_size` (4096) is not a multiple of `num_attention_heads` (31)",
        ),
        (
            "t5-proj",
            json!({"model_type":"t5","vocab_size":1000,"d_model":64,"d_ff":128,"num_layers":1,"num_heads":4,"feed_forward_proj":"gated-gelu-new"}),
            "`feed_forward_proj` is `gated-gelu-new`",
        ),
    ];
    // Built by transformers: a width that is not whole heads where head_dim is derived by floor
    // division (Mistral, Qwen2), grouped-query attention with whole groups.
    let accepted = [
        (
            "mistral-heads31",
            with(
                &llama,
                json!({"model_type":"mistral","num_attention_heads":31,"num_key_value_heads":31}),
            ),
        ),
        (
            "qwen2-heads31",
            with(
                &llama,
                json!({"model_type":"qwen2","num_attention_heads":31,"num_key_value_heads":31}),
            ),
        ),
        ("llama-kv4", with(&llama, json!({"num_key_value_heads":4}))),
    ];
    let mut jobs = Vec::new();
    for (name, config) in refused
        .iter()
        .map(|(n, c, _)| (n, c))
        .chain(accepted.iter().map(|(n, c)| (n, c)))
    {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("config.json"), config.to_string()).expect("write");
        jobs.push(json!({"config": dir, "class": "AutoModel", "dtype": "float32", "catch": true}));
    }
    let transformers = trained_reference(tmp.path(), &Value::Array(jobs));
    for ((name, _, key), t) in refused.iter().zip(&transformers) {
        assert!(
            t.get("error").is_some(),
            "{name}: transformers built it: {t}"
        );
        let config = tmp.path().join(name).join("config.json");
        let out = run(&[&config.display().to_string()]);
        assert_eq!(out.status.code(), Some(3), "{name}: {}", stdout(&out));
        let err = stderr(&out);
        assert!(
            err.contains(key) && err.contains("config.json"),
            "{name}: {err}\n(transformers: {t})"
        );
    }
    for ((name, _), t) in accepted.iter().zip(&transformers[refused.len()..]) {
        assert!(t.get("error").is_none(), "{name}: {t}");
        let config = tmp.path().join(name).join("config.json");
        let (v, code) = run_json(&["--json", &config.display().to_string()]);
        assert_eq!(code, Some(0), "{name}");
        assert_eq!(v["parameters"], t["parameters"], "{name}");
    }
    // Grouped-query attention with a remainder builds in transformers but cannot run: refused.
    let dir = tmp.path().join("llama-kv3");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("config.json"),
        with(&llama, json!({"num_key_value_heads":3})).to_string(),
    )
    .expect("write");
    let out = run(&[&dir.display().to_string()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out)
            .contains("`num_attention_heads` (32) is not a multiple of `num_key_value_heads` (3)"),
        "{}",
        stderr(&out)
    );
}

/// Issue 25 item 8: a config.json without `model_type` takes its family from `architectures`,
/// for every model class transformers maps to one of the families with a formula.
#[test]
fn the_family_comes_from_architectures_without_model_type() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let families: Vec<&str> = vec![
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "gemma",
        "gemma2",
        "gemma3_text",
        "phi3",
        "gpt2",
        "gpt_neox",
        "bert",
        "t5",
        "gemma3",
        "llava",
        "qwen2_vl",
        "qwen2_5_vl",
    ];
    let classes = trained_reference(
        tmp.path(),
        &json!([{"classes": true, "families": families}]),
    );
    let classes = classes[0]["classes"].as_object().expect("classes");
    assert!(classes.len() > 80, "{classes:?}");
    for (class, family) in classes {
        let family = family.as_str().unwrap_or("");
        let path = tmp.path().join(format!("{class}.json"));
        // Dimensions every family reads; the multimodal ones take their parts' defaults.
        std::fs::write(&path, json!({"architectures":[class],"vocab_size":100,"hidden_size":32,"n_embd":32,"d_model":32,"intermediate_size":64,"num_hidden_layers":1,"n_layer":1,"num_layers":1,"num_attention_heads":4,"n_head":4,"num_heads":4,"num_key_value_heads":2}).to_string()).expect("write");
        let (v, code) = run_json(&["--json", &path.display().to_string()]);
        assert_eq!(code, Some(0), "{class}");
        assert_eq!(v["source"]["model_type"], family, "{class}");
    }
    // A class with no formula is named; so is a config that names no family at all.
    let path = tmp.path().join("mamba.json");
    std::fs::write(
        &path,
        json!({"architectures":["MambaForCausalLM"],"hidden_size":8}).to_string(),
    )
    .expect("write");
    let out = run(&[&path.display().to_string()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("unknown architecture `MambaForCausalLM`"),
        "{}",
        stderr(&out)
    );
    let path = tmp.path().join("none.json");
    std::fs::write(&path, json!({"hidden_size":8}).to_string()).expect("write");
    let out = run(&[&path.display().to_string()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("names neither `model_type` nor `architectures`"),
        "{}",
        stderr(&out)
    );
}

/// Issue 25 item 9: an index whose weight_map is empty is an error, not an empty model.
#[test]
fn an_index_with_an_empty_weight_map_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("empty");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        json!({"metadata":{"total_size":0},"weight_map":{}}).to_string(),
    )
    .expect("write");
    for target in [dir.clone(), dir.join("model.safetensors.index.json")] {
        let out = run(&[&target.display().to_string()]);
        assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
        assert!(
            stderr(&out).contains("model.safetensors.index.json")
                && stderr(&out).contains("`weight_map` is empty"),
            "{}",
            stderr(&out)
        );
    }
}

/// Issue 25 item 9: HF_TOKEN_PATH names the token file, as huggingface_hub reads it (`~` and
/// variables expanded); HUGGING_FACE_HUB_TOKEN stands in for HF_TOKEN.
#[test]
fn hf_token_path_and_the_older_token_variable_are_honoured() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("hub");
    let repo = root.join("org/gated-model");
    std::fs::create_dir_all(&repo).expect("mkdir");
    std::fs::write(repo.join("config.json"), json!({"model_type":"gpt2","n_embd":8,"n_layer":1,"n_head":2,"vocab_size":10,"n_positions":4}).to_string()).expect("config");
    let server = hub::serve(root);
    let secrets = tmp.path().join("secrets");
    std::fs::create_dir_all(&secrets).expect("mkdir");
    std::fs::write(secrets.join("hf-token"), "sesame\r\n").expect("token");
    // HF_HOME holds a wrong token: HF_TOKEN_PATH takes precedence over it.
    let hf_home = tmp.path().join("hf");
    std::fs::create_dir_all(&hf_home).expect("mkdir");
    std::fs::write(hf_home.join("token"), "wrong\n").expect("token");
    let home = hf_home.display().to_string();
    let dir = tmp.path().display().to_string();
    for path in [
        "$SECRETS/hf-token",
        "${SECRETS}/hf-token",
        "~/secrets/hf-token",
    ] {
        let out = run_in(
            tmp.path(),
            &["org/gated-model"],
            &[
                ("HF_ENDPOINT", &server.url),
                ("HF_HOME", &home),
                ("HOME", &dir),
                ("SECRETS", &secrets.display().to_string()),
                ("HF_TOKEN_PATH", path),
            ],
        );
        assert!(stdout(&out).contains("`org/gated-model`"), "{path}");
    }
    let out = run_in(
        tmp.path(),
        &["org/gated-model"],
        &[
            ("HF_ENDPOINT", &server.url),
            ("HF_HOME", &home),
            ("HUGGING_FACE_HUB_TOKEN", "sesame"),
        ],
    );
    assert!(stdout(&out).contains("`org/gated-model`"));
}

/// Issue 25 item 9: the top-level JSON names what it counts: `parameters` the tensors of
/// `total_size` (accelerate's model), `trained_parameters` the model trained.
#[test]
fn json_parameters_agree_with_total_size_and_trained_parameters_are_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (name, config) = configs()
        .into_iter()
        .find(|c| c.0 == "llama-3.1-8b")
        .expect("case");
    let path = tmp.path().join("config.json");
    std::fs::write(&path, config.to_string()).expect("write");
    let (v, code) = run_json(&["--json", &path.display().to_string()]);
    assert_eq!(code, Some(0), "{name}");
    // LlamaModel of Llama-3.1-8B: 7 504 924 672 fp32 parameters, plus 64 rotary frequencies (two
    // float32 buffers of 64) in total_size.
    assert_eq!(v["parameters"], 7_504_924_672u64);
    assert_eq!(
        v["total_size"].as_f64(),
        Some(4.0 * 7_504_924_672.0 + 2.0 * 64.0 * 4.0)
    );
    assert_eq!(v["trained_parameters"], 8_030_261_248u64);
}

/// Issue 25 item 9: a config.json that is there but describes no attention (Mamba) is named for
/// what it lacks, without the hint to add a config.json.
#[test]
fn a_state_space_model_is_told_it_has_no_kv_cache() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("mamba");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("config.json"), json!({"model_type":"mamba","hidden_size":768,"num_hidden_layers":24,"vocab_size":50280,"state_size":16}).to_string()).expect("write");
    write_safetensors(&dir.join("model.safetensors"), &[("w", "F32", vec![4])]);
    let out = run(&[&dir.display().to_string(), "--context", "100"]);
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert!(!err.contains("put the model's config.json"), "{err}");
    assert!(!err.contains("hidden size"), "{err}");
    assert!(
        err.contains("names no attention heads")
            && err.contains("state-space model keeps no KV cache"),
        "{err}"
    );
    // Without a config.json the hint to add one stays.
    let lone = tmp.path().join("lone");
    std::fs::create_dir_all(&lone).expect("mkdir");
    write_safetensors(&lone.join("model.safetensors"), &[("w", "F32", vec![4])]);
    let out = run(&[&lone.display().to_string(), "--context", "100"]);
    assert!(
        stderr(&out).contains("put the model's config.json"),
        "{}",
        stderr(&out)
    );
}

/// Issue 41 item 5: an activation transformers' ACT2FN lacks (`hidden_act`, T5's
/// `feed_forward_proj`, the towers' and projector's keys) makes its modelling code raise: refused,
/// naming the file and the key; what it builds — learnable activations (PReLU's weight, xIELU's
/// alphas), a Mixtral without experts (its routers and empty experts, no dense MLP), a
/// Qwen2-MoE without experts (dense) — is sized as it builds it.
#[test]
fn activations_transformers_lacks_are_refused_and_what_it_builds_is_sized() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // Every size given: the families' own defaults are not what is tested here.
    let small = json!({"vocab_size":100,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":4});
    let with = |base: &Value, changes: Value| {
        let mut v = base.clone();
        for (k, x) in changes.as_object().expect("object") {
            v[k] = x.clone();
        }
        v
    };
    let t5 = json!({"model_type":"t5","vocab_size":100,"d_model":64,"d_ff":128,"num_layers":2,"num_heads":4});
    let clip = json!({"model_type":"clip_vision_model","num_hidden_layers":1,"hidden_size":32,"intermediate_size":64,"num_attention_heads":2});
    let refused = [
        (
            "llama-act",
            with(&small, json!({"model_type":"llama","hidden_act":"nope"})),
            "`hidden_act` is `nope`",
        ),
        (
            "llama-act-number",
            with(&small, json!({"model_type":"llama","hidden_act":5})),
            "`hidden_act` is not a string",
        ),
        (
            "gemma2-act",
            with(
                &small,
                json!({"model_type":"gemma2","hidden_activation":"nope"}),
            ),
            "`hidden_activation` is `nope`",
        ),
        (
            "gpt2-act",
            json!({"model_type":"gpt2","n_layer":1,"n_embd":64,"n_head":4,"activation_function":"nope"}),
            "`activation_function` is `nope`",
        ),
        (
            "t5-gated-nope",
            with(&t5, json!({"feed_forward_proj":"gated-nope"})),
            "`feed_forward_proj` is `gated-nope`",
        ),
        (
            "t5-nope",
            with(&t5, json!({"feed_forward_proj":"nope"})),
            "`feed_forward_proj` is `nope`",
        ),
        (
            "llava-projector",
            json!({"model_type":"llava","projector_hidden_act":"nope","text_config":with(&small, json!({"model_type":"llama"})),"vision_config":clip}),
            "`projector_hidden_act` is `nope`",
        ),
        (
            "llava-vision",
            json!({"model_type":"llava","text_config":with(&small, json!({"model_type":"llama"})),"vision_config":with(&clip, json!({"hidden_act":"nope"}))}),
            "(vision_config)`: invalid model config: `hidden_act` is `nope`",
        ),
        (
            "qwen2-vl-vision",
            with(
                &small,
                json!({"model_type":"qwen2_vl","vision_config":{"hidden_act":"nope","depth":1,"embed_dim":32,"num_heads":2,"hidden_size":64}}),
            ),
            "(vision_config)`: invalid model config: `hidden_act` is `nope`",
        ),
    ];
    let accepted = [
        // The issue's: MixtralSparseMoeBlock whatever `num_local_experts`, so 1.47 B, not the
        // 7.11 B of a dense MLP.
        (
            "mixtral-experts0",
            json!({"model_type":"mixtral","num_local_experts":0,"vocab_size":32000,"hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8}),
        ),
        (
            "qwen2-moe-experts0",
            with(&small, json!({"model_type":"qwen2_moe","num_experts":0})),
        ),
        (
            "llama-prelu",
            with(&small, json!({"model_type":"llama","hidden_act":"prelu"})),
        ),
        (
            "llama-xielu",
            with(&small, json!({"model_type":"llama","hidden_act":"xielu"})),
        ),
        (
            "mixtral-prelu",
            with(
                &small,
                json!({"model_type":"mixtral","hidden_act":"prelu","num_local_experts":2}),
            ),
        ),
        (
            "qwen2-moe-prelu",
            with(
                &small,
                json!({"model_type":"qwen2_moe","hidden_act":"prelu","num_experts":2,"moe_intermediate_size":8,"shared_expert_intermediate_size":8}),
            ),
        ),
        // Gemma 2 reads `hidden_activation`; a `hidden_act` beside it is not used.
        (
            "gemma2-prelu",
            with(
                &small,
                json!({"model_type":"gemma2","hidden_activation":"prelu","hidden_act":"nope"}),
            ),
        ),
        (
            "gpt2-prelu",
            json!({"model_type":"gpt2","n_layer":2,"n_embd":64,"n_head":4,"activation_function":"prelu"}),
        ),
        (
            "gpt-neox-prelu",
            with(
                &small,
                json!({"model_type":"gpt_neox","hidden_act":"prelu"}),
            ),
        ),
        (
            "bert-prelu",
            with(&small, json!({"model_type":"bert","hidden_act":"prelu"})),
        ),
        (
            "t5-gated-prelu",
            with(&t5, json!({"feed_forward_proj":"gated-prelu"})),
        ),
        ("t5-prelu", with(&t5, json!({"feed_forward_proj":"prelu"}))),
        (
            "llava-prelu",
            json!({"model_type":"llava","projector_hidden_act":"prelu","text_config":with(&small, json!({"model_type":"llama"})),"vision_config":with(&clip, json!({"hidden_act":"prelu"}))}),
        ),
        (
            "gemma3-prelu",
            json!({"model_type":"gemma3","text_config":with(&small, json!({"model_type":"gemma3_text","hidden_activation":"prelu"})),"vision_config":{"model_type":"siglip_vision_model","hidden_act":"prelu","num_hidden_layers":1,"hidden_size":32,"intermediate_size":64,"num_attention_heads":2}}),
        ),
        (
            "qwen2-vl-prelu",
            with(
                &small,
                json!({"model_type":"qwen2_vl","hidden_act":"prelu","vision_config":{"hidden_act":"prelu","depth":1,"embed_dim":32,"num_heads":2,"hidden_size":64}}),
            ),
        ),
        (
            "qwen2-5-vl-prelu",
            with(
                &small,
                json!({"model_type":"qwen2_5_vl","vision_config":{"hidden_act":"prelu","depth":1,"hidden_size":32,"num_heads":2,"out_hidden_size":64,"intermediate_size":16}}),
            ),
        ),
    ];
    let mut jobs = Vec::new();
    for (name, config) in refused
        .iter()
        .map(|(n, c, _)| (n, c))
        .chain(accepted.iter().map(|(n, c)| (n, c)))
    {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("config.json"), config.to_string()).expect("write");
        jobs.push(json!({"config": dir, "class": "AutoModel", "dtype": "float32", "catch": true}));
    }
    let transformers = trained_reference(tmp.path(), &Value::Array(jobs));
    for ((name, _, key), t) in refused.iter().zip(&transformers) {
        assert!(
            t.get("error").is_some(),
            "{name}: transformers built it: {t}"
        );
        let config = tmp.path().join(name).join("config.json");
        let out = run(&[&config.display().to_string()]);
        assert_eq!(out.status.code(), Some(3), "{name}: {}", stdout(&out));
        let err = stderr(&out);
        assert!(
            err.contains(key) && err.contains(&config.display().to_string()),
            "{name}: {err}\n(transformers: {t})"
        );
    }
    for ((name, _), t) in accepted.iter().zip(&transformers[refused.len()..]) {
        assert!(t.get("error").is_none(), "{name}: {t}");
        let config = tmp.path().join(name).join("config.json");
        let (v, code) = run_json(&["--json", &config.display().to_string()]);
        assert_eq!(code, Some(0), "{name}: {v}");
        // T5Model ties both stacks' embed_tokens to `shared`, which accelerate's untied empty
        // model (`parameters`) counts three times; the trained model counts it once.
        let ours = if name.starts_with("t5") {
            "trained_parameters"
        } else {
            "parameters"
        };
        assert_eq!(v[ours], t["parameters"], "{name}");
    }
    assert_eq!(transformers[refused.len()]["parameters"], 1_473_515_520u64);
}
