//! The straggler by when each rank enters the collectives, from torch's Flight Recorder
//! ([`flight_recorder`](crate::launch::hang::flight_recorder)): the ranks that wait enter each collective early, the straggler last, so
//! for each collective every rank entered (the same process group and sequence number) each rank's
//! lateness is how long after the first rank it was enqueued (`time_created_ns`). This is what
//! names a slow GPU under NCCL, where every rank's host thread waits at the same points and the
//! stacks look alike. Not wired into the run yet: it is the pure part, unit-tested on dumps written
//! by torch (tests/fixtures/launch/fr_late.py). Across nodes the ranks' clocks must agree to well
//! under a step (NTP's milliseconds do for steps of tens of milliseconds and more).

use std::collections::BTreeMap;

use crate::launch::hang::flight_recorder::Entry;

/// Per rank, the median lateness in milliseconds over the collectives every rank of `dumps`
/// entered; empty when there is no such collective or fewer than two ranks.
pub fn lateness(dumps: &[(u32, Vec<Entry>)]) -> BTreeMap<u32, f64> {
    let mut out = BTreeMap::new();
    if dumps.len() < 2 {
        return out;
    }
    // (group, seq) -> each rank's enqueue time.
    let mut by_op: BTreeMap<(&str, i64), BTreeMap<u32, i64>> = BTreeMap::new();
    for (rank, entries) in dumps {
        for e in entries.iter().filter(|e| !e.p2p) {
            if let Some(t) = e.created_ns {
                by_op
                    .entry((e.group.as_str(), e.seq))
                    .or_default()
                    .insert(*rank, t);
            }
        }
    }
    let mut late: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for times in by_op.values().filter(|t| t.len() == dumps.len()) {
        let Some(first) = times.values().min() else {
            continue;
        };
        for (rank, t) in times {
            late.entry(*rank)
                .or_default()
                .push((t - first) as f64 / 1e6);
        }
    }
    for (rank, mut v) in late {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let m = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        out.insert(rank, m);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::hang::flight_recorder;

    fn dump(rank: u32) -> (u32, Vec<Entry>) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/fixtures/launch/fr_late/dump{rank}"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        (rank, flight_recorder::parse(&bytes).unwrap())
    }

    #[test]
    fn the_rank_that_sleeps_before_each_all_reduce_enters_them_last() {
        // Written by torch 2.13's gloo ranks: rank 1 sleeps 0.2 s before each of 4 all_reduces.
        let dumps = [dump(0), dump(1)];
        assert!(dumps[0].1.iter().all(|e| e.created_ns.is_some()));
        let late = lateness(&dumps);
        assert_eq!(late.len(), 2, "{late:?}");
        assert_eq!(late[&0], 0.0);
        assert!((150.0..400.0).contains(&late[&1]), "{late:?}");
        assert!(lateness(&dumps[..1]).is_empty());
    }
}
