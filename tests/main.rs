//! Integration tests: every module drives the built binaries as a user would.

// Tests may unwrap, and read the real environment to build the isolated one they hand the tools.
#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

mod util;

#[cfg(feature = "torch")]
mod accel_test;
mod config;
mod control;
mod control_waits;
mod deepspeed_launch;
mod docs;
mod durations;
mod elastic;
mod env;
mod estimate;
#[cfg(feature = "torch")]
mod hang;
#[cfg(feature = "torch")]
mod hang_nodes;
mod launch;
mod launch_faults;
mod launch_flags;
mod launch_output;
mod launch_report;
mod merge;
mod mpi;
#[cfg(feature = "torch")]
mod probe;
mod questionnaire;
mod requeue;
mod resolution;
mod slurm;
mod slurm_control;
mod slurm_spares;
mod spares;
mod straggler;
mod torchrun;
mod wheel;
