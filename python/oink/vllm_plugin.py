"""vLLM plugin: oink's RMSNorm kernels as vLLM providers (docs/vllm.md).

Entry point ``oink = "oink.vllm_plugin:register"`` in the group ``vllm.general_plugins``. vLLM
calls it in every process, possibly more than once; it never raises and never initializes CUDA.

* vLLM with ``vllm.ir`` (>= 0.20): registers the IR provider ``oink_cuda`` for ``rms_norm`` and
  ``fused_add_rms_norm``, supported on CUDA capability >= 9.0. With ``VLLM_USE_OINK_OPS`` or
  ``VLLM_USE_OINK_RMSNORM`` truthy it heads the platform's default priority; explicit
  ``--ir-op-priority.<op>=...`` lists still come first.
* Older vLLM: overrides ``RMSNorm.forward_cuda`` through ``CustomOp.register_oot`` when either
  variable is truthy (runs only when the ``rms_norm`` custom op is enabled).
"""

import logging
import os
import threading

import torch
from torch import Tensor

from oink._layout import rows_ok

PROVIDER = "oink_cuda"
MIN_CAPABILITY = 90  # Hopper
ENV_VARS = ("VLLM_USE_OINK_OPS", "VLLM_USE_OINK_RMSNORM")
_TRUTHY = ("1", "true", "yes", "on")
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

# Under "vllm." so that vLLM's logging configuration formats and shows it.
logger = logging.getLogger("vllm.plugins.oink")
_lock = threading.Lock()
_registered: str | None = None  # the summary of the first successful register()


def _enabled_by() -> str | None:
    """'NAME=value' of the first truthy variable in ENV_VARS, else None."""
    for name in ENV_VARS:
        value = os.environ.get(name, "")
        if value.strip().lower() in _TRUTHY:
            return f"{name}={value}"
    return None


class _CudaCapabilityAtLeast:
    """Truthy when vLLM's platform is CUDA with capability >= `capability`, this oink was built
    with CUDA kernels and one of its kernel images runs on the GPU (oink.cuda_targets()). Evaluated
    on first use, through vLLM's platform (NVML: no CUDA context), never at import or
    registration; an oink built without CUDA logs why once and vLLM keeps its own kernels."""

    def __init__(self, capability: int):
        self.capability = capability
        self._value: bool | None = None

    def __bool__(self) -> bool:
        if self._value is None:
            try:
                from vllm.platforms import current_platform

                self._value = bool(
                    current_platform.is_cuda()
                    and current_platform.has_device_capability(self.capability)
                    and _build_serves(current_platform.get_device_capability())
                )
            except Exception as e:
                logger.warning(
                    "oink: provider %s unsupported: %s: %s", PROVIDER, type(e).__name__, e
                )
                self._value = False
        return self._value

    def __repr__(self) -> str:
        state = "not checked yet" if self._value is None else self._value
        return f"<CUDA capability >= {self.capability / 10:.1f}: {state}>"


def _build_serves(capability) -> bool:
    """Whether this oink build has a kernel image for a GPU of `capability` (major, minor)."""
    import oink

    if not oink.cuda_targets():
        logger.warning(
            "oink: this oink was built without CUDA kernels (no nvcc at build time); provider "
            "%s stays unsupported and vLLM uses its own kernels",
            PROVIDER,
        )
        return False
    major, minor = capability.major, capability.minor
    if not torch.ops.oink.serves_capability.default(major, minor):
        logger.warning(
            "oink: this build (%s) has no kernel image for sm_%d%d; provider %s stays unsupported",
            ",".join(oink.cuda_targets()),
            major,
            minor,
            PROVIDER,
        )
        return False
    return True


SUPPORTED = _CudaCapabilityAtLeast(MIN_CAPABILITY)


# --- what oink accepts: layouts, dtypes and devices only (never values or the batch size) ---------
def _weight_ok(x: Tensor, weight: Tensor) -> bool:
    return (
        weight.dtype in _DTYPES
        and weight.dim() == 1
        and weight.size(0) == x.size(-1)
        and (weight.size(0) <= 1 or weight.stride(0) == 1)
        and weight.device == x.device
    )


def rms_norm_supported(x, weight, epsilon, variance_size=None) -> bool:
    return (
        variance_size is None
        and x.dtype in _DTYPES
        and rows_ok(x)
        and (weight is None or _weight_ok(x, weight))
    )


def fused_add_rms_norm_supported(x, x_residual, weight, epsilon, variance_size=None) -> bool:
    return (
        variance_size is None
        and x.dtype in _DTYPES
        and x_residual.dtype == x.dtype
        and x_residual.device == x.device
        and x_residual.shape == x.shape
        and rows_ok(x)
        and rows_ok(x_residual)
        and (weight is None or _weight_ok(x, weight))
    )


# --- the IR implementations: the native signatures, names and annotations included ---------------
def rms_norm(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    if variance_size is not None:
        raise ValueError("oink_cuda rms_norm does not support variance_size")
    return torch.ops.oink.rmsnorm.default(x, weight, epsilon)


def fused_add_rms_norm(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    if variance_size is not None:
        raise ValueError("oink_cuda fused_add_rms_norm does not support variance_size")
    torch.ops.oink.fused_add_rms_norm.default(x, x_residual, weight, epsilon)  # in place
    return x, x_residual


def _register_ir(ir) -> list[str]:
    """Registers the providers (once) and makes the env variables head the default priority."""
    impls = {
        "rms_norm": (rms_norm, rms_norm_supported, False),
        "fused_add_rms_norm": (fused_add_rms_norm, fused_add_rms_norm_supported, True),
    }
    names = []
    for name, (fn, supports_args, inplace) in impls.items():
        op = getattr(ir.ops, name, None)  # vLLM 0.20 has rms_norm only
        if op is None:
            continue
        if PROVIDER not in op.impls:
            kwargs = {"inplace": True} if inplace else {}
            register = op.register_impl(
                PROVIDER, supported=SUPPORTED, supports_args=supports_args, **kwargs
            )
            register(fn)
        names.append(name)

    from vllm.platforms import current_platform

    platform = type(current_platform)
    if not getattr(platform.get_default_ir_op_priority, "_oink", False):
        original = platform.get_default_ir_op_priority  # bound to `platform`

        def get_default_ir_op_priority(cls, vllm_config):
            config = original(vllm_config)
            if _enabled_by() and SUPPORTED:
                for name in names:
                    priority = getattr(config, name)
                    if PROVIDER not in priority:
                        setattr(config, name, [PROVIDER, *priority])
            return config

        get_default_ir_op_priority._oink = True
        platform.get_default_ir_op_priority = classmethod(get_default_ir_op_priority)
    return names


def _register_custom_op() -> bool:
    """vLLM without vllm.ir: replace RMSNorm.forward_cuda. Returns whether it was installed."""
    from vllm.model_executor.custom_op import CustomOp, op_registry_oot
    from vllm.model_executor.layers.layernorm import RMSNorm

    existing = op_registry_oot.get("RMSNorm")
    if existing is not None:
        if getattr(existing, "_oink", False):
            return True
        raise RuntimeError(f"RMSNorm is already overridden by {existing.__qualname__}")

    class OinkRMSNorm(RMSNorm):
        _oink = True

        def forward_cuda(self, x, residual=None):
            weight = self.weight.data if getattr(self, "has_weight", True) else None
            eps = self.variance_epsilon
            if getattr(self, "variance_size_override", None) is None and SUPPORTED:
                if residual is None and rms_norm_supported(x, weight, eps):
                    return torch.ops.oink.rmsnorm.default(x, weight, eps)
                if residual is not None and fused_add_rms_norm_supported(x, residual, weight, eps):
                    torch.ops.oink.fused_add_rms_norm.default(x, residual, weight, eps)
                    return x, residual
            return super().forward_cuda(x, residual)

    CustomOp.register_oot(name="RMSNorm")(OinkRMSNorm)
    OinkRMSNorm.name = "rms_norm"  # register_oot renamed it; `+rms_norm` stays the switch
    return True


def _register() -> str:
    import oink  # noqa: F401  (loads torch.ops.oink.*, so vLLM's own `oink` provider finds them)

    why = _enabled_by()
    try:
        import vllm.ir as ir
    except ImportError:
        ir = None
    if ir is not None and hasattr(getattr(ir, "ops", None), "rms_norm"):
        names = _register_ir(ir)
        placed = (
            f"placed first in the default priority where supported, because {why}"
            if why
            else f"not placed first ({' and '.join(ENV_VARS)} unset; "
            f"select it with --ir-op-priority.rms_norm={PROVIDER})"
        )
        return (
            f"oink: registered vLLM IR provider '{PROVIDER}' for {', '.join(names)} "
            f"(CUDA capability >= {MIN_CAPABILITY / 10:.1f}); {placed}"
        )
    if why and _register_custom_op():
        return f"oink: vLLM has no vllm.ir; RMSNorm.forward_cuda overridden because {why}"
    unset = " and ".join(ENV_VARS)
    return f"oink: vLLM has no vllm.ir; ops loaded, RMSNorm not overridden ({unset} unset)"


def register() -> None:
    """vLLM general plugin: idempotent, never raises, does not initialize CUDA."""
    global _registered
    try:
        with _lock:
            if _registered is not None:
                return
            _registered = _register()
        logger.info("%s", _registered)
    except Exception as e:  # vLLM does not guard plugin calls
        logger.warning("oink: vLLM plugin not registered: %s: %s", type(e).__name__, e)
