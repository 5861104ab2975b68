#!/usr/bin/env bash
# Installs oink and its development dependencies into the current Python (torch pinned in
# requirements-dev.txt). On a machine with nvcc the CUDA kernels are built too; without it,
# the CPU kernels only.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -r requirements-dev.txt
python3 -m pip install -q --no-build-isolation --no-deps .
python3 -c "import oink; print('oink', oink.__version__, 'installed')"
