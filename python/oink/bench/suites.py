"""What a run measures: (N, M) pairs per suite, for the GPU and for the smaller CPU mode (issue 3);
the variants (dtype, weight dtype, row padding); the timing regimes and where they apply; and the
step-6 matrix that `--matrix` measures in one run (issue 6)."""

from __future__ import annotations

from dataclasses import dataclass, replace

SUITES = ("decode", "mid", "dsv3", "large", "large_n", "quack", "short", "sweep", "variants")

# Timing regimes (GUIDE §3): isolated calls over rotating buffers larger than 2x L2 (HBM-cold);
# L2-warm (few buffer sets); between GEMMs (the marginal cost of a norm in a chain of cuBLAS GEMMs).
REGIMES = ("hbm", "l2", "gemm")
# l2 and gemm are decode regimes: above this M a few buffer sets no longer fit in L2, and a norm
# between GEMMs is the large-M case, where the GEMMs dwarf it and hbm already says what it costs.
DECODE_REGIME_MAX_M = 256


def _pow2(lo: int, hi: int) -> list[int]:
    out, v = [], lo
    while v <= hi:
        out.append(v)
        v *= 2
    return out


# GPU suites: lists of (N values, M values); a suite is their product.
_GPU = {
    # Decode batches: one token per sequence.
    "decode": ([4096, 7168, 8192], _pow2(1, 256)),
    # Mid-size batches (issue 4's "mid" regime: M = 128 ... 2048).
    "mid": ([4096, 7168, 8192], _pow2(128, 2048)),
    # DeepSeek-V3-like hidden sizes at prefill batch sizes.
    "dsv3": ([6144, 7168, 8192], [4096, 16384, 65536]),
    # Issue 4's "large" regime: every hidden size it names, M >= 4096.
    "large": ([4096, 6144, 7168, 8192, 16384], [4096, 16384, 65536]),
    # Long rows (step 7): 16384 (one slice) to 262144 (16 slices: a cluster of 16 CTAs), from one
    # row to a prefill batch.
    "large_n": (_pow2(16384, 262144), [1, 16, 256, 1024, 4096]),
    # Quack's published suite: N = 4096, M = 8K ... 512K.
    "quack": ([4096], _pow2(8192, 524288)),
    # Short rows in large batches: a head's QK-norm over contiguous [tokens x heads, head_dim]
    # (128, 256), and the rows too short for the tile (up to 1024 at 16 bits).
    "short": ([128, 256, 512, 1024], [16384, 65536, 262144]),
    # The scaling picture: N = 1024 ... 262144 at a few M.
    "sweep": (_pow2(1024, 262144), [1, 256, 4096]),
    # fp16, a float32 weight and padded rows on a few shapes (the matrix's variants).
    "variants": ([7168, 8192], [1, 256, 4096, 16384]),
}

_GPU_QUICK = {
    "decode": ([4096, 7168], [1, 16, 256]),
    "mid": ([7168], [128, 1024]),
    "dsv3": ([7168], [4096, 65536]),
    "large": ([4096, 16384], [4096, 65536]),
    "large_n": ([32768, 262144], [1024]),
    "quack": ([4096], [8192, 131072]),
    "short": ([128, 1024], [65536]),
    "sweep": ([1024, 16384, 262144], [1, 4096]),
    "variants": ([7168], [1, 4096]),
}

# CPU mode: same suites, shapes scaled down so a 2-core machine finishes in seconds.
_CPU = {
    "decode": ([1024, 4096], _pow2(1, 64)),
    "mid": ([4096], [128, 256]),
    "dsv3": ([6144, 7168, 8192], [64, 256]),
    "large": ([4096, 16384], [256]),
    "large_n": ([32768, 65536], [16]),
    "quack": ([4096], _pow2(256, 2048)),
    "short": ([128, 1024], [1024, 4096]),
    "sweep": (_pow2(1024, 32768), [1, 64]),
    "variants": ([4096], [1, 256]),
}

_CPU_QUICK = {
    "decode": ([1024, 4096], [1, 8, 64]),
    "mid": ([4096], [128]),
    "dsv3": ([7168], [64]),
    "large": ([16384], [64]),
    "large_n": ([32768], [8]),
    "quack": ([4096], [256, 1024]),
    "short": ([128], [1024]),
    "sweep": ([1024, 8192, 32768], [1, 64]),
    "variants": ([4096], [1, 64]),
}

# A shape is skipped when one buffer set (its two M*N tensors: x and the output for rmsnorm, x and
# residual for the fused op) would exceed the budget: on a GPU min(16 GiB, device memory / 6), since
# the composite baselines add float32 temporaries of up to twice a 16-bit set. On an H200 (141 GB)
# that is 16 GiB and every suite fits in every dtype (the largest set, quack's M = 512K in float32,
# is exactly 16 GiB); on an 80 GB card quack's M = 512K in float32 is skipped.
GPU_SET_BUDGET_CAP = 16 << 30
CPU_SET_BUDGET_BYTES = 256 << 20


def shapes(suite: str, device: str, quick: bool) -> list[tuple[int, int]]:
    """(N, M) pairs of `suite`, N-major, M ascending."""
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; expected one of {', '.join(SUITES)}")
    table = {
        ("cuda", False): _GPU,
        ("cuda", True): _GPU_QUICK,
        ("cpu", False): _CPU,
        ("cpu", True): _CPU_QUICK,
    }[(device, quick)]
    ns, ms = table[suite]
    return [(n, m) for n in ns for m in ms]


def set_bytes(m: int, n: int, elem: int) -> int:
    """Bytes of one buffer set's two M*N tensors (x and output, or x and residual)."""
    return 2 * m * n * elem


def set_budget(device: str, device_memory: int = 0) -> int:
    if device == "cuda":
        return min(GPU_SET_BUDGET_CAP, device_memory // 6)
    return CPU_SET_BUDGET_BYTES


def chain_budget(device: str, device_memory: int = 0) -> int:
    """Memory for the gemm regime's weights (32 of N x N): a quarter of a GPU's memory (35 GB on
    an H200; N = 8192 takes 4 GiB in 16-bit, 8 GiB in float32), 1 GiB on the CPU."""
    return device_memory // 4 if device == "cuda" else 1 << 30


def parse_suites(values: list[str] | None) -> list[str]:
    """--suite is repeatable and takes comma lists; 'all' means every suite."""
    names: list[str] = []
    for value in values or ["decode"]:
        for name in value.split(","):
            name = name.strip()
            if not name:
                continue
            if name == "all":
                names.extend(SUITES)
            elif name in SUITES:
                names.append(name)
            else:
                raise ValueError(f"unknown suite {name!r}; expected one of {', '.join(SUITES)}")
    return list(dict.fromkeys(names))


# --- variants, regimes and the plan ----------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """x's dtype, the weight's dtype and the row padding (row stride N + pad) of a measurement."""

    dtype: str  # "bf16", "fp16" or "fp32"
    weight_dtype: str
    pad: int = 0

    @property
    def name(self) -> str:
        """bf16, fp16, bf16-w32 (float32 weight), bf16-pad64 (row stride N + 64), ..."""
        weight = ""
        if self.weight_dtype != self.dtype:
            weight = "-w32" if self.weight_dtype == "fp32" else f"-w{self.weight_dtype}"
        return self.dtype + weight + (f"-pad{self.pad}" if self.pad else "")


@dataclass(frozen=True)
class Part:
    """One block of a run: a suite's shapes in one variant, each timed in the regimes that apply
    to it (regimes_for)."""

    suite: str
    variant: Variant
    shapes: tuple[tuple[int, int], ...]  # (N, M), N-major, M ascending
    regimes: tuple[str, ...]  # requested; regimes_for() filters them per shape


def parse_regimes(value: str | None) -> tuple[str, ...] | None:
    """--regime: a comma list of hbm, l2, gemm (None: each suite's default)."""
    if value is None:
        return None
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [v for v in names if v not in REGIMES]
    if unknown or not names:
        raise ValueError(f"unknown regime(s) {unknown or [value]}; expected some of hbm, l2, gemm")
    return tuple(r for r in REGIMES if r in names)


def default_regimes(suite: str, device: str) -> tuple[str, ...]:
    """All three for the decode suite on a GPU; hbm elsewhere. On the CPU there is no L2-warm or
    launch-overlap story to tell, and a GEMM chain of 32 layers per call would take minutes."""
    return REGIMES if suite == "decode" and device == "cuda" else ("hbm",)


def regimes_for(requested: tuple[str, ...], m: int) -> tuple[str, ...]:
    """The regimes a shape is timed in: hbm always (when requested); l2 and gemm only where
    M <= DECODE_REGIME_MAX_M (256)."""
    return tuple(r for r in requested if r == "hbm" or m <= DECODE_REGIME_MAX_M)


def plan(
    suite_names: list[str],
    variant: Variant,
    device: str,
    quick: bool,
    regimes: tuple[str, ...] | None,
) -> list[Part]:
    """One part per suite in one variant (the command line without --matrix)."""
    return [
        Part(s, variant, tuple(shapes(s, device, quick)), regimes or default_regimes(s, device))
        for s in suite_names
    ]


def parse_sizes(value: str | None, flag: str) -> tuple[int, ...] | None:
    """--n / --m: a comma list of positive integers, or None when the flag is absent."""
    if value is None:
        return None
    sizes = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        if not item.isdigit() or int(item) <= 0:
            raise ValueError(f"{flag}: expected a comma list of positive integers, got {value!r}")
        sizes.append(int(item))
    if not sizes:
        raise ValueError(f"{flag}: expected a comma list of positive integers, got {value!r}")
    return tuple(dict.fromkeys(sizes))


def restrict(
    parts: list[Part], ns: tuple[int, ...] | None, ms: tuple[int, ...] | None
) -> list[Part]:
    """The parts' shapes whose N is in `ns` and M in `ms` (None: any), parts left empty dropped:
    a run over a few shapes of the suites (`--n`, `--m`). ValueError when nothing is left, naming
    the sizes the parts have."""
    kept = []
    for part in parts:
        shapes = tuple(
            (n, m) for n, m in part.shapes if (ns is None or n in ns) and (ms is None or m in ms)
        )
        if shapes:
            kept.append(replace(part, shapes=shapes))
    if not kept:
        have_n = sorted({n for p in parts for n, _ in p.shapes})
        have_m = sorted({m for p in parts for _, m in p.shapes})
        given = " ".join(
            f"{flag} {','.join(map(str, sizes))}"
            for flag, sizes in (("--n", ns), ("--m", ms))
            if sizes is not None
        )
        raise ValueError(
            f"{given} leaves no shape of the selected suites (their N: {have_n}; their M: {have_m})"
        )
    return kept


BF16 = Variant("bf16", "bf16")
MATRIX_VARIANTS = (
    Variant("fp16", "fp16"),
    Variant("bf16", "fp32"),  # bf16 with a float32 weight (Gemma- and Quack-style)
    Variant("bf16", "bf16", pad=64),  # padded rows: row stride N + 64
)

# The step-6 matrix (`--matrix`), on a GPU: bf16 over decode (three regimes), mid, large and long
# rows (step 7), then each variant on a few shapes, both ops everywhere. Sized to fit in about 8
# minutes on an H200 with every peer, their JIT compiles included (without long rows: 290 s;
# long rows alone: 165 s); change it here, nowhere else.
_MATRIX_GPU = (
    ("decode", BF16, [4096, 7168, 8192], _pow2(1, 256), REGIMES),
    ("mid", BF16, [4096, 7168, 8192], [1024, 2048], ("hbm",)),
    ("large", BF16, [4096, 6144, 7168, 8192, 16384], [4096, 16384, 65536], ("hbm",)),
    ("large_n", BF16, _pow2(16384, 262144), [1, 16, 256, 1024, 4096], ("hbm",)),
    *(("variants", v, [7168, 8192], [1, 256, 4096, 16384], ("hbm",)) for v in MATRIX_VARIANTS),
)


def matrix(device: str, quick: bool) -> list[Part]:
    """The --matrix plan. With --quick or on the CPU: the same parts on that mode's shapes of each
    suite (CPU: hbm only, see default_regimes)."""
    out = []
    for suite, variant, ns, ms, regimes in _MATRIX_GPU:
        if device == "cuda" and not quick:
            pairs = tuple((n, m) for n in ns for m in ms)
        else:
            pairs = tuple(shapes(suite, device, quick))
        out.append(Part(suite, variant, pairs, regimes if device == "cuda" else ("hbm",)))
    return out
