//! Starting and supervising the ranks of a run: [`resolve`] decides what the run is (config, merge,
//! placement, GPUs, topology, port) once for every tool; the [`plan::Plan`] turns it into per-rank argv
//! and environment; [`supervise::run`] runs it (process groups, signals, fail-fast, restarts,
//! logs); rendezvous [`ports`]; the [`control`] plane between the node launchers of a multi-node run, and the [`hang`] watch with the world's verdict over it; the [`straggler`] watch; SLURM [`requeue`] on preemption. A tool that reads its ranks' output itself (accel-test) runs
//! it the same way, with a [`Capture`].

pub mod control;
pub mod hang;
pub mod numa;
pub mod plan;
pub mod ports;
pub mod requeue;
pub mod resolve;
pub mod straggler;
pub mod supervise;
pub mod torchrun;

pub use plan::{Plan, RankSpec};
pub use resolve::{resolve, Engine, Run, RunInput, Scope};
pub use supervise::{
    run, Capture, Captured, Console, OnFailure, Options, RankEnd, RankResult, RunOutcome,
};
