"""Fast pure-JAX QD tasks: rastrigin, sphere and a planar arm.

A task is a module called as `task(genotypes, key=key) -> (fitnesses, descriptors, extra)` (the
scoring-function contract) that also knows its descriptor bounds, its QD-score offset and how to
draw an initial population.
"""

import abc
import math
import typing
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float

from . import _validate as check
from ._custom_types import Extra, PRNGKey
from ._misc import f32


class AbstractScorer(eqx.Module):
    """A scoring function that knows its QD-score offset: `scorer(genotypes, key=key) ->
    (fitnesses, descriptors, extra)`, and `qd_offset`, added to every elite's fitness in the
    QD-score so that it stays positive. Tasks and policy scorers are scorers, and `MAPElites`
    takes the offset of one; a plain function has none (give `MAPElites` its `qd_offset`)."""

    @property
    @abc.abstractmethod
    def qd_offset(self) -> float:
        """Added to every elite's fitness in the QD-score so that it stays positive."""

    @abc.abstractmethod
    def __call__(self, genotypes: Any, *, key: PRNGKey) -> tuple[Any, Any, Extra]:
        """The fitnesses `(batch,)`, descriptors `(batch, num_descriptors)` and extra scores of
        `genotypes`, one key for the batch."""


class AbstractTask(AbstractScorer):
    """A scoring function plus what MAP-Elites needs to know about it."""

    genotype_dim: eqx.AbstractVar[int]

    @property
    @abc.abstractmethod
    def num_descriptors(self) -> int: ...

    @property
    @abc.abstractmethod
    def descriptor_bounds(self) -> tuple[float, float]:
        """(min, max) of every descriptor dimension."""

    @property
    @abc.abstractmethod
    def qd_offset(self) -> float:
        """Added to every elite's fitness in the QD-score so that it stays positive."""

    @abc.abstractmethod
    def __call__(
        self, genotypes: Float[Array, "batch genotype_dim"], *, key: PRNGKey
    ) -> tuple[Float[Array, " batch"], Float[Array, "batch num_descriptors"], Extra]: ...

    @abc.abstractmethod
    def init_genotypes(self, num: int, *, key: PRNGKey) -> Float[Array, "{num} genotype_dim"]:
        """`num` genotypes to start a run from (`uniform_genotypes` draws them uniformly in
        `[0, 1]^genotype_dim`, as the built-in benchmark tasks do)."""


def uniform_genotypes(
    task: AbstractTask, num: int, *, key: PRNGKey
) -> Float[Array, "{num} genotype_dim"]:
    """`num` genotypes of `task` drawn uniformly in `[0, 1]^genotype_dim`."""
    return jr.uniform(key, (num, task.genotype_dim))


def _check_dim(owner: str, dim: int, minimum: int) -> None:
    check.integer(f"{owner}.genotype_dim", dim, minimum=minimum)


def _check_genotypes(task: AbstractTask, genotypes: Array) -> None:
    check.rows(f"{type(task).__name__}: genotypes", genotypes, (task.genotype_dim,))


@typing.final
class Rastrigin(AbstractTask):
    """Rastrigin on `y = 10x - 5` (maximised, optimum 0 at `x = 0.5`).

    Descriptor: the first two genes clipped to `[0, 1]`. QD offset `50 * genotype_dim`.
    Same definition as QDax's `rastrigin` with clipped descriptors.
    """

    genotype_dim: int = eqx.field(default=100, static=True)

    def __check_init__(self):
        _check_dim("Rastrigin", self.genotype_dim, 2)

    @property
    def num_descriptors(self) -> int:
        return 2

    @property
    def descriptor_bounds(self) -> tuple[float, float]:
        return (0.0, 1.0)

    @property
    def qd_offset(self) -> float:
        return 50.0 * self.genotype_dim

    def init_genotypes(self, num: int, *, key: PRNGKey) -> Float[Array, "{num} genotype_dim"]:
        """`num` genotypes drawn uniformly in `[0, 1]^genotype_dim`."""
        return uniform_genotypes(self, num, key=key)

    def __call__(
        self, genotypes: Float[Array, "batch genotype_dim"], *, key: PRNGKey
    ) -> tuple[Float[Array, " batch"], Float[Array, "batch 2"], None]:
        _check_genotypes(self, genotypes)
        y = 10.0 * genotypes - 5.0
        terms = y**2 - 10.0 * jnp.cos(2.0 * jnp.pi * y)
        fitnesses = -(10.0 * self.genotype_dim + jnp.sum(terms, axis=-1))
        return fitnesses, jnp.clip(genotypes[:, :2], 0.0, 1.0), None


@typing.final
class Sphere(AbstractTask):
    """Sphere `-sum(y^2)` on `y = 10x - 5` (optimum 0 at `x = 0.5`).

    Descriptor: the first two genes clipped to `[0, 1]`. QD offset `25 * genotype_dim`.
    """

    genotype_dim: int = eqx.field(default=100, static=True)

    def __check_init__(self):
        _check_dim("Sphere", self.genotype_dim, 2)

    @property
    def num_descriptors(self) -> int:
        return 2

    @property
    def descriptor_bounds(self) -> tuple[float, float]:
        return (0.0, 1.0)

    @property
    def qd_offset(self) -> float:
        return 25.0 * self.genotype_dim

    def init_genotypes(self, num: int, *, key: PRNGKey) -> Float[Array, "{num} genotype_dim"]:
        """`num` genotypes drawn uniformly in `[0, 1]^genotype_dim`."""
        return uniform_genotypes(self, num, key=key)

    def __call__(
        self, genotypes: Float[Array, "batch genotype_dim"], *, key: PRNGKey
    ) -> tuple[Float[Array, " batch"], Float[Array, "batch 2"], None]:
        _check_genotypes(self, genotypes)
        y = 10.0 * genotypes - 5.0
        return -jnp.sum(y**2, axis=-1), jnp.clip(genotypes[:, :2], 0.0, 1.0), None


@typing.final
class Arm(AbstractTask):
    """A planar arm of `genotype_dim` equal links of total length 1.

    Genes in `[0, 1]` map to joint angles in `[-pi, pi]`; fitness is minus the standard
    deviation of the genes (smooth postures win, at most 0.5 in magnitude); the descriptor is
    the end-effector position rescaled to `[0, 1]^2`. QD offset 1 (as in QDax's arm).
    """

    genotype_dim: int = eqx.field(default=8, static=True)

    def __check_init__(self):
        _check_dim("Arm", self.genotype_dim, 1)

    @property
    def num_descriptors(self) -> int:
        return 2

    @property
    def descriptor_bounds(self) -> tuple[float, float]:
        return (0.0, 1.0)

    @property
    def qd_offset(self) -> float:
        return 1.0

    def init_genotypes(self, num: int, *, key: PRNGKey) -> Float[Array, "{num} genotype_dim"]:
        """`num` genotypes drawn uniformly in `[0, 1]^genotype_dim`."""
        return uniform_genotypes(self, num, key=key)

    def __call__(
        self, genotypes: Float[Array, "batch genotype_dim"], *, key: PRNGKey
    ) -> tuple[Float[Array, " batch"], Float[Array, "batch 2"], None]:
        _check_genotypes(self, genotypes)
        genes = jnp.clip(genotypes, 0.0, 1.0)
        angles = (genes - 0.5) * 2.0 * math.pi
        cumulative = jnp.cumsum(angles, axis=-1)
        link = 1.0 / self.genotype_dim
        x = jnp.sum(link * jnp.cos(cumulative), axis=-1)
        y = jnp.sum(link * jnp.sin(cumulative), axis=-1)
        descriptors = (jnp.stack([x, y], axis=-1) + 1.0) / 2.0
        return -jnp.std(genes, axis=-1), descriptors, None


SPHERE_SHIFT = 0.4 * 5.12
"""Where the projected sphere's optimum lies in every coordinate."""


@typing.final
class ProjectedSphere(AbstractTask):
    """The sphere with linear-projection descriptors of the CMA-ME and CMA-MAE papers (pyribs'
    `examples/sphere.py`): the CMA family's benchmark; with `descriptor_dim` above 2, the 10-,
    20- and 50-D linear-projection tasks of Discount Model Search (Tjanaka et al., 2026).

    Fitness: `100 * (1 - sum((x - 2.048)^2) / worst)`, `worst = dim * (5.12 + 2.048)^2`, so
    that 100 is the optimum and the box `[-5.12, 5.12]^dim` scores at least 0 (the DMS paper's
    objective times 100, as pyribs' example scales it). Descriptors: the coordinates cut into
    `descriptor_dim` consecutive blocks (block `i` from `i * dim // descriptor_dim`), each
    summed after every coordinate outside `[-5.12, 5.12]` is replaced by `5.12 / x`; they lie
    in `+-(dim / descriptor_dim) * 5.12` (`descriptor_bounds`). Differentiable almost
    everywhere, so CMA-MEGA takes its gradients by autodiff. Initial genotypes are zeros
    (pyribs' `x0`). QD offset 0.

    **Fields:** `genotype_dim` (100), `descriptor_dim` (2; at most `genotype_dim`).
    """

    genotype_dim: int = eqx.field(default=100, static=True)
    descriptor_dim: int = eqx.field(default=2, static=True)

    def __check_init__(self):
        _check_dim("ProjectedSphere", self.genotype_dim, 2)
        check.integer("ProjectedSphere.descriptor_dim", self.descriptor_dim, minimum=1)
        if self.descriptor_dim > self.genotype_dim:
            raise ValueError(
                f"ProjectedSphere.descriptor_dim ({self.descriptor_dim}) must be at most "
                f"genotype_dim ({self.genotype_dim}): each descriptor sums a block of genes"
            )

    @property
    def num_descriptors(self) -> int:
        return self.descriptor_dim

    @property
    def descriptor_bounds(self) -> tuple[float, float]:
        half = self.genotype_dim / self.descriptor_dim * 5.12
        return (-half, half)

    @property
    def qd_offset(self) -> float:
        return 0.0

    def init_genotypes(self, num: int, *, key: PRNGKey) -> Float[Array, "{num} genotype_dim"]:
        """`num` copies of the origin."""
        return jnp.zeros((num, self.genotype_dim), jnp.float32)

    def __call__(
        self, genotypes: Float[Array, "batch genotype_dim"], *, key: PRNGKey
    ) -> tuple[Float[Array, " batch"], Float[Array, "batch num_descriptors"], None]:
        _check_genotypes(self, genotypes)
        dim, k = self.genotype_dim, self.descriptor_dim
        worst = dim * (5.12 + SPHERE_SHIFT) ** 2
        raw = jnp.sum((genotypes - SPHERE_SHIFT) ** 2, axis=-1)
        fitnesses = (raw - worst) / (0.0 - worst) * 100.0
        outside = jnp.abs(genotypes) > 5.12
        folded = jnp.where(outside, 5.12 / jnp.where(outside, genotypes, 1.0), genotypes)
        # Block membership as a (dim, k) 0/1 matrix: one product sums every block.
        edges = (np.arange(k + 1) * dim) // k
        genes = np.arange(dim)[:, None]
        block = (genes >= edges[None, :-1]) & (genes < edges[None, 1:])
        descriptors = folded @ jnp.asarray(block, folded.dtype)
        return fitnesses, descriptors, None


class AbstractWrappedTask(AbstractTask):
    """A task made from another, `task`, whose facts it keeps: the genotype size, the
    descriptors and their bounds, the QD offset and the initial genotypes (`Noisy`,
    `Sampled`). A subclass says how it scores (`__call__`); its own fields come after
    `task`."""

    task: AbstractTask

    def __check_init__(self):
        if not isinstance(self.task, AbstractTask):
            raise TypeError(
                f"{type(self).__name__}.task must be an AbstractTask, got "
                f"{type(self.task).__name__}"
            )

    @property
    def genotype_dim(self) -> int:
        return self.task.genotype_dim

    @property
    def num_descriptors(self) -> int:
        return self.task.num_descriptors

    @property
    def descriptor_bounds(self) -> tuple[float, float]:
        return self.task.descriptor_bounds

    @property
    def qd_offset(self) -> float:
        return self.task.qd_offset

    def init_genotypes(self, num: int, *, key: PRNGKey) -> Float[Array, "{num} genotype_dim"]:
        """The inner task's initial genotypes."""
        return self.task.init_genotypes(num, key=key)


@typing.final
class Noisy(AbstractWrappedTask):
    """`task` with Gaussian noise: on the genes before scoring (`genotype_noise`), then on the
    fitness (`fitness_noise`) and on each descriptor coordinate (`descriptor_noise`), each the
    standard deviation of its noise (0: none). QDax 0.5's `noisy_arm_scoring_function` is
    `Noisy(Arm(...), ...)`, with its keys: the call's key splits into four, the first for the
    inner task, then the fitness', the descriptor's and the genes' noise (QDax names the
    standard deviations `fit_variance`, `desc_variance`, `params_variance`).

    **Fields:** `task`; `fitness_noise`, `descriptor_noise`, `genotype_noise` (float32 leaves,
    non-negative).
    """

    fitness_noise: Float[Array, ""] = eqx.field(default=0.0, converter=f32)
    descriptor_noise: Float[Array, ""] = eqx.field(default=0.0, converter=f32)
    genotype_noise: Float[Array, ""] = eqx.field(default=0.0, converter=f32)

    def __check_init__(self):
        check.non_negative("Noisy.fitness_noise", self.fitness_noise)
        check.non_negative("Noisy.descriptor_noise", self.descriptor_noise)
        check.non_negative("Noisy.genotype_noise", self.genotype_noise)

    def __call__(
        self, genotypes: Float[Array, "batch genotype_dim"], *, key: PRNGKey
    ) -> tuple[Float[Array, " batch"], Float[Array, "batch num_descriptors"], Extra]:
        _check_genotypes(self, genotypes)
        key, f_key, d_key, g_key = jr.split(key, 4)
        noisy_genes = genotypes + jr.normal(g_key, genotypes.shape) * self.genotype_noise
        fitnesses, descriptors, extra = self.task(noisy_genes, key=key)
        fitnesses = fitnesses + jr.normal(f_key, fitnesses.shape) * self.fitness_noise
        descriptors = descriptors + jr.normal(d_key, descriptors.shape) * self.descriptor_noise
        return fitnesses, descriptors, extra


def _floats(values: Any) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


class _MultiObjective(AbstractTask):
    """Shared by the lagged multi-objective benchmarks: genes in `[minval, maxval]`, one
    objective per lag, descriptors the first `descriptor_dim` genes."""

    genotype_dim: eqx.AbstractVar[int]
    descriptor_dim: eqx.AbstractVar[int]
    lags: eqx.AbstractVar[tuple[float, ...]]
    minval: eqx.AbstractVar[float]
    maxval: eqx.AbstractVar[float]

    def __check_init__(self):
        name = type(self).__name__
        _check_dim(name, self.genotype_dim, 1)
        check.integer(f"{name}.descriptor_dim", self.descriptor_dim, minimum=1)
        if self.descriptor_dim > self.genotype_dim:
            raise ValueError(
                f"{name}.descriptor_dim ({self.descriptor_dim}) exceeds genotype_dim "
                f"({self.genotype_dim}): the descriptors are the first genes"
            )
        if len(self.lags) < 2:
            raise ValueError(f"{name}.lags must give at least two objectives, got {self.lags}")
        check.ordered(f"{name}.minval", self.minval, f"{name}.maxval", self.maxval)

    @property
    def num_objectives(self) -> int:
        """One objective per lag."""
        return len(self.lags)

    @property
    def num_descriptors(self) -> int:
        return self.descriptor_dim

    @property
    def descriptor_bounds(self) -> tuple[float, float]:
        return (self.minval, self.maxval)

    def _reach(self) -> np.ndarray:
        """Per objective, the largest distance from a gene in bounds to its lag."""
        lags = np.asarray(self.lags, np.float64)
        return np.maximum(np.abs(self.minval - lags), np.abs(self.maxval - lags))

    @abc.abstractmethod
    def _worst_per_gene(self) -> np.ndarray:
        """Per objective, the most one gene in bounds can take off it."""

    @property
    def reference_point(self) -> Float[Array, " num_objectives"]:
        """Below every genotype in bounds on every objective (see the class)."""
        return jnp.asarray(-self.genotype_dim * self._worst_per_gene() - 1.0, jnp.float32)

    @property
    def qd_offset(self) -> float:
        """The largest magnitude of the reference point."""
        return float(np.max(self.genotype_dim * self._worst_per_gene() + 1.0))

    def init_genotypes(self, num: int, *, key: PRNGKey) -> Float[Array, "{num} genotype_dim"]:
        """`num` genotypes drawn uniformly in `[minval, maxval]^genotype_dim`."""
        return jr.uniform(key, (num, self.genotype_dim), minval=self.minval, maxval=self.maxval)

    @abc.abstractmethod
    def _objectives(
        self, y: Float[Array, "batch num_objectives genotype_dim"]
    ) -> Float[Array, "batch num_objectives"]:
        """The objectives from `y`, each gene's offset from each objective's lag."""

    def __call__(
        self, genotypes: Float[Array, "batch genotype_dim"], *, key: PRNGKey
    ) -> tuple[Float[Array, "batch num_objectives"], Float[Array, "batch num_descriptors"], None]:
        _check_genotypes(self, genotypes)
        lags = jnp.asarray(self.lags, jnp.float32)
        y = genotypes[:, None, :] - lags[None, :, None]
        descriptors = jnp.clip(genotypes[:, : self.descriptor_dim], self.minval, self.maxval)
        return self._objectives(y), descriptors, None


@typing.final
class MultiObjectiveRastrigin(_MultiObjective):
    """The multi-objective Rastrigin of MOME's paper and QDax's MOME example: objective `j`
    is Rastrigin centred on `lags[j]`, `-(10 n + sum_i ((x_i - l_j)^2 - 10 cos(2 pi (x_i -
    l_j))))`, maximised; two objectives with QDax's lags `(0, 2.2)` by default, genes in
    `[-2, 4]`. Descriptors: the first `descriptor_dim` genes (clipped to the bounds).

    `reference_point`: `-n (d_j^2 + 20) - 1` per objective (`d_j` the farthest a gene in
    bounds is from `l_j`), strictly below every genotype in bounds, so every solution adds
    to the hypervolumes. QDax's example takes `(-150, -150)`, which no front reaches (see the
    migration guide). `qd_offset`: the largest of its magnitudes.

    **Fields:** `genotype_dim` (100), `descriptor_dim` (2), `lags`, `minval`, `maxval`.
    """

    genotype_dim: int = eqx.field(default=100, static=True)
    descriptor_dim: int = eqx.field(default=2, static=True)
    lags: tuple[float, ...] = eqx.field(default=(0.0, 2.2), static=True, converter=_floats)
    minval: float = eqx.field(default=-2.0, static=True)
    maxval: float = eqx.field(default=4.0, static=True)

    def _worst_per_gene(self) -> np.ndarray:
        return self._reach() ** 2 + 20.0

    def _objectives(self, y):
        terms = y**2 - 10.0 * jnp.cos(2.0 * jnp.pi * y)
        return -(10.0 * self.genotype_dim + jnp.sum(terms, axis=-1))


@typing.final
class MultiObjectiveSphere(_MultiObjective):
    """Multi-objective sphere: objective `j` is `-sum_i (x_i - l_j)^2`, maximised (QDax's
    sphere centred on each lag), two objectives with lags `(0, 2.2)` by default, genes in
    `[-2, 4]`. Descriptors: the first `descriptor_dim` genes (clipped). `reference_point`:
    `-n d_j^2 - 1` per objective, below every genotype in bounds.

    **Fields:** `genotype_dim` (100), `descriptor_dim` (2), `lags`, `minval`, `maxval`.
    """

    genotype_dim: int = eqx.field(default=100, static=True)
    descriptor_dim: int = eqx.field(default=2, static=True)
    lags: tuple[float, ...] = eqx.field(default=(0.0, 2.2), static=True, converter=_floats)
    minval: float = eqx.field(default=-2.0, static=True)
    maxval: float = eqx.field(default=4.0, static=True)

    def _worst_per_gene(self) -> np.ndarray:
        return self._reach() ** 2

    def _objectives(self, y):
        return -jnp.sum(y**2, axis=-1)
