"""SVG plots via matplotlib (optional: without it, a warning and no plots).

One file per (suite, variant, regime): a row of panels per op and quantity (µs per call on a log
scale; % of the copy ceiling, except in the gemm regime, whose marginal cost is no bandwidth), one
panel per N (or per M for the sweep, whose long axis is N), one line per provider, oink thickest."""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from oink.bench import ranking
from oink.bench.report import provider_names


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "oink"  # stable element ids: diffs show real changes
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller files
    import matplotlib.pyplot as plt

    return plt


def _axes(recs: list[dict]) -> tuple[str, str, list[int]]:
    """(x axis key, panel key, panel values): x is whichever of M and N has more values."""
    ms = sorted({r["M"] for r in recs})
    ns = sorted({r["N"] for r in recs})
    return ("N", "M", ms) if len(ns) > len(ms) else ("M", "N", ns)


def _short(v: int) -> str:
    return f"{v >> 10}K" if v >= 4096 and v % 1024 == 0 else str(v)


def _panel(ax, recs, names, colors, xkey, key, logy) -> None:
    import matplotlib.ticker as ticker

    for i, name in enumerate(names):
        pts = sorted(
            (r[xkey], r[key])
            for r in recs
            if r["provider"] == name and ranking.timed(r) and r.get(key) is not None
        )
        if pts:
            ax.plot(
                *zip(*pts, strict=True),
                "o-" if name.startswith("oink") else "o--",
                color=colors[i % len(colors)],
                label=name,
                linewidth=2.4 if name == "oink" else 1.1,
                markersize=3,
            )
    ax.set_xscale("log", base=2)
    xs = sorted({r[xkey] for r in recs})
    ax.set_xticks(xs, [_short(v) for v in xs], fontsize=7)
    ax.tick_params(axis="x", which="minor", bottom=False)
    if logy:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    else:
        ax.set_ylim(bottom=0)
    ax.grid(True, which="both", alpha=0.3)


def _figure(plt, recs: list[dict], title: str, path: Path) -> None:
    names = provider_names(recs)
    xkey, pkey, pvals = _axes(recs)
    ops = list(dict.fromkeys(r["op"] for r in recs))
    gemm = recs[0]["regime"] == "gemm"
    quantities = [("time_us", "µs" + (" (marginal)" if gemm else ""), True)]
    if not gemm:
        quantities.append(("pct_ceiling", "% of copy", False))
    rows = [(op, q) for op in ops for q in quantities]
    fig, axes = plt.subplots(
        len(rows),
        len(pvals),
        figsize=(max(6.4, 3.6 * len(pvals)), 2.6 * len(rows) + 0.8),
        squeeze=False,
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for row, (op, (key, label, logy)) in zip(axes, rows, strict=True):
        for ax, pv in zip(row, pvals, strict=True):
            panel = [r for r in recs if r["op"] == op and r[pkey] == pv]
            _panel(ax, panel, names, colors, xkey, key, logy)
            ax.set_title(f"{op}, {pkey} = {pv}", fontsize=8)
        row[0].set_ylabel(label, fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel(xkey)
    handles, labels = {}, {}
    for ax in axes.flat:  # every provider that has a line somewhere, once
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
            labels[lab] = lab
    fig.legend(
        list(handles.values()),
        list(labels),
        loc="lower center",
        ncol=min(len(labels), 6),
        fontsize=8,
        frameon=False,
    )
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.6 / fig.get_figheight() + 0.02, 1, 0.97))
    fig.savefig(path, format="svg")
    plt.close(fig)


def write(out_dir: Path, records: list[dict], ceiling_gbps: float, where: str) -> list[str]:
    """The SVG files written (names relative to out_dir); [] with a warning without matplotlib."""
    plt = _pyplot()
    if plt is None:
        print(
            "warning: matplotlib is not installed: no plots written (pip install matplotlib)",
            file=sys.stderr,
        )
        return []
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        suite, variant, _, regime = ranking.part_key(r)
        groups[(suite, variant, regime)].append(r)
    written = []
    for (suite, variant, regime), recs in groups.items():
        if not any(ranking.timed(r) for r in recs):
            continue
        name = f"{suite}_{variant}_{regime}.svg"
        title = (
            f"{suite}, {variant}, regime {regime} on {where} (copy ceiling {ceiling_gbps:.0f} GB/s)"
        )
        _figure(plt, recs, title, out_dir / name)
        written.append(name)
    return written
