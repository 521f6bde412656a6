"""`./dev test --repeat N PATH...`: run pytest N times over the same tests, each run a fresh process
(fresh session and module fixtures, as a CI run has), and print per file how many runs passed.

pytest has no repeat of its own (pytest-repeat repeats a test inside one session, sharing its
fixtures, which hides the flakes a fresh run meets). Each run writes JUnit XML; the summary
reads the outcomes from it.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


def outcomes(junit_xml: str) -> dict[str, str]:
    """`path::test` -> passed, failed (a failure or an error, in any phase) or skipped."""
    found: dict[str, str] = {}
    for case in ET.fromstring(junit_xml).iter("testcase"):
        test = f"{module_path(case.get('classname', ''))}::{case.get('name', '')}"
        children = {child.tag for child in case}
        if children & {"failure", "error"}:
            found[test] = FAILED
        elif "skipped" in children:
            found.setdefault(test, SKIPPED)
        else:
            found.setdefault(test, PASSED)
    return found


def module_path(classname: str) -> str:
    """`tests.integration.test_x.TestClass` -> `tests/integration/test_x.py`."""
    parts = classname.split(".")
    while len(parts) > 1 and not parts[-1].startswith("test_"):
        parts.pop()  # a test class
    return "/".join(parts) + ".py"


def summary(runs: list[dict[str, str]]) -> list[str]:
    """Per file: the runs in which all its tests passed (or were skipped), and its tests' passes;
    then each test that failed, with how often."""
    by_file: dict[str, list[dict[str, str]]] = defaultdict(list)
    failures: Counter[str] = Counter()
    for run in runs:
        files: dict[str, dict[str, str]] = defaultdict(dict)
        for test, outcome in run.items():
            files[test.split("::", 1)[0]][test] = outcome
            if outcome == FAILED:
                failures[test] += 1
        for path, tests in files.items():
            by_file[path].append(tests)
    lines = []
    for path in sorted(by_file):
        seen = by_file[path]
        clean = sum(FAILED not in tests.values() for tests in seen)
        passed = sum(list(tests.values()).count(PASSED) for tests in seen)
        ran = sum(len(tests) for tests in seen)
        lines.append(f"{path}: {clean}/{len(runs)} runs passed ({passed}/{ran} test runs passed)")
    lines += [f"FAILED {failures[test]}/{len(runs)}: {test}" for test in sorted(failures)]
    return lines


def main(argv: list[str]) -> int:
    if not argv or not argv[0].isdigit() or int(argv[0]) < 1:
        print("usage: ./dev test --repeat N [PATH...] [pytest options]", file=sys.stderr)
        return 2
    count, args = int(argv[0]), argv[1:]
    runs: list[dict[str, str]] = []
    worst = 0
    logs = Path(tempfile.mkdtemp(prefix="mf-repeat-"))  # kept: a failed run's output is its evidence
    for index in range(1, count + 1):
        junit, log = logs / f"run-{index}.xml", logs / f"run-{index}.log"
        started = time.monotonic()
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *args]
        with log.open("wb") as out:
            code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode
        run = outcomes(junit.read_text()) if junit.exists() else {}
        runs.append(run)
        worst = max(worst, code)
        tally = Counter(run.values())
        print(
            f"run {index}/{count}: exit {code}, {tally[PASSED]} passed, {tally[FAILED]} failed, "
            f"{tally[SKIPPED]} skipped in {time.monotonic() - started:.0f} s (output: {log})",
            flush=True,
        )
    print("\n".join(summary(runs)))
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
