"""Python call overhead of moekit's MoE layer (a benchmark, not a test).

For each layer shape, at M tokens (default 1: decode), on the GPU:
  - C++ host time per call: FusedMoEKernel::apply_logits called in a C++ loop (Layer.bench_cpp),
  - Python host time per call of the public paths: ``moe(x, logits)`` (eager, direct),
    ``MoEBlock(x)`` (with its router F.linear), ``torch.ops.moekit.moe`` (the torch.library op,
    as torch.compile emits it) and ``moekit.fused_experts``;
    overhead = Python - C++ (target: < 10 us);
  - CUDA graph replay of one layer call captured through torch.cuda.graph from Python vs a graph
    captured from C++ (target: equal within noise).
Host time: batches of calls timed with perf_counter, the stream synchronized between batches
(outside the timed region, so the GPU never backs up the launch queue); median over batches.

    python bench/python_overhead.py --json bench/results/python_overhead_<date>.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch

import moekit
import moekit.torch as mt

# (name, E, H, I, top_k, scheme, routing): the decode shapes of docs/performance.md's presets.
SHAPES = [
    ("qwen3-30b-a3b", 128, 2048, 768, 8, "bf16", "renormalize_naive"),
    ("mixtral-8x7b", 8, 4096, 14336, 2, "bf16", "renormalize_naive"),
    ("gpt-oss-20b@mxfp4", 32, 2880, 2880, 4, "mxfp4", "renormalize"),
    ("qwen3-30b-a3b@nvfp4", 128, 2048, 768, 8, "nvfp4", "renormalize_naive"),
]


def host_us(fn, batches: int, batch: int) -> float:
    per = []
    for _ in range(batches):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        per.append((time.perf_counter() - t0) * 1e6 / batch)
    torch.cuda.synchronize()
    return statistics.median(per)


def graph_replay_us(fn, batches: int, batch: int) -> float:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(5):
        g.replay()
    per = []
    for _ in range(batches):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(batch):
            g.replay()
        e1.record()
        e1.synchronize()
        per.append(e0.elapsed_time(e1) * 1e3 / batch)
    return statistics.median(per)


def bench_shape(name, e, h, i, k, scheme, routing, tokens, batches, batch):
    dev = "cuda:0"
    g = torch.Generator(device=dev).manual_seed(0)
    w13 = (torch.randn(e, 2 * i, h, device=dev, generator=g) / h**0.5).to(torch.bfloat16)
    w2 = (torch.randn(e, h, i, device=dev, generator=g) / i**0.5).to(torch.bfloat16)
    moe = moekit.MoE(w13, w2, top_k=k, routing=routing, quantize=None if scheme == "bf16" else scheme)
    x = torch.randn(tokens, h, device=dev, generator=g).to(torch.bfloat16)
    router = (torch.randn(e, h, device=dev, generator=g) / h**0.5).to(torch.bfloat16)
    logits = torch.nn.functional.linear(x, router).float()
    moe.prepare(dev)
    out = torch.empty_like(x)
    fw = mt.framework()
    stream = fw.stream(x)
    cpp = moe._layer.bench_cpp(fw.export(x), fw.export(logits), fw.export(out), stream, batches, batch)
    block = mt.MoEBlock(moe, router)
    top = torch.topk(logits, k)
    ids, wts = top.indices.to(torch.int32), torch.softmax(top.values, -1)
    # fused_experts (bf16): weights prepared once on the first call (cached by weight identity).
    fx13, fx2 = (w13, w2) if scheme == "bf16" else (None, None)
    paths = {
        "moe(x, logits)": lambda: moe(x, logits),
        "MoEBlock(x)": lambda: block(x),
        "torch.ops.moekit.moe": lambda: torch.ops.moekit.moe(x, logits, moe.handle),
        "moe(x, ids, weights)": lambda: moe(x, ids, wts),
    }
    if fx13 is not None:
        moekit.fused_experts(x, fx13, fx2, wts, ids)
        paths["fused_experts"] = lambda: moekit.fused_experts(x, fx13, fx2, wts, ids)
    row = {"shape": name, "E": e, "H": h, "I": i, "top_k": k, "scheme": scheme, "tokens": tokens,
           "backend": moe.backend, "cpp_host_us": cpp["host_us_per_call"],
           "cpp_graph_replay_us": cpp.get("graph_replay_us"), "paths": {}}
    for pname, fn in paths.items():
        for _ in range(10):
            fn()
        t = host_us(fn, batches, batch)
        row["paths"][pname] = {"host_us": t, "overhead_us": t - cpp["host_us_per_call"]}
    row["python_graph_replay_us"] = graph_replay_us(lambda: moe(x, logits), batches, batch)
    row["graph_ratio_python_over_cpp"] = row["python_graph_replay_us"] / row["cpp_graph_replay_us"]
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=1)
    p.add_argument("--batches", type=int, default=30)
    p.add_argument("--batch", type=int, default=50)
    p.add_argument("--shapes", default=",".join(s[0] for s in SHAPES))
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("python_overhead: needs a CUDA device")
        return 2
    rows = []
    for s in SHAPES:
        if s[0] not in a.shapes.split(","):
            continue
        r = bench_shape(*s, a.tokens, a.batches, a.batch)
        rows.append(r)
        print(f"{r['shape']:22s} {r['scheme']:6s} M={r['tokens']} {r['backend']:20s} C++ host "
              f"{r['cpp_host_us']:6.1f} us  graph C++ {r['cpp_graph_replay_us']:7.1f} us  Python "
              f"{r['python_graph_replay_us']:7.1f} us ({r['graph_ratio_python_over_cpp']:.3f}x)")
        for pname, v in r["paths"].items():
            print(f"    {pname:24s} host {v['host_us']:6.1f} us  overhead {v['overhead_us']:+6.1f} us")
    commit = os.environ.get("MOEKIT_COMMIT")
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        except OSError:
            commit = ""
    result = {"tool": "bench/python_overhead.py", "commit": commit,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "python": platform.python_version(), "moekit": moekit.info(),
              "method": __doc__, "rows": rows}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
