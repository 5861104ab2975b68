"""`python -m oink.bench` / `oink-bench`: see `--help` and oink/bench/__init__.py.

Exit status: 0 when every oink measurement passed its gate, 1 when one failed or raised,
2 when the run could not start or was cut short (results written so far are kept)."""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
from pathlib import Path

import torch


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from oink.bench.peers import DEFAULT_BUILD
    from oink.bench.providers import ALL_NAMES, DTYPES
    from oink.bench.suites import SUITES

    ap = argparse.ArgumentParser(
        prog="oink-bench",
        description="oink's RMSNorm against PyTorch and the peers (Quack, FlashInfer, vLLM, "
        "Liger), measured in one run: correctness gate, CUDA-graph device time in three "
        "regimes, copy ceiling. `oink-bench training --help`: the training passes (RMSNorm "
        "and LayerNorm, forward and backward).",
    )
    ap.add_argument(
        "--suite",
        action="append",
        metavar="NAME",
        help=f"{', '.join(SUITES)} or all; repeatable or comma-separated (default: decode)",
    )
    ap.add_argument(
        "--matrix",
        action="store_true",
        help="the step-6 matrix in one run: bf16 decode (regimes hbm, l2, gemm), mid, "
        "large and long rows (N 16384-262144), then fp16, a float32 weight and padded rows "
        "on a few shapes (oink/bench/suites.py); not with --suite, --dtype, --weight-dtype, "
        "--pad. Default providers on a GPU: all but torch_eager (never the fastest, and slow "
        "to measure)",
    )
    ap.add_argument(
        "--regime",
        metavar="LIST",
        help="comma list of hbm (isolated calls over buffers > 2x L2), l2 (L2-warm, 4 buffer "
        "sets), gemm (the marginal cost between cuBLAS GEMMs); l2 and gemm apply only where "
        "M <= 256 (default: all three for the decode suite on a GPU, hbm elsewhere)",
    )
    ap.add_argument("--op", default="all", choices=["rmsnorm", "fused_add_rms_norm", "all"])
    ap.add_argument("--dtype", choices=list(DTYPES), help="x's dtype (default bf16)")
    ap.add_argument("--weight-dtype", choices=["same", "fp32"], help="(default same)")
    ap.add_argument("--pad", action="store_true", help="padded rows: row stride N + 64")
    ap.add_argument("--quick", action="store_true", help="few shapes, short timing loops")
    ap.add_argument(
        "--n",
        metavar="LIST",
        help="comma list of row lengths: keep only the selected suites' shapes with these N "
        "(e.g. --suite large_n --n 131072)",
    )
    ap.add_argument(
        "--m",
        metavar="LIST",
        help="comma list of batch sizes: keep only the selected suites' shapes with these M",
    )
    ap.add_argument(
        "--out",
        type=Path,
        help="output directory (default: a new folder per run under $XDG_CACHE_HOME/oink/bench "
        "or ~/.cache/oink/bench, named after the device and the start time; printed)",
    )
    ap.add_argument(
        "--resume",
        type=Path,
        metavar="DIR",
        help="continue the incomplete run in DIR (stopped by a time limit, say): keep the parts "
        "it finished, measure the others with the same options on the same GPU, and write the "
        "whole run to DIR (give the first call's options; --out defaults to DIR)",
    )
    ap.add_argument(
        "--providers",
        help=f"comma-separated subset of {', '.join(ALL_NAMES)} "
        "(oink is always measured; default: all available)",
    )
    ap.add_argument(
        "--peers",
        type=Path,
        metavar="DIR",
        help="a prepared peers kit (oink_peers.py prepare DIR): the peers that are not "
        "installed come from it (default: .peers in the current directory when it exists)",
    )
    ap.add_argument(
        "--peers-build",
        type=Path,
        default=Path(DEFAULT_BUILD),
        metavar="DIR",
        help=f"where the kit builds its extensions, reused between runs (default: {DEFAULT_BUILD})",
    )
    ap.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cuda", "cpu"],
        help="auto: CUDA when a device is visible, else the CPU mode",
    )
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument(
        "--max-sets",
        type=int,
        default=8192,
        help="cap on rotating buffer sets per shape (GPU; default 8192: enough that one pass "
        "over them exceeds twice an H200's L2 down to one row of N=4096, so isolated decode "
        "calls read their rows from HBM)",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU mode: torch threads (default 1; 0 keeps torch's default). On a small "
        "or shared machine, thread-pool wake-ups cost milliseconds and swamp "
        "calls of microseconds",
    )
    ap.add_argument("--no-plots", action="store_true")
    return ap.parse_args(argv)


def _interrupt(signum, frame) -> None:
    # Once: GNU `timeout` signals the bench and then its whole process group, so a second
    # SIGTERM follows the first at once, and must not cut short the writing of what was measured.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def _fail(message: str) -> int:
    print(f"oink-bench: error: {message}", file=sys.stderr)
    return 2


def _check_oink_cuda() -> str | None:
    """None if oink runs a CUDA kernel correctly here; otherwise why not."""
    import oink

    try:
        x = torch.randn(4, 256, device="cuda", dtype=torch.bfloat16)
        y = oink.rmsnorm(x, None, 1e-6)
        torch.cuda.synchronize()
    except Exception as e:
        return (
            f"oink cannot run on CUDA ({type(e).__name__}: {e}); "
            "was it built with OINK_WITH_CUDA=ON?"
        )
    ref = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
    if not torch.allclose(y.float(), ref, rtol=1e-2, atol=1e-2):
        return "oink's CUDA rmsnorm gives wrong results on a 4x256 smoke test"
    return None


def _parts(args: argparse.Namespace, device: str) -> list:
    """The plan: --matrix's, or the suites of --suite in the one variant of --dtype,
    --weight-dtype and --pad. ValueError for a bad combination."""
    from oink.bench import suites

    regimes = suites.parse_regimes(args.regime)
    if args.matrix:
        given = [
            flag
            for flag, value in (
                ("--suite", args.suite),
                ("--dtype", args.dtype),
                ("--weight-dtype", args.weight_dtype),
                ("--pad", args.pad),
            )
            if value
        ]
        if given:
            raise ValueError(f"--matrix fixes the suites and variants; drop {', '.join(given)}")
        parts = suites.matrix(device, args.quick)
        if regimes:
            parts = [dataclasses.replace(p, regimes=regimes) for p in parts]
    else:
        dtype = args.dtype or "bf16"
        wdtype = "fp32" if args.weight_dtype == "fp32" else dtype
        variant = suites.Variant(dtype, wdtype, 64 if args.pad else 0)
        parts = suites.plan(suites.parse_suites(args.suite), variant, device, args.quick, regimes)
    ns = suites.parse_sizes(args.n, "--n")
    ms = suites.parse_sizes(args.m, "--m")
    return parts if ns is None and ms is None else suites.restrict(parts, ns, ms)


def _kit_loader(args: argparse.Namespace):
    """load_kit for providers.build: the kit of --peers (or ./.peers), or None without one."""
    from oink.bench import peers

    kit_dir = args.peers or peers.default_dir()
    if kit_dir is None:
        return None
    if not (kit_dir / "oink_peers.py").is_file():
        raise ValueError(f"--peers {kit_dir}: no oink_peers.py there (a prepared peers kit?)")

    def log(message: str) -> None:
        print(f"oink-bench: {message}", file=sys.stderr, flush=True)

    return lambda: peers.load(kit_dir, args.peers_build, log)


def config_doc(cfg, args: argparse.Namespace, parts: list) -> dict:
    """The run's configuration for results.json: the parts by name and size, not every shape
    (every part of the run, where cfg holds the ones this call measures)."""
    doc = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "parts"}
    doc["matrix"] = args.matrix
    doc["parts"] = [
        {
            "suite": p.suite,
            "variant": p.variant.name,
            "dtype": p.variant.dtype,
            "weight_dtype": p.variant.weight_dtype,
            "pad": p.variant.pad,
            "regimes": list(p.regimes),
            "shapes": len(p.shapes),
        }
        for p in parts
    ]
    return doc


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["training"]:
        # `oink-bench training ...`: the training passes (oink/bench/training.py, its own
        # --help), under the one command users know.
        from oink.bench import training

        return training.main(argv[1:])
    args = parse_args(argv)
    try:
        import oink  # noqa: F401  (loads the extension)
    except ImportError as e:
        return _fail(str(e))
    from oink.bench import env, plots, providers, report, resume, runner, timing

    if args.device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif args.device == "cuda" and not torch.cuda.is_available():
        return _fail("--device cuda, but torch sees no CUDA device")
    else:
        device = args.device
    if device == "cuda" and (why := _check_oink_cuda()):
        return _fail(why)
    if device == "cpu" and args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        parts = _parts(args, device)
        requested = [p.strip() for p in args.providers.split(",")] if args.providers else None
        load_kit = _kit_loader(args)  # checked on the CPU too; used on a GPU only
        # The eager composite is never the fastest on a GPU and slow to measure; on the CPU it is
        # the fused op's one baseline.
        exclude = ("torch_eager",) if args.matrix and device == "cuda" else ()
        catalog = providers.build(device, requested, load_kit, exclude)
    except ValueError as e:
        return _fail(str(e))

    info = env.describe(device)
    broken = runner.explain_probe(device)
    info["explain"] = broken or "ok"
    if broken:
        print(
            f"oink-bench: WARNING: {broken}; oink's launch plans are not recorded", file=sys.stderr
        )
    if args.resume and args.out and args.out.resolve() != args.resume.resolve():
        return _fail(f"--resume writes into {args.resume}; drop --out {args.out}")
    out_dir = (args.resume or args.out or env.default_out_dir(info)).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = runner.Config(
        parts=parts,
        ops=list(providers.OPS) if args.op == "all" else [args.op],
        quick=args.quick,
        device=device,
        eps=args.eps,
        max_sets=args.max_sets,
        host_iters=50 if args.quick else 200,
        record_plans=broken is None,
    )
    resumed = None
    if args.resume:
        try:
            resumed = resume.load(out_dir, config_doc(cfg, args, parts), info, catalog.found)
        except ValueError as e:
            return _fail(str(e))
        cfg.parts = [p for p in parts if resume.part_key(p) not in resumed.done]
        print(
            f"oink-bench: resuming {out_dir}: {len(resumed.done)} of {len(parts)} parts done "
            f"({len(resumed.records)} records kept)",
            file=sys.stderr,
        )
    where = info.get("gpu") or "CPU"
    summary = "; ".join(f"{p.suite} {p.variant.name} ({','.join(p.regimes)})" for p in cfg.parts)
    print(
        f"oink-bench: {where}; {summary}; ops {', '.join(cfg.ops)}; -> {out_dir}", file=sys.stderr
    )
    if dropped := runner.dropped_shapes(cfg):
        print(
            f"oink-bench: {dropped} shape(s) left out: l2 and gemm apply only where M <= 256",
            file=sys.stderr,
        )
    for name, what in catalog.found.items():
        print(f"oink-bench: peer {name}: {what}", file=sys.stderr)

    ceiling = timing.copy_ceiling(device, args.quick)
    print(f"oink-bench: copy ceiling {ceiling['GBps']:.0f} GB/s", file=sys.stderr)
    records: list[dict] = list(resumed.records) if resumed else []
    done = list(resumed.done) if resumed else []  # [suite, variant] of every finished part
    status = "complete"
    run = report.Run(info, {}, catalog.found, catalog.notes, catalog.kit, ceiling)
    if resumed:  # the report is the first call's, with this one named beside it
        run.env = resume.record_call(resumed, info, ceiling, cfg.parts)
        run.ceiling = resumed.ceiling

    def checkpoint(part) -> None:
        done.append(resume.part_key(part))
        run.config = config_doc(cfg, args, parts)  # with the budgets run() has filled in
        where = f"partial: {part.suite} {part.variant.name} done"
        report.write_json(out_dir / "results.json", run, records, where, done)

    signal.signal(signal.SIGTERM, _interrupt)  # `timeout` too leaves the results measured so far
    try:
        runner.run(cfg, catalog.by_op, ceiling["GBps"], records, checkpoint)
    except KeyboardInterrupt:
        status = "interrupted"
        print("oink-bench: interrupted; writing what was measured", file=sys.stderr)
    except Exception as e:  # a lost CUDA context, say: keep what was measured, say so loudly
        status = f"aborted: {type(e).__name__}: {e}"
        print(f"oink-bench: {status}", file=sys.stderr)

    run.config = config_doc(cfg, args, parts)
    if status == "complete":
        done = [resume.part_key(p) for p in parts]
    written = []
    if not args.no_plots:
        try:
            written = plots.write(out_dir, records, run.ceiling["GBps"], where)
        except Exception as e:  # plots are a view of results.json: never lose the data for them
            print(f"warning: plotting failed: {type(e).__name__}: {e}", file=sys.stderr)
    report.write_json(out_dir / "results.json", run, records, status, done)
    (out_dir / "results.md").write_text(report.markdown(run, records, written, status))
    print(report.summary_text(run, records, out_dir, status))

    if status != "complete":
        return 2
    bad = [r for r in records if r["provider"] == "oink" and r["status"] in ("failed", "error")]
    if bad:
        print(
            f"oink-bench: oink failed on {len(bad)} measurement(s); see results.md", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
