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

# The environments below hold CUDA builds of torch from PyPI (download.pytorch.org, with the
# smaller CPU builds, is not reachable from CI), about 4.5 GB each with the nvidia-* libraries.
# CI's disk is not always large, so they are built one at a time, without pip's wheel cache, and
# each is removed once its tests have run: at most one of them is on disk at any time.
fresh_venv() {  # fresh_venv DIR [venv options...]: an empty virtual environment at DIR
  local dir=$1
  shift
  rm -rf "$dir"
  python3 -m venv "$@" "$dir"
}
free_disk() { df -h --output=avail "$PWD" | tail -1 | tr -d ' '; }

step "vLLM plugin tests (vLLM 0.26.0, the newest release pinned to torch 2.11 with vllm.ir)"
# vLLM 0.26.0 pins torch 2.11.0, the torch of requirements-dev.txt installed above: the
# environment sees that torch (--system-site-packages) rather than installing a second copy.
# Its own site-packages come first, so the oink it imports is the wheel installed into it.
VLLM_VENV=$PWD/build/vllm-venv
echo "disk free: $(free_disk)"
fresh_venv "$VLLM_VENV" --system-site-packages
"$VLLM_VENV/bin/pip" install -q --no-cache-dir "vllm==0.26.0" pytest
"$VLLM_VENV/bin/python" -c "import torch, vllm; assert torch.__version__.split('+')[0] == '2.11.0'; assert vllm.__version__ == '0.26.0'"
# The wheel built above (against torch 2.11, as vLLM 0.26.0 pins), as a vLLM user installs it.
"$VLLM_VENV/bin/pip" install -q --no-cache-dir --no-deps --force-reinstall "$WHEEL"
"$VLLM_VENV/bin/python" -c "import oink, os, sys; assert os.path.dirname(oink.__file__).startswith(sys.prefix), oink.__file__"
"$VLLM_VENV/bin/python" -m pytest tests/python/test_vllm_plugin.py -q -p no:cacheprovider
rm -rf "$VLLM_VENV"

# The same wheel in fresh environments with only torch: 2.10.0, the oldest torch its stable ABI
# targets (TORCH_TARGET_VERSION), and 2.15.0, the newest torch release on PyPI when this was
# written (`pip index versions torch`, 2026-11-30); pinned so that CI is reproducible.
for torch_version in 2.10.0 2.15.0; do
  step "wheel smoke test with torch $torch_version"
  venv=$PWD/build/smoke-torch-$torch_version
  echo "disk free: $(free_disk)"
  fresh_venv "$venv"
  "$venv/bin/pip" install -q --no-cache-dir "torch==$torch_version"
  "$venv/bin/python" -c "import torch; assert torch.__version__.split('+')[0] == '$torch_version'"
  "$venv/bin/pip" install -q --no-cache-dir --no-deps "$WHEEL"
  "$venv/bin/python" tests/smoke/smoke_ops.py
  rm -rf "$venv"
done
step "all tests passed"
