"""The laws an emitter and a repertoire must keep, run as hypothesis properties on any
`AbstractEmitter` (`eqx_qd.testing.check_emitter`) or `AbstractRepertoire`
(`check_repertoire`).

Each law is a function of one drawn case (a repertoire over a small grid, some cells filled
with members of the user's population under drawn fitnesses, and a seed) that raises
`_Broken` when the emitter breaks it. Hypothesis looks for a case that breaks it and shrinks
it; `check_emitter` then raises `LawBroken` naming the law and that minimal case. Every law
runs under `jit` on fixed shapes, so each compiles once per emitter.
"""

import contextlib
import dataclasses
import io
import random
import typing
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from hypothesis import given, HealthCheck, Phase, settings

from ._custom_types import Genotypes, PRNGKey
from ._emitters.base import AbstractEmitter, Lineage, Origin
from ._misc import batch_size_of, tree_take
from ._repertoire import AbstractRepertoire, MapElitesRepertoire
from ._tessellation import AbstractTessellation, GridTessellation


ScoringFn = Callable[..., tuple[jax.Array, jax.Array, Any]]

_ID_OFFSET = 1000  # stored ids are cell + 1000, so a cell index passed off as an id shows


@contextlib.contextmanager
def _keep_python_random() -> Iterator[None]:
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


class _Broken(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@dataclasses.dataclass(frozen=True)
class _Case:
    """One drawn case: which cells hold an elite, their fitnesses, which member of the
    population each holds, and the seed of every key."""

    filled: tuple[bool, ...]
    fitnesses: tuple[float, ...]
    members: tuple[int, ...]
    seed: int

    def describe(self) -> str:
        cells = [i for i, f in enumerate(self.filled) if f]
        pairs = ", ".join(f"{i}: {self.fitnesses[i]:g} (member {self.members[i]})" for i in cells)
        return f"filled cells {{{pairs}}}, seed {self.seed}"


class _Harness(eqx.Module):
    """The emitter, its population and scoring, and the jitted steps the laws call."""

    emitter: AbstractEmitter
    population: Genotypes
    tessellation: AbstractTessellation
    scoring_fn: ScoringFn | None = eqx.field(static=True)

    def repertoire(self, filled, fitnesses, members) -> MapElitesRepertoire:
        n = self.tessellation.num_cells
        ids = jnp.arange(n, dtype=jnp.int32) + _ID_OFFSET
        return MapElitesRepertoire(
            genotypes=tree_take(self.population, members),
            fitnesses=jnp.where(filled, fitnesses, -jnp.inf),
            descriptors=self.tessellation.centroids,
            tessellation=self.tessellation,
            extra=ids,
        )

    def score(self, genotypes: Genotypes, *, key: PRNGKey):
        if self.scoring_fn is not None:
            return self.scoring_fn(genotypes, key=key)
        n = batch_size_of(genotypes)
        low, high = self.tessellation.extent
        fit_key, desc_key = jr.split(key)
        fitnesses = jr.uniform(fit_key, (n,), minval=-1.0, maxval=1.0)
        descriptors = jr.uniform(
            desc_key, (n, low.shape[0]), minval=low, maxval=high, dtype=jnp.float32
        )
        return fitnesses, descriptors, None

    def init(self, repertoire: AbstractRepertoire, *, key: PRNGKey):
        score_key, init_key = jr.split(key)
        fitnesses, descriptors, extra = self.score(self.population, key=score_key)
        return self.emitter.init(
            repertoire, self.population, descriptors, fitnesses, extra, key=init_key
        )

    def step(self, repertoire: AbstractRepertoire, state, *, key: PRNGKey):
        """emit, score, insert (ids continue past the stored ones), state_update."""
        emit_key, score_key, update_key = jr.split(key, 3)
        genotypes, _ = self.emitter.emit(repertoire, state, key=emit_key)
        fitnesses, descriptors, extra = self.score(genotypes, key=score_key)
        ids = jnp.arange(fitnesses.shape[0], dtype=jnp.int32) + 2 * _ID_OFFSET
        repertoire, info = repertoire.add(genotypes, descriptors, fitnesses, ids)
        state = self.emitter.state_update(
            state,
            repertoire,
            genotypes,
            descriptors,
            fitnesses,
            extra,
            add_info=info,
            key=update_key,
        )
        return repertoire, state


@eqx.filter_jit
def _setup(h: _Harness, filled, fitnesses, members, key):
    repertoire = h.repertoire(filled, fitnesses, members)
    return repertoire, h.init(repertoire, key=key)


@eqx.filter_jit
def _emit(h: _Harness, repertoire, state, key):
    return h.emitter.emit(repertoire, state, key=key)


@eqx.filter_jit
def _emit_vmapped(h: _Harness, repertoire, state, keys):
    return jax.vmap(lambda k: h.emitter.emit(repertoire, state, key=k))(keys)


@eqx.filter_jit
def _step(h: _Harness, repertoire, state, key):
    return h.step(repertoire, state, key=key)


@eqx.filter_jit
def _scan(h: _Harness, repertoire, state, keys):
    def body(carry, key):
        return h.step(*carry, key=key), None

    return jax.lax.scan(body, (repertoire, state), keys)[0]


def _leaves_with_paths(tree) -> list[tuple[str, Any]]:
    return [
        (jax.tree_util.keystr(p) or "genotypes", x)
        for p, x in jax.tree_util.tree_leaves_with_path(tree)
    ]


def _shapes(tree) -> list[tuple[str, tuple[int, ...], str]]:
    """Each numeric leaf's path, shape and dtype (a constant a jitted function returned as a
    Python or NumPy scalar counts as the array `lax.scan` would make of it)."""
    out = []
    for path, x in jax.tree_util.tree_leaves_with_path(tree):
        if isinstance(x, np.generic | float | int) and not isinstance(x, bool):
            x = jnp.asarray(x)
        if eqx.is_array(x):
            out.append((jax.tree_util.keystr(path), tuple(int(d) for d in x.shape), str(x.dtype)))
    return out


def _close(a, b, *, rtol: float = 1e-4, atol: float = 1e-5) -> bool:
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


class _Context:
    """What every law of one `check_emitter` call shares: the harness and the case's
    repertoire and state, built once per case."""

    def __init__(self, harness: _Harness, case: _Case):
        self.h = harness
        self.case = case
        self.key = jr.key(case.seed)
        setup_key, self.emit_key, self.step_key = jr.split(self.key, 3)
        filled = jnp.asarray(case.filled)
        fitnesses = jnp.asarray(case.fitnesses, jnp.float32)
        members = jnp.asarray(case.members, jnp.int32)
        self.repertoire, self.state = _setup(harness, filled, fitnesses, members, setup_key)

    def emit(self):
        return _emit(self.h, self.repertoire, self.state, self.emit_key)


def _law_batch(ctx: _Context) -> None:
    """`emit` gives `batch_size` candidates shaped, leaf by leaf, like the stored genotypes'
    rows (same structure, row shapes and dtypes)."""
    genotypes, _ = ctx.emit()
    stored = ctx.repertoire.genotypes
    want_n = ctx.h.emitter.batch_size
    if jax.tree.structure(genotypes) != jax.tree.structure(stored):
        raise _Broken(
            f"emit returned genotypes structured as {jax.tree.structure(genotypes)}, the "
            f"repertoire stores {jax.tree.structure(stored)}"
        )
    for (path, got), (_, row) in zip(_leaves_with_paths(genotypes), _leaves_with_paths(stored)):
        want = (want_n, *row.shape[1:])
        if got.shape != want or got.dtype != row.dtype:
            raise _Broken(
                f"emit's {path} has shape {got.shape} and dtype {got.dtype}; batch_size = "
                f"{want_n} candidates shaped like the stored rows need {want} and {row.dtype}"
            )


def _law_finite(ctx: _Context) -> None:
    """From a repertoire of finite genotypes, `emit` gives finite genotypes."""
    genotypes, _ = ctx.emit()
    for path, x in _leaves_with_paths(genotypes):
        x = np.asarray(x)
        if np.issubdtype(x.dtype, np.inexact) and not np.isfinite(x).all():
            bad = int(np.sum(~np.isfinite(x)))
            raise _Broken(f"emit's {path} holds {bad} non-finite values")


def _law_same_key(ctx: _Context) -> None:
    """The same key gives the same batch, bit for bit, and a batch drawn under `vmap` over
    keys equals the one drawn alone for each key."""
    first, second = ctx.emit(), ctx.emit()
    if not eqx.tree_equal(first, second):
        raise _Broken("two calls of emit with one key returned different batches")
    keys = jr.split(ctx.emit_key, 2)
    batched = _emit_vmapped(ctx.h, ctx.repertoire, ctx.state, keys)
    for i in range(2):
        alone = _emit(ctx.h, ctx.repertoire, ctx.state, keys[i])
        if not _close(tree_take(batched, i), alone):
            raise _Broken(f"emit under vmap over keys differs from emit alone for key {i}")


def _law_state(ctx: _Context) -> None:
    """`state_update` keeps the state's structure, shapes and dtypes, so that `lax.scan` can
    carry it: one update, and two iterations inside a `lax.scan`, give a state shaped like
    `init`'s. (The scan is not asked to equal the loop: XLA may compile the two differently,
    and an eigendecomposition, as CMA-ES's, may then pick another basis of a repeated
    eigenvalue.)"""
    _, state = _step(ctx.h, ctx.repertoire, ctx.state, ctx.step_key)
    before = _shapes(ctx.state)
    if jax.tree.structure(ctx.state) != jax.tree.structure(state) or before != _shapes(state):
        raise _Broken(
            f"state_update changed the state from {before} (init's) to {_shapes(state)}: a "
            "state must keep its structure, shapes and dtypes"
        )
    keys = jr.split(jr.fold_in(ctx.step_key, 1), 2)
    _, scanned = _scan(ctx.h, ctx.repertoire, ctx.state, keys)
    if _shapes(scanned) != before:
        raise _Broken(f"two iterations in lax.scan gave a state shaped {_shapes(scanned)}")


def _law_lineage(ctx: _Context) -> None:
    """A `Lineage` extra has one int32 entry per candidate, kinds that are `Origin` values,
    parents that are `-1` or ids the repertoire stores (of filled cells), and a stored first
    parent for every `EVO` child."""
    _, extra = ctx.emit()
    if not isinstance(extra, Lineage):
        return
    n = ctx.h.emitter.batch_size
    for name in ("parent1", "parent2", "kind"):
        x = getattr(extra, name)
        if x.shape != (n,) or x.dtype != jnp.int32:
            raise _Broken(
                f"Lineage.{name} has shape {x.shape} and dtype {x.dtype}, not ({n},) int32"
            )
    kinds = set(np.asarray(extra.kind).tolist())
    unknown = kinds - {int(o) for o in Origin}
    if unknown:
        raise _Broken(f"Lineage.kind holds {sorted(unknown)}, which are not Origin values")
    stored = {i + _ID_OFFSET for i, f in enumerate(ctx.case.filled) if f}
    for name in ("parent1", "parent2"):
        parents = set(np.asarray(getattr(extra, name)).tolist()) - {-1}
        if parents - stored:
            raise _Broken(
                f"Lineage.{name} names {sorted(parents - stored)[:5]}, which are not ids of "
                f"stored elites (those are {sorted(stored)[:5]}...; -1 for none)"
            )
    evo = np.asarray(extra.kind) == int(Origin.EVO)
    if np.any(np.asarray(extra.parent1)[evo] == -1):
        raise _Broken("an EVO child has no first parent (-1) though the repertoire stores ids")


EMITTER_LAWS: dict[str, Callable[[_Context], None]] = {
    "batch": _law_batch,
    "finite": _law_finite,
    "same_key": _law_same_key,
    "state": _law_state,
    "lineage": _law_lineage,
}
"""The laws `check_emitter` runs, by name (each function's docstring states its law)."""


@st.composite
@typing.no_type_check  # a runtime type checker samples with `random`, which strategies must not
def _cases(draw, num_cells: int, population: int) -> _Case:
    filled = draw(st.lists(st.booleans(), min_size=num_cells, max_size=num_cells))
    if not any(filled):
        filled[draw(st.integers(0, num_cells - 1))] = True
    fitness = st.floats(-100.0, 100.0, width=32, allow_nan=False, allow_infinity=False)
    fitnesses = draw(st.lists(fitness, min_size=num_cells, max_size=num_cells))
    members = draw(st.lists(st.integers(0, population - 1), min_size=num_cells, max_size=num_cells))
    seed = draw(st.integers(0, 2**31 - 1))
    with _keep_python_random():
        return _Case(tuple(filled), tuple(fitnesses), tuple(members), seed)


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
        except _Broken as e:
            raise _Broken(f"{e.message} (case: {case.describe()})") from None
        except Exception as e:  # a crash under a law (or in init) breaks that law
            message = f"{type(e).__name__}: {e}".strip()
            raise _Broken(f"{message} (case: {case.describe()})") from e

    return run


def _first_broken(error: BaseException) -> "_Broken | None":
    if isinstance(error, _Broken):
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


def _known(where: str, table: dict, laws: Sequence[str] | None, default: list[str]) -> list[str]:
    """The law names to run: `laws`, or `default`; an unknown name is refused."""
    names = default if laws is None else list(laws)
    unknown = sorted(set(names) - set(table))
    if unknown:
        raise ValueError(f"{where}: unknown laws {unknown}; the laws: {list(table)}")
    return names


def _one_at_a_time(build: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`build(case)`, cached for the latest case only: the laws of one case share its
    context, and contexts do not pile up over a run."""
    cache: dict[Any, Any] = {}

    def context(case: Any) -> Any:
        if case not in cache:
            cache.clear()
            cache[case] = build(case)
        return cache[case]

    return context


def _run_laws(table: dict, names: list[str], context, cases, max_examples: int) -> None:
    """Each named law of `table` as its own property, in order: the first broken raises."""
    for name in names:
        _run_law(name, _property(table[name], context, cases, max_examples))


def check_emitter(
    emitter: AbstractEmitter,
    population: Genotypes,
    *,
    tessellation: AbstractTessellation | None = None,
    scoring_fn: ScoringFn | None = None,
    laws: Sequence[str] | None = None,
    max_examples: int = 10,
) -> None:
    """Run `emitter` through every law of `EMITTER_LAWS` (or those named in `laws`) on
    repertoires hypothesis draws, and raise `LawBroken` naming the first law broken with the
    minimal case found.

    **Arguments:**

    - `emitter`: any `AbstractEmitter`.
    - `population`: genotypes (a pytree with a leading axis) the drawn repertoires' cells are
      filled from, and the initial population `init` sees.
    - `tessellation`: the cells (default: a 4 x 4 grid over the unit square).
    - `scoring_fn`: `scoring_fn(genotypes, *, key) -> (fitnesses, descriptors, extra)`, for
      emitters that need their task's extra (gradients, transitions); by default candidates
      get random fitnesses and descriptors and no extra.
    - `laws`: a subset of the law names.
    - `max_examples`: cases hypothesis tries per law (drawn deterministically, so a run
      repeats).

    Every law runs jitted on fixed shapes: a law compiles once per emitter.
    """
    if not isinstance(emitter, AbstractEmitter):
        raise TypeError(
            "check_emitter: emitter must be an eqx_qd.AbstractEmitter, got "
            f"{type(emitter).__name__}"
        )
    tessellation = GridTessellation((4, 4), 0.0, 1.0) if tessellation is None else tessellation
    names = _known("check_emitter", EMITTER_LAWS, laws, list(EMITTER_LAWS))
    harness = _Harness(emitter, population, tessellation, scoring_fn)
    cases = _cases(tessellation.num_cells, batch_size_of(population))
    context = _one_at_a_time(lambda case: _Context(harness, case))
    _run_laws(EMITTER_LAWS, names, context, cases, max_examples)


# ------------------------------------------------------------------------------ repertoires


@dataclasses.dataclass(frozen=True)
class _Offer:
    """One drawn batch: fitnesses, descriptors in units of the repertoire's extent (0 and 1
    its bounds; NaN and infinities included) and the seed of its genotypes."""

    fitnesses: tuple[float, ...]
    descriptors: tuple[tuple[float, ...], ...]
    seed: int


@dataclasses.dataclass(frozen=True)
class _RepertoireCase:
    first: _Offer
    second: _Offer
    seed: int  # the permutation of the order law and the key of select

    def describe(self) -> str:
        def one(o: _Offer) -> str:
            pairs = ", ".join(
                f"{f:g} at ({', '.join(f'{x:g}' for x in d)})"
                for f, d in zip(o.fitnesses, o.descriptors)
            )
            return f"[{pairs}]"

        return f"first batch {one(self.first)}, second batch {one(self.second)}, seed {self.seed}"


@st.composite
@typing.no_type_check  # see _cases
def _repertoire_cases(draw, batch_size: int, num_descriptors: int) -> _RepertoireCase:
    fitness = st.one_of(
        st.floats(-100.0, 100.0, width=32),
        st.floats(-100.0, 100.0, width=32),
        st.sampled_from([0.0, 1.0, np.nan, np.inf, -np.inf]),
    )
    unit = st.one_of(
        st.floats(-0.25, 1.25, width=32), st.sampled_from([0.0, 0.5, 1.0, np.nan, np.inf])
    )

    def offer() -> _Offer:
        fitnesses = draw(st.lists(fitness, min_size=batch_size, max_size=batch_size))
        row = st.tuples(*[unit] * num_descriptors)
        descriptors = draw(st.lists(row, min_size=batch_size, max_size=batch_size))
        seed = draw(st.integers(0, 2**31 - 1))
        with _keep_python_random():
            return _Offer(tuple(fitnesses), tuple(descriptors), seed)

    first, second, seed = offer(), offer(), draw(st.integers(0, 2**31 - 1))
    with _keep_python_random():
        return _RepertoireCase(first, second, seed)


@eqx.filter_jit
def _add(repertoire: AbstractRepertoire, genotypes, descriptors, fitnesses, extra):
    return repertoire.add(genotypes, descriptors, fitnesses, extra)


@eqx.filter_jit
def _select(repertoire: AbstractRepertoire, num: int, key: PRNGKey):
    return repertoire.select(num, key=key)


class _Candidates(typing.NamedTuple):
    genotypes: Any
    descriptors: np.ndarray
    fitnesses: np.ndarray
    extra: Any

    def valid(self) -> np.ndarray:
        return np.isfinite(self.fitnesses) & np.isfinite(self.descriptors).all(axis=-1)

    def permuted(self, order: np.ndarray) -> "_Candidates":
        return jax.tree.map(lambda x: np.asarray(x)[order], self)


class _RepertoireContext:
    """A case's two batches and the repertoire before, after the first and after the
    second (`add` jitted)."""

    def __init__(self, start: AbstractRepertoire, case: _RepertoireCase, batch_size: int):
        self.case, self.start = case, start
        low, high = (np.asarray(b, np.float32) for b in start.extent)
        self.offers = []
        for i, offer in enumerate((case.first, case.second)):
            rng = np.random.default_rng(offer.seed)
            genotypes = jax.tree.map(lambda row: _draw_rows(rng, row, batch_size), start.genotypes)
            unit = np.asarray(offer.descriptors, np.float32).reshape(batch_size, -1)
            with np.errstate(invalid="ignore", over="ignore"):
                descriptors = (low + unit * (high - low)).astype(np.float32)
            extra = None
            if start.extra is not None:
                extra = jax.tree.map(
                    lambda row: _ids(row, batch_size, offset=(i + 1) * _ID_OFFSET), start.extra
                )
            fitnesses = np.asarray(offer.fitnesses, np.float32)
            self.offers.append(_Candidates(genotypes, descriptors, fitnesses, extra))
        self.after_first = self.add(start, self.offers[0])[0]
        self.after_second = self.add(self.after_first, self.offers[1])[0]

    @staticmethod
    def add(repertoire: AbstractRepertoire, c: _Candidates):
        return _add(repertoire, c.genotypes, c.descriptors, c.fitnesses, c.extra)


def _draw_rows(rng: np.random.Generator, stored, batch_size: int) -> np.ndarray:
    stored = np.asarray(stored)
    shape = (batch_size, *stored.shape[1:])
    if np.issubdtype(stored.dtype, np.floating):
        return rng.normal(size=shape).astype(stored.dtype)
    return rng.integers(-5, 5, size=shape).astype(stored.dtype)


def _ids(stored, batch_size: int, *, offset: int) -> np.ndarray:
    stored = np.asarray(stored)
    ids = np.arange(batch_size) + offset
    return np.broadcast_to(
        ids.reshape(-1, *[1] * (stored.ndim - 1)), (batch_size, *stored.shape[1:])
    ).astype(stored.dtype)


def _rows(genotypes, fitnesses, descriptors, idx) -> list[tuple[int, bytes]]:
    """Rows `idx` as (index, the row's fitness, descriptor and genotype leaves as bytes): an
    elite or a candidate as one comparable value."""
    fit, desc = np.asarray(fitnesses), np.asarray(descriptors)
    leaves = [np.asarray(x) for x in jax.tree.leaves(genotypes)]
    return [
        (int(i), fit[i].tobytes() + desc[i].tobytes() + b"".join(g[i].tobytes() for g in leaves))
        for i in idx
    ]


def _slots(repertoire: AbstractRepertoire) -> list[tuple[int, bytes]]:
    """Each filled slot as (slot, its elite as bytes)."""
    filled = np.flatnonzero(np.asarray(repertoire.filled))
    return _rows(repertoire.genotypes, repertoire.fitnesses, repertoire.descriptors, filled)


def _candidate_rows(c: _Candidates) -> set[bytes]:
    """The valid candidates of a batch, each as bytes (as `_slots` writes an elite)."""
    valid = np.flatnonzero(c.valid())
    return {row for _, row in _rows(c.genotypes, c.fitnesses, c.descriptors, valid)}


def _law_rep_finite(ctx: _RepertoireContext) -> None:
    """Nothing non-finite is stored: a slot's fitness is finite (an elite) or `-inf` (empty),
    and an elite's descriptor is finite, whatever the batches offered (NaN, infinities)."""
    for name, rep in (("first", ctx.after_first), ("second", ctx.after_second)):
        fit = np.asarray(rep.fitnesses)
        bad = ~(np.isfinite(fit) | np.isneginf(fit))
        if bad.any():
            raise _Broken(
                f"after the {name} batch, slots {np.flatnonzero(bad)[:5].tolist()} "
                f"hold fitness {fit[bad][:5].tolist()}"
            )
        desc = np.asarray(rep.descriptors)[np.isfinite(fit)]
        if desc.size and not np.isfinite(desc).all():
            raise _Broken(f"after the {name} batch, an elite holds a non-finite descriptor")


def _law_rep_from_candidates(ctx: _RepertoireContext) -> None:
    """Every elite is one that was stored or offered (finite): its fitness, descriptor and
    genotype row together, never a mix."""
    known = {row for _, row in _slots(ctx.start)}
    for c in ctx.offers:
        known |= _candidate_rows(c)
    for slot, row in _slots(ctx.after_second):
        if row not in known:
            raise _Broken(f"slot {slot} holds an elite that was neither stored nor offered")


def _qd_score(rep: AbstractRepertoire, floor: float) -> float:
    fit = np.asarray(rep.fitnesses, np.float64)
    return float(np.sum(np.where(np.isfinite(fit), fit - floor, 0.0)))


def _law_rep_elitist(ctx: _RepertoireContext) -> None:
    """(Elitist repertoires.) The QD-score (every elite's fitness above one floor below all
    fitnesses seen) never decreases when a batch is added."""
    seen = [np.asarray(ctx.start.fitnesses)] + [c.fitnesses for c in ctx.offers]
    values = np.concatenate(seen).astype(np.float64)
    finite = values[np.isfinite(values)]
    floor = (finite.min() if finite.size else 0.0) - 1.0
    scores = [_qd_score(r, floor) for r in (ctx.start, ctx.after_first, ctx.after_second)]
    if not scores[0] <= scores[1] <= scores[2]:
        raise _Broken(f"the QD-score went {scores[0]:g} -> {scores[1]:g} -> {scores[2]:g}")


def _reference_add(rep: AbstractRepertoire, c: _Candidates):
    """The elitist rule written out: candidate by candidate in batch order, a valid one
    replaces its cell's elite when strictly fitter (so the batch's best wins its cell, the
    lowest index among ties, and only when it beats the elite)."""
    fit = np.asarray(rep.fitnesses).copy()
    desc = np.asarray(rep.descriptors).copy()
    rows = [np.asarray(x).copy() for x in jax.tree.leaves(rep.genotypes)]
    offered = [np.asarray(x) for x in jax.tree.leaves(c.genotypes)]
    cells = np.asarray(rep.cell_of(jnp.where(c.valid()[:, None], c.descriptors, 0.0)))
    for i in np.flatnonzero(c.valid()):
        cell = cells[i]
        if c.fitnesses[i] > fit[cell]:
            fit[cell], desc[cell] = c.fitnesses[i], c.descriptors[i]
            for r, o in zip(rows, offered):
                r[cell] = o[i]
    return fit, desc, rows


def _law_rep_reference(ctx: _RepertoireContext) -> None:
    """(Elitist repertoires with cells, `cell_of`.) `add` equals the elitist rule written out
    candidate by candidate (`_reference_add`), slot by slot, bit for bit."""
    for name, before, c, after in (
        ("first", ctx.start, ctx.offers[0], ctx.after_first),
        ("second", ctx.after_first, ctx.offers[1], ctx.after_second),
    ):
        fit, desc, rows = _reference_add(before, c)
        got = np.asarray(after.fitnesses)
        if not np.array_equal(fit, got):
            slots = np.flatnonzero(fit != got)[:5].tolist()
            raise _Broken(
                f"after the {name} batch, slots {slots} hold {got[slots].tolist()}; "
                f"the rule gives {fit[slots].tolist()}"
            )
        filled = np.isfinite(fit)
        same = np.array_equal(desc[filled], np.asarray(after.descriptors)[filled]) and all(
            np.array_equal(r[filled], np.asarray(x)[filled])
            for r, x in zip(rows, jax.tree.leaves(after.genotypes))
        )
        if not same:
            raise _Broken(
                f"after the {name} batch, an elite's descriptor or genotype is not the "
                "rule's (the fittest candidate of its cell, the first among ties)"
            )


def _law_rep_order(ctx: _RepertoireContext) -> None:
    """(Repertoires with cells, `cell_of`.) The order of a batch does not matter when no two
    valid candidates of one cell tie: the batch added in another order stores the same
    elites in the same slots."""
    c = ctx.offers[1]
    valid = c.valid()
    cells = np.asarray(ctx.after_first.cell_of(jnp.where(valid[:, None], c.descriptors, 0.0)))
    pairs = [(cells[i], c.fitnesses[i]) for i in np.flatnonzero(valid)]
    if len(set(pairs)) < len(pairs):
        return  # a tie in a cell: the lowest index wins, which the order decides
    order = np.random.default_rng(ctx.case.seed).permutation(len(c.fitnesses))
    permuted = ctx.add(ctx.after_first, c.permuted(order))[0]
    if _slots(permuted) != _slots(ctx.after_second):
        raise _Broken(f"the second batch in the order {order.tolist()} stores other elites")


def _law_rep_select(ctx: _RepertoireContext) -> None:
    """`select` returns stored elites only: each drawn elite is the filled slot it names in
    `cells`, its genotype, fitness and descriptor."""
    rep = ctx.after_second
    if not bool(np.asarray(rep.filled).any()):
        return
    elites = _select(rep, 8, jr.key(ctx.case.seed))
    cells = np.asarray(elites.cells)
    filled = np.asarray(rep.filled)
    if not filled[cells].all():
        raise _Broken(f"select drew empty slots {cells[~filled[cells]].tolist()}")
    stored = jax.tree.map(
        lambda x: np.asarray(x)[cells], (rep.genotypes, rep.fitnesses, rep.descriptors)
    )
    drawn = (elites.genotypes, elites.fitnesses, elites.descriptors)
    if not all(
        np.array_equal(a, np.asarray(b))
        for a, b in zip(jax.tree.leaves(stored), jax.tree.leaves(drawn))
    ):
        raise _Broken("select returned elites that differ from the slots it names")


def _law_rep_checkpoint(ctx: _RepertoireContext) -> None:
    """A repertoire saved with `eqx.tree_serialise_leaves` and loaded into the repertoire it
    started from (what a resumed job has: an empty one with the same settings) is the same,
    bit for bit, static fields included."""
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, ctx.after_second)
    buffer.seek(0)
    try:
        loaded = eqx.tree_deserialise_leaves(buffer, ctx.start)
    except Exception as e:  # noqa: BLE001 - a load that fails breaks the law
        raise _Broken(f"loading the saved repertoire failed: {type(e).__name__}: {e}") from e
    if jax.tree.structure(loaded) != jax.tree.structure(ctx.after_second):
        raise _Broken(
            "the loaded repertoire's structure (static fields) differs from the saved one"
        )
    if not bool(eqx.tree_equal(loaded, ctx.after_second)):
        raise _Broken("the loaded repertoire's arrays differ from the saved one's")


REPERTOIRE_LAWS: dict[str, Callable[[_RepertoireContext], None]] = {
    "finite": _law_rep_finite,
    "from_candidates": _law_rep_from_candidates,
    "elitist": _law_rep_elitist,
    "reference": _law_rep_reference,
    "order": _law_rep_order,
    "select": _law_rep_select,
    "checkpoint": _law_rep_checkpoint,
}
"""The laws `check_repertoire` runs, by name (each function's docstring states its law);
`elitist` and `reference` apply to elitist repertoires, `reference` and `order` to those
with cells (a `cell_of` method)."""


def check_repertoire(
    repertoire: AbstractRepertoire,
    *,
    batch_size: int = 6,
    elitist: bool | None = None,
    laws: Sequence[str] | None = None,
    max_examples: int = 20,
) -> None:
    """Run every law of `REPERTOIRE_LAWS` that applies (or those named in `laws`) on
    `repertoire`, offering it two drawn batches, and raise `LawBroken` naming the first law
    broken with the minimal case found.

    **Arguments:**

    - `repertoire`: the repertoire to start from (usually empty: `MapElitesRepertoire.empty`,
      your class's constructor); the batches' genotypes are shaped like its rows, their
      descriptors drawn around its `extent` (NaN and infinities included).
    - `batch_size`: candidates per batch.
    - `elitist`: whether `add` keeps, per cell or slot, only strictly fitter candidates, so
      that the `elitist` and `reference` laws apply. `None`: a `MapElitesRepertoire` without
      annealing is elitist; other repertoires are not.
    - `laws`: a subset of the law names (a law that does not apply is refused).
    - `max_examples`: cases hypothesis tries per law (drawn the same way every run).
    """
    if not isinstance(repertoire, AbstractRepertoire):
        raise TypeError(
            "check_repertoire: repertoire must be an eqx_qd.AbstractRepertoire, got "
            f"{type(repertoire).__name__}"
        )
    if elitist is None:
        elitist = isinstance(repertoire, MapElitesRepertoire) and repertoire.annealing is None
    cells = callable(getattr(repertoire, "cell_of", None))
    applies = {
        "elitist": elitist,
        "reference": elitist and cells,
        "order": cells,
    }
    default = [n for n in REPERTOIRE_LAWS if applies.get(n, True)]
    names = _known("check_repertoire", REPERTOIRE_LAWS, laws, default)
    refused = [n for n in names if not applies.get(n, True)]
    if refused:
        raise ValueError(
            f"check_repertoire: {refused} do not apply to this repertoire (elitist={elitist}, "
            f"cell_of: {cells})"
        )
    cases = _repertoire_cases(batch_size, repertoire.num_descriptors)
    context = _one_at_a_time(lambda case: _RepertoireContext(repertoire, case, batch_size))
    _run_laws(REPERTOIRE_LAWS, names, context, cases, max_examples)
