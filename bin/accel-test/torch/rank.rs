//! One rank as it runs accel-test's steps: what the coordinator asked every worker to do, whether
//! every check so far passed, and how each check's result reaches the coordinator (one JSON event a
//! line on stdout). The checks ([`super::worker`]) and the probe ([`super::probe`]) both report
//! through it.

use std::time::{Duration, Instant};

use accel::preflight::report::Event;
use accel::preflight::world::{Contract, Device};

use super::TorchError;

/// What the coordinator asked every worker to do.
#[derive(Debug, Clone)]
pub struct WorkerOpts {
    pub timeout: Duration,
    pub device: Device,
    pub checks: Vec<String>,
    pub bench: bool,
    pub max_size: u64,
    pub python: bool,
    /// --probe: what to measure after the checks.
    pub probe: Option<accel::preflight::probe::Parts>,
    /// --probe_threshold, a fraction.
    pub probe_threshold: f64,
}

pub(crate) struct Rank<'a> {
    pub(crate) c: Contract,
    pub(crate) opts: &'a WorkerOpts,
    pub(crate) ok: bool,
}

impl Rank<'_> {
    pub(crate) fn emit(&mut self, name: &str, result: Result<String, String>, ms: f64) -> bool {
        let (ok, detail) = match result {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        self.ok &= ok;
        let _ = accel::tools::print(
            &Event::Check {
                rank: self.c.rank,
                name: name.into(),
                ok,
                detail,
                ms,
            }
            .to_line(),
        );
        ok
    }
}

pub(crate) fn since_ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

pub(crate) fn short(e: &TorchError) -> String {
    // c10d messages can run over many lines; the first says what happened.
    let first = e.message.lines().next().unwrap_or("").trim();
    format!("{}: {first}", e.op)
}
