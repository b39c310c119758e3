//! The join of a multi-node run: this launcher meets the other nodes' launchers on the control plane
//! (node 0, master port + 1) before any rank starts, proven by the run's secret, or under SLURM by
//! MUNGE, and learns its place in the world (its ranks' offset, the world size). A join that fails
//! ends the run here: the error is rendered, SLURM's warning while joining requeues the job (node 0
//! asks), and `--report_json` says the run ended in the join. A spare (a node rank at or beyond
//! the world's) waits in the join until it takes a lost node's place, or the run ends: it then
//! exits with the world's status.

use std::sync::Arc;

use crate::contract::{Assembled, Topology};
use crate::env_vars::{self, Environment};
use crate::error::{render, Error, Result};
use crate::exit_status::ExitStatus;
use crate::launch::control::{self, ControlPlane, Link};
use crate::launch::requeue::Requeue;
use crate::launch::supervise::{self, Signals};

use super::report::{Report, Unstarted};
use super::request::{Request, Supervision};
use super::TOOL;

/// What the join left this launcher with.
pub enum Joined {
    /// In the world: the link to the other nodes; `topology` now holds this node's rank offset.
    Link(Arc<Link>),
    /// The run ended in the join, with this status (already reported).
    Ended(ExitStatus),
}

/// What the join needs of the run besides its place.
pub struct Context<'a> {
    pub req: &'a Request,
    pub sup: &'a Supervision,
    pub signals: Option<&'a Arc<Signals>>,
    pub requeue: Option<&'a Requeue>,
    pub env: &'a Environment,
}

/// Joins the other nodes' launchers; a join that fails is rendered, requeued when SLURM warned, and
/// written to the report (which is then used up).
pub fn join(
    cx: &Context<'_>,
    cp: &ControlPlane,
    t: &mut Topology,
    world_size: Option<u32>,
    report: &mut Option<Report>,
) -> Result<Joined> {
    let settings = settings(cx, cp, t, world_size)?;
    let noting = crate::launch::Options {
        tool: TOOL,
        quiet: cx.req.quiet,
        requeue_signal: cx.req.requeue_signal,
        ..crate::launch::Options::default()
    };
    let (node, host) = (t.node_rank, crate::host::hostname());
    let spare = node >= t.num_nodes;
    if spare && !cx.req.quiet {
        eprintln!(
            "{TOOL}: node {node} is a spare (the world has {} nodes): it runs no ranks until it takes the place of a lost node, and exits with the run's status",
            t.num_nodes
        );
        if cx.req.max_restarts == 0 {
            // A take-over is the world's next attempt: without one, a loss ends the run.
            crate::error::warn(
                TOOL,
                "--max_restarts 0: no node's place can be taken, since the world has no next attempt (give every node --max_restarts 1 or more)",
                cx.env,
            );
        }
    }
    let stopped = || {
        let sig = cx.signals?.next()?;
        supervise::stopped_between_attempts(&noting, node, &host, sig)
    };
    let (link, place) = match Link::join(&settings, stopped) {
        Ok(control::Joined::World(link, place)) => (link, place),
        Ok(control::Joined::Released(failure)) => {
            return Ok(Joined::Ended(released(cx, t, failure, report.take())))
        }
        Err(e) => return Ok(Joined::Ended(ended_in_join(cx, t, e, report.take()))),
    };
    t.node_rank = place.node;
    t.assembled = Some(Assembled {
        world_size: place.world_size,
        rank_offset: place.rank_offset,
    });
    if place.attempt > 0 && !cx.req.quiet {
        let who = if spare {
            format!(
                "spare node {node} takes the place of lost node {}",
                place.node
            )
        } else {
            format!("node {} replaces its lost launcher", place.node)
        };
        eprintln!(
            "{TOOL}: {who}: joining restart {} of {}",
            place.attempt, cx.req.max_restarts
        );
    }
    Ok(Joined::Link(Arc::new(link)))
}

/// The join's settings: how this launcher proves itself (the secret; else MUNGE under SLURM) and
/// what it tells node 0 of itself.
fn settings(
    cx: &Context<'_>,
    cp: &ControlPlane,
    t: &Topology,
    world_size: Option<u32>,
) -> Result<control::Settings> {
    let env = cx.env;
    // Set but empty is a secret too short, not none: an empty variable once meant no
    // authentication at all, silently.
    let secret = control::Secret::from_env(
        env.get(env_vars::ACCEL_LAUNCH_SECRET),
        env.get(env_vars::ACCEL_LAUNCH_SECRET_FILE),
    )?;
    // Under SLURM, MUNGE proves the run's launchers to each other with no configuration; a secret,
    // when set, takes precedence.
    let munge = match (&secret, env.non_empty(env_vars::SLURM_JOB_ID)) {
        (None, Some(_)) => match control::Munge::for_slurm(env.non_empty(env_vars::SLURM_CONF)) {
            Ok(m) => Some(m),
            Err(why) => {
                if t.node_rank == 0 && !cx.req.quiet {
                    eprintln!("{TOOL}: note: control plane: MUNGE cannot authenticate it: {why}");
                }
                None
            }
        },
        _ => None,
    };
    let sup = cx.sup;
    Ok(control::Settings {
        addr: cp.addr.clone(),
        port: cp.port,
        secret,
        munge,
        quiet: cx.req.quiet,
        join: control::Join {
            protocol: control::PROTOCOL,
            run_id: cp.run_id.clone(),
            node: t.node_rank,
            nodes: t.num_nodes,
            local_ranks: t.local_world_size,
            host: crate::host::hostname(),
            max_restarts: cx.req.max_restarts,
            hang_timeout_ms: sup.hang_timeout.map(|d| d.as_millis() as u64),
            grace_ms: match sup.grace {
                crate::duration::Wait::Never => None,
                g => Some(g.as_duration().as_millis() as u64),
            },
            world_size,
        },
        join_timeout: sup.join_timeout,
        heartbeat: control::HEARTBEAT,
        exclude_file: cx.req.exclude_file.clone(),
        replace_failing: cx.req.replace_failing_nodes,
        drain: drain(cx, t),
    })
}

/// `--drain_lost_nodes` on node 0: the drain of this SLURM job, or a note why there is none.
fn drain(cx: &Context<'_>, t: &Topology) -> Option<control::Drain> {
    if !cx.req.drain_lost_nodes || t.node_rank != 0 {
        return None;
    }
    match control::Drain::for_job(cx.env) {
        Ok(d) => Some(d),
        Err(why) => {
            eprintln!("{TOOL}: note: --drain_lost_nodes: no node will be drained: {why}");
            None
        }
    }
}

/// A spare whose wait ended with the run, before any node was lost: it exits with the world's
/// status (0 when every rank succeeded), saying so, and `--report_json` says it was a spare.
fn released(
    cx: &Context<'_>,
    t: &Topology,
    failure: Option<control::FailureReport>,
    report: Option<Report>,
) -> ExitStatus {
    let status = failure
        .as_ref()
        .map_or(ExitStatus::Success, control::FailureReport::exit_status);
    if !cx.req.quiet {
        match &failure {
            None => eprintln!(
                "{TOOL}: spare node {}: the run succeeded without it",
                t.node_rank
            ),
            Some(f) => eprintln!(
                "{TOOL}: spare node {}: the run ended before it was needed: {}",
                t.node_rank,
                f.headline()
            ),
        }
    }
    if let Some(report) = report {
        let ended = Unstarted {
            node: t.node_rank,
            num_nodes: t.num_nodes,
            status,
            failure,
            error: String::new(),
        };
        if let Err(e) = report.write_spare(&ended) {
            render(TOOL, &e, cx.env);
        }
    }
    status
}

/// A join that failed: rendered; SLURM's warning while joining requeues the job (node 0 asks), as
/// once ranks run; `--report_json` says the run ended in the join.
fn ended_in_join(
    cx: &Context<'_>,
    t: &Topology,
    e: control::ControlError,
    report: Option<Report>,
) -> ExitStatus {
    let env = cx.env;
    let failure = e.failure().cloned();
    let requeued = e.requeue();
    let error = Error::from(e);
    let message = error.to_string();
    let mut status = render(TOOL, &error, env);
    if let Some(r) = cx.requeue.filter(|r| requeued && r.requeuer) {
        match r.request() {
            Ok(()) if !cx.req.quiet => {
                eprintln!("{TOOL}: job {} requeued (scontrol requeue)", r.job)
            }
            Ok(()) => {}
            Err(e) => status = render(TOOL, &Error::from(e), env),
        }
    }
    if let Some(report) = report {
        let ended = Unstarted {
            node: t.node_rank,
            num_nodes: t.num_nodes,
            status,
            failure,
            error: message,
        };
        if let Err(e) = report.write_unstarted(&ended) {
            render(TOOL, &e, env);
        }
    }
    status
}
