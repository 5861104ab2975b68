"""Autograd through the in-place fused_add_rms_norm: gradients against an unfused float64
reference and gradcheck, the forward's bits unchanged by grad mode, a residual buffer updated in
place layer after layer (as in a model), torch.compile, and the refusal to update a leaf in place
before anything is written."""

import pytest
import torch

import oink

from conftest import DEVICES
from sweep import padded_rows

EPS = 1e-6


def unfused(x, residual, weight, eps=EPS):
    """The op's definition, out of place: (normalised, new residual)."""
    summed = x + residual
    return torch.nn.functional.rms_norm(summed, summed.shape[-1:], weight, eps), summed


def precision(device):
    """The leaves' dtype and the gradients' tolerance against the float64 reference: float64 on
    the CPU (agreeing to 1e-10); float32 on CUDA, whose kernels take no float64 rows (a few
    float32 roundings through each layer, far from any error in the formulas)."""
    if device == "cpu":
        return torch.float64, {"rtol": 1e-10, "atol": 1e-12}
    return torch.float32, {"rtol": 1e-4, "atol": 1e-4}


def in_float64(tensors):
    """Leaves of the float64 reference on the CPU, with the same values."""
    return [t.detach().double().cpu().requires_grad_() for t in tensors]


def assert_close_to_reference(got, want, tol):
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g.double().cpu(), e, **tol)


def layer_inputs(a, b):
    """Non-leaf x and residual computed from the leaves, as a model's layer hands them over."""
    return a * 1.5, b * 0.5


def loss_of(out, residual):
    """Both outputs reach the loss, with gradients that differ per element."""
    k = torch.arange(out.numel(), device=out.device, dtype=out.dtype).reshape(out.shape)
    return (out * torch.cos(k)).sum() + (residual * torch.sin(k)).sum()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_weight", [True, False])
def test_gradients_match_the_unfused_float64_op(device, with_weight, gen):
    dtype, tol = precision(device)
    a = torch.randn(6, 3, 96, generator=gen, dtype=dtype).to(device)
    b = torch.randn(6, 3, 96, generator=gen, dtype=dtype).to(device)
    w = torch.randn(96, generator=gen, dtype=dtype).to(device) if with_weight else None
    leaves = [t.requires_grad_() for t in (a, b, w) if t is not None]

    x, r = layer_inputs(a, b)
    oink.fused_add_rms_norm(x, r, w, EPS)
    got = torch.autograd.grad(loss_of(x, r), leaves)
    ref = in_float64(leaves)
    ra, rb, rw = (*ref, None) if w is None else ref
    out, summed = unfused(*layer_inputs(ra, rb), rw)
    want = torch.autograd.grad(loss_of(out, summed), ref)
    assert_close_to_reference(got, want, tol)


def test_gradcheck_float64(gen):
    a = torch.randn(4, 40, generator=gen, dtype=torch.float64).requires_grad_()
    b = torch.randn(4, 40, generator=gen, dtype=torch.float64).requires_grad_()
    w = torch.randn(40, generator=gen, dtype=torch.float64).requires_grad_()

    def fused(a, b, w):
        x, r = a.clone(), b.clone()
        oink.fused_add_rms_norm(x, r, w, EPS)
        return x, r

    assert torch.autograd.gradcheck(fused, (a, b, w))
    # Padded rows: x and the residual with row strides of their own.
    xp = padded_rows(4, 40, torch.float64, "cpu", pad=3, generator=gen).requires_grad_()
    assert torch.autograd.gradcheck(lambda p, q: fused(p, q, None), (xp, b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_grad_mode_leaves_the_forward_bits_alone(device, dtype, gen):
    a = torch.randn(9, 256, generator=gen).to(device, dtype)
    b = torch.randn(9, 256, generator=gen).to(device, dtype)
    w = torch.randn(256, generator=gen).to(device, torch.float32)
    x0, r0 = a.clone(), b.clone()
    with torch.no_grad():
        oink.fused_add_rms_norm(x0, r0, w, EPS)
    w.requires_grad_()
    x, r = a.clone().requires_grad_().clone(), b.clone()
    oink.fused_add_rms_norm(x, r, w, EPS)
    assert x.requires_grad and r.requires_grad
    assert torch.equal(x.detach(), x0) and torch.equal(r.detach(), r0)


@pytest.mark.parametrize("device", DEVICES)
def test_a_residual_buffer_updated_in_place_layer_after_layer(device, gen):
    """A model's residual stream: one buffer, updated in place by every layer's fused op, each
    layer's x a GEMM's output. The backward needs every layer's sum after the buffer has moved
    on: the op keeps its own copy. (x itself is updated in place, so like any in-place op's
    input it must not be a tensor some backward saved, such as tanh's output.)"""
    layers = 3
    n = 64
    dtype, tol = precision(device)
    h = torch.randn(5, n, generator=gen, dtype=dtype).to(device)
    mats = [torch.randn(n, n, generator=gen, dtype=dtype).to(device) / 8 for _ in range(3)]
    ws = [torch.randn(n, generator=gen, dtype=dtype).to(device) for _ in range(3)]
    leaves = [t.requires_grad_() for t in (h, *mats, *ws)]

    def model(fused, h, mats, ws):
        residual = h * 1.0
        x = h @ mats[0]
        for i in range(layers):
            if fused:
                oink.fused_add_rms_norm(x, residual, ws[i], EPS)
                y = x
            else:
                y, residual = unfused(x, residual, ws[i])
            x = torch.tanh(y) @ mats[i]  # a GEMM's output: saved by no backward
        return (x * x).sum() + residual.sum()

    got = torch.autograd.grad(model(True, h, mats, ws), leaves)
    ref = in_float64(leaves)
    want = torch.autograd.grad(model(False, ref[0], ref[1:4], ref[4:]), ref)
    assert_close_to_reference(got, want, tol)


@pytest.mark.parametrize("device", DEVICES)
def test_only_the_weight_requires_grad(device, gen):
    """Frozen activations, a trained weight: x and residual are leaves that need no grad, so the
    op updates them in place; the weight's gradient is the unfused op's."""
    dtype, tol = precision(device)
    x = torch.randn(7, 3, 64, generator=gen, dtype=dtype).to(device)
    r = torch.randn(7, 3, 64, generator=gen, dtype=dtype).to(device)
    w = torch.randn(64, generator=gen, dtype=dtype).to(device).requires_grad_()
    (rw,) = in_float64([w])
    out, summed = unfused(x.double().cpu(), r.double().cpu(), rw)
    (want,) = torch.autograd.grad(loss_of(out, summed), (rw,))
    sum_in_dtype = x + r  # the new residual: the sum rounded once to the dtype
    oink.fused_add_rms_norm(x, r, w, EPS)
    assert x.requires_grad and torch.equal(r, sum_in_dtype)
    (got,) = torch.autograd.grad(loss_of(x, r), (w,))
    assert_close_to_reference([got], [want], tol)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_and_backward(device, gen):
    def step(a, b, w):
        x, r = layer_inputs(a, b)
        oink.fused_add_rms_norm(x, r, w, EPS)
        return loss_of(x, r)

    a = torch.randn(16, 128, generator=gen).to(device).requires_grad_()
    b = torch.randn(16, 128, generator=gen).to(device).requires_grad_()
    w = torch.randn(128, generator=gen).to(device).requires_grad_()
    compiled = torch.autograd.grad(torch.compile(step, fullgraph=True)(a, b, w), (a, b, w))
    eager = torch.autograd.grad(step(a, b, w), (a, b, w))
    for c, e in zip(compiled, eager, strict=True):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("leaf", ["x", "residual", "view of x"])
def test_a_leaf_that_requires_grad_is_refused_before_anything_is_written(device, leaf, gen):
    x = torch.randn(4, 32, generator=gen).to(device)
    r = torch.randn(4, 32, generator=gen).to(device)
    w = torch.randn(32, generator=gen).to(device)
    before = (x.clone(), r.clone())
    name = "residual" if leaf == "residual" else "x"
    if leaf == "view of x":
        x.requires_grad_()
        target = x[1:]
        args = (target, r[1:], w)
    else:
        (x if leaf == "x" else r).requires_grad_()
        args = (x, r, w)
    with pytest.raises(RuntimeError, match=f"argument '{name}' is a .*leaf tensor"):
        oink.fused_add_rms_norm(*args, EPS)
    assert torch.equal(x.detach(), before[0]) and torch.equal(r.detach(), before[1])
