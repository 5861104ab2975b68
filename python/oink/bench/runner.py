"""The measuring loop: for every (suite, op, shape), allocate rotating buffer sets, then for every
provider gate its correctness against float64 and, if it passes, time it. One record per
(suite, op, shape, provider), whatever happened to it."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import oink
from oink.bench import gate, suites, timing
from oink.bench.providers import FUSED, RMSNORM, Provider, first_line


@dataclass
class Config:
    suites: list[str]
    ops: list[str]
    dtype: torch.dtype
    weight_dtype: torch.dtype
    pad: int  # extra elements per row: row stride N + pad
    quick: bool
    device: str  # "cuda" or "cpu"
    eps: float = 1e-6
    max_sets: int = 256
    max_total_bytes: int = 4 << 30  # cap on the rotating buffers' footprint
    replays: int = 10
    host_iters: int = 200
    record_plans: bool = True  # oink.explain for every oink record
    # Filled in by run(): the cache the rotation must exceed, and the per-set memory budget.
    cache_bytes: int = 0
    set_budget: int = 0


class CudaContextLost(RuntimeError):
    """A provider left the CUDA context unusable (an illegal address, say): nothing after it can
    be trusted, so the run stops and writes what it has."""


class Progress:
    def __init__(self, total: int) -> None:
        self.total, self.done, self.t0 = total, 0, time.perf_counter()
        self.tty = sys.stderr.isatty()

    def step(self, label: str) -> None:
        self.done += 1
        elapsed = time.perf_counter() - self.t0
        width = 20
        filled = width * self.done // max(self.total, 1)
        bar = "#" * filled + "." * (width - filled)
        line = f"[{bar}] {self.done}/{self.total} {elapsed:5.0f}s  {label}"
        if self.tty:
            sys.stderr.write("\r\033[K" + line[:150])
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.tty:
            sys.stderr.write("\n")


def explain_probe(device: str) -> str | None:
    """None if oink.explain works on `device`; otherwise what happened. Run in a child process:
    a crash there (a segfault in the extension, say) must not take the benchmark down."""
    code = (
        "import torch, oink\n"
        f"x = torch.randn(4, 4096, device={device!r}, dtype=torch.bfloat16)\n"
        "w = x[0].contiguous()\n"
        "oink.explain(x, w)\n"
        "oink.explain(x, w, op='fused_add_rms_norm')\n"
    )
    env = dict(os.environ)
    package_parent = str(Path(oink.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, env.get("PYTHONPATH")]))
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired:
        return "oink.explain probe timed out"
    if proc.returncode == 0:
        return None
    tail = (proc.stderr.strip().splitlines() or [""])[-1][:200]
    how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
    return f"oink.explain crashed on {device} ({how}): {tail}"


def cache_bytes(device: str) -> int:
    """L2 size of the GPU, or the CPU's last-level cache (32 MiB if unreadable)."""
    if device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        l2 = getattr(props, "L2_cache_size", 0)
        if not l2:
            print("warning: L2 size unknown; assuming 50 MiB", file=sys.stderr)
            return 50 << 20
        return int(l2)
    try:
        text = Path("/sys/devices/system/cpu/cpu0/cache/index3/size").read_text().strip()
        units = {"K": 1 << 10, "M": 1 << 20}
        return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
    except (OSError, ValueError, IndexError):
        return 32 << 20


def _rows(m: int, n: int, pad: int, dtype: torch.dtype, device: str, gen) -> torch.Tensor:
    """[m, n] view with row stride n + pad, filled with N(0, 1) values made on the device."""
    buf = torch.empty(m * (n + pad), dtype=dtype, device=device)
    view = buf.view(m, n + pad)[:, :n]
    if pad:
        buf.zero_()
    view.normal_(generator=gen)
    return view


def model_bytes(op: str, m: int, n: int, elem: int, welem: int) -> int:
    """Minimum bytes (GUIDE §3): rmsnorm 2*M*N*e + N*ew, fused add 4*M*N*e + N*ew."""
    return (2 if op == RMSNORM else 4) * m * n * elem + n * welem


def _finite(sets) -> bool:
    return all(bool(torch.isfinite(t).all()) for s in sets for t in s)


def measure_shape(
    cfg: Config,
    suite: str,
    op: str,
    n: int,
    m: int,
    providers: list[Provider],
    ceiling_gbps: float,
    progress: Progress,
    records: list[dict],
) -> None:
    """Appends this shape's records to `records` as they are made."""
    dev, dt, wdt = cfg.device, cfg.dtype, cfg.weight_dtype
    elem, welem = dt.itemsize, wdt.itemsize
    base = {
        "suite": suite,
        "op": op,
        "dtype": str(dt)[6:],
        "weight_dtype": str(wdt)[6:],
        "pad": cfg.pad,
        "ld": n + cfg.pad,
        "N": n,
        "M": m,
        "bytes": model_bytes(op, m, n, elem, welem),
    }
    set_bytes = suites.set_bytes(m, n, elem)
    first = len(records)
    if set_bytes > cfg.set_budget:
        for p in providers:
            progress.step(f"{suite} {op} N={n} M={m} {p.name}: skipped")
            records.append(
                {
                    **base,
                    "provider": p.name,
                    "baseline": p.baseline,
                    "status": "skipped",
                    "reason": f"one buffer set is {set_bytes >> 20} MiB, over the "
                    f"{cfg.set_budget >> 20} MiB budget",
                }
            )
        return

    cache = cfg.cache_bytes
    min_calls = timing.MIN_CALLS_PER_GRAPH if dev == "cuda" else 1
    max_sets = cfg.max_sets if dev == "cuda" else 16
    n_sets, calls = timing.plan_rotation(set_bytes, cache, max_sets, cfg.max_total_bytes, min_calls)
    gen = torch.Generator(device=dev).manual_seed(1000 * n + m)
    w = (torch.rand(n, generator=gen, device=dev) + 0.5).to(wdt)  # weights in [0.5, 1.5]
    tensors = 1 if op == RMSNORM else 2
    sets = [
        tuple(_rows(m, n, cfg.pad, dt, dev, gen) for _ in range(tensors)) for _ in range(n_sets)
    ]
    rotation = {
        "n_sets": n_sets,
        "footprint_bytes": n_sets * set_bytes,
        "footprint_over_cache": round(n_sets * set_bytes / cache, 2),
    }

    for p in providers:
        progress.step(f"{suite} {op} {base['dtype']} N={n} M={m} {p.name}")
        rec = {**base, "provider": p.name, "baseline": p.baseline, **rotation}
        rec["status"] = "incomplete"  # until the gate and the timing have finished
        records.append(rec)
        reason = p.unsupported(dev, dt, wdt)
        if reason:
            rec.update(status="unsupported", reason=reason)
            continue
        try:
            _gate_and_time(cfg, suite, op, p, sets, w, rec, calls)
        except Exception as e:
            rec.update(status="error", reason=first_line(e))
            if dev == "cuda":
                try:
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
                except Exception as lost:
                    raise CudaContextLost(f"{p.name} on {op} N={n} M={m}: {e}") from lost
        if rec.get("status") == "ok":
            rec["GBps"] = rec["bytes"] / (rec["time_us"] * 1e3)
            rec["pct_ceiling"] = 100 * rec["GBps"] / ceiling_gbps
        if p.name == "oink" and cfg.record_plans:
            try:
                rec["plan"] = dataclasses.asdict(oink.explain(sets[0][0], w, op=op, eps=cfg.eps))
            except Exception as e:
                rec["plan"] = f"explain failed: {e}"
    _ratios(records[first:])
    del sets
    if dev == "cuda" and set_bytes > (256 << 20):
        torch.cuda.empty_cache()


def _gate_and_time(cfg: Config, suite: str, op: str, p: Provider, sets, w, rec: dict, calls: int):
    eps = cfg.eps
    if op == RMSNORM:
        x0 = sets[0][0]
        rec["errors"] = gate.check_rmsnorm(p.fn(x0, w, eps), x0, w, eps)

        def call(i):
            return p.fn(sets[i][0], w, eps)
    else:
        for s in sets:  # fresh, bounded values for every provider (each one mutates them)
            for t in s:
                t.normal_()
        x0, r0 = sets[0]
        xb, rb = x0.clone(), r0.clone()
        p.fn(x0, r0, w, eps)
        rec["errors"] = gate.check_fused(x0, r0, xb, rb, w, eps)
        del xb, rb
        for s in sets:
            for t in s:
                t.normal_()

        def call(i):
            return p.fn(sets[i][0], sets[i][1], w, eps)

    if not gate.passed(rec["errors"]):
        rec.update(status="failed", reason="correctness gate: rel_l2 over bound or non-finite")
        return
    if cfg.device == "cuda":
        rec.update(timing.cuda_graph_time(call, len(sets), calls, cfg.replays))
        if suite == "decode":
            rec["host_us"] = timing.host_eager_time(call, len(sets), cfg.host_iters)
    else:
        repeats, target = (5, 2e-3) if cfg.quick else (9, 1e-2)
        rec.update(timing.cpu_time(call, len(sets), repeats, target))
    rec["status"] = "ok"
    # In place and replayed, residual <- residual + x grows by |x| per call, and x is a normalised
    # row times a weight in [0.5, 1.5], so |x| stays below ~15 (measured: <= 14 over 20000 calls
    # of N = 1024 and 4096). float16 cannot overflow: at |residual| = 32768 its spacing is 32 and
    # an increment below 16 rounds away, so the residual saturates there (bfloat16 earlier,
    # float32 grows by <= 15 per call). Checked after timing all the same, never assumed.
    if op == FUSED and not _finite(sets):
        rec.update(status="failed", reason="non-finite values in x or residual after timing")


def _ratios(records: list[dict]) -> None:
    """ratio_vs_best_baseline = best baseline time / this provider's time (> 1: faster)."""
    ok = [r for r in records if r.get("status") == "ok"]
    baselines = [r for r in ok if r["baseline"]]
    if not baselines:
        return
    best = min(baselines, key=lambda r: r["time_us"])
    for r in ok:
        r["best_baseline"] = best["provider"]
        r["ratio_vs_best_baseline"] = best["time_us"] / r["time_us"]


def run(
    cfg: Config, by_op: dict[str, list[Provider]], ceiling_gbps: float, records: list[dict]
) -> None:
    """Appends every record of the run to `records` as it is made (suite, op, N, M, provider
    order), so that a run stopped by an exception still leaves what it measured."""
    plan = [
        (s, op, n, m)
        for s in cfg.suites
        for op in cfg.ops
        for n, m in suites.shapes(s, cfg.device, cfg.quick)
    ]
    progress = Progress(sum(len(by_op[op]) for _, op, _, _ in plan))
    cfg.cache_bytes = cache_bytes(cfg.device)
    memory = 0
    if cfg.device == "cuda":
        memory = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    cfg.set_budget = suites.set_budget(cfg.device, memory)
    try:
        for suite, op, n, m in plan:
            measure_shape(cfg, suite, op, n, m, by_op[op], ceiling_gbps, progress, records)
    finally:
        progress.close()
