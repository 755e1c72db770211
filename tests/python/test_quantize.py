"""moekit.quantize from numpy (DLPack / buffer protocol) against the NumPy reference of
formats.md, byte for byte, for every scheme, layout and rule; and the shape function against the
C++ infer_quant_shapes."""

import itertools

import numpy as np
import pytest

import moekit
import numpy_reference as ref
from moekit import _C

BLOCK_SCHEMES = ("mxfp8", "nvfp4", "nvfp4_token", "mxfp4")
CASES = [(s, l, r) for s in moekit.SCHEMES for l in moekit.LAYOUTS for r in moekit.RULES
         if (s in BLOCK_SCHEMES or l == "linear") and (s.startswith("mx") or r == "rceil")]


def _bits(a):
    """Bytes of an array (float arrays compared bitwise)."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape(-1)


def _k_for(scheme, kb):
    sfv = {"nvfp4": 16, "nvfp4_token": 16, "mxfp8": 32, "mxfp4": 32}.get(scheme, 32)
    return sfv * kb


def _input(rng, shape, scale=3.0):
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    # A few exact tie points and saturating values (formats.md section 7).
    flat = x.reshape(-1)
    specials = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.0, -1e-3, 1e4, -1e4], np.float32)
    flat[: min(len(specials), flat.size)] = specials[: flat.size]
    return x


@pytest.mark.parametrize("scheme,layout,rule", CASES)
@pytest.mark.parametrize("m,kb", [(1, 4), (3, 3), (129, 5)])
def test_quantize_matches_numpy_reference(scheme, layout, rule, m, kb, rng):
    x = _input(rng, (m, _k_for(scheme, kb)))
    q = moekit.quantize(x, scheme, layout=layout, rule=rule, backend="cpu")
    v, s, g = ref.quantize(x, scheme, layout, rule)
    assert q.values.dtype == (np.uint16 if scheme == "bf16" else np.uint8)
    np.testing.assert_array_equal(_bits(q.values), _bits(v), err_msg="values")
    if s is None:
        assert q.scales is None
    else:
        assert q.scales.shape == s.shape
        np.testing.assert_array_equal(_bits(q.scales), _bits(s), err_msg="scales")
    if g is None:
        assert q.global_scale is None
    else:
        np.testing.assert_array_equal(_bits(q.global_scale), _bits(g), err_msg="global_scale")


@pytest.mark.parametrize("scheme", moekit.SCHEMES)
def test_quantize_batched_and_input_dtypes(scheme, rng):
    x = _input(rng, (2, 5, 64))
    want = ref.quantize(x, scheme)
    bf = moekit.bf16_bits(x)
    xb = moekit.from_bf16_bits(bf)  # the same values, exactly representable in bf16
    want_bf = ref.quantize(xb, scheme)
    for given, expect in ((x, want), (bf, want_bf), (xb.astype(np.float16), ref.quantize(xb.astype(np.float16).astype(np.float32), scheme))):
        q = moekit.quantize(given, scheme)
        for got, exp in zip(q[:3], expect):
            if exp is None:
                assert got is None
            else:
                np.testing.assert_array_equal(_bits(got), _bits(exp))


@pytest.mark.parametrize("scheme", ["nvfp4", "fp8_tensor"])
def test_static_global_scale(scheme, rng):
    x = _input(rng, (4, 64))
    q = moekit.quantize(x, scheme, global_scale=np.array([0.5], np.float32))
    v, s, g = ref.quantize(x, scheme, static=np.array([0.5], np.float32))
    np.testing.assert_array_equal(_bits(q.values), _bits(v))
    np.testing.assert_array_equal(_bits(q.scales), _bits(s))
    q2 = moekit.quantize(x, scheme, global_scale=0.5)  # a number works too
    np.testing.assert_array_equal(_bits(q2.values), _bits(v))


def test_edge_blocks(rng):
    x = np.zeros((3, 32), np.float32)
    x[1, :16] = 1e-30  # a tiny-SF block: codes saturate, scale byte 0
    x[1, 16:] = rng.standard_normal(16).astype(np.float32)
    x[2] = np.float32(-0.0)
    for scheme in ("nvfp4", "mxfp4", "mxfp8"):
        q = moekit.quantize(x, scheme)
        v, s, g = ref.quantize(x, scheme)
        np.testing.assert_array_equal(_bits(q.values), _bits(v))
        np.testing.assert_array_equal(_bits(q.scales), _bits(s))


@pytest.mark.parametrize("scheme", ["nvfp4", "mxfp4", "mxfp8", "fp8_1x128", "fp8_block", "fp8_token"])
def test_dequantize_matches_numpy_decode(scheme, rng):
    x = _input(rng, (3, 256), scale=1.0)
    q = moekit.quantize(x, scheme)
    d = moekit.dequantize(q)
    assert d.shape == x.shape and d.dtype == np.float32
    if scheme in ("nvfp4", "mxfp4", "fp8_block"):
        want = ref.dequantize_weights(q.values[None], q.scales[None],
                                      None if q.global_scale is None else q.global_scale, scheme)[0]
    elif scheme == "mxfp8":
        want = ref.e4m3_decode(q.values) * np.repeat(np.ldexp(1.0, q.scales.astype(np.int64) - 127), 32, axis=1)
    elif scheme == "fp8_1x128":
        want = ref.e4m3_decode(q.values) * np.repeat(q.scales, 128, axis=1)
    else:
        want = ref.e4m3_decode(q.values) * q.scales[:, None]
    np.testing.assert_array_equal(d, want.astype(np.float32))


@pytest.mark.parametrize("scheme,layout,rule", CASES)
def test_shape_function_matches_cpp(scheme, layout, rule):
    for shape in itertools.product([1, 2], [1, 127, 128, 129], [96, 128, 160]):
        for s in (shape[1:], shape):
            try:
                cpp = _C.quant_shapes(list(s), scheme, layout, rule)
            except ValueError as e:
                with pytest.raises(ValueError):
                    moekit.quant_shapes(s, scheme, layout, rule)
                continue
            py = moekit.quant_shapes(s, scheme, layout, rule)
            assert list(py.values.shape) == cpp["values"][0] and py.values.dtype == cpp["values"][1]
            for name in ("scales", "global_scale"):
                p, c = getattr(py, name), cpp[name]
                assert (p is None) == (c is None), (name, s)
                if p is not None:
                    assert list(p.shape) == c[0] and p.dtype == c[1], (name, s, p, c)


def test_scheme_string_with_layout():
    x = np.ones((2, 32), np.float32)
    a = moekit.quantize(x, "mxfp4/swizzled_128x4/floor")
    b = moekit.quantize(x, "mxfp4", layout="swizzled_128x4", rule="floor")
    np.testing.assert_array_equal(a.scales, b.scales)
    assert a.layout == "swizzled_128x4" and a.rule == "floor"
