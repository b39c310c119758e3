"""One rank of scripts/bench/estimate-vs-measured: build a model from a config.json with transformers
(random weights, nothing downloaded), wrap it as the strategy says, run real training steps with
Adam, and write what this rank holds to OUT_DIR/rank<N>.json:

- params, grads, optimizer, master: bytes of the distinct storages of those tensors (exact);
- reduce_bucket: DeepSpeed's gradient reduction bucket (its storages while it exists);
- activations: the peak of memory allocated during one forward+backward above what was allocated
  when it began, from torch.profiler's memory events (CPU) or torch.cuda.max_memory_allocated (GPU).

Two steps run before the measured one, so gradients and optimizer state already exist (zero_grad
keeps the gradient tensors; DDP has rebuilt its buckets) and the peak is what forward and backward
add on top of them. bf16 is torch.autocast, as accelerate's mixed precision runs the forward, with
FSDP2's MixedPrecisionPolicy(param_dtype=bfloat16) under fsdp.

Usage (under accel-launch, which sets RANK/WORLD_SIZE/MASTER_*):
  estimate-measure-rank.py CONFIG[,CONFIG...] STRATEGY PRECISION BxS[,BxS...] OUT_DIR [cpu|cuda [checkpointing]]
Each config is built once per run; each (batch, seq) point gets its own warm-up step and peak.
The model is the causal LM, or for an encoder-decoder config (T5) the seq2seq LM trained with
labels = input ids (encoder and decoder sequences of S tokens each), with the attention
implementation transformers picks for the family (SDPA, eager where the family does not support
SDPA, as Gemma-2) unless config.json names one (`attn_implementation`). `checkpointing` turns on
transformers' gradient checkpointing (every layer).
STRATEGY: single, ddp, fsdp (FSDP2 fully_shard per decoder layer, then the root), zero1, zero2,
zero3 (DeepSpeed with its defaults; bf16 is DeepSpeed's bf16 mode, the module in bfloat16).
PRECISION: fp32 or bf16.

What DeepSpeed holds, where it holds it (deepspeed/runtime/zero): ZeRO-1/2 weights are views of
the flat buffer, master weights `single_partition_of_fp32_groups`; ZeRO-1 keeps every `.grad` whole
until `reduce_gradients` (read on entry to it), ZeRO-2 keeps `averaged_gradients` after backward;
both allocate the reduction bucket per backward (read on entry to
`independent_gradient_partition_epilogue`, which frees it). ZeRO-3 weights are the partitions
(`ds_tensor`) plus whatever parameter data stays gathered (persistent parameters), gradients
`grad_partitions_flat_buffer`, master weights `fp32_partitioned_groups_flat`, and the bucket lives
from initialisation on.
"""

import json
import os
import sys

import torch
import torch.distributed as dist


def storages(tensors):
    """Bytes of the distinct storages behind `tensors` (DTensors by their local shard)."""
    seen, total = set(), 0
    for t in tensors:
        if t is None:
            continue
        if hasattr(t, "to_local"):
            t = t.to_local()
        s = t.untyped_storage()
        if s.data_ptr() in seen and s.nbytes() > 0:
            continue
        seen.add(s.data_ptr())
        total += s.nbytes()
    return total


def optimizer_tensors(opt):
    for state in opt.state.values():
        for v in state.values():
            if torch.is_tensor(v):
                yield v


def layers_of(model):
    """The decoder layers FSDP2 wraps one by one (transformers' _no_split_modules)."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    return [m for m in model.modules() if type(m).__name__ in names]


class CpuPeak:
    """Peak allocated bytes above the start, from the profiler's memory events in time order."""

    def __enter__(self):
        from torch.profiler import ProfilerActivity, profile

        self.prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self.prof.__enter__()
        return self

    def __exit__(self, *exc):
        self.prof.__exit__(*exc)
        # Every allocation and free is one "[memory]" event with a signed byte count; the
        # function-level view folds those inside operators into the operators, so read them raw.
        events = [
            (e.start_ns(), e.nbytes())
            for e in self.prof.profiler.kineto_results.events()
            if e.name() == "[memory]"
        ]
        events.sort(key=lambda x: x[0])
        cur = peak = 0
        for _, n in events:
            cur += n
            peak = max(peak, cur)
        self.peak = peak
        return False


class CudaPeak:
    def __enter__(self):
        torch.cuda.synchronize()
        self.base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc):
        torch.cuda.synchronize()
        self.peak = torch.cuda.max_memory_allocated() - self.base
        return False


def measure(config_path, strategy, precision, points, dev, rank, checkpointing=False):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    with open(config_path) as f:
        raw = json.load(f)
    config = AutoConfig.for_model(**raw)
    bf16 = precision == "bf16"
    torch.manual_seed(0)
    # The model a user trains: the causal LM, or for an encoder-decoder (T5) the seq2seq LM, with
    # the attention transformers picks for the family (SDPA, or eager where the family does not
    # support it, as Gemma-2) unless config.json names one.
    auto = AutoModelForSeq2SeqLM if getattr(config, "is_encoder_decoder", False) else AutoModelForCausalLM
    model = auto.from_config(config)
    if checkpointing:
        # transformers' default: torch.utils.checkpoint per decoder layer, use_reentrant=False.
        model.gradient_checkpointing_enable()
    model.to(dev)
    model.train()
    autocast = bf16
    engine = None
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model)
    elif strategy == "fsdp":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16) if bf16 else MixedPrecisionPolicy()
        for layer in layers_of(model):
            fully_shard(layer, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    elif strategy.startswith("zero"):
        import deepspeed

        ds = {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": int(strategy[-1])},
            "optimizer": {"type": "Adam", "params": {"lr": 1e-4, "torch_adam": True}},
            "bf16": {"enabled": bf16},
        }
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds)
        autocast = False
    seen = {}
    if engine is not None and strategy != "zero3":
        zopt = engine.optimizer

        def wrap(name, record):
            inner = getattr(zopt, name)

            def wrapped(*a, **k):
                record()
                return inner(*a, **k)

            setattr(zopt, name, wrapped)

        wrap("reduce_gradients",
             lambda: seen.__setitem__("grads", storages(p.grad for p in engine.module.parameters())))
        wrap("independent_gradient_partition_epilogue",
             lambda: seen.__setitem__("bucket", storages(b for k in zopt.ipg_buckets.values() for b in k.buffer)))
    if engine is None:
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    vocab = config.get_text_config().vocab_size

    def forward_backward(ids):
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast):
            if engine is not None:
                loss = engine(input_ids=ids, labels=ids).loss
            else:
                loss = model(input_ids=ids, labels=ids).loss
        if engine is not None:
            engine.backward(loss)
        else:
            loss.backward()

    def step():
        if engine is not None:
            engine.step()
        else:
            opt.step()
            opt.zero_grad(set_to_none=False)

    peaks = []
    peak_of = CudaPeak if dev.type == "cuda" else CpuPeak
    for batch, seq in points:
        gen = torch.Generator().manual_seed(rank)
        ids = torch.randint(0, vocab, (batch, seq), generator=gen).to(dev)
        # Two warm-up steps: DDP rebuilds its gradient buckets in the second iteration's forward.
        for _ in range(2):
            forward_backward(ids)
            step()
        with peak_of() as peak:
            forward_backward(ids)
        if strategy == "zero2":
            seen["grads"] = storages(g for group in engine.optimizer.averaged_gradients.values() for g in group or [])
        step()
        peaks.append({"batch_size": batch, "seq_len": seq, "activations": int(peak.peak)})

    bucket_bytes = 0
    if engine is not None:
        module = engine.module
        params = list(module.parameters())
        opt = engine.optimizer
        if strategy == "zero3":
            param_bytes = storages(list(p.ds_tensor for p in params) + [p.data for p in params if p.data.numel() > 0])
            grad_bytes = storages([opt.grad_partitions_flat_buffer])
            master = list(opt.fp32_partitioned_groups_flat)
            bucket_bytes = storages(k.buffer for k in opt.ipg_buckets.values() if torch.is_tensor(k.buffer))
        else:
            param_bytes = storages(params)
            grad_bytes = seen["grads"]
            master = list(opt.single_partition_of_fp32_groups)
            bucket_bytes = seen["bucket"]
        master_bytes = storages(master)
        opt_bytes = storages(optimizer_tensors(opt.optimizer))
    else:
        params = list(model.parameters())
        param_bytes = storages(params)
        grad_bytes = storages(p.grad for p in params)
        opt_bytes = storages(optimizer_tensors(opt))
        master_bytes = 0
    return {
        "config": config_path,
        "params": param_bytes,
        "grads": grad_bytes,
        "optimizer": opt_bytes,
        "master": master_bytes,
        "reduce_bucket": bucket_bytes,
        "numel": sum(p.numel() for p in params),
        "attn_implementation": (engine.module if engine is not None else getattr(model, "module", model)).config._attn_implementation,
        "points": peaks,
    }


def main():
    # Every strategy x precision x config of one launch, in that order: one torch, transformers and
    # DeepSpeed start-up (seconds on 2 cores) for the whole grid instead of one per setup.
    configs, strategies, precisions, points, out_dir = sys.argv[1:6]
    strategies, precisions = strategies.split(","), precisions.split(",")
    device = sys.argv[6] if len(sys.argv) > 6 else "cpu"
    checkpointing = len(sys.argv) > 7 and sys.argv[7] == "checkpointing"
    points = [tuple(int(x) for x in p.split("x")) for p in points.split(",")]
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    distributed = strategies != ["single"]
    if distributed:
        if any(s.startswith("zero") for s in strategies):
            import importlib

            import deepspeed

            # On the CPU accelerator DeepSpeed JIT-compiles a shared-memory all-reduce op at
            # init (deepspeed/comm/torch.py::build_shm_op); gloo does the same job without it.
            # `import deepspeed.comm.torch as m` would bind torch itself (deepspeed.comm imports
            # torch under that name), so take the module from the import system.
            importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
            deepspeed.init_distributed("nccl" if device == "cuda" else "gloo")
        else:
            dist.init_process_group("nccl" if device == "cuda" else "gloo")
    results = [
        measure(c, strategy, precision, points, dev, rank, checkpointing)
        for strategy in strategies
        for precision in precisions
        for c in configs.split(",")
    ]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world_size": world, "results": results}, f)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
        # What remains of DeepSpeed's engines and gloo's threads is torn down by C++ destructors at
        # interpreter exit, where a still-joinable std::thread aborts the rank ("terminate called
        # without an active exception", SIGABRT, seen 2 runs in ~6 under ZeRO). The results are
        # written and the group is gone: leave without those destructors.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
