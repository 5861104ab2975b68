"""The bench's CPU-runnable parts: argument parsing, the suites' shapes, peer discovery without
peers, the float64 references and gate, the new suites run on the CPU, and the report rendered
from a small results file."""

import importlib.util
import math
import types
from pathlib import Path

import pytest
import torch
from tqdm import tqdm

import oink
from oink.bench import __main__ as cli
from oink.bench import cases, providers, references, report

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def test_run_is_the_default_command_and_bad_suites_are_refused():
    args = cli.parse_args(["--quick", "--suite", "decode,training"])
    assert args.command == "run" and args.suites == ["decode", "training"] and args.quick
    with pytest.raises(SystemExit):
        cli.parse_args(["--suite", "nonsense"])


def test_absent_peers_are_reported_with_a_reason():
    have, missing = providers.discover("cpu")
    assert "oink" in have and "torch_eager" in have
    assert set(providers.PEERS) <= set(missing)


def test_a_loaded_peer_joins_the_installed_one_case_by_case(monkeypatch):
    """A peers kit brings rmsnorm and the fused op only: the installed peer's other cases stay."""
    installed = providers.discover("cpu")[0]["torch_eager"]
    extra = {"rmsnorm": lambda x, w: (x,)}
    monkeypatch.setitem(providers.EXTRA_PEERS, "torch_eager", extra)
    joined = providers.discover("cpu")[0]["torch_eager"]
    assert joined["rmsnorm"] is extra["rmsnorm"]
    assert set(joined) == set(installed) and len(installed) > 1


def test_a_kit_peer_refuses_what_the_kit_says_it_cannot_take():
    """tools/peers.py adapts a kit peer: a weight of another dtype than x's (where the kit says
    the peer needs x's) and rows past its max_n raise before the peer runs; the rest reaches it."""
    spec = importlib.util.spec_from_file_location("peers_tool", TOOLS / "peers.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    calls = []
    peer = types.SimpleNamespace(
        name="kit",
        rmsnorm=lambda x, w, eps: calls.append(("rmsnorm", eps)) or x,
        fused_add=lambda x, r, w, eps: calls.append(("fused_add", eps)) or (x, r),
        needs_weight_in_x_dtype=True,
        max_n={"rmsnorm": None, "fused_add": 64},
    )
    case = tool.cases_of(peer, 1e-6)
    x, w = torch.ones(2, 128, dtype=torch.bfloat16), torch.ones(128, dtype=torch.bfloat16)
    assert case["rmsnorm"](x, w)[0] is x
    with pytest.raises(TypeError, match="x's dtype"):
        case["rmsnorm"](x, w.float())
    with pytest.raises(ValueError, match="N=128 > its limit 64"):
        case["fused_add_rms_norm"](x, x.clone(), w)
    short = torch.ones(2, 64, dtype=torch.bfloat16)
    assert len(case["fused_add_rms_norm"](short, short.clone(), w[:64])) == 2
    assert calls == [("rmsnorm", 1e-6), ("fused_add", 1e-6)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gate_passes_a_rounded_reference_and_fails_a_perturbed_one(dtype):
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(64, 256, generator=g).to(dtype), torch.randn(256, generator=g).to(dtype)
    ref = references.reference("rmsnorm", [x], [w])
    assert references.gate((ref[0].to(dtype),), ref)[1] is None
    bad = (ref[0] * (1 + 8 * references.unit_roundoff(dtype))).to(dtype)
    assert references.gate((bad,), ref)[1] is not None
    assert references.gate((torch.full_like(bad, math.nan),), ref)[1] is not None


def test_report_renders_tables_and_speedups(tmp_path):
    recs = [
        {
            "suite": "decode",
            "variant": "bf16",
            "op": "rmsnorm",
            "N": 4096,
            "M": 1,
            "regime": "hbm",
            "provider": p,
            "status": "ok",
            "median_us": t,
            "min_us": t,
            "max_us": t,
            "GBps": 1.0,
            "pct_copy": 50.0,
        }
        for p, t in (("oink", 2.0), ("quack", 3.0))
    ] + [
        {
            "suite": "decode",
            "variant": "bf16",
            "op": "rmsnorm",
            "N": 4096,
            "M": 1,
            "regime": "hbm",
            "provider": "liger",
            "status": "n/a",
            "note": "too long",
        }
    ]
    report.save(tmp_path / "results.json", {"device": "cpu", "torch": "x"}, 100.0, recs)
    doc = report.load(tmp_path / "results.json")
    assert report.speedups(doc["records"]) == [1.5]
    report.render(doc, tmp_path, with_plots=False)
    md = (tmp_path / "results.md").read_text()
    assert "3.0 (50%) ×1.50" in md and "liger: too long" in md and "n/a" in md


def _record(provider, n, us, suite="decode"):
    return {"suite": suite, "variant": "bf16", "op": "rmsnorm", "N": n, "M": 1, "regime": "hbm",
            "provider": provider, "status": "ok", "median_us": us, "pct_copy": 50.0}  # fmt: skip


def test_report_merges_runs_of_one_gpu_and_refuses_two_gpus(tmp_path):
    env = {"gpu": "H200", "torch": "x", "command": "oink-bench --suite decode"}
    first = [_record("oink", 4096, 2.0), _record("quack", 4096, 3.0), _record("oink", 8192, 4.0)]
    report.save(tmp_path / "a.json", env, 100.0, first)
    later = [_record("oink", 8192, 5.0), _record("oink", 16, 1.0, suite="mid")]
    report.save(tmp_path / "b.json", {**env, "command": "oink-bench --suite mid"}, 90.0, later)
    out = tmp_path / "ref"
    argv = ["report", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--out", str(out)]
    assert cli.main([*argv, "--no-plots"]) == 0
    doc = report.load(out / "results.json")
    times = {(r["suite"], r["N"], r["provider"]): r["median_us"] for r in doc["records"]}
    assert times == {("decode", 4096, "oink"): 2.0, ("decode", 4096, "quack"): 3.0,
                     ("decode", 8192, "oink"): 5.0, ("mid", 16, "oink"): 1.0}  # fmt: skip
    assert doc["copy_GBps"] == 100.0 and "--suite mid" in doc["env"]["command"]
    assert "## rmsnorm, mid bf16, hbm" in (out / "results.md").read_text()
    report.save(tmp_path / "c.json", {**env, "gpu": "H100"}, 90.0, later)
    assert cli.main(["report", str(tmp_path / "a.json"), str(tmp_path / "c.json")]) == 2


NEW_SUITES = ["softmax", "cross_entropy", "linear_cross_entropy"]


def test_new_suites_keep_their_shapes_within_the_memory_caps():
    assert cli.parse_args(["--suite", ",".join(NEW_SUITES)]).suites == NEW_SUITES
    full = {p.suite: p for p in cases.parts(NEW_SUITES, "cuda", False, "bf16")}
    assert all(n * m <= 1 << 31 for n, m in full["softmax"].shapes)
    assert (262144, 8192) in full["softmax"].shapes and (262144, 32768) not in full[
        "softmax"
    ].shapes
    assert (128256, 65536) in full["cross_entropy"].shapes
    assert (256000, 65536) not in full["cross_entropy"].shapes
    lce = full["linear_cross_entropy"]
    assert lce.variant == "bf16-h4096" and cases.hidden_size(lce.variant) == 4096
    assert lce.cases == ("linear_cross_entropy",) and len(lce.shapes) == 4
    for part in cases.parts(NEW_SUITES, "cuda", True, "bf16"):
        assert 0 < len(part.shapes) < len(full[part.suite].shapes)
        assert set(part.shapes) <= set(full[part.suite].shapes)


def test_n_and_m_narrow_a_run_to_those_shapes():
    args = cli.parse_args(["--suite", "softmax", "--n", "1024,4096", "--m", "8192"])
    assert args.n == {1024, 4096} and args.m == {8192}
    only = cases.parts(["softmax", "training"], "cuda", False, "bf16", only=(args.n, args.m))
    assert only[0].shapes == [(1024, 8192), (4096, 8192)]
    assert only[1].shapes == [(4096, 8192)]  # training's own shapes, narrowed
    full = cases.parts(["cross_entropy"], "cuda", False, "bf16")[0].shapes
    by_m = cases.parts(["cross_entropy"], "cuda", False, "bf16", only=(None, {4096}))[0].shapes
    assert by_m == [(n, m) for n, m in full if m == 4096] and len(by_m) == 4
    assert cli.parse_args([]).n is None


def test_softmax_shapes_that_would_not_fit_the_gpu_are_left_out():
    # An H100's 80 GB: the 4 GiB shapes (N=65536, M=32768 bf16) ran out of memory there; an
    # H200's 141 GB keeps them; 2 GiB shapes stay on both.
    h100, h200 = 85_000_000_000, 150_000_000_000
    full = cases.parts(["softmax"], "cuda", False, "bf16")[0].shapes
    on_h100 = cases.parts(["softmax"], "cuda", False, "bf16", h100)[0].shapes
    on_h200 = cases.parts(["softmax"], "cuda", False, "bf16", h200)[0].shapes
    assert on_h200 == full
    assert (65536, 32768) in full and (65536, 32768) not in on_h100
    assert (65536, 8192) in on_h100 and (4096, 131072) in on_h100
    assert all(n * m * 2 <= h100 // cases.MEMORY_PER_X["softmax"] for n, m in on_h100)
    # Cross-entropy: the 15.7 GiB logits (V=128256, M=65536) ran out of memory on the H100.
    ce = cases.parts(["cross_entropy"], "cuda", False, "bf16")[0].shapes
    ce_h100 = cases.parts(["cross_entropy"], "cuda", False, "bf16", h100)[0].shapes
    assert (128256, 65536) in ce and (128256, 65536) not in ce_h100 and (256000, 16384) in ce_h100
    assert cases.parts(["cross_entropy"], "cuda", False, "bf16", h200)[0].shapes == ce
    # Suites without a memory share keep their shapes.
    lce = cases.parts(["linear_cross_entropy"], "cuda", False, "bf16")[0].shapes
    assert cases.parts(["linear_cross_entropy"], "cuda", False, "bf16", h100)[0].shapes == lce


def test_a_step_that_fails_to_capture_is_not_captured_again(monkeypatch):
    # A failed capture keeps its memory pool (torch 2.11): the peer's later shapes are timed
    # eagerly at once, with the first failure's note; oink's steps are never let off.
    tries = []

    def capture(call, n_sets):
        tries.append(n_sets)
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(cases.measure, "cuda_graph_time", capture)
    monkeypatch.setattr(cases.measure, "event_time", lambda call, n_sets: {"median_us": 1.0})
    known = {}
    for _ in range(3):
        row = cases._clock(None, 2, "cuda", fall_back=True, uncapturable=known, key=("liger", "ce"))
        assert row["median_us"] == 1.0 and "not capturable" in row["note"]
    assert len(tries) == 1 and list(known) == [("liger", "ce")]
    cases._clock(None, 2, "cuda", fall_back=True, uncapturable=known, key=("quack", "ce"))
    assert len(tries) == 2
    with pytest.raises(RuntimeError, match="capturing"):
        cases._clock(None, 2, "cuda", fall_back=False, uncapturable=known, key=("oink", "ce"))


def test_a_shape_out_of_memory_is_recorded_and_the_run_goes_on(monkeypatch):
    part = cases.Part("softmax", "fp32", [(64, 4), (96, 4)])
    real = cases._measure_shape

    def measure_shape(case, n, *args):
        if n == 64:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 15.66 GiB")
        return real(case, n, *args)

    monkeypatch.setattr(cases, "_measure_shape", measure_shape)
    have = {"oink": providers.oink_provider()}
    with tqdm(disable=True) as progress:
        records = cases.measure_part(part, have, "cpu", 0, 1.0, progress)
    lost = [r for r in records if r["N"] == 64]
    assert lost and all(r["status"] == "error" and "out of memory" in r["note"] for r in lost)
    assert {r["status"] for r in records if r["N"] == 96} == {"ok"}


def _inputs(case, n=96, m=40, variant="fp32-h24"):
    g = torch.Generator().manual_seed(2)
    ins = cases.make_set(case, n, m, variant, "cpu", g)
    return ins, cases.make_params(case, n, variant, "cpu", g)


@pytest.mark.parametrize("case", [*providers.SOFTMAX, "cross_entropy", "linear_cross_entropy"])
def test_new_references_match_float64_autograd(case):
    ins, params = _inputs(case)
    ref = references.reference(case, ins, params)
    if case == "softmax backward":
        x = torch.randn(40, 96, dtype=torch.float64, requires_grad=True)
        dy, y = ins[0].double(), torch.softmax(x, -1)
        ins, ref = [ins[0], y.detach()], references.reference(case, [dy, y.detach()], [])
        expect = torch.autograd.grad(y, x, dy)
    elif case == "softmax forward":
        expect = (torch.softmax(ins[0].double(), -1),)
    else:
        leaves = [t.double().requires_grad_() for t in (ins[0], *params)]
        z = leaves[0] @ leaves[1].T if params else leaves[0]
        loss = torch.nn.functional.cross_entropy(z, ins[1])
        expect = (loss, *torch.autograd.grad(loss, leaves))
    assert len(ref) == len(expect)
    for r, e in zip(ref, expect, strict=True):
        torch.testing.assert_close(r, e)


def test_the_lce_gate_floor_admits_logits_rounded_to_x_dtype_only():
    ins, params = _inputs("linear_cross_entropy", variant="bf16-h24")
    ref = references.reference("linear_cross_entropy", ins, params)
    loss = ref[0].float() * (1 + 1e-3)  # a float32 loss off by ~2^-10
    outs = (loss, ref[1].bfloat16(), ref[2].bfloat16())
    assert references.gate(outs, ref)[1] is not None
    assert references.gate(outs, ref, torch.bfloat16)[1] is None


def _run(suites, have):
    from tqdm import tqdm

    records = []
    with tqdm(disable=True) as progress:
        for part in cases.parts(suites, "cpu", True, "bf16"):
            records += cases.measure_part(part, have, "cpu", 1 << 20, 1.0, progress)
    return records


def test_new_suites_run_on_the_cpu_with_torch():
    records = _run(NEW_SUITES, {"torch_eager": providers.torch_eager()})
    ops = {r["op"] for r in records}
    assert ops == {*providers.SOFTMAX, "cross_entropy", "linear_cross_entropy"}
    assert all(r["status"] == "ok" and r["median_us"] > 0 for r in records), records


@pytest.mark.skipif(not hasattr(oink, "softmax"), reason="oink has no softmax yet")
def test_oinks_new_ops_pass_the_gate_on_the_cpu():
    records = _run(NEW_SUITES, {"oink": providers.oink_provider()})
    assert records and all(r["status"] == "ok" for r in records), records


def test_report_shows_peak_memory_where_measured(tmp_path):
    base = {"suite": "linear_cross_entropy", "variant": "bf16-h4096", "op": "linear_cross_entropy",
            "N": 128256, "M": 4096, "regime": "hbm", "status": "ok", "min_us": 1.0,
            "max_us": 1.0, "GBps": 1.0, "pct_copy": 1.0}  # fmt: skip
    recs = [{**base, "provider": p, "median_us": t, "peak_MiB": mib}
            for p, t, mib in (("oink", 10.0, 512.0), ("torch_eager", 20.0, 9000.0))]  # fmt: skip
    report.save(tmp_path / "results.json", {"device": "cuda", "torch": "x"}, 100.0, recs)
    md = report.markdown(report.load(tmp_path / "results.json"))
    assert "oink peak MiB" in md and "torch_eager peak MiB" in md and "9000 |" in md
