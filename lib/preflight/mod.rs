//! accel-test's pre-flight of a distributed world: resolve the world as accel-launch does, start its
//! ranks, and in each rank check the network, the rendezvous and every collective on libtorch's own
//! c10d stack, with every wait bounded so a broken world is named in seconds, not after a 30-minute
//! NCCL timeout.
//!
//! The parts that need libtorch (bin/accel-test/torch: the c10d binding and the rank itself) are a shared
//! object of their own that accel-test loads at run time from the environment's torch ([`libtorch`]), so
//! no tool links libtorch; the world, the plan of checks, the network probes, the report and the
//! coordinator are plain Rust, always built.

pub mod coordinator;
pub mod libtorch;
pub mod memory;
pub mod network;
pub mod plan;
pub mod probe;
pub mod python;
pub mod report;
pub mod world;

use crate::error::Diagnostic;
use crate::exit_status::ExitStatus;

#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error("invalid rank contract: {0}")]
    Contract(String),
    #[error("cannot locate the accel-test executable")]
    Exe(#[source] std::io::Error),
}

impl Diagnostic for PreflightError {
    fn hints(&self) -> Vec<String> {
        match self {
            PreflightError::Contract(_) => vec![
                "--worker is internal: it expects the torchrun rank contract (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)".into(),
            ],
            _ => Vec::new(),
        }
    }
    fn exit_status(&self) -> ExitStatus {
        match self {
            PreflightError::Exe(_) => ExitStatus::LauncherFailed,
            PreflightError::Contract(_) => ExitStatus::Failure,
        }
    }
}
