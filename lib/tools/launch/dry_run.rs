//! `accel-launch --dry-run`: the resolved config with the origin of each value, the launch (who
//! starts the ranks, the topology, the control plane, the requeue) and each rank's argv and
//! environment, as text or JSON; nothing is run.

use std::time::Duration;

use serde_json::{json, Value};

use crate::contract::LaunchPath;
use crate::error::Result;
use crate::exit_status::{signal_name, ExitStatus};
use crate::launch::{control, Plan, Run};

use super::delegate::shell_quote;
use super::request::Request;

pub fn print(req: &Request, run: &Run, plan: &Plan, join_timeout: Duration) -> Result<ExitStatus> {
    let requeue_signal = req.requeue_signal;
    let (args, source) = (&run.args, run.source);
    let config: Vec<Value> = run
        .resolved
        .entries()
        .into_iter()
        .map(|(k, v, o)| json!({"key": k, "value": v, "origin": o.to_string()}))
        .collect();
    let ranks: Vec<Value> = plan
        .ranks
        .iter()
        .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
        .collect();
    // accelerate launch's path (a plain process, torchrun, deepspeed's torchrun) is what it would
    // start; here accel-launch starts and supervises every rank itself.
    let accelerate_path = match args.path {
        LaunchPath::Simple => "one plain process",
        LaunchPath::Torchrun => "torchrun",
        LaunchPath::DeepSpeed => "torchrun with DeepSpeed's variables",
    };
    let launch = json!({
        "started_by": "accel-launch",
        "accelerate_launch_would_use": accelerate_path,
        "num_processes": args.num_processes,
        "num_machines": args.num_machines,
        "machine_rank": plan.topology.as_ref().map(|t| t.node_rank),
        "topology_source": source,
        "master_addr": plan.topology.as_ref().map(|t| t.master_addr.clone()),
        "master_port": plan.topology.as_ref().map(|t| t.master_port),
        "port_auto": plan.port_auto,
        "control_plane": run.control.as_ref().map(|c| json!({
            "addr": c.addr,
            "port": c.port,
            "heartbeat_s": control::HEARTBEAT.as_secs_f64(),
            "lost_after_s": control::lost_after(control::HEARTBEAT).as_secs_f64(),
            "join_timeout_s": join_timeout.as_secs_f64(),
        })),
        "slurm_requeue": requeue_signal.map(|s| json!({
            "signal": signal_name(s),
            "requeued_by": "node 0",
        })),
        "defaulted": args.defaulted,
    });
    if req.json {
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
        "\n# launch\nstarted by = accel-launch (every rank its own child, supervised; no torchrun, deepspeed or mpirun process)\naccelerate launch would use = {accelerate_path}\nnum_processes = {}\nnum_machines = {}\ntopology from = {:?}\n",
        args.num_processes, args.num_machines, source
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
    if let Some(c) = &run.control {
        o.push_str(&format!(
            "control plane = {}:{} (master port + 1; hosted by node 0; heartbeat {} s, a node is lost after {} s of silence; join timeout {} s)\n",
            c.addr,
            c.port,
            control::HEARTBEAT.as_secs(),
            control::lost_after(control::HEARTBEAT).as_secs(),
            join_timeout.as_secs_f64()
        ));
        if req.torchrun.nproc_per_node.is_some() {
            o.push_str("world = assembled when every node has joined (ranks below assume every node runs this node's count)\n");
        }
        if let Some(t) = plan
            .topology
            .as_ref()
            .filter(|t| t.node_rank >= t.num_nodes)
        {
            o.push_str(&format!(
                "spare = node {} of a {}-node world: it runs no ranks until it takes the place of a lost node, whose node rank, RANKs and GROUP_RANK its ranks then get (those below are placeholders)\n",
                t.node_rank, t.num_nodes
            ));
        }
    }
    if let Some(s) = requeue_signal {
        o.push_str(&format!(
            "slurm_requeue = on {}: the ranks get the grace period, then node 0 runs `scontrol requeue $SLURM_JOB_ID`\n",
            signal_name(s)
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
