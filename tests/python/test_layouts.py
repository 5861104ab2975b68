"""Every layout whose last dimension is contiguous (docs/contract.md): QK-norm head views of a
fused QKV buffer, transposed views, gaps, permuted and many leading dimensions; read in place,
written only where the op writes, the output laid out as promised, and the fake kernel agreeing.
Also rmsnorm.out, every weight dtype with every x dtype, and the fused op without a weight."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import oink

from conftest import DEVICES, HAS_CUDA
from numerics import assert_close_to_reference, check_fused_call, torch_rmsnorm
from sweep import DTYPES, rmsnorm_reference

EPS = 1e-6


def randn(*shape, dtype, device, gen):
    return torch.randn(*shape, generator=gen).to(dtype).to(device)


def qk_views(tokens, heads, kv_heads, head_dim, dtype, device, gen):
    """(qkv buffer, q [T, H, D], k [T, KV, D]) as a model's QK-norm sees them."""
    qkv = randn(tokens, (heads + 2 * kv_heads) * head_dim, dtype=dtype, device=device, gen=gen)
    q = qkv[:, : heads * head_dim].view(tokens, heads, head_dim)
    k = qkv[:, heads * head_dim : (heads + kv_heads) * head_dim].view(tokens, kv_heads, head_dim)
    return qkv, q, k


def view_cases(dtype, device, gen):
    """(name, buffer, view of it): layouts that do not collapse to one row stride, and two that
    do (for contrast)."""
    cases = []
    qkv, q, k = qk_views(7, 8, 2, 128, dtype, device, gen)
    cases += [("qkv_head_view_q", qkv, q), ("qkv_head_view_k", qkv, k)]
    bshd = randn(2, 5, 4, 64, dtype=dtype, device=device, gen=gen)
    cases.append(("transposed_bhsd", bshd, bshd.transpose(1, 2)))  # Gemma3's q/k norm
    gap = randn(4, 6, 96, dtype=dtype, device=device, gen=gen)
    cases.append(("row_blocks_with_gaps", gap, gap[:, :3]))
    perm = randn(3, 2, 40, dtype=dtype, device=device, gen=gen)
    cases.append(("leading_dims_permuted", perm, perm.transpose(0, 1)))
    four = randn(4, 4, 4, 4, 24, dtype=dtype, device=device, gen=gen)
    cases.append(("four_leading_dims", four, four[::2, ::2, ::2, ::2]))
    flat = randn(7 * 8 * 72 + 1, dtype=dtype, device=device, gen=gen)
    unaligned = flat[1:].view(7, 8, 72)[:, :5, :64]  # base pointer 1 element off, gaps
    cases.append(("unaligned_head_view", flat, unaligned))
    padded = randn(6, 80, dtype=dtype, device=device, gen=gen)
    cases.append(("padded_rows", padded, padded[:, :64]))
    dense = randn(3, 4, 32, dtype=dtype, device=device, gen=gen)
    cases.append(("contiguous", dense, dense))
    return cases


def same_bits(a, b):
    """Bitwise equality, NaN (the poison) included."""
    as_int = {2: torch.int16, 4: torch.int32}[a.element_size()]
    return torch.equal(a.view(as_int), b.view(as_int))


def with_new_values(buffer_before, view, values):
    """What `buffer` must hold after an op that writes `values` into `view` and nothing else."""
    expected = buffer_before.clone()
    torch.as_strided(expected, view.shape, view.stride(), view.storage_offset()).copy_(values)
    return expected


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rmsnorm_reads_every_layout_in_place(device, dtype, gen):
    for name, buffer, x in view_cases(dtype, device, gen):
        before = buffer.clone()
        w = (1 + 0.5 * torch.randn(x.shape[-1], generator=gen)).to(dtype).to(device)
        y = oink.rmsnorm(x, w, EPS)
        assert torch.equal(buffer, before), name  # x is read only
        if oink._layout.one_row_stride(x):
            assert y.stride() == x.stride(), name  # padded rows keep x's strides
        else:
            assert y.is_contiguous(), name  # any other layout: dense, logical order
        assert_close_to_reference(y, rmsnorm_reference(x, w, EPS), torch_rmsnorm(x, w, EPS), dtype)
        # Batch invariance: a row's bits do not depend on the layout it was read from.
        assert torch.equal(y, oink.rmsnorm(x.contiguous(), w, EPS)), name


@pytest.mark.parametrize("device", DEVICES)
def test_the_fake_kernel_returns_the_real_layout(device, gen):
    for name, _, x in view_cases(torch.bfloat16, device, gen):
        y = oink.rmsnorm(x, None, EPS)
        with FakeTensorMode() as mode:
            fake = torch.ops.oink.rmsnorm.default(mode.from_tensor(x), None, EPS)
        assert fake.shape == y.shape and fake.stride() == y.stride(), name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rmsnorm_out_writes_only_out(device, dtype, gen):
    _, q, _ = qk_views(9, 4, 2, 128, dtype, device, gen)
    w = randn(128, dtype=torch.float32, device=device, gen=gen)
    # out: a head view of another buffer, poisoned so an unwritten element shows.
    out_buffer = torch.full((9, 7 * 128), float("nan"), dtype=dtype, device=device)
    out = out_buffer[:, 128 : 5 * 128].view(9, 4, 128)
    before = out_buffer.clone()
    returned = oink.rmsnorm(q, w, EPS, out=out)
    assert returned.data_ptr() == out.data_ptr() and returned.stride() == out.stride()
    expected = oink.rmsnorm(q, w, EPS)
    assert same_bits(out_buffer, with_new_values(before, out, expected))
    assert not out.isnan().any()


@pytest.mark.parametrize("device", DEVICES)
def test_rmsnorm_out_under_compile_and_opcheck(device, gen):
    _, q, _ = qk_views(5, 4, 2, 64, torch.bfloat16, device, gen)
    w = randn(64, dtype=torch.bfloat16, device=device, gen=gen)
    out = torch.empty(5, 4, 64, dtype=torch.bfloat16, device=device)
    # PyTorch's functionalization rejects custom ops returning an alias (the .out convention),
    # so the AOT-dispatch checks do not apply to it; torch.compile goes through oink.rmsnorm.
    checks = ("test_schema", "test_autograd_registration", "test_faketensor")
    torch.library.opcheck(torch.ops.oink.rmsnorm.out, (q, w, EPS), {"out": out}, test_utils=checks)

    def qk_norm(qkv, w, out):  # a model's QK-norm on its fused QKV projection, preallocated
        q = qkv[:, : 4 * 64].view(qkv.shape[0], 4, 64)
        oink.rmsnorm(q, w, EPS, out=out)
        return oink.rmsnorm(q, w, EPS)

    qkv = randn(5, 8 * 64, dtype=torch.bfloat16, device=device, gen=gen)
    compiled_out = torch.empty_like(out)
    compiled = torch.compile(qk_norm, fullgraph=True)
    y = compiled(qkv, w, compiled_out)
    assert torch.equal(y, qk_norm(qkv, w, out))
    assert torch.equal(compiled_out, out)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_op_with_independent_layouts(device, dtype, gen):
    """x a head view of one QKV-like buffer, the residual a transposed view of another: each read
    and written in place, nothing else touched, vLLM semantics and the bitwise invariant kept."""
    x_buffer = randn(6, 10 * 64, dtype=dtype, device=device, gen=gen)
    x = x_buffer[:, 64 : 5 * 64].view(6, 4, 64)
    r_buffer = randn(4, 6, 64, dtype=dtype, device=device, gen=gen)
    residual = r_buffer.transpose(0, 1)  # [6, 4, 64] with strides (64, 384, 1)
    w = (1 + 0.5 * torch.randn(64, generator=gen)).to(dtype).to(device)
    x_before, r_before = x_buffer.clone(), r_buffer.clone()
    check_fused_call(x, residual, w, EPS, dtype)
    assert torch.equal(x_buffer, with_new_values(x_before, x, x.clone()))
    assert torch.equal(r_buffer, with_new_values(r_before, residual, residual.clone()))


ALL_WEIGHT_DTYPES = [(x, w) for x in DTYPES for w in DTYPES]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("combo", ALL_WEIGHT_DTYPES, ids=lambda c: f"{c[0]}-w_{c[1]}")
@pytest.mark.parametrize("n", [7, 128, 4096])
@pytest.mark.parametrize("m", [1, 17])
def test_every_weight_dtype_with_every_x_dtype(device, combo, n, m, gen):
    dtype, wdtype = combo
    x = randn(m, n, dtype=dtype, device=device, gen=gen)
    w = (1 + 0.5 * torch.randn(n, generator=gen)).to(wdtype).to(device)
    y = oink.rmsnorm(x, w, EPS)
    assert_close_to_reference(y, rmsnorm_reference(x, w, EPS), torch_rmsnorm(x, w, EPS), dtype)
    residual = randn(m, n, dtype=dtype, device=device, gen=gen)
    check_fused_call(x.clone(), residual, w, EPS, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [64, 4096])
def test_fused_op_without_weight(device, dtype, n, gen):
    x = randn(17, n, dtype=dtype, device=device, gen=gen)
    residual = randn(17, n, dtype=dtype, device=device, gen=gen)
    # Through the raw op, as vLLM calls it for its weightless norms.
    check_fused_call(x, residual, None, EPS, dtype, call=torch.ops.oink.fused_add_rms_norm.default)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_head_view_plan_keeps_the_row_layout():
    """On the GPU a head view runs the registers schedule over its two leading dimensions, with
    the thread layout of contiguous rows of that N (batch invariance), at any batch size."""
    for tokens in (7, 4096):  # one token: a single leading dimension (size-1 dims drop out)
        _, q, _ = qk_views(tokens, 32, 8, 128, torch.bfloat16, "cuda", torch.Generator())
        plan, dense = oink.explain(q), oink.explain(q.contiguous())
        assert plan.row_dims == 2 and plan.row_sizes == (tokens, 32)
        assert plan.x_strides == ((32 + 16) * 128, 128)
        assert plan.variant == "row_in_registers" and plan.vector_io
        assert plan.threads_per_row == dense.threads_per_row


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tile_schedule_walks_leading_dims(dtype, gen):
    """Large batches of rows over two leading dimensions (blocks with gaps) take the tile schedule
    for both ops, split each row index over the dimensions, write only the view, and give every
    row the bits it has alone (the registers schedule) and in a contiguous batch."""
    n = 6144  # both ops take the tile in large batches (the fused op: half its lanes hold 1 chunk)
    blocks = randn(64, 9, n, dtype=dtype, device="cuda", gen=gen)
    view = blocks[:, :8]  # 512 rows, strides (9 n, n): no single row stride
    w = randn(n, dtype=dtype, device="cuda", gen=gen)
    plan = oink.explain(view, w)
    assert plan.variant == "tile" and plan.row_dims == 2 and plan.vector_io
    before = blocks.clone()
    y = oink.rmsnorm(view, w, EPS)
    assert torch.equal(blocks, before)
    assert torch.equal(y, oink.rmsnorm(view.contiguous(), w, EPS))
    for k in (0, 300, 511):
        row = view.reshape(-1, n)[k : k + 1].clone()
        assert torch.equal(y.reshape(-1, n)[k], oink.rmsnorm(row, w, EPS)[0])
    assert_close_to_reference(
        y, rmsnorm_reference(view, w, EPS), torch_rmsnorm(view, w, EPS), dtype
    )

    residual_blocks = randn(64, 9, n, dtype=dtype, device="cuda", gen=gen)
    residual = residual_blocks[:, 1:]
    assert oink.explain(view, w, op="fused_add_rms_norm").variant == "tile"
    rows = [
        (view[i, j : j + 1].clone(), residual[i, j : j + 1].clone()) for i, j in ((0, 0), (63, 7))
    ]
    untouched = residual_blocks[:, 0].clone()
    expected_residual = (view.float() + residual.float()).to(dtype)
    oink.fused_add_rms_norm(view, residual, w, EPS)
    assert torch.equal(residual, expected_residual) and torch.equal(
        residual_blocks[:, 0], untouched
    )
    assert torch.equal(view, oink.rmsnorm(residual, w, EPS))  # the fused invariant
    for (x1, r1), (i, j) in zip(rows, ((0, 0), (63, 7)), strict=True):
        oink.fused_add_rms_norm(x1, r1, w, EPS)
        assert torch.equal(x1[0], view[i, j]) and torch.equal(r1[0], residual[i, j])
