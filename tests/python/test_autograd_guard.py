"""No silent gradients: a call without a backward (rmsnorm's out= form in this version) on inputs
that require grad, with grad mode on, raises (through the wrappers and torch.ops alike) and
leaves its inputs untouched; without grad mode, or on inputs that need no grad, it runs.
rmsnorm's gradients: test_rmsnorm_backward.py; the fused op's: test_fused_add_autograd.py."""

import pytest
import torch

import oink

from conftest import DEVICES


def inputs(device):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 64, generator=g).to(device)
    r = torch.randn(3, 64, generator=g).to(device)
    w = torch.randn(64, generator=g).to(device)
    return x, r, w


CALLS = {
    "rmsnorm": lambda x, r, w: oink.rmsnorm(x, w),
    "rmsnorm_raw_op": lambda x, r, w: torch.ops.oink.rmsnorm.default(x, w, 1e-6),
    "rmsnorm_out": lambda x, r, w: oink.rmsnorm(x, w, out=torch.empty_like(r)),
    "fused": lambda x, r, w: oink.fused_add_rms_norm(x, r, w),
}


# The calls without a gradient (rmsnorm and the fused op are differentiable).
GUARDED = ["rmsnorm_out"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("call", GUARDED)
@pytest.mark.parametrize("needs_grad", ["x", "weight"])
def test_requires_grad_raises_and_says_what_to_do(device, call, needs_grad):
    x, r, w = inputs(device)
    {"x": x, "weight": w, "residual": r}[needs_grad].requires_grad_()
    before = [t.detach().clone() for t in (x, r, w)]
    with pytest.raises(RuntimeError, match=f"argument '{needs_grad}' requires grad") as info:
        CALLS[call](x, r, w)
    assert "torch.no_grad()" in str(info.value) and "rms_norm" in str(info.value)
    for t, b in zip((x, r, w), before, strict=True):
        assert torch.equal(t.detach(), b)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("call", CALLS)
def test_runs_without_grad_mode(device, call):
    for context in (torch.no_grad, torch.inference_mode):
        x, r, w = inputs(device)
        w.requires_grad_()
        with context():
            CALLS[call](x, r, w)
    x, r, w = inputs(device)  # nothing requires grad: grad mode on is fine
    CALLS[call](x, r, w)


@pytest.mark.parametrize("device", DEVICES)
def test_results_match_without_the_guard(device):
    x, _, w = inputs(device)
    with torch.no_grad():
        guarded = oink.rmsnorm(x, w)
    below_autograd = torch.ops.oink.rmsnorm.default.redispatch(
        torch._C.DispatchKeySet(
            torch._C.DispatchKey.CPU if device == "cpu" else torch._C.DispatchKey.CUDA
        ),
        x,
        w,
        1e-6,
    )
    assert torch.equal(guarded, below_autograd)
