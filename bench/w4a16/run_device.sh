#!/bin/bash
# One device call: tests, compute-sanitizer, variant sweep, benchmark sweep, SASS instruction mix of
# the decode8 kernel. Logs under $OUT. Usage (device, repo root): bash bench/w4a16/run_device.sh
# [quick | decode] [novariants]
set -u
B=.devbin-w4
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/w4out}; mkdir -p "$OUT"
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$OUT/summary.txt" 2>&1
# Order: tests, variant sweep, benchmark, then the sanitizers; every step's timeout is capped by
# what is left of BUDGET seconds (default 225) so that the call ends with its logs in place.
BUDGET=${BUDGET:-225}
left() { local l=$(( BUDGET - ($(date +%s) - T0) )); [ $l -lt 1 ] && l=1; [ $l -lt $1 ] && echo $l || echo $1; }
timeout $(left 90) $B/w4a16_tests > "$OUT/tests.log" 2>&1; stamp "tests rc=$?"
grep -E "^\[  (FAILED|PASSED) |FAILED TEST|Failure|error" "$OUT/tests.log" | head -20 | tee -a "$OUT/summary.txt"
if [ -x $B/w4a16_variants ] && [ "${2:-}" != "novariants" ]; then
  timeout $(left 70) $B/w4a16_variants > "$OUT/variants.log" 2>&1; stamp "variants rc=$?"
fi
timeout $(left 110) $B/w4a16_bench "$OUT/w4a16_bench.json" ${1:-} > "$OUT/bench.log" 2>&1; stamp "bench rc=$?"
timeout $(left 45) compute-sanitizer --tool memcheck --leak-check no $B/w4a16_tests \
  --gtest_filter='*Dequant*:*AutoSplitK*:*OverlapPrevious*:*All/W4A16Gemm.*/3:*All/W4A16Gemm.*/14:*All/W4A16Gemm.*/30:*Decode8Kernels*' \
  > "$OUT/memcheck.log" 2>&1; stamp "memcheck rc=$?"
grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | tail -3 | tee -a "$OUT/summary.txt"
timeout $(left 45) compute-sanitizer --tool racecheck $B/w4a16_tests --gtest_filter='*All/W4A16Gemm.*/5:*AutoSplitK*:*Decode8KernelsLongK*' \
  > "$OUT/racecheck.log" 2>&1; stamp "racecheck rc=$?"
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/racecheck.log" | tail -3 | tee -a "$OUT/summary.txt"
# ncu of the 64-row register and bulk decode8 kernels (DeepSeek-V3 M = 64 GEMM1), if time is left.
if [ "${NCU:-1}" = "1" ] && [ $(left 60) -ge 30 ]; then
  timeout $(left 60) ncu --clock-control none --kernel-name regex:w4a16 --launch-count 2 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section MemoryWorkloadAnalysis $B/w4a16_variants profile > "$OUT/ncu.txt" 2>&1; stamp "ncu rc=$?"
fi
# SASS instruction mix of the decode8 NVFP4 kernels (register ring 32-row and 64-row configs,
# bulk ring 64-row and 32-row configs, no epilogue, no PDL).
if command -v cuobjdump > /dev/null; then
  cuobjdump -sass $B/w4a16_tests > /tmp/w4_sass.txt 2> /dev/null
  for cfg in DecodeConfigILi4ELi2ELi1ELi4ELi4ELb1EEELb1ELi0ELb0E DecodeConfigILi4ELi4ELi1ELi2ELi4ELb1EEELb1ELi0ELb0E \
             BulkDecodeConfigILi4ELi4ELi1ELi2ELi2ELi4EEELb1ELi0ELb0ELb0E BulkDecodeConfigILi4ELi2ELi1ELi2ELi4ELi4EEELb1ELi0ELb0ELb0E; do
    awk -v k="$cfg" '/Function : /{p=index($0, k) > 0} p' /tmp/w4_sass.txt > /tmp/w4_k.txt
    { echo "$cfg: sass lines $(wc -l < /tmp/w4_k.txt)";
      for op in HMMA HMUL2 LOP3 SHF PRMT IMAD LDG LDS UBLKCP SYNCS BAR ISETP BRA; do
        echo "  $op $(grep -cE "^\s+/\*[0-9a-f]+\*/\s+(@!?U?P[0-9T] )?$op" /tmp/w4_k.txt)"; done; } \
      >> "$OUT/sass_mix.txt"
  done
fi
cat "$OUT/variants.log" 2>/dev/null
grep -E "auto|device" "$OUT/bench.log"
cat "$OUT/summary.txt"
