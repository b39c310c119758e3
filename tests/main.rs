//! Integration tests: drive the built binaries.
#[cfg(feature = "torch")]
mod accel_test;
#[cfg(not(feature = "torch"))]
mod accel_test_without_torch;
