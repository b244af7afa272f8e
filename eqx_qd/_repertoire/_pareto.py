"""The multi-objective archive of MOME (Pierrot, Richard, Beguir, Cully, GECCO 2022): in each
cell of a tessellation, a bounded Pareto front of the solutions that landed there."""

import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, Int

from .. import _validate as check
from .._custom_types import Extra, Genotypes, PRNGKey
from .._misc import tree_zeros_batch
from .._pareto import dominates, front_crowding
from .._selectors import crowding_distance
from .._tessellation import AbstractTessellation
from ._base import AbstractMultiObjectiveRepertoire, AddInfo, AddStatus


def _flat(x: Array) -> Array:
    return x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:])


def _rank_in_group(groups: Int[Array, " n"]) -> Int[Array, " n"]:
    """Each element's index within its run of equal values, in `groups` sorted."""
    index = jnp.arange(groups.shape[0], dtype=jnp.int32)
    starts = jnp.where(groups != jnp.roll(groups, 1), index, 0).at[0].set(0)
    return index - jax.lax.cummax(starts)


@typing.final
class ParetoRepertoire(AbstractMultiObjectiveRepertoire):
    """MOME's archive: each cell of `tessellation` keeps a Pareto front of at most
    `front_length` solutions, every objective higher-is-better.

    A candidate enters its cell's front when no stored member of the cell and no candidate of
    the same batch in that cell dominates it; the members it dominates leave. When the front
    cannot hold every such candidate, the members stay, and the places left go first to the
    candidates that dominate a member (each frees the place it takes), then to the others,
    each group in batch order; a member leaves only for a candidate that enters, so nothing is
    ever dominated away by a solution the archive does not keep. With room for all, this is
    the non-dominated set of members and batch; when a front is full it can differ from
    QDax's, which inserts the batch one candidate at a time. Equal objective vectors dominate
    neither way and are all kept, as in QDax.

    The contract's slots are the fronts' positions, flattened (`capacity = num_cells *
    front_length`, slot `cell * front_length + position`): `genotypes`, `descriptors` and
    `fitnesses`, the sum of each solution's objectives (QDax's "sum of scores"; `-inf` in an
    empty slot), the scalar that emitters and rankers built for one objective see.
    `objectives` holds the vectors.

    With `crowding` (MOME-PGX, Janmohamed, Pierrot and Cully, GECCO 2023), a front that
    cannot hold the non-dominated set of its members and candidates keeps the `front_length`
    of them with the largest crowding distance (NSGA-II's, within the cell; a front's ends on
    any objective are always kept), so a non-dominated member can be crowded out; and
    parents are drawn from a cell's front in proportion to their crowding distance (a front's
    end counts twice its one neighbour's gap; fronts of one or two solutions are drawn from
    uniformly). The paper's code inserts one candidate at a time; this inserts the batch at
    once (the same fronts when no front overflows).

    **Fields:** `front_genotypes` (leading axes `(num_cells, front_length)`),
    `front_objectives` `(num_cells, front_length, num_objectives)` (`-inf` in an empty slot),
    `front_descriptors` `(num_cells, front_length, num_descriptors)`, `tessellation`, `extra`
    (always `None`). Build one with `ParetoRepertoire.empty`.
    """

    front_genotypes: Genotypes
    front_objectives: Float[Array, "num_cells front_length num_objectives"]
    front_descriptors: Float[Array, "num_cells front_length num_descriptors"]
    tessellation: AbstractTessellation
    extra: None = None
    crowding: bool = eqx.field(default=False, static=True)

    def __check_init__(self):
        n, d = self.tessellation.num_cells, self.tessellation.num_descriptors
        shape = self.front_objectives.shape
        if len(shape) != 3 or shape[0] != n:
            raise ValueError(
                f"ParetoRepertoire: front_objectives must have shape ({n}, front_length, "
                f"num_objectives) for its tessellation, got {shape}"
            )
        length = shape[1]
        if self.front_descriptors.shape != (n, length, d):
            raise ValueError(
                f"ParetoRepertoire: front_descriptors must have shape ({n}, {length}, {d}), "
                f"got {self.front_descriptors.shape}"
            )
        for leaf in jax.tree.leaves(eqx.filter(self.front_genotypes, eqx.is_array)):
            if jnp.shape(leaf)[:2] != (n, length):
                raise ValueError(
                    f"ParetoRepertoire: front_genotypes must have leading axes ({n}, "
                    f"{length}), got {jnp.shape(leaf)}"
                )
        if self.extra is not None:
            raise ValueError("ParetoRepertoire stores no extra (no lineage)")
        if not isinstance(self.crowding, bool):
            raise TypeError(f"ParetoRepertoire.crowding must be a bool, got {self.crowding!r}")

    @classmethod
    def empty(
        cls,
        tessellation: AbstractTessellation,
        genotype: Genotypes,
        num_objectives: int,
        front_length: int = 50,
        *,
        crowding: bool = False,
    ) -> "ParetoRepertoire":
        """An empty archive over `tessellation` whose fronts hold up to `front_length`
        solutions of `num_objectives` objectives, its slots holding zeros shaped like one
        unbatched `genotype`; `crowding` for MOME-PGX's rules (see the class). QDax's
        `pareto_front_max_length` is `front_length`."""
        check.integer("ParetoRepertoire.empty: num_objectives", num_objectives, minimum=2)
        check.positive_int("ParetoRepertoire.empty: front_length", front_length)
        n = tessellation.num_cells
        return cls(
            front_genotypes=tree_zeros_batch(tree_zeros_batch(genotype, front_length), n),
            front_objectives=jnp.full((n, front_length, num_objectives), -jnp.inf, jnp.float32),
            front_descriptors=jnp.zeros(
                (n, front_length, tessellation.num_descriptors), jnp.float32
            ),
            tessellation=tessellation,
            crowding=crowding,
        )

    def emptied(self, genotype: Genotypes, extra: Extra = None) -> "ParetoRepertoire":
        """An empty archive with the same cells, front length and objective count (`extra`
        must be `None`)."""
        if extra is not None:
            raise ValueError("ParetoRepertoire stores no extra (no lineage)")
        return ParetoRepertoire.empty(
            self.tessellation,
            genotype,
            self.num_objectives,
            self.front_length,
            crowding=self.crowding,
        )

    @property
    def num_cells(self) -> int:
        """The number of cells of the tessellation."""
        return self.tessellation.num_cells

    @property
    def front_length(self) -> int:
        """How many solutions a cell's front holds at most."""
        return self.front_objectives.shape[1]

    @property
    def front_filled(self) -> Bool[Array, "num_cells front_length"]:
        """Which positions of each cell's front hold a solution."""
        return jnp.all(jnp.isfinite(self.front_objectives), axis=-1)

    @property
    def occupied(self) -> Bool[Array, " num_cells"]:
        """Which cells hold a front (at least one solution)."""
        return jnp.any(self.front_filled, axis=-1)

    @property
    def genotypes(self) -> Genotypes:
        """Every slot's genotype, leading axis `capacity`."""
        return jax.tree.map(lambda x: _flat(x) if eqx.is_array(x) else x, self.front_genotypes)

    @property
    def objectives(self) -> Float[Array, "capacity num_objectives"]:
        """Every slot's objective vector (`-inf` in an empty slot)."""
        return _flat(self.front_objectives)

    @property
    def descriptors(self) -> Float[Array, "capacity num_descriptors"]:
        """Every slot's descriptor."""
        return _flat(self.front_descriptors)

    @property
    def extent(self) -> tuple[Float[Array, " num_descriptors"], Float[Array, " num_descriptors"]]:
        """The tessellation's bounds."""
        return self.tessellation.extent

    def cell_of(self, descriptors: Float[Array, "batch num_descriptors"]) -> Int[Array, " batch"]:
        """The cell index of each descriptor."""
        return self.tessellation.index(descriptors)

    def uniform_slots(self, num: int, *, key: PRNGKey) -> Int[Array, " num"]:
        """MOME's draw, what `select` does with the uniform selector (the default): a cell
        uniformly among those holding a front, then a member of its front uniformly, or in
        proportion to its crowding distance with `crowding` (any other selector chooses among
        the slots by their scalar view). An empty archive gives empty slots."""
        cell_key, member_key = jr.split(key)
        occupied = self.occupied
        cell_logits = jnp.where(occupied, 0.0, -jnp.inf)
        cell_logits = jnp.where(jnp.any(occupied), cell_logits, 0.0)
        cells = jr.categorical(cell_key, cell_logits, shape=(num,))
        filled = self.front_filled[cells]
        member_logits = jnp.where(filled, 0.0, -jnp.inf)
        if self.crowding:
            weights = jax.vmap(front_crowding)(self.front_objectives[cells], filled)
            member_logits = jnp.where(filled & (weights > 0), jnp.log(weights), -jnp.inf)
            # a front of equal solutions (no positive weight) is drawn from uniformly
            member_logits = jnp.where(
                jnp.any(filled & (weights > 0), axis=-1, keepdims=True),
                member_logits,
                jnp.where(filled, 0.0, -jnp.inf),
            )
        member_logits = jnp.where(jnp.any(filled, axis=-1, keepdims=True), member_logits, 0.0)
        members = jr.categorical(member_key, member_logits, axis=-1)
        return (cells * self.front_length + members).astype(jnp.int32)

    def _members_beaten(self, cells, beats):
        """`(num_cells, front_length)`: the members some candidate dominates, `beats[i, j]`
        saying candidate `i` dominates member `j` of its cell `cells[i]`."""
        shape = (self.num_cells, self.front_length)
        return jnp.zeros(shape, jnp.int32).at[cells].max(beats.astype(jnp.int32)).astype(bool)

    def _in_order(self, cells, same, survives, beats_member, rows):
        """MOME's rule for the batch (see the class): which candidates enter, which members
        stay, and each one's position in its cell's new front."""
        batch, length = rows.shape[0], self.front_length
        # A full front admits, among the non-dominated candidates of its cell, first those
        # that dominate a member (they free their place), then the others, each group in
        # batch order; a member leaves only for a candidate that enters. Which candidates
        # enter and which members leave depend on each other: start from every survivor
        # entering and shrink to the fixed point (a few rounds; each only drops candidates).
        frees = jnp.any(beats_member, axis=-1)
        order = jnp.where(frees, rows, rows + batch)
        ahead = same & survives[None, :] & (order[None, :] < order[:, None])
        ahead_count = jnp.sum(ahead, axis=-1, dtype=jnp.int32)

        def admitted(entering):
            kept = self.front_filled & ~self._members_beaten(
                cells, beats_member & entering[:, None]
            )
            position = jnp.sum(kept, axis=-1, dtype=jnp.int32)[cells] + ahead_count
            return survives & (position < length), kept, position

        def changing(carry):
            entering, previous = carry
            return jnp.any(entering != previous)

        def shrink(carry):
            entering, _ = carry
            return admitted(entering)[0], entering

        start = (admitted(survives)[0], survives)
        stored_new, _ = jax.lax.while_loop(changing, shrink, start)
        _, kept, position = admitted(stored_new)
        member_position = jnp.cumsum(kept, axis=-1, dtype=jnp.int32) - 1

        return stored_new, kept, position, member_position

    def _crowded(self, fitnesses, cells, survives, beats_member):
        """MOME-PGX's rule for the batch (see the class), in the same terms as `_in_order`."""
        length, num_cells = self.front_length, self.num_cells
        # Members no candidate of their cell dominates (a dominated candidate's dominator
        # dominates them too), and the surviving candidates: each cell's non-dominated set.
        member_in = self.front_filled & ~self._members_beaten(cells, beats_member)
        objectives = jnp.concatenate([self.objectives, fitnesses])
        group = jnp.concatenate([jnp.repeat(jnp.arange(num_cells), length), cells])
        inside = jnp.concatenate([member_in.reshape(-1), survives])
        group = jnp.where(inside, group, num_cells)  # everything else in a group of its own
        finite = jnp.where(inside[:, None], objectives, 0.0)
        crowd = crowding_distance(finite, group)
        n = group.shape[0]
        order = jnp.arange(n)
        # Within a cell, the largest crowding first (members before candidates, then in order,
        # among equals): the first `length` stay.
        by_crowd = jnp.lexsort((order, -crowd, group))
        rank = jnp.zeros((n,), jnp.int32).at[by_crowd].set(_rank_in_group(group[by_crowd]))
        stays = inside & (rank < length)
        # Their places: members first in their old order, then candidates in batch order.
        by_row = jnp.lexsort((order, jnp.where(stays, group, num_cells)))
        slot = (
            jnp.zeros((n,), jnp.int32)
            .at[by_row]
            .set(_rank_in_group(jnp.where(stays, group, num_cells)[by_row]))
        )
        kept = stays[: num_cells * length].reshape(num_cells, length)
        member_position = slot[: num_cells * length].reshape(num_cells, length)
        stored_new = stays[num_cells * length :]
        position = slot[num_cells * length :]
        return stored_new, kept, position, member_position

    def add(
        self,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, "batch num_objectives"],
        extra: Extra = None,
    ) -> tuple["ParetoRepertoire", AddInfo]:
        """Insert a scored batch (see the class); a candidate with a non-finite objective or
        descriptor is never stored.

        **Arguments:** `genotypes` (leading axis `batch`), `descriptors` `(batch,
        num_descriptors)`, `fitnesses` `(batch, num_objectives)`, `extra` (must be `None`).

        **Returns:** the new archive and an `AddInfo`: `status` `NEW` for a candidate that
        founded its cell's front, `IMPROVED` for one that joined a front, `threshold_status`
        whether it passed the front as it was before the batch (nothing there dominated it,
        and the front had room or it dominated a member), `delta` its sum of objectives minus
        the best sum in its cell before the batch (`+inf` in an empty cell) and `value` that
        gain with an empty cell counting 0.
        """
        if extra is not None:
            raise ValueError("ParetoRepertoire stores no extra (no lineage)")
        self.check_objectives(fitnesses, where="ParetoRepertoire.add")
        self.check_candidates(genotypes, descriptors, fitnesses, where="ParetoRepertoire.add")
        fitnesses = fitnesses.astype(jnp.float32)
        batch, length, num_cells = fitnesses.shape[0], self.front_length, self.num_cells
        valid = jnp.all(jnp.isfinite(fitnesses), axis=-1) & jnp.all(
            jnp.isfinite(descriptors), axis=-1
        )
        cells = jnp.where(valid, self.cell_of(descriptors), 0).astype(jnp.int32)
        stored = self.front_objectives[cells]  # (batch, length, m)
        filled = self.front_filled[cells]
        beats_member = valid[:, None] & filled & dominates(fitnesses[:, None, :], stored)
        beaten_by_member = jnp.any(filled & dominates(stored, fitnesses[:, None, :]), axis=-1)
        same = valid[:, None] & valid[None, :] & (cells[:, None] == cells[None, :])
        beaten_in_batch = jnp.any(
            same & dominates(fitnesses[None, :, :], fitnesses[:, None, :]), axis=-1
        )
        survives = valid & ~beaten_by_member & ~beaten_in_batch
        rows = jnp.arange(batch)
        if self.crowding:
            stored_new, kept, position, member_position = self._crowded(
                fitnesses, cells, survives, beats_member
            )
        else:
            stored_new, kept, position, member_position = self._in_order(
                cells, same, survives, beats_member, rows
            )

        # Survivors move to the front of their cell, in order; then the stored candidates.
        member_cell = jnp.where(kept, jnp.arange(num_cells)[:, None], num_cells)
        member_slot = jnp.where(kept, member_position, 0)
        new_cell = jnp.where(stored_new, cells, num_cells)
        new_slot = jnp.where(stored_new, position, 0)

        def place(old, offered, fill):
            base = jnp.full_like(old, fill)
            base = base.at[member_cell, member_slot].set(old, mode="drop")
            return base.at[new_cell, new_slot].set(offered.astype(old.dtype), mode="drop")

        front_genotypes = jax.tree.map(
            lambda old, new: place(old, new, 0) if eqx.is_array(old) else old,
            self.front_genotypes,
            genotypes,
        )
        front_objectives = place(self.front_objectives, fitnesses, -jnp.inf)
        front_descriptors = place(self.front_descriptors, descriptors, 0.0)
        new = ParetoRepertoire(
            front_genotypes,
            front_objectives,
            front_descriptors,
            self.tessellation,
            crowding=self.crowding,
        )

        occupied = jnp.any(filled, axis=-1)
        room = jnp.sum(filled, axis=-1) < length
        passes = valid & ~beaten_by_member & (room | jnp.any(beats_member, axis=-1))
        total = jnp.sum(jnp.where(valid[:, None], fitnesses, 0.0), axis=-1)
        sums = jnp.sum(jnp.where(filled[..., None], stored, 0.0), axis=-1)
        best = jnp.max(jnp.where(filled, sums, -jnp.inf), axis=-1)

        def judged(hit: Bool[Array, " batch"]) -> Int[Array, " batch"]:
            status = jnp.where(occupied, AddStatus.IMPROVED, AddStatus.NEW)
            return jnp.where(hit, status, AddStatus.NOT_ADDED).astype(jnp.int32)

        info = AddInfo(
            cell=jnp.where(valid, cells, -1).astype(jnp.int32),
            status=judged(stored_new),
            delta=jnp.where(valid, jnp.where(occupied, total - best, jnp.inf), jnp.nan),
            threshold_status=judged(passes),
            value=jnp.where(valid, total - jnp.where(occupied, best, 0.0), jnp.nan),
        )
        return new, info
