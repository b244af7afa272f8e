"""Repertoires that guide the search with a model of the descriptor space while an elitist
archive keeps the results: Density Descent Search's density archive (here) and Discount Model
Search's discount archive (`_discount.py`).

Both are pyribs' pairs of an archive that stores no elites and a `result_archive` the emitters
restart from (`pass_result_archive_to_emitters`), as one repertoire: the elites, the metrics,
the plots and the emitters' restarts read the result archive (`result`); the rankers read what
the model says of each candidate in `AddInfo`.
"""

import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, ScalarLike

from .. import _validate as check
from .._custom_types import Extra, Genotypes, PRNGKey
from .._knn import squared_distances
from .._misc import f32, i32
from .._tessellation import AbstractTessellation
from ._base import AbstractCellRepertoire, AddInfo, AddStatus, valid_candidates
from ._tessellated import MAPElitesRepertoire


class AbstractGuidedRepertoire(AbstractCellRepertoire):
    """A repertoire whose elites are those of an elitist `MAPElitesRepertoire`, `result`,
    beside a model of the descriptor space that judges each candidate for the rankers. The
    contract's fields (`genotypes`, `fitnesses`, `descriptors`, `extra`), `cell_of` and
    `extent` are the result archive's."""

    result: eqx.AbstractVar[MAPElitesRepertoire]

    @property
    def genotypes(self) -> Genotypes:
        return self.result.genotypes

    @property
    def fitnesses(self) -> Float[Array, " num_cells"]:
        return self.result.fitnesses

    @property
    def descriptors(self) -> Float[Array, "num_cells num_descriptors"]:
        return self.result.descriptors

    @property
    def extra(self) -> Extra:
        return self.result.extra

    @property
    def centroids(self) -> Float[Array, "num_cells num_descriptors"]:
        """The cells' centroids."""
        return self.result.centroids

    @property
    def tessellation(self) -> AbstractTessellation:
        """The result archive's cells."""
        return self.result.tessellation

    @property
    def extent(self) -> tuple[Float[Array, " num_descriptors"], Float[Array, " num_descriptors"]]:
        """The tessellation's bounds."""
        return self.result.extent

    def cell_of(self, descriptors: Float[Array, "batch num_descriptors"]) -> Int[Array, " batch"]:
        """The result archive's cell of each descriptor."""
        return self.result.cell_of(descriptors)


def _elitist(tessellation: AbstractTessellation, genotype: Genotypes, extra: Extra, owner: str):
    if not isinstance(tessellation, AbstractTessellation):
        raise TypeError(
            f"{owner}: tessellation must be an eqx_qd.AbstractTessellation (the result "
            f"archive's cells), got {type(tessellation).__name__}"
        )
    return MAPElitesRepertoire.empty(tessellation, genotype, extra)


def kde_density(
    points: Float[Array, "n d"],
    buffer: Float[Array, "capacity d"],
    count: ScalarLike,
    bandwidth: ScalarLike,
) -> Float[Array, " n"]:
    """The Gaussian kernel density estimate at `points` from the first `count` rows of
    `buffer`, as pyribs' DensityArchive computes it with kernel width `bandwidth` (`h`):
    `sum_j phi(|p - b_j| / h) / (count h)` with `phi` the standard normal density (divided by
    `h`, not `h**d`: pyribs' scale, which only the rankings read). Zero while the buffer is
    empty. Squared distances as the neighbour searches take them (`squared_distances`: no
    `(n, capacity, d)` array)."""
    sq = squared_distances(points, buffer) / bandwidth**2
    used = jnp.arange(buffer.shape[0]) < count
    kernel = jnp.where(used[None, :], jnp.exp(-0.5 * sq), 0.0)
    total = jnp.sum(kernel, axis=1) / jnp.sqrt(2.0 * jnp.pi)
    held = jnp.maximum(jnp.asarray(count, jnp.float32), 1.0)
    return jnp.where(count > 0, total / (held * bandwidth), 0.0)


class Reservoir(eqx.Module):
    """A uniform sample of at most `capacity` rows of a stream (Li's 1994 Algorithm L, the
    reservoir pyribs' DensityArchive cites): the first `capacity` rows fill it; after that,
    geometric skips pick which rows replace a uniformly drawn slot.

    **Fields:** `rows` `(capacity, d)`; `count`, the rows held; `log_w`, the log of the
    algorithm's `W`; `skip`, rows still to pass over before the next replacement; `stream`,
    the reservoir's own random stream (a `StoredKey`).
    """

    rows: Float[Array, "capacity d"]
    count: Int[Array, ""] = eqx.field(converter=i32)
    log_w: Float[Array, ""] = eqx.field(converter=f32)
    skip: Int[Array, ""] = eqx.field(converter=i32)
    stream: "StoredKey"

    @classmethod
    def start(cls, capacity: int, width: int, *, key: PRNGKey) -> "Reservoir":
        """An empty reservoir of `capacity` rows of `width`."""
        key, w_key, skip_key = jr.split(key, 3)
        log_w = _log_uniform(w_key) / capacity
        rows = jnp.zeros((capacity, width), jnp.float32)
        return cls(rows, 0, log_w, _skip(log_w, skip_key), StoredKey.of(key))

    @property
    def capacity(self) -> int:
        return self.rows.shape[0]

    @property
    def key(self) -> PRNGKey:
        """The reservoir's next key."""
        return self.stream.key

    def offer(self, rows: Float[Array, "batch d"], keep: Array) -> "Reservoir":
        """The reservoir after the stream's next rows, those of `rows` where `keep`, in order."""
        k, batch = self.capacity, rows.shape[0]
        # The kept rows, in order, first.
        stream = rows[jnp.argsort(~keep, stable=True)].astype(jnp.float32)
        n = jnp.sum(keep, dtype=jnp.int32)
        fill = jnp.minimum(k - self.count, n)
        at = jnp.arange(batch, dtype=jnp.int32)
        held = self.rows.at[jnp.where(at < fill, self.count + at, k)].set(stream, mode="drop")

        def more(carry):
            i, _, _, skip, _ = carry
            return i + skip < n

        def replace(carry):
            i, held, log_w, skip, key = carry
            row = i + skip
            key, slot_key, w_key, skip_key = jr.split(key, 4)
            slot = jr.randint(slot_key, (), 0, k)
            held = held.at[slot].set(stream[row])
            log_w = log_w + _log_uniform(w_key) / k
            return row + 1, held, log_w, _skip(log_w, skip_key), key

        i, held, log_w, skip, key = jax.lax.while_loop(
            more, replace, (fill, held, self.log_w, self.skip, self.key)
        )
        # Rows after the last replacement count towards the next skip.
        skip = jnp.where(self.count + fill >= k, skip - (n - i), skip)
        return Reservoir(held, self.count + fill, log_w, skip, self.stream.replaced(key))


class StoredKey(eqx.Module):
    """A PRNG key kept in a module as its raw data (`uint32`) and its implementation's name,
    so that the module saves and loads with `eqx.tree_serialise_leaves` (typed keys do not)."""

    data: Array
    impl: str = eqx.field(static=True)

    @classmethod
    def of(cls, key: PRNGKey) -> "StoredKey":
        return cls(jr.key_data(key), str(jr.key_impl(key)))

    @property
    def key(self) -> PRNGKey:
        return jr.wrap_key_data(self.data, impl=self.impl)

    def replaced(self, key: PRNGKey) -> "StoredKey":
        return StoredKey(jr.key_data(key), self.impl)


def _log_uniform(key: PRNGKey) -> Float[Array, ""]:
    return jnp.log(jr.uniform(key, (), minval=jnp.finfo(jnp.float32).tiny))


def _skip(log_w: Float[Array, ""], key: PRNGKey) -> Int[Array, ""]:
    # floor(log(u) / log(1 - W)), with log(1 - W) from log W without cancellation.
    rows = jnp.floor(_log_uniform(key) / jnp.log(-jnp.expm1(log_w)))
    return jnp.minimum(rows, 2.0**30).astype(jnp.int32)


@typing.final
class DensityRepertoire(AbstractGuidedRepertoire):
    """Density Descent Search's archive (Lee et al., GECCO 2024; pyribs' `DensityArchive`
    with the result archive it needs): a reservoir of recent descriptors (`buffer_size`,
    pyribs' 10,000) whose kernel density estimate (Gaussian, `bandwidth`) `AddInfo.density`
    reports for each candidate before the batch enters, and an elitist `MAPElitesRepertoire`
    over `tessellation` that keeps the elites. `DensityRanker` (`"density"`) ranks the batch
    by ascending density, so the emitters descend the density of where the search has been.
    `AddInfo.value` is the density negated (`imp` ranks as `density` does) and
    `AddInfo.threshold_status` is `NEW` for every candidate evaluated (pyribs' status 2).

    Build one with `DensityRepertoire.empty`. Every candidate with finite descriptors enters
    the reservoir's stream (a failed fitness does not matter to where the search has been);
    one with a non-finite descriptor does not.

    **Fields:** `result`; `reservoir` (`Reservoir`); `bandwidth` (float32).
    """

    result: MAPElitesRepertoire
    reservoir: Reservoir
    bandwidth: Float[Array, ""] = eqx.field(converter=f32)

    def __check_init__(self):
        check.positive("DensityRepertoire.bandwidth", self.bandwidth)
        d = self.result.num_descriptors
        if self.reservoir.rows.shape[1:] != (d,):
            raise ValueError(
                "DensityRepertoire: the reservoir's rows have width "
                f"{self.reservoir.rows.shape[1:]}, the tessellation has {d} descriptors"
            )

    @classmethod
    def empty(
        cls,
        tessellation: AbstractTessellation,
        genotype: Genotypes,
        extra: Extra = None,
        *,
        bandwidth: ScalarLike,
        buffer_size: int = 10_000,
        key: PRNGKey,
    ) -> "DensityRepertoire":
        """An empty density archive: the result archive over `tessellation` shaped like one
        unbatched `genotype` (and `extra`), an empty reservoir of `buffer_size` descriptors,
        the kernel `bandwidth` (pyribs' sphere example: 25.6 over a box 512 wide), and `key`
        for the reservoir's draws."""
        owner = "DensityRepertoire.empty"
        check.positive_int(f"{owner}: buffer_size", buffer_size)
        check.positive(f"{owner}: bandwidth", bandwidth)
        result = _elitist(tessellation, genotype, extra, owner)
        reservoir = Reservoir.start(buffer_size, tessellation.num_descriptors, key=key)
        return cls(result, reservoir, bandwidth)

    def emptied(self, genotype: Genotypes, extra: Extra = None) -> "DensityRepertoire":
        """An empty density archive with this one's cells, bandwidth and buffer size; its
        reservoir draws from this one's current key."""
        return DensityRepertoire.empty(
            self.tessellation,
            genotype,
            extra,
            bandwidth=self.bandwidth,
            buffer_size=self.reservoir.capacity,
            key=self.reservoir.key,
        )

    def density(self, descriptors: Float[Array, "batch num_descriptors"]) -> Float[Array, " batch"]:
        """The density estimate at `descriptors` from the reservoir as it is."""
        r = self.reservoir
        return kde_density(descriptors.astype(jnp.float32), r.rows, r.count, self.bandwidth)

    def add(
        self,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra = None,
    ) -> tuple["DensityRepertoire", AddInfo]:
        """The batch's densities (before it enters), then the batch into the reservoir and the
        result archive. `AddInfo.cell`, `status` and `delta` are the result archive's."""
        self.check_batch(genotypes, descriptors, fitnesses, extra)
        finite = jnp.all(jnp.isfinite(descriptors), axis=-1)
        density = self.density(jnp.where(finite[:, None], descriptors, 0.0))
        density = jnp.where(finite, density, jnp.nan)
        result, info = self.result.add(genotypes, descriptors, fitnesses, extra)
        reservoir = self.reservoir.offer(descriptors, finite)
        valid = valid_candidates(fitnesses, descriptors)
        info = AddInfo(
            cell=info.cell,
            status=info.status,
            delta=info.delta,
            threshold_status=jnp.where(valid, AddStatus.NEW, AddStatus.NOT_ADDED).astype(jnp.int32),
            value=jnp.where(valid, -density, jnp.nan),
            density=density,
        )
        return DensityRepertoire(result, reservoir, self.bandwidth), info
