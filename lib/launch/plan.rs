//! A run as data: for each local rank, its argv and the variables it gets on top of the launcher's
//! environment. Built once, printed by `--dry-run`, and handed to [`super::supervise`]; `accel-test`
//! builds one with [`Plan::local`] for any worker argv.

use std::ffi::OsString;

use serde::Serialize;

use super::ports::{self, PortError};
use crate::contract::{self, EnvMap, Topology};
use crate::env_vars::{self, Environment};

/// One local rank.
#[derive(Debug, Clone, Serialize)]
pub struct RankSpec {
    pub rank: u32,
    pub local_rank: u32,
    #[serde(serialize_with = "lossy_argv")]
    pub argv: Vec<OsString>,
    /// Variables set for this rank on top of the launcher's environment.
    pub env: EnvMap,
    /// `--numa_binding`: the CPUs the rank is pinned to before it starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa_cpus: Option<crate::launch::numa::CpuList>,
}

fn lossy_argv<S: serde::Serializer>(argv: &[OsString], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(argv.iter().map(|a| a.to_string_lossy()))
}

/// Every local rank of a run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub ranks: Vec<RankSpec>,
    /// The torchrun contract the ranks get; `None` for accelerate's single plain child (one process,
    /// not distributed), which gets no rank variables at all.
    pub topology: Option<Topology>,
    /// The port was picked here, so a lost race (EADDRINUSE in rank 0) is retried with another.
    pub port_auto: bool,
    /// This host's name, for failure reports.
    pub host: String,
    /// Variables of the launcher's environment the ranks do not inherit ([`withheld_from_ranks`]).
    pub withheld: Vec<&'static str>,
}

/// The launcher's variables its ranks do not inherit: the control plane's secret is the
/// launchers' alone (a rank's environment reaches its children, its own logs and dumps, and
/// whatever reads /proc/PID/environ as that user), unless `ACCEL_LAUNCH_SECRET_TO_RANKS=1` asks
/// for it.
pub fn withheld_from_ranks(launcher_env: &Environment) -> Vec<&'static str> {
    if launcher_env.get(env_vars::ACCEL_LAUNCH_SECRET_TO_RANKS) == Some("1") {
        return Vec::new();
    }
    vec![
        env_vars::ACCEL_LAUNCH_SECRET,
        env_vars::ACCEL_LAUNCH_SECRET_FILE,
    ]
}

/// torchrun's `string.Template(arg).safe_substitute(local_rank=n)`.
pub fn substitute_local_rank(arg: &OsString, local_rank: u32) -> OsString {
    match arg.to_str() {
        Some(s) if s.contains('$') => OsString::from(crate::launch::torchrun::safe_substitute(
            s,
            &[("local_rank", &local_rank.to_string())],
        )),
        _ => arg.clone(),
    }
}

impl Plan {
    /// The ranks of this node: `common` (accelerate's variables) plus, with a topology, torchrun's
    /// worker variables for each local rank. Restart count and error file are filled in per attempt.
    pub fn build(
        topology: Option<Topology>,
        argv: &[OsString],
        common: &EnvMap,
        port_auto: bool,
        launcher_env: &Environment,
    ) -> Plan {
        let n = topology.as_ref().map_or(1, |t| t.local_world_size);
        let ranks = (0..n)
            .map(|lr| {
                let mut env = common.clone();
                if let Some(t) = &topology {
                    env.extend(contract::worker_env(t, lr, 0, None, launcher_env));
                }
                RankSpec {
                    rank: topology.as_ref().map_or(0, |t| t.rank_of(lr)),
                    local_rank: lr,
                    argv: argv.iter().map(|a| substitute_local_rank(a, lr)).collect(),
                    env,
                    numa_cpus: None,
                }
            })
            .collect();
        Plan {
            ranks,
            topology,
            port_auto,
            host: crate::host::hostname(),
            withheld: withheld_from_ranks(launcher_env),
        }
    }

    /// `nprocs` ranks of `argv` on this machine, rank 0 hosting the store on 127.0.0.1 at a free port;
    /// `common` is added to every rank (e.g. `ACCELERATE_USE_CPU`). The entry point for other tools.
    pub fn local(
        nprocs: u32,
        argv: &[OsString],
        common: &EnvMap,
        launcher_env: &Environment,
    ) -> Result<Plan, PortError> {
        let t = Topology {
            local_world_size: nprocs.max(1),
            node_rank: 0,
            num_nodes: 1,
            master_addr: "127.0.0.1".into(),
            master_port: ports::free_port()?,
            run_id: "none".into(),
            role: "default".into(),
            max_restarts: 0,
            assembled: None,
        };
        Ok(Plan::build(Some(t), argv, common, true, launcher_env))
    }

    /// Moves the rendezvous to another port (after a lost port race).
    pub fn set_port(&mut self, port: u16) {
        if let Some(t) = &mut self.topology {
            t.master_port = port;
        }
        for r in &mut self.ranks {
            if r.env.contains_key(env_vars::MASTER_PORT) {
                r.env.insert(env_vars::MASTER_PORT.into(), port.to_string());
            }
        }
    }

    /// `--virtual-local-rank` (`local_elastic_agent.py::_set_local_rank_env`): every worker gets
    /// LOCAL_RANK=0 and, as CUDA_VISIBLE_DEVICES, the entry of the node's list at its local rank (the
    /// list as the ranks would inherit it; without one, the local rank itself). The real local rank
    /// stays where torchrun keeps it: `${local_rank}` in the arguments, the log directory
    /// `attempt_N/<local rank>/`, the console prefix and the NUMA binding's GPU.
    pub fn virtual_local_rank(&mut self, env: &Environment) -> Result<(), String> {
        for r in &mut self.ranks {
            let parent = r
                .env
                .get(env_vars::CUDA_VISIBLE_DEVICES)
                .cloned()
                .or_else(|| env.get(env_vars::CUDA_VISIBLE_DEVICES).map(str::to_string));
            let gpu = match &parent {
                Some(list) => {
                    let gpus: Vec<&str> = list.split(',').collect();
                    match gpus.get(r.local_rank as usize) {
                        Some(g) => g.trim().to_string(),
                        None => {
                            return Err(format!(
                                "--virtual_local_rank: local rank {} has no GPU in CUDA_VISIBLE_DEVICES={list}",
                                r.local_rank
                            ))
                        }
                    }
                }
                None => r.local_rank.to_string(),
            };
            r.env.insert(env_vars::LOCAL_RANK.into(), "0".into());
            r.env.insert(env_vars::CUDA_VISIBLE_DEVICES.into(), gpu);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_rank_substitution_like_python_template() {
        let s = |a: &str| {
            substitute_local_rank(&OsString::from(a), 3)
                .into_string()
                .unwrap()
        };
        assert_eq!(s("--out=/x/${local_rank}.log"), "--out=/x/3.log");
        assert_eq!(s("$local_rank"), "3");
        assert_eq!(s("$local_ranks"), "$local_ranks");
        assert_eq!(s("cost $$5"), "cost $5");
        assert_eq!(s("$HOME"), "$HOME");
    }

    #[test]
    fn local_plan_has_a_contract_per_rank() {
        let argv = [OsString::from("python"), OsString::from("x.py")];
        let p = Plan::local(3, &argv, &EnvMap::new(), &Environment::default()).unwrap();
        assert_eq!(p.ranks.len(), 3);
        assert_eq!(p.ranks[2].env["RANK"], "2");
        assert_eq!(p.ranks[2].env["WORLD_SIZE"], "3");
        let mut p = p;
        p.set_port(4242);
        assert_eq!(p.ranks[1].env["MASTER_PORT"], "4242");
    }
}
