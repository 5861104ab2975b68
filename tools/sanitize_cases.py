"""A representative subset of oink's CUDA launches for compute-sanitizer: every kernel variant
(registers with 1/2 chunks, two-pass, streamed, tile, cluster), vector and element-wise I/O, both
ops, every dtype and weight combination, padded and unaligned rows, the layouts of
docs/contract.md (QKV head views, transposed views, rmsnorm.out into a head view, the fused op on
independent views, no weight), with and without PDL; and the training ops (--ops):
rmsnorm_forward in every forward schedule, layernorm_forward and layernorm_backward, and
rmsnorm_backward in every variant of its kernel; softmax and cross-entropy (--ops rows) in both
schedules, vector and element-wise, in place and not, and the loss's count and reduction.
Exits non-zero if any result is wrong.

Results are checked on the CPU so that the only kernels racecheck sees are oink's and copies:
PyTorch's own CUDA reduction (the float64 mean of a GPU-side reference) reports shared-memory
hazards under racecheck (16 on 2026-11-30, all inside at::native::reduce_kernel)."""

import argparse
import sys
import time
from pathlib import Path

import torch

import oink

# The tests' shapes and float64 references.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from sweep import (  # noqa: E402
    DTYPE_COMBOS,
    DTYPES,
    padded_rows,
    rmsnorm_reference,
    schedule_test_rows,
)

# Registers with 1 and 2 chunks per thread; rows of 2, 4, 8 and 16 slices: clusters of that many
# CTAs (16: the non-portable size) where aligned, two_pass where not; 17 and 32 slices: two per
# CTA (the last of 9 CTAs holding one).
CASES_N = [7, 64, 1024, 4096, 16384, 32768, 65536, 131072, 262144, 278528, 524288]
# Large batches: registers (64: 16 rows per CTA), tile (4096: 2 rows per CTA, rmsnorm; 6144 and
# 16384: both ops, 128 and 256 threads), a cluster per row (65536: one slice a CTA for rmsnorm,
# two for the fused op's batch of 16 slices per SM and more); with a float32 weight on 16-bit
# rows, rmsnorm streams at 1024 (persistent CTAs of 128 threads, 2 rows each), and the tile and
# the cluster hold that weight in registers from 4096 on (rmsnorm's cluster batch at 65536, past
# a wave, holds half of it and reads the rest at the store; its 5 rows hold it whole).
LARGE_N = [64, 1024, 4096, 6144, 16384, 65536]
# rmsnorm_backward: rows shorter than a warp (7, 64), one and two chunks a thread with the next
# row prefetched (1000 element-wise, 4096), four chunks (12000, 16384; float32 8192), element-wise
# rows of 2 chunks and long unaligned rows copied into aligned ones (padded cases); M = 70: nine
# weight-gradient blocks of 8 rows, the last one short (6 rows). Past one slice a cluster per
# block (float32: half of N): 3 slices, the last one short (40000), and 16 (262144). Looped: N not
# whole chunks past 2 chunks a thread (20001), and past the cluster (300000; padded: element-wise).
BACKWARD_N = [7, 64, 1000, 4096, 8192, 12000, 16384, 20001, 40000, 262144, 300000]
# layernorm: rows shorter than a warp, 1 and 2 chunks a lane, element-wise rows (1001), the
# longest rows of one slice; the tile at 2048 rows of 2048 (one warp a row) and of 4096. Past one
# slice the cluster, forward and backward (float32: half of N): 3 slices, the last one short
# (40000), and 16 (262144), aligned rows only.
LAYERNORM_N = [7, 64, 1001, 2048, 4096, 8192, 16384, 40000, 262144]
# layernorm_backward looped (float32: half of N): unaligned rows of a few slices, and past 16.
LAYERNORM_LOOPED_N = [20001, 300000]


def cases(dtype, long_only=False):
    """(M, N, pad, offset): 5 rows of every N, aligned and not; large batches, contiguous and
    with padded (still aligned) rows. long_only: the rows of several slices (cluster, two_pass)."""
    several = 16384 * 2 // dtype.itemsize  # elements of one slice (kSliceChunks 16-byte chunks)
    for n in CASES_N:
        for pad, offset in [(0, 0), (3, 1)]:
            if n > several or not long_only:
                yield 5, n, pad, offset
    for n in LARGE_N:
        for pad in (0, 64):
            if n > several or not long_only:
                yield schedule_test_rows(n, dtype), n, pad, 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--pdl",
        choices=("both", "on", "off"),
        default="both",
        help="launch with programmatic dependent launch on, off, or both in turn (default both). "
        "racecheck needs one: PDL overlaps kernels, never the shared memory of one CTA",
    )
    parser.add_argument(
        "--dtypes",
        choices=("all", "sizes"),
        default="all",
        help="every x dtype (default), or one per element size (bfloat16, float32), each with "
        "every weight: racecheck and synccheck look at shared-memory layouts and barriers, which "
        "depend on the element sizes only (float16 and bfloat16 share every layout)",
    )
    parser.add_argument(
        "--ops",
        choices=("all", "inference", "long", "training", "backward", "layernorm", "rows"),
        default="all",
        help="rmsnorm and the fused op (inference); the same on rows of several slices only "
        "(long: the cluster and two-pass kernels, after a change to those alone); "
        "rmsnorm_forward, rmsnorm_backward and "
        "layernorm's forward and backward (training); the backward kernels alone (backward: "
        "rmsnorm_backward, and layernorm's, whose forward runs for its statistics: their shared "
        "memory and barriers are the only new ones, so racecheck and synccheck need no more); "
        "layernorm's forward and backward alone (layernorm: after a change to its kernels only, "
        "racecheck over every training op takes minutes); softmax and cross-entropy alone "
        "(rows); or all (default)",
    )
    args = parser.parse_args(argv)
    start = time.monotonic()

    def progress(what: str, failed: int) -> None:
        # One line a case, flushed: a run cut short by a time limit shows how far it got (under
        # racecheck a case of long rows takes seconds).
        verdict = "ok" if not failed else f"{failed} failed"
        print(f"sanitize_cases: {time.monotonic() - start:6.1f} s {what}: {verdict}", flush=True)

    pdl_settings = {"both": (True, False), "on": (True,), "off": (False,)}[args.pdl]
    x_dtypes = DTYPES if args.dtypes == "all" else [torch.bfloat16, torch.float32]
    g = torch.Generator().manual_seed(7)
    failures = 0
    for dtype, wdtype in DTYPE_COMBOS:
        if dtype not in x_dtypes:
            continue
        if args.ops == "layernorm":
            failed = check_layernorm(dtype, wdtype, g)
        elif args.ops in ("all", "training", "backward"):
            failed = check_training(dtype, wdtype, g, forward=args.ops != "backward")
        else:
            continue
        progress(f"{args.ops} ops, x {dtype}, weight {wdtype}", failed)
        failures += failed
    for dtype in x_dtypes if args.ops in ("all", "rows") else ():
        failed = check_rows(dtype, g)
        progress(f"softmax and cross-entropy, {dtype}", failed)
        failures += failed
    for pdl in pdl_settings if args.ops in ("all", "inference", "long") else ():
        oink.set_pdl(pdl)
        for dtype, wdtype in DTYPE_COMBOS:
            if dtype not in x_dtypes:
                continue
            for m, n, pad, offset in cases(dtype, long_only=args.ops == "long"):
                failed = check(m, n, pad, offset, dtype, wdtype, g)
                what = f"pdl={int(pdl)} x {dtype}, weight {wdtype}, M={m} N={n} pad={pad}"
                progress(f"{what} offset={offset}", failed)
                failures += failed
        # every weight dtype with every x dtype, on the new layouts (rows of one slice)
        for dtype in x_dtypes if args.ops != "long" else ():
            for wdtype in (None, *DTYPES):
                for tokens in (3, 4097):
                    failed = check_views(tokens, dtype, wdtype, g)
                    progress(f"pdl={int(pdl)} views of {tokens} tokens, {dtype}, {wdtype}", failed)
                    failures += failed
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


def check_training(dtype, wdtype, g, forward: bool) -> int:
    """rmsnorm_forward (out as rmsnorm's, bit for bit) in every forward schedule, and
    rmsnorm_backward's dx and dweight against the CPU kernel's (float64 sums), loosely: the
    tests hold the bounds, this run is for the sanitizer."""
    failures = 0
    for m, n, pad, offset in cases(dtype) if forward else ():
        x = padded_rows(m, n, dtype, "cuda", pad=pad, offset=offset, generator=g)
        w = None if wdtype is None else torch.randn(n, generator=g).to(wdtype).cuda()
        y, _ = oink.rmsnorm_forward(x, w, 1e-6)
        failures += int(not torch.equal(y, oink.rmsnorm(x, w, 1e-6)))
    # LayerNorm's forward and backward: its backward kernel's warp-sum buffers and barriers
    # (two sums a row) are its own, so it runs under --ops backward too.
    failures += check_layernorm(dtype, wdtype, g)
    for n in BACKWARD_N:
        if dtype == torch.float32 and n > 16384:
            n //= 2  # float32 slices are 8192 elements
        for m, pad, offset in [(70, 0, 0), (70, 3, 1), (0, 0, 0), (1, 0, 0)]:
            x = padded_rows(m, n, dtype, "cuda", pad=pad, offset=offset, generator=g)
            dy = padded_rows(m, n, dtype, "cuda", pad=pad, generator=g)
            w = None if wdtype is None else torch.randn(n, generator=g).to(wdtype).cuda()
            _, rstd = oink.rmsnorm_forward(x, w, 1e-6)
            dx, dw = oink.rmsnorm_backward(dy, x, w, rstd)
            w_cpu = None if w is None else w.cpu()
            ref_dx, ref_dw = oink.rmsnorm_backward(dy.cpu(), x.cpu(), w_cpu, rstd.cpu())
            scale = ref_dx.double().abs().max().item() if m > 0 else 1.0
            failures += int(not torch.allclose(dx.cpu().double(), ref_dx.double(), rtol=2e-2,
                                               atol=1e-2 * scale))  # fmt: skip
            if w is not None:
                dw_scale = ref_dw.double().abs().max().item()
                failures += int(not torch.allclose(dw.cpu().double(), ref_dw.double(), rtol=2e-2,
                                                   atol=1e-2 * dw_scale))  # fmt: skip
    return failures


def check_layernorm(dtype, wdtype, g) -> int:
    """layernorm and layernorm_forward (the registers schedule, 1 and 2 chunks a lane, vector
    and element-wise I/O, with and without weight and bias; the tile from a wave of row groups
    up, N=4096 at M=2048; the cluster past one slice) and layernorm_backward against the CPU's
    float64 kernels, loosely."""
    failures = 0
    for n in LAYERNORM_N:
        long = n > 16384
        if dtype == torch.float32 and long:
            n //= 2
        elif dtype == torch.float32 and n > 8192:
            continue
        # 70 rows are nine weight-gradient blocks; 2048 rows of 2048 or 4096 take the tile
        # (every dtype: 3 row groups per SM of an H200 from 1584 rows at 4096). Long rows: padded
        # by whole chunks (a cluster moves 16-byte vectors).
        shapes = [(5, 0, 0), (5, 3, 1), (70, 0, 0)] + ([(2048, 0, 0)] if n in (2048, 4096) else [])
        if long:
            shapes = [(5, 0, 0), (5, 16, 0), (70, 0, 0)]
        for m, pad, offset in shapes:
            x = padded_rows(m, n, dtype, "cuda", pad=pad, offset=offset, generator=g)
            w = None if wdtype is None else torch.randn(n, generator=g).to(wdtype).cuda()
            b = None if wdtype is None else torch.randn(n, generator=g).to(wdtype).cuda()
            y, mean, rstd = oink.layernorm_forward(x, w, b, 1e-5)
            failures += int(not torch.equal(y, oink.layernorm(x, w, b, 1e-5)))
            w_cpu, b_cpu = (None if t is None else t.cpu() for t in (w, b))
            ref, ref_mean, ref_rstd = oink.layernorm_forward(x.cpu(), w_cpu, b_cpu, 1e-5)
            failures += int(not torch.allclose(y.cpu().double(), ref.double(), rtol=2e-2,
                                               atol=2e-2))  # fmt: skip
            failures += int(not torch.allclose(mean.cpu(), ref_mean, rtol=1e-4, atol=1e-5))
            failures += int(not torch.allclose(rstd.cpu(), ref_rstd, rtol=1e-4))
            dy = padded_rows(m, n, dtype, "cuda", pad=pad, generator=g)
            grads = oink.layernorm_backward(dy, x, w, b, mean, rstd)
            cpu = [None if t is None else t.cpu() for t in (dy, x, w, b, mean, rstd)]
            for got, ref in zip(grads, oink.layernorm_backward(*cpu), strict=True):
                if ref is not None:
                    scale = ref.double().abs().max().item() if ref.numel() else 1.0
                    failures += int(not torch.allclose(got.cpu().double(), ref.double(),
                                                       rtol=2e-2, atol=1e-2 * scale))  # fmt: skip
    # The looped backward (past the cluster's 16 slices, or unaligned past 2 chunks a thread),
    # whose forward is refused on CUDA: the statistics come from the CPU's forward.
    for n in LAYERNORM_LOOPED_N:
        n = n // 2 if dtype == torch.float32 else n
        x = padded_rows(5, n, dtype, "cuda", pad=3, offset=1, generator=g)
        dy = padded_rows(5, n, dtype, "cuda", generator=g)
        w, b = (None if wdtype is None else torch.randn(n, generator=g).to(wdtype) for _ in "wb")
        _, mean, rstd = oink.layernorm_forward(x.cpu(), w, b, 1e-5)
        cpu = oink.layernorm_backward(dy.cpu(), x.cpu(), w, b, mean, rstd)
        on_gpu = [None if t is None else t.cuda() for t in (w, b, mean, rstd)]
        for got, ref in zip(oink.layernorm_backward(dy, x, *on_gpu), cpu, strict=True):
            if ref is not None:
                scale = ref.double().abs().max().item()
                failures += int(not torch.allclose(got.cpu().double(), ref.double(),
                                                   rtol=2e-2, atol=1e-2 * scale))  # fmt: skip
    return failures


def check_rows(dtype, g) -> int:
    """softmax, softmax_backward and cross-entropy (forward, fused in place, backward in place)
    on rows of each schedule: registers, cluster (past registers: CTAs of 256 threads, then of
    512 past 8 slices) and looped (longer, and the loss-only cross-entropy), each vector and
    element-wise, a target ignored and one out of range; against float64, loosely (the launches
    are the point). The references run on the CPU: racecheck reported hazards inside PyTorch's
    own float64 sum kernel (at::native::reduce_kernel) on the GPU, none in oink's."""
    failed = 0
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    cases = ((65, 100), (3, 4096), (3, 32776), (2, 50257), (2, 200000), (2, 262152), (2, 262147))
    for m, n in cases:
        x = (torch.randn(m, n, generator=g) * 3).to(dtype).cuda()
        y = oink.softmax(x)
        x64 = x.cpu().double()
        ref = torch.softmax(x64, -1)
        failed += int(not torch.allclose(y.cpu().double(), ref, rtol=tol, atol=tol / n))
        dy = torch.randn(m, n, generator=g).to(dtype).cuda()
        dx = oink.softmax_backward(dy, y)
        y64, dy64 = y.cpu().double(), dy.cpu().double()
        ref = y64 * (dy64 - (dy64 * y64).sum(-1, keepdim=True))
        failed += int(not torch.allclose(dx.cpu().double(), ref, rtol=tol, atol=tol / n))
        target = torch.randint(0, n, (m,), generator=g)
        target[0], target[-1] = -100, n + 5
        target = target.cuda()
        loss, lse = torch.ops.oink.cross_entropy_forward.default(x, target, -100, 0.1, 0.0)
        fused = x.clone()
        scale = torch.ones(1, device="cuda")
        torch.ops.oink.cross_entropy_forward_backward_.default(fused, target, scale, -100, 0.1, 0.0)
        grad = x.clone()
        torch.ops.oink.cross_entropy_backward_.default(
            torch.ones(m, device="cuda"), grad, target, lse, -100, 0.1, 0.0
        )
        ref_loss = torch.nn.functional.cross_entropy(
            x64[1:-1], target[1:-1].cpu(), label_smoothing=0.1, reduction="none"
        )
        failed += int(not torch.allclose(loss[1:-1].cpu().double(), ref_loss, rtol=1e-5, atol=1e-5))
        failed += int(not (loss[0] == 0 and torch.isnan(loss[-1])))
        fused64, grad64 = fused.cpu().double(), grad.cpu().double()
        same = torch.allclose(fused64, grad64, rtol=tol, atol=tol / n, equal_nan=True)
        failed += int(not same)
        # The scalars around them (one CTA each) and a scale in the rows' dtype.
        count = torch.ops.oink.cross_entropy_count.default(target, -100, torch.float32)
        failed += int(count[0].item() != m - 1)
        mean = torch.ops.oink.reduce_loss.default(loss[:-1].contiguous(), count, torch.float32)
        want = loss[:-1].cpu().double().sum() / (m - 1)
        failed += int(not torch.allclose(mean.cpu().double(), want, rtol=1e-6))
        torch.ops.oink.scale_gradient_.default(fused, torch.full((), 0.5, dtype=dtype).cuda())
        same = torch.allclose(
            fused.cpu().double(), fused64 * 0.5, rtol=tol, atol=tol / n, equal_nan=True
        )
        failed += int(not same)
    return failed


def check_views(tokens, dtype, wdtype, g) -> int:
    """Head views of a QKV buffer ([T, H, D], aligned and one element off), a transposed view,
    rmsnorm.out into a head view of another buffer, and the fused op on a head view (x) and a
    transposed view (residual), with a weight of `wdtype` or none."""
    failures = 0
    heads, kv, d = 4, 2, 128
    w = None if wdtype is None else torch.randn(d, generator=g).to(wdtype).cuda()
    w_cpu = None if w is None else w.cpu()
    flat = torch.randn(tokens * (heads + 2 * kv) * d + 1, generator=g).to(dtype).cuda()
    for start in (0, 1):
        qkv = flat[start : start + tokens * (heads + 2 * kv) * d].view(tokens, -1)
        q = qkv[:, : heads * d].view(tokens, heads, d)
        y = oink.rmsnorm(q, w, 1e-6).cpu()
        failures += int(not torch.allclose(y.double(), rmsnorm_reference(q.cpu(), w_cpu, 1e-6),
                                           rtol=2e-2, atol=1e-2))  # fmt: skip
        out_buffer = torch.empty(tokens, (heads + 2) * d, dtype=dtype, device="cuda")
        out = out_buffer[:, d : (heads + 1) * d].view(tokens, heads, d)
        oink.rmsnorm(q, w, 1e-6, out=out)
        failures += int(not torch.equal(out.cpu(), y))
    bshd = torch.randn(2, tokens, heads, d, generator=g).to(dtype).cuda()
    t = bshd.transpose(1, 2)  # [B, H, S, D]
    failures += int(
        not torch.equal(oink.rmsnorm(t, w, 1e-6), oink.rmsnorm(t.contiguous(), w, 1e-6))
    )
    x = (
        flat[: tokens * (heads + 2 * kv) * d]
        .view(tokens, -1)[:, : heads * d]
        .view(tokens, heads, d)
    )
    r = torch.randn(heads, tokens, d, generator=g).to(dtype).cuda().transpose(0, 1)
    oink.fused_add_rms_norm(x, r, w, 1e-6)
    failures += int(not torch.equal(x.cpu(), oink.rmsnorm(r, w, 1e-6).cpu()))
    return failures


if __name__ == "__main__":
    sys.exit(main())
