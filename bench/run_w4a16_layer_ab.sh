#!/usr/bin/env bash
# W4A16 experts apply() A/B on the device: the GPU layer / experts / W4A16 tests of the new build,
# then `moekit bench` nvfp4 + mxfp4 at 1 / 8 / 64 tokens on four presets, new build (with the
# cuBLAS baseline) and the previous build (.devbin-l5/old, no baseline), same machine, same call.
set -u
B=.devbin-l5
OUT=${OUT:-/tmp/o}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
timeout 200 $B/moekit_gpu_tests --gtest_filter='W4A16Experts.*:CudaLayer.*:CudaExpertsInput.*:LayerGlueCuda.*:CudaNoEpPrepareFinalize.*:ExpertChain.*:PermuteCuda.*:UnpermuteReduceCuda.*' > "$OUT/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/tests.log" | tr '\n' ' ')"; grep -E "^\[  FAILED" "$OUT/tests.log" | head
P=deepseek-v3,qwen3-235b-a22b,gpt-oss-120b,mixtral-8x7b
timeout 220 $B/moekit bench --preset $P --quant nvfp4,mxfp4 --tokens 1,8,64 --reps 30 --json "$OUT/layer_new.json" > "$OUT/bench_new.log" 2>&1; echo "bench new rc=$?"
timeout 150 $B/old/moekit bench --preset $P --quant nvfp4,mxfp4 --tokens 1,8,64 --reps 30 --no-baseline --json "$OUT/layer_old.json" > "$OUT/bench_old.log" 2>&1; echo "bench old rc=$?"
echo "== new"; grep -E "^(deepseek|qwen3|gpt-oss|mixtral)" "$OUT/bench_new.log"
echo "== old"; grep -E "^(deepseek|qwen3|gpt-oss|mixtral)" "$OUT/bench_old.log"
(cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log)
