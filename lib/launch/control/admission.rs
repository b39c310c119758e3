//! Who node 0 lets into the run: one connection's handshake ([`super::auth`]: hello, challenge,
//! proof, join) as a pure state machine. Node 0's server (`server`) feeds it the messages
//! a connection sends and munged's answers, and carries out what it says (send the challenge, seal
//! the connection, hand a join to the `Coordinator`, refuse); it owns no
//! socket and reads no clock, so each stage and each refusal is unit-tested.

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use ring::hmac;

use super::auth::{nonce, random32, Credentials, Handshake, Secret, CLIENT, SERVER};
use super::munge::Decoded;
use super::protocol::{Join, Msg, PROTOCOL};

/// A connection has this long to say hello, prove itself and join.
pub(super) const HANDSHAKE: Duration = Duration::from_secs(10);
/// The longest line of a handshake (a hello, a proof with its MUNGE credential, a join).
pub(super) const HANDSHAKE_LINE: usize = 16 << 10;
/// Refusals printed on node 0 (each with the peer's address) before only an address's or a
/// reason's first is.
const MAX_NOTES: usize = 20;
/// Addresses, and reasons, told apart for the notes, at most each: a flood from many addresses
/// is not a flood of lines either.
const MAX_KINDS: usize = 64;

/// What node 0 admits against: the run's id and how a node proves itself.
pub(super) struct Gate {
    run_id: String,
    auth: Auth,
}

/// How a node proves itself to node 0.
enum Auth {
    Open,
    /// With the run's secret (which takes precedence over MUNGE).
    Secret(Secret),
    /// With a MUNGE credential of this uid.
    Munge {
        uid: u32,
    },
}

impl Gate {
    pub fn new(run_id: String, creds: &Credentials) -> Gate {
        let auth = match (&creds.secret, &creds.munge) {
            (Some(k), _) => Auth::Secret(k.clone()),
            (None, Some(m)) => Auth::Munge { uid: m.uid() },
            (None, None) => Auth::Open,
        };
        Gate { run_id, auth }
    }

    /// The authentication the challenge asks for ([`Credentials::kind`]).
    fn kind(&self) -> &'static str {
        match self.auth {
            Auth::Open => "none",
            Auth::Secret(_) => "hmac",
            Auth::Munge { .. } => "munge",
        }
    }
}

/// Where a connection is in its handshake.
enum Stage {
    /// Waiting for the hello.
    Hello,
    /// With MUNGE: node 0's credential is being made.
    Challenging(Pending),
    /// Waiting for the node's proof.
    Proof(Pending),
    /// With MUNGE: the node's credential is with munged.
    Checking(Pending),
    /// Proven (or no authentication): waiting for the join.
    Join { node: u32 },
    /// Joined or refused: the handshake is over.
    Over,
}

/// A handshake under way.
struct Pending {
    node: u32,
    client_nonce: String,
    server_nonce: String,
    /// Node 0's share of the session key (MUNGE).
    share: [u8; 32],
}

impl Pending {
    fn hs<'a>(&'a self, run_id: &'a str) -> Handshake<'a> {
        Handshake {
            run_id,
            node: self.node,
            client_nonce: &self.client_nonce,
            server_nonce: &self.server_nonce,
        }
    }
}

/// What the server is to do for a connection in its handshake.
pub(super) enum Step {
    /// Send node 0's challenge (unsealed).
    Send(Msg),
    /// The node is proven: every later line both ways is sealed with this key.
    Seal(hmac::Key),
    /// Have munged make node 0's credential of this payload; its answer goes to
    /// [`Admission::encoded`].
    Encode(Vec<u8>),
    /// Have munged decode the node's credential; its answer goes to [`Admission::decoded`].
    Decode(String),
    /// The node joins (the coordinator may still refuse it).
    Join(Join),
    /// Refused: why, as node 0 notes it and tells the node.
    Refuse(String),
}

/// One connection's handshake.
pub(super) struct Admission {
    stage: Stage,
    /// The handshake's deadline.
    until: Instant,
}

impl Admission {
    /// A connection accepted at `now`.
    pub fn new(now: Instant) -> Admission {
        Admission {
            stage: Stage::Hello,
            until: now + HANDSHAKE,
        }
    }

    /// Whether the connection's lines are taken now: not while munged works for it.
    pub fn reading(&self) -> bool {
        matches!(
            self.stage,
            Stage::Hello | Stage::Proof(_) | Stage::Join { .. }
        )
    }

    /// The refusal to note when the handshake is still under way at `now`, past its deadline.
    pub fn expired(&self, now: Instant) -> Option<String> {
        (now >= self.until && !matches!(self.stage, Stage::Over)).then(|| {
            format!(
                "it did not authenticate and join within {} s",
                HANDSHAKE.as_secs()
            )
        })
    }

    /// One line of the connection, opened and parsed (`Err`: why it holds no message); `None`
    /// while the stage takes no line.
    pub fn line(&mut self, gate: &Gate, msg: Result<Msg, String>) -> Option<Step> {
        let step = match (std::mem::replace(&mut self.stage, Stage::Over), msg) {
            (Stage::Hello, Ok(Msg::Hello {
                protocol,
                node,
                nonce,
            })) => self.hello(gate, protocol, node, nonce),
            (Stage::Hello, Ok(Msg::Join(_))) => Step::Refuse(format!(
                "an older protocol (this server speaks {PROTOCOL}): run the same accel-launch on every node"
            )),
            (Stage::Hello, _) => Step::Refuse("it did not say hello".into()),
            (Stage::Proof(p), Ok(Msg::Prove { proof })) => self.proof(gate, p, proof),
            (Stage::Proof(p), _) => refuse_proof(gate, p.node),
            (Stage::Join { node }, Ok(Msg::Join(j))) if j.node == node => Step::Join(j),
            (Stage::Join { .. }, _) => Step::Refuse("it did not join after its hello".into()),
            (stage, _) => {
                self.stage = stage;
                return None;
            }
        };
        Some(step)
    }

    fn hello(&mut self, gate: &Gate, protocol: u32, node: u32, client_nonce: String) -> Step {
        if protocol != PROTOCOL {
            return Step::Refuse(format!(
                "protocol {protocol} (this server speaks {PROTOCOL}): run the same accel-launch on every node"
            ));
        }
        if client_nonce.len() < 32 || client_nonce.len() > 128 {
            return Step::Refuse("a malformed hello".into());
        }
        let (Ok(server_nonce), Ok(share)) = (nonce(), random32()) else {
            return Step::Refuse("no random nonce could be made".into());
        };
        let p = Pending {
            node,
            client_nonce,
            server_nonce,
            share,
        };
        let kind = gate.kind();
        let proof = match &gate.auth {
            Auth::Munge { .. } => {
                let payload = p.hs(&gate.run_id).munge_payload(SERVER, &p.share);
                self.stage = Stage::Challenging(p);
                return Step::Encode(payload);
            }
            Auth::Secret(k) => Some(p.hs(&gate.run_id).server_proof(k)),
            Auth::Open => None,
        };
        let challenge = Msg::Challenge {
            run_id: gate.run_id.clone(),
            auth: kind.into(),
            nonce: p.server_nonce.clone(),
            proof,
        };
        self.stage = if kind == "none" {
            Stage::Join { node }
        } else {
            Stage::Proof(p)
        };
        Step::Send(challenge)
    }

    fn proof(&mut self, gate: &Gate, p: Pending, proof: String) -> Step {
        let Auth::Secret(k) = &gate.auth else {
            self.stage = Stage::Checking(p);
            return Step::Decode(proof);
        };
        let hs = p.hs(&gate.run_id);
        if !hs.client_proof_ok(k, &proof) {
            return refuse_proof(gate, p.node);
        }
        let key = hs.session(k);
        self.stage = Stage::Join { node: p.node };
        Step::Seal(key)
    }

    /// munged made node 0's credential (or would not); `None` unless the handshake waited for it.
    pub fn encoded(&mut self, gate: &Gate, cred: Result<String, String>) -> Option<Step> {
        let Stage::Challenging(p) = std::mem::replace(&mut self.stage, Stage::Over) else {
            return None;
        };
        Some(match cred {
            Ok(cred) => {
                let challenge = Msg::Challenge {
                    run_id: gate.run_id.clone(),
                    auth: "munge".into(),
                    nonce: p.server_nonce.clone(),
                    proof: Some(cred),
                };
                self.stage = Stage::Proof(p);
                Step::Send(challenge)
            }
            Err(e) => Step::Refuse(format!("node 0's munged would not make a credential: {e}")),
        })
    }

    /// munged decoded the node's credential (or refused it); `None` unless the handshake waited
    /// for it.
    pub fn decoded(&mut self, gate: &Gate, decoded: Result<Decoded, String>) -> Option<Step> {
        let Stage::Checking(p) = std::mem::replace(&mut self.stage, Stage::Over) else {
            return None;
        };
        let uid = match gate.auth {
            Auth::Munge { uid } => uid,
            _ => u32::MAX,
        };
        let hs = p.hs(&gate.run_id);
        let checked = decoded
            .map_err(|e| format!("its MUNGE credential was refused by munged: {e}"))
            .and_then(|d| {
                if d.uid != uid {
                    return Err(format!(
                        "its MUNGE credential is of uid {}, not this run's uid {uid}",
                        d.uid
                    ));
                }
                hs.munge_share(CLIENT, &d.payload).ok_or_else(|| {
                    "its MUNGE credential is not for this handshake (another run, node or challenge)"
                        .to_string()
                })
            });
        Some(match checked {
            Ok(client_share) => {
                let key = hs.munge_session(&p.share, &client_share);
                self.stage = Stage::Join { node: p.node };
                Step::Seal(key)
            }
            Err(why) => Step::Refuse(format!("node {} failed authentication: {why}", p.node)),
        })
    }
}

/// A node that did not prove itself as the run's authentication asks.
fn refuse_proof(gate: &Gate, node: u32) -> Step {
    Step::Refuse(match gate.kind() {
        "munge" => format!("node {node} failed authentication: it sent no MUNGE credential"),
        _ => format!(
            "node {node} failed authentication: it does not hold this run's secret (ACCEL_LAUNCH_SECRET)"
        ),
    })
}

/// What node 0 says of the connections it refuses, on stderr: nothing under `--quiet`.
pub(super) struct Notes {
    quiet: bool,
    count: usize,
    /// The addresses and reasons noted so far ([`MAX_KINDS`] of each at most).
    addrs: HashSet<IpAddr>,
    reasons: HashSet<String>,
    /// The refusals not shown, by reason (those of reasons past [`MAX_KINDS`] under "").
    hidden: BTreeMap<String, u64>,
    said_more: bool,
}

impl Notes {
    pub fn new(quiet: bool) -> Notes {
        Notes {
            quiet,
            count: 0,
            addrs: HashSet::new(),
            reasons: HashSet::new(),
            hidden: BTreeMap::new(),
            said_more: false,
        }
    }

    /// The line for a connection refused in its handshake, if any: the first [`MAX_NOTES`], then
    /// one saying that the rest are not shown (a flood of strangers is not a flood of lines), but
    /// still the first of each address and of each reason, so a flood does not hide why a real
    /// node was refused; the rest are counted by reason ([`Notes::summary`]).
    pub fn refused(&mut self, peer: &SocketAddr, why: &str) -> Option<String> {
        self.count += 1;
        if self.quiet {
            return None;
        }
        let new_addr = self.addrs.len() < MAX_KINDS && self.addrs.insert(peer.ip());
        let new_reason = self.reasons.len() < MAX_KINDS
            && !self.reasons.contains(why)
            && self.reasons.insert(why.to_string());
        if self.count <= MAX_NOTES || new_addr || new_reason {
            return Some(format!(
                "accel-launch: note: control plane: refused {peer}: {why}"
            ));
        }
        let reason = if self.reasons.contains(why) { why } else { "" };
        *self.hidden.entry(reason.to_string()).or_default() += 1;
        (!std::mem::replace(&mut self.said_more, true))
            .then(|| "accel-launch: note: control plane: further refusals are not shown".into())
    }

    /// The refusals not shown, counted by reason (the most frequent first), for the run's end.
    pub fn summary(&self) -> Option<String> {
        if self.hidden.is_empty() {
            return None;
        }
        let mut by: Vec<(&String, &u64)> = self.hidden.iter().collect();
        by.sort_by(|a, b| b.1.cmp(a.1));
        let counts: Vec<String> = by
            .iter()
            .map(|(why, n)| match why.as_str() {
                "" => format!("{n} for other reasons"),
                why => format!("{n} as {why}"),
            })
            .collect();
        Some(format!(
            "accel-launch: note: control plane: refusals not shown: {}",
            counts.join("; ")
        ))
    }

    /// The line for a proven node whose join the coordinator refused (it names the node, so it is
    /// always said).
    pub fn join_refused(&mut self, node: u32, peer: &SocketAddr, reason: &str) -> Option<String> {
        self.count += 1;
        (!self.quiet).then(|| {
            format!("accel-launch: note: control plane: refused node {node} from {peer}: {reason}")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::frame::{Lines, Seal, Way};
    use super::super::peer::{Event, Peer, Sender};
    use super::*;

    use super::super::fixtures::{join, secret, RUN};
    const NONCE: &str = "0123456789abcdef0123456789abcdef";

    fn hello(node: u32, nonce: &str) -> Msg {
        Msg::Hello {
            protocol: PROTOCOL,
            node,
            nonce: nonce.into(),
        }
    }

    /// Node 0's end of one connection as the server keeps it: the lines read, both seals.
    struct Conn {
        lines: Lines,
        rx: Seal,
        tx: Seal,
    }

    impl Conn {
        fn new() -> Conn {
            Conn {
                lines: Lines::default(),
                rx: Seal::plain(Way::ToServer),
                tx: Seal::plain(Way::ToNode),
            }
        }
        /// The next message of what the node wrote, opened as the server opens it.
        fn next(&mut self) -> Option<Result<Msg, String>> {
            let line = self.lines.next(HANDSHAKE_LINE).unwrap()?;
            Some(
                self.rx
                    .open(&line)
                    .map_err(|e| e.to_string())
                    .and_then(Msg::parse),
            )
        }
        /// What the admission says of the node's next message, carried out as the server does.
        fn step(&mut self, a: &mut Admission, gate: &Gate) -> Step {
            let msg = self.next().expect("a line from the node");
            let step = a.line(gate, msg).expect("a stage that takes lines");
            if let Step::Seal(key) = &step {
                self.rx.key(key.clone());
                self.tx.key(key.clone());
            }
            step
        }
    }

    /// A node (the library's own peer) and node 0's admission of it, one line at a time: the
    /// node's sending side and the join it sent, once admitted.
    fn admit(gate: &Gate, creds: Credentials) -> Result<(Sender, Join, Conn), String> {
        let (mut peer, first) = Peer::new(join(1), creds).unwrap();
        let mut a = Admission::new(Instant::now());
        let mut conn = Conn::new();
        conn.lines.push(&first);
        let mut sender = None;
        loop {
            match conn.step(&mut a, gate) {
                Step::Send(m) => {
                    let (back, events) = peer.feed(&conn.tx.seal(&m.json()));
                    conn.lines.push(&back);
                    for e in events {
                        match e {
                            Event::Joined(tx) => sender = Some(tx),
                            Event::Over(end) => return Err(format!("the node refused: {end}")),
                            e => panic!("{e:?}"),
                        }
                    }
                }
                Step::Seal(_) => {}
                Step::Join(j) => return Ok((sender.expect("joined"), j, conn)),
                Step::Refuse(why) => return Err(why),
                Step::Encode(_) | Step::Decode(_) => panic!("no MUNGE here"),
            }
        }
    }

    #[test]
    fn a_node_holding_the_runs_secret_is_admitted_and_sealed() {
        let gate = Gate::new(RUN.into(), &secret());
        let (mut tx, j, mut conn) = admit(&gate, secret()).unwrap();
        assert_eq!(j, join(1));
        // Every later line is sealed with the session key both sides derived.
        conn.lines.push(&tx.line(&Msg::Hb));
        assert_eq!(conn.next(), Some(Ok(Msg::Hb)));
        // Without authentication, no proof is asked and the join comes unsealed.
        let open = Gate::new(RUN.into(), &Credentials::default());
        let (_, j, _) = admit(&open, Credentials::default()).unwrap();
        assert_eq!(j, join(1));
    }

    #[test]
    fn a_node_without_the_runs_secret_is_refused() {
        let gate = Gate::new(RUN.into(), &secret());
        let other = Credentials {
            secret: Some(Secret::new(b"0123456789abcdef-another-one")),
            munge: None,
        };
        // The node itself refuses a node 0 that cannot prove the secret it holds.
        let Err(e) = admit(&gate, other) else {
            panic!("admitted")
        };
        assert!(
            e.starts_with("the node refused: node 0 could not prove it holds this run's secret"),
            "{e}"
        );
        // A node that sends a proof not made with the run's secret.
        let mut a = Admission::new(Instant::now());
        let Some(Step::Send(Msg::Challenge { auth, proof, .. })) =
            a.line(&gate, Ok(hello(1, NONCE)))
        else {
            panic!("no challenge")
        };
        assert_eq!((auth.as_str(), proof.is_some()), ("hmac", true));
        let Some(Step::Refuse(why)) = a.line(
            &gate,
            Ok(Msg::Prove {
                proof: "00".repeat(32),
            }),
        ) else {
            panic!("not refused")
        };
        assert_eq!(
            why,
            "node 1 failed authentication: it does not hold this run's secret (ACCEL_LAUNCH_SECRET)"
        );
        // A node that skips its proof.
        let mut a = Admission::new(Instant::now());
        a.line(&gate, Ok(hello(1, NONCE)));
        assert!(matches!(
            a.line(&gate, Ok(Msg::Join(join(1)))),
            Some(Step::Refuse(why)) if why.ends_with("does not hold this run's secret (ACCEL_LAUNCH_SECRET)")
        ));
    }

    #[test]
    fn a_stranger_is_refused_at_each_stage_with_why() {
        let open = Gate::new(RUN.into(), &Credentials::default());
        let refused = |msgs: Vec<Result<Msg, String>>| {
            let mut a = Admission::new(Instant::now());
            let mut last = None;
            for m in msgs {
                last = a.line(&open, m);
            }
            match last {
                Some(Step::Refuse(why)) => why,
                _ => panic!("not refused"),
            }
        };
        assert_eq!(refused(vec![Ok(Msg::Hb)]), "it did not say hello");
        assert_eq!(
            refused(vec![Err("expected value at line 1 column 1".into())]),
            "it did not say hello"
        );
        assert_eq!(
            refused(vec![Ok(Msg::Join(join(1)))]),
            format!("an older protocol (this server speaks {PROTOCOL}): run the same accel-launch on every node")
        );
        let old = Msg::Hello {
            protocol: PROTOCOL - 1,
            node: 1,
            nonce: NONCE.into(),
        };
        assert_eq!(
            refused(vec![Ok(old)]),
            format!(
                "protocol {} (this server speaks {PROTOCOL}): run the same accel-launch on every node",
                PROTOCOL - 1
            )
        );
        assert_eq!(refused(vec![Ok(hello(1, "short"))]), "a malformed hello");
        assert_eq!(
            refused(vec![Ok(hello(1, NONCE)), Ok(Msg::Join(join(2)))]),
            "it did not join after its hello"
        );
    }

    #[test]
    fn a_munge_handshake_waits_for_munged_both_ways_and_checks_the_credential() {
        let gate = Gate {
            run_id: RUN.into(),
            auth: Auth::Munge { uid: 1000 },
        };
        // Node 0's credential is munged's to make; no line is taken meanwhile.
        let start = |a: &mut Admission| {
            let Some(Step::Encode(payload)) = a.line(&gate, Ok(hello(1, NONCE))) else {
                panic!("no credential asked for")
            };
            assert!(!a.reading());
            assert!(a.line(&gate, Ok(Msg::Hb)).is_none());
            let Some(Step::Send(Msg::Challenge {
                auth, nonce, proof, ..
            })) = a.encoded(&gate, Ok("node-0-cred".into()))
            else {
                panic!("no challenge")
            };
            assert_eq!(
                (auth.as_str(), proof.as_deref()),
                ("munge", Some("node-0-cred"))
            );
            assert!(a.reading());
            // The node's credential goes to munged too.
            assert!(matches!(
                a.line(&gate, Ok(Msg::Prove { proof: "node-1-cred".into() })),
                Some(Step::Decode(c)) if c == "node-1-cred"
            ));
            assert!(!a.reading());
            (payload, nonce)
        };
        let mut a = Admission::new(Instant::now());
        let (payload, server_nonce) = start(&mut a);
        let hs = Handshake {
            run_id: RUN,
            node: 1,
            client_nonce: NONCE,
            server_nonce: &server_nonce,
        };
        assert!(
            hs.munge_share(SERVER, &payload).is_some(),
            "node 0's payload binds this handshake"
        );
        let share = [7u8; 32];
        let ours = Decoded {
            uid: 1000,
            payload: hs.munge_payload(CLIENT, &share),
        };
        assert!(matches!(a.decoded(&gate, Ok(ours)), Some(Step::Seal(_))));
        assert!(matches!(
            a.line(&gate, Ok(Msg::Join(join(1)))),
            Some(Step::Join(j)) if j == join(1)
        ));
        // munged's answers for a connection that no longer waits for them change nothing.
        assert!(a.encoded(&gate, Ok("late".into())).is_none());
        let refusal = |decoded: Result<Decoded, String>| {
            let mut a = Admission::new(Instant::now());
            start(&mut a);
            match a.decoded(&gate, decoded) {
                Some(Step::Refuse(why)) => why,
                _ => panic!("not refused"),
            }
        };
        assert_eq!(
            refusal(Ok(Decoded {
                uid: 0,
                payload: hs.munge_payload(CLIENT, &share),
            })),
            "node 1 failed authentication: its MUNGE credential is of uid 0, not this run's uid 1000"
        );
        assert_eq!(
            refusal(Ok(Decoded {
                uid: 1000,
                payload: hs.munge_payload(SERVER, &share),
            })),
            "node 1 failed authentication: its MUNGE credential is not for this handshake (another run, node or challenge)"
        );
        assert_eq!(
            refusal(Err("Expired credential".into())),
            "node 1 failed authentication: its MUNGE credential was refused by munged: Expired credential"
        );
        let mut a = Admission::new(Instant::now());
        a.line(&gate, Ok(hello(1, NONCE)));
        assert!(matches!(
            a.encoded(&gate, Err("Socket communication error".into())),
            Some(Step::Refuse(why)) if why == "node 0's munged would not make a credential: Socket communication error"
        ));
        let mut a = Admission::new(Instant::now());
        a.line(&gate, Ok(hello(1, NONCE)));
        a.encoded(&gate, Ok("node-0-cred".into()));
        assert!(matches!(
            a.line(&gate, Ok(Msg::Hb)),
            Some(Step::Refuse(why)) if why == "node 1 failed authentication: it sent no MUNGE credential"
        ));
    }

    #[test]
    fn a_handshake_has_ten_seconds() {
        let t0 = Instant::now();
        let a = Admission::new(t0);
        assert_eq!(a.expired(t0 + Duration::from_millis(9_999)), None);
        assert_eq!(
            a.expired(t0 + HANDSHAKE).as_deref(),
            Some("it did not authenticate and join within 10 s")
        );
    }

    /// A flood's refusals past the bound do not hide a real node's: the first of each address and
    /// of each reason is still said; the rest are counted by reason.
    #[test]
    fn past_the_bound_each_address_and_each_reason_is_still_noted_once() {
        let flood: SocketAddr = "10.0.0.9:40000".parse().unwrap();
        let mut notes = Notes::new(false);
        let shown = (0..100)
            .filter_map(|_| notes.refused(&flood, "it did not say hello"))
            .count();
        assert_eq!(shown, MAX_NOTES + 1);
        let node: SocketAddr = "10.0.0.2:50000".parse().unwrap();
        let why = "node 1 failed authentication: it does not hold this run's secret (ACCEL_LAUNCH_SECRET)";
        assert_eq!(
            notes.refused(&node, why).as_deref(),
            Some("accel-launch: note: control plane: refused 10.0.0.2:50000: node 1 failed authentication: it does not hold this run's secret (ACCEL_LAUNCH_SECRET)")
        );
        assert_eq!(notes.refused(&node, why), None);
        // A new reason from the flood's address is said once too.
        assert!(notes.refused(&flood, "a malformed hello").is_some());
        assert_eq!(notes.refused(&flood, "a malformed hello"), None);
        // Past MAX_KINDS addresses and reasons, only counts.
        for i in 0..200u32 {
            let peer = SocketAddr::from(([10, 1, (i >> 8) as u8, i as u8], 1));
            notes.refused(&peer, &format!("reason {i}"));
        }
        assert_eq!(
            notes.summary().as_deref(),
            Some("accel-launch: note: control plane: refusals not shown: 138 for other reasons; 80 as it did not say hello; 1 as a malformed hello; 1 as node 1 failed authentication: it does not hold this run's secret (ACCEL_LAUNCH_SECRET)")
        );
    }

    #[test]
    fn refusals_are_noted_up_to_a_bound_and_not_at_all_under_quiet() {
        let peer: SocketAddr = "10.0.0.9:40000".parse().unwrap();
        let mut notes = Notes::new(false);
        assert_eq!(
            notes.refused(&peer, "it did not say hello").as_deref(),
            Some("accel-launch: note: control plane: refused 10.0.0.9:40000: it did not say hello")
        );
        assert_eq!(
            notes.join_refused(1, &peer, "--max_restarts 5 differs").as_deref(),
            Some("accel-launch: note: control plane: refused node 1 from 10.0.0.9:40000: --max_restarts 5 differs")
        );
        let shown: Vec<String> = (2..30).filter_map(|_| notes.refused(&peer, "x")).collect();
        assert_eq!(shown.len(), MAX_NOTES - 2 + 1);
        assert_eq!(
            shown.last().map(String::as_str),
            Some("accel-launch: note: control plane: further refusals are not shown")
        );
        // A proven node's refusal names the node: said past the bound too.
        assert!(notes.join_refused(1, &peer, "x").is_some());
        assert_eq!(
            notes.summary().as_deref(),
            Some("accel-launch: note: control plane: refusals not shown: 10 as x")
        );
        let mut quiet = Notes::new(true);
        assert_eq!(quiet.refused(&peer, "it did not say hello"), None);
        assert_eq!(quiet.join_refused(1, &peer, "x"), None);
    }
}
