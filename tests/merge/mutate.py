"""Damages a copy of a DCP checkpoint's .metadata in one specific way, for error tests.

Usage: mutate.py MODE DIR   (DIR is modified in place)
  offset_oob    move one chunk's storage offset past the end of its file
  drop_chunk    forget one chunk of a sharded tensor (a gap)
  overlap       make one chunk's box overlap its neighbour
  planner_bytes make one planner_data path element a bytes object (as a flipped opcode bit can)
  repeat_chunks list one chunk 3,000,000 times (the pickle memoizes it: a few MB of .metadata)
  crc_flip      flip one bit inside a tensor's data record in its .distcp file (the zip CRC-32 no longer matches)
  planner_key   give one tensor's planner_data path another top-level key (its own key left as it is)
  same_bytes    point one tensor's first chunk at the bytes of another tensor's chunk of the same shape
  tail_write    overwrite, in place, the last 4 KiB of the data of the largest chunk in __1_0.distcp (the
                .metadata is left as it is; for a shard rewritten while it is merged)
  evil          replace .metadata with a pickle that would run a shell command (it must never run)
"""
import dataclasses
import os
import pickle
import sys

mode, d = sys.argv[1], sys.argv[2]
path = os.path.join(d, ".metadata")
if mode == "evil":
    class Evil:
        def __reduce__(self):
            return (os.system, ("touch " + os.path.join(d, "PWNED"),))
    with open(path, "wb") as f:
        pickle.dump(Evil(), f)
    sys.exit(0)

import torch  # noqa: E402  (needed to unpickle the metadata classes)
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata  # noqa: E402

with open(path, "rb") as f:
    md = pickle.load(f)
fqn, tmd = next((k, v) for k, v in md.state_dict_metadata.items() if hasattr(v, "chunks") and len(v.chunks) == 2 and v.chunks[1].sizes[0] > 0)
if mode == "offset_oob":
    for idx, info in md.storage_data.items():
        if idx.fqn == fqn:
            info.offset += 10_000_000
            break
elif mode == "drop_chunk":
    tmd.chunks.pop()
elif mode == "overlap":
    c = tmd.chunks[1]
    tmd.chunks[1] = ChunkStorageMetadata(offsets=torch.Size([c.offsets[0] - 1, *c.offsets[1:]]), sizes=c.sizes)
    for idx in list(md.storage_data):
        if idx.fqn == fqn and idx.offset == c.offsets:
            info = md.storage_data.pop(idx)
            md.storage_data[dataclasses.replace(idx, offset=tmd.chunks[1].offsets)] = info
            break
elif mode == "planner_bytes":
    first, *rest = md.planner_data[fqn]
    md.planner_data[fqn] = (first.encode(), *rest)
elif mode == "planner_key":
    top, *rest = md.planner_data[fqn]
    md.planner_data[fqn] = ("optimizer" if top != "optimizer" else "model", *rest)
elif mode == "same_bytes":
    # Two tensors with chunks of one shape: the second's first chunk is pointed at the first's bytes.
    by_shape = {}
    for name, t in md.state_dict_metadata.items():
        if hasattr(t, "chunks") and t.chunks[0].sizes.numel() > 0:
            by_shape.setdefault((tuple(t.chunks[0].sizes), t.properties.dtype), []).append((name, t.chunks[0]))
    (a, ca), (b, cb) = next(v for v in by_shape.values() if len(v) >= 2)[:2]
    index = {(k.fqn, tuple(k.offset)): k for k in md.storage_data}
    md.storage_data[index[(b, tuple(cb.offsets))]] = md.storage_data[index[(a, tuple(ca.offsets))]]
    fqn = f"{b} <- {a}"
elif mode == "repeat_chunks":
    tmd.chunks = [tmd.chunks[0]] * 3_000_000
elif mode == "tail_write":
    import io
    import zipfile
    info = max((v for v in md.storage_data.values() if v.relative_path == "__1_0.distcp"), key=lambda v: v.length)
    data_file = os.path.join(d, info.relative_path)
    with open(data_file, "r+b") as f:
        f.seek(info.offset)
        blob = f.read(info.length)
        zi = max(zipfile.ZipFile(io.BytesIO(blob)).infolist(), key=lambda z: z.file_size)
        name_len = int.from_bytes(blob[zi.header_offset + 26:zi.header_offset + 28], "little")
        extra_len = int.from_bytes(blob[zi.header_offset + 28:zi.header_offset + 30], "little")
        end = info.offset + zi.header_offset + 30 + name_len + extra_len + zi.file_size
        f.seek(end - 4096)
        f.write(b"\xab" * 4096)
    print(end)
    sys.exit(0)
elif mode == "crc_flip":
    import io
    import zipfile
    info = next(v for k, v in md.storage_data.items() if k.fqn == fqn)
    data_file = os.path.join(d, info.relative_path)
    with open(data_file, "rb") as f:
        raw = bytearray(f.read())
    blob = bytes(raw[info.offset:info.offset + info.length])
    zi = next(z for z in zipfile.ZipFile(io.BytesIO(blob)).infolist() if "/data/" in z.filename and z.file_size > 0)
    name_len = int.from_bytes(blob[zi.header_offset + 26:zi.header_offset + 28], "little")
    extra_len = int.from_bytes(blob[zi.header_offset + 28:zi.header_offset + 30], "little")
    at = info.offset + zi.header_offset + 30 + name_len + extra_len
    raw[at] ^= 0x04
    with open(data_file, "wb") as f:
        f.write(raw)
    print(fqn)
    sys.exit(0)
else:
    raise SystemExit(f"unknown mode {mode}")
with open(path, "wb") as f:
    pickle.dump(md, f)
print(fqn)
