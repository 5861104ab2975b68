"""Run SGLang's ``RMSNorm`` (and its fused residual add) on oink, without editing SGLang.

Serving, with oink installed beside SGLang (``pip install --no-deps oink_kernels-...whl``)::

    SGLANG_USE_OINK_RMSNORM=1 python -m sglang.launch_server --model-path ...

In Python (an offline ``sglang.Engine``, a test), before the model is built::

    import oink.integrations.sglang as oink_sglang

    oink_sglang.enable()   # idempotent; disable() turns it off again

How. oink-kernels declares the entry point ``oink = "oink.integrations.sglang:register"`` in
SGLang's general-plugin group ``sglang.srt.plugins``. SGLang's ``load_plugins()`` calls it in
every process (launcher, schedulers, detokenizer); with ``SGLANG_USE_OINK_RMSNORM`` (or
``SGLANG_USE_OINK_OPS``) set to 1/true/yes/on it registers an AROUND hook on
``sglang.srt.layers.layernorm.RMSNorm.forward_cuda`` with SGLang's ``HookRegistry``, which
SGLang applies; unset, it does nothing. ``enable()`` installs the same hook in the calling
process and sets ``SGLANG_USE_OINK_RMSNORM=1`` so that SGLang processes started afterwards hook
too; ``disable()`` undoes both (a hook SGLang applied stays in place but passes every call
through). ``RMSNorm``'s subclasses that call ``super().forward`` (Gemma-3n, GLM-4V vision) are
covered too. SGLang resolves each module's forward on its first call: enable or register before
the model runs, not in the middle of serving.

Routed to oink, on a CUDA GPU of compute capability >= 9.0 that this oink build serves
(``oink.cuda_available``):

* ``forward_cuda(x)`` -> ``oink.rmsnorm(x, weight, eps)``, written into a new contiguous tensor
  of x's shape and dtype, as SGLang's kernel returns;
* ``forward_cuda(x, residual)`` -> ``oink.fused_add_rms_norm`` in place with SGLang's
  semantics: ``residual += x``, ``x = rmsnorm(residual)``, returning ``(x, residual)``. 2-D
  inputs are written in place and returned as they are; other ranks are flattened with
  ``.contiguous().reshape(-1, N)`` and the results reshaped back, exactly as SGLang does (so the
  caller's buffers are written when, and only when, SGLang writes them).

The weight is ``self.weight`` (any of float16/bfloat16/float32, contiguous [N], on x's device;
``has_weight=False``: none, the same result as SGLang's weight of ones); x float16, bfloat16 or
float32 with a contiguous last dimension and non-overlapping rows; the residual of x's dtype,
shape and device. The output is in x's dtype, rounded once from float32.

Handed back to SGLang's own ``forward_cuda`` (its result, bit for bit), never an error:

* routing off (``disable()``), a CPU or other non-CUDA tensor, a GPU below sm_90 or one this
  build has no kernel image for (an oink built without CUDA: every call);
* ``x.numel() == 0``; ``post_residual_addition``; ``var_hidden_size`` (``variance_size_override``);
  ``cast_x_before_out_mul`` (HF rounding); a quantizing consumer (``quant_linear`` argument or
  ``fuse_input_quant``: the FP8 static-quant fusion); SGLang's batch-invariant mode
  (``is_batch_invariant_mode_enabled()``, checked on every call);
* inputs outside the contract above (float64, strided last dimension, overlapping rows, a weight
  of another shape or device, a residual of another dtype such as ``fp32_residual``'s float32);
* arguments this SGLang's ``forward_cuda`` did not have (a later release's new option).

``forward_native`` (torch.compile mode), ``forward_hip``/``forward_npu``/... and SGLang's other
norms (``GemmaRMSNorm``, ``LayerNorm``, ...) are untouched. ``override_orig_dtype`` and
``fp32_residual`` are ignored by SGLang's CUDA path too; the routed result has x's dtype, as
SGLang's CUDA kernel's. Tested with SGLang 0.5.23 (``tools/test.sh``: CPU tensors with the
capability check forced on; the CUDA kernels under SGLang are not run there).
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading

import torch

from oink._layout import rows_ok

__all__ = ["ENV_VARS", "SUPPORTED", "TARGET", "disable", "enable", "is_enabled", "register"]

_LAYERNORM = "sglang.srt.layers.layernorm"
TARGET = f"{_LAYERNORM}.RMSNorm.forward_cuda"
ENV_VARS = ("SGLANG_USE_OINK_RMSNORM", "SGLANG_USE_OINK_OPS")
MIN_CAPABILITY = (9, 0)  # Hopper, as the vLLM plugin
_TRUTHY = ("1", "true", "yes", "on")
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_PARAMS = ("x", "residual", "post_residual_addition", "quant_linear")  # forward_cuda's, 0.5.23

# Under "sglang." so that SGLang's logging configuration shows it.
logger = logging.getLogger("sglang.plugins.oink")
_lock = threading.Lock()
_enabled = False  # read by the hook on every call
_registered = False  # the hook is registered with SGLang's HookRegistry (register())
_installed = None  # (class, original function) where enable() wrapped forward_cuda itself


class _DeviceSupport:
    """Whether oink serves a device: CUDA, capability >= MIN_CAPABILITY and a kernel image in
    this build. Answered once per device. ``forced`` (tests) overrides the answer: True runs
    oink on any device, the CPU included."""

    def __init__(self, capability: tuple[int, int]):
        self.capability = capability
        self.forced: bool | None = None
        self._answers: dict[int, bool] = {}

    def __call__(self, device: torch.device) -> bool:
        if self.forced is not None:
            return self.forced
        if device.type != "cuda":
            return False
        index = device.index if device.index is not None else torch.cuda.current_device()
        answer = self._answers.get(index)
        if answer is None:
            answer = self._answers[index] = self._check(index)
        return answer

    def _check(self, index: int) -> bool:
        try:
            import oink

            capability = torch.cuda.get_device_capability(index)
            if capability < self.capability:
                return False
            if not oink.cuda_available(index):
                logger.warning(
                    "oink: this build (CUDA targets: %s) has no kernel image for sm_%d%d; "
                    "SGLang keeps its own RMSNorm kernels",
                    ",".join(oink.cuda_targets()) or "none",
                    *capability,
                )
                return False
            return True
        except Exception as e:
            logger.warning("oink: device %d unsupported: %s: %s", index, type(e).__name__, e)
            return False


SUPPORTED = _DeviceSupport(MIN_CAPABILITY)


def _enabled_by() -> str | None:
    """'NAME=value' of the first truthy variable in ENV_VARS, else None."""
    for name in ENV_VARS:
        value = os.environ.get(name, "")
        if value.strip().lower() in _TRUTHY:
            return f"{name}={value}"
    return None


# --- the hook -------------------------------------------------------------------------------------
def _bind(args: tuple, kwargs: dict) -> dict | None:
    """forward_cuda's arguments by name, or None for arguments this version did not have."""
    if len(args) > len(_PARAMS) or any(k not in _PARAMS for k in kwargs):
        return None
    bound = dict(zip(_PARAMS, args, strict=False))
    for name, value in kwargs.items():
        if name in bound:
            return None
        bound[name] = value
    return bound if "x" in bound else None


def _weight_ok(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (
        isinstance(weight, torch.Tensor)
        and weight.dtype in _DTYPES
        and weight.dim() == 1
        and weight.size(0) == x.size(-1)
        and (weight.size(0) <= 1 or weight.stride(0) == 1)
        and weight.device == x.device
    )


def _weight(module) -> torch.Tensor | None:
    return module.weight.data if getattr(module, "has_weight", True) else None


def _module_takes(module, x, residual, post_residual_addition, quant_linear) -> bool:
    """The options of SGLang's RMSNorm that oink does not do (their calls go back to SGLang)."""
    layernorm = sys.modules[_LAYERNORM]  # imported: it defines the class this hook wraps
    return (
        post_residual_addition is None
        and quant_linear is None
        and getattr(module, "_quant_linear", None) is None
        and getattr(module, "variance_size_override", None) is None
        and not getattr(module, "cast_x_before_out_mul", False)
        and not layernorm.is_batch_invariant_mode_enabled()
        and isinstance(x, torch.Tensor)
        and x.numel() > 0
        and (residual is None or isinstance(residual, torch.Tensor))
    )


def _rmsnorm(x, weight, eps):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return torch.ops.oink.rmsnorm.out(x, weight, eps, out=out)


def _fused_add_rms_norm(x, residual, weight, eps):
    torch.ops.oink.fused_add_rms_norm.default(x, residual, weight, eps)


def _oink_forward(module, x, residual):
    """oink's result for forward_cuda(x, residual), or None where oink does not take the call."""
    weight = _weight(module)
    eps = module.variance_epsilon
    if (
        x.dtype not in _DTYPES
        or (weight is not None and not _weight_ok(x, weight))
        or not SUPPORTED(x.device)
    ):
        return None
    if residual is None:
        if not rows_ok(x):
            return None
        return _rmsnorm(x, weight, eps)
    if residual.dtype != x.dtype or residual.device != x.device or residual.shape != x.shape:
        return None
    if x.dim() != 2:  # as SGLang's forward_cuda: flatten (a copy unless contiguous), reshape back
        shape, n = x.shape, x.size(-1)
        x2, r2 = x.contiguous().reshape(-1, n), residual.contiguous().reshape(-1, n)
        if x2.data_ptr() == r2.data_ptr():
            return None
        _fused_add_rms_norm(x2, r2, weight, eps)
        return x2.reshape(shape), r2.reshape(shape)
    if not (rows_ok(x) and rows_ok(residual)) or x.data_ptr() == residual.data_ptr():
        return None
    _fused_add_rms_norm(x, residual, weight, eps)
    return x, residual


def _around(original_fn, module, *args, **kwargs):
    """The AROUND hook on RMSNorm.forward_cuda: oink where it takes the call, else SGLang's."""
    if _enabled:
        bound = _bind(args, kwargs)
        if bound is not None:
            x, residual = bound["x"], bound.get("residual")
            if _module_takes(
                module,
                x,
                residual,
                bound.get("post_residual_addition"),
                bound.get("quant_linear"),
            ):
                result = _oink_forward(module, x, residual)
                if result is not None:
                    return result
    return original_fn(module, *args, **kwargs)


_around._oink = True


def _hooked(fn) -> bool:
    """Whether fn (RMSNorm.forward_cuda) already runs _around: our own wrapper, or SGLang's
    HookRegistry wrapper holding it, anywhere in its chain of __wrapped__ functions."""
    seen = 0
    while fn is not None and seen < 64:
        if getattr(fn, "_oink", False):
            return True
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                if getattr(cell.cell_contents, "_oink", False):
                    return True
            except ValueError:  # an empty cell
                pass
        fn, seen = getattr(fn, "__wrapped__", None), seen + 1
    return False


# --- the entry point and the Python API -----------------------------------------------------------
def register() -> None:
    """SGLang general plugin (group ``sglang.srt.plugins``): with SGLANG_USE_OINK_RMSNORM or
    SGLANG_USE_OINK_OPS truthy, registers the hook with SGLang's HookRegistry (load_plugins()
    applies it); otherwise does nothing. Idempotent, never raises, does not initialize CUDA."""
    global _enabled, _registered
    try:
        why = _enabled_by()
        if not why:
            logger.debug("oink: %s unset; SGLang's RMSNorm unchanged", " and ".join(ENV_VARS))
            return
        with _lock:
            from sglang.srt.layers.layernorm import RMSNorm
            from sglang.srt.plugins.hook_registry import HookRegistry, HookType

            import oink  # noqa: F401  (loads torch.ops.oink.*)

            _enabled = True
            if _registered or _hooked(RMSNorm.__dict__.get("forward_cuda")):
                return
            HookRegistry.register(TARGET, _around, HookType.AROUND)
            _registered = True
        logger.info(
            "oink: SGLang RMSNorm.forward_cuda (and its fused residual add) runs on oink on "
            "CUDA capability >= %d.%d, because %s",
            *MIN_CAPABILITY,
            why,
        )
    except Exception as e:  # SGLang logs plugin failures, but a plugin must not stop a server
        logger.warning("oink: SGLang plugin not registered: %s: %s", type(e).__name__, e)


def enable() -> None:
    """Route SGLang's RMSNorm.forward_cuda to oink in this process (idempotent), and set
    SGLANG_USE_OINK_RMSNORM=1 so that SGLang processes started afterwards route too."""
    global _enabled, _installed
    from sglang.srt.layers.layernorm import RMSNorm

    import oink  # noqa: F401  (loads torch.ops.oink.*)

    with _lock:
        os.environ[ENV_VARS[0]] = "1"
        _enabled = True
        original = RMSNorm.__dict__["forward_cuda"]
        if _hooked(original):
            return

        @functools.wraps(original)
        def forward_cuda(self, *args, **kwargs):
            return _around(original, self, *args, **kwargs)

        forward_cuda.__wrapped__ = original
        forward_cuda._oink = True
        RMSNorm.forward_cuda = forward_cuda
        _installed = (RMSNorm, original, forward_cuda)


def disable() -> None:
    """Stop routing: SGLang's own forward_cuda runs every call again, and the wrapper enable()
    installed is removed (a hook SGLang's HookRegistry applied stays, passing calls through).
    Unsets the environment variables, so that SGLang processes started afterwards do not hook."""
    global _enabled, _installed
    with _lock:
        _enabled = False
        for name in ENV_VARS:
            os.environ.pop(name, None)
        if _installed is not None:
            cls, original, wrapper = _installed
            if cls.__dict__.get("forward_cuda") is wrapper:
                cls.forward_cuda = original
            _installed = None


def is_enabled() -> bool:
    """Whether routing is on in this process."""
    return _enabled
