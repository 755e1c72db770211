"""Framework adapters: how moekit takes arrays from, and hands arrays back to, the caller's framework.

Every public function takes torch / numpy / cupy / jax (any DLPack-capable) arrays. Inputs are
imported zero-copy by the extension; outputs are allocated by the caller's framework where moekit
can reach its allocator (torch's caching allocator: CUDA-graph capture safe; numpy; cupy) and
written in place, or allocated by moekit and taken back with the framework's ``from_dlpack``
(jax and any other DLPack producer).

Streams: torch work runs on ``torch.cuda.current_stream()``, cupy work on cupy's current stream;
for other frameworks moekit runs on the legacy default stream and synchronizes before returning.

dtypes moekit names (what ``quant_shapes`` returns): ``float32``, ``bfloat16``, ``float8_e4m3fn``,
``float8_e8m0fnu``, ``fp4x2`` (two e2m1 values per byte), ``int32``. numpy and cupy have no
bfloat16 / float8 types: there ``bfloat16`` is ``uint16`` (raw bf16 bits) and the byte types are
``uint8``. torch returns ``torch.bfloat16`` and ``torch.float8_e4m3fn``; packed fp4 and e8m0 scales
are ``torch.uint8`` (as vLLM and FlashInfer hold them).
"""

from __future__ import annotations

import sys
from typing import Any

from . import _C

# moekit dtype name -> the extension's C++ dtype name (for _C.empty).
_CPP_DTYPE = {
    "float32": "f32",
    "bfloat16": "bf16",
    "float8_e4m3fn": "e4m3",
    "float8_e8m0fnu": "e8m0",
    "fp4x2": "e2m1x2",
    "uint8": "u8",
    "int32": "i32",
    "float16": "f16",
}


class Framework:
    """What moekit needs from an array framework."""

    name = "generic"
    # True when moekit allocates outputs through the framework (written in place).
    allocates = False
    synchronous_cuda = True

    def export(self, x: Any) -> Any:
        """An object the extension imports zero-copy (the array, or a DLPack capsule)."""
        return x

    def device(self, x: Any) -> str:
        dev = x.__dlpack_device__()
        return "cpu" if dev[0] in (1, 3) else f"cuda:{dev[1]}"

    def stream(self, x: Any) -> int:
        return 0

    def empty(self, shape, dtype: str, like: Any) -> Any:
        return _C.empty(list(shape), _CPP_DTYPE[dtype], self.device(like))

    def empty_out(self, x: Any, cols: int, dtype: str) -> Any:
        """The (M, cols) output of a layer call on x (M rows) in ``dtype``."""
        return self.empty((x.shape[0], cols), dtype, x)

    def wrap(self, out: Any, like: Any) -> Any:
        """The caller's framework's array for an output made by ``empty``."""
        mod = sys.modules.get(type(like).__module__.split(".")[0])
        if mod is not None and type(like).__module__.startswith("jax"):
            import jax.dlpack

            return jax.dlpack.from_dlpack(out)
        if mod is not None and hasattr(mod, "from_dlpack"):
            return mod.from_dlpack(out)
        import numpy

        return numpy.from_dlpack(out)

    def dtype_name(self, x: Any) -> str:
        return str(getattr(x, "dtype", "?"))

    def to_int32(self, x: Any) -> Any:
        return x

    def to_float32(self, x: Any) -> Any:
        return x

    def synchronize(self, x: Any) -> None:
        """Waits for pending work on x's device before moekit reads it on the host."""


class NumpyFramework(Framework):
    name = "numpy"
    allocates = True

    _DTYPES = {
        "float32": "float32",
        "bfloat16": "uint16",
        "float8_e4m3fn": "uint8",
        "float8_e8m0fnu": "uint8",
        "fp4x2": "uint8",
        "uint8": "uint8",
        "int32": "int32",
        "float16": "float16",
    }

    def device(self, x):
        return "cpu"

    def empty(self, shape, dtype, like):
        import numpy

        return numpy.empty(tuple(shape), dtype=self._DTYPES[dtype])

    def wrap(self, out, like):
        return out

    def to_int32(self, x):
        import numpy

        return x if x.dtype == numpy.int32 or x.dtype.kind not in "iu" else x.astype(numpy.int32)

    def to_float32(self, x):
        import numpy

        if x.dtype in (numpy.float16, numpy.float64):
            return x.astype(numpy.float32)
        return x


class TorchFramework(Framework):
    name = "torch"
    allocates = True
    synchronous_cuda = False

    def __init__(self):
        import torch

        self.torch = torch
        self._to_dlpack = getattr(torch._C, "_to_dlpack", None) or torch.utils.dlpack.to_dlpack
        self._raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self._byte_types = {
            getattr(torch, n)
            for n in ("float8_e4m3fn", "float8_e8m0fnu", "float4_e2m1fn_x2", "float8_e5m2")
            if hasattr(torch, n)
        }
        self._dtypes = {
            "float32": torch.float32,
            "bfloat16": torch.bfloat16,
            "float16": torch.float16,
            "float8_e4m3fn": torch.float8_e4m3fn,
            "float8_e8m0fnu": torch.uint8,
            "fp4x2": torch.uint8,
            "uint8": torch.uint8,
            "int32": torch.int32,
        }

    def export(self, x):
        if x.requires_grad:
            x = x.detach()
        if x.dtype in self._byte_types:
            x = x.view(self.torch.uint8)
        return self._to_dlpack(x)

    def device(self, x):
        d = x.device
        return "cpu" if d.type == "cpu" else f"{d.type}:{d.index if d.index is not None else 0}"

    def stream(self, x):
        idx = x.get_device()  # -1 on the CPU
        if idx < 0:
            return 0
        if self._raw_stream is not None:
            return self._raw_stream(idx)
        return self.torch.cuda.current_stream(idx).cuda_stream

    def empty(self, shape, dtype, like):
        return self.torch.empty(tuple(shape), dtype=self._dtypes[dtype], device=like.device)

    def empty_out(self, x, cols, dtype):
        t = self._dtypes[dtype]
        if x.dtype == t:
            return x.new_empty((x.shape[0], cols))
        return self.torch.empty((x.shape[0], cols), dtype=t, device=x.device)

    def wrap(self, out, like):
        return out

    def torch_dtype(self, dtype: str):
        return self._dtypes[dtype]

    def to_int32(self, x):
        return x if x.dtype == self.torch.int32 else x.to(self.torch.int32)

    def to_float32(self, x):
        return x if x.dtype == self.torch.float32 else x.float()

    def synchronize(self, x):
        if x.is_cuda:
            self.torch.cuda.current_stream(x.device).synchronize()


class CupyFramework(Framework):
    name = "cupy"
    allocates = True
    synchronous_cuda = False

    _DTYPES = NumpyFramework._DTYPES

    def __init__(self):
        import cupy

        self.cupy = cupy

    def _stream_ptr(self):
        return self.cupy.cuda.get_current_stream().ptr

    def export(self, x):
        s = self._stream_ptr()
        # DLPack: 1 names the legacy default stream (0 is not a valid consumer stream).
        return x.__dlpack__(stream=s if s != 0 else 1)

    def device(self, x):
        return f"cuda:{x.device.id}"

    def stream(self, x):
        return self._stream_ptr()

    def empty(self, shape, dtype, like):
        with like.device:
            return self.cupy.empty(tuple(shape), dtype=self._DTYPES[dtype])

    def wrap(self, out, like):
        return out

    def to_int32(self, x):
        return x if x.dtype == self.cupy.int32 else x.astype(self.cupy.int32)

    def to_float32(self, x):
        return x if x.dtype != self.cupy.float16 else x.astype(self.cupy.float32)

    def synchronize(self, x):
        self.cupy.cuda.get_current_stream().synchronize()


_NUMPY = NumpyFramework()
_GENERIC = Framework()
_by_type: dict = {}


def framework_of(x: Any, name: str = "x") -> Framework:
    """The adapter for x's framework (cached per type); TypeError naming the argument when x is
    not an array."""
    t = type(x)
    fw = _by_type.get(t)
    if fw is not None:
        return fw
    mod = t.__module__.split(".")[0]
    if mod == "torch":
        from . import torch as _moekit_torch  # registers the torch ops on first use

        fw = _moekit_torch.framework()
    elif mod == "numpy":
        fw = _NUMPY
    elif mod == "cupy":
        fw = CupyFramework()
    elif hasattr(x, "__dlpack__") or hasattr(x, "__array_interface__"):
        fw = _GENERIC
    else:
        raise TypeError(
            f"{name}: expected an array (torch.Tensor, jax.Array, cupy.ndarray, numpy.ndarray or any "
            f"DLPack producer), got {t.__module__}.{t.__qualname__}"
        )
    _by_type[t] = fw
    return fw


def bf16_bits(x):
    """float32 numpy array -> uint16 numpy array of bfloat16 bits (round to nearest even).

    numpy has no bfloat16: moekit reads a uint16 array as raw bfloat16 bits wherever it accepts
    bfloat16, and returns bfloat16 results to numpy callers as uint16 bits.
    """
    import numpy

    u = numpy.ascontiguousarray(x, dtype=numpy.float32).view(numpy.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(numpy.uint16)
    return numpy.where(nan, ((u >> 16) | 0x40).astype(numpy.uint16), r)


def from_bf16_bits(bits):
    """uint16 numpy array of bfloat16 bits -> float32 numpy array (exact)."""
    import numpy

    return (numpy.ascontiguousarray(bits, dtype=numpy.uint16).astype(numpy.uint32) << 16).view(
        numpy.float32
    )
