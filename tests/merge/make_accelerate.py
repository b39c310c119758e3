"""Writes a genuine `Accelerator.save_state` directory with FSDP2 (SHARDED_STATE_DICT) on 2 gloo CPU ranks,
for accel-merge-weights' tests.

Usage: make_accelerate.py OUT_DIR
Launches 2 ranks with torchrun. Two models are prepared, each with its own AdamW (accelerate's FSDP2 takes
one model and its optimizer per `prepare` call): a tiny transformers LlamaForCausalLM (model 0) and a small
MLP (model 1). After one step, `save_state(OUT_DIR)` writes pytorch_model_fsdp_0/, pytorch_model_fsdp_1/,
optimizer_0/, optimizer_1/ (DCP directories) and random_states_<rank>.pkl, as it does on GPUs.

accelerate switches FSDP on only for GPU-like distributed types (accelerate/state.py: MULTI_GPU, MULTI_XPU,
...), not for MULTI_CPU; on these CPU ranks the shared state is set to FSDP by hand before `prepare`, which
then runs accelerate's own FSDP2 path (fully_shard, get_model_state_dict, dcp.save) unchanged.
"""
import os
import subprocess
import sys


def launch(out):
    port = os.environ.get("PORT", "29651")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", port, __file__, out]
    env = dict(os.environ, OMP_NUM_THREADS="1", ACCEL_MAKE_ACCELERATE_WORKER="1")
    subprocess.run(cmd, check=True, env=env)


def worker(out):
    import torch
    import torch.nn as nn
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
    from transformers import LlamaConfig, LlamaForCausalLM

    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, state_dict_type="SHARDED_STATE_DICT")
    acc = Accelerator(cpu=True)
    for shared in (AcceleratorState._shared_state, PartialState._shared_state):
        shared["distributed_type"] = DistributedType.FSDP
    AcceleratorState._shared_state["fsdp_plugin"] = plugin
    assert acc.distributed_type == DistributedType.FSDP

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16,
                      tie_word_embeddings=False)
    lm = LlamaForCausalLM(cfg)
    mlp = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    lm_opt = torch.optim.AdamW(lm.parameters(), lr=1e-2)
    mlp_opt = torch.optim.AdamW(mlp.parameters(), lr=1e-2)
    lm, lm_opt = acc.prepare(lm, lm_opt)
    mlp, mlp_opt = acc.prepare(mlp, mlp_opt)
    g = torch.Generator().manual_seed(1 + acc.process_index)
    ids = torch.randint(0, 32, (2, 8), generator=g)
    loss = lm(input_ids=ids, labels=ids).loss + mlp(torch.randn(4, 6, generator=g)).pow(2).mean()
    acc.backward(loss)
    lm_opt.step()
    mlp_opt.step()
    acc.save_state(out)
    acc.wait_for_everyone()


def main():
    out = sys.argv[1]
    if os.environ.get("ACCEL_MAKE_ACCELERATE_WORKER") == "1":
        worker(out)
    else:
        launch(out)


if __name__ == "__main__":
    main()
