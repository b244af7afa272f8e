"""Helpers for extending eqx_qd: what the library's own modules are written with, for your
emitters, repertoires, agents and environments. (What an agent author needs beyond these, the
optimiser steps, soft updates and agent checks, is in `eqx_qd.rl`.)

- **dtypes**: `f32`, `i32`: converters that pin float32 / int32 arrays (use them for
  hyperparameter fields: no weak types, no retrace when a value changes).
- **pytrees of populations** (array leaves with a leading batch axis; non-array leaves such as an
  MLP's activation pass through): `batch_size_of`, `tree_take`, `tree_scatter`, `tree_slice`,
  `tree_concatenate`, `tree_zeros_batch`, `tree_all_gather`, `tree_top_k` (the top rows over every
  device, as ME-PBT's exchange gathers them); `random_permutation` (a fast
  uniform shuffle, for minibatches); `bytes_per_cell` (a repertoire's memory per cell).
- **loops over modules**: `filter_scan`, `filter_cond`, `filter_while_loop`: `lax` control flow
  whose carry may hold non-array leaves (checked unchanged).
- **multi-device plumbing** under `run_sharded`: `place_sharded` (a state laid out on a mesh)
  and `scan_sharded` (the sharded scan over given keys).
- **the machine** (`machine()`, a `Machine`): what the package reads of it at run time (JAX's
  backend, the CPU and its vector features) for the choices whose faster code path depends on
  it, and `host_devices_per_core` (one host device per usable core, before JAX starts).
- **parts of the algorithms, for variants of them**: `elites_box` (the box around a
  repertoire's elites, the `extent` of one without bounds), `uniform_genotypes` (a task's
  uniform initial genotypes), `competition_fitness` (DNS's), `ucb1_choice` (the bandit's),
  and DCRL-ME's descriptor-conditioned transitions (`DescriptorTransition`,
  `descriptor_similarity`, `conditioned_transitions`); the guided repertoires' base
  (`AbstractGuidedRepertoire`: an elitist result archive beside a model of the descriptor
  space), Density Descent Search's `kde_density` and `Reservoir` (Li's reservoir sample);
  the repertoires that keep a tessellation's elites beside state of their own
  (`AbstractRepertoireOverCells`, their elites `to_map_elites`); under noise, the repertoires
  that insert by a candidate's samples
  (`AbstractSampledRepertoire`, ME-LS's `dispersion`), the samples themselves
  (`sample_scores`, `Samples`) and what they come to (`estimate` / `ESTIMATORS`, `spread` /
  `SPREADS`), from which `Sampled` and `reevaluated` are made (`rebuilt`: `reevaluated` from
  samples scored elsewhere); Extract-ME's pieces between
  its emitter and its repertoire (`Extracted`, `ExtractionExtra`, `ExtractOffer`); for
  multi-objective variants, Pareto dominance (`dominates`, `non_dominated`), MOME-PGX's
  selection weights (`front_crowding`), the cells' hypervolumes (`per_cell_hypervolumes`) and
  the GA baselines' base
  (`AbstractPopulationRepertoire`: survivors of stored + batch by a ranking of its own);
  the loops' shared base (`AbstractQDLoop`: `init`, `ask`, `step` and `update` of
  `MAPElites` and `MOME` over their own `init_scored` and `tell`).
- **validation** (`check`): the one family of tracer-tolerant input checks (`check.positive_int`,
  `check.fraction`, `check.in_range`, `check.finite`, ...) every `__check_init__` uses, with
  `is_concrete`.

Semi-public: documented and tested, but it may change faster than the top level.
"""

from . import _validate as check
from ._emitters.bandit import ucb1_choice as ucb1_choice
from ._emitters.extraction import ExtractionExtra as ExtractionExtra
from ._machine import (
    host_devices_per_core as host_devices_per_core,
    Machine as Machine,
    machine as machine,
)
from ._map_elites import AbstractQDLoop as AbstractQDLoop
from ._metrics import per_cell_hypervolumes as per_cell_hypervolumes
from ._misc import (
    batch_size_of as batch_size_of,
    f32 as f32,
    filter_cond as filter_cond,
    filter_scan as filter_scan,
    filter_while_loop as filter_while_loop,
    i32 as i32,
    poison_if_empty as poison_if_empty,
    random_permutation as random_permutation,
    tree_all_gather as tree_all_gather,
    tree_concatenate as tree_concatenate,
    tree_scatter as tree_scatter,
    tree_slice as tree_slice,
    tree_take as tree_take,
    tree_top_k as tree_top_k,
    tree_zeros_batch as tree_zeros_batch,
)
from ._pareto import (
    dominates as dominates,
    front_crowding as front_crowding,
    non_dominated as non_dominated,
)
from ._qdrl.dcrl import (
    conditioned_transitions as conditioned_transitions,
    descriptor_similarity as descriptor_similarity,
    DescriptorTransition as DescriptorTransition,
)
from ._qdrl.diversity import StateArchive as StateArchive
from ._repertoire import (
    AbstractGuidedRepertoire as AbstractGuidedRepertoire,
    AbstractPopulationRepertoire as AbstractPopulationRepertoire,
    AbstractRepertoireOverCells as AbstractRepertoireOverCells,
    AbstractSampledRepertoire as AbstractSampledRepertoire,
    aurora_slots as aurora_slots,
    AuroraOffer as AuroraOffer,
    bytes_per_cell as bytes_per_cell,
    competition_fitness as competition_fitness,
    dispersion as dispersion,
    elites_box as elites_box,
    Extracted as Extracted,
    ExtractOffer as ExtractOffer,
    kde_density as kde_density,
    Reservoir as Reservoir,
)
from ._sampling import (
    estimate as estimate,
    ESTIMATORS as ESTIMATORS,
    rebuilt as rebuilt,
    sample_scores as sample_scores,
    Samples as Samples,
    spread as spread,
    SPREADS as SPREADS,
)
from ._sharded import place_sharded as place_sharded, scan_sharded as scan_sharded
from ._tasks import uniform_genotypes as uniform_genotypes
from ._validate import is_concrete as is_concrete


__all__ = [
    "AbstractGuidedRepertoire",
    "AbstractPopulationRepertoire",
    "AbstractQDLoop",
    "AbstractRepertoireOverCells",
    "AbstractSampledRepertoire",
    "aurora_slots",
    "AuroraOffer",
    "batch_size_of",
    "bytes_per_cell",
    "check",
    "competition_fitness",
    "conditioned_transitions",
    "descriptor_similarity",
    "DescriptorTransition",
    "dispersion",
    "dominates",
    "elites_box",
    "estimate",
    "ESTIMATORS",
    "Extracted",
    "ExtractionExtra",
    "ExtractOffer",
    "f32",
    "filter_cond",
    "filter_scan",
    "filter_while_loop",
    "front_crowding",
    "host_devices_per_core",
    "i32",
    "is_concrete",
    "kde_density",
    "Machine",
    "machine",
    "non_dominated",
    "per_cell_hypervolumes",
    "place_sharded",
    "poison_if_empty",
    "random_permutation",
    "rebuilt",
    "Reservoir",
    "sample_scores",
    "Samples",
    "scan_sharded",
    "spread",
    "SPREADS",
    "StateArchive",
    "tree_all_gather",
    "tree_concatenate",
    "tree_scatter",
    "tree_slice",
    "tree_take",
    "tree_top_k",
    "tree_zeros_batch",
    "ucb1_choice",
    "uniform_genotypes",
]
