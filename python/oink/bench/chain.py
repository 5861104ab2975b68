"""The "gemm" regime: what a norm costs between GEMMs, as a model sees it (GUIDE §3).

A chain of LAYERS layers, each a norm followed by a GEMM of the [M, N] activation with its own
[N, N] weight (cuBLAS, in x's dtype), is captured in one CUDA graph and replayed; the same chain
without the norms is replayed in alternation with it. The norm's marginal cost is the difference of
the two medians over the layers. The fused op carries a residual stream through the chain:
y, residual = fused(h, residual); h = y @ W. On the CPU the same chains run eagerly under a host
clock (for the tests; the CPU mode's default regimes leave gemm out).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from oink.bench.providers import RMSNORM

LAYERS = 32
REPLAYS = 15
WARMUP = 3


def weights_bytes(n: int, dtype: torch.dtype, layers: int = LAYERS) -> int:
    return layers * n * n * dtype.itemsize


def make_weights(n: int, dtype: torch.dtype, device: str, layers: int, gen) -> list[torch.Tensor]:
    """One [N, N] weight per layer, scaled by 1/sqrt(N) so that the activations stay of order one
    through the chain (and the fused op's residual grows slowly)."""
    return [
        (torch.randn(n, n, generator=gen, device=device) * n**-0.5).to(dtype) for _ in range(layers)
    ]


def chain(op: str, fn: Callable | None, weights: list, x, residual, w, eps: float) -> Callable:
    """The chain as a function of no arguments. fn None: the same GEMMs without the norms."""
    if fn is None:

        def gemms():
            h = x
            for weight in weights:
                h = F.linear(h, weight)
            return h

        return gemms
    if op == RMSNORM:

        def norms():
            h = x
            for weight in weights:
                h = F.linear(fn(h, w, eps), weight)
            return h

        return norms

    def fused():
        h, res = x, residual
        for weight in weights:
            y, res = fn(h, res, w, eps)
            h = F.linear(y, weight)
        return h, res

    return fused


def marginal(with_norms_us: list[float], without_us: list[float], layers: int) -> dict:
    """The norm's marginal µs per layer: (median of the chain - median without norms) / layers."""
    a, b = statistics.median(with_norms_us), statistics.median(without_us)
    return {
        "time_us": (a - b) / layers,
        "time_us_min": (min(with_norms_us) - max(without_us)) / layers,
        "time_us_max": (max(with_norms_us) - min(without_us)) / layers,
        "chain_us": a,
        "chain_without_norms_us": b,
        "layers": layers,
        "replays": len(with_norms_us),
    }


def noise(m: dict) -> str | None:
    """Why a marginal cannot be trusted, or None. The chain's GEMMs dominate its time (at N=8192,
    M=256 on an H200: ~1.8 ms for 32 norms of ~4 us), and their replay-to-replay drift can exceed
    the norms' whole cost: a marginal whose spread (extreme replays) is larger than itself, or
    that is not positive, says nothing about the norm."""
    spread = m["time_us_max"] - m["time_us_min"]
    if m["time_us"] <= 0 or spread > m["time_us"]:
        return (
            f"noisy: marginal {m['time_us']:.2f} us, replays spread {spread:.2f} us "
            f"(chain {m['chain_us']:.0f} us)"
        )
    return None


def capture(run: Callable) -> torch.cuda.CUDAGraph:
    """run() eagerly on a side stream first (JIT compiles of Quack and FlashInfer-CuTe per dtype
    and N, torch.compile, cuBLAS handles and workspaces: none may happen inside the capture), then
    captured into one graph."""
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            run()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    return graph


def replay_pair(a: torch.cuda.CUDAGraph, b: torch.cuda.CUDAGraph, replays: int) -> tuple:
    """µs per replay of a and of b, alternated (a, b, a, b, ...) so that clock and thermal drift
    fall on both alike; WARMUP replays of each first."""
    for _ in range(WARMUP):
        a.replay()
        b.replay()
    torch.cuda.synchronize()
    events = [[torch.cuda.Event(enable_timing=True) for _ in range(4)] for _ in range(replays)]
    for ev in events:
        for graph, start, end in ((a, ev[0], ev[1]), (b, ev[2], ev[3])):
            start.record()
            graph.replay()
            end.record()
    torch.cuda.synchronize()
    times_a = [ev[0].elapsed_time(ev[1]) * 1e3 for ev in events]
    times_b = [ev[2].elapsed_time(ev[3]) * 1e3 for ev in events]
    return times_a, times_b


def host_pair(a: Callable, b: Callable, replays: int) -> tuple:
    """CPU: the same alternation, each run timed with the host clock."""
    for _ in range(WARMUP):
        a(), b()
    times_a, times_b = [], []
    for _ in range(replays):
        for run, out in ((a, times_a), (b, times_b)):
            t0 = time.perf_counter()
            run()
            out.append((time.perf_counter() - t0) * 1e6)
    return times_a, times_b


class Baseline:
    """The chain without norms for one shape: captured once, replayed beside every provider's."""

    def __init__(self, device: str, weights: list, x) -> None:
        self.device = device
        self.run = chain(RMSNORM, None, weights, x, None, None, 0.0)
        self.graph = capture(self.run) if device == "cuda" else None


def measure(
    op: str, fn: Callable, baseline: Baseline, weights: list, x, residual, w, eps, replays: int
) -> dict:
    """The norm's marginal cost in the chain (see marginal), with the chain's own times."""
    run = chain(op, fn, weights, x, residual, w, eps)
    if baseline.device == "cuda":
        graph = capture(run)
        with_us, without_us = replay_pair(graph, baseline.graph, replays)
        del graph
    else:
        with_us, without_us = host_pair(run, baseline.run, replays)
    return marginal(with_us, without_us, len(weights))
