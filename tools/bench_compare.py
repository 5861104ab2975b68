"""`python tools/bench_compare.py results.json REFERENCE.json...`: this run's baseline timings
against a stored reference run (e.g. ../shared/baselines/h200-*.json), shape by shape.

Issue 3 asks that the baselines measured here agree with the reference within run-to-run noise;
this prints ours/reference per (op, provider, dtype, weight dtype, pad, N, M) found in both, the
geometric mean per provider, and the shapes off by more than --tol. A lab tool, not part of the
installed package; it imports nothing of oink, so it runs in a checkout that is not built."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict

_OPS = {"fused_add": "fused_add_rms_norm"}


def _key(op: str, impl: str, dtype: str, wdtype: str, pad: int, n: int, m: int) -> tuple:
    strip = lambda s: s.replace("torch.", "")  # noqa: E731
    return (_OPS.get(op, op), impl, strip(dtype), strip(wdtype), int(pad), int(n), int(m))


def load_reference(paths: list[str]) -> dict[tuple, dict]:
    """{key: {"us", "eager_us"}} from reference files ({"results": [{op, impl, M, N, us, ...}]});
    entries without dtype are bf16 with a bf16 weight and no padding."""
    ref = {}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        for r in doc["results"]:
            dt = r.get("dtype", "bfloat16")
            key = _key(r["op"], r["impl"], dt, r.get("wdtype", dt), r.get("pad", 0), r["N"], r["M"])
            ref[key] = {"us": r["us"], "eager_us": r.get("eager_us")}
    return ref


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/bench_compare.py", description=__doc__)
    ap.add_argument("results", help="results.json of an oink-bench run")
    ap.add_argument("reference", nargs="+", help="reference JSON file(s)")
    ap.add_argument("--tol", type=float, default=0.10, help="flag |ours/ref - 1| above this")
    args = ap.parse_args(argv)

    with open(args.results) as f:
        ours = json.load(f)
    ref = load_reference(args.reference)
    ratios: dict[str, list[float]] = defaultdict(list)
    host: dict[str, list[float]] = defaultdict(list)
    flagged = []
    for r in ours["results"]:
        if r["status"] != "ok" or r.get("regime", "hbm") != "hbm":  # one row per key, as before
            continue
        k = _key(r["op"], r["provider"], r["dtype"], r["weight_dtype"], r["pad"], r["N"], r["M"])
        if k not in ref:
            continue
        q = r["time_us"] / ref[k]["us"]
        ratios[r["provider"]].append(q)
        if abs(q - 1) > args.tol:
            flagged.append((k, r["time_us"], ref[k]["us"], q))
        if r.get("host_us") and ref[k]["eager_us"]:
            host[r["provider"]].append(r["host_us"] / ref[k]["eager_us"])
    if not ratios:
        print("no shape in common with the reference", file=sys.stderr)
        return 1
    ceiling = ours["copy_ceiling"]["GBps"]
    print(f"this run: {ours['env'].get('gpu')} copy ceiling {ceiling:.0f} GB/s")
    print("device time, ours / reference (geometric mean, min, max, shapes):")
    for name, qs in sorted(ratios.items()):
        gm = math.exp(sum(map(math.log, qs)) / len(qs))
        print(f"  {name:12} {gm:6.3f}  {min(qs):6.3f}  {max(qs):6.3f}  {len(qs):4d}")
    if host:
        print("eager host time per call, ours / reference:")
        for name, qs in sorted(host.items()):
            gm = math.exp(sum(map(math.log, qs)) / len(qs))
            print(f"  {name:12} {gm:6.3f}  {min(qs):6.3f}  {max(qs):6.3f}  {len(qs):4d}")
    print(f"shapes off by more than {args.tol:.0%}: {len(flagged)}")
    for (op, impl, dt, wdt, pad, n, m), us, ref_us, q in flagged:
        print(
            f"  {op} {impl} {dt}/{wdt} pad={pad} N={n} M={m}: "
            f"{us:.2f} us vs {ref_us:.2f} us ({q:.2f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
