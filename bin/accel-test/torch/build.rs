//! Builds accel-test's C++ shim over libtorch's c10d (shim.cpp) into accel-test's libtorch part
//! (libaccel_test_torch.so). The six tools are another package and need no C++ toolchain, no Python and
//! no libtorch to build.
//!
//! The shim must be compiled exactly like torch-sys compiles tch's own C++ (same include dirs, same
//! `_GLIBCXX_USE_CXX11_ABI`), so the libtorch is found the same way: `LIBTORCH_USE_PYTORCH` asks the
//! Python on PATH (`python` in a virtualenv, else `python3`), otherwise `LIBTORCH` names an unpacked
//! libtorch. No run path is embedded: accel-test loads torch's libraries from the environment it runs
//! in before this object (lib/preflight/libtorch.rs), so the build's own torch is needed only to link.

// A build script reads cargo's environment; accel's Environment snapshot is for the tools.
#![allow(clippy::disallowed_methods)]

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const PYTHON_QUERY: &str = r#"
import os, torch
from torch.utils import cpp_extension
print('ABI:', int(torch._C._GLIBCXX_USE_CXX11_ABI))
for p in cpp_extension.include_paths():
    print('INCLUDE:', p)
print('LIB:', os.path.join(os.path.dirname(torch.__file__), 'lib'))
print('SITE:', os.path.dirname(os.path.dirname(torch.__file__)))
print('VERSION:', torch.__version__)
"#;

struct Torch {
    abi: String,
    includes: Vec<PathBuf>,
    lib: PathBuf,
    /// site-packages, where the pip `nvidia-*` wheels keep the CUDA and NCCL headers.
    site: Option<PathBuf>,
    version: Option<String>,
}

fn rerun_env(name: &str) -> Option<String> {
    println!("cargo:rerun-if-env-changed={name}");
    env::var(name).ok()
}

fn from_python() -> Torch {
    let python = if env::var_os("VIRTUAL_ENV").is_some() {
        "python"
    } else {
        "python3"
    };
    let out = Command::new(python)
        .arg("-c")
        .arg(PYTHON_QUERY)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{python}` to locate torch: {e}"));
    if !out.status.success() {
        panic!(
            "`{python}` could not import torch:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut torch = Torch {
        abi: "1".into(),
        includes: Vec::new(),
        lib: PathBuf::new(),
        site: None,
        version: None,
    };
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("ABI: ") {
            torch.abi = v.trim().into();
        } else if let Some(v) = line.strip_prefix("INCLUDE: ") {
            torch.includes.push(v.trim().into());
        } else if let Some(v) = line.strip_prefix("LIB: ") {
            torch.lib = v.trim().into();
        } else if let Some(v) = line.strip_prefix("SITE: ") {
            torch.site = Some(v.trim().into());
        } else if let Some(v) = line.strip_prefix("VERSION: ") {
            torch.version = Some(v.trim().into());
        }
    }
    torch
}

fn from_libtorch(dir: &Path) -> Torch {
    Torch {
        abi: rerun_env("LIBTORCH_CXX11_ABI").unwrap_or_else(|| "1".into()),
        includes: vec![
            dir.join("include"),
            dir.join("include/torch/csrc/api/include"),
        ],
        lib: dir.join("lib"),
        site: None,
        version: std::fs::read_to_string(dir.join("build-version"))
            .ok()
            .map(|v| v.trim().to_string()),
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=shim.cpp");
    println!("cargo:rerun-if-changed=compat.cpp");
    println!("cargo:rerun-if-env-changed=VIRTUAL_ENV");
    let torch = if rerun_env("LIBTORCH_USE_PYTORCH").is_some() {
        from_python()
    } else if let Some(dir) = rerun_env("LIBTORCH") {
        from_libtorch(Path::new(&dir))
    } else {
        panic!("the `torch` feature needs libtorch: set LIBTORCH_USE_PYTORCH=1 with torch 2.13 importable by `python`, or LIBTORCH=<libtorch dir>");
    };

    // CUDA and NCCL headers, from the pip nvidia wheels next to torch (or ACCEL_CUDA_INCLUDE /
    // ACCEL_NCCL_INCLUDE). Without them the shim has gloo only.
    let site_dir = |rel: &str| torch.site.as_ref().map(|s| s.join(rel));
    let cuda_inc = rerun_env("ACCEL_CUDA_INCLUDE")
        .map(PathBuf::from)
        .or_else(|| site_dir("nvidia/cu13/include"))
        .filter(|p| p.join("cuda_runtime_api.h").is_file());
    let nccl_inc = rerun_env("ACCEL_NCCL_INCLUDE")
        .map(PathBuf::from)
        .or_else(|| site_dir("nvidia/nccl/include"))
        .filter(|p| p.join("nccl.h").is_file());
    // cuda_runtime.h includes crt/host_config.h and <nv/target>, which the nvidia-cuda-runtime wheel
    // lacks: they come with nvidia-cuda-crt and nvidia-cuda-cccl (same tree), or from the
    // colon-separated ACCEL_CUDA_EXTRA_INCLUDE.
    let extra: Vec<PathBuf> = rerun_env("ACCEL_CUDA_EXTRA_INCLUDE")
        .map(|v| env::split_paths(&v).collect())
        .unwrap_or_default();
    // Headers installed later (scripts/setup adds nvidia-cuda-crt/-cccl) must bring the NCCL path in.
    for dir in cuda_inc.iter().chain(&extra) {
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    let found = |rel: &str| cuda_inc.iter().chain(&extra).any(|p| p.join(rel).is_file());
    let crt_ok = found("crt/host_config.h") && found("nv/target");
    let with_nccl = rerun_env("ACCEL_NO_NCCL").is_none()
        && cuda_inc.is_some()
        && crt_ok
        && nccl_inc.is_some()
        && torch.lib.join("libtorch_cuda.so").is_file();

    let mut build = cc::Build::new();
    build
        .cpp(true)
        .pic(true)
        .warnings(false)
        .includes(&torch.includes)
        .flag("-std=c++17")
        .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={}", torch.abi))
        .flag("-DGLOG_USE_GLOG_EXPORT")
        .define("USE_C10D_GLOO", None)
        .file("shim.cpp")
        .file("compat.cpp");
    if with_nccl {
        build
            .define("USE_C10D_NCCL", None)
            .define("USE_CUDA", None)
            .define("ACCEL_WITH_NCCL", None);
        for inc in [&cuda_inc, &nccl_inc].into_iter().flatten() {
            build.include(inc);
        }
        build.includes(&extra);
    }
    build.compile("accel_torch_shim");
    if !with_nccl {
        println!("cargo:warning=accel-test: CUDA/NCCL headers not found; building with gloo only (no NCCL)");
    }

    // scripts/wheel links with zig for glibc 2.28, while the C++ is compiled by g++ against libstdc++:
    // zig would take `-lstdc++` for its own libc++ and `-lgcc_s` for its own static unwinder, so the C++
    // builds name no library (CXXSTDLIB=) and libstdc++ and libgcc_s are given here by path. The unwinder
    // must be libgcc_s's: torch's exceptions are raised by it, and our frames' cleanups resume them
    // (_Unwind_Resume) on their way to the shim's catch.
    if let Some(libs) = rerun_env("ACCEL_LINK_LIBS") {
        for lib in env::split_paths(&libs) {
            println!("cargo:rustc-link-arg-cdylib={}", lib.display());
        }
    }
    // zig's linker searches only the paths it is given: scripts/wheel names one with the libraries that
    // torch-sys asks for by name and zig lacks (libgomp; dropped again under --as-needed).
    if let Some(dir) = rerun_env("ACCEL_LINK_SEARCH") {
        println!("cargo:rustc-link-search=native={dir}");
    }
    println!("cargo:rustc-link-search=native={}", torch.lib.display());
    // The version this object was built against, for `accel-test --version`.
    if let Some(v) = &torch.version {
        println!("cargo:rustc-env=ACCEL_TORCH_BUILT_WITH={v}");
    }
    if with_nccl {
        // tch reaches CUDA only through libtorch_cuda's static initialisers; under --as-needed the
        // linker would drop the library, and tch would see no GPU.
        for arg in [
            "-Wl,--no-as-needed",
            "-ltorch_cuda",
            "-lc10_cuda",
            "-Wl,--as-needed",
        ] {
            println!("cargo:rustc-link-arg-cdylib={arg}");
        }
        println!("cargo:rustc-cfg=accel_nccl");
    }
    println!("cargo:rustc-check-cfg=cfg(accel_nccl)");
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=c10");
}
