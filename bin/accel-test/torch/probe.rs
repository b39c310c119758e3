//! One rank's part of `accel-test --probe` (the plan, the data and the verdict are in
//! accel::preflight::probe): the links within its node and, on a node's first rank, between nodes,
//! point to point on the world's process group; then the compute workload; then rank 0 gathers every
//! rank's measurements through the store and every node's first rank reports them.
//!
//! Phases end at a store barrier that waits as long as some rank makes progress, and at most
//! --timeout without any: the slowest pair of a round may take longer than a timeout-bounded
//! collective would allow, yet a dead rank still ends the wait. A rank that fails says so in the
//! store, and everyone waiting ends with its message.

use std::time::{Duration, Instant};

use tch::{Device as TchDevice, Kind, Tensor};

use accel::preflight::probe::{
    self as plan, Compute, Latency, Link, Measured, Parts, ProbeData, RankInfo, Workload,
};
use accel::preflight::report::Event;
use accel::preflight::world::{Contract, Device};

use super::rank::{short, since_ms, Rank};
use super::{ProcessGroup, Store, TorchError};

const KEY: &str = "accel-test/probe";
/// The tag of every probe message (pairs exchange in order; nothing else is in flight).
const TAG: i64 = 7;
/// The longest pause between two looks at the store while waiting for a key.
const POLL: Duration = Duration::from_millis(20);
/// The largest measurement a rank may send (JSON): far above any real world's.
const MAX_RESULT: usize = 64 << 20;

struct Ctx<'a> {
    pg: &'a ProcessGroup,
    store: &'a Store,
    c: Contract,
    dev: TchDevice,
    device: Device,
    timeout: Duration,
    /// One buffer of `MAX_MESSAGE` bytes, sent from and received into.
    buf: Option<Tensor>,
    steps: u64,
    /// --probe_threshold, a fraction: what looks slow after the first measurements is measured again.
    threshold: f64,
    /// The node pairs measured again (rank 0 reports them).
    rechecked: Vec<(usize, usize)>,
}

fn torch(e: TorchError) -> String {
    short(&e)
}

impl Ctx<'_> {
    fn node(&self) -> usize {
        self.c.rank / self.c.local_world_size.max(1)
    }

    fn sync(&self) {
        if let TchDevice::Cuda(i) = self.dev {
            tch::Cuda::synchronize(i as i64);
        }
    }

    fn buffer(&mut self, size: u64) -> Tensor {
        let dev = self.dev;
        let b = self
            .buf
            .get_or_insert_with(|| Tensor::zeros([plan::MAX_MESSAGE as i64], (Kind::Uint8, dev)));
        b.narrow(0, 0, size as i64)
    }

    fn ints(&self, v: &[i64]) -> Tensor {
        Tensor::from_slice(v).to_device(self.dev)
    }

    /// Tells the waiting ranks that something moved.
    fn progress(&mut self) {
        self.steps += 1;
        let _ = self.store.set(
            &format!("{KEY}/progress"),
            format!("{}:{}", self.c.rank, self.steps).as_bytes(),
        );
    }

    fn fail(&self, msg: &str) {
        let _ = self.store.set(
            &format!("{KEY}/failed"),
            format!("rank {}: {msg}", self.c.rank).as_bytes(),
        );
    }

    /// The value of `key`, waiting while any rank makes progress, for at most the timeout without.
    /// The store is polled (`check`, never a `get` that times out, which c10d logs), every
    /// millisecond at first, then less often up to [`POLL`].
    fn wait_key(&self, key: &str) -> Result<Vec<u8>, String> {
        let mut last = Instant::now();
        let mut seen = Vec::new();
        let mut pause = Duration::from_millis(1);
        let failed = format!("{KEY}/failed");
        let progress = format!("{KEY}/progress");
        loop {
            if self.store.check(key).map_err(torch)? {
                return self.store.get(key, self.timeout).map_err(torch);
            }
            if self.store.check(&failed).map_err(torch)? {
                let why = self.store.get(&failed, self.timeout).map_err(torch)?;
                return Err(format!("stopped: {}", String::from_utf8_lossy(&why).trim()));
            }
            if self.store.check(&progress).map_err(torch)? {
                let now = self.store.get(&progress, self.timeout).map_err(torch)?;
                if now != seen {
                    seen = now;
                    last = Instant::now();
                    pause = Duration::from_millis(1);
                }
            }
            if last.elapsed() >= self.timeout {
                return Err(format!(
                    "no rank made progress for {:.0} s while waiting for {key}",
                    self.timeout.as_secs_f64()
                ));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(self.max_pause());
        }
    }

    /// [`POLL`], longer in large worlds, so that rank 0's store is not flooded.
    fn max_pause(&self) -> Duration {
        POLL * (self.c.world_size.div_ceil(32).max(1) as u32)
    }

    /// The end of a phase: every rank has finished it.
    fn phase(&mut self, name: &str) -> Result<(), String> {
        let done = |q: usize| format!("{KEY}/{name}/done/{q}");
        self.store.set(&done(self.c.rank), b"1").map_err(torch)?;
        self.progress();
        let all = format!("{KEY}/{name}/all");
        if self.c.rank == 0 {
            for q in 0..self.c.world_size {
                self.wait_key(&done(q))
                    .map_err(|e| format!("rank {q} did not finish {name}: {e}"))?;
            }
            self.store.set(&all, b"1").map_err(torch)?;
            Ok(())
        } else {
            self.wait_key(&all).map(|_| ())
        }
    }

    fn peer_name(&self, peer: usize) -> String {
        let lws = self.c.local_world_size.max(1);
        format!("rank {peer} (node n{})", peer / lws)
    }
}

/// Runs the probe on this rank: checks `probe.links`, `probe.compute`, `probe.report`, and on each
/// node's first rank the [`Event::Probe`] with the world's measurements.
pub fn run(r: &mut Rank, pg: &ProcessGroup, store: &Store, dev: TchDevice, parts: Parts) {
    let start = Instant::now();
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut ctx = Ctx {
        pg,
        store,
        c: r.c.clone(),
        dev,
        device: r.opts.device,
        timeout: r.opts.timeout,
        buf: None,
        steps: 0,
        threshold: r.opts.probe_threshold,
        rechecked: Vec::new(),
    };
    let mut m = Measured {
        info: RankInfo {
            rank: ctx.c.rank,
            node: ctx.node(),
            local_rank: ctx.c.local_rank,
            host,
        },
        links: Vec::new(),
        latency: Vec::new(),
        compute: None,
    };
    // Everyone starts together, so the first pair does not wait for a late rank.
    if let Err(e) = pg.barrier() {
        r.emit("probe.links", Err(short(&e)), since_ms(start));
        return;
    }
    if parts.links {
        let t = Instant::now();
        let res = links(&mut ctx, &mut m);
        if let Err(e) = &res {
            ctx.fail(e);
        }
        if !r.emit("probe.links", res, since_ms(t)) {
            return;
        }
    }
    let mut workload = Workload::of(ctx.device);
    if parts.compute {
        let t = Instant::now();
        let res = compute(&mut ctx, &mut workload).and_then(|(c, again)| {
            let gflops = c.gflops;
            m.compute = Some(c);
            ctx.phase("compute")?;
            let again = if again.is_empty() {
                String::new()
            } else {
                let list: Vec<String> = again.iter().map(usize::to_string).collect();
                format!("; measured again: rank(s) {}", list.join(", "))
            };
            Ok(format!(
                "{}; {:.1} GFLOP/s here{again}",
                workload.describe(ctx.device),
                gflops
            ))
        });
        if let Err(e) = &res {
            ctx.fail(e);
        }
        if !r.emit("probe.compute", res, since_ms(t)) {
            return;
        }
    }
    let t = Instant::now();
    let described = workload.describe(ctx.device);
    let res = report(&mut ctx, m, parts, described, start);
    if let Err(e) = &res {
        ctx.fail(e);
    }
    r.emit("probe.report", res, since_ms(t));
}

/// Links within this node (every pair of local ranks, in rounds), then between nodes (first ranks).
fn links(ctx: &mut Ctx, m: &mut Measured) -> Result<String, String> {
    let lws = ctx.c.local_world_size.max(1);
    let nodes = ctx.c.num_nodes.max(1);
    let node = ctx.node();
    let lr = ctx.c.local_rank;
    for peer_lr in plan::partners(lws, lr) {
        let peer = node * lws + peer_lr;
        pair(ctx, peer, lr < peer_lr, m)
            .map_err(|e| format!("with {} within the node: {e}", ctx.peer_name(peer)))?;
    }
    ctx.phase("local")?;
    if lr == 0 {
        for peer_node in plan::partners(nodes, node) {
            let peer = peer_node * lws;
            pair(ctx, peer, node < peer_node, m)
                .map_err(|e| format!("with {}: {e}", ctx.peer_name(peer)))?;
        }
    }
    ctx.phase("nodes")?;
    if nodes >= 2 {
        recheck(ctx, m)?;
        ctx.phase("recheck")?;
    }
    let again = if ctx.rechecked.is_empty() {
        String::new()
    } else {
        format!(", {} pair(s) measured again", ctx.rechecked.len())
    };
    Ok(format!(
        "{nodes} node(s) in {} round(s), {lws} rank(s) per node in {} round(s){again}",
        plan::rounds(nodes).len(),
        plan::rounds(lws).len()
    ))
}

/// The node pairs whose first measurement looks slow ([`plan::recheck_pairs`], decided by rank 0
/// from every node leader's links) are measured again, in rounds; the faster measurement of each
/// direction counts. Only node leaders take part; the other ranks wait at the phase's end.
fn recheck(ctx: &mut Ctx, m: &mut Measured) -> Result<(), String> {
    if ctx.c.local_rank != 0 {
        return Ok(());
    }
    let lws = ctx.c.local_world_size.max(1);
    let nodes = ctx.c.num_nodes.max(1);
    let node = ctx.node();
    let first = |n: usize| format!("{KEY}/first/{n}");
    let pairs_key = format!("{KEY}/recheck-pairs");
    let mine: Vec<(usize, usize, f64)> = m
        .links
        .iter()
        .filter(|l| l.from / lws != l.to / lws)
        .map(|l| (l.from / lws, l.to / lws, l.gbps()))
        .collect();
    let bytes = serde_json::to_vec(&mine).map_err(|e| e.to_string())?;
    ctx.store.set(&first(node), &bytes).map_err(torch)?;
    ctx.progress();
    if ctx.c.rank == 0 {
        let mut edges = Vec::new();
        for n in 0..nodes {
            let bytes = ctx.wait_key(&first(n))?;
            if bytes.len() > MAX_RESULT {
                return Err(format!("node n{n} sent {} bytes of links", bytes.len()));
            }
            let theirs: Vec<(usize, usize, f64)> = serde_json::from_slice(&bytes)
                .map_err(|e| format!("node n{n} sent unreadable links: {e}"))?;
            edges.extend(theirs.into_iter().filter(|e| e.0 == n && e.1 < nodes));
        }
        let pairs = plan::recheck_pairs(&edges, ctx.threshold);
        let bytes = serde_json::to_vec(&pairs).map_err(|e| e.to_string())?;
        ctx.store.set(&pairs_key, &bytes).map_err(torch)?;
    }
    let bytes = ctx.wait_key(&pairs_key)?;
    let pairs: Vec<(usize, usize)> = serde_json::from_slice(&bytes)
        .map_err(|e| format!("rank 0 sent an unreadable list of pairs: {e}"))?;
    if pairs
        .iter()
        .any(|&(a, b)| a >= nodes || b >= nodes || a == b)
    {
        return Err(format!(
            "rank 0 sent pairs of nodes that are not in this world: {pairs:?}"
        ));
    }
    let mut again = Vec::new();
    for peer_node in plan::partners_in(&plan::pair_rounds(&pairs), node) {
        let peer = peer_node * lws;
        bandwidth(ctx, peer, node < peer_node, &mut again)
            .map_err(|e| format!("again with {}: {e}", ctx.peer_name(peer)))?;
    }
    plan::keep_best(&mut m.links, again);
    ctx.rechecked = pairs;
    Ok(())
}

/// Both directions of the link to `peer` again (no latency), `first` sending first.
fn bandwidth(ctx: &mut Ctx, peer: usize, first: bool, out: &mut Vec<Link>) -> Result<(), String> {
    if first {
        out.push(send_side(ctx, peer)?);
        ctx.progress();
        recv_side(ctx, peer)?;
    } else {
        recv_side(ctx, peer)?;
        out.push(send_side(ctx, peer)?);
    }
    ctx.progress();
    Ok(())
}

/// One pair: latency (ping-pong led by `first`), then bandwidth `first` → peer and back.
fn pair(ctx: &mut Ctx, peer: usize, first: bool, m: &mut Measured) -> Result<(), String> {
    let mut ping = Tensor::zeros([1], (Kind::Double, ctx.dev));
    let pg = ctx.pg;
    if first {
        for _ in 0..plan::LATENCY_WARMUP {
            pg.send(&mut ping, peer, TAG).map_err(torch)?;
            pg.recv(&mut ping, peer, TAG).map_err(torch)?;
        }
        ctx.sync();
        let mut rtts = Vec::with_capacity(plan::LATENCY_ITERS as usize);
        for _ in 0..plan::LATENCY_ITERS {
            let t = Instant::now();
            pg.send(&mut ping, peer, TAG).map_err(torch)?;
            pg.recv(&mut ping, peer, TAG).map_err(torch)?;
            ctx.sync();
            rtts.push(t.elapsed().as_secs_f64() * 1e6);
        }
        m.latency.push(Latency {
            a: ctx.c.rank,
            b: peer,
            us: plan::median(&rtts).unwrap_or(0.0) / 2.0,
        });
        m.links.push(send_side(ctx, peer)?);
        ctx.progress();
        recv_side(ctx, peer)?;
    } else {
        for _ in 0..plan::LATENCY_WARMUP + plan::LATENCY_ITERS {
            pg.recv(&mut ping, peer, TAG).map_err(torch)?;
            pg.send(&mut ping, peer, TAG).map_err(torch)?;
        }
        recv_side(ctx, peer)?;
        m.links.push(send_side(ctx, peer)?);
    }
    ctx.progress();
    Ok(())
}

/// Sends `reps` messages of `size` bytes after their header; the time until the peer's
/// acknowledgement.
fn transfer(ctx: &mut Ctx, peer: usize, size: u64, reps: u32) -> Result<Duration, String> {
    let pg = ctx.pg;
    let mut header = ctx.ints(&[size as i64, i64::from(reps)]);
    pg.send(&mut header, peer, TAG).map_err(torch)?;
    let mut ack = ctx.ints(&[0]);
    let mut data = ctx.buffer(size);
    ctx.sync();
    let t = Instant::now();
    for _ in 0..reps {
        pg.send(&mut data, peer, TAG).map_err(torch)?;
    }
    pg.recv(&mut ack, peer, TAG).map_err(torch)?;
    ctx.sync();
    Ok(t.elapsed())
}

/// This rank's direction of the link to `peer`: estimate with growing messages, then measure,
/// each measurement sized from the best rate so far, until two were full size (see
/// [`plan::Measurements`]); the best full one counts, so that one stall (a lost packet's
/// retransmission timeout, a rank descheduled on a busy machine) is not taken for a slow link.
fn send_side(ctx: &mut Ctx, peer: usize) -> Result<Link, String> {
    let mut estimate = (0u64, Duration::ZERO);
    for size in plan::ESTIMATE_SIZES {
        let dt = transfer(ctx, peer, size, 1)?;
        estimate = (size, dt);
        if dt >= plan::ESTIMATE_TIME {
            break;
        }
    }
    let mut runs = plan::Measurements::new(estimate.0, estimate.1.as_secs_f64());
    while let Some((size, reps)) = runs.next_plan() {
        let dt = transfer(ctx, peer, size, reps)?;
        runs.add(size, reps, dt.as_secs_f64());
    }
    let mut end = ctx.ints(&[0, 0]);
    ctx.pg.send(&mut end, peer, TAG).map_err(torch)?;
    let (bytes, seconds) = runs.best();
    Ok(Link {
        from: ctx.c.rank,
        to: peer,
        bytes,
        seconds,
    })
}

/// The peer's direction: receive what its headers announce until the end header.
fn recv_side(ctx: &mut Ctx, peer: usize) -> Result<(), String> {
    let pg = ctx.pg;
    let mut ack = ctx.ints(&[1]);
    loop {
        let mut header = ctx.ints(&[0, 0]);
        pg.recv(&mut header, peer, TAG).map_err(torch)?;
        let v = Vec::<i64>::try_from(header.to_device(TchDevice::Cpu))
            .map_err(|e| format!("cannot read a transfer header: {e}"))?;
        let (size, reps) = match plan::check_header(v[0], v[1])? {
            None => return Ok(()),
            Some(h) => h,
        };
        let mut data = ctx.buffer(size);
        for _ in 0..reps {
            pg.recv(&mut data, peer, TAG).map_err(torch)?;
        }
        ctx.sync();
        pg.send(&mut ack, peer, TAG).map_err(torch)?;
    }
}

/// The workload, best of `COMPUTE_TRIALS`: on CPU the ranks take turns over the whole world (turn
/// `t * world + rank` waits for the one before), on CUDA everyone runs at once. Then the ranks whose
/// result looks slow at --probe_threshold ([`plan::recheck_ranks`], decided by rank 0) run the
/// trials again, in turns among themselves, and the better of their two results counts. On CPU a
/// trial repeats the product for at least [`plan::CPU_TRIAL`], as many times as rank 0's time for one
/// says ([`plan::cpu_reps`]; `w.reps` becomes that). Returns this rank's result and the ranks
/// measured again.
fn compute(ctx: &mut Ctx, w: &mut Workload) -> Result<(Compute, Vec<usize>), String> {
    let kind = if w.dtype == "float32" {
        Kind::Float
    } else {
        Kind::BFloat16
    };
    let a = Tensor::randn([w.n, w.n], (kind, ctx.dev));
    let b = Tensor::randn([w.n, w.n], (kind, ctx.dev));
    // Warm-up: the BLAS's threads and handles, at a size that costs nothing.
    let s = Tensor::randn([256, 256], (kind, ctx.dev));
    let _ = s.matmul(&s);
    ctx.sync();
    let me = ctx.c.rank;
    if ctx.device == Device::Cpu {
        let reps_key = format!("{KEY}/compute-reps");
        if me == 0 {
            let mut one = Duration::MAX;
            for _ in 0..2 {
                let t = Instant::now();
                let _ = a.matmul(&b);
                one = one.min(t.elapsed());
            }
            let reps = plan::cpu_reps(one).to_string();
            ctx.store.set(&reps_key, reps.as_bytes()).map_err(torch)?;
        }
        let bytes = ctx.wait_key(&reps_key)?;
        w.reps = std::str::from_utf8(&bytes)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .filter(|r| (1..=plan::MAX_CPU_REPS).contains(r))
            .ok_or_else(|| "rank 0 sent an unreadable number of products per trial".to_string())?;
    }
    let w = *w;
    let everyone: Vec<usize> = (0..ctx.c.world_size).collect();
    let mut best = trials(ctx, &a, &b, w, &everyone, "turn")?;

    let first = |q: usize| format!("{KEY}/compute-first/{q}");
    let again_key = format!("{KEY}/compute-again");
    ctx.store
        .set(
            &first(me),
            format!("{}", w.gflop() / best.max(1e-12)).as_bytes(),
        )
        .map_err(torch)?;
    ctx.progress();
    if me == 0 {
        let mut gflops = Vec::with_capacity(everyone.len());
        for &q in &everyone {
            let bytes = ctx.wait_key(&first(q))?;
            let g: f64 = std::str::from_utf8(&bytes)
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .filter(|g: &f64| g.is_finite() && *g >= 0.0)
                .ok_or_else(|| format!("rank {q} sent an unreadable compute result"))?;
            gflops.push((q, g));
        }
        let again = plan::recheck_ranks(&gflops, ctx.threshold);
        let bytes = serde_json::to_vec(&again).map_err(|e| e.to_string())?;
        ctx.store.set(&again_key, &bytes).map_err(torch)?;
    }
    let bytes = ctx.wait_key(&again_key)?;
    let again: Vec<usize> = serde_json::from_slice(&bytes)
        .map_err(|e| format!("rank 0 sent an unreadable list of ranks: {e}"))?;
    if again.iter().any(|&q| q >= everyone.len()) {
        return Err(format!(
            "rank 0 sent ranks that are not in this world: {again:?}"
        ));
    }
    if again.contains(&me) {
        best = best.min(trials(ctx, &a, &b, w, &again, "turn-again")?);
    }
    Ok((
        Compute {
            rank: me,
            gflops: w.gflop() / best.max(1e-12),
        },
        again,
    ))
}

/// `COMPUTE_TRIALS` runs of the workload on each rank of `who` (this one among them): the best time.
/// On CPU one rank at a time, the turns in the store under `name`; on CUDA all of `who` at once (the
/// first time the whole world, at a barrier).
fn trials(
    ctx: &mut Ctx,
    a: &Tensor,
    b: &Tensor,
    w: Workload,
    who: &[usize],
    name: &str,
) -> Result<f64, String> {
    let n = who.len();
    let me = who.iter().position(|&q| q == ctx.c.rank).unwrap_or(0);
    let turn = |step: usize| format!("{KEY}/{name}/{step}");
    let mut best = f64::INFINITY;
    for trial in 0..plan::COMPUTE_TRIALS as usize {
        let step = trial * n + me;
        match ctx.device {
            Device::Cpu if step > 0 => {
                // Polling until the turn before the previous one ended (as long as turns go on),
                // then a blocking wait on the previous one itself, so the hand-over is immediate.
                if step > 1 {
                    ctx.wait_key(&turn(step - 2))?;
                }
                let prev = who[(step - 1) % n];
                ctx.store
                    .get(&turn(step - 1), ctx.timeout)
                    .map_err(|e| format!("rank {prev}'s turn did not end: {}", short(&e)))?;
            }
            Device::Cpu => {}
            Device::Cuda if n == ctx.c.world_size => ctx.pg.barrier().map_err(torch)?,
            Device::Cuda => {}
        }
        ctx.sync();
        let t = Instant::now();
        for _ in 0..w.reps {
            let _ = a.matmul(b);
        }
        ctx.sync();
        best = best.min(t.elapsed().as_secs_f64());
        if ctx.device == Device::Cpu {
            ctx.store.set(&turn(step), b"1").map_err(torch)?;
        }
        ctx.progress();
    }
    Ok(best)
}

/// Every rank hands its measurements to rank 0, which gathers the world's; every node's first rank
/// sends them to its accel-test.
fn report(
    ctx: &mut Ctx,
    m: Measured,
    parts: Parts,
    workload: String,
    start: Instant,
) -> Result<String, String> {
    let me = ctx.c.rank;
    let result = |q: usize| format!("{KEY}/result/{q}");
    let mine = serde_json::to_vec(&m).map_err(|e| e.to_string())?;
    ctx.store.set(&result(me), &mine).map_err(torch)?;
    ctx.progress();
    let all = format!("{KEY}/all");
    if me == 0 {
        let mut measured = Vec::with_capacity(ctx.c.world_size);
        for q in 0..ctx.c.world_size {
            let bytes = ctx.wait_key(&result(q))?;
            if bytes.len() > MAX_RESULT {
                return Err(format!(
                    "rank {q} sent {} bytes of measurements",
                    bytes.len()
                ));
            }
            let got: Measured = serde_json::from_slice(&bytes)
                .map_err(|e| format!("rank {q} sent unreadable measurements: {e}"))?;
            if got.info.rank != q {
                return Err(format!(
                    "rank {q} sent the measurements of rank {}",
                    got.info.rank
                ));
            }
            measured.push(got);
        }
        let mut data = ProbeData::gather(
            parts,
            ctx.device,
            measured,
            workload,
            start.elapsed().as_secs_f64(),
        );
        data.rechecked = ctx.rechecked.clone();
        let bytes = serde_json::to_vec(&data).map_err(|e| e.to_string())?;
        ctx.store.set(&all, &bytes).map_err(torch)?;
    }
    if ctx.c.local_rank != 0 {
        return Ok(String::new());
    }
    let bytes = ctx.wait_key(&all)?;
    let data: ProbeData = serde_json::from_slice(&bytes)
        .map_err(|e| format!("rank 0 sent unreadable measurements: {e}"))?;
    let _ = accel::tools::print(
        &Event::Probe {
            rank: me,
            data: Box::new(data),
        }
        .to_line(),
    );
    Ok(String::new())
}
