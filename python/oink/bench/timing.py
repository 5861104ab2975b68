"""Clocks (GUIDE §3). One function per way of timing; every provider goes through the same ones.

`call(i)` runs the measured operation once on rotating buffer set `i` (0 <= i < n_sets) and
returns its output (or None): outputs are kept alive for one rotation so that each call in a graph
writes its own buffer, as the inputs are each read from their own.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable

import torch

Call = Callable[[int], object]

MIN_CALLS_PER_GRAPH = 20
MIN_REPLAYS = 10


def plan_rotation(
    set_bytes: int, cache_bytes: int, max_sets: int, max_total: int, min_calls: int
) -> tuple[int, int]:
    """(buffer sets, calls per graph): enough sets that one pass over them is > 2x the cache,
    within `max_sets` and `max_total` bytes; calls a multiple of the sets and >= min_calls."""
    want = math.ceil(2 * cache_bytes / max(set_bytes, 1))
    n_sets = max(1, min(want, max_sets, max_total // max(set_bytes, 1)))
    calls = max(min_calls, n_sets)
    calls = math.ceil(calls / n_sets) * n_sets
    return n_sets, calls


def cuda_graph_time(call: Call, n_sets: int, calls: int, replays: int, warmup: int = 3) -> dict:
    """Median device time per call over `replays` replays of one CUDA graph of `calls` calls
    cycling over the buffer sets, each replay between its own pair of CUDA events."""
    if calls < MIN_CALLS_PER_GRAPH or replays < MIN_REPLAYS:
        raise ValueError(
            f"GUIDE §3 needs >= {MIN_CALLS_PER_GRAPH} calls and >= {MIN_REPLAYS} "
            f"replays; got {calls} calls, {replays} replays"
        )
    # Eager warm-up on a side stream, as torch.cuda.graphs recommends: lazy initialisation,
    # torch.compile's compilation and any JIT happen here, not inside the capture.
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(max(n_sets, 3)):
            call(i % n_sets)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    keep: deque = deque(maxlen=n_sets)  # the last rotation's outputs stay alive, older ones free
    with torch.cuda.graph(graph):  # (entering synchronizes and empties the allocator's cache)
        reserved_before = torch.cuda.memory_reserved()
        for i in range(calls):
            keep.append(call(i % n_sets))
    keep.clear()
    pool_bytes = torch.cuda.memory_reserved() - reserved_before

    for _ in range(warmup):
        graph.replay()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    for start, end in zip(starts, ends, strict=True):
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    per_call_us = sorted(s.elapsed_time(e) * 1e3 / calls for s, e in zip(starts, ends, strict=True))
    del graph
    return {
        "time_us": statistics.median(per_call_us),
        "time_us_min": per_call_us[0],
        "time_us_max": per_call_us[-1],
        "replays": replays,
        "calls_per_graph": calls,
        "graph_pool_bytes": pool_bytes,
    }


def host_eager_time(
    call: Call, n_sets: int, iters: int, warmup: int = 20, repeats: int = 3
) -> float:
    """Eager host time per call (µs): a loop of `iters` calls timed with perf_counter, ended by
    torch.cuda.synchronize(), divided by the count; the median of `repeats` loops after warm-up."""
    for i in range(warmup):
        call(i % n_sets)
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(iters):
            call(i % n_sets)
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(samples)


def cpu_time(call: Call, n_sets: int, repeats: int, target_s: float) -> dict:
    """CPU mode: median over `repeats` loops of per-call host time. The loop length k is set from
    the fastest of a few single calls so that a loop takes about target_s (1 <= k <= 2^14): one
    descheduled thread in the calibration cannot leave k at 1."""
    for i in range(max(n_sets, 2)):
        call(i % n_sets)

    def loop(k: int) -> float:
        t0 = time.perf_counter()
        for i in range(k):
            call(i % n_sets)
        return time.perf_counter() - t0

    single = min(loop(1) for _ in range(5))
    k = max(1, min(1 << 14, round(target_s / max(single, 1e-7))))
    per_call_us = sorted(loop(k) / k * 1e6 for _ in range(repeats))
    return {
        "time_us": statistics.median(per_call_us),
        "time_us_min": per_call_us[0],
        "time_us_max": per_call_us[-1],
        "replays": repeats,
        "calls_per_graph": k,  # calls per timed loop in CPU mode
    }


def _events_time(call: Call, calls: int, replays: int) -> float:
    """Eager: median over replays of (`calls` calls between two CUDA events) / calls, in µs."""
    for _ in range(3):
        call(0)
    samples = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            call(0)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(samples)


def copy_ceiling(device: str, quick: bool) -> dict:
    """Device-to-device (or host memcpy) bandwidth, bytes read + written.

    GPU: the fastest of three 1 GiB copies: torch's copy_ (cudaMemcpyAsync) captured in a CUDA
    graph of 20 calls and timed like the ops; the same copy_ eager between CUDA events; and an
    SM elementwise kernel (torch.neg on bfloat16) in a CUDA graph. A memcpy captured in a graph
    can become a copy-engine node, slower than what SM kernels reach, so one way alone could
    understate the ceiling."""
    nbytes = (1 << 30) if device == "cuda" else (64 << 20)
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    moved = 2 * nbytes

    def memcpy(i: int) -> torch.Tensor:
        return dst.copy_(src)

    if device != "cuda":
        t = cpu_time(memcpy, 1, repeats=3 if quick else 7, target_s=0.02)["time_us"]
        return {
            "bytes_moved_per_call": moved,
            "time_us": t,
            "GBps": moved / (t * 1e3),
            "method": f"torch copy_ of a {nbytes >> 20} MiB buffer, host clock",
        }

    src16, dst16 = src.view(torch.bfloat16), dst.view(torch.bfloat16)

    def kernel(i: int) -> torch.Tensor:
        return torch.neg(src16, out=dst16)

    n, r = MIN_CALLS_PER_GRAPH, MIN_REPLAYS
    times = {
        "memcpy_graph": cuda_graph_time(memcpy, 1, n, r)["time_us"],
        "memcpy_eager_events": _events_time(memcpy, n, r),
        "elementwise_kernel_graph": cuda_graph_time(kernel, 1, n, r)["time_us"],
    }
    best = min(times, key=times.get)
    return {
        "bytes_moved_per_call": moved,
        "time_us": times[best],
        "GBps": moved / (times[best] * 1e3),
        "GBps_each": {k: moved / (t * 1e3) for k, t in times.items()},
        "method": f"fastest of 1 GiB copies: {best} (of {', '.join(times)})",
    }
