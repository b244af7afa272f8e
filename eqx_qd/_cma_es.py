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
from ._custom_types import PRNGKey
from ._es_base import (
    AbstractEvolutionStrategy,
    check_bounds,
    check_sizes,
    flat,
    if_parents,
    parent_weights as parent_weights,
    resample_in_bounds,
    RESAMPLE_TRIES as RESAMPLE_TRIES,
    select,
)
from ._misc import f32, i32


def batched_decompositions() -> bool:
    """Whether a population of CMA-ES strategies decomposes its covariances in one batched
    call (`CMAES.refresh_many`'s default): everywhere but on a CPU, read from JAX's default
    backend."""
    return jax.default_backend() != "cpu"


NEWTON_STEPS = 2
"""Newton-Schulz steps a `square_roots="newton"` refresh takes from the previous `C^-1/2`."""

NEWTON_TOLERANCE = 1e-5
"""The largest `|X C X - I|` entry a Newton refresh accepts for `X = C^-1/2`; above it (or
on NaN) the strategy is decomposed instead."""

NEWTON_CONDITION_LIMIT = 4.0
"""Newton steps are tried only on a covariance whose last known condition number is at most
this: the steps shrink the part of the error that does not commute with C by a factor
`(r^1/4 - r^-1/4)^2 / 4` for eigenvalue ratios `r`, fast only for a nearly round C."""

UNCERTAINTY_LIMIT = 10.0
"""The most `CMAESState.uncertainty` may grow through Newton refreshes before one decomposes."""

CONDITION_LIMIT = 2e6
"""A covariance whose condition number passes this restarts its strategy: pycma's tolerance
(1e14 in float64, a margin below `1 / eps`) moved to float32, about `1 / (4 eps)`. A float32
eigendecomposition measures a condition number to a few percent up to about 1e6 and cannot
tell larger ones apart (it reports 5e6 to 1e11 for true conditions from 1e7 to 1e16: the
small eigenvalues are rounding), so 1e14 could never fire; this limit fires for every true
condition from 1e7 up and never below 1e6 (`tests/core/test_cma.py`)."""

AREA_LIMIT = 1e-11
"""A strategy whose extent `sigma * sqrt(max eigenvalue)` falls below this restarts."""

SQUARE_ROOTS = ("newton", "eigh")
"""The ways a refresh may compute the square roots (`CMAES.square_roots`)."""


class CMAESState(eqx.Module):
    """One CMA-ES's search distribution and its evolution paths.

    **Fields:** `mean` `(dim,)`; step size `sigma`; evolution paths `pc` and `ps` `(dim,)`;
    covariance `cov` `(dim, dim)`; what the last refresh computed from it (pyribs' lazy
    eigensystem): `sqrt` = C^1/2 and `invsqrt` = C^-1/2 `(dim, dim)`, both symmetric (sampling
    draws `mean + sigma * sqrt @ z`, the path update reads `invsqrt`); `max_eigenvalue` and
    `condition`, C's largest eigenvalue and condition number at the last eigendecomposition,
    and `uncertainty` `u >= 1`: at the last refresh they were within a factor `u` (the
    eigenvalue) and `u^2` (the condition number) of these (1 when that refresh decomposed;
    see `CMAES.square_roots`); `evaluations`, the candidates told so far, and `updated_at`,
    the count at the last refresh.
    """

    mean: Float[Array, " dim"]
    sigma: Float[Array, ""]
    pc: Float[Array, " dim"]
    ps: Float[Array, " dim"]
    cov: Float[Array, "dim dim"]
    sqrt: Float[Array, "dim dim"]
    invsqrt: Float[Array, "dim dim"]
    max_eigenvalue: Float[Array, ""]
    condition: Float[Array, ""]
    uncertainty: Float[Array, ""]
    evaluations: Int[Array, ""]
    updated_at: Int[Array, ""]


@typing.final
class CMAES(AbstractEvolutionStrategy[CMAESState]):
    """CMA-ES over `dim` variables, `batch_size` candidates per generation.

    The update is the one of pyribs 0.12's `CMAEvolutionStrategy` (itself after pycma's
    `purecma`): weights and learning rates from the generation's number of parents; the
    square roots of the covariance refreshed once `lazy_gap_evals` evaluations have passed;
    `sigma` multiplied by `exp(min(1, cs / damps * (|ps|^2 / dim - 1) / 2))`. Candidates
    outside `lower` / `upper` are redrawn (`RESAMPLE_TRIES` times, then clipped).

    **Fields:**

    - `dim`, `batch_size`: static sizes.
    - `sigma0`: the initial step size (float32 leaf, positive).
    - `lower`, `upper`: `(dim,)` bounds of the search space (`-inf` / `inf`: none).
    - `bounded`: static, whether any bound is finite (the redraw loop is compiled only then).
    - `square_roots`: static, how a refresh gets `C^1/2` and `C^-1/2` of the covariance.
      `"eigh"`: pyribs' way, an eigendecomposition. `"newton"` (the default): where C is
      nearly round (`NEWTON_CONDITION_LIMIT`), `NEWTON_STEPS` Newton-Schulz steps from the
      previous refresh's `C^-1/2`, matrix products only. Between two refreshes C moves little,
      and on pyribs' sphere protocol the steps reach the float32 eigendecomposition's own
      error against a float64 one, at a third of its cost
      (`benchmarks/log/epyc-family26-model2.md`). A strategy is decomposed instead where the
      steps miss `NEWTON_TOLERANCE`, where the eigenvalue bounds they carry
      (`CMAESState.uncertainty`, from Ostrowski's theorem: C's eigenvalues
      are those of `X^-2`, X the previous `C^-1/2`, scaled by factors within the eigenvalues
      of `X C X`) pass `UNCERTAINTY_LIMIT`, and where a stop tolerance
      (`CONDITION_LIMIT`, `AREA_LIMIT`) could come out otherwise with the exact eigenvalues
      before the next refresh, so `should_stop` decides as pyribs' does. Sampling through the
      symmetric `C^1/2` draws from the same distribution as pyribs' `B D^1/2`, not the same
      points.
    """

    dim: int = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    sigma0: Float[Array, ""] = eqx.field(converter=f32)
    lower: Float[Array, " dim"]
    upper: Float[Array, " dim"]
    bounded: bool = eqx.field(static=True)
    square_roots: str = eqx.field(static=True)

    def __init__(
        self,
        dim: int,
        batch_size: int | None = None,
        sigma0: ScalarLike = 1.0,
        lower: ScalarLike | Float[Array, " dim"] = -jnp.inf,
        upper: ScalarLike | Float[Array, " dim"] = jnp.inf,
        square_roots: str = "newton",
    ):
        check.one_of("CMAES.square_roots", square_roots, SQUARE_ROOTS)
        batch_size = check_sizes("CMAES", dim, batch_size, sigma0)
        self.dim = dim
        self.batch_size = batch_size
        self.sigma0 = sigma0
        self.square_roots = square_roots
        self.lower, self.upper, self.bounded = check_bounds("CMAES", dim, lower, upper)

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
            sqrt=eye,
            invsqrt=eye,
            max_eigenvalue=jnp.float32(1.0),
            condition=jnp.float32(1.0),
            uncertainty=jnp.float32(1.0),
            evaluations=i32(0),
            updated_at=i32(0),
        )

    def sample(self, state: CMAESState, *, key: PRNGKey) -> Float[Array, "batch dim"]:
        """`batch_size` candidates from N(mean, sigma^2 C), redrawn until inside the bounds
        (C as of the last refresh)."""

        def draw(k):
            z = state.sigma * jr.normal(k, (self.batch_size, self.dim))
            return z @ state.sqrt.T + state.mean[None, :]

        return resample_in_bounds(draw, self.lower, self.upper, self.bounded, key=key)

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
        return if_parents(num_parents, told, counted)

    def refresh(self, state: CMAESState) -> CMAESState:
        """`C^1/2`, `C^-1/2` and the eigenvalue figures recomputed if more than
        `lazy_gap_evals` evaluations passed since the last time (pyribs does this at the
        start of its next `ask`: the same schedule).

        Under `vmap` the tests become selects and both sides are computed; for a population
        use `refresh_many`, which pays only for the strategies that need it."""
        return jax.lax.cond(self._due(state), lambda s: self._renew(s), lambda s: s, state)

    def _due(self, state: CMAESState) -> Bool[Array, "..."]:
        """Whether more than `lazy_gap_evals` evaluations passed since the last refresh (any
        leading axes of `state`)."""
        return (state.evaluations - state.updated_at).astype(jnp.float32) > self.lazy_gap_evals

    def _tries_newton(self, state: CMAESState) -> Bool[Array, "..."]:
        """Whether a `square_roots="newton"` refresh tries Newton steps first (any leading
        axes of `state`); the `"eigh"` paths never ask."""
        return state.condition <= NEWTON_CONDITION_LIMIT

    def _renew(self, s: CMAESState) -> CMAESState:
        """One strategy refreshed now, by `square_roots`."""

        def newton(s):
            fresh, exact = self._newton(s)
            return jax.lax.cond(exact, lambda t: self._decompose(t), lambda _: fresh, s)

        if self.square_roots == "eigh":
            return self._decompose(s)
        return jax.lax.cond(self._tries_newton(s), newton, lambda t: self._decompose(t), s)

    def refresh_many(self, states: CMAESState, *, batched: bool | None = None) -> CMAESState:
        """`refresh` over a population (a leading axis on every field): the same states
        either way, two ways to get them, and which is faster depends on the machine.

        - `batched=False`: one strategy after another (`lax.map`) under real `cond`s, so only
          the due strategies pay for a refresh, and only those that need one for an
          eigendecomposition. The faster way on a CPU, most of all when the strategies are
          out of step, as CMA-ME's are (each restarts on its own):
          `benchmarks/log/epyc-family26-model2.md`, "The CMA family with Newton refreshes".
        - `batched=True`: the Newton steps of every strategy in one batched product, and every
          decomposition in one batched `eigh`, each run if any strategy needs it and kept
          where due (a select). On a GPU a row of small sequential calls costs a launch each.
        - `None` (the default): batched unless JAX's default backend is the CPU (a job's log
          says which it took).
        """
        if batched is None:
            batched = batched_decompositions()
        if not batched:
            return jax.lax.map(lambda s: self.refresh(s), states)
        due = self._due(states)
        if self.square_roots == "eigh":
            return select(due, jax.vmap(self._decompose)(states), states)
        trying = due & self._tries_newton(states)
        fresh, exact = jax.lax.cond(
            jnp.any(trying),
            lambda s: self._newton(s),
            lambda s: (s, jnp.ones(due.shape, bool)),
            states,
        )
        exact = due & (exact | ~trying)
        fresh = select(due & ~exact, fresh, states)
        return jax.lax.cond(
            jnp.any(exact),
            lambda s: select(exact, jax.vmap(self._decompose)(s), s),
            lambda s: s,
            fresh,
        )

    def _decompose(self, s: CMAESState) -> CMAESState:
        """pyribs' refresh: the eigendecomposition of the (symmetrised) covariance."""
        cov = jnp.maximum(s.cov, s.cov.T)
        values, basis = jnp.linalg.eigh(cov, symmetrize_input=False)  # symmetric: see above
        values = jnp.abs(values)
        root = jnp.sqrt(values)
        sqrt = (basis * root[None, :]) @ basis.T
        invsqrt = (basis * (1.0 / root)[None, :]) @ basis.T
        return eqx.tree_at(
            lambda t: (
                t.cov,
                t.sqrt,
                t.invsqrt,
                t.max_eigenvalue,
                t.condition,
                t.uncertainty,
                t.updated_at,
            ),
            s,
            (
                cov,
                jnp.maximum(sqrt, sqrt.T),
                jnp.maximum(invsqrt, invsqrt.T),
                jnp.max(values),
                jnp.max(values) / jnp.min(values),
                jnp.float32(1.0),
                s.evaluations,
            ),
        )

    def _newton(self, s: CMAESState) -> tuple[CMAESState, Bool[Array, "..."]]:
        """The refresh by Newton-Schulz steps from the previous `C^-1/2` (any leading axes of
        `s`), and where it must be decomposed instead."""
        swap = lambda a: jnp.swapaxes(a, -1, -2)
        frobenius = lambda a: jnp.sqrt(jnp.sum(a**2, axis=(-2, -1)))
        cov = jnp.maximum(s.cov, swap(s.cov))
        eye = jnp.broadcast_to(jnp.eye(self.dim, dtype=jnp.float32), cov.shape)
        x = s.invsqrt
        for step in range(NEWTON_STEPS):  # X <- (3 I - X C X) X / 2, kept symmetric
            m = x @ (cov @ x)
            m = 0.5 * (m + swap(m))
            if step == 0:
                # C = X0^-1 M X0^-1: by Ostrowski, C's k-th eigenvalue is X0^-2's times a
                # factor within M's eigenvalues, so within 1 +- |M - I|_2 <= |M - I|_F.
                moved = frobenius(m - eye)
            x = 0.5 * (3.0 * eye - m) @ x
            x = 0.5 * (x + swap(x))
        product = cov @ x
        sqrt = 0.5 * (product + swap(product))  # C X = C^1/2
        residual = x @ product - eye
        residual = 0.5 * (residual + swap(residual))
        left = frobenius(residual)  # and X^-2's eigenvalues within 1 +- this of C's
        uncertainty = s.uncertainty * (1 + moved) / (1 - moved) * (1 + left) / (1 - left)
        # The checks before the next refresh see sigma after 1 .. J more generations, each of
        # which multiplies it by a factor in [exp(-1/2), e] (cs / damps < 1, the cap at 1).
        j = math.floor(self.lazy_gap_evals / self.batch_size) + 1
        top_low, top_high = s.max_eigenvalue / uncertainty, s.max_eigenvalue * uncertainty
        area_low = s.sigma * math.exp(-j / 2) * jnp.sqrt(top_low)
        area_high = s.sigma * math.exp(j) * jnp.sqrt(top_high)
        cond_low, cond_high = s.condition / uncertainty**2, s.condition * uncertainty**2
        undecided = ((area_low < AREA_LIMIT) & (area_high >= AREA_LIMIT)) | (
            (cond_low <= CONDITION_LIMIT) & (cond_high > CONDITION_LIMIT)
        )
        accepted = (
            (jnp.max(jnp.abs(residual), axis=(-2, -1)) <= NEWTON_TOLERANCE)  # False on NaN
            & (moved < 0.5)
            & (left < 0.5)
            & (uncertainty <= UNCERTAINTY_LIMIT)
        )
        fresh = eqx.tree_at(
            lambda t: (t.cov, t.sqrt, t.invsqrt, t.uncertainty, t.updated_at),
            s,
            (cov, sqrt, x, uncertainty, s.evaluations),
        )
        return fresh, ~accepted | undecided

    def should_stop(
        self, state: CMAESState, sorted_values: Float[Array, "batch ..."]
    ) -> Bool[Array, ""]:
        """Whether `state` should restart, by pycma's tolerances as pyribs checks them:
        condition number above `CONDITION_LIMIT` (2e6, float32's reach, where pycma's 1e14
        is float64's), the distribution's extent
        `sigma * sqrt(max eigenvalue)` below `AREA_LIMIT` (1e-11), or a flat ranking (the
        best and worst ranking values closer than 1e-12). `sorted_values` are the ranking
        values, best first. The eigenvalue figures are the state's; after a Newton refresh
        they are not exact, but the refresh decomposed wherever the exact ones could decide
        otherwise."""
        area = state.sigma * jnp.sqrt(state.max_eigenvalue)
        return (state.condition > CONDITION_LIMIT) | (area < AREA_LIMIT) | flat(sorted_values)


def _rates(weights, dim: int, xp: types.ModuleType = jnp):
    """pyribs' `_calc_strat_params` from the recombination `weights`: `mueff`, `cc`, `cs`,
    `c1`, `cmu`."""
    mueff = xp.sum(weights) ** 2 / xp.maximum(xp.sum(weights**2), 1e-30)
    cc = (4.0 + mueff / dim) / (dim + 4.0 + 2.0 * mueff / dim)
    cs = (mueff + 2.0) / (dim + mueff + 5.0)
    c1 = 2.0 / ((dim + 1.3) ** 2 + mueff)
    cmu = xp.minimum(1.0 - c1, 2.0 * (mueff - 2.0 + 1.0 / mueff) / ((dim + 2.0) ** 2 + mueff))
    return mueff, cc, cs, c1, cmu
