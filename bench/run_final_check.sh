#!/usr/bin/env bash
# The session's closing device call (binaries prebuilt into .devbin-final/): scripts/gpu_check.sh
# (every gpu test, compute-sanitizer subsets, the kernel benchmark), the default `moekit run` on
# the GPU, and (argument "layer") the layer benchmark of bf16 and nvfp4 at decode sizes on four
# presets plus an ncu per-kernel breakdown of one W4A16 apply() (gpt-oss-120b, M = 1).
# Everything under $OUT/check travels back as one archive; the layer JSON separately.
#   bash bench/run_final_check.sh [layer]
set -u
B=.devbin-final
export MOEKIT_COMMIT=$(cat $B/commit)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
C=$OUT/check; mkdir -p "$C"
timeout 330 bash scripts/gpu_check.sh "$C" --bin $B; echo "gpu_check rc=$?"
timeout 30 $B/moekit run > "$C/run_default.log" 2>&1; echo "moekit run rc=$?"; grep -iE "backend|relative|pass" "$C/run_default.log" | head -5
if [ "${1:-}" = layer ]; then
  timeout 240 $B/moekit bench --preset deepseek-v3,qwen3-235b-a22b,gpt-oss-120b,mixtral-8x7b \
    --quant bf16,nvfp4 --tokens 1,8,64 --reps 30 --json "$OUT/layer_final.json" > "$C/layer.log" 2>&1
  echo "layer bench rc=$?"; grep -E "^(deepseek|qwen3|gpt-oss|mixtral)" "$C/layer.log"
  timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    --kernel-name regex:'permute|decode|weighted|w4a16' --launch-count 12 \
    $B/moekit bench --preset gpt-oss-120b --quant nvfp4 --tokens 1 --reps 1 --no-baseline \
    > "$C/ncu_gptoss_m1.csv" 2>&1; echo "ncu rc=$?"
  grep -E "gpu__time_duration" "$C/ncu_gptoss_m1.csv" | awk -F'","' '{print $5" | "$NF}' | cut -c1-160 | head -12
fi
(cd "$OUT" && tar czf check.tgz check && rm -rf check)
