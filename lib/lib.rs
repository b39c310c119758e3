//! accel: the command-line half of Hugging Face Accelerate, as six small Unix tools over this one library.
//!
//! The binaries in `bin/` are one line each (accel-test loads its libtorch part, a shared object, at run time): [`tools::main`] with the tool's clap type from [`cli`] and
//! its `run` from [`tools`]. Everything shared — the config core, the environment registry, errors and
//! exit statuses, man pages — lives here.

pub mod cli;
pub mod config;
pub mod contract;
pub mod devices;
pub mod docs;
pub mod duration;
pub mod env_vars;
pub mod error;
pub mod estimate;
pub mod exit_status;
pub mod host;
pub mod launch;
pub mod median;
pub mod merge;
pub mod preflight;
pub mod provenance;
pub mod python;
pub mod questionnaire;
pub mod slurm;
pub mod tools;
