"""QDPG as a policy-search QD job: its config, presets, how its algorithm is built (MAP-Elites
over `qdpg_emitter`) and its registration as `eqx-qd run qdpg`.

The loop and run folder are the policy-search jobs' (`jobs/_policy_qd.py`): `actors.csv` gives
the quality learner's offspring the types `gradient` / `greedy`, the diversity learner's
`diversity` / `diversity_greedy`, the GA's `evo`.
"""

import dataclasses
from typing import Any, ClassVar

from .._map_elites import MAPElites
from .._qdrl.diversity import DiversityReward
from .._qdrl.pga_me import qdpg_emitter
from .._qdrl.scoring import DiscardDead
from .._validate import fraction, non_negative, positive, positive_int
from ..envs._base import AbstractQDEnv
from ..rl._layers import INITS
from ..rl._td3 import TD3, TD3HParams
from . import checks
from ._config import option
from ._job import register_job
from ._pgame import full_episodes
from ._policy_qd import (
    build_policy_scorer,
    ga_operators,
    policy_agent,
    PolicyQDJob,
    PolicyQDOptions,
    SMOKE_SIZES,
)
from ._registry import ENVIRONMENTS


def qdpg_split(batch_size: int, ga_fraction: float, diversity_fraction: float) -> tuple[int, ...]:
    """The quality, diversity and GA counts of a batch: `floor(fraction * batch_size)` for the
    GA and the diversity learner, the rest for the quality learner (`QDPGConfig` asks 2 of each
    learner). QDax's example, 100 with 0.33 and 0.33, is 34, 33 and 33."""
    ga = int(ga_fraction * batch_size)
    diversity = int(diversity_fraction * batch_size)
    return batch_size - ga - diversity, diversity, ga


@dataclasses.dataclass(frozen=True)
class QDPGConfig(PolicyQDOptions):
    """QDPG settings (Pierrot et al. 2022, as QDax 0.5's `QDPGEmitter` and its
    `examples/qdpg.ipynb` run it), in the house's words.

    Each batch holds policy-gradient offspring on the task's reward (a TD3 critic and greedy
    actor, as PGA-ME's, started as QDax's), policy-gradient offspring on the diversity
    reward (a second critic, buffer and greedy actor, learning the novelty of each step's state
    descriptor against an archive of the visited ones: `DiversityReward`), and GA offspring.
    `diversity_fraction` and `ga_fraction` of `batch_size` go to the last two (`qdpg_split`),
    the rest to the first.

    The defaults are a local run of minutes on a laptop CPU: the point maze (the QDPG paper's
    first task: the state descriptor is the position, which the diversity reward spreads),
    100-step episodes, 256 cells, batches of 64. `--preset qdax` is QDax's example notebook
    (walker2d_uni, whose state descriptors are the two binary feet contacts: the diversity
    reward is the same everywhere; batches of 34 + 33 + 33, 250-step episodes from random
    initial states, 100 iterations, 1024 cells, (256, 256) policies); `--preset smoke` a run
    of a minute or two through every part. `greedy_lr` is both greedy actors' learning rate,
    the other critic keys are each learner's; as in QDax, the target critics follow after every
    critic step (the greedy actors every `policy_delay`).

    On several devices each device varies its own share of each part and keeps its own
    buffers; both critics are data parallel, and every device's archive reads every device's
    state descriptors (so they stay equal). `devices` must divide each part.
    """

    JOB: ClassVar[str] = "qdpg"

    # The shared keys whose defaults are QDPG's (they keep their place in the order).
    env: str = option(
        "point_maze",
        "registered QD environment (one whose state descriptors are positions gives the "
        "diversity reward its meaning)",
        check=ENVIRONMENTS.check("qd"),
    )
    policy_init: str = option(
        "lecun_uniform",
        "the policies' initial weights: lecun_uniform with zero biases (QDax), "
        "xavier_uniform, uniform",
        check=checks.one_of(*INITS),
    )
    critic_init: str = option(
        "lecun_uniform",
        "the critics' initial weights: lecun_uniform (QDax), uniform, xavier_uniform",
        check=checks.one_of(*INITS),
    )

    ga_fraction: float = option(0.33, "fraction of each batch from the GA", check=fraction)
    diversity_fraction: float = option(
        0.33, "fraction of each batch from the diversity policy gradient", check=fraction
    )
    greedy_lr: float = option(3e-4, "both greedy actors' learning rate", check=non_negative)
    archive_acceptance_threshold: float = option(
        0.1, "distance a state descriptor keeps from the archive's to enter it", check=positive
    )
    archive_size: int = option(
        10_000, "state descriptors the archive keeps (first in, first out)", check=positive_int
    )
    novelty_nearest_neighbors: int = option(
        5, "k of the diversity reward's k nearest state descriptors", check=positive_int
    )
    novelty_scaling: float = option(1.0, "factor of the diversity reward", check=non_negative)

    def check(self) -> None:
        super().check()
        quality, diversity, ga = self.split
        if quality < 2 or diversity < 2:
            raise ValueError(
                f"batch_size {self.batch_size} with ga_fraction {self.ga_fraction} and "
                f"diversity_fraction {self.diversity_fraction} gives {quality} quality and "
                f"{diversity} diversity slots: each learner needs 2 (its greedy actor and a "
                "policy-gradient child)"
            )
        parts = {"quality slots": quality, "diversity slots": diversity, "GA slots": ga}
        self.check_devices(parts)

    @property
    def split(self) -> tuple[int, ...]:
        """The quality, diversity and GA counts of a batch (`qdpg_split`)."""
        return qdpg_split(self.batch_size, self.ga_fraction, self.diversity_fraction)


QDAX_PRESET: dict[str, Any] = dict(
    env="walker2d_uni",
    cells=1024,
    cvt_samples=50_000,
    batch_size=100,
    random_init=100,
    init_batch_size=100,
    evaluations=100 + 100 * 100,
    episode_length=250,
    hidden=(256, 256),
    pg_steps=100,
    buffer_size=1_000_000,
    snapshot_every=1_000,
    checkpoint_every=2_000,
)
"""QDax's `examples/qdpg.ipynb`: the keys that differ from the local defaults (its initial
population is one batch of random policies; its `reset_fn` draws each episode's initial
state, as `reset_noise` does)."""

SMOKE_PRESET: dict[str, Any] = dict(SMOKE_SIZES)
"""A run of a minute or two through every part: to try a change, not to see learning."""

QDPGConfig.PRESETS = {"qdax": QDAX_PRESET, "smoke": SMOKE_PRESET}


def build_qdpg(config: QDPGConfig, env: AbstractQDEnv) -> tuple[MAPElites, TD3]:
    """The algorithm (`MAPElites` with lineage over `qdpg_emitter`) and the TD3 agent whose
    policy network the genotypes are. With `devices > 1` on the mesh axis `"p"`."""
    td3 = policy_agent(config, env, critic_target_every_step=True)  # QDax's critic update
    n = config.devices
    axis = "p" if n > 1 else None
    quality, diversity, ga = (part // n for part in config.split)
    variation, mutation = ga_operators(config)
    emitter = qdpg_emitter(
        quality_batch_size=quality,
        diversity_batch_size=diversity,
        ga_batch_size=ga,
        diversity=DiversityReward(
            k=config.novelty_nearest_neighbors,
            scaling=config.novelty_scaling,
            acceptance_threshold=config.archive_acceptance_threshold,
            archive_size=config.archive_size,
        ),
        td3=td3,
        hparams=TD3HParams(
            policy_lr=config.greedy_lr,
            critic_lr=config.critic_lr,
            discount=config.discount,
            tau=config.tau,
            policy_noise=config.policy_noise,
            noise_clip=config.noise_clip,
        ),
        critic_steps=config.critic_steps,
        pg_steps=config.pg_steps,
        pg_lr=config.pg_lr,
        buffer_size=config.buffer_size // n,
        variation=variation,
        mutation=mutation,
        axis_name=axis,
    )
    scorer = build_policy_scorer(config, env)
    scoring = scorer if config.insert_dead else DiscardDead(scorer)
    return MAPElites(emitter, scoring, scorer.qd_offset, lineage=True, axis_name=axis), td3


register_job(
    PolicyQDJob(
        name="qdpg",
        config_cls=QDPGConfig,
        make=build_qdpg,
        env_steps=full_episodes,
        help="QDPG (default: point_maze, 10k evaluations of 100 steps)",
        description=(
            "The defaults are minutes on a laptop CPU; --preset qdax is QDax's example "
            "notebook, --preset smoke a run of a minute or two. Options override them."
        ),
    )
)
