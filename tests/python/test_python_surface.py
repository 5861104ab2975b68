"""The Python shell: import without CUDA initialisation, explain(), wrappers."""

import dataclasses
import subprocess
import sys

import pytest
import torch

import oink

from conftest import DEVICES


def test_import_does_not_initialize_cuda():
    code = "import torch, oink; assert not torch.cuda.is_initialized(); print(oink.__version__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == oink.__version__


def test_ops_are_registered():
    assert hasattr(torch.ops.oink, "rmsnorm") and hasattr(torch.ops.oink, "fused_add_rms_norm")
    schema = str(torch.ops.oink.fused_add_rms_norm.default._schema)
    assert "Tensor(a!) x" in schema and "Tensor(b!) residual" in schema


@pytest.mark.parametrize("device", DEVICES)
def test_explain_describes_the_plan(device):
    x = torch.randn(4097, 4096, dtype=torch.bfloat16, device=device)
    w = torch.ones(4096, dtype=torch.bfloat16, device=device)
    plan = oink.explain(x, w)
    assert plan.op == "rmsnorm" and plan.M == 4097 and plan.N == 4096
    assert plan.x_dtype == "bfloat16" and plan.weight_dtype == "bfloat16"
    assert "rmsnorm" in str(plan)
    if device == "cpu":
        assert plan.variant == "cpu" and plan.slice_chunks == 0 and not plan.persistent
    else:
        # A large aligned batch runs the tile schedule (4 reduction lanes per thread, one CTA per
        # row group); one row keeps it in registers. The row's reduction lanes (batch
        # invariance) are the same.
        assert plan.variant == "tile" and plan.vector_io and plan.lanes_per_thread == 4
        assert plan.grid == -(-4097 // plan.rows_per_cta) and plan.smem_bytes > 0
        assert plan.slice_chunks == 512 and not plan.persistent  # one slice; one CTA per group
        alone = oink.explain(x[:1], w)
        assert alone.variant == "row_in_registers" and alone.grid == 1
        assert alone.threads_per_row == plan.threads_per_row
        assert "plays 4 of the row's 256 reduction lanes" in str(plan)
        # An unaligned base pointer keeps the plan's layout but moves element by element.
        flat = torch.empty(4096 * 3 + 1, dtype=torch.bfloat16, device=device)
        unaligned = flat[1:].view(3, 4096)
        assert not oink.explain(unaligned, w).vector_io
        # A float32 weight on 16-bit rows takes the same tile, held in registers as float32 (no
        # shared memory of its own).
        wide = oink.explain(x, w.float())
        assert wide.variant == "tile" and wide.smem_bytes == plan.smem_bytes


def test_explain_returns_exactly_the_fields_of_plan():
    """The extension names the plan's fields (core/plan.h); oink.Plan has exactly those, so a
    field added on one side only fails here, not as a silently defaulted attribute."""
    x = torch.randn(6, 5, 64)[:, 1:]  # rows over two leading dimensions
    names, texts, numbers, row_sizes, x_strides = torch.ops.oink.explain.default(
        "rmsnorm", x, None, None, 1e-6
    )
    assert sorted(names) == sorted(f.name for f in dataclasses.fields(oink.Plan))
    assert len(names) == len(texts) + len(numbers) + 2
    assert row_sizes == [6, 4] and x_strides == [320, 64]
    plan = oink.explain(x)
    assert plan.row_dims == 2 and plan.row_sizes == (6, 4) and plan.x_strides == (320, 64)
    assert plan.weight_dtype == "none" and plan.ld_residual == 0
    assert isinstance(plan.vector_io, bool) and isinstance(plan.pdl, bool)


def test_plan_text_says_where_the_next_pdl_launch_starts():
    """Plan's text names the PDL trigger and the kernel's CTAs per SM (core/plan.cpp,
    pdl_early_trigger_pays); the CPU's plan is rewritten into a CUDA one to print it."""
    cpu = oink.explain(torch.randn(256, 16384, dtype=torch.bfloat16))
    assert not cpu.pdl and not cpu.pdl_early_trigger and cpu.ctas_per_sm == 0
    cuda = dataclasses.replace(
        cpu, variant="tile", device="sm_90", grid=256, block_threads=256, threads_per_row=1024,
        lanes_per_thread=4,
    )  # fmt: skip
    late = dataclasses.replace(cuda, pdl=True, pdl_early_trigger=False, ctas_per_sm=3)
    assert "PDL on, the next launch starts as its CTAs exit" in str(late)
    assert "(1 row(s) per CTA, 256 threads per row, 3 CTAs per SM)" in str(late)
    early = dataclasses.replace(late, pdl_early_trigger=True)
    assert "PDL on, the next launch starts after this one's wait" in str(early)
    off = dataclasses.replace(cuda, ctas_per_sm=0)
    assert "PDL off" in str(off) and "CTAs per SM" not in str(off)


def test_plan_text_counts_the_chunks_of_folded_registers_rows():
    """A registers plan that folds two lanes a thread (core/plan.h, kRegistersLanesPerThread)
    holds chunks_per_thread chunks of each lane: the text names the lanes and counts the thread's
    chunks over both (the H200's plan of the fused op at N=8192, M=256)."""
    cpu = oink.explain(torch.randn(256, 8192, dtype=torch.bfloat16))
    folded = dataclasses.replace(
        cpu, variant="row_in_registers", device="sm_90", grid=256, block_threads=256,
        threads_per_row=512, lanes_per_thread=2, chunks_per_thread=2,
    )  # fmt: skip
    text = str(folded)
    assert "each thread plays 2 of the row's 512 reduction lanes, 2 chunk(s) of each" in text
    assert "256 threads per row" in text and "each thread owns 4 chunk(s) of 8 elements" in text
    unfolded = dataclasses.replace(folded, block_threads=512, lanes_per_thread=1)
    assert "reduction lanes" not in str(unfolded)
    assert "each thread owns 2 chunk(s) of 8 elements" in str(unfolded)


@pytest.mark.parametrize("device", DEVICES)
def test_explain_fused_and_bad_op(device):
    x = torch.randn(8, 1024, device=device)
    w = torch.ones(1024, device=device)
    plan = oink.explain(x, w, op="fused_add_rms_norm")
    assert plan.op == "fused_add_rms_norm" and plan.ld_residual == 1024
    with pytest.raises(ValueError, match="argument 'op'"):
        oink.explain(x, w, op="softmax")
    with pytest.raises(ValueError, match="argument 'bias'"):
        oink.explain(x, w, bias=w)


@pytest.mark.parametrize("device", DEVICES)
def test_explain_layernorm(device):
    x = torch.randn(4096, 4096, dtype=torch.bfloat16, device=device)
    w = torch.ones(4096, dtype=torch.bfloat16, device=device)
    plan = oink.explain(x, w, op="layernorm", bias=torch.zeros(4096, device=device))
    assert plan.op == "layernorm" and plan.M == 4096 and plan.N == 4096
    if device == "cpu":
        assert plan.variant == "cpu"
    else:
        # rmsnorm's schedule rule for one stream (plan.cpp, tile_pays): the tile from a few row
        # groups per SM, as at M=4096 here, the registers schedule for a few rows; the weight
        # read as float32 (the bias is: both widened by the op), or as given where both are x's.
        rms = oink.explain(x, w)
        assert plan.variant == rms.variant == "tile" and plan.weight_dtype == "float32"
        given = oink.explain(x, w, op="layernorm", bias=torch.zeros_like(w))
        assert given.variant == "tile" and given.weight_dtype == "bfloat16"
        assert plan.vector_io and plan.threads_per_row == rms.threads_per_row
        one = oink.explain(x[:1], w, op="layernorm", bias=torch.zeros(4096, device=device))
        assert one.variant == "row_in_registers" and one.threads_per_row == rms.threads_per_row
        # Past one slice the cluster, which moves 16-byte vectors: N = 16393 is refused.
        with pytest.raises(ValueError, match="N <= 16384 .* not 16-byte vectors"):
            oink.explain(torch.randn(2, 16393, device=device, dtype=torch.bfloat16),
                         op="layernorm")  # fmt: skip


def test_pdl_is_on_by_default():
    """A fresh process: the first set_pdl returns the default, True (the CPU ignores it)."""
    code = "import oink; print(oink.set_pdl(False), oink.set_pdl(True), oink.set_pdl(True))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "True"]


def test_set_pdl_round_trips_and_reaches_the_plan():
    previous = oink.set_pdl(False)
    try:
        assert oink.set_pdl(False) is False
        if torch.cuda.is_available():
            x = torch.randn(1, 4096, dtype=torch.bfloat16, device="cuda")
            assert not oink.explain(x).pdl
            assert oink.set_pdl(True) is False
            plan = oink.explain(x)
            # PDL exactly where the kernel image that runs has griddepcontrol (code for sm_90+).
            assert plan.image_sass >= 80 and plan.image_ptx >= 80
            assert plan.pdl == (plan.image_ptx >= 90 and plan.image_sass >= 90)
            if torch.cuda.get_device_capability() >= (9, 0):
                assert plan.pdl  # this build's images for Hopper and later all have it
            assert oink.set_pdl(True) is True
        else:
            assert oink.set_pdl(True) is False
            assert oink.set_pdl(False) is True
    finally:
        oink.set_pdl(previous)
    # On the CPU there is nothing to launch: never PDL, whatever the setting.
    for enabled in (True, False):
        previous = oink.set_pdl(enabled)
        try:
            assert not oink.explain(torch.randn(2, 64)).pdl
        finally:
            oink.set_pdl(previous)


def test_cuda_targets_name_what_the_build_embeds():
    targets = oink.cuda_targets()
    assert isinstance(targets, list)
    for t in targets:
        assert t.startswith(("sm_", "compute_")), t
    # PTX, where a build embeds it (the default build does; one for sm_90a alone does not), no
    # older than compute_90: older PTX compiles PDL's wait away.
    ptx = [int(t[8:].rstrip("af")) for t in targets if t.startswith("compute_")]
    assert all(v >= 90 for v in ptx), targets
    # Availability needs kernels for the GPU: never true without a GPU or without targets.
    if not targets or not torch.cuda.is_available():
        assert oink.cuda_available() is False
    else:
        major, minor = torch.cuda.get_device_capability()
        assert oink.cuda_available() == torch.ops.oink.serves_capability.default(major, minor)


def test_serves_capability_follows_the_targets():
    targets = oink.cuda_targets()
    serves = torch.ops.oink.serves_capability.default
    if not targets:
        assert not serves(9, 0) and not serves(8, 0)
    else:
        assert serves(9, 0) and not serves(7, 5)


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_builtin_provider_names(device):
    """vLLM's own `oink` provider (Blackwell) calls torch.ops.oink.rmsnorm and
    fused_add_rms_norm_ once it finds ops named rms_norm and fused_add_rms_norm: the aliases are
    the same ops, bit for bit, under inference mode and with autograd."""
    from torch.library import opcheck

    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 128, generator=g).to(torch.bfloat16).to(device)
    r = torch.randn(6, 128, generator=g).to(torch.bfloat16).to(device)
    w = (torch.rand(128, generator=g) + 0.5).to(torch.bfloat16).to(device)
    with torch.inference_mode():
        assert torch.equal(torch.ops.oink.rms_norm(x, w, 1e-6), oink.rmsnorm(x, w, 1e-6))
        x1, r1, x2, r2 = x.clone(), r.clone(), x.clone(), r.clone()
        torch.ops.oink.fused_add_rms_norm_(x1, r1, w, 1e-6)
        oink.fused_add_rms_norm(x2, r2, w, 1e-6)
        assert torch.equal(x1, x2) and torch.equal(r1, r2)
    leaf = x.float().requires_grad_()
    torch.ops.oink.rms_norm(leaf, None, 1e-6).sum().backward()
    assert leaf.grad is not None and torch.isfinite(leaf.grad).all()
    opcheck(torch.ops.oink.rms_norm.default, (x, w, 1e-6))
    opcheck(torch.ops.oink.fused_add_rms_norm_.default, (x.clone(), r.clone(), w, 1e-6))
