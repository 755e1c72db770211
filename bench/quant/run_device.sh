#!/usr/bin/env bash
# One device call for the quantize kernels (binaries prebuilt into .devbin-lead/): the FP4 quantize
# benchmark through the FP4 row-group kernel and through the chunk / row kernels
# (MOEKIT_QUANT_FP4_KERNEL=chunks) in the same run, the FastCodecs proofs, the byte-identical
# quantize suites through both kernels, then compute-sanitizer (memcheck, racecheck, synccheck) on
# the small suites. Logs travel back as one archive, JSON separately ($OUT).
set -u
B=${MOEKIT_DEVBIN:-.devbin-lead}
OUT=${OUT:-/tmp/quant_out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$SECONDS
step() { local name=$1; shift; local t=$SECONDS; "$@"; local rc=$?; printf '%-22s rc=%d %3ds\n' "$name" $rc $((SECONDS - t)) | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv > "$OUT/summary.txt" 2>&1
step "bench rows" sh -c "timeout 60 $B/moekit_kernel_bench --filter fp4 --out $OUT/quant_rows.json > $OUT/bench_rows.log 2>&1"
step "bench chunks" sh -c "MOEKIT_QUANT_FP4_KERNEL=chunks timeout 60 $B/moekit_kernel_bench --filter fp4 --out $OUT/quant_chunks.json > $OUT/bench_chunks.log 2>&1"
step "tests rows" sh -c "timeout 90 $B/moekit_gpu_tests --gtest_filter='FastCodecs.*:*QuantizeCuda*:*ActivationQuantize*' > $OUT/tests_rows.log 2>&1"
step "tests chunks" sh -c "MOEKIT_QUANT_FP4_KERNEL=chunks timeout 60 $B/moekit_gpu_tests --gtest_filter='*QuantizeCuda*' > $OUT/tests_chunks.log 2>&1"
SMALL='QuantizeCudaStatic.*:QuantizeCudaSpecials.*:QuantizeCudaFp4Rows.*'
for tool in memcheck racecheck synccheck; do
  step "$tool" sh -c "timeout 45 compute-sanitizer --tool $tool --error-exitcode 9 $B/moekit_gpu_tests --gtest_filter='$SMALL' > $OUT/$tool.log 2>&1"
done
grep -hE "^\[  (FAILED|PASSED) |tests ran" "$OUT"/tests_*.log | tail -8
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT"/memcheck.log "$OUT"/racecheck.log "$OUT"/synccheck.log
for k in rows chunks; do
  echo "== $k"; grep -E "^(nvfp4|mxfp4)" "$OUT/bench_$k.log" | grep -E " (1|1024|4096|8192|16384) "
done
grep -h "copy bandwidth" "$OUT"/bench_*.log
cat "$OUT/summary.txt"; echo "total $((SECONDS - T0)) s"
# At most 8 files come back: the logs travel as one archive.
(cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log)
