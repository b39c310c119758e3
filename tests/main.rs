//! Integration tests: drive the built binaries.
