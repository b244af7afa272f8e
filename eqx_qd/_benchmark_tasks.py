"""The cheap benchmark functions of the QD literature that QDax ships: Mouret's hypervolume
functions (square, checkered, empty circle, islands) and the QD-suite of Salehi and Doncieux
(the Archimedean spiral, the self-similar function, deceptive evolvability).

Each is an `AbstractTask` computing what QDax 0.5's function of the same name computes, with
the same float32 operations where their order changes the last bit (the spiral's bisection,
the self-similar function's shells): `benchmarks/test_functions.py` checks them against QDax
on 10,000 genotypes each and `tests/core/test_benchmark_tasks.py` against a committed sample of
QDax's outputs. QDax's QD-suite tasks score every genotype 1: they measure exploration (the
coverage of the descriptor space), not optimisation, so their QD-score is their coverage.
"""

import abc
import math
import typing
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from . import _validate as check
from ._custom_types import PRNGKey
from ._misc import f32
from ._tasks import _check_dim, _check_genotypes, AbstractTask, uniform_genotypes


class _Hypervolume(AbstractTask):
    """Shared by Mouret's functions: genes meant in `[0, 1]^n` (not clipped, as in QDax), one
    descriptor per gene; a function gives its scores (`_scores`), its descriptor bounds and
    its QD offset."""

    genotype_dim: eqx.AbstractVar[int]
    bounds: eqx.AbstractClassVar[tuple[float, float]]
    offset: eqx.AbstractClassVar[float]

    def __check_init__(self):
        _check_dim(type(self).__name__, self.genotype_dim, 1)

    @property
    def num_descriptors(self) -> int:
        return self.genotype_dim

    @property
    def descriptor_bounds(self) -> tuple[float, float]:
        return self.bounds

    @property
    def qd_offset(self) -> float:
        return self.offset

    def init_genotypes(self, num: int, *, key: PRNGKey) -> Float[Array, "{num} genotype_dim"]:
        """`num` genotypes drawn uniformly in `[0, 1]^genotype_dim`."""
        return uniform_genotypes(self, num, key=key)

    @abc.abstractmethod
    def _scores(
        self, x: Float[Array, "batch genotype_dim"]
    ) -> tuple[Float[Array, " batch"], Float[Array, "batch genotype_dim"]]:
        """The fitnesses and descriptors of the genotypes `x`."""

    def __call__(
        self, genotypes: Float[Array, "batch genotype_dim"], *, key: PRNGKey
    ) -> tuple[Float[Array, " batch"], Float[Array, "batch genotype_dim"], None]:
        _check_genotypes(self, genotypes)
        return (*self._scores(genotypes), None)


@typing.final
class Square(_Hypervolume):
    """Mouret's square (QDax's `hypervolume_functions.square`): fitness `1 - prod(x)`,
    descriptors `sin(5 x)`, genes meant in `[0, 1]`. The descriptors of genes in `[0, 1]` lie
    in `[sin 5, 1]`, within `descriptor_bounds` `(-1, 1)`.

    **Fields:** `genotype_dim` (2; also the number of descriptors).
    """

    genotype_dim: int = eqx.field(default=2, static=True)
    bounds: ClassVar[tuple[float, float]] = (-1.0, 1.0)
    offset: ClassVar[float] = 0.0

    def _scores(self, x):
        return 1.0 - jnp.prod(x, axis=-1), jnp.sin(5.0 * x)


@typing.final
class Checkered(_Hypervolume):
    """Mouret's checkered function (QDax's `checkered`): fitness `prod(sin(50 x))`, a
    checkerboard of peaks and pits, descriptors `sin(5 x)`. QD offset 1 (the fitness is at
    least -1).

    **Fields:** `genotype_dim` (2; also the number of descriptors).
    """

    genotype_dim: int = eqx.field(default=2, static=True)
    bounds: ClassVar[tuple[float, float]] = (-1.0, 1.0)
    offset: ClassVar[float] = 1.0

    def _scores(self, x):
        return jnp.prod(jnp.sin(x * 50.0), axis=-1), jnp.sin(x * 5.0)


@typing.final
class EmptyCircle(_Hypervolume):
    """Mouret's empty circle (QDax's `empty_circle`): fitness a Gaussian bump of the
    distance `r` from the centre `(0.5, ..., 0.5)`, `exp(-(r - 0.5)^2 / (2 * 0.3^2))`,
    highest on the sphere of radius 0.5 and low at its centre; descriptors `sin(40 x)`, which
    fold each gene's range over several periods.

    **Fields:** `genotype_dim` (2; also the number of descriptors).
    """

    genotype_dim: int = eqx.field(default=2, static=True)
    bounds: ClassVar[tuple[float, float]] = (-1.0, 1.0)
    offset: ClassVar[float] = 0.0

    def _scores(self, x):
        distance = jnp.linalg.norm(x - 0.5, axis=-1)
        fitnesses = jnp.exp(-((distance - 0.5) ** 2.0) / (2.0 * 0.3**2.0))
        return fitnesses, jnp.sin(40.0 * x)


@typing.final
class Islands(_Hypervolume):
    """Mouret's islands (QDax's `non_continous_islands`, and `continous_islands` with
    `continuous=True`): fitness `prod(x)`; descriptors each gene rounded to a tenth (eleven
    islands per dimension, nothing between them), or, continuous, `x - sin(20 pi x) / (20 pi)`
    (a staircase with smooth steps: flat near every tenth). Descriptors of genes in `[0, 1]`
    lie in `[0, 1]` (`descriptor_bounds`).

    **Fields:** `genotype_dim` (2; also the number of descriptors), `continuous` (False).
    """

    genotype_dim: int = eqx.field(default=2, static=True)
    continuous: bool = eqx.field(default=False, static=True)
    bounds: ClassVar[tuple[float, float]] = (0.0, 1.0)
    offset: ClassVar[float] = 0.0

    def _scores(self, x):
        if self.continuous:
            wave = 20.0 * jnp.pi
            return jnp.prod(x, axis=-1), x - jnp.sin(wave * x) / wave
        return jnp.prod(x, axis=-1), jnp.round(10.0 * x) / 10.0


SPIRAL_GENES = ("angle", "arc_length")
SPIRAL_DESCRIPTORS = ("euclidean", "geodesic")


@typing.final
class ArchimedeanSpiral(AbstractTask):
    """The QD-suite's Archimedean spiral (Salehi et al., 2022; QDax's `ArchimedeanSpiralV0`):
    one gene places a point on the spiral `gamma(t) = amplitude * t * (cos t, sin t)`, `t` in
    `[0, alpha * pi]`. `genes`: the gene is the angle `t` (`"angle"`) or the arc length from
    the centre (`"arc_length"`, turned into the angle by bisection to `precision`, as QDax
    does). `descriptor`: the point itself (`"euclidean"`, 2-D) or its arc length
    (`"geodesic"`, 1-D). The fitness is 1 everywhere: the task measures how much of the
    spiral a method reaches from its starting point, the angle `2 pi (1 + floor(alpha / 4))`
    near the middle (`init_genotypes`, QDax's start), where the arc length and the
    Euclidean descriptor disagree about distances.

    **Fields:** `genes` ("angle"), `descriptor` ("euclidean"), `amplitude` (0.01, a float32
    leaf), `alpha` (40: the spiral's extent), `precision` (the bisection's width, `alpha *
    pi / 1e7` when None).
    """

    genes: str = eqx.field(default="angle", static=True)
    descriptor: str = eqx.field(default="euclidean", static=True)
    amplitude: Float[Array, ""] = eqx.field(default=0.01, converter=f32)
    # The spiral's extent, a Python float as in QDax: its last angle alpha * pi enters the
    # bisection rounded once to float32 (computing it in float32 moved it by one ulp).
    alpha: float = eqx.field(default=40.0, static=True, converter=float)
    precision: float | None = eqx.field(default=None, static=True)

    def __check_init__(self):
        check.one_of("ArchimedeanSpiral.genes", self.genes, SPIRAL_GENES)
        check.one_of("ArchimedeanSpiral.descriptor", self.descriptor, SPIRAL_DESCRIPTORS)
        check.positive("ArchimedeanSpiral.amplitude", self.amplitude)
        check.positive("ArchimedeanSpiral.alpha", self.alpha)
        if self.precision is not None:
            check.positive("ArchimedeanSpiral.precision", self.precision)

    @property
    def genotype_dim(self) -> int:
        return 1

    @property
    def num_descriptors(self) -> int:
        return 2 if self.descriptor == "euclidean" else 1

    @property
    def max_angle(self) -> float:
        """The spiral's last angle, `alpha * pi`."""
        return self.alpha * math.pi

    @property
    def descriptor_bounds(self) -> tuple[float, float]:
        """`+-` the spiral's largest radius (Euclidean), or `[0, its length]` (geodesic)."""
        if self.descriptor == "euclidean":
            radius = float(jnp.linalg.norm(self._point(jnp.float32(self.max_angle))))
            return (-radius, radius)
        return (0.0, float(self.arc_length(jnp.float32(self.max_angle))))

    @property
    def qd_offset(self) -> float:
        return 0.0

    def arc_length(self, angle: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        """The spiral's length from its centre to `angle`."""
        root = jnp.sqrt(1.0 + angle**2)
        return (self.amplitude / 2.0) * (angle * root + jnp.log(angle + root))

    def _point(self, angle: Float[Array, "*shape"]) -> Float[Array, "*shape 2"]:
        r = self.amplitude * angle
        return jnp.stack([r * jnp.cos(angle), r * jnp.sin(angle)], axis=-1)

    def angle_at(self, length: Float[Array, ""]) -> Float[Array, ""]:
        """The angle at arc length `length`: bisection of `[0, alpha * pi]` until the
        interval is at most `precision` wide (the midpoint of the last one)."""

        precision = self.max_angle / 1e7 if self.precision is None else self.precision

        def wide(bounds):
            low, high = bounds
            return high - low > precision

        def halve(bounds):
            low, high = bounds
            middle = (low + high) / 2.0
            below = length < self.arc_length(middle)
            return jnp.where(below, low, middle), jnp.where(below, middle, high)

        start = (jnp.float32(0.0), jnp.float32(self.max_angle))
        low, high = jax.lax.while_loop(wide, halve, start)
        return (low + high) / 2.0

    def init_genotypes(self, num: int, *, key: PRNGKey) -> Float[Array, "{num} 1"]:
        """`num` copies of QDax's start: the angle `2 pi (1 + floor(alpha pi / 2 / 2 pi))`
        (the spiral crossing the positive x-axis near its middle), or its arc length."""
        turns = 1 + int(self.max_angle / 2.0 / (2.0 * math.pi))
        angle = jnp.float32(turns * jnp.pi * 2)
        start = angle if self.genes == "angle" else self.arc_length(angle)
        return jnp.full((num, 1), start, jnp.float32)

    def __call__(
        self, genotypes: Float[Array, "batch 1"], *, key: PRNGKey
    ) -> tuple[Float[Array, " batch"], Float[Array, "batch num_descriptors"], None]:
        _check_genotypes(self, genotypes)
        gene = genotypes[:, 0]
        if self.descriptor == "geodesic":
            descriptors = gene if self.genes == "arc_length" else self.arc_length(gene)
            descriptors = descriptors[:, None]
        else:
            angle = jax.vmap(self.angle_at)(gene) if self.genes == "arc_length" else gene
            descriptors = self._point(angle)
        return jnp.ones(gene.shape, jnp.float32), descriptors, None


@typing.final
class SelfSimilar(AbstractTask):
    """The QD-suite's self-similar function (SSF; QDax's `SsfV0`): the descriptor of `x` is
    its norm `|x|`, frozen on plateaus: radii `R_0 = 0 < R_1 < R_2 < ...` with
    `R_{2k+1} - R_{2k} = R_{2k+2} - R_{2k+1} = 2 k^3 + 1` (`k >= 0`); a norm between `R_{2k}`
    and `R_{2k+1}` reads itself, one in `[R_{2k+1}, R_{2k+2}]` reads `R_{2k+1}`. Ever longer
    plateaus, where small steps change nothing, make the norm harder and harder to push out.
    Fitness 1; genes unbounded, starting at zero. `descriptor_bounds` `(0, 1000)`, QDax's
    bounded version.

    **Fields:** `genotype_dim` (1).
    """

    genotype_dim: int = eqx.field(default=1, static=True)

    def __check_init__(self):
        _check_dim("SelfSimilar", self.genotype_dim, 1)

    @property
    def num_descriptors(self) -> int:
        return 1

    @property
    def descriptor_bounds(self) -> tuple[float, float]:
        return (0.0, 1000.0)

    @property
    def qd_offset(self) -> float:
        return 0.0

    def init_genotypes(self, num: int, *, key: PRNGKey) -> Float[Array, "{num} genotype_dim"]:
        """`num` copies of the origin."""
        return jnp.zeros((num, self.genotype_dim), jnp.float32)

    @staticmethod
    def plateau_start(norm: Float[Array, ""]) -> Float[Array, ""]:
        """`R_{2k+1}` of the shell pair holding `norm`: the first odd radius whose next
        radius is at least `norm`."""

        def step(k):  # what R_{2k+2} - R_{2k+1} and R_{2k+3} - R_{2k+2} add: 2 k^3 + 1
            return (2 * k**3 + 1).astype(jnp.float32)

        def below(carry):
            odd, k = carry
            return odd + step(k) < norm

        def next_pair(carry):
            odd, k = carry
            return odd + step(k) + step(k + 1), k + 1

        odd, _ = jax.lax.while_loop(below, next_pair, (step(jnp.int32(0)), jnp.int32(0)))
        return odd

    def __call__(
        self, genotypes: Float[Array, "batch genotype_dim"], *, key: PRNGKey
    ) -> tuple[Float[Array, " batch"], Float[Array, "batch 1"], None]:
        _check_genotypes(self, genotypes)
        norm = jnp.linalg.norm(genotypes, axis=-1)
        odd = jax.vmap(self.plateau_start)(norm)
        descriptors = jnp.where(jnp.floor(norm / odd) == 0.0, norm, odd)
        return jnp.ones(norm.shape, jnp.float32), descriptors[:, None], None


def _point(values: Any) -> Array:
    return jnp.asarray(values, jnp.float32)


@typing.final
class DeceptiveEvolvability(AbstractTask):
    """The QD-suite's deceptive evolvability (QDax's `DeceptiveEvolvabilityV0`): the 1-D
    descriptor of a 2-D genotype `x` is a mixture of two Gaussian densities, `N(x; mu_1,
    sigma_1^2 I) + beta N(x; mu_2, sigma_2^2 I)`: a narrow, high hill and a wide one, weighted
    by `beta`. Runs start at the saddle between them, the lowest point of the segment from
    `mu_1` to `mu_2` (1,000 points, as QDax finds it), and high descriptors lie up the narrow
    hill, which the wide one's gentle slope hides. Fitness 1. `descriptor_bounds`: from 0 to
    the larger density at either mean.

    **Fields:** `mu_1` (50, 125), `sigma_1` (sqrt 70), `beta` (20), `mu_2` (150, 125),
    `sigma_2` (sqrt 1000); float32 leaves.
    """

    mu_1: Float[Array, "2"] = eqx.field(default=(50.0, 125.0), converter=_point)
    sigma_1: Float[Array, ""] = eqx.field(default=math.sqrt(70.0), converter=f32)
    beta: Float[Array, ""] = eqx.field(default=20.0, converter=f32)
    mu_2: Float[Array, "2"] = eqx.field(default=(150.0, 125.0), converter=_point)
    sigma_2: Float[Array, ""] = eqx.field(default=math.sqrt(1e3), converter=f32)

    def __check_init__(self):
        for name in ("mu_1", "mu_2"):
            if jnp.shape(getattr(self, name)) != (2,):
                raise ValueError(
                    f"DeceptiveEvolvability.{name} must be a point of the plane (2 values), "
                    f"got shape {jnp.shape(getattr(self, name))}"
                )
        check.positive("DeceptiveEvolvability.sigma_1", self.sigma_1)
        check.positive("DeceptiveEvolvability.sigma_2", self.sigma_2)
        check.non_negative("DeceptiveEvolvability.beta", self.beta)

    @property
    def genotype_dim(self) -> int:
        return 2

    @property
    def num_descriptors(self) -> int:
        return 1

    @property
    def descriptor_bounds(self) -> tuple[float, float]:
        peaks = self.density(jnp.stack([self.mu_1, self.mu_2]))
        return (0.0, float(jnp.max(peaks)))

    @property
    def qd_offset(self) -> float:
        return 0.0

    def density(self, genotypes: Float[Array, "batch 2"]) -> Float[Array, " batch"]:
        """The descriptor: the weighted mixture of the two Gaussian densities at each
        genotype."""

        def gaussian(mu, sigma):
            d = genotypes - mu[None, :]
            return jnp.exp(-0.5 * jnp.sum(d * d, axis=-1) / (sigma * sigma)) * (
                2.0 * jnp.pi * sigma * sigma
            ) ** (-genotypes.shape[-1] / 2)

        return gaussian(self.mu_1, self.sigma_1) + self.beta * gaussian(self.mu_2, self.sigma_2)

    def saddle(self) -> Float[Array, "2"]:
        """The lowest of 1,000 evenly spaced points from `mu_1` to `mu_2`."""
        t = jnp.linspace(0.0, 1.0, 1000)[:, None]
        points = t * (self.mu_2 - self.mu_1)[None, :] + self.mu_1[None, :]
        return points[jnp.argmin(self.density(points))]

    def init_genotypes(self, num: int, *, key: PRNGKey) -> Float[Array, "{num} 2"]:
        """`num` copies of the saddle point (`saddle`)."""
        return jnp.broadcast_to(self.saddle()[None, :], (num, 2))

    def __call__(
        self, genotypes: Float[Array, "batch 2"], *, key: PRNGKey
    ) -> tuple[Float[Array, " batch"], Float[Array, "batch 1"], None]:
        _check_genotypes(self, genotypes)
        descriptors = self.density(genotypes)[:, None]
        return jnp.ones(genotypes.shape[:1], jnp.float32), descriptors, None
