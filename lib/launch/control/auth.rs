//! Who may take part in a run: the shared-secret handshake between a node's launcher and node 0's
//! server, and the sealing of every later line on that connection.
//!
//! Neither torch's TCPStore nor torchrun's c10d rendezvous authenticates, and a cluster network is
//! shared: anyone who reaches node 0's control port could otherwise join as a missing node (and be
//! handed the world's layout), or stop the run with a forged failure. With `ACCEL_LAUNCH_SECRET` (or
//! `ACCEL_LAUNCH_SECRET_FILE`) set to the same secret on every node:
//!
//! 1. the node sends `hello` with a fresh nonce;
//! 2. node 0 answers `challenge`: its own nonce and an HMAC-SHA256 over both nonces, the run id and
//!    the node rank, which only a holder of the secret can compute — the node checks it, so a
//!    stranger posing as node 0 gets nothing;
//! 3. the node answers `prove` (the same over a different label), checked by node 0 in constant
//!    time (ring's `hmac::verify`);
//! 4. both derive a session key from the secret and the two nonces, and every later line carries
//!    an HMAC of its direction, its sequence number and its text: a line forged, replayed, reordered
//!    or taken from another connection is refused, and the connection is closed.
//!
//! Without a secret the run still works (a drop-in for `accelerate launch --num_machines N`), with
//! `auth: none` in the challenge, and node 0 says once that its control plane is open.

use std::io::{BufRead, Read, Write};
use std::net::TcpStream;

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

use super::ControlError;

/// The longest line either side accepts (a stderr tail is at most 16 KiB; a hang's stacks are
/// capped below this).
pub(super) const MAX_LINE: u64 = 1 << 20;

/// The shortest secret accepted: 16 bytes, as HMAC keys go.
const MIN_SECRET: usize = 16;

/// The run's shared secret, from `ACCEL_LAUNCH_SECRET` or the file `ACCEL_LAUNCH_SECRET_FILE` names.
#[derive(Clone)]
pub struct Secret(hmac::Key);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl Secret {
    pub fn new(bytes: &[u8]) -> Secret {
        Secret(hmac::Key::new(hmac::HMAC_SHA256, bytes))
    }

    /// The secret the environment gives, if any: the variable wins over the file; a file others can
    /// read, an empty or a short secret are errors naming the variable.
    pub fn from_env(
        value: Option<&str>,
        file: Option<&str>,
    ) -> Result<Option<Secret>, ControlError> {
        use crate::env_vars::{ACCEL_LAUNCH_SECRET, ACCEL_LAUNCH_SECRET_FILE};
        let bad = |var: &str, why: String| ControlError::Secret {
            var: var.to_string(),
            why,
        };
        let check = |var: &str, s: &[u8]| {
            if s.len() < MIN_SECRET {
                Err(bad(
                    var,
                    format!(
                        "a secret needs at least {MIN_SECRET} bytes (it has {})",
                        s.len()
                    ),
                ))
            } else {
                Ok(Some(Secret::new(s)))
            }
        };
        if let Some(v) = value {
            return check(ACCEL_LAUNCH_SECRET, v.as_bytes());
        }
        let Some(path) = file else { return Ok(None) };
        use std::os::unix::fs::PermissionsExt as _;
        let meta = std::fs::metadata(path)
            .map_err(|e| bad(ACCEL_LAUNCH_SECRET_FILE, format!("cannot read {path}: {e}")))?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(bad(
                ACCEL_LAUNCH_SECRET_FILE,
                format!(
                    "{path} can be read by others (mode {:o}): chmod 600 it",
                    meta.permissions().mode() & 0o777
                ),
            ));
        }
        let bytes = std::fs::read(path)
            .map_err(|e| bad(ACCEL_LAUNCH_SECRET_FILE, format!("cannot read {path}: {e}")))?;
        // A trailing newline is the editor's, not the secret's.
        let trimmed = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
        let trimmed = trimmed.strip_suffix(b"\r").unwrap_or(trimmed);
        check(ACCEL_LAUNCH_SECRET_FILE, trimmed)
    }

    fn tag(&self, label: &str, fields: &[&[u8]]) -> hmac::Tag {
        hmac::sign(&self.0, &encode(label, fields))
    }

    fn verify(&self, label: &str, fields: &[&[u8]], tag: &[u8]) -> bool {
        hmac::verify(&self.0, &encode(label, fields), tag).is_ok()
    }
}

/// Length-prefixed fields, so that no two different field lists give the same bytes.
fn encode(label: &str, fields: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::new();
    for f in std::iter::once(label.as_bytes()).chain(fields.iter().copied()) {
        v.extend_from_slice(&(f.len() as u32).to_be_bytes());
        v.extend_from_slice(f);
    }
    v
}

/// 32 random bytes, hex.
pub(super) fn nonce() -> Result<String, ControlError> {
    let mut b = [0u8; 32];
    SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| ControlError::Secret {
            var: "the system's random source".into(),
            why: "getrandom failed".into(),
        })?;
    Ok(hex(&b))
}

pub(super) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || s.len() > 256 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// What both sides of one connection bind their proofs to.
pub(super) struct Handshake<'a> {
    pub run_id: &'a str,
    pub node: u32,
    pub client_nonce: &'a str,
    pub server_nonce: &'a str,
}

impl Handshake<'_> {
    fn fields(&self) -> [Vec<u8>; 4] {
        [
            self.run_id.as_bytes().to_vec(),
            self.node.to_be_bytes().to_vec(),
            self.client_nonce.as_bytes().to_vec(),
            self.server_nonce.as_bytes().to_vec(),
        ]
    }

    fn sign(&self, s: &Secret, label: &str) -> String {
        let f = self.fields();
        let refs: Vec<&[u8]> = f.iter().map(Vec::as_slice).collect();
        hex(s.tag(label, &refs).as_ref())
    }

    fn check(&self, s: &Secret, label: &str, proof: &str) -> bool {
        let Some(tag) = unhex(proof) else {
            return false;
        };
        let f = self.fields();
        let refs: Vec<&[u8]> = f.iter().map(Vec::as_slice).collect();
        s.verify(label, &refs, &tag)
    }

    /// Node 0's proof, checked by the node.
    pub fn server_proof(&self, s: &Secret) -> String {
        self.sign(s, "accel-launch control server")
    }
    pub fn server_proof_ok(&self, s: &Secret, proof: &str) -> bool {
        self.check(s, "accel-launch control server", proof)
    }
    /// The node's proof, checked by node 0.
    pub fn client_proof(&self, s: &Secret) -> String {
        self.sign(s, "accel-launch control client")
    }
    pub fn client_proof_ok(&self, s: &Secret, proof: &str) -> bool {
        self.check(s, "accel-launch control client", proof)
    }

    /// The key every later line of this connection is sealed with.
    pub fn session(&self, s: &Secret) -> hmac::Key {
        let f = self.fields();
        let refs: Vec<&[u8]> = f.iter().map(Vec::as_slice).collect();
        hmac::Key::new(
            hmac::HMAC_SHA256,
            s.tag("accel-launch control session", &refs).as_ref(),
        )
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

/// A connection's reading side.
pub(super) struct Reader<R: Read = TcpStream> {
    pub r: std::io::BufReader<R>,
    pub seal: Seal,
}

impl Reader<TcpStream> {
    pub fn stream(&self) -> &TcpStream {
        self.r.get_ref()
    }
}

impl<R: Read> Reader<R> {
    pub fn new(s: R, way: Way) -> Reader<R> {
        Reader {
            r: std::io::BufReader::new(s),
            seal: Seal::plain(way),
        }
    }

    /// One line, at most [`MAX_LINE`] bytes (a longer one is an error, not a wait for its end),
    /// authenticated when the connection is sealed; `None` at the end of the stream.
    pub fn line(&mut self) -> std::io::Result<Option<String>> {
        let mut buf = Vec::new();
        let n = self.r.by_ref().take(MAX_LINE).read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        if buf.last() != Some(&b'\n') && n as u64 >= MAX_LINE {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a line longer than {MAX_LINE} bytes"),
            ));
        }
        let text = String::from_utf8(buf)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8"))?;
        Ok(Some(self.seal.open(text.trim_end())?.to_string()))
    }
}

/// A connection's writing side.
pub(super) struct Writer {
    pub s: TcpStream,
    pub seal: Seal,
}

impl Writer {
    pub fn new(s: TcpStream, way: Way) -> Writer {
        Writer {
            s,
            seal: Seal::plain(way),
        }
    }

    pub fn send(&mut self, json: &[u8]) -> std::io::Result<()> {
        let line = self.seal.seal(json);
        self.s.write_all(&line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hs<'a>(run: &'a str, node: u32, c: &'a str, s: &'a str) -> Handshake<'a> {
        Handshake {
            run_id: run,
            node,
            client_nonce: c,
            server_nonce: s,
        }
    }

    #[test]
    fn a_proof_holds_only_for_its_secret_run_node_and_nonces() {
        let k = Secret::new(b"0123456789abcdef-the-secret");
        let other = Secret::new(b"0123456789abcdef-another-one");
        let h = hs("job.0", 1, "aa", "bb");
        let p = h.client_proof(&k);
        assert!(h.client_proof_ok(&k, &p));
        assert!(!h.client_proof_ok(&other, &p));
        assert!(
            !h.server_proof_ok(&k, &p),
            "a client proof is not a server proof"
        );
        assert!(!hs("job.1", 1, "aa", "bb").client_proof_ok(&k, &p));
        assert!(!hs("job.0", 2, "aa", "bb").client_proof_ok(&k, &p));
        assert!(!hs("job.0", 1, "ab", "bb").client_proof_ok(&k, &p));
        assert!(!hs("job.0", 1, "aa", "bc").client_proof_ok(&k, &p));
        assert!(!h.client_proof_ok(&k, "zz"));
        assert!(!h.client_proof_ok(&k, ""));
    }

    #[test]
    fn a_sealed_line_is_refused_forged_replayed_reordered_or_reflected() {
        let k = Secret::new(b"0123456789abcdef-the-secret");
        let h = hs("r", 0, "c", "s");
        let mut tx = Seal::plain(Way::ToServer);
        let mut rx = Seal::plain(Way::ToServer);
        tx.key(h.session(&k));
        rx.key(h.session(&k));
        let a = String::from_utf8(tx.seal(br#"{"t":"hb"}"#)).unwrap();
        let b = String::from_utf8(tx.seal(br#"{"t":"bye"}"#)).unwrap();
        assert_eq!(rx.open(a.trim_end()).unwrap(), r#"{"t":"hb"}"#);
        // Replayed.
        assert!(rx.open(a.trim_end()).is_err());
        let mut rx2 = Seal::plain(Way::ToServer);
        rx2.key(h.session(&k));
        // Reordered.
        assert!(rx2.open(b.trim_end()).is_err());
        // Altered.
        let mut rx3 = Seal::plain(Way::ToServer);
        rx3.key(h.session(&k));
        assert!(rx3.open(&a.trim_end().replace("hb", "hc")).is_err());
        // Unsealed, and reflected back the other way.
        let mut rx4 = Seal::plain(Way::ToNode);
        rx4.key(h.session(&k));
        assert!(rx4.open(r#"{"t":"hb"}"#).is_err());
        assert!(rx4.open(a.trim_end()).is_err());
    }

    #[test]
    fn a_secret_file_others_can_read_or_a_short_secret_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("s");
        std::fs::write(&f, "0123456789abcdef\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let p = f.to_str().unwrap();
        let e = Secret::from_env(None, Some(p)).unwrap_err().to_string();
        assert!(
            e.contains("ACCEL_LAUNCH_SECRET_FILE") && e.contains("chmod 600"),
            "{e}"
        );
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Secret::from_env(None, Some(p)).unwrap().is_some());
        let e = Secret::from_env(Some("short"), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ACCEL_LAUNCH_SECRET") && e.contains("16 bytes"),
            "{e}"
        );
        assert!(Secret::from_env(None, None).unwrap().is_none());
    }
}
