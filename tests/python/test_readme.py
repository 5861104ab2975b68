"""The README's Python blocks run as written (on the CPU here): the "60 seconds" example, and the
PyTorch and Hugging Face lines with a tiny transformers model as `model`."""

import re
from pathlib import Path

import pytest
import torch

import oink

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def block_after(heading: str) -> str:
    section = README.split(f"\n## {heading}\n", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_sixty_seconds_runs(capsys):
    exec(compile(block_after("60 seconds"), "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "rmsnorm max error vs float32" in out and "oink rmsnorm" in out


def test_pytorch_and_hugging_face_lines_run():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=64,
    )
    model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, 64, (1, 8))
    before = model(input_ids=ids).logits
    scope = {"oink": oink, "model": model}
    try:
        exec(compile(block_after("PyTorch and Hugging Face"), "README.md", "exec"), scope)
    finally:
        oink.disable()
    assert scope["replaced"], "patch replaced nothing"
    assert torch.equal(model(input_ids=ids).logits, before)  # unpatched again
