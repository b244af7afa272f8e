"""What every pytest run in this repository shares (`tests/`, `benchmarks/tests/`, the
notebooks): the compile options of its programs, set before JAX starts.

The suite compiles thousands of small programs and runs most of them briefly, so most of its
time is XLA's compiler (`benchmarks/README.md`, "The test suite's time"). Two options cut it
by more than half: XLA's backend optimisation level 0 (its default is 3), and the CPU
backend's older fusion code generator (`xla_cpu_use_fusion_emitters=false`, which the
package's own programs ask for: `eqx_qd/_compile.py`). Values are those of the same
operations, up to float rounding; only the machine code differs. The processes the tests
launch inherit them (`tests/launched.py`); notebooks at a smoke size keep them, at full
length they get the user's own flags back (`notebooks/conftest.py`). `XLA_FLAGS` naming an
option keeps its choice: ``XLA_FLAGS=--xla_backend_optimization_level=3 pytest``.

Every process of a run (both xdist workers, the processes tests launch, the notebooks'
kernels) also shares JAX's persistent compilation cache: a program one of them compiled, the
others load instead of compiling it again (the two workers split a module's tests between
them, and both compiled its programs). The folder is `$EQX_QD_SUITE_XLA_CACHE` (`off`: no
cache), else `~/.cache/eqx_qd/xla-suite`; it lasts between runs, so a contributor's second
run of the fast tier compiles only what changed, and a folder grown past `SUITE_CACHE_BYTES`
is emptied at the start of a run. `.ci/run` gives a new empty folder (what a fresh machine
has). A cached program is the one XLA would compile for the same program, options and flags
(all in its key), so no test sees a difference; `$JAX_COMPILATION_CACHE_DIR` set by the user
is kept."""

import os
import shutil


SUITE_XLA_FLAGS = {"xla_backend_optimization_level": "0", "xla_cpu_use_fusion_emitters": "false"}
_user = os.environ.get("XLA_FLAGS", "")
_added = [f"--{k}={v}" for k, v in SUITE_XLA_FLAGS.items() if k not in _user]
if _added:
    os.environ["EQX_QD_USER_XLA_FLAGS"] = _user
    os.environ["XLA_FLAGS"] = " ".join([_user, *_added]).strip()


SUITE_CACHE_ENV = "EQX_QD_SUITE_XLA_CACHE"
SUITE_CACHE_BYTES = 2 * 1024**3


def _suite_cache() -> str | None:
    folder = os.environ.get(SUITE_CACHE_ENV)
    if folder is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        folder = os.path.join(base, "eqx_qd", "xla-suite")
    return None if folder.strip().lower() in ("", "off", "0", "none") else folder


def _size(folder: str) -> int:
    return sum(e.stat().st_size for e in os.scandir(folder) if e.is_file(follow_symlinks=False))


_cache = _suite_cache()
if _cache is not None and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    # Once per run, in the process that starts it (xdist's workers inherit what it set).
    if "PYTEST_XDIST_WORKER" not in os.environ and os.path.isdir(_cache):
        if _size(_cache) > SUITE_CACHE_BYTES:
            shutil.rmtree(_cache, ignore_errors=True)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
    # Every program, however quick its compile (JAX's defaults keep those over a second).
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"


HEAVY_MARKERS = ("e2e", "brax")
"""Markers of the tests that take the longest (launched processes, brax's compiles)."""


def _weight(item) -> int:
    """0 for a notebook or a test marked `HEAVY_MARKERS`, 1 for `slow`, 2 for the rest."""
    if getattr(item, "nbmake", False) or any(item.get_closest_marker(m) for m in HEAVY_MARKERS):
        return 0
    return 1 if item.get_closest_marker("slow") else 2


def pytest_collection_modifyitems(items):
    """The longest modules first (a module's weight: its heaviest test's), each module's tests
    kept together and in order (module fixtures are built once), so that the two workers
    end on many short tests rather than one waiting for the other's last notebook."""
    weight: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        weight[module] = min(weight.get(module, 2), _weight(item))
    first = {}
    for index, item in enumerate(items):
        first.setdefault(item.nodeid.split("::")[0], index)
    items.sort(key=lambda item: (weight[m := item.nodeid.split("::")[0]], first[m]))
