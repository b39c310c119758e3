//! Integration tests: drive the built binaries.
mod merge;
