"""No silent gradients: oink's ops have no backward kernels yet, so a call on inputs that require
grad, with grad mode on, raises instead of returning outputs whose gradients would be None.

Registered at the dispatcher's Autograd key, so torch.ops.oink.* is guarded as well as the
wrappers. Under torch.inference_mode() (vLLM) the key is skipped and this costs nothing; otherwise
it costs one Python call per op before the kernel is dispatched.
"""

import torch

_BELOW_AUTOGRAD = torch._C._after_autograd_keyset
_LIBRARY = torch.library.Library("oink", "IMPL")  # kept alive: the registrations live with it


def _refuse(op: str, tensors) -> None:
    if not torch.is_grad_enabled():
        return
    names = [name for name, t in tensors if t is not None and t.requires_grad]
    if names:
        raise RuntimeError(
            f"oink.{op}: argument '{names[0]}' requires grad, but oink has no backward kernels "
            "yet, so its gradients would be silently lost. Call oink under torch.no_grad() or "
            "torch.inference_mode() for inference, or use torch.nn.functional.rms_norm for "
            "training."
        )


def _rmsnorm(keyset, x, weight, eps):
    _refuse("rmsnorm", (("x", x), ("weight", weight)))
    return torch.ops.oink.rmsnorm.default.redispatch(keyset & _BELOW_AUTOGRAD, x, weight, eps)


def _rmsnorm_out(keyset, x, weight, eps, *, out):
    _refuse("rmsnorm", (("x", x), ("weight", weight), ("out", out)))
    return torch.ops.oink.rmsnorm.out.redispatch(keyset & _BELOW_AUTOGRAD, x, weight, eps, out=out)


def _fused_add_rms_norm(keyset, x, residual, weight, eps):
    _refuse("fused_add_rms_norm", (("x", x), ("residual", residual), ("weight", weight)))
    return torch.ops.oink.fused_add_rms_norm.default.redispatch(
        keyset & _BELOW_AUTOGRAD, x, residual, weight, eps
    )


_LIBRARY.impl("rmsnorm", _rmsnorm, "Autograd", with_keyset=True)
_LIBRARY.impl("rmsnorm.out", _rmsnorm_out, "Autograd", with_keyset=True)
_LIBRARY.impl("fused_add_rms_norm", _fused_add_rms_norm, "Autograd", with_keyset=True)
