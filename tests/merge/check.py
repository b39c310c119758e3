"""Compares accel-merge-weights' output with torch's own dcp_to_torch_save of the same checkpoint, bit for bit.

Usage: check.py DCP_DIR OUT_DIR [--key K | --all] [--dtype keep|fp32|bf16|fp16] [--strip P]... [--bin]
                [--reference FILE.pt] [--extra-from FILE.pt --extra-key K...] [--drop TOP_KEY]...
--extra-from/--extra-key add tensors of another saved state dict to the reference (e.g. what
zero_to_fp32 leaves out); --drop removes top-level keys before the comparison.
Prints "ok N" on success; raises on any difference.
"""
import argparse
import json
import os
import sys
import tempfile

import torch


def flatten(obj, prefix, out):
    if isinstance(obj, dict):
        for k, v in obj.items():
            flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            flatten(v, f"{prefix}.{i}" if prefix else str(i), out)
    elif isinstance(obj, torch.Tensor):
        out[prefix] = obj


def reference(args):
    if args.reference:
        sd = torch.load(args.reference, weights_only=False)
    else:
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "ref.pt")
            dcp_to_torch_save(args.dcp, path)
            sd = torch.load(path, weights_only=False)
    for k in args.drop:
        sd.pop(k)
    if args.extra_from:
        extra = torch.load(args.extra_from, weights_only=False)
        sd = dict(sd)
        for k in args.extra_key:
            sd[k] = extra[k]
    if args.all:
        pass
    elif args.key:
        sd = {k: v for k, v in sd[args.key].items()} if isinstance(sd[args.key], dict) else {args.key: sd[args.key]}
    elif len(sd) == 1:
        (only,) = sd.values()
        sd = only
    elif "model" in sd:
        sd = sd["model"]
    flat = {}
    flatten(sd, "", flat)
    out = {}
    for k, v in flat.items():
        for p in args.strip:
            if k.startswith(p) and len(k) > len(p):
                k = k[len(p):]
        if args.dtype != "keep" and v.is_floating_point():
            v = v.to({"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype])
        out[k] = v
    return out


def load_output(args):
    d = args.out
    if args.bin:
        idx = os.path.join(d, "pytorch_model.bin.index.json")
        files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["pytorch_model.bin"]
        sd = {}
        for f in files:
            part = torch.load(os.path.join(d, f), weights_only=True)
            assert not set(part) & set(sd)
            sd.update(part)
        return sd
    from safetensors.torch import load_file

    idx = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(idx):
        return load_file(os.path.join(d, "model.safetensors"))
    index = json.load(open(idx))
    sd = {}
    for f in sorted(set(index["weight_map"].values())):
        part = load_file(os.path.join(d, f))
        for k in part:
            assert index["weight_map"][k] == f, (k, f)
        sd.update(part)
    assert set(sd) == set(index["weight_map"]), "index and shards disagree"
    total = sum(t.numel() * t.element_size() for t in sd.values())
    assert index["metadata"]["total_size"] == total, (index["metadata"], total)
    # transformers' own loader must accept the index and shards.
    from transformers.trainer_utils import load_sharded_checkpoint

    root = torch.nn.Module()
    for name, t in sd.items():
        *mods, leaf = name.split(".")
        m = root
        for part in mods:
            if not hasattr(m, part) or not isinstance(getattr(m, part), torch.nn.Module):
                m.add_module(part, torch.nn.Module())
            m = getattr(m, part)
        m.register_buffer(leaf, torch.empty_like(t))
    load_sharded_checkpoint(root, d, strict=True)
    for name, t in root.state_dict().items():
        assert same_bits(t, sd[name]), name
    return sd


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    a = a.contiguous().reshape(-1).view(torch.uint8) if a.dim() else a.reshape(1).view(torch.uint8)
    b = b.contiguous().reshape(-1).view(torch.uint8) if b.dim() else b.reshape(1).view(torch.uint8)
    return torch.equal(a, b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dcp")
    ap.add_argument("out")
    ap.add_argument("--key")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--dtype", default="keep")
    ap.add_argument("--strip", action="append", default=[])
    ap.add_argument("--bin", action="store_true")
    ap.add_argument("--reference")
    ap.add_argument("--extra-from")
    ap.add_argument("--extra-key", action="append", default=[])
    ap.add_argument("--drop", action="append", default=[])
    args = ap.parse_args()
    ref = reference(args)
    got = load_output(args)
    missing = set(ref) - set(got)
    extra = set(got) - set(ref)
    assert not missing and not extra, f"missing {sorted(missing)} extra {sorted(extra)}"
    for k in ref:
        assert same_bits(ref[k], got[k]), f"{k}: ref {ref[k].dtype}{tuple(ref[k].shape)} got {got[k].dtype}{tuple(got[k].shape)}"
    print("ok", len(ref))


if __name__ == "__main__":
    main()
