"""Training IPPO: updates in one scan, evaluation on full episodes, and metric summaries.

(Checkpoints, the evaluate-every-N driver and its progress bar live in `eqx_qd.jobs`.)"""

import typing

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from .. import _validate as check
from .._compile import jit
from .._custom_types import PRNGKey
from .._misc import filter_scan
from ..envs._rollout import EpisodeStats, evaluate_episodes
from ._ippo import IPPO, IPPOAgentState, Metrics, PPOState


# ----------------------------------------------------------------------------- training


@jit(package_options=False)  # XLA's fusion emitters: see `eqx_qd._compile`
def train_updates(agent: IPPO, state: PPOState, num_updates: int) -> tuple[PPOState, Metrics]:
    """``num_updates`` PPO updates of ``agent`` (rollout + update) from ``state``, in one
    ``lax.scan``.

    **Returns:** the state after the updates, and the metrics of every update stacked
    ``(num_updates, num_agents)``.

    Vmap it over a batch of states (e.g. built from `PPOHParams.stack`) to train a sweep in one
    program.
    """
    check.positive_int("train_updates: num_updates", num_updates)
    return filter_scan(lambda s, _: agent.train_step(s), state, None, length=num_updates)


# ----------------------------------------------------------------------------- evaluation


@jit
def evaluate_ippo(
    agent: IPPO,
    state: IPPOAgentState | PPOState,
    n_evals: int,
    *,
    deterministic: bool = True,
    max_steps: int = 100000,
    key: PRNGKey,
) -> EpisodeStats:
    """``n_evals`` episodes of ``agent``'s environment with the policies of ``state``, each run
    until terminated or truncated (`evaluate_episodes`; ``max_steps`` is a safety cap for
    environments without a time limit: an episode reaching it counts as truncated).

    With ``deterministic``, each policy plays its mode; otherwise actions are sampled.
    **Returns:** the `EpisodeStats` (returns and final rewards per agent).
    """
    check.positive_int("evaluate_ippo: n_evals", n_evals)
    check.positive_int("evaluate_ippo: max_steps", max_steps)
    policy = lambda obs, k: agent.act(state, obs, key=k, deterministic=deterministic)
    return evaluate_episodes(agent.env, policy, n_evals, max_steps=max_steps, key=key)


class Summary(typing.NamedTuple):
    """Statistics of per-episode values over the episode axis."""

    mean: Array
    var: Array
    std: Array
    min: Array
    max: Array
    median: Array
    has_nans: Array


def summarize(values: Array | np.ndarray, axis: int = 0) -> Summary:
    """Mean, variance, standard deviation, min, max, median and NaN flag of ``values`` along
    ``axis`` (the episodes axis of `EpisodeStats` fields by default)."""
    values = jnp.asarray(values)
    check.integer("summarize: axis", axis)
    if not -values.ndim <= axis < max(values.ndim, 1):
        raise ValueError(
            f"summarize: axis {axis} is out of range for values of shape {values.shape}"
        )
    if values.dtype == bool:
        values = values.astype(jnp.float32)
    return Summary(
        jnp.mean(values, axis), jnp.var(values, axis), jnp.std(values, axis),
        jnp.min(values, axis), jnp.max(values, axis), jnp.median(values, axis),
        jnp.any(jnp.isnan(values), axis),
    )  # fmt: skip
