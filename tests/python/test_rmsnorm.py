"""oink.rmsnorm against float64 over the shape sweep (docs/contract.md, 'How correctness is
measured'), plus layout, edge values and batch invariance."""

import pytest
import torch

import oink

from conftest import DEVICES, requires_cuda, within_budget
from numerics import assert_close_to_reference, torch_rmsnorm
from sweep import (
    DTYPE_COMBOS,
    SHAPES_M,
    SHAPES_N,
    padded_rows,
    rmsnorm_reference,
    schedule_test_rows,
    untouched_padding,
)

EPS = 1e-6


def make_weight(n, dtype, device, gen):
    if dtype is None:
        return None
    return (1 + 0.5 * torch.randn(n, generator=gen)).to(dtype).to(device)


def combo_id(combo):
    dt, wdt = combo
    return f"{str(dt)[6:]}-w_{str(wdt)[6:] if wdt else 'none'}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("combo", DTYPE_COMBOS, ids=combo_id)
@pytest.mark.parametrize("n", SHAPES_N)
@pytest.mark.parametrize("m", SHAPES_M)
def test_sweep_matches_float64(device, combo, n, m, gen):
    if not within_budget(device, m, n):
        pytest.skip("beyond this device's element budget")
    dtype, wdtype = combo
    x = torch.randn(m, n, generator=gen).to(dtype).to(device)
    w = make_weight(n, wdtype, device, gen)
    y = oink.rmsnorm(x, w, EPS)
    assert y.dtype == dtype and y.shape == x.shape and y.stride() == x.stride()
    if m:
        assert_close_to_reference(y, rmsnorm_reference(x, w, EPS), torch_rmsnorm(x, w, EPS), dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("combo", DTYPE_COMBOS, ids=combo_id)
@pytest.mark.parametrize("n", [7, 128, 4096, 5120, 65536])
@pytest.mark.parametrize("pad,offset", [(64, 0), (3, 1), (0, 1)])
def test_padded_and_unaligned_rows(device, combo, n, pad, offset, gen):
    dtype, wdtype = combo
    m = 17
    x = padded_rows(m, n, dtype, device, pad=pad, offset=offset, generator=gen)
    w = make_weight(n, wdtype, device, gen)
    y = oink.rmsnorm(x, w, EPS)
    assert y.stride() == x.stride()  # same layout whatever path ran
    assert untouched_padding(x), "x's padding (poison) was modified"
    assert_close_to_reference(y, rmsnorm_reference(x, w, EPS), torch_rmsnorm(x, w, EPS), dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_nd_input_and_no_weight(device, gen):
    x = torch.randn(2, 3, 5, 256, generator=gen).to(device)
    y = oink.rmsnorm(x)
    assert y.shape == x.shape
    assert_close_to_reference(
        y, rmsnorm_reference(x, None, 1e-6), torch_rmsnorm(x, None, 1e-6), torch.float32
    )


@pytest.mark.parametrize("device", DEVICES)
def test_empty_batch_returns_empty(device):
    x = torch.empty(0, 4096, dtype=torch.bfloat16, device=device)
    y = oink.rmsnorm(x, torch.ones(4096, dtype=torch.bfloat16, device=device), EPS)
    assert y.shape == (0, 4096) and y.dtype == torch.bfloat16


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n", [64, 4096, 65536])
def test_nan_inf_and_zero_rows(device, dtype, n, gen):
    x = torch.randn(5, n, generator=gen).to(dtype).to(device)
    x[1, n // 3] = float("nan")
    x[2, n // 2] = float("inf")
    x[3].zero_()
    w = make_weight(n, dtype, device, gen)
    y = oink.rmsnorm(x, w, EPS).double()
    ref = rmsnorm_reference(x, w, EPS)
    assert torch.isnan(y[1]).all() and torch.isnan(ref[1]).all()
    assert torch.equal(torch.isnan(y[2]), torch.isnan(ref[2]))  # inf * 0 -> NaN, others 0
    assert torch.equal(y[3], torch.zeros_like(y[3]))
    assert torch.isfinite(y[[0, 4]]).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("combo", DTYPE_COMBOS, ids=combo_id)
@pytest.mark.parametrize("n", [1, 111, 4096, 7168, 32768, 131072])
def test_batch_invariance(device, combo, n, gen):
    """A row's bits depend on its values only: alone (M=1, aligned) or as row k of M=4097 with
    padded, unaligned rows."""
    dtype, wdtype = combo
    m = 4097 if within_budget(device, 4097, n) else 33
    w = make_weight(n, wdtype, device, gen)
    batch = padded_rows(m, n, dtype, device, pad=1, offset=1, generator=gen)
    k = int(torch.randint(m, (1,), generator=gen))
    alone = batch[k : k + 1].clone()
    assert torch.equal(oink.rmsnorm(alone, w, EPS)[0], oink.rmsnorm(batch, w, EPS)[k])


@requires_cuda
@pytest.mark.parametrize("combo", DTYPE_COMBOS, ids=combo_id)
@pytest.mark.parametrize(
    "n", [64, 1024, 4096, 7168, 16384, 16392, 32768, 131072, 262144, 278528, 524288]
)
@pytest.mark.parametrize("pdl", [True, False])
def test_every_schedule_gives_the_same_bits(combo, n, pdl, gen):
    """The registers schedule (one row), the tile or streamed one (aligned batch) and the
    element-wise one (unaligned batch) give a row the same bits, with and without PDL; and stay
    within the float64 bounds."""
    dtype, wdtype = combo
    m = schedule_test_rows(n, dtype)
    w = make_weight(n, wdtype, "cuda", gen)
    batch = torch.randn(m, n, generator=gen).to(dtype).to("cuda")
    previous = oink.set_pdl(pdl)
    try:
        alone_plan = oink.explain(batch[:1], w)
        plans = {alone_plan.variant, oink.explain(batch, w).variant}
        y = oink.rmsnorm(batch, w, EPS)
        unaligned = padded_rows(m, n, dtype, "cuda", pad=1, offset=1)
        unaligned.copy_(batch)
        unaligned_plan = oink.explain(unaligned, w)
        plans.add(unaligned_plan.variant)
        y_unaligned = oink.rmsnorm(unaligned, w, EPS)
        for k in (0, m // 2, m - 1):
            alone = oink.rmsnorm(batch[k : k + 1].clone(), w, EPS)
            assert torch.equal(alone[0], y[k]) and torch.equal(y_unaligned[k], y[k])
    finally:
        oink.set_pdl(previous)
    chunks = -(-n // (16 // dtype.itemsize))
    batch_plan = oink.explain(batch, w)
    assert batch_plan.slice_chunks == min(chunks, 2048)  # a slice: 2048 chunks at most
    assert batch_plan.persistent == (batch_plan.variant == "streamed")
    assert "row_in_registers" in plans or chunks > 2048
    # The streamed schedule takes a float32 weight on 16-bit rows of 64 to 127 lanes (too few for
    # the tile); every other short row keeps the registers schedule.
    wide_weight = wdtype is not None and wdtype.itemsize > dtype.itemsize
    assert ("streamed" in plans) == (wide_weight and 64 < chunks <= 128)
    # A registers row of 512 lanes or more plays 2 a thread (aligned), 1 element-wise: the bits
    # compared above are the same either way.
    if chunks <= 2048:
        assert alone_plan.lanes_per_thread == (2 if alone_plan.threads_per_row >= 512 else 1)
        assert unaligned_plan.variant != "row_in_registers" or unaligned_plan.lanes_per_thread == 1
    # The tile schedule folds 4 reduction lanes into a thread: rows of 128 lanes or more, at most
    # 2 chunks per lane (16-bit N in [1032, 16384], float32 N in [516, 8192]), with any weight
    # (it waits in registers, a float32 one on 16-bit rows as float32).
    assert ("tile" in plans) == (128 < chunks <= 2048)
    # Rows of 2 to 32 slices (2048 chunks each): a cluster per row at every M (Hopper; a CTA per
    # slice, two per CTA past 16), any weight; two_pass for unaligned rows and longer rows.
    if chunks > 2048:
        assert ("cluster" in plans) == (chunks <= 32 * 2048)
        assert "two_pass" in plans
    ref = rmsnorm_reference(batch, w, EPS)
    assert_close_to_reference(y, ref, torch_rmsnorm(batch, w, EPS), dtype)


@requires_cuda
@pytest.mark.parametrize("n", [4096, 65536])  # the registers schedule; a cluster per row
def test_64bit_offsets(n):
    """Rows beyond 2^31 elements from the base pointer (docs/contract.md)."""
    ld = (1 << 31) + 64
    buffer = torch.empty(ld + n, dtype=torch.bfloat16, device="cuda")
    x = buffer.as_strided((2, n), (ld, 1))
    x.copy_(torch.randn(2, n, device="cuda"))
    y = oink.rmsnorm(x, None, EPS)
    ref = rmsnorm_reference(x, None, EPS)
    assert_close_to_reference(y, ref, torch_rmsnorm(x, None, EPS), torch.bfloat16)


@requires_cuda
def test_runs_on_the_current_stream():
    x = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = oink.rmsnorm(x, None, EPS)
    side.synchronize()
    assert_close_to_reference(
        y, rmsnorm_reference(x, None, EPS), torch_rmsnorm(x, None, EPS), torch.bfloat16
    )
