"""Variation operators: functions over batched pytree genotypes, and small modules wrapping them.

A *mutation* maps one batch of parents to children; a *variation* (crossover) maps two batches.
Every operator works leaf-wise on any pytree whose array leaves share a leading batch axis, and
clips to `[min_genotype, max_genotype]` when bounds are given. Names follow the PGA-MAP-Elites
configuration (`iso_sigma`, `line_sigma`, `eta_m`, `eta_c`, `sigma`, `mutation_rate`,
`crossover_rate`, `min_genotype`, `max_genotype`).
"""

import abc
import typing
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from . import _validate as check
from ._custom_types import BoundsLike, Genotypes, PRNGKey
from ._misc import batch_size_of, f32


Bound = Float[Array, ""] | None


def _bound(x: BoundsLike | None) -> Bound:
    return None if x is None else f32(x)


def _required(name: str) -> Callable[[BoundsLike | None], Array]:
    """`PolynomialMutation`'s bound converter: the mutation is scaled by the distance to both
    bounds, so `None` is refused, naming the field."""

    def convert(x: BoundsLike | None) -> Array:
        if x is None:
            raise ValueError(
                f"PolynomialMutation.{name} is required: the mutation is scaled by the "
                "distance to both bounds"
            )
        return f32(x)

    return convert


def _clip(x: Array, lo: Bound, hi: Bound) -> Array:
    if lo is None and hi is None:
        return x
    return jnp.clip(x, lo, hi)


def _leafwise(fn: Callable[..., Array], key: PRNGKey, *trees: Genotypes) -> Genotypes:
    """Apply `fn(key, *leaves)` to the array leaves of `trees` with one key per leaf."""
    leaves, treedef = jax.tree.flatten(trees[0])
    others = [treedef.flatten_up_to(t) for t in trees[1:]]
    keys = jr.split(key, max(len(leaves), 1))
    out = [
        fn(k, leaf, *(o[i] for o in others)) if eqx.is_array(leaf) else leaf
        for i, (k, leaf) in enumerate(zip(keys, leaves))
    ]
    return jax.tree.unflatten(treedef, out)


def _check_bounds(prefix: str, lo: BoundsLike | None, hi: BoundsLike | None) -> None:
    """Finite, ordered bounds where given; errors name `prefix + field`."""
    for name, value in (("min_genotype", lo), ("max_genotype", hi)):
        if value is not None:
            check.finite(f"{prefix}{name}", value)
    if lo is not None and hi is not None:
        check.ordered(f"{prefix}min_genotype", lo, f"{prefix}max_genotype", hi)


def _check_parents(where: str, x1: Genotypes, x2: Genotypes) -> None:
    """Refuse a second parent batch whose structure or leaf shapes differ from the first's
    (static facts: free under `jit`), naming the leaf and both shapes."""
    leaves1, def1 = jax.tree_util.tree_flatten_with_path(x1)
    leaves2, def2 = jax.tree_util.tree_flatten_with_path(x2)
    if def1 != def2:
        raise ValueError(f"{where}: x2 must have the structure of x1, {def1}; got {def2}")
    for (path, a), (_, b) in zip(leaves1, leaves2):
        if np.shape(a) != np.shape(b):
            raise ValueError(
                f"{where}: x2{jax.tree_util.keystr(path)} must have the shape of "
                f"x1{jax.tree_util.keystr(path)}, {np.shape(a)}; got {np.shape(b)}"
            )


def _add_noise(
    x: Genotypes,
    noise: Callable[[PRNGKey, Array], Array],
    mutation_rate: ArrayLike,
    min_genotype: BoundsLike | None,
    max_genotype: BoundsLike | None,
    key: PRNGKey,
) -> Genotypes:
    """Add `noise(key, gene_array)` to each gene of `x` with probability `mutation_rate`,
    then clip to the bounds given (the additive mutations: gaussian and uniform)."""

    def mutate(k, a):
        noise_key, mask_key = jr.split(k)
        mask = jr.uniform(mask_key, a.shape) < mutation_rate
        out = jnp.where(mask, a + noise(noise_key, a), a)
        return _clip(out, _bound(min_genotype), _bound(max_genotype))

    return _leafwise(mutate, key, x)


def _per_row(values: Array, like: Array) -> Array:
    return jnp.reshape(values, values.shape + (1,) * (like.ndim - 1))


class AbstractMutation(eqx.Module):
    """One parent per child. Subclass and implement `__call__` to add an operator."""

    @abc.abstractmethod
    def __call__(self, x: Genotypes, *, key: PRNGKey) -> Genotypes:
        """Children of the parent batch `x` (a pytree with a leading batch axis), shaped like
        `x`."""


class AbstractVariation(eqx.Module):
    """Two parents per child. Subclass and implement `__call__` to add an operator."""

    @abc.abstractmethod
    def __call__(self, x1: Genotypes, x2: Genotypes, *, key: PRNGKey) -> Genotypes:
        """Children of the parent batches `x1` and `x2` (pytrees of one structure with a
        shared leading batch axis): one child per pair, shaped like `x1`."""


@typing.final
class IsoLineVariation(AbstractVariation):
    """Iso+line-DD (Vassiliades & Mouret 2018): child `= x1 + iso_sigma * N(0, I) +
    line_sigma * N(0, 1) * (x2 - x1)`.

    The line coefficient is one draw per child, shared by all leaves of its genotype. Children
    are clipped to `[min_genotype, max_genotype]` when bounds are given.

    **Fields:** `iso_sigma`, `line_sigma`, and optional bounds `min_genotype`, `max_genotype`
    (float32 array leaves, so new values reuse the compiled program).
    """

    iso_sigma: Float[Array, ""] = eqx.field(converter=f32)
    line_sigma: Float[Array, ""] = eqx.field(converter=f32)
    min_genotype: Bound = eqx.field(default=None, converter=_bound)
    max_genotype: Bound = eqx.field(default=None, converter=_bound)

    def __check_init__(self):
        check.non_negative("IsoLineVariation.iso_sigma", self.iso_sigma)
        check.non_negative("IsoLineVariation.line_sigma", self.line_sigma)
        _check_bounds("IsoLineVariation.", self.min_genotype, self.max_genotype)

    def __call__(self, x1: Genotypes, x2: Genotypes, *, key: PRNGKey) -> Genotypes:
        _check_parents("IsoLineVariation", x1, x2)
        line_key, iso_key = jr.split(key)
        line = jr.normal(line_key, (batch_size_of(x1),)) * self.line_sigma

        def child(k, a, b):
            iso = jr.normal(k, a.shape, a.dtype) * self.iso_sigma
            out = a + iso + _per_row(line, a).astype(a.dtype) * (b - a)
            return _clip(out, self.min_genotype, self.max_genotype)

        return _leafwise(child, iso_key, x1, x2)


@typing.final
class UniformCrossover(AbstractVariation):
    """Uniform crossover: each gene of the child is `x2`'s with probability `swap_rate`,
    else `x1`'s. QDax's `polynomial_crossover(proportion_var_to_change=p)` copies
    `int(p * n)` genes of `x2` at positions drawn with replacement, so about a fraction
    `1 - exp(-p)` of the genes: `swap_rate = 1 - exp(-p)` matches it on average
    (0.39 for MOME's example's 0.5).

    **Fields:** `swap_rate`.
    """

    swap_rate: Float[Array, ""] = eqx.field(default=0.5, converter=f32)

    def __check_init__(self):
        check.fraction("UniformCrossover.swap_rate", self.swap_rate)

    def __call__(self, x1: Genotypes, x2: Genotypes, *, key: PRNGKey) -> Genotypes:
        _check_parents("UniformCrossover", x1, x2)

        def cross(k, a, b):
            return jnp.where(jr.uniform(k, a.shape) < self.swap_rate, b, a).astype(a.dtype)

        return _leafwise(cross, key, x1, x2)


@typing.final
class SBXCrossover(AbstractVariation):
    """Simulated binary crossover (Deb & Agrawal 1995) with distribution index `eta_c`.

    One child per pair of `x1` and `x2`. A gene is crossed with probability `crossover_rate`
    (copied from `x1` otherwise) into SBX's two children, spread around the parents' midpoint
    by the same factor; the child takes the second one, on `x2`'s side, with probability
    `side_rate`: 0.5 (the default) is the original PGA-ME code's random side, 0 always takes
    the first, on `x1`'s side. A large `eta_c` keeps children near their parents. Children are
    clipped to `[min_genotype, max_genotype]` when bounds are given.

    **Fields:** `eta_c`, `crossover_rate`, optional bounds `min_genotype`, `max_genotype`,
    and `side_rate`.
    """

    eta_c: Float[Array, ""] = eqx.field(converter=f32)
    crossover_rate: Float[Array, ""] = eqx.field(default=1.0, converter=f32)
    min_genotype: Bound = eqx.field(default=None, converter=_bound)
    max_genotype: Bound = eqx.field(default=None, converter=_bound)
    side_rate: Float[Array, ""] = eqx.field(default=0.5, converter=f32)

    def __check_init__(self):
        check.non_negative("SBXCrossover.eta_c", self.eta_c)
        check.fraction("SBXCrossover.crossover_rate", self.crossover_rate)
        check.fraction("SBXCrossover.side_rate", self.side_rate)
        _check_bounds("SBXCrossover.", self.min_genotype, self.max_genotype)

    def __call__(self, x1: Genotypes, x2: Genotypes, *, key: PRNGKey) -> Genotypes:
        _check_parents("SBXCrossover", x1, x2)
        eta_c = self.eta_c

        def cross(k, a, b):
            u_key, mask_key, side_key = jr.split(k, 3)
            u = jr.uniform(u_key, a.shape)
            exponent = 1.0 / (eta_c + 1.0)
            beta = jnp.where(u <= 0.5, (2.0 * u) ** exponent, (1.0 / (2.0 * (1.0 - u))) ** exponent)
            second = jr.uniform(side_key, a.shape) < self.side_rate
            near, far = jnp.where(second, b, a), jnp.where(second, a, b)
            child = 0.5 * ((1.0 + beta) * near + (1.0 - beta) * far)
            mask = jr.uniform(mask_key, a.shape) < self.crossover_rate
            out = jnp.where(mask, child, a).astype(a.dtype)
            return _clip(out, self.min_genotype, self.max_genotype)

        return _leafwise(cross, key, x1, x2)


@typing.final
class PolynomialMutation(AbstractMutation):
    """Deb's bounded polynomial mutation with distribution index `eta_m`: each gene is
    mutated with probability `mutation_rate`, by a perturbation scaled by the distance to the
    bounds `min_genotype` / `max_genotype` (so both are required).

    **Fields:** `eta_m`, `mutation_rate`, `min_genotype`, `max_genotype`.
    """

    eta_m: Float[Array, ""] = eqx.field(converter=f32)
    mutation_rate: Float[Array, ""] = eqx.field(converter=f32)
    min_genotype: Float[Array, ""] = eqx.field(converter=_required("min_genotype"))
    max_genotype: Float[Array, ""] = eqx.field(converter=_required("max_genotype"))

    def __check_init__(self):
        check.non_negative("PolynomialMutation.eta_m", self.eta_m)
        check.fraction("PolynomialMutation.mutation_rate", self.mutation_rate)
        _check_bounds("PolynomialMutation.", self.min_genotype, self.max_genotype)

    def __call__(self, x: Genotypes, *, key: PRNGKey) -> Genotypes:
        lo, hi, eta_m = self.min_genotype, self.max_genotype, self.eta_m

        def mutate(k, a):
            r_key, mask_key = jr.split(k)
            span = hi - lo
            y = jnp.clip(a, lo, hi)
            delta_1 = (y - lo) / span
            delta_2 = (hi - y) / span
            r = jr.uniform(r_key, a.shape)
            power = 1.0 / (eta_m + 1.0)
            below = 2.0 * r + (1.0 - 2.0 * r) * (1.0 - delta_1) ** (eta_m + 1.0)
            above = 2.0 * (1.0 - r) + 2.0 * (r - 0.5) * (1.0 - delta_2) ** (eta_m + 1.0)
            dq = jnp.where(r < 0.5, below**power - 1.0, 1.0 - above**power)
            mask = jr.uniform(mask_key, a.shape) < self.mutation_rate
            return jnp.clip(jnp.where(mask, y + dq * span, a), lo, hi).astype(a.dtype)

        return _leafwise(mutate, key, x)


@typing.final
class GaussianMutation(AbstractMutation):
    """Adds `sigma * N(0, 1)` to each gene with probability `mutation_rate`, then clips to
    `[min_genotype, max_genotype]` when bounds are given.

    **Fields:** `sigma`, `mutation_rate`, and optional bounds `min_genotype`, `max_genotype`.
    """

    sigma: Float[Array, ""] = eqx.field(converter=f32)
    mutation_rate: Float[Array, ""] = eqx.field(default=1.0, converter=f32)
    min_genotype: Bound = eqx.field(default=None, converter=_bound)
    max_genotype: Bound = eqx.field(default=None, converter=_bound)

    def __check_init__(self):
        check.non_negative("GaussianMutation.sigma", self.sigma)
        check.fraction("GaussianMutation.mutation_rate", self.mutation_rate)
        _check_bounds("GaussianMutation.", self.min_genotype, self.max_genotype)

    def __call__(self, x: Genotypes, *, key: PRNGKey) -> Genotypes:
        noise = lambda k, a: jr.normal(k, a.shape, a.dtype) * self.sigma
        return _add_noise(x, noise, self.mutation_rate, self.min_genotype, self.max_genotype, key)


@typing.final
class UniformMutation(AbstractMutation):
    """Adds `U(-max_uniform, max_uniform)` to each gene with probability `mutation_rate`,
    then clips to `[min_genotype, max_genotype]` when bounds are given (the PGA-MAP-Elites
    repository's `uniform_mutation`).

    **Fields:** `max_uniform`, `mutation_rate`, and optional bounds `min_genotype`,
    `max_genotype`.
    """

    max_uniform: Float[Array, ""] = eqx.field(converter=f32)
    mutation_rate: Float[Array, ""] = eqx.field(default=1.0, converter=f32)
    min_genotype: Bound = eqx.field(default=None, converter=_bound)
    max_genotype: Bound = eqx.field(default=None, converter=_bound)

    def __check_init__(self):
        check.non_negative("UniformMutation.max_uniform", self.max_uniform)
        check.fraction("UniformMutation.mutation_rate", self.mutation_rate)
        _check_bounds("UniformMutation.", self.min_genotype, self.max_genotype)

    def __call__(self, x: Genotypes, *, key: PRNGKey) -> Genotypes:
        noise = lambda k, a: jr.uniform(k, a.shape, a.dtype, -1.0, 1.0) * self.max_uniform
        return _add_noise(x, noise, self.mutation_rate, self.min_genotype, self.max_genotype, key)


@typing.final
class MutatedVariation(AbstractVariation):
    """A two-parent variation whose children are then mutated: the PGA-MAP-Elites
    repository's GA when both a `crossover_op` and a `mutation_op` are set.

    **Fields:** `variation`, `mutation`.
    """

    variation: AbstractVariation
    mutation: AbstractMutation

    def __check_init__(self):
        if not isinstance(self.variation, AbstractVariation):
            raise TypeError(
                f"MutatedVariation.variation must be an AbstractVariation, got {self.variation!r}"
            )
        if not isinstance(self.mutation, AbstractMutation):
            raise TypeError(
                f"MutatedVariation.mutation must be an AbstractMutation, got {self.mutation!r}"
            )

    def __call__(self, x1: Genotypes, x2: Genotypes, *, key: PRNGKey) -> Genotypes:
        cross_key, mutate_key = jr.split(key)
        return self.mutation(self.variation(x1, x2, key=cross_key), key=mutate_key)
