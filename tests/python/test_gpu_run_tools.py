"""tools/junit_failures.py, which tools/gpu_run.sh uses to run the tests that ran out of GPU memory
beside the sanitizers again, alone: on a JUnit report that pytest wrote for a small hand-made
suite, only the failures and errors that say the given text come back, as node ids pytest takes."""

import importlib
import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))
junit_failures = importlib.import_module("junit_failures")

SUITE = """
import pytest

@pytest.mark.parametrize("n", [1, 524288])
def test_rows(n):
    if n > 1:
        raise MemoryError("torch.OutOfMemoryError: CUDA out of memory")

def test_wrong_bits():
    assert 1 == 2

@pytest.fixture
def broken():
    raise RuntimeError("OutOfMemoryError while setting up")

def test_set_up(broken):
    pass

class TestGroup:
    def test_member(self):
        raise RuntimeError("OutOfMemoryError in a class")
"""


def test_the_failures_that_say_the_text_come_back_as_node_ids(tmp_path):
    suite = tmp_path / "tests" / "python"
    suite.mkdir(parents=True)
    (suite / "test_demo.py").write_text(SUITE)
    report = tmp_path / "junit.xml"
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*run, f"--junitxml={report}", "tests/python"], cwd=tmp_path, capture_output=True
    )
    assert done.returncode == 1  # the hand-made suite fails, by design
    ids = junit_failures.failures(report.read_text(), "OutOfMemoryError")
    assert ids == [
        "tests/python/test_demo.py::test_rows[524288]",
        "tests/python/test_demo.py::test_set_up",
        "tests/python/test_demo.py::TestGroup::test_member",
    ]
    # pytest takes them back: the three run again (and fail again), nothing else.
    again = subprocess.run([*run, *ids], cwd=tmp_path, capture_output=True, text=True)
    assert again.stdout.strip().splitlines()[-1].startswith("2 failed, 1 error")
    assert junit_failures.failures(report.read_text(), "no such text") == []


# What pytest-xdist writes for a test whose worker died (its report has nothing but this line;
# xdist's own wording), beside one that ran out of memory and one that failed otherwise.
XDIST_REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="3" skipped="0" tests="4">
<testcase classname="tests.python.test_rmsnorm" name="test_bits[True-524288-bfloat16]">
<failure message="worker 'gw0' crashed while running
 'tests/python/test_rmsnorm.py::test_bits[True-524288-bfloat16]'">worker 'gw0' crashed while
 running 'tests/python/test_rmsnorm.py::test_bits[True-524288-bfloat16]'</failure></testcase>
<testcase classname="tests.python.test_rmsnorm" name="test_bits[True-524288-float16]">
<failure message="torch.OutOfMemoryError: CUDA out of memory.">trace</failure></testcase>
<testcase classname="tests.python.test_rmsnorm" name="test_bits[True-64-float16]">
<failure message="AssertionError: bits differ">trace</failure></testcase>
<testcase classname="tests.python.test_rmsnorm" name="test_bits[False-64-float16]" />
</testsuite></testsuites>
"""


def test_any_of_several_texts_selects_a_failure_and_the_command_line_takes_them(tmp_path):
    crashed = "tests/python/test_rmsnorm.py::test_bits[True-524288-bfloat16]"
    oom = "tests/python/test_rmsnorm.py::test_bits[True-524288-float16]"
    assert junit_failures.failures(XDIST_REPORT, "crashed while running") == [crashed]
    both = junit_failures.failures(XDIST_REPORT, "OutOfMemoryError", "crashed while running")
    assert both == [crashed, oom]  # the report's order; the wrong bits stay failed
    report = tmp_path / "junit.xml"
    report.write_text(XDIST_REPORT)
    script = str(TOOLS / "junit_failures.py")
    args = ["--matching", "OutOfMemoryError", "--matching", "crashed while running"]
    done = subprocess.run(
        [sys.executable, script, *args, str(report)], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == [crashed, oom]
