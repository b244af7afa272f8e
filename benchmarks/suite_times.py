"""Where the test suite's time goes: a pytest JUnit XML file read into two Markdown tables, the
seconds per test module and the slowest tests.

    pytest -n 2 --nbmake notebooks tests benchmarks/tests --junitxml=suite.xml
    python benchmarks/suite_times.py suite.xml --top 40 > benchmarks/results/suite_<cpu>_<date>.md

A test's seconds are its setup, call and teardown (pytest's default ``junit_duration_report``),
so a module fixture's cost lands on the first test that asks for it. Under ``-n 2`` the sum is
worker-seconds: two workers, so the wall time is about half of it.
"""

import argparse
import collections
import sys
import xml.etree.ElementTree as ET


def read_cases(path: str) -> list[tuple[str, str, float, str]]:
    """(module, test name, seconds, outcome) of every test case in the file."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        # pytest writes "tests.jobs.test_cli" for tests/jobs/test_cli.py; nbmake's items name
        # their notebook in the class name ("notebooks.map_elites.ipynb").
        module = classname.replace(".", "/")
        if module.endswith("/ipynb"):
            module = module[: -len("/ipynb")] + ".ipynb"
        elif not module.endswith(".py"):
            module += ".py"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped" and outcome == "passed":
                outcome = "skipped"
        cases.append((module, name, float(case.get("time", 0.0)), outcome))
    return cases


def tables(cases: list[tuple[str, str, float, str]], top: int) -> str:
    """The two tables as Markdown, modules by seconds and the `top` slowest tests."""
    per_module: dict[str, list[float]] = collections.defaultdict(list)
    for module, _, seconds, _ in cases:
        per_module[module].append(seconds)
    total = sum(seconds for _, _, seconds, _ in cases)
    outcomes = collections.Counter(outcome for *_, outcome in cases)
    lines = [
        f"{len(cases)} items ({', '.join(f'{n} {k}' for k, n in sorted(outcomes.items()))}), "
        f"{total:,.0f} worker-seconds in all.",
        "",
        "| module | items | seconds | share |",
        "| --- | ---: | ---: | ---: |",
    ]
    for module, times in sorted(per_module.items(), key=lambda kv: -sum(kv[1])):
        share = 100 * sum(times) / total if total else 0.0
        lines.append(f"| `{module}` | {len(times)} | {sum(times):,.1f} | {share:.1f}% |")
    lines += ["", f"The {top} slowest:", "", "| test | seconds |", "| --- | ---: |"]
    slowest = sorted(cases, key=lambda c: -c[2])[:top]
    for module, name, seconds, _ in slowest:
        lines.append(f"| `{module}::{name}` | {seconds:,.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit_xml", help="the file pytest's --junitxml wrote")
    parser.add_argument("--top", type=int, default=30, help="how many of the slowest tests")
    args = parser.parse_args(argv)
    sys.stdout.write(tables(read_cases(args.junit_xml), args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
