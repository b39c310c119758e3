//! accel-launch given torchrun's command line, against the real torchrun 2.13 beside it: every rank's
//! environment and argv, the log files and the tee'd console, for a matrix of torchrun command lines;
//! `--virtual_local_rank` over a stand-in nvidia-smi of 4 GPUs; `--numa_binding` on a fake sysfs tree
//! of 2 NUMA nodes × 4 GPUs compared with torch's own binding code, and applied for real on this
//! machine; `--signals_to_handle` and `--shutdown_timeout` in drills with real signals; what is
//! refused, and contradicting mixes with accelerate's flags.

#[allow(unused_imports)]
use crate::util::{ChildExt as _, CommandExt as _, WAIT};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::{bin, fixture, isolated, repo, venv_bin};

/// The one environment both launchers get: the venv first on PATH, a HOME and a TMPDIR of their
/// own, a UTF-8 locale (Python would otherwise add LC_CTYPE to torchrun's workers), the test's mark.
fn base(program: &Path, dir: &Path, path_front: Option<&Path>) -> Command {
    let mut path = crate::util::venv_path();
    if let Some(p) = path_front {
        path = format!("{}:{path}", p.display());
    }
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut c = isolated(program);
    c.env("PATH", path)
        .env("HOME", dir)
        .env("LANG", "C.UTF-8")
        .env("TMPDIR", &tmp)
        .current_dir(dir);
    c
}

fn torchrun() -> PathBuf {
    venv_bin().join("torchrun")
}

/// Every `rank<R>.<A>.json` a probe wrote, by `R.A`.
fn records(dir: &Path) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if let Some(k) = name
            .strip_prefix("rank")
            .and_then(|n| n.strip_suffix(".json"))
        {
            out.insert(
                k.to_string(),
                serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap(),
            );
        }
    }
    out
}

fn is_uuid4(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.iter().map(|p| p.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
        && s.chars().all(|c| c == '-' || c.is_ascii_hexdigit())
        && parts[2].starts_with('4')
}

/// A path with torchrun's random directory names (`torchelastic_XXXXXXXX`, `<run id>_XXXXXXXX`) and
/// the side's own directory replaced, so both launchers' paths compare.
fn normalize_path(p: &str, side: &Path, run_id: &str) -> String {
    let mut s = p.replace(&side.display().to_string(), "<side>");
    for prefix in ["torchelastic_".to_string(), format!("{run_id}_")] {
        if let Some(i) = s.find(&prefix) {
            let start = i + prefix.len();
            let end = s[start..].find('/').map_or(s.len(), |e| start + e);
            s.replace_range(start..end, "X");
        }
    }
    s.replace(run_id, "<run id>")
}

/// Files under `dir`, relative and normalized, with their contents.
fn tree(dir: &Path, side: &Path, run_id: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let rel = normalize_path(&p.display().to_string(), side, run_id);
            if p.is_dir() {
                out.insert(format!("{rel}/"), String::new());
                stack.push(p);
            } else {
                out.insert(rel, std::fs::read_to_string(&p).unwrap_or_default());
            }
        }
    }
    out
}

/// The probe's lines a launcher printed, each with the header before it if any (`[default0]:`).
/// Found by their text rather than by line: torchrun's workers write straight to the terminal, where
/// two ranks' unheaded lines can run into each other (accel-launch relays whole lines).
fn rank_lines(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for marker in ["out rank ", "err rank "] {
        for (i, _) in text.match_indices(marker) {
            let rest = &text[i + marker.len()..];
            let rank: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let rest = &rest[rank.len()..];
            let Some(rest) = rest.strip_prefix(" attempt ") else {
                continue;
            };
            let attempt: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let before = &text[..i];
            let header = match before.strip_suffix("]:") {
                Some(b) => b.rfind('[').map_or("", |j| &before[j..]),
                None => "",
            };
            out.insert(format!("{header}{marker}{rank} attempt {attempt}"));
        }
    }
    out
}

/// How a case runs its probe.
#[derive(Clone, Copy)]
enum Script {
    /// `trprobe.py OUT [MODE]`
    Path,
    /// `-m trprobe OUT`
    Module,
    /// `--no-python ./trprobe.py OUT`
    NoPython,
}

struct Case {
    name: &'static str,
    /// The launchers' environment beyond the test's own (torchrun's `PET_<OPTION>` defaults).
    env: &'static [(&'static str, &'static str)],
    /// torchrun's flags; `{port}` is a free port, `{node}` the launcher's node rank.
    flags: &'static [&'static str],
    /// Launchers started side by side (node ranks 0..n).
    launchers: u32,
    script: Script,
    mode: &'static str,
    /// torchrun's local c10d rendezvous: MASTER_PORT is the launcher's own, the run id a UUID.
    local: bool,
    /// The case has a --log_dir `logs`, compared file by file.
    logs: bool,
    /// Files the real torchrun must have written (normalized), so the comparison is not of nothing.
    files: &'static [&'static str],
    /// Console lines the real torchrun must have printed.
    lines: &'static [&'static str],
}

const CASES: &[Case] = &[
    // Kubeflow Trainer's way: torchrun's flags as PET_<OPTION> variables, none on the command line.
    Case {
        name: "pet_variables",
        env: &[
            ("PET_NPROC_PER_NODE", "2"),
            ("PET_STANDALONE", "1"),
            ("PET_ROLE", "trainer"),
            ("PET_MAX_RESTARTS", "2"),
            ("PET_LOG_DIR", "logs"),
            ("PET_TEE", "3"),
        ],
        flags: &[],
        launchers: 1,
        script: Script::Path,
        mode: "fail_first",
        local: true,
        logs: true,
        files: &[
            "<side>/logs/<run id>_X/attempt_0/0/stdout.log",
            "<side>/logs/<run id>_X/attempt_1/1/stderr.log",
        ],
        lines: &["[trainer1]:out rank 1 attempt 1"],
    },
    Case {
        name: "standalone",
        env: &[],
        flags: &["--standalone", "--nproc-per-node", "2"],
        launchers: 1,
        script: Script::Path,
        mode: "",
        local: true,
        logs: false,
        files: &[],
        lines: &[],
    },
    Case {
        name: "auto",
        env: &[],
        flags: &["--nproc-per-node", "auto"],
        launchers: 1,
        script: Script::Path,
        mode: "",
        local: true,
        logs: false,
        files: &[],
        lines: &[],
    },
    Case {
        name: "cpu",
        env: &[],
        flags: &["--nproc_per_node=cpu", "--role", "trainer"],
        launchers: 1,
        script: Script::Path,
        mode: "",
        local: true,
        logs: false,
        files: &[],
        lines: &["out rank 0 attempt 0"],
    },
    Case {
        name: "two_nodes_master",
        env: &[],
        flags: &[
            "--nnodes",
            "2",
            "--node-rank",
            "{node}",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            "{port}",
            "--nproc-per-node",
            "2",
        ],
        launchers: 2,
        script: Script::Path,
        mode: "",
        local: false,
        logs: false,
        files: &[],
        lines: &[],
    },
    Case {
        name: "two_nodes_endpoint",
        env: &[],
        flags: &[
            "--nnodes=2",
            "--node_rank={node}",
            "--rdzv-endpoint",
            "127.0.0.1:{port}",
            "--rdzv-id",
            "job7",
        ],
        launchers: 2,
        script: Script::Path,
        mode: "",
        local: false,
        logs: false,
        files: &[],
        lines: &[],
    },
    Case {
        name: "max_restarts",
        env: &[],
        flags: &[
            "--nproc-per-node",
            "2",
            "--max-restarts",
            "2",
            "--log-dir",
            "logs",
        ],
        launchers: 1,
        script: Script::Path,
        mode: "fail_first",
        local: true,
        logs: true,
        files: &[
            "<side>/logs/<run id>_X/attempt_0/1/",
            "<side>/logs/<run id>_X/attempt_1/1/",
        ],
        lines: &["out rank 1 attempt 1"],
    },
    Case {
        name: "redirects_tee",
        env: &[],
        flags: &[
            "--nproc-per-node",
            "2",
            "--log-dir",
            "logs",
            "-r",
            "3",
            "-t",
            "3",
            "--duplicate-stdout-filters",
            "rank 0",
        ],
        launchers: 1,
        script: Script::Path,
        mode: "",
        local: true,
        logs: true,
        files: &[
            "<side>/logs/<run id>_X/attempt_0/0/stdout.log",
            "<side>/logs/<run id>_X/attempt_0/1/stderr.log",
            "<side>/logs/<run id>_X/attempt_0/filtered_stdout.log",
        ],
        lines: &[
            "[default0]:out rank 0 attempt 0",
            "[default1]:err rank 1 attempt 0",
        ],
    },
    Case {
        name: "local_ranks_filter",
        env: &[],
        flags: &[
            "--nproc-per-node",
            "2",
            "--log-dir",
            "logs",
            "--tee",
            "0:3,1:2",
            "--redirects",
            "0:1",
            "--local-ranks-filter",
            "1",
            "--duplicate-stderr-filters",
            "err,,x,rank 1",
        ],
        launchers: 1,
        script: Script::Path,
        mode: "",
        local: true,
        logs: true,
        files: &[
            "<side>/logs/<run id>_X/attempt_0/0/stdout.log",
            "<side>/logs/<run id>_X/attempt_0/filtered_stderr.log",
        ],
        lines: &["[default1]:err rank 1 attempt 0", "out rank 1 attempt 0"],
    },
    Case {
        name: "local_addr",
        env: &[],
        flags: &["--nproc-per-node", "2", "--local-addr", "127.0.0.1"],
        launchers: 1,
        script: Script::Path,
        mode: "",
        local: true,
        logs: false,
        files: &[],
        lines: &[],
    },
    Case {
        name: "run_path",
        env: &[],
        flags: &["--nproc-per-node", "2", "--run-path"],
        launchers: 1,
        script: Script::Path,
        mode: "",
        local: true,
        logs: false,
        files: &[],
        lines: &[],
    },
    Case {
        name: "module",
        env: &[],
        flags: &["--nproc-per-node", "2", "-m"],
        launchers: 1,
        script: Script::Module,
        mode: "",
        local: true,
        logs: false,
        files: &[],
        lines: &[],
    },
    Case {
        name: "no_python",
        env: &[],
        flags: &[
            "--nproc-per-node",
            "2",
            "--no-python",
            "--master-port",
            "{port}",
        ],
        launchers: 1,
        script: Script::NoPython,
        mode: "",
        local: false,
        logs: false,
        files: &[],
        lines: &[],
    },
];

/// One side of a case: the launchers' commands.
fn commands(case: &Case, program: &Path, side: &Path, port: u16) -> Vec<Command> {
    let out = side.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::copy(fixture("torchrun/trprobe.py"), side.join("trprobe.py")).unwrap();
    (0..case.launchers)
        .map(|node| {
            let mut c = base(program, side, None);
            c.envs(case.env.iter().copied());
            for f in case.flags {
                c.arg(
                    f.replace("{port}", &port.to_string())
                        .replace("{node}", &node.to_string()),
                );
            }
            match case.script {
                Script::Path => c.arg("trprobe.py"),
                Script::Module => c.arg("trprobe"),
                Script::NoPython => c.arg("./trprobe.py"),
            };
            c.arg("out");
            if !case.mode.is_empty() {
                c.arg(case.mode);
            }
            c
        })
        .collect()
}

/// Runs one side's launchers to their end: (stdout, stderr) of each.
fn run_side(mut cmds: Vec<Command>) -> Result<Vec<(String, String)>, String> {
    let children: Vec<_> = cmds
        .iter_mut()
        .map(|c| {
            c.marked()
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .start()
        })
        .collect();
    let mut outs = Vec::new();
    for ch in children {
        let o = ch.output_within(Duration::from_secs(200));
        let (so, se) = (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        );
        if !o.status.success() {
            return Err(format!(
                "exit {:?}\n--- stdout\n{so}\n--- stderr\n{se}",
                o.status
            ));
        }
        outs.push((so, se));
    }
    Ok(outs)
}

/// One rank's record under both launchers: its environment but for the documented, per-run values,
/// its argv and module name. `ids` are the run ids, `ports` the free ports each side was given.
fn compare_rank(
    case: &Case,
    k: &str,
    (vt, va): (&Value, &Value),
    (idt, ida): (&str, &str),
    [pt, pa]: [u16; 2],
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut p = |m: String| problems.push(m);
    let env = |v: &Value| -> BTreeMap<String, String> {
        v["env"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
            .collect()
    };
    let (mut et, mut ea) = (env(vt), env(va));
    // Documented: accel has no agent store (rank 0 hosts the TCPStore).
    if et.remove("TORCHELASTIC_USE_AGENT_STORE").as_deref() != Some("True")
        || ea.remove("TORCHELASTIC_USE_AGENT_STORE").is_some()
    {
        p(format!("rank {k}: TORCHELASTIC_USE_AGENT_STORE"));
    }
    // Per run: the error file's random directories.
    let (eft, efa) = (
        et.remove("TORCHELASTIC_ERROR_FILE").unwrap_or_default(),
        ea.remove("TORCHELASTIC_ERROR_FILE").unwrap_or_default(),
    );
    let (nt, na) = (
        normalize_path(&eft, Path::new("<side>"), idt),
        normalize_path(&efa, Path::new("<side>"), ida),
    );
    if nt != na || !nt.ends_with("error.json") {
        p(format!(
            "rank {k}: TORCHELASTIC_ERROR_FILE torchrun {eft} ({nt}) / accel-launch {efa} ({na})"
        ));
    }
    if case.local {
        // Per run: the local rendezvous' port and UUID run id.
        for (who, e) in [("torchrun", &mut et), ("accel-launch", &mut ea)] {
            let id = e.remove("TORCHELASTIC_RUN_ID").unwrap_or_default();
            let port = e.remove("MASTER_PORT").unwrap_or_default();
            if !is_uuid4(&id) || port.parse::<u16>().is_err() {
                p(format!(
                    "rank {k}: {who} run id {id:?} / port {port:?} (want a UUID and a port)"
                ));
            }
        }
    } else if case.launchers == 1 {
        // The port of each side's own launcher.
        et.remove("MASTER_PORT");
        ea.remove("MASTER_PORT");
    } else {
        for e in [&mut et, &mut ea] {
            let port = e.remove("MASTER_PORT");
            if port.as_deref() != Some(&pt.to_string()) && port.as_deref() != Some(&pa.to_string())
            {
                p(format!("rank {k}: MASTER_PORT {port:?}"));
            }
        }
    }
    let keys: BTreeSet<&String> = et.keys().chain(ea.keys()).collect();
    for key in keys {
        if et.get(key) != ea.get(key) {
            p(format!(
                "rank {k}: {key}: torchrun {:?} / accel-launch {:?}",
                et.get(key),
                ea.get(key)
            ));
        }
    }
    for field in ["argv", "name", "path0"] {
        if vt[field] != va[field] {
            p(format!(
                "rank {k}: {field}: torchrun {} / accel-launch {}",
                vt[field], va[field]
            ));
        }
    }
    problems
}

/// One case of the matrix, torchrun and accel-launch side by side: what differs, one line each.
fn compare_case(case: &Case, root: &Path) -> Vec<String> {
    let dir = root.join(case.name);
    let (t, a) = (dir.join("torchrun"), dir.join("accel"));
    let (pt, pa) = (crate::util::free_port(), crate::util::free_port());
    let (ct, ca) = (
        commands(case, &torchrun(), &t, pt),
        commands(case, &bin("accel-launch"), &a, pa),
    );
    let (rt, ra) = std::thread::scope(|s| {
        let ht = s.spawn(|| run_side(ct));
        let ha = s.spawn(|| run_side(ca));
        (ht.join().unwrap(), ha.join().unwrap())
    });
    let (ot, oa) = match (rt, ra) {
        (Ok(ot), Ok(oa)) => (ot, oa),
        (rt, ra) => {
            return vec![format!(
                "{}: torchrun {} / accel-launch {}",
                case.name,
                rt.err().unwrap_or_else(|| "ok".into()),
                ra.err().unwrap_or_else(|| "ok".into())
            )]
        }
    };
    let mut problems = Vec::new();
    let mut p = |m: String| problems.push(format!("{}: {m}", case.name));
    let (rt, ra) = (records(&t.join("out")), records(&a.join("out")));
    if rt.keys().collect::<Vec<_>>() != ra.keys().collect::<Vec<_>>() || rt.is_empty() {
        p(format!(
            "ranks.attempts differ: torchrun {:?} / accel-launch {:?}",
            rt.keys(),
            ra.keys()
        ));
        return problems;
    }
    let run_id = |r: &BTreeMap<String, Value>| {
        r.values().next().unwrap()["env"]["TORCHELASTIC_RUN_ID"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let (idt, ida) = (run_id(&rt), run_id(&ra));
    // Each side runs in a directory of its own (HOME, TMPDIR, the script's path): named alike.
    let side_free = |v: &Value, side: &Path| -> Value {
        serde_json::from_str(&v.to_string().replace(&side.display().to_string(), "<side>")).unwrap()
    };
    for (k, vt) in &rt {
        let (vt, va) = (&side_free(vt, &t), &side_free(&ra[k], &a));
        let ports = [pt, pa];
        for m in compare_rank(case, k, (vt, va), (&idt, &ida), ports) {
            p(m);
        }
    }
    if case.logs {
        let (lt, la) = (
            tree(&t.join("logs"), &t, &idt),
            tree(&a.join("logs"), &a, &ida),
        );
        for f in case.files {
            if !lt.contains_key(*f) {
                p(format!("torchrun wrote no {f}: {lt:?}"));
            }
        }
        if lt != la {
            p(format!("log files: torchrun {lt:?}\n  accel-launch {la:?}"));
        } else {
            eprintln!("{}: log files {:?}", case.name, lt.keys());
        }
    }
    // The console: each launcher's rank lines, on the same stream, headed the same way.
    for (i, name) in ["stdout", "stderr"].into_iter().enumerate() {
        let pick = |o: &Vec<(String, String)>| -> BTreeSet<String> {
            o.iter()
                .flat_map(|(so, se)| rank_lines(if i == 0 { so } else { se }))
                .collect()
        };
        let (ct, ca) = (pick(&ot), pick(&oa));
        for l in case.lines {
            if i == usize::from(l.contains("err rank")) && !ct.contains(*l) {
                p(format!("torchrun printed no `{l}` on {name}: {ct:?}"));
            }
        }
        if ct != ca {
            p(format!(
                "console {name}: torchrun {ct:?} / accel-launch {ca:?}"
            ));
        }
    }
    problems
}

/// For each torchrun command line of the matrix, torchrun and accel-launch side by side: every rank's
/// environment equals torchrun's but for the run's own values (the error file's random directories;
/// with torchrun's local rendezvous, its port and UUID run id) and TORCHELASTIC_USE_AGENT_STORE
/// (documented: rank 0 hosts the store); argv and module name equal; the log files have torchrun's
/// names and contents; the console shows the same rank lines on the same streams.
#[test]
fn torchrun_command_lines_give_torchruns_world() {
    let d = tempfile::tempdir().unwrap();
    let mut problems = Vec::new();
    // Two cases at a time: each starts torchrun's agents (importing torch) beside accel-launch.
    for pair in CASES.chunks(2) {
        let found: Vec<Vec<String>> = std::thread::scope(|s| {
            let hs: Vec<_> = pair
                .iter()
                .map(|c| s.spawn(|| compare_case(c, d.path())))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        problems.extend(found.into_iter().flatten());
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A directory with a stand-in `nvidia-smi` of `pcis.len()` GPUs (index, name, memory, driver, UUID,
/// PCI bus id), as tests/resolution.rs's.
fn fake_smi(dir: &Path, pcis: &[&str]) -> PathBuf {
    let bin = dir.join(format!("smi{}", pcis.len()));
    std::fs::create_dir_all(&bin).unwrap();
    let mut lines = String::new();
    for (i, pci) in pcis.iter().enumerate() {
        lines.push_str(&format!(
            "echo '{i}, NVIDIA H200, 143771, 570.86.15, GPU-{i:04}aaaa, {pci}'\n"
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

const FOUR: &[&str] = &[
    "00000000:1B:00.0",
    "00000000:1C:00.0",
    "00000000:9A:00.0",
    "00000000:9B:00.0",
];

fn dry_json(c: &mut Command) -> Value {
    let o = c.output_within(WAIT);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `--virtual_local_rank` with 4 GPUs: each rank's LOCAL_RANK and CUDA_VISIBLE_DEVICES as the real
/// torchrun sets them (without CUDA_VISIBLE_DEVICES, and with a reordered one); the real local rank
/// stays in `${local_rank}`, the log directory and the error file; `--nproc_per_node gpu` counts the
/// stand-in's GPUs (torchrun needs CUDA for it, which this machine lacks).
#[test]
fn virtual_local_rank_gives_each_rank_its_gpu_as_device_0() {
    let d = tempfile::tempdir().unwrap();
    let smi = fake_smi(d.path(), FOUR);
    // Both orders, torchrun and accel-launch, all at once.
    let variants = [None, Some("3,1,2,0")];
    let mut started = Vec::new();
    for (n, visible) in variants.iter().enumerate() {
        for (who, program) in [("torchrun", torchrun()), ("accel", bin("accel-launch"))] {
            let side = d.path().join(format!("{n}{who}"));
            std::fs::create_dir_all(side.join("out")).unwrap();
            let mut c = base(&program, &side, Some(&smi));
            if let Some(v) = visible {
                c.env("CUDA_VISIBLE_DEVICES", v);
            }
            c.args([
                "--nproc-per-node",
                "4",
                "--virtual-local-rank",
                "--log-dir",
                "logs",
            ])
            .arg(fixture("torchrun/trprobe.py"))
            .args(["out", "--tag=${local_rank}"]);
            started.push((side, c.marked().start()));
        }
    }
    let mut got = Vec::new();
    for (side, ch) in started {
        assert!(ch.output_within(Duration::from_secs(200)).status.success());
        got.push(records(&side.join("out")));
    }
    for (n, visible) in variants.iter().enumerate() {
        let (t, a) = (&got[2 * n], &got[2 * n + 1]);
        for r in 0..4 {
            let k = format!("{r}.0");
            let want_gpu =
                visible.map_or(r.to_string(), |v| v.split(',').nth(r).unwrap().to_string());
            for (who, v) in [("torchrun", &t[&k]), ("accel-launch", &a[&k])] {
                assert_eq!(v["env"]["LOCAL_RANK"], "0", "{who} rank {r}");
                assert_eq!(
                    v["env"]["CUDA_VISIBLE_DEVICES"],
                    want_gpu.as_str(),
                    "{who} rank {r}"
                );
                assert_eq!(v["argv"][2], format!("--tag={r}"), "{who} rank {r}");
                let ef = v["env"]["TORCHELASTIC_ERROR_FILE"].as_str().unwrap();
                assert!(
                    ef.ends_with(&format!("attempt_0/{r}/error.json")),
                    "{who}: {ef}"
                );
            }
        }
    }
    // `gpu` counts the visible GPUs, and a rank without a GPU in the list is refused as torchrun does.
    let v = dry_json(base(&bin("accel-launch"), d.path(), Some(&smi)).args([
        "--dry-run",
        "--json",
        "--nproc-per-node",
        "gpu",
        "--virtual-local-rank",
        "x.py",
    ]));
    let ranks = v["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 4);
    assert_eq!(ranks[3]["env"]["CUDA_VISIBLE_DEVICES"], "3");
    let o = base(&bin("accel-launch"), d.path(), Some(&smi))
        .env("CUDA_VISIBLE_DEVICES", "0,1")
        .args([
            "--dry-run",
            "--nproc-per-node",
            "3",
            "--virtual-local-rank",
            "x.py",
        ])
        .output_within(WAIT);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("local rank 2 has no GPU"));
}

/// A fake sysfs tree: 2 NUMA nodes on one socket, 16 physical cores with 2 threads each (CPU c and
/// c+16), node 0 cores 0-7, node 1 cores 8-15, a last-level cache per 4 cores; core 15 is not
/// allowed (so node 1 has 7 cores and a 3-core complex); GPUs 0,1,4,5 on node 0 and 2,3,6,7 on node 1.
fn fake_sysfs(root: &Path, pcis: &[String]) {
    let w = |rel: &str, text: &str| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w(
        "proc/self/status",
        "Name:\taccel-launch\nCpus_allowed:\t7fff7fff\nCpus_allowed_list:\t0-14,16-30\n",
    );
    w("sys/devices/system/node/possible", "0-1\n");
    w("sys/devices/system/node/node0/cpulist", "0-7,16-23\n");
    w("sys/devices/system/node/node1/cpulist", "8-15,24-31\n");
    for cpu in 0..32 {
        let core = cpu % 16;
        let base = format!("sys/devices/system/cpu/cpu{cpu}");
        w(
            &format!("{base}/topology/thread_siblings_list"),
            &format!("{core},{}\n", core + 16),
        );
        w(&format!("{base}/topology/physical_package_id"), "0\n");
        let ccx = core / 4 * 4;
        for (i, (kind, level, shared)) in [
            ("Data", 1, format!("{core},{}", core + 16)),
            ("Instruction", 1, format!("{core},{}", core + 16)),
            ("Unified", 2, format!("{core},{}", core + 16)),
            (
                "Unified",
                3,
                format!("{}-{},{}-{}", ccx, ccx + 3, ccx + 16, ccx + 19),
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let c = format!("{base}/cache/index{i}");
            w(&format!("{c}/type"), &format!("{kind}\n"));
            w(&format!("{c}/level"), &format!("{level}\n"));
            w(&format!("{c}/shared_cpu_list"), &format!("{shared}\n"));
        }
    }
    for (i, pci) in pcis.iter().enumerate() {
        let node = if matches!(i, 0 | 1 | 4 | 5) { 0 } else { 1 };
        w(
            &format!("sys/bus/pci/devices/{pci}/numa_node"),
            &format!("{node}\n"),
        );
    }
}

/// torch's own binding code on a tree, for each (mode, GPUs in CUDA order) in one interpreter: GPU
/// index → its CPU list, or `error: …`.
fn torch_binding(root: &Path, specs: &[(&str, Vec<String>)]) -> Vec<BTreeMap<usize, String>> {
    let o = Command::new(venv_bin().join("python"))
        .arg(fixture("torchrun/numa_reference.py"))
        .arg(root)
        .args(specs.iter().map(|(m, p)| format!("{m}:{}", p.join(","))))
        .output_within(WAIT);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let v: BTreeMap<String, String> = serde_json::from_str(l).unwrap();
            v.into_iter()
                .map(|(k, v)| (k.parse().unwrap(), v))
                .collect()
        })
        .collect()
}

/// `--numa_binding` on the fake tree, each mode, with and without a reordered CUDA_VISIBLE_DEVICES:
/// each rank's CPU list (`--dry-run --json`) is the one torch 2.13's `torch/numa/binding.py` computes
/// on the same tree for the GPU of its local rank.
#[test]
fn numa_binding_per_mode_matches_torchs_own_code() {
    let d = tempfile::tempdir().unwrap();
    let smi_ids: Vec<String> = [0x1b, 0x1c, 0x3d, 0x3e, 0x9a, 0x9b, 0xbc, 0xbd]
        .iter()
        .map(|b| format!("00000000:{b:02X}:00.0"))
        .collect();
    let sysfs_ids: Vec<String> = smi_ids
        .iter()
        .map(|s| format!("0000:{}:00.0", s[9..11].to_ascii_lowercase()))
        .collect();
    let root = d.path().join("root");
    fake_sysfs(&root, &sysfs_ids);
    let smi = fake_smi(
        d.path(),
        &smi_ids.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let modes = ["node", "socket", "exclusive", "core-complex"];
    let visibles = [None, Some("7,6,5,4,3,2,1,0")];
    let mut specs = Vec::new();
    for visible in visibles {
        let order: Vec<usize> = match visible {
            None => (0..8).collect(),
            Some(v) => v.split(',').map(|x| x.parse().unwrap()).collect(),
        };
        for mode in modes {
            specs.push((mode, order.iter().map(|i| sysfs_ids[*i].clone()).collect()));
        }
    }
    let mut wants = torch_binding(&root, &specs).into_iter();
    let mut compared = 0;
    for visible in visibles {
        for mode in modes {
            let want = wants.next().unwrap();
            let mut c = base(&bin("accel-launch"), d.path(), Some(&smi));
            c.env("ACCEL_SYSFS_ROOT", &root);
            if let Some(v) = visible {
                c.env("CUDA_VISIBLE_DEVICES", v);
            }
            let v = dry_json(c.args([
                "--dry-run",
                "--json",
                "--nproc-per-node",
                "8",
                "--numa-binding",
                mode,
                "x.py",
            ]));
            for r in v["ranks"].as_array().unwrap() {
                let lr = r["local_rank"].as_u64().unwrap() as usize;
                assert_eq!(
                    r["numa_cpus"].as_str().unwrap(),
                    want[&lr],
                    "{mode}, CUDA_VISIBLE_DEVICES {visible:?}, local rank {lr}"
                );
                compared += 1;
            }
            eprintln!("{mode} {visible:?}: {want:?}");
        }
    }
    assert_eq!(compared, 64);
    // With accelerate's enable_cpu_affinity, the binding wins: accelerate would pin each rank's main
    // thread again when it starts.
    for numa in [false, true] {
        let mut c = base(&bin("accel-launch"), d.path(), Some(&smi));
        c.env("ACCEL_SYSFS_ROOT", &root).args([
            "--dry-run",
            "--json",
            "--multi_gpu",
            "--num_processes",
            "8",
            "--enable_cpu_affinity",
        ]);
        if numa {
            c.args(["--numa-binding", "node"]);
        }
        let o = c.arg("x.py").output_within(WAIT);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        for r in v["ranks"].as_array().unwrap() {
            assert_eq!(
                r["env"].get("ACCELERATE_CPU_AFFINITY").is_some(),
                !numa,
                "{r}"
            );
            assert_eq!(r.get("numa_cpus").is_some(), numa, "{r}");
        }
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.contains("replaces enable_cpu_affinity"), numa, "{err}");
    }
}

/// The binding applied for real on this machine's one NUMA node: a tree that is this machine's own
/// /sys and /proc plus two stand-in GPUs on it; each rank's Cpus_allowed_list (read by the rank from
/// /proc/self/status) is what torch's code computes there, per mode, and a mode torch cannot bind on
/// this machine is refused by accel-launch too (exit 125).
#[test]
fn numa_binding_is_applied_to_each_rank() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    std::fs::create_dir_all(root.join("sys/bus/pci/devices")).unwrap();
    std::os::unix::fs::symlink("/sys/devices", root.join("sys/devices")).unwrap();
    std::os::unix::fs::symlink("/proc", root.join("proc")).unwrap();
    let sysfs_ids = vec!["0000:e1:00.0".to_string(), "0000:e2:00.0".to_string()];
    for id in &sysfs_ids {
        let dir = root.join("sys/bus/pci/devices").join(id);
        std::fs::create_dir_all(&dir).unwrap();
        // One node: the driver reports no node, which torch reads as node 0.
        std::fs::write(dir.join("numa_node"), "-1\n").unwrap();
    }
    let smi = fake_smi(d.path(), &["00000000:E1:00.0", "00000000:E2:00.0"]);
    let modes = ["node", "exclusive", "core-complex", "socket"];
    let specs: Vec<_> = modes.iter().map(|m| (*m, sysfs_ids.clone())).collect();
    let wants = torch_binding(&root, &specs);
    let mut applied = 0;
    for (mode, want) in modes.into_iter().zip(wants) {
        let side = d.path().join(mode);
        std::fs::create_dir_all(side.join("out")).unwrap();
        let o = base(&bin("accel-launch"), &side, Some(&smi))
            .env("ACCEL_SYSFS_ROOT", &root)
            .args(["--nproc-per-node", "2", "--numa-binding", mode])
            .arg(fixture("torchrun/trprobe.py"))
            .arg("out")
            .output_within(WAIT);
        let err = String::from_utf8_lossy(&o.stderr);
        if want.values().any(|w| w.starts_with("error")) {
            assert_eq!(
                o.status.code(),
                Some(125),
                "{mode}: torch says {want:?}; {err}"
            );
            assert!(err.contains(&format!("--numa_binding {mode}")), "{err}");
            eprintln!("{mode}: refused as torch refuses it: {want:?} / {err}");
            continue;
        }
        assert!(o.status.success(), "{mode}: {err}");
        let got = records(&side.join("out"));
        for lr in 0..2usize {
            assert_eq!(
                got[&format!("{lr}.0")]["cpus"],
                want[&lr].as_str(),
                "{mode} rank {lr}"
            );
            applied += 1;
        }
        eprintln!("{mode}: {want:?}");
    }
    assert!(applied >= 2, "no mode could bind here");
}

/// Waits until `path` exists (a rank's mark), at most 120 s.
fn wait_for(path: &Path) {
    let t = Instant::now();
    while !path.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "{} never came",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill(pid: u32, sig: i32) {
    // SAFETY: a signal to a child this test started.
    unsafe { libc::kill(pid as i32, sig) };
}

/// `--signals_to_handle SIGUSR1`: SIGUSR2 (forwarded by default) is not forwarded any more, SIGUSR1 is
/// forwarded and stops the run as torchrun's agent does; the ranks see the set in
/// TORCHELASTIC_SIGNALS_TO_HANDLE. A stop signal it does not name still stops the run, with SIGTERM.
#[test]
fn signals_to_handle_forwards_only_what_it_names() {
    let d = tempfile::tempdir().unwrap();
    for (n, last, seen) in [(0, libc::SIGUSR1, "SIGUSR1"), (1, libc::SIGINT, "SIGTERM")] {
        let side = d.path().join(n.to_string());
        let out = side.join("out");
        std::fs::create_dir_all(&out).unwrap();
        let ch = base(&bin("accel-launch"), &side, None)
            .args(["--nproc-per-node", "2", "--signals-to-handle", "SIGUSR1"])
            .arg(fixture("torchrun/trprobe.py"))
            .args(["out", "signals"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .start();
        let _reaper = crate::util::proc::Reaper(ch.id() as i32);
        wait_for(&out.join("ready.0"));
        wait_for(&out.join("ready.1"));
        kill(ch.id(), libc::SIGUSR2);
        // Time for a forwarded SIGUSR2 to be recorded before the next signal ends the ranks.
        std::thread::sleep(Duration::from_secs(1));
        kill(ch.id(), last);
        let o = ch.output_within(WAIT);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("SIGUSR2 not forwarded"), "{err}");
        for r in 0..2 {
            assert!(
                !out.join(format!("sig.{r}.SIGUSR2")).exists(),
                "rank {r} got SIGUSR2"
            );
            assert!(
                out.join(format!("sig.{r}.{seen}")).exists(),
                "rank {r} lacks {seen}: {err}"
            );
            let rec = &records(&out)[&format!("{r}.0")];
            assert_eq!(rec["env"]["TORCHELASTIC_SIGNALS_TO_HANDLE"], "SIGUSR1");
        }
        assert!(!out.join("sig.0.SIGINT").exists());
        assert_eq!(o.status.code(), Some(128 + last), "{err}");
    }
}

/// `--shutdown_timeout 7` (and TORCH_ELASTIC_SHUTDOWN_TIMEOUT=7) is the grace of a drill: a rank that
/// ignores SIGTERM lives on 7 s after it (its heartbeats say so), then SIGKILL ends it, well before
/// the default 30 s. With a different --grace_period it is refused, naming both.
#[test]
fn shutdown_timeout_is_the_grace_period() {
    let d = tempfile::tempdir().unwrap();
    let drill = |n: usize, flag: bool| {
        let side = d.path().join(n.to_string());
        let out = side.join("out");
        std::fs::create_dir_all(&out).unwrap();
        let mut c = base(&bin("accel-launch"), &side, None);
        if flag {
            c.args(["--shutdown-timeout", "7"]);
        } else {
            c.env("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7");
        }
        let mut ch = c
            .args(["--nproc-per-node", "1", "--report_json", "report.json"])
            .arg(fixture("torchrun/trprobe.py"))
            .args(["out", "hold_term"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .start();
        let _reaper = crate::util::proc::Reaper(ch.id() as i32);
        wait_for(&out.join("ready.0"));
        kill(ch.id(), libc::SIGTERM);
        let status = ch.wait_within(WAIT);
        let num = |name: &str| -> f64 {
            std::fs::read_to_string(out.join(name))
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .trim()
                .parse()
                .unwrap()
        };
        let lived = num("beat.0") - num("term.0");
        let report: Value =
            serde_json::from_str(&std::fs::read_to_string(side.join("report.json")).unwrap())
                .unwrap();
        (status.code(), lived, report["ranks"][0]["signal"].clone())
    };
    let results: Vec<_> = std::thread::scope(|s| {
        let hs = [s.spawn(|| drill(0, true)), s.spawn(|| drill(1, false))];
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (code, lived, signal) in results {
        assert_eq!(code, Some(128 + libc::SIGTERM));
        assert_eq!(signal, libc::SIGKILL, "the rank was SIGKILLed");
        // Beats every 0.2 s: alive through the 7 s grace, and killed long before 30 s.
        assert!(
            (6.5..25.0).contains(&lived),
            "lived {lived} s after SIGTERM"
        );
        eprintln!("lived {lived:.2} s after SIGTERM");
    }
    let o = base(&bin("accel-launch"), d.path(), None)
        .args(["--grace_period", "5", "--shutdown-timeout", "7", "x.py"])
        .output_within(WAIT);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("`--grace_period 5`") && err.contains("`--shutdown_timeout 7`"),
        "{err}"
    );
}

fn dry(dir: &Path, args: &[&str]) -> std::process::Output {
    base(&bin("accel-launch"), dir, None)
        .arg("--dry-run")
        .args(args)
        .output_within(WAIT)
}

/// Contradicting mixes of accelerate's and torchrun's flags are usage errors naming both; what
/// accel-launch cannot do is refused with the reason; an elastic node range is handed to torchrun.
#[test]
fn contradictions_and_refusals_are_named() {
    let d = tempfile::tempdir().unwrap();
    for (args, want) in [
        (
            &["--num_machines", "2", "--nnodes", "3", "x.py"][..],
            &["`--num_machines 2`", "`--nnodes 3`"][..],
        ),
        (
            &[
                "--machine_rank",
                "1",
                "--node-rank",
                "0",
                "--num_machines",
                "2",
                "--main_process_ip",
                "h",
                "x.py",
            ],
            &["`--machine_rank 1`", "`--node_rank 0`"],
        ),
        (
            &[
                "--main_process_port",
                "1234",
                "--master-port",
                "4321",
                "x.py",
            ],
            &["`--main_process_port 1234`", "`--master_port 4321`"],
        ),
        (
            &[
                "--master-addr",
                "a",
                "--rdzv-endpoint",
                "b:5",
                "--nnodes",
                "2",
                "x.py",
            ],
            &["`--master_addr a`", "`--rdzv_endpoint b`"],
        ),
        (
            &["--num_processes", "4", "--nproc-per-node", "2", "x.py"],
            &["`--num_processes 4`", "`--nproc_per_node 2`"],
        ),
        (&["--nnodes", "1:2", "x.py"], &["elastic range"]),
        (
            &["--start-method", "fork", "--run-path", "x.py"],
            &["--start_method fork is not supported"],
        ),
        (
            &["--start-method", "thread", "x.py"],
            &["invalid value 'thread'"],
        ),
        (
            &["--logs-specs", "mine", "x.py"],
            &["--logs_specs mine is not supported", "Python code"],
        ),
        (
            &["--standalone", "--nnodes", "2", "x.py"],
            &["--standalone runs one node"],
        ),
        (
            &["--signals-to-handle", "SIGKILL", "x.py"],
            &["SIGKILL cannot be caught"],
        ),
        (
            &["--rdzv-endpoint", "h", "--nnodes", "2", "x.py"],
            &["has no port"],
        ),
        (
            &["-r", "3", "--log_template", "{rank}.{stream}", "x.py"],
            &["--log_template"],
        ),
    ] {
        let o = dry(d.path(), args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        for w in want {
            assert!(err.contains(w), "{args:?}: {err}");
        }
    }
    // Agreeing flags are fine; a range with an elastic backend runs torchrun with it.
    let o = dry(
        d.path(),
        &[
            "--num_machines",
            "2",
            "--nnodes",
            "2",
            "--node-rank",
            "1",
            "--master-addr",
            "10.0.0.1",
            "x.py",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = dry(
        d.path(),
        &[
            "--nnodes",
            "1:3",
            "--nproc-per-node",
            "2",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            "h:29400",
            "--rdzv-id",
            "j",
            "x.py",
        ],
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        text.contains("# delegated to")
            && text.contains("--nnodes 1:3")
            && text.contains("--rdzv-id j"),
        "{text}"
    );
    assert!(
        !text.contains("ACCELERATE_"),
        "only torchrun's flags: no accelerate variables: {text}"
    );
}

/// The static rendezvous' `--rdzv_conf timeout=9` is the join timeout, unless --rdzv_timeout says.
#[test]
fn rdzv_conf_timeout_is_the_static_join_timeout() {
    let d = tempfile::tempdir().unwrap();
    let port = crate::util::free_port().to_string();
    for (extra, want) in [(&[][..], 9.0), (&["--rdzv_timeout", "4"][..], 4.0)] {
        let mut args = vec![
            "--json",
            "--nnodes",
            "2",
            "--node-rank",
            "0",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            &port,
            "--rdzv-conf",
            "timeout=9",
        ];
        args.extend(extra);
        args.push("x.py");
        let o = dry(d.path(), &args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            v["launch"]["control_plane"]["join_timeout_s"], want,
            "{extra:?}"
        );
    }
}

/// Only torchrun's flags: no ACCELERATE_* variable and no config file, not even the default one;
/// a config file or an accelerate flag brings accelerate's variables back.
#[test]
fn only_torchrun_flags_read_no_config_and_export_no_accelerate_variables() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d
        .path()
        .join(".cache/huggingface/accelerate/default_config.yaml");
    std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    std::fs::write(
        &cfg,
        "distributed_type: MULTI_CPU\nnum_processes: 3\nmixed_precision: bf16\nuse_cpu: true\n",
    )
    .unwrap();
    let ranks = |args: &[&str]| -> Vec<BTreeMap<String, String>> {
        let mut all = vec!["--json"];
        all.extend(args);
        let o = dry(d.path(), &all);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        v["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| serde_json::from_value(r["env"].clone()).unwrap())
            .collect()
    };
    let only = ranks(&["--nproc-per-node", "2", "x.py"]);
    assert_eq!(only.len(), 2);
    for env in &only {
        assert!(env.keys().all(|k| !k.starts_with("ACCELERATE_")), "{env:?}");
        assert_eq!(env["OMP_NUM_THREADS"], "1");
    }
    // One rank under torchrun still gets the contract.
    assert_eq!(ranks(&["--standalone", "x.py"])[0]["WORLD_SIZE"], "1");
    let mixed = ranks(&["--nproc-per-node", "2", "--mixed_precision", "fp16", "x.py"]);
    assert_eq!(mixed[0]["ACCELERATE_MIXED_PRECISION"], "fp16");
    let default_file = ranks(&["x.py"]);
    assert_eq!(default_file.len(), 3);
    assert_eq!(default_file[0]["ACCELERATE_MIXED_PRECISION"], "bf16");
}

/// Every option of the installed torchrun's parser (`torch/distributed/run.py::get_args_parser`, each
/// `--flag` in each spelling it has, and its short options) is an option of accel-launch.
#[test]
fn every_torchrun_flag_is_accepted_in_both_spellings() {
    let site = repo().join(".venv/lib");
    let run_py = std::fs::read_dir(&site)
        .unwrap()
        .map(|e| {
            e.unwrap()
                .path()
                .join("site-packages/torch/distributed/run.py")
        })
        .find(|p| p.is_file())
        .expect("torch/distributed/run.py in the venv");
    let src = std::fs::read_to_string(run_py).unwrap();
    // The parser itself, not the module docstring's example of a training script's own parser.
    let start = src.find("def get_args_parser").expect("get_args_parser");
    let end = start + src[start..].find("\ndef parse_args").expect("parse_args");
    let mut theirs = BTreeSet::new();
    for call in src[start..end].split("parser.add_argument(").skip(1) {
        let mut rest = call.trim_start();
        while let Some(s) = rest.strip_prefix('"') {
            let end = s.find('"').unwrap();
            if s[..end].starts_with('-') {
                theirs.insert(s[..end].to_string());
            } else {
                break;
            }
            rest = s[end + 1..]
                .trim_start()
                .trim_start_matches(',')
                .trim_start();
        }
    }
    assert!(theirs.len() > 40, "parser not found: {theirs:?}");
    let cmd = <accel::cli::launch::LaunchCli as clap::CommandFactory>::command();
    let mut ours = BTreeSet::new();
    for a in cmd.get_arguments() {
        if let Some(l) = a.get_long() {
            ours.insert(format!("--{l}"));
        }
        for alias in a.get_all_aliases().unwrap_or_default() {
            ours.insert(format!("--{alias}"));
        }
        if let Some(s) = a.get_short() {
            ours.insert(format!("-{s}"));
        }
    }
    let missing: Vec<&String> = theirs.iter().filter(|f| !ours.contains(*f)).collect();
    assert!(
        missing.is_empty(),
        "torchrun flags accel-launch lacks: {missing:?}"
    );
    eprintln!("{} torchrun options, all accepted", theirs.len());
}

/// torchrun's `PET_<OPTION>` variables are torchrun's command line (issue 41 item 10): without any
/// flag they give torchrun's run (its rank count, role, restarts, no accelerate variable); a flag
/// given wins over its variable; an accelerate flag makes the run accelerate's, which reads none of
/// them but Kubeflow's placement; a value its flag refuses is refused naming the variable.
#[test]
fn pet_variables_are_torchruns_command_line() {
    let d = tempfile::tempdir().unwrap();
    let ranks = |pet: &[(&str, &str)],
                 args: &[&str]|
     -> (Option<i32>, Vec<BTreeMap<String, String>>, String) {
        let mut c = base(&bin("accel-launch"), d.path(), None);
        c.envs(pet.iter().copied())
            .args(["--dry-run", "--json"])
            .args(args)
            .arg("x.py");
        let o = c.output_within(WAIT);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        let envs = serde_json::from_slice::<Value>(&o.stdout)
            .ok()
            .and_then(|v| v["ranks"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .map(|r| serde_json::from_value(r["env"].clone()).unwrap())
            .collect();
        (o.status.code(), envs, err)
    };
    let pet = [
        ("PET_NPROC_PER_NODE", "3"),
        ("PET_STANDALONE", "1"),
        ("PET_ROLE", "trainer"),
        ("PET_MAX_RESTARTS", "2"),
    ];
    let (code, envs, err) = ranks(&pet, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(envs.len(), 3, "PET_NPROC_PER_NODE=3: {envs:?}");
    for e in &envs {
        assert_eq!(e["ROLE_NAME"], "trainer");
        assert_eq!(e["TORCHELASTIC_MAX_RESTARTS"], "2");
        assert!(is_uuid4(&e["TORCHELASTIC_RUN_ID"]), "standalone: {e:?}");
        assert!(
            e.keys()
                .all(|k| !k.starts_with("ACCELERATE_") && !k.starts_with("KMP_")),
            "torchrun sets no accelerate variable: {e:?}"
        );
    }
    // A flag given wins over its variable.
    let (code, envs, err) = ranks(&pet, &["--nproc-per-node", "2", "--role", "r"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!((envs.len(), envs[0]["ROLE_NAME"].as_str()), (2, "r"));
    // accelerate's run (an accelerate flag): none of them but the placement.
    let (code, envs, err) = ranks(&pet, &["--num_processes", "2", "--cpu"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(envs.len(), 2);
    assert_eq!(envs[0]["ROLE_NAME"], "default");
    assert_eq!(envs[0]["ACCELERATE_USE_CPU"], "True");
    // Refused naming the variable.
    let (code, _, err) = ranks(&[("PET_TEE", "9")], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("invalid PET_TEE"), "{err}");
}
