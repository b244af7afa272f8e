"""Selectors: which filled cells a repertoire hands to an emitter as parents."""

import abc
import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from . import _validate as check
from ._custom_types import PRNGKey
from ._knn import k_nearest, mean_of_finite


class AbstractSelector(eqx.Module):
    """Chooses `num` cell indices among the filled cells (those with finite fitness), given
    what a repertoire stores. Sampling is with replacement. Selecting from an empty repertoire
    is a `ValueError` when the repertoire is concrete; inside a compiled program there is no
    check (a runtime check is a host callback: `internal.poison_if_empty` says why) and
    `select` hands out NaN genotypes, from which nothing is ever stored.

    Subclass it and implement `choose` for a rule that reads the descriptors (novelty); a rule
    that reads the fitnesses only subclasses `AbstractFitnessSelector` and implements
    `indices`.
    """

    @abc.abstractmethod
    def choose(
        self,
        fitnesses: Float[Array, " num_cells"],
        descriptors: Float[Array, "num_cells num_descriptors"],
        num: int,
        *,
        key: PRNGKey,
    ) -> Int[Array, " {num}"]:
        """What a repertoire's `select` calls: `num` indices of filled cells given the stored
        `fitnesses` (`(num_cells,)`, `-inf` for empty cells) and `descriptors`."""


class AbstractFitnessSelector(AbstractSelector):
    """A selection rule that reads the fitnesses only: implement `indices`, which can then
    also be called without a repertoire's descriptors."""

    @abc.abstractmethod
    def indices(
        self, fitnesses: Float[Array, " num_cells"], num: int, *, key: PRNGKey
    ) -> Int[Array, " {num}"]:
        """`num` indices of cells, drawn among the filled cells of `fitnesses`
        (`(num_cells,)`, `-inf` for empty cells)."""

    @typing.final
    def choose(
        self,
        fitnesses: Float[Array, " num_cells"],
        descriptors: Float[Array, "num_cells num_descriptors"],
        num: int,
        *,
        key: PRNGKey,
    ) -> Int[Array, " {num}"]:
        """`indices(fitnesses, num, key=key)`: the descriptors are not read."""
        return self.indices(fitnesses, num, key=key)


def _check_args(owner: str, fitnesses: Array, num: int) -> None:
    check.positive_int(f"{owner}.indices: num", num)
    if np.ndim(fitnesses) != 1:
        raise ValueError(
            f"{owner}.indices: fitnesses must have shape (num_cells,), got {np.shape(fitnesses)}"
        )


def _check_nonempty(idx: Array, num_filled: Array) -> Array:
    if check.is_concrete(num_filled) and int(num_filled) == 0:
        raise ValueError("cannot select from an empty repertoire")
    return idx


def uniform_filled(
    fitnesses: Float[Array, " num_cells"], num: int, *, key: PRNGKey
) -> tuple[Int[Array, " {num}"], Int[Array, ""]]:
    """`num` cells drawn uniformly among the filled ones (finite `fitnesses`), and how many
    are filled; with none filled the indices are 0 and no error is raised, for callers that
    fall back to something else (a restarting emitter's first mean)."""
    filled = jnp.isfinite(fitnesses)
    counts = filled_counts(filled)  # counts[i]: filled cells among 0..i
    num_filled = counts[-1]
    # The d-th filled cell is the first whose count reaches d + 1: O(num_cells + num log
    # num_cells), the same cells `nonzero`'s packed positions give, at a fraction of its cost
    # on a CPU (a categorical over all cells per draw would be O(num_cells num)).
    draws = jr.randint(key, (num,), 0, jnp.maximum(num_filled, 1))
    cells = jnp.searchsorted(counts, draws + 1, side="left").astype(jnp.int32)
    return jnp.where(num_filled > 0, cells, 0), num_filled


def filled_counts(filled: Bool[Array, " n"]) -> Int[Array, " n"]:
    """The inclusive running count of `filled`, `(n,)` int32, by blocks of 128: XLA's CPU
    cumulative sum over one long axis is several times slower than over short rows."""
    n, width = filled.shape[0], 128
    num_blocks = -(-n // width)
    rows = jnp.pad(filled.astype(jnp.int32), (0, num_blocks * width - n))
    rows = rows.reshape(num_blocks, width)
    within = jnp.cumsum(rows, axis=1)
    before = jnp.cumsum(within[:, -1]) - within[:, -1]
    return (within + before[:, None]).reshape(-1)[:n]


@typing.final
class UniformSelector(AbstractFitnessSelector):
    """Every filled cell is equally likely."""

    def indices(
        self, fitnesses: Float[Array, " num_cells"], num: int, *, key: PRNGKey
    ) -> Int[Array, " {num}"]:
        _check_args("UniformSelector", fitnesses, num)
        return _check_nonempty(*uniform_filled(fitnesses, num, key=key))


@typing.final
class FitnessProportionalSelector(AbstractFitnessSelector):
    """A filled cell is drawn with probability proportional to `fitness - min_fitness + eps`.

    Shifting by the lowest filled fitness makes the rule work for negative fitnesses; `eps`
    keeps the worst elite selectable.
    """

    eps: float = 1e-6

    def __check_init__(self):
        check.positive("FitnessProportionalSelector.eps", self.eps)

    def indices(
        self, fitnesses: Float[Array, " num_cells"], num: int, *, key: PRNGKey
    ) -> Int[Array, " {num}"]:
        _check_args("FitnessProportionalSelector", fitnesses, num)
        filled = jnp.isfinite(fitnesses)
        num_filled = jnp.sum(filled, dtype=jnp.int32)
        lowest = jnp.min(jnp.where(filled, fitnesses, jnp.inf))
        weights = jnp.where(filled, fitnesses - lowest + self.eps, 0.0)
        return _check_nonempty(_proportional(weights, num, key=key), num_filled)


def _proportional(weights: Float[Array, " n"], num: int, *, key: PRNGKey) -> Int[Array, " num"]:
    """`num` indices drawn with probability proportional to `weights` (>= 0)."""
    cumulative = jnp.cumsum(weights)
    targets = jr.uniform(key, (num,)) * cumulative[-1]
    idx = jnp.searchsorted(cumulative, targets, side="right")
    return jnp.minimum(idx, weights.shape[0] - 1).astype(jnp.int32)


def _nearest_elites(
    fitnesses: Float[Array, " num_cells"],
    descriptors: Float[Array, "num_cells num_descriptors"],
    k: int,
) -> tuple[Float[Array, "num_cells k"], Int[Array, "num_cells k"]]:
    """Each cell's distances to its `k` nearest other filled cells and their indices (`+inf`
    and an arbitrary index where fewer are filled): what novelty and local competition read."""
    filled = jnp.isfinite(fitnesses)
    columns = jnp.arange(fitnesses.shape[0], dtype=jnp.int32)
    others = lambda rows: filled[None, :] & (columns[None, :] != rows[:, None])
    safe = jnp.where(filled[:, None], descriptors, 0.0).astype(jnp.float32)
    return k_nearest(safe, safe, others, k, with_index=True)


@typing.final
class NoveltySelector(AbstractSelector):
    """Novelty search's parent choice for the GA emitter: a stored elite is drawn with
    probability proportional to its novelty, its mean descriptor distance to its `k` nearest
    other elites (plus `eps`, so that an elite in a crowd stays selectable), so the GA breeds
    from the frontier of what the repertoire holds. Works on any repertoire (it reads the
    descriptors, through `choose`); an elite alone in the repertoire has novelty 1.

    **Fields:** `k` (neighbours, static) and `eps`.
    """

    k: int = eqx.field(default=15, static=True)
    eps: float = 1e-6

    def __check_init__(self):
        check.positive_int("NoveltySelector.k", self.k)
        check.positive("NoveltySelector.eps", self.eps)

    def choose(
        self,
        fitnesses: Float[Array, " num_cells"],
        descriptors: Float[Array, "num_cells num_descriptors"],
        num: int,
        *,
        key: PRNGKey,
    ) -> Int[Array, " {num}"]:
        """`num` indices of filled cells, drawn proportionally to novelty (see the class)."""
        _check_args("NoveltySelector", fitnesses, num)
        filled = jnp.isfinite(fitnesses)
        num_filled = jnp.sum(filled, dtype=jnp.int32)
        novelty, count = mean_of_finite(_nearest_elites(fitnesses, descriptors, self.k)[0])
        novelty = jnp.where(count > 0, novelty, 1.0)
        weights = jnp.where(filled, novelty + self.eps, 0.0)
        return _check_nonempty(_proportional(weights, num, key=key), num_filled)


def pareto_fronts(objectives: Float[Array, "batch m"]) -> Int[Array, " batch"]:
    """Each row's non-dominated front (0 for the rows nothing dominates, 1 for those only
    front 0 dominates, ...), every objective higher-is-better: NSGA-II's sort, one front per
    pass, `O(fronts x rows^2)`: the passes stop when every row has its front (there had been
    one per row, `O(rows^3)`, seconds at 2,500 elites)."""
    n = objectives.shape[0]
    geq = jnp.all(objectives[None, :, :] >= objectives[:, None, :], axis=-1)
    gt = jnp.any(objectives[None, :, :] > objectives[:, None, :], axis=-1)
    dominated_by = geq & gt  # [i, j]: j dominates i

    def peel(carry):
        t, front, remaining = carry
        current = remaining & ~jnp.any(dominated_by & remaining[None, :], axis=1)
        return t + 1, jnp.where(current, t, front), remaining & ~current

    start = (jnp.int32(0), jnp.full((n,), n, jnp.int32), jnp.ones((n,), bool))
    _, front, _ = jax.lax.while_loop(lambda c: jnp.any(c[2]), peel, start)
    return front


def crowding_distance(
    objectives: Float[Array, "batch m"], front: Int[Array, " batch"]
) -> Float[Array, " batch"]:
    """NSGA-II's crowding distance of each row within its front: `+inf` at a front's ends
    on any objective, else the sum over objectives of the gap between its two neighbours
    divided by the front's range (an objective flat over the front adds nothing)."""
    n, m = objectives.shape
    distance = jnp.zeros((n,), objectives.dtype)
    rows = jnp.arange(n)
    for j in range(m):
        values = objectives[:, j]
        order = jnp.lexsort((rows, values, front))  # by front, then value, then index
        position = jnp.zeros((n,), jnp.int32).at[order].set(rows.astype(jnp.int32))
        prev = order[jnp.maximum(position - 1, 0)]
        nxt = order[jnp.minimum(position + 1, n - 1)]
        first = (position == 0) | (front[prev] != front)
        last = (position == n - 1) | (front[nxt] != front)
        low = jnp.full((n + 1,), jnp.inf, values.dtype).at[front].min(values)[front]
        high = jnp.full((n + 1,), -jnp.inf, values.dtype).at[front].max(values)[front]
        spread = high - low
        gap = jnp.where(
            spread > 0, (values[nxt] - values[prev]) / jnp.where(spread > 0, spread, 1.0), 0.0
        )
        distance = jnp.where(first | last, jnp.inf, distance + gap)
    return distance


@typing.final
class NSLCSelector(AbstractSelector):
    """Novelty Search with Local Competition's parent choice for the GA (Lehman and Stanley,
    2011, on NSGA-II): every stored elite gets its novelty (mean descriptor distance to its `k`
    nearest other elites) and its local competition (how many of them it beats); parents win
    binary tournaments by non-dominated front of the two, then by crowding distance within the
    front (NSGA-II's crowded comparison), then at random. Works on any repertoire. A call
    costs `O(capacity^2 x fronts)` (the dominance matrix, then one pass per front), against
    novelty's `O(capacity^2)` alone (`benchmarks/nslc.py`).

    **Fields:** `k` (neighbours, static).
    """

    k: int = eqx.field(default=15, static=True)

    def __check_init__(self):
        check.positive_int("NSLCSelector.k", self.k)

    def choose(
        self,
        fitnesses: Float[Array, " num_cells"],
        descriptors: Float[Array, "num_cells num_descriptors"],
        num: int,
        *,
        key: PRNGKey,
    ) -> Int[Array, " {num}"]:
        """`num` indices of filled cells, each the winner of a binary tournament."""
        _check_args("NSLCSelector", fitnesses, num)
        filled = jnp.isfinite(fitnesses)
        num_filled = jnp.sum(filled, dtype=jnp.int32)
        n = fitnesses.shape[0]
        near, which = _nearest_elites(fitnesses, descriptors, self.k)
        novelty, _ = mean_of_finite(near)
        beaten = jnp.sum(jnp.isfinite(near) & (fitnesses[which] < fitnesses[:, None]), axis=1)
        objectives = jnp.stack([novelty, beaten.astype(novelty.dtype)], axis=-1)
        # Empty cells sit below everything: a front of their own, after all the others.
        objectives = jnp.where(filled[:, None], objectives, -jnp.inf)
        front = pareto_fronts(objectives)
        crowding = crowding_distance(jnp.where(filled[:, None], objectives, 0.0), front)
        (packed,) = jnp.nonzero(filled, size=n, fill_value=0)
        draws = packed[jr.randint(key, (2, num), 0, jnp.maximum(num_filled, 1))]
        a, b = draws[0], draws[1]
        a_wins = (front[a] < front[b]) | ((front[a] == front[b]) & (crowding[a] >= crowding[b]))
        return _check_nonempty(jnp.where(a_wins, a, b).astype(jnp.int32), num_filled)
