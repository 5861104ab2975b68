"""The results file (JSON: environment, copy ceiling, one record per measurement with its median
and spread) and what is rendered from it: results.md (tables) and one plot per table."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from tabulate import tabulate

SCHEMA = "oink-bench/1"
ORDER = ("oink", "oink_no_pdl", "torch_eager", "torch_compile")  # then the peers, by name


def _compact(value):
    """Floats to 4 significant digits: the spread of a median is wider than that."""
    return float(f"{value:.4g}") if isinstance(value, float) else value


def save(path: Path, env: dict, copy_gbps: float, records: list[dict]) -> None:
    """One record a line, so that two runs' files compare line by line."""
    head = {"schema": SCHEMA, "env": env, "copy_GBps": _compact(copy_gbps)}
    lines = [json.dumps({k: _compact(v) for k, v in r.items()}) for r in records]
    text = json.dumps(head)[:-1] + ', "records": [\n' + ",\n".join(lines) + "\n]}\n"
    path.write_text(text)


def load(path: Path) -> dict:
    doc = json.loads(Path(path).read_text())
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not an {SCHEMA} results file")
    return doc


def record_key(r: dict) -> tuple:
    return (r["op"], r["suite"], r["variant"], r["regime"], r["N"], r["M"], r["provider"])


def merge(docs: list[dict]) -> dict:
    """Several runs on one GPU as one reference run (a call limited in time measures some suites
    each): the first run's environment and copy ceiling, every record, a later run's replacing
    an earlier one's of the same table, shape and provider. Runs on different GPUs or torch
    versions do not compare, so they raise."""
    first = docs[0]
    for d in docs[1:]:
        for fact in ("gpu", "device", "torch"):
            if d["env"].get(fact) != first["env"].get(fact):
                raise ValueError(
                    f"results differ in {fact}: expected {first['env'].get(fact)!r}, "
                    f"given {d['env'].get(fact)!r}"
                )
    records: dict[tuple, dict] = {}
    commands, missing = [], {}
    for d in docs:
        records.update((record_key(r), r) for r in d["records"])
        commands.append(d["env"].get("command", "oink-bench"))
        missing.update(d["env"].get("missing") or {})
    env = {**first["env"], "command": "`, `".join(dict.fromkeys(commands)), "missing": missing}
    return {**first, "env": env, "records": list(records.values())}


def sections(records: list[dict]) -> dict[tuple, list[dict]]:
    """Records by table: (op, suite, variant, regime), in the order they were measured."""
    out: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        out[(r["op"], r["suite"], r["variant"], r["regime"])].append(r)
    return out


def provider_order(records: list[dict]) -> list[str]:
    names = {r["provider"] for r in records}
    return [p for p in ORDER if p in names] + sorted(names - set(ORDER))


def _shapes(records: list[dict]) -> dict[tuple, dict[str, dict]]:
    out: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in records:
        out[(r["N"], r["M"])][r["provider"]] = r
    return out


def _cell(r: dict | None, oink_us: float | None) -> str:
    if r is None:
        return ""
    if r["status"] != "ok":
        return {"failed": "FAILED", "error": "error"}.get(r["status"], "n/a")
    text = f"{r['median_us']:.1f} ({r['pct_copy']:.0f}%)"
    if oink_us and r["provider"] != "oink":
        text += f" ×{r['median_us'] / oink_us:.2f}"
    return text


def speedups(records: list[dict]) -> list[float]:
    """Per shape, oink's time against the fastest other provider that passed (> 1: oink faster);
    oink_no_pdl is oink itself and not counted."""
    out = []
    for by in _shapes(records).values():
        oink = by.get("oink", {})
        others = [r["median_us"] for p, r in by.items()
                  if p not in ("oink", "oink_no_pdl") and r["status"] == "ok"]  # fmt: skip
        if oink.get("status") == "ok" and others:
            out.append(min(others) / oink["median_us"])
    return out


def geomean(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def markdown(doc: dict, with_plots: bool = False) -> str:
    env, records = doc["env"], doc["records"]
    peers = ", ".join(f"{k} {v}" for k, v in env.get("peers", {}).items()) or "none installed"
    facts = [env.get("gpu", env.get("device")), f"torch {env.get('torch')}"]
    facts += [f"CUDA {env['cuda']}"] if env.get("cuda") else []
    facts += [f"driver, max SM and memory clocks: {env['driver']}"] if env.get("driver") else []
    lines = [
        "# oink-bench results",
        "",
        f"{', '.join(facts)}; peers: {peers}. Copy ceiling {doc['copy_GBps']:.0f} GB/s. "
        f"Command: `{env.get('command', 'oink-bench')}`.",
        "",
        "Each cell: median µs per call, % of the copy ceiling, and the provider's time over "
        "oink's (×; > 1: oink faster). FAILED: outside the float64 gate; n/a: not offered. "
        "peak MiB: the most memory one step allocates beyond what it was given.",
        "",
        "## Summary: oink against the fastest other provider, per shape",
        "",
    ]
    missing = env.get("missing") or {}
    if missing:
        lines[-2:-2] = ["Not measured: " + "; ".join(f"{k}: {v}" for k, v in missing.items()), ""]
    rows = []
    for (op, suite, variant, regime), recs in sections(records).items():
        s = speedups(recs)
        if s:
            rows.append([op, suite, variant, regime, len(s), f"{geomean(s):.2f}",
                         f"{min(s):.2f}", f"{max(s):.2f}"])  # fmt: skip
    headers = ["op", "suite", "variant", "regime", "shapes", "geomean", "worst", "best"]
    lines += [tabulate(rows, headers, tablefmt="github"), ""]
    for key, recs in sections(records).items():
        op, suite, variant, regime = key
        names = provider_order(recs)
        peaks = [p for p in names if any("peak_MiB" in r for r in recs if r["provider"] == p)]
        table = []
        for (n, m), by in _shapes(recs).items():
            oink = by.get("oink", {})
            oink_us = oink.get("median_us") if oink.get("status") == "ok" else None
            mib = [f"{by[p]['peak_MiB']:.0f}" if "peak_MiB" in by.get(p, {}) else "" for p in peaks]
            table.append([n, m, *(_cell(by.get(p), oink_us) for p in names), *mib])
        lines += [f"## {op}, {suite} {variant}, {regime}", ""]
        if with_plots:
            lines += [f"![{op}, {suite} {variant}, {regime}]({plot_name(key)})", ""]
        headers = ["N", "M", *names, *(f"{p} peak MiB" for p in peaks)]
        lines += [tabulate(table, headers, tablefmt="github"), ""]
        notes = sorted({f"{r['provider']}: {r['note']}" for r in recs if r.get("note")})
        lines += [f"- {n}" for n in notes] + ([""] if notes else [])
    return "\n".join(lines)


def plot_name(key: tuple) -> str:
    return "_".join(str(k).replace(" ", "_") for k in key) + ".png"


def plots(doc: dict, out: Path) -> list[Path]:
    """One PNG per table: % of the copy ceiling per shape, a line per provider."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for key, recs in sections(doc["records"]).items():
        shapes = list(_shapes(recs))
        fig, ax = plt.subplots(figsize=(8, 3.5))
        for p in provider_order(recs):
            ys = [next((r.get("pct_copy") for r in recs if r["provider"] == p
                        and (r["N"], r["M"]) == s and r["status"] == "ok"), math.nan)
                  for s in shapes]  # fmt: skip
            ax.plot(range(len(shapes)), ys, marker="o", ms=3, label=p, lw=2 if p == "oink" else 1)
        ax.set_xticks(range(len(shapes)), [f"{n}x{m}" for n, m in shapes], rotation=60, fontsize=6)
        ax.set_ylabel("% of copy ceiling")
        ax.set_title(" ".join(map(str, key)), fontsize=9)
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        path = out / plot_name(key)
        fig.savefig(path, dpi=72, pil_kwargs={"optimize": True})  # lossless; smaller in git
        plt.close(fig)
        written.append(path)
    return written


def render(doc: dict, out: Path, with_plots: bool = True) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(markdown(doc, with_plots))
    if with_plots:
        plots(doc, out)
