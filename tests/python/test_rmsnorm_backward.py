"""RMSNorm's backward pass (CPU and CUDA): rmsnorm_forward's rstd, rmsnorm_backward's dx and
dweight against float64, gradcheck, autograd through oink.rmsnorm, torch.compile, opcheck,
the determinism of dweight, and the errors."""

import pytest
import torch
from torch.library import opcheck

import oink

from conftest import DEVICES, requires_cuda
from numerics import max_block_rows
from sweep import padded_rows, schedule_test_rows, ulp

EPS = 1e-6


def reference_grads(dy, x, weight, eps=EPS):
    """(dx, dweight) of float64 F.rms_norm at the values of x and weight, for dy."""
    xd = x.detach().double().requires_grad_()
    wd = None if weight is None else weight.detach().double().requires_grad_()
    y = torch.nn.functional.rms_norm(xd, (x.shape[-1],), wd, eps)
    y.backward(dy.double())
    return xd.grad, None if wd is None else wd.grad


def grad_bound(ref, scale, dtype, rstd_error):
    """One rounding to `dtype` of the float64 result, plus the saved rstd's relative error carried
    to every term (rstd appears cubed in one: 3x; `scale` is the sum of the terms' magnitudes)."""
    return ulp(ref, dtype) + 3 * rstd_error * scale


@pytest.mark.parametrize("shape", [(3, 64), (2, 5, 100), (1, 4096)], ids=str)
@pytest.mark.parametrize("with_weight", [True, False], ids=["weight", "no_weight"])
def test_gradcheck_float64(shape, with_weight, gen):
    x = torch.randn(*shape, generator=gen, dtype=torch.float64).requires_grad_()
    w = torch.randn(shape[-1], generator=gen, dtype=torch.float64).requires_grad_()
    args = (x, w) if with_weight else (x,)
    small = shape[-1] <= 128
    fn = (lambda a, b: oink.rmsnorm(a, b, EPS)) if with_weight else (lambda a: oink.rmsnorm(a))
    assert torch.autograd.gradcheck(fn, args, fast_mode=not small)
    # rstd is an output too: its gradient reaches x.
    assert torch.autograd.gradcheck(lambda a: oink.rmsnorm_forward(a, None, EPS)[1], (x,))


def test_gradcheck_padded_rows(gen):
    """Rows with a stride larger than N: the kernels walk x's leading strides."""
    x = padded_rows(6, 40, torch.float64, "cpu", pad=3, generator=gen).requires_grad_()
    w = torch.randn(40, generator=gen, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: oink.rmsnorm(a, b, EPS), (x, w))


def check_against_float64(x, w, dy, eps=EPS):
    """rmsnorm_forward's out and rstd, and rmsnorm_backward's dx and dweight, against float64:
    one rounding of the exact result, plus the saved rstd's rounding carried to every term, plus
    the sums' rounding where they run in float32 (CUDA's 16-bit rows: a lane's chunks, the tree,
    and for dweight a block's rows then the blocks, each term once)."""
    dtype, n = x.dtype, x.shape[-1]
    float_sums = x.is_cuda and dtype != torch.float32
    acc = 2.0**-24 if float_sums else 2.0**-52
    y, rstd = oink.rmsnorm_forward(x, w, eps)
    assert torch.equal(y, oink.rmsnorm(x, w, eps))  # the same forward, bit for bit
    assert rstd.dtype == torch.float32 and rstd.shape == x.shape[:-1]
    exact = torch.rsqrt(x.double().pow(2).mean(-1) + eps)
    # rstd's relative error: its float32 rounding; with float32 sums of squares (at most 32 terms
    # a lane, then a 10-level tree: 48 roundings) half of theirs besides (rsqrt halves it).
    rstd_error = 2.0**-24 + 24 * acc
    assert ((rstd.double() - exact).abs() <= ulp(exact, torch.float32) + 24 * acc * exact).all()

    dx, dw = oink.rmsnorm_backward(dy, x, w, rstd)
    assert dx.dtype == dtype and dx.shape == x.shape and dx.device == x.device
    ref_dx, ref_dw = reference_grads(dy, x, w, eps)
    r = exact.unsqueeze(-1)
    wd = torch.ones(n, dtype=torch.float64, device=x.device) if w is None else w.double()
    g, xd = dy.double() * wd, x.double()
    c = r**3 * (g * xd).sum(-1, keepdim=True) / n
    scale_dx = (r * g).abs() + (c * xd).abs()
    # The dot product's rounding reaches dx through c (at most 32 terms a lane, a 10-level tree,
    # and a long row's 16 slices at most).
    dot_error = 64 * acc * r**3 * (g * xd).abs().sum(-1, keepdim=True) / n * xd.abs()
    bound_dx = grad_bound(ref_dx, scale_dx, dtype, rstd_error) + 4 * acc * scale_dx + dot_error
    assert ((dx.double() - ref_dx).abs() <= bound_dx).all()
    if w is None:
        assert dw is None
        return
    assert dw.dtype == w.dtype and dw.shape == w.shape
    m = x.numel() // n
    scale_dw = (dy.double() * xd * r).abs().reshape(-1, n).sum(0)
    bound_dw = grad_bound(ref_dw, scale_dw, w.dtype, rstd_error)
    bound_dw = bound_dw + (max_block_rows(m, n, dtype) + 256 + 4) * acc * scale_dw
    assert ((dw.double() - ref_dw).abs() <= bound_dw).all()


COMBOS = [
    (torch.bfloat16, torch.bfloat16),
    (torch.float16, torch.float16),
    (torch.float32, torch.float32),
    (torch.bfloat16, torch.float32),
    (torch.float16, None),
]


def combo_ids(combo):
    return "-".join(str(d).removeprefix("torch.") for d in combo)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("combo", COMBOS, ids=combo_ids)
@pytest.mark.parametrize("n", [64, 1000, 4096])
def test_backward_against_float64(device, combo, n, gen):
    dtype, wdtype = combo
    m = 37
    x = (torch.randn(m, n, generator=gen) * 3).to(dtype).to(device)
    w = None if wdtype is None else (1 + 0.5 * torch.randn(n, generator=gen)).to(wdtype).to(device)
    dy = torch.randn(m, n, generator=gen).to(dtype).to(device)
    check_against_float64(x, w, dy)


# CUDA: one and two chunks a thread with the next row prefetched, four chunks (16-bit N > 8192,
# float32 N > 4096), element-wise rows, rows shorter than a warp, and batches of many blocks.
# Longer rows: test_cuda_long_rows_backward.
@requires_cuda
@pytest.mark.parametrize("combo", COMBOS, ids=combo_ids)
@pytest.mark.parametrize(
    "m,n", [(1, 64), (3, 8), (37, 1000), (300, 7168), (9000, 2048), (5, 12000), (5, 16384)]
)
def test_cuda_backward_sweep(combo, m, n, gen):
    dtype, wdtype = combo
    if dtype == torch.float32 and n > 8192:
        n = 8192  # float32 rows take N <= 8192 (one slice)
    x = (torch.randn(m, n, generator=gen) * 3).to(dtype).to("cuda")
    w = None if wdtype is None else (1 + 0.5 * torch.randn(n, generator=gen)).to(wdtype).to("cuda")
    dy = torch.randn(m, n, generator=gen).to(dtype).to("cuda")
    check_against_float64(x, w, dy)


# CUDA, rows longer than one slice: a cluster of CTAs per weight-gradient block, one a slice
# (2, 3 with a short last one, 4, 8 and 16 slices), batches of one cluster's rows and of many.
@requires_cuda
@pytest.mark.parametrize("combo", COMBOS, ids=combo_ids)
@pytest.mark.parametrize("m,n", [(3, 16392), (37, 40000), (300, 65536), (9, 131072), (5, 262144)])
def test_cuda_long_rows_backward(combo, m, n, gen):
    dtype, wdtype = combo
    if dtype == torch.float32:
        n //= 2  # float32 slices are 8192 elements: 16 of them, N <= 131072
    x = (torch.randn(m, n, generator=gen) * 3).to(dtype).to("cuda")
    w = None if wdtype is None else (1 + 0.5 * torch.randn(n, generator=gen)).to(wdtype).to("cuda")
    dy = torch.randn(m, n, generator=gen).to(dtype).to("cuda")
    check_against_float64(x, w, dy)


@requires_cuda
@pytest.mark.parametrize("n", [64, 1024, 4096, 16384, 32768, 131072])
@pytest.mark.parametrize("rows", ["one", "batch"])
@pytest.mark.parametrize("layout", ["dense", "padded"])
@pytest.mark.parametrize("wdtype", [torch.bfloat16, torch.float32], ids=["w16", "w32"])
def test_cuda_forward_saves_stats_in_every_schedule(n, rows, layout, wdtype, gen):
    """rmsnorm_forward runs rmsnorm's plan (registers, tile, streamed: a float32 weight at
    N=1024, cluster, two_pass) and writes each row's rstd: out is rmsnorm's bit for bit, rstd
    within one float32 ulp."""
    m = 1 if rows == "one" else max(4096, schedule_test_rows(n, torch.bfloat16))
    if m * n > 1 << 28:
        m = (1 << 28) // n
    x = padded_rows(m, n, torch.bfloat16, "cuda", pad=8 if layout == "padded" else 0, generator=gen)
    x.copy_(torch.randn(m, n, generator=gen).to(torch.bfloat16))
    w = (1 + 0.5 * torch.randn(n, generator=gen)).to(wdtype).to("cuda")
    y, rstd = oink.rmsnorm_forward(x, w, EPS)
    assert torch.equal(y, oink.rmsnorm(x, w, EPS)), oink.explain(x, w).variant
    if n == 1024 and rows == "batch" and layout == "dense" and wdtype == torch.float32:
        assert oink.explain(x, w).variant == "streamed"  # its one case: reached here
    exact = torch.rsqrt(x.double().pow(2).mean(-1) + EPS)
    # As check_against_float64: float32 sums of squares, 48 roundings at most, half of it.
    assert (
        (rstd.double() - exact).abs() <= ulp(exact, torch.float32) + 24 * 2.0**-24 * exact
    ).all()


@requires_cuda
@pytest.mark.parametrize("n", [1000, 4096, 16384, 65536])
def test_cuda_dx_is_batch_invariant_and_dweight_deterministic(n, gen):
    """A row's dx depends on its values only (alone, or row k of a batch; a long row's slices
    added in slice order by every CTA of its cluster); dweight's bits are the same on every run
    (fixed blocks, added in order)."""
    m = 3000 if n <= 16384 else 1000
    x = torch.randn(m, n, generator=gen).to(torch.bfloat16).to("cuda")
    dy = torch.randn(m, n, generator=gen).to(torch.bfloat16).to("cuda")
    w = torch.randn(n, generator=gen).to(torch.bfloat16).to("cuda")
    _, rstd = oink.rmsnorm_forward(x, w, EPS)
    dx, dw = oink.rmsnorm_backward(dy, x, w, rstd)
    for k in (0, m // 3, m - 1):
        alone, _ = oink.rmsnorm_backward(dy[k : k + 1], x[k : k + 1], w, rstd[k : k + 1])
        assert torch.equal(alone[0], dx[k])
    for _ in range(3):
        again_dx, again_dw = oink.rmsnorm_backward(dy, x, w, rstd)
        assert torch.equal(again_dx, dx) and torch.equal(again_dw, dw)


@requires_cuda
@pytest.mark.parametrize("n", [1000, 4096, 12000, 32776])
def test_cuda_padded_unaligned_and_head_view_rows(n, gen):
    """Rows with a stride larger than N, an unaligned base, and a [T, H, D] head view: the
    kernels walk each tensor's strides (long unaligned rows are copied into aligned ones)."""
    x = padded_rows(40, n, torch.bfloat16, "cuda", pad=3, offset=1, generator=gen)
    dy = padded_rows(40, n, torch.bfloat16, "cuda", pad=5, generator=gen)
    x.copy_(torch.randn(40, n, generator=gen).to(torch.bfloat16))
    dy.copy_(torch.randn(40, n, generator=gen).to(torch.bfloat16))
    w = (1 + 0.5 * torch.randn(n, generator=gen)).to(torch.bfloat16).to("cuda")
    check_against_float64(x, w, dy)
    # dx in the layout the fake kernel promises (x's strides), also where the kernel ran on
    # aligned copies of long unaligned rows; and opcheck (fake kernel, schema, autograd) agrees.
    _, rstd = oink.rmsnorm_forward(x, w, EPS)
    assert oink.rmsnorm_backward(dy, x, w, rstd)[0].stride() == x.stride()
    opcheck(torch.ops.oink.rmsnorm_backward.default, (dy, x, w, rstd))
    # Contiguous rows from an unaligned address, and a weight one element off.
    flat = torch.randn(40 * n + 1, generator=gen).to(torch.bfloat16).to("cuda")
    w_flat = (1 + 0.5 * torch.randn(n + 1, generator=gen)).to(torch.bfloat16).to("cuda")
    check_against_float64(flat[1:].view(40, n), w_flat[1:], dy.contiguous())
    heads = torch.randn(10, 3 * n, generator=gen).to(torch.bfloat16).to("cuda")
    view = heads.view(10, 3, n)[:, 1:]  # [T, 2 heads, D]: two leading dimensions
    check_against_float64(view, w, torch.randn_like(view))


@requires_cuda
def test_cuda_autograd_matches_torch(gen):
    x = torch.randn(8, 3, 1024, generator=gen).cuda().requires_grad_()
    w = torch.randn(1024, generator=gen).cuda().requires_grad_()
    (oink.rmsnorm(x, w, EPS) ** 2).sum().backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    (torch.nn.functional.rms_norm(x2, (1024,), w2, EPS) ** 2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad, w2.grad, rtol=1e-5, atol=1e-4)


def check_looped(x, w, dy, rstd):
    """rmsnorm_backward's dx and dweight against float64 from the saved rstd: one rounding, the
    dot product's float32 (16-bit rows) sums over ceil(N / 512) elements a lane and the tree, a
    block's rows then the blocks for dweight; dx batch invariant, both deterministic."""
    dx, dw = oink.rmsnorm_backward(dy, x, w, rstd)
    n, m = x.shape[-1], x.shape[0]
    acc = 2.0**-52 if x.dtype == torch.float32 else 2.0**-24
    r, xd = rstd.double().unsqueeze(-1), x.double()
    wd = torch.ones(n, dtype=torch.float64, device=x.device) if w is None else w.double()
    g = dy.double() * wd
    c = r**3 * (g * xd).sum(-1, keepdim=True) / n
    ref = r * g - c * xd
    terms = -(-n // 512) + 32
    dot = r**3 * (g * xd).abs().sum(-1, keepdim=True) / n * xd.abs()
    bound = ulp(ref, x.dtype) + terms * acc * dot + 4 * acc * ((r * g).abs() + (c * xd).abs())
    assert ((dx.double() - ref).abs() <= bound).all()
    if w is not None:
        terms_dw = (dy.double() * xd * r).abs().sum(0)
        ref_dw = (dy.double() * xd * r).sum(0)
        bound_dw = ulp(ref_dw, w.dtype) + (m + 4) * acc * terms_dw
        assert dw.dtype == w.dtype and ((dw.double() - ref_dw).abs() <= bound_dw).all()
    alone, _ = oink.rmsnorm_backward(dy[m // 2 : m // 2 + 1], x[m // 2 : m // 2 + 1], w,
                                     rstd[m // 2 : m // 2 + 1])  # fmt: skip
    assert torch.equal(alone[0], dx[m // 2])
    again_dx, again_dw = oink.rmsnorm_backward(dy, x, w, rstd)
    assert torch.equal(again_dx, dx) and (w is None or torch.equal(again_dw, dw))


@requires_cuda
@pytest.mark.parametrize(
    ("n", "dtype", "wdtype"),
    [
        (262152, torch.bfloat16, torch.bfloat16),  # 17 slices: past the cluster
        (524288, torch.bfloat16, torch.float32),
        (131076, torch.float32, torch.float32),
        (300001, torch.float16, None),  # element-wise: N not whole chunks
        (20001, torch.bfloat16, torch.bfloat16),  # unaligned, a few slices
        (8193, torch.float16, torch.float16),  # 3 chunks a thread: past the row kernel's 2
    ],
)
def test_cuda_looped_rows_past_the_cluster_or_unaligned(n, dtype, wdtype, gen):
    x = torch.randn(24, n, generator=gen).to(dtype).cuda()
    dy = torch.randn(24, n, generator=gen).to(dtype).cuda()
    w = None if wdtype is None else (1 + 0.5 * torch.randn(n, generator=gen)).to(wdtype).cuda()
    _, rstd = oink.rmsnorm_forward(x, w, EPS)
    check_looped(x, w, dy, rstd)
    # Padded, unaligned rows of a whole-chunk N past the cluster: element-wise, looped too.
    if n % 8 == 0 and dtype != torch.float32:
        xp = padded_rows(24, n, dtype, "cuda", pad=3, offset=1, generator=gen)
        xp.copy_(x)
        check_looped(xp, w, dy, rstd)


@requires_cuda
@pytest.mark.parametrize("n", [262152, 20001])
def test_cuda_layernorm_looped_rows(n, gen):
    """layernorm_backward past the cluster and on unaligned long rows: float64 from the saved
    mean and rstd, both pairs of sums over ceil(N / 512) elements a lane; batch invariant."""
    x = torch.randn(16, n, generator=gen).to(torch.bfloat16).cuda()
    dy = torch.randn(16, n, generator=gen).to(torch.bfloat16).cuda()
    w = (1 + 0.5 * torch.randn(n, generator=gen)).cuda()
    b = torch.randn(n, generator=gen).cuda()
    xd = x.double()
    mean = xd.mean(-1).float()
    rstd = torch.rsqrt(xd.var(-1, unbiased=False) + 1e-5).float()
    dx, dw, db = oink.layernorm_backward(dy, x, w, b, mean, rstd)
    r, mu = rstd.double().unsqueeze(-1), mean.double().unsqueeze(-1)
    xhat, g = (xd - mu) * r, dy.double() * w.double()
    ref = r * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    terms = (-(-n // 512) + 32) * 2.0**-24
    sums = g.abs().mean(-1, keepdim=True) + (g * xhat).abs().mean(-1, keepdim=True) * xhat.abs()
    bound = ulp(ref, torch.bfloat16) + terms * r * sums + 4 * 2.0**-24 * r * (g.abs() + sums)
    assert ((dx.double() - ref).abs() <= bound).all()
    ref_dw, ref_db = (dy.double() * xhat).sum(0), dy.double().sum(0)
    assert (
        (dw.double() - ref_dw).abs()
        <= ulp(ref_dw, torch.float32) + 20 * 2.0**-24 * (dy.double() * xhat).abs().sum(0)
    ).all()
    assert (
        (db.double() - ref_db).abs()
        <= ulp(ref_db, torch.float32) + 20 * 2.0**-24 * dy.double().abs().sum(0)
    ).all()
    alone = oink.layernorm_backward(dy[7:8], x[7:8], w, b, mean[7:8], rstd[7:8])[0]
    assert torch.equal(alone[0], dx[7])


def test_autograd_matches_torch(gen):
    """loss.backward() through oink.rmsnorm gives F.rms_norm's gradients (float32 inputs)."""
    x = torch.randn(8, 3, 256, generator=gen).requires_grad_()
    w = torch.randn(256, generator=gen).requires_grad_()
    (oink.rmsnorm(x, w, EPS) ** 2).sum().backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    (torch.nn.functional.rms_norm(x2, (256,), w2, EPS) ** 2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w.grad, w2.grad, rtol=1e-5, atol=1e-5)


def test_weight_grad_is_deterministic_across_thread_counts(gen):
    """dweight sums fixed row blocks in block order: the same bits at any thread count."""
    x = torch.randn(3000, 512, generator=gen).to(torch.bfloat16)
    dy = torch.randn(3000, 512, generator=gen).to(torch.bfloat16)
    w = torch.randn(512, generator=gen).to(torch.bfloat16)
    _, rstd = oink.rmsnorm_forward(x, w, EPS)
    threads = torch.get_num_threads()
    results = []
    try:
        for t in (1, 2, 3):
            torch.set_num_threads(t)
            results.append(oink.rmsnorm_backward(dy, x, w, rstd))
    finally:
        torch.set_num_threads(threads)
    for dx, dw in results[1:]:
        assert torch.equal(dx, results[0][0]) and torch.equal(dw, results[0][1])


def test_no_weight_returns_no_weight_grad(gen):
    x = torch.randn(4, 64, generator=gen)
    _, rstd = oink.rmsnorm_forward(x, None, EPS)
    dx, dw = oink.rmsnorm_backward(torch.randn(4, 64, generator=gen), x, None, rstd)
    assert dw is None and dx.shape == x.shape


def test_empty_batch_gives_zero_weight_grad():
    x, w = torch.empty(0, 64), torch.ones(64)
    _, rstd = oink.rmsnorm_forward(x, w, EPS)
    dx, dw = oink.rmsnorm_backward(torch.empty(0, 64), x, w, rstd)
    assert dx.shape == (0, 64) and torch.equal(dw, torch.zeros(64))


def test_compile_and_backward(gen):
    def loss(x, w):
        return oink.rmsnorm(x, w, EPS).square().sum()

    x = torch.randn(16, 128, generator=gen).requires_grad_()
    w = torch.randn(128, generator=gen).requires_grad_()
    torch.compile(loss, fullgraph=True)(x, w).backward()
    compiled = (x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    loss(x, w).backward()
    assert torch.equal(compiled[0], x.grad) and torch.equal(compiled[1], w.grad)


def test_opcheck(gen):
    x = torch.randn(5, 64, generator=gen, dtype=torch.float64).requires_grad_()
    w = torch.randn(64, generator=gen, dtype=torch.float64).requires_grad_()
    opcheck(torch.ops.oink.rmsnorm_forward.default, (x, w, EPS))
    _, rstd = oink.rmsnorm_forward(x.detach(), w.detach(), EPS)
    dy = torch.randn(5, 64, generator=gen, dtype=torch.float64)
    opcheck(torch.ops.oink.rmsnorm_backward.default, (dy, x.detach(), w.detach(), rstd))
    opcheck(torch.ops.oink.rmsnorm_backward.default, (dy, x.detach(), None, rstd))


def expect_error(fn, *args, arg, expected):
    with pytest.raises((ValueError, RuntimeError)) as info:
        fn(*args)
    text = str(info.value)
    assert f"'{arg}'" in text or f"argument {arg}" in text, text
    assert expected in text, text


def test_bad_inputs_name_the_argument(gen):
    x, w = torch.randn(4, 64, generator=gen), torch.randn(64, generator=gen)
    _, rstd = oink.rmsnorm_forward(x, w, EPS)
    dy = torch.randn(4, 64, generator=gen)
    back = oink.rmsnorm_backward
    expect_error(back, torch.randn(4, 63), x, w, rstd, arg="dy", expected="x's shape")
    expect_error(back, dy.double(), x, w, rstd, arg="dy", expected="x's dtype")
    expect_error(back, dy, x, w, rstd.double(), arg="rstd", expected="float32")
    expect_error(back, dy, x, w, rstd[:3], arg="rstd", expected="x.shape[:-1]")
    expect_error(back, dy, x, w, torch.randn(4, 2)[:, 0], arg="rstd", expected="contiguous")
    expect_error(back, dy, x, torch.randn(63), rstd, arg="weight", expected="N=64")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(0, 16), (0, 12000), (3, 0), (16,)], ids=str)
def test_backward_of_empty_and_one_d_inputs(device, shape, gen):
    """sum().backward() hands an expanded gradient (zero strides, kept by empty tensors): the
    formula densifies it; an empty batch gives a zero weight gradient; 1-D x has a 0-d rstd."""
    x = torch.randn(*shape, generator=gen).to(device).requires_grad_()
    w = torch.randn(shape[-1], generator=gen).to(device).requires_grad_()
    ops = [oink.rmsnorm, lambda a, b: oink.layernorm(a, b, None)]
    for op in ops:
        x.grad = w.grad = None
        op(x, w).sum().backward()
        assert x.grad.shape == x.shape and w.grad.shape == w.shape
        if x.numel() == 0:
            assert torch.equal(w.grad, torch.zeros_like(w))
    assert oink.rmsnorm_forward(x.detach())[1].shape == shape[:-1]


@pytest.mark.parametrize("device", DEVICES)
def test_statistics_of_empty_rows_are_nan_as_torchs(device):
    """Rows of N = 0: mean(x^2) and mean(x) are 0 / 0. No kernel runs over them, and the saved
    statistics are NaN, as PyTorch's, not what the allocation held."""
    x = torch.empty(3, 0, device=device)
    _, rstd = oink.rmsnorm_forward(x)
    assert rstd.shape == (3,) and rstd.isnan().all()
    _, want = torch._fused_rms_norm(x, [0], None, EPS)
    assert want.isnan().all()
    _, mean, rstd = oink.layernorm_forward(x)
    assert mean.isnan().all() and rstd.isnan().all()
