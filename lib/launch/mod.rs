//! Starting and supervising the ranks of a run: the [`plan::Plan`] (per-rank argv and environment),
//! [`supervise::supervise`] (process groups, signals, fail-fast, restarts, logs) and rendezvous
//! [`ports`]. Any tool can launch any worker argv with `Plan::local(n, argv, env)` + `supervise`.

pub mod plan;
pub mod ports;
pub mod supervise;

pub use plan::{Plan, RankSpec};
pub use supervise::{supervise, Console, Options};
