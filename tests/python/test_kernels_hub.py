"""oink.layers.RMSNorm, the kernels-hub layer: its forward contract (run directly), and the
`kernels` package's own path: a local layer repository mapped to "RMSNorm" with
use_kernel_mapping, then kernelize() on a tiny transformers Llama, on the CPU."""

import json

import pytest
import torch
from torch import nn

from oink.layers import RMSNorm


def _reference(x, weight, eps):
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + eps)
    return weight * y.to(x.dtype)


def test_layer_forward_contract():
    """No constructor arguments; reads the host module's weight and variance_epsilon."""
    assert RMSNorm.__init__ is nn.Module.__init__
    layer = RMSNorm()
    layer.weight = nn.Parameter(torch.randn(64))
    layer.variance_epsilon = 1e-5
    x = torch.randn(3, 5, 64, requires_grad=True)
    y = layer(x)
    torch.testing.assert_close(y, _reference(x, layer.weight, 1e-5), rtol=1e-5, atol=1e-6)
    y.sum().backward()
    assert x.grad is not None and layer.weight.grad is not None
    # Strided head views, transposed.
    heads = torch.randn(2, 7, 4, 64).transpose(1, 2)
    torch.testing.assert_close(layer(heads), _reference(heads, layer.weight, 1e-5))


def test_layer_passes_kernels_validation():
    kernels_layer = pytest.importorskip("kernels._internals.layer.layer")
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    validate = getattr(kernels_layer, "_validate_layer", None)  # private: the check kernelize runs
    if validate is None:
        pytest.skip("this kernels version has no _validate_layer")
    validate(check_cls=llama.LlamaRMSNorm, cls=RMSNorm, repo="oink")


def _local_repo(root):
    """A local kernel repository whose variant is the directory itself (metadata.json beside
    __init__.py) and whose `layers` module re-exports oink's layer."""
    root.mkdir()
    metadata = {
        "id": "oink_hub_test_0",
        "name": "oink-hub-test",
        "version": 1,
        "license": "Apache-2.0",
        "python-depends": [],
        "backend": {"type": "cpu"},
    }
    (root / "metadata.json").write_text(json.dumps(metadata))
    (root / "__init__.py").write_text("from . import layers  # noqa: F401\n")
    (root / "layers.py").write_text("from oink.layers import RMSNorm  # noqa: F401\n")
    return root


def test_kernelize_llama_with_local_repository(tmp_path):
    kernels = pytest.importorskip("kernels")
    transformers = pytest.importorskip("transformers")

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
    ids = torch.randint(0, 256, (2, 9))
    labels = ids.clone()
    labels[0, :3] = -100
    ref = model(input_ids=ids, labels=labels)
    ref.loss.backward()
    grad_ref = model.model.norm.weight.grad.clone()
    model.zero_grad(set_to_none=True)

    repo = kernels.LocalLayerRepository(
        repo_path=_local_repo(tmp_path / "repo"), layer_name="RMSNorm"
    )
    mapping = {"RMSNorm": {"cpu": repo}}
    with kernels.use_kernel_mapping(mapping, inherit_mapping=False):
        kernels.kernelize(model, mode=kernels.Mode.TRAINING, device="cpu")

    norm = model.model.norm
    assert norm.forward.__func__ is RMSNorm.forward  # kernelize swapped in oink's forward
    assert model.model.layers[0].input_layernorm.forward.__func__ is RMSNorm.forward
    out = model(input_ids=ids, labels=labels)
    torch.testing.assert_close(out.logits, ref.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.loss, ref.loss, rtol=1e-5, atol=1e-5)
    out.loss.backward()
    torch.testing.assert_close(norm.weight.grad, grad_ref, rtol=1e-4, atol=1e-6)
