"""Softmax: the forward and backward against float64 over a sweep of row widths, layouts,
-inf and extreme rows, batch invariance, autograd (gradcheck, torch.compile), opcheck and the
errors, on the CPU; the same on CUDA when present."""

import importlib
import importlib.util
import math

import pytest
import torch
from torch.library import opcheck

import oink

from conftest import DEVICES, requires_cuda, within_budget
from sweep import padded_rows, ulp

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# Row widths across the plan's schedules: one thread's chunk, sub-warp rows, whole CTAs, odd
# widths (element-wise I/O), rows longer than registers hold (CUDA: the cluster, 3 to 16 slices)
# and longer than a cluster takes (the looped schedule: float32 262144, every dtype 300000).
WIDTHS = [1, 7, 8, 100, 1000, 1024, 4104, 32768, 40000, 131072, 262144, 300000]


def dtype_id(d):
    return str(d).removeprefix("torch.")


def bound(dtype, device, x):
    """Allowed error of each element, in units of the output's last place. The CPU rounds a
    float64 result once: 0.5 ulp (16-bit outputs through float32, as the kernels' math ends).
    CUDA computes in float32: d = x - max is rounded once, an absolute error of up to |d| * 2^-24
    in the exponent, which is a relative error of |d| * 2^-24 in exp(d): up to |d| ulp of the
    output (twice that allowed: an online row rescales each thread's sum by one more exp). expf,
    the row's tree sum (log2 N levels) and the division add a few ulp more. At 16 bits all of
    that stays inside one output ulp (docs/numerics.md)."""
    if device == "cpu":  # 16-bit outputs round through float32 first: 2^-13 ulp more at most
        return torch.full(x.shape, 0.5 + (dtype != torch.float32) * 2**-13, dtype=torch.float64)
    if dtype != torch.float32:
        return torch.ones(x.shape, dtype=torch.float64)
    x64 = x.double().cpu()
    d = (x64 - x64.amax(-1, keepdim=True)).abs().nan_to_num(posinf=0.0, neginf=0.0)
    return 2 * d + math.log2(max(x.shape[-1], 2)) + 8


def check_close(got, ref64, dtype, device, x):
    err = (got.double() - ref64).abs().cpu()
    units = ulp(ref64, dtype).cpu()
    b = bound(dtype, device, x)
    assert torch.all(err <= b * units + 1e-300), (
        f"max error {(err / units).max().item():.3f} ulp "
        f"(bound there {b.flatten()[(err / units).argmax()].item():.2f})"
    )


def rows(m, n, dtype, device, gen, scale=3.0):
    return (torch.randn(m, n, generator=gen) * scale).to(dtype).to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("n", WIDTHS)
def test_forward_matches_float64(device, dtype, n, gen):
    m = 5
    if not within_budget(device, m, n):
        pytest.skip("over the CPU element budget")
    x = rows(m, n, dtype, device, gen)
    y = oink.softmax(x)
    assert y.dtype == dtype and y.shape == x.shape and y.stride() == x.stride()
    check_close(y, torch.softmax(x.double(), -1), dtype, device, x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("n", WIDTHS)
def test_backward_matches_float64(device, dtype, n, gen):
    m = 4
    if not within_budget(device, m, n):
        pytest.skip("over the CPU element budget")
    y = torch.softmax(rows(m, n, torch.float64, "cpu", gen), -1).to(dtype).to(device)
    dy = rows(m, n, dtype, device, gen, scale=1.0)
    dx = oink.softmax_backward(dy, y)
    y64, dy64 = y.double(), dy.double()
    ref = y64 * (dy64 - (dy64 * y64).sum(-1, keepdim=True))
    # The dot product's rounding moves every element: bound it by the row's scale too, and on
    # CUDA by what PyTorch's own kernel in this dtype shows on the same rows, plus one ulp.
    err = (dx.double() - ref).abs()
    scale = (y64 * (dy64.abs() + (dy64 * y64).sum(-1, keepdim=True).abs())).clamp_min(1e-30)
    allowed = 2 * ulp(ref, dtype) + 4 * scale * torch.finfo(dtype).eps
    if device != "cpu":
        theirs = torch._softmax_backward_data(dy, y, -1, dtype).double()
        allowed = torch.maximum(
            allowed, (theirs - ref).abs().max(-1, True).values + ulp(ref, dtype)
        )
    assert torch.all(err <= allowed)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_layouts(device, dtype, gen):
    # Padded rows (a row stride past N), an unaligned base, and a transposed 4-D view; rows in
    # registers (200) and in a cluster (40000, CUDA), vector and element-wise.
    for n in (200, 40000):
        if not within_budget(device, 6, n):
            continue
        for pad, offset in ((8, 0), (3, 1)):
            x = padded_rows(6, n, dtype, device, pad=pad, offset=offset, generator=gen)
            y = oink.softmax(x)
            assert y.stride() == x.stride()
            check_close(y, torch.softmax(x.double(), -1), dtype, device, x)
            dx = oink.softmax_backward(x, y)
            y64, x64 = y.double(), x.double()
            ref = y64 * (x64 - (x64 * y64).sum(-1, keepdim=True))
            assert torch.allclose(dx.double(), ref, rtol=2e-2, atol=1e-3)
    base = rows(2 * 3 * 4, 64, dtype, device, gen).reshape(2, 3, 4, 64)
    view = base.transpose(1, 2)  # [2, 4, 3, 64], rows over three leading dimensions
    y = oink.softmax(view)
    assert y.is_contiguous()
    check_close(y, torch.softmax(view.double(), -1), dtype, device, view)
    dx = oink.softmax_backward(torch.ones_like(view), view)
    assert dx.shape == view.shape


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_infinite_and_extreme_rows(device, dtype, gen):
    n = 300
    x = rows(4, n, torch.float32, "cpu", gen)
    x[0, ::2] = float("-inf")  # half the row masked
    x[1, :] = float("-inf")  # all masked: NaN, as torch.softmax
    x[2, :] = torch.linspace(-1e4, 1e4, n)  # extreme logits
    x[3, 7] = 1e4
    x = x.to(dtype).to(device)
    y = oink.softmax(x).double()
    ref = torch.softmax(x.double(), -1)
    assert torch.all(y[0, ::2] == 0)
    assert torch.isnan(y[1]).all() and torch.isnan(ref[1]).all()
    check_close(y[[0, 2, 3]].to(dtype), ref[[0, 2, 3]], dtype, device, x[[0, 2, 3]])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [100, 4096, 40000, 131072])
def test_batch_invariance(device, n, gen):
    # A row's bits do not depend on how many rows the call holds.
    x = rows(64, n, torch.bfloat16, device, gen)
    whole = oink.softmax(x)
    for r in (0, 17, 63):
        assert torch.equal(oink.softmax(x[r : r + 1]), whole[r : r + 1])
    assert torch.equal(oink.softmax(x[5:9]), whole[5:9])


def test_gradcheck_cpu(gen):
    x = torch.randn(3, 11, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(oink.softmax, (x,))


@pytest.mark.parametrize("device", DEVICES)
def test_autograd_matches_torch(device, gen):
    x = rows(6, 333, torch.float32, device, gen).requires_grad_()
    dy = rows(6, 333, torch.float32, device, gen)
    (oink.softmax(x) * dy).sum().backward()
    x64 = x.detach().double().requires_grad_()
    (torch.softmax(x64, -1) * dy.double()).sum().backward()
    assert torch.allclose(x.grad.double(), x64.grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_and_backward(device, gen):
    x = rows(8, 256, torch.float32, device, gen).requires_grad_()
    fn = torch.compile(lambda t: (oink.softmax(t) ** 2).sum(), fullgraph=True)
    fn(x).backward()
    x2 = x.detach().clone().requires_grad_()
    (oink.softmax(x2) ** 2).sum().backward()
    assert torch.equal(x.grad, x2.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device, gen):
    x = rows(4, 96, torch.float32, device, gen)
    opcheck(torch.ops.oink.softmax.default, (x,))
    y = oink.softmax(x)
    opcheck(torch.ops.oink.softmax_backward.default, (torch.randn_like(y), y))


def test_errors():
    with pytest.raises(ValueError, match="argument 'x'.*float16, bfloat16 or float32"):
        oink.softmax(torch.ones(2, 3, dtype=torch.int32))
    with pytest.raises(ValueError, match="argument 'x'.*stride 1 in its last dimension"):
        oink.softmax(torch.ones(4, 3).t())
    y = torch.softmax(torch.randn(2, 5), -1)
    with pytest.raises(ValueError, match="argument 'dy'.*must have y's shape"):
        oink.softmax_backward(torch.ones(2, 4), y)
    with pytest.raises(ValueError, match="argument 'dy'.*must have y's dtype"):
        oink.softmax_backward(torch.ones(2, 5, dtype=torch.float64), y)
    with pytest.raises(RuntimeError, match="softmax_backward.*argument 'dy' requires grad"):
        oink.softmax_backward(torch.ones(2, 5, requires_grad=True), y)


@requires_cuda
@pytest.mark.parametrize("peer", ["quack", "liger_kernel"])
def test_against_peers(peer, gen):
    """Where Quack or Liger is installed, its softmax and oink's agree within bf16 rounding."""
    if importlib.util.find_spec(peer) is None:
        pytest.skip(f"{peer} is not installed")
    x = rows(512, 4096, torch.bfloat16, "cuda", gen)
    if peer == "quack":
        theirs = importlib.import_module("quack.softmax").softmax_fwd(x)
    else:
        theirs = importlib.import_module("liger_kernel.ops.softmax")._softmax_forward(x)[0]
    torch.testing.assert_close(oink.softmax(x).float(), theirs.float(), rtol=1e-2, atol=1e-3)
