#!/usr/bin/env bash
# The session's closing device call (binaries prebuilt into .devbin-final/): scripts/gpu_check.sh
# (every gpu test, compute-sanitizer subsets, kernel benchmarks), the default `moekit run` on the
# GPU, the FP4 quantize row-group widths (bench/quant/run_widths.sh), and (argument "layer") the
# layer benchmark of Mixtral and DeepSeek-V3. Everything under
# $OUT/check travels back as one archive; the layer JSON separately.
#   bash bench/run_final_check.sh [layer]
set -u
B=.devbin-final
export MOEKIT_COMMIT=$(cat $B/commit)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
C=$OUT/check; mkdir -p "$C"
timeout 330 bash scripts/gpu_check.sh "$C" --bin $B; echo "gpu_check rc=$?"
timeout 30 $B/moekit run > "$C/run_default.log" 2>&1; echo "moekit run rc=$?"; grep -iE "backend|relative|pass" "$C/run_default.log" | head -5
OUT=$C timeout 200 bash bench/quant/run_widths.sh $B; echo "quant widths rc=$?"
if [ "${1:-}" = layer ]; then
timeout 100 $B/moekit bench --preset mixtral-8x7b --quant bf16,fp8_block,nvfp4 --tokens 512,4096 \
  --reps 20 --json "$OUT/layer_20261201_final_mixtral.json" > "$C/layer_mixtral.log" 2>&1; echo "bench mixtral rc=$?"
timeout 45 $B/moekit bench --preset deepseek-v3 --quant fp8_block --tokens 4096 --reps 20 \
  --json "$OUT/layer_20261201_final_dsv3_fp8.json" > "$C/layer_dsv3.log" 2>&1; echo "bench dsv3 rc=$?"
grep -hE "^(mixtral|deepseek)" "$C"/layer_*.log
fi
(cd "$OUT" && tar czf check.tgz check && rm -rf check)
