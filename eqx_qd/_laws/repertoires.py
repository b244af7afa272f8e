"""The laws a repertoire keeps (`check_repertoire`), on any `AbstractRepertoire`."""

import dataclasses
import io
import typing
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._custom_types import PRNGKey
from .._repertoire import (
    AbstractCellRepertoire,
    AbstractMultiObjectiveRepertoire,
    AbstractRepertoire,
    MAPElitesRepertoire,
    ParetoRepertoire,
)
from .._tessellation import CategoricalTessellation
from .runner import Broken, ID_OFFSET, keep_python_random, known_laws, one_at_a_time, run_laws


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
        with keep_python_random():
            return _Offer(tuple(fitnesses), tuple(descriptors), seed)

    first, second, seed = offer(), offer(), draw(st.integers(0, 2**31 - 1))
    with keep_python_random():
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
        finite = np.isfinite(self.fitnesses)
        if finite.ndim == 2:  # objective vectors: every objective finite
            finite = finite.all(axis=-1)
        return finite & np.isfinite(self.descriptors).all(axis=-1)

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
            descriptors = _in_the_categories(start, descriptors)
            extra = None
            if start.extra is not None:
                extra = jax.tree.map(
                    lambda row: _ids(row, batch_size, offset=(i + 1) * ID_OFFSET), start.extra
                )
            fitnesses = np.asarray(offer.fitnesses, np.float32)
            if isinstance(start, AbstractMultiObjectiveRepertoire):
                # The drawn fitness is the first objective; the others small integers, so
                # that dominance, ties and equal vectors all occur.
                others = rng.integers(-2, 3, size=(batch_size, start.num_objectives - 1))
                fitnesses = np.concatenate([fitnesses[:, None], others.astype(np.float32)], 1)
            self.offers.append(_Candidates(genotypes, descriptors, fitnesses, extra))
        self.after_first = self.add(start, self.offers[0])[0]
        self.after_second = self.add(self.after_first, self.offers[1])[0]

    @staticmethod
    def add(repertoire: AbstractRepertoire, c: _Candidates):
        return _add(repertoire, c.genotypes, c.descriptors, c.fitnesses, c.extra)


def _in_the_categories(repertoire: AbstractRepertoire, descriptors: np.ndarray) -> np.ndarray:
    """Over categorical cells, each finite drawn descriptor moved to its dimension's nearest
    category (a value outside the sets is an error by contract, not a case); NaN and
    infinities stay."""
    cells = getattr(repertoire, "tessellation", None)
    if not isinstance(cells, CategoricalTessellation):
        return descriptors
    out = descriptors.copy()
    for i, dim in enumerate(cells.categories):
        values = np.asarray(dim, np.float32)
        column = out[:, i]
        finite = np.isfinite(column)
        nearest = values[np.argmin(np.abs(column[finite, None] - values[None, :]), axis=1)]
        column[finite] = nearest
    return out


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
    """Each filled slot as (slot, its elite as bytes: a multi-objective repertoire's with its
    objective vector)."""
    filled = np.flatnonzero(np.asarray(repertoire.filled))
    scores = _scores(repertoire)
    return _rows(repertoire.genotypes, scores, repertoire.descriptors, filled)


def _scores(repertoire: AbstractRepertoire):
    """What a slot is scored by: its objective vector, or its fitness."""
    if isinstance(repertoire, AbstractMultiObjectiveRepertoire):
        return repertoire.objectives
    return repertoire.fitnesses


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
            raise Broken(
                f"after the {name} batch, slots {np.flatnonzero(bad)[:5].tolist()} "
                f"hold fitness {fit[bad][:5].tolist()}"
            )
        desc = np.asarray(rep.descriptors)[np.isfinite(fit)]
        if desc.size and not np.isfinite(desc).all():
            raise Broken(f"after the {name} batch, an elite holds a non-finite descriptor")
        if isinstance(rep, AbstractMultiObjectiveRepertoire):
            objectives = np.asarray(rep.objectives)
            whole = np.isfinite(objectives).all(-1) | np.isneginf(objectives).all(-1)
            if not whole.all():
                raise Broken(
                    f"after the {name} batch, slots {np.flatnonzero(~whole)[:5].tolist()} hold "
                    "objective vectors neither finite nor empty (-inf)"
                )


def _law_rep_from_candidates(ctx: _RepertoireContext) -> None:
    """Every elite is one that was stored or offered (finite): its fitness, descriptor and
    genotype row together, never a mix."""
    known = {row for _, row in _slots(ctx.start)}
    for c in ctx.offers:
        known |= _candidate_rows(c)
    for slot, row in _slots(ctx.after_second):
        if row not in known:
            raise Broken(f"slot {slot} holds an elite that was neither stored nor offered")


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
        raise Broken(f"the QD-score went {scores[0]:g} -> {scores[1]:g} -> {scores[2]:g}")


def _removed_solutions(ctx: _RepertoireContext):
    """For each batch: its name, the repertoire after it, and each solution stored before it
    and gone after it, as (slot before, objective vector, whether a solution stored after it
    dominates it)."""
    for name, before, after in (
        ("first", ctx.start, ctx.after_first),
        ("second", ctx.after_first, ctx.after_second),
    ):
        kept = {row for _, row in _slots(after)}
        now = np.asarray(after.objectives)[np.asarray(after.filled)]
        old = np.asarray(before.objectives)[np.asarray(before.filled)]
        gone = [
            (slot, vector, bool(np.any(np.all(now >= vector, -1) & np.any(now > vector, -1))))
            for (slot, row), vector in zip(_slots(before), old)
            if row not in kept
        ]
        yield name, after, gone


def _law_rep_never_dominated_away(ctx: _RepertoireContext) -> None:
    """(Elitist multi-objective repertoires, a `ParetoRepertoire`.) A solution stored before
    a batch is still stored after it, or a solution stored after it dominates it: nothing
    leaves for a solution the repertoire does not keep."""
    for name, after, gone in _removed_solutions(ctx):
        for slot, vector, dominated in gone:
            if not dominated:
                raise Broken(
                    f"the {name} batch removed slot {slot}'s solution {vector.tolist()}, which "
                    "nothing stored after it dominates"
                )


def _law_rep_fronts(ctx: _RepertoireContext) -> None:
    """(Archives of fronts: a `ParetoRepertoire` under either rule, or any multi-objective
    repertoire with `front_length`, `front_objectives` and `front_filled`.) No stored
    solution dominates another of its cell, and a solution stored before a batch and gone
    after it is dominated by one stored after it, or its cell's front is full after the batch
    (crowded out: the only way MOME-PGX's rule drops a non-dominated solution)."""
    for name, after in (("first", ctx.after_first), ("second", ctx.after_second)):
        objectives = np.asarray(after.front_objectives)
        filled = np.asarray(after.front_filled)
        for cell in range(objectives.shape[0]):
            front = objectives[cell][filled[cell]]
            beats = np.all(front[:, None] >= front[None], -1) & np.any(
                front[:, None] > front[None], -1
            )
            if beats.any():
                raise Broken(
                    f"after the {name} batch, cell {cell}'s front holds a dominated solution"
                )
    for name, after, gone in _removed_solutions(ctx):
        filled = np.asarray(after.front_filled)
        for slot, vector, dominated in gone:
            if not dominated and not filled[slot // after.front_length].all():
                raise Broken(
                    f"the {name} batch removed slot {slot}'s solution {vector.tolist()}, which "
                    "nothing stored dominates, from a front that is not full"
                )


def _reference_add(rep: AbstractRepertoire, c: _Candidates):
    """The elitist rule written out: candidate by candidate in batch order, a valid one
    replaces its cell's elite when strictly fitter (so the batch's best wins its cell, the
    lowest index among ties, and only when it beats the elite)."""
    fit = np.asarray(rep.fitnesses).copy()
    desc = np.asarray(rep.descriptors).copy()
    rows = [np.asarray(x).copy() for x in jax.tree.leaves(rep.genotypes)]
    offered = [np.asarray(x) for x in jax.tree.leaves(c.genotypes)]
    valid = c.valid()
    if not valid.any():
        return fit, desc, rows
    # Refused candidates are looked up at a valid one's descriptor, which any cells accept.
    stand_in = c.descriptors[np.argmax(valid)][None, :]
    cells = np.asarray(rep.cell_of(jnp.where(valid[:, None], c.descriptors, stand_in)))
    for i in np.flatnonzero(valid):
        cell = cells[i]
        if c.fitnesses[i] > fit[cell]:
            fit[cell], desc[cell] = c.fitnesses[i], c.descriptors[i]
            for r, o in zip(rows, offered):
                r[cell] = o[i]
    return fit, desc, rows


def _law_rep_reference(ctx: _RepertoireContext) -> None:
    """(Elitist repertoires with cells, an `AbstractCellRepertoire`.) `add` equals the
    elitist rule written out candidate by candidate (`_reference_add`), slot by slot, bit for
    bit."""
    for name, before, c, after in (
        ("first", ctx.start, ctx.offers[0], ctx.after_first),
        ("second", ctx.after_first, ctx.offers[1], ctx.after_second),
    ):
        fit, desc, rows = _reference_add(before, c)
        got = np.asarray(after.fitnesses)
        if not np.array_equal(fit, got):
            slots = np.flatnonzero(fit != got)[:5].tolist()
            raise Broken(
                f"after the {name} batch, slots {slots} hold {got[slots].tolist()}; "
                f"the rule gives {fit[slots].tolist()}"
            )
        filled = np.isfinite(fit)
        same = np.array_equal(desc[filled], np.asarray(after.descriptors)[filled]) and all(
            np.array_equal(r[filled], np.asarray(x)[filled])
            for r, x in zip(rows, jax.tree.leaves(after.genotypes))
        )
        if not same:
            raise Broken(
                f"after the {name} batch, an elite's descriptor or genotype is not the "
                "rule's (the fittest candidate of its cell, the first among ties)"
            )


def _law_rep_order(ctx: _RepertoireContext) -> None:
    """(Repertoires with cells, an `AbstractCellRepertoire`.) The order of a batch does not
    matter when no two valid candidates of one cell tie: the batch added in another order
    stores the same elites in the same slots."""
    c = ctx.offers[1]
    valid = c.valid()
    if not valid.any():
        return
    stand_in = c.descriptors[np.argmax(valid)][None, :]  # as in `_reference_add`
    cells = np.asarray(ctx.after_first.cell_of(jnp.where(valid[:, None], c.descriptors, stand_in)))
    pairs = [(cells[i], c.fitnesses[i]) for i in np.flatnonzero(valid)]
    if len(set(pairs)) < len(pairs):
        return  # a tie in a cell: the lowest index wins, which the order decides
    order = np.random.default_rng(ctx.case.seed).permutation(len(c.fitnesses))
    permuted = ctx.add(ctx.after_first, c.permuted(order))[0]
    if _slots(permuted) != _slots(ctx.after_second):
        raise Broken(f"the second batch in the order {order.tolist()} stores other elites")


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
        raise Broken(f"select drew empty slots {cells[~filled[cells]].tolist()}")
    stored = jax.tree.map(
        lambda x: np.asarray(x)[cells], (rep.genotypes, rep.fitnesses, rep.descriptors)
    )
    drawn = (elites.genotypes, elites.fitnesses, elites.descriptors)
    if not all(
        np.array_equal(a, np.asarray(b))
        for a, b in zip(jax.tree.leaves(stored), jax.tree.leaves(drawn))
    ):
        raise Broken("select returned elites that differ from the slots it names")


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
        raise Broken(f"loading the saved repertoire failed: {type(e).__name__}: {e}") from e
    if jax.tree.structure(loaded) != jax.tree.structure(ctx.after_second):
        raise Broken("the loaded repertoire's structure (static fields) differs from the saved one")
    if not bool(eqx.tree_equal(loaded, ctx.after_second)):
        raise Broken("the loaded repertoire's arrays differ from the saved one's")


REPERTOIRE_LAWS: dict[str, Callable[[_RepertoireContext], None]] = {
    "finite": _law_rep_finite,
    "from_candidates": _law_rep_from_candidates,
    "elitist": _law_rep_elitist,
    "never_dominated_away": _law_rep_never_dominated_away,
    "fronts": _law_rep_fronts,
    "reference": _law_rep_reference,
    "order": _law_rep_order,
    "select": _law_rep_select,
    "checkpoint": _law_rep_checkpoint,
}
"""The laws `check_repertoire` runs, by name (each function's docstring states its law);
`elitist` and `reference` apply to elitist repertoires, `reference` and `order` to those
with cells (an `AbstractCellRepertoire`), `never_dominated_away` (instead of `elitist`) to
elitist multi-objective ones, `fronts` to multi-objective archives of fronts."""


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

    - `repertoire`: the repertoire to start from (usually empty: `MAPElitesRepertoire.empty`,
      your class's constructor); the batches' genotypes are shaped like its rows, their
      descriptors drawn around its `extent` (NaN and infinities included; over a
      `CategoricalTessellation`, each finite one moved to its nearest category).
    - `batch_size`: candidates per batch.
    - `elitist`: whether `add` keeps, per cell or slot, only strictly fitter candidates, so
      that the `elitist` and `reference` laws apply (for a multi-objective repertoire: that a
      solution leaves only for one that dominates it, the `never_dominated_away` law).
      `None`: a `MAPElitesRepertoire` without annealing and a `ParetoRepertoire` without
      `crowding` are elitist; other repertoires are not.
    - `laws`: a subset of the law names (a law that does not apply is refused).
    - `max_examples`: cases hypothesis tries per law (drawn the same way every run).
    """
    if not isinstance(repertoire, AbstractRepertoire):
        raise TypeError(
            "check_repertoire: repertoire must be an eqx_qd.AbstractRepertoire, got "
            f"{type(repertoire).__name__}"
        )
    multi = isinstance(repertoire, AbstractMultiObjectiveRepertoire)
    if elitist is None:
        elitist = (
            isinstance(repertoire, MAPElitesRepertoire) and repertoire.annealing is None
        ) or (isinstance(repertoire, ParetoRepertoire) and not repertoire.crowding)
    cells = isinstance(repertoire, AbstractCellRepertoire)
    applies = {
        "elitist": elitist and not multi,
        "never_dominated_away": elitist and multi,
        "reference": elitist and cells,
        "order": cells,
        "fronts": multi
        and all(
            hasattr(repertoire, a) for a in ("front_length", "front_objectives", "front_filled")
        ),
    }
    default = [n for n in REPERTOIRE_LAWS if applies.get(n, True)]
    names = known_laws("check_repertoire", REPERTOIRE_LAWS, laws, default)
    refused = [n for n in names if not applies.get(n, True)]
    if refused:
        raise ValueError(
            f"check_repertoire: {refused} do not apply to this repertoire (elitist={elitist}, "
            f"cells: {cells}, an AbstractCellRepertoire)"
        )
    cases = _repertoire_cases(batch_size, repertoire.num_descriptors)
    context = one_at_a_time(lambda case: _RepertoireContext(repertoire, case, batch_size))
    run_laws(REPERTOIRE_LAWS, names, context, cases, max_examples)
