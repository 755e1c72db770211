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
timeout 120 $B/w4a16_tests > "$OUT/tests.log" 2>&1; stamp "tests rc=$?"
grep -E "^\[  (FAILED|PASSED) |FAILED TEST|Failure|error" "$OUT/tests.log" | head -20 | tee -a "$OUT/summary.txt"
timeout 60 compute-sanitizer --tool memcheck --leak-check no $B/w4a16_tests \
  --gtest_filter='*Dequant*:*AutoSplitK*:*OverlapPrevious*:*All/W4A16Gemm.*/3:*All/W4A16Gemm.*/14:*All/W4A16Gemm.*/30' \
  > "$OUT/memcheck.log" 2>&1; stamp "memcheck rc=$?"
grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | tail -3 | tee -a "$OUT/summary.txt"
timeout 45 compute-sanitizer --tool racecheck $B/w4a16_tests --gtest_filter='*All/W4A16Gemm.*/5:*AutoSplitK*' \
  > "$OUT/racecheck.log" 2>&1; stamp "racecheck rc=$?"
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/racecheck.log" | tail -3 | tee -a "$OUT/summary.txt"
if [ -x $B/w4a16_variants ] && [ "${2:-}" != "novariants" ]; then
  timeout 90 $B/w4a16_variants > "$OUT/variants.log" 2>&1; stamp "variants rc=$?"
fi
timeout 240 $B/w4a16_bench "$OUT/w4a16_bench.json" ${1:-} > "$OUT/bench.log" 2>&1; stamp "bench rc=$?"
# SASS instruction mix of the decode8 NVFP4 kernels (32-row and 64-row configs, no epilogue).
if command -v cuobjdump > /dev/null; then
  cuobjdump -sass $B/w4a16_tests > /tmp/w4_sass.txt 2> /dev/null
  for cfg in ILi4ELi2ELi1ELi4ELi4ELb1EEELb1ELi0E ILi4ELi4ELi1ELi2ELi4ELb1EEELb1ELi0E; do
    awk -v k="DecodeConfig$cfg" '/Function : /{p=index($0, k) > 0} p' /tmp/w4_sass.txt > /tmp/w4_k.txt
    { echo "DecodeConfig$cfg: sass lines $(wc -l < /tmp/w4_k.txt)";
      for op in HMMA HMUL2 LOP3 SHF PRMT IMAD LDG LDS BAR ISETP BRA; do
        echo "  $op $(grep -cE "^\s+/\*[0-9a-f]+\*/\s+(@!?U?P[0-9T] )?$op" /tmp/w4_k.txt)"; done; } \
      >> "$OUT/sass_mix.txt"
  done
fi
cat "$OUT/variants.log" 2>/dev/null
grep -E "auto|device" "$OUT/bench.log"
cat "$OUT/summary.txt"
