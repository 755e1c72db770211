#!/usr/bin/env python3
"""Write bench/RESULTS.md and its heat map from the `moekit bench` result files.

    python3 scripts/bench_report.py                    # pick the runs (rule below)
    python3 scripts/bench_report.py --input bench/results/layer_A.json bench/results/layer_B.json

Inputs: bench/results/layer_*.json written by `moekit bench --json` (a dict with "tool":
"moekit bench", "gpu", "commit", "date", "ceilings" and "rows").

Selection rule (without --input): the files are grouped by GPU name (gpu.name); for each GPU the
run with the most measured (preset, scheme, tokens) cells is taken, ties going to the latest
"date". A/B experiments and partial runs (a few presets or token counts) therefore never replace
a full table. --input names the runs explicitly (one per GPU; a later file of the same GPU wins).

Outputs (deterministic for the same inputs): bench/RESULTS.md, bench/results_heatmap.png and
bench/results_heatmap.svg. The "Decisions" section is bench/decisions.md, included verbatim.
Requires matplotlib (pip install matplotlib).
"""
import argparse
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
PRESETS = ["deepseek-v3", "kimi-k2", "qwen3-235b-a22b", "qwen3-30b-a3b", "gpt-oss-120b",
           "gpt-oss-20b", "mixtral-8x7b", "llama4-scout"]
SCHEMES = ["bf16", "fp8_block", "nvfp4", "mxfp4", "w4a8_mxfp4"]
SCHEME_TEXT = {"bf16": "bf16", "fp8_block": "fp8 block 128", "nvfp4": "NVFP4 W4A16",
               "mxfp4": "MXFP4 W4A16", "w4a8_mxfp4": "MXFP4 W4A8"}


def load_run(path):
    with open(path) as f:
        d = json.load(f)
    if not isinstance(d, dict) or d.get("tool") != "moekit bench" or "rows" not in d:
        return None
    rows = [r for r in d["rows"] if "time_us" in r]
    if not rows or "ceilings" not in d or not isinstance(d.get("gpu"), dict):
        return None
    d["path"] = os.path.relpath(path, ROOT)
    d["cells"] = {(r["preset"], r["quant"], r["tokens"]): r for r in d["rows"]}
    d["measured"] = len(rows)
    return d


def select_runs(inputs):
    if inputs:
        runs = [r for r in (load_run(p) for p in inputs) if r]
        by_gpu = {r["gpu"]["name"]: r for r in runs}
    else:
        by_gpu = {}
        for path in sorted(glob.glob(os.path.join(BENCH, "results", "layer_*.json"))):
            r = load_run(path)
            if not r:
                continue
            best = by_gpu.get(r["gpu"]["name"])
            if best is None or (r["measured"], r["date"]) > (best["measured"], best["date"]):
                by_gpu[r["gpu"]["name"]] = r
    return [by_gpu[g] for g in sorted(by_gpu)]


def order(values, preferred):
    return [v for v in preferred if v in values] + sorted(v for v in values if v not in preferred)


def axes_of(run):
    presets = order({k[0] for k in run["cells"]}, PRESETS)
    schemes = order({k[1] for k in run["cells"]}, SCHEMES)
    tokens = sorted({k[2] for k in run["cells"]})
    return presets, schemes, tokens


def short_gpu(name):
    return name.replace("NVIDIA ", "").replace(" 80GB HBM3", "")


def heatmap(runs, png, svg):
    plt.rcParams["svg.hashsalt"] = "moekit"
    fig, axs = plt.subplots(1, len(runs), figsize=(2.4 + 4.4 * len(runs), 10.5), squeeze=False,
                            gridspec_kw={"wspace": 0.04})
    previous_labels = None
    for ax, run in zip(axs[0], runs):
        presets, schemes, tokens = axes_of(run)
        labels, grid, slower = [], [], []
        for p in presets:
            for s in schemes:
                labels.append(f"{p}  {SCHEME_TEXT.get(s, s)}")
                row, slow = [], []
                for t in tokens:
                    c = run["cells"].get((p, s, t), {})
                    row.append(c.get("floor_over_time", float("nan")))
                    slow.append(c.get("speedup", 1.0) < 1.0)
                grid.append(row)
                slower.append(slow)
        im = ax.imshow(grid, cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto")
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                text = "n/a" if v != v else f"{v:.2f}"
                ax.text(j, i, text, ha="center", va="center", fontsize=8.5)
                if slower[i][j]:
                    ax.add_patch(plt.Rectangle((j - 0.47, i - 0.45), 0.94, 0.9, fill=False,
                                               edgecolor="black", linewidth=1.6))
        for i in range(len(schemes), len(labels), len(schemes)):
            ax.axhline(i - 0.5, color="white", linewidth=3)
        ax.set_xticks(range(len(tokens)), [str(t) for t in tokens])
        # Panels with the same rows share the leftmost panel's labels.
        ax.set_yticks(range(len(labels)), labels if labels != previous_labels else [],
                      fontsize=8.5)
        previous_labels = labels
        ax.set_xlabel("tokens")
        ax.set_title(f"{short_gpu(run['gpu']['name'])}, commit {run['commit'][:7]}\n"
                     f"{os.path.basename(run['path'])}", fontsize=10)
    fig.colorbar(im, ax=axs[0].tolist(), shrink=0.5, label="floor / time (1 = at the floor)")
    fig.suptitle("moekit MoE layer: fraction of the floor (framed: slower than the cuBLAS bf16 "
                 "baseline)", fontsize=11)
    fig.savefig(png, dpi=110, bbox_inches="tight", metadata={"Software": None})
    fig.savefig(svg, bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)


def fmt(v, digits=1):
    return "" if v is None or v != v else f"{v:.{digits}f}"


def run_section(run):
    c = run["ceilings"]
    out = [f"## {run['gpu']['name']} ({run['gpu'].get('multiprocessors', '?')} SMs)", "",
           f"Run `{run['path']}`: commit `{run['commit']}`, {run['date']}, "
           f"{run.get('reps', '?')} replays per cell.",
           f"Ceilings measured in the run: copy {c['copy_gbps']:.0f} GB/s, bf16 "
           f"{c['bf16_tflops']:.0f} TFLOP/s, fp8 {c['fp8_tflops']:.0f} TFLOP/s (fast accumulation "
           f"{c.get('fp8_fast_accum_tflops', float('nan')):.0f}, exact "
           f"{c.get('fp8_exact_accum_tflops', float('nan')):.0f}).", "",
           "| preset | scheme | tokens | time us | p10-p90 us | floor us | floor/time | cuBLAS us "
           "| x cuBLAS | config |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    presets, schemes, tokens = axes_of(run)
    for p in presets:
        for s in schemes:
            for t in tokens:
                r = run["cells"].get((p, s, t))
                if r is None:
                    continue
                if "time_us" not in r:
                    why = r.get("unsupported", "not measured").split(": ", 1)[-1]
                    out.append(f"| {p} | {s} | {t} | unsupported: {why} | | | | | | |")
                    continue
                spread = f"{r['p10_us']:.1f}-{r['p90_us']:.1f}" if "p10_us" in r else ""
                out.append(f"| {p} | {s} | {t} | {fmt(r['time_us'])} | {spread} | "
                           f"{fmt(r['floor_us'])} | {fmt(r['floor_over_time'], 2)} | "
                           f"{fmt(r.get('cublas_us'))} | {fmt(r.get('speedup'), 2)} | "
                           f"{r.get('gemm_config', '')} |")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--input", nargs="+", metavar="FILE", help="layer JSON runs to report")
    ap.add_argument("--output", default=os.path.join(BENCH, "RESULTS.md"))
    args = ap.parse_args()
    runs = select_runs(args.input)
    if not runs:
        sys.exit("bench_report: no `moekit bench` run found")
    png = os.path.join(BENCH, "results_heatmap.png")
    heatmap(runs, png, os.path.join(BENCH, "results_heatmap.svg"))
    cmd = "python3 scripts/bench_report.py"
    if args.input:
        cmd += " --input " + " ".join(r["path"] for r in runs)
    with open(os.path.join(BENCH, "decisions.md")) as f:
        decisions = f.read().rstrip("\n")
    out = ["# moekit benchmark results", "",
           f"<!-- Generated by `{cmd}` from bench/results/ and bench/decisions.md; "
           "do not edit by hand. -->", "",
           "The MoE layer (`moekit bench`: routing glue, GEMM1, activation, GEMM2, weighted "
           "reduce; one CUDA graph, L2 flushed before each replay) on the newest full table of "
           "each GPU. Method, floor and ceilings: [docs/performance.md](../docs/performance.md). "
           "Floor/time is the fraction of the floor max(weight bytes / copy bandwidth, FLOPs / "
           "tensor peak) reached; x cuBLAS is the in-run cuBLAS bf16 per-expert baseline's time "
           "over ours (> 1: faster than cuBLAS). Config: the GEMM1 kernel config the tuning rules "
           "picked (docs/tuning.md).", "",
           f"Runs: " + "; ".join(f"{r['gpu']['name']} `{r['path']}`" for r in runs) + ".", "",
           "![floor fraction per preset, scheme and token count](results_heatmap.png)", "",
           "([SVG](results_heatmap.svg))", ""]
    for r in runs:
        out += run_section(r) + [""]
    out += [decisions, ""]
    with open(args.output, "w") as f:
        f.write("\n".join(out))
    print(f"wrote {os.path.relpath(args.output, ROOT)} and bench/results_heatmap.{{png,svg}} "
          f"from {', '.join(r['path'] for r in runs)}")


if __name__ == "__main__":
    main()
