#!/usr/bin/env bash
# Installs oink and its development dependencies into the current Python (torch pinned in
# requirements-dev.txt). On a machine with nvcc the CUDA kernels are built too; without it,
# the CPU kernels only.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-cache-dir -r requirements-dev.txt
# Before the rename to oink-kernels the distribution was "oink": remove it, so that only one
# distribution owns the oink package.
if python3 -m pip show -q oink >/dev/null 2>&1; then python3 -m pip uninstall -q -y oink; fi
# A development build: compiler warnings are errors (OINK_WERROR, off for users' builds).
# tools/test.sh builds the wheel with the same settings, which reuses this build directory.
python3 -m pip install -q --no-build-isolation --no-deps -C cmake.define.OINK_WERROR=ON .
python3 -c "import oink; print('oink', oink.__version__, 'installed')"
