"""tools/e2e.py --quick on the CPU: tiny Llama and Qwen3 models (random weights, no download) run
through every part of the end-to-end script; the records and the report have their structure,
and oink's greedy tokens are stock transformers' in float32."""

import importlib
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))
e2e = importlib.import_module("e2e")

MODELS = ("llama3-8b", "qwen3-8b")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("e2e")
    assert e2e.main(["--quick", "--device", "cpu", "--out", str(out)]) == 0
    doc = json.loads((out / "e2e.json").read_text())
    return out, doc, (out / "e2e.md").read_text()


def test_records_cover_every_cell_with_their_fields(run):
    _, doc, _ = run
    records = doc["records"]
    assert doc["env"]["device"] == "cpu" and doc["env"]["versions"]["transformers"]
    for r in records:
        for field in ("kind", "model", "layers", "mode", "dtype", "batch", "seq", "provider"):
            assert field in r, (field, r)
        assert r["status"] in ("ok", "skipped", "error") and "gpu" in r and "versions" in r
        assert r["layers"] == 2 and r["mode"] == "eager"  # --quick: 2 layers, no compile
    decode = [r for r in records if r["kind"] == "decode"]
    train = [r for r in records if r["kind"] == "train"]
    assert len(decode) == 2 * 3 * 3 and len(train) == 2 * 3
    for r in decode + train:
        if r["provider"] == "liger":  # Triton: never on a CPU
            assert r["status"] == "skipped" and r["note"]
        else:
            assert r["status"] == "ok", r
    assert {r["batch"] for r in decode} == {1, 8, 64}
    assert all(r["ms_per_token"] > 0 for r in decode if r["status"] == "ok")
    for r in train:
        if r["status"] == "ok":
            assert r["seq"] == 32 and r["tokens_per_s"] > 0 and r["peak_MiB"] is None


def test_fp32_greedy_tokens_of_stock_and_oink_are_identical(run):
    _, doc, _ = run
    tokens = {(r["model"], r["dtype"]): r for r in doc["records"] if r["kind"] == "tokens"}
    assert set(tokens) == {(m, d) for m in MODELS for d in ("float32", "bfloat16")}
    for m in MODELS:
        r = tokens[(m, "float32")]
        assert r["status"] == "ok", r
        assert len(r["tokens_stock"]) == 32
        assert r["tokens_stock"] == r["tokens_oink"] and r["identical"] and r["first_diff"] is None
        b = tokens[(m, "bfloat16")]
        assert b["identical"] == (b["first_diff"] is None)


def test_markdown_has_the_tables_and_the_token_lines(run):
    _, _, md = run
    assert "## Decode: ms per step" in md and "## Training: one step" in md
    assert "| model " in md and "|---" in md  # tabulate "github"
    assert "stock/oink" in md and "liger/oink" in md and "peak MiB" in md
    for m in MODELS:
        assert f"- {m} (2 layers), float32, 32 steps: identical: yes" in md
    assert "Liger's kernels are Triton" in md  # the skipped provider says why


def test_append_replaces_the_cells_it_measures_again(run, tmp_path):
    out, doc, _ = run
    (tmp_path / "e2e.json").write_text((out / "e2e.json").read_text())
    argv = ["--quick", "--device", "cpu", "--out", str(tmp_path), "--append"]
    argv += ["--parts", "decode", "--models", "llama3-8b", "--batches", "1"]
    assert e2e.main(argv) == 0
    again = json.loads((tmp_path / "e2e.json").read_text())["records"]
    assert len(again) == len(doc["records"])


def test_liger_version_found_under_its_metadata_spelling(tmp_path, monkeypatch):
    # Liger 0.8.5's wheel names itself liger_kernel: the report still gives its version.
    info = tmp_path / "liger_kernel-9.9.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: liger_kernel\nVersion: 9.9.1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    env = e2e.environment(e2e.parse(["--quick", "--device", "cpu", "--out", str(tmp_path)]))
    assert env["versions"]["liger_kernel"] == "9.9.1"
