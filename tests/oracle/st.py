"""st.py - a minimal safetensors reader (std lib + numpy), so the oracle does
not need the `safetensors` package.

Format: 8-byte little-endian header length N, N bytes of JSON
{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
then the tensor bytes; offsets are relative to the end of the header.
"""
import json
import struct

import numpy as np

_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16,
           "I32": np.int32, "I64": np.int64, "U8": np.uint8, "BF16": np.uint16}


def load(path):
    """Returns ({name: numpy array}, metadata dict). BF16 is widened to f32."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + n
    out = {}
    for name, h in header.items():
        begin, end = h["data_offsets"]
        dt = h["dtype"]
        if dt not in _DTYPES:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
        a = np.frombuffer(raw, dtype=_DTYPES[dt], count=(end - begin) // np.dtype(_DTYPES[dt]).itemsize,
                          offset=base + begin).reshape(h["shape"])
        if dt == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = a.copy()
    return out, meta
