//! TCP bytes moving for a rank, for the hang watch ([`super::watch`]). Data streamed with `recv()` or
//! `send()` on a socket barely moves `rchar`/`wchar` of /proc/<pid>/io (10 MiB through `recv`: about
//! a hundred bytes; the counters grow only as calls return, so one long `send` to a slow peer moves
//! nothing until it ends), so the watch also reads each TCP socket's `tcpi_bytes_received` and
//! `tcpi_bytes_acked` (`struct tcp_info`, linux/tcp.h), which the kernel updates as segments arrive
//! and are acknowledged, from the sock_diag netlink interface (what `ss -ti` reads), and adds them up
//! over the sockets whose inodes the rank's processes hold (/proc/<pid>/fd).

use std::collections::HashMap;
use std::os::fd::AsRawFd;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_sock_diag::{
    constants::{AF_INET, AF_INET6, IPPROTO_TCP},
    inet::{nlas::Nla, ExtensionFlags, InetRequest, SocketId, StateFlags},
    SockDiagMessage,
};
use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr};

/// Offsets of `tcpi_bytes_acked` and `tcpi_bytes_received` (u64, native endian) in `struct
/// tcp_info` (linux/tcp.h, since Linux 4.1 and 4.2).
const BYTES_ACKED: usize = 120;
const BYTES_RECEIVED: usize = 128;

/// At most this many sockets are read per dump, and this many descriptors per process: a bound on
/// the watch's work however many connections a node has.
const MAX_SOCKETS: usize = 1 << 16;
const MAX_FDS: usize = 1 << 14;

/// Reads the TCP byte counters of this network namespace's sockets.
#[derive(Default)]
pub struct TcpBytes {
    /// The first failure, once: sock_diag unavailable (a kernel without it, a seccomp filter); the
    /// watch then goes without TCP bytes.
    failed: bool,
}

impl TcpBytes {
    pub fn new() -> TcpBytes {
        TcpBytes::default()
    }

    /// bytes_received + bytes_acked of every TCP socket (IPv4 and IPv6), by inode; `None` when
    /// sock_diag cannot be read.
    pub fn by_inode(&mut self) -> Option<HashMap<u64, u64>> {
        if self.failed {
            return None;
        }
        let mut map = HashMap::new();
        for family in [AF_INET, AF_INET6] {
            if dump(family, &mut map).is_err() {
                self.failed = true;
                return None;
            }
        }
        Some(map)
    }
}

fn dump(family: u8, into: &mut HashMap<u64, u64>) -> std::io::Result<()> {
    let mut socket = Socket::new(NETLINK_SOCK_DIAG)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    // The kernel answers a dump at once; a bound all the same.
    let tv = libc::timeval {
        tv_sec: 1,
        tv_usec: 0,
    };
    // SAFETY: a valid descriptor and a timeval of the right size.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            std::ptr::addr_of!(tv).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    let mut request = NetlinkMessage::new(
        header,
        SockDiagMessage::InetRequest(InetRequest {
            family,
            protocol: IPPROTO_TCP,
            extensions: ExtensionFlags::INFO,
            states: StateFlags::all(),
            socket_id: if family == AF_INET {
                SocketId::new_v4()
            } else {
                SocketId::new_v6()
            },
        })
        .into(),
    );
    request.finalize();
    let mut out = vec![0; request.buffer_len()];
    request.serialize(&mut out);
    socket.send(&out, 0)?;
    let mut buf = vec![0u8; 1 << 16];
    let mut seen = 0;
    loop {
        let n = socket.recv(&mut &mut buf[..], 0)?;
        if n == 0 {
            return Ok(());
        }
        let mut at = 0;
        while at < n {
            let msg = NetlinkMessage::<SockDiagMessage>::deserialize(&buf[at..n])
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            let len = msg.header.length as usize;
            match msg.payload {
                NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r)) => {
                    seen += 1;
                    if seen > MAX_SOCKETS {
                        return Ok(());
                    }
                    let info = r.nlas.iter().find_map(|nla| match nla {
                        Nla::TcpInfo(bytes) => Some(bytes),
                        _ => None,
                    });
                    if let Some(b) = info.and_then(|b| moved(b)) {
                        *into.entry(u64::from(r.header.inode)).or_default() += b;
                    }
                }
                NetlinkPayload::Done(_) => return Ok(()),
                NetlinkPayload::Error(e) => {
                    return Err(std::io::Error::other(format!("sock_diag: {e:?}")))
                }
                _ => {}
            }
            if len == 0 {
                break;
            }
            at += len;
        }
    }
}

/// bytes_acked + bytes_received of a `struct tcp_info`, when it is long enough to hold them.
fn moved(info: &[u8]) -> Option<u64> {
    let field = |at: usize| -> Option<u64> {
        let b: [u8; 8] = info.get(at..at + 8)?.try_into().ok()?;
        Some(u64::from_ne_bytes(b))
    };
    Some(field(BYTES_ACKED)?.wrapping_add(field(BYTES_RECEIVED)?))
}

/// The inodes of the sockets a process holds (`socket:[N]` links in /proc/<pid>/fd).
pub fn socket_inodes(pid: i32) -> Vec<u64> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.flatten()
        .take(MAX_FDS)
        .filter_map(|e| {
            let link = std::fs::read_link(e.path()).ok()?;
            let s = link.to_str()?;
            s.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn bytes_received_on_a_socket_of_this_process_are_counted() {
        let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(server.local_addr().unwrap()).unwrap();
        let (mut peer, _) = server.accept().unwrap();
        let mine = socket_inodes(std::process::id() as i32);
        let total = |map: &HashMap<u64, u64>| mine.iter().filter_map(|i| map.get(i)).sum::<u64>();
        let mut tcp = TcpBytes::new();
        let before = total(&tcp.by_inode().expect("sock_diag"));
        peer.write_all(&[7u8; 100_000]).unwrap();
        let mut got = vec![0; 100_000];
        client.read_exact(&mut got).unwrap();
        let after = total(&tcp.by_inode().unwrap());
        // Received by the client and acknowledged to the peer: both sockets are this process's.
        assert!(after >= before + 200_000, "{before} -> {after}");
    }

    #[test]
    fn a_short_tcp_info_is_no_count() {
        assert_eq!(moved(&[0; 100]), None);
        let mut b = vec![0u8; 136];
        b[BYTES_ACKED..BYTES_ACKED + 8].copy_from_slice(&5u64.to_ne_bytes());
        b[BYTES_RECEIVED..].copy_from_slice(&7u64.to_ne_bytes());
        assert_eq!(moved(&b), Some(12));
    }
}
