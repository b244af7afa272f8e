"""The contract of an evolution strategy behind the ES emitters, and what the strategies share.

An emitter of the CMA family (CMA-ME, CMA-MAE) runs many strategies side by side: it asks each
for a batch (`sample`), ranks the batch by the archive, tells the strategy the order and the
number of parents (`tell`), asks whether it should restart (`should_stop`) and restarts it at
an elite (`init`). Any strategy with these methods can stand in for full CMA-ES: pyribs 0.12
offers sep-CMA-ES, LM-MA-ES and OpenAI-ES behind the same emitter, for solutions too large for
an `n x n` covariance (Tjanaka et al., "Scalable CMA-MAE").

`tell` takes the samples themselves, not the noise they were drawn from: an emitter's `emit`
returns genotypes and cannot write its state, so each strategy recovers what it needs from the
samples (CMA-ES whitens the mean's move by `C^-1/2`, LM-MA-ES inverts its rank-one factors,
OpenAI-ES divides by its step size).
"""

import abc
import math
import types
from collections.abc import Callable
from typing import Generic, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from equinox import AbstractVar
from jaxtyping import Array, Bool, Float, Int, PyTree, ScalarLike

from . import _validate as check
from ._custom_types import PRNGKey
from ._misc import i32


RESAMPLE_TRIES = 100
"""Draws per candidate before an out-of-bounds candidate is clipped into the bounds (pyribs
redraws on and warns). In a box small against `sigma` in many dimensions most candidates end
clipped (95.6% at dim 20, sigma 1, box [-1, 1]) and the strategy is told points it did not
sample: start with a `sigma0` well inside the box."""

FLAT_SPREAD = 1e-12
"""A strategy whose best and worst ranking values are closer than this restarts (pyribs)."""

_S = TypeVar("_S", bound=eqx.Module)


def default_batch_size(dim: int) -> int:
    """pyribs' (and pycma's) default number of candidates per generation,
    `4 + floor(3 ln dim)`."""
    return 4 + int(3 * math.log(dim))


def check_sizes(owner: str, dim: int, batch_size: int | None, sigma0: ScalarLike) -> int:
    """Every strategy's arguments checked (`dim` a positive int, `batch_size` an int of at
    least 2, `sigma0` positive; errors start with `owner`); returns the batch size, pyribs'
    default (`default_batch_size`) when `batch_size` is None."""
    check.positive_int(f"{owner}.dim", dim)
    batch_size = default_batch_size(dim) if batch_size is None else batch_size
    check.integer(f"{owner}.batch_size", batch_size, minimum=2)
    check.positive(f"{owner}.sigma0", sigma0)
    return batch_size


def flat(sorted_values: Float[Array, "batch ..."]) -> Bool[Array, ""]:
    """Whether the ranking values, best first, are flat: the norm of best minus worst below
    `FLAT_SPREAD` (the norm, as the values may be pairs)."""
    spread = jnp.linalg.norm(jnp.atleast_1d(sorted_values[0] - sorted_values[-1]))
    return spread < FLAT_SPREAD


def resample_in_bounds(
    draw: Callable[[PRNGKey], Float[Array, "batch dim"]],
    lower: Float[Array, " dim"],
    upper: Float[Array, " dim"],
    bounded: bool,
    *,
    key: PRNGKey,
) -> Float[Array, "batch dim"]:
    """A batch from `draw`, each candidate outside `lower` / `upper` drawn again (`draw` gets a
    fresh key each time) until all are inside or `RESAMPLE_TRIES` draws passed, then clipped
    (pyribs' bounds handling). With `bounded` False the first draw is returned."""

    def outside(x) -> Bool[Array, " batch"]:
        return jnp.any((x < lower[None, :]) | (x > upper[None, :]), axis=-1)

    key, first = jr.split(key)
    solutions = draw(first)
    if not bounded:
        return solutions

    def cond(carry):
        _, x, tries = carry
        return jnp.any(outside(x)) & (tries < RESAMPLE_TRIES)

    def body(carry):
        k, x, tries = carry
        k, sub = jr.split(k)
        fresh = draw(sub)
        return k, jnp.where(outside(x)[:, None], fresh, x), tries + 1

    _, solutions, _ = jax.lax.while_loop(cond, body, (key, solutions, i32(1)))
    return jnp.clip(solutions, lower[None, :], upper[None, :])


def parent_weights(
    num_parents: int | Int[Array, ""], batch_size: int, xp: types.ModuleType = jnp
) -> Float[Array | np.ndarray, " batch"]:
    """Recombination weights of the `num_parents` best of a batch of `batch_size`:
    `log(mu + 1/2) - log(i)` for ranks `i = 1..mu`, normalised to sum 1; zero past `mu`.
    (`xp=numpy` computes them on the host in float64, as pyribs does, for the sizes fixed at
    construction.)"""
    dtype = jnp.float32 if xp is jnp else np.float64
    ranks = xp.arange(1, batch_size + 1, dtype=dtype)
    mu = xp.asarray(num_parents).astype(dtype)
    raw = xp.where(ranks <= mu, xp.log(mu + 0.5) - xp.log(ranks), 0.0)
    return raw / xp.maximum(xp.sum(raw), 1e-30)


def check_bounds(
    owner: str,
    dim: int,
    lower: ScalarLike | Float[Array, " dim"],
    upper: ScalarLike | Float[Array, " dim"],
) -> tuple[Float[Array, " dim"], Float[Array, " dim"], bool]:
    """`lower` and `upper` as `(dim,)` float32 arrays, checked (no NaN, lower <= upper), and
    whether any bound is finite (True when they are traced, so the redraw loop is compiled)."""
    low = jnp.broadcast_to(jnp.asarray(lower, jnp.float32), (dim,))
    high = jnp.broadcast_to(jnp.asarray(upper, jnp.float32), (dim,))
    if not (check.is_concrete(low) and check.is_concrete(high)):
        return low, high, True
    if bool(jnp.any(jnp.isnan(low))) or bool(jnp.any(jnp.isnan(high))):
        raise ValueError(f"{owner}: lower and upper must not hold NaN")
    check.ordered(f"{owner}.lower", low, f"{owner}.upper", high)
    return low, high, bool(jnp.any(jnp.isfinite(low) | jnp.isfinite(high)))


def if_parents(num_parents: Int[Array, ""], told: _S, counted: _S) -> _S:
    """`told` where a generation had parents, else `counted` (pyribs returns from `tell`
    before any update when no candidate is a parent)."""
    return jax.tree.map(lambda a, b: jnp.where(num_parents > 0, a, b), told, counted)


def adam_ascent(
    theta: Float[Array, " dim"],
    moment1: Float[Array, " dim"],
    moment2: Float[Array, " dim"],
    steps: Int[Array, ""],
    ascent: Float[Array, " dim"],
    lr: Float[Array, ""],
    beta1: Float[Array, ""],
    beta2: Float[Array, ""],
    epsilon: Float[Array, ""],
    l2_coeff: Float[Array, ""] | float = 0.0,
) -> tuple[Float[Array, " dim"], Float[Array, " dim"], Float[Array, " dim"], Int[Array, ""]]:
    """One step of pyribs' `AdamOpt` up the ascent direction `ascent`: Adam on the loss
    gradient `-ascent + l2_coeff * theta` (L2 regularisation, not weight decay), with the bias
    correction folded into the step size, `lr sqrt(1 - beta2^t) / (1 - beta1^t)`, and `epsilon`
    added to `sqrt(moment2)` uncorrected (optax's `adam` adds it to the corrected root, a
    different step while `moment2` is small). Returns `theta`, the moments and the step count."""
    gradient = -ascent + l2_coeff * theta
    steps = steps + 1
    t = steps.astype(jnp.float32)
    scale = lr * jnp.sqrt(1.0 - beta2**t) / (1.0 - beta1**t)
    moment1 = beta1 * moment1 + (1.0 - beta1) * gradient
    moment2 = beta2 * moment2 + (1.0 - beta2) * gradient * gradient
    theta = theta - scale * moment1 / (jnp.sqrt(moment2) + epsilon)
    return theta, moment1, moment2, steps


def select(which: Bool[Array, " population"], new: _S, old: _S) -> _S:
    """A population's strategies from `new` where `which`, from `old` elsewhere (every field
    has the population's leading axis)."""

    def pick(a, b):
        return jnp.where(which.reshape(which.shape + (1,) * (a.ndim - which.ndim)), a, b)

    return jax.tree.map(pick, new, old)


def tree_bytes(tree: PyTree) -> int:
    """Bytes held by the array leaves of `tree` (shapes and dtypes only: `tree` may be a
    `jax.eval_shape` result, so nothing is allocated to measure it)."""
    leaves = [x for x in jax.tree.leaves(tree) if hasattr(x, "shape")]
    return sum(math.prod(x.shape) * jnp.dtype(x.dtype).itemsize for x in leaves)


class AbstractEvolutionStrategy(eqx.Module, Generic[_S]):
    """An evolution strategy over `dim` variables drawing `batch_size` candidates per
    generation, whose state `_S` is an `eqx.Module` (a population of strategies is that state
    with a leading axis, under `eqx.filter_vmap`).

    The loop an ES emitter runs: `sample`, evaluate, rank, `tell`, `should_stop` (and `init`
    at an elite when it says so), then `refresh_many` over the population before the next
    `sample`.
    """

    dim: AbstractVar[int]
    batch_size: AbstractVar[int]

    @abc.abstractmethod
    def init(self, mean: Float[Array, " dim"]) -> _S:
        """A fresh strategy centred on `mean`."""

    @abc.abstractmethod
    def sample(self, state: _S, *, key: PRNGKey) -> Float[Array, "batch dim"]:
        """`batch_size` candidates from the strategy's distribution, within its bounds."""

    @abc.abstractmethod
    def tell(
        self,
        state: _S,
        solutions: Float[Array, "batch dim"],
        order: Int[Array, " batch"],
        num_parents: Int[Array, ""],
    ) -> _S:
        """`state` after a generation: `solutions` (the batch `sample` drew) ranked best
        first by `order` (indices into `solutions`); `num_parents` of them are parents
        (a traced count: CMA-ME's `filter` rule makes it vary per generation, zero included)."""

    @abc.abstractmethod
    def should_stop(self, state: _S, sorted_values: Float[Array, "batch ..."]) -> Bool[Array, ""]:
        """Whether `state` should restart, by its tolerances and the ranking values of
        the last batch (`sorted_values`, best first)."""

    @abc.abstractmethod
    def refresh_many(self, states: _S, *, batched: bool | None = None) -> _S:
        """A population's states (leading axis on every field) made ready for the next
        `sample`: CMA-ES recomputes its square roots where its lazy gap has passed (`batched`:
        all at once or one by one, see `CMAES.refresh_many`); the strategies with nothing to
        recompute return `states` as they are."""

    @property
    def state_bytes(self) -> int:
        """Bytes one strategy's state holds, from its shapes (nothing is allocated): a
        population of them costs this times its size."""
        mean = jax.ShapeDtypeStruct((self.dim,), jnp.float32)
        return tree_bytes(jax.eval_shape(self.init, mean))
