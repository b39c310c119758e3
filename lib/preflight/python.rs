//! `--python`: the same world checked again from the user's Python with torch.distributed, so a broken
//! Python side of the installation (no torch, a torch without gloo/NCCL, a wrong interpreter) shows up
//! before the training does. The Python ranks join rank 0's store under their own prefix.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::env_vars;

/// The embedded check. It prints the same JSON events as the native ranks, names prefixed `python.`.
pub const SCRIPT: &str = r#"
import datetime, json, os, sys, time
rank = int(os.environ["RANK"]); world = int(os.environ["WORLD_SIZE"])
ok_all = True
def emit(name, ok, detail="", ms=0.0):
    global ok_all
    ok_all = ok_all and ok
    print(json.dumps({"event": "check", "rank": rank, "name": "python." + name, "ok": ok,
                      "detail": detail, "ms": ms}), flush=True)
try:
    import torch
    import torch.distributed as dist
except Exception as e:
    emit("import torch", False, "%s: %r" % (sys.executable, e)); sys.exit(1)
emit("import torch", True, "%s, torch %s" % (sys.executable, torch.__version__))
timeout = datetime.timedelta(seconds=float(os.environ["ACCEL_TEST_TIMEOUT"]))
cuda = os.environ.get("ACCEL_TEST_DEVICE", "cpu") == "cuda"
backend = "nccl" if cuda else "gloo"
t0 = time.time()
try:
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=False, timeout=timeout, wait_for_workers=False)
    store = dist.PrefixStore("accel-test/python", store)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
except Exception as e:
    emit("init_process_group", False, str(e).strip().splitlines()[0] if str(e).strip() else repr(e))
    sys.exit(1)
emit("init_process_group", True, backend, (time.time() - t0) * 1000)
n = 1009 if world % 1009 else 1013
def inp(r):
    return torch.tensor([(r + 1) * (i % 7 + 1) for i in range(n)], dtype=torch.float32, device=dev)
def compare(name, got, want, t):
    bad = (got != want).nonzero()
    if len(bad):
        i = int(bad[0][0])
        emit(name, False, "element %d: expected %g, got %g" % (i, want[i].item(), got[i].item()))
    else:
        emit(name, True, "", (time.time() - t) * 1000)
def run(name, body):
    t = time.time()
    try:
        body(name, t)
    except Exception as e:
        emit(name, False, str(e).strip().splitlines()[0] if str(e).strip() else repr(e))
        return False
    return True
def all_reduce(name, t):
    x = inp(rank); dist.all_reduce(x)
    compare(name, x, sum(inp(r) for r in range(world)), t)
def all_gather(name, t):
    outs = [torch.zeros(n, device=dev) for _ in range(world)]
    dist.all_gather(outs, inp(rank))
    compare(name, torch.cat(outs), torch.cat([inp(r) for r in range(world)]), t)
def broadcast(name, t):
    x = inp(rank); dist.broadcast(x, 0)
    compare(name, x, inp(0), t)
def barrier(name, t):
    dist.barrier(); emit(name, True, "", (time.time() - t) * 1000)
for name, body in [("all_reduce.sum float32[%d]" % n, all_reduce),
                   ("all_gather float32[%d]" % n, all_gather),
                   ("broadcast<-0 float32[%d]" % n, broadcast), ("barrier", barrier)]:
    if not run(name, body):
        break
try:
    dist.destroy_process_group()
except Exception:
    pass
sys.exit(0 if ok_all else 1)
"#;

/// Runs the embedded check with `python` (inheriting this rank's contract) and waits at most `limit`. Its events go
/// straight to this worker's stdout. Returns whether it exited 0, and why not.
pub fn run(python: &Path, device: &str, timeout: Duration, limit: Duration) -> Result<(), String> {
    let mut child = Command::new(python)
        .arg("-c")
        .arg(SCRIPT)
        .env(
            env_vars::ACCEL_TEST_TIMEOUT,
            format!("{}", timeout.as_secs_f64()),
        )
        .env(env_vars::ACCEL_TEST_DEVICE, device)
        .env(env_vars::PYTHONUNBUFFERED, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => return Err(format!("{} ended with {status}", python.display())),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} did not finish within {:.0} s and was killed",
                    python.display(),
                    limit.as_secs_f64()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("cannot wait for {}: {e}", python.display())),
        }
    }
}
