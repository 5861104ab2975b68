#!/usr/bin/env bash
# Builds oink's release wheels into DIR (default dist/), from this checkout, against the torch of
# the current Python (no build isolation: torch is large, and its stable ABI makes the build's
# torch version irrelevant to users from 2.10 on):
#   oink_kernels-<v>+cu<XYZ>-py3-none-manylinux_2_<N>_x86_64.whl  CUDA kernels (when nvcc is found)
#   oink_kernels-<v>+cpu-py3-none-manylinux_2_<N>_x86_64.whl      CPU kernels only
# Each is tagged manylinux by `auditwheel repair`, which grafts nothing: the only libraries
# outside the manylinux policy are torch's (libtorch_cpu.so, libtorch_cuda.so), which the
# installed torch provides, so they are excluded. tools/check_wheel.py then checks each wheel
# (auditwheel's symbol policy, contents, licence, no libpython), with twine and
# check-wheel-contents. Needs requirements-dev.txt. Compiler warnings are errors here.
#
#   bash tools/build_wheels.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-dist}")
mkdir -p "$out"
rm -f "$out"/oink_kernels-*.whl

flavours=(cpu)
if command -v nvcc >/dev/null; then
  cuda=$(nvcc --version | sed -nE 's/.*release ([0-9]+)\.([0-9]+).*/\1\2/p')
  flavours=("cu$cuda" cpu)
else
  echo "build_wheels: no nvcc on PATH: building the CPU wheel only"
fi

for flavour in "${flavours[@]}"; do
  with_cuda=ON
  [ "$flavour" = cpu ] && with_cuda=OFF
  work=build/wheels/$flavour
  rm -rf "$work/raw" "$work/repaired" "$work/unpacked"
  mkdir -p "$work/raw" "$work/repaired" "$work/unpacked"
  echo "== building the $flavour wheel [$(date -u +%T)]"
  python3 -m pip wheel . -q --no-build-isolation --no-deps -w "$work/raw" \
    -C build-dir="build/$flavour" -C cmake.define.OINK_WITH_CUDA=$with_cuda \
    -C cmake.define.OINK_WERROR=ON
  python3 -m auditwheel repair -w "$work/repaired" \
    --exclude libtorch_cpu.so --exclude libtorch_cuda.so "$work"/raw/*.whl 2>&1 | tail -1
  # The local version says what the wheel holds (+cu130, +cpu).
  python3 -m wheel unpack -d "$work/unpacked" "$work"/repaired/*.whl >/dev/null
  python3 -m wheel pack --local-version "$flavour" -d "$out" "$work"/unpacked/* >/dev/null
done

wheels=("$out"/oink_kernels-*.whl)
python3 -m twine check --strict "${wheels[@]}"
python3 -m check_wheel_contents "${wheels[@]}"
python3 tools/check_wheel.py "${wheels[@]}"
ls -l "${wheels[@]}"
