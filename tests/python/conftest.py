"""Shared fixtures: the devices to test on and the element budget of the shape sweep.

Every test runs on the CPU; the same tests run on CUDA when a GPU is present and are skipped
otherwise. The CPU budget keeps the whole suite within a few minutes on a 2-core machine; on a
GPU the full sweep runs (docs/contract.md, 'How correctness is measured').
"""

import pytest
import torch

import oink  # noqa: F401  (loads the extension)

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


def pytest_configure(config):
    choice = config.getoption("--oink-pdl")
    if choice is not None:
        oink.set_pdl(choice == "on")


# Sweep cases of at least this many elements (M * N, both parameters) hold several GiB on the GPU
# each with their float64 references: under pytest-xdist with --dist loadgroup they all run on one
# worker, one at a time, so that parallel workers do not run out of GPU memory together
# (tools/gpu_run.sh). Six workers running M=4097 rows of N=65536-131072 at once did on an H200.
LARGE_CASE_ELEMENTS = 1 << 28


def pytest_collection_modifyitems(config, items):
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        m, n = params.get("m"), params.get("n")
        if params.get("device") != "cuda" or not isinstance(m, int) or not isinstance(n, int):
            continue
        if m * n >= LARGE_CASE_ELEMENTS:
            item.add_marker(pytest.mark.xdist_group("large_gpu_cases"))
