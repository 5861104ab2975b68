"""opcheck, torch.compile (no graph breaks, equal to eager) and CUDA graphs."""

import pytest
import torch

import oink

from conftest import DEVICES, requires_cuda
from sweep import padded_rows


def rms_inputs(device, gen, n=256, dtype=torch.bfloat16):
    x = torch.randn(8, n, generator=gen).to(dtype).to(device)
    w = torch.randn(n, generator=gen).to(dtype).to(device)
    return x, w


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("wdtype", [None, torch.bfloat16, torch.float32])
def test_opcheck_rmsnorm(device, wdtype, gen):
    x = torch.randn(8, 256, generator=gen).to(torch.bfloat16).to(device)
    w = None if wdtype is None else torch.randn(256, generator=gen).to(wdtype).to(device)
    torch.library.opcheck(torch.ops.oink.rmsnorm.default, (x, w, 1e-6))
    padded = padded_rows(5, 100, torch.float16, device, pad=28, generator=gen)
    torch.library.opcheck(torch.ops.oink.rmsnorm.default, (padded, None, 1e-6))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_fused_add(device, gen):
    x, w = rms_inputs(device, gen)
    residual = torch.randn_like(x)
    torch.library.opcheck(torch.ops.oink.fused_add_rms_norm.default, (x, residual, w, 1e-6))


class Block(torch.nn.Module):
    """A decoder-layer shaped use of both ops: residual stream, norm, a projection."""

    def __init__(self, n, dtype):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(n, dtype=dtype) * 0.1 + 1)
        self.w2 = torch.nn.Parameter(torch.randn(n, dtype=dtype) * 0.1 + 1)

    def forward(self, x, residual):
        h = oink.rmsnorm(x, self.w1, 1e-6) * 2
        oink.fused_add_rms_norm(h, residual, self.w2, 1e-6)
        return h + 1, residual


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_equals_eager(device, dynamic, gen):
    torch._dynamo.reset()
    block = Block(512, torch.bfloat16).to(device)
    compiled = torch.compile(block, fullgraph=True, dynamic=dynamic)
    for m in (3, 17):
        x = torch.randn(m, 512, generator=gen).to(torch.bfloat16).to(device)
        r = torch.randn(m, 512, generator=gen).to(torch.bfloat16).to(device)
        with torch.no_grad():
            eager_h, eager_r = block(x.clone(), r.clone())
            comp_h, comp_r = compiled(x.clone(), r.clone())
        assert torch.equal(eager_h, comp_h) and torch.equal(eager_r, comp_r)


@requires_cuda
def test_cuda_graph_capture_and_replay(gen):
    n = 4096
    x, w = rms_inputs("cuda", gen, n=n)
    residual, fx = torch.randn_like(x), torch.randn_like(x)
    # Warm up on a side stream, as torch.cuda.graphs recommends.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        oink.rmsnorm(x, w, 1e-6)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = oink.rmsnorm(x, w, 1e-6)
        oink.fused_add_rms_norm(fx, residual, w, 1e-6)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        fx0, r0 = torch.randn_like(fx), torch.randn_like(residual)
        fx.copy_(fx0)
        residual.copy_(r0)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, oink.rmsnorm(x, w, 1e-6))
        expected_x, expected_r = fx0.clone(), r0.clone()
        oink.fused_add_rms_norm(expected_x, expected_r, w, 1e-6)
        assert torch.equal(fx, expected_x) and torch.equal(residual, expected_r)


@requires_cuda
@pytest.mark.parametrize("pdl", [True, False])
def test_cuda_graph_after_other_kernels_waits_for_them(pdl, gen):
    """Captured after cuBLAS GEMMs and PyTorch kernels, a PDL launch may start once their blocks
    have all started (kernels/pdl_capture.h); it must still read what they wrote. Each norm
    (rmsnorm, the fused op, LayerNorm) reads the GEMM right before it, long enough (N=4096, M=64)
    that a start before its end would read stale rows."""
    n, m = 4096, 64
    dt = torch.bfloat16
    x = torch.randn(m, n, generator=gen).to(dt).cuda()
    w1, w2 = [(torch.randn(n, n, generator=gen) * n**-0.5).to(dt).cuda() for _ in range(2)]
    w = (torch.rand(n, generator=gen) + 0.5).to(dt).cuda()
    bias = torch.randn(n, generator=gen).to(dt).cuda()
    residual = torch.randn(m, n, generator=gen).to(dt).cuda()
    previous = oink.set_pdl(pdl)
    try:

        def layer():
            a = x @ w1  # cuBLAS, then the norm
            y = oink.rmsnorm(a, w, 1e-6)
            b = (y @ w2) * 1.0  # cuBLAS and a PyTorch kernel, then the fused op
            oink.fused_add_rms_norm(b, residual, w, 1e-6)
            c = b @ w1  # cuBLAS, then LayerNorm's forward (the same launch path)
            return a, y, b, c, oink.layernorm(c, w, bias, 1e-5)

        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            layer()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            a, y, b, c, z = layer()
        for _ in range(4):
            x.copy_(torch.randn(m, n, generator=gen).to(dt))
            r0 = torch.randn(m, n, generator=gen).to(dt).cuda()
            residual.copy_(r0)
            graph.replay()
            torch.cuda.synchronize()
            # The norm read the GEMM's finished rows: its output is the eager norm of them.
            assert torch.equal(y, oink.rmsnorm(a, w, 1e-6))
            # The fused op read the finished product: its residual is y @ w2 + r0 (rounded
            # once), and its output is the norm of that residual (the fused invariant).
            expected = (y.double() @ w2.double()) + r0.double()
            assert torch.allclose(residual.double(), expected, rtol=2e-2, atol=2e-2)
            assert torch.equal(b, oink.rmsnorm(residual, w, 1e-6))
            assert torch.equal(z, oink.layernorm(c, w, bias, 1e-5))
    finally:
        oink.set_pdl(previous)
