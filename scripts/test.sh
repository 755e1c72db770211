#!/usr/bin/env bash
# Set-up command 2: install dependencies, build everything (warnings as errors) and run every test.
# GPU tests (CTest label "gpu") run where a CUDA device is present and are reported as skipped
# elsewhere. The Python package's extension is a target of the same build (MOEKIT_BUILD_PYTHON), and
# its pytest suite (tests/python) runs as the CTest test Python.pytest against <build>/python.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_WERROR=ON \
  -DMOEKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE="$(command -v python3)" ${MOEKIT_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" "$@"
