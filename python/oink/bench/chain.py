"""The "gemm" regime: what a norm costs between GEMMs, as a model sees it (GUIDE §3).

A chain of LAYERS layers, each a norm followed by a GEMM of the [M, N] activation with its own
[N, N] weight (cuBLAS, in x's dtype), is captured in one CUDA graph and replayed; the same chain
without the norms is replayed in alternation with it. The norm's marginal cost is the median over
replay pairs of their difference, over the layers (marginal). Every provider's chain for a shape
is timed in the same rounds (measure_together: each round one pair per provider, in turn), so a
change of the GPU's state while the shape is measured falls on every provider alike. The fused op
carries a residual stream through the chain: y, residual = fused(h, residual); h = y @ W. On the
CPU the same chains run eagerly under a host clock (for the tests; the CPU mode's default regimes
leave gemm out).
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
    """The norm's marginal µs per layer: the median over replay pairs (rounds() alternates the
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
# takes the same time in each provider's measurement unless the GPU itself changed in between.
# When the providers were timed one after another (the H200's 2026-12-03 reference run) it stayed
# within 6.5% of its median in every cell but two: at N=7168, M=256 (GEMMs at ~660 TFLOP/s, where
# the clocks follow the power draw) it took 1267-1278 us beside three providers and 1420-1529 us
# beside the others, whose marginals were ~40% higher for the same kernels: not comparable. Since
# measure_together times them in the same rounds, only a marginal measured again (noise()) can
# land in another state: this rule catches that, and judges the runs stored before
# (tools/bench_rerender.py).
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


class Baseline:
    """The chain without norms for one shape: captured once, replayed beside every provider's."""

    def __init__(self, device: str, weights: list, x) -> None:
        self.device = device
        self.run = chain(RMSNORM, None, weights, x, None, None, 0.0)
        self.graph = capture(self.run) if device == "cuda" else None


class Chain:
    """One provider's chain for a shape (the norm `fn` before each GEMM), captured on the GPU,
    waiting to be timed with the shape's other providers (measure_together)."""

    def __init__(
        self, op: str, fn: Callable, baseline: Baseline, weights: list, x, residual, w, eps
    ) -> None:
        self.run = chain(op, fn, weights, x, residual, w, eps)
        self.graph = capture(self.run) if baseline.device == "cuda" else None


def rounds(chains: list[Chain], baseline: Baseline, replays: int) -> list[tuple[list, list]]:
    """µs per replay of each chain and of the chain without norms beside it: `replays` rounds,
    each one (chain, baseline) pair per chain in turn, after WARMUP rounds. Within a pair the
    GPU's drift falls on both chains and cancels in their difference; across rounds it falls on
    every provider alike. On the CPU the same order, each run timed with the host clock."""
    if baseline.graph is not None:
        graphs = [c.graph for c in chains]
        for _ in range(WARMUP):
            for g in graphs:
                g.replay()
                baseline.graph.replay()
        torch.cuda.synchronize()
        events = [
            [[torch.cuda.Event(enable_timing=True) for _ in range(4)] for _ in graphs]
            for _ in range(replays)
        ]
        for round_events in events:
            for g, ev in zip(graphs, round_events, strict=True):
                for graph, start, end in ((g, ev[0], ev[1]), (baseline.graph, ev[2], ev[3])):
                    start.record()
                    graph.replay()
                    end.record()
        torch.cuda.synchronize()
        return [
            (
                [r[i][0].elapsed_time(r[i][1]) * 1e3 for r in events],
                [r[i][2].elapsed_time(r[i][3]) * 1e3 for r in events],
            )
            for i in range(len(graphs))
        ]
    for _ in range(WARMUP):
        for c in chains:
            c.run()
            baseline.run()
    times = [([], []) for _ in chains]
    for _ in range(replays):
        for c, (with_us, without_us) in zip(chains, times, strict=True):
            for run, out in ((c.run, with_us), (baseline.run, without_us)):
                t0 = time.perf_counter()
                run()
                out.append((time.perf_counter() - t0) * 1e6)
    return times


# A marginal noise() rejects is measured once more, over this many times the replays.
RETRY_FACTOR = 4


def measure_together(chains: list[Chain], baseline: Baseline, layers: int, replays: int) -> list:
    """Each chain's marginal (see marginal), with the chains' own times, all timed in the same
    rounds. The marginals noise() rejects are measured again, together, over RETRY_FACTOR times
    the rounds (a replay costs the chain's time, ~2 ms at most: the captures are the expensive
    part), and that measurement is the one returned, noisy or not."""
    out: list[dict | None] = [None] * len(chains)
    todo = list(range(len(chains)))
    for n in (replays, replays * RETRY_FACTOR):
        times = rounds([chains[i] for i in todo], baseline, n)
        for i, (with_us, without_us) in zip(todo, times, strict=True):
            out[i] = marginal(with_us, without_us, layers)
        todo = [i for i in todo if noise(out[i]) is not None]
        if not todo:
            break
    return out
