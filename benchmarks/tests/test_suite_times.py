"""benchmarks/suite_times.py: a pytest JUnit file read into seconds per module and the
slowest tests, on a hand-written file with a nested test module, a notebook, a failure and a
skip."""

import importlib.util
import os

import pytest


BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.jobs.test_resume" name="test_a[pbt]" time="3.5" />
<testcase classname="tests.jobs.test_resume" name="test_a[ippo]" time="1.5">
  <failure message="boom">boom</failure>
</testcase>
<testcase classname="tests.test_docs" name="test_b" time="0.25">
  <skipped message="no" />
</testcase>
<testcase classname="notebooks.map_elites.ipynb" name="map_elites.ipynb" time="10.0" />
<testcase classname="benchmarks.tests.test_compare" name="test_c" time="0.75" />
</testsuite></testsuites>
"""


@pytest.fixture(scope="module")
def suite_times():
    spec = importlib.util.spec_from_file_location(
        "suite_times", os.path.join(BENCH, "suite_times.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cases_are_read_with_their_module_and_outcome(suite_times, tmp_path):
    path = tmp_path / "suite.xml"
    path.write_text(JUNIT)
    assert suite_times.read_cases(str(path)) == [
        ("tests/jobs/test_resume.py", "test_a[pbt]", 3.5, "passed"),
        ("tests/jobs/test_resume.py", "test_a[ippo]", 1.5, "failed"),
        ("tests/test_docs.py", "test_b", 0.25, "skipped"),
        ("notebooks/map_elites.ipynb", "map_elites.ipynb", 10.0, "passed"),
        ("benchmarks/tests/test_compare.py", "test_c", 0.75, "passed"),
    ]


def test_the_tables_sum_by_module_and_rank_the_slowest(suite_times, tmp_path, capsys):
    path = tmp_path / "suite.xml"
    path.write_text(JUNIT)
    assert suite_times.main([str(path), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("5 items (1 failed, 3 passed, 1 skipped), 16 worker-seconds in all.")
    modules = [line for line in out.splitlines() if line.startswith("| `")][:4]
    assert modules == [
        "| `notebooks/map_elites.ipynb` | 1 | 10.0 | 62.5% |",
        "| `tests/jobs/test_resume.py` | 2 | 5.0 | 31.2% |",
        "| `benchmarks/tests/test_compare.py` | 1 | 0.8 | 4.7% |",
        "| `tests/test_docs.py` | 1 | 0.2 | 1.6% |",
    ]
    slowest = out.split("The 2 slowest:")[1]
    assert "map_elites.ipynb::map_elites.ipynb` | 10.0 |" in slowest
    assert "test_resume.py::test_a[pbt]` | 3.5 |" in slowest
    assert "test_c" not in slowest
