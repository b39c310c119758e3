//! Node 0's server: accepts every node's connection, feeds its lines to the [`Coordinator`] and
//! carries its messages back, with heartbeats both ways and the join and replacement deadlines.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufReader, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::coordinator::{Coordinator, To};
use super::protocol::{read_msg, why_closed, write_msg, Join, Msg};
use super::{lost_after, ControlError};

enum HubEvent {
    Joined {
        conn: u64,
        join: Join,
        writer: TcpStream,
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

/// The server, hosted by node 0's launcher.
pub(super) struct Server {
    pub(super) done: Arc<AtomicBool>,
}

pub(super) fn start_server(
    port: u16,
    nodes: u32,
    join_timeout: Duration,
    heartbeat: Duration,
) -> Result<Server, ControlError> {
    raise_open_files();
    let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))
        .map_err(|source| ControlError::Bind { port, source })?;
    let (tx, rx) = mpsc::channel::<HubEvent>();
    let window = lost_after(heartbeat);
    let done = Arc::new(AtomicBool::new(false));
    std::thread::spawn(move || {
        let mut next = 0u64;
        for s in listener.incoming() {
            let Ok(s) = s else { continue };
            next += 1;
            let conn = next;
            let tx = tx.clone();
            std::thread::spawn(move || serve_conn(conn, s, tx, join_timeout, window));
        }
    });
    let d = Arc::clone(&done);
    std::thread::spawn(move || hub(rx, nodes, join_timeout, heartbeat, d));
    Ok(Server { done })
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

fn serve_conn(
    conn: u64,
    s: TcpStream,
    tx: Sender<HubEvent>,
    join_timeout: Duration,
    window: Duration,
) {
    let _ = s.set_nodelay(true);
    let Ok(writer) = s.try_clone() else { return };
    let _ = writer.set_write_timeout(Some(window));
    let _ = s.set_read_timeout(Some(join_timeout));
    let mut r = BufReader::new(s);
    let join = match read_msg(&mut r) {
        Ok(Some(Msg::Join(j))) => j,
        _ => return,
    };
    if tx.send(HubEvent::Joined { conn, join, writer }).is_err() {
        return;
    }
    let _ = r.get_ref().set_read_timeout(Some(window));
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
    join_timeout: Duration,
    heartbeat: Duration,
    done: Arc<AtomicBool>,
) {
    let mut c = Coordinator::new(nodes).replacing_within(join_timeout);
    let mut wait_deadline: Option<Instant> = None;
    let mut writers: BTreeMap<u32, Mutex<TcpStream>> = BTreeMap::new();
    let mut node_of: HashMap<u64, u32> = HashMap::new();
    let join_deadline = Instant::now() + join_timeout;
    let mut next_beat = Instant::now() + heartbeat;
    let send = |writers: &mut BTreeMap<u32, Mutex<TcpStream>>, out: Vec<(To, Msg)>| {
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
            Ok(HubEvent::Joined { conn, join, writer }) => {
                let node = join.node;
                match c.join(&join) {
                    Ok(out) => {
                        node_of.insert(conn, node);
                        writers.insert(node, Mutex::new(writer));
                        send(&mut writers, out);
                    }
                    Err(reason) => {
                        let mut w = writer;
                        let _ = w.write_all(&Msg::Reject { reason }.line());
                        let _ = w.shutdown(std::net::Shutdown::Both);
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
