#!/usr/bin/env bash
# Second device call of the bf16 decode grouped GEMM work: three builds of the same code that
# differ only in the bf16 decode tile configs (sm90_bf16_decode_grouped_gemm.cu), carried xz-packed
# as $D/<variant>/{moekit,moekit_gpu_tests}.xz:
#   A  DecodeConfig<4, 1, 1, 4, 4, false> / <4, 1, 2, 4, 3, false>  (16-row tiles, ring 4)
#   B  A with the L2::256B prefetch hint on the weight loads
#   C  DecodeConfig<4, 2, 1, 2, 3, false> / <4, 2, 2, 2, 3, false>  (32-row tiles, ring 2)
# Per variant: the decode GPU tests, the GEMM-level sweep and the layer with decode forced; for A
# also the wider test set, memcheck / racecheck, the layer with CUTLASS narrow forced and kAuto at
# 512 tokens (both with the in-run cuBLAS baseline). Logs back as one archive.
#   bash bench/run_device_bf16_decode_variants.sh [devbin folder, default .devbin-h1]
set -u
D=${1:-.devbin-h1}
OUT=${OUT:-/tmp/moekit_out}
L=$OUT/logs
mkdir -p "$L"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export MOEKIT_COMMIT=$(cat "$D/commit" 2>/dev/null || echo unknown)
export MOEKIT_BENCH_CLOCKS="$(nvidia-smi --query-gpu=clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.draw --format=csv,noheader 2>&1)"
nvidia-smi > "$L/nvidia_smi.txt" 2>&1
unpack() { xz -dc "$1" > "$2" 2>/dev/null || python3 -c "import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())" "$1" > "$2"; chmod +x "$2"; }
for v in A B C; do
  mkdir -p /tmp/bin/$v
  unpack "$D/$v/moekit.xz" /tmp/bin/$v/moekit
  unpack "$D/$v/moekit_gpu_tests.xz" /tmp/bin/$v/moekit_gpu_tests
done
TAG=layer_20261201c_bf16_decode_run2
PRESETS=mixtral-8x7b,qwen3-235b-a22b,deepseek-v3,gpt-oss-120b,kimi-k2
LAYER=mixtral-8x7b,qwen3-235b-a22b,deepseek-v3,kimi-k2
DEADLINE=${DEADLINE:-228}
cap() { local left=$((DEADLINE - SECONDS)); echo $(($1 < left ? $1 : left)); }
step() {  # step <cap s> <log> <command...>
  local t; t=$(cap "$1"); local log=$2; shift 2
  if [ "$t" -le 5 ]; then echo "SKIPPED (time) $log"; return; fi
  timeout "$t" "$@" > "$L/$log" 2>&1
  echo "$log rc=$? ($SECONDS s) $(grep -E '^\[  PASSED|^\[  FAILED' "$L/$log" | tr '\n' ' ')"
}
A=/tmp/bin/A
step 70 tests_A.log $A/moekit_gpu_tests \
  --gtest_filter='Bf16Decode*:*GroupedGemm*:SiluAndMul*:ExpertChain*:*W4A16Gemm*:W4A16Experts*:CudaLayer.Bf16MatchesReference:CudaLayer.GraphCaptureReplaysBitwise'
grep -E "^\[  FAILED|Failure" "$L/tests_A.log" | head -10
for v in B C; do
  step 20 tests_$v.log /tmp/bin/$v/moekit_gpu_tests --gtest_filter='Bf16Decode*:*GroupedGemm*'
  grep -E "^\[  FAILED|Failure" "$L/tests_$v.log" | head -5
done
SMALL='Bf16DecodeGemm.SingleRow:Bf16DecodeGemm.KAndNTailsStrided:Bf16DecodeGemm.ClusterSplitK:Bf16DecodeGemm.NoRowsLeavesOutputUntouched:Bf16DecodeGemm.PdlChainInGraphFollowsDeviceOffsets'
step 30 memcheck_A.log compute-sanitizer --tool memcheck --error-exitcode 9 $A/moekit_gpu_tests --gtest_filter="$SMALL"
echo "  $(grep -E 'ERROR SUMMARY' "$L/memcheck_A.log" | tail -1)"
step 20 racecheck_A.log compute-sanitizer --tool racecheck --error-exitcode 9 $A/moekit_gpu_tests \
  --gtest_filter='Bf16DecodeGemm.SingleRow:Bf16DecodeGemm.KAndNTailsStrided'
echo "  $(grep -E 'RACECHECK SUMMARY' "$L/racecheck_A.log" | tail -1)"
for v in A B C; do
  step 20 gemm_$v.log /tmp/bin/$v/moekit bench --gemm --preset "$PRESETS" --tokens 1,2,4,8,16,64 \
    --reps 20 --json "$OUT/${TAG}_gemm_$v.json"
done
step 30 layer_decode_A.log env MOEKIT_GROUPED_GEMM_CONFIG=bf16:decode $A/moekit bench --preset "$LAYER" \
  --quant bf16 --tokens 1,2,4,8,16,32,64 --reps 20 --json "$OUT/${TAG}_layer_decode_A.json"
for v in B C; do
  step 15 layer_decode_$v.log env MOEKIT_GROUPED_GEMM_CONFIG=bf16:decode /tmp/bin/$v/moekit bench \
    --preset "$LAYER" --quant bf16 --tokens 1,8,64 --reps 20 --no-baseline
done
step 20 layer_narrow_A.log env MOEKIT_GROUPED_GEMM_CONFIG=bf16:narrow $A/moekit bench --preset "$LAYER" \
  --quant bf16 --tokens 1,2,4,8,16,32,64 --reps 20 --no-baseline --json "$OUT/${TAG}_layer_narrow_A.json"
step 20 layer_auto512_A.log $A/moekit bench --preset "$LAYER" --quant bf16 --tokens 512 --reps 20 \
  --json "$OUT/${TAG}_layer_auto512_A.json"
echo "== done ($SECONDS s)"
(cd "$OUT" && tar czf logs.tgz logs && rm -rf logs)

echo "-- gemm decode time_us per variant (A B C) and narrow (A): preset gemm tokens"
tar xzf "$OUT/logs.tgz" -O logs/gemm_A.log logs/gemm_B.log logs/gemm_C.log 2>/dev/null | awk '
  /^(mixtral|qwen|deepseek|gpt-oss|kimi)/ { key = $1 " " $2 " " $3; if ($6 == "decode") d[key] = d[key] " " $7; if ($6 == "narrow" && !(key in nw)) nw[key] = $7; if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
  END { for (i = 1; i <= n; ++i) printf "%-28s dec%s | nar %s\n", order[i], d[order[i]], nw[order[i]] }'
for f in layer_decode_A layer_decode_B layer_decode_C layer_narrow_A layer_auto512_A; do
  echo "-- $f: preset tokens time_us fl/t cublas_us speedup cfg"
  tar xzf "$OUT/logs.tgz" -O logs/$f.log 2>/dev/null |
    awk '/^(mixtral|qwen|deepseek|kimi)/ && !/unsupported/ {printf "%-15s %5s %8s %5s %8s %5s %s\n", $1, $3, $5, $10, $11, $12, $14}'
done
