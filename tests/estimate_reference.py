"""accelerate's own arithmetic for local config.json files, for tests/estimate.rs.

For each job, builds the model the way `accelerate estimate-memory` does (transformers AutoModel
under init_empty_weights, float32), prints accelerate's table through its own `estimate_command`,
and optionally writes a safetensors file holding the same tensors: the real header plus a sparse,
never-written data region, so even a 70B model costs no disk.

usage: estimate_reference.py JOBS.json
JOBS.json: [{"dir": CONFIG_DIR, "names": [MODEL_NAME, ...], "dtypes": [...]?, "safetensors": PATH?}, ...]
prints: one JSON list of {"tables": [str per name], "total": int|float, "largest_layer": int|float}
"""
import argparse
import contextlib
import io
import json
import struct
import sys

import torch
from transformers import AutoConfig, AutoModel

import accelerate.commands.estimate as est
from accelerate import init_empty_weights
from accelerate.utils import calculate_maximum_sizes

ST_DTYPES = {torch.float32: "F32", torch.int64: "I64", torch.bool: "BOOL", torch.float16: "F16", torch.bfloat16: "BF16"}


def write_safetensors(model, path):
    header, offset = {}, 0
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        n = t.numel() * t.element_size()
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        f.truncate(8 + len(blob) + offset)


def run(job):
    config = AutoConfig.from_pretrained(job["dir"])
    # accelerate/commands/estimate.py::create_empty_model: the first AutoModelFor* of auto_map.
    constructor = AutoModel
    auto_map = getattr(config, "auto_map", None)
    if isinstance(auto_map, dict):
        key = next((k for k in auto_map if k.startswith("AutoModelFor")), None)
        if key is not None:
            import transformers

            constructor = getattr(transformers, key)
    with init_empty_weights():
        model = constructor.from_config(config, dtype=torch.float32)
    est.create_empty_model = lambda *args, **kwargs: model
    tables = []
    for name in job["names"]:
        args = argparse.Namespace(
            model_name=name,
            library_name="transformers",
            dtypes=job.get("dtypes") or ["float32", "float16", "int8", "int4"],
            trust_remote_code=False,
        )
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            est.estimate_command(args)
        tables.append(out.getvalue())
    total, (largest, _) = calculate_maximum_sizes(model)
    if job.get("safetensors"):
        write_safetensors(model, job["safetensors"])
    return {"tables": tables, "total": total, "largest_layer": largest}


with open(sys.argv[1]) as f:
    jobs = json.load(f)
print(json.dumps([run(job) for job in jobs]))
