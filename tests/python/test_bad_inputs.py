"""Every bad input is a ValueError / TypeError naming the argument (never a crash), and a failing
C++ call surfaces as moekit.Error with the C++ message."""

import numpy as np
import pytest

import moekit

E, H, I = 4, 64, 32


def _layer(**kw):
    rng = np.random.default_rng(0)
    w13 = rng.standard_normal((E, 2 * I, H)).astype(np.float32) / 8
    w2 = rng.standard_normal((E, H, I)).astype(np.float32) / 6
    return moekit.MoE(w13, w2, top_k=2, **kw), w13, w2


def _x(m=3):
    return np.ones((m, H), np.float32)


def test_error_type_is_value_and_runtime_error():
    assert issubclass(moekit.Error, ValueError) and issubclass(moekit.Error, RuntimeError)


@pytest.mark.parametrize(
    "x,kw,exc,match",
    [
        ([[1.0] * 32], {}, TypeError, r"^x: expected an array"),
        (np.ones((2, 32), np.int32), {}, ValueError, r"x dtype: expected float32 or float16 or bfloat16, got int32"),
        (np.ones((2, 32), np.float64), {}, ValueError, r"x dtype: .* got float64"),
        (np.ones(32, np.float32), {}, ValueError, r"x shape"),
        (np.ones((2, 20), np.float32), {"scheme": "nvfp4"}, ValueError, r"K\): expected a multiple of 16"),
        (np.ones((2, 64), np.float32)[:, ::2], {}, ValueError, r"x layout: expected a contiguous"),
        (np.ones((2, 32), np.float32), {"scheme": "nvfp5"}, ValueError, r"scheme: expected one of"),
        (np.ones((2, 32), np.float32), {"scheme": "fp8_token", "layout": "swizzled_128x4"}, ValueError, r"layout: expected linear"),
        (np.ones((2, 32), np.float32), {"scheme": "nvfp4", "rule": "floor"}, ValueError, r"rule: expected rceil"),
        (np.ones((2, 32), np.float32), {"backend": "tpu"}, ValueError, r"backend: expected 'auto', 'cpu' or 'cuda'"),
        (np.ones((2, 32), np.float32), {"scheme": "mxfp4", "global_scale": np.ones(1, np.float32)}, ValueError, r"static_scale"),
    ],
)
def test_quantize_bad_inputs(x, kw, exc, match):
    kw.setdefault("scheme", "nvfp4")
    with pytest.raises(exc, match=match):
        moekit.quantize(x, **kw)


def test_quantize_cuda_backend_with_host_array():
    with pytest.raises(ValueError, match=r"(x device: expected cuda:0|backend: expected 'cpu' \(this build)"):
        moekit.quantize(np.ones((2, 32), np.float32), "nvfp4", backend="cuda")


def test_quantize_bad_static_scale():
    with pytest.raises(ValueError, match=r"static_scale\[0\]"):
        moekit.quantize(np.ones((2, 32), np.float32), "nvfp4", global_scale=np.array([-1.0], np.float32))
    with pytest.raises(ValueError, match=r"global_scale dtype"):
        moekit.quantize(np.ones((2, 32), np.float32), "nvfp4", global_scale=np.array([1], np.int32))


def test_dequantize_inconsistent():
    q = moekit.quantize(np.ones((2, 32), np.float32), "nvfp4")
    bad = q._replace(scales=q.scales[:1].copy())
    with pytest.raises(ValueError, match=r"scales shape: expected \(2, 2\), got \(1, 2\)"):
        moekit.dequantize(bad)


def test_layer_construction_errors():
    rng = np.random.default_rng(0)
    w13 = rng.standard_normal((E, 2 * I, H)).astype(np.float32)
    w2 = rng.standard_normal((E, H, I)).astype(np.float32)
    with pytest.raises(TypeError, match="w13 and w2 are required"):
        moekit.MoE(w13, None, top_k=2)
    with pytest.raises(ValueError, match=r"top_k: expected an int >= 1"):
        moekit.MoE(w13, w2, top_k=0)
    with pytest.raises(ValueError, match=r"w13 shape: expected \(4, 64, 64\), got \(4, 63, 64\)"):
        moekit.MoE(w13[:, :63].copy(), w2, top_k=2)
    with pytest.raises(ValueError, match=r"w2 shape: expected a 3-D array"):
        moekit.MoE(w13, w2[0], top_k=2)
    with pytest.raises(ValueError, match=r"w13 dtype: expected bfloat16 or float32 or float16, got int32"):
        moekit.MoE(w13.astype(np.int32), w2, top_k=2)
    with pytest.raises(moekit.Error, match=r"top_k"):
        moekit.MoE(w13, w2, top_k=9)
    with pytest.raises(moekit.Error, match=r"routing method|valid"):
        moekit.MoE(w13, w2, top_k=2, routing="softmax_please")
    with pytest.raises(moekit.Error, match=r"activation"):
        moekit.MoE(w13, w2, top_k=2, activation="tanh")
    with pytest.raises(TypeError, match=r"w13_scale: expected an array, got None"):
        moekit.MoE(np.zeros((E, 2 * I, H // 2), np.uint8), np.zeros((E, H, I // 2), np.uint8),
                   top_k=2, scheme="nvfp4")
    with pytest.raises(ValueError, match=r"w13 dtype: expected uint8 \(packed fp4"):
        moekit.MoE(w13, w2, top_k=2, scheme="nvfp4")
    with pytest.raises(ValueError, match=r"transposed: expected False for quantized"):
        moekit.MoE(np.zeros((E, H, 2 * I), np.uint8), np.zeros((E, I, H // 2), np.uint8),
                   top_k=2, scheme="mxfp4", transposed=True)
    with pytest.raises(TypeError, match=r"correction_bias: expected an array"):
        moekit.MoE(w13, w2, top_k=2, routing="deepseek_v3")
    with pytest.raises(ValueError, match=r"correction_bias: expected None"):
        moekit.MoE(w13, w2, top_k=2, correction_bias=np.zeros(E, np.float32))
    with pytest.raises(ValueError, match=r"w13_bias: expected an array \(the other GEMM"):
        moekit.MoE(w13, w2, top_k=2, w2_bias=np.zeros((E, H), np.float32))
    with pytest.raises(ValueError, match=r"w13_layout"):
        moekit.MoE(w13, w2, top_k=2, w13_layout="gate_then_up")
    with pytest.raises(ValueError, match=r"quantize: expected None when the weights are already"):
        q13, q2 = moekit.quantize(w13, "mxfp4"), moekit.quantize(w2, "mxfp4")
        moekit.MoE(q13.values, q2.values, top_k=2, scheme="mxfp4", w13_scale=q13.scales,
                   w2_scale=q2.scales, quantize="nvfp4")


def test_alignment_for_the_scheme():
    rng = np.random.default_rng(0)
    w13 = rng.standard_normal((E, 2 * 24, 40)).astype(np.float32)  # H = 40, I = 24
    w2 = rng.standard_normal((E, 40, 24)).astype(np.float32)
    with pytest.raises(moekit.Error, match=r"K\): expected a multiple of 16 for nvfp4, got 40"):
        moekit.MoE(w13, w2, top_k=2, quantize="nvfp4")


def test_call_errors():
    moe, _, _ = _layer()
    logits = np.zeros((3, E), np.float32)
    with pytest.raises(ValueError, match=r"x dtype: expected bfloat16 \(numpy: uint16 bfloat16 bits\) or float32, got int32"):
        moe(np.ones((3, H), np.int32), logits)
    moe(_x(), logits)  # prepares for float32 on the CPU
    with pytest.raises(ValueError, match=r"x dtype: expected float32, got uint16"):
        moe(moekit.bf16_bits(_x()), logits)
    with pytest.raises(ValueError, match=r"x shape: expected \(3, 64\), got \(3, 65\)"):
        moe(np.ones((3, H + 1), np.float32), logits)
    with pytest.raises(ValueError, match=r"x shape: expected a 2-D array, got \(64,\)"):
        moe(np.ones(H, np.float32), logits)
    with pytest.raises(ValueError, match=r"router_logits shape: expected \(3, 4\), got \(3, 5\)"):
        moe(_x(), np.zeros((3, E + 1), np.float32))
    with pytest.raises(ValueError, match=r"router_logits shape: expected \(3, 4\), got \(2, 4\)"):
        moe(_x(), np.zeros((2, E), np.float32))
    with pytest.raises(ValueError, match=r"router_logits dtype: expected float32 or bfloat16, got int32"):
        moe(_x(), np.zeros((3, E), np.int32))
    with pytest.raises(ValueError, match=r"x layout: expected a contiguous"):
        moe(np.ones((3, 2 * H), np.float32)[:, ::2], logits)
    ids = np.zeros((3, 2), np.int32)
    w = np.ones((3, 2), np.float32)
    with pytest.raises(ValueError, match=r"topk_ids\[1, 0\]: expected an expert id in \[0, 4\), got 4"):
        bad = ids.copy()
        bad[1, 0] = 4
        moe(_x(), bad, w)
    with pytest.raises(ValueError, match=r"topk_ids\[2, 1\]: expected an expert id in \[0, 4\), got -1"):
        bad = ids.copy()
        bad[2, 1] = -1
        moe(_x(), bad, w)
    with pytest.raises(ValueError, match=r"topk_ids shape: expected \(3, 2\), got \(3, 3\)"):
        moe(_x(), np.zeros((3, 3), np.int32), np.ones((3, 3), np.float32))
    with pytest.raises(ValueError, match=r"topk_weights dtype: expected float32, got int32"):
        moe(_x(), ids, np.ones((3, 2), np.int32))
    with pytest.raises(TypeError, match=r"router_logits, or topk_ids and topk_weights"):
        moe(_x())
    with pytest.raises(TypeError, match=r"expected an array"):
        moe(_x(), "logits")


def test_backend_errors():
    moe, _, _ = _layer(backend="cuda_bf16_grouped")
    with pytest.raises(ValueError, match=r"backend: expected a backend for cpu arrays .* 'cuda_bf16_grouped', which runs on cuda"):
        moe(_x(), np.zeros((3, E), np.float32))
    moe, _, _ = _layer(backend="no_such_backend")
    with pytest.raises(moekit.Error, match=r"backend override 'no_such_backend' .* is not a known backend; valid:"):
        moe(_x(), np.zeros((3, E), np.float32))
    moe, _, _ = _layer()
    with pytest.raises(ValueError, match=r"device: expected 'cpu', 'cuda' or 'cuda:N'"):
        moe.prepare("tpu:0")
    if not moekit.info()["device_sm"]:
        with pytest.raises(ValueError, match=r"x device: expected cpu \(no CUDA device"):
            moe.prepare("cuda")
    with pytest.raises(ValueError, match=r"dtype: expected bfloat16 on CUDA|x device: expected cpu"):
        moe.prepare("cuda", dtype="float32")
    with pytest.raises(ValueError, match=r"max_tokens: expected >= 1, got 0"):
        moe.prepare("cpu", max_tokens=0)


def test_cpp_errors_surface_with_their_message(tmp_path):
    with pytest.raises(moekit.Error, match=r"config.json"):
        moekit.load_layer(tmp_path / "nowhere", 0)
    (tmp_path / "config.json").write_text('{"model_type": "llama", "num_hidden_layers": 1}')
    with pytest.raises(moekit.Error, match=r"num_local_experts \| num_experts \| n_routed_experts"):
        moekit.load_layer(tmp_path, 0)
    (tmp_path / "config.json").write_text(
        '{"model_type": "mixtral", "num_hidden_layers": 1, "num_local_experts": 4, '
        '"num_experts_per_tok": 2, "hidden_size": 64, "intermediate_size": 32}')
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    with pytest.raises(moekit.Error, match=r"model.safetensors"):
        moekit.load_layer(tmp_path, 0)
    with pytest.raises(ValueError, match=r"input_scales: expected 'equal', 'max' or 'ignore'"):
        moekit.load_layer(tmp_path, 0, input_scales="min")


def test_fused_experts_errors():
    rng = np.random.default_rng(0)
    w13 = rng.standard_normal((E, 2 * I, H)).astype(np.float32)
    w2 = rng.standard_normal((E, H, I)).astype(np.float32)
    with pytest.raises(ValueError, match=r"topk_ids shape: expected \(M, top_k\)"):
        moekit.fused_experts(_x(), w13, w2, np.ones(3, np.float32), np.zeros(3, np.int32))
    with pytest.raises(ValueError, match=r"topk_ids\[0, 0\]: expected an expert id in \[0, 4\), got 7"):
        moekit.fused_experts(_x(), w13, w2, np.ones((3, 2), np.float32), np.full((3, 2), 7, np.int32))
