"""The bench's CPU-runnable parts: argument parsing, peer discovery without peers, the float64
gate, and the report rendered from a small results file."""

import math

import pytest
import torch

from oink.bench import __main__ as cli
from oink.bench import providers, references, report


def test_run_is_the_default_command_and_bad_suites_are_refused():
    args = cli.parse_args(["--quick", "--suite", "decode,training"])
    assert args.command == "run" and args.suites == ["decode", "training"] and args.quick
    with pytest.raises(SystemExit):
        cli.parse_args(["--suite", "nonsense"])


def test_absent_peers_are_reported_with_a_reason():
    have, missing = providers.discover("cpu")
    assert "oink" in have and "torch_eager" in have
    assert set(providers.PEERS) <= set(missing)


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
