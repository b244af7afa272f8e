"""The on-policy networks (PPO, IPPO): stochastic actors (categorical, gaussian, and the joint
team actor with a head per agent) and state-value critics. Each is written for one input; vmap
it over observations."""

import abc
import typing
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int

from .. import _validate as check
from .._custom_types import PRNGKey
from ._layers import _check_obs, _check_sizes, MLP


def _scale_last_layer(net: MLP, scale: float) -> MLP:
    last = net.layers[-1]
    return eqx.tree_at(lambda n: n.layers[-1].weight, net, last.weight * scale)


class AbstractActor(eqx.Module):
    """A stochastic policy for one agent: log-probabilities, entropy, samples and the mode.

    Subclass it for another action distribution: define the six abstract methods. `IPPO`
    calls the two pairs, `log_prob_and_entropy` and `sample_and_log_prob`, which should run the
    network once for both values (written as the two single calls, they are correct, and the
    network runs, and is differentiated, twice).
    """

    @abc.abstractmethod
    def log_prob(self, obs: Float[Array, " obs_dim"], action: Array) -> Float[Array, ""]:
        """Log-probability of `action` in the distribution for observation `obs`."""

    @abc.abstractmethod
    def entropy(self, obs: Float[Array, " obs_dim"]) -> Float[Array, ""]:
        """Entropy of the distribution for `obs`."""

    @abc.abstractmethod
    def sample(self, obs: Float[Array, " obs_dim"], *, key: PRNGKey) -> Array:
        """An action drawn from the distribution for `obs`."""

    @abc.abstractmethod
    def mode(self, obs: Float[Array, " obs_dim"]) -> Array:
        """The most likely action for `obs` (deterministic evaluation)."""

    @abc.abstractmethod
    def log_prob_and_entropy(self, obs: Array, action: Array) -> tuple[Array, Array]:
        """`(log_prob(obs, action), entropy(obs))`, from one pass of the network (PPO's loss
        needs both)."""

    @abc.abstractmethod
    def sample_and_log_prob(self, obs: Array, *, key: PRNGKey) -> tuple[Array, Array]:
        """An action for `obs` drawn with `key` as `sample` draws it, and its `log_prob`, from
        one pass of the network (a rollout needs both)."""


def _entropy_of_log_probs(log_p: Float[Array, "*batch k"]) -> Float[Array, "*batch"]:
    """The entropy of categorical distributions given their log-probabilities (last axis)."""
    return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)


def _gaussian_log_prob(
    mean: Float[Array, "*batch d"], log_std: Float[Array, "*batch d"], x: Float[Array, "*batch d"]
) -> Float[Array, "*batch"]:
    """The log-density of `x` under diagonal gaussians (dimensions on the last axis)."""
    z = (x - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * z**2 - log_std - 0.5 * jnp.log(2.0 * jnp.pi), axis=-1)


def _gaussian_entropy(log_std: Float[Array, "*batch d"]) -> Float[Array, "*batch"]:
    """The entropy of diagonal gaussians (dimensions on the last axis)."""
    return jnp.sum(log_std + 0.5 * jnp.log(2.0 * jnp.pi * jnp.e), axis=-1)


@typing.final
class CategoricalActor(AbstractActor):
    """Discrete actions: an MLP gives the logits of a categorical distribution.

    **Arguments:** `obs_size`, `num_actions`, `hidden` (layer widths, tanh), `key`.
    """

    net: MLP

    def __init__(self, obs_size: int, num_actions: int, hidden: Sequence[int], *, key: PRNGKey):
        _check_sizes("CategoricalActor", hidden, obs_size=obs_size, num_actions=num_actions)
        net = MLP(obs_size, num_actions, hidden, key=key, activation=jnp.tanh)
        self.net = _scale_last_layer(net, 0.01)  # near-uniform initial policy

    def _logits(self, obs):
        _check_obs("CategoricalActor", obs, (self.net.in_size,))
        return self.net(obs)

    def _log_probs(self, obs):
        return jax.nn.log_softmax(self._logits(obs))

    def log_prob(self, obs: Float[Array, " obs_dim"], action: Array) -> Float[Array, ""]:
        return self._log_probs(obs)[action]

    def entropy(self, obs: Float[Array, " obs_dim"]) -> Float[Array, ""]:
        return _entropy_of_log_probs(self._log_probs(obs))

    def sample(self, obs: Float[Array, " obs_dim"], *, key: PRNGKey) -> Int[Array, ""]:
        return jr.categorical(key, self._logits(obs)).astype(jnp.int32)

    def log_prob_and_entropy(
        self, obs: Float[Array, " obs_dim"], action: Array
    ) -> tuple[Float[Array, ""], Float[Array, ""]]:
        log_p = self._log_probs(obs)
        return log_p[action], _entropy_of_log_probs(log_p)

    def sample_and_log_prob(
        self, obs: Float[Array, " obs_dim"], *, key: PRNGKey
    ) -> tuple[Int[Array, ""], Float[Array, ""]]:
        logits = self._logits(obs)
        action = jr.categorical(key, logits).astype(jnp.int32)
        return action, jax.nn.log_softmax(logits)[action]

    def mode(self, obs: Float[Array, " obs_dim"]) -> Int[Array, ""]:
        return jnp.argmax(self._logits(obs)).astype(jnp.int32)


@typing.final
class GaussianActor(AbstractActor):
    """Continuous actions: a diagonal gaussian with an MLP mean and a learned, state-independent
    log standard deviation. Samples are not squashed; environments clip them to [-1, 1].

    **Arguments:** `obs_size`, `action_size`, `hidden` (layer widths, tanh), `key`, and
    `init_log_std` (the initial log standard deviation of every action dimension).
    """

    net: MLP
    log_std: Float[Array, " action_dim"]

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        hidden: Sequence[int],
        *,
        init_log_std: float = -0.5,
        key: PRNGKey,
    ):
        _check_sizes("GaussianActor", hidden, obs_size=obs_size, action_size=action_size)
        check.finite("GaussianActor: init_log_std", init_log_std)
        net = MLP(obs_size, action_size, hidden, key=key, activation=jnp.tanh)
        self.net = _scale_last_layer(net, 0.01)
        self.log_std = jnp.full((action_size,), init_log_std, jnp.float32)

    def _mean(self, obs):
        _check_obs("GaussianActor", obs, (self.net.in_size,))
        return self.net(obs)

    def log_prob(
        self, obs: Float[Array, " obs_dim"], action: Float[Array, " action_dim"]
    ) -> Float[Array, ""]:
        _check_obs("GaussianActor.log_prob", action, self.log_std.shape, name="action")
        return self._log_prob_at(self._mean(obs), action)

    def entropy(self, obs: Float[Array, " obs_dim"]) -> Float[Array, ""]:
        return _gaussian_entropy(self.log_std)

    def log_prob_and_entropy(
        self, obs: Float[Array, " obs_dim"], action: Float[Array, " action_dim"]
    ) -> tuple[Float[Array, ""], Float[Array, ""]]:
        return self.log_prob(obs, action), self.entropy(obs)  # (the entropy reads no network)

    def _log_prob_at(self, mean: Array, action: Array) -> Float[Array, ""]:
        return _gaussian_log_prob(mean, self.log_std, action)

    def sample(self, obs: Float[Array, " obs_dim"], *, key: PRNGKey) -> Float[Array, " action_dim"]:
        noise = jr.normal(key, self.log_std.shape)
        return self._mean(obs) + jnp.exp(self.log_std) * noise

    def sample_and_log_prob(
        self, obs: Float[Array, " obs_dim"], *, key: PRNGKey
    ) -> tuple[Float[Array, " action_dim"], Float[Array, ""]]:
        mean = self._mean(obs)
        action = mean + jnp.exp(self.log_std) * jr.normal(key, self.log_std.shape)
        return action, self._log_prob_at(mean, action)

    def mode(self, obs: Float[Array, " obs_dim"]) -> Float[Array, " action_dim"]:
        return self._mean(obs)


@typing.final
class ValueCritic(eqx.Module):
    """A state-value network `V(obs)` for one agent.

    **Arguments:** `obs_size`, `hidden` (layer widths, tanh), `key`.
    """

    net: MLP

    def __init__(self, obs_size: int, hidden: Sequence[int], *, key: PRNGKey):
        _check_sizes("ValueCritic", hidden, obs_size=obs_size)
        self.net = MLP(obs_size, 1, hidden, key=key, activation=jnp.tanh)

    def __call__(self, obs: Float[Array, " obs_dim"]) -> Float[Array, ""]:
        _check_obs("ValueCritic", obs, (self.net.in_size,))
        return self.net(obs)[0]


# ----------------------------------------------------------------------------- team networks


@typing.final
class JointActor(AbstractActor):
    """One actor for a whole team: an MLP reads every agent's observation (concatenated) and a
    head per agent gives that agent's distribution (categorical logits, or a gaussian mean with
    a learned log standard deviation per agent). jaxagents' IPPO layout.

    Unlike the other actors it acts for all agents at once: `obs` is `(num_agents,
    obs_dim)`; `log_prob` and `entropy` are `(num_agents,)`, one per agent, so PPO's ratio
    and clip stay per agent.

    **Arguments:** `num_agents`, `obs_size` and `action_size` (one agent's; the number of
    actions when `discrete`), `hidden` (layer widths, tanh), `discrete`, `key`, and
    `init_log_std` (continuous actions).
    """

    net: MLP
    log_std: Float[Array, "num_agents action_dim"] | None
    num_agents: int = eqx.field(static=True)
    discrete: bool = eqx.field(static=True)

    def __init__(
        self,
        num_agents: int,
        obs_size: int,
        action_size: int,
        hidden: Sequence[int],
        *,
        discrete: bool,
        init_log_std: float = -0.5,
        key: PRNGKey,
    ):
        _check_sizes(
            "JointActor", hidden, num_agents=num_agents, obs_size=obs_size, action_size=action_size
        )
        check.finite("JointActor: init_log_std", init_log_std)
        net = MLP(
            num_agents * obs_size, num_agents * action_size, hidden, key=key, activation=jnp.tanh
        )
        self.net = _scale_last_layer(net, 0.01)
        self.log_std = (
            None if discrete else jnp.full((num_agents, action_size), init_log_std, jnp.float32)
        )
        self.num_agents = num_agents
        self.discrete = discrete

    def _heads(self, obs: Float[Array, "num_agents obs_dim"]) -> Float[Array, "num_agents k"]:
        _check_obs("JointActor", obs, (self.num_agents, self.net.in_size // self.num_agents))
        return self.net(obs.reshape(-1)).reshape(self.num_agents, -1)

    def _log_prob_at(self, heads: Array, action: Array) -> Float[Array, " num_agents"]:
        if self.discrete:
            log_p = jax.nn.log_softmax(heads)
            return jnp.take_along_axis(log_p, action[:, None], axis=-1)[:, 0]
        return _gaussian_log_prob(heads, self.log_std, action)

    def _entropy_at(self, heads: Array) -> Float[Array, " num_agents"]:
        if self.discrete:
            return _entropy_of_log_probs(jax.nn.log_softmax(heads))
        return _gaussian_entropy(self.log_std)

    def _sample_at(self, heads: Array, key: PRNGKey) -> Array:
        if self.discrete:
            return jr.categorical(key, heads).astype(jnp.int32)
        return heads + jnp.exp(self.log_std) * jr.normal(key, heads.shape)

    def log_prob(
        self, obs: Float[Array, "num_agents obs_dim"], action: Array
    ) -> Float[Array, " num_agents"]:
        return self._log_prob_at(self._heads(obs), action)

    def entropy(self, obs: Float[Array, "num_agents obs_dim"]) -> Float[Array, " num_agents"]:
        if self.discrete:
            return self._entropy_at(self._heads(obs))
        return _gaussian_entropy(self.log_std)  # the network does not enter it

    def sample(self, obs: Float[Array, "num_agents obs_dim"], *, key: PRNGKey) -> Array:
        return self._sample_at(self._heads(obs), key)

    def log_prob_and_entropy(
        self, obs: Float[Array, "num_agents obs_dim"], action: Array
    ) -> tuple[Float[Array, " num_agents"], Float[Array, " num_agents"]]:
        heads = self._heads(obs)
        return self._log_prob_at(heads, action), self._entropy_at(heads)

    def sample_and_log_prob(
        self, obs: Float[Array, "num_agents obs_dim"], *, key: PRNGKey
    ) -> tuple[Array, Float[Array, " num_agents"]]:
        heads = self._heads(obs)
        action = self._sample_at(heads, key)
        return action, self._log_prob_at(heads, action)

    def mode(self, obs: Float[Array, "num_agents obs_dim"]) -> Array:
        heads = self._heads(obs)
        return jnp.argmax(heads, axis=-1).astype(jnp.int32) if self.discrete else heads


@typing.final
class JointValueCritic(eqx.Module):
    """One critic for a whole team: an MLP reads every agent's observation (concatenated) and
    gives every agent's value, `(num_agents,)` (jaxagents' IPPO layout).

    **Arguments:** `num_agents`, `obs_size` (one agent's), `hidden` (layer widths, tanh), `key`.
    """

    net: MLP
    num_agents: int = eqx.field(static=True)

    def __init__(self, num_agents: int, obs_size: int, hidden: Sequence[int], *, key: PRNGKey):
        _check_sizes("JointValueCritic", hidden, num_agents=num_agents, obs_size=obs_size)
        self.net = MLP(num_agents * obs_size, num_agents, hidden, key=key, activation=jnp.tanh)
        self.num_agents = num_agents

    def __call__(self, obs: Float[Array, "num_agents obs_dim"]) -> Float[Array, " num_agents"]:
        _check_obs("JointValueCritic", obs, (self.num_agents, self.net.in_size // self.num_agents))
        return self.net(obs.reshape(-1))
