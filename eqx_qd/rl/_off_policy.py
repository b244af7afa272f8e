"""The off-policy training loop (TD3, SAC, or any `AbstractOffPolicyAgent`) and deterministic
evaluation (any `AbstractAgent`).

A training iteration steps `num_envs` environments once with the exploration policy,
inserts the transitions into the replay buffer, then takes `grad_steps` gradient steps on
batches sampled from it. `train` runs `num_iterations` of them in one `lax.scan`. Everything
is a pure function of modules, so a population trains with one `eqx.filter_vmap`.
"""

import abc
import math
import typing
from typing import TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Int

from .. import _validate as check
from .._compile import jit
from .._custom_types import PRNGKey
from .._misc import filter_scan
from ..envs._base import (
    AbstractEnv,
    autoreset_step,
    finished_episodes,
    training_reset,
    TrainingEnvState,
)
from ..envs._rollout import Transition
from ._base import (
    AbstractAgent,
    AbstractAgentState,
    AbstractTrainingRun,
    evaluate as evaluate,
    Metrics,
    TrainMetrics,
)
from ._buffers import ReplayBuffer


_S = TypeVar("_S", bound=AbstractAgentState)


@typing.final
class OffPolicyRun(AbstractTrainingRun):
    """One off-policy agent's training run.

    **Fields:** `agent_state` (the agent's state), `buffer` (its replay buffer), `env_state`
    (its environments mid-episode, leading axis `num_envs`) and `env_steps` (environment
    steps so far).
    """

    agent_state: AbstractAgentState
    buffer: ReplayBuffer
    env_state: TrainingEnvState  # batched: leading axis num_envs
    env_steps: Int[Array, ""]


class AbstractOffPolicyAgent(AbstractAgent[_S, OffPolicyRun]):
    """An agent that learns from a replay buffer: implement `update` (one gradient step on a
    batch of transitions) and the `AbstractAgent` methods other than `init_run` and `train`,
    which this class provides, with `warmup`.

    **Fields** it adds to `AbstractAgent`'s: `minibatch_size` (transitions per gradient
    step), `num_envs` (environments stepped together), `buffer_size` (replay capacity) and
    `grad_updates_per_step` (gradient steps per environment step).
    """

    minibatch_size: eqx.AbstractVar[int]
    num_envs: eqx.AbstractVar[int]
    buffer_size: eqx.AbstractVar[int]
    grad_updates_per_step: eqx.AbstractVar[float]

    @property
    def same_start(self) -> bool:
        """Whether each training environment restarts every episode from its own first state
        (`training_reset`'s `same_start`, QDax's training environments); `False` here: a
        subclass overrides it with a static field of this name."""
        return False

    @abc.abstractmethod
    def update(self, state: _S, batch: Transition, *, key: PRNGKey) -> tuple[_S, Metrics]:
        """One gradient step of `state` on `batch` (a `Transition` with a leading
        `minibatch_size` axis). **Returns:** the new state and scalar metrics by name."""

    def init_run(self, env: AbstractEnv, state: _S, *, key: PRNGKey) -> OffPolicyRun:
        check.same_sizes(self, env, f"{type(self).__name__}.init_run")
        return init_off_policy(
            self,
            env,
            num_envs=self.num_envs,
            buffer_size=self.buffer_size,
            state=state,
            same_start=self.same_start,
            key=key,
        )

    def warmup(
        self, env: AbstractEnv, run: OffPolicyRun, num_iterations: int, *, key: PRNGKey
    ) -> OffPolicyRun:
        """`run` after `num_iterations` steps of every environment of `env` under
        uniformly random actions, their transitions in the buffer (no learning; only the
        observation statistics follow): the usual start of an off-policy run."""
        return warmup(self, env, run, num_iterations, key=key)

    def train(
        self, env: AbstractEnv, run: OffPolicyRun, num_iterations: int, *, key: PRNGKey
    ) -> tuple[OffPolicyRun, TrainMetrics]:
        return train(
            self,
            env,
            run,
            num_iterations,
            grad_updates_per_step=self.grad_updates_per_step,
            key=key,
        )


def check_batch(agent: AbstractOffPolicyAgent, batch: Transition, where: str) -> None:
    """Refuse a batch whose observations or actions do not have the agent's widths, naming
    `where` and the field (static shapes: free under `jit`)."""
    n = batch.obs.shape[0]
    check.shape(f"{where}: batch.obs", batch.obs, (n, agent.observation_size))
    check.shape(f"{where}: batch.next_obs", batch.next_obs, (n, agent.observation_size))
    check.shape(f"{where}: batch.action", batch.action, (n, agent.action_size))
    for field in ("reward", "terminated"):
        check.shape(f"{where}: batch.{field}", getattr(batch, field), (n,))


def check_off_policy_fields(agent: AbstractOffPolicyAgent) -> None:
    """Refuse non-positive loop settings, naming the agent's field."""
    name = type(agent).__name__
    for field in ("observation_size", "action_size", "minibatch_size", "num_envs", "buffer_size"):
        check.positive_int(f"{name}.{field}", getattr(agent, field))
    check.positive(f"{name}.grad_updates_per_step", agent.grad_updates_per_step)


def init_off_policy(
    agent: AbstractOffPolicyAgent,
    env: AbstractEnv,
    *,
    num_envs: int,
    buffer_size: int,
    hparams=None,
    state=None,
    same_start: bool = False,
    key: PRNGKey,
) -> OffPolicyRun:
    """A fresh training run on `env` of `state` (`None`: `agent.init(hparams)`): an
    empty replay buffer of `buffer_size` transitions and `num_envs` freshly reset
    environments (each keeping its first state to restart from, with `same_start`:
    `training_reset`)."""
    check.positive_int("num_envs", num_envs)
    check.positive_int("buffer_size", buffer_size)
    check.same_sizes(agent, env, "init_off_policy")
    if state is not None and hparams is not None:
        raise ValueError("init_off_policy takes hparams or state, not both")
    agent_key, env_key = jr.split(key)
    example = Transition(
        obs=jnp.zeros(env.observation_size, jnp.float32),
        action=jnp.zeros(env.action_size, jnp.float32),
        reward=jnp.zeros((), jnp.float32),
        next_obs=jnp.zeros(env.observation_size, jnp.float32),
        terminated=jnp.zeros((), jnp.float32),
        truncated=jnp.zeros((), jnp.float32),
    )
    reset = lambda k: training_reset(env, same_start=same_start, key=k)
    env_state = jax.vmap(reset)(jr.split(env_key, num_envs))
    return OffPolicyRun(
        agent.init(hparams, key=agent_key) if state is None else state,
        ReplayBuffer.empty(buffer_size, example),
        env_state,
        jnp.zeros((), jnp.int32),
    )


def _play(agent, env, state: OffPolicyRun, key: PRNGKey, random_actions: bool):
    n = state.env_state.t.shape[0]
    act_key, step_key = jr.split(key)
    obs = state.env_state.env_state.obs
    if random_actions:
        actions = jr.uniform(act_key, (n, env.action_size), minval=-1.0, maxval=1.0)
    else:
        act = lambda o, k: agent.act(state.agent_state, o, key=k)
        actions = jax.vmap(act)(obs, jr.split(act_key, n))
    step = lambda s, a, k: autoreset_step(env, s, a, key=k)
    out = jax.vmap(step)(state.env_state, actions, jr.split(step_key, n))
    transitions = Transition(obs, actions, out.reward, out.next_obs, out.terminated, out.truncated)
    agent_state = agent.observe(state.agent_state, obs)
    new = OffPolicyRun(
        agent_state, state.buffer.insert(transitions), out.state, state.env_steps + n
    )
    mean_return, count = finished_episodes(out.finished_return)
    return new, jnp.mean(out.reward), mean_return, count


def grad_steps_for(num_envs: int, grad_updates_per_step: float) -> int:
    """Gradient steps per iteration: `grad_updates_per_step` per environment step (at least 1)."""
    check.positive("grad_updates_per_step", grad_updates_per_step)
    return max(1, math.floor(grad_updates_per_step * num_envs))


def train_iteration(
    agent: AbstractOffPolicyAgent,
    env: AbstractEnv,
    state: OffPolicyRun,
    *,
    grad_updates_per_step: float = 1.0,
    key: PRNGKey,
) -> tuple[OffPolicyRun, TrainMetrics]:
    """One iteration of `agent` on `env` from the training run `state`: one step of every
    environment (exploration actions), the transitions into the buffer, then
    `floor(grad_updates_per_step * num_envs)` gradient steps (at least one).

    **Returns:** the new state and the iteration's `TrainMetrics`.
    """
    check.same_sizes(agent, env, "train_iteration")
    play_key, grad_key = jr.split(key)
    state, reward, episode_return, count = _play(agent, env, state, play_key, False)
    n = state.env_state.t.shape[0]

    def grad_step(agent_state, k):
        sample_key, update_key = jr.split(k)
        batch = state.buffer.sample(agent.minibatch_size, key=sample_key)
        return agent.update(agent_state, batch, key=update_key)

    num = grad_steps_for(n, grad_updates_per_step)
    agent_state, losses = filter_scan(grad_step, state.agent_state, jr.split(grad_key, num))
    losses = {name: jnp.nanmean(value) for name, value in losses.items()}
    state = eqx.tree_at(lambda s: s.agent_state, state, agent_state)
    return state, TrainMetrics(reward, episode_return, count, losses)


@jit
def train(
    agent: AbstractOffPolicyAgent,
    env: AbstractEnv,
    state: OffPolicyRun,
    num_iterations: int,
    *,
    grad_updates_per_step: float = 1.0,
    key: PRNGKey,
) -> tuple[OffPolicyRun, TrainMetrics]:
    """`num_iterations` calls of `train_iteration` (`agent` on `env` from `state`, with
    `grad_updates_per_step`) in one `lax.scan`; the metrics have a leading iterations
    axis."""
    check.positive_int("train: num_iterations", num_iterations)
    body = lambda s, k: train_iteration(
        agent, env, s, key=k, grad_updates_per_step=grad_updates_per_step
    )
    return filter_scan(body, state, jr.split(key, num_iterations))


@jit
def warmup(
    agent: AbstractOffPolicyAgent,
    env: AbstractEnv,
    state: OffPolicyRun,
    num_iterations: int,
    *,
    key,
) -> OffPolicyRun:
    """Fill the buffer of `state` with `num_iterations` steps of `env` under uniformly
    random actions (no learning; `agent` only updates its observation statistics)."""
    check.same_sizes(agent, env, "warmup")
    check.positive_int("warmup: num_iterations", num_iterations)

    def body(s, k):
        return _play(agent, env, s, k, True)[0], None

    return filter_scan(body, state, jr.split(key, num_iterations))[0]
