"""oink.linear_cross_entropy against F.linear + F.cross_entropy in float64: the loss and the
gradients of the hidden states, the weight and the bias for every reduction and option, over
one chunk and many; determinism; the chunking rule as oink shows it; the errors."""

import weakref

import pytest
import torch
import torch.nn.functional as F

import oink

from conftest import DEVICES

IGNORE = -100


def make(m, h, v, dtype, device, gen, ignored=2, bias=True):
    hidden = (torch.randn(m, h, generator=gen)).to(dtype).to(device)
    weight = (torch.randn(v, h, generator=gen) / h**0.5).to(dtype).to(device)
    b = (torch.randn(v, generator=gen) * 0.1).to(dtype).to(device) if bias else None
    target = torch.randint(0, v, (m,), generator=gen)
    target[:ignored] = IGNORE
    return hidden, weight, b, target.to(device)


def run(fn, hidden, weight, bias, target, upstream, **options):
    leaves = [t.detach().clone().requires_grad_() for t in (hidden, weight)]
    b = None if bias is None else bias.detach().clone().requires_grad_()
    loss = fn(leaves[0], leaves[1], target, b, **options)
    (loss.double() * upstream).sum().backward()
    return loss, leaves[0].grad, leaves[1].grad, None if b is None else b.grad


def unfused(hidden, weight, target, bias, ignore_index=IGNORE, softcap=None, **options):
    z = F.linear(hidden, weight, bias)
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    return F.cross_entropy(z, target, ignore_index=ignore_index, **options)


OPTIONS = [{}, {"label_smoothing": 0.1}, {"softcap": 15.0}]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("options", OPTIONS, ids=str)
@pytest.mark.parametrize("chunk_rows", [None, 16])
def test_matches_float64(device, dtype, reduction, options, chunk_rows, gen):
    hidden, weight, bias, target = make(50, 32, 300, dtype, device, gen)
    shape = (50,) if reduction == "none" else ()
    upstream = torch.rand(shape, generator=gen, dtype=torch.float64).to(device)
    got = run(
        oink.linear_cross_entropy,
        hidden,
        weight,
        bias,
        target,
        upstream,
        reduction=reduction,
        chunk_rows=chunk_rows,
        **options,
    )
    ref = run(
        unfused,
        hidden.double(),
        weight.double(),
        bias.double(),
        target,
        upstream,
        reduction=reduction,
        **options,
    )
    rtol = 1e-5 if dtype == torch.float32 else 3e-2
    for g, r in zip(got, ref, strict=True):
        assert g.dtype == dtype
        scale = r.abs().max().clamp_min(1e-6)
        assert torch.allclose(g.double(), r, rtol=rtol, atol=rtol * scale.item()), (g, r)


@pytest.mark.parametrize("device", DEVICES)
def test_chunks_and_runs_agree(device, gen):
    # The same loss, to the bit, however the rows are chunked (each row is one kernel row), and
    # the same gradients on every run.
    hidden, weight, bias, target = make(70, 16, 200, torch.float32, device, gen)
    upstream = torch.ones((), dtype=torch.float64, device=device)
    losses = [
        run(oink.linear_cross_entropy, hidden, weight, bias, target, upstream, chunk_rows=c)[0]
        for c in (7, 32, None)
    ]
    assert torch.equal(losses[0], losses[1]) and torch.equal(losses[1], losses[2])
    a = run(oink.linear_cross_entropy, hidden, weight, bias, target, upstream, chunk_rows=16)
    b = run(oink.linear_cross_entropy, hidden, weight, bias, target, upstream, chunk_rows=16)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_one_chunk_of_logits_alive_at_a_time(monkeypatch, reduction, gen):
    # The loss's peak memory is one chunk's logits: each chunk's are freed before the next
    # chunk's are made, in the forward and in reduction='none''s backward (which remakes them).
    from oink import _cross_entropy

    alive, most = weakref.WeakSet(), []
    made = _cross_entropy._chunk_logits

    def chunk_logits(h, weight, bias):
        logits = made(h, weight, bias)
        alive.add(logits)
        most.append(len(alive))
        return logits

    monkeypatch.setattr(_cross_entropy, "_chunk_logits", chunk_logits)
    hidden, weight, bias, target = make(40, 8, 30, torch.float32, "cpu", gen)
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss = oink.linear_cross_entropy(h, w, target, bias, reduction=reduction, chunk_rows=8)
    loss.sum().backward()
    assert len(most) == (5 if reduction == "mean" else 10) and max(most) == 1


@pytest.mark.parametrize("reduction", ["sum", "none"])
def test_weight_gradient_written_whole_by_the_first_chunk(monkeypatch, reduction, gen):
    # dW's buffer is not zeroed: the first chunk's GEMM writes all of it. Filled with NaN before,
    # it must come out as the unfused loss's gradient; an empty batch gives zeros.
    from oink import _cross_entropy

    made = _cross_entropy._weight_grad

    def poisoned(rows, weight):
        out = made(rows, weight)
        return out.fill_(float("nan")) if rows > 0 else out

    monkeypatch.setattr(_cross_entropy, "_weight_grad", poisoned)
    hidden, weight, bias, target = make(40, 8, 30, torch.float64, "cpu", gen)
    upstream = torch.rand(40 if reduction == "none" else (), generator=gen, dtype=torch.float64)
    opts = {"reduction": reduction}
    got = run(
        oink.linear_cross_entropy, hidden, weight, bias, target, upstream, chunk_rows=16, **opts
    )
    want = run(unfused, hidden, weight, bias, target, upstream, **opts)
    torch.testing.assert_close(got[2], want[2])
    no_rows = torch.ones((0,) if reduction == "none" else (), dtype=torch.float64)
    empty = run(oink.linear_cross_entropy, hidden[:0], weight, bias, target[:0], no_rows, **opts)
    assert torch.equal(empty[2], torch.zeros_like(weight))


def test_backward_runs_once(gen):
    # The gradients made in the forward are scaled in place: a second backward is refused.
    hidden, weight, bias, target = make(12, 8, 30, torch.float32, "cpu", gen)
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss = oink.linear_cross_entropy(h, w, target)
    (loss * 0.5).backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="cannot run twice"):
        loss.backward()


def test_no_grad_and_leading_dims(gen):
    hidden, weight, _, target = make(12, 8, 30, torch.float32, "cpu", gen, bias=False)
    with torch.no_grad():
        loss = oink.linear_cross_entropy(hidden.reshape(3, 4, 8), weight, target.reshape(3, 4))
    assert torch.allclose(loss.double(), unfused(hidden.double(), weight.double(), target, None))
    none = oink.linear_cross_entropy(hidden, weight, target, reduction="none")
    assert none.shape == (12,)


def test_explain():
    hidden = torch.empty(16384, 4096, dtype=torch.bfloat16, device="meta")
    weight = torch.empty(128256, 4096, dtype=torch.bfloat16, device="meta")
    assert oink.explain_linear_cross_entropy(hidden, weight) == (
        "linear_cross_entropy chunks=16 x 1024 rows (250 MiB of logits each)"
    )


def test_errors(gen):
    hidden, weight, bias, target = make(4, 8, 10, torch.float32, "cpu", gen)
    with pytest.raises(ValueError, match="weight must be \\[V, H\\]"):
        oink.linear_cross_entropy(hidden, weight[:, :5], target)
    with pytest.raises(ValueError, match="bias must be \\[V\\]"):
        oink.linear_cross_entropy(hidden, weight, target, bias[:3])
    with pytest.raises(ValueError, match="target must have"):
        oink.linear_cross_entropy(hidden, weight, target[:2])
    with pytest.raises(ValueError, match="chunk_rows"):
        oink.linear_cross_entropy(hidden, weight, target, chunk_rows=0)
