//! The network half of the pre-flight, in plain std: does MASTER_ADDR resolve, is it loopback, and can
//! a TCP connection reach the master port — each bounded by a deadline, so a black-holed address costs
//! the timeout and not the kernel's two-minute SYN retry.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Resolves `host:port`, giving up after `timeout` (a resolver can hang on a dead DNS server).
pub fn resolve(host: &str, port: u16, timeout: Duration) -> Result<Vec<SocketAddr>, String> {
    let (tx, rx) = mpsc::channel();
    let target = (host.to_string(), port);
    std::thread::spawn(move || {
        let _ = tx.send(target.to_socket_addrs().map(|a| a.collect::<Vec<_>>()));
    });
    match rx.recv_timeout(timeout) {
        Ok(Ok(addrs)) if !addrs.is_empty() => Ok(addrs),
        Ok(Ok(_)) => Err(format!("`{host}` resolves to no address")),
        Ok(Err(e)) => Err(format!("`{host}` does not resolve: {e}")),
        Err(_) => Err(format!(
            "resolving `{host}` took longer than {:.0} s",
            timeout.as_secs_f64()
        )),
    }
}

/// Whether every address is a loopback one (then other machines cannot reach it).
pub fn all_loopback(addrs: &[SocketAddr]) -> bool {
    !addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback())
}

/// Connects to one of `addrs` before `deadline`, retrying while the server may still be starting.
/// Returns how long it took.
pub fn reach(addrs: &[SocketAddr], deadline: Instant) -> Result<Duration, String> {
    let start = Instant::now();
    let mut last = String::from("no address to try");
    loop {
        for addr in addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match TcpStream::connect_timeout(addr, left.min(Duration::from_secs(2))) {
                Ok(_) => return Ok(start.elapsed()),
                Err(e) => last = format!("{addr}: {e}"),
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "nothing accepted a connection within {:.0} s (last: {last})",
                deadline.saturating_duration_since(start).as_secs_f64()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_and_reach_loopback() {
        let addrs = resolve("127.0.0.1", 1, Duration::from_secs(5)).unwrap();
        assert!(all_loopback(&addrs));
        // A port just released may be taken by a test running in parallel: try a few.
        let mut last = String::new();
        for _ in 0..5 {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            let addrs = resolve("127.0.0.1", port, Duration::from_secs(5)).unwrap();
            assert!(reach(&addrs, Instant::now() + Duration::from_secs(5)).is_ok());
            drop(l);
            match reach(&addrs, Instant::now() + Duration::from_millis(300)) {
                Err(e) if e.contains("refused") => {
                    last.clear();
                    break;
                }
                other => last = format!("{other:?}"),
            }
        }
        assert!(
            last.is_empty(),
            "a closed port was not reported as refused: {last}"
        );
        assert!(resolve("no-such-host.invalid", 1, Duration::from_secs(10)).is_err());
    }
}
