"""The tests of a pytest JUnit XML report that failed (or errored) with one of given messages, as
the node ids pytest takes back: what tools/gpu_run.sh runs again alone once the sanitizers beside
the suite have finished, for the tests that ran out of GPU memory next to them, or whose
pytest-xdist worker died under that pressure (a segmentation fault inside an allocation that
failed: its report says only that the worker crashed).

    python3 tools/junit_failures.py --matching OutOfMemoryError \
        --matching "crashed while running" /tmp/junit.xml
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ElementTree


def node_id(case: ElementTree.Element) -> str:
    """tests.python.test_x + test_y[p] -> tests/python/test_x.py::test_y[p] (a test of a class:
    tests.python.test_x.TestZ -> tests/python/test_x.py::TestZ::test_y[p])."""
    parts = case.get("classname", "").split(".")
    cls = [parts.pop()] if parts and parts[-1][:1].isupper() else []
    return "::".join(["/".join(parts) + ".py", *cls, case.get("name", "")])


def failures(xml_text: str, *matching: str) -> list[str]:
    """Node ids of the test cases whose failure or error says one of `matching` (in its message
    or text), in the report's order."""
    ids = []
    for case in ElementTree.fromstring(xml_text).iter("testcase"):
        for outcome in (*case.findall("failure"), *case.findall("error")):
            said = (outcome.get("message") or "") + (outcome.text or "")
            if any(text in said for text in matching):
                ids.append(node_id(case))
                break
    return ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", help="pytest --junitxml output")
    parser.add_argument(
        "--matching",
        required=True,
        action="append",
        help="text the failure must contain (repeatable: any of them)",
    )
    args = parser.parse_args()
    try:
        with open(args.report, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        print(f"junit_failures: cannot read {args.report}: {e}", file=sys.stderr)
        return 1
    for test in failures(text, *args.matching):
        print(test)
    return 0


if __name__ == "__main__":
    sys.exit(main())
