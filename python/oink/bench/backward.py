"""`python -m oink.bench.backward`: RMSNorm's backward pass, dx and dweight from (dy, x, weight,
rstd), timed as the forward suites are (GUIDE §3: CUDA graphs over rotating buffer sets larger
than 2x L2, median of the replays) beside:

  torch_eager    PyTorch's own backward kernel of F.rms_norm (aten::_fused_rms_norm_backward; on
                 the CPU, where it has none, the float32 formula below, eager)
  torch_compile  the float32 formula compiled by Inductor (what a compiled model's backward runs)
  quack, liger   quack.rmsnorm.rmsnorm_bwd and liger_kernel.ops.rms_norm.rms_norm_backward, when
                 importable, as installed, or from the peers kit (--peers, default ./.peers
                 when it exists: oink/bench/peers.py, as `oink bench` uses it)

Every provider is checked against float64 before it is timed (dx and dweight, relative L2 error
within 4 units of roundoff of their dtypes); one that is missing or fails is reported with the
reason, never dropped. Bytes model (the least any backward moves): dy and x read, dx written
(M x N each), rstd read (M floats), the weight read and dweight written (N each); % of copy is
that over the time, against the copy ceiling of the same run. Results: results.json and
results.md under --out."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
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
# (N, M) of the GPU run: Quack's published backward shapes (N = 4096, M = 8K ... 512K) and
# DeepSeek-V3's hidden size; --quick keeps three of each.
GPU_SHAPES = [(4096, m) for m in (8192, 32768, 131072, 524288)] + [
    (7168, m) for m in (4096, 16384, 65536)
]
GPU_QUICK = [(4096, 8192), (4096, 65536), (4096, 262144), (7168, 4096), (7168, 16384)]
CPU_SHAPES = [(1024, 64), (4096, 256)]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# A provider: fn(dy, x, w, rstd) -> (dx, dweight); rstd is [M] float32.
Backward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], tuple]


def formula(dy, x, w, rstd):
    """RMSNorm's backward in float32 (rstd from the forward), each result rounded once."""
    xf, r = x.float(), rstd.unsqueeze(-1)
    g = dy.float() * w.float()
    c = (g * xf).sum(-1, keepdim=True) * r.pow(3) / x.shape[-1]
    dx = (r * g - c * xf).to(x.dtype)
    dw = (dy.float() * xf * r).sum(0).to(w.dtype)
    return dx, dw


def _oink(dy, x, w, rstd):
    return torch.ops.oink.rmsnorm_backward.default(dy, x, w, rstd)


def _torch_eager(dy, x, w, rstd):
    if not x.is_cuda:
        return formula(dy, x, w, rstd)
    n = x.shape[-1]
    return torch.ops.aten._fused_rms_norm_backward(dy, x, [n], rstd.unsqueeze(-1), w, [True, True])


def _quack() -> Backward:
    from quack.rmsnorm import rmsnorm_bwd

    def fn(dy, x, w, rstd):
        dx, dw, *_ = rmsnorm_bwd(x, w, dy, rstd)
        return dx, dw

    return fn


def _liger() -> Backward:
    from liger_kernel.ops.rms_norm import _str_to_casting_mode, rms_norm_backward
    from liger_kernel.ops.utils import calculate_settings

    mode = _str_to_casting_mode["llama"]  # rstd in float32, as oink's

    def fn(dy, x, w, rstd):
        block, warps = calculate_settings(x.shape[-1])
        return rms_norm_backward(dy, x, w, rstd, 0.0, mode, block, warps, False, None)

    return fn


def providers(device: str) -> tuple[dict[str, Backward], dict[str, str]]:
    """({name: fn}, {name: why it is not here})."""
    have: dict[str, Backward] = {"oink": _oink, "torch_eager": _torch_eager}
    missing: dict[str, str] = {}
    try:
        have["torch_compile"] = torch.compile(formula)
    except Exception as e:  # noqa: BLE001 (reported, not fatal)
        missing["torch_compile"] = f"{type(e).__name__}: {e}"
    for name, make in (("quack", _quack), ("liger", _liger)):
        if device != "cuda":
            missing[name] = "CUDA only"
            continue
        try:
            have[name] = make()
        except Exception as e:  # noqa: BLE001 (an absent peer is reported, never fatal)
            missing[name] = f"not importable: {type(e).__name__}: {str(e)[:200]}"
    return have, missing


def model_bytes(m: int, n: int, elem: int, welem: int) -> int:
    return 3 * m * n * elem + 4 * m + 2 * n * welem


def reference(dy, x, w, rows_per_chunk: int = 1 << 13):
    """float64 (dx, dweight), row chunk by row chunk (rstd exact, from x)."""
    dx = torch.empty(x.shape, dtype=torch.float64, device="cpu")
    dw = torch.zeros(x.shape[-1], dtype=torch.float64, device=x.device)
    wd = w.double()
    for s in range(0, x.shape[0], rows_per_chunk):
        xd, dyd = x[s : s + rows_per_chunk].double(), dy[s : s + rows_per_chunk].double()
        r = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + EPS)
        g = dyd * wd
        c = (g * xd).sum(-1, keepdim=True) * r.pow(3) / x.shape[-1]
        dx[s : s + rows_per_chunk] = (r * g - c * xd).cpu()
        dw += (dyd * xd * r).sum(0)
    return dx, dw.cpu()


def rel_l2(y: torch.Tensor, ref: torch.Tensor) -> float:
    y = y.detach().double().cpu()
    den = ref.norm().item()
    return (y - ref).norm().item() / (den if den > 0 else 1.0)


def gate(fn: Backward, args, ref) -> str | None:
    """None if (dx, dweight) are within the bounds of their dtypes, else why not."""
    dy, x, w, _ = args
    dx, dw = fn(*args)
    errors = {"dx": (rel_l2(dx, ref[0]), x.dtype), "dweight": (rel_l2(dw, ref[1]), w.dtype)}
    bad = [
        f"{k} rel_l2 {e:.3g} over {rel_l2_bound(d):.3g}"
        for k, (e, d) in errors.items()
        if not e <= rel_l2_bound(d)
    ]
    return "; ".join(bad) or None


def measure(device: str, shapes, dtype: torch.dtype, quick: bool, log) -> dict:
    have, missing = providers(device)
    ceiling = copy_ceiling(device, quick)
    log(f"copy ceiling: {ceiling['GBps']:.0f} GB/s ({ceiling['method']})")
    records = []
    gen = torch.Generator().manual_seed(0x0B4C)
    for k, (n, m) in enumerate(shapes):
        shape_records = measure_shape(device, n, m, dtype, have, missing, ceiling, gen)
        for rec in shape_records:
            done = rec.get("time_us")
            what = f"{done:.1f} us, {rec['pct_of_copy']:.0f}% of copy" if done else rec["skipped"]
            log(f"[{k + 1}/{len(shapes)}] N={n} M={m} {rec['provider']}: {what}")
        records += shape_records
        if device == "cuda":
            torch.cuda.empty_cache()
    add_ratios(records)
    return {"ceiling": ceiling, "records": records, "missing": missing}


def measure_shape(device, n, m, dtype, have, missing, ceiling, gen) -> list[dict]:
    """One record per provider: its times, or why it was not timed."""
    cache = torch.cuda.get_device_properties(0).L2_cache_size if device == "cuda" else 32 << 20
    elem = dtype.itemsize
    n_sets, calls = plan_rotation(3 * m * n * elem, cache, 8, 24 << 30, MIN_CALLS_PER_GRAPH)
    sets = []
    for _ in range(n_sets):
        x = (torch.randn(m, n, generator=gen) * 2).to(dtype).to(device)
        dy = torch.randn(m, n, generator=gen).to(dtype).to(device)
        sets.append((dy, x))
    w = (1 + 0.5 * torch.randn(n, generator=gen)).to(dtype).to(device)
    rstds = [oink.rmsnorm_forward(x, w, EPS)[1] for _, x in sets]
    ref = reference(sets[0][0], sets[0][1], w)
    moved = model_bytes(m, n, elem, elem)
    records = []
    for name in (*have, *missing):
        rec = {"n": n, "m": m, "dtype": str(dtype).removeprefix("torch."), "provider": name}
        rec["bytes"] = moved
        records.append(rec)
        if name in missing:
            rec["skipped"] = missing[name]
            continue
        fn = have[name]

        def call(i: int, fn=fn):
            return fn(sets[i][0], sets[i][1], w, rstds[i])

        try:
            why = gate(fn, (sets[0][0], sets[0][1], w, rstds[0]), ref)
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
    """Each record's speed against oink's on the same shape (time_oink / time: < 1 is slower)."""
    oink_time = {(r["n"], r["m"]): r.get("time_us") for r in records if r["provider"] == "oink"}
    for r in records:
        t0 = oink_time.get((r["n"], r["m"]))
        if t0 and r.get("time_us"):
            r["oink_speedup"] = r["time_us"] / t0


def markdown(result: dict, env: dict) -> str:
    names = list(dict.fromkeys(r["provider"] for r in result["records"]))
    lines = [
        "# RMSNorm backward (dx, dweight)",
        "",
        f"{env['device']}, torch {env['torch']}; copy ceiling {result['ceiling']['GBps']:.0f} GB/s."
        " Each cell: µs, % of the copy ceiling (bytes: dy, x, dx, rstd, weight, dweight), and"
        " oink's speed-up over the provider.",
        "",
        "| N | M | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    by_shape: dict = {}
    for r in result["records"]:
        by_shape.setdefault((r["n"], r["m"]), {})[r["provider"]] = r
    for (n, m), row in by_shape.items():
        cells = []
        for name in names:
            r = row.get(name, {})
            if r.get("time_us"):
                s = f"{r['time_us']:.1f} ({r['pct_of_copy']:.0f}%)"
                if name != "oink":
                    s += f" ×{r['oink_speedup']:.2f}"
                cells.append(s)
            else:
                cells.append("n/a")
        lines.append(f"| {n} | {m} | " + " | ".join(cells) + " |")
    skipped = {r["provider"]: r["skipped"] for r in result["records"] if r.get("skipped")}
    if skipped:
        lines += ["", "Not measured:", ""] + [f"- {k}: {v}" for k, v in skipped.items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the results")
    parser.add_argument("--quick", action="store_true", help="fewer shapes")
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    parser.add_argument("--cpu", action="store_true", help="the CPU kernels, small shapes")
    parser.add_argument(
        "--peers", type=Path, default=None, help="a prepared peers kit (default: ./.peers if any)"
    )
    parser.add_argument("--peers-build", type=Path, default=Path(peers.DEFAULT_BUILD))
    args = parser.parse_args(argv)
    device = "cpu" if args.cpu or not torch.cuda.is_available() else "cuda"
    shapes = CPU_SHAPES if device == "cpu" else GPU_QUICK if args.quick else GPU_SHAPES
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.1f} s] {msg}", flush=True)

    kit = args.peers or peers.default_dir()
    if device == "cuda" and kit is not None:
        peers.load(kit, args.peers_build, log)  # Quack and Liger become importable

    result = measure(device, shapes, DTYPES[args.dtype], args.quick, log)
    env = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "CPU",
        "torch": torch.__version__,
        "oink": oink.__version__,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"env": env, **result}, indent=1))
    (args.out / "results.md").write_text(markdown(result, env))
    log(f"results in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
