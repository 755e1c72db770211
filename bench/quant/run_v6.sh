#!/usr/bin/env bash
# One device call (the v6 quantize work, 2026-12-01b; docs/kernels/quant_routing.md "v6"): the
# FP4 row-group kernel (forced) against the chunk / row kernels, benchmark first; an ncu profile of
# the row-group kernel at M = 8192 (incl. shared-memory bank conflicts); the byte-identical
# suites (every FP4 case through both kernels); compute-sanitizer on the small suites
# (arg 1 = "nosan" skips it). Binaries prebuilt into .devbin-lead/.
set -u
B=${MOEKIT_DEVBIN:-.devbin-lead}
OUT=${OUT:-/tmp/quant_out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T0=$SECONDS
step() { local name=$1; shift; local t=$SECONDS; "$@"; local rc=$?; printf '%-22s rc=%d %3ds\n' "$name" $rc $((SECONDS - t)) | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv > "$OUT/summary.txt" 2>&1
step "bench rows" sh -c "MOEKIT_QUANT_FP4_KERNEL=rows timeout 60 $B/moekit_kernel_bench --filter fp4 --out $OUT/quant_rows.json > $OUT/bench_rows.log 2>&1"
step "bench chunks" sh -c "MOEKIT_QUANT_FP4_KERNEL=chunks timeout 60 $B/moekit_kernel_bench --filter fp4 --out $OUT/quant_chunks.json > $OUT/bench_chunks.log 2>&1"
step "ncu rows" sh -c "MOEKIT_QUANT_FP4_KERNEL=rows timeout 60 ncu --clock-control none -k regex:quantize_fp4_rows --launch-skip 3 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section InstructionStats $B/moekit_kernel_bench --filter nvfp4_static --m 8192 > $OUT/ncu_rows.log 2>&1"
F='FastCodecs.*:*QuantizeCuda*:*ActivationQuantize*'
step "tests rows" sh -c "timeout 90 $B/moekit_gpu_tests --gtest_filter='$F' > $OUT/tests_rows.log 2>&1"
if [ "${1:-}" != "nosan" ]; then
  SMALL='QuantizeCudaStatic.*:QuantizeCudaSpecials.*:QuantizeCudaFp4Rows.*'
  for tool in memcheck racecheck synccheck; do
    step "$tool" sh -c "timeout 45 compute-sanitizer --tool $tool --error-exitcode 9 $B/moekit_gpu_tests --gtest_filter='$SMALL' > $OUT/$tool.log 2>&1"
  done
fi
grep -hE "^\[  (FAILED|PASSED) |tests ran" "$OUT"/tests_*.log | tail -8
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT"/*check*.log 2>/dev/null
for k in rows chunks; do
  echo "== $k"; grep -E "^(nvfp4|mxfp4)" "$OUT/bench_$k.log" | grep -E " (1024|2048|3072|4096|4682|8192|16384) "
done
grep -h "copy bandwidth" "$OUT"/bench_*.log
echo "== ncu rows"; grep -E "Duration|DRAM Throughput|Issued Warp|No Eligible|Warp Cycles Per Issued|Mem Busy|Executed Instructions  |Shared" "$OUT/ncu_rows.log" | head -24
cat "$OUT/summary.txt"; echo "total $((SECONDS - T0)) s"
(cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log)
