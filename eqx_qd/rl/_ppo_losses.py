"""PPO's hyperparameters and losses: `PPOHParams` and its search spaces, and free functions
of one actor or critic and its samples (the clipped surrogate with its entropy bonus, the
approximate KL, value regression, their epochs), the minibatches they are cut into and the
advantages' standardisation. The learner (`_ppo.py`) calls them; they know no environment and
no rollout."""

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, PyTree

from .._custom_types import PRNGKey
from .._misc import (
    filter_scan,
    filter_while_loop,
    i32,
    random_permutation,
    tree_take,
)
from ._actors import AbstractActor
from ._base import AbstractHParams, hparam
from ._optim import apply_clipped_adam
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

    gamma: Float[Array, ""] = hparam(0.99, low=0.0, high=1.0)
    gae_lambda: Float[Array, ""] = hparam(0.95, low=0.0, high=1.0)
    clip_eps: Float[Array, ""] = hparam(0.2, low=0.0)
    ent_coef: Float[Array, ""] = hparam(0.01, low=0.0)
    vf_coef: Float[Array, ""] = hparam(0.5, low=0.0)
    kl_threshold: Float[Array, ""] = hparam(0.02, low=0.0)
    actor_lr: Float[Array, ""] = hparam(3e-4, low=0.0)
    critic_lr: Float[Array, ""] = hparam(1e-3, low=0.0)
    max_grad_norm: Float[Array, ""] = hparam(0.5, low=0.0)
    reward_scale: Float[Array, ""] = hparam(1.0, low=0.0)

    def default_spaces(self) -> dict[str, AbstractSpace]:
        """`PPO_SPACES`."""
        return dict(PPO_SPACES)

    @staticmethod
    def stack(hparams: Sequence["PPOHParams"]) -> "PPOHParams":
        """One `PPOHParams` whose leaves are vectors: the batch a sweep vmaps over."""
        if not hparams:
            raise ValueError("PPOHParams.stack needs at least one PPOHParams")
        return jax.tree.map(lambda *xs: jnp.stack(xs), *hparams)


class _Samples(eqx.Module):
    """Samples of a rollout, flattened, `(num_samples, ...)` each (one agent's, or pooled):
    `obs` (as the actor saw them), `actions`, `log_probs` (under the rollout policy),
    `advantages` and `targets` (GAE's)."""

    obs: Array
    actions: Array
    log_probs: Array
    advantages: Array
    targets: Array


def _minibatches(key: PRNGKey, n: int, count: int) -> Int[Array, "count size"]:
    """A fresh shuffle of `n` samples cut into `count` equal minibatches."""
    return random_permutation(n, key=key).reshape(count, n // count)


def _trajectory_minibatches(
    rollout_length: int, num_envs: int, count: int, blocks: int = 1
) -> Int[Array, "count size"]:
    """jaxagents' minibatches: the environments in one fixed order (its `PRNGKey(1)`
    draw), cut into `count` groups; a minibatch is every sample of one group's environments,
    laid out `(blocks, time, group)` (`blocks` agents when their samples are pooled), so that
    consecutive runs of `num_envs // count` samples share an agent and a time step. Samples are
    indexed `(block, time, env)`, row-major, as `AbstractPPOLearner._samples` flattens them."""
    order = jr.choice(jr.key(1), num_envs, (num_envs,), replace=False)
    groups = order.reshape(count, num_envs // count)
    time = jnp.arange(rollout_length)[:, None] * num_envs
    block = jnp.arange(blocks)[:, None, None] * (rollout_length * num_envs)
    idx = block[None] + time[None, None] + groups[:, None, None, :]
    return idx.reshape(count, -1).astype(jnp.int32)


def _over(axis_name: str | None, reduce=jax.lax.pmean):
    """`reduce` over the mesh axis `axis_name` (data-parallel training), or nothing."""
    return (lambda t: t) if axis_name is None else (lambda t: reduce(t, axis_name))


def _standardise(adv: Array, group: int | None, axis_name: str | None = None) -> Array:
    """`adv` standardised over all its samples (`group=None`), or over each run of `group`
    consecutive samples (one time step of one agent: the jaxagents convention), per agent
    where `adv` has an agent axis after the samples. With `axis_name`, the statistics are
    those of every device's samples together (equal shares)."""
    if axis_name is None:
        if group is None:
            return (adv - jnp.mean(adv)) / (jnp.std(adv) + 1e-8)
        rows = adv.reshape(-1, group, *adv.shape[1:])
        mean = jnp.mean(rows, axis=1, keepdims=True)
        std = jnp.std(rows, axis=1, keepdims=True)
        return ((rows - mean) / (std + 1e-8)).reshape(adv.shape)
    mean_all = _over(axis_name)
    if group is None:
        mean = mean_all(jnp.mean(adv))
        std = jnp.sqrt(mean_all(jnp.mean((adv - mean) ** 2)))
        return (adv - mean) / (std + 1e-8)
    rows = adv.reshape(-1, group, *adv.shape[1:])
    mean = mean_all(jnp.mean(rows, axis=1, keepdims=True))
    std = jnp.sqrt(mean_all(jnp.mean((rows - mean) ** 2, axis=1, keepdims=True)))
    return ((rows - mean) / (std + 1e-8)).reshape(adv.shape)


def _actor_loss(
    actor: AbstractActor,
    batch: _Samples,
    h: PPOHParams,
    *,
    normalise_advantages: bool,
    group: int | None = None,
    axis_name: str | None = None,
) -> tuple[Float[Array, ""], tuple[Float[Array, ""], Float[Array, ""]]]:
    """The clipped surrogate with an entropy bonus (to minimise) of `actor` on `batch`, the
    mean entropy and the sum of `-log ratio` over the batch (jaxagents' KL statistic).
    Advantages are standardised (`_standardise`, over runs of `group` samples if given) when
    `normalise_advantages` (over every device's samples with `axis_name`)."""
    log_probs, entropies = jax.vmap(actor.log_prob_and_entropy)(batch.obs, batch.actions)
    log_ratio = log_probs - batch.log_probs
    ratio = jnp.exp(log_ratio)
    adv = batch.advantages
    if normalise_advantages:
        adv = _standardise(adv, group, axis_name)
    clipped = jnp.clip(ratio, 1.0 - h.clip_eps, 1.0 + h.clip_eps)
    surrogate = jnp.mean(jnp.minimum(ratio * adv, clipped * adv))
    entropy = jnp.mean(entropies)
    return -surrogate - h.ent_coef * entropy, (entropy, -jnp.sum(log_ratio))


def _approx_kl(actor: AbstractActor, data: _Samples) -> Float[Array, ""]:
    """KL(rollout policy || `actor`), estimated as mean((r - 1) - log r) over `data`
    (non-negative, unbiased; Schulman's k3 estimator)."""
    log_ratio = jax.vmap(actor.log_prob)(data.obs, data.actions) - data.log_probs
    return jnp.mean(jnp.expm1(log_ratio) - log_ratio)


def _actor_epochs(
    actor: AbstractActor,
    opt_state: PyTree,
    data: _Samples,
    h: PPOHParams,
    *,
    num_minibatches: int,
    max_epochs: int,
    normalise_advantages: bool,
    fixed: Int[Array, "count size"] | None = None,
    group: int | None = None,
    adam_eps: float = 1e-5,
    axis_name: str | None = None,
    key: PRNGKey,
) -> tuple[AbstractActor, PyTree, Metrics]:
    """Up to `max_epochs` epochs of `_actor_loss` of `actor` over `data` in
    `num_minibatches` minibatches (clipped Adam from `opt_state`), stopping once the
    `_approx_kl` to the rollout policy passes `h.kl_threshold`.

    With `fixed` minibatch indices (the jaxagents convention), every epoch takes them in that
    order, advantages are standardised over runs of `group` samples, and the stop reads the
    last minibatch's sum of `-log ratio` instead.

    With `axis_name` (data parallel, inside `shard_map`), `data` is this device's share, each
    minibatch is every device's together: gradients, losses and the KL are averaged over the
    axis (the sum of `-log ratio` summed), so every device takes the same steps."""
    n = data.obs.shape[0]
    mean, total = _over(axis_name), _over(axis_name, jax.lax.psum)
    grad_fn = eqx.filter_value_and_grad(
        lambda a, b: _actor_loss(
            a, b, h, normalise_advantages=normalise_advantages, group=group, axis_name=axis_name
        ),
        has_aux=True,
    )

    def minibatch(carry, idx):
        actor, opt_state = carry
        (loss, (entropy, minus_log_ratio)), grads = grad_fn(actor, tree_take(data, idx))
        loss, entropy, grads = mean((loss, entropy, grads))
        minus_log_ratio = total(minus_log_ratio)
        actor, opt_state = apply_clipped_adam(
            actor, grads, opt_state, h.actor_lr, h.max_grad_norm, adam_eps
        )
        return (actor, opt_state), (loss, entropy, minus_log_ratio)

    def epoch(carry):
        actor, opt_state, key, count, _, _, _ = carry
        key, perm_key = jr.split(key)
        idx = _minibatches(perm_key, n, num_minibatches) if fixed is None else fixed
        carry, (losses, entropies, minus_log_ratios) = filter_scan(
            minibatch, (actor, opt_state), idx
        )
        actor, opt_state = carry
        kl = mean(_approx_kl(actor, data)) if fixed is None else minus_log_ratios[-1]
        return actor, opt_state, key, count + 1, kl, jnp.mean(losses), jnp.mean(entropies)

    def keep_going(carry):
        count, kl = carry[3], carry[4]
        return (count < max_epochs) & (kl <= h.kl_threshold)

    zero = jnp.zeros((), jnp.float32)
    carry = filter_while_loop(keep_going, epoch, (actor, opt_state, key, i32(0), zero, zero, zero))
    actor, opt_state, _, count, kl, loss, entropy = carry
    metrics = {"actor_loss": loss, "entropy": entropy, "kl": kl, "actor_epochs": count}
    return actor, opt_state, metrics


def _critic_epochs(
    critic: eqx.Module,
    opt_state: PyTree,
    data: _Samples,
    h: PPOHParams,
    *,
    num_minibatches: int,
    epochs: int,
    fixed: Int[Array, "count size"] | None = None,
    adam_eps: float = 1e-5,
    axis_name: str | None = None,
    key: PRNGKey,
) -> tuple[eqx.Module, PyTree, Metrics]:
    """`epochs` epochs of value regression of `critic` (any module `obs -> value`;
    `h.vf_coef` x squared error to the GAE targets) over `data` in `num_minibatches`
    minibatches (a fresh shuffle each epoch, or the `fixed` indices every epoch), with
    clipped Adam from `opt_state`. With `axis_name`, as `_actor_epochs`: the gradients and
    losses averaged over every device's share."""
    n = data.obs.shape[0]
    mean = _over(axis_name)

    def loss_fn(critic, batch):
        values = jax.vmap(critic)(batch.obs)
        return h.vf_coef * jnp.mean((values - batch.targets) ** 2)

    def minibatch(carry, idx):
        critic, opt_state = carry
        loss, grads = mean(eqx.filter_value_and_grad(loss_fn)(critic, tree_take(data, idx)))
        critic, opt_state = apply_clipped_adam(
            critic, grads, opt_state, h.critic_lr, h.max_grad_norm, adam_eps
        )
        return (critic, opt_state), loss

    def epoch(carry, epoch_key):
        idx = _minibatches(epoch_key, n, num_minibatches) if fixed is None else fixed
        carry, losses = filter_scan(minibatch, carry, idx)
        return carry, jnp.mean(losses)

    (critic, opt_state), losses = filter_scan(epoch, (critic, opt_state), jr.split(key, epochs))
    loss = losses[-1] if epochs else jnp.zeros((), jnp.float32)
    return critic, opt_state, {"critic_loss": loss}
