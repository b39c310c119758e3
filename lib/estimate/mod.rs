//! accel-estimate-memory's engine: any model description (safetensors headers local or on the Hub,
//! a config.json by formula) becomes one tensor list; accelerate's arithmetic and table run over it
//! unchanged, and the per-GPU estimates (strategies, activations, KV cache, fit) build on it.

pub mod activation;
pub mod arch;
pub mod error;
pub mod hub;
pub mod input;
pub mod per_gpu;
pub mod quant;
pub mod safetensors;
pub mod table;
pub mod tensors;

pub use error::EstimateError;
