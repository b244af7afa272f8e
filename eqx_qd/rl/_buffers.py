"""A fixed-capacity circular replay buffer, as an immutable module."""

import typing

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, PyTree

from .. import _validate as check
from .._custom_types import PRNGKey
from .._misc import batch_size_of, i32, poison_if_empty, tree_scatter, tree_take, tree_zeros_batch


@typing.final
class ReplayBuffer(eqx.Module):
    """A circular buffer of `capacity` items (any pytree with array leaves).

    `insert` writes a batch after the newest item, overwriting the oldest once full; `sample`
    draws uniformly (with replacement) among the items inserted so far. Works under `jit`,
    inside `lax.scan`, and stacked by `eqx.filter_vmap` (one buffer per agent).

    **Fields:** `data` (the items, leading axis `capacity`), `position` (where the next item
    goes), `size` (items inserted so far, at most `capacity`) and `capacity` (static). Build
    one with `ReplayBuffer.empty`.
    """

    data: PyTree
    position: Int[Array, ""] = eqx.field(converter=i32)
    size: Int[Array, ""] = eqx.field(converter=i32)
    capacity: int = eqx.field(static=True)

    @classmethod
    def empty(cls, capacity: int, example: PyTree) -> "ReplayBuffer":
        """An empty buffer for items shaped like one unbatched `example`."""
        check.positive_int("ReplayBuffer capacity", capacity)
        return cls(tree_zeros_batch(example, capacity), 0, 0, capacity)

    def insert(self, batch: PyTree, mask: Float[Array, " batch"] | None = None) -> "ReplayBuffer":
        """Append a batch (leading axis = items); with more items than `capacity`, only the
        last `capacity` are kept. With `mask`, only the rows where it is nonzero go in (in
        order), e.g. the valid steps of fixed-length rollouts."""
        n = batch_size_of(batch)
        check.same_rows(
            "ReplayBuffer.insert: batch", batch, self.data, owner="the buffer", noun="items"
        )
        if mask is None:
            keep = jnp.ones(n, jnp.bool_)
        else:
            if mask.shape != (n,):
                raise ValueError(f"mask must have shape ({n},), got {mask.shape}")
            keep = mask != 0
        rank = jnp.cumsum(keep.astype(jnp.int32)) - 1  # position among the kept rows
        count = jnp.sum(keep.astype(jnp.int32))
        target = (self.position + rank) % self.capacity
        # Rows that a later kept row of the same batch would overwrite are dropped, so the
        # scatter never writes one slot twice (XLA leaves such writes unordered).
        target = jnp.where(keep & (rank >= count - self.capacity), target, self.capacity)
        return eqx.tree_at(
            lambda b: (b.data, b.position, b.size),
            self,
            (
                tree_scatter(self.data, target, batch),
                ((self.position + count) % self.capacity).astype(jnp.int32),
                jnp.minimum(self.size + count, self.capacity).astype(jnp.int32),
            ),
        )

    def sample(self, num: int, *, key: PRNGKey) -> PyTree:
        """`num` items drawn uniformly among those inserted. An empty buffer is a
        `ValueError` when concrete; inside a compiled program its rows are NaN
        (`internal.poison_if_empty`: no host callback, so the program stays cacheable)."""
        if check.is_concrete(self.size) and int(self.size) == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = jr.randint(key, (num,), 0, jnp.maximum(self.size, 1))
        return poison_if_empty(tree_take(self.data, idx), self.size == 0)
