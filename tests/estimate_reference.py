"""accelerate's own arithmetic for a local config.json, for tests/estimate.rs.

Builds the model the way `accelerate estimate-memory` does (transformers AutoModel under
init_empty_weights, float32), prints accelerate's table through its own `estimate_command`, and with
--write-safetensors PATH writes a safetensors file holding the same tensors (header plus a sparse,
never-written data region, so even a 70B model costs no disk).

usage: estimate_reference.py CONFIG_DIR MODEL_NAME [--dtypes D ...] [--write-safetensors PATH]
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("config_dir")
    p.add_argument("model_name")
    p.add_argument("--dtypes", nargs="+", default=["float32", "float16", "int8", "int4"])
    p.add_argument("--write-safetensors")
    a = p.parse_args()
    config = AutoConfig.from_pretrained(a.config_dir)
    with init_empty_weights():
        model = AutoModel.from_config(config, dtype=torch.float32)
    est.create_empty_model = lambda *args, **kwargs: model
    args = argparse.Namespace(model_name=a.model_name, library_name="transformers", dtypes=a.dtypes, trust_remote_code=False)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        est.estimate_command(args)
    total, (largest, _) = calculate_maximum_sizes(model)
    if a.write_safetensors:
        header, offset = {}, 0
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            n = t.numel() * t.element_size()
            header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + n]}
            offset += n
        blob = json.dumps(header).encode()
        blob += b" " * (-len(blob) % 8)
        with open(a.write_safetensors, "wb") as f:
            f.write(struct.pack("<Q", len(blob)))
            f.write(blob)
            f.truncate(8 + len(blob) + offset)
    sys.stdout.write(out.getvalue())
    print(json.dumps({"total": total, "largest_layer": largest}))


main()
