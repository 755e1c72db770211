#!/usr/bin/env python3
"""Compares two `moekit bench --json` runs row by row (preset, quant, tokens): time ratio and
whether the layer outputs are bitwise identical (output_fnv1a).

  python3 scripts/bench_compare.py BEFORE.json[,MORE.json] AFTER.json[,MORE.json] [--markdown]

Several files per side (comma-separated) are merged. Prints one line per row both sides have,
then a summary: rows compared, rows with identical outputs, the geometric mean and the range of
after / before. Exit 1 when an output differs.
"""
import json
import math
import sys


def load(spec):
    rows = {}
    meta = None
    for path in spec.split(","):
        d = json.load(open(path))
        meta = meta or d
        for r in d.get("rows", []):
            rows[(r["preset"], r["quant"], int(r["tokens"]))] = r
    return rows, meta


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    md = "--markdown" in sys.argv
    if len(args) != 2:
        print(__doc__)
        return 2
    before, mb = load(args[0])
    after, ma = load(args[1])
    keys = [k for k in before if k in after and "time_us" in before[k] and "time_us" in after[k]]
    ratios, same, differ = [], 0, []
    if md:
        print("| preset | quant | tokens | before us | after us | after / before | output |")
        print("|---|---|---:|---:|---:|---:|---|")
    for k in keys:
        b, a = before[k], after[k]
        r = a["time_us"] / b["time_us"]
        ratios.append(r)
        hb, ha = b.get("output_fnv1a"), a.get("output_fnv1a")
        eq = hb is not None and hb == ha
        same += eq
        if hb is not None and ha is not None and not eq:
            differ.append(k)
        out = "identical" if eq else ("DIFFERS" if hb is not None and ha is not None else "n/a")
        if md:
            print(f"| {k[0]} | {k[1]} | {k[2]} | {b['time_us']:.1f} | {a['time_us']:.1f} | "
                  f"{r:.3f} | {out} |")
        else:
            print(f"{k[0]:16s} {k[1]:11s} {k[2]:5d}  {b['time_us']:10.1f} {a['time_us']:10.1f}  "
                  f"{r:6.3f}  {out}")
    if not keys:
        print("no common rows")
        return 1
    g = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    def gpu(m):
        g = m.get("gpu", "?")
        return g.get("name", "?") if isinstance(g, dict) else g
    print(f"\n{len(keys)} rows; outputs identical in {same}; after / before: geomean {g:.4f}, "
          f"min {min(ratios):.3f}, max {max(ratios):.3f} "
          f"(before: {gpu(mb)} {mb.get('commit', '?')}; after: {gpu(ma)} {ma.get('commit', '?')})")
    for k in differ:
        print("output differs:", *k)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
