#!/usr/bin/env bash
# Set-up command 1: install dependencies, build the CLI, and run `moekit run` (its embedded
# default job when no arguments are given). Extra arguments are passed to `moekit run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${MOEKIT_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" --target moekit_cli -j"$(nproc)"
exec "$BUILD_DIR/moekit" run "$@"
