"""eqx_qd: Quality-Diversity and population-based RL as Equinox modules.

The top level is the QD core (repertoires, tessellations, selectors, variation operators,
emitters, MAP-Elites, QD metrics, tasks, multi-device runs) and the bridges a QD user needs from
RL: policy scoring, re-evaluation and the PGA-ME and ME-PBT emitters. Beside it:

- `eqx_qd.envs`: environments (brax QD tasks, the point maze, multi-agent tasks), rollouts and
  the auto-reset stepping training loops use;
- `eqx_qd.rl`: the agent contract, TD3, SAC, PPO and IPPO, their networks, buffers and
  optimiser steps, hyperparameter spaces and PBT;
- `eqx_qd.internal`: pytree and control-flow helpers, and the input checks;
- `eqx_qd.plotting`, `eqx_qd.testing`, `eqx_qd.jobs`: figures (matplotlib), hypothesis
  strategies, and the run drivers behind the `eqx-qd` command. `import eqx_qd` imports none of
  them (nor matplotlib, tqdm or brax).
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError, version as _version

from . import envs as envs, internal as internal, rl as rl
from ._benchmark_tasks import (
    ArchimedeanSpiral as ArchimedeanSpiral,
    Checkered as Checkered,
    DeceptiveEvolvability as DeceptiveEvolvability,
    EmptyCircle as EmptyCircle,
    Islands as Islands,
    SelfSimilar as SelfSimilar,
    Square as Square,
)
from ._cma_es import CMAES as CMAES, CMAESState as CMAESState
from ._custom_types import (
    Centroids as Centroids,
    Descriptors as Descriptors,
    Fitnesses as Fitnesses,
    Genotypes as Genotypes,
    PRNGKey as PRNGKey,
)
from ._emitters.bandit import (
    BanditEmitter as BanditEmitter,
    BanditEmitterState as BanditEmitterState,
)
from ._emitters.base import (
    AbstractEmitter as AbstractEmitter,
    AbstractRestartingEmitter as AbstractRestartingEmitter,
    AbstractStatelessEmitter as AbstractStatelessEmitter,
    AbstractWholeBatchEmitter as AbstractWholeBatchEmitter,
    Lineage as Lineage,
    Origin as Origin,
    parent_ids as parent_ids,
)
from ._emitters.composed import ComposedEmitter as ComposedEmitter
from ._emitters.evolution_strategy import (
    EvolutionStrategyEmitter as EvolutionStrategyEmitter,
    EvolutionStrategyEmitterState as EvolutionStrategyEmitterState,
)
from ._emitters.extraction import Extraction as Extraction
from ._emitters.gradient_arborescence import (
    GradientArborescenceEmitter as GradientArborescenceEmitter,
    GradientArborescenceEmitterState as GradientArborescenceEmitterState,
)
from ._emitters.gradient_operator import GradientOperatorEmitter as GradientOperatorEmitter
from ._emitters.me_es import MEESEmitter as MEESEmitter, MEESEmitterState as MEESEmitterState
from ._emitters.mixing import MixingEmitter as MixingEmitter
from ._emitters.rankers import AbstractRanker as AbstractRanker, ranker as ranker
from ._es_base import AbstractEvolutionStrategy as AbstractEvolutionStrategy
from ._kmeans import cvt_centroids as cvt_centroids
from ._lm_ma_es import LMMAES as LMMAES, LMMAESState as LMMAESState
from ._map_elites import (
    Asked as Asked,
    MAPElites as MAPElites,
    MAPElitesState as MAPElitesState,
    run as run,
    StepInfo as StepInfo,
)
from ._metrics import (
    check_reference_point as check_reference_point,
    cqd_score as cqd_score,
    moqd_metrics as moqd_metrics,
    MOQDMetrics as MOQDMetrics,
    norm_qd_score as norm_qd_score,
    qd_metrics as qd_metrics,
    QDMetrics as QDMetrics,
    soft_qd_score as soft_qd_score,
)
from ._mome import MOME as MOME, MOMEState as MOMEState, run_mome as run_mome
from ._nearest import nearest_centroid as nearest_centroid
from ._openai_es import OpenAIES as OpenAIES, OpenAIESState as OpenAIESState
from ._pareto import hypervolume as hypervolume
from ._qdrl.aurora import SequenceAutoencoder as SequenceAutoencoder
from ._qdrl.dcrl import (
    dcrl_emitter as dcrl_emitter,
    DCRLEmitter as DCRLEmitter,
    DCRLEmitterState as DCRLEmitterState,
    inject_actor as inject_actor,
    normalise_descriptors as normalise_descriptors,
)
from ._qdrl.diversity import DiversityReward as DiversityReward
from ._qdrl.me_pbt import (
    PBTEmitter as PBTEmitter,
    PBTEmitterConfig as PBTEmitterConfig,
    PBTEmitterState as PBTEmitterState,
)
from ._qdrl.mome_pgx import mome_pgx_emitter as mome_pgx_emitter
from ._qdrl.pga_me import (
    pgame_emitter as pgame_emitter,
    qdpg_emitter as qdpg_emitter,
    QualityPGEmitter as QualityPGEmitter,
    QualityPGEmitterState as QualityPGEmitterState,
)
from ._qdrl.scoring import (
    ChunkedScorer as ChunkedScorer,
    DiscardDead as DiscardDead,
    episode_transitions as episode_transitions,
    FlatPolicyTask as FlatPolicyTask,
    PolicyScorer as PolicyScorer,
    reevaluate as reevaluate,
    Reevaluation as Reevaluation,
    ScoringExtra as ScoringExtra,
)
from ._repertoire import (
    AbstractCellRepertoire as AbstractCellRepertoire,
    AbstractMultiObjectiveRepertoire as AbstractMultiObjectiveRepertoire,
    AbstractObservationEncoder as AbstractObservationEncoder,
    AbstractRepertoire as AbstractRepertoire,
    AddInfo as AddInfo,
    AddStatus as AddStatus,
    Annealing as Annealing,
    AuroraRepertoire as AuroraRepertoire,
    DensityRepertoire as DensityRepertoire,
    discount_mlp as discount_mlp,
    DiscountModelRepertoire as DiscountModelRepertoire,
    DNSRepertoire as DNSRepertoire,
    Elites as Elites,
    ExtractRepertoire as ExtractRepertoire,
    init_repertoire as init_repertoire,
    LowSpreadRepertoire as LowSpreadRepertoire,
    MAPElitesRepertoire as MAPElitesRepertoire,
    NSGA2Repertoire as NSGA2Repertoire,
    ParetoRepertoire as ParetoRepertoire,
    SampledExtra as SampledExtra,
    SlidingBoundariesRepertoire as SlidingBoundariesRepertoire,
    SPEA2Repertoire as SPEA2Repertoire,
    to_dataframe as to_dataframe,
    UnstructuredRepertoire as UnstructuredRepertoire,
)
from ._sampling import (
    corrected_metrics as corrected_metrics,
    CorrectedMetrics as CorrectedMetrics,
    Reevaluated as Reevaluated,
    reevaluated as reevaluated,
    Sampled as Sampled,
)
from ._selectors import (
    AbstractFitnessSelector as AbstractFitnessSelector,
    AbstractSelector as AbstractSelector,
    FitnessProportionalSelector as FitnessProportionalSelector,
    NoveltySelector as NoveltySelector,
    NSLCSelector as NSLCSelector,
    UniformSelector as UniformSelector,
)
from ._sep_cma_es import SepCMAES as SepCMAES, SepCMAESState as SepCMAESState
from ._sharded import (
    device_mesh as device_mesh,
    init_sharded as init_sharded,
    run_sharded as run_sharded,
)
from ._strategies import EVOLUTION_STRATEGIES as EVOLUTION_STRATEGIES
from ._tasks import (
    AbstractScorer as AbstractScorer,
    AbstractTask as AbstractTask,
    AbstractWrappedTask as AbstractWrappedTask,
    Arm as Arm,
    MultiObjectiveRastrigin as MultiObjectiveRastrigin,
    MultiObjectiveSphere as MultiObjectiveSphere,
    Noisy as Noisy,
    ProjectedSphere as ProjectedSphere,
    Rastrigin as Rastrigin,
    Sphere as Sphere,
)
from ._tessellation import (
    AbstractTessellation as AbstractTessellation,
    CategoricalTessellation as CategoricalTessellation,
    CVTTessellation as CVTTessellation,
    GridTessellation as GridTessellation,
)
from ._variation import (
    AbstractMutation as AbstractMutation,
    AbstractVariation as AbstractVariation,
    GaussianMutation as GaussianMutation,
    IsoLineVariation as IsoLineVariation,
    MutatedVariation as MutatedVariation,
    PolynomialMutation as PolynomialMutation,
    SBXCrossover as SBXCrossover,
    UniformCrossover as UniformCrossover,
    UniformMutation as UniformMutation,
)


try:
    __version__ = _version("eqx_qd")
except _PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"


# What `from eqx_qd import *` takes: the names above (tests/test_guards.py).
__all__ = [
    "AbstractCellRepertoire",
    "AbstractEmitter",
    "AbstractEvolutionStrategy",
    "AbstractFitnessSelector",
    "AbstractMultiObjectiveRepertoire",
    "AbstractObservationEncoder",
    "AbstractMutation",
    "AbstractRanker",
    "AbstractRepertoire",
    "AbstractRestartingEmitter",
    "AbstractScorer",
    "AbstractSelector",
    "AbstractStatelessEmitter",
    "AbstractTask",
    "AbstractTessellation",
    "AbstractVariation",
    "AbstractWholeBatchEmitter",
    "AbstractWrappedTask",
    "AddInfo",
    "AddStatus",
    "Annealing",
    "Arm",
    "Asked",
    "AuroraRepertoire",
    "BanditEmitter",
    "BanditEmitterState",
    "CategoricalTessellation",
    "Centroids",
    "check_reference_point",
    "ChunkedScorer",
    "CMAES",
    "CMAESState",
    "ComposedEmitter",
    "corrected_metrics",
    "CorrectedMetrics",
    "cqd_score",
    "cvt_centroids",
    "CVTTessellation",
    "dcrl_emitter",
    "DCRLEmitter",
    "DCRLEmitterState",
    "DensityRepertoire",
    "Descriptors",
    "device_mesh",
    "DiscardDead",
    "discount_mlp",
    "DiscountModelRepertoire",
    "DiversityReward",
    "DNSRepertoire",
    "Elites",
    "envs",
    "episode_transitions",
    "EVOLUTION_STRATEGIES",
    "EvolutionStrategyEmitter",
    "EvolutionStrategyEmitterState",
    "Extraction",
    "ExtractRepertoire",
    "Fitnesses",
    "FitnessProportionalSelector",
    "FlatPolicyTask",
    "GaussianMutation",
    "Genotypes",
    "GradientArborescenceEmitter",
    "GradientArborescenceEmitterState",
    "GradientOperatorEmitter",
    "GridTessellation",
    "hypervolume",
    "init_repertoire",
    "init_sharded",
    "inject_actor",
    "internal",
    "IsoLineVariation",
    "Lineage",
    "LMMAES",
    "LMMAESState",
    "LowSpreadRepertoire",
    "MAPElites",
    "MAPElitesRepertoire",
    "MAPElitesState",
    "MEESEmitter",
    "MEESEmitterState",
    "MixingEmitter",
    "MOME",
    "MOMEState",
    "mome_pgx_emitter",
    "moqd_metrics",
    "MOQDMetrics",
    "MultiObjectiveRastrigin",
    "MultiObjectiveSphere",
    "MutatedVariation",
    "nearest_centroid",
    "Noisy",
    "norm_qd_score",
    "normalise_descriptors",
    "NoveltySelector",
    "NSGA2Repertoire",
    "NSLCSelector",
    "OpenAIES",
    "OpenAIESState",
    "Origin",
    "parent_ids",
    "ParetoRepertoire",
    "PBTEmitter",
    "PBTEmitterConfig",
    "PBTEmitterState",
    "pgame_emitter",
    "PolicyScorer",
    "PolynomialMutation",
    "PRNGKey",
    "ProjectedSphere",
    "qd_metrics",
    "QDMetrics",
    "qdpg_emitter",
    "QualityPGEmitter",
    "QualityPGEmitterState",
    "ranker",
    "Rastrigin",
    "reevaluate",
    "Reevaluated",
    "reevaluated",
    "Reevaluation",
    "rl",
    "run",
    "run_mome",
    "run_sharded",
    "Sampled",
    "SampledExtra",
    "SBXCrossover",
    "ScoringExtra",
    "SepCMAES",
    "SepCMAESState",
    "SequenceAutoencoder",
    "SlidingBoundariesRepertoire",
    "soft_qd_score",
    "SPEA2Repertoire",
    "Sphere",
    "StepInfo",
    "to_dataframe",
    "UniformCrossover",
    "UniformMutation",
    "UniformSelector",
    "UnstructuredRepertoire",
    "ArchimedeanSpiral",
    "Checkered",
    "DeceptiveEvolvability",
    "EmptyCircle",
    "Islands",
    "SelfSimilar",
    "Square",
]
