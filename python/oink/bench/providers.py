"""What is timed: oink, PyTorch (eager and torch.compile) and the peers that are installed.

A provider is {case: fn}. Argument order per case (weights and biases last, outputs as tuples):

  rmsnorm             (x, w) -> (y,)
  fused_add_rms_norm  (x, residual, w) -> (y, x + residual)   (vLLM's semantics; may be in place)
  rmsnorm forward     (x, w) -> (y, rstd)
  rmsnorm backward    (dy, x, rstd, w) -> (dx, dweight)
  layernorm forward   (x, w, b) -> (y, mean, rstd)
  layernorm backward  (dy, x, mean, rstd, w, b) -> (dx, dweight, dbias)
  softmax forward     (x) -> (y,)
  softmax backward    (dy, y) -> (dx,)
  cross_entropy       (logits, target) -> (loss, dlogits)   (one step: the mean loss and its
                      gradient; may write dlogits over the logits: oink and Liger in the
                      forward's pass over them, Quack in the backward)
  linear_cross_entropy  (hidden, target, weight) -> (loss, dhidden, dweight)   (one step)

Peers come from their installed packages (`pip install quack-kernels liger-kernel
flashinfer-python`, vLLM when present). A peer that is absent or lacks a case is reported with
the reason, never dropped silently. Other loaders (a folder of prepared peers) add theirs to
EXTRA_PEERS before the run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch
import torch.nn.functional as F

from oink.bench.references import EPS

INFERENCE = ("rmsnorm", "fused_add_rms_norm")
TRAINING = ("rmsnorm forward", "rmsnorm backward", "layernorm forward", "layernorm backward")
SOFTMAX = ("softmax forward", "softmax backward")
SUITE_CASES = {"training": TRAINING, "training_long": TRAINING, "softmax": SOFTMAX,
               "cross_entropy": ("cross_entropy",),
               "linear_cross_entropy": ("linear_cross_entropy",)}  # fmt: skip
PEERS = ("quack", "liger", "flashinfer", "vllm")
Provider = dict[str, Callable]
EXTRA_PEERS: dict[str, Provider] = {}


# --- float32 formulas: torch_compile compiles them; torch_eager runs them where torch has no op


def rms_formula(x, w):
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1) + EPS)
    return (xf * rstd.unsqueeze(-1) * w.float()).to(x.dtype), rstd


def fused_formula(x, residual, w):
    residual.add_(x)
    x.copy_(rms_formula(residual, w)[0])
    return x, residual


def rms_backward_formula(dy, x, rstd, w):
    xf, r = x.float(), rstd.unsqueeze(-1)
    g = dy.float() * w.float()
    c = (g * xf).sum(-1, keepdim=True) * r.pow(3) / x.shape[-1]
    return (r * g - c * xf).to(x.dtype), (dy.float() * xf * r).sum(0).to(w.dtype)


def ln_formula(x, w, b):
    xf = x.float()
    mean = xf.mean(-1)
    rstd = torch.rsqrt((xf - mean.unsqueeze(-1)).pow(2).mean(-1) + EPS)
    return ((xf - mean.unsqueeze(-1)) * rstd.unsqueeze(-1) * w + b).to(x.dtype), mean, rstd


def ln_backward_formula(dy, x, mean, rstd, w, b):
    xf, r, dyf = x.float(), rstd.unsqueeze(-1), dy.float()
    xhat = (xf - mean.unsqueeze(-1)) * r
    g = dyf * w
    dx = r * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx.to(x.dtype), (dyf * xhat).sum(0).to(w.dtype), dyf.sum(0).to(b.dtype)


def softmax_backward_formula(dy, y):
    dyf, yf = dy.float(), y.float()
    return ((yf * (dyf - (dyf * yf).sum(-1, keepdim=True))).to(y.dtype),)


# The losses as training code writes them (the logits in float32, as Hugging Face's models do).
LOSSES = {
    "cross_entropy": lambda x, target: F.cross_entropy(x.float(), target),
    "linear_cross_entropy": lambda h, target, w: F.cross_entropy(F.linear(h, w).float(), target),
}


def grad_step(loss_fn):
    """(x, target, *params) -> (loss, dx, *dparams): the loss and its backward pass, one step."""

    def step(x, target, *params):
        leaves = [t.detach().requires_grad_() for t in (x, *params)]
        loss = loss_fn(leaves[0], target, *leaves[1:])
        return (loss.detach(), *torch.autograd.grad(loss, leaves))

    return step


FORMULAS = {
    "rmsnorm": lambda x, w: rms_formula(x, w)[:1],
    "fused_add_rms_norm": fused_formula,
    "rmsnorm forward": rms_formula,
    "rmsnorm backward": rms_backward_formula,
    "layernorm forward": ln_formula,
    "layernorm backward": ln_backward_formula,
    "softmax forward": lambda x: (torch.softmax(x.float(), -1).to(x.dtype),),
    "softmax backward": softmax_backward_formula,
}


def torch_eager() -> Provider:
    """PyTorch's own kernels where it has them (LayerNorm's parameters converted to x's dtype,
    the only one its CUDA kernels take: made once per tensor, outside the timed calls)."""
    made: dict = {}

    def as_x(t, dtype):
        key = (t.data_ptr(), dtype)
        if t.dtype != dtype and key not in made:
            made[key] = (t, t.to(dtype))
        return made[key][1] if t.dtype != dtype else t

    def rms_backward(dy, x, rstd, w):
        if not x.is_cuda:  # no CPU kernel of its own
            return rms_backward_formula(dy, x, rstd, w)
        return torch.ops.aten._fused_rms_norm_backward(
            dy, x, [x.shape[-1]], rstd.unsqueeze(-1), w, [True, True]
        )

    def ln_backward(dy, x, mean, rstd, w, b):
        return torch.ops.aten.native_layer_norm_backward(
            dy,
            x,
            [x.shape[-1]],
            mean.unsqueeze(-1),
            rstd.unsqueeze(-1),
            as_x(w, x.dtype),
            as_x(b, x.dtype),
            [True, True, True],
        )

    return {
        "rmsnorm": lambda x, w: (torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS),),
        "fused_add_rms_norm": fused_formula,
        "rmsnorm forward": lambda x, w: torch._fused_rms_norm(x, [x.shape[-1]], w, EPS),
        "rmsnorm backward": rms_backward,
        "layernorm forward": lambda x, w, b: torch.native_layer_norm(
            x, [x.shape[-1]], as_x(w, x.dtype), as_x(b, x.dtype), EPS
        ),
        "layernorm backward": ln_backward,
        "softmax forward": lambda x: (torch.softmax(x, -1),),
        "softmax backward": lambda dy, y: (torch._softmax_backward_data(dy, y, -1, y.dtype),),
        **{case: grad_step(fn) for case, fn in LOSSES.items()},
    }


def torch_compile() -> Provider:
    """torch.compile(dynamic=True) of the float32 formulas, as vLLM and compiled models run."""
    for name in ("recompile_limit", "cache_size_limit"):  # many shapes: never fall back to eager
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), 64))
    out = {case: torch.compile(fn, dynamic=True) for case, fn in FORMULAS.items()}
    return out | {c: grad_step(torch.compile(fn, dynamic=True)) for c, fn in LOSSES.items()}


def oink_provider(pdl: bool | None = None) -> Provider:
    """oink's ops; pdl=False: with oink.set_pdl(False), each launch waiting for the previous
    kernel as the peers' do (read when the call is captured)."""
    import oink

    def fused(x, residual, w):
        oink.fused_add_rms_norm(x, residual, w, EPS)
        return x, residual

    cases = {
        "rmsnorm": lambda x, w: (oink.rmsnorm(x, w, EPS),),
        "fused_add_rms_norm": fused,
        "rmsnorm forward": lambda x, w: oink.rmsnorm_forward(x, w, EPS),
        "rmsnorm backward": lambda dy, x, rstd, w: oink.rmsnorm_backward(dy, x, w, rstd),
        "layernorm forward": lambda x, w, b: oink.layernorm_forward(x, w, b, EPS),
        "layernorm backward": lambda dy, x, mean, rstd, w, b: oink.layernorm_backward(
            dy, x, w, b, mean, rstd
        ),
        "softmax forward": lambda x: (oink.softmax(x),),
        "softmax backward": lambda dy, y: (oink.softmax_backward(dy, y),),
        "cross_entropy": grad_step(lambda x, t: oink.cross_entropy(x, t, grad_in_forward=True)),
        "linear_cross_entropy": grad_step(lambda h, t, w: oink.linear_cross_entropy(h, w, t)),
    }
    if pdl is None:
        return cases

    def with_pdl(fn):
        def call(*args):
            previous = oink.set_pdl(pdl)
            try:
                return fn(*args)
            finally:
                oink.set_pdl(previous)

        return call

    return {case: with_pdl(fn) for case, fn in cases.items()}


# --- the peers, as installed -----------------------------------------------------------------


def late(module: str, package: str = "liger_kernel"):
    """A module imported at the first call: a release without it fails that case, with the
    reason, and keeps the others."""
    return importlib.import_module(f"{package}.{module}")


def quack() -> Provider:
    q = importlib.import_module("quack.rmsnorm")  # the module (quack.rmsnorm is also a function)

    def ln_forward(x, w, b):
        y, rstd, mean = q.layernorm_fwd(x, w, b, EPS, return_rstd=True, return_mean=True)
        return y, mean, rstd

    return {
        "rmsnorm": lambda x, w: (q.rmsnorm(x, w, eps=EPS),),
        "fused_add_rms_norm": lambda x, r, w: q.rmsnorm(x, w, residual=r, prenorm=True, eps=EPS),
        "rmsnorm forward": lambda x, w: (lambda o: (o[0], o[2]))(
            q.rmsnorm_fwd(x, w, eps=EPS, store_rstd=True)
        ),
        "rmsnorm backward": lambda dy, x, rstd, w: q.rmsnorm_bwd(x, w, dy, rstd)[:2],
        "layernorm forward": ln_forward,
        "layernorm backward": lambda dy, x, mean, rstd, w, b: q.layernorm_bwd(
            x, w, dy, rstd, mean, has_bias=True
        ),
        "softmax forward": lambda x: (late("softmax", "quack").softmax_fwd(x),),
        "softmax backward": lambda dy, y: (late("softmax", "quack").softmax_bwd(dy, y),),
        "cross_entropy": grad_step(
            lambda x, t: late("cross_entropy", "quack").cross_entropy(x, t, inplace_backward=True)
        ),
    }


def liger() -> Provider:
    from liger_kernel.ops.fused_add_rms_norm import fused_add_rms_norm_forward as fused
    from liger_kernel.ops.layer_norm import layer_norm_backward, layer_norm_forward
    from liger_kernel.ops.rms_norm import _str_to_casting_mode, rms_norm_backward, rms_norm_forward
    from liger_kernel.ops.utils import calculate_settings

    mode = _str_to_casting_mode["llama"]  # rstd in float32, as oink's
    lf = "transformers.functional"

    def rms_backward(dy, x, rstd, w):
        block, warps = calculate_settings(x.shape[-1])
        return rms_norm_backward(dy, x, w, rstd, 0.0, mode, block, warps, False, None)

    cases = {
        "rmsnorm": lambda x, w: rms_norm_forward(x, w, EPS, 0.0, "llama", None)[:1],
        "fused_add_rms_norm": lambda x, r, w: tuple(fused(x, r, w, EPS, 0.0, "llama")[:2]),
        "rmsnorm forward": lambda x, w: (lambda o: (o[0], o[2]))(
            rms_norm_forward(x, w, EPS, 0.0, mode, None)
        ),
        "rmsnorm backward": rms_backward,
        "layernorm forward": lambda x, w, b: (lambda o: (o[0], o[2], o[3]))(
            layer_norm_forward(x, w, b, EPS)
        ),
        "layernorm backward": lambda dy, x, mean, rstd, w, b: layer_norm_backward(
            dy, x, w, b, mean, rstd
        ),
        "softmax forward": lambda x: (late("ops.softmax")._softmax_forward(x)[0],),
        "cross_entropy": grad_step(lambda x, t: late(lf).liger_cross_entropy(x, t)),
        "linear_cross_entropy": grad_step(
            lambda h, t, w: late(lf).liger_fused_linear_cross_entropy(h, w, t)
        ),
    }
    settings: dict = {}  # the softmax backward's launch settings, from a one-row forward per N

    def sm_backward(dy, y):
        sm = late("ops.softmax")
        settings[y.shape[-1]] = settings.get(y.shape[-1]) or sm._softmax_forward(y[:1])[1:]
        return (sm._softmax_backward(dy, y, *settings[y.shape[-1]]),)

    return cases | {"softmax backward": sm_backward}


def flashinfer() -> Provider:
    import flashinfer.norm as norm

    def fused(x, residual, w):
        norm.fused_add_rmsnorm(x, residual, w, EPS)
        return x, residual

    return {"rmsnorm": lambda x, w: (norm.rmsnorm(x, w, EPS),), "fused_add_rms_norm": fused}


def vllm() -> Provider:
    importlib.import_module("vllm._C")  # registers torch.ops._C
    ops = torch.ops._C

    def rms(x, w):
        out = torch.empty_like(x)
        ops.rms_norm(out, x, w, EPS)
        return (out,)

    def fused(x, residual, w):
        ops.fused_add_rms_norm(x, residual, w, EPS)
        return x, residual

    return {"rmsnorm": rms, "fused_add_rms_norm": fused}


LOADERS = {"quack": quack, "liger": liger, "flashinfer": flashinfer, "vllm": vllm}


def first_line(e: BaseException, limit: int = 200) -> str:
    lines = str(e).splitlines()
    return f"{type(e).__name__}: {lines[0][:limit] if lines else ''}"


def discover(device: str, wanted: list[str] | None = None) -> tuple[dict, dict[str, str]]:
    """({name: Provider}, {name: why it is not measured}) for oink, torch and the peers.
    torch_compile and the peers on the GPU only (a CPU run stays short)."""
    have: dict[str, Provider] = {"oink": oink_provider(), "torch_eager": torch_eager()}
    missing: dict[str, str] = {}
    if device == "cuda":
        have["oink_no_pdl"] = oink_provider(pdl=False)
        have["torch_compile"] = torch_compile()
    for name in PEERS:
        if device != "cuda":
            missing[name] = "CUDA only"
            continue
        try:
            have[name] = LOADERS[name]()
        except Exception as e:  # an absent peer is reported, never fatal
            missing[name] = f"not installed ({first_line(e)})"
    for name, provider in EXTRA_PEERS.items():  # case by case: an installed peer keeps the rest
        have[name] = {**have.get(name, {}), **provider}
        missing.pop(name, None)
    if wanted:
        missing = {n: missing.get(n, "unknown provider") for n in wanted if n not in have}
        have = {n: p for n, p in have.items() if n in wanted or n == "oink"}
    return have, missing
