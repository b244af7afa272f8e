"""The layer rules that `lint-imports` (pyproject.toml) cannot see: below the jobs nothing writes
files, prints or drives a progress bar; ``import eqx_qd`` stays light; the command never picks
the platform."""

import ast
import pathlib
import re
import subprocess
import sys

import pytest

import eqx_qd


PACKAGE = pathlib.Path(eqx_qd.__file__).parent
LIBRARY = sorted(
    p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] not in ("jobs", "cli.py")
)

# Calls that write files, print or show progress: (attribute or function name, why).
FORBIDDEN_CALLS = {
    "print": "prints",
    "savefig": "writes a file",
    "save": "writes a file (np.save)",
    "savez": "writes a file",
    "tree_serialise_leaves": "writes a file",
    "replace": None,  # os.replace only (str.replace is fine): checked below
    "rename": "writes a file",
    "remove": None,
    "makedirs": "creates folders",
    "mkdir": "creates folders",
    "mkstemp": "writes a file",
    "write_text": "writes a file",
    "write_bytes": "writes a file",
    "dump": "writes a file (json.dump)",
    "tqdm": "shows a progress bar",
}


def _in_memory_buffers(tree: ast.AST) -> set[str]:
    """Names the module assigns from `io.BytesIO()`: serialising into one writes no file."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Attribute) and func.attr == "BytesIO":
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _offences(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text())
    buffers = _in_memory_buffers(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            banned = ("tqdm", "shutil", "tempfile") + (
                () if path.name == "plotting.py" else ("matplotlib",)
            )
            if any(n.split(".")[0] in banned for n in names):
                out.append(f"{path.name}:{node.lineno} imports {names}")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        owner = (
            func.value.id
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
            else None
        )
        if name == "open":
            modes = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant)]
            modes += [k.value.value for k in node.keywords if k.arg == "mode"]
            if any(any(c in str(m) for c in "wax+") for m in modes):
                out.append(f"{path.name}:{node.lineno} opens a file to write")
        elif name in ("replace", "remove") and owner == "os":
            out.append(f"{path.name}:{node.lineno} os.{name}")
        elif name == "save" and owner not in ("np", "numpy", "jnp"):
            continue
        elif name == "tree_serialise_leaves" and any(
            isinstance(a, ast.Name) and a.id in buffers for a in node.args[:1]
        ):
            continue  # into an io.BytesIO: memory, not a file
        elif name in FORBIDDEN_CALLS and FORBIDDEN_CALLS[name] is not None:
            out.append(f"{path.name}:{node.lineno} {name}(...) {FORBIDDEN_CALLS[name]}")
    return out


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_nothing_below_the_jobs_writes_prints_or_shows_progress(path):
    assert _offences(path) == []


def test_the_offence_finder_finds_offences(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import os\nimport tqdm\nprint(1)\nopen('x', 'w')\nos.replace('a', 'b')\n"
        "import numpy as np\nnp.save('x', 1)\n'a'.replace('a', 'b')\nopen('x')\n"
        "import io, equinox as eqx\nb = io.BytesIO()\neqx.tree_serialise_leaves(b, 1)\n"
        "eqx.tree_serialise_leaves('f.eqx', 1)\n"
    )
    found = _offences(bad)
    # tqdm import, print, open(w), os.replace, np.save, the serialising into a file (not the
    # one into memory)
    assert len(found) == 6, found
    assert found[-1].startswith("bad.py:13 tree_serialise_leaves")


def test_import_eqx_qd_stays_light():
    code = (
        "import sys, eqx_qd, eqx_qd.internal\n"
        "heavy = [m for m in ('matplotlib', 'tqdm', 'brax', 'eqx_qd.jobs') if m in sys.modules]\n"
        "print(heavy)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


_WITHOUT_EXTRAS = """
import sys
for name in ("matplotlib", "tqdm", "brax", "hypothesis"):
    sys.modules[name] = None  # as on a machine where `pip install eqx_qd` put none of them
import jax.random as jr
import eqx_qd as q
from eqx_qd._extras import MissingExtra

task = q.Sphere(genotype_dim=3)
variation = q.IsoLineVariation(0.01, 0.1)
emitter = q.MixingEmitter(batch_size=8, variation_percentage=1.0, variation=variation)
algo = q.MAPElites(emitter, task, task.qd_offset)
cells = q.GridTessellation((4, 4), *task.descriptor_bounds)
state, _ = algo.init(task.init_genotypes(8, key=jr.key(0)), cells, key=jr.key(1))
state, history = q.run(algo, state, 3, key=jr.key(2))
print("core", int(history.coverage.shape[0]))
for use in ("import eqx_qd.jobs", "import eqx_qd.plotting", "import eqx_qd.testing",
            "q.envs.BraxQDEnv('walker2d_uni')"):
    try:
        exec(use)
    except MissingExtra as e:
        print(e.extra, "|", e)
from eqx_qd.cli import main
print("command", main(["list"]))
"""


@pytest.mark.slow  # the fast tier's budget; fast sibling: the import-layer contracts
def test_the_core_runs_without_the_extras_and_each_missing_extra_is_named():
    """`pip install eqx_qd` gives the QD core, the agents and the pure-JAX environments; each
    other part, used without its extra, says which extra to install (issue 69)."""
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRAS], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "core 3"
    assert [line.split(" | ")[0] for line in lines[1:5]] == ["jobs", "plot", "testing", "brax"]
    assert "pip install 'eqx_qd[jobs]'" in lines[1] and "needs tqdm, matplotlib" in lines[1]
    assert lines[4].startswith("brax | A brax task needs brax")
    assert lines[5] == "command 2"
    assert "eqx-qd: error: The eqx-qd command needs tqdm, matplotlib" in done.stderr


def test_the_hard_dependencies_are_the_core_s_and_every_extra_is_declared():
    import tomllib

    from eqx_qd._extras import EXTRAS

    project = tomllib.loads((pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text())[
        "project"
    ]
    names = [re.split(r"[<>=\[ ]", d)[0] for d in project["dependencies"]]
    assert names == ["jax", "equinox", "optax", "jaxtyping", "numpy"]
    extras = project["optional-dependencies"]
    assert set(EXTRAS) <= set(extras)
    every = extras["all"][0]
    assert all(name in every for name in set(extras) - {"all", "test", "docs"})


@pytest.mark.e2e
def test_the_command_leaves_jax_platforms_alone(tmp_path, monkeypatch, capsys):
    from eqx_qd.cli import main

    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    args = ["run", "map-elites", "--task", "sphere", "--genotype-dim", "3", "--grid", "--cells",
            "3", "--batch-size", "4", "--iterations", "2", "--log-every", "2", "--no-plots",
            "--no-progress", "--out", str(tmp_path / "run")]  # fmt: skip
    assert main(args) == 0
    import os

    assert "JAX_PLATFORMS" not in os.environ
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("eqx-qd: map-elites on ") and "device" in first
