"""AURORA and PGA-AURORA as a policy-search QD job: its config, presets, how its algorithm is
built (MAP-Elites over an `AuroraRepertoire` whose encoder is a `SequenceAutoencoder`) and its
registration as `eqx-qd run aurora`.

The loop and run folder are the policy-search jobs' (`jobs/_policy_qd.py`); the figures they
report (progress, snapshots, `repertoire.eqx`) are those of the passive CVT archive over the
task's own descriptors, which receives every candidate. The AURORA archive itself is in the
checkpoints' state (`state.repertoire`): `aurora_figures` gives its size, threshold and
QD-score.
"""

import dataclasses
from typing import Any, ClassVar

import jax.numpy as jnp
import jax.random as jr

from .._custom_types import PRNGKey
from .._metrics import qd_metrics
from .._qdrl.aurora import SequenceAutoencoder
from .._qdrl.pga_me import CONVENTIONS
from .._repertoire._aurora import AuroraRepertoire
from .._tessellation import AbstractTessellation
from .._validate import non_negative, positive, positive_int
from ..envs._base import AbstractQDEnv
from ..rl._layers import INITS
from . import checks
from ._config import option
from ._job import register_job
from ._pgame import build_pgame, full_episodes, PGAMEConfig
from ._policy_qd import build_policy_env, PolicyQDJob, SMOKE_SIZES


_ENCODER_KEY = 0xA0
"""What the seed's key is folded with for the encoder's first weights and its trainings."""


@dataclasses.dataclass(frozen=True)
class AuroraConfig(PGAMEConfig):
    """AURORA settings (Grillotti and Cully 2022, as QDax 0.5's `AURORA` and its
    `examples/aurora.ipynb` run it), in the house's words; PGA-AURORA (QDax's
    `examples/pga_aurora.ipynb`) with `--gradient-op`.

    The archive is AURORA's (`AuroraRepertoire`): an unstructured archive of `capacity` slots
    (default `target_size`) judged by distances between learned descriptors, the codes of an
    LSTM autoencoder (`latent_size` numbers) over every `observe_every`-th step's first
    `observation_width` observation numbers; the distance threshold starts at `l_value` and
    container-size control steers the number stored towards `target_size` (gain
    `size_gain`); the encoder is trained (Adam, `encoder_lr`, batches of `encoder_batch_size`,
    from its first weights each time unless `encoder_warm_start`) on the stored observations
    after the initial population and at QDax's schedule of loops of `aurora_loop` iterations.
    The GA is PGA-ME's (`--gradient-op` adds its policy gradients, PGA-AURORA, with every
    PGA-ME key); the progress figures are those of the passive CVT of
    `cells` cells over the task's own descriptors, which sees every candidate.

    The defaults are minutes on a laptop CPU: walker2d_uni from its one initial state, as
    QDax's task, 100-step episodes, batches of 100, 100 iterations (QDax's notebook runs 250
    of 250-step episodes: `--preset qdax`; its PGA-AURORA notebook is `--preset pga-qdax`).
    `--preset smoke` goes through every part in a minute or two.
    """

    JOB: ClassVar[str] = "aurora"

    # The shared keys whose defaults are AURORA's (they keep their place in the order).
    cells: int = option(
        1024, "cells of the passive CVT over the task's descriptors", check=positive_int
    )
    evaluations: int = option(100 + 100 * 100, "evaluation budget", check=positive_int)
    batch_size: int = option(100, "candidates per iteration", check=positive_int)
    random_init: int = option(100, "random policies evaluated first", check=positive_int)
    init_batch_size: int = option(100, "random policies scored at once", check=positive_int)
    capacity: int | None = option(None, "the AURORA archive's slots (default: target_size)")
    deterministic: bool = option(
        True, "no reset, observation, fitness or descriptor noise (QDax's tasks)"
    )
    policy_init: str = option(
        "lecun_uniform",
        "the policies' initial weights: lecun_uniform with zero biases (QDax), "
        "xavier_uniform, uniform",
        check=checks.one_of(*INITS),
    )
    gradient_op: bool = option(
        False, "PGA-AURORA: PGA-ME's policy gradients beside the GA", aliases=("--no-gradient",)
    )
    convention: str = option(
        "qdax",
        "PGA's batch split, greedy start and critic warm-up",
        check=checks.one_of(*CONVENTIONS),
    )

    latent_size: int = option(5, "learned descriptor's numbers (the code)", check=positive_int)
    observe_every: int = option(10, "every how many steps the encoder observes", check=positive_int)
    observation_width: int = option(
        25, "observation numbers the encoder reads per step", check=positive_int
    )
    encoder_batch_size: int = option(128, "sequences per encoder training step", check=positive_int)
    encoder_warm_start: bool = option(
        False, "each encoder training continues from the current weights (off: from the first)"
    )
    encoder_lr: float = option(1e-4, "encoder's Adam learning rate", check=positive)
    encoder_epochs: int = option(
        100, "epochs of each encoder training (loop 101 on: later)", check=positive_int
    )
    later_epochs: int = option(25, "epochs of each training after loop 101", check=positive_int)
    l_value: float = option(
        0.2, "first distance threshold between learned descriptors", check=positive
    )
    target_size: int = option(1024, "elites container-size control aims at", check=positive_int)
    size_gain: float = option(1e-5, "container-size control's gain", check=non_negative)
    aurora_loop: int = option(
        5, "iterations per AURORA loop (training / size control)", check=positive_int
    )

    def check(self) -> None:
        super().check()
        if self.repertoire != "cvt":
            raise ValueError(
                f"repertoire {self.repertoire!r}: the aurora job's archive is AURORA's own "
                "(set capacity, target_size and l_value instead)"
            )
        if self.samples != 1:
            raise ValueError(
                f"samples {self.samples}: the AURORA archive's encoder reads one episode per "
                "candidate (MAP-Elites-sampling is not offered on it)"
            )
        if self.capacity is not None and self.capacity < 2:
            raise ValueError(f"capacity {self.capacity}: AURORA's archive needs 2 slots or more")

    @property
    def cell_free(self) -> bool:
        """The AURORA archive has no cells: the runs report the passive CVT."""
        return True

    def encoder(self, env: AbstractQDEnv, *, key: PRNGKey) -> SequenceAutoencoder:
        """The untrained encoder for `env`'s episodes."""
        return SequenceAutoencoder.for_episodes(
            env.observation_size,
            self.episode_length,
            latent_size=self.latent_size,
            every=self.observe_every,
            width=self.observation_width,
            batch_size=self.encoder_batch_size,
            learning_rate=self.encoder_lr,
            warm_start=self.encoder_warm_start,
            key=key,
        )

    def repertoire_for(
        self,
        tessellation: AbstractTessellation,
        num_descriptors: int,
        *,
        largest_batch: int,
        key: PRNGKey | None = None,
    ) -> AuroraRepertoire:
        """An empty AURORA archive for task descriptors of width `num_descriptors`
        (`MAPElites.init` shapes it after the first population; the `tessellation` is the
        passive archive's, `largest_batch` and `key` are not used), its encoder and trainings
        seeded from `seed`."""
        init_key, train_key = jr.split(jr.fold_in(jr.key(self.seed), _ENCODER_KEY))
        env = build_policy_env(self)
        return AuroraRepertoire.empty(
            self.capacity or self.target_size,
            jnp.zeros(()),
            num_descriptors,
            self.encoder(env, key=init_key),
            l_value=self.l_value,
            target_size=self.target_size,
            loop=self.aurora_loop,
            epochs=self.encoder_epochs,
            later_epochs=self.later_epochs,
            gain=self.size_gain,
            key=train_key,
        )


QDAX_PRESET: dict[str, Any] = dict(
    env="walker2d_uni",
    evaluations=100 + 250 * 100,
    episode_length=250,
    cvt_samples=50_000,
    snapshot_every=2_500,
    checkpoint_every=5_000,
)
"""QDax's `examples/aurora.ipynb`: 250 iterations (50 loops of 5) of 100 policies on 250-step
episodes (the keys that differ from the local defaults)."""

PGA_QDAX_PRESET: dict[str, Any] = dict(
    QDAX_PRESET,
    gradient_op=True,
    ga_fraction=0.5,
    critic_steps=300,
    pg_steps=100,
    minibatch_size=256,
    buffer_size=1_000_000,
    pg_lr=1e-3,
    greedy_lr=3e-4,
    critic_lr=3e-4,
    critic_hidden=(256, 256),
    critic_init="lecun_uniform",
)
"""QDax's `examples/pga_aurora.ipynb`: AURORA's notebook with PGA-ME's emitter (half GA, TD3
critic of 300 steps an iteration, 100 policy-gradient steps on minibatches of 256)."""

SMOKE_PRESET: dict[str, Any] = dict(
    SMOKE_SIZES,
    target_size=48,
    encoder_batch_size=16,
    encoder_epochs=3,
    later_epochs=2,
    aurora_loop=2,
    observe_every=5,
)
"""A run of a minute or two through every part (an encoder training and a size control)."""

AuroraConfig.PRESETS = {"qdax": QDAX_PRESET, "pga-qdax": PGA_QDAX_PRESET, "smoke": SMOKE_PRESET}


def aurora_figures(repertoire: AuroraRepertoire, qd_offset: float) -> dict[str, float | int]:
    """The AURORA archive's (`repertoire`'s) own figures, as QDax's notebook reports them:
    `size` (elites stored), `coverage` (over the capacity), `qd_score` (fitnesses plus
    `qd_offset` each), `max_fitness` and the distance threshold `l_value`."""
    metrics = qd_metrics(repertoire, qd_offset)
    return {
        "size": int(metrics.num_filled),
        "coverage": float(metrics.coverage),
        "qd_score": float(metrics.qd_score),
        "max_fitness": float(metrics.max_fitness),
        "l_value": float(repertoire.l_value),
    }


register_job(
    PolicyQDJob(
        name="aurora",
        config_cls=AuroraConfig,
        make=build_pgame,
        env_steps=full_episodes,
        help="AURORA / PGA-AURORA (default: walker2d_uni, 10k evaluations of 100 steps)",
        description=(
            "The defaults are minutes on a laptop CPU; --preset qdax is QDax's example "
            "notebook, --preset smoke a run of a minute or two. Options override them."
        ),
    )
)
