"""The laws a ranker keeps (`eqx_qd.testing.check_ranker`), run as hypothesis properties: it
orders the whole batch, and a failed candidate ranks after every other, so that an evolution
strategy never takes it for a parent."""

import dataclasses
import typing
from collections.abc import Callable, Sequence

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._emitters.rankers import AbstractRanker
from .._repertoire import AbstractRepertoire, MAPElitesRepertoire
from .._tessellation import GridTessellation
from .runner import Broken, keep_python_random, known_laws, one_at_a_time, run_laws


_GRID = GridTessellation((4, 4), minval=0.0, maxval=1.0)


@dataclasses.dataclass(frozen=True)
class _RankerCase:
    """The fitnesses and descriptors of a batch (NaN and infinities among them), offered to a
    4 x 4 grid that already holds `stored` elites, and the seed of the ranker's direction."""

    fitnesses: tuple[float, ...]
    descriptors: tuple[tuple[float, ...], ...]
    stored: tuple[float, ...]
    seed: int

    def describe(self) -> str:
        rows = ", ".join(f"{f:g} at {list(d)}" for f, d in zip(self.fitnesses, self.descriptors))
        return f"batch [{rows}] after {len(self.stored)} stored elites, seed {self.seed}"


@st.composite
@typing.no_type_check  # a runtime type checker samples with `random`, which strategies must not
def _cases(draw, batch_size: int, num_descriptors: int) -> _RankerCase:
    fitness = st.one_of(
        st.floats(-10.0, 10.0, width=32), st.sampled_from([np.nan, -np.inf, np.inf, 0.0])
    )
    unit = st.one_of(st.floats(0.0, 1.0, width=32), st.sampled_from([np.nan, 0.5]))
    fitnesses = draw(st.lists(fitness, min_size=batch_size, max_size=batch_size))
    row = st.tuples(*[unit] * num_descriptors)
    descriptors = draw(st.lists(row, min_size=batch_size, max_size=batch_size))
    stored = draw(st.lists(st.floats(-10.0, 10.0, width=32), max_size=6))
    seed = draw(st.integers(0, 2**31 - 1))
    with keep_python_random():
        return _RankerCase(tuple(fitnesses), tuple(descriptors), tuple(stored), seed)


def _rows(repertoire: AbstractRepertoire, n: int):
    return jax.tree.map(lambda g: jnp.zeros((n, *g.shape[1:]), g.dtype), repertoire.genotypes)


@eqx.filter_jit
def _rank(ranker: AbstractRanker, repertoire, fitnesses, descriptors, key):
    _, info = repertoire.add(_rows(repertoire, fitnesses.shape[0]), descriptors, fitnesses)
    lower, upper = repertoire.extent
    direction = ranker.direction(lower, upper, key=key)
    return ranker.rank(direction, fitnesses, descriptors, info)


class _RankerContext:
    def __init__(self, ranker: AbstractRanker, repertoire: AbstractRepertoire, case: _RankerCase):
        self.case = case
        self.fitnesses = np.asarray(case.fitnesses, np.float32)
        self.descriptors = np.asarray(case.descriptors, np.float32)
        rng = np.random.default_rng(case.seed)
        if case.stored:
            n = len(case.stored)
            repertoire, _ = repertoire.add(
                _rows(repertoire, n),
                jnp.asarray(rng.uniform(size=(n, self.descriptors.shape[1])), jnp.float32),
                jnp.asarray(case.stored, jnp.float32),
            )
        order, values = _rank(
            ranker,
            repertoire,
            jnp.asarray(self.fitnesses),
            jnp.asarray(self.descriptors),
            jr.key(case.seed),
        )
        self.order, self.values = np.asarray(order), np.asarray(values)


def _law_ranker_order(ctx: _RankerContext) -> None:
    """`rank` orders the whole batch: its order is a permutation of the candidates' indices,
    and its values hold one row per candidate."""
    n = ctx.fitnesses.shape[0]
    if ctx.order.shape != (n,) or not np.issubdtype(ctx.order.dtype, np.integer):
        raise Broken(
            f"the order has shape {ctx.order.shape} and dtype {ctx.order.dtype}, "
            f"not ({n},) integers"
        )
    if sorted(ctx.order.tolist()) != list(range(n)):
        raise Broken(f"the order {ctx.order.tolist()} is not a permutation of the batch")
    if ctx.values.shape[:1] != (n,):
        raise Broken(f"the values have shape {ctx.values.shape}, not ({n}, ...)")


def _law_ranker_failed_last(ctx: _RankerContext) -> None:
    """A failed candidate (a NaN or infinite fitness, a NaN descriptor: what an evaluation
    that crashed reports, and what the repertoire refuses) ranks after every other, so an
    evolution strategy never takes it for a parent."""
    failed = ~np.isfinite(ctx.fitnesses) | ~np.isfinite(ctx.descriptors).all(axis=-1)
    if failed.all() or not failed.any():
        return
    place = np.empty_like(ctx.order)
    place[ctx.order] = np.arange(ctx.order.shape[0])
    first_failed, last_valid = place[failed].min(), place[~failed].max()
    if first_failed < last_valid:
        who = int(ctx.order[first_failed])
        raise Broken(
            f"failed candidate {who} (fitness {ctx.fitnesses[who]:g}) ranks {first_failed + 1}, "
            f"before candidate {int(ctx.order[last_valid])}, which did not fail"
        )


RANKER_LAWS: dict[str, Callable[[_RankerContext], None]] = {
    "order": _law_ranker_order,
    "failed_last": _law_ranker_failed_last,
}
"""The laws `check_ranker` runs, by name (each function's docstring states its law)."""


def check_ranker(
    ranker: AbstractRanker,
    *,
    repertoire: AbstractRepertoire | None = None,
    batch_size: int = 6,
    laws: Sequence[str] | None = None,
    max_examples: int = 30,
) -> None:
    """Run `ranker` through every law of `RANKER_LAWS` (or those named in `laws`) on batches
    hypothesis draws (NaN and infinite fitnesses, NaN descriptors in the unit box) offered to
    `repertoire` after a few stored elites, and raise `LawBroken` naming the first law broken
    with the minimal case found.

    **Arguments:**

    - `ranker`: any `AbstractRanker` (the built-in ones, or a subclass of your own).
    - `repertoire`: the empty repertoire whose `AddInfo` the ranker reads (default: a 4 x 4
      grid over the unit square; the novelty rankers need an `UnstructuredRepertoire`).
    - `batch_size`: candidates per drawn batch.
    - `laws`: a subset of the law names.
    - `max_examples`: cases hypothesis tries per law.
    """
    if not isinstance(ranker, AbstractRanker):
        raise TypeError(
            f"check_ranker: ranker must be an eqx_qd.AbstractRanker, got {type(ranker).__name__}"
        )
    if repertoire is None:
        repertoire = MAPElitesRepertoire.empty(_GRID, jnp.zeros(1))
    names = known_laws("check_ranker", RANKER_LAWS, laws, list(RANKER_LAWS))
    context = one_at_a_time(lambda case: _RankerContext(ranker, repertoire, case))
    cases = _cases(batch_size, repertoire.num_descriptors)
    run_laws(RANKER_LAWS, names, context, cases, max_examples)
