"""Every op refuses tensors on different devices (docs/contract.md, 'Both ops'): a meta tensor
with CPU ones (which the dispatcher sends to the fake kernel), CUDA with CPU, and two GPUs. The
error is a ValueError, as for every rejected argument, whichever kernel raises it; it names the
argument, x's device and the one given, and comes before anything runs: every byte each real
tensor views is left as it was. With grad mode on too, where the forward ops pass
through their autograd wrappers first."""

import re

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
TWO_GPUS = HAS_CUDA and torch.cuda.device_count() >= 2

# (x's device, the other device): one argument goes to the other device, the rest stay with x.
PAIRS = [
    ("cpu", "meta"),
    ("meta", "cpu"),
    pytest.param("cuda", "cpu", marks=pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU")),
    pytest.param("cpu", "cuda", marks=pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU")),
    pytest.param(
        "cuda:0", "cuda:1", marks=pytest.mark.skipif(not TWO_GPUS, reason="needs two GPUs")
    ),
]

M, N = 4, 64
EPS = 1e-6


def inputs(gen):
    """Valid float32 arguments of every op, by name, on the CPU."""

    def randn(*shape):
        return torch.randn(*shape, generator=gen)

    return {
        "x": randn(M, N),
        "dy": randn(M, N),
        "residual": randn(M, N),
        "out": randn(M, N),
        "weight": 1 + 0.1 * randn(N),
        "bias": randn(N),
        "mean": randn(M),
        "rstd": randn(M).abs() + 0.5,
    }


# op name -> (its call from the named arguments, the tensor arguments other than x)
OPS = {
    "rmsnorm": (lambda a: torch.ops.oink.rmsnorm(a["x"], a["weight"], EPS), ["weight"]),
    "rmsnorm.out": (
        lambda a: torch.ops.oink.rmsnorm.out(a["x"], a["weight"], EPS, out=a["out"]),
        ["weight", "out"],
    ),
    "rmsnorm_forward": (
        lambda a: torch.ops.oink.rmsnorm_forward(a["x"], a["weight"], EPS),
        ["weight"],
    ),
    "rmsnorm_backward": (
        lambda a: torch.ops.oink.rmsnorm_backward(a["dy"], a["x"], a["weight"], a["rstd"]),
        ["dy", "weight", "rstd"],
    ),
    "fused_add_rms_norm": (
        lambda a: torch.ops.oink.fused_add_rms_norm(a["x"], a["residual"], a["weight"], EPS),
        ["residual", "weight"],
    ),
    "layernorm": (
        lambda a: torch.ops.oink.layernorm(a["x"], a["weight"], a["bias"], EPS),
        ["weight", "bias"],
    ),
    "layernorm_forward": (
        lambda a: torch.ops.oink.layernorm_forward(a["x"], a["weight"], a["bias"], EPS),
        ["weight", "bias"],
    ),
    "layernorm_backward": (
        lambda a: torch.ops.oink.layernorm_backward(
            a["dy"], a["x"], a["weight"], a["bias"], a["mean"], a["rstd"]
        ),
        ["dy", "weight", "bias", "mean", "rstd"],
    ),
}

# Ops whose autograd wrapper runs first with grad mode on and a weight that requires grad (the
# backward ops and out= refuse such a call outright, with their own error).
DIFFERENTIABLE = {
    "rmsnorm",
    "rmsnorm_forward",
    "fused_add_rms_norm",
    "layernorm",
    "layernorm_forward",
}

CASES = [
    (op, arg, grad)
    for op, (_, args) in OPS.items()
    for arg in args
    for grad in ([False, True] if op in DIFFERENTIABLE else [False])
]


def memory_of(tensor):
    """A copy of every byte of the storage `tensor` views, gaps included."""
    raw = torch.empty(0, dtype=torch.uint8, device=tensor.device)
    return raw.set_(tensor.untyped_storage()).clone()


@pytest.mark.parametrize(("home", "other"), PAIRS)
@pytest.mark.parametrize(
    ("op", "moved", "grad"),
    CASES,
    ids=[f"{op}-{arg}-{'grad' if grad else 'no_grad'}" for op, arg, grad in CASES],
)
def test_tensors_on_two_devices_raise_before_anything_runs(home, other, op, moved, grad, gen):
    call, _ = OPS[op]
    args = {name: t.to(other if name == moved else home) for name, t in inputs(gen).items()}
    if grad:
        args["weight"].requires_grad_()
    real = {n: t for n, t in args.items() if t.device.type != "meta"}
    before = {n: memory_of(t) for n, t in real.items()}
    with torch.set_grad_enabled(grad), pytest.raises(ValueError) as info:
        call(args)
    message = str(info.value)
    x_device, given = str(args["x"].device), str(args[moved].device)
    # With grad, rmsnorm and layernorm run as their _forward ops, which name themselves.
    named = rf"oink\.{re.escape(op)}(_forward)?: argument '{moved}' "
    assert re.match(named + re.escape(f"must be on x's device ({x_device})"), message), message
    assert message.endswith(f"but got {given}"), message
    if HAS_CUDA:
        torch.cuda.synchronize()  # raises if a CUDA error were pending
    for name, t in real.items():
        assert torch.equal(memory_of(t), before[name]), f"the rejected call wrote '{name}'"


@pytest.mark.parametrize("op", list(OPS))
def test_all_meta_still_runs_the_fake_kernel(op, gen):
    """The check refuses mixed devices only: every tensor on meta gives meta results."""
    call, _ = OPS[op]
    args = {name: t.to("meta") for name, t in inputs(gen).items()}
    results = call(args)
    for r in results if isinstance(results, tuple) else [results]:
        assert r is None or r.device.type == "meta"
