"""Environments: the single- and multi-agent protocols, the brax QD tasks (single- and
multi-objective) and multi-agent robots, MuJoCo Playground's environments and QD tasks, the
point maze, Kheperax's mazes, `LineTargets`, fixed-length rollouts with masking, full-episode
evaluation, and the auto-reset stepping that training loops (yours too) are written with."""

from ._base import (
    AbstractBaseEnv as AbstractBaseEnv,
    AbstractEnv as AbstractEnv,
    AbstractEnvState as AbstractEnvState,
    AbstractMultiObjectiveQDEnv as AbstractMultiObjectiveQDEnv,
    AbstractQDEnv as AbstractQDEnv,
    AbstractRenderable as AbstractRenderable,
    Arena as Arena,
    autoreset_step as autoreset_step,
    AutoResetStep as AutoResetStep,
    EnvState as EnvState,
    final_descriptor as final_descriptor,
    mean_descriptor as mean_descriptor,
    training_reset as training_reset,
    TrainingEnvState as TrainingEnvState,
)
from ._brax import (
    BraxMultiObjectiveEnv as BraxMultiObjectiveEnv,
    BraxQDEnv as BraxQDEnv,
    MO_BRAX_TASKS as MO_BRAX_TASKS,
)
from ._brax_multi_agent import BraxMultiAgentEnv as BraxMultiAgentEnv
from ._kheperax import (
    KHEPERAX_MAPS as KHEPERAX_MAPS,
    KheperaxMap as KheperaxMap,
    KheperaxMaze as KheperaxMaze,
)
from ._line_targets import LineTargets as LineTargets
from ._multi_agent import (
    AbstractMultiAgentEnv as AbstractMultiAgentEnv,
    MultiAgentState as MultiAgentState,
    SingleAgentView as SingleAgentView,
    TimeLimit as TimeLimit,
)
from ._playground import (
    MENAGERIE_ENV_VAR as MENAGERIE_ENV_VAR,
    MJX_IMPLS as MJX_IMPLS,
    PLAYGROUND_QD_TASKS as PLAYGROUND_QD_TASKS,
    PlaygroundEnv as PlaygroundEnv,
    PlaygroundQDEnv as PlaygroundQDEnv,
)
from ._point_maze import PointMaze as PointMaze
from ._rollout import (
    Episode as Episode,
    EpisodeStats as EpisodeStats,
    evaluate_episodes as evaluate_episodes,
    QDTransition as QDTransition,
    rollout as rollout,
    rollout_states as rollout_states,
    Transition as Transition,
)


# What `from eqx_qd.envs import *` takes: the names above (tests/test_guards.py).
__all__ = [
    "AbstractBaseEnv",
    "AbstractEnv",
    "AbstractEnvState",
    "AbstractMultiAgentEnv",
    "AbstractMultiObjectiveQDEnv",
    "AbstractQDEnv",
    "AbstractRenderable",
    "Arena",
    "autoreset_step",
    "AutoResetStep",
    "BraxMultiAgentEnv",
    "BraxMultiObjectiveEnv",
    "BraxQDEnv",
    "EnvState",
    "Episode",
    "EpisodeStats",
    "evaluate_episodes",
    "final_descriptor",
    "LineTargets",
    "mean_descriptor",
    "MultiAgentState",
    "PointMaze",
    "QDTransition",
    "rollout",
    "rollout_states",
    "SingleAgentView",
    "TimeLimit",
    "training_reset",
    "TrainingEnvState",
    "Transition",
    "KHEPERAX_MAPS",
    "KheperaxMap",
    "KheperaxMaze",
    "MENAGERIE_ENV_VAR",
    "MO_BRAX_TASKS",
    "MJX_IMPLS",
    "PLAYGROUND_QD_TASKS",
    "PlaygroundEnv",
    "PlaygroundQDEnv",
]
