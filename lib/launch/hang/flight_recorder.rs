//! torch's Flight Recorder dumps, read back for the hang verdict: each rank's record of the
//! collectives it enqueued (process group, sequence number, op, sizes, where in the user's code), and
//! which rank never entered the collective the others are in; the straggler watch reads them too, for
//! when each rank entered its collectives ([`crate::launch::straggler::arrival`]). The dumps are what
//! `torch._C._distributed_c10d._dump_fr_trace()` returns (pickled dicts of plain values: `entries`,
//! `pg_status`, `version`), written by NCCL ranks to `TORCH_FR_DUMP_TEMP_FILE<rank>` on their
//! watchdog's timeout or when the launcher writes to their debug-info pipe
//! (torch/csrc/distributed/c10d/FlightRecorder.cpp). They are read with the safe unpickler: nothing
//! in a dump is executed. The analysis follows what `torch.distributed.flight_recorder.fr_trace`
//! reports first: per process group, the highest collective sequence number each rank reached.

use std::collections::BTreeMap;
use std::path::Path;

use crate::merge::pickle::{self, Globals, Id, Node, Pickle};

/// Dumps larger than this are not read (2000 entries with their stacks are a few MiB).
const MAX_DUMP: u64 = 64 << 20;

/// One collective a rank enqueued.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The process group: its id and description, e.g. `0 (default_pg)`.
    pub group: String,
    pub seq: i64,
    /// `gloo:all_reduce`, `nccl:broadcast`, …
    pub op: String,
    /// The input sizes and dtypes, e.g. `[[2, 3]] Float`.
    pub shape: String,
    /// `scheduled`, `started` or `completed`.
    pub state: String,
    /// The innermost frame of the user's code, `file.py:LINE`.
    pub at: Option<String>,
    pub p2p: bool,
    /// When the rank enqueued it (`time_created_ns`, the rank's wall clock): the straggler's come
    /// last ([`crate::launch::straggler::arrival`]).
    pub created_ns: Option<i64>,
    /// How long it took on the device, start event to end event (`duration_ms`): NCCL ranks with
    /// `TORCH_NCCL_ENABLE_TIMING`, once the watchdog retired it; gloo records none.
    pub duration_ms: Option<f64>,
}

/// Reads the dump at `path`, refusing one larger than [`MAX_DUMP`].
pub fn read(path: &Path) -> Result<Vec<Entry>, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if meta.len() > MAX_DUMP {
        return Err(format!("larger than {} MiB, not read", MAX_DUMP >> 20));
    }
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    parse(&bytes).map_err(|e| format!("unreadable: {e}"))
}

/// Reads one dump.
pub fn parse(bytes: &[u8]) -> Result<Vec<Entry>, String> {
    let p = pickle::load(bytes, Globals::Plain).map_err(|e| e.to_string())?;
    let entries = p
        .get(p.root, "entries")
        .and_then(|e| p.seq(e))
        .ok_or("no `entries` list: not a Flight Recorder dump")?;
    Ok(entries.iter().filter_map(|&e| entry(&p, e)).collect())
}

fn entry(p: &Pickle, e: Id) -> Option<Entry> {
    let s = |key: &str| p.get(e, key).and_then(|v| p.as_str(v)).map(str::to_string);
    let group = p
        .get(e, "process_group")
        .and_then(|g| p.seq(g))
        .map_or_else(
            || "?".to_string(),
            |g| {
                let part = |i: usize| g.get(i).and_then(|&v| p.as_str(v)).unwrap_or("");
                format!("{} ({})", part(0), part(1))
            },
        );
    let sizes = p.get(e, "input_sizes").and_then(|v| p.seq(v)).map(|list| {
        let shapes: Vec<String> = list
            .iter()
            .map(|&s| {
                let dims: Vec<String> = p
                    .ints(s)
                    .unwrap_or_default()
                    .iter()
                    .map(i64::to_string)
                    .collect();
                format!("[{}]", dims.join(", "))
            })
            .collect();
        format!("[{}]", shapes.join(", "))
    });
    let dtypes = p.get(e, "input_dtypes").and_then(|v| p.seq(v)).map(|list| {
        let names: Vec<&str> = list.iter().filter_map(|&d| p.as_str(d)).collect();
        names.join(",")
    });
    let at = p
        .get(e, "frames")
        .and_then(|f| p.seq(f))
        .and_then(|frames| {
            frames.iter().find_map(|&f| {
                let file = p.get(f, "filename").and_then(|v| p.as_str(v))?;
                let line = p.get(f, "line").and_then(|v| p.as_int(v))?;
                (!super::autopsy::is_library_file(file))
                    .then(|| format!("{}:{line}", file.rsplit('/').next().unwrap_or(file)))
            })
        });
    let p2p = p
        .get(e, "is_p2p")
        .and_then(|v| p.as_int(v))
        .is_some_and(|v| v != 0);
    Some(Entry {
        group,
        seq: p.get(e, "collective_seq_id").and_then(|v| p.as_int(v))?,
        op: s("profiling_name").unwrap_or_else(|| "?".into()),
        shape: format!(
            "{} {}",
            sizes.unwrap_or_default(),
            dtypes.unwrap_or_default()
        )
        .trim()
        .to_string(),
        state: s("state").unwrap_or_default(),
        at,
        p2p,
        created_ns: p.get(e, "time_created_ns").and_then(|v| p.as_int(v)),
        duration_ms: p.get(e, "duration_ms").and_then(|v| match p.node(v) {
            Node::Float(f) => Some(*f),
            Node::Int(i) => Some(*i as f64),
            _ => None,
        }),
    })
}

fn ranks(list: &[u32]) -> String {
    let s: Vec<String> = list.iter().map(u32::to_string).collect();
    format!(
        "{} {}",
        if list.len() == 1 { "rank" } else { "ranks" },
        s.join(",")
    )
}

/// What the dumps say, one line per process group: the collective the furthest ranks entered and
/// the ranks that never entered it, or collectives that do not match at one sequence number, or
/// that every rank is in the same collective. `dumps`: (rank, its entries).
pub fn analyse(dumps: &[(u32, Vec<Entry>)]) -> Vec<String> {
    // group -> rank -> its last collective
    let mut last: BTreeMap<&str, BTreeMap<u32, &Entry>> = BTreeMap::new();
    for (rank, entries) in dumps {
        for e in entries.iter().filter(|e| !e.p2p) {
            let slot = last.entry(&e.group).or_default().entry(*rank).or_insert(e);
            if e.seq > slot.seq {
                *slot = e;
            }
        }
    }
    let mut lines = Vec::new();
    for (group, by_rank) in last {
        let Some(top) = by_rank.values().map(|e| e.seq).max() else {
            continue;
        };
        type Of<'a> = Vec<(&'a u32, &'a &'a Entry)>;
        let (at_top, behind): (Of, Of) = by_rank.iter().partition(|(_, e)| e.seq == top);
        let describe = |e: &Entry| {
            let at =
                e.at.as_deref()
                    .map(|a| format!(" at {a}"))
                    .unwrap_or_default();
            format!("{} {}{at}", e.op, e.shape)
        };
        let mut kinds: BTreeMap<(String, String), Vec<u32>> = BTreeMap::new();
        for (r, e) in &at_top {
            kinds
                .entry((e.op.clone(), e.shape.clone()))
                .or_default()
                .push(**r);
        }
        if kinds.len() > 1 {
            let parts: Vec<String> = at_top
                .iter()
                .map(|(r, e)| format!("rank {r} {}", describe(e)))
                .collect();
            lines.push(format!(
                "process group {group}: collectives do not match at #{top}: {}",
                parts.join("; ")
            ));
            continue;
        }
        let first = at_top[0].1;
        let entered: Vec<u32> = at_top.iter().map(|(r, _)| **r).collect();
        if behind.is_empty() {
            if at_top.iter().all(|(_, e)| e.state == "completed") {
                continue;
            }
            let list: Vec<String> = entered.iter().map(u32::to_string).collect();
            lines.push(format!(
                "process group {group}: every rank with a dump ({}) entered #{top} {}; it has not completed",
                list.join(","),
                describe(first)
            ));
            continue;
        }
        let lagging: Vec<String> = behind
            .iter()
            .map(|(r, e)| format!("rank {r} (its last: #{} {}, {})", e.seq, e.op, e.state))
            .collect();
        lines.push(format!(
            "process group {group}: collective #{top} {} was entered by {}; never by {}",
            describe(first),
            ranks(&entered),
            lagging.join(", ")
        ));
    }
    lines
}

/// Reads `dir/flight_recorder_<rank>` of these ranks, where they exist; the analysis, and a line
/// for each dump that could not be read. Empty when there are no dumps.
pub fn report(dir: &Path, rank_ids: &[u32]) -> Vec<String> {
    let mut dumps = Vec::new();
    let mut problems = Vec::new();
    for &rank in rank_ids {
        let path = dir.join(format!("flight_recorder_{rank}"));
        if !path.exists() {
            continue;
        }
        match read(&path) {
            Ok(entries) => dumps.push((rank, entries)),
            Err(e) => problems.push(format!("{}: {e}", path.display())),
        }
    }
    if dumps.is_empty() && problems.is_empty() {
        return Vec::new();
    }
    let mut lines = analyse(&dumps);
    if lines.is_empty() && !dumps.is_empty() {
        let with: Vec<u32> = dumps.iter().map(|d| d.0).collect();
        lines.push(format!(
            "{} recorded no collective left unfinished",
            ranks(&with)
        ));
    }
    lines.extend(problems);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(seq: i64, op: &str, state: &str) -> Entry {
        Entry {
            group: "0 (default_pg)".into(),
            seq,
            op: op.into(),
            shape: "[[4]] Float".into(),
            state: state.into(),
            at: Some("train.py:57".into()),
            p2p: false,
            created_ns: None,
            duration_ms: None,
        }
    }

    #[test]
    fn names_the_rank_that_never_entered_the_collective() {
        let dumps = vec![
            (
                0,
                vec![
                    e(1, "nccl:all_reduce", "completed"),
                    e(2, "nccl:all_reduce", "started"),
                ],
            ),
            (1, vec![e(1, "nccl:all_reduce", "completed")]),
            (
                2,
                vec![
                    e(1, "nccl:all_reduce", "completed"),
                    e(2, "nccl:all_reduce", "started"),
                ],
            ),
        ];
        assert_eq!(
            analyse(&dumps),
            vec!["process group 0 (default_pg): collective #2 nccl:all_reduce [[4]] Float at train.py:57 was entered by ranks 0,2; never by rank 1 (its last: #1 nccl:all_reduce, completed)"]
        );
    }

    #[test]
    fn mismatched_and_all_waiting() {
        let dumps = vec![
            (0, vec![e(3, "nccl:all_reduce", "started")]),
            (1, vec![e(3, "nccl:broadcast", "started")]),
        ];
        assert!(analyse(&dumps)[0].starts_with(
            "process group 0 (default_pg): collectives do not match at #3: rank 0 nccl:all_reduce"
        ));
        let dumps = vec![
            (0, vec![e(3, "nccl:all_reduce", "started")]),
            (1, vec![e(3, "nccl:all_reduce", "scheduled")]),
        ];
        assert_eq!(
            analyse(&dumps),
            vec!["process group 0 (default_pg): every rank with a dump (0,1) entered #3 nccl:all_reduce [[4]] Float at train.py:57; it has not completed"]
        );
        let done = vec![(0, vec![e(3, "nccl:all_reduce", "completed")])];
        assert!(analyse(&done).is_empty());
    }

    #[test]
    fn garbage_is_refused_and_globals_are_never_allowed() {
        assert!(parse(b"not a pickle").is_err());
        // `cos.system\n(S'true'\ntR.`: a global, refused before anything.
        assert!(parse(b"cos\nsystem\n(S'true'\ntR.").is_err());
    }
}
