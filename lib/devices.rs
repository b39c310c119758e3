//! What hardware this machine has: GPUs (through `nvidia-smi` when it is on PATH, else the driver's
//! /proc files), CPU cores and RAM. Used by `accel-config default`, `accel-env` and the launcher's
//! embedded default. Never loads CUDA: a login node without a driver must answer in milliseconds.

use std::fs;
use std::process::Command;

use serde::Serialize;

use crate::env_vars::{self, Environment};

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Gpu {
    pub index: u32,
    pub name: String,
    pub memory_mib: Option<u64>,
    pub driver: Option<String>,
    pub uuid: Option<String>,
    /// nvidia-smi's `pci.bus_id` (`00000000:1B:00.0`), for `--numa_binding`.
    pub pci_bus_id: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Gpus {
    pub gpus: Vec<Gpu>,
    /// Highest CUDA version the driver supports, from nvidia-smi's banner.
    pub cuda_driver_version: Option<String>,
    /// How the GPUs were found: `nvidia-smi`, `/proc/driver/nvidia`, or `none`.
    pub source: &'static str,
}

/// Finds NVIDIA GPUs without touching CUDA.
pub fn detect_gpus(env: &Environment) -> Gpus {
    if let Some(smi) = env
        .get(env_vars::PATH)
        .and_then(|p| which::which_in("nvidia-smi", Some(p), "/").ok())
    {
        let query = Command::new(&smi)
            .args([
                "--query-gpu=index,name,memory.total,driver_version,uuid,pci.bus_id",
                "--format=csv,noheader,nounits",
            ])
            .output();
        if let Ok(out) = query {
            if out.status.success() {
                let text = String::from_utf8_lossy(&out.stdout);
                let gpus: Vec<Gpu> = text.lines().filter_map(parse_smi_line).collect();
                let cuda = Command::new(&smi)
                    .output()
                    .ok()
                    .and_then(|o| cuda_from_banner(&String::from_utf8_lossy(&o.stdout)));
                return Gpus {
                    gpus,
                    cuda_driver_version: cuda,
                    source: "nvidia-smi",
                };
            }
        }
    }
    let mut gpus = Vec::new();
    if let Ok(entries) = fs::read_dir("/proc/driver/nvidia/gpus") {
        let driver = fs::read_to_string("/proc/driver/nvidia/version")
            .ok()
            .and_then(|v| {
                v.split_whitespace()
                    .skip_while(|w| *w != "Module")
                    .nth(1)
                    .map(str::to_string)
            });
        let mut dirs: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        dirs.sort();
        for (i, dir) in dirs.iter().enumerate() {
            let info = fs::read_to_string(dir.join("information")).unwrap_or_default();
            let field = |name: &str| {
                info.lines().find_map(|l| {
                    l.strip_prefix(name)
                        .map(|v| v.trim_start_matches([':', ' ', '\t']).trim().to_string())
                })
            };
            gpus.push(Gpu {
                index: i as u32,
                name: field("Model").unwrap_or_else(|| "NVIDIA GPU".into()),
                memory_mib: None,
                driver: driver.clone(),
                uuid: field("GPU UUID"),
                pci_bus_id: field("Bus Location"),
            });
        }
    }
    let source = if gpus.is_empty() {
        "none"
    } else {
        "/proc/driver/nvidia"
    };
    Gpus {
        gpus,
        cuda_driver_version: None,
        source,
    }
}

/// How many GPUs a process started here can use: the GPUs found, narrowed by `CUDA_VISIBLE_DEVICES`
/// exactly as CUDA narrows them (`torch/cuda/__init__.py::_parse_visible_devices` and
/// `_device_count_nvml`): entries are read like `strtoul` (`1gpu` is 1), the first negative or unknown
/// entry ends the list (`0,-1,2` is one GPU, `-1` none), a repeated entry empties it, and an index
/// beyond the GPUs found ends it too. `GPU-…` UUID prefixes are matched against the GPUs' UUIDs.
pub fn visible_gpus(env: &Environment) -> u32 {
    visible_of(env, &detect_gpus(env).gpus)
}

/// [`visible_gpus`] of GPUs already found.
pub fn visible_of(env: &Environment, found: &[Gpu]) -> u32 {
    match env.get(env_vars::CUDA_VISIBLE_DEVICES) {
        None => found.len() as u32,
        Some(var) => count_visible(var, found) as u32,
    }
}

fn count_visible(var: &str, found: &[Gpu]) -> usize {
    let var = var.trim();
    if var.starts_with("MIG-") {
        // One MIG instance per process is what CUDA exposes; torch does not count them either.
        return var
            .split(',')
            .take_while(|e| e.starts_with("MIG-"))
            .count()
            .min(1);
    }
    visible_ordinals(var, found).len()
}

/// The GPUs a process started here sees, in CUDA's order: the found GPUs `CUDA_VISIBLE_DEVICES`
/// names, read as [`visible_gpus`] reads it (all of them without the variable; none for MIG
/// instances, which have no GPU of their own to name).
pub fn visible_list(env: &Environment, found: &[Gpu]) -> Vec<Gpu> {
    match env.get(env_vars::CUDA_VISIBLE_DEVICES) {
        None => found.to_vec(),
        Some(var) if var.trim().starts_with("MIG-") => Vec::new(),
        Some(var) => visible_ordinals(var.trim(), found)
            .into_iter()
            .map(|i| found[i].clone())
            .collect(),
    }
}

fn visible_ordinals(var: &str, found: &[Gpu]) -> Vec<usize> {
    let mut ordinals: Vec<usize> = Vec::new();
    for elem in var.split(',') {
        let elem = elem.trim();
        let ordinal = if elem.starts_with("GPU-") {
            let matches: Vec<usize> = found
                .iter()
                .enumerate()
                .filter(|(_, g)| g.uuid.as_deref().is_some_and(|u| u.starts_with(elem)))
                .map(|(i, _)| i)
                .collect();
            match matches[..] {
                [one] => Some(one),
                _ => None,
            }
        } else {
            strtoul(elem).filter(|n| *n < found.len())
        };
        match ordinal {
            None => break,
            Some(o) if ordinals.contains(&o) => return Vec::new(),
            Some(o) => ordinals.push(o),
        }
    }
    ordinals
}

/// The leading integer of `s` as C's `strtoul` reads it for CUDA; `None` for a negative or missing one.
fn strtoul(s: &str) -> Option<usize> {
    let digits: String = s
        .strip_prefix('+')
        .unwrap_or(s)
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    if s.starts_with('-') || digits.is_empty() {
        return None;
    }
    digits.parse().ok()
}

fn parse_smi_line(line: &str) -> Option<Gpu> {
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    if f.len() < 5 {
        return None;
    }
    Some(Gpu {
        index: f[0].parse().ok()?,
        name: f[1].to_string(),
        memory_mib: f[2].parse().ok(),
        driver: Some(f[3].to_string()),
        uuid: Some(f[4].to_string()),
        pci_bus_id: f.get(5).map(|s| s.to_string()),
    })
}

fn cuda_from_banner(banner: &str) -> Option<String> {
    let rest = &banner[banner.find("CUDA Version:")? + "CUDA Version:".len()..];
    rest.split_whitespace()
        .next()
        .map(|v| v.trim_end_matches('|').to_string())
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Cpu {
    pub model: Option<String>,
    pub logical_cores: usize,
    pub physical_cores: usize,
    pub ram_bytes: u64,
}

/// CPU model, logical and physical core counts, and total RAM, from /proc.
pub fn detect_cpu() -> Cpu {
    let info = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let logical = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let model = info.lines().find_map(|l| {
        l.strip_prefix("model name")
            .map(|v| v.trim_start_matches([':', ' ', '\t']).to_string())
    });
    let mut cores = std::collections::BTreeSet::new();
    let (mut phys, mut core) = (None::<String>, None::<String>);
    for line in info.lines() {
        if let Some(v) = line.strip_prefix("physical id") {
            phys = Some(v.trim_start_matches([':', ' ', '\t']).to_string());
        } else if let Some(v) = line.strip_prefix("core id") {
            core = Some(v.trim_start_matches([':', ' ', '\t']).to_string());
        } else if line.trim().is_empty() {
            if let (Some(p), Some(c)) = (phys.take(), core.take()) {
                cores.insert((p, c));
            }
        }
    }
    let physical = if cores.is_empty() {
        logical
    } else {
        cores.len().min(logical)
    };
    let ram_bytes = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines().find_map(|l| {
                l.strip_prefix("MemTotal:")
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
        })
        .map(|kib| kib * 1024)
        .unwrap_or(0);
    Cpu {
        model,
        logical_cores: logical,
        physical_cores: physical,
        ram_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nvidia_smi() {
        let g = parse_smi_line("0, NVIDIA H200, 143771, 570.86.15, GPU-0c5e").unwrap();
        assert_eq!(g.name, "NVIDIA H200");
        assert_eq!(g.memory_mib, Some(143771));
        let banner =
            "| NVIDIA-SMI 570.86.15   Driver Version: 570.86.15   CUDA Version: 12.8     |";
        assert_eq!(cuda_from_banner(banner).as_deref(), Some("12.8"));
    }

    #[test]
    fn cuda_visible_devices_narrows_as_cuda_does() {
        let gpus: Vec<Gpu> = (0..4)
            .map(|i| Gpu {
                index: i,
                uuid: Some(format!("GPU-{i}aa{i}")),
                ..Gpu::default()
            })
            .collect();
        for (var, want) in [
            ("0,1", 2),
            ("", 0),
            ("-1", 0),
            ("0,-1,2", 1),
            ("3,2,1,0", 4),
            ("1gpu,2", 2),
            ("0,0", 0),
            ("2,7,1", 1),
            ("GPU-1,GPU-3aa", 2),
            ("GPU-9", 0),
        ] {
            assert_eq!(
                count_visible(var, &gpus),
                want,
                "CUDA_VISIBLE_DEVICES={var}"
            );
        }
        assert_eq!(count_visible("0,1", &[]), 0);
    }

    #[test]
    fn cpu_has_cores_and_ram() {
        let cpu = detect_cpu();
        assert!(cpu.logical_cores >= 1 && cpu.physical_cores >= 1 && cpu.ram_bytes > 0);
    }
}
