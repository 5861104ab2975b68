"""`oink-bench [run] ...` measures and writes results.json, results.md and plots under --out;
`oink-bench report RESULTS.json [MORE.json ...] [--out DIR]` renders results.md and the plots
again from one results file, or from several runs on one GPU merged into one (results.json in
--out). results.json is written after each suite, so a run cut short keeps what it measured.
Exit status: 0 when every oink measurement passed its gate, 1 when one did not, 2 on bad usage."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

SUITE_NAMES = ("decode", "mid", "large", "large_n", "variants", "training", "training_long",
               "softmax", "cross_entropy", "linear_cross_entropy")  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("run", "report", "-h", "--help"):
        argv.insert(0, "run")
    ap = argparse.ArgumentParser(
        prog="oink-bench",
        description="oink's norms, softmax and cross-entropy against PyTorch (eager, "
        "torch.compile) and the installed peers (Quack, Liger, FlashInfer, vLLM): a float64 "
        "correctness gate, CUDA-graph device time, % of the copy ceiling. Without a GPU: oink's "
        "CPU kernels on small shapes.",
    )
    sub = ap.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="measure (the default command)")
    run.add_argument(
        "--suite",
        default="all",
        help=f"comma list of {', '.join(SUITE_NAMES)} or all (default: all)",
    )
    run.add_argument(
        "--dtype",
        default="bf16",
        choices=["bf16", "fp16", "fp32"],
        help="x's (the logits', the hidden states') dtype outside the variants suite "
        "(default bf16)",
    )
    run.add_argument("--providers", help="comma list (default: everything found; oink always)")
    run.add_argument("--quick", action="store_true", help="a few shapes per suite")
    for dim in ("n", "m"):
        run.add_argument(
            f"--{dim}",
            type=lambda v: {int(x) for x in v.split(",")},
            help=f"comma list: only the suites' shapes of these {dim.upper()} (a run split in "
            "parts, merged by oink-bench report)",
        )
    run.add_argument("--out", type=Path, default=Path("oink-bench-results"))
    run.add_argument("--no-plots", action="store_true")
    rep = sub.add_parser(
        "report",
        help="render results.md and plots from a results file, or from several merged into one",
    )
    rep.add_argument(
        "results", type=Path, nargs="+", help="results.json files of one GPU; a later "
        "file's record replaces an earlier one's of the same table, shape and provider",
    )  # fmt: skip
    rep.add_argument("--out", type=Path, help="(default: the first results file's folder)")
    rep.add_argument("--no-plots", action="store_true")
    args = ap.parse_args(argv)
    if args.command == "run":
        names = SUITE_NAMES if args.suite == "all" else tuple(args.suite.split(","))
        unknown = sorted(set(names) - set(SUITE_NAMES))
        if unknown:
            ap.error(f"unknown suite(s) {', '.join(unknown)}")
        args.suites = list(names)
    return args


def run(args: argparse.Namespace) -> int:
    import torch
    from tqdm import tqdm

    from oink.bench import cases, measure, providers, report

    device = "cuda" if torch.cuda.is_available() else "cpu"
    wanted = args.providers.split(",") if args.providers else None
    have, missing = providers.discover(device, wanted)
    for name, why in missing.items():
        print(f"oink-bench: {name} not measured: {why}", file=sys.stderr)
    env = cases.environment(device)
    env["missing"] = missing
    env["command"] = "oink-bench " + " ".join(sys.argv[1:])
    copy_gbps = measure.copy_ceiling(device)
    l2 = env.get("l2_bytes", 32 << 20)
    device_bytes = torch.cuda.get_device_properties(0).total_memory if device == "cuda" else 0
    only = (args.n, args.m)
    parts = cases.parts(args.suites, device, args.quick, args.dtype, device_bytes, only)
    uncapped = cases.parts(args.suites, device, args.quick, args.dtype, only=only)
    for part, full in zip(parts, uncapped, strict=True):
        for n, m in sorted(set(full.shapes) - set(part.shapes)):
            print(
                f"oink-bench: {part.suite} N={n} M={m} left out: its buffers would not fit the "
                f"GPU's {device_bytes / 2**30:.0f} GiB",
                file=sys.stderr,
            )
    total = sum(len(p.cases) * len(p.shapes) for p in parts)
    records: list[dict] = []
    args.out.mkdir(parents=True, exist_ok=True)
    uncapturable: dict = {}  # (provider, case): why its step is timed eagerly, for every part
    with tqdm(total=total, desc="oink-bench", unit="shape") as progress:
        for part in parts:
            records += cases.measure_part(
                part, have, device, l2, copy_gbps, progress, uncapturable=uncapturable
            )
            report.save(args.out / "results.json", env, copy_gbps, records)
    doc = report.load(args.out / "results.json")
    report.render(doc, args.out, with_plots=not args.no_plots)
    print(f"oink-bench: {len(records)} records in {args.out}/results.json and results.md")
    bad = [r for r in records if r["provider"] == "oink" and r["status"] != "ok"]
    for r in bad:
        print(f"oink-bench: oink {r['status']}: {r['op']} N={r['N']} M={r['M']}: {r['note']}")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "report":
        from oink.bench import report

        out = args.out or args.results[0].parent
        try:
            doc = report.merge([report.load(p) for p in args.results])
        except ValueError as e:
            print(f"oink-bench report: {e}", file=sys.stderr)
            return 2
        if len(args.results) > 1:
            out.mkdir(parents=True, exist_ok=True)
            report.save(out / "results.json", doc["env"], doc["copy_GBps"], doc["records"])
        report.render(doc, out, with_plots=not args.no_plots)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
