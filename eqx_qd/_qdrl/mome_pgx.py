"""MOME-PGX (Janmohamed, Pierrot and Cully, GECCO 2023): MOME whose batches come from a GA and
from one policy-gradient emitter per objective, on an archive with crowding-based selection
and addition (`ParetoRepertoire(crowding=True)`)."""

from .. import _validate as check
from .._emitters.base import AbstractEmitter
from .._emitters.composed import ComposedEmitter
from .._emitters.mixing import ga_emitter
from .._selectors import AbstractSelector, UniformSelector
from .._variation import AbstractVariation, IsoLineVariation
from ..rl._td3 import TD3, TD3HParams
from .pga_me import qdax_learner


def mome_pgx_emitter(
    *,
    num_objectives: int,
    ga_batch_size: int,
    pg_batch_size: int,
    td3: TD3,
    hparams: TD3HParams,
    critic_steps: int,
    pg_steps: int,
    pg_lr: float,
    buffer_size: int,
    iso_sigma: float = 0.005,
    line_sigma: float = 0.05,
    variation: AbstractVariation | None = None,
    selector: AbstractSelector = UniformSelector(),
    axis_name: str | None = None,
) -> ComposedEmitter:
    """MOME-PGX's emitter: `ga_batch_size` GA children (iso+line-DD, `iso_sigma`,
    `line_sigma`, unless `variation` is given), then, for each of the `num_objectives`
    objectives, a `QualityPGEmitter(objective=i)` of `pg_batch_size` candidates (its last the
    greedy actor) with its own critic and replay buffer, learning from that objective's
    reward. A batch holds `ga_batch_size + num_objectives * pg_batch_size` candidates (the
    paper's: 128 + 2 x 64).

    As the paper's code (on QDax): each greedy actor starts as the first initial genotype and
    no critic trains before the first batch. Parents are drawn with `selector` (the uniform
    selector is the archive's own draw: by crowding on a `ParetoRepertoire(crowding=True)`,
    MOME-PGX's selection).

    **Arguments:** `num_objectives`, `ga_batch_size` (0: no GA), `pg_batch_size`; `td3`,
    `hparams`, `critic_steps`, `pg_steps`, `pg_lr`, `buffer_size` (each `QualityPGEmitter`'s:
    the paper's 300 critic steps, 100 policy-gradient steps at 1e-3, buffers of 1e6);
    `iso_sigma`, `line_sigma`, `variation` (the GA); `selector`; `axis_name` (to run over a
    mesh: the sizes are then each device's).
    """
    check.integer("mome_pgx_emitter: num_objectives", num_objectives, minimum=2)
    check.non_negative_int("mome_pgx_emitter: ga_batch_size", ga_batch_size)
    check.positive_int("mome_pgx_emitter: pg_batch_size", pg_batch_size)
    if variation is None:
        variation = IsoLineVariation(iso_sigma=iso_sigma, line_sigma=line_sigma)
    members: list[AbstractEmitter] = []
    if ga_batch_size > 0:
        members.append(ga_emitter(ga_batch_size, variation=variation, selector=selector))
    for objective in range(num_objectives):
        members.append(
            qdax_learner(
                pg_batch_size,
                td3=td3,
                hparams=hparams,
                critic_steps=critic_steps,
                pg_steps=pg_steps,
                buffer_size=buffer_size,
                pg_lr=pg_lr,
                selector=selector,
                axis_name=axis_name,
                objective=objective,
            )
        )
    return ComposedEmitter(members)
