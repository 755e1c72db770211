#!/usr/bin/env bash
# GPU machine, one device call: builds the moekit Python package offline from this checkout the way
# a user does (pip install --no-build-isolation ., CUDA kernels included), builds the `moekit` tool
# from the same build tree, then runs the Python test suite (its GPU tests included), the Hugging
# Face drop-in examples and the Python call-overhead benchmark. Logs and JSON go to $OUT (7 files:
# summary.txt, build.log, pytest.log, hf_examples.log/.json, python_overhead.log/.json).
#
#   dev machine:  bash bench/prepare_device_python.sh       (once; prints the carry list)
#   device call:  bash bench/run_device_python.sh           (carry: .deps/devhdr and the CUTLASS
#                                                            include folders, see above)
# Env: PYTHON (default python3, the one with torch), BUDGET seconds for the whole call (default
# 570: a step starts only with time left), PYTEST_ARGS (extra pytest arguments), SKIP_BUILD=1
# (reuse an installed moekit and build-devpy/moekit from an earlier call on a warm machine).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${OUT:-/tmp/moekit-device-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
BUDGET=${BUDGET:-570}
T0=$SECONDS
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
step() { echo "[$((SECONDS - T0))s] $*" | tee -a "$SUMMARY"; }
left() { echo $((BUDGET - (SECONDS - T0))); }
status=0

{
  echo "== env"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  $PY -c "import sys, torch; print(sys.version); print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"
  $PY -c "import nanobind, scikit_build_core; print('nanobind', nanobind.__version__, 'scikit-build-core', scikit_build_core.__version__)"
  $PY -c "import transformers, safetensors, numpy; print('transformers', transformers.__version__, 'numpy', numpy.__version__)"
  cmake --version | head -1; nvcc --version | tail -1
} >>"$SUMMARY" 2>&1

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  # The user path: pip install . (scikit-build-core + nanobind from the machine, no downloads).
  t=$SECONDS
  $PY -m pip install --no-build-isolation --no-deps -v . \
    -C build-dir=build-devpy \
    -C cmake.define.CMAKE_PREFIX_PATH="$REPO/.deps/devhdr" \
    -C cmake.define.CLI11_INCLUDE_DIR="$REPO/.deps/devhdr/include" \
    -C cmake.build-type=Release >"$OUT/build.log" 2>&1
  rc=$?
  step "pip install . rc=$rc ($((SECONDS - t)) s)"
  [ $rc -eq 0 ] || { status=1; tail -30 "$OUT/build.log"; }
  t=$SECONDS
  echo "== moekit tool" >>"$OUT/build.log"
  cmake --build build-devpy --target moekit_cli -j"$(nproc)" >>"$OUT/build.log" 2>&1
  step "moekit tool build rc=$? ($((SECONDS - t)) s)"
fi
export MOEKIT_CLI=$REPO/build-devpy/moekit
step "import moekit: $(cd /tmp && $PY -c 'import moekit; print(moekit.info())' 2>&1 | tail -c 600)"

if [ "$(left)" -gt 60 ]; then
  t=$SECONDS
  # From /tmp: the installed package, not the source tree.
  (cd /tmp && timeout "$(($(left) - 30))" $PY -m pytest -q -rs -p no:cacheprovider \
     "$REPO/tests/python" ${PYTEST_ARGS:-}) >"$OUT/pytest.log" 2>&1
  rc=$?
  step "pytest rc=$rc ($((SECONDS - t)) s): $(tail -1 "$OUT/pytest.log")"
  [ $rc -eq 0 ] || status=1
  grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -20
else
  step "skip pytest (budget)"
fi

if [ "$(left)" -gt 60 ]; then
  t=$SECONDS
  timeout "$(($(left) - 20))" $PY examples/python/hf_qwen3_moe.py --json "$OUT/hf_examples.json" \
    >"$OUT/hf_examples.log" 2>&1
  rc=$?
  step "hf examples rc=$rc ($((SECONDS - t)) s)"
  [ $rc -eq 0 ] || status=1
  grep -E "PASS|FAIL|speed-up" "$OUT/hf_examples.log" | head -40
else
  step "skip hf examples (budget)"
fi

if [ "$(left)" -gt 30 ]; then
  t=$SECONDS
  timeout "$(($(left) - 5))" $PY bench/python_overhead.py --json "$OUT/python_overhead.json" \
    >"$OUT/python_overhead.log" 2>&1
  step "python overhead bench rc=$? ($((SECONDS - t)) s)"
  cat "$OUT/python_overhead.log"
else
  step "skip overhead bench (budget)"
fi
cat "$SUMMARY"
exit $status
