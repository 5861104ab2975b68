"""`python tools/bench_targets.py RUN_DIR [REFERENCE.json ...]`: the step-3 targets (issue 4),
and those of steps 6 and 7 (issues 12 and 13: oink against the best peer measured in the same
run), checked against one benchmark session, shape by shape.

RUN_DIR holds the main run's results.json (bf16, `--suite decode,mid,large,large_n --op all`
with the provider `oink_no_pdl`, or `--matrix`), and may hold sub-runs: `fp32-weight/` and `pad/`
(oink against itself) and `decode-l2-warm/` (decode with `--max-sets 20`, the reference baselines'
regime; used for the decode targets when present). A `--matrix` run holds all of that in one
results.json: its l2 regime stands in for `decode-l2-warm/`, its variants bf16-w32 and bf16-pad64
for the sub-runs. Only the hbm regime's rows are the main run's (rows without a regime are hbm).
REFERENCE files are the stored baselines (../shared/baselines/h200-*.json): vLLM's and
FlashInfer's kernels, which are rarely installed where oink is measured. A target a session has
no data for is reported as "no data", never as met. A lab tool, not part of the installed
package; it imports nothing of oink, so it runs in a checkout that is not built."""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
from dataclasses import dataclass

from bench_compare import load_reference  # beside this file (the script's directory)

DECODE_N = (4096, 7168, 8192)
OPS = ("rmsnorm", "fused_add_rms_norm")
# The peers of steps 6 and 7 (oink/bench/providers.py), measured in the same run as oink.
PEERS = ("quack", "flashinfer_cute", "flashinfer", "flashinfer_nopdl", "vllm", "liger")
MATRIX_VARIANTS = ("bf16", "fp16", "bf16-w32", "bf16-pad64")


@dataclass
class Verdict:
    target: str
    met: int  # shapes that meet it
    total: int  # shapes measured
    worst: str  # the shape furthest from the target (or closest to missing it), with its value

    @property
    def status(self) -> str:
        if self.total == 0:
            return "no data"
        return "met" if self.met == self.total else f"missed ({self.total - self.met} shapes)"


@dataclass
class Row:
    shape: str
    value: str  # formatted measurement
    meets: bool
    badness: float  # larger: further from the target


def verdict(target: str, rows: list[Row]) -> Verdict:
    if not rows:
        return Verdict(target, 0, 0, "")
    worst = max(rows, key=lambda r: r.badness)
    return Verdict(target, sum(r.meets for r in rows), len(rows), f"{worst.shape}: {worst.value}")


@functools.lru_cache(maxsize=4)
def _records(path: str, mtime_ns: int) -> tuple[dict, ...]:
    """A results.json's records, read once per version of the file (a run is read by regime and
    variant, many times over)."""
    with open(path) as f:
        return tuple(json.load(f)["results"])


def load_run(path: str, regime: str = "hbm", variant: str | None = None) -> dict[tuple, dict]:
    """{(suite, op, provider, N, M): result} of one regime; of one variant if named (else every
    row: a results.json without --matrix holds one dtype, weight dtype and row padding, and a
    --matrix run measures its other variants under the suite "variants")."""
    return {
        (r["suite"], r["op"], r["provider"], r["N"], r["M"]): r
        for r in _records(path, os.stat(path).st_mtime_ns)
        if r.get("status") == "ok"
        and r.get("regime", "hbm") == regime
        and (variant is None or r.get("variant") == variant)
    }


def best_alternative(run: dict, reference: dict, suite: str, op: str, n: int, m: int):
    """(name, µs) of the fastest alternative for a shape: this run's baselines and the
    reference's (vLLM, FlashInfer, ...), or None."""
    alts = {}
    for impl_key, r in reference.items():
        r_op, impl, dtype, wdtype, pad, r_n, r_m = impl_key
        if (r_op, dtype, wdtype, pad, r_n, r_m) == (op, "bfloat16", "bfloat16", 0, n, m):
            alts[impl] = r["us"]
    for (s, o, provider, nn, mm), r in run.items():
        if (s, o, nn, mm) == (suite, op, n, m) and r.get("baseline"):
            alts[provider] = min(r["time_us"], alts.get(provider, float("inf")))
    return min(alts.items(), key=lambda kv: kv[1]) if alts else None


def oink_rows(run: dict, suite: str, op: str, provider: str = "oink"):
    for (s, o, p, n, m), r in sorted(run.items()):
        if (s, o, p) == (suite, op, provider):
            yield n, m, r


def decode(run: dict, reference: dict, op: str, limit: float = 0.8) -> Verdict:
    """oink without PDL over the best alternative's time, M <= 64 (lower is better)."""
    rows = []
    for n, m, r in oink_rows(run, "decode", op, "oink_no_pdl"):
        best = best_alternative(run, reference, "decode", op, n, m)
        if n in DECODE_N and m <= 64 and best:
            q = r["time_us"] / best[1]
            rows.append(Row(f"N={n} M={m} vs {best[0]}", f"{q:.2f}x", q <= limit, q))
    return verdict(f"decode {op} <= {limit}x the best (no PDL)", rows)


def decode_pdl(run: dict, op: str, limit_us: float) -> Verdict:
    r = run.get(("decode", op, "oink", 7168, 1))
    rows = [Row("N=7168 M=1", f"{r['time_us']:.2f} us", r["time_us"] <= limit_us, 0)] if r else []
    return verdict(f"PDL {op} <= {limit_us} us (M=1, N=7168)", rows)


def mid(run: dict, reference: dict, op: str, limit: float = 1.2) -> Verdict:
    """Best alternative's time over oink's without PDL (higher is better)."""
    rows = []
    for n, m, r in oink_rows(run, "mid", op, "oink_no_pdl"):
        best = best_alternative(run, reference, "mid", op, n, m)
        if best:
            x = best[1] / r["time_us"]
            rows.append(Row(f"N={n} M={m} vs {best[0]}", f"{x:.2f}x", x >= limit, -x))
    return verdict(f"mid {op} >= {limit}x the best (no PDL)", rows)


def ceiling(run: dict, suite: str, op: str, limit_pct: float, min_m: int = 1) -> Verdict:
    """oink's share of the copy ceiling (higher is better), at M >= min_m."""
    rows = [
        Row(
            f"N={n} M={m}",
            f"{r['pct_ceiling']:.0f}%",
            r["pct_ceiling"] >= limit_pct,
            -r["pct_ceiling"],
        )
        for n, m, r in oink_rows(run, suite, op)
        if m >= min_m
    ]
    where = f" at M >= {min_m}" if min_m > 1 else ""
    return verdict(f"{suite} {op} >= {limit_pct:.0f}% of the copy ceiling{where}", rows)


def floor(run: dict, suite: str, op: str, limit: float = 1.2, m: int = 1) -> Verdict:
    """oink's time over the copy floor's (the provider `copy`: the same rows moved by one copy
    kernel) at batch size m (lower is better)."""
    rows = []
    for n, mm, r in oink_rows(run, suite, op):
        copy = run.get((suite, op, "copy", n, mm))
        if mm == m and copy:
            q = r["time_us"] / copy["time_us"]
            rows.append(Row(f"N={n} M={m}", f"{q:.2f}x the copy", q <= limit, q))
    return verdict(f"{suite} {op} M={m} within {limit}x of a copy of the same rows", rows)


def against_itself(run: dict, other: dict, name: str, limit: float = 1.05) -> Verdict:
    """oink's time in a variant run (fp32 weight, padded rows) over the main run's."""
    rows = []
    # By (op, provider, N, M), whatever the suite: a --matrix run's variants are one suite of their
    # own, at shapes of the main run's decode and large suites.
    main = {k[1:]: r for k, r in run.items() if k[0] != "variants"}
    for key, r in sorted(other.items()):
        base = main.get(key[1:]) if key[0] == "variants" else run.get(key)
        if key[2] in ("oink", "oink_no_pdl") and base:
            q = r["time_us"] / base["time_us"]
            shape = f"{key[1]} {key[2]} N={key[3]} M={key[4]}"
            rows.append(Row(shape, f"{q:.3f}x", q <= limit, q))
    return verdict(f"{name} within {limit - 1:.0%} of the main run", rows)


def eager(run: dict) -> Verdict:
    rows = []
    for n, m, ours in oink_rows(run, "decode", "rmsnorm"):
        theirs = run.get(("decode", "rmsnorm", "F.rms_norm", n, m))
        if m == 1 and theirs and ours.get("host_us") and theirs.get("host_us"):
            q = ours["host_us"] / theirs["host_us"]
            rows.append(Row(f"N={n}", f"{q:.2f}x", q <= 1.0, q))
    return verdict("eager host time <= F.rms_norm's (M=1)", rows)


def peer_ratios(run: dict, suites: tuple[str, ...], op: str, max_n: int | None = None):
    """(shape, best peer µs / oink µs, best peer) for each shape of oink in those suites that a
    peer ran too (> 1: oink faster)."""
    for (suite, o, provider, n, m), r in sorted(run.items()):
        if suite not in suites or o != op or provider != "oink" or (max_n and n > max_n):
            continue
        times = {
            q: run[(suite, op, q, n, m)]["time_us"] for q in PEERS if (suite, op, q, n, m) in run
        }
        if times:
            best = min(times, key=times.get)
            yield f"{suite} N={n} M={m}", times[best] / r["time_us"], best


def versus(run: dict, suite: str, op: str, peer: str, m: int, limit: float, name: str) -> Verdict:
    """One peer's time over oink's at batch size m (higher is better)."""
    rows = []
    for n, mm, r in oink_rows(run, suite, op):
        theirs = run.get((suite, op, peer, n, mm))
        if mm == m and theirs:
            x = theirs["time_us"] / r["time_us"]
            rows.append(Row(f"N={n} M={m}", f"{x:.2f}x", x >= limit, -x))
    return verdict(name, rows)


def leads(path: str, op: str) -> list[Verdict]:
    """Step 6 (N <= 16384: decode, mid, large and the variants, every regime) and step 7 (long
    rows): oink at least level with the best peer at every shape, and step 6's geomean."""
    cells = []
    for regime in ("hbm", "l2", "gemm"):
        for variant in MATRIX_VARIANTS:
            run = load_run(path, regime, variant)
            for shape, x, peer in peer_ratios(
                run, ("decode", "mid", "large", "variants"), op, 16384
            ):
                cells.append((f"{regime} {variant} {shape} vs {peer}", x))
    rows = [Row(shape, f"{x:.2f}x", x >= 1.0, -x) for shape, x in cells]
    out = [verdict(f"step 6 {op} >= 1.0x the best peer (N <= 16384, every regime)", rows)]
    geomean = []
    if cells:
        g = math.exp(sum(math.log(x) for _, x in cells) / len(cells))
        geomean = [Row(f"{len(cells)} cells", f"{g:.2f}x", g >= 1.10, -g)]
    out.append(verdict(f"step 6 {op} geomean >= 1.10x the best peer (N <= 16384)", geomean))
    long_rows = [
        Row(f"{shape} vs {peer}", f"{x:.2f}x", x >= 1.0, -x)
        for shape, x, peer in peer_ratios(load_run(path, "hbm", "bf16"), ("large_n",), op)
    ]
    out.append(verdict(f"step 7 {op} long rows >= 1.0x the best peer", long_rows))
    return out


def evaluate(run_dir: str, reference_files: list[str], overlays: list[str] = ()) -> list[Verdict]:
    run = load_run(os.path.join(run_dir, "results.json"))
    for overlay in overlays:  # later runs of some ops or suites replace the main run's rows
        run.update(load_run(os.path.join(overlay, "results.json")))
    reference = load_reference(reference_files) if reference_files else {}

    def sub(name: str, regime: str = "hbm", variant: str | None = None) -> dict:
        """A sub-run's rows, else the same data in the main run's results.json (--matrix)."""
        path = os.path.join(run_dir, name, "results.json")
        if os.path.exists(path):
            return load_run(path)
        return load_run(os.path.join(run_dir, "results.json"), regime, variant)

    warm = sub("decode-l2-warm", "l2") or run  # the reference's regime, where measured
    out = [decode(warm, reference, op) for op in OPS]
    out += [decode_pdl(run, "rmsnorm", 1.5), decode_pdl(run, "fused_add_rms_norm", 1.8)]
    out += [mid(run, reference, op) for op in OPS]
    out += [ceiling(run, "large", "rmsnorm", 92), ceiling(run, "large", "fused_add_rms_norm", 97)]
    # Step 7's target for long rows (the suite also holds M = 1 ... 256, latency-bound).
    out += [ceiling(run, "large_n", op, 95, min_m=1024) for op in OPS]
    out += [floor(run, "large_n", op) for op in OPS]
    out += [against_itself(run, sub("fp32-weight", variant="bf16-w32"), "fp32 weight")]
    out += [against_itself(run, sub("pad", variant="bf16-pad64"), "padded rows")]
    out += [eager(run)]
    # Steps 6 and 7 (issues 12 and 13), from the main run's file (a --matrix run).
    path = os.path.join(run_dir, "results.json")
    gemm = load_run(path, "gemm")
    for op in OPS:
        out += leads(path, op)
        out += [ceiling(run, "large", op, 99)]
        out += [
            versus(
                run,
                "mid",
                op,
                "flashinfer_cute",
                1024,
                1.10,
                f"step 6 mid {op} M=1024 >= 1.10x FlashInfer-CuTe",
            )
        ]
        out += [
            versus(
                gemm,
                "decode",
                op,
                "liger",
                64,
                1.10,
                f"step 6 {op} M=64 between GEMMs >= 1.10x Liger",
            )
        ]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/bench_targets.py", description=__doc__)
    ap.add_argument("run_dir", help="a benchmark session's directory (results.json inside)")
    ap.add_argument("reference", nargs="*", help="reference JSON file(s), e.g. ../shared/baselines")
    ap.add_argument(
        "--overlay",
        action="append",
        default=[],
        metavar="DIR",
        help="a later run (results.json inside) whose rows replace the main run's, e.g. one op "
        "re-measured after a change; repeatable",
    )
    args = ap.parse_args(argv)
    verdicts = evaluate(args.run_dir, args.reference, args.overlay)
    width = max(len(v.target) for v in verdicts)
    for v in verdicts:
        print(f"{v.target:{width}}  {v.met:3d}/{v.total:<3d}  {v.status:20}  worst {v.worst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
