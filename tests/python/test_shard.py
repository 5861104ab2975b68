"""`pytest --shard K/N` (tests/python/conftest.py): N runs of the suite, one share each, run
every collected test exactly once."""

import subprocess
import sys
from pathlib import Path

import pytest

from oink.testing import in_shard, parse_shard

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("count", [0, 1, 4, 13])
def test_shares_partition_the_tests_evenly(n, count):
    shares = [[i for i in range(count) if in_shard(i, k, n)] for k in range(1, n + 1)]
    assert sorted(i for share in shares for i in share) == list(range(count))
    sizes = [len(share) for share in shares]
    assert max(sizes) - min(sizes) <= 1


def test_parse_shard_accepts_k_of_n():
    assert parse_shard("1/2") == (1, 2)
    assert parse_shard("3/3") == (3, 3)


@pytest.mark.parametrize("spec", ["0/2", "3/2", "1", "1/0", "a/b", "-1/2", "1/2/3", ""])
def test_parse_shard_names_what_it_expected(spec):
    with pytest.raises(ValueError, match=r"--shard: expected K/N with 1 <= K <= N.*got"):
        parse_shard(spec)


def collect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=300,
    )


def collected(result: subprocess.CompletedProcess) -> set[str]:
    return {line for line in result.stdout.splitlines() if "::" in line}


def test_pytest_runs_each_test_in_exactly_one_share():
    target = "test_shard.py::test_shares_partition_the_tests_evenly"
    everything = collected(collect(target))
    assert len(everything) == 16
    shares = [collected(collect(target, "--shard", f"{k}/3")) for k in (1, 2, 3)]
    assert set().union(*shares) == everything
    assert sum(len(share) for share in shares) == len(everything)


def test_pytest_shares_split_what_k_selects():
    # "1 or 3" keeps 12 of the 16 cases, all of the even-numbered ones: shares taken before the
    # selection would hold 8 and 4 of them.
    target = "test_shard.py::test_shares_partition_the_tests_evenly"
    selected = collected(collect(target, "-k", "1 or 3"))
    assert len(selected) == 12
    shares = [collected(collect(target, "-k", "1 or 3", "--shard", f"{k}/2")) for k in (1, 2)]
    assert [len(share) for share in shares] == [6, 6]
    assert shares[0] | shares[1] == selected


def test_pytest_rejects_a_bad_shard():
    result = collect("test_shard.py", "--shard", "4/3")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--shard: expected K/N" in result.stderr
