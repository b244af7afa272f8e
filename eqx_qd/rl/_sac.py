"""SAC: a stateless agent module, its training state and its array hyperparameters (see
`eqx_qd.rl._td3` for the layout)."""

import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, PyTree

from .. import _validate as check
from .._custom_types import PRNGKey
from .._misc import i32, is_none
from ..envs._rollout import Transition
from ._base import AbstractAgentState, AbstractHParams, hparam, Metrics
from ._layers import MATMUL_DTYPES
from ._normaliser import RunningNormaliser
from ._off_policy import AbstractOffPolicyAgent, check_batch, check_off_policy_fields
from ._optim import apply_adam, init_adam, soft_update
from ._policies import QCritics, TanhGaussianPolicy
from ._spaces import AbstractSpace, Uniform


SAC_SPACES: dict[str, AbstractSpace] = {
    "discount": Uniform(0.9, 1.0),
    "policy_lr": Uniform(3e-5, 3e-3),
    "critic_lr": Uniform(3e-5, 3e-3),
    "alpha_lr": Uniform(3e-5, 3e-3),
    "reward_scaling": Uniform(0.1, 10.0),
}
"""QDax's PBT-SAC ranges (learning rates uniform; see `log_uniform_learning_rates`)."""


class SACHParams(AbstractHParams):
    """SAC hyperparameters, each a float32 scalar (or a stacked vector in a population).

    **Fields:** `policy_lr`, `critic_lr`, `alpha_lr` (Adam), `discount`, `reward_scaling`
    (rewards are multiplied by it in the critic's target) and `tau` (target update rate).
    """

    policy_lr: Float[Array, ""] = hparam(3e-4, low=0.0)
    critic_lr: Float[Array, ""] = hparam(3e-4, low=0.0)
    alpha_lr: Float[Array, ""] = hparam(3e-4, low=0.0)
    discount: Float[Array, ""] = hparam(0.99, low=0.0, high=1.0)
    reward_scaling: Float[Array, ""] = hparam(1.0, low=0.0)
    tau: Float[Array, ""] = hparam(0.005, low=0.0, high=1.0)

    def default_spaces(self) -> dict[str, AbstractSpace]:
        """`SAC_SPACES` (QDax's PBT-SAC ranges)."""
        return dict(SAC_SPACES)


class SACState(AbstractAgentState):
    """Everything a SAC agent learns or varies.

    **Fields:** `policy`, `critic`, `target_critic` (`None` in storage), `log_alpha` (the log
    temperature), `policy_opt_state`, `critic_opt_state`, `alpha_opt_state` (`None` in
    storage), `normaliser`, `hparams` (the `SACHParams`) and `steps` (gradient steps taken).
    """

    policy: TanhGaussianPolicy
    critic: QCritics
    target_critic: QCritics | None
    log_alpha: Float[Array, ""]
    policy_opt_state: PyTree
    critic_opt_state: PyTree
    alpha_opt_state: PyTree
    normaliser: RunningNormaliser
    hparams: SACHParams
    steps: Int[Array, ""] = eqx.field(converter=i32)


@typing.final
class SAC(AbstractOffPolicyAgent[SACState]):
    """Soft Actor-Critic (Haarnoja et al., 2018) with twin critics and automatic entropy
    tuning towards `target_entropy` (default `-target_entropy_scale * action_size`, with
    the scale 1 as in the SAC paper; QDax's PBT-SAC uses 0.5); `fix_alpha` keeps the
    temperature at `init_alpha`.

    **Fields:** `observation_size`, `action_size`, `policy_hidden`, `critic_hidden` (layer
    widths), `minibatch_size` (transitions per gradient step), `normalise_observations`, the
    temperature settings above, `matmul_dtype` (`"bfloat16"`: the networks' products between
    hidden layers take bfloat16 inputs with float32 accumulation, as `MLP`'s; faster on CPUs
    with AVX-512 BF16, see `benchmarks/log/compare-and-tuning.md` for speed and learning curves;
    `"auto"`:
    bfloat16 on such CPUs, float32 elsewhere, read from the machine when `init` builds the
    networks), and the
    training loop's `num_envs`, `buffer_size`, `grad_updates_per_step` and `same_start` (as
    `TD3`'s) (`AbstractOffPolicyAgent`).
    """

    observation_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    policy_hidden: tuple[int, ...] = eqx.field(default=(256, 256), static=True, converter=tuple)
    critic_hidden: tuple[int, ...] = eqx.field(default=(256, 256), static=True, converter=tuple)
    minibatch_size: int = eqx.field(default=256, static=True)
    normalise_observations: bool = eqx.field(default=False, static=True)
    fix_alpha: bool = eqx.field(default=False, static=True)
    init_alpha: float = eqx.field(default=1.0, static=True)
    target_entropy: float | None = eqx.field(default=None, static=True)
    target_entropy_scale: float = eqx.field(default=1.0, static=True)
    num_envs: int = eqx.field(default=16, static=True)
    buffer_size: int = eqx.field(default=100_000, static=True)
    grad_updates_per_step: float = eqx.field(default=1.0, static=True)
    matmul_dtype: str = eqx.field(default="float32", static=True)
    same_start: bool = eqx.field(default=False, static=True)

    def __check_init__(self):
        check_off_policy_fields(self)
        check.one_of("SAC.matmul_dtype", self.matmul_dtype, MATMUL_DTYPES)
        check.positive("SAC.init_alpha", self.init_alpha)
        check.finite("SAC.init_alpha", self.init_alpha)
        check.finite("SAC.target_entropy_scale", self.target_entropy_scale)
        if self.target_entropy is not None:
            check.finite("SAC.target_entropy", self.target_entropy)

    @property
    def entropy_target(self) -> float:
        """`target_entropy`, or `-target_entropy_scale * action_size` when it is None."""
        if self.target_entropy is not None:
            return self.target_entropy
        return -self.target_entropy_scale * float(self.action_size)

    def init(self, hparams: SACHParams | None = None, *, key: PRNGKey) -> SACState:
        policy_key, critic_key = jr.split(key)
        policy = TanhGaussianPolicy(
            self.observation_size,
            self.action_size,
            self.policy_hidden,
            matmul_dtype=self.matmul_dtype,
            key=policy_key,
        )
        critic = QCritics(
            self.observation_size,
            self.action_size,
            self.critic_hidden,
            matmul_dtype=self.matmul_dtype,
            key=critic_key,
        )
        log_alpha = jnp.log(jnp.asarray(self.init_alpha, jnp.float32))
        return SACState(
            policy,
            critic,
            critic,
            log_alpha,
            init_adam(policy),
            init_adam(critic),
            init_adam(log_alpha),
            RunningNormaliser.create(self.observation_size),
            SACHParams() if hparams is None else hparams,
            0,
        )

    def empty_optimiser_states(self, state: SACState) -> SACState:
        """Drop the optimiser states and the target critics (what a repertoire stores)."""
        return eqx.tree_at(
            lambda s: (s.policy_opt_state, s.critic_opt_state, s.alpha_opt_state, s.target_critic),
            state,
            (None, None, None, None),
            is_leaf=is_none,
        )

    def init_optimiser_states(self, state: SACState) -> SACState:
        """Fresh optimiser states (zero moments) for the current parameters, and the target
        critics reset to the online ones (QDax's `init_optimizers_states`)."""
        state = eqx.tree_at(
            lambda s: (s.policy_opt_state, s.critic_opt_state, s.alpha_opt_state),
            state,
            (init_adam(state.policy), init_adam(state.critic), init_adam(state.log_alpha)),
            is_leaf=is_none,
        )
        return self.reset_targets(state)

    def reset_targets(self, state: SACState) -> SACState:
        """Target critics set to the online ones."""
        return eqx.tree_at(lambda s: s.target_critic, state, state.critic, is_leaf=is_none)

    def genome(self, state: SACState) -> tuple[TanhGaussianPolicy, QCritics, Array]:
        """The policy, the critics and the log temperature (varied jointly, as QDax's
        `sac_pbt_variation_fn`)."""
        return state.policy, state.critic, state.log_alpha

    def with_genome(self, state: SACState, genome: tuple) -> SACState:
        return eqx.tree_at(lambda s: (s.policy, s.critic, s.log_alpha), state, tuple(genome))

    def act(
        self,
        state: SACState,
        obs: Float[Array, " obs_dim"],
        *,
        deterministic: bool = False,
        key: PRNGKey,
    ) -> Float[Array, " action_dim"]:
        check.shape("SAC.act: obs", obs, (self.observation_size,))
        obs = self.normalise(state, obs)
        if deterministic:
            return state.policy(obs)
        return state.policy.sample(obs, key=key)[0]

    def critic_loss(
        self, critic: QCritics, state: SACState, batch: Transition, *, key: PRNGKey
    ) -> Float[Array, ""]:
        """The soft double-Q regression loss of `critic` on `batch`, with the target critic,
        policy and temperature of `state`."""
        h = state.hparams
        obs, next_obs = self.normalise(state, batch.obs), self.normalise(state, batch.next_obs)
        eps = jr.normal(key, batch.action.shape)
        next_action, next_logp = state.policy.sample_from_noise(next_obs, eps)
        next_q = jnp.min(state.target_critic(next_obs, next_action), axis=-1)
        next_v = next_q - jnp.exp(state.log_alpha) * next_logp
        target = h.reward_scaling * batch.reward + h.discount * (1.0 - batch.terminated) * next_v
        q = critic(obs, batch.action)
        return 0.5 * jnp.mean(jnp.sum((q - jax.lax.stop_gradient(target)[:, None]) ** 2, axis=-1))

    def policy_loss(
        self, policy: TanhGaussianPolicy, state: SACState, batch: Transition, *, key: PRNGKey
    ) -> tuple[Float[Array, ""], Float[Array, " batch"]]:
        """The entropy-regularised policy loss of `policy` on `batch` under the critic and
        temperature of `state`, and the sampled actions' log-densities."""
        obs = self.normalise(state, batch.obs)
        eps = jr.normal(key, batch.action.shape)
        action, logp = policy.sample_from_noise(obs, eps)
        q = jnp.min(state.critic(obs, action), axis=-1)
        return jnp.mean(jnp.exp(state.log_alpha) * logp - q), logp

    def update(
        self, state: SACState, batch: Transition, *, key: PRNGKey
    ) -> tuple[SACState, Metrics]:
        check_batch(self, batch, "SAC.update")
        h = state.hparams
        critic_key, policy_key = jr.split(key)
        critic_loss, grads = eqx.filter_value_and_grad(self.critic_loss)(
            state.critic, state, batch, key=critic_key
        )
        critic, critic_opt = apply_adam(state.critic, grads, state.critic_opt_state, h.critic_lr)
        (policy_loss, logp), grads = eqx.filter_value_and_grad(self.policy_loss, has_aux=True)(
            state.policy, state, batch, key=policy_key
        )
        policy, policy_opt = apply_adam(state.policy, grads, state.policy_opt_state, h.policy_lr)
        log_alpha, alpha_opt = state.log_alpha, state.alpha_opt_state
        if not self.fix_alpha:
            entropy_gap = jax.lax.stop_gradient(jnp.mean(logp) + self.entropy_target)
            alpha_grad = -entropy_gap  # d/dlog_alpha of -log_alpha * (logp + target)
            log_alpha, alpha_opt = apply_adam(log_alpha, alpha_grad, alpha_opt, h.alpha_lr)
        target_critic = soft_update(state.target_critic, critic, h.tau)
        state = eqx.tree_at(
            lambda s: (
                s.policy,
                s.critic,
                s.target_critic,
                s.log_alpha,
                s.policy_opt_state,
                s.critic_opt_state,
                s.alpha_opt_state,
                s.steps,
            ),
            state,
            (
                policy,
                critic,
                target_critic,
                log_alpha,
                policy_opt,
                critic_opt,
                alpha_opt,
                state.steps + 1,
            ),
        )
        metrics = {
            "critic_loss": critic_loss,
            "policy_loss": policy_loss,
            "alpha": jnp.exp(log_alpha),
            "entropy": -jnp.mean(logp),
        }
        return state, metrics
