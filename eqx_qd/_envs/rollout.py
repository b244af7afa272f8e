"""Transitions, and rollouts of fixed length with masking after termination.

`rollout` plays one episode of ``env.episode_length`` steps in one environment. Steps after the
episode terminated still run (shapes are fixed) but are marked invalid: they add nothing to the
return or the descriptor and are dropped when transitions go into a replay buffer.
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float

from .._custom_types import PRNGKey
from .base import AbstractEnv


class Transition(eqx.Module):
    """One environment step (or a batch of them: every field then has the same leading axes).

    **Fields:**

    - `obs`, `next_obs`: the observations before and after the step, ``(*batch, obs_dim)``.
    - `action`: ``(*batch, action_dim)``.
    - `reward`: ``(*batch,)``.
    - `terminated`: 1.0 at a true end of episode (no bootstrap).
    - `truncated`: 1.0 at a cut-off (time limit or rollout end), after which the value should
      still be bootstrapped.
    """

    obs: Float[Array, "*batch obs_dim"]
    action: Float[Array, "*batch action_dim"]
    reward: Float[Array, "*batch"]
    next_obs: Float[Array, "*batch obs_dim"]
    terminated: Float[Array, "*batch"]
    truncated: Float[Array, "*batch"]


class QDTransition(eqx.Module):
    """A `Transition` (`obs`, `action`, `reward`, `next_obs`, `terminated`, `truncated`) plus
    the state descriptors QD algorithms read (e.g. feet contacts): `state_desc` and
    `next_state_desc`, ``(*batch, desc_dim)``, before and after the step."""

    obs: Float[Array, "*batch obs_dim"]
    action: Float[Array, "*batch action_dim"]
    reward: Float[Array, "*batch"]
    next_obs: Float[Array, "*batch obs_dim"]
    terminated: Float[Array, "*batch"]
    truncated: Float[Array, "*batch"]
    state_desc: Float[Array, "*batch desc_dim"]
    next_state_desc: Float[Array, "*batch desc_dim"]


class Episode(eqx.Module):
    """A fixed-length rollout.

    **Fields:**

    - `transitions`: a `QDTransition` per step (axes ``(*batch, time)``).
    - `valid`: 1.0 for the steps of the episode, 0.0 for those after it terminated.
    """

    transitions: QDTransition
    valid: Float[Array, "*batch time"]

    @property
    def returns(self) -> Float[Array, "*batch"]:
        """The sum of the valid steps' rewards."""
        return jnp.sum(jnp.where(self.valid > 0, self.transitions.reward, 0.0), axis=-1)

    @property
    def lengths(self) -> Float[Array, "*batch"]:
        """The number of valid steps."""
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
