"""A representative subset of oink's CUDA launches for compute-sanitizer: every kernel variant
(registers with 1/2/4 chunks, two-pass), vector and element-wise I/O, both ops, every dtype and
weight combination, padded and unaligned rows. Exits non-zero if any result is wrong.

Results are checked on the CPU so that the only kernels racecheck sees are oink's and copies:
PyTorch's own CUDA reduction (the float64 mean of a GPU-side reference) reports shared-memory
hazards under racecheck (16 on 2026-11-30, all inside at::native::reduce_kernel)."""

import sys

import torch

import oink
from oink.testing import DTYPE_COMBOS, padded_rows, rmsnorm_reference

CASES_N = [7, 64, 1024, 4096, 16384, 32768, 65536, 131072]  # 1, 2, 4 chunks/thread; two-pass


def main() -> int:
    g = torch.Generator().manual_seed(7)
    failures = 0
    for dtype, wdtype in DTYPE_COMBOS:
        for n in CASES_N:
            for pad, offset in [(0, 0), (3, 1)]:
                x = padded_rows(5, n, dtype, "cuda", pad=pad, offset=offset, generator=g)
                w = None if wdtype is None else torch.randn(n, generator=g).to(wdtype).cuda()
                y = oink.rmsnorm(x, w, 1e-6).cpu()
                ref = rmsnorm_reference(x.cpu(), None if w is None else w.cpu(), 1e-6)
                failures += int(not torch.allclose(y.double(), ref, rtol=2e-2, atol=1e-2))
                if w is not None:
                    r = padded_rows(5, n, dtype, "cuda", pad=pad, offset=0, generator=g)
                    oink.fused_add_rms_norm(x, r, w, 1e-6)
                    again = oink.rmsnorm(r, w, 1e-6)
                    failures += int(not torch.equal(x.cpu(), again.cpu()))
    torch.cuda.synchronize()
    print(f"sanitize_cases: {failures} wrong results")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
