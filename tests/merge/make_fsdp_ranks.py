"""Writes accelerate's per-rank FSDP checkpoints (`save_fsdp_model(..., use_dcp=False)` with
SHARDED_STATE_DICT: every rank torch.saves its shard of the state dict into
`pytorch_model_fsdp_0_rank{r}.bin`) on 2 gloo CPU ranks, for accel-merge-weights' tests.

Usage: make_fsdp_ranks.py OUT_DIR
  OUT_DIR/fsdp2/  FSDP2 (DTensor values), prepared by accelerate's own FSDP2 path
  OUT_DIR/fsdp1/  FSDP1 (ShardedTensor values)
each with reference.pt: the model's full state dict as torch gathers it (rank 0).

accelerate switches FSDP on only for GPU-like distributed types (accelerate/state.py); on these CPU
ranks the shared state is set to FSDP by hand before `prepare`, as make_accelerate.py does. Its FSDP1
`prepare` refuses a CPU device ("Inconsistent compute device and `device_id`: cpu vs cpu:0"), so the
FSDP1 model is wrapped by torch's FullyShardedDataParallel directly; both are saved by accelerate's
`save_fsdp_model`.
"""
import os
import subprocess
import sys


def launch(out):
    port = os.environ.get("PORT", "29661")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", port, __file__, out]
    env = dict(os.environ, OMP_NUM_THREADS="1", ACCEL_MAKE_FSDP_RANKS_WORKER="1")
    subprocess.run(cmd, check=True, env=env)


def net():
    import torch
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(7, 5)  # 7 rows over 2 ranks: 4 + 3
            self.inner = nn.Linear(5, 3)  # weight 3x5: 2 + 1 rows
            self.tiny = nn.Linear(3, 1)  # weight 1x3: 1 row + an empty shard
            self.bf = nn.Linear(4, 6).to(torch.bfloat16)
            self.register_buffer("counts", torch.arange(9, dtype=torch.int64))

    torch.manual_seed(0)
    model = Net()
    with torch.no_grad():
        for i, (_, p) in enumerate(sorted(model.named_parameters())):
            p.copy_((torch.arange(p.numel(), dtype=torch.float64).reshape(p.shape) * 0.37 + i * 11 + 0.125).to(p.dtype))
    return model


def fsdp2(out):
    import torch
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import save_fsdp_model
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import fully_shard

    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, state_dict_type="SHARDED_STATE_DICT")
    acc = Accelerator(cpu=True)
    for shared in (AcceleratorState._shared_state, PartialState._shared_state):
        shared["distributed_type"] = DistributedType.FSDP
    AcceleratorState._shared_state["fsdp_plugin"] = plugin
    model = net()
    # FSDP2 shards one dtype per group: the bf16 layer gets its own, the rest the root's.
    fully_shard(model.bf)
    # accelerate's FSDP2 `prepare` takes a model only with its optimizer.
    model, _ = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    save_fsdp_model(plugin, acc, model, out, use_dcp=False)
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if acc.is_main_process:
        torch.save(full, os.path.join(out, "reference.pt"))
    acc.wait_for_everyone()
    return acc


def fsdp1(out, acc):
    import torch
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import save_fsdp_model
    from torch.distributed.fsdp import FullStateDictConfig, FullyShardedDataParallel as FSDP, StateDictType

    plugin = FullyShardedDataParallelPlugin(fsdp_version=1, state_dict_type="SHARDED_STATE_DICT")
    model = net()
    cpu = torch.device("cpu")
    model.bf = FSDP(model.bf, use_orig_params=True, device_id=cpu)
    model = FSDP(model, use_orig_params=True, device_id=cpu)
    save_fsdp_model(plugin, acc, model, out, use_dcp=False)
    cfg = FullStateDictConfig(offload_to_cpu=False, rank0_only=False)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, cfg):
        full = model.state_dict()
    if acc.is_main_process:
        torch.save(dict(full), os.path.join(out, "reference.pt"))
    acc.wait_for_everyone()


def main():
    out = sys.argv[1]
    if os.environ.get("ACCEL_MAKE_FSDP_RANKS_WORKER") != "1":
        launch(out)
        return
    acc = fsdp2(os.path.join(out, "fsdp2"))
    fsdp1(os.path.join(out, "fsdp1"), acc)


if __name__ == "__main__":
    main()
