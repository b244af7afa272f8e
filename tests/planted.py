"""Deliberately broken extensions: each breaks one law of `eqx_qd.testing`, which must catch
it by name (`tests/kit/test_laws.py`). Listed in the docs ("Testing your extensions").

Each class is a small change of a correct one: the GA emitter `Fine` and the grid repertoire
`SimpleGrid` below keep every law.
"""

import dataclasses
import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float

import eqx_qd as q


class Fine(q.AbstractStatelessEmitter):
    """A correct GA emitter: selected elites plus gaussian noise, with their lineage."""

    batch_size: int = eqx.field(static=True)
    sigma: float = 0.1

    def emit(self, repertoire, state, *, key):
        select_key, noise_key = jr.split(key)
        elites = repertoire.select(self.batch_size, key=select_key)
        noise = self.sigma * jr.normal(noise_key, elites.genotypes.shape)
        parents = q.parent_ids(elites)
        return elites.genotypes + noise, q.Lineage.of(
            parents, -jnp.ones_like(parents), q.Origin.EVO
        )


@typing.final
class OneTooMany(Fine):
    """Emits `batch_size + 1` candidates (law `batch`)."""

    def emit(self, repertoire, state, *, key):
        elites = repertoire.select(self.batch_size + 1, key=key)
        return elites.genotypes, None


@typing.final
class IntegerGenes(Fine):
    """Rounds its candidates to int32 (law `batch`: the dtype of the stored rows)."""

    def emit(self, repertoire, state, *, key):
        genotypes, lineage = super().emit(repertoire, state, key=key)
        return jnp.round(genotypes).astype(jnp.int32), lineage


@typing.final
class RootOfFitness(Fine):
    """Steps further from fitter parents, by the square root of their fitness: NaN for a
    parent of negative fitness (law `finite`)."""

    def emit(self, repertoire, state, *, key):
        select_key, noise_key = jr.split(key)
        elites = repertoire.select(self.batch_size, key=select_key)
        step = jnp.sqrt(elites.fitnesses)[:, None] * jr.normal(noise_key, elites.genotypes.shape)
        parents = q.parent_ids(elites)
        return elites.genotypes + self.sigma * step, q.Lineage.of(
            parents, -jnp.ones_like(parents), q.Origin.EVO
        )


@typing.final
class GrowingState(q.AbstractEmitter):
    """Its state gains a row every update (law `state`: a scan needs a fixed structure)."""

    batch_size: int = eqx.field(static=True)

    def init(self, repertoire, genotypes, descriptors, fitnesses, extra, *, key):
        return jnp.zeros((1,), jnp.float32)

    def emit(self, repertoire, state, *, key):
        return repertoire.select(self.batch_size, key=key).genotypes, None

    def state_update(
        self, state, repertoire, genotypes, descriptors, fitnesses, extra, *, add_info, key
    ):
        return jnp.concatenate([state, jnp.max(fitnesses)[None]])


@typing.final
class CellsForIds(Fine):
    """Reports the parents' cells where the repertoire's ids belong (law `lineage`)."""

    def emit(self, repertoire, state, *, key):
        select_key, noise_key = jr.split(key)
        elites = repertoire.select(self.batch_size, key=select_key)
        noise = self.sigma * jr.normal(noise_key, elites.genotypes.shape)
        cells = elites.cells
        return elites.genotypes + noise, q.Lineage.of(cells, -jnp.ones_like(cells), q.Origin.EVO)


@typing.final
class NumPyMutation(Fine):
    """Draws its mutation noise from NumPy's global generator through a callback (a user's
    NumPy operator): one key gives other batches (law `same_key`)."""

    def emit(self, repertoire, state, *, key):
        elites = repertoire.select(self.batch_size, key=key)
        shape = jax.ShapeDtypeStruct(elites.genotypes.shape, jnp.float32)
        draw = lambda: np.random.normal(size=shape.shape).astype(np.float32)  # noqa: E731
        noise = jax.pure_callback(draw, shape, vmap_method="sequential")
        parents = q.parent_ids(elites)
        return elites.genotypes + self.sigma * noise, q.Lineage.of(
            parents, -jnp.ones_like(parents), q.Origin.EVO
        )


PLANTED_EMITTERS = {
    OneTooMany: "batch",
    IntegerGenes: "batch",
    RootOfFitness: "finite",
    GrowingState: "state",
    CellsForIds: "lineage",
    NumPyMutation: "same_key",
}
"""Each planted emitter and the law it breaks."""


class SimpleGrid(q.AbstractCellRepertoire):
    """A correct elitist grid over the unit box, written the plain way: candidates inserted
    one by one in a `fori_loop`, each replacing its cell's elite when strictly fitter."""

    genotypes: Float[Array, "capacity dim"]
    fitnesses: Float[Array, " capacity"]
    descriptors: Float[Array, "capacity 2"]
    extra: None = None
    bins: int = eqx.field(static=True, default=4)

    @classmethod
    def create(cls, dim: int, bins: int = 4):
        n = bins * bins
        return cls(jnp.zeros((n, dim)), jnp.full((n,), -jnp.inf), jnp.zeros((n, 2)), None, bins)

    @property
    def extent(self):
        return jnp.zeros(2), jnp.ones(2)

    def cell_of(self, descriptors):
        ij = jnp.clip(jnp.floor(descriptors * self.bins), 0, self.bins - 1).astype(jnp.int32)
        return ij[:, 0] * self.bins + ij[:, 1]

    def _accepts(self, fitness, descriptor, elite):
        finite = jnp.isfinite(fitness) & jnp.all(jnp.isfinite(descriptor))
        return finite & (fitness > elite)

    def add(self, genotypes, descriptors, fitnesses, extra=None):
        cells = self.cell_of(jnp.where(jnp.isfinite(descriptors), descriptors, 0.0))
        before = self.fitnesses[cells]

        def insert(i, arrays):
            geno, fit, desc, status = arrays
            cell = cells[i]
            take = self._accepts(fitnesses[i], descriptors[i], fit[cell])
            geno = geno.at[cell].set(jnp.where(take, genotypes[i], geno[cell]))
            desc = desc.at[cell].set(jnp.where(take, descriptors[i], desc[cell]))
            fit = fit.at[cell].set(jnp.where(take, fitnesses[i], fit[cell]))
            return geno, fit, desc, status.at[i].set(take)

        taken = jnp.zeros(fitnesses.shape, bool)
        arrays = (self.genotypes, self.fitnesses, self.descriptors, taken)
        geno, fit, desc, taken = jax.lax.fori_loop(0, fitnesses.shape[0], insert, arrays)
        new = eqx.tree_at(lambda r: (r.genotypes, r.fitnesses, r.descriptors), self,
                          (geno, fit, desc))  # fmt: skip
        status = jnp.where(taken, jnp.where(jnp.isfinite(before), 1, 2), 0).astype(jnp.int32)
        info = q.AddInfo(cells, status, fitnesses - before, status, fitnesses - before)
        return new, info

    def emptied(self, genotype, extra=None):
        return SimpleGrid.create(genotype.shape[-1], self.bins)


@typing.final
class KeepsInfinite(SimpleGrid):
    """Checks its candidates for NaN only: a fitness of +inf, or an infinite descriptor, is
    stored (law `finite`)."""

    def _accepts(self, fitness, descriptor, elite):
        return ~jnp.isnan(fitness) & ~jnp.any(jnp.isnan(descriptor)) & (fitness > elite)


@typing.final
class StoresNaN(SimpleGrid):
    """Writes its test as "not worse" (`~(fitness <= elite)`), which every comparison with NaN
    passes: a NaN fitness is stored (law `finite`)."""

    def _accepts(self, fitness, descriptor, elite):
        return jnp.all(jnp.isfinite(descriptor)) & ~(fitness <= elite)


@typing.final
class LastWins(SimpleGrid):
    """Lets every valid candidate replace its cell's elite, fitter or not (law `elitist`)."""

    def _accepts(self, fitness, descriptor, elite):
        return jnp.isfinite(fitness) & jnp.all(jnp.isfinite(descriptor))


@typing.final
class TiesReplace(SimpleGrid):
    """Replaces on equal fitness too (`>=`): the last of tied candidates wins its cell, not
    the first (law `reference`)."""

    def _accepts(self, fitness, descriptor, elite):
        finite = jnp.isfinite(fitness) & jnp.all(jnp.isfinite(descriptor))
        return finite & (fitness >= elite)


@typing.final
class SelectsAnySlot(SimpleGrid):
    """Draws uniformly over every slot, empty ones included (law `select`)."""

    def select(self, num, *, selector=None, key):
        idx = jr.randint(key, (num,), 0, self.fitnesses.shape[0])
        return q.Elites(self.genotypes[idx], self.fitnesses[idx], self.descriptors[idx], idx,
                        None)  # fmt: skip


@typing.final
class CountsInStatic(SimpleGrid):
    """Counts its insertions in a static field, which a checkpoint does not save (law
    `checkpoint`)."""

    inserted: int = eqx.field(static=True, default=0)

    def add(self, genotypes, descriptors, fitnesses, extra=None):
        new, info = super().add(genotypes, descriptors, fitnesses, extra)
        return dataclasses.replace(new, inserted=self.inserted + 1), info


@typing.final
class StoresCentres(SimpleGrid):
    """Stores its cell's centre as an elite's descriptor, not the candidate's (law
    `from_candidates`: an elite is a candidate's fitness, descriptor and genotype together)."""

    def add(self, genotypes, descriptors, fitnesses, extra=None):
        new, info = super().add(genotypes, descriptors, fitnesses, extra)
        ij = jnp.stack(jnp.divmod(jnp.arange(self.bins * self.bins), self.bins), axis=-1)
        centres = (ij.astype(jnp.float32) + 0.5) / self.bins
        stored = jnp.where(jnp.isfinite(new.fitnesses)[:, None], centres, new.descriptors)
        return eqx.tree_at(lambda r: r.descriptors, new, stored), info


@typing.final
class KeepsNewest(SimpleGrid):
    """A non-elitist grid that keeps each cell's newest valid candidate, and within a batch
    the last in batch order: the order of a batch decides which of two candidates a cell
    keeps (law `order`; checked with `elitist=False`)."""

    elitist: typing.ClassVar[bool] = False

    def _accepts(self, fitness, descriptor, elite):
        return jnp.isfinite(fitness) & jnp.all(jnp.isfinite(descriptor))


class _WrapsParetoArchive(q.AbstractMultiObjectiveRepertoire):
    """A planted multi-objective archive around a correct `ParetoRepertoire` (`inner`): the
    contract's views are the inner archive's; each planted class breaks `add` its own way."""

    inner: eqx.AbstractVar[q.ParetoRepertoire]

    @property
    def genotypes(self):
        return self.inner.genotypes

    @property
    def objectives(self):
        return self.inner.objectives

    @property
    def descriptors(self):
        return self.inner.descriptors

    @property
    def extra(self):
        return None

    @property
    def extent(self):
        return self.inner.extent

    def uniform_slots(self, num, *, key):
        return self.inner.uniform_slots(num, key=key)

    def emptied(self, genotype, extra=None):
        return type(self)(self.inner.emptied(genotype))


@typing.final
class ForgetsFronts(_WrapsParetoArchive):
    """A multi-objective archive that keeps only the last batch's fronts (a correct
    `ParetoRepertoire` emptied before each batch): a stored solution leaves for nothing that
    dominates it (law `never_dominated_away`)."""

    inner: q.ParetoRepertoire

    @classmethod
    def create(cls, dim: int):
        cells = q.GridTessellation((2, 2), 0.0, 1.0)
        return cls(q.ParetoRepertoire.empty(cells, jnp.zeros(dim), 2, front_length=2))

    def add(self, genotypes, descriptors, fitnesses, extra=None):
        fresh = self.inner.emptied(jax.tree.map(lambda x: x[0], genotypes))
        inner, info = fresh.add(genotypes, descriptors, fitnesses)
        return ForgetsFronts(inner), info


@typing.final
class CrowdsTooSoon(_WrapsParetoArchive):
    """A crowding Pareto archive that keeps only the newest solution of each front after a
    batch: non-dominated solutions leave fronts that are not full (law `fronts`; not
    elitist, as crowding archives are not)."""

    inner: q.ParetoRepertoire
    elitist: typing.ClassVar[bool] = False

    @classmethod
    def create(cls, dim: int):
        cells = q.GridTessellation((2, 2), 0.0, 1.0)
        return cls(q.ParetoRepertoire.empty(cells, jnp.zeros(dim), 2, 3, crowding=True))

    @property
    def front_length(self):
        return self.inner.front_length

    @property
    def front_objectives(self):
        return self.inner.front_objectives

    @property
    def front_filled(self):
        return self.inner.front_filled

    def add(self, genotypes, descriptors, fitnesses, extra=None):
        inner, info = self.inner.add(genotypes, descriptors, fitnesses)
        count = jnp.sum(inner.front_filled, axis=-1)
        last = jnp.arange(inner.front_length)[None, :] == count[:, None] - 1
        objectives = jnp.where(last[..., None], inner.front_objectives, -jnp.inf)
        return CrowdsTooSoon(eqx.tree_at(lambda r: r.front_objectives, inner, objectives)), info


PLANTED_REPERTOIRES = {
    KeepsInfinite: "finite",
    StoresNaN: "finite",
    LastWins: "elitist",
    TiesReplace: "reference",
    SelectsAnySlot: "select",
    CountsInStatic: "checkpoint",
    StoresCentres: "from_candidates",
    KeepsNewest: "order",
    ForgetsFronts: "never_dominated_away",
    CrowdsTooSoon: "fronts",
}
"""Each planted repertoire and the law it breaks."""


# ----------------------------------------------------------------------------------- agents


class _Delegating(q.rl.AbstractOffPolicyAgent):
    """The user's DDPG (`tests/user_agent.py`) behind a wrapper: every planted agent below
    changes one method of it."""

    inner: typing.Any

    @property
    def observation_size(self):
        return self.inner.observation_size

    @property
    def action_size(self):
        return self.inner.action_size

    @property
    def normalise_observations(self):
        return self.inner.normalise_observations

    @property
    def minibatch_size(self):
        return self.inner.minibatch_size

    @property
    def num_envs(self):
        return self.inner.num_envs

    @property
    def buffer_size(self):
        return self.inner.buffer_size

    @property
    def grad_updates_per_step(self):
        return self.inner.grad_updates_per_step

    def init(self, hparams=None, *, key):
        return self.inner.init(hparams, key=key)

    def act(self, state, obs, *, deterministic=False, key):
        return self.inner.act(state, obs, deterministic=deterministic, key=key)

    def update(self, state, batch, *, key):
        return self.inner.update(state, batch, key=key)

    def empty_optimiser_states(self, state):
        return self.inner.empty_optimiser_states(state)

    def init_optimiser_states(self, state):
        return self.inner.init_optimiser_states(state)

    def reset_targets(self, state):
        return self.inner.reset_targets(state)

    def genome(self, state):
        return self.inner.genome(state)

    def with_genome(self, state, genome):
        return self.inner.with_genome(state, genome)


@typing.final
class KeepsOptimiser(_Delegating):
    """Its storage form keeps the optimiser states and targets (law `storage`)."""

    def empty_optimiser_states(self, state):
        return state


@typing.final
class DropsCritic(_Delegating):
    """`with_genome` sets the policy and forgets the critic (law `genome`)."""

    def with_genome(self, state, genome):
        return eqx.tree_at(lambda s: s.policy, state, genome[0])


@typing.final
class RatesAsFloats(_Delegating):
    """Resampled learning rates come back as Python floats (say, for a log line): each new
    value is a new static input, so training compiles again (law `retrace`)."""

    def resample_hparams(self, state, *, spaces=None, key):
        state = super().resample_hparams(state, spaces=spaces, key=key)
        return eqx.tree_at(lambda s: s.hparams.policy_lr, state, float(state.hparams.policy_lr))


@typing.final
class DecaysRates(_Delegating):
    """Each update decays the policy's learning rate in the hyperparameters (a schedule kept
    where PBT reads and explores them): training changes its hyperparameters (law
    `retrace`)."""

    def update(self, state, batch, *, key):
        state, metrics = self.inner.update(state, batch, key=key)
        lr = state.hparams.policy_lr
        return eqx.tree_at(lambda s: s.hparams.policy_lr, state, 0.99 * lr), metrics


@typing.final
class CastsCritic(_Delegating):
    """After training, it stores its critic, the critic's Adam state and its target in
    bfloat16 (to save memory between chunks; consistently, so its storage form still comes
    back): the trained run's leaves are not the run's, so training it again compiles again
    (law `retrace`)."""

    def train(self, env, run, num_iterations, *, key):
        run, metrics = super().train(env, run, num_iterations, key=key)
        cast = lambda x: x.astype(jnp.bfloat16) if eqx.is_inexact_array(x) else x  # noqa: E731
        parts = lambda r: (r.agent_state.critic, r.agent_state.critic_opt,  # noqa: E731
                           r.agent_state.target_critic)  # fmt: skip
        return eqx.tree_at(parts, run, jax.tree.map(cast, parts(run))), metrics


@typing.final
class NumPyNoise(_Delegating):
    """Its exploration noise comes from NumPy's global generator through a callback: two
    trainings of one run with one key differ (law `deterministic`)."""

    def act(self, state, obs, *, deterministic=False, key):
        action = state.policy(obs)
        if deterministic:
            return action
        shape = jax.ShapeDtypeStruct(action.shape, action.dtype)
        draw = lambda: np.random.normal(size=action.shape).astype(np.float32)  # noqa: E731
        noise = jax.pure_callback(draw, shape, vmap_method="sequential")
        return jnp.clip(action + state.hparams.noise * noise, -1.0, 1.0)


class Normalising(_Delegating):
    """The DDPG with running observation statistics in its state, read when it acts: a
    correct agent (the base of the planted one below)."""

    @property
    def normalise_observations(self):
        return True

    def init(self, hparams=None, *, key):
        state = self.inner.init(hparams, key=key)
        stats = q.rl.RunningNormaliser.create(self.observation_size)
        return eqx.tree_at(lambda s: s.normaliser, state, stats, is_leaf=lambda x: x is None)

    def act(self, state, obs, *, deterministic=False, key):
        obs = self.normalise(state, obs)
        return self.inner.act(state, obs, deterministic=deterministic, key=key)


@typing.final
class ForgetsStatistics(Normalising):
    """`with_genome` builds the observation statistics afresh, as `init` does: a fresh state
    cannot tell, a trained one loses what it saw (law `genome`)."""

    def with_genome(self, state, genome):
        state = self.inner.with_genome(state, genome)
        stats = q.rl.RunningNormaliser.create(self.observation_size)
        return eqx.tree_at(lambda s: s.normaliser, state, stats)


# ----------------------------------------------------------------------------- environments


class Walk(q.envs.AbstractQDEnv):
    """A correct QD task: a point on [-1, 1] moved by its action, starting near 0, ending
    when it reaches an end; the descriptor is where it ends."""

    length: int = eqx.field(static=True, default=12)

    @property
    def observation_size(self):
        return 1

    @property
    def action_size(self):
        return 1

    @property
    def state_descriptor_size(self):
        return 1

    @property
    def episode_length(self):
        return self.length

    @property
    def descriptor_size(self):
        return 1

    @property
    def descriptor_bounds(self):
        return (-1.0,), (1.0,)

    @property
    def reward_offset(self):
        return 1.0

    @property
    def descriptor_names(self):
        return ("final position",)

    @property
    def arena(self):
        return None

    def _start_terminated(self, x):
        return jnp.zeros((), jnp.float32)

    def _move(self, x, action):
        return jnp.clip(x + 0.3 * jnp.clip(action, -1.0, 1.0), -1.0, 1.0)

    def _observe(self, x):
        return x

    def reset(self, *, key):
        x = jr.uniform(key, (1,), minval=-0.5, maxval=0.5)
        zero = jnp.zeros((), jnp.float32)
        return q.envs.EnvState(x, self._observe(x), zero, self._start_terminated(x), x)

    def step(self, state, action, *, key):
        x = self._move(state.physics, action)
        terminated = (jnp.abs(x[0]) >= 1.0).astype(jnp.float32)
        return q.envs.EnvState(x, self._observe(x), -jnp.abs(x[0]), terminated, x)

    def descriptor(self, state_descs, valid):
        return q.envs.final_descriptor(state_descs, valid)


@typing.final
class WideObservation(Walk):
    """Observes its position twice where it declares one number (law `shapes`)."""

    def _observe(self, x):
        return jnp.concatenate([x, x])


@typing.final
class StartsTerminated(Walk):
    """Evaluates its end condition at reset with the wrong threshold: a start beyond 0.25
    begins terminated (law `autoreset`)."""

    def _start_terminated(self, x):
        return (jnp.abs(x[0]) > 0.25).astype(jnp.float32)


@typing.final
class Escapes(Walk):
    """Forgets to clip its position: an episode can end beyond its bounds (law `bounds`)."""

    def _move(self, x, action):
        return x + 0.3 * jnp.clip(action, -1.0, 1.0)


@typing.final
class Bounces(Walk):
    """A correct task whose `terminated` does not stick: stepped on after reaching an end,
    the point goes on from the middle (where it starts) and the flag drops. Nothing in the
    library steps an episode past its first termination unmasked, so this is no bug
    (`docs/design.md`)."""

    def reset(self, *, key):
        x, zero = jnp.zeros((1,), jnp.float32), jnp.zeros((), jnp.float32)
        return q.envs.EnvState(x, self._observe(x), zero, zero, x)

    def step(self, state, action, *, key):
        moved = state.physics + 0.3 * jnp.clip(action, -1.0, 1.0)
        terminated = (jnp.abs(moved[0]) >= 1.0).astype(jnp.float32)
        x = jnp.where(jnp.abs(moved) >= 1.0, 0.0, moved)
        return q.envs.EnvState(x, self._observe(x), -jnp.abs(x[0]), terminated, x)


@typing.final
class PoolsRewards(_Delegating):
    """Scales each minibatch's rewards by their spread, computed in a NumPy callback declared
    vectorised (`vmap_method="expand_dims"`) though it is not: trained in a population, the
    spread pools every member's rewards, so a member trains otherwise than alone (law
    `population`)."""

    def update(self, state, batch, *, key):
        def spread(rewards):  # NumPy over whatever it is given: one batch, or all members'
            return np.full(rewards.shape[:-1], 1.0 + np.std(rewards), np.float32)

        shape = jax.ShapeDtypeStruct(batch.reward.shape[:-1], jnp.float32)
        scale = jax.pure_callback(spread, shape, batch.reward, vmap_method="expand_dims")
        batch = eqx.tree_at(lambda b: b.reward, batch, batch.reward / scale[..., None])
        return self.inner.update(state, batch, key=key)


@typing.final
class NoisyStart(Walk):
    """Draws its start from NumPy's global generator through a callback: `reset` with one key
    gives other states (law `deterministic`)."""

    def reset(self, *, key):
        shape = jax.ShapeDtypeStruct((1,), jnp.float32)
        draw = lambda: np.random.uniform(-0.5, 0.5, size=(1,)).astype(np.float32)  # noqa: E731
        x = jax.pure_callback(draw, shape, vmap_method="sequential")
        zero = jnp.zeros((), jnp.float32)
        return q.envs.EnvState(x, self._observe(x), zero, self._start_terminated(x), x)


# ---------------------------------------------------------------------------------- rankers


@typing.final
class FlipsNaN(q.AbstractRanker):
    """By fitness, highest first, as `flip(argsort(fitnesses))`: argsort puts NaN last and the
    flip first, so a failed evaluation is the top parent (law `failed_last`; the bug the
    fidelity review found in the built-in rankers)."""

    def rank(self, direction, fitnesses, descriptors, add_info):
        return jnp.flip(jnp.argsort(fitnesses)), fitnesses


@typing.final
class TopHalfOnly(q.AbstractRanker):
    """Orders only the better half and repeats it, as if the rest did not matter: the order
    is no permutation of the batch (law `order`)."""

    def rank(self, direction, fitnesses, descriptors, add_info):
        best = jnp.argsort(-jnp.where(jnp.isfinite(fitnesses), fitnesses, -jnp.inf))
        half = best[: (fitnesses.shape[0] + 1) // 2]
        return jnp.concatenate([half, half])[: fitnesses.shape[0]], fitnesses


PLANTED_RANKERS = {FlipsNaN: "failed_last", TopHalfOnly: "order"}
"""Each planted ranker and the law it breaks."""


PLANTED_AGENTS = {
    KeepsOptimiser: "storage",
    DropsCritic: "genome",
    NumPyNoise: "deterministic",
    RatesAsFloats: "retrace",
    DecaysRates: "retrace",
    CastsCritic: "retrace",
    ForgetsStatistics: "genome",
    PoolsRewards: "population",
}
"""Each planted agent (wrapping the user's DDPG) and the law it breaks."""

PLANTED_ENVS = {
    WideObservation: "shapes",
    NoisyStart: "deterministic",
    StartsTerminated: "autoreset",
    Escapes: "bounds",
}
"""Each planted environment and the law it breaks."""
