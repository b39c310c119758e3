"""Builds genuine DCP checkpoints with torch for accel-merge-weights' tests.

Usage: make_dcp.py KIND OUT_DIR
  fsdp2   2 gloo ranks, fully_shard, {"model": msd, "optim": osd} saved by dcp.save
  fsdp1   2 gloo ranks, FSDP1 SHARDED_STATE_DICT, {"model": msd, "optim": osd}
  accel   2 gloo ranks, accelerate-style save_state layout: OUT/pytorch_model_fsdp_0 and OUT/optimizer_0
  plain   1 process, no PG: nested dict with mixed dtypes, a transposed view, 0-d, empty and bytes items
  stformat 1 process: FileSystemWriter(serialization_format=SAFETENSORS); writes reference.pt
  complex 1 process: a complex64 tensor and a complex32 one (a dtype neither safetensors nor torch.save's
          typed storages here can hold)
  titanseed 1 process: torchtitan's seed-checkpoint shape, the model's state dict flattened at the top level
          with its persistent complex64 `freqs_cis` buffer, plus float8_e8m0fnu MX scales, float8 fnuz and
          float4_e2m1fn_x2 tensors (every dtype safetensors 0.8 adds)
  titan   1 process: torchtitan's layout, model keys flattened at the top level beside optimizer,
          lr_scheduler, dataloader and train_state
  nans    1 process: f64/f32/f16/bf16 tensors of 1024 elements full of NaNs with assorted signs and payloads
  big     2 gloo ranks: a ~N MiB checkpoint for benchmarks (size from env BIG_MIB), 2 files
  mid     the same as big (the tests make it with BIG_MIB=256)
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(7, 5)  # 7 rows over 2 ranks: uneven (4 + 3)
        self.block = nn.ModuleDict({"inner": nn.Linear(5, 3)})  # weight 3x5: 2+1, bias 3: 2+1
        self.tiny = nn.Linear(3, 1)  # weight 1x3: 1+0 -> a zero-size shard
        self.bf = nn.Linear(4, 6).to(torch.bfloat16)
        self.f16 = nn.Linear(2, 5).to(torch.float16)
        self.register_buffer("counts", torch.arange(9, dtype=torch.int64))
        self.register_buffer("scale", torch.tensor(2.5))


def _fill(model):
    # Deterministic, distinctive values (no accidental equality between tensors).
    with torch.no_grad():
        for i, (name, p) in enumerate(sorted(model.named_parameters())):
            n = p.numel()
            p.copy_((torch.arange(n, dtype=torch.float64).reshape(p.shape) * 0.37 + i * 11.0 + 0.125).to(p.dtype))


def _worker(rank, world, kind, out, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = Net()
    _fill(model)
    if kind in ("fsdp2", "accel"):
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (world,))
        for m in (model.emb, model.block.inner, model.tiny, model.bf, model.f16):
            fully_shard(m, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.dtype == torch.float32], lr=1e-3)
        from torch.distributed.checkpoint.state_dict import get_state_dict

        for p in model.parameters():
            if p.dtype == torch.float32:
                p.grad = torch.ones_like(p) * 0.5
        opt.step()
        msd, osd = get_state_dict(model, opt)
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType

        cpu = torch.device("cpu")
        model.bf = FSDP(model.bf, use_orig_params=True, device_id=cpu)
        model.f16 = FSDP(model.f16, use_orig_params=True, device_id=cpu)
        model = FSDP(model, use_orig_params=True, device_id=cpu)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.dtype == torch.float32], lr=1e-3)
        for p in model.parameters():
            if p.dtype == torch.float32:
                p.grad = torch.ones_like(p) * 0.5
        opt.step()
        with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
            msd = model.state_dict()
            osd = FSDP.optim_state_dict(model, opt)
    if kind == "accel":
        writer = dcp.FileSystemWriter(os.path.join(out, "pytorch_model_fsdp_0"))
        dcp.save({"model": msd}, storage_writer=writer)
        dcp.save({"optimizer": osd}, storage_writer=dcp.FileSystemWriter(os.path.join(out, "optimizer_0")))
    else:
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=out)
    dist.barrier()
    dist.destroy_process_group()


def plain(out):
    torch.manual_seed(1)
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) * 1.5
    sd = {
        "model": {
            "layers": {"0": {"w": torch.randn(4, 3), "b": torch.randn(3).to(torch.bfloat16)}},
            "layers.1.w": torch.randn(2, 2).to(torch.float16),  # a key that itself contains dots
            "t": base.t(),  # transposed view: stride (1, 4)
            "sl": base[1:, 1:3],  # storage offset and a row stride
            "step": torch.tensor(7, dtype=torch.int64),
            "empty": torch.zeros(0, 5),
            "flag": torch.tensor([True, False, True]),
            "d64": torch.randn(3).double(),
            "note": "hello",
        },
        "extra": {"lr": 0.5},
    }
    dcp.save(sd, checkpoint_id=out, no_dist=True)


def big(out):
    mib = int(os.environ.get("BIG_MIB", "2048"))
    # A few 256 MiB fp32 tensors (half the bytes) plus 400 small bf16 ones, saved by 2 gloo ranks.
    world = 2
    port = int(os.environ.get("PORT", "29631"))
    mp.spawn(_big_worker, args=(world, out, port, mib), nprocs=world, join=True)


def _big_worker(rank, world, out, port, mib):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    # Each rank builds only its own Shard(0) half, so generation needs ~1x the checkpoint in RAM overall.
    mesh = init_device_mesh("cpu", (world,))
    sd = {}
    big_bytes = 256 << 20
    n_big = max(1, (mib << 20) // 2 // big_bytes)
    cols = 4096
    rows = big_bytes // 4 // cols
    for i in range(n_big):
        local = torch.full((rows // world, cols), float(i) + 0.5 + rank, dtype=torch.float32)
        sd[f"big.{i}.weight"] = DTensor.from_local(local, mesh, [Shard(0)], shape=(rows, cols), stride=(cols, 1))
    rest = (mib << 20) - n_big * big_bytes
    n_small = 400
    each = max(world, rest // n_small // 2 // world * world)
    for i in range(n_small):
        local = torch.full((each // world,), float(i + rank), dtype=torch.bfloat16)
        sd[f"layers.{i}.weight"] = DTensor.from_local(local, mesh, [Shard(0)], shape=(each,), stride=(1,))
    dcp.save({"model": sd}, checkpoint_id=out)
    dist.barrier()
    dist.destroy_process_group()


def titan(out):
    # torchtitan/components/checkpoint.py flattens the model's state dict into the saved dict.
    torch.manual_seed(4)
    sd = {
        "tok_embeddings.weight": torch.randn(6, 4),
        "layers.0.attention.wq.weight": torch.randn(4, 4),
        "norm.weight": torch.ones(4),
        "optimizer": {"state": {"tok_embeddings.weight": {"exp_avg": torch.randn(6, 4), "step": torch.tensor(3.0)}}},
        "lr_scheduler": {"last_epoch": 3},
        "dataloader": {"world_size": 1},
        "train_state": {"step": 3},
    }
    dcp.save(sd, checkpoint_id=out, no_dist=True)


def nans(out):
    # Signalling and quiet NaNs of both signs with payloads in the high and low bits, plus numbers, each
    # tensor long enough that torch's `.to()` takes its vectorised kernel, as it does for real weights.
    def pattern(bits, int_dtype, dtype):
        nbits = 8 * torch.empty(0, dtype=int_dtype).element_size()
        t = torch.tensor([b - (1 << nbits) if b >> (nbits - 1) else b for b in bits], dtype=int_dtype).view(dtype)
        t = torch.cat([t, torch.linspace(-3, 3, 8, dtype=torch.float64).to(dtype)])
        return t.repeat(1024 // len(t) + 1)[:1024]

    sd = {
        "model": {
            "f32": pattern([0x7FC00000, 0x7F800001, 0xFFC12345, 0x7FA00000, 0x7FFFFFFF, 0xFF800001, 0x7F81FFFF, 0x7F802000], torch.int32, torch.float32),
            "f16": pattern([0x7E00, 0x7C01, 0xFE01, 0x7D00, 0x7FFF, 0x7E55, 0xFC01], torch.int16, torch.float16),
            "bf16": pattern([0x7FC0, 0x7F81, 0xFFC1, 0x7FA0, 0x7FFF, 0xFF81], torch.int16, torch.bfloat16),
            "f64": pattern([0x7FF8000000000000, 0x7FF0000000000001, 0x7FF4000020000000, 0xFFF8000012345678], torch.int64, torch.float64),
        }
    }
    dcp.save(sd, checkpoint_id=out, no_dist=True)


def complex_(out):
    z = torch.polar(torch.ones(3), torch.arange(3, dtype=torch.float32))
    h = torch.ones(2, dtype=torch.complex32)
    dcp.save({"model": {"ok": torch.ones(2), "z": z, "h": h}}, checkpoint_id=out, no_dist=True)


class _TitanLike(nn.Module):
    # torchtitan/models/llama3/model/model.py: `freqs_cis` is registered with persistent=True, so it is
    # in the state dict (complex64), next to the weights.
    def __init__(self, dim=8, heads=2, seq=6, vocab=11):
        super().__init__()
        torch.manual_seed(6)
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleDict({"0": nn.ModuleDict({
            "attention": nn.ModuleDict({n: nn.Linear(dim, dim, bias=False) for n in ("wq", "wk", "wv", "wo")}),
            "feed_forward": nn.ModuleDict({n: nn.Linear(dim, dim, bias=False) for n in ("w1", "w2", "w3")}),
            "attention_norm": nn.RMSNorm(dim),
            "ffn_norm": nn.RMSNorm(dim),
        })})
        self.norm = nn.RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        half = dim // heads
        freqs = 1.0 / (10000.0 ** (torch.arange(0, half, 2)[: half // 2].float() / half))
        t = torch.arange(seq, dtype=torch.float32)
        self.register_buffer("freqs_cis", torch.polar(torch.ones(seq, half // 2), torch.outer(t, freqs)), persistent=True)


def titanseed(out):
    sd = dict(_TitanLike().state_dict())
    assert sd["freqs_cis"].dtype == torch.complex64
    g = torch.Generator().manual_seed(7)
    raw = torch.randint(0, 256, (4, 6), dtype=torch.uint8, generator=g)
    # MX scales (e8m0), fnuz float8 (ROCm's), and packed float4 (MXFP4 weights): every value a bit pattern.
    sd["mx.scales"] = raw.view(torch.float8_e8m0fnu)
    sd["fnuz.e4m3"] = (raw + 1).view(torch.float8_e4m3fnuz)
    sd["fnuz.e5m2"] = (raw + 2).view(torch.float8_e5m2fnuz)
    sd["fp8.e4m3"] = (raw + 3).view(torch.float8_e4m3fn)
    sd["fp4.packed"] = (raw + 4).view(torch.float4_e2m1fn_x2)
    dcp.save(sd, checkpoint_id=out, no_dist=True)


def stformat(out):
    # FileSystemWriter's safetensors serialization: torch's own reader cannot load it, so the original
    # state dict is saved next to it as the reference.
    from torch.distributed.checkpoint.filesystem import SerializationFormat

    torch.manual_seed(5)
    sd = {"model": {"a": torch.randn(5, 3), "b": torch.randn(4).to(torch.bfloat16), "c": torch.arange(3), "n": 3}}
    w = dcp.FileSystemWriter(out, serialization_format=SerializationFormat.SAFETENSORS)
    dcp.save(sd, storage_writer=w, no_dist=True)
    torch.save(sd, os.path.join(out, "reference.pt"))


def main():
    kind, out = sys.argv[1], sys.argv[2]
    if kind == "plain":
        plain(out)
    elif kind == "stformat":
        stformat(out)
    elif kind == "titan":
        titan(out)
    elif kind == "nans":
        nans(out)
    elif kind == "complex":
        complex_(out)
    elif kind == "titanseed":
        titanseed(out)
    elif kind in ("big", "mid"):
        big(out)
    else:
        port = int(os.environ.get("PORT", "29621"))
        mp.spawn(_worker, args=(2, kind, out, port), nprocs=2, join=True)


if __name__ == "__main__":
    main()
