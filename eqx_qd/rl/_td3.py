"""TD3: a stateless agent module, its training state and its array hyperparameters.

The agent module holds only structure (sizes, batch size, delays); everything that changes or
that a population varies lives in its training state, including the hyperparameters as float32
array leaves, so `eqx.filter_vmap` over states trains agents with different learning rates in
one program, and changing a value never retraces. Optimisers are built inside `update` from
those arrays: no optax object is ever a field.
"""

import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, PyTree

from .. import _validate as check
from .._custom_types import PRNGKey
from .._misc import filter_cond, i32, is_none
from ..envs._rollout import Transition
from ._base import AbstractAgentState, AbstractHParams, hparam, Metrics
from ._layers import INITS, MATMUL_DTYPES, reinitialise
from ._normaliser import RunningNormaliser
from ._off_policy import AbstractOffPolicyAgent, check_batch, check_off_policy_fields
from ._optim import apply_adam, init_adam, soft_update
from ._policies import DeterministicPolicy, QCritics
from ._spaces import AbstractSpace, Uniform


TD3_SPACES: dict[str, AbstractSpace] = {
    "discount": Uniform(0.9, 1.0),
    "policy_lr": Uniform(3e-5, 3e-3),
    "critic_lr": Uniform(3e-5, 3e-3),
    "noise_clip": Uniform(0.0, 1.0),
    "policy_noise": Uniform(0.0, 1.0),
    "expl_noise": Uniform(0.0, 0.2),
}
"""QDax's PBT-TD3 ranges."""


class TD3HParams(AbstractHParams):
    """TD3 hyperparameters, each a float32 scalar (or a stacked vector in a population).

    **Fields:** `policy_lr`, `critic_lr` (Adam), `discount`, `reward_scaling` (rewards are
    multiplied by it in the critic's target), `tau` (target update rate), `policy_noise` and
    `noise_clip` (target policy smoothing), `expl_noise` (std of the exploration noise).
    """

    policy_lr: Float[Array, ""] = hparam(3e-4, low=0.0)
    critic_lr: Float[Array, ""] = hparam(3e-4, low=0.0)
    discount: Float[Array, ""] = hparam(0.99, low=0.0, high=1.0)
    reward_scaling: Float[Array, ""] = hparam(1.0, low=0.0)
    tau: Float[Array, ""] = hparam(0.005, low=0.0, high=1.0)
    policy_noise: Float[Array, ""] = hparam(0.2, low=0.0)
    noise_clip: Float[Array, ""] = hparam(0.5, low=0.0)
    expl_noise: Float[Array, ""] = hparam(0.1, low=0.0)

    def default_spaces(self) -> dict[str, AbstractSpace]:
        """`TD3_SPACES` (QDax's PBT-TD3 ranges)."""
        return dict(TD3_SPACES)


class TD3State(AbstractAgentState):
    """Everything a TD3 agent learns or varies.

    **Fields:** `policy`, `critic`, `target_policy`, `target_critic` (the networks; the
    targets are `None` in storage), `policy_opt_state`, `critic_opt_state` (`None` in
    storage: see `TD3.empty_optimiser_states`), `normaliser` (observation statistics),
    `hparams` (the `TD3HParams`) and `steps` (gradient steps taken).
    """

    policy: DeterministicPolicy
    critic: QCritics
    target_policy: DeterministicPolicy | None
    target_critic: QCritics | None
    policy_opt_state: PyTree
    critic_opt_state: PyTree
    normaliser: RunningNormaliser
    hparams: TD3HParams
    steps: Int[Array, ""] = eqx.field(converter=i32)


@typing.final
class TD3(AbstractOffPolicyAgent[TD3State]):
    """Twin Delayed DDPG (Fujimoto et al., 2018): twin critics with clipped double-Q targets,
    target-policy smoothing (`policy_noise` clipped at `noise_clip`), and policy plus
    target updates every `policy_delay` critic steps.

    **Fields:** `observation_size`, `action_size`, `policy_hidden`, `critic_hidden` (layer
    widths), `minibatch_size` (transitions per gradient step), `policy_delay`,
    `normalise_observations` (use the state's running observation statistics),
    `policy_layer_norm` and `policy_affine` (layer normalisation in the policy, as
    `DeterministicPolicy`'s `layer_norm` / `affine`), `matmul_dtype` (as `SAC`'s),
    `critic_target_every_step` (soft-update the target critic after every critic step, as
    QDax's PBT-TD3 does, instead of with the policy every `policy_delay` steps, as the TD3
    paper and QDax's own TD3 do: the paper's is the default), `policy_init` and
    `critic_init` (the networks' initialisation, one of `rl.INITS`, as `rl.reinitialise`:
    `"uniform"` by default; `"lecun_uniform"` is QDax's, `"xavier_uniform"` the PGA-ME
    repository's actors'), and the training loop's `num_envs`, `buffer_size`,
    `grad_updates_per_step` and `same_start` (each training environment restarts every
    episode from its own first state, as QDax's: `training_reset`) (`AbstractOffPolicyAgent`).
    """

    observation_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    policy_hidden: tuple[int, ...] = eqx.field(default=(256, 256), static=True, converter=tuple)
    critic_hidden: tuple[int, ...] = eqx.field(default=(256, 256), static=True, converter=tuple)
    minibatch_size: int = eqx.field(default=256, static=True)
    policy_delay: int = eqx.field(default=2, static=True)
    normalise_observations: bool = eqx.field(default=False, static=True)
    num_envs: int = eqx.field(default=16, static=True)
    buffer_size: int = eqx.field(default=100_000, static=True)
    grad_updates_per_step: float = eqx.field(default=1.0, static=True)
    policy_layer_norm: bool = eqx.field(default=False, static=True)
    policy_affine: bool = eqx.field(default=False, static=True)
    matmul_dtype: str = eqx.field(default="float32", static=True)
    critic_target_every_step: bool = eqx.field(default=False, static=True)
    policy_init: str = eqx.field(default="uniform", static=True)
    critic_init: str = eqx.field(default="uniform", static=True)
    same_start: bool = eqx.field(default=False, static=True)

    def __check_init__(self):
        check_off_policy_fields(self)
        check.one_of("TD3.matmul_dtype", self.matmul_dtype, MATMUL_DTYPES)
        check.one_of("TD3.policy_init", self.policy_init, INITS)
        check.one_of("TD3.critic_init", self.critic_init, INITS)
        check.positive_int("TD3.policy_delay", self.policy_delay)
        if self.policy_affine and not self.policy_layer_norm:
            raise ValueError("TD3.policy_affine needs policy_layer_norm")

    def init_policy(self, *, key: PRNGKey) -> DeterministicPolicy:
        """A freshly initialised policy (the genotype of PGA-ME), drawn as `policy_init`
        says."""
        build_key, init_key = jr.split(key)
        policy = DeterministicPolicy(
            self.observation_size,
            self.action_size,
            self.policy_hidden,
            layer_norm=self.policy_layer_norm,
            affine=self.policy_affine,
            matmul_dtype=self.matmul_dtype,
            key=key if self.policy_init == "uniform" else build_key,
        )
        if self.policy_init == "uniform":  # the layers' own draw: no second one
            return policy
        return reinitialise(policy, self.policy_init, key=init_key)

    def init_critic(self, *, key: PRNGKey) -> QCritics:
        """Freshly initialised twin critics, drawn as `critic_init` says."""
        build_key, init_key = jr.split(key)
        critic = QCritics(
            self.observation_size,
            self.action_size,
            self.critic_hidden,
            matmul_dtype=self.matmul_dtype,
            key=key if self.critic_init == "uniform" else build_key,
        )
        if self.critic_init == "uniform":
            return critic
        return reinitialise(critic, self.critic_init, key=init_key)

    def init(self, hparams: TD3HParams | None = None, *, key: PRNGKey) -> TD3State:
        policy_key, critic_key = jr.split(key)
        policy, critic = self.init_policy(key=policy_key), self.init_critic(key=critic_key)
        return self.state_from(policy, critic, hparams)

    def state_from(
        self, policy: DeterministicPolicy, critic: QCritics, hparams: TD3HParams | None = None
    ) -> TD3State:
        """A fresh training state around `policy` and `critic` (targets are copies, new
        optimiser states) with `hparams` (`None`: the defaults)."""
        return TD3State(
            policy,
            critic,
            policy,
            critic,
            init_adam(policy),
            init_adam(critic),
            RunningNormaliser.create(self.observation_size),
            TD3HParams() if hparams is None else hparams,
            0,
        )

    def empty_optimiser_states(self, state: TD3State) -> TD3State:
        """Drop the optimiser states and the target networks (what a repertoire stores)."""
        return eqx.tree_at(
            lambda s: (s.policy_opt_state, s.critic_opt_state, s.target_policy, s.target_critic),
            state,
            (None, None, None, None),
            is_leaf=is_none,
        )

    def init_optimiser_states(self, state: TD3State) -> TD3State:
        """Fresh optimiser states (zero moments) for the current networks, and targets reset
        to them (QDax's `init_optimizers_states`)."""
        state = eqx.tree_at(
            lambda s: (s.policy_opt_state, s.critic_opt_state),
            state,
            (init_adam(state.policy), init_adam(state.critic)),
            is_leaf=is_none,
        )
        return self.reset_targets(state)

    def reset_targets(self, state: TD3State) -> TD3State:
        """Target policy and critics set to the online ones."""
        return eqx.tree_at(
            lambda s: (s.target_policy, s.target_critic),
            state,
            (state.policy, state.critic),
            is_leaf=is_none,
        )

    def genome(self, state: TD3State) -> tuple[DeterministicPolicy, QCritics]:
        """The policy and the critics (varied jointly, as QDax's `td3_pbt_variation_fn`)."""
        return state.policy, state.critic

    def with_genome(self, state: TD3State, genome: tuple) -> TD3State:
        return eqx.tree_at(lambda s: (s.policy, s.critic), state, tuple(genome))

    def act(
        self,
        state: TD3State,
        obs: Float[Array, " obs_dim"],
        *,
        deterministic: bool = False,
        key: PRNGKey,
    ) -> Float[Array, " action_dim"]:
        check.shape("TD3.act: obs", obs, (self.observation_size,))
        action = state.policy(self.normalise(state, obs))
        if deterministic:
            return action
        noise = state.hparams.expl_noise * jr.normal(key, action.shape)
        return jnp.clip(action + noise, -1.0, 1.0)

    def critic_loss(
        self, critic: QCritics, state: TD3State, batch: Transition, *, key: PRNGKey
    ) -> Float[Array, ""]:
        """The clipped double-Q regression loss of `critic` on `batch`, with the targets
        and hyperparameters of `state`."""
        h = state.hparams
        obs, next_obs = self.normalise(state, batch.obs), self.normalise(state, batch.next_obs)
        noise = jnp.clip(
            h.policy_noise * jr.normal(key, batch.action.shape), -h.noise_clip, h.noise_clip
        )
        next_action = jnp.clip(state.target_policy(next_obs) + noise, -1.0, 1.0)
        next_q = jnp.min(state.target_critic(next_obs, next_action), axis=-1)
        target = h.reward_scaling * batch.reward + h.discount * (1.0 - batch.terminated) * next_q
        q = critic(obs, batch.action)
        return jnp.mean(jnp.sum((q - jax.lax.stop_gradient(target)[:, None]) ** 2, axis=-1))

    def policy_loss(
        self, policy: DeterministicPolicy, state: TD3State, batch: Transition
    ) -> Float[Array, ""]:
        """Minus the mean Q1 of `policy`'s actions on `batch` under the critic of
        `state`."""
        obs = self.normalise(state, batch.obs)
        return -jnp.mean(state.critic.q1(obs, policy(obs)))

    def update(
        self, state: TD3State, batch: Transition, *, axis_name: str | None = None, key: PRNGKey
    ) -> tuple[TD3State, Metrics]:
        """One TD3 step on `batch`: the critic, then (every `policy_delay` steps) the policy
        and the target networks.

        With `axis_name` (inside `shard_map` over that mesh axis, data parallel), each device
        gives its own share of the minibatch, and the gradients and losses are averaged over
        the axis before the Adam steps: devices that start from the same state stay equal, and
        the step is that of the whole minibatch (the mean of equal shares' mean losses)."""
        check_batch(self, batch, "TD3.update")
        h = state.hparams
        mean = (lambda t: t) if axis_name is None else (lambda t: jax.lax.pmean(t, axis_name))
        critic_loss, grads = mean(
            eqx.filter_value_and_grad(self.critic_loss)(state.critic, state, batch, key=key)
        )
        critic, critic_opt = apply_adam(state.critic, grads, state.critic_opt_state, h.critic_lr)
        state = eqx.tree_at(lambda s: (s.critic, s.critic_opt_state), state, (critic, critic_opt))
        every_step = self.critic_target_every_step
        if every_step:
            target = soft_update(state.target_critic, state.critic, h.tau)
            state = eqx.tree_at(lambda s: s.target_critic, state, target)

        def policy_step(state: TD3State) -> tuple[TD3State, Float[Array, ""]]:
            loss, grads = mean(
                eqx.filter_value_and_grad(self.policy_loss)(state.policy, state, batch)
            )
            policy, opt = apply_adam(state.policy, grads, state.policy_opt_state, h.policy_lr)
            target_policy = soft_update(state.target_policy, policy, h.tau)
            target_critic = (
                state.target_critic
                if every_step
                else soft_update(state.target_critic, state.critic, h.tau)
            )
            state = eqx.tree_at(
                lambda s: (s.policy, s.policy_opt_state, s.target_policy, s.target_critic),
                state,
                (policy, opt, target_policy, target_critic),
            )
            return state, loss

        def skip(state: TD3State) -> tuple[TD3State, Float[Array, ""]]:
            return state, jnp.full((), jnp.nan, jnp.float32)

        run_policy = state.steps % self.policy_delay == 0
        state, policy_loss = filter_cond(run_policy, policy_step, skip, state)
        state = eqx.tree_at(lambda s: s.steps, state, state.steps + 1)
        return state, {"critic_loss": critic_loss, "policy_loss": policy_loss}
