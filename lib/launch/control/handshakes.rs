//! The connections in their handshake at node 0, by the address they come from, and which of them
//! makes room when there are [`MAX_PENDING`]: a stranger without the run's secret may hold as many
//! connections as it likes open without a word, each for the whole handshake timeout, and reopen
//! each as node 0 closes it. Refusing newcomers at the cap (as node 0 once did) left a real node
//! only the moments after each expiry; instead a newcomer is always let in, and the oldest handshake
//! of the address holding the most gives way. A real node proves itself in one round trip, so its
//! handshake is the newest of an address holding one: while a flood holds more from any address,
//! or 256 connections from as many addresses have come after it, it is not the one to go.
//! (A per-address cap alone does not hold against a flood from many addresses, and a shorter
//! timeout only narrows the wait; a slot kept for addresses that proved the secret before does
//! nothing for a node's first join.)

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

/// Connections in their handshake, at most.
pub(super) const MAX_PENDING: usize = 256;

/// A connection's place: its slot at the server and the serial that tells it from the slot's
/// later connections.
pub(super) type Conn = (usize, u64);

/// The connections in their handshake, each address's in the order they came.
#[derive(Default)]
pub(super) struct Handshakes {
    by_addr: HashMap<IpAddr, VecDeque<(u64, Conn)>>,
    len: usize,
    /// Counts arrivals: the age of each handshake, oldest first across addresses.
    clock: u64,
}

impl Handshakes {
    /// A connection from `ip` starts its handshake; when [`MAX_PENDING`] are under way, the
    /// handshake that gives way for it (the oldest of the address holding the most, the older
    /// first among equals), to be closed.
    pub fn add(&mut self, ip: IpAddr, conn: Conn) -> Option<Conn> {
        let evicted = (self.len >= MAX_PENDING).then(|| self.evict()).flatten();
        self.clock += 1;
        self.by_addr
            .entry(ip)
            .or_default()
            .push_back((self.clock, conn));
        self.len += 1;
        evicted
    }

    /// A connection's handshake is over (joined, refused or closed).
    pub fn remove(&mut self, ip: IpAddr, conn: Conn) {
        let Some(q) = self.by_addr.get_mut(&ip) else {
            return;
        };
        if let Some(i) = q.iter().position(|(_, c)| *c == conn) {
            q.remove(i);
            self.len -= 1;
        }
        if q.is_empty() {
            self.by_addr.remove(&ip);
        }
    }

    fn evict(&mut self) -> Option<Conn> {
        let ip = *self
            .by_addr
            .iter()
            .filter_map(|(ip, q)| q.front().map(|(age, _)| (ip, q.len(), *age)))
            .max_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)))?
            .0;
        let (_, conn) = self.by_addr.get_mut(&ip)?.pop_front()?;
        self.len -= 1;
        if self.by_addr.get(&ip).is_some_and(VecDeque::is_empty) {
            self.by_addr.remove(&ip);
        }
        Some(conn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn below_the_cap_nothing_gives_way() {
        let mut h = Handshakes::default();
        for i in 0..MAX_PENDING {
            assert_eq!(h.add(ip(2), (i, i as u64)), None);
        }
        assert_eq!(h.len, MAX_PENDING);
        h.remove(ip(2), (0, 0));
        h.remove(ip(2), (0, 0));
        h.remove(ip(9), (1, 1));
        assert_eq!(h.len, MAX_PENDING - 1);
        assert_eq!(h.add(ip(1), (0, 999)), None);
    }

    /// One address holding every slot: a newcomer from anywhere takes the place of its oldest;
    /// the flood reopening its connections evicts its own, never the real node's.
    #[test]
    fn the_address_holding_the_most_gives_way_oldest_first() {
        let mut h = Handshakes::default();
        for i in 0..MAX_PENDING {
            h.add(ip(2), (i, i as u64));
        }
        assert_eq!(h.add(ip(1), (1000, 1000)), Some((0, 0)));
        for i in 0..3 * MAX_PENDING {
            let evicted = h.add(ip(2), (2000 + i, 2000 + i as u64));
            assert_ne!(evicted, Some((1000, 1000)));
        }
        assert_eq!(h.len, MAX_PENDING);
        // 300 from 50 addresses (6 each, the cap reached on the way): the real node's one stays.
        let mut h = Handshakes::default();
        h.add(ip(1), (7, 7));
        for i in 0..300 {
            let evicted = h.add(ip(2 + (i % 50) as u8), (100 + i, 100 + i as u64));
            assert_ne!(evicted, Some((7, 7)));
        }
        assert_eq!(h.len, MAX_PENDING);
    }

    /// Among addresses holding as many, the oldest handshake goes.
    #[test]
    fn among_equals_the_oldest_goes() {
        let mut h = Handshakes::default();
        for i in 0..MAX_PENDING {
            h.add(ip(i as u8), (i, i as u64));
        }
        assert_eq!(h.add(ip(255), (900, 900)), Some((0, 0)));
        // Now 127.0.0.255 holds the most: its oldest goes, then 127.0.0.200's.
        assert_eq!(h.add(ip(200), (901, 901)), Some((255, 255)));
        assert_eq!(h.add(ip(3), (902, 902)), Some((200, 200)));
        assert_eq!(h.add(ip(3), (903, 903)), Some((3, 3)));
    }
}
