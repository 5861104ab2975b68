"""Gradients: oink.rmsnorm and oink.layernorm (CPU and CUDA) differentiate through their
_forward and _backward ops, and the in-place oink.fused_add_rms_norm (CPU and CUDA) records
itself as an in-place op would. Every call without a backward raises on inputs
that require grad, with grad mode on, instead of returning outputs whose gradients would be
silently None.

These are registered at the dispatcher's Autograd key, so torch.ops.oink.* behaves like the
wrappers. Under torch.inference_mode() (vLLM) the key is skipped and this costs nothing;
otherwise it costs one Python call per op before the kernel is dispatched.
"""

import torch

_BELOW_AUTOGRAD = torch._C._after_autograd_keyset
_LIBRARY = torch.library.Library("oink", "IMPL")  # kept alive: the registrations live with it


def _needing_grad(tensors) -> list[str]:
    if not torch.is_grad_enabled():
        return []
    return [name for name, t in tensors if t is not None and t.requires_grad]


def _refuse(op: str, names: list[str], why: str) -> None:
    raise RuntimeError(
        f"oink.{op}: argument '{names[0]}' requires grad, but {why}, so its gradients would be "
        "silently lost. Call oink under torch.no_grad() or torch.inference_mode() for inference, "
        "or use torch.nn.functional.rms_norm for training."
    )


def _dense(dy):
    """The upstream gradient as the kernels read rows: dense, its last dimension contiguous
    (sum().backward() hands an expanded tensor of zero strides, which an empty tensor keeps
    through .contiguous())."""
    if dy.is_contiguous() and dy.numel() > 0:
        return dy
    return dy.clone(memory_format=torch.contiguous_format)


# --- rmsnorm: differentiable on the CPU and on CUDA ------------------------------------------


def _rmsnorm_forward_setup(ctx, inputs, output):
    x, weight, _ = inputs
    _, rstd = output
    ctx.save_for_backward(x, weight, rstd)


def _rmsnorm_forward_backward(ctx, dy, drstd):
    x, weight, rstd = ctx.saved_tensors
    dx = dweight = None
    if dy is not None:
        dx, dweight = torch.ops.oink.rmsnorm_backward.default(_dense(dy), x, weight, rstd)
    if drstd is not None:
        # rstd = (mean(x^2) + eps)^(-1/2): d rstd / dx = -rstd^3 * x / N.
        wide = x.to(rstd.dtype)
        extra = (-(drstd * rstd**3) / x.shape[-1]).unsqueeze(-1) * wide
        dx = extra.to(x.dtype) if dx is None else (dx.to(rstd.dtype) + extra).to(x.dtype)
    if weight is not None and dweight is None and ctx.needs_input_grad[1]:
        dweight = torch.zeros_like(weight)
    return dx, dweight, None


torch.library.register_autograd(
    "oink::rmsnorm_forward", _rmsnorm_forward_backward, setup_context=_rmsnorm_forward_setup
)


def _refuse_rmsnorm_backward(keyset, dy, x, weight, rstd):
    names = _needing_grad((("dy", dy), ("x", x), ("weight", weight), ("rstd", rstd)))
    if names:
        _refuse("rmsnorm_backward", names, "oink has no double-backward")
    return torch.ops.oink.rmsnorm_backward.default.redispatch(
        keyset & _BELOW_AUTOGRAD, dy, x, weight, rstd
    )


def _rmsnorm(keyset, x, weight, eps):
    names = _needing_grad((("x", x), ("weight", weight)))
    if names:
        # Through the op that also returns rstd, whose autograd formula is registered above.
        return torch.ops.oink.rmsnorm_forward.default(x, weight, eps)[0]
    return torch.ops.oink.rmsnorm.default.redispatch(keyset & _BELOW_AUTOGRAD, x, weight, eps)


# --- layernorm: differentiable on the CPU and on CUDA ------------------------------------------


def _layernorm_forward_setup(ctx, inputs, output):
    x, weight, bias, _ = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, weight, bias, mean, rstd)


def _layernorm_forward_backward(ctx, dy, dmean, drstd):
    x, weight, bias, mean, rstd = ctx.saved_tensors
    dx = dweight = dbias = None
    if dy is not None:
        dx, dweight, dbias = torch.ops.oink.layernorm_backward.default(
            _dense(dy), x, weight, bias, mean, rstd
        )
    if dmean is not None or drstd is not None:
        # mean = sum(x) / N: d mean / dx = 1 / N; rstd = (var + eps)^(-1/2):
        # d rstd / dx = -rstd^3 * (x - mean) / N.
        n = x.shape[-1]
        centered = x.to(rstd.dtype) - mean.unsqueeze(-1)
        extra = torch.zeros_like(centered)
        if dmean is not None:
            extra = extra + (dmean / n).unsqueeze(-1)
        if drstd is not None:
            extra = extra - (drstd * rstd**3 / n).unsqueeze(-1) * centered
        dx = extra.to(x.dtype) if dx is None else (dx.to(rstd.dtype) + extra).to(x.dtype)
    if weight is not None and dweight is None and ctx.needs_input_grad[1]:
        dweight = torch.zeros_like(weight)
    if bias is not None and dbias is None and ctx.needs_input_grad[2]:
        dbias = torch.zeros_like(bias)
    return dx, dweight, dbias, None


torch.library.register_autograd(
    "oink::layernorm_forward", _layernorm_forward_backward, setup_context=_layernorm_forward_setup
)


def _layernorm(keyset, x, weight, bias, eps):
    names = _needing_grad((("x", x), ("weight", weight), ("bias", bias)))
    if names:
        # Through the op that also returns the statistics, whose autograd formula is above.
        return torch.ops.oink.layernorm_forward.default(x, weight, bias, eps)[0]
    return torch.ops.oink.layernorm.default.redispatch(
        keyset & _BELOW_AUTOGRAD, x, weight, bias, eps
    )


def _refuse_layernorm_backward(keyset, dy, x, weight, bias, mean, rstd):
    tensors = (("dy", dy), ("x", x), ("weight", weight), ("bias", bias))
    names = _needing_grad((*tensors, ("mean", mean), ("rstd", rstd)))
    if names:
        _refuse("layernorm_backward", names, "oink has no double-backward")
    return torch.ops.oink.layernorm_backward.default.redispatch(
        keyset & _BELOW_AUTOGRAD, dy, x, weight, bias, mean, rstd
    )


# --- fused_add_rms_norm: differentiable on the CPU and on CUDA -----------------------------------


class _AddIntoResidual(torch.autograd.Function):
    """The fused kernel, recorded as its first step: residual <- x + residual, in place. The
    kernel also writes x; _NormIntoX records that second step. Two Functions, each marking one
    tensor dirty and returning it, because autograd takes an in-place update of a view (a padded
    row view, a head view) only from a Function with a single output."""

    # The tensor updated in place comes first: for a view, autograd routes the gradient of a
    # Function's first input into the base's slice (CopySlices).
    @staticmethod
    def forward(ctx, residual, x, weight, eps):
        torch.ops.oink.fused_add_rms_norm.default(x, residual, weight, eps)
        ctx.mark_dirty(residual)
        return residual

    @staticmethod
    def backward(ctx, dsum):
        # residual' = x + residual: the sum's gradient reaches both.
        return dsum, dsum, None, None


class _NormIntoX(torch.autograd.Function):
    """The fused op's second step as autograd records it: x <- rmsnorm(residual'), which the
    kernel has already written. The backward needs the rounded sum residual' and its rstd. The
    residual buffer is usually updated in place again by the next layer, so the sum is saved as
    a copy, not as the buffer (one M x N copy, what an unfused x + residual would keep anyway);
    rstd is computed again in the backward by rmsnorm_forward, from the same bits with the same
    reduction, so it is the kernel's. x, updated in place, is the first input (see above)."""

    @staticmethod
    def forward(ctx, x, summed, weight, eps):
        ctx.mark_dirty(x)
        ctx.save_for_backward(summed.clone(), weight)
        ctx.eps = eps
        return x

    @staticmethod
    def backward(ctx, dout):
        summed, weight = ctx.saved_tensors
        _, rstd = torch.ops.oink.rmsnorm_forward.default(summed, None, ctx.eps)
        dsum, dweight = torch.ops.oink.rmsnorm_backward.default(_dense(dout), summed, weight, rstd)
        # x's old value does not reach x' (it reaches residual', through _AddIntoResidual).
        return None, dsum, dweight, None


def _updated_in_place_refusal(name, t):
    """Why autograd would refuse to update `t` in place (after the kernel had run), or None."""
    base = t._base if t._is_view() else None
    if t.is_leaf and t.requires_grad:
        return f"argument '{name}' is a leaf tensor that requires grad"
    if base is not None and base.is_leaf and base.requires_grad:
        return f"argument '{name}' is a view of a leaf tensor that requires grad"
    return None


def _fused_add_rms_norm(keyset, x, residual, weight, eps):
    names = _needing_grad((("x", x), ("residual", residual), ("weight", weight)))
    if names:
        for name, t in (("x", x), ("residual", residual)):
            why = _updated_in_place_refusal(name, t)
            if why:
                # Checked before the kernel runs: autograd would raise after it, with x and
                # residual already overwritten.
                raise RuntimeError(
                    f"oink.fused_add_rms_norm: {why}, and the op updates it in place, which "
                    "autograd refuses for such tensors (as for any in-place op). Pass tensors "
                    "computed from the leaves (e.g. a layer's output), or clones of them."
                )
        for name, t in (("x", x), ("residual", residual)):
            if t._is_view():
                # Checked before the kernel runs. Autograd's record of an in-place update of a view
                # through these Functions loses the base's gradient outside some views (gapped
                # and multi-dimensional ones), so none is taken rather than some silently wrong.
                raise RuntimeError(
                    f"oink.fused_add_rms_norm: argument '{name}' is a view of another tensor, and "
                    "with grad mode on the op does not update views in place. Pass tensors that "
                    "are not views (e.g. .clone() them), or call it under torch.no_grad() or "
                    "torch.inference_mode(), where every layout is taken."
                )
        summed = _AddIntoResidual.apply(residual, x, weight, eps)
        _NormIntoX.apply(x, summed, weight, eps)
        return None
    torch.ops.oink.fused_add_rms_norm.default.redispatch(
        keyset & _BELOW_AUTOGRAD, x, residual, weight, eps
    )
    # As any in-place op: a tensor saved for a backward before this call is now stale, and the
    # backward must say so instead of reading the new values.
    torch.autograd.graph.increment_version((x, residual))
    return None


# --- rmsnorm.out: no gradient --------------------------------------------------------------------


def _rmsnorm_out(keyset, x, weight, eps, *, out):
    names = _needing_grad((("x", x), ("weight", weight), ("out", out)))
    if names:
        _refuse("rmsnorm", names, "the out= form has no gradient (call it without out=)")
    return torch.ops.oink.rmsnorm.out.redispatch(keyset & _BELOW_AUTOGRAD, x, weight, eps, out=out)


_LIBRARY.impl("rmsnorm", _rmsnorm, "Autograd", with_keyset=True)
_LIBRARY.impl("rmsnorm.out", _rmsnorm_out, "Autograd", with_keyset=True)
_LIBRARY.impl("rmsnorm_backward", _refuse_rmsnorm_backward, "Autograd", with_keyset=True)
_LIBRARY.impl("fused_add_rms_norm", _fused_add_rms_norm, "Autograd", with_keyset=True)
# vLLM's built-in provider's names for the same ops: the same autograd behaviour.
_LIBRARY.impl(
    "rms_norm",
    lambda keyset, x, weight, eps: torch.ops.oink.rmsnorm.default(x, weight, eps),
    "Autograd",
    with_keyset=True,
)
_LIBRARY.impl(
    "fused_add_rms_norm_",
    lambda keyset, x, residual, weight, eps: torch.ops.oink.fused_add_rms_norm.default(
        x, residual, weight, eps
    ),
    "Autograd",
    with_keyset=True,
)
_LIBRARY.impl("layernorm", _layernorm, "Autograd", with_keyset=True)
_LIBRARY.impl("layernorm_backward", _refuse_layernorm_backward, "Autograd", with_keyset=True)


# --- softmax and cross-entropy: their building blocks have no formula of their own ----------
# (oink.softmax differentiates through oink::softmax's formula, python/oink/softmax.py;
# oink.cross_entropy and oink.linear_cross_entropy are autograd Functions over these ops,
# python/oink/cross_entropy.py, which call them with grad mode off).


def _refusing(op, arg_names, why):
    overload = getattr(torch.ops.oink, op).default

    def guard(keyset, *args):
        names = _needing_grad(zip(arg_names, args, strict=False))
        if names:
            _refuse(op, names, why)
        return overload.redispatch(keyset & _BELOW_AUTOGRAD, *args)

    _LIBRARY.impl(op, guard, "Autograd", with_keyset=True)


_refusing("softmax_backward", ("dy", "y"), "oink has no double-backward")
_refusing("cross_entropy_forward", ("logits",), "it returns per-row values; use oink.cross_entropy")
_refusing(
    "cross_entropy_forward_backward_",
    ("logits",),
    "it overwrites the logits with their gradient; use oink.cross_entropy",
)
_refusing("cross_entropy_backward", ("dloss", "logits"), "oink has no double-backward")
_refusing("cross_entropy_backward_", ("dloss", "logits"), "oink has no double-backward")
_refusing("scale_gradient_", ("grad", "scale"), "oink has no double-backward")
_refusing(
    "reduce_loss",
    ("loss_rows",),
    "it reduces the per-row losses oink.cross_entropy makes; use oink.cross_entropy",
)
