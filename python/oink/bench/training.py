"""`oink-bench training` (or `python -m oink.bench.training`): the training passes of RMSNorm and
LayerNorm, forward (the output and the statistics the backward takes) and backward (dx and the
parameters' gradients), timed as the forward suites are (GUIDE §3: CUDA graphs over rotating
buffer sets larger than 2x L2, median of the replays) beside:

  torch_eager    PyTorch's own kernels: _fused_rms_norm and its backward
                 (aten::_fused_rms_norm_backward), native_layer_norm and native_layer_norm_backward
                 (on the CPU, where _fused_rms_norm_backward has none, the float32 formula, eager;
                 on CUDA LayerNorm's parameters converted once to x's dtype, the only one
                 PyTorch's CUDA kernels take)
  torch_compile  the float32 formula compiled by Inductor (what a compiled model runs)
  quack, liger   Quack's rmsnorm_fwd / rmsnorm_bwd / layernorm_fwd / layernorm_bwd and Liger's
                 rms_norm_* / layer_norm_*, when importable, as installed, or from the peers kit
                 (--peers, default ./.peers when it exists: oink/bench/peers.py, as `oink bench`
                 uses it)
  flashinfer_cute  FlashInfer's CuTe-DSL LayerNorm forward (layernorm_cute, PDL on, as
                 flashinfer.norm runs it on sm_90), installed or from the kit: y only, an
                 inference kernel that saves no statistics (its record says so)

Shapes: Quack's (N = 4096, M = 8K ... 512K) and DeepSeek-V3's hidden size (N = 7168); LayerNorm's
backward takes N <= 8192 on CUDA. Inputs: x and dy of --dtype; RMSNorm's weight of --dtype;
LayerNorm's weight and bias float32 (mixed-precision training's parameters, and what Quack's
LayerNorm takes).

Every provider is checked against float64 before it is timed (every output, relative L2 error
within 4 units of roundoff of its dtype); one that is missing or fails is reported with the
reason, never dropped. Bytes model (the least each pass moves; % of copy is that over the time,
against the copy ceiling of the same run):

  rmsnorm forward     x read, y written (M x N each), rstd written (M floats), the weight read
  rmsnorm backward    dy and x read, dx written, rstd read, the weight read, dweight written
  layernorm forward   x read, y written, mean and rstd written, the weight and bias read
  layernorm backward  dy and x read, dx written, mean and rstd read, the weight read, dweight
                      and dbias written

Results: results.json and results.md under --out."""

from __future__ import annotations

import argparse
import importlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

import oink
from oink.bench import peers
from oink.bench.gate import rel_l2_bound
from oink.bench.timing import (
    MIN_CALLS_PER_GRAPH,
    MIN_REPLAYS,
    copy_ceiling,
    cpu_time,
    cuda_graph_time,
    plan_rotation,
)

EPS = 1e-6
# (N, M) of the GPU run: Quack's published shapes and DeepSeek-V3's hidden size; --quick keeps
# five.
GPU_SHAPES = [(4096, m) for m in (8192, 32768, 131072, 524288)] + [
    (7168, m) for m in (4096, 16384, 65536)
]
GPU_QUICK = [(4096, 8192), (4096, 65536), (4096, 262144), (7168, 4096), (7168, 16384)]
CPU_SHAPES = [(1024, 64), (4096, 256)]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
OPS = ("rmsnorm", "layernorm")
PASSES = ("forward", "backward")
# A provider: fn(*per_set_inputs, *params) -> tuple of outputs (in the case's order).
Provider = Callable[..., tuple]


# --- the float32 formulas (the torch_compile baseline; eager where PyTorch has no kernel) --------


def rms_forward_formula(x, w):
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1) + EPS)
    return (xf * rstd.unsqueeze(-1) * w.float()).to(x.dtype), rstd


def rms_backward_formula(dy, x, rstd, w):
    """RMSNorm's backward in float32 (rstd from the forward), each result rounded once."""
    xf, r = x.float(), rstd.unsqueeze(-1)
    g = dy.float() * w.float()
    c = (g * xf).sum(-1, keepdim=True) * r.pow(3) / x.shape[-1]
    dx = (r * g - c * xf).to(x.dtype)
    dw = (dy.float() * xf * r).sum(0).to(w.dtype)
    return dx, dw


def ln_forward_formula(x, w, b):
    xf = x.float()
    mean = xf.mean(-1)
    rstd = torch.rsqrt((xf - mean.unsqueeze(-1)).pow(2).mean(-1) + EPS)
    y = (xf - mean.unsqueeze(-1)) * rstd.unsqueeze(-1) * w + b
    return y.to(x.dtype), mean, rstd


def ln_backward_formula(dy, x, mean, rstd, w, b):
    xf, r = x.float(), rstd.unsqueeze(-1)
    xhat = (xf - mean.unsqueeze(-1)) * r
    dyf = dy.float()
    g = dyf * w
    dx = r * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx.to(x.dtype), (dyf * xhat).sum(0).to(w.dtype), dyf.sum(0).to(b.dtype)


# --- float64 references ---------------------------------------------------------------------------


# Rows a block of the reference takes: its float64 temporaries stay near a GiB at N = 7168,
# where the whole batch (M = 512K) would need tens of GiB.
REFERENCE_BLOCK_ROWS = 8192
REFERENCE_BLOCK_ELEMS = 1 << 26  # and the error's blocks (rel_l2)


def reference(case: str, inputs: tuple, params: tuple) -> tuple:
    """The case's outputs in float64, from the exact statistics, on the inputs' device (the CPU
    took minutes over the largest batches), a block of rows at a time: the per-row outputs block
    by block, the parameters' gradients summed over the blocks."""
    m = inputs[0].shape[0]
    outs: list = []
    for start in range(0, max(m, 1), REFERENCE_BLOCK_ROWS):
        block = _reference_block(case, [t[start : start + REFERENCE_BLOCK_ROWS] for t in inputs],
                                 params)  # fmt: skip
        if not outs:
            outs = [
                o.new_empty((m, *o.shape[1:])) if i not in _column_outputs(case) else o
                for i, o in enumerate(block)
            ]
        for i, o in enumerate(block):
            if i in _column_outputs(case):
                if start > 0:
                    outs[i] += o
            else:
                outs[i][start : start + o.shape[0]] = o
    return tuple(outs)


def _column_outputs(case: str) -> set[int]:
    """The outputs that are sums over the rows (dweight, dbias), by position."""
    names = CASES[case].outputs
    return {i for i, name in enumerate(names) if name in ("dweight", "dbias")}


def _reference_block(case: str, inputs: list, params: tuple) -> tuple:
    t64 = [t.double() for t in (*inputs, *params)]
    if case == "rmsnorm forward":
        x, w = t64
        rstd = torch.rsqrt(x.pow(2).mean(-1) + EPS)
        return x * rstd.unsqueeze(-1) * w, rstd
    if case == "rmsnorm backward":
        dy, x, _, w = t64
        rstd = torch.rsqrt(x.pow(2).mean(-1) + EPS)
        return _rms_backward64(dy, x, rstd, w)
    if case == "layernorm forward":
        x, w, b = t64
        mean = x.mean(-1)
        rstd = torch.rsqrt(x.var(-1, unbiased=False) + EPS)
        return (x - mean.unsqueeze(-1)) * rstd.unsqueeze(-1) * w + b, mean, rstd
    dy, x, _, _, w, b = t64
    mean = x.mean(-1)
    rstd = torch.rsqrt(x.var(-1, unbiased=False) + EPS)
    xhat = (x - mean.unsqueeze(-1)) * rstd.unsqueeze(-1)
    g = dy * w
    dx = rstd.unsqueeze(-1) * (
        g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True)
    )
    return dx, (dy * xhat).sum(0), dy.sum(0)


def _rms_backward64(dy, x, rstd, w):
    r = rstd.unsqueeze(-1)
    g = dy * w
    c = (g * x).sum(-1, keepdim=True) * r.pow(3) / x.shape[-1]
    return r * g - c * x, (dy * x * r).sum(0)


# --- the cases ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    op: str
    pass_: str
    inputs: tuple[str, ...]  # per buffer set, in the providers' argument order
    params: tuple[str, ...]  # shared by every call, after the inputs
    outputs: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.op} {self.pass_}"

    def model_bytes(self, m: int, n: int, elem: int, welem: int) -> int:
        rows = m * n * elem
        stats = 4 * m * (1 if self.op == "rmsnorm" else 2)
        if self.pass_ == "forward":
            return 2 * rows + stats + n * welem * len(self.params)
        grads = n * welem * (len(self.outputs) - 1)  # dweight (and dbias)
        return 3 * rows + stats + n * welem + grads


CASES = {
    c.name: c
    for c in (
        Case("rmsnorm", "forward", ("x",), ("weight",), ("y", "rstd")),
        Case("rmsnorm", "backward", ("dy", "x", "rstd"), ("weight",), ("dx", "dweight")),
        Case("layernorm", "forward", ("x",), ("weight", "bias"), ("y", "mean", "rstd")),
        Case(
            "layernorm",
            "backward",
            ("dy", "x", "mean", "rstd"),
            ("weight", "bias"),
            ("dx", "dweight", "dbias"),
        ),
    )
}


def torch_eager(case: str, device: str) -> Provider:
    if case == "rmsnorm forward":

        def fn(x, w):
            y, rstd = torch._fused_rms_norm(x, [x.shape[-1]], w, EPS)
            return y, rstd

        return fn
    if case == "rmsnorm backward":

        def fn(dy, x, rstd, w):
            if not x.is_cuda:  # PyTorch's CPU path has no backward kernel of its own
                return rms_backward_formula(dy, x, rstd, w)
            n = x.shape[-1]
            return torch.ops.aten._fused_rms_norm_backward(
                dy, x, [n], rstd.unsqueeze(-1), w, [True, True]
            )

        return fn
    # PyTorch's CUDA LayerNorm takes parameters of x's dtype only (a bf16 model's own), so they
    # are converted once per tensor, outside the timed calls.
    in_x_dtype = _converted_once()
    if case == "layernorm forward":

        def fn(x, w, b):
            w, b = in_x_dtype(w, x.dtype), in_x_dtype(b, x.dtype)
            return torch.native_layer_norm(x, [x.shape[-1]], w, b, EPS)

        return fn

    def fn(dy, x, mean, rstd, w, b):
        n = x.shape[-1]
        w, b = in_x_dtype(w, x.dtype), in_x_dtype(b, x.dtype)
        return torch.ops.aten.native_layer_norm_backward(
            dy, x, [n], mean.unsqueeze(-1), rstd.unsqueeze(-1), w, b, [True, True, True]
        )

    return fn


def _converted_once() -> Callable:
    """convert(t, dtype): t in dtype, made on the first call for that tensor and reused (the
    parameters are the same tensors in every timed call)."""
    made: dict = {}

    def convert(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        if t.dtype == dtype:
            return t
        key = (t.data_ptr(), t.shape, t.dtype, dtype)
        if key not in made:
            made[key] = (t, t.to(dtype))  # t kept alive: its address stays its own
        return made[key][1]

    return convert


FORMULAS = {
    "rmsnorm forward": rms_forward_formula,
    "rmsnorm backward": rms_backward_formula,
    "layernorm forward": ln_forward_formula,
    "layernorm backward": ln_backward_formula,
}


def oink_fn(case: str) -> Provider:
    return {
        "rmsnorm forward": lambda x, w: oink.rmsnorm_forward(x, w, EPS),
        "rmsnorm backward": lambda dy, x, rstd, w: oink.rmsnorm_backward(dy, x, w, rstd),
        "layernorm forward": lambda x, w, b: oink.layernorm_forward(x, w, b, EPS),
        "layernorm backward": lambda dy, x, mean, rstd, w, b: oink.layernorm_backward(
            dy, x, w, b, mean, rstd
        ),
    }[case]


def quack_fn(case: str) -> Provider:
    # The module: the package's `rmsnorm` attribute is its autograd function of that name.
    q = importlib.import_module("quack.rmsnorm")

    if case == "rmsnorm forward":
        return lambda x, w: (lambda out: (out[0], out[2]))(
            q.rmsnorm_fwd(x, w, eps=EPS, store_rstd=True)
        )
    if case == "rmsnorm backward":
        return lambda dy, x, rstd, w: q.rmsnorm_bwd(x, w, dy, rstd)[:2]
    if case == "layernorm forward":

        def fn(x, w, b):
            out, rstd, mean = q.layernorm_fwd(x, w, b, EPS, return_rstd=True, return_mean=True)
            return out, mean, rstd

        return fn
    return lambda dy, x, mean, rstd, w, b: q.layernorm_bwd(x, w, dy, rstd, mean, has_bias=True)


def liger_fn(case: str) -> Provider:
    from liger_kernel.ops.utils import calculate_settings

    if case.startswith("rmsnorm"):
        from liger_kernel.ops.rms_norm import (
            _str_to_casting_mode,
            rms_norm_backward,
            rms_norm_forward,
        )

        mode = _str_to_casting_mode["llama"]  # rstd in float32, as oink's
        if case == "rmsnorm forward":
            return lambda x, w: (lambda out: (out[0], out[2]))(
                rms_norm_forward(x, w, EPS, 0.0, mode, None)
            )

        def fn(dy, x, rstd, w):
            block, warps = calculate_settings(x.shape[-1])
            return rms_norm_backward(dy, x, w, rstd, 0.0, mode, block, warps, False, None)

        return fn
    from liger_kernel.ops.layer_norm import layer_norm_backward, layer_norm_forward

    if case == "layernorm forward":
        return lambda x, w, b: (lambda out: (out[0], out[2], out[3]))(
            layer_norm_forward(x, w, b, EPS)
        )
    return lambda dy, x, mean, rstd, w, b: layer_norm_backward(dy, x, w, b, mean, rstd)


def flashinfer_cute_fn(case: str) -> Provider:
    if case != "layernorm forward":
        raise LookupError("FlashInfer's CuTe-DSL path has a LayerNorm forward only")
    try:  # the peers kit's copy of FlashInfer's modules (on sys.path once the kit is loaded)
        from fi_cute.norm.kernels.layernorm import layernorm_cute
    except ImportError:  # an installed FlashInfer
        from flashinfer.norm.kernels.layernorm import layernorm_cute

    def fn(x, w, b):
        out = torch.empty_like(x)
        layernorm_cute(out, x, w, b, EPS, True)
        return (out,)

    return fn


# Providers that return y alone where the case has statistics too (inference kernels): the gate
# checks y, and their records say what they leave out.
Y_ONLY = {"flashinfer_cute": "y only: saves no mean or rstd (an inference kernel)"}


def providers(case: str, device: str) -> tuple[dict[str, Provider], dict[str, str]]:
    """({name: fn}, {name: why it is not here})."""
    have: dict[str, Provider] = {"oink": oink_fn(case), "torch_eager": torch_eager(case, device)}
    missing: dict[str, str] = {}
    try:
        have["torch_compile"] = torch.compile(FORMULAS[case])
    except Exception as e:  # noqa: BLE001 (reported, not fatal)
        missing["torch_compile"] = f"{type(e).__name__}: {e}"
    peers_of_case = [("quack", quack_fn), ("liger", liger_fn)]
    if case == "layernorm forward":
        peers_of_case.append(("flashinfer_cute", flashinfer_cute_fn))
    for name, make in peers_of_case:
        if device != "cuda":
            missing[name] = "CUDA only"
            continue
        try:
            have[name] = make(case)
        except Exception as e:  # noqa: BLE001 (an absent peer is reported, never fatal)
            missing[name] = f"not importable: {type(e).__name__}: {str(e)[:200]}"
    return have, missing


def rel_l2(y: torch.Tensor, ref: torch.Tensor) -> float:
    """||y - ref|| / ||ref|| in float64 on ref's device, over both flattened (PyTorch's own
    kernels return statistics of shape (M, 1) for the reference's (M,)), a block at a time; inf
    where the element counts differ."""
    y, ref = y.detach().reshape(-1).to(ref.device), ref.reshape(-1)
    if y.numel() != ref.numel():
        return float("inf")
    diff2 = ref2 = 0.0
    block = REFERENCE_BLOCK_ELEMS
    for start in range(0, y.numel(), block):
        rb = ref[start : start + block]
        diff2 += (y[start : start + block].double() - rb).square().sum().item()
        ref2 += rb.square().sum().item()
    den = ref2**0.5
    return diff2**0.5 / (den if den > 0 else 1.0)


def gate(case: Case, fn: Provider, args: tuple, ref: tuple, y_only: bool = False) -> str | None:
    """None if every output (y alone for a Y_ONLY provider) is within the bound of its dtype,
    else why not."""
    got = fn(*args)
    if y_only:
        case, ref = Case(case.op, case.pass_, case.inputs, case.params, case.outputs[:1]), ref[:1]
    bad = []
    for name, out, exact in zip(case.outputs, got, ref, strict=False):
        if out is None:
            bad.append(f"{name} missing")
            continue
        error, bound = rel_l2(out, exact), rel_l2_bound(out.dtype)
        if not error <= bound:
            bad.append(f"{name} rel_l2 {error:.3g} over {bound:.3g}")
    if len(got) < len(case.outputs):
        bad.append(f"{len(got)} outputs for {len(case.outputs)}")
    return "; ".join(bad) or None


def make_sets(case: Case, device, n, m, dtype, n_sets, gen) -> tuple[list[tuple], tuple]:
    """The buffer sets (per-call inputs, statistics from oink's forward) and the parameters."""

    def randn(*shape):  # on the device, with its generator: the CPU took minutes at M = 512K
        return torch.randn(*shape, generator=gen, device=device)

    if case.op == "rmsnorm":
        params = ((1 + 0.5 * randn(n)).to(dtype),)
    else:
        params = (1 + 0.5 * randn(n), 0.5 * randn(n))
    sets = []
    for _ in range(n_sets):
        x = (randn(m, n) * 2 + 0.5).to(dtype)
        if case.pass_ == "forward":
            sets.append((x,))
            continue
        dy = randn(m, n).to(dtype)
        if case.op == "rmsnorm":
            sets.append((dy, x, oink.rmsnorm_forward(x, params[0], EPS)[1]))
        else:
            _, mean, rstd = oink.layernorm_forward(x, *params, EPS)
            sets.append((dy, x, mean, rstd))
    return sets, params


def measure(device: str, case: Case, shapes, dtype: torch.dtype, ceiling: dict, log) -> list:
    have, missing = providers(case.name, device)
    records = []
    gen = torch.Generator(device=device).manual_seed(0x0B4C)
    for k, (n, m) in enumerate(shapes):
        shape_records = measure_shape(device, case, n, m, dtype, have, missing, ceiling, gen)
        for rec in shape_records:
            done = rec.get("time_us")
            what = f"{done:.1f} us, {rec['pct_of_copy']:.0f}% of copy" if done else rec["skipped"]
            log(f"{case.name} [{k + 1}/{len(shapes)}] N={n} M={m} {rec['provider']}: {what}")
        records += shape_records
        if device == "cuda":
            torch.cuda.empty_cache()
    add_ratios(records)
    return records


def measure_shape(device, case, n, m, dtype, have, missing, ceiling, gen) -> list[dict]:
    """One record per provider: its times, or why it was not timed."""
    cache = torch.cuda.get_device_properties(0).L2_cache_size if device == "cuda" else 32 << 20
    elem = dtype.itemsize
    welem = elem if case.op == "rmsnorm" else 4
    moved = case.model_bytes(m, n, elem, welem)
    n_sets, calls = plan_rotation(moved, cache, 8, 24 << 30, MIN_CALLS_PER_GRAPH)
    sets, params = make_sets(case, device, n, m, dtype, n_sets, gen)
    ref = reference(case.name, sets[0], params)
    records = []
    for name in (*have, *missing):
        rec = {"case": case.name, "n": n, "m": m, "dtype": str(dtype).removeprefix("torch.")}
        rec.update(provider=name, bytes=moved)
        records.append(rec)
        if name in missing:
            rec["skipped"] = missing[name]
            continue
        fn = have[name]

        def call(i: int, fn=fn):
            return fn(*sets[i], *params)

        if name in Y_ONLY:
            rec["note"] = Y_ONLY[name]
        try:
            why = gate(case, fn, (*sets[0], *params), ref, y_only=name in Y_ONLY)
            if why is not None:
                rec["skipped"] = f"correctness gate against float64: {why}"
                continue
            if device == "cuda":
                t = cuda_graph_time(call, n_sets, calls, MIN_REPLAYS)
            else:
                t = cpu_time(call, n_sets, repeats=3, target_s=0.02)
            rec.update(t)
            rec["GBps"] = moved / (t["time_us"] * 1e3)
            rec["pct_of_copy"] = 100 * rec["GBps"] / ceiling["GBps"]
        except Exception as e:  # noqa: BLE001 (a provider that breaks is reported)
            rec["skipped"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return records


def add_ratios(records: list[dict]) -> None:
    """Each record's speed against oink's on the same shape (time / time_oink: > 1 is oink
    faster)."""
    oink_time = {(r["n"], r["m"]): r.get("time_us") for r in records if r["provider"] == "oink"}
    for r in records:
        t0 = oink_time.get((r["n"], r["m"]))
        if t0 and r.get("time_us"):
            r["oink_speedup"] = r["time_us"] / t0


def shapes_for(case: Case, device: str, quick: bool, dtype: torch.dtype) -> list[tuple[int, int]]:
    shapes = CPU_SHAPES if device == "cpu" else GPU_QUICK if quick else GPU_SHAPES
    if device == "cuda" and case.name == "layernorm backward":
        limit = 4096 if dtype == torch.float32 else 8192  # its CUDA kernel's rows
        shapes = [(n, m) for n, m in shapes if n <= limit]
    return shapes


def markdown(result: dict, env: dict) -> str:
    lines = [
        "# Training passes: RMSNorm and LayerNorm, forward and backward",
        "",
        f"{env['device']}, torch {env['torch']}; copy ceiling {result['ceiling']['GBps']:.0f} GB/s."
        " Each cell: µs, % of the copy ceiling (the bytes model of `python -m"
        " oink.bench.training --help`), and oink's speed-up over the provider (> 1: oink faster).",
    ]
    for case_name, records in result["cases"].items():
        names = list(dict.fromkeys(r["provider"] for r in records))
        lines += [
            "",
            f"## {case_name}",
            "",
            "| N | M | " + " | ".join(names) + " |",
            "|---|---|" + "---|" * len(names),
        ]
        by_shape: dict = {}
        for r in records:
            by_shape.setdefault((r["n"], r["m"]), {})[r["provider"]] = r
        for (n, m), row in by_shape.items():
            cells = []
            for name in names:
                r = row.get(name, {})
                if r.get("time_us"):
                    s = f"{r['time_us']:.1f} ({r['pct_of_copy']:.0f}%)"
                    if name != "oink" and r.get("oink_speedup"):
                        s += f" ×{r['oink_speedup']:.2f}"
                    cells.append(s)
                else:
                    cells.append("n/a")
            lines.append(f"| {n} | {m} | " + " | ".join(cells) + " |")
        skipped = {r["provider"]: r["skipped"] for r in records if r.get("skipped")}
        if skipped:
            lines += ["", "Not measured:", ""] + [f"- {k}: {v}" for k, v in skipped.items()]
        notes = {r["provider"]: r["note"] for r in records if r.get("note")}
        if notes:
            lines += ["", "Notes:", ""] + [f"- {k}: {v}" for k, v in notes.items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the results")
    parser.add_argument("--op", choices=(*OPS, "all"), default="all")
    parser.add_argument("--pass", dest="pass_", choices=(*PASSES, "all"), default="all")
    parser.add_argument("--quick", action="store_true", help="fewer shapes")
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    parser.add_argument("--cpu", action="store_true", help="the CPU kernels, small shapes")
    parser.add_argument(
        "--peers", type=Path, default=None, help="a prepared peers kit (default: ./.peers if any)"
    )
    parser.add_argument("--peers-build", type=Path, default=Path(peers.DEFAULT_BUILD))
    args = parser.parse_args(argv)
    device = "cpu" if args.cpu or not torch.cuda.is_available() else "cuda"
    dtype = DTYPES[args.dtype]
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.1f} s] {msg}", flush=True)

    kit = args.peers or peers.default_dir()
    if device == "cuda" and kit is not None:
        peers.load(kit, args.peers_build, log)  # Quack and Liger become importable

    ceiling = copy_ceiling(device, args.quick)
    log(f"copy ceiling: {ceiling['GBps']:.0f} GB/s ({ceiling['method']})")
    cases = [
        c for c in CASES.values() if args.op in (c.op, "all") and args.pass_ in (c.pass_, "all")
    ]
    result = {"ceiling": ceiling, "cases": {}}
    env = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "CPU",
        "torch": torch.__version__,
        "oink": oink.__version__,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    for case in cases:
        shapes = shapes_for(case, device, args.quick, dtype)
        result["cases"][case.name] = measure(device, case, shapes, dtype, ceiling, log)
        # After every case: a run cut short (a time limit) keeps the cases it finished.
        (args.out / "results.json").write_text(json.dumps({"env": env, **result}, indent=1))
        (args.out / "results.md").write_text(markdown(result, env))
    log(f"results in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
