"""A small, real PyTorch training run written against accelerate, for accel-launch.

    accel-launch examples/train.py                    # embedded default: 2 CPU ranks without GPUs
    accel-launch --cpu --num_processes 4 examples/train.py --epochs 3
    python examples/train.py                          # one process, same numbers
    accel-launch examples/train.py --checkpoint_dir ckpt   # resumable: see below

It fits a two-layer MLP to a fixed synthetic regression problem. Batches are split across ranks
(`split_batches=True`) and gradients are averaged, so every world size follows the same trajectory and
prints the same losses as a single process (up to float rounding). Uses Accelerator, prepare, backward,
accumulate and gather_for_metrics; takes a few seconds on CPU.

With --checkpoint_dir, the run is resumable, as a preempted or requeued job needs: on SIGUSR1 or
SIGTERM (SLURM's warning before the time limit, a preemption, scancel) every rank finishes the current
optimizer step, the state is saved with accelerate's save_state (model, optimizer, RNG, progress) and
the run exits 0; with --checkpoint_every N it is also saved every N optimizer steps. A run started with
a checkpoint in the directory continues from it (load_state) and ends with the same losses as a run
that was never interrupted.
"""
import argparse
import json
import os
import shutil
import signal
import sys

import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, set_seed
from torch.utils.data import DataLoader, TensorDataset


def data(n=512, d=8, seed=1234):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(d, 1, generator=g)
    y = torch.tanh(x @ w) + 0.05 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


class Progress:
    """Where the run is (epoch, batch within it) and the losses so far, saved with the state."""

    def __init__(self):
        self.epoch, self.batch, self.losses = 0, 0, []

    def state_dict(self):
        return {"epoch": self.epoch, "batch": self.batch, "losses": list(self.losses)}

    def load_state_dict(self, state):
        self.epoch, self.batch, self.losses = state["epoch"], state["batch"], list(state["losses"])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch_size", type=int, default=32, help="global batch size (split across ranks)")
    p.add_argument("--grad_accum", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--output", help="write the losses as JSON here (main process)")
    p.add_argument("--checkpoint_dir", help="save here on SIGUSR1/SIGTERM (and every --checkpoint_every steps); resume from it")
    p.add_argument("--checkpoint_every", type=int, default=0, help="also save every N optimizer steps (0: only on a signal)")
    args = p.parse_args()

    # Set by the signal, acted on at the next optimizer-step boundary by every rank together.
    stop = {"signal": None}
    if args.checkpoint_dir:
        def on_signal(signum, frame):
            stop["signal"] = signum
        signal.signal(signal.SIGUSR1, on_signal)
        signal.signal(signal.SIGTERM, on_signal)

    accelerator = Accelerator(
        gradient_accumulation_steps=args.grad_accum,
        dataloader_config=DataLoaderConfiguration(split_batches=True),
    )
    set_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    ds = data()
    train = DataLoader(ds, batch_size=args.batch_size, shuffle=False)
    evaluate = DataLoader(ds, batch_size=args.batch_size, shuffle=False)
    model, optimizer, train, evaluate = accelerator.prepare(model, optimizer, train, evaluate)

    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    latest = os.path.join(args.checkpoint_dir, "latest") if args.checkpoint_dir else None
    if latest and os.path.isdir(latest):
        accelerator.load_state(latest)
        accelerator.print(f"resumed from {latest} at epoch {progress.epoch}, batch {progress.batch}")

    def save():
        # Written beside, then renamed: a run stopped while saving resumes from the previous state.
        tmp = latest + ".tmp"
        accelerator.save_state(tmp)
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            if os.path.isdir(latest):
                os.rename(latest, latest + ".old")
            os.rename(tmp, latest)
            if os.path.isdir(latest + ".old"):
                shutil.rmtree(latest + ".old")
        accelerator.wait_for_everyone()

    def stop_requested():
        flag = torch.tensor([1.0 if stop["signal"] else 0.0], device=accelerator.device)
        return accelerator.reduce(flag, reduction="sum").item() > 0

    losses = progress.losses
    steps = 0
    for epoch in range(progress.epoch, args.epochs):
        model.train()
        batches = train
        if progress.batch:
            batches = accelerator.skip_first_batches(train, progress.batch)
        for x, y in batches:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            progress.batch += 1
            if latest and accelerator.sync_gradients:
                steps += 1
                every = args.checkpoint_every and steps % args.checkpoint_every == 0
                if stop_requested():
                    save()
                    accelerator.print(f"checkpointed at epoch {epoch}, batch {progress.batch} on signal {stop['signal']}; exiting")
                    accelerator.wait_for_everyone()
                    accelerator.end_training()
                    return
                if every:
                    save()
        progress.epoch, progress.batch = epoch + 1, 0
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for x, y in evaluate:
                per_sample = ((model(x) - y) ** 2).mean(dim=1)
                per_sample = accelerator.gather_for_metrics(per_sample)
                total += per_sample.sum().item()
                count += per_sample.numel()
        losses.append(total / count)
        progress.losses = losses
        accelerator.print(f"epoch {epoch}: eval loss {losses[-1]:.6f} ({count} samples, {accelerator.num_processes} processes)")
    if accelerator.is_main_process:
        print(f"final_loss={losses[-1]:.6f}")
        if args.output:
            with open(args.output, "w") as f:
                json.dump({"losses": losses, "num_processes": accelerator.num_processes,
                           "distributed_type": str(accelerator.distributed_type)}, f)
    # Every rank reaches the teardown together: a rank that destroys its gloo group while a peer is
    # still busy (rank 0 writing its results) can abort in libtorch's teardown.
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
    # torch 2.13 keeps the gloo process group of a DistributedDataParallel model (and its worker
    # threads) alive past destroy_process_group. A worker still releasing the last collective's work
    # (tensors with Python objects) when the interpreter finalizes needs the GIL, is made to exit, and
    # the rank aborts after a successful run ("terminate called without an active exception",
    # SIGABRT; seen 1 run in ~70 on a loaded machine, core: AsyncBarrierWork's destructor in
    # ProcessGroupGloo::runLoop under Py_FinalizeEx). Everything is written and the group destroyed:
    # leave without the interpreter's teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
