"""Guards that keep the house's fixes fixed (issue 69): no import from JAX's private modules
but the one the design FAQ explains, no formatter escapes in the package, and every public
namespace's `__all__` equal to the names it defines or re-exports."""

import ast
import importlib
import pathlib

import pytest


PACKAGE = pathlib.Path(__file__).parents[1] / "eqx_qd"

PRIVATE_JAX_ALLOWED = {("jobs/_distributed.py", "_coordination_state")}
"""(file, function) that may import from `jax._src`: the state of `jax.distributed`, which no
public API gives (docs/design.md, "Why does the job layer read `jax._src`")."""

FMT_SKIP_ALLOWED: dict[str, int] = {}
"""File -> how many `# fmt: skip` / `# fmt: off` it may hold, each with a comment saying why.
Empty: the formatter's layout is the package's."""

NAMESPACES = [
    "eqx_qd",
    "eqx_qd.internal",
    "eqx_qd.envs",
    "eqx_qd.rl",
    "eqx_qd.jobs",
    "eqx_qd.jobs.checks",
    "eqx_qd.external",
    "eqx_qd.plotting",
    "eqx_qd.testing",
]


def _sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), path.read_text()


def test_no_import_from_jax_private_modules_but_the_one_allowed():
    found = set()
    for name, text in _sources():
        tree = ast.parse(text)
        enclosing = {}  # node -> the innermost function it is in (walked outer ones first)
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(function):
                    if node is not function:
                        enclosing[node] = function.name
        for node in ast.walk(tree):
            modules = []
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            if any(m == "jax._src" or m.startswith("jax._src.") for m in modules):
                found.add((name, enclosing.get(node, "<module>")))
    assert found == PRIVATE_JAX_ALLOWED


def test_no_formatter_escapes_in_the_package():
    counts = {}
    for name, text in _sources():
        n = text.count("# fmt: skip") + text.count("# fmt: off")
        if n:
            counts[name] = n
    assert counts == FMT_SKIP_ALLOWED


def _api(path: pathlib.Path) -> set[str]:
    """The names a namespace module offers, public ones: what it defines at its top level,
    what it imports from eqx_qd's own modules under a name (`from ._x import A as A`, `from .
    import _validate as check`; a plain `from ._x import A` is for its own use), and what it
    re-exports explicitly from another package (`import numpy as np` is not offered)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and (node.level or node.module.startswith("eqx_qd")):
            names |= {a.asname for a in node.names if a.asname}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {a.asname for a in node.names if a.asname == a.name.split(".")[-1]}
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if n and not n.startswith("_") and n != "*"}


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_a_namespace_s_all_is_what_it_offers(namespace):
    module = importlib.import_module(namespace)
    path = pathlib.Path(module.__file__)
    offered = _api(path)
    assert hasattr(module, "__all__"), f"{namespace} has no __all__ (it offers {len(offered)})"
    assert sorted(module.__all__) == sorted(set(module.__all__)), "a name twice in __all__"
    assert set(module.__all__) == offered, (
        f"in __all__ only: {sorted(set(module.__all__) - offered)}; "
        f"offered, not in __all__: {sorted(offered - set(module.__all__))}"
    )


def test_the_laws_kit_s_files_share_no_private_names():
    """The laws kit is a package whose files (the runner, the emitter, repertoire, ranker and
    agent laws) import from one another only what the runner offers by name."""
    shared = []
    for path in sorted((PACKAGE / "_laws").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                shared += [f"{path.name}: {a.name}" for a in node.names if a.name.startswith("_")]
    assert shared == []


def _abstract_names() -> set[str]:
    """What the package's abstract classes ask of their subclasses: abstract methods and
    properties, and `AbstractVar` fields."""
    import inspect

    import eqx_qd
    import eqx_qd.envs
    import eqx_qd.external
    import eqx_qd.rl

    names = set()
    for namespace in (eqx_qd, eqx_qd.envs, eqx_qd.rl, eqx_qd.external):
        for cls in vars(namespace).values():
            if inspect.isclass(cls) and cls.__name__.startswith("Abstract"):
                names |= set(getattr(cls, "__abstractmethods__", ()))
                names |= {
                    n
                    for n, hint in getattr(cls, "__annotations__", {}).items()
                    if "AbstractVar" in str(hint)
                }
    return names


def test_capabilities_are_types_not_attributes_looked_for():
    """A capability of the package's abstractions (a scorer's QD offset, a repertoire's cells,
    an environment that renders, ...) is found by `isinstance` on its abstract type, never by
    `hasattr` / `getattr(x, name, default)` on one of their names (issue 69); and no function
    carries a protocol in an attribute (a check's listed choices are `jobs.checks.Choices`)."""
    asked = _abstract_names()
    assert {"qd_offset", "cell_of", "render_html"} <= asked
    found = []
    for name, text in _sources():
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                continue
            if node.func.id not in ("hasattr", "getattr") or len(node.args) < 2:
                continue
            looked = node.args[1]
            optional = node.func.id == "hasattr" or len(node.args) == 3
            if optional and isinstance(looked, ast.Constant) and looked.value in asked:
                found.append(f"{name}:{node.lineno} {node.func.id}(..., {looked.value!r})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Attribute) and t.attr == "known" for t in node.targets
            ):
                found.append(f"{name}:{node.lineno} a function attribute 'known'")
    assert found == []


def _library_modules() -> list[type]:
    """Every `eqx.Module` subclass the package defines (its modules imported)."""
    import pkgutil

    import equinox as eqx

    import eqx_qd

    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(eqx_qd.__path__, "eqx_qd."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, eqx.Module)
                and value.__module__.startswith("eqx_qd.")
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return list(found.values())


def _method(value):
    if isinstance(value, (staticmethod, classmethod)):
        return value.__func__
    if isinstance(value, property):
        return value.fget
    return value if callable(value) else None


def test_no_library_module_overrides_a_concrete_method():
    """Abstract-or-final (Equinox's pattern, `docs/design.md`): a library Module overrides only
    abstract methods; what varies between subclasses is abstract in the base or a capability
    type of its own (`AbstractRestartingEmitter`, `AbstractFitnessSelector`...)."""
    overrides = []
    classes = _library_modules()
    assert len(classes) > 100, len(classes)  # the walk found the package
    for cls in classes:
        for name, value in vars(cls).items():
            if name.startswith("__") or _method(value) is None:
                continue
            for base in cls.__mro__[1:]:
                if not base.__module__.startswith("eqx_qd.") or name not in vars(base):
                    continue
                inherited = _method(vars(base)[name])
                if inherited is not None and not getattr(inherited, "__isabstractmethod__", 0):
                    overrides.append(f"{cls.__qualname__}.{name} over {base.__qualname__}")
                break
    assert overrides == [], overrides


TOP_LEVEL = {
    ".ci", ".gitignore", "CHANGELOG.md", "README.md", "benchmarks", "conftest.py", "docs",
    "eqx_qd", "mkdocs.yml", "notebooks", "pyproject.toml", "tests",
}  # fmt: skip
"""What the repository's top level tracks: the design card's layout and the CI, docs and
benchmark folders; a run's or a report's output folder (`runs/`, `report/`) is not source."""


def test_the_top_level_tracks_only_the_repository_s_parts():
    import shutil
    import subprocess

    root = PACKAGE.parent
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(
        ["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    tracked = {path.split("/")[0] for path in listed}
    assert tracked <= TOP_LEVEL, sorted(tracked - TOP_LEVEL)
