"""tools/sanitize_cases.py picks the launches each --ops names (compute-sanitizer's time goes by
them: racecheck over the training ops takes minutes), and says how far it got case by case. The
checks themselves need CUDA; here they are replaced by recorders."""

import importlib
import sys
from pathlib import Path

import pytest
import torch

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))
sanitize_cases = importlib.import_module("sanitize_cases")


@pytest.fixture
def recorded(monkeypatch):
    calls = {"check": [], "training": [], "layernorm": [], "views": [], "rows": []}

    def record(kind):
        def fn(*args, **kwargs):
            calls[kind].append(args)
            return 0

        return fn

    monkeypatch.setattr(sanitize_cases, "check", record("check"))
    monkeypatch.setattr(sanitize_cases, "check_training", record("training"))
    monkeypatch.setattr(sanitize_cases, "check_layernorm", record("layernorm"))
    monkeypatch.setattr(sanitize_cases, "check_views", record("views"))
    monkeypatch.setattr(sanitize_cases, "check_rows", record("rows"))
    monkeypatch.setattr(sanitize_cases, "schedule_test_rows", lambda n, dtype: 531)
    monkeypatch.setattr(sanitize_cases.oink, "set_pdl", lambda on: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    return calls


def test_long_runs_only_rows_of_several_slices_and_no_training_op(recorded, capsys):
    assert sanitize_cases.main(["--ops", "long", "--pdl", "on", "--dtypes", "sizes"]) == 0
    assert recorded["training"] == [] and recorded["layernorm"] == [] and recorded["views"] == []
    ns = {(args[4], args[1]) for args in recorded["check"]}  # (dtype, N)
    assert ns, "no launch at all"
    for dtype, n in ns:
        assert n * dtype.itemsize > 32768, f"{dtype} rows of {n} fit one slice"
    assert (torch.float32, 16384) in ns and (torch.bfloat16, 32768) in ns
    assert (torch.bfloat16, 16384) not in ns
    out = capsys.readouterr().out
    # One line a case, then the total that tools/gpu_run.sh looks for.
    assert out.count("sanitize_cases: ") == len(recorded["check"]) + 1
    assert "M=531 N=65536" in out and out.rstrip().endswith("sanitize_cases: 0 wrong results")


def test_training_and_inference_each_run_their_own(recorded):
    sanitize_cases.main(["--ops", "training", "--dtypes", "sizes"])
    assert recorded["check"] == [] and recorded["views"] == []
    assert len(recorded["training"]) == len(
        [c for c in sanitize_cases.DTYPE_COMBOS if c[0] in (torch.bfloat16, torch.float32)]
    )
    recorded["training"].clear()
    sanitize_cases.main(["--ops", "inference", "--pdl", "on", "--dtypes", "sizes"])
    assert recorded["training"] == [] and recorded["check"] and recorded["views"]


def test_a_failed_case_is_named_and_fails_the_run(recorded, monkeypatch, capsys):
    monkeypatch.setattr(sanitize_cases, "check", lambda m, n, *rest: int(n == 131072))
    assert sanitize_cases.main(["--ops", "long", "--pdl", "on", "--dtypes", "sizes"]) == 1
    failed = [line for line in capsys.readouterr().out.splitlines() if "1 failed" in line]
    assert failed and all("N=131072" in line for line in failed)


def test_rows_runs_softmax_and_cross_entropy_alone(recorded):
    assert sanitize_cases.main(["--ops", "rows", "--dtypes", "sizes"]) == 0
    assert [args[0] for args in recorded["rows"]] == [torch.bfloat16, torch.float32]
    assert not (recorded["check"] or recorded["training"] or recorded["views"])
    recorded["rows"].clear()
    sanitize_cases.main(["--ops", "training", "--dtypes", "sizes"])
    assert recorded["rows"] == []
