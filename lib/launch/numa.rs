//! `--numa_binding`: each rank pinned to the CPUs near the GPU of its local rank, as torch 2.13's
//! `torch/numa/binding.py` computes them (`_get_logical_cpus_to_bind_to` and the four
//! `_*_get_logical_cpus_to_bind_to` of its `AffinityMode`s), read from sysfs and procfs under a root
//! (`/`, or ACCEL_SYSFS_ROOT: a host's /sys mounted elsewhere, a test's tree):
//!
//! - a GPU's NUMA node: `sys/bus/pci/devices/<domain:bus:device>.0/numa_node` (-1 is node 0);
//! - a node's CPUs: `sys/devices/system/node/node<N>/cpulist`, of which only those this launcher may
//!   run on count (`proc/self/status` Cpus_allowed_list, which torch reads as `sched_getaffinity`);
//! - `socket`: the nodes (`sys/devices/system/node/possible`) whose first allowed CPU has the same
//!   `topology/physical_package_id` as the GPU's node's;
//! - `exclusive`: the node's physical cores (grouped by `topology/thread_siblings_list`) shared out
//!   among the node's GPUs in GPU order, the lowest GPUs taking one more when they do not divide;
//! - `core-complex`: the node's CPUs grouped by the last-level cache they share (the highest
//!   `cache/index*/level` of type Unified or Data, its `shared_cpu_list`), largest group first, one
//!   per GPU of the node, round robin.
//!
//! torch binds with `numactl --physcpubind`, which only sets the CPU affinity; accel-launch sets the
//! same affinity on the rank itself between fork and exec (`sched_setaffinity`), so no numactl is
//! needed. Memory is not bound, as in torch: Linux's default policy allocates on the node of the CPU
//! that first touches a page, which the binding keeps on the GPU's node.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

/// `--numa_binding`: torch 2.13's `torch.numa.binding.AffinityMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NumaMode {
    /// Every CPU of the GPU's NUMA node.
    Node,
    /// Every CPU of the NUMA nodes of the GPU's socket.
    Socket,
    /// An exclusive share of the physical cores of the GPU's NUMA node.
    Exclusive,
    /// One core complex (the CPUs sharing a last-level cache) of the GPU's NUMA node.
    CoreComplex,
}

impl NumaMode {
    pub fn name(self) -> &'static str {
        match self {
            NumaMode::Node => "node",
            NumaMode::Socket => "socket",
            NumaMode::Exclusive => "exclusive",
            NumaMode::CoreComplex => "core-complex",
        }
    }
}

/// A set of logical CPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuList(pub BTreeSet<usize>);

impl CpuList {
    /// The set as the C library wants it for `sched_setaffinity`; CPUs beyond its size are dropped
    /// (the list was read from this machine's sysfs, whose CPUs it holds).
    pub fn to_cpu_set(&self) -> libc::cpu_set_t {
        // SAFETY: cpu_set_t is plain bits; zeroed is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
        for c in self.0.iter().filter(|c| **c < max) {
            // SAFETY: `c` is below the set's size.
            unsafe { libc::CPU_SET(*c, &mut set) };
        }
        set
    }
}

impl std::fmt::Display for CpuList {
    /// torch's `_get_ranges_str_from_ints`: `0-2,4,6-7`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        let mut it = self.0.iter().copied().peekable();
        while let Some(start) = it.next() {
            let mut end = start;
            while it.peek() == Some(&(end + 1)) {
                end += 1;
                it.next();
            }
            parts.push(if start == end {
                start.to_string()
            } else {
                format!("{start}-{end}")
            });
        }
        f.write_str(&parts.join(","))
    }
}

impl Serialize for CpuList {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// torch's `_get_set_of_int_from_ranges_str`: `0-2,4` → {0, 1, 2, 4}.
pub fn parse_ranges(s: &str) -> Result<BTreeSet<usize>, String> {
    let mut out = BTreeSet::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |v: &str| {
            v.trim()
                .parse::<usize>()
                .map_err(|_| format!("`{s}` is not a CPU list"))
        };
        match part.split_once('-') {
            Some((a, b)) => out.extend(num(a)?..=num(b)?),
            None => {
                out.insert(num(part)?);
            }
        }
    }
    Ok(out)
}

/// The CPUs this process may run on (`sched_getaffinity`).
pub fn allowed_cpus() -> BTreeSet<usize> {
    // SAFETY: a zeroed cpu_set_t filled in by the kernel.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return BTreeSet::new();
        }
        (0..8 * std::mem::size_of::<libc::cpu_set_t>())
            .filter(|c| libc::CPU_ISSET(*c, &set))
            .collect()
    }
}

/// `nvidia-smi`'s `pci.bus_id` (`00000000:1B:00.0`) as sysfs names the device, the way torch formats
/// its device properties: `{domain:04x}:{bus:02x}:{device:02x}.0`.
pub fn sysfs_pci_address(bus_id: &str) -> Option<String> {
    let (domain, rest) = bus_id.trim().split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let device = rest.split('.').next()?;
    let hex = |v: &str| u32::from_str_radix(v, 16).ok();
    Some(format!(
        "{:04x}:{:02x}:{:02x}.0",
        hex(domain)?,
        hex(bus)?,
        hex(device)?
    ))
}

/// The sysfs and procfs files the binding is read from, under `root`.
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    pub fn new(root: &Path) -> Sysfs {
        Sysfs {
            root: root.to_path_buf(),
        }
    }

    fn read(&self, rel: &str) -> Result<String, String> {
        let p = self.root.join(rel);
        std::fs::read_to_string(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    }

    fn cpus(&self, rel: &str) -> Result<BTreeSet<usize>, String> {
        parse_ranges(self.read(rel)?.trim())
    }

    fn number(&self, rel: &str) -> Result<i64, String> {
        let t = self.read(rel)?;
        t.trim()
            .parse()
            .map_err(|_| format!("{}: `{}` is not a number", rel, t.trim()))
    }

    /// `_get_allowed_cpu_indices_for_current_thread`: this launcher's Cpus_allowed_list.
    pub fn allowed(&self) -> Result<BTreeSet<usize>, String> {
        let status = self.read("proc/self/status")?;
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .ok_or("proc/self/status has no Cpus_allowed_list")?;
        parse_ranges(line.trim())
    }

    /// `_get_numa_node_index_for_gpu_index`.
    fn gpu_node(&self, pci: &str) -> Result<u32, String> {
        let n = self.number(&format!("sys/bus/pci/devices/{pci}/numa_node"))?;
        Ok(n.max(0) as u32)
    }

    /// `_get_allowed_logical_cpu_indices_for_numa_node`.
    fn node_cpus(&self, node: u32, allowed: &BTreeSet<usize>) -> Result<BTreeSet<usize>, String> {
        let all = self
            .cpus(&format!("sys/devices/system/node/node{node}/cpulist"))
            .map_err(|e| format!("could not determine the CPUs of NUMA node {node}: {e}"))?;
        Ok(all.intersection(allowed).copied().collect())
    }

    fn cpu_file(&self, cpu: usize, rest: &str) -> String {
        format!("sys/devices/system/cpu/cpu{cpu}/{rest}")
    }

    /// `_get_socket_index_for_cpu`.
    fn package(&self, cpu: usize) -> Result<i64, String> {
        self.number(&self.cpu_file(cpu, "topology/physical_package_id"))
    }

    /// `_get_logical_cpus_sharing_same_max_level_cache_as`.
    fn last_level_cache(&self, cpu: usize) -> Result<BTreeSet<usize>, String> {
        let dir = self.root.join(self.cpu_file(cpu, "cache"));
        let entries =
            std::fs::read_dir(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        let mut best: (i64, BTreeSet<usize>) = (-1, BTreeSet::new());
        let mut names: Vec<String> = entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| {
                n.strip_prefix("index")
                    .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()))
            })
            .collect();
        // os.listdir's order is the directory's; the highest level wins and ties keep the first,
        // which for sysfs' index0..N is the lowest index.
        names.sort_by_key(|n| n[5..].parse::<u32>().unwrap_or(u32::MAX));
        for name in names {
            let base = self.cpu_file(cpu, &format!("cache/{name}"));
            let kind = self.read(&format!("{base}/type"))?;
            if !matches!(kind.trim(), "Unified" | "Data") {
                continue;
            }
            let level = self.number(&format!("{base}/level"))?;
            if level <= best.0 {
                continue;
            }
            best = (level, self.cpus(&format!("{base}/shared_cpu_list"))?);
        }
        Ok(best.1)
    }
}

/// The CPUs torch 2.13 binds the worker of GPU `gpu` to (`_get_validated_logical_cpus_to_bind_to`):
/// `gpus` are the node's visible GPUs' sysfs PCI addresses in CUDA order, the worker's GPU is the one
/// of its local rank.
pub fn cpus_for(
    sys: &Sysfs,
    mode: NumaMode,
    gpus: &[String],
    gpu: usize,
) -> Result<CpuList, String> {
    let pci = gpus
        .get(gpu)
        .ok_or_else(|| format!("local rank {gpu} has no GPU ({} visible)", gpus.len()))?;
    let allowed = sys.allowed()?;
    let node = sys.gpu_node(pci)?;
    let cpus = match mode {
        NumaMode::Node => sys.node_cpus(node, &allowed)?,
        NumaMode::Socket => {
            let first = |n: u32| -> Result<usize, String> {
                sys.node_cpus(n, &allowed)?
                    .first()
                    .copied()
                    .ok_or_else(|| format!("NUMA node {n} has no CPU this process may use"))
            };
            let socket = sys.package(first(node)?)?;
            let mut cpus = BTreeSet::new();
            for n in sys.cpus("sys/devices/system/node/possible")? {
                let n = n as u32;
                if sys.package(first(n)?)? == socket {
                    cpus.extend(sys.node_cpus(n, &allowed)?);
                }
            }
            cpus
        }
        NumaMode::Exclusive | NumaMode::CoreComplex => {
            let mut peers = Vec::new();
            for (i, p) in gpus.iter().enumerate() {
                if sys.gpu_node(p)? == node {
                    peers.push(i);
                }
            }
            let relative = peers.iter().position(|i| *i == gpu).unwrap_or(0);
            let node_cpus = sys.node_cpus(node, &allowed)?;
            if mode == NumaMode::Exclusive {
                exclusive(sys, node, &node_cpus, peers.len(), relative)?
            } else {
                core_complex(sys, &node_cpus, relative)?
            }
        }
    };
    if cpus.is_empty() {
        return Err(format!(
            "GPU {gpu} (NUMA node {node}) leaves no CPU to bind to"
        ));
    }
    Ok(CpuList(cpus))
}

/// `_exclusive_get_logical_cpus_to_bind_to`.
fn exclusive(
    sys: &Sysfs,
    node: u32,
    node_cpus: &BTreeSet<usize>,
    gpus_on_node: usize,
    relative: usize,
) -> Result<BTreeSet<usize>, String> {
    let mut cores: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for c in node_cpus {
        let siblings = sys.cpus(&sys.cpu_file(*c, "topology/thread_siblings_list"))?;
        let core = siblings.first().copied().unwrap_or(*c);
        cores.entry(core).or_default().insert(*c);
    }
    let per_gpu = cores.len() / gpus_on_node.max(1);
    let extra = cores.len() % gpus_on_node.max(1);
    if per_gpu < 1 {
        return Err(format!(
            "there are only {} physical cores on NUMA node {node}, but {gpus_on_node} GPUs on it",
            cores.len()
        ));
    }
    let start = relative * per_gpu + relative.min(extra);
    let end = start + per_gpu + usize::from(relative < extra);
    Ok(cores
        .into_values()
        .skip(start)
        .take(end - start)
        .flatten()
        .collect())
}

/// `_core_complex_get_logical_cpus_to_bind_to`.
fn core_complex(
    sys: &Sysfs,
    node_cpus: &BTreeSet<usize>,
    relative: usize,
) -> Result<BTreeSet<usize>, String> {
    let mut groups: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for c in node_cpus {
        let shared = sys.last_level_cache(*c)?;
        let key = shared.first().copied().unwrap_or(*c);
        groups.entry(key).or_default().insert(*c);
    }
    let mut groups: Vec<(usize, BTreeSet<usize>)> = groups.into_iter().collect();
    groups.sort_by_key(|(key, cpus)| (std::cmp::Reverse(cpus.len()), *key));
    if groups.is_empty() {
        return Ok(BTreeSet::new());
    }
    Ok(groups.swap_remove(relative % groups.len()).1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_round_trip() {
        let s = parse_ranges("0-2,4,6-7\n").unwrap();
        assert_eq!(s, [0, 1, 2, 4, 6, 7].into_iter().collect());
        assert_eq!(CpuList(s).to_string(), "0-2,4,6-7");
        assert!(parse_ranges("a-b").is_err());
        assert_eq!(CpuList::default().to_string(), "");
    }

    #[test]
    fn pci_addresses_as_sysfs_names_them() {
        assert_eq!(
            sysfs_pci_address("00000000:1B:00.0").as_deref(),
            Some("0000:1b:00.0")
        );
        assert_eq!(
            sysfs_pci_address("00000001:C0:1F.3").as_deref(),
            Some("0001:c0:1f.0")
        );
        assert_eq!(sysfs_pci_address("N/A"), None);
    }

    #[test]
    fn this_process_may_run_somewhere() {
        let own = allowed_cpus();
        assert!(!own.is_empty());
        let sys = Sysfs::new(Path::new("/"));
        assert_eq!(sys.allowed().unwrap(), own);
    }
}
