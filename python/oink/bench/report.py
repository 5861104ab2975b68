"""Outputs of a run: results.json (every record), results.md (tables), and the one-screen summary.
The ratios and summaries come from ranking.py."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from oink.bench import chain, ranking

METHOD = (
    "Correctness gate first: each provider's output (for the fused op, the returned output and "
    "new residual) against a float64 reference (rel_l2 bound 4u for 16-bit dtypes, 1e-5 for "
    "float32; any non-finite output fails); a provider that fails is not timed. GPU: per-call "
    "device time = median over >= 10 replays of one CUDA graph of >= 20 calls cycling over "
    "rotating buffer sets, each replay between CUDA events. CPU: median of host-timed loops. "
    "GB/s from the minimum bytes: rmsnorm 2*M*N*e + N*ew, fused add 4*M*N*e + N*ew; % of the "
    "copy ceiling against a device-to-device copy (bytes read + written) measured in the same "
    "run. results.json's ratio_vs_best_baseline: ratio = best baseline time / oink time over "
    "every other provider (> 1: oink faster)."
)
REGIMES_TEXT = (
    "Regimes: **hbm** isolated calls over rotating buffer sets of > 2x L2 where memory and the "
    "--max-sets cap allow (each record has its footprint); **l2** the same graphs over 4 sets, "
    "L2-resident; **gemm** the norm between GEMMs: 32 layers of (norm, then F.linear with the "
    "layer's own [N, N] weight in x's dtype, cuBLAS) in one CUDA graph, minus the same chain "
    "without norms, / 32: the median over 15 replay pairs (one of each, alternated; every "
    "provider's pairs in the same rounds, in turn) of their "
    "difference; a marginal whose 95% confidence interval reaches further than "
    f"{chain.NOISE_TOLERANCE:.0%} of it, measured again over {chain.REPLAYS * chain.RETRY_FACTOR} "
    "pairs, is reported as noisy, and so is one measured while the chain without norms (one "
    f"graph per shape) ran more than {chain.CHAIN_DRIFT_TOLERANCE:.0%} away from its median over "
    "the shape's providers (the GPU's clocks changed); the fused op carries a "
    "residual stream through the chain. l2 and gemm apply only where M <= 256; by default the "
    "decode suite gets all three on a GPU, every other suite hbm."
)
RATIOS_TEXT = (
    "`oink ×` = best peer µs / oink µs; `no-PDL ×` = best peer without PDL µs / oink_no_pdl µs; "
    "`baseline ×` = best PyTorch baseline (torch_eager, F.rms_norm, inductor) µs / oink µs; "
    "> 1: oink faster. Peers: quack, flashinfer_cute, flashinfer, flashinfer_nopdl, vllm, liger "
    "(flashinfer and flashinfer_cute launch with PDL)."
)
_STATUS_CELL = {
    "unsupported": "n/a",
    "skipped": "skip",
    "failed": "**FAIL**",
    "error": "err",
    "noisy": "noisy",
}


@dataclass
class Run:
    """What a report says about the run besides its records."""

    env: dict
    config: dict
    found: dict  # peer: "version (source)" or why not
    notes: dict  # provider: what it calls
    kit: dict | None  # the peers kit's setup status
    ceiling: dict


def provider_names(records: list[dict]) -> list[str]:
    """oink first, then the others in the order they were measured."""
    names = list(dict.fromkeys(r["provider"] for r in records))
    return ["oink"] + [n for n in names if n != "oink"] if "oink" in names else names


def write_json(
    path: Path, run: Run, records: list[dict], status: str, parts_done: list[list[str]]
) -> None:
    """parts_done: [suite, variant] of each part measured to its end (what --resume keeps)."""
    doc = {
        "schema": 2,
        "status": status,
        "env": run.env,
        "config": run.config,
        "parts_done": parts_done,
        "method": f"{METHOD} {REGIMES_TEXT} {RATIOS_TEXT}",
        "providers": {n: run.notes[n] for n in provider_names(records) if n in run.notes},
        "providers_found": run.found,
        "peers_kit": run.kit,
        "copy_ceiling": run.ceiling,
        "summary_by_regime": ranking.summarize_by_regime(records),
        "summary": ranking.summarize(records),
        "results": records,
    }
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")


# --- cells -------------------------------------------------------------------------------------


def _cell(r: dict | None) -> str:
    """µs (% of the copy ceiling); the gemm regime's marginal µs alone (no bandwidth)."""
    if r is None:
        return ""
    if r["status"] != "ok":
        return _STATUS_CELL.get(r["status"], r["status"])
    if r["regime"] == "gemm" or "pct_ceiling" not in r:
        return f"{r['time_us']:.2f}"
    pct = r["pct_ceiling"]
    return f"{r['time_us']:.2f} ({pct:.1f}%)" if pct < 10 else f"{r['time_us']:.2f} ({pct:.0f}%)"


def _x(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"


def _stat(row: dict, key: str, where: bool = True) -> str:
    s = row.get(key)
    if not s:
        return "-"
    worst = f"{s['worst']:.2f}" + (f" ({s['worst_where']})" if where else "")
    return f"**{s['geomean']:.2f}** / {worst}"


def _shape_row(cells: dict[str, dict], names: list[str]) -> list[str]:
    c = ranking.compare_cell(list(cells.values()))
    return [_cell(cells.get(n)) for n in names] + [
        c.get("best_peer", "-"),
        _x(c.get("oink_x")),
        _x(c.get("no_pdl_x")),
        c.get("best_baseline", "-"),
        _x(c.get("baseline_x")),
    ]


def _host_row(cells: dict[str, dict], names: list[str]) -> list[str]:
    return [f"{cells[n]['host_us']:.1f}" if "host_us" in cells.get(n, {}) else "-" for n in names]


def _rows(shapes: dict[tuple[int, int], list[dict]], names: list[str], value) -> list[str]:
    out = []
    for (n, m), recs in sorted(shapes.items()):
        cells = {r["provider"]: r for r in recs}
        out.append(" | ".join(["", str(n), str(m), *value(cells, names), ""]).strip())
    return out


# --- sections ----------------------------------------------------------------------------------


def _facts(run: Run) -> list[str]:
    env, config = run.env, run.config
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
    parts = [
        f"{p['suite']} {p['variant']} ({', '.join(p['regimes'])}; {p['shapes']} shapes)"
        for p in config.get("parts", [])
    ]
    facts += [
        ("measured", "; ".join(parts)),
        ("copy ceiling", f"{run.ceiling['GBps']:.0f} GB/s ({run.ceiling['method']})"),
        ("oink.explain", env.get("explain", "not probed")),
        ("peers", "; ".join(f"{k}: {v}" for k, v in run.found.items()) or "none tried"),
    ]
    if run.kit:
        facts.append(("peers kit", run.kit.get("kit", "?")))
    for call in env.get("resumed", []):  # later calls of one run (oink-bench --resume)
        measured = ", ".join(" ".join(k) for k in call["parts"]) or "nothing left"
        facts.append(
            (
                "resumed",
                f"{call['date_utc']} (`{call['command']}`, oink {call['oink_revision']}, copy "
                f"ceiling {call['copy_ceiling_GBps']:.0f} GB/s): measured {measured}",
            )
        )
    return [f"- {k}: {v}" for k, v in facts]


def _summary_tables(records: list[dict]) -> list[str]:
    lines = [
        "## Summary: oink against the best peer",
        "",
        RATIOS_TEXT + " Cells: **geomean** / worst (where), over the shapes of every suite and "
        "variant.",
        "",
        "| regime | op | oink ok | oink × best peer | no-PDL × best no-PDL peer | baseline × |",
        "|---|---|---:|---|---|---|",
    ]
    for s in ranking.summarize_by_regime(records):
        lines.append(
            f"| {s['regime']} | {s['op']} | {s['oink_ok']}/{s['shapes']} | "
            f"{_stat(s, 'oink_x')} | {_stat(s, 'no_pdl_x')} | {_stat(s, 'baseline_x', False)} |"
        )
    lines += [
        "",
        "Per suite and variant (worst shapes in the tables below):",
        "",
        "| suite | variant | regime | op | oink ok | oink × | no-PDL × | baseline × "
        "| oink % ceiling at largest M |",
        "|---|---|---|---|---:|---|---|---|---|",
    ]
    for s in ranking.summarize(records):
        pc = "-"
        if "pct_ceiling_large_m" in s:
            lo, hi = s["pct_ceiling_large_m"]
            pc = f"{lo:.0f}-{hi:.0f}% (M={s['large_m']})"
        lines.append(
            f"| {s['suite']} | {s['variant']} | {s['regime']} | {s['op']} | "
            f"{s['oink_ok']}/{s['shapes']} | {_stat(s, 'oink_x', False)} | "
            f"{_stat(s, 'no_pdl_x', False)} | {_stat(s, 'baseline_x', False)} | {pc} |"
        )
    return lines


def _part_tables(key: tuple, shapes: dict, host_iters: int) -> list[str]:
    suite, variant, op, regime = key
    recs = [r for rs in shapes.values() for r in rs]
    names = provider_names(recs)
    unit = (
        "marginal µs per norm in the GEMM chain"
        if regime == "gemm"
        else "µs per call (% of the copy ceiling)"
    )
    lines = [
        "",
        f"## {suite} · {op} · {variant} · {regime}",
        "",
        f"{unit}; n/a, skip, FAIL, err, noisy: see [Why n/a](#why-na).",
        "",
        "| N | M | " + " | ".join(names) + " | best peer | oink × | no-PDL × | best baseline "
        "| baseline × |",
        "|---:|---:" + "|---:" * len(names) + "|---|---:|---:|---|---:|",
    ]
    lines += _rows(shapes, names, _shape_row)
    if any("host_us" in r for r in recs):
        lines += [
            "",
            f"Eager host time per call, µs ({suite}, {op}, {variant}): a loop of {host_iters} "
            "eager calls, host clock, synchronize at the end.",
            "",
            "| N | M | " + " | ".join(names) + " |",
            "|---:|---:" + "|---:" * len(names) + "|",
        ]
        lines += _rows(shapes, names, _host_row)
    return lines


def why_na(records: list[dict], limit: int = 4) -> list[str]:
    """One line per (provider, status, reason): how many cells, and where."""
    groups: dict[tuple, list[str]] = defaultdict(list)
    for r in records:
        if r["status"] != "ok":
            key = (r["provider"], r["status"], r.get("reason", ""))
            groups[key].append(" ".join(ranking.part_key(r)))
    lines = []
    for (provider, status, reason), where in groups.items():
        places = list(dict.fromkeys(where))
        shown = ", ".join(places[:limit]) + (
            f" and {len(places) - limit} more" if len(places) > limit else ""
        )
        lines.append(f"- `{provider}` {status} ({len(where)} cells): {reason}. In: {shown}")
    return lines


def markdown(run: Run, records: list[dict], plots: list[str], status: str) -> str:
    where = run.env.get("gpu") or (
        f"CPU ({run.env.get('host_cpu')}, {run.env.get('cpu_threads')} threads)"
    )
    lines = [f"# oink benchmark: {where}", ""]
    if status != "complete":
        lines += [f"**Run incomplete: {status}**", ""]
    lines += _facts(run) + ["", METHOD, "", REGIMES_TEXT, "", "Providers:", ""]
    lines += [f"- `{n}`: {run.notes[n]}" for n in provider_names(records) if n in run.notes]
    lines += [""] + _summary_tables(records)
    for key, shapes in ranking.cells(records).items():
        lines += _part_tables(key, shapes, run.config.get("host_iters", 0))
    lines += ["", "## Why n/a", ""]
    lines += why_na(records) or ["Every provider ran and passed its gate everywhere."]
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def summary_text(run: Run, records: list[dict], out_dir: Path, status: str) -> str:
    where = run.env.get("gpu") or "CPU"
    lines = [
        f"oink bench on {where}: torch {run.env['torch']}, oink {run.env['oink_revision']}, "
        f"copy ceiling {run.ceiling['GBps']:.0f} GB/s"
    ]
    if status != "complete":
        lines.append(f"RUN INCOMPLETE: {status}")
    lines.append(
        f"{'suite':8} {'variant':11} {'regime':6} {'op':19} {'ok':>7}  "
        "geomean / worst of: oink x best peer | no-PDL x | baseline x"
    )

    def stat(s: dict, key: str) -> str:
        v = s.get(key)
        return f"{v['geomean']:.2f}x / {v['worst']:.2f}x" if v else "-"

    for s in ranking.summarize(records):
        ok = f"{s['oink_ok']}/{s['shapes']}"
        lines.append(
            f"{s['suite']:8} {s['variant']:11} {s['regime']:6} {s['op']:19} {ok:>7}  "
            f"{stat(s, 'oink_x')} | {stat(s, 'no_pdl_x')} | {stat(s, 'baseline_x')}"
        )
        for bad in s["oink_not_ok"]:
            lines.append(f"{'':9}oink {bad}")
    lines.append("x = the other's time / oink's (> 1: oink faster)")
    na = {r["provider"] for r in records if r["status"] != "ok" and ranking.group_of(r) == "peer"}
    if na:
        lines.append(f"peers not timed somewhere (results.md, Why n/a): {', '.join(sorted(na))}")
    lines.append(f"results: {out_dir}/results.json, {out_dir}/results.md")
    return "\n".join(lines)
