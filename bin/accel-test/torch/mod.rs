//! The libtorch side of accel-test, compiled into the accel-test binary only (not the library, so
//! no other tool links libtorch): a safe wrapper over the C++ shim (`shim.cpp`, built by `build.rs`)
//! that reaches c10d — the `TCPStore` rendezvous and the gloo/NCCL process groups the training will
//! use. Tensors are tch tensors; every C++ exception comes back as a [`TorchError`].

pub mod probe;
pub mod rank;
pub mod worker;

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::time::Duration;

use tch::Tensor;

use accel::error::Diagnostic;

#[repr(C)]
struct RawStore {
    _private: [u8; 0],
}
#[repr(C)]
struct RawPg {
    _private: [u8; 0],
}

type Err = *mut c_char;

extern "C" {
    fn accel_free_error(error: Err);
    fn accel_has_nccl() -> c_int;
    fn accel_init_logging();
    fn accel_store_new(
        host: *const c_char,
        port: u16,
        world_size: i64,
        is_server: c_int,
        timeout_ms: i64,
        out: *mut *mut RawStore,
    ) -> Err;
    fn accel_store_free(store: *mut RawStore);
    fn accel_store_set(
        store: *mut RawStore,
        key: *const c_char,
        value: *const u8,
        len: usize,
    ) -> Err;
    fn accel_store_check(store: *mut RawStore, key: *const c_char, exists: *mut c_int) -> Err;
    fn accel_store_get(
        store: *mut RawStore,
        key: *const c_char,
        timeout_ms: i64,
        value: *mut *mut u8,
        len: *mut usize,
    ) -> Err;
    fn accel_free_bytes(bytes: *mut u8);
    fn accel_pg_new_gloo(
        store: *mut RawStore,
        rank: i64,
        size: i64,
        timeout_ms: i64,
        ifnames: *const c_char,
        out: *mut *mut RawPg,
    ) -> Err;
    fn accel_pg_new_nccl(
        store: *mut RawStore,
        rank: i64,
        size: i64,
        timeout_ms: i64,
        out: *mut *mut RawPg,
    ) -> Err;
    fn accel_pg_free(pg: *mut RawPg);
    fn accel_pg_allreduce(pg: *mut RawPg, t: *mut c_void, op: c_int, timeout_ms: i64) -> Err;
    fn accel_pg_reduce(
        pg: *mut RawPg,
        t: *mut c_void,
        root: i64,
        op: c_int,
        timeout_ms: i64,
    ) -> Err;
    fn accel_pg_broadcast(pg: *mut RawPg, t: *mut c_void, root: i64, timeout_ms: i64) -> Err;
    fn accel_pg_allgather(
        pg: *mut RawPg,
        outputs: *mut *mut c_void,
        n: usize,
        input: *mut c_void,
        timeout_ms: i64,
    ) -> Err;
    fn accel_pg_allgather_flat(
        pg: *mut RawPg,
        output: *mut c_void,
        input: *mut c_void,
        timeout_ms: i64,
    ) -> Err;
    fn accel_pg_gather(
        pg: *mut RawPg,
        outputs: *mut *mut c_void,
        n: usize,
        input: *mut c_void,
        root: i64,
        timeout_ms: i64,
    ) -> Err;
    fn accel_pg_barrier(pg: *mut RawPg, timeout_ms: i64) -> Err;
    fn accel_pg_send(pg: *mut RawPg, t: *mut c_void, dst: i64, tag: i64, timeout_ms: i64) -> Err;
    fn accel_pg_recv(pg: *mut RawPg, t: *mut c_void, src: i64, tag: i64, timeout_ms: i64) -> Err;
}

/// A c10d call that failed, with libtorch's own message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{op}: {message}")]
pub struct TorchError {
    pub op: &'static str,
    pub message: String,
}

impl Diagnostic for TorchError {}

fn check(op: &'static str, err: Err) -> Result<(), TorchError> {
    if err.is_null() {
        return Ok(());
    }
    // SAFETY: the shim returns either NULL or a NUL-terminated malloc'd string that we own.
    let message = unsafe { CStr::from_ptr(err) }
        .to_string_lossy()
        .trim()
        .to_string();
    unsafe { accel_free_error(err) };
    Err(TorchError { op, message })
}

fn cstring(op: &'static str, s: &str) -> Result<CString, TorchError> {
    CString::new(s).map_err(|_| TorchError {
        op,
        message: format!("`{s}` contains a NUL byte"),
    })
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

/// libtorch's log level from TORCH_CPP_LOG_LEVEL (accel-test's ranks get ERROR unless it is set), as
/// Python's `import torch` applies it; before any c10d call.
pub fn init_logging() {
    // SAFETY: reads the environment and sets libtorch's logging flags.
    unsafe { accel_init_logging() }
}

/// Whether this build can make NCCL process groups.
pub fn has_nccl() -> bool {
    // SAFETY: a constant query.
    unsafe { accel_has_nccl() != 0 }
}

/// `accel-test --version` (after the version the binary prints): what this build can check, and whether
/// CUDA is usable on this machine.
pub fn describe() -> &'static str {
    let cuda = if tch::Cuda::is_available() {
        format!("{} CUDA device(s) visible", tch::Cuda::device_count())
    } else {
        "CUDA not available on this machine: worlds are checked on CPU with gloo".into()
    };
    let text = format!(
        "collectives: gloo{}\n{cuda}",
        if has_nccl() {
            ", NCCL"
        } else {
            " (built without NCCL)"
        }
    );
    // Asked once per process, for --version.
    Box::leak(text.into_boxed_str())
}

/// A c10d `TCPStore`: the server on rank 0, a client everywhere else.
pub struct Store {
    raw: *mut RawStore,
}

// SAFETY: c10d's TCPStore is thread-safe; the handle is only an owning pointer.
unsafe impl Send for Store {}

impl Store {
    /// Connects to (or, with `server`, hosts) the store at `host:port`. A client keeps retrying until
    /// `timeout`.
    pub fn new(
        host: &str,
        port: u16,
        world_size: usize,
        server: bool,
        timeout: Duration,
    ) -> Result<Store, TorchError> {
        let op = "TCPStore";
        let host = cstring(op, host)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid C string, out-pointer to a local.
        check(op, unsafe {
            accel_store_new(
                host.as_ptr(),
                port,
                world_size as i64,
                server as c_int,
                millis(timeout),
                &mut raw,
            )
        })?;
        Ok(Store { raw })
    }

    pub fn set(&self, key: &str, value: &[u8]) -> Result<(), TorchError> {
        let key = cstring("store.set", key)?;
        // SAFETY: live handle, valid key and slice.
        check("store.set", unsafe {
            accel_store_set(self.raw, key.as_ptr(), value.as_ptr(), value.len())
        })
    }

    pub fn check(&self, key: &str) -> Result<bool, TorchError> {
        let key = cstring("store.check", key)?;
        let mut exists = 0;
        // SAFETY: live handle, out-pointer to a local.
        check("store.check", unsafe {
            accel_store_check(self.raw, key.as_ptr(), &mut exists)
        })?;
        Ok(exists != 0)
    }

    /// Waits up to `timeout` for `key` and returns its value.
    pub fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, TorchError> {
        let key = cstring("store.get", key)?;
        let mut value = std::ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: live handle; on success the shim hands us a malloc'd buffer of `len` bytes.
        check("store.get", unsafe {
            accel_store_get(
                self.raw,
                key.as_ptr(),
                millis(timeout),
                &mut value,
                &mut len,
            )
        })?;
        let out = unsafe { std::slice::from_raw_parts(value, len) }.to_vec();
        unsafe { accel_free_bytes(value) };
        Ok(out)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // SAFETY: owned handle, freed once.
        unsafe { accel_store_free(self.raw) }
    }
}

/// Reduction of all_reduce / reduce, numbered as the shim expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum = 0,
    Max = 1,
    Min = 2,
    Avg = 3,
}

/// Which c10d backend a process group uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Gloo,
    Nccl,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Gloo => "gloo",
            Backend::Nccl => "nccl",
        }
    }
}

/// A c10d process group over the whole world, keyed in the store exactly as
/// `torch.distributed.init_process_group` keys its default group, so Python ranks can join it.
pub struct ProcessGroup {
    raw: *mut RawPg,
    timeout_ms: i64,
}

// SAFETY: c10d backends are used from one thread at a time here; the handle is an owning pointer.
unsafe impl Send for ProcessGroup {}

fn ptr(t: &mut Tensor) -> *mut c_void {
    t.as_mut_ptr().cast()
}

impl ProcessGroup {
    pub fn new(
        backend: Backend,
        store: &Store,
        rank: usize,
        size: usize,
        timeout: Duration,
        gloo_ifnames: &str,
    ) -> Result<ProcessGroup, TorchError> {
        let mut raw = std::ptr::null_mut();
        let t = millis(timeout);
        match backend {
            Backend::Gloo => {
                let names = cstring("ProcessGroupGloo", gloo_ifnames)?;
                // SAFETY: live store, valid C string, out-pointer to a local.
                check("ProcessGroupGloo", unsafe {
                    accel_pg_new_gloo(
                        store.raw,
                        rank as i64,
                        size as i64,
                        t,
                        names.as_ptr(),
                        &mut raw,
                    )
                })?
            }
            // SAFETY: as above.
            Backend::Nccl => check("ProcessGroupNCCL", unsafe {
                accel_pg_new_nccl(store.raw, rank as i64, size as i64, t, &mut raw)
            })?,
        }
        Ok(ProcessGroup { raw, timeout_ms: t })
    }

    pub fn all_reduce(&self, t: &mut Tensor, op: ReduceOp) -> Result<(), TorchError> {
        // SAFETY: live handles; the shim only borrows the tensor for the call.
        check("all_reduce", unsafe {
            accel_pg_allreduce(self.raw, ptr(t), op as c_int, self.timeout_ms)
        })
    }

    pub fn reduce(&self, t: &mut Tensor, root: usize, op: ReduceOp) -> Result<(), TorchError> {
        // SAFETY: as above.
        check("reduce", unsafe {
            accel_pg_reduce(self.raw, ptr(t), root as i64, op as c_int, self.timeout_ms)
        })
    }

    pub fn broadcast(&self, t: &mut Tensor, root: usize) -> Result<(), TorchError> {
        // SAFETY: as above.
        check("broadcast", unsafe {
            accel_pg_broadcast(self.raw, ptr(t), root as i64, self.timeout_ms)
        })
    }

    /// `torch.distributed.all_gather`: `outputs` holds one tensor per rank.
    pub fn all_gather(&self, outputs: &mut [Tensor], input: &mut Tensor) -> Result<(), TorchError> {
        let mut outs: Vec<*mut c_void> = outputs.iter_mut().map(ptr).collect();
        // SAFETY: as above; `outs` outlives the call.
        check("all_gather", unsafe {
            accel_pg_allgather(
                self.raw,
                outs.as_mut_ptr(),
                outs.len(),
                ptr(input),
                self.timeout_ms,
            )
        })
    }

    /// `torch.distributed.all_gather_into_tensor`.
    pub fn all_gather_flat(
        &self,
        output: &mut Tensor,
        input: &mut Tensor,
    ) -> Result<(), TorchError> {
        // SAFETY: as above.
        check("all_gather", unsafe {
            accel_pg_allgather_flat(self.raw, ptr(output), ptr(input), self.timeout_ms)
        })
    }

    /// `torch.distributed.gather`: `outputs` is one tensor per rank on the root, empty elsewhere.
    pub fn gather(
        &self,
        outputs: &mut [Tensor],
        input: &mut Tensor,
        root: usize,
    ) -> Result<(), TorchError> {
        let mut outs: Vec<*mut c_void> = outputs.iter_mut().map(ptr).collect();
        // SAFETY: as above.
        check("gather", unsafe {
            accel_pg_gather(
                self.raw,
                outs.as_mut_ptr(),
                outs.len(),
                ptr(input),
                root as i64,
                self.timeout_ms,
            )
        })
    }

    /// `torch.distributed.send`: blocks until the tensor is handed over (gloo) or queued on the
    /// stream (NCCL).
    pub fn send(&self, t: &mut Tensor, dst: usize, tag: i64) -> Result<(), TorchError> {
        // SAFETY: as above.
        check("send", unsafe {
            accel_pg_send(self.raw, ptr(t), dst as i64, tag, self.timeout_ms)
        })
    }

    /// `torch.distributed.recv` from `src`, into `t` (the same size as the sent tensor).
    pub fn recv(&self, t: &mut Tensor, src: usize, tag: i64) -> Result<(), TorchError> {
        // SAFETY: as above.
        check("recv", unsafe {
            accel_pg_recv(self.raw, ptr(t), src as i64, tag, self.timeout_ms)
        })
    }

    pub fn barrier(&self) -> Result<(), TorchError> {
        // SAFETY: live handle.
        check("barrier", unsafe {
            accel_pg_barrier(self.raw, self.timeout_ms)
        })
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // SAFETY: owned handle, freed once.
        unsafe { accel_pg_free(self.raw) }
    }
}
