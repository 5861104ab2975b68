"""The shapes of each suite and the run loop: inputs, gate, clocks, one record per measurement.

Inference suites (rmsnorm and the fused add): decode (regimes hbm and l2), mid, large, large_n
(long rows), variants (fp16, a float32 weight, padded rows); training: the forward and backward
passes of RMSNorm and LayerNorm at Quack's shapes and DeepSeek-V3's hidden size; training_long:
the same at rows of 2 to 16 slices (a cluster per row or weight-gradient block); softmax (its
forward and backward at Quack's shapes); cross_entropy (one step, loss and backward, at Llama's,
Qwen's and Gemma's vocabularies: N is V); linear_cross_entropy (one step from the hidden states,
Llama-3-8B's and Qwen3's LM head: hidden size 4096; timed eagerly, with its peak memory)."""

from __future__ import annotations

import platform
import subprocess
from dataclasses import dataclass
from importlib import metadata

import torch
from tqdm import tqdm

from oink.bench import measure, providers, references

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
SUITES = {  # name: (N list, M list)
    "decode": ([4096, 7168, 8192], [1, 2, 4, 8, 16, 32, 64, 128, 256]),
    "mid": ([4096, 7168, 8192], [1024, 2048]),
    "large": ([4096, 6144, 7168, 8192, 16384], [4096, 16384, 65536]),
    "large_n": ([16384, 32768, 65536, 131072, 262144], [1, 16, 256, 1024, 4096]),
    "variants": ([7168, 8192], [1, 256, 4096, 16384]),
    "training": ([4096, 7168], [4096, 8192, 16384, 32768, 65536, 131072, 524288]),
    "training_long": ([32768, 65536, 131072, 262144], [1024, 4096]),
    "softmax": ([1024, 4096, 16384, 65536, 262144], [8192, 32768, 131072, 524288]),
    "cross_entropy": ([32000, 128256, 151936, 256000], [1024, 4096, 16384, 65536]),
    "linear_cross_entropy": ([128256, 151936], [4096, 16384]),
}
MAX_BYTES = {"softmax": 4 << 30, "cross_entropy": 16 << 30}  # of x (the logits) per shape
# The GPU memory a shape takes, in x's bytes: softmax's full float64 gate, the timed sets and every
# provider's outputs (an H100's 79 GiB were full at x = 4 GiB: N=65536, M=32768, bf16). Cross-
# entropy: PyTorch eager's float32 logits and their float32 and bf16 gradients beside the set (an
# H100 ran out at x = 15.7 GiB: V=128256, M=65536).
MEMORY_PER_X = {"softmax": 24, "cross_entropy": 6}
QUICK_OF = {"softmax": ([4096, 65536], [32768]), "cross_entropy": ([32000, 128256], [4096]),
            "training_long": ([32768, 262144], [4096]),
            "linear_cross_entropy": ([128256], [4096])}  # fmt: skip
HIDDEN = {"cuda": 4096, "cpu": 64}  # linear_cross_entropy's hidden size
VARIANTS = ("fp16", "bf16-w32", "bf16-pad64")  # the variants suite's (bf16 elsewhere)
QUICK = ([4096, 8192], [1, 256, 16384])
CPU = ([1024, 4096], [1, 64])
L2_MAX_M = 256  # the l2 regime: decode batches that fit the L2 in 4 sets
PEER_VERSIONS = ("quack-kernels", "liger-kernel", "flashinfer-python", "vllm")


@dataclass(frozen=True)
class Part:
    suite: str
    variant: str  # dtype, then -w32 (a float32 weight) or -padP (row stride N + P)
    shapes: list[tuple[int, int]]

    @property
    def cases(self) -> tuple[str, ...]:
        return providers.SUITE_CASES.get(self.suite, providers.INFERENCE)


def parts(
    suites: list[str],
    device: str,
    quick: bool,
    dtype: str,
    device_bytes: int = 0,
    only: tuple[set[int] | None, set[int] | None] = (None, None),
) -> list[Part]:
    """The shapes each suite runs; with `device_bytes` (the GPU's memory), none whose buffers
    would not fit (MEMORY_PER_X); with `only` (N values, M values; None: all), those alone."""
    out = []
    for suite in suites:
        ns, ms = SUITES[suite]
        if device != "cuda":
            ns, ms = CPU
        elif quick:
            ns, ms = QUICK_OF.get(suite) or ([n for n in ns if n in QUICK[0]] or ns[:1], QUICK[1])
        cap_bytes = MAX_BYTES.get(suite, 1 << 62)
        if device_bytes and suite in MEMORY_PER_X:
            cap_bytes = min(cap_bytes, device_bytes // MEMORY_PER_X[suite])
        cap = cap_bytes // DTYPES[dtype].itemsize
        shapes = [(n, m) for n in ns for m in ms if n * m <= cap]
        if suite == "training" and device == "cuda" and not quick:  # Quack's and DeepSeek-V3's
            shapes = [(4096, m) for m in (8192, 32768, 131072, 524288)]
            shapes += [(7168, m) for m in (4096, 16384, 65536)]
        only_n, only_m = only
        shapes = [
            (n, m) for n, m in shapes if (not only_n or n in only_n) and (not only_m or m in only_m)
        ]
        if suite == "linear_cross_entropy":
            out.append(Part(suite, f"{dtype}-h{HIDDEN[device]}", shapes))
            continue
        for variant in VARIANTS if suite == "variants" else (dtype,):
            out.append(Part(suite, variant, shapes))
    return out


def parse_variant(variant: str) -> tuple[torch.dtype, torch.dtype, int]:
    name, *extra = variant.split("-")
    dtype = DTYPES[name]
    wdtype = torch.float32 if "w32" in extra else dtype
    pad = int(extra[-1][3:]) if extra and extra[-1].startswith("pad") else 0
    return dtype, wdtype, pad


def hidden_size(variant: str) -> int:
    """linear_cross_entropy's hidden size, from its variant (bf16-h4096)."""
    return int(variant.split("-h")[1])


def make_set(case: str, n: int, m: int, variant: str, device: str, gen) -> list[torch.Tensor]:
    """One buffer set: the per-call inputs (rows of stride N + pad for the inference ops)."""
    dtype, _, pad = parse_variant(variant)

    def rows(n=n) -> torch.Tensor:
        t = torch.randn(m, n + pad, generator=gen, dtype=torch.float32).to(device, dtype)
        return t[:, :n]

    if case in references.LOSSES:  # x (the logits or hidden states), the target
        x = rows() if case == "cross_entropy" else rows(hidden_size(variant))
        return [x, torch.randint(n, (m,), generator=gen).to(device)]
    if case.startswith("softmax"):
        return [rows()] if case == "softmax forward" else [rows(), torch.softmax(rows(), -1)]
    if case in providers.INFERENCE:
        return [rows(), rows()] if case == "fused_add_rms_norm" else [rows()]
    x, dy = rows(), rows()
    if case == "rmsnorm forward":
        return [x]
    if case == "layernorm forward":
        return [x]
    if case == "rmsnorm backward":
        return [dy, x, providers.rms_formula(x, torch.ones(n, device=device))[1]]
    _, mean, rstd = providers.ln_formula(x, torch.ones(n, device=device), 0.0)
    return [dy, x, mean, rstd]


def make_params(case: str, n: int, variant: str, device: str, gen) -> list[torch.Tensor]:
    dtype, wdtype, _ = parse_variant(variant)
    if case == "linear_cross_entropy":  # the LM head [V, H], scaled so that the logits are ~1
        h = hidden_size(variant)
        return [(torch.randn(n, h, generator=gen) / h**0.5).to(device, dtype)]
    if case.startswith(("softmax", "cross")):
        return []
    if case.startswith("layernorm"):  # mixed-precision training's parameters: float32
        return [torch.randn(n, generator=gen).to(device) for _ in range(2)]
    return [(1 + 0.1 * torch.randn(n, generator=gen)).to(device, wdtype)]


def model_bytes(case: str, n: int, m: int, variant: str) -> int:
    """The least each pass must move (GB/s and % of the copy ceiling are taken from this)."""
    dtype, wdtype, _ = parse_variant(variant)
    rows, e, we = m * n * dtype.itemsize, dtype.itemsize, wdtype.itemsize
    stats = 4 * m * (2 if case.startswith("layernorm") else 1)
    if case == "linear_cross_entropy":  # hidden and weight read, their gradients written
        return 2 * (m + n) * hidden_size(variant) * e
    return {
        "rmsnorm": 2 * rows + n * we,
        "fused_add_rms_norm": 4 * rows + n * we,
        "rmsnorm forward": 2 * rows + stats + n * we,
        "rmsnorm backward": 3 * rows + stats + 2 * n * we,
        "layernorm forward": 2 * rows + stats + 8 * n,
        "layernorm backward": 3 * rows + stats + 4 * n + 8 * n,
        "softmax forward": 2 * rows,
        "softmax backward": 3 * rows,
        "cross_entropy": 2 * rows,  # the logits read once, dlogits written
    }[case]


def environment(device: str) -> dict:
    env = {
        "device": device,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "oink": _version("oink-kernels"),
        "peers": {p: v for p in PEER_VERSIONS if (v := _version(p)) != "absent"},
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=props.name, cuda=torch.version.cuda, l2_bytes=props.L2_cache_size)
        try:
            query = "--query-gpu=driver_version,clocks.max.sm,clocks.max.mem"
            smi = subprocess.run(
                ["nvidia-smi", query, "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            env["driver"] = smi.stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            pass
    return env


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def measure_part(
    part: Part,
    have: dict,
    device: str,
    l2_bytes: int,
    copy_gbps: float,
    progress: tqdm,
    max_bytes: int = 16 << 30,
    uncapturable: dict | None = None,
) -> list[dict]:
    """One record per (case, shape, regime, provider): status ok (timed), failed (the gate),
    error (it raised) or n/a (the provider has no such case). `uncapturable`: {(provider, case):
    why} of the steps a CUDA graph could not capture, shared by the parts of a run (_clock)."""
    records = []
    uncapturable = {} if uncapturable is None else uncapturable
    gen = torch.Generator().manual_seed(0x0151)
    for case in part.cases:
        for n, m in part.shapes:
            progress.set_postfix_str(f"{part.suite} {part.variant} {case} N={n} M={m}")
            base = {"suite": part.suite, "variant": part.variant, "op": case, "N": n, "M": m}
            try:
                records += _measure_shape(case, n, m, part, have, device, l2_bytes, copy_gbps,
                                          max_bytes, gen, base, uncapturable)  # fmt: skip
            except torch.OutOfMemoryError as e:  # its sets: recorded, and the run goes on
                note = providers.first_line(e, 120)
                records += [{**base, "provider": p, "regime": "hbm", "status": "error",
                             "note": note} for p in have]  # fmt: skip
            # Cached blocks of this shape's sizes would not serve the next shape's: a larger
            # set ran out of memory with 76 GiB of an H100 cached and free.
            if device == "cuda":
                torch.cuda.empty_cache()
            progress.update(1)
    return records


def _measure_shape(
    case, n, m, part, have, device, l2_bytes, copy_gbps, max_bytes, gen, base, uncapturable
):
    """One shape's records: every provider on the same sets."""
    records = []
    params = make_params(case, n, part.variant, device, gen)
    first = make_set(case, n, m, part.variant, device, gen)
    gate_m = references.GATE_ROWS if case in references.LOSSES else m
    pristine = [t[:gate_m].clone() for t in first]  # the gate's (in-place ops time on sets)
    ref = references.reference(case, pristine, params)
    set_bytes = sum(t.untyped_storage().nbytes() for t in first) * 2  # inputs, outputs
    # On the CPU a few sets: its timings are for orientation, and building sets costs time.
    max_sets = 4096 if device == "cuda" else 8
    regimes = {"hbm": measure.rotation(set_bytes, l2_bytes, max_bytes, max_sets)}
    if device == "cuda" and part.suite == "decode" and m <= L2_MAX_M:
        regimes["l2"] = 4
    sets = [first] + [
        make_set(case, n, m, part.variant, device, gen) for _ in range(max(regimes.values()) - 1)
    ]
    nbytes = model_bytes(case, n, m, part.variant)
    # linear_cross_entropy: milliseconds a step, timed eagerly; its logits are rounded to
    # x's dtype outside a fused op, so its outputs are gated at that precision.
    lce = case == "linear_cross_entropy"
    how = {"eager": lce, "floor": first[0].dtype if lce else torch.float32}
    how["uncapturable"] = uncapturable
    for name, provider in have.items():
        how["fall_back"] = not name.startswith("oink")  # oink's steps must be capturable
        how["key"] = (name, case)
        fn = provider.get(case)
        rows = _measure(fn, pristine, sets, params, ref, regimes, device, **how)
        for row in rows:
            if "median_us" in row:
                row["GBps"] = nbytes / (row["median_us"] * 1e3)
                row["pct_copy"] = 100 * row["GBps"] / copy_gbps
            records.append({**base, "provider": name, **row})
    return records


def _measure(fn, pristine, sets, params, ref, regimes: dict, device: str, **how) -> list[dict]:
    if fn is None:
        return [{"regime": r, "status": "n/a", "note": "no such case"} for r in regimes]
    try:
        out = fn(*[t.clone() for t in pristine], *params)
        err, why = references.gate(out, ref, how.get("floor", torch.float32))
        if why:
            return [{"regime": r, "status": "failed", "rel_l2": err, "note": why} for r in regimes]
        del out

        def call(i: int, fn=fn):
            return fn(*sets[i], *params)

        extra = {}
        if device == "cuda" and how.get("eager"):
            extra["peak_MiB"] = measure.peak_bytes(call) / 2**20
        rows = []
        for regime, n_sets in regimes.items():
            row = {"regime": regime, "status": "ok", "rel_l2": err, **extra}
            rows.append(row | _clock(call, n_sets, device, **how))
        return rows
    except Exception as e:  # reported in the results, never fatal
        note = providers.first_line(e)
        return [{"regime": r, "status": "error", "note": note} for r in regimes]


def _clock(
    call, n_sets: int, device: str, eager=False, fall_back=False, uncapturable=None, key=None, **_
) -> dict:
    """CUDA-graph time; eager event time where asked, or where a peer's step cannot be captured
    (a host sync: the note says so). A step that failed to capture once is not tried again
    (`uncapturable`, by `key`): in torch 2.11 a failed capture keeps its graph's memory pool
    until the process ends (pytorch/pytorch#190348): Liger's cross-entropy step fails to capture,
    and an H100 running the loss suites had 75 GiB held by V=256000, M=16384."""
    if device != "cuda":
        return measure.cpu_time(call, n_sets)
    known = {} if uncapturable is None else uncapturable
    if eager:
        return measure.event_time(call, n_sets)
    if key in known:
        return {**measure.event_time(call, n_sets), "note": known[key]}
    try:
        return measure.cuda_graph_time(call, n_sets)
    except RuntimeError as e:
        if not fall_back:
            raise
        known[key] = f"timed eagerly, not capturable ({providers.first_line(e, 80)})"
        return {**measure.event_time(call, n_sets), "note": known[key]}
