//! The straggler watch's Flight Recorder, for NCCL ranks: their host threads wait at the same sync
//! points, so stacks do not show a slow GPU, but the device durations of their collectives do
//! ([`arrival::collective_share`]). With the watch on, the ranks get the trace buffer, per-collective
//! timing and a debug-info pipe ([`env`]); at the end of each half window the launcher asks every
//! rank that made a pipe (only NCCL ranks do) for one dump and reads from it the share of the half
//! window its collectives took ([`shares`]). Names and trigger as torch 2.13 reads them:
//! `TORCH_FR_BUFFER_SIZE` (or `TORCH_NCCL_TRACE_BUFFER_SIZE`, torch/csrc/distributed/c10d/FlightRecorder.hpp),
//! `TORCH_NCCL_ENABLE_TIMING` (start events, so that each collective has a duration) and `DumpPipe`
//! (ProcessGroupNCCL.hpp: the default group's rank makes the fifo `TORCH_NCCL_DEBUG_INFO_PIPE_FILE<rank>.pipe`
//! and its heartbeat monitor dumps when a write comes), the dump going to `TORCH_FR_DUMP_TEMP_FILE<rank>`
//! (DebugInfoWriter). The pipe and dump paths are the hang watch's ([`autopsy::flight_recorder_env`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::arrival;
use crate::env_vars;
use crate::launch::hang::{autopsy, flight_recorder};

/// How long the ranks get to write their dumps once asked: their heartbeat monitor polls the pipe
/// about once a second, and a dump of 2000 entries with their stacks is a few MiB.
pub const DUMP_WAIT: Duration = Duration::from_secs(5);

/// The ranks' variables for the straggler watch, its dumps under `dir` (set where the user did not).
pub fn env(dir: &Path) -> Vec<(&'static str, String)> {
    let mut v: Vec<(&'static str, String)> = autopsy::flight_recorder_env(Some(dir))
        .into_iter()
        // Dumping on a watchdog timeout is the hang watch's business.
        .filter(|(name, _)| *name != env_vars::TORCH_NCCL_DUMP_ON_TIMEOUT)
        .collect();
    v.push((env_vars::TORCH_NCCL_ENABLE_TIMING, "1".into()));
    v
}

/// Nanoseconds since the epoch, the clock of the Flight Recorder's `time_created_ns`.
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Asks each of `ranks` that has a pipe in `dir` for a dump, waits up to `wait` for them, and gives
/// each rank whose dump came the share of `[since_ns, now]` its collectives took. The last dump is
/// removed before asking and this one after reading, so that only a new one is read (here, and by
/// the hang watch, which shares the directory when it has one).
pub fn shares(dir: &Path, ranks: &[u32], since_ns: i64, wait: Duration) -> BTreeMap<u32, f64> {
    let until_ns = now_ns();
    let mut asked: Vec<(u32, std::path::PathBuf)> = Vec::new();
    for &rank in ranks {
        if !autopsy::flight_recorder_pipe(dir, rank).exists() {
            continue;
        }
        let _ = std::fs::remove_file(autopsy::flight_recorder_file(dir, rank));
        if let Some(path) = autopsy::ask_flight_recorder(dir, rank) {
            asked.push((rank, path));
        }
    }
    let mut out = BTreeMap::new();
    let until = Instant::now() + wait;
    while !asked.is_empty() {
        // A dump being written does not parse yet: it is read again at the next look.
        asked.retain(|(rank, path)| match flight_recorder::read(path) {
            Ok(entries) => {
                let _ = std::fs::remove_file(path);
                if let Some(s) = arrival::collective_share(&entries, since_ns, until_ns) {
                    out.insert(*rank, s);
                }
                false
            }
            Err(_) => true,
        });
        if asked.is_empty() || Instant::now() >= until {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for (rank, _) in &asked {
        log::debug!("straggler: rank {rank}'s Flight Recorder dump did not come within {wait:?}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// A stand-in for an NCCL rank's heartbeat monitor: makes the fifo, and once a write comes
    /// writes `dump` (half of it first, then the rest, as a writer in progress would) to the dump path.
    fn rank_with_pipe(dir: &Path, rank: u32, dump: Vec<u8>) -> std::thread::JoinHandle<()> {
        let pipe = autopsy::flight_recorder_pipe(dir, rank);
        let c = std::ffi::CString::new(pipe.to_string_lossy().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let out = autopsy::flight_recorder_file(dir, rank);
        // Open before the launcher writes, as the rank does when it makes the pipe.
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&pipe)
            .unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 16];
            let until = Instant::now() + Duration::from_secs(10);
            while !matches!(f.read(&mut buf), Ok(n) if n > 0) {
                assert!(Instant::now() < until, "nobody wrote to the pipe");
                std::thread::sleep(Duration::from_millis(20));
            }
            let half = dump.len() / 2;
            std::fs::write(&out, &dump[..half]).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            std::fs::write(&out, &dump).unwrap();
        })
    }

    fn fixture(rank: u32) -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/fixtures/launch/fr_late/dump{rank}"));
        std::fs::read(path).unwrap()
    }

    #[test]
    fn one_dump_per_window_from_the_ranks_with_a_pipe_read_once_complete() {
        let dir = tempfile::tempdir().unwrap();
        // Rank 0 has a pipe and answers with a real dump (torch 2.13, gloo); rank 1 has no pipe
        // (not NCCL) and a stale dump that must stay unread; rank 2 has a pipe nobody reads.
        let answer = rank_with_pipe(dir.path(), 0, fixture(0));
        let stale = autopsy::flight_recorder_file(dir.path(), 1);
        std::fs::write(&stale, fixture(1)).unwrap();
        std::fs::write(
            autopsy::flight_recorder_file(dir.path(), 0),
            b"last window's",
        )
        .unwrap();
        let entries = flight_recorder::parse(&fixture(0)).unwrap();
        let first = entries.iter().filter_map(|e| e.created_ns).min().unwrap();
        let t0 = Instant::now();
        let got = shares(dir.path(), &[0, 1, 2], first, Duration::from_secs(5));
        answer.join().unwrap();
        // gloo's entries carry no device durations: the dump is read, and gives no share.
        assert!(got.is_empty(), "{got:?}");
        assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
        assert!(
            !autopsy::flight_recorder_file(dir.path(), 0).exists(),
            "read, then removed"
        );
        assert!(stale.exists(), "a rank without a pipe is not asked");
    }

    #[test]
    fn the_env_times_collectives_and_leaves_timeouts_to_the_hang_watch() {
        let env = env(Path::new("/d"));
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("TORCH_NCCL_ENABLE_TIMING"), Some("1"));
        assert_eq!(get("TORCH_FR_BUFFER_SIZE"), Some("2000"));
        assert_eq!(get("TORCH_FR_DUMP_TEMP_FILE"), Some("/d/flight_recorder_"));
        assert_eq!(get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE"), Some("/d/fr_pipe_"));
        assert_eq!(get("TORCH_NCCL_DUMP_ON_TIMEOUT"), None);
    }
}
