"""The agent contract: what PBT, the ME-PBT emitter, the scorers and the jobs rely on.

Four abstract modules, each with the fields others read declared as `eqx.AbstractVar`:

- `AbstractHParams`: hyperparameters as float32 array leaves, with their default search spaces.
- `AbstractAgentState`: what an agent learns or varies (networks, optimiser states, observation
  statistics, its `AbstractHParams`).
- `AbstractTrainingRun`: an agent state plus what it learns from (a replay buffer,
  environments mid-episode) and an environment-step counter.
- `AbstractAgent`: stateless structure (sizes, widths, loop settings) and the methods that act,
  train, evaluate, and move a state between its training form (optimiser states, target
  networks) and its storage form (neither).

`PBT`, the population functions and `PBTEmitter` are written against these only, so any
subclass (TD3, SAC, PPO or a user's agent) goes everywhere an agent can go.
"""

import abc
import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int, PyTree

from .. import _validate as check
from .._compile import jit
from .._custom_types import PRNGKey
from .._misc import f32
from ..envs._base import AbstractBaseEnv, AbstractQDEnv
from ..envs._rollout import Episode, evaluate_episodes, rollout
from ._normaliser import RunningNormaliser
from ._spaces import AbstractSpace, sample_hparams


Metrics = dict[str, Float[Array, ""]]


_RANGE = "eqx_qd.hparam_range"  # the field metadata `hparam` writes


def _naming(converter: Callable, owner: str, name: str) -> Callable:
    """``converter``, whose failure on a value that is not a number names ``owner.name``."""

    @functools.wraps(converter)
    def convert(value: Any) -> Any:
        try:
            return converter(value)
        except (TypeError, ValueError) as e:
            raise TypeError(
                f"{owner}.{name} must be a float32 array (a number), got {value!r}"
            ) from e

    return convert


def hparam(default: float, *, low: float = -math.inf, high: float = math.inf) -> Any:
    """A hyperparameter field of an `AbstractHParams`: a float32 array (a scalar, or a vector in
    a stacked population) with `default`, which `AbstractHParams` checks finite and in the
    closed interval `[low, high]`, naming the field. Declare `discount: Float[Array, ""] =
    hparam(0.99, low=0.0, high=1.0)`."""
    check.ordered("hparam: low", low, "high", high, strict=False)
    return eqx.field(default=default, converter=f32, metadata={_RANGE: (low, high)})


class AbstractHParams(eqx.Module):
    """Hyperparameters: every field a float32 array (a scalar for one agent, a vector in a
    stacked population), so changing a value never retraces and a population varies them with
    `filter_vmap`.

    Subclasses declare their fields with `hparam` (a default and the range it must lie in) and
    implement `default_spaces`. Every field, of the library's classes and of yours, is checked
    at construction: a float32 array, finite, and in the range its `hparam` declares (a field
    declared otherwise, say with `converter=f32`, is checked finite); the error names the
    class and the field.
    """

    def __init_subclass__(cls, **kwargs):
        # Every field's converter names the field when the value is not a number (NumPy's own
        # "could not convert string to float" names nothing), for `hparam` fields and a
        # user's `converter=f32` alike.
        super().__init_subclass__(**kwargs)
        for name, field in list(vars(cls).items()):
            if not (isinstance(field, dataclasses.Field) and "converter" in field.metadata):
                continue
            metadata = dict(field.metadata)
            converter = _naming(metadata.pop("converter"), cls.__name__, name)
            defaults = {
                k: getattr(field, k)
                for k in ("default", "default_factory")
                if getattr(field, k) is not dataclasses.MISSING
            }
            setattr(cls, name, eqx.field(converter=converter, metadata=metadata, **defaults))

    def __check_init__(self):
        owner = type(self).__name__
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not (eqx.is_array(value) and value.dtype == jnp.float32):
                if isinstance(value, (int, float)) or hasattr(value, "dtype"):
                    why = "declare the field with eqx_qd.rl.hparam, which converts it"
                else:
                    why = "a number"
                got = f"{value.dtype} array" if hasattr(value, "dtype") else repr(value)
                raise TypeError(f"{owner}.{f.name} must be a float32 array ({why}), got {got}")
            low, high = f.metadata.get(_RANGE, (-math.inf, math.inf))
            check.in_range(f"{owner}.{f.name}", value, low, high)

    @abc.abstractmethod
    def default_spaces(self) -> dict[str, AbstractSpace]:
        """The search spaces PBT explores by default, by field name (fields left out stay
        fixed)."""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The field names, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    def as_dict(self) -> dict[str, Float[Array, "*population"]]:
        """The fields by name (arrays; leading population axes kept)."""
        return {name: getattr(self, name) for name in self.names()}

    def to_dict(self) -> dict[str, float | list]:
        """Plain Python values (lists in a population), e.g. to write as JSON."""
        return {k: np.asarray(v).tolist() for k, v in self.as_dict().items()}


class AbstractAgentState(eqx.Module):
    """What one agent learns or varies.

    **Fields** others read: `hparams` (its `AbstractHParams`) and `normaliser` (running
    observation statistics, or `None` when the agent does not normalise observations).
    Networks and optimiser states are the subclass's own; callers reach them through the
    agent's methods (`AbstractAgent.genome`, `AbstractAgent.init_optimiser_states`, ...).
    """

    hparams: eqx.AbstractVar[AbstractHParams]
    normaliser: eqx.AbstractVar[RunningNormaliser | None]


_S = TypeVar("_S", bound=AbstractAgentState)
_R = TypeVar("_R", bound="AbstractTrainingRun")


class AbstractTrainingRun(eqx.Module, Generic[_S]):
    """One agent's training run: its state plus what it learns from.

    **Fields** others read: `agent_state` and `env_steps` (environment steps taken in training
    so far, an int32 scalar). PBT copies whole runs (a copy keeps its source's buffer).
    """

    agent_state: eqx.AbstractVar[_S]
    env_steps: eqx.AbstractVar[Int[Array, ""]]


class TrainMetrics(eqx.Module):
    """Per-iteration training metrics (leading axis: iterations, after a training chunk).

    **Fields:** `reward` (the mean reward of the iteration's environment steps),
    `episode_return` (the mean return of the episodes that ended in the iteration; NaN when
    none did), `episodes_done` (how many ended) and `losses` (the agent's scalar metrics by
    name, averaged over the iteration's gradient steps).
    """

    reward: Float[Array, "*iterations"]
    episode_return: Float[Array, "*iterations"]
    episodes_done: Float[Array, "*iterations"]
    losses: dict[str, Float[Array, "*iterations"]]


class EvalMetrics(eqx.Module):
    """Deterministic-policy evaluation over full episodes.

    **Fields:** `returns` (the team's, summed over agents, in a multi-agent environment) and
    `lengths` `(num_episodes,)`, and with a QD environment the episodes' `descriptors`
    `(num_episodes, num_descriptors)` (else `None`).
    """

    returns: Float[Array, " num_episodes"]
    lengths: Float[Array, " num_episodes"]
    descriptors: Float[Array, "num_episodes num_descriptors"] | None


class AbstractAgent(eqx.Module, Generic[_S, _R]):
    """An agent: stateless structure and the methods that act and learn, on a single-agent
    `AbstractEnv` (TD3, SAC, PPO) or a multi-agent one (IPPO; then `act` takes and returns one
    row per agent). Subclass it (or `AbstractOffPolicyAgent`, which supplies the training loop
    around a gradient step) with a state module, a hyperparameters module and a training-run
    module to bring a new agent to PBT, ME-PBT, the scorers and the jobs.

    **Fields** every agent declares: `observation_size`, `action_size` (the environment's) and
    `normalise_observations` (whether the state's `normaliser` is used).

    **Methods** every agent implements (a class that leaves one out fails at construction,
    naming it): `init`, `act`, `init_run`, `train`, `empty_optimiser_states`,
    `init_optimiser_states`, `reset_targets` (an agent without target networks returns the
    state unchanged), `genome` and `with_genome`. **Provided**, to override only if the agent
    needs to: `evaluate`, `hparam_spaces`, `resample_hparams`, `normalise` and `observe`.

    **Storage and training forms.** A state in a repertoire or a saved population holds no
    optimiser states and no target networks (`empty_optimiser_states`);
    `init_optimiser_states` brings it back to its training form (fresh optimiser states,
    targets reset to the online networks), as QDax's `init_optimizers_states` does.
    """

    observation_size: eqx.AbstractVar[int]
    action_size: eqx.AbstractVar[int]
    normalise_observations: eqx.AbstractVar[bool]

    # -- what every agent implements ------------------------------------------------------

    @abc.abstractmethod
    def init(self, hparams: AbstractHParams | None = None, *, key: PRNGKey) -> _S:
        """A fresh state in its training form, with `hparams` (`None`: the defaults)."""

    @abc.abstractmethod
    def act(
        self, state: _S, obs: Float[Array, " obs_dim"], *, deterministic: bool = False, key: PRNGKey
    ) -> Float[Array, " action_dim"]:
        """The action of `state` for one raw observation `obs` (`(obs_dim,)`): with
        exploration, unless `deterministic` (the policy that plays a stored genotype)."""

    @abc.abstractmethod
    def init_run(self, env: AbstractBaseEnv, state: _S, *, key: PRNGKey) -> _R:
        """A training run of `state` on `env`: what it learns from, freshly built
        (environments reset, an empty buffer), and zero environment steps."""

    @abc.abstractmethod
    def train(
        self, env: AbstractBaseEnv, run: _R, num_iterations: int, *, key: PRNGKey
    ) -> tuple[_R, TrainMetrics]:
        """`num_iterations` training iterations of `run` on `env` (what an iteration is
        is the agent's: a step of every environment and some gradient steps for off-policy
        agents, a rollout and its epochs for PPO). **Returns:** the run and `TrainMetrics`
        with a leading iterations axis."""

    @abc.abstractmethod
    def empty_optimiser_states(self, state: _S) -> _S:
        """`state` in storage form: no optimiser states and no target networks (`None`)."""

    @abc.abstractmethod
    def init_optimiser_states(self, state: _S) -> _S:
        """`state` in training form: fresh optimiser states for its current parameters and
        target networks reset to the online ones (`reset_targets`)."""

    @abc.abstractmethod
    def reset_targets(self, state: _S) -> _S:
        """`state` with its target networks set to copies of the online networks (an agent
        without target networks returns `state` unchanged)."""

    @abc.abstractmethod
    def genome(self, state: _S) -> PyTree:
        """The part of `state` a GA varies (QDax's ME-PBT varies the policy and the critic
        jointly, and SAC's temperature)."""

    @abc.abstractmethod
    def with_genome(self, state: _S, genome: PyTree) -> _S:
        """`state` with its `genome` replaced by `genome`."""

    # -- provided ------------------------------------------------------------------------

    @property
    def hparam_spaces(self) -> dict[str, AbstractSpace]:
        """The default PBT spaces: those of the state's hyperparameters module."""
        hparams = eqx.filter_eval_shape(lambda: self.init(key=jr.key(0))).hparams
        return dict(hparams.default_spaces())

    def resample_hparams(
        self, state: _S, *, spaces: Mapping[str, AbstractSpace] | None = None, key: PRNGKey
    ) -> _S:
        """`state` with its hyperparameters drawn again from `spaces` (default:
        `hparam_spaces`)."""
        spaces = self.hparam_spaces if spaces is None else spaces
        hparams = sample_hparams(state.hparams, spaces, key=key)
        return eqx.tree_at(lambda s: s.hparams, state, hparams)

    def normalise(self, state: _S, obs: Float[Array, "*batch obs_dim"]) -> Array:
        """`obs` through the state's observation statistics when the agent normalises
        observations; otherwise unchanged."""
        if not self.normalise_observations:
            return obs
        return state.normaliser.normalise(obs)

    def observe(self, state: _S, obs: Float[Array, "batch obs_dim"]) -> _S:
        """Fold `obs` (`(batch, obs_dim)`) into the state's observation statistics (when
        observations are normalised; otherwise `state` unchanged)."""
        if not self.normalise_observations:
            return state
        return eqx.tree_at(lambda s: s.normaliser, state, state.normaliser.update(obs))

    def evaluate(
        self, env: AbstractBaseEnv, state: _S, num_episodes: int, *, key: PRNGKey
    ) -> EvalMetrics:
        """`num_episodes` full episodes of `env` played by the deterministic policy of
        `state` (with a QD environment, each episode's descriptor too): `evaluate`."""
        return evaluate(self, env, state, num_episodes, key=key)


@jit
def evaluate(
    agent: AbstractAgent, env: AbstractBaseEnv, agent_state, num_episodes: int, *, key: PRNGKey
) -> EvalMetrics:
    """Play `num_episodes` full episodes of `env` with the deterministic policy of
    `agent` in training state `agent_state`.

    A QD environment is played by `rollout` (`env.episode_length` steps, so that every
    episode's descriptor is computed); any other, single- or multi-agent, by
    `evaluate_episodes` (each episode to its end).
    """
    check.same_sizes(agent, env, "evaluate")
    check.positive_int("evaluate: num_episodes", num_episodes)
    if isinstance(env, AbstractQDEnv):
        policy = lambda o: agent.act(agent_state, o, key=jr.key(0), deterministic=True)
        keys = jr.split(key, num_episodes)
        episodes: Episode = jax.vmap(lambda k: rollout(env, policy, key=k))(keys)
        descriptors = jax.vmap(env.descriptor)(episodes.transitions.next_state_desc, episodes.valid)
        return EvalMetrics(episodes.returns, episodes.lengths, descriptors)
    policy = lambda o, k: agent.act(agent_state, o, key=k, deterministic=True)
    stats = evaluate_episodes(env, policy, num_episodes, key=key)
    team = stats.returns.reshape(num_episodes, -1).sum(axis=-1)
    return EvalMetrics(team, stats.lengths.astype(jnp.float32), None)


def check_agent_shapes(
    agent: AbstractAgent, env: AbstractBaseEnv | None = None, *, where: str
) -> AbstractAgentState:
    """Refuse, naming `where` and what to add, an `agent` whose state does not follow the
    contract (checked by shape only: nothing is computed), or whose sizes disagree with
    `env`'s. **Returns:** that state, shapes only (for `check_spaces`)."""
    if not isinstance(agent, AbstractAgent):
        raise TypeError(f"{where}: the agent must subclass eqx_qd.rl.AbstractAgent, got {agent!r}")
    if env is not None:
        check.same_sizes(agent, env, where)
    state = eqx.filter_eval_shape(lambda: agent.init(key=jr.key(0)))
    name = type(agent).__name__
    if not isinstance(state, AbstractAgentState):
        raise TypeError(
            f"{where}: {name}.init returned a {type(state).__name__}, which does not subclass "
            "eqx_qd.rl.AbstractAgentState (declare hparams and normaliser on it)"
        )
    if not isinstance(state.hparams, AbstractHParams):
        raise TypeError(
            f"{where}: {name}'s state holds hparams of type {type(state.hparams).__name__}, "
            "which does not subclass eqx_qd.rl.AbstractHParams"
        )
    return state


def check_spaces(
    agent: AbstractAgent,
    spaces: Mapping[str, AbstractSpace],
    *,
    where: str,
    state: AbstractAgentState | None = None,
) -> None:
    """Refuse empty `spaces` (PBT would only copy) and names that are not fields of the
    agent's hyperparameters, naming `where`. `state`: the agent's state as `check_agent_shapes`
    returns it (`None`: traced again, shapes only)."""
    if not spaces:
        raise ValueError(
            f"{where}: the hyperparameter spaces are empty, so PBT would only copy agents; give "
            "the spaces to explore (agent.hparam_spaces, or a subset of them)"
        )
    if state is None:
        state = eqx.filter_eval_shape(lambda: agent.init(key=jr.key(0)))
    hparams = state.hparams
    unknown = sorted(set(spaces) - set(hparams.names()))
    if unknown:
        raise ValueError(
            f"{where}: the spaces name {unknown}, which {type(hparams).__name__} does not have; "
            f"its fields are {sorted(hparams.names())}"
        )
