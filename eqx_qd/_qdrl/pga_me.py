"""PGA-MAP-Elites (Nilsson & Cully, GECCO 2021): the quality policy-gradient emitter and the
emitter that mixes it with GA variation; QDPG (Pierrot et al. 2022, as QDax runs it): one such
emitter on the task's reward, one on a diversity reward (`diversity.py`), and a GA.

Each iteration, the policy-gradient emitter (1) selects parents from the repertoire and takes
`pg_steps` Adam steps on each, maximising the critic's Q1(s, pi(s)) over batches from the
replay buffer (one batch per step, shared by all parents); (2) offers the greedy actor trained
with the critic; then, once the batch is scored, (3) stores the new transitions and (4) runs
`critic_steps` TD3 steps (critic every step; greedy actor and targets every
`policy_delay` steps).

Two conventions differ at the start, and both are available: the original code (Nilsson &
Cully's repository) trains the critic on the initial population's transitions before the first
policy-gradient batch and starts the greedy actor as a copy of the best elite; QDax trains
nothing before the first batch and starts the greedy actor as the first initial genotype.
"""

import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float

from .. import _validate as check
from .._custom_types import Extra, Genotypes, PRNGKey
from .._emitters.base import AbstractEmitter, AbstractWholeBatchEmitter, Lineage, Origin, parent_ids
from .._emitters.composed import ComposedEmitter
from .._emitters.mixing import ga_emitter
from .._misc import (
    device_share,
    f32,
    filter_scan,
    from_first_device,
    tree_concatenate,
    tree_take,
)
from .._repertoire import AbstractRepertoire, AddInfo
from .._selectors import AbstractSelector, UniformSelector
from .._variation import AbstractMutation, AbstractVariation, IsoLineVariation
from ..envs._rollout import QDTransition, Transition
from ..rl._buffers import ReplayBuffer
from ..rl._optim import apply_adam, init_adam
from ..rl._policies import DeterministicPolicy
from ..rl._td3 import TD3, TD3HParams, TD3State
from .diversity import DiversityReward, StateArchive
from .scoring import episode_transitions, ScoringExtra


class QualityPGEmitterState(eqx.Module):
    """What the policy-gradient emitter learns.

    **Fields:**

    - `td3`: a `TD3State` holding the critic, its targets and the greedy actor.
    - `buffer`: the replay buffer of every evaluated transition (`QDTransition` rows, with
      their state descriptors, when the emitter learns a `diversity` reward).
    - `archive`: the `StateArchive` of the visited state descriptors the diversity reward is
      measured against; `None` without one.
    """

    td3: TD3State
    buffer: ReplayBuffer
    archive: StateArchive | None = None


@typing.final
class QualityPGEmitter(AbstractWholeBatchEmitter[QualityPGEmitterState]):
    """Policy-gradient variation against a TD3 critic, plus the greedy actor.

    Emits `batch_size` genotypes: `batch_size - 1` parents improved by `pg_steps`
    gradient steps at learning rate `pg_lr`, then the greedy actor. Genotypes must be
    `DeterministicPolicy` populations shaped like `td3.init_policy`. The scoring function's
    extra must be a `ScoringExtra` (as `PolicyScorer` returns): its valid steps feed the buffer.

    **Fields:**

    - `batch_size`: candidates per iteration (the last is the greedy actor).
    - `td3`, `hparams`: the TD3 agent that defines the critic and greedy actor, and its
      hyperparameters.
    - `critic_steps`: TD3 steps after every batch; `pg_steps`: Adam steps per parent.
    - `buffer_size`: the replay buffer's capacity.
    - `pg_lr`: the learning rate of the policy-gradient variation.
    - `selector`: how parents are drawn.
    - `greedy_init`: where the greedy actor starts: `"best"`, a copy of the repertoire's best
      elite after the initial population (the original code; the first initial genotype if
      the repertoire is empty); `"first"`, the first initial genotype (QDax).
    - `critic_warmup`: if true (the original code), `init` also runs `critic_steps` TD3
      steps on the initial transitions, so the first policy-gradient batch follows a trained
      critic; QDax's emitter trains nothing before its first batch.
    - `axis_name`: the mesh axis under `shard_map` (`MAPElites(axis_name=...)`,
      `run_sharded`), or `None` on one device. With an axis the critic is data parallel: every
      device keeps its own replay buffer (`buffer_size` rows each) of its own batches'
      transitions, each TD3 step takes `td3.minibatch_size / devices` rows from every device
      and averages the gradients over the axis (`TD3.update(axis_name=...)`), so the critic and
      the greedy actor, started from the first device's, stay equal on every device. Each
      device varies its own parents (policy-gradient batches of `td3.minibatch_size` from its
      own buffer); the greedy actor is evaluated once, by the first device, and the others
      give its slot one more policy-gradient child.
    - `objective`: on a multi-objective task (a reward per objective), the objective whose
      reward the critic and greedy actor learn (MOME-PGX has one such emitter per objective,
      each with its own critic and buffer); `None` (the default) for one reward per step.
    - `diversity`: a `DiversityReward` to learn instead of the task's reward (QDPG's
      diversity policy gradient, QDax's `DiversityPGEmitter`): every evaluated transition's
      state descriptor goes through the state's `StateArchive` (on a mesh, every device's, in
      device order, so the archives stay equal), and the critic learns the rewards relabelled
      against it; `None` (the default) for the task's reward.
    """

    batch_size: int = eqx.field(static=True)
    td3: TD3
    hparams: TD3HParams
    critic_steps: int = eqx.field(static=True)
    pg_steps: int = eqx.field(static=True)
    buffer_size: int = eqx.field(static=True)
    pg_lr: Float[Array, ""] = eqx.field(converter=f32)
    selector: AbstractSelector = UniformSelector()
    greedy_init: str = eqx.field(default="best", static=True)
    critic_warmup: bool = eqx.field(default=True, static=True)
    axis_name: str | None = eqx.field(default=None, static=True)
    objective: int | None = eqx.field(default=None, static=True)
    diversity: DiversityReward | None = None

    def __check_init__(self):
        check.positive_int("QualityPGEmitter.batch_size", self.batch_size)  # the greedy actor
        if self.objective is not None:
            check.integer("QualityPGEmitter.objective", self.objective, minimum=0)
        check.non_negative_int("QualityPGEmitter.critic_steps", self.critic_steps)
        check.non_negative_int("QualityPGEmitter.pg_steps", self.pg_steps)
        check.positive_int("QualityPGEmitter.buffer_size", self.buffer_size)
        check.non_negative("QualityPGEmitter.pg_lr", self.pg_lr)
        check.one_of("QualityPGEmitter.greedy_init", self.greedy_init, ("best", "first"))
        if not isinstance(self.critic_warmup, bool):
            raise TypeError(
                f"QualityPGEmitter.critic_warmup must be a bool, got {self.critic_warmup!r}"
            )
        if self.diversity is not None and self.objective is not None:
            raise ValueError(
                "QualityPGEmitter: objective and diversity both choose the reward to learn: "
                "give one"
            )

    def init(
        self,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        key: PRNGKey,
    ) -> QualityPGEmitterState:
        where = "QualityPGEmitter.init"
        repertoire.check_candidates(genotypes, descriptors, fitnesses, where=where)
        if not isinstance(extra, ScoringExtra):
            raise TypeError(
                "QualityPGEmitter needs the scoring function to return a ScoringExtra "
                f"(episodes for the replay buffer), got {type(extra).__name__}"
            )
        rows, valid = self._rows(extra, where)
        buffer = ReplayBuffer.empty(self.buffer_size, tree_take(rows, 0))
        critic_key, train_key = jr.split(key)
        greedy = tree_take(genotypes, 0)
        if self.greedy_init == "best":
            # The repertoire already holds the initial population; its best elite is the best
            # policy seen so far (the original's one-cell "species archive"). An empty
            # repertoire (every candidate refused) leaves the first genotype.
            best = tree_take(repertoire.genotypes, jnp.argmax(repertoire.fitnesses))
            filled = jnp.any(jnp.isfinite(repertoire.fitnesses))
            greedy = jax.tree.map(
                lambda b, g: jnp.where(filled, b, g) if eqx.is_array(b) else b, best, greedy
            )
        td3_state = self.td3.state_from(greedy, self.td3.init_critic(key=critic_key), self.hparams)
        if self.axis_name is not None:  # every device starts from the first device's learner
            td3_state = from_first_device(td3_state, self.axis_name)
        archive = None
        if self.diversity is not None:
            archive = self._archived(
                self.diversity.empty_archive(rows.state_desc.shape[-1]), rows, valid
            )
        state = QualityPGEmitterState(td3_state, buffer.insert(rows, mask=valid), archive)
        return self._train_critic(state, key=train_key) if self.critic_warmup else state

    def _rows(
        self, extra: Extra, where: str
    ) -> tuple[Transition | QDTransition, Float[Array, " rows"]]:
        """The replay rows of a batch's episodes and their validity: with a `diversity`
        reward, with their state descriptors."""
        if self.diversity is None:
            return episode_transitions(extra, objective=self.objective, where=where)
        return episode_transitions(extra, where=where, state_descriptors=True)

    def _archived(
        self, archive: StateArchive, rows: QDTransition, valid: Float[Array, " rows"]
    ) -> StateArchive:
        """`archive` after the rows' state descriptors, every device's on a mesh."""
        desc = rows.state_desc
        if self.axis_name is not None:
            gather = lambda x: jax.lax.all_gather(x, self.axis_name, tiled=True)
            desc, valid = gather(desc), gather(valid)
        return archive.insert(desc, mask=valid)

    def emit(
        self, repertoire: AbstractRepertoire, state: QualityPGEmitterState, *, key: PRNGKey
    ) -> tuple[Genotypes, Extra]:
        select_key, pg_key = jr.split(key)
        pg_batch_size = self.batch_size - 1
        greedy = jax.tree.map(lambda x: x[None] if eqx.is_array(x) else x, state.td3.policy)
        greedy_lineage = Lineage.of(
            jnp.full((1,), -1, jnp.int32),
            jnp.full((1,), -1, jnp.int32),
            Origin.GREEDY if self.diversity is None else Origin.DIVERSITY_GREEDY,
        )
        if self.axis_name is not None:
            # The greedy actor is the same on every device: the first evaluates it, the others
            # fill its slot with one more policy-gradient child.
            pg_batch_size = self.batch_size
        if pg_batch_size == 0:
            return greedy, greedy_lineage
        elites = repertoire.select(pg_batch_size, key=select_key, selector=self.selector)
        offspring = self.pg_variation(elites.genotypes, state, key=pg_key)
        ids = parent_ids(elites)
        kind = Origin.GRADIENT if self.diversity is None else Origin.DIVERSITY
        lineage = Lineage.of(ids, jnp.full_like(ids, -1), kind)
        if self.axis_name is None:
            return tree_concatenate([offspring, greedy]), tree_concatenate(
                [lineage, greedy_lineage]
            )
        first = jax.lax.axis_index(self.axis_name) == 0
        pick = lambda g, o: (
            jnp.where(first, jnp.concatenate([o[:-1], g]), o) if eqx.is_array(o) else o
        )
        return jax.tree.map(pick, greedy, offspring), jax.tree.map(pick, greedy_lineage, lineage)

    def pg_variation(
        self, parents: DeterministicPolicy, state: QualityPGEmitterState, *, key: PRNGKey
    ) -> DeterministicPolicy:
        """`pg_steps` Adam steps on every policy of `parents` (a stacked population;
        vmapped), maximising Q1(s, pi(s)) under the critic of `state`, one replay batch per
        step shared by all parents."""
        critic = state.td3.critic
        opt_states = eqx.filter_vmap(init_adam)(parents)

        def loss(policy, obs):
            return -jnp.mean(jax.vmap(critic.q1)(obs, jax.vmap(policy)(obs)))

        def step_one(policy, opt_state, obs):
            grads = eqx.filter_grad(loss)(policy, obs)
            return apply_adam(policy, grads, opt_state, self.pg_lr)

        def body(carry, k):
            policies, opts = carry
            batch = state.buffer.sample(self.td3.minibatch_size, key=k)
            policies, opts = eqx.filter_vmap(step_one, in_axes=(0, 0, None))(
                policies, opts, batch.obs
            )
            return (policies, opts), None

        (parents, _), _ = filter_scan(body, (parents, opt_states), jr.split(key, self.pg_steps))
        return parents

    def _train_critic(self, state: QualityPGEmitterState, *, key: PRNGKey) -> QualityPGEmitterState:
        share = device_share(self.td3.minibatch_size, self.axis_name, "QualityPGEmitter")

        def body(td3_state, k):
            sample_key, update_key = jr.split(k)
            batch = state.buffer.sample(share, key=sample_key)
            if self.diversity is not None:
                batch = self.diversity.relabel(state.archive, batch)
            return self.td3.update(td3_state, batch, axis_name=self.axis_name, key=update_key)

        td3_state, _ = filter_scan(body, state.td3, jr.split(key, self.critic_steps))
        return eqx.tree_at(lambda s: s.td3, state, td3_state)

    def state_update(
        self,
        state: QualityPGEmitterState,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        add_info: AddInfo,
        key: PRNGKey,
    ) -> QualityPGEmitterState:
        """Store the batch's valid transitions, then train the critic and greedy actor. In a
        `ComposedEmitter` the batch is the whole composed batch (an `AbstractWholeBatchEmitter`)."""
        repertoire.check_candidates(
            genotypes, descriptors, fitnesses, where="QualityPGEmitter.state_update"
        )
        rows, valid = self._rows(extra, "QualityPGEmitter.state_update")
        state = eqx.tree_at(lambda s: s.buffer, state, state.buffer.insert(rows, mask=valid))
        if self.diversity is not None:
            archive = self._archived(state.archive, rows, valid)
            state = eqx.tree_at(lambda s: s.archive, state, archive)
        return self._train_critic(state, key=key)


CONVENTIONS = ("original", "qdax")
"""The two conventions `pgame_emitter` follows (see `pgame_split` and `QualityPGEmitter`)."""


def pgame_split(batch_size: int, ga_fraction: float, convention: str) -> tuple[int, int]:
    """The GA count and the policy-gradient count (the greedy actor included) of a PGA-ME batch
    of `batch_size` with GA fraction `ga_fraction`, under `convention`.

    `"original"` (Nilsson & Cully's code) keeps the greedy actor's slot apart and gives the GA
    `floor(ga_fraction * (batch_size - 1))` of the rest: 49 GA, 50 PG and the greedy actor
    in a batch of 100. `"qdax"` gives the GA `floor(ga_fraction * batch_size)`: 50 GA,
    49 PG and the greedy actor. Either way the greedy actor keeps its slot.
    """
    return _split(batch_size, ga_fraction, convention, "pgame_split")


def _split(batch_size: int, ga_fraction: float, convention: str, where: str) -> tuple[int, int]:
    check.integer(f"{where}: batch_size", batch_size, minimum=2)
    check.fraction(f"{where}: ga_fraction", ga_fraction)
    check.one_of(f"{where}: convention", convention, CONVENTIONS)
    others = batch_size - 1 if convention == "original" else batch_size
    num_evo = min(int(ga_fraction * others), batch_size - 1)
    return num_evo, batch_size - num_evo


def pgame_emitter(
    *,
    batch_size: int,
    ga_fraction: float,
    td3: TD3,
    hparams: TD3HParams,
    critic_steps: int,
    pg_steps: int,
    pg_lr: float,
    buffer_size: int,
    iso_sigma: float = 0.005,
    line_sigma: float = 0.05,
    variation: AbstractVariation | None = None,
    mutation: AbstractMutation | None = None,
    selector: AbstractSelector = UniformSelector(),
    convention: str = "original",
    axis_name: str | None = None,
) -> ComposedEmitter:
    """The PGA-ME emitter: GA offspring, then `QualityPGEmitter`'s (its last slot is the
    greedy actor), in the proportions of `convention` (`pgame_split`).

    The GA is iso+line-DD (`iso_sigma`, `line_sigma`) unless `variation` or `mutation`
    is given: a variation alone, a mutation alone, or a variation whose children are then
    mutated (the original code's `crossover_op` and `mutation_op`).

    With `ga_fraction = 1` the greedy actor still takes one slot, so the emitter always
    keeps training the critic on the evaluated transitions. `convention` also sets how the
    greedy actor starts and whether the critic trains before the first batch (see
    `QualityPGEmitter`: `"original"` copies the best elite and warms the critic up; `"qdax"`
    starts from the first initial genotype, cold).

    **Arguments:** `batch_size`, `ga_fraction`; `iso_sigma`, `line_sigma`,
    `variation`, `mutation` (the GA); `td3`, `hparams`, `critic_steps`,
    `pg_steps`, `pg_lr`, `buffer_size` (the `QualityPGEmitter` fields); `selector`
    (shared by both halves); `convention`; `axis_name` (`QualityPGEmitter`'s, to run over a
    mesh: `batch_size` and `buffer_size` are then each device's).
    """
    num_evo, pg_batch_size = _split(batch_size, ga_fraction, convention, "pgame_emitter")
    if variation is None and mutation is None:
        variation = IsoLineVariation(iso_sigma=iso_sigma, line_sigma=line_sigma)
    members: list[AbstractEmitter] = []
    if num_evo > 0:
        members.append(
            ga_emitter(num_evo, variation=variation, mutation=mutation, selector=selector)
        )
    members.append(
        QualityPGEmitter(
            batch_size=pg_batch_size,
            td3=td3,
            hparams=hparams,
            critic_steps=critic_steps,
            pg_steps=pg_steps,
            buffer_size=buffer_size,
            pg_lr=pg_lr,
            selector=selector,
            greedy_init="best" if convention == "original" else "first",
            critic_warmup=convention == "original",
            axis_name=axis_name,
        )
    )
    return ComposedEmitter(members)


def qdax_learner(batch_size: int, **fields) -> QualityPGEmitter:
    """A `QualityPGEmitter` started as QDax's learners start (the greedy actor from the first
    initial genotype, no critic training before the first batch): the learners of QDPG and
    MOME-PGX. `fields` are the emitter's others."""
    return QualityPGEmitter(
        batch_size=batch_size, greedy_init="first", critic_warmup=False, **fields
    )


def qdpg_emitter(
    *,
    quality_batch_size: int,
    diversity_batch_size: int,
    ga_batch_size: int,
    diversity: DiversityReward,
    td3: TD3,
    hparams: TD3HParams,
    critic_steps: int,
    pg_steps: int,
    pg_lr: float,
    buffer_size: int,
    iso_sigma: float = 0.005,
    line_sigma: float = 0.05,
    variation: AbstractVariation | None = None,
    mutation: AbstractMutation | None = None,
    selector: AbstractSelector = UniformSelector(),
    axis_name: str | None = None,
) -> ComposedEmitter:
    """The QDPG emitter (Pierrot et al. 2022, as QDax 0.5's `QDPGEmitter`): quality
    policy-gradient offspring, diversity policy-gradient offspring, then GA offspring.

    - `quality_batch_size`: a `QualityPGEmitter` on the task's reward (its last slot is its
      greedy actor);
    - `diversity_batch_size`: a `QualityPGEmitter` on the `diversity` reward, with its own
      critic, replay buffer, greedy actor and `StateArchive` (QDax's `DiversityPGEmitter`);
    - `ga_batch_size`: iso+line-DD (`iso_sigma`, `line_sigma`) unless `variation` or
      `mutation` is given (as `pgame_emitter`); 0 leaves the GA out.

    Both learners start as QDax's (the greedy actor from the first initial genotype, no
    critic training before the first batch) and both see the whole batch's transitions.
    `td3`, `hparams`, `critic_steps`, `pg_steps`, `pg_lr`, `buffer_size` are each learner's;
    `selector` is shared; `axis_name` as `pgame_emitter`'s (the batch sizes and the buffers
    are then each device's).
    """
    check.positive_int("qdpg_emitter: quality_batch_size", quality_batch_size)
    check.positive_int("qdpg_emitter: diversity_batch_size", diversity_batch_size)
    check.non_negative_int("qdpg_emitter: ga_batch_size", ga_batch_size)
    if not isinstance(diversity, DiversityReward):
        raise TypeError(
            f"qdpg_emitter: diversity must be a DiversityReward, got {type(diversity).__name__}"
        )
    if variation is None and mutation is None:
        variation = IsoLineVariation(iso_sigma=iso_sigma, line_sigma=line_sigma)
    shared = dict(
        td3=td3,
        hparams=hparams,
        critic_steps=critic_steps,
        pg_steps=pg_steps,
        buffer_size=buffer_size,
        pg_lr=pg_lr,
        selector=selector,
        axis_name=axis_name,
    )
    members: list[AbstractEmitter] = [
        qdax_learner(quality_batch_size, **shared),
        qdax_learner(diversity_batch_size, diversity=diversity, **shared),
    ]
    if ga_batch_size > 0:
        members.append(
            ga_emitter(ga_batch_size, variation=variation, mutation=mutation, selector=selector)
        )
    return ComposedEmitter(members)
