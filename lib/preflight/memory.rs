//! Whether this machine can hold the ranks accel-test is about to start, checked before any starts.
//!
//! Every rank is a process with libtorch and a gloo (or NCCL) process group, and the plan's all_gather
//! and gather checks give each rank outputs that grow with the world. A world far too large for the
//! machine does not fail: it pages libtorch's code in and out for as long as the kernel lets it, and
//! no check, timeout or signal gets through in useful time (300 CPU ranks on 23 GiB ran 844 s without a
//! verdict). So the memory the ranks need is estimated from what a rank measurably takes, and a world
//! that cannot fit is refused with the estimate, naming how many ranks would.
//!
//! The figures are torch 2.13 CPU ranks measured with a memory cgroup's peak anonymous memory
//! (total_rss) over `accel-test --cpu --num_processes N` for N = 2 … 20, fitted as
//! `N × (base + N × per_peer)`: base 183 MiB, per_peer 2.2 MiB; with `--bench`, 3.2 × --max_size more
//! per rank (its all_reduce input, output and gloo's buffer). The estimate rounds them down: it is a
//! floor, and a world refused by it could not have run. CUDA ranks take more host memory (the CUDA
//! context), which the floor leaves out.

use crate::error::{Error, Result};
use crate::exit_status::ExitStatus;

const MIB: u64 = 1 << 20;
const GIB: f64 = (1u64 << 30) as f64;
/// One rank with libtorch loaded and its process group formed.
pub const BASE_PER_RANK: u64 = 180 * MIB;
/// Per rank of the world, in every rank: the plan's all_gather of 1 MiB per rank, and gather.
pub const PER_PEER: u64 = 2 * MIB;
/// `--bench`, per byte of --max_size, in every rank.
pub const BENCH_FACTOR: u64 = 3;

/// The memory the ranks of this machine need, at least.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    pub local_ranks: u64,
    pub world_size: u64,
    pub per_rank: u64,
    pub total: u64,
}

pub fn estimate(local_ranks: usize, world_size: usize, bench_max_size: Option<u64>) -> Estimate {
    let (local_ranks, world_size) = (local_ranks as u64, world_size as u64);
    let per_rank = per_rank(world_size, bench_max_size);
    Estimate {
        local_ranks,
        world_size,
        per_rank,
        total: per_rank.saturating_mul(local_ranks),
    }
}

fn per_rank(world_size: u64, bench_max_size: Option<u64>) -> u64 {
    BASE_PER_RANK
        .saturating_add(PER_PEER.saturating_mul(world_size))
        .saturating_add(bench_max_size.map_or(0, |m| m.saturating_mul(BENCH_FACTOR)))
}

/// Memory available to new processes here: the least of the machine's (MemAvailable) and that left
/// under each memory cgroup limit above this process (v1 or v2), with where the figure comes from.
pub fn available() -> Option<(u64, String)> {
    let mut best: Option<(u64, String)> = None;
    let mut consider = |bytes: u64, what: String| {
        if best.as_ref().is_none_or(|(b, _)| bytes < *b) {
            best = Some((bytes, what));
        }
    };
    if let Some(a) = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| kib_field(&t, "MemAvailable:"))
    {
        consider(a, "MemAvailable in /proc/meminfo".into());
    }
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    for (bytes, what) in cgroup_room(&cgroups) {
        consider(bytes, what);
    }
    best
}

fn kib_field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .map(|k| k * 1024)
}

fn stat_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

fn read_u64(path: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Room left under the memory cgroups of `/proc/self/cgroup`: v1's hierarchical limit (it covers the
/// ancestors), v2's memory.max of the group and each ancestor. Inactive file pages count as free, as
/// the kernel reclaims them first.
fn cgroup_room(proc_self_cgroup: &str) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    for line in proc_self_cgroup.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if controllers.split(',').any(|c| c == "memory") {
            let dir =
                std::path::Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/'));
            let Ok(stat) = std::fs::read_to_string(dir.join("memory.stat")) else {
                continue;
            };
            let (Some(limit), Some(usage)) = (
                stat_field(&stat, "hierarchical_memory_limit"),
                read_u64(&dir.join("memory.usage_in_bytes")),
            ) else {
                continue;
            };
            if limit >= 1 << 60 {
                continue;
            }
            let inactive = stat_field(&stat, "total_inactive_file").unwrap_or(0);
            out.push((
                limit.saturating_sub(usage.saturating_sub(inactive)),
                format!(
                    "the memory cgroup {} (limit {:.1} GiB)",
                    dir.display(),
                    limit as f64 / GIB
                ),
            ));
        } else if controllers.is_empty() {
            // cgroup v2: the group and every ancestor up to the root.
            let root = std::path::Path::new("/sys/fs/cgroup");
            let mut dir = root.join(path.trim_start_matches('/'));
            while dir.starts_with(root) && dir != root {
                let max = std::fs::read_to_string(dir.join("memory.max")).ok();
                if let (Some(max), Some(current)) = (
                    max.as_deref().and_then(|m| m.trim().parse::<u64>().ok()),
                    read_u64(&dir.join("memory.current")),
                ) {
                    let inactive = std::fs::read_to_string(dir.join("memory.stat"))
                        .ok()
                        .and_then(|s| stat_field(&s, "inactive_file"))
                        .unwrap_or(0);
                    out.push((
                        max.saturating_sub(current.saturating_sub(inactive)),
                        format!(
                            "the memory cgroup {} (memory.max {:.1} GiB)",
                            dir.display(),
                            max as f64 / GIB
                        ),
                    ));
                }
                if !dir.pop() {
                    break;
                }
            }
        }
    }
    out
}

/// The most ranks of a world that fit in `room`: this machine's alone when it is the whole world
/// (the world shrinks with it), else at the given world size.
fn fitting(room: u64, world_size: u64, local_ranks: u64, bench: Option<u64>) -> u64 {
    let fits = |n: u64| {
        let world = if world_size == local_ranks {
            n
        } else {
            world_size
        };
        per_rank(world, bench).saturating_mul(n) <= room
    };
    let (mut lo, mut hi) = (0u64, local_ranks);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// Refuses (exit 125, before any rank starts) a world whose ranks here need more memory than there is.
pub fn check(e: &Estimate, bench: Option<u64>, room: Option<(u64, String)>) -> Result<()> {
    let Some((room, source)) = room else {
        return Ok(());
    };
    if e.total <= room {
        return Ok(());
    }
    let fit = fitting(room, e.world_size, e.local_ranks, bench);
    let mib = |b: u64| b / MIB;
    let mut parts = format!(
        "{} MiB for libtorch and its process group, {} MiB for each of the world's {} ranks (the all_gather and gather outputs)",
        mib(BASE_PER_RANK),
        mib(PER_PEER),
        e.world_size
    );
    if let Some(m) = bench {
        parts.push_str(&format!(
            ", {} MiB for --bench at --max_size",
            mib(m * BENCH_FACTOR)
        ));
    }
    let advice = if fit == 0 {
        "not one rank of this world fits: free memory, or check on a larger machine".to_string()
    } else if e.world_size == e.local_ranks {
        format!("at most {fit} ranks fit here (--num_processes {fit}); more ranks need more machines (--num_machines)")
    } else {
        format!("at most {fit} of this world's ranks fit on this machine: spread the world over more machines")
    };
    Err(Error::msg_hint(
        ExitStatus::LauncherFailed,
        format!(
            "{} ranks here need at least {:.1} GiB of memory, but {:.1} GiB is available ({source}); nothing was started",
            e.local_ranks,
            e.total as f64 / GIB,
            room as f64 / GIB,
        ),
        format!(
            "each rank takes at least {} MiB: {parts}; {advice}",
            mib(e.per_rank)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_grows_with_the_world_in_every_rank() {
        let e = estimate(300, 300, None);
        assert_eq!(e.per_rank, 180 * MIB + 300 * 2 * MIB);
        assert_eq!(e.total, 300 * e.per_rank);
        let b = estimate(2, 2, Some(64 * MIB));
        assert_eq!(b.per_rank, 184 * MIB + 192 * MIB);
        // Two machines of 8: every rank holds outputs for all 16.
        assert_eq!(estimate(8, 16, None).per_rank, 212 * MIB);
    }

    #[test]
    fn a_world_that_does_not_fit_is_refused_naming_the_estimate_and_what_fits() {
        let room = 23 * (1u64 << 30);
        let e = estimate(300, 300, None);
        let err = check(
            &e,
            None,
            Some((room, "MemAvailable in /proc/meminfo".into())),
        )
        .unwrap_err();
        assert_eq!(err.exit_status(), ExitStatus::LauncherFailed);
        let msg = err.to_string();
        assert!(
            msg.contains("300 ranks here need at least 228.5 GiB"),
            "{msg}"
        );
        assert!(msg.contains("23.0 GiB is available (MemAvailable"), "{msg}");
        let hint = err.hints().join("\n");
        // 76 × (180 + 152) MiB = 24.6 GiB > 23; 75 × 330 MiB = 24.2 GiB > 23 …: the largest that fits.
        let fit = fitting(room, 300, 300, None);
        assert!(per_rank(fit, None) * fit <= room && per_rank(fit + 1, None) * (fit + 1) > room);
        assert!(hint.contains(&format!("--num_processes {fit}")), "{hint}");
        assert!(check(&estimate(8, 8, None), None, Some((room, String::new()))).is_ok());
        // No figure to compare with: no refusal.
        assert!(check(&e, None, None).is_ok());
    }

    #[test]
    fn cgroup_lines_are_read_for_v1_and_v2() {
        // Paths that do not exist give no figure (and no error).
        assert!(cgroup_room("4:memory:/no/such/group\n0::/no/such/group\n").is_empty());
        assert_eq!(stat_field("cache 5\ntotal_rss 7\n", "total_rss"), Some(7));
        assert_eq!(
            kib_field("MemTotal: 10 kB\nMemAvailable:    4 kB\n", "MemAvailable:"),
            Some(4096)
        );
    }
}
