#!/usr/bin/env bash
# Installs oink and its development dependencies into the current Python (torch pinned in
# requirements-dev.txt): builds the release wheels (tools/build_wheels.sh: CUDA kernels when
# nvcc is found, and the CPU build) into dist/, then installs the one this machine can use best,
# as a user would, with --no-deps so that the pinned torch stays.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-cache-dir -r requirements-dev.txt
# Before the rename to oink-kernels the distribution was "oink": remove it, so that only one
# distribution owns the oink package.
if python3 -m pip show -q oink >/dev/null 2>&1; then python3 -m pip uninstall -q -y oink; fi
bash tools/build_wheels.sh dist
wheels=(dist/oink_kernels-*+cu*.whl)
[ -e "${wheels[0]}" ] || wheels=(dist/oink_kernels-*+cpu-*.whl)
python3 -m pip install -q --no-deps --force-reinstall "${wheels[0]}"
python3 -m oink
