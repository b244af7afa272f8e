"""PGA-MAP-Elites as a policy-search QD job: its config (the house's keys, the GECCO 2021
paper's preset), how its algorithm is built, and its registration as `eqx-qd run pgame`. The
loop, the run folder and its files are the policy-search jobs' (`jobs/_policy_qd.py`); the
repository's own argument files are read by `jobs/_translators.py`.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from .._emitters.mixing import ga_emitter
from .._map_elites import MAPElites
from .._qdrl.pga_me import CONVENTIONS, pgame_emitter
from .._qdrl.scoring import DiscardDead
from .._validate import fraction, non_negative, positive_int
from ..envs._base import AbstractQDEnv
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
from ._translators import read_pga_me_config, REPO_NAMES, UNUSED


@dataclasses.dataclass(frozen=True)
class PGAMEConfig(PolicyQDOptions):
    """PGA-MAP-Elites settings, in the house's words (the original repository's names are
    read from its own files, `--config-file`, by `jobs/_translators.py`).
    The defaults are a local run, minutes on a laptop CPU (walker2d_uni, 100-step episodes,
    10k evaluations, 256 cells); `PGAMEConfig.preset("paper")` (`--preset paper`) is the GECCO
    2021 paper's setting (1e6 evaluations of 1000-step episodes, 1024 cells: an HPC budget),
    and `--preset smoke` a run of a minute or two that goes through every part.

    Tasks are stochastic by default, as the paper's were (random initial states:
    `reset_noise`; `obs_noise` adds observation noise), so the averaged max fitness and the
    fitness loss of the re-evaluated best mean something; `deterministic` turns both off.

    Ours, beyond the repo's arguments: `episode_length`, `critic_hidden`, `critic_lr`,
    `greedy_lr`, `buffer_size`, `reset_noise` / `obs_noise` / `deterministic`,
    `reevaluations` (the "10" of the averaged max fitness) and `convention` (`"original"`:
    the repo's batch split, greedy-actor start and critic warm-up; `"qdax"`: QDax's),
    `policy_init` / `critic_init` (the repo's Xavier actors and PyTorch-default critic by
    default; `lecun_uniform` for both is QDax's). `gradient_op` is the repo's switch: `False`
    gives plain MAP-Elites with the same GA, budget and outputs. The repo's `num_cpu` /
    `num_cpu_var` have no counterpart (evaluation is vectorised) and are accepted only in its
    own config files.
    """

    JOB: ClassVar[str] = "pgame"

    ga_fraction: float = option(0.5, "fraction of each batch from the GA", check=fraction)
    greedy_lr: float = option(3e-4, "greedy actor learning rate", check=non_negative)
    species: int = option(
        1, "species-archive cells (1 only: the paper's setting)", check=positive_int
    )
    gradient_op: bool = option(
        True, "policy-gradient variation (off: GA only)", aliases=("--no-gradient",)
    )
    convention: str = option(
        "original",
        "batch split, greedy start and critic warm-up",
        check=checks.one_of(*CONVENTIONS),
    )

    def check(self) -> None:
        super().check()
        n = self.devices
        self.check_devices({"batch_size": self.batch_size}, learner=self.gradient_op)
        if self.gradient_op and self.batch_size // n < 2:
            raise ValueError(
                "with gradient_op, batch_size needs 2 slots or more"
                + (f" on each of the {n} devices" if n > 1 else "")
            )
        if self.species != 1:
            raise ValueError(
                f"species is {self.species}: only 1 is supported (the GECCO paper's setting, "
                "one greedy actor); the species archive of several greedy actors is not built"
            )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "PGAMEConfig":
        """As `JobConfig.from_mapping`; the repository's arguments that have no counterpart
        here (`num_cpu`, `num_cpu_var`, `save_path`) are refused with the reason."""
        for name, why in UNUSED.items():
            if name in values:
                raise ValueError(f"config key {name!r} is not used by this job: {why}")
        return super().from_mapping(values)


PAPER_PRESET: dict[str, Any] = dict(
    cells=1024,
    evaluations=1_000_000,
    batch_size=100,
    random_init=500,
    init_batch_size=100,
    hidden=(128, 128),
    cvt_samples=100_000,
    snapshot_every=10_000,
    checkpoint_every=10_000,
    episode_length=1000,
    buffer_size=1_000_000,
)
"""The GECCO 2021 paper's setting: the keys that differ from the local defaults."""

SMOKE_PRESET: dict[str, Any] = dict(SMOKE_SIZES)
"""A run of a minute or two through every part (random start, GA and policy-gradient
children, the greedy actor, snapshots, checkpoints): to try a change, not to see learning."""

PGAMEConfig.PRESETS = {"paper": PAPER_PRESET, "smoke": SMOKE_PRESET}
# Files and folders written with the repository's names (before the house's) read too.
PGAMEConfig.RENAMED = {**REPO_NAMES, "centroids_file": "centroids", "num_reevals": "reevaluations"}


def build_pgame(config: PGAMEConfig, env: AbstractQDEnv) -> tuple[MAPElites, TD3]:
    """The algorithm (`MAPElites` with lineage) and the TD3 agent that defines the policies.
    With `devices > 1`, both run on the mesh axis `"p"`: each device's emitter takes
    `batch_size / devices` candidates and keeps `buffer_size / devices` transitions."""
    td3 = policy_agent(config, env)
    n = config.devices
    axis = "p" if n > 1 else None
    scorer = build_policy_scorer(config, env)
    variation, mutation = ga_operators(config)
    if config.gradient_op:
        hparams = TD3HParams(
            policy_lr=config.greedy_lr,
            critic_lr=config.critic_lr,
            discount=config.discount,
            tau=config.tau,
            policy_noise=config.policy_noise,
            noise_clip=config.noise_clip,
        )
        emitter = pgame_emitter(
            batch_size=config.batch_size // n,
            ga_fraction=config.ga_fraction,
            td3=td3,
            hparams=hparams,
            critic_steps=config.critic_steps,
            pg_steps=config.pg_steps,
            pg_lr=config.pg_lr,
            buffer_size=config.buffer_size // n,
            variation=variation,
            mutation=mutation,
            convention=config.convention,
            axis_name=axis,
        )
    else:
        emitter = ga_emitter(config.batch_size // n, variation=variation, mutation=mutation)
    scoring = scorer if config.insert_dead else DiscardDead(scorer)
    algo = MAPElites(emitter, scoring, scorer.qd_offset, lineage=True, axis_name=axis)
    return algo, td3


def full_episodes(config: PolicyQDOptions, evaluations: int) -> int:
    """Environment steps after `evaluations` evaluations: one full episode each (QDax's
    accounting; the critic's transitions come from these episodes), `samples` each with
    sampling."""
    return evaluations * config.samples * config.episode_length


register_job(
    PolicyQDJob(
        name="pgame",
        config_cls=PGAMEConfig,
        make=build_pgame,
        env_steps=full_episodes,
        help="PGA-MAP-Elites (default: walker2d_uni, 10k evaluations of 100 steps)",
        description=(
            "The defaults are a local run (minutes on a laptop CPU); --preset paper starts from "
            "the GECCO 2021 paper's setting, --config-file from a file of the original "
            "repository. Options override all three."
        ),
        translator=Translator(
            read_pga_me_config,
            over=PAPER_PRESET,
            help=(
                "a config file of the PGA-MAP-Elites repository (--key=value lines, e.g. its "
                "configure_experiment/QDWalker_config.txt), read with that repository's "
                "defaults; options override it"
            ),
        ),
    )
)
