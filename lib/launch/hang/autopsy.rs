//! The autopsy of a stuck run: every rank's Python stack, taken from outside with py-spy (no code in
//! the training script), ranks grouped by identical stacks, and one verdict line that names the rank
//! that is somewhere else than the others and the line of the user's code it is at.
//!
//! The grouping and the verdict are pure functions of the stacks (unit-tested below); only
//! [`find_py_spy`] and [`dump`] touch the system.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::env_vars::{self, Environment};

/// One Python frame, as `py-spy dump --json` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    pub name: String,
    pub filename: String,
    #[serde(default)]
    pub short_filename: Option<String>,
    pub line: i64,
}

impl Frame {
    /// The name shown in the verdict: py-spy's short name (the package-relative path, or the script's
    /// base name).
    pub fn short(&self) -> &str {
        self.short_filename.as_deref().unwrap_or(&self.filename)
    }
    /// Code of the Python installation (stdlib, site-packages) rather than the user's.
    pub fn is_library(&self) -> bool {
        is_library_file(&self.filename)
    }
    /// A frame of torch.distributed's collective API (`distributed_c10d.py::all_reduce`, `barrier`, …).
    fn is_collective(&self) -> bool {
        self.filename
            .ends_with("torch/distributed/distributed_c10d.py")
    }
}

/// Code of the Python installation (stdlib, site-packages) rather than the user's.
pub(crate) fn is_library_file(f: &str) -> bool {
    f.contains("/site-packages/")
        || f.contains("/dist-packages/")
        || f.contains("/lib/python3")
        || f.starts_with('<')
}

/// One thread of a rank, innermost frame first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thread {
    #[serde(default)]
    pub thread_name: Option<String>,
    #[serde(default)]
    pub os_thread_id: Option<i64>,
    #[serde(default)]
    pub pid: Option<i64>,
    pub frames: Vec<Frame>,
}

impl Thread {
    fn is_main(&self) -> bool {
        self.thread_name.as_deref() == Some("MainThread")
            || (self.os_thread_id.is_some() && self.os_thread_id == self.pid)
    }
}

/// What is known of one rank at the moment of the autopsy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankStack {
    pub rank: u32,
    pub node: u32,
    pub pid: i32,
    /// The process state from /proc/<pid>/stat (`S` sleeping, `R` running, `T` stopped, `D` disk wait).
    pub state: char,
    /// The Python stacks, or why they could not be taken.
    pub threads: Result<Vec<Thread>, String>,
}

impl RankStack {
    pub fn main_frames(&self) -> Option<&[Frame]> {
        let threads = self.threads.as_ref().ok()?;
        threads
            .iter()
            .find(|t| t.is_main())
            .or(threads.first())
            .map(|t| t.frames.as_slice())
    }

    /// What identifies "the same place": the main thread's frames and whether the process is stopped.
    fn signature(&self) -> (bool, Option<Vec<Frame>>) {
        (self.state == 'T', self.main_frames().map(<[Frame]>::to_vec))
    }
}

/// Parses `py-spy dump --json`.
pub fn parse_py_spy_json(text: &str) -> Result<Vec<Thread>, String> {
    serde_json::from_str(text).map_err(|e| format!("unreadable py-spy output: {e}"))
}

/// A thread of `py-spy dump --json --locals`: the frames with their local variables, for the digest.
#[derive(Deserialize)]
struct DumpThread {
    #[serde(default)]
    thread_id: Option<u64>,
    #[serde(default)]
    thread_name: Option<String>,
    #[serde(default)]
    os_thread_id: Option<i64>,
    #[serde(default)]
    pid: Option<i64>,
    frames: Vec<DumpFrame>,
}

#[derive(Deserialize)]
struct DumpFrame {
    #[serde(flatten)]
    frame: Frame,
    #[serde(default)]
    locals: Option<Vec<Local>>,
}

#[derive(Deserialize, Hash)]
struct Local {
    name: String,
    #[serde(default)]
    repr: Option<String>,
}

/// Parses `py-spy dump --json [--locals]`: the threads, and a digest of what identifies the rank's
/// Python execution at that moment (see [`digest`]).
pub fn parse_dump(text: &str) -> Result<(Vec<Thread>, u64), String> {
    let raw: Vec<DumpThread> =
        serde_json::from_str(text).map_err(|e| format!("unreadable py-spy output: {e}"))?;
    let digest = digest(&raw);
    let threads = raw
        .into_iter()
        .map(|t| Thread {
            thread_name: t.thread_name,
            os_thread_id: t.os_thread_id,
            pid: t.pid,
            frames: t.frames.into_iter().map(|f| f.frame).collect(),
        })
        .collect();
    Ok((threads, digest))
}

/// What must stay the same for a rank to be still: the set of its Python threads, and for the main
/// thread and every thread running the user's code, each frame (function, file, line) with its
/// local variables' names and values (py-spy's repr: a number, a short string, `<Tensor at 0x…>`).
/// A loop's step counter or batch changes every iteration, even where the line does not. Threads
/// made only of library frames (a DataLoader's pin-memory thread, a queue feeder) are counted but
/// their frames are not: they poll on timers and move while the rank is stuck. py-spy's `active` and
/// `owns_gil` flags flip from dump to dump and are left out.
fn digest(threads: &[DumpThread]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut order: Vec<&DumpThread> = threads.iter().collect();
    order.sort_by_key(|t| (t.thread_id, t.os_thread_id));
    for t in order {
        (t.thread_id, t.os_thread_id).hash(&mut h);
        let main = t.thread_name.as_deref() == Some("MainThread")
            || (t.os_thread_id.is_some() && t.os_thread_id == t.pid);
        if !main && t.frames.iter().all(|f| is_library_file(&f.frame.filename)) {
            continue;
        }
        for f in &t.frames {
            (&f.frame.name, &f.frame.filename, f.frame.line).hash(&mut h);
            f.locals.hash(&mut h);
        }
    }
    h.finish()
}

/// Where a group of ranks is, for the verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// Waiting in this torch.distributed collective (`all_reduce`, `barrier`, …).
    pub collective: Option<String>,
    /// The innermost frame of the user's code: function, file, line.
    pub user: Option<(String, String, i64)>,
    pub stopped: bool,
}

impl Place {
    fn of(r: &RankStack) -> Place {
        let frames = r.main_frames().unwrap_or(&[]);
        // The outermost distributed_c10d frame is the API the user called.
        let collective = frames
            .iter()
            .rev()
            .find(|f| f.is_collective())
            .map(|f| f.name.clone());
        let user = frames
            .iter()
            .find(|f| !f.is_library())
            .or(frames.first())
            .map(|f| (f.name.clone(), f.short().to_string(), f.line));
        Place {
            collective,
            user,
            stopped: r.state == 'T',
        }
    }

    fn at(&self) -> String {
        match &self.user {
            Some((_, file, line)) => format!(" ({file}:{line})"),
            None => String::new(),
        }
    }
}

/// Ranks with identical stacks.
#[derive(Debug, Clone)]
pub struct Group {
    pub ranks: Vec<u32>,
    pub nodes: Vec<u32>,
    pub place: Place,
    /// One member's stacks (the same for all), or why they are unknown.
    pub sample: RankStack,
}

/// Groups ranks by identical main-thread stacks; suspects first (stopped ranks, then those not
/// waiting in a collective), then by first rank.
pub fn group(stacks: &[RankStack]) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for r in stacks {
        let sig = r.signature();
        match groups
            .iter_mut()
            .find(|g| g.sample.signature() == sig && sig.1.is_some())
        {
            Some(g) => {
                g.ranks.push(r.rank);
                if !g.nodes.contains(&r.node) {
                    g.nodes.push(r.node);
                }
            }
            None => groups.push(Group {
                ranks: vec![r.rank],
                nodes: vec![r.node],
                place: Place::of(r),
                sample: r.clone(),
            }),
        }
    }
    groups.sort_by_key(|g| {
        let waits = g.place.collective.is_some() && !g.place.stopped;
        (waits, !g.place.stopped, g.ranks.first().copied())
    });
    groups
}

fn ranks_label(g: &Group) -> String {
    let list: Vec<String> = g.ranks.iter().map(u32::to_string).collect();
    let nodes: Vec<String> = g.nodes.iter().map(u32::to_string).collect();
    let node = if g.nodes.len() == 1 { "node" } else { "nodes" };
    let rank = if g.ranks.len() == 1 { "rank" } else { "ranks" };
    format!("{rank} {} ({node} {})", list.join(","), nodes.join(","))
}

/// The one-line verdict (without the `tool: hang: ` prefix).
pub fn verdict(groups: &[Group]) -> String {
    let mut parts = Vec::new();
    for g in groups {
        let one = g.ranks.len() == 1;
        let who = ranks_label(g);
        let p = &g.place;
        let what = match (&g.sample.threads, &p.collective) {
            (Err(why), _) => format!(
                "{} {} (no Python stack: {why})",
                if one { "is" } else { "are" },
                state_word(g.sample.state)
            ),
            (Ok(_), Some(c)) if !p.stopped => {
                format!("{} in {c}{}", if one { "waits" } else { "wait" }, p.at())
            }
            (Ok(_), _) => {
                let func = p.user.as_ref().map_or("?", |u| u.0.as_str());
                let stopped = if p.stopped { "stopped (SIGSTOP) " } else { "" };
                format!(
                    "{} {stopped}in {func}{}",
                    if one { "is" } else { "are" },
                    p.at()
                )
            }
        };
        parts.push(format!("{who} {what}"));
    }
    let all_wait = groups.len() > 1
        && groups
            .iter()
            .all(|g| g.place.collective.is_some() && !g.place.stopped);
    let line = parts.join("; ");
    if all_wait {
        format!("collectives do not match: {line}")
    } else {
        line
    }
}

fn state_word(state: char) -> &'static str {
    match state {
        'T' | 't' => "stopped",
        'D' => "in uninterruptible sleep",
        'R' => "running",
        'Z' => "a zombie",
        _ => "sleeping",
    }
}

/// The grouped stacks, as printed after the verdict: each group once, every thread.
pub fn render_groups(groups: &[Group]) -> String {
    let mut out = String::new();
    for g in groups {
        let _ = writeln!(
            out,
            "  {} (pid {}, state {}):",
            ranks_label(g),
            g.sample.pid,
            g.sample.state
        );
        match &g.sample.threads {
            Err(why) => {
                let _ = writeln!(out, "    no Python stack: {why}");
            }
            Ok(threads) => {
                for t in threads {
                    let _ = writeln!(
                        out,
                        "    thread {} ({}):",
                        t.os_thread_id.unwrap_or_default(),
                        t.thread_name.as_deref().unwrap_or("?")
                    );
                    for f in &t.frames {
                        let _ = writeln!(out, "      {} ({}:{})", f.name, f.short(), f.line);
                    }
                }
            }
        }
    }
    out
}

/// One rank's full dump, for the file under --log_dir.
pub fn render_rank(r: &RankStack) -> String {
    let mut out = format!(
        "rank {} (node {}), pid {}, state {}\n",
        r.rank, r.node, r.pid, r.state
    );
    match &r.threads {
        Err(why) => {
            let _ = writeln!(out, "no Python stack: {why}");
        }
        Ok(threads) => {
            for t in threads {
                let _ = writeln!(
                    out,
                    "thread {} ({}):",
                    t.os_thread_id.unwrap_or_default(),
                    t.thread_name.as_deref().unwrap_or("?")
                );
                for f in &t.frames {
                    let _ = writeln!(out, "  {} ({}:{})", f.name, f.filename, f.line);
                }
            }
        }
    }
    out
}

/// py-spy on PATH, else next to the interpreter the ranks run (`.venv/bin/py-spy` beside
/// `.venv/bin/python`).
pub fn find_py_spy(env: &Environment, interpreter: Option<&Path>) -> Option<PathBuf> {
    let path = env.get(env_vars::PATH).unwrap_or_default();
    if let Ok(p) = which::which_in("py-spy", Some(path), "/") {
        return Some(p);
    }
    let dir = interpreter?.parent()?;
    let p = dir.join("py-spy");
    p.is_file().then_some(p)
}

/// The state letter of /proc/<pid>/stat.
pub fn proc_state(pid: i32) -> char {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let i = s.rfind(')')?;
            s[i + 1..].trim_start().chars().next()
        })
        .unwrap_or('?')
}

/// Takes one process's Python stacks. `--nonblocking`: the rank is not paused (ptrace-stopping a
/// SIGSTOPped process fails), which is exact for a process that does not move.
pub fn dump(py_spy: &Path, pid: i32, timeout: Duration) -> Result<Vec<Thread>, String> {
    dump_digest(py_spy, pid, timeout, false).map(|(t, _)| t)
}

/// [`dump`], with the digest of the stacks; `locals`: with each frame's local variables in it.
pub fn dump_digest(
    py_spy: &Path,
    pid: i32,
    timeout: Duration,
    locals: bool,
) -> Result<(Vec<Thread>, u64), String> {
    let mut args = vec!["dump", "--json", "--nonblocking"];
    if locals {
        args.push("--locals");
    }
    let mut child = Command::new(py_spy)
        .args(args)
        .args(["--pid", &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", py_spy.display()))?;
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut o = String::new();
        let mut e = String::new();
        if let Some(s) = out.as_mut() {
            let _ = s.read_to_string(&mut o);
        }
        if let Some(s) = err.as_mut() {
            let _ = s.read_to_string(&mut e);
        }
        (o, e)
    });
    let until = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let (o, e) = reader.join().unwrap_or_default();
    match status {
        None => Err(format!(
            "py-spy took more than {:.1}s",
            timeout.as_secs_f64()
        )),
        Some(s) if s.success() => parse_dump(&o),
        Some(_) => {
            let first = e
                .lines()
                .find(|l| l.starts_with("Error") || l.contains("ermission"))
                .or(e.lines().next())
                .unwrap_or("failed")
                .trim()
                .to_string();
            Err(format!("py-spy: {first}"))
        }
    }
}

/// One rank's sampled stacks: what is known of it, and the digest of its stacks when they were
/// taken ([`parse_dump`]).
#[derive(Debug, Clone)]
pub struct Sampled {
    pub stack: RankStack,
    pub digest: Option<u64>,
}

/// Takes every rank's stacks at once, a thread per rank, each dump bounded by `per_dump` (retried
/// once when it failed fast: a dump can race a rank changing its stack), so that the whole takes at
/// most `per_dump` however many ranks there are. `ranks`: (rank, node, pid).
pub fn take_parallel(
    py_spy: Option<&Path>,
    ranks: &[(u32, u32, i32)],
    per_dump: Duration,
) -> Vec<RankStack> {
    sample_parallel(py_spy, ranks, per_dump, false)
        .into_iter()
        .map(|s| s.stack)
        .collect()
}

/// [`take_parallel`], with each rank's digest; `locals`: the frames' local variables in it.
pub fn sample_parallel(
    py_spy: Option<&Path>,
    ranks: &[(u32, u32, i32)],
    per_dump: Duration,
    locals: bool,
) -> Vec<Sampled> {
    let one = move |py_spy: Option<PathBuf>, rank: u32, node: u32, pid: i32| {
        let state = proc_state(pid);
        let taken = match py_spy {
            None => Err("py-spy not found".to_string()),
            Some(p) => {
                let t = Instant::now();
                dump_digest(&p, pid, per_dump, locals).or_else(|e| {
                    let left = per_dump.saturating_sub(t.elapsed());
                    if left >= per_dump / 2 {
                        dump_digest(&p, pid, left, locals)
                    } else {
                        Err(e)
                    }
                })
            }
        };
        if let Err(e) = &taken {
            log::debug!("py-spy on pid {pid}: {e}");
        }
        let (threads, digest) = match taken {
            Ok((t, d)) => (Ok(t), Some(d)),
            Err(e) => (Err(e), None),
        };
        Sampled {
            stack: RankStack {
                rank,
                node,
                pid,
                state,
                threads,
            },
            digest,
        }
    };
    let handles: Vec<_> = ranks
        .iter()
        .map(|&(rank, node, pid)| {
            let py_spy = py_spy.map(Path::to_path_buf);
            std::thread::Builder::new()
                .name(format!("py-spy {pid}"))
                .spawn(move || one(py_spy, rank, node, pid))
        })
        .collect();
    handles
        .into_iter()
        .zip(ranks)
        .map(|(h, &(rank, node, pid))| {
            let failed = |why: &str| Sampled {
                stack: RankStack {
                    rank,
                    node,
                    pid,
                    state: proc_state(pid),
                    threads: Err(why.to_string()),
                },
                digest: None,
            };
            match h {
                Ok(h) => h.join().unwrap_or_else(|_| failed("the dump failed")),
                Err(e) => failed(&format!("cannot start a thread for py-spy: {e}")),
            }
        })
        .collect()
}

/// How long one rank's native samples are taken for, in seconds (`py-spy record --duration` takes
/// whole seconds), and at what rate: about 10 samples spread over 2 s.
const NATIVE_SECONDS: u32 = 2;
const NATIVE_RATE: u32 = 5;
/// Fewer samples than this tell nothing (py-spy lost them on a saturated machine).
const NATIVE_MIN_SAMPLES: usize = 3;
/// How many named native frames from the innermost one are looked at for a compute kernel: a kernel
/// may call a helper of its own (`copy_same_type_transpose_`'s lambda under `at::native::copy_impl`)
/// or of the C runtime (memcpy).
const NATIVE_DEPTH: usize = 3;
/// The bound on one rank's native sampling: py-spy's start (it reads the symbols and unwind tables of
/// libtorch_cpu.so, seconds on a loaded machine) and the sampling itself.
pub const NATIVE_LIMIT: Duration = Duration::from_secs(12);

/// A frame of a native sample: the function (demangled, or an address) and the file it is in (a
/// library, a Python source, or `?` for code of no file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeFrame {
    pub name: String,
    pub file: String,
}

impl NativeFrame {
    fn library(&self) -> &str {
        self.file.rsplit('/').next().unwrap_or(&self.file)
    }

    fn is_python(&self) -> bool {
        self.file.ends_with(".py") || self.file.starts_with('<')
    }

    /// Skipped on the way out from the innermost frame: the C runtime's helpers, which kernels call
    /// (memcpy, memset, expf) and which have no symbols here (`0x7f… (libc.so.6)`), and code in no
    /// file, which is what JIT-generated kernels are (oneDNN's convolutions show `0x7f… (?)` under
    /// `dnnl::impl::…::execute_forward`). A spin in libc (`sched_yield` in a polling loop) is judged
    /// by its caller, which is no kernel.
    fn is_runtime_helper(&self) -> bool {
        let lib = self.library();
        self.file == "?"
            || ["libc.so", "libm.so", "libpthread", "ld-linux", "libgcc_s"]
                .iter()
                .any(|p| lib.starts_with(p))
    }

    /// Ends the walk, not a kernel: GPU and collective runtimes (a rank hung in
    /// `cudaStreamSynchronize` spins in libcuda; ATen's CUDA operators live in libtorch_cuda, so an
    /// `at::native::` frame there is no CPU kernel), c10d and gloo (collectives that wait), and
    /// OpenMP's thread team (where a thread waits for the others at a barrier).
    fn ends_the_walk(&self) -> bool {
        let lib = self.library();
        let gpu_or_wait = [
            "libcuda",
            "libcudart",
            "libcublas",
            "libcudnn",
            "libnccl",
            "libtorch_cuda",
            "libc10_cuda",
            "libamdhip",
            "libhip",
            "librccl",
            "libtorch_hip",
            "libgomp",
            "libiomp",
            "libomp",
        ];
        gpu_or_wait.iter().any(|p| lib.starts_with(p))
            || ["c10d::", "gloo::", "c10::cuda::", "at::cuda::"]
                .iter()
                .any(|p| self.name.starts_with(p))
    }

    /// A CPU compute kernel's own code: time spent here is arithmetic on tensors, not a spin.
    fn is_compute_kernel(&self) -> bool {
        // - MKL's compute domains (torch links MKL into libtorch_cpu): BLAS (`torch.mm`'s
        //   `mkl_blas_def_sgemm_kernel_0_zen`), LAPACK, FFT (`mkl_dft_…`), vector math (`torch.tanh`'s
        //   `mkl_vml_kernel_sTanh_…`), sparse BLAS. Not `mkl_serv_`, its service layer (threads,
        //   memory, dispatch).
        // - `gemm`/`gemv`: matrix products of any BLAS (OpenBLAS's `sgemm_kernel_HASWELL`,
        //   `cblas_sgemm`, fbgemm's quantized kernels, ATen's `at::native::cpublas::gemm`).
        // - oneDNN (convolutions, matmul; reached through ideep): its JIT code has no symbol and is
        //   skipped, so the first named frame is its `dnnl::impl::…::execute`.
        // - ATen's CPU operators (`at::native::`: TensorIterator loops, reductions, sort, copy; also
        //   inside templates, `std::__introsort_loop<at::native::…>`), its SIMD vectors (`at::vec::`)
        //   and the SLEEF vector math they call (`Sleef_tanhf8_u10avx2`).
        const MARKERS: [&str; 15] = [
            "mkl_blas_",
            "mkl_lapack_",
            "mkl_dft_",
            "mkl_vml_",
            "mkl_spblas_",
            "mkl_sparse_",
            "gemm",
            "gemv",
            "dnnl::",
            "dnnl_",
            "mkldnn",
            "ideep::",
            "at::native::",
            "at::vec::",
            "Sleef_",
        ];
        if MARKERS.iter().any(|m| self.name.contains(m)) {
            return true;
        }
        // OpenBLAS (numpy's and scipy's bundled copies too) by its library: its kernels' names
        // (`sdot_k_HASWELL`, `dgemm_oncopy`) share no prefix. Not its thread server and the wait for
        // it, where a pool deadlocked after a fork spins.
        self.library().contains("openblas")
            && !["blas_thread", "exec_blas"]
                .iter()
                .any(|p| self.name.contains(p))
    }
}

/// Whether one native sample (innermost frame first) is in a CPU compute kernel: from the innermost
/// frame outwards, past the C runtime's helpers and JIT code, one of the next [`NATIVE_DEPTH`] named
/// frames is a kernel's before a Python frame or a GPU, collective or thread-team frame.
pub fn in_compute_kernel(frames: &[NativeFrame]) -> bool {
    frames
        .iter()
        .filter(|f| !f.is_runtime_helper())
        .take_while(|f| !f.is_python() && !f.ends_the_walk())
        .take(NATIVE_DEPTH)
        .any(NativeFrame::is_compute_kernel)
}

/// Whether a rank whose Python stack does not change is computing: more than half of its native
/// samples (those of its active threads; py-spy leaves idle ones out) are in a compute kernel, and
/// there are at least [`NATIVE_MIN_SAMPLES`] of them.
pub fn computing(samples: &[Vec<NativeFrame>]) -> bool {
    let kernel = samples.iter().filter(|s| in_compute_kernel(s)).count();
    samples.len() >= NATIVE_MIN_SAMPLES && 2 * kernel > samples.len()
}

#[derive(Deserialize)]
struct Speedscope {
    profiles: Vec<SpeedscopeProfile>,
    shared: SpeedscopeShared,
}

#[derive(Deserialize)]
struct SpeedscopeProfile {
    #[serde(default)]
    samples: Vec<Vec<usize>>,
}

#[derive(Deserialize)]
struct SpeedscopeShared {
    frames: Vec<SpeedscopeFrame>,
}

#[derive(Deserialize)]
struct SpeedscopeFrame {
    name: String,
    #[serde(default)]
    file: Option<String>,
}

/// Parses `py-spy record --format speedscope`: every sample of every thread, innermost frame first
/// (speedscope lists each sample's frames outermost first, by index into the shared frames).
pub fn parse_speedscope(text: &str) -> Result<Vec<Vec<NativeFrame>>, String> {
    let s: Speedscope =
        serde_json::from_str(text).map_err(|e| format!("unreadable py-spy output: {e}"))?;
    let frame = |i: usize| {
        s.shared.frames.get(i).map(|f| NativeFrame {
            name: f.name.clone(),
            file: f.file.clone().unwrap_or_else(|| "?".into()),
        })
    };
    Ok(s.profiles
        .iter()
        .flat_map(|p| &p.samples)
        .map(|sample| sample.iter().rev().filter_map(|i| frame(*i)).collect())
        .collect())
}

/// Takes a rank's native samples: `py-spy record --native` for [`NATIVE_SECONDS`] at
/// [`NATIVE_RATE`] a second, one py-spy for all of them. py-spy cannot take native stacks with
/// `--nonblocking`: the rank is paused for each sample, and for its first while py-spy reads the
/// unwind tables of its libraries (about a second with libtorch_cpu.so), once per call.
pub fn native_samples(py_spy: &Path, pid: i32) -> Result<Vec<Vec<NativeFrame>>, String> {
    let out = tempfile::Builder::new()
        .prefix("accel-native-")
        .suffix(".json")
        .tempfile()
        .map_err(|e| format!("no file for py-spy's samples: {e}"))?;
    let mut child = Command::new(py_spy)
        .args(["record", "--native", "--format", "speedscope"])
        .args(["--duration", &NATIVE_SECONDS.to_string()])
        .args(["--rate", &NATIVE_RATE.to_string()])
        .args(["--pid", &pid.to_string()])
        .arg("--output")
        .arg(out.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", py_spy.display()))?;
    let until = Instant::now() + NATIVE_LIMIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    match status {
        None => Err(format!(
            "py-spy record took more than {} s",
            NATIVE_LIMIT.as_secs()
        )),
        Some(s) if s.success() => {
            let text = std::fs::read_to_string(out.path())
                .map_err(|e| format!("py-spy's samples cannot be read: {e}"))?;
            parse_speedscope(&text)
        }
        Some(s) => Err(format!("py-spy record failed ({s})")),
    }
}

/// The report: the verdict line, then the grouped stacks. `head` is e.g. `accel-launch: hang`.
pub fn report(head: &str, stacks: &[RankStack]) -> String {
    let groups = group(stacks);
    format!("{head}: {}\n{}", verdict(&groups), render_groups(&groups))
}

/// Writes each rank's full dump and the report under `dir`.
pub fn write_dumps(dir: &Path, report: &str, stacks: &[RankStack]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("report.txt"), report)?;
    let by_rank: BTreeMap<u32, &RankStack> = stacks.iter().map(|s| (s.rank, s)).collect();
    for (rank, s) in by_rank {
        std::fs::write(dir.join(format!("rank_{rank}.txt")), render_rank(s))?;
    }
    Ok(())
}

/// NCCL's Flight Recorder, where the ranks run NCCL: the launcher set `TORCH_NCCL_DEBUG_INFO_PIPE_FILE`
/// to `dir/fr_pipe_` (see [`flight_recorder_env`]), so each NCCL rank listens on `fr_pipe_<rank>.pipe`;
/// writing to it makes the rank dump its record to `TORCH_FR_DUMP_TEMP_FILE<rank>`
/// (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, the debug-info pipe). gloo has no outside
/// trigger, so gloo runs get stacks only.
pub fn flight_recorder_dump(dir: &Path, stacks: &[RankStack]) {
    let asked: Vec<PathBuf> = stacks
        .iter()
        .filter_map(|s| ask_flight_recorder(dir, s.rank))
        .collect();
    let until = Instant::now() + Duration::from_secs(5);
    while !asked.iter().all(|p| p.exists()) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Asks NCCL rank `rank` for a Flight Recorder dump through its debug-info pipe `dir/fr_pipe_<rank>.pipe`
/// (which the rank made: only NCCL ranks have one); the dump will be `dir/flight_recorder_<rank>`.
/// `None` when the rank has no pipe or nobody reads it (the rank is gone). The write does not block:
/// the rank's watchdog reads the pipe now and then.
pub fn ask_flight_recorder(dir: &Path, rank: u32) -> Option<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let pipe = flight_recorder_pipe(dir, rank);
    if !pipe.exists() {
        return None;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&pipe)
        .ok()?;
    let _ = f.write_all(b"1\n");
    Some(flight_recorder_file(dir, rank))
}

/// Rank `rank`'s debug-info pipe under the dump directory `dir` ([`flight_recorder_env`]).
pub fn flight_recorder_pipe(dir: &Path, rank: u32) -> PathBuf {
    dir.join(format!("fr_pipe_{rank}.pipe"))
}

/// Where rank `rank` writes its dump under `dir` ([`flight_recorder_env`]).
pub fn flight_recorder_file(dir: &Path, rank: u32) -> PathBuf {
    dir.join(format!("flight_recorder_{rank}"))
}

/// The variables that turn the Flight Recorder on for a watched run: a record of the last collectives
/// (`TORCH_FR_BUFFER_SIZE`), and, with a dump directory, NCCL's dump-on-timeout and debug-info pipe
/// pointed there. Variables the user set are left alone by the caller.
pub fn flight_recorder_env(dump_dir: Option<&Path>) -> Vec<(&'static str, String)> {
    let mut v = vec![(env_vars::TORCH_FR_BUFFER_SIZE, "2000".to_string())];
    if let Some(d) = dump_dir {
        v.push((env_vars::TORCH_NCCL_DUMP_ON_TIMEOUT, "1".into()));
        v.push((
            env_vars::TORCH_FR_DUMP_TEMP_FILE,
            d.join("flight_recorder_").to_string_lossy().into_owned(),
        ));
        v.push((
            env_vars::TORCH_NCCL_DEBUG_INFO_PIPE_FILE,
            d.join("fr_pipe_").to_string_lossy().into_owned(),
        ));
    }
    v
}

/// The ranks of a running accel-launch, for `accel-launch --stacks PID`: its children that lead their
/// own session (the supervisor `setsid`s each rank; its guards do not), with RANK and GROUP_RANK from
/// their environment. (rank, node, pid), and the first rank's interpreter.
/// `Ok` when `pid` runs accel-launch: its executable is this binary (the same file) or is named
/// `accel-launch`. Anything else (a tmux server, a Python parent of a `setsid` child) has children
/// in sessions of their own too, which must not be taken for ranks. `Err` says what `pid` runs.
pub fn is_accel_launch(pid: i32) -> Result<(), String> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "no such process".to_string(),
        std::io::ErrorKind::PermissionDenied => {
            "its executable cannot be read: a process of another user".to_string()
        }
        _ => format!("its executable cannot be read: {e}"),
    })?;
    // A binary replaced on disk while it runs (a rebuild, a reinstall) reads as `PATH (deleted)`.
    let shown = exe.to_string_lossy();
    let path = std::path::PathBuf::from(shown.strip_suffix(" (deleted)").unwrap_or(&shown));
    if path.file_name().is_some_and(|n| n == "accel-launch") {
        return Ok(());
    }
    let same_file = |a: &std::path::Path, b: &std::path::Path| {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    };
    let mine = std::env::current_exe().ok();
    if mine.is_some_and(|m| same_file(&m, &std::path::PathBuf::from(format!("/proc/{pid}/exe")))) {
        return Ok(());
    }
    Err(format!("it runs {}", path.display()))
}

pub fn ranks_of_launcher(launcher: i32) -> (Vec<(u32, u32, i32)>, Option<PathBuf>) {
    let mut children = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{launcher}/task")) {
        for t in tasks.flatten() {
            if let Ok(c) = std::fs::read_to_string(t.path().join("children")) {
                children.extend(c.split_whitespace().filter_map(|x| x.parse::<i32>().ok()));
            }
        }
    }
    let mut ranks = Vec::new();
    let mut interpreter = None;
    for pid in children {
        if session_of(pid) != Some(pid) {
            continue;
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let var = |name: &str| {
            environ
                .split(|b| *b == 0)
                .filter_map(|kv| std::str::from_utf8(kv).ok())
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.parse::<u32>().ok())
        };
        let rank = var("RANK").unwrap_or(ranks.len() as u32);
        let node = var("GROUP_RANK").unwrap_or(0);
        if interpreter.is_none() {
            interpreter = std::fs::read(format!("/proc/{pid}/cmdline"))
                .ok()
                .and_then(|c| {
                    let first = c.split(|b| *b == 0).next()?.to_vec();
                    String::from_utf8(first).ok()
                })
                .filter(|a| a.contains('/'))
                .map(PathBuf::from);
        }
        ranks.push((rank, node, pid));
    }
    ranks.sort();
    (ranks, interpreter)
}

fn session_of(pid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = s[s.rfind(')')? + 2..].split_whitespace().collect();
    // state ppid pgrp session
    f.get(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(name: &str, file: &str, line: i64) -> Frame {
        let short = file.rsplit("site-packages/").next().map(|s| {
            if s.starts_with('/') {
                s.rsplit('/').next().unwrap_or(s).to_string()
            } else {
                s.to_string()
            }
        });
        Frame {
            name: name.into(),
            filename: file.into(),
            short_filename: short,
            line,
        }
    }

    fn rank(rank: u32, state: char, frames: Vec<Frame>) -> RankStack {
        RankStack {
            rank,
            node: 0,
            pid: 100 + rank as i32,
            state,
            threads: Ok(vec![Thread {
                thread_name: Some("MainThread".into()),
                os_thread_id: Some(100 + rank as i64),
                pid: Some(100 + rank as i64),
                frames,
            }]),
        }
    }

    const C10D: &str = "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py";
    const LOGGER: &str = "/v/lib/python3.11/site-packages/torch/distributed/c10d_logger.py";

    fn waiting(r: u32, coll: &str, line: i64) -> RankStack {
        rank(
            r,
            'S',
            vec![
                f(coll, C10D, 3252),
                f("wrapper", LOGGER, 83),
                f("main", "/w/train.py", line),
                f("<module>", "/w/train.py", 99),
            ],
        )
    }

    #[test]
    fn names_the_rank_that_is_elsewhere_first() {
        let stuck = rank(
            1,
            'S',
            vec![
                f("stuck_in_data_loading", "/w/train.py", 42),
                f("main", "/w/train.py", 50),
            ],
        );
        let stacks = vec![
            waiting(0, "all_reduce", 57),
            stuck,
            waiting(2, "all_reduce", 57),
            waiting(3, "all_reduce", 57),
        ];
        let groups = group(&stacks);
        assert_eq!(groups.len(), 2);
        assert_eq!(
            verdict(&groups),
            "rank 1 (node 0) is in stuck_in_data_loading (train.py:42); ranks 0,2,3 (node 0) wait in all_reduce (train.py:57)"
        );
    }

    #[test]
    fn mismatched_collectives() {
        let stacks = vec![waiting(0, "all_reduce", 10), waiting(1, "broadcast", 12)];
        assert_eq!(
            verdict(&group(&stacks)),
            "collectives do not match: rank 0 (node 0) waits in all_reduce (train.py:10); rank 1 (node 0) waits in broadcast (train.py:12)"
        );
    }

    #[test]
    fn library_frames_point_at_the_users_line_and_stopped_ranks_are_said() {
        let r = rank(
            1,
            'T',
            vec![
                f("_wait", "/usr/lib/python3.11/subprocess.py", 2000),
                f("run", "/usr/lib/python3.11/subprocess.py", 550),
                f("in_subprocess", "/w/train.py", 20),
            ],
        );
        let stacks = vec![waiting(0, "barrier", 5), r];
        assert_eq!(
            verdict(&group(&stacks)),
            "rank 1 (node 0) is stopped (SIGSTOP) in in_subprocess (train.py:20); rank 0 (node 0) waits in barrier (train.py:5)"
        );
    }

    #[test]
    fn without_stacks_the_state_is_reported() {
        let mut a = waiting(0, "all_reduce", 1);
        a.threads = Err("py-spy not found".into());
        a.state = 'T';
        let mut b = waiting(1, "all_reduce", 1);
        b.threads = Err("py-spy not found".into());
        let v = verdict(&group(&[a, b]));
        assert_eq!(
            v,
            "rank 0 (node 0) is stopped (no Python stack: py-spy not found); rank 1 (node 0) is sleeping (no Python stack: py-spy not found)"
        );
    }

    #[test]
    fn parses_py_spy_json() {
        let text = r#"[{"pid": 7, "thread_id": 1, "thread_name": "MainThread", "os_thread_id": 7,
            "active": false, "owns_gil": false, "frames": [{"name": "all_reduce",
            "filename": "/x/torch/distributed/distributed_c10d.py", "module": null,
            "short_filename": "torch/distributed/distributed_c10d.py", "line": 3252, "locals": null,
            "is_entry": true, "is_shim_entry": false}], "process_info": null}]"#;
        let t = parse_py_spy_json(text).unwrap();
        assert_eq!(t[0].frames[0].name, "all_reduce");
        assert!(t[0].is_main());
        assert!(parse_py_spy_json("nope").is_err());
    }

    /// A native sample, innermost frame first, from `name (file)` pairs as py-spy shows them.
    fn native(frames: &[(&str, &str)]) -> Vec<NativeFrame> {
        frames
            .iter()
            .map(|(name, file)| NativeFrame {
                name: (*name).into(),
                file: (*file).into(),
            })
            .collect()
    }

    const TORCH_CPU: &str = "/v/site-packages/torch/lib/libtorch_cpu.so";
    const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";
    const PYTHON: &str = "/usr/lib/libpython3.11.so.1.0";

    #[test]
    fn compute_kernels_are_told_from_spins_by_their_native_frames() {
        // Samples taken with py-spy record --native of the loops each names (torch 2.13, MKL).
        let kernels = [
            // torch.mm(a, b, out=c)
            native(&[
                ("mkl_blas_def_sgemm_kernel_0_zen", TORCH_CPU),
                ("<module>", "/w/mm.py"),
            ]),
            // torch.tanh(a, out=c)
            native(&[("mkl_vml_kernel_sTanh_EXHAynn", TORCH_CPU), ("<module>", "/w/t.py")]),
            // conv2d: oneDNN's JIT code has no file.
            native(&[
                ("0x7f9bc962769b", "?"),
                ("dnnl::impl::cpu::x64::jit_avx2_convolution_fwd_t::execute_forward", TORCH_CPU),
            ]),
            // c.copy_(a.t()): memcpy under an anonymous-namespace helper of at::native::copy_impl.
            native(&[
                ("0x7fa260b70b5b", LIBC),
                ("(anonymous namespace)::copy_same_type_transpose_(at::Tensor&, at::Tensor const&)::{lambda()#1}::operator() const", TORCH_CPU),
                ("at::native::copy_impl", TORCH_CPU),
            ]),
            // torch.sort: ATen's types inside a std:: template.
            native(&[("std::__introsort_loop<at::native::CompositeRandomAccessor<float*, long*, at::native::TupleInfoCPU>, long>", TORCH_CPU)]),
            // numpy's OpenBLAS.
            native(&[("sdot_k_HASWELL", "/v/numpy.libs/libscipy_openblas64_-ff651d7f.so")]),
        ];
        for k in &kernels {
            assert!(in_compute_kernel(k), "{k:?}");
        }
        let spins = [
            // A catastrophic regex.
            native(&[
                ("0x7f5dda170ae6", LIBC),
                ("sre_ucs1_match", PYTHON),
                ("_sre_SRE_Pattern_match", PYTHON),
                ("match", "/usr/lib/python3.11/re/__init__.py"),
            ]),
            // `while True: pass`: the innermost frame is Python's.
            native(&[("<module>", "/w/busy.py"), ("0x7fda2124524a", LIBC)]),
            // A GPU sync on a hung kernel: ATen's CUDA operator under libcuda's spin.
            native(&[
                ("0x7f00aa001122", "/usr/lib/libcuda.so.1"),
                ("0x7f00aa003344", "/usr/lib/libcuda.so.1"),
                ("cudaStreamSynchronize", "/v/torch/lib/libcudart.so.13"),
                (
                    "at::native::_local_scalar_dense_cuda",
                    "/v/torch/lib/libtorch_cuda.so",
                ),
            ]),
            // A collective's wait, and OpenMP's barrier above a kernel's caller.
            native(&[
                ("sched_yield", LIBC),
                ("c10d::ProcessGroupGloo::AsyncWork::wait", TORCH_CPU),
                ("at::native::foo", TORCH_CPU),
            ]),
            native(&[
                (
                    "gomp_team_barrier_wait_end",
                    "/v/torch/lib/libgomp-a34b3233.so.1",
                ),
                ("at::internal::invoke_parallel", TORCH_CPU),
            ]),
            // MKL's service layer, and OpenBLAS's thread server.
            native(&[
                ("mkl_serv_thread_yield", TORCH_CPU),
                ("ttl_parallel_team", TORCH_CPU),
            ]),
            native(&[("blas_thread_server", "/v/libopenblas.so.0")]),
            // A kernel too far out: a user's C extension spinning three calls below it.
            native(&[
                ("spin3", "/w/ext.so"),
                ("spin2", "/w/ext.so"),
                ("spin1", "/w/ext.so"),
                ("at::native::add", TORCH_CPU),
            ]),
        ];
        for s in &spins {
            assert!(!in_compute_kernel(s), "{s:?}");
        }
        // A majority of at least three samples.
        let k = || kernels[0].clone();
        let s = || spins[0].clone();
        assert!(computing(&[k(), k(), s()]));
        assert!(!computing(&[k(), s(), s()]));
        assert!(!computing(&[k(), k(), s(), s()]));
        assert!(!computing(&[k(), k()]), "too few samples tell nothing");
        assert!(!computing(&[]));
    }

    #[test]
    fn parses_py_spy_speedscope() {
        let text = r#"{"$schema":"https://www.speedscope.app/file-format-schema.json","profiles":[{"type":"sampled","name":"Thread 22232 \"MainThread\"","unit":"seconds","startValue":0.0,"endValue":0.67,"samples":[[1,0],[1,0]],"weights":[0.33,0.33]}],"shared":{"frames":[{"name":"mkl_blas_def_sgemm_kernel_0_zen","file":"/v/torch/lib/libtorch_cpu.so","line":0,"col":null},{"name":"<module>","file":"/tmp/mm.py","line":6,"col":null}]},"activeProfileIndex":null,"exporter":"py-spy@0.4.3","name":"py-spy profile"}"#;
        let samples = parse_speedscope(text).unwrap();
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[0][0].name, "mkl_blas_def_sgemm_kernel_0_zen");
        assert_eq!(samples[0][1].file, "/tmp/mm.py");
        assert!(parse_speedscope("nope").is_err());
    }
}
