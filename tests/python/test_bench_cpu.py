"""Smoke test of the benchmark CLI in its CPU mode: `python -m oink.bench --quick` must run
end to end, gate and time every provider, and write results.json and results.md."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import oink  # noqa: F401  (loads the native extension)
except ImportError as e:  # pragma: no cover - depends on the build
    pytest.skip(f"oink's extension is not importable: {e}", allow_module_level=True)

PYTHON_DIR = Path(oink.__file__).resolve().parent.parent


def _run_bench(out: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PYTHON_DIR), env.get("PYTHONPATH")]))
    env["CUDA_VISIBLE_DEVICES"] = ""  # CPU mode even on a machine with a GPU
    cmd = [sys.executable, "-m", "oink.bench", "--quick", "--out", str(out), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)


def test_quick_cpu_run_writes_results(tmp_path: Path) -> None:
    proc = _run_bench(tmp_path)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"

    doc = json.loads((tmp_path / "results.json").read_text())
    for key in (
        "schema",
        "status",
        "env",
        "config",
        "method",
        "providers_found",
        "copy_ceiling",
        "summary",
        "results",
    ):
        assert key in doc, key
    assert doc["status"] == "complete"
    assert doc["env"]["device_kind"] == "cpu"
    assert "oink.bench" in doc["env"]["command"] and "--quick" in doc["env"]["command"]
    for key in ("torch", "oink_version", "oink_revision", "date_utc"):
        assert doc["env"][key], key
    assert doc["copy_ceiling"]["GBps"] > 0

    results = doc["results"]
    assert {r["op"] for r in results} == {"rmsnorm", "fused_add_rms_norm"}
    assert {r["suite"] for r in results} == {"decode"}
    assert {"oink", "torch_eager", "F.rms_norm", "copy"} <= {r["provider"] for r in results}
    for r in results:
        assert r["status"] == "ok", r
        for key in ("N", "M", "time_us", "GBps", "pct_ceiling", "ratio_vs_best_baseline"):
            assert isinstance(r[key], (int, float)) and math.isfinite(r[key]), (key, r)
        assert r["time_us"] > 0
        # The copy floor is timed beside the others, never gated (no norm) and never the best
        # baseline (it computes nothing).
        assert r["best_baseline"] != "copy"
        if r["provider"] == "copy":
            assert r["group"] == "floor" and not r["baseline"] and "errors" not in r
            continue
        errors = r["errors"]
        assert errors["rel_l2"] <= errors["bound"] and errors["nonfinite"] == 0, r
        if r["op"] == "fused_add_rms_norm":
            assert errors["residual"]["rel_l2"] <= errors["residual"]["bound"], r
    oink_rows = [r for r in results if r["provider"] == "oink"]
    assert all(r["plan"]["variant"] == "cpu" for r in oink_rows)
    assert [s["suite"] for s in doc["summary"]] == ["decode", "decode"]

    md = (tmp_path / "results.md").read_text()
    assert "| N | M | oink |" in md and "ratio = best baseline time / oink time" in md
    assert "geomean" in proc.stdout  # the one-screen summary

    svgs = sorted(p.name for p in tmp_path.glob("*.svg"))
    if importlib.util.find_spec("matplotlib") is None:
        assert svgs == [] and "matplotlib is not installed" in proc.stderr
    else:
        expected = ["decode_bf16_hbm.svg"]  # one file per (suite, variant, regime), both ops
        assert svgs == sorted(expected)
        assert all(f"]({name})" in md for name in expected)


def test_bad_arguments_fail_clearly(tmp_path: Path) -> None:
    proc = _run_bench(tmp_path, "--suite", "nope")
    assert proc.returncode == 2
    assert "unknown suite 'nope'" in proc.stderr
    proc = _run_bench(tmp_path, "--providers", "oink,nope")
    assert proc.returncode == 2
    assert "unknown provider" in proc.stderr


def test_n_and_m_keep_only_those_shapes() -> None:
    from oink.bench import suites

    parts = suites.plan(["large_n", "mid"], suites.BF16, "cuda", False, None)
    kept = suites.restrict(parts, (131072, 4096), (1, 1024))
    assert [p.suite for p in kept] == ["large_n", "mid"]
    assert kept[0].shapes == ((131072, 1), (131072, 1024))
    assert kept[1].shapes == ((4096, 1024),)
    assert kept[0].regimes == parts[0].regimes and kept[0].variant == parts[0].variant
    # A part the filter empties is dropped; M alone keeps every N.
    only_m = suites.restrict(parts, None, (4096,))
    assert [p.suite for p in only_m] == ["large_n"]
    assert {n for n, _ in only_m[0].shapes} == {16384, 32768, 65536, 131072, 262144}
    with pytest.raises(ValueError, match=r"--n 5 leaves no shape .*their N: \[4096"):
        suites.restrict(parts, (5,), None)
    assert suites.parse_sizes(None, "--n") is None
    assert suites.parse_sizes("4096, 7168,4096", "--n") == (4096, 7168)
    for bad in ("", "x", "0", "-1", "4096;8192"):
        with pytest.raises(ValueError, match="--m: expected a comma list of positive integers"):
            suites.parse_sizes(bad, "--m")


def test_n_and_m_filter_the_cli_run(tmp_path: Path) -> None:
    proc = _run_bench(tmp_path, "--suite", "decode", "--n", "4096", "--m", "1,8", "--op", "rmsnorm")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "results.json").read_text())
    timed = {(r["N"], r["M"]) for r in doc["results"] if r.get("status") == "ok"}
    assert timed == {(4096, 1), (4096, 8)}
    proc = _run_bench(tmp_path / "none", "--suite", "decode", "--n", "5")
    assert proc.returncode == 2
    assert "--n 5 leaves no shape of the selected suites" in proc.stderr


def test_a_second_sigterm_does_not_cut_short_the_partial_results(tmp_path, monkeypatch) -> None:
    """GNU `timeout` sends SIGTERM to the bench and then to its process group: the bench gets
    two. The second, arriving while the first's partial results are written, must not lose them."""
    from oink.bench import __main__ as cli
    from oink.bench import plots, runner

    def run_until_timeout(cfg, by_op, ceiling_gbps, records, checkpoint) -> None:
        checkpoint(cfg.parts[0])
        os.kill(os.getpid(), signal.SIGTERM)  # the handler raises KeyboardInterrupt here
        raise AssertionError("SIGTERM did not interrupt the run")

    def plots_while_signalled(*args, **kwargs) -> list:
        os.kill(os.getpid(), signal.SIGTERM)  # timeout's second signal, to the process group
        return []

    monkeypatch.setattr(runner, "run", run_until_timeout)
    monkeypatch.setattr(plots, "write", plots_while_signalled)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    previous = signal.getsignal(signal.SIGTERM)
    try:
        rc = cli.main(["--quick", "--device", "cpu", "--out", str(tmp_path)])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert rc == 2
    assert json.loads((tmp_path / "results.json").read_text())["status"] == "interrupted"
    assert "interrupted" in (tmp_path / "results.md").read_text()


# The float32-weight variant calls F.rms_norm with a bf16 x, which PyTorch warns about.
@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")
def test_resume_measures_only_the_parts_an_interrupted_run_left(
    tmp_path, monkeypatch, capsys
) -> None:
    """A matrix stopped in its third part, resumed: the first two parts' records are kept as
    measured, the rest measured, and the folder holds one complete run naming both calls."""
    from oink.bench import __main__ as cli
    from oink.bench import runner

    args = ["--matrix", "--quick", "--device", "cpu", "--op", "rmsnorm", "--no-plots"]
    measure = runner.measure_shape
    parts_seen: list = []

    def stop_in_third_part(cfg, shape, *rest) -> None:
        if shape.part not in parts_seen:
            parts_seen.append(shape.part)
        if len(parts_seen) == 3:
            raise KeyboardInterrupt  # what the SIGTERM handler raises
        measure(cfg, shape, *rest)

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    previous = signal.getsignal(signal.SIGTERM)
    try:
        monkeypatch.setattr(runner, "measure_shape", stop_in_third_part)
        assert cli.main([*args, "--out", str(tmp_path)]) == 2
        monkeypatch.setattr(runner, "measure_shape", measure)
        first = json.loads((tmp_path / "results.json").read_text())
        assert first["status"] == "interrupted"
        done = [[p.suite, p.variant.name] for p in parts_seen[:2]]
        assert first["parts_done"] == done

        capsys.readouterr()
        assert cli.main([*args[:-2], "fused_add_rms_norm", "--resume", str(tmp_path)]) == 2
        assert "ops" in capsys.readouterr().err  # other options: not the same run

        assert cli.main([*args, "--resume", str(tmp_path)]) == 0
        whole = json.loads((tmp_path / "results.json").read_text())
        assert cli.main([*args, "--resume", str(tmp_path)]) == 2
        assert "nothing to resume" in capsys.readouterr().err
    finally:
        signal.signal(signal.SIGTERM, previous)

    parts = [[p["suite"], p["variant"]] for p in whole["config"]["parts"]]
    assert whole["status"] == "complete" and whole["parts_done"] == parts and len(parts) > 3

    def by_part(doc: dict, part: list[str]) -> list[dict]:
        return [r for r in doc["results"] if [r["suite"], r["variant"]] == part]

    for part in parts:
        assert by_part(whole, part), part
    for part in done:  # kept as measured, not measured again
        assert by_part(whole, part) == by_part(first, part)
    assert whole["env"]["date_utc"] == first["env"]["date_utc"]
    (call,) = whole["env"]["resumed"]
    assert call["parts"] == parts[2:]
    assert "- resumed: " in (tmp_path / "results.md").read_text()


def test_resume_refuses_a_run_of_other_peers(tmp_path) -> None:
    """A run measured beside Quack 0.6.5 is not continued by a call without it."""
    from oink.bench import resume

    config = {"parts": [{"suite": "decode", "variant": "bf16"}], "ops": ["rmsnorm"]}
    env = {"gpu": "NVIDIA H200", "torch": "2.11.0"}
    doc = {
        "status": "partial: decode bf16 done",
        "config": config,
        "env": env,
        "providers_found": {"quack": "0.6.5 (peers kit)"},
        "parts_done": [["decode", "bf16"]],
        "copy_ceiling": {"GBps": 4290.0},
        "results": [],
    }
    (tmp_path / "results.json").write_text(json.dumps(doc))
    kept = resume.load(tmp_path, config, env, {"quack": "0.6.5 (peers kit)"})
    assert kept.done == [["decode", "bf16"]] and kept.ceiling["GBps"] == 4290.0
    with pytest.raises(ValueError, match="peer quack as '0.6.5 \\(peers kit\\)'.*'missing'"):
        resume.load(tmp_path, config, env, {"quack": "missing"})
    with pytest.raises(ValueError, match="gpu 'NVIDIA H200'.*'NVIDIA H100'"):
        resume.load(tmp_path, config, {**env, "gpu": "NVIDIA H100"}, {"quack": "0.6.5 (peers kit)"})


def test_every_suite_has_shapes_in_every_mode() -> None:
    from oink.bench import suites

    for suite in suites.SUITES:
        for device in ("cuda", "cpu"):
            for quick in (False, True):
                pairs = suites.shapes(suite, device, quick)
                assert pairs, (suite, device, quick)
                assert all(n > 0 and m > 0 for n, m in pairs)
    # The GPU suites named after issue 4's regimes hold the shapes its targets name.
    large = suites.shapes("large", "cuda", False)
    assert {n for n, _ in large} == {4096, 6144, 7168, 8192, 16384}
    assert min(m for _, m in large) >= 4096
    assert {m for _, m in suites.shapes("mid", "cuda", False)} == {128, 256, 512, 1024, 2048}
    large_n = suites.shapes("large_n", "cuda", False)  # step 7's long-row grid
    assert {n for n, _ in large_n} == {16384, 32768, 65536, 131072, 262144}
    assert {m for _, m in large_n} == {1, 16, 256, 1024, 4096}


def test_default_output_is_a_new_folder_outside_the_source_tree(tmp_path, monkeypatch) -> None:
    from oink.bench import env

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    info = {"gpu": "NVIDIA H200", "date_utc": "2026-11-30T12:05:01+00:00"}
    first = env.default_out_dir(info)
    assert first == tmp_path / "oink" / "bench" / "nvidia-h200-20261130T120501Z"
    first.mkdir(parents=True)
    assert env.default_out_dir(info) == first.with_name(first.name + "-2")  # never reused
    assert env.default_out_dir({"gpu": None, "date_utc": info["date_utc"]}).name.startswith("cpu-")


def test_the_sources_hash_names_the_files_that_make_the_numbers(tmp_path) -> None:
    from oink.bench import env

    def tree(root: Path, kernel: str) -> Path:
        (root / "csrc").mkdir(parents=True)
        (root / "python" / "oink").mkdir(parents=True)
        (root / "csrc" / "k.cu").write_text(kernel)
        (root / "python" / "oink" / "a.py").write_text("x = 1\n")
        (root / "CMakeLists.txt").write_text("project(x)\n")
        (root / "notes.md").write_text("not a source\n")
        return root

    a = env.sources_hash(tree(tmp_path / "a", "kernel v1"))
    b = env.sources_hash(tree(tmp_path / "b", "kernel v1"))  # another place, the same files
    c = env.sources_hash(tree(tmp_path / "c", "kernel v2"))
    assert a == b and a != c
    assert a.endswith("(3 files)")
    (tmp_path / "a" / "notes.md").write_text("edited\n")  # not a source: the same hash
    assert env.sources_hash(tmp_path / "a") == a
