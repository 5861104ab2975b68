"""A representative subset of oink's CUDA launches for compute-sanitizer: every kernel variant
(registers with 1/2/4 chunks, two-pass, streamed), vector and element-wise I/O, both ops, every
dtype and weight combination, padded and unaligned rows, with and without PDL. Exits non-zero if
any result is wrong.

Results are checked on the CPU so that the only kernels racecheck sees are oink's and copies:
PyTorch's own CUDA reduction (the float64 mean of a GPU-side reference) reports shared-memory
hazards under racecheck (16 on 2026-11-30, all inside at::native::reduce_kernel)."""

import argparse
import sys

import torch

import oink
from oink.testing import DTYPE_COMBOS, padded_rows, rmsnorm_reference, schedule_test_rows

CASES_N = [7, 64, 1024, 4096, 16384, 32768, 65536, 131072]  # 1, 2, 4 chunks/thread; two-pass
STREAMED_N = [64, 4096, 16384, 32768]  # persistent CTAs: 128 / 256 / 1024 threads; 4 chunks


def cases(dtype):
    """(M, N, pad, offset): 5 rows of every N, aligned and not; streamed batches, contiguous and
    with padded (still aligned) rows."""
    for n in CASES_N:
        for pad, offset in [(0, 0), (3, 1)]:
            yield 5, n, pad, offset
    for n in STREAMED_N:
        for pad in (0, 64):
            yield schedule_test_rows(n, dtype), n, pad, 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--pdl",
        choices=("both", "on", "off"),
        default="both",
        help="launch with programmatic dependent launch on, off, or both in turn (default both). "
        "racecheck needs one: PDL overlaps kernels, never the shared memory of one CTA",
    )
    pdl_settings = {"both": (True, False), "on": (True,), "off": (False,)}[parser.parse_args().pdl]
    g = torch.Generator().manual_seed(7)
    failures = 0
    for pdl in pdl_settings:
        oink.set_pdl(pdl)
        for dtype, wdtype in DTYPE_COMBOS:
            for m, n, pad, offset in cases(dtype):
                failures += check(m, n, pad, offset, dtype, wdtype, g)
    torch.cuda.synchronize()
    print(f"sanitize_cases: {failures} wrong results")
    return 1 if failures else 0


def check(m, n, pad, offset, dtype, wdtype, g) -> int:
    """rmsnorm against float64 (on the CPU), and the fused op's bitwise invariant."""
    failures = 0
    x = padded_rows(m, n, dtype, "cuda", pad=pad, offset=offset, generator=g)
    w = None if wdtype is None else torch.randn(n, generator=g).to(wdtype).cuda()
    y = oink.rmsnorm(x, w, 1e-6).cpu()
    ref = rmsnorm_reference(x.cpu(), None if w is None else w.cpu(), 1e-6)
    failures += int(not torch.allclose(y.double(), ref, rtol=2e-2, atol=1e-2))
    if w is not None:
        r = padded_rows(m, n, dtype, "cuda", pad=pad, offset=0, generator=g)
        oink.fused_add_rms_norm(x, r, w, 1e-6)
        again = oink.rmsnorm(r, w, 1e-6)
        failures += int(not torch.equal(x.cpu(), again.cpu()))
    return failures


if __name__ == "__main__":
    sys.exit(main())
