"""tools/bench_runs.py, which summarises a matrix run for the README: on two hand-made runs, the
regime groups, the ratios against the best peer (with and without PDL), the previous run in
brackets, the moved cells with oink's no-PDL anchor, the cells where oink trails, and a clear
error for a missing run."""

import importlib
import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
bench_runs = importlib.import_module("bench_runs")


def record(suite, op, regime, n, m, provider, us, group, pdl=False, status="ok"):
    return {
        "suite": suite,
        "variant": "bf16",
        "op": op,
        "regime": regime,
        "N": n,
        "M": m,
        "provider": provider,
        "time_us": us,
        "group": group,
        "pdl": pdl,
        "status": status,
    }


def cell(suite, op, regime, n, m, oink, no_pdl, peers):
    """oink, oink without PDL and the peers ({name: (µs, launches with PDL)}) of one cell."""
    recs = [
        record(suite, op, regime, n, m, "oink", oink, "oink", pdl=True),
        record(suite, op, regime, n, m, "oink_no_pdl", no_pdl, "oink"),
        record(suite, op, regime, n, m, "copy", 0.1, "floor"),  # never a peer
    ]
    recs += [record(suite, op, regime, n, m, p, us, "peer", pdl) for p, (us, pdl) in peers.items()]
    return recs


def write_run(folder: Path, records: list[dict]) -> Path:
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"results": records}))
    return folder


def test_groups_ratios_brackets_and_moved_cells(tmp_path, capsys):
    peers = {"quack": (2.0, False), "flashinfer_cute": (1.5, True)}
    new = write_run(
        tmp_path / "new",
        cell("decode", "rmsnorm", "hbm", 4096, 1, 1.0, 2.5, peers)  # 1.5 ; 2.0 / 2.5 = 0.8
        + cell("large", "rmsnorm", "hbm", 4096, 65536, 2.0, 2.0, peers)  # 0.75 ; 1.0
        + cell("decode", "rmsnorm", "gemm", 4096, 64, 3.0, 2.0, peers)  # 0.5 ; 1.0
        + cell("large_n", "fused_add_rms_norm", "hbm", 65536, 1, 1.2, 2.4, peers)
        # failed records and an unknown status never count
        + [record("decode", "rmsnorm", "l2", 4096, 1, "oink", 9.0, "oink", True, "failed")],
    )
    old = write_run(
        tmp_path / "old",
        cell("decode", "rmsnorm", "hbm", 4096, 1, 1.5, 2.5, peers)  # 1.0: moved by +50%
        + cell("large", "rmsnorm", "hbm", 4096, 65536, 2.0, 2.0, peers),  # unchanged
    )
    run = bench_runs.summarize(bench_runs.load_cells(str(new)))
    assert sorted(run[("isolated", "rmsnorm", True)]) == pytest.approx([0.75, 1.5])
    assert sorted(run[("isolated", "rmsnorm", False)]) == pytest.approx([0.8, 1.0])
    assert run[("between GEMMs", "rmsnorm", True)] == pytest.approx([0.5])
    assert run[("long rows", "fused_add_rms_norm", True)] == pytest.approx([1.25])
    assert ("L2-warm decode", "rmsnorm", True) not in run

    assert bench_runs.main([str(new), str(old / "results.json"), "--moved", "0.05"]) == 0
    out = capsys.readouterr().out.splitlines()
    isolated = next(line for line in out if line.startswith("| isolated (2)"))
    geomean = f"{math.sqrt(0.75 * 1.5):.2f}"
    assert f"**{geomean}** / 0.75 ({math.sqrt(1.0 * 0.75):.2f} / 0.75)" in isolated
    assert "| between GEMMs (1) | 0.50 / 0.50 (-) |" in "\n".join(out)
    assert "1 cells moved by more than 5%" in "\n".join(out)
    assert "decode bf16 rmsnorm hbm N=4096 M=1: 1.00 -> 1.50 the best peer" in "\n".join(out)
    assert "oink / oink without PDL 0.600 -> 0.400" in "\n".join(out)


def test_the_cells_behind_come_by_group_worst_first_with_the_peer_that_leads(tmp_path, capsys):
    peers = {"quack": (2.0, False), "flashinfer_cute": (1.5, True)}
    run = write_run(
        tmp_path / "run",
        cell("decode", "rmsnorm", "gemm", 4096, 64, 3.0, 2.0, peers)  # 0.5, between GEMMs
        + cell("large", "rmsnorm", "hbm", 4096, 65536, 2.0, 2.0, peers)  # 0.75, isolated
        + cell("decode", "rmsnorm", "hbm", 4096, 1, 1.6, 2.0, peers)  # 0.9375, isolated
        + cell("decode", "rmsnorm", "hbm", 4096, 2, 1.0, 2.0, peers),  # 1.5: leads, not listed
    )
    assert bench_runs.main([str(run), "--behind"]) == 0
    out = capsys.readouterr().out
    listed = out[out.index("3 cells where oink (PDL) trails the best peer:") :].splitlines()[1:]
    assert [line.split(":")[0] for line in listed] == ["isolated", "isolated", "between GEMMs"]
    assert listed[0].startswith("isolated: large bf16 rmsnorm hbm N=4096 M=65536: 0.750x")
    assert "flashinfer_cute, oink 2.00 us against 1.50 us" in listed[0]
    assert "N=4096 M=1: 0.938x" in listed[1]
    assert "between GEMMs: decode bf16 rmsnorm gemm N=4096 M=64: 0.500x" in listed[2]


def test_a_missing_run_is_a_clear_error(tmp_path, capsys):
    assert bench_runs.main([str(tmp_path / "nowhere")]) == 1
    assert "no results.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench_runs.main([str(tmp_path), "--moved", "0.1"])  # --moved needs a previous run
