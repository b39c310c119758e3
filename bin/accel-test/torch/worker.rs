//! One rank of the world (`accel-test --worker`): the pre-flight, the rendezvous on rank 0's TCPStore,
//! the collectives of the plan on the c10d process group, then --bench and --python. Each step is a JSON
//! event on stdout for the coordinator. Every wait is bounded by the timeout, and when a collective
//! breaks, the store tells which ranks went silent, so the report names them.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tch::{Device as TchDevice, Kind, Tensor};

use accel::env_vars::{self, Environment};
use accel::exit_status::ExitStatus;
use accel::preflight::plan::{self, Check, Collective, DType, Reduce};
use accel::preflight::report::{bandwidth, BenchRow, Event};
use accel::preflight::world::{Contract, Device};

pub use crate::torch::rank::WorkerOpts;
use crate::torch::rank::{short, since_ms, Rank};
use crate::torch::{Backend, ProcessGroup, ReduceOp, Store, TorchError};

const KEY: &str = "accel-test";

fn kind(d: DType) -> Kind {
    match d {
        DType::Float32 => Kind::Float,
        DType::Float64 => Kind::Double,
        DType::Int32 => Kind::Int,
        DType::Int64 => Kind::Int64,
        DType::BFloat16 => Kind::BFloat16,
        DType::Float16 => Kind::Half,
    }
}

fn tensor(values: &[f64], d: DType, dev: TchDevice) -> Tensor {
    Tensor::from_slice(values).to_kind(kind(d)).to_device(dev)
}

fn values(t: &Tensor) -> Result<Vec<f64>, String> {
    Vec::<f64>::try_from(
        t.to_device(TchDevice::Cpu)
            .to_kind(Kind::Double)
            .flatten(0, -1),
    )
    .map_err(|e| format!("cannot read the result back: {e}"))
}

fn compare(got: &Tensor, want: &[f64], exact: bool, part: &str) -> Result<(), String> {
    let got = values(got)?;
    match plan::first_mismatch(want, &got, exact) {
        None => Ok(()),
        Some((i, w, g)) => Err(format!("{part}element {i}: expected {w}, got {g}")),
    }
}

/// Runs one check. The outer error is a broken world (the run stops); the inner one a wrong result.
fn run_check(
    pg: &ProcessGroup,
    check: &Check,
    rank: usize,
    world: usize,
    backend: Backend,
    dev: TchDevice,
) -> Result<Result<(), String>, TorchError> {
    let d = check.dtype;
    let n = check.numel;
    let mine = || tensor(&plan::input(d, rank, n), d, dev);
    Ok(match check.collective {
        Collective::AllReduce(op) => {
            let mut t = mine();
            let native = match op {
                Reduce::Sum => ReduceOp::Sum,
                Reduce::Max => ReduceOp::Max,
                Reduce::Min => ReduceOp::Min,
                Reduce::Avg if backend == Backend::Nccl => ReduceOp::Avg,
                // Gloo has no AVG: a sum divided by the world size, as accelerate's reduce("mean").
                Reduce::Avg => ReduceOp::Sum,
            };
            pg.all_reduce(&mut t, native)?;
            if op == Reduce::Avg && backend != Backend::Nccl {
                t /= world as f64;
            }
            compare(&t, &plan::reduced(d, op, world, n), op != Reduce::Avg, "")
        }
        Collective::Reduce { root } => {
            let mut t = mine();
            pg.reduce(&mut t, root, ReduceOp::Sum)?;
            if rank == root {
                compare(&t, &plan::reduced(d, Reduce::Sum, world, n), true, "")
            } else {
                Ok(())
            }
        }
        Collective::AllGather => {
            let mut input = mine();
            let mut outs: Vec<Tensor> = (0..world)
                .map(|_| Tensor::zeros([n as i64], (kind(d), dev)))
                .collect();
            pg.all_gather(&mut outs, &mut input)?;
            outs.iter().enumerate().try_for_each(|(j, o)| {
                compare(
                    o,
                    &plan::input(d, j, n),
                    true,
                    &format!("part from rank {j}, "),
                )
            })
        }
        Collective::Gather { root } => {
            let mut input = mine();
            let mut outs: Vec<Tensor> = if rank == root {
                (0..world)
                    .map(|_| Tensor::zeros([n as i64], (kind(d), dev)))
                    .collect()
            } else {
                Vec::new()
            };
            pg.gather(&mut outs, &mut input, root)?;
            outs.iter().enumerate().try_for_each(|(j, o)| {
                compare(
                    o,
                    &plan::input(d, j, n),
                    true,
                    &format!("part from rank {j}, "),
                )
            })
        }
        Collective::Broadcast { root } => {
            let mut t = mine();
            pg.broadcast(&mut t, root)?;
            compare(&t, &plan::input(d, root, n), true, "")
        }
        Collective::Barrier => {
            pg.barrier()?;
            Ok(())
        }
    })
}

/// Ranks (other than `me`) for which none of the `keys(r)` is in the store.
fn silent(
    store: &Store,
    world: usize,
    me: usize,
    keys: impl Fn(usize) -> Vec<String>,
) -> Result<Vec<usize>, TorchError> {
    let mut out = Vec::new();
    for r in (0..world).filter(|&r| r != me) {
        let mut any = false;
        for k in keys(r) {
            if store.check(&k)? {
                any = true;
                break;
            }
        }
        if !any {
            out.push(r);
        }
    }
    Ok(out)
}

fn ranks_text(ranks: &[usize]) -> String {
    let list: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
    if ranks.len() == 1 {
        format!("rank {}", list[0])
    } else {
        format!("ranks {}", list.join(", "))
    }
}

/// After a broken collective: which ranks never reported on check `i`, waiting a little for the
/// living to say they failed too.
fn name_silent(store: &Store, c: &Contract, i: usize, timeout: Duration) -> String {
    let _ = store.set(&format!("{KEY}/failed/{i}/{}", c.rank), b"1");
    let deadline = Instant::now() + timeout.min(Duration::from_secs(5));
    loop {
        let keys = |r: usize| {
            vec![
                format!("{KEY}/done/{i}/{r}"),
                format!("{KEY}/failed/{i}/{r}"),
            ]
        };
        match silent(store, c.world_size, c.rank, keys) {
            Err(_) if c.rank != 0 => {
                return format!(
                    "rank 0, which hosts the store at {}:{}, is gone",
                    c.master_addr, c.master_port
                )
            }
            Err(e) => return format!("the store is unusable ({})", short(&e)),
            Ok(s) if s.is_empty() => {
                return "every other rank reported a failure on this check too".into()
            }
            Ok(s) if Instant::now() >= deadline => {
                return format!("no word from {} (dead or hung)", ranks_text(&s))
            }
            Ok(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// `accel-test --worker`.
pub fn run_cli(
    cli: &accel::cli::test::TestCli,
    timeout: Duration,
    env: &Environment,
) -> ExitStatus {
    let device = if cli.device == "cuda" {
        Device::Cuda
    } else {
        Device::Cpu
    };
    let opts = WorkerOpts {
        timeout,
        device,
        checks: cli.checks.clone(),
        bench: cli.bench,
        max_size: cli.max_size,
        python: cli.python,
        probe: cli.probe,
        probe_threshold: cli.probe_threshold,
    };
    run(&opts, env)
}

/// Runs this rank. Never fails: every problem is a FAIL event and exit status 1.
pub fn run(opts: &WorkerOpts, env: &Environment) -> ExitStatus {
    super::init_logging();
    let c = match Contract::from_env(env) {
        Ok(c) => c,
        Err(e) => {
            let rank = env
                .get(env_vars::RANK)
                .and_then(|r| r.parse().ok())
                .unwrap_or(0);
            let mut r = Rank {
                c: Contract {
                    rank,
                    local_rank: 0,
                    world_size: 1,
                    local_world_size: 1,
                    num_nodes: 1,
                    master_addr: String::new(),
                    master_port: 0,
                },
                opts,
                ok: true,
            };
            r.emit("preflight.contract", Err(e.to_string()), 0.0);
            let _ = accel::tools::print(&Event::Done { rank, ok: false }.to_line());
            return ExitStatus::Failure;
        }
    };
    let rank = c.rank;
    let mut r = Rank { c, opts, ok: true };
    let ok = run_rank(&mut r, env);
    let _ = accel::tools::print(&Event::Done { rank, ok }.to_line());
    if ok {
        ExitStatus::Success
    } else {
        ExitStatus::Failure
    }
}

fn device_check(r: &Rank, env: &Environment) -> Result<String, String> {
    if r.opts.device == Device::Cpu {
        return Ok("cpu tensors (gloo)".into());
    }
    let seen = tch::Cuda::device_count() as usize;
    let visible = env.get(env_vars::CUDA_VISIBLE_DEVICES);
    let listed = visible.map(|v| v.split(',').filter(|s| !s.trim().is_empty()).count());
    if seen == 0 {
        return Err(format!(
            "no CUDA device visible (CUDA_VISIBLE_DEVICES={})",
            visible.unwrap_or("<unset>")
        ));
    }
    if let Some(n) = listed {
        if n != seen {
            return Err(format!(
                "CUDA_VISIBLE_DEVICES={} lists {n} device(s) but {seen} are visible",
                visible.unwrap_or("")
            ));
        }
    }
    if r.c.local_rank >= seen {
        return Err(format!(
            "LOCAL_RANK {} has no device: only {seen} visible",
            r.c.local_rank
        ));
    }
    if r.c.local_world_size > seen {
        return Err(format!(
            "{} ranks on this machine share {seen} device(s)",
            r.c.local_world_size
        ));
    }
    Ok(format!("cuda:{} of {seen} visible", r.c.local_rank))
}

fn run_rank(r: &mut Rank, env: &Environment) -> bool {
    let c = r.c.clone();
    let Some(addrs) = preflight(r, &c, env) else {
        return false;
    };
    let Some(store) = open_store(r, &c, &addrs) else {
        return false;
    };
    let (backend, dev) = if r.opts.device == Device::Cuda {
        (Backend::Nccl, TchDevice::Cuda(c.local_rank))
    } else {
        (Backend::Gloo, TchDevice::Cpu)
    };
    let Some(pg) = rendezvous(r, &c, env, &store, backend) else {
        return false;
    };
    if let Err(dead) = collectives(r, &c, &pg, &store, backend, dev) {
        finish(r, &store, &dead);
        return false;
    }
    if r.opts.bench && r.ok {
        if let Err(e) = bench(r, &pg, dev) {
            r.emit("bench", Err(short(&e)), 0.0);
        }
    }
    if let Some(parts) = r.opts.probe {
        probe_if_all_passed(r, &pg, &store, dev, parts);
    }
    drop(pg);
    if r.opts.python && r.ok {
        python_check(r, env);
    }
    finish(r, &store, &[]);
    r.ok
}

/// The pre-flight: MASTER_ADDR resolves, is not loopback on a multi-machine job, and the devices
/// are there. Returns MASTER_ADDR's addresses when the rank can go on.
fn preflight(r: &mut Rank, c: &Contract, env: &Environment) -> Option<Vec<SocketAddr>> {
    let host = &c.master_addr;
    let t = Instant::now();
    let addrs = accel::preflight::network::resolve(host, c.master_port, r.opts.timeout);
    let resolved = r.emit(
        "preflight.resolve",
        addrs
            .as_ref()
            .map(|a| {
                let mut ips: Vec<String> = a.iter().map(|s| s.ip().to_string()).collect();
                ips.dedup();
                format!("MASTER_ADDR {host} -> {}", ips.join(", "))
            })
            .map_err(|e| format!("MASTER_ADDR: {e}")),
        since_ms(t),
    );
    let addrs = match addrs {
        Ok(a) if resolved => a,
        _ => return None,
    };
    let loopback = accel::preflight::network::all_loopback(&addrs);
    let multi = c.num_nodes > 1 || c.local_world_size < c.world_size;
    let fine = r.emit(
        "preflight.not_loopback",
        match (multi, loopback) {
            (true, true) => Err(format!(
                "MASTER_ADDR {host} is a loopback address on a {}-machine job: other machines cannot reach it",
                c.num_nodes
            )),
            (true, false) => Ok(format!("{host} is not loopback")),
            (false, _) => Ok("single machine".into()),
        },
        0.0,
    );
    let t = Instant::now();
    r.emit("preflight.devices", device_check(r, env), since_ms(t));
    fine.then_some(addrs)
}

/// Rank 0 hosts the store before anyone can reach the port; every rank then reaches MASTER_ADDR
/// and the others join the store there.
fn open_store(r: &mut Rank, c: &Contract, addrs: &[SocketAddr]) -> Option<Store> {
    let (host, port, timeout) = (&c.master_addr, c.master_port, r.opts.timeout);
    let mut server = None;
    if c.rank == 0 {
        let t = Instant::now();
        match Store::new("127.0.0.1", port, c.world_size, true, timeout) {
            Ok(s) => server = Some(s),
            Err(e) => {
                r.emit(
                    "rendezvous.host_store",
                    Err(format!(
                        "cannot host the store on port {port}: {}",
                        short(&e)
                    )),
                    since_ms(t),
                );
                return None;
            }
        }
    }
    let t = Instant::now();
    let reached = r.emit(
        "preflight.reach",
        accel::preflight::network::reach(addrs, Instant::now() + timeout)
            .map(|d| {
                format!(
                    "{host}:{port} accepted a connection after {:.0} ms",
                    d.as_secs_f64() * 1e3
                )
            })
            .map_err(|e| {
                let whose = if c.rank == 0 {
                    "this rank hosts the store, so MASTER_ADDR does not lead back to this machine"
                } else {
                    "rank 0 hosts the rendezvous there: it never came up, or MASTER_ADDR/MASTER_PORT are wrong"
                };
                format!("cannot reach {host}:{port}: {e}; {whose}")
            }),
        since_ms(t),
    );
    if !reached {
        return None;
    }
    if server.is_some() {
        return server;
    }
    match Store::new(host, port, c.world_size, false, timeout) {
        Ok(s) => Some(s),
        Err(e) => {
            r.emit(
                "rendezvous",
                Err(format!(
                    "cannot join the store at {host}:{port}: {}",
                    short(&e)
                )),
                since_ms(t),
            );
            None
        }
    }
}

/// Rendezvous: every rank checks it was told rank 0's world and says it arrived, then the process
/// group connects the full mesh.
fn rendezvous(
    r: &mut Rank,
    c: &Contract,
    env: &Environment,
    store: &Store,
    backend: Backend,
) -> Option<ProcessGroup> {
    let t = Instant::now();
    if let Err(msg) = same_world(c, store, r.opts.timeout) {
        r.emit("rendezvous", Err(msg), since_ms(t));
        return None;
    }
    let _ = store.set(&format!("{KEY}/arrived/{}", c.rank), b"1");
    let ifnames = env.get(env_vars::GLOO_SOCKET_IFNAME).unwrap_or("");
    match ProcessGroup::new(
        backend,
        store,
        c.rank,
        c.world_size,
        r.opts.timeout,
        ifnames,
    ) {
        Ok(pg) => {
            r.emit(
                "rendezvous",
                Ok(format!(
                    "{} process group of {} rank(s) via TCPStore {}:{}",
                    backend.name(),
                    c.world_size,
                    c.master_addr,
                    c.master_port
                )),
                since_ms(t),
            );
            Some(pg)
        }
        Err(e) => {
            let msg = rendezvous_failure(c, store, &e, r.opts.timeout);
            r.emit("rendezvous", Err(msg), since_ms(t));
            finish(r, store, &[]);
            None
        }
    }
}

/// Nodes launched with different world sizes would otherwise only show as ranks that never arrive:
/// rank 0 publishes the world it was told, and every other rank compares before joining. The error
/// is the mismatch, also left in the store for the ranks that already joined.
fn same_world(c: &Contract, store: &Store, timeout: Duration) -> Result<(), String> {
    let this_host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mine = format!(
        "WORLD_SIZE={} ({} machine(s) × {} rank(s)) on host {this_host}",
        c.world_size, c.num_nodes, c.local_world_size
    );
    if c.rank == 0 {
        let _ = store.set(&format!("{KEY}/world"), mine.as_bytes());
    } else if let Ok(theirs) = store.get(&format!("{KEY}/world"), timeout) {
        let theirs = String::from_utf8_lossy(&theirs).into_owned();
        if !theirs.starts_with(&format!("WORLD_SIZE={} ", c.world_size)) {
            let msg = format!(
                "world size mismatch: rank {} was told {mine}, rank 0 was told {theirs}: every node must be started with the same --num_processes and --num_machines",
                c.rank
            );
            let _ = store.set(&format!("{KEY}/mismatch"), msg.as_bytes());
            return Err(msg);
        }
    }
    Ok(())
}

/// Why the process group did not connect: a world-size mismatch another rank found, or the ranks
/// that never arrived.
fn rendezvous_failure(c: &Contract, store: &Store, e: &TorchError, timeout: Duration) -> String {
    if let Ok(true) = store.check(&format!("{KEY}/mismatch")) {
        return store
            .get(&format!("{KEY}/mismatch"), timeout)
            .map(|m| String::from_utf8_lossy(&m).into_owned())
            .unwrap_or_default();
    }
    let missing = silent(store, c.world_size, c.rank, |q| {
        vec![format!("{KEY}/arrived/{q}")]
    })
    .unwrap_or_default();
    let who = if missing.is_empty() {
        String::new()
    } else {
        format!(
            "; {} never arrived within {:.0} s",
            ranks_text(&missing),
            timeout.as_secs_f64()
        )
    };
    format!("{}{who}", short(e))
}

/// The collectives of the plan, each marked done in the store. On a broken world the error holds
/// the ranks that went silent.
fn collectives(
    r: &mut Rank,
    c: &Contract,
    pg: &ProcessGroup,
    store: &Store,
    backend: Backend,
    dev: TchDevice,
) -> Result<(), Vec<usize>> {
    let checks = plan::select(plan::plan(c.world_size), &r.opts.checks);
    for (i, check) in checks.iter().enumerate() {
        let t = Instant::now();
        match run_check(pg, check, c.rank, c.world_size, backend, dev) {
            Ok(result) => {
                r.emit(&check.name(), result.map(|()| String::new()), since_ms(t));
                let _ = store.set(&format!("{KEY}/done/{i}/{}", c.rank), b"1");
            }
            Err(e) => {
                let ms = since_ms(t);
                let who = name_silent(store, c, i, r.opts.timeout);
                let dead = silent(store, c.world_size, c.rank, |q| {
                    vec![
                        format!("{KEY}/done/{i}/{q}"),
                        format!("{KEY}/failed/{i}/{q}"),
                    ]
                })
                .unwrap_or_default();
                r.emit(&check.name(), Err(format!("{}; {who}", short(&e))), ms);
                return Err(dead);
            }
        }
    }
    Ok(())
}

/// --probe, only when every rank passed its checks: the probe needs all of them.
fn probe_if_all_passed(
    r: &mut Rank,
    pg: &ProcessGroup,
    store: &Store,
    dev: TchDevice,
    parts: accel::preflight::probe::Parts,
) {
    let mut ok = Tensor::from_slice(&[i64::from(r.ok)]).to_device(dev);
    let all_ok = pg
        .all_reduce(&mut ok, ReduceOp::Min)
        .ok()
        .and_then(|()| i64::try_from(ok.to_device(TchDevice::Cpu)).ok())
        == Some(1);
    if all_ok {
        crate::torch::probe::run(r, pg, store, dev, parts);
    }
}

/// How long --python's check may take, given the run's timeout: rank 0 waits that much longer
/// for the others to finish.
fn python_limit(timeout: Duration) -> Duration {
    timeout * 2 + Duration::from_secs(60)
}

/// --python: torch.distributed from the Python found, on the same device.
fn python_check(r: &mut Rank, env: &Environment) {
    let t = Instant::now();
    let timeout = r.opts.timeout;
    let result = match accel::python::find_python(env) {
        None => Err("no python: set ACCEL_PYTHON or put python3 on PATH".to_string()),
        Some(py) => {
            accel::preflight::python::run(&py, r.opts.device.name(), timeout, python_limit(timeout))
                .map(|()| format!("{}", py.display()))
        }
    };
    r.emit("python", result, since_ms(t));
}

/// Says this rank is finished; rank 0 keeps the store up until every live rank has said so.
fn finish(r: &Rank, store: &Store, dead: &[usize]) {
    let c = &r.c;
    let _ = store.set(&format!("{KEY}/finished/{}", c.rank), b"1");
    if c.rank != 0 {
        return;
    }
    let mut wait = r.opts.timeout;
    if r.opts.python {
        wait += python_limit(r.opts.timeout);
    }
    let deadline = Instant::now() + wait;
    // Ranks that never announced themselves (a plain torch.distributed rank in the world) are not
    // waited for.
    let ours = |q: &usize| store.check(&format!("{KEY}/arrived/{q}")).unwrap_or(false);
    for q in (1..c.world_size).filter(|q| !dead.contains(q) && ours(q)) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || store.get(&format!("{KEY}/finished/{q}"), left).is_err() {
            break;
        }
    }
}

/// Sizes of --bench: 1 KiB, ×4, up to `max`.
pub fn bench_sizes(max: u64) -> Vec<u64> {
    let mut sizes = Vec::new();
    let mut s = 1024u64;
    while s <= max {
        sizes.push(s);
        s *= 4;
    }
    if sizes.last().is_some_and(|&l| l < max) {
        sizes.push(max);
    }
    sizes
}

/// Iterations at one size: many for latency-bound sizes, a few for bandwidth-bound ones.
pub fn bench_iters(size: u64) -> u32 {
    ((256u64 << 20) / size.max(1)).clamp(3, 100) as u32
}

fn bench(r: &mut Rank, pg: &ProcessGroup, dev: TchDevice) -> Result<(), TorchError> {
    let world = r.c.world_size;
    for op in ["all_reduce", "all_gather"] {
        for size in bench_sizes(r.opts.max_size) {
            let (count, per_rank, total) = if op == "all_reduce" {
                let count = (size / 4).max(1);
                (count, count, count * 4)
            } else {
                let per = (size / 4 / world as u64).max(1);
                (per * world as u64, per, per * world as u64 * 4)
            };
            let iters = bench_iters(total);
            let mut input = Tensor::zeros([per_rank as i64], (Kind::Float, dev));
            let mut output = Tensor::zeros([count as i64], (Kind::Float, dev));
            let once = |input: &mut Tensor, output: &mut Tensor| -> Result<(), TorchError> {
                if op == "all_reduce" {
                    pg.all_reduce(input, ReduceOp::Sum)
                } else {
                    pg.all_gather_flat(output, input)
                }
            };
            for _ in 0..2 {
                once(&mut input, &mut output)?;
            }
            pg.barrier()?;
            let t = Instant::now();
            for _ in 0..iters {
                once(&mut input, &mut output)?;
            }
            if dev != TchDevice::Cpu {
                tch::Cuda::synchronize(match dev {
                    TchDevice::Cuda(i) => i as i64,
                    _ => 0,
                });
            }
            let mine = t.elapsed().as_secs_f64() * 1e6 / iters as f64;
            // The slowest rank's time is the operation's time.
            let mut slowest = Tensor::from_slice(&[mine]).to_device(dev);
            pg.all_reduce(&mut slowest, ReduceOp::Max)?;
            let time_us = values(&slowest)
                .ok()
                .and_then(|v| v.first().copied())
                .unwrap_or(mine);
            if r.c.rank == 0 {
                let (algbw, busbw) = bandwidth(op, world, total, time_us);
                let _ = accel::tools::print(
                    &Event::Bench {
                        rank: 0,
                        row: BenchRow {
                            op: op.into(),
                            dtype: "float32".into(),
                            size: total,
                            count,
                            iters,
                            time_us,
                            algbw,
                            busbw,
                        },
                    }
                    .to_line(),
                );
            }
        }
    }
    Ok(())
}
