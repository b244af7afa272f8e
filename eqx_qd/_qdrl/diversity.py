"""QDPG's diversity reward (Pierrot et al. 2022, as QDax 0.5's `DiversityPGEmitter` defines
it): an archive of the state descriptors the evaluated episodes visited, and each
transition's reward relabelled as the novelty of its state descriptor against that archive.

The archive keeps a state descriptor only if it lies farther than `acceptance_threshold` from
every descriptor stored before the batch and from every descriptor of the same batch kept
before it (the batch is read in order); once full it overwrites the oldest (first in, first
out). The reward of a state descriptor `s` is `scaling * mean(|s - a_i|^2)` over its `k`
nearest stored descriptors `a_i`.
"""

import typing

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, ScalarLike

from .. import _validate as check
from .._knn import k_nearest, mean_of_finite, squared_distances
from .._misc import f32
from ..envs._rollout import QDTransition, Transition
from ..rl._buffers import ReplayBuffer


# Kept descriptors of one batch compared at once, in the batch's sequential pass.
_KEPT_BLOCK = 256


@typing.final
class StateArchive(eqx.Module):
    """The archive of state descriptors QDPG's diversity reward is measured against: a ring of
    `capacity` rows (QDax's `Archive`).

    **Fields:** `rows` (a `ReplayBuffer` of descriptors: `rows.data` is `(capacity, dim)`,
    its first `rows.size` rows stored) and `acceptance_threshold` (float32 leaf, > 0). Build one
    with `StateArchive.empty`.
    """

    rows: ReplayBuffer
    acceptance_threshold: Float[Array, ""] = eqx.field(converter=f32)

    def __check_init__(self):
        if check.is_concrete(self.acceptance_threshold):
            check.positive("StateArchive.acceptance_threshold", self.acceptance_threshold)

    @classmethod
    def empty(cls, capacity: int, dim: int, acceptance_threshold: ScalarLike) -> "StateArchive":
        """An empty archive of `capacity` descriptors of width `dim`."""
        check.positive_int("StateArchive.empty: capacity", capacity)
        check.positive_int("StateArchive.empty: dim", dim)
        return cls(
            ReplayBuffer.empty(capacity, jnp.zeros((dim,), jnp.float32)), acceptance_threshold
        )

    @property
    def capacity(self) -> int:
        return self.rows.capacity

    @property
    def dim(self) -> int:
        return self.rows.data.shape[-1]

    @property
    def stored(self) -> Float[Array, "count dim"]:
        """The stored descriptors (concrete archives only: the count is a shape)."""
        return self.rows.data[: int(self.rows.size)]

    def insert(
        self, descriptors: Float[Array, "n dim"], mask: Float[Array, " n"] | None = None
    ) -> "StateArchive":
        """Keep the rows of `descriptors` (where `mask` is nonzero, if given; non-finite rows
        never) that lie farther than the threshold from every stored descriptor and from every
        row of this batch kept before them, in order.

        The same rows as QDax's `Archive.insert` (a scan over the whole batch, each row
        against all the batch's rows); here only the rows far from the stored archive are
        visited, each against the rows kept so far, in blocks."""
        n = descriptors.shape[0]
        if descriptors.ndim != 2 or descriptors.shape[1] != self.dim:
            raise ValueError(
                f"StateArchive.insert: descriptors must be (n, {self.dim}), got {descriptors.shape}"
            )
        if mask is not None and mask.shape != (n,):
            raise ValueError(f"StateArchive.insert: mask must be ({n},), got {mask.shape}")
        x = descriptors.astype(jnp.float32)
        ok = jnp.all(jnp.isfinite(x), axis=-1)
        if mask is not None:
            ok = ok & (mask != 0)
        x = jnp.where(ok[:, None], x, 0.0)
        thr = self.acceptance_threshold
        stored = _stored(self)
        nearest = k_nearest(x, self.rows.data, lambda r: stored[None, :], 1)[:, 0]
        candidate = ok & (nearest > thr)
        order = jnp.nonzero(candidate, size=n, fill_value=0)[0].astype(jnp.int32)
        count = jnp.sum(candidate, dtype=jnp.int32)
        blocks = -(-n // _KEPT_BLOCK) * _KEPT_BLOCK

        def visit(i, carry):
            kept_rows, num_kept, keep = carry
            row = x[order[i]]

            def close_in(j):
                block = jax.lax.dynamic_slice_in_dim(kept_rows, j * _KEPT_BLOCK, _KEPT_BLOCK)
                used = j * _KEPT_BLOCK + jnp.arange(_KEPT_BLOCK) < num_kept
                sq = squared_distances(row[None, :], block)[0]
                return jnp.any(used & (sq <= thr * thr))

            def scan_blocks(state):
                j, close = state
                return j + 1, close | close_in(j)

            def more(state):
                j, close = state
                return ~close & (j * _KEPT_BLOCK < num_kept)

            _, close = jax.lax.while_loop(more, scan_blocks, (jnp.int32(0), jnp.bool_(False)))
            slot = jnp.where(close, blocks, num_kept)
            kept_rows = kept_rows.at[slot].set(row, mode="drop")
            keep = keep.at[order[i]].set(~close)
            return kept_rows, num_kept + (~close).astype(jnp.int32), keep

        start = (jnp.zeros((blocks, self.dim), jnp.float32), jnp.int32(0), jnp.zeros(n, bool))
        _, _, keep = jax.lax.fori_loop(0, count, visit, start)
        return eqx.tree_at(
            lambda a: a.rows, self, self.rows.insert(x, mask=keep.astype(jnp.float32))
        )


def _stored(archive: StateArchive) -> Array:
    """Which rows hold a descriptor. Behind an optimisation barrier: an archive made inside a
    compiled program is a constant, and XLA would otherwise fold the distances to its
    (constant, empty) rows for many seconds at compile time."""
    size = jax.lax.optimization_barrier(archive.rows.size)
    return jnp.arange(archive.capacity) < size


def _squared_to_nearest(
    archive: StateArchive, descriptors: Float[Array, "n dim"], k: int
) -> Float[Array, "n k"]:
    stored = _stored(archive)
    near = k_nearest(
        descriptors.astype(jnp.float32), archive.rows.data, lambda r: stored[None, :], k
    )
    return jnp.square(near)


@typing.final
class DiversityReward(eqx.Module):
    """QDPG's diversity reward and its archive's settings (QDax's `score_euclidean_novelty`
    and `DiversityPGConfig`'s archive).

    A transition's reward becomes `scaling * mean(|s - a_i|^2)` over the `k` nearest stored
    state descriptors `a_i` of its state descriptor `s` (the one before the step, as QDax reads
    `transitions.state_desc`). While fewer than `k` are stored the mean is over those stored,
    and 0 with none: QDax counts the missing neighbours at the largest float's distance, which
    makes every reward about 1e37 until `k` descriptors are stored, and for ever on a task whose
    state descriptors take fewer than `k` values far apart (two binary feet contacts take
    four).

    **Fields:** `k` (static), `scaling`, `acceptance_threshold` (float32 leaves) and
    `archive_size` (static: the archive's capacity).
    """

    k: int = eqx.field(static=True)
    scaling: Float[Array, ""] = eqx.field(converter=f32)
    acceptance_threshold: Float[Array, ""] = eqx.field(converter=f32)
    archive_size: int = eqx.field(static=True)

    def __check_init__(self):
        check.positive_int("DiversityReward.k", self.k)
        check.positive_int("DiversityReward.archive_size", self.archive_size)
        if check.is_concrete(self.scaling):
            check.finite("DiversityReward.scaling", self.scaling)
        if check.is_concrete(self.acceptance_threshold):
            check.positive("DiversityReward.acceptance_threshold", self.acceptance_threshold)

    def empty_archive(self, dim: int) -> StateArchive:
        """An empty archive for state descriptors of width `dim`."""
        return StateArchive.empty(self.archive_size, dim, self.acceptance_threshold)

    def __call__(
        self, archive: StateArchive, descriptors: Float[Array, "n dim"]
    ) -> Float[Array, " n"]:
        """The reward of each row of `descriptors` against `archive`."""
        mean, _ = mean_of_finite(_squared_to_nearest(archive, descriptors, self.k))
        return self.scaling * mean

    def relabel(self, archive: StateArchive, rows: QDTransition) -> Transition:
        """Replay `rows` as the transitions the diversity critic learns from: their rewards
        replaced by the reward of their `state_desc` against `archive`."""
        return Transition(
            rows.obs,
            rows.action,
            self(archive, rows.state_desc),
            rows.next_obs,
            rows.terminated,
            rows.truncated,
        )
