"""moekit.MoE / fused_experts / load_layer / oracle on the CPU backends with numpy arrays, against
the float64 NumPy layer of numpy_reference.py."""

import json
import os

import numpy as np
import pytest

import moekit
import numpy_reference as ref

# fp32 accumulation vs float64: the CPU reference layer's bound (run_job.cpp: 1e-5).
F32_BOUND = 1e-5


def _weights(rng, e, h, i, gated=True):
    w13 = (rng.standard_normal((e, (2 if gated else 1) * i, h)) / np.sqrt(h)).astype(np.float32)
    w2 = (rng.standard_normal((e, h, i)) / np.sqrt(i)).astype(np.float32)
    return moekit.from_bf16_bits(moekit.bf16_bits(w13)), moekit.from_bf16_bits(moekit.bf16_bits(w2))


def _reference(moe, x, ids, wts, activation="silu", weight_on_input=False):
    w = moe.weights()
    scheme = moe.config["scheme"].split("/")[0]
    w13 = ref.dequantize_weights(w["w13"], w.get("w13_scale"), w.get("w13_global_scale"), scheme)
    w2 = ref.dequantize_weights(w["w2"], w.get("w2_scale"), w.get("w2_global_scale"), scheme)
    return ref.moe(x, ids, wts, w13, w2, activation, w.get("w13_bias"), w.get("w2_bias"),
                   weight_on_input)


@pytest.mark.parametrize("routing", ["renormalize_naive", "renormalize", "default", "sigmoid_renorm"])
def test_bf16_layer_with_router_logits(routing, rng):
    e, h, i, k, m = 8, 64, 32, 2, 7
    w13, w2 = _weights(rng, e, h, i)
    moe = moekit.MoE(w13, w2, top_k=k, routing=routing)
    x = rng.standard_normal((m, h)).astype(np.float32)
    logits = rng.standard_normal((m, e)).astype(np.float32)
    y = moe(x, logits)
    assert y.shape == (m, h) and y.dtype == np.float32
    assert moe.backend == "cpu_reference" and moe.device == "cpu"
    ids, wts = ref.route(logits, k, routing)
    assert ref.rel_l2(y, _reference(moe, x, ids, wts)) < F32_BOUND


@pytest.mark.parametrize("scheme", ["nvfp4", "mxfp4", "fp8_block", "fp8_tensor"])
def test_quantized_layers(scheme, rng):
    e, h, i, k, m = 4, 256, 128, 2, 5
    w13, w2 = _weights(rng, e, h, i)
    moe = moekit.MoE(w13, w2, top_k=k, quantize=scheme, activation_quant="bf16")
    assert moe.config["scheme"].startswith(scheme)
    x = rng.standard_normal((m, h)).astype(np.float32)
    ids = rng.integers(0, e, size=(m, k)).astype(np.int32)
    wts = rng.random((m, k)).astype(np.float32)
    y = moe(x, ids, wts)
    assert ref.rel_l2(y, _reference(moe, x, ids, wts)) < F32_BOUND
    # The same layer built from the quantized arrays (checkpoint layout) gives the same bits.
    w = moe.weights()
    moe2 = moekit.MoE(w["w13"], w["w2"], top_k=k, scheme=scheme, w13_scale=w.get("w13_scale"),
                      w2_scale=w.get("w2_scale"), w13_global_scale=w.get("w13_global_scale"),
                      w2_global_scale=w.get("w2_global_scale"), activation_quant="bf16")
    np.testing.assert_array_equal(moe2(x, ids, wts), y)


@pytest.mark.parametrize("scheme", ["nvfp4", "mxfp4", "fp8_block", "fp8_tensor"])
def test_quantize_then_build_equals_quantize_argument(scheme, rng):
    """moekit.quantize through Python arrays == the C++ reference quantizer called directly by
    the library (MoE(quantize=...) runs quantize_moe_weights in C++), byte for byte."""
    e, h, i = 4, 256, 128
    w13, w2 = _weights(rng, e, h, i)
    q13, q2 = moekit.quantize(w13, scheme), moekit.quantize(w2, scheme)
    a = moekit.MoE(q13.values, q2.values, top_k=2, scheme=scheme, w13_scale=q13.scales,
                   w2_scale=q2.scales, w13_global_scale=q13.global_scale,
                   w2_global_scale=q2.global_scale)
    b = moekit.MoE(w13, w2, top_k=2, quantize=scheme)
    for name, arr in b.weights().items():
        np.testing.assert_array_equal(a.weights()[name], arr, err_msg=name)


def test_bf16_bits_in_and_out(rng):
    e, h, i, m = 4, 64, 32, 3
    w13, w2 = _weights(rng, e, h, i)
    moe = moekit.MoE(moekit.bf16_bits(w13), moekit.bf16_bits(w2), top_k=2)
    x = moekit.bf16_bits(rng.standard_normal((m, h)).astype(np.float32))
    logits = rng.standard_normal((m, e)).astype(np.float32)
    y = moe(x, logits)
    assert y.dtype == np.uint16 and moe.prepared
    ids, wts = ref.route(logits, 2, "renormalize")
    want = _reference(moe, moekit.from_bf16_bits(x), ids, wts)
    assert ref.rel_l2(moekit.from_bf16_bits(y), want) < 1e-2  # bf16 output rounding


def test_gpt_oss_layout_bias_and_swiglu(rng):
    """gpt-oss / transformers' fused layout: gate_up_proj (E, H, 2I) with gate/up columns
    interleaved, down_proj (E, I, H), biases; SwiGLU-OAI."""
    e, h, i, k, m = 4, 64, 32, 2, 6
    w13, w2 = _weights(rng, e, h, i)
    b13 = (rng.standard_normal((e, 2 * i)) * 0.1).astype(np.float32)
    b2 = (rng.standard_normal((e, h)) * 0.1).astype(np.float32)
    inter = np.empty_like(w13)
    inter[:, 0::2], inter[:, 1::2] = w13[:, :i], w13[:, i:]
    binter = np.empty_like(b13)
    binter[:, 0::2], binter[:, 1::2] = b13[:, :i], b13[:, i:]
    moe = moekit.MoE(np.ascontiguousarray(inter.transpose(0, 2, 1)), np.ascontiguousarray(w2.transpose(0, 2, 1)),
                     top_k=k, activation="swiglu_oai", routing="renormalize", transposed=True,
                     w13_layout="interleaved", w13_bias=binter, w2_bias=b2)
    np.testing.assert_array_equal(moe.weights()["w13"], moekit.bf16_bits(w13))
    np.testing.assert_array_equal(moe.weights()["w13_bias"], b13)
    x = rng.standard_normal((m, h)).astype(np.float32)
    logits = rng.standard_normal((m, e)).astype(np.float32)
    ids, wts = ref.route(logits, k, "renormalize")
    want = ref.moe(x, ids, wts, w13.astype(np.float64), w2.astype(np.float64), "swiglu_oai", b13, b2)
    assert ref.rel_l2(moe(x, logits), want) < F32_BOUND


def test_deepseek_routing_with_correction_bias(rng):
    e, h, i, k, m = 16, 64, 32, 4, 5
    w13, w2 = _weights(rng, e, h, i)
    bias = (rng.standard_normal(e) * 0.1).astype(np.float32)
    moe = moekit.MoE(w13, w2, top_k=k, routing="deepseek_v3", num_expert_groups=4, topk_group=2,
                     routed_scaling_factor=2.5, correction_bias=bias)
    x = rng.standard_normal((m, h)).astype(np.float32)
    logits = rng.standard_normal((m, e)).astype(np.float32)
    ids, wts = ref.route(logits, k, "deepseek_v3", bias, 4, 2, 2.5)
    assert ref.rel_l2(moe(x, logits), _reference(moe, x, ids, wts)) < F32_BOUND


@pytest.mark.parametrize("backend", ["cpu_reference", "cpu_monolithic", "cpu_batched"])
def test_backend_override_and_explain(backend, rng):
    e, h, i, m = 4, 64, 32, 3
    w13, w2 = _weights(rng, e, h, i)
    moe = moekit.MoE(w13, w2, top_k=2, backend=backend)
    x = rng.standard_normal((m, h)).astype(np.float32)
    logits = rng.standard_normal((m, e)).astype(np.float32)
    if backend == "cpu_batched":
        # The batched format follows from a low-latency EP config; a single-rank layer refuses it.
        with pytest.raises(moekit.Error, match="batched"):
            moe(x, logits)
        return
    y = moe(x, logits)
    assert moe.backend == backend
    expl = moe.explain()
    assert expl.selected == backend and backend in str(expl)
    names = [c[0] for c in expl.candidates]
    assert "cpu_reference" in names and "cuda_bf16_grouped" in names
    ids, wts = ref.route(logits, 2, "renormalize")
    assert ref.rel_l2(y, _reference(moe, x, ids, wts)) < F32_BOUND


def test_chunking_max_tokens(rng):
    e, h, i, m = 4, 64, 32, 37
    w13, w2 = _weights(rng, e, h, i)
    small = moekit.MoE(w13, w2, top_k=2, max_tokens=8)
    big = moekit.MoE(w13, w2, top_k=2)
    x = rng.standard_normal((m, h)).astype(np.float32)
    logits = rng.standard_normal((m, e)).astype(np.float32)
    np.testing.assert_array_equal(small(x, logits), big(x, logits))
    assert small._layer.max_tokens == 8
    empty = big(np.zeros((0, h), np.float32), np.zeros((0, e), np.float32))
    assert empty.shape == (0, h)


def test_fused_experts_caches_prepared_weights(rng):
    e, h, i, m = 4, 64, 32, 5
    w13, w2 = _weights(rng, e, h, i)
    x = rng.standard_normal((m, h)).astype(np.float32)
    ids = rng.integers(0, e, size=(m, 2)).astype(np.int64)
    wts = rng.random((m, 2)).astype(np.float32)
    moekit.clear_cache()
    y1 = moekit.fused_experts(x, w13, w2, wts, ids)
    n = len(moekit._layer._FUSED_CACHE)
    y2 = moekit.fused_experts(x, w13, w2, wts, ids)
    assert len(moekit._layer._FUSED_CACHE) == n == 1
    np.testing.assert_array_equal(y1, y2)
    moe = moekit.MoE(w13, w2, top_k=2)
    np.testing.assert_array_equal(y1, moe(x, ids, wts))
    del w13
    import gc

    gc.collect()
    assert len(moekit._layer._FUSED_CACHE) == 0  # dropped with its weights


def test_oracle():
    expl = moekit.oracle(256, 7168, 2048, 8, scheme="fp8_block", routing="deepseek_v3",
                         num_expert_groups=8, topk_group=4, routed_scaling_factor=2.5,
                         device="sm90", tokens=64)
    assert "cuda_fp8_block_grouped" in [c[0] for c in expl.candidates]
    with pytest.raises(moekit.Error, match="cutlass_fp4_sm100|not a known backend"):
        moekit.oracle(8, 256, 512, 2, scheme="nvfp4", backend="cutlass_fp4_sm100")


def _write_safetensors(path, tensors):
    """A minimal safetensors writer (the format is a JSON header + raw little-endian data)."""
    names = {np.dtype(np.float32): "F32", np.dtype(np.uint16): "BF16", np.dtype(np.uint8): "U8"}
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


@pytest.mark.parametrize("layout", ["per_expert", "fused"])
def test_load_layer_transformers_layouts(layout, tmp_path, rng):
    """A Qwen3-MoE checkpoint as transformers writes it: per-expert tensors
    (save_pretrained's default) or the fused 3-D experts (save_original_format=False)."""
    e, h, i, k, m = 4, 64, 32, 2, 5
    w13, w2 = _weights(rng, e, h, i)
    gate = rng.standard_normal((e, h)).astype(np.float32)
    p = "model.layers.1.mlp"
    t = {f"{p}.gate.weight": moekit.bf16_bits(gate)}
    if layout == "fused":
        t[f"{p}.experts.gate_up_proj"] = moekit.bf16_bits(w13)
        t[f"{p}.experts.down_proj"] = moekit.bf16_bits(w2)
    else:
        for x in range(e):
            t[f"{p}.experts.{x}.gate_proj.weight"] = moekit.bf16_bits(w13[x, :i])
            t[f"{p}.experts.{x}.up_proj.weight"] = moekit.bf16_bits(w13[x, i:])
            t[f"{p}.experts.{x}.down_proj.weight"] = moekit.bf16_bits(w2[x])
    _write_safetensors(tmp_path / "model.safetensors", t)
    cfg = dict(model_type="qwen3_moe", num_hidden_layers=2, num_experts=e, num_experts_per_tok=k,
               hidden_size=h, moe_intermediate_size=i, norm_topk_prob=True, hidden_act="silu")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    info = moekit.checkpoint_info(tmp_path)
    assert info["moe_layers"] == [1] and info["format"] == "bf16"
    moe = moekit.load_layer(tmp_path, 1)
    assert moe.config["routing"] == "renormalize_naive"
    np.testing.assert_array_equal(moe.weights()["w13"], moekit.bf16_bits(w13))
    np.testing.assert_array_equal(moe.weights()["router_weight"], moekit.bf16_bits(gate))
    x = rng.standard_normal((m, h)).astype(np.float32)
    logits = x @ moekit.from_bf16_bits(moekit.bf16_bits(gate)).T
    ids, wts = ref.route(logits, k, "renormalize_naive")
    assert ref.rel_l2(moe(x, logits), _reference(moe, x, ids, wts)) < F32_BOUND
