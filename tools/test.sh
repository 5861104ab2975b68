#!/usr/bin/env bash
# The test command: installs oink (tools/install.sh: builds the CUDA and CPU release wheels and
# installs the first), then runs the formatting checks, the C++ tests (CTest), the planner-check
# mutation test, the Python tests (CPU here; the same tests run on CUDA when a GPU is present),
# the vLLM plugin tests against the vLLM releases the [vllm] extra allows, each in its own
# virtual environment (vLLM pins its own torch), the SGLang integration tests in another, and a
# smoke test of both wheels in fresh environments with the oldest and the newest torch they
# serve. Warnings are errors here.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo; echo "== $*  [$(date -u +%T)]"; }

step "install: release wheels built, checked (auditwheel, twine, check-wheel-contents) and installed"
bash tools/install.sh
CUDA_WHEEL=$(ls dist/oink_kernels-*+cu*.whl 2>/dev/null || true)
CPU_WHEEL=$(ls dist/oink_kernels-*+cpu-*.whl)
WHEEL=${CUDA_WHEEL:-$CPU_WHEEL}

step "format and lint"
ruff check python tests tools
ruff format --check python tests tools
git ls-files -z 'csrc/*' 'tests/cpp/*' | xargs -0 clang-format --dry-run --Werror
# Links in the README and docs stay inside the repository and point at files that exist.
for doc in README.md docs/*.md; do
  { grep -oE '\]\([^)#]+' "$doc" || true; } | cut -c3- | sort -u | while read -r link; do
    case $link in http*) continue ;; ../../* | /*) echo "$doc links outside the repository: $link"; exit 1 ;; esac
    target=$link
    [ "$doc" = README.md ] || target=docs/$link
    [ -e "$target" ] || { echo "$doc: broken link $link"; exit 1; }
  done
done

step "C++ tests (under AddressSanitizer and UndefinedBehaviorSanitizer)"
cmake -S . -B build/cpp-tests -G Ninja -DOINK_BUILD_EXTENSION=OFF -DOINK_WITH_CUDA=OFF \
  -DOINK_BUILD_TESTS=ON -DOINK_WERROR=ON -DOINK_SANITIZE_HOST=ON >/dev/null
cmake --build build/cpp-tests
ctest --test-dir build/cpp-tests --output-on-failure

step "every planner check has a test that fails without it (each removed in turn)"
python3 tools/check_planner_checks.py

step "Python tests (the installed wheel)"
python3 -m pytest tests/python -q -p no:cacheprovider --ignore=tests/python/test_vllm_plugin.py

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

vllm_tests() {  # vllm_tests VLLM_VERSION TORCH_VERSION [venv options...]
  local vllm_version=$1 torch_version=$2 venv=$PWD/build/vllm-venv
  shift 2
  step "vLLM plugin tests (vLLM $vllm_version, torch $torch_version)"
  echo "disk free: $(free_disk)"
  fresh_venv "$venv" "$@"
  "$venv/bin/pip" install -q --no-cache-dir "vllm==$vllm_version" pytest
  "$venv/bin/python" -c "import torch, vllm; assert torch.__version__.split('+')[0] == '$torch_version'; assert vllm.__version__ == '$vllm_version'"
  # The wheel as a vLLM user installs it, beside vLLM's torch.
  "$venv/bin/pip" install -q --no-cache-dir --no-deps --force-reinstall "$WHEEL"
  "$venv/bin/python" -c "import oink, os, sys; assert os.path.dirname(oink.__file__).startswith(sys.prefix), oink.__file__"
  "$venv/bin/python" -m pytest tests/python/test_vllm_plugin.py -q -p no:cacheprovider
  rm -rf "$venv"
}
# 0.26.0 pins torch 2.11.0, requirements-dev.txt's: the environment sees that torch
# (--system-site-packages) instead of installing a second copy; its own site-packages come
# first, so the oink it imports is the wheel installed into it. 0.33.0 is the newest release
# that installs from PyPI (0.34.0 pins a flashinfer release PyPI does not have); it pins
# torch 2.14.0, which shares the stable ABI of 2.10 that oink is built against.
vllm_tests 0.26.0 2.11.0 --system-site-packages
vllm_tests 0.33.0 2.14.0

sglang_tests() {  # sglang_tests SGLANG_VERSION TORCH_VERSION [venv options...]
  local sglang_version=$1 torch_version=$2 venv=$PWD/build/sglang-venv
  shift 2
  step "SGLang integration tests (SGLang $sglang_version, torch $torch_version)"
  echo "disk free: $(free_disk)"
  # Its environment takes about 11 GB: on a smaller disk the step says so and is skipped.
  if [ "$(df -B1G --output=avail "$PWD" | tail -1 | tr -d ' ')" -lt 16 ]; then
    echo "SKIPPED: SGLang's environment needs about 11 GB and this disk has $(free_disk) free"
    return 0
  fi
  fresh_venv "$venv" "$@"
  "$venv/bin/pip" install -q --no-cache-dir "sglang==$sglang_version" pytest
  "$venv/bin/python" -c "import torch, sglang; assert torch.__version__.split('+')[0] == '$torch_version'; assert sglang.__version__ == '$sglang_version'"
  # The wheel as an SGLang user installs it, beside SGLang's torch.
  "$venv/bin/pip" install -q --no-cache-dir --no-deps --force-reinstall "$WHEEL"
  "$venv/bin/python" -c "import oink, os, sys; assert os.path.dirname(oink.__file__).startswith(sys.prefix), oink.__file__"
  "$venv/bin/python" -m pytest tests/python/test_sglang_plugin.py -q -p no:cacheprovider
  rm -rf "$venv"
}
# 0.5.23 pins torch 2.14.1 (stable ABI of 2.10, as above) and brings its CUDA kernel packages
# (flashinfer, sgl-kernel, deep-gemm, the CUDA 13 toolkit wheels): about 11 GB installed, more
# than a vLLM environment, still one environment on disk at a time. 4 min to install on a
# 2-core machine with PyPI close by.
sglang_tests 0.5.23 2.14.1

# Both wheels in fresh environments with only torch: 2.10.0, the oldest torch their stable ABI
# targets (TORCH_TARGET_VERSION), and 2.15.0, the newest torch release on PyPI when this was
# written (`pip index versions torch`); pinned so that CI is reproducible.
for torch_version in 2.10.0 2.15.0; do
  venv=$PWD/build/smoke-torch-$torch_version
  step "wheel smoke tests with torch $torch_version"
  echo "disk free: $(free_disk)"
  fresh_venv "$venv"
  "$venv/bin/pip" install -q --no-cache-dir "torch==$torch_version"
  "$venv/bin/python" -c "import torch; assert torch.__version__.split('+')[0] == '$torch_version'"
  for wheel in $CUDA_WHEEL $CPU_WHEEL; do
    echo "-- $(basename "$wheel")"
    "$venv/bin/pip" install -q --no-cache-dir --no-deps --force-reinstall "$wheel"
    "$venv/bin/python" tests/smoke/smoke_ops.py
  done
  rm -rf "$venv"
done
step "all tests passed"
