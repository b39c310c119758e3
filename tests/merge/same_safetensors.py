"""Compares two safetensors files at the byte level, without torch: the same tensor names, and for each the
same dtype string, shape and data bytes (the header's order and padding may differ).

Usage: same_safetensors.py A.safetensors B.safetensors
Prints "ok N DTYPES" (N tensors, the sorted dtype strings seen); raises on any difference.
"""
import json
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        b = f.read()
    (n,) = struct.unpack("<Q", b[:8])
    header = json.loads(b[8:8 + n])
    header.pop("__metadata__", None)
    data = b[8 + n:]
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


a, b = read(sys.argv[1]), read(sys.argv[2])
assert set(a) == set(b), f"names differ: only in A {sorted(set(a) - set(b))}, only in B {sorted(set(b) - set(a))}"
for k in sorted(a):
    assert a[k][:2] == b[k][:2], f"{k}: {a[k][:2]} vs {b[k][:2]}"
    assert a[k][2] == b[k][2], f"{k}: the data bytes differ"
print("ok", len(a), ",".join(sorted({v[0] for v in a.values()})))
