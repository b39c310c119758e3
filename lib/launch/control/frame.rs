//! How a line travels on a control-plane connection: cut from the bytes a socket gives (each line
//! capped, so that a peer cannot make the other side hold an endless one), and, once a handshake has
//! given the connection its session key ([`super::auth`]), sealed with an HMAC of its direction and
//! sequence number. Node 0's event loop (`server`) and every node's peer
//! (`peer`) frame their lines here, and nowhere else.

use ring::hmac;

use super::auth::{hex, unhex};

/// The longest line either side accepts (a stderr tail is at most 16 KiB; a hang's stacks are
/// capped below this).
pub(super) const MAX_LINE: u64 = 1 << 20;

/// Bytes read from a non-blocking connection, cut into lines of at most `cap` bytes.
#[derive(Debug, Default)]
pub(super) struct Lines {
    buf: Vec<u8>,
    start: usize,
    /// Bytes of `buf[start..]` already searched for a newline.
    scanned: usize,
}

impl Lines {
    pub fn push(&mut self, data: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
            self.scanned = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// Bytes held that are not yet a whole line.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The next whole line (without its newline), `Ok(None)` when none is complete yet, `Err` when
    /// the line being read is already longer than `cap` or is not UTF-8.
    pub fn next(&mut self, cap: usize) -> std::io::Result<Option<String>> {
        let rest = &self.buf[self.start + self.scanned..];
        let Some(i) = rest.iter().position(|b| *b == b'\n') else {
            self.scanned = self.buf.len() - self.start;
            if self.scanned > cap {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("a line longer than {cap} bytes"),
                ));
            }
            self.compact();
            return Ok(None);
        };
        let end = self.start + self.scanned + i;
        if end - self.start > cap {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a line longer than {cap} bytes"),
            ));
        }
        let line = std::str::from_utf8(&self.buf[self.start..end])
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8"))?
            .trim_end_matches('\r')
            .to_string();
        self.start = end + 1;
        self.scanned = 0;
        self.compact();
        Ok(Some(line))
    }

    /// Drops what was consumed, and gives back a large buffer once it is mostly empty.
    fn compact(&mut self) {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
            if self.buf.capacity() > 64 << 10 {
                self.buf = Vec::new();
            }
        } else if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
            if self.buf.capacity() > 64 << 10 && self.buf.len() < 16 << 10 {
                self.buf.shrink_to(16 << 10);
            }
        }
    }
}

/// Which way a line goes: part of what its HMAC covers, so a line cannot be reflected back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Way {
    ToServer,
    ToNode,
}

/// One direction of one connection: plain lines until [`Seal::key`] is set, then each line is
/// `HMAC-HEX SPACE JSON`, the HMAC over the direction, the line's sequence number and the JSON.
pub(super) struct Seal {
    key: Option<hmac::Key>,
    seq: u64,
    way: Way,
}

impl Seal {
    pub fn plain(way: Way) -> Seal {
        Seal {
            key: None,
            seq: 0,
            way,
        }
    }

    pub fn key(&mut self, key: hmac::Key) {
        self.key = Some(key);
        self.seq = 0;
    }

    fn input(&self, json: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(json.len() + 9);
        v.push(self.way as u8);
        v.extend_from_slice(&self.seq.to_be_bytes());
        v.extend_from_slice(json);
        v
    }

    /// The tag and space to put before `json` (no newline in it), which then ends with a newline;
    /// empty while the connection is not sealed. A message sent to every node is serialized once
    /// and only its tag is each connection's.
    pub fn head(&mut self, json: &[u8]) -> Vec<u8> {
        let Some(k) = &self.key else {
            return Vec::new();
        };
        let tag = hmac::sign(k, &self.input(json));
        let mut out = hex(tag.as_ref()).into_bytes();
        out.push(b' ');
        self.seq += 1;
        out
    }

    /// The line to write for `json` (no newline in it).
    pub fn seal(&mut self, json: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(json.len() + 66);
        if let Some(k) = &self.key {
            let tag = hmac::sign(k, &self.input(json));
            out.extend_from_slice(hex(tag.as_ref()).as_bytes());
            out.push(b' ');
            self.seq += 1;
        }
        out.extend_from_slice(json);
        out.push(b'\n');
        out
    }

    /// The JSON of a line read, once its HMAC is checked.
    pub fn open<'a>(&mut self, line: &'a str) -> std::io::Result<&'a str> {
        let Some(k) = &self.key else {
            return Ok(line);
        };
        let bad = || {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "a line failed its authentication (forged, replayed or altered)",
            )
        };
        let (mac, json) = line.split_once(' ').ok_or_else(bad)?;
        let tag = unhex(mac).ok_or_else(bad)?;
        hmac::verify(k, &self.input(json.as_bytes()), &tag).map_err(|_| bad())?;
        self.seq += 1;
        Ok(json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_line_is_refused_forged_replayed_reordered_or_reflected() {
        let session = || hmac::Key::new(hmac::HMAC_SHA256, b"0123456789abcdef-a-session-key");
        let mut tx = Seal::plain(Way::ToServer);
        let mut rx = Seal::plain(Way::ToServer);
        tx.key(session());
        rx.key(session());
        let a = String::from_utf8(tx.seal(br#"{"t":"hb"}"#)).unwrap();
        let b = String::from_utf8(tx.seal(br#"{"t":"bye"}"#)).unwrap();
        assert_eq!(rx.open(a.trim_end()).unwrap(), r#"{"t":"hb"}"#);
        // Replayed.
        assert!(rx.open(a.trim_end()).is_err());
        let mut rx2 = Seal::plain(Way::ToServer);
        rx2.key(session());
        // Reordered.
        assert!(rx2.open(b.trim_end()).is_err());
        // Altered.
        let mut rx3 = Seal::plain(Way::ToServer);
        rx3.key(session());
        assert!(rx3.open(&a.trim_end().replace("hb", "hc")).is_err());
        // Unsealed, and reflected back the other way.
        let mut rx4 = Seal::plain(Way::ToNode);
        rx4.key(session());
        assert!(rx4.open(r#"{"t":"hb"}"#).is_err());
        assert!(rx4.open(a.trim_end()).is_err());
    }

    #[test]
    fn lines_are_cut_across_reads_and_capped() {
        let mut l = Lines::default();
        l.push(b"{\"t\":\"hb\"}\r\n{\"t\":");
        assert_eq!(l.next(64).unwrap().as_deref(), Some(r#"{"t":"hb"}"#));
        assert_eq!(l.next(64).unwrap(), None);
        assert_eq!(l.pending(), 5);
        l.push(b"\"bye\"}\n");
        assert_eq!(l.next(64).unwrap().as_deref(), Some(r#"{"t":"bye"}"#));
        assert_eq!(l.pending(), 0);
        // A line already past the cap is an error before its end comes.
        l.push(&[b'x'; 65]);
        let e = l.next(64).unwrap_err().to_string();
        assert_eq!(e, "a line longer than 64 bytes");
        let mut l = Lines::default();
        l.push(b"\xff\n");
        assert_eq!(l.next(64).unwrap_err().to_string(), "not UTF-8");
    }
}
