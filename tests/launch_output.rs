//! What accel-launch does with its ranks' output, with real python ranks: whole lines on the console
//! however the ranks interleave, floods and endless lines relayed in linear time, and log files that
//! never collide and never overwrite an earlier run's.

#[allow(unused_imports)]
use crate::util::{ChildExt as _, CommandExt as _, WAIT};
use std::collections::BTreeSet;
use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::util::{tempdir, Run};

fn launch(home: &Path) -> Run {
    Run::new("accel-launch", home).args(["--cpu"])
}

/// Ranks that print `rank R step I xxxx` in several writes each (unbuffered print: one write per
/// argument and separator), all at once.
const CHATTY: &str = r#"
import os, sys
r = os.environ["RANK"]
for i in range(int(sys.argv[1])):
    print("rank", r, "step", i, "x" * (i % 97))
"#;

/// Every console line is one whole line of one rank, and every line of every rank is there.
fn assert_whole_lines(out: &str, prefix: impl Fn(u32) -> String, ranks: u32, steps: u32) {
    let mut seen = BTreeSet::new();
    let mut broken = Vec::new();
    for line in out.lines() {
        let ok = (0..ranks).find_map(|r| {
            let rest = line.strip_prefix(&prefix(r))?;
            let mut f = rest.split(' ');
            let (Some("rank"), Some(rr), Some("step"), Some(i)) =
                (f.next(), f.next(), f.next(), f.next())
            else {
                return None;
            };
            let i: u32 = i.parse().ok()?;
            let x = f.next().unwrap_or("");
            (rr == r.to_string() && f.next().is_none() && x == "x".repeat((i % 97) as usize))
                .then_some((r, i))
        });
        match ok {
            Some(k) => {
                seen.insert(k);
            }
            None => broken.push(line.to_string()),
        }
    }
    assert!(
        broken.is_empty(),
        "{} broken lines, e.g. {:?}",
        broken.len(),
        &broken[..broken.len().min(3)]
    );
    assert_eq!(seen.len() as u32, ranks * steps, "lines went missing");
}

#[test]
fn concurrent_ranks_never_cut_each_others_lines() {
    let d = tempdir();
    let script = d.path().join("chatty.py");
    std::fs::write(&script, CHATTY).unwrap();
    let (ranks, steps) = (4, 2000);
    for run in 0..8 {
        let out = launch(d.path())
            .env("PYTHONUNBUFFERED", "1")
            .args(["--num_processes", &ranks.to_string()])
            .arg(&script)
            .arg(steps.to_string())
            .run();
        out.success();
        assert_whole_lines(&out.stdout, |_| String::new(), ranks, steps);
        if run == 0 {
            // With a prefix too, every line is whole and carries its own rank's prefix.
            let out = launch(d.path())
                .env("PYTHONUNBUFFERED", "1")
                .args(["--num_processes", &ranks.to_string()])
                .args(["--rank_prefix", "[{rank}] "])
                .arg(&script)
                .arg(steps.to_string())
                .run();
            out.success();
            assert_whole_lines(&out.stdout, |r| format!("[{r}] "), ranks, steps);
        }
    }
}

#[test]
fn an_unfinished_line_reaches_the_console_after_a_short_delay() {
    let d = tempdir();
    let seen = d.path().join("seen");
    // A progress bar's redraw, then the rank waits (at most 60 s) for the test to have seen it.
    let script = format!(
        r#"
import os, sys, time
sys.stdout.write("\rprogress 50%"); sys.stdout.flush()
t = time.time()
while not os.path.exists({seen:?}) and time.time() - t < 60:
    time.sleep(0.05)
sys.stdout.write("\rprogress 100%\n")
"#,
        seen = seen.to_str().unwrap()
    );
    let script_file = d.path().join("progress.py");
    std::fs::write(&script_file, script).unwrap();
    for prefix in [None, Some("[{rank}] ")] {
        let _ = std::fs::remove_file(&seen);
        let mut cmd = crate::util::launcher(d.path());
        cmd.args(["--cpu", "--num_processes", "1"])
            .args(prefix.map(|p| ["--rank_prefix", p]).into_iter().flatten())
            .arg(&script_file)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.start();
        let mut stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        let mut got = Vec::new();
        let until = Instant::now() + Duration::from_secs(30);
        while !String::from_utf8_lossy(&got).contains("progress 50%") {
            match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(b) => got.extend(b),
                Err(_) => {
                    std::fs::write(&seen, "").unwrap();
                    crate::util::proc::kill_tree(child.id() as i32);
                    let _ = child.wait();
                    panic!(
                        "the unfinished line never reached the console: {:?}",
                        String::from_utf8_lossy(&got)
                    );
                }
            }
        }
        std::fs::write(&seen, "").unwrap();
        while let Ok(b) = rx.recv_timeout(Duration::from_secs(60)) {
            got.extend(b);
        }
        assert!(child.wait_within(WAIT).success());
        let text = String::from_utf8_lossy(&got).into_owned();
        let want = match prefix {
            None => "\rprogress 50%\rprogress 100%\n",
            Some(_) => "\r[0] progress 50%\r[0] progress 100%\n",
        };
        assert_eq!(text, want);
    }
}

/// Runs accel-launch with `args`, reading its stdout, and samples the launcher's own CPU time
/// (utime + stime in /proc/PID/stat) and peak resident memory (VmHWM) until it exits: what the relay
/// costs, apart from the ranks'.
fn relay_cost(home: &Path, args: &[&str]) -> (String, f64, u64) {
    let mut child = crate::util::launcher(home)
        .current_dir(home)
        .arg("--cpu")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .start();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        stdout.read_to_end(&mut out).unwrap();
        String::from_utf8_lossy(&out).into_owned()
    });
    let tick = 100.0; // sysconf(_SC_CLK_TCK) on Linux
    let (mut cpu, mut hwm) = (0.0, 0);
    let stat = format!("/proc/{}/stat", child.id());
    let status = format!("/proc/{}/status", child.id());
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if let Ok(s) = std::fs::read_to_string(&stat) {
            // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
            let f: Vec<&str> = s[s.rfind(')').unwrap() + 2..].split(' ').collect();
            let t: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
            cpu = t / tick;
        }
        if let Ok(s) = std::fs::read_to_string(&status) {
            if let Some(kib) = s.lines().find_map(|l| l.strip_prefix("VmHWM:")) {
                hwm = kib.trim().trim_end_matches(" kB").parse().unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(code, Some(0), "accel-launch {args:?}");
    (reader.join().unwrap(), cpu, hwm)
}

/// The relay's cost grows linearly with what it relays and its memory stays bounded: a 200 MB line
/// without a newline (before: the whole line was buffered, and a rescan per read never finished; the
/// rank blocked on its pipe) and 800k `\r` redraws with a prefix (before: 80k took 1.78 s of the
/// launcher's time, and it grew with the square — 800k would take minutes). Bounds on the launcher's
/// own CPU time and peak memory, 10–50× above what the linear relay takes, so load cannot fail them.
#[test]
fn a_200_mb_line_and_800k_redraws_are_relayed_in_linear_time_and_bounded_memory() {
    let d = tempdir();
    let size = 200 * 1024 * 1024;
    let big = d.path().join("big.py");
    std::fs::write(
        &big,
        format!("import sys\nsys.stdout.buffer.write(b'x' * {size})\n"),
    )
    .unwrap();
    let redraws = d.path().join("redraws.py");
    std::fs::write(
        &redraws,
        "import sys\nfor i in range(800000):\n    sys.stdout.write(f'\\r{i}')\nprint()\n",
    )
    .unwrap();
    let (out, cpu, hwm) = relay_cost(
        d.path(),
        &[
            "--num_processes",
            "1",
            "--rank_prefix",
            "[{rank}] ",
            big.to_str().unwrap(),
        ],
    );
    assert_eq!(out.len(), 4 + size + 1);
    assert!(out.starts_with("[0] xxx") && out.ends_with("xxx\n"));
    assert_eq!(out.matches("[0]").count(), 1, "one line, one prefix");
    assert!(cpu < 30.0, "the launcher spent {cpu} s CPU relaying 200 MB");
    assert!(
        hwm < 64 * 1024,
        "the launcher's peak memory relaying a 200 MB line: {hwm} KiB"
    );

    let (out, cpu, hwm) = relay_cost(
        d.path(),
        &[
            "--num_processes",
            "2",
            "--tee",
            "3",
            redraws.to_str().unwrap(),
        ],
    );
    for r in 0..2 {
        assert!(
            out.contains(&format!("[default{r}]:799999\n")),
            "rank {r}'s last redraw: {}",
            &out[out.len().saturating_sub(200)..]
        );
    }
    assert!(
        cpu < 30.0,
        "the launcher spent {cpu} s CPU on 2 × 800k redraws"
    );
    assert!(
        hwm < 64 * 1024,
        "peak memory on 2 × 800k redraws: {hwm} KiB"
    );
}

#[test]
fn log_templates_that_collide_are_refused_and_earlier_runs_are_kept() {
    let d = tempdir();
    let logs = d.path().join("logs");
    let marker = d.path().join("spawned");
    let run = |extra: &[&str]| {
        launch(d.path())
            .args(["--num_processes", "2", "--log_dir", logs.to_str().unwrap()])
            .args(extra)
            .args(["--no_python", "sh", "-c"])
            .arg(format!(
                "echo out $RANK; echo err $RANK >&2; touch {}",
                marker.display()
            ))
            .run()
    };
    for (template, missing) in [
        ("r{rank}.log", "{stream}"),
        ("{stream}.log", "{rank} or {local_rank}"),
    ] {
        run(&["--log_template", template])
            .code_is(2)
            .stderr_contains(&format!("--log_template `{template}`"))
            .stderr_contains(&format!("hint: add {missing} to the template"));
    }
    run(&["--log_template", "r{rank}.{stream}", "--max_restarts", "1"])
        .code_is(2)
        .stderr_contains("hint: add {attempt} to the template");
    assert!(
        !marker.exists(),
        "nothing may start with a colliding template"
    );

    run(&[]).success();
    let first = logs.join("attempt_0/1/stdout.log");
    assert_eq!(std::fs::read_to_string(&first).unwrap(), "out 1\n");
    std::fs::write(&first, "the first run's log\n").unwrap();
    std::fs::remove_file(&marker).unwrap();
    run(&[])
        .code_is(4)
        .stderr_contains("is left from an earlier run")
        .stderr_contains("attempt_0/0/stdout.log");
    assert!(
        !marker.exists(),
        "nothing may start over an earlier run's logs"
    );
    assert_eq!(
        std::fs::read_to_string(&first).unwrap(),
        "the first run's log\n"
    );
}

/// A rank that records what it sees of its terminal: `isatty` of stdout and stderr,
/// `shutil.get_terminal_size()` (stdout's) and stderr's size, and the SIGWINCHes it got; once when
/// started (`TAG.RANK.ready`), again once the test says the window was resized (`TAG.RANK.final`;
/// with WAIT_WINCH 1 only after a SIGWINCH came, so the size is read after the launcher forwarded it).
const TERMINAL_PROBE: &str = r#"
import json, os, shutil, signal, sys, time
out, tag, wait_winch = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
rank = os.environ["RANK"]
winch = []
signal.signal(signal.SIGWINCH, lambda *a: winch.append(1))
def state():
    return {"isatty": [os.isatty(1), os.isatty(2)], "size": list(shutil.get_terminal_size()),
            "stderr_size": list(os.get_terminal_size(2)) if os.isatty(2) else None, "winch": len(winch)}
def put(name, v):
    p = os.path.join(out, f"{tag}.{rank}.{name}")
    with open(p + ".tmp", "w") as f:
        json.dump(v, f)
    os.rename(p + ".tmp", p)
print(f"hello from rank {rank}")
print(f"warn from rank {rank}", file=sys.stderr)
sys.stdout.flush()
put("ready", state())
t = time.monotonic()
while not os.path.exists(os.path.join(out, "go")) and time.monotonic() - t < 100:
    time.sleep(0.05)
while wait_winch and not winch and time.monotonic() - t < 110:
    time.sleep(0.05)
put("final", state())
"#;

/// Kills a test's tmux server (and what runs in it) however the test ends.
struct Tmux(std::path::PathBuf);

impl Tmux {
    fn cmd(&self, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new("tmux");
        c.arg("-S").arg(&self.0).args(args);
        c
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]).output_within(WAIT);
    }
}

/// Issue 24 item 6: in a terminal, each rank sees one, as under torchrun: `isatty` true for stdout
/// and stderr and the terminal's size, following a resize (which accel-launch also forwards as
/// SIGWINCH); a stream whose output is piped stays a pipe. Run in tmux, beside the real torchrun, with
/// --tee and --log_dir on: the console lines keep their prefix and the log files get the bytes as
/// written (no `\r\n` from a terminal's output processing).
#[test]
fn in_a_terminal_ranks_see_it_as_under_torchrun_and_pipes_stay_pipes() {
    let d = tempdir();
    let dir = d.path();
    std::fs::write(dir.join("probe.py"), TERMINAL_PROBE).unwrap();
    std::fs::write(
        dir.join("tmux.conf"),
        "set -g status off\nset -g history-limit 10000\n",
    )
    .unwrap();
    let venv = crate::util::venv_bin();
    let accel = crate::util::bin("accel-launch");
    let torchrun = venv.join("torchrun");
    assert!(
        torchrun.exists(),
        "{} is missing: run scripts/setup",
        torchrun.display()
    );
    let q = |p: &Path| format!("'{}'", p.display());
    let port = || crate::util::free_port().to_string();
    let (accel, torchrun, d_) = (q(&accel), q(&torchrun), q(dir));
    // Three pairs at once in one pane: the terminal for both streams; stdout piped (stderr still
    // the terminal); both streams redirected to a file.
    let script = format!(
        "cd {d_}\nunset COLUMNS LINES\nexport PATH={venv}:$PATH\n\
         {accel} --cpu --num_processes 2 --main_process_port {p1} --tee 3 --log_dir {d_}/logs probe.py {d_} accel 1 &\n\
         {torchrun} --nproc-per-node 2 --master-port {p2} probe.py {d_} torch 0 &\n\
         {accel} --cpu --num_processes 2 --main_process_port {p3} probe.py {d_} accel_piped 0 | cat &\n\
         {torchrun} --nproc-per-node 2 --master-port {p4} probe.py {d_} torch_piped 0 | cat &\n\
         {accel} --cpu --num_processes 2 --main_process_port {p5} probe.py {d_} accel_file 0 > accel_file.out 2>&1 &\n\
         {torchrun} --nproc-per-node 2 --master-port {p6} probe.py {d_} torch_file 0 > torch_file.out 2>&1 &\n\
         wait\necho done > done\nsleep 600\n",
        venv = q(&venv),
        p1 = port(),
        p2 = port(),
        p3 = port(),
        p4 = port(),
        p5 = port(),
        p6 = port(),
    );
    std::fs::write(dir.join("run.sh"), script).unwrap();
    let tmux = Tmux(dir.join("tmux.sock"));
    let conf = dir.join("tmux.conf");
    let conf = conf.to_str().unwrap();
    let st = tmux
        .cmd(&[
            "-f",
            conf,
            "new-session",
            "-d",
            "-x",
            "150",
            "-y",
            "30",
            "sh run.sh",
        ])
        .current_dir(dir)
        .env_remove("COLUMNS")
        .env_remove("LINES")
        .env("TERM", "xterm-256color")
        .status_within(WAIT);
    assert!(st.success(), "tmux new-session: {st}");
    let tags = [
        "accel",
        "torch",
        "accel_piped",
        "torch_piped",
        "accel_file",
        "torch_file",
    ];
    let read = |tag: &str, rank: u32, what: &str| -> Option<serde_json::Value> {
        let t = std::fs::read_to_string(dir.join(format!("{tag}.{rank}.{what}"))).ok()?;
        serde_json::from_str(&t).ok()
    };
    let all = |what: &str| {
        let t = Instant::now();
        loop {
            let missing: Vec<String> = tags
                .iter()
                .flat_map(|tag| (0..2).map(move |r| (tag, r)))
                .filter(|(tag, r)| read(tag, *r, what).is_none())
                .map(|(tag, r)| format!("{tag}.{r}"))
                .collect();
            if missing.is_empty() {
                break;
            }
            assert!(
                t.elapsed() < WAIT,
                "no `{what}` from {missing:?} after {WAIT:?}; the pane:\n{}",
                String::from_utf8_lossy(
                    &tmux.cmd(&["capture-pane", "-p"]).output_within(WAIT).stdout
                )
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    all("ready");
    // The pane's size, for both launchers.
    let size = |w: u64, h: u64| serde_json::json!([w, h]);
    for r in 0..2 {
        let t = read("torch", r, "ready").unwrap();
        assert_eq!(
            t["isatty"],
            serde_json::json!([true, true]),
            "torchrun's rank {r}: {t}"
        );
        assert_eq!(t["size"], size(150, 30), "torchrun's rank {r}: {t}");
    }
    let out = tmux
        .cmd(&["resize-window", "-x", "120", "-y", "40"])
        .output_within(WAIT);
    assert!(out.status.success(), "tmux resize-window: {out:?}");
    std::fs::write(dir.join("go"), "").unwrap();
    all("final");
    let without_winch = |mut v: serde_json::Value| {
        v.as_object_mut().unwrap().remove("winch");
        v
    };
    for (ours, theirs) in [
        ("accel", "torch"),
        ("accel_piped", "torch_piped"),
        ("accel_file", "torch_file"),
    ] {
        for what in ["ready", "final"] {
            for r in 0..2 {
                let a = read(ours, r, what).unwrap();
                let t = read(theirs, r, what).unwrap();
                assert_eq!(
                    without_winch(a.clone()),
                    without_winch(t.clone()),
                    "rank {r} `{what}` under accel-launch ({ours}) and torchrun ({theirs})"
                );
            }
        }
    }
    for r in 0..2 {
        let a = read("accel", r, "final").unwrap();
        assert_eq!(a["size"], size(120, 40), "after the resize, rank {r}: {a}");
        assert!(
            a["winch"].as_u64().unwrap() >= 1,
            "SIGWINCH forwarded to rank {r}: {a}"
        );
        let p = read("accel_piped", r, "final").unwrap();
        assert_eq!(
            p["isatty"],
            serde_json::json!([false, true]),
            "piped stdout, rank {r}: {p}"
        );
        let f = read("accel_file", r, "final").unwrap();
        assert_eq!(
            f["isatty"],
            serde_json::json!([false, false]),
            "redirected, rank {r}: {f}"
        );
        // The log files get the bytes as written.
        let log = |s: &str| std::fs::read(dir.join(format!("logs/attempt_0/{r}/{s}.log"))).unwrap();
        assert_eq!(log("stdout"), format!("hello from rank {r}\n").into_bytes());
        assert_eq!(log("stderr"), format!("warn from rank {r}\n").into_bytes());
    }
    let t = Instant::now();
    while !dir.join("done").exists() {
        assert!(t.elapsed() < WAIT, "the launchers did not end");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The console lines, with --tee's prefix, whole.
    let pane = tmux
        .cmd(&["capture-pane", "-p", "-J", "-S", "-"])
        .output_within(WAIT);
    let pane = String::from_utf8_lossy(&pane.stdout);
    for r in 0..2 {
        for line in [
            format!("[default{r}]:hello from rank {r}"),
            format!("[default{r}]:warn from rank {r}"),
        ] {
            assert!(
                pane.lines().any(|l| l == line),
                "`{line}` in the pane:\n{pane}"
            );
        }
    }
    let file = std::fs::read_to_string(dir.join("accel_file.out")).unwrap();
    assert!(
        file.contains("hello from rank 0\n") && !file.contains('\r'),
        "{file:?}"
    );
}
