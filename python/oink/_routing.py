"""Route PyTorch's own RMSNorm and LayerNorm to oink: ``oink.enable()``, ``oink.disable()`` and
``with oink.enabled(): ...``.

While routing is on, ``torch.nn.functional.rms_norm`` (what ``nn.RMSNorm`` calls),
``torch.nn.functional.layer_norm`` (``nn.LayerNorm``) and their ``torch.rms_norm`` /
``torch.layer_norm`` bindings run ``oink.rmsnorm`` / ``oink.layernorm``, forward and backward,
for every call oink takes with PyTorch's semantics; every other call (and every other function)
reaches PyTorch unchanged. The mechanism is a ``torch.overrides.TorchFunctionMode`` kept on the
torch-function mode stack, as ``torch.set_default_device`` keeps its ``DeviceContext``: like
that, the stack is per thread, so enable() routes the calling thread's calls. ``torch.compile``
traces through the mode (the oink op lands in the graph); a graph compiled while routing was off
is recompiled when it is turned on, and vice versa (dynamo guards on the mode stack).

A call is routed when all of these hold, and passed to PyTorch otherwise (never an error):

* x, weight and bias are plain tensors (no subclass) on one device among ``devices``; CUDA only
  on a GPU this oink build serves;
* normalized_shape is x's last dimension alone (N >= 1), weight and bias None or contiguous [N];
* x float16, bfloat16 or float32 (float64 on the CPU). rms_norm: a float16/bfloat16/float32
  weight (float64 x: float64 or none), the result in x's dtype as PyTorch's. layer_norm: weight
  and bias of x's dtype, or on the CPU float32 for 16-bit x (PyTorch's mixed types; the others,
  and any mix on CUDA, raise in PyTorch and still do);
* x's rows do not overlap and their leading dimensions coalesce into at most four;
* CUDA limits: layer_norm N <= 16384 (float32: 8192), and past that (a thread block cluster:
  compute capability 9.0 and up) rows of 16-byte vectors (N whole chunks, x 16-byte aligned, its
  row strides whole chunks, a float32 weight and bias 16-byte aligned) up to N = 524288 (float32:
  262144); the backward takes any N;
* no autocast on x's device unless every tensor is float32 (autocast's policy for norms may cast
  16-bit inputs to float32 there), no forward-mode AD level and no torch.func transform active.

``eps=None`` for rms_norm means PyTorch's: the epsilon of the compute type (float32's for 16-bit
and float32 x, float64's for float64 x). oink has no double backward: a routed call whose
backward runs with ``create_graph=True`` raises in the backward.

``stats()`` counts, per function, the calls routed and passed to PyTorch (for tests and
debugging; under torch.compile dynamo replays the count on every run of the compiled code);
``reset_stats()`` zeroes it. Cost: while routing is on, every torch function call made from
Python passes through the mode's Python handler (about 2 us each in eager mode, measured on an
H100 host; nothing inside compiled graphs or CUDA graphs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch
from torch.overrides import TorchFunctionMode, _len_torch_function_stack, _pop_mode, _push_mode

from oink import ops

F = torch.nn.functional
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_HALVES = (torch.float16, torch.bfloat16)
_FORWARD_AD = torch.autograd.forward_ad

_STATS = {"rms_norm": [0, 0], "layer_norm": [0, 0]}  # [routed, passed]


def stats() -> dict[str, dict[str, int]]:
    """Per function ("rms_norm", "layer_norm"): calls routed to oink and passed to PyTorch since
    the last reset_stats() (the torch.* bindings count with their torch.nn.functional ones)."""
    return {name: {"routed": c[0], "passed": c[1]} for name, c in _STATS.items()}


def reset_stats() -> None:
    for counts in _STATS.values():
        counts[0] = counts[1] = 0


def _rms_args(input, normalized_shape, weight=None, eps=None):  # noqa: A002  (F.rms_norm's names)
    return input, normalized_shape, weight, eps


def _ln_args(input, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):  # noqa: A002
    return input, normalized_shape, weight, bias, eps


def _rows_fit(x: torch.Tensor, n) -> bool:
    """x's rows as oink reads them: the last dimension contiguous, rows that do not overlap, the
    leading dimensions coalescing into at most four (docs/contract.md, Limits)."""
    if x.is_contiguous():
        return True
    if x.stride(-1) != 1:
        return False
    dims = sorted((x.stride(d), x.size(d)) for d in range(x.dim() - 1) if x.size(d) != 1)
    extent, runs, previous = n, 0, None  # elements spanned by the smaller dimensions
    for stride, size in dims:
        if stride < extent:
            return False
        if previous is None or stride != previous[0] * previous[1]:
            runs += 1
        previous = (stride, size)
        extent = stride * (size - 1) + extent
    return runs <= 4


class _Route(TorchFunctionMode):
    """The mode enable() keeps on the stack. Its configuration is the devices it routes."""

    def __init__(self, devices: frozenset[str], cuda_served: frozenset[int]) -> None:
        super().__init__()
        self.devices = devices
        self.cuda_served = cuda_served

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.rms_norm or func is torch.rms_norm:
            x, shape, weight, eps = _rms_args(*args, **kwargs)
            if self._takes_rms(x, shape, weight):
                _STATS["rms_norm"][0] += 1
                if eps is None:
                    eps = torch.finfo(
                        torch.float64 if x.dtype == torch.float64 else torch.float32
                    ).eps
                return ops.rmsnorm(x, weight, eps)
            _STATS["rms_norm"][1] += 1
        elif func is F.layer_norm or func is torch.layer_norm:
            x, shape, weight, bias, eps = _ln_args(*args, **kwargs)
            if self._takes_ln(x, shape, weight, bias):
                _STATS["layer_norm"][0] += 1
                return ops.layernorm(x, weight, bias, eps)
            _STATS["layer_norm"][1] += 1
        return func(*args, **kwargs)

    def _common(self, x, shape, params) -> bool:
        """The checks both norms share; the dtypes are each norm's."""
        if type(x) not in _PLAIN or x.dim() < 1:
            return False
        device = x.device
        if device.type not in self.devices:
            return False
        if device.type == "cuda" and (
            device.index not in self.cuda_served or x.dtype not in _FLOATS
        ):
            return False
        if isinstance(shape, int) or len(shape) != 1:
            return False
        n = x.shape[-1]
        if n < 1 or shape[0] != n:
            return False
        for p in params:
            if p is None:
                continue
            if type(p) not in _PLAIN or p.device != device or p.dim() != 1 or p.shape[0] != n:
                return False
            if not p.is_contiguous():
                return False
        if not _rows_fit(x, n):
            return False
        if torch.is_autocast_enabled(device.type):
            if x.dtype != torch.float32 or any(
                p is not None and p.dtype != torch.float32 for p in params
            ):
                return False
        if not torch.compiler.is_compiling():
            if _FORWARD_AD._current_level >= 0 or torch._C._are_functorch_transforms_active():
                return False
        return True

    @staticmethod
    def _slice_elems(x) -> int:
        """A slice of a row: 16384 16-bit or 8192 float32 elements."""
        return 8192 if x.dtype == torch.float32 else 16384

    def _takes_rms(self, x, shape, weight) -> bool:
        if not self._common(x, shape, (weight,)):
            return False
        if x.dtype == torch.float64:
            if weight is not None and weight.dtype != torch.float64:
                return False
        elif x.dtype not in _FLOATS or (weight is not None and weight.dtype not in _FLOATS):
            return False
        return True

    def _takes_ln(self, x, shape, weight, bias) -> bool:
        if not self._common(x, shape, (weight, bias)):
            return False
        if x.dtype not in _FLOATS and x.dtype != torch.float64:
            return False
        dtypes = {p.dtype for p in (weight, bias) if p is not None}
        # PyTorch's CPU kernel takes float32 parameters with 16-bit x; its CUDA kernel raises.
        mixed = x.device.type == "cpu" and x.dtype in _HALVES and dtypes == {torch.float32}
        if dtypes and dtypes != {x.dtype} and not mixed:
            return False
        if x.device.type == "cuda":
            if x.shape[-1] <= self._slice_elems(x):
                return True
            # Longer rows run in a thread block cluster (compute capability 9.0 and up), one CTA
            # or two a slice (32 slices at most), as 16-byte vectors.
            if torch.cuda.get_device_capability(x.device)[0] < 9:
                return False
            return self._vector_rows(x, (weight, bias)) and x.shape[-1] <= 32 * self._slice_elems(x)
        return True

    @staticmethod
    def _vector_rows(x, params) -> bool:
        """x's rows, and the float32 parameters the kernel reads (a 16-bit one is copied into
        new, aligned memory), move as 16-byte chunks."""
        chunk = 16 // x.element_size()
        if x.shape[-1] % chunk or x.data_ptr() % 16:
            return False
        if any(s % chunk for s, d in zip(x.stride()[:-1], x.shape[:-1], strict=True) if d > 1):
            return False
        return all(p is None or p.dtype != torch.float32 or p.data_ptr() % 16 == 0 for p in params)


_DEFAULT_DEVICES = ("cuda",)


def _find() -> tuple[int, _Route | None]:
    """(position on this thread's torch-function mode stack, the mode), or (-1, None)."""
    for i, mode in enumerate(torch.overrides._get_current_function_mode_stack()):
        if isinstance(mode, _Route):
            return i, mode
    return -1, None


def _remove() -> _Route | None:
    """Takes oink's mode off the stack wherever it is, keeping the modes above it in order."""
    position, mode = _find()
    if mode is None:
        return None
    above = [_pop_mode() for _ in range(_len_torch_function_stack() - position - 1)]
    _pop_mode()
    for other in reversed(above):
        _push_mode(other)
    return mode


def _insert(mode: _Route) -> None:
    """Puts oink's mode at the bottom of the stack (above torch.set_default_device's
    DeviceContext, which must stay the bottom), as DeviceContext does: so that a mode entered
    before enable() (``with Mode(): oink.enable()``) still pops itself on exit, and sees the norms
    before oink does."""
    from torch.utils._device import DeviceContext

    stack = torch.overrides._get_current_function_mode_stack()
    keep = 1 if stack and isinstance(stack[0], DeviceContext) else 0
    above = [_pop_mode() for _ in range(len(stack) - keep)]
    _push_mode(mode)
    for other in reversed(above):
        _push_mode(other)


def _served_cuda() -> frozenset[int]:
    if not ops.cuda_targets() or not torch.cuda.is_available():
        return frozenset()
    return frozenset(i for i in range(torch.cuda.device_count()) if ops.cuda_available(i))


def enable(devices: Iterable[str] = _DEFAULT_DEVICES) -> None:
    """Route torch.nn.functional.rms_norm / layer_norm (nn.RMSNorm, nn.LayerNorm) to oink on
    `devices` ("cuda", "cpu"; default CUDA only: PyTorch's CPU norms are fine) for the inputs
    oink takes; see oink._routing for exactly which. Calling it again replaces the devices; it
    never stacks a second mode. With "cuda", asks which GPUs this build serves (initialising
    CUDA). The current thread only, as torch.set_default_device."""
    wanted = frozenset(str(d) for d in ([devices] if isinstance(devices, str) else devices))
    unknown = wanted - {"cuda", "cpu"}
    if unknown:
        raise ValueError(
            f"oink.enable: devices must be among 'cuda' and 'cpu', got {sorted(unknown)}"
        )
    served = _served_cuda() if "cuda" in wanted else frozenset()
    _, mode = _find()
    if mode is not None:
        mode.devices, mode.cuda_served = wanted, served
        return
    _insert(_Route(wanted, served))


def disable() -> None:
    """Stop routing: PyTorch's norms run PyTorch's kernels again. A no-op when not enabled."""
    _remove()


def is_enabled() -> tuple[str, ...] | None:
    """The devices routed now (sorted), or None when routing is off."""
    _, mode = _find()
    return None if mode is None else tuple(sorted(mode.devices))


@contextlib.contextmanager
def enabled(devices: Iterable[str] = _DEFAULT_DEVICES) -> Iterator[None]:
    """``with oink.enabled(): ...`` routes inside the block (as enable(devices)) and restores the
    previous state on exit, off or on with its devices; blocks nest."""
    previous = is_enabled()
    enable(devices)
    try:
        yield
    finally:
        if previous is None:
            disable()
        else:
            enable(previous)
