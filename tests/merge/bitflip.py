"""Flips bit 0 of each byte of a DCP checkpoint's `.metadata`, one byte at a time, and merges each damaged
copy with accel-merge-weights, comparing the output with the clean merge.

Usage: bitflip.py MERGE_BIN DCP_DIR WORK_DIR [--torch-sample N]
Each worker merges its own copy in WORK_DIR (the data files hard-linked or copied once, the .metadata
rewritten for each flip). Prints one JSON object:
  {"bytes": N, "clean": [...], "error": {"3": [...], ...}, "different": [...], "torch": {...}}
with the offsets of flips merged to the clean output (exit 0), refused (by exit status), and merged to a
different output with exit 0 (`different`). With --torch-sample N, for N offsets spread over the refused ones (and N/4 over
the clean ones) torch's own `dcp_to_torch_save` reads the same damaged copy: "torch" maps each offset to "ok-same",
"ok-different" (its state dict differs from the clean checkpoint's) or "error: ...".
"""
import argparse
import concurrent.futures as cf
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import threading


def damaged_copy(src, dst, meta, at):
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for name in os.listdir(src):
        if name != ".metadata":
            try:
                os.link(os.path.join(src, name), os.path.join(dst, name))
            except OSError:  # another file system
                shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))
    b = bytearray(meta)
    b[at] ^= 1
    with open(os.path.join(dst, ".metadata"), "wb") as f:
        f.write(b)


def merge(binary, ckpt, out):
    shutil.rmtree(out, ignore_errors=True)
    p = subprocess.run([binary, ckpt, out, "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       env=dict(os.environ, ACCEL_NO_PROGRESS="1"), timeout=120)
    data = None
    if p.returncode == 0:
        with open(os.path.join(out, "model.safetensors"), "rb") as f:
            data = f.read()
    return p.returncode, data, p.stderr.decode(errors="replace")


def torch_state(ckpt, path):
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(ckpt, path)
    return torch.load(path, weights_only=False)


def flatten(obj, path, out):
    # Paths as tuples: a tensor moved out of its dict to a dotted top-level key is a different state dict.
    if isinstance(obj, dict):
        for k, v in obj.items():
            flatten(v, path + (k,), out)
    else:
        out[path] = obj


def same_state(a, b):
    import torch

    fa, fb = {}, {}
    flatten(a, (), fa)
    flatten(b, (), fb)
    if set(fa) != set(fb):
        return False
    for k in fa:
        x, y = fa[k], fb[k]
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
                return False
            if x.dtype != y.dtype or x.shape != y.shape:
                return False
            if x.numel() and not torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8)):
                return False
        elif x != y:
            return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("dcp")
    ap.add_argument("work")
    ap.add_argument("--torch-sample", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    with open(os.path.join(args.dcp, ".metadata"), "rb") as f:
        meta = f.read()
    os.makedirs(args.work, exist_ok=True)
    code, clean, err = merge(args.binary, args.dcp, os.path.join(args.work, "clean-out"))
    assert code == 0, err

    # Each worker thread has its own copy (data files hard-linked once) and rewrites its .metadata.
    local = threading.local()

    def one(at):
        if not hasattr(local, "ckpt"):
            local.ckpt = os.path.join(args.work, f"ckpt-{threading.get_ident()}")
            damaged_copy(args.dcp, local.ckpt, meta, at)
        b = bytearray(meta)
        b[at] ^= 1
        with open(os.path.join(local.ckpt, ".metadata"), "wb") as f:
            f.write(b)
        code, data, err = merge(args.binary, local.ckpt, local.ckpt + "-out")
        return at, code, data == clean if code == 0 else None, err.strip().splitlines()[0] if err.strip() else ""

    result = {"bytes": len(meta), "clean": [], "error": {}, "different": [], "messages": {}}
    with cf.ThreadPoolExecutor(args.jobs) as pool:
        for at, code, same, first in pool.map(one, range(len(meta))):
            if code == 0 and same:
                result["clean"].append(at)
            elif code == 0:
                result["different"].append(at)
            else:
                result["error"].setdefault(str(code), []).append(at)
                result["messages"][str(at)] = first
    if args.torch_sample:
        refused = sorted(a for v in result["error"].values() for a in v)
        step = max(1, len(refused) // args.torch_sample)
        sample = refused[::step][: args.torch_sample] + result["different"][: args.torch_sample]
        # And flips merged to the clean output, for contrast.
        clean_step = max(1, len(result["clean"]) // max(1, args.torch_sample // 4))
        sample += result["clean"][::clean_step][: max(1, args.torch_sample // 4)]
        import logging

        # dcp's loader logs each failure with its traceback; the verdicts say what is needed.
        logging.disable(logging.CRITICAL)
        # A BaseException: dcp raises it for any rank's failure.
        from torch.distributed.checkpoint.api import CheckpointException

        ref = torch_state(args.dcp, os.path.join(args.work, "clean.pt"))
        verdicts = {}
        for at in sample:
            ckpt = os.path.join(args.work, f"torch-{at}")
            damaged_copy(args.dcp, ckpt, meta, at)
            try:
                with contextlib.redirect_stderr(io.StringIO()):
                    got = torch_state(ckpt, os.path.join(args.work, f"torch-{at}.pt"))
                verdicts[str(at)] = "ok-same" if same_state(got, ref) else "ok-different"
            except (Exception, CheckpointException) as e:  # torch's own verdict, whatever it raises
                first = str(e).strip().splitlines()[-1] if str(e).strip() else ""
                verdicts[str(at)] = f"error: {type(e).__name__}: {first}"[:300]
            shutil.rmtree(ckpt, ignore_errors=True)
            try:
                os.remove(os.path.join(args.work, f"torch-{at}.pt"))
            except FileNotFoundError:
                pass
        result["torch"] = verdicts
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
