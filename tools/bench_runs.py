"""`python tools/bench_runs.py RUN [PREVIOUS] [--moved 0.05] [--behind]`: a run of
`oink-bench --matrix` summarised as the README's table, oink ÷ the best peer per regime (geomean /
worst, with PDL and without), beside a previous run where one is given; then, with --moved, the
cells whose ratio moved between the two runs by more than that fraction, each with oink's time
over its own no-PDL time in both runs (its anchor: a cell where that anchor moved too is oink's
own change, one where it did not is the peers' or the machine's); with --behind, the cells where
oink with PDL trails the best peer, by group, worst first, with both times, % of the copy ceiling
and the peer's name: the list a closing note and kernels.md's "What limits each remaining gap"
start from.

RUN and PREVIOUS are folders holding a results.json (or the files themselves). The regimes group
the matrix's parts as the README does: isolated (the decode suite's hbm regime, mid, large),
L2-warm decode, between GEMMs, long rows (large_n), and the variants (fp16, a float32 weight,
padded rows). A lab tool, not part of the installed package; it imports nothing of oink."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

Key = tuple  # (suite, variant, op, regime, N, M)
GROUPS = ("isolated", "L2-warm decode", "between GEMMs", "long rows", "variants")
OPS = ("rmsnorm", "fused_add_rms_norm")


def load_cells(path: str) -> dict[Key, dict[str, dict]]:
    """{cell: {provider: record}} of the timed records of a run (its folder or results.json)."""
    file = Path(path)
    if file.is_dir():
        file = file / "results.json"
    if not file.is_file():
        raise FileNotFoundError(f"no results.json at {path}")
    cells: dict[Key, dict[str, dict]] = defaultdict(dict)
    for r in json.loads(file.read_text())["results"]:
        if r.get("status") != "ok" or not r.get("time_us") or r["time_us"] <= 0:
            continue
        key = (r["suite"], r.get("variant", ""), r["op"], r.get("regime", "hbm"), r["N"], r["M"])
        cells[key][r["provider"]] = r
    return dict(cells)


def group_of(key: Key) -> str:
    suite, regime = key[0], key[3]
    if suite == "decode":
        return {"hbm": "isolated", "l2": "L2-warm decode", "gemm": "between GEMMs"}[regime]
    if suite in ("mid", "large"):
        return "isolated"
    return "long rows" if suite == "large_n" else "variants"


def versus_best_peer(cell: dict[str, dict], pdl: bool) -> float | None:
    """Best peer µs / oink µs (> 1: oink faster); without PDL, oink_no_pdl against the peers
    that launch without it. None where either side is missing."""
    who = cell.get("oink" if pdl else "oink_no_pdl")
    peers = [
        r["time_us"]
        for r in cell.values()
        if r.get("group") == "peer" and (pdl or not r.get("pdl"))
    ]
    if who is None or not peers:
        return None
    return min(peers) / who["time_us"]


def summarize(cells: dict[Key, dict[str, dict]]) -> dict[tuple[str, str, bool], list[float]]:
    """{(group, op, pdl): the cells' ratios against the best peer}."""
    out: dict[tuple[str, str, bool], list[float]] = defaultdict(list)
    for key, cell in cells.items():
        for pdl in (True, False):
            ratio = versus_best_peer(cell, pdl)
            if ratio is not None:
                out[(group_of(key), key[2], pdl)].append(ratio)
    return out


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _entry(ratios: list[float] | None, bold: bool) -> str:
    if not ratios:
        return "-"
    mean = f"{_geomean(ratios):.2f}"
    if bold and _geomean(ratios) >= 1.0:
        mean = f"**{mean}**"
    return f"{mean} / {min(ratios):.2f}"


def table(run: dict, previous: dict | None = None) -> list[str]:
    """The README's table: a row per regime group, the four columns of the two ops with PDL and
    without; the previous run's values in brackets."""
    lines = [
        "| regime | rmsnorm | rmsnorm, no PDL | fused add | fused add, no PDL |",
        "|---|---|---|---|---|",
    ]
    for group in GROUPS:
        counts = {len(run.get((group, op, True), [])) for op in OPS} - {0}
        if not counts:
            continue
        row = [f"{group} ({'/'.join(str(c) for c in sorted(counts, reverse=True))})"]
        for op in OPS:
            for pdl in (True, False):
                text = _entry(run.get((group, op, pdl)), bold=pdl)
                if previous is not None:
                    text += f" ({_entry(previous.get((group, op, pdl)), bold=False)})"
                row.append(text)
        lines.append("| " + " | ".join(row) + " |")
    return lines


def moved(run: dict, previous: dict, tol: float) -> list[str]:
    """The cells whose oink ÷ best peer ratio (with PDL) moved by more than `tol` (a fraction)
    between the runs, with oink's time over its own no-PDL time in each, largest move first."""
    rows = []
    for key in sorted(run.keys() & previous.keys()):
        new, old = versus_best_peer(run[key], True), versus_best_peer(previous[key], True)
        if new is None or old is None or abs(new / old - 1) <= tol:
            continue
        anchors = []
        for cell in (previous[key], run[key]):
            own, nopdl = cell.get("oink"), cell.get("oink_no_pdl")
            anchors.append(own["time_us"] / nopdl["time_us"] if own and nopdl else float("nan"))
        suite, variant, op, regime, n, m = key
        rows.append(
            (
                abs(new / old - 1),
                f"{suite} {variant} {op} {regime} N={n} M={m}: {old:.2f} -> {new:.2f} the best "
                f"peer; oink / oink without PDL {anchors[0]:.3f} -> {anchors[1]:.3f}",
            )
        )
    return [text for _, text in sorted(rows, key=lambda r: -r[0])]


def _timing(record: dict) -> str:
    pct = record.get("pct_ceiling")
    return f"{record['time_us']:.2f} us" + (f" ({pct:.1f}%)" if pct else "")


def behind(run: dict[Key, dict[str, dict]]) -> list[str]:
    """The cells where oink with PDL is slower than the best peer, grouped as the table (its
    order), worst first within a group: oink's time and the best peer's, with their % of the
    copy ceiling where the run has it."""
    rows = []
    for key, cell in run.items():
        ratio = versus_best_peer(cell, True)
        if ratio is None or ratio >= 1.0:
            continue
        name, peer = min(
            ((p, r) for p, r in cell.items() if r.get("group") == "peer"),
            key=lambda pr: pr[1]["time_us"],
        )
        suite, variant, op, regime, n, m = key
        rows.append(
            (
                GROUPS.index(group_of(key)),
                ratio,
                f"{group_of(key)}: {suite} {variant} {op} {regime} N={n} M={m}: {ratio:.3f}x "
                f"{name}, oink {_timing(cell['oink'])} against {_timing(peer)}",
            )
        )
    return [text for *_, text in sorted(rows)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/bench_runs.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("run", help="the run's folder (or its results.json)")
    parser.add_argument("previous", nargs="?", help="a previous run, shown in brackets")
    parser.add_argument(
        "--moved",
        type=float,
        metavar="FRACTION",
        help="also list the cells whose ratio moved by more than this (e.g. 0.05)",
    )
    parser.add_argument(
        "--behind",
        action="store_true",
        help="also list the cells where oink with PDL trails the best peer, worst first",
    )
    args = parser.parse_args(argv)
    if args.moved is not None and args.previous is None:
        parser.error("--moved needs a previous run")
    try:
        run = load_cells(args.run)
        previous = load_cells(args.previous) if args.previous else None
    except (OSError, ValueError, KeyError) as e:
        print(f"bench_runs: {e}", file=sys.stderr)
        return 1
    print("\n".join(table(summarize(run), summarize(previous) if previous else None)))
    if args.moved is not None:
        lines = moved(run, previous, args.moved)
        print(f"\n{len(lines)} cells moved by more than {args.moved:.0%} against the best peer:")
        print("\n".join(lines))
    if args.behind:
        lines = behind(run)
        print(f"\n{len(lines)} cells where oink (PDL) trails the best peer:")
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
