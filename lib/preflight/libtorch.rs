//! Finds the environment's torch and loads accel-test's libtorch part from it, at run time.
//!
//! accel-test links no libtorch: a binary with a run path into one venv breaks in every other, and one
//! that needs libtorch at load time dies in the dynamic loader where torch is missing, before it can say
//! anything. Instead it asks the environment's Python where torch is (the Python beside the binary
//! first: a venv's, a conda env's; then `python3`/`python` on PATH, or `ACCEL_PYTHON` alone) without
//! importing it, checks the version, loads torch's own libraries by path (their run paths find the
//! `nvidia-*` wheels beside torch, as when Python imports it), and then the part
//! (`libaccel_test_torch.so`, built from bin/accel-test/torch), whose libtorch dependencies are then
//! already loaded under their sonames. No run path and no `LD_LIBRARY_PATH` is involved, so it works
//! the same in a venv, a conda env or a `pip --user` install, and every failure is an error that names
//! what is missing and which torch is needed.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::env_vars::{self, Environment};
use crate::error::Diagnostic;
use crate::exit_status::ExitStatus;

/// The torch release series accel-test's part is built for (tch 0.26 binds torch 2.13).
pub const TORCH_SERIES: &str = "2.13";

/// The file name of accel-test's libtorch part.
pub const PART: &str = "libaccel_test_torch.so";

/// The C interface between the binary and the part; a part of another version is refused, since it
/// re-reads the command line of this version.
pub const INTERFACE: &str = concat!("accel-test-torch/1 accel ", env!("CARGO_PKG_VERSION"));

/// What `pip install` needs for the torch accel-test can use.
const PIP_TORCH: &str = "pip install 'torch==2.13.*'";

#[derive(Debug, thiserror::Error)]
pub enum LibtorchError {
    #[error("no Python found to ask for torch (looked for {looked})")]
    NoPython { looked: String },
    #[error("torch is not installed in this environment: accel-test needs torch=={TORCH_SERIES}.* (asked {})", list(.pythons))]
    NotInstalled { pythons: Vec<PathBuf> },
    #[error("torch {found} is installed ({}), but accel-test needs torch=={TORCH_SERIES}.*", .at.display())]
    WrongVersion { found: String, at: PathBuf },
    #[error("accel-test's libtorch part ({PART}) is not installed (looked in {})", list(.looked))]
    NoPart { looked: Vec<PathBuf> },
    #[error("cannot load {}: {message}", .what.display())]
    Load { what: PathBuf, message: String },
    #[error("{} is another accel-test's libtorch part ({found}; this accel-test is {INTERFACE})", .at.display())]
    Interface { found: String, at: PathBuf },
}

fn list(paths: &[PathBuf]) -> String {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    names.join(", ")
}

impl Diagnostic for LibtorchError {
    fn hints(&self) -> Vec<String> {
        match self {
            LibtorchError::NoPython { .. } => vec![format!(
                "install torch {TORCH_SERIES} into the environment accel-test runs in ({PIP_TORCH}), or name its interpreter with ACCEL_PYTHON"
            )],
            LibtorchError::NotInstalled { .. } => vec![format!(
                "{PIP_TORCH} into this environment (or ACCEL_PYTHON=/path/to/python of one that has it)"
            )],
            LibtorchError::WrongVersion { .. } => vec![format!(
                "{PIP_TORCH}, or run accel-test from an environment that has it (ACCEL_PYTHON names its interpreter)"
            )],
            LibtorchError::NoPart { .. } => vec![
                "pip install accel-cli installs it beside accel-test; from a checkout: `cargo build --release -p accel-test-torch` (scripts/setup), or scripts/install".into(),
            ],
            LibtorchError::Load { .. } => vec![format!(
                "accel-test's part is built against the CUDA build of torch {TORCH_SERIES} from PyPI; a torch whose libraries (or the nvidia-* packages beside them) are incomplete cannot be used: reinstall it ({PIP_TORCH})"
            )],
            LibtorchError::Interface { .. } => vec![
                "reinstall accel-test and its part together (pip install accel-cli, or scripts/setup)".into(),
            ],
        }
    }
    fn exit_status(&self) -> ExitStatus {
        ExitStatus::NoTorch
    }
}

/// A torch installation found through a Python.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Torch {
    /// The interpreter that found it.
    pub python: PathBuf,
    /// `torch.__version__`, read from `torch/version.py` (`2.13.0+cu130`).
    pub version: String,
    /// The package directory (`…/site-packages/torch`).
    pub dir: PathBuf,
}

impl Torch {
    pub fn lib(&self) -> PathBuf {
        self.dir.join("lib")
    }
}

/// Whether `version` (`2.13.0`, `2.13.1+cpu`) is of the series accel-test's part binds.
pub fn supported(version: &str) -> bool {
    version
        .strip_prefix(TORCH_SERIES)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '+']))
}

/// The interpreters to ask, in order: `ACCEL_PYTHON` when set; then `python3` and `python` in the
/// directory of the accel-test binary (a venv's or conda env's `bin`), then on PATH. `ACCEL_PYTHON`
/// only leads: it also names the Python of `--python`'s check, which is there to find a user's
/// Python *without* a working torch, so such a Python must not keep the C++ checks from running.
pub fn pythons(env: &Environment, exe_dir: Option<&Path>) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    let mut add = |p: PathBuf| {
        if !found.contains(&p) {
            found.push(p);
        }
    };
    if let Some(p) = env.non_empty(env_vars::ACCEL_PYTHON) {
        add(PathBuf::from(p));
    }
    for name in ["python3", "python"] {
        if let Some(p) = exe_dir.map(|d| d.join(name)).filter(|p| is_executable(p)) {
            add(p);
        }
    }
    if let Some(path) = env.get(env_vars::PATH) {
        for name in ["python3", "python"] {
            if let Ok(p) = which::which_in(name, Some(path), "/") {
                add(p);
            }
        }
    }
    found
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `sys.path` of the interpreter, without importing anything (~15 ms).
const PROBE: &str = "import sys, json; print(json.dumps(sys.path))";

/// How long an interpreter may take to print its `sys.path` (a cold start on a slow shared
/// filesystem takes seconds); one that takes longer is not asked further.
const PROBE_LIMIT: Duration = Duration::from_secs(30);

/// The torch `python` would import, if any: the first `sys.path` entry with a `torch` package, as the
/// import system searches. The interpreter's own directory (`''`, the working directory under `-c`)
/// is skipped: a `torch` folder where accel-test happens to run is not an installation.
pub fn torch_of(python: &Path) -> Option<Torch> {
    let stdout = sys_path_of(python, PROBE_LIMIT)?;
    let path: Vec<String> = serde_json::from_slice(&stdout).ok()?;
    path.iter()
        .filter(|p| !p.is_empty())
        .map(|p| Path::new(p).join("torch"))
        .find(|d| d.join("__init__.py").is_file())
        .map(|dir| Torch {
            python: python.to_path_buf(),
            version: version_of(&dir).unwrap_or_else(|| "of unknown version".into()),
            dir,
        })
}

/// What [`PROBE`] prints, or `None` when the interpreter fails or does not answer within
/// [`PROBE_LIMIT`] (then it is killed: accel-test never waits on it without an end).
fn sys_path_of(python: &Path, limit: Duration) -> Option<Vec<u8>> {
    let mut child = Command::new(python)
        .args(["-c", PROBE])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    // sys.path is a few KiB, well under a pipe's buffer: the child never blocks writing it.
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    };
    let mut out = Vec::new();
    child.stdout.take()?.read_to_end(&mut out).ok()?;
    status.success().then_some(out)
}

/// `__version__` from `torch/version.py`.
fn version_of(torch_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(torch_dir.join("version.py")).ok()?;
    text.lines().find_map(|l| {
        let v = l
            .strip_prefix("__version__")?
            .trim_start()
            .strip_prefix('=')?;
        let v = v.trim().trim_matches(['\'', '"']);
        (!v.is_empty()).then(|| v.to_string())
    })
}

/// The torch accel-test uses: the first interpreter's whose torch is of [`TORCH_SERIES`]; else the
/// error naming what was found.
pub fn locate(env: &Environment, exe_dir: Option<&Path>) -> Result<Torch, LibtorchError> {
    let pythons = pythons(env, exe_dir);
    if pythons.is_empty() {
        return Err(LibtorchError::NoPython {
            looked: match exe_dir {
                Some(d) => format!("python3 and python in {} and on PATH", d.display()),
                None => "python3 and python on PATH".into(),
            },
        });
    }
    let mut other = None;
    for p in &pythons {
        match torch_of(p) {
            Some(t) if supported(&t.version) => return Ok(t),
            Some(t) => {
                other.get_or_insert(t);
            }
            None => {}
        }
    }
    Err(match other {
        Some(t) => LibtorchError::WrongVersion {
            found: t.version,
            at: t.dir,
        },
        None => LibtorchError::NotInstalled { pythons },
    })
}

/// Where the part may be, for a binary in `exe_dir`: `../lib/accel/` (a wheel's data files, scripts/install's
/// PREFIX), then beside the binary (a cargo target directory).
pub fn part_candidates(exe_dir: &Path) -> Vec<PathBuf> {
    let mut c = Vec::new();
    if let Some(prefix) = exe_dir.parent() {
        c.push(prefix.join("lib").join("accel").join(PART));
    }
    c.push(exe_dir.join(PART));
    c
}

/// The directory of the running accel-test binary, symlinks resolved (a pipx-style link into a venv
/// finds the venv).
pub fn exe_dir() -> Option<PathBuf> {
    std::env::current_exe()
        .ok()
        .and_then(|e| e.canonicalize().ok())
        .and_then(|e| e.parent().map(Path::to_path_buf))
}

/// accel-test's libtorch part, loaded.
pub struct Libtorch {
    pub torch: Torch,
    pub part: PathBuf,
    worker: extern "C" fn() -> c_int,
    has_nccl: extern "C" fn() -> c_int,
    describe: extern "C" fn() -> *const c_char,
    built_with: extern "C" fn() -> *const c_char,
}

impl Libtorch {
    /// Finds torch and the part, and loads them.
    pub fn load(env: &Environment) -> Result<Libtorch, LibtorchError> {
        let exe_dir = exe_dir();
        let torch = locate(env, exe_dir.as_deref())?;
        let looked = exe_dir.as_deref().map(part_candidates).unwrap_or_default();
        let part = looked
            .iter()
            .find(|p| p.is_file())
            .cloned()
            .ok_or(LibtorchError::NoPart { looked })?;
        Self::load_from(torch, part)
    }

    fn load_from(torch: Torch, part: PathBuf) -> Result<Libtorch, LibtorchError> {
        let lib = torch.lib();
        // torch's libraries first, by path and global, as Python's `import torch` loads them: their own
        // run paths ($ORIGIN, the nvidia-* wheels beside torch) find what they need, and the part's
        // DT_NEEDED entries (libtorch_cpu.so, libc10.so, libtorch_cuda.so…) then match them by soname.
        for name in [
            "libc10.so",
            "libtorch_cpu.so",
            "libc10_cuda.so",
            "libtorch_cuda.so",
            "libtorch.so",
        ] {
            let path = lib.join(name);
            let optional = name.contains("cuda") || name == "libtorch.so";
            if optional && !path.exists() {
                continue;
            }
            open(&path, libc::RTLD_NOW | libc::RTLD_GLOBAL)?;
        }
        let handle = open(&part, libc::RTLD_NOW | libc::RTLD_LOCAL)?;
        let sym = |name: &str| symbol(handle, &part, name);
        // SAFETY: each symbol is one of the part's `extern "C"` functions of this exact signature
        // (bin/accel-test/torch/plugin.rs); the interface string is checked before any other is called.
        let interface: extern "C" fn() -> *const c_char =
            unsafe { std::mem::transmute(sym("accel_test_torch_interface")?) };
        let found = text(interface());
        if found != INTERFACE {
            return Err(LibtorchError::Interface { found, at: part });
        }
        unsafe {
            Ok(Libtorch {
                worker: std::mem::transmute::<*mut c_void, extern "C" fn() -> c_int>(sym(
                    "accel_test_torch_worker",
                )?),
                has_nccl: std::mem::transmute::<*mut c_void, extern "C" fn() -> c_int>(sym(
                    "accel_test_torch_has_nccl",
                )?),
                describe: std::mem::transmute::<*mut c_void, extern "C" fn() -> *const c_char>(
                    sym("accel_test_torch_describe")?,
                ),
                built_with: std::mem::transmute::<*mut c_void, extern "C" fn() -> *const c_char>(
                    sym("accel_test_torch_built_with")?,
                ),
                torch,
                part,
            })
        }
    }

    /// Runs one rank (`--worker`) from this process's command line and environment.
    pub fn worker(&self) -> ExitStatus {
        let code = (self.worker)();
        match u8::try_from(code) {
            Ok(0) => ExitStatus::Success,
            Ok(c) => ExitStatus::Worker(c),
            Err(_) => ExitStatus::Failure,
        }
    }

    /// Whether the part can make NCCL process groups.
    pub fn has_nccl(&self) -> bool {
        (self.has_nccl)() != 0
    }

    /// The part's `--version` lines (collectives, CUDA), after where torch and the part are.
    pub fn describe(&self) -> String {
        format!(
            "torch: {} at {} (asked {}; the part was built with {})\nlibtorch part: {}\n{}",
            self.torch.version,
            self.torch.dir.display(),
            self.torch.python.display(),
            text((self.built_with)()),
            self.part.display(),
            text((self.describe)())
        )
    }
}

fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the part returns NUL-terminated strings it keeps for the life of the process.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated message owned by the loader.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dynamic loader error".into()
    } else {
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

fn open(path: &Path, flags: c_int) -> Result<*mut c_void, LibtorchError> {
    let load_error = |message: String| LibtorchError::Load {
        what: path.to_path_buf(),
        message,
    };
    let c =
        CString::new(path.as_os_str().as_bytes()).map_err(|_| load_error("NUL in path".into()))?;
    // SAFETY: a valid C string; libraries stay loaded for the life of the process (never dlclosed).
    let h = unsafe { libc::dlopen(c.as_ptr(), flags) };
    if h.is_null() {
        return Err(load_error(dl_error()));
    }
    Ok(h)
}

fn symbol(handle: *mut c_void, part: &Path, name: &str) -> Result<*mut c_void, LibtorchError> {
    let c = CString::new(name).map_err(|_| LibtorchError::Load {
        what: part.to_path_buf(),
        message: format!("bad symbol name {name}"),
    })?;
    // SAFETY: a live handle from dlopen and a valid C string.
    let s = unsafe { libc::dlsym(handle, c.as_ptr()) };
    if s.is_null() {
        return Err(LibtorchError::Load {
            what: part.to_path_buf(),
            message: format!("no symbol {name}: {}", dl_error()),
        });
    }
    Ok(s)
}

/// `accel-test --version` without the part loaded: why not.
pub fn describe_unavailable(err: &LibtorchError) -> String {
    let mut text = format!("collectives: unavailable here: {err}");
    for h in err.hints() {
        text.push_str("\nhint: ");
        text.push_str(&h);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn supported_series() {
        for v in ["2.13", "2.13.0", "2.13.1+cpu", "2.13.0+cu130"] {
            assert!(supported(v), "{v}");
        }
        for v in [
            "2.12.1",
            "2.130.0",
            "2.14.0",
            "2.1",
            "",
            "of unknown version",
        ] {
            assert!(!supported(v), "{v}");
        }
    }

    /// A fake interpreter printing `sys.path` = `dirs`.
    fn fake_python(dir: &Path, name: &str, dirs: &[&Path]) -> PathBuf {
        let path: Vec<String> = std::iter::once(String::new())
            .chain(dirs.iter().map(|d| d.display().to_string()))
            .collect();
        let p = dir.join(name);
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\ncat <<'EOF'\n{}\nEOF\n",
                serde_json::to_string(&path).unwrap()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn site_with_torch(dir: &Path, version: &str) -> PathBuf {
        let site = dir.join(format!("site-{version}"));
        std::fs::create_dir_all(site.join("torch/lib")).unwrap();
        std::fs::write(site.join("torch/__init__.py"), "").unwrap();
        std::fs::write(
            site.join("torch/version.py"),
            format!("__all__ = ['__version__']\n__version__ = '{version}'\ncuda = None\n"),
        )
        .unwrap();
        site
    }

    #[test]
    fn accel_python_then_the_python_beside_the_binary_then_path() {
        let d = tempfile::tempdir().unwrap();
        let bin = d.path().join("venv/bin");
        let other = d.path().join("other");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let mine = fake_python(&bin, "python3", &[]);
        let on_path = fake_python(&other, "python3", &[]);
        let env = Environment::from_pairs([("PATH", other.display().to_string())]);
        assert_eq!(
            pythons(&env, Some(&bin)),
            vec![mine.clone(), on_path.clone()]
        );
        let env = Environment::from_pairs([
            ("PATH", other.display().to_string()),
            ("ACCEL_PYTHON", "/opt/py/bin/python3".into()),
        ]);
        assert_eq!(
            pythons(&env, Some(&bin)),
            vec![PathBuf::from("/opt/py/bin/python3"), mine, on_path]
        );
    }

    #[test]
    fn an_interpreter_that_never_answers_is_given_up() {
        let d = tempfile::tempdir().unwrap();
        let stuck = d.path().join("python3");
        std::fs::write(&stuck, "#!/bin/sh\nexec sleep 60\n").unwrap();
        std::fs::set_permissions(&stuck, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let start = Instant::now();
        assert_eq!(sys_path_of(&stuck, Duration::from_millis(300)), None);
        assert!(start.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn finds_the_right_torch_and_names_the_wrong_or_missing_one() {
        let d = tempfile::tempdir().unwrap();
        let bin = d.path().join("bin");
        let path_dir = d.path().join("path");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&path_dir).unwrap();
        let old = site_with_torch(d.path(), "2.12.1+cu126");
        let good = site_with_torch(d.path(), "2.13.0+cu130");
        let empty = d.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();

        // The binary's own environment has torch 2.12; the one on PATH has 2.13: that one is used.
        fake_python(&bin, "python3", &[&empty, &old]);
        let p = fake_python(&path_dir, "python3", &[&good, &old]);
        let env = Environment::from_pairs([("PATH", path_dir.display().to_string())]);
        let t = locate(&env, Some(&bin)).unwrap();
        assert_eq!((t.version.as_str(), &t.python), ("2.13.0+cu130", &p));
        assert_eq!(t.lib(), good.join("torch/lib"));

        // Only 2.12 anywhere: named, with where it is.
        fake_python(&path_dir, "python3", &[&empty]);
        let e = locate(&env, Some(&bin)).unwrap_err();
        assert_eq!(e.exit_status(), ExitStatus::NoTorch);
        let shown = e.to_string();
        assert!(
            shown.contains("torch 2.12.1+cu126 is installed")
                && shown.contains("needs torch==2.13.*"),
            "{shown}"
        );

        // None: every interpreter asked is named.
        fake_python(&bin, "python3", &[&empty]);
        let e = locate(&env, Some(&bin)).unwrap_err();
        let shown = e.to_string();
        assert!(
            shown.contains("torch is not installed in this environment")
                && shown.contains(&bin.join("python3").display().to_string())
                && shown.contains(&path_dir.join("python3").display().to_string()),
            "{shown}"
        );
        assert!(e.hints()[0].contains("pip install 'torch==2.13.*'"));

        // No interpreter at all.
        let env = Environment::from_pairs([("PATH", empty.display().to_string())]);
        let e = locate(&env, Some(&empty)).unwrap_err();
        assert!(matches!(e, LibtorchError::NoPython { .. }), "{e}");
    }

    #[test]
    fn the_part_is_looked_for_in_the_prefix_then_beside_the_binary() {
        assert_eq!(
            part_candidates(Path::new("/venv/bin")),
            vec![
                PathBuf::from("/venv/lib/accel/libaccel_test_torch.so"),
                PathBuf::from("/venv/bin/libaccel_test_torch.so"),
            ]
        );
    }
}
