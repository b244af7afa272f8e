"""TD3 and SAC: stateless agent modules, training-state modules and array hyperparameters.

An agent module holds only structure (sizes, batch size, delays); everything that changes or that
a population varies lives in its training state, including the hyperparameters as float32 array
leaves (`TD3HParams`, `SACHParams`), so ``eqx.filter_vmap`` over states trains agents with
different learning rates in one program, and changing a value never retraces. Optimisers are
built inside `update` from those arrays: no optax object is ever a field.
"""

import abc
import typing
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Float, Int, PyTree

from ._buffers import Transition
from ._custom_types import PRNGKey
from ._hparam_spaces import AbstractSpace, SAC_SPACES, sample_hparams, TD3_SPACES
from ._misc import f32, i32, is_concrete
from ._networks import DeterministicPolicy, QCritics, TanhGaussianPolicy
from ._normaliser import RunningNormaliser


_S = TypeVar("_S")
Metrics = dict[str, Float[Array, ""]]


def _check_ranges(module: eqx.Module, ranges: dict[str, tuple[float, float]]) -> None:
    """Raise a ValueError naming the first concrete hyperparameter outside its range."""
    for name, (low, high) in ranges.items():
        value = getattr(module, name)
        if is_concrete(value) and not bool(jnp.all((value >= low) & (value <= high))):
            raise ValueError(
                f"{type(module).__name__}.{name} must lie in [{low}, {high}], got {value}"
            )


def _adam(learning_rate: Float[Array, ""]) -> optax.GradientTransformation:
    # Rebuilt from the (traced) learning rate at every step; Adam's state does not depend on it.
    return optax.adam(learning_rate)


def _params(module: PyTree) -> PyTree:
    return eqx.filter(module, eqx.is_inexact_array)


def _init_opt(module: PyTree) -> PyTree:
    return _adam(jnp.zeros((), jnp.float32)).init(_params(module))


def _apply_adam(module, grads, opt_state, learning_rate):
    with jax.numpy_dtype_promotion("standard"):
        updates, opt_state = _adam(learning_rate).update(grads, opt_state, _params(module))
        return eqx.apply_updates(module, updates), opt_state


def soft_update(target: PyTree, online: PyTree, tau: Float[Array, ""]) -> PyTree:
    """``target <- (1 - tau) * target + tau * online`` on the inexact array leaves."""
    return jax.tree.map(
        lambda t, o: (1.0 - tau) * t + tau * o if eqx.is_inexact_array(t) else t, target, online
    )


class AbstractAgent(eqx.Module, Generic[_S]):
    """An off-policy agent: ``init(hparams, key=) -> state``, ``act``, ``update`` on a batch.

    Subclass it (and a state module) to bring a new agent to the training loop, the scoring
    functions and PBT.
    """

    observation_size: eqx.AbstractVar[int]
    action_size: eqx.AbstractVar[int]
    batch_size: eqx.AbstractVar[int]
    normalise_observations: eqx.AbstractVar[bool]

    @abc.abstractmethod
    def init(self, hparams: Any = None, *, key: PRNGKey) -> _S: ...

    @abc.abstractmethod
    def act(
        self, state: _S, obs: Float[Array, " obs_dim"], *, key: PRNGKey, deterministic: bool = False
    ) -> Float[Array, " action_dim"]:
        """An action for one observation (exploration noise unless ``deterministic``)."""

    @abc.abstractmethod
    def update(self, state: _S, batch: Transition, *, key: PRNGKey) -> tuple[_S, Metrics]:
        """One gradient step on a batch of transitions."""

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
        self, state: _S, *, key: PRNGKey, spaces: Mapping[str, AbstractSpace] | None = None
    ) -> _S:
        """``state`` with its hyperparameters drawn again from ``spaces`` (default:
        `hparam_spaces`). Pure; the state must have an ``hparams`` module."""
        spaces = self.hparam_spaces if spaces is None else spaces
        hparams = sample_hparams(state.hparams, spaces, key=key)
        return eqx.tree_at(lambda s: s.hparams, state, hparams)

    def observe(self, state: _S, obs: Float[Array, "batch obs_dim"]) -> _S:
        """Fold observations into the state's normaliser (when observations are normalised)."""
        if not self.normalise_observations:
            return state
        return eqx.tree_at(lambda s: s.normaliser, state, state.normaliser.update(obs))

    def _norm(self, state, obs):
        return state.normaliser.normalise(obs) if self.normalise_observations else obs


# ---------------------------------------------------------------------------------------------
# TD3


class TD3HParams(eqx.Module):
    """TD3 hyperparameters, each a float32 scalar (or a stacked vector in a population)."""

    policy_lr: Float[Array, ""] = eqx.field(default=3e-4, converter=f32)
    critic_lr: Float[Array, ""] = eqx.field(default=3e-4, converter=f32)
    discount: Float[Array, ""] = eqx.field(default=0.99, converter=f32)
    reward_scaling: Float[Array, ""] = eqx.field(default=1.0, converter=f32)
    tau: Float[Array, ""] = eqx.field(default=0.005, converter=f32)
    policy_noise: Float[Array, ""] = eqx.field(default=0.2, converter=f32)
    noise_clip: Float[Array, ""] = eqx.field(default=0.5, converter=f32)
    expl_noise: Float[Array, ""] = eqx.field(default=0.1, converter=f32)

    def __check_init__(self):
        inf = float("inf")
        _check_ranges(
            self,
            {
                "policy_lr": (0.0, inf),
                "critic_lr": (0.0, inf),
                "discount": (0.0, 1.0),
                "reward_scaling": (0.0, inf),
                "tau": (0.0, 1.0),
                "policy_noise": (0.0, inf),
                "noise_clip": (0.0, inf),
                "expl_noise": (0.0, inf),
            },
        )


class TD3State(eqx.Module):
    """Everything a TD3 agent learns or varies. Optimiser states may be ``None`` for storage
    (see `TD3.empty_optimizer_states`)."""

    policy: DeterministicPolicy
    critic: QCritics
    target_policy: DeterministicPolicy
    target_critic: QCritics
    policy_opt_state: PyTree
    critic_opt_state: PyTree
    normaliser: RunningNormaliser
    hparams: TD3HParams
    steps: Int[Array, ""] = eqx.field(converter=i32)


@typing.final
class TD3(AbstractAgent[TD3State]):
    """Twin Delayed DDPG (Fujimoto et al., 2018): twin critics with clipped double-Q targets,
    target-policy smoothing (``policy_noise`` clipped at ``noise_clip``), and policy plus
    target updates every ``policy_delay`` critic steps."""

    observation_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    policy_hidden: tuple[int, ...] = eqx.field(default=(256, 256), static=True, converter=tuple)
    critic_hidden: tuple[int, ...] = eqx.field(default=(256, 256), static=True, converter=tuple)
    batch_size: int = eqx.field(default=256, static=True)
    policy_delay: int = eqx.field(default=2, static=True)
    normalise_observations: bool = eqx.field(default=False, static=True)

    def __check_init__(self):
        for name in ("observation_size", "action_size", "batch_size", "policy_delay"):
            if getattr(self, name) < 1:
                raise ValueError(f"TD3.{name} must be a positive integer")

    @property
    def hparam_spaces(self) -> dict[str, AbstractSpace]:
        return dict(TD3_SPACES)

    def init_policy(self, *, key: PRNGKey) -> DeterministicPolicy:
        return DeterministicPolicy(
            self.observation_size, self.action_size, self.policy_hidden, key=key
        )

    def init_critic(self, *, key: PRNGKey) -> QCritics:
        return QCritics(self.observation_size, self.action_size, self.critic_hidden, key=key)

    def init(self, hparams: TD3HParams | None = None, *, key: PRNGKey) -> TD3State:
        policy_key, critic_key = jr.split(key)
        policy, critic = self.init_policy(key=policy_key), self.init_critic(key=critic_key)
        return self.state_from(policy, critic, hparams)

    def state_from(
        self, policy: DeterministicPolicy, critic: QCritics, hparams: TD3HParams | None = None
    ) -> TD3State:
        """A fresh training state (targets = copies, new optimiser states) around networks."""
        return TD3State(
            policy,
            critic,
            policy,
            critic,
            _init_opt(policy),
            _init_opt(critic),
            RunningNormaliser.create(self.observation_size),
            TD3HParams() if hparams is None else hparams,
            0,
        )

    def empty_optimizer_states(self, state: TD3State) -> TD3State:
        """Drop the optimiser states (what a repertoire stores: fewer bytes per cell)."""
        return eqx.tree_at(
            lambda s: (s.policy_opt_state, s.critic_opt_state), state, (None, None),
            is_leaf=lambda x: x is None,
        )  # fmt: skip

    def init_optimizer_states(self, state: TD3State) -> TD3State:
        """Fresh optimiser states (zero moments) for the current networks."""
        return eqx.tree_at(
            lambda s: (s.policy_opt_state, s.critic_opt_state),
            state,
            (_init_opt(state.policy), _init_opt(state.critic)),
            is_leaf=lambda x: x is None,
        )

    def act(
        self,
        state: TD3State,
        obs: Float[Array, " obs_dim"],
        *,
        key: PRNGKey,
        deterministic: bool = False,
    ) -> Float[Array, " action_dim"]:
        action = state.policy(self._norm(state, obs))
        if deterministic:
            return action
        noise = state.hparams.expl_noise * jr.normal(key, action.shape)
        return jnp.clip(action + noise, -1.0, 1.0)

    def critic_loss(
        self, critic: QCritics, state: TD3State, batch: Transition, *, key: PRNGKey
    ) -> Float[Array, ""]:
        h = state.hparams
        obs, next_obs = self._norm(state, batch.obs), self._norm(state, batch.next_obs)
        noise = jnp.clip(
            h.policy_noise * jr.normal(key, batch.action.shape), -h.noise_clip, h.noise_clip
        )
        next_action = jnp.clip(jax.vmap(state.target_policy)(next_obs) + noise, -1.0, 1.0)
        next_q = jnp.min(jax.vmap(state.target_critic)(next_obs, next_action), axis=-1)
        target = h.reward_scaling * batch.reward + h.discount * (1.0 - batch.terminated) * next_q
        q = jax.vmap(critic)(obs, batch.action)
        return jnp.mean(jnp.sum((q - jax.lax.stop_gradient(target)[:, None]) ** 2, axis=-1))

    def policy_loss(
        self, policy: DeterministicPolicy, state: TD3State, batch: Transition
    ) -> Float[Array, ""]:
        obs = self._norm(state, batch.obs)
        return -jnp.mean(jax.vmap(state.critic.q1)(obs, jax.vmap(policy)(obs)))

    def update(
        self, state: TD3State, batch: Transition, *, key: PRNGKey
    ) -> tuple[TD3State, Metrics]:
        h = state.hparams
        critic_loss, grads = eqx.filter_value_and_grad(self.critic_loss)(
            state.critic, state, batch, key=key
        )
        critic, critic_opt = _apply_adam(state.critic, grads, state.critic_opt_state, h.critic_lr)
        state = eqx.tree_at(lambda s: (s.critic, s.critic_opt_state), state, (critic, critic_opt))

        def policy_step(state: TD3State) -> tuple[TD3State, Float[Array, ""]]:
            loss, grads = eqx.filter_value_and_grad(self.policy_loss)(state.policy, state, batch)
            policy, opt = _apply_adam(state.policy, grads, state.policy_opt_state, h.policy_lr)
            target_policy = soft_update(state.target_policy, policy, h.tau)
            target_critic = soft_update(state.target_critic, state.critic, h.tau)
            state = eqx.tree_at(
                lambda s: (s.policy, s.policy_opt_state, s.target_policy, s.target_critic),
                state,
                (policy, opt, target_policy, target_critic),
            )
            return state, loss

        def skip(state: TD3State) -> tuple[TD3State, Float[Array, ""]]:
            return state, jnp.full((), jnp.nan, jnp.float32)

        dynamic, static = eqx.partition(state, eqx.is_array)
        run_policy = state.steps % self.policy_delay == 0
        dynamic, policy_loss = jax.lax.cond(
            run_policy,
            lambda d: _partitioned(policy_step, d, static),
            lambda d: _partitioned(skip, d, static),
            dynamic,
        )
        state = eqx.combine(dynamic, static)
        state = eqx.tree_at(lambda s: s.steps, state, state.steps + 1)
        return state, {"critic_loss": critic_loss, "policy_loss": policy_loss}


def _partitioned(fn, dynamic, static):
    out, aux = fn(eqx.combine(dynamic, static))
    return eqx.filter(out, eqx.is_array), aux


# ---------------------------------------------------------------------------------------------
# SAC


class SACHParams(eqx.Module):
    """SAC hyperparameters, each a float32 scalar (or a stacked vector in a population)."""

    policy_lr: Float[Array, ""] = eqx.field(default=3e-4, converter=f32)
    critic_lr: Float[Array, ""] = eqx.field(default=3e-4, converter=f32)
    alpha_lr: Float[Array, ""] = eqx.field(default=3e-4, converter=f32)
    discount: Float[Array, ""] = eqx.field(default=0.99, converter=f32)
    reward_scaling: Float[Array, ""] = eqx.field(default=1.0, converter=f32)
    tau: Float[Array, ""] = eqx.field(default=0.005, converter=f32)

    def __check_init__(self):
        inf = float("inf")
        _check_ranges(
            self,
            {
                "policy_lr": (0.0, inf),
                "critic_lr": (0.0, inf),
                "alpha_lr": (0.0, inf),
                "discount": (0.0, 1.0),
                "reward_scaling": (0.0, inf),
                "tau": (0.0, 1.0),
            },
        )


class SACState(eqx.Module):
    """Everything a SAC agent learns or varies (optimiser states may be ``None`` for storage)."""

    policy: TanhGaussianPolicy
    critic: QCritics
    target_critic: QCritics
    log_alpha: Float[Array, ""]
    policy_opt_state: PyTree
    critic_opt_state: PyTree
    alpha_opt_state: PyTree
    normaliser: RunningNormaliser
    hparams: SACHParams
    steps: Int[Array, ""] = eqx.field(converter=i32)


@typing.final
class SAC(AbstractAgent[SACState]):
    """Soft Actor-Critic (Haarnoja et al., 2018) with twin critics and automatic entropy
    tuning towards ``target_entropy`` (default ``-action_size``); ``fix_alpha`` keeps the
    temperature at ``init_alpha``."""

    observation_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    policy_hidden: tuple[int, ...] = eqx.field(default=(256, 256), static=True, converter=tuple)
    critic_hidden: tuple[int, ...] = eqx.field(default=(256, 256), static=True, converter=tuple)
    batch_size: int = eqx.field(default=256, static=True)
    normalise_observations: bool = eqx.field(default=False, static=True)
    fix_alpha: bool = eqx.field(default=False, static=True)
    init_alpha: float = eqx.field(default=1.0, static=True)
    target_entropy: float | None = eqx.field(default=None, static=True)

    def __check_init__(self):
        for name in ("observation_size", "action_size", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"SAC.{name} must be a positive integer")
        if self.init_alpha <= 0:
            raise ValueError(f"SAC.init_alpha must be positive, got {self.init_alpha}")

    @property
    def hparam_spaces(self) -> dict[str, AbstractSpace]:
        return dict(SAC_SPACES)

    @property
    def entropy_target(self) -> float:
        return -float(self.action_size) if self.target_entropy is None else self.target_entropy

    def init(self, hparams: SACHParams | None = None, *, key: PRNGKey) -> SACState:
        policy_key, critic_key = jr.split(key)
        policy = TanhGaussianPolicy(
            self.observation_size, self.action_size, self.policy_hidden, key=policy_key
        )
        critic = QCritics(
            self.observation_size, self.action_size, self.critic_hidden, key=critic_key
        )
        log_alpha = jnp.log(jnp.asarray(self.init_alpha, jnp.float32))
        return SACState(
            policy,
            critic,
            critic,
            log_alpha,
            _init_opt(policy),
            _init_opt(critic),
            _init_opt(log_alpha),
            RunningNormaliser.create(self.observation_size),
            SACHParams() if hparams is None else hparams,
            0,
        )

    def empty_optimizer_states(self, state: SACState) -> SACState:
        """Drop the optimiser states (what a repertoire stores)."""
        return eqx.tree_at(
            lambda s: (s.policy_opt_state, s.critic_opt_state, s.alpha_opt_state),
            state, (None, None, None), is_leaf=lambda x: x is None,
        )  # fmt: skip

    def init_optimizer_states(self, state: SACState) -> SACState:
        """Fresh optimiser states (zero moments) for the current parameters."""
        return eqx.tree_at(
            lambda s: (s.policy_opt_state, s.critic_opt_state, s.alpha_opt_state),
            state,
            (_init_opt(state.policy), _init_opt(state.critic), _init_opt(state.log_alpha)),
            is_leaf=lambda x: x is None,
        )

    def act(
        self,
        state: SACState,
        obs: Float[Array, " obs_dim"],
        *,
        key: PRNGKey,
        deterministic: bool = False,
    ) -> Float[Array, " action_dim"]:
        obs = self._norm(state, obs)
        if deterministic:
            return state.policy(obs)
        return state.policy.sample(obs, key=key)[0]

    def critic_loss(
        self, critic: QCritics, state: SACState, batch: Transition, *, key: PRNGKey
    ) -> Float[Array, ""]:
        h = state.hparams
        obs, next_obs = self._norm(state, batch.obs), self._norm(state, batch.next_obs)
        eps = jr.normal(key, batch.action.shape)
        next_action, next_logp = jax.vmap(state.policy.sample_from_noise)(next_obs, eps)
        next_q = jnp.min(jax.vmap(state.target_critic)(next_obs, next_action), axis=-1)
        next_v = next_q - jnp.exp(state.log_alpha) * next_logp
        target = h.reward_scaling * batch.reward + h.discount * (1.0 - batch.terminated) * next_v
        q = jax.vmap(critic)(obs, batch.action)
        return 0.5 * jnp.mean(jnp.sum((q - jax.lax.stop_gradient(target)[:, None]) ** 2, axis=-1))

    def policy_loss(
        self, policy: TanhGaussianPolicy, state: SACState, batch: Transition, *, key: PRNGKey
    ) -> tuple[Float[Array, ""], Float[Array, " batch"]]:
        obs = self._norm(state, batch.obs)
        eps = jr.normal(key, batch.action.shape)
        action, logp = jax.vmap(policy.sample_from_noise)(obs, eps)
        q = jnp.min(jax.vmap(state.critic)(obs, action), axis=-1)
        return jnp.mean(jnp.exp(state.log_alpha) * logp - q), logp

    def update(
        self, state: SACState, batch: Transition, *, key: PRNGKey
    ) -> tuple[SACState, Metrics]:
        h = state.hparams
        critic_key, policy_key = jr.split(key)
        critic_loss, grads = eqx.filter_value_and_grad(self.critic_loss)(
            state.critic, state, batch, key=critic_key
        )
        critic, critic_opt = _apply_adam(state.critic, grads, state.critic_opt_state, h.critic_lr)
        (policy_loss, logp), grads = eqx.filter_value_and_grad(self.policy_loss, has_aux=True)(
            state.policy, state, batch, key=policy_key
        )
        policy, policy_opt = _apply_adam(state.policy, grads, state.policy_opt_state, h.policy_lr)
        log_alpha, alpha_opt = state.log_alpha, state.alpha_opt_state
        if not self.fix_alpha:
            entropy_gap = jax.lax.stop_gradient(jnp.mean(logp) + self.entropy_target)
            alpha_grad = -entropy_gap  # d/dlog_alpha of -log_alpha * (logp + target)
            log_alpha, alpha_opt = _apply_adam(log_alpha, alpha_grad, alpha_opt, h.alpha_lr)
        target_critic = soft_update(state.target_critic, critic, h.tau)
        state = eqx.tree_at(
            lambda s: (
                s.policy, s.critic, s.target_critic, s.log_alpha,
                s.policy_opt_state, s.critic_opt_state, s.alpha_opt_state, s.steps,
            ),
            state,
            (
                policy, critic, target_critic, log_alpha,
                policy_opt, critic_opt, alpha_opt, state.steps + 1,
            ),
        )  # fmt: skip
        metrics = {
            "critic_loss": critic_loss,
            "policy_loss": policy_loss,
            "alpha": jnp.exp(log_alpha),
            "entropy": -jnp.mean(logp),
        }
        return state, metrics
