//! Integration tests: every module drives the built binaries as a user would.

// Tests may unwrap, and read the real environment to build the isolated one they hand the tools.
#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

mod util;

#[cfg(feature = "torch")]
mod accel_test;
#[cfg(not(feature = "torch"))]
mod accel_test_without_torch;
mod config;
mod docs;
mod env;
mod estimate;
mod launch;
mod launch_faults;
mod merge;
mod questionnaire;
