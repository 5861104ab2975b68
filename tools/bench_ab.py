"""`python tools/bench_ab.py A_DIR B_DIR [--tol 0.03]`: two builds of oink measured on one GPU in
one session (`tools/gpu_run.sh ab`: A = another revision, B = this tree), compared shape by shape.

Each DIR holds one results.json per turn (DIR/1/results.json, DIR/2/..., the runs alternating
A, B, A, B so that a drift of the machine hits both sides); a shape's time is the median of its
turns. Printed per part (suite, variant, op, regime): the geometric mean of B's time over A's for
each provider both sides measured, then every shape whose ratio differs from 1 by more than
--tol. The copy floor (provider `copy`) is the same PyTorch kernel in both builds: its ratio is
the session's noise, the yardstick for the others. A lab tool, not part of the installed
package; it imports nothing of oink."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

Key = tuple  # (suite, variant, op, regime, provider, N, M)


def load_turns(run_dir: str) -> dict[Key, float]:
    """{key: median µs over the turns} of the timed records under run_dir (its own results.json
    and those of its subdirectories)."""
    times: dict[Key, list[float]] = defaultdict(list)
    root = Path(run_dir)
    paths = sorted(root.glob("*/results.json")) + sorted(root.glob("results.json"))
    if not paths:
        raise FileNotFoundError(f"no results.json in {run_dir} or its subdirectories")
    for path in paths:
        for r in json.loads(path.read_text())["results"]:
            if r.get("status") != "ok" or not r.get("time_us") or r["time_us"] <= 0:
                continue
            key = (
                r["suite"],
                r.get("variant", ""),
                r["op"],
                r.get("regime", "hbm"),
                r["provider"],
                r["N"],
                r["M"],
            )
            times[key].append(r["time_us"])
    return {k: statistics.median(v) for k, v in times.items()}


def compare(a: dict[Key, float], b: dict[Key, float], tol: float) -> list[str]:
    """The report's lines: per part and provider the geomean of B / A, then the shapes off by
    more than tol."""
    parts: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    off = []
    for key in sorted(a.keys() & b.keys()):
        suite, variant, op, regime, provider, n, m = key
        q = b[key] / a[key]
        parts[(suite, variant, op, regime)][provider].append(q)
        if abs(q - 1) > tol:
            off.append(
                f"  {suite} {variant} {op} {regime} {provider} N={n} M={m}: "
                f"{a[key]:.2f} -> {b[key]:.2f} us ({q:.3f}x)"
            )
    lines = ["B / A time (< 1: B faster), geometric mean over the shapes both measured:"]
    for part, by_provider in sorted(parts.items()):
        cells = ", ".join(
            f"{p} {math.exp(statistics.fmean(map(math.log, qs))):.3f}x ({len(qs)})"
            for p, qs in sorted(by_provider.items())
        )
        lines.append(f"  {' '.join(part)}: {cells}")
    lines.append(f"Shapes off by more than {tol:.0%}: {len(off)}")
    return lines + off


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/bench_ab.py", description=__doc__)
    ap.add_argument("a", help="side A's directory (the reference revision's turns)")
    ap.add_argument("b", help="side B's directory (this tree's turns)")
    ap.add_argument("--tol", type=float, default=0.03, help="list shapes with |B/A - 1| above this")
    args = ap.parse_args(argv)
    try:
        a, b = load_turns(args.a), load_turns(args.b)
    except FileNotFoundError as e:
        print(f"bench_ab: {e}", file=sys.stderr)
        return 1
    if not a.keys() & b.keys():
        print("bench_ab: the two sides have no timed shape in common", file=sys.stderr)
        return 1
    print("\n".join(compare(a, b, args.tol)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
