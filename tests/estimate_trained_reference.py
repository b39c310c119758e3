"""The model that is trained or served, as transformers builds it, for tests/estimate.rs.

For each job, builds `class` (default AutoModelForCausalLM) from a config.json on the meta device
(no memory, no initialisation) in `dtype` (default float16), passes it through transformers' own
quantizer for the config's quantization_config where that runs without its GPU kernels (fp8,
fbgemm_fp8: the modules are swapped before weights load), and reports:
  parameters: the number of parameter elements (shared tensors once);
  weight_bytes: parameters at their own element size, plus floating-point buffers at `dtype`'s
  (accel-estimate-memory's convention; integer buffers at their own size).

usage: estimate_trained_reference.py JOBS.json
JOBS.json: [{"config": PATH, "class": NAME?, "dtype": NAME?}, ...]
prints: one JSON list of {"class": str, "parameters": int, "weight_bytes": int}
"""
import json
import sys

import torch
import transformers
from transformers import AutoConfig
from transformers.modeling_utils import local_torch_dtype
from transformers.quantizers.auto import AutoHfQuantizer


def run(job):
    config = AutoConfig.from_pretrained(job["config"])
    dtype = getattr(torch, job.get("dtype", "float16"))
    quantization = getattr(config, "quantization_config", None)
    if quantization is not None:
        # from_pretrained would check for a GPU and the kernels here; the module swap needs neither.
        del config.quantization_config
    cls = getattr(transformers, job.get("class", "AutoModelForCausalLM"))
    # As from_pretrained does: the quantizer swaps modules under the load dtype, so new biases
    # take it.
    with torch.device("meta"), local_torch_dtype(dtype, cls.__name__):
        model = cls.from_config(config, dtype=dtype)
        if quantization is not None:
            quantizer = AutoHfQuantizer.from_config(quantization, pre_quantized=True)
            quantizer._process_model_before_weight_loading(model)
    parameters = list(model.parameters())
    buffers = list(model.buffers())
    weight_bytes = sum(p.numel() * p.element_size() for p in parameters)
    weight_bytes += sum(
        b.numel() * (dtype.itemsize if b.is_floating_point() else b.element_size()) for b in buffers
    )
    return {
        "class": type(model).__name__,
        "parameters": sum(p.numel() for p in parameters),
        "weight_bytes": weight_bytes,
    }


with open(sys.argv[1]) as f:
    jobs = json.load(f)
print(json.dumps([run(job) for job in jobs]))
