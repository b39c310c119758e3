"""A small, real PyTorch training run written against accelerate, for accel-launch.

    accel-launch examples/train.py                    # embedded default: 2 CPU ranks without GPUs
    accel-launch --cpu --num_processes 4 examples/train.py --epochs 3
    python examples/train.py                          # one process, same numbers

It fits a two-layer MLP to a fixed synthetic regression problem. Batches are split across ranks
(`split_batches=True`) and gradients are averaged, so every world size follows the same trajectory and
prints the same losses as a single process (up to float rounding). Uses Accelerator, prepare, backward,
accumulate and gather_for_metrics; takes a few seconds on CPU.
"""
import argparse
import json

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


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch_size", type=int, default=32, help="global batch size (split across ranks)")
    p.add_argument("--grad_accum", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--output", help="write the losses as JSON here (main process)")
    args = p.parse_args()

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

    losses = []
    for epoch in range(args.epochs):
        model.train()
        for x, y in train:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for x, y in evaluate:
                per_sample = ((model(x) - y) ** 2).mean(dim=1)
                per_sample = accelerator.gather_for_metrics(per_sample)
                total += per_sample.sum().item()
                count += per_sample.numel()
        losses.append(total / count)
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
