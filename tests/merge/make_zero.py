"""Writes DeepSpeed ZeRO checkpoints in the documented on-disk layout (torch-contracts.md §C) with plain
torch, for accel-merge-weights' tests: DeepSpeed itself does not install on this CPU-only machine. The
DeepSpeed classes the real files pickle (ZeroStageEnum, LossScaler, fragment_address) are stood in for by
classes registered under DeepSpeed's module names, so the pickles name exactly what real files name.

Usage: make_zero.py zero1|zero2|zero3 OUT_DIR
Also writes OUT_DIR/reference.pt: the state dict zero_to_fp32 reconstructs (buffers .float(), frozen
params in their dtype, trainable params fp32, tied aliases), for check.py --reference.
"""
import enum
import math
import os
import sys
import types
from collections import OrderedDict
from dataclasses import dataclass

import torch


def fake_module(name, **attrs):
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        sub = ".".join(parts[:i])
        sys.modules.setdefault(sub, types.ModuleType(sub))
    m = sys.modules[name]
    for k, v in attrs.items():
        v.__module__ = name
        v.__qualname__ = k
        setattr(m, k, v)


class ZeroStageEnum(int, enum.Enum):
    disabled = 0
    optimizer_states = 1
    gradients = 2
    weights = 3


class LossScaler:
    def __init__(self, scale):
        self.cur_scale = scale
        self.dynamic = False


@dataclass
class fragment_address:
    numel: int
    start: int


fake_module("deepspeed.runtime.zero.config", ZeroStageEnum=ZeroStageEnum)
fake_module("deepspeed.runtime.fp16.loss_scaler", LossScaler=LossScaler)
fake_module("deepspeed.utils.tensor_fragment", fragment_address=fragment_address)

W = 2
TAG = "global_step3"


def params():
    g = torch.Generator().manual_seed(3)
    groups = [
        OrderedDict([("enc.weight", torch.randn(3, 5, generator=g)), ("enc.bias", torch.randn(3, generator=g))]),
        OrderedDict([("dec.weight", torch.randn(4, 3, generator=g)), ("emb.weight", torch.randn(7, 2, generator=g)),
                     ("head.bias", torch.randn(1, generator=g))]),
    ]
    buffers = OrderedDict([("enc.running", torch.arange(5, dtype=torch.int64)), ("scale", torch.tensor(0.5).to(torch.bfloat16))])
    frozen = OrderedDict([("frozen.weight", torch.randn(3, 3, generator=g).to(torch.bfloat16))])
    return groups, buffers, frozen


def module_sd(groups, buffers, frozen, stage):
    sd = OrderedDict()
    for grp in groups:
        for n, p in grp.items():
            sd[n] = p.to(torch.bfloat16) if stage < 3 else torch.empty(0, dtype=torch.bfloat16)
    for n, f in frozen.items():
        sd[n] = f if stage < 3 else torch.empty(0, dtype=torch.bfloat16)
    sd.update(buffers)
    sd["tied.weight"] = sd["emb.weight"]
    return sd


def common(groups, buffers, frozen, stage):
    return {
        "buffer_names": list(buffers),
        "optimizer": None,
        "param_shapes": [OrderedDict((n, p.shape) for n, p in grp.items()) for grp in groups],
        "frozen_param_shapes": OrderedDict((n, f.shape) for n, f in frozen.items()) if stage >= 2 else None,
        "shared_params": {"tied.weight": "emb.weight"},
        "lr_scheduler": None,
        "sparse_tensor_module_names": set(),
        "skipped_steps": 0,
        "global_steps": 3,
        "global_samples": 24,
        "dp_world_size": W,
        "mp_world_size": 1,
        "ds_config": {"zero_optimization": {"stage": stage}, "bf16": {"enabled": True}},
        "ds_version": "0.16.0",
    }


def stage12(out, stage):
    groups, buffers, frozen = params()
    d = os.path.join(out, TAG)
    os.makedirs(d)
    model = {"module": module_sd(groups, buffers, frozen, stage), **common(groups, buffers, frozen, stage)}
    model["frozen_param_fragments"] = OrderedDict(frozen) if stage >= 2 else None
    torch.save(model, os.path.join(d, "mp_rank_00_model_states.pt"))
    flats = [torch.cat([p.reshape(-1) for p in grp.values()]) for grp in groups]
    for r in range(W):
        parts, pads, maps = [], [], []
        for flat in flats:
            aligned = math.ceil(flat.numel() / (2 * W)) * (2 * W)
            per = aligned // W
            lo, hi = r * per, (r + 1) * per
            real = flat[lo:min(hi, flat.numel())].clone()
            parts.append(real)
            pads.append(per - real.numel())
            maps.append(OrderedDict())
        osd = {
            "loss_scaler": LossScaler(1.0),
            "dynamic_loss_scale": False,
            "overflow": False,
            "clip_grad": 1.0,
            "base_optimizer_state": {"state": {}, "param_groups": [{"lr": 1e-3}]},
            "single_partition_of_fp32_groups": parts,
            "zero_stage": ZeroStageEnum(stage),
            "group_paddings": pads,
            "partition_count": W,
            "ds_version": "0.16.0",
            "param_slice_mappings": maps,
        }
        torch.save({"optimizer_state_dict": osd, "ds_config": {}, "ds_version": "0.16.0"},
                   os.path.join(d, f"bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt"))
    return groups, buffers, frozen if stage >= 2 else OrderedDict()


def stage3(out):
    groups, buffers, frozen = params()
    d = os.path.join(out, TAG)
    os.makedirs(d)
    allp = [(n, p) for grp in groups for n, p in grp.items()]
    for r in range(W):
        model = {"module": module_sd(groups, buffers, frozen, 3), **common(groups, buffers, frozen, 3)}
        frags = OrderedDict()
        for n, f in frozen.items():
            per = math.ceil(f.numel() / W)
            flat = torch.nn.functional.pad(f.reshape(-1), (0, per * W - f.numel()))
            frags[n] = flat[r * per:(r + 1) * per].clone()
        model["frozen_param_fragments"] = frags
        torch.save(model, os.path.join(d, f"zero_pp_rank_{r}_mp_rank_00_model_states.pt"))
        mine = []
        for n, p in allp:
            per = math.ceil(p.numel() / W)
            flat = torch.nn.functional.pad(p.reshape(-1), (0, per * W - p.numel()))
            mine.append(flat[r * per:(r + 1) * per])
        mine = torch.cat(mine)
        # Two sub-groups that split the partition at an arbitrary point, so params straddle them.
        cut = mine.numel() // 2 + 1
        subs = [mine[:cut].clone(), mine[cut:].clone()]
        for i, t in enumerate(subs):
            t.ds_id = f"{r}_{i}"
        osd = {
            "zero_stage": ZeroStageEnum.weights,
            "loss_scaler": LossScaler(1.0),
            "dynamic_loss_scale": False,
            "overflow": False,
            "partition_count": W,
            "optimizer_state_dict": {"state": {}, "param_groups": [{"lr": 1e-3}]},
            "fp32_flat_groups": subs,
        }
        torch.save({"optimizer_state_dict": osd, "ds_config": {}, "ds_version": "0.16.0"},
                   os.path.join(d, f"bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt"))
    return groups, buffers, frozen


def main():
    kind, out = sys.argv[1], sys.argv[2]
    os.makedirs(out)
    stage = int(kind[-1])
    groups, buffers, frozen = stage3(out) if stage == 3 else stage12(out, stage)
    with open(os.path.join(out, "latest"), "w") as f:
        f.write(TAG)
    ref = OrderedDict()
    for n, b in buffers.items():
        ref[n] = b.float()
    for n, f in frozen.items():
        ref[n] = f
    for grp in groups:
        for n, p in grp.items():
            ref[n] = p.float()
    ref["tied.weight"] = ref["emb.weight"].clone()
    torch.save(dict(ref), os.path.join(out, "reference.pt"))


if __name__ == "__main__":
    main()
