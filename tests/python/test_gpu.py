"""GPU tests (skipped without torch + a CUDA device + a CUDA build of moekit): torch CUDA tensors in
and out with no host copy, quantize byte-identical across backends, the layer bitwise equal to the
C++ API (`moekit run` replay) on the same inputs, current-stream semantics, CUDA graph capture,
torch.compile(fullgraph=True) of a module using MoEBlock, device mismatches, cupy / jax interop.

Run on the GPU machine by bench/run_device_python.sh (MOEKIT_CLI names the `moekit` binary)."""

import os
import shutil
import subprocess

import numpy as np
import pytest

import moekit
import numpy_reference as ref
from conftest import has_cuda

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_cuda(), reason="needs torch with CUDA and a CUDA build of moekit")]

if has_cuda():
    import torch

    import moekit.torch as mt

DEV = "cuda:0"


def _weights(e, h, i, seed=0, dtype=None):
    g = torch.Generator().manual_seed(seed)
    w13 = (torch.randn(e, 2 * i, h, generator=g) / h**0.5).to(dtype or torch.bfloat16)
    w2 = (torch.randn(e, h, i, generator=g) / i**0.5).to(dtype or torch.bfloat16)
    return w13, w2


def _inputs(m, h, e, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, h, generator=g).to(torch.bfloat16).to(DEV)
    logits = torch.randn(m, e, generator=g).to(DEV)
    return x, logits


# Layers per scheme: (scheme, quantize argument, E, H, I, top_k).
LAYERS = [
    ("bf16", None, 8, 256, 512, 2),
    ("nvfp4", "nvfp4", 8, 256, 512, 2),
    ("mxfp4", "mxfp4", 8, 256, 512, 2),
    ("fp8_block", "fp8_block", 8, 256, 512, 2),
]


def _layer(scheme, quantize, e, h, i, k, **kw):
    w13, w2 = _weights(e, h, i)
    return moekit.MoE(w13.to(DEV), w2.to(DEV), top_k=k, quantize=quantize,
                      routing=kw.pop("routing", "renormalize_naive"), **kw)


@pytest.mark.parametrize("scheme,layout,rule", [
    (s, l, r) for s in moekit.SCHEMES for l in moekit.LAYOUTS for r in moekit.RULES
    if (s in ("mxfp8", "nvfp4", "nvfp4_token", "mxfp4") or l == "linear") and (s.startswith("mx") or r == "rceil")])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_quantize_cuda_byte_identical_to_cpu(scheme, layout, rule, dtype):
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(2, 129, 160, generator=g) * 3).to(getattr(torch, dtype))
    gpu = moekit.quantize(x.to(DEV), scheme, layout=layout, rule=rule)
    cpu = moekit.quantize(x, scheme, layout=layout, rule=rule, backend="cpu")
    for a, b in zip(gpu[:3], cpu[:3]):
        assert (a is None) == (b is None)
        if a is None:
            continue
        assert a.is_cuda and a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a.cpu().contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@pytest.mark.parametrize("scheme,quantize,e,h,i,k", LAYERS)
def test_layer_torch_cuda_in_out_against_reference(scheme, quantize, e, h, i, k):
    moe = _layer(scheme, quantize, e, h, i, k)
    x, logits = _inputs(37, h, e)
    y = moe(x, logits)
    assert y.is_cuda and y.dtype == torch.bfloat16 and y.shape == (37, h)
    assert moe.backend.startswith("cuda_"), moe.explain()
    w = moe.weights()
    s = scheme
    w13 = ref.dequantize_weights(w["w13"], w.get("w13_scale"), w.get("w13_global_scale"), s)
    w2 = ref.dequantize_weights(w["w2"], w.get("w2_scale"), w.get("w2_global_scale"), s)
    ids, wts = ref.route(logits.cpu().numpy(), k, "renormalize_naive")
    want = ref.moe(x.float().cpu().numpy(), ids, wts, w13, w2)
    bound = 5e-2 if scheme == "fp8_block" else 1e-2  # run_job.cpp's CUDA bounds
    assert ref.rel_l2(y.float().cpu().numpy(), want) < bound


def test_no_host_copy_and_zero_copy_views():
    moe = _layer("bf16", None, 8, 256, 512, 2)
    x, logits = _inputs(16, 256, 8)
    y_full = moe(x, logits)
    # A row slice is a zero-copy view at an offset: moekit must read exactly those rows.
    y_view = moe(x[4:9], logits[4:9])
    assert torch.equal(y_view, moe(x[4:9].clone(), logits[4:9].clone()))
    assert torch.equal(y_view, y_full[4:9])
    # No device<->host copy or synchronization inside a call (profiled).
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        y = moe(x, logits)
    torch.cuda.synchronize()
    forbidden = ("Memcpy DtoH", "Memcpy HtoD", "cudaMemcpy", "cudaStreamSynchronize",
                 "cudaDeviceSynchronize", "cudaMalloc")
    bad = [ev.name for ev in prof.events() if any(ev.name.startswith(f) for f in forbidden)]
    assert not bad, bad
    assert torch.equal(y, y_full)
    # The output is torch's allocation (caching allocator) and stays alive independently.
    ptr = y.data_ptr()
    del moe
    assert y.data_ptr() == ptr and torch.isfinite(y.float()).all()


def test_side_stream_semantics():
    moe = _layer("bf16", None, 8, 256, 512, 2)
    x, logits = _inputs(64, 256, 8)
    want = moe(x, logits)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    x2 = torch.empty_like(x)
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # delay the side stream: x2 is written late
        x2.copy_(x)
        y = moe(x2, logits)  # must run on s, after the copy
    s.synchronize()
    assert torch.equal(y, want)


@pytest.mark.parametrize("scheme,quantize,e,h,i,k", LAYERS)
def test_cuda_graph_capture(scheme, quantize, e, h, i, k):
    moe = _layer(scheme, quantize, e, h, i, k)
    x, logits = _inputs(4, h, e)
    eager = moe(x, logits)  # prepares (allocation, weight upload) outside the capture
    static_x, static_l = x.clone(), logits.clone()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        moe(static_x, static_l)  # warm-up on the capture stream
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        static_y = moe(static_x, static_l)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_y, eager)
    x2, l2 = _inputs(4, h, e, seed=7)
    static_x.copy_(x2)
    static_l.copy_(l2)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_y, moe(x2, l2))


def test_torch_compile_fullgraph_moe_block():
    moe = _layer("bf16", None, 8, 256, 512, 2)
    router = (torch.randn(8, 256) / 16).to(torch.bfloat16).to(DEV)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = mt.MoEBlock(moe, router)
            self.norm = torch.nn.LayerNorm(256).to(DEV).to(torch.bfloat16)

        def forward(self, h):
            return self.block(self.norm(h))

    net = Net()
    h = torch.randn(2, 5, 256, device=DEV, dtype=torch.bfloat16)
    eager = net(h)
    compiled = torch.compile(net, fullgraph=True)
    out = compiled(h)
    assert torch.allclose(out.float(), eager.float(), rtol=2e-2, atol=2e-2)
    # The MoE part itself is bitwise equal when its input is.
    block_c = torch.compile(net.block, fullgraph=True)
    assert torch.equal(block_c(h), net.block(h))
    # cudagraph trees (mode="reduce-overhead") replay it too.
    block_g = torch.compile(net.block, fullgraph=True, mode="reduce-overhead")
    for _ in range(3):
        got = block_g(h)
    assert torch.equal(got, net.block(h))


def test_fused_experts_on_cuda_matches_moe():
    w13, w2 = _weights(8, 256, 512)
    w13, w2 = w13.to(DEV), w2.to(DEV)
    x, logits = _inputs(9, 256, 8)
    top = torch.topk(torch.softmax(logits, -1), 2)
    ids, wts = top.indices, top.values / top.values.sum(-1, keepdim=True)
    y = moekit.fused_experts(x, w13, w2, wts, ids)
    moe = moekit.MoE(w13, w2, top_k=2)
    assert torch.equal(y, moe(x, ids.to(torch.int32), wts))
    assert torch.equal(torch.compile(lambda a: moekit.fused_experts(a, w13, w2, wts, ids), fullgraph=True)(x), y)


def test_device_mismatches_are_value_errors():
    moe = _layer("bf16", None, 8, 256, 512, 2)
    x, logits = _inputs(3, 256, 8)
    moe(x, logits)
    with pytest.raises(ValueError, match=r"router_logits device: expected cuda:0, got cpu"):
        moe(x, logits.cpu())
    with pytest.raises(ValueError, match=r"x device: expected cuda:0, got cpu"):
        moe(x.cpu(), logits.cpu())
    with pytest.raises(ValueError, match=r"x dtype: expected bfloat16, got float32"):
        moe(x.float(), logits)
    cpu_only = _layer("bf16", None, 8, 256, 512, 2, backend="cpu_reference")
    with pytest.raises(ValueError, match=r"backend: expected a backend for cuda:0 arrays"):
        cpu_only(x, logits)
    with pytest.raises(ValueError, match=r"x device: expected cuda:0 \(backend 'cuda'"):
        moekit.quantize(x.cpu(), "nvfp4", backend="cuda")
    with pytest.raises(ValueError, match=r"x device: expected cpu \(backend 'cpu'"):
        moekit.quantize(x, "nvfp4", backend="cpu")


def test_w4a8_activation_quant():
    moe = _layer("mxfp4", "mxfp4", 8, 256, 512, 2, activation_quant="fp8_token")
    x, logits = _inputs(16, 256, 8)
    y = moe(x, logits)
    assert moe.backend == "cuda_w4a8_grouped", moe.explain()
    assert torch.isfinite(y.float()).all()


def test_cupy_in_cupy_out():
    cupy = pytest.importorskip("cupy")
    moe = _layer("bf16", None, 8, 256, 512, 2)
    x, logits = _inputs(5, 256, 8)
    want = moe(x, logits)
    q = moekit.quantize(cupy.asarray(x.float()), "nvfp4")
    assert isinstance(q.values, cupy.ndarray)
    ref_q = moekit.quantize(x.float(), "nvfp4")
    np.testing.assert_array_equal(cupy.asnumpy(q.values), ref_q.values.cpu().numpy())
    xb = cupy.asarray(x.view(torch.int16)).view(cupy.uint16)  # bf16 bits
    y = moe(xb, cupy.asarray(logits))
    assert isinstance(y, cupy.ndarray) and y.dtype == cupy.uint16
    np.testing.assert_array_equal(cupy.asnumpy(y), want.view(torch.int16).cpu().numpy().view(np.uint16))


def test_jax_in_jax_out():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("jax sees no GPU")
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    xj = jax.device_put(jnp.asarray(x), jax.devices("gpu")[0])
    q = moekit.quantize(xj, "mxfp4")
    assert "jax" in type(q.values).__module__ or "jaxlib" in type(q.values).__module__
    np.testing.assert_array_equal(np.asarray(q.values), moekit.quantize(x, "mxfp4").values)


# -- bitwise equal to the C++ API: `moekit run --checkpoint ... --input ... --output ...` ----------

def _cli():
    path = os.environ.get("MOEKIT_CLI") or shutil.which("moekit")
    if not path or not os.path.exists(path):
        pytest.skip("MOEKIT_CLI (the moekit binary) not set")
    return path


def _write_checkpoint(d, e, h, i, k, seed=0):
    from safetensors.torch import save_file
    import json

    w13, w2 = _weights(e, h, i, seed)
    g = torch.Generator().manual_seed(seed + 1)
    t = {"model.layers.0.mlp.gate.weight": (torch.randn(e, h, generator=g) / 16).to(torch.bfloat16),
         "model.layers.0.mlp.experts.gate_up_proj": w13.contiguous(),
         "model.layers.0.mlp.experts.down_proj": w2.contiguous()}
    os.makedirs(d, exist_ok=True)
    save_file(t, os.path.join(d, "model.safetensors"))
    cfg = dict(model_type="qwen3_moe", num_hidden_layers=1, num_experts=e, num_experts_per_tok=k,
               hidden_size=h, moe_intermediate_size=i, norm_topk_prob=True, hidden_act="silu")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)


@pytest.mark.parametrize("fmt", ["bf16", "modelopt_nvfp4", "mxfp4", "fp8_block"])
def test_bitwise_equal_to_the_cpp_tool(fmt, tmp_path):
    from safetensors.torch import load_file, save_file

    cli = _cli()
    e, h, i, k, m = 8, 256, 512, 2, 33
    src = tmp_path / "bf16"
    _write_checkpoint(src, e, h, i, k)
    ck = src
    if fmt != "bf16":
        ck = tmp_path / fmt
        subprocess.run([cli, "quantize", str(src), str(ck), "--format", fmt], check=True)
    moe = moekit.load_layer(ck, 0)
    x, logits = _inputs(m, h, e)
    save_file({"hidden_states": x.cpu(), "router_logits": logits.cpu()}, str(tmp_path / "in.safetensors"))
    moe.prepare(DEV)
    out = tmp_path / "out.safetensors"
    # fp8_block runs with fp8 1x128 activations: `moekit run --mode emulate` (w4a16 elsewhere).
    mode = ["--mode", "emulate"] if fmt == "fp8_block" else []
    run = subprocess.run([cli, "run", "--checkpoint", str(ck), "--layer", "0", "--input",
                          str(tmp_path / "in.safetensors"), "--output", str(out), "--backend",
                          moe.backend] + mode, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    cpp = load_file(str(out))["output"]
    y = moe(x, logits)
    assert torch.equal(y.float().cpu(), cpp.float()), (fmt, moe.backend)
