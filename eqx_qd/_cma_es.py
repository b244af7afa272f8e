"""CMA-ES as an Equinox module, with the update pyribs' `CMAEvolutionStrategy` makes.

The QD emitters of the CMA family (CMA-ME, CMA-MAE, CMA-MEGA) run many small CMA-ES side by
side and tell each a variable number of parents (the candidates that entered the archive), so
the strategy here takes `num_parents` per generation as a traced integer and recomputes its
weights and learning rates from it, as pyribs does. One strategy's state is an `eqx.Module`; a
population of strategies is the same state with a leading axis (`eqx.filter_vmap`).
"""

import math
import types
import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Bool, Float, Int, ScalarLike

from . import _validate as check
from ._compile import batched_decompositions
from ._custom_types import PRNGKey
from ._misc import f32, i32


RESAMPLE_TRIES = 100
"""Draws per candidate before an out-of-bounds candidate is clipped into the bounds."""


class CMAESState(eqx.Module):
    """One CMA-ES's search distribution and its evolution paths.

    **Fields:** `mean` `(dim,)`; step size `sigma`; evolution paths `pc` and `ps` `(dim,)`;
    covariance `cov` `(dim, dim)` and the eigensystem sampling uses (`eigenbasis`,
    `eigenvalues`, `invsqrt` = C^-1/2, `condition`), refreshed lazily; `evaluations`, the
    candidates told so far, and `updated_at`, the count when the eigensystem was last
    refreshed.
    """

    mean: Float[Array, " dim"]
    sigma: Float[Array, ""]
    pc: Float[Array, " dim"]
    ps: Float[Array, " dim"]
    cov: Float[Array, "dim dim"]
    eigenbasis: Float[Array, "dim dim"]
    eigenvalues: Float[Array, " dim"]
    invsqrt: Float[Array, "dim dim"]
    condition: Float[Array, ""]
    evaluations: Int[Array, ""]
    updated_at: Int[Array, ""]


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


@typing.final
class CMAES(eqx.Module):
    """CMA-ES over `dim` variables, `batch_size` candidates per generation.

    The update is the one of pyribs 0.12's `CMAEvolutionStrategy` (itself after pycma's
    `purecma`): weights and learning rates from the generation's number of parents; the
    eigensystem refreshed once `lazy_gap_evals` evaluations have passed; `sigma` multiplied by
    `exp(min(1, cs / damps * (|ps|^2 / dim - 1) / 2))`. Candidates outside `lower` /
    `upper` are redrawn (`RESAMPLE_TRIES` times, then clipped).

    **Fields:**

    - `dim`, `batch_size`: static sizes.
    - `sigma0`: the initial step size (float32 leaf, positive).
    - `lower`, `upper`: `(dim,)` bounds of the search space (`-inf` / `inf`: none).
    - `bounded`: static, whether any bound is finite (the redraw loop is compiled only then).
    """

    dim: int = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    sigma0: Float[Array, ""] = eqx.field(converter=f32)
    lower: Float[Array, " dim"]
    upper: Float[Array, " dim"]
    bounded: bool = eqx.field(static=True)

    def __init__(
        self,
        dim: int,
        batch_size: int | None = None,
        sigma0: ScalarLike = 1.0,
        lower: ScalarLike | Float[Array, " dim"] = -jnp.inf,
        upper: ScalarLike | Float[Array, " dim"] = jnp.inf,
    ):
        check.positive_int("CMAES.dim", dim)
        if batch_size is None:
            batch_size = 4 + int(3 * math.log(dim))
        check.integer("CMAES.batch_size", batch_size, minimum=2)
        check.positive("CMAES.sigma0", sigma0)
        self.dim = dim
        self.batch_size = batch_size
        self.sigma0 = sigma0
        self.lower = jnp.broadcast_to(jnp.asarray(lower, jnp.float32), (dim,))
        self.upper = jnp.broadcast_to(jnp.asarray(upper, jnp.float32), (dim,))
        if check.is_concrete(self.lower) and check.is_concrete(self.upper):
            if bool(jnp.any(jnp.isnan(self.lower))) or bool(jnp.any(jnp.isnan(self.upper))):
                raise ValueError("CMAES: lower and upper must not hold NaN")
            check.ordered("CMAES.lower", self.lower, "CMAES.upper", self.upper)
            self.bounded = bool(jnp.any(jnp.isfinite(self.lower) | jnp.isfinite(self.upper)))
        else:
            self.bounded = True

    @property
    def lazy_gap_evals(self) -> float:
        """Evaluations between refreshes of the eigensystem (pyribs' rule, with half the
        batch as parents)."""
        # On the host (NumPy): a static number, also when the module is built under `jit`.
        weights = parent_weights(self.batch_size // 2, self.batch_size, np)
        _, _, _, c1, cmu = _rates(weights, self.dim, np)
        return 0.5 * self.batch_size / float(c1 + cmu) / self.dim

    def init(self, mean: Float[Array, " dim"]) -> CMAESState:
        """A fresh distribution at `mean` with step size `sigma0` and identity covariance."""
        check.shape("CMAES.init: mean", mean, (self.dim,))
        n = self.dim
        eye = jnp.eye(n, dtype=jnp.float32)
        return CMAESState(
            mean=jnp.asarray(mean, jnp.float32),
            sigma=self.sigma0,
            pc=jnp.zeros(n, jnp.float32),
            ps=jnp.zeros(n, jnp.float32),
            cov=eye,
            eigenbasis=eye,
            eigenvalues=jnp.ones(n, jnp.float32),
            invsqrt=eye,
            condition=jnp.float32(1.0),
            evaluations=i32(0),
            updated_at=i32(0),
        )

    def sample(self, state: CMAESState, *, key: PRNGKey) -> Float[Array, "batch dim"]:
        """`batch_size` candidates from N(mean, sigma^2 C), redrawn until inside the bounds."""
        transform = state.eigenbasis * jnp.sqrt(state.eigenvalues)[None, :]

        def draw(k):
            z = state.sigma * jr.normal(k, (self.batch_size, self.dim))
            return z @ transform.T + state.mean[None, :]

        def outside(x) -> Bool[Array, " batch"]:
            return jnp.any((x < self.lower[None, :]) | (x > self.upper[None, :]), axis=-1)

        key, first = jr.split(key)
        solutions = draw(first)
        if not self.bounded:
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
        return jnp.clip(solutions, self.lower[None, :], self.upper[None, :])

    def tell(
        self,
        state: CMAESState,
        solutions: Float[Array, "batch dim"],
        order: Int[Array, " batch"],
        num_parents: Int[Array, ""],
    ) -> CMAESState:
        """`state`'s distribution after a generation: `solutions` ranked best first by `order`
        (indices into `solutions`), the first `num_parents` of them recombined. With no parent
        only the evaluation count moves (as in pyribs). Call `refresh` before the next
        `sample` (after `should_stop`, which reads the eigensystem as pyribs does)."""
        check.shape("CMAES.tell: solutions", solutions, (self.batch_size, self.dim))
        n = self.dim
        num_parents = jnp.asarray(num_parents, jnp.int32)
        evaluations = state.evaluations + self.batch_size
        weights = parent_weights(num_parents, self.batch_size)
        mueff, cc, cs, c1, cmu = _rates(weights, n)
        damps = 1.0 + 2.0 * jnp.maximum(0.0, jnp.sqrt((mueff - 1.0) / (n + 1.0)) - 1.0) + cs
        ranked = solutions[order]
        old_mean = state.mean
        mean = weights @ ranked
        y = mean - old_mean
        z = state.invsqrt @ y
        ps = (1.0 - cs) * state.ps + jnp.sqrt(cs * (2.0 - cs) * mueff) / state.sigma * z
        generations = evaluations.astype(jnp.float32) / self.batch_size
        left = jnp.sum(ps**2) / n / (1.0 - (1.0 - cs) ** (2.0 * generations))
        hsig = (left < 2.0 + 4.0 / (n + 1.0)).astype(jnp.float32)
        pc = (1.0 - cc) * state.pc + hsig * jnp.sqrt(cc * (2.0 - cc) * mueff) * y
        ys = ranked - old_mean[None, :]
        rank_mu = (ys * weights[:, None]).T @ ys
        c1a = c1 * (1.0 - (1.0 - hsig**2) * cc * (2.0 - cc))
        # pyribs scales its rank-one term by c1 twice (`rank_one_update * c1` with
        # `rank_one_update = c1 * pc pc^T`); kept, to run the same algorithm.
        cov = (
            state.cov * (1.0 - c1a - cmu * jnp.sum(weights))
            + c1 * c1 * jnp.outer(pc, pc)
            + rank_mu * cmu / state.sigma**2
        )
        sigma = state.sigma * jnp.exp(
            jnp.minimum(1.0, cs / damps * (jnp.sum(ps**2) / n - 1.0) / 2.0)
        )
        told = eqx.tree_at(
            lambda s: (s.mean, s.sigma, s.pc, s.ps, s.cov),
            state,
            (mean, sigma, pc, ps, cov),
        )
        counted = eqx.tree_at(lambda s: s.evaluations, state, evaluations)
        told = eqx.tree_at(lambda s: s.evaluations, told, evaluations)
        return jax.tree.map(lambda a, b: jnp.where(num_parents > 0, a, b), told, counted)

    def refresh(self, state: CMAESState) -> CMAESState:
        """The eigensystem recomputed if more than `lazy_gap_evals` evaluations passed since
        the last time (pyribs does this at the start of its next `ask`: the same values).

        Under `vmap` the test becomes a select and every strategy decomposes; for a population
        use `refresh_many`, which decomposes only the strategies that are due."""
        return jax.lax.cond(self._due(state), lambda s: self._decompose(s), lambda s: s, state)

    def _due(self, state: CMAESState) -> Bool[Array, "..."]:
        """Whether more than `lazy_gap_evals` evaluations passed since the last decomposition
        (any leading axes of `state`)."""
        return (state.evaluations - state.updated_at).astype(jnp.float32) > self.lazy_gap_evals

    def refresh_many(self, states: CMAESState, *, batched: bool | None = None) -> CMAESState:
        """`refresh` over a population (a leading axis on every field): the same states either
        way, two ways to get them, and which is faster depends on the machine.

        - `batched=False`: one strategy after another (`lax.map`) under a real `cond`, so only
          the due ones pay for their eigendecomposition. On a CPU this is 1.8x faster than
          decomposing all (`benchmarks/README.md`, the CMA family).
        - `batched=True`: every strategy's decomposition in one batched `eigh`, kept where due
          (a select). On a GPU a row of small sequential calls costs a launch each: on an H100
          our CMA-ME with the one-by-one path took 2.3x the time of QDax's, which decomposes
          all its strategies every iteration in one call (the batched path there is not yet
          measured).
        - `None` (the default): batched unless JAX's default backend is the CPU (a job's log
          says which it took).
        """
        if batched is None:
            batched = batched_decompositions()
        if not batched:
            return jax.lax.map(lambda s: self.refresh(s), states)
        due = self._due(states)
        fresh = jax.vmap(self._decompose)(states)

        def keep(new, old):
            return jnp.where(due.reshape(due.shape + (1,) * (new.ndim - 1)), new, old)

        return jax.tree.map(keep, fresh, states)

    def _decompose(self, s: CMAESState) -> CMAESState:
        cov = jnp.maximum(s.cov, s.cov.T)
        values, basis = jnp.linalg.eigh(cov, symmetrize_input=False)  # symmetric: see above
        values = jnp.abs(values)
        invsqrt = (basis * (1.0 / jnp.sqrt(values))[None, :]) @ basis.T
        invsqrt = jnp.maximum(invsqrt, invsqrt.T)
        return eqx.tree_at(
            lambda t: (
                t.cov,
                t.eigenbasis,
                t.eigenvalues,
                t.invsqrt,
                t.condition,
                t.updated_at,
            ),
            s,
            (cov, basis, values, invsqrt, jnp.max(values) / jnp.min(values), s.evaluations),
        )

    def should_stop(
        self, state: CMAESState, sorted_values: Float[Array, "batch ..."]
    ) -> Bool[Array, ""]:
        """Whether `state` should restart, by pycma's tolerances as pyribs checks them:
        condition number above 1e14, the distribution's extent `sigma * sqrt(max eigenvalue)`
        below 1e-11, or a flat ranking (the best and worst ranking values closer than
        1e-12). `sorted_values` are the ranking values, best first."""
        area = state.sigma * jnp.sqrt(jnp.max(state.eigenvalues))
        spread = jnp.linalg.norm(jnp.atleast_1d(sorted_values[0] - sorted_values[-1]))
        return (state.condition > 1e14) | (area < 1e-11) | (spread < 1e-12)


def _rates(weights, dim: int, xp: types.ModuleType = jnp):
    """pyribs' `_calc_strat_params` from the recombination `weights`: `mueff`, `cc`, `cs`,
    `c1`, `cmu`."""
    mueff = xp.sum(weights) ** 2 / xp.maximum(xp.sum(weights**2), 1e-30)
    cc = (4.0 + mueff / dim) / (dim + 4.0 + 2.0 * mueff / dim)
    cs = (mueff + 2.0) / (dim + mueff + 5.0)
    c1 = 2.0 / ((dim + 1.3) ** 2 + mueff)
    cmu = xp.minimum(1.0 - c1, 2.0 * (mueff - 2.0 + 1.0 / mueff) / ((dim + 2.0) ** 2 + mueff))
    return mueff, cc, cs, c1, cmu
