"""`./dev test --repeat`: the per-file summary of N pytest runs, read from their JUnit XML."""

from __future__ import annotations

from tests.support.repeat import FAILED, PASSED, SKIPPED, module_path, outcomes, summary


def junit(*cases: str) -> str:
    return f'<testsuites><testsuite name="pytest">{"".join(cases)}</testsuite></testsuites>'


def test_each_case_is_named_by_its_file_and_counts_an_error_in_any_phase_as_a_failure() -> None:
    xml = junit(
        '<testcase classname="tests.integration.test_a" name="test_ok" />',
        '<testcase classname="tests.integration.test_a" name="test_bad"><failure message="x" /></testcase>',
        '<testcase classname="tests.integration.test_a" name="test_torn"><error message="teardown" /></testcase>',
        '<testcase classname="tests.integration.test_a" name="test_skip"><skipped message="y" /></testcase>',
    )
    assert outcomes(xml) == {
        "tests/integration/test_a.py::test_ok": PASSED,
        "tests/integration/test_a.py::test_bad": FAILED,
        "tests/integration/test_a.py::test_torn": FAILED,
        "tests/integration/test_a.py::test_skip": SKIPPED,
    }


def test_a_test_class_is_not_part_of_the_file_path() -> None:
    assert module_path("tests.unit.test_b.TestSomething") == "tests/unit/test_b.py"


def test_the_summary_gives_each_files_passing_runs_and_each_failed_test_with_its_count() -> None:
    runs = [
        {"t/test_a.py::x": PASSED, "t/test_a.py::y": PASSED, "t/test_b.py::z": PASSED},
        {"t/test_a.py::x": PASSED, "t/test_a.py::y": FAILED, "t/test_b.py::z": SKIPPED},
    ]
    assert summary(runs) == [
        "t/test_a.py: 1/2 runs passed (3/4 test runs passed)",
        "t/test_b.py: 2/2 runs passed (1/2 test runs passed)",
        "FAILED 1/2: t/test_a.py::y",
    ]
