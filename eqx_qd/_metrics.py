"""QD metrics: the columns of PGA-MAP-Elites' progress file, computed on device."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from . import _validate as check
from ._custom_types import PRNGKey
from ._knn import squared_distances
from ._pareto import hypervolume
from ._repertoire import AbstractRepertoire
from ._repertoire._pareto import ParetoRepertoire


class QDMetrics(eqx.Module):
    """Summary of a repertoire (scalars, or a leading time axis for a history).

    - `qd_score`: sum over filled cells of `fitness + qd_offset`.
    - `coverage`: fraction of filled cells, in `[0, 1]`.
    - `num_filled`: number of filled cells (the PGA-ME repo's "coverage" column).
    - `max_fitness`, `mean_fitness`, `median_fitness`, `p5_fitness`, `p95_fitness`: over the
      filled cells; `-inf` (max) or NaN (the others) for an empty repertoire.
    """

    qd_score: Float[Array, "*t"]
    coverage: Float[Array, "*t"]
    num_filled: Int[Array, "*t"]
    max_fitness: Float[Array, "*t"]
    mean_fitness: Float[Array, "*t"]
    median_fitness: Float[Array, "*t"]
    p5_fitness: Float[Array, "*t"]
    p95_fitness: Float[Array, "*t"]

    def as_dict(self) -> dict[str, Array]:
        """The metrics by name (the `progress.csv` columns)."""
        return {name: getattr(self, name) for name in METRIC_NAMES}


METRIC_NAMES = tuple(QDMetrics.__dataclass_fields__)


def _sorted(x: Float[Array, " n"]) -> Float[Array, " n"]:
    """`x` (float32, no NaN) in ascending order, sorted as order-preserving int32 keys.

    XLA's CPU sort calls a float comparator per comparison (it orders NaNs); on integers it
    takes a fast path, several times faster (`benchmarks/log/measurements-behind-the-code.md`).
    The key flips the 31 low bits of negative numbers, so that their order as int32 is their
    order as floats (-0.0 sorts just below +0.0); it is its own inverse.
    """
    bits = jax.lax.bitcast_convert_type(x.astype(jnp.float32), jnp.int32)
    keys = jax.lax.sort(bits ^ ((bits >> 31) & 0x7FFFFFFF))
    return jax.lax.bitcast_convert_type(keys ^ ((keys >> 31) & 0x7FFFFFFF), jnp.float32)


def qd_metrics(repertoire: AbstractRepertoire, qd_offset: float | Array) -> QDMetrics:
    """`QDMetrics` of `repertoire` with QD-score offset `qd_offset` (a finite scalar)."""
    check.shape("qd_metrics: qd_offset", qd_offset, ())
    check.finite("qd_metrics: qd_offset", qd_offset)
    fit = repertoire.fitnesses
    filled = jnp.isfinite(fit)
    num_filled = jnp.sum(filled, dtype=jnp.int32)
    qd_score = jnp.sum(jnp.where(filled, fit + qd_offset, 0.0))
    count = num_filled.astype(jnp.float32)
    # Filled fitnesses first, in ascending order; percentiles interpolate linearly between
    # order statistics (NumPy's default). One sort compiles much faster than nanpercentile.
    ordered = _sorted(jnp.where(filled, fit, jnp.inf))
    last = jnp.maximum(num_filled - 1, 0)

    def percentile(p: float) -> Array:
        pos = p / 100.0 * last.astype(jnp.float32)
        below = jnp.floor(pos).astype(jnp.int32)
        above = jnp.minimum(below + 1, last)
        value = ordered[below] + (pos - below.astype(jnp.float32)) * (
            ordered[above] - ordered[below]
        )
        return jnp.where(num_filled > 0, value, jnp.nan)

    p5, median, p95 = percentile(5.0), percentile(50.0), percentile(95.0)
    mean = jnp.sum(jnp.where(filled, fit, 0.0)) / count
    return QDMetrics(
        qd_score=qd_score.astype(jnp.float32),
        coverage=count / repertoire.capacity,
        num_filled=num_filled,
        max_fitness=jnp.max(fit),
        mean_fitness=jnp.where(num_filled > 0, mean, jnp.nan).astype(jnp.float32),
        median_fitness=median.astype(jnp.float32),
        p5_fitness=p5.astype(jnp.float32),
        p95_fitness=p95.astype(jnp.float32),
    )


def norm_qd_score(repertoire: AbstractRepertoire, qd_offset: float | Array) -> Float[Array, ""]:
    """The QD-score of `repertoire` (fitnesses offset by `qd_offset`) divided by its number
    of cells (`capacity`): pyribs' `norm_qd_score`, the mean offset fitness over all cells,
    empty ones counting 0. Comparable across archives of different sizes."""
    return qd_metrics(repertoire, qd_offset).qd_score / repertoire.capacity


def cqd_score(
    repertoire: AbstractRepertoire,
    targets: Float[Array, "iterations num_targets num_descriptors"],
    penalties: Float[Array, " num_penalties"],
    *,
    fitness_bounds: tuple[float, float],
    max_distance: float,
) -> Float[Array, ""]:
    """The continuous QD-score (Kent, Branke and others, GECCO 2022): a measure of an
    archive that needs no cells.

    For each target point `t` and penalty `theta`, the best trade-off any stored elite
    offers, `max_i [(f_i - f_min) / (f_max - f_min) - theta * |d_i - t| / max_distance]`,
    summed over targets and penalties; the mean over the `iterations` sets of targets.
    Draw `targets` uniformly over the descriptor space (`jax.random.uniform`), and give
    `penalties` in `[0, 1]` (`jnp.linspace(0, 1, 100)`, say). `-inf` for an empty archive.

    pyribs' `cqd_score` divides `f` by `f_max - f_min` without subtracting `f_min` first;
    its score is this one plus `num_targets * num_penalties * f_min / (f_max - f_min)`.

    **Arguments:**

    - `repertoire`: any repertoire.
    - `targets`: `(iterations, num_targets, num_descriptors)` points in descriptor space.
    - `penalties`: `(num_penalties,)` weights of the distance.
    - `fitness_bounds`: `(f_min, f_max)`, the fitness normalisation.
    - `max_distance`: the distance normalisation (the descriptor space's diameter).
    """
    f_min, f_max = fitness_bounds
    check.positive("cqd_score: max_distance", max_distance)
    if not float(f_max) > float(f_min):
        raise ValueError(
            "cqd_score: fitness_bounds must be (f_min, f_max) with f_min < f_max, got "
            f"{fitness_bounds}"
        )
    if jnp.ndim(targets) != 3 or jnp.shape(targets)[-1] != repertoire.num_descriptors:
        raise ValueError(
            "cqd_score: targets must have shape (iterations, num_targets, "
            f"{repertoire.num_descriptors}), got {jnp.shape(targets)}"
        )
    if jnp.ndim(penalties) != 1:
        raise ValueError(
            f"cqd_score: penalties must have shape (num_penalties,), got {jnp.shape(penalties)}"
        )
    filled = repertoire.filled
    quality = (repertoire.fitnesses - f_min) / (f_max - f_min)
    quality = jnp.where(filled, quality, -jnp.inf)

    def one(points):
        gaps = repertoire.descriptors[:, None, :] - points[None, :, :]
        distance = jnp.sqrt(jnp.sum(jnp.square(gaps), axis=-1)) / max_distance
        scores = quality[None, :, None] - penalties[:, None, None] * distance[None, :, :]
        return jnp.sum(jnp.max(scores, axis=1))

    return jnp.mean(jax.lax.map(one, jnp.asarray(targets, jnp.float32)))


def soft_qd_score(
    repertoire: AbstractRepertoire,
    *,
    sigma: float | Array,
    qd_offset: float | Array = 0.0,
    bounds: tuple[Array, Array] | None = None,
    num_samples: int = 65_536,
    key: PRNGKey,
) -> Float[Array, ""]:
    """The Soft QD score (Hedayatian and Nikolaidis, ICLR 2026): each stored elite lights the
    descriptor space with a Gaussian of width `sigma` and height its quality, and the score is
    the light over the space, `S = integral over B of max_n q_n exp(-|b - b_n|^2 / (2
    sigma^2)) db`. It needs no cells, grows when an elite is added or improved, and compares
    archives of any size or kind.

    `q_n = fitness_n + qd_offset`, taken as 0 where negative (the paper's qualities are
    non-negative: choose the offset as for the QD-score). `B` is the box `bounds = (lower,
    upper)`, by default the repertoire's `extent`; the integral is estimated by Monte Carlo from
    `num_samples` points drawn uniformly in it with `key` (its standard error falls as
    `1 / sqrt(num_samples)`), in chunks of 1,024 points. Divide by the box's volume for the
    mean light. 0 for an empty repertoire.
    """
    check.positive("soft_qd_score: sigma", sigma)
    check.finite("soft_qd_score: qd_offset", qd_offset)
    check.positive_int("soft_qd_score: num_samples", num_samples)
    d = repertoire.num_descriptors
    lower, upper = repertoire.extent if bounds is None else bounds
    lower = jnp.broadcast_to(jnp.asarray(lower, jnp.float32), (d,))
    upper = jnp.broadcast_to(jnp.asarray(upper, jnp.float32), (d,))
    if check.is_concrete(lower) and check.is_concrete(upper):
        check.ordered("soft_qd_score: bounds lower", lower, "upper", upper)
    quality = jnp.where(repertoire.filled, jnp.maximum(repertoire.fitnesses + qd_offset, 0.0), 0.0)
    centres = jnp.where(repertoire.filled[:, None], repertoire.descriptors, 0.0)
    chunk = 1024
    chunks = -(-num_samples // chunk)
    unit = jax.random.uniform(key, (chunks, chunk, d))
    used = (jnp.arange(chunks * chunk) < num_samples).reshape(chunks, chunk)

    def light(batch):
        points, keep = batch
        points = lower[None, :] + points * (upper - lower)[None, :]
        sq = squared_distances(points, centres)
        value = jnp.max(quality[None, :] * jnp.exp(-sq / (2.0 * sigma**2)), axis=1)
        return jnp.sum(jnp.where(keep, value, 0.0))

    total = jnp.sum(jax.lax.map(light, (unit, used)))
    return total / num_samples * jnp.prod(upper - lower)


class MOQDMetrics(eqx.Module):
    """Summary of a multi-objective repertoire (`ParetoRepertoire`; scalars, or a leading time
    axis for a history), every hypervolume taken with respect to one reference point.

    - `moqd_score`: the sum over cells of the hypervolume of the cell's front (MOME's
      MOQD-score; QDax reports the per-cell values and its example sums them).
    - `global_hypervolume`: the hypervolume of every stored solution together, that is of
      the global Pareto front.
    - `max_hypervolume`: the largest hypervolume of one cell (`-inf` for an empty archive).
    - `max_sum_scores`: the largest sum of objectives of a stored solution.
    - `coverage`: the fraction of cells holding a front, in `[0, 1]` (QDax: a percentage).
    - `num_solutions`: how many solutions the fronts hold.
    """

    moqd_score: Float[Array, "*t"]
    global_hypervolume: Float[Array, "*t"]
    max_hypervolume: Float[Array, "*t"]
    max_sum_scores: Float[Array, "*t"]
    coverage: Float[Array, "*t"]
    num_solutions: Int[Array, "*t"]

    def as_dict(self) -> dict[str, Array]:
        """The metrics by name."""
        return {name: getattr(self, name) for name in MOQD_METRIC_NAMES}


MOQD_METRIC_NAMES = tuple(MOQDMetrics.__dataclass_fields__)


def per_cell_hypervolumes(
    repertoire: ParetoRepertoire, reference_point: Float[Array, " num_objectives"]
) -> Float[Array, " num_cells"]:
    """The hypervolume of each cell's front of `repertoire` with respect to
    `reference_point` (0 for an empty cell): the terms of the MOQD-score."""
    return jax.vmap(lambda f, m: hypervolume(f, reference_point, m))(
        repertoire.front_objectives, repertoire.front_filled
    )


def moqd_metrics(
    repertoire: ParetoRepertoire, reference_point: Float[Array, " num_objectives"]
) -> MOQDMetrics:
    """`MOQDMetrics` of `repertoire` with respect to `reference_point` `(num_objectives,)`:
    a solution adds volume only where it is strictly above the reference point on every
    objective, so choose one that every solution beats (`check_reference_point` says
    whether it does; a task's `reference_point` does by construction)."""
    reference_point = jnp.asarray(reference_point, jnp.float32)
    check.shape("moqd_metrics: reference_point", reference_point, (repertoire.num_objectives,))
    check.finite("moqd_metrics: reference_point", reference_point)
    filled = repertoire.front_filled
    per_cell = per_cell_hypervolumes(repertoire, reference_point)
    occupied = jnp.any(filled, axis=-1)
    flat_filled = filled.reshape(-1)
    sums = repertoire.fitnesses
    return MOQDMetrics(
        moqd_score=jnp.sum(jnp.where(occupied, per_cell, 0.0)),
        global_hypervolume=hypervolume(repertoire.objectives, reference_point, flat_filled),
        max_hypervolume=jnp.max(jnp.where(occupied, per_cell, -jnp.inf)),
        max_sum_scores=jnp.max(sums),
        coverage=jnp.mean(occupied.astype(jnp.float32)),
        num_solutions=jnp.sum(flat_filled, dtype=jnp.int32),
    )


def check_reference_point(
    repertoire: ParetoRepertoire, reference_point: Float[Array, " num_objectives"]
) -> None:
    """Raise a `ValueError` naming the objective and the stored value when some solution of
    `repertoire` is not strictly above `reference_point` on every objective (its volume
    would be lost from the hypervolumes). Host-side: call it outside `jit`."""
    reference_point = np.asarray(reference_point, np.float32)
    check.shape(
        "check_reference_point: reference_point", reference_point, (repertoire.num_objectives,)
    )
    objectives = np.asarray(repertoire.objectives)
    filled = np.asarray(repertoire.front_filled).reshape(-1)
    if not filled.any():
        return
    worst = objectives[filled].min(axis=0)
    for j, (low, ref) in enumerate(zip(worst, reference_point)):
        if not low > ref:
            raise ValueError(
                f"reference_point does not bound the fronts: objective {j} has a stored value "
                f"{low:g}, not above the reference {ref:g}; give a reference point below "
                "every solution (the task's reference_point is)"
            )
