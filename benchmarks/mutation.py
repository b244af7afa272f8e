"""Mutation testing of the core modules: how many plausible one-line bugs the tests catch.

A measurement, not a CI gate. For each module, mutmut (2.5.x, installed apart:
``pip install mutmut==2.5.1``) plants one small change at a time in a clone of the repository
and runs that module's own test files; a mutant the tests fail on is *killed*, one they pass is
a *survivor*, to be read by hand (fix the tests, or judge it equivalent).

Scope: lines that carry no algorithm are marked ``# pragma: no mutate`` in the clone (raise
statements and their messages, ``check.*`` calls, decorators, signatures, annotated class
fields, docstrings, imports), so the count measures the algorithms, not message strings.

    python benchmarks/mutation.py                       # every module below, a few hours
    python benchmarks/mutation.py --only gae buffers    # some of them
    python benchmarks/mutation.py --report CLONE        # the counts of a finished clone

Each mutant costs one run of its test files (10-40 s here): ``--only`` keeps sessions short.
The runner maps every pytest failure to exit code 1: mutmut 2.5 counts only 1 as failing tests,
so a mutant that breaks the import (pytest exits with 2) would otherwise count as a survivor.
"""

import argparse
import ast
import os
import pathlib
import sqlite3
import subprocess
import sys
import tempfile


ROOT = pathlib.Path(__file__).resolve().parents[1]

# module -> the test files that exercise it
MODULES = {
    "gae": ("eqx_qd/rl/_gae.py", ["tests/rl/test_gae.py"]),
    "buffers": ("eqx_qd/rl/_buffers.py", ["tests/rl/test_buffers.py"]),
    "repertoire": ("eqx_qd/_repertoire.py", ["tests/core/test_repertoire.py"]),
    # (the grid's tests live beside the repertoire's)
    "tessellation": (
        "eqx_qd/_tessellation.py",
        ["tests/core/test_tessellation.py", "tests/core/test_repertoire.py"],
    ),
    "variation": ("eqx_qd/_variation.py", ["tests/core/test_operators.py"]),
    "td3": ("eqx_qd/rl/_td3.py", ["tests/rl/test_losses.py", "tests/rl/test_agents.py"]),
    "sac": ("eqx_qd/rl/_sac.py", ["tests/rl/test_losses.py", "tests/rl/test_agents.py"]),
    "ppo": ("eqx_qd/rl/_ippo.py", ["tests/rl/test_losses.py", "tests/rl/test_ppo.py"]),
    "pbt": ("eqx_qd/rl/_pbt.py", ["tests/rl/test_pbt.py"]),
    "pbt_emitter": ("eqx_qd/_qdrl/me_pbt.py", ["tests/qdrl/test_me_pbt.py"]),
    "quality_pg": ("eqx_qd/_qdrl/pga_me.py", ["tests/qdrl/test_quality_pg.py"]),
    "mixing": ("eqx_qd/_emitters/mixing.py", ["tests/core/test_map_elites.py"]),
    "composed": ("eqx_qd/_emitters/composed.py", ["tests/core/test_map_elites.py"]),
}
PRAGMA = "# pragma: no mutate"


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def lines_without_algorithm(source: str) -> set[int]:
    """1-based line numbers of ``source`` that carry no algorithm (see the module doc)."""
    marked: set[int] = set()

    def span(node: ast.AST) -> range:
        return range(node.lineno, (node.end_lineno or node.lineno) + 1)

    tree = ast.parse(source)
    if tree.body and _is_docstring(tree.body[0]):
        marked.update(span(tree.body[0]))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Raise, ast.Import, ast.ImportFrom)):
            marked.update(span(node))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "check"
        ):
            marked.update(span(node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for decorator in node.decorator_list:
                marked.update(span(decorator))
            marked.update(range(node.lineno, node.body[0].lineno))  # the signature
            if _is_docstring(node.body[0]):
                marked.update(span(node.body[0]))
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.AnnAssign):
                        marked.update(span(item))
    return marked


def mark(path: pathlib.Path) -> None:
    """Append the mutmut pragma to the lines of ``path`` that carry no algorithm."""
    source = path.read_text()
    marked = lines_without_algorithm(source)
    out = []
    for number, line in enumerate(source.split("\n"), 1):
        if number in marked and line.strip() and not line.rstrip().endswith("\\"):
            line += f"  {PRAGMA}"  # after a comment too: mutmut looks for the whole marker
        out.append(line)
    ast.parse("\n".join(out))  # still Python
    path.write_text("\n".join(out))


def report(clone: pathlib.Path) -> dict[str, dict[str, int]]:
    """Counts by module and status from a clone's mutmut cache."""
    db = sqlite3.connect(f"file:{clone / '.mutmut-cache'}?mode=ro", uri=True)
    rows = db.execute(
        "select s.filename, m.status, count(*) from Mutant m join Line l on m.line = l.id "
        "join SourceFile s on l.sourcefile = s.id group by s.filename, m.status"
    ).fetchall()
    counts: dict[str, dict[str, int]] = {}
    for filename, status, n in rows:
        counts.setdefault(filename, {})[status] = n
    for filename, by_status in sorted(counts.items()):
        tested = sum(n for s, n in by_status.items() if s != "untested")
        killed = by_status.get("ok_killed", 0)
        print(f"{filename}: {tested} mutants tested, {killed} killed, "
              f"{by_status.get('bad_survived', 0)} survived, "
              f"{by_status.get('bad_timeout', 0)} timed out, "
              f"{by_status.get('untested', 0)} untested")  # fmt: skip
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", choices=sorted(MODULES), default=sorted(MODULES))
    parser.add_argument("--mutmut", default="mutmut", help="the mutmut executable")
    parser.add_argument("--report", type=pathlib.Path, help="print the counts of a clone")
    parser.add_argument("--clone", type=pathlib.Path, help="where to clone (default: a tmp dir)")
    args = parser.parse_args()
    if args.report:
        report(args.report)
        return
    clone = args.clone or pathlib.Path(tempfile.mkdtemp(prefix="eqx_qd-mutation-"))
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    env = dict(os.environ, PYTHONPATH=str(clone), JAX_PLATFORMS="cpu",
               JAX_COMPILATION_CACHE_DIR=str(clone / ".jax-cache"),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0.2")  # fmt: skip
    for name in args.only:
        module, tests = MODULES[name]
        mark(clone / module)
        # mutmut 2.5 counts only exit code 1 as failing tests: a mutant that breaks the import
        # makes pytest exit with 2 and would be recorded as surviving. Map every failure to 1.
        pytest = f"{sys.executable} -m pytest -x -q -p no:cacheprovider -p no:randomly"
        runner = f"bash -c '{pytest} {' '.join(tests)} || exit 1'"
        print(f"== {name}: {module} against {' '.join(tests)}", flush=True)
        subprocess.run(
            [args.mutmut, "run", "--paths-to-mutate", module, "--tests-dir", "tests",
             "--runner", runner, "--test-time-base", "60", "--no-progress"],
            cwd=clone, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    report(clone)
    print(f"survivors: cd {clone} && {args.mutmut} results; {args.mutmut} show ID")


if __name__ == "__main__":
    main()
