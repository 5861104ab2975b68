"""oink: fast, trustworthy memory-bound kernels for LLMs on NVIDIA GPUs.

Importing oink loads the native extension, which registers ``torch.ops.oink.*``; it does not
initialize CUDA. ``python -m oink`` says what this build holds and what it runs on.
"""

from pathlib import Path

import torch

# The one place the version is written: the build reads it from here (pyproject.toml). A built
# wheel's distribution version adds what it holds: +cu130 (CUDA kernels) or +cpu.
__version__ = "0.1.0"


def _load_extension() -> None:
    library = Path(__file__).with_name("_C.so")
    if not library.exists():
        raise ImportError(
            f"oink's native extension is missing ({library}); install an oink-kernels wheel "
            "(`pip install --no-deps oink_kernels-*.whl`) or build from a source checkout "
            "(`pip install --no-build-isolation --no-deps .`)"
        )
    try:
        torch.ops.load_library(str(library))
    except OSError as error:
        raise ImportError(_load_failure(error)) from error


def _load_failure(error: OSError) -> str:
    """Says why _C.so did not load, and which build to install instead."""
    message = str(error)
    if "libtorch_cuda" in message and torch.version.cuda is None:
        return (
            f"this oink-kernels build holds CUDA kernels and needs a CUDA build of torch, but "
            f"torch {torch.__version__} is CPU-only (it has no libtorch_cuda.so). Install the "
            "CPU wheel (oink_kernels-<version>+cpu-...whl) or a CUDA build of torch >= 2.10 "
            f"(loader: {message})"
        )
    return (
        f"oink's native extension failed to load with torch {torch.__version__}: {message}. "
        "oink needs torch >= 2.10 (it uses PyTorch's stable ABI as of 2.10)"
    )


_load_extension()

from oink import _autograd, _fake  # noqa: E402,F401  (register the guards and fake kernels)
from oink._cross_entropy import (  # noqa: E402
    cross_entropy,
    explain_linear_cross_entropy,
    linear_cross_entropy,
)
from oink._routing import disable, enable, enabled  # noqa: E402
from oink._softmax import explain_rows, softmax, softmax_backward  # noqa: E402
from oink.ops import (  # noqa: E402
    Plan,
    cuda_available,
    cuda_targets,
    explain,
    fused_add_rms_norm,
    layernorm,
    layernorm_backward,
    layernorm_forward,
    rmsnorm,
    rmsnorm_backward,
    rmsnorm_forward,
    set_pdl,
)

__all__ = [
    "Plan",
    "__version__",
    "cuda_available",
    "cross_entropy",
    "cuda_targets",
    "disable",
    "enable",
    "enabled",
    "explain",
    "explain_linear_cross_entropy",
    "explain_rows",
    "fused_add_rms_norm",
    "layernorm",
    "layernorm_backward",
    "layernorm_forward",
    "linear_cross_entropy",
    "rmsnorm",
    "rmsnorm_backward",
    "rmsnorm_forward",
    "set_pdl",
    "softmax",
    "softmax_backward",
]
