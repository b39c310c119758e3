//! Starting and supervising the ranks of a run: the [`plan::Plan`] (per-rank argv and environment),
//! [`supervise::supervise`] (process groups, signals, fail-fast, restarts, logs) and rendezvous
//! [`ports`]. Any tool can launch any worker argv with `Plan::local(n, argv, env)` + `supervise`;
//! one that reads its ranks' output itself (accel-test) uses [`supervise::run`] with a [`Capture`].

pub mod plan;
pub mod ports;
pub mod supervise;

pub use plan::{Plan, RankSpec};
pub use supervise::{
    run, supervise, Capture, Captured, Console, OnFailure, Options, RankEnd, RankResult, RunOutcome,
};

use std::ffi::OsString;
use std::path::Path;

use crate::config::{self, CliValue, Origin, Resolved};
use crate::contract::accelerate::{Machine, MergeInput};
use crate::contract::scheduler::{self, Source};
use crate::contract::{ContractError, LaunchArgs, LaunchPath, Paradigm};
use crate::env_vars;
use crate::env_vars::Environment;
use crate::error::Result;

/// A single-node plan as `accel-launch` would make it for `worker_argv` (already including the
/// interpreter): the config resolved from `config_file` (or the default path, or the embedded default)
/// with `cli` values on top, accelerate's variables for it, and torchrun's per rank on 127.0.0.1 with a
/// free port. For tools that launch their own workers (accel-test).
pub fn plan(
    config_file: Option<&Path>,
    cli: &[CliValue],
    paradigm: Paradigm,
    worker_argv: &[OsString],
    env: &Environment,
) -> Result<Plan> {
    let loaded = match config::choose_file(config_file, env) {
        Some((p, _)) => Some(config::load(&p)?),
        None => None,
    };
    let resolved = config::Resolved::resolve(loaded.as_ref(), env, cli)?;
    let args = LaunchArgs::merge(MergeInput {
        resolved: &resolved,
        loaded: loaded.as_ref(),
        paradigm,
        num_cpu_threads_per_process: None,
        machine: Machine {
            gpus: crate::devices::detect_gpus(env).gpus.len() as u32,
            physical_cores: crate::devices::detect_cpu().physical_cores.max(1) as u32,
        },
        env,
    })?;
    let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
    let common = args.accelerate_env(env, &cwd)?;
    let mut p = Plan::local(args.num_processes, worker_argv, &common, env)?;
    if args.num_processes == 1 && args.path == crate::contract::LaunchPath::Simple {
        // accelerate's single plain child: no rank variables.
        p = Plan::build(None, worker_argv, &common, false, env);
    }
    Ok(p)
}

/// Where this node sits in the job, applied to `args`: the flags and config win, then SLURM, MPI or
/// Kubernetes-style variables fill in the machine count, this machine's rank and the rendezvous —
/// checked for an inconsistent topology before anything is spawned. Shared by accel-launch and
/// accel-test so both see the same world. `have_file`: a config file was read (its num_processes is
/// the total over all nodes, as in accelerate).
pub fn place_node(
    env: &Environment,
    resolved: &Resolved,
    have_file: bool,
    args: &mut LaunchArgs,
) -> Result<Source> {
    let mut source = Source::Flags;
    let explicit_machines = args.num_machines > 1;
    if !explicit_machines {
        if let Some(place) = scheduler::detect_node(env)? {
            if place.num_nodes > 1 {
                source = place.source;
                if place.source == Source::Slurm {
                    check_slurm_tasks(env, args, place.num_nodes)?;
                }
                let np_given = !matches!(
                    resolved.origin("num_processes"),
                    None | Some(Origin::Default) | Some(Origin::Derived(_))
                );
                if !np_given && !have_file {
                    args.num_processes *= place.num_nodes;
                }
                if args.num_processes % place.num_nodes != 0 {
                    return Err(ContractError::Topology(format!(
                        "num_processes ({}) is the total over all nodes and is not a multiple of the {} nodes",
                        args.num_processes, place.num_nodes
                    )).into());
                }
                args.num_machines = place.num_nodes;
                let rank_given = !matches!(
                    resolved.origin("machine_rank"),
                    None | Some(Origin::Default) | Some(Origin::Derived(_))
                );
                if !rank_given {
                    args.machine_rank = Some(place.node_rank);
                }
                if resolved
                    .origin("main_process_ip")
                    .is_none_or(|o| matches!(o, Origin::Default))
                {
                    args.main_process_ip =
                        place.master_addr.clone().or(args.main_process_ip.take());
                }
                if args.main_process_port.is_none() {
                    args.main_process_port = place.master_port;
                }
                if place.source == Source::Slurm {
                    let distinct = crate::slurm::SlurmJob::detect(env)
                        .ok()
                        .flatten()
                        .map(|j| {
                            j.nodes
                                .iter()
                                .collect::<std::collections::BTreeSet<_>>()
                                .len()
                        })
                        .unwrap_or(0);
                    if let Some(ip) = &args.main_process_ip {
                        if place.node_rank != 0 && distinct > 1 && scheduler::is_loopback(ip) {
                            return Err(ContractError::Topology(format!(
                                "the rendezvous host `{ip}` resolves to a loopback address on a {}-node job",
                                place.num_nodes
                            )).into());
                        }
                    }
                }
            }
        }
    }

    Ok(source)
}

pub(crate) fn check_slurm_tasks(env: &Environment, args: &LaunchArgs, nnodes: u32) -> Result<()> {
    if let Some(tpn) = env
        .non_empty(env_vars::SLURM_NTASKS_PER_NODE)
        .and_then(|v| v.split('(').next()?.parse::<u32>().ok())
    {
        if tpn > 1 {
            return Err(ContractError::Topology(format!(
                "srun started {tpn} tasks per node: accel-launch is one task per node and starts the ranks itself (use --ntasks-per-node=1, or `srun accel-env -- python train.py` for one task per GPU)"
            )).into());
        }
    }
    if args.path != LaunchPath::Simple {
        if let Some(g) = env
            .non_empty(env_vars::SLURM_GPUS_ON_NODE)
            .and_then(|v| v.parse::<u32>().ok())
        {
            let local = args.num_processes / nnodes.max(1);
            if g > 0 && local != g {
                return Err(ContractError::Topology(format!(
                    "{local} ranks per node but SLURM_GPUS_ON_NODE={g}"
                ))
                .into());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_for_a_cpu_config_has_accelerate_and_rank_variables() {
        let env = Environment::from_pairs([("HF_HOME", "/nonexistent-accel-test")]);
        let cli = [CliValue {
            key: "num_processes".into(),
            value: serde_json::Value::from(3),
            flag: "test".into(),
        }];
        let argv = [OsString::from("worker")];
        let p = plan(
            None,
            &cli,
            Paradigm {
                cpu: true,
                ..Paradigm::default()
            },
            &argv,
            &env,
        )
        .unwrap();
        assert_eq!(p.ranks.len(), 3);
        assert_eq!(p.ranks[2].env["RANK"], "2");
        assert_eq!(p.ranks[0].env["ACCELERATE_USE_CPU"], "True");
        assert!(p.port_auto);
    }
}
