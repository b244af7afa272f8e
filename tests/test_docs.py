"""Every public function and module of eqx_qd says what it does, and names its arguments (in an
``**Arguments:**`` section, a ``**Fields:**`` section, or its prose); methods that implement a
documented abstract method inherit that documentation; job config fields carry a help line."""

import dataclasses
import importlib
import inspect
import re

import pytest


NAMESPACES = (
    "eqx_qd", "eqx_qd.envs", "eqx_qd.rl", "eqx_qd.internal", "eqx_qd.plotting", "eqx_qd.jobs",
    "eqx_qd.testing", "eqx_qd.external",
)  # fmt: skip
SKIPPED_PARAMS = {"self", "cls", "key", "args", "kwargs"}


def _params(fn) -> list[str]:
    try:
        return [p for p in inspect.signature(fn).parameters if p not in SKIPPED_PARAMS]
    except (TypeError, ValueError):
        return []


def _mentions(doc: str, names: list[str]) -> list[str]:
    return [n for n in names if not re.search(rf"\b{re.escape(n)}\b", doc)]


def _inherited_docs(cls, name: str) -> str:
    """The docstrings of ``name`` along the MRO (an implementation inherits its contract)."""
    return "\n".join(
        inspect.getdoc(vars(base)[name]) or ""
        for base in inspect.getmro(cls)
        if name in vars(base) and callable(vars(base)[name])
    )


def _public_objects():
    seen, out = set(), []
    for module_name in NAMESPACES:
        module = importlib.import_module(module_name)
        names = getattr(module, "__all__", None) or [n for n in vars(module) if n[0] != "_"]
        for name in names:
            obj = getattr(module, name)
            if inspect.ismodule(obj) or id(obj) in seen or not callable(obj):
                continue
            if not (getattr(obj, "__module__", "") or "").startswith("eqx_qd"):
                continue  # re-exported third-party names (matplotlib's Figure, ...)
            seen.add(id(obj))
            out.append((f"{module_name}.{name}", obj))
    return out


def _problems(qualname, obj) -> list[str]:
    problems = []
    if not inspect.isclass(obj):
        doc = inspect.getdoc(obj) or ""
        if not doc:
            return [f"{qualname}: no docstring"]
        if len(_params(obj)) >= 2 and (absent := _mentions(doc, _params(obj))):
            problems.append(f"{qualname}: arguments {absent} are not documented")
        return problems
    class_doc = inspect.getdoc(obj) or ""
    if not class_doc:
        problems.append(f"{qualname}: no docstring")
    # Fields (or __init__ arguments) named in the class docstring or, for job configs, in help.
    helped = set()
    if dataclasses.is_dataclass(obj):
        helped = {f.name for f in dataclasses.fields(obj) if f.metadata.get("help")}
    init_params = [p for p in _params(obj.__init__) if p not in helped]
    if len(init_params) >= 2 and (absent := _mentions(class_doc, init_params)):
        problems.append(f"{qualname}: fields / arguments {absent} are not documented")
    for name, member in vars(obj).items():
        if name.startswith("_") and name != "__call__":
            continue
        if not inspect.isfunction(member):
            continue
        doc = _inherited_docs(obj, name)
        if not doc.strip():
            problems.append(f"{qualname}.{name}: no docstring")
        elif len(_params(member)) >= 2 and (absent := _mentions(doc, _params(member))):
            problems.append(f"{qualname}.{name}: arguments {absent} are not documented")
    return problems


@pytest.mark.parametrize(
    "qualname, obj", _public_objects(), ids=lambda x: x if isinstance(x, str) else ""
)
def test_public_api_is_documented(qualname, obj):
    assert _problems(qualname, obj) == []


def test_the_migration_guide_names_only_what_exists():
    """Every ``q.X``, ``jobs.X`` and ``plotting.X`` of docs/migrating-from-qdax.md, with every
    attribute after it (``q.rl.TD3.train``), exists, so the guide cannot drift from the API."""
    import pathlib

    import eqx_qd
    from eqx_qd import jobs, plotting

    text = (pathlib.Path(__file__).parents[1] / "docs" / "migrating-from-qdax.md").read_text()
    roots = {"q": eqx_qd, "jobs": jobs, "plotting": plotting}
    found = re.findall(r"\b(q|jobs|plotting)((?:\.\w+)+)", text)
    assert len(found) > 40
    missing = []
    for root, path in found:
        obj = roots[root]
        for name in path.split(".")[1:]:
            if not hasattr(obj, name):
                missing.append(root + path)
                break
            obj = getattr(obj, name)
    assert missing == []


def test_the_api_reference_has_a_page_entry_for_every_public_name():
    """``docs/api`` (built by ``mkdocs build --strict`` in CI) renders every public name of
    ``eqx_qd``, ``eqx_qd.jobs``, ``eqx_qd.external``, ``eqx_qd.plotting``,
    ``eqx_qd.testing`` and ``eqx_qd.internal`` once."""
    import pathlib

    entries = []
    for page in sorted((pathlib.Path(__file__).parents[1] / "docs" / "api").glob("*.md")):
        entries += re.findall(r"^\s*::: (eqx_qd[\w.]*)$", page.read_text(), flags=re.M)
    assert len(entries) == len(set(entries)), "an entry is listed twice"
    expected = set()
    modules = (
        "eqx_qd",
        "eqx_qd.envs",
        "eqx_qd.rl",
        "eqx_qd.jobs",
        "eqx_qd.plotting",
        "eqx_qd.external",
        "eqx_qd.testing",
        "eqx_qd.internal",
    )
    for module_name in modules:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", None) or [n for n in vars(module) if n[0] != "_"]:
            obj = getattr(module, name)
            if inspect.ismodule(obj):
                continue
            home = getattr(obj, "__module__", None) or ""
            if module_name != "eqx_qd" and callable(obj) and not home.startswith("eqx_qd"):
                continue  # re-exported third-party names (matplotlib's Figure, ...)
            if module_name == "eqx_qd.plotting" and not name.startswith("plot_"):
                continue  # the module's own imports
            expected.add(f"{module_name}.{name}")
    assert set(entries) == expected, set(entries) ^ expected


@pytest.mark.parametrize("page", ["README.md", "docs/migrating-from-qdax.md", "docs/testing.md"])
@pytest.mark.e2e
def test_every_python_block_of_the_readme_and_the_guides_runs(page, tmp_path, monkeypatch):
    """The page's ```python blocks, run in order in one namespace as a reader would paste them
    (in a scratch folder: the README saves a figure)."""
    import pathlib

    import matplotlib

    matplotlib.use("Agg")
    text = (pathlib.Path(__file__).parents[1] / page).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, f"{page} has no python block"
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{page}, python block {i}", "exec"), namespace)


def test_the_readmes_stay_at_their_size_and_every_benchmark_log_cited_exists():
    """The README and `benchmarks/README.md` (an index) stay under 150 lines; the dated
    measurements live in `benchmarks/log/`, and every log file a page, notebook or docstring
    cites exists (issue 70)."""
    import pathlib

    root = pathlib.Path(__file__).parents[1]
    for page in ("README.md", "benchmarks/README.md"):
        lines = (root / page).read_text().count("\n")
        assert lines <= 150, f"{page} has {lines} lines"
    cited = set()
    for pattern in (
        "*.md",
        "docs/**/*.md",
        "notebooks/*.ipynb",
        "eqx_qd/**/*.py",
        "tests/**/*.py",
        "benchmarks/*.py",
        "benchmarks/*.md",
    ):
        for path in root.glob(pattern):
            text = path.read_text()
            cited |= set(re.findall(r"benchmarks/log/([\w.-]+\.md)", text))
            if path.name == "README.md" and path.parent.name == "benchmarks":
                cited |= set(re.findall(r"\(log/([\w.-]+\.md)\)", text))
    assert cited, "no log cited"
    missing = sorted(name for name in cited if not (root / "benchmarks/log" / name).is_file())
    assert not missing, missing
