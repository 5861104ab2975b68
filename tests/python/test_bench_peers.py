"""The benchmark's peers, regimes and ratios on the CPU (CI has no GPU).

Peers: a fake peers kit (an `oink_peers.py` in a temporary folder with setup / providers /
unavailable) holding one peer that is correct, one that returns wrong numbers, one that raises,
one with a row limit, and one that did not load. Its peers are made to run on CPU tensors
(providers.peer_catalog(cuda_only=False)) and go through the real runner: the correct one is timed,
the others are reported with their reasons and never timed. Then the regime rules, the GEMM chain's
wiring and arithmetic, the matrix, and the summary math on synthetic records."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

try:
    import oink  # noqa: F401  (loads the native extension)
except ImportError as e:  # pragma: no cover - depends on the build
    pytest.skip(f"oink's extension is not importable: {e}", allow_module_level=True)

from oink.bench import chain, peers, providers, ranking, report, runner, suites

PYTHON_DIR = Path(oink.__file__).resolve().parent.parent

FAKE_KIT = textwrap.dedent(
    """
    import os
    from collections.abc import Callable
    from dataclasses import dataclass

    import torch

    @dataclass(frozen=True, eq=False)
    class Provider:
        name: str
        rmsnorm: Callable
        fused_add: Callable
        pdl: bool
        needs_weight_in_x_dtype: bool
        fused_add_in_place: bool
        max_n: dict
        note: str
        version: str

    def _norm(x, w, eps):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)

    def good_rms(x, w, eps):
        return _norm(x, w, eps)

    def good_add(x, r, w, eps):  # out of place, normalizing the unrounded sum (as Quack does)
        h = x.float() + r.float()
        return _norm(h, w, eps).to(x.dtype), h.to(x.dtype)

    def inplace_add(x, r, w, eps):  # vLLM's way: in place, the rounded sum
        r.add_(x)
        x.copy_(_norm(r, w, eps))
        return x, r

    def wrong_rms(x, w, eps):
        return _norm(x, w, eps) * 1.1  # 10%: over bf16's bound of 4u = 1.6%

    def wrong_add(x, r, w, eps):
        y, h = good_add(x, r, w, eps)
        return y, h * 1.1

    def raises(*args):
        raise RuntimeError("CUDA error: too many resources requested for launch")

    def setup(site_dir, build_dir, log=print):
        os.makedirs(build_dir, exist_ok=True)
        with open(os.path.join(build_dir, "setup-called"), "w") as f:
            f.write(site_dir)
        log("fake kit: built")
        return {"packages": {}, "bindings": {"vllm": "fake.so"}, "peers": {}}

    def _p(name, rms, add, pdl=False, same_w=False, in_place=False, max_n=None):
        limits = max_n or {"rmsnorm": None, "fused_add": None}
        return Provider(name, rms, add, pdl, same_w, in_place, limits, f"fake {name}", "9.9")

    def providers():
        return {
            "quack": _p("quack", good_rms, good_add),
            "liger": _p("liger", wrong_rms, wrong_add),
            "vllm": _p("vllm", raises, raises, same_w=True, in_place=True),
            "flashinfer": _p(
                "flashinfer", good_rms, inplace_add, pdl=True, same_w=True, in_place=True,
                max_n={"rmsnorm": None, "fused_add": 64},
            ),
        }

    def unavailable():
        return {
            "flashinfer_cute": "not importable (ModuleNotFoundError: No module named 'cutlass')",
            "flashinfer_nopdl": "extension failed: nvcc not found",
        }
    """
)


def _kit(tmp_path: Path, text: str = FAKE_KIT) -> Path:
    kit = tmp_path / "kit"
    kit.mkdir()
    (kit / "oink_peers.py").write_text(text)
    return kit


@pytest.fixture(autouse=True)
def _restore_bytecode_flag(monkeypatch):
    # peers.import_kit turns bytecode off for the rest of the process (the CLI's): not pytest's.
    monkeypatch.setattr(sys, "dont_write_bytecode", sys.dont_write_bytecode)
    monkeypatch.setattr(sys, "path", list(sys.path))


# --- the kit --------------------------------------------------------------------------------------


def test_kit_is_set_up_outside_itself_and_without_bytecode(tmp_path):
    kit = _kit(tmp_path)
    log: list[str] = []
    specs, why, status = peers.load(kit, tmp_path / "build", log.append)
    assert sorted(specs) == ["flashinfer", "liger", "quack", "vllm"]
    assert why["flashinfer_cute"].startswith("not importable")
    assert status["kit"] == str(kit.resolve()) and status["bindings"] == {"vllm": "fake.so"}
    site = (tmp_path / "build" / "setup-called").read_text()
    assert Path(site).is_dir() and not Path(site).is_relative_to(kit)  # a fresh temporary folder
    assert not list(kit.rglob("__pycache__")) and sys.dont_write_bytecode
    assert any("setting up" in m for m in log) and any("ready in" in m for m in log)
    assert "fake kit: built" in log  # the kit's own progress is passed through


def test_a_kit_that_fails_to_set_up_makes_every_peer_unavailable_with_the_reason(tmp_path):
    kit = _kit(tmp_path, "def setup(site_dir, build_dir, log=print):\n    raise OSError('disk')\n")
    specs, why, status = peers.load(kit, tmp_path / "build", lambda m: None)
    assert specs == {} and set(why) == set(providers.PEERS)
    assert all("peers kit setup failed: OSError: disk" in r for r in why.values())
    assert "disk" in status["error"]


def test_default_kit_is_dot_peers_in_the_current_directory_when_prepared(tmp_path):
    assert peers.default_dir(tmp_path) is None
    (tmp_path / ".peers").mkdir()
    assert peers.default_dir(tmp_path) is None  # not a prepared kit
    (tmp_path / ".peers" / "oink_peers.py").write_text("")
    assert peers.default_dir(tmp_path) == tmp_path / ".peers"


def test_installed_packages_come_first_and_the_kit_fills_in(tmp_path):
    kit = _kit(tmp_path)
    calls = []

    def load_kit():
        calls.append(1)
        return peers.load(kit, tmp_path / "build", lambda m: None)

    mine = providers.PeerSpec(None, None, False, False, "installed quack", "0.6.5")
    installed = ({"quack": mine}, {"liger": "liger_kernel not importable (No module)"})
    names = list(providers.PEERS)
    specs, found, status = providers.resolve_peers(names, installed, load_kit)
    assert specs["quack"] is mine and found["quack"] == "0.6.5 (installed)"
    assert found["vllm"] == "9.9 (peers kit)" and calls == [1]
    assert found["flashinfer_cute"] == (
        "no installed package provides it; peers kit: not importable "
        "(ModuleNotFoundError: No module named 'cutlass')"
    )
    assert list(specs) == ["quack", "flashinfer", "vllm", "liger"]  # PEERS order
    # Everything installed: the kit is not set up at all.
    specs, found, status = providers.resolve_peers(["quack"], installed, load_kit)
    assert calls == [1] and status is None
    # No kit: the reason says so.
    _, found, _ = providers.resolve_peers(["liger"], installed, None)
    assert found["liger"] == "liger_kernel not importable (No module); no peers kit (--peers DIR)"


# --- peers through the runner on the CPU ----------------------------------------------------------


def _by_op(tmp_path: Path, names: tuple[str, ...] = ("oink", "torch_eager")) -> dict:
    catalog = providers.build("cpu", list(names))
    specs, why, _ = peers.load(_kit(tmp_path), tmp_path / "build", lambda m: None)
    order = list(providers.PEERS)
    found = {n: f"{specs[n].version} (peers kit)" if n in specs else why[n] for n in order}
    peer_list, _ = providers.peer_catalog(order, specs, found, cuda_only=False)
    return {op: catalog.by_op[op] + [p for p in peer_list if p.op == op] for op in providers.OPS}


def _config(parts: list[suites.Part], **kw) -> runner.Config:
    return runner.Config(parts=parts, ops=list(providers.OPS), quick=True, device="cpu", **kw)


def _find(records, provider, op=None, **match) -> list[dict]:
    return [
        r
        for r in records
        if r["provider"] == provider
        and (op is None or r["op"] == op)
        and all(r[k] == v for k, v in match.items())
    ]


def test_every_peer_is_timed_or_reported_with_its_reason(tmp_path):
    bf16 = suites.Variant("bf16", "bf16")
    w32 = suites.Variant("bf16", "fp32")
    parts = [
        suites.Part("decode", bf16, ((64, 1), (64, 4), (128, 2)), ("hbm", "l2")),
        suites.Part("variants", w32, ((64, 2),), ("hbm",)),
    ]
    records: list[dict] = []
    saved: list[tuple] = []  # after each part but the last: what a killed run keeps
    runner.run(
        _config(parts), _by_op(tmp_path), 10.0, records, lambda p: saved.append((p, len(records)))
    )
    assert all(r["status"] != "incomplete" for r in records)
    assert saved == [(parts[0], len([r for r in records if r["suite"] == "decode"]))]

    # The correct peer, out of place: gated (output and returned residual) and timed everywhere.
    quack = _find(records, "quack")
    assert len(quack) == 2 * (3 * 2 + 1) and all(r["status"] == "ok" for r in quack)
    assert all(r["time_us"] > 0 and r["group"] == "peer" for r in quack)
    fused = _find(records, "quack", "fused_add_rms_norm")
    assert all(r["errors"]["residual"]["rel_l2"] <= r["errors"]["bound"] for r in fused)
    assert {r["regime"] for r in quack} == {"hbm", "l2"}
    # Wrong numbers: failed by the float64 gate, with the numbers, and never timed.
    for r in _find(records, "liger"):
        assert r["status"] == "failed" and "time_us" not in r, r
        assert r["reason"].startswith("correctness gate against float64: ")
        assert "rel_l2" in r["reason"] and "over the bound" in r["reason"]
    assert "new residual" in _find(records, "liger", "fused_add_rms_norm")[0]["reason"]
    # Raises: an error with its message (bf16 weight); n/a with an fp32 weight (needs x's dtype).
    for r in _find(records, "vllm", variant="bf16"):
        assert r["status"] == "error" and "too many resources" in r["reason"], r
    for r in _find(records, "vllm", variant="bf16-w32"):
        assert r["status"] == "unsupported"
        assert r["reason"] == "needs the weight in x's dtype (bfloat16), not float32"
    # In place, with a row limit on the fused op (N = 128 > 64): n/a there, timed elsewhere.
    fi = _find(records, "flashinfer", "fused_add_rms_norm", variant="bf16")
    assert {(r["N"], r["status"]) for r in fi} == {(64, "ok"), (128, "unsupported")}
    assert _find(records, "flashinfer", "fused_add_rms_norm", N=128)[0]["reason"] == (
        "N = 128 is over its limit of 64"
    )
    assert all(r["pdl"] for r in _find(records, "flashinfer"))
    # Not loaded: in every cell, with the kit's reason.
    for name in ("flashinfer_cute", "flashinfer_nopdl"):
        recs = _find(records, name)
        assert len(recs) == len(quack) and all(r["status"] == "unsupported" for r in recs)
    assert "cutlass" in _find(records, "flashinfer_cute")[0]["reason"]
    # oink's records name the best peer (flashinfer has PDL, quack does not).
    oink_rec = _find(records, "oink", "rmsnorm", N=64, M=1, regime="hbm")[0]
    assert oink_rec["vs"]["best_peer"] in ("quack", "flashinfer")
    assert oink_rec["vs"]["best_peer_no_pdl"] == "quack"

    run = report.Run(
        env={"command": "x", "date_utc": "d", "oink_version": "v", "oink_revision": "r"}
        | {"torch": "t", "gpu": None, "host_cpu": "cpu", "cpu_threads": 1},
        config={"parts": [], "host_iters": 5},
        found={"flashinfer_cute": "not importable"},
        notes=providers.DESCRIPTIONS,
        kit=None,
        ceiling={"GBps": 10.0, "method": "m"},
    )
    md = report.markdown(run, records, [], "complete")
    assert (
        "## decode · rmsnorm · bf16 · l2" in md and "## variants · rmsnorm · bf16-w32 · hbm" in md
    )
    assert "| N | M | oink | torch_eager | quack | flashinfer_cute | flashinfer |" in md
    why = md.split("## Why n/a")[1]
    assert "`liger` failed" in why and "correctness gate against float64" in why
    assert "`vllm` error" in why and "too many resources" in why
    assert "`flashinfer_cute` unsupported" in why and "cutlass" in why
    assert "`vllm` unsupported" in why and "needs the weight in x's dtype" in why
    text = report.summary_text(run, records, tmp_path, "complete")
    assert "peers not timed somewhere" in text and "liger" in text


# --- the gemm regime ------------------------------------------------------------------------------


def test_gemm_marginal_is_the_median_of_paired_differences_per_layer():
    # Pairs (110, 50), (100, 60), (130, 40): differences 60, 40, 90 over 10 layers.
    m = chain.marginal([110.0, 100.0, 130.0], [50.0, 60.0, 40.0], layers=10)
    assert m["time_us"] == pytest.approx(6.0)
    assert (m["time_us_min"], m["time_us_max"]) == (pytest.approx(4.0), pytest.approx(9.0))
    assert (m["chain_us"], m["chain_without_norms_us"], m["layers"], m["replays"]) == (
        110.0,
        50.0,
        10,
        3,
    )
    # Drift shared by both chains of a pair cancels: each chain spreads over 1400 us, their
    # pairs' differences not at all.
    drift = [1000.0 + 100.0 * i for i in range(15)]
    m = chain.marginal([d + 32.0 for d in drift], drift, layers=32)
    assert m["time_us"] == pytest.approx(1.0) and m["ci95_us"] == [
        pytest.approx(1.0),
        pytest.approx(1.0),
    ]


def test_median_interval_is_the_binomial_order_statistics():
    values = list(range(15, 0, -1))  # 1..15, unsorted
    assert chain.median_interval(values) == (4, 12)  # n = 15: the 4th and the 12th
    assert chain.median_interval(list(range(1, 61))) == (22, 39)  # n = 60: P(B < 22) = 1.7%
    assert chain.median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)  # too few: the range


def test_gemm_marginal_known_to_within_ten_percent_or_noise():
    def pairs(diffs_us: list[float], layers: int = 1) -> dict:
        base = [1000.0 + 7.0 * i for i in range(len(diffs_us))]
        return chain.marginal(
            [b + d * layers for b, d in zip(base, diffs_us, strict=True)], base, layers
        )

    steady = pairs([10.0 + 0.1 * (i % 5) for i in range(15)])
    assert chain.noise(steady) is None
    # Median 10, but the 4th and 12th of the sorted differences 8 and 12: +-20%.
    spread = pairs([8.0] * 4 + [10.0] * 7 + [12.0] * 4)
    assert "noisy" in chain.noise(spread)
    # One wild pair at each end does not move the interval (the old extreme-spread rule's flaw).
    outliers = pairs([0.0] + [10.0] * 13 + [40.0], layers=32)
    assert chain.noise(outliers) is None and outliers["time_us"] == pytest.approx(10.0)
    negative = chain.marginal([99.0, 99.5, 99.2], [100.0, 100.1, 100.2], layers=1)
    assert "noisy" in chain.noise(negative)


def test_gemm_marginals_measured_while_the_chain_drifted_are_noisy():
    def rec(provider: str, without_us: float, regime: str = "gemm") -> dict:
        return {
            "provider": provider,
            "regime": regime,
            "status": "ok",
            "time_us": 3.0,
            "chain_without_norms_us": without_us,
        }

    # The H200's N=7168, M=256 cell: the same graph at 1267-1278 us beside three providers, at
    # 1420-1529 us beside the others (median 1446).
    times = [1445.9, 1446.1, 1267.2, 1272.0, 1365.3, 1447.9, 1446.9, 1517.2, 1278.1]
    cell = [rec(f"p{i}", t) for i, t in enumerate(times)] + [rec("copy", 0.0, "hbm")]
    assert chain.mark_drifted(cell) == 3
    drifted = [r["provider"] for r in cell if r["status"] == "noisy"]
    assert drifted == ["p2", "p3", "p8"]
    assert "1267 us" in cell[2]["reason"] and "-12%" in cell[2]["reason"]
    assert cell[-1]["status"] == "ok"  # other regimes keep theirs
    # Within the tolerance (6% off: the other cells of that run) nothing changes.
    steady = [rec("a", 399.0), rec("b", 422.0), rec("c", 423.0)]
    assert chain.mark_drifted(steady) == 0
    assert all(r["status"] == "ok" for r in steady)
    # Two records have no median to judge by.
    assert chain.mark_drifted([rec("a", 1000.0), rec("b", 1500.0)]) == 0


def test_gemm_chains_are_timed_in_the_same_rounds_and_only_noisy_ones_again(monkeypatch):
    from types import SimpleNamespace

    # A host clock that only the chains move: the test times what the runs say, not the machine.
    clock = [0.0]
    monkeypatch.setattr(chain.time, "perf_counter", lambda: clock[0])
    log: list[str] = []
    calls = {"steady": 0, "jumpy": 0}

    def runner(name: str):
        def run():
            log.append(name)
            clock[0] += 1e-3  # every chain's GEMMs: 1 ms
            if name != "base":
                calls[name] += 1
                # steady: 1 ms more than the baseline per call; jumpy: 0 or 4 ms in turn, a
                # median with a 95% interval far wider than 10% of it.
                clock[0] += 1e-3 if name == "steady" else 4e-3 * (calls[name] % 2)

        return run

    base = SimpleNamespace(device="cpu", graph=None, run=runner("base"))
    steady = SimpleNamespace(graph=None, run=runner("steady"))
    jumpy = SimpleNamespace(graph=None, run=runner("jumpy"))
    out = chain.measure_together([steady, jumpy], base, layers=1, replays=6)
    # Warm-up and timed rounds alike: each round one pair per chain, in turn.
    first = log[: 2 * 2 * (chain.WARMUP + 6)]
    assert first == ["steady", "base", "jumpy", "base"] * (chain.WARMUP + 6)
    # Then only the noisy one, over RETRY_FACTOR times the rounds.
    assert log[len(first) :] == ["jumpy", "base"] * (chain.WARMUP + 6 * chain.RETRY_FACTOR)
    assert out[0]["replays"] == 6 and chain.noise(out[0]) is None
    assert out[0]["time_us"] == pytest.approx(1000.0)
    assert out[0]["chain_without_norms_us"] == pytest.approx(1000.0)
    assert out[1]["replays"] == 6 * chain.RETRY_FACTOR and chain.noise(out[1]) is not None


def test_gemm_chain_wiring():
    gen = torch.Generator().manual_seed(0)
    n, eps = 32, 1e-6
    ws = chain.make_weights(n, torch.float32, "cpu", 3, gen)
    x, r = torch.randn(2, n, generator=gen), torch.randn(2, n, generator=gen)
    w = torch.rand(n, generator=gen) + 0.5
    norm = providers.composite_rmsnorm

    h = x
    for weight in ws:
        h = F.linear(norm(h, w, eps), weight)
    assert torch.allclose(chain.chain("rmsnorm", norm, ws, x, None, w, eps)(), h)
    plain = x
    for weight in ws:
        plain = F.linear(plain, weight)
    assert torch.allclose(chain.chain("rmsnorm", None, ws, x, None, w, eps)(), plain)

    # The fused op carries the residual: res += h; h = (rmsnorm(res)) @ W, layer after layer.
    h, res = x.clone(), r.clone()
    for weight in ws:
        res = res + h
        h = F.linear(norm(res, w, eps), weight)

    def fused(a, b, w, eps):
        return providers.composite_fused(a.clone(), b.clone(), w, eps)

    got_h, got_res = chain.chain("fused_add_rms_norm", fused, ws, x, r, w, eps)()
    assert torch.allclose(got_h, h, atol=1e-5) and torch.allclose(got_res, res, atol=1e-5)


def test_gemm_regime_runs_on_the_cpu_and_skips_over_its_memory_budget(tmp_path):
    bf16 = suites.Variant("bf16", "bf16")
    fp32 = suites.Variant("fp32", "fp32")
    parts = [
        suites.Part("decode", bf16, ((64, 1), (64, 300)), ("gemm",)),  # M = 300: no gemm
        suites.Part("decode", fp32, ((16384, 1),), ("gemm",)),  # 4 x 16384^2 x 4 B: over 1 GiB
    ]
    cfg = _config(parts, chain_layers=4, chain_replays=5)
    cfg.ops = ["fused_add_rms_norm"]
    assert [(s.n, s.m) for s in runner.plan_shapes(cfg)] == [(64, 1), (16384, 1)]
    assert runner.dropped_shapes(cfg) == 1
    records: list[dict] = []
    runner.run(cfg, _by_op(tmp_path), 10.0, records)
    timed = _find(records, "quack", N=64)
    # "noisy" when the CPU's chains drift by more than the marginal (a loaded machine): the
    # wiring below holds either way.
    assert len(timed) == 1 and timed[0]["status"] in ("ok", "noisy")
    r = timed[0]
    assert r["regime"] == "gemm"
    # A noisy first measurement is taken again over RETRY_FACTOR times the replays.
    assert r["layers"] == 4 and r["replays"] in (5, 5 * chain.RETRY_FACTOR)
    assert r["time_us_min"] <= r["ci95_us"][0] <= r["time_us"] <= r["ci95_us"][1]
    assert r["ci95_us"][1] <= r["time_us_max"]
    assert r["weights_bytes"] == 4 * 64 * 64 * 2
    big = _find(records, "oink", N=16384)[0]
    assert big["status"] == "skipped" and "over the 1.0 GiB budget" in big["reason"]


# --- regimes, variants, the matrix ----------------------------------------------------------------


def test_regime_rules():
    assert suites.parse_regimes(None) is None
    assert suites.parse_regimes("gemm, hbm") == ("hbm", "gemm")
    with pytest.raises(ValueError, match="unknown regime"):
        suites.parse_regimes("hbm,cold")
    assert suites.default_regimes("decode", "cuda") == ("hbm", "l2", "gemm")
    assert suites.default_regimes("large", "cuda") == ("hbm",)
    assert suites.default_regimes("decode", "cpu") == ("hbm",)
    assert suites.regimes_for(suites.REGIMES, 256) == suites.REGIMES
    assert suites.regimes_for(suites.REGIMES, 257) == ("hbm",)
    assert suites.regimes_for(("l2", "gemm"), 1024) == ()
    names = [
        suites.Variant(*v).name for v in [("bf16", "bf16"), ("bf16", "fp32"), ("fp16", "fp16")]
    ]
    assert names == ["bf16", "bf16-w32", "fp16"]
    assert suites.Variant("bf16", "bf16", 64).name == "bf16-pad64"


def test_the_matrix_is_the_step6_matrix():
    parts = suites.matrix("cuda", quick=False)
    got = [(p.suite, p.variant.name, p.regimes) for p in parts]
    assert got == [
        ("decode", "bf16", ("hbm", "l2", "gemm")),
        ("mid", "bf16", ("hbm",)),
        ("large", "bf16", ("hbm",)),
        ("large_n", "bf16", ("hbm",)),
        ("variants", "fp16", ("hbm",)),
        ("variants", "bf16-w32", ("hbm",)),
        ("variants", "bf16-pad64", ("hbm",)),
    ]
    decode, mid, large, large_n = parts[:4]
    assert {n for n, _ in decode.shapes} == {4096, 7168, 8192}
    assert sorted({m for _, m in decode.shapes}) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert {n for n, _ in mid.shapes} == {4096, 7168, 8192} and 1024 in {m for _, m in mid.shapes}
    assert {n for n, _ in large.shapes} == {4096, 6144, 7168, 8192, 16384}
    assert {m for _, m in large.shapes} == {4096, 16384, 65536}
    assert {n for n, _ in large_n.shapes} == {16384, 32768, 65536, 131072, 262144}
    assert {m for _, m in large_n.shapes} == {1, 16, 256, 1024, 4096}
    for p in parts[4:]:
        assert set(p.shapes) == {(n, m) for n in (7168, 8192) for m in (1, 256, 4096, 16384)}
    assert parts[6].variant.pad == 64 and parts[5].variant.weight_dtype == "fp32"
    assert all(p.regimes == ("hbm",) for p in suites.matrix("cpu", quick=True))


# --- ratios and summaries on synthetic records ----------------------------------------------------


def _rec(provider, us, n=4096, m=1, regime="hbm", status="ok", **kw):
    r = {"suite": "decode", "variant": "bf16", "op": "rmsnorm", "regime": regime}
    r.update(provider=provider, N=n, M=m, status=status, **kw)
    if status == "ok":
        r["time_us"] = us
    return r


def test_best_peer_no_pdl_pairing_and_baseline():
    cell = [
        _rec("oink", 1.0),
        _rec("oink_no_pdl", 1.5),
        _rec("quack", 1.2),
        _rec("flashinfer", 0.9),  # PDL, by name (records without "pdl")
        _rec("flashinfer_nopdl", 1.6),
        _rec("vllm", None, status="error"),
        _rec("liger", 0.5, status="failed"),  # failed its gate: never the best
        _rec("F.rms_norm", 3.0),
        _rec("inductor", 2.5, group="torch", pdl=False),
        _rec("copy", 0.4),  # the floor (by name in records without "group"): no peer, no baseline
    ]
    c = ranking.compare_cell(cell)
    assert (c["best_peer"], c["oink_x"]) == ("flashinfer", pytest.approx(0.9))
    assert (c["best_peer_no_pdl"], c["no_pdl_x"]) == ("quack", pytest.approx(1.2 / 1.5))
    assert (c["best_baseline"], c["baseline_x"]) == ("inductor", pytest.approx(2.5))
    # A peer that says it has no PDL counts as one without it, whatever its name.
    c = ranking.compare_cell([_rec("oink_no_pdl", 2.0), _rec("flashinfer", 1.0, pdl=False)])
    assert c["best_peer_no_pdl"] == "flashinfer" and c["no_pdl_x"] == pytest.approx(0.5)
    # No peer timed: no peer ratio (and no division by a missing oink).
    assert "oink_x" not in ranking.compare_cell([_rec("oink", 1.0), _rec("quack", 0, "error")])
    assert "oink_x" not in ranking.compare_cell([_rec("quack", 1.0)])


def test_summary_geomean_and_worst_per_regime():
    records = [
        _rec("oink", 1.0, m=1),
        _rec("quack", 0.9, m=1),
        _rec("oink", 2.0, m=2),
        _rec("quack", 4.0, m=2),
        _rec("oink", 1.0, m=4, status="failed"),
        _rec("quack", 1.0, m=4),
        # gemm: a marginal at or below zero is noise, not a time
        _rec("oink", -0.1, regime="gemm"),
        _rec("quack", 1.0, regime="gemm"),
        _rec("oink", 0.5, m=2, regime="gemm"),
        _rec("quack", 1.0, m=2, regime="gemm"),
    ]
    hbm, gemm = ranking.summarize_by_regime(records)
    assert (hbm["regime"], hbm["op"], hbm["shapes"], hbm["oink_ok"]) == ("hbm", "rmsnorm", 3, 2)
    assert hbm["oink_x"]["geomean"] == pytest.approx(math.sqrt(0.9 * 2.0))
    assert hbm["oink_x"]["worst"] == pytest.approx(0.9)
    assert hbm["oink_x"]["worst_where"] == "decode bf16 N=4096 M=1 vs quack"
    assert hbm["oink_x"]["cells"] == 2 and hbm["oink_not_ok"] == ["decode bf16 N=4096 M=4: failed"]
    assert gemm["regime"] == "gemm" and gemm["oink_x"]["cells"] == 1
    assert gemm["oink_x"]["geomean"] == pytest.approx(2.0)
    rows = ranking.summarize(records)
    assert [(r["suite"], r["regime"]) for r in rows] == [("decode", "hbm"), ("decode", "gemm")]


# --- the command line -----------------------------------------------------------------------------


def _bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PYTHON_DIR), env.get("PYTHONPATH")]))
    env["CUDA_VISIBLE_DEVICES"] = ""
    cmd = [sys.executable, "-m", "oink.bench", "--quick", "--no-plots", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)


def test_cli_peers_are_cuda_only_and_the_kit_is_not_set_up_on_the_cpu(tmp_path):
    kit = _kit(tmp_path)
    build = tmp_path / "b"
    out = tmp_path / "out"
    args = [
        "--suite",
        "variants",
        "--op",
        "rmsnorm",
        "--peers",
        str(kit),
        "--peers-build",
        str(build),
    ]
    proc = _bench(tmp_path, *args, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["providers_found"] == dict.fromkeys(providers.PEERS, "not tried: CUDA only")
    assert not build.exists() and not list(kit.rglob("__pycache__"))
    proc = _bench(tmp_path, "--peers", str(tmp_path / "nothing"), "--out", str(out))
    assert proc.returncode == 2 and "no oink_peers.py there" in proc.stderr


def test_cli_matrix_measures_every_variant_in_one_run(tmp_path):
    out = tmp_path / "out"
    proc = _bench(tmp_path, "--matrix", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "results.json").read_text())
    variants = {(r["suite"], r["variant"]) for r in doc["results"]}
    assert variants == {
        ("decode", "bf16"),
        ("mid", "bf16"),
        ("large", "bf16"),
        ("large_n", "bf16"),
        ("variants", "fp16"),
        ("variants", "bf16-w32"),
        ("variants", "bf16-pad64"),
    }
    assert "torch_eager" in {r["provider"] for r in doc["results"]}  # left out on a GPU only
    on_gpu = providers.build("cpu", None, exclude=("torch_eager",))
    assert "torch_eager" not in {p.name for p in on_gpu.by_op["fused_add_rms_norm"]}
    pad = [r for r in doc["results"] if r["variant"] == "bf16-pad64"]
    assert all(r["ld"] == r["N"] + 64 and r["status"] == "ok" for r in pad)
    assert doc["config"]["matrix"] and len(doc["config"]["parts"]) == 7
    assert [r["regime"] for r in doc["summary_by_regime"]] == ["hbm", "hbm"]
    md = (out / "results.md").read_text()
    assert "## variants · fused_add_rms_norm · bf16-w32 · hbm" in md

    proc = _bench(tmp_path, "--matrix", "--suite", "decode", "--out", str(out))
    assert proc.returncode == 2 and "drop --suite" in proc.stderr
    proc = _bench(tmp_path, "--regime", "cold", "--out", str(out))
    assert proc.returncode == 2 and "unknown regime" in proc.stderr
