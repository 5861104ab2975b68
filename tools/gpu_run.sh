#!/usr/bin/env bash
# One job on a GPU machine (torch and the CUDA toolkit installed, no network needed): build and
# install oink from this tree, run the GPU test suite, compute-sanitizer over oink's launches and
# the benchmark's reference run. Logs and a summary go to $OUT (default ./out).
#
#   tools/gpu_run.sh [STAGE ...]     stages, in this order: build sanitize test bench ab e2e
#                                    (default: build sanitize test bench)
#   build     pip install . with warnings as errors (BUILD_GENCODE="-gencode=arch=compute_90a,
#             code=sm_90a" builds one target instead of all of CMakeLists.txt's)
#   sanitize  compute-sanitizer memcheck, racecheck and synccheck over tools/sanitize_cases.py,
#             at once and beside the tests (SANITIZE_TOOLS="memcheck synccheck": some of them;
#             SANITIZE_OPS=inference|training|backward|long|layernorm|rows: some of the cases)
#   test      pytest on the GPU: tests/python, PYTEST_WORKERS pytest-xdist workers (default: one
#             per 20 GiB of GPU memory, 2 to 8: 3 on an H100, 7 on an H200; 8 workers on an H100
#             ran 151 cases out of memory);
#             the cases of several GiB run on one worker, one at a time (--dist loadgroup,
#             tests/python/conftest.py), then what failed again one at a time (a case can fail
#             for memory another worker holds). PYTEST_K="not cpu": a -k selection
#   bench     the reference run: oink-bench over every suite into $OUT/bench (BENCH_ARGS: other
#             arguments, e.g. "--suite decode --quick"); with the peers of ./.peers when that
#             folder exists (tools/peers.py), else the installed ones
#   ab        this tree (B) against .ab-ref (A, made by tools/ab_prepare.sh REF): both built once
#             as wheels, then installed in turns A B A B, each measured with AB_ARGS (default
#             "--suite decode --no-plots"); tools/bench_compare.py prints the comparison
#   e2e       tools/e2e.py into $OUT/e2e (E2E_ARGS: its arguments, e.g. "--models llama3-8b
#             --parts tokens,decode"; a later call's "--append" merges into one report), with
#             Liger installed from ./.peers/wheels when that folder holds its wheel
#
# Needs pytest, pytest-xdist, tabulate, tqdm and matplotlib (the bench extra and
# requirements-dev.txt). One stage a call where a call is limited to 10 minutes: the test stage
# ran the suite's 3,308 CUDA cases in 313 s at 8 workers on an H100 (PYTEST_K="not cpu" leaves
# out the CPU cases CI runs), and beside the sanitizers it is slower still.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
STAGES=" ${*:-build sanitize test bench} "
SUMMARY=$OUT/summary.txt
export PYTHONUNBUFFERED=1
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
has() { [[ $STAGES == *" $1 "* ]]; }

note "== $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
note "$(python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)')"

install() { # SOURCE_DIR LOG [extra pip args]
  local src=$1 log=$2 && shift 2
  local flags=(-C cmake.define.OINK_WERROR=ON)
  [[ -n ${BUILD_GENCODE:-} ]] && flags+=(-C "cmake.define.OINK_CUDA_GENCODE=$BUILD_GENCODE")
  python3 -m pip "$@" --no-build-isolation --no-deps -v "${flags[@]}" "$src" >"$log" 2>&1
}

if has build; then
  start=$SECONDS
  if install . "$OUT/build.log" install; then
    note "build: ok ($((SECONDS - start)) s)"
  else
    note "build: FAILED (see build.log)" && tail -30 "$OUT/build.log" && exit 1
  fi
fi

sanitize() { # TOOL: racecheck and synccheck look at one CTA's shared memory and barriers, which
  # PDL does not change, so they take one PDL setting and one x dtype per element size.
  local tool=$1 start=$SECONDS args=(--pdl both --dtypes all)
  [[ $tool != memcheck ]] && args=(--pdl on --dtypes sizes)
  # No caching allocator: memcheck then sees every allocation's own bounds.
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool "$tool" --error-exitcode 9 \
    python3 tools/sanitize_cases.py "${args[@]}" --ops "${SANITIZE_OPS:-all}" >"$OUT/sanitize-$tool.log" 2>&1
  note "sanitizer $tool: rc=$? ($((SECONDS - start)) s) $(grep -E 'ERROR SUMMARY' "$OUT/sanitize-$tool.log" | tail -1)"
}
pids=()
if has sanitize; then
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
    sanitize "$tool" &
    pids+=($!)
  done
fi

default_workers() { # one pytest-xdist worker per 20 GiB of the GPU's memory, 2 to 8
  local mib
  mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
  local workers=$((${mib:-40960} / 20480))
  echo $((workers < 2 ? 2 : workers > 8 ? 8 : workers))
}

if has test; then
  start=$SECONDS
  cache=(-o cache_dir=/tmp/oink-pytest-cache)
  python3 -m pytest tests/python -q "${cache[@]}" --durations=15 \
    -n "${PYTEST_WORKERS:-$(default_workers)}" --dist loadgroup \
    ${PYTEST_K:+-k "$PYTEST_K"} >"$OUT/tests.log" 2>&1
  rc=$?
  note "tests: rc=$rc ($((SECONDS - start)) s) $(tail -1 "$OUT/tests.log")"
  if ((rc == 1)); then
    # Workers share one GPU: a case can fail for memory another worker holds (an H100 run failed
    # 175 cases at 6 workers, all of which passed alone). The failures run again, one at a time;
    # only what fails alone is a failure.
    start=$SECONDS
    python3 -m pytest tests/python -q "${cache[@]}" --last-failed --last-failed-no-failures none >"$OUT/tests-alone.log" 2>&1
    note "failures run alone: rc=$? ($((SECONDS - start)) s) $(tail -1 "$OUT/tests-alone.log")"
    grep -E "^(FAILED|ERROR)" "$OUT/tests-alone.log" | head -20 | tee -a "$SUMMARY"
  fi
fi

# Each sanitizer's log goes straight to $OUT: a call stopped at its time limit still brings back
# what the tools reported so far.
((${#pids[@]})) && wait "${pids[@]}"

bench() { # OUT_DIR ARGS...: the peers of ./.peers when there, else the installed ones
  local dir=$1 && shift
  if [[ -d .peers ]]; then
    python3 tools/peers.py .peers -- run --out "$dir" "$@"
  else
    python3 -m oink.bench run --out "$dir" "$@"
  fi
}

if has bench; then
  start=$SECONDS
  # shellcheck disable=SC2086
  bench "$OUT/bench" ${BENCH_ARGS:-} >"$OUT/bench.log" 2>&1
  note "bench: rc=$? ($((SECONDS - start)) s), $OUT/bench/results.md"
fi

if has ab; then
  [[ -f .ab-ref/REVISION ]] || { note "ab: no .ab-ref (tools/ab_prepare.sh REF)"; exit 1; }
  rm -rf /tmp/ab-wheels && mkdir -p /tmp/ab-wheels/A /tmp/ab-wheels/B
  if ! install .ab-ref "$OUT/ab-build-A.log" wheel -w /tmp/ab-wheels/A ||
    ! install . "$OUT/ab-build-B.log" wheel -w /tmp/ab-wheels/B; then
    note "ab: build FAILED" && exit 1
  fi
  # shellcheck disable=SC2086
  for turn in A1 B1 A2 B2; do
    python3 -m pip install -q --no-deps --force-reinstall /tmp/ab-wheels/"${turn:0:1}"/*.whl &&
      bench "$OUT/ab/$turn" ${AB_ARGS:---suite decode --no-plots} >>"$OUT/ab.log" 2>&1
  done
  python3 tools/bench_compare.py "$OUT"/ab/A1 "$OUT"/ab/A2 -- "$OUT"/ab/B1 "$OUT"/ab/B2 |
    tee "$OUT/ab.txt"
  note "ab: $(cat .ab-ref/REVISION) (A) against this tree (B): $OUT/ab.txt"
fi

if has e2e; then
  start=$SECONDS
  for wheel in .peers/wheels/liger_kernel-*.whl; do
    [[ -f $wheel ]] && python3 -m pip install -q --no-deps --no-index "$wheel" >"$OUT/e2e-pip.log" 2>&1
  done
  # shellcheck disable=SC2086
  python3 tools/e2e.py --out "$OUT/e2e" ${E2E_ARGS:-} >"$OUT/e2e.log" 2>&1
  note "e2e: rc=$? ($((SECONDS - start)) s), $OUT/e2e/e2e.md"
fi
