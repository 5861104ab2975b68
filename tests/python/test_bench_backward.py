"""The backward benchmark (`python -m oink.bench.backward`) in its CPU mode: every provider is
gated against float64 and timed, or reported with the reason (absent peers, a wrong result)."""

from __future__ import annotations

import json

import torch

from oink.bench import backward


def test_cpu_run_gates_times_and_reports(tmp_path, monkeypatch) -> None:
    def wrong(dy, x, w, rstd):  # a provider off by a factor: the gate must stop it
        dx, dw = backward.formula(dy, x, w, rstd)
        return dx * 1.1, dw

    real = backward.providers

    def with_wrong(device):
        have, missing = real(device)
        return {**have, "wrong": wrong}, missing

    monkeypatch.setattr(backward, "providers", with_wrong)
    assert backward.main(["--cpu", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    by = {}
    for r in doc["records"]:
        by.setdefault(r["provider"], []).append(r)
    assert len(by["oink"]) == len(backward.CPU_SHAPES)
    for r in by["oink"] + by["torch_eager"]:
        assert r["time_us"] > 0 and 0 < r["pct_of_copy"] and r["bytes"] > 0
    for r in by["torch_eager"]:
        assert r["oink_speedup"] > 0
    for r in by["wrong"]:
        assert "time_us" not in r and "correctness gate" in r["skipped"] and "dx" in r["skipped"]
    for peer in ("quack", "liger"):
        assert all(r["skipped"] == "CUDA only" for r in by[peer])
    text = (tmp_path / "results.md").read_text()
    assert "| 1024 | 64 |" in text and "wrong: correctness gate" in text


def test_formula_matches_float64() -> None:
    """The torch baselines' formula is RMSNorm's backward (float64 reference, float32 inputs)."""
    g = torch.Generator().manual_seed(3)
    x, dy, w = (torch.randn(9, 256, generator=g) for _ in range(3))
    w = w[0]
    rstd = torch.rsqrt(x.pow(2).mean(-1) + backward.EPS)
    dx, dw = backward.formula(dy, x, w, rstd)
    ref_dx, ref_dw = backward.reference(dy, x, w)
    assert backward.rel_l2(dx, ref_dx) < 1e-6 and backward.rel_l2(dw, ref_dw) < 1e-6
