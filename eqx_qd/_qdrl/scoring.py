"""Policy scoring for QD (episodes of fixed length, masked after termination) and
re-evaluation: the bridge from environments and agents to MAP-Elites."""

import typing
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float

from .. import _validate as check
from .._custom_types import PRNGKey
from .._misc import f32
from .._sampling import estimate, ESTIMATORS
from .._tasks import AbstractScorer, AbstractTask
from ..envs._base import AbstractQDEnv, EnvState
from ..envs._rollout import _play_many, Episode, QDTransition, rollout_states, Transition
from ..rl._base import AbstractAgent


class ScoringExtra(eqx.Module):
    """What a policy scoring function returns besides fitness and descriptor (one row per
    genotype): the episodes, for replay buffers (use `valid` as the insertion mask)."""

    episodes: Episode


def episode_transitions(
    extra: ScoringExtra,
    *,
    objective: int | None = None,
    where: str = "episode_transitions",
    state_descriptors: bool = False,
) -> tuple[Transition | QDTransition, Float[Array, " rows"]]:
    """Flatten a scoring extra's episodes to rows of transitions and their validity mask.

    `objective`: for a multi-objective task's episodes (a reward per objective), the column
    each row's reward is taken from; `None` for one reward per step. A mismatch is an error
    that starts with `where`. `state_descriptors`: `QDTransition` rows, with each step's state
    descriptors before and after it (QDPG's diversity reward reads them), instead of
    `Transition` rows.
    """
    if not isinstance(extra, ScoringExtra):
        raise TypeError(
            f"{where}: extra must be the ScoringExtra of a PolicyScorer, got {type(extra).__name__}"
        )
    t = extra.episodes.transitions
    reward = t.reward
    if reward.ndim > extra.episodes.valid.ndim:  # a reward per objective
        m = reward.shape[-1]
        if objective is None:
            raise ValueError(
                f"{where}: the episodes hold {m} objectives' rewards; say which one to "
                f"learn from (objective=0 ... objective={m - 1})"
            )
        check.integer(f"{where}: objective", objective, minimum=0, maximum=m - 1)
        reward = reward[..., objective]
    elif objective is not None:
        raise ValueError(
            f"{where}: objective={objective} given, but the episodes hold one reward per step "
            "(not a multi-objective task)"
        )
    flat = lambda x: x.reshape((-1,) + x.shape[2:])
    fields = (t.obs, t.action, reward, t.next_obs, t.terminated, t.truncated)
    if state_descriptors:
        rows = QDTransition(*map(flat, fields + (t.state_desc, t.next_state_desc)))
    else:
        rows = Transition(*map(flat, fields))
    return rows, flat(extra.episodes.valid)


_SCORE_NOISE = 0x5C0E
"""What the call's key is folded with for the scores' noise."""


@typing.final
class PolicyScorer(AbstractScorer):
    """A MAP-Elites scoring function for policy genotypes.

    `scorer(policies, key=) -> (fitnesses, descriptors, ScoringExtra)`, where `policies` is a
    stacked population (`eqx.filter_vmap` of a policy constructor) of callables
    `obs -> action`. Fitness: the episode return; descriptor: `env.descriptor` of the valid
    steps. Each genotype gets its own key.

    With `agent`, genotypes are that agent's training states instead (ME-PBT), played with
    `agent.act(state, obs, deterministic=True)`.

    On a multi-objective task (`envs.AbstractMultiObjectiveQDEnv`) the fitnesses are the
    episodes' return vectors, `(batch, num_objectives)`: MOME's scoring function.

    `fitness_noise` and `descriptor_noise` add Gaussian noise of those standard deviations to
    each episode's return and to each descriptor coordinate (0: none), drawn from a key folded
    off the call's (the episodes' keys are the same with and without): with the environment's
    `reset_noise` and `obs_noise`, the noisy variants of a QD task for uncertain-QD studies.

    With `num_samples` above 1 every genotype plays that many episodes (MAP-Elites-sampling:
    sample `i` with `jr.split(key, num_samples)[i]`, vmapped) and its fitness and descriptor
    are their `estimator` estimates (`internal.ESTIMATORS`); the `ScoringExtra` holds the
    samples' episodes side by side in time, `(batch, num_samples * episode_length)` steps.
    """

    env: AbstractQDEnv
    agent: AbstractAgent | None = None
    fitness_noise: Float[Array, ""] = eqx.field(default=0.0, converter=f32)
    descriptor_noise: Float[Array, ""] = eqx.field(default=0.0, converter=f32)
    num_samples: int = eqx.field(default=1, static=True)
    estimator: str = eqx.field(default="mean", static=True)

    def __check_init__(self):
        if not isinstance(self.env, AbstractQDEnv):
            raise TypeError(
                f"PolicyScorer.env must be an AbstractQDEnv (it defines the descriptor), got "
                f"{type(self.env).__name__}"
            )
        if self.agent is not None:
            check.same_sizes(self.agent, self.env, "PolicyScorer")
        check.non_negative("PolicyScorer.fitness_noise", self.fitness_noise)
        check.non_negative("PolicyScorer.descriptor_noise", self.descriptor_noise)
        check.positive_int("PolicyScorer.num_samples", self.num_samples)
        check.one_of("PolicyScorer.estimator", self.estimator, ESTIMATORS)

    @property
    def qd_offset(self) -> float:
        return self.env.qd_offset

    def episodes(self, policies, *, key: PRNGKey) -> Episode:
        """One episode per genotype of `policies` (a stacked population), each with its own
        key; the `Episode` fields get a leading population axis. Genotype `i`'s episode is
        `rollout`'s with `jr.split(key, population)[i]`, played as one scan of the batched step
        (JAX traces that once; a vmapped `rollout` it traces, then batches again)."""
        n = _population_size(policies)
        agent = self.agent
        if agent is None:
            act = lambda genotype, k, obs: genotype(obs)
        else:
            act = lambda genotype, k, obs: agent.act(genotype, obs, key=k, deterministic=True)
        # `rollout` of each genotype with its key, the time loop outside the batch.
        return _play_many(self.env, act, policies, jr.split(key, n))

    @property
    def one_sample(self) -> "PolicyScorer":
        """This scorer with one episode per genotype (its noise kept): what re-evaluations
        play, each of them one evaluation."""
        if self.num_samples == 1:
            return self
        return PolicyScorer(self.env, self.agent, self.fitness_noise, self.descriptor_noise)

    def replay(self, genotype, *, key: PRNGKey) -> tuple[Episode, EnvState]:
        """One genotype (not stacked) played as scoring plays it, with the environment's
        states (`rollout_states`): to look at what an elite does. On a deterministic task the
        return is the stored fitness, up to float32 rounding: scoring stepped a batch, this
        steps one, and brax's contacts amplify the difference (a few percent over 100 steps;
        pure-JAX tasks replay exactly)."""
        policy = genotype
        if self.agent is not None:
            policy = lambda obs: self.agent.act(genotype, obs, key=key, deterministic=True)
        return rollout_states(self.env, policy, key=key)

    def __call__(
        self, policies, *, key: PRNGKey
    ) -> tuple[
        Float[Array, " batch"] | Float[Array, "batch num_objectives"],
        Float[Array, "batch num_descriptors"],
        ScoringExtra,
    ]:
        n = self.num_samples
        if n == 1:
            episodes = self.episodes(policies, key=key)
        else:  # sample i played with jr.split(key, n)[i], the samples vmapped
            episodes = jax.vmap(lambda k: self.episodes(policies, key=k))(jr.split(key, n))
        descriptor = jax.vmap(self.env.descriptor)
        if n > 1:
            descriptor = jax.vmap(descriptor)
        descriptors = descriptor(episodes.transitions.next_state_desc, episodes.valid)
        f_key, d_key = jr.split(jr.fold_in(key, _SCORE_NOISE))
        returns = episodes.returns + self.fitness_noise * jr.normal(f_key, episodes.returns.shape)
        descriptors = descriptors + self.descriptor_noise * jr.normal(d_key, descriptors.shape)
        if n == 1:
            return returns, descriptors, ScoringExtra(episodes)
        # Each genotype's samples side by side in time: (batch, samples * time) steps, so the
        # replay buffers and DiscardDead read them as one long episode's.
        side_by_side = jax.tree.map(
            lambda x: jnp.moveaxis(x, 0, 1).reshape((x.shape[1], -1) + x.shape[3:]), episodes
        )
        return (
            estimate(jnp.moveaxis(returns, 0, 1), self.estimator),
            estimate(jnp.moveaxis(descriptors, 0, 1), self.estimator),
            ScoringExtra(side_by_side),
        )


@typing.final
class FlatPolicyTask(AbstractTask):
    """Policies as flat parameter vectors: a task whose genotypes are `(batch, genotype_dim)`
    rows, each unravelled into a policy shaped like `template` and played by a `PolicyScorer`
    on `env`. The ES emitters (CMA-ME, CMA-MAE, and at neural-network sizes their scalable
    strategies: `EvolutionStrategyEmitter(es="lm_ma_es")`) search flat vectors; this is how
    they search policies, as pyribs' scalable CMA-MAE trains controllers.

    **Fields:** `scorer`, the `PolicyScorer`; `template`, a policy (any module `obs ->
    action`) whose array leaves give the shapes and whose other leaves (activations, sizes)
    every genotype shares; `genotype_dim` (static), the number of its parameters, in
    `jax.flatten_util.ravel_pytree` order.
    """

    scorer: PolicyScorer
    template: eqx.Module
    genotype_dim: int = eqx.field(static=True)

    def __init__(self, env: AbstractQDEnv, template: eqx.Module):
        self.scorer = PolicyScorer(env)
        self.template = template
        params = eqx.filter(template, eqx.is_array)
        self.genotype_dim = int(ravel_pytree(params)[0].shape[0])
        if self.genotype_dim == 0:
            raise ValueError("FlatPolicyTask: the template policy has no array parameters")

    @property
    def num_descriptors(self) -> int:
        return self.scorer.env.descriptor_size

    @property
    def descriptor_bounds(self) -> tuple[float, float]:
        """The environment's per-dimension bounds' lowest and highest."""
        lower, upper = self.scorer.env.descriptor_bounds
        return float(min(lower)), float(max(upper))

    @property
    def qd_offset(self) -> float:
        return self.scorer.qd_offset

    def flatten(self, policy: eqx.Module) -> Float[Array, " genotype_dim"]:
        """`policy`'s parameters as one genotype (the inverse of `policies` for one row)."""
        return ravel_pytree(eqx.filter(policy, eqx.is_array))[0]

    def policies(self, genotypes: Float[Array, "batch genotype_dim"]) -> eqx.Module:
        """The stacked population of policies the rows of `genotypes` hold."""
        check.rows("FlatPolicyTask: genotypes", genotypes, (self.genotype_dim,))
        params, static = eqx.partition(self.template, eqx.is_array)
        _, unravel = ravel_pytree(params)
        return eqx.combine(jax.vmap(unravel)(genotypes), static)

    def __call__(
        self, genotypes: Float[Array, "batch genotype_dim"], *, key: PRNGKey
    ) -> tuple[Float[Array, " batch"], Float[Array, "batch num_descriptors"], ScoringExtra]:
        return self.scorer(self.policies(genotypes), key=key)

    def init_genotypes(self, num: int, *, key: PRNGKey) -> Float[Array, "{num} genotype_dim"]:
        """`num` copies of the template's parameters (the ES emitters start their strategies
        at the first; build the template with the initialisation you want them to start from)."""
        return jnp.broadcast_to(self.flatten(self.template), (num, self.genotype_dim))


def _population_size(policies) -> int:
    leaves = [x for x in jax.tree.leaves(policies) if eqx.is_array(x)]
    if not leaves:
        raise ValueError("a policy population needs array leaves with a leading population axis")
    return leaves[0].shape[0]


class Reevaluation(eqx.Module):
    """Scores of the same genotypes over `num_evaluations` keys.

    **Fields:** `fitnesses` `(num_evaluations, batch)` and `descriptors`
    `(num_evaluations, batch, num_descriptors)`; the properties give their means and standard
    deviations over the evaluations.
    """

    fitnesses: Float[Array, "num_evaluations batch"]
    descriptors: Float[Array, "num_evaluations batch num_descriptors"]

    @property
    def fitness_mean(self) -> Float[Array, " batch"]:
        return jnp.mean(self.fitnesses, axis=0)

    @property
    def fitness_std(self) -> Float[Array, " batch"]:
        return jnp.std(self.fitnesses, axis=0)

    @property
    def descriptor_mean(self) -> Float[Array, "batch num_descriptors"]:
        return jnp.mean(self.descriptors, axis=0)

    @property
    def descriptor_std(self) -> Float[Array, "batch num_descriptors"]:
        return jnp.std(self.descriptors, axis=0)


def reevaluate(
    scoring_fn: Callable, genotypes, num_evaluations: int, *, key: PRNGKey
) -> Reevaluation:
    """Score `genotypes` with `scoring_fn` `num_evaluations` times, with independent keys
    (robustness statistics, e.g. the PGA-ME repo's average of the best elite's fitness over 10
    evaluations)."""
    check.positive_int("reevaluate: num_evaluations", num_evaluations)

    def one(k):
        fitnesses, descriptors, _ = scoring_fn(genotypes, key=k)
        return fitnesses, descriptors

    fitnesses, descriptors = jax.lax.map(one, jr.split(key, num_evaluations))
    return Reevaluation(fitnesses, descriptors)


@typing.final
class DiscardDead(AbstractScorer):
    """A policy scorer whose candidates that terminated before the episode's end get fitness
    `-inf`, so the repertoire refuses them (the PGA-ME repository without
    `--not_discard_dead`). Their transitions still reach the replay buffer, as in that
    repository. **Fields:** `scorer`, the `PolicyScorer` it wraps."""

    scorer: PolicyScorer

    @property
    def qd_offset(self) -> float:
        return self.scorer.qd_offset

    def __call__(self, genotypes, *, key: PRNGKey):
        fitnesses, descriptors, extra = self.scorer(genotypes, key=key)
        episodes = extra.episodes
        ended = jnp.any((episodes.valid > 0) & (episodes.transitions.terminated > 0), axis=-1)
        return jnp.where(ended, -jnp.inf, fitnesses), descriptors, extra


@typing.final
class ChunkedScorer(eqx.Module):
    """Scores a large population in sequential chunks (the PGA-ME repository's
    `init_batch_size`): `scorer` on `chunk` genotypes at a time, the chunks one after
    another, so memory is that of one chunk.

    **Fields:** `scorer` (a scoring function) and `chunk` (genotypes per call; the population
    must split into whole chunks).
    """

    scorer: PolicyScorer | DiscardDead
    chunk: int = eqx.field(static=True)

    def __call__(self, genotypes, *, key: PRNGKey):
        n = jax.tree.leaves(eqx.filter(genotypes, eqx.is_array))[0].shape[0]
        k = n // self.chunk
        split = lambda x: x.reshape((k, self.chunk) + x.shape[1:]) if eqx.is_array(x) else x
        dyn, static = eqx.partition(jax.tree.map(split, genotypes), eqx.is_array)

        def one(args):
            d, kk = args
            return self.scorer(eqx.combine(d, static), key=kk)

        out = jax.lax.map(one, (dyn, jr.split(key, k)))
        return jax.tree.map(lambda x: x.reshape((n,) + x.shape[2:]), out)
