#!/usr/bin/env python3
"""Regenerates the seed corpus of the safetensors header fuzzer (tests/io/corpus/).

Plain Python (no numpy): every file is a hand-built safetensors image. Valid seeds exercise every
header feature; invalid ones sit next to interesting boundaries so that few mutations cross them.
Run: python3 tests/io/make_corpus.py
"""
import json
import os
import struct

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def image(header, data, pad=True, header_len=None):
    text = header if isinstance(header, str) else json.dumps(header, separators=(",", ":"))
    raw = text.encode("utf-8")
    if pad:
        raw += b" " * ((8 - (8 + len(raw)) % 8) % 8)
    n = len(raw) if header_len is None else header_len
    return struct.pack("<Q", n) + raw + data


def entries(specs):
    """specs: list of (name, dtype, shape, nbytes) -> (header dict, data bytes)."""
    header, off, data = {}, 0, b""
    for name, dtype, shape, nbytes in specs:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + nbytes]}
        data += bytes((off + i) * 37 % 251 for i in range(nbytes))
        off += nbytes
    return header, data


def main():
    os.makedirs(HERE, exist_ok=True)
    seeds = {}
    h, d = entries([("model.layers.0.mlp.gate.weight", "BF16", [4, 8], 64),
                    ("model.layers.0.mlp.experts.0.gate_proj.weight", "F32", [2, 4], 32),
                    ("scale", "F8_E4M3", [2, 2], 4), ("ids", "I64", [2], 16),
                    ("empty", "F16", [0, 3], 0), ("scalar", "I32", [], 4),
                    ("packed", "U8", [3, 5], 15), ("e8", "F8_E8M0", [1], 1)])
    seeds["valid_multi.safetensors"] = image(dict(__metadata__={"format": "pt", "k": "v"}, **h), d)
    h, d = entries([("w", "F4", [2, 6], 6), ("b", "BOOL", [3], 3), ("c", "I8", [1], 1),
                    ("f64", "F64", [1], 8)])
    seeds["valid_exotic_dtypes.safetensors"] = image(h, d)
    seeds["valid_empty.safetensors"] = image("{}", b"")
    seeds["valid_unpadded.safetensors"] = image(*entries([("a", "F32", [1], 4)]), pad=False)
    h, d = entries([("a", "F32", [1], 4), ("b", "F32", [1], 4)])
    h["b"]["data_offsets"] = [2, 6]
    seeds["bad_overlap.safetensors"] = image(h, d)
    h, d = entries([("a", "U8", [2], 2)])
    seeds["bad_duplicate.safetensors"] = image(
        '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},'
        '"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', d)
    seeds["bad_header_len.safetensors"] = image("{}", b"", header_len=2**40)
    h, d = entries([("a", "F32", [4294967296, 4294967296], 0)])
    seeds["bad_shape_overflow.safetensors"] = image(h, d)
    h, d = entries([("x", "BF16", [2, 2], 8)])
    h["x"]["data_offsets"] = [8, 0]
    seeds["bad_reversed.safetensors"] = image(h, d)
    seeds["bad_deep_nesting.safetensors"] = image('{"a":' + "[" * 200 + "]" * 200 + "}", b"")
    for name, raw in sorted(seeds.items()):
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(raw)
        print(f"{name}: {len(raw)} bytes")


if __name__ == "__main__":
    main()
