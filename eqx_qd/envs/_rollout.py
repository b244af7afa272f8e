"""Transitions, and the two ways of playing episodes: `rollout` (with `rollout_states` keeping
the environment's states) and `evaluate_episodes`.

`rollout` plays one episode of `env.episode_length` steps in one single-agent environment,
recording every transition and state descriptor (what QD scoring and replay buffers need). Steps
after the episode terminated still run (shapes are fixed) but are marked invalid: they add
nothing to the return or the descriptor and are dropped when transitions go into a replay
buffer. `evaluate_episodes` plays any environment, single- or multi-agent, to each episode's
end and keeps only its statistics.
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from .. import _validate as check
from .._custom_types import PRNGKey
from ._base import AbstractBaseEnv, AbstractEnv, EnvState


class Transition(eqx.Module):
    """One environment step (or a batch of them: every field then has the same leading axes).

    **Fields:**

    - `obs`, `next_obs`: the observations before and after the step, `(*batch, obs_dim)`.
    - `action`: `(*batch, action_dim)`.
    - `reward`: `(*batch,)`, or `(*batch, num_objectives)` for a multi-objective task.
    - `terminated`: 1.0 at a true end of episode (no bootstrap).
    - `truncated`: 1.0 at a cut-off (time limit or rollout end), after which the value should
      still be bootstrapped.
    """

    obs: Float[Array, "*batch obs_dim"]
    action: Float[Array, "*batch action_dim"]
    reward: Float[Array, "*batch"] | Float[Array, "*batch num_objectives"]
    next_obs: Float[Array, "*batch obs_dim"]
    terminated: Float[Array, "*batch"]
    truncated: Float[Array, "*batch"]


class QDTransition(eqx.Module):
    """A `Transition` (`obs`, `action`, `reward`, `next_obs`, `terminated`, `truncated`) plus
    the state descriptors QD algorithms read (e.g. feet contacts): `state_desc` and
    `next_state_desc`, `(*batch, desc_dim)`, before and after the step."""

    obs: Float[Array, "*batch obs_dim"]
    action: Float[Array, "*batch action_dim"]
    reward: Float[Array, "*batch"] | Float[Array, "*batch num_objectives"]
    next_obs: Float[Array, "*batch obs_dim"]
    terminated: Float[Array, "*batch"]
    truncated: Float[Array, "*batch"]
    state_desc: Float[Array, "*batch desc_dim"]
    next_state_desc: Float[Array, "*batch desc_dim"]


class Episode(eqx.Module):
    """A fixed-length rollout.

    **Fields:**

    - `transitions`: a `QDTransition` per step (axes `(*batch, time)`).
    - `valid`: 1.0 for the steps of the episode, 0.0 for those after it terminated.
    """

    transitions: QDTransition
    valid: Float[Array, "*batch time"]

    @property
    def returns(self) -> Float[Array, "*batch"] | Float[Array, "*batch num_objectives"]:
        """The sum of the valid steps' rewards (one per objective, the last axis, for a
        multi-objective task)."""
        reward = self.transitions.reward
        valid = _per_step(self.valid, reward)
        time_axis = self.valid.ndim - 1
        return jnp.sum(jnp.where(valid > 0, reward, 0.0), axis=time_axis)

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
    """Play `policy` (observation -> action) for `env.episode_length` steps from a reset.

    Step `t` is valid while the episode had not terminated before it. The last valid step is
    marked `truncated` when the time limit, not termination, ended the episode.
    """
    return _play(env, policy, key, keep_states=False)[0]


def rollout_states(
    env: AbstractEnv,
    policy: Callable[[Float[Array, " obs_dim"]], Float[Array, " action_dim"]],
    *,
    key: PRNGKey,
) -> tuple[Episode, EnvState]:
    """`rollout` of `policy` in `env`, and the environment's states with it:
    `episode_length + 1` of them stacked on a leading time axis, the reset's first (to
    replay, render or plot an episode; the states after the episode ended are those of
    `Episode.valid` 0). Same key, same episode as `rollout`."""
    return _play(env, policy, key, keep_states=True)


def _play(env, policy, key, keep_states: bool):
    reset_key, steps_key = jr.split(key)
    first = env.reset(key=reset_key)
    length = env.episode_length

    def body(carry, step_key):
        state, alive = carry
        nxt, transition = _step(env, policy, state, step_key)
        out = (transition, alive, nxt) if keep_states else (transition, alive, None)
        return (nxt, alive * (1.0 - nxt.terminated)), out

    alive0 = jnp.ones((), jnp.float32)
    _, (transitions, valid, states) = jax.lax.scan(
        body, (first, alive0), jr.split(steps_key, length)
    )
    if keep_states:
        states = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, states)
    return Episode(_masked(transitions, valid, length), valid), states


def _step(env, policy, state: EnvState, step_key: PRNGKey) -> tuple[EnvState, QDTransition]:
    """One step of `policy` in `env` from `state`: the next state and the transition."""
    action = policy(state.obs)
    check.shape("rollout: the policy's action", action, env.action_shape)
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
    return nxt, transition


def _per_step(valid: Array, reward: Array) -> Array:
    """`valid` `(*batch, time)` shaped to multiply `reward`, `(*batch, time)` or `(*batch,
    time, num_objectives)`."""
    return valid if reward.ndim == valid.ndim else valid[..., None]


def _masked(transitions: QDTransition, valid, length: int) -> QDTransition:
    """Steps past termination may hold garbage (NaN physics): their rewards zeroed, and the
    last step marked `truncated` where the time limit, not termination, ended the episode
    (time the last axis)."""
    return eqx.tree_at(
        lambda t: (t.reward, t.truncated),
        transitions,
        (
            jnp.where(_per_step(valid, transitions.reward) > 0, transitions.reward, 0.0),
            jnp.broadcast_to(jnp.arange(length) == length - 1, valid.shape).astype(jnp.float32)
            * valid
            * (1.0 - transitions.terminated),
        ),
    )


def _play_many(env, act, members, keys) -> Episode:
    """The episodes of `jax.vmap` of `rollout` over a batch: episode `i` is `rollout(env,
    lambda obs: act(members[i], keys[i], obs), key=keys[i])` (`members` a stacked pytree, its
    arrays' first axis the batch; `keys` `(batch,)`), the `Episode` fields `(batch, time)`.

    The same episodes (tested bit for bit), with the time loop outside the batch: one scan
    of the batched step. JAX traces the body of a vmapped scan, then batches that trace
    again; this traces the batched body once, with the same results
    (`benchmarks/log/epyc-family26-model2.md`, "Scoring traced once")."""
    length = env.episode_length
    split = jax.vmap(jr.split)(keys)  # each episode's reset key and steps key, as `_play`'s
    first = jax.vmap(lambda k: env.reset(key=k))(split[:, 0])
    step_keys = jnp.swapaxes(jax.vmap(lambda k: jr.split(k, length))(split[:, 1]), 0, 1)
    dyn, static = eqx.partition(members, eqx.is_array)

    def one(member, key, state, step_key):
        policy = lambda obs: act(eqx.combine(member, static), key, obs)
        return _step(env, policy, state, step_key)

    def body(carry, keys_now):
        state, alive = carry
        nxt, transition = jax.vmap(one)(dyn, keys, state, keys_now)
        return (nxt, alive * (1.0 - nxt.terminated)), (transition, alive)

    alive0 = jnp.ones(keys.shape[:1], jnp.float32)
    _, (transitions, valid) = jax.lax.scan(body, (first, alive0), step_keys)
    transitions, valid = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), (transitions, valid))
    return Episode(_masked(transitions, valid, length), valid)


class EpisodeStats(eqx.Module):
    """Full episodes played to their end (`evaluate_episodes`).

    **Fields:** `returns` and `final_rewards` (the last step's reward) `(num_episodes, *agents)`
    (no agent axis for a single-agent environment); `terminated` and `truncated`
    `(num_episodes,)` (how each episode ended); `lengths` `(num_episodes,)`.
    """

    returns: Float[Array, " num_episodes *agents"]
    final_rewards: Float[Array, " num_episodes *agents"]
    terminated: Bool[Array, " num_episodes"]
    truncated: Bool[Array, " num_episodes"]
    lengths: Int[Array, " num_episodes"]

    def to_dict(self) -> dict[str, list]:
        """Plain Python lists by field name (checkpoint metrics JSON)."""
        return {k: np.asarray(getattr(self, k)).tolist() for k in _EPISODE_FIELDS}


_EPISODE_FIELDS = tuple(EpisodeStats.__dataclass_fields__)


def evaluate_episodes(
    env: AbstractBaseEnv,
    policy: Callable[[Array, PRNGKey], Array],
    num_episodes: int,
    *,
    max_steps: int = 100_000,
    key: PRNGKey,
) -> EpisodeStats:
    """`num_episodes` episodes of `env` (single- or multi-agent), each played by
    `policy(obs, key) -> action` until it terminates or its time limit cuts it
    (`AbstractBaseEnv.truncated`). `max_steps` is a safety cap for environments without a
    time limit: an episode reaching it counts as truncated.

    Unlike `rollout`, episodes stop at their end (a `while_loop`), so no step is wasted and
    no length is fixed in advance. **Returns:** the `EpisodeStats`.
    """

    def episode(key):
        reset_key, key = jr.split(key)
        start = env.reset(key=reset_key)
        zeros = jnp.zeros_like(start.reward)
        false = jnp.zeros((), bool)
        carry = (start, jnp.zeros((), jnp.int32), zeros, zeros, false, false, key)

        def running(carry):
            return ~(carry[4] | carry[5])

        def step(carry):
            s, t, returns, _, _, _, key = carry
            key, act_key, step_key = jr.split(key, 3)
            action = policy(s.obs, act_key)
            check.shape("evaluate_episodes: the policy's action", action, env.action_shape)
            nxt = env.step(s, action, key=step_key)
            t = t + 1
            terminated = nxt.terminated > 0
            truncated = (env.truncated(nxt, t) > 0) | ((t >= max_steps) & ~terminated)
            return nxt, t, returns + nxt.reward, nxt.reward, terminated, truncated, key

        _, t, returns, final, terminated, truncated, _ = jax.lax.while_loop(running, step, carry)
        return returns, final, terminated, truncated, t

    return EpisodeStats(*jax.vmap(episode)(jr.split(key, num_episodes)))
