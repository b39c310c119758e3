//! `control-sim`: N simulated nodes in one process, each a real, authenticated connection to a real
//! node-0 `accel-launch`, speaking the real protocol through the library's own [`Peer`], the one
//! every launcher's link drives (hello, challenge answered, join, heartbeats every second, a failure
//! report, `ended`, `bye`). It is the
//! engine of `scripts/bench/control --simulate N`; it prints one JSON object of what it measured.
//!
//!   control-sim --port CONTROL_PORT --nodes N [--addr 127.0.0.1] [--run-id port:CONTROL_PORT]
//!               [--node0-pid PID] [--steady SECONDS] [--max-restarts R] [--spread K]
//!
//! Node ranks 1..=N join (node 0 is the launcher, started with `--num_machines N+1`). The secret is
//! ACCEL_LAUNCH_SECRET, as for the launcher; with `--munge SOCKET` MUNGE instead. Measured: the time
//! from the first connection to every node started; node 0's CPU share (from /proc/PID/stat),
//! descriptors and peak RSS over `--steady` seconds of heartbeats; then node N reports a rank that
//! exited 7, and the time until every node has received node 0's `stop`; then every node ends and
//! leaves.

// A benchmark driver: its errors end it with a message.
#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use accel::launch::control::peer::{Event, Peer, Sender};
use accel::launch::control::{Credentials, FailureReport, Join, Msg, Munge, Secret, PROTOCOL};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

/// Handshakes in flight at once: below node 0's cap on connections in their handshake (256).
const IN_FLIGHT: usize = 200;

#[derive(PartialEq)]
enum State {
    Idle,
    Handshake,
    /// Joined, waiting for every other node.
    Joined,
    Running,
    Stopped,
    Finished,
}

struct Node {
    node: u32,
    sock: Option<TcpStream>,
    peer: Option<Peer>,
    /// The sending side, once joined.
    tx: Option<Sender>,
    out: VecDeque<u8>,
    state: State,
    next_beat: Instant,
}

struct Args {
    addr: String,
    port: u16,
    nodes: u32,
    run_id: String,
    node0: Option<u32>,
    steady: f64,
    max_restarts: u32,
    munge: Option<String>,
    spread: u32,
}

fn args() -> Args {
    let mut a = Args {
        addr: "127.0.0.1".into(),
        port: 0,
        nodes: 0,
        run_id: String::new(),
        node0: None,
        steady: 10.0,
        max_restarts: 0,
        munge: None,
        spread: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--addr" => a.addr = v,
            "--port" => a.port = v.parse().unwrap(),
            "--nodes" => a.nodes = v.parse().unwrap(),
            "--run-id" => a.run_id = v,
            "--node0-pid" => a.node0 = Some(v.parse().unwrap()),
            "--steady" => a.steady = v.parse().unwrap(),
            "--max-restarts" => a.max_restarts = v.parse().unwrap(),
            "--munge" => a.munge = Some(v),
            "--spread" => a.spread = v.parse::<u32>().unwrap().max(1),
            _ => panic!("unknown option {k}"),
        }
    }
    assert!(a.port > 0 && a.nodes > 0, "--port and --nodes are needed");
    if a.run_id.is_empty() {
        a.run_id = format!("port:{}", a.port);
    }
    a
}

/// utime + stime of a process, in seconds.
fn cpu(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

fn raise_open_files(n: u64) {
    let r = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: a plain syscall on a stack struct; failing leaves the limit as it was.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) };
}

struct Sim {
    poll: Poll,
    nodes: Vec<Node>,
    creds: Credentials,
    a: Args,
    addr: SocketAddr,
    started: usize,
    stopped: usize,
    finished: usize,
    in_flight: usize,
    queue: VecDeque<usize>,
    refusals: Vec<String>,
    next_scan: Instant,
}

impl Sim {
    fn join(&self, node: u32) -> Join {
        Join {
            protocol: PROTOCOL,
            run_id: self.a.run_id.clone(),
            node,
            nodes: self.a.nodes + 1,
            local_ranks: 1,
            host: format!("sim{node}"),
            max_restarts: self.a.max_restarts,
            hang_timeout_ms: None,
            // accel-launch's default --grace_period (30 s): node 0's deadline after a stop.
            grace_ms: Some(30_000),
            world_size: None,
        }
    }

    fn connect(&mut self, i: usize) {
        let join = self.join(self.nodes[i].node);
        let (peer, hello) = Peer::new(join, self.creds.clone()).unwrap();
        // Node i connects to the i-th of `--spread` consecutive addresses (127.0.0.1, .2, ...; node 0
        // listens on them all when joins are authenticated): from one source address to one
        // destination the kernel has ~28,000 ephemeral ports, and past ~15,000 connections each
        // connect() searched most of them (the simulator's own CPU, not node 0's). Real nodes
        // connect from their own addresses.
        let mut addr = self.addr;
        if let (std::net::IpAddr::V4(v4), spread) = (addr.ip(), self.a.spread) {
            let base = u32::from(v4);
            addr.set_ip(std::net::Ipv4Addr::from(base + (i as u32 % spread)).into());
        }
        let mut s = TcpStream::connect(addr).unwrap();
        self.poll
            .registry()
            .register(&mut s, Token(i), Interest::READABLE | Interest::WRITABLE)
            .unwrap();
        let _ = s.set_nodelay(true);
        let n = &mut self.nodes[i];
        n.sock = Some(s);
        n.peer = Some(peer);
        n.out = hello.into();
        n.state = State::Handshake;
        self.in_flight += 1;
    }

    fn reset(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        if let Some(mut s) = n.sock.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        n.peer = None;
        n.tx = None;
        n.out.clear();
        if n.state == State::Handshake {
            self.in_flight -= 1;
        }
        n.state = State::Idle;
        self.queue.push_back(i);
    }

    fn flush(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        let Some(s) = n.sock.as_mut() else { return };
        while !n.out.is_empty() {
            let (a, _) = n.out.as_slices();
            match s.write(a) {
                Ok(k) => {
                    n.out.drain(..k);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(_) => return,
            }
        }
    }

    fn send(&mut self, i: usize, m: &Msg) {
        let n = &mut self.nodes[i];
        if let Some(tx) = n.tx.as_mut() {
            let line = tx.line(m);
            n.out.extend(line);
        }
        self.flush(i);
    }

    fn read(&mut self, i: usize) {
        let mut buf = [0u8; 16 << 10];
        loop {
            let n = &mut self.nodes[i];
            let Some(s) = n.sock.as_mut() else { return };
            let got = match s.read(&mut buf) {
                Ok(0) => {
                    if n.state == State::Handshake {
                        // Node 0's handshake slots were full: again later.
                        return self.reset(i);
                    }
                    n.sock = None;
                    return;
                }
                Ok(k) => k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    if n.state == State::Handshake {
                        return self.reset(i);
                    }
                    n.sock = None;
                    return;
                }
            };
            let Some(p) = n.peer.as_mut() else { return };
            let (back, events) = p.feed(&buf[..got]);
            n.out.extend(back);
            for e in events {
                match e {
                    Event::Joined(tx) => {
                        n.tx = Some(tx);
                        if n.state == State::Handshake {
                            n.state = State::Joined;
                            self.in_flight -= 1;
                        }
                    }
                    // A later attempt's `start` counts as the first did.
                    Event::Started(_) | Event::Msg(Msg::Start { .. }) => {
                        if n.state == State::Joined {
                            self.started += 1;
                        }
                        n.state = State::Running;
                        n.next_beat = Instant::now() + Duration::from_secs(1);
                    }
                    Event::Msg(Msg::Stop { .. }) if n.state == State::Running => {
                        n.state = State::Stopped;
                        self.stopped += 1;
                    }
                    Event::Msg(Msg::Finish { .. }) => {
                        n.state = State::Finished;
                        self.finished += 1;
                    }
                    Event::Msg(_) => {}
                    Event::Over(end) => {
                        if self.refusals.len() < 5 {
                            self.refusals.push(end.to_string());
                        }
                        if n.state == State::Handshake {
                            return self.reset(i);
                        }
                    }
                }
            }
            if n.state == State::Joined && n.next_beat <= Instant::now() {
                n.next_beat = Instant::now() + Duration::from_secs(1);
            }
            self.flush(i);
        }
    }

    /// Runs the loop until `done` says so or `limit` passes; false on the limit.
    fn until(&mut self, limit: Duration, done: impl Fn(&Sim) -> bool) -> bool {
        let end = Instant::now() + limit;
        let mut events = Events::with_capacity(4096);
        while !done(self) {
            if Instant::now() >= end {
                return false;
            }
            while self.in_flight < IN_FLIGHT {
                let Some(i) = self.queue.pop_front() else {
                    break;
                };
                self.connect(i);
            }
            let _ = self.poll.poll(&mut events, Some(Duration::from_millis(20)));
            let ready: Vec<(usize, bool, bool)> = events
                .iter()
                .map(|e| (e.token().0, e.is_readable(), e.is_writable()))
                .collect();
            for (i, r, w) in ready {
                if w {
                    self.flush(i);
                }
                if r {
                    self.read(i);
                }
            }
            // The beats due, looked for every 50 ms: a walk of 20,000 nodes per turn of this loop
            // (hundreds of turns a second while they join) made the simulator its own bottleneck.
            let now = Instant::now();
            if now < self.next_scan {
                continue;
            }
            self.next_scan = now + Duration::from_millis(50);
            for i in 0..self.nodes.len() {
                let n = &mut self.nodes[i];
                if matches!(n.state, State::Joined | State::Running | State::Stopped)
                    && now >= n.next_beat
                {
                    n.next_beat = now + Duration::from_secs(1);
                    self.send(i, &Msg::Hb);
                }
            }
        }
        true
    }
}

fn main() {
    let a = args();
    raise_open_files(u64::from(a.nodes) + 1024);
    let creds = match &a.munge {
        Some(sock) => Credentials {
            secret: None,
            munge: Some(Munge::open(Some(std::path::Path::new(sock))).unwrap()),
        },
        None => Credentials {
            secret: std::env::var("ACCEL_LAUNCH_SECRET")
                .ok()
                .map(|s| Secret::new(s.as_bytes())),
            munge: None,
        },
    };
    let addr: SocketAddr = format!("{}:{}", a.addr, a.port).parse().unwrap();
    let n = a.nodes as usize;
    let mut sim = Sim {
        poll: Poll::new().unwrap(),
        nodes: (1..=a.nodes)
            .map(|node| Node {
                node,
                sock: None,
                peer: None,
                tx: None,
                out: VecDeque::new(),
                state: State::Idle,
                next_beat: Instant::now(),
            })
            .collect(),
        creds,
        addr,
        started: 0,
        stopped: 0,
        finished: 0,
        in_flight: 0,
        queue: (0..n).collect(),
        refusals: Vec::new(),
        next_scan: Instant::now(),
        a,
    };
    let pid = sim.a.node0;
    let t0 = Instant::now();
    let joined = sim.until(Duration::from_secs(300), |s| s.started == n);
    let join_s = t0.elapsed().as_secs_f64();
    if !joined {
        println!(
            "{}",
            serde_json::json!({"nodes": n, "error": format!("{} of {n} started in 300 s", sim.started), "refusals": sim.refusals})
        );
        std::process::exit(1);
    }
    // Steady heartbeats: node 0's CPU over the window, after a second to settle.
    sim.until(Duration::from_secs(1), |_| false);
    let (c0, w0) = (pid.map(cpu), Instant::now());
    sim.until(Duration::from_secs_f64(sim.a.steady), |_| false);
    let share = match (c0, pid) {
        (Some(c0), Some(p)) => Some((cpu(p) - c0) / w0.elapsed().as_secs_f64()),
        _ => None,
    };
    let descriptors = pid.map(fds);
    // A rank of the last node fails: node 0's stop must reach every node.
    let last = n - 1;
    let failure = FailureReport {
        rank: Some(u32::try_from(last).unwrap() + 1),
        local_rank: Some(0),
        code: Some(7),
        what: "exited with status 7".into(),
        stderr_tail: "simulated failure\n".into(),
        ..FailureReport::lost(sim.nodes[last].node, "sim", "")
    };
    let t1 = Instant::now();
    sim.send(
        last,
        &Msg::Failed {
            attempt: 0,
            failure,
        },
    );
    let delivered = sim.until(Duration::from_secs(60), |s| s.stopped == n);
    let stop_s = t1.elapsed().as_secs_f64();
    // Every node's ranks end; node 0 tells every node how the run ended; every node leaves.
    for i in 0..n {
        sim.send(
            i,
            &Msg::Ended {
                attempt: 0,
                ok: i != last,
            },
        );
    }
    let finished = sim.until(Duration::from_secs(60), |s| s.finished == n);
    let rss = pid.map(|p| status_kib(p, "VmHWM:"));
    for i in 0..n {
        sim.send(i, &Msg::Bye);
    }
    sim.until(Duration::from_millis(500), |_| false);
    println!(
        "{}",
        serde_json::json!({
            "nodes": n,
            "join_s": join_s,
            "stop_s": if delivered { Some(stop_s) } else { None },
            "stopped": sim.stopped,
            "finished": finished,
            "node0_cpu_share": share,
            "node0_fds": descriptors,
            "node0_peak_rss_kib": rss,
            "refusals": sim.refusals,
        })
    );
}
