//! Node 0's server: accepts every node's connection, authenticates it ([`super::auth`]), feeds
//! its lines to the [`Coordinator`] and carries its messages back, with heartbeats both ways and
//! the join and replacement deadlines.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::auth::{nonce, Handshake, Reader, Secret, Way, Writer};
use super::coordinator::{Coordinator, To};
use super::protocol::{read_msg, why_closed, write_msg, Join, Msg};
use super::{lost_after, ControlError, PROTOCOL};

enum HubEvent {
    Joined {
        conn: u64,
        peer: String,
        join: Join,
        writer: Writer,
    },
    Msg {
        conn: u64,
        msg: Msg,
    },
    Closed {
        conn: u64,
        why: String,
    },
}

/// A connection has this long to say hello, prove itself (with a secret) and join.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// Connections still in their handshake, at most: more are closed at once.
const MAX_PENDING: usize = 256;
/// Refusals printed on node 0 (each with the peer's address) before they are only counted.
const MAX_NOTES: usize = 20;

/// The server, hosted by node 0's launcher.
pub(super) struct Server {
    pub(super) done: Arc<AtomicBool>,
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
    /// Where to listen: every interface with a secret, else only the rendezvous address.
    pub bind: IpAddr,
    pub port: u16,
    pub join_timeout: Duration,
    pub heartbeat: Duration,
    /// Node 0's own join: the run id, restarts and hang timeout every node must give.
    pub reference: Join,
    pub secret: Option<Secret>,
}

/// What every connection's thread shares.
struct Shared {
    secret: Option<Secret>,
    run_id: String,
    window: Duration,
    pending: AtomicUsize,
    notes: AtomicUsize,
}

impl Shared {
    /// One line on node 0's stderr per refused connection, the first [`MAX_NOTES`] of them.
    fn note(&self, peer: &str, why: &str) {
        let n = self.notes.fetch_add(1, Ordering::Relaxed);
        if n < MAX_NOTES {
            eprintln!("accel-launch: note: control plane: refused {peer}: {why}");
        } else if n == MAX_NOTES {
            eprintln!("accel-launch: note: control plane: further refusals are not shown");
        }
    }
}

pub(super) fn start_server(set: ServerSettings) -> Result<Server, ControlError> {
    raise_open_files();
    let port = set.port;
    let listener = TcpListener::bind(SocketAddr::new(set.bind, port))
        .map_err(|source| ControlError::Bind { port, source })?;
    let (tx, rx) = mpsc::channel::<HubEvent>();
    let shared = Arc::new(Shared {
        secret: set.secret,
        run_id: set.reference.run_id.clone(),
        window: lost_after(set.heartbeat),
        pending: AtomicUsize::new(0),
        notes: AtomicUsize::new(0),
    });
    let done = Arc::new(AtomicBool::new(false));
    let accept = std::thread::Builder::new().name("control-accept".into());
    accept
        .spawn(move || accept_loop(listener, tx, shared))
        .map_err(|source| ControlError::Bind { port, source })?;
    let d = Arc::clone(&done);
    let (nodes, join_timeout, heartbeat, reference) = (
        set.reference.nodes,
        set.join_timeout,
        set.heartbeat,
        set.reference,
    );
    std::thread::Builder::new()
        .name("control-hub".into())
        .spawn(move || hub(rx, nodes, &reference, join_timeout, heartbeat, d))
        .map_err(|source| ControlError::Bind { port, source })?;
    Ok(Server { done })
}

/// Accepts connections, each on a thread of its own, at most [`MAX_PENDING`] of them still in
/// their handshake; an accept error (no descriptors left) backs off instead of spinning.
fn accept_loop(listener: TcpListener, tx: Sender<HubEvent>, shared: Arc<Shared>) {
    let mut next = 0u64;
    loop {
        let (s, peer) = match listener.accept() {
            Ok(c) => c,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if shared.pending.load(Ordering::Relaxed) >= MAX_PENDING {
            shared.note(
                &peer.to_string(),
                &format!("{MAX_PENDING} connections are already in their handshake"),
            );
            continue;
        }
        next += 1;
        let conn = next;
        let tx = tx.clone();
        let sh = Arc::clone(&shared);
        sh.pending.fetch_add(1, Ordering::Relaxed);
        let spawned = std::thread::Builder::new().spawn(move || {
            let sh2 = Arc::clone(&sh);
            let joined = handshake(s, &peer.to_string(), &sh);
            sh2.pending.fetch_sub(1, Ordering::Relaxed);
            if let Some((join, reader, writer)) = joined {
                let joined = HubEvent::Joined {
                    conn,
                    peer: peer.to_string(),
                    join,
                    writer,
                };
                serve_conn(conn, joined, reader, tx, sh2.window);
            }
        });
        if spawned.is_err() {
            shared.pending.fetch_sub(1, Ordering::Relaxed);
            shared.note(&peer.to_string(), "no thread could be started for it");
        }
    }
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

/// Hello, challenge, proof (with a secret) and the join, all within [`HANDSHAKE`]: the join of a
/// node that proved itself, with its connection's two sealed sides; `None` (the peer told why,
/// and noted on node 0) for anything else.
fn handshake(s: TcpStream, peer: &str, sh: &Shared) -> Option<(Join, Reader, Writer)> {
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(HANDSHAKE));
    let mut writer = Writer::new(s.try_clone().ok()?, Way::ToNode);
    let _ = writer.s.set_write_timeout(Some(sh.window));
    let mut r = Reader::new(s, Way::ToServer);
    let refuse = |w: &mut Writer, why: String| {
        sh.note(peer, &why);
        let _ = w.send(&Msg::Reject { reason: why }.json());
        let _ = w.s.shutdown(std::net::Shutdown::Both);
        None
    };
    let (node, client_nonce) = match read_msg(&mut r) {
        Ok(Some(Msg::Hello {
            protocol,
            node,
            nonce,
        })) => {
            if protocol != PROTOCOL {
                return refuse(
                    &mut writer,
                    format!(
                        "protocol {protocol} (this server speaks {PROTOCOL}): run the same accel-launch on every node"
                    ),
                );
            }
            if nonce.len() < 32 || nonce.len() > 128 {
                return refuse(&mut writer, "a malformed hello".into());
            }
            (node, nonce)
        }
        Ok(Some(Msg::Join(_))) => {
            return refuse(
                &mut writer,
                format!("an older protocol (this server speaks {PROTOCOL}): run the same accel-launch on every node"),
            )
        }
        Ok(Some(_)) | Err(_) => return refuse(&mut writer, "it did not say hello".into()),
        Ok(None) => return None,
    };
    let Ok(server_nonce) = nonce() else {
        return refuse(&mut writer, "no random nonce could be made".into());
    };
    let hs = Handshake {
        run_id: &sh.run_id,
        node,
        client_nonce: &client_nonce,
        server_nonce: &server_nonce,
    };
    let challenge = Msg::Challenge {
        run_id: sh.run_id.clone(),
        auth: if sh.secret.is_some() { "hmac" } else { "none" }.into(),
        nonce: server_nonce.clone(),
        proof: sh.secret.as_ref().map(|k| hs.server_proof(k)),
    };
    writer.send(&challenge.json()).ok()?;
    if let Some(k) = &sh.secret {
        match read_msg(&mut r) {
            Ok(Some(Msg::Prove { proof })) if hs.client_proof_ok(k, &proof) => {}
            Ok(None) => return None,
            _ => {
                return refuse(
                    &mut writer,
                    format!("node {node} failed authentication: it does not hold this run's secret (ACCEL_LAUNCH_SECRET)"),
                )
            }
        }
        writer.seal.key(hs.session(k));
        r.seal.key(hs.session(k));
    }
    match read_msg(&mut r) {
        Ok(Some(Msg::Join(j))) if j.node == node => Some((j, r, writer)),
        Ok(None) => None,
        _ => refuse(&mut writer, "it did not join after its hello".into()),
    }
}

fn serve_conn(conn: u64, joined: HubEvent, mut r: Reader, tx: Sender<HubEvent>, window: Duration) {
    if tx.send(joined).is_err() {
        return;
    }
    let _ = r.stream().set_read_timeout(Some(window));
    loop {
        match read_msg(&mut r) {
            Ok(Some(Msg::Hb)) => {}
            Ok(Some(msg)) => {
                if tx.send(HubEvent::Msg { conn, msg }).is_err() {
                    return;
                }
            }
            Ok(None) => {
                let _ = tx.send(HubEvent::Closed {
                    conn,
                    why: why_closed(None, window),
                });
                return;
            }
            Err(e) => {
                let _ = tx.send(HubEvent::Closed {
                    conn,
                    why: why_closed(Some(&e), window),
                });
                return;
            }
        }
    }
}

fn hub(
    rx: Receiver<HubEvent>,
    nodes: u32,
    reference: &Join,
    join_timeout: Duration,
    heartbeat: Duration,
    done: Arc<AtomicBool>,
) {
    let mut c = Coordinator::new(nodes)
        .with_reference(reference)
        .replacing_within(join_timeout);
    let mut wait_deadline: Option<Instant> = None;
    let mut writers: BTreeMap<u32, Mutex<Writer>> = BTreeMap::new();
    let mut node_of: HashMap<u64, u32> = HashMap::new();
    let join_deadline = Instant::now() + join_timeout;
    let mut next_beat = Instant::now() + heartbeat;
    let send = |writers: &mut BTreeMap<u32, Mutex<Writer>>, out: Vec<(To, Msg)>| {
        for (to, m) in out {
            match to {
                To::Node(n) => {
                    if let Some(w) = writers.get(&n) {
                        let _ = write_msg(w, &m);
                    }
                }
                To::All => {
                    for w in writers.values() {
                        let _ = write_msg(w, &m);
                    }
                }
            }
        }
    };
    loop {
        if c.done() {
            break;
        }
        let wake = c.next_wake().map_or(next_beat, |w| w.min(next_beat));
        let wait = wake.saturating_duration_since(Instant::now());
        let event = rx.recv_timeout(wait);
        let out = c.tick(Instant::now());
        send(&mut writers, out);
        match event {
            Ok(HubEvent::Joined {
                conn,
                peer,
                join,
                writer,
            }) => {
                let node = join.node;
                match c.join(&join) {
                    Ok(out) => {
                        node_of.insert(conn, node);
                        writers.insert(node, Mutex::new(writer));
                        send(&mut writers, out);
                    }
                    Err(reason) => {
                        eprintln!(
                            "accel-launch: note: control plane: refused node {node} from {peer}: {reason}"
                        );
                        let mut w = writer;
                        let _ = w.send(&Msg::Reject { reason }.json());
                        let _ = w.s.shutdown(std::net::Shutdown::Both);
                    }
                }
            }
            Ok(HubEvent::Msg { conn, msg }) => {
                if let Some(n) = node_of.get(&conn).copied() {
                    let out = c.message(n, msg);
                    send(&mut writers, out);
                }
            }
            Ok(HubEvent::Closed { conn, why }) => {
                if let Some(n) = node_of.remove(&conn) {
                    writers.remove(&n);
                    let out = c.closed(n, &why);
                    send(&mut writers, out);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        // A wait for replacements is bounded like the first join.
        if !c.waiting() {
            wait_deadline = None;
        } else if wait_deadline.is_none() {
            wait_deadline = Some(Instant::now() + join_timeout);
        }
        if wait_deadline.is_some_and(|d| Instant::now() >= d) {
            let out = c.give_up();
            send(&mut writers, out);
        }
        if Instant::now() >= next_beat {
            next_beat = Instant::now() + heartbeat;
            send(&mut writers, vec![(To::All, Msg::Hb)]);
            if c.joining() && Instant::now() >= join_deadline {
                let missing = c.missing();
                let reason = format!(
                    "not every node joined within {} s: still waiting for node rank(s) {missing:?}",
                    join_timeout.as_secs()
                );
                send(&mut writers, vec![(To::All, Msg::Reject { reason })]);
                break;
            }
        }
    }
    done.store(true, Ordering::Relaxed);
}
