"""Outputs of a run: results.json (everything), results.md (tables), and the one-screen summary."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from oink.bench.providers import DESCRIPTIONS

METHOD = (
    "Correctness gate first: each provider's output against a float64 reference "
    "(rel_l2 bound 4u for 16-bit dtypes, 1e-5 for float32; any non-finite output fails); "
    "a provider that fails is not timed. GPU: per-call device time = median over >= 10 "
    "replays of one CUDA graph of >= 20 calls cycling over rotating buffer sets (footprint "
    "> 2x L2 where memory and the 256-set cap allow), each replay between CUDA events. "
    "CPU: median of host-timed loops. GB/s from the minimum bytes: rmsnorm 2*M*N*e + N*ew, "
    "fused add 4*M*N*e + N*ew. % ceiling against a device-to-device copy (bytes read + "
    "written) measured in the same run. ratio = best baseline time / oink time: > 1 means "
    "oink is faster."
)


def groups(records: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """Records by (suite, op), in run order."""
    out: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        out[(r["suite"], r["op"])].append(r)
    return out


def provider_names(records: list[dict]) -> list[str]:
    """oink first, then the baselines in the order they were measured."""
    names = list(dict.fromkeys(r["provider"] for r in records))
    return ["oink"] + [n for n in names if n != "oink"] if "oink" in names else names


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summarize(records: list[dict]) -> list[dict]:
    """Per (suite, op): oink's geometric-mean ratio vs the best baseline, the worst shape, each
    baseline's geometric-mean ratio, and oink's % of the copy ceiling at the suite's largest M."""
    rows = []
    for (suite, op), recs in groups(records).items():
        oink = [r for r in recs if r["provider"] == "oink"]
        timed = [r for r in oink if "ratio_vs_best_baseline" in r]
        row = {"suite": suite, "op": op, "shapes": len(oink), "oink_ok": 0, "geomean_ratio": None}
        row["oink_ok"] = sum(r["status"] == "ok" for r in oink)
        row["oink_not_ok"] = [
            f"N={r['N']} M={r['M']}: {r['status']}"
            for r in oink
            if r["status"] not in ("ok", "skipped")
        ]
        if timed:
            worst = min(timed, key=lambda r: r["ratio_vs_best_baseline"])
            row.update(
                geomean_ratio=_geomean([r["ratio_vs_best_baseline"] for r in timed]),
                min_ratio=worst["ratio_vs_best_baseline"],
                min_where=f"N={worst['N']} M={worst['M']} vs {worst['best_baseline']}",
                max_ratio=max(r["ratio_vs_best_baseline"] for r in timed),
            )
        per_base = {}
        ok_oink = {(r["N"], r["M"]): r for r in oink if r["status"] == "ok"}
        for name in provider_names(recs)[1:]:
            pairs = [
                (ok_oink[(r["N"], r["M"])], r)
                for r in recs
                if r["provider"] == name and r["status"] == "ok" and (r["N"], r["M"]) in ok_oink
            ]
            if pairs:
                per_base[name] = _geomean([b["time_us"] / o["time_us"] for o, b in pairs])
        row["geomean_ratio_per_baseline"] = per_base
        ok = [r for r in oink if r["status"] == "ok"]
        if ok:
            m_max = max(r["M"] for r in ok)
            pcts = [r["pct_ceiling"] for r in ok if r["M"] == m_max]
            row.update(large_m=m_max, pct_ceiling_large_m=(min(pcts), max(pcts)))
        rows.append(row)
    return rows


def write_json(
    path: Path,
    env: dict,
    config: dict,
    found: dict,
    ceiling: dict,
    records: list[dict],
    status: str,
) -> None:
    doc = {
        "schema": 1,
        "status": status,
        "env": env,
        "config": config,
        "method": METHOD,
        "providers": {n: DESCRIPTIONS[n] for n in provider_names(records) if n in DESCRIPTIONS},
        "providers_found": found,
        "copy_ceiling": ceiling,
        "summary": summarize(records),
        "results": records,
    }
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")


def _cell(r: dict | None) -> str:
    if r is None:
        return ""
    status = r["status"]
    if status == "ok":
        return f"{r['time_us']:.2f} ({r['GBps']:.0f})"
    return {"unsupported": "-", "skipped": "skip", "failed": "**FAIL**", "error": "err"}.get(
        status, status
    )


def _table(recs: list[dict], names: list[str], value) -> list[str]:
    by_shape: dict[tuple[int, int], dict[str, dict]] = defaultdict(dict)
    for r in recs:
        by_shape[(r["N"], r["M"])][r["provider"]] = r
    return [
        " | ".join(["", str(n), str(m), *value(by_shape[(n, m)], names), ""]).strip()
        for (n, m) in sorted(by_shape)
    ]


def _main_row(cells: dict[str, dict], names: list[str]) -> list[str]:
    out = [_cell(cells.get(n)) for n in names]
    o = cells.get("oink")
    if o and o["status"] == "ok":
        ratio = o.get("ratio_vs_best_baseline")
        out += [
            f"{o['pct_ceiling']:.0f}%",
            o.get("best_baseline", "-"),
            f"**{ratio:.2f}**" if ratio is not None else "-",
        ]
    else:
        out += ["-", "-", "-"]
    return out


def _host_row(cells: dict[str, dict], names: list[str]) -> list[str]:
    return [
        f"{cells[n]['host_us']:.1f}" if n in cells and "host_us" in cells[n] else "-" for n in names
    ]


def markdown(
    env: dict,
    config: dict,
    found: dict,
    ceiling: dict,
    records: list[dict],
    plots: list[str],
    status: str,
) -> str:
    where = env.get("gpu") or f"CPU ({env.get('host_cpu')}, {env.get('cpu_threads')} threads)"
    lines = [f"# oink benchmark: {where}", ""]
    if status != "complete":
        lines += [f"**Run incomplete: {status}**", ""]
    facts = [
        ("command", f"`{env['command']}`"),
        ("date (UTC)", env["date_utc"]),
        ("oink", f"{env['oink_version']} ({env['oink_revision']})"),
        ("torch", env["torch"]),
    ]
    if env.get("gpu"):
        facts += [
            ("driver", env["driver"]),
            ("CUDA runtime (torch)", env["cuda_runtime"]),
            ("L2", f"{(env['l2_bytes'] or 0) >> 20} MiB"),
            ("SMs", env["sm_count"]),
        ]
    facts += [
        ("dtype / weight / pad", f"{config['dtype']} / {config['weight_dtype']} / {config['pad']}"),
        ("copy ceiling", f"{ceiling['GBps']:.0f} GB/s ({ceiling['method']})"),
        ("oink.explain", env.get("explain", "not probed")),
        ("optional providers", ", ".join(f"{k}: {v}" for k, v in found.items()) or "none tried"),
    ]
    lines += [f"- {k}: {v}" for k, v in facts] + ["", METHOD, "", "Providers:", ""]
    lines += [f"- `{n}`: {DESCRIPTIONS[n]}" for n in provider_names(records) if n in DESCRIPTIONS]
    lines += ["", "## Summary", ""]
    lines += [
        "| suite | op | oink ok | geomean ratio | min ratio (where) "
        "| oink % ceiling at largest M |",
        "|---|---|---|---|---|---|",
    ]
    for s in summarize(records):
        gm, mn, pc = summary_cells(s, unit="", m_label="(M={})")
        lines.append(
            f"| {s['suite']} | {s['op']} | {s['oink_ok']}/{s['shapes']} | {gm} | {mn} | {pc} |"
        )
    for (suite, op), recs in groups(records).items():
        names = provider_names(recs)
        lines += [
            "",
            f"## {suite}: {op} ({config['dtype']}), µs per call (GB/s)",
            "",
            "ratio = best baseline time / oink time (> 1: oink faster); "
            "% ceiling = oink's GB/s over the copy ceiling.",
            "",
            "| N | M | " + " | ".join(names) + " | oink % ceiling | best baseline | ratio |",
            "|---" * (len(names) + 5) + "|",
        ]
        lines += _table(recs, names, _main_row)
        if any("host_us" in r for r in recs):
            lines += [
                "",
                f"Eager host time per call, µs ({suite}, {op}): a loop of "
                f"{config['host_iters']} eager calls, host clock, synchronize at the end.",
                "",
                "| N | M | " + " | ".join(names) + " |",
                "|---" * (len(names) + 2) + "|",
            ]
            lines += _table(recs, names, _host_row)
    bad = [r for r in records if r["status"] in ("failed", "error")]
    if bad:
        lines += ["", "## Failures and errors", ""]
        for r in bad:
            err = r.get("errors", {})
            stats = f" rel_l2={err['rel_l2']:.3g} (bound {err['bound']:.3g})" if err else ""
            lines.append(
                f"- {r['suite']} {r['op']} N={r['N']} M={r['M']} {r['provider']}: "
                f"{r['status']}: {r.get('reason', '')}{stats}"
            )
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def summary_cells(s: dict, unit: str, m_label: str) -> tuple[str, str, str]:
    """Geomean ratio, min ratio (where) and % of ceiling at the largest M of one summary row."""
    gm = f"{s['geomean_ratio']:.2f}{unit}" if s["geomean_ratio"] else "-"
    mn = f"{s['min_ratio']:.2f}{unit} ({s['min_where']})" if "min_ratio" in s else "-"
    pc = "-"
    if "pct_ceiling_large_m" in s:
        lo, hi = s["pct_ceiling_large_m"]
        pc = f"{lo:.0f}-{hi:.0f}% " + m_label.format(s["large_m"])
    return gm, mn, pc


def summary_text(env: dict, ceiling: dict, records: list[dict], out_dir: Path, status: str) -> str:
    where = env.get("gpu") or "CPU"
    lines = [
        f"oink bench on {where}: torch {env['torch']}, oink {env['oink_revision']}, "
        f"copy ceiling {ceiling['GBps']:.0f} GB/s"
    ]
    if status != "complete":
        lines.append(f"RUN INCOMPLETE: {status}")
    lines.append(
        f"{'suite':7} {'op':19} {'ok':>6} {'geomean':>8} {'min (where)':>40} {'%ceil@maxM':>14}"
    )
    for s in summarize(records):
        gm, mn, pc = summary_cells(s, unit="x", m_label="M={}")
        ok = f"{s['oink_ok']}/{s['shapes']}"
        lines.append(f"{s['suite']:7} {s['op']:19} {ok:>6} {gm:>8} {mn:>40} {pc:>14}")
        per = ", ".join(f"{k} {v:.2f}x" for k, v in s["geomean_ratio_per_baseline"].items())
        if per:
            lines.append(f"{'':8}oink vs each (geomean of time ratios): {per}")
        for bad in s["oink_not_ok"]:
            lines.append(f"{'':8}oink {bad}")
    lines.append("ratio = best baseline time / oink time (> 1: oink faster)")
    lines.append(f"results: {out_dir}/results.json, {out_dir}/results.md")
    return "\n".join(lines)
