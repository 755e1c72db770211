#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer (CI runs it after
# scripts/test.sh). A CPU-only build in its own directory (build-sanitize), compiled with
# -fno-sanitize-recover=all and run with halt_on_error, so that any report fails the run; the
# safetensors fuzzer gets a larger budget here than in the plain suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
BUILD_DIR=${SANITIZE_BUILD_DIR:-build-sanitize}
# -O1 -g1 (line tables for the reports, asserts on) compiles in about half the time of -O2 -g.
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DMOEKIT_CUDA=OFF -DMOEKIT_SANITIZE=ON \
      -DMOEKIT_WERROR=ON >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export MOEKIT_FUZZ_CASES=${MOEKIT_FUZZ_CASES:-200000}
export MOEKIT_FUZZ_SECONDS=${MOEKIT_FUZZ_SECONDS:-60}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" "$@"
