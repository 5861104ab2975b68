"""Shape lists: (N, M) pairs per suite, for the GPU and for the smaller CPU mode (issue 3)."""

from __future__ import annotations

SUITES = ("decode", "mid", "dsv3", "large", "large_n", "quack", "sweep")


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
    # Issue 4's "large N" regime: rows too long for one CTA's registers, M >= 1024.
    "large_n": (_pow2(32768, 262144), [1024, 4096]),
    # Quack's published suite: N = 4096, M = 8K ... 512K.
    "quack": ([4096], _pow2(8192, 524288)),
    # The scaling picture: N = 1024 ... 262144 at a few M.
    "sweep": (_pow2(1024, 262144), [1, 256, 4096]),
}

_GPU_QUICK = {
    "decode": ([4096, 7168], [1, 16, 256]),
    "mid": ([7168], [128, 1024]),
    "dsv3": ([7168], [4096, 65536]),
    "large": ([4096, 16384], [4096, 65536]),
    "large_n": ([32768, 262144], [1024]),
    "quack": ([4096], [8192, 131072]),
    "sweep": ([1024, 16384, 262144], [1, 4096]),
}

# CPU mode: same suites, shapes scaled down so a 2-core machine finishes in seconds.
_CPU = {
    "decode": ([1024, 4096], _pow2(1, 64)),
    "mid": ([4096], [128, 256]),
    "dsv3": ([6144, 7168, 8192], [64, 256]),
    "large": ([4096, 16384], [256]),
    "large_n": ([32768, 65536], [16]),
    "quack": ([4096], _pow2(256, 2048)),
    "sweep": (_pow2(1024, 32768), [1, 64]),
}

_CPU_QUICK = {
    "decode": ([1024, 4096], [1, 8, 64]),
    "mid": ([4096], [128]),
    "dsv3": ([7168], [64]),
    "large": ([16384], [64]),
    "large_n": ([32768], [8]),
    "quack": ([4096], [256, 1024]),
    "sweep": ([1024, 8192, 32768], [1, 64]),
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
