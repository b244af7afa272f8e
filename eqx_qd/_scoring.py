"""Rollouts of fixed length with masking after termination, policy scoring for QD, re-evaluation.

`rollout` plays one episode of ``env.episode_length`` steps in one environment. Steps after the
episode terminated still run (shapes are fixed) but are marked invalid: they add nothing to the
return or the descriptor and are dropped when transitions go into a replay buffer.
"""

import typing
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float

from ._buffers import QDTransition
from ._custom_types import PRNGKey
from ._envs import AbstractEnv, AbstractQDEnv


class Episode(eqx.Module):
    """A fixed-length rollout: its transitions (leading axis: time) and which are valid."""

    transitions: QDTransition
    valid: Float[Array, "*batch time"]

    @property
    def returns(self) -> Float[Array, "*batch"]:
        return jnp.sum(jnp.where(self.valid > 0, self.transitions.reward, 0.0), axis=-1)

    @property
    def lengths(self) -> Float[Array, "*batch"]:
        return jnp.sum(self.valid, axis=-1)


def rollout(
    env: AbstractEnv,
    policy: Callable[[Float[Array, " obs_dim"]], Float[Array, " action_dim"]],
    *,
    key: PRNGKey,
) -> Episode:
    """Play ``policy`` (observation -> action) for ``env.episode_length`` steps from a reset.

    Step ``t`` is valid while the episode had not terminated before it. The last valid step is
    marked ``truncated`` when the time limit, not termination, ended the episode.
    """
    reset_key, steps_key = jr.split(key)
    first = env.reset(key=reset_key)
    length = env.episode_length

    def body(carry, step_key):
        state, alive = carry
        action = policy(state.obs)
        nxt = env.step(state, action, key=step_key)
        transition = QDTransition(
            obs=state.obs,
            action=action,
            reward=nxt.reward,
            next_obs=nxt.obs,
            terminated=nxt.terminated,
            truncated=jnp.zeros((), jnp.float32),
            state_desc=state.state_desc,
            next_state_desc=nxt.state_desc,
        )
        return (nxt, alive * (1.0 - nxt.terminated)), (transition, alive)

    alive0 = jnp.ones((), jnp.float32)
    _, (transitions, valid) = jax.lax.scan(body, (first, alive0), jr.split(steps_key, length))
    # Steps past termination may hold garbage (NaN physics): zero what is reported.
    transitions = eqx.tree_at(
        lambda t: (t.reward, t.truncated),
        transitions,
        (
            jnp.where(valid > 0, transitions.reward, 0.0),
            (jnp.arange(length) == length - 1).astype(jnp.float32)
            * valid
            * (1.0 - transitions.terminated),
        ),
    )
    return Episode(transitions, valid)


class ScoringExtra(eqx.Module):
    """What a policy scoring function returns besides fitness and descriptor (one row per
    genotype): the episodes, for replay buffers (use ``valid`` as the insertion mask)."""

    episodes: Episode


@typing.final
class PolicyScorer(eqx.Module):
    """A MAP-Elites scoring function for policy genotypes.

    ``scorer(policies, key=) -> (fitnesses, descriptors, ScoringExtra)``, where ``policies`` is a
    stacked population (``eqx.filter_vmap`` of a policy constructor) of callables
    ``obs -> action``. Fitness: the episode return; descriptor: ``env.descriptor`` of the valid
    steps. Each genotype gets its own key.

    With ``agent``, genotypes are that agent's training states instead (ME-PBT), played with
    ``agent.act(state, obs, deterministic=True)``.
    """

    env: AbstractQDEnv
    agent: Any = None

    @property
    def qd_offset(self) -> float:
        return self.env.qd_offset

    def episodes(self, policies, *, key: PRNGKey) -> Episode:
        n = _population_size(policies)
        agent = self.agent

        def play(genotype, k):
            if agent is None:
                return rollout(self.env, genotype, key=k)
            policy = lambda obs: agent.act(genotype, obs, key=k, deterministic=True)
            return rollout(self.env, policy, key=k)

        return eqx.filter_vmap(play)(policies, jr.split(key, n))

    def __call__(
        self, policies, *, key: PRNGKey
    ) -> tuple[Float[Array, " batch"], Float[Array, "batch num_descriptors"], ScoringExtra]:
        episodes = self.episodes(policies, key=key)
        descriptors = jax.vmap(self.env.descriptor)(
            episodes.transitions.next_state_desc, episodes.valid
        )
        return episodes.returns, descriptors, ScoringExtra(episodes)


def _population_size(policies) -> int:
    leaves = [x for x in jax.tree.leaves(policies) if eqx.is_array(x)]
    if not leaves:
        raise ValueError("a policy population needs array leaves with a leading population axis")
    return leaves[0].shape[0]


class Reevaluation(eqx.Module):
    """Scores of the same genotypes over ``num_evals`` keys (leading axis of the raw fields)."""

    fitnesses: Float[Array, "num_evals batch"]
    descriptors: Float[Array, "num_evals batch num_descriptors"]

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


def reevaluate(scoring_fn: Callable, genotypes, num_evals: int, *, key: PRNGKey) -> Reevaluation:
    """Score ``genotypes`` ``num_evals`` times with independent keys (robustness statistics,
    e.g. the PGA-ME repo's average of the best elite's fitness over 10 evaluations)."""
    if num_evals < 1:
        raise ValueError(f"num_evals must be a positive integer, got {num_evals}")

    def one(k):
        fitnesses, descriptors, _ = scoring_fn(genotypes, key=k)
        return fitnesses, descriptors

    fitnesses, descriptors = jax.lax.map(one, jr.split(key, num_evals))
    return Reevaluation(fitnesses, descriptors)
