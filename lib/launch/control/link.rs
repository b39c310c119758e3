//! This launcher's connection to the control plane (every node, node 0 included): the join, the
//! heartbeats, and the stops, decisions and hang requests the server sends. The protocol is this
//! node's [`Peer`]'s; this is the blocking I/O around it: a thread for the join's steps (so that a
//! signal is acted on at once, whatever the join waits for), one that reads node 0's lines once the
//! world started, and one that beats.

use std::collections::VecDeque;
use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::super::hang::verdict::WireStack;
use super::super::straggler::RankWindow;
use super::auth::{Credentials, Secret};
use super::munge::Munge;
use super::peer::{End, Event, Peer, Sender};
use super::protocol::lost_after;
use super::protocol::{FailureReport, Join, LostNode, Msg, Place, Unkillable};
use super::server::{start_server, Server, ServerSettings};
use super::spares::Roster;
use super::ControlError;

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
    /// `--quiet`: no note about an unauthenticated control plane, nor of the connections node 0
    /// refuses.
    pub quiet: bool,
    /// `--exclude_file` (node 0): each lost node's host is appended to it.
    pub exclude_file: Option<std::path::PathBuf>,
    /// `--replace_failing_nodes` (node 0's decides): a node whose ranks fail is replaced by a
    /// waiting spare rather than restarted in place.
    pub replace_failing: bool,
    /// `--drain_lost_nodes` (node 0): how each lost node is drained under SLURM.
    pub drain: Option<super::Drain>,
}

/// What the join left this launcher with.
#[derive(Debug)]
pub enum Joined {
    /// In the world: the link, and this node's place (a spare's is the lost node's it took).
    World(Link, Place),
    /// A spare whose wait ended with the run, before it took any node's place: how the run ended
    /// (`None`: every rank of the world succeeded).
    Released(Option<FailureReport>),
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

/// A connection's writing side: its socket, and the sealing its handshake keyed.
struct Writer {
    s: TcpStream,
    tx: Sender,
}

/// Writes one message (the lock keeps each line whole, and its seal's sequence in order).
fn send(w: &Mutex<Writer>, m: &Msg) -> std::io::Result<()> {
    let mut w = w.lock().map_err(|_| std::io::Error::other("poisoned"))?;
    let line = w.tx.line(m);
    w.s.write_all(&line)
}

/// A joined node's connection: its writing side, the heartbeats' stop flag and pulse.
#[derive(Clone)]
struct Member {
    writer: Arc<Mutex<Writer>>,
    closing: Arc<AtomicBool>,
    pulse: Arc<Pulse>,
}

impl Member {
    /// This node leaves: its heartbeats stop, and node 0 hears goodbye (not a loss).
    fn close(&self) {
        self.closing.store(true, Ordering::Relaxed);
        let _ = send(&self.writer, &Msg::Bye);
    }
}

/// This launcher's connection to the control plane.
pub struct Link {
    node: u32,
    addr: String,
    member: Member,
    inbox: Mutex<Receiver<Incoming>>,
    /// The world's hang judgement's requests and verdict (`Autopsy`, `Verdict`), read by the
    /// supervisor apart from the stops and decisions.
    hang_inbox: Mutex<Receiver<Msg>>,
    /// The other nodes' straggler windows, as node 0's server hands them to node 0.
    windows_inbox: Mutex<Receiver<Msg>>,
    pending: Mutex<VecDeque<Msg>>,
    /// Set once contact with the server is lost: its reason.
    lost: Mutex<Option<String>>,
    server: Option<Server>,
    first_attempt: u32,
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
    ///
    /// A spare (its node rank at or beyond the world's) waits here until it takes a lost node's
    /// place ([`Joined::World`], with that node's place) or the run ends ([`Joined::Released`]).
    pub fn join(
        s: &Settings,
        mut stopped: impl FnMut() -> Option<FailureReport>,
    ) -> Result<Joined, ControlError> {
        resolvable(&s.addr)?;
        let server = host(s)?;
        let steps = spawn_join(s)?;
        let (member, wire, place) = match await_join(s, &steps, &mut stopped, server.as_ref())? {
            Admitted::World(member, wire, place) => (member, wire, place),
            Admitted::Released(f) => return Ok(Joined::Released(f)),
        };
        let (inbox, hang_inbox, windows_inbox) = spawn_reader(*wire, Arc::clone(&member.closing));
        Ok(Joined::World(
            Link {
                node: place.node,
                addr: s.addr.clone(),
                member,
                inbox: Mutex::new(inbox),
                hang_inbox: Mutex::new(hang_inbox),
                windows_inbox: Mutex::new(windows_inbox),
                pending: Mutex::new(VecDeque::new()),
                lost: Mutex::new(None),
                server,
                first_attempt: place.attempt,
                stop_within: Mutex::new(place.stop_within),
                stopped_at: Mutex::new(None),
                unkillable: Mutex::new(Vec::new()),
            },
            place,
        ))
    }

    /// Node 0: the run's spares and lost nodes so far (`None` elsewhere: only node 0 knows them).
    pub fn roster(&self) -> Option<Roster> {
        let s = self.server.as_ref()?;
        s.roster.lock().ok().map(|r| r.clone())
    }

    /// The supervision is alive: the heartbeats go on ([`STALL`]).
    pub fn pulse(&self) {
        self.member.pulse.beat();
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
        let _ = send(&self.member.writer, &Msg::Left { attempt, ranks });
    }

    /// This launcher ends the run (a local error, a signal between attempts): every node is told
    /// why and exits with `failure`'s status.
    pub fn leave(&self, failure: FailureReport) {
        let _ = send(&self.member.writer, &Msg::Leave { failure });
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
        lost_report(self.node, &self.addr, why)
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
        let _ = send(&self.member.writer, &Msg::Quiet { attempt, quiet_ms });
    }

    /// Answers node 0's `Autopsy` with this node's ranks' stacks.
    pub fn send_stacks(&self, attempt: u32, stacks: Vec<WireStack>) {
        let _ = send(&self.member.writer, &Msg::Stacks { attempt, stacks });
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

    /// Sends this node's ranks' straggler window to node 0 (`--straggler_threshold`).
    pub fn send_windows(&self, attempt: u32, ranks: Vec<RankWindow>) {
        let _ = send(&self.member.writer, &Msg::Windows { attempt, ranks });
    }

    /// Node 0: the windows every node (this one included) sent for `attempt` since the last call.
    /// Does not block.
    pub fn poll_windows(&self, attempt: u32) -> Vec<Vec<RankWindow>> {
        let Ok(rx) = self.windows_inbox.lock() else {
            return Vec::new();
        };
        let mut got = Vec::new();
        while let Ok(m) = rx.try_recv() {
            if let Msg::Windows { attempt: a, ranks } = m {
                if a == attempt {
                    got.push(ranks);
                }
            }
        }
        got
    }

    /// Tells every node that this one failed (its first failure of the attempt).
    pub fn local_failure(&self, attempt: u32, failure: FailureReport) {
        self.stopped_now();
        let _ = send(&self.member.writer, &Msg::Failed { attempt, failure });
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
        if send(&self.member.writer, &Msg::Ended { attempt, ok }).is_err() {
            return Decision::Finish(Some(self.lost_report("its launcher's connection failed")));
        }
        if !ok {
            self.stopped_now();
        }
        let mut wait = Undecided::default();
        loop {
            self.pulse();
            if let Some(f) = stopped() {
                self.leave(f.clone());
                return Decision::Leave(f);
            }
            let stopped_at = self.stopped_at.lock().ok().and_then(|s| *s);
            if wait.until.is_none() {
                let within = self.stop_within.lock().ok().and_then(|w| *w);
                if let (Some(at), Some(w)) = (stopped_at, within) {
                    wait.until = Some(at + w + DECIDE_MARGIN);
                }
            }
            if let Some(u) = wait.until.filter(|u| Instant::now() >= *u) {
                let secs = u.saturating_duration_since(stopped_at.unwrap_or(u));
                return Decision::Finish(Some(undecided(
                    self.node,
                    &self.addr,
                    wait.last,
                    secs.as_secs(),
                )));
            }
            let next = self
                .pending
                .lock()
                .ok()
                .and_then(|mut p| p.pop_front())
                .map(Incoming::Msg)
                .or_else(|| self.take(Some(Duration::from_millis(200))));
            if let Some(d) = self.decision(attempt, next, &mut wait, &mut on_wait) {
                return d;
            }
        }
    }

    /// What one message (or the loss of node 0) says while this node waits for the decision on
    /// `attempt`: the decision, when it is one.
    fn decision(
        &self,
        attempt: u32,
        next: Option<Incoming>,
        wait: &mut Undecided,
        on_wait: &mut impl FnMut(&Waiting),
    ) -> Option<Decision> {
        match next? {
            Incoming::Msg(m @ Msg::Start { .. }) => {
                let place = m.place(self.node).filter(|p| p.attempt > attempt)?;
                if let Ok(mut w) = self.stop_within.lock() {
                    *w = place.stop_within;
                }
                if let Ok(mut s) = self.stopped_at.lock() {
                    *s = None;
                }
                Some(Decision::Restart(place.attempt))
            }
            Incoming::Msg(Msg::Finish { failure }) => Some(Decision::Finish(failure)),
            Incoming::Msg(Msg::Stop { failure, .. }) => {
                self.stopped_now();
                wait.last = Some(failure);
                None
            }
            Incoming::Msg(Msg::Left { ranks, .. }) => {
                if let Ok(mut u) = self.unkillable.lock() {
                    u.extend(ranks);
                }
                None
            }
            Incoming::Msg(Msg::Wait {
                attempt: a,
                lost,
                secs,
            }) if a > attempt => {
                // The wait is node 0's to end (it gives up after `secs`); this node waits that
                // long again, and the margin, from each `Wait`.
                wait.until = Some(
                    Instant::now()
                        + Duration::from_secs(secs.min(crate::duration::MAX_SECONDS))
                        + DECIDE_MARGIN,
                );
                on_wait(&Waiting {
                    attempt: a,
                    lost,
                    secs,
                });
                None
            }
            Incoming::Lost(why) => {
                if let Ok(mut l) = self.lost.lock() {
                    *l = Some(why.clone());
                }
                Some(Decision::Finish(Some(self.lost_report(&why))))
            }
            Incoming::Msg(_) => None,
        }
    }

    /// Leaves the control plane after `Finish`. Node 0 hosts it, so it stays (at most a few
    /// heartbeats) until the other nodes have left, so each receives the run's end.
    pub fn close(&self) {
        self.member.close();
        if let Some(s) = &self.server {
            s.wait_done(Duration::from_secs(5));
        }
    }
}

/// What a node waiting for node 0's decision knows so far.
#[derive(Default)]
struct Undecided {
    /// When it stops waiting, once known.
    until: Option<Instant>,
    /// Node 0's last stop of the attempt.
    last: Option<FailureReport>,
}

/// Node 0 lost, as this node reports it.
fn lost_report(node: u32, addr: &str, why: &str) -> FailureReport {
    let mut f = FailureReport::lost(0, addr, why);
    if node != 0 {
        // Unlike another node, node 0 cannot be replaced: the plane and its state die with it.
        f.what
            .push_str("; node 0 hosts the control plane, so the run cannot go on without it");
    }
    f
}

/// How the run ends for a node that waited `secs` after the stop without node 0's decision: the
/// stop's report (`last`), saying so where it names a rank or another node, or else node 0 lost.
fn undecided(node: u32, addr: &str, last: Option<FailureReport>, secs: u64) -> FailureReport {
    let mut f = last.unwrap_or_else(|| {
        lost_report(
            node,
            addr,
            &format!("it gave no decision within {secs} s of the stop"),
        )
    });
    if f.node != 0 || f.rank.is_some() {
        f.what.push_str(&format!(
            "; node 0 gave no decision within {secs} s of the stop"
        ));
    }
    f
}

/// Node 0 hosts the control plane, and says once how it admits launchers.
fn host(s: &Settings) -> Result<Option<Server>, ControlError> {
    if s.join.node != 0 {
        return Ok(None);
    }
    let server = start_server(ServerSettings {
        bind: bind_address(s),
        port: s.port,
        join_timeout: s.join_timeout,
        heartbeat: s.heartbeat,
        reference: s.join.clone(),
        creds: credentials(s),
        quiet: s.quiet,
        exclude_file: s.exclude_file.clone(),
        replace_failing: s.replace_failing,
        drain: s.drain.clone(),
    })?;
    if !s.quiet {
        eprintln!("accel-launch: note: {}", auth_in_force(s));
    }
    Ok(Some(server))
}

/// What the join's thread reports.
enum JoinStep {
    /// The join is sent and the heartbeats run: this node is a member now.
    Joined(Member),
    /// Every node joined (or the join failed).
    Done(Box<Result<Started, ControlError>>),
}

/// How the join's thread ended well.
enum Started {
    World(Box<Wire>, Place),
    /// A spare, released by the run's end.
    Released(Option<FailureReport>),
}

/// How the join ended well, for [`Link::join`].
enum Admitted {
    World(Member, Box<Wire>, Place),
    Released(Option<FailureReport>),
}

/// Starts the join's blocking steps on a thread of their own.
fn spawn_join(s: &Settings) -> Result<Receiver<JoinStep>, ControlError> {
    let (tx, steps) = mpsc::channel();
    let settings = s.clone();
    std::thread::Builder::new()
        .name("control-join".into())
        .spawn(move || join_steps(&settings, &tx))
        .map_err(|source| ControlError::Io {
            addr: format!("{}:{}", s.addr, s.port),
            what: "start the join".into(),
            source,
        })?;
    Ok(steps)
}

/// Waits for the join's thread, asking `stopped` every 100 ms whether this launcher was told to
/// stop meanwhile: it then leaves the join.
fn await_join(
    s: &Settings,
    steps: &Receiver<JoinStep>,
    stopped: &mut impl FnMut() -> Option<FailureReport>,
    server: Option<&Server>,
) -> Result<Admitted, ControlError> {
    let window = lost_after(s.heartbeat);
    let io = |why: &str| ControlError::Io {
        addr: format!("{}:{}", s.addr, s.port),
        what: "join".into(),
        source: std::io::Error::other(why),
    };
    let mut joined: Option<Member> = None;
    let done = loop {
        match steps.recv_timeout(Duration::from_millis(100)) {
            Ok(JoinStep::Joined(m)) => joined = Some(m),
            Ok(JoinStep::Done(r)) => break *r,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let Some(report) = stopped() else { continue };
                if let Some(m) = &joined {
                    leave_join(m, &report, steps, stopped, server, window);
                }
                return Err(ControlError::Left {
                    node: s.join.node,
                    report: Box::new(report),
                });
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(io("the join's thread ended")),
        }
    };
    match (done, joined) {
        (Ok(Started::World(wire, place)), Some(m)) => Ok(Admitted::World(m, wire, place)),
        (Ok(Started::Released(f)), Some(m)) => {
            m.close();
            Ok(Admitted::Released(f))
        }
        (Ok(_), None) => Err(io("started without a join")),
        (Err(e), joined) => {
            if let Some(m) = &joined {
                m.close();
            }
            // Node 0's server tells every node the run's end (a refusal of the world, the join's
            // timeout, the end): it is written from the server's thread, which this process's exit
            // would cut short, leaving the nodes after node 0's own connection with only the
            // connection's close (seen with 16 nodes refused for a wrong --num_processes).
            let world_over = matches!(
                e,
                ControlError::Ended { .. }
                    | ControlError::Refused { .. }
                    | ControlError::JoinTimeout { .. }
            );
            if let (Some(server), true) = (server, world_over) {
                server.wait_done(window);
            }
            Err(e)
        }
    }
}

/// A stop while joined: node 0 is told, and ends the join on every node with `report`; this
/// launcher's own end of it (`Finish`) says it was carried, within a few heartbeats.
fn leave_join(
    m: &Member,
    report: &FailureReport,
    steps: &Receiver<JoinStep>,
    stopped: &mut impl FnMut() -> Option<FailureReport>,
    server: Option<&Server>,
    window: Duration,
) {
    let _ = send(
        &m.writer,
        &Msg::Leave {
            failure: report.clone(),
        },
    );
    let _ = send(&m.writer, &Msg::Bye);
    let until = Instant::now() + window;
    while Instant::now() < until {
        match steps.recv_timeout(Duration::from_millis(100)) {
            Ok(JoinStep::Done(_)) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            _ if stopped().is_some() => break,
            _ => {}
        }
    }
    m.closing.store(true, Ordering::Relaxed);
    if let Some(server) = server {
        server.wait_done(window);
    }
}

/// The join's blocking steps: connect and say hello until node 0 has answered and this node's
/// join is sent, heartbeat from then on, and wait for node 0's `start`.
fn join_steps(s: &Settings, tx: &mpsc::Sender<JoinStep>) {
    let done = |r| {
        let _ = tx.send(JoinStep::Done(Box::new(r)));
    };
    let addr = format!("{}:{}", s.addr, s.port);
    let deadline = Instant::now() + s.join_timeout;
    let (mut wire, writer) = match admitted(s, &addr, deadline) {
        Ok(w) => w,
        Err(e) => return done(Err(e)),
    };
    let member = Member {
        writer: Arc::new(Mutex::new(writer)),
        closing: Arc::new(AtomicBool::new(false)),
        pulse: Arc::new(Pulse::new()),
    };
    member.pulse.beat();
    spawn_heartbeats(&member, s.heartbeat, s.join.node);
    log::debug!("node {} joined the control plane at {addr}", s.join.node);
    let pulse = Arc::clone(&member.pulse);
    let _ = tx.send(JoinStep::Joined(member));
    let started = loop {
        pulse.beat();
        match wire.event() {
            Event::Started(place) => break Ok(Ok(place)),
            // A spare's wait ended with the run.
            Event::Over(End::Released(f)) => break Ok(Err(f.map(|f| *f))),
            Event::Over(end) => break Err(end.error(s.join.node, &addr, s.join_timeout)),
            Event::Joined(_) | Event::Msg(_) => {}
        }
    };
    done(started.map(|got| match got {
        Ok(place) => Started::World(Box::new(wire), place),
        Err(f) => Started::Released(f),
    }));
}

/// Connects and says hello until node 0 has answered and this node's join is sent: again, while
/// the join timeout lasts, when node 0 is not up yet or dropped the connection before its
/// challenge.
fn admitted(s: &Settings, addr: &str, deadline: Instant) -> Result<(Wire, Writer), ControlError> {
    let window = lost_after(s.heartbeat);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(End::TimedOut(None).error(s.join.node, addr, s.join_timeout));
        }
        let stream = match connect(addr, left.min(Duration::from_secs(5))) {
            Ok(st) => st,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(100).min(left));
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok(w) = stream.try_clone() else { continue };
        let _ = w.set_write_timeout(Some(window));
        let (peer, hello) = Peer::new(s.join.clone(), credentials(s))?;
        let mut wire = Wire::new(stream, peer.until(deadline, s.heartbeat));
        let end = match wire.hello(&hello) {
            Ok(tx) => return Ok((wire, Writer { s: w, tx })),
            Err(end) => end,
        };
        if end.again() && Instant::now() + Duration::from_millis(200) < deadline {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        return Err(end.error(s.join.node, addr, s.join_timeout));
    }
}

/// Beats to node 0 every `beat` while the supervision lives ([`STALL`]), until the node closes.
fn spawn_heartbeats(m: &Member, beat: Duration, node: u32) {
    let Member {
        writer,
        closing,
        pulse,
    } = m.clone();
    std::thread::spawn(move || {
        let mut stalled = false;
        while !closing.load(Ordering::Relaxed) {
            if pulse.alive(Instant::now(), STALL) {
                stalled = false;
                if send(&writer, &Msg::Hb).is_err() {
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

/// Node 0's lines once the world started, read on a thread of their own: the hang's requests and
/// verdict apart from the rest, heartbeats dropped, and the loss of node 0 said once (unless this
/// node is closing).
fn spawn_reader(
    mut wire: Wire,
    closing: Arc<AtomicBool>,
) -> (Receiver<Incoming>, Receiver<Msg>, Receiver<Msg>) {
    let (tx, rx) = mpsc::channel();
    let (hang_tx, hang_rx) = mpsc::channel();
    let (windows_tx, windows_rx) = mpsc::channel();
    std::thread::spawn(move || loop {
        match wire.event() {
            Event::Msg(Msg::Hb) | Event::Joined(_) | Event::Started(_) => {}
            Event::Msg(m @ (Msg::Autopsy { .. } | Msg::Verdict { .. })) => {
                let _ = hang_tx.send(m);
            }
            Event::Msg(m @ Msg::Windows { .. }) => {
                let _ = windows_tx.send(m);
            }
            Event::Msg(m) => {
                if tx.send(Incoming::Msg(m)).is_err() {
                    return;
                }
            }
            Event::Over(end) => {
                if !closing.load(Ordering::Relaxed) {
                    let _ = tx.send(Incoming::Lost(end.to_string()));
                }
                return;
            }
        }
    });
    (rx, hang_rx, windows_rx)
}

/// This node's [`Peer`] over its blocking socket.
struct Wire {
    stream: TcpStream,
    peer: Peer,
    /// What the peer made of the last read and was not asked for yet.
    events: VecDeque<Event>,
    buf: Vec<u8>,
}

impl Wire {
    fn new(stream: TcpStream, peer: Peer) -> Wire {
        Wire {
            stream,
            peer,
            events: VecDeque::new(),
            buf: vec![0; 64 << 10],
        }
    }

    /// Says hello, and answers node 0's challenge: the sending side, once the join is sent.
    fn hello(&mut self, hello: &[u8]) -> Result<Sender, End> {
        self.stream
            .write_all(hello)
            .map_err(|source| End::Unanswered {
                what: "send the hello",
                source,
            })?;
        loop {
            match self.event() {
                Event::Joined(tx) => return Ok(tx),
                Event::Over(end) => return Err(end),
                Event::Started(_) | Event::Msg(_) => {}
            }
        }
    }

    /// The peer's next event, reading (each read at most until the peer's next deadline) until it
    /// has one; the peer's answers are written back.
    fn event(&mut self) -> Event {
        loop {
            if let Some(e) = self.events.pop_front() {
                return e;
            }
            let now = Instant::now();
            if let Some(end) = self.peer.tick(now) {
                return Event::Over(end);
            }
            let _ = self.stream.set_read_timeout(Some(self.peer.wait(now)));
            match self.stream.read(&mut self.buf) {
                Ok(0) => return Event::Over(self.peer.failed(Instant::now(), None)),
                Ok(n) => {
                    let (back, events) = self.peer.feed(&self.buf[..n]);
                    if let Err(source) = self.stream.write_all(&back) {
                        return Event::Over(End::Broken {
                            what: "send the join",
                            source,
                        });
                    }
                    self.events.extend(events);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Event::Over(self.peer.failed(Instant::now(), Some(e))),
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::super::HEARTBEAT;
    use super::*;

    fn settings(node: u32, secret: Option<Secret>) -> Settings {
        Settings {
            addr: "10.0.0.1".into(),
            port: 29501,
            join: super::super::fixtures::join(node),
            join_timeout: Duration::from_secs(90),
            heartbeat: HEARTBEAT,
            secret,
            munge: None,
            quiet: false,
            exclude_file: None,
            replace_failing: false,
            drain: None,
        }
    }

    #[test]
    fn a_supervision_still_for_the_stall_stops_the_heartbeats() {
        let p = Pulse::new();
        p.beat();
        let at = |secs: u64| p.epoch + Duration::from_secs(secs);
        assert!(p.alive(at(STALL.as_secs() - 1), STALL));
        assert!(!p.alive(at(STALL.as_secs() + 1), STALL));
    }

    #[test]
    fn node_0_lost_or_silent_after_a_stop_is_reported_so() {
        let lost = lost_report(1, "10.0.0.1", "no heartbeat for 5 s");
        assert_eq!(
            lost.headline(),
            "node 0 (10.0.0.1) was lost: no heartbeat for 5 s; node 0 hosts the control plane, so the run cannot go on without it"
        );
        assert_eq!(lost.exit_status(), crate::exit_status::ExitStatus::NodeLost);
        // Node 0's own link says only what happened.
        assert_eq!(
            lost_report(0, "10.0.0.1", "x").headline(),
            "node 0 (10.0.0.1) was lost: x"
        );
        // No decision within node 0's deadlines: the stop's report, saying so, or node 0 lost.
        let f = undecided(1, "10.0.0.1", None, 33);
        assert!(
            f.what
                .starts_with("was lost: it gave no decision within 33 s of the stop; node 0 hosts"),
            "{}",
            f.what
        );
        let stop = FailureReport {
            rank: Some(3),
            ..FailureReport::lost(1, "h1", "")
        };
        let f = undecided(0, "10.0.0.1", Some(stop), 33);
        assert!(
            f.what
                .ends_with("; node 0 gave no decision within 33 s of the stop"),
            "{}",
            f.what
        );
    }

    #[test]
    fn node_0_says_how_its_control_plane_admits_and_a_secret_wins() {
        let open = settings(0, None);
        assert_eq!(credentials(&open).kind(), "none");
        assert!(
            auth_in_force(&open).starts_with(
                "the control plane on 10.0.0.1:29501 is not authenticated: anyone who reaches it can join or stop this run"
            ),
            "{}",
            auth_in_force(&open)
        );
        let s = settings(0, Some(Secret::new(b"0123456789abcdef-the-secret")));
        assert_eq!(credentials(&s).kind(), "hmac");
        assert_eq!(
            auth_in_force(&s),
            "control plane: 10.0.0.1:29501 admits only launchers holding this run's secret (ACCEL_LAUNCH_SECRET; HMAC-SHA256)"
        );
        // Authenticated joins are taken on every interface.
        assert_eq!(bind_address(&s), IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    }

    #[test]
    fn a_host_no_resolver_knows_is_refused_and_a_temporary_failure_is_not() {
        for bad in ["", "  ", "a\0b"] {
            let e = resolvable(bad).unwrap_err();
            assert!(
                matches!(e, ControlError::Unresolvable { .. }),
                "{bad:?}: {e:?}"
            );
        }
        assert!(resolvable("127.0.0.1").is_ok());
    }
}
