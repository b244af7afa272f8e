"""Policy and critic networks as Equinox modules. Each is written for one input; `MLP` and the
SAC / TD3 policies and critics also take a batch along leading axes (the off-policy losses call
them on the whole minibatch, see `Dense`); vmap the others over observations."""

import abc
import math
import typing
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int

from .. import _validate as check
from .._custom_types import PRNGKey


def _identity(x):
    return x


def _check_sizes(owner: str, hidden: Sequence[int] | None = None, **sizes: int) -> None:
    """Refuse non-positive sizes, naming ``owner`` and the argument."""
    for name, value in sizes.items():
        check.positive_int(f"{owner}: {name}", value)
    for i, width in enumerate(hidden or ()):
        check.positive_int(f"{owner}: hidden[{i}]", width)


def _check_obs(owner: str, obs: Array, expected: tuple[int, ...], name: str = "obs") -> None:
    check.shape(f"{owner}: {name}", obs, expected)


def _check_last_axis(name: str, x: Array, size: int) -> None:
    """Refuse ``x`` unless it is one input of ``size`` entries or a batch of them (leading
    axes)."""
    if np.ndim(x) == 0 or np.shape(x)[-1] != size:
        raise ValueError(f"{name} must have shape ({size},) or (..., {size}), got {np.shape(x)}")


MATMUL_DTYPES = ("float32", "bfloat16")
"""The ``matmul_dtype`` values networks accept: the inputs' type of their hidden products."""


def _check_matmul_dtype(owner: str, matmul_dtype: str) -> None:
    check.one_of(f"{owner}: matmul_dtype", matmul_dtype, MATMUL_DTYPES)


def _transposed_copy(w: Array) -> Array:
    """``w.T`` as a gather, which XLA moves in memory: a plain transpose it folds into the
    product that reads it, and its CPU backend runs a bfloat16 product with a transposed operand
    in float32."""
    rows, cols = w.shape
    order = np.arange(rows * cols).reshape(rows, cols).T.reshape(-1)
    return w.reshape(rows * cols)[order].reshape(cols, rows)


@jax.custom_vjp
def _bf16_matmul(x: Float[Array, "n in_size"], w: Float[Array, "in_size out_size"]) -> Array:
    """``x @ w`` with bfloat16 inputs and float32 accumulation, for rows of inputs."""
    return _bf16_matmul_fwd(x, w)[0]


def _bf16_matmul_fwd(x, w):
    x16, w16 = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
    y = jnp.matmul(x16, w16, preferred_element_type=jnp.float32)
    return y, (_transposed_copy(x16), w16)


def _bf16_matmul_bwd(residuals, g):
    # Both gradients are bfloat16 products of rounded operands with float32 accumulation (JAX's
    # own rule would multiply the float32 cotangent by a bfloat16 operand, a mixed product XLA
    # runs in float32). Each transposed operand is a physical copy (`_transposed_copy`): a
    # bfloat16 product reading a transposed operand runs in float32 too.
    x16_t, w16 = residuals
    g16 = g.astype(jnp.bfloat16)
    dx = jnp.matmul(g16, _transposed_copy(w16), preferred_element_type=jnp.float32)
    return dx, jnp.matmul(x16_t, g16, preferred_element_type=jnp.float32)


_bf16_matmul.defvjp(_bf16_matmul_fwd, _bf16_matmul_bwd)


@typing.final
class Dense(eqx.Module):
    """``x @ weight + bias`` with ``weight`` stored (in, out), on one input or on rows of them.

    Stored input-major so that a vmapped call is one plain (batch, in) x (in, out) matmul (no
    transpose), measurably faster on CPU than ``eqx.nn.Linear``'s ``weight @ x``. Initialised
    like ``eqx.nn.Linear``: uniform in +-1/sqrt(in). ``use_bias=False`` leaves the bias out
    (``bias`` is ``None``).

    ``matmul_dtype="bfloat16"`` rounds ``x`` and ``weight`` to bfloat16 for the product and
    accumulates it in float32 (the output, the stored weights and the optimiser stay float32);
    both gradients are such products too (of the rounded cotangent with the rounded weight, and
    with the rounded input). On CPUs with AVX-512 BF16 these products run about 1.35x faster.
    Called on a batch (``x`` of shape ``(..., in)``), the weight's gradient is one product over
    the batch; called on single inputs under ``vmap``, it is a sum of per-input outer products,
    no faster than float32. Reverse mode only (a custom VJP: no ``jax.jvp`` / ``jax.jacfwd``
    through such a layer).
    """

    weight: Float[Array, "in_size out_size"]
    bias: Float[Array, " out_size"] | None
    matmul_dtype: str = eqx.field(static=True)

    def __init__(
        self,
        in_size: int,
        out_size: int,
        *,
        use_bias: bool = True,
        matmul_dtype: str = "float32",
        key: PRNGKey,
    ):
        _check_matmul_dtype("Dense", matmul_dtype)
        wkey, bkey = jr.split(key)
        lim = 1.0 / math.sqrt(in_size)
        self.weight = jr.uniform(wkey, (in_size, out_size), minval=-lim, maxval=lim)
        self.bias = jr.uniform(bkey, (out_size,), minval=-lim, maxval=lim) if use_bias else None
        self.matmul_dtype = matmul_dtype

    @property
    def out_features(self) -> int:
        return self.weight.shape[-1]

    def __call__(self, x: Float[Array, "*batch in_size"]) -> Float[Array, "*batch out_size"]:
        if self.matmul_dtype == "float32":
            y = x @ self.weight
        else:
            rows = x.reshape(-1, x.shape[-1])
            y = _bf16_matmul(rows, self.weight).reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + jnp.broadcast_to(self.bias, y.shape)


@typing.final
class MLP(eqx.Module):
    """A multi-layer perceptron with per-layer widths (``eqx.nn.MLP`` has one width only).

    Activations are static (module-level functions), so populations of MLPs vmap, scan and
    index as pure arrays.

    **Arguments:** `in_size`, `out_size`, `hidden` (the widths of the hidden layers),
    `activation` (between layers; relu), `final_activation` (after the last; identity),
    `layer_norm` (a layer normalisation after every layer, before its activation), `affine`
    (with ``layer_norm``: learned scale and shift in the normalisations, and no biases in the
    layers, as the PGA-MAP-Elites repository's ``--normalise --affine``), `matmul_dtype`
    (``"bfloat16"``: the products between hidden layers take bfloat16 inputs, as `Dense`'s; the
    first layer, which reads raw inputs, and the last, which gives the outputs, stay float32),
    `key`.
    """

    layers: tuple[Dense, ...]
    norms: tuple[eqx.nn.LayerNorm, ...] | None
    activation: Callable = eqx.field(static=True)
    final_activation: Callable = eqx.field(static=True)

    def __init__(
        self,
        in_size: int,
        out_size: int,
        hidden: Sequence[int],
        *,
        activation: Callable = jax.nn.relu,
        final_activation: Callable = _identity,
        layer_norm: bool = False,
        affine: bool = False,
        matmul_dtype: str = "float32",
        key: PRNGKey,
    ):
        _check_sizes("MLP", hidden, in_size=in_size, out_size=out_size)
        _check_matmul_dtype("MLP", matmul_dtype)
        if affine and not layer_norm:
            raise ValueError("MLP: affine needs layer_norm (it sets the normalisations' scale)")
        sizes = [in_size, *hidden, out_size]
        keys = jr.split(key, len(sizes) - 1)
        last = len(sizes) - 2
        self.layers = tuple(
            Dense(
                int(a),
                int(b),
                use_bias=not affine,
                key=k,
                matmul_dtype=matmul_dtype if 0 < i < last else "float32",
            )  # fmt: skip
            for i, (a, b, k) in enumerate(zip(sizes[:-1], sizes[1:], keys))
        )
        self.norms = (
            tuple(eqx.nn.LayerNorm(int(b), use_weight=affine, use_bias=affine) for b in sizes[1:])
            if layer_norm
            else None
        )
        self.activation = activation
        self.final_activation = final_activation

    @property
    def in_size(self) -> int:
        return self.layers[0].weight.shape[-2]

    def __call__(self, x: Float[Array, "*batch in_size"]) -> Float[Array, "*batch out_size"]:
        """The output for one input, or for each row of a batch (leading axes)."""
        _check_last_axis("MLP: x", x, self.in_size)
        if self.norms is not None and x.ndim > 1:  # the normalisations take one input
            return jax.vmap(self)(x)
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if self.norms is not None:
                x = self.norms[i](x)
            x = self.final_activation(x) if i == last else self.activation(x)
        return x


class AbstractPolicy(eqx.Module):
    """A policy whose call gives the deterministic action in ``[-1, 1]^action_size``.

    Policies are the genotypes of policy-search QD: a stacked population of them (built with
    ``eqx.filter_vmap``) is what scoring functions and variation operators receive.
    """

    @property
    def num_params(self) -> int:
        return sum(x.size for x in jax.tree.leaves(eqx.filter(self, eqx.is_inexact_array)))

    @abc.abstractmethod
    def __call__(self, obs: Float[Array, " obs_dim"]) -> Float[Array, " action_dim"]: ...


@typing.final
class DeterministicPolicy(AbstractPolicy):
    """``tanh(MLP(obs))`` (TD3, PGA-ME).

    **Arguments:** `obs_size`, `action_size`, `hidden` (layer widths), `layer_norm` and
    `affine` (as `MLP`'s: the PGA-MAP-Elites repository's ``--normalise`` / ``--affine``),
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
            obs_size, action_size, hidden, final_activation=jnp.tanh, layer_norm=layer_norm,
            affine=affine, matmul_dtype=matmul_dtype, key=key,
        )  # fmt: skip

    def __call__(self, obs: Float[Array, "*batch obs_dim"]) -> Float[Array, "*batch action_dim"]:
        """The action for one observation, or for each row of a batch (leading axes)."""
        _check_last_axis("DeterministicPolicy: obs", obs, self.net.in_size)
        return self.net(obs)


_LOG_STD_MIN, _LOG_STD_MAX = -5.0, 2.0


@typing.final
class TanhGaussianPolicy(AbstractPolicy):
    """A gaussian on pre-tanh actions, squashed by tanh (SAC). Calling it gives ``tanh(mean)``.

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
        """``tanh`` of the mean, for one observation or each row of a batch (leading axes)."""
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
        """`sample` with the standard-normal draw ``eps`` (``(action_dim,)``) given for the
        observation ``obs`` (batched draws are cheaper in one call), or for each row of a batch
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
    """``num_critics`` independent Q-networks of ``(obs, action)`` (twin Q by default).

    Kept as separate networks: on CPU, two plain matmuls ran as fast as one stacked, batched
    matmul, and a fused first layer with batched deeper layers was 1.6x slower.

    **Arguments:** `obs_size`, `action_size`, `hidden` (layer widths), `key`, `num_critics`
    and `matmul_dtype` (as `MLP`'s). Called on ``(obs, action)`` it gives every critic's Q
    value, ``(num_critics,)``.
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
        """Every critic's Q value of ``(obs, action)``, or of each row of a batch of both
        (leading axes: the networks then run on the batch, see `Dense`)."""
        self._check(obs, action)
        x = jnp.concatenate([obs, action], axis=-1)
        return jnp.concatenate([net(x) for net in self.nets], axis=-1)

    def q1(
        self, obs: Float[Array, "*batch obs_dim"], action: Float[Array, "*batch action_dim"]
    ) -> Float[Array, "*batch"]:
        """Q value of ``(obs, action)`` under the first critic only (TD3's and PGA-ME's
        policy objective), or of each row of a batch of both."""
        self._check(obs, action)
        return self.nets[0](jnp.concatenate([obs, action], axis=-1))[..., 0]


# ----------------------------------------------------------------------------- PPO actors


def _scale_last_layer(net: MLP, scale: float) -> MLP:
    last = net.layers[-1]
    return eqx.tree_at(lambda n: n.layers[-1].weight, net, last.weight * scale)


class AbstractActor(eqx.Module):
    """A stochastic policy for one agent: log-probabilities, entropy, samples and the mode.

    Subclass it for another action distribution: define the four abstract methods. `IPPO`
    calls them through `log_prob_and_entropy` and `sample_and_log_prob`, which a subclass
    overrides to run its network once for both values.
    """

    @abc.abstractmethod
    def log_prob(self, obs: Float[Array, " obs_dim"], action: Array) -> Float[Array, ""]:
        """Log-probability of ``action`` in the distribution for observation ``obs``."""

    @abc.abstractmethod
    def entropy(self, obs: Float[Array, " obs_dim"]) -> Float[Array, ""]:
        """Entropy of the distribution for ``obs``."""

    @abc.abstractmethod
    def sample(self, obs: Float[Array, " obs_dim"], *, key: PRNGKey) -> Array:
        """An action drawn from the distribution for ``obs``."""

    @abc.abstractmethod
    def mode(self, obs: Float[Array, " obs_dim"]) -> Array:
        """The most likely action for ``obs`` (deterministic evaluation)."""

    def log_prob_and_entropy(self, obs: Array, action: Array) -> tuple[Array, Array]:
        """``(log_prob(obs, action), entropy(obs))`` (PPO's loss needs both). Override to share
        one pass of the network between them: computed apart, the network runs, and is
        differentiated, twice."""
        return self.log_prob(obs, action), self.entropy(obs)

    def sample_and_log_prob(self, obs: Array, *, key: PRNGKey) -> tuple[Array, Array]:
        """An action for ``obs`` drawn with ``key`` as `sample` draws it, and its `log_prob` (a
        rollout needs both). Override to share one pass of the network between them."""
        action = self.sample(obs, key=key)
        return action, self.log_prob(obs, action)


def _entropy_of_log_probs(log_p: Float[Array, "*batch k"]) -> Float[Array, "*batch"]:
    """The entropy of categorical distributions given their log-probabilities (last axis)."""
    return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)


def _gaussian_log_prob(
    mean: Float[Array, "*batch d"], log_std: Float[Array, "*batch d"], x: Float[Array, "*batch d"]
) -> Float[Array, "*batch"]:
    """The log-density of ``x`` under diagonal gaussians (dimensions on the last axis)."""
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
    """A state-value network ``V(obs)`` for one agent.

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

    Unlike the other actors it acts for all agents at once: ``obs`` is ``(num_agents,
    obs_dim)``; `log_prob` and `entropy` are ``(num_agents,)``, one per agent, so PPO's clip
    and advantages stay per agent.

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
        net = MLP(num_agents * obs_size, num_agents * action_size, hidden, key=key,
                  activation=jnp.tanh)  # fmt: skip
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
    gives every agent's value, ``(num_agents,)`` (jaxagents' IPPO layout).

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
