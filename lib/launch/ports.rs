//! Rendezvous ports. Rank 0 binds the TCPStore port itself, so the launcher cannot hold a reservation:
//! an automatically chosen port is picked free and, should another process take it first, rank 0 fails
//! with EADDRINUSE and the supervisor retries with a new one ([`is_addr_in_use`]). A port the user named
//! is checked up front, so a busy one is an error that says so instead of a hang.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};

use crate::error::Diagnostic;
use crate::exit_status::ExitStatus;

#[derive(Debug, thiserror::Error)]
pub enum PortError {
    #[error(
        "port {port} is already in use on this machine, so rank 0 cannot host the rendezvous there"
    )]
    Busy { port: u16 },
    #[error("cannot find a free port")]
    NoFree(#[source] std::io::Error),
}

impl Diagnostic for PortError {
    fn hints(&self) -> Vec<String> {
        match self {
            PortError::Busy { .. } => vec![
                "pass another --main_process_port, or 0 (single node) to have a free one picked"
                    .into(),
                "`ss -ltnp` shows which process holds it".into(),
            ],
            PortError::NoFree(_) => Vec::new(),
        }
    }
    fn exit_status(&self) -> ExitStatus {
        ExitStatus::LauncherFailed
    }
}

/// A port that was free a moment ago (the kernel's choice of an ephemeral port).
pub fn free_port() -> Result<u16, PortError> {
    let l = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))
        .map_err(PortError::NoFree)?;
    l.local_addr().map(|a| a.port()).map_err(PortError::NoFree)
}

/// Fails when something already listens on `port` (any address), as rank 0 would find out later.
pub fn check_free(port: u16) -> Result<(), PortError> {
    match TcpListener::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port)) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(PortError::Busy { port }),
        // Permission (ports < 1024) and other errors surface in rank 0 with its own message.
        Err(_) => Ok(()),
    }
}

/// Whether a rank's stderr says its TCPStore could not bind: torch prints the errno name.
pub fn is_addr_in_use(stderr_tail: &str) -> bool {
    stderr_tail.contains("EADDRINUSE") || stderr_tail.contains("address already in use")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_port_is_an_error_naming_it() {
        let l = TcpListener::bind("0.0.0.0:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let e = check_free(port).unwrap_err();
        assert!(e
            .to_string()
            .contains(&format!("port {port} is already in use")));
        // The port picked is one nothing listens on: binding it at once succeeds, and it is not the
        // busy one.
        let p = free_port().unwrap();
        assert_ne!(p, port);
        assert!(check_free(p).is_ok());
        drop(TcpListener::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, p)).unwrap());
        drop(l);
        assert!(is_addr_in_use(
            "code: -98, name: EADDRINUSE, message: address already in use"
        ));
    }
}
