//! Nothing a run started outlives it: the check, in one place. The launch fixtures
//! (tests/fixtures/launch/*.py) record the pid of every rank in `DIR/pid.*` and of every child a rank
//! starts in `DIR/gc.*`; a test waits, within a bound, until none of them runs, and kills and names
//! what is left.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use super::alive;

/// Every pid a run recorded in `dir` (`pid.*` of its ranks, `gc.*` of their children).
pub fn recorded(dir: &Path) -> Vec<i32> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().to_string_lossy().into_owned();
            (name.starts_with("pid.") || name.starts_with("gc."))
                .then(|| std::fs::read_to_string(e.path()).ok()?.trim().parse().ok())
                .flatten()
        })
        .collect()
}

/// Waits until none of `pids` runs, at most `limit`: the ones still running then, killed (an empty
/// list when every one ended in time).
pub fn survivors(pids: &[i32], limit: Duration) -> Vec<i32> {
    let t = Instant::now();
    loop {
        let left: Vec<i32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        if left.is_empty() || t.elapsed() > limit {
            for p in &left {
                super::proc::kill_tree(*p);
            }
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every pid the run recorded in `dir` (at least `at_least` of them) is gone within `limit`;
/// survivors are killed, then reported naming `what`. Returns when it saw them all gone.
pub fn assert_none_left(dir: &Path, what: &str, at_least: usize, limit: Duration) -> SystemTime {
    let pids = recorded(dir);
    assert!(
        pids.len() >= at_least,
        "{what}: expected at least {at_least} rank and child pids, got {pids:?}"
    );
    let left = survivors(&pids, limit);
    assert!(
        left.is_empty(),
        "{what}: processes of the run survived: {left:?}"
    );
    SystemTime::now()
}
