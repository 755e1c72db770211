#!/usr/bin/env bash
# One device call: a GPU test subset, compute-sanitizer memcheck / racecheck on a smaller subset,
# then `moekit bench` runs, all from prebuilt binaries (.devbin-abz/bins.tar.xz: moekit_new,
# moekit_gpu_tests, optionally moekit_old). Each bench argument is one quoted argument list for
# `moekit bench`; prefixed with "old:" it runs moekit_old (an in-run A/B against the old build);
# "bin:NAME:" runs $B/NAME (another variant binary from the archive); leading VAR=value words are
# set in the environment of that run.
#   TESTS=<gtest filter> SAN=<gtest filter> bash bench/run_device_tests_bench.sh "<args>" ...
# A step starts only while less than BUDGET (default 540) seconds have passed. TESTS_LIMIT (default
# 200 s) caps the test step: the whole suite takes longer than that on an H100 (2026-12-05c).
set -u
B=.devbin-ab
mkdir -p $B && tar xJf .devbin-abz/bins.tar.xz -C $B
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
# The JSON records the build's commit when the archive carries one ($B/commit).
[ -f $B/commit ] && export MOEKIT_COMMIT=$(cat $B/commit)
BUDGET=${BUDGET:-540}
T0=$SECONDS
step() { echo "[$((SECONDS - T0))s] $*"; }
left() { echo $((BUDGET - (SECONDS - T0))); }
if [ -n "${TESTS:-}" ]; then
  timeout "${TESTS_LIMIT:-200}" $B/moekit_gpu_tests --gtest_filter="$TESTS" >"$OUT/tests.log" 2>&1
  step "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |tests ran|\[  FAILED  \]|SKIP" "$OUT/tests.log" | head -20
fi
if [ -n "${SAN:-}" ]; then
  for tool in memcheck racecheck; do
    timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 $B/moekit_gpu_tests \
      --gtest_filter="$SAN" >"$OUT/$tool.log" 2>&1
    step "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/$tool.log" | tail -3
  done
fi
n=0
for args in "$@"; do
  n=$((n + 1))
  [ "$(left)" -gt 45 ] || { step "skip bench $n (budget)"; continue; }
  bin=$B/moekit_new
  case "$args" in
    old:*) bin=$B/moekit_old; args=${args#old:} ;;
    bin:*) args=${args#bin:}; bin=$B/${args%%:*}; args=${args#*:} ;;
  esac
  envs=""
  while :; do
    first=${args%% *}
    case "$first" in -*) break ;; *=*) envs="$envs $first"; args=${args#* } ;; *) break ;; esac
  done
  # shellcheck disable=SC2086
  env $envs timeout "$(left)" $bin bench $args --json "$OUT/bench_$n.json" >"$OUT/bench_$n.log" 2>&1
  step "bench $n rc=$?: $envs $(basename $bin) $args"
  grep -E "^(deepseek|qwen3|gpt-oss|mixtral|kimi|llama4)" "$OUT/bench_$n.log" | awk '{print $1, $2, $3, $5, $10, $11, $12}'
done
