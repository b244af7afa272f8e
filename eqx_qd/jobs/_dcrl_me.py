"""DCRL-MAP-Elites (and DCG-ME) as a policy-search QD job: its config, presets, how its
algorithm is built (the descriptor-conditioned emitter), its environment-step count and its
registration as `eqx-qd run dcrl-me`.

The loop and run folder are the policy-search jobs' (`jobs/_policy_qd.py`: `actors.csv` gives
the injected actors' type `injected`); the DCRL repository's Hydra config files
(`configs/dcrl_me.yaml`, `configs/algo/*.yaml`, ...) are read by `jobs/_translators.py`.
"""

import dataclasses
from typing import Any, ClassVar

from .._map_elites import MAPElites
from .._qdrl.dcrl import dcrl_emitter
from .._qdrl.scoring import DiscardDead
from .._validate import finite, non_negative, non_negative_int, positive, positive_int
from ..envs._base import AbstractQDEnv
from ..rl._layers import INITS
from ..rl._td3 import TD3, TD3HParams
from . import checks
from ._config import option
from ._job import register_job, Translator
from ._policy_qd import (
    build_policy_scorer,
    ga_operators,
    policy_agent,
    PolicyQDJob,
    PolicyQDOptions,
    SMOKE_SIZES,
)
from ._registry import ENVIRONMENTS
from ._translators import QDAX_NAMES, read_dcrl_me_config


@dataclasses.dataclass(frozen=True)
class DCRLMEConfig(PolicyQDOptions):
    """DCRL-MAP-Elites settings, in the house's words. The defaults are a local run, minutes
    on a laptop CPU whose coverage grows (PGA-ME's local size: `walker2d_uni` with 100-step
    episodes, 10,240 evaluations, 256 cells, batch 64 = 32 GA + 16 policy-gradient + 16
    injected actors). `--preset paper` is the paper's (Faldor et al., TELO 2024, and the DCRL
    repository's `configs/`: `ant_omni` with 250-step episodes, CVT 1024, batch 256 = 128 GA +
    64 policy-gradient + 64 injected actors, 4000 iterations, 3000 critic steps and 150
    policy-gradient steps per iteration: `PAPER_PRESET`). `--preset dcg-me` is DCG-ME at the
    local size (no injection: half the batch policy-gradient children, and episodes of the
    conditioned actor for its data), `--preset dcg-me-paper` at the paper's, and `--preset
    smoke` a run of a minute or two that goes through every part.

    The GA takes the rest of the batch: `batch_size - pg_batch_size - ai_batch_size`.
    `evaluations` counts the candidates offered to the archive, as the repository does; the
    `env_steps` column also counts DCG-ME's actor episodes. QDax's `DCRLConfig` names and the
    repository's are read from TOML files too (`RENAMED`).
    """

    JOB: ClassVar[str] = "dcrl-me"

    # The shared keys whose defaults are DCRL-ME's (they keep their place in the key order).
    env: str = option("walker2d_uni", "registered QD environment", check=ENVIRONMENTS.check("qd"))
    cells: int = option(256, "CVT cells", check=positive_int)
    evaluations: int = option(
        10_240, "evaluation budget (offered to the archive)", check=positive_int
    )
    batch_size: int = option(64, "candidates per iteration", check=positive_int)
    random_init: int = option(256, "random policies evaluated first", check=positive_int)
    init_batch_size: int = option(128, "random policies scored at once", check=positive_int)
    critic_steps: int = option(300, "critic steps per iteration", check=non_negative_int)
    pg_steps: int = option(10, "policy-gradient steps per offspring", check=non_negative_int)
    minibatch_size: int = option(100, "transitions per critic / PG step", check=positive_int)
    pg_lr: float = option(
        5e-3,
        "policy-gradient variation learning rate (the repository's configs; QDax's "
        "DCRLConfig: 1e-3)",
        check=non_negative,
    )
    hidden: tuple[int, ...] = option((64, 64), "policy hidden layer widths")
    cvt_samples: int = option(20_000, "uniform samples for CVT k-means", check=positive_int)
    snapshot_every: int = option(2_048, "evaluations between archive snapshots", check=positive_int)
    checkpoint_every: int = option(
        2_048,
        "evaluations between checkpoints of the whole state (and one at the end)",
        check=positive,
    )
    episode_length: int = option(100, "steps per episode", check=positive_int)
    buffer_size: int = option(200_000, "replay buffer capacity", check=positive_int)
    policy_init: str = option(
        "lecun_uniform",
        "the policies' and the conditioned actor's initial weights: lecun_uniform with zero "
        "biases (QDax and the DCRL repository), xavier_uniform, uniform",
        check=checks.one_of(*INITS),
    )
    critic_init: str = option(
        "lecun_uniform",
        "the conditioned critic's initial weights (lecun_uniform: QDax and the repository)",
        check=checks.one_of(*INITS),
    )

    # DCRL-ME's own keys.
    pg_batch_size: int = option(
        16, "policy-gradient children per iteration", check=non_negative_int
    )
    ai_batch_size: int = option(
        16, "injected actors per iteration (0: DCG-ME)", check=non_negative_int
    )
    actor_evals: int = option(
        0,
        "episodes of the conditioned actor per iteration, for the replay buffer only (DCG-ME: 64)",
        check=non_negative_int,
    )
    lengthscale: float = option(
        0.1, "similarity length scale (descriptors normalised to [-1, 1])", check=positive
    )
    reward_offset: float = option(
        0.0,
        "added to rewards before the similarity scaling, which assumes rewards >= 0 (the "
        "papers' tasks; the point maze's minus distance needs its 2.83)",
        check=finite,
    )
    actor_lr: float = option(3e-4, "conditioned actor learning rate", check=non_negative)
    reward_scaling: float = option(1.0, "reward multiplier in the critic's target", check=positive)

    def check(self) -> None:
        super().check()
        self.check_devices(
            {
                "batch_size": self.batch_size,
                "pg_batch_size": self.pg_batch_size,
                "ai_batch_size": self.ai_batch_size,
                "actor_evals": self.actor_evals,
            }
        )
        if self.pg_batch_size + self.ai_batch_size > self.batch_size:
            raise ValueError(
                f"pg_batch_size ({self.pg_batch_size}) + ai_batch_size ({self.ai_batch_size}) "
                f"exceed batch_size ({self.batch_size}); the GA takes the rest"
            )
        if self.affine and (self.ai_batch_size or self.actor_evals):
            raise ValueError(
                "affine leaves the policies' layers without biases; actor injection "
                "(ai_batch_size, actor_evals) folds the target descriptor into the first "
                "layer's bias"
            )

    @property
    def ga_batch_size(self) -> int:
        """The GA's children per iteration: the batch less the other two parts."""
        return self.batch_size - self.pg_batch_size - self.ai_batch_size


PAPER_PRESET: dict[str, Any] = dict(
    env="ant_omni",
    episode_length=250,
    cells=1024,
    evaluations=256 + 4000 * 256,
    batch_size=256,
    random_init=256,
    init_batch_size=256,
    pg_batch_size=64,
    ai_batch_size=64,
    critic_steps=3000,
    pg_steps=150,
    hidden=(128, 128),
    cvt_samples=50_000,
    snapshot_every=25_600,
    checkpoint_every=25_600,
    buffer_size=1_000_000,
)
"""The paper's setting (TELO 2024, the DCRL repository's `configs/dcrl_me.yaml`): the keys
that differ from the local defaults."""

DCG_ME: dict[str, Any] = dict(pg_batch_size=32, ai_batch_size=0, actor_evals=16)
"""DCG-ME at the local size: the repository's `configs/algo/dcg_me.yaml` split (half the batch
policy-gradient children, no injected actors, a quarter of the batch in actor episodes)."""

DCG_ME_PAPER: dict[str, Any] = {
    **PAPER_PRESET,
    "pg_batch_size": 128,
    "ai_batch_size": 0,
    "actor_evals": 64,
}
"""DCG-ME at the paper's size, as the repository's `configs/algo/dcg_me.yaml`."""

SMOKE_PRESET: dict[str, Any] = {**SMOKE_SIZES, "pg_batch_size": 8, "ai_batch_size": 8}
"""PGA-ME's smoke size with DCRL-ME's split (16 GA, 8 policy-gradient, 8 injected): a run of a
minute or two through every part, to try a change, not to see learning."""

DCRLMEConfig.PRESETS = {
    "paper": PAPER_PRESET,
    "dcg-me": DCG_ME,
    "dcg-me-paper": DCG_ME_PAPER,
    "smoke": SMOKE_PRESET,
}

DCRLMEConfig.RENAMED = {**QDAX_NAMES, "num_reevals": "reevaluations"}  # (and an older key)


def build_dcrl_me(config: DCRLMEConfig, env: AbstractQDEnv) -> tuple[MAPElites, TD3]:
    """The algorithm (`MAPElites` with lineage and the `DCRLEmitter`) and the TD3 agent that
    defines the policies (the conditioned actor and critic are it widened by the
    descriptors)."""
    # QDax's DCRL soft-updates the target critic after every critic step.
    td3 = policy_agent(config, env, critic_target_every_step=True)
    n = config.devices  # each device's share of the batch, the buffer and the actor episodes
    axis = "p" if n > 1 else None
    hparams = TD3HParams(
        policy_lr=config.actor_lr,
        critic_lr=config.critic_lr,
        discount=config.discount,
        reward_scaling=config.reward_scaling,
        tau=config.tau,
        policy_noise=config.policy_noise,
        noise_clip=config.noise_clip,
    )
    scorer = build_policy_scorer(config, env)
    variation, mutation = ga_operators(config)
    emitter = dcrl_emitter(
        td3=td3,
        hparams=hparams,
        descriptor_bounds=env.descriptor_bounds,
        ga_batch_size=config.ga_batch_size // n,
        pg_batch_size=config.pg_batch_size // n,
        ai_batch_size=config.ai_batch_size // n,
        lengthscale=config.lengthscale,
        reward_offset=config.reward_offset,
        critic_steps=config.critic_steps,
        pg_steps=config.pg_steps,
        pg_lr=config.pg_lr,
        buffer_size=config.buffer_size // n,
        variation=variation,
        mutation=mutation,
        actor_evals=config.actor_evals // n,
        # The conditioned actor's episodes are training data: one each, sampled or not.
        scorer=build_policy_scorer(config, env, sampled=False) if config.actor_evals else None,
        axis_name=axis,
    )
    scoring = scorer if config.insert_dead else DiscardDead(scorer)
    algo = MAPElites(emitter, scoring, scorer.qd_offset, lineage=True, axis_name=axis)
    return algo, td3


def with_actor_episodes(config: DCRLMEConfig, evaluations: int) -> int:
    """Environment steps after `evaluations` evaluations: one full episode each (`samples`
    each with sampling), and after the random start, the conditioned actor's `actor_evals`
    episodes per iteration (its transitions feed the critic)."""
    iterations = max(0, evaluations - config.random_init) // config.batch_size
    episodes = evaluations * config.samples + iterations * config.actor_evals
    return episodes * config.episode_length


register_job(
    PolicyQDJob(
        name="dcrl-me",
        config_cls=DCRLMEConfig,
        make=build_dcrl_me,
        env_steps=with_actor_episodes,
        help="DCRL-MAP-Elites (default: minutes on a laptop; --preset paper for the paper's)",
        description=(
            "The defaults are minutes on a laptop CPU (walker2d_uni); --preset paper is the "
            "paper's setting (ant_omni, an accelerator's budget), --preset dcg-me and "
            "dcg-me-paper are DCG-ME at either size, --preset smoke a run of a minute or two, "
            "--config-file reads a config file of the DCRL repository. Options override them."
        ),
        translator=Translator(
            read_dcrl_me_config,
            over=PAPER_PRESET,
            help=(
                "a Hydra config file of the DCRL-MAP-Elites repository (configs/dcrl_me.yaml, "
                "with its env and algo defaults read from the folders beside it, or an algo "
                "file such as configs/algo/dcg_me.yaml); options override it"
            ),
        ),
    )
)
