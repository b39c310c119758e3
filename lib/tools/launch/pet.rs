//! torchrun's `PET_<OPTION>` variables (torch 2.13's `torch/distributed/argparse_util.py`: `env` and
//! `check_env`): each is the default of that option of torchrun's command line (its long name in
//! capitals, dashes as underscores: `PET_NPROC_PER_NODE`), used where the command line does not give
//! the option. Kubeflow Trainer v2 starts torchrun with its flags as these variables.
//!
//! They are torchrun's command line: a run given them and nothing that asks for accelerate's run is
//! torchrun's run, and there every `PET_<OPTION>` is the default of its flag. Kubeflow's placement
//! (`PET_NNODES` with `PET_NODE_RANK`, `PET_MASTER_ADDR`, `PET_MASTER_PORT` and `PET_NPROC_PER_NODE`)
//! places the node in either run ([`crate::contract::scheduler`]) and by itself asks for neither;
//! accelerate's run reads nothing else of them (`accelerate launch` reads no `PET_` variable).

use clap::Parser;

use crate::cli::launch::{Given, LaunchCli};
use crate::config::CliValue;
use crate::env_vars::{self, Environment};
use crate::error::Result;

use super::error::LaunchError;

/// The options torchrun reads from `PET_<OPTION>` (all but `--logs_specs` and `--numa_binding`),
/// by clap id, which is torchrun's `dest`; `true` for a switch (`check_env`: a whole number, 0 off).
const OPTIONS: &[(&str, bool)] = &[
    ("nnodes", false),
    ("nproc_per_node", false),
    ("rdzv_backend", false),
    ("rdzv_endpoint", false),
    ("rdzv_id", false),
    ("rdzv_conf", false),
    ("standalone", true),
    ("max_restarts", false),
    ("monitor_interval", false),
    ("start_method", false),
    ("event_log_handler", false),
    ("role", false),
    ("module", true),
    ("no_python", true),
    ("run_path", true),
    ("log_dir", false),
    ("redirects", false),
    ("tee", false),
    ("local_ranks_filter", false),
    ("duplicate_stdout_filters", false),
    ("duplicate_stderr_filters", false),
    ("node_rank", false),
    ("master_addr", false),
    ("master_port", false),
    ("local_addr", false),
    ("signals_to_handle", false),
    ("shutdown_timeout", false),
    ("virtual_local_rank", true),
];

/// Kubeflow's placement: with `PET_NNODES` set these describe where the node is, in either run.
const PLACEMENT: &[&str] = &[
    "nnodes",
    "node_rank",
    "master_addr",
    "master_port",
    "nproc_per_node",
];

/// One `PET_<OPTION>` set for an option the command line does not give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PetDefault {
    pub id: &'static str,
    pub var: String,
    pub value: String,
    switch: bool,
}

/// The `PET_<OPTION>` variables set (and not empty) for options the command line does not give.
pub fn defaults(given: &Given, env: &Environment) -> Vec<PetDefault> {
    OPTIONS
        .iter()
        .filter(|(id, _)| !given.contains(id))
        .filter_map(|&(id, switch)| {
            let var = format!("{}{}", env_vars::PET_OPTION_PREFIX, id.to_ascii_uppercase());
            let value = env.non_empty(&var)?.trim().to_string();
            Some(PetDefault {
                id,
                var,
                value,
                switch,
            })
        })
        .collect()
}

/// Whether these ask for torchrun's run: any of them but Kubeflow's placement.
pub fn ask_for_torchrun(found: &[PetDefault], env: &Environment) -> bool {
    let kubeflow = env.non_empty(env_vars::PET_NNODES).is_some();
    found
        .iter()
        .any(|d| !(kubeflow && PLACEMENT.contains(&d.id)))
}

/// torchrun's run: each default into the command line, parsed as its flag would be (a value the
/// flag refuses is refused naming the variable); `rdzv_backend`, a config value, comes back as one.
pub fn apply(cli: &mut LaunchCli, found: &[PetDefault]) -> Result<Vec<CliValue>, LaunchError> {
    let mut values = Vec::new();
    for d in found {
        let arg = if d.switch {
            match d.value.parse::<i64>() {
                Ok(0) => continue,
                Ok(_) => format!("--{}", d.id),
                Err(_) => {
                    return Err(LaunchError::PetVar {
                        var: d.var.clone(),
                        why: format!("`{}` is not a whole number (0 is off)", d.value),
                    })
                }
            }
        } else {
            format!("--{}={}", d.id, d.value)
        };
        let p = LaunchCli::try_parse_from(["accel-launch", &arg, "x"]).map_err(|e| {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            LaunchError::PetVar {
                var: d.var.clone(),
                why: first.trim_start_matches("error: ").to_string(),
            }
        })?;
        take(cli, p, d, &mut values);
    }
    Ok(values)
}

/// The option `d` names, from the command line `p` it was parsed into.
fn take(cli: &mut LaunchCli, p: LaunchCli, d: &PetDefault, values: &mut Vec<CliValue>) {
    let config = p.config_values();
    let (t, pt) = (&mut cli.torchrun, p.torchrun);
    match d.id {
        "nnodes" => t.nnodes = pt.nnodes,
        "nproc_per_node" => t.nproc_per_node = pt.nproc_per_node,
        "rdzv_endpoint" => t.rdzv_endpoint = pt.rdzv_endpoint,
        "rdzv_id" => t.rdzv_id = pt.rdzv_id,
        "standalone" => t.standalone = pt.standalone,
        "start_method" => t.start_method = pt.start_method,
        "event_log_handler" => t.event_log_handler = pt.event_log_handler,
        "run_path" => t.run_path = pt.run_path,
        "redirects" => t.redirects = pt.redirects,
        "duplicate_stdout_filters" => t.duplicate_stdout_filters = pt.duplicate_stdout_filters,
        "duplicate_stderr_filters" => t.duplicate_stderr_filters = pt.duplicate_stderr_filters,
        "node_rank" => t.node_rank = pt.node_rank,
        "master_addr" => t.master_addr = pt.master_addr,
        "master_port" => t.master_port = pt.master_port,
        "local_addr" => t.local_addr = pt.local_addr,
        "signals_to_handle" => t.signals_to_handle = pt.signals_to_handle,
        "shutdown_timeout" => t.shutdown_timeout = pt.shutdown_timeout,
        "virtual_local_rank" => t.virtual_local_rank = pt.virtual_local_rank,
        "rdzv_conf" => cli.rdzv_conf = p.rdzv_conf,
        "max_restarts" => cli.max_restarts = p.max_restarts,
        "monitor_interval" => cli.monitor_interval = p.monitor_interval,
        "role" => cli.role = p.role,
        "module" => cli.module = p.module,
        "no_python" => cli.no_python = p.no_python,
        "log_dir" => cli.log_dir = p.log_dir,
        "tee" => cli.tee = p.tee,
        "local_ranks_filter" => cli.local_ranks_filter = p.local_ranks_filter,
        "rdzv_backend" => values.extend(config.into_iter().map(|v| CliValue {
            flag: d.var.clone(),
            ..v
        })),
        other => unreachable!("PET option `{other}` has no field"),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Environment {
        Environment::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    /// Every id is an option of accel-launch's command line, and every option of torchrun's that
    /// reads a `PET_` variable is listed (those of accelerate launch's command line are not).
    #[test]
    fn every_pet_option_is_an_option_here() {
        let cmd = LaunchCli::command();
        for (id, switch) in OPTIONS {
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_id() == id)
                .unwrap_or_else(|| panic!("{id} is no option"));
            assert_eq!(!arg.get_action().takes_values(), *switch, "{id}");
        }
        let torchrun = <crate::cli::torchrun::TorchrunFlags as clap::Args>::augment_args(
            clap::Command::new("t"),
        );
        for arg in torchrun.get_arguments() {
            let id = arg.get_id().as_str();
            assert!(
                OPTIONS.iter().any(|(o, _)| *o == id)
                    || ["logs_specs", "numa_binding"].contains(&id),
                "torchrun's --{id}: does torchrun read PET_{}?",
                id.to_ascii_uppercase()
            );
        }
    }

    #[test]
    fn a_flag_given_wins_over_its_variable() {
        let e = env(&[("PET_NPROC_PER_NODE", "3"), ("PET_ROLE", "trainer")]);
        let given = Given(vec!["role".into()]);
        let found = defaults(&given, &e);
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].id, found[0].value.as_str()),
            ("nproc_per_node", "3")
        );
    }

    #[test]
    fn kubeflow_placement_alone_asks_for_neither_run() {
        let placement = env(&[
            ("PET_NNODES", "2"),
            ("PET_NODE_RANK", "1"),
            ("PET_MASTER_ADDR", "h"),
            ("PET_MASTER_PORT", "29400"),
            ("PET_NPROC_PER_NODE", "2"),
        ]);
        let found = defaults(&Given::default(), &placement);
        assert_eq!(found.len(), 5);
        assert!(!ask_for_torchrun(&found, &placement));
        let mut more = placement.clone();
        more.set("PET_MAX_RESTARTS", "2");
        assert!(ask_for_torchrun(&defaults(&Given::default(), &more), &more));
        // Without PET_NNODES, PET_NPROC_PER_NODE is torchrun's option, as under torchrun.
        let nproc = env(&[("PET_NPROC_PER_NODE", "3")]);
        assert!(ask_for_torchrun(
            &defaults(&Given::default(), &nproc),
            &nproc
        ));
    }

    #[test]
    fn defaults_are_parsed_as_their_flags_and_refused_naming_the_variable() {
        let mut cli = LaunchCli::try_parse_from(["accel-launch", "x.py"]).unwrap();
        let e = env(&[
            ("PET_NPROC_PER_NODE", "3"),
            ("PET_STANDALONE", "1"),
            ("PET_RUN_PATH", "0"),
            ("PET_MAX_RESTARTS", "2"),
            ("PET_ROLE", "trainer"),
            ("PET_TEE", "3"),
            ("PET_LOG_DIR", "/tmp/l"),
            ("PET_RDZV_BACKEND", "c10d"),
        ]);
        let found = defaults(&cli.given, &e);
        let values = apply(&mut cli, &found).unwrap();
        assert_eq!(
            cli.torchrun.nproc_per_node,
            Some(crate::launch::torchrun::NprocPerNode::Count(3))
        );
        assert!(cli.torchrun.standalone && !cli.torchrun.run_path);
        assert_eq!(
            (cli.max_restarts, cli.role.as_str(), cli.tee.as_str()),
            (2, "trainer", "3")
        );
        assert_eq!(cli.log_dir.as_deref(), Some(std::path::Path::new("/tmp/l")));
        assert_eq!(values.len(), 1);
        assert_eq!(
            (values[0].key.as_str(), values[0].flag.as_str()),
            ("rdzv_backend", "PET_RDZV_BACKEND")
        );
        for (var, value, why) in [
            ("PET_NNODES", "0", "PET_NNODES"),
            ("PET_STANDALONE", "yes", "not a whole number"),
            ("PET_TEE", "9", "PET_TEE"),
        ] {
            let mut cli = LaunchCli::try_parse_from(["accel-launch", "x.py"]).unwrap();
            let e = env(&[(var, value)]);
            let err = apply(&mut cli, &defaults(&Given::default(), &e)).unwrap_err();
            assert!(err.to_string().contains(why), "{var}={value}: {err}");
        }
    }
}
