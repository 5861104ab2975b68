"""Assertion helpers shared by the numerics tests (imported by test modules, not a test)."""

import torch
import torch.nn.functional as F

import oink

from sweep import error_stats, fused_add_reference, ulp


def torch_rmsnorm(x, weight, eps):
    """PyTorch's own answer: F.rms_norm where it accepts the dtypes, else the float32 composite."""
    if weight is None or weight.dtype == x.dtype:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def assert_close_to_reference(y, ref, torch_y, dtype):
    """oink's output must be within rounding of the float64 reference, element by element, and its
    error may not exceed PyTorch's error on the same inputs by more than one ulp
    (docs/contract.md, 'How correctness is measured').

    Per element: the float32 math contributes a relative error of a few 2^-24, far below the
    0.5 ulp of the final rounding for 16-bit outputs, so 1 ulp bounds it. For float32 outputs the
    sum of squares, rsqrt (<= 2 ulp) and two products give a few ulp; 8 ulp bounds it.
    """
    assert y.shape == ref.shape
    yd = y.double()
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isnan(yd), torch.isnan(ref)), "NaN pattern differs from reference"
    assert torch.equal(yd[~finite & ~torch.isnan(ref)], ref[~finite & ~torch.isnan(ref)])
    bound = ulp(ref[finite], dtype) * (8 if dtype == torch.float32 else 1)
    err = (yd[finite] - ref[finite]).abs()
    worst = (err - bound).max().item() if err.numel() else 0.0
    assert worst <= 0, f"error exceeds the per-element bound by {worst:.3g}"
    ours, theirs = error_stats(y[finite], ref[finite]), error_stats(torch_y[finite], ref[finite])
    if err.numel():
        slack = ulp(ref[finite].abs().max().reshape(1), dtype).item()
        assert ours.max_abs <= theirs.max_abs + slack, (ours, theirs)


def check_fused_call(x, residual, weight, eps, dtype, call=None):
    """Runs the fused op (``call(x, residual, weight, eps)``, default oink.fused_add_rms_norm) in
    place and checks vLLM's semantics: the residual becomes round(x + residual) exactly, x
    becomes bitwise oink.rmsnorm of that stored residual, and within rounding of float64."""
    x0, r0 = x.clone(), residual.clone()
    (call or oink.fused_add_rms_norm)(x, residual, weight, eps)
    new_residual, ref = fused_add_reference(x0, r0, weight, eps)
    assert torch.equal(residual, new_residual)
    assert torch.equal(x, oink.rmsnorm(residual, weight, eps))
    assert_close_to_reference(x, ref, torch_rmsnorm(new_residual, weight, eps), dtype)


def max_block_rows(m, n=0, dtype=torch.bfloat16):
    """The most rows a weight-gradient block of M rows takes (core/backward_plan.h): 8 or more,
    at most 256 blocks for CTAs of up to 256 threads and 128 for 512-thread CTAs, shared out
    between the clusters of a row of several slices (16384 16-bit, 8192 float32 elements; float64
    rows run on the CPU, in none): at most max(8, ceil(M / (128 // slices))). A backward error
    bound's terms: a block's rows, then at most 256 blocks."""
    slice_elems = {torch.float32: 8192, torch.float64: None}.get(dtype, 16384)
    slices = 1 if slice_elems is None else max(1, -(-n // slice_elems))
    return max(8, -(-m // max(1, 128 // slices)))
