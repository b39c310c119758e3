//! Spare nodes: launchers beyond the world's node count, admitted and heartbeating but running no
//! ranks, so that a lost node's place is taken at once by one of them instead of the world waiting
//! (up to `--rdzv_timeout`) for a replacement launcher, or failing. On a large job the common
//! failure is one node (a GPU off the bus, a NIC flapping, a kernel panic), and a job sent back to
//! the queue waits hours; with `srun -N N+K` (or `--machine_rank N..`) the allocation already holds
//! the replacement.
//!
//! torchrun's agents beyond `--nnodes MAX` wait for the next rendezvous round and then join the
//! world at any rank (`torch/distributed/elastic/rendezvous/dynamic_rendezvous.py`: the
//! `wait_list`, admitted at the next round); here a spare takes exactly the lost node's node rank
//! and every other node keeps its own, so the ranks' `RANK`s stay where they were.
//!
//! This is the coordinator's bookkeeping of them (pure): who waits, which one takes which lost
//! node, and the run's record of lost nodes and spares that node 0's `--report_json` and its
//! `--exclude_file` get. Node 0's server carries the [`Note`]s out (its stderr, the exclude file).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;

use serde::Serialize;

use super::protocol::{Join, LostNode};

/// Spare joins one run takes, at most: each is kept in the run's record (its report), and a
/// launcher that joins and leaves again and again (or a stranger where joins are not authenticated)
/// must not grow node 0's memory and report without bound.
pub const MAX_SPARE_JOINS: usize = 4096;

/// A spare, as `--report_json`'s `spares` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpareNode {
    /// Its node rank as it joined (`--machine_rank`, or SLURM's node id): at or beyond the world's.
    pub node: u32,
    pub host: String,
    /// The node rank it took, once it took one.
    pub took: Option<u32>,
    /// The attempt it first ran ranks in, once it took a node's place.
    pub attempt: Option<u32>,
    /// Why it left while waiting (lost, or its launcher stopped), if it did.
    pub gone: Option<String>,
}

/// What node 0's `--report_json` says of spares and lost nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Roster {
    pub spares: Vec<SpareNode>,
    pub lost_nodes: Vec<LostNode>,
}

/// Something node 0's launcher says about spares and lost nodes as it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// The world starts with spares waiting: `node (host)` each.
    Started {
        nodes: u32,
        world_size: u64,
        spares: Vec<(u32, String)>,
    },
    /// A spare joined and waits.
    Joined { node: u32, host: String, nodes: u32 },
    /// A node of the world was lost (its host goes to `--exclude_file`).
    Lost(LostNode),
    /// A spare takes a lost node's place for `attempt`.
    Seated {
        spare: u32,
        host: String,
        lost: LostNode,
        attempt: u32,
    },
    /// A waiting spare is gone: lost or stopped; not a failure of the world.
    Gone {
        node: u32,
        host: String,
        why: String,
    },
}

impl Note {
    /// The note's line, after `accel-launch: `.
    pub fn line(&self) -> String {
        match self {
            Note::Started {
                nodes,
                world_size,
                spares,
            } => {
                let names: Vec<String> =
                    spares.iter().map(|(n, h)| format!("node {n} ({h})")).collect();
                format!(
                    "the world starts on {nodes} nodes ({world_size} ranks) with {} spare(s) waiting: {}",
                    spares.len(),
                    names.join(", ")
                )
            }
            Note::Joined { node, host, nodes } => format!(
                "spare node {node} ({host}) joined: it runs no ranks, and takes the place of the first of the world's {nodes} nodes to be lost"
            ),
            Note::Lost(l) => format!(
                "node {} ({}) was lost in attempt {}: {}",
                l.node, l.host, l.attempt, l.why
            ),
            Note::Seated {
                spare,
                host,
                lost,
                attempt,
            } => format!(
                "spare node {spare} ({host}) takes the place of lost node {} ({}) from attempt {attempt}",
                lost.node, lost.host
            ),
            Note::Gone { node, host, why } => {
                format!("spare node {node} ({host}) is gone ({why}); the world goes on without it")
            }
        }
    }
}

/// The spares of one run, and its record of lost nodes.
#[derive(Debug, Default)]
pub struct Spares {
    /// Waiting, by their own node rank: the lowest takes the next lost node.
    waiting: BTreeMap<u32, Join>,
    roster: Roster,
}

impl Spares {
    /// A spare's join; `Err` when another launcher already waits with its node rank.
    pub fn join(&mut self, j: &Join) -> Result<(), String> {
        if self.roster.spares.len() >= MAX_SPARE_JOINS {
            return Err(format!(
                "this run has taken {MAX_SPARE_JOINS} spare joins already and takes no more"
            ));
        }
        if let Some(other) = self.waiting.get(&j.node) {
            return Err(format!(
                "spare node {} is already waiting from host {}, and this launcher (host {}) has the same node rank: give each spare its own --machine_rank",
                j.node, other.host, j.host
            ));
        }
        self.waiting.insert(j.node, j.clone());
        self.roster.spares.push(SpareNode {
            node: j.node,
            host: j.host.clone(),
            took: None,
            attempt: None,
            gone: None,
        });
        Ok(())
    }

    /// Whether `node` is a spare still waiting.
    pub fn waits(&self, node: u32) -> bool {
        self.waiting.contains_key(&node)
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The spares waiting, `(node, host)` each, lowest first.
    pub fn waiting(&self) -> Vec<(u32, String)> {
        self.waiting
            .iter()
            .map(|(n, j)| (*n, j.host.clone()))
            .collect()
    }

    /// A waiting spare left (`why`): its host, when it was one.
    pub fn gone(&mut self, node: u32, why: &str) -> Option<String> {
        let j = self.waiting.remove(&node)?;
        if let Some(s) = self.entry(node) {
            s.gone = Some(why.to_string());
        }
        Some(j.host)
    }

    /// Whether a spare with `ranks` ranks waits.
    pub fn fits(&self, ranks: u32) -> bool {
        self.waiting.values().any(|j| j.local_ranks == ranks)
    }

    /// The spare that takes the place of a lost node of `ranks` ranks in `attempt`: the waiting one
    /// with the lowest node rank among those with as many ranks (the world's other nodes were placed
    /// for that many).
    pub fn take(&mut self, ranks: u32, took: u32, attempt: u32) -> Option<Join> {
        let node = *self.waiting.iter().find(|(_, j)| j.local_ranks == ranks)?.0;
        let j = self.waiting.remove(&node)?;
        if let Some(s) = self.entry(node) {
            s.took = Some(took);
            s.attempt = Some(attempt);
        }
        Some(j)
    }

    /// Records a node of the world lost.
    pub fn lost(&mut self, l: LostNode) {
        self.roster.lost_nodes.push(l);
    }

    pub fn roster(&self) -> &Roster {
        &self.roster
    }

    fn entry(&mut self, node: u32) -> Option<&mut SpareNode> {
        self.roster
            .spares
            .iter_mut()
            .rev()
            .find(|s| s.node == node && s.took.is_none() && s.gone.is_none())
    }
}

/// Appends `host` to the exclude file (one host a line, for `sbatch --exclude=$(paste -sd, PATH)`),
/// unless it already lists it.
pub fn exclude(path: &Path, host: &str) -> std::io::Result<()> {
    let listed = match std::fs::read_to_string(path) {
        Ok(s) => s.lines().any(|l| l.trim() == host),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    };
    if listed || host.is_empty() {
        return Ok(());
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    writeln!(f, "{host}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spare(node: u32, ranks: u32) -> Join {
        Join {
            local_ranks: ranks,
            host: format!("h{node}"),
            ..super::super::fixtures::join(node)
        }
    }

    #[test]
    fn the_lowest_spare_with_as_many_ranks_takes_the_place() {
        let mut s = Spares::default();
        s.join(&spare(3, 2)).unwrap();
        s.join(&spare(4, 4)).unwrap();
        s.join(&spare(5, 4)).unwrap();
        assert!(s
            .join(&spare(4, 4))
            .unwrap_err()
            .contains("already waiting"));
        assert_eq!(s.take(4, 1, 1).map(|j| j.node), Some(4));
        assert_eq!(s.take(8, 1, 1), None);
        assert_eq!(s.gone(3, "lost").as_deref(), Some("h3"));
        assert!(s.waits(5) && !s.waits(3) && !s.waits(4));
        let r = s.roster();
        assert_eq!(
            r.spares
                .iter()
                .map(|x| (x.node, x.took))
                .collect::<Vec<_>>(),
            [(3, None), (4, Some(1)), (5, None)]
        );
        assert_eq!(r.spares[0].gone.as_deref(), Some("lost"));
    }

    #[test]
    fn spare_joins_are_capped() {
        let mut s = Spares::default();
        for n in 0..MAX_SPARE_JOINS as u32 {
            s.join(&spare(2 + n, 1)).unwrap();
            s.gone(2 + n, "left");
        }
        let e = s.join(&spare(2, 1)).unwrap_err();
        assert!(e.contains("takes no more"), "{e}");
        assert_eq!(s.roster().spares.len(), MAX_SPARE_JOINS);
    }

    /// The coordinator with spares: a spare joins at any time, runs no ranks, takes a lost node's
    /// rank without the replacement wait, and a spare lost while waiting changes nothing.
    mod coordinator {
        use std::time::{Duration, Instant};

        use super::super::super::coordinator::{Coordinator, To};
        use super::super::super::protocol::{Join, Msg};
        use super::super::Note;
        use super::spare;

        fn world(nodes: u32, restarts: u32, spares: &[u32]) -> (Coordinator, Vec<(To, Msg)>) {
            world_of(
                Coordinator::new(nodes).join_timeout(Instant::now(), Duration::from_secs(60)),
                nodes,
                restarts,
                spares,
            )
        }

        fn world_of(
            mut c: Coordinator,
            nodes: u32,
            restarts: u32,
            spares: &[u32],
        ) -> (Coordinator, Vec<(To, Msg)>) {
            let j = |n: u32| Join {
                nodes,
                max_restarts: restarts,
                ..spare(n, 2)
            };
            let mut out = Vec::new();
            for s in spares {
                out.extend(c.join(&j(*s)).unwrap());
            }
            for n in 0..nodes {
                out.extend(c.join(&j(n)).unwrap());
            }
            (c, out)
        }

        fn ended(c: &mut Coordinator, node: u32, attempt: u32) -> Vec<(To, Msg)> {
            c.message(node, Msg::Ended { attempt, ok: false })
        }

        #[test]
        fn a_spare_takes_the_lost_nodes_rank_at_once() {
            let (mut c, out) = world(2, 1, &[2]);
            assert_eq!(out[0], (To::Node(2), Msg::Spare { nodes: 2 }));
            // The world starts without the spare.
            let starts: Vec<&To> = out[1..].iter().map(|(t, _)| t).collect();
            assert_eq!(starts, [&To::Node(0), &To::Node(1)]);
            let notes = c.take_notes();
            assert!(
                matches!(&notes[..], [Note::Joined { node: 2, .. }, Note::Started { spares, .. }] if spares == &[(2, "h2".to_string())]),
                "{notes:?}"
            );
            c.closed(1, "its launcher's connection closed");
            // Once node 0's ranks are gone: the spare is seated in rank 1 and attempt 1 starts,
            // with no wait.
            let out = ended(&mut c, 0, 0);
            assert_eq!(
                out[0],
                (
                    To::Seat { spare: 2, node: 1 },
                    Msg::Seated {
                        node: 1,
                        attempt: 1
                    }
                )
            );
            assert!(
                matches!(
                    &out[1..],
                    [
                        (
                            To::Node(0),
                            Msg::Start {
                                attempt: 1,
                                rank_offset: 0,
                                ..
                            }
                        ),
                        (
                            To::Node(1),
                            Msg::Start {
                                attempt: 1,
                                rank_offset: 2,
                                ..
                            }
                        )
                    ]
                ),
                "{out:?}"
            );
            assert!(!c.waiting());
            let r = c.roster();
            assert_eq!(
                (
                    r.lost_nodes[0].node,
                    r.lost_nodes[0].host.as_str(),
                    r.lost_nodes[0].attempt
                ),
                (1, "h1", 0)
            );
            assert_eq!((r.spares[0].took, r.spares[0].attempt), (Some(1), Some(1)));
            // The run ends well; it is done once both have left.
            for n in [0, 1] {
                c.message(
                    n,
                    Msg::Ended {
                        attempt: 1,
                        ok: true,
                    },
                );
            }
            assert!(!c.done());
            c.message(0, Msg::Bye);
            c.message(1, Msg::Bye);
            assert!(c.done());
        }

        /// `--replace_failing_nodes`: node 1's rank failed; the spare takes node 1's place and
        /// node 1's launcher is told the run's end for it. Without a fitting spare, or without the
        /// option, node 1 restarts in place.
        #[test]
        fn replace_failing_nodes_retires_the_failing_node_for_a_spare() {
            use super::super::super::protocol::FailureReport;
            let failed = |c: &mut Coordinator| {
                let f = FailureReport {
                    rank: Some(2),
                    local_rank: Some(0),
                    code: Some(7),
                    what: "exited with status 7".into(),
                    ..FailureReport::lost(1, "h1", "")
                };
                c.message(
                    1,
                    Msg::Failed {
                        attempt: 0,
                        failure: f,
                    },
                );
                ended(c, 1, 0);
                ended(c, 0, 0)
            };
            let c = Coordinator::new(2)
                .join_timeout(Instant::now(), Duration::from_secs(60))
                .replace_failing(true);
            let (mut c, _) = world_of(c, 2, 1, &[2]);
            let out = failed(&mut c);
            let [(To::Node(1), Msg::Finish { failure: Some(f) }), (To::Seat { spare: 2, node: 1 }, _), (To::Node(0), Msg::Start { attempt: 1, .. }), (To::Node(1), Msg::Start { attempt: 1, .. })] =
                &out[..]
            else {
                panic!("{out:?}")
            };
            assert!(
                f.what
                    .ends_with("; node 1 leaves the run, replaced by a spare"),
                "{f:?}"
            );
            assert!(c.roster().lost_nodes[0]
                .why
                .starts_with("its ranks failed: rank 2"));
            // Without the option: the same failure restarts both nodes in place.
            let (mut c, _) = world(2, 1, &[2]);
            let out = failed(&mut c);
            assert!(
                matches!(
                    &out[..],
                    [
                        (To::Node(0), Msg::Start { attempt: 1, .. }),
                        (To::Node(1), Msg::Start { attempt: 1, .. })
                    ]
                ),
                "{out:?}"
            );
        }

        #[test]
        fn a_spare_lost_or_leaving_while_it_waits_is_no_failure() {
            let (mut c, _) = world(2, 1, &[2, 3]);
            c.take_notes();
            assert!(c.closed(2, "no heartbeat for 5 s").is_empty());
            let out = c.message(
                3,
                Msg::Leave {
                    failure: super::super::super::protocol::FailureReport::lost(3, "h3", "x"),
                },
            );
            assert!(
                matches!(&out[..], [(To::Node(3), Msg::Finish { failure: Some(_) })]),
                "{out:?}"
            );
            let notes = c.take_notes();
            assert!(
                matches!(
                    &notes[..],
                    [Note::Gone { node: 2, .. }, Note::Gone { node: 3, .. }]
                ),
                "{notes:?}"
            );
            // No spare left: a lost node is waited for, as without spares.
            c.closed(1, "gone");
            let out = ended(&mut c, 0, 0);
            assert!(matches!(&out[..], [(To::All, Msg::Wait { .. })]), "{out:?}");
            // A spare that joins while the world waits takes the place at once.
            let out = c
                .join(&Join {
                    max_restarts: 1,
                    ..spare(4, 2)
                })
                .unwrap();
            assert!(
                matches!(
                    &out[..],
                    [
                        (To::Node(4), Msg::Spare { .. }),
                        (To::Seat { spare: 4, node: 1 }, _),
                        (To::Node(0), Msg::Start { attempt: 1, .. }),
                        (To::Node(1), Msg::Start { attempt: 1, .. })
                    ]
                ),
                "{out:?}"
            );
        }
    }

    #[test]
    fn the_exclude_file_lists_each_host_once() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("exclude");
        exclude(&p, "n1").unwrap();
        exclude(&p, "n2").unwrap();
        exclude(&p, "n1").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "n1\nn2\n");
    }
}
