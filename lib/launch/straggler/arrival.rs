//! The straggler by when each rank enters the collectives, from torch's Flight Recorder
//! ([`flight_recorder`](crate::launch::hang::flight_recorder)): the ranks that wait enter each
//! collective early, the straggler last. Two views of it:
//!
//! - [`lateness`]: for each collective every rank entered (the same process group and sequence
//!   number), how long after the first rank each was enqueued (`time_created_ns`), for ranks whose
//!   host threads are late (gloo; tests/fixtures/launch/fr_late.py).
//! - [`collective_share`]: under NCCL every rank's host thread enqueues early and waits at the same
//!   sync points, so enqueue times and stacks look alike; on the device, though, each collective
//!   ends for every rank at once and starts when the rank reaches it, so the straggler's are the
//!   shortest (`duration_ms`, start to end event, with `TORCH_NCCL_ENABLE_TIMING`). A rank's share
//!   of a window spent in its collectives is the device's counterpart of the share of stack samples
//!   waiting in one ([`super::score`]), and as it is one number per rank it goes to node 0 as the
//!   samples do, with no clock to agree on across nodes.
//!
//! Across nodes [`lateness`] needs the ranks' clocks to agree to well under a step (NTP's
//! milliseconds do for steps of tens of milliseconds and more).

use std::collections::BTreeMap;

use crate::launch::hang::flight_recorder::Entry;

/// Fewer timed collectives than this in a window tell too little: the rank has no share for it.
pub const MIN_TIMED: usize = 3;

/// The share of `[since_ns, until_ns]` (the rank's wall clock) that the rank spent in the
/// collectives it enqueued in it, by their device durations; `None` when fewer than [`MIN_TIMED`]
/// of them carry one (gloo, NCCL without timing, a window with no step). Point-to-point operations
/// count too: a rank waits in them as in any other.
pub fn collective_share(entries: &[Entry], since_ns: i64, until_ns: i64) -> Option<f64> {
    let span_ms = (until_ns - since_ns) as f64 / 1e6;
    if span_ms <= 0.0 {
        return None;
    }
    let timed: Vec<f64> = entries
        .iter()
        .filter(|e| {
            e.created_ns
                .is_some_and(|t| (since_ns..until_ns).contains(&t))
        })
        .filter_map(|e| e.duration_ms)
        .filter(|d| d.is_finite() && *d >= 0.0)
        .collect();
    if timed.len() < MIN_TIMED {
        return None;
    }
    Some((timed.iter().sum::<f64>() / span_ms).clamp(0.0, 1.0))
}

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
        // gloo records no device durations: no share, the stacks judge such ranks.
        let (first, last) = span(&dumps[0].1);
        assert_eq!(collective_share(&dumps[0].1, first, last + 1), None);
    }

    fn span(entries: &[Entry]) -> (i64, i64) {
        let t: Vec<i64> = entries.iter().filter_map(|e| e.created_ns).collect();
        (*t.iter().min().unwrap(), *t.iter().max().unwrap())
    }

    #[test]
    fn the_straggler_s_collectives_are_the_shortest_share_of_the_window() {
        // rank 0's entries as torch wrote them, with the durations NCCL with timing would add: 4
        // all_reduces of 100 ms each over the second the test spans; one outside it, one untimed.
        let (_, mut entries) = dump(0);
        let (first, _) = span(&entries);
        for (i, e) in entries.iter_mut().enumerate() {
            e.created_ns = Some(first + i as i64 * 200_000_000);
            e.duration_ms = Some(100.0);
        }
        let until = first + 1_000_000_000;
        let share = collective_share(&entries, first, until).unwrap();
        assert!((share - 0.4).abs() < 1e-9, "{share}");
        entries[3].duration_ms = None;
        let three = collective_share(&entries, first, until).unwrap();
        assert!(
            (three - 0.3).abs() < 1e-9,
            "the untimed one is left out: {three}"
        );
        // From just after the first: two timed ones left, too few.
        assert_eq!(collective_share(&entries, first + 1, until), None);
        assert_eq!(collective_share(&entries, until, first), None);
    }
}
