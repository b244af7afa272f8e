"""Multi-Objective MAP-Elites (Pierrot, Richard, Beguir, Cully, GECCO 2022): MAP-Elites whose
cells each keep a Pareto front (`ParetoRepertoire`), with any emitter of the library."""

import typing
from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, PyTree

from . import _validate as check
from ._compile import jit
from ._custom_types import Extra, Genotypes, PRNGKey
from ._emitters.base import AbstractEmitter
from ._map_elites import AbstractQDLoop, Asked, StepInfo
from ._metrics import moqd_metrics, MOQDMetrics
from ._misc import f32, filter_scan, i32, tree_all_gather, tree_take
from ._repertoire import AbstractMultiObjectiveRepertoire, ParetoRepertoire
from ._tessellation import AbstractTessellation


MultiObjectiveScoringFn = Callable[
    ..., tuple[Float[Array, "batch num_objectives"], Float[Array, "batch d"], Extra]
]
"""`scoring_fn(genotypes, *, key) -> (objectives, descriptors, extra)`."""


class MOMEState(eqx.Module):
    """Everything that changes during a multi-objective run.

    **Fields:** `repertoire` (the `ParetoRepertoire`, or the population of NSGA-II / SPEA2),
    `emitter_state`, `iteration` (iterations since `MOME.init`), `evaluations` (candidates
    scored so far) and `result`: a passive `ParetoRepertoire` over a tessellation that
    receives every candidate too and that the metrics describe, or `None`.
    """

    repertoire: AbstractMultiObjectiveRepertoire
    emitter_state: PyTree
    iteration: Int[Array, ""] = eqx.field(converter=i32)
    evaluations: Int[Array, ""] = eqx.field(default=0, converter=i32)
    result: ParetoRepertoire | None = None

    @property
    def elites(self) -> ParetoRepertoire:
        """The archive the run reports: `result` when there is one, else `repertoire`."""
        if self.result is not None:
            return self.result
        assert isinstance(self.repertoire, ParetoRepertoire)
        return self.repertoire


@typing.final
class MOME(AbstractQDLoop[MOMEState, MOQDMetrics]):
    """MOME: emit a batch, score its objective vectors, insert it into the cells' Pareto
    fronts, update the emitter, report `MOQDMetrics`.

    The emitters are the library's (`MixingEmitter` as MOME's paper and QDax, or any other):
    they draw parents through `ParetoRepertoire.select` (a cell uniformly among the
    occupied ones, then a member of its front uniformly) and learn from the scalar view, each
    candidate's sum of objectives and its `AddInfo`. Stateless and pure like `MAPElites`:
    `init`, `ask` / `tell` and `update`, or `run_mome` (all iterations in one jitted scan).

    **Fields:**

    - `emitter`: where candidates come from.
    - `scoring_fn`: `scoring_fn(genotypes, *, key) -> (objectives, descriptors, extra)`,
      objectives `(batch, num_objectives)`, higher is better.
    - `reference_point`: `(num_objectives,)`, what the hypervolumes are measured from.
    - `front_length`: the length of a cell's front when `init` is given a tessellation
      (QDax's `pareto_front_max_length`).
    - `axis_name`: the mesh axis under `shard_map` (`init_sharded`, `run_sharded`), or
      `None`. As `MAPElites`': each device emits and scores its own batch, every device
      inserts the gathered batches, so the archives stay equal and the emitter states are
      per device.
    """

    emitter: AbstractEmitter
    scoring_fn: MultiObjectiveScoringFn
    reference_point: Float[Array, " num_objectives"] = eqx.field(converter=f32)
    front_length: int = eqx.field(default=50, static=True)
    axis_name: str | None = eqx.field(default=None, static=True)

    def __check_init__(self):
        if not isinstance(self.emitter, AbstractEmitter):
            raise TypeError(f"MOME.emitter must be an eqx_qd.AbstractEmitter, got {self.emitter!r}")
        if not callable(self.scoring_fn):
            raise TypeError(f"MOME.scoring_fn must be callable, got {self.scoring_fn!r}")
        if self.reference_point.ndim != 1 or self.reference_point.shape[0] < 2:
            raise ValueError(
                "MOME.reference_point must have shape (num_objectives,) with at least two "
                f"objectives, got {self.reference_point.shape}"
            )
        check.finite("MOME.reference_point", self.reference_point)
        check.positive_int("MOME.front_length", self.front_length)

    @property
    def num_objectives(self) -> int:
        """The length of the reference point."""
        return self.reference_point.shape[0]

    def _scored(self, fitnesses, where: str):
        m = self.num_objectives
        if jnp.ndim(fitnesses) != 2 or jnp.shape(fitnesses)[1] != m:
            raise ValueError(
                f"{where}: the scoring function must return objectives of shape (batch, {m}) "
                f"(the reference point has {m}), got {jnp.shape(fitnesses)}"
            )

    def init_scored(
        self,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, "batch num_objectives"],
        repertoire: AbstractTessellation | AbstractMultiObjectiveRepertoire,
        extra: Extra = None,
        *,
        key: PRNGKey,
        result: AbstractTessellation | None = None,
    ) -> tuple[MOMEState, MOQDMetrics]:
        """`init` from a population scored elsewhere: `genotypes` with their `descriptors`,
        objective vectors `fitnesses` `(batch, num_objectives)` and scoring `extra`; the state
        `init` gives for the same scores. `repertoire`: a tessellation (fronts of
        `front_length`), or any `AbstractMultiObjectiveRepertoire` (a `ParetoRepertoire`, a
        population) whose settings are kept and whose slots are shaped after the population.
        `key`: a PRNG key (its second half seeds the emitter). `result`: a tessellation over
        which a passive `ParetoRepertoire` of `front_length` receives every candidate and is
        what the metrics report (required with a population). **Returns:** the state and the
        metrics."""
        self._scored(fitnesses, "MOME.init")
        _, emitter_key = jr.split(self._device_key(key))
        first = tree_take(genotypes, 0)
        own = (genotypes, descriptors, fitnesses)
        genotypes, descriptors, fitnesses = tree_all_gather(own, self.axis_name)
        if isinstance(repertoire, AbstractTessellation):
            empty = ParetoRepertoire.empty(
                repertoire, first, self.num_objectives, self.front_length
            )
        elif isinstance(repertoire, AbstractMultiObjectiveRepertoire):
            if repertoire.num_objectives != self.num_objectives:
                raise ValueError(
                    f"MOME.init: the repertoire keeps {repertoire.num_objectives} objectives, "
                    f"the reference point has {self.num_objectives}"
                )
            empty = repertoire.emptied(first)
        else:
            raise TypeError(
                "MOME.init: repertoire must be an eqx_qd.AbstractTessellation or an "
                f"eqx_qd.AbstractMultiObjectiveRepertoire, got {type(repertoire).__name__}"
            )
        passive = None
        if result is not None:
            if not isinstance(result, AbstractTessellation):
                raise TypeError(
                    "MOME.init: result must be an eqx_qd.AbstractTessellation, got "
                    f"{type(result).__name__}"
                )
            passive = ParetoRepertoire.empty(result, first, self.num_objectives, self.front_length)
            passive, _ = passive.add(genotypes, descriptors, fitnesses)
        elif not isinstance(empty, ParetoRepertoire):
            raise ValueError(
                f"MOME.init: a {type(empty).__name__} has no cells for the MOQD metrics: give "
                "result=tessellation (a passive Pareto archive that receives every candidate)"
            )
        built, _ = empty.add(genotypes, descriptors, fitnesses)
        g, d, f = own
        emitter_state = self.emitter.init(built, g, d, _scalar(f), extra, key=emitter_key)
        n = fitnesses.shape[0]
        state = MOMEState(built, emitter_state, 0, n, passive)
        return state, moqd_metrics(state.elites, self.reference_point)

    def tell(
        self,
        state: MOMEState,
        asked: Asked,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, "batch num_objectives"],
        extra: Extra = None,
    ) -> tuple[MOMEState, MOQDMetrics, StepInfo]:
        """Insert the batch `ask` returned (`genotypes`), scored (`descriptors`, objective vectors
        `fitnesses`, the scoring's `extra`), and update the emitter with `asked`.
        **Returns:** the new state, its metrics and the `StepInfo` (whose `fitnesses` are
        the sums of objectives)."""
        if not isinstance(asked, Asked):
            raise TypeError(f"MOME.tell: asked must be what ask returned, got {asked!r}")
        self._scored(fitnesses, "MOME.tell")
        state.repertoire.check_candidates(genotypes, descriptors, fitnesses, where="MOME.tell")
        n = fitnesses.shape[0]
        # With an axis, every device inserts the whole gathered batch: the archives stay equal.
        all_g, all_d, all_f, all_extra = tree_all_gather(
            (genotypes, descriptors, fitnesses, asked.emit_extra), self.axis_name
        )
        repertoire, add_info = state.repertoire.add(all_g, all_d, all_f)
        result = state.result
        if result is not None:
            result, _ = result.add(all_g, all_d, all_f)
        emitter_state = self.emitter.state_update(
            state.emitter_state,
            repertoire,
            genotypes,
            descriptors,
            _scalar(fitnesses),
            extra,
            add_info=self._own(add_info, n),
            key=asked.update_key,
        )
        total = all_f.shape[0]
        new_state = MOMEState(
            repertoire, emitter_state, state.iteration + 1, state.evaluations + total, result
        )
        ids = state.evaluations + jnp.arange(total, dtype=jnp.int32)
        info = StepInfo(_scalar(all_f), all_d, add_info, all_extra, ids)
        return new_state, moqd_metrics(new_state.elites, self.reference_point), info


def _scalar(fitnesses: Float[Array, "batch m"]) -> Float[Array, " batch"]:
    """Each candidate's sum of objectives: what single-objective emitters learn from."""
    return jnp.sum(fitnesses.astype(jnp.float32), axis=-1)


@jit
def run_mome(
    algorithm: MOME, state: MOMEState, num_iterations: int, *, key: PRNGKey
) -> tuple[MOMEState, MOQDMetrics]:
    """`num_iterations` calls of `algorithm.update` in one `lax.scan`, iteration `i` with
    `jax.random.split(key, num_iterations)[i]` (as `run` for MAP-Elites). Returns the final
    state and the metrics history (each field with a leading `num_iterations` axis)."""
    check.positive_int("run_mome: num_iterations", num_iterations)
    keys = jr.split(key, num_iterations)
    return filter_scan(lambda s, k: algorithm.update(s, key=k), state, keys)
