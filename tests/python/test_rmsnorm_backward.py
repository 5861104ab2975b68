"""RMSNorm's backward pass (CPU in this version): rmsnorm_forward's rstd, rmsnorm_backward's dx
and dweight against float64, gradcheck, autograd through oink.rmsnorm, torch.compile, opcheck,
the determinism of dweight, and the errors."""

import pytest
import torch
from torch.library import opcheck

import oink
from oink.testing import padded_rows, ulp

from conftest import requires_cuda

EPS = 1e-6


def reference_grads(dy, x, weight, eps=EPS):
    """(dx, dweight) of float64 F.rms_norm at the values of x and weight, for dy."""
    xd = x.detach().double().requires_grad_()
    wd = None if weight is None else weight.detach().double().requires_grad_()
    y = torch.nn.functional.rms_norm(xd, (x.shape[-1],), wd, eps)
    y.backward(dy.double())
    return xd.grad, None if wd is None else wd.grad


def grad_bound(ref, scale, dtype, rstd_dtype):
    """One rounding to `dtype` of the float64 result, plus the saved rstd's rounding (relative
    2^-24 for float32, carried to every term: `scale` is the sum of the terms' magnitudes)."""
    rstd_error = 2.0**-22 if rstd_dtype == torch.float32 else 2.0**-50
    return ulp(ref, dtype) + rstd_error * scale


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


@pytest.mark.parametrize(
    "dtype,wdtype",
    [
        (torch.bfloat16, torch.bfloat16),
        (torch.float16, torch.float16),
        (torch.float32, torch.float32),
        (torch.bfloat16, torch.float32),
    ],
    ids=lambda d: str(d).removeprefix("torch."),
)
@pytest.mark.parametrize("n", [64, 1000, 4096])
def test_backward_against_float64(dtype, wdtype, n, gen):
    m = 37
    x = (torch.randn(m, n, generator=gen) * 3).to(dtype)
    w = (1 + 0.5 * torch.randn(n, generator=gen)).to(wdtype)
    dy = torch.randn(m, n, generator=gen).to(dtype)
    y, rstd = oink.rmsnorm_forward(x, w, EPS)
    assert torch.equal(y, oink.rmsnorm(x, w, EPS))  # the same forward, bit for bit
    assert rstd.dtype == torch.float32 and rstd.shape == (m,)
    exact = torch.rsqrt(x.double().pow(2).mean(-1) + EPS)
    assert ((rstd.double() - exact).abs() <= ulp(exact, torch.float32)).all()

    dx, dw = oink.rmsnorm_backward(dy, x, w, rstd)
    assert dx.dtype == dtype and dx.shape == x.shape and dw.dtype == wdtype
    ref_dx, ref_dw = reference_grads(dy, x, w)
    r = exact.unsqueeze(-1)
    g, xd = dy.double() * w.double(), x.double()
    c = r**3 * (g * xd).sum(-1, keepdim=True) / n
    scale_dx = (r * g).abs() + (c * xd).abs()
    assert ((dx.double() - ref_dx).abs() <= grad_bound(ref_dx, scale_dx, dtype, rstd.dtype)).all()
    scale_dw = (dy.double() * x.double() * r).abs().sum(0)
    assert ((dw.double() - ref_dw).abs() <= grad_bound(ref_dw, scale_dw, wdtype, rstd.dtype)).all()


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


@requires_cuda
def test_cuda_says_cpu_only():
    x = torch.randn(4, 64, device="cuda")
    with pytest.raises(RuntimeError, match="CPU only"):
        oink.rmsnorm_forward(x, None, EPS)
    with pytest.raises(RuntimeError, match="no CUDA backward kernel"):
        oink.rmsnorm(x.requires_grad_(), None, EPS)


@pytest.mark.parametrize("shape", [(0, 16), (3, 0), (16,)], ids=str)
def test_backward_of_empty_and_one_d_inputs(shape, gen):
    """sum().backward() hands an expanded gradient (zero strides, kept by empty tensors): the
    formula densifies it; an empty batch gives a zero weight gradient; 1-D x has a 0-d rstd."""
    x = torch.randn(*shape, generator=gen).requires_grad_()
    w = torch.randn(shape[-1], generator=gen).requires_grad_()
    for op in (oink.rmsnorm, lambda a, b: oink.layernorm(a, b, None)):
        x.grad = w.grad = None
        op(x, w).sum().backward()
        assert x.grad.shape == x.shape and w.grad.shape == w.shape
        if x.numel() == 0:
            assert torch.equal(w.grad, torch.zeros_like(w))
    assert oink.rmsnorm_forward(x.detach())[1].shape == shape[:-1]
