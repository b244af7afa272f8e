"""OG-MAP-Elites and OMG-MEGA's emitter: elites perturbed, then stepped along the gradients of
the fitness (and the descriptors), as pyribs 0.12's `GradientOperatorEmitter`."""

import typing
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, ScalarLike

from .. import _validate as check
from .._custom_types import Extra, Genotypes, PRNGKey
from .._es_base import check_bounds
from .._misc import f32, tree_take
from .._repertoire import AbstractRepertoire, Elites
from .._selectors import uniform_filled
from .base import AbstractStatelessEmitter, Lineage, Origin, parent_ids
from .gradient_arborescence import task_jacobian


OPERATORS = ("isotropic", "iso_line_dd")


@typing.final
class GradientOperatorEmitter(AbstractStatelessEmitter):
    """Fontaine and Nikolaidis' (2021) gradient-operator emitter, pyribs'
    `GradientOperatorEmitter`: OG-MAP-Elites with `measure_gradients=False`, OMG-MEGA with
    `measure_gradients=True`.

    Each iteration draws `branches` elites uniformly from the repertoire (`x0` while it is
    empty), perturbs them (`"isotropic"`: `+ N(0, sigma^2)`; `"iso_line_dd"`: Iso+LineDD, `+
    N(0, line_sigma^2) (other - elite) + N(0, sigma^2)` towards a second elite) and clips them
    into the bounds: the intermediate points `theta`. The Jacobian `J` of the fitness and
    descriptors at each `theta` comes from autodiff of `scoring_fn` (rows divided by their
    norm plus `epsilon` with `normalize_grad`), and each `theta` branches once:
    OG-MAP-Elites `theta + sigma_g grad f`; OMG-MEGA `theta + |c_0| grad f + sum_j c_j grad
    m_j` with `c ~ N(0, sigma_g^2)`. The batch is the `branches` intermediate points, then
    their `branches` children (pyribs evaluates and inserts the points first, `ask_dqd`, and
    their children after; here both are inserted together, so the children are judged against
    the archive without their own points, as `GradientArborescenceEmitter` does). The children
    are not clipped (pyribs).

    **Fields:**

    - `scoring_fn`: the differentiable task, `(genotypes, *, key) -> (fitnesses, descriptors,
      extra)`.
    - `x0`: `(dim,)`, where the points are drawn around while the repertoire is empty.
    - `sigma`, `line_sigma`, `sigma_g`, `epsilon`: float32 leaves (`sigma` a scalar or
      `(dim,)`).
    - `lower`, `upper`: `(dim,)` bounds of the points.
    - `measure_gradients`, `normalize_grad`, `operator_type`: static.
    - `branches`: children per iteration (pyribs' `batch_size`); `batch_size`:
      `2 * branches`.
    """

    scoring_fn: Callable
    x0: Float[Array, " dim"]
    sigma: Float[Array, "..."] = eqx.field(converter=f32)
    sigma_g: Float[Array, ""] = eqx.field(converter=f32)
    line_sigma: Float[Array, ""] = eqx.field(converter=f32)
    epsilon: Float[Array, ""] = eqx.field(converter=f32)
    lower: Float[Array, " dim"]
    upper: Float[Array, " dim"]
    measure_gradients: bool = eqx.field(static=True)
    normalize_grad: bool = eqx.field(static=True)
    operator_type: str = eqx.field(static=True)
    branches: int = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)

    def __init__(
        self,
        scoring_fn: Callable,
        x0: Float[Array, " dim"],
        *,
        sigma: ScalarLike | Float[Array, " sigma_dim"],
        sigma_g: ScalarLike,
        measure_gradients: bool = False,
        normalize_grad: bool = False,
        epsilon: ScalarLike = 1e-8,
        operator_type: str = "isotropic",
        line_sigma: ScalarLike = 0.0,
        lower: ScalarLike | Float[Array, " dim"] = -jnp.inf,
        upper: ScalarLike | Float[Array, " dim"] = jnp.inf,
        branches: int = 64,
    ):
        owner = "GradientOperatorEmitter"
        if not callable(scoring_fn):
            raise TypeError(f"{owner}.scoring_fn must be callable, got {scoring_fn!r}")
        x0 = jnp.asarray(x0, jnp.float32)
        if x0.ndim != 1:
            raise ValueError(f"{owner}.x0 must have shape (dim,), got {x0.shape}")
        sigma = jnp.asarray(sigma, jnp.float32)
        if sigma.ndim > 1 or (sigma.ndim == 1 and sigma.shape != x0.shape):
            raise ValueError(f"{owner}.sigma must be a scalar or of shape {x0.shape}")
        check.non_negative(f"{owner}.sigma", sigma)
        check.non_negative(f"{owner}.sigma_g", sigma_g)
        check.non_negative(f"{owner}.line_sigma", line_sigma)
        check.positive(f"{owner}.epsilon", epsilon)
        check.one_of(f"{owner}.operator_type", operator_type, OPERATORS)
        flags = {"measure_gradients": measure_gradients, "normalize_grad": normalize_grad}
        for name, flag in flags.items():
            if not isinstance(flag, bool):
                raise ValueError(f"{owner}.{name} must be a bool, got {flag!r}")
        check.positive_int(f"{owner}.branches", branches)
        self.lower, self.upper, _ = check_bounds(owner, x0.shape[0], lower, upper)
        self.scoring_fn, self.x0 = scoring_fn, x0
        self.sigma, self.sigma_g, self.line_sigma = sigma, sigma_g, line_sigma
        self.epsilon = epsilon
        self.measure_gradients, self.normalize_grad = measure_gradients, normalize_grad
        self.operator_type = operator_type
        self.branches, self.batch_size = branches, 2 * branches

    def emit(
        self, repertoire: AbstractRepertoire, state: None, *, key: PRNGKey
    ) -> tuple[Genotypes, Extra]:
        n, dim = self.branches, self.x0.shape[0]
        if repertoire.genotypes.shape[1:] != (dim,):
            raise ValueError(
                f"GradientOperatorEmitter.emit: the repertoire's genotypes have shape "
                f"{repertoire.genotypes.shape[1:]}, x0 has {(dim,)}"
            )
        select_key, line_key, other_key, noise_key, jac_key, coef_key = jr.split(key, 6)
        # Uniform over the elites (`repertoire.select` refuses an empty repertoire; here the
        # points are drawn around x0 then, as pyribs does).
        idx, num_filled = uniform_filled(repertoire.fitnesses, n, key=select_key)
        empty = num_filled == 0
        elites = Elites(
            genotypes=repertoire.genotypes[idx],
            fitnesses=repertoire.fitnesses[idx],
            descriptors=repertoire.descriptors[idx],
            cells=idx,
            extra=tree_take(repertoire.extra, idx),
        )
        parents = jnp.where(empty, self.x0[None, :], elites.genotypes)
        # OMG-MEGA's points are the elites themselves (sigma 0): no noise is drawn then, the
        # draw being most of an iteration's cost on a CPU.
        noise = jax.lax.cond(
            jnp.any(self.sigma != 0),
            lambda k: self.sigma * jr.normal(k, (n, dim)),
            lambda k: jnp.zeros((n, dim), jnp.float32),
            noise_key,
        )
        if self.operator_type == "iso_line_dd":
            others, _ = uniform_filled(repertoire.fitnesses, n, key=other_key)
            others = jnp.where(empty, self.x0[None, :], repertoire.genotypes[others])
            line = self.line_sigma * jr.normal(line_key, (n, 1))
            theta = parents + line * (others - parents) + noise
        else:
            theta = parents + noise
        theta = jnp.clip(theta, self.lower[None, :], self.upper[None, :])
        jacobians = jax.vmap(
            lambda x, k: task_jacobian(self.scoring_fn, x, self.normalize_grad, self.epsilon, key=k)
        )(theta, jr.split(jac_key, n))
        if self.measure_gradients:
            coefficients = self.sigma_g * jr.normal(coef_key, jacobians.shape[:2])
            coefficients = coefficients.at[:, 0].set(jnp.abs(coefficients[:, 0]))
            children = theta + jnp.einsum("bm,bmd->bd", coefficients, jacobians)
        else:
            children = theta + self.sigma_g * jacobians[:, 0, :]
        # Both a point and its child descend from the elite the point was drawn from.
        ids = jnp.where(empty, -1, parent_ids(elites))
        lineage = Lineage(
            jnp.concatenate([ids, ids]),
            jnp.full((2 * n,), -1, jnp.int32),
            jnp.concatenate(
                [jnp.full((n,), Origin.EVO, jnp.int32), jnp.full((n,), Origin.GRADIENT, jnp.int32)]
            ),
        )
        return jnp.concatenate([theta, children]), lineage
