"""Rewrites a benchmark run's results.md, results.json summaries and plots from its records,
with the current judgement rules (the gemm regime's noise and drift tests, the ratios): a report
is a view of results.json, so a rule fixed after a GPU run applies to that run without measuring
again.

    python tools/bench_rerender.py DIR        # DIR holds results.json; rewrites it in place
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from oink.bench import chain, plots, report, runner


def rerender(out_dir: Path) -> str:
    doc = json.loads((out_dir / "results.json").read_text())
    records = doc["results"]
    relabelled = 0
    for r in records:
        # Records of runs before the confidence interval (no ci95_us) keep their status.
        judged = r.get("regime") == "gemm" and r.get("status") == "ok" and "ci95_us" in r
        if judged and (why := chain.noise(r)):
            r.update(status="noisy", reason=why)
            relabelled += 1
    cells: dict[tuple, list[dict]] = {}
    for r in records:
        cells.setdefault((r["suite"], r.get("variant"), r["op"], r["N"], r["M"]), []).append(r)
    for recs in cells.values():
        relabelled += chain.mark_drifted(recs)
        for r in recs:
            for key in ("vs", "best_baseline", "ratio_vs_best_baseline"):
                r.pop(key, None)
        runner.add_ratios(recs)
    run = report.Run(
        doc["env"],
        doc["config"],
        doc["providers_found"],
        doc["providers"],
        doc.get("peers_kit"),
        doc["copy_ceiling"],
    )
    where = doc["env"].get("gpu") or "CPU"
    written = plots.write(out_dir, records, doc["copy_ceiling"]["GBps"], where)
    report.write_json(out_dir / "results.json", run, records, doc["status"], doc.get("parts_done"))
    (out_dir / "results.md").write_text(report.markdown(run, records, written, doc["status"]))
    return f"{out_dir}: {len(records)} records, {relabelled} gemm marginals now noisy"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    print(rerender(ap.parse_args(argv).dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
