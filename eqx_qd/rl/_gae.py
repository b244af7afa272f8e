"""Generalised advantage estimation (Schulman et al., 2016), with termination and truncation
told apart: a terminated step does not bootstrap, a truncated one does (from the value of the
true next state), and neither lets advantages flow across the episode boundary."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .. import _validate as check


def gae(
    rewards: Float[Array, " time *batch"],
    values: Float[Array, " time *batch"],
    next_values: Float[Array, " time *batch"],
    terminated: Float[Array, " time *batch"],
    truncated: Float[Array, " time *batch"],
    gamma: Float[Array, ""] | float,
    gae_lambda: Float[Array, ""] | float,
) -> tuple[Float[Array, " time *batch"], Float[Array, " time *batch"]]:
    """Advantages and value targets (advantages + values) of a rollout, time on axis 0.

    **Arguments** (all `(time, *batch)`, but the two scalars):

    - `rewards`: the reward of each step.
    - `values`: the value of the observation each step started from.
    - `next_values`: the value of the observation each step reached (before any reset).
    - `terminated`: 1.0 where the episode truly ended (no bootstrap).
    - `truncated`: 1.0 where it was cut (bootstrap, but no advantage flows across).
    - `gamma`, `gae_lambda`: the discount and GAE's lambda.

    `next_values[t]` is the value of the observation reached by step `t` (before any reset);
    the last step of a rollout cut by its length should be marked `truncated` so that the
    recursion bootstraps there and stops.
    """
    for name, x in (
        ("values", values),
        ("next_values", next_values),
        ("terminated", terminated),
        ("truncated", truncated),
    ):
        check.shape(f"gae: {name}", x, rewards.shape)
    if rewards.ndim == 0:
        raise ValueError("gae: rewards must have a leading time axis, got shape ()")
    check.fraction("gae: gamma", gamma)
    check.fraction("gae: gae_lambda", gae_lambda)
    gamma = jnp.asarray(gamma, rewards.dtype)
    gae_lambda = jnp.asarray(gae_lambda, rewards.dtype)
    deltas = rewards + gamma * (1.0 - terminated) * next_values - values
    done = jnp.maximum(terminated, truncated)

    def back(carry, x):
        delta, d = x
        adv = delta + gamma * gae_lambda * (1.0 - d) * carry
        return adv, adv

    _, advantages = jax.lax.scan(back, jnp.zeros_like(deltas[0]), (deltas, done), reverse=True)
    return advantages, advantages + values
