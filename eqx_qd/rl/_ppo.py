"""PPO as an `AbstractAgent` for single-agent (QD) environments: PBT-PPO and ME-PBT with PPO.

A training iteration is one PPO update: ``rollout_length`` steps of ``num_envs`` auto-reset
environments under the sampling policy, GAE, up to ``actor_epochs`` epochs of the clipped
surrogate (stopping early on the KL threshold) and ``critic_epochs`` epochs of value
regression. The maths are IPPO's (`actor_epochs`, `critic_epochs`, `gae`); only the data
layout differs.
"""

import typing
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, PyTree

from .. import _validate as check
from .._compile import jit
from .._custom_types import PRNGKey
from .._misc import filter_scan, is_none
from ..envs._base import (
    AbstractEnv,
    autoreset_step,
    finished_episodes,
    training_reset,
    TrainingEnvState,
)
from ._actors import GaussianActor, ValueCritic
from ._base import AbstractAgent, AbstractAgentState, AbstractTrainingRun, TrainMetrics
from ._gae import gae
from ._ippo import actor_epochs, critic_epochs, PPOHParams, PPOSamples
from ._normaliser import RunningNormaliser
from ._optim import init_clipped_adam


class PPOAgentState(AbstractAgentState):
    """Everything a PPO agent learns or varies.

    **Fields:** `actor` (a `GaussianActor`), `critic` (a `ValueCritic`), `actor_opt_state`,
    `critic_opt_state` (``None`` in storage), `normaliser` (observation statistics, or
    ``None`` unless the agent normalises observations) and `hparams` (the `PPOHParams`).
    """

    actor: GaussianActor
    critic: ValueCritic
    actor_opt_state: PyTree
    critic_opt_state: PyTree
    normaliser: RunningNormaliser | None
    hparams: PPOHParams


@typing.final
class OnPolicyRun(AbstractTrainingRun):
    """One PPO agent's training run.

    **Fields:** `agent_state`, `env_state` (the ``num_envs`` environments rollouts continue
    from) and `env_steps` (environment steps so far).
    """

    agent_state: PPOAgentState
    env_state: TrainingEnvState
    env_steps: Int[Array, ""]


@typing.final
class PPO(AbstractAgent[PPOAgentState, OnPolicyRun]):
    """Proximal Policy Optimisation (Schulman et al., 2017) on an `AbstractEnv`, with a
    gaussian actor (actions clipped to [-1, 1] when played) and a state-value critic.

    **Fields:** `observation_size`, `action_size`; `rollout_length`, `num_envs` (steps and
    environments per update), `num_minibatches`, `actor_epochs`, `critic_epochs`;
    `actor_hidden`, `critic_hidden` (layer widths, tanh); `normalise_advantages` (per
    minibatch); `normalise_observations` (running statistics in the state).
    """

    package_compiler_options: ClassVar[bool] = False  # see `AbstractAgent`

    observation_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    rollout_length: int = eqx.field(default=64, static=True)
    num_envs: int = eqx.field(default=16, static=True)
    num_minibatches: int = eqx.field(default=8, static=True)
    actor_epochs: int = eqx.field(default=4, static=True)
    critic_epochs: int = eqx.field(default=4, static=True)
    actor_hidden: tuple[int, ...] = eqx.field(default=(64, 64), static=True, converter=tuple)
    critic_hidden: tuple[int, ...] = eqx.field(default=(64, 64), static=True, converter=tuple)
    normalise_advantages: bool = eqx.field(default=True, static=True)
    normalise_observations: bool = eqx.field(default=False, static=True)

    def __check_init__(self):
        for name in ("observation_size", "action_size", "rollout_length", "num_envs",
                     "num_minibatches"):  # fmt: skip
            check.positive_int(f"PPO.{name}", getattr(self, name))
        for name in ("actor_epochs", "critic_epochs"):
            check.non_negative_int(f"PPO.{name}", getattr(self, name))
        samples = self.rollout_length * self.num_envs
        if samples % self.num_minibatches:
            raise ValueError(
                f"PPO: rollout_length * num_envs = {samples} samples do not split into "
                f"num_minibatches={self.num_minibatches} equal minibatches"
            )

    def init(self, hparams: PPOHParams | None = None, *, key: PRNGKey) -> PPOAgentState:
        actor_key, critic_key = jr.split(key)
        actor = GaussianActor(
            self.observation_size, self.action_size, self.actor_hidden, key=actor_key
        )
        critic = ValueCritic(self.observation_size, self.critic_hidden, key=critic_key)
        normaliser = None
        if self.normalise_observations:
            normaliser = RunningNormaliser.create(self.observation_size)
        return PPOAgentState(
            actor, critic, init_clipped_adam(actor), init_clipped_adam(critic), normaliser,
            PPOHParams() if hparams is None else hparams,
        )  # fmt: skip

    def act(
        self,
        state: PPOAgentState,
        obs: Float[Array, " obs_dim"],
        *,
        deterministic: bool = False,
        key: PRNGKey,
    ) -> Float[Array, " action_dim"]:
        check.shape("PPO.act: obs", obs, (self.observation_size,))
        obs = self.normalise(state, obs)
        action = state.actor.mode(obs) if deterministic else state.actor.sample(obs, key=key)
        return jnp.clip(action, -1.0, 1.0)

    def empty_optimizer_states(self, state: PPOAgentState) -> PPOAgentState:
        """Drop the optimiser states (PPO has no target networks)."""
        return eqx.tree_at(
            lambda s: (s.actor_opt_state, s.critic_opt_state), state, (None, None),
            is_leaf=is_none,
        )  # fmt: skip

    def init_optimizer_states(self, state: PPOAgentState) -> PPOAgentState:
        """Fresh (clipped Adam) optimiser states for the current networks."""
        return eqx.tree_at(
            lambda s: (s.actor_opt_state, s.critic_opt_state),
            state,
            (init_clipped_adam(state.actor), init_clipped_adam(state.critic)),
            is_leaf=is_none,
        )

    def genome(self, state: PPOAgentState) -> tuple[GaussianActor, ValueCritic]:
        """The actor and the critic."""
        return state.actor, state.critic

    def with_genome(self, state: PPOAgentState, genome: tuple) -> PPOAgentState:
        return eqx.tree_at(lambda s: (s.actor, s.critic), state, tuple(genome))

    # -- training ------------------------------------------------------------------------

    def init_run(self, env: AbstractEnv, state: PPOAgentState, *, key: PRNGKey) -> OnPolicyRun:
        check.same_sizes(self, env, "PPO.init_run")
        env_state = jax.vmap(lambda k: training_reset(env, key=k))(jr.split(key, self.num_envs))
        return OnPolicyRun(state, env_state, jnp.zeros((), jnp.int32))

    def _rollout(self, env: AbstractEnv, run: OnPolicyRun, key: PRNGKey):
        state = run.agent_state

        def one_step(env_state, k):
            act_key, step_key = jr.split(k)
            raw_obs = env_state.env_state.obs
            obs = self.normalise(state, raw_obs)
            keys = jr.split(act_key, self.num_envs)
            actions, log_probs = jax.vmap(lambda o, ak: state.actor.sample_and_log_prob(o, key=ak))(
                obs, keys
            )
            clipped = jnp.clip(actions, -1.0, 1.0)
            out = jax.vmap(lambda s, a, sk: autoreset_step(env, s, a, key=sk))(
                env_state, clipped, jr.split(step_key, self.num_envs)
            )
            step = (
                raw_obs, actions, log_probs, out.reward, out.next_obs, out.terminated,
                out.truncated, out.finished_return,
            )  # fmt: skip
            return out.state, step

        env_state, steps = filter_scan(one_step, run.env_state, jr.split(key, self.rollout_length))
        return env_state, steps

    def _iteration(self, env: AbstractEnv, run: OnPolicyRun, key: PRNGKey):
        rollout_key, actor_key, critic_key = jr.split(key, 3)
        env_state, steps = self._rollout(env, run, rollout_key)
        raw_obs, actions, log_probs, rewards, next_obs, terminated, truncated, finished = steps
        state = run.agent_state
        h = state.hparams
        obs = self.normalise(state, raw_obs)
        values = jax.vmap(jax.vmap(state.critic))(obs)
        next_values = jax.vmap(jax.vmap(state.critic))(self.normalise(state, next_obs))
        truncated_last = truncated.at[-1].set(1.0)  # the rollout's end bootstraps
        advantages, targets = gae(
            rewards * h.reward_scale, values, next_values, terminated, truncated_last,
            h.gamma, h.gae_lambda,
        )  # fmt: skip
        flat = lambda x: x.reshape(-1, *x.shape[2:])
        data = PPOSamples(
            flat(obs), flat(actions), flat(log_probs), flat(advantages), flat(targets)
        )
        actor, actor_opt, actor_metrics = actor_epochs(
            state.actor, state.actor_opt_state, data, h, num_minibatches=self.num_minibatches,
            max_epochs=self.actor_epochs, normalise_advantages=self.normalise_advantages,
            key=actor_key,
        )  # fmt: skip
        critic, critic_opt, critic_metrics = critic_epochs(
            state.critic, state.critic_opt_state, data, h, num_minibatches=self.num_minibatches,
            epochs=self.critic_epochs, key=critic_key,
        )  # fmt: skip
        state = eqx.tree_at(
            lambda s: (s.actor, s.critic, s.actor_opt_state, s.critic_opt_state),
            state, (actor, critic, actor_opt, critic_opt),
        )  # fmt: skip
        state = self.observe(state, flat(raw_obs))  # the next rollout sees these statistics
        n = self.rollout_length * self.num_envs
        run = OnPolicyRun(state, env_state, run.env_steps + n)
        episode_return, count = finished_episodes(finished)
        losses = {k: jnp.asarray(v, jnp.float32) for k, v in
                  {**actor_metrics, **critic_metrics}.items()}  # fmt: skip
        return run, TrainMetrics(jnp.mean(rewards), episode_return, count, losses)

    def train(
        self, env: AbstractEnv, run: OnPolicyRun, num_iterations: int, *, key: PRNGKey
    ) -> tuple[OnPolicyRun, TrainMetrics]:
        """``num_iterations`` PPO updates (a rollout of ``rollout_length`` steps in
        ``num_envs`` environments each) in one ``lax.scan``."""
        return _train(self, env, run, num_iterations, key=key)


@jit(package_options=PPO.package_compiler_options)  # one choice for PPO's programs
def _train(agent: PPO, env: AbstractEnv, run: OnPolicyRun, num_iterations: int, *, key):
    body = lambda r, k: agent._iteration(env, r, k)
    return filter_scan(body, run, jr.split(key, num_iterations))
