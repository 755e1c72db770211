"""An independent NumPy implementation of moekit's formats (shared/docs/formats.md) and of the MoE
layer, the yardstick of the Python tests.

Only the arithmetic formats.md fixes is shared with the C++ library (fp32 round-to-nearest
operations in the stated order); the conversions to e2m1 / e4m3 are table look-ups of the nearest
representable value (ties to the even code), not ports of the C++ bit manipulation, and the layer
is evaluated in float64 with its own loops.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32
C6 = np.array([0x3E2AAAAB], dtype=np.uint32).view(F32)[0]  # RN(1/6)
RCP448 = F32(1.0) / F32(448.0)
FLT_MAX = np.finfo(F32).max

_E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def _e4m3_table():
    vals = []
    for c in range(127):  # 0x7F is NaN
        e, m = c >> 3, c & 7
        vals.append(m * 2.0**-9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(vals)


_E4M3 = _e4m3_table()


def _nearest_code(a: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Index of the nearest table value for a >= 0 (ties to the even index); saturates."""
    a = np.minimum(a.astype(np.float64), table[-1])
    hi = np.clip(np.searchsorted(table, a, side="left"), 0, len(table) - 1)
    lo = np.maximum(hi - 1, 0)
    dlo, dhi = a - table[lo], table[hi] - a
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0))
    return np.where(pick_hi, hi, lo).astype(np.uint8)


def e2m1_encode(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=F32)
    return _nearest_code(np.abs(x), _E2M1) | (np.signbit(x).astype(np.uint8) << 3)


def e2m1_decode(code: np.ndarray) -> np.ndarray:
    v = _E2M1[code & 7]
    return np.where(code & 8, -v, v)


def e4m3_encode(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=F32)
    return _nearest_code(np.abs(x), _E4M3) | (np.signbit(x).astype(np.uint8) << 7)


def e4m3_decode(code: np.ndarray) -> np.ndarray:
    v = _E4M3[np.minimum(code & 0x7F, 126)]
    return np.where(code & 0x80, -v, v)


def e8m0_ceil(x: np.ndarray) -> np.ndarray:
    u = np.asarray(x, dtype=F32).view(np.uint32) & 0x7FFFFFFF
    e, m = u >> 23, u & 0x7FFFFF
    up = (m != 0) & ~((e == 0) & (m <= 0x400000))
    return np.minimum(e + up, 254).astype(np.uint8)


def e8m0_floor_exponent(vmax: np.ndarray, emax: int) -> np.ndarray:
    e = (np.asarray(vmax, dtype=F32).view(np.uint32) & 0x7FFFFFFF) >> 23
    b = np.where(e == 0, 0, e.astype(np.int64) - emax)
    return np.clip(b, 0, 254).astype(np.uint8)


def exp2_f32(b: np.ndarray) -> np.ndarray:
    return np.ldexp(np.ones_like(b, dtype=np.float64), b.astype(np.int64)).astype(F32)


def swizzle(linear: np.ndarray, layout: str) -> np.ndarray:
    """linear [..., M, Kb] -> the padded swizzled buffer [..., Mp, Kp] (formats.md section 6)."""
    if layout == "linear":
        return linear
    *batch, m, kb = linear.shape
    tile = 128 if layout == "swizzled_128x4" else 8
    mp, kp = tile * -(-m // tile), 4 * -(-kb // 4)
    tk = kp // 4
    out = np.zeros(tuple(batch) + (mp * kp,), dtype=linear.dtype)
    r, c = np.meshgrid(np.arange(m), np.arange(kb), indexing="ij")
    if layout == "swizzled_128x4":
        off = ((r // 128) * tk + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + (c % 4)
    else:
        off = ((r // 8) * tk + c // 4) * 32 + (r % 8) * 4 + (c % 4)
    out[..., off] = linear
    return out.reshape(tuple(batch) + (mp, kp))


def _blocks(x: np.ndarray, sfv: int) -> np.ndarray:
    return x.reshape(x.shape[:-1] + (x.shape[-1] // sfv, sfv))


def _pack(codes: np.ndarray) -> np.ndarray:
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def _amax(x: np.ndarray, axes) -> np.ndarray:
    return np.max(np.abs(x), axis=axes, keepdims=True).astype(F32)


def quantize(x: np.ndarray, scheme: str, layout: str = "linear", rule: str = "rceil", static=None):
    """x: float32 [M, K] or [B, M, K] (values already the exact fp32 of the input). Returns
    (values, scales or None, global_scale or None) as moekit lays them out."""
    x = np.asarray(x, dtype=F32)
    batched = x.ndim == 3
    xb = x if batched else x[None]
    B, M, K = xb.shape
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        if scheme == "bf16":
            u = xb.view(np.uint32)
            bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
            return (bits if batched else bits[0]), None, None
        if scheme in ("fp8_tensor", "fp8_token", "fp8_1x128", "fp8_block"):
            if scheme == "fp8_tensor":
                if static is not None:
                    s = np.asarray(static, dtype=F32).reshape(B, 1, 1)
                else:
                    s = _amax(xb, (1, 2)) / F32(448.0)
                    s = np.where(s == 0, F32(1.0), s).astype(F32)
                q = e4m3_encode(xb / s)
                scales = s.reshape(B)
            elif scheme == "fp8_token":
                s = np.maximum(_amax(xb, 2) / F32(448.0), F32(1.0) / (F32(448.0) * F32(512.0))).astype(F32)
                q = e4m3_encode(xb / s)
                scales = s[..., 0]
            elif scheme == "fp8_1x128":
                kb = -(-K // 128)
                pad = np.zeros((B, M, kb * 128), F32)
                pad[..., :K] = xb
                a = np.max(np.abs(pad.reshape(B, M, kb, 128)), axis=3)
                s = (np.maximum(a, F32(1e-10)) / F32(448.0)).astype(F32)
                q = e4m3_encode(xb / np.repeat(s, 128, axis=2)[..., :K])
                scales = s
            else:
                mb, kb = -(-M // 128), -(-K // 128)
                pad = np.zeros((B, mb * 128, kb * 128), F32)
                pad[:, :M, :K] = xb
                a = np.max(np.abs(pad.reshape(B, mb, 128, kb, 128)), axis=(2, 4))
                s = (np.maximum(a, F32(1e-10)) / F32(448.0)).astype(F32)
                full = np.repeat(np.repeat(s, 128, axis=1), 128, axis=2)[:, :M, :K]
                q = e4m3_encode(xb / full)
                scales = s
            if not batched:
                q = q[0]
                scales = scales if scheme == "fp8_tensor" else scales[0]
            return q, scales, None
        if scheme == "mxfp8":
            bl = _blocks(xb, 32)
            vmax = np.max(np.abs(bl), axis=-1).astype(F32)
            b = e8m0_ceil(vmax * RCP448) if rule == "rceil" else e8m0_floor_exponent(vmax, 8)
            osc = np.where(vmax != 0, exp2_f32(127 - b.astype(np.int64)), F32(0)).astype(F32)
            q = e4m3_encode(bl * osc[..., None]).reshape(B, M, K)
            sc = swizzle(b, layout)
            return (q if batched else q[0]), (sc if batched else sc[0]), None
        if scheme in ("nvfp4", "nvfp4_token"):
            if scheme == "nvfp4":
                if static is not None:
                    gs = np.asarray(static, dtype=F32).reshape(B, 1, 1)
                else:
                    amax = _amax(xb, (1, 2))
                    gs = np.where(amax == 0, F32(1.0), F32(2688.0) / amax).astype(F32)
            else:
                amax = _amax(xb, 2)
                gs = np.where(amax == 0, F32(1.0), F32(2688.0) / amax).astype(F32)
            bl = _blocks(xb, 16)
            vmax = np.max(np.abs(bl), axis=-1).astype(F32)
            gs_c6 = (gs * C6).astype(F32)
            sf = np.where(vmax != 0, vmax * gs_c6, F32(0)).astype(F32)
            sfb = e4m3_encode(sf)
            sfq = e4m3_decode(sfb).astype(F32)
            inv_gs = (F32(1.0) / gs).astype(F32)
            denom = (sfq * inv_gs).astype(F32)
            osc = (F32(1.0) / denom).astype(F32)
            osc = np.where(np.isnan(osc) | (osc >= FLT_MAX), FLT_MAX, osc).astype(F32)
            osc = np.where(vmax != 0, osc, F32(0)).astype(F32)
            codes = e2m1_encode((bl * osc[..., None]).astype(F32)).reshape(B, M, K)
            q = _pack(codes)
            sc = swizzle(sfb, layout)
            g = gs.reshape(B) if scheme == "nvfp4" else gs[..., 0]
            if not batched:
                return q[0], sc[0], (g if scheme == "nvfp4" else g[0])
            return q, sc, g
        if scheme == "mxfp4":
            bl = _blocks(xb, 32)
            vmax = np.max(np.abs(bl), axis=-1).astype(F32)
            b = e8m0_ceil((vmax * C6).astype(F32)) if rule == "rceil" else e8m0_floor_exponent(vmax, 2)
            osc = np.where(vmax != 0, exp2_f32(127 - b.astype(np.int64)), F32(0)).astype(F32)
            codes = e2m1_encode((bl * osc[..., None]).astype(F32)).reshape(B, M, K)
            q = _pack(codes)
            sc = swizzle(b, layout)
            return (q if batched else q[0]), (sc if batched else sc[0]), None
    raise ValueError(scheme)


def dequantize_weights(values, scales, gscale, scheme: str) -> np.ndarray:
    """Linear-scale weights [E, N, K(/2)] -> float64 [E, N, K]."""
    if scheme == "bf16":
        return (np.asarray(values, dtype=np.uint16).astype(np.uint32) << 16).view(F32).astype(np.float64)
    if scheme == "fp8_block":
        v = e4m3_decode(values)
        E, N, K = v.shape
        s = np.repeat(np.repeat(scales, 128, axis=1), 128, axis=2)[:, :N, :K]
        return v * s
    if scheme == "fp8_tensor":
        return e4m3_decode(values) * np.asarray(scales, dtype=np.float64)[:, None, None]
    lo, hi = values & 0xF, values >> 4
    codes = np.stack([lo, hi], axis=-1).reshape(values.shape[:-1] + (values.shape[-1] * 2,))
    v = e2m1_decode(codes)
    if scheme == "nvfp4":
        s = e4m3_decode(scales)
        return v * np.repeat(s, 16, axis=-1) / np.asarray(gscale, dtype=np.float64)[:, None, None]
    if scheme == "mxfp4":
        s = np.ldexp(1.0, scales.astype(np.int64) - 127)
        return v * np.repeat(s, 32, axis=-1)
    raise ValueError(scheme)


def route(logits: np.ndarray, top_k: int, method: str, correction_bias=None, num_groups=1,
          topk_group=1, scale=1.0):
    """moekit's routing (routing.hpp): ids int32 [M, k], weights float32 [M, k]."""
    l = np.asarray(logits, dtype=np.float64)
    M, E = l.shape
    sig = 1.0 / (1.0 + np.exp(-l))
    if method in ("deepseek_v3", "minimax2"):
        s32 = (1.0 / (1.0 + np.exp(-np.asarray(logits, dtype=F32).astype(np.float64)))).astype(F32)
        score = (s32 + np.asarray(correction_bias, dtype=F32)).astype(F32).astype(np.float64)
        if method == "deepseek_v3" and num_groups > 1:
            g = score.reshape(M, num_groups, E // num_groups)
            top2 = -np.sort(-g, axis=2)[:, :, : min(2, E // num_groups)].sum(axis=2)
            keep = np.argsort(-top2, axis=1, kind="stable")[:, :topk_group]
            mask = np.full((M, num_groups), -np.inf)
            np.put_along_axis(mask, keep, 0.0, axis=1)
            score = score + np.repeat(mask, E // num_groups, axis=1)
        ids = np.argsort(-score, axis=1, kind="stable")[:, :top_k]
        s = np.take_along_axis(s32.astype(np.float64), ids, axis=1)
        w = s / (s.sum(axis=1, keepdims=True) + 1e-20) * scale
        return ids.astype(np.int32), w.astype(F32)
    ids = np.argsort(-l, axis=1, kind="stable")[:, :top_k]
    chosen = np.take_along_axis(l, ids, axis=1)
    if method == "default":
        p = np.exp(l - l.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        w = np.take_along_axis(p, ids, axis=1)
    elif method == "renormalize":
        p = np.exp(chosen - chosen.max(axis=1, keepdims=True))
        w = p / p.sum(axis=1, keepdims=True)
    elif method == "renormalize_naive":
        p = np.exp(l - l.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        w = np.take_along_axis(p, ids, axis=1)
        w = w / w.sum(axis=1, keepdims=True)
    elif method == "topk":
        w = chosen
    elif method in ("sigmoid", "llama4"):
        w = np.take_along_axis(sig, ids, axis=1)
    elif method == "sigmoid_renorm":
        w = np.take_along_axis(sig, ids, axis=1)
        w = w / w.sum(axis=1, keepdims=True)
    else:
        raise ValueError(method)
    return ids.astype(np.int32), w.astype(F32)


def _act(g, u, kind, alpha=1.702, limit=7.0):
    if kind == "silu":
        return g / (1 + np.exp(-g)) * u
    if kind == "swiglu_oai":
        glu = np.minimum(g, limit)
        lin = np.clip(u, -limit, limit)
        return glu / (1 + np.exp(-alpha * glu)) * (lin + 1)
    if kind == "gelu_tanh":
        return 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g**3))) * u
    raise ValueError(kind)


def moe(x, ids, weights, w13, w2, activation="silu", b13=None, b2=None, weight_on_input=False):
    """float64 MoE layer: x [M, H], ids/weights [M, k], w13 [E, 2I, H], w2 [E, H, I] (float64)."""
    x = np.asarray(x, dtype=np.float64)
    M, H = x.shape
    I = w2.shape[2]
    out = np.zeros((M, H))
    for t in range(M):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            w = float(weights[t, j])
            xin = x[t] * w if weight_on_input else x[t]
            h = w13[e] @ xin
            if b13 is not None:
                h = h + b13[e]
            a = _act(h[:I], h[I:], activation)
            y = w2[e] @ a
            if b2 is not None:
                y = y + b2[e]
            out[t] += y if weight_on_input else w * y
    return out


def rel_l2(out, ref) -> float:
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    den = np.linalg.norm(ref)
    return float(np.linalg.norm(out - ref) / den) if den else float(np.linalg.norm(out))
