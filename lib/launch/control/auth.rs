//! Who may take part in a run: the shared-secret handshake between a node's launcher and node 0's
//! server, and the session key every later line of that connection is sealed with
//! (`frame` seals them).
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
//! Under SLURM without a secret, MUNGE ([`super::munge`]) takes the secret's place with no
//! configuration at all: the challenge's proof is a MUNGE credential whose payload binds the side
//! (node 0 or the node), the run id, the node rank, both nonces and a random 32-byte share of the
//! session key; the node decodes it with its munged (same uid, fresh, not replayed, payload exactly
//! this handshake's) and answers with its own credential, which node 0 checks the same way. The
//! credentials are restricted to our uid, so the shares stay between the run's own launchers, and
//! the session key is derived from both shares and the handshake. A secret, when set, takes
//! precedence over MUNGE (an explicit choice wins; the man page says so).
//!
//! Without either the run still works (a drop-in for `accelerate launch --num_machines N`), with
//! `auth: none` in the challenge, and node 0 says once that its control plane is open.

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

use super::munge::Munge;
use super::ControlError;

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
    /// read, an empty or a short secret, and a set but empty variable are errors naming the
    /// variable.
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
        if path.is_empty() {
            return Err(bad(
                ACCEL_LAUNCH_SECRET_FILE,
                "it is set but empty: it names no file".into(),
            ));
        }
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
    Ok(hex(&random32()?))
}

/// 32 random bytes.
pub(super) fn random32() -> Result<[u8; 32], ControlError> {
    let mut b = [0u8; 32];
    SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| ControlError::Secret {
            var: "the system's random source".into(),
            why: "getrandom failed".into(),
        })?;
    Ok(b)
}

pub(super) fn hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push(DIGITS[usize::from(x >> 4)] as char);
        s.push(DIGITS[usize::from(x & 15)] as char);
    }
    s
}

pub(super) fn unhex(s: &str) -> Option<Vec<u8>> {
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
        self.sign(s, SERVER)
    }
    pub fn server_proof_ok(&self, s: &Secret, proof: &str) -> bool {
        self.check(s, SERVER, proof)
    }
    /// The node's proof, checked by node 0.
    pub fn client_proof(&self, s: &Secret) -> String {
        self.sign(s, CLIENT)
    }
    pub fn client_proof_ok(&self, s: &Secret, proof: &str) -> bool {
        self.check(s, CLIENT, proof)
    }

    /// What a MUNGE credential of this handshake carries: the side that made it, the run id, the
    /// node, both nonces and that side's share of the session key.
    pub fn munge_payload(&self, side: &str, share: &[u8; 32]) -> Vec<u8> {
        let f = self.fields();
        let mut refs: Vec<&[u8]> = f.iter().map(Vec::as_slice).collect();
        refs.push(share);
        encode(side, &refs)
    }

    /// The share in a decoded payload, when the payload is exactly this handshake's for `side`.
    pub fn munge_share(&self, side: &str, payload: &[u8]) -> Option<[u8; 32]> {
        let n = payload.len().checked_sub(32)?;
        let share: [u8; 32] = payload.get(n..)?.try_into().ok()?;
        (self.munge_payload(side, &share) == payload).then_some(share)
    }

    /// The session key of a MUNGE handshake: from both shares, bound to the handshake.
    pub fn munge_session(&self, server: &[u8; 32], client: &[u8; 32]) -> hmac::Key {
        self.session(&Secret::new(&[&server[..], &client[..]].concat()))
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

/// The labels of node 0's and the node's proofs.
pub(super) const SERVER: &str = "accel-launch control server";
pub(super) const CLIENT: &str = "accel-launch control client";

/// How a launcher proves itself and checks node 0: the run's secret (which takes precedence), or
/// MUNGE under SLURM, or neither.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    pub secret: Option<Secret>,
    pub munge: Option<Munge>,
}

impl Credentials {
    /// The authentication node 0 asks for in its challenge: `hmac`, `munge` or `none`.
    pub fn kind(&self) -> &'static str {
        match (&self.secret, &self.munge) {
            (Some(_), _) => "hmac",
            (None, Some(_)) => "munge",
            (None, None) => "none",
        }
    }
}

/// The node's answer to node 0's challenge.
pub(super) enum Answer {
    /// Node 0 runs unauthenticated, and so may this node.
    Open,
    /// The node's proof, and the session key every later line is sealed with.
    Prove { proof: String, session: hmac::Key },
}

/// The node's side of a challenge: node 0's proof checked for `auth` (its kind), this node's proof
/// made. `Err` is why the node refuses to go on. A node never follows node 0 down to less than it
/// can do itself: with a secret it needs `hmac`, with MUNGE at least `munge`.
pub(super) fn answer(
    creds: &Credentials,
    hs: &Handshake,
    auth: &str,
    proof: Option<&str>,
) -> Result<Answer, String> {
    let var = crate::env_vars::ACCEL_LAUNCH_SECRET;
    match (auth, &creds.secret, &creds.munge) {
        ("none", None, None) => Ok(Answer::Open),
        ("none" | "munge", Some(_), _) => Err(format!(
            "node 0 runs without a secret while this node has one: set the same {var} on every node"
        )),
        ("none", None, Some(_)) => Err(format!(
            "node 0 does not authenticate its nodes while this node can prove itself with MUNGE (SLURM's): node 0 said why in its note; set the same {var} on every node to go on"
        )),
        ("hmac", None, _) => Err(format!(
            "node 0 requires the run's secret: set {var} (or {var}_FILE) on this node too"
        )),
        ("hmac", Some(k), _) => {
            if !proof.is_some_and(|p| hs.server_proof_ok(k, p)) {
                return Err(format!(
                    "node 0 could not prove it holds this run's secret (a different {var}, or not this run's node 0)"
                ));
            }
            Ok(Answer::Prove {
                proof: hs.client_proof(k),
                session: hs.session(k),
            })
        }
        ("munge", None, None) => Err(format!(
            "node 0 authenticates its nodes with MUNGE (SLURM's), which this node cannot use: run it in the same SLURM step, or set the same {var} on every node"
        )),
        ("munge", None, Some(m)) => {
            let Some(cred) = proof else {
                return Err("node 0 sent no MUNGE credential".into());
            };
            let d = m
                .decode(cred)
                .map_err(|e| format!("node 0's MUNGE credential was refused by munged: {e}"))?;
            if d.uid != m.uid() {
                return Err(format!(
                    "node 0's MUNGE credential is of uid {}, not this run's uid {}",
                    d.uid,
                    m.uid()
                ));
            }
            let Some(server_share) = hs.munge_share(SERVER, &d.payload) else {
                return Err(
                    "node 0's MUNGE credential is not for this handshake (another run, node or challenge)"
                        .into(),
                );
            };
            let share = random32().map_err(|e| e.to_string())?;
            let proof = m
                .encode(&hs.munge_payload(CLIENT, &share))
                .map_err(|e| format!("munged would not make this node's credential: {e}"))?;
            Ok(Answer::Prove {
                proof,
                session: hs.munge_session(&server_share, &share),
            })
        }
        (other, _, _) => Err(format!(
            "node 0 asks for authentication `{other}`, which this accel-launch does not speak"
        )),
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
        // Set but empty: too short (the variable), or no file (the file's variable).
        let e = Secret::from_env(Some(""), None).unwrap_err().to_string();
        assert!(
            e.contains("ACCEL_LAUNCH_SECRET") && e.contains("(it has 0)"),
            "{e}"
        );
        let e = Secret::from_env(None, Some("")).unwrap_err().to_string();
        assert!(
            e.contains("ACCEL_LAUNCH_SECRET_FILE") && e.contains("names no file"),
            "{e}"
        );
    }
}
