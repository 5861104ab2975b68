"""SVG plots via matplotlib (optional: without it, a warning and no plots).

Per (suite, op): bandwidth against the suite's long axis (M, or N for the sweep), one panel per
value of the other, one line per provider, the copy ceiling dashed. For decode also latency
against M, device time solid and eager host time dotted."""

from __future__ import annotations

import sys
from pathlib import Path

from oink.bench.report import groups, provider_names


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


def _panels(recs: list[dict]) -> tuple[str, str, list[int]]:
    """(x axis key, panel key, panel values): x is whichever of M and N has more values."""
    ms = sorted({r["M"] for r in recs})
    ns = sorted({r["N"] for r in recs})
    return ("N", "M", ms) if len(ns) > len(ms) else ("M", "N", ns)


def _short(v: int) -> str:
    return f"{v >> 10}K" if v >= 4096 and v % 1024 == 0 else str(v)


def _draw(
    plt, recs, names, title, ylabel, series, path: Path, ceiling: float | None, logy: bool = False
) -> None:
    xkey, pkey, pvals = _panels(recs)
    import matplotlib.ticker as ticker

    width = max(6.4, 4.2 * len(pvals))  # one panel still leaves room for the title and legend
    fig, axes = plt.subplots(1, len(pvals), figsize=(width, 3.6), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, pv in zip(axes[0], pvals, strict=True):
        for i, name in enumerate(names):
            for key, style, label in series(name):
                pts = sorted(
                    (r[xkey], r[key])
                    for r in recs
                    if r[pkey] == pv
                    and r["provider"] == name
                    and r["status"] == "ok"
                    and r.get(key) is not None
                )
                if pts:
                    ax.plot(
                        *zip(*pts, strict=True),
                        style,
                        color=colors[i % len(colors)],
                        label=label,
                        linewidth=2.2 if name == "oink" else 1.2,
                        markersize=3,
                    )
        if ceiling:
            ax.axhline(ceiling, color="grey", linestyle="--", linewidth=1, label="copy ceiling")
        ax.set_xscale("log", base=2)
        xs = sorted({r[xkey] for r in recs if r[pkey] == pv})
        ax.set_xticks(xs, [_short(v) for v in xs], fontsize=8)
        ax.tick_params(axis="x", which="minor", bottom=False)
        if logy:
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        else:
            ax.set_ylim(bottom=0)
        ax.set_xlabel(xkey)
        ax.set_title(f"{pkey} = {pv}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(
        handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8, frameon=False
    )
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    fig.savefig(path, format="svg")
    plt.close(fig)


def write(
    out_dir: Path, records: list[dict], ceiling_gbps: float, where: str, dtype: str
) -> list[str]:
    """The SVG files written (names relative to out_dir); [] with a warning without matplotlib."""
    plt = _pyplot()
    if plt is None:
        print(
            "warning: matplotlib is not installed: no plots written (pip install matplotlib)",
            file=sys.stderr,
        )
        return []
    written = []
    for (suite, op), recs in groups(records).items():
        if not any(r["status"] == "ok" for r in recs):
            continue
        names = provider_names(recs)
        name = f"bw_{suite}_{op}.svg"
        _draw(
            plt,
            recs,
            names,
            f"{suite}: {op} ({dtype}) on {where}, effective bandwidth",
            "GB/s (minimum bytes)",
            lambda p: [("GBps", "o-", p)],
            out_dir / name,
            ceiling_gbps,
        )
        written.append(name)
        if suite == "decode":
            name = f"lat_{suite}_{op}.svg"
            host = any("host_us" in r for r in recs)

            def series(p, host=host):
                out = [("time_us", "o-", f"{p} (device)" if host else p)]
                if host:
                    out.append(("host_us", "x:", f"{p} (eager host)"))
                return out

            _draw(
                plt,
                recs,
                names,
                f"{suite}: {op} ({dtype}) on {where}, time per call",
                "µs per call",
                series,
                out_dir / name,
                None,
                logy=True,
            )
            written.append(name)
    return written
