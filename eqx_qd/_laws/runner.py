"""How a law is run: as a hypothesis property over drawn cases, one law at a time, the first
case that breaks it shrunk and raised as `LawBroken` naming the law and that case."""

import contextlib
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, HealthCheck, Phase, settings


ID_OFFSET = 1000  # stored ids are cell + 1000, so a cell index passed off as an id shows


@contextlib.contextmanager
def keep_python_random() -> Iterator[None]:
    """Runtime type checkers (beartype) sample containers with Python's `random`; hypothesis
    forbids strategies from moving that state, so restore it around module construction."""
    state = random.getstate()
    try:
        yield
    finally:
        random.setstate(state)


class LawBroken(AssertionError):
    """A law of an extension point that a class breaks: `law` is its name (one of
    `EMITTER_LAWS` or `REPERTOIRE_LAWS`), the message says what went wrong and gives the
    minimal case hypothesis found."""

    def __init__(self, law: str, message: str):
        super().__init__(f"law {law!r} broken: {message}")
        self.law = law


class Broken(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def leaves_with_paths(tree) -> list[tuple[str, Any]]:
    return [
        (jax.tree_util.keystr(p) or "genotypes", x)
        for p, x in jax.tree_util.tree_leaves_with_path(tree)
    ]


def leaf_shapes(tree) -> list[tuple[str, tuple[int, ...], str]]:
    """Each numeric leaf's path, shape and dtype (a constant a jitted function returned as a
    Python or NumPy scalar counts as the array `lax.scan` would make of it)."""
    out = []
    for path, x in jax.tree_util.tree_leaves_with_path(tree):
        if isinstance(x, np.generic | float | int) and not isinstance(x, bool):
            x = jnp.asarray(x)
        if eqx.is_array(x):
            out.append((jax.tree_util.keystr(path), tuple(int(d) for d in x.shape), str(x.dtype)))
    return out


def trees_close(a, b, *, rtol: float = 1e-4, atol: float = 1e-5) -> bool:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    if jax.tree.structure(a) != jax.tree.structure(b) or len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape:
            return False
        if np.issubdtype(x.dtype, np.inexact):
            if not np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True):
                return False
        elif not np.array_equal(x, y):
            return False
    return True


def _property(law, context, cases, max_examples: int) -> Callable[[], None]:
    """`law` as a hypothesis property over `cases` (deterministic draws, no database, one
    failure reported: the minimal one)."""

    @settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    )
    @given(case=cases)
    def run(case: Any) -> None:
        try:
            law(context(case))
        except Broken as e:
            raise Broken(f"{e.message} (case: {case.describe()})") from None
        except Exception as e:  # a crash under a law (or in init) breaks that law
            message = f"{type(e).__name__}: {e}".strip()
            raise Broken(f"{message} (case: {case.describe()})") from e

    return run


def _first_broken(error: BaseException) -> "Broken | None":
    if isinstance(error, Broken):
        return error
    if isinstance(error, BaseExceptionGroup):  # hypothesis' flaky or multiple failures
        for inner in error.exceptions:
            found = _first_broken(inner)
            if found is not None:
                return found
    return None


def _run_law(name: str, run: Callable[[], None]) -> None:
    """Run one law's property; a failure becomes `LawBroken` naming the law."""
    try:
        run()
    except BaseException as error:
        broken = _first_broken(error)
        if broken is None:
            raise
        raise LawBroken(name, broken.message) from broken.__cause__


def known_laws(
    where: str, table: dict, laws: Sequence[str] | None, default: list[str]
) -> list[str]:
    """The law names to run: `laws`, or `default`; an unknown name is refused."""
    names = default if laws is None else list(laws)
    unknown = sorted(set(names) - set(table))
    if unknown:
        raise ValueError(f"{where}: unknown laws {unknown}; the laws: {list(table)}")
    return names


def one_at_a_time(build: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`build(case)`, cached for the latest case only: the laws of one case share its
    context, and contexts do not pile up over a run."""
    cache: dict[Any, Any] = {}

    def context(case: Any) -> Any:
        if case not in cache:
            cache.clear()
            cache[case] = build(case)
        return cache[case]

    return context


def run_laws(table: dict, names: list[str], context, cases, max_examples: int) -> None:
    """Each named law of `table` as its own property, in order: the first broken raises."""
    for name in names:
        _run_law(name, _property(table[name], context, cases, max_examples))
