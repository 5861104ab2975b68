"""Every rejected input: a clear message (argument, expected, got), raised before any launch,
inputs untouched, no CUDA error left pending."""

import re

import pytest
import torch

import oink

from conftest import DEVICES, HAS_CUDA, requires_cuda


def expect_error(fn, *tensors, arg, expected, got):
    """Calls fn, which must raise naming `arg`, `expected` and `got`; inputs must be unchanged."""
    before = [t.clone() for t in tensors]
    with pytest.raises((ValueError, RuntimeError)) as info:
        fn()
    message = str(info.value)
    assert f"argument '{arg}'" in message, message
    assert re.search(expected, message), message
    assert re.search(got, message), message
    for t, b in zip(tensors, before, strict=True):
        assert torch.equal(t, b) or (t.isnan() == b.isnan()).all()
    if HAS_CUDA:
        torch.cuda.synchronize()  # raises if an error were pending


def t(*shape, dtype=torch.bfloat16, device="cpu"):
    return torch.randn(*shape).to(dtype).to(device)


@pytest.mark.parametrize("device", DEVICES)
class TestRmsNorm:
    def test_zero_dim(self, device):
        x = torch.tensor(1.5, device=device)
        expect_error(lambda: oink.rmsnorm(x), x, arg="x", expected="rank >= 1", got="0-d")

    def test_weight_length(self, device):
        x, w = t(4, 64, device=device), t(63, device=device)
        expect_error(lambda: oink.rmsnorm(x, w), x, w, arg="weight", expected="N=64", got=r"\[63\]")

    def test_weight_rank(self, device):
        x, w = t(4, 64, device=device), t(1, 64, device=device)
        expect_error(lambda: oink.rmsnorm(x, w), x, arg="weight", expected="1-D", got=r"\[1, 64\]")

    @pytest.mark.parametrize("dtype", [torch.float64, torch.int32])
    def test_unsupported_x_dtype(self, device, dtype):
        x = torch.ones(4, 64, dtype=dtype, device=device)
        expect_error(
            lambda: oink.rmsnorm(x),
            x,
            arg="x",
            expected="float16, bfloat16 or float32",
            got="Double|Int",
        )

    def test_weight_dtype_combination(self, device):
        x, w = t(4, 64, device=device), t(64, dtype=torch.float16, device=device)
        expect_error(
            lambda: oink.rmsnorm(x, w),
            x,
            w,
            arg="weight",
            expected=r"x's dtype \(bfloat16\) or float32",
            got="Half",
        )

    def test_last_dim_stride(self, device):
        x = t(64, 4, device=device).t()
        expect_error(
            lambda: oink.rmsnorm(x),
            x,
            arg="x",
            expected="stride 1 in its last",
            got=r"strides \(1, 4\)",
        )

    def test_leading_dims_not_rows(self, device):
        x = t(4, 6, 64, device=device)[:, :3]  # two blocks of 3 rows with a gap between them
        expect_error(
            lambda: oink.rmsnorm(x),
            x,
            arg="x",
            expected="rows with one row stride",
            got=r"strides \(384, 64, 1\)",
        )

    def test_non_contiguous_weight(self, device):
        x, w = t(4, 64, device=device), t(128, device=device)[::2]
        expect_error(
            lambda: oink.rmsnorm(x, w), x, w, arg="weight", expected="contiguous", got="stride 2"
        )

    @pytest.mark.parametrize("eps", [-1e-6, float("nan"), float("inf")])
    def test_bad_eps(self, device, eps):
        x = t(4, 64, device=device)
        expect_error(
            lambda: oink.rmsnorm(x, None, eps),
            x,
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
            lambda: oink.fused_add_rms_norm(x, residual, w, 1e-6),
            buf,
            w,
            arg="residual",
            expected="must not share memory",
            got="overlapping",
        )

    def test_same_tensor_twice(self, device):
        x, w = t(4, 64, device=device), t(64, device=device)
        expect_error(
            lambda: oink.fused_add_rms_norm(x, x, w, 1e-6),
            x,
            arg="residual",
            expected="must not share memory",
            got="overlapping",
        )

    def test_shape_mismatch(self, device):
        x, r, w = t(4, 64, device=device), t(5, 64, device=device), t(64, device=device)
        expect_error(
            lambda: oink.fused_add_rms_norm(x, r, w, 1e-6),
            x,
            r,
            arg="residual",
            expected=r"x's shape \[4, 64\]",
            got=r"\[5, 64\]",
        )

    def test_dtype_mismatch(self, device):
        x, w = t(4, 64, device=device), t(64, device=device)
        r = t(4, 64, dtype=torch.float16, device=device)
        expect_error(
            lambda: oink.fused_add_rms_norm(x, r, w, 1e-6),
            x,
            r,
            arg="residual",
            expected=r"x's dtype \(bfloat16\)",
            got="Half",
        )


@requires_cuda
def test_cpu_weight_with_cuda_x():
    x, w = t(4, 64, device="cuda"), t(64)
    expect_error(
        lambda: oink.rmsnorm(x, w), x, arg="weight", expected=r"x's device \(cuda:0\)", got="cpu"
    )


@requires_cuda
def test_cpu_residual_with_cuda_x():
    x, r, w = t(4, 64, device="cuda"), t(4, 64), t(64, device="cuda")
    expect_error(
        lambda: oink.fused_add_rms_norm(x, r, w, 1e-6),
        x,
        r,
        arg="residual",
        expected="x's device",
        got="cpu",
    )


@pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_weight_on_another_gpu():
    x, w = t(4, 64, device="cuda:0"), t(64, device="cuda:1")
    expect_error(lambda: oink.rmsnorm(x, w), x, arg="weight", expected="cuda:0", got="cuda:1")


@pytest.mark.parametrize("device", DEVICES)
def test_fused_weight_none_through_the_raw_op(device):
    x, r = t(4, 64, device=device), t(4, 64, device=device)
    expect_error(
        lambda: torch.ops.oink.fused_add_rms_norm(x, r, None, 1e-6),
        x,
        r,
        arg="weight",
        expected="must be a tensor",
        got="None",
    )
