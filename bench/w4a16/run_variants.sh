#!/bin/bash
# Device call: decode-variant sweep + ncu of the decode8 kernel + its SASS. Logs under $OUT.
set -u
B=.devbin-w4
OUT=${OUT:-/tmp/w4out}; mkdir -p "$OUT"
timeout 200 $B/w4a16_variants > "$OUT/variants.log" 2>&1; echo "variants rc=$?"
timeout 150 ncu --clock-control none --kernel-name regex:w4a16 --launch-count 4 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
  --section LaunchStats --section MemoryWorkloadAnalysis --section InstructionStats \
  $B/w4a16_variants profile > "$OUT/ncu.txt" 2>&1; echo "ncu rc=$?"
cuobjdump --dump-sass -fun '_ZN6moekit4gemm10sm90_w4a1625w4a16_grouped_gemm_kernelINS1_10TileConfigILi2ELi1ELi4ELi1ELi1ELi8EEELb1ELi0ELb0EEEvNS1_6ParamsE' $B/w4a16_variants > "$OUT/sass_decode8.txt" 2>&1
wc -l "$OUT/sass_decode8.txt"
cat "$OUT/variants.log"
grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Issue Slots Busy|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Eligible Warps|No Eligible|One or More|Block Limit" "$OUT/ncu.txt" | head -80
