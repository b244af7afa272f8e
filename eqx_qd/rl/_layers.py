"""Dense layers and the MLP every network of `eqx_qd.rl` is built from, with the bfloat16
product option (`matmul_dtype`). `MLP` takes one input or a batch along leading axes (see
`Dense`)."""

import math
import typing
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float

from .. import _validate as check
from .._custom_types import PRNGKey
from .._machine import MATMUL_DTYPES as MATMUL_DTYPES, resolve_matmul_dtype
from .._misc import is_none


def _identity(x):
    return x


def _check_sizes(owner: str, hidden: Sequence[int] | None = None, **sizes: int) -> None:
    """Refuse non-positive sizes, naming `owner` and the argument."""
    for name, value in sizes.items():
        check.positive_int(f"{owner}: {name}", value)
    for i, width in enumerate(hidden or ()):
        check.positive_int(f"{owner}: hidden[{i}]", width)


def _check_obs(owner: str, obs: Array, expected: tuple[int, ...], name: str = "obs") -> None:
    check.shape(f"{owner}: {name}", obs, expected)


def _check_last_axis(name: str, x: Array, size: int) -> None:
    """Refuse `x` unless it is one input of `size` entries or a batch of them (leading
    axes)."""
    if np.ndim(x) == 0 or np.shape(x)[-1] != size:
        raise ValueError(f"{name} must have shape ({size},) or (..., {size}), got {np.shape(x)}")


def _check_matmul_dtype(owner: str, matmul_dtype: str) -> None:
    check.one_of(f"{owner}: matmul_dtype", matmul_dtype, MATMUL_DTYPES)


def _transposed_copy(w: Array) -> Array:
    """`w.T` as a gather, which XLA moves in memory: a plain transpose it folds into the
    product that reads it, and its CPU backend runs a bfloat16 product with a transposed operand
    in float32."""
    rows, cols = w.shape
    order = np.arange(rows * cols).reshape(rows, cols).T.reshape(-1)
    return w.reshape(rows * cols)[order].reshape(cols, rows)


@jax.custom_vjp
def _bf16_matmul(x: Float[Array, "n in_size"], w: Float[Array, "in_size out_size"]) -> Array:
    """`x @ w` with bfloat16 inputs and float32 accumulation, for rows of inputs."""
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
    """`x @ weight + bias` with `weight` stored (in, out), on one input or on rows of them.

    Stored input-major so that a vmapped call is one plain (batch, in) x (in, out) matmul (no
    transpose), measurably faster on CPU than `eqx.nn.Linear`'s `weight @ x`. Initialised
    like `eqx.nn.Linear`: uniform in +-1/sqrt(in). `use_bias=False` leaves the bias out
    (`bias` is `None`).

    `matmul_dtype="bfloat16"` rounds `x` and `weight` to bfloat16 for the product and
    accumulates it in float32 (the output, the stored weights and the optimiser stay float32);
    both gradients are such products too (of the rounded cotangent with the rounded weight, and
    with the rounded input). These products are faster on CPUs with AVX-512 BF16, slower on
    others (`benchmarks/log/compare-and-tuning.md`); `matmul_dtype="auto"` takes bfloat16 where
    they are faster (`eqx_qd.internal.Machine.fast_bfloat16`, read when the layer is built) and
    float32 elsewhere, and the layer keeps what it took.
    Called on a batch (`x` of shape `(..., in)`), the weight's gradient is one product over
    the batch; called on single inputs under `vmap`, it is a sum of per-input outer products,
    no faster than float32. Reverse mode only (a custom VJP: no `jax.jvp` / `jax.jacfwd`
    through such a layer).

    **Arguments:** `in_size`, `out_size` (the widths), `use_bias`, `matmul_dtype` (as above) and
    the initialisation `key`.
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
        matmul_dtype = resolve_matmul_dtype(matmul_dtype)
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


INITS = ("uniform", "lecun_uniform", "xavier_uniform")
"""The weight initialisations of `reinitialise`."""


def reinitialise(tree: Any, init: str, *, key: PRNGKey) -> Any:
    """`tree` with every `Dense` layer in it drawn afresh by `init`, shapes and all else kept.

    - `"uniform"`: weights and biases U(+-1/sqrt(fan_in)) (`Dense`'s own, as PyTorch's and
      Equinox's default layers);
    - `"lecun_uniform"`: weights U(+-sqrt(3/fan_in)), biases zero (QDax's networks);
    - `"xavier_uniform"`: weights U(+-sqrt(6/(fan_in + fan_out))), biases U(+-1/sqrt(fan_in))
      (the PGA-MAP-Elites repository's actors: Xavier on the weights, PyTorch's biases).

    Layers without a bias (`use_bias=False`) stay without one. Each layer takes its own key.
    """
    check.one_of("reinitialise: init", init, INITS)
    is_dense = lambda x: isinstance(x, Dense)  # noqa: E731
    layers = [x for x in jax.tree.leaves(tree, is_leaf=is_dense) if is_dense(x)]
    if not layers:
        return tree
    fresh = []
    for layer, k in zip(layers, jr.split(key, len(layers))):
        wkey, bkey = jr.split(k)
        fan_in, fan_out = layer.weight.shape
        bias_lim = 1.0 / math.sqrt(fan_in)
        lim = {
            "uniform": bias_lim,
            "lecun_uniform": math.sqrt(3.0 / fan_in),
            "xavier_uniform": math.sqrt(6.0 / (fan_in + fan_out)),
        }[init]
        weight = jr.uniform(wkey, layer.weight.shape, minval=-lim, maxval=lim)
        bias = layer.bias
        if bias is not None:
            bias = (
                jnp.zeros_like(bias)
                if init == "lecun_uniform"
                else jr.uniform(bkey, bias.shape, minval=-bias_lim, maxval=bias_lim)
            )
        fresh.append(
            eqx.tree_at(lambda d: (d.weight, d.bias), layer, (weight, bias), is_leaf=is_none)
        )
    return eqx.tree_at(
        lambda t: [x for x in jax.tree.leaves(t, is_leaf=is_dense) if is_dense(x)], tree, fresh
    )


@typing.final
class MLP(eqx.Module):
    """A multi-layer perceptron with per-layer widths (`eqx.nn.MLP` has one width only).

    Activations are static (module-level functions), so populations of MLPs vmap, scan and
    index as pure arrays.

    **Arguments:** `in_size`, `out_size`, `hidden` (the widths of the hidden layers),
    `activation` (between layers; relu), `final_activation` (after the last; identity),
    `layer_norm` (a layer normalisation after every layer, before its activation), `affine`
    (with `layer_norm`: learned scale and shift in the normalisations, and no biases in the
    layers, as the PGA-MAP-Elites repository's `--normalise --affine`), `matmul_dtype`
    (`"bfloat16"`: the products between hidden layers take bfloat16 inputs, as `Dense`'s; the
    first layer, which reads raw inputs, and the last, which gives the outputs, stay float32;
    `"auto"`: bfloat16 where this machine runs it faster, as `Dense`'s),
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
            )
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
