"""Shared fixtures: the devices to test on and the element budget of the shape sweep.

Every test runs on the CPU; the same tests run on CUDA when a GPU is present and are skipped
otherwise. The CPU budget keeps the whole suite within a few minutes on a 2-core machine; on a
GPU the full GUIDE §2 sweep runs.
"""

import pytest
import torch

import oink  # noqa: F401  (loads the extension)
from oink.testing import in_shard, parse_shard

HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not HAS_CUDA, reason="no GPU"))]

# Largest M * N a single sweep case may have, per device.
ELEMENT_BUDGET = {"cpu": 1 << 19, "cuda": 1 << 31}

requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")


def within_budget(device: str, m: int, n: int) -> bool:
    return m * n <= ELEMENT_BUDGET[device]


@pytest.fixture
def gen():
    """A fresh, seeded CPU generator per test: random but reproducible inputs."""
    g = torch.Generator()
    g.manual_seed(0x0151)
    return g


def pytest_addoption(parser):
    parser.addoption(
        "--oink-pdl",
        choices=("on", "off"),
        default=None,
        help="run every test with oink.set_pdl(on/off) (default: oink's default, on)",
    )
    parser.addoption(
        "--shard",
        default=None,
        metavar="K/N",
        help="run only share K of N of the collected tests (every N-th, from the K-th): the GPU "
        "suite beside compute-sanitizer takes longer than one call of a lent GPU machine, so "
        "N calls run one share each (tools/gpu_run.sh: TEST_SHARD)",
    )


def pytest_configure(config):
    choice = config.getoption("--oink-pdl")
    if choice is not None:
        oink.set_pdl(choice == "on")


# Last, after -k and -m have deselected what they do: the shares split what is selected. (Run
# first, every other test of a [cpu, cuda] parametrization fell in one share, so `--shard 1/2
# -k "not cpu"` would have run nothing.)
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    spec = config.getoption("--shard")
    if spec is None:
        return
    try:
        k, n = parse_shard(spec)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    kept, dropped = [], []
    for i, item in enumerate(items):
        (kept if in_shard(i, k, n) else dropped).append(item)
    config.hook.pytest_deselected(items=dropped)
    items[:] = kept
