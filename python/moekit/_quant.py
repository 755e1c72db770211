"""quantize / dequantize over moekit's quantize op, and its shape function.

The shape function is plain Python arithmetic (no extension call) so that it also runs on
symbolic sizes (torch fake / meta tensors under torch.compile); tests check it against the C++
``infer_quant_shapes`` for every scheme and layout.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Sequence, Tuple

from . import _C
from ._arrays import framework_of

SCHEMES = (
    "bf16",
    "fp8_tensor",
    "fp8_token",
    "fp8_1x128",
    "fp8_block",
    "mxfp8",
    "nvfp4",
    "nvfp4_token",
    "mxfp4",
)
LAYOUTS = ("linear", "swizzled_128x4", "swizzled_8x4")
RULES = ("rceil", "floor")

_BLOCK = {"mxfp8": 32, "nvfp4": 16, "nvfp4_token": 16, "mxfp4": 32}


class ArraySpec(NamedTuple):
    shape: Tuple[Any, ...]
    dtype: str  # float32 | bfloat16 | float8_e4m3fn | float8_e8m0fnu | fp4x2


class QuantShapes(NamedTuple):
    values: ArraySpec
    scales: Optional[ArraySpec]
    global_scale: Optional[ArraySpec]


class Quantized(NamedTuple):
    """A quantized tensor: values, scales (None for bf16) and the NVFP4 ENCODE global scale
    (``2688 / amax``, fp32; None for other schemes), in the input's framework."""

    values: Any
    scales: Any
    global_scale: Any
    scheme: str
    layout: str = "linear"
    rule: str = "rceil"


def _split(scheme: str, layout: Optional[str], rule: Optional[str]):
    # "nvfp4/swizzled_128x4" style strings are accepted too (QuantConfig::str()).
    parts = scheme.split("/")
    scheme = parts[0]
    for p in parts[1:]:
        if p in LAYOUTS:
            if layout is not None and layout != p:
                raise ValueError(f"layout: expected the layout of scheme '{'/'.join(parts)}' ({p}), got '{layout}'")
            layout = p
        elif p in RULES:
            if rule is not None and rule != p:
                raise ValueError(f"rule: expected the rule of scheme '{'/'.join(parts)}' ({p}), got '{rule}'")
            rule = p
        else:
            raise ValueError(f"scheme: expected <scheme>[/<layout>][/<rule>], got '{'/'.join(parts)}'")
    return scheme, layout or "linear", rule or "rceil"


def _ceil_div(a, b):
    return (a + b - 1) // b


def quant_shapes(shape: Sequence[Any], scheme: str, layout: Optional[str] = None,
                 rule: Optional[str] = None) -> QuantShapes:
    """Output shapes and dtypes of ``quantize`` for an input of ``shape`` ((M, K) or (B, M, K)),
    without running it. Works on symbolic sizes."""
    scheme, layout, rule = _split(scheme, layout, rule)
    if scheme not in SCHEMES:
        raise ValueError(f"scheme: expected one of {'|'.join(SCHEMES)}, got '{scheme}'")
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {'|'.join(LAYOUTS)}, got '{layout}'")
    if rule not in RULES:
        raise ValueError(f"rule: expected one of {'|'.join(RULES)}, got '{rule}'")
    shape = tuple(shape)
    if len(shape) not in (2, 3):
        raise ValueError(f"x shape: expected (M, K) or (B, M, K), got {shape}")
    batch = shape[:-2]
    m, k = shape[-2], shape[-1]
    per_matrix = (shape[0],) if batch else (1,)
    if scheme not in _BLOCK and layout != "linear":
        raise ValueError(f"layout: expected linear ({scheme} has no block scales), got {layout}")
    if scheme not in ("mxfp8", "mxfp4") and rule != "rceil":
        raise ValueError(f"rule: expected rceil (the rule applies to MX schemes only, not {scheme}), got {rule}")
    f32 = "float32"
    if scheme == "bf16":
        return QuantShapes(ArraySpec(shape, "bfloat16"), None, None)
    if scheme == "fp8_tensor":
        return QuantShapes(ArraySpec(shape, "float8_e4m3fn"), ArraySpec(per_matrix, f32), None)
    if scheme == "fp8_token":
        return QuantShapes(ArraySpec(shape, "float8_e4m3fn"), ArraySpec(batch + (m,), f32), None)
    if scheme == "fp8_1x128":
        return QuantShapes(
            ArraySpec(shape, "float8_e4m3fn"), ArraySpec(batch + (m, _ceil_div(k, 128)), f32), None
        )
    if scheme == "fp8_block":
        return QuantShapes(
            ArraySpec(shape, "float8_e4m3fn"),
            ArraySpec(batch + (_ceil_div(m, 128), _ceil_div(k, 128)), f32),
            None,
        )
    sfv = _BLOCK[scheme]
    if k % sfv != 0:
        raise ValueError(f"x.shape[-1] (K): expected a multiple of {sfv} for {scheme}, got {k}")
    fp4 = scheme in ("nvfp4", "nvfp4_token", "mxfp4")
    kb = k // sfv
    if layout == "linear":
        srows, scols = m, kb
    else:
        tile = 128 if layout == "swizzled_128x4" else 8
        srows, scols = tile * _ceil_div(m, tile), 4 * _ceil_div(kb, 4)
    values = ArraySpec(batch + (m, k // 2 if fp4 else k), "fp4x2" if fp4 else "float8_e4m3fn")
    scales = ArraySpec(batch + (srows, scols), "float8_e8m0fnu" if scheme.startswith("mx") else "float8_e4m3fn")
    gs = None
    if scheme == "nvfp4":
        gs = ArraySpec(per_matrix, f32)
    elif scheme == "nvfp4_token":
        gs = ArraySpec(batch + (m,), f32)
    return QuantShapes(values, scales, gs)


def _resolve_backend(backend: str, device: str) -> str:
    if backend == "auto":
        return "cpu" if device == "cpu" else "cuda"
    if backend in ("cpu", "cuda", "reference"):
        return "cpu" if backend == "reference" else backend
    raise ValueError(f"backend: expected 'auto', 'cpu' or 'cuda', got '{backend}'")


def _static_scale(fw, global_scale, x, batch: int):
    if global_scale is None or not isinstance(global_scale, (int, float)):
        return global_scale
    if fw.name == "torch":
        return fw.torch.full((batch,), float(global_scale), dtype=fw.torch.float32, device=x.device)
    import numpy

    if fw.name == "numpy":
        return numpy.full((batch,), float(global_scale), dtype=numpy.float32)
    raise TypeError(f"global_scale: expected an array for {fw.name} inputs, got a Python number")


def quantize(
    x: Any,
    scheme: str,
    layout: Optional[str] = None,
    backend: str = "auto",
    global_scale: Any = None,
    rule: Optional[str] = None,
) -> Quantized:
    """Quantizes x ((M, K) or (B, M, K); float32, float16 or bfloat16) into ``scheme``.

    scheme: bf16 | fp8_tensor | fp8_token | fp8_1x128 | fp8_block | mxfp8 | nvfp4 | nvfp4_token |
    mxfp4, optionally with "/<layout>" and "/<rule>" ("nvfp4/swizzled_128x4"). layout
    (block-scaled schemes): linear (default) | swizzled_128x4 | swizzled_8x4. rule (MX schemes):
    rceil (default) | floor. backend: auto (x's device) | cpu | cuda; both give the same bytes.
    global_scale: optional static per-matrix scale ((B,) / (1,) float32, or a number): the ENCODE
    global scale for nvfp4, the DECODE scale for fp8_tensor.
    Returns ``Quantized(values, scales, global_scale)`` in x's framework (shapes and dtypes from
    ``quant_shapes``). CUDA work runs on the caller's current stream.
    """
    fw = framework_of(x)
    if fw.name == "torch":
        from . import torch as _mt

        if _mt.is_compiling():
            return _mt.quantize_op(x, scheme, layout, global_scale, rule)
    return _quantize_impl(fw, x, scheme, layout, backend, global_scale, rule)


def _quantize_impl(fw, x, scheme, layout, backend, global_scale, rule) -> Quantized:
    scheme, layout, rule = _split(scheme, layout, rule)
    shapes = quant_shapes(tuple(x.shape), scheme, layout, rule)
    device = fw.device(x)
    be = _resolve_backend(backend, device)
    outs = [None if spec is None else fw.empty(spec.shape, spec.dtype, x) for spec in shapes]
    static = _static_scale(fw, global_scale, x, x.shape[0] if len(x.shape) == 3 else 1)
    sfw = framework_of(static, "global_scale") if static is not None else fw
    _C.quantize(
        fw.export(x),
        scheme,
        layout,
        rule,
        be,
        fw.export(outs[0]),
        None if outs[1] is None else fw.export(outs[1]),
        None if outs[2] is None else fw.export(outs[2]),
        None if static is None else sfw.export(static),
        fw.stream(x),
    )
    if fw.synchronous_cuda and device != "cpu":
        _C.synchronize()
    vals = [None if o is None else fw.wrap(o, x) for o in outs]
    return Quantized(vals[0], vals[1], vals[2], scheme, layout, rule)


def dequantize(q: Quantized, shape: Optional[Sequence[int]] = None, backend: str = "auto") -> Any:
    """float32 array of the original shape from a ``Quantized``. ``shape`` is needed where the
    values do not tell K (packed fp4: K = 2 * values.shape[-1] is assumed when omitted)."""
    fw = framework_of(q.values, "values")
    vshape = tuple(q.values.shape)
    if shape is None:
        shape = vshape[:-1] + (2 * vshape[-1],) if q.scheme in ("nvfp4", "nvfp4_token", "mxfp4") else vshape
    device = fw.device(q.values)
    be = _resolve_backend(backend, device)
    out = fw.empty(tuple(shape), "float32", q.values)
    _C.dequantize(
        fw.export(q.values),
        None if q.scales is None else fw.export(q.scales),
        None if q.global_scale is None else fw.export(q.global_scale),
        q.scheme,
        q.layout,
        q.rule,
        be,
        fw.export(out),
        fw.stream(q.values),
    )
    if fw.synchronous_cuda and device != "cpu":
        _C.synchronize()
    return fw.wrap(out, q.values)
