"""RL: the agent contract (`AbstractAgent` and its state, hyperparameter and run modules), TD3,
SAC, PPO and IPPO, the networks, buffers and observation statistics they are built from, the
optimiser steps and dtype converters an agent author needs, hyperparameter spaces, and PBT over
any agent."""

from .._misc import f32 as f32, i32 as i32
from ._actors import (
    AbstractActor as AbstractActor,
    CategoricalActor as CategoricalActor,
    GaussianActor as GaussianActor,
    JointActor as JointActor,
    JointValueCritic as JointValueCritic,
    ValueCritic as ValueCritic,
)
from ._base import (
    AbstractAgent as AbstractAgent,
    AbstractAgentState as AbstractAgentState,
    AbstractHParams as AbstractHParams,
    AbstractTrainingRun as AbstractTrainingRun,
    check_agent_shapes as check_agent_shapes,
    check_spaces as check_spaces,
    EvalMetrics as EvalMetrics,
    hparam as hparam,
    TrainMetrics as TrainMetrics,
)
from ._buffers import ReplayBuffer as ReplayBuffer
from ._gae import gae as gae
from ._ippo import IPPO as IPPO
from ._layers import (
    Dense as Dense,
    INITS as INITS,
    MATMUL_DTYPES as MATMUL_DTYPES,
    MLP as MLP,
    reinitialise as reinitialise,
)
from ._normaliser import RunningNormaliser as RunningNormaliser
from ._off_policy import (
    AbstractOffPolicyAgent as AbstractOffPolicyAgent,
    check_batch as check_batch,
    check_off_policy_fields as check_off_policy_fields,
    OffPolicyRun as OffPolicyRun,
)
from ._optim import (
    apply_adam as apply_adam,
    apply_clipped_adam as apply_clipped_adam,
    init_adam as init_adam,
    init_clipped_adam as init_clipped_adam,
    params_of as params_of,
    soft_update as soft_update,
)
from ._pbt import (
    evaluate_population as evaluate_population,
    hparams_table as hparams_table,
    init_population as init_population,
    PBT as PBT,
    PBTInfo as PBTInfo,
    PBTRound as PBTRound,
    population_groups as population_groups,
    train_population as train_population,
    train_population_sharded as train_population_sharded,
)
from ._policies import (
    AbstractPolicy as AbstractPolicy,
    DeterministicPolicy as DeterministicPolicy,
    QCritics as QCritics,
    TanhGaussianPolicy as TanhGaussianPolicy,
)
from ._ppo import (
    PPO as PPO,
    PPO_CONVENTIONS as PPO_CONVENTIONS,
    PPORun as PPORun,
    PPOState as PPOState,
    train_data_parallel as train_data_parallel,
)
from ._ppo_losses import PPO_SPACES as PPO_SPACES, PPOHParams as PPOHParams
from ._sac import (
    SAC as SAC,
    SAC_SPACES as SAC_SPACES,
    SACHParams as SACHParams,
    SACState as SACState,
)
from ._spaces import (
    AbstractSpace as AbstractSpace,
    Choice as Choice,
    log_uniform_learning_rates as log_uniform_learning_rates,
    LogUniform as LogUniform,
    perturb_hparams as perturb_hparams,
    sample_hparams as sample_hparams,
    Uniform as Uniform,
)
from ._td3 import (
    TD3 as TD3,
    TD3_SPACES as TD3_SPACES,
    TD3HParams as TD3HParams,
    TD3State as TD3State,
)


# What `from eqx_qd.rl import *` takes: the names above (tests/test_guards.py).
__all__ = [
    "AbstractActor",
    "AbstractAgent",
    "AbstractAgentState",
    "AbstractHParams",
    "AbstractOffPolicyAgent",
    "AbstractPolicy",
    "AbstractSpace",
    "AbstractTrainingRun",
    "apply_adam",
    "apply_clipped_adam",
    "CategoricalActor",
    "check_agent_shapes",
    "check_batch",
    "check_off_policy_fields",
    "check_spaces",
    "Choice",
    "Dense",
    "DeterministicPolicy",
    "EvalMetrics",
    "evaluate_population",
    "f32",
    "gae",
    "GaussianActor",
    "hparam",
    "hparams_table",
    "i32",
    "init_adam",
    "init_clipped_adam",
    "init_population",
    "INITS",
    "IPPO",
    "JointActor",
    "JointValueCritic",
    "log_uniform_learning_rates",
    "LogUniform",
    "MATMUL_DTYPES",
    "MLP",
    "OffPolicyRun",
    "params_of",
    "PBT",
    "PBTInfo",
    "PBTRound",
    "perturb_hparams",
    "population_groups",
    "PPO",
    "PPO_CONVENTIONS",
    "PPO_SPACES",
    "PPOHParams",
    "PPORun",
    "PPOState",
    "QCritics",
    "reinitialise",
    "ReplayBuffer",
    "RunningNormaliser",
    "SAC",
    "SAC_SPACES",
    "SACHParams",
    "SACState",
    "sample_hparams",
    "soft_update",
    "TanhGaussianPolicy",
    "TD3",
    "TD3_SPACES",
    "TD3HParams",
    "TD3State",
    "train_data_parallel",
    "train_population",
    "train_population_sharded",
    "TrainMetrics",
    "Uniform",
    "ValueCritic",
]
