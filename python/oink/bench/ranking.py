"""Who is faster where, from result records alone (no torch: the tests feed it synthetic records).

A cell is one shape (N, M) in one (suite, variant, op, regime). Per cell: the best peer (Quack,
FlashInfer, vLLM, Liger), the best peer without PDL, the best PyTorch baseline, and oink's ratios:
`oink ×` = best peer µs / oink µs, `no-PDL ×` = best peer without PDL µs / oink_no_pdl µs,
`baseline ×` = best baseline µs / oink µs (> 1: oink faster). The summaries take the geometric
mean and the worst of those ratios over the cells.
"""

from __future__ import annotations

import math
from collections import defaultdict

OINK, TORCH, PEER, FLOOR = "oink", "torch", "peer", "floor"
OINK_NAMES = ("oink", "oink_no_pdl")
TORCH_NAMES = ("torch_eager", "F.rms_norm", "inductor")
FLOOR_NAMES = ("copy",)
_PDL_NAMES = ("oink", "flashinfer", "flashinfer_cute")  # for records written without "pdl"

# (ratio key, name of the provider it compares with, what it is)
RATIOS = (
    ("oink_x", "best_peer", "oink: best peer µs / oink µs"),
    ("no_pdl_x", "best_peer_no_pdl", "oink_no_pdl: best peer without PDL µs / oink_no_pdl µs"),
    ("baseline_x", "best_baseline", "oink: best PyTorch baseline µs / oink µs"),
)


def group_of(r: dict) -> str:
    if r.get("group"):
        return r["group"]
    name = r["provider"]
    if name in FLOOR_NAMES:
        return FLOOR
    return OINK if name in OINK_NAMES else TORCH if name in TORCH_NAMES else PEER


def pdl_of(r: dict) -> bool:
    return bool(r["pdl"]) if "pdl" in r else r["provider"] in _PDL_NAMES


def part_key(r: dict) -> tuple[str, str, str, str]:
    """(suite, variant, op, regime); records from before regimes and variants were hbm, one
    variant."""
    return (r["suite"], r.get("variant", ""), r["op"], r.get("regime", "hbm"))


def timed(r: dict) -> bool:
    """A usable time: measured, and positive (a GEMM chain's marginal at or below zero is noise
    in the difference of two chains, not a time)."""
    return r.get("status") == "ok" and r.get("time_us") is not None and r["time_us"] > 0


def _fastest(recs: list[dict]) -> dict | None:
    return min(recs, key=lambda r: r["time_us"]) if recs else None


def compare_cell(recs: list[dict]) -> dict:
    """The records of one cell -> best peer / best peer without PDL / best baseline (names and µs)
    and oink's ratios against them (keys of RATIOS), where both sides were timed."""
    ok = [r for r in recs if timed(r)]
    by_name = {r["provider"]: r for r in ok}
    peers = [r for r in ok if group_of(r) == PEER]
    rivals = {
        "best_peer": (_fastest(peers), "oink"),
        "best_peer_no_pdl": (_fastest([r for r in peers if not pdl_of(r)]), "oink_no_pdl"),
        "best_baseline": (_fastest([r for r in ok if group_of(r) == TORCH]), "oink"),
    }
    out: dict = {}
    for key, rival_key, _ in RATIOS:
        rival, ours = rivals[rival_key]
        if rival is None:
            continue
        out[rival_key], out[rival_key + "_us"] = rival["provider"], rival["time_us"]
        if ours in by_name:
            out[key] = rival["time_us"] / by_name[ours]["time_us"]
    return out


def cells(records: list[dict]) -> dict[tuple, dict[tuple[int, int], list[dict]]]:
    """{part_key: {(N, M): records}}, in run order."""
    out: dict = defaultdict(lambda: defaultdict(list))
    for r in records:
        out[part_key(r)][(r["N"], r["M"])].append(r)
    return out


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _ratio_stats(points: list[tuple[float, str]]) -> dict:
    worst = min(points)
    return {
        "geomean": geomean([v for v, _ in points]),
        "worst": worst[0],
        "worst_where": worst[1],
        "best": max(v for v, _ in points),
        "cells": len(points),
    }


def _summary(parts: dict) -> dict:
    """Over the cells of one or several parts: oink's count of ok cells and its ratio stats."""
    row: dict = {"shapes": 0, "oink_ok": 0, "oink_not_ok": []}
    points: dict[str, list] = defaultdict(list)
    for (suite, variant, _, _), shapes in parts.items():
        for (n, m), recs in shapes.items():
            oink = [r for r in recs if r["provider"] == "oink"]
            if not oink:
                continue
            row["shapes"] += 1
            status = oink[0]["status"]
            row["oink_ok"] += status == "ok"
            if status not in ("ok", "skipped"):
                row["oink_not_ok"].append(f"{suite} {variant} N={n} M={m}: {status}")
            c = compare_cell(recs)
            for key, rival_key, _ in RATIOS:
                if key in c:
                    where = f"{suite} {variant} N={n} M={m} vs {c[rival_key]}"
                    points[key].append((c[key], where))
    for key, _, _ in RATIOS:
        if points[key]:
            row[key] = _ratio_stats(points[key])
    return row


def summarize(records: list[dict]) -> list[dict]:
    """Per (suite, variant, op, regime), in run order: oink's ok count, its ratio stats (RATIOS),
    and its % of the copy ceiling at the part's largest M."""
    rows = []
    for key, shapes in cells(records).items():
        suite, variant, op, regime = key
        row = {"suite": suite, "variant": variant, "op": op, "regime": regime}
        row.update(_summary({key: shapes}))
        ok = [r for recs in shapes.values() for r in recs if r["provider"] == "oink" and timed(r)]
        if ok and regime != "gemm":  # a marginal cost over bytes is no bandwidth
            m_max = max(r["M"] for r in ok)
            pcts = [r["pct_ceiling"] for r in ok if r["M"] == m_max and "pct_ceiling" in r]
            if pcts:
                row.update(large_m=m_max, pct_ceiling_large_m=(min(pcts), max(pcts)))
        rows.append(row)
    return rows


def summarize_by_regime(records: list[dict]) -> list[dict]:
    """Per (regime, op) over every suite and variant: the headline table."""
    grouped: dict[tuple[str, str], dict] = defaultdict(dict)
    for key, shapes in cells(records).items():
        _, _, op, regime = key
        grouped[(regime, op)][key] = shapes
    order = {"hbm": 0, "l2": 1, "gemm": 2}
    rows = []
    for regime, op in sorted(grouped, key=lambda k: (order.get(k[0], 9), k[1] != "rmsnorm")):
        rows.append({"regime": regime, "op": op, **_summary(grouped[(regime, op)])})
    return rows
