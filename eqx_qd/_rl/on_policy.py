"""Training IPPO: updates in one scan, evaluation on full episodes, and metric summaries.

(Checkpoints, the evaluate-every-N driver and its progress bar live in `eqx_qd.jobs`.)"""

import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from .._custom_types import PRNGKey
from .._misc import filter_scan
from .ppo import IPPO, IPPOAgentState, Metrics, PPOState


# ----------------------------------------------------------------------------- training


@eqx.filter_jit
def train_updates(agent: IPPO, state: PPOState, num_updates: int) -> tuple[PPOState, Metrics]:
    """``num_updates`` PPO updates of ``agent`` (rollout + update) from ``state``, in one
    ``lax.scan``.

    **Returns:** the state after the updates, and the metrics of every update stacked
    ``(num_updates, num_agents)``.

    Vmap it over a batch of states (e.g. built from `PPOHParams.stack`) to train a sweep in one
    program.
    """
    return filter_scan(lambda s, _: agent.train_step(s), state, None, length=num_updates)


# ----------------------------------------------------------------------------- evaluation


class EpisodeStats(eqx.Module):
    """Full episodes of the current policies (`evaluate_ippo`).

    **Fields:** `returns` and `final_rewards` (the last step's reward) ``(n_evals,
    num_agents)``; `terminated` and `truncated` ``(n_evals,)`` (how each episode ended);
    `lengths` ``(n_evals,)``.
    """

    returns: Float[Array, "n_evals num_agents"]
    final_rewards: Float[Array, "n_evals num_agents"]
    terminated: Bool[Array, " n_evals"]
    truncated: Bool[Array, " n_evals"]
    lengths: Int[Array, " n_evals"]

    def to_dict(self) -> dict[str, list]:
        """Plain Python lists by field name (checkpoint metrics JSON)."""
        return {k: np.asarray(getattr(self, k)).tolist() for k in _EVAL_FIELDS}


_EVAL_FIELDS = tuple(EpisodeStats.__dataclass_fields__)


@eqx.filter_jit
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
    until terminated or truncated (``max_steps`` is a safety cap for environments without a
    time limit: an episode reaching it counts as truncated).

    With ``deterministic``, each policy plays its mode; otherwise actions are sampled.
    **Returns:** the `EpisodeStats`.
    """
    env = agent.env

    def episode(key):
        reset_key, key = jr.split(key)
        start = env.reset(key=reset_key)
        zeros = jnp.zeros((env.num_agents,), jnp.float32)
        false = jnp.zeros((), bool)
        carry = (start, zeros, zeros, false, false, key)

        def running(carry):
            s, _, _, terminated, truncated, _ = carry
            return ~(terminated | truncated)

        def step(carry):
            s, returns, _, _, _, key = carry
            key, act_key, step_key = jr.split(key, 3)
            actions = agent.act(state, s.obs, key=act_key, deterministic=deterministic)
            nxt = env.step(s, actions, key=step_key)
            capped = nxt.t >= max_steps
            return (
                nxt, returns + nxt.reward, nxt.reward, nxt.terminated > 0,
                (nxt.truncated > 0) | (capped & (nxt.terminated == 0)), key,
            )  # fmt: skip

        s, returns, final, terminated, truncated, _ = jax.lax.while_loop(running, step, carry)
        return returns, final, terminated, truncated, s.t

    return EpisodeStats(*jax.vmap(episode)(jr.split(key, n_evals)))


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
    if values.dtype == bool:
        values = values.astype(jnp.float32)
    return Summary(
        jnp.mean(values, axis), jnp.var(values, axis), jnp.std(values, axis),
        jnp.min(values, axis), jnp.max(values, axis), jnp.median(values, axis),
        jnp.any(jnp.isnan(values), axis),
    )  # fmt: skip
