"""moekit: the Mixture-of-Experts layer of LLMs (routing, quantized grouped expert GEMMs, combine)
on NVIDIA Hopper, with a normative CPU reference backend, from Python.

Arrays are taken zero-copy from torch / jax / cupy / numpy (DLPack) and results come back in the
caller's framework; CUDA work runs on the caller's current stream. See docs/python.md.

    import moekit
    moe = moekit.MoE(w13, w2, top_k=2, routing="renormalize_naive")   # bf16 [E,2I,H], [E,H,I]
    y = moe(x, router_logits)                                         # or moe(x, ids, weights)
    q = moekit.quantize(x, "nvfp4", layout="swizzled_128x4")          # values, scales, global
"""

from __future__ import annotations

import importlib.util as _importlib_util

from . import _C
from ._C import Error
from ._arrays import bf16_bits, from_bf16_bits
from ._layer import (
    DEFAULT_MAX_TOKENS,
    Explanation,
    MoE,
    checkpoint_info,
    clear_cache,
    fused_experts,
    load_layer,
    oracle,
)
from ._quant import SCHEMES, LAYOUTS, RULES, QuantShapes, Quantized, dequantize, quant_shapes, quantize

__version__ = _C.info()["version"]

__all__ = [
    "Error",
    "MoE",
    "Explanation",
    "Quantized",
    "QuantShapes",
    "SCHEMES",
    "LAYOUTS",
    "RULES",
    "DEFAULT_MAX_TOKENS",
    "bf16_bits",
    "from_bf16_bits",
    "checkpoint_info",
    "clear_cache",
    "dequantize",
    "fused_experts",
    "info",
    "load_layer",
    "oracle",
    "quant_shapes",
    "quantize",
]


def info() -> dict:
    """moekit's build (version, CUDA, CUTLASS), the device it sees, its backends, and whether the
    torch integration is available (torch importable)."""
    d = _C.info()
    d["torch"] = "available" if _importlib_util.find_spec("torch") is not None else "not installed"
    return d
