//! accel-test's libtorch part as a shared object (libaccel_test_torch.so). The accel-test binary links
//! no libtorch, so it starts, and explains itself, in an environment without torch; when it needs the
//! ranks it finds the environment's torch, loads torch's own libraries from there and then this object
//! (lib/preflight/libtorch.rs). What crosses is a C interface of a few functions: the rank re-reads its
//! command line and environment here, in the same process, so no Rust type crosses between the two
//! separately linked copies of the accel library.

use std::ffi::{c_char, c_int, CString};
use std::sync::OnceLock;

#[path = "mod.rs"]
mod torch;

use accel::exit_status::ExitStatus;

/// The interface this object implements; the binary refuses any other (lib/preflight/libtorch.rs).
#[no_mangle]
pub extern "C" fn accel_test_torch_interface() -> *const c_char {
    static TEXT: OnceLock<CString> = OnceLock::new();
    TEXT.get_or_init(|| c_string(accel::preflight::libtorch::INTERFACE))
        .as_ptr()
}

/// The torch version this object was compiled and linked against (`2.13.0+cu130`).
#[no_mangle]
pub extern "C" fn accel_test_torch_built_with() -> *const c_char {
    static TEXT: OnceLock<CString> = OnceLock::new();
    TEXT.get_or_init(|| c_string(option_env!("ACCEL_TORCH_BUILT_WITH").unwrap_or("unknown")))
        .as_ptr()
}

/// Whether this object can make NCCL process groups.
#[no_mangle]
pub extern "C" fn accel_test_torch_has_nccl() -> c_int {
    torch::has_nccl() as c_int
}

/// `accel-test --version`'s lines about collectives and CUDA.
#[no_mangle]
pub extern "C" fn accel_test_torch_describe() -> *const c_char {
    static TEXT: OnceLock<CString> = OnceLock::new();
    TEXT.get_or_init(|| {
        let text = std::panic::catch_unwind(torch::describe).unwrap_or("cannot ask libtorch");
        c_string(text)
    })
    .as_ptr()
}

/// `accel-test --worker`: one rank, from this process's own command line and environment. Returns the
/// exit status.
#[no_mangle]
pub extern "C" fn accel_test_torch_worker() -> c_int {
    let run = || {
        let env = accel::env_vars::Environment::capture();
        accel::tools::init_logging("accel-test", &env);
        let cli = match <accel::cli::test::TestCli as clap::Parser>::try_parse() {
            Ok(cli) => cli,
            // The binary parsed the same arguments before it loaded this object.
            Err(_) => return ExitStatus::Usage,
        };
        torch::worker::run_cli(&cli, cli.timeout, &env)
    };
    // A panic must not unwind into the binary's frames (another copy of the Rust runtime).
    let status = std::panic::catch_unwind(run).unwrap_or(ExitStatus::Failure);
    c_int::from(status.code())
}

fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', " ")).unwrap_or_default()
}
