"""oink.fused_add_rms_norm: vLLM semantics, the bitwise invariant, layouts and aliasing."""

import pytest
import torch

import oink

from conftest import DEVICES, requires_cuda, within_budget
from numerics import assert_close_to_reference, check_fused_call, torch_rmsnorm
from sweep import (
    DTYPE_COMBOS,
    SHAPES_M,
    SHAPES_N,
    fused_add_reference,
    padded_rows,
    rmsnorm_reference,
    schedule_test_rows,
    untouched_padding,
)

EPS = 1e-5
WEIGHTED_COMBOS = [c for c in DTYPE_COMBOS if c[1] is not None]


def combo_id(combo):
    return f"{str(combo[0])[6:]}-w_{str(combo[1])[6:]}"


def run_and_check(x, residual, w, dtype):
    check_fused_call(x, residual, w, EPS, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("combo", WEIGHTED_COMBOS, ids=combo_id)
@pytest.mark.parametrize("n", SHAPES_N)
@pytest.mark.parametrize("m", SHAPES_M)
def test_sweep(device, combo, n, m, gen):
    if not within_budget(device, m, n):
        pytest.skip("beyond this device's element budget")
    dtype, wdtype = combo
    x = torch.randn(m, n, generator=gen).to(dtype).to(device)
    residual = torch.randn(m, n, generator=gen).to(dtype).to(device)
    w = (1 + 0.5 * torch.randn(n, generator=gen)).to(wdtype).to(device)
    if m == 0:
        oink.fused_add_rms_norm(x, residual, w, EPS)
        return
    run_and_check(x, residual, w, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("combo", WEIGHTED_COMBOS, ids=combo_id)
@pytest.mark.parametrize("n", [7, 4096, 5120, 65536])
def test_padded_rows_with_different_strides(device, combo, n, gen):
    dtype, wdtype = combo
    x = padded_rows(9, n, dtype, device, pad=64, generator=gen)
    residual = padded_rows(9, n, dtype, device, pad=3, offset=1, generator=gen)
    w = (1 + 0.5 * torch.randn(n, generator=gen)).to(wdtype).to(device)
    run_and_check(x, residual, w, dtype)
    assert untouched_padding(x) and untouched_padding(residual), "padding was written"


@pytest.mark.parametrize("device", DEVICES)
def test_interleaved_halves_of_one_buffer_are_allowed(device, gen):
    n = 512
    buf = torch.randn(6, 2 * n, generator=gen).to(torch.bfloat16).to(device)
    x, residual = buf[:, :n], buf[:, n:]
    run_and_check(x, residual, torch.ones(n, dtype=torch.bfloat16, device=device), torch.bfloat16)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [64, 4096])
def test_batch_invariance(device, n, gen):
    m = 4097 if within_budget(device, 4097, n) else 65
    w = torch.randn(n, generator=gen).to(torch.bfloat16).to(device)
    x = torch.randn(m, n, generator=gen).to(torch.bfloat16).to(device)
    residual = torch.randn(m, n, generator=gen).to(torch.bfloat16).to(device)
    k = m - 2
    x1, r1 = x[k : k + 1].clone(), residual[k : k + 1].clone()
    oink.fused_add_rms_norm(x, residual, w, EPS)
    oink.fused_add_rms_norm(x1, r1, w, EPS)
    assert torch.equal(x1[0], x[k]) and torch.equal(r1[0], residual[k])


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n", [32768, 131072])
def test_long_rows_with_a_float32_weight_take_the_cluster(dtype, n, gen):
    """A float32 weight on 16-bit long rows takes the cluster at every batch size (its slices'
    weight held in registers as float32), with the bits of the same rows alone and of the
    element-wise two_pass rows, and the fused op writes exactly rmsnorm(residual_after)."""
    m = 33
    w = (1 + 0.5 * torch.randn(n, generator=gen)).to("cuda")
    x = torch.randn(m, n, generator=gen).to(dtype).to("cuda")
    residual = torch.randn(m, n, generator=gen).to(dtype).to("cuda")
    unaligned = padded_rows(m, n, dtype, "cuda", pad=1, offset=1)
    unaligned.copy_(x)
    for op in ("rmsnorm", "fused_add_rms_norm"):
        assert oink.explain(x, w, op=op).variant == "cluster"
        assert oink.explain(x[:1], w, op=op).variant == "cluster"
        assert oink.explain(unaligned, w, op=op).variant == "two_pass"
    y = oink.rmsnorm(x, w, EPS)
    assert torch.equal(oink.rmsnorm(x[m // 2 : m // 2 + 1].clone(), w, EPS)[0], y[m // 2])
    assert torch.equal(oink.rmsnorm(unaligned, w, EPS), y)
    x1, r1 = x[-1:].clone(), residual[-1:].clone()
    xu, ru = (padded_rows(m, n, dtype, "cuda", pad=1, offset=1) for _ in range(2))
    xu.copy_(x)
    ru.copy_(residual)
    run_and_check(x, residual, w, dtype)  # float64 bounds, the fused invariant
    oink.fused_add_rms_norm(x1, r1, w, EPS)
    assert torch.equal(x1[0], x[-1]) and torch.equal(r1[0], residual[-1])
    oink.fused_add_rms_norm(xu, ru, w, EPS)
    assert torch.equal(xu, x) and torch.equal(ru, residual)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n", [32768, 131072])
def test_rmsnorm_clusters_past_a_wave_hold_half_a_float32_weight(dtype, n, gen):
    """rmsnorm's clusters hold a float32 weight whole in registers up to one wave of such CTAs
    (2 of 256 threads an SM) and half of it past one, the other half read at the store
    (weight_held_chunks): the same bits either way, within rounding of float64. The fused op and
    rmsnorm_forward's CUDA path (which saves 1/rms) take the same kernels; the fused op holds the
    weight whole at every batch size."""
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    slices = n // 16384
    m = 2 * sms // slices + 1  # one cluster CTA past the wave
    w = (1 + 0.5 * torch.randn(n, generator=gen)).to("cuda")
    x = torch.randn(m, n, generator=gen).to(dtype).to("cuda")
    assert oink.explain(x, w).weight_held_chunks == 4
    assert oink.explain(x[:-1], w).weight_held_chunks == 8
    assert oink.explain(x, w, op="fused_add_rms_norm").weight_held_chunks == 8
    y = oink.rmsnorm(x, w, EPS)
    assert_close_to_reference(y, rmsnorm_reference(x, w, EPS), torch_rmsnorm(x, w, EPS), dtype)
    assert torch.equal(oink.rmsnorm(x[:-1], w, EPS), y[:-1])
    for k in (0, m - 1):
        assert torch.equal(oink.rmsnorm(x[k : k + 1].clone(), w, EPS)[0], y[k])
    y_saved, rstd = oink.rmsnorm_forward(x, w, EPS)
    assert torch.equal(y_saved, y)
    _, rstd_alone = oink.rmsnorm_forward(x[-1:].clone(), w, EPS)
    assert torch.equal(rstd_alone[0], rstd[-1])


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("n", [64, 4096, 6144, 7168, 16384, 32768, 65536, 262144])
@pytest.mark.parametrize("pdl", [True, False])
def test_large_batches_give_the_single_row_bits(dtype, n, pdl, gen):
    """A large aligned batch and single rows agree bitwise on both outputs, with and without PDL.
    The fused op keeps rows in registers at every batch size (its registers schedule holds x, the
    residual and the weight) except where its CTAs are weak, 1024 lanes or half the lanes with one
    chunk, which take the tile schedule (4 lanes per thread) in large batches: one CTA per row
    group either way. Long rows: a cluster per row, one slice a CTA alone and two a CTA in a batch
    of 16 slices per SM or more (half the CTAs; at N=32768 16-bit, a cluster of one CTA)."""
    m = schedule_test_rows(n, dtype)
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    slices = -(-n // (8192 if dtype == torch.float32 else 16384))
    if slices > 1:
        m = max(m, -(-16 * sms // slices))  # enough rows for the paired CTAs
    w = torch.randn(n, generator=gen).to(dtype).to("cuda")
    x = torch.randn(m, n, generator=gen).to(dtype).to("cuda")
    residual = torch.randn(m, n, generator=gen).to(dtype).to("cuda")
    rows = (0, m // 2, m - 1)
    singles = [(x[k : k + 1].clone(), residual[k : k + 1].clone()) for k in rows]
    # The same rows element-wise (offset by one element: one lane a thread, registers).
    unaligned = []
    for k in rows:
        xu = padded_rows(1, n, dtype, "cuda", pad=1, offset=1)
        ru = padded_rows(1, n, dtype, "cuda", pad=1, offset=1)
        xu.copy_(x[k : k + 1])
        ru.copy_(residual[k : k + 1])
        unaligned.append((xu, ru))
    x_in, r_in = x.clone(), residual.clone()
    previous = oink.set_pdl(pdl)
    try:
        batch_plan = oink.explain(x, w, op="fused_add_rms_norm")
        alone_plan = oink.explain(x[:1], w, op="fused_add_rms_norm")
        chunks = -(-n // (16 // dtype.itemsize))
        lanes = batch_plan.threads_per_row
        weak = 128 < chunks <= 2048 and (lanes == 1024 or 2 * chunks <= 3 * lanes)
        if chunks > 2048:  # several slices: a cluster per row at every batch size (Hopper)
            assert batch_plan.variant == "cluster" and batch_plan.cluster_ctas == -(-slices // 2)
            alone_ctas = slices if slices <= 16 else -(-slices // 2)  # a CTA holds 2 past 16
            assert alone_plan.cluster_ctas == alone_ctas
        else:
            assert batch_plan.variant == ("tile" if weak else "row_in_registers")
        assert batch_plan.grid * batch_plan.rows_per_cta >= m
        assert alone_plan.variant == ("cluster" if chunks > 2048 else "row_in_registers")
        # A registers row of 512 lanes or more: 2 lanes a thread aligned, 1 element-wise.
        if chunks <= 2048:
            folded = 2 if lanes >= 512 else 1
            assert alone_plan.lanes_per_thread == folded
            xu, ru = unaligned[0]
            assert oink.explain(xu, w, "fused_add_rms_norm", ru).lanes_per_thread == 1
        oink.fused_add_rms_norm(x, residual, w, EPS)
        for x1, r1 in singles + unaligned:
            oink.fused_add_rms_norm(x1, r1, w, EPS)
    finally:
        oink.set_pdl(previous)
    for k, (x1, r1), (xu, ru) in zip(rows, singles, unaligned, strict=True):
        assert torch.equal(x1[0], x[k]) and torch.equal(r1[0], residual[k])
        assert torch.equal(xu[0], x[k]) and torch.equal(ru[0], residual[k])
    new_residual, ref = fused_add_reference(x_in, r_in, w, EPS)
    assert torch.equal(residual, new_residual)
    assert torch.equal(x, oink.rmsnorm(residual, w, EPS))
    assert_close_to_reference(x, ref, torch_rmsnorm(new_residual, w, EPS), dtype)


@requires_cuda
@pytest.mark.parametrize("n", [32768, 65536])
@pytest.mark.parametrize("pdl", [True, False])
def test_pairs_that_fill_a_wave_give_the_single_row_bits(n, pdl, gen):
    """Below 16 slices per SM the fused op pairs its slices where the paired CTAs (one an SM on
    Hopper) fill a whole wave, and keeps one slice a CTA one row later; the rows' bits are the
    single row's either way."""
    if torch.cuda.get_device_capability()[0] not in (9, 10):
        pytest.skip("clusters of 128 KB CTAs, one an SM: Hopper's and datacenter Blackwell's")
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    slices = n // 16384
    w = torch.randn(n, generator=gen).to(torch.bfloat16).to("cuda")
    previous = oink.set_pdl(pdl)
    try:
        for m, ctas in ((sms * 2 // slices, slices // 2), (sms * 2 // slices + 1, slices)):
            x = torch.randn(m, n, generator=gen).to(torch.bfloat16).to("cuda")
            residual = torch.randn(m, n, generator=gen).to(torch.bfloat16).to("cuda")
            plan = oink.explain(x, w, op="fused_add_rms_norm")
            assert plan.variant == "cluster" and plan.cluster_ctas == ctas, (m, plan)
            x1, r1 = x[-1:].clone(), residual[-1:].clone()
            x_in, r_in = x.clone(), residual.clone()
            oink.fused_add_rms_norm(x, residual, w, EPS)
            oink.fused_add_rms_norm(x1, r1, w, EPS)
            assert torch.equal(x1[0], x[-1]) and torch.equal(r1[0], residual[-1])
            new_residual, ref = fused_add_reference(x_in, r_in, w, EPS)
            assert torch.equal(residual, new_residual)
            assert_close_to_reference(x, ref, torch_rmsnorm(new_residual, w, EPS), torch.bfloat16)
    finally:
        oink.set_pdl(previous)
