//! A rank that SIGKILL does not end: a process in uninterruptible sleep (a driver after an Xid
//! error, an NFS, Lustre or FUSE read that never returns) or frozen by a cgroup-v1 freezer keeps its
//! signal pending until the kernel lets it go, which may be never. Supervision does not wait for it
//! past [`KILL_WAIT`](super::KILL_WAIT): it names it from /proc (state, wchan, the freezer) and
//! leaves it, as SLURM's `UnkillableStepTimeout` does with a step's processes.

use std::path::Path;

use super::super::control::Unkillable;

/// What /proc says about `pid`, a rank that did not exit after SIGKILL.
pub(super) fn describe(node: u32, host: &str, rank: u32, pid: i32) -> Unkillable {
    let proc = Path::new("/proc").join(pid.to_string());
    let state = std::fs::read_to_string(proc.join("stat"))
        .ok()
        .and_then(|s| {
            // `pid (comm) S …`: comm may hold spaces and parentheses; the last `)` ends it.
            let rest = s.rsplit_once(')')?.1;
            rest.split_ascii_whitespace().next().map(str::to_string)
        })
        .unwrap_or_else(|| "?".into());
    let wchan = std::fs::read_to_string(proc.join("wchan"))
        .ok()
        .map(|w| w.trim().to_string())
        .filter(|w| !w.is_empty() && w != "0")
        .unwrap_or_else(|| "unknown".into());
    Unkillable {
        node,
        host: host.to_string(),
        rank,
        pid,
        state,
        wchan,
        note: frozen(&proc),
    }
}

/// `frozen: cgroup freezer /x is FROZEN` when the process's cgroup-v1 freezer group (or one above
/// it, whose state its children inherit) is frozen or freezing.
fn frozen(proc: &Path) -> Option<String> {
    let groups = std::fs::read_to_string(proc.join("cgroup")).ok()?;
    // `7:freezer:/x/y`: hierarchy id, controllers, path.
    let path = groups.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        controllers
            .split(',')
            .any(|c| c == "freezer")
            .then(|| path.to_string())
    })?;
    let root = Path::new("/sys/fs/cgroup/freezer");
    let state = std::fs::read_to_string(
        root.join(path.trim_start_matches('/'))
            .join("freezer.state"),
    )
    .ok()?;
    let state = state.trim();
    (state != "THAWED").then(|| format!("frozen: cgroup freezer {path} is {state}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_process_is_described_from_proc() {
        let me = std::process::id() as i32;
        let u = describe(1, "h1", 3, me);
        assert_eq!((u.node, u.rank, u.pid), (1, 3, me));
        assert!(["R", "S"].contains(&u.state.as_str()), "{u:?}");
        assert!(u
            .describe()
            .starts_with(&format!("rank 3 (pid {me}) is in ")));
        let gone = describe(0, "h0", 0, i32::MAX);
        assert_eq!(gone.state, "?");
        assert_eq!(gone.wchan, "unknown");
    }
}
