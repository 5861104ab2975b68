"""oink.cross_entropy and oink.linear_cross_entropy: F.cross_entropy's semantics (ignore_index,
label_smoothing, reduction; plus Gemma's logit softcap), differentiable on the CPU and CUDA.

The kernels return each row's loss and log-sum-exp (float32; float64 for float64 logits); the
reduction over rows is done here, in a fixed order (torch's sum), so the loss is deterministic.
"""

from __future__ import annotations

import torch

_REDUCTIONS = ("mean", "sum", "none")


def _check_options(op, reduction, label_smoothing, softcap):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"oink.{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if softcap is not None and not softcap > 0:
        raise ValueError(f"oink.{op}: softcap must be None or > 0, got {softcap!r}")
    return 0.0 if softcap is None else float(softcap), float(label_smoothing)


def _mean_count(target, ignore_index, reduction, wide):
    """[count, 1 / count] of the non-ignored rows for the mean, `wide` on target's device: one
    launch, no host sync (CUDA graphs hold it); the count exact, each value rounded once. None
    for the other reductions."""
    if reduction != "mean":
        return None
    return torch.ops.oink.cross_entropy_count.default(target, ignore_index, wide)


def _grad_scale(count):
    """The scale of the fused gradient: 1 / count (a view of the count's second value) for the
    mean, None (1) for the sum."""
    return None if count is None else count[1:]


def _reduce(loss_rows, count, reduction, dtype):
    """The rows' losses reduced as F.cross_entropy does (mean: over the `count` non-ignored rows,
    NaN when every row is ignored), in the logits' dtype: one launch (oink::reduce_loss, summed in
    float64 in a fixed order)."""
    if reduction == "none":
        # Converted only where the dtype differs: a no-op .to() returns its input, and an
        # autograd.Function whose output is such an alias got zero gradients under torch.compile.
        return loss_rows if loss_rows.dtype == dtype else loss_rows.to(dtype)
    return torch.ops.oink.reduce_loss.default(loss_rows, count, dtype)


def _row_grads(grad, reduction, count, rows, dtype):
    """The upstream gradient of each row's loss, contiguous [rows] in `dtype`."""
    grad = grad.to(dtype)
    if reduction == "none":
        return grad.reshape(rows).contiguous()
    if reduction == "mean":
        grad = grad / count[0]
    return grad.reshape(1).expand(rows).contiguous()


def _scale_once(ctx, op, grads, upstream):
    """The gradients made in the forward pass times the upstream gradient (a scalar), in place:
    nothing is read or written where it is 1 (scale_gradient_ tests it on the device). In place,
    so a second backward through the same graph (retain_graph) would scale them twice: refused."""
    if getattr(ctx, "scaled", False):
        raise RuntimeError(
            f"oink.{op}: backward ran through this graph already; the gradients it made in the "
            "forward pass were scaled in place then, so it cannot run twice (retain_graph)"
        )
    ctx.scaled = True
    for g in grads:
        if g is None:
            continue
        wide = torch.float64 if g.dtype == torch.float64 else torch.float32
        # Taken in g's dtype as it comes (autograd's seed of a 16-bit loss): no cast's launch.
        factor = upstream.detach().reshape(1)
        if factor.dtype not in (g.dtype, wide):
            factor = factor.to(wide)
        if g.dim() > 0 and g.stride(-1) == 1:
            torch.ops.oink.scale_gradient_.default(g, factor)
        else:  # a layout scale_gradient_ does not take (a transposed weight's gradient)
            g.mul_(factor.to(g.dtype))


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, logits, target, ignore_index, label_smoothing, softcap, reduction, inplace, in_forward
    ):
        options = (ignore_index, label_smoothing, softcap)
        ctx.options = (options, reduction, inplace)
        ctx.in_forward = in_forward and ctx.needs_input_grad[0]
        wide = torch.float64 if logits.dtype == torch.float64 else torch.float32
        count = _mean_count(target, ignore_index, reduction, wide)
        if ctx.in_forward:
            # The gradient of the reduced loss, made in this pass over the logits and written over
            # them; backward applies the upstream gradient (scale_gradient_).
            loss_rows, _ = torch.ops.oink.cross_entropy_forward_backward_.default(
                logits, target, _grad_scale(count), *options
            )
            ctx.save_for_backward(logits)
            return _reduce(loss_rows, count, reduction, logits.dtype)
        loss_rows, lse = torch.ops.oink.cross_entropy_forward.default(logits, target, *options)
        ctx.save_for_backward(logits, target, lse, count)
        return _reduce(loss_rows, count, reduction, logits.dtype)

    @staticmethod
    def backward(ctx, grad):
        options, reduction, inplace = ctx.options
        if ctx.in_forward:
            (dlogits,) = ctx.saved_tensors
            _scale_once(ctx, "cross_entropy", (dlogits,), grad)
            return dlogits, None, None, None, None, None, None, None
        logits, target, lse, count = ctx.saved_tensors
        dloss = _row_grads(grad, reduction, count, logits.shape[0], lse.dtype)
        args = (target, lse, *options)
        if inplace:
            torch.ops.oink.cross_entropy_backward_.default(dloss, logits, *args)
            dlogits = logits
        else:
            dlogits = torch.ops.oink.cross_entropy_backward.default(dloss, logits, *args)
        return dlogits, None, None, None, None, None, None, None


def cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    softcap: float | None = None,
    reduction: str = "mean",
    inplace_backward: bool = False,
    grad_in_forward: bool = False,
) -> torch.Tensor:
    """``F.cross_entropy(z, target, ignore_index=, label_smoothing=, reduction=)`` with
    ``z = softcap * tanh(logits / softcap)`` when softcap is given (Gemma 2/3), else the logits.

    logits: [..., V] float16/bfloat16/float32 (float64 on the CPU), the class dimension last and
    contiguous; target: int64 of logits.shape[:-1]. The loss has the logits' dtype. A target
    outside [0, V) that is not ignore_index is never read past: its row's loss is NaN (the check
    costs nothing; raising would need a device-to-host sync). inplace_backward=True writes the
    gradient over the logits' buffer in the backward pass (no [M, V] allocation): the logits must
    not be used after backward. grad_in_forward=True (reduction 'mean' or 'sum') makes the
    gradient in the forward pass, from the same read of the logits, and writes it over them (as
    Liger does): the step reads and writes the logits once, and the logits must not be used
    after the forward. Backward then multiplies by the upstream gradient, a kernel that returns
    at once when it is 1. Without grad (logits not requiring it), it changes nothing.
    """
    softcap, label_smoothing = _check_options("cross_entropy", reduction, label_smoothing, softcap)
    if grad_in_forward and reduction == "none":
        raise ValueError(
            "oink.cross_entropy: grad_in_forward needs reduction 'mean' or 'sum' (one upstream "
            "gradient for every row), got 'none'"
        )
    vocab = logits.shape[-1] if logits.dim() > 0 else 0
    loss = _CrossEntropy.apply(
        logits.reshape(-1, vocab),
        target.reshape(-1),
        int(ignore_index),
        label_smoothing,
        softcap,
        reduction,
        bool(inplace_backward),
        bool(grad_in_forward),
    )
    return loss.reshape(target.shape) if reduction == "none" else loss


def explain_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor) -> str:
    """How oink.linear_cross_entropy would chunk these hidden states against this weight."""
    rows = hidden.numel() // max(hidden.shape[-1], 1)
    *_, line = torch.ops.oink.plan_linear_cross_entropy.default(
        rows, weight.shape[0], weight.shape[-1], hidden.element_size()
    )
    return line


def _chunk_logits(h, weight, bias):
    return torch.mm(h, weight.t()) if bias is None else torch.addmm(bias, h, weight.t())


def _weight_grad(rows: int, weight: torch.Tensor) -> torch.Tensor:
    """dW's buffer: written whole by the first chunk's GEMM (_add_chunk_grad), so not zeroed
    unless no chunk runs. A zeroed [V, H] (1 GiB at Llama-3's head in bf16) would cost a write
    of it, and the first chunk's accumulation a read."""
    return torch.empty_like(weight) if rows > 0 else torch.zeros_like(weight)


def _add_chunk_grad(dweight: torch.Tensor, first: bool, dlogits: torch.Tensor, h: torch.Tensor):
    """dW = dlogits^T h for the first chunk, dW += dlogits^T h for the others (chunk order)."""
    if first:
        torch.mm(dlogits.t(), h, out=dweight)
    else:
        dweight.addmm_(dlogits.t(), h)


class _LinearCrossEntropy(torch.autograd.Function):
    """Chunks of rows: logits = h @ W^T (+ b) through cuBLAS, oink's cross-entropy kernel with
    the gradient written over the chunk's logits, then dh = dlogits @ W and dW += dlogits^T @ h.
    For mean and sum the gradients are made in the forward pass (the upstream gradient, a
    scalar, scales them in place in backward: no pass at all where it is 1); for
    reduction='none' the backward recomputes each chunk's logits and applies the rows' upstream
    gradients."""

    @staticmethod
    def forward(
        ctx, hidden, weight, target, bias, ignore_index, label_smoothing, softcap, reduction, chunk
    ):
        rows, vocab = hidden.shape[0], weight.shape[0]
        if chunk is None:
            chunk, _, _ = torch.ops.oink.plan_linear_cross_entropy.default(
                rows, vocab, hidden.shape[1], hidden.element_size()
            )
        options = (ignore_index, label_smoothing, softcap)
        need = ctx.needs_input_grad
        grads_now = reduction != "none" and (need[0] or need[1] or need[3])
        wide = torch.float64 if hidden.dtype == torch.float64 else torch.float32
        loss_rows = torch.empty(rows, dtype=wide, device=hidden.device)
        lse = torch.empty_like(loss_rows)
        dhidden = torch.empty_like(hidden) if grads_now and need[0] else None
        dweight = _weight_grad(rows, weight) if grads_now and need[1] else None
        dbias = (
            torch.zeros(vocab, dtype=wide, device=hidden.device) if grads_now and need[3] else None
        )
        count = _mean_count(target, ignore_index, reduction, wide)
        scale = _grad_scale(count)
        for start in range(0, rows, max(chunk, 1)):
            end = min(start + chunk, rows)
            h, t = hidden[start:end], target[start:end]
            logits = _chunk_logits(h, weight, bias)
            if not grads_now:
                loss_c, lse_c = torch.ops.oink.cross_entropy_forward.default(logits, t, *options)
            else:
                loss_c, lse_c = torch.ops.oink.cross_entropy_forward_backward_.default(
                    logits, t, scale, *options
                )
                if dhidden is not None:
                    torch.mm(logits, weight, out=dhidden[start:end])
                if dweight is not None:
                    _add_chunk_grad(dweight, start == 0, logits, h)
                if dbias is not None:
                    dbias += logits.sum(0, dtype=wide)
            loss_rows[start:end] = loss_c
            lse[start:end] = lse_c
            # Freed before the next chunk's are made: one chunk of logits at a time, not two
            # (H100, M=16384, V=128256: 501 MiB over the inputs, then half).
            del logits
        loss = _reduce(loss_rows, count, reduction, hidden.dtype)
        if dbias is not None:
            dbias = dbias.to(bias.dtype)
        ctx.save_for_backward(hidden, weight, target, bias, lse, dhidden, dweight, dbias)
        ctx.options = (options, reduction, chunk, grads_now)
        return loss

    @staticmethod
    def backward(ctx, grad):
        hidden, weight, target, bias, lse, dhidden, dweight, dbias = ctx.saved_tensors
        options, reduction, chunk, grads_now = ctx.options
        if grads_now:
            _scale_once(ctx, "linear_cross_entropy", (dhidden, dweight, dbias), grad)
            return dhidden, dweight, None, dbias, None, None, None, None, None
        # reduction='none': recompute each chunk's logits, apply the rows' upstream gradients.
        need = ctx.needs_input_grad
        dloss = grad.to(lse.dtype).contiguous()
        dh = torch.empty_like(hidden) if need[0] else None
        dw = _weight_grad(hidden.shape[0], weight) if need[1] else None
        db = (
            torch.zeros(weight.shape[0], dtype=lse.dtype, device=hidden.device) if need[3] else None
        )
        for start in range(0, hidden.shape[0], max(chunk, 1)):
            end = min(start + chunk, hidden.shape[0])
            h = hidden[start:end]
            logits = _chunk_logits(h, weight, bias)
            torch.ops.oink.cross_entropy_backward_.default(
                dloss[start:end], logits, target[start:end], lse[start:end], *options
            )
            if dh is not None:
                torch.mm(logits, weight, out=dh[start:end])
            if dw is not None:
                _add_chunk_grad(dw, start == 0, logits, h)
            if db is not None:
                db += logits.sum(0, dtype=db.dtype)
            del logits  # one chunk of logits at a time (above)
        db = None if db is None else db.to(bias.dtype)
        return dh, dw, None, db, None, None, None, None, None


@torch.compiler.disable
def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    softcap: float | None = None,
    reduction: str = "mean",
    chunk_rows: int | None = None,
) -> torch.Tensor:
    """``cross_entropy(hidden @ weight.T + bias, target, ...)`` without the [M, V] logits: rows
    go through in chunks (oink.explain_linear_cross_entropy shows the chunking), each chunk's
    logits overwritten by their gradient. hidden: [..., H]; weight: [V, H]; bias: None or [V];
    target: int64 of hidden.shape[:-1]; the options as oink.cross_entropy's. The weight's
    gradient is accumulated chunk by chunk in the weight's dtype; every gradient is
    deterministic (cuBLAS GEMMs and oink's kernels in a fixed order). Runs eagerly (outside
    torch.compile graphs). chunk_rows: rows per chunk, None for the rule's.
    """
    if chunk_rows is not None and not (isinstance(chunk_rows, int) and chunk_rows > 0):
        raise ValueError(
            f"oink.linear_cross_entropy: chunk_rows must be None or an int > 0, got {chunk_rows!r}"
        )
    softcap, label_smoothing = _check_options(
        "linear_cross_entropy", reduction, label_smoothing, softcap
    )
    if weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(
            "oink.linear_cross_entropy: weight must be [V, H] with H = hidden.shape[-1] = "
            f"{hidden.shape[-1]}, got {list(weight.shape)}"
        )
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(
            f"oink.linear_cross_entropy: bias must be [V] = [{weight.shape[0]}], got "
            f"{list(bias.shape)}"
        )
    if target.shape != hidden.shape[:-1]:
        raise ValueError(
            "oink.linear_cross_entropy: target must have hidden.shape[:-1] = "
            f"{list(hidden.shape[:-1])}, got {list(target.shape)}"
        )
    loss = _LinearCrossEntropy.apply(
        hidden.reshape(-1, hidden.shape[-1]),
        weight,
        target.reshape(-1),
        bias,
        int(ignore_index),
        label_smoothing,
        softcap,
        reduction,
        chunk_rows,
    )
    return loss.reshape(target.shape) if reduction == "none" else loss
