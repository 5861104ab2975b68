"""Proves every planner check is tested: removes each check in turn and expects a C++ test to fail.

A check is one `return <message>;` of plan_violation (csrc/core/plan.cpp),
backward_plan_violation (csrc/core/backward_plan.cpp) or reduce_plan_violation
(csrc/core/reduce_plan.cpp). For each, the script writes a copy of the
sources where that return is gone (a `cond ? "" : message` return answers "" instead), rebuilds
oink_core and the C++ tests in build/planner-checks (no sanitizers, -O1) and runs the planner's
tests. A mutant that passes them survived: its check is not tested, and the script fails.

    python3 tools/check_planner_checks.py [-k SUBSTRING]   # -k: only checks whose text has it
"""

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "build" / "planner-checks"
SRC, BUILD = WORK / "src", WORK / "build"
CHECKED = [
    ("csrc/core/plan.cpp", "plan_violation"),
    ("csrc/core/backward_plan.cpp", "backward_plan_violation"),
    ("csrc/core/reduce_plan.cpp", "reduce_plan_violation"),
]
TESTS = (
    "MakePlan.*:PlanViolation.*:KernelTable.*:MakeBackwardPlan.*:BackwardPlanViolation.*:"
    "ReducePlan.*:ReducePlanViolation.*"
)


def skip_literal(text: str, i: int) -> int:
    """Index just past the string or char literal, or comment, starting at text[i]."""
    if text.startswith("//", i):
        return text.index("\n", i)
    quote = text[i]
    i += 1
    while text[i] != quote:
        i += 2 if text[i] == "\\" else 1
    return i + 1


def function_body(text: str, name: str) -> tuple[int, int]:
    """[start, end) of the body of the definition `std::string name(...) {...}`."""
    start = re.search(rf"^std::string {name}\(", text, re.M).end()
    i, depth = text.index("{", start), 0
    while True:
        if text[i] in "\"'" or text.startswith("//", i):
            i = skip_literal(text, i)
            continue
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
        if depth == 0:
            return start, i


def checks(text: str, name: str) -> list[tuple[int, int, str]]:
    """(start, end, replacement) of each check's return statement in function `name`."""
    begin, end = function_body(text, name)
    found, i = [], begin
    while i < end:
        if text[i] in "\"'" or text.startswith("//", i):
            i = skip_literal(text, i)
            continue
        if re.match(r"\breturn\b", text[i : i + 7]) and not text[i - 1].isalnum():
            j = i
            while text[j] != ";":
                j = skip_literal(text, j) if text[j] in "\"'" else j + 1
            expression = text[i + 6 : j].strip()
            if expression != '""':
                # `return ok ? "" : why;` is removed by answering ""; others by doing nothing.
                found.append((i, j + 1, 'return "";' if '? "" :' in expression else "{}"))
            i = j
        i += 1
    return found


def run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


def prepare() -> None:
    """A copy of the sources the planner's tests build from, configured once."""
    for sub in ("csrc", "tests/cpp"):
        shutil.copytree(ROOT / sub, SRC / sub, dirs_exist_ok=True)
    # -O1: the mutants are compiled to be run once, not timed.
    cmake = (ROOT / "CMakeLists.txt").read_text().replace(" -O3 ", " -O1 ")
    (SRC / "CMakeLists.txt").write_text(cmake)
    flags = ["-DOINK_BUILD_EXTENSION=OFF", "-DOINK_WITH_CUDA=OFF", "-DOINK_BUILD_TESTS=ON"]
    flags += ["-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_CXX_FLAGS_RELEASE=-O1"]
    configure = run(["cmake", "-S", SRC, "-B", BUILD, "-G", "Ninja", *flags])
    if configure.returncode != 0:
        sys.exit(f"configure failed:\n{configure.stdout}{configure.stderr}")


def tests_pass() -> bool:
    build = run(["cmake", "--build", BUILD, "--target", "oink_cpp_tests"])
    if build.returncode != 0:
        sys.exit(f"a mutant does not compile (the script's edit is wrong):\n{build.stdout}")
    return run([BUILD / "oink_cpp_tests", f"--gtest_filter={TESTS}"]).returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only the checks whose text contains this")
    only = parser.parse_args().k
    started = time.monotonic()
    prepare()
    if not tests_pass():
        sys.exit("the planner's tests fail before any check is removed")
    mutants = []
    for path, name in CHECKED:
        text = (SRC / path).read_text()  # the snapshot prepare() took
        for start, end, replacement in checks(text, name):
            line = text.count("\n", 0, start) + 1
            if only in text[start:end]:
                mutants.append((path, line, text, text[:start] + replacement + text[end:]))
    survivors = []
    for k, (path, line, original, mutant) in enumerate(mutants, 1):
        source = original.splitlines()[line - 1].strip()
        (SRC / path).write_text(mutant)
        survived = tests_pass()
        (SRC / path).write_text(original)
        verdict = "SURVIVED" if survived else "killed"
        print(f"check {k} of {len(mutants)}: {path}:{line} {source[:70]} ... {verdict}", flush=True)
        if survived:
            survivors.append(f"{path}:{line}")
    run(["cmake", "--build", BUILD, "--target", "oink_cpp_tests"])
    minutes = (time.monotonic() - started) / 60
    print(f"{len(mutants) - len(survivors)} of {len(mutants)} checks tested ({minutes:.1f} min)")
    for survivor in survivors:
        print(f"untested check: {survivor}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
