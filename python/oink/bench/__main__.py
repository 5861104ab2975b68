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

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from oink.bench.providers import ALL_NAMES
    from oink.bench.suites import SUITES

    ap = argparse.ArgumentParser(
        prog="oink-bench",
        description="oink's RMSNorm against PyTorch (and vLLM, FlashInfer, Quack when importable), "
        "measured in one run: correctness gate, CUDA-graph device time, copy ceiling.",
    )
    ap.add_argument(
        "--suite",
        action="append",
        metavar="NAME",
        help=f"{', '.join(SUITES)} or all; repeatable or comma-separated (default: decode)",
    )
    ap.add_argument("--op", default="all", choices=["rmsnorm", "fused_add_rms_norm", "all"])
    ap.add_argument("--dtype", default="bf16", choices=list(DTYPES))
    ap.add_argument("--weight-dtype", default="same", choices=["same", "fp32"])
    ap.add_argument("--pad", action="store_true", help="padded rows: row stride N + 64")
    ap.add_argument("--quick", action="store_true", help="few shapes, short timing loops")
    ap.add_argument(
        "--out",
        type=Path,
        help="output directory (default: a new folder per run under $XDG_CACHE_HOME/oink/bench "
        "or ~/.cache/oink/bench, named after the device and the start time; printed)",
    )
    ap.add_argument(
        "--providers",
        help=f"comma-separated subset of {', '.join(ALL_NAMES)} "
        "(oink is always measured; default: all available)",
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
        default=256,
        help="cap on rotating buffer sets per shape (GPU; default 256)",
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import oink  # noqa: F401  (loads the extension)
    except ImportError as e:
        return _fail(str(e))
    from oink.bench import env, plots, providers, report, runner, suites, timing

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
        suite_names = suites.parse_suites(args.suite)
        requested = [p.strip() for p in args.providers.split(",")] if args.providers else None
        by_op, found = providers.build(device, requested)
    except ValueError as e:
        return _fail(str(e))

    info = env.describe(device)
    broken = runner.explain_probe(device)
    info["explain"] = broken or "ok"
    if broken:
        print(
            f"oink-bench: WARNING: {broken}; oink's launch plans are not recorded", file=sys.stderr
        )
    out_dir = (args.out or env.default_out_dir(info)).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    dtype = DTYPES[args.dtype]
    cfg = runner.Config(
        suites=suite_names,
        ops=list(providers.OPS) if args.op == "all" else [args.op],
        dtype=dtype,
        weight_dtype=dtype if args.weight_dtype == "same" else torch.float32,
        pad=64 if args.pad else 0,
        quick=args.quick,
        device=device,
        eps=args.eps,
        max_sets=args.max_sets,
        host_iters=50 if args.quick else 200,
        record_plans=broken is None,
    )
    where = info.get("gpu") or "CPU"
    print(
        f"oink-bench: {where}; suites {', '.join(cfg.suites)}; ops {', '.join(cfg.ops)}; "
        f"{args.dtype}, weight {args.weight_dtype}, pad {cfg.pad}; -> {out_dir}",
        file=sys.stderr,
    )
    for name, what in found.items():
        print(f"oink-bench: optional provider {name}: {what}", file=sys.stderr)

    ceiling = timing.copy_ceiling(device, args.quick)
    print(f"oink-bench: copy ceiling {ceiling['GBps']:.0f} GB/s", file=sys.stderr)
    records: list[dict] = []
    status = "complete"
    signal.signal(signal.SIGTERM, _interrupt)  # `timeout` too leaves the results measured so far
    try:
        runner.run(cfg, by_op, ceiling["GBps"], records)
    except KeyboardInterrupt:
        status = "interrupted"
        print("oink-bench: interrupted; writing what was measured", file=sys.stderr)
    except Exception as e:  # a lost CUDA context, say: keep what was measured, say so loudly
        status = f"aborted: {type(e).__name__}: {e}"
        print(f"oink-bench: {status}", file=sys.stderr)

    config = {
        k: str(v).replace("torch.", "") if isinstance(v, torch.dtype) else v
        for k, v in dataclasses.asdict(cfg).items()
    }
    written = []
    if not args.no_plots:
        try:
            written = plots.write(out_dir, records, ceiling["GBps"], where, args.dtype)
        except Exception as e:  # plots are a view of results.json: never lose the data for them
            print(f"warning: plotting failed: {type(e).__name__}: {e}", file=sys.stderr)
    report.write_json(out_dir / "results.json", info, config, found, ceiling, records, status)
    md = report.markdown(info, config, found, ceiling, records, written, status)
    (out_dir / "results.md").write_text(md)
    print(report.summary_text(info, ceiling, records, out_dir, status))

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
