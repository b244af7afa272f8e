"""MAP-Elites-ES as a policy-search QD job: its config, presets, how its algorithm is built
(`MEESEmitter` over the policies), its evaluation and environment-step counts, and its
registration as `eqx-qd run mees`.

The loop and run folder are the policy-search jobs' (`jobs/_policy_qd.py`): `actors.csv` gives
the offspring's type `es` and, as `parent_1`, the elite its ES run started from.
"""

import dataclasses
from typing import Any, ClassVar

from .._emitters.me_es import MEES_MODES, MEES_OPTIMISERS, MEESEmitter
from .._map_elites import MAPElites
from .._qdrl.scoring import DiscardDead
from .._validate import non_negative, positive, positive_int
from ..envs._base import AbstractQDEnv
from ..rl._layers import INITS
from ..rl._td3 import TD3
from . import checks
from ._config import option
from ._job import register_job
from ._policy_qd import build_policy_scorer, policy_agent, PolicyQDJob, PolicyQDOptions, SMOKE_SIZES


@dataclasses.dataclass(frozen=True)
class MEESConfig(PolicyQDOptions):
    """MAP-Elites-ES settings (Colas et al. 2020, as QDax 0.5's `MEESEmitter` and its
    `examples/mees.ipynb` run it), in the house's words.

    One generation emits one offspring, scored as every candidate (`samples` episodes), and
    scores `sample_number` perturbed copies of its parent for the ES step: `evaluations`
    counts both, so a generation costs `1 + sample_number` of the budget (the `evaluations`
    column, `env_steps` and the checkpoints' periods count them too) and PGA-ME or DCRL-ME
    runs of the same budget compare at equal evaluations.

    The defaults are a local run of minutes on a laptop CPU (`walker2d_uni`, 100-step
    episodes, 256 cells, 200 samples a generation, 49 generations from one random policy);
    `--preset qdax` is QDax's example notebook (1000 samples, 100 generations, 1024 cells,
    deterministic episodes, the offspring's fitness averaged over 30 episodes); `--preset
    smoke` a run of a minute through every part. The GA, critic and policy-gradient keys the
    policy-search jobs share are not used.

    On several devices (`devices`), one ME-ES run is spread: each device scores
    `sample_number / devices` of the samples; the offspring is the first device's, and each
    other device plays one placeholder episode a generation (a NaN policy, refused; not counted
    in `evaluations`). `devices` must divide `random_init` and `sample_number`.
    """

    JOB: ClassVar[str] = "mees"

    # The shared keys whose defaults are MAP-Elites-ES's (they keep their place in the order).
    evaluations: int = option(
        10_000,
        "evaluation budget (offspring and ES samples: 1 + sample_number a generation)",
        check=positive_int,
    )
    batch_size: int = option(1, "offspring per generation (1: MAP-Elites-ES)", check=positive_int)
    random_init: int = option(
        1, "random policies evaluated first (the first is the first parent)", check=positive_int
    )
    init_batch_size: int = option(1, "random policies scored at once", check=positive_int)
    snapshot_every: int = option(2_010, "evaluations between archive snapshots", check=positive_int)
    checkpoint_every: int = option(
        2_010,
        "evaluations between checkpoints of the whole state (and one at the end)",
        check=positive_int,
    )
    policy_init: str = option(
        "lecun_uniform",
        "the policies' initial weights: lecun_uniform with zero biases (QDax), "
        "xavier_uniform, uniform",
        check=checks.one_of(*INITS),
    )

    # MAP-Elites-ES's own keys (QDax's MEESConfig names).
    sample_number: int = option(
        200, "ES samples scored per generation (even when mirrored)", check=positive_int
    )
    sample_sigma: float = option(0.02, "std of the ES perturbations", check=positive)
    num_optimizer_steps: int = option(
        10, "generations between new parents (and per explore / exploit phase)", check=positive_int
    )
    es_learning_rate: float = option(0.01, "the ES optimiser's step size", check=non_negative)
    l2_coefficient: float = option(0.02, "L2 penalty on the genotype", check=non_negative)
    novelty_nearest_neighbors: int = option(10, "k of novelty's k nearest", check=positive_int)
    novelty_archive_size: int = option(
        10_000,
        "rows of the offspring descriptors' archive, a ring (QDax: the generations; at least "
        "the run's keeps every one)",
        check=positive_int,
    )
    last_updated_size: int = option(
        5, "most recently stored offspring exploit draws from", check=positive_int
    )
    exploit_num_cell_sample: int = option(
        2, "fittest cells (and recent offspring) exploit draws among", check=positive_int
    )
    explore_num_cell_sample: int = option(
        5, "most novel cells explore draws among", check=positive_int
    )
    mode: str = option(
        "explore_exploit",
        "explore_exploit (alternating phases, exploring first), exploit or explore",
        check=checks.one_of(*MEES_MODES),
    )
    sample_mirror: bool = option(True, "mirrored (antithetic) ES samples")
    sample_rank_norm: bool = option(True, "centred ranks of the samples' scores (else raw)")
    optimiser: str = option(
        "adam", "the ES step: adam or sgd", check=checks.one_of(*MEES_OPTIMISERS)
    )

    def check(self) -> None:
        super().check()
        if self.batch_size != 1:
            raise ValueError(
                f"batch_size is {self.batch_size}: MAP-Elites-ES emits one offspring a "
                "generation (its ES samples are the work to spread)"
            )
        self.check_devices({"sample_number": self.sample_number}, learner=False)
        if self.sample_number < 2 or (self.sample_mirror and self.sample_number % 2):
            raise ValueError(
                f"sample_number ({self.sample_number}) must be at least 2"
                + (" and even (sample_mirror: +/- pairs)" if self.sample_mirror else "")
            )

    @property
    def evaluations_per_iteration(self) -> int:
        return self.batch_size + self.sample_number


QDAX_PRESET: dict[str, Any] = dict(
    cells=1024,
    cvt_samples=50_000,
    sample_number=1000,
    evaluations=1 + 100 * 1001,
    deterministic=True,
    samples=30,
    snapshot_every=10_010,
    checkpoint_every=10_010,
)
"""QDax's `examples/mees.ipynb`: the keys that differ from the local defaults (its
`play_reset_fn` returns one fixed state: deterministic episodes; its offspring are scored by
`sampling` over 30 episodes)."""

SMOKE_PRESET: dict[str, Any] = {
    **{k: SMOKE_SIZES[k] for k in ("episode_length", "cells", "cvt_samples", "hidden")},
    "sample_number": 16,
    "num_optimizer_steps": 2,
    "evaluations": 1 + 6 * 17,
    "snapshot_every": 34,
    "checkpoint_every": 34,
}
"""A run of a minute through every part (explore and exploit phases, new parents, snapshots,
checkpoints): to try a change, not to see learning."""

MEESConfig.PRESETS = {"qdax": QDAX_PRESET, "smoke": SMOKE_PRESET}


def build_mees(config: MEESConfig, env: AbstractQDEnv) -> tuple[MAPElites, TD3]:
    """The algorithm (`MAPElites` with lineage over a `MEESEmitter` whose samples are scored
    one episode each) and the TD3 agent whose policy network the genotypes are."""
    td3 = policy_agent(config, env)
    scorer = build_policy_scorer(config, env)
    axis = "p" if config.devices > 1 else None
    emitter = MEESEmitter(
        build_policy_scorer(config, env, sampled=False),
        num_descriptors=env.descriptor_size,
        archive_size=config.novelty_archive_size,
        sample_number=config.sample_number,
        sample_sigma=config.sample_sigma,
        num_optimizer_steps=config.num_optimizer_steps,
        learning_rate=config.es_learning_rate,
        l2_coefficient=config.l2_coefficient,
        novelty_nearest_neighbors=config.novelty_nearest_neighbors,
        last_updated_size=config.last_updated_size,
        exploit_num_cell_sample=config.exploit_num_cell_sample,
        explore_num_cell_sample=config.explore_num_cell_sample,
        mode=config.mode,
        mirror=config.sample_mirror,
        rank_norm=config.sample_rank_norm,
        optimiser=config.optimiser,
        axis_name=axis,
    )
    scoring = scorer if config.insert_dead else DiscardDead(scorer)
    return MAPElites(emitter, scoring, scorer.qd_offset, lineage=True, axis_name=axis), td3


def with_es_samples(config: MEESConfig, evaluations: int) -> int:
    """Environment steps after `evaluations` evaluations: the random policies' and each
    offspring's `samples` episodes, and every ES sample's one episode."""
    generations = max(0, evaluations - config.random_init) // config.evaluations_per_iteration
    episodes = (config.random_init + generations) * config.samples
    episodes += generations * config.sample_number
    return episodes * config.episode_length


register_job(
    PolicyQDJob(
        name="mees",
        config_cls=MEESConfig,
        make=build_mees,
        env_steps=with_es_samples,
        help="MAP-Elites-ES (default: walker2d_uni, 49 generations of 200 ES samples)",
        description=(
            "The defaults are minutes on a laptop CPU; --preset qdax is QDax's example "
            "notebook (1000 samples, 100 generations), --preset smoke a run of a minute. "
            "Options override them."
        ),
    )
)
