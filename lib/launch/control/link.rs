//! This launcher's connection to the control plane (every node, node 0 included): the join, the
//! heartbeats, and the stops, decisions and hang requests the server sends.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::super::hang::verdict::WireStack;
use super::auth::{answer, nonce, Answer, Credentials, Handshake, Reader, Secret, Way, Writer};
use super::munge::Munge;
use super::protocol::{
    read_msg, why_closed, write_msg, FailureReport, Join, LostNode, Msg, Unkillable,
};
use super::server::{start_server, Server, ServerSettings};
use super::{lost_after, ControlError};

/// This node's settings for the control plane.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The rendezvous host (node 0's address).
    pub addr: String,
    pub port: u16,
    pub join: Join,
    pub join_timeout: Duration,
    pub heartbeat: Duration,
    /// The run's shared secret (`ACCEL_LAUNCH_SECRET`), if any: it takes precedence over MUNGE.
    pub secret: Option<Secret>,
    /// MUNGE, under SLURM when munged answers.
    pub munge: Option<Munge>,
    /// `--quiet`: no note about an unauthenticated control plane.
    pub quiet: bool,
}

/// This node's place in the world, as the rendezvous assembled it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub world_size: u32,
    pub rank_offset: u32,
    /// The attempt this node starts with: 0, or the next one when it replaces a lost node's launcher.
    pub attempt: u32,
    /// Once an attempt is stopped, node 0 decides within this (`None`: a node never SIGKILLs).
    pub stop_within: Option<Duration>,
}

/// A launcher whose supervision has not moved for this long stops heartbeating, so that node 0
/// counts it as lost: its heartbeat thread alone must not keep a stuck launcher in the run. Every
/// wait of the supervision moves at least each [`HEARTBEAT`](super::HEARTBEAT); its longest
/// blocking steps (a stack dump for --stacks_on_failure, the cleanup of an attempt) take seconds.
pub const STALL: Duration = Duration::from_secs(30);

/// How much longer than node 0's own deadlines a node waits for node 0's decision after a stop.
const DECIDE_MARGIN: Duration = Duration::from_secs(5);

/// The supervision's last sign of life, for the heartbeat thread.
struct Pulse {
    epoch: Instant,
    /// Milliseconds since `epoch` at the last [`Link::pulse`].
    last_ms: AtomicU64,
}

impl Pulse {
    fn new() -> Pulse {
        Pulse {
            epoch: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }
    fn beat(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }
    /// Whether the supervision moved within `stall` of `now`.
    fn alive(&self, now: Instant, stall: Duration) -> bool {
        let last = self.epoch + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        now.saturating_duration_since(last) < stall
    }
}

/// What follows an attempt whose ranks are all gone on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Every node starts this attempt.
    Restart(u32),
    /// No further attempt: how the run ended (`None`: every rank of every node succeeded).
    Finish(Option<FailureReport>),
    /// This launcher left the run (a signal while waiting): every node ends with this report.
    Leave(FailureReport),
}

/// The next attempt waits (at most `secs` seconds) for launchers replacing the lost nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub attempt: u32,
    pub lost: Vec<LostNode>,
    pub secs: u64,
}

enum Incoming {
    Msg(Msg),
    Lost(String),
}

/// This launcher's connection to the control plane.
pub struct Link {
    node: u32,
    addr: String,
    writer: Arc<Mutex<Writer>>,
    inbox: Mutex<Receiver<Incoming>>,
    /// The world's hang judgement's requests and verdict (`Autopsy`, `Verdict`), read by the
    /// supervisor apart from the stops and decisions.
    hang_inbox: Mutex<Receiver<Msg>>,
    pending: Mutex<VecDeque<Msg>>,
    /// Set once contact with the server is lost: its reason.
    lost: Mutex<Option<String>>,
    closing: Arc<AtomicBool>,
    server: Option<Server>,
    first_attempt: u32,
    pulse: Arc<Pulse>,
    /// Node 0's bound on its decision once an attempt is stopped (from `Start`).
    stop_within: Mutex<Option<Duration>>,
    /// When this node learned that the running attempt is stopped (its own failure, or node 0's stop).
    stopped_at: Mutex<Option<Instant>>,
    /// Ranks left behind after SIGKILL, as node 0 relayed them (this node's own included).
    unkillable: Mutex<Vec<Unkillable>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("node", &self.node)
            .field("addr", &self.addr)
            .finish()
    }
}

impl Link {
    /// Joins the run's control plane (hosting it first on node 0) and waits, at most the join
    /// timeout, until every node has joined.
    ///
    /// `stopped` is asked every 100 ms whether this launcher was told to stop meanwhile (a
    /// signal): it then leaves the join at once — node 0 is told, and ends the join on every node
    /// with that report — and returns [`ControlError::Left`].
    pub fn join(
        s: &Settings,
        mut stopped: impl FnMut() -> Option<FailureReport>,
    ) -> Result<(Link, Place), ControlError> {
        resolvable(&s.addr)?;
        let server = if s.join.node == 0 {
            Some(start_server(ServerSettings {
                bind: bind_address(s),
                port: s.port,
                join_timeout: s.join_timeout,
                heartbeat: s.heartbeat,
                reference: s.join.clone(),
                creds: credentials(s),
            })?)
        } else {
            None
        };
        if s.join.node == 0 && !s.quiet {
            eprintln!("accel-launch: note: {}", auth_in_force(s));
        }
        let window = lost_after(s.heartbeat);
        // The join's blocking steps run on a thread of their own, so that a signal is acted on at
        // once, whatever the join is waiting for.
        let (tx, steps) = mpsc::channel();
        {
            let settings = s.clone();
            std::thread::Builder::new()
                .name("control-join".into())
                .spawn(move || join_steps(&settings, &tx))
                .map_err(|source| ControlError::Io {
                    addr: format!("{}:{}", s.addr, s.port),
                    what: "start the join".into(),
                    source,
                })?;
        }
        let mut joined: Option<Member> = None;
        let done = loop {
            match steps.recv_timeout(Duration::from_millis(100)) {
                Ok(JoinStep::Joined {
                    writer,
                    closing,
                    pulse,
                }) => joined = Some((writer, closing, pulse)),
                Ok(JoinStep::Done(r)) => break *r,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let Some(report) = stopped() else { continue };
                    if let Some((w, closing, _)) = &joined {
                        let _ = write_msg(
                            w,
                            &Msg::Leave {
                                failure: report.clone(),
                            },
                        );
                        let _ = write_msg(w, &Msg::Bye);
                        // Node 0 ends the join on every node with it: this launcher's own end of
                        // it (`Finish`) says it was carried, within a few heartbeats.
                        let until = Instant::now() + window;
                        while Instant::now() < until {
                            match steps.recv_timeout(Duration::from_millis(100)) {
                                Ok(JoinStep::Done(_))
                                | Err(mpsc::RecvTimeoutError::Disconnected) => break,
                                _ if stopped().is_some() => break,
                                _ => {}
                            }
                        }
                        closing.store(true, Ordering::Relaxed);
                        if let Some(server) = &server {
                            server.wait_done(window);
                        }
                    }
                    return Err(ControlError::Left {
                        node: s.join.node,
                        report: Box::new(report),
                    });
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(ControlError::Io {
                        addr: format!("{}:{}", s.addr, s.port),
                        what: "join".into(),
                        source: std::io::Error::other("the join's thread ended"),
                    })
                }
            }
        };
        let closing_now = |j: &Option<Member>| {
            if let Some((w, c, _)) = j {
                c.store(true, Ordering::Relaxed);
                let _ = write_msg(w, &Msg::Bye);
            }
        };
        let (mut reader, place) = match done {
            Ok(r) => r,
            Err(e) => {
                closing_now(&joined);
                if let (Some(server), ControlError::Ended { .. }) = (&server, &e) {
                    server.wait_done(window);
                }
                return Err(e);
            }
        };
        let Some((writer, closing, pulse)) = joined else {
            return Err(ControlError::Io {
                addr: format!("{}:{}", s.addr, s.port),
                what: "join".into(),
                source: std::io::Error::other("started without a join"),
            });
        };
        let _ = reader.stream().set_read_timeout(Some(window));
        let (tx, rx) = mpsc::channel();
        let (hang_tx, hang_rx) = mpsc::channel();
        {
            let closing = Arc::clone(&closing);
            std::thread::spawn(move || loop {
                match read_msg(&mut reader) {
                    Ok(Some(Msg::Hb)) => {}
                    Ok(Some(m @ (Msg::Autopsy { .. } | Msg::Verdict { .. }))) => {
                        let _ = hang_tx.send(m);
                    }
                    Ok(Some(m)) => {
                        if tx.send(Incoming::Msg(m)).is_err() {
                            return;
                        }
                    }
                    Ok(None) => {
                        if !closing.load(Ordering::Relaxed) {
                            let _ = tx.send(Incoming::Lost(
                                "its launcher's connection closed (the launcher ended or was killed)"
                                    .into(),
                            ));
                        }
                        return;
                    }
                    Err(e) => {
                        if !closing.load(Ordering::Relaxed) {
                            let _ = tx.send(Incoming::Lost(why_closed(Some(&e), window)));
                        }
                        return;
                    }
                }
            });
        }
        Ok((
            Link {
                node: s.join.node,
                addr: s.addr.clone(),
                writer,
                inbox: Mutex::new(rx),
                hang_inbox: Mutex::new(hang_rx),
                pending: Mutex::new(VecDeque::new()),
                lost: Mutex::new(None),
                closing,
                server,
                first_attempt: place.attempt,
                pulse,
                stop_within: Mutex::new(place.stop_within),
                stopped_at: Mutex::new(None),
                unkillable: Mutex::new(Vec::new()),
            },
            place,
        ))
    }

    /// The supervision is alive: the heartbeats go on ([`STALL`]).
    pub fn pulse(&self) {
        self.pulse.beat();
    }

    /// Ranks that did not exit after SIGKILL, as node 0 relayed them (every node's).
    pub fn unkillable(&self) -> Vec<Unkillable> {
        self.unkillable
            .lock()
            .map(|u| u.clone())
            .unwrap_or_default()
    }

    /// Tells node 0 of this node's ranks left behind after SIGKILL.
    pub fn report_unkillable(&self, attempt: u32, ranks: Vec<Unkillable>) {
        let _ = write_msg(&self.writer, &Msg::Left { attempt, ranks });
    }

    /// This launcher ends the run (a local error, a signal between attempts): every node is told
    /// why and exits with `failure`'s status.
    pub fn leave(&self, failure: FailureReport) {
        let _ = write_msg(&self.writer, &Msg::Leave { failure });
    }

    fn stopped_now(&self) {
        if let Ok(mut s) = self.stopped_at.lock() {
            s.get_or_insert_with(Instant::now);
        }
    }

    pub fn node(&self) -> u32 {
        self.node
    }

    /// The attempt this node's ranks start with: above 0 for a launcher that replaced a lost one.
    pub fn first_attempt(&self) -> u32 {
        self.first_attempt
    }

    fn lost_report(&self, why: &str) -> FailureReport {
        let mut f = FailureReport::lost(0, &self.addr, why);
        if self.node != 0 {
            // Unlike another node, node 0 cannot be replaced: the plane and its state die with it.
            f.what
                .push_str("; node 0 hosts the control plane, so the run cannot go on without it");
        }
        f
    }

    fn take(&self, wait: Option<Duration>) -> Option<Incoming> {
        let rx = self.inbox.lock().ok()?;
        match wait {
            None => rx.try_recv().ok(),
            Some(d) => rx.recv_timeout(d).ok(),
        }
    }

    /// A stop sent by the server (another node's failure), or the loss of the server itself. Does
    /// not block.
    pub fn poll_stop(&self) -> Option<FailureReport> {
        if let Some(why) = self.lost.lock().ok()?.clone() {
            return Some(self.lost_report(&why));
        }
        while let Some(i) = self.take(None) {
            match i {
                Incoming::Msg(Msg::Stop { failure, .. }) => {
                    self.stopped_now();
                    return Some(failure);
                }
                Incoming::Msg(m) => {
                    if let Ok(mut p) = self.pending.lock() {
                        p.push_back(m);
                    }
                }
                Incoming::Lost(why) => {
                    if let Ok(mut l) = self.lost.lock() {
                        *l = Some(why.clone());
                    }
                    return Some(self.lost_report(&why));
                }
            }
        }
        None
    }

    /// Tells node 0 that this node's ranks have been still for `quiet`, or (`None`) move again.
    pub fn report_quiet(&self, attempt: u32, quiet: Option<Duration>) {
        let quiet_ms = quiet.map(|q| q.as_millis() as u64);
        let _ = write_msg(&self.writer, &Msg::Quiet { attempt, quiet_ms });
    }

    /// Answers node 0's `Autopsy` with this node's ranks' stacks.
    pub fn send_stacks(&self, attempt: u32, stacks: Vec<WireStack>) {
        let _ = write_msg(&self.writer, &Msg::Stacks { attempt, stacks });
    }

    /// Node 0's request for stacks or its verdict, for `attempt`. Does not block.
    pub fn poll_hang(&self, attempt: u32) -> Option<Msg> {
        let rx = self.hang_inbox.lock().ok()?;
        while let Ok(m) = rx.try_recv() {
            match &m {
                Msg::Autopsy { attempt: a } | Msg::Verdict { attempt: a, .. } if *a == attempt => {
                    return Some(m)
                }
                _ => {}
            }
        }
        None
    }

    /// Tells every node that this one failed (its first failure of the attempt).
    pub fn local_failure(&self, attempt: u32, failure: FailureReport) {
        self.stopped_now();
        let _ = write_msg(&self.writer, &Msg::Failed { attempt, failure });
    }

    /// Every rank of `attempt` on this node is gone: waits for the world's decision.
    ///
    /// Every wait here ends: a lost server ends it (the heartbeats); once the attempt is stopped,
    /// node 0 decides within its deadlines ([`Place::stop_within`]) and a node waits that plus
    /// [`DECIDE_MARGIN`]; a wait for replacements lasts what node 0 said (`Wait`'s `secs`) plus the
    /// margin. Only an attempt that ended well here while the other nodes' ranks still run waits
    /// as long as they run. `on_wait` is told each time the world waits for replacements of lost
    /// nodes; `stopped` is asked every 200 ms whether this launcher was told to stop meanwhile (a
    /// signal): it then leaves the run at once, and every node ends with that report.
    pub fn attempt_ended(
        &self,
        attempt: u32,
        ok: bool,
        mut on_wait: impl FnMut(&Waiting),
        mut stopped: impl FnMut() -> Option<FailureReport>,
    ) -> Decision {
        if let Some(why) = self.lost.lock().ok().and_then(|l| l.clone()) {
            return Decision::Finish(Some(self.lost_report(&why)));
        }
        if write_msg(&self.writer, &Msg::Ended { attempt, ok }).is_err() {
            return Decision::Finish(Some(self.lost_report("its launcher's connection failed")));
        }
        if !ok {
            self.stopped_now();
        }
        // Until when node 0's decision may take, once known.
        let mut until: Option<Instant> = None;
        let mut last: Option<FailureReport> = None;
        loop {
            self.pulse();
            if let Some(f) = stopped() {
                self.leave(f.clone());
                return Decision::Leave(f);
            }
            if until.is_none() {
                let at = self.stopped_at.lock().ok().and_then(|s| *s);
                let within = self.stop_within.lock().ok().and_then(|w| *w);
                if let (Some(at), Some(w)) = (at, within) {
                    until = Some(at + w + DECIDE_MARGIN);
                }
            }
            if let Some(u) = until.filter(|u| Instant::now() >= *u) {
                let secs = u.saturating_duration_since(
                    self.stopped_at.lock().ok().and_then(|s| *s).unwrap_or(u),
                );
                let mut f = last.unwrap_or_else(|| {
                    self.lost_report(&format!(
                        "it gave no decision within {} s of the stop",
                        secs.as_secs()
                    ))
                });
                if f.node != 0 || f.rank.is_some() {
                    f.what.push_str(&format!(
                        "; node 0 gave no decision within {} s of the stop",
                        secs.as_secs()
                    ));
                }
                return Decision::Finish(Some(f));
            }
            let next = self
                .pending
                .lock()
                .ok()
                .and_then(|mut p| p.pop_front())
                .map(Incoming::Msg)
                .or_else(|| self.take(Some(Duration::from_millis(200))));
            match next {
                Some(Incoming::Msg(Msg::Start {
                    attempt: a,
                    stop_within_ms,
                    ..
                })) if a > attempt => {
                    if let Ok(mut w) = self.stop_within.lock() {
                        *w = stop_within_ms.map(Duration::from_millis);
                    }
                    if let Ok(mut s) = self.stopped_at.lock() {
                        *s = None;
                    }
                    return Decision::Restart(a);
                }
                Some(Incoming::Msg(Msg::Finish { failure })) => return Decision::Finish(failure),
                Some(Incoming::Msg(Msg::Stop { failure, .. })) => {
                    self.stopped_now();
                    last = Some(failure);
                }
                Some(Incoming::Msg(Msg::Left { ranks, .. })) => {
                    if let Ok(mut u) = self.unkillable.lock() {
                        u.extend(ranks);
                    }
                }
                Some(Incoming::Msg(Msg::Wait {
                    attempt: a,
                    lost,
                    secs,
                })) if a > attempt => {
                    // The wait is node 0's to end (it gives up after `secs`); this node waits that
                    // long again, and the margin, from each `Wait`.
                    until = Some(
                        Instant::now()
                            + Duration::from_secs(secs.min(crate::duration::MAX_SECONDS))
                            + DECIDE_MARGIN,
                    );
                    on_wait(&Waiting {
                        attempt: a,
                        lost,
                        secs,
                    })
                }
                Some(Incoming::Lost(why)) => {
                    if let Ok(mut l) = self.lost.lock() {
                        *l = Some(why.clone());
                    }
                    return Decision::Finish(Some(self.lost_report(&why)));
                }
                _ => {}
            }
        }
    }

    /// Leaves the control plane after `Finish`. Node 0 hosts it, so it stays (at most a few
    /// heartbeats) until the other nodes have left, so each receives the run's end.
    pub fn close(&self) {
        self.closing.store(true, Ordering::Relaxed);
        let _ = write_msg(&self.writer, &Msg::Bye);
        if let Some(s) = &self.server {
            s.wait_done(Duration::from_secs(5));
        }
    }
}

/// What the join's thread reports.
enum JoinStep {
    /// The join is sent and the heartbeats run: this node is a member now.
    Joined {
        writer: Arc<Mutex<Writer>>,
        closing: Arc<AtomicBool>,
        pulse: Arc<Pulse>,
    },
    /// Every node joined (or the join failed).
    Done(Box<Result<(Reader, Place), ControlError>>),
}

/// A joined node's connection: its writing side, the heartbeats' stop flag and pulse.
type Member = (Arc<Mutex<Writer>>, Arc<AtomicBool>, Arc<Pulse>);

/// The join's blocking steps: connect and authenticate (again while the join timeout lasts when
/// node 0 is not up yet or dropped the connection before its challenge), join, heartbeat, and wait
/// for node 0's `start`.
fn join_steps(s: &Settings, tx: &mpsc::Sender<JoinStep>) {
    let done = |r| {
        let _ = tx.send(JoinStep::Done(Box::new(r)));
    };
    let addr = format!("{}:{}", s.addr, s.port);
    let deadline = Instant::now() + s.join_timeout;
    let timeout = || ControlError::JoinTimeout {
        node: s.join.node,
        addr: addr.clone(),
        secs: s.join_timeout.as_secs(),
        detail: None,
    };
    let window = lost_after(s.heartbeat);
    let (mut reader, writer) = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return done(Err(timeout()));
        }
        let stream = match connect(&addr, left.min(Duration::from_secs(5))) {
            Ok(st) => st,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(100).min(left));
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok(w) = stream.try_clone() else { continue };
        let mut writer = Writer::new(w, Way::ToServer);
        let _ = writer.s.set_write_timeout(Some(window));
        let mut reader = Reader::new(stream, Way::ToNode);
        match authenticate(s, &addr, &mut reader, &mut writer) {
            Ok(()) => break (reader, writer),
            Err(ControlError::Io { .. })
                if Instant::now() + Duration::from_millis(200) < deadline =>
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return done(Err(e)),
        }
    };
    let writer = Arc::new(Mutex::new(writer));
    if let Err(source) = write_msg(&writer, &Msg::Join(s.join.clone())) {
        return done(Err(ControlError::Io {
            addr,
            what: "send the join".into(),
            source,
        }));
    }
    // Heartbeats start with the join, not with `start`: node 0 loses a member silent for the
    // heartbeat window, and the other nodes may join up to the join timeout later.
    let closing = Arc::new(AtomicBool::new(false));
    let pulse = Arc::new(Pulse::new());
    pulse.beat();
    {
        let w = Arc::clone(&writer);
        let closing = Arc::clone(&closing);
        let pulse = Arc::clone(&pulse);
        let beat = s.heartbeat;
        let node = s.join.node;
        std::thread::spawn(move || {
            let mut stalled = false;
            while !closing.load(Ordering::Relaxed) {
                if pulse.alive(Instant::now(), STALL) {
                    stalled = false;
                    if write_msg(&w, &Msg::Hb).is_err() {
                        return;
                    }
                } else if !stalled {
                    stalled = true;
                    eprintln!(
                        "accel-launch: node {node}'s supervision has not moved for {} s: no more heartbeats, so node 0 counts this node as lost",
                        STALL.as_secs()
                    );
                }
                std::thread::sleep(beat);
            }
        });
    }
    log::debug!("node {} joined the control plane at {addr}", s.join.node);
    let _ = tx.send(JoinStep::Joined {
        writer,
        closing,
        pulse: Arc::clone(&pulse),
    });
    let place = wait_for_start(s, &addr, deadline, &mut reader, window, &pulse);
    done(place.map(|p| (reader, p)));
}

/// Where node 0 listens: every interface when joins are authenticated, else only the rendezvous
/// address (when it is one of this host's), so that the open port reaches no further than it must.
fn bind_address(s: &Settings) -> IpAddr {
    let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    if credentials(s).kind() != "none" {
        return any;
    }
    let ours = |ip: &IpAddr| ip.is_ipv4() && std::net::TcpListener::bind((*ip, 0)).is_ok();
    if let Ok(ip) = s.addr.parse::<IpAddr>() {
        return if ours(&ip) { ip } else { any };
    }
    let Ok(addrs) = (s.addr.as_str(), s.port).to_socket_addrs() else {
        return any;
    };
    let ips: Vec<IpAddr> = addrs.map(|a| a.ip()).filter(ours).collect();
    // A host name this host resolves to loopback (Debian's 127.0.1.1 line) is not what the other
    // nodes resolve it to: only `localhost` itself means loopback.
    match ips.iter().find(|ip| !ip.is_loopback()) {
        Some(ip) => *ip,
        None if s.addr == "localhost" => ips.first().copied().unwrap_or(any),
        None => any,
    }
}

/// The node's side of the handshake ([`super::auth`]): hello, node 0's challenge checked (its
/// run id, and its proof when the run has a secret), this node's proof, then every line sealed.
fn authenticate(
    s: &Settings,
    addr: &str,
    reader: &mut Reader,
    writer: &mut Writer,
) -> Result<(), ControlError> {
    let refused = |reason: String| ControlError::Refused {
        node: s.join.node,
        addr: addr.to_string(),
        reason,
    };
    let io = |what: &str, source| ControlError::Io {
        addr: addr.to_string(),
        what: what.into(),
        source,
    };
    let client_nonce = nonce()?;
    let hello = Msg::Hello {
        protocol: super::PROTOCOL,
        node: s.join.node,
        nonce: client_nonce.clone(),
    };
    writer
        .send(&hello.json())
        .map_err(|e| io("send the hello", e))?;
    let _ = reader
        .stream()
        .set_read_timeout(Some(Duration::from_secs(10)));
    let (run_id, auth, server_nonce, proof) = match read_msg(reader) {
        Ok(Some(Msg::Challenge {
            run_id,
            auth,
            nonce,
            proof,
        })) => (run_id, auth, nonce, proof),
        Ok(Some(Msg::Reject { reason })) => return Err(refused(reason)),
        Ok(Some(_)) => return Err(refused("node 0 did not answer the hello".into())),
        Ok(None) => {
            return Err(io(
                "authenticate",
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                ),
            ))
        }
        Err(e) => return Err(io("authenticate", e)),
    };
    if run_id != s.join.run_id {
        return Err(refused(format!(
            "node 0 serves run `{run_id}`, this node belongs to run `{}`",
            s.join.run_id
        )));
    }
    let hs = Handshake {
        run_id: &run_id,
        node: s.join.node,
        client_nonce: &client_nonce,
        server_nonce: &server_nonce,
    };
    match answer(&credentials(s), &hs, &auth, proof.as_deref()).map_err(refused)? {
        Answer::Open => Ok(()),
        Answer::Prove { proof, session } => {
            writer
                .send(&Msg::Prove { proof }.json())
                .map_err(|e| io("send the proof", e))?;
            writer.seal.key(session.clone());
            reader.seal.key(session);
            Ok(())
        }
    }
}

/// What node 0 says of its control plane's authentication, once.
fn auth_in_force(s: &Settings) -> String {
    let (addr, port) = (&s.addr, s.port);
    let var = crate::env_vars::ACCEL_LAUNCH_SECRET;
    match (&s.secret, &s.munge) {
        (Some(_), _) => format!(
            "control plane: {addr}:{port} admits only launchers holding this run's secret ({var}; HMAC-SHA256)"
        ),
        (None, Some(m)) => format!(
            "control plane: {addr}:{port} admits only launchers proving uid {} with MUNGE (SLURM's own authentication; munged at {})",
            m.uid(),
            m.socket()
        ),
        (None, None) => format!(
            "the control plane on {addr}:{port} is not authenticated: anyone who reaches it can join or stop this run; set {var} (or {}) to the same secret on every node",
            crate::env_vars::ACCEL_LAUNCH_SECRET_FILE
        ),
    }
}

/// How this node proves itself: the secret when there is one, else MUNGE when it answers.
fn credentials(s: &Settings) -> Credentials {
    Credentials {
        secret: s.secret.clone(),
        munge: if s.secret.is_some() {
            None
        } else {
            s.munge.clone()
        },
    }
}

/// Refuses at once a host that cannot name any address: a name the resolver says does not exist
/// (or an empty or malformed one) cannot start answering later. A temporary failure (`EAI_AGAIN`:
/// the DNS server did not answer) is left to the join's retries.
fn resolvable(host: &str) -> Result<(), ControlError> {
    let refuse = |reason: String| ControlError::Unresolvable {
        host: host.to_string(),
        reason,
    };
    if host.trim().is_empty() {
        return Err(refuse("it is empty".into()));
    }
    let Ok(c) = std::ffi::CString::new(host) else {
        return Err(refuse("it holds a NUL byte".into()));
    };
    let mut res: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: a NUL-terminated host, no hints, and a result list freed below.
    let rc = unsafe { libc::getaddrinfo(c.as_ptr(), std::ptr::null(), std::ptr::null(), &mut res) };
    if rc == 0 {
        // SAFETY: `res` came from a successful getaddrinfo.
        unsafe { libc::freeaddrinfo(res) };
        return Ok(());
    }
    if rc == libc::EAI_AGAIN || rc == libc::EAI_SYSTEM {
        return Ok(());
    }
    // SAFETY: gai_strerror returns a static NUL-terminated string.
    let why = unsafe { std::ffi::CStr::from_ptr(libc::gai_strerror(rc)) };
    Err(refuse(why.to_string_lossy().into_owned()))
}

fn connect(addr: &str, timeout: Duration) -> std::io::Result<TcpStream> {
    let addrs: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Waits for node 0's `start` (every node joined) until the join deadline. Node 0 beats to every
/// member from its join on, so a silence of the heartbeat window means node 0 is gone.
fn wait_for_start(
    s: &Settings,
    addr: &str,
    deadline: Instant,
    reader: &mut Reader,
    window: Duration,
    pulse: &Pulse,
) -> Result<Place, ControlError> {
    let timeout = || ControlError::JoinTimeout {
        node: s.join.node,
        addr: addr.to_string(),
        secs: s.join_timeout.as_secs(),
        detail: None,
    };
    let io = |what: &str, source| ControlError::Io {
        addr: addr.to_string(),
        what: what.into(),
        source,
    };
    // The server says which nodes are missing when its own join timeout passes: give it a
    // heartbeat or two beyond ours to say so.
    let deadline = deadline + s.heartbeat * 2;
    loop {
        pulse.beat();
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timeout());
        }
        let _ = reader.stream().set_read_timeout(Some(left.min(window)));
        match read_msg(reader) {
            Ok(Some(Msg::Start {
                attempt,
                world_size,
                rank_offset,
                stop_within_ms,
                ..
            })) => {
                return Ok(Place {
                    world_size,
                    rank_offset,
                    attempt,
                    stop_within: stop_within_ms.map(Duration::from_millis),
                })
            }
            Ok(Some(Msg::Reject { reason })) if reason.starts_with("not every node") => {
                return Err(ControlError::JoinTimeout {
                    node: s.join.node,
                    addr: addr.to_string(),
                    secs: s.join_timeout.as_secs(),
                    detail: Some(reason),
                })
            }
            Ok(Some(Msg::Reject { reason })) => {
                return Err(ControlError::Refused {
                    node: s.join.node,
                    addr: addr.to_string(),
                    reason,
                })
            }
            // A node left the join (a signal): node 0 ended it for every node.
            Ok(Some(Msg::Finish {
                failure: Some(report),
            })) => {
                return Err(ControlError::Ended {
                    report: Box::new(report),
                })
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(io(
                    "wait for every node to join",
                    std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the server closed the connection",
                    ),
                ))
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if Instant::now() >= deadline {
                    return Err(timeout());
                }
                return Err(io(
                    "wait for every node to join",
                    std::io::Error::new(e.kind(), why_closed(Some(&e), window)),
                ));
            }
            Err(e) => return Err(io("wait for every node to join", e)),
        }
    }
}
