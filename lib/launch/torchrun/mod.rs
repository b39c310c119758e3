//! torchrun's command line, as accel-launch runs it itself (torch 2.13's `torch/distributed/run.py`
//! and `torch/distributed/elastic/`). A run given only torchrun's flags is torchrun's run: its node and
//! rank counts, its rendezvous rule (a one-node run without an endpoint or port is torchrun's
//! `--standalone`: a fresh UUID as run id, this host's FQDN as MASTER_ADDR), exactly its worker
//! variables and no accelerate ones, its log layout ([`logs`]) and its signal set. The flags that
//! name the same thing as accelerate's (`--nnodes` and `--num_machines`, `--node_rank` and
//! `--machine_rank`, …) become the same config values, so a command line that mixes them and
//! contradicts itself is refused naming both flags.

pub mod counts;
pub mod logs;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::config::CliValue;
use crate::contract::EnvMap;
use crate::env_vars::{self, Environment};
pub use counts::{Nnodes, NprocPerNode};

/// torchrun's default `--signals-to-handle` (`torch/distributed/run.py::get_args_parser`), which it
/// also exports to its workers as TORCHELASTIC_SIGNALS_TO_HANDLE.
pub const DEFAULT_SIGNALS: &str = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";

/// What of torchrun's command line reaches the run's resolution ([`crate::launch::resolve`]).
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Only torchrun's flags were given (no config file, no accelerate flag): torchrun's world and
    /// environment, no accelerate variables, and the default config file is not read.
    pub only: bool,
    pub nnodes: Option<Nnodes>,
    pub nproc_per_node: Option<NprocPerNode>,
    pub node_rank: Option<u32>,
    pub master_addr: Option<String>,
    pub master_port: Option<u16>,
    pub rdzv_endpoint: Option<String>,
    pub rdzv_id: Option<String>,
    pub standalone: bool,
    pub local_addr: Option<String>,
}

/// How the ranks of a node meet, once the node count is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendezvous {
    /// torchrun's local c10d rendezvous (`--standalone`, or `run()`'s automatic switch for one node
    /// without endpoint or port): MASTER_ADDR is `--local-addr` or the FQDN, the port a free one.
    pub local: bool,
    /// TORCHELASTIC_RUN_ID.
    pub run_id: String,
    pub local_addr: Option<String>,
}

impl Request {
    /// The config values torchrun's flags stand for, each named by its flag. `backend` is the
    /// rendezvous backend the run will have (an endpoint without a port is an error for the static
    /// one, as in torchrun's `static_tcp_rendezvous.create_rdzv_handler`); `num_processes`, the total
    /// `--nproc_per_node` makes, where the caller knows the node count.
    pub fn values(
        &self,
        backend: &str,
        num_processes: Option<u64>,
    ) -> Result<Vec<CliValue>, String> {
        let mut out = Vec::new();
        let mut push = |key: &str, value: String, flag: &str| {
            out.push(CliValue {
                key: key.into(),
                value: Value::from(value),
                flag: flag.into(),
            })
        };
        if let Some(n) = self.nnodes {
            if n.is_range() && backend == "static" {
                return Err(format!(
                    "--nnodes {n} is an elastic range, which the static rendezvous cannot run: it waits for a fixed number of nodes (torchrun's static backend would silently wait for {})",
                    n.max
                ));
            }
            push("num_machines", n.max.to_string(), "--nnodes");
        }
        if let Some(r) = self.node_rank {
            push("machine_rank", r.to_string(), "--node_rank");
        }
        if let Some(a) = &self.master_addr {
            push("main_process_ip", a.clone(), "--master_addr");
        }
        if let Some(p) = self.master_port {
            push("main_process_port", p.to_string(), "--master_port");
        }
        if let Some(e) = &self.rdzv_endpoint {
            let (host, port) = parse_endpoint(e)?;
            if port.is_none() && backend == "static" {
                return Err(format!(
                    "--rdzv_endpoint `{e}` has no port, which the static rendezvous needs (HOST:PORT)"
                ));
            }
            push("main_process_ip", host, "--rdzv_endpoint");
            if let Some(p) = port {
                push("main_process_port", p.to_string(), "--rdzv_endpoint");
            }
        }
        if let Some(n) = num_processes {
            push("num_processes", n.to_string(), "--nproc_per_node");
        }
        Ok(out)
    }

    /// How this node's ranks meet: torchrun's `run()` switches a run without `--rdzv-endpoint` and
    /// `--master-port` on one node to a local c10d rendezvous (as `--standalone` does); `explicit_port`
    /// is whether a port was given some other way (`--main_process_port`, a config file).
    pub fn rendezvous(&self, nodes: u32, explicit_port: bool) -> Rendezvous {
        let auto = self.only
            && self.rdzv_endpoint.is_none()
            && self.master_port.is_none()
            && !explicit_port
            && nodes == 1;
        let local = self.standalone || auto;
        Rendezvous {
            local,
            run_id: if local {
                uuid4()
            } else {
                self.rdzv_id.clone().unwrap_or_else(|| "none".into())
            },
            local_addr: self.local_addr.clone(),
        }
    }
}

/// Two flags that set the same config value to different values (`--num_machines 2 --nnodes 3`): a
/// usage error naming both. Numbers compare as numbers (`29500` and `029500` agree).
pub fn check_conflicts(values: &[CliValue]) -> Result<(), String> {
    let mut by_key: BTreeMap<&str, Vec<&CliValue>> = BTreeMap::new();
    // Flags only: a scheduler's world (task scope) is not the user's word.
    for v in values.iter().filter(|v| v.flag.starts_with('-')) {
        by_key.entry(v.key.as_str()).or_default().push(v);
    }
    let text = |v: &Value| match v {
        Value::String(s) => s.trim().to_string(),
        other => other.to_string(),
    };
    for (key, given) in by_key {
        for (i, a) in given.iter().enumerate() {
            for b in &given[i + 1..] {
                let (ta, tb) = (text(&a.value), text(&b.value));
                let same = match (ta.parse::<f64>(), tb.parse::<f64>()) {
                    (Ok(x), Ok(y)) => x == y,
                    _ => ta == tb,
                };
                if !same && a.flag != b.flag {
                    return Err(format!(
                        "`{} {ta}` and `{} {tb}` contradict each other (both set {key})",
                        a.flag, b.flag
                    ));
                }
            }
        }
    }
    Ok(())
}

/// torchrun's `parse_rendezvous_endpoint` (torch/distributed/elastic/rendezvous/utils.py): `HOST`,
/// `HOST:PORT`, `[IPv6]:PORT`; the host is returned without brackets.
pub fn parse_endpoint(e: &str) -> Result<(String, Option<u16>), String> {
    let e = e.trim();
    let bad = || format!("--rdzv_endpoint `{e}` is not HOST[:PORT] (IPv6 as [ADDR]:PORT)");
    let (host, port) = if let Some(rest) = e.strip_prefix('[') {
        let (h, after) = rest.split_once(']').ok_or_else(bad)?;
        match after {
            "" => (h, None),
            p => (h, Some(p.strip_prefix(':').ok_or_else(bad)?)),
        }
    } else {
        match e.rsplit_once(':') {
            Some((h, _)) if h.contains(':') => (e, None),
            Some((h, p)) => (h, Some(p)),
            None => (e, None),
        }
    };
    if host.is_empty() {
        return Err(bad());
    }
    let port = port
        .map(|p| p.parse::<u16>().map_err(|_| bad()))
        .transpose()?;
    Ok((host.to_string(), port))
}

/// `--nproc_per_node` as torchrun's `determine_local_world_size` resolves it: `gpu` is the visible
/// GPUs (an error without any, as torch's "Cuda is not available"), `cpu` the CPUs this process may
/// run on (`torch._utils.cpu_count`: `sched_getaffinity`), `auto` the GPUs if any, else the CPUs.
pub fn local_world_size(n: NprocPerNode, visible_gpus: u32) -> Result<u32, String> {
    let cpus = || crate::launch::numa::allowed_cpus().len().max(1) as u32;
    match n {
        NprocPerNode::Count(n) => Ok(n),
        NprocPerNode::Gpu if visible_gpus == 0 => Err(
            "--nproc_per_node gpu: no GPU is visible here (torchrun: \"Cuda is not available\")"
                .into(),
        ),
        NprocPerNode::Gpu => Ok(visible_gpus),
        NprocPerNode::Cpu => Ok(cpus()),
        NprocPerNode::Auto if visible_gpus > 0 => Ok(visible_gpus),
        NprocPerNode::Auto => Ok(cpus()),
    }
}

/// The variables torchrun's agent adds to every worker beyond the rank contract: OMP_NUM_THREADS=1
/// when it is unset and more than one worker runs here (`run.py::config_from_args`).
pub fn common_env(env: &Environment, local_world_size: u32) -> EnvMap {
    let mut m = EnvMap::new();
    if env.get(env_vars::OMP_NUM_THREADS).is_none() && local_world_size > 1 {
        m.insert(env_vars::OMP_NUM_THREADS.into(), "1".into());
    }
    m
}

/// `--signals-to-handle`: the names torchrun's agent would install a handler for
/// (`elastic/multiprocessing/api.py::PContext.start`, `getattr(signal, name.strip())`), as numbers.
/// Refused: a name that is no signal (torchrun only logs it), and the signals accel-launch cannot
/// or does not hand on (SIGKILL and SIGSTOP cannot be caught; SIGCHLD, SIGTSTP, SIGCONT and SIGPIPE
/// are the launcher's own; a synchronous fault signal is the launcher's crash).
pub fn parse_signals(list: &str) -> Result<Vec<i32>, String> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim) {
        let sig: nix::sys::signal::Signal = name.parse().map_err(|_| {
            format!("--signals_to_handle: `{name}` is not a signal name (e.g. SIGUSR1)")
        })?;
        use nix::sys::signal::Signal::*;
        let why = match sig {
            SIGKILL | SIGSTOP => Some("cannot be caught"),
            SIGCHLD | SIGTSTP | SIGCONT | SIGPIPE => {
                Some("is accel-launch's own (child exits, job control, closed pipes)")
            }
            SIGSEGV | SIGBUS | SIGILL | SIGFPE | SIGTRAP | SIGSYS => {
                Some("is a fault of the launcher itself, not a request to its ranks")
            }
            _ => None,
        };
        if let Some(why) = why {
            return Err(format!("--signals_to_handle: {name} {why}"));
        }
        if !out.contains(&(sig as i32)) {
            out.push(sig as i32);
        }
    }
    if out.is_empty() {
        return Err("--signals_to_handle: no signal named".into());
    }
    Ok(out)
}

/// A version 4 UUID (RFC 9562), as torchrun's `str(uuid.uuid4())` run id.
pub fn uuid4() -> String {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 16];
    if ring::rand::SystemRandom::new().fill(&mut b).is_err() {
        // No system randomness: unique enough for a run id on this host.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
            ^ u128::from(std::process::id()) << 64;
        b = t.to_le_bytes();
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Python's `string.Template(t).safe_substitute(values)`: `$$` is `$`, `$name` and `${name}` are
/// replaced when known and kept as written otherwise.
pub fn safe_substitute(t: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::new();
    let mut rest = t;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(a) = after.strip_prefix('$') {
            out.push('$');
            rest = a;
            continue;
        }
        let (name, used) = if let Some(b) = after.strip_prefix('{') {
            match b.find('}') {
                Some(end) => (&b[..end], end + 2),
                None => ("", 0),
            }
        } else {
            let end = after
                .char_indices()
                .find(|(k, c)| {
                    !(c.is_ascii_alphanumeric() || *c == '_') || (*k == 0 && c.is_ascii_digit())
                })
                .map_or(after.len(), |(k, _)| k);
            (&after[..end], end)
        };
        match values.iter().find(|(k, _)| !name.is_empty() && *k == name) {
            Some((_, v)) => {
                out.push_str(v);
                rest = &after[used..];
            }
            None => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(key: &str, value: &str, flag: &str) -> CliValue {
        CliValue {
            key: key.into(),
            value: Value::from(value),
            flag: flag.into(),
        }
    }

    #[test]
    fn contradicting_flags_are_named() {
        let e = check_conflicts(&[
            v("num_machines", "2", "--num_machines"),
            v("num_machines", "3", "--nnodes"),
        ])
        .unwrap_err();
        assert!(
            e.contains("`--num_machines 2`") && e.contains("`--nnodes 3`"),
            "{e}"
        );
        assert!(check_conflicts(&[
            v("main_process_port", "29500", "--main_process_port"),
            v("main_process_port", "029500", "--master_port"),
        ])
        .is_ok());
    }

    #[test]
    fn endpoints_as_torchrun_parses_them() {
        assert_eq!(parse_endpoint("h:1"), Ok(("h".into(), Some(1))));
        assert_eq!(parse_endpoint("h"), Ok(("h".into(), None)));
        assert_eq!(
            parse_endpoint("[::1]:29400"),
            Ok(("::1".into(), Some(29400)))
        );
        assert_eq!(parse_endpoint("::1"), Ok(("::1".into(), None)));
        assert!(parse_endpoint("h:x").is_err());
        assert!(parse_endpoint(":5").is_err());
    }

    #[test]
    fn static_needs_a_fixed_node_count_and_a_port() {
        let r = Request {
            nnodes: Some(Nnodes { min: 1, max: 4 }),
            ..Request::default()
        };
        assert!(r
            .values("static", None)
            .unwrap_err()
            .contains("elastic range"));
        assert_eq!(r.values("c10d", None).unwrap()[0].value, Value::from("4"));
        let r = Request {
            rdzv_endpoint: Some("node0".into()),
            ..Request::default()
        };
        assert!(r.values("static", None).unwrap_err().contains("no port"));
        assert_eq!(r.values("c10d", None).unwrap().len(), 1);
    }

    #[test]
    fn only_a_plain_one_node_run_rendezvous_locally() {
        let only = Request {
            only: true,
            ..Request::default()
        };
        let r = only.rendezvous(1, false);
        assert!(r.local);
        assert_eq!(r.run_id.len(), 36);
        assert_eq!(&r.run_id[14..15], "4");
        assert!(!only.rendezvous(2, false).local);
        assert!(!only.rendezvous(1, true).local);
        let with_id = Request {
            rdzv_id: Some("job".into()),
            master_port: Some(1),
            ..only.clone()
        };
        assert_eq!(with_id.rendezvous(1, false).run_id, "job");
    }

    #[test]
    fn signals_by_name() {
        assert_eq!(parse_signals("SIGUSR1"), Ok(vec![libc::SIGUSR1]));
        assert_eq!(
            parse_signals(" SIGTERM ,SIGINT,SIGTERM").unwrap(),
            vec![libc::SIGTERM, libc::SIGINT]
        );
        assert!(parse_signals("USR1").is_err());
        assert!(parse_signals("SIGKILL")
            .unwrap_err()
            .contains("cannot be caught"));
        assert!(parse_signals("SIGCHLD").is_err());
    }

    #[test]
    fn template_like_python() {
        let vals = [("role_name", "trainer"), ("rank", "3"), ("local_rank", "1")];
        assert_eq!(
            safe_substitute("[${role_name}$rank/$local_rank] $x $$ ${y}", &vals),
            "[trainer3/1] $x $ ${y}"
        );
        assert_eq!(safe_substitute("$ranks", &vals), "$ranks");
    }
}
