//! Runs `accel-launch`: resolve the config as accelerate would, place this node in the job (flags,
//! SLURM, outside variables), render every rank's contract, then either print it (`--dry-run`), hand
//! the job to the engine that owns it (torchrun for elastic rendezvous, deepspeed/mpirun for hostfile
//! runs) or start and supervise the ranks.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use crate::cli::launch::LaunchCli;
use crate::config;
use crate::contract::accelerate::{Machine, MergeInput};
use crate::contract::scheduler::Source;
use crate::contract::{ContractError, EnvMap, LaunchArgs, LaunchPath, Paradigm, Topology};
use crate::env_vars::{self, Environment};
use crate::error::{warn, Error, Result};
use crate::exit_status::ExitStatus;
use crate::launch::{self, ports, Plan};

const TOOL: &str = "accel-launch";

fn usage(msg: impl Into<String>, hint: impl Into<String>) -> Error {
    Error::msg_hint(ExitStatus::Usage, msg, hint)
}

pub fn run(cli: LaunchCli, env: &Environment) -> Result<ExitStatus> {
    let Some(script) = cli.command.first().cloned() else {
        return Err(usage(
            "no training script given",
            "usage: accel-launch [OPTIONS] SCRIPT [ARGS]...",
        ));
    };
    if script.to_string_lossy().starts_with('-') && script != "-" {
        return Err(usage(
            format!("unknown option `{}`", script.to_string_lossy()),
            "`accel-launch --help` lists the options; put the script before its own arguments",
        ));
    }
    if cli.module && cli.no_python {
        return Err(usage(
            "--module and --no_python cannot be used together",
            "pick one",
        ));
    }
    if cli.tpu || cli.tpu_cluster {
        return Err(usage(
            "TPU launches are not supported by accel-launch",
            "use `accelerate launch --tpu`",
        ));
    }
    if cli.aws_access_key_id.is_some() || cli.aws_secret_access_key.is_some() {
        return Err(usage(
            "SageMaker launches are not supported by accel-launch",
            "use `accelerate launch`",
        ));
    }

    // Which file: accelerate ignores the *default* config file with --cpu (an explicit one is read).
    let explicit =
        cli.config_file.is_some() || env.non_empty(env_vars::ACCEL_CONFIG_FILE).is_some();
    let loaded = match config::choose_file(cli.config_file.as_deref(), env) {
        Some((path, _)) if explicit || !cli.cpu => Some(config::load(&path)?),
        _ => None,
    };
    let resolved = config::Resolved::resolve(loaded.as_ref(), env, &cli.config_values())?;
    for w in &resolved.warnings {
        warn(TOOL, &w.0, env);
    }
    let machine = Machine {
        gpus: visible_gpus(env),
        physical_cores: crate::devices::detect_cpu().physical_cores.max(1) as u32,
    };
    let mut args = LaunchArgs::merge(MergeInput {
        resolved: &resolved,
        loaded: loaded.as_ref(),
        paradigm: Paradigm {
            cpu: cli.cpu,
            multi_gpu: cli.multi_gpu,
            tpu: cli.tpu,
            use_deepspeed: cli.use_deepspeed,
            use_fsdp: cli.use_fsdp,
            use_megatron_lm: cli.use_megatron_lm,
            use_parallelism_config: cli.use_parallelism_config,
        },
        num_cpu_threads_per_process: cli.num_cpu_threads_per_process,
        machine,
        env,
    })?;

    let source = launch::place_node(env, &resolved, loaded.is_some(), &mut args)?;

    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let mut common = args.accelerate_env(env, &cwd)?;
    // torchrun sets OMP_NUM_THREADS=1 for its workers when it is unset and more than one runs; only the
    // DeepSpeed path leaves it to torchrun (accelerate sets it everywhere else).
    if args.path == LaunchPath::DeepSpeed
        && args.num_local_processes() > 1
        && env.get(env_vars::OMP_NUM_THREADS).is_none()
    {
        common.insert(env_vars::OMP_NUM_THREADS.into(), "1".into());
    }
    let argv = worker_argv(&cli, env, &args, &script)?;

    // Engines that own the job.
    if args.rdzv_backend != "static" {
        return delegate(
            env,
            "torchrun",
            torchrun_args(&cli, &args, &script)?,
            &common,
            cli.dry_run,
        );
    }
    if args.path == LaunchPath::DeepSpeed && args.num_machines > 1 {
        let launcher = args
            .values
            .get("deepspeed_multinode_launcher")
            .and_then(Value::as_str)
            .unwrap_or("pdsh")
            .to_string();
        if launcher != "standard" {
            return delegate(
                env,
                "deepspeed",
                deepspeed_args(&cli, &args, &launcher, &script)?,
                &common,
                cli.dry_run,
            );
        }
    }
    let hostfile = args
        .values
        .get("mpirun_hostfile")
        .and_then(Value::as_str)
        .map(str::to_string);
    if args.path == LaunchPath::Simple {
        if let Some(h) = hostfile {
            let nppn = (args.num_processes / args.num_machines).max(1).to_string();
            let mut a: Vec<OsString> = [
                "--hostfile".into(),
                h.into(),
                "--npernode".into(),
                nppn.into(),
                "-n".into(),
                args.num_processes.to_string().into(),
                "--bind-to".into(),
                "socket".into(),
            ]
            .into();
            a.extend(argv.iter().cloned());
            return delegate(env, "mpirun", a, &common, cli.dry_run);
        }
    }

    // The node's topology.
    let nnodes = args.num_machines;
    let local = args.num_local_processes();
    let single_child = args.path == LaunchPath::Simple && args.num_processes == 1 && nnodes == 1;
    let mut port_auto = false;
    let topology = if single_child {
        None
    } else {
        let node_rank = match (nnodes, args.machine_rank) {
            (1, r) => r.unwrap_or(0),
            (_, Some(r)) => r,
            (_, None) => {
                return Err(ContractError::Topology(format!(
                    "{nnodes} machines but no --machine_rank for this one"
                ))
                .into())
            }
        };
        if node_rank >= nnodes {
            return Err(ContractError::Topology(format!(
                "--machine_rank {node_rank} is not below --num_machines {nnodes}"
            ))
            .into());
        }
        let master_addr = if nnodes > 1 {
            args.main_process_ip.clone().ok_or_else(|| ContractError::Topology(
                format!("{nnodes} machines but no --main_process_ip (the address of the machine with rank 0)"),
            ))?
        } else {
            args.main_process_ip
                .clone()
                .unwrap_or_else(|| "127.0.0.1".into())
        };
        let port = match args.main_process_port.filter(|p| *p != 0) {
            Some(p) => {
                if node_rank == 0 && !cli.dry_run {
                    ports::check_free(p)?;
                }
                p
            }
            None if nnodes == 1 => {
                port_auto = true;
                ports::free_port()?
            }
            None => 29500,
        };
        Some(Topology {
            local_world_size: local,
            node_rank,
            num_nodes: nnodes,
            master_addr,
            master_port: port,
            run_id: "none".into(),
            role: cli.role.clone(),
            max_restarts: cli.max_restarts,
        })
    };
    let plan = Plan::build(topology, &argv, &common, port_auto, env);

    if cli.dry_run {
        return dry_run(&cli, &resolved, &args, &plan, source);
    }

    let grace = cli
        .grace_period
        .or_else(|| {
            env.non_empty(env_vars::ACCEL_LAUNCH_GRACE)
                .and_then(|g| g.trim().parse().ok())
        })
        .unwrap_or(30.0);
    let filter = match &cli.local_ranks_filter {
        None => None,
        Some(s) => Some(
            s.split(',')
                .filter(|x| !x.trim().is_empty())
                .map(|x| {
                    x.trim().parse::<u32>().map_err(|_| {
                        usage(
                            format!("--local_ranks_filter: `{x}` is not a rank"),
                            "e.g. --local_ranks_filter 0,1",
                        )
                    })
                })
                .collect::<Result<Vec<_>>>()?,
        ),
    };
    let prefix = cli
        .rank_prefix
        .clone()
        .or_else(|| (cli.tee != "0").then(|| "[{role}{local_rank}]:".to_string()));
    let opts = launch::Options {
        tool: TOOL,
        grace: Duration::from_secs_f64(grace.max(0.0)),
        monitor_interval: Duration::from_secs_f64(cli.monitor_interval.clamp(0.001, 60.0)),
        max_restarts: cli.max_restarts,
        log_dir: cli.log_dir.clone(),
        log_template: cli.log_template.clone(),
        console: launch::Console {
            prefix,
            local_ranks: filter,
        },
        tail_lines: 20,
        quiet: cli.quiet,
        ..launch::Options::default()
    };
    launch::supervise(&plan, &opts, env)
}

/// GPUs this process may use: CUDA_VISIBLE_DEVICES when set, else what the driver reports.
fn visible_gpus(env: &Environment) -> u32 {
    if let Some(v) = env.get(env_vars::CUDA_VISIBLE_DEVICES) {
        return v
            .split(',')
            .filter(|s| !s.trim().is_empty() && !s.trim().starts_with('-'))
            .count() as u32;
    }
    crate::devices::detect_gpus(env).gpus.len() as u32
}

/// torchrun's worker argv (torch-contracts §A1); the plain child of accelerate's simple path has no `-u`.
fn worker_argv(
    cli: &LaunchCli,
    env: &Environment,
    args: &LaunchArgs,
    script: &OsString,
) -> Result<Vec<OsString>> {
    let rest = &cli.command[1..];
    let mut argv: Vec<OsString> = Vec::new();
    if cli.no_python {
        argv.push(script.clone());
    } else {
        let python = crate::python::find_python(env).ok_or_else(|| {
            Error::msg_hint(
                ExitStatus::NotFound,
                "no Python interpreter found (python3 or python on PATH)",
                "set ACCEL_PYTHON to the interpreter of your training environment",
            )
        })?;
        argv.push(python.into_os_string());
        if args.path != LaunchPath::Simple {
            argv.push("-u".into());
        }
        if cli.module {
            argv.push("-m".into());
        }
        argv.push(script.clone());
    }
    argv.extend(rest.iter().cloned());
    Ok(argv)
}

fn torchrun_args(cli: &LaunchCli, args: &LaunchArgs, script: &OsString) -> Result<Vec<OsString>> {
    let ip = args
        .main_process_ip
        .clone()
        .unwrap_or_else(|| "127.0.0.1".into());
    let port = args.main_process_port.filter(|p| *p != 0).unwrap_or(29400);
    let mut a: Vec<String> = vec![
        "--nnodes".into(),
        args.num_machines.to_string(),
        "--nproc_per_node".into(),
        args.num_local_processes().to_string(),
        "--rdzv_backend".into(),
        args.rdzv_backend.clone(),
        "--rdzv_endpoint".into(),
        format!("{ip}:{port}"),
        "--max_restarts".into(),
        cli.max_restarts.to_string(),
        "--monitor_interval".into(),
        cli.monitor_interval.to_string(),
        "--role".into(),
        cli.role.clone(),
        "--tee".into(),
        cli.tee.clone(),
    ];
    if !cli.rdzv_conf.is_empty() {
        a.extend(["--rdzv_conf".into(), cli.rdzv_conf.clone()]);
    }
    if let Some(d) = &cli.log_dir {
        a.extend(["--log_dir".into(), d.display().to_string()]);
    }
    if cli.module {
        a.push("-m".into());
    }
    if cli.no_python {
        a.push("--no_python".into());
    }
    let mut out: Vec<OsString> = a.into_iter().map(OsString::from).collect();
    out.push(script.clone());
    out.extend(cli.command[1..].iter().cloned());
    Ok(out)
}

fn deepspeed_args(
    cli: &LaunchCli,
    args: &LaunchArgs,
    launcher: &str,
    script: &OsString,
) -> Result<Vec<OsString>> {
    let s = |k: &str| {
        args.values
            .get(k)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let hostfile = s("deepspeed_hostfile").ok_or_else(|| {
        usage(
            "multi-node DeepSpeed needs a hostfile",
            "pass --deepspeed_hostfile, or --deepspeed_multinode_launcher standard",
        )
    })?;
    let mut a: Vec<String> = vec!["--hostfile".into(), hostfile];
    if launcher == "nossh" {
        a.extend([
            "--node_rank".into(),
            args.machine_rank.unwrap_or(0).to_string(),
            "--no_ssh".into(),
        ]);
    } else {
        a.extend([
            "--no_local_rank".into(),
            "--launcher".into(),
            launcher.into(),
        ]);
    }
    if let Some(x) = s("deepspeed_exclusion_filter") {
        a.extend(["--exclude".into(), x]);
    } else if let Some(x) = s("deepspeed_inclusion_filter") {
        a.extend(["--include".into(), x]);
    } else {
        a.extend(["--num_gpus".into(), args.num_local_processes().to_string()]);
    }
    if let Some(ip) = &args.main_process_ip {
        a.extend(["--master_addr".into(), ip.clone()]);
    }
    a.extend([
        "--master_port".into(),
        args.main_process_port
            .filter(|p| *p != 0)
            .unwrap_or(29500)
            .to_string(),
    ]);
    if cli.module {
        a.push("--module".into());
    }
    if cli.no_python {
        a.push("--no_python".into());
    }
    let mut out: Vec<OsString> = a.into_iter().map(OsString::from).collect();
    out.push(script.clone());
    out.extend(cli.command[1..].iter().cloned());
    Ok(out)
}

/// Execs another launcher with accelerate's variables (it then owns the job and its signals).
fn delegate(
    env: &Environment,
    program: &str,
    args: Vec<OsString>,
    common: &EnvMap,
    dry_run: bool,
) -> Result<ExitStatus> {
    let path = env
        .get(env_vars::PATH)
        .and_then(|p| which::which_in(program, Some(p), "/").ok())
        .ok_or_else(|| {
            Error::msg_hint(
                ExitStatus::NotFound,
                format!("this run needs `{program}`, which is not installed (not on PATH)"),
                match program {
                    "torchrun" => {
                        "install torch in the environment on PATH, or use --rdzv_backend static"
                    }
                    "deepspeed" => {
                        "pip install deepspeed, or use --deepspeed_multinode_launcher standard"
                    }
                    _ => "install Open MPI or MPICH (mpirun), or drop --mpirun_hostfile",
                },
            )
        })?;
    if dry_run {
        let mut text = format!(
            "# delegated to {}\n{}",
            path.display(),
            shell_quote(path.as_os_str())
        );
        for a in &args {
            text.push(' ');
            text.push_str(&shell_quote(a));
        }
        text.push('\n');
        for (k, v) in common {
            text.push_str(&format!("{k}={v}\n"));
        }
        crate::tools::print(&text)?;
        return Ok(ExitStatus::Success);
    }
    if program == "deepspeed" {
        // The deepspeed launcher ships this file's variables to every node.
        let file = env
            .non_empty(env_vars::DS_ENV_FILE)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(".deepspeed_env"));
        let existing = std::fs::read_to_string(&file).unwrap_or_default();
        let (text, skipped) = crate::contract::accelerate::merge_deepspeed_env(&existing, common);
        std::fs::write(&file, text).map_err(|e| crate::error::IoError::new("write", &file, e))?;
        for k in skipped {
            warn(TOOL, &format!("{k} is not written to {} (DeepSpeed refuses empty values and values with spaces or ;<>)", file.display()), env);
        }
    }
    let err = std::process::Command::new(&path)
        .args(&args)
        .envs(common)
        .exec();
    Err(Error::msg(
        ExitStatus::CannotExecute,
        format!("cannot run `{}`: {err}", path.display()),
    ))
}

fn shell_quote(s: &std::ffi::OsStr) -> String {
    let s = s.to_string_lossy();
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
    {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn dry_run(
    cli: &LaunchCli,
    resolved: &config::Resolved,
    args: &LaunchArgs,
    plan: &Plan,
    source: Source,
) -> Result<ExitStatus> {
    let config: Vec<Value> = resolved
        .entries()
        .into_iter()
        .map(|(k, v, o)| json!({"key": k, "value": v, "origin": o.to_string()}))
        .collect();
    let ranks: Vec<Value> = plan
        .ranks
        .iter()
        .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
        .collect();
    let launch = json!({
        "path": args.path,
        "num_processes": args.num_processes,
        "num_machines": args.num_machines,
        "machine_rank": plan.topology.as_ref().map(|t| t.node_rank),
        "topology_source": source,
        "master_addr": plan.topology.as_ref().map(|t| t.master_addr.clone()),
        "master_port": plan.topology.as_ref().map(|t| t.master_port),
        "port_auto": plan.port_auto,
        "defaulted": args.defaulted,
    });
    if cli.json {
        let v = json!({"config": config, "launch": launch, "ranks": ranks});
        crate::tools::print(&(serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"))?;
        return Ok(ExitStatus::Success);
    }
    let mut o = String::from("# resolved config (value, origin)\n");
    for c in &config {
        let v = match &c["value"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        o.push_str(&format!(
            "{} = {}  ({})\n",
            c["key"].as_str().unwrap_or(""),
            v,
            c["origin"].as_str().unwrap_or("")
        ));
    }
    o.push_str(&format!(
        "\n# launch\npath = {:?}\nnum_processes = {}\nnum_machines = {}\ntopology from = {:?}\n",
        args.path, args.num_processes, args.num_machines, source
    ));
    for d in &args.defaulted {
        o.push_str(&format!("no config file: {}\n", d.trim_start_matches('\t')));
    }
    if let Some(t) = &plan.topology {
        o.push_str(&format!(
            "machine_rank = {}\nrendezvous = {}:{}{}\n",
            t.node_rank,
            t.master_addr,
            t.master_port,
            if plan.port_auto {
                " (free port picked now; another is picked at launch)"
            } else {
                ""
            }
        ));
    }
    for r in &plan.ranks {
        o.push_str(&format!(
            "\n# rank {} (local rank {})\nargv =",
            r.rank, r.local_rank
        ));
        for a in &r.argv {
            o.push(' ');
            o.push_str(&shell_quote(a));
        }
        o.push('\n');
        for (k, v) in &r.env {
            o.push_str(&format!("{k}={v}\n"));
        }
    }
    crate::tools::print(&o)?;
    Ok(ExitStatus::Success)
}
