"""eqx_qd: Quality-Diversity and population-based RL as Equinox modules.

The top level holds the library: repertoires, tessellations, selectors, variation operators,
emitters, MAP-Elites, QD metrics, tasks and environments, agents, training loops and PBT. Three
namespaces sit beside it: `eqx_qd.internal` (helpers for extending the library),
`eqx_qd.plotting` (matplotlib figures) and `eqx_qd.jobs` (run drivers, run folders, registries:
what the ``eqx-qd`` command runs). ``import eqx_qd`` imports neither matplotlib nor tqdm.
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError, version as _version

from . import internal as internal
from ._compile import compiler_options as compiler_options, jit as jit
from ._custom_types import (
    Centroids as Centroids,
    Descriptors as Descriptors,
    Fitnesses as Fitnesses,
    Genotypes as Genotypes,
    PRNGKey as PRNGKey,
)
from ._emitters.base import (
    AbstractEmitter as AbstractEmitter,
    AbstractStatelessEmitter as AbstractStatelessEmitter,
    ActorType as ActorType,
    Lineage as Lineage,
    parent_ids as parent_ids,
)
from ._emitters.composed import ComposedEmitter as ComposedEmitter
from ._emitters.mixing import MixingEmitter as MixingEmitter
from ._map_elites import (
    MAPElites as MAPElites,
    MAPElitesState as MAPElitesState,
    run as run,
    StepInfo as StepInfo,
)
from ._metrics import METRIC_NAMES as METRIC_NAMES, qd_metrics as qd_metrics, QDMetrics as QDMetrics
from ._qdrl.me_pbt import (
    PBTEmitter as PBTEmitter,
    PBTEmitterConfig as PBTEmitterConfig,
    PBTEmitterState as PBTEmitterState,
)
from ._qdrl.pga_me import (
    episode_transitions as episode_transitions,
    pgame_emitter as pgame_emitter,
    pgame_split as pgame_split,
    QualityPGEmitter as QualityPGEmitter,
    QualityPGState as QualityPGState,
)
from ._qdrl.scoring import (
    PolicyScorer as PolicyScorer,
    reevaluate as reevaluate,
    Reevaluation as Reevaluation,
    ScoringExtra as ScoringExtra,
)
from ._repertoire import (
    AddInfo as AddInfo,
    AddStatus as AddStatus,
    bytes_per_cell as bytes_per_cell,
    Elites as Elites,
    init_repertoire as init_repertoire,
    MapElitesRepertoire as MapElitesRepertoire,
)
from ._selectors import (
    AbstractSelector as AbstractSelector,
    FitnessProportionalSelector as FitnessProportionalSelector,
    UniformSelector as UniformSelector,
)
from ._sharded import (
    device_mesh as device_mesh,
    init_sharded as init_sharded,
    place_sharded as place_sharded,
    run_sharded as run_sharded,
    scan_sharded as scan_sharded,
)
from ._tasks import (
    AbstractTask as AbstractTask,
    Arm as Arm,
    Rastrigin as Rastrigin,
    Sphere as Sphere,
)
from ._tessellation import (
    AbstractTessellation as AbstractTessellation,
    cvt_centroids as cvt_centroids,
    CVTTessellation as CVTTessellation,
    GridTessellation as GridTessellation,
    nearest_centroid as nearest_centroid,
)
from ._variation import (
    AbstractMutation as AbstractMutation,
    AbstractVariation as AbstractVariation,
    gaussian_mutation as gaussian_mutation,
    GaussianMutation as GaussianMutation,
    isoline_variation as isoline_variation,
    IsoLineVariation as IsoLineVariation,
    MutatedVariation as MutatedVariation,
    polynomial_mutation as polynomial_mutation,
    PolynomialMutation as PolynomialMutation,
    sbx_crossover as sbx_crossover,
    SBXCrossover as SBXCrossover,
    uniform_mutation as uniform_mutation,
    UniformMutation as UniformMutation,
)
from .envs._base import (
    AbstractBaseEnv as AbstractBaseEnv,
    AbstractEnv as AbstractEnv,
    AbstractEnvState as AbstractEnvState,
    AbstractQDEnv as AbstractQDEnv,
    Arena as Arena,
    autoreset_step as autoreset_step,
    AutoResetStep as AutoResetStep,
    EnvState as EnvState,
    final_descriptor as final_descriptor,
    mean_descriptor as mean_descriptor,
    training_reset as training_reset,
    TrainingEnvState as TrainingEnvState,
)
from .envs._brax import (
    BraxQDEnv as BraxQDEnv,
    DEFAULT_BACKEND as DEFAULT_BACKEND,
    QD_BRAX_TASKS as QD_BRAX_TASKS,
)
from .envs._brax_multi_agent import (
    BraxMultiAgentEnv as BraxMultiAgentEnv,
    MA_BRAX_TASKS as MA_BRAX_TASKS,
)
from .envs._line_targets import LineTargets as LineTargets
from .envs._multi_agent import (
    AbstractMultiAgentEnv as AbstractMultiAgentEnv,
    MultiAgentState as MultiAgentState,
    SingleAgentView as SingleAgentView,
    TimeLimit as TimeLimit,
)
from .envs._point_maze import PointMaze as PointMaze
from .envs._rollout import (
    Episode as Episode,
    EpisodeStats as EpisodeStats,
    evaluate_episodes as evaluate_episodes,
    QDTransition as QDTransition,
    rollout as rollout,
    rollout_states as rollout_states,
    Transition as Transition,
)
from .rl._actors import (
    AbstractActor as AbstractActor,
    CategoricalActor as CategoricalActor,
    GaussianActor as GaussianActor,
    JointActor as JointActor,
    JointValueCritic as JointValueCritic,
    ValueCritic as ValueCritic,
)
from .rl._base import (
    AbstractAgent as AbstractAgent,
    AbstractAgentState as AbstractAgentState,
    AbstractHParams as AbstractHParams,
    AbstractTrainingRun as AbstractTrainingRun,
    EvalMetrics as EvalMetrics,
    TrainMetrics as TrainMetrics,
)
from .rl._buffers import ReplayBuffer as ReplayBuffer
from .rl._gae import gae as gae
from .rl._ippo import IPPO as IPPO
from .rl._layers import MLP as MLP
from .rl._normaliser import RunningNormaliser as RunningNormaliser
from .rl._off_policy import (
    AbstractOffPolicyAgent as AbstractOffPolicyAgent,
    evaluate as evaluate,
    init_off_policy as init_off_policy,
    OffPolicyState as OffPolicyState,
    train as train,
    train_iteration as train_iteration,
    warmup as warmup,
)
from .rl._pbt import (
    copy_into as copy_into,
    evaluate_population as evaluate_population,
    hparams_table as hparams_table,
    init_population as init_population,
    PBT as PBT,
    PBTInfo as PBTInfo,
    population_without_optimizer_states as population_without_optimizer_states,
    train_population as train_population,
    train_population_sharded as train_population_sharded,
)
from .rl._policies import (
    AbstractPolicy as AbstractPolicy,
    DeterministicPolicy as DeterministicPolicy,
    QCritics as QCritics,
    TanhGaussianPolicy as TanhGaussianPolicy,
)
from .rl._ppo import (
    PPO as PPO,
    PPO_SPACES as PPO_SPACES,
    PPOHParams as PPOHParams,
    PPORun as PPORun,
    PPOState as PPOState,
)
from .rl._sac import (
    SAC as SAC,
    SAC_SPACES as SAC_SPACES,
    SACHParams as SACHParams,
    SACState as SACState,
)
from .rl._spaces import (
    AbstractSpace as AbstractSpace,
    Choice as Choice,
    log_uniform_learning_rates as log_uniform_learning_rates,
    LogUniform as LogUniform,
    perturb_hparams as perturb_hparams,
    sample_hparams as sample_hparams,
    Uniform as Uniform,
)
from .rl._td3 import (
    TD3 as TD3,
    TD3_SPACES as TD3_SPACES,
    TD3HParams as TD3HParams,
    TD3State as TD3State,
)


try:
    __version__ = _version("eqx_qd")
except _PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"
