"""The model that is trained or served, as transformers builds it, for tests/estimate.rs.

For each job, builds `class` (default AutoModelForCausalLM) from a config.json on the meta device
(no memory, no initialisation) in `dtype` (default float16), passes it through transformers' own
quantizer for the config's quantization_config where that runs without its GPU kernels (fp8,
fbgemm_fp8: the modules are swapped before weights load), and reports:
  parameters: the number of parameter elements (shared tensors once);
  weight_bytes: parameters at their own element size, plus floating-point buffers at `dtype`'s
  (accel-estimate-memory's convention; integer buffers at their own size).

With "catch": true a job that transformers refuses (its config class or its modelling code
raising) reports {"error": "ExceptionType: message"} instead.
A job {"classes": true} reports {"classes": {CLASS: MODEL_TYPE}}: every model class of
transformers' auto mappings that one of `families` defines, with that model_type.

usage: estimate_trained_reference.py JOBS.json
JOBS.json: [{"config": PATH, "class": NAME?, "dtype": NAME?, "catch": BOOL?}
            | {"classes": true, "families": [MODEL_TYPE, ...]}, ...]
prints: one JSON list of {"class": str, "parameters": int, "weight_bytes": int} | {"error": str}
        | {"classes": {...}}
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


def classes(job):
    import transformers.models.auto.modeling_auto as auto

    types = {}
    for name in dir(auto):
        mapping = getattr(auto, name)
        if name.startswith("MODEL_") and name.endswith("_MAPPING_NAMES") and isinstance(mapping, dict):
            for model_type, cls in mapping.items():
                for c in cls if isinstance(cls, (list, tuple)) else [cls]:
                    types.setdefault(c, set()).add(model_type)
    wanted = set(job["families"])
    # A class shared with families without a formula (LlamaForCausalLM also serves exaone's
    # mapping) belongs to the family here whose package (that of its config class) defines it.
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    package = {f: CONFIG_MAPPING[f].__module__.rsplit(".", 1)[0] for f in wanted}
    out = {}
    for c, t in sorted(types.items()):
        cls = getattr(transformers, c, None)
        for family in t & wanted:
            if cls is not None and cls.__module__.rsplit(".", 1)[0] == package[family]:
                out[c] = family
    return {"classes": out}


def one(job):
    if job.get("classes"):
        return classes(job)
    if not job.get("catch"):
        return run(job)
    try:
        return run(job)
    except Exception as e:  # transformers' refusal, whatever its type
        return {"error": f"{type(e).__name__}: {e}"}


with open(sys.argv[1]) as f:
    jobs = json.load(f)
print(json.dumps([one(job) for job in jobs]))
