//! The straggler watch of one attempt (`--straggler_threshold`): this node's ranks sampled window
//! after window ([`straggler::Sampler`]), each window judged ([`straggler::Judge`]) and what it says
//! printed on stderr. It never stops the run.

use std::io::Write;

use super::options::Options;
use crate::launch::hang::Live;
use crate::launch::straggler::{self, Finding};

pub(super) struct StragglerWatch {
    sampler: straggler::Sampler,
    judge: straggler::Judge,
}

impl StragglerWatch {
    /// The watch, when the run asks for one and py-spy was found (the launcher warned otherwise).
    pub(super) fn new(
        opts: &Options,
        world_size: u32,
        local_ranks: usize,
        host: &str,
    ) -> Option<StragglerWatch> {
        let s = opts.straggler?;
        let py_spy = opts.py_spy.clone()?;
        Some(StragglerWatch {
            sampler: straggler::Sampler::new(py_spy, s.window, local_ranks, host),
            judge: straggler::Judge::new(s.threshold, world_size),
        })
    }

    /// Collects a window that ended (and starts the next), and prints what its judgement says.
    pub(super) fn tick(&mut self, opts: &Options, live: &[Live]) {
        let Some(window) = self.sampler.poll(live) else {
            return;
        };
        log::debug!("straggler window: {window:?}");
        for e in self.judge.window(&window) {
            let _ = writeln!(std::io::stderr(), "{}: {e}", opts.tool);
        }
    }

    /// Every rank named so far.
    pub(super) fn findings(&self) -> Vec<Finding> {
        self.judge.history().to_vec()
    }
}
