"""The measuring loop: for every part of the plan (a suite in one variant), op and shape, allocate
rotating buffer sets, then for every provider gate its correctness against float64 once and, if it
passes, time it in each regime that applies to the shape. One record per (part, op, shape,
provider, regime), whatever happened to it."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

import oink
from oink.bench import chain, gate, ranking, suites, timing
from oink.bench.providers import DTYPES, FLOOR, FUSED, RMSNORM, Provider, first_line

L2_SETS = 4  # the l2 regime's buffer sets: small enough to stay L2-resident up to M = 256


@dataclass
class Config:
    parts: list[suites.Part]
    ops: list[str]
    quick: bool
    device: str  # "cuda" or "cpu"
    eps: float = 1e-6
    max_sets: int = 8192
    max_total_bytes: int = 4 << 30  # cap on the rotating buffers' footprint
    replays: int = 10
    host_iters: int = 200
    record_plans: bool = True  # oink.explain for every oink record
    chain_layers: int = chain.LAYERS
    chain_replays: int = chain.REPLAYS
    # Filled in by run(): the cache the rotation must exceed, the per-set memory budget, and the
    # budget for the GEMM chain's weights.
    cache_bytes: int = 0
    set_budget: int = 0
    chain_budget: int = 0


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


@dataclass
class Shape:
    """One (part, op, N, M) and what is allocated for it."""

    part: suites.Part
    op: str
    n: int
    m: int
    regimes: tuple[str, ...]
    dtype: torch.dtype = field(init=False)
    wdtype: torch.dtype = field(init=False)

    def __post_init__(self) -> None:
        self.dtype = DTYPES[self.part.variant.dtype]
        self.wdtype = DTYPES[self.part.variant.weight_dtype]

    def label(self) -> str:
        v = self.part.variant.name
        return f"{self.part.suite} {self.op} {v} N={self.n} M={self.m}"

    def base(self) -> dict:
        v = self.part.variant
        return {
            "suite": self.part.suite,
            "variant": v.name,
            "op": self.op,
            "dtype": str(self.dtype)[6:],
            "weight_dtype": str(self.wdtype)[6:],
            "pad": v.pad,
            "ld": self.n + v.pad,
            "N": self.n,
            "M": self.m,
            "bytes": model_bytes(
                self.op, self.m, self.n, self.dtype.itemsize, self.wdtype.itemsize
            ),
        }


class ChainWeights:
    """The GEMM chain's [N, N] weights for the current (N, dtype), kept across shapes (the plan is
    N-major, so M changes under the same weights) and within the memory budget."""

    def __init__(self, cfg: Config) -> None:
        self.cfg, self.key, self.weights = cfg, None, None

    def why_not(self, n: int, dtype: torch.dtype) -> str | None:
        need = chain.weights_bytes(n, dtype, self.cfg.chain_layers)
        if need > self.cfg.chain_budget:
            return (
                f"gemm chain: {self.cfg.chain_layers} weights of {n}x{n} {str(dtype)[6:]} take "
                f"{need / 2**30:.1f} GiB, over the {self.cfg.chain_budget / 2**30:.1f} GiB budget"
            )
        return None

    def get(self, n: int, dtype: torch.dtype) -> list:
        if self.key != (n, dtype):
            self.weights = None  # free the old ones before making the new
            gen = torch.Generator(device=self.cfg.device).manual_seed(n)
            self.weights = chain.make_weights(n, dtype, self.cfg.device, self.cfg.chain_layers, gen)
            self.key = (n, dtype)
        return self.weights


@dataclass
class Buffers:
    """A shape's rotating buffer sets (hbm: all of them; l2: the first L2_SETS; gemm: the first),
    the weight, the calls per graph of the hbm regime, and the GEMM chain without norms."""

    sets: list
    w: torch.Tensor
    hbm_calls: int
    rotation: dict
    baseline: chain.Baseline | None = None
    # Every provider's captured chain with its record, timed together after the last provider
    # (_measure_chains).
    chains: list[tuple[dict, chain.Chain]] = field(default_factory=list)


def _n_sets(cfg: Config, shape: Shape, set_bytes: int) -> tuple[int, int]:
    """(sets, hbm calls per graph): the hbm rotation where hbm is timed, else as few as the other
    regimes need."""
    min_calls = timing.MIN_CALLS_PER_GRAPH if cfg.device == "cuda" else 1
    max_sets = cfg.max_sets if cfg.device == "cuda" else 16
    n_sets, calls = timing.plan_rotation(
        set_bytes, cfg.cache_bytes, max_sets, cfg.max_total_bytes, min_calls
    )
    if "hbm" not in shape.regimes:
        n_sets = 1
    if "l2" in shape.regimes:
        n_sets = max(n_sets, L2_SETS)
    return n_sets, calls


def _allocate(cfg: Config, shape: Shape, set_bytes: int) -> Buffers:
    dev, pad = cfg.device, shape.part.variant.pad
    n_sets, calls = _n_sets(cfg, shape, set_bytes)
    gen = torch.Generator(device=dev).manual_seed(1000 * shape.n + shape.m)
    w = (torch.rand(shape.n, generator=gen, device=dev) + 0.5).to(shape.wdtype)  # in [0.5, 1.5]
    tensors = 1 if shape.op == RMSNORM else 2
    sets = [
        tuple(_rows(shape.m, shape.n, pad, shape.dtype, dev, gen) for _ in range(tensors))
        for _ in range(n_sets)
    ]
    rotation = {
        "n_sets": n_sets,
        "footprint_bytes": n_sets * set_bytes,
        "footprint_over_cache": round(n_sets * set_bytes / cfg.cache_bytes, 2),
    }
    return Buffers(sets, w, calls, rotation)


def _new_records(shape: Shape, p: Provider, records: list[dict]) -> list[dict]:
    recs = [
        {
            **shape.base(),
            "regime": regime,
            "provider": p.name,
            "group": p.group,
            "baseline": p.baseline,
            "pdl": p.pdl,
            "status": "incomplete",  # until the gate and the timing have finished
        }
        for regime in shape.regimes
    ]
    records.extend(recs)
    return recs


def _close(recs: list[dict], progress: Progress, label: str, **what) -> None:
    """Every record of a provider at once (n/a, skipped, failed or an error before timing)."""
    for rec in recs:
        rec.update(what)
        progress.step(f"{label} {rec['provider']} {rec['regime']}: {what['status']}")


def measure_shape(
    cfg: Config,
    shape: Shape,
    providers: list[Provider],
    ceiling_gbps: float,
    progress: Progress,
    records: list[dict],
    weights: ChainWeights,
) -> None:
    """Appends this shape's records to `records` as they are made."""
    set_bytes = suites.set_bytes(shape.m, shape.n, shape.dtype.itemsize)
    first = len(records)
    label = shape.label()
    if set_bytes > cfg.set_budget:
        why = f"one buffer set is {set_bytes >> 20} MiB, over the {cfg.set_budget >> 20} MiB budget"
        for p in providers:
            _close(_new_records(shape, p, records), progress, label, status="skipped", reason=why)
        return
    buf = _allocate(cfg, shape, set_bytes)
    for p in providers:
        recs = _new_records(shape, p, records)
        _measure_provider(cfg, shape, p, buf, recs, progress, weights)
        if p.name == "oink" and cfg.record_plans:
            try:
                plan = oink.explain(buf.sets[0][0], buf.w, op=shape.op, eps=cfg.eps)
                plan = dataclasses.asdict(plan)
            except Exception as e:
                plan = f"explain failed: {e}"
            for rec in recs:
                rec["plan"] = plan
    _measure_chains(cfg, shape, buf)
    for rec in records[first:]:
        if ranking.timed(rec):
            rec["GBps"] = rec["bytes"] / (rec["time_us"] * 1e3)
            rec["pct_ceiling"] = 100 * rec["GBps"] / ceiling_gbps
    chain.mark_drifted(records[first:])
    add_ratios(records[first:])
    del buf
    if cfg.device == "cuda" and set_bytes > (256 << 20):
        torch.cuda.empty_cache()


def _measure_provider(
    cfg: Config,
    shape: Shape,
    p: Provider,
    buf: Buffers,
    recs: list[dict],
    progress: Progress,
    weights: ChainWeights,
) -> None:
    label = shape.label()
    reason = p.unsupported(cfg.device, shape.dtype, shape.wdtype, shape.n)
    if reason:
        _close(recs, progress, label, status="unsupported", reason=reason)
        return
    errors = None
    if p.group != FLOOR:  # the copy floor computes no norm: nothing to gate
        try:
            errors = _gate(cfg, shape.op, p, buf)
        except Exception as e:
            _close(recs, progress, label, status="error", reason=first_line(e))
            _recover(cfg, f"{p.name} on {label}", e)
            return
        why = gate.why_failed(errors)
        if why is None and errors["out_dtype"] != str(shape.dtype)[6:]:
            why = f"returns {errors['out_dtype']} for {str(shape.dtype)[6:]} input (other bytes)"
        if why:
            _close(recs, progress, label, status="failed", reason=why, errors=errors)
            return
    for rec in recs:
        if p.group == FLOOR and rec["regime"] == "gemm":
            rec.update(status="unsupported", reason="the copy floor is for isolated calls")
            continue
        if errors is not None:
            rec["errors"] = errors
        progress.step(f"{label} {p.name} {rec['regime']}")
        try:
            _time(cfg, shape, p, buf, rec, weights)
        except Exception as e:
            rec.update(status="error", reason=first_line(e))
            _recover(cfg, f"{p.name} on {label} ({rec['regime']})", e)


def _recover(cfg: Config, where: str, e: BaseException) -> None:
    """After an exception on a GPU: go on if the context is still usable, else stop the run."""
    if cfg.device != "cuda":
        return
    try:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    except Exception as lost:
        raise CudaContextLost(f"{where}: {e}") from lost


def _refresh(sets) -> None:
    """Fresh N(0, 1) values: every provider of the fused op starts from bounded inputs (the
    in-place ones overwrite x and the residual)."""
    for s in sets:
        for t in s:
            t.normal_()


def _gate(cfg: Config, op: str, p: Provider, buf: Buffers) -> dict:
    """The provider's output on the first set against float64 (gate.py). The fused provider's
    returned (y, new residual) are checked: in place or not."""
    eps, w = cfg.eps, buf.w
    if op == RMSNORM:
        x0 = buf.sets[0][0]
        return gate.check_rmsnorm(p.fn(x0, w, eps), x0, w, eps)
    _refresh(buf.sets[:1])
    x0, r0 = buf.sets[0]
    xb, rb = x0.clone(), r0.clone()
    y, new_residual = p.fn(x0, r0, w, eps)
    return gate.check_fused(y, new_residual, xb, rb, w, eps)


def _call(op: str, p: Provider, sets, w, eps: float):
    if op == RMSNORM:
        return lambda i: p.fn(sets[i][0], w, eps)
    return lambda i: p.fn(sets[i][0], sets[i][1], w, eps)


def _time(cfg: Config, shape: Shape, p: Provider, buf: Buffers, rec: dict, weights) -> None:
    """Time one regime; rec gets the times and the regime's own facts."""
    regime, op = rec["regime"], shape.op
    used = {"hbm": buf.sets, "l2": buf.sets[:L2_SETS], "gemm": buf.sets[:1]}[regime]
    if op == FUSED:
        _refresh(used)
    if regime == "gemm":
        why = weights.why_not(shape.n, shape.dtype)
        if why:
            rec.update(status="skipped", reason=why)
            return
        _capture_chain(cfg, shape, p, buf, rec, weights)
        return  # timed with the shape's other providers (_measure_chains)
    call = _call(op, p, used, buf.w, cfg.eps)
    calls = buf.hbm_calls if regime == "hbm" else timing.MIN_CALLS_PER_GRAPH
    rec.update(_rotation(buf, len(used)))
    rec.update(_clock(cfg, call, len(used), calls))
    if cfg.device == "cuda" and regime == "hbm" and shape.part.suite == "decode":
        rec["host_us"] = timing.host_eager_time(call, len(used), cfg.host_iters)
    rec["status"] = "ok"
    # In place and replayed, residual <- residual + x grows by |x| per call, and x is a normalised
    # row times a weight in [0.5, 1.5], so |x| stays below ~15 (measured: <= 14 over 20000 calls
    # of N = 1024 and 4096). float16 cannot overflow: at |residual| = 32768 its spacing is 32 and
    # an increment below 16 rounds away, so the residual saturates there (bfloat16 earlier,
    # float32 grows by <= 15 per call). Checked after timing all the same, never assumed.
    if op == FUSED and not _finite(used):
        rec.update(status="failed", reason="non-finite values in x or residual after timing")


def _rotation(buf: Buffers, n_sets: int) -> dict:
    one = buf.rotation["footprint_bytes"] // buf.rotation["n_sets"]
    over = buf.rotation["footprint_over_cache"] * n_sets / buf.rotation["n_sets"]
    return {"n_sets": n_sets, "footprint_bytes": one * n_sets, "footprint_over_cache": over}


def _clock(cfg: Config, call, n_sets: int, calls: int) -> dict:
    if cfg.device == "cuda":
        calls = -(-calls // n_sets) * n_sets  # a whole number of rotations
        return timing.cuda_graph_time(call, n_sets, calls, cfg.replays)
    repeats, target = (5, 2e-3) if cfg.quick else (9, 1e-2)
    return timing.cpu_time(call, n_sets, repeats, target)


def _capture_chain(
    cfg: Config, shape: Shape, p: Provider, buf: Buffers, rec: dict, weights: ChainWeights
) -> None:
    """p's GEMM chain for this shape, captured and queued in buf.chains beside the others'."""
    ws = weights.get(shape.n, shape.dtype)
    x = buf.sets[0][0]
    if buf.baseline is None:  # one chain without norms per shape, beside every provider's
        buf.baseline = chain.Baseline(cfg.device, ws, x)
    residual = buf.sets[0][1] if shape.op == FUSED else None
    captured = chain.Chain(shape.op, p.fn, buf.baseline, ws, x, residual, buf.w, cfg.eps)
    buf.chains.append((rec, captured))


def _measure_chains(cfg: Config, shape: Shape, buf: Buffers) -> None:
    """Times every queued chain of the shape in the same rounds (chain.measure_together) and
    completes their records: a marginal, noisy or ok; failed if the fused op's stream went
    non-finite; an error for all of them if the rounds raise."""
    if not buf.chains:
        return
    recs = [rec for rec, _ in buf.chains]
    chains = [captured for _, captured in buf.chains]
    buf.chains = []
    try:
        marginals = chain.measure_together(
            chains, buf.baseline, cfg.chain_layers, cfg.chain_replays
        )
    except Exception as e:
        for rec in recs:
            rec.update(status="error", reason=first_line(e))
        _recover(cfg, f"the gemm chains of {shape.label()}", e)
        return
    finite = shape.op != FUSED or _finite(buf.sets[:1])
    for rec, m in zip(recs, marginals, strict=True):
        rec.update(m, weights_bytes=chain.weights_bytes(shape.n, shape.dtype, cfg.chain_layers))
        if not finite:
            # The providers' chains ran in turn on one x and residual: which one went non-finite
            # is not known, so none of them is timed.
            rec.update(status="failed", reason="non-finite values in x or residual after timing")
        elif why := chain.noise(rec):
            rec.update(status="noisy", reason=why)
        else:
            rec["status"] = "ok"


def add_ratios(records: list[dict]) -> None:
    """Per regime of one shape: ratio_vs_best_baseline = the fastest other provider's time / this
    provider's (> 1: faster); and on oink's records, ranking.compare_cell's peers and ratios."""
    by_regime: dict[str, list[dict]] = {}
    for r in records:
        by_regime.setdefault(r["regime"], []).append(r)
    for recs in by_regime.values():
        ok = [r for r in recs if ranking.timed(r)]
        others = [r for r in ok if r["baseline"]]
        if others:
            best = min(others, key=lambda r: r["time_us"])
            for r in ok:
                r["best_baseline"] = best["provider"]
                r["ratio_vs_best_baseline"] = best["time_us"] / r["time_us"]
        cell = ranking.compare_cell(recs)
        for r in recs:
            if r["provider"] in ranking.OINK_NAMES:
                r["vs"] = cell


def plan_shapes(cfg: Config) -> list[Shape]:
    """Every (part, op, N, M) with the regimes that apply to it (suites.regimes_for); shapes no
    requested regime applies to are left out (and counted by dropped_shapes)."""
    out = []
    for part in cfg.parts:
        for op in cfg.ops:
            for n, m in part.shapes:
                regimes = suites.regimes_for(part.regimes, m)
                if regimes:
                    out.append(Shape(part, op, n, m, regimes))
    return out


def dropped_shapes(cfg: Config) -> int:
    every = sum(len(part.shapes) for part in cfg.parts) * len(cfg.ops)
    return every - len(plan_shapes(cfg))


def run(
    cfg: Config,
    by_op: dict[str, list[Provider]],
    ceiling_gbps: float,
    records: list[dict],
    checkpoint: Callable[[suites.Part], None] | None = None,
) -> None:
    """Appends every record of the run to `records` as it is made (part, op, N, M, provider,
    regime order), so that a run stopped by an exception still leaves what it measured.
    checkpoint(part) is called after each part (a suite in one variant) but the last: a run
    killed without a chance to write its results (SIGKILL at a time limit) keeps those parts."""
    shapes = plan_shapes(cfg)
    progress = Progress(sum(len(by_op[s.op]) * len(s.regimes) for s in shapes))
    cfg.cache_bytes = cache_bytes(cfg.device)
    memory = 0
    if cfg.device == "cuda":
        memory = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    cfg.set_budget = suites.set_budget(cfg.device, memory)
    cfg.chain_budget = suites.chain_budget(cfg.device, memory)
    weights = ChainWeights(cfg)
    try:
        for i, shape in enumerate(shapes):
            measure_shape(cfg, shape, by_op[shape.op], ceiling_gbps, progress, records, weights)
            last = i + 1 == len(shapes)
            if checkpoint and not last and shapes[i + 1].part is not shape.part:
                checkpoint(shape.part)
    finally:
        progress.close()
