//! Integration tests: drive the built binaries.
mod launch;
mod launch_faults;
