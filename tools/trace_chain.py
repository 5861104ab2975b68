"""Who pays between GEMMs: the kernel timeline of the bench's `gemm` regime (oink/bench/chain.py).

The chain of 32 layers (norm, then F.linear with the layer's own [N, N] bf16 weight), captured in
one CUDA graph as the bench captures it, is replayed under the CUDA profiler (CUPTI kernel
records), for the GEMMs alone, oink with PDL, oink without, and Liger's Triton kernel when
`liger_kernel` is importable. Per case it prints, as medians over 5 replays:

* per layer: the replays' span / (replays x layers) (µs; the profiler adds a little to every
  kernel);
* gemm: the other kernels' durations a layer, added (cuBLAS's GEMM, and its split-K reduce
  where it has one);
* norm: the norm kernel's duration, first CTA's start to last CTA's end;
* gap gemm->norm, norm->gemm, gemm->gemm: from one kernel's end to the next one's start
  (negative: the next kernel's CTAs started before the previous kernel ended, as PDL allows).

    python tools/trace_chain.py --ops rmsnorm --n 8192,4096 --m 1,32,64   # on a GPU

H200 output: bench/results/nvidia-h200/decode/chain_trace.txt.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
from pathlib import Path

import torch

import oink
from oink.bench import chain

LAYERS = chain.LAYERS
REPLAYS = 5


def kernels(graph: torch.cuda.CUDAGraph) -> list[dict]:
    """The CUPTI kernel records of REPLAYS replays, in start order."""
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(REPLAYS):
            graph.replay()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    return sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])


def is_norm(event: dict) -> bool:
    name = event["name"].lower()
    return "norm" in name and "gemm" not in name


def timeline(events: list[dict]) -> dict:
    """Medians (µs) of the kernels' durations and of the gaps between consecutive kernels."""
    gaps: dict[str, list[float]] = {"gemm->norm": [], "norm->gemm": [], "gemm->gemm": []}
    for a, b in itertools.pairwise(events):
        gap = b["ts"] - (a["ts"] + a["dur"])
        if gap > 50:  # between two replays
            continue
        key = "norm->gemm" if is_norm(a) else "gemm->norm" if is_norm(b) else "gemm->gemm"
        gaps[key].append(gap)
    by_name: dict[str, list[float]] = {}
    for e in events:
        if not is_norm(e):
            by_name.setdefault(e["name"], []).append(e["dur"])
    norms = [e["dur"] for e in events if is_norm(e)]
    span = events[-1]["ts"] + events[-1]["dur"] - events[0]["ts"]

    def median(v: list[float]) -> float:
        return statistics.median(v) if v else float("nan")

    return {
        "per_layer": span / (REPLAYS * LAYERS),
        # Each of cuBLAS's kernels runs once a layer: the GEMM, and its split-K reduce if any.
        "gemm": sum(median(v) for v in by_name.values()),
        "norm": median(norms),
        **{k: median(v) for k, v in gaps.items()},
        "names": sorted({e["name"][:60] for e in events}),
    }


def norm_fns(op: str) -> dict:
    """mode -> the norm as chain.chain calls it (None: the GEMMs alone)."""

    def oink_fused(h, res, w, eps):
        oink.fused_add_rms_norm(h, res, w, eps)
        return h, res

    oink_fn = oink.rmsnorm if op == "rmsnorm" else oink_fused
    fns = {"gemms": None, "pdl": oink_fn, "nopdl": oink_fn}
    try:
        from liger_kernel.ops.fused_add_rms_norm import fused_add_rms_norm_forward
        from liger_kernel.ops.rms_norm import rms_norm_forward
    except ImportError:
        print("liger_kernel is not importable: Liger left out")
        return fns
    if op == "rmsnorm":
        fns["liger"] = lambda x, w, eps: rms_norm_forward(x, w, eps, 0.0, "llama", None)[0]
    else:
        fns["liger"] = lambda x, r, w, eps: fused_add_rms_norm_forward(x, r, w, eps, 0.0, "llama")[
            :2
        ]
    return fns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="rmsnorm", help="rmsnorm,fused_add_rms_norm")
    ap.add_argument("--n", default="8192,4096")
    ap.add_argument("--m", default="1,32,64")
    args = ap.parse_args()
    gen = torch.Generator("cuda").manual_seed(0)
    for op in args.ops.split(","):
        for n in map(int, args.n.split(",")):
            weights = chain.make_weights(n, torch.bfloat16, "cuda", LAYERS, gen)
            for m in map(int, args.m.split(",")):
                x = torch.randn(m, n, dtype=torch.bfloat16, device="cuda", generator=gen)
                residual = torch.randn_like(x)
                w = torch.rand(n, dtype=torch.bfloat16, device="cuda", generator=gen) + 0.5
                for mode, fn in norm_fns(op).items():
                    oink.set_pdl(mode == "pdl")
                    run = chain.chain(op, fn, weights, x.clone(), residual.clone(), w, 1e-6)
                    t = timeline(kernels(chain.capture(run)))
                    print(
                        f"{op} N={n} M={m} {mode:6}: per layer {t['per_layer']:6.2f} us | gemm "
                        f"{t['gemm']:6.2f} | norm {t['norm']:5.2f} | gap gemm->norm "
                        f"{t['gemm->norm']:6.2f} norm->gemm {t['norm->gemm']:6.2f} gemm->gemm "
                        f"{t['gemm->gemm']:6.2f}"
                    )
                    if mode in ("gemms", "liger"):
                        print("   kernels:", t["names"])
                oink.set_pdl(True)


if __name__ == "__main__":
    main()
