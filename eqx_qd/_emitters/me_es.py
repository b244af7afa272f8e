"""MAP-Elites-ES's emitter (Colas et al. 2020, "Scaling MAP-Elites to Deep Neuroevolution"),
as QDax 0.5's `MEESEmitter` runs it: one offspring per generation, stepped by OpenAI-ES on the
fitness (exploit) or on novelty against an archive of the offspring's descriptors (explore).

The ES samples are scored inside `state_update` by the emitter's own `scoring_fn`: they are
not offered to the repertoire, only the offspring is. The gradient is estimated on the
genotype's floating leaves flattened to one vector, with independent noise per gene (QDax
draws each leaf with the same key, so leaves of equal shape get equal noise).
"""

import typing
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Bool, Float, Int, ScalarLike

from .. import _validate as check
from .._custom_types import Extra, Genotypes, PRNGKey
from .._knn import k_nearest, mean_of_finite
from .._misc import f32, from_first_device, i32, poison_if_empty, tree_take
from .._repertoire import AbstractRepertoire, AddInfo, AddStatus
from .base import AbstractEmitter, Lineage, Origin, stored_ids


MEES_MODES = ("explore_exploit", "exploit", "explore")
MEES_OPTIMISERS = ("adam", "sgd")

_ADAM_B1, _ADAM_B2, _ADAM_EPS = 0.9, 0.999, 1e-8  # optax.adam's defaults, as QDax uses them


class MEESEmitterState(eqx.Module):
    """What MAP-Elites-ES carries from one generation to the next.

    **Fields:**

    - `offspring`: the candidate `emit` returns next (batch 1).
    - `root_id`: the id of the elite the current ES run started from (`-1`: none, or ids not
      tracked), the offspring's `Lineage.parent1`.
    - `moment1`, `moment2`, `adam_step`: the optimiser's state over the flat genotype
      `(dim,)`; reset whenever a new parent is drawn.
    - `generation`: generations done (one per `state_update`).
    - `novelty_archive` `(archive_size, num_descriptors)` and `archive_count`: every
      offspring's descriptor, a ring (the oldest overwritten once full); the first
      `min(archive_count, archive_size)` rows are written.
    - `last_genotypes` (batch `last_updated_size`), `last_fitnesses`, `last_ids`,
      `last_position`: the offspring that entered the repertoire most recently, a ring
      (`-inf` fitness: a free slot).
    """

    offspring: Genotypes
    root_id: Int[Array, ""]
    moment1: Float[Array, " dim"]
    moment2: Float[Array, " dim"]
    adam_step: Int[Array, ""]
    generation: Int[Array, ""]
    novelty_archive: Float[Array, "archive_size num_descriptors"]
    archive_count: Int[Array, ""]
    last_genotypes: Genotypes
    last_fitnesses: Float[Array, " last_updated_size"]
    last_ids: Int[Array, " last_updated_size"]
    last_position: Int[Array, ""]


def novelty(
    descriptors: Float[Array, "n num_descriptors"],
    archive: Float[Array, "archive_size num_descriptors"],
    count: Int[Array, ""],
    k: int,
) -> Float[Array, " n"]:
    """Each descriptor's novelty: the mean Euclidean distance to its `k` nearest among the
    archive's first `count` rows (fewer when fewer are written; 0 with none).

    QDax counts one row past the last written (its mask is `index < position + 1`), an unwritten
    zero row until the archive is full; here only written rows count."""
    size = archive.shape[0]
    written = jnp.arange(size) < jnp.minimum(count, size)
    allowed = lambda rows: jnp.broadcast_to(written[None, :], (rows.shape[0], size))
    distances = k_nearest(descriptors, archive, allowed, k)
    return mean_of_finite(distances)[0]


def centred_ranks(scores: Float[Array, " n"]) -> Float[Array, " n"]:
    """Ranks scaled to `[-0.5, 0.5]`, the lowest score `-0.5` (ties in index order); NaN
    scores rank lowest."""
    scores = jnp.where(jnp.isnan(scores), -jnp.inf, scores)
    ranks = jnp.argsort(jnp.argsort(scores, stable=True), stable=True)
    return ranks.astype(jnp.float32) / (scores.shape[0] - 1) - 0.5


@typing.final
class MEESEmitter(AbstractEmitter[MEESEmitterState]):
    """MAP-Elites-ES (Colas et al. 2020) as QDax 0.5's `MEESEmitter`: one offspring per
    generation, made by one step of OpenAI-ES from a parent; every `num_optimizer_steps`
    generations a new parent is drawn and the optimiser restarts.

    One generation (`state_update`, after the offspring was scored and offered):

    1. The offspring's descriptor joins the novelty archive; if it entered the repertoire it
       joins the last-updated ring.
    2. On a new-parent generation: explore draws uniformly among the
       `explore_num_cell_sample` elites most novel against the archive; exploit draws, with
       probability one half each, among the `exploit_num_cell_sample` fittest elites or the
       fittest of the last-updated ring (the repertoire's while the ring is empty). Otherwise
       the parent is the last offspring.
    3. `sample_number` samples `parent + sample_sigma * eps` (mirrored pairs with `mirror`)
       are scored by `scoring_fn`; their scores (fitness when exploiting, novelty against the
       archive when exploring) become centred ranks (`rank_norm`), the gradient
       `-sum_i w_i eps_i / (sample_number * sample_sigma) + l2_coefficient * parent` (for a
       mirrored pair `w` is the rank of `+eps` less that of `-eps`) takes one Adam (or SGD)
       step of `learning_rate`: the next offspring.

    `mode` `"explore_exploit"` alternates phases of `num_optimizer_steps` generations,
    exploring first; `"exploit"` and `"explore"` use one score only (QDax's `use_explore` /
    `use_exploit`). The first offspring is the first initial genotype.

    On several devices (`axis_name`, inside `MAPElites(axis_name=...)`), one ME-ES run is
    spread: every device holds the same state, scores its share of the samples (the noise is
    the same on every device, their episodes' keys their own) and gathers every device's
    scores, so the step is the one device's. The first device emits the offspring; every other
    device emits it with NaN genes, a placeholder every repertoire refuses, since the loop
    gives each device a batch of its own.

    **Fields:**

    - `scoring_fn`: `(genotypes, *, key) -> (fitnesses, descriptors, extra)`, for the samples
      (one evaluation each; the offspring is scored by the loop's function).
    - `num_descriptors`, `archive_size` (QDax: the total generations), `sample_number`,
      `num_optimizer_steps`, `novelty_nearest_neighbors`, `last_updated_size`,
      `exploit_num_cell_sample`, `explore_num_cell_sample`: static sizes.
    - `sample_sigma`, `learning_rate`, `l2_coefficient`: float32 leaves.
    - `mode`, `mirror`, `rank_norm`, `optimiser`: static choices.
    - `axis_name`: the mesh axis under `shard_map`, or `None` on one device; `sample_number`
      must split evenly over its devices.
    - `batch_size`: 1 (per device).

    The samples' evaluations are not counted by the loop (`MAPElitesState.evaluations`
    counts the offspring): a generation costs `1 + sample_number` evaluations.
    """

    scoring_fn: Callable
    num_descriptors: int = eqx.field(static=True)
    archive_size: int = eqx.field(static=True)
    sample_number: int = eqx.field(static=True)
    num_optimizer_steps: int = eqx.field(static=True)
    novelty_nearest_neighbors: int = eqx.field(static=True)
    last_updated_size: int = eqx.field(static=True)
    exploit_num_cell_sample: int = eqx.field(static=True)
    explore_num_cell_sample: int = eqx.field(static=True)
    sample_sigma: Float[Array, ""] = eqx.field(converter=f32)
    learning_rate: Float[Array, ""] = eqx.field(converter=f32)
    l2_coefficient: Float[Array, ""] = eqx.field(converter=f32)
    mode: str = eqx.field(static=True)
    mirror: bool = eqx.field(static=True)
    rank_norm: bool = eqx.field(static=True)
    optimiser: str = eqx.field(static=True)
    axis_name: str | None = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)

    def __init__(
        self,
        scoring_fn: Callable,
        *,
        num_descriptors: int,
        archive_size: int,
        sample_number: int = 1000,
        sample_sigma: ScalarLike = 0.02,
        num_optimizer_steps: int = 10,
        learning_rate: ScalarLike = 0.01,
        l2_coefficient: ScalarLike = 0.02,
        novelty_nearest_neighbors: int = 10,
        last_updated_size: int = 5,
        exploit_num_cell_sample: int = 2,
        explore_num_cell_sample: int = 5,
        mode: str = "explore_exploit",
        mirror: bool = True,
        rank_norm: bool = True,
        optimiser: str = "adam",
        axis_name: str | None = None,
    ):
        owner = "MEESEmitter"
        if not callable(scoring_fn):
            raise TypeError(f"{owner}.scoring_fn must be callable, got {scoring_fn!r}")
        for name, value in {
            "num_descriptors": num_descriptors,
            "archive_size": archive_size,
            "num_optimizer_steps": num_optimizer_steps,
            "novelty_nearest_neighbors": novelty_nearest_neighbors,
            "last_updated_size": last_updated_size,
            "exploit_num_cell_sample": exploit_num_cell_sample,
            "explore_num_cell_sample": explore_num_cell_sample,
        }.items():
            check.positive_int(f"{owner}.{name}", value)
        check.positive_int(f"{owner}.sample_number", sample_number)
        if sample_number < 2 or (mirror and sample_number % 2):
            raise ValueError(
                f"{owner}.sample_number must be at least 2"
                + (" and even (mirrored pairs)" if mirror else "")
                + f", got {sample_number}"
            )
        check.positive(f"{owner}.sample_sigma", sample_sigma)
        check.non_negative(f"{owner}.learning_rate", learning_rate)
        check.non_negative(f"{owner}.l2_coefficient", l2_coefficient)
        check.one_of(f"{owner}.mode", mode, MEES_MODES)
        check.one_of(f"{owner}.optimiser", optimiser, MEES_OPTIMISERS)
        for name, flag in {"mirror": mirror, "rank_norm": rank_norm}.items():
            if not isinstance(flag, bool):
                raise ValueError(f"{owner}.{name} must be a bool, got {flag!r}")
        self.scoring_fn = scoring_fn
        self.num_descriptors, self.archive_size = num_descriptors, archive_size
        self.sample_number, self.num_optimizer_steps = sample_number, num_optimizer_steps
        self.novelty_nearest_neighbors = novelty_nearest_neighbors
        self.last_updated_size = last_updated_size
        self.exploit_num_cell_sample = exploit_num_cell_sample
        self.explore_num_cell_sample = explore_num_cell_sample
        self.sample_sigma, self.learning_rate = sample_sigma, learning_rate
        self.l2_coefficient = l2_coefficient
        self.mode, self.mirror, self.rank_norm, self.optimiser = mode, mirror, rank_norm, optimiser
        self.axis_name, self.batch_size = axis_name, 1

    # -- the contract ---------------------------------------------------------------------

    def init(
        self,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        key: PRNGKey,
    ) -> MEESEmitterState:
        first = tree_take(genotypes, jnp.zeros((1,), jnp.int32))
        if self.axis_name is not None:  # every device starts from the first device's
            first = from_first_device(first, self.axis_name)
        flat = self._flat(first, "init")
        if descriptors.shape[-1] != self.num_descriptors:
            raise ValueError(
                f"MEESEmitter.init: the descriptors have {descriptors.shape[-1]} dimensions, "
                f"num_descriptors is {self.num_descriptors}"
            )
        dim = flat.shape[0]
        last = self.last_updated_size
        return MEESEmitterState(
            offspring=first,
            root_id=i32(-1),
            moment1=jnp.zeros((dim,), jnp.float32),
            moment2=jnp.zeros((dim,), jnp.float32),
            adam_step=i32(0),
            generation=i32(0),
            novelty_archive=jnp.zeros((self._archive_rows, self.num_descriptors), jnp.float32),
            archive_count=i32(0),
            last_genotypes=jax.tree.map(
                lambda x: jnp.zeros((last, *x.shape[1:]), x.dtype) if eqx.is_array(x) else x,
                first,
            ),
            last_fitnesses=jnp.full((last,), -jnp.inf, jnp.float32),
            last_ids=jnp.full((last,), -1, jnp.int32),
            last_position=i32(0),
        )

    def emit(
        self, repertoire: AbstractRepertoire, state: MEESEmitterState, *, key: PRNGKey
    ) -> tuple[Genotypes, Extra]:
        none = jnp.full((1,), -1, jnp.int32)
        kind = jnp.full((1,), int(Origin.ES), jnp.int32)
        if self.axis_name is None:
            return state.offspring, Lineage(state.root_id[None], none, kind)
        # One offspring for the run: the other devices' slots hold a placeholder (NaN genes,
        # refused by every repertoire).
        other = jax.lax.axis_index(self.axis_name) != 0
        offspring = poison_if_empty(state.offspring, other)
        return offspring, Lineage(jnp.where(other, none, state.root_id[None]), none, kind)

    def state_update(
        self,
        state: MEESEmitterState,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        add_info: AddInfo,
        key: PRNGKey,
    ) -> MEESEmitterState:
        if fitnesses.shape != (1,):
            raise ValueError(
                "MEESEmitter.state_update: MAP-Elites-ES scores one offspring per generation, "
                f"got a batch of {fitnesses.shape[0]}"
            )
        if self.axis_name is not None:  # the first device's offspring and key, on every device
            genotypes, descriptors, fitnesses, add_info = from_first_device(
                (genotypes, descriptors, fitnesses, add_info), self.axis_name
            )
            key = jr.wrap_key_data(from_first_device(jr.key_data(key), self.axis_name))
        state = self._remember(state, repertoire, genotypes, descriptors, fitnesses, add_info)
        parent_key, sample_key, score_key = jr.split(key, 3)
        generation = state.generation
        new_parent = generation % self.num_optimizer_steps == 0
        explore = self._explores(generation)
        parent, root = jax.lax.cond(
            new_parent,
            lambda: self._draw_parent(state, repertoire, explore, key=parent_key),
            lambda: (state.offspring, state.root_id),
        )
        zeros = jnp.zeros_like(state.moment1)
        m1, m2, step = jax.tree.map(
            lambda fresh, kept: jnp.where(new_parent, fresh, kept),
            (zeros, zeros, i32(0)),
            (state.moment1, state.moment2, state.adam_step),
        )
        flat, unravel = self._ravel(parent)
        gradient = self.gradient(
            flat,
            unravel,
            state.novelty_archive,
            state.archive_count,
            explore,
            sample_key=sample_key,
            score_key=score_key,
        )
        flat, m1, m2, step = self._step(flat, gradient, m1, m2, step)
        return eqx.tree_at(
            lambda s: (s.offspring, s.root_id, s.moment1, s.moment2, s.adam_step, s.generation),
            state,
            (unravel(flat[None, :]), root, m1, m2, step, generation + 1),
        )

    # -- the pieces, each testable alone ----------------------------------------------------

    @property
    def _archive_rows(self) -> int:
        # Exploit only: novelty is never read (QDax keeps a k-row archive then).
        return self.novelty_nearest_neighbors if self.mode == "exploit" else self.archive_size

    def _explores(self, generation: Int[Array, ""]) -> Bool[Array, ""]:
        if self.mode == "explore":
            return jnp.asarray(True)
        if self.mode == "exploit":
            return jnp.asarray(False)
        return (generation // self.num_optimizer_steps) % 2 == 0

    def _flat(self, genotype: Genotypes, where: str) -> Float[Array, " dim"]:
        arrays = [x for x in jax.tree.leaves(genotype) if eqx.is_array(x)]
        if not arrays or any(not jnp.issubdtype(x.dtype, jnp.floating) for x in arrays):
            raise ValueError(
                f"MEESEmitter.{where}: the genotype's arrays must all be floating point (the ES "
                "perturbs every gene), got dtypes "
                f"{sorted({str(x.dtype) for x in arrays}) or 'none'}"
            )
        return self._ravel(genotype)[0]

    @staticmethod
    def _ravel(genotype: Genotypes):
        """A batch-1 genotype as a flat vector, and the way back: `unravel(flats)` turns
        `(batch, dim)` vectors into a genotype batch."""
        arrays, static = eqx.partition(genotype, eqx.is_array)
        flat, unravel_one = ravel_pytree(jax.tree.map(lambda x: x[0], arrays))
        unravel = lambda flats: eqx.combine(jax.vmap(unravel_one)(flats), static)
        return flat, unravel

    def gradient(
        self,
        flat: Float[Array, " dim"],
        unravel: Callable,
        archive: Float[Array, "archive_size num_descriptors"],
        archive_count: Int[Array, ""],
        explore: Bool[Array, ""],
        *,
        sample_key: PRNGKey,
        score_key: PRNGKey,
    ) -> Float[Array, " dim"]:
        """The ES estimate at `flat` (the descent direction the optimiser steps against): the
        samples scored by `scoring_fn` and ranked by novelty against the first
        `archive_count` rows of `archive` when `explore`, else by fitness; plus the L2 term.
        `unravel` turns `(batch, dim)` flat vectors into genotypes; `sample_key` draws the
        noise, `score_key` is the scoring function's."""
        n, sigma = self.sample_number, self.sample_sigma
        half = n // 2 if self.mirror else n
        eps = jr.normal(sample_key, (half, flat.shape[0]), jnp.float32)
        # Mirrored samples interleaved (+eps_0, -eps_0, +eps_1, ...), as QDax orders them.
        noise = jnp.stack([eps, -eps], axis=1).reshape(n, -1) if self.mirror else eps
        if self.axis_name is None:
            samples = unravel((flat[None, :] + sigma * noise).astype(flat.dtype))
            fit, desc, _ = self.scoring_fn(samples, key=score_key)
        else:  # each device its share, every device's scores gathered in sample order
            devices = jax.lax.axis_size(self.axis_name)
            if n % devices:
                raise ValueError(
                    f"MEESEmitter: sample_number ({n}) must split evenly over the {devices} "
                    f"devices of axis {self.axis_name!r}"
                )
            share, index = n // devices, jax.lax.axis_index(self.axis_name)
            mine = jax.lax.dynamic_slice_in_dim(noise, index * share, share)
            samples = unravel((flat[None, :] + sigma * mine).astype(flat.dtype))
            fit, desc, _ = self.scoring_fn(samples, key=jr.fold_in(score_key, index))
            fit, desc = jax.lax.all_gather((fit, desc), self.axis_name, tiled=True)
        scores = jax.lax.cond(
            explore,
            lambda: novelty(desc, archive, archive_count, self.novelty_nearest_neighbors),
            lambda: fit.astype(jnp.float32),
        )
        weights = centred_ranks(scores) if self.rank_norm else scores
        if self.mirror:
            weights = weights[0::2] - weights[1::2]
        estimate = -(weights @ eps) / (n * sigma)
        return estimate + self.l2_coefficient * flat

    def _step(self, flat, gradient, m1, m2, step):
        """One optimiser step against `gradient` (optax's `adam` or `sgd`, no momentum)."""
        if self.optimiser == "sgd":
            return flat - self.learning_rate * gradient, m1, m2, step
        step = step + 1
        m1 = _ADAM_B1 * m1 + (1 - _ADAM_B1) * gradient
        m2 = _ADAM_B2 * m2 + (1 - _ADAM_B2) * jnp.square(gradient)
        t = step.astype(jnp.float32)
        m1_hat = m1 / (1 - _ADAM_B1**t)
        m2_hat = m2 / (1 - _ADAM_B2**t)
        update = self.learning_rate * m1_hat / (jnp.sqrt(m2_hat) + _ADAM_EPS)
        return flat - update, m1, m2, step

    def _remember(self, state, repertoire, genotypes, descriptors, fitnesses, add_info):
        """The offspring's descriptor into the novelty archive; the offspring into the
        last-updated ring if it entered the repertoire."""
        row = state.archive_count % self._archive_rows
        archive = jax.lax.dynamic_update_slice_in_dim(
            state.novelty_archive, descriptors.astype(jnp.float32), row, axis=0
        )
        added = add_info.status[0] != int(AddStatus.NOT_ADDED)
        slot = state.last_position
        new_id = _id_at(repertoire, add_info.cell[0])
        put = lambda ring, value: jnp.where(added, ring.at[slot].set(value), ring)
        last_genotypes = jax.tree.map(
            lambda ring, g: put(ring, g[0]) if eqx.is_array(ring) else ring,
            state.last_genotypes,
            genotypes,
        )
        return eqx.tree_at(
            lambda s: (
                s.novelty_archive,
                s.archive_count,
                s.last_genotypes,
                s.last_fitnesses,
                s.last_ids,
                s.last_position,
            ),
            state,
            (
                archive,
                state.archive_count + 1,
                last_genotypes,
                put(state.last_fitnesses, fitnesses[0].astype(jnp.float32)),
                put(state.last_ids, new_id),
                (slot + added.astype(jnp.int32)) % self.last_updated_size,
            ),
        )

    def _draw_parent(self, state, repertoire, explore, *, key: PRNGKey):
        """A new parent (batch 1) and its id: explore or exploit, as the class says."""
        which_key, repertoire_key, ring_key = jr.split(key, 3)
        filled = repertoire.filled
        scores = jax.lax.cond(
            explore,
            lambda: novelty(
                repertoire.descriptors,
                state.novelty_archive,
                state.archive_count,
                self.novelty_nearest_neighbors,
            ),
            lambda: repertoire.fitnesses.astype(jnp.float32),
        )
        count = jnp.where(explore, self.explore_num_cell_sample, self.exploit_num_cell_sample)
        cell = _uniform_among_best(scores, filled, count, key=repertoire_key)
        from_rep = tree_take(repertoire.genotypes, cell[None])
        rep_id = _id_at(repertoire, cell)
        ring_filled = jnp.isfinite(state.last_fitnesses)
        slot = _uniform_among_best(
            state.last_fitnesses, ring_filled, self.exploit_num_cell_sample, key=ring_key
        )
        from_ring = tree_take(state.last_genotypes, slot[None])
        use_ring = ~explore & jnp.any(ring_filled) & (jr.uniform(which_key) >= 0.5)
        pick = lambda a, b: jnp.where(use_ring, b, a) if eqx.is_array(a) else a
        parent = poison_if_empty(jax.tree.map(pick, from_rep, from_ring), ~jnp.any(filled))
        return parent, jnp.where(use_ring, state.last_ids[slot], rep_id)


def _uniform_among_best(
    scores: Float[Array, " n"], filled: Bool[Array, " n"], count: Int[Array, ""] | int, *, key
) -> Int[Array, ""]:
    """An index drawn uniformly among the `count` highest `scores` of the `filled` entries
    (fewer when fewer are filled)."""
    masked = jnp.where(filled, scores, -jnp.inf)
    order = jnp.argsort(-masked, stable=True)
    rank = jnp.empty_like(order).at[order].set(jnp.arange(order.shape[0], dtype=order.dtype))
    eligible = filled & (rank < count)
    logits = jnp.where(eligible, 0.0, -jnp.inf)
    return jr.categorical(key, logits).astype(jnp.int32)


def _id_at(repertoire: AbstractRepertoire, cell: Int[Array, ""]) -> Int[Array, ""]:
    """The id the repertoire stores at `cell` (its int `extra`), else `-1`."""
    ids = stored_ids(repertoire.extra)
    return i32(-1) if ids is None else ids[cell]
