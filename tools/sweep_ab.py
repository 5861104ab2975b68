"""Builds of `oink_schedule_sweep` timed in turns on one GPU, then compared case by case.

    python3 tools/sweep_ab.py run main=build/ab/sweep_main new=build/ab/sweep_new \
        [--turns 2] [--ops rmsnorm,fused_add_rms_norm] [--n 32768,131072] [--m 1,4096] \
        [--variant w32] > ab.txt
    python3 tools/sweep_ab.py table ab.txt

Cheaper than `tools/gpu_run.sh ab` for a kernel change: the sweep is torch-free, so each side is
built on any machine with nvcc (a CMake build of the tree at that revision with
-DOINK_BUILD_EXTENSION=OFF -DOINK_BUILD_SCHEDULE_SWEEP=ON and the GPU's -DOINK_CUDA_GENCODE;
about 6 MB a binary), carried to the GPU machine, and run there in turns (A B A B ...) so that a
drift of the machine hits every side alike; about a second a case. `run` prints each turn's
`planner` and `planner_no_pdl` lines (make_plan()'s choice, with PDL and without) under a
`=== turn K: NAME` header. `table` reads that log and prints, per case, each build's times by
turn and the first build's mean time over each other build's (> 1: that build is faster), then
the geometric mean of those ratios per schedule, op and candidate. Keep the cases of unchanged
schedules in the run as controls: their ratios are the session's noise. A lab tool, not part of
the installed package; it imports nothing of oink."""

from __future__ import annotations

import argparse
import math
import re
import subprocess
import sys
from collections import defaultdict

CANDIDATES = ("planner", "planner_no_pdl")
TURN = re.compile(r"=== turn (\d+): (\S+)")


def parse_sides(specs: list[str]) -> list[tuple[str, str]]:
    """NAME=BINARY pairs, in order; names unique."""
    sides = []
    for spec in specs:
        name, sep, binary = spec.partition("=")
        if not sep or not name or not binary:
            raise ValueError(f"expected NAME=BINARY, got {spec!r}")
        if any(name == seen for seen, _ in sides):
            raise ValueError(f"build name {name!r} given twice")
        sides.append((name, binary))
    if len(sides) < 2:
        raise ValueError(f"expected at least two builds to compare, got {len(sides)}")
    return sides


def parse_list(text: str, flag: str, convert=str) -> list:
    """A comma list (empty parts dropped), each item converted; never empty."""
    try:
        items = [convert(item) for item in text.split(",") if item]
    except ValueError:
        raise ValueError(f"{flag}: expected a comma list, got {text!r}") from None
    if not items:
        raise ValueError(f"{flag}: the list is empty")
    return items


def run(args: argparse.Namespace) -> int:
    sides = parse_sides(args.builds)
    ops = parse_list(args.ops, "--ops")
    ns = parse_list(args.n, "--n", int)
    ms = parse_list(args.m, "--m", int)
    variant = [args.variant] if args.variant else []
    for turn in range(1, args.turns + 1):
        for name, binary in sides:
            print(f"=== turn {turn}: {name}", flush=True)
            for op in ops:
                for n in ns:
                    for m in ms:
                        case = [binary, op, str(n), str(m), *variant]
                        done = subprocess.run(case, capture_output=True, text=True)
                        if done.returncode != 0:
                            print(
                                f"sweep_ab: {name} {op} N={n} M={m} failed "
                                f"(rc {done.returncode}): {done.stderr.strip()[-300:]}",
                                file=sys.stderr,
                            )
                            return 1
                        for line in done.stdout.splitlines():
                            fields = line.split()
                            if len(fields) > 4 and fields[3] in CANDIDATES:
                                print(line, flush=True)
    return 0


def read_log(lines) -> tuple[list[str], dict]:
    """(build names in order of appearance, {(op, N, M, candidate): {name: [(µs, schedule)]}})."""
    names: list[str] = []
    times: dict = defaultdict(lambda: defaultdict(list))
    current = None
    for line in lines:
        header = TURN.match(line)
        if header:
            current = header.group(2)
            if current not in names:
                names.append(current)
            continue
        fields = line.split()
        if current is None or len(fields) < 5 or fields[3] not in CANDIDATES:
            continue
        schedule = re.search(r"variant=(\w+)", line)
        key = (fields[0], int(fields[1]), int(fields[2]), fields[3])
        times[key][current].append((float(fields[4]), schedule.group(1) if schedule else "?"))
    return names, times


def table(lines) -> list[str]:
    names, times = read_log(lines)
    if len(names) < 2:
        raise ValueError(f"expected turns of at least two builds, found {names or 'none'}")
    first, others = names[0], names[1:]
    out = [
        f"{'op':20} {'N':>7} {'M':>6} {'candidate':15} {'schedule':17}"
        + "".join(f"{name + ' (turns)':>22}" for name in names)
        + "".join(f"  {first}/{name}" for name in others)
    ]
    ratios = defaultdict(list)
    for key in sorted(times, key=lambda k: (k[0], k[3], k[1], k[2])):
        runs = times[key]
        if not all(name in runs for name in names):
            continue
        mean = {name: sum(t for t, _ in runs[name]) / len(runs[name]) for name in names}
        schedule = runs[first][0][1]
        row = [mean[first] / mean[name] for name in others]
        for name, ratio in zip(others, row, strict=True):
            ratios[(schedule, key[0], key[3], name)].append(ratio)
        turns = ["  ".join(f"{t:.2f}" for t, _ in runs[name]) for name in names]
        out.append(
            f"{key[0]:20} {key[1]:7} {key[2]:6} {key[3]:15} {schedule:17}"
            + "".join(f"{cell:>22}" for cell in turns)
            + "".join(
                f"  {ratio:{len(first) + len(name) + 1}.3f}"
                for name, ratio in zip(others, row, strict=True)
            )
        )
    out.append("")
    for (schedule, op, candidate, name), values in sorted(ratios.items()):
        geomean = math.exp(sum(map(math.log, values)) / len(values))
        out.append(
            f"geomean {first}/{name}: {geomean:.3f} over {len(values)} cases "
            f"({schedule}, {op}, {candidate})"
        )
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    run_parser = verbs.add_parser("run", help="time the builds in turns (on the GPU machine)")
    run_parser.add_argument("builds", nargs="+", metavar="NAME=BINARY")
    run_parser.add_argument("--turns", type=int, default=2, help="rounds over the builds (2)")
    run_parser.add_argument("--ops", default="rmsnorm,fused_add_rms_norm")
    run_parser.add_argument("--n", default="32768,131072,262144", help="comma list of N")
    run_parser.add_argument("--m", default="1,1024,4096", help="comma list of M")
    run_parser.add_argument(
        "--variant",
        choices=("w32", "f32", "nw"),
        help="the sweep's dtype variant for every case: a float32 weight (w32), float32 rows "
        "(f32), no weight (nw); default: bf16 rows and weight",
    )
    table_parser = verbs.add_parser("table", help="compare the builds of a `run` log")
    table_parser.add_argument("log", help="the output of `run` ('-': standard input)")
    args = parser.parse_args(argv)
    try:
        if args.verb == "run":
            if args.turns < 1:
                raise ValueError(f"--turns: expected at least 1, got {args.turns}")
            return run(args)
        with open(sys.stdin.fileno() if args.log == "-" else args.log) as log:
            print("\n".join(table(log)))
        return 0
    except (ValueError, OSError) as error:
        print(f"sweep_ab: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
