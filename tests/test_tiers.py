"""The suite's own organisation, as the README and docs/checks.md describe it: the README's
test command is the one `.ci/run` runs, the fast tier leaves out every marker the project
declares, and every notebook reads its iteration counts from its one smoke line."""

import json
import pathlib
import re
import tomllib

import pytest


ROOT = pathlib.Path(__file__).parents[1]
SMOKE = 'SMOKE = os.environ.get("EQX_QD_SMOKE") == "1"'


def _markers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    return [line.split(":")[0] for line in config["markers"]]


def _bash_lines(text: str) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_ci_installs_the_readme_s_extras_editable():
    """`.ci/run` installs the project as the README's test command does (editable, the test
    extras), with the docs extra for its site build: with uv, which resolves what pip does."""
    readme = _bash_lines((ROOT / "README.md").read_text())
    (install,) = [line for line in readme if 'pip install -e ".[test]"' in line]
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.startswith(("pip install", "uv pip install"))]  # fmt: skip
    assert ci == ['uv pip install -q -e ".[test,docs]"'], ci
    assert "python3 -m venv .venv" in install


def test_the_readme_s_test_command_is_the_one_ci_runs():
    readme = _bash_lines((ROOT / "README.md").read_text())
    (install,) = [line for line in readme if 'pip install -e ".[test]"' in line]
    readme_pytest = install.split("&&")[-1].strip()
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.startswith("pytest ")]  # fmt: skip
    assert ci == [readme_pytest] == ["pytest -n 2 --nbmake"]


def test_the_fast_tier_leaves_out_every_declared_marker():
    """A new marker is a decision about the fast tier: this test names the ones it leaves out."""
    readme = _bash_lines((ROOT / "README.md").read_text())
    fast = [line for line in readme if line.startswith("pytest ") and " -m " in line]
    assert fast == ['pytest -n 2 -m "' + " and ".join(f"not {m}" for m in _markers()) + '"']
    assert _markers() == ["slow", "e2e", "brax"]
    checks = (ROOT / "docs" / "checks.md").read_text()
    assert fast[0].removeprefix("pytest -n 2 ") in checks
    assert '-m "' + " or ".join(_markers()) + '"' in checks  # the slow tier: the rest


def test_every_notebook_with_loops_reads_its_counts_from_its_smoke_line():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        if path.stem == "testing_your_extension":  # no loop to shorten: a few laws' examples
            assert "SMOKE" not in code
            continue
        assert code.count(SMOKE) == 1, path.name
        sized = [line for line in code.splitlines() if re.search(r"\bif SMOKE else\b", line)]
        assert sized, f"{path.name}: no count reads SMOKE"


def test_a_notebook_whose_kernel_lost_the_port_race_runs_again_once():
    import importlib.util

    spec = importlib.util.spec_from_file_location("nb_conftest", ROOT / "notebooks" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    calls = []

    def raising(*errors):
        def runtest():
            calls.append(1)
            if len(calls) <= len(errors):
                raise errors[len(calls) - 1]

        return runtest

    calls.clear()
    module.once_more_on_a_kernel_race(raising(RuntimeError(module.KERNEL_RACE)))()
    assert len(calls) == 2  # the race, then the run
    calls.clear()
    with pytest.raises(ValueError, match="a cell failed"):
        module.once_more_on_a_kernel_race(raising(ValueError("a cell failed")))()
    assert len(calls) == 1  # a notebook's own failure is not retried
    calls.clear()
    with pytest.raises(RuntimeError, match="Kernel died"):
        race = RuntimeError(module.KERNEL_RACE)
        module.once_more_on_a_kernel_race(raising(race, race))()
    assert len(calls) == 2  # once more only
