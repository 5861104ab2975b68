"""Tensor-parallel pattern across GPUs: NCCL all-reduce, then fused_add_rms_norm on each rank's
own device and current stream. Needs two GPUs; skipped otherwise."""

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import oink

from sweep import fused_add_reference

WORLD = 2
M, N = 33, 4096
EPS = 1e-6


def rank_inputs(rank: int):
    """Each rank's partial activations; every rank can rebuild every other rank's (seeded)."""
    g = torch.Generator().manual_seed(1000 + rank)
    return torch.randn(M, N, generator=g).to(torch.bfloat16)


def shared_inputs():
    g = torch.Generator().manual_seed(7)
    residual = torch.randn(M, N, generator=g).to(torch.bfloat16)
    weight = (1 + 0.1 * torch.randn(N, generator=g)).to(torch.bfloat16)
    return residual, weight


def worker(rank: int, init_file: str) -> None:
    """Raises on a wrong result; mp.spawn turns that into a failure of the test."""
    # NVLink multicast stays off on shared machines (device notes); harmless elsewhere.
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        device = torch.device("cuda", rank)
        residual, weight = (t.to(device) for t in shared_inputs())
        x = rank_inputs(rank).to(device)
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            dist.all_reduce(x)  # sum of the partial activations
            oink.fused_add_rms_norm(x, residual, weight, EPS)
        stream.synchronize()

        # Reference: the same all-reduce of the same inputs again (bitwise the first one's
        # result), then the fused op's float64 reference on the CPU.
        reduced = rank_inputs(rank).to(device)
        dist.all_reduce(reduced)
        new_residual, ref = fused_add_reference(reduced.cpu(), *shared_inputs(), EPS)
        assert x.device == device and residual.device == device
        assert torch.equal(residual.cpu(), new_residual)
        assert ((x.cpu().double() - ref).abs() <= ref.abs() * 2**-7 + 1e-6).all()
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < WORLD, reason="needs two GPUs"
)
def test_all_reduce_then_fused_add_rms_norm(tmp_path):
    mp.spawn(worker, args=(str(tmp_path / "init"),), nprocs=WORLD, join=True)
