"""The laws an emitter keeps (`check_emitter`), on any `AbstractEmitter`: each a function of one
drawn case (a repertoire over a small grid, some cells filled with members of the user's
population under drawn fitnesses, and a seed) that raises `Broken` when the emitter breaks it.
Every law runs under `jit` on fixed shapes, so each compiles once per emitter."""

import dataclasses
import typing
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._custom_types import Genotypes, PRNGKey
from .._emitters.base import AbstractEmitter, Lineage, Origin
from .._misc import batch_size_of, tree_take
from .._repertoire import AbstractRepertoire, MAPElitesRepertoire
from .._tessellation import AbstractTessellation, GridTessellation
from .runner import (
    Broken,
    ID_OFFSET,
    keep_python_random,
    known_laws,
    leaf_shapes,
    leaves_with_paths,
    one_at_a_time,
    run_laws,
    trees_close,
)


ScoringFn = Callable[..., tuple[jax.Array, jax.Array, Any]]


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
    scoring_fn: ScoringFn | None  # a scorer with array fields (noise levels) is traced

    def repertoire(self, filled, fitnesses, members) -> MAPElitesRepertoire:
        n = self.tessellation.num_cells
        ids = jnp.arange(n, dtype=jnp.int32) + ID_OFFSET
        return MAPElitesRepertoire(
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
        ids = jnp.arange(fitnesses.shape[0], dtype=jnp.int32) + 2 * ID_OFFSET
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
        raise Broken(
            f"emit returned genotypes structured as {jax.tree.structure(genotypes)}, the "
            f"repertoire stores {jax.tree.structure(stored)}"
        )
    for (path, got), (_, row) in zip(leaves_with_paths(genotypes), leaves_with_paths(stored)):
        want = (want_n, *row.shape[1:])
        if got.shape != want or got.dtype != row.dtype:
            raise Broken(
                f"emit's {path} has shape {got.shape} and dtype {got.dtype}; batch_size = "
                f"{want_n} candidates shaped like the stored rows need {want} and {row.dtype}"
            )


def _law_finite(ctx: _Context) -> None:
    """From a repertoire of finite genotypes, `emit` gives finite genotypes."""
    genotypes, _ = ctx.emit()
    for path, x in leaves_with_paths(genotypes):
        x = np.asarray(x)
        if np.issubdtype(x.dtype, np.inexact) and not np.isfinite(x).all():
            bad = int(np.sum(~np.isfinite(x)))
            raise Broken(f"emit's {path} holds {bad} non-finite values")


def _law_same_key(ctx: _Context) -> None:
    """The same key gives the same batch, bit for bit, and a batch drawn under `vmap` over
    keys equals the one drawn alone for each key."""
    first, second = ctx.emit(), ctx.emit()
    if not eqx.tree_equal(first, second):
        raise Broken("two calls of emit with one key returned different batches")
    keys = jr.split(ctx.emit_key, 2)
    batched = _emit_vmapped(ctx.h, ctx.repertoire, ctx.state, keys)
    for i in range(2):
        alone = _emit(ctx.h, ctx.repertoire, ctx.state, keys[i])
        if not trees_close(tree_take(batched, i), alone):
            raise Broken(f"emit under vmap over keys differs from emit alone for key {i}")


def _law_state(ctx: _Context) -> None:
    """`state_update` keeps the state's structure, shapes and dtypes, so that `lax.scan` can
    carry it: one update, and two iterations inside a `lax.scan`, give a state shaped like
    `init`'s. (The scan is not asked to equal the loop: XLA may compile the two differently,
    and an eigendecomposition, as CMA-ES's, may then pick another basis of a repeated
    eigenvalue.)"""
    _, state = _step(ctx.h, ctx.repertoire, ctx.state, ctx.step_key)
    before = leaf_shapes(ctx.state)
    if jax.tree.structure(ctx.state) != jax.tree.structure(state) or before != leaf_shapes(state):
        raise Broken(
            f"state_update changed the state from {before} (init's) to {leaf_shapes(state)}: a "
            "state must keep its structure, shapes and dtypes"
        )
    keys = jr.split(jr.fold_in(ctx.step_key, 1), 2)
    _, scanned = _scan(ctx.h, ctx.repertoire, ctx.state, keys)
    if leaf_shapes(scanned) != before:
        raise Broken(f"two iterations in lax.scan gave a state shaped {leaf_shapes(scanned)}")


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
            raise Broken(
                f"Lineage.{name} has shape {x.shape} and dtype {x.dtype}, not ({n},) int32"
            )
    kinds = set(np.asarray(extra.kind).tolist())
    unknown = kinds - {int(o) for o in Origin}
    if unknown:
        raise Broken(f"Lineage.kind holds {sorted(unknown)}, which are not Origin values")
    stored = {i + ID_OFFSET for i, f in enumerate(ctx.case.filled) if f}
    for name in ("parent1", "parent2"):
        parents = set(np.asarray(getattr(extra, name)).tolist()) - {-1}
        if parents - stored:
            raise Broken(
                f"Lineage.{name} names {sorted(parents - stored)[:5]}, which are not ids of "
                f"stored elites (those are {sorted(stored)[:5]}...; -1 for none)"
            )
    evo = np.asarray(extra.kind) == int(Origin.EVO)
    if np.any(np.asarray(extra.parent1)[evo] == -1):
        raise Broken("an EVO child has no first parent (-1) though the repertoire stores ids")


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
    with keep_python_random():
        return _Case(tuple(filled), tuple(fitnesses), tuple(members), seed)


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
    names = known_laws("check_emitter", EMITTER_LAWS, laws, list(EMITTER_LAWS))
    harness = _Harness(emitter, population, tessellation, scoring_fn)
    cases = _cases(tessellation.num_cells, batch_size_of(population))
    context = one_at_a_time(lambda case: _Context(harness, case))
    run_laws(EMITTER_LAWS, names, context, cases, max_examples)
