"""How an evolution-strategy emitter orders its evaluated batch: pyribs' rankers.

A ranker returns the batch's order (best first) and the ranking values the ES's stop test
reads. Each emitter of a population holds one `direction` `(num_descriptors,)`, drawn at
(re)start: the random-direction rankers project descriptors on it; the others ignore it.
"""

import abc
import typing

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int

from .._custom_types import PRNGKey
from .._repertoire import AddInfo, valid_candidates
from .._selectors import crowding_distance, pareto_fronts


def _last_if_nan(values: Array) -> Array:
    """NaN as -inf: a failed candidate (a NaN fitness, improvement or descriptor) ranks below
    every candidate that has a value. Sorted as it is, NaN goes last, and a descending order
    (the flip) would put it first."""
    return jnp.where(jnp.isnan(values), -jnp.inf, values)


def _failed(fitnesses: Array, descriptors: Array) -> Array:
    """The candidates whose evaluation failed: those the repertoires refuse."""
    return ~valid_candidates(fitnesses, descriptors)


def _unless_failed(values: Array, fitnesses: Array, descriptors: Array) -> Array:
    """`values` with NaN for the failed candidates, which every sort here puts last: a
    ranker that reads the descriptors only (`rd`) or the fitnesses only (`obj`) still sees a
    failure."""
    return jnp.where(_failed(fitnesses, descriptors), jnp.nan, values)


def _descending(values: Float[Array, " batch"]) -> Int[Array, " batch"]:
    # numpy's `flip(argsort(v))`: descending, ties in reverse index order; NaN last.
    return jnp.flip(jnp.argsort(_last_if_nan(values), stable=True))


def _two_stage(primary, secondary) -> Int[Array, " batch"]:
    # numpy's `flip(lexsort((secondary, primary)))`: by primary, then secondary, descending;
    # NaN last in each.
    return jnp.flip(jnp.lexsort((_last_if_nan(secondary), _last_if_nan(primary))))


class AbstractRanker(eqx.Module):
    """Orders an evaluated batch for the ES, best first. A failed candidate (its evaluation
    gave a NaN or infinite fitness or a NaN descriptor, so the repertoire refused it) ranks
    after every other, whatever the ranker: the ES learns that it failed."""

    @abc.abstractmethod
    def rank(
        self,
        direction: Float[Array, " num_descriptors"],
        fitnesses: Float[Array, " batch"],
        descriptors: Float[Array, "batch num_descriptors"],
        add_info: AddInfo,
    ) -> tuple[Int[Array, " batch"], Float[Array, "batch ..."]]:
        """`(order, values)`: indices of the batch best first, and the ranking value of every
        candidate (`(batch,)`, or `(batch, 2)` for a two-stage ranker), from the emitter's
        `direction`, the batch's `fitnesses` and `descriptors` and its insertion's `add_info`."""

    def direction(
        self,
        lower: Float[Array, " num_descriptors"],
        upper: Float[Array, " num_descriptors"],
        *,
        key: PRNGKey,
    ) -> Float[Array, " num_descriptors"]:
        """The direction drawn at each (re)start: a standard normal vector scaled by the
        archive's extent `upper - lower` (pyribs' random direction). Rankers that do not use it
        still draw it, so that every ranker keeps the same state."""
        return jr.normal(key, lower.shape) * (upper - lower)


@typing.final
class ImprovementRanker(AbstractRanker):
    """`imp`: by improvement value (`AddInfo.value`), highest first. CMA-MAE's ranker."""

    def rank(self, direction, fitnesses, descriptors, add_info):
        value = _unless_failed(add_info.value, fitnesses, descriptors)
        return _descending(value), add_info.value


@typing.final
class TwoStageImprovementRanker(AbstractRanker):
    """`2imp`: new cells first, then improved ones, then the rest (`threshold_status`),
    each group by improvement value. CMA-ME's ranker."""

    def rank(self, direction, fitnesses, descriptors, add_info):
        status = add_info.threshold_status.astype(jnp.float32)
        values = jnp.stack([status, add_info.value], axis=-1)
        value = _unless_failed(add_info.value, fitnesses, descriptors)
        return _two_stage(_unless_failed(status, fitnesses, descriptors), value), values


@typing.final
class ObjectiveRanker(AbstractRanker):
    """`obj`: by fitness, highest first (CMA-ME's optimising emitter)."""

    def rank(self, direction, fitnesses, descriptors, add_info):
        return _descending(_unless_failed(fitnesses, fitnesses, descriptors)), fitnesses


@typing.final
class TwoStageObjectiveRanker(AbstractRanker):
    """`2obj`: by `threshold_status`, then by fitness."""

    def rank(self, direction, fitnesses, descriptors, add_info):
        status = add_info.threshold_status.astype(jnp.float32)
        key = _unless_failed(fitnesses, fitnesses, descriptors)
        ranked = _two_stage(_unless_failed(status, fitnesses, descriptors), key)
        return ranked, jnp.stack([status, fitnesses], axis=-1)


@typing.final
class RandomDirectionRanker(AbstractRanker):
    """`rd`: by the projection of the descriptor on the emitter's random direction."""

    def rank(self, direction, fitnesses, descriptors, add_info):
        projections = descriptors @ direction
        return _descending(_unless_failed(projections, fitnesses, descriptors)), projections


@typing.final
class TwoStageRandomDirectionRanker(AbstractRanker):
    """`2rd`: by `threshold_status`, then by the projection on the random direction."""

    def rank(self, direction, fitnesses, descriptors, add_info):
        status = add_info.threshold_status.astype(jnp.float32)
        projections = descriptors @ direction
        key = _unless_failed(projections, fitnesses, descriptors)
        ranked = _two_stage(_unless_failed(status, fitnesses, descriptors), key)
        return ranked, jnp.stack([status, projections], axis=-1)


_COMPUTED_BY = {
    "novelty": "an eqx_qd.UnstructuredRepertoire",
    "local_competition": "an eqx_qd.UnstructuredRepertoire(local_competition=True)",
    "density": "an eqx_qd.DensityRepertoire",
}


def _needs(add_info: AddInfo, field: str, owner: str) -> Array:
    value = getattr(add_info, field)
    if value is None:
        raise ValueError(
            f"{owner} ranks by AddInfo.{field}, which this repertoire does not compute: use "
            f"{_COMPUTED_BY[field]}"
        )
    return value


@typing.final
class NoveltyRanker(AbstractRanker):
    """`novelty`: by novelty (`AddInfo.novelty`, the mean distance to the `k` nearest
    stored elites), highest first: novelty search. Needs an `UnstructuredRepertoire`."""

    def rank(self, direction, fitnesses, descriptors, add_info):
        novelty = _needs(add_info, "novelty", "NoveltyRanker")
        return _descending(_unless_failed(novelty, fitnesses, descriptors)), novelty


@typing.final
class NSLCRanker(AbstractRanker):
    """`nslc`: Novelty Search with Local Competition (Lehman and Stanley, 2011) as pyribs
    ranks it: NSGA-II's non-dominated fronts over (novelty, local competition), both higher
    first, each front ordered by crowding distance (largest first; ties to the lower batch
    index). Needs an `UnstructuredRepertoire(local_competition=True)`."""

    def rank(self, direction, fitnesses, descriptors, add_info):
        novelty = _needs(add_info, "novelty", "NSLCRanker")
        beaten = _needs(add_info, "local_competition", "NSLCRanker").astype(novelty.dtype)
        objectives = jnp.stack([novelty, beaten], axis=-1)
        # A failed candidate (or one without a finite novelty) is dominated by every other.
        failed = (_failed(fitnesses, descriptors) | ~jnp.isfinite(novelty))[:, None]
        front = pareto_fronts(jnp.where(failed, -jnp.inf, objectives))
        crowding = crowding_distance(objectives, front)
        rows = jnp.arange(novelty.shape[0])
        return jnp.lexsort((rows, -crowding, front)), objectives


@typing.final
class DensityRanker(AbstractRanker):
    """`density`: by the density estimate of the descriptor space where each candidate landed
    (`AddInfo.density`), lowest first: Density Descent Search (Lee et al., 2024), pyribs'
    `DensityRanker`. Needs a `DensityRepertoire`."""

    def rank(self, direction, fitnesses, descriptors, add_info):
        density = _needs(add_info, "density", "DensityRanker")
        key = _unless_failed(density, fitnesses, descriptors)
        # numpy's `argsort(density)`: ascending (ties in index order); failed last.
        return jnp.argsort(jnp.where(jnp.isnan(key), jnp.inf, key), stable=True), density


RANKERS: dict[str, type[AbstractRanker]] = {
    "imp": ImprovementRanker,
    "2imp": TwoStageImprovementRanker,
    "obj": ObjectiveRanker,
    "2obj": TwoStageObjectiveRanker,
    "rd": RandomDirectionRanker,
    "2rd": TwoStageRandomDirectionRanker,
    "novelty": NoveltyRanker,
    "nslc": NSLCRanker,
    "density": DensityRanker,
}
"""pyribs' short names of the rankers."""


def ranker(name: "str | AbstractRanker") -> AbstractRanker:
    """The ranker called `name`, or `name` itself if it is already a ranker (a subclass of
    `AbstractRanker` of your own). pyribs' names, each ordering the batch best first:

    - `imp` (`ImprovementRanker`): by improvement value `AddInfo.value`. CMA-MAE's.
    - `2imp` (`TwoStageImprovementRanker`): new cells first, then improved ones, then the rest
      (`AddInfo.threshold_status`), each group by improvement value. CMA-ME's.
    - `obj` (`ObjectiveRanker`): by fitness (CMA-ME's optimising emitter).
    - `2obj` (`TwoStageObjectiveRanker`): by `threshold_status`, then by fitness.
    - `rd` (`RandomDirectionRanker`): by the projection of the descriptor on the strategy's
      random direction (drawn at each restart, scaled by the archive's extent).
    - `2rd` (`TwoStageRandomDirectionRanker`): by `threshold_status`, then by that projection.
    - `novelty` (`NoveltyRanker`): by `AddInfo.novelty` (pyribs' `nov`), with an
      `UnstructuredRepertoire`: novelty search.
    - `nslc` (`NSLCRanker`): non-dominated fronts of (novelty, local competition), each by
      crowding distance (pyribs' `nslc`), with `UnstructuredRepertoire(local_competition=True)`.
    - `density` (`DensityRanker`): by `AddInfo.density`, lowest first, with a
      `DensityRepertoire`: Density Descent Search.
    """
    if isinstance(name, AbstractRanker):
        return name
    if name not in RANKERS:
        raise ValueError(f"unknown ranker {name!r}; choose one of {sorted(RANKERS)}")
    return RANKERS[name]()
