"""The fused op on every layout it accepts, with grad mode off and on: x and the residual each a
view of a larger buffer (padded rows, head views, transposed and gapped views, an unaligned base,
both halves of one buffer). Without grad, results match PyTorch's own in-place ops on the same
views in float64, elements outside the views left alone; with grad mode on, dense tensors get the
same results and gradients, and a view is refused before anything is written (docs/contract.md)."""

import pytest
import torch

import oink

EPS = 1e-6

# name -> (buffer shape, the view of a buffer that x or the residual is); every view [.., 64]
# or [.., 24], [.., 32], [.., 40] of its own buffer, written in place.
LAYOUTS = {
    "contiguous": ((3, 4, 32), lambda b: b),
    "padded_rows": ((6, 40), lambda b: b[:, :32]),
    "qkv_head_view": ((5, 12 * 32), lambda b: b[:, 4 * 32 : 8 * 32].view(5, 4, 32)),
    "transposed_bhsd": ((2, 5, 4, 32), lambda b: b.transpose(1, 2)),
    "row_blocks_with_gaps": ((4, 6, 32), lambda b: b[:, :3]),
    "leading_dims_permuted": ((3, 2, 32), lambda b: b.transpose(0, 1)),
    "four_leading_dims": ((4, 4, 4, 4, 32), lambda b: b[::2, ::2, ::2, ::2]),
    "unaligned_head_view": ((7 * 8 * 40 + 1,), lambda b: b[1:].view(7, 8, 40)[:, :5, :32]),
}

# (x's layout, the residual's layout): each layout for both, and each against a dense tensor.
PAIRS = sorted({(name, name) for name in LAYOUTS} | {(name, "contiguous") for name in LAYOUTS})
PAIRS += [("contiguous", name) for name in LAYOUTS if name != "contiguous"]


def shape_of(layout):
    buffer_shape, view = LAYOUTS[layout]
    return view(torch.empty(buffer_shape)).shape


def make_case(x_layout, r_layout, gen):
    """(x leaf buffer, residual leaf buffer, weight leaf, x view fn, residual view fn) in float64,
    or None when the two layouts' shapes differ."""
    if shape_of(x_layout) != shape_of(r_layout):
        return None
    (xs, xv), (rs, rv) = LAYOUTS[x_layout], LAYOUTS[r_layout]
    a = torch.randn(xs, generator=gen, dtype=torch.float64)
    b = torch.randn(rs, generator=gen, dtype=torch.float64)
    n = shape_of(x_layout)[-1]
    w = 1 + 0.5 * torch.randn(n, generator=gen, dtype=torch.float64)
    return a, b, w, xv, rv


def run(fused, a, b, w, x_view, r_view, grad):
    """Leaves a, b, w -> buffers computed from them (a layer's outputs, not leaves) -> the op on
    views of the buffers -> a loss over every element of both buffers, gaps included. Returns the
    buffers after the op and, with grad, the leaves' gradients."""
    leaves = [t.detach().clone().requires_grad_(grad) for t in (a, b, w)]
    la, lb, lw = leaves
    with torch.set_grad_enabled(grad):
        x_buffer, r_buffer = la * 1.5, lb * 0.5
        fused(x_view(x_buffer), r_view(r_buffer), lw)
        if not grad:
            return (x_buffer, r_buffer), None
        kx = torch.arange(x_buffer.numel(), dtype=x_buffer.dtype).reshape(x_buffer.shape)
        kr = torch.arange(r_buffer.numel(), dtype=r_buffer.dtype).reshape(r_buffer.shape)
        loss = (x_buffer * torch.cos(kx)).sum() + (r_buffer * torch.sin(kr)).sum()
        grads = torch.autograd.grad(loss, leaves)
    return (x_buffer.detach(), r_buffer.detach()), grads


def oink_fused(x, residual, w):
    oink.fused_add_rms_norm(x, residual, w, EPS)


def torch_fused(x, residual, w):
    """The op's definition with PyTorch's in-place ops, whose autograd on views is the
    reference."""
    residual.add_(x)
    x.copy_(torch.nn.functional.rms_norm(residual, residual.shape[-1:], w, EPS))


TOL = {"rtol": 1e-12, "atol": 1e-12}


@pytest.mark.parametrize(("x_layout", "r_layout"), PAIRS, ids=[f"x_{x}-res_{r}" for x, r in PAIRS])
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_views_match_pytorchs_in_place_ops(x_layout, r_layout, grad, gen):
    case = make_case(x_layout, r_layout, gen)
    if case is None:
        pytest.skip("the layouts' shapes differ")
    a, b, w, x_view, r_view = case
    if grad and (x_layout, r_layout) != ("contiguous", "contiguous"):
        # With grad mode on, a view is refused before anything is written.
        x_buffer, r_buffer = a * 1.5, b * 0.5
        before = (x_buffer.clone(), r_buffer.clone())
        lw = w.clone().requires_grad_()
        name = "x" if x_layout != "contiguous" else "residual"
        with pytest.raises(RuntimeError, match=f"argument '{name}' is a view"):
            oink.fused_add_rms_norm(x_view(x_buffer), r_view(r_buffer), lw, EPS)
        for after, was in zip((x_buffer, r_buffer), before, strict=True):
            assert torch.equal(after.view(torch.uint8), was.view(torch.uint8))
        return
    got, got_grads = run(oink_fused, a, b, w, x_view, r_view, grad)
    want, want_grads = run(torch_fused, a, b, w, x_view, r_view, grad)
    # Elements outside the views keep a * 1.5 and b * 0.5 exactly: the comparison covers them.
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e, **TOL)
    if grad:
        for g, e in zip(got_grads, want_grads, strict=True):
            torch.testing.assert_close(g, e, **TOL)


def test_x_and_residual_in_one_buffer(gen):
    """Two disjoint column blocks of one buffer, as a fused activation buffer holds them: computed
    as PyTorch's in-place ops do without grad, refused untouched with a weight that requires
    grad."""
    a = torch.randn(6, 80, generator=gen, dtype=torch.float64)
    w = 1 + 0.5 * torch.randn(32, generator=gen, dtype=torch.float64)
    results = []
    for fused in (oink_fused, torch_fused):
        buffer = a.clone()
        fused(buffer[:, 8:40], buffer[:, 48:80], w)
        results.append(buffer)
    torch.testing.assert_close(results[0], results[1], **TOL)
    buffer = a.clone()
    with pytest.raises(RuntimeError, match="argument 'x' is a view"):
        oink_fused(buffer[:, 8:40], buffer[:, 48:80], w.clone().requires_grad_())
    assert torch.equal(buffer.view(torch.uint8), a.view(torch.uint8))


def test_a_tensor_saved_before_the_op_is_reported_stale(gen):
    """Without any tensor that requires grad the op still counts as an in-place update: a
    backward that saved x before it raises instead of reading the new values."""
    a = torch.randn(4, 32, generator=gen, dtype=torch.float64, requires_grad=True)
    x = torch.randn(4, 32, generator=gen, dtype=torch.float64)
    residual = torch.randn(4, 32, generator=gen, dtype=torch.float64)
    y = (a * x).sum()  # saves x for a's gradient
    oink.fused_add_rms_norm(x, residual, None, EPS)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
