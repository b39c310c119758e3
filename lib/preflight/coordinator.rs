//! The coordinator: starts this machine's ranks (accel-test itself in worker mode), reads their events,
//! prints the report as it comes, and makes sure nothing outlives it — every rank runs in its own
//! process group, dies with the coordinator (PDEATHSIG), and is killed when the world has failed and
//! the timeout for the survivors to report is over.

use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::report::{Event, RankEnd, Report};
use super::world::{Device, World};
use super::PreflightError;
use crate::env_vars::{self, Environment};
use crate::exit_status::ExitStatus;

/// What every worker is asked to do, as worker-mode arguments.
#[derive(Debug, Clone)]
pub struct WorkerArgs {
    pub args: Vec<String>,
}

/// A started rank.
pub struct Rank {
    pub rank: usize,
    pub child: Child,
}

/// The rank contract of local rank `local`: exactly what accel-launch exports (the contract module's
/// torchrun worker variables), plus CUDA_VISIBLE_DEVICES from gpu_ids.
pub fn contract_env(
    world: &World,
    port: u16,
    local: usize,
    env: &Environment,
) -> crate::contract::EnvMap {
    let topology = crate::contract::Topology {
        local_world_size: world.nproc_per_node as u32,
        node_rank: world.machine_rank as u32,
        num_nodes: world.num_machines as u32,
        master_addr: world.master_addr.clone(),
        master_port: port,
        run_id: "none".into(),
        role: "default".into(),
        max_restarts: 0,
    };
    let mut vars = crate::contract::worker_env(&topology, local as u32, 0, None, env);
    if let Some(ids) = &world.gpu_ids {
        vars.insert(env_vars::CUDA_VISIBLE_DEVICES.to_string(), ids.clone());
    }
    vars
}

/// Starts this machine's ranks. The one place that spawns them: when the library launcher lands, this
/// becomes a call to it with the worker command.
pub fn spawn_local_ranks(
    world: &World,
    port: u16,
    exe: &Path,
    worker: &WorkerArgs,
    env: &Environment,
) -> Result<Vec<Rank>, PreflightError> {
    let mut ranks = Vec::new();
    for local in 0..world.nproc_per_node {
        let mut cmd = Command::new(exe);
        cmd.arg("--worker")
            .args(&worker.args)
            .envs(contract_env(world, port, local, env))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0);
        // torchrun's default for several ranks on one machine; libtorch's INFO chatter stays quiet.
        if env.get(env_vars::OMP_NUM_THREADS).is_none() && world.nproc_per_node > 1 {
            cmd.env(env_vars::OMP_NUM_THREADS, "1");
        }
        if env.get(env_vars::TORCH_CPP_LOG_LEVEL).is_none() {
            cmd.env(env_vars::TORCH_CPP_LOG_LEVEL, "ERROR");
        }
        // SAFETY: prctl is async-signal-safe; it only asks the kernel to kill the rank with us.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        match cmd.spawn() {
            Ok(child) => ranks.push(Rank {
                rank: world.global_rank(local),
                child,
            }),
            Err(e) => {
                kill_all(&mut ranks);
                return Err(PreflightError::Spawn(exe.display().to_string(), e));
            }
        }
    }
    Ok(ranks)
}

/// Kills every rank's process group and reaps the ranks.
pub fn kill_all(ranks: &mut [Rank]) {
    for r in ranks.iter() {
        let _ = killpg(Pid::from_raw(r.child.id() as i32), Signal::SIGKILL);
    }
    for r in ranks.iter_mut() {
        let _ = r.child.wait();
    }
}

enum Msg {
    Line(usize, String),
    Eof(usize),
}

/// Runs the world's local ranks to the end and prints the report. `what` describes the world for the
/// verdict line.
pub fn supervise(
    world: &World,
    worker: &WorkerArgs,
    env: &Environment,
    timeout: Duration,
    json: bool,
    out: &mut dyn FnMut(&str) -> crate::error::Result<()>,
) -> crate::error::Result<ExitStatus> {
    let start = Instant::now();
    let port = match world.master_port {
        Some(p) => p,
        None => super::network::free_port().map_err(PreflightError::Port)?,
    };
    let backend = if world.device == Device::Cuda {
        "nccl"
    } else {
        "gloo"
    };
    let what = format!(
        "{} rank(s) on machine {} of {}, {}, {}:{}",
        world.nproc_per_node,
        world.machine_rank,
        world.num_machines,
        backend,
        world.master_addr,
        port
    );
    if !json {
        out(&format!(
            "accel-test: world of {} rank(s) on {} machine(s); this machine {} runs ranks {}..{} on {} ({}); master {}:{}; timeout {} s\n",
            world.world_size(),
            world.num_machines,
            world.machine_rank,
            world.global_rank(0),
            world.global_rank(world.nproc_per_node) - 1,
            world.device.name(),
            backend,
            world.master_addr,
            port,
            timeout.as_secs_f64()
        ))?;
    }
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, Arc::clone(&interrupted));
    }
    let exe = std::env::current_exe().map_err(PreflightError::Exe)?;
    let mut ranks = spawn_local_ranks(world, port, &exe, worker, env)?;
    let (tx, rx) = mpsc::channel();
    for (i, r) in ranks.iter_mut().enumerate() {
        if let Some(stdout) = r.child.stdout.take() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    match line {
                        Ok(l) => {
                            if tx.send(Msg::Line(i, l)).is_err() {
                                return;
                            }
                        }
                        Err(_) => break,
                    }
                }
                let _ = tx.send(Msg::Eof(i));
            });
        }
    }
    drop(tx);
    let mut report = Report::new(ranks.iter().map(|r| r.rank).collect(), world.world_size());
    let mut ended = vec![false; ranks.len()];
    let mut eof = vec![false; ranks.len()];
    let idle_limit = timeout + Duration::from_secs(15);
    let mut last_activity = Instant::now();
    // Once something failed, the survivors get one timeout to say so.
    let mut grace: Option<Instant> = None;
    let mut killed = false;
    let mut was_interrupted = false;
    loop {
        let mut text = String::new();
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(Msg::Line(i, line)) => {
                last_activity = Instant::now();
                match serde_json::from_str::<Event>(&line) {
                    Ok(ev) => {
                        if matches!(
                            ev,
                            Event::Check { ok: false, .. } | Event::Done { ok: false, .. }
                        ) && grace.is_none()
                        {
                            grace = Some(Instant::now() + timeout + Duration::from_secs(5));
                        }
                        text.push_str(&report.add(ev));
                    }
                    // Anything else a rank prints (a library's chatter) goes to stderr, marked.
                    Err(_) => eprintln!("[rank {}] {line}", ranks[i].rank),
                }
            }
            Ok(Msg::Eof(i)) => eof[i] = true,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => eof.iter_mut().for_each(|e| *e = true),
        }
        for (i, r) in ranks.iter_mut().enumerate() {
            if ended[i] || !eof[i] {
                continue;
            }
            if let Ok(Some(status)) = r.child.try_wait() {
                ended[i] = true;
                last_activity = Instant::now();
                let end = match (status.code(), status.signal()) {
                    (Some(c), _) => RankEnd::Exited(c),
                    (None, Some(_)) if killed => RankEnd::Killed,
                    (None, Some(s)) => RankEnd::Signaled(s),
                    _ => RankEnd::Exited(-1),
                };
                if end != RankEnd::Exited(0) && grace.is_none() {
                    grace = Some(Instant::now() + timeout + Duration::from_secs(5));
                }
                text.push_str(&report.ended(r.rank, end));
            }
        }
        if !text.is_empty() && !json {
            out(&text)?;
        }
        if ended.iter().all(|e| *e) {
            break;
        }
        if interrupted.load(Ordering::Relaxed) {
            was_interrupted = true;
        }
        let now = Instant::now();
        let give_up = was_interrupted
            || grace.is_some_and(|g| now >= g)
            || now.duration_since(last_activity) >= idle_limit;
        if give_up && !killed {
            if !was_interrupted {
                let why = if grace.is_some_and(|g| now >= g) {
                    format!(
                        "ranks still running {:.0} s after the first failure were killed",
                        timeout.as_secs_f64() + 5.0
                    )
                } else {
                    format!(
                        "no rank made progress for {:.0} s",
                        idle_limit.as_secs_f64()
                    )
                };
                report.notes.push(why);
            }
            killed = true;
            for r in ranks.iter() {
                let _ = killpg(Pid::from_raw(r.child.id() as i32), Signal::SIGKILL);
            }
            // Readers end when the pipes close; mark them so the exits are collected.
            eof.iter_mut().for_each(|e| *e = true);
        }
    }
    kill_all(&mut ranks);
    let rest = report.flush(true);
    let seconds = start.elapsed().as_secs_f64();
    if json {
        out(&json_report(&report, world, port, backend, seconds))?;
    } else {
        out(&rest)?;
        out(&report.verdict(seconds, &what))?;
    }
    if was_interrupted {
        return Ok(ExitStatus::Interrupted);
    }
    Ok(if report.passed() {
        ExitStatus::Success
    } else {
        ExitStatus::Failure
    })
}

fn json_report(report: &Report, world: &World, port: u16, backend: &str, seconds: f64) -> String {
    let checks: Vec<serde_json::Value> = report
        .checks
        .iter()
        .map(|c| {
            let missing: Vec<usize> = report
                .ranks
                .iter()
                .copied()
                .filter(|r| !c.ranks.contains_key(r))
                .collect();
            serde_json::json!({
                "name": c.name,
                "ok": c.ok() && missing.is_empty(),
                "ranks": c.ranks.iter().map(|(r, (ok, detail, ms))| serde_json::json!({
                    "rank": r, "ok": ok, "detail": detail, "ms": ms
                })).collect::<Vec<_>>(),
                "missing_ranks": missing,
            })
        })
        .collect();
    let ends: serde_json::Map<String, serde_json::Value> = report
        .ends
        .iter()
        .map(|(r, e)| (r.to_string(), serde_json::Value::from(e.to_string())))
        .collect();
    let doc = serde_json::json!({
        "verdict": if report.passed() { "PASS" } else { "FAIL" },
        "seconds": seconds,
        "world": {
            "world_size": world.world_size(),
            "num_machines": world.num_machines,
            "machine_rank": world.machine_rank,
            "local_ranks": report.ranks,
            "device": world.device.name(),
            "backend": backend,
            "master_addr": world.master_addr,
            "master_port": port,
        },
        "checks": checks,
        "bench": report.bench,
        "rank_ends": ends,
        "notes": report.notes,
    });
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
    s.push('\n');
    s
}
