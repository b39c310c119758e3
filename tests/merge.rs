//! accel-merge-weights against genuine checkpoints written by the venv's torch (2 gloo CPU ranks for
//! FSDP2 and FSDP1), compared bit for bit with torch's own `dcp_to_torch_save` by tests/merge/check.py.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

const BIN: &str = env!("CARGO_BIN_EXE_accel-merge-weights");
const HERE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/merge");

fn python() -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python"));
    assert!(p.exists(), "the test venv is missing: {}", p.display());
    p
}

fn root() -> &'static Path {
    static ROOT: OnceLock<tempfile::TempDir> = OnceLock::new();
    ROOT.get_or_init(|| tempfile::tempdir().expect("tempdir"))
        .path()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn py(args: &[&str]) -> Output {
    let out = Command::new(python())
        .args(args)
        .env("PORT", free_port().to_string())
        .env("PYTHONWARNINGS", "ignore")
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A checkpoint of `kind` made once per test run by make_dcp.py (or make_zero.py for `zero*`).
fn fixture(kind: &'static str) -> PathBuf {
    static MADE: Mutex<Vec<(&'static str, PathBuf)>> = Mutex::new(Vec::new());
    static LOCKS: OnceLock<Vec<(&'static str, Mutex<()>)>> = OnceLock::new();
    let locks = LOCKS.get_or_init(|| {
        [
            "fsdp2", "fsdp1", "accel", "plain", "complex", "stformat", "zero2", "zero3", "zero1",
        ]
        .into_iter()
        .map(|k| (k, Mutex::new(())))
        .collect()
    });
    let lock = &locks
        .iter()
        .find(|(k, _)| *k == kind)
        .expect("known kind")
        .1;
    let _guard = lock.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = MADE.lock().unwrap().iter().find(|(k, _)| *k == kind) {
        return p.clone();
    }
    let dir = root().join(format!("fixture-{kind}"));
    let script = if kind.starts_with("zero") {
        format!("{HERE}/make_zero.py")
    } else {
        format!("{HERE}/make_dcp.py")
    };
    py(&[&script, kind, dir.to_str().unwrap()]);
    MADE.lock().unwrap().push((kind, dir.clone()));
    dir
}

fn merge(args: &[&Path], flags: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .args(flags)
        .env("ACCEL_NO_PROGRESS", "1")
        .output()
        .expect("run accel-merge-weights")
}

fn ok(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "merge failed: {err}");
    err
}

fn check(ckpt: &Path, out: &Path, extra: &[&str]) {
    let mut args = vec![
        format!("{HERE}/check.py"),
        ckpt.display().to_string(),
        out.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = py(&args);
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with("ok "),
        "{o:?}"
    );
}

fn out_dir(name: &str) -> PathBuf {
    let d = root().join(format!("out-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A private copy of a fixture, for tests that damage or delete it.
fn copy_of(kind: &'static str, name: &str) -> PathBuf {
    let src = fixture(kind);
    let dst = root().join(format!("copy-{name}"));
    let _ = std::fs::remove_dir_all(&dst);
    std::fs::create_dir_all(&dst).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        assert!(e.file_type().unwrap().is_file());
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
    dst
}

#[test]
fn fsdp2_two_ranks_matches_dcp_to_torch_save() {
    let ckpt = fixture("fsdp2");
    let out = out_dir("fsdp2");
    let err = ok(&merge(&[&ckpt, &out], &[]));
    assert!(err.contains("merged 11 tensors"), "{err}");
    assert!(err.contains("left out top-level keys: optim"), "{err}");
    check(&ckpt, &out, &[]);
}

#[test]
fn fsdp1_sharded_state_dict_matches_dcp_to_torch_save() {
    let ckpt = fixture("fsdp1");
    let out = out_dir("fsdp1");
    ok(&merge(&[&ckpt, &out], &[]));
    check(&ckpt, &out, &[]);
    let bin = out_dir("fsdp1-bin");
    ok(&merge(&[&ckpt, &bin], &["--unsafe_serialization"]));
    assert!(bin.join("pytorch_model.bin").is_file());
    check(&ckpt, &bin, &["--bin"]);
}

#[test]
fn optimizer_state_is_selected_by_key() {
    let ckpt = fixture("fsdp2");
    let out = out_dir("optim");
    let err = ok(&merge(&[&ckpt, &out], &["--key", "optim"]));
    assert!(
        err.contains("skipped"),
        "param_groups are non-tensor items: {err}"
    );
    check(&ckpt, &out, &["--key", "optim"]);
    let all = out_dir("all");
    ok(&merge(&[&ckpt, &all], &["--all-keys", "--dtype", "bf16"]));
    check(&ckpt, &all, &["--all", "--dtype", "bf16"]);
}

#[test]
fn accelerate_save_state_layout() {
    let ckpt = fixture("accel");
    let out = out_dir("accel");
    // The save_state directory itself: the model is read from pytorch_model_fsdp_0/.
    let err = ok(&merge(&[&ckpt, &out], &[]));
    assert!(err.contains("pytorch_model_fsdp_0"), "{err}");
    check(&ckpt.join("pytorch_model_fsdp_0"), &out, &[]);
    // The optimizer directory holds nested state: .bin keeps it (as flat dotted names).
    let opt = out_dir("accel-opt");
    ok(&merge(
        &[&ckpt.join("optimizer_0"), &opt],
        &["--unsafe-serialization"],
    ));
    check(&ckpt.join("optimizer_0"), &opt, &["--bin"]);
}

#[test]
fn mixed_dtypes_views_zero_size_and_nested_names() {
    let ckpt = fixture("plain");
    let out = out_dir("plain");
    let err = ok(&merge(&[&ckpt, &out], &[]));
    assert!(err.contains("skipped 1 non-tensor items"), "{err}");
    check(&ckpt, &out, &[]);
    for dtype in ["fp16", "bf16", "fp32"] {
        let o = out_dir(&format!("plain-{dtype}"));
        ok(&merge(
            &[&ckpt, &o],
            &["--dtype", dtype, "--strip-prefix", "layers."],
        ));
        check(&ckpt, &o, &["--dtype", dtype, "--strip", "layers."]);
    }
    let bin = out_dir("plain-bin");
    ok(&merge(
        &[&ckpt, &bin],
        &["--unsafe_serialization", "--dtype", "bf16"],
    ));
    check(&ckpt, &bin, &["--bin", "--dtype", "bf16"]);
}

#[test]
fn include_bytes_keeps_non_tensor_items_as_their_torch_save_bytes() {
    let ckpt = fixture("plain");
    let out = out_dir("plain-bytes");
    let err = ok(&merge(&[&ckpt, &out], &["--include-bytes"]));
    assert!(!err.contains("skipped"), "{err}");
    // The bytes item `model.note` = "hello" comes back through torch.load of its stored bytes.
    let code = "import io, sys, torch; from safetensors.torch import load_file\n\
         t = load_file(sys.argv[1] + '/model.safetensors')\n\
         assert t['note'].dtype == torch.uint8 and t['note'].dim() == 1, t['note']\n\
         v = torch.load(io.BytesIO(t['note'].numpy().tobytes()), weights_only=True)\n\
         assert v == 'hello', v\n\
         assert t['step'].item() == 7\n\
         print('ok')";
    let o = py(&["-c", code, &out.display().to_string()]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "ok", "{o:?}");
}

#[test]
fn dcp_safetensors_serialization_is_read() {
    // torch's own FileSystemReader cannot read this format; compare with the saved originals.
    let ckpt = fixture("stformat");
    let out = out_dir("stformat");
    ok(&merge(&[&ckpt, &out], &[]));
    let reference = ckpt.join("reference.pt");
    check(&ckpt, &out, &["--reference", reference.to_str().unwrap()]);
}

#[test]
fn sharded_output_with_index_loads_with_transformers() {
    let ckpt = fixture("fsdp2");
    let out = out_dir("shards");
    ok(&merge(&[&ckpt, &out], &["--max-shard-size", "100B"]));
    assert!(out.join("model.safetensors.index.json").is_file());
    assert!(
        out.join("model-00001-of-00004.safetensors").is_file(),
        "{:?}",
        std::fs::read_dir(&out).unwrap().collect::<Vec<_>>()
    );
    assert!(!out.join("model.safetensors").exists());
    check(&ckpt, &out, &[]);
    let bin = out_dir("shards-bin");
    ok(&merge(
        &[&ckpt, &bin],
        &["--max_shard_size", "100", "--unsafe_serialization"],
    ));
    assert!(bin.join("pytorch_model.bin.index.json").is_file());
    check(&ckpt, &bin, &["--bin"]);
}

#[test]
fn inspect_json_lists_tensors_and_chunks() {
    let ckpt = fixture("fsdp2");
    let out = merge(&[&ckpt], &["--inspect", "--json"]);
    ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["format"], "DCP");
    assert_eq!(v["unwrapped_key"], "model");
    let tensors = v["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), 11);
    let emb = tensors.iter().find(|t| t["name"] == "emb.weight").unwrap();
    assert_eq!(emb["shape"], serde_json::json!([7, 5]));
    assert_eq!(emb["chunks"], 2);
    assert_eq!(emb["bytes"], 140);
    assert_eq!(v["total"]["tensors"], 11);
    let text = merge(&[&ckpt], &["--inspect"]);
    let s = String::from_utf8_lossy(&text.stdout);
    assert!(
        s.contains("bf.weight") && s.contains("BF16") && s.contains("11 tensors"),
        "{s}"
    );
}

#[test]
fn existing_output_needs_force() {
    let ckpt = fixture("plain");
    let out = out_dir("force");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("model.safetensors"), b"keep me").unwrap();
    let o = merge(&[&ckpt, &out], &[]);
    assert_eq!(o.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&o.stderr).contains("already exists"));
    assert_eq!(
        std::fs::read(out.join("model.safetensors")).unwrap(),
        b"keep me"
    );
    assert_eq!(
        std::fs::read_dir(&out).unwrap().count(),
        1,
        "nothing else was written"
    );
    ok(&merge(&[&ckpt, &out], &["--force"]));
    check(&ckpt, &out, &[]);
}

#[test]
fn remove_checkpoint_dir_after_verified_write() {
    let ckpt = copy_of("plain", "remove");
    let out = out_dir("remove");
    ok(&merge(&[&ckpt, &out], &["--remove_checkpoint_dir"]));
    assert!(!ckpt.exists());
    assert!(out.join("model.safetensors").is_file());
    // An output inside the checkpoint would be deleted with it: refused before anything is written.
    let ckpt = copy_of("plain", "remove-inside");
    let inside = ckpt.join("sub").join("out");
    let o = merge(&[&ckpt, &inside], &["--remove_checkpoint_dir"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(ckpt.join(".metadata").exists() && !ckpt.join("sub").exists());
    // A failed merge leaves the input alone.
    let ckpt = copy_of("plain", "remove-fail");
    std::fs::write(ckpt.join("__0_0.distcp"), b"").unwrap();
    let out = out_dir("remove-fail");
    assert!(!merge(&[&ckpt, &out], &["--remove-checkpoint-dir"])
        .status
        .success());
    assert!(ckpt.join(".metadata").exists());
}

#[test]
fn hf_reference_files_are_copied() {
    let ckpt = fixture("plain");
    let hf = root().join("hf-ref");
    std::fs::create_dir_all(&hf).unwrap();
    std::fs::write(hf.join("config.json"), b"{\"model_type\": \"x\"}").unwrap();
    std::fs::write(hf.join("tokenizer.json"), b"{}").unwrap();
    std::fs::write(hf.join("model.safetensors"), b"not copied").unwrap();
    let out = out_dir("hf");
    ok(&merge(
        &[&ckpt, &out],
        &["--hf-reference", hf.to_str().unwrap()],
    ));
    assert_eq!(
        std::fs::read(out.join("config.json")).unwrap(),
        b"{\"model_type\": \"x\"}"
    );
    assert!(out.join("tokenizer.json").is_file());
    check(&ckpt, &out, &[]);
}

/// Runs a merge expected to fail with `code` and a message containing `needle`, and checks that no
/// output directory was left behind.
fn fails(ckpt: &Path, code: i32, needle: &str) -> String {
    let out = out_dir(&format!(
        "fail-{}",
        ckpt.file_name().unwrap().to_string_lossy()
    ));
    let o = merge(&[ckpt, &out], &[]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert!(err.contains(needle), "expected `{needle}` in: {err}");
    assert!(!out.exists(), "partial output left in {}", out.display());
    err
}

#[test]
fn error_not_a_directory_and_no_metadata() {
    let file = root().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    fails(&file, 3, "is not a directory");
    let ckpt = copy_of("fsdp2", "nometa");
    std::fs::remove_file(ckpt.join(".metadata")).unwrap();
    let err = fails(&ckpt, 3, "no `.metadata`");
    assert!(err.contains("hint:"), "{err}");
    let empty = root().join("empty-dir");
    std::fs::create_dir_all(&empty).unwrap();
    fails(&empty, 3, "is empty");
}

#[test]
fn error_missing_and_truncated_shards() {
    let ckpt = copy_of("fsdp2", "missing");
    std::fs::remove_file(ckpt.join("__1_0.distcp")).unwrap();
    fails(&ckpt, 3, "__1_0.distcp");
    let ckpt = copy_of("fsdp2", "trunc");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(ckpt.join("__1_0.distcp"))
        .unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len - 100).unwrap();
    let err = fails(&ckpt, 3, "__1_0.distcp");
    assert!(err.contains("truncated"), "{err}");
}

#[test]
fn error_offsets_out_of_range() {
    let ckpt = copy_of("fsdp2", "oob");
    py(&[
        &format!("{HERE}/mutate.py"),
        "offset_oob",
        ckpt.to_str().unwrap(),
    ]);
    fails(&ckpt, 3, "out of range");
}

#[test]
fn error_chunks_that_do_not_cover() {
    let ckpt = copy_of("fsdp2", "gap");
    py(&[
        &format!("{HERE}/mutate.py"),
        "drop_chunk",
        ckpt.to_str().unwrap(),
    ]);
    fails(
        &ckpt,
        3,
        "do not cover it exactly: the chunks cover 20 of 35",
    );
    let ckpt = copy_of("fsdp2", "overlap");
    py(&[
        &format!("{HERE}/mutate.py"),
        "overlap",
        ckpt.to_str().unwrap(),
    ]);
    fails(&ckpt, 3, "overlap");
}

#[test]
fn error_unsupported_dtype() {
    fails(&fixture("complex"), 3, "complex64");
}

#[test]
fn error_malicious_pickle_is_never_executed() {
    let ckpt = copy_of("plain", "evil");
    py(&[&format!("{HERE}/mutate.py"), "evil", ckpt.to_str().unwrap()]);
    fails(&ckpt, 3, "never contains");
    assert!(!ckpt.join("PWNED").exists());
}

#[test]
fn error_disk_full_leaves_nothing() {
    use std::os::unix::process::CommandExt;
    let ckpt = fixture("fsdp2");
    let out = out_dir("full");
    let mut cmd = Command::new(BIN);
    cmd.arg(&ckpt).arg(&out).env("ACCEL_NO_PROGRESS", "1");
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            // Writes past 64 bytes fail (EFBIG) instead of killing the process.
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: 64,
                rlim_max: 64,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
            Ok(())
        });
    }
    let o = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(err.contains("cannot write"), "{err}");
    assert!(!out.exists(), "partial output left behind");
}

#[test]
fn accelerate_flag_spellings() {
    let o = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    for flag in [
        "--unsafe_serialization",
        "--remove_checkpoint_dir",
        "--max_shard_size",
        "--hf_reference",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help");
    }
    let o = Command::new(BIN).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}

fn zero_matches_reference(kind: &'static str) {
    let ckpt = fixture(kind);
    let out = out_dir(kind);
    let err = ok(&merge(&[&ckpt, &out], &[]));
    assert!(err.contains("DeepSpeed ZeRO-"), "{err}");
    let reference = ckpt.join("reference.pt");
    check(&ckpt, &out, &["--reference", reference.to_str().unwrap()]);
}

#[test]
fn zero1_matches_zero_to_fp32_reconstruction() {
    zero_matches_reference("zero1");
}

#[test]
fn zero2_matches_zero_to_fp32_reconstruction() {
    zero_matches_reference("zero2");
}

#[test]
fn zero3_matches_zero_to_fp32_reconstruction() {
    zero_matches_reference("zero3");
    let ckpt = fixture("zero3");
    let out = out_dir("zero3-bin");
    ok(&merge(
        &[&ckpt.join("global_step3"), &out],
        &["--unsafe-serialization", "--dtype", "bf16"],
    ));
    let reference = ckpt.join("reference.pt");
    check(
        &ckpt,
        &out,
        &[
            "--bin",
            "--dtype",
            "bf16",
            "--reference",
            reference.to_str().unwrap(),
        ],
    );
}

#[test]
fn error_incomplete_zero_checkpoint() {
    let src = fixture("zero2");
    let ckpt = root().join("copy-zero-incomplete");
    let _ = std::fs::remove_dir_all(&ckpt);
    std::fs::create_dir_all(ckpt.join("global_step3")).unwrap();
    std::fs::copy(src.join("latest"), ckpt.join("latest")).unwrap();
    std::fs::copy(
        src.join("global_step3/mp_rank_00_model_states.pt"),
        ckpt.join("global_step3/mp_rank_00_model_states.pt"),
    )
    .unwrap();
    fails(
        &ckpt,
        3,
        "1 `*_model_states.pt` and 0 `*_optim_states.pt` files",
    );
    std::fs::copy(
        src.join("global_step3/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"),
        ckpt.join("global_step3/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"),
    )
    .unwrap();
    fails(&ckpt, 3, "saved by 2 ranks");
}
