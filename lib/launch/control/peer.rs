//! One node's side of the control plane's protocol as a pure state machine over bytes: the hello,
//! node 0's challenge checked and answered ([`super::auth`]: secret, MUNGE or none), the join, then
//! every line sealed both ways. It owns no socket, so one process can drive thousands of them over
//! non-blocking connections — `examples/control-sim.rs`, the `--simulate N` benchmark of
//! scripts/bench/control, speaks the real protocol to a real node-0 launcher this way — and a test
//! can play a node that joins and then misbehaves (never reads, never ends).

use super::auth::{answer, nonce, Answer, Credentials, Handshake, Lines, Seal, Way, MAX_LINE};
use super::link::Place;
use super::protocol::{Join, Msg};
use super::ControlError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Hello sent; waiting for node 0's challenge.
    Challenge,
    /// Joined; waiting for `start`.
    Start,
    /// Started: every later message is the run's.
    Running,
    /// Refused or broken: nothing more is read.
    Over,
}

/// What a peer learnt from the bytes it was fed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Every node joined: this node's place in the world.
    Started(Place),
    /// A message of the run (heartbeats included).
    Msg(Msg),
    /// Node 0 refused the join, or this node refused node 0, or the stream broke: why.
    Refused(String),
}

/// One node's connection, without its socket.
pub struct Peer {
    join: Join,
    creds: Credentials,
    client_nonce: String,
    stage: Stage,
    lines: Lines,
    rx: Seal,
    tx: Seal,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("node", &self.join.node)
            .field("stage", &self.stage)
            .finish()
    }
}

impl Peer {
    /// A peer for `join`, proving itself with `creds`, and the hello to write first.
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
                stage: Stage::Challenge,
                lines: Lines::default(),
                rx: Seal::plain(Way::ToNode),
                tx,
            },
            first,
        ))
    }

    /// The line to write for `m` (sealed once authenticated).
    pub fn line(&mut self, m: &Msg) -> Vec<u8> {
        self.tx.seal(&m.json())
    }

    /// Whether the peer has sent its join (node 0 no longer counts it as in its handshake).
    pub fn joined(&self) -> bool {
        matches!(self.stage, Stage::Start | Stage::Running)
    }

    /// Whether the peer has joined and started.
    pub fn running(&self) -> bool {
        self.stage == Stage::Running
    }

    /// Bytes read from node 0: the bytes to write back (the proof and the join) and what happened.
    pub fn feed(&mut self, bytes: &[u8]) -> (Vec<u8>, Vec<Event>) {
        let mut out = Vec::new();
        let mut events = Vec::new();
        if self.stage == Stage::Over {
            return (out, events);
        }
        self.lines.push(bytes);
        loop {
            let line = match self.lines.next(MAX_LINE as usize) {
                Ok(Some(l)) => l,
                Ok(None) => break,
                Err(e) => {
                    self.stage = Stage::Over;
                    events.push(Event::Refused(e.to_string()));
                    break;
                }
            };
            let msg = self
                .rx
                .open(&line)
                .map_err(|e| e.to_string())
                .and_then(|j| serde_json::from_str::<Msg>(j).map_err(|e| e.to_string()));
            match (self.stage, msg) {
                (_, Err(e)) => {
                    self.stage = Stage::Over;
                    events.push(Event::Refused(e));
                }
                (_, Ok(Msg::Reject { reason })) => {
                    self.stage = Stage::Over;
                    events.push(Event::Refused(reason));
                }
                (
                    Stage::Challenge,
                    Ok(Msg::Challenge {
                        run_id,
                        auth,
                        nonce,
                        proof,
                    }),
                ) => match self.challenge(&run_id, &auth, &nonce, proof.as_deref()) {
                    Ok(bytes) => {
                        out.extend(bytes);
                        self.stage = Stage::Start;
                    }
                    Err(why) => {
                        self.stage = Stage::Over;
                        events.push(Event::Refused(why));
                    }
                },
                (
                    Stage::Start | Stage::Running,
                    Ok(Msg::Start {
                        attempt,
                        world_size,
                        rank_offset,
                        ..
                    }),
                ) => {
                    self.stage = Stage::Running;
                    events.push(Event::Started(Place {
                        world_size,
                        rank_offset,
                        attempt,
                    }));
                }
                (Stage::Start | Stage::Running, Ok(m)) => events.push(Event::Msg(m)),
                (_, Ok(m)) => {
                    self.stage = Stage::Over;
                    events.push(Event::Refused(format!("unexpected {m:?}")));
                }
            }
            if self.stage == Stage::Over {
                break;
            }
        }
        (out, events)
    }

    /// Node 0's challenge checked and answered: the proof (when one is asked) and the join.
    fn challenge(
        &mut self,
        run_id: &str,
        auth: &str,
        server_nonce: &str,
        proof: Option<&str>,
    ) -> Result<Vec<u8>, String> {
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
        let mut out = Vec::new();
        if let Answer::Prove { proof, session } = answer(&self.creds, &hs, auth, proof)? {
            out.extend(self.tx.seal(&Msg::Prove { proof }.json()));
            self.tx.key(session.clone());
            self.rx.key(session);
        }
        out.extend(self.tx.seal(&Msg::Join(self.join.clone()).json()));
        Ok(out)
    }
}
