"""LayerNorm: the forward against float64 and its layouts and batch invariance,
layernorm_forward's statistics, layernorm_backward against float64, gradcheck, autograd,
torch.compile, opcheck, the determinism of dweight and dbias, and the errors, on the CPU; the
forward and backward on CUDA likewise."""

import pytest
import torch
from torch.library import opcheck

import oink

from conftest import requires_cuda
from numerics import max_block_rows
from sweep import padded_rows, ulp

EPS = 1e-5
F = torch.nn.functional

DTYPES = [
    (torch.bfloat16, torch.bfloat16),
    (torch.float16, torch.float16),
    (torch.float32, torch.float32),
    (torch.bfloat16, torch.float32),
]


def dtype_id(d):
    return str(d).removeprefix("torch.")


def make(m, n, dtype, wdtype, gen):
    x = (torch.randn(m, n, generator=gen) * 2 + 0.5).to(dtype)
    w = (1 + 0.5 * torch.randn(n, generator=gen)).to(wdtype)
    b = torch.randn(n, generator=gen).to(wdtype)
    return x, w, b


def stats64(x, eps=EPS):
    xd = x.double()
    mean = xd.mean(-1)
    return mean, torch.rsqrt(xd.var(-1, unbiased=False) + eps)


@pytest.mark.parametrize("dtype,wdtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("n", [1, 64, 1000, 4096])
def test_forward_against_float64(dtype, wdtype, n, gen):
    x, w, b = make(37, n, dtype, wdtype, gen)
    y = oink.layernorm(x, w, b, EPS)
    assert y.dtype == dtype and y.shape == x.shape
    ref = F.layer_norm(x.double(), (n,), w.double(), b.double(), EPS)
    # One rounding of the float64 result (through float32), plus float32's own for 16-bit types.
    bound = ulp(ref, dtype) + 2.0**-22 * (ref.abs() + b.double().abs())
    assert ((y.double() - ref).abs() <= bound).all()
    y2, mean, rstd = oink.layernorm_forward(x, w, b, EPS)
    assert torch.equal(y, y2)
    exact_mean, exact_rstd = stats64(x)
    assert mean.dtype == rstd.dtype == torch.float32 and mean.shape == (37,)
    assert ((mean.double() - exact_mean).abs() <= ulp(exact_mean, torch.float32)).all()
    assert ((rstd.double() - exact_rstd).abs() <= ulp(exact_rstd, torch.float32)).all()


def test_without_weight_and_bias(gen):
    x, _, _ = make(9, 100, torch.float32, torch.float32, gen)
    ref = F.layer_norm(x.double(), (100,), None, None, EPS)
    torch.testing.assert_close(
        oink.layernorm(x, None, None, EPS).double(), ref, rtol=2e-7, atol=1e-7
    )


def test_layouts_and_batch_invariance(gen):
    """Padded rows and a 3-D view give the bits of the same rows contiguous, and a row alone the
    bits it has in the batch."""
    x = padded_rows(50, 256, torch.bfloat16, "cpu", pad=8, generator=gen)
    _, w, b = make(1, 256, torch.bfloat16, torch.bfloat16, gen)
    y = oink.layernorm(x, w, b, EPS)
    assert torch.equal(y, oink.layernorm(x.contiguous(), w, b, EPS))
    assert torch.equal(y[17], oink.layernorm(x[17:18].clone(), w, b, EPS)[0])
    view = x.view(5, 10, 256) if x.is_contiguous() else x.contiguous().view(5, 10, 256)
    assert torch.equal(
        oink.layernorm(view.transpose(0, 1), w, b, EPS).transpose(0, 1), y.view(5, 10, 256)
    )


@pytest.mark.parametrize("dtype,wdtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("n", [64, 1000])
def test_backward_against_float64(dtype, wdtype, n, gen):
    m = 41
    x, w, b = make(m, n, dtype, wdtype, gen)
    dy = torch.randn(m, n, generator=gen).to(dtype)
    _, mean, rstd = oink.layernorm_forward(x, w, b, EPS)
    dx, dw, db = oink.layernorm_backward(dy, x, w, b, mean, rstd)
    assert (dx.dtype, dw.dtype, db.dtype) == (dtype, wdtype, wdtype)
    xd = x.double().requires_grad_()
    wd, bd = w.double().requires_grad_(), b.double().requires_grad_()
    F.layer_norm(xd, (n,), wd, bd, EPS).backward(dy.double())
    # The saved float32 statistics carry a relative 2^-24 into every term; `scale` bounds the
    # terms' magnitudes.
    exact_mean, exact_rstd = stats64(x)
    xhat = (x.double() - exact_mean.unsqueeze(-1)) * exact_rstd.unsqueeze(-1)
    g = dy.double() * w.double()
    scale_dx = exact_rstd.unsqueeze(-1) * (
        g.abs()
        + g.abs().mean(-1, keepdim=True)
        + xhat.abs() * (g * xhat).abs().mean(-1, keepdim=True)
    )
    for got, ref, scale, dt in (
        (dx, xd.grad, scale_dx * xhat.abs().max(), dtype),
        (dw, wd.grad, (dy.double() * xhat).abs().sum(0) * 4, wdtype),
        (db, bd.grad, dy.double().abs().sum(0), wdtype),
    ):
        bound = ulp(ref, dt) + 2.0**-20 * scale
        assert ((got.double() - ref).abs() <= bound).all()


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_gradcheck_float64(affine, gen):
    x = torch.randn(3, 4, 48, generator=gen, dtype=torch.float64).requires_grad_()
    w = torch.randn(48, generator=gen, dtype=torch.float64).requires_grad_()
    b = torch.randn(48, generator=gen, dtype=torch.float64).requires_grad_()
    if affine:
        assert torch.autograd.gradcheck(lambda a, c, d: oink.layernorm(a, c, d, EPS), (x, w, b))
    else:
        assert torch.autograd.gradcheck(lambda a: oink.layernorm(a, None, None, EPS), (x,))
    # The statistics are outputs too: their gradients reach x.
    assert torch.autograd.gradcheck(lambda a: oink.layernorm_forward(a, w, b, EPS)[1:], (x,))


def test_gradcheck_padded_rows(gen):
    x = padded_rows(6, 40, torch.float64, "cpu", pad=3, generator=gen).requires_grad_()
    w = torch.randn(40, generator=gen, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, c: oink.layernorm(a, c, None, EPS), (x, w))


def test_weight_and_bias_grads_are_deterministic_across_thread_counts(gen):
    x, w, b = make(3000, 512, torch.bfloat16, torch.float32, gen)
    dy = torch.randn(3000, 512, generator=gen).to(torch.bfloat16)
    _, mean, rstd = oink.layernorm_forward(x, w, b, EPS)
    threads = torch.get_num_threads()
    results = []
    try:
        for t in (1, 2, 3):
            torch.set_num_threads(t)
            results.append(oink.layernorm_backward(dy, x, w, b, mean, rstd))
    finally:
        torch.set_num_threads(threads)
    for got in results[1:]:
        assert all(torch.equal(a, e) for a, e in zip(got, results[0], strict=True))


def test_empty_batch_gives_zero_grads():
    x, w, b = torch.empty(0, 64), torch.ones(64), torch.zeros(64)
    _, mean, rstd = oink.layernorm_forward(x, w, b, EPS)
    dx, dw, db = oink.layernorm_backward(torch.empty(0, 64), x, w, b, mean, rstd)
    assert dx.shape == (0, 64) and torch.equal(dw, torch.zeros(64)) and torch.equal(db, dw)


def test_autograd_and_compile_match(gen):
    def loss(x, w, b):
        return oink.layernorm(x, w, b, EPS).square().sum()

    x = torch.randn(16, 128, generator=gen).requires_grad_()
    w = torch.randn(128, generator=gen).requires_grad_()
    b = torch.randn(128, generator=gen).requires_grad_()
    torch.compile(loss, fullgraph=True)(x, w, b).backward()
    compiled = [t.grad.clone() for t in (x, w, b)]
    x.grad = w.grad = b.grad = None
    loss(x, w, b).backward()
    assert all(torch.equal(c, t.grad) for c, t in zip(compiled, (x, w, b), strict=True))
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x, w, b))
    F.layer_norm(x2, (128,), w2, b2, EPS).square().sum().backward()
    for mine, theirs in zip((x, w, b), (x2, w2, b2), strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-4, atol=1e-4)


def test_opcheck(gen):
    x = torch.randn(5, 64, generator=gen, dtype=torch.float64).requires_grad_()
    w = torch.randn(64, generator=gen, dtype=torch.float64).requires_grad_()
    b = torch.randn(64, generator=gen, dtype=torch.float64).requires_grad_()
    opcheck(torch.ops.oink.layernorm.default, (x.detach(), w.detach(), b.detach(), EPS))
    opcheck(torch.ops.oink.layernorm_forward.default, (x, w, b, EPS))
    _, mean, rstd = oink.layernorm_forward(x.detach(), w.detach(), b.detach(), EPS)
    dy = torch.randn(5, 64, generator=gen, dtype=torch.float64)
    args = (dy, x.detach(), w.detach(), b.detach(), mean, rstd)
    opcheck(torch.ops.oink.layernorm_backward.default, args)
    opcheck(torch.ops.oink.layernorm_backward.default, (dy, x.detach(), None, None, mean, rstd))


def expect_error(fn, *args, arg, expected):
    with pytest.raises((ValueError, RuntimeError)) as info:
        fn(*args)
    text = str(info.value)
    assert f"'{arg}'" in text, text
    assert expected in text, text


def test_bad_inputs_name_the_argument(gen):
    x, w, b = make(4, 64, torch.float32, torch.float32, gen)
    expect_error(oink.layernorm, x, w, torch.randn(63), EPS, arg="bias", expected="N=64")
    expect_error(oink.layernorm, x, w, torch.ones(64, dtype=torch.int32), EPS, arg="bias",
                 expected="float16, bfloat16 or float32")  # fmt: skip
    expect_error(oink.layernorm, x, w, b, -1.0, arg="eps", expected=">= 0")
    _, mean, rstd = oink.layernorm_forward(x, w, b, EPS)
    dy = torch.randn(4, 64, generator=gen)
    back = oink.layernorm_backward
    expect_error(back, dy, x, w, b, mean[:2], rstd, arg="mean", expected="x.shape[:-1]")
    expect_error(back, dy, x, w, b, mean, rstd.double(), arg="rstd", expected="float32")
    expect_error(back, dy[:, :32], x, w, b, mean, rstd, arg="dy", expected="x's shape")


def test_errors_name_layernorm():
    with pytest.raises(ValueError, match="oink.layernorm: argument 'x'"):
        oink.layernorm(torch.ones(4, 8, dtype=torch.int32))


# --- CUDA: the forward (kernels/layernorm_row.cuh; the registers and tile schedules) ----------


def check_cuda_forward(x, w, b, eps=EPS):
    """layernorm and layernorm_forward on CUDA against float64: the same bits in both; the output
    within one rounding of the exact result plus the accumulation's rounding (float32 sums for
    16-bit rows: each lane's elements in order, then the tree, each term rounded at most
    `steps` times; float64 for float32 rows); mean and rstd within a float32 rounding plus that."""
    n = x.shape[-1]
    y = oink.layernorm(x, w, b, eps)
    y2, mean, rstd = oink.layernorm_forward(x, w, b, eps)
    assert torch.equal(y, y2), "layernorm and layernorm_forward run the same kernel arithmetic"
    assert y.dtype == x.dtype and y.shape == x.shape and y.device == x.device
    assert mean.dtype == rstd.dtype == torch.float32 and mean.shape == x.shape[:-1]
    xd = x.double().cpu()
    wd = torch.ones(n, dtype=torch.float64) if w is None else w.double().cpu()
    bd = torch.zeros(n, dtype=torch.float64) if b is None else b.double().cpu()
    ref = F.layer_norm(xd, (n,), wd, bd, eps)
    exact_mean, exact_rstd = stats64(xd, eps)
    steps = 2.0**-24 * (2 * n.bit_length() + 24) if x.dtype != torch.float32 else 2.0**-50
    mean_abs = xd.abs().mean(-1)
    mean_err = steps * mean_abs
    rstd_rel = steps * 4 + mean_err * exact_rstd  # the variance's sums, and a shifted mean
    xhat = (xd - exact_mean.unsqueeze(-1)) * exact_rstd.unsqueeze(-1)
    y_err = wd.abs() * (
        (mean_err * exact_rstd).unsqueeze(-1) + xhat.abs() * rstd_rel.unsqueeze(-1)
    ) + 2.0**-23 * (ref.abs() + bd.abs())
    assert ((y.double().cpu() - ref).abs() <= ulp(ref, x.dtype) + y_err).all()
    assert (
        (mean.double().cpu() - exact_mean).abs() <= ulp(exact_mean, torch.float32) + mean_err
    ).all()
    rstd_bound = ulp(exact_rstd, torch.float32) + rstd_rel * exact_rstd
    assert ((rstd.double().cpu() - exact_rstd).abs() <= rstd_bound).all()
    return y


CUDA_DTYPES = [
    # (x, weight, bias): weight and bias of any float dtype, each its own.
    (torch.bfloat16, torch.bfloat16, torch.bfloat16),
    (torch.float16, torch.float16, torch.float16),
    (torch.float32, torch.float32, torch.float32),
    (torch.bfloat16, torch.float32, torch.float32),
    (torch.float16, torch.bfloat16, torch.float32),
]


@requires_cuda
@pytest.mark.parametrize("dtypes", CUDA_DTYPES, ids=lambda d: "-".join(map(dtype_id, d)))
@pytest.mark.parametrize("n", [1, 7, 64, 1000, 1001, 4096, 7168, 8192, 16384])
@pytest.mark.parametrize("m", [1, 37, 2048])
def test_cuda_forward_against_float64(dtypes, n, m, gen):
    """1 and 2 chunks a lane, rows shorter than a warp, element-wise rows (N % 8 != 0), the
    longest rows of one slice; M from one row to many CTAs."""
    dtype, wdtype, bdtype = dtypes
    if dtype == torch.float32 and n > 8192:
        pytest.skip("float32 rows of one slice: N <= 8192")
    x, w, b = make(m, n, dtype, wdtype, gen)
    check_cuda_forward(x.cuda(), w.cuda(), b.to(bdtype).cuda())


@requires_cuda
@pytest.mark.parametrize("affine", ["none", "weight", "bias"])
def test_cuda_forward_without_weight_or_bias(affine, gen):
    x, w, b = make(19, 4096, torch.bfloat16, torch.bfloat16, gen)
    w = w.cuda() if affine == "weight" else None
    b = b.cuda() if affine == "bias" else None
    check_cuda_forward(x.cuda(), w, b)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=dtype_id)
@pytest.mark.parametrize("n,m", [(1001, 37), (4096, 1), (4096, 2048), (32768, 3)])
def test_cuda_parameters_in_x_dtype_are_read_as_given(dtype, n, m, gen):
    """A weight and bias in x's dtype reach the kernel as given: one kernel a call (no float32
    copies) and the bits of their float32 widening, in the registers kernel (element-wise rows
    too), the tile (N=4096, M=2048) and the cluster (two slices); with only one of them likewise.
    An unaligned one is widened (an aligned copy): long rows are not refused for it."""
    if n > 16384 and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("rows longer than one slice run in a thread block cluster")
    x, w, b = make(m, n, dtype, dtype, gen)
    x, w, b = x.cuda(), w.cuda(), b.cuda()
    unaligned = torch.empty(n + 1, dtype=dtype, device="cuda")[1:]
    unaligned.copy_(b)
    for pw, pb in ((w, b), (w, None), (None, b), (w, unaligned)):
        y = oink.layernorm(x, pw, pb, EPS)
        widened = [None if t is None else t.float() for t in (pw, pb)]
        assert torch.equal(y, oink.layernorm(x, *widened, EPS))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        oink.layernorm(x, w, b, EPS)
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert len(kernels) == 1, kernels


@requires_cuda
@pytest.mark.parametrize("n", [64, 4096, 5000])
def test_cuda_batch_invariance_and_layouts(n, gen):
    """A row's bits: the same alone, in a batch, in padded rows, at an unaligned address
    (element-wise I/O) and in a [T, H, D] head view (two leading dimensions)."""
    x = padded_rows(96, n, torch.bfloat16, "cuda", pad=8, generator=gen)
    _, w, b = make(1, n, torch.bfloat16, torch.float32, gen)
    w, b = w.cuda(), b.cuda()
    y = check_cuda_forward(x, w, b)
    dense = oink.layernorm(x.contiguous(), w, b, EPS)
    assert torch.equal(y, dense)
    for r in (0, 17, 95):
        assert torch.equal(y[r], oink.layernorm(x[r : r + 1].clone(), w, b, EPS)[0])
    flat = torch.empty(96 * n + 1, dtype=torch.bfloat16, device="cuda")
    unaligned = flat[1:].view(96, n)
    unaligned.copy_(x)
    assert torch.equal(oink.layernorm(unaligned, w, b, EPS), dense)
    heads = x.contiguous().view(24, 4, n)[:, 1:3]  # rows over two leading dimensions
    assert torch.equal(oink.layernorm(heads, w, b, EPS), dense.view(24, 4, n)[:, 1:3])


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=dtype_id)
@pytest.mark.parametrize("n", [2048, 4096, 5000, 7168, 16384])
def test_cuda_tile_and_registers_give_the_same_bits(dtype, n, gen):
    """A batch of several row groups per SM takes the tile, a few rows the registers kernel
    (explain says which); every row has the same bits either way, and both are right: rows of
    one warp (2048), of lanes with one chunk and with two (5000), of 1024 lanes (16384), and a
    last row group with an empty row (4095 rows)."""
    if dtype == torch.float32 and n > 8192:
        pytest.skip("float32 rows of one slice: N <= 8192")
    m, few = 4095, 32
    x, w, b = make(m, n, dtype, torch.float32, gen)
    x, w, b = x.cuda(), w.cuda(), b.cuda()
    assert oink.explain(x, w, op="layernorm", bias=b).variant == "tile"
    assert oink.explain(x[:few], w, op="layernorm", bias=b).variant == "row_in_registers"
    y = check_cuda_forward(x, w, b)
    _, mean, rstd = oink.layernorm_forward(x, w, b, EPS)
    for start in range(0, m, few):
        rows = slice(start, start + few)
        alone, mean_r, rstd_r = oink.layernorm_forward(x[rows], w, b, EPS)
        assert torch.equal(y[rows], alone), f"rows {start}.."
        assert torch.equal(mean[rows], mean_r) and torch.equal(rstd[rows], rstd_r)


@requires_cuda
def test_cuda_64bit_offsets(gen):
    """Rows beyond 2^31 elements from the base pointer (docs/contract.md), forward and backward."""
    n, ld = 4096, (1 << 31) + 64
    buffer = torch.empty(ld + n, dtype=torch.bfloat16, device="cuda")
    x = buffer.as_strided((2, n), (ld, 1))
    x.copy_(torch.randn(2, n, generator=gen).to(torch.bfloat16))
    _, w, b = make(1, n, torch.bfloat16, torch.float32, gen)
    check_cuda_forward(x, w.cuda(), b.cuda())
    dy = torch.randn(2, n, generator=gen).to(torch.bfloat16).cuda()
    check_cuda_backward(x, w.cuda(), b.cuda(), dy)


@requires_cuda
def test_cuda_statistics_of_empty_rows_and_batches():
    _, mean, rstd = oink.layernorm_forward(torch.empty(3, 0, device="cuda"))
    assert mean.isnan().all() and rstd.isnan().all()
    y, mean, rstd = oink.layernorm_forward(torch.empty(0, 4096, device="cuda"))
    assert y.shape == (0, 4096) and mean.shape == rstd.shape == (0,)


requires_clusters = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
    reason="rows longer than one slice run in a thread block cluster (compute capability 9.0)",
)


def slice_elems(dtype):
    return 8192 if dtype == torch.float32 else 16384


@requires_cuda
@requires_clusters
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=dtype_id)
@pytest.mark.parametrize("slices", [2, 5, 16, 32])
@pytest.mark.parametrize("m", [1, 70])
def test_cuda_long_rows_run_the_cluster(dtype, slices, m, gen):
    """Rows of several slices: a cluster of one CTA per slice (two past 16 slices), the mean's
    slice sums exchanged, then the squared deviations'. Against float64, the same bits in
    layernorm and layernorm_forward, and a row's bits alone as in its batch; N=5 slices less one
    chunk leaves the last slice short."""
    chunk = 16 // dtype.itemsize
    n = slices * slice_elems(dtype) - (chunk if slices == 5 else 0)
    x, w, b = make(m, n, dtype, torch.float32, gen)
    x, w, b = x.cuda(), w.cuda(), b.cuda()
    plan = oink.explain(x, w, op="layernorm", bias=b)
    assert plan.variant == "cluster" and plan.slices == slices
    y = check_cuda_forward(x, w, b)
    for r in {0, m - 1}:
        assert torch.equal(y[r], oink.layernorm(x[r : r + 1].clone(), w, b, EPS)[0])


@requires_cuda
def test_cuda_rows_no_kernel_takes_are_refused_clearly(gen):
    """Rows longer than one slice need the cluster: 16-byte vectors (an odd N, an unaligned x
    are refused), compute capability 9.0, at most 32 slices; the backward takes any N there."""
    clusters = torch.cuda.get_device_capability()[0] >= 9
    for dtype in (torch.bfloat16, torch.float32):
        limit = slice_elems(dtype)
        odd = torch.randn(2, limit + 1, device="cuda", dtype=dtype)
        expect_error(oink.layernorm, odd, None, None, EPS, arg="x", expected=f"N <= {limit}")
        flat = torch.randn(2 * (limit + 8) + 1, device="cuda", dtype=dtype)
        unaligned = flat[1:].view(2, limit + 8)
        expect_error(oink.layernorm, unaligned, None, None, EPS, arg="x", expected=f"N <= {limit}")
        if not clusters:
            aligned = torch.randn(2, limit + 8, device="cuda", dtype=dtype)
            expect_error(oink.layernorm, aligned, None, None, EPS, arg="x",
                         expected="compute capability")  # fmt: skip
            continue
        longest = 32 * limit
        x = torch.randn(2, longest + 8, device="cuda", dtype=dtype)
        expect_error(oink.layernorm, x, None, None, EPS, arg="x", expected=f"N <= {longest}")
        n = 16 * limit + 8  # the backward past 16 slices: looped (test_rmsnorm_backward.py)
        x = torch.randn(3, n, device="cuda", dtype=dtype)
        mean, rstd = torch.zeros(3, device="cuda"), torch.ones(3, device="cuda")
        dx = oink.layernorm_backward(torch.ones_like(x), x, None, None, mean, rstd)[0]
        assert dx.shape == x.shape and torch.isfinite(dx).all()  # no longer refused


# --- CUDA: the backward (kernels/norm_backward.cuh, LayerNormGrad) ------------------------------


def check_cuda_backward(x, w, b, dy, eps=EPS):
    """layernorm_backward on CUDA against float64 (the reference from the CPU): one rounding of
    the exact result, plus the saved float32 statistics' rounding carried into every term, plus
    the float32 sums' (16-bit rows: a lane's chunks and the tree for the row's two sums; for
    dweight and dbias a block's rows, then the blocks)."""
    n = x.shape[-1]
    _, mean, rstd = oink.layernorm_forward(x, w, b, eps)
    dx, dw, db = oink.layernorm_backward(dy, x, w, b, mean, rstd)
    assert dx.dtype == x.dtype and dx.shape == x.shape and dx.device == x.device
    acc = 2.0**-24 if x.dtype != torch.float32 else 2.0**-52
    xd, dyd = x.double().cpu(), dy.double().cpu()
    wd = None if w is None else w.double().cpu().requires_grad_()
    bd = None if b is None else b.double().cpu().requires_grad_()
    xr = xd.clone().requires_grad_()
    F.layer_norm(xr, (n,), wd, bd, eps).backward(dyd)
    exact_mean, exact_rstd = stats64(xd, eps)
    r = exact_rstd.unsqueeze(-1)
    xhat = (xd - exact_mean.unsqueeze(-1)) * r
    g = dyd * (1 if wd is None else wd.detach())
    # The saved mean's rounding shifts every xhat by up to `shift`.
    shift = (2.0**-24 + 64 * acc) * xd.abs().mean(-1, keepdim=True) * r
    stat_error = 2.0**-22 + 64 * acc  # relative: the saved rstd, the row's sums
    scale_dx = r * (
        g.abs()
        + g.abs().mean(-1, keepdim=True)
        + (xhat.abs() + shift) * (g * xhat).abs().mean(-1, keepdim=True)
    )
    bound = (
        ulp(xr.grad, x.dtype)
        + stat_error * scale_dx
        + r * shift * (g * xhat).abs().mean(-1, keepdim=True)
    )
    assert ((dx.double().cpu() - xr.grad).abs() <= bound).all()
    m = x.numel() // n
    blocks_error = (max_block_rows(m) + 256 + 4) * acc + 2.0**-22
    if w is None:
        assert dw is None
    else:
        assert dw.dtype == w.dtype and dw.shape == w.shape
        # Each term dy * xhat: the sums' error relative to it, and the saved mean's shift of
        # xhat in full (it is an absolute error, which no relative term covers where xhat is
        # small, as in a float32 row of 64 elements).
        scale = (dyd * xhat).abs().reshape(-1, n).sum(0)
        shifted = (dyd.abs() * shift).reshape(-1, n).sum(0)
        bound = ulp(wd.grad, w.dtype) + blocks_error * (scale + shifted) + shifted
        assert ((dw.double().cpu() - wd.grad).abs() <= bound).all()
    if b is None:
        assert db is None
    else:
        assert db.dtype == b.dtype and db.shape == b.shape
        bound = ulp(bd.grad, b.dtype) + blocks_error * dyd.abs().reshape(-1, n).sum(0)
        assert ((db.double().cpu() - bd.grad).abs() <= bound).all()
    return dx, dw, db


@requires_cuda
@pytest.mark.parametrize("dtypes", CUDA_DTYPES, ids=lambda d: "-".join(map(dtype_id, d)))
@pytest.mark.parametrize(
    "m,n",
    [(1, 64), (3, 8), (37, 1000), (37, 1001), (300, 4096), (9000, 2048), (5, 8192), (70, 16384)],
)
def test_cuda_backward_against_float64(dtypes, m, n, gen):
    """One and two chunks a lane with the next row prefetched, four (N=16384; float32 N=8192)
    reloaded from L1, element-wise rows, rows shorter than a warp, batches of many
    weight-gradient blocks."""
    dtype, wdtype, bdtype = dtypes
    if dtype == torch.float32 and n > 8192:
        n = 8192  # float32 rows of one slice: N <= 8192
    x, w, b = make(m, n, dtype, wdtype, gen)
    dy = torch.randn(m, n, generator=gen).to(dtype)
    check_cuda_backward(x.cuda(), w.cuda(), b.to(bdtype).cuda(), dy.cuda())


@requires_cuda
@requires_clusters
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=dtype_id)
@pytest.mark.parametrize("slices,m", [(2, 300), (5, 70), (16, 24)])
def test_cuda_backward_long_rows_run_the_cluster(dtype, slices, m, gen):
    """Rows of several slices: a cluster of one CTA per slice walks each weight-gradient block's
    rows, the two sums a row exchanged as a pair. Against float64; a row's dx alone as in its
    batch; dweight and dbias the same bits on every run."""
    n = slices * slice_elems(dtype)
    x, w, b = make(m, n, dtype, torch.float32, gen)
    dy = torch.randn(m, n, generator=gen).to(dtype)
    x, w, b, dy = x.cuda(), w.cuda(), b.cuda(), dy.cuda()
    dx, dw, db = check_cuda_backward(x, w, b, dy)
    _, mean, rstd = oink.layernorm_forward(x, w, b, EPS)
    one = oink.layernorm_backward(dy[-1:], x[-1:], w, b, mean[-1:], rstd[-1:])
    assert torch.equal(one[0][0], dx[-1])
    again = oink.layernorm_backward(dy, x, w, b, mean, rstd)
    assert torch.equal(again[0], dx) and torch.equal(again[1], dw) and torch.equal(again[2], db)


@requires_cuda
@pytest.mark.parametrize("affine", ["none", "weight", "bias"])
def test_cuda_backward_without_weight_or_bias(affine, gen):
    x, w, b = make(70, 1024, torch.bfloat16, torch.bfloat16, gen)
    dy = torch.randn(70, 1024, generator=gen).to(torch.bfloat16)
    w = w.cuda() if affine == "weight" else None
    b = b.cuda() if affine == "bias" else None
    check_cuda_backward(x.cuda(), w, b, dy.cuda())


@requires_cuda
def test_cuda_backward_is_batch_invariant_and_deterministic(gen):
    """dx of a row alone equals that row's in a batch; dweight and dbias have the same bits on
    every run (fixed blocks, no atomics); padded rows give the dense rows' gradients."""
    x, w, b = make(4000, 2048, torch.bfloat16, torch.float32, gen)
    dy = torch.randn(4000, 2048, generator=gen).to(torch.bfloat16)
    x, w, b, dy = x.cuda(), w.cuda(), b.cuda(), dy.cuda()
    _, mean, rstd = oink.layernorm_forward(x, w, b, EPS)
    dx, dw, db = oink.layernorm_backward(dy, x, w, b, mean, rstd)
    for r in (0, 1234, 3999):
        one = oink.layernorm_backward(dy[r : r + 1], x[r : r + 1], w, b, mean[r : r + 1],
                                      rstd[r : r + 1])  # fmt: skip
        assert torch.equal(one[0][0], dx[r])
    for _ in range(3):
        again = oink.layernorm_backward(dy, x, w, b, mean, rstd)
        assert torch.equal(again[1], dw) and torch.equal(again[2], db)
    xp = padded_rows(4000, 2048, torch.bfloat16, "cuda", pad=16, generator=gen)
    xp.copy_(x)
    dyp = padded_rows(4000, 2048, torch.bfloat16, "cuda", pad=8, generator=gen)
    dyp.copy_(dy)
    padded = oink.layernorm_backward(dyp, xp, w, b, mean, rstd)
    assert all(torch.equal(p, d) for p, d in zip(padded, (dx, dw, db), strict=True))


@requires_cuda
def test_cuda_backward_of_long_unaligned_rows(gen):
    """Rows of 4 chunks a lane that are not 16-byte aligned (x at an odd address, dy padded by
    3): the binding copies them into aligned tensors; the same bits as the aligned call."""
    n = 12000
    x, w, b = make(40, n, torch.bfloat16, torch.float32, gen)
    dy = torch.randn(40, n, generator=gen).to(torch.bfloat16)
    x, w, b, dy = x.cuda(), w.cuda(), b.cuda(), dy.cuda()
    _, mean, rstd = oink.layernorm_forward(x, w, b, EPS)
    aligned = check_cuda_backward(x, w, b, dy)
    flat = torch.empty(40 * n + 1, dtype=torch.bfloat16, device="cuda")
    xu = flat[1:].view(40, n)
    xu.copy_(x)
    dyu = padded_rows(40, n, torch.bfloat16, "cuda", pad=3, generator=gen)
    dyu.copy_(dy)
    unaligned = oink.layernorm_backward(dyu, xu, w, b, mean, rstd)
    assert all(torch.equal(u, a) for u, a in zip(unaligned, aligned, strict=True))


@requires_cuda
def test_cuda_autograd_and_compile_match_torch(gen):
    def loss(x, w, b):
        return oink.layernorm(x, w, b, EPS).square().sum()

    x = torch.randn(64, 512, generator=gen).cuda().requires_grad_()
    w = torch.randn(512, generator=gen).cuda().requires_grad_()
    b = torch.randn(512, generator=gen).cuda().requires_grad_()
    loss(x, w, b).backward()
    eager = [t.grad.clone() for t in (x, w, b)]
    x.grad = w.grad = b.grad = None
    torch.compile(loss, fullgraph=True)(x, w, b).backward()
    assert all(torch.equal(e, t.grad) for e, t in zip(eager, (x, w, b), strict=True))
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x, w, b))
    F.layer_norm(x2, (512,), w2, b2, EPS).square().sum().backward()
    for mine, theirs in zip((x, w, b), (x2, w2, b2), strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-4, atol=1e-4)
