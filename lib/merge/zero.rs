//! DeepSpeed ZeRO checkpoints (stages 1–3), read with zero_to_fp32's semantics.

use std::path::{Path, PathBuf};

use super::{Checkpoint, MergeError};

/// A DeepSpeed save directory resolved to its tag directory.
pub struct Found {
    pub dir: PathBuf,
}

pub fn detect(_dir: &Path, _tag: Option<&str>) -> Result<Option<Found>, MergeError> {
    Ok(None)
}

pub fn read(found: Found) -> Result<Checkpoint, MergeError> {
    Err(MergeError::Unsupported(format!(
        "DeepSpeed checkpoint {}",
        found.dir.display()
    )))
}
