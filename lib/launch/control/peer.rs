//! One node's side of the control plane's protocol, as a pure state machine over the bytes read and
//! the time: the hello, node 0's challenge checked and answered ([`super::auth`]: secret, MUNGE or
//! none), the join, the wait for node 0's `start` (bounded by the join timeout and by node 0's
//! silence), then the run's messages. It owns no socket and reads no clock. Every node's launcher
//! drives one over its blocking connection (`link`); one process drives thousands over
//! non-blocking ones — `examples/control-sim.rs`, the `--simulate N` benchmark of
//! scripts/bench/control, speaks the real protocol to a real node-0 launcher this way — and a test
//! can play a node that joins and then misbehaves (never reads, never ends).

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use super::auth::{answer, nonce, Answer, Credentials, Handshake};
use super::frame::{Lines, Seal, Way, MAX_LINE};
use super::protocol::{
    lost_after, why_closed, FailureReport, Join, Msg, Place, HEARTBEAT, NOT_EVERY_NODE,
};
use super::ControlError;

/// How long a node waits for node 0's challenge after its hello (node 0 gives a whole handshake
/// as long).
pub const CHALLENGE_WAIT: Duration = Duration::from_secs(10);

enum Stage {
    /// Hello sent; waiting for node 0's challenge. The sending side is the peer's until the join.
    Challenge { tx: Seal },
    /// Joined; waiting for `start`.
    Start,
    /// Admitted as a spare: waiting, without the join's deadline, to take a lost node's place
    /// (`seat`, once node 0 gave it one) or for the run's end.
    Spare { seat: Option<u32> },
    /// Started: every later message is the run's.
    Running,
    /// Refused, timed out or broken: nothing more is read.
    Over,
}

impl Stage {
    fn name(&self) -> &'static str {
        match self {
            Stage::Challenge { .. } => "challenge",
            Stage::Start => "start",
            Stage::Spare { .. } => "spare",
            Stage::Running => "running",
            Stage::Over => "over",
        }
    }
}

/// What a peer learnt from the bytes it was fed, or from the time.
#[derive(Debug)]
pub enum Event {
    /// The join is sent: what this node sends from now on goes through this. Its heartbeats start
    /// now, not with `start`: node 0 loses a member silent for the loss window, and the other nodes
    /// may join up to the join timeout later.
    Joined(Sender),
    /// Every node joined: this node's place in the world.
    Started(Place),
    /// A message of the run (heartbeats included; a later attempt's `start` too).
    Msg(Msg),
    /// The protocol goes no further on this connection.
    Over(End),
}

/// Why a peer went no further.
#[derive(Debug)]
pub enum End {
    /// Node 0 refused this node, or this node refused node 0: why.
    Refused(String),
    /// The join timeout passed; what node 0 was still waiting for, when it said.
    TimedOut(Option<String>),
    /// A node left the join (a signal): node 0 ended it for every node, with that report.
    Ended(Box<FailureReport>),
    /// Node 0 did not answer the hello (it is not up yet, or dropped the connection before its
    /// challenge): the link connects again while the join timeout lasts.
    Unanswered {
        what: &'static str,
        source: std::io::Error,
    },
    /// The connection broke, or node 0 fell silent, after the join was sent.
    Broken {
        what: &'static str,
        source: std::io::Error,
    },
    /// Once started: node 0 was lost, why (its connection closed, or its heartbeats stopped).
    Lost(String),
    /// A spare: the run ended before it took a node's place, so (`None`: every rank of the world
    /// succeeded).
    Released(Option<Box<FailureReport>>),
}

impl End {
    /// Whether another connection may do better: node 0 had not answered this one's hello.
    pub fn again(&self) -> bool {
        matches!(self, End::Unanswered { .. })
    }

    /// The join's error, for node `node` joining the control plane at `addr` within `timeout`.
    pub fn error(self, node: u32, addr: &str, timeout: Duration) -> ControlError {
        let addr = addr.to_string();
        match self {
            End::Refused(reason) => ControlError::Refused { node, addr, reason },
            End::TimedOut(detail) => ControlError::JoinTimeout {
                node,
                addr,
                secs: timeout.as_secs(),
                detail,
            },
            End::Ended(report) => ControlError::Ended { report },
            End::Unanswered { what, source } | End::Broken { what, source } => ControlError::Io {
                addr,
                what: what.into(),
                source,
            },
            End::Lost(why) => ControlError::Io {
                addr,
                what: WAIT_FOR_START.into(),
                source: std::io::Error::other(why),
            },
            End::Released(Some(report)) => ControlError::Ended { report },
            End::Released(None) => ControlError::Io {
                addr,
                what: WAIT_FOR_START.into(),
                source: std::io::Error::other("the run ended"),
            },
        }
    }
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Refused(why) | End::TimedOut(Some(why)) | End::Lost(why) => f.write_str(why),
            End::TimedOut(None) => f.write_str("the join timed out"),
            End::Ended(report) | End::Released(Some(report)) => f.write_str(&report.headline()),
            End::Released(None) => f.write_str("the run ended well"),
            End::Unanswered { what, source } | End::Broken { what, source } => {
                write!(f, "{what}: {source}")
            }
        }
    }
}

/// What the node does while it waits for `start`, as its errors name it.
const WAIT_FOR_START: &str = "wait for every node to join";

/// The sending side of a joined node's connection: each line sealed as the handshake keyed it.
pub struct Sender(Seal);

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sender(…)")
    }
}

impl Sender {
    /// The line to write for `m` (sealed once authenticated).
    pub fn line(&mut self, m: &Msg) -> Vec<u8> {
        self.0.seal(&m.json())
    }
}

/// One node's connection, without its socket or clock.
pub struct Peer {
    join: Join,
    creds: Credentials,
    client_nonce: String,
    stage: Stage,
    lines: Lines,
    rx: Seal,
    /// When the wait for `start` gives up (`None`: never).
    deadline: Option<Instant>,
    /// Node 0 is lost after a silence this long.
    window: Duration,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("node", &self.join.node)
            .field("stage", &self.stage.name())
            .finish()
    }
}

impl Peer {
    /// A peer for `join`, proving itself with `creds`, and the hello to write first. It waits for
    /// `start` without end, and counts node 0 as lost after [`lost_after`]`(`[`HEARTBEAT`]`)`.
    pub fn new(join: Join, creds: Credentials) -> Result<(Peer, Vec<u8>), ControlError> {
        let client_nonce = nonce()?;
        let mut tx = Seal::plain(Way::ToServer);
        let hello = Msg::Hello {
            protocol: join.protocol,
            node: join.node,
            nonce: client_nonce.clone(),
        };
        let first = tx.seal(&hello.json());
        Ok((
            Peer {
                join,
                creds,
                client_nonce,
                stage: Stage::Challenge { tx },
                lines: Lines::default(),
                rx: Seal::plain(Way::ToNode),
                deadline: None,
                window: lost_after(HEARTBEAT),
            },
            first,
        ))
    }

    /// The join's bounds: every node has joined by `deadline` (the join timeout), and node 0 is
    /// lost after [`lost_after`]`(heartbeat)` of silence. Node 0 says which nodes are missing when
    /// its own join timeout passes: it gets two of its heartbeats beyond `deadline` to say so.
    pub fn until(mut self, deadline: Instant, heartbeat: Duration) -> Peer {
        self.deadline = Some(deadline + heartbeat * 2);
        self.window = lost_after(heartbeat);
        self
    }

    /// How long the next read may wait for node 0: its challenge, or its silence until the join's
    /// deadline or the loss window, whichever comes first.
    pub fn wait(&self, now: Instant) -> Duration {
        match (&self.stage, self.deadline) {
            (Stage::Challenge { .. }, _) => CHALLENGE_WAIT,
            (Stage::Start, Some(d)) => d.saturating_duration_since(now).min(self.window),
            // A spare waits without the join's deadline: only node 0's silence ends its wait.
            _ => self.window,
        }
    }

    /// The time passed: the join's deadline, once past while waiting for `start`, ends it.
    pub fn tick(&mut self, now: Instant) -> Option<End> {
        if matches!(self.stage, Stage::Start) && self.past_deadline(now) {
            self.stage = Stage::Over;
            return Some(End::TimedOut(None));
        }
        None
    }

    fn past_deadline(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| now >= d)
    }

    /// The connection ended (`None`: node 0 closed it) or a read failed, at `now` (a read that
    /// timed out waited [`Peer::wait`]).
    pub fn failed(&mut self, now: Instant, e: Option<std::io::Error>) -> End {
        let late = self.past_deadline(now);
        self.broke(e, late)
    }

    /// The connection's end at this stage; `late`: past the join's deadline.
    fn broke(&mut self, e: Option<std::io::Error>, late: bool) -> End {
        let closed =
            || std::io::Error::new(ErrorKind::UnexpectedEof, "the server closed the connection");
        let timed_out = e
            .as_ref()
            .is_some_and(|e| matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut));
        let end = match (&self.stage, e) {
            (Stage::Challenge { .. }, e) => End::Unanswered {
                what: "authenticate",
                source: e.unwrap_or_else(closed),
            },
            (Stage::Start, _) if timed_out && late => End::TimedOut(None),
            (Stage::Spare { .. }, e) => End::Broken {
                what: "wait as a spare",
                source: match e {
                    Some(e) if timed_out => {
                        std::io::Error::new(e.kind(), why_closed(Some(&e), self.window))
                    }
                    e => e.unwrap_or_else(closed),
                },
            },
            (Stage::Start, Some(e)) if timed_out => End::Broken {
                what: WAIT_FOR_START,
                source: std::io::Error::new(e.kind(), why_closed(Some(&e), self.window)),
            },
            (Stage::Start, e) => End::Broken {
                what: WAIT_FOR_START,
                source: e.unwrap_or_else(closed),
            },
            (Stage::Running | Stage::Over, e) => End::Lost(why_closed(e.as_ref(), self.window)),
        };
        self.stage = Stage::Over;
        end
    }

    /// Bytes read from node 0: the bytes to write back (the proof and the join) and what happened.
    pub fn feed(&mut self, bytes: &[u8]) -> (Vec<u8>, Vec<Event>) {
        let mut out = Vec::new();
        let mut events = Vec::new();
        if matches!(self.stage, Stage::Over) {
            return (out, events);
        }
        self.lines.push(bytes);
        while !matches!(self.stage, Stage::Over) {
            let msg = match self.lines.next(MAX_LINE as usize) {
                Ok(None) => break,
                Ok(Some(line)) => self
                    .rx
                    .open(&line)
                    .map_err(|e| e.to_string())
                    .and_then(Msg::parse),
                Err(e) => Err(e.to_string()),
            };
            match msg {
                Ok(m) => self.on(m, &mut out, &mut events),
                Err(why) => {
                    let e = std::io::Error::new(ErrorKind::InvalidData, why);
                    let end = self.broke(Some(e), false);
                    events.push(Event::Over(end));
                }
            }
        }
        (out, events)
    }

    /// One message from node 0, as the stage takes it.
    fn on(&mut self, m: Msg, out: &mut Vec<u8>, events: &mut Vec<Event>) {
        let over = |peer: &mut Peer, events: &mut Vec<Event>, end| {
            peer.stage = Stage::Over;
            events.push(Event::Over(end));
        };
        match (&self.stage, m) {
            (
                Stage::Challenge { .. },
                Msg::Challenge {
                    run_id,
                    auth,
                    nonce,
                    proof,
                },
            ) => match self.challenge(&run_id, &auth, &nonce, proof.as_deref()) {
                Ok((bytes, sender)) => {
                    out.extend(bytes);
                    self.stage = Stage::Start;
                    events.push(Event::Joined(sender));
                }
                Err(why) => over(self, events, End::Refused(why)),
            },
            (Stage::Challenge { .. }, Msg::Reject { reason }) => {
                over(self, events, End::Refused(reason))
            }
            (Stage::Challenge { .. }, _) => over(
                self,
                events,
                End::Refused("node 0 did not answer the hello".into()),
            ),
            (Stage::Start, m @ Msg::Start { .. }) => {
                if let Some(place) = m.place(self.join.node) {
                    self.stage = Stage::Running;
                    events.push(Event::Started(place));
                }
            }
            (Stage::Start, Msg::Spare { .. }) => {
                self.deadline = None;
                self.stage = Stage::Spare { seat: None };
            }
            (Stage::Spare { .. }, Msg::Seated { node, .. }) => {
                self.stage = Stage::Spare { seat: Some(node) };
            }
            (Stage::Spare { seat: Some(node) }, m @ Msg::Start { .. }) => {
                if let Some(place) = m.place(*node) {
                    self.stage = Stage::Running;
                    events.push(Event::Started(place));
                }
            }
            (Stage::Spare { .. }, Msg::Finish { failure }) => {
                over(self, events, End::Released(failure.map(Box::new)))
            }
            (Stage::Spare { .. }, Msg::Reject { reason }) if reason.starts_with(NOT_EVERY_NODE) => {
                over(self, events, End::TimedOut(Some(reason)))
            }
            (Stage::Spare { .. }, Msg::Reject { reason }) => {
                over(self, events, End::Refused(reason))
            }
            (Stage::Start, Msg::Reject { reason }) if reason.starts_with(NOT_EVERY_NODE) => {
                over(self, events, End::TimedOut(Some(reason)))
            }
            (Stage::Start, Msg::Reject { reason }) => over(self, events, End::Refused(reason)),
            (Stage::Start, Msg::Finish { failure: Some(r) }) => {
                over(self, events, End::Ended(Box::new(r)))
            }
            (Stage::Start | Stage::Spare { .. } | Stage::Running, m) => events.push(Event::Msg(m)),
            (Stage::Over, _) => {}
        }
    }

    /// Node 0's challenge checked and answered: the proof (when one is asked) and the join, and the
    /// sending side, keyed for the rest of the connection.
    fn challenge(
        &mut self,
        run_id: &str,
        auth: &str,
        server_nonce: &str,
        proof: Option<&str>,
    ) -> Result<(Vec<u8>, Sender), String> {
        if run_id != self.join.run_id {
            return Err(format!(
                "node 0 serves run `{run_id}`, this node belongs to run `{}`",
                self.join.run_id
            ));
        }
        let hs = Handshake {
            run_id,
            node: self.join.node,
            client_nonce: &self.client_nonce,
            server_nonce,
        };
        let answer = answer(&self.creds, &hs, auth, proof)?;
        let Stage::Challenge { mut tx } = std::mem::replace(&mut self.stage, Stage::Over) else {
            return Err("node 0 challenged this node twice".into());
        };
        let mut out = Vec::new();
        if let Answer::Prove { proof, session } = answer {
            out.extend(tx.seal(&Msg::Prove { proof }.json()));
            tx.key(session.clone());
            self.rx.key(session);
        }
        out.extend(tx.seal(&Msg::Join(self.join.clone()).json()));
        Ok((out, Sender(tx)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::auth::Secret;
    use super::*;

    use super::super::fixtures::{join, secret, RUN, SECRET};
    const SERVER_NONCE: &str = "fedcba9876543210fedcba9876543210";
    const ADDR: &str = "10.0.0.1:29501";

    /// Node 0's end of the connection, as the test plays it.
    struct Node0 {
        lines: Lines,
        rx: Seal,
        tx: Seal,
        client_nonce: String,
    }

    impl Node0 {
        /// Node 0, having read the node's hello.
        fn new(hello: &[u8]) -> Node0 {
            let mut n = Node0 {
                lines: Lines::default(),
                rx: Seal::plain(Way::ToServer),
                tx: Seal::plain(Way::ToNode),
                client_nonce: String::new(),
            };
            n.lines.push(hello);
            let Some(Msg::Hello { nonce, node: 1, .. }) = n.next() else {
                panic!("no hello")
            };
            n.client_nonce = nonce;
            n
        }
        fn next(&mut self) -> Option<Msg> {
            let line = self.lines.next(MAX_LINE as usize).unwrap()?;
            Some(Msg::parse(self.rx.open(&line).unwrap()).unwrap())
        }
        fn say(&mut self, m: &Msg) -> Vec<u8> {
            self.tx.seal(&m.json())
        }
        fn hs(&self) -> Handshake<'_> {
            Handshake {
                run_id: RUN,
                node: 1,
                client_nonce: &self.client_nonce,
                server_nonce: SERVER_NONCE,
            }
        }
        fn challenge(&mut self, run_id: &str, auth: &str, proof: Option<String>) -> Vec<u8> {
            self.say(&Msg::Challenge {
                run_id: run_id.into(),
                auth: auth.into(),
                nonce: SERVER_NONCE.into(),
                proof,
            })
        }
    }

    fn over(events: Vec<Event>) -> End {
        match events.into_iter().last() {
            Some(Event::Over(end)) => end,
            e => panic!("not over: {e:?}"),
        }
    }

    /// A peer joined to an unauthenticated node 0, its join's deadline 90 s after `t0`.
    fn joined(t0: Instant) -> (Peer, Node0, Sender) {
        let (peer, hello) = Peer::new(join(1), Credentials::default()).unwrap();
        let mut peer = peer.until(t0 + Duration::from_secs(90), HEARTBEAT);
        let mut n0 = Node0::new(&hello);
        assert_eq!(peer.wait(t0), CHALLENGE_WAIT);
        let (back, events) = peer.feed(&n0.challenge(RUN, "none", None));
        n0.lines.push(&back);
        assert_eq!(n0.next(), Some(Msg::Join(join(1))));
        let Some(Event::Joined(tx)) = events.into_iter().next() else {
            panic!("not joined")
        };
        (peer, n0, tx)
    }

    #[test]
    fn a_peer_proves_the_secret_joins_sealed_and_learns_its_place() {
        let (mut peer, hello) = Peer::new(join(1), secret()).unwrap();
        let mut n0 = Node0::new(&hello);
        let k = Secret::new(SECRET);
        let proof = n0.hs().server_proof(&k);
        let (back, events) = peer.feed(&n0.challenge(RUN, "hmac", Some(proof)));
        let [Event::Joined(_)] = &events[..] else {
            panic!("{events:?}")
        };
        // The proof (unsealed), then the join sealed with the session key.
        n0.lines.push(&back);
        let Some(Msg::Prove { proof }) = n0.next() else {
            panic!("no proof")
        };
        assert!(n0.hs().client_proof_ok(&k, &proof));
        let session = n0.hs().session(&k);
        n0.rx.key(session.clone());
        n0.tx.key(session);
        assert_eq!(n0.next(), Some(Msg::Join(join(1))));
        let Some(Event::Joined(mut tx)) = events.into_iter().next() else {
            unreachable!()
        };
        n0.lines.push(&tx.line(&Msg::Hb));
        assert_eq!(n0.next(), Some(Msg::Hb));
        // Node 0's start, and the run's messages after it (a later attempt's start among them).
        let start = |attempt| Msg::Start {
            attempt,
            world_size: 4,
            rank_offset: 2,
            nodes: 2,
            stop_within_ms: None,
        };
        let mut bytes = n0.say(&Msg::Hb);
        bytes.extend(n0.say(&start(0)));
        bytes.extend(n0.say(&Msg::Finish { failure: None }));
        bytes.extend(n0.say(&start(1)));
        let (back, events) = peer.feed(&bytes);
        assert!(back.is_empty());
        let [Event::Msg(Msg::Hb), Event::Started(place), Event::Msg(Msg::Finish { failure: None }), Event::Msg(Msg::Start { attempt: 1, .. })] =
            &events[..]
        else {
            panic!("{events:?}")
        };
        assert_eq!(
            *place,
            Place {
                node: 1,
                world_size: 4,
                rank_offset: 2,
                attempt: 0,
                stop_within: None
            }
        );
        // A line that fails its seal ends the connection.
        let end = over(peer.feed(b"{\"t\":\"hb\"}\n").1);
        assert_eq!(
            end.to_string(),
            "its launcher's connection failed: a line failed its authentication (forged, replayed or altered)"
        );
        assert!(
            peer.feed(&n0.say(&Msg::Hb)).1.is_empty(),
            "nothing more is read"
        );
    }

    #[test]
    fn a_peer_refuses_a_node_0_it_cannot_trust_and_hears_node_0s_refusals() {
        let refused = |challenge: &dyn Fn(&mut Node0) -> Vec<u8>, creds: Credentials| {
            let (mut peer, hello) = Peer::new(join(1), creds).unwrap();
            let mut n0 = Node0::new(&hello);
            let (back, events) = peer.feed(&challenge(&mut n0));
            assert!(back.is_empty(), "no proof, no join");
            let end = over(events);
            assert!(!end.again());
            let e = end.error(1, ADDR, Duration::from_secs(90));
            let ControlError::Refused {
                node: 1, reason, ..
            } = &e
            else {
                panic!("{e:?}")
            };
            reason.clone()
        };
        assert_eq!(
            refused(
                &|n| n.challenge("port:1", "none", None),
                Credentials::default()
            ),
            "node 0 serves run `port:1`, this node belongs to run `port:29501`"
        );
        let forged = |n: &mut Node0| {
            let proof = n
                .hs()
                .server_proof(&Secret::new(b"0123456789abcdef-another-one"));
            n.challenge(RUN, "hmac", Some(proof))
        };
        assert!(refused(&forged, secret())
            .starts_with("node 0 could not prove it holds this run's secret"));
        assert!(refused(&|n| n.challenge(RUN, "none", None), secret())
            .starts_with("node 0 runs without a secret while this node has one"));
        let reject = |n: &mut Node0| {
            n.say(&Msg::Reject {
                reason: "64 connections are already in their handshake".into(),
            })
        };
        assert_eq!(
            refused(&reject, Credentials::default()),
            "64 connections are already in their handshake"
        );
        assert_eq!(
            refused(&|n| n.say(&Msg::Hb), Credentials::default()),
            "node 0 did not answer the hello"
        );
    }

    /// The join's timing with node 0's clock in the test's hands: a node waiting for the others
    /// hears node 0's heartbeats for 30 s (six loss windows) and starts when the last node joins;
    /// its wait ends two heartbeats past the join timeout, or after a loss window of silence.
    #[test]
    fn the_wait_for_start_lasts_the_join_timeout_while_node_0_beats() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let (mut peer, mut n0, _tx) = joined(t0);
        assert_eq!(peer.wait(t0), Duration::from_secs(5), "the loss window");
        for n in (2..=30).step_by(2) {
            assert!(peer.tick(s(n)).is_none(), "at {n} s");
            let (_, events) = peer.feed(&n0.say(&Msg::Hb));
            assert!(matches!(&events[..], [Event::Msg(Msg::Hb)]), "{events:?}");
            assert_eq!(peer.wait(s(n)), Duration::from_secs(5));
        }
        let start = n0.say(&Msg::Start {
            attempt: 0,
            world_size: 4,
            rank_offset: 2,
            nodes: 2,
            stop_within_ms: Some(28_000),
        });
        let (_, events) = peer.feed(&start);
        assert!(
            matches!(&events[..], [Event::Started(Place { stop_within: Some(w), .. })] if *w == Duration::from_secs(28)),
            "{events:?}"
        );
        // Started: the join's deadline no longer applies, only node 0's silence.
        assert!(peer.tick(s(200)).is_none());
        assert_eq!(peer.wait(s(200)), Duration::from_secs(5));
        let end = peer.failed(s(205), Some(ErrorKind::WouldBlock.into()));
        assert_eq!(
            end.to_string(),
            "no heartbeat for 5 s (network cut, or the host is down)"
        );

        // Nobody else joins: the wait ends at 92 s (the join timeout and two heartbeats).
        let (mut peer, _, _) = joined(t0);
        assert_eq!(peer.wait(s(89)), Duration::from_secs(3));
        assert!(peer.tick(s(91)).is_none());
        let end = peer.tick(s(92)).expect("timed out");
        let e = end.error(1, ADDR, Duration::from_secs(90));
        assert!(
            matches!(
                e,
                ControlError::JoinTimeout {
                    node: 1,
                    secs: 90,
                    detail: None,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "node 1 could not join the control plane at 10.0.0.1:29501 within 90 s"
        );
        // A read that timed out at the deadline is the timeout too; before it, node 0's silence.
        let (mut peer, _, _) = joined(t0);
        let end = peer.failed(s(92), Some(ErrorKind::WouldBlock.into()));
        assert!(matches!(end, End::TimedOut(None)), "{end:?}");
        let (mut peer, _, _) = joined(t0);
        let end = peer.failed(s(10), Some(ErrorKind::TimedOut.into()));
        assert!(!end.again());
        let e = end.error(1, ADDR, Duration::from_secs(90));
        assert_eq!(
            e.to_string(),
            "control plane at 10.0.0.1:29501: wait for every node to join"
        );
        let ControlError::Io { source, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(
            source.to_string(),
            "no heartbeat for 5 s (network cut, or the host is down)"
        );
    }

    #[test]
    fn node_0s_join_timeout_or_a_node_leaving_ends_the_wait_with_their_reports() {
        let t0 = Instant::now();
        let (mut peer, mut n0, _) = joined(t0);
        let reason = "not every node joined within 90 s: still waiting for node rank(s) [1]";
        let end = over(
            peer.feed(&n0.say(&Msg::Reject {
                reason: reason.into(),
            }))
            .1,
        );
        let e = end.error(1, ADDR, Duration::from_secs(90));
        let ControlError::JoinTimeout { detail, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(detail.as_deref(), Some(reason));
        let (mut peer, mut n0, _) = joined(t0);
        let report = FailureReport {
            status: Some(130),
            ..FailureReport::lost(2, "h2", "was stopped by SIGINT")
        };
        let end = over(
            peer.feed(&n0.say(&Msg::Finish {
                failure: Some(report.clone()),
            }))
            .1,
        );
        let e = end.error(1, ADDR, Duration::from_secs(90));
        assert_eq!(e.failure(), Some(&report));
    }

    #[test]
    fn only_a_connection_node_0_never_answered_is_tried_again() {
        let t0 = Instant::now();
        let (mut peer, _) = Peer::new(join(1), Credentials::default()).unwrap();
        let end = peer.failed(t0, None);
        assert!(end.again());
        assert_eq!(
            end.to_string(),
            "authenticate: the server closed the connection"
        );
        let (mut peer, _) = Peer::new(join(1), Credentials::default()).unwrap();
        let end = over(peer.feed(b"HTTP/1.1 400 Bad Request\r\n").1);
        assert!(end.again(), "{end}");
        let (mut peer, _, _) = joined(t0);
        let end = peer.failed(t0, None);
        assert!(!end.again());
        assert_eq!(
            end.to_string(),
            "wait for every node to join: the server closed the connection"
        );
        // Once started, node 0's loss.
        let (mut peer, mut n0, _) = joined(t0);
        peer.feed(&n0.say(&Msg::Start {
            attempt: 0,
            world_size: 4,
            rank_offset: 2,
            nodes: 2,
            stop_within_ms: None,
        }));
        let end = peer.failed(t0, None);
        assert_eq!(
            end.to_string(),
            "its launcher's connection closed (the launcher ended or was killed)"
        );
    }
}
