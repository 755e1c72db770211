#!/usr/bin/env bash
# One device call for the bf16 decode grouped GEMM (GroupedGemmConfig::kDecode): its GPU tests and
# the grouped-GEMM / W4A16 / layer tests it touches, compute-sanitizer memcheck + racecheck on small
# decode cases, then the GEMM-level sweep (`moekit bench --gemm`: decode vs the CUTLASS configs vs
# the copy bandwidth) and the layer benchmark (kAuto with the in-run cuBLAS baseline, plus CUTLASS
# narrow forced at the decode token counts). Binaries prebuilt here and carried in $B (moekit,
# moekit_gpu_tests, commit). Logs go back as one archive, JSON files separately.
#   bash bench/run_device_bf16_decode.sh [devbin folder, default .devbin-h1] [label, default run1]
set -u
B=${1:-.devbin-h1}
LABEL=${2:-run1}
OUT=${OUT:-/tmp/moekit_out}
L=$OUT/logs
mkdir -p "$L"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export MOEKIT_COMMIT=$(cat "$B/commit" 2>/dev/null || echo unknown)
export MOEKIT_BENCH_CLOCKS="$(nvidia-smi --query-gpu=clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.draw --format=csv,noheader 2>&1)"
nvidia-smi > "$L/nvidia_smi.txt" 2>&1
TAG=layer_20261201c_bf16_decode_${LABEL}
PRESETS=mixtral-8x7b,qwen3-235b-a22b,deepseek-v3,gpt-oss-120b,kimi-k2
summary() { grep -E '^\[  PASSED|^\[  FAILED|tests ran' "$1" | tr '\n' ' '; }

# Every step's timeout is capped by what is left before DEADLINE s (the call's limit minus margin);
# correctness first, then the benchmarks, the sanitizers last.
DEADLINE=${DEADLINE:-228}
cap() { local left=$((DEADLINE - SECONDS)); echo $(($1 < left ? $1 : left)); }
step() {  # step <cap s> <log> <command...>
  local t; t=$(cap "$1"); local log=$2; shift 2
  if [ "$t" -le 5 ]; then echo "SKIPPED (time) $log"; return; fi
  timeout "$t" "$@" > "$L/$log" 2>&1
  echo "$log rc=$? ($SECONDS s)"
}

step 70 tests.log "$B/moekit_gpu_tests" \
  --gtest_filter='Bf16Decode*:*GroupedGemm*:SiluAndMul*:ExpertChain*:*W4A16Gemm*:W4A16Experts*:CudaLayer.Bf16MatchesReference:CudaLayer.GraphCaptureReplaysBitwise'
echo "  $(summary "$L/tests.log")"
grep -E "^\[  FAILED|Failure|rel L2 decode" "$L/tests.log" | head -20
step 35 bench_gemm.log "$B/moekit" bench --gemm --preset "$PRESETS" --tokens 1,8,64 --reps 20 \
  --json "$OUT/${TAG}_gemm.json"
step 50 bench_layer_auto.log "$B/moekit" bench --preset "$PRESETS" --quant bf16 \
  --tokens 1,8,64,512 --reps 20 --json "$OUT/${TAG}_auto.json"
step 25 bench_layer_narrow.log env MOEKIT_GROUPED_GEMM_CONFIG=bf16:narrow "$B/moekit" bench \
  --preset "$PRESETS" --quant bf16 --tokens 1,8,64 --reps 20 --no-baseline \
  --json "$OUT/${TAG}_narrow.json"
SMALL='Bf16DecodeGemm.SingleRow:Bf16DecodeGemm.KAndNTailsStrided:Bf16DecodeGemm.ClusterSplitK:Bf16DecodeGemm.NoRowsLeavesOutputUntouched:Bf16DecodeGemm.PdlChainInGraphFollowsDeviceOffsets'
step 35 memcheck.log compute-sanitizer --tool memcheck --error-exitcode 9 "$B/moekit_gpu_tests" \
  --gtest_filter="$SMALL"
echo "  $(grep -E 'ERROR SUMMARY' "$L/memcheck.log" | tail -1)"
step 25 racecheck.log compute-sanitizer --tool racecheck --error-exitcode 9 "$B/moekit_gpu_tests" \
  --gtest_filter='Bf16DecodeGemm.SingleRow:Bf16DecodeGemm.KAndNTailsStrided'
echo "  $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$L/racecheck.log" | tail -1)"
echo "== done ($SECONDS s)"
(cd "$OUT" && tar czf logs.tgz logs && rm -rf logs)

# Short tables last: GEMM level (time, GB/s, floor/time per config) and the layer.
echo "-- gemm: preset gemm tokens config time_us GB/s fl/t"
tar xzf "$OUT/logs.tgz" -O logs/bench_gemm.log 2>/dev/null |
  awk '/^(mixtral|qwen|deepseek|gpt-oss|kimi)/ {printf "%-15s %s %3s %-9s %8s %6s %5s %s\n", $1, $2, $3, $6, $7, $9, $11, $12}'
echo "-- layer kAuto: preset tokens time_us floor_us fl/t cublas_us speedup cfg"
tar xzf "$OUT/logs.tgz" -O logs/bench_layer_auto.log 2>/dev/null |
  awk '/^(mixtral|qwen|deepseek|gpt-oss|kimi)/ && !/unsupported/ {printf "%-15s %5s %8s %8s %5s %8s %5s %s\n", $1, $3, $5, $9, $10, $11, $12, $14}'
echo "-- layer narrow: preset tokens time_us fl/t"
tar xzf "$OUT/logs.tgz" -O logs/bench_layer_narrow.log 2>/dev/null |
  awk '/^(mixtral|qwen|deepseek|gpt-oss|kimi)/ && !/unsupported/ {printf "%-15s %5s %8s %5s\n", $1, $3, $5, $10}'
