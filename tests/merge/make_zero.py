"""Writes DeepSpeed ZeRO checkpoints with the real DeepSpeed (0.19.8, built with DS_BUILD_OPS=0; its CPU
accelerator uses gloo) for accel-merge-weights' tests, and the state dict DeepSpeed's own zero_to_fp32
reconstructs from them.

Usage: make_zero.py OUT_ROOT STAGE-DTYPE...      STAGE 0|1|2|3, DTYPE fp32|bf16 (e.g. 3-bf16)
Launches 3 ranks with torchrun once (3, so that partitions are uneven); for each configuration it trains
a tiny model with a frozen parameter, a buffer and tied weights for 2 steps and saves
OUT_DIR/global_step2, where OUT_DIR is OUT_ROOT/zero<STAGE>-<DTYPE>. Rank 0 then writes:
  OUT_DIR/reference.pt  deepspeed.utils.zero_to_fp32.get_fp32_state_dict_from_zero_checkpoint(OUT_DIR)
                        (stages 1-3); at stage 0, which zero_to_fp32 does not read, the same built from the
                        engine's objects: each trainable param's fp32 master (optimizer.fp32_groups), frozen
                        params as saved, floating buffers as fp32
  OUT_DIR/module.pt     the module state dict of mp_rank_00_model_states.pt (what ZeRO-1 and stage 0
                        keep of frozen parameters), loaded with DeepSpeed's own classes importable
"""
import os
import subprocess
import sys

WORLD = 3


def launch(out_root, specs):
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        sys.exit(
            "make_zero.py: DeepSpeed is not installed in this venv; install it with\n"
            "  DS_BUILD_OPS=0 .venv/bin/pip install deepspeed==0.19.8   (scripts/setup does)"
        )
    port = os.environ.get("PORT", "29641")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(WORLD),
           "--master_addr", "127.0.0.1", "--master_port", port, __file__, out_root, *specs]
    env = dict(os.environ, OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu", ACCEL_MAKE_ZERO_WORKER="1")
    subprocess.run(cmd, check=True, env=env)


def worker(out_root, specs):
    for spec in specs:
        stage, dtype = spec.split("-")
        one(stage, dtype, os.path.join(out_root, f"zero{stage}-{dtype}"))


def one(stage, dtype, out):
    import deepspeed
    import torch
    import torch.nn as nn

    # The optional shared-memory collectives (deepspeed/comm/torch.py::build_shm_op) would be JIT-compiled
    # with ninja on first use; gloo alone is enough and leaves the checkpoint format unchanged.
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(11, 6)
            self.enc = nn.Linear(6, 5)
            self.frozen = nn.Linear(5, 7)
            self.dec = nn.Linear(7, 6, bias=False)
            self.head = nn.Linear(6, 11, bias=False)
            self.head.weight = self.emb.weight  # tied
            self.register_buffer("running", torch.arange(5, dtype=torch.float32) / 3)
            for p in self.frozen.parameters():
                p.requires_grad_(False)

        def forward(self, x):
            h = self.emb(x)
            h = torch.relu(self.enc(h)) + self.running.to(h.dtype)
            h = self.dec(torch.tanh(self.frozen(h)))
            return self.head(h)

    torch.manual_seed(0)
    model = Net()
    cfg = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": int(stage)},
        "bf16": {"enabled": dtype == "bf16"},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 1000,
        "wall_clock_breakdown": False,
    }
    if int(stage) == 3:
        cfg["zero_optimization"].update({"stage3_param_persistence_threshold": 0, "sub_group_size": 40})
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=0.05)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=cfg,
                                           model_parameters=params)
    rank = torch.distributed.get_rank()
    g = torch.Generator().manual_seed(10 + rank)
    for _ in range(2):
        x = torch.randint(0, 11, (2, 4), generator=g)
        loss = engine(x).float().pow(2).mean()
        engine.backward(loss)
        engine.step()
    engine.save_checkpoint(out, tag="global_step2")
    torch.distributed.barrier()
    if rank == 0:
        if int(stage) > 0:
            from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

            ref = get_fp32_state_dict_from_zero_checkpoint(out)
            torch.save(dict(ref), os.path.join(out, "reference.pt"))
        elif getattr(engine.optimizer, "fp32_groups", None) is not None:
            # zero_to_fp32 has no stage 0; what it would give, from the engine's own objects: each
            # trainable param's fp32 master (paired with its param, tied names included), frozen
            # params as saved, floating buffers as fp32.
            opt = engine.optimizer
            master = {id(lp): hp for lg, hg in zip(opt.fp16_groups, opt.fp32_groups) for lp, hp in zip(lg, hg)}
            ref = {}
            for n, p in engine.module.named_parameters(remove_duplicate=False):
                ref[n] = (master[id(p)] if id(p) in master else p).detach().clone()
            for n, b in engine.module.named_buffers():
                ref[n] = b.detach().float() if b.is_floating_point() else b.detach().clone()
            torch.save(ref, os.path.join(out, "reference.pt"))
        name = "zero_pp_rank_0_mp_rank_00_model_states.pt" if int(stage) == 3 else "mp_rank_00_model_states.pt"
        ms = torch.load(os.path.join(out, "global_step2", name), map_location="cpu", weights_only=False)
        torch.save(dict(ms["module"]), os.path.join(out, "module.pt"))
    torch.distributed.barrier()


def main():
    out_root, specs = sys.argv[1], sys.argv[2:]
    if os.environ.get("ACCEL_MAKE_ZERO_WORKER") == "1":
        worker(out_root, specs)
    else:
        launch(out_root, specs)


if __name__ == "__main__":
    main()
