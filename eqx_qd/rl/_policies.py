"""The off-policy networks (TD3, SAC, PGA-ME): deterministic and tanh-gaussian policies and the
twin Q critics. Each takes one input or a batch along leading axes (the off-policy losses call
them on the whole minibatch, see `Dense`)."""

import abc
import typing
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float

from .._custom_types import PRNGKey
from ._layers import _check_last_axis, _check_sizes, MLP


class AbstractPolicy(eqx.Module):
    """A policy whose call gives the deterministic action in `[-1, 1]^action_size`.

    Policies are the genotypes of policy-search QD: a stacked population of them (built with
    `eqx.filter_vmap`) is what scoring functions and variation operators receive.
    """

    @property
    def num_params(self) -> int:
        return sum(x.size for x in jax.tree.leaves(eqx.filter(self, eqx.is_inexact_array)))

    @abc.abstractmethod
    def __call__(self, obs: Float[Array, " obs_dim"]) -> Float[Array, " action_dim"]: ...


@typing.final
class DeterministicPolicy(AbstractPolicy):
    """`tanh(MLP(obs))` (TD3, PGA-ME).

    **Arguments:** `obs_size`, `action_size`, `hidden` (layer widths), `layer_norm` and
    `affine` (as `MLP`'s: the PGA-MAP-Elites repository's `--normalise` / `--affine`),
    `matmul_dtype` (as `MLP`'s), `key`.
    """

    net: MLP

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        hidden: Sequence[int],
        *,
        layer_norm: bool = False,
        affine: bool = False,
        matmul_dtype: str = "float32",
        key: PRNGKey,
    ):
        _check_sizes("DeterministicPolicy", hidden, obs_size=obs_size, action_size=action_size)
        self.net = MLP(
            obs_size,
            action_size,
            hidden,
            final_activation=jnp.tanh,
            layer_norm=layer_norm,
            affine=affine,
            matmul_dtype=matmul_dtype,
            key=key,
        )

    def __call__(self, obs: Float[Array, "*batch obs_dim"]) -> Float[Array, "*batch action_dim"]:
        """The action for one observation, or for each row of a batch (leading axes)."""
        _check_last_axis("DeterministicPolicy: obs", obs, self.net.in_size)
        return self.net(obs)


_LOG_STD_MIN, _LOG_STD_MAX = -5.0, 2.0


@typing.final
class TanhGaussianPolicy(AbstractPolicy):
    """A gaussian on pre-tanh actions, squashed by tanh (SAC). Calling it gives `tanh(mean)`.

    **Arguments:** `obs_size`, `action_size`, `hidden` (layer widths), `matmul_dtype` (as
    `MLP`'s), `key`.
    """

    net: MLP

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        hidden: Sequence[int],
        *,
        matmul_dtype: str = "float32",
        key: PRNGKey,
    ):
        _check_sizes("TanhGaussianPolicy", hidden, obs_size=obs_size, action_size=action_size)
        self.net = MLP(obs_size, 2 * action_size, hidden, matmul_dtype=matmul_dtype, key=key)

    @property
    def _action_size(self) -> int:
        return self.net.layers[-1].out_features // 2

    def _dist(self, obs):
        _check_last_axis("TanhGaussianPolicy: obs", obs, self.net.in_size)
        mean, log_std = jnp.split(self.net(obs), 2, axis=-1)
        return mean, jnp.clip(log_std, _LOG_STD_MIN, _LOG_STD_MAX)

    def __call__(self, obs: Float[Array, "*batch obs_dim"]) -> Float[Array, "*batch action_dim"]:
        """`tanh` of the mean, for one observation or each row of a batch (leading axes)."""
        return jnp.tanh(self._dist(obs)[0])

    def sample(
        self, obs: Float[Array, "*batch obs_dim"], *, key: PRNGKey
    ) -> tuple[Float[Array, "*batch action_dim"], Float[Array, "*batch"]]:
        """A squashed sample and its log-density (with the tanh change of variables), for one
        observation or each row of a batch (leading axes)."""
        _check_last_axis("TanhGaussianPolicy: obs", obs, self.net.in_size)
        eps = jr.normal(key, (*np.shape(obs)[:-1], self._action_size))
        return self.sample_from_noise(obs, eps)

    def sample_from_noise(
        self, obs: Float[Array, "*batch obs_dim"], eps: Float[Array, "*batch action_dim"]
    ) -> tuple[Float[Array, "*batch action_dim"], Float[Array, "*batch"]]:
        """`sample` with the standard-normal draw `eps` (`(action_dim,)`) given for the
        observation `obs` (batched draws are cheaper in one call), or for each row of a batch
        of both (leading axes: the networks then run on the batch, see `Dense`)."""
        if np.shape(eps) != (*np.shape(obs)[:-1], self._action_size):
            raise ValueError(
                "TanhGaussianPolicy.sample_from_noise: eps must have the shape of the actions, "
                f"(*batch, action_dim), got obs {np.shape(obs)} and eps {np.shape(eps)}"
            )
        mean, log_std = self._dist(obs)
        u = mean + jnp.exp(log_std) * eps
        gauss = -0.5 * eps**2 - log_std - 0.5 * jnp.log(2.0 * jnp.pi)
        # log(1 - tanh(u)^2), written stably.
        log_det = 2.0 * (jnp.log(2.0) - u - jax.nn.softplus(-2.0 * u))
        return jnp.tanh(u), jnp.sum(gauss - log_det, axis=-1)


@typing.final
class QCritics(eqx.Module):
    """`num_critics` independent Q-networks of `(obs, action)` (twin Q by default).

    Kept as separate networks: on CPU, two plain matmuls ran as fast as one stacked, batched
    matmul, and a fused first layer with batched deeper layers was slower.

    **Arguments:** `obs_size`, `action_size`, `hidden` (layer widths), `key`, `num_critics`
    and `matmul_dtype` (as `MLP`'s). Called on `(obs, action)` it gives every critic's Q
    value, `(num_critics,)`.
    """

    nets: tuple[MLP, ...]

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        hidden: Sequence[int],
        *,
        num_critics: int = 2,
        matmul_dtype: str = "float32",
        key: PRNGKey,
    ):
        _check_sizes(
            "QCritics", hidden, obs_size=obs_size, action_size=action_size, num_critics=num_critics
        )
        keys = jr.split(key, num_critics)
        self.nets = tuple(
            MLP(obs_size + action_size, 1, hidden, matmul_dtype=matmul_dtype, key=k) for k in keys
        )

    def _check(self, obs: Array, action: Array) -> None:
        if np.ndim(obs) < 1 or np.shape(obs)[:-1] != np.shape(action)[:-1] or np.ndim(action) < 1:
            raise ValueError(
                "QCritics: obs and action must be vectors, or batches of them with the same "
                f"leading axes, got shapes {np.shape(obs)} and {np.shape(action)}"
            )
        if np.shape(obs)[-1] + np.shape(action)[-1] != self.nets[0].in_size:
            raise ValueError(
                f"QCritics: obs and action must have {self.nets[0].in_size} entries together "
                f"(obs_size + action_size), got shapes {np.shape(obs)} and {np.shape(action)}"
            )

    def __call__(
        self, obs: Float[Array, "*batch obs_dim"], action: Float[Array, "*batch action_dim"]
    ) -> Float[Array, "*batch num_critics"]:
        """Every critic's Q value of `(obs, action)`, or of each row of a batch of both
        (leading axes: the networks then run on the batch, see `Dense`)."""
        self._check(obs, action)
        x = jnp.concatenate([obs, action], axis=-1)
        return jnp.concatenate([net(x) for net in self.nets], axis=-1)

    def q1(
        self, obs: Float[Array, "*batch obs_dim"], action: Float[Array, "*batch action_dim"]
    ) -> Float[Array, "*batch"]:
        """Q value of `(obs, action)` under the first critic only (TD3's and PGA-ME's
        policy objective), or of each row of a batch of both."""
        self._check(obs, action)
        return self.nets[0](jnp.concatenate([obs, action], axis=-1))[..., 0]
