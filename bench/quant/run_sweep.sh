#!/usr/bin/env bash
# FP4 quantize: the row-group kernel's two configurations (MOEKIT_QUANT_FP4_CONFIG=groups|whole)
# against the chunk / row kernels, benchmark first, then the byte-identical suites and racecheck
# for the "whole" configuration. One device call.
set -u
B=${MOEKIT_DEVBIN:-.devbin-lead}
OUT=${OUT:-/tmp/quant_out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for c in whole groups; do
  MOEKIT_QUANT_FP4_CONFIG=$c timeout 60 $B/moekit_kernel_bench --filter fp4 --out $OUT/quant_rows_$c.json > $OUT/bench_$c.log 2>&1
  echo "== $c rc=$?"; grep -E "^(nvfp4|mxfp4)" $OUT/bench_$c.log | grep -E " (1|1024|4096|8192|16384) "
done
MOEKIT_QUANT_FP4_KERNEL=chunks timeout 60 $B/moekit_kernel_bench --filter fp4 --out $OUT/quant_chunks.json > $OUT/bench_chunks.log 2>&1
echo "== chunks rc=$?"; grep -E "^(nvfp4|mxfp4)" $OUT/bench_chunks.log | grep -E " (1|1024|4096|8192|16384) "
grep -h "copy bandwidth" $OUT/bench_*.log
MOEKIT_QUANT_FP4_CONFIG=whole timeout 60 $B/moekit_gpu_tests --gtest_filter='*QuantizeCuda.MatchesReferenceByteForByte/bf16:*QuantizeCuda.MatchesReferenceByteForByte/f16:QuantizeCudaFp4Rows.*:QuantizeCudaLarge.*:QuantizeCudaSpecials.*' > $OUT/tests_whole.log 2>&1
echo "tests whole rc=$?"; grep -E "^\[  (FAILED|PASSED) " $OUT/tests_whole.log
for tool in racecheck synccheck; do
  MOEKIT_QUANT_FP4_CONFIG=whole timeout 40 compute-sanitizer --tool $tool --error-exitcode 9 $B/moekit_gpu_tests --gtest_filter='QuantizeCudaFp4Rows.*' > $OUT/$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'SUMMARY' $OUT/$tool.log)"
done
(cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log)
