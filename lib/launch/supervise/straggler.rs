//! The straggler watch of one attempt (`--straggler_threshold`): this node's ranks sampled half
//! window after half window ([`straggler::Sampler`]), each half judged with the one before, a whole
//! window ([`straggler::Judge`]), and what it says printed on stderr. On many nodes every node sends
//! its halves to node 0 over the control plane (node 0's own too), and node 0 judges the world's
//! once it holds a half of every node. NCCL ranks are asked for a Flight Recorder dump at the end
//! of each half ([`Options::flight_recorder_dir`]). It never stops the run.

use std::collections::BTreeMap;
use std::io::Write;

use super::options::Options;
use super::stacks::Here;
use crate::launch::hang::Live;
use crate::launch::straggler::{self, Finding, RankWindow};

pub(super) struct StragglerWatch {
    sampler: straggler::Sampler,
    judge: straggler::Judge,
    num_nodes: u32,
    /// Node 0 of many: each node's latest window since the world's last judgement.
    pending: BTreeMap<u32, Vec<RankWindow>>,
    /// The world's previous half window.
    earlier: Vec<RankWindow>,
}

impl StragglerWatch {
    /// The watch, when the run asks for one and py-spy was found (the launcher warned otherwise).
    pub(super) fn new(
        opts: &Options,
        world_size: u32,
        num_nodes: u32,
        local_ranks: usize,
        host: &str,
    ) -> Option<StragglerWatch> {
        let s = opts.straggler?;
        let py_spy = opts.py_spy.clone()?;
        Some(StragglerWatch {
            // Sampled in halves, judged over the last two ([`straggler::merge`]).
            sampler: straggler::Sampler::new(
                py_spy,
                s.window / 2,
                local_ranks,
                host,
                opts.flight_recorder_dir.clone(),
            ),
            judge: straggler::Judge::new(s.threshold, world_size),
            num_nodes,
            pending: BTreeMap::new(),
            earlier: Vec::new(),
        })
    }

    /// Collects a window that ended (and starts the next); judges and prints what is due.
    pub(super) fn tick(&mut self, opts: &Options, here: Here, live: &[Live]) {
        let own = self.sampler.poll(live);
        let Some(link) = opts.control.as_ref().filter(|_| self.num_nodes > 1) else {
            if let Some(w) = own {
                self.judge_and_print(opts, &w);
            }
            return;
        };
        if let Some(w) = own {
            link.send_windows(here.attempt, w);
        }
        if here.node != 0 {
            return;
        }
        for w in link.poll_windows(here.attempt) {
            if let Some(node) = w.first().map(|r| r.node) {
                self.pending.insert(node, w);
            }
        }
        if self.pending.len() as u32 >= self.num_nodes {
            let world: Vec<RankWindow> = std::mem::take(&mut self.pending)
                .into_values()
                .flatten()
                .collect();
            self.judge_and_print(opts, &world);
        }
    }

    /// Judges the world's last whole window: this half and the one before.
    fn judge_and_print(&mut self, opts: &Options, half: &[RankWindow]) {
        log::debug!("straggler half window: {half:?}");
        let earlier = std::mem::replace(&mut self.earlier, half.to_vec());
        if earlier.is_empty() {
            return;
        }
        for e in self.judge.window(&straggler::merge(&earlier, half)) {
            let _ = writeln!(std::io::stderr(), "{}: {e}", opts.tool);
        }
    }

    /// Every rank named so far (on many nodes, by node 0).
    pub(super) fn findings(&self) -> Vec<Finding> {
        self.judge.history().to_vec()
    }
}
