"""A bandit over emitters: pyribs' `BanditScheduler` as an emitter (Sfikas et al., 2021's
multi-emitter MAP-Elites), for any emitters of the library or a user's."""

import typing
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, Int, ScalarLike

from .. import _validate as check
from .._custom_types import Extra, Genotypes, PRNGKey
from .._misc import f32
from .._repertoire import AbstractRepertoire, AddInfo
from .base import AbstractEmitter, AbstractRestartingEmitter, Lineage


RESELECT = ("terminated", "all")


class BanditEmitterState(eqx.Module):
    """The pool's states and the bandit's counts.

    **Fields:** `members`, each pool member's state (a tuple, in pool order); `active`
    `(pool,)`, which members emit this iteration; `successes` (candidates of each member that
    passed their cell's threshold, summed over its iterations) and `selections` (candidates it
    emitted), `(pool,)` float32; `seen_restarts`, each member's restart count when last looked
    at (`-1` for members that never restart).
    """

    members: tuple[Any, ...]
    active: Bool[Array, " pool"]
    successes: Float[Array, " pool"]
    selections: Float[Array, " pool"]
    seen_restarts: Int[Array, " pool"]


def ucb1_choice(
    active: Bool[Array, " pool"],
    reselect: Bool[Array, " pool"],
    successes: Float[Array, " pool"],
    selections: Float[Array, " pool"],
    num_active: int,
    zeta: ScalarLike,
) -> Bool[Array, " pool"]:
    """The members active next: `active` without `reselect`, then the free slots (up to
    `num_active`) filled with the inactive members of highest UCB1, `successes / selections +
    zeta * sqrt(log(total successes) / selections)` (members never selected first; ties to the
    higher index, numpy's `flip(argsort)`), as pyribs' `BanditScheduler.ask` does."""
    active = active & ~reselect
    chosen = jnp.where(selections > 0, selections, 1.0)
    total = jnp.maximum(jnp.sum(successes), 1.0)
    ucb = jnp.where(
        selections > 0, successes / chosen + zeta * jnp.sqrt(jnp.log(total) / chosen), jnp.inf
    )
    order = jnp.flip(jnp.argsort(ucb, stable=True))
    free = ~active[order]
    needed = num_active - jnp.sum(active, dtype=jnp.int32)
    take = free & (jnp.cumsum(free.astype(jnp.int32)) <= needed)
    return active.at[order].set(active[order] | take)


@typing.final
class BanditEmitter(AbstractRestartingEmitter[BanditEmitterState]):
    """`num_active` members of a pool of emitters emit each iteration, chosen by UCB1 on how
    many of their candidates passed their cell's threshold (pyribs' `BanditScheduler`).

    At the start the first `num_active` members are active. After each iteration a member is
    deactivated and its slot put up for choice when it restarted (`reselect="terminated"`;
    every iteration for a member that never restarts, `AbstractEmitter.restarts` `-1`) or
    always (`"all"`); free slots go to the inactive members of highest
    `successes / selections + zeta * sqrt(log(total successes) / selections)`, members never
    chosen first (pyribs takes the log of the successes, not of the selections, and so do we;
    with no success yet the log is taken of 1).

    Every member must have the same `batch_size`; the batch is the active members' batches in
    pool order. Inactive members neither emit (a `lax.cond`) nor learn.

    **Fields:** `pool`, the emitters; `num_active` (static); `reselect` (static); `zeta`, the
    exploration weight (float32 leaf); `batch_size`, `num_active` times a member's.
    """

    pool: tuple[AbstractEmitter, ...]
    zeta: Float[Array, ""] = eqx.field(converter=f32)
    num_active: int = eqx.field(static=True)
    reselect: str = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)

    def __init__(
        self,
        pool: Sequence[AbstractEmitter],
        num_active: int,
        *,
        reselect: str = "terminated",
        zeta: ScalarLike = 0.05,
    ):
        pool = tuple(pool)
        if not pool or not all(isinstance(e, AbstractEmitter) for e in pool):
            raise TypeError("BanditEmitter.pool must be a non-empty sequence of emitters")
        check.positive_int("BanditEmitter.num_active", num_active)
        if num_active > len(pool):
            raise ValueError(
                f"BanditEmitter.num_active is {num_active}, more than the pool's {len(pool)}"
            )
        sizes = sorted({e.batch_size for e in pool})
        if len(sizes) != 1:
            raise ValueError(
                f"BanditEmitter: the pool's emitters have batch sizes {sizes}; "
                "they must all be equal"
            )
        check.one_of("BanditEmitter.reselect", reselect, RESELECT)
        check.non_negative("BanditEmitter.zeta", zeta)
        self.pool = pool
        self.zeta = zeta
        self.num_active = num_active
        self.reselect = reselect
        self.batch_size = num_active * sizes[0]

    @property
    def member_batch(self) -> int:
        """Candidates per member and iteration."""
        return self.pool[0].batch_size

    def _restarts(self, members) -> Int[Array, " pool"]:
        """Each member's restarts; `-1` for a member that does not restart."""
        return jnp.stack(
            [
                jnp.asarray(e.restarts(s), jnp.int32)
                if isinstance(e, AbstractRestartingEmitter)
                else jnp.int32(-1)
                for e, s in zip(self.pool, members)
            ]
        )

    def init(
        self,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        key: PRNGKey,
    ) -> BanditEmitterState:
        keys = jr.split(key, len(self.pool))
        members = tuple(
            e.init(repertoire, genotypes, descriptors, fitnesses, extra, key=k)
            for e, k in zip(self.pool, keys)
        )
        n = len(self.pool)
        zeros = jnp.zeros((n,), jnp.float32)
        return BanditEmitterState(
            members, jnp.arange(n) < self.num_active, zeros, zeros, self._restarts(members)
        )

    def _slots(self, active: Bool[Array, " pool"]) -> Int[Array, " pool"]:
        """Each active member's slot in the batch (pool order)."""
        return jnp.cumsum(active.astype(jnp.int32)) - 1

    def emit(
        self, repertoire: AbstractRepertoire, state: BanditEmitterState, *, key: PRNGKey
    ) -> tuple[Genotypes, Extra]:
        keys = jr.split(key, len(self.pool))
        slots = self._slots(state.active)
        batch, lineage = None, None
        for i, (e, s, k) in enumerate(zip(self.pool, state.members, keys)):
            shape = jax.eval_shape(lambda e=e, s=s, k=k: e.emit(repertoire, s, key=k))

            def emitted(e=e, s=s, k=k):
                return e.emit(repertoire, s, key=k)

            def silent(shape=shape):
                return jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shape)

            out = jax.lax.cond(state.active[i], emitted, silent)
            genotypes, extra = out
            if batch is None:
                batch = jax.tree.map(
                    lambda x: jnp.zeros((self.num_active,) + x.shape, x.dtype), genotypes
                )
                if isinstance(extra, Lineage):
                    lineage = jax.tree.map(
                        lambda x: jnp.zeros((self.num_active,) + x.shape, x.dtype), extra
                    )
            # An inactive member writes to slot `num_active`: out of range, dropped.
            slot = jnp.where(state.active[i], slots[i], self.num_active)
            batch = jax.tree.map(lambda b, x: b.at[slot].set(x, mode="drop"), batch, genotypes)
            if lineage is not None and isinstance(extra, Lineage):
                lineage = jax.tree.map(lambda b, x: b.at[slot].set(x, mode="drop"), lineage, extra)
        flat = jax.tree.map(lambda x: x.reshape((self.batch_size,) + x.shape[2:]), batch)
        if lineage is not None:
            lineage = jax.tree.map(lambda x: x.reshape((self.batch_size,) + x.shape[2:]), lineage)
        return flat, lineage

    def state_update(
        self,
        state: BanditEmitterState,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        add_info: AddInfo,
        key: PRNGKey,
    ) -> BanditEmitterState:
        repertoire.check_candidates(
            genotypes,
            descriptors,
            fitnesses,
            where="BanditEmitter.state_update",
            batch_size=self.batch_size,
        )
        b = self.member_batch
        slots = self._slots(state.active)
        keys = jr.split(key, len(self.pool))
        members, successes = [], []
        for i, (e, s, k) in enumerate(zip(self.pool, state.members, keys)):
            start = jnp.clip(slots[i], 0, self.num_active - 1) * b

            def part(x, start=start):
                return jax.lax.dynamic_slice_in_dim(x, start, b)

            mine = jax.tree.map(part, (genotypes, descriptors, fitnesses, extra, add_info))

            def learn(e=e, s=s, k=k, mine=mine):
                g, d, f, x, info = mine
                return e.state_update(s, repertoire, g, d, f, x, add_info=info, key=k)

            members.append(jax.lax.cond(state.active[i], learn, lambda s=s: s))
            passed = jnp.sum(mine[4].threshold_status != 0).astype(jnp.float32)
            successes.append(jnp.where(state.active[i], passed, 0.0))
        members = tuple(members)
        selections = state.selections + jnp.where(state.active, float(b), 0.0)
        successes = state.successes + jnp.stack(successes)
        restarts = self._restarts(members)
        if self.reselect == "terminated":
            reselect = (restarts > state.seen_restarts) | (restarts < 0)
        else:
            reselect = state.active
        active = ucb1_choice(
            state.active, reselect, successes, selections, self.num_active, self.zeta
        )
        return BanditEmitterState(members, active, successes, selections, restarts)

    def restarts(self, state: BanditEmitterState) -> Int[Array, ""]:
        """Restarts summed over the pool's members that restart."""
        return jnp.sum(jnp.maximum(self._restarts(state.members), 0))
