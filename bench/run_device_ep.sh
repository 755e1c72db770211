#!/usr/bin/env bash
# Multi-GPU expert parallelism on a device machine (nvidia-h100-x2/x4/x8 or h200-x*), from
# PREBUILT binaries (builds nothing): the multi-GPU tests at EP 2/4/8 (as many GPUs as the machine
# has), compute-sanitizer memcheck on rank 0, and `moekit bench --ep` for deepseek-v3 fp8_block and
# nvfp4 at 64 and 4096 tokens per rank, JSON and logs into $OUT.
#   BIN=<dir with moekit and moekit_gpu_ep_tests> NCCL_LIB=<dir with libnccl.so.2> \
#     bash bench/run_device_ep.sh
# One process per GPU. Launcher: mpirun when present (NCCL bootstrapped over MPI), else this
# script's file launcher (MOEKIT_RANK / MOEKIT_WORLD_SIZE / MOEKIT_NCCL_ID_FILE: rank 0 writes the
# NCCL unique id to a file) — the device image may have no MPI; build the binaries with
# -DMOEKIT_WITH_MPI=OFF then, so that they need no libmpi. NVLink multicast stays off.
set -u
export NCCL_NVLS_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BIN=${BIN:-.devbin-ep}
OUT=${OUT:-/tmp/ep_out}
mkdir -p "$OUT"
# libnccl.so.2: the one carried (NCCL_LIB), else the image's PyPI nvidia-nccl-cu13, else CUDA's.
if [ -z "${NCCL_LIB:-}" ]; then
  NCCL_LIB=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
fi
export LD_LIBRARY_PATH=${NCCL_LIB:+$NCCL_LIB:}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
GPUS=$(nvidia-smi -L | wc -l)
BUDGET=${BUDGET:-560}
T0=$SECONDS
left() { echo $((BUDGET - (SECONDS - T0))); }
step() { echo "[$((SECONDS - T0))s] $*"; }

# launch N LOG CMD...: one process per GPU, rank r on GPU r; waits, returns the worst exit code.
launch() {
  local n=$1 log=$2; shift 2
  if command -v mpirun >/dev/null && [ -z "${EP_NO_MPI:-}" ]; then
    timeout "$(left)" mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$n" \
      -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH -x MOEKIT_COMM_TIMEOUT_S "$@" >"$log" 2>&1
    return $?
  fi
  local id="$OUT/.nccl_id.$$.$RANDOM" pids=() rc=0
  rm -f "$id"
  for ((r = 0; r < n; r++)); do
    local pre=()
    [ "$r" = 0 ] && [ -n "${SANITIZE_RANK0:-}" ] && pre=(compute-sanitizer --tool memcheck --error-exitcode 9)
    MOEKIT_RANK=$r MOEKIT_LOCAL_RANK=$r MOEKIT_WORLD_SIZE=$n MOEKIT_NCCL_ID_FILE=$id \
      CUDA_VISIBLE_DEVICES=$r timeout "$(left)" "${pre[@]}" "$@" >"$log.rank$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  cat "$log.rank0" >"$log"
  for ((r = 1; r < n; r++)); do grep -E "FAILED|Failure|error" "$log.rank$r" | sed "s/^/[rank $r] /" >>"$log"; done
  rm -f "$log".rank* "$id"
  return $rc
}

export MOEKIT_COMM_TIMEOUT_S=${MOEKIT_COMM_TIMEOUT_S:-120}
for n in 2 4 8; do
  [ "$n" -le "$GPUS" ] || continue
  launch "$n" "$OUT/gpu_ep_tests_np$n.log" "$BIN/moekit_gpu_ep_tests"
  step "gpu_ep_tests np=$n rc=$?"; grep -E "PASSED|FAILED|SKIPPED|ranks failed" "$OUT/gpu_ep_tests_np$n.log" | head -8
done
# compute-sanitizer memcheck on rank 0 (file launcher: the sanitizer wraps rank 0 alone).
EP_NO_MPI=1 SANITIZE_RANK0=1 launch 2 "$OUT/gpu_ep_memcheck_np2.log" "$BIN/moekit_gpu_ep_tests" \
  --gtest_filter='EpGpu.MatchesTheSingleGpuLayer:EpGpu.CollectivesMoveTheRightBytes'
step "memcheck rank0 rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/gpu_ep_memcheck_np2.log" | tail -3
for n in 2 4 8; do
  [ "$n" -le "$GPUS" ] || continue
  [ "$(left)" -gt 60 ] || { step "skip bench np=$n (budget)"; continue; }
  launch "$n" "$OUT/bench_ep$n.log" "$BIN/moekit" bench --ep "$n" --preset deepseek-v3 \
    --quant fp8_block,nvfp4 --tokens 64,4096 --dispatch naive,a2a --reps 20 \
    --json "$OUT/bench_ep$n.json"
  step "bench --ep $n rc=$?"; grep -E "^deepseek" "$OUT/bench_ep$n.log" | head -8
done
