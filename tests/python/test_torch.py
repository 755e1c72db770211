"""The torch integration on the CPU (runs wherever torch is installed; skipped otherwise): torch
tensors in and out, the torch.library ops and their fake implementations, MoEBlock, and
torch.compile(fullgraph=True) through moekit calls."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import moekit  # noqa: E402
import moekit.torch as mt  # noqa: E402
import numpy_reference as ref  # noqa: E402


def _weights(e=4, h=64, i=32, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    w13 = (torch.randn(e, 2 * i, h, generator=g) / h**0.5).to(dtype)
    w2 = (torch.randn(e, h, i, generator=g) / i**0.5).to(dtype)
    return w13, w2


def test_torch_in_torch_out_and_matches_numpy():
    w13, w2 = _weights()
    moe = moekit.MoE(w13, w2, top_k=2, routing="renormalize_naive")
    x = torch.randn(5, 64)
    logits = torch.randn(5, 4)
    y = moe(x, logits)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.shape == (5, 64)
    moe_np = moekit.MoE(w13.float().numpy(), w2.float().numpy(), top_k=2, routing="renormalize_naive")
    np.testing.assert_array_equal(y.numpy(), moe_np(x.numpy(), logits.numpy()))
    xb = x.to(torch.bfloat16)
    moe_b = moekit.MoE(w13, w2, top_k=2, routing="renormalize_naive")
    yb = moe_b(xb, logits)
    assert yb.dtype == torch.bfloat16
    ids, wts = ref.route(logits.numpy(), 2, "renormalize_naive")
    want = ref.moe(xb.float().numpy(), ids, wts, w13.float().numpy().astype(np.float64),
                   w2.float().numpy().astype(np.float64))
    assert ref.rel_l2(yb.float().numpy(), want) < 1e-2


@pytest.mark.parametrize("scheme", moekit.SCHEMES)
def test_quantize_torch_dtypes_and_bytes(scheme):
    x = torch.randn(3, 128)
    q = moekit.quantize(x, scheme)
    qn = moekit.quantize(x.numpy(), scheme)
    spec = moekit.quant_shapes(tuple(x.shape), scheme)
    want_dtype = {"bfloat16": torch.bfloat16, "float8_e4m3fn": torch.float8_e4m3fn,
                  "fp4x2": torch.uint8, "float8_e8m0fnu": torch.uint8, "float32": torch.float32}
    for got, np_got, s in zip(q[:3], qn[:3], spec):
        if s is None:
            assert got is None
            continue
        assert got.dtype == want_dtype[s.dtype] and tuple(got.shape) == tuple(s.shape)
        np.testing.assert_array_equal(got.contiguous().view(torch.uint8).numpy().reshape(-1),
                                      np.ascontiguousarray(np_got).view(np.uint8).reshape(-1))
    # fp8 values and scales go back in as torch float8 (MoE from quantized torch tensors).


def test_quantized_torch_weights_build_a_layer():
    w13, w2 = _weights(h=128, i=128)
    q13, q2 = moekit.quantize(w13, "fp8_block"), moekit.quantize(w2, "fp8_block")
    assert q13.values.dtype == torch.float8_e4m3fn
    moe = moekit.MoE(q13.values, q2.values, top_k=2, scheme="fp8_block", w13_scale=q13.scales,
                     w2_scale=q2.scales)
    ref_moe = moekit.MoE(w13, w2, top_k=2, quantize="fp8_block")
    x, logits = torch.randn(3, 128), torch.randn(3, 4)
    assert torch.equal(moe(x, logits), ref_moe(x, logits))


def test_ops_registered_with_fake_impls():
    for name in ("moe", "moe_routed", "fused_experts", "quantize"):
        assert hasattr(torch.ops.moekit, name)
    w13, w2 = _weights()
    moe = moekit.MoE(w13, w2, top_k=2)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(7, 64, dtype=torch.bfloat16)
        y = torch.ops.moekit.moe(x, torch.empty(7, 4), moe.handle)
        assert y.shape == (7, 64) and y.dtype == torch.bfloat16
        v, s, g = torch.ops.moekit.quantize(torch.empty(5, 64), "nvfp4", "swizzled_128x4", "rceil", None)
        assert v.shape == (5, 32) and s.shape == (128, 4) and s.dtype == torch.float8_e4m3fn and g.shape == (1,)
    torch.library.opcheck(torch.ops.moekit.moe, (torch.randn(3, 64, dtype=torch.bfloat16), torch.randn(3, 4), moe.handle))


def test_moe_block_and_compile_fullgraph():
    w13, w2 = _weights()
    moe = moekit.MoE(w13, w2, top_k=2, routing="renormalize_naive")
    block = mt.MoEBlock(moe, torch.randn(4, 64, dtype=torch.bfloat16))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = block

        def forward(self, h):
            return self.block(h) * 2 + 1

    net = Net()
    h = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    eager = net(h)
    compiled = torch.compile(net, fullgraph=True)
    assert torch.equal(compiled(h), eager)
    h2 = torch.randn(2, 5, 64, dtype=torch.bfloat16)  # another token count
    assert torch.equal(compiled(h2), net(h2))


def test_compile_quantize_and_fused_experts():
    w13, w2 = _weights()
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    logits = torch.randn(4, 4)
    top = torch.topk(logits, 2)
    ids, wts = top.indices, torch.softmax(top.values, -1)

    def f(x, ids, wts):
        q = moekit.quantize(x, "mxfp4", layout="swizzled_128x4")
        return moekit.fused_experts(x, w13, w2, wts, ids), q.values, q.scales

    eager = f(x, ids, wts)
    compiled = torch.compile(f, fullgraph=True)(x, ids, wts)
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)


def test_hf_style_block_replacement():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Qwen3MoeConfig(hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=16, num_experts=4, num_experts_per_tok=2, vocab_size=128)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    ids = torch.randint(0, 128, (1, 6))
    with torch.no_grad():
        want = model(ids).logits
        replaced = mt.replace_moe_blocks(model)
        assert len(replaced) == 2
        got = model(ids).logits
    # A float32 model: moekit holds bf16 weights (rounded once), fp32 accumulation.
    assert ref.rel_l2(got.numpy(), want.numpy()) < 1e-3
