"""`python tools/bench_compare.py A... -- B... [--tol 0.03]`: two sets of oink-bench runs (each
argument a results.json or the folder holding one; tools/gpu_run.sh's ab stage runs A B A B)
compared shape by shape. A shape's time on each side is the median of that side's runs.

Printed per table (op, suite, variant, regime) and provider: the geometric mean of B's time over
A's (< 1: B faster), then every shape whose ratio is further than --tol from 1. The peers and
torch are the same code on both sides: their ratios are the session's noise, the yardstick for
oink's."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def load(paths: list[str]) -> dict[tuple, float]:
    """{(op, suite, variant, regime, provider, N, M): median µs over the runs}."""
    times: dict[tuple, list[float]] = defaultdict(list)
    for p in paths:
        path = Path(p) / "results.json" if Path(p).is_dir() else Path(p)
        for r in json.loads(path.read_text())["records"]:
            if r["status"] == "ok":
                key = (
                    r["op"],
                    r["suite"],
                    r["variant"],
                    r["regime"],
                    r["provider"],
                    r["N"],
                    r["M"],
                )
                times[key].append(r["median_us"])
    return {k: statistics.median(v) for k, v in times.items()}


def compare(a: dict[tuple, float], b: dict[tuple, float], tol: float) -> list[str]:
    ratios: dict[tuple, list[tuple]] = defaultdict(list)
    for key in sorted(a.keys() & b.keys()):
        ratios[key[:5]].append((key[5], key[6], b[key] / a[key]))
    lines = []
    for (op, suite, variant, regime, provider), rs in ratios.items():
        gm = math.exp(statistics.fmean(math.log(r) for *_, r in rs))
        lines.append(
            f"{op}, {suite} {variant}, {regime}, {provider}: B/A {gm:.3f} ({len(rs)} shapes)"
        )
        lines += [f"    N={n} M={m}: {r:.3f}" for n, m, r in rs if abs(r - 1) > tol]
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tol", type=float, default=0.03)
    if "--" not in argv:
        ap.error("separate A's runs from B's with --")
    cut = argv.index("--")
    args, a_runs = ap.parse_known_args(argv[:cut])
    print("\n".join(compare(load(a_runs), load(argv[cut + 1 :]), args.tol)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
