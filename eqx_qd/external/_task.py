"""A Python evaluator as a task of the compiled loop, and a NumPy example evaluator."""

import math
import typing
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._custom_types import PRNGKey
from .._tasks import AbstractTask
from ._evaluations import evaluate_one, Evaluations, Evaluator


def arm(genotype: np.ndarray) -> tuple[float, np.ndarray]:
    """A planar arm in NumPy, the evaluator `eqx-qd run external` runs by default: genes in
    `[0, 1]` (clipped) are the joint angles of equal links of total length 1, mapped to
    `[-pi, pi]`; the fitness is minus the genes' standard deviation, the descriptor the
    hand's position rescaled to `[0, 1]^2` (`eqx_qd.Arm`'s definition, in float64)."""
    genes = np.clip(np.asarray(genotype, dtype=np.float64).reshape(-1), 0.0, 1.0)
    angles = np.cumsum((genes - 0.5) * 2.0 * math.pi)
    link = 1.0 / genes.size
    hand = np.array([np.sum(link * np.cos(angles)), np.sum(link * np.sin(angles))])
    return -float(np.std(genes)), (hand + 1.0) / 2.0


@typing.final
class ExternalTask(AbstractTask):
    """A Python `evaluator(genotype) -> (fitness, descriptor)` as a task: what the host driver
    (`eqx-qd run external`) needs to know of it (the genotype's width and the range of its
    initial population, the descriptors' width and bounds, the QD offset), and a scoring
    function for the compiled loop that calls the evaluator on each candidate in this process
    (`jax.pure_callback`), failures recorded as -inf fitness and NaN descriptors.

    **Arguments:** `evaluator`; `genotype_dim`; `num_descriptors`; `genotype_bounds`, the
    `(low, high)` of the initial population's uniform genes; `descriptor_bounds`, the
    `(low, high)` of every descriptor; `qd_offset`, added to each elite's fitness in the
    QD-score; `timeout`, seconds a candidate may run (a POSIX alarm, main thread only).
    """

    evaluator: Evaluator = eqx.field(static=True)
    genotype_dim: int = eqx.field(static=True)
    width: int = eqx.field(static=True)
    genotype_range: tuple[float, float] = eqx.field(static=True)
    descriptor_range: tuple[float, float] = eqx.field(static=True)
    offset: float = eqx.field(static=True)
    timeout: float | None = eqx.field(static=True)

    def __init__(
        self,
        evaluator: Evaluator,
        genotype_dim: int,
        num_descriptors: int,
        *,
        genotype_bounds: tuple[float, float] = (0.0, 1.0),
        descriptor_bounds: tuple[float, float] = (0.0, 1.0),
        qd_offset: float = 0.0,
        timeout: float | int | None = None,
    ):
        if not callable(evaluator):
            raise TypeError(f"ExternalTask.evaluator must be callable, got {evaluator!r}")
        for what, n in (("genotype_dim", genotype_dim), ("num_descriptors", num_descriptors)):
            if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
                raise ValueError(f"ExternalTask.{what} must be a positive integer, got {n!r}")
        for what, (lo, hi) in (
            ("genotype_bounds", genotype_bounds),
            ("descriptor_bounds", descriptor_bounds),
        ):
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise ValueError(
                    f"ExternalTask.{what} must be finite with low < high, got {(lo, hi)}"
                )
        if not math.isfinite(qd_offset):
            raise ValueError(f"ExternalTask.qd_offset must be finite, got {qd_offset}")
        self.evaluator = evaluator
        self.genotype_dim = int(genotype_dim)
        self.width = int(num_descriptors)
        self.genotype_range = (float(genotype_bounds[0]), float(genotype_bounds[1]))
        self.descriptor_range = (float(descriptor_bounds[0]), float(descriptor_bounds[1]))
        self.offset = float(qd_offset)
        self.timeout = None if timeout is None else float(timeout)

    @property
    def num_descriptors(self) -> int:
        return self.width

    @property
    def descriptor_bounds(self) -> tuple[float, float]:
        return self.descriptor_range

    @property
    def qd_offset(self) -> float:
        return self.offset

    def init_genotypes(self, num: int, *, key: PRNGKey) -> Float[Array, "{num} genotype_dim"]:
        """`num` genotypes drawn uniformly within `genotype_bounds`."""
        lo, hi = self.genotype_range
        return jax.random.uniform(key, (num, self.genotype_dim), minval=lo, maxval=hi)

    def evaluate(self, genotypes: Any) -> Evaluations:
        """The `Evaluations` of the batch `genotypes` (NumPy or JAX), one candidate after
        another in this process."""
        rows = np.asarray(genotypes)
        outcomes = [evaluate_one(self.evaluator, r, self.width, self.timeout) for r in rows]
        return Evaluations.of(outcomes, self.width)

    def __call__(
        self, genotypes: Float[Array, "batch genotype_dim"], *, key: PRNGKey
    ) -> tuple[Float[Array, " batch"], Float[Array, "batch num_descriptors"], None]:
        n = genotypes.shape[0]
        shapes = (
            jax.ShapeDtypeStruct((n,), jnp.float32),
            jax.ShapeDtypeStruct((n, self.width), jnp.float32),
        )

        def host(rows):
            ev = self.evaluate(rows)
            return ev.fitnesses, ev.descriptors

        fitnesses, descriptors = jax.pure_callback(
            host, shapes, genotypes, vmap_method="sequential"
        )
        return fitnesses, descriptors, None
