//! A switched network of N nodes on one machine, for the multi-node tests that need more than the
//! pair of [`super::Netns`]: each node is a network namespace with one veth link (`eth0`) to a bridge
//! that lives in a namespace of its own (nothing is added to the host's network), its own address
//! (10.204.SLOT.I+1) and, through `unshare --uts`, its own host name. A node's link can be throttled
//! with `tc tbf`, both ways (its `eth0` egress and the bridge port's egress toward it), as a NIC that
//! negotiated a lower rate would be.

use std::path::Path;
use std::process::{Command, Stdio};

use super::{suite, CommandExt as _, WAIT};

pub struct Fabric {
    /// The nodes' namespaces.
    pub names: Vec<String>,
    pub ips: Vec<String>,
    switch: String,
    slot: u32,
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stderr(Stdio::null())
        .status_within(WAIT)
        .success()
}

fn tc(ns: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "tc"])
        .args(args)
        .output_within(WAIT);
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "tc {} in {ns}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

impl Fabric {
    /// `n` nodes, or None where namespaces cannot be made (not root, no iproute2).
    pub fn create(n: usize) -> Option<Fabric> {
        assert!((1..=200).contains(&n));
        let slot = suite::slot("fabric", 100, std::process::id() % 100);
        let switch = format!("accf{slot}sw");
        let names: Vec<String> = (0..n).map(|i| format!("accf{slot}n{i}")).collect();
        let ips: Vec<String> = (0..n).map(|i| format!("10.204.{slot}.{}", i + 1)).collect();
        // What a test killed by the runner left under this slot's names goes first.
        for ns in names.iter().chain(std::iter::once(&switch)) {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status_within(WAIT);
        }
        let f = Fabric {
            names,
            ips,
            switch,
            slot,
        };
        let sw = f.switch.as_str();
        let mut ok = ip(&["netns", "add", sw])
            && ip(&["-n", sw, "link", "add", "br0", "type", "bridge"])
            && ip(&["-n", sw, "link", "set", "br0", "up"]);
        for i in 0..n {
            if !ok {
                break;
            }
            let ns = &f.names[i];
            let port = f.port(i);
            ok = ip(&["netns", "add", ns])
                && ip(&[
                    "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", ns,
                ])
                && ip(&["link", "set", &port, "netns", sw])
                && ip(&["-n", sw, "link", "set", &port, "master", "br0"])
                && ip(&["-n", sw, "link", "set", &port, "up"])
                && ip(&[
                    "-n",
                    ns,
                    "addr",
                    "add",
                    &format!("{}/24", f.ips[i]),
                    "dev",
                    "eth0",
                ])
                && ip(&["-n", ns, "link", "set", "eth0", "up"])
                && ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        ok.then_some(f)
    }

    /// The bridge's port toward node `i`.
    fn port(&self, i: usize) -> String {
        format!("accf{}p{i}", self.slot)
    }

    /// Throttles node `i`'s link to `mbit` Mbit/s both ways (`tc tbf`, 256 KiB burst, 50 ms queue).
    pub fn limit(&self, i: usize, mbit: u32) -> Result<(), String> {
        let rate = format!("{mbit}mbit");
        let tbf = |dev: &str| {
            vec![
                "qdisc".to_string(),
                "replace".into(),
                "dev".into(),
                dev.to_string(),
                "root".into(),
                "tbf".into(),
                "rate".into(),
                rate.clone(),
                "burst".into(),
                "256kb".into(),
                "latency".into(),
                "50ms".into(),
            ]
        };
        let a = tbf("eth0");
        tc(
            &self.names[i],
            &a.iter().map(String::as_str).collect::<Vec<_>>(),
        )?;
        let b = tbf(&self.port(i));
        tc(
            &self.switch,
            &b.iter().map(String::as_str).collect::<Vec<_>>(),
        )
    }

    /// The start of a command line that runs the rest on node `i` with host name `host`:
    /// `nsenter --net` (not `ip netns exec`, which mounts a sysfs of its own over /sys and so hides
    /// the cgroups), then `unshare --uts` and `hostname`.
    pub fn argv(&self, i: usize, host: &str) -> Vec<String> {
        vec![
            "nsenter".into(),
            format!("--net=/run/netns/{}", self.names[i]),
            "unshare".into(),
            "--uts".into(),
            "sh".into(),
            "-c".into(),
            r#"hostname "$0" && exec "$@""#.into(),
            host.into(),
        ]
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        for ns in self.names.iter().chain(std::iter::once(&self.switch)) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// A cgroup of its own with a large CPU weight, for the processes of a test that measures speed on
/// a machine that other work shares: inside it the test's processes share CPU time as CFS shares it
/// between tasks (a busy process pinned beside a rank takes half of that core), and the group as a
/// whole comes before the other sessions' autogroups (cgroup v1 `cpu.shares`, or v2 `cpu.weight`).
/// None where no such group can be made.
pub struct CpuGroup {
    path: std::path::PathBuf,
}

impl CpuGroup {
    pub fn create(tag: &str) -> Option<CpuGroup> {
        let name = format!("accel-{tag}-{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/cpu");
        let (path, file, weight) = if v1.join("cpu.shares").exists() {
            (v1.join(&name), "cpu.shares", "65536")
        } else {
            (
                Path::new("/sys/fs/cgroup").join(&name),
                "cpu.weight",
                "6400",
            )
        };
        std::fs::create_dir_all(&path).ok()?;
        let g = CpuGroup { path };
        std::fs::write(g.path.join(file), weight).ok()?;
        Some(g)
    }

    /// A prefix for a command line: it joins the group, then runs the rest.
    pub fn wrap(&self) -> Vec<String> {
        vec![
            "sh".into(),
            "-c".into(),
            format!(
                r#"echo $$ > '{}/cgroup.procs' && exec "$@""#,
                self.path.display()
            ),
            "sh".into(),
        ]
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        // Its processes have ended (or are ending): a group is removed once empty.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() || !self.path.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}
