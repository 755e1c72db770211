"""Checkpoints as transformers writes them (issue 46, item 6): a small gpt-oss / Qwen3-MoE / Mixtral
built in transformers and saved with save_pretrained (the default, and the fused in-memory layout
with save_original_format=False) loads with moekit's C++ loaders into exactly the module's weights;
on the GPU, `moekit run --checkpoint DIR --layer 0 --input/--output` replays a captured layer input
and agrees with the transformers block (bf16 bound) and bitwise with moekit's Python API.

Needs torch + transformers (skipped otherwise); the replay part needs CUDA and MOEKIT_CLI."""

import os
import shutil
import subprocess

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import moekit  # noqa: E402
from conftest import has_cuda  # noqa: E402

SMALL = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=256, max_position_embeddings=128)


def make(kind):
    if kind == "qwen3_moe":
        cfg = transformers.Qwen3MoeConfig(moe_intermediate_size=64, intermediate_size=256,
                                          num_experts=8, num_experts_per_tok=2, head_dim=32, **SMALL)
    elif kind == "mixtral":
        cfg = transformers.MixtralConfig(intermediate_size=64, num_local_experts=8,
                                         num_experts_per_tok=2, head_dim=32, **SMALL)
    else:
        cfg = transformers.GptOssConfig(intermediate_size=64, num_local_experts=8,
                                        num_experts_per_tok=2, head_dim=32, **SMALL)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).eval()
    with torch.no_grad():  # give biases and routers some spread (from_config zero-fills a few)
        for n, p in model.named_parameters():
            if "router" in n or "bias" in n:
                p.normal_(0, 0.1)
    return model


def save(model, d, original_format):
    try:
        model.save_pretrained(d, save_original_format=original_format)
    except TypeError:  # transformers without the option: its one format
        if not original_format:
            pytest.skip("this transformers has no save_original_format")
        model.save_pretrained(d)


def module_weights(block):
    """The block's experts in moekit's convention (w13 = [gate; up] [E, 2I, H], w2 [E, H, I])."""
    ex = block.experts
    if hasattr(ex, "gate_up_proj_bias"):  # gpt-oss: [E, H, 2I] interleaved
        gu = ex.gate_up_proj.transpose(1, 2)
        w13 = torch.cat([gu[:, 0::2], gu[:, 1::2]], 1)
        b = ex.gate_up_proj_bias
        return w13, ex.down_proj.transpose(1, 2), torch.cat([b[:, 0::2], b[:, 1::2]], 1), ex.down_proj_bias
    return ex.gate_up_proj, ex.down_proj, None, None


def bits(t):
    return t.detach().cpu().contiguous().view(torch.int16).numpy().view("uint16")


@pytest.mark.parametrize("original_format", [True, False])
@pytest.mark.parametrize("kind", ["gpt_oss", "qwen3_moe", "mixtral"])
def test_load_what_transformers_saved(kind, original_format, tmp_path):
    model = make(kind)
    save(model, tmp_path, original_format)
    info = moekit.checkpoint_info(tmp_path)
    assert info["moe_layers"] == [0, 1] and info["format"] == "bf16"
    block = model.model.layers[1].mlp
    moe = moekit.load_layer(tmp_path, 1)
    w = moe.weights()
    w13, w2, b13, b2 = module_weights(block)
    assert (w["w13"] == bits(w13)).all() and (w["w2"] == bits(w2)).all()
    if b13 is not None:
        assert (w["w13_bias"] == b13.detach().float().numpy()).all() and (w["w2_bias"] == b2.detach().float().numpy()).all()
        assert moe.config["activation"] == "swiglu_oai"
    router = getattr(block, "router", None) or block.gate
    assert (w["router_weight"] == bits(router.weight)).all()


def _capture(model, ids, layer=0):
    """The MoE block input, its router logits (float32) and output for one forward."""
    block = model.model.layers[layer].mlp
    got = {}

    def hook(mod, args, out):
        x = args[0].reshape(-1, args[0].shape[-1])
        router = getattr(mod, "router", None) or mod.gate
        logits = torch.nn.functional.linear(x, router.weight, getattr(router, "bias", None))
        got.update(x=x.detach().clone(), logits=logits.float().detach().clone(),
                   y=(out[0] if isinstance(out, tuple) else out).reshape(x.shape).detach().clone())

    h = block.register_forward_hook(hook)
    with torch.no_grad():
        model(ids)
    h.remove()
    return got


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs CUDA")
@pytest.mark.parametrize("original_format", [True, False])
@pytest.mark.parametrize("kind", ["gpt_oss", "qwen3_moe", "mixtral"])
def test_replay_with_the_tool(kind, original_format, tmp_path):
    from safetensors.torch import load_file, save_file

    cli = os.environ.get("MOEKIT_CLI") or shutil.which("moekit")
    if not cli or not os.path.exists(cli):
        pytest.skip("MOEKIT_CLI (the moekit binary) not set")
    model = make(kind).to("cuda:0")
    d = tmp_path / "ck"
    save(model, d, original_format)
    ids = torch.randint(0, 256, (1, 40), device="cuda:0", generator=torch.Generator("cuda:0").manual_seed(2))
    cap = _capture(model, ids)
    save_file({"hidden_states": cap["x"].cpu(), "router_logits": cap["logits"].cpu()},
              str(tmp_path / "in.safetensors"))
    moe = moekit.load_layer(d, 0).prepare("cuda:0")
    run = subprocess.run([cli, "run", "--checkpoint", str(d), "--layer", "0", "--input",
                          str(tmp_path / "in.safetensors"), "--output", str(tmp_path / "out.safetensors"),
                          "--backend", moe.backend], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    out = load_file(str(tmp_path / "out.safetensors"))["output"]
    y = moe(cap["x"], cap["logits"])
    assert torch.equal(y.float().cpu(), out.float())  # the tool and the Python API: same bits
    ref = cap["y"].double().cpu()
    err = float((out.double() - ref).norm() / ref.norm())
    assert err < 3e-2, err  # vs transformers' bf16 expert loop (bf16 roundings in both)
