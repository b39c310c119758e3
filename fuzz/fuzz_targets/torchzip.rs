//! The torch.save zip reader, and a whole DCP chunk resolution (zip, data.pkl, view bounds) on top of it.
#![no_main]
use accel::merge::dcp::{resolve_chunk, StorageInfo};
use accel::merge::torchzip;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(zip) = torchzip::open(data) {
        for r in &zip.records {
            // Every range the reader hands out must lie inside the input.
            assert!(r.data.end <= data.len());
        }
        let _ = zip.big_endian(data);
    }
    let info = StorageInfo {
        relative_path: "__0_0.distcp".into(),
        offset: 0,
        length: data.len() as u64,
        transforms: Vec::new(),
    };
    if let Ok(r) = resolve_chunk("w", &info, std::path::Path::new("fuzz"), data) {
        let (start, t) = (r.storage_start, r.tensor);
        let need = t.extent().unwrap() * t.dtype.size() as u64;
        assert!(start as u64 + need <= data.len() as u64);
    }
});
