#!/usr/bin/env bash
# One call on a GPU machine (preinstalled torch + CUDA toolkit, no network): build oink, run the
# test suite on the GPU, compute-sanitizer over a representative subset, the benchmark; logs and a
# summary go to $OUT (default ./out).
#
#   tools/gpu_run.sh [STAGE ...]     stages: build sanitize test kernels schedules profile bench
#                                    training ab ptx nocuda (not in the default list: training
#                                    is the training bench, ab builds two trees of its own, the
#                                    others reinstall oink)
#                                    ab: this tree against .ab-ref (tools/ab_prepare.sh REF),
#                                    AB_ARGS="--suite ..." in turns A B A B (bench_ab.py)
#                                    ptx: a PTX-only build (compute_90, no SASS), JIT-compiled by
#                                    the driver, tested with PDL on and off; nocuda: a build
#                                    without CUDA kernels meeting CUDA tensors
#                                    (schedules: oink_schedule_sweep, oink_latency_floors and
#                                    oink_backward_sweep)
#                                    (default: all; they run in this order, the sanitizer first
#                                    so that a run cut off by the time limit still has it)
#   BENCH_ARGS="--suite decode,dsv3,quack --op all" tools/gpu_run.sh bench   # one run; default:
#                                    `--matrix` (bf16 decode in 3 regimes, mid, large, long
#                                    rows; fp16, fp32 weight, padded rows), with the peers kit
#                                    of .peers when it is there
#   BENCH_TIMEOUT=480 tools/gpu_run.sh build bench   # the matrix cut off at 480 s; then, with
#                                    bench.tar.gz unpacked into out/ref and carried (carry:
#                                    ["out", ".peers"]):
#   BENCH_RESUME=out/ref tools/gpu_run.sh build bench  # the parts it left (oink-bench --resume)
#   PYTEST_K="not cpu" tools/gpu_run.sh test      # a pytest -k selection (default: everything)
#   PYTEST_WORKERS=4 tools/gpu_run.sh test       # pytest-xdist workers per GPU (default: one
#                                    process; eight ran a 141 GB card out of memory)
#   TEST_FILES="tests/python/test_layernorm.py" tools/gpu_run.sh test   # some files (default:
#                                    tests/python; one GPU)
#   TEST_SHARD=1/2 tools/gpu_run.sh build sanitize test   # one share of the tests (pytest
#                                    --shard K/N: every N-th test), so that N calls, each
#                                    beside a sanitizer run, cover the suite
#   BUILD_GENCODE="-gencode=arch=compute_90a,code=sm_90a" tools/gpu_run.sh build test  # one
#                                    target (default: the six of CMakeLists.txt)
#   SANITIZE_OPS=training tools/gpu_run.sh sanitize   # sanitize_cases.py --ops (default all:
#                                    inference, training, backward; memcheck over training took
#                                    24 s on an H200; `long`: the inference ops on rows of several
#                                    slices only, the cluster and two-pass kernels)
#   SANITIZE_TOOLS="memcheck synccheck" tools/gpu_run.sh sanitize   # some of the three tools
#                                    (default all; racecheck is the slow one, and only shared
#                                    memory changes need it)
#
# Time on one H200 (2026-12-01): build 52 s (six targets; an sm_90a-only pip install 39 s),
# sanitize 442 s with every dtype (memcheck 52, racecheck 362, synccheck 28; racecheck and
# synccheck now take one x dtype per element size), test with PYTEST_K="not cpu" 440 s,
# profile (12 cases) ~45 s. bench --matrix with the peers: 496 s on 2026-12-03 (the peers'
# setup of 92 s included) after a 55 s sm_90a-only build, in one call (BENCH_TIMEOUT=495; it
# took about 620 s on 2026-12-02, and later on 2026-12-03 it was cut at 495 s in its last part).
# Most of that setup is the peers' two builds (flashinfer 25 s, vllm 54 s): made on the CPU
# machine (`python3 .peers/oink_peers.py --site "$(mktemp -d)" --build .peers-build`) and
# carried (`carry: [".peers", ".peers-build"]`), they load instead. Where it does not fit one 600 s device call (a build of all
# six targets, a slower run), run the matrix under `timeout -s TERM` with --out DIR and finish
# it in a second call with --resume DIR (carry DIR; README, "A run cut short").
# Sanitizers and tests run at once (below), and slow each other: on 2026-12-02, `build sanitize
# test` with SANITIZE_OPS=inference and TEST_SHARD=1/2 built in 81 s, ran memcheck 218 s,
# racecheck 341 s and synccheck 82 s, and had not finished its half of the tests (`-k "not cpu"`,
# ~1465) after 509 s; alone, 1209 tests of the other half took 250 s. So split the suite in
# three shares beside the sanitizers (TEST_SHARD=1/3 ...) to fit 600 s calls, or run them in
# three pytest-xdist workers: on 2026-12-02 the whole `-k "not cpu"` suite with PYTEST_WORKERS=3
# beside memcheck and synccheck over every op (SANITIZE_TOOLS="memcheck synccheck") took 460 s,
# the build 65 s, memcheck 320 s: one call (racecheck, the slow one, left out); `profile` and
# `bench` in another; `ab` (two builds, four runs) in a call of its own. That combination can run
# the GPU out of memory: later on 2026-12-02 (SANITIZE_OPS=inference, the same three workers;
# memcheck 205 s, tests 363 s) the sanitizers' processes held 46-60 GB each and four tests of
# N=131072, M=4097 failed with CUDA OOM (one worker crashed); alone they passed. Since then the
# tests that fail with CUDA OOM (beside the sanitizers, or beside each other: four workers alone
# did it on 2026-12-03 with the N=524288 cases) run again, alone, at the end of the same call
# (tools/junit_failures.py reads which from pytest's JUnit report). The whole `-k "not cpu"`
# suite in four workers, alone: 264 s on 2026-12-03.
#
# At most 8 files land in $OUT (the device tool's limit): summary.txt, build.log, tests.log,
# sanitizer.log, kernels.txt, schedules.txt, profile.txt and bench.tar.gz; the ab stage writes
# ab.txt and ab.tar.gz (run it in a call of its own, or with fewer of the others).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
STAGES=${*:-build sanitize test kernels schedules profile bench}
KERNEL_BUILD=/tmp/oink-kernels  # torch-free CMake build: ptxas reports, SASS, the schedule sweep
SUMMARY="$OUT/summary.txt"
export PYTHONUNBUFFERED=1
: >"$SUMMARY"

note() { echo "$*" | tee -a "$SUMMARY"; }
has_stage() { [[ " $STAGES " == *" $1 "* ]]; }

note "== oink GPU run $(date -u +%FT%TZ)"
note "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)"
note "$(python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)')"
note "$(nvcc --version | tail -1)"

if has_stage build; then
  start=$SECONDS
  # BUILD_GENCODE: nvcc's -gencode flags instead of the default six targets, e.g.
  # "-gencode=arch=compute_90a,code=sm_90a" for an H200-only build (39 s instead of 80 on
  # 2026-12-01): enough to verify and time kernels there; the other targets' register and spill
  # check runs on any machine (a torch-free CMake build with OINK_PTXAS_VERBOSE=ON).
  build_flags=()
  [[ -n ${BUILD_GENCODE:-} ]] && build_flags=(-C "cmake.define.OINK_CUDA_GENCODE=$BUILD_GENCODE")
  if python3 -m pip install --no-build-isolation --no-deps -v -C cmake.define.OINK_WERROR=ON \
    ${build_flags[@]+"${build_flags[@]}"} . >"$OUT/build.log" 2>&1; then
    note "build: ok ($((SECONDS - start)) s)${BUILD_GENCODE:+ for $BUILD_GENCODE}"
  else
    note "build: FAILED (see build.log)"
    tail -30 "$OUT/build.log"
    exit 1
  fi
fi

# One compute-sanitizer tool over sanitize_cases.py, into its own log (the stage adds them up).
sanitize_with() { # TOOL
  local tool=$1 start=$SECONDS pdl=both dtypes=all
  local log=/tmp/sanitizer-$tool.log
  # racecheck and synccheck look at one CTA's shared memory and barriers (a cluster's too),
  # which PDL does not touch: one PDL setting halves their time (219 s for both on 2026-11-30,
  # which with the tests overran a 600 s call).
  # For the same reason, one x dtype per element size (--dtypes sizes): racecheck took 362 s
  # with every dtype once clusters of two-slice CTAs joined (2026-12-01).
  [[ $tool != memcheck ]] && pdl=on dtypes=sizes
  # No caching allocator: memcheck then sees every allocation's true bounds.
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool "$tool" --error-exitcode 9 \
    python3 tools/sanitize_cases.py --pdl "$pdl" --dtypes "$dtypes" --ops "${SANITIZE_OPS:-all}" \
    >"$log" 2>&1
  local rc=$?
  note "sanitizer $tool: rc=$rc ($((SECONDS - start)) s): $(grep -E 'ERROR SUMMARY|wrong results' "$log" | tail -2 | tr '\n' ' ')"
}

# The three tools run at once, and beside the tests (below): none of them times anything, and
# one after the other they took 442 s and the tests 440 s on one H200 (2026-12-01), more than a
# device call; together they take about as long as the slowest (racecheck). The stages that
# time kernels (schedules, profile, bench, training) start only after all of them are done.
sanitizer_pids=()
if has_stage sanitize; then
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
    sanitize_with "$tool" &
    sanitizer_pids+=($!)
  done
fi

if has_stage test; then
  start=$SECONDS
  # One process per GPU: with 8 pytest-xdist workers the largest sweep cases ran the 141 GB card
  # out of memory; serially the suite takes about 5 minutes on one H200. With two GPUs the files
  # are split between two processes, each on its own GPU, and the two-GPU tests run after them
  # with both GPUs visible.
  gpus=$(nvidia-smi --list-gpus | wc -l)
  rm -f /tmp/junit-*.xml
  run_pytest() { # LOG [PYTEST ARGS...]
    local log=$1 && shift
    local report
    report=/tmp/junit-$(basename "$log" .log).xml
    # --durations: the slowest tests, in the log (the suite took 440 s on one H200 on 2026-12-01).
    # --junitxml: which tests ran out of GPU memory (below, after the sanitizers).
    python3 -m pytest -q -p no:cacheprovider --durations=25 ${PYTEST_K:+-k "$PYTEST_K"} \
      ${PYTEST_WORKERS:+-n "$PYTEST_WORKERS"} \
      ${TEST_SHARD:+--shard "$TEST_SHARD"} --junitxml="$report" "$@" >"$log" 2>&1
  }
  if [[ -n ${TEST_FILES:-} ]]; then
    # shellcheck disable=SC2086
    run_pytest "$OUT/tests.log" $TEST_FILES
    note "tests ($TEST_FILES): $(tail -1 "$OUT/tests.log")"
  elif ((gpus >= 2)); then
    files=()
    for f in tests/python/test_*.py; do
      [[ $f == */test_multi_gpu.py ]] || files+=("$f")
    done
    half=$(((${#files[@]} + 1) / 2))
    CUDA_VISIBLE_DEVICES=0 run_pytest "$OUT/tests.log" "${files[@]:0:half}" &
    first=$!
    CUDA_VISIBLE_DEVICES=1 run_pytest /tmp/tests-gpu1.log "${files[@]:half}" &
    wait "$first" $!
    run_pytest /tmp/tests-multi.log tests/python/test_multi_gpu.py
    note "tests on GPU 0: $(tail -1 "$OUT/tests.log")"
    note "tests on GPU 1: $(tail -1 /tmp/tests-gpu1.log)"
    note "two-GPU tests: $(tail -1 /tmp/tests-multi.log)"
    cat /tmp/tests-gpu1.log /tmp/tests-multi.log >>"$OUT/tests.log"
  else
    run_pytest "$OUT/tests.log" tests/python
    note "tests: $(tail -1 "$OUT/tests.log")"
  fi
  note "tests: ($((SECONDS - start)) s)"
  grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20 | tee -a "$SUMMARY"
fi

if ((${#sanitizer_pids[@]})); then
  wait "${sanitizer_pids[@]}"
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do cat "/tmp/sanitizer-$tool.log"; done >"$OUT/sanitizer.log"
fi

# The tests that ran out of GPU memory beside the sanitizers (whose processes held 46-60 GB each:
# the N=524288 cases failed so in every such call) or beside each other (four pytest-xdist
# workers ran 13 of them out of memory on 2026-12-03), again, alone, now that those are done; and
# a test whose pytest-xdist worker crashed (on 2026-12-03 one segfaulted in such a failing
# allocation, and its report says only that the worker crashed).
if has_stage test; then
  oom=()
  for report in /tmp/junit-*.xml; do
    [[ -f $report ]] && mapfile -t -O "${#oom[@]}" oom < <(python3 tools/junit_failures.py \
      --matching OutOfMemoryError --matching "crashed while running" "$report")
  done
  if ((${#oom[@]})); then
    python3 -m pytest -q -p no:cacheprovider "${oom[@]}" >/tmp/tests-oom.log 2>&1
    note "tests: the ${#oom[@]} that ran out of GPU memory (or crashed) beside other processes, again alone: $(tail -1 /tmp/tests-oom.log)"
    grep -E "^(FAILED|ERROR)" /tmp/tests-oom.log | head -20 | tee -a "$SUMMARY"
    cat /tmp/tests-oom.log >>"$OUT/tests.log"
  fi
fi

configure_kernel_build() {
  [[ -f $KERNEL_BUILD/build.ninja ]] && return 0
  mkdir -p "$KERNEL_BUILD"
  (cd "$KERNEL_BUILD" && cmake "$OLDPWD" -G Ninja -DOINK_BUILD_EXTENSION=OFF -DOINK_PTXAS_VERBOSE=ON \
    -DOINK_BUILD_SCHEDULE_SWEEP=ON \
    -DOINK_CUDA_GENCODE="-gencode=arch=compute_90a,code=sm_90a" >/dev/null)
}

if has_stage kernels; then
  # Evidence for docs/kernels.md: registers and spills per kernel, 128-bit accesses in SASS.
  rm -rf "$KERNEL_BUILD" && configure_kernel_build
  ninja -C "$KERNEL_BUILD" oink_kernels >"$OUT/kernels.txt" 2>&1
  obj=$(find "$KERNEL_BUILD" -name 'norm_forward.cu.o' | head -1)
  {
    echo "== SASS global memory instructions (sm_90a), count by width"
    cuobjdump --dump-sass "$obj" | grep -oE '(LDG|STG|LDGSTS)\.E[.A-Z0-9]*' | sort | uniq -c
  } >>"$OUT/kernels.txt" 2>&1
  note "kernels: $(grep -c 'Used' "$OUT/kernels.txt") ptxas reports, $(grep -c 'spill' "$OUT/kernels.txt") spill lines; 128-bit: $(grep -E 'E\.128' "$OUT/kernels.txt" | tr -s ' ' | tr '\n' ';')"
fi

if has_stage schedules; then
  # Hand-made plans timed next to the planner's: what each schedule choice is worth.
  start=$SECONDS
  configure_kernel_build && ninja -C "$KERNEL_BUILD" oink_schedule_sweep >/dev/null 2>&1 &&
    "$KERNEL_BUILD/oink_schedule_sweep" >"$OUT/schedules.txt" 2>&1
  note "schedules: rc=$? ($((SECONDS - start)) s), $(grep -c ' planner ' "$OUT/schedules.txt") cases"
  # And what a decode row costs piece by piece (launch, copy, reduction, weight): same file.
  start=$SECONDS
  { echo && ninja -C "$KERNEL_BUILD" oink_latency_floors >/dev/null 2>&1 &&
    "$KERNEL_BUILD/oink_latency_floors"; } >>"$OUT/schedules.txt" 2>&1
  note "latency floors: rc=$? ($((SECONDS - start)) s)"
  # The backward passes' weight-gradient blocks at other sizes than the planner's: same file.
  start=$SECONDS
  { echo && ninja -C "$KERNEL_BUILD" oink_backward_sweep >/dev/null 2>&1 &&
    "$KERNEL_BUILD/oink_backward_sweep"; } >>"$OUT/schedules.txt" 2>&1
  note "backward sweep: rc=$? ($((SECONDS - start)) s)"
fi

if has_stage profile; then
  # Nsight Compute on the planner's plan of a few cases (the first launch of each): DRAM and issue
  # utilisation, stall reasons, occupancy: what bounds each schedule.
  start=$SECONDS
  ncu_bin=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  : >"$OUT/profile.txt"
  if configure_kernel_build &&
    ninja -C "$KERNEL_BUILD" oink_schedule_sweep oink_backward_sweep >/dev/null 2>&1; then
    # Decode (registers), the tile at mid and large M, the fused op's registers and tile
    # schedules at large M, clusters for one long row and many, the tile at M=256 on rows of
    # 1024 lanes: the open gaps of docs/kernels.md, "Against the peers". A case may name the
    # kernel to profile after '@' (its first launch; default: the planner's plan, the first
    # launch of any norm kernel): the tile with a float32 weight (held in registers), and the
    # cluster with one (2 CTAs an SM by registers). Cases that start with "backward" run
    # oink_backward_sweep (OP N M; the planner's plan first): the backward passes' row kernel.
    # PROFILE_CASES="backward layernorm 4096 131072;rmsnorm 7168 1" profiles those instead.
    default_cases="rmsnorm 7168 1;fused_add_rms_norm 7168 1;rmsnorm 4096 1024;rmsnorm 7168 65536"
    default_cases+=";fused_add_rms_norm 7168 65536;fused_add_rms_norm 16384 16384;rmsnorm 131072 1"
    default_cases+=";fused_add_rms_norm 131072 1;rmsnorm 131072 4096;fused_add_rms_norm 131072 4096"
    default_cases+=";rmsnorm 16384 256;rmsnorm 7168 4096 w32@norm_tile_kernel"
    default_cases+=";rmsnorm 131072 4096 w32"
    default_cases+=";backward rmsnorm 4096 32768;backward layernorm 4096 32768"
    default_cases+=";backward layernorm 7168 65536;layernorm 4096 131072;layernorm 7168 65536"
    IFS=';' read -ra entries <<<"${PROFILE_CASES:-$default_cases}"
    for entry in "${entries[@]}"; do
      case=${entry%@*}
      kernel=norm
      binary=oink_schedule_sweep
      if [[ $case == backward\ * ]]; then
        case=${case#backward }
        kernel=norm_backward_kernel
        binary=oink_backward_sweep
      fi
      [[ $entry == *@* ]] && kernel=${entry#*@}
      echo "== ncu: $binary $case (first launch of $kernel)" >>"$OUT/profile.txt"
      sections=(--section SpeedOfLight --section SchedulerStats --section WarpStateStats
        --section Occupancy --section MemoryWorkloadAnalysis)
      # The sections' bodies too (the stall reasons, the memory tables); where this ncu does not
      # take --print-details, the headers alone.
      # shellcheck disable=SC2086
      "$ncu_bin" "${sections[@]}" --print-details all -k "regex:$kernel" -c 1 \
        "$KERNEL_BUILD/$binary" $case >/tmp/ncu-case.txt 2>&1 ||
        "$ncu_bin" "${sections[@]}" -k "regex:$kernel" -c 1 \
          "$KERNEL_BUILD/$binary" $case >/tmp/ncu-case.txt 2>&1
      cat /tmp/ncu-case.txt >>"$OUT/profile.txt"
    done
  fi
  note "profile: ($((SECONDS - start)) s) $(grep -c '== ncu' "$OUT/profile.txt") cases"
fi

if has_stage bench; then
  if python3 -c "import oink.bench" 2>/dev/null; then
    start=$SECONDS
    dir=/tmp/oink-bench && rm -rf "$dir"
    peers=()
    if [[ -f .peers/oink_peers.py ]]; then
      # The peers kit (carried: `carry: [".peers", ".peers-build"]`); its extensions are built in
      # /tmp, outside the tree, starting from the builds made on the CPU machine when carried
      # (same sources, torch and nvcc: they load without a compile).
      mkdir -p /tmp/peers-build
      [[ -d .peers-build ]] && cp -a .peers-build/. /tmp/peers-build/
      peers=(--peers .peers --peers-build /tmp/peers-build)
    fi
    # BENCH_TIMEOUT=SECONDS: SIGTERM then, and the run writes the report of what it measured
    # (results.json keeps every finished part); BENCH_RESUME=DIR (a folder carried to the device:
    # bench.tar.gz of a cut-short run, unpacked) measures the parts that run left, into DIR.
    bench_cmd=(python3 -m oink.bench)
    [[ -n ${BENCH_TIMEOUT:-} ]] && bench_cmd=(timeout -s TERM "$BENCH_TIMEOUT" "${bench_cmd[@]}")
    [[ -n ${BENCH_RESUME:-} ]] && dir=$BENCH_RESUME
    run_bench() { # SUBDIR ARGS...: one oink-bench run into $dir/SUBDIR (--resume: $dir)
      local sub=$1 && shift
      local where=(--out "$dir/$sub")
      [[ -n ${BENCH_RESUME:-} ]] && where=(--resume "$dir")
      note "-- bench ${sub:-.}: $* ${peers[*]-} ${where[*]}"
      # The progress bar's lines stay out of the summary; the tables and the verdicts go in.
      "${bench_cmd[@]}" "$@" ${peers[@]+"${peers[@]}"} "${where[@]}" 2>&1 |
        grep -av '^\[[#.]' | tail -60 | tee -a "$SUMMARY"
    }
    if [[ -n ${BENCH_ARGS:-} ]]; then
      # shellcheck disable=SC2086
      run_bench "" $BENCH_ARGS
    else
      # The step-6 matrix (oink/bench/suites.py): bf16 decode in three regimes, mid, large and
      # long rows, then fp16, a float32 weight and padded rows, against every peer and PyTorch.
      # 4096 rotating sets: the reference run's. 496 s with the peers' setup on 2026-12-03, in
      # one call after an sm_90a-only build; where that does not fit, two calls,
      # BENCH_TIMEOUT=480 in the first, BENCH_RESUME=DIR in the second.
      run_bench "" --matrix --max-sets 4096
      # The targets of steps 3, 6 and 7 against this session (the step-3 references of ../shared
      # are not on the device: rerun it here with them, python tools/bench_targets.py DIR
      # ../shared/baselines/*.json).
      python3 tools/bench_targets.py "$dir" 2>&1 | tee -a "$SUMMARY"
    fi
    tar -czf "$OUT/bench.tar.gz" -C "$dir" .
    note "bench: ($((SECONDS - start)) s)"
  else
    note "bench: oink.bench not available"
  fi
fi
if has_stage training; then
  # RMSNorm and LayerNorm, forward and backward, beside PyTorch, Quack and Liger (python -m
  # oink.bench.training; the peers from the kit when carried, as for bench). TRAINING_ARGS: e.g.
  # "--quick", "--op layernorm --pass backward" or "--dtype fp16".
  start=$SECONDS
  dir=/tmp/oink-training && rm -rf "$dir"
  kit=()
  if [[ -f .peers/oink_peers.py ]]; then # as for bench: the kit's builds go to /tmp
    mkdir -p /tmp/peers-build
    [[ -d .peers-build ]] && cp -a .peers-build/. /tmp/peers-build/
    kit=(--peers .peers --peers-build /tmp/peers-build)
  fi
  # shellcheck disable=SC2086
  python3 -m oink.bench.training ${TRAINING_ARGS:-} ${kit[@]+"${kit[@]}"} --out "$dir" 2>&1 |
    tail -80 | tee -a "$SUMMARY"
  tar -czf "$OUT/training.tar.gz" -C "$dir" .
  note "training: ($((SECONDS - start)) s)"
fi
if has_stage ab; then
  # Two builds measured in one call, on this GPU only (sm_90a, one build each): A = .ab-ref
  # (tools/ab_prepare.sh REF exports another revision there; carry it), B = this tree. AB_ARGS
  # (default: the long rows and decode, oink's providers and the copy floor) run in turns A B A
  # B, so that a drift of the machine hits both; tools/bench_ab.py compares them shape by shape.
  if [[ -f .ab-ref/REVISION ]]; then
    start=$SECONDS
    ab=/tmp/oink-ab && rm -rf "$ab" && mkdir -p "$ab"
    gencode=-gencode=arch=compute_90a,code=sm_90a
    note "ab: A = $(cat .ab-ref/REVISION), B = this tree"
    built=0
    for side in A B; do
      src=. && [[ $side == A ]] && src=.ab-ref
      if python3 -m pip install --no-build-isolation --no-deps --target "$ab/$side/lib" \
        -C build-dir="$ab/$side/build" -C cmake.define.OINK_CUDA_GENCODE=$gencode "$src" \
        >"$ab/build-$side.log" 2>&1; then
        built=$((built + 1))
      else
        note "ab: build $side FAILED" && tail -20 "$ab/build-$side.log"
      fi
    done
    args=${AB_ARGS:---suite large_n,decode --op all --providers oink,oink_no_pdl,copy}
    ((built == 2)) && for turn in 1 2; do
      for side in A B; do
        # Each side runs in its own source tree, so that results.json names it (oink_revision):
        # A's has no git of its own, and git must not find this tree's above it.
        src=$PWD && [[ $side == A ]] && src=$PWD/.ab-ref
        # shellcheck disable=SC2086
        (cd "$src" && GIT_CEILING_DIRECTORIES=$(dirname "$src") PYTHONPATH="$ab/$side/lib" \
          python3 -m oink.bench $args --no-plots --out "$ab/$side/$turn") \
          >"$ab/$side-$turn.log" 2>&1 || note "ab: run $side $turn failed (see ab.tar.gz)"
      done
    done
    python3 tools/bench_ab.py "$ab/A" "$ab/B" 2>&1 | tee "$OUT/ab.txt" | head -40 | tee -a "$SUMMARY"
    tar -czf "$OUT/ab.tar.gz" -C "$ab" --exclude=lib --exclude=build .
    note "ab: ($((SECONDS - start)) s)"
  else
    note "ab: no .ab-ref (tools/ab_prepare.sh REF, then carry .ab-ref)"
  fi
fi

if has_stage ptx; then
  # The JIT path: no SASS, the driver compiles compute_90 PTX for this GPU at load time. The
  # plans must report that image (sm_XY SASS from compute_90) and keep PDL, which its code has.
  start=$SECONDS
  if python3 -m pip install --no-build-isolation --no-deps -C build-dir=/tmp/oink-ptx-build \
    -C cmake.define.OINK_CUDA_PTX_ONLY=ON . >"$OUT/ptx.log" 2>&1; then
    python3 -c "
import torch, oink
assert oink.cuda_targets() == ['compute_90'], oink.cuda_targets()
plan = oink.explain(torch.randn(4, 4096, device='cuda', dtype=torch.bfloat16))
major, minor = torch.cuda.get_device_capability()
assert plan.image_ptx == 90 and plan.image_sass == 10 * major + minor and plan.pdl, plan
print('ptx-only build:', plan.device, 'image sm_%d from compute_%d' % (plan.image_sass, plan.image_ptx), 'pdl', plan.pdl)
" >>"$OUT/ptx.log" 2>&1
    rc=$?
    # PDL on and off, side by side where there are two GPUs.
    gpus=$(nvidia-smi --list-gpus | wc -l)
    for pdl in on off; do
      gpu=0 && [[ $pdl == off ]] && ((gpus >= 2)) && gpu=1
      CUDA_VISIBLE_DEVICES=$gpu python3 -m pytest tests/python -q -p no:cacheprovider \
        --oink-pdl "$pdl" -k "not cpu and not multi_gpu and not (test_sweep and (65536 or 131072))" \
        >"/tmp/ptx-$pdl.log" 2>&1 &
      ((gpus >= 2)) || wait
    done
    wait
    for pdl in on off; do
      grep -E "^(FAILED|ERROR)" "/tmp/ptx-$pdl.log" | head -5 >>"$OUT/ptx.log"
      tail -1 "/tmp/ptx-$pdl.log" | grep -qE "failed|error" && rc=$((rc + 1))
      note "ptx-only, PDL $pdl: $(tail -1 "/tmp/ptx-$pdl.log")"
    done
    note "ptx: rc=$rc ($((SECONDS - start)) s): $(grep 'ptx-only build' "$OUT/ptx.log")"
  else
    note "ptx: build FAILED (see ptx.log)"
  fi
fi

if has_stage nocuda; then
  # An oink built without nvcc, meeting CUDA tensors: oink's own message, explain too, and
  # cuda_available() false (so vLLM's provider stays unsupported).
  python3 -m pip install --no-build-isolation --no-deps -C build-dir=/tmp/oink-nocuda-build \
    -C cmake.define.OINK_WITH_CUDA=OFF . >"$OUT/nocuda.log" 2>&1 &&
    python3 -c "
import torch, oink
x = torch.randn(4, 64, device='cuda')
assert oink.cuda_targets() == [] and not oink.cuda_available()
for call in (lambda: oink.rmsnorm(x), lambda: oink.explain(x),
             lambda: oink.fused_add_rms_norm(x, x.clone(), None)):
    try:
        call()
        raise SystemExit('no error')
    except RuntimeError as e:
        assert 'built without CUDA kernels' in str(e), e
print('nocuda: clear errors for rmsnorm, explain, fused; cuda_available False')
" >>"$OUT/nocuda.log" 2>&1
  note "nocuda: rc=$? $(tail -1 "$OUT/nocuda.log")"
fi
note "== done"
