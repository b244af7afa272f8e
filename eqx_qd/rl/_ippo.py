"""PPO and independent PPO (IPPO) for `AbstractMultiAgentEnv` environments.

`IPPO` is a stateless module holding structure only (environment, sizes, epochs); `PPOState`
holds everything that learns or varies, including `PPOHParams` as float32 array leaves, so a
hyperparameter sweep is ``eqx.filter_vmap`` over states and changing a value never retraces.
PPO on a single agent is the ``num_agents = 1`` case (see `SingleAgentView`).

Each agent has its own actor and critic (or one shared pair with ``shared_params``) and is
trained on its own experience only: the actor and critic updates are vmapped over agents, so
gradient clipping, Adam moments and the KL early stop are per agent. With ``joint_network``, one
actor and one critic read every agent's observation and have a head per agent (jaxagents'
layout): the surrogate's ratios and advantages stay per agent, the optimiser is one.
"""

import typing
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, PyTree

from .. import _validate as check
from .._custom_types import PRNGKey
from .._misc import (
    f32,
    filter_scan,
    filter_while_loop,
    i32,
    is_none,
    random_permutation,
    tree_take,
)
from ..envs._base import autoreset_step, finished_episodes, training_reset, TrainingEnvState
from ..envs._multi_agent import AbstractMultiAgentEnv
from ._actors import (
    AbstractActor,
    CategoricalActor,
    GaussianActor,
    JointActor,
    JointValueCritic,
    ValueCritic,
)
from ._base import (
    AbstractAgent,
    AbstractAgentState,
    AbstractHParams,
    AbstractTrainingRun,
    TrainMetrics,
)
from ._gae import gae
from ._normaliser import RunningNormaliser
from ._optim import apply_clipped_adam, init_clipped_adam
from ._spaces import AbstractSpace, LogUniform, Uniform


Metrics = dict[str, Float[Array, "..."]]


PPO_SPACES: dict[str, AbstractSpace] = {
    "actor_lr": LogUniform(3e-5, 3e-3),
    "critic_lr": LogUniform(3e-5, 3e-3),
    "clip_eps": Uniform(0.1, 0.3),
    "ent_coef": Uniform(0.0, 0.02),
    "gae_lambda": Uniform(0.9, 1.0),
    "gamma": Uniform(0.95, 0.999),
}
"""PBT-PPO's default spaces: learning rates log-uniform over two decades around the defaults,
the surrogate's clip, the entropy bonus, GAE's lambda and the discount (ranges common in PPO
sweeps; QDax has no PBT-PPO to follow)."""


class PPOHParams(AbstractHParams):
    """PPO hyperparameters, float32 scalars (stacked vectors in a sweep).

    **Fields:** `gamma` (discount), `gae_lambda`, `clip_eps` (the surrogate's clip), `ent_coef`
    (entropy bonus), `vf_coef` (critic loss scale), `kl_threshold` (the approximate KL that
    stops the actor epochs), `actor_lr`, `critic_lr`, `max_grad_norm` (clipping by global norm)
    and `reward_scale` (rewards are multiplied by it before GAE, so the critic learns scaled
    returns).
    """

    gamma: Float[Array, ""] = eqx.field(default=0.99, converter=f32)
    gae_lambda: Float[Array, ""] = eqx.field(default=0.95, converter=f32)
    clip_eps: Float[Array, ""] = eqx.field(default=0.2, converter=f32)
    ent_coef: Float[Array, ""] = eqx.field(default=0.01, converter=f32)
    vf_coef: Float[Array, ""] = eqx.field(default=0.5, converter=f32)
    kl_threshold: Float[Array, ""] = eqx.field(default=0.02, converter=f32)
    actor_lr: Float[Array, ""] = eqx.field(default=3e-4, converter=f32)
    critic_lr: Float[Array, ""] = eqx.field(default=1e-3, converter=f32)
    max_grad_norm: Float[Array, ""] = eqx.field(default=0.5, converter=f32)
    reward_scale: Float[Array, ""] = eqx.field(default=1.0, converter=f32)

    def __check_init__(self):
        inf = float("inf")
        check.ranges(
            "PPOHParams",
            self,
            {
                "gamma": (0.0, 1.0),
                "gae_lambda": (0.0, 1.0),
                "clip_eps": (0.0, inf),
                "ent_coef": (0.0, inf),
                "vf_coef": (0.0, inf),
                "kl_threshold": (0.0, inf),
                "actor_lr": (0.0, inf),
                "critic_lr": (0.0, inf),
                "max_grad_norm": (0.0, inf),
                "reward_scale": (0.0, inf),
            },
        )

    def default_spaces(self) -> dict[str, AbstractSpace]:
        """`PPO_SPACES`."""
        return dict(PPO_SPACES)

    @staticmethod
    def stack(hparams: Sequence["PPOHParams"]) -> "PPOHParams":
        """One `PPOHParams` whose leaves are vectors: the batch a sweep vmaps over."""
        if not hparams:
            raise ValueError("PPOHParams.stack needs at least one PPOHParams")
        return jax.tree.map(lambda *xs: jnp.stack(xs), *hparams)


# ----------------------------------------------------------------------------- state


class IPPOAgentState(AbstractAgentState):
    """Everything IPPO's agents learn or vary (`AbstractAgentState`).

    **Fields:**

    - `actors`, `critics`, `actor_opt_state`, `critic_opt_state`: the networks and their
      optimiser states (``None`` in storage), with a leading ``num_agents`` axis unless
      parameters are shared or the network is joint (`JointActor`, `JointValueCritic`).
    - `hparams`: the `PPOHParams`.
    - `normaliser`: observation statistics laid out like the actors, or ``None`` unless
      observations are normalised.
    """

    actors: AbstractActor
    critics: ValueCritic | JointValueCritic
    actor_opt_state: PyTree
    critic_opt_state: PyTree
    hparams: PPOHParams
    normaliser: RunningNormaliser | None = None


@typing.final
class PPOState(AbstractTrainingRun):
    """An IPPO training run (`AbstractTrainingRun`).

    **Fields:**

    - `agent_state`: the `IPPOAgentState`.
    - `env_state`: the ``num_envs`` environments that rollouts continue from (a batched
      `TrainingEnvState`).
    - `key`: the training key, split at every update.
    - `updates`: PPO updates (one rollout each) since the start, across restores.
    - `env_steps`: environment steps taken in training (``rollout_length x num_envs`` per
      update).

    `actors`, `critics`, `actor_opt_state`, `critic_opt_state`, `hparams` and `normaliser`
    read through to `agent_state` (``eqx.tree_at`` follows them too).
    """

    agent_state: IPPOAgentState
    env_state: TrainingEnvState
    key: PRNGKey
    updates: Int[Array, ""]
    env_steps: Int[Array, ""]

    @property
    def actors(self) -> AbstractActor:
        return self.agent_state.actors

    @property
    def critics(self) -> ValueCritic | JointValueCritic:
        return self.agent_state.critics

    @property
    def actor_opt_state(self) -> PyTree:
        return self.agent_state.actor_opt_state

    @property
    def critic_opt_state(self) -> PyTree:
        return self.agent_state.critic_opt_state

    @property
    def hparams(self) -> PPOHParams:
        return self.agent_state.hparams

    @property
    def normaliser(self) -> RunningNormaliser | None:
        return self.agent_state.normaliser


class Trajectory(eqx.Module):
    """A rollout, time-major: every field is ``(rollout_length, num_envs, num_agents, ...)``
    (`terminated` and `truncated` have no agent axis).

    **Fields:** `obs` (what each step started from), `actions`, `log_probs` (under the rollout
    policy), `rewards`, `next_obs` (what each step reached, before any reset), `terminated`,
    `truncated` and `finished_returns` (each agent's return of the episode that ended at the
    step; NaN where none did).
    """

    obs: Float[Array, "time batch num_agents obs_dim"]
    actions: Array
    log_probs: Float[Array, "time batch num_agents"]
    rewards: Float[Array, "time batch num_agents"]
    next_obs: Float[Array, "time batch num_agents obs_dim"]
    terminated: Float[Array, "time batch"]
    truncated: Float[Array, "time batch"]
    finished_returns: Float[Array, "time batch num_agents"]


class PPOSamples(eqx.Module):
    """One agent's samples of a rollout, flattened: ``(num_samples, ...)`` each.

    **Fields:** `obs` (as the actor saw them), `actions`, `log_probs` (under the rollout
    policy), `advantages` and `targets` (GAE's).
    """

    obs: Array
    actions: Array
    log_probs: Array
    advantages: Array
    targets: Array


def _with_update(
    state: PPOState, actors, critics, actor_opt, critic_opt, key, steps: int
) -> PPOState:
    return eqx.tree_at(
        lambda s: (
            s.agent_state.actors, s.agent_state.critics, s.agent_state.actor_opt_state,
            s.agent_state.critic_opt_state, s.key, s.updates, s.env_steps,
        ),
        state,
        (actors, critics, actor_opt, critic_opt, key, state.updates + 1, state.env_steps + steps),
    )  # fmt: skip


def _normalise(normaliser: RunningNormaliser | None, obs: Array) -> Array:
    """``obs (..., [agents,] obs_dim)`` through per-agent (or shared) statistics, if any."""
    return obs if normaliser is None else normaliser.normalise(obs)


def _minibatches(key: PRNGKey, n: int, count: int) -> Int[Array, "count size"]:
    """A fresh shuffle of ``n`` samples cut into ``count`` equal minibatches."""
    return random_permutation(n, key=key).reshape(count, n // count)


# ----------------------------------------------------------------------------- agent


@typing.final
class IPPO(AbstractAgent[IPPOAgentState, PPOState]):
    """Independent PPO: per-agent actors and critics trained apart on each agent's experience.

    Each update collects ``rollout_length`` steps in ``num_envs`` parallel environments
    (auto-reset; the rollout may cut episodes, which then bootstrap), computes GAE, runs up to
    ``actor_epochs`` epochs of the clipped surrogate with an entropy bonus (stopping early when
    the approximate KL to the rollout policy passes ``kl_threshold``), then ``critic_epochs``
    epochs of value regression. Minibatches are reshuffled with a fresh key every epoch.
    Discrete environments get `CategoricalActor`, continuous ones `GaussianActor`, unless
    ``make_actor`` says otherwise.

    **Fields:** `env`; `rollout_length`, `num_envs`, `num_minibatches`, `actor_epochs`,
    `critic_epochs` (as above); `actor_hidden`, `critic_hidden` (layer widths);
    `shared_params` (one actor and one critic for all agents, each reading one agent's
    observation, trained on every agent's samples); `joint_network` (one `JointActor` and one
    `JointValueCritic` reading all agents' observations, a head per agent: jaxagents' layout);
    `normalise_advantages` (per minibatch); `normalise_observations` (running statistics per
    agent in the state); `make_actor` (``make_actor(obs_size, action_size, hidden, key=)`` -> an
    `AbstractActor`; not with `joint_network`).
    """

    env: AbstractMultiAgentEnv
    rollout_length: int = eqx.field(default=128, static=True)
    num_envs: int = eqx.field(default=64, static=True)
    num_minibatches: int = eqx.field(default=16, static=True)
    actor_epochs: int = eqx.field(default=4, static=True)
    critic_epochs: int = eqx.field(default=4, static=True)
    actor_hidden: tuple[int, ...] = eqx.field(default=(64, 64), static=True, converter=tuple)
    critic_hidden: tuple[int, ...] = eqx.field(default=(64, 64), static=True, converter=tuple)
    shared_params: bool = eqx.field(default=False, static=True)
    joint_network: bool = eqx.field(default=False, static=True)
    normalise_advantages: bool = eqx.field(default=True, static=True)
    normalise_observations: bool = eqx.field(default=False, static=True)
    make_actor: Callable[..., AbstractActor] | None = eqx.field(default=None, static=True)

    def __check_init__(self):
        for name in ("rollout_length", "num_envs", "num_minibatches"):
            check.positive_int(f"IPPO.{name}", getattr(self, name))
        for name in ("actor_epochs", "critic_epochs"):
            check.non_negative_int(f"IPPO.{name}", getattr(self, name))
        samples = self.rollout_length * self.num_envs
        if samples % self.num_minibatches:
            raise ValueError(
                f"rollout_length * num_envs = {samples} samples per agent do not split into "
                f"num_minibatches={self.num_minibatches} equal minibatches"
            )
        if self.joint_network and (self.shared_params or self.make_actor is not None):
            raise ValueError(
                "IPPO.joint_network builds one JointActor for the team: it excludes "
                "shared_params and make_actor"
            )

    @property
    def num_agents(self) -> int:
        return self.env.num_agents

    @property
    def observation_size(self) -> int:
        """One agent's observation size (the environment's)."""
        return self.env.observation_size

    @property
    def action_size(self) -> int:
        """One agent's action size, or number of discrete actions (the environment's)."""
        return self.env.action_size

    # -- construction ---------------------------------------------------------------------

    @property
    def _per_agent_networks(self) -> bool:
        """Whether actors and critics carry a leading agent axis (vmapped over agents)."""
        return not (self.shared_params or self.joint_network)

    def _new_actor(self, key: PRNGKey) -> AbstractActor:
        env = self.env
        if self.joint_network:
            return JointActor(
                env.num_agents, env.observation_size, env.action_size, self.actor_hidden,
                discrete=env.discrete, key=key,
            )  # fmt: skip
        make = self.make_actor
        if make is None:
            make = CategoricalActor if env.discrete else GaussianActor
        return make(env.observation_size, env.action_size, self.actor_hidden, key=key)

    def _new_critic(self, key: PRNGKey) -> ValueCritic | JointValueCritic:
        env = self.env
        if self.joint_network:
            return JointValueCritic(
                env.num_agents, env.observation_size, self.critic_hidden, key=key
            )
        return ValueCritic(env.observation_size, self.critic_hidden, key=key)

    def _per_agent_build(self, make, key: PRNGKey):
        if not self._per_agent_networks:
            return make(key)
        return eqx.filter_vmap(make)(jr.split(key, self.num_agents))

    def _build_opt(self, params):
        return (
            eqx.filter_vmap(init_clipped_adam)(params)
            if self._per_agent_networks
            else init_clipped_adam(params)
        )

    def init(self, hparams: PPOHParams | None = None, *, key: PRNGKey) -> IPPOAgentState:
        """Fresh networks and optimiser states, with ``hparams`` (``None``: the defaults)."""
        hparams = PPOHParams() if hparams is None else hparams
        actor_key, critic_key = jr.split(key)
        actors = self._per_agent_build(self._new_actor, actor_key)
        critics = self._per_agent_build(self._new_critic, critic_key)
        normaliser = None
        if self.normalise_observations:  # per agent, unless parameters are shared
            dim = self.env.observation_size
            normaliser = RunningNormaliser.create(dim)
            if not self.shared_params:
                normaliser = eqx.filter_vmap(lambda _: RunningNormaliser.create(dim))(
                    jnp.arange(self.num_agents)
                )
        return IPPOAgentState(
            actors, critics, self._build_opt(actors), self._build_opt(critics), hparams,
            normaliser,
        )  # fmt: skip

    def _check_env(self, env, where: str) -> None:
        if env is not self.env and not (
            type(env) is type(self.env) and bool(eqx.tree_equal(env, self.env))
        ):
            raise ValueError(f"IPPO.{where}: IPPO is built for its own environment (IPPO.env)")

    def init_run(self, env, state: IPPOAgentState, *, key: PRNGKey) -> PPOState:
        """A training run of ``state`` on ``env`` (which must be `env`): ``num_envs`` freshly
        reset environments, the training key, zero updates."""
        self._check_env(env, "init_run")
        env_key, key = jr.split(key)
        env_state = jax.vmap(lambda k: training_reset(self.env, key=k))(
            jr.split(env_key, self.num_envs)
        )
        return PPOState(state, env_state, key, i32(0), i32(0))

    def start(self, hparams: PPOHParams | None = None, *, key: PRNGKey) -> PPOState:
        """`init` then `init_run` on `env`: a fresh training run."""
        init_key, run_key = jr.split(key)
        return self.init_run(self.env, self.init(hparams, key=init_key), key=run_key)

    def empty_optimizer_states(self, state: IPPOAgentState) -> IPPOAgentState:
        """Drop the optimiser states (IPPO has no target networks)."""
        return eqx.tree_at(
            lambda s: (s.actor_opt_state, s.critic_opt_state), state, (None, None),
            is_leaf=is_none,
        )  # fmt: skip

    def init_optimizer_states(self, state: IPPOAgentState) -> IPPOAgentState:
        """Fresh optimiser states for the current networks."""
        return eqx.tree_at(
            lambda s: (s.actor_opt_state, s.critic_opt_state), state,
            (self._build_opt(state.actors), self._build_opt(state.critics)), is_leaf=is_none,
        )  # fmt: skip

    def genome(self, state: IPPOAgentState) -> tuple[AbstractActor, ValueCritic | JointValueCritic]:
        """Every agent's actor and critic."""
        return state.actors, state.critics

    def with_genome(self, state: IPPOAgentState, genome: tuple) -> IPPOAgentState:
        return eqx.tree_at(lambda s: (s.actors, s.critics), state, tuple(genome))

    def train(self, env, run: PPOState, num_iterations: int, *, key: PRNGKey):
        """``num_iterations`` updates (`train_step`) from ``run`` with its key replaced by
        ``key``, as `TrainMetrics`: the mean reward over agents, and the team's return (summed
        over agents) of the episodes that ended, as `evaluate` reports it."""
        from ._on_policy import train_updates

        self._check_env(env, "train")
        run, metrics = train_updates(self, eqx.tree_at(lambda r: r.key, run, key), num_iterations)
        per_agent = ("mean_reward", "episodes_done", "episode_return")
        losses = {k: jnp.mean(v, axis=-1) for k, v in metrics.items() if k not in per_agent}
        return run, TrainMetrics(
            jnp.mean(metrics["mean_reward"], axis=-1),
            jnp.sum(metrics["episode_return"], axis=-1),
            metrics["episodes_done"][:, 0],
            losses,
        )

    def evaluate(self, env, state: IPPOAgentState, num_episodes: int, *, key: PRNGKey):
        """``num_episodes`` full episodes of the deterministic policies (`evaluate`, the
        contract's); returns are the team's (summed over agents)."""
        self._check_env(env, "evaluate")
        return super().evaluate(env, state, num_episodes, key=key)

    # -- acting ---------------------------------------------------------------------------

    def _over_agents(self, fn: Callable, params: PyTree, *args: Array):
        """``fn(params_i, *args_i)`` for every agent ``i``; ``args`` have the agent axis first
        (not for a joint network, which acts for all agents at once)."""
        axis = None if self.shared_params else eqx.if_array(0)
        return eqx.filter_vmap(fn, in_axes=(axis, *([0] * len(args))))(params, *args)

    def act(
        self,
        state: IPPOAgentState | PPOState,
        obs: Float[Array, "num_agents obs_dim"],
        *,
        deterministic: bool = False,
        key: PRNGKey,
    ) -> Array:
        """One action per agent for one environment's raw observations ``obs`` (``(num_agents,
        obs_dim)``) under the policies of ``state``: each policy's mode when ``deterministic``,
        else a sample."""
        check.shape("IPPO.act: obs", obs, (self.num_agents, self.observation_size))
        obs = _normalise(state.normaliser, obs)
        if self.joint_network:
            return state.actors.mode(obs) if deterministic else state.actors.sample(obs, key=key)
        if deterministic:
            return self._over_agents(lambda a, o: a.mode(o), state.actors, obs)
        keys = jr.split(key, self.num_agents)
        return self._over_agents(lambda a, o, k: a.sample(o, key=k), state.actors, obs, keys)

    def _act_batch(self, actors, obs, key):
        # obs: (batch, agents, obs_dim) -> actions and log-probs (batch, agents, ...)
        if self.joint_network:
            keys = jr.split(key, obs.shape[0])
            return jax.vmap(lambda o, k: actors.sample_and_log_prob(o, key=k))(obs, keys)
        obs = jnp.swapaxes(obs, 0, 1)
        keys = jr.split(key, obs.shape[:2])

        def one_agent(actor, o, k):
            return jax.vmap(lambda oi, ki: actor.sample_and_log_prob(oi, key=ki))(o, k)

        actions, log_probs = self._over_agents(one_agent, actors, obs, keys)
        return jnp.swapaxes(actions, 0, 1), jnp.swapaxes(log_probs, 0, 1)

    def _values(self, critics, obs: Float[Array, "... agents obs_dim"]) -> Array:
        lead = obs.shape[:-2]
        if self.joint_network:
            values = jax.vmap(critics)(obs.reshape(-1, *obs.shape[-2:]))
            return values.reshape(*lead, self.num_agents)
        flat = jnp.swapaxes(obs.reshape(-1, *obs.shape[-2:]), 0, 1)  # (agents, samples, obs)
        values = self._over_agents(lambda c, o: jax.vmap(c)(o), critics, flat)
        return jnp.swapaxes(values, 0, 1).reshape(*lead, self.num_agents)

    # -- one update -----------------------------------------------------------------------

    def rollout(self, state: PPOState) -> tuple[PPOState, Trajectory]:
        """``rollout_length`` steps of the current policies in the ``num_envs`` envs."""

        def one_step(carry, _):
            env_state, key = carry
            key, act_key, step_key = jr.split(key, 3)
            raw_obs = env_state.env_state.obs
            actions, log_probs = self._act_batch(
                state.actors, _normalise(state.normaliser, raw_obs), act_key
            )
            step = jax.vmap(lambda s, a, k: autoreset_step(self.env, s, a, key=k))(
                env_state, actions, jr.split(step_key, self.num_envs)
            )
            out = (
                raw_obs, actions, log_probs, step.reward, step.next_obs,
                step.terminated, step.truncated, step.finished_return,
            )  # fmt: skip
            return (step.state, key), out

        (env_state, key), steps = jax.lax.scan(
            one_step, (state.env_state, state.key), length=self.rollout_length
        )
        traj = Trajectory(*steps)
        state = eqx.tree_at(lambda s: (s.env_state, s.key), state, (env_state, key))
        return state, traj

    def _samples(self, state: PPOState, traj: Trajectory) -> PPOSamples:
        """Per-agent samples ``(num_agents, rollout_length * num_envs, ...)`` with GAE."""
        h = state.hparams
        obs = _normalise(state.normaliser, traj.obs)  # as the actors saw them
        values = self._values(state.critics, obs)
        next_values = self._values(state.critics, _normalise(state.normaliser, traj.next_obs))
        # The rollout's last step bootstraps from where it arrived (unless it terminated).
        truncated = traj.truncated.at[-1].set(1.0)
        shape = traj.rewards.shape
        advantages, targets = gae(
            traj.rewards * h.reward_scale, values, next_values,
            jnp.broadcast_to(traj.terminated[..., None], shape),
            jnp.broadcast_to(truncated[..., None], shape),
            h.gamma, h.gae_lambda,
        )  # fmt: skip

        def per_agent(x):  # (time, batch, agents, ...) -> (agents, time * batch, ...)
            x = jnp.moveaxis(x, 2, 0)
            return x.reshape(x.shape[0], -1, *x.shape[3:])

        return PPOSamples(
            per_agent(obs), per_agent(traj.actions), per_agent(traj.log_probs),
            per_agent(advantages), per_agent(targets),
        )  # fmt: skip

    def _actor_update(self, actor, opt_state, data: "PPOSamples", h: PPOHParams, key: PRNGKey):
        return actor_epochs(
            actor, opt_state, data, h, num_minibatches=self.num_minibatches,
            max_epochs=self.actor_epochs, normalise_advantages=self.normalise_advantages, key=key,
        )  # fmt: skip

    def _critic_update(self, critic, opt_state, data: "PPOSamples", h: PPOHParams, key: PRNGKey):
        return critic_epochs(
            critic, opt_state, data, h, num_minibatches=self.num_minibatches,
            epochs=self.critic_epochs, key=key,
        )  # fmt: skip

    def update(self, state: PPOState, traj: Trajectory) -> tuple[PPOState, Metrics]:
        """Actor then critic epochs on the rollout ``traj`` collected from ``state``; metrics are
        per agent ``(num_agents,)``."""
        h = state.hparams
        data = self._samples(state, traj)
        key, actor_key, critic_key = jr.split(state.key, 3)
        if self.joint_network:  # one network for the team: samples keep their agent axis
            team = jax.tree.map(lambda x: jnp.moveaxis(x, 0, 1), data)
            actors, actor_opt, actor_metrics = self._actor_update(
                state.actors, state.actor_opt_state, team, h, actor_key
            )
            critics, critic_opt, critic_metrics = self._critic_update(
                state.critics, state.critic_opt_state, team, h, critic_key
            )
        elif self.shared_params:  # one network: pool every agent's samples
            pooled = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), data)
            actors, actor_opt, actor_metrics = self._actor_update(
                state.actors, state.actor_opt_state, pooled, h, actor_key
            )
            critics, critic_opt, critic_metrics = self._critic_update(
                state.critics, state.critic_opt_state, pooled, h, critic_key
            )
        else:  # vmapped over agents: clipping, Adam and the KL stop are per agent
            actors, actor_opt, actor_metrics = eqx.filter_vmap(
                lambda a, o, d, k: self._actor_update(a, o, d, h, k)
            )(state.actors, state.actor_opt_state, data, jr.split(actor_key, self.num_agents))
            critics, critic_opt, critic_metrics = eqx.filter_vmap(
                lambda c, o, d, k: self._critic_update(c, o, d, h, k)
            )(state.critics, state.critic_opt_state, data, jr.split(critic_key, self.num_agents))
        steps = self.rollout_length * self.num_envs
        state = _with_update(state, actors, critics, actor_opt, critic_opt, key, steps)
        if state.normaliser is not None:  # the next rollout sees this one's statistics too
            state = eqx.tree_at(
                lambda s: s.agent_state.normaliser, state,
                self._updated_normaliser(state.normaliser, traj),
            )  # fmt: skip
        metrics = {**actor_metrics, **critic_metrics}
        metrics = {
            k: jnp.broadcast_to(v, (self.num_agents,)).astype(jnp.float32)
            for k, v in metrics.items()
        }
        metrics["mean_reward"] = jnp.mean(traj.rewards, axis=(0, 1))
        finished = jnp.moveaxis(traj.finished_returns, -1, 0)  # (agents, time, batch)
        episode_return, done = jax.vmap(finished_episodes)(finished)
        metrics["episode_return"] = episode_return
        metrics["episodes_done"] = done
        return state, metrics

    def _updated_normaliser(self, normaliser: RunningNormaliser, traj: Trajectory):
        obs = jnp.moveaxis(traj.obs, 2, 0).reshape(self.num_agents, -1, traj.obs.shape[-1])
        if self.shared_params:
            return normaliser.update(obs.reshape(-1, obs.shape[-1]))
        return eqx.filter_vmap(lambda n, o: n.update(o))(normaliser, obs)

    def train_step(self, state: PPOState) -> tuple[PPOState, Metrics]:
        """One rollout and one update."""
        state, traj = self.rollout(state)
        return self.update(state, traj)


# ----------------------------------------------------------------------------- the PPO maths
# Free functions of one actor or critic and its samples, shared by IPPO and the PPO agent.


def actor_loss(
    actor: AbstractActor, batch: PPOSamples, h: PPOHParams, *, normalise_advantages: bool
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """The clipped surrogate with an entropy bonus (to minimise) of ``actor`` on ``batch``, and
    the mean entropy, with the clip and entropy coefficient of ``h`` (`PPOHParams`).
    Advantages are standardised over the batch when ``normalise_advantages``."""
    log_probs, entropies = jax.vmap(actor.log_prob_and_entropy)(batch.obs, batch.actions)
    ratio = jnp.exp(log_probs - batch.log_probs)
    adv = batch.advantages
    if normalise_advantages:
        adv = (adv - jnp.mean(adv)) / (jnp.std(adv) + 1e-8)
    clipped = jnp.clip(ratio, 1.0 - h.clip_eps, 1.0 + h.clip_eps)
    surrogate = jnp.mean(jnp.minimum(ratio * adv, clipped * adv))
    entropy = jnp.mean(entropies)
    return -surrogate - h.ent_coef * entropy, entropy


def approx_kl(actor: AbstractActor, data: PPOSamples) -> Float[Array, ""]:
    """KL(rollout policy || ``actor``), estimated as mean((r - 1) - log r) over ``data``
    (non-negative, unbiased; Schulman's k3 estimator)."""
    log_ratio = jax.vmap(actor.log_prob)(data.obs, data.actions) - data.log_probs
    return jnp.mean(jnp.expm1(log_ratio) - log_ratio)


def actor_epochs(
    actor: AbstractActor,
    opt_state: PyTree,
    data: PPOSamples,
    h: PPOHParams,
    *,
    num_minibatches: int,
    max_epochs: int,
    normalise_advantages: bool,
    key: PRNGKey,
) -> tuple[AbstractActor, PyTree, Metrics]:
    """Up to ``max_epochs`` epochs of `actor_loss` (with ``normalise_advantages``) of ``actor``
    over ``data`` (``num_minibatches`` minibatches, reshuffled every epoch, clipped Adam from
    ``opt_state``), stopping once the `approx_kl` to the rollout policy passes
    ``h.kl_threshold``. **Returns:** the actor, its optimiser state and the metrics."""
    n = data.obs.shape[0]
    grad_fn = eqx.filter_value_and_grad(
        lambda a, b: actor_loss(a, b, h, normalise_advantages=normalise_advantages), has_aux=True
    )

    def minibatch(carry, idx):
        actor, opt_state = carry
        (loss, entropy), grads = grad_fn(actor, tree_take(data, idx))
        actor, opt_state = apply_clipped_adam(actor, grads, opt_state, h.actor_lr, h.max_grad_norm)
        return (actor, opt_state), (loss, entropy)

    def epoch(carry):
        actor, opt_state, key, count, _, _, _ = carry
        key, perm_key = jr.split(key)
        idx = _minibatches(perm_key, n, num_minibatches)
        carry, (losses, entropies) = filter_scan(minibatch, (actor, opt_state), idx)
        actor, opt_state = carry
        kl = approx_kl(actor, data)
        return actor, opt_state, key, count + 1, kl, jnp.mean(losses), jnp.mean(entropies)

    def keep_going(carry):
        count, kl = carry[3], carry[4]
        return (count < max_epochs) & (kl <= h.kl_threshold)

    zero = jnp.zeros((), jnp.float32)
    carry = filter_while_loop(keep_going, epoch, (actor, opt_state, key, i32(0), zero, zero, zero))
    actor, opt_state, _, count, kl, loss, entropy = carry
    metrics = {"actor_loss": loss, "entropy": entropy, "kl": kl, "actor_epochs": count}
    return actor, opt_state, metrics


def critic_epochs(
    critic: eqx.Module,
    opt_state: PyTree,
    data: PPOSamples,
    h: PPOHParams,
    *,
    num_minibatches: int,
    epochs: int,
    key: PRNGKey,
) -> tuple[eqx.Module, PyTree, Metrics]:
    """``epochs`` epochs of value regression of ``critic`` (any module ``obs -> value``, such
    as `ValueCritic`; ``h.vf_coef`` x squared error to
    the GAE targets) over ``data`` in ``num_minibatches`` minibatches, with clipped Adam from
    ``opt_state``. **Returns:** the critic, its optimiser state and the metrics."""
    n = data.obs.shape[0]

    def loss_fn(critic, batch):
        values = jax.vmap(critic)(batch.obs)
        return h.vf_coef * jnp.mean((values - batch.targets) ** 2)

    def minibatch(carry, idx):
        critic, opt_state = carry
        loss, grads = eqx.filter_value_and_grad(loss_fn)(critic, tree_take(data, idx))
        critic, opt_state = apply_clipped_adam(
            critic, grads, opt_state, h.critic_lr, h.max_grad_norm
        )
        return (critic, opt_state), loss

    def epoch(carry, epoch_key):
        idx = _minibatches(epoch_key, n, num_minibatches)
        carry, losses = filter_scan(minibatch, carry, idx)
        return carry, jnp.mean(losses)

    (critic, opt_state), losses = filter_scan(epoch, (critic, opt_state), jr.split(key, epochs))
    loss = losses[-1] if epochs else jnp.zeros((), jnp.float32)
    return critic, opt_state, {"critic_loss": loss}
