//! The safe unpickler under every policy, and the DCP metadata interpreter on top of it.
#![no_main]
use accel::merge::pickle::{load, Globals};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for policy in [Globals::DcpMetadata, Globals::TorchWeights, Globals::Any] {
        if let Ok(p) = load(data, policy) {
            let _ = accel::merge::tensor::TensorRef::from_pickle(&p, p.root);
            let _ = p.ints(p.root);
        }
    }
    let _ = accel::merge::dcp::parse_metadata(data);
});
