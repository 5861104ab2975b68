"""oink: fast, trustworthy normalization kernels for LLM inference.

Importing oink loads the native extension, which registers ``torch.ops.oink.*``; it does not
initialize CUDA.
"""

from pathlib import Path

import torch

# The one place the version is written: the build reads it from here (pyproject.toml).
__version__ = "0.1.0"


def _load_extension() -> None:
    library = Path(__file__).with_name("_C.so")
    if not library.exists():
        raise ImportError(
            f"oink's native extension is missing ({library}); install the oink-kernels "
            "distribution: `pip install --no-deps oink_kernels-*.whl` (a built wheel) or "
            "`pip install --no-build-isolation .` from a source checkout"
        )
    torch.ops.load_library(str(library))


_load_extension()

from oink import _autograd, _fake  # noqa: E402,F401  (register the guards and fake kernels)
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
    "cuda_targets",
    "explain",
    "fused_add_rms_norm",
    "layernorm",
    "layernorm_backward",
    "layernorm_forward",
    "rmsnorm",
    "rmsnorm_backward",
    "rmsnorm_forward",
    "set_pdl",
]
