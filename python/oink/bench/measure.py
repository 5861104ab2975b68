"""Clocks. `call(i)` runs the measured operation once on rotating buffer set i and returns its
outputs; the outputs of one rotation are kept alive so that each call in a graph writes its own.

GPU: one CUDA graph of >= 20 calls cycling over the sets, replayed >= 10 times between CUDA
events; per-call time = median over the replays, the fastest and slowest replay as the spread.
Steps a graph cannot hold (a host sync) or that run for milliseconds: eager calls between CUDA
events (event_time), the peak memory of one step beside (peak_bytes).
CPU: torch.utils.benchmark's blocked_autorange (median and interquartile range)."""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable

import torch
import torch.utils.benchmark as benchmark

Call = Callable[[int], object]
MIN_CALLS, REPLAYS = 20, 10


def rotation(set_bytes: int, l2_bytes: int, max_bytes: int, max_sets: int = 4096) -> int:
    """Buffer sets so that one pass over them moves more than 2x the L2 (within max_bytes)."""
    want = math.ceil(2 * l2_bytes / max(set_bytes, 1)) + 1
    return max(1, min(want, max_sets, max_bytes // max(set_bytes, 1)))


def cuda_graph_time(call: Call, n_sets: int, replays: int = REPLAYS) -> dict:
    calls = math.ceil(max(MIN_CALLS, n_sets) / n_sets) * n_sets
    # Warm-up on a side stream (lazy initialisation, compilation, JIT), outside the capture.
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(max(n_sets, 3)):
            call(i % n_sets)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    keep: deque = deque(maxlen=n_sets)
    with torch.cuda.graph(graph):
        for i in range(calls):
            keep.append(call(i % n_sets))
    keep.clear()
    graph.replay()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(True), torch.cuda.Event(True)) for _ in range(replays)]
    for start, end in events:
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    us = sorted(s.elapsed_time(e) * 1e3 / calls for s, e in events)
    del graph
    return {"median_us": statistics.median(us), "min_us": us[0], "max_us": us[-1]}


def event_time(call: Call, n_sets: int, replays: int = REPLAYS) -> dict:
    calls = max(n_sets, 3)
    for i in range(calls):  # warm-up
        call(i % n_sets)
    us = []
    for _ in range(replays):
        start, end = torch.cuda.Event(True), torch.cuda.Event(True)
        start.record()
        for i in range(calls):
            call(i % n_sets)
        end.record()
        end.synchronize()
        us.append(start.elapsed_time(end) * 1e3 / calls)
    us.sort()
    return {"median_us": statistics.median(us), "min_us": us[0], "max_us": us[-1]}


def peak_bytes(call: Call) -> int:
    """torch.cuda.max_memory_allocated over one call, less what was allocated before it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    call(0)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def cpu_time(call: Call, n_sets: int, min_run_time: float = 0.05) -> dict:
    counter = iter(range(1 << 62))
    timer = benchmark.Timer("call(next(counter) % n)", globals={**locals(), "n": n_sets})
    m = timer.blocked_autorange(min_run_time=min_run_time)
    times = sorted(t * 1e6 for t in m.times)
    return {"median_us": m.median * 1e6, "min_us": times[0], "max_us": times[-1]}


def copy_ceiling(device: str) -> float:
    """GB/s (bytes read + written) of the faster of a 1 GiB device-to-device copy_ and an
    elementwise kernel over it (a copy captured in a graph can run on a copy engine, slower than
    SM kernels reach)."""
    nbytes = (1 << 30) if device == "cuda" else (64 << 20)
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    if device != "cuda":
        return 2 * nbytes / (cpu_time(lambda i: dst.copy_(src), 1)["median_us"] * 1e3)
    a, b = src.view(torch.bfloat16), dst.view(torch.bfloat16)
    calls = [lambda i: dst.copy_(src), lambda i: torch.neg(a, out=b)]
    best = min(cuda_graph_time(c, 1)["median_us"] for c in calls)
    return 2 * nbytes / (best * 1e3)
