//! DCP's safetensors serialization: a chunk that is not a zip is read as a safetensors blob.
#![no_main]
use accel::merge::dcp::{resolve_chunk, StorageInfo};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.starts_with(b"PK") {
        return;
    }
    let info = StorageInfo {
        relative_path: "__0_0.distcp".into(),
        offset: 0,
        length: 0,
        transforms: Vec::new(),
    };
    for fqn in ["w", "model.0.weight"] {
        if let Ok(r) = resolve_chunk(fqn, &info, std::path::Path::new("fuzz"), data) {
            let (start, t) = (r.storage_start, r.tensor);
            let need = t.numel() * t.dtype.size() as u64;
            assert!(start as u64 + need <= data.len() as u64);
        }
    }
});
