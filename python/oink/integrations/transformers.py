"""Run a loaded Hugging Face transformers model's norms and causal-LM loss on oink.

    from oink.integrations.transformers import patch, unpatch

    replaced = patch(model)  # [(qualified name, old class), ...]; the model now runs on oink
    unpatch(model)           # the original module objects and loss are back

Covered families (recognised by transformers' own classes, never by name):

* Llama, Mistral, Qwen2, Qwen3 (q_norm/k_norm on head views included), DeepSeek-V3:
  ``<Family>RMSNorm`` -> ``OinkRMSNorm``, ``y = x * rsqrt(mean(x^2) + eps) * weight``.
* Gemma, Gemma-3 (q_norm/k_norm included): ``GemmaRMSNorm``/``Gemma3RMSNorm`` ->
  ``OinkOffsetRMSNorm``, ``y = x * rsqrt(mean(x^2) + eps) * (1 + weight)``.
* GPT-2: ``nn.LayerNorm`` (one normalized dimension) -> ``OinkLayerNorm``.

The replacement modules hold the original modules' parameter objects (the same ``weight`` and
``bias``: state_dict keys, tied weights and optimizer state are unchanged) and compute with
``oink.rmsnorm`` / ``oink.layernorm``, differentiable on the CPU and CUDA.

Numerics. oink computes each row in float32 (float64 on the CPU for LayerNorm) and rounds once to
the output dtype. transformers' Llama-form RMSNorm casts the normalized row to the input dtype and
then multiplies by the weight: two roundings. With 16-bit activations the results may therefore
differ by about one unit in the last place of the output dtype; in float32 they agree to float32
rounding. The output dtype is transformers' (Llama form: the promotion of the input's and the
weight's dtypes; Gemma form and LayerNorm: the input's).

Training with Gemma's ``1 + weight``: ``OinkOffsetRMSNorm`` computes ``1 + weight.float()`` on
every call (a float32 [N] vector, no copy of the activations), so it always sees the current
weight and its gradient flows back to ``weight`` through autograd.

Loss (``loss=True``): a causal-LM model whose ``loss_function`` is transformers'
``ForCausalLMLoss`` gets an equivalent that calls ``oink.cross_entropy`` (labels shifted as
transformers does, ``ignore_index=-100``, ``num_items_in_batch`` as transformers: a sum divided by
it). The logits are upcast to float32 as transformers does; when that upcast makes a copy, the
gradient is written over the copy (``inplace_backward``), saving an [M, V] buffer. In training
(labels given, grad mode on) a model whose output embedding is an ``nn.Linear`` computes its loss
with ``oink.linear_cross_entropy`` from the last hidden states instead (the [M, V] logits are
never held; Gemma's ``final_logit_softcapping`` is the softcap), and its forward returns
``logits=None`` then, as Liger's does. Without labels or without grad, its own forward runs.

Messages: a model class outside the covered families is left unchanged with a ``UserWarning``
(``warnings.warn``); so is a loss that is not ``ForCausalLMLoss``.

Patch before wrapping or dispatching the model (accelerate's device-map/offload hooks, PEFT,
torch.compile): hooks registered on the original norm modules are not carried over.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import types
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from oink._cross_entropy import cross_entropy, linear_cross_entropy
from oink.ops import layernorm, rmsnorm

__all__ = [
    "OinkLayerNorm",
    "OinkOffsetRMSNorm",
    "OinkRMSNorm",
    "oink_causal_lm_loss",
    "patch",
    "unpatch",
]

# family: (modeling module, [(norm class name, form)]). form "llama": y = rmsnorm(x) * weight;
# "gemma": y = rmsnorm(x) * (1 + weight); "layernorm": torch.nn.LayerNorm.
_FAMILIES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "llama": ("transformers.models.llama.modeling_llama", [("LlamaRMSNorm", "llama")]),
    "mistral": ("transformers.models.mistral.modeling_mistral", [("MistralRMSNorm", "llama")]),
    "qwen2": ("transformers.models.qwen2.modeling_qwen2", [("Qwen2RMSNorm", "llama")]),
    "qwen3": ("transformers.models.qwen3.modeling_qwen3", [("Qwen3RMSNorm", "llama")]),
    "deepseek_v3": (
        "transformers.models.deepseek_v3.modeling_deepseek_v3",
        [("DeepseekV3RMSNorm", "llama")],
    ),
    "gemma": ("transformers.models.gemma.modeling_gemma", [("GemmaRMSNorm", "gemma")]),
    "gemma3": ("transformers.models.gemma3.modeling_gemma3", [("Gemma3RMSNorm", "gemma")]),
    "gpt2": ("transformers.models.gpt2.modeling_gpt2", [("LayerNorm", "layernorm")]),
}

_STATE_ATTR = "_oink_patch_state"
_MISSING = object()


def _last_dim_contiguous(x: torch.Tensor) -> torch.Tensor:
    return x if x.dim() == 0 or x.stride(-1) == 1 else x.contiguous()


class OinkRMSNorm(nn.Module):
    """Replaces a Llama-form RMSNorm (LlamaRMSNorm, MistralRMSNorm, Qwen2RMSNorm, Qwen3RMSNorm,
    DeepseekV3RMSNorm): ``weight * rmsnorm(x)``, one rounding (see the module docstring), in the
    dtype transformers returns: promote(x.dtype, weight.dtype)."""

    def __init__(self, original: nn.Module):
        super().__init__()
        self.weight = original.weight
        self.variance_epsilon = float(original.variance_epsilon)
        self.train(original.training)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(hidden_states.dtype, self.weight.dtype)
        x = _last_dim_contiguous(hidden_states.to(dtype))
        return rmsnorm(x, self.weight, self.variance_epsilon)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon} (oink)"


class OinkOffsetRMSNorm(nn.Module):
    """Replaces GemmaRMSNorm / Gemma3RMSNorm: ``rmsnorm(x) * (1 + weight)`` with the scale in
    float32, as transformers computes it, rounded once to x's dtype. ``1 + weight.float()`` is
    computed on each call (a [N] vector): correct while the weight trains."""

    def __init__(self, original: nn.Module):
        super().__init__()
        self.weight = original.weight
        self.eps = float(original.eps)
        self.train(original.training)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = 1.0 + self.weight.float()
        return rmsnorm(_last_dim_contiguous(x), scale, self.eps)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}, scale=1+weight (oink)"


class OinkLayerNorm(nn.Module):
    """Replaces ``nn.LayerNorm`` over one dimension: ``oink.layernorm(x, weight, bias, eps)``,
    rounded once to x's dtype. Under autocast the input is taken in float32, as autocast runs
    layer_norm in float32."""

    def __init__(self, original: nn.LayerNorm):
        super().__init__()
        self.normalized_shape = tuple(original.normalized_shape)
        self.eps = float(original.eps)
        self.elementwise_affine = original.elementwise_affine
        self.weight = original.weight
        self.bias = original.bias
        self.train(original.training)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_autocast_enabled(x.device.type):
            x = x.float()
        return layernorm(_last_dim_contiguous(x), self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps} (oink)"


def oink_causal_lm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    vocab_size: int,
    num_items_in_batch: torch.Tensor | int | None = None,
    ignore_index: int = -100,
    shift_labels: torch.Tensor | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    """transformers' ``ForCausalLMLoss`` computed with ``oink.cross_entropy``: float32 logits,
    labels shifted left by one (the last position ignored) unless ``shift_labels`` is given, mean
    over the labels that are not ``ignore_index``, or the sum divided by ``num_items_in_batch``
    when it is given. Extra keyword arguments are ignored, as transformers ignores them."""
    upcast = logits.dtype != torch.float32
    logits = logits.float()
    if shift_labels is None:
        labels = nn.functional.pad(labels, (0, 1), value=ignore_index)
        shift_labels = labels[..., 1:]
    logits = logits.reshape(-1, vocab_size)
    shift_labels = shift_labels.reshape(-1).to(device=logits.device, dtype=torch.int64)
    reduction = "sum" if num_items_in_batch is not None else "mean"
    # The gradient may overwrite the logits only when they are our own float32 copy.
    loss = cross_entropy(
        logits,
        shift_labels,
        ignore_index=ignore_index,
        reduction=reduction,
        inplace_backward=upcast and torch.is_grad_enabled(),
    )
    if reduction == "sum":
        if torch.is_tensor(num_items_in_batch):
            num_items_in_batch = num_items_in_batch.to(loss.device)
        loss = loss / num_items_in_batch
    return loss


@dataclass
class _PatchState:
    modules: list[tuple[str, nn.Module]] = field(default_factory=list)
    loss: Any = _MISSING  # the model's own `_loss_function` before the patch (or _MISSING)
    loss_patched: bool = False
    forward_patched: bool = False  # the instance's forward runs the fused linear loss


def _fused_loss_forward(model: nn.Module):
    """The model's forward, except in training with labels: the base model's last hidden states
    go to oink.linear_cross_entropy with the output embedding's weight (and bias), the labels
    shifted as ForCausalLMLoss shifts them, and the logits are never made."""
    original = type(model).forward
    signature = inspect.signature(original)
    output_type = signature.return_annotation
    if not (dataclasses.is_dataclass(output_type) and "logits" in output_type.__dataclass_fields__):
        return None

    def forward(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        labels = bound.arguments.get("labels")
        if labels is None or not torch.is_grad_enabled():
            return original(self, *args, **kwargs)
        extra = dict(bound.arguments.pop("kwargs", {}))
        bound.arguments.pop("self")
        bound.arguments.pop("labels")
        bound.arguments.pop("logits_to_keep", None)
        shift_labels = extra.pop("shift_labels", None)
        num_items = extra.get("num_items_in_batch")
        outputs = self.base_model(**bound.arguments, **extra)
        hidden = outputs.last_hidden_state
        if shift_labels is None:
            shift_labels = nn.functional.pad(labels, (0, 1), value=-100)[..., 1:]
        head = self.get_output_embeddings()
        softcap = getattr(self.config, "final_logit_softcapping", None)
        loss = linear_cross_entropy(
            hidden,
            head.weight,
            shift_labels.to(device=hidden.device, dtype=torch.int64),
            head.bias,
            softcap=softcap,
            reduction="sum" if num_items is not None else "mean",
        )
        if num_items is not None:
            loss = loss / (num_items.to(loss.device) if torch.is_tensor(num_items) else num_items)
        fields = output_type.__dataclass_fields__
        passed = {k: v for k, v in outputs.items() if k in fields and k != "last_hidden_state"}
        return output_type(loss=loss, logits=None, **passed)

    return forward


def _patch_forward(model: nn.Module, state: _PatchState) -> bool:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, nn.Linear) or "forward" in model.__dict__:
        return False
    forward = _fused_loss_forward(model)
    if forward is None:
        return False
    model.forward = types.MethodType(forward, model)
    state.forward_patched = True
    return True


def _family_of(model: nn.Module) -> str | None:
    module = type(model).__module__
    for family, (modeling, _) in _FAMILIES.items():
        if module == modeling:
            return family
    return None


def _norm_classes(family: str) -> dict[type, str]:
    modeling, norms = _FAMILIES[family]
    classes: dict[type, str] = {}
    for name, form in norms:
        if form == "layernorm":
            classes[nn.LayerNorm] = form
        else:
            classes[getattr(importlib.import_module(modeling), name)] = form
    return classes


def _replacement(module: nn.Module, form: str) -> nn.Module | None:
    if form == "llama":
        return OinkRMSNorm(module)
    if form == "gemma":
        return OinkOffsetRMSNorm(module)
    if len(module.normalized_shape) != 1:
        return None
    return OinkLayerNorm(module)


def _set_submodule(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def _patch_loss(model: nn.Module, state: _PatchState) -> bool:
    try:
        from transformers.loss.loss_utils import ForCausalLMLoss
    except ImportError:  # transformers < 4.46: the loss is computed inside forward
        warnings.warn(
            f"oink: {type(model).__name__}'s loss was left unchanged: this transformers has no "
            "loss_function (>= 4.46 needed)",
            stacklevel=3,
        )
        return False
    prop = getattr(type(model), "loss_function", None)
    current = getattr(model, "loss_function", None)
    if current is not ForCausalLMLoss or not isinstance(prop, property) or prop.fset is None:
        warnings.warn(
            f"oink: {type(model).__name__}'s loss was left unchanged: its loss_function is "
            f"{getattr(current, '__name__', current)!r}, not transformers' ForCausalLMLoss",
            stacklevel=3,
        )
        return False
    state.loss = model.__dict__.get("_loss_function", _MISSING)
    model.loss_function = oink_causal_lm_loss
    state.loss_patched = True
    return True


def patch(model: nn.Module, norms: bool = True, loss: bool = True) -> list[tuple[str, Any]]:
    """Replace, in place, the norm modules of a loaded transformers model with oink's (and, with
    ``loss=True``, its causal-LM loss). Returns what was replaced: ``(qualified module name, old
    module class)`` for each norm, and ``("loss_function", old loss function)`` when the loss
    was replaced. A model whose class is not of a covered family is left unchanged, with a
    UserWarning (``warnings.warn``); so is a model that is already patched."""
    family = _family_of(model)
    if family is None:
        warnings.warn(
            f"oink: {type(model).__module__}.{type(model).__name__} is not a model oink knows "
            f"(covered: {', '.join(_FAMILIES)}); it was left unchanged",
            stacklevel=2,
        )
        return []
    if getattr(model, _STATE_ATTR, None) is not None:
        warnings.warn(
            f"oink: {type(model).__name__} is already patched; call unpatch() first", stacklevel=2
        )
        return []
    state = _PatchState()
    replaced: list[tuple[str, Any]] = []
    if norms:
        classes = _norm_classes(family)
        targets = [
            (name, module, classes[type(module)])
            for name, module in model.named_modules()
            if name and type(module) in classes
        ]
        for name, module, form in targets:
            new = _replacement(module, form)
            if new is None:
                continue
            _set_submodule(model, name, new)
            state.modules.append((name, module))
            replaced.append((name, type(module)))
    if loss:
        old_loss = getattr(model, "loss_function", None)
        if _patch_loss(model, state):
            replaced.append(("loss_function", old_loss))
            if _patch_forward(model, state):
                replaced.append(("forward", type(model).forward))
    object.__setattr__(model, _STATE_ATTR, state)
    return replaced


def unpatch(model: nn.Module) -> list[tuple[str, Any]]:
    """Undo ``patch``: put the original module objects (and loss function) back. Returns what
    was restored, as ``patch`` returned it; an empty list for a model that is not patched."""
    state: _PatchState | None = getattr(model, _STATE_ATTR, None)
    if state is None:
        return []
    restored: list[tuple[str, Any]] = []
    for name, module in state.modules:
        _set_submodule(model, name, module)
        restored.append((name, type(module)))
    if state.loss_patched:
        if state.loss is _MISSING:
            model.__dict__.pop("_loss_function", None)
        else:
            model.__dict__["_loss_function"] = state.loss
        restored.append(("loss_function", model.loss_function))
    if state.forward_patched:
        del model.forward  # the class's forward again
        restored.append(("forward", type(model).forward))
    object.__delattr__(model, _STATE_ATTR)
    return restored
