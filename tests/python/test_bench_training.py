"""The training benchmark (`python -m oink.bench.training`) in its CPU mode: in every case
(RMSNorm and LayerNorm, forward and backward) every provider is gated against float64 and timed,
or reported with the reason (absent peers, a wrong result)."""

from __future__ import annotations

import json

import torch

from oink.bench import training


def test_cpu_run_gates_times_and_reports(tmp_path, monkeypatch) -> None:
    def wrong(*args):  # the compiled formula's outputs, the first off by a factor
        first, *rest = training.FORMULAS[case_name[0]](*args)
        return (first * 1.1, *rest)

    case_name = [None]
    real = training.providers

    def with_wrong(case, device):
        case_name[0] = case
        have, missing = real(case, device)
        return {**have, "wrong": wrong}, missing

    monkeypatch.setattr(training, "providers", with_wrong)
    assert training.main(["--cpu", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert set(doc["cases"]) == set(training.CASES)
    for name, records in doc["cases"].items():
        case = training.CASES[name]
        by = {}
        for r in records:
            by.setdefault(r["provider"], []).append(r)
        assert len(by["oink"]) == len(training.CPU_SHAPES)
        for r in by["oink"] + by["torch_compile"]:
            assert r["time_us"] > 0 and 0 < r["pct_of_copy"] and r["bytes"] > 0, (name, r)
        for r in by["torch_compile"]:
            assert r["oink_speedup"] > 0
        for r in by["wrong"]:
            assert "time_us" not in r and "correctness gate" in r["skipped"]
            assert case.outputs[0] in r["skipped"]
        peers = (
            ("quack", "liger", "flashinfer_cute")
            if name == "layernorm forward"
            else ("quack", "liger")
        )
        for peer in peers:
            assert all(r["skipped"] == "CUDA only" for r in by[peer])
    text = (tmp_path / "results.md").read_text()
    assert "## layernorm backward" in text and "| 1024 | 64 |" in text
    assert "wrong: correctness gate" in text


def test_reference_and_error_in_blocks(monkeypatch) -> None:
    """The float64 reference and the error, taken a block at a time (the largest batches), equal
    the whole batch's; statistics shaped (M, 1), as PyTorch's own kernels return them, compare
    as the reference's (M,); outputs of another size never pass."""
    case = "layernorm backward"
    g = torch.Generator().manual_seed(7)
    m, n = 37, 24
    dy, x = torch.randn(m, n, generator=g), torch.randn(m, n, generator=g) + 0.5
    mean, rstd = x.mean(-1), torch.rsqrt(x.var(-1, unbiased=False) + training.EPS)
    w, b = torch.randn(n, generator=g), torch.randn(n, generator=g)
    whole = training.reference(case, (dy, x, mean, rstd), (w, b))
    monkeypatch.setattr(training, "REFERENCE_BLOCK_ROWS", 5)
    monkeypatch.setattr(training, "REFERENCE_BLOCK_ELEMS", 100)
    blocks = training.reference(case, (dy, x, mean, rstd), (w, b))
    for a, c in zip(whole, blocks, strict=True):
        assert a.shape == c.shape
        torch.testing.assert_close(a, c, rtol=1e-12, atol=1e-12)
    dx = whole[0]
    assert abs(training.rel_l2(dx * (1 + 1e-3), dx) - 1e-3) < 1e-9
    assert training.rel_l2(rstd.unsqueeze(-1), rstd.double()) == 0
    assert training.rel_l2(rstd[:-1], rstd.double()) == float("inf")


def test_gate_of_a_provider_without_statistics() -> None:
    """An inference kernel (Y_ONLY) is gated on y alone; any other provider must return every
    output, and a wrong y is caught either way."""
    case = training.CASES["layernorm forward"]
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 64, generator=g)
    w, b = torch.randn(64, generator=g), torch.randn(64, generator=g)
    ref = training.reference(case.name, (x,), (w, b))

    def y_only(x, w, b):
        return (training.ln_forward_formula(x, w, b)[0],)

    assert training.gate(case, y_only, (x, w, b), ref, y_only=True) is None
    assert "1 outputs for 3" in training.gate(case, y_only, (x, w, b), ref)
    assert "y rel_l2" in training.gate(case, lambda *a: (y_only(*a)[0] * 1.1,), (x, w, b), ref,
                                       y_only=True)  # fmt: skip


def test_bytes_model() -> None:
    """The least each pass moves (the docstring's model), bf16 rows, M x N = 8 x 64."""
    m, n, e = 8, 64, 2
    assert (
        training.CASES["rmsnorm forward"].model_bytes(m, n, e, e) == 2 * m * n * e + 4 * m + n * e
    )
    rms_back = training.CASES["rmsnorm backward"].model_bytes(m, n, e, e)
    assert rms_back == 3 * m * n * e + 4 * m + 2 * n * e
    ln_fwd = training.CASES["layernorm forward"].model_bytes(m, n, e, 4)
    assert ln_fwd == 2 * m * n * e + 8 * m + 2 * n * 4
    ln_back = training.CASES["layernorm backward"].model_bytes(m, n, e, 4)
    assert ln_back == 3 * m * n * e + 8 * m + 3 * n * 4


def test_formulas_match_float64() -> None:
    """The torch baselines' formulas are the passes (float64 reference, float32 inputs)."""
    g = torch.Generator().manual_seed(3)
    x, dy = (torch.randn(9, 256, generator=g) for _ in range(2))
    w, b = torch.randn(256, generator=g), torch.randn(256, generator=g)
    for name, case in training.CASES.items():
        if case.pass_ == "forward":
            inputs = (x,)
        elif case.op == "rmsnorm":
            inputs = (dy, x, training.rms_forward_formula(x, w)[1])
        else:
            inputs = (dy, x, *training.ln_forward_formula(x, w, b)[1:])
        params = (w,) if case.op == "rmsnorm" else (w, b)
        got = training.FORMULAS[name](*inputs, *params)
        for out, ref in zip(got, training.reference(name, inputs, params), strict=True):
            assert training.rel_l2(out, ref) < 1e-5, name


def test_oink_bench_runs_the_training_passes(tmp_path) -> None:
    """`oink-bench training ...` is `python -m oink.bench.training ...`."""
    from oink.bench.__main__ import main

    out = tmp_path / "run"
    assert (
        main(["training", "--cpu", "--op", "rmsnorm", "--pass", "forward", "--out", str(out)]) == 0
    )
    doc = json.loads((out / "results.json").read_text())
    assert list(doc["cases"]) == ["rmsnorm forward"]
