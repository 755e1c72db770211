#!/usr/bin/env bash
# The user path of the Python package, checked the way a user meets it: a clean clone of this
# repository, `pip install .` into a fresh virtual environment, `import moekit`. CPU-only by
# default (about 2 min on 2 cores); MOEKIT_CUDA=AUTO builds the CUDA kernels too (much longer).
# Offline: uses the scikit-build-core and nanobind already installed (scripts/install_deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
git clone -q . "$WORK/src"
python3 -m venv --system-site-packages "$WORK/venv"
start=$SECONDS
"$WORK/venv/bin/pip" install -q --no-build-isolation --disable-pip-version-check \
  -C cmake.define.MOEKIT_CUDA="${MOEKIT_CUDA:-OFF}" "$WORK/src"
echo "pip install . took $((SECONDS - start)) s"
(cd "$WORK" && "$WORK/venv/bin/python" -c "import moekit; print(moekit.info())")
