"""Independent PPO (IPPO) for `AbstractMultiAgentEnv` environments: the PPO learner of
`_ppo.py` over a team of agents, each trained on its own experience (or one network shared by
all, or one joint network with a head per agent)."""

import typing
from collections.abc import Callable

import equinox as eqx
from jaxtyping import Array, Float

from .. import _validate as check
from .._custom_types import PRNGKey
from ..envs._base import AbstractBaseEnv
from ..envs._multi_agent import AbstractMultiAgentEnv
from ._actors import (
    AbstractActor,
    CategoricalActor,
    GaussianActor,
    JointActor,
    JointValueCritic,
    ValueCritic,
)
from ._ppo import _check_loop, AbstractPPOLearner, PPOState


@typing.final
class IPPO(AbstractPPOLearner):
    """Independent PPO: a team of `num_agents` actors and critics, each trained on its own
    agent's samples (the PPO learner, `PPO`, over a team).

    Discrete environments get `CategoricalActor`, continuous ones `GaussianActor`, unless
    `make_actor` says otherwise. Build one for an environment with `IPPO.for_env`; `init_run`,
    `train` and `evaluate` take that environment (or any with the same sizes) per call.

    **Fields:** `num_agents`, `observation_size` (one agent's), `action_size` (one agent's, or
    the number of discrete actions), `discrete` (the environment's); `rollout_length`,
    `num_envs`, `num_minibatches`, `actor_epochs`, `critic_epochs` (as in `PPO`);
    `actor_hidden`, `critic_hidden` (layer widths); `shared_params` (one actor and one critic
    for all agents, each reading one agent's observation, trained on every agent's samples);
    `joint_network` (one `JointActor` and one `JointValueCritic` reading all agents'
    observations, a head per agent: jaxagents' layout); `normalise_advantages` (per
    minibatch); `normalise_observations` (running statistics per agent in the state);
    `make_actor` (`make_actor(obs_size, action_size, hidden, key=)` -> an `AbstractActor`;
    not with `joint_network`); `convention` and `adam_eps` (as `PPO`'s: `"jaxagents"`
    standardises advantages per time step and agent over each minibatch's environments, cuts
    minibatches of whole environments in one fixed order and stops on jaxagents' KL statistic;
    its `actor_epochs = E` runs `E - 1` epochs, so set ours to `E - 1`).
    """

    num_agents: int = eqx.field(static=True)
    observation_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    discrete: bool = eqx.field(static=True)
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
    convention: str = eqx.field(default="eqx_qd", static=True)
    adam_eps: float = eqx.field(default=1e-5, static=True)

    def __check_init__(self):
        check.positive_int("IPPO.num_agents", self.num_agents)
        _check_loop(self)
        if self.joint_network and (self.shared_params or self.make_actor is not None):
            raise ValueError(
                "IPPO.joint_network builds one JointActor for the team: it excludes "
                "shared_params and make_actor"
            )

    @classmethod
    def for_env(cls, env: AbstractMultiAgentEnv, **options) -> "IPPO":
        """An `IPPO` with the sizes of `env` (`num_agents`, `observation_size`,
        `action_size`, `discrete`) and the other fields from `options`."""
        if not isinstance(env, AbstractMultiAgentEnv):
            raise TypeError(
                "IPPO.for_env: env must be an eqx_qd.envs.AbstractMultiAgentEnv (a single-agent "
                f"environment: PPO, or SingleAgentView), got {type(env).__name__}"
            )
        return cls(
            num_agents=env.num_agents,
            observation_size=env.observation_size,
            action_size=env.action_size,
            discrete=env.discrete,
            **options,
        )

    @property
    def pooling(self) -> str:
        if self.joint_network:
            return "joint"
        return "shared" if self.shared_params else "independent"

    def _team(self, env: AbstractBaseEnv, where: str) -> AbstractMultiAgentEnv:
        if not isinstance(env, AbstractMultiAgentEnv):
            raise TypeError(
                f"IPPO.{where}: IPPO plays an eqx_qd.envs.AbstractMultiAgentEnv, got "
                f"{type(env).__name__} (PPO plays single-agent environments)"
            )
        for name in ("num_agents", "observation_size", "action_size", "discrete"):
            ours, theirs = getattr(self, name), getattr(env, name)
            if ours != theirs:
                raise ValueError(
                    f"IPPO.{where}: the agent's {name} is {ours} but the environment's is {theirs}"
                )
        return env

    def _new_actor(self, key: PRNGKey) -> AbstractActor:
        if self.joint_network:
            return JointActor(
                self.num_agents,
                self.observation_size,
                self.action_size,
                self.actor_hidden,
                discrete=self.discrete,
                key=key,
            )
        make = self.make_actor
        if make is None:
            make = CategoricalActor if self.discrete else GaussianActor
        return make(self.observation_size, self.action_size, self.actor_hidden, key=key)

    def _new_critic(self, key: PRNGKey) -> ValueCritic | JointValueCritic:
        if self.joint_network:
            return JointValueCritic(
                self.num_agents, self.observation_size, self.critic_hidden, key=key
            )
        return ValueCritic(self.observation_size, self.critic_hidden, key=key)

    def _env_actions(self, actions: Array) -> Array:
        return actions  # the team's environments take the sampled actions as they are

    def act(
        self,
        state: PPOState,
        obs: Float[Array, "num_agents obs_dim"],
        *,
        deterministic: bool = False,
        key: PRNGKey,
    ) -> Array:
        """One action per agent for one environment's raw observations `obs` (`(num_agents,
        obs_dim)`) under the policies of `state`: each policy's mode when `deterministic`,
        else a sample."""
        check.shape("IPPO.act: obs", obs, (self.num_agents, self.observation_size))
        return self._team_act(state, obs, deterministic, key)
