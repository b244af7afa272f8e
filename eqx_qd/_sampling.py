"""QD under noise: scoring each candidate several times, estimates and spreads of the samples,
and the reevaluated ("corrected") view of a repertoire.

When fitness and descriptor are random variables (random starts, sensor noise), an elite's
stored scores are one lucky draw: the repertoire overstates what its elites do when run again.
Sampling (`Sampled`) scores each candidate `num_samples` times and keeps an estimate; the
corrected view (`reevaluated`) scores every elite again, many times, and places each by its
estimates in an empty repertoire over the same cells, which is what the elites are worth. The
estimators and spreads are QDax 0.5's (`qdax/utils/sampling.py`); the corrected repertoire and
the reproducibility figures are those of its `uncertainty_metrics.py`.
"""

import typing
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int

from . import _validate as check
from ._custom_types import Extra, Genotypes, PRNGKey
from ._knn import squared_distances
from ._metrics import qd_metrics, QDMetrics
from ._misc import most_frequent, tree_take
from ._repertoire import AbstractRepertoire, SampledExtra
from ._tasks import AbstractScorer, AbstractWrappedTask


def _closest(samples: Float[Array, "batch num_samples ..."]) -> Float[Array, "batch ..."]:
    """Per row, the sample with the smallest mean Euclidean distance to the row's samples (an
    approximate geometric median; the first on ties, as QDax's `closest`)."""
    x = samples.reshape(samples.shape[0], samples.shape[1], -1)
    distances = jnp.sqrt(jax.vmap(lambda s: squared_distances(s, s))(x))  # (batch, n, n)
    best = jnp.argmin(jnp.mean(distances, axis=1), axis=1)
    picked = jnp.take_along_axis(samples, best.reshape((-1, 1) + (1,) * (samples.ndim - 2)), 1)
    return picked[:, 0]


def _mad(samples: Float[Array, "batch num_samples ..."]) -> Float[Array, "batch ..."]:
    centre = jnp.median(samples, axis=1, keepdims=True)
    return jnp.median(jnp.abs(samples - centre), axis=1)


def _iqr(samples: Float[Array, "batch num_samples ..."]) -> Float[Array, "batch ..."]:
    return jnp.quantile(samples, 0.75, axis=1) - jnp.quantile(samples, 0.25, axis=1)


ESTIMATORS: dict[str, Callable[[Array], Array]] = {
    "mean": lambda s: jnp.mean(s, axis=1),
    "median": lambda s: jnp.median(s, axis=1),
    "mode": most_frequent,  # per coordinate, the smallest on ties (QDax's `mode`)
    "closest": _closest,
}
"""What one value a candidate's samples come to, by name: `samples (batch, num_samples, ...)
-> (batch, ...)`. `mean` and `median` per coordinate; `mode` per coordinate, the most frequent
value (the smallest of the most frequent; for continuous noise every value is seen once, so
the smallest); `closest`, the whole sample nearest on average to the others."""

SPREADS: dict[str, Callable[[Array], Array]] = {
    "std": lambda s: jnp.std(s, axis=1),
    "mad": _mad,
    "iqr": _iqr,
}
"""How far a candidate's samples lie apart, by name, per coordinate: `std` (the population
standard deviation), `mad` (the median absolute deviation from the median), `iqr` (the
interquartile range, linear interpolation)."""


def estimate(samples: Float[Array, "batch num_samples ..."], how: str) -> Float[Array, "batch ..."]:
    """The `ESTIMATORS[how]` estimate of each row of `samples` `(batch, num_samples, ...)`."""
    check.one_of("estimate: how", how, ESTIMATORS)
    return ESTIMATORS[how](samples)


def spread(samples: Float[Array, "batch num_samples ..."], how: str) -> Float[Array, "batch ..."]:
    """The `SPREADS[how]` spread of each row of `samples` `(batch, num_samples, ...)`."""
    check.one_of("spread: how", how, SPREADS)
    return SPREADS[how](samples)


class Samples(eqx.Module):
    """A batch scored `num_samples` times: `fitnesses` `(batch, num_samples)`, `descriptors`
    `(batch, num_samples, num_descriptors)` and the scorer's `extra` with the sample axis second
    (QDax's `multi_sample_scoring_function` layout)."""

    fitnesses: Float[Array, "batch num_samples"]
    descriptors: Float[Array, "batch num_samples num_descriptors"]
    extra: Extra


def sample_scores(
    scorer: AbstractScorer | Callable, genotypes: Genotypes, num_samples: int, *, key: PRNGKey
) -> Samples:
    """Score `genotypes` with `scorer` (any `scorer(genotypes, key=) -> (fitnesses,
    descriptors, extra)`) `num_samples` times, sample `i` with `jr.split(key, num_samples)[i]`
    (the samples vmapped, no loop: the same keys QDax's `multi_sample_scoring_function`
    uses)."""
    check.positive_int("sample_scores: num_samples", num_samples)
    fitnesses, descriptors, extra = jax.vmap(lambda k: scorer(genotypes, key=k), out_axes=1)(
        jr.split(key, num_samples)
    )
    return Samples(fitnesses, descriptors, extra)


@typing.final
class Sampled(AbstractWrappedTask):
    """`task` scored `num_samples` times per candidate (MAP-Elites-sampling): the fitness and
    descriptor returned are the samples' `fitness_estimator` / `descriptor_estimator`
    (`ESTIMATORS`), their `spread` (`SPREADS`) in the `SampledExtra`. Each candidate costs
    `num_samples` evaluations, so at a fixed evaluation budget the batch is that much smaller.

    **Fields:** `task`; `num_samples` (static); `fitness_estimator`, `descriptor_estimator`,
    `spread` (static names).
    """

    num_samples: int = eqx.field(static=True)
    fitness_estimator: str = eqx.field(default="mean", static=True)
    descriptor_estimator: str = eqx.field(default="mean", static=True)
    spread: str = eqx.field(default="std", static=True)

    def __check_init__(self):
        check.positive_int("Sampled.num_samples", self.num_samples)
        check.one_of("Sampled.fitness_estimator", self.fitness_estimator, ESTIMATORS)
        check.one_of("Sampled.descriptor_estimator", self.descriptor_estimator, ESTIMATORS)
        check.one_of("Sampled.spread", self.spread, SPREADS)

    def __call__(
        self, genotypes: Float[Array, "batch genotype_dim"], *, key: PRNGKey
    ) -> tuple[Float[Array, " batch"], Float[Array, "batch num_descriptors"], SampledExtra]:
        s = sample_scores(self.task, genotypes, self.num_samples, key=key)
        extra = SampledExtra(
            spread(s.fitnesses, self.spread),
            spread(s.descriptors, self.spread),
            s.fitnesses,
            s.descriptors,
            s.extra,
        )
        return (
            estimate(s.fitnesses, self.fitness_estimator),
            estimate(s.descriptors, self.descriptor_estimator),
            extra,
        )


class Reevaluated(eqx.Module):
    """A repertoire's elites scored again (`reevaluated`).

    **Fields:**

    - `repertoire`: the corrected repertoire: an empty repertoire over the same cells into
      which every elite was added at its estimated descriptor with its estimated fitness (an
      elite may move cell, or lose its cell to another elite that lands there too).
    - `fitness_spread`, `descriptor_spread`: `(num_cells,)`, per cell of the original
      repertoire, its elite's fitness spread and its descriptor spread averaged over the
      descriptor's coordinates; NaN in empty cells.
    """

    repertoire: AbstractRepertoire
    fitness_spread: Float[Array, " num_cells"]
    descriptor_spread: Float[Array, " num_cells"]


def reevaluated(
    repertoire: AbstractRepertoire,
    scorer: AbstractScorer | Callable,
    num_reevaluations: int,
    *,
    fitness_estimator: str = "median",
    descriptor_estimator: str = "median",
    spread_of: str = "std",
    key: PRNGKey,
) -> Reevaluated:
    """Every elite of `repertoire` scored `num_reevaluations` times by `scorer` (the samples
    vmapped, `sample_scores`' keys), and the repertoire they make: QDax 0.5's
    `reevaluation_reproducibility_function`, with its defaults. An elite's fitness is its
    samples' `fitness_estimator` estimate and its descriptor their `descriptor_estimator`
    estimate (`ESTIMATORS`; median both), its spreads are `spread_of` (`SPREADS`; standard
    deviation). Empty cells are scored too (fixed shapes) and then ignored.
    `corrected_metrics` summarises the result."""
    check.positive_int("reevaluated: num_reevaluations", num_reevaluations)
    check.one_of("reevaluated: fitness_estimator", fitness_estimator, ESTIMATORS)
    check.one_of("reevaluated: descriptor_estimator", descriptor_estimator, ESTIMATORS)
    check.one_of("reevaluated: spread_of", spread_of, SPREADS)
    s = sample_scores(scorer, repertoire.genotypes, num_reevaluations, key=key)
    return rebuilt(
        repertoire,
        s,
        fitness_estimator=fitness_estimator,
        descriptor_estimator=descriptor_estimator,
        spread_of=spread_of,
    )


def rebuilt(
    repertoire: AbstractRepertoire,
    samples: "Samples",
    *,
    fitness_estimator: str = "median",
    descriptor_estimator: str = "median",
    spread_of: str = "std",
) -> Reevaluated:
    """`reevaluated`'s result from samples scored elsewhere (an evaluator outside JAX):
    `samples.fitnesses` `(num_cells, n)` and `samples.descriptors` `(num_cells, n,
    num_descriptors)`, row `i` the samples of `repertoire`'s slot `i` (what an empty slot holds
    is ignored; a NaN sample makes its elite's estimates NaN under the median, and the elite is
    then not stored: a failed re-evaluation counts as not reproduced). `fitness_estimator`,
    `descriptor_estimator` and `spread_of` as in `reevaluated`."""
    check.one_of("rebuilt: fitness_estimator", fitness_estimator, ESTIMATORS)
    check.one_of("rebuilt: descriptor_estimator", descriptor_estimator, ESTIMATORS)
    check.one_of("rebuilt: spread_of", spread_of, SPREADS)
    n = repertoire.capacity
    if samples.fitnesses.ndim != 2 or samples.fitnesses.shape[0] != n:
        raise ValueError(
            f"rebuilt: samples.fitnesses must have shape ({n}, num_samples), got "
            f"{samples.fitnesses.shape}"
        )
    filled = repertoire.filled
    fitnesses = estimate(samples.fitnesses, fitness_estimator)
    fitnesses = jnp.where(filled & jnp.isfinite(fitnesses), fitnesses, -jnp.inf)
    descriptors = estimate(samples.descriptors, descriptor_estimator)
    empty = repertoire.emptied(tree_take(repertoire.genotypes, 0))
    corrected, _ = empty.add(repertoire.genotypes, descriptors, fitnesses.astype(jnp.float32))
    fitness_spread = jnp.where(filled, spread(samples.fitnesses, spread_of), jnp.nan)
    descriptor_spread = jnp.mean(spread(samples.descriptors, spread_of), axis=-1)
    return Reevaluated(
        corrected,
        fitness_spread.astype(jnp.float32),
        jnp.where(filled, descriptor_spread, jnp.nan).astype(jnp.float32),
    )


class CorrectedMetrics(eqx.Module):
    """The figures of a reevaluated repertoire (scalars, or a leading time axis).

    - `qd_score`, `coverage`, `max_fitness`: `qd_metrics` of the corrected repertoire (the
      "corrected" QD-score, coverage and max fitness of the uncertain-QD papers).
    - `fitness_reproducibility`, `descriptor_reproducibility`: the mean over the original
      repertoire's filled cells of its elites' fitness and descriptor spreads (lower: more
      reproducible); NaN for an empty repertoire.
    - `num_filled`: the corrected repertoire's filled cells.
    """

    qd_score: Float[Array, "*t"]
    coverage: Float[Array, "*t"]
    max_fitness: Float[Array, "*t"]
    fitness_reproducibility: Float[Array, "*t"]
    descriptor_reproducibility: Float[Array, "*t"]
    num_filled: Int[Array, "*t"]


def corrected_metrics(result: Reevaluated, qd_offset: float | Array) -> CorrectedMetrics:
    """`CorrectedMetrics` of `result` (what `reevaluated` returns), the QD-score with
    `qd_offset` per filled cell (as `qd_metrics`)."""
    m: QDMetrics = qd_metrics(result.repertoire, qd_offset)
    return CorrectedMetrics(
        qd_score=m.qd_score,
        coverage=m.coverage,
        max_fitness=m.max_fitness,
        fitness_reproducibility=jnp.nanmean(result.fitness_spread),
        descriptor_reproducibility=jnp.nanmean(result.descriptor_spread),
        num_filled=m.num_filled,
    )
