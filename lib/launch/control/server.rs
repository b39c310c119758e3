//! Node 0's server: every node's connection on one event loop, on one thread. It accepts, carries
//! each connection's handshake as its [`Admission`] says, feeds the members' lines to the
//! [`Coordinator`] and queues its messages back, with heartbeats both ways; it wakes when either
//! says something is due (the coordinator keeps the join's and the replacement wait's deadlines).
//!
//! **Why `mio`** (epoll, non-blocking sockets, a waker) rather than a current-thread tokio runtime:
//! the server is a state machine over readiness and time with a pure, synchronous [`Coordinator`] at
//! its centre. mio gives exactly that — readiness — with nothing in between; tokio's runtime would add
//! a scheduler, futures and a task per connection whose state would have to be shared back with the
//! coordinator (tokio itself is built on mio). One thread holds 20,000 connections with a few KiB
//! each where a thread per connection met the thread and descriptor limits at ~2,000.
//!
//! - **No peer waits behind another.** Every socket is non-blocking; each member has its own
//!   outgoing queue (at most [`QUEUE_CAP`] bytes: a message to every node is serialized once and
//!   shared, only its tag is each connection's). A write that would block leaves the rest queued
//!   for the socket's next writable event. A member whose queue has not moved for its loss window
//!   (it reads nothing: a stopped process, a full receive buffer) is lost — it alone.
//! - **Heartbeats** go to each member every [`BEAT_EVERY`] heartbeat intervals from its join on (none
//!   while something else is queued for it: any byte says node 0 lives); any byte heard from a member
//!   is its heartbeat, and silence for the loss window loses it.
//! - **Handshakes** run on the loop too ([`super::admission`]): at most [`MAX_PENDING`] connections
//!   in their handshake (beyond it the oldest of the address holding the most gives way:
//!   [`super::handshakes`]), each with
//!   [`HANDSHAKE`](super::admission::HANDSHAKE) to prove itself and join, with lines of at most
//!   [`HANDSHAKE_LINE`]. MUNGE's calls to munged (a blocking round trip on a local socket) run on
//!   two helper threads that hand their results back through the loop's waker.
//! - **Memory is bounded**: lines of at most 1 MiB; partial lines of every member together at most
//!   [`READ_BUDGET`] (beyond it, the connections holding long partial lines are not read until it
//!   drains); the stacks of one hang verdict at most [`STACKS_BUDGET`] in all (each node's at most
//!   768 KiB, as it sends them; beyond the total, a node's stacks are replaced by a note, its full
//!   dumps being on its own disk).
//! - **Descriptors are bounded**: besides the members, at most [`MAX_PENDING`] handshakes and
//!   [`MAX_LINGERING`] refused connections whose last words are leaving (beyond it a refusal
//!   closes at once), so a flood of strangers cannot take the descriptors node 0's launcher needs;
//!   at most [`ACCEPT_TURN`] connections are accepted per turn of the loop, so a connect flood
//!   does not hold back the members' heartbeats. Accept errors (no descriptor left) pause
//!   accepting for 100 ms instead of spinning.

use std::collections::{HashMap, VecDeque};
use std::io::{IoSlice, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};

use super::admission::{Admission, Gate, Notes, Step, HANDSHAKE_LINE};
use super::auth::Credentials;
use super::coordinator::{Coordinator, To};
use super::frame::{Lines, Seal, Way, MAX_LINE};
use super::handshakes::{Handshakes, MAX_PENDING};
use super::munge::{Decoded, Munge};
use super::protocol::lost_after;
use super::protocol::{why_closed, Join, Msg};
use super::spares::{self, Note, Roster};
use super::ControlError;
use crate::launch::hang::verdict::WireStack;

/// The most bytes queued for one member: far above what a run sends it (a start, a stop with a
/// 16 KiB stderr tail, a verdict below 1 MiB); a member that would need more is lost.
pub(super) const QUEUE_CAP: usize = 4 << 20;
/// Partial lines held for all members together.
pub(super) const READ_BUDGET: usize = 64 << 20;
/// The stacks node 0 keeps for one hang verdict, in all.
pub(super) const STACKS_BUDGET: usize = 64 << 20;
/// How often deadlines, losses and heartbeats are looked at.
const TICK: Duration = Duration::from_millis(100);
/// Node 0 beats to each member every this many heartbeat intervals (2 s), while each member beats
/// to node 0 every interval (1 s); either side is lost after the same window (5 s). Node 0 sends
/// to N members where a member sends to one node: at 10,000 members its beats were half of its
/// CPU (each a write through the TCP stack), and two of them still fall in every loss window.
pub(super) const BEAT_EVERY: u32 = 2;
/// A refused connection's last words get this long to leave before it is closed.
const LINGER: Duration = Duration::from_secs(2);
/// Refused connections lingering, at most: each holds a descriptor, and a flood of strangers'
/// refusals would otherwise take every descriptor node 0's launcher has (its ranks' pipes, py-spy).
pub(super) const MAX_LINGERING: usize = 256;
/// Connections accepted in one turn of the loop, at most: a connect flood's accept queue is taken a
/// turn at a time, between the members' heartbeats and messages.
const ACCEPT_TURN: usize = 64;

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
const FIRST_CONN: usize = 2;

/// The server, hosted by node 0's launcher.
pub(super) struct Server {
    pub(super) done: Arc<AtomicBool>,
    /// The run's spares and lost nodes, as the coordinator last had them.
    pub(super) roster: Arc<Mutex<Roster>>,
}

impl Server {
    /// Waits, at most `limit`, until every node has left after the run's end.
    pub(super) fn wait_done(&self, limit: Duration) {
        let until = Instant::now() + limit;
        while !self.done.load(Ordering::Relaxed) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// What node 0's server is started with.
pub(super) struct ServerSettings {
    /// Where to listen: every interface when joins are authenticated, else only the rendezvous
    /// address.
    pub bind: IpAddr,
    pub port: u16,
    pub join_timeout: Duration,
    pub heartbeat: Duration,
    /// Node 0's own join: the run id, restarts and hang timeout every node must give.
    pub reference: Join,
    pub creds: Credentials,
    /// `--quiet`: no note of the connections refused, nor of spares.
    pub quiet: bool,
    /// `--exclude_file`: each lost node's host is appended to it.
    pub exclude_file: Option<std::path::PathBuf>,
    /// `--replace_failing_nodes`: a node whose ranks fail is replaced by a waiting spare.
    pub replace_failing: bool,
    /// `--drain_lost_nodes`: each lost node is drained.
    pub drain: Option<super::Drain>,
}

pub(super) fn start_server(set: ServerSettings) -> Result<Server, ControlError> {
    raise_open_files();
    let port = set.port;
    let bind_err = |source| ControlError::Bind { port, source };
    let std_listener =
        std::net::TcpListener::bind(SocketAddr::new(set.bind, port)).map_err(bind_err)?;
    // Thousands of nodes connect at once: the kernel's largest accept queue (somaxconn), not std's
    // 128, or their SYNs are dropped and retried a second later.
    {
        use std::os::fd::AsRawFd as _;
        // SAFETY: listen(2) on a socket we own, already listening: only its backlog changes.
        unsafe { libc::listen(std_listener.as_raw_fd(), libc::c_int::MAX) };
    }
    std_listener.set_nonblocking(true).map_err(bind_err)?;
    let mut listener = TcpListener::from_std(std_listener);
    let poll = Poll::new().map_err(bind_err)?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)
        .map_err(bind_err)?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(bind_err)?);
    let munge = match &set.creds {
        Credentials {
            secret: None,
            munge: Some(m),
        } => Some(MungeHelpers::start(m.clone(), Arc::clone(&waker)).map_err(bind_err)?),
        _ => None,
    };
    let done = Arc::new(AtomicBool::new(false));
    let d = Arc::clone(&done);
    let roster = Arc::new(Mutex::new(Roster::default()));
    let c = Coordinator::new(set.reference.nodes)
        .with_reference(&set.reference)
        .join_timeout(Instant::now(), set.join_timeout)
        .replace_failing(set.replace_failing);
    let mut l = Loop {
        read_buf: Vec::new(),
        poll,
        listener,
        accept_paused: None,
        conns: Vec::new(),
        free: Vec::new(),
        serial: 0,
        node_conn: HashMap::new(),
        handshakes: Handshakes::default(),
        lingering: 0,
        accept_more: false,
        notes: Notes::new(set.quiet),
        c,
        gate: Gate::new(set.reference.run_id.clone(), &set.creds),
        munge,
        window: lost_after(set.heartbeat),
        heartbeat: set.heartbeat * BEAT_EVERY,
        partial: 0,
        stacks_kept: 0,
        quiet: set.quiet,
        exclude_file: set.exclude_file.clone(),
        drain: set.drain.clone(),
        roster: Arc::clone(&roster),
    };
    std::thread::Builder::new()
        .name("control-server".into())
        .spawn(move || {
            l.run();
            d.store(true, Ordering::Relaxed);
        })
        .map_err(bind_err)?;
    Ok(Server { done, roster })
}

/// One descriptor per node: the soft open-file limit (often 1024) is raised to the hard one.
fn raise_open_files() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a stack struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// MUNGE's blocking calls, off the loop.
struct MungeHelpers {
    jobs: Sender<MungeJob>,
    done: Receiver<MungeDone>,
}

enum MungeJob {
    Encode {
        slot: usize,
        serial: u64,
        payload: Vec<u8>,
    },
    Decode {
        slot: usize,
        serial: u64,
        cred: String,
    },
}

enum MungeDone {
    Encoded {
        slot: usize,
        serial: u64,
        cred: Result<String, String>,
    },
    Decoded {
        slot: usize,
        serial: u64,
        decoded: Result<Decoded, String>,
    },
}

impl MungeHelpers {
    fn start(m: Munge, waker: Arc<Waker>) -> std::io::Result<MungeHelpers> {
        let (jobs, rx) = mpsc::channel::<MungeJob>();
        let (tx, done) = mpsc::channel::<MungeDone>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..2 {
            let (rx, tx, m, waker) = (Arc::clone(&rx), tx.clone(), m.clone(), Arc::clone(&waker));
            std::thread::Builder::new()
                .name(format!("control-munge-{i}"))
                .spawn(move || loop {
                    let job = match rx.lock() {
                        Ok(r) => r.recv(),
                        Err(_) => return,
                    };
                    let out = match job {
                        Err(_) => return,
                        Ok(MungeJob::Encode {
                            slot,
                            serial,
                            payload,
                        }) => MungeDone::Encoded {
                            slot,
                            serial,
                            cred: m.encode(&payload),
                        },
                        Ok(MungeJob::Decode { slot, serial, cred }) => MungeDone::Decoded {
                            slot,
                            serial,
                            decoded: m.decode(&cred),
                        },
                    };
                    if tx.send(out).is_err() {
                        return;
                    }
                    let _ = waker.wake();
                })?;
        }
        Ok(MungeHelpers { jobs, done })
    }
}

/// Where a connection is in its life.
enum Stage {
    /// In its handshake.
    Admitting(Admission),
    /// Joined: a member of the run.
    Member { node: u32 },
    /// Refused: its last words leave, then it closes.
    Closing { until: Instant },
}

/// Bytes queued for a connection: a head of its own (the line's tag) and a body that may be shared
/// with every other connection.
struct Out {
    head: Vec<u8>,
    body: Arc<[u8]>,
    /// Bytes of head + body written.
    done: usize,
}

impl Out {
    fn len(&self) -> usize {
        self.head.len() + self.body.len()
    }
}

struct Conn {
    serial: u64,
    sock: TcpStream,
    peer: SocketAddr,
    lines: Lines,
    rx: Seal,
    tx: Seal,
    out: VecDeque<Out>,
    queued: usize,
    live: Liveness,
    writable: bool,
    stage: Stage,
    /// Not read for now: its partial line waits for the read budget.
    paused: bool,
}

impl Conn {
    fn in_handshake(&self) -> bool {
        matches!(self.stage, Stage::Admitting(_))
    }
}

/// The size of node 0's one read buffer.
const READ_BUF: usize = 64 << 10;

struct Loop {
    /// Reused by every read ([`READ_BUF`] bytes once the first read made it).
    read_buf: Vec<u8>,
    poll: Poll,
    listener: TcpListener,
    accept_paused: Option<Instant>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    serial: u64,
    node_conn: HashMap<u32, usize>,
    /// Connections in their handshake.
    handshakes: Handshakes,
    /// Refused connections whose last words are leaving.
    lingering: usize,
    /// The accept queue held more than one turn takes: accepting goes on next turn.
    accept_more: bool,
    notes: Notes,
    c: Coordinator,
    gate: Gate,
    munge: Option<MungeHelpers>,
    window: Duration,
    /// Node 0's beat to each member: every [`BEAT_EVERY`] heartbeat intervals.
    heartbeat: Duration,
    /// Partial-line bytes of every connection.
    partial: usize,
    /// Stack bytes kept for the attempt's verdict.
    stacks_kept: usize,
    quiet: bool,
    exclude_file: Option<std::path::PathBuf>,
    drain: Option<super::Drain>,
    roster: Arc<Mutex<Roster>>,
}

impl Loop {
    fn run(&mut self) {
        let mut events = Events::with_capacity(1024);
        let mut next_tick = Instant::now() + TICK;
        while !self.c.done() {
            let wake = self.c.next_wake().map_or(next_tick, |w| w.min(next_tick));
            let wait = if self.accept_more {
                Duration::ZERO
            } else {
                wake.saturating_duration_since(Instant::now())
            };
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    eprintln!("accel-launch: error: control plane: poll failed: {e}");
                    break;
                }
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept(),
                    WAKER => self.munge_results(),
                    Token(t) => {
                        let slot = t - FIRST_CONN;
                        if ev.is_writable() || ev.is_write_closed() {
                            self.flush(slot);
                        }
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            // Edge-triggered: a short read has emptied the socket, and more
                            // bytes make a new event; an end or error is read to its end now.
                            self.read(slot, ev.is_read_closed() || ev.is_error());
                        }
                    }
                }
            }
            if std::mem::take(&mut self.accept_more) {
                self.accept();
            }
            let now = Instant::now();
            let out = self.c.tick(now);
            self.dispatch(out);
            if now >= next_tick {
                next_tick = now + TICK;
                self.sweep(now);
            }
        }
        if let Some(line) = self.notes.summary() {
            eprintln!("{line}");
        }
        self.linger();
    }

    /// Sends what is still queued (a join's refusal, the run's end) for at most [`LINGER`].
    fn linger(&mut self) {
        let until = Instant::now() + LINGER;
        let mut events = Events::with_capacity(256);
        while Instant::now() < until && self.conns.iter().flatten().any(|c| c.queued > 0) {
            let _ = self.poll.poll(&mut events, Some(TICK));
            for ev in events.iter() {
                if let Token(t @ FIRST_CONN..) = ev.token() {
                    self.flush(t - FIRST_CONN);
                }
            }
        }
    }

    fn note(&mut self, peer: &SocketAddr, why: &str) {
        if let Some(line) = self.notes.refused(peer, why) {
            eprintln!("{line}");
        }
    }

    /// Accepts what the listener's queue holds, [`ACCEPT_TURN`] connections a turn (edge-triggered:
    /// the rest make no new event, so the loop comes back for them).
    fn accept(&mut self) {
        if self.accept_paused.is_some() {
            return;
        }
        for _ in 0..ACCEPT_TURN {
            let (mut sock, peer) = match self.listener.accept() {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    // No descriptor left, most likely: the connection waits in the backlog.
                    self.accept_paused = Some(Instant::now() + Duration::from_millis(100));
                    return;
                }
            };
            let _ = sock.set_nodelay(true);
            let slot = match self.free.pop() {
                Some(s) => s,
                None => {
                    self.conns.push(None);
                    self.conns.len() - 1
                }
            };
            if self
                .poll
                .registry()
                .register(
                    &mut sock,
                    Token(slot + FIRST_CONN),
                    Interest::READABLE | Interest::WRITABLE,
                )
                .is_err()
            {
                self.free.push(slot);
                continue;
            }
            let now = Instant::now();
            self.serial += 1;
            let gives_way = self.handshakes.add(peer.ip(), (slot, self.serial));
            self.conns[slot] = Some(Conn {
                serial: self.serial,
                sock,
                peer,
                lines: Lines::default(),
                rx: Seal::plain(Way::ToServer),
                tx: Seal::plain(Way::ToNode),
                out: VecDeque::new(),
                queued: 0,
                live: Liveness::new(now),
                writable: true,
                stage: Stage::Admitting(Admission::new(now)),
                paused: false,
            });
            if let Some((slot, serial)) = gives_way {
                self.give_way(slot, serial);
            }
        }
        self.accept_more = true;
    }

    /// Reads what the socket holds and acts on every whole line, until the socket would block (or,
    /// unless `drain`, a read returns less than asked: the socket is empty, and a heartbeat is one
    /// read, not two), the connection ends, or its reading is paused.
    fn read(&mut self, slot: usize, drain: bool) {
        // One buffer for every read: zeroing 64 KiB per readable connection was 7% of node 0's CPU
        // at 10,000 heartbeating nodes.
        let mut buf = std::mem::take(&mut self.read_buf);
        if buf.len() != READ_BUF {
            buf = vec![0u8; READ_BUF];
        }
        self.read_into(slot, &mut buf, drain);
        self.read_buf = buf;
    }

    fn read_into(&mut self, slot: usize, buf: &mut [u8], drain: bool) {
        loop {
            let Some(Some(conn)) = self.conns.get_mut(slot) else {
                return;
            };
            let closing = matches!(conn.stage, Stage::Closing { .. });
            if conn.paused && !closing {
                return;
            }
            match conn.sock.read(buf) {
                Ok(0) => {
                    self.take_lines(slot);
                    let why = why_closed(None, self.window);
                    return self.close(slot, &why);
                }
                // A refused connection's words are no longer heard; only its closing matters.
                Ok(_) if closing => {}
                Ok(n) => {
                    conn.live.heard = Instant::now();
                    conn.lines.push(&buf[..n]);
                    self.partial += n;
                    self.take_lines(slot);
                    if n < buf.len() && !drain {
                        return;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let why = why_closed(Some(&e), self.window);
                    return self.close(slot, &why);
                }
            }
        }
    }

    /// Acts on the connection's whole lines, as far as its stage allows.
    fn take_lines(&mut self, slot: usize) {
        loop {
            let Some(Some(conn)) = self.conns.get_mut(slot) else {
                return;
            };
            let cap = match &conn.stage {
                Stage::Member { .. } => MAX_LINE as usize,
                Stage::Admitting(a) if a.reading() => HANDSHAKE_LINE,
                Stage::Admitting(_) | Stage::Closing { .. } => return,
            };
            let before = conn.lines.pending();
            let line = conn.lines.next(cap);
            let after = conn.lines.pending();
            self.partial = self.partial.saturating_sub(before - after);
            match line {
                Ok(Some(l)) => self.line(slot, &l),
                Ok(None) => {
                    if self.partial > READ_BUDGET && after > 64 << 10 {
                        // Long partial lines (stacks) of many members at once: this one waits.
                        conn.paused = true;
                    }
                    return;
                }
                Err(e) => {
                    let why = format!("its launcher's connection failed: {e}");
                    if conn.in_handshake() {
                        self.refuse(slot, &e.to_string());
                    } else {
                        self.close(slot, &why);
                    }
                    return;
                }
            }
        }
    }

    /// One whole line of a connection.
    fn line(&mut self, slot: usize, line: &str) {
        let Some(Some(conn)) = self.conns.get_mut(slot) else {
            return;
        };
        if matches!(conn.stage, Stage::Closing { .. }) {
            return;
        }
        let msg = conn
            .rx
            .open(line)
            .map_err(|e| e.to_string())
            .and_then(Msg::parse);
        match &mut conn.stage {
            Stage::Member { node } => {
                let node = *node;
                self.member_line(slot, node, line.len(), msg);
            }
            Stage::Admitting(a) => {
                if let Some(step) = a.line(&self.gate, msg) {
                    self.admit(slot, step);
                }
            }
            Stage::Closing { .. } => {}
        }
    }

    /// A member's message (`bytes`: its line's length), for the coordinator.
    fn member_line(&mut self, slot: usize, node: u32, bytes: usize, msg: Result<Msg, String>) {
        match msg {
            Ok(Msg::Hb) => {}
            Ok(Msg::Stacks { attempt, stacks }) => {
                let stacks = self.keep_stacks(node, bytes, stacks);
                let out = self.c.message(node, Msg::Stacks { attempt, stacks });
                self.dispatch(out);
            }
            Ok(m) => {
                let out = self.c.message(node, m);
                self.dispatch(out);
            }
            Err(e) => self.close(slot, &format!("its launcher's connection failed: {e}")),
        }
    }

    /// Carries out what a connection's admission says.
    fn admit(&mut self, slot: usize, step: Step) {
        match step {
            Step::Send(m) => self.send(slot, &m),
            Step::Seal(key) => {
                if let Some(Some(conn)) = self.conns.get_mut(slot) {
                    conn.rx.key(key.clone());
                    conn.tx.key(key);
                }
            }
            Step::Encode(payload) => self.munge_job(slot, |serial| MungeJob::Encode {
                slot,
                serial,
                payload,
            }),
            Step::Decode(cred) => {
                self.munge_job(slot, |serial| MungeJob::Decode { slot, serial, cred })
            }
            Step::Join(j) => self.join(slot, j),
            Step::Refuse(why) => self.refuse(slot, &why),
        }
    }

    /// Hands munged's work for a connection to the helpers, tagged with the connection's serial
    /// (its slot may be another connection's by the time the answer comes).
    fn munge_job(&mut self, slot: usize, job: impl FnOnce(u64) -> MungeJob) {
        let Some(Some(conn)) = self.conns.get(slot) else {
            return;
        };
        if let Some(h) = &self.munge {
            let _ = h.jobs.send(job(conn.serial));
        }
    }

    /// munged's answers, back from the helpers; then the lines that came meanwhile.
    fn munge_results(&mut self) {
        let Some(h) = &self.munge else { return };
        let done: Vec<MungeDone> = h.done.try_iter().collect();
        for d in done {
            let (slot, serial) = match &d {
                MungeDone::Encoded { slot, serial, .. }
                | MungeDone::Decoded { slot, serial, .. } => (*slot, *serial),
            };
            let step = match (self.conns.get_mut(slot), d) {
                (Some(Some(conn)), d) if conn.serial == serial => match (&mut conn.stage, d) {
                    (Stage::Admitting(a), MungeDone::Encoded { cred, .. }) => {
                        a.encoded(&self.gate, cred)
                    }
                    (Stage::Admitting(a), MungeDone::Decoded { decoded, .. }) => {
                        a.decoded(&self.gate, decoded)
                    }
                    _ => None,
                },
                _ => None,
            };
            if let Some(step) = step {
                self.admit(slot, step);
            }
            self.take_lines(slot);
        }
    }

    fn join(&mut self, slot: usize, j: Join) {
        let node = j.node;
        match self.c.join(&j) {
            Ok(out) => {
                let now = Instant::now();
                self.end_handshake(slot);
                if let Some(Some(conn)) = self.conns.get_mut(slot) {
                    conn.stage = Stage::Member { node };
                    conn.live = Liveness::new(now);
                }
                self.node_conn.insert(node, slot);
                self.dispatch(out);
            }
            Err(reason) => {
                let peer = match self.conns.get(slot) {
                    Some(Some(c)) => c.peer,
                    _ => return,
                };
                if let Some(line) = self.notes.join_refused(node, &peer, &reason) {
                    eprintln!("{line}");
                }
                self.send(slot, &Msg::Reject { reason });
                self.linger_then_close(slot);
            }
        }
    }

    /// A connection in its handshake refused: noted, told why, closed.
    fn refuse(&mut self, slot: usize, why: &str) {
        let Some(Some(conn)) = self.conns.get(slot) else {
            return;
        };
        let peer = conn.peer;
        self.note(&peer, why);
        self.send(
            slot,
            &Msg::Reject {
                reason: why.to_string(),
            },
        );
        self.linger_then_close(slot);
    }

    /// A refused connection's last words get [`LINGER`] to leave; beyond [`MAX_LINGERING`] it
    /// closes at once (what the socket took of them still leaves).
    fn linger_then_close(&mut self, slot: usize) {
        self.end_handshake(slot);
        if self.lingering >= MAX_LINGERING {
            return self.drop_conn(slot);
        }
        let Some(Some(conn)) = self.conns.get_mut(slot) else {
            return;
        };
        if matches!(conn.stage, Stage::Closing { .. }) {
            return;
        }
        self.lingering += 1;
        self.partial = self.partial.saturating_sub(conn.lines.pending());
        conn.lines = Lines::default();
        conn.stage = Stage::Closing {
            until: Instant::now() + LINGER,
        };
        if conn.queued == 0 {
            let _ = conn.sock.shutdown(std::net::Shutdown::Write);
        }
    }

    /// Keeps a node's stacks within [`STACKS_BUDGET`] for the whole verdict.
    fn keep_stacks(&mut self, node: u32, bytes: usize, stacks: Vec<WireStack>) -> Vec<WireStack> {
        if self.stacks_kept + bytes <= STACKS_BUDGET {
            self.stacks_kept += bytes;
            return stacks;
        }
        stacks
            .into_iter()
            .map(|s| WireStack {
                threads: None,
                error: Some(format!(
                    "not kept by node 0, which holds at most {} MiB of the world's stacks; node {node} keeps its full dumps",
                    STACKS_BUDGET >> 20
                )),
                ..s
            })
            .collect()
    }

    /// The coordinator's messages, queued for their nodes; then what it noted of spares and lost
    /// nodes is said, and carried out.
    fn dispatch(&mut self, out: Vec<(To, Msg)>) {
        self.deliver(out);
        self.told();
    }

    /// What the coordinator noted of spares and lost nodes: a line on node 0's stderr for each of a
    /// spare (not under `--quiet`), a lost node's host appended to `--exclude_file`, and the roster
    /// for node 0's `--report_json`.
    fn told(&mut self) {
        let notes = self.c.take_notes();
        if notes.is_empty() {
            return;
        }
        for n in &notes {
            // A loss is said by the failure line every node prints; its note is for the file.
            if !self.quiet && !matches!(n, Note::Lost(_)) {
                eprintln!("accel-launch: note: {}", n.line());
            }
            let Note::Lost(l) = n else { continue };
            if let Some(path) = &self.exclude_file {
                if let Err(e) = spares::exclude(path, &l.host) {
                    eprintln!(
                        "accel-launch: warning: cannot add {} to --exclude_file {}: {e}",
                        l.host,
                        path.display()
                    );
                }
            }
            if let Some(d) = &self.drain {
                d.start(&l.host, &l.why);
            }
        }
        if let Ok(mut r) = self.roster.lock() {
            *r = self.c.roster().clone();
        }
    }

    fn deliver(&mut self, out: Vec<(To, Msg)>) {
        for (to, m) in out {
            if matches!(m, Msg::Autopsy { .. }) {
                self.stacks_kept = 0;
            }
            match to {
                To::Node(n) => {
                    if let Some(slot) = self.node_conn.get(&n).copied() {
                        self.send(slot, &m);
                    }
                }
                To::Seat { spare, node } => {
                    // The spare's connection is node `node`'s from now on: what it says is that
                    // node's, and the world's messages to that node go to it. A launcher still
                    // connected as that node (replaced for its failing ranks) was told the run's
                    // end for it: its last words leave, and nothing it says counts.
                    if let Some(old) = self.node_conn.remove(&node) {
                        self.linger_then_close(old);
                    }
                    if let Some(slot) = self.node_conn.remove(&spare) {
                        if let Some(Some(conn)) = self.conns.get_mut(slot) {
                            conn.stage = Stage::Member { node };
                        }
                        self.node_conn.insert(node, slot);
                        self.send(slot, &m);
                    }
                }
                To::All => {
                    let mut body = m.json();
                    body.push(b'\n');
                    let body: Arc<[u8]> = body.into();
                    let slots: Vec<usize> = self.node_conn.values().copied().collect();
                    for slot in slots {
                        self.queue(slot, Arc::clone(&body), true);
                    }
                }
            }
        }
    }

    fn send(&mut self, slot: usize, m: &Msg) {
        let mut body = m.json();
        body.push(b'\n');
        self.queue(slot, body.into(), true);
    }

    /// Queues one line (its body ends with the newline, which its tag does not cover) and writes
    /// what the socket takes now; `watch`: see that the peer reads it (every message but heartbeats).
    fn queue(&mut self, slot: usize, body: Arc<[u8]>, watch: bool) {
        let Some(Some(conn)) = self.conns.get_mut(slot) else {
            return;
        };
        if watch && conn.live.unread.is_none() {
            conn.live.unread = Some((0, Instant::now()));
        }
        let head = conn.tx.head(&body[..body.len().saturating_sub(1)]);
        let out = Out {
            head,
            body,
            done: 0,
        };
        if conn.queued + out.len() > QUEUE_CAP && conn.queued > 0 {
            let why = format!(
                "it read nothing of the {} KiB queued for it (its launcher stopped reading)",
                conn.queued >> 10
            );
            return self.close(slot, &why);
        }
        if conn.out.is_empty() {
            conn.live.stuck_since = Some(Instant::now());
        }
        conn.queued += out.len();
        conn.out.push_back(out);
        if conn.writable {
            self.flush(slot);
        }
    }

    /// Writes what the socket takes of the connection's queue.
    fn flush(&mut self, slot: usize) {
        let Some(Some(conn)) = self.conns.get_mut(slot) else {
            return;
        };
        conn.writable = true;
        let mut failed = None;
        while !conn.out.is_empty() {
            let mut slices: Vec<IoSlice> = Vec::with_capacity(16);
            for o in conn.out.iter().take(8) {
                let (h, b) = if o.done < o.head.len() {
                    (&o.head[o.done..], &o.body[..])
                } else {
                    (&[][..], &o.body[o.done - o.head.len()..])
                };
                if !h.is_empty() {
                    slices.push(IoSlice::new(h));
                }
                slices.push(IoSlice::new(b));
            }
            match conn.sock.write_vectored(&slices) {
                Ok(0) => {
                    failed = Some(std::io::Error::from(std::io::ErrorKind::WriteZero));
                    break;
                }
                Ok(mut n) => {
                    conn.queued -= n;
                    conn.live.stuck_since = Some(Instant::now());
                    while n > 0 {
                        let Some(front) = conn.out.front_mut() else {
                            break;
                        };
                        let left = front.len() - front.done;
                        if n >= left {
                            n -= left;
                            conn.out.pop_front();
                        } else {
                            front.done += n;
                            n = 0;
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    conn.writable = false;
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if conn.out.is_empty() {
            conn.live.stuck_since = None;
            if matches!(conn.stage, Stage::Closing { .. }) {
                let _ = conn.sock.shutdown(std::net::Shutdown::Write);
            }
        }
        if let Some(e) = failed {
            let why = why_closed(Some(&e), self.window);
            self.close(slot, &why);
        }
    }

    /// A connection ends: a member is lost to the coordinator (unless it said goodbye).
    fn close(&mut self, slot: usize, why: &str) {
        let Some(Some(conn)) = self.conns.get(slot) else {
            return;
        };
        let node = match conn.stage {
            Stage::Member { node } => Some(node),
            _ => None,
        };
        self.drop_conn(slot);
        if let Some(node) = node {
            if self.node_conn.get(&node) == Some(&slot) {
                self.node_conn.remove(&node);
                let out = self.c.closed(node, why);
                self.dispatch(out);
            }
        }
    }

    /// The connection's handshake is over, if it was in one (it joined, was refused or ends).
    fn end_handshake(&mut self, slot: usize) {
        if let Some(Some(conn)) = self.conns.get(slot) {
            if conn.in_handshake() {
                self.handshakes.remove(conn.peer.ip(), (slot, conn.serial));
            }
        }
    }

    /// A handshake that gives way to a newer connection ([`Handshakes::add`]): noted and closed.
    fn give_way(&mut self, slot: usize, serial: u64) {
        let peer = match self.conns.get(slot) {
            Some(Some(c)) if c.serial == serial && c.in_handshake() => c.peer,
            _ => return,
        };
        self.note(
            &peer,
            &format!("{MAX_PENDING} connections were in their handshake, and its address held the most of them"),
        );
        self.drop_conn(slot);
    }

    fn drop_conn(&mut self, slot: usize) {
        self.end_handshake(slot);
        let Some(mut conn) = self.conns.get_mut(slot).and_then(Option::take) else {
            return;
        };
        if matches!(conn.stage, Stage::Closing { .. }) {
            self.lingering -= 1;
        }
        self.partial = self.partial.saturating_sub(conn.lines.pending());
        let _ = self.poll.registry().deregister(&mut conn.sock);
        self.free.push(slot);
    }

    /// Time-driven work: handshake and lingering deadlines, silent and stuck members, heartbeats,
    /// paused reads and accepts (the coordinator keeps its own deadlines: [`Coordinator::tick`]).
    fn sweep(&mut self, now: Instant) {
        if self.accept_paused.is_some_and(|t| now >= t) {
            self.accept_paused = None;
            self.accept();
        }
        let window = self.window;
        let mut expired = Vec::new();
        let mut lost = Vec::new();
        let mut resume = Vec::new();
        let mut beat = Vec::new();
        for (slot, c) in self.conns.iter_mut().enumerate() {
            let Some(c) = c else { continue };
            match &c.stage {
                Stage::Closing { until } => {
                    if now >= *until {
                        expired.push((slot, None));
                    }
                }
                Stage::Member { .. } => {
                    let sock = &c.sock;
                    let due = c
                        .live
                        .due(now, window, self.heartbeat, c.queued, c.paused, || {
                            unacked(sock)
                        });
                    match due {
                        Some(Due::Lost(why)) => lost.push((slot, why)),
                        Some(Due::Beat) => beat.push(slot),
                        None => {}
                    }
                    if c.paused && self.partial < READ_BUDGET / 2 {
                        c.paused = false;
                        resume.push(slot);
                    }
                }
                Stage::Admitting(a) => {
                    if let Some(why) = a.expired(now) {
                        expired.push((slot, Some((c.peer, why))));
                    }
                }
            }
        }
        for (slot, refusal) in expired {
            match refusal {
                Some((peer, why)) => {
                    self.note(&peer, &why);
                    self.drop_conn(slot);
                }
                None => self.drop_conn(slot),
            }
        }
        for (slot, why) in lost {
            self.close(slot, &why);
        }
        if !beat.is_empty() {
            let mut body = Msg::Hb.json();
            body.push(b'\n');
            let body: Arc<[u8]> = body.into();
            for slot in beat {
                self.queue(slot, Arc::clone(&body), false);
            }
        }
        for slot in resume {
            self.take_lines(slot);
            self.read(slot, true);
        }
    }
}

/// Bytes the kernel holds unacknowledged for the connection (SIOCOUTQ).
fn unacked(sock: &TcpStream) -> usize {
    use std::os::fd::AsRawFd as _;
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int for a TCP socket we own.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
    if rc == 0 {
        usize::try_from(n).unwrap_or(0)
    } else {
        0
    }
}

/// A member's clocks: what says it lives, and when node 0 beats to it next.
struct Liveness {
    /// When a byte was last heard from it.
    heard: Instant,
    /// Since when its queue has held bytes the socket took none of.
    stuck_since: Option<Instant>,
    /// After a message other than a heartbeat: the bytes the kernel still held unacknowledged when
    /// last looked at, and since when that did not shrink. A peer that reads nothing with a small
    /// receive window leaves them there while our own queue is empty.
    unread: Option<(usize, Instant)>,
    next_beat: Instant,
}

/// What a member's clocks call for.
#[derive(Debug, PartialEq, Eq)]
enum Due {
    /// It is lost: why.
    Lost(String),
    /// A heartbeat to it.
    Beat,
}

impl Liveness {
    /// A member heard at `now`, and beaten to at once: from its join on, not from `start`, since
    /// the other nodes may join up to the join timeout later.
    fn new(now: Instant) -> Liveness {
        Liveness {
            heard: now,
            stuck_since: None,
            unread: None,
            next_beat: now,
        }
    }

    /// What is due at `now` for a member with `queued` bytes queued (a heartbeat only with none),
    /// its reading `paused` or not; `unacked` asks the kernel what it still holds for it. Lost
    /// after the loss `window` of a queue that did not move, of bytes sent and not read, or of
    /// silence; else beaten to every `beat`.
    fn due(
        &mut self,
        now: Instant,
        window: Duration,
        beat: Duration,
        queued: usize,
        paused: bool,
        unacked: impl FnOnce() -> usize,
    ) -> Option<Due> {
        let secs = window.as_secs_f64();
        if self
            .stuck_since
            .is_some_and(|t| now.duration_since(t) >= window)
        {
            return Some(Due::Lost(format!(
                "its launcher read nothing for {secs:.0} s ({} KiB queued for it)",
                queued.div_ceil(1024)
            )));
        }
        if let Some(unread) = self.unread(now, window, queued, unacked) {
            return Some(Due::Lost(format!(
                "its launcher read nothing for {secs:.0} s ({} KiB sent to it unread)",
                unread.div_ceil(1024)
            )));
        }
        if !paused && now.duration_since(self.heard) >= window {
            return Some(Due::Lost(why_closed(Some(&timed_out()), window)));
        }
        if now < self.next_beat {
            return None;
        }
        self.next_beat = now + beat;
        (queued == 0).then_some(Due::Beat)
    }

    /// The bytes left unread when the kernel's send queue has not shrunk for the loss window since
    /// a message was sent. Looked at only while a message is unacknowledged.
    fn unread(
        &mut self,
        now: Instant,
        window: Duration,
        queued: usize,
        unacked: impl FnOnce() -> usize,
    ) -> Option<usize> {
        let (last, since) = self.unread?;
        let left = unacked();
        if left == 0 {
            self.unread = if queued == 0 { None } else { Some((0, now)) };
            return None;
        }
        if last == 0 || left < last {
            self.unread = Some((left, now));
            return None;
        }
        (now.duration_since(since) >= window).then_some(left)
    }
}

fn timed_out() -> std::io::Error {
    std::io::Error::from(std::io::ErrorKind::TimedOut)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(5);
    const BEAT: Duration = Duration::from_secs(2);

    /// Node 0's side of a member's liveness with its clock in the test's hands: a member that
    /// joined and waits 30 s (six loss windows) for the others is beaten to every 2 s from its join
    /// on, and is not lost while it beats itself.
    #[test]
    fn a_member_is_beaten_to_from_its_join_and_kept_while_it_beats() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut l = Liveness::new(t0);
        let never = || -> usize { panic!("no message is unacknowledged") };
        let mut beats = Vec::new();
        for n in (0..=30_000).step_by(500) {
            if n % 1_000 == 0 {
                l.heard = ms(n);
            }
            match l.due(ms(n), WINDOW, BEAT, 0, false, never) {
                Some(Due::Beat) => beats.push(n),
                None => {}
                Some(d) => panic!("at {n} ms: {d:?}"),
            }
        }
        assert_eq!(beats, (0..=30_000).step_by(2_000).collect::<Vec<_>>());
        // Something else queued for it says node 0 lives: no beat then, and none owed after.
        assert_eq!(l.due(ms(32_000), WINDOW, BEAT, 100, false, never), None);
        assert_eq!(l.due(ms(33_000), WINDOW, BEAT, 0, false, never), None);
    }

    #[test]
    fn a_member_silent_or_not_reading_for_the_window_is_lost() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let none = || 0;
        let mut l = Liveness::new(t0);
        l.next_beat = s(100);
        assert_eq!(l.due(s(4), WINDOW, BEAT, 0, false, none), None);
        assert_eq!(
            l.due(s(5), WINDOW, BEAT, 0, false, none),
            Some(Due::Lost(
                "no heartbeat for 5 s (network cut, or the host is down)".into()
            ))
        );
        // Its reading paused by node 0 (the read budget), its silence is node 0's doing.
        assert_eq!(l.due(s(9), WINDOW, BEAT, 0, true, none), None);
        // A queue the socket took nothing of.
        let mut l = Liveness::new(t0);
        l.next_beat = s(100);
        l.stuck_since = Some(s(1));
        assert_eq!(l.due(s(5), WINDOW, BEAT, 2_000, true, none), None);
        assert_eq!(
            l.due(s(6), WINDOW, BEAT, 2_000, true, none),
            Some(Due::Lost(
                "its launcher read nothing for 5 s (2 KiB queued for it)".into()
            ))
        );
        // A message the kernel holds unacknowledged, not shrinking for the window.
        let mut l = Liveness::new(t0);
        l.next_beat = s(100);
        l.unread = Some((0, t0));
        assert_eq!(l.due(s(1), WINDOW, BEAT, 0, true, || 4_096), None);
        assert_eq!(l.due(s(5), WINDOW, BEAT, 0, true, || 4_096), None);
        assert_eq!(
            l.due(s(6), WINDOW, BEAT, 0, true, || 4_096),
            Some(Due::Lost(
                "its launcher read nothing for 5 s (4 KiB sent to it unread)".into()
            ))
        );
        // Shrinking, it reads: the window starts again; once all is read, nothing is watched.
        let mut l = Liveness::new(t0);
        l.next_beat = s(100);
        l.unread = Some((4_096, t0));
        assert_eq!(l.due(s(6), WINDOW, BEAT, 0, true, || 1_024), None);
        assert_eq!(l.unread, Some((1_024, s(6))));
        assert_eq!(l.due(s(7), WINDOW, BEAT, 0, true, || 0), None);
        assert_eq!(l.unread, None);
    }
}
