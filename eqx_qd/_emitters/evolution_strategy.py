"""CMA-ME's and CMA-MAE's emitter: a population of evolution strategies (CMA-ES, sep-CMA-ES,
LM-MA-ES or OpenAI-ES) that rank by the archive.

pyribs' `EvolutionStrategyEmitter` steps its emitters one after another in Python; here the
`num_emitters` strategies are one state with a leading axis, sampled, told and restarted in
one `vmap`.
"""

import typing
from collections.abc import Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, Int, Key, ScalarLike

from .. import _validate as check
from .._custom_types import Extra, Genotypes, PRNGKey
from .._es_base import AbstractEvolutionStrategy, select
from .._misc import i32
from .._repertoire import AbstractRepertoire, AddInfo, valid_candidates
from .._selectors import uniform_filled
from .._strategies import check_population_memory, EVOLUTION_STRATEGIES, make_es
from .base import AbstractRestartingEmitter, Lineage, Origin
from .rankers import AbstractRanker, ranker as _ranker


SELECTION_RULES = ("mu", "filter")
RESTART_RULES = ("basic", "no_improvement")


class EvolutionStrategyEmitterState(eqx.Module):
    """The population's strategies (leading axis `num_emitters` on every field).

    **Fields:** `es`, the strategies' states (`CMAESState`, `SepCMAESState`, `LMMAESState` or
    `OpenAIESState`, by the emitter's `es`); `direction` `(num_emitters, num_descriptors)`, each
    ranker's random direction; `iterations` and `restarts` per emitter.
    """

    es: eqx.Module
    direction: Float[Array, "num_emitters num_descriptors"]
    iterations: Int[Array, " num_emitters"]
    restarts: Int[Array, " num_emitters"]


def _named_es(owner, name, x0, sigma0, batch_size, lower, upper, es_options, square_roots):
    """Strategy `name` over `x0`'s dimension, its errors named by the emitter's arguments."""
    if not isinstance(name, str):
        raise ValueError(
            f"{owner}.es must be a strategy's name or an AbstractEvolutionStrategy, got {name!r}"
        )
    options = dict(es_options or {})
    if square_roots is not None:
        if name != "cma_es":
            raise ValueError(f"{owner}: square_roots is an option of es 'cma_es', not {name!r}")
        options["square_roots"] = square_roots
    if sigma0 is None:
        raise ValueError(f"{owner}: sigma0 must be given with es {name!r}")
    try:
        return make_es(owner, name, x0.shape[0], batch_size, sigma0, lower, upper, options)
    except ValueError as e:
        named = str(e).replace(f"{owner}: ", "")
        for cls in EVOLUTION_STRATEGIES.values():
            named = named.replace(f"{cls.__name__}.batch_size", "emitter_batch_size")
            named = named.replace(f"{cls.__name__}.", "").replace(f"{cls.__name__}: ", "")
        raise ValueError(f"{owner}: {named}") from None


def _given_es(owner, es, x0, sigma0, batch_size, lower, upper, es_options, square_roots):
    """A strategy built by the caller: it brings its own settings, so the emitter's ES
    arguments must be unset, and its dimension must be `x0`'s."""
    given = {
        "sigma0": sigma0 is not None,
        "emitter_batch_size": batch_size is not None,
        "lower": not (check.is_concrete(lower) and bool(jnp.all(jnp.asarray(lower) == -jnp.inf))),
        "upper": not (check.is_concrete(upper) and bool(jnp.all(jnp.asarray(upper) == jnp.inf))),
        "es_options": bool(es_options),
        "square_roots": square_roots is not None,
    }
    clash = [name for name, set_ in given.items() if set_]
    if clash:
        raise ValueError(
            f"{owner}: es is a {type(es).__name__} built already, which brings its own "
            f"settings; leave {', '.join(clash)} unset (sigma0=None)"
        )
    if es.dim != x0.shape[0]:
        raise ValueError(f"{owner}: es is over {es.dim} variables, x0 has {x0.shape[0]}")
    return es


def check_rules(owner: str, selection_rule: str, restart_rule: "str | int") -> None:
    """The selection rule is `mu` or `filter`; the restart rule `basic`, `no_improvement` or
    a positive number of iterations."""
    check.one_of(f"{owner}.selection_rule", selection_rule, SELECTION_RULES)
    if isinstance(restart_rule, bool) or not isinstance(restart_rule, (int, str)):
        raise ValueError(
            f"{owner}.restart_rule must be 'basic', 'no_improvement' or a positive int, got "
            f"{restart_rule!r}"
        )
    if isinstance(restart_rule, str):
        check.one_of(f"{owner}.restart_rule", restart_rule, RESTART_RULES)
    else:
        check.positive_int(f"{owner}.restart_rule", restart_rule)


def num_parents(selection_rule: str, batch: int, new: Int[Array, ""]) -> Int[Array, ""]:
    """`filter`: the candidates that passed their cell's threshold; `mu`: half the batch."""
    return new if selection_rule == "filter" else i32(batch // 2)


def rule_restarts(restart_rule: "str | int", iterations, new) -> Array:
    """Whether the emitter's own rule asks for a restart after this iteration."""
    if restart_rule == "basic":
        return jnp.bool_(False)
    if restart_rule == "no_improvement":
        return new == 0
    return iterations % restart_rule == 0


def restart_points(
    repertoire: AbstractRepertoire,
    stop: Bool[Array, " num_emitters"],
    keys: Key[Array, " num_emitters"],
    fallback: Float[Array, " dim"],
) -> Float[Array, "num_emitters dim"]:
    """Where each strategy starts again: an elite's genotype drawn uniformly from `repertoire`
    with the strategy's key (`keys`, `(num_emitters,)`), or `fallback` (the emitter's `x0`) while
    the repertoire is empty, where pyribs raises. The elites are drawn only when some strategy
    stops, so an iteration without a restart draws nothing, and an empty repertoire (an
    annealing archive whose `threshold_min` no candidate has passed yet) is not an error.
    Rows of strategies that do not stop are `fallback` and meant to be discarded."""

    def draw(keys):
        def one(k):
            idx, num_filled = uniform_filled(repertoire.fitnesses, 1, key=k)
            return jnp.where(num_filled > 0, repertoire.genotypes[idx[0]], fallback)

        return jax.vmap(one)(keys)

    def skip(keys):
        return jnp.broadcast_to(fallback, keys.shape + fallback.shape)

    return jax.lax.cond(jnp.any(stop), draw, skip, keys)


def ranked_generation(
    es: AbstractEvolutionStrategy,
    ranker: AbstractRanker,
    selection_rule: str,
    restart_rule: "str | int",
    es_state: eqx.Module,
    direction: Float[Array, " num_descriptors"],
    iterations: Int[Array, ""],
    told: Float[Array, "batch dim"],
    fitnesses: Float[Array, " batch"],
    descriptors: Float[Array, "batch num_descriptors"],
    add_info: AddInfo,
) -> tuple[eqx.Module, Int[Array, " batch"], Int[Array, ""], Int[Array, ""], Array]:
    """One strategy's generation, as pyribs' emitters end their `tell`: `ranker` orders the
    batch (`fitnesses`, `descriptors`, `add_info`, the strategy's `direction`), the parents are
    counted by `selection_rule`, `es` is told the samples `told` in that order, and the
    strategy asks to restart by CMA-ES's tolerances or its `restart_rule`.

    **Returns:** the told `es_state` (not yet refreshed), the `order`, the number of parents,
    `iterations + 1`, and whether to restart.
    """
    order, values = ranker.rank(direction, fitnesses, descriptors, add_info)
    new = jnp.sum(add_info.threshold_status != 0, dtype=jnp.int32)
    # No failed candidate is a parent, however many failed: they rank last (the rankers' law),
    # and `mu` takes no more parents than there are candidates that did not fail.
    valid = valid_candidates(fitnesses, descriptors)
    parents = jnp.minimum(
        num_parents(selection_rule, fitnesses.shape[0], new), jnp.sum(valid, dtype=jnp.int32)
    )
    es_state = es.tell(es_state, told, order, parents)
    iterations = iterations + 1
    stop = es.should_stop(es_state, values[order]) | rule_restarts(restart_rule, iterations, new)
    return es_state, order, parents, iterations, stop


@typing.final
class EvolutionStrategyEmitter(AbstractRestartingEmitter[EvolutionStrategyEmitterState]):
    """`num_emitters` evolution strategies (full CMA-ES by default), each drawing
    `emitter_batch_size` genotypes per iteration, ranked by `ranker` after insertion (pyribs'
    `EvolutionStrategyEmitter`).

    CMA-ME: ranker `2imp`, selection `filter`, restart `no_improvement`. CMA-MAE: ranker
    `imp`, selection `mu`, restart `basic`, with `MAPElites(archive_learning_rate=...)`.
    A strategy restarts (a fresh distribution at an elite drawn uniformly from the archive, or
    at `x0` while the archive is empty, and a new random direction) when its ES's tolerances
    say so or its `restart_rule` does; the elite is drawn only then.
    Genotypes are flat `(batch, dim)` arrays.

    `es` chooses the strategy, as pyribs' `es` argument does: `"cma_es"` (full covariance,
    three `dim x dim` matrices per strategy), or for genotypes too large for that (neural
    policies: Tjanaka et al.'s "Scalable CMA-MAE") `"sep_cma_es"` (diagonal), `"lm_ma_es"`
    (`n_vectors` directions) or `"openai_es"` (Adam on a rank-based gradient estimate).
    `es_options` are the strategy's own options (`SepCMAES`, `LMMAES`'s `n_vectors`,
    `OpenAIES`'s `mirror_sampling`, `learning_rate`, `beta1`, `beta2`, `epsilon`,
    `l2_coeff`); `square_roots` is CMA-ES's (how it refreshes `C^1/2` and `C^-1/2`:
    `"newton"` by default, or pyribs' `"eigh"`). `es` may also be a strategy built already
    (a subclass of `AbstractEvolutionStrategy` of your own): it brings its dimension, batch
    size, step size and bounds, so `sigma0` is None and the other ES arguments stay unset. A
    population whose states would not fit in the device's memory is refused with what it
    would need.

    **Fields:**

    - `es`: the `AbstractEvolutionStrategy` (its `dim`, per-emitter `batch_size` from
      `emitter_batch_size`, `sigma0` and the bounds `lower` / `upper` of the genotypes).
    - `num_emitters`: strategies side by side (static).
    - `x0`: `(dim,)`, every strategy's first mean.
    - `ranker`: an `AbstractRanker`.
    - `selection_rule`: `"filter"` (the candidates that passed their cell's threshold are the
      parents) or `"mu"` (the better half). OpenAI-ES weighs every candidate by its rank
      whatever the rule.
    - `restart_rule`: `"no_improvement"` (restart when no candidate passed), `"basic"` (the
      ES's tolerances only) or an int `N` (every `N` iterations).
    - `batch_size`: `num_emitters * es.batch_size`.
    """

    es: AbstractEvolutionStrategy
    x0: Float[Array, " dim"]
    ranker: AbstractRanker
    num_emitters: int = eqx.field(static=True)
    selection_rule: str = eqx.field(static=True)
    restart_rule: str | int = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)

    def __init__(
        self,
        x0: Float[Array, " dim"],
        sigma0: ScalarLike | None,
        *,
        num_emitters: int = 15,
        emitter_batch_size: int | None = None,
        ranker: "str | AbstractRanker" = "2imp",
        selection_rule: str = "filter",
        restart_rule: "str | int" = "no_improvement",
        lower: ScalarLike | Float[Array, " dim"] = -jnp.inf,
        upper: ScalarLike | Float[Array, " dim"] = jnp.inf,
        es: "str | AbstractEvolutionStrategy" = "cma_es",
        es_options: Mapping[str, Any] | None = None,
        square_roots: str | None = None,
    ):
        owner = "EvolutionStrategyEmitter"
        x0 = jnp.asarray(x0, jnp.float32)
        if x0.ndim != 1:
            raise ValueError(f"{owner}.x0 must have shape (dim,), got {x0.shape}")
        check.positive_int(f"{owner}.num_emitters", num_emitters)
        check_rules(owner, selection_rule, restart_rule)
        settings = (x0, sigma0, emitter_batch_size, lower, upper, es_options, square_roots)
        if isinstance(es, AbstractEvolutionStrategy):
            self.es = _given_es(owner, es, *settings)
        else:
            self.es = _named_es(owner, es, *settings)
        name = es if isinstance(es, str) else type(es).__name__
        check_population_memory(owner, name, self.es, num_emitters)
        self.x0 = x0
        self.ranker = _ranker(ranker)
        self.num_emitters = num_emitters
        self.selection_rule = selection_rule
        self.restart_rule = restart_rule
        self.batch_size = num_emitters * self.es.batch_size

    def restarts(self, state: EvolutionStrategyEmitterState) -> Int[Array, ""]:
        """Restarts summed over the population."""
        return jnp.sum(state.restarts)

    def _check_repertoire(self, repertoire: AbstractRepertoire, where: str) -> None:
        check.same_rows(
            f"{where}: the repertoire's genotypes",
            repertoire.genotypes,
            jnp.zeros((1, self.es.dim), jnp.float32),
            owner=f"the emitter (x0 of dim {self.es.dim})",
        )

    def init(
        self,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        key: PRNGKey,
    ) -> EvolutionStrategyEmitterState:
        self._check_repertoire(repertoire, "EvolutionStrategyEmitter.init")
        lower, upper = repertoire.extent
        keys = jr.split(key, self.num_emitters)
        direction = jax.vmap(lambda k: self.ranker.direction(lower, upper, key=k))(keys)
        es = jax.vmap(lambda _: self.es.init(self.x0))(keys)
        zeros = jnp.zeros((self.num_emitters,), jnp.int32)
        return EvolutionStrategyEmitterState(es, direction, zeros, zeros)

    def emit(
        self, repertoire: AbstractRepertoire, state: EvolutionStrategyEmitterState, *, key: PRNGKey
    ) -> tuple[Genotypes, Extra]:
        keys = jr.split(key, self.num_emitters)
        samples = jax.vmap(lambda s, k: self.es.sample(s, key=k))(state.es, keys)
        none = jnp.full((self.batch_size,), -1, jnp.int32)
        return samples.reshape(self.batch_size, self.es.dim), Lineage.of(none, none, Origin.ES)

    def state_update(
        self,
        state: EvolutionStrategyEmitterState,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        add_info: AddInfo,
        key: PRNGKey,
    ) -> EvolutionStrategyEmitterState:
        repertoire.check_candidates(
            genotypes,
            descriptors,
            fitnesses,
            where="EvolutionStrategyEmitter.state_update",
            batch_size=self.batch_size,
        )
        e, b = self.num_emitters, self.es.batch_size

        def per_emitter(x):
            return x.reshape((e, b) + x.shape[1:])

        lower, upper = repertoire.extent

        def one(es_state, direction, iterations, g, d, f, info, k):
            es_state, _, _, iterations, stop = ranked_generation(
                self.es,
                self.ranker,
                self.selection_rule,
                self.restart_rule,
                es_state,
                direction,
                iterations,
                g,
                f,
                d,
                info,
            )
            pick_key, direction_key = jr.split(k)
            direction = jnp.where(
                stop, self.ranker.direction(lower, upper, key=direction_key), direction
            )
            return es_state, direction, iterations, stop, pick_key

        es_state, direction, iterations, stop, pick_keys = jax.vmap(one)(
            state.es,
            state.direction,
            state.iterations,
            per_emitter(genotypes),
            per_emitter(descriptors),
            per_emitter(fitnesses),
            jax.tree.map(per_emitter, add_info),
            jr.split(key, e),
        )
        # Fresh strategies (never due: their square roots are the identity's) where they stop.
        fresh = jax.vmap(self.es.init)(restart_points(repertoire, stop, pick_keys, self.x0))
        es_state = select(stop, fresh, es_state)
        restarts = state.restarts + stop.astype(jnp.int32)
        # Outside the vmap: only the strategies whose lazy gap has passed decompose.
        return EvolutionStrategyEmitterState(
            self.es.refresh_many(es_state), direction, iterations, restarts
        )
