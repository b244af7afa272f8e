"""The agent contract that the off-policy training loop, the scoring functions and PBT use."""

import abc
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import equinox as eqx
from jaxtyping import Array, Float

from .._custom_types import PRNGKey
from .._envs.rollout import Transition
from .spaces import AbstractSpace, sample_hparams


_S = TypeVar("_S")
Metrics = dict[str, Float[Array, ""]]


class AbstractAgent(eqx.Module, Generic[_S]):
    """An off-policy agent: ``init(hparams, key=) -> state``, ``act``, ``update`` on a batch.

    Subclass it (and a state module) to bring a new agent to the training loop, the scoring
    functions and PBT.

    **Fields** every agent declares: `observation_size`, `action_size` (the environment's),
    `minibatch_size` (transitions per gradient step) and `normalise_observations` (whether the
    state's ``normaliser`` is used).
    """

    observation_size: eqx.AbstractVar[int]
    action_size: eqx.AbstractVar[int]
    minibatch_size: eqx.AbstractVar[int]
    normalise_observations: eqx.AbstractVar[bool]

    @abc.abstractmethod
    def init(self, hparams: Any = None, *, key: PRNGKey) -> _S:
        """A fresh training state: networks, optimiser states, and ``hparams`` (the agent's
        hyperparameters module; ``None``: its defaults)."""

    @abc.abstractmethod
    def act(
        self, state: _S, obs: Float[Array, " obs_dim"], *, deterministic: bool = False, key: PRNGKey
    ) -> Float[Array, " action_dim"]:
        """The action of training state ``state`` for one observation ``obs``
        (``(obs_dim,)``): with exploration noise, unless ``deterministic``."""

    @abc.abstractmethod
    def update(self, state: _S, batch: Transition, *, key: PRNGKey) -> tuple[_S, Metrics]:
        """One gradient step of ``state`` on ``batch`` (a `Transition` with a leading
        ``minibatch_size`` axis). **Returns:** the new state and scalar metrics by name."""

    @abc.abstractmethod
    def empty_optimizer_states(self, state: _S) -> _S:
        """The state without optimiser states (what a repertoire stores)."""

    @abc.abstractmethod
    def init_optimizer_states(self, state: _S) -> _S:
        """The state with fresh optimiser states for its current parameters."""

    @property
    def hparam_spaces(self) -> dict[str, AbstractSpace]:
        """Default PBT ranges of the state's ``hparams`` fields (override in subclasses)."""
        return {}

    def resample_hyperparams(
        self, state: _S, *, spaces: Mapping[str, AbstractSpace] | None = None, key: PRNGKey
    ) -> _S:
        """``state`` with its hyperparameters drawn again from ``spaces`` (default:
        `hparam_spaces`). Pure; the state must have an ``hparams`` module."""
        spaces = self.hparam_spaces if spaces is None else spaces
        hparams = sample_hparams(state.hparams, spaces, key=key)
        return eqx.tree_at(lambda s: s.hparams, state, hparams)

    def observe(self, state: _S, obs: Float[Array, "batch obs_dim"]) -> _S:
        """Fold ``obs`` (``(batch, obs_dim)``) into the normaliser of ``state`` (when
        observations are normalised; otherwise ``state`` unchanged)."""
        if not self.normalise_observations:
            return state
        return eqx.tree_at(lambda s: s.normaliser, state, state.normaliser.update(obs))

    def _norm(self, state, obs):
        return state.normaliser.normalise(obs) if self.normalise_observations else obs
