"""Cross-entropy: the loss and its gradient against F.cross_entropy in float64 (reductions,
ignore_index, label smoothing, Gemma's softcap), hard inputs (extreme logits, -inf, rows all
ignored, targets out of range), the in-place gradient and the fused forward + gradient, autograd
(gradcheck, torch.compile), determinism, opcheck and the errors; Quack and Liger where they are
installed (CUDA)."""

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from torch.library import opcheck

import oink

from conftest import DEVICES, requires_cuda, within_budget

IGNORE = -100
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def dtype_id(d):
    return str(d).removeprefix("torch.")


def make(m, v, dtype, device, gen, ignored=0, scale=4.0):
    logits = (torch.randn(m, v, generator=gen) * scale).to(dtype).to(device)
    target = torch.randint(0, v, (m,), generator=gen)
    target[:ignored] = IGNORE
    return logits, target.to(device)


def reference(logits, target, reduction="mean", label_smoothing=0.0, softcap=None):
    z = logits.double()
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    return F.cross_entropy(
        z, target, ignore_index=IGNORE, label_smoothing=label_smoothing, reduction=reduction
    )


def tol(dtype, device):
    # The kernels' float32 (CUDA) or float64 (CPU) loss, rounded to the logits' dtype at the end.
    return {"rtol": 2 * torch.finfo(dtype).eps, "atol": 1e-6 if device == "cpu" else 1e-4}


OPTIONS = [
    {},
    {"label_smoothing": 0.1},
    {"softcap": 30.0},
    {"label_smoothing": 0.2, "softcap": 10.0},
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
# Vocabularies of each CUDA schedule: registers (up to 2048 chunks a row), then, for the forward
# that writes the gradient, the cluster (32000; 50257 element-wise; 128256 in 8 slices of 2048;
# 262144 in 8 of 4096), else looped (the loss alone, and 262152 at 16 bits).
@pytest.mark.parametrize("v", [1, 5, 1000, 4099, 32000, 50257, 128256, 262144, 262152])
@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_loss_and_gradient_match_float64(device, dtype, v, options, gen):
    m = 6
    if not within_budget(device, m, v):
        pytest.skip("over the CPU element budget")
    logits, target = make(m, v, dtype, device, gen, ignored=1)
    for reduction in ("mean", "sum", "none"):
        x = logits.clone().requires_grad_()
        loss = oink.cross_entropy(x, target, reduction=reduction, **options)
        x64 = logits.double().requires_grad_()
        ref = reference(x64, target, reduction, **options)
        assert loss.dtype == dtype and loss.shape == ref.shape
        assert torch.allclose(loss.double(), ref, **tol(dtype, device)), (loss, ref)
        upstream = torch.rand(ref.shape, generator=gen, dtype=torch.float64).to(device)
        (loss.double() * upstream).sum().backward()
        (ref * upstream).sum().backward()
        assert_gradient_close(x.grad, x64, target, upstream, reduction, dtype, options)


def assert_gradient_close(grad, x64, target, upstream, reduction, dtype, options):
    """The gradient within two ulp of its dtype, plus what the saved float32 log-sum-exp costs:
    p = exp(z - lse) with lse rounded to float32 is off by |lse| * 2^-24 relative (as Quack's
    and Liger's, which save it the same way)."""
    z = x64.detach()
    if options.get("softcap"):
        z = options["softcap"] * torch.tanh(z / options["softcap"])
    lse = torch.logsumexp(z, -1, keepdim=True)
    p = torch.exp(z - lse)
    valid = (target != IGNORE).double()
    row_scale = {"none": upstream, "sum": upstream.expand(valid.shape)}.get(reduction)
    if row_scale is None:
        row_scale = (upstream / valid.sum()).expand(valid.shape)
    row_scale = (row_scale * valid).unsqueeze(-1)
    f32 = torch.finfo(torch.float32).eps
    fi = torch.finfo(dtype)
    # Two ulp, at least the subnormal step (float16 gradients of a long row are subnormal); on
    # CUDA float32's tanhf, expf and logf add a few float32 ulp of each term (8 allowed).
    rel = max(2 * fi.eps, 8 * f32 if grad.is_cuda else 0.0)
    bound = rel * x64.grad.abs() + fi.tiny * fi.eps + (8 + lse.abs()) * f32 * p * row_scale
    if options.get("softcap") and grad.is_cuda:
        # float32's z = c * tanh(x / c) is off by a few ulp of c (p by 2 c f32 relative), and
        # dz = 1 - t^2 from the rounded t by ~4 f32 absolute: a float32 emulation of the kernel
        # on CPU reaches 0.97 of the bound without these terms at V=50257 (0.35 with them).
        c, dz = options["softcap"], 1 - torch.tanh(x64.detach() / options["softcap"]) ** 2
        bound = bound + (4 * x64.grad.abs() / dz + 2 * c * p * dz * row_scale) * f32
    err = (grad.double() - x64.grad).abs()
    assert torch.all(err <= bound + 1e-30), (err - bound).max()


@pytest.mark.parametrize("device", DEVICES)
def test_hard_inputs(device, gen):
    v = 257
    logits, target = make(5, v, torch.float32, device, gen)
    logits[0] = torch.linspace(-1e4, 1e4, v)
    logits[1, ::3] = float("-inf")
    target[1] = 1  # a finite logit
    target[2] = IGNORE
    loss = oink.cross_entropy(logits, target, reduction="none")
    ref = reference(logits, target, "none")
    assert torch.allclose(loss.double(), ref, rtol=1e-6, atol=1e-6)
    assert loss[2] == 0


@pytest.mark.parametrize("device", DEVICES)
def test_all_rows_ignored(device, gen):
    logits, target = make(4, 50, torch.float32, device, gen, ignored=4)
    for smoothing in (0.0, 0.3):
        x = logits.clone().requires_grad_()
        loss = oink.cross_entropy(x, target, label_smoothing=smoothing)
        assert torch.isnan(loss) and torch.isnan(reference(logits, target, "mean", smoothing))
        s = oink.cross_entropy(x, target, reduction="sum", label_smoothing=smoothing)
        assert s == 0
        s.backward()
        assert torch.all(x.grad == 0)


@pytest.mark.parametrize("device", DEVICES)
def test_target_out_of_range_gives_nan_rows(device, gen):
    # Never read past the row: the row's loss (and gradient) is NaN; the other rows are right.
    logits, target = make(4, 64, torch.float32, device, gen)
    target[1], target[2] = 64, -5
    x = logits.clone().requires_grad_()
    loss = oink.cross_entropy(x, target, reduction="none")
    assert torch.isnan(loss[1]) and torch.isnan(loss[2])
    ok = torch.tensor([0, 3])
    assert torch.allclose(loss[ok].double(), reference(logits[ok], target[ok], "none"), atol=1e-5)
    loss.sum().backward()
    assert torch.isnan(x.grad[1]).all() and torch.isfinite(x.grad[ok]).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_inplace_backward_equals_out_of_place(device, options, gen):
    logits, target = make(8, 3000, torch.bfloat16, device, gen, ignored=2)
    grads = []
    for inplace in (False, True):
        x = logits.clone().requires_grad_()
        buffer = x.detach()
        loss = oink.cross_entropy(x, target, inplace_backward=inplace, **options)
        loss.backward()
        grads.append(x.grad)
        if inplace:
            assert torch.equal(buffer, x.grad)  # the gradient lives in the logits' buffer
    assert torch.equal(grads[0], grads[1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_fused_forward_and_gradient(device, options, gen):
    logits, target = make(6, 777, torch.float32, device, gen, ignored=1)
    cap = options.get("softcap") or 0.0
    smooth = options.get("label_smoothing", 0.0)
    loss, lse = torch.ops.oink.cross_entropy_forward.default(logits, target, IGNORE, smooth, cap)
    scale = torch.tensor([0.25], device=device)
    fused = logits.clone()
    loss2, lse2 = torch.ops.oink.cross_entropy_forward_backward_.default(
        fused, target, scale, IGNORE, smooth, cap
    )
    assert torch.equal(loss, loss2) and torch.equal(lse, lse2)
    dloss = torch.full((6,), 0.25, device=device)
    dlogits = torch.ops.oink.cross_entropy_backward.default(
        dloss, logits, target, lse, IGNORE, smooth, cap
    )
    assert torch.allclose(fused, dlogits, rtol=1e-6, atol=1e-9)
    assert torch.all(fused[0] == 0)  # the ignored row


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
# registers, element-wise, the cluster (CTAs of 256 and 512, vector and element-wise), looped
@pytest.mark.parametrize("v", [1000, 4099, 128256, 262144, 50257, 262152])
@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_grad_in_forward_matches_float64(device, dtype, v, options, gen):
    """The gradient made in the forward pass over the logits, then scaled by the upstream
    gradient: 1 (scale_gradient_ touches nothing) and 0.375 (a second rounding of each element,
    one ulp more)."""
    m = 6
    if not within_budget(device, m, v):
        pytest.skip("over the CPU element budget")
    logits, target = make(m, v, dtype, device, gen, ignored=1)
    for reduction in ("mean", "sum"):
        for upstream in (1.0, 0.375):
            x = logits.clone().requires_grad_()
            z = x * 1  # the model's logits: a tensor autograd made
            buffer = z.detach()
            loss = oink.cross_entropy(
                z, target, reduction=reduction, grad_in_forward=True, **options
            )
            x64 = logits.double().requires_grad_()
            ref = reference(x64, target, reduction, **options)
            assert torch.allclose(loss.double(), ref, **tol(dtype, device)), (loss, ref)
            (loss * upstream).backward()
            (ref * upstream).backward()
            up = torch.tensor(upstream, dtype=torch.float64, device=device)
            if upstream == 1.0:
                assert torch.equal(x.grad, buffer)  # unscaled: the forward's gradient itself
            assert_gradient_close(x.grad, x64, target, up, reduction, dtype, options)


@pytest.mark.parametrize("device", DEVICES)
def test_grad_in_forward_writes_over_the_logits(device, gen):
    """The logits hold the gradient from the forward on; without grad nothing is written; the
    backward of the unfused path gives the same gradient for an upstream gradient of 1."""
    logits, target = make(8, 3000, torch.bfloat16, device, gen, ignored=2)
    x = logits.clone().requires_grad_()
    z = x * 1  # the model's logits: a tensor autograd made
    loss = oink.cross_entropy(z, target, label_smoothing=0.1, grad_in_forward=True)
    assert not torch.equal(z.detach(), logits)  # already the gradient
    loss.backward()
    y = logits.clone().requires_grad_()
    oink.cross_entropy(y * 1, target, label_smoothing=0.1).backward()
    assert torch.equal(x.grad, y.grad) and torch.equal(z.detach(), x.grad)
    with torch.no_grad():
        kept = logits.clone()
        oink.cross_entropy(kept, target, grad_in_forward=True)
    assert torch.equal(kept, logits)
    with pytest.raises(ValueError, match="grad_in_forward needs reduction 'mean' or 'sum'"):
        oink.cross_entropy(logits, target, reduction="none", grad_in_forward=True)
    # Scaled in place by the first backward: a second one through the graph is refused.
    x = logits.clone().requires_grad_()
    loss = oink.cross_entropy(x * 1, target, grad_in_forward=True)
    (loss * 2).backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="cannot run twice"):
        loss.backward()


@pytest.mark.parametrize("device", DEVICES)
def test_scale_gradient(device, gen):
    """g *= s in place over a row-strided view, each element rounded once from float32; s == 1
    leaves every bit (NaN and -0.0 included) as it was."""
    g = (torch.randn(70, 5000, generator=gen) * 1e-3).to(torch.bfloat16).to(device)
    g[3, 17], g[4, 19] = float("nan"), -0.0
    view = g[:, 8:4008]  # rows of 4000 elements, row stride 5000
    before = g.clone()
    torch.ops.oink.scale_gradient_.default(view, torch.ones(1, device=device))
    assert torch.equal(g.view(torch.int16), before.view(torch.int16))
    torch.ops.oink.scale_gradient_.default(view, torch.tensor([0.3], device=device))
    expected = (before[:, 8:4008].float() * 0.3).to(torch.bfloat16)
    torch.testing.assert_close(view, expected, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(g[:, :8], before[:, :8]) and torch.equal(g[:, 4008:], before[:, 4008:])
    with pytest.raises(ValueError, match="argument 'scale'.*one value"):
        torch.ops.oink.scale_gradient_.default(view, torch.ones(2, device=device))
    with pytest.raises(ValueError, match="argument 'scale'.*float32"):
        torch.ops.oink.scale_gradient_.default(view, torch.ones(1, device=device).double())
    opcheck(torch.ops.oink.scale_gradient_.default, (g.clone(), torch.tensor([0.5], device=device)))


@pytest.mark.parametrize("device", DEVICES)
def test_scale_in_the_gradients_dtype(device, gen):
    """A bfloat16 scale (autograd's seed of a bfloat16 loss) is read as it is: the same bits as
    the float32 scale of the same value; a scale of a third dtype is refused."""
    g = (torch.randn(9, 3000, generator=gen) * 1e-3).to(torch.bfloat16).to(device)
    results = []
    for scale in (torch.tensor([0.375], device=device), torch.tensor(0.375).bfloat16().to(device)):
        h = g.clone()
        torch.ops.oink.scale_gradient_.default(h, scale)
        results.append(h)
    assert torch.equal(results[0], results[1]) and not torch.equal(results[0], g)
    unit = g.clone()
    torch.ops.oink.scale_gradient_.default(
        unit, torch.ones((), dtype=torch.bfloat16, device=device)
    )
    assert torch.equal(unit.view(torch.int16), g.view(torch.int16))
    with pytest.raises(ValueError, match="argument 'scale'.*float32 or grad's dtype"):
        torch.ops.oink.scale_gradient_.default(g, torch.ones(1, dtype=torch.float16, device=device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows", [0, 1, 7, 5000])
def test_count_and_reduced_loss(device, rows, gen):
    """cross_entropy_count: [count, 1 / count] of the non-ignored targets, exact; reduce_loss: the
    rows' sum (over the count for the mean) within one rounding of the float64 result, in the
    dtype asked for, the same bits on every call."""
    target = torch.randint(0, 50, (rows,), generator=gen)
    target[::3] = IGNORE
    target = target.to(device)
    count = torch.ops.oink.cross_entropy_count.default(target, IGNORE, torch.float32)
    n = int((target != IGNORE).sum())
    assert count.dtype == torch.float32 and count.shape == (2,)
    assert count[0].item() == n
    assert torch.equal(
        count[1:], torch.tensor([n], dtype=torch.float32, device=device).reciprocal()
    )
    loss_rows = (torch.rand(rows, generator=gen) * 10).to(device)
    loss_rows[target == IGNORE] = 0  # as the kernels leave ignored rows: all ignored is 0 / 0
    for dtype in DTYPES:
        for divisor in (None, count):
            got = torch.ops.oink.reduce_loss.default(loss_rows, divisor, dtype)
            assert got.dtype == dtype and got.shape == ()
            want = loss_rows.double().sum() / (n if divisor is not None else 1)
            if rows == 0 or (divisor is not None and n == 0):
                assert torch.isnan(got) if divisor is not None else got.item() == 0
                continue
            assert torch.allclose(got.double(), want, rtol=torch.finfo(dtype).eps, atol=0)
            assert torch.equal(got, torch.ops.oink.reduce_loss.default(loss_rows, divisor, dtype))
    opcheck(torch.ops.oink.cross_entropy_count.default, (target, IGNORE, torch.float32))
    if n > 0:  # opcheck compares without equal_nan
        opcheck(torch.ops.oink.reduce_loss.default, (loss_rows, count, torch.bfloat16))


def test_count_and_reduced_loss_errors():
    target, rows = torch.randint(0, 9, (6,)), torch.rand(6)
    with pytest.raises(ValueError, match="argument 'target'.*int64"):
        torch.ops.oink.cross_entropy_count.default(target.int(), IGNORE, torch.float32)
    with pytest.raises(ValueError, match="argument 'target'.*1-D"):
        torch.ops.oink.cross_entropy_count.default(target.view(2, 3), IGNORE, torch.float32)
    with pytest.raises(ValueError, match="argument 'dtype'.*float32 or float64"):
        torch.ops.oink.cross_entropy_count.default(target, IGNORE, torch.float16)
    count = torch.ops.oink.cross_entropy_count.default(target, IGNORE, torch.float32)
    with pytest.raises(ValueError, match="argument 'count'.*loss_rows' dtype"):
        torch.ops.oink.reduce_loss.default(rows, count.double(), torch.float32)
    with pytest.raises(ValueError, match="argument 'loss_rows'.*float32 or float64"):
        torch.ops.oink.reduce_loss.default(rows.half(), None, torch.float32)
    with pytest.raises(ValueError, match="argument 'dtype'"):
        torch.ops.oink.reduce_loss.default(rows, None, torch.int32)
    with pytest.raises(RuntimeError, match="use oink.cross_entropy"):
        torch.ops.oink.reduce_loss.default(rows.requires_grad_(), None, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_fused_gradient_without_a_scale(device, gen):
    """grad_scale None is a scale of 1 (the sum's fused gradient): the same bits as ones."""
    logits, target = make(5, 900, torch.bfloat16, device, gen, ignored=1)
    outs = []
    for scale in (None, torch.ones(1, device=device)):
        g = logits.clone()
        loss, lse = torch.ops.oink.cross_entropy_forward_backward_.default(
            g, target, scale, IGNORE, 0.1, 0.0
        )
        outs.append((g, loss, lse))
    assert all(torch.equal(a, b) for a, b in zip(*outs, strict=True))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_grad_in_forward(device, gen):
    logits, target = make(8, 300, torch.float32, device, gen, ignored=1)
    w = torch.eye(300, device=device).requires_grad_()
    fn = torch.compile(lambda t, w: oink.cross_entropy(t @ w, target, grad_in_forward=True))
    fn(logits, w).backward()
    w2 = w.detach().clone().requires_grad_()
    oink.cross_entropy(logits @ w2, target).backward()
    assert torch.allclose(w.grad, w2.grad, rtol=1e-5, atol=1e-7)  # two GEMM kernels


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic(device, gen):
    logits, target = make(64, 5000, torch.bfloat16, device, gen, ignored=3)
    results = []
    for _ in range(2):
        x = logits.clone().requires_grad_()
        loss = oink.cross_entropy(x, target, label_smoothing=0.1)
        loss.backward()
        results.append((loss, x.grad))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("v", [5000, 128256])
def test_batch_invariance(device, v, gen):
    # A row's loss, lse and gradient do not depend on how many rows the call holds.
    logits, target = make(16, v, torch.bfloat16, device, gen, ignored=2)
    loss, lse = torch.ops.oink.cross_entropy_forward.default(logits, target, IGNORE, 0.1, 0.0)
    for r in (0, 5, 15):
        one, one_lse = torch.ops.oink.cross_entropy_forward.default(
            logits[r : r + 1], target[r : r + 1], IGNORE, 0.1, 0.0
        )
        assert torch.equal(one, loss[r : r + 1]) and torch.equal(one_lse, lse[r : r + 1])
    whole = logits.clone().requires_grad_()
    oink.cross_entropy(whole, target, reduction="sum").backward()
    part = logits[3:7].clone().requires_grad_()
    oink.cross_entropy(part, target[3:7], reduction="sum").backward()
    assert torch.equal(part.grad, whole.grad[3:7])
    # The fused forward (CUDA: the cluster past registers) likewise.
    grads = []
    for rows in (slice(0, 16), slice(3, 7)):
        z = logits[rows].clone().requires_grad_()
        oink.cross_entropy(z * 1, target[rows], reduction="sum", grad_in_forward=True).backward()
        grads.append(z.grad)
    assert torch.equal(grads[1], grads[0][3:7])


def test_leading_dimensions(gen):
    logits = torch.randn(2, 3, 40, generator=gen)
    target = torch.randint(0, 40, (2, 3), generator=gen)
    loss = oink.cross_entropy(logits, target, reduction="none")
    assert loss.shape == (2, 3)
    ref = reference(logits.reshape(6, 40), target.reshape(6), "none").reshape(2, 3)
    assert torch.allclose(loss.double(), ref, atol=1e-6)


def test_gradcheck_cpu(gen):
    logits, target = make(4, 9, torch.float64, "cpu", gen, ignored=1)
    for options in OPTIONS:
        x = logits.clone().requires_grad_()
        assert torch.autograd.gradcheck(
            lambda t, o=options: oink.cross_entropy(t, target, reduction="sum", **o), (x,)
        )


@pytest.mark.parametrize("device", DEVICES)
def test_compile_and_backward(device, gen):
    logits, target = make(8, 300, torch.float32, device, gen, ignored=1)
    x = logits.clone().requires_grad_()
    fn = torch.compile(lambda t: oink.cross_entropy(t, target, label_smoothing=0.1))
    fn(x).backward()
    x2 = logits.clone().requires_grad_()
    oink.cross_entropy(x2, target, label_smoothing=0.1).backward()
    assert torch.equal(x.grad, x2.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device, gen):
    logits, target = make(5, 130, torch.float32, device, gen, ignored=1)
    args = (IGNORE, 0.1, 20.0)
    opcheck(torch.ops.oink.cross_entropy_forward.default, (logits, target, *args))
    loss, lse = torch.ops.oink.cross_entropy_forward.default(logits, target, *args)
    dloss = torch.rand(5, device=device)
    opcheck(torch.ops.oink.cross_entropy_backward.default, (dloss, logits, target, lse, *args))
    opcheck(
        torch.ops.oink.cross_entropy_backward_.default,
        (dloss, logits.clone(), target, lse, *args),
    )
    scale = torch.ones(1, device=device)
    opcheck(
        torch.ops.oink.cross_entropy_forward_backward_.default,
        (logits.clone(), target, scale, *args),
    )


def test_errors():
    logits, target = torch.randn(4, 10), torch.randint(0, 10, (4,))
    with pytest.raises(ValueError, match="argument 'logits'.*2-D"):
        torch.ops.oink.cross_entropy_forward.default(logits[0], target, IGNORE, 0.0, 0.0)
    with pytest.raises(ValueError, match="argument 'target'.*int64"):
        oink.cross_entropy(logits, target.int())
    with pytest.raises(ValueError, match="argument 'target'.*length M=4"):
        torch.ops.oink.cross_entropy_forward.default(logits, target[:3], IGNORE, 0.0, 0.0)
    with pytest.raises(ValueError, match="argument 'label_smoothing'.*\\[0, 1\\]"):
        oink.cross_entropy(logits, target, label_smoothing=1.5)
    with pytest.raises(ValueError, match="softcap"):
        oink.cross_entropy(logits, target, softcap=-1.0)
    with pytest.raises(ValueError, match="reduction"):
        oink.cross_entropy(logits, target, reduction="avg")
    with pytest.raises(ValueError, match="argument 'lse'.*float32"):
        torch.ops.oink.cross_entropy_backward.default(
            torch.ones(4), logits, target, torch.ones(4, dtype=torch.float64), IGNORE, 0.0, 0.0
        )
    with pytest.raises(RuntimeError, match="cross_entropy_forward.*argument 'logits' requires"):
        torch.ops.oink.cross_entropy_forward.default(
            logits.requires_grad_(), target, IGNORE, 0.0, 0.0
        )


@requires_cuda
@pytest.mark.parametrize("peer", ["quack", "liger_kernel"])
def test_against_peers(peer, gen):
    if importlib.util.find_spec(peer) is None:
        pytest.skip(f"{peer} is not installed")
    logits, target = make(256, 32000, torch.bfloat16, "cuda", gen, ignored=5)
    ours = oink.cross_entropy(logits, target, reduction="none").float()
    if peer == "quack":
        from quack.cross_entropy import cross_entropy as quack_ce

        theirs = quack_ce(logits, target, ignore_index=IGNORE, reduction="none").float()
    else:
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction

        theirs = LigerCrossEntropyFunction.apply(logits, target, None, IGNORE, 0.0, 0.0, "none")[
            0
        ].float()
    assert torch.allclose(ours, theirs, rtol=2e-2, atol=2e-2)
