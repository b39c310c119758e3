//! accel-merge-weights against genuine checkpoints written by the venv's torch (2 gloo CPU ranks for
//! FSDP2 and FSDP1), compared bit for bit with torch's own `dcp_to_torch_save` by tests/merge/check.py,
//! against accelerate's per-rank FSDP2 files, compared with the full state dict torch gathers, and
//! against DeepSpeed ZeRO checkpoints written by the real DeepSpeed (3 gloo CPU ranks), compared
//! bit for bit with DeepSpeed's own `zero_to_fp32`.

use crate::util::{bin, free_port, repo, suite, venv_bin, venv_python, ChildExt, CommandExt, WAIT};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The tool under test (it inherits the test's environment: nothing here reads a config).
fn merge_weights() -> PathBuf {
    bin("accel-merge-weights")
}

/// A script of tests/merge (the checkpoint makers and checkers), as an argument.
fn here(script: &str) -> String {
    repo()
        .join("tests/merge")
        .join(script)
        .display()
        .to_string()
}

fn root() -> &'static Path {
    static ROOT: OnceLock<tempfile::TempDir> = OnceLock::new();
    ROOT.get_or_init(|| tempfile::tempdir().expect("tempdir"))
        .path()
}

fn py(args: &[&str]) -> Output {
    py_env(args, &[])
}

fn py_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    py_within(args, env, WAIT)
}

/// How long a fixture may take to make: the real engines on several ranks, on 2 cores the suite
/// shares (make_zero.py's seven DeepSpeed saves took 150 s beside other tests).
const FIXTURE_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

fn py_within(args: &[&str], env: &[(&str, &str)], limit: std::time::Duration) -> Output {
    let out = Command::new(venv_python())
        .args(args)
        .envs(env.iter().copied())
        .env("PORT", free_port().to_string())
        .env("PYTHONWARNINGS", "ignore")
        .output_within(limit);
    assert!(
        out.status.success(),
        "python {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A checkpoint of `kind` made once per suite run by make_dcp.py, shared by the test processes
/// (`suite::fixture`).
pub(crate) fn fixture(kind: &'static str) -> PathBuf {
    const KINDS: &[&str] = &[
        "fsdp2",
        "fsdp1",
        "accel",
        "plain",
        "complex",
        "stformat",
        "nans",
        "titan",
        "titanseed",
        "big",
        "mid",
    ];
    assert!(KINDS.contains(&kind), "unknown fixture {kind}");
    // `big` is the drill's 1 GiB checkpoint, `mid` a 256 MiB one to damage while it is merged.
    let env: &[(&str, &str)] = match kind {
        "big" => &[("BIG_MIB", "1024")],
        "mid" => &[("BIG_MIB", "256")],
        _ => &[],
    };
    suite::fixture(&format!("merge-{kind}"), |dir| {
        py_within(
            &[&here("make_dcp.py"), kind, dir.to_str().unwrap()],
            env,
            FIXTURE_WAIT,
        );
    })
}

/// A genuine `Accelerator.save_state` directory with FSDP2 on 2 gloo ranks (make_accelerate.py): a tiny
/// LlamaForCausalLM in pytorch_model_fsdp_0/, an MLP in pytorch_model_fsdp_1/, their optimizer_0/ and
/// optimizer_1/, and random_states_*.pkl. Made once per suite run.
fn accelerate_state() -> PathBuf {
    suite::fixture("merge-accelerate-state", |dir| {
        py_within(
            &[&here("make_accelerate.py"), dir.to_str().unwrap()],
            &[],
            FIXTURE_WAIT,
        );
    })
}

/// accelerate's per-rank checkpoints (`save_fsdp_model(..., use_dcp=False)`) on 2 gloo ranks
/// (make_fsdp_ranks.py): `fsdp2/` and `fsdp1/`, each with the full state dict torch gathers
/// (`reference.pt`). Made once per suite run.
fn fsdp_ranks_fixture(kind: &str) -> PathBuf {
    let dir = suite::fixture("merge-fsdp-ranks", |dir| {
        py_within(
            &[&here("make_fsdp_ranks.py"), dir.to_str().unwrap()],
            &[],
            FIXTURE_WAIT,
        );
    });
    dir.join(kind)
}

/// The DeepSpeed configurations make_zero.py saves, all in one 3-rank torchrun.
const ZERO_CONFIGS: &[&str] = &[
    "0-bf16", "1-bf16", "1-fp32", "2-bf16", "2-fp32", "3-bf16", "3-fp32",
];

/// A checkpoint saved by the real DeepSpeed for `config` (e.g. `3-bf16`), made once per suite run by
/// make_zero.py with its zero_to_fp32 reconstruction (`reference.pt`) and module state (`module.pt`).
fn zero_fixture(config: &str) -> PathBuf {
    assert!(ZERO_CONFIGS.contains(&config), "unknown config {config}");
    let dir = suite::fixture("merge-zero", |d| {
        let mut args = vec![here("make_zero.py"), d.display().to_string()];
        args.extend(ZERO_CONFIGS.iter().map(|c| c.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        py_within(&args, &[], FIXTURE_WAIT);
    });
    dir.join(format!("zero{config}"))
}

fn merge(args: &[&Path], flags: &[&str]) -> Output {
    Command::new(merge_weights())
        .args(args)
        .args(flags)
        .env("ACCEL_NO_PROGRESS", "1")
        .output_within(WAIT)
}

fn ok(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "merge failed: {err}");
    err
}

pub(crate) fn check(ckpt: &Path, out: &Path, extra: &[&str]) {
    let mut args = vec![
        here("check.py"),
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
fn an_accelerate_save_state_directory_merges_its_model_and_optimizer() {
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
    // The checkpoint is the only copy of what the output leaves out (the bytes item `note`): refused
    // before anything is written.
    let o = merge(&[&ckpt, &out], &["--remove_checkpoint_dir"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("leaves out: note"), "{err}");
    assert!(ckpt.join(".metadata").exists() && !out.exists());
    ok(&merge(
        &[&ckpt, &out],
        &["--remove_checkpoint_dir", "--include-bytes"],
    ));
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
    let o = merge(&[&ckpt, &out], &["--remove-checkpoint-dir"]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
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
    // accelerate's spelling, as scripts written for `accelerate merge-weights` pass it.
    ok(&merge(
        &[&ckpt, &out],
        &["--hf_reference", hf.to_str().unwrap()],
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
    py(&[&here("mutate.py"), "offset_oob", ckpt.to_str().unwrap()]);
    fails(&ckpt, 3, "out of range");
}

#[test]
fn error_chunks_that_do_not_cover() {
    let ckpt = copy_of("fsdp2", "gap");
    py(&[&here("mutate.py"), "drop_chunk", ckpt.to_str().unwrap()]);
    fails(
        &ckpt,
        3,
        "do not cover it exactly: the chunks cover 20 of 35",
    );
    let ckpt = copy_of("fsdp2", "overlap");
    py(&[&here("mutate.py"), "overlap", ckpt.to_str().unwrap()]);
    fails(&ckpt, 3, "overlap");
}

/// Runs the venv's `accelerate merge-weights` (the Python tool accel-merge-weights stands in for).
fn accelerate_merge(args: &[&Path], flags: &[&str]) -> Output {
    let accelerate = venv_bin().join("accelerate");
    Command::new(accelerate)
        .arg("merge-weights")
        .args(args)
        .args(flags)
        .env("PYTHONWARNINGS", "ignore")
        .output_within(WAIT)
}

/// Compares two safetensors files tensor by tensor (dtype string, shape, data bytes) without torch.
fn same_safetensors(a: &Path, b: &Path) -> String {
    let o = py(&[
        &here("same_safetensors.py"),
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

#[test]
fn complex64_float8_and_float4_are_written_as_accelerate_writes_them() {
    // torchtitan's seed checkpoint: the model's state dict at the top level with its persistent
    // complex64 `freqs_cis`, plus MX e8m0 scales, fnuz float8 and packed float4 tensors.
    let ckpt = fixture("titanseed");
    let out = out_dir("titanseed");
    let err = ok(&merge(&[&ckpt, &out], &[]));
    assert!(err.contains("merged 18 tensors"), "{err}");
    check(&ckpt, &out, &[]);
    let acc = out_dir("titanseed-accelerate");
    let o = accelerate_merge(&[&ckpt, &acc], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        same_safetensors(
            &out.join("model.safetensors"),
            &acc.join("model.safetensors")
        ),
        "ok 18 C64,F32,F4,F8_E4M3,F8_E4M3FNUZ,F8_E5M2FNUZ,F8_E8M0"
    );
    let bin = out_dir("titanseed-bin");
    ok(&merge(&[&ckpt, &bin], &["--unsafe_serialization"]));
    check(&ckpt, &bin, &["--bin"]);
    // Left out by name, the buffer is simply not written.
    let x = out_dir("titanseed-exclude");
    let err = ok(&merge(&[&ckpt, &x], &["--exclude-key", "freqs_cis"]));
    assert!(
        err.contains("merged 17 tensors") && err.contains("--exclude-key left out 1 tensors"),
        "{err}"
    );
}

#[test]
fn error_unwritable_dtype_is_named_and_exclude_key_leaves_it_out() {
    // `h` is complex32, which neither safetensors nor torch.save's typed storages here can hold.
    let ckpt = fixture("complex");
    let err = fails(&ckpt, 3, "`h` (torch.complex32)");
    assert!(err.contains("--exclude-key 'h'"), "{err}");
    for flags in [&[][..], &["--unsafe_serialization"][..]] {
        let out = out_dir("complex-exclude");
        let mut f = vec!["--exclude-key", "h"];
        f.extend_from_slice(flags);
        let err = ok(&merge(&[&ckpt, &out], &f));
        assert!(err.contains("merged 2 tensors"), "{err}");
        // The complex64 `z` is written with its bits, as torch saved it.
        let code = "import sys, os, torch\n\
             from torch.distributed.checkpoint.format_utils import dcp_to_torch_save\n\
             dcp_to_torch_save(sys.argv[1], sys.argv[2] + '.ref.pt')\n\
             ref = torch.load(sys.argv[2] + '.ref.pt', weights_only=True)['model']\n\
             p = os.path.join(sys.argv[2], 'model.safetensors')\n\
             if os.path.exists(p):\n\
             \x20   from safetensors.torch import load_file; got = load_file(p)\n\
             else:\n\
             \x20   got = torch.load(os.path.join(sys.argv[2], 'pytorch_model.bin'), weights_only=True)\n\
             assert sorted(got) == ['ok', 'z'], sorted(got)\n\
             assert got['z'].dtype == torch.complex64\n\
             assert torch.equal(got['z'].view(torch.uint8), ref['z'].view(torch.uint8))\n\
             print('ok')";
        let o = py(&["-c", code, ckpt.to_str().unwrap(), out.to_str().unwrap()]);
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "ok", "{o:?}");
    }
}

#[test]
fn error_malicious_pickle_is_never_executed() {
    let ckpt = copy_of("plain", "evil");
    py(&[&here("mutate.py"), "evil", ckpt.to_str().unwrap()]);
    fails(&ckpt, 3, "never contains");
    assert!(!ckpt.join("PWNED").exists());
}

#[test]
fn error_disk_full_leaves_nothing() {
    use std::os::unix::process::CommandExt;
    let ckpt = fixture("fsdp2");
    let out = out_dir("full");
    let mut cmd = Command::new(merge_weights());
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
    let o = cmd.output_within(WAIT);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(err.contains("cannot write"), "{err}");
    assert!(!out.exists(), "partial output left behind");
}

#[test]
fn help_lists_accelerates_flag_spellings_and_no_arguments_exit_2() {
    let o = Command::new(merge_weights())
        .arg("--help")
        .output_within(WAIT);
    let help = String::from_utf8_lossy(&o.stdout);
    for flag in [
        "--unsafe_serialization",
        "--remove_checkpoint_dir",
        "--max_shard_size",
        "--hf_reference",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help");
    }
    let o = Command::new(merge_weights()).output_within(WAIT);
    assert_eq!(o.status.code(), Some(2));
}

/// Merges a real DeepSpeed checkpoint and compares it bit for bit with zero_to_fp32's state dict, plus
/// `also` (taken from the module state, as the merge says it does).
fn zero_matches(config: &str, also: &[&str]) -> String {
    let ckpt = zero_fixture(config);
    let out = out_dir(&format!("zero{config}"));
    let err = ok(&merge(&[&ckpt, &out], &[]));
    let stage = &config[..1];
    assert!(err.contains(&format!("DeepSpeed ZeRO-{stage}")), "{err}");
    let reference = ckpt.join("reference.pt");
    let module = ckpt.join("module.pt");
    let mut args = vec!["--reference", reference.to_str().unwrap()];
    if !also.is_empty() {
        args.extend(["--extra-from", module.to_str().unwrap()]);
        for k in also {
            args.extend(["--extra-key", k]);
        }
    }
    check(&ckpt, &out, &args);
    err
}

#[test]
fn fsdp2_per_rank_files_match_the_full_state_dict() {
    // Each rank's DTensors (uneven and empty shards, a bf16 group, an int64 buffer) placed by
    // their mesh coordinate, against torch's own full state dict of the same model.
    let ckpt = fsdp_ranks_fixture("fsdp2");
    let out = out_dir("fsdp2-ranks");
    let err = ok(&merge(&[&ckpt, &out], &[]));
    assert!(
        err.contains("from 2 rank files") && err.contains("FSDP2 per-rank checkpoint"),
        "{err}"
    );
    let reference = ckpt.join("reference.pt");
    check(&ckpt, &out, &["--reference", reference.to_str().unwrap()]);
}

#[test]
fn error_fsdp1_per_rank_files_are_refused_by_name() {
    let ckpt = fsdp_ranks_fixture("fsdp1");
    let out = out_dir("fsdp1-ranks");
    let o = merge(&[&ckpt, &out], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("is FSDP1's per-rank state dict (ShardedTensor values)"),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn zero1_bf16_matches_zero_to_fp32_and_keeps_frozen_params() {
    // DeepSpeed records no frozen params at stage 1 and zero_to_fp32 drops them; the merge takes them
    // from the module state, in the training dtype, and says so.
    let err = zero_matches("1-bf16", &["frozen.weight", "frozen.bias"]);
    assert!(
        err.contains("2 frozen parameter(s) (frozen.weight, frozen.bias)")
            && err.contains("saved dtype bfloat16"),
        "{err}"
    );
}

#[test]
fn zero1_fp32_matches_zero_to_fp32_and_keeps_frozen_params() {
    let err = zero_matches("1-fp32", &["frozen.weight", "frozen.bias"]);
    assert!(err.contains("saved dtype float32"), "{err}");
}

#[test]
fn zero2_matches_zero_to_fp32() {
    zero_matches("2-bf16", &[]);
    zero_matches("2-fp32", &[]);
}

#[test]
fn zero3_matches_zero_to_fp32() {
    zero_matches("3-bf16", &[]);
    zero_matches("3-fp32", &[]);
    let ckpt = zero_fixture("3-bf16");
    let out = out_dir("zero3-bin");
    ok(&merge(
        &[&ckpt.join("global_step2"), &out],
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
fn zero1_frozen_params_survive_remove_checkpoint_dir() {
    let src = zero_fixture("1-bf16");
    let ckpt = root().join("copy-zero1-remove");
    deepspeed_copy(&src, &ckpt);
    let out = out_dir("zero1-remove");
    ok(&merge(&[&ckpt, &out], &["--remove_checkpoint_dir"]));
    assert!(!ckpt.exists());
    let reference = src.join("reference.pt");
    let module = src.join("module.pt");
    check(
        &src,
        &out,
        &[
            "--reference",
            reference.to_str().unwrap(),
            "--extra-from",
            module.to_str().unwrap(),
            "--extra-key",
            "frozen.weight",
            "--extra-key",
            "frozen.bias",
        ],
    );
}

#[test]
fn deepspeed_stage0_bf16_takes_the_fp32_masters() {
    // DeepSpeed stage 0 in bf16 keeps an fp32 master of each trainable param in the optimizer state
    // (`optimizer.fp32_groups`); the bf16 module was merged before. The reference pairs each master
    // with its param through the engine's own objects (make_zero.py).
    let ckpt = zero_fixture("0-bf16");
    let out = out_dir("zero0");
    let err = ok(&merge(&[&ckpt, &out], &[]));
    assert!(
        err.contains("DeepSpeed stage 0")
            && err.contains("the 4 trainable parameter(s) are taken from the optimizer's fp32 master weights (`optimizer.fp32_groups`")
            && err.contains("frozen parameters as saved: frozen.weight (bfloat16), frozen.bias (bfloat16)"),
        "{err}"
    );
    let reference = ckpt.join("reference.pt");
    check(&ckpt, &out, &["--reference", reference.to_str().unwrap()]);
}

/// A copy of what DeepSpeed wrote into a make_zero.py save directory (`latest`, the tag directories,
/// its recovery scripts), without the fixture's reference files.
fn deepspeed_copy(src: &Path, dst: &Path) {
    let _ = std::fs::remove_dir_all(dst);
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dst.join(&name));
        } else if name == "latest" || name.starts_with("zero_to_") {
            std::fs::copy(e.path(), dst.join(&name)).unwrap();
        }
    }
}

/// The names in `dir`, recursively, as `a/b` paths, sorted.
fn tree(dir: &Path) -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type().unwrap().is_dir() {
            v.extend(tree(&e.path()).into_iter().map(|n| format!("{name}/{n}")));
        } else {
            v.push(name);
        }
    }
    v.sort();
    v
}

#[test]
fn remove_checkpoint_dir_refuses_a_save_state_directory_with_more_than_the_model() {
    // A real accelerate save_state (FSDP2): two models, two optimizers and RNG states. Only model 0
    // is merged; the whole directory was deleted before, model 1 included, with exit 0.
    let src = accelerate_state();
    let ckpt = root().join("copy-save-state-remove");
    let _ = std::fs::remove_dir_all(&ckpt);
    copy_tree(&src, &ckpt);
    let before = tree(&ckpt);
    let out = out_dir("save-state-remove");
    let o = merge(&[&ckpt, &out], &["--remove_checkpoint_dir"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("also holds `optimizer_0/` (3 files), `optimizer_1/` (3 files), `pytorch_model_fsdp_1/` (3 files), `random_states_0.pkl`, `random_states_1.pkl`"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "pass its own directory `{}`",
            ckpt.join("pytorch_model_fsdp_0").display()
        )),
        "{err}"
    );
    assert_eq!(tree(&ckpt), before, "nothing is deleted");
    assert!(!out.exists(), "nothing is written");
    // accelerate merge-weights refuses this directory too (no .metadata at its top) and deletes nothing.
    let acc = out_dir("save-state-remove-accelerate");
    let o = accelerate_merge(&[&ckpt, &acc], &["--remove_checkpoint_dir"]);
    assert!(!o.status.success());
    assert_eq!(tree(&ckpt), before);
    // The model's own directory: merged, and only it is removed.
    let model = ckpt.join("pytorch_model_fsdp_0");
    ok(&merge(&[&model, &out], &["--remove_checkpoint_dir"]));
    check(&src.join("pytorch_model_fsdp_0"), &out, &[]);
    let left: Vec<String> = before
        .into_iter()
        .filter(|n| !n.starts_with("pytorch_model_fsdp_0/"))
        .collect();
    assert_eq!(tree(&ckpt), left);
}

#[test]
fn remove_checkpoint_dir_refuses_files_and_tags_the_merge_does_not_read() {
    // A DeepSpeed save directory with two tags and a user's notes: global_step2 (named by `latest`)
    // was merged and all three removed before.
    let ckpt = root().join("copy-zero-tags-remove");
    deepspeed_copy(&zero_fixture("2-bf16"), &ckpt);
    copy_tree(&ckpt.join("global_step2"), &ckpt.join("global_step1"));
    std::fs::write(ckpt.join("my_notes.txt"), b"lr 1e-4 looked better").unwrap();
    let before = tree(&ckpt);
    let out = out_dir("zero-tags-remove");
    let o = merge(&[&ckpt, &out], &["--remove_checkpoint_dir"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("also holds `global_step1/` (4 files), `my_notes.txt`"),
        "{err}"
    );
    assert!(
        err.contains(&format!("`{}`", ckpt.join("global_step2").display())),
        "{err}"
    );
    assert_eq!(tree(&ckpt), before);
    assert!(!out.exists());
    // Once only the checkpoint is there, it is merged and removed, DeepSpeed's `latest` and recovery
    // scripts with it.
    std::fs::remove_dir_all(ckpt.join("global_step1")).unwrap();
    std::fs::remove_file(ckpt.join("my_notes.txt")).unwrap();
    ok(&merge(&[&ckpt, &out], &["--remove_checkpoint_dir"]));
    assert!(!ckpt.exists());
    // A DCP directory with a file torch did not write: accelerate merge-weights deletes it with the
    // checkpoint; this merge refuses.
    let dcp = copy_of("fsdp2", "notes-remove");
    std::fs::write(dcp.join("my_notes.txt"), b"mine").unwrap();
    let o = merge(
        &[&dcp, &out_dir("notes-remove")],
        &["--remove_checkpoint_dir"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("also holds `my_notes.txt`"), "{err}");
    assert!(dcp.join("my_notes.txt").exists() && dcp.join(".metadata").exists());
    let o = accelerate_merge(
        &[&dcp, &out_dir("notes-remove-accelerate")],
        &["--unsafe_serialization", "--remove_checkpoint_dir"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        !dcp.exists(),
        "accelerate merge-weights removes the notes too"
    );
}

fn copy_tree(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dst.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn error_zero3_missing_rank_file_is_named() {
    let ckpt = root().join("copy-zero3-missing");
    let _ = std::fs::remove_dir_all(&ckpt);
    copy_tree(&zero_fixture("3-bf16"), &ckpt);
    std::fs::remove_file(ckpt.join("global_step2/zero_pp_rank_1_mp_rank_00_model_states.pt"))
        .unwrap();
    let err = fails(
        &ckpt,
        3,
        "without `zero_pp_rank_1_mp_rank_00_model_states.pt`",
    );
    assert!(err.contains("saved by 3 ranks"), "{err}");
    let ckpt = root().join("copy-zero3-missing-optim");
    let _ = std::fs::remove_dir_all(&ckpt);
    copy_tree(&zero_fixture("3-bf16"), &ckpt);
    std::fs::remove_file(ckpt.join("global_step2/bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt"))
        .unwrap();
    fails(
        &ckpt,
        3,
        "without `bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt`",
    );
}

#[test]
fn error_incomplete_zero_checkpoint() {
    let src = zero_fixture("2-bf16");
    let ckpt = root().join("copy-zero-incomplete");
    let _ = std::fs::remove_dir_all(&ckpt);
    std::fs::create_dir_all(ckpt.join("global_step2")).unwrap();
    std::fs::copy(src.join("latest"), ckpt.join("latest")).unwrap();
    std::fs::copy(
        src.join("global_step2/mp_rank_00_model_states.pt"),
        ckpt.join("global_step2/mp_rank_00_model_states.pt"),
    )
    .unwrap();
    fails(
        &ckpt,
        3,
        "a DeepSpeed ZeRO-2 checkpoint with 1 `*_model_states.pt` and no `*_optim_states.pt` files",
    );
    std::fs::copy(
        src.join("global_step2/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"),
        ckpt.join("global_step2/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"),
    )
    .unwrap();
    fails(&ckpt, 3, "without `bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt`, `bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt`");
}

/// The weight files (and indexes) in `dir`, sorted.
fn weight_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("model") || n.starts_with("pytorch_model"))
        .collect();
    v.sort();
    v
}

#[test]
fn force_remerge_leaves_exactly_the_new_weights() {
    let ckpt = fixture("fsdp2");
    let out = out_dir("reforce");
    ok(&merge(&[&ckpt, &out], &[]));
    assert_eq!(weight_files(&out), ["model.safetensors"]);
    // Shards replace the single file (transformers would load a stale model.safetensors first).
    ok(&merge(&[&ckpt, &out], &["-f", "--max-shard-size", "100B"]));
    let w = weight_files(&out);
    assert!(!w.contains(&"model.safetensors".to_string()), "{w:?}");
    assert!(
        w.contains(&"model.safetensors.index.json".to_string()),
        "{w:?}"
    );
    check(&ckpt, &out, &[]);
    // Another format replaces every safetensors file and the index.
    ok(&merge(&[&ckpt, &out], &["-f", "--unsafe_serialization"]));
    assert_eq!(weight_files(&out), ["pytorch_model.bin"]);
    check(&ckpt, &out, &["--bin"]);
    // Sharded .bin, then back to one safetensors file.
    ok(&merge(
        &[&ckpt, &out],
        &["-f", "--unsafe_serialization", "--max-shard-size", "100B"],
    ));
    assert!(weight_files(&out)
        .iter()
        .all(|n| n.starts_with("pytorch_model")));
    ok(&merge(&[&ckpt, &out], &["--force"]));
    assert_eq!(weight_files(&out), ["model.safetensors"]);
    check(&ckpt, &out, &[]);
    // Nothing else of the output directory is touched, and no staging directory is left.
    std::fs::write(out.join("notes.txt"), b"mine").unwrap();
    ok(&merge(&[&ckpt, &out], &["--force"]));
    let mut all: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    all.sort();
    assert_eq!(all, ["model.safetensors", "notes.txt"]);
}

#[test]
fn dtype_casts_match_torch_for_nan_payloads() {
    // Signalling/quiet NaNs of both signs with payloads, in tensors long enough that torch's `.to()`
    // takes its vectorised kernel; check.py compares bits with torch's own cast.
    let ckpt = fixture("nans");
    for dtype in ["fp32", "bf16", "fp16"] {
        let out = out_dir(&format!("nans-{dtype}"));
        ok(&merge(&[&ckpt, &out], &["--dtype", dtype]));
        check(&ckpt, &out, &["--dtype", dtype]);
    }
}

#[test]
fn error_undecodable_planner_data_name() {
    let ckpt = copy_of("fsdp2", "planner");
    py(&[&here("mutate.py"), "planner_bytes", ckpt.to_str().unwrap()]);
    let err = fails(&ckpt, 3, "planner_data of `");
    assert!(err.contains("neither a string nor an integer"), "{err}");
    assert!(err.contains(".metadata"), "{err}");
}

#[test]
fn error_output_path_is_a_file() {
    let ckpt = fixture("plain");
    let file = root().join("out-is-a-file");
    std::fs::write(&file, b"x").unwrap();
    let o = merge(&[&ckpt, &file], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(err.contains("exists and is not a directory"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
}

/// The pid of a process that has exited and been reaped.
fn dead_pid() -> u32 {
    let mut c = Command::new("true").start();
    let pid = c.id();
    c.wait_within(WAIT);
    pid
}

#[test]
fn staging_dirs_of_dead_merges_are_removed() {
    let ckpt = fixture("plain");
    let out = out_dir("stale");
    std::fs::create_dir_all(&out).unwrap();
    let dead = out.join(format!(".accel-merge-{}.tmp", dead_pid()));
    std::fs::create_dir_all(&dead).unwrap();
    std::fs::write(dead.join("model.safetensors"), vec![0u8; 4096]).unwrap();
    // A live merge's staging directory is left alone: a merge into the directory meanwhile is
    // refused (the output's lock, not the pid in the name, tells a live merge from a gone one).
    let first = stopped_at_staging(&out, &["-f"]);
    let live = out.join(format!(".accel-merge-{}.tmp", first.id()));
    let o = merge(&[&ckpt, &out], &["-q"]);
    assert_eq!(o.status.code(), Some(4), "{o:?}");
    assert!(live.exists());
    let err = ok(&resume(first));
    assert!(
        err.contains(&format!("removed `{}`", dead.display())) && err.contains("that is gone"),
        "{err}"
    );
    assert!(!dead.exists());
    ok(&merge(&[&ckpt, &out], &["-q", "-f"]));
    check(&ckpt, &out, &[]);
}

/// Waits (generously) until the merge into `out` has created its staging directory and preallocated
/// its output, returning the staging directory.
fn wait_for_staging(child: &mut std::process::Child, out: &Path) -> PathBuf {
    let staging = out.join(format!(".accel-merge-{}.tmp", child.id()));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    loop {
        let size: u64 = std::fs::read_dir(&staging)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
                    .sum()
            })
            .unwrap_or(0);
        if size > 0 {
            return staging;
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!("the merge ended ({st}) before it was signalled");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no staging dir after 300 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn drill_sighup_and_sigkill_during_a_1gib_merge() {
    // A 1 GiB checkpoint; the merge is signalled once its staging directory holds the laid-out output.
    let ckpt = fixture("big");
    let size: u64 = std::fs::read_dir(&ckpt)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(size >= 1 << 30, "the checkpoint has {size} bytes");
    let out = out_dir("drill");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("keep.txt"), b"mine").unwrap();
    let spawn = || {
        Command::new(merge_weights())
            .arg(&ckpt)
            .arg(&out)
            .arg("--force")
            .env("ACCEL_NO_PROGRESS", "1")
            .stderr(std::process::Stdio::piped())
            .start()
    };
    // SIGHUP (a closed terminal or ssh session): stops like SIGINT, leaves nothing behind.
    let mut child = spawn();
    let staging = wait_for_staging(&mut child, &out);
    unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    let o = child.output_within(WAIT);
    let err = String::from_utf8_lossy(&o.stderr);
    // 128 + SIGHUP, as a shell reports a job the signal stopped.
    assert_eq!(o.status.code(), Some(129), "{err}");
    assert!(
        err.contains("interrupted by SIGHUP; nothing was written"),
        "{err}"
    );
    assert!(!staging.exists(), "staging dir left after SIGHUP: {err}");
    let names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["keep.txt"]);
    // SIGKILL cannot be caught: the staging dir stays until the next merge into the directory
    // removes it, says so, and writes the output in place.
    let mut child = spawn();
    let staging = wait_for_staging(&mut child, &out);
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let st = child.wait_within(WAIT);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&st),
        Some(libc::SIGKILL)
    );
    assert!(staging.exists());
    let o = merge(&[&ckpt, &out], &["--force"]);
    let err = ok(&o);
    assert!(
        err.contains(&format!("removed `{}`", staging.display())),
        "{err}"
    );
    assert!(!staging.exists());
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["keep.txt", "model.safetensors"]);
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn torchtitan_layout_leaves_out_training_state() {
    let ckpt = fixture("titan");
    let out = out_dir("titan");
    let err = ok(&merge(&[&ckpt, &out], &[]));
    assert!(err.contains("merged 3 tensors"), "{err}");
    assert!(err.contains("torchtitan's layout"), "{err}");
    assert!(
        err.contains("left out top-level keys: dataloader, lr_scheduler, optimizer, train_state"),
        "{err}"
    );
    check(
        &ckpt,
        &out,
        &[
            "--drop",
            "optimizer",
            "--drop",
            "lr_scheduler",
            "--drop",
            "dataloader",
            "--drop",
            "train_state",
        ],
    );
    // --exclude-key leaves out what a glob names, here from everything.
    let out = out_dir("titan-exclude");
    let err = ok(&merge(
        &[&ckpt, &out],
        &[
            "--all-keys",
            "--exclude-key",
            "optimizer.*",
            "--exclude_key",
            "norm.*",
        ],
    ));
    assert!(err.contains("merged 2 tensors"), "{err}");
    assert!(err.contains("--exclude-key left out 3 tensors"), "{err}");
    let o = merge(&[&ckpt], &["--inspect", "--json", "--exclude-key", "*"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn layout_is_reported_for_accelerate_and_plain_dcp() {
    let o = merge(&[&fixture("accel")], &["--inspect", "--json"]);
    let err = ok(&o);
    assert!(err.contains("accelerate's save_state layout"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["layout"]
            .as_str()
            .unwrap()
            .contains("only top-level key `model`"),
        "{v}"
    );
    let v: serde_json::Value =
        serde_json::from_slice(&merge(&[&fixture("fsdp2")], &["--inspect", "--json"]).stdout)
            .unwrap();
    assert!(
        v["layout"]
            .as_str()
            .unwrap()
            .contains("`model` (the layout of accelerate and plain DCP saves)"),
        "{v}"
    );
}

#[test]
fn error_corrupt_record_fails_its_crc() {
    let ckpt = copy_of("fsdp2", "crc");
    py(&[&here("mutate.py"), "crc_flip", ckpt.to_str().unwrap()]);
    let err = fails(&ckpt, 3, "fails its CRC-32 check");
    assert!(err.contains("--no-verify"), "{err}");
    // --no-verify merges the damaged bytes as they are.
    let out = out_dir("crc-noverify");
    ok(&merge(&[&ckpt, &out], &["--no-verify"]));
    assert!(out.join("model.safetensors").is_file());
    // The same check covers DeepSpeed's files.
    let zero = root().join("copy-zero-crc");
    let _ = std::fs::remove_dir_all(&zero);
    copy_tree(&zero_fixture("2-fp32"), &zero);
    let f = zero.join("global_step2/zero_pp_rank_1_mp_rank_00_optim_states.pt");
    let mut bytes = std::fs::read(&f).unwrap();
    // Flip a bit of rank 1's fp32 partition, a record the merge reads (the Adam moments it never
    // reads are not checked).
    let code = "import sys, torch\n\
         sd = torch.load(sys.argv[1], weights_only=False)\n\
         t = sd['optimizer_state_dict']['single_partition_of_fp32_groups'][0]\n\
         raw = t.detach().numpy().tobytes()\n\
         b = open(sys.argv[1], 'rb').read()\n\
         assert b.count(raw) == 1\n\
         print(b.find(raw) + len(raw) // 2)";
    let o = py(&["-c", code, f.to_str().unwrap()]);
    // Importing DeepSpeed's classes prints a notice on stdout; the offset is the last line.
    let stdout = String::from_utf8_lossy(&o.stdout);
    let at: usize = stdout
        .lines()
        .last()
        .unwrap_or("")
        .trim()
        .parse()
        .expect(&stdout);
    bytes[at] ^= 1;
    std::fs::write(&f, bytes).unwrap();
    fails(&zero, 3, "fails its CRC-32 check");
}

#[test]
fn error_repeated_chunk_references_are_rejected_with_bounded_work() {
    // 3,000,000 references to one chunk in a few MB of .metadata: rejected while parsing, before any
    // per-chunk work, in memory bounded by the file's size.
    let ckpt = copy_of("fsdp2", "repeat");
    py(&[&here("mutate.py"), "repeat_chunks", ckpt.to_str().unwrap()]);
    let meta_len = std::fs::metadata(ckpt.join(".metadata")).unwrap().len();
    assert!(meta_len < 16 << 20, "{meta_len}");
    let out = out_dir("repeat");
    // The peak RSS is taken by a small Python parent: a child forked from this (large, multi-threaded)
    // test process would carry the test's own high-water mark in ru_maxrss across exec.
    const MEASURE: &str = "import json, resource, subprocess, sys\n\
        p = subprocess.run(sys.argv[1:], stderr=subprocess.PIPE, env={'ACCEL_NO_PROGRESS': '1'})\n\
        print(json.dumps({'code': p.returncode, 'stderr': p.stderr.decode(errors='replace'),\n\
                          'maxrss_kib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))\n";
    let o = Command::new(venv_python())
        .args(["-c", MEASURE])
        .arg(merge_weights())
        .arg(&ckpt)
        .arg(&out)
        .output_within(WAIT);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    let err = v["stderr"].as_str().unwrap_or_default();
    assert_eq!(v["code"], 3, "{err}");
    assert!(err.contains("more chunks"), "{err}");
    // ru_maxrss is in KiB: the 3 M references must not become 3 M chunk records (~1 GiB before).
    let rss = v["maxrss_kib"].as_u64().unwrap_or(u64::MAX);
    assert!(rss < 256 * 1024, "peak RSS {rss} KiB");
    assert!(!out.exists());
}

/// A private copy of the model directory of the accelerate save_state fixture, with `mode` of
/// mutate.py applied to its .metadata.
fn damaged_accelerate_model(mode: &str) -> PathBuf {
    let src = accelerate_state().join("pytorch_model_fsdp_0");
    let dst = root().join(format!("copy-accelerate-{mode}"));
    let _ = std::fs::remove_dir_all(&dst);
    copy_tree(&src, &dst);
    py(&[&here("mutate.py"), mode, dst.to_str().unwrap()]);
    dst
}

#[test]
fn error_planner_data_that_does_not_name_its_key() {
    // One tensor's planner_data path moved under another top-level key: merged without it (exit 0,
    // "left out top-level keys: optimizer") before; torch's reader moves it out of `model` too.
    let ckpt = damaged_accelerate_model("planner_key");
    let err = fails(
        &ckpt,
        3,
        "planner_data gives `model.model.embed_tokens.weight` the path",
    );
    assert!(
        err.contains("which names `optimizer.model.embed_tokens.weight`")
            && err.contains(".metadata"),
        "{err}"
    );
}

#[test]
fn error_two_chunks_on_the_same_bytes() {
    // lm_head's first chunk pointed at embed_tokens' bytes (the same chunk shape): merged with
    // embed_tokens' values under lm_head's name before, as torch's reader would.
    let ckpt = damaged_accelerate_model("same_bytes");
    let err = fails(&ckpt, 3, "are both stored at bytes");
    assert!(
        err.contains("`model.model.embed_tokens.weight` and `model.lm_head.weight`"),
        "{err}"
    );
}

#[test]
fn error_a_key_listed_twice_is_bad_input() {
    // One flipped bit in a memoized key string makes layers.1's v_proj a second layers.0 v_proj:
    // exit 2 with a hint about --key before; it is a damaged file (3), named.
    let src = accelerate_state().join("pytorch_model_fsdp_0");
    let ckpt = root().join("copy-accelerate-dup");
    let _ = std::fs::remove_dir_all(&ckpt);
    copy_tree(&src, &ckpt);
    let meta = ckpt.join(".metadata");
    let mut bytes = std::fs::read(&meta).unwrap();
    let needle = b"model.model.layers.1.self_attn.v_proj.weight";
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("the key is in the metadata");
    bytes[at + "model.model.layers.".len()] ^= 1;
    std::fs::write(&meta, bytes).unwrap();
    let err = fails(
        &ckpt,
        3,
        "lists `model.model.layers.0.self_attn.v_proj.weight` twice",
    );
    assert!(!err.contains("--key"), "{err}");
}

#[test]
fn metadata_bit_flips_give_the_clean_output_or_exit_3() {
    // Bit 0 of every byte of a real .metadata (accelerate's save_state, FSDP2, 2 ranks), one at a time:
    // each damaged copy merges to the clean output or is refused as bad input (3); never another
    // output with exit 0 (1,604 flips did, and 18 exited 2, before). A sample of the refused flips
    // (20, and 5 clean ones) is read by torch's own dcp_to_torch_save for comparison.
    let ckpt = accelerate_state().join("pytorch_model_fsdp_0");
    // 11,282 merges: in memory where there is a tmpfs (the merge's fsyncs are then free).
    let shm = Path::new("/dev/shm");
    let work = tempfile::tempdir_in(if shm.is_dir() { shm } else { root() }).unwrap();
    let out = Command::new(venv_python())
        .arg(here("bitflip.py"))
        .arg(merge_weights())
        .args([ckpt.to_str().unwrap(), work.path().to_str().unwrap()])
        .args(["--torch-sample", "20"])
        .env("PYTHONWARNINGS", "ignore")
        .output_within(std::time::Duration::from_secs(900));
    assert!(
        out.status.success(),
        "bitflip.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let o = out;
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)));
    let n = |v: &serde_json::Value| v.as_array().map_or(0, Vec::len);
    let clean = n(&v["clean"]);
    let refused = n(&v["error"]["3"]);
    let bytes = v["bytes"].as_u64().unwrap() as usize;
    let mut torch: std::collections::BTreeMap<String, usize> = Default::default();
    let clean_set: Vec<String> = v["clean"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.to_string())
        .collect();
    for (at, verdict) in v["torch"].as_object().unwrap() {
        let kind = verdict
            .as_str()
            .unwrap()
            .split(':')
            .take(2)
            .collect::<Vec<_>>()
            .join(":");
        let ours = if clean_set.contains(at) {
            "clean"
        } else {
            "refused"
        };
        *torch.entry(format!("{ours} / torch {kind}")).or_default() += 1;
    }
    eprintln!(
        "{bytes} flips: {clean} clean, {refused} refused (exit 3); torch on a sample: {torch:#?}"
    );
    assert_eq!(
        n(&v["different"]),
        0,
        "merged to another output: {}",
        v["different"]
    );
    let codes: Vec<&String> = v["error"].as_object().unwrap().keys().collect();
    assert_eq!(codes, ["3"], "exit statuses other than 3: {}", v["error"]);
    assert_eq!(clean + refused, bytes);
    // torch itself reads some of what is refused into another state dict.
    assert!(
        torch
            .keys()
            .any(|k| k.starts_with("refused / torch ok-different")),
        "{torch:?}"
    );
}

/// A private copy of the 256 MiB checkpoint whose rank-1 shard `__1_0.distcp` may be damaged (the
/// other files hard-linked).
fn mid_copy(name: &str) -> PathBuf {
    let src = fixture("mid");
    let dst = root().join(format!("copy-mid-{name}"));
    let _ = std::fs::remove_dir_all(&dst);
    std::fs::create_dir_all(&dst).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_name() == "__1_0.distcp" {
            std::fs::copy(e.path(), to).unwrap();
        } else {
            std::fs::hard_link(e.path(), to).unwrap();
        }
    }
    dst
}

/// Starts a merge of `ckpt` into `out`, stops it once its staging directory holds the laid-out
/// output (the checkpoint read and checked, the copy about to start or started), runs `damage`,
/// and lets it go on; returns its output.
fn merge_damaged_midway(ckpt: &Path, out: &Path, flags: &[&str], damage: impl FnOnce()) -> Output {
    let mut child = Command::new(merge_weights())
        .arg(ckpt)
        .arg(out)
        .args(flags)
        .env("ACCEL_NO_PROGRESS", "1")
        .stderr(std::process::Stdio::piped())
        .start();
    let staging = wait_for_staging(&mut child, out);
    // SAFETY: signals to the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGSTOP) };
    damage();
    unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
    let o = child.output_within(WAIT);
    assert!(
        !staging.exists(),
        "staging dir left: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn truncate(path: &Path, keep: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len.min(keep)).unwrap();
}

/// Asserts a merge ended with exit 3 naming `__1_0.distcp` as changed, and wrote nothing.
fn changed_shard_refused(o: &Output, out: &Path) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("__1_0.distcp` changed during the merge"),
        "{err}"
    );
    assert!(
        !err.contains("__0_0.distcp"),
        "the wrong file is named: {err}"
    );
    assert!(!out.exists(), "output left in {}", out.display());
    err
}

#[test]
fn a_shard_truncated_during_the_merge_is_named_and_nothing_is_left() {
    // torch's FileSystemWriter reopens shards with "wb": a save into the checkpoint's directory
    // truncates them in place under the merge. With --dtype bf16 the cast reads the mapping: SIGBUS
    // (exit 135, no message, the staging dir left) before.
    let ckpt = mid_copy("trunc-bf16");
    let shard = ckpt.join("__1_0.distcp");
    let out = out_dir("trunc-bf16");
    let o = merge_damaged_midway(&ckpt, &out, &["--dtype", "bf16"], || {
        truncate(&shard, 32 << 20)
    });
    let err = changed_shard_refused(&o, &out);
    assert!(err.contains("truncated while it was read"), "{err}");
    // Without a cast the copy runs in the kernel and ends early: the error named the tensor's first
    // piece's file (`__0_0.distcp`) before.
    let ckpt = mid_copy("trunc");
    let shard = ckpt.join("__1_0.distcp");
    let out = out_dir("trunc");
    let o = merge_damaged_midway(&ckpt, &out, &[], || truncate(&shard, 32 << 20));
    changed_shard_refused(&o, &out);
}

#[test]
fn a_shard_rewritten_after_its_check_is_not_merged() {
    // The last 4 KiB of the rank-1 chunk of the big tensor rewritten after the CRC-32 check, before
    // the copy reached them: merged with exit 0 into an output that differs from the clean merge
    // before.
    let ckpt = mid_copy("tail");
    let out = out_dir("tail");
    let o = merge_damaged_midway(&ckpt, &out, &[], || {
        py(&[&here("mutate.py"), "tail_write", ckpt.to_str().unwrap()]);
    });
    let err = changed_shard_refused(&o, &out);
    assert!(err.contains("its contents were written to"), "{err}");
}

/// A 1 MiB tmpfs mounted in a temporary directory for one test (root needed, as the suite's network
/// namespaces and loop devices need it), unmounted when dropped.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    fn new() -> SmallFs {
        let dir = tempfile::tempdir().unwrap();
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(dir.path())
            .output_within(WAIT);
        assert!(
            o.status.success(),
            "mounting a 1 MiB tmpfs (needs root): {}",
            String::from_utf8_lossy(&o.stderr)
        );
        SmallFs { dir }
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg(self.dir.path())
            .status_within(WAIT);
    }
}

#[test]
fn error_disk_full_on_a_forced_remerge_says_the_old_output_is_kept() {
    // A re-merge with -f onto a disk that holds one copy but not two: ENOSPC, with a hint that did
    // not say the old output stays until the new one is complete (so both need room) before.
    let fs = SmallFs::new();
    let out = fs.path().join("merged");
    let ckpt = fixture("fsdp2");
    ok(&merge(&[&ckpt, &out], &[]));
    let before = std::fs::read(out.join("model.safetensors")).unwrap();
    {
        use std::io::Write;
        let mut filler = std::fs::File::create(fs.path().join("filler")).unwrap();
        while filler.write_all(&[0u8; 4096]).is_ok() {}
    }
    let o = merge(&[&ckpt, &out], &["-f"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(err.contains("the disk is full"), "{err}");
    assert!(
        err.contains(&format!(
            "the output already there ({} bytes) is kept until the new one is complete",
            before.len()
        )) && err.contains("needs room for both"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(out.join("model.safetensors")).unwrap(),
        before
    );
    let names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["model.safetensors"], "nothing staged is left");
}

#[test]
fn every_catchable_stopping_signal_removes_what_was_staged() {
    // Batch systems send SIGUSR1/SIGUSR2/SIGXCPU before a time limit (SLURM's --signal), a user
    // Ctrl-\ (SIGQUIT): each ended the merge outright before, leaving its staging directory and the
    // output directory it had created.
    let ckpt = fixture("mid");
    for (sig, name) in [
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGXCPU, "SIGXCPU"),
        (libc::SIGVTALRM, "SIGVTALRM"),
    ] {
        let out = out_dir(&format!("signal-{name}"));
        let mut child = Command::new(merge_weights())
            .arg(&ckpt)
            .arg(&out)
            .env("ACCEL_NO_PROGRESS", "1")
            .stderr(std::process::Stdio::piped())
            .start();
        wait_for_staging(&mut child, &out);
        // SAFETY: a signal to the child this test started.
        unsafe { libc::kill(child.id() as i32, sig) };
        let o = child.output_within(WAIT);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(128 + sig), "{name}: {err}");
        assert!(
            err.contains(&format!("interrupted by {name}; nothing was written")),
            "{err}"
        );
        assert!(!out.exists(), "{name}: {} left", out.display());
    }
}

/// Starts a merge of the 256 MiB checkpoint into `out` with `flags`, and stops it (SIGSTOP) once its
/// staging directory holds the laid-out output: the checkpoint read and checked, nothing renamed
/// into place yet. Returns the stopped child.
fn stopped_at_staging(out: &Path, flags: &[&str]) -> std::process::Child {
    let mut child = Command::new(merge_weights())
        .arg(fixture("mid"))
        .arg(out)
        .args(flags)
        .env("ACCEL_NO_PROGRESS", "1")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_staging(&mut child, out);
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGSTOP) };
    child
}

/// Sends `sig` to a child stopped by [`stopped_at_staging`] and lets it go on: the signal is
/// delivered before it runs on, so it is caught before the merge's last check.
fn signal_stopped(child: std::process::Child, sig: i32) -> Output {
    // SAFETY: signals to the child this test started.
    unsafe {
        libc::kill(child.id() as i32, sig);
        libc::kill(child.id() as i32, libc::SIGCONT);
    }
    child.output_within(WAIT)
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn an_interrupted_merge_keeps_what_others_put_into_the_directory_it_created() {
    // A merge into a new directory, interrupted while a user had added a file and a folder there:
    // the whole directory was deleted with them (`remove_dir_all` of the output on any error) before.
    let out = out_dir("others");
    let child = stopped_at_staging(&out, &[]);
    std::fs::write(out.join("README.txt"), b"the user's").unwrap();
    std::fs::create_dir(out.join("notes")).unwrap();
    std::fs::write(out.join("notes/a.txt"), b"a").unwrap();
    let o = signal_stopped(child, libc::SIGINT);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted by SIGINT; nothing was written"),
        "{err}"
    );
    assert!(out.is_dir(), "the output directory was removed: {err}");
    assert_eq!(names_in(&out), ["README.txt", "notes"], "{err}");
    assert_eq!(
        std::fs::read(out.join("README.txt")).unwrap(),
        b"the user's"
    );
    assert_eq!(std::fs::read(out.join("notes/a.txt")).unwrap(), b"a");
    // Alone in it, the interrupted merge still removes the directory it created.
    let alone = out_dir("others-alone");
    let o = signal_stopped(stopped_at_staging(&alone, &[]), libc::SIGINT);
    assert_eq!(o.status.code(), Some(130));
    assert!(!alone.exists());
}

/// Lets a child stopped by [`stopped_at_staging`] go on, to its end.
fn resume(child: std::process::Child) -> Output {
    signal_stopped(child, libc::SIGCONT)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn two_merges_into_one_output_at_once_are_serialised() {
    // A sharded merge, and meanwhile a bf16 single-file one into the same new directory: both
    // exited 0, leaving the shards, their index and a `model.safetensors` (which from_pretrained
    // loads first) before.
    let out = out_dir("twice");
    let first = stopped_at_staging(&out, &["--max_shard_size", "64MiB"]);
    let holder = format!("process {} on {}", first.id(), hostname());
    let o = merge(&[&fixture("plain"), &out], &["--dtype", "bf16"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(
        err.contains(&format!(
            "`{}` is being written by another merge ({holder})",
            out.display()
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "the lock on `{}/.accel-merge.lock`",
            out.display()
        )),
        "{err}"
    );
    let o = resume(first);
    ok(&o);
    let names = names_in(&out);
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("model-000") || n == "model.safetensors.index.json"),
        "{names:?}"
    );
    assert!(names.len() > 2, "{names:?}");
    // With --force: the second merge's output, reported written, vanished when the first one
    // replaced it at its end, before.
    let out = out_dir("twice-force");
    let first = stopped_at_staging(&out, &["-f"]);
    let o = merge(
        &[&fixture("plain"), &out],
        &["-f", "--unsafe_serialization"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(err.contains("is being written by another merge"), "{err}");
    ok(&resume(first));
    assert_eq!(names_in(&out), ["model.safetensors"]);
    // Once the first has ended, its lock is gone and the second merge runs.
    ok(&merge(
        &[&fixture("plain"), &out],
        &["-f", "--unsafe_serialization"],
    ));
    assert_eq!(names_in(&out), ["pytorch_model.bin"]);
}

/// The pids of the processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let child: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // `pid (comm) state ppid …`: the command name may hold spaces and parentheses.
            let ppid: u32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == pid).then_some(child)
        })
        .collect()
}

/// The pid, here, of the merge that `unshare` (the child `top`) runs below it.
fn merge_below(top: u32) -> u32 {
    let mut todo = vec![top];
    while let Some(p) = todo.pop() {
        let exe = std::fs::read_link(format!("/proc/{p}/exe")).unwrap_or_default();
        if exe == merge_weights() {
            return p;
        }
        todo.extend(children_of(p));
    }
    panic!("no merge runs below process {top}")
}

/// Starts a merge of the 256 MiB checkpoint into `out` in a new pid namespace, where `prelude` (a
/// shell command) runs first, and waits until its staging directory, named for its pid `ns_pid`
/// there, holds the laid-out output; returns `unshare` and the merge's pid here.
fn merge_in_pid_namespace(
    out: &Path,
    prelude: &str,
    ns_pid: u32,
    flags: &[&str],
) -> (std::process::Child, u32) {
    let mut child = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "sh", "-c"])
        .arg(format!("{prelude}\"$0\" \"$@\"; exit $?"))
        .arg(merge_weights())
        .arg(fixture("mid"))
        .arg(out)
        .args(flags)
        .env("ACCEL_NO_PROGRESS", "1")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let staging = out.join(format!(".accel-merge-{ns_pid}.tmp"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while write_size(&staging) == 0 {
        if let Some(st) = child.try_wait().unwrap() {
            panic!("the merge ended ({st}) before its staging directory was seen");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {}",
            staging.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let pid = merge_below(child.id());
    (child, pid)
}

fn write_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
                .sum()
        })
        .unwrap_or(0)
}

#[test]
fn staging_directories_are_judged_by_the_lock_not_by_a_pid_across_pid_namespaces() {
    // A live merge in another pid namespace (a container), with a pid no process has here: a merge
    // into the same directory removed its staging directory as "left by a merge that is gone", and
    // the first then failed with exit 3, before.
    let out = out_dir("pidns");
    std::fs::create_dir_all(&out).unwrap();
    let ns_pid = dead_pid();
    let prelude = format!("echo {} > /proc/sys/kernel/ns_last_pid && ", ns_pid - 1);
    let (first, pid) = merge_in_pid_namespace(&out, &prelude, ns_pid, &["-f"]);
    let staging = out.join(format!(".accel-merge-{ns_pid}.tmp"));
    // SAFETY: signals to a process this test started.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    let o = merge(&[&fixture("plain"), &out], &["-f"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("removed"), "{err}");
    assert!(
        staging.exists(),
        "a live merge's staging was removed: {err}"
    );
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(
        err.contains(&format!(
            "(process {ns_pid} on {}, in another pid namespace)",
            hostname()
        )),
        "{err}"
    );
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    ok(&first.output_within(WAIT));
    assert_eq!(names_in(&out), ["model.safetensors"]);
    // A merge killed in another pid namespace, where it was pid 1 (a pid that is always alive
    // here): its staging directory was kept for ever, taken for a live merge's, before.
    let (first, pid) = merge_in_pid_namespace(&out, "exec ", 1, &["-f"]);
    let staging = out.join(".accel-merge-1.tmp");
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    first.output_within(WAIT);
    assert!(staging.exists());
    let err = ok(&merge(&[&fixture("plain"), &out], &["-f"]));
    assert!(
        err.contains(&format!("removed `{}`", staging.display())),
        "{err}"
    );
    assert!(!staging.exists());
    assert_eq!(names_in(&out), ["model.safetensors"]);
}

#[test]
fn symlink_loops_are_reported_as_symlink_loops() {
    // A symlink loop as the checkpoint directory, the output directory or its parent, the
    // checkpoint's `.metadata`, the --hf-reference directory or a file in it, or a DeepSpeed `latest`
    // was reported as "No such file or directory", "File exists", a checkpoint without `.metadata`,
    // "not a directory" or a missing file, before.
    const ELOOP: &str = "Too many levels of symbolic links";
    let d = root().join(format!("loops-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let lp = d.join("loop");
    std::os::unix::fs::symlink("loop", &lp).unwrap();
    let plain = fixture("plain");
    let fails_with = |args: &[&Path], flags: &[&str], code: i32, path: &Path| {
        let o = merge(args, flags);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(code), "{err}");
        assert!(err.contains(&format!("`{}`", path.display())), "{err}");
        assert!(err.contains(ELOOP), "{err}");
    };
    fails_with(&[&lp, &d.join("out")], &[], 3, &lp);
    assert!(!d.join("out").exists());
    fails_with(&[&plain, &lp], &[], 4, &lp);
    fails_with(&[&plain, &lp.join("out")], &[], 4, &lp);
    let ck = copy_of("plain", "loop-metadata");
    let meta = ck.join(".metadata");
    std::fs::remove_file(&meta).unwrap();
    std::os::unix::fs::symlink(".metadata", &meta).unwrap();
    fails_with(&[&ck, &d.join("out")], &[], 3, &meta);
    let hf = lp.to_str().unwrap();
    fails_with(&[&plain, &d.join("out")], &["--hf-reference", hf], 3, &lp);
    // A looping `config.json` in the reference was left out as if missing.
    let hf = d.join("hf");
    std::fs::create_dir(&hf).unwrap();
    std::os::unix::fs::symlink("config.json", hf.join("config.json")).unwrap();
    let hf_flag = ["--hf-reference", hf.to_str().unwrap()];
    fails_with(
        &[&plain, &d.join("out")],
        &hf_flag,
        3,
        &hf.join("config.json"),
    );
    // A DeepSpeed save directory whose `latest` loops was "no known checkpoint".
    let ds = d.join("ds");
    std::fs::create_dir(&ds).unwrap();
    std::os::unix::fs::symlink("latest", ds.join("latest")).unwrap();
    fails_with(&[&ds, &d.join("out")], &[], 3, &ds.join("latest"));
    assert!(!d.join("out").exists());
}
