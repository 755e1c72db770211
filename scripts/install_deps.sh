#!/usr/bin/env bash
# Installs what the build needs, from Debian packages (apt-get) and PyPI (pip), only if missing.
# Idempotent and quiet when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
[ -f /usr/include/CLI/CLI.hpp ] || need+=(libcli11-dev)
# MPI (expert parallelism over processes, and the NCCL bootstrap; docs/expert_parallel.md).
command -v mpirun >/dev/null || need+=(openmpi-bin)
[ -f /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] || [ -f /usr/include/mpi.h ] ||
  [ -n "$(find /usr/lib -path '*openmpi/include/mpi.h' -print -quit 2>/dev/null)" ] || need+=(libopenmpi-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "install_deps: apt-get install ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The Python package (python/, tests/python/): nanobind builds the extension, pytest runs its tests,
# numpy is what the tests pass through DLPack; scikit-build-core is `pip install .`'s backend.
if ! python3 -c "import nanobind, pytest, numpy, scikit_build_core" 2>/dev/null; then
  echo "install_deps: pip install nanobind pytest numpy scikit-build-core"
  python3 -m pip install -q --disable-pip-version-check nanobind pytest numpy scikit-build-core
fi

# CUTLASS/CuTe headers (PyPI nvidia-cutlass, --no-deps, build-local) when CUDA is present.
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  if [ ! -f .deps/cutlass/cutlass_library/source/include/cutlass/cutlass.h ]; then
    echo "install_deps: pip install nvidia-cutlass==4.2.0.0 into .deps/cutlass"
    python3 -m pip install -q --no-deps --disable-pip-version-check --target .deps/cutlass \
      nvidia-cutlass==4.2.0.0 || echo "install_deps: CUTLASS unavailable; CUTLASS kernels will be skipped"
  fi
  # NCCL (GPU expert parallelism): headers and libnccl.so.2 from the PyPI wheel, like CUTLASS.
  if [ ! -f .deps/nccl/nvidia/nccl/include/nccl.h ]; then
    echo "install_deps: pip install nvidia-nccl-cu13==2.32.6 into .deps/nccl"
    python3 -m pip install -q --no-deps --disable-pip-version-check --target .deps/nccl \
      nvidia-nccl-cu13==2.32.6 || echo "install_deps: NCCL unavailable; GPU expert parallelism will be skipped"
  fi
fi
