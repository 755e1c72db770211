"""moekit as a drop-in for the sparse MoE blocks of Hugging Face models.

Builds a small Qwen3-MoE (and a Mixtral) with ``transformers`` from a config (random weights, no
download), replaces every sparse MoE block by ``moekit.torch.MoEBlock`` and compares against the
model's own forward:

- bf16: the same weights; logits relative error and greedy tokens (equal, or diverging only where
  the reference's top-2 logits are a near tie).
- NVFP4 / MXFP4: the expert weights quantized with ``moekit.quantize``; compared against (a) the
  bf16 model (the quantization error, reported) and (b) the same model with its experts replaced
  by the dequantized 4-bit weights (``moekit.dequantize``), which must agree like bf16 does.

It prints the relative errors and the speed-up of the MoE blocks (transformers' expert loop vs
moekit) at decode (1 token) and prefill sizes. Runs on CUDA when available, else on the CPU
(moekit's reference backend; slow, for small sizes).

    python examples/python/hf_qwen3_moe.py                 # both models, all schemes
    python examples/python/hf_qwen3_moe.py --model mixtral --schemes bf16,nvfp4 --json out.json
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time

import torch
import transformers

import moekit
import moekit.torch as mt

# Bounds the checks use (stated in docs/python.md):
BF16_LOGITS_BOUND = 2e-2  # moekit (fp32 accumulation, one bf16 rounding) vs transformers' bf16 loop
NEAR_TIE = 2e-2           # a greedy divergence is accepted only where the reference's top-2 logits
                          # differ by less than this fraction of the logits' standard deviation
FP4_VS_DEQUANT_BOUND = 2e-2  # 4-bit moekit vs transformers on the dequantized 4-bit weights
FP4_VS_BF16_BOUND = 0.35     # the 4-bit quantization error itself (reported; a loose sanity bound)


def make_model(kind: str, device: str, hidden: int, inter: int, experts: int, top_k: int,
               layers: int, vocab: int, seed: int = 0):
    common = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=8,
                  num_key_value_heads=4, vocab_size=vocab, max_position_embeddings=512,
                  num_experts_per_tok=top_k, initializer_range=0.05, tie_word_embeddings=False)
    if kind == "qwen3_moe":
        cfg = transformers.Qwen3MoeConfig(moe_intermediate_size=inter, intermediate_size=4 * inter,
                                          num_experts=experts, head_dim=hidden // 8,
                                          norm_topk_prob=True, **common)
    elif kind == "mixtral":
        cfg = transformers.MixtralConfig(intermediate_size=inter, num_local_experts=experts,
                                         head_dim=hidden // 8, **common)
    else:
        raise ValueError(f"--model: expected qwen3_moe or mixtral, got {kind}")
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    return model.to(device=device, dtype=torch.bfloat16).eval()


def sparse_blocks(model):
    return [(n, m) for n, m in model.named_modules() if type(m).__name__.endswith("SparseMoeBlock")]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def greedy(model, prompt: torch.Tensor, steps: int):
    """Greedy tokens and, per step, the reference logits (full forward per step: no cache)."""
    ids = prompt
    tokens, logits = [], []
    with torch.no_grad():
        for _ in range(steps):
            last = model(ids).logits[:, -1].float()
            nxt = last.argmax(-1, keepdim=True)
            tokens.append(int(nxt))
            logits.append(last[0])
            ids = torch.cat([ids, nxt], dim=1)
    return tokens, logits


def compare_greedy(ref_tokens, ref_logits, got_tokens) -> dict:
    for step, (a, b) in enumerate(zip(ref_tokens, got_tokens)):
        if a != b:
            top2 = ref_logits[step].topk(2).values
            margin = float(top2[0] - top2[1]) / float(ref_logits[step].std())
            return {"equal": False, "first_divergence": step, "reference_margin": margin,
                    "near_tie": margin < NEAR_TIE}
    return {"equal": True}


def dequantized_copy(model, scheme: str):
    """A copy of the model whose expert weights are moekit's 4-bit weights, dequantized."""
    m = copy.deepcopy(model)
    with torch.no_grad():
        for _, block in sparse_blocks(m):
            for name in ("gate_up_proj", "down_proj"):
                w = getattr(block.experts, name)
                q = moekit.quantize(w.detach(), scheme)
                w.copy_(moekit.dequantize(q, shape=tuple(w.shape)).to(w.dtype))
    return m


def time_blocks(blocks_hf, blocks_mk, hidden: int, tokens: int, device: str, reps: int = 20):
    """Median time of all MoE blocks of the model (one input each), transformers vs moekit."""
    x = torch.randn(1, tokens, hidden, device=device, dtype=torch.bfloat16)

    def run(blocks):
        for b in blocks:
            b(x)

    def timed(blocks):
        with torch.no_grad():
            for _ in range(3):
                run(blocks)
            out = []
            for _ in range(reps):
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record()
                    run(blocks)
                    e.record()
                    e.synchronize()
                    out.append(s.elapsed_time(e) * 1e3)
                else:
                    t0 = time.perf_counter()
                    run(blocks)
                    out.append((time.perf_counter() - t0) * 1e6)
            return statistics.median(out)

    hf, mk = timed(blocks_hf), timed(blocks_mk)
    return {"tokens": tokens, "transformers_us": hf, "moekit_us": mk, "speedup": hf / mk}


def run_model(kind: str, schemes=("bf16", "nvfp4", "mxfp4"), device=None, hidden=1024, inter=512,
              experts=32, top_k=4, layers=4, vocab=2048, prompt_len=24, steps=16,
              timing_tokens=(1, 256), verbose=True) -> dict:
    device = device or ("cuda:0" if torch.cuda.is_available() else "cpu")
    model = make_model(kind, device, hidden, inter, experts, top_k, layers, vocab)
    blocks_hf = [b for _, b in sparse_blocks(model)]
    prompt = torch.randint(0, vocab, (1, prompt_len), device=device,
                           generator=torch.Generator(device=device).manual_seed(1))
    with torch.no_grad():
        ref_logits = model(prompt).logits.float()
    ref_tokens, ref_step_logits = greedy(model, prompt, steps)
    results = {"model": kind, "device": device, "moekit": moekit.info()["version"],
               "shape": dict(hidden=hidden, intermediate=inter, experts=experts, top_k=top_k,
                             layers=layers, vocab=vocab), "schemes": {}}
    for scheme in schemes:
        mk = copy.deepcopy(model)
        replaced = mt.replace_moe_blocks(mk, scheme=scheme)
        blocks_mk = [mk.get_submodule(n) for n in replaced]
        r = {"blocks_replaced": len(replaced), "backend": blocks_mk[0].moe.backend}
        with torch.no_grad():
            got = mk(prompt).logits.float()
        if scheme == "bf16":
            r["logits_rel_error"] = rel(got, ref_logits)
            r["logits_bound"] = BF16_LOGITS_BOUND
            toks, _ = greedy(mk, prompt, steps)
            r["greedy"] = compare_greedy(ref_tokens, ref_step_logits, toks)
            r["pass"] = r["logits_rel_error"] < BF16_LOGITS_BOUND and (
                r["greedy"]["equal"] or r["greedy"]["near_tie"])
        else:
            deq = dequantized_copy(model, scheme)
            with torch.no_grad():
                want = deq(prompt).logits.float()
            r["logits_rel_error_vs_bf16"] = rel(got, ref_logits)
            r["logits_rel_error_vs_dequantized"] = rel(got, want)
            r["bounds"] = {"vs_dequantized": FP4_VS_DEQUANT_BOUND, "vs_bf16": FP4_VS_BF16_BOUND}
            d_tokens, d_logits = greedy(deq, prompt, steps)
            toks, _ = greedy(mk, prompt, steps)
            r["greedy_vs_dequantized"] = compare_greedy(d_tokens, d_logits, toks)
            r["pass"] = (r["logits_rel_error_vs_dequantized"] < FP4_VS_DEQUANT_BOUND
                         and r["logits_rel_error_vs_bf16"] < FP4_VS_BF16_BOUND
                         and (r["greedy_vs_dequantized"]["equal"]
                              or r["greedy_vs_dequantized"]["near_tie"]))
        r["timing"] = [time_blocks(blocks_hf, blocks_mk, hidden, t, device) for t in timing_tokens]
        results["schemes"][scheme] = r
        if verbose:
            err = r.get("logits_rel_error", r.get("logits_rel_error_vs_dequantized"))
            extra = (f" (vs bf16 model {r['logits_rel_error_vs_bf16']:.3e})"
                     if scheme != "bf16" else "")
            g = r.get("greedy", r.get("greedy_vs_dequantized"))
            print(f"{kind} {scheme:6s} backend {r['backend']:20s} logits rel err {err:.3e}{extra} "
                  f"greedy {'equal' if g['equal'] else g} {'PASS' if r['pass'] else 'FAIL'}")
            for t in r["timing"]:
                print(f"    MoE blocks, {t['tokens']:4d} tokens: transformers {t['transformers_us']:9.1f} us"
                      f"  moekit {t['moekit_us']:9.1f} us  speed-up {t['speedup']:.1f}x")
        del mk
    return results


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen3_moe,mixtral")
    p.add_argument("--schemes", default="bf16,nvfp4,mxfp4")
    p.add_argument("--device", default=None)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--intermediate", type=int, default=512)
    p.add_argument("--experts", type=int, default=32)
    p.add_argument("--top-k", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--json", default=None, help="write the results here")
    a = p.parse_args(argv)
    all_results = []
    ok = True
    for kind in a.model.split(","):
        r = run_model(kind, tuple(a.schemes.split(",")), a.device, a.hidden, a.intermediate,
                      a.experts, a.top_k, a.layers, steps=a.steps)
        ok &= all(s["pass"] for s in r["schemes"].values())
        all_results.append(r)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(all_results, f, indent=2)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
