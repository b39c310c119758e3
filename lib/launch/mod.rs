//! Starting and supervising the ranks of a run: the [`plan::Plan`] (per-rank argv and environment),
//! [`supervise::supervise`] (process groups, signals, fail-fast, restarts, logs) and rendezvous
//! [`ports`]. Any tool can launch any worker argv with `Plan::local(n, argv, env)` + `supervise`.

pub mod plan;
pub mod ports;
pub mod supervise;

pub use plan::{Plan, RankSpec};
pub use supervise::{supervise, Console, Options};

use std::ffi::OsString;
use std::path::Path;

use crate::config::{self, CliValue};
use crate::contract::accelerate::{Machine, MergeInput};
use crate::contract::{LaunchArgs, Paradigm};
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
