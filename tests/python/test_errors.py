"""Every rejected input: a clear message (argument, expected, got), raised before any launch,
inputs untouched (every byte of the memory each tensor argument views), no CUDA error left
pending."""

import re
import subprocess
import sys

import pytest
import torch

import oink

from conftest import DEVICES, HAS_CUDA, requires_cuda


def memory_of(tensor):
    """A copy of every byte of the storage `tensor` views: its elements, and the gaps and padding
    between them, which a stray write could also reach."""
    raw = torch.empty(0, dtype=torch.uint8, device=tensor.device)
    return raw.set_(tensor.untyped_storage()).clone()


def expect_error(op, *args, arg, expected, got):
    """Calls op(*args), which must raise naming `arg`, `expected` and `got`, and must leave every
    tensor argument's memory bitwise as it was (NaNs included)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    before = [memory_of(a) for a in tensors]
    with pytest.raises((ValueError, RuntimeError)) as info:
        op(*args)
    message = str(info.value)
    assert f"argument '{arg}'" in message, message
    assert re.search(expected, message), message
    assert re.search(got, message), message
    if HAS_CUDA:
        torch.cuda.synchronize()  # raises if an error were pending
    for i, (a, b) in enumerate(zip(tensors, before, strict=True)):
        assert torch.equal(memory_of(a), b), f"the rejected call modified tensor argument {i}"


def t(*shape, dtype=torch.bfloat16, device="cpu"):
    return torch.randn(*shape).to(dtype).to(device)


@pytest.mark.parametrize("device", DEVICES)
class TestRmsNorm:
    def test_zero_dim(self, device):
        x = torch.tensor(1.5, device=device)
        expect_error(oink.rmsnorm, x, arg="x", expected="rank >= 1", got="0-d")

    def test_weight_length(self, device):
        x, w = t(4, 64, device=device), t(63, device=device)
        expect_error(oink.rmsnorm, x, w, arg="weight", expected="N=64", got=r"\[63\]")

    def test_weight_rank(self, device):
        x, w = t(4, 64, device=device), t(1, 64, device=device)
        expect_error(oink.rmsnorm, x, w, arg="weight", expected="1-D", got=r"\[1, 64\]")

    def test_unsupported_x_dtype(self, device):
        x = torch.ones(4, 64, dtype=torch.int32, device=device)
        expect_error(oink.rmsnorm, x, arg="x", expected="float16, bfloat16 or float32", got="Int")

    def test_out_variant_names_itself(self, device):
        # Every check of rmsnorm.out, the weight's too, names rmsnorm.out.
        x, w, out = t(4, 64, device=device), t(63, device=device), t(4, 64, device=device)
        with pytest.raises(ValueError, match=r"^oink\.rmsnorm\.out: argument 'weight'"):
            torch.ops.oink.rmsnorm.out(x, w, 1e-6, out=out)

    def test_float64_runs_on_the_cpu_only(self, device):
        x, w = t(4, 64, device=device), t(64, device=device)
        x64, w64 = x.double(), w.double()
        if device == "cpu":  # gradcheck's dtype: accepted for x and the weight
            assert oink.rmsnorm(x64, w64, 1e-6).dtype == torch.float64
            return
        for args, arg in (((x64, w), "x"), ((x, w64), "weight")):
            expect_error(oink.rmsnorm, *args, arg=arg, expected="CPU only", got="float64 on cuda")

    def test_unsupported_weight_dtype(self, device):
        x, w = t(4, 64, device=device), t(64, dtype=torch.int32, device=device)
        expect_error(
            oink.rmsnorm,
            x,
            w,
            arg="weight",
            expected="float16, bfloat16 or float32",
            got="Int",
        )

    def test_last_dim_stride(self, device):
        x = t(64, 4, device=device).t()
        expect_error(
            oink.rmsnorm,
            x,
            arg="x",
            expected="stride 1 in its last",
            got=r"strides \(1, 4\)",
        )

    def test_broadcast_rows(self, device):
        x = t(64, device=device).expand(4, 64)  # every row is the same memory
        expect_error(
            oink.rmsnorm, x, arg="x", expected="rows must not overlap", got=r"strides \(0, 1\)"
        )

    def test_overlapping_rows(self, device):
        x = t(4 * 32 + 32, device=device).as_strided((4, 64), (32, 1))  # rows overlap by half
        expect_error(
            oink.rmsnorm, x, arg="x", expected="rows must not overlap", got=r"strides \(32, 1\)"
        )

    def test_too_many_leading_dims(self, device):
        # Five leading dimensions, each skipping every other slice: none coalesces with another.
        x = t(4, 4, 4, 4, 4, 8, device=device)[::2, ::2, ::2, ::2, ::2]
        expect_error(
            oink.rmsnorm,
            x,
            arg="x",
            expected="at most 4 dimensions",
            got=r"shape \[2, 2, 2, 2, 2, 8\]",
        )

    def test_non_contiguous_weight(self, device):
        x, w = t(4, 64, device=device), t(128, device=device)[::2]
        expect_error(oink.rmsnorm, x, w, arg="weight", expected="contiguous", got="stride 2")

    @pytest.mark.parametrize("eps", [-1e-6, float("nan"), float("inf")])
    def test_bad_eps(self, device, eps):
        x = t(4, 64, device=device)
        expect_error(
            oink.rmsnorm,
            x,
            None,
            eps,
            arg="eps",
            expected="finite number >= 0",
            got=r"-1e-06|nan|inf",
        )


@pytest.mark.parametrize("device", DEVICES)
class TestFusedAdd:
    def test_overlapping_x_and_residual(self, device):
        buf = t(8, 64, device=device)
        x, residual, w = buf[:6], buf[2:], t(64, device=device)
        expect_error(
            oink.fused_add_rms_norm,
            x,
            residual,
            w,
            1e-6,
            arg="residual",
            expected="must not share memory",
            got="overlapping",
        )

    def test_same_tensor_twice(self, device):
        x, w = t(4, 64, device=device), t(64, device=device)
        expect_error(
            oink.fused_add_rms_norm,
            x,
            x,
            w,
            1e-6,
            arg="residual",
            expected="must not share memory",
            got="overlapping",
        )

    def test_shape_mismatch(self, device):
        x, r, w = t(4, 64, device=device), t(5, 64, device=device), t(64, device=device)
        expect_error(
            oink.fused_add_rms_norm,
            x,
            r,
            w,
            1e-6,
            arg="residual",
            expected=r"x's shape \[4, 64\]",
            got=r"\[5, 64\]",
        )

    def test_dtype_mismatch(self, device):
        x, w = t(4, 64, device=device), t(64, device=device)
        r = t(4, 64, dtype=torch.float16, device=device)
        expect_error(
            oink.fused_add_rms_norm,
            x,
            r,
            w,
            1e-6,
            arg="residual",
            expected=r"x's dtype \(bfloat16\)",
            got="Half",
        )


@requires_cuda
def test_cpu_weight_with_cuda_x():
    x, w = t(4, 64, device="cuda"), t(64)
    expect_error(oink.rmsnorm, x, w, arg="weight", expected=r"x's device \(cuda:0\)", got="cpu")


@requires_cuda
def test_cpu_residual_with_cuda_x():
    x, r, w = t(4, 64, device="cuda"), t(4, 64), t(64, device="cuda")
    expect_error(
        oink.fused_add_rms_norm,
        x,
        r,
        w,
        1e-6,
        arg="residual",
        expected="x's device",
        got="cpu",
    )


@pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_weight_on_another_gpu():
    x, w = t(4, 64, device="cuda:0"), t(64, device="cuda:1")
    expect_error(oink.rmsnorm, x, w, arg="weight", expected="cuda:0", got="cuda:1")


@pytest.mark.parametrize("device", DEVICES)
class TestRmsNormOut:
    def test_shape(self, device):
        x, out = t(4, 64, device=device), t(4, 32, device=device)
        expect_error(
            lambda x, out: oink.rmsnorm(x, out=out),
            x,
            out,
            arg="out",
            expected=r"x's shape \[4, 64\]",
            got=r"\[4, 32\]",
        )

    def test_dtype(self, device):
        x, out = t(4, 64, device=device), t(4, 64, dtype=torch.float32, device=device)
        expect_error(
            lambda x, out: oink.rmsnorm(x, out=out),
            x,
            out,
            arg="out",
            expected=r"x's dtype \(bfloat16\)",
            got="Float",
        )

    def test_overlaps_x(self, device):
        x = t(4, 64, device=device)
        expect_error(
            lambda x: oink.rmsnorm(x, out=x),
            x,
            arg="out",
            expected="must not share memory with x",
            got="overlapping",
        )

    def test_last_dim_stride(self, device):
        x, out = t(4, 64, device=device), t(64, 4, device=device).t()
        expect_error(
            lambda x, out: oink.rmsnorm(x, out=out),
            x,
            out,
            arg="out",
            expected="stride 1 in its last",
            got=r"strides \(1, 4\)",
        )

    def test_broadcast_out(self, device):
        x, out = t(4, 64, device=device), t(64, device=device).expand(4, 64)
        expect_error(
            lambda x, out: oink.rmsnorm(x, out=out),
            x,
            out,
            arg="out",
            expected="rows must not overlap",
            got=r"strides \(0, 1\)",
        )


@pytest.mark.parametrize("device", DEVICES)
def test_fused_weight_overlapping_what_it_writes(device):
    buf = t(5, 64, device=device)
    x, r = buf[:4], t(4, 64, device=device)
    w = buf[3]  # the weight is x's last row
    expect_error(
        oink.fused_add_rms_norm,
        x,
        r,
        w,
        arg="weight",
        expected="must not share memory with x",
        got="overlapping",
    )


def _writes_then_rejects(tensor, where):
    """Stands for a rejected call that wrote before raising: changes one element of `where` (a
    view of `tensor`'s memory, maybe outside `tensor` itself) by one ulp, then raises."""
    where.view(torch.int16)[..., 0] += 1
    raise ValueError("oink.rmsnorm: argument 'x' must be valid, but got a test double")


@pytest.mark.parametrize("where", ["element", "padding"])
def test_the_untouched_check_catches_a_write(where):
    """expect_error itself must fail when a rejected call wrote, even one ulp of a finite value
    (no NaN anywhere) or a byte in the padding between rows, outside the tensor's elements."""
    buf = t(4, 72)
    x = buf[:, :64]  # padded rows: columns 64-71 are padding
    target = x[1:2, 3:4] if where == "element" else buf[2:3, 70:71]
    with pytest.raises(AssertionError, match="modified tensor argument 0"):
        expect_error(
            lambda x: _writes_then_rejects(x, target), x, arg="x", expected="valid", got="double"
        )


ALLOCATION_FAILURE = """
import resource, sys, torch, oink
{setup}
{warm_up}
mapped = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (mapped + (16 << 20), resource.RLIM_INFINITY))
try:
    {call}
except RuntimeError as e:
    print(str(e))
    sys.exit(0)
sys.exit("no error: the allocation fit")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc: Linux")
@pytest.mark.parametrize(
    "setup, call, expected",
    [
        (
            "x = torch.randn(4096, 4096)",
            "torch.ops.oink.softmax(x)",
            "[4096, 4096] (float32, 67108864 bytes) on cpu",
        ),
        (
            "x = torch.randn(4096, 8192, dtype=torch.bfloat16)",
            "torch.ops.oink.rmsnorm(x, None, 1e-6)",
            "[4096, 8192] (bfloat16, 67108864 bytes) on cpu",
        ),
    ],
)
def test_a_result_that_does_not_fit_says_what_was_asked_for(setup, call, expected):
    # The allocator's own exception stays inside PyTorch's shim (logged on stderr), so oink
    # raises one that says what it asked for. In a subprocess, whose address space is limited to
    # what it has mapped plus 16 MiB (after a first call on two rows has loaded what the op
    # loads): the 64 MiB result cannot fit.
    warm_up = call.replace("(x,", "(x[:2],").replace("(x)", "(x[:2])")
    script = ALLOCATION_FAILURE.format(setup=setup, warm_up=warm_up, call=call)
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"oink: could not allocate a result of shape {expected}" in run.stdout, run.stdout
    assert "API call failed" not in run.stdout, run.stdout
