"""The MAP-Elites loop: a stateless algorithm module, its state, and a jitted scan runner."""

import abc
import typing
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, PyTree, ScalarLike

from . import _validate as check
from ._compile import jit
from ._custom_types import Extra, Genotypes, PRNGKey
from ._emitters.base import AbstractEmitter
from ._emitters.extraction import Extraction, ExtractionExtra
from ._metrics import qd_metrics, QDMetrics
from ._misc import f32, filter_scan, i32, tree_all_gather, tree_take
from ._repertoire import (
    AbstractGuidedRepertoire,
    AbstractRepertoire,
    AbstractSampledRepertoire,
    AddInfo,
    MAPElitesRepertoire,
)
from ._repertoire._aurora import AuroraOffer, AuroraRepertoire
from ._repertoire._extract import ExtractOffer, ExtractRepertoire
from ._tasks import AbstractScorer
from ._tessellation import AbstractTessellation


ScoringFn = Callable[..., tuple[Float[Array, " batch"], Float[Array, "batch d"], Extra]]
"""`scoring_fn(genotypes, *, key) -> (fitnesses, descriptors, extra)`."""


class MAPElitesState(eqx.Module):
    """Everything that changes during a MAP-Elites run.

    **Fields:**

    - `repertoire`: the archive.
    - `emitter_state`: what the emitter learns (its `init` / `state_update` output).
    - `iteration`: iterations done since `MAPElites.init`.
    - `evaluations`: candidates scored so far; candidate ids are given in that order (the
      initial population gets `0 .. n-1`).
    - `result`: a passive elitist archive over cells that receives every candidate too and
      that the metrics describe, or `None`. CMA-MAE keeps one over its own cells (its
      `repertoire` anneals and feeds the emitters); a repertoire without cells (DNS, the
      unstructured archive) gets one from `MAPElites.init(..., result=tessellation)`, so
      that QD-score and coverage mean what they mean on a grid.
    """

    repertoire: AbstractRepertoire
    emitter_state: PyTree
    iteration: Int[Array, ""] = eqx.field(converter=i32)
    evaluations: Int[Array, ""] = eqx.field(default=0, converter=i32)
    result: MAPElitesRepertoire | None = None

    @property
    def elites(self) -> AbstractRepertoire:
        """The repertoire a run reports: `result` when there is one; else the result archive a
        guided repertoire (`DensityRepertoire`, `DiscountModelRepertoire`) keeps; else
        `repertoire`."""
        if self.result is not None:
            return self.result
        if isinstance(self.repertoire, AbstractGuidedRepertoire):
            return self.repertoire.result
        return self.repertoire


class StepInfo(eqx.Module):
    """What one iteration emitted and how it went (for logs and lineage).

    **Fields:** the batch's `fitnesses` `(batch,)` and `descriptors` `(batch,
    num_descriptors)`; `add_info`, the `AddInfo` of its insertion; `emit_extra`, what the
    emitter returned beside the genotypes (a `Lineage`); `ids`, the candidates' ids.
    """

    fitnesses: Float[Array, " batch"]
    descriptors: Float[Array, "batch num_descriptors"]
    add_info: AddInfo
    emit_extra: Extra
    ids: Int[Array, " batch"]


class Asked(eqx.Module):
    """What `MAPElites.ask` hands to `MAPElites.tell` beside the candidates.

    **Fields:** `emit_extra` (what the emitter returned beside the genotypes: a `Lineage`, or
    `None`), `score_key` (the key the scoring function gets inside `step`: use it to evaluate
    exactly as `run` does, or ignore it) and `update_key` (the emitter update's key).
    """

    emit_extra: Extra
    score_key: PRNGKey
    update_key: PRNGKey


_State = TypeVar("_State")
_Metrics = TypeVar("_Metrics")


class AbstractQDLoop(eqx.Module, Generic[_State, _Metrics]):
    """What the QD loops share (`MAPElites`, `MOME`): an `emitter`, a `scoring_fn`, an
    `axis_name` (the mesh axis under `shard_map`, or `None`), and the iteration built on
    `ask` and `tell`. A loop implements `init_scored` (its archive from a scored population)
    and `tell` (a scored batch inserted, the emitter updated); `init`, `ask`, `step` and
    `update` come from here, the same for every loop."""

    emitter: eqx.AbstractVar[AbstractEmitter]
    scoring_fn: eqx.AbstractVar[Callable[..., tuple[Any, Any, Extra]]]
    axis_name: eqx.AbstractVar[str | None]

    def _device_key(self, key: PRNGKey) -> PRNGKey:
        """`key`, folded with this device's index under an axis (each device its own)."""
        if self.axis_name is None:
            return key
        return jr.fold_in(key, jax.lax.axis_index(self.axis_name))

    def _own(self, tree: PyTree, n: int) -> PyTree:
        """This device's `n` rows of a batch gathered over the axis."""
        if self.axis_name is None:
            return tree
        start = jax.lax.axis_index(self.axis_name) * n
        return jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, start, n), tree)

    def init(
        self,
        genotypes: Genotypes,
        repertoire: AbstractTessellation | AbstractRepertoire,
        *,
        key: PRNGKey,
        result: AbstractTessellation | None = None,
    ) -> tuple[_State, _Metrics]:
        """Score the initial population `genotypes` (any pytree with a leading batch axis)
        with the scoring function, under the first half of `jr.split(key)`, and build the
        archive and the emitter state from it: `init_scored` with those scores, which says
        what `repertoire` (a tessellation, or a repertoire whose settings are kept), `key`
        and `result` (a passive archive over a tessellation, which the metrics report) are.

        **Returns:** the state and the metrics of the reported archive.
        """
        score_key, _ = jr.split(self._device_key(key))
        fitnesses, descriptors, extra = self.scoring_fn(genotypes, key=score_key)
        return self.init_scored(
            genotypes, descriptors, fitnesses, repertoire, extra, key=key, result=result
        )

    @abc.abstractmethod
    def init_scored(
        self,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Any,
        repertoire: AbstractTessellation | AbstractRepertoire,
        extra: Extra = None,
        *,
        key: PRNGKey,
        result: AbstractTessellation | None = None,
    ) -> tuple[_State, _Metrics]:
        """`init` from a population scored elsewhere: `genotypes` with their `descriptors`,
        `fitnesses` and scoring `extra`; `repertoire`, `key` and `result` as the loop
        documents them."""

    def ask(self, state: _State, *, key: PRNGKey) -> tuple[Genotypes, "Asked"]:
        """The first half of an iteration: the emitter's batch of candidates to evaluate,
        and what `tell` needs with their scores (`Asked`: the emitter's extra and the keys),
        given the loop's `state` and a PRNG `key`.

        `ask`, an evaluation of the candidates, then `tell` is `step`: with the scoring
        function called as `scoring_fn(genotypes, key=asked.score_key)`, the states are
        exactly those of `step` with the same keys (and of `run`, within its caveat). Pure
        and jittable; the evaluation in between may be anything (NumPy, a simulator, a
        subprocess)."""
        emit_key, score_key, update_key = jr.split(self._device_key(key), 3)
        genotypes, emit_extra = self.emitter.emit(
            state.repertoire, state.emitter_state, key=emit_key
        )
        return genotypes, Asked(emit_extra, score_key, update_key)

    @abc.abstractmethod
    def tell(
        self,
        state: _State,
        asked: "Asked",
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Any,
        extra: Extra = None,
    ) -> tuple[_State, _Metrics, "StepInfo"]:
        """The second half of an iteration: insert the batch `ask` returned (`genotypes`),
        scored (`descriptors`, `fitnesses`, the scoring's `extra`), into `state`, and update
        the emitter with `asked`."""

    def step(self, state: _State, *, key: PRNGKey) -> tuple[_State, _Metrics, "StepInfo"]:
        """One iteration from `state` with a PRNG `key`, also returning the per-candidate
        `StepInfo`: `ask`, the scoring function, `tell`."""
        genotypes, asked = self.ask(state, key=key)
        fitnesses, descriptors, extra = self.scoring_fn(genotypes, key=asked.score_key)
        return self.tell(state, asked, genotypes, descriptors, fitnesses, extra)

    def update(self, state: _State, *, key: PRNGKey) -> tuple[_State, _Metrics]:
        """One iteration from `state` with a PRNG `key`: the new state and the metrics of the
        reported archive."""
        new_state, metrics, _ = self.step(state, key=key)
        return new_state, metrics


@typing.final
class MAPElites(AbstractQDLoop[MAPElitesState, QDMetrics]):
    """MAP-Elites: emit a batch, score it, insert it, update the emitter, report metrics.

    Stateless: the run lives in `MAPElitesState`. `init` and `update` are pure; wrap them in
    `eqx.filter_jit`, or use `run` (all iterations in one jitted `lax.scan`).

    With `lineage=True` the repertoire stores each elite's id as its `extra`, so emitters
    can report the ids of the parents they used (`Lineage`) and `StepInfo.ids` ties every
    candidate to its parents: the actors file of PGA-ME.

    With `axis_name` (inside `run_sharded`'s `shard_map`), each device emits and scores its
    own batch, and every device inserts the gathered batches of all devices. The repertoire is
    therefore the same on every device, while emitter states stay per device.

    **Fields:**

    - `emitter`: where candidates come from.
    - `scoring_fn`: `scoring_fn(genotypes, *, key) -> (fitnesses, descriptors, extra)`.
    - `qd_offset`: added to every elite's fitness in the QD-score; by default the scoring
      function's own `qd_offset` (every task and `PolicyScorer` has one), else 0.
    - `lineage`: store each elite's id in the repertoire (see above).
    - `axis_name`: the mesh axis under `shard_map`, or `None`.
    - `archive_learning_rate`, `threshold_min`: CMA-MAE. With a learning rate the repertoire
      the emitters draw from anneals (`Annealing`) and `MAPElitesState.result`, an elitist
      archive over the same cells, is what the metrics report. `None`: plain MAP-Elites.

    The repertoire is a choice made at `init`: a tessellation (MAP-Elites' cells), or any
    `AbstractRepertoire` such as `DNSRepertoire` or `UnstructuredRepertoire`, optionally with a
    passive `result` grid for the metrics.
    """

    emitter: AbstractEmitter
    scoring_fn: ScoringFn
    qd_offset: Float[Array, ""] = eqx.field(converter=f32)
    lineage: bool = eqx.field(static=True)
    axis_name: str | None = eqx.field(static=True)
    archive_learning_rate: Float[Array, ""] | None
    threshold_min: Float[Array, ""]

    def __init__(
        self,
        emitter: AbstractEmitter,
        scoring_fn: ScoringFn,
        qd_offset: ScalarLike | None = None,
        lineage: bool = False,
        axis_name: str | None = None,
        archive_learning_rate: ScalarLike | None = None,
        threshold_min: ScalarLike = -jnp.inf,
    ):
        self.emitter = emitter
        self.scoring_fn = scoring_fn
        # The scorer's offset unless one is given: Rastrigin's fitnesses are negative, and a QD-
        # score without its offset would be too. A plain function has none: 0.
        if qd_offset is None:
            qd_offset = scoring_fn.qd_offset if isinstance(scoring_fn, AbstractScorer) else 0.0
        self.qd_offset = qd_offset
        self.lineage = lineage
        self.axis_name = axis_name
        if archive_learning_rate is not None:
            check.in_range("MAPElites.archive_learning_rate", archive_learning_rate, 0.0, 1.0)
            archive_learning_rate = f32(archive_learning_rate)
        elif check.is_concrete(threshold_min) and float(threshold_min) != -float("inf"):
            raise ValueError("MAPElites.threshold_min is CMA-MAE's: give archive_learning_rate too")
        self.archive_learning_rate = archive_learning_rate
        self.threshold_min = f32(threshold_min)

    def __check_init__(self):
        if not isinstance(self.emitter, AbstractEmitter):
            raise TypeError(
                f"MAPElites.emitter must be an eqx_qd.AbstractEmitter, got {self.emitter!r}"
            )
        if not callable(self.scoring_fn):
            raise TypeError(f"MAPElites.scoring_fn must be callable, got {self.scoring_fn!r}")
        check.finite("MAPElites.qd_offset", self.qd_offset)

    def _offer(self, repertoire, ids: Extra, extra: Extra, n: int, sources=None) -> Extra:
        """What `repertoire.add` takes as its extra for a batch of `n` (gathered over the
        axis): a sampled repertoire the scoring's extra (the samples it inserts by), Extract-ME's
        the scorings behind each score and which rows were extracted (`sources`), AURORA's the
        ids and the scoring's extra (which its encoder observes), any other the `ids` (or
        `None` without lineage)."""
        if isinstance(repertoire, AbstractSampledRepertoire):
            return tree_all_gather(extra, self.axis_name)
        if isinstance(repertoire, ExtractRepertoire):
            return ExtractOffer.of(sources, extra, n)
        if isinstance(repertoire, AuroraRepertoire):
            return AuroraOffer(ids, tree_all_gather(extra, self.axis_name))
        return ids

    def _first_id(self, state_evaluations, n: int):
        if self.axis_name is None:
            return state_evaluations
        return state_evaluations + jax.lax.axis_index(self.axis_name) * n

    def init_scored(
        self,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        repertoire: AbstractTessellation | AbstractRepertoire,
        extra: Extra = None,
        *,
        key: PRNGKey,
        result: AbstractTessellation | None = None,
    ) -> tuple[MAPElitesState, QDMetrics]:
        """`init` from an initial population scored elsewhere (ask / tell's first step). With
        the scores `init` would compute (its scoring function called with the first half of
        `jr.split(key)`), the state is `init`'s. A candidate whose evaluation failed takes a
        -inf or NaN fitness and is not stored.

        **Arguments:**

        - `genotypes`: the initial population (any pytree with a leading batch axis), with
          its `descriptors`, `fitnesses` and the scoring's `extra`.
        - `repertoire`: a tessellation (the archive is then a `MAPElitesRepertoire` over it,
          annealing under CMA-MAE), or any `AbstractRepertoire` (`DNSRepertoire`,
          `UnstructuredRepertoire`, your own): its settings are kept and its slots shaped after
          the population (`AbstractRepertoire.emptied`).
        - `key`: a PRNG key (its second half seeds the emitter).
        - `result`: a tessellation over which a passive elitist archive receives every
          candidate and is what the metrics report (`MAPElitesState.result`): the fair
          QD-score of a repertoire without cells. CMA-MAE makes one over its own tessellation
          unless this is given.

        **Returns:** the state and the metrics of the first reported archive.
        """
        _, emitter_key = jr.split(self._device_key(key))
        n = fitnesses.shape[0]
        ids = self._first_id(jnp.zeros((), jnp.int32), n) + jnp.arange(n, dtype=jnp.int32)
        every = tree_all_gather((genotypes, descriptors, fitnesses, ids), self.axis_name)
        ids_or_none = every[3] if self.lineage else None
        sampled = isinstance(repertoire, AbstractSampledRepertoire)
        if sampled and self.lineage:
            raise ValueError(
                f"MAPElites.init: {type(repertoire).__name__} inserts by the scoring's samples "
                "and stores no ids: lineage=True cannot run on it"
            )
        extracting = isinstance(repertoire, ExtractRepertoire)
        if extracting and self.lineage:
            raise ValueError(
                "MAPElites.init: ExtractRepertoire re-inserts elites by their estimates and "
                "stores no ids: lineage=True cannot run on it"
            )
        if isinstance(self.emitter, Extraction) and self.axis_name is not None:
            raise ValueError(
                "MAPElites: Extraction on several devices would extract the same elites on "
                "each: run Extract-ME on one device"
            )
        first = tree_take(every[0], 0)
        first_id = None if ids_or_none is None else ids_or_none[0]
        annealed = self.archive_learning_rate is not None
        if isinstance(repertoire, AbstractTessellation):
            empty = MAPElitesRepertoire.empty(
                repertoire,
                first,
                first_id,
                learning_rate=self.archive_learning_rate,
                threshold_min=self.threshold_min,
            )
            if annealed and result is None:
                result = repertoire
        elif isinstance(repertoire, AbstractRepertoire):
            if annealed:
                raise ValueError(
                    "MAPElites.init: archive_learning_rate (CMA-MAE) anneals the cells of a "
                    "tessellation: give the tessellation, not a built repertoire"
                )
            empty = repertoire.emptied(first, first_id)
        else:
            raise TypeError(
                "MAPElites.init: repertoire must be an eqx_qd.AbstractTessellation or an "
                f"eqx_qd.AbstractRepertoire, got {type(repertoire).__name__}"
            )
        offered = self._offer(repertoire, ids_or_none, extra, every[2].shape[0])
        built, _ = empty.add(*every[:3], offered)
        passive = None
        if result is not None:
            if not isinstance(result, AbstractTessellation):
                raise TypeError(
                    "MAPElites.init: result must be an eqx_qd.AbstractTessellation, got "
                    f"{type(result).__name__}"
                )
            passive, _ = MAPElitesRepertoire.empty(result, first, first_id).add(
                *every[:3], ids_or_none
            )
        emitter_state = self.emitter.init(
            built, genotypes, descriptors, fitnesses, extra, key=emitter_key
        )
        state = MAPElitesState(built, emitter_state, 0, every[2].shape[0], passive)
        return state, qd_metrics(state.elites, self.qd_offset)

    def tell(
        self,
        state: MAPElitesState,
        asked: "Asked",
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra = None,
    ) -> tuple[MAPElitesState, QDMetrics, StepInfo]:
        """The second half of an iteration: insert the batch `ask` returned (`genotypes`),
        scored (`descriptors`, `fitnesses`, and the scoring's `extra`, such as
        `ScoringExtra`, or `None`), and update the emitter with `asked`.

        A candidate whose evaluation failed takes a NaN fitness (or descriptor): the
        repertoire refuses it, the emitter learns that it was not inserted, and every ranker
        puts it after every other candidate (a strategy never takes it for a parent).

        **Returns:** the new state, the metrics of the reported archive and the per-candidate
        `StepInfo`, as `step`.
        """
        if not isinstance(asked, Asked):
            raise TypeError(f"MAPElites.tell: asked must be what ask returned, got {asked!r}")
        state.repertoire.check_candidates(genotypes, descriptors, fitnesses, where="MAPElites.tell")
        emit_extra, update_key = asked.emit_extra, asked.update_key
        n = fitnesses.shape[0]
        ids = self._first_id(state.evaluations, n) + jnp.arange(n, dtype=jnp.int32)
        # With an axis, every device inserts the whole gathered batch: the repertoires stay equal.
        all_g, all_d, all_f, all_ids, all_extra = tree_all_gather(
            (genotypes, descriptors, fitnesses, ids, emit_extra), self.axis_name
        )
        ids_or_none = all_ids if self.lineage else None
        sources = all_extra.sources if isinstance(all_extra, ExtractionExtra) else None
        offered = self._offer(state.repertoire, ids_or_none, extra, all_f.shape[0], sources)
        repertoire, add_info = state.repertoire.add(all_g, all_d, all_f, offered)
        result = state.result
        if result is not None:
            result, result_info = result.add(all_g, all_d, all_f, ids_or_none)
        # Each device's emitter learns from its own slice of the gathered batch.
        own_info = self._own(add_info, n)
        emitter_state = self.emitter.state_update(
            state.emitter_state,
            repertoire,
            genotypes,
            descriptors,
            fitnesses,
            extra,
            add_info=own_info,
            key=update_key,
        )
        new_state = MAPElitesState(
            repertoire,
            emitter_state,
            state.iteration + 1,
            state.evaluations + all_f.shape[0],
            result,
        )
        # The steps' records (lineage, status) follow the archive the run reports.
        reported = add_info if result is None else result_info
        info = StepInfo(all_f, all_d, reported, all_extra, all_ids)
        return new_state, qd_metrics(new_state.elites, self.qd_offset), info


@jit
def run(
    algorithm: MAPElites, state: MAPElitesState, num_iterations: int, *, key: PRNGKey
) -> tuple[MAPElitesState, QDMetrics]:
    """`num_iterations` calls of `algorithm.update` in one `lax.scan`.

    Iteration `i` uses `jax.random.split(key, num_iterations)[i]`, so the result equals a Python
    loop of `MAPElites.update` with those keys, bit for bit where XLA rounds the iteration
    alike inside the scan and alone (the GA emitters do; a CMA emitter's matrix algebra may
    differ in the last bit, and its search then drifts apart). Returns the final state and the
    metrics history (each field with a leading `num_iterations` axis).
    """
    check.positive_int("run: num_iterations", num_iterations)
    keys = jr.split(key, num_iterations)
    return filter_scan(lambda s, k: algorithm.update(s, key=k), state, keys)
