#!/usr/bin/env bash
# Dev machine, before bench/run_device_python.sh: the build inputs the GPU machine lacks, into
# ignored folders under .deps/ that the device call carries:
#   .deps/devhdr   nlohmann-json (headers + CMake package) and CLI11 headers (Debian packages here)
#   .deps/cutlass  CUTLASS/CuTe headers (scripts/install_deps.sh puts them there)
# Prints the `carry` list for the device call.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
D=.deps/devhdr
rm -rf "$D" && mkdir -p "$D/include" "$D/share/cmake"
cp -r /usr/include/nlohmann /usr/include/CLI "$D/include/"
cp -r /usr/share/cmake/nlohmann_json "$D/share/cmake/"
test -f .deps/cutlass/cutlass_library/source/include/cutlass/cutlass.h
du -sh "$D" .deps/cutlass/cutlass_library/source/include .deps/cutlass/cutlass_library/source/tools/util/include
echo 'carry: [".deps/devhdr", ".deps/cutlass/cutlass_library/source/include", ".deps/cutlass/cutlass_library/source/tools/util/include"]'
