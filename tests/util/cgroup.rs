//! A cgroup of the test's own, to run a tool on a smaller machine than this one: less memory
//! (`memory`), or a sliver of one CPU (`cpu`). cgroup v1 (this machine kind's: one hierarchy per
//! controller) or v2 (one unified hierarchy). Removed when dropped, once what ran in it is gone.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

pub struct Cgroup {
    dir: PathBuf,
}

fn v2() -> bool {
    std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

impl Cgroup {
    /// A new group under `controller` (`memory` or `cpu`); panics naming the path when this machine
    /// does not let the test make one (the test needs it).
    pub fn new(controller: &str) -> Cgroup {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "accel-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let dir = if v2() {
            let _ = std::fs::write(
                "/sys/fs/cgroup/cgroup.subtree_control",
                format!("+{controller}"),
            );
            PathBuf::from("/sys/fs/cgroup").join(name)
        } else {
            PathBuf::from("/sys/fs/cgroup").join(controller).join(name)
        };
        std::fs::create_dir(&dir)
            .unwrap_or_else(|e| panic!("a {controller} cgroup at {}: {e}", dir.display()));
        Cgroup { dir }
    }

    fn write(&self, file: &str, value: &str) {
        std::fs::write(self.dir.join(file), value)
            .unwrap_or_else(|e| panic!("write {value} to {}/{file}: {e}", self.dir.display()));
    }

    /// At most `bytes` of memory for what runs in the group (no swap on this machine kind).
    pub fn memory_limit(self, bytes: u64) -> Self {
        if v2() {
            self.write("memory.max", &bytes.to_string());
        } else {
            self.write("memory.limit_in_bytes", &bytes.to_string());
        }
        self
    }

    /// At most `percent` of one CPU for what runs in the group.
    pub fn cpu_percent(self, percent: u32) -> Self {
        let period = 100_000;
        let quota = period * percent / 100;
        if v2() {
            self.write("cpu.max", &format!("{quota} {period}"));
        } else {
            self.write("cpu.cfs_period_us", &period.to_string());
            self.write("cpu.cfs_quota_us", &quota.to_string());
        }
        self
    }

    /// `program args…` run in the group: a shell joins it, then execs the program.
    pub fn command(&self, program: &std::path::Path) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(r#"echo $$ > "$0/cgroup.procs" && exec "$@""#)
            .arg(&self.dir)
            .arg(program);
        c
    }

    /// The file a process writes its pid to, to join the group (a rank of a test's fixture).
    pub fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// The processes in the group now.
    pub fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // A process starved of CPU takes long to die: the limits go first.
        let _ = std::fs::write(self.dir.join("cpu.max"), "max");
        let _ = std::fs::write(self.dir.join("cpu.cfs_quota_us"), "-1");
        for pid in self.pids() {
            crate::util::proc::kill_tree(pid);
        }
        // A killed process leaves its group a moment after it is reaped.
        for _ in 0..250 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
