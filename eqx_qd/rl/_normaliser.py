"""Running mean / variance of observations, as an immutable module."""

import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .. import _validate as check
from .._misc import f32


@typing.final
class RunningNormaliser(eqx.Module):
    """Running mean and variance of vectors, merged batch by batch (Chan et al.'s parallel
    update, exact for any batch split).

    `normalise` centres and scales by `sqrt(var + eps)`, clipped to `[-clip, clip]`. Before
    any update it is the identity up to the clip (mean 0, variance 1).

    **Fields:** `mean` and `var` `(dim,)` (or with leading axes, one set per agent), `count`
    (vectors folded in so far), and the static `eps` and `clip`. Build one with `create`.
    """

    mean: Float[Array, " dim"]
    var: Float[Array, " dim"]
    count: Float[Array, ""] = eqx.field(converter=f32)
    eps: float = eqx.field(default=1e-6, static=True)
    clip: float = eqx.field(default=10.0, static=True)

    def __check_init__(self):
        check.positive("RunningNormaliser.eps", self.eps)
        check.positive("RunningNormaliser.clip", self.clip)
        check.shape("RunningNormaliser.var", self.var, np.shape(self.mean))

    @classmethod
    def create(cls, dim: int, *, eps: float = 1e-6, clip: float = 10.0) -> "RunningNormaliser":
        check.positive_int("RunningNormaliser.create: dim", dim)
        return cls(jnp.zeros(dim, jnp.float32), jnp.ones(dim, jnp.float32), 0.0, eps, clip)

    def update(
        self, batch: Float[Array, "batch dim"], *, axis_name: str | None = None
    ) -> "RunningNormaliser":
        """Fold a batch of vectors (`(batch, *mean.shape)`) into the statistics. With
        `axis_name` (inside `shard_map`), the batch is every device's along that mesh axis
        together, and every device gets the same statistics."""
        check.rows("RunningNormaliser.update: batch", batch, self.mean.shape)
        n = jnp.asarray(batch.shape[0], jnp.float32)
        if axis_name is None:
            batch_mean = jnp.mean(batch, axis=0)
            batch_var = jnp.var(batch, axis=0)
        else:
            n = jax.lax.psum(n, axis_name)
            batch_mean = jax.lax.psum(jnp.sum(batch, axis=0), axis_name) / n
            batch_var = (
                jax.lax.psum(jnp.sum((batch - batch_mean[None]) ** 2, axis=0), axis_name) / n
            )
        total = self.count + n
        delta = batch_mean - self.mean
        mean = self.mean + delta * (n / total)
        # The prior variance of 1 carries no weight while count == 0.
        m2 = self.var * self.count + batch_var * n + delta**2 * (self.count * n / total)
        return eqx.tree_at(lambda s: (s.mean, s.var, s.count), self, (mean, m2 / total, total))

    def normalise(self, x: Float[Array, "*batch dim"]) -> Float[Array, "*batch dim"]:
        """Also for stacked statistics (e.g. one per agent, `mean (agents, dim)`): they apply
        to the trailing axes of `x`."""
        k = self.mean.ndim
        if np.shape(x)[np.ndim(x) - k :] != self.mean.shape:
            raise ValueError(
                f"RunningNormaliser.normalise: x must end in the statistics' shape "
                f"{self.mean.shape}, got {np.shape(x)}"
            )
        lead = (1,) * (x.ndim - self.mean.ndim)  # explicit broadcast over the batch axes
        mean = self.mean.reshape(lead + self.mean.shape)
        std = jnp.sqrt(self.var + self.eps).reshape(lead + self.var.shape)
        z = (x - mean) / std
        return jnp.clip(z, -self.clip, self.clip)
