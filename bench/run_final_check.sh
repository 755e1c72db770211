#!/usr/bin/env bash
# The session's closing device call (binaries prebuilt into .devbin-final/, or packed as
# .devbin-finalz/bins.tar.xz to stay under the carry limit): scripts/gpu_check.sh (every gpu
# test, compute-sanitizer subsets, the kernel benchmark), the default `moekit run` on the GPU, and
# (argument "layer") the layer benchmark of every scheme on four presets at 1..4096 tokens with
# the cuBLAS baseline, the SM clock and power sampled by nvidia-smi alongside.
# Everything under $OUT/check travels back as one archive; the layer JSON separately.
#   bash bench/run_final_check.sh [layer | layer-only]   (layer-only: the layer benchmark alone)
# Without an argument gpu_check gets 520 s (every gpu test ~160-180 s, memcheck ~70-90 s,
# racecheck ~80-150 s, the kernel benchmark): the complete check. With "layer" it gets 330 s so
# that the layer benchmark fits the same 600 s call, which can cut the racecheck subset short
# (2026-12-03c: complete, gpu_check 316 s); then the complete
# check is the argument-less call plus a "layer-only" call.
set -u
B=.devbin-final
if [ -f .devbin-finalz/bins.tar.xz ]; then mkdir -p $B && tar xJf .devbin-finalz/bins.tar.xz -C $B; fi
export MOEKIT_COMMIT=$(cat $B/commit)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
C=$OUT/check; mkdir -p "$C"
if [ "${1:-}" != layer-only ]; then
  CHECK_LIMIT=520
  [ "${1:-}" = layer ] && CHECK_LIMIT=330
  timeout $CHECK_LIMIT bash scripts/gpu_check.sh "$C" --bin $B; echo "gpu_check rc=$? (limit ${CHECK_LIMIT} s)"
  timeout 30 $B/moekit run > "$C/run_default.log" 2>&1; echo "moekit run rc=$?"
  grep -iE "backend|relative|pass" "$C/run_default.log" | head -5
  # W4A8 through the oracle (mxfp4 weights x fp8_token activations), scaled for the CPU check.
  timeout 60 $B/moekit run --preset gpt-oss-120b --quant mxfp4 --mode fp8_token --tokens 257 \
    --hidden 1024 --intermediate 512 --experts 32 > "$C/run_w4a8.log" 2>&1; echo "moekit run w4a8 rc=$?"
  grep -iE "backend|relative|pass" "$C/run_w4a8.log" | head -5
fi
if [ "${1:-}" = layer ] || [ "${1:-}" = layer-only ]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 250 \
    > "$C/smi_during_layer.csv" 2>&1 &
  SMI=$!
  timeout 540 $B/moekit bench --preset deepseek-v3,qwen3-235b-a22b,gpt-oss-120b,mixtral-8x7b \
    --quant bf16,fp8_block,nvfp4,mxfp4,w4a8_mxfp4 --tokens 1,8,64,512,4096 --reps 20 \
    --json "$OUT/layer_final.json" > "$C/layer.log" 2>&1
  echo "layer bench rc=$?"; kill $SMI 2>/dev/null
  grep -E "^(deepseek|qwen3|gpt-oss|mixtral)" "$C/layer.log" | awk '{print $1, $2, $3, $5, $10, $11, $12}'
fi
(cd "$OUT" && tar czf check.tgz check && rm -rf check)
