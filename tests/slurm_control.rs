//! The control-plane drills of tests/control.rs under the real local SLURM cluster (the one
//! tests/slurm.rs starts and shares): `srun -N2 --ntasks-per-node=1 accel-launch` starts one launcher
//! per node, each in its own network namespace with its own host name (n1, n2), and they meet on n1.
//! The ranks are tests/fixtures/launch/control.py's real gloo ranks, 2 per node.

#[allow(unused_imports)]
use crate::util::{ChildExt as _, CommandExt as _, WAIT};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::control::{all_gone, now, ready, wait_for};
use crate::slurm::{job_field, slurm, text};

const GRACE: u64 = 3;

/// One launcher per node of a 2-node step, its ranks writing into `out`.
fn srun(d: &Path, out: &Path, mode: &str, extra: &[&str]) -> Child {
    slurm("srun", d)
        .args(["-N2", "--ntasks-per-node=1", "--time=5", "accel-launch"])
        .args(["--grace_period", &GRACE.to_string()])
        .args(extra)
        .arg(crate::util::fixture("launch/control.py"))
        .arg(out)
        .arg(mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .start()
}

fn out_dir(d: &Path) -> PathBuf {
    let out = d.join("out");
    std::fs::create_dir(&out).unwrap();
    out
}

fn read(out: &Path, name: &str) -> String {
    std::fs::read_to_string(out.join(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .trim()
        .to_string()
}

/// Rank 3 (on n2) exits 7 while every other rank sleeps outside any collective: both launchers exit
/// 7, so srun and SLURM's record of the job say 7, n1's launcher names the failing rank and node, and
/// every process of the run on both nodes is gone within grace + 3 s of the failure.
#[test]
fn srun_a_rank_failing_on_node_1_stops_every_node() {
    let d = crate::util::tempdir();
    let out = out_dir(d.path());
    let child = srun(d.path(), &out, "fail", &[]);
    ready(&out, 0);
    wait_for(&out, &["fail.time".to_string()], Duration::from_secs(60));
    let gone_at = all_gone(&out, Duration::from_secs(GRACE + 60));
    let o = child.output_within(WAIT);
    let all = text(&o);
    let failed_at: f64 = read(&out, "fail.time").parse().unwrap();
    assert_eq!(o.status.code(), Some(7), "{all}");
    assert!(
        all.contains("rank 3 (local rank 1) on node 1 (n2) exited with status 7"),
        "{all}"
    );
    assert!(
        all.contains("n1: task 0: Exited with exit code 7"),
        "node 0's launcher exits with the rank's code: {all}"
    );
    let job: u32 = read(&out, "job.0.0").parse().unwrap();
    assert_eq!(job_field(d.path(), job, "ExitCode"), "7:0");
    let took = gone_at - failed_at;
    eprintln!("srun, rank failing on node 1: every process gone {took:.2} s after the failure");
    assert!(
        took < (GRACE + 3) as f64,
        "every process gone {took:.2} s after the failure (grace {GRACE} s)"
    );
}

/// n2's launcher SIGKILLed: n1's launcher sees its connection close, stops its ranks and exits 122
/// naming the lost node; n2's ranks go with their launcher's guards. Nothing of the run survives.
#[test]
fn srun_a_sigkilled_launcher_on_node_1_stops_node_0() {
    let d = crate::util::tempdir();
    let out = out_dir(d.path());
    let child = srun(d.path(), &out, "sleep", &[]);
    ready(&out, 0);
    // Rank 2 is node 1's first; its parent is node 1's launcher (same pid namespace as the test).
    let launcher = read(&out, "launcher.2.0");
    let killed_at = now();
    Command::new("kill")
        .args(["-9", &launcher])
        .status_within(WAIT);
    let gone_at = all_gone(&out, Duration::from_secs(GRACE + 60));
    let o = child.output_within(WAIT);
    let all = text(&o);
    assert!(all.contains("node 1 (n2) was lost"), "{all}");
    assert!(
        all.contains("n1: task 0: Exited with exit code 122"),
        "node 0's launcher exits 122: {all}"
    );
    assert!(!o.status.success(), "{all}");
    let took = gone_at - killed_at;
    eprintln!("srun, node 1's launcher SIGKILLed: every process gone {took:.2} s after");
    assert!(
        took < (GRACE + 3) as f64,
        "every process gone {took:.2} s after the SIGKILL (grace {GRACE} s)"
    );
}

/// `--max_restarts 1` and rank 2 (on n2) failing in attempt 0 only: both nodes restart together, and
/// attempt 1 all-reduces over all 4 ranks with TORCHELASTIC_RESTART_COUNT=1 on every one.
#[test]
fn srun_max_restarts_restarts_both_nodes_together() {
    let d = crate::util::tempdir();
    let out = out_dir(d.path());
    let o = srun(d.path(), &out, "restart", &["--max_restarts", "1"]).output_within(WAIT);
    let all = text(&o);
    assert!(o.status.success(), "{all}");
    assert!(
        all.contains("restarting the ranks of every node (restart 1 of 1)"),
        "{all}"
    );
    for r in 0..4 {
        let v: Value = serde_json::from_str(&read(&out, &format!("rank{r}.json"))).unwrap();
        assert_eq!(v["sum"], 10.0, "rank {r}: {v}");
        assert_eq!(v["env"]["TORCHELASTIC_RESTART_COUNT"], "1", "rank {r}: {v}");
    }
    assert!(out.join("pid.0.0").exists() && out.join("pid.3.0").exists());
}

/// A connection to node 0's control port from the test's own namespace, lines read with a bound.
struct Line {
    w: std::net::TcpStream,
    r: std::io::BufReader<std::net::TcpStream>,
}

impl Line {
    fn connect(addr: &str) -> Line {
        let s = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        Line {
            w: s.try_clone().unwrap(),
            r: std::io::BufReader::new(s),
        }
    }
    fn send(&mut self, v: &Value) {
        use std::io::Write as _;
        self.w.write_all(format!("{v}\n").as_bytes()).unwrap();
    }
    fn read(&mut self) -> Option<String> {
        use std::io::BufRead as _;
        let mut l = String::new();
        match self.r.read_line(&mut l) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(l.trim_end().to_string()),
        }
    }
    fn rest(&mut self) -> Vec<String> {
        std::iter::from_fn(|| self.read()).collect()
    }
}

/// What a MUNGE proof of the control plane's handshake carries (lib/launch/control/auth.rs):
/// length-prefixed label, run id, node rank, both nonces and a 32-byte share.
fn munge_payload(
    label: &str,
    run_id: &str,
    node: u32,
    cn: &str,
    sn: &str,
    share: &[u8],
) -> Vec<u8> {
    let node = node.to_be_bytes();
    let mut v = Vec::new();
    for f in [
        label.as_bytes(),
        run_id.as_bytes(),
        &node,
        cn.as_bytes(),
        sn.as_bytes(),
        share,
    ] {
        v.extend_from_slice(&(f.len() as u32).to_be_bytes());
        v.extend_from_slice(f);
    }
    v
}

/// A credential from the cluster's munged, made by `munge` as `user` (`None`: as the test, the
/// launchers' uid).
fn munge_cred(socket: &Path, user: Option<&str>, payload: &[u8]) -> String {
    use std::io::Write as _;
    let mut c = match user {
        Some(u) => {
            let mut c = Command::new("runuser");
            c.args(["-u", u, "--", "munge"]);
            c
        }
        None => Command::new("munge"),
    };
    let mut child = c
        .arg("-S")
        .arg(socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .start();
    child.stdin.take().unwrap().write_all(payload).unwrap();
    let o = child.output_within(WAIT);
    assert!(o.status.success(), "munge: {}", text(&o));
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

const NONCE: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// Under the local SLURM cluster, with no secret set, MUNGE authenticates the launchers: node 0 says
/// so. Node 1's launcher starts 30 s after node 0's; meanwhile a stranger on node 0's control port
/// tries to join as node 1 with what it can get short of a credential of the run's uid: a credential
/// of another uid (`nobody`) with exactly the expected payload, node 0's own credential reflected
/// back, a forged one, one of our uid made for another challenge, and that one again (replayed).
/// Each is refused and noted with the stranger's address, none is sent the world's layout, and the
/// run completes: exit 0, all_reduce right on all 4 ranks.
#[test]
fn srun_node_1_30_s_late_joins_and_strangers_without_a_munge_credential_of_the_uid_change_nothing()
{
    let d = crate::util::tempdir();
    let out = out_dir(d.path());
    let cluster_dir = crate::slurm::cluster().conf.parent().unwrap().to_path_buf();
    let socket = cluster_dir.join("munge/munge.socket");
    let mut child = slurm("srun", d.path())
        .args(["-N2", "--ntasks-per-node=1", "--time=5", "sh", "-c"])
        .arg(r#"if [ "$SLURM_NODEID" = 1 ]; then sleep 30; fi; exec accel-launch "$@""#)
        .arg("sh")
        .args([
            "--grace_period",
            &GRACE.to_string(),
            "--rdzv_timeout",
            "120",
        ])
        .arg(crate::util::fixture("launch/control.py"))
        .arg(&out)
        .arg("allreduce")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .start();
    // Node 0 states the authentication in force, naming its control port.
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead as _;
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut said = Vec::new();
    let note = loop {
        let l = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| {
                panic!(
                    "node 0 never stated its authentication:\n{}",
                    said.join("\n")
                )
            });
        said.push(l.clone());
        if l.contains("admits only launchers proving uid") {
            break l;
        }
    };
    assert!(note.contains("with MUNGE"), "{note}");
    let port = note
        .split("control plane: n1:")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("{note}"));
    let hosts = std::fs::read_to_string(cluster_dir.join("hosts")).unwrap();
    let ip = hosts
        .lines()
        .find_map(|l| l.strip_suffix(" n1"))
        .unwrap_or_else(|| panic!("{hosts}"));
    let addr = format!("{ip}:{port}");
    let hello = serde_json::json!({"t": "hello", "protocol": accel::launch::control::PROTOCOL, "node": 1, "nonce": NONCE});
    let mut seen = Vec::new();
    let challenge = |seen: &mut Vec<String>| {
        let mut c = Line::connect(&addr);
        c.send(&hello);
        let ch = c.read().expect("node 0 answered no challenge");
        seen.push(ch.clone());
        let v: Value = serde_json::from_str(&ch).unwrap();
        assert_eq!(v["auth"], "munge", "{ch}");
        (c, v)
    };
    let prove = |c: &mut Line, cred: &str, seen: &mut Vec<String>| {
        c.send(&serde_json::json!({"t": "prove", "proof": cred}));
        let rest = c.rest();
        assert!(
            rest.iter().any(|l| l.contains("failed authentication")),
            "{rest:?}"
        );
        seen.extend(rest);
    };
    // Another uid's credential, with exactly the payload node 0 expects.
    let (mut c, v) = challenge(&mut seen);
    let run_id = v["run_id"].as_str().unwrap().to_string();
    let expected = |v: &Value| {
        munge_payload(
            "accel-launch control client",
            &run_id,
            1,
            NONCE,
            v["nonce"].as_str().unwrap(),
            &[7u8; 32],
        )
    };
    let nobody = munge_cred(&socket, Some("nobody"), &expected(&v));
    prove(&mut c, &nobody, &mut seen);
    // Node 0's own credential, reflected back.
    let (mut c, v) = challenge(&mut seen);
    let own = v["proof"].as_str().unwrap().to_string();
    prove(&mut c, &own, &mut seen);
    // A forged one.
    let (mut c, _) = challenge(&mut seen);
    prove(&mut c, "MUNGE:AGQBAAAAforged+credential=:", &mut seen);
    // One of the run's uid, but made for another challenge; then the same again.
    let (mut c, v) = challenge(&mut seen);
    let mut other = v.clone();
    other["nonce"] = Value::from("ff".repeat(32));
    let stale = munge_cred(&socket, None, &expected(&other));
    prove(&mut c, &stale, &mut seen);
    let (mut c, _) = challenge(&mut seen);
    prove(&mut c, &stale, &mut seen);
    for l in &seen {
        assert!(
            !l.contains("\"start\"") && !l.contains("world_size") && !l.contains("rank_offset"),
            "a stranger was sent the world's layout: {l}"
        );
    }
    let o = child.output_within(WAIT);
    reader.join().unwrap();
    said.extend(rx.try_iter());
    let all = format!("{}\nstderr:\n{}", text(&o), said.join("\n"));
    assert_eq!(o.status.code(), Some(0), "{all}");
    for r in 0..4 {
        let v: Value = serde_json::from_str(&read(&out, &format!("rank{r}.json"))).unwrap();
        assert_eq!(v["sum"], 10.0, "rank {r}: {v}");
    }
    for why in [
        "is of uid 65534, not this run's uid 0",
        "is not for this handshake",
        "refused by munged",
    ] {
        assert!(all.contains(why), "no refusal saying {why:?}:\n{all}");
    }
    assert!(all.contains("control plane: refused 10."), "{all}");
}
