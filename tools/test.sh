#!/usr/bin/env bash
# The test command: installs oink, then runs formatting checks, the C++ tests (CTest), the Python
# tests (CPU here; the same tests run on CUDA when a GPU is present) and the vLLM plugin tests
# against a pinned vLLM in its own virtual environment (vLLM pins its own torch).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo; echo "== $*  [$(date -u +%T)]"; }

step "install"
bash tools/install.sh

step "format and lint"
ruff check python tests tools
ruff format --check python tests tools
clang-format --dry-run --Werror $(git ls-files 'csrc/*' 'tests/cpp/*' 'bench/*.cu' 'bench/*.h')

step "C++ tests"
cmake -S . -B build/cpp-tests -G Ninja -DOINK_BUILD_EXTENSION=OFF -DOINK_WITH_CUDA=OFF \
  -DOINK_BUILD_TESTS=ON -DOINK_WERROR=ON >/dev/null
cmake --build build/cpp-tests
ctest --test-dir build/cpp-tests --output-on-failure

step "Python tests"
python3 -m pytest tests/python -q -p no:cacheprovider --ignore=tests/python/test_vllm_plugin.py

step "vLLM plugin tests (vLLM 0.26.0, the newest release pinned to torch 2.11 with vllm.ir)"
VLLM_VENV=${VLLM_VENV:-$PWD/build/vllm-venv}
if [ ! -x "$VLLM_VENV/bin/python" ]; then
  python3 -m venv "$VLLM_VENV"
  "$VLLM_VENV/bin/pip" install -q "vllm==0.26.0" "scikit-build-core>=0.10" cmake ninja pytest
fi
"$VLLM_VENV/bin/python" -c "import torch, vllm; assert torch.__version__.split('+')[0] == '2.11.0'; assert vllm.__version__ == '0.26.0'"
PATH="$VLLM_VENV/bin:$PATH" "$VLLM_VENV/bin/pip" install -q --no-build-isolation --no-deps \
  -C build-dir=build/vllm-venv-build .
"$VLLM_VENV/bin/python" -m pytest tests/python/test_vllm_plugin.py -q -p no:cacheprovider
step "all tests passed"
