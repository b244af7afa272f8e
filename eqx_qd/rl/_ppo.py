"""PPO, written once for a team of agents: `PPO` on a single-agent environment is the team of
one, `IPPO` (`_ippo.py`) the team of several.

One learner (`AbstractPPOLearner`) holds the algorithm: a rollout of `rollout_length` steps in
`num_envs` auto-reset environments, GAE, up to `actor_epochs` epochs of the clipped
surrogate with an entropy bonus (stopping early once the approximate KL to the rollout policy
passes `kl_threshold`), then `critic_epochs` epochs of value regression, with minibatches
reshuffled every epoch. Arrays carry an agent axis throughout; how the agents' samples meet the
networks is the pooling: `"independent"` (one network per agent, updates vmapped over agents,
so clipping, Adam moments and the KL stop are per agent), `"shared"` (one network trained on
every agent's samples) or `"joint"` (one network reading the whole team's observation, a head
per agent). A single agent is the shared pooling of a team of one.

Everything that learns or varies is in `PPOState`, with `PPOHParams` as float32 array leaves,
so a hyperparameter sweep is `eqx.filter_vmap` over states and a new value never retraces.
"""

import abc
import dataclasses
import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jaxtyping import Array, Float, Int, Key, PyTree

from .. import _validate as check
from .._compile import jit
from .._custom_types import PRNGKey
from .._misc import (
    filter_scan,
    i32,
    is_none,
    place_on,
)
from ..envs._base import (
    AbstractBaseEnv,
    AbstractEnv,
    autoreset_step,
    finished_episodes,
    training_reset,
    TrainingEnvState,
)
from ..envs._multi_agent import AbstractMultiAgentEnv, SingleAgentView
from ._actors import AbstractActor, GaussianActor, JointValueCritic, ValueCritic
from ._base import (
    AbstractAgent,
    AbstractAgentState,
    AbstractTrainingRun,
    TrainMetrics,
)
from ._gae import gae
from ._normaliser import RunningNormaliser
from ._optim import init_clipped_adam
from ._ppo_losses import (
    _actor_epochs,
    _critic_epochs,
    _over,
    _Samples,
    _trajectory_minibatches,
    PPOHParams,
)


Metrics = dict[str, Float[Array, "..."]]


class PPOState(AbstractAgentState):
    """Everything a PPO or IPPO agent learns or varies (`AbstractAgentState`).

    **Fields:**

    - `actor`, `critic`: the networks. With independent IPPO each has a leading `num_agents`
      axis (one network per agent); shared IPPO and PPO have one actor and one critic; joint
      IPPO one `JointActor` and one `JointValueCritic`.
    - `actor_opt_state`, `critic_opt_state`: their optimiser states (`None` in storage).
    - `hparams`: the `PPOHParams`.
    - `normaliser`: observation statistics (per agent, like the networks, unless they are
      shared), or `None` unless observations are normalised.
    """

    actor: AbstractActor
    critic: ValueCritic | JointValueCritic
    actor_opt_state: PyTree
    critic_opt_state: PyTree
    hparams: PPOHParams
    normaliser: RunningNormaliser | None = None


@typing.final
class PPORun(AbstractTrainingRun):
    """A PPO or IPPO training run (`AbstractTrainingRun`).

    **Fields:** `agent_state` (the `PPOState`), `env_state` (the `num_envs` environments
    rollouts continue from, a batched `TrainingEnvState`), `env_steps` (environment steps
    taken in training: `rollout_length x num_envs` per iteration) and `iterations` (PPO
    iterations, one rollout and its epochs each, since the start).
    """

    agent_state: PPOState
    env_state: TrainingEnvState
    env_steps: Int[Array, ""]
    iterations: Int[Array, ""]


class _Trajectory(eqx.Module):
    """A rollout, time-major, every field `(rollout_length, num_envs, num_agents, ...)`
    (`terminated` and `truncated` have no agent axis): `obs` (what each step started from, raw),
    `actions`, `log_probs` (under the rollout policy), `rewards`, `next_obs` (what each step
    reached, before any reset), `terminated`, `truncated` and `finished_returns` (each agent's
    return of the episode that ended at the step; NaN where none did)."""

    obs: Float[Array, "time batch num_agents obs_dim"]
    actions: Array
    log_probs: Float[Array, "time batch num_agents"]
    rewards: Float[Array, "time batch num_agents"]
    next_obs: Float[Array, "time batch num_agents obs_dim"]
    terminated: Float[Array, "time batch"]
    truncated: Float[Array, "time batch"]
    finished_returns: Float[Array, "time batch num_agents"]


def _normalise(normaliser: RunningNormaliser | None, obs: Array) -> Array:
    """`obs (..., [agents,] obs_dim)` through per-agent (or shared) statistics, if any."""
    return obs if normaliser is None else normaliser.normalise(obs)


PPO_CONVENTIONS = ("eqx_qd", "jaxagents")
"""How `PPO` and `IPPO` cut minibatches, standardise advantages and read the KL: `"eqx_qd"`
(a fresh shuffle of every sample each epoch, advantages standardised over the minibatch,
`_approx_kl` over the rollout after each epoch) or `"jaxagents"` (jaxagents 0.2.5's: minibatches
of whole environments' trajectories in one fixed order, the same every epoch and iteration;
advantages standardised per time step and agent over the minibatch's environments; the early
stop reads the sum of `-log ratio` over the epoch's last minibatch, before its step)."""


# ----------------------------------------------------------------------------- the learner


def _check_loop(agent: "AbstractPPOLearner") -> None:
    """Refuse non-positive loop settings and a rollout that does not split into equal
    minibatches, naming the agent's field."""
    name = type(agent).__name__
    for field in (
        "observation_size",
        "action_size",
        "rollout_length",
        "num_envs",
        "num_minibatches",
    ):
        check.positive_int(f"{name}.{field}", getattr(agent, field))
    for field in ("actor_epochs", "critic_epochs"):
        check.non_negative_int(f"{name}.{field}", getattr(agent, field))
    for field in ("actor_hidden", "critic_hidden"):
        for i, width in enumerate(getattr(agent, field)):
            check.positive_int(f"{name}.{field}[{i}]", width)
    check.one_of(f"{name}.convention", agent.convention, PPO_CONVENTIONS)
    check.positive(f"{name}.adam_eps", agent.adam_eps)
    samples = agent.rollout_length * agent.num_envs
    if samples % agent.num_minibatches:
        raise ValueError(
            f"{name}: rollout_length * num_envs = {samples} samples per agent do not split "
            f"into num_minibatches={agent.num_minibatches} equal minibatches"
        )
    if agent.convention == "jaxagents" and agent.num_envs % agent.num_minibatches:
        raise ValueError(
            f"{name}: convention='jaxagents' cuts minibatches of whole environments: "
            f"num_envs={agent.num_envs} do not split into num_minibatches="
            f"{agent.num_minibatches} equal groups"
        )


class AbstractPPOLearner(AbstractAgent[PPOState, PPORun]):
    """The PPO learner over a team of `num_agents` agents (module docstring); `PPO` and
    `IPPO` say how the team meets its environment and its networks."""

    rollout_length: eqx.AbstractVar[int]
    num_envs: eqx.AbstractVar[int]
    num_minibatches: eqx.AbstractVar[int]
    actor_epochs: eqx.AbstractVar[int]
    critic_epochs: eqx.AbstractVar[int]
    actor_hidden: eqx.AbstractVar[tuple[int, ...]]
    critic_hidden: eqx.AbstractVar[tuple[int, ...]]
    normalise_advantages: eqx.AbstractVar[bool]
    convention: eqx.AbstractVar[str]  # one of PPO_CONVENTIONS
    adam_eps: eqx.AbstractVar[float]
    num_agents: eqx.AbstractVar[int]  # how many agents act together

    @property
    @abc.abstractmethod
    def pooling(self) -> str:
        """How the agents' samples meet the networks: `"independent"`, `"shared"` or
        `"joint"` (module docstring)."""

    @abc.abstractmethod
    def _team(self, env: AbstractBaseEnv, where: str) -> AbstractMultiAgentEnv:
        """`env` as the team's environment (checked against the agent, naming `where`)."""

    @abc.abstractmethod
    def _new_actor(self, key: PRNGKey) -> AbstractActor:
        """One actor (one agent's, the shared one or the joint one)."""

    @abc.abstractmethod
    def _new_critic(self, key: PRNGKey) -> ValueCritic | JointValueCritic:
        """One critic (as `_new_actor`)."""

    @abc.abstractmethod
    def _env_actions(self, actions: Array) -> Array:
        """The team's actions as the environment receives them (sampled ones are kept for the
        log-probabilities)."""

    # -- construction ---------------------------------------------------------------------

    def _per_agent(self, make, key: PRNGKey):
        if self.pooling != "independent":
            return make(key)
        return eqx.filter_vmap(make)(jr.split(key, self.num_agents))

    def _optimiser_state(self, params):
        if self.pooling != "independent":
            return init_clipped_adam(params)
        return eqx.filter_vmap(init_clipped_adam)(params)

    def init(self, hparams: PPOHParams | None = None, *, key: PRNGKey) -> PPOState:
        """Fresh networks and optimiser states, with `hparams` (`None`: the defaults)."""
        hparams = PPOHParams() if hparams is None else hparams
        actor_key, critic_key = jr.split(key)
        actor = self._per_agent(self._new_actor, actor_key)
        critic = self._per_agent(self._new_critic, critic_key)
        normaliser = None
        if self.normalise_observations:  # per agent, unless the networks are shared
            normaliser = RunningNormaliser.create(self.observation_size)
            if self.pooling != "shared":
                normaliser = eqx.filter_vmap(
                    lambda _: RunningNormaliser.create(self.observation_size)
                )(jnp.arange(self.num_agents))
        return PPOState(
            actor,
            critic,
            self._optimiser_state(actor),
            self._optimiser_state(critic),
            hparams,
            normaliser,
        )

    def init_run(self, env: AbstractBaseEnv, state: PPOState, *, key: PRNGKey) -> PPORun:
        """A training run of `state` on `env`: `num_envs` freshly reset environments,
        zero steps and iterations."""
        team = self._team(env, "init_run")
        env_state = jax.vmap(lambda k: training_reset(team, key=k))(jr.split(key, self.num_envs))
        return PPORun(state, env_state, i32(0), i32(0))

    def empty_optimiser_states(self, state: PPOState) -> PPOState:
        """Drop the optimiser states (PPO has no target networks)."""
        return eqx.tree_at(
            lambda s: (s.actor_opt_state, s.critic_opt_state),
            state,
            (None, None),
            is_leaf=is_none,
        )

    def init_optimiser_states(self, state: PPOState) -> PPOState:
        """Fresh optimiser states for the current networks."""
        return eqx.tree_at(
            lambda s: (s.actor_opt_state, s.critic_opt_state),
            state,
            (self._optimiser_state(state.actor), self._optimiser_state(state.critic)),
            is_leaf=is_none,
        )

    def reset_targets(self, state: PPOState) -> PPOState:
        """`state` unchanged: PPO has no target networks."""
        return state

    def genome(self, state: PPOState) -> tuple[AbstractActor, ValueCritic | JointValueCritic]:
        """The actor and the critic."""
        return state.actor, state.critic

    def with_genome(self, state: PPOState, genome: tuple) -> PPOState:
        return eqx.tree_at(lambda s: (s.actor, s.critic), state, tuple(genome))

    # -- acting ---------------------------------------------------------------------------

    def _over_agents(self, fn, params: PyTree, *args: Array):
        """`fn(params_i, *args_i)` for every agent `i`; `args` have the agent axis first
        (the shared network is every agent's)."""
        axis = None if self.pooling == "shared" else eqx.if_array(0)
        return eqx.filter_vmap(fn, in_axes=(axis, *([0] * len(args))))(params, *args)

    def _team_act(
        self, state: PPOState, obs: Float[Array, "num_agents obs_dim"], deterministic: bool, key
    ) -> Array:
        """One action per agent for one environment's raw observations."""
        obs = _normalise(state.normaliser, obs)
        if self.pooling == "joint":
            return state.actor.mode(obs) if deterministic else state.actor.sample(obs, key=key)
        if deterministic:
            return self._over_agents(lambda a, o: a.mode(o), state.actor, obs)
        keys = jr.split(key, self.num_agents)
        return self._over_agents(lambda a, o, k: a.sample(o, key=k), state.actor, obs, keys)

    def _act_batch(self, actor, obs: Float[Array, "batch agents obs_dim"], key):
        """Sampled actions and their log-probabilities `(batch, agents, ...)`."""
        if self.pooling == "joint":
            keys = jr.split(key, obs.shape[0])
            return jax.vmap(lambda o, k: actor.sample_and_log_prob(o, key=k))(obs, keys)
        obs = jnp.swapaxes(obs, 0, 1)
        keys = jr.split(key, obs.shape[:2])

        def one_agent(actor, o, k):
            return jax.vmap(lambda oi, ki: actor.sample_and_log_prob(oi, key=ki))(o, k)

        actions, log_probs = self._over_agents(one_agent, actor, obs, keys)
        return jnp.swapaxes(actions, 0, 1), jnp.swapaxes(log_probs, 0, 1)

    def _values(self, critic, obs: Float[Array, "... agents obs_dim"]) -> Array:
        lead = obs.shape[:-2]
        if self.pooling == "joint":
            values = jax.vmap(critic)(obs.reshape(-1, *obs.shape[-2:]))
            return values.reshape(*lead, self.num_agents)
        flat = jnp.swapaxes(obs.reshape(-1, *obs.shape[-2:]), 0, 1)  # (agents, samples, obs)
        values = self._over_agents(lambda c, o: jax.vmap(c)(o), critic, flat)
        return jnp.swapaxes(values, 0, 1).reshape(*lead, self.num_agents)

    # -- one iteration --------------------------------------------------------------------

    def _rollout(
        self, team: AbstractMultiAgentEnv, run: PPORun, key: PRNGKey
    ) -> tuple[TrainingEnvState, _Trajectory]:
        """`rollout_length` steps of the sampling policies in the `num_envs` environments."""
        state = run.agent_state

        def one_step(env_state, k):
            act_key, step_key = jr.split(k)
            raw_obs = env_state.env_state.obs
            actions, log_probs = self._act_batch(
                state.actor, _normalise(state.normaliser, raw_obs), act_key
            )
            step = jax.vmap(lambda s, a, sk: autoreset_step(team, s, a, key=sk))(
                env_state, self._env_actions(actions), jr.split(step_key, self.num_envs)
            )
            out = (
                raw_obs,
                actions,
                log_probs,
                step.reward,
                step.next_obs,
                step.terminated,
                step.truncated,
                step.finished_return,
            )
            return step.state, out

        env_state, steps = filter_scan(one_step, run.env_state, jr.split(key, self.rollout_length))
        return env_state, _Trajectory(*steps)

    def _samples(self, state: PPOState, traj: _Trajectory) -> _Samples:
        """Per-agent samples `(num_agents, rollout_length * num_envs, ...)` with GAE."""
        h = state.hparams
        obs = _normalise(state.normaliser, traj.obs)  # as the actors saw them
        values = self._values(state.critic, obs)
        next_values = self._values(state.critic, _normalise(state.normaliser, traj.next_obs))
        # The rollout's last step bootstraps from where it arrived (unless it terminated).
        truncated = traj.truncated.at[-1].set(1.0)
        shape = traj.rewards.shape
        advantages, targets = gae(
            traj.rewards * h.reward_scale,
            values,
            next_values,
            jnp.broadcast_to(traj.terminated[..., None], shape),
            jnp.broadcast_to(truncated[..., None], shape),
            h.gamma,
            h.gae_lambda,
        )

        def per_agent(x):  # (time, batch, agents, ...) -> (agents, time * batch, ...)
            x = jnp.moveaxis(x, 2, 0)
            return x.reshape(x.shape[0], -1, *x.shape[3:])

        return _Samples(
            per_agent(obs),
            per_agent(traj.actions),
            per_agent(traj.log_probs),
            per_agent(advantages),
            per_agent(targets),
        )

    def _fixed_minibatches(self) -> tuple[Int[Array, "count size"] | None, int | None]:
        """The jaxagents convention's minibatch indices (into the samples as `_epochs` hands
        them to the updates) and its standardisation group; `(None, None)` otherwise."""
        if self.convention != "jaxagents":
            return None, None
        blocks = self.num_agents if self.pooling == "shared" else 1
        idx = _trajectory_minibatches(
            self.rollout_length, self.num_envs, self.num_minibatches, blocks
        )
        return idx, self.num_envs // self.num_minibatches

    def _epochs(
        self,
        state: PPOState,
        data: _Samples,
        actor_key: PRNGKey,
        critic_key: PRNGKey,
        axis_name: str | None = None,
    ):
        """The actor's and the critic's epochs on `data`, pooled as `pooling` says (data
        parallel over `axis_name` if given)."""
        h = state.hparams
        fixed, group = self._fixed_minibatches()
        actor_update = lambda a, o, d, k: _actor_epochs(
            a,
            o,
            d,
            h,
            num_minibatches=self.num_minibatches,
            max_epochs=self.actor_epochs,
            normalise_advantages=self.normalise_advantages,
            fixed=fixed,
            group=group,
            adam_eps=self.adam_eps,
            axis_name=axis_name,
            key=k,
        )
        critic_update = lambda c, o, d, k: _critic_epochs(
            c,
            o,
            d,
            h,
            num_minibatches=self.num_minibatches,
            epochs=self.critic_epochs,
            fixed=fixed,
            adam_eps=self.adam_eps,
            axis_name=axis_name,
            key=k,
        )
        if self.pooling == "independent":  # vmapped over agents
            actor_keys = jr.split(actor_key, self.num_agents)
            critic_keys = jr.split(critic_key, self.num_agents)
            actor = eqx.filter_vmap(actor_update)(
                state.actor, state.actor_opt_state, data, actor_keys
            )
            critic = eqx.filter_vmap(critic_update)(
                state.critic, state.critic_opt_state, data, critic_keys
            )
            return actor, critic
        if self.pooling == "joint":  # one network for the team: samples keep their agent axis
            data = jax.tree.map(lambda x: jnp.moveaxis(x, 0, 1), data)
        else:  # one network: every agent's samples pooled
            data = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), data)
        actor = actor_update(state.actor, state.actor_opt_state, data, actor_key)
        critic = critic_update(state.critic, state.critic_opt_state, data, critic_key)
        return actor, critic

    def _iteration(
        self,
        team: AbstractMultiAgentEnv,
        run: PPORun,
        key: PRNGKey,
        axis_name: str | None = None,
    ) -> tuple[PPORun, Metrics]:
        """One rollout and the epochs on it. **Returns:** the run and metrics per agent
        `(num_agents,)`.

        With `axis_name` (inside `shard_map`; `train_data_parallel`), this agent's
        `num_envs` are one device's environments: each device rolls out its own, the
        epochs average every device's gradients, the normaliser sees every device's
        observations, and the step count and metrics are the whole mesh's."""
        if axis_name is not None:  # each device's environments, shuffles and actions its own
            key = jr.fold_in(key, jax.lax.axis_index(axis_name))
        rollout_key, actor_key, critic_key = jr.split(key, 3)
        env_state, traj = self._rollout(team, run, rollout_key)
        state = run.agent_state
        data = self._samples(state, traj)
        (actor, actor_opt, actor_metrics), (critic, critic_opt, critic_metrics) = self._epochs(
            state, data, actor_key, critic_key, axis_name
        )
        state = eqx.tree_at(
            lambda s: (s.actor, s.critic, s.actor_opt_state, s.critic_opt_state),
            state,
            (actor, critic, actor_opt, critic_opt),
        )
        if state.normaliser is not None:  # the next rollout sees this one's statistics too
            obs = jnp.moveaxis(traj.obs, 2, 0).reshape(self.num_agents, -1, traj.obs.shape[-1])
            fold = lambda n, o: n.update(o, axis_name=axis_name)
            if self.pooling == "shared":
                normaliser = fold(state.normaliser, obs.reshape(-1, obs.shape[-1]))
            else:
                normaliser = eqx.filter_vmap(fold)(state.normaliser, obs)
            state = eqx.tree_at(lambda s: s.normaliser, state, normaliser)
        devices = 1 if axis_name is None else jax.lax.axis_size(axis_name)
        steps = self.rollout_length * self.num_envs * devices
        run = PPORun(state, env_state, run.env_steps + steps, run.iterations + 1)
        metrics = {
            k: jnp.broadcast_to(v, (self.num_agents,)).astype(jnp.float32)
            for k, v in {**actor_metrics, **critic_metrics}.items()
        }
        metrics["mean_reward"] = _over(axis_name)(jnp.mean(traj.rewards, axis=(0, 1)))
        finished = jnp.moveaxis(traj.finished_returns, -1, 0)  # (agents, time, batch)
        returns, done = jax.vmap(finished_episodes)(finished)
        if axis_name is not None:  # the mean over every device's finished episodes
            total = _over(axis_name, jax.lax.psum)
            summed, done = total(jnp.where(done > 0, returns * done, 0.0)), total(done)
            returns = jnp.where(done > 0, summed / jnp.maximum(done, 1.0), jnp.nan)
        metrics["episode_return"], metrics["episodes_done"] = returns, done
        return run, metrics

    def train(
        self, env: AbstractBaseEnv, run: PPORun, num_iterations: int, *, key: PRNGKey
    ) -> tuple[PPORun, TrainMetrics]:
        """`num_iterations` PPO iterations (a rollout of `rollout_length` steps in
        `num_envs` environments and its epochs each) in one `lax.scan`. The metrics are the
        team's: the mean reward over agents, and the return of the episodes that ended summed
        over agents (as `evaluate` reports it); losses are averaged over agents.

        Iteration `i`'s key is `key` folded with `i` (the run's count), so a run trained in
        calls of `n` and `m` iterations with one `key` equals one call of `n + m`."""
        team = self._team(env, "train")
        check.non_negative_int(f"{type(self).__name__}.train: num_iterations", num_iterations)
        run, metrics = _train(self, team, run, num_iterations, key=key)
        return run, _team_metrics(metrics)


def _team_metrics(metrics: Metrics) -> TrainMetrics:
    """The team's `TrainMetrics` from per-agent iteration metrics (`AbstractPPOLearner.train`)."""
    per_agent = ("mean_reward", "episodes_done", "episode_return")
    losses = {k: jnp.mean(v, axis=-1) for k, v in metrics.items() if k not in per_agent}
    return TrainMetrics(
        jnp.mean(metrics["mean_reward"], axis=-1),
        jnp.sum(metrics["episode_return"], axis=-1),
        metrics["episodes_done"][:, 0],
        losses,
    )


def train_data_parallel(
    agent: AbstractPPOLearner,
    env: AbstractBaseEnv,
    run: PPORun,
    num_iterations: int,
    *,
    mesh: Mesh,
    key: PRNGKey,
) -> tuple[PPORun, TrainMetrics]:
    """`agent.train(env, run, num_iterations, key=key)` (`PPO` or `IPPO`) with its
    `num_envs` environments split over the devices of `mesh` (`num_envs / devices` each; each
    device's rollout must split into the minibatches too):
    each device steps its environments, and every minibatch's gradients, losses, KL and
    advantage statistics are averaged over the devices, so one set of parameters stays equal on
    all of them (data parallel, as brax's PPO trainer over devices). The result depends on the
    device count (each device shuffles and samples its own share), not on how the devices are
    spread over processes, up to float rounding. `run` (from `agent.init_run`, or this
    function) comes back with its environments split over the mesh."""
    n = mesh.devices.size
    name = f"train_data_parallel ({type(agent).__name__})"
    if agent.num_envs % n:
        raise ValueError(
            f"{name}: num_envs ({agent.num_envs}) must split over the mesh's {n} devices"
        )
    try:  # each device's agent: its share of the environments
        local = dataclasses.replace(agent, num_envs=agent.num_envs // n)
    except ValueError as e:
        raise ValueError(f"{name}: each of the {n} devices runs num_envs / {n}: {e}") from None
    team = agent._team(env, "train_data_parallel")
    check.non_negative_int(f"{name}: num_iterations", num_iterations)
    (axis,) = mesh.axis_names
    state_dyn, state_static = eqx.partition(run.agent_state, eqx.is_array)
    env_dyn, env_static = eqx.partition(run.env_state, eqx.is_array)
    state_dyn = place_on(state_dyn, NamedSharding(mesh, P()))
    env_dyn = place_on(env_dyn, NamedSharding(mesh, P(axis)))
    statics = (state_static, env_static)
    out = _train_mapped(
        local,
        team,
        state_dyn,
        env_dyn,
        (run.env_steps, run.iterations),
        statics,
        num_iterations,
        mesh,
        key,
    )
    state_dyn, env_dyn, (steps, iterations), metrics = out
    run = PPORun(
        eqx.combine(state_dyn, state_static), eqx.combine(env_dyn, env_static), steps, iterations
    )
    return run, _team_metrics(metrics)


@jit(package_options=False)
def _train_mapped(agent, team, state_dyn, env_dyn, counters, statics, num_iterations, mesh, key):
    (axis,) = mesh.axis_names
    state_static, env_static = statics

    def body(s_dyn, e_dyn, counts, k):
        run = PPORun(eqx.combine(s_dyn, state_static), eqx.combine(e_dyn, env_static), *counts)
        step = lambda r, kk: agent._iteration(team, r, kk, axis)
        run, metrics = filter_scan(step, run, _iteration_keys(k, run.iterations, num_iterations))
        new = (eqx.filter(run.agent_state, eqx.is_array), eqx.filter(run.env_state, eqx.is_array))
        return *new, (run.env_steps, run.iterations), metrics

    mapped = jax.shard_map(
        body,
        mesh=mesh,
        in_specs=(P(), P(axis), P(), P()),
        out_specs=(P(), P(axis), P(), P()),
        check_vma=False,
    )
    return mapped(state_dyn, env_dyn, counters, key)


@jit(package_options=False)  # XLA's fusion emitters: see `eqx_qd._compile`
def _train(
    agent: AbstractPPOLearner, team: AbstractMultiAgentEnv, run: PPORun, num_iterations: int, *, key
):
    """`num_iterations` of `AbstractPPOLearner._iteration` in one scan; metrics per agent."""
    body = lambda r, k: agent._iteration(team, r, k)
    return filter_scan(body, run, _iteration_keys(key, run.iterations, num_iterations))


def _iteration_keys(
    key: PRNGKey, first: Int[Array, ""], num_iterations: int
) -> Key[Array, " {num_iterations}"]:
    """The keys of iterations `first .. first + num_iterations - 1`: `key` folded with each
    iteration's count, so a run trained in two calls with one key equals one call's run."""
    counts = first + jnp.arange(num_iterations, dtype=first.dtype)
    return jax.vmap(lambda i: jr.fold_in(key, i))(counts)


@typing.final
class PPO(AbstractPPOLearner):
    """Proximal Policy Optimisation (Schulman et al., 2017) on a single-agent `AbstractEnv`,
    with a gaussian actor (actions clipped to [-1, 1] when played) and a state-value critic:
    the learner of `IPPO` with a team of one.

    **Fields:** `observation_size`, `action_size` (the environment's); `rollout_length`,
    `num_envs` (steps and environments per iteration), `num_minibatches`, `actor_epochs`,
    `critic_epochs`; `actor_hidden`, `critic_hidden` (layer widths, tanh);
    `normalise_advantages` (per minibatch); `normalise_observations` (running statistics in
    the state); `convention` (`"eqx_qd"`, or `"jaxagents"` for jaxagents' minibatches,
    standardisation and KL statistic: `PPO_CONVENTIONS`); `adam_eps` (Adam's epsilon, both
    networks).
    """

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
    convention: str = eqx.field(default="eqx_qd", static=True)
    adam_eps: float = eqx.field(default=1e-5, static=True)

    def __check_init__(self):
        _check_loop(self)

    @property
    def num_agents(self) -> int:
        return 1

    @property
    def pooling(self) -> str:
        return "shared"

    def _team(self, env: AbstractBaseEnv, where: str) -> AbstractMultiAgentEnv:
        if not isinstance(env, AbstractEnv):
            raise TypeError(
                f"PPO.{where}: PPO plays a single-agent eqx_qd.envs.AbstractEnv, got "
                f"{type(env).__name__} (IPPO plays multi-agent environments)"
            )
        check.same_sizes(self, env, f"PPO.{where}")
        return SingleAgentView(env)

    def _new_actor(self, key: PRNGKey) -> GaussianActor:
        return GaussianActor(self.observation_size, self.action_size, self.actor_hidden, key=key)

    def _new_critic(self, key: PRNGKey) -> ValueCritic:
        return ValueCritic(self.observation_size, self.critic_hidden, key=key)

    def _env_actions(self, actions: Array) -> Array:
        return jnp.clip(actions, -1.0, 1.0)

    def act(
        self,
        state: PPOState,
        obs: Float[Array, " obs_dim"],
        *,
        deterministic: bool = False,
        key: PRNGKey,
    ) -> Float[Array, " action_dim"]:
        check.shape("PPO.act: obs", obs, (self.observation_size,))
        obs = self.normalise(state, obs)
        action = state.actor.mode(obs) if deterministic else state.actor.sample(obs, key=key)
        return jnp.clip(action, -1.0, 1.0)
