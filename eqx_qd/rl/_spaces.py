"""Hyperparameter spaces: what PBT samples from, clips into and perturbs within."""

import abc
import math
import typing
from collections.abc import Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float

from .. import _validate as check
from .._custom_types import PRNGKey
from .._misc import f32


class AbstractSpace(eqx.Module):
    """The range of one hyperparameter: draw from it, test membership, clip into it."""

    @abc.abstractmethod
    def sample(self, *, key: PRNGKey) -> Float[Array, ""]:
        """One value drawn from the space (float32)."""

    @abc.abstractmethod
    def clip(self, x: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        """`x` moved to the nearest value of the space, element-wise."""

    def contains(self, x: Float[Array, "*shape"]) -> jax.Array:
        """Whether each element of `x` lies in the space (up to float32 rounding)."""
        return jnp.isclose(self.clip(x), x, rtol=1e-6, atol=0.0)


@typing.final
class Uniform(AbstractSpace):
    """Uniform on `[low, high]`."""

    low: float = eqx.field(static=True)
    high: float = eqx.field(static=True)

    def __check_init__(self):
        check.finite("Uniform.low", self.low)
        check.finite("Uniform.high", self.high)
        check.ordered("Uniform.low", self.low, "Uniform.high", self.high, strict=False)

    def sample(self, *, key: PRNGKey) -> Float[Array, ""]:
        return jr.uniform(key, (), jnp.float32, self.low, self.high)

    def clip(self, x: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        return jnp.clip(x, self.low, self.high)


@typing.final
class LogUniform(AbstractSpace):
    """Log-uniform on `[low, high]` (both positive): each decade equally likely."""

    low: float = eqx.field(static=True)
    high: float = eqx.field(static=True)

    def __check_init__(self):
        check.positive("LogUniform.low", self.low)
        check.finite("LogUniform.high", self.high)
        check.ordered("LogUniform.low", self.low, "LogUniform.high", self.high, strict=False)

    def sample(self, *, key: PRNGKey) -> Float[Array, ""]:
        u = jr.uniform(key, (), jnp.float32, math.log(self.low), math.log(self.high))
        return jnp.clip(jnp.exp(u), self.low, self.high)

    def clip(self, x: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        return jnp.clip(x, self.low, self.high)


@typing.final
class Choice(AbstractSpace):
    """One of a few values, equally likely; `clip` snaps to the nearest."""

    values: tuple[float, ...] = eqx.field(
        static=True, converter=lambda v: tuple(float(x) for x in v)
    )

    def __check_init__(self):
        if not self.values:
            raise ValueError("Choice needs at least one value")
        check.finite("Choice.values", self.values)

    def sample(self, *, key: PRNGKey) -> Float[Array, ""]:
        return jr.choice(key, jnp.asarray(self.values, jnp.float32))

    def clip(self, x: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        values = jnp.asarray(self.values, jnp.float32)
        nearest = jnp.argmin(jnp.abs(x[..., None] - values), axis=-1)
        return values[nearest]


Spaces = Mapping[str, AbstractSpace]


def log_uniform_learning_rates(spaces: Spaces) -> dict[str, AbstractSpace]:
    """The same spaces with every `*_lr` drawn log-uniformly over its range."""
    _check_spaces_mapping("log_uniform_learning_rates", spaces)
    out = dict(spaces)
    for name, space in spaces.items():
        if name.endswith("_lr") and isinstance(space, (Uniform, LogUniform)):
            out[name] = LogUniform(space.low, space.high)
    return out


def _check_spaces_mapping(where: str, spaces: Spaces) -> None:
    if not isinstance(spaces, Mapping):
        raise TypeError(f"{where}: spaces must be a mapping of names to spaces, got {spaces!r}")
    for name, space in spaces.items():
        if not isinstance(space, AbstractSpace):
            raise TypeError(
                f"{where}: spaces[{name!r}] must be an eqx_qd.rl.AbstractSpace, got {space!r}"
            )


def _check_fields(where: str, hparams: eqx.Module, spaces: Spaces) -> None:
    _check_spaces_mapping(where, spaces)
    missing = [name for name in spaces if not hasattr(hparams, name)]
    if missing:
        raise ValueError(
            f"{where}: {type(hparams).__name__} has no hyperparameters named {missing}"
        )


def sample_hparams(template: eqx.Module, spaces: Spaces, *, key: PRNGKey) -> eqx.Module:
    """`template` with every field named in `spaces` drawn from its space (pure)."""
    _check_fields("sample_hparams", template, spaces)
    names = sorted(spaces)
    keys = jr.split(key, len(names))
    values = [f32(spaces[n].sample(key=k)) for n, k in zip(names, keys)]
    return eqx.tree_at(lambda h: [getattr(h, n) for n in names], template, values)


def perturb_hparams(
    hparams: eqx.Module, spaces: Spaces, *, factors: tuple[float, float] = (0.8, 1.2), key: PRNGKey
) -> eqx.Module:
    """`hparams` with each hyperparameter named in `spaces` multiplied by one of
    `factors` (equally likely) and clipped into its space: PBT's "perturb" explore step."""
    _check_fields("perturb_hparams", hparams, spaces)
    if len(factors) == 0:
        raise ValueError("perturb_hparams: factors must not be empty")
    check.positive("perturb_hparams: factors", factors)
    names = sorted(spaces)
    keys = jr.split(key, len(names))
    f = jnp.asarray(factors, jnp.float32)
    values = [
        f32(spaces[n].clip(getattr(hparams, n) * jr.choice(k, f))) for n, k in zip(names, keys)
    ]
    return eqx.tree_at(lambda h: [getattr(h, n) for n in names], hparams, values)
