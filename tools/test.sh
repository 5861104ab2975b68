#!/usr/bin/env bash
# The test command: installs oink, then runs formatting checks, the C++ tests (CTest), the Python
# tests (CPU here; the same tests run on CUDA when a GPU is present), builds the one
# oink-kernels wheel, and runs the vLLM plugin tests against a pinned vLLM in its own virtual
# environment (vLLM pins its own torch) and a smoke test of the wheel in fresh environments with
# the oldest and the newest torch it serves. Warnings are errors here (OINK_WERROR=ON).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo; echo "== $*  [$(date -u +%T)]"; }

step "install"
bash tools/install.sh

step "format and lint"
ruff check python tests tools
ruff format --check python tests tools
git ls-files -z 'csrc/*' 'tests/cpp/*' 'bench/*.cu' 'bench/*.h' | xargs -0 clang-format --dry-run --Werror
# The README's links stay inside the repository and point at files that exist.
grep -oE '\]\([^)#]+' README.md | cut -c3- | sort -u | while read -r link; do
  case $link in ../* | /* | *:*) echo "README.md links outside the repository: $link"; exit 1 ;; esac
  [ -e "$link" ] || { echo "README.md: broken link $link"; exit 1; }
done

step "C++ tests (under AddressSanitizer and UndefinedBehaviorSanitizer)"
cmake -S . -B build/cpp-tests -G Ninja -DOINK_BUILD_EXTENSION=OFF -DOINK_WITH_CUDA=OFF \
  -DOINK_BUILD_TESTS=ON -DOINK_WERROR=ON -DOINK_SANITIZE_HOST=ON >/dev/null
cmake --build build/cpp-tests
ctest --test-dir build/cpp-tests --output-on-failure

step "Python tests"
python3 -m pytest tests/python -q -p no:cacheprovider --ignore=tests/python/test_vllm_plugin.py

step "wheel: one py3-none wheel for every Python and every torch >= 2.10"
# Same config settings as tools/install.sh, so this reuses its build directory
# (build/py3-none-<platform>): nothing is compiled again.
rm -rf build/wheel
python3 -m pip wheel -q . --no-build-isolation --no-deps -C cmake.define.OINK_WERROR=ON \
  -w build/wheel
wheels=(build/wheel/*.whl)
python3 tools/check_wheel.py "${wheels[@]}"  # fails unless there is exactly one
WHEEL=${wheels[0]}

step "vLLM plugin tests (vLLM 0.26.0, the newest release pinned to torch 2.11 with vllm.ir)"
VLLM_VENV=${VLLM_VENV:-$PWD/build/vllm-venv}
if [ ! -x "$VLLM_VENV/bin/python" ]; then
  python3 -m venv "$VLLM_VENV"
  "$VLLM_VENV/bin/pip" install -q "vllm==0.26.0" pytest
fi
"$VLLM_VENV/bin/python" -c "import torch, vllm; assert torch.__version__.split('+')[0] == '2.11.0'; assert vllm.__version__ == '0.26.0'"
# The wheel built above (against torch 2.11, as vLLM 0.26.0 pins), as a vLLM user installs it
# (an environment made before the rename may hold the old "oink" distribution: removed).
if "$VLLM_VENV/bin/pip" show -q oink >/dev/null 2>&1; then
  "$VLLM_VENV/bin/pip" uninstall -q -y oink
fi
"$VLLM_VENV/bin/pip" install -q --no-deps --force-reinstall "$WHEEL"
"$VLLM_VENV/bin/python" -m pytest tests/python/test_vllm_plugin.py -q -p no:cacheprovider

# The same wheel in fresh environments with only torch: 2.10.0, the oldest torch its stable ABI
# targets (TORCH_TARGET_VERSION), and 2.15.0, the newest torch release on PyPI when this was
# written (`pip index versions torch`, 2026-11-30); pinned so that CI is reproducible. PyPI's
# Linux torch wheels are CUDA builds and bring the nvidia-* CUDA libraries (download.pytorch.org,
# with the smaller CPU builds, is not reachable from CI); the environments are kept in build/.
for torch_version in 2.10.0 2.15.0; do
  step "wheel smoke test with torch $torch_version"
  venv=$PWD/build/smoke-torch-$torch_version
  check_torch="import torch; assert torch.__version__.split('+')[0] == '$torch_version'"
  if ! "$venv/bin/python" -c "$check_torch" 2>/dev/null; then
    python3 -m venv --clear "$venv"
    "$venv/bin/pip" install -q "torch==$torch_version"
    "$venv/bin/python" -c "$check_torch"
  fi
  "$venv/bin/pip" install -q --no-deps --force-reinstall "$WHEEL"
  "$venv/bin/python" tests/smoke/smoke_ops.py
done
step "all tests passed"
