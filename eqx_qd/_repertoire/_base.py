"""The repertoire contract: what every archive offers the MAP-Elites loop, the emitters, the
metrics, checkpoints and plots, and what one insertion reports per candidate."""

import abc
import enum
from typing import TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from .. import _validate as check
from .._custom_types import Descriptors, Extra, Fitnesses, Genotypes, PRNGKey
from .._misc import batch_size_of, poison_if_empty, tree_concatenate, tree_take, tree_zeros_batch
from .._selectors import AbstractSelector, UniformSelector


_Self = TypeVar("_Self", bound="AbstractRepertoire")


class AddStatus(enum.IntEnum):
    """What happened to one candidate offered to a repertoire's `add`. The codes 0, 1, 2
    are what `AddInfo.status` holds and what run files (the PGA-ME actors file) record."""

    NOT_ADDED = 0
    """Not inserted: a better elite or a better candidate of the same batch holds its cell, the
    candidate lost the survivor selection, or its fitness / descriptor was not finite."""
    IMPROVED = 1
    """Replaced a worse elite."""
    NEW = 2
    """Filled an empty cell, or joined a repertoire without cells."""


class AddInfo(eqx.Module):
    """Per-candidate outcome of an insertion (all arrays of shape `(batch,)`).

    **Fields:**

    - `cell`: where the candidate now is (its cell, or its slot in a repertoire without
      cells); for a candidate not stored, its cell in a tessellation and `-1` elsewhere; `-1`
      for a rejected candidate (a non-finite fitness or descriptor).
    - `status`: an `AddStatus` value (not added, improved, new).
    - `delta`: the candidate's fitness minus that of the elite it was judged against (the
      cell's elite; the nearest stored elite without cells), before the batch: `+inf` when
      there was none, NaN for a rejected candidate or where the repertoire has no such elite.
    - `threshold_status`: an `AddStatus` judged against the repertoire as it was before the
      batch, the batch's other candidates ignored: `NEW` / `IMPROVED` when the fitness passed
      the cell's threshold (the elite's fitness; an annealing repertoire's own threshold), else
      `NOT_ADDED`. pyribs' `status`: what the CMA rankers and the `filter` selection count.
      Repertoires without cells give `status`.
    - `value`: what the CMA rankers sort by (pyribs' `value`): the fitness minus the cell's
      threshold, an empty cell's threshold counting as 0 (plain repertoire, as CMA-ME) or
      `threshold_min` (annealing, as CMA-MAE); a DNS repertoire's competition fitness; an
      unstructured archive's pyribs value (see `UnstructuredRepertoire`). NaN for a rejected
      candidate.
    - `novelty`: the mean distance to the `k` nearest stored elites when the candidate was
      judged, or `None` where the repertoire computes none (what `NoveltyRanker` sorts by).
    - `local_competition`: how many of those neighbours the candidate beats, or `None`.
    - `density`: the density of the descriptor space where the candidate landed, estimated
      before the batch entered (`DensityRepertoire`), or `None` (what `DensityRanker` sorts
      by, lowest first).
    """

    cell: Int[Array, " batch"]
    status: Int[Array, " batch"]
    delta: Float[Array, " batch"]
    threshold_status: Int[Array, " batch"]
    value: Float[Array, " batch"]
    novelty: Float[Array, " batch"] | None = None
    local_competition: Int[Array, " batch"] | None = None
    density: Float[Array, " batch"] | None = None

    @property
    def inserted(self) -> Bool[Array, " batch"]:
        """Whether each candidate entered the repertoire."""
        return self.status != AddStatus.NOT_ADDED

    @property
    def novel(self) -> Bool[Array, " batch"]:
        """Whether each candidate filled an empty cell (joined a repertoire without cells)."""
        return self.status == AddStatus.NEW


class Elites(eqx.Module):
    """A batch of elites drawn from a repertoire (`AbstractRepertoire.select`).

    **Fields:** `genotypes` (leading axis `batch`), `fitnesses` `(batch,)`, `descriptors`
    `(batch, num_descriptors)`, `cells` (their cell or slot indices) and `extra` (what the
    repertoire stores beside each elite, e.g. its id; `None` if nothing).
    """

    genotypes: Genotypes
    fitnesses: Float[Array, " batch"]
    descriptors: Float[Array, "batch num_descriptors"]
    cells: Int[Array, " batch"]
    extra: Extra


def cell_winners(
    cells: Int[Array, " batch"], offered: Float[Array, " batch"], num_cells: int
) -> Bool[Array, " batch"]:
    """Which candidates hold, each in its cell, the batch's best `offered` value, the lowest
    batch index among ties (deterministic, order-free up to ties); a `-inf` offer never wins."""
    batch = offered.shape[0]
    best = jnp.full((num_cells,), -jnp.inf, jnp.float32).at[cells].max(offered)
    holds_best = jnp.isfinite(offered) & (offered == best[cells])
    rows = jnp.arange(batch, dtype=jnp.int32)
    first = jnp.where(holds_best, rows, batch)
    winner = jnp.full((num_cells,), batch, jnp.int32).at[cells].min(first)
    return winner[cells] == rows


def cell_info(
    valid: Bool[Array, " batch"],
    cells: Int[Array, " batch"],
    occupied: Bool[Array, " batch"],
    inserted: Bool[Array, " batch"],
    passes: Bool[Array, " batch"],
    delta: Float[Array, " batch"],
    value: Float[Array, " batch"],
) -> "AddInfo":
    """The `AddInfo` of an insertion into cells: each candidate's `cells`, its `status` from
    whether it was `inserted` and its `threshold_status` from whether it `passes` (`NEW` into
    a cell not `occupied` before the batch, else `IMPROVED`), its `delta` and `value`; a
    candidate not `valid` gets cell -1 and NaN for both."""

    def judged(hit):
        return jnp.where(
            hit, jnp.where(occupied, AddStatus.IMPROVED, AddStatus.NEW), AddStatus.NOT_ADDED
        ).astype(jnp.int32)

    return AddInfo(
        cell=jnp.where(valid, cells, -1).astype(jnp.int32),
        status=judged(inserted),
        delta=jnp.where(valid, delta, jnp.nan),
        threshold_status=judged(passes),
        value=jnp.where(valid, value, jnp.nan),
    )


def valid_candidates(fitnesses: Fitnesses, descriptors: Descriptors) -> Bool[Array, " batch"]:
    """Which candidates may be stored: finite fitness and every descriptor finite."""
    return jnp.isfinite(fitnesses) & jnp.all(jnp.isfinite(descriptors), axis=-1)


def empty_slots(
    owner: str, capacity: int, genotype: Genotypes, num_descriptors: int, extra: Extra
) -> dict:
    """The contract's four fields for `capacity` empty slots shaped like one unbatched
    `genotype` (and `extra`, or none), after checking both sizes (errors start with `owner`):
    what a repertoire without cells builds its `empty` from."""
    check.positive_int(f"{owner}: capacity", capacity)
    check.positive_int(f"{owner}: num_descriptors", num_descriptors)
    return dict(
        genotypes=tree_zeros_batch(genotype, capacity),
        fitnesses=jnp.full((capacity,), -jnp.inf, jnp.float32),
        descriptors=jnp.zeros((capacity, num_descriptors), jnp.float32),
        extra=None if extra is None else tree_zeros_batch(extra, capacity),
    )


def pooled_rows(stored: Genotypes, offered: Genotypes, idx: Int[Array, " n"]) -> Genotypes:
    """Rows `idx` of the stored rows followed by the offered ones (cast to the stored dtypes):
    how a repertoire that re-selects from stored + batch gathers its new slots."""
    offered = jax.tree.map(
        lambda x, v: v.astype(x.dtype) if eqx.is_array(x) else x, stored, offered
    )
    return tree_take(tree_concatenate([stored, offered]), idx)


class AbstractRepertoire(eqx.Module):
    """An archive of at most `capacity` elites, held in fixed-shape arrays (`jit`, `vmap`,
    `lax.scan` and checkpoints see one pytree whatever it holds).

    Slot `i` holds an elite when `fitnesses[i]` is finite; an empty slot's fitness is `-inf`.
    Implementations: `MAPElitesRepertoire` (one elite per cell of a grid or CVT),
    `DNSRepertoire` (Dominated Novelty Search's fixed-size population) and
    `UnstructuredRepertoire` (the unstructured novelty archive). The MAP-Elites loop, every
    emitter, the metrics, the jobs' checkpoints and the plots take any of them.

    To make a new one, subclass, declare the four fields, implement `add` and `emptied`, and
    mark the class `typing.final`. `add` must be pure, must never store a candidate whose
    fitness or descriptor is not finite, and must report every candidate in its `AddInfo`.

    **Fields:** `genotypes` (any pytree, leading axis `capacity`), `fitnesses`
    `(capacity,)` float32, `descriptors` `(capacity, num_descriptors)` float32, `extra`
    (per-slot data stored beside each elite, such as its id, or `None`).
    """

    genotypes: eqx.AbstractVar[Genotypes]
    fitnesses: eqx.AbstractVar[Float[Array, " capacity"]]
    descriptors: eqx.AbstractVar[Float[Array, "capacity num_descriptors"]]
    extra: eqx.AbstractVar[Extra]

    @abc.abstractmethod
    def add(
        self: _Self,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra = None,
    ) -> tuple[_Self, AddInfo]:
        """Offer a batch; returns the new repertoire and an `AddInfo` per candidate.

        **Arguments:**

        - `genotypes`: a pytree shaped like the stored genotypes, with a leading `batch` axis.
        - `descriptors`: `(batch, num_descriptors)`.
        - `fitnesses`: `(batch,)`.
        - `extra`: per-candidate data to store beside each elite (ids), exactly when the
          repertoire stores extra.
        """

    @abc.abstractmethod
    def emptied(self: _Self, genotype: Genotypes, extra: Extra = None) -> _Self:
        """An empty repertoire with this one's settings (capacity, cells, `k`, thresholds),
        whose slots are shaped like one unbatched `genotype` (and one unbatched `extra`, or
        none). `MAPElites.init` shapes the repertoire it is given after the initial
        population this way."""

    @property
    def capacity(self) -> int:
        """How many elites the repertoire can hold (its number of cells, for a tessellation)."""
        return self.fitnesses.shape[0]

    @property
    def num_descriptors(self) -> int:
        """The width of a descriptor."""
        return self.descriptors.shape[-1]

    @property
    def filled(self) -> Bool[Array, " capacity"]:
        """Which slots hold an elite."""
        return jnp.isfinite(self.fitnesses)

    @property
    def num_filled(self) -> Int[Array, ""]:
        """How many elites the repertoire holds."""
        return jnp.sum(self.filled, dtype=jnp.int32)

    @property
    @abc.abstractmethod
    def extent(self) -> tuple[Float[Array, " num_descriptors"], Float[Array, " num_descriptors"]]:
        """`(lower, upper)` bounds of the descriptor space, what the CMA emitters scale their
        random directions by: declared bounds (a tessellation's), or for a repertoire without
        any, `elites_box(self)`, the box around the stored elites' descriptors."""

    def select(
        self, num: int, *, selector: AbstractSelector = UniformSelector(), key: PRNGKey
    ) -> Elites:
        """Draw `num` elites (with replacement) with `selector` (uniform by default). A
        multi-objective repertoire's uniform draw is its own (`uniform_slots`)."""
        if isinstance(self, AbstractMultiObjectiveRepertoire) and type(selector) is UniformSelector:
            idx = self.uniform_slots(num, key=key)
            genotypes = tree_take(self.genotypes, idx)
        else:
            idx = selector.choose(self.fitnesses, self.descriptors, num, key=key)
            empty = ~jnp.any(jnp.isfinite(self.fitnesses))  # (raised above when concrete)
            genotypes = poison_if_empty(tree_take(self.genotypes, idx), empty)
        return Elites(
            genotypes=genotypes,
            fitnesses=self.fitnesses[idx],
            descriptors=self.descriptors[idx],
            cells=idx,
            extra=tree_take(self.extra, idx),
        )

    def check_candidates(
        self,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"] | Float[Array, "batch num_objectives"],
        *,
        where: str = "",
        batch_size: int | None = None,
    ) -> None:
        """Refuse a scored batch that does not fit this repertoire: `fitnesses` not
        `(batch,)` (`(batch_size,)` when given; an `AbstractMultiObjectiveRepertoire` takes
        its objective vectors `(batch, num_objectives)` too, and the emitters check their
        scalar view), `descriptors` not `(batch,
        num_descriptors)`, genotypes of another batch size or another structure or row shape
        than the stored ones. Each error starts with `where` and names the argument, the
        expected and the received shapes. Static facts: free under jit. `add` and the emitters'
        `init` / `state_update` call it."""
        prefix = f"{where}: " if where else ""
        if isinstance(self, AbstractMultiObjectiveRepertoire) and jnp.ndim(fitnesses) != 1:
            self.check_objectives(fitnesses, where=where)  # (the emitters give the scalar view)
            fitnesses = fitnesses[:, 0]
        if jnp.ndim(fitnesses) != 1:
            raise ValueError(f"{prefix}fitnesses must have shape (batch,), got {fitnesses.shape}")
        batch = fitnesses.shape[0]
        if batch_size is not None and batch != batch_size:
            raise ValueError(
                f"{prefix}fitnesses must have shape ({batch_size},) (the emitter's batch_size), "
                f"got {fitnesses.shape}"
            )
        d = self.num_descriptors
        if descriptors.shape != (batch, d):
            raise ValueError(
                f"{prefix}descriptors must have shape (batch, {d}) = ({batch}, {d}) for this "
                f"repertoire (batch from fitnesses), got {descriptors.shape}"
            )
        if batch_size_of(genotypes) != batch:
            raise ValueError(
                f"{prefix}genotypes have batch size {batch_size_of(genotypes)}, fitnesses have "
                f"{batch}"
            )
        check.same_rows(f"{prefix}genotypes", genotypes, self.genotypes, owner="the repertoire")

    def check_batch(self, genotypes, descriptors, fitnesses, extra) -> None:
        """`check_candidates` on `genotypes`, `descriptors` and `fitnesses`, and `extra`
        given exactly when the repertoire stores extra, with the batch's size and the stored
        rows' shapes: what every `add` checks first."""
        self.check_candidates(genotypes, descriptors, fitnesses)
        batch = fitnesses.shape[0]
        if (extra is None) != (self.extra is None):
            raise ValueError("extra must be given exactly when the repertoire stores extra")
        if extra is not None:
            if batch_size_of(extra) != batch:
                raise ValueError(
                    f"extra has batch size {batch_size_of(extra)}, fitnesses have {batch}"
                )
            check.same_rows("extra", extra, self.extra, owner="the repertoire")

    def check_layout(self) -> None:
        """Shape checks of the stored arrays against `capacity` (implementations call it from
        `__check_init__`)."""
        n = self.capacity
        if self.fitnesses.ndim != 1:
            raise ValueError(f"fitnesses must have shape (capacity,), got {self.fitnesses.shape}")
        if self.descriptors.ndim != 2 or self.descriptors.shape[0] != n:
            raise ValueError(
                f"descriptors must have shape ({n}, num_descriptors), got {self.descriptors.shape}"
            )
        if batch_size_of(self.genotypes) != n:
            raise ValueError(f"genotypes must have a leading axis of {n} slots")
        if self.extra is not None and batch_size_of(self.extra) != n:
            raise ValueError(f"extra must have a leading axis of {n} slots")


def elites_box(
    repertoire: AbstractRepertoire,
) -> tuple[Float[Array, " num_descriptors"], Float[Array, " num_descriptors"]]:
    """The box around `repertoire`'s stored elites' descriptors, `(lower, upper)`, with a side
    of 1 where it is flat or nothing is stored: the `extent` of a repertoire without declared
    bounds."""
    filled = repertoire.filled[:, None]
    lower = jnp.min(jnp.where(filled, repertoire.descriptors, jnp.inf), axis=0)
    upper = jnp.max(jnp.where(filled, repertoire.descriptors, -jnp.inf), axis=0)
    flat = ~(upper > lower)
    lower = jnp.where(flat, jnp.where(jnp.isfinite(lower), lower, 0.0), lower)
    return lower, jnp.where(flat, lower + 1.0, upper)


class AbstractCellRepertoire(AbstractRepertoire):
    """A repertoire whose elites live in cells, one per cell, with the cell of a descriptor
    known before any insertion (`cell_of`): MAP-Elites' grid and CVT archives. The laws that
    compare a batch's insertion cell by cell (`eqx_qd.testing.check_repertoire`: `reference`,
    `order`) run on these; a repertoire without cells (DNS, the novelty archive) is an
    `AbstractRepertoire`."""

    @abc.abstractmethod
    def cell_of(self, descriptors: Float[Array, "batch num_descriptors"]) -> Int[Array, " batch"]:
        """The cell index `(batch,)` of each descriptor `(batch, num_descriptors)`."""


class AbstractMultiObjectiveRepertoire(AbstractRepertoire):
    """A repertoire whose candidates are scored on several objectives, every one
    higher-is-better (`ParetoRepertoire`, `NSGA2Repertoire`, `SPEA2Repertoire`): `add` takes
    fitnesses of shape `(batch, num_objectives)`, `objectives` holds each slot's vector
    (`-inf` in an empty slot), and the contract's `fitnesses` are a scalar view, each
    solution's sum of objectives (what emitters built for one objective see). The uniform
    selector draws through `uniform_slots`, the repertoire's own uniform draw.

    To make one, subclass, declare the contract's fields and `objectives`, implement `add`,
    `emptied`, `extent` and `uniform_slots`, and mark the class `typing.final`.
    """

    objectives: eqx.AbstractVar[Float[Array, "capacity num_objectives"]]

    @property
    def num_objectives(self) -> int:
        """The length of an objective vector."""
        return self.objectives.shape[-1]

    @property
    def fitnesses(self) -> Float[Array, " capacity"]:
        """Every slot's sum of objectives (`-inf` in an empty slot): the scalar view."""
        filled = jnp.all(jnp.isfinite(self.objectives), axis=-1)
        total = jnp.sum(jnp.where(filled[:, None], self.objectives, 0.0), axis=-1)
        return jnp.where(filled, total, -jnp.inf)

    @abc.abstractmethod
    def uniform_slots(self, num: int, *, key: PRNGKey) -> Int[Array, " num"]:
        """`num` slots drawn with replacement, what `select` gives with the uniform
        selector."""

    def check_objectives(self, fitnesses, *, where: str = "") -> None:
        """Refuse `fitnesses` that are not objective vectors `(batch, num_objectives)` (what
        `add` takes), naming the objective count; errors start with `where`."""
        prefix = f"{where}: " if where else ""
        m = self.num_objectives
        if jnp.ndim(fitnesses) != 2 or jnp.shape(fitnesses)[1] != m:
            raise ValueError(
                f"{prefix}fitnesses must have shape (batch, {m}): this repertoire keeps "
                f"{m} objectives, got {jnp.shape(fitnesses)}"
            )
