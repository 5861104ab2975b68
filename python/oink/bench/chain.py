"""The "gemm" regime: what a norm costs between GEMMs, as a model sees it (GUIDE §3).

A chain of LAYERS layers, each a norm followed by a GEMM of the [M, N] activation with its own
[N, N] weight (cuBLAS, in x's dtype), is captured in one CUDA graph and replayed; the same chain
without the norms is replayed in alternation with it. The norm's marginal cost is the median over
replay pairs of their difference, over the layers (marginal). The fused op carries a residual
stream through the chain: y, residual = fused(h, residual); h = y @ W. On the CPU the same chains
run eagerly under a host clock (for the tests; the CPU mode's default regimes leave gemm out).
"""

from __future__ import annotations

import math
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


def median_interval(values: list[float]) -> tuple[float, float]:
    """A distribution-free 95% confidence interval for the median of `values`: the order
    statistics k and n + 1 - k (1-based), k the largest with P(Binomial(n, 1/2) < k) <= 2.5%
    (n = 15: the 4th and the 12th). Fewer than 6 values give none narrower than their range."""
    v, n = sorted(values), len(values)
    k, below = 0, 0.0  # below: P(Binomial(n, 1/2) < k + 1)
    while True:
        below += math.comb(n, k) / 2**n
        if below > 0.025:
            break
        k += 1
    k = max(k, 1)  # k values below the interval's low end are allowed: the k-th is its end
    return v[k - 1], v[n - k]


def marginal(with_norms_us: list[float], without_us: list[float], layers: int) -> dict:
    """The norm's marginal µs per layer: the median over replay pairs (replay_pair alternates the
    two chains) of (chain - chain without norms) / layers. A pair's two replays run back to back,
    so the drift of the GEMMs' clocks falls on both and cancels in their difference; the two
    chains' own medians are kept beside it. time_us_min/max are the extreme pairs; ci95_us the
    median's 95% confidence interval (median_interval), which noise() judges."""
    diffs = [(a - b) / layers for a, b in zip(with_norms_us, without_us, strict=True)]
    low, high = median_interval(diffs)
    return {
        "time_us": statistics.median(diffs),
        "time_us_min": min(diffs),
        "time_us_max": max(diffs),
        "ci95_us": [low, high],
        "chain_us": statistics.median(with_norms_us),
        "chain_without_norms_us": statistics.median(without_us),
        "layers": layers,
        "replays": len(with_norms_us),
    }


# A marginal is reported when its median is known to within this fraction of itself, either way
# (95% confidence): providers 5-10% apart are what the regime compares.
NOISE_TOLERANCE = 0.10


def noise(m: dict) -> str | None:
    """Why a marginal cannot be trusted, or None. The chain's GEMMs dominate its time (at N=8192,
    M=256 on an H200: ~1.8 ms for 32 norms of ~4 us), and their replay-to-replay jitter can be
    larger than the norms' whole cost: a marginal that is not positive, or whose 95% confidence
    interval reaches further than NOISE_TOLERANCE of it either way, says too little about the
    norm. (Not the extreme replays of both chains: their spread grows with the replays and
    does not shrink with the marginal, so such a rule drops the fastest providers' cells most.)"""
    t = m["time_us"]
    low, high = m["ci95_us"]
    if t <= 0 or max(t - low, high - t) > NOISE_TOLERANCE * t:
        return (
            f"noisy: marginal {t:.2f} us, 95% interval {low:.2f}-{high:.2f} us over "
            f"{m['replays']} replay pairs (chain {m['chain_us']:.0f} us)"
        )
    return None


# The chain without norms is one graph per shape, replayed beside every provider's chain, so it
# takes the same time in each provider's measurement unless the GPU itself changed in between: on
# the H200 (2026-12-03 reference run) it stayed within 6.5% of its median in every cell but two.
# At N=7168, M=256 (GEMMs at ~660 TFLOP/s, where the clocks follow the power draw) it took 1267-1278
# us beside three providers and 1420-1529 us beside the others, and the first three's marginals
# were a third to a half of what the others' state gives: not comparable.
CHAIN_DRIFT_TOLERANCE = 0.08


def mark_drifted(cell: list[dict]) -> int:
    """In one shape's records (every provider, every regime), marks the gemm marginals measured
    while the chain without norms ran more than CHAIN_DRIFT_TOLERANCE away from the median of its
    times over the cell's providers as noisy, with why; returns how many. Cells of fewer than
    three such records have no median to trust and are left as they are."""
    timed = [
        r
        for r in cell
        if r.get("regime") == "gemm" and r.get("status") == "ok" and "chain_without_norms_us" in r
    ]
    if len(timed) < 3:
        return 0
    median = statistics.median(r["chain_without_norms_us"] for r in timed)
    marked = 0
    for r in timed:
        t = r["chain_without_norms_us"]
        if abs(t - median) > CHAIN_DRIFT_TOLERANCE * median:
            r.update(
                status="noisy",
                reason=(
                    f"noisy: the chain without norms took {t:.0f} us during this measurement, "
                    f"{100 * (t / median - 1):+.0f}% from its median of {median:.0f} us beside "
                    f"the cell's other providers (the GPU's clocks changed): not comparable"
                ),
            )
            marked += 1
    return marked


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


# A marginal noise() rejects is measured once more, over this many times the replays.
RETRY_FACTOR = 4


def measure(
    op: str, fn: Callable, baseline: Baseline, weights: list, x, residual, w, eps, replays: int
) -> dict:
    """The norm's marginal cost in the chain (see marginal), with the chain's own times. When
    noise() rejects it, the same captured graphs are replayed RETRY_FACTOR times as often (a
    replay costs the chain's time, ~2 ms at most: the capture is the expensive part) and that
    measurement is the one returned, noisy or not."""
    run = chain(op, fn, weights, x, residual, w, eps)
    graph = capture(run) if baseline.device == "cuda" else None
    for n in (replays, replays * RETRY_FACTOR):
        if graph is not None:
            with_us, without_us = replay_pair(graph, baseline.graph, n)
        else:
            with_us, without_us = host_pair(run, baseline.run, n)
        m = marginal(with_us, without_us, len(weights))
        if noise(m) is None:
            break
    del graph
    return m
