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
        let mut cmd = std::process::Command::new(crate::util::bin("accel-launch"));
        cmd.env_clear()
            .env(crate::util::proc::OWNER_VAR, crate::util::proc::owner())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", d.path())
            .env("ACCEL_PYTHON", crate::util::venv_python())
            .args(["--cpu", "--num_processes", "1"])
            .args(prefix.map(|p| ["--rank_prefix", p]).into_iter().flatten())
            .arg(&script_file)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().unwrap();
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
    let mut child = std::process::Command::new(crate::util::bin("accel-launch"))
        .env_clear()
        .env(crate::util::proc::OWNER_VAR, crate::util::proc::owner())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("ACCEL_PYTHON", crate::util::venv_python())
        .current_dir(home)
        .arg("--cpu")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
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
