"""oink.integrations.transformers: patch/unpatch of tiny, randomly initialised transformers
models of each covered family (no download), on the CPU in float32: the patched model's logits,
loss and gradients match the stock model's; unpatch restores the very same module objects."""

import warnings

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")

from oink.integrations.transformers import (  # noqa: E402
    OinkLayerNorm,
    OinkOffsetRMSNorm,
    OinkRMSNorm,
    oink_causal_lm_loss,
    patch,
    unpatch,
)

VOCAB = 256
SMALL = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=VOCAB,
)


def _llama():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL))


def _mistral():
    return transformers.MistralForCausalLM(transformers.MistralConfig(**SMALL))


def _qwen2():
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**SMALL))


def _qwen3():
    return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**SMALL, head_dim=16))


def _gemma():
    return transformers.GemmaForCausalLM(transformers.GemmaConfig(**SMALL, head_dim=16))


def _gemma3():
    config = transformers.Gemma3TextConfig(**SMALL, head_dim=16, sliding_window=8)
    return transformers.Gemma3ForCausalLM(config)


def _deepseek_v3():
    config = transformers.DeepseekV3Config(
        **SMALL,
        moe_intermediate_size=32,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=1,
        q_lora_rank=32,
        kv_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=16,
    )
    return transformers.DeepseekV3ForCausalLM(config)


def _gpt2():
    config = transformers.GPT2Config(
        n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=32, bos_token_id=0
    )
    config.eos_token_id = 0
    return transformers.GPT2LMHeadModel(config)


# family: (builder, replacement class, names that must be among the replaced modules)
FAMILIES = {
    "llama": (_llama, OinkRMSNorm, ["model.norm", "model.layers.1.input_layernorm"]),
    "mistral": (_mistral, OinkRMSNorm, ["model.norm"]),
    "qwen2": (_qwen2, OinkRMSNorm, ["model.norm"]),
    "qwen3": (_qwen3, OinkRMSNorm, ["model.layers.0.self_attn.q_norm", "model.norm"]),
    "gemma": (_gemma, OinkOffsetRMSNorm, ["model.norm"]),
    "gemma3": (_gemma3, OinkOffsetRMSNorm, ["model.layers.0.self_attn.k_norm", "model.norm"]),
    "deepseek_v3": (_deepseek_v3, OinkRMSNorm, ["model.layers.0.self_attn.kv_a_layernorm"]),
    "gpt2": (_gpt2, OinkLayerNorm, ["transformer.ln_f", "transformer.h.0.ln_1"]),
}

RTOL, ATOL = 1e-5, 1e-5


def _build(family):
    torch.manual_seed(0)
    model = FAMILIES[family][0]().float()
    # Random norm weights (and biases), so that a wrong scale cannot pass as the identity.
    with torch.no_grad():
        for module in model.modules():
            if isinstance(getattr(module, "weight", None), nn.Parameter) and (
                "Norm" in type(module).__name__
            ):
                module.weight.add_(0.2 * torch.randn_like(module.weight))
                if getattr(module, "bias", None) is not None:
                    module.bias.add_(0.2 * torch.randn_like(module.bias))
    return model.eval()


def _batch():
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, VOCAB, (2, 12), generator=g)
    labels = ids.clone()
    labels[0, :4] = -100  # ignored positions, as a chat template's prompt
    labels[1, -2] = -100
    return ids, labels


def _run(model, ids, labels):
    """The logits (without grad: a patched model's training forward makes none), and the loss
    and gradients of a training step."""
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=labels)
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    return logits, out.loss.detach(), grads


def _norm_modules(model):
    return {
        name: module for name, module in model.named_modules() if "Norm" in type(module).__name__
    }


@pytest.mark.parametrize("family", list(FAMILIES))
def test_patch_matches_stock_and_unpatch_restores(family):
    model = _build(family)
    ids, labels = _batch()
    logits_ref, loss_ref, grads_ref = _run(model, ids, labels)
    norms_before = _norm_modules(model)
    keys_before = list(model.state_dict())

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a covered family patches without a warning
        replaced = patch(model)

    _, new_cls, must = FAMILIES[family]
    names = [name for name, _ in replaced]
    assert names[-2:] == ["loss_function", "forward"]
    assert set(names[:-2]) == set(norms_before)
    assert all(name in names for name in must)
    for name, old_cls in replaced[:-2]:
        assert old_cls is type(norms_before[name])
        new = model.get_submodule(name)
        assert type(new) is new_cls
        assert new.weight is norms_before[name].weight  # the same Parameter
    assert model.loss_function is oink_causal_lm_loss
    assert list(model.state_dict()) == keys_before

    # Training with labels: the fused linear + cross-entropy, no logits made.
    assert model(input_ids=ids, labels=labels).logits is None
    logits, loss, grads = _run(model, ids, labels)
    torch.testing.assert_close(logits, logits_ref, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(loss, loss_ref, rtol=RTOL, atol=ATOL)
    assert grads.keys() == grads_ref.keys()
    for name in grads_ref:
        torch.testing.assert_close(grads[name], grads_ref[name], rtol=1e-4, atol=1e-5, msg=name)

    restored = unpatch(model)
    assert [name for name, _ in restored] == names
    after = _norm_modules(model)
    assert after.keys() == norms_before.keys()
    assert all(after[name] is norms_before[name] for name in after)
    assert "_loss_function" not in model.__dict__ and "forward" not in model.__dict__
    assert model.loss_function is transformers.loss.loss_utils.ForCausalLMLoss
    logits_back, loss_back, grads_back = _run(model, ids, labels)
    assert torch.equal(logits_back, logits_ref)
    assert torch.equal(loss_back, loss_ref)
    assert all(torch.equal(grads_back[n], grads_ref[n]) for n in grads_ref)
    assert unpatch(model) == []


def test_qwen3_head_norms_on_head_views():
    """q_norm/k_norm see [B, T, H, D] views of the projection; [B, H, T, D] transposed views
    (strided leading dimensions) give the same result as transformers' module."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    torch.manual_seed(1)
    stock = Qwen3RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        stock.weight.add_(torch.randn(16))
    ours = OinkRMSNorm(stock)
    qkv = torch.randn(2, 5, 3 * 4 * 16)
    heads = qkv[..., : 4 * 16].view(2, 5, 4, 16)  # [B, T, H, D], row stride 3 * 64
    for view in (heads, heads.transpose(1, 2)):  # and [B, H, T, D]
        torch.testing.assert_close(ours(view), stock(view), rtol=RTOL, atol=1e-6)


def test_gemma_scale_follows_training_updates():
    """(1 + weight) is taken at each call: after an optimizer step the patched Gemma norm still
    matches transformers', and its gradient reaches the weight."""
    model = _build("gemma3")
    ids, labels = _batch()
    stock = _build("gemma3")
    patch(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    stock_opt = torch.optim.SGD(stock.parameters(), lr=0.5)
    for _ in range(2):
        for m, o in ((model, opt), (stock, stock_opt)):
            o.zero_grad()
            m(input_ids=ids, labels=labels).loss.backward()
            o.step()
    norm = model.model.norm
    assert isinstance(norm, OinkOffsetRMSNorm)
    torch.testing.assert_close(norm.weight, stock.model.norm.weight, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, stock(ids).logits, rtol=1e-4, atol=1e-4)


def test_sixteen_bit_within_one_rounding():
    """bfloat16 activations: oink rounds once, transformers twice; within bf16 rounding. A
    float32 weight with bfloat16 activations gives float32, as transformers does."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    torch.manual_seed(2)
    stock = LlamaRMSNorm(256).bfloat16()
    with torch.no_grad():
        stock.weight.add_(torch.randn(256, dtype=torch.bfloat16) * 0.3)
    x = torch.randn(8, 256, dtype=torch.bfloat16)
    y = OinkRMSNorm(stock)(x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y, stock(x), rtol=2**-7, atol=1e-2)
    stock32 = LlamaRMSNorm(256)
    y32 = OinkRMSNorm(stock32)(x)
    assert y32.dtype == stock32(x).dtype == torch.float32
    torch.testing.assert_close(y32, stock32(x), rtol=2**-7, atol=1e-2)

    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    gemma = GemmaRMSNorm(256)
    with torch.no_grad():
        gemma.weight.add_(torch.randn(256) * 0.3)
    y = OinkOffsetRMSNorm(gemma)(x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y, gemma(x), rtol=2**-7, atol=1e-2)


def test_unknown_model_left_alone_with_warning():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    class Custom(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = LlamaRMSNorm(8)

    model = Custom()
    norm = model.norm
    with pytest.warns(UserWarning, match="not a model oink knows"):
        assert patch(model) == []
    assert model.norm is norm
    assert unpatch(model) == []


def test_norms_only_and_loss_only():
    model = _build("llama")
    replaced = patch(model, loss=False)
    assert "loss_function" not in [name for name, _ in replaced]
    assert model.loss_function is transformers.loss.loss_utils.ForCausalLMLoss
    with pytest.warns(UserWarning, match="already patched"):
        assert patch(model) == []
    unpatch(model)

    replaced = patch(model, norms=False)
    assert [name for name, _ in replaced] == ["loss_function", "forward"]
    assert isinstance(model.model.norm, transformers.models.llama.modeling_llama.LlamaRMSNorm)
    assert model.loss_function is oink_causal_lm_loss
    unpatch(model)
    assert model.loss_function is transformers.loss.loss_utils.ForCausalLMLoss


def test_fused_loss_with_num_items_and_shift_labels():
    """The fused training forward follows ForCausalLMLoss: the sum over num_items_in_batch, and
    caller-shifted labels; without grad the model's own forward (with logits) runs."""
    stock, model = _build("qwen3"), _build("qwen3")
    patch(model)
    ids, labels = _batch()
    shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()
    for kwargs in ({"num_items_in_batch": torch.tensor(7)}, {"shift_labels": shifted}):
        ref = stock(input_ids=ids, labels=labels, **kwargs).loss
        got = model(input_ids=ids, labels=labels, **kwargs)
        assert got.logits is None
        torch.testing.assert_close(got.loss, ref, rtol=RTOL, atol=ATOL)
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels)
    assert out.logits is not None
    torch.testing.assert_close(out.loss, stock(input_ids=ids, labels=labels).loss.detach())


def test_custom_loss_left_alone_with_warning():
    model = _build("llama")

    def my_loss(logits, labels, vocab_size, **kwargs):
        return logits.sum()

    model.loss_function = my_loss
    with pytest.warns(UserWarning, match="loss was left unchanged"):
        replaced = patch(model)
    assert "loss_function" not in [name for name, _ in replaced]
    assert model.loss_function is my_loss
    unpatch(model)
    assert model.loss_function is my_loss


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mode", ["mean", "num_items", "shift_labels", "all_ignored"])
def test_loss_matches_transformers(mode, dtype):
    from transformers.loss.loss_utils import ForCausalLMLoss

    g = torch.Generator().manual_seed(3)
    logits = (3 * torch.randn(3, 7, VOCAB, generator=g)).to(dtype)
    labels = torch.randint(0, VOCAB, (3, 7), generator=g)
    labels[0, :3] = -100
    labels[2, 5] = -100
    kwargs = {}
    if mode == "num_items":
        kwargs["num_items_in_batch"] = torch.tensor(40)
    elif mode == "shift_labels":
        kwargs["shift_labels"] = torch.roll(labels, -1, dims=1)
    elif mode == "all_ignored":
        labels.fill_(-100)

    results = []
    for fn in (ForCausalLMLoss, oink_causal_lm_loss):
        leaf = logits.clone().requires_grad_()
        loss = fn(leaf, labels, VOCAB, **kwargs)
        assert loss.dtype == torch.float32
        if mode == "all_ignored":
            assert torch.isnan(loss)
            continue
        loss.backward()
        results.append((loss.detach(), leaf.grad))
    if mode != "all_ignored":
        (loss_hf, grad_hf), (loss_oink, grad_oink) = results
        torch.testing.assert_close(loss_oink, loss_hf, rtol=RTOL, atol=ATOL)
        tol = dict(rtol=RTOL, atol=1e-7) if dtype == torch.float32 else {}
        torch.testing.assert_close(grad_oink, grad_hf, **tol)
