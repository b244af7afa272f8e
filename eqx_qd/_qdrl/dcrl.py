"""DCRL-MAP-Elites (Faldor et al., TELO 2024) and DCG-MAP-Elites (GECCO 2023): PGA-ME's
policy-gradient variation against a descriptor-conditioned critic, plus actor injection.

A critic Q(s, a | d') and an actor pi(s | d') are trained with TD3 on every evaluated
transition, labelled with the descriptor d its episode reached and a target descriptor d' (the
parent's descriptor for a policy-gradient child, the injected descriptor for an injected actor,
its own descriptor for a GA child), the reward scaled by how close d came to d':
`exp(-||d - d'|| / lengthscale)` on descriptors mapped to [-1, 1]. Each batch is then
GA children, policy-gradient children (Adam steps on each parent's Q1(s, pi(s) | d_parent)),
and injected actors: the conditioned actor with a target descriptor folded into its first
layer's bias, an ordinary policy the repertoire stores.

Because the conditioned actor and critic are a TD3 agent whose observation is `(obs, d')`, the
training is `TD3.update` on widened transitions (`conditioned_transitions`).
"""

import dataclasses
import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int

from .. import _validate as check
from .._custom_types import Extra, Genotypes, PRNGKey
from .._emitters.base import AbstractEmitter, Lineage, Origin
from .._emitters.mixing import ga_emitter, MixingEmitter
from .._misc import device_share, f32, filter_scan, from_first_device, tree_concatenate, tree_take
from .._repertoire import AbstractRepertoire, AddInfo
from .._selectors import AbstractSelector, UniformSelector
from .._variation import AbstractMutation, AbstractVariation, IsoLineVariation
from ..envs._rollout import Transition
from ..rl._buffers import ReplayBuffer
from ..rl._optim import apply_adam, init_adam
from ..rl._policies import DeterministicPolicy
from ..rl._td3 import TD3, TD3HParams, TD3State
from .scoring import episode_transitions, PolicyScorer, ScoringExtra


class DescriptorTransition(eqx.Module):
    """A replay row of DCRL: a transition, the normalised descriptor its episode reached and
    the normalised target descriptor its policy was made for (each `(*batch, num_descriptors)`).
    """

    transition: Transition
    descriptor: Float[Array, "*batch num_descriptors"]
    target: Float[Array, "*batch num_descriptors"]


def normalise_descriptors(
    descriptors: Float[Array, "*batch num_descriptors"],
    low: Float[Array, " num_descriptors"],
    high: Float[Array, " num_descriptors"],
) -> Float[Array, "*batch num_descriptors"]:
    """`descriptors` (any leading shape) mapped from the box `[low, high]` to `[-1, 1]`, what
    the conditioned networks read."""
    low, high = (jnp.broadcast_to(b, jnp.shape(descriptors)) for b in (low, high))
    return 2.0 * (descriptors - low) / (high - low) - 1.0


def descriptor_similarity(
    descriptors: Float[Array, "*batch num_descriptors"],
    targets: Float[Array, "*batch num_descriptors"],
    lengthscale: Float[Array, ""],
) -> Float[Array, "*batch"]:
    """`exp(-||descriptors - targets|| / lengthscale)` row by row: 1 on target, towards 0 far
    from it (the factor DCRL scales rewards by)."""
    return jnp.exp(-jnp.linalg.norm(descriptors - targets, axis=-1) / lengthscale)


def conditioned_transitions(
    rows: DescriptorTransition,
    lengthscale: Float[Array, ""],
    reward_offset: Float[Array, ""] | float = 0.0,
) -> Transition:
    """The transitions the conditioned TD3 agent trains on, from the replay buffer's `rows`:
    observations widened by the target, `(obs, target)` and `(next_obs, target)`, rewards
    `(reward + reward_offset)` scaled by `descriptor_similarity(descriptor, target,
    lengthscale)`."""
    t, target = rows.transition, rows.target
    scale = descriptor_similarity(rows.descriptor, target, lengthscale)
    return Transition(
        jnp.concatenate([t.obs, target], axis=-1),
        t.action,
        scale * (t.reward + reward_offset),
        jnp.concatenate([t.next_obs, target], axis=-1),
        t.terminated,
        t.truncated,
    )


def inject_actor(
    actor: DeterministicPolicy, target: Float[Array, " num_descriptors"]
) -> DeterministicPolicy:
    """The conditioned `actor` (inputs `(obs, target)`) specialised to one normalised
    `target`: the target's columns of the first layer folded into its bias. The result reads
    observations only and acts as `actor` does at `target` (actor injection)."""
    first = actor.net.layers[0]
    if first.bias is None:
        raise ValueError(
            "inject_actor: the actor's first layer has no bias to fold the descriptor into "
            "(a policy with affine layer normalisation); use biases"
        )
    d = target.shape[-1]
    obs_size = first.weight.shape[0] - d
    if obs_size < 1:
        raise ValueError(
            f"inject_actor: the actor reads {first.weight.shape[0]} inputs, not more than the "
            f"{d} descriptors"
        )
    weight, folded = first.weight[:obs_size], first.weight[obs_size:]
    bias = first.bias + target @ folded
    where = lambda p: (p.net.layers[0].weight, p.net.layers[0].bias)
    return eqx.tree_at(where, actor, (weight, bias))


class DCRLEmitterState(eqx.Module):
    """What the DCRL emitter learns and has chosen for its next batch.

    **Fields:**

    - `td3`: the conditioned actor and critic, their targets and optimiser states (a
      `TD3State` of the widened agent).
    - `buffer`: the replay buffer of `DescriptorTransition` rows.
    - `pg_cells`, `pg_targets`: the next batch's policy-gradient parents (repertoire slots)
      and their descriptors; `ai_targets`: the next injected actors' target descriptors.
      Drawn at the end of `init` / `state_update` from the repertoire that the next `emit`
      sees, so that the update after it knows every candidate's target.
    """

    td3: TD3State
    buffer: ReplayBuffer
    pg_cells: Int[Array, " pg_batch_size"]
    pg_targets: Float[Array, "pg_batch_size num_descriptors"]
    ai_targets: Float[Array, "ai_batch_size num_descriptors"]


@typing.final
class DCRLEmitter(AbstractEmitter[DCRLEmitterState]):
    """DCRL-ME's emitter: each batch is `ga_batch_size` GA children, `pg_batch_size` policy-gradient
    children against the descriptor-conditioned critic, and `ai_batch_size` injected actors, in that
    order. With `ai_batch_size = 0` (and `actor_evals > 0`) it is DCG-ME. Build it with
    `dcrl_emitter`.

    Genotypes are `DeterministicPolicy` populations shaped like `td3.init_policy`; the scoring
    function's extra must be a `ScoringExtra` (`PolicyScorer`). The conditioned actor and
    critic are `td3` widened by the descriptors (`conditioned_agent`).

    **Fields:**

    - `ga_batch_size`, `pg_batch_size`, `ai_batch_size`: the batch split; `batch_size` is their sum.
    - `ga`: the GA emitter of the `ga_batch_size` children (`None` when `ga_batch_size = 0`).
    - `td3`, `hparams`: the agent that defines the policies (its widths, minibatch size,
      policy delay, initialisations and target-update rule also define the conditioned
      networks) and the conditioned training's hyperparameters (`policy_lr` is the
      conditioned actor's learning rate).
    - `descriptor_low`, `descriptor_high`: the descriptor bounds that map descriptors to
      `[-1, 1]`.
    - `lengthscale`: the similarity's length scale (on normalised descriptors).
    - `reward_offset`: added to every reward before the similarity scales it (0, the papers'
      rule, by default). The scaling assumes rewards of at least 0: a negative reward scaled
      towards 0 away from the target would reward missing it. A task whose rewards are
      negative (the point maze's minus distance) needs its `reward_offset`.
    - `pg_lr`: the policy-gradient variation's Adam learning rate; `pg_steps` its steps.
    - `critic_steps`: TD3 steps of the conditioned agent after every batch.
    - `buffer_size`: the replay buffer's capacity.
    - `selector`: how policy-gradient parents and injection targets are drawn.
    - `actor_evals`, `scorer`: DCG-ME's evaluations of the conditioned actor: after every
      batch, `actor_evals` injected actors at targets drawn from the repertoire are played by
      `scorer`; their transitions feed the buffer, the repertoire never sees them.
    - `axis_name`: the mesh axis under `shard_map` (`MAPElites(axis_name=...)`), or `None`
      on one device. With an axis, the conditioned agent is data parallel as
      `QualityPGEmitter`'s critic: each device keeps its own buffer (`buffer_size` rows) of
      its own batch's (and actor episodes') rows, each TD3 step averages the gradients of
      `td3.minibatch_size / devices` rows from every device, and the agent starts from the
      first device's; the split and `actor_evals` are each device's.
    """

    ga_batch_size: int = eqx.field(static=True)
    pg_batch_size: int = eqx.field(static=True)
    ai_batch_size: int = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    ga: MixingEmitter | None
    td3: TD3
    hparams: TD3HParams
    descriptor_low: Float[Array, " num_descriptors"] = eqx.field(converter=f32)
    descriptor_high: Float[Array, " num_descriptors"] = eqx.field(converter=f32)
    lengthscale: Float[Array, ""] = eqx.field(converter=f32)
    reward_offset: Float[Array, ""] = eqx.field(converter=f32)
    pg_lr: Float[Array, ""] = eqx.field(converter=f32)
    critic_steps: int = eqx.field(static=True)
    pg_steps: int = eqx.field(static=True)
    buffer_size: int = eqx.field(static=True)
    selector: AbstractSelector = UniformSelector()
    actor_evals: int = eqx.field(default=0, static=True)
    scorer: PolicyScorer | None = None
    axis_name: str | None = eqx.field(default=None, static=True)

    def __check_init__(self):
        where = "DCRLEmitter"
        for name in ("ga_batch_size", "pg_batch_size", "ai_batch_size", "critic_steps", "pg_steps"):
            check.non_negative_int(f"{where}.{name}", getattr(self, name))
        check.non_negative_int(f"{where}.actor_evals", self.actor_evals)
        check.positive_int(f"{where}.buffer_size", self.buffer_size)
        if (
            self.batch_size != self.ga_batch_size + self.pg_batch_size + self.ai_batch_size
            or self.batch_size < 1
        ):
            raise ValueError(
                f"{where}.batch_size must be ga_batch_size + pg_batch_size + ai_batch_size = "
                f"{self.ga_batch_size + self.pg_batch_size + self.ai_batch_size} (and at least "
                f"1), got {self.batch_size}"
            )
        if (self.ga is None) != (self.ga_batch_size == 0) or (
            self.ga is not None and self.ga.batch_size != self.ga_batch_size
        ):
            raise ValueError(
                f"{where}.ga must be a GA emitter of ga_batch_size ({self.ga_batch_size}) children"
            )
        if not isinstance(self.td3, TD3):
            raise TypeError(f"{where}.td3 must be an eqx_qd.rl.TD3, got {type(self.td3).__name__}")
        if self.td3.normalise_observations:
            raise ValueError(
                f"{where}.td3: normalise_observations must be off (the policies read raw "
                "observations)"
            )
        if self.td3.policy_affine and (self.ai_batch_size or self.actor_evals):
            raise ValueError(
                f"{where}.td3: policy_affine leaves the layers without biases, and actor "
                "injection folds the descriptor into the first layer's bias"
            )
        low, high = self.descriptor_low, self.descriptor_high
        if low.ndim != 1 or low.shape != high.shape or low.shape[0] < 1:
            raise ValueError(
                f"{where}.descriptor_low and descriptor_high must be vectors of one length, got "
                f"shapes {low.shape} and {high.shape}"
            )
        check.finite(f"{where}.descriptor_low", low)
        check.finite(f"{where}.descriptor_high", high)
        if check.is_concrete(low) and check.is_concrete(high) and not np.all(low < high):
            raise ValueError(
                f"{where}: descriptor_low must be below descriptor_high in every dimension, "
                f"got {np.asarray(low).tolist()} and {np.asarray(high).tolist()}"
            )
        check.positive(f"{where}.lengthscale", self.lengthscale)
        check.finite(f"{where}.reward_offset", self.reward_offset)
        check.non_negative(f"{where}.pg_lr", self.pg_lr)
        if self.actor_evals and self.scorer is None:
            raise ValueError(f"{where}: actor_evals > 0 needs a scorer to play the actor")
        if self.scorer is not None:
            if not isinstance(self.scorer, PolicyScorer) or self.scorer.agent is not None:
                raise TypeError(f"{where}.scorer must be a PolicyScorer of policies")
            if self.scorer.env.descriptor_size != low.shape[0]:
                raise ValueError(
                    f"{where}.scorer's environment has {self.scorer.env.descriptor_size} "
                    f"descriptors, the bounds {low.shape[0]}"
                )

    @property
    def num_descriptors(self) -> int:
        return self.descriptor_low.shape[0]

    @property
    def conditioned_agent(self) -> TD3:
        """The TD3 agent of the conditioned actor and critic: `td3` with observations widened
        by the descriptors."""
        return dataclasses.replace(
            self.td3, observation_size=self.td3.observation_size + self.num_descriptors
        )

    def normalise(self, descriptors: Array) -> Array:
        """`normalise_descriptors` with this emitter's bounds."""
        return normalise_descriptors(descriptors, self.descriptor_low, self.descriptor_high)

    def inject(self, state: DCRLEmitterState, descriptors: Float[Array, "n num_descriptors"]):
        """The conditioned actor of `state` injected at each of `descriptors` (raw, not
        normalised): a population of `n` ordinary policies."""
        actor = state.td3.policy
        return jax.vmap(lambda t: inject_actor(actor, t))(self.normalise(descriptors))

    # ------------------------------------------------------------------ the emitter contract
    def init(
        self,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        key: PRNGKey,
    ) -> DCRLEmitterState:
        """A fresh conditioned agent (no training yet, as QDax), a buffer holding the initial
        population's transitions (each its own target), and the first batch's targets."""
        repertoire.check_candidates(genotypes, descriptors, fitnesses, where="DCRLEmitter.init")
        self._check_extra(extra, "init")
        self._check_descriptors(repertoire)
        self._check_policies(genotypes)
        agent_key, pick_key = jr.split(key)
        rows, keep = self._rows(extra, descriptors, descriptors)
        buffer = ReplayBuffer.empty(self.buffer_size, tree_take(rows, 0)).insert(rows, mask=keep)
        td3_state = self.conditioned_agent.init(self.hparams, key=agent_key)
        if self.axis_name is not None:  # every device starts from the first device's agent
            td3_state = from_first_device(td3_state, self.axis_name)
        return self._pick(
            DCRLEmitterState(td3_state, buffer, *self._no_targets()), repertoire, pick_key
        )

    def emit(
        self, repertoire: AbstractRepertoire, state: DCRLEmitterState, *, key: PRNGKey
    ) -> tuple[Genotypes, Extra]:
        """GA children, then the policy-gradient children of the parents `state` holds, then
        the conditioned actor injected at `state.ai_targets`, with their `Lineage` (the
        injected actors' kind is `Origin.INJECTED`, without parents)."""
        ga_key, pg_key = jr.split(key)
        parts, lineages = [], []
        if self.ga is not None:
            children, lineage = self.ga.emit(repertoire, None, key=ga_key)
            parts.append(children)
            lineages.append(lineage)
        if self.pg_batch_size:
            parents = tree_take(repertoire.genotypes, state.pg_cells)
            targets = self.normalise(state.pg_targets)
            children = self.pg_variation(parents, targets, state, key=pg_key)
            ids = _ids_at(repertoire, state.pg_cells)
            parts.append(children)
            lineages.append(Lineage.of(ids, jnp.full_like(ids, -1), Origin.GRADIENT))
        if self.ai_batch_size:
            parts.append(self.inject(state, state.ai_targets))
            none = jnp.full((self.ai_batch_size,), -1, jnp.int32)
            lineages.append(Lineage.of(none, none, Origin.INJECTED))
        return tree_concatenate(parts), tree_concatenate(lineages)

    def pg_variation(
        self,
        parents: DeterministicPolicy,
        targets: Float[Array, "n num_descriptors"],
        state: DCRLEmitterState,
        *,
        key: PRNGKey,
    ) -> DeterministicPolicy:
        """`pg_steps` Adam steps at `pg_lr` on every policy of `parents` (a stacked
        population), each maximising Q1((s, target), pi(s)) under the conditioned critic of
        `state` for its own row of `targets` (normalised descriptors), one replay batch per
        step shared by all parents."""
        critic = state.td3.critic
        opt_states = eqx.filter_vmap(init_adam)(parents)

        def loss(policy, target, obs):
            wide = jnp.concatenate([obs, jnp.broadcast_to(target, (len(obs), len(target)))], -1)
            return -jnp.mean(critic.q1(wide, policy(obs)))

        def step_one(policy, opt_state, target, obs):
            grads = eqx.filter_grad(loss)(policy, target, obs)
            return apply_adam(policy, grads, opt_state, self.pg_lr)

        def body(carry, k):
            policies, opts = carry
            obs = state.buffer.sample(self.td3.minibatch_size, key=k).transition.obs
            policies, opts = eqx.filter_vmap(step_one, in_axes=(0, 0, 0, None))(
                policies, opts, targets, obs
            )
            return (policies, opts), None

        (parents, _), _ = filter_scan(body, (parents, opt_states), jr.split(key, self.pg_steps))
        return parents

    def state_update(
        self,
        state: DCRLEmitterState,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        add_info: AddInfo,
        key: PRNGKey,
    ) -> DCRLEmitterState:
        """Store the batch's valid transitions with their reached and target descriptors
        (and, for DCG-ME, `actor_evals` episodes of the conditioned actor), train the
        conditioned agent `critic_steps` TD3 steps, and draw the next batch's targets."""
        repertoire.check_candidates(
            genotypes,
            descriptors,
            fitnesses,
            where="DCRLEmitter.state_update",
            batch_size=self.batch_size,
        )
        self._check_extra(extra, "state_update")
        eval_key, train_key, pick_key = jr.split(key, 3)
        targets = jnp.concatenate(
            [descriptors[: self.ga_batch_size], state.pg_targets, state.ai_targets], axis=0
        )
        rows, keep = self._rows(extra, descriptors, targets)
        buffer = state.buffer.insert(rows, mask=keep)
        if self.actor_evals:
            buffer = self._actor_episodes(buffer, state, repertoire, eval_key)
        state = eqx.tree_at(lambda s: s.buffer, state, buffer)
        state = self.train(state, key=train_key)
        return self._pick(state, repertoire, pick_key)

    def train(self, state: DCRLEmitterState, *, key: PRNGKey) -> DCRLEmitterState:
        """`critic_steps` TD3 steps of the conditioned agent, each on a fresh minibatch of
        `conditioned_transitions`."""
        agent = self.conditioned_agent
        share = device_share(self.td3.minibatch_size, self.axis_name, "DCRLEmitter")

        def body(td3_state, k):
            sample_key, update_key = jr.split(k)
            rows = state.buffer.sample(share, key=sample_key)
            batch = conditioned_transitions(rows, self.lengthscale, self.reward_offset)
            return agent.update(td3_state, batch, axis_name=self.axis_name, key=update_key)

        td3_state, _ = filter_scan(body, state.td3, jr.split(key, self.critic_steps))
        return eqx.tree_at(lambda s: s.td3, state, td3_state)

    # ------------------------------------------------------------------------------ helpers
    def _check_extra(self, extra: Extra, where: str) -> None:
        if not isinstance(extra, ScoringExtra):
            raise TypeError(
                f"DCRLEmitter.{where} needs the scoring function to return a ScoringExtra "
                f"(episodes for the replay buffer), got {type(extra).__name__}"
            )

    def _check_descriptors(self, repertoire: AbstractRepertoire) -> None:
        if repertoire.num_descriptors != self.num_descriptors:
            raise ValueError(
                f"DCRLEmitter: the repertoire has {repertoire.num_descriptors} descriptors, "
                f"descriptor_low / descriptor_high {self.num_descriptors}"
            )

    def _check_policies(self, genotypes) -> None:
        """Genotypes must be policies shaped as `td3.init_policy` makes them: the injected
        actors and the policy-gradient children join them in one batch."""
        one = jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, genotypes)
        want = eqx.filter_eval_shape(lambda: self.td3.init_policy(key=jr.key(0)))
        is_leaf = lambda x: eqx.is_array(x) or isinstance(x, jax.ShapeDtypeStruct)
        arrays = lambda t: eqx.filter(t, is_leaf)
        shapes = lambda t: [x.shape for x in jax.tree.leaves(arrays(t))]
        same = jax.tree.structure(arrays(one)) == jax.tree.structure(arrays(want))
        if not same or shapes(one) != shapes(want):
            raise ValueError(
                "DCRLEmitter.init: genotypes must be a population of policies shaped as "
                f"td3.init_policy makes them ({type(want).__name__}, arrays {shapes(want)}), "
                f"got {type(one).__name__}, arrays {shapes(one)}"
                + ("" if same else " in another structure (layer normalisation?)")
            )

    def _no_targets(self):
        d = self.num_descriptors
        return (
            jnp.zeros((self.pg_batch_size,), jnp.int32),
            jnp.zeros((self.pg_batch_size, d), jnp.float32),
            jnp.zeros((self.ai_batch_size, d), jnp.float32),
        )

    def _rows(self, extra: ScoringExtra, descriptors, targets):
        """Every step of every episode as a `DescriptorTransition` (normalised descriptor and
        target repeated along the episode), and which rows to store: the valid steps of
        episodes whose descriptor and target are finite."""
        transitions, valid = episode_transitions(extra)
        steps = extra.episodes.valid.shape[1]
        repeat = lambda x: jnp.repeat(self.normalise(x), steps, axis=0)
        rows = DescriptorTransition(transitions, repeat(descriptors), repeat(targets))
        finite = jnp.all(jnp.isfinite(descriptors), -1) & jnp.all(jnp.isfinite(targets), -1)
        keep = valid * jnp.repeat(finite, steps).astype(jnp.float32)
        return rows, keep

    def _actor_episodes(self, buffer, state, repertoire, key):
        pick_key, play_key = jr.split(key)
        targets = repertoire.select(self.actor_evals, key=pick_key, selector=self.selector)
        assert self.scorer is not None
        _, reached, extra = self.scorer(self.inject(state, targets.descriptors), key=play_key)
        rows, keep = self._rows(extra, reached, targets.descriptors)
        return buffer.insert(rows, mask=keep)

    def _pick(
        self, state: DCRLEmitterState, repertoire: AbstractRepertoire, key: PRNGKey
    ) -> DCRLEmitterState:
        pg_key, ai_key = jr.split(key)
        pg_cells, pg_targets, ai_targets = self._no_targets()
        if self.pg_batch_size:
            parents = repertoire.select(self.pg_batch_size, key=pg_key, selector=self.selector)
            pg_cells, pg_targets = parents.cells.astype(jnp.int32), parents.descriptors
        if self.ai_batch_size:
            chosen = repertoire.select(self.ai_batch_size, key=ai_key, selector=self.selector)
            ai_targets = chosen.descriptors
        return eqx.tree_at(
            lambda s: (s.pg_cells, s.pg_targets, s.ai_targets),
            state,
            (pg_cells, pg_targets, ai_targets),
        )


def _ids_at(repertoire: AbstractRepertoire, cells: Int[Array, " n"]) -> Int[Array, " n"]:
    """The ids the repertoire stores in slots `cells` (`-1` when it stores none)."""
    extra = repertoire.extra
    integer = isinstance(extra, jax.Array) and jnp.issubdtype(extra.dtype, jnp.integer)
    if integer and extra.ndim == 1:
        return extra[cells].astype(jnp.int32)
    return jnp.full(cells.shape, -1, jnp.int32)


def dcrl_emitter(
    *,
    td3: TD3,
    hparams: TD3HParams,
    descriptor_bounds: tuple,
    ga_batch_size: int = 128,
    pg_batch_size: int = 64,
    ai_batch_size: int = 64,
    lengthscale: float = 0.1,
    reward_offset: float = 0.0,
    critic_steps: int = 3000,
    pg_steps: int = 150,
    pg_lr: float = 1e-3,
    buffer_size: int = 1_000_000,
    iso_sigma: float = 0.005,
    line_sigma: float = 0.05,
    variation: AbstractVariation | None = None,
    mutation: AbstractMutation | None = None,
    selector: AbstractSelector = UniformSelector(),
    actor_evals: int = 0,
    scorer: PolicyScorer | None = None,
    axis_name: str | None = None,
) -> DCRLEmitter:
    """DCRL-ME's emitter with QDax's `DCRLMEConfig` defaults (batch 256 = 128 GA + 64
    policy-gradient + 64 injected actors, 3000 critic steps, 150 policy-gradient steps at
    1e-3, length scale 0.1). DCG-ME: `ai_batch_size=0`, `pg_batch_size=128`, `actor_evals=64` with a
    `scorer`.

    **Arguments:** `td3` (the policies' agent, see `DCRLEmitter`; give it `minibatch_size=100`,
    `critic_target_every_step=True` and `lecun_uniform` initialisations for QDax's setting,
    as `eqx-qd run dcrl-me` does), `hparams` (the conditioned training's: `critic_lr`,
    `policy_lr` the actor's, `discount`, `tau`, `policy_noise`, `noise_clip`,
    `reward_scaling`), `descriptor_bounds` (`(low, high)`, scalars or per descriptor, e.g.
    `env.descriptor_bounds`), the batch split (`ga_batch_size`, `pg_batch_size`,
    `ai_batch_size`), `lengthscale`, `reward_offset` (see `DCRLEmitter`), `critic_steps`,
    `pg_steps`, `pg_lr`, `buffer_size`; the GA: iso+line-DD (`iso_sigma`, `line_sigma`)
    unless `variation` or `mutation` is given (as `pgame_emitter`); `selector`, shared by
    the GA, the parents and the targets; `actor_evals`, `scorer` (DCG-ME's actor episodes);
    `axis_name` (to run over a mesh: the split, `actor_evals` and `buffer_size` are then each
    device's).
    """
    check.non_negative_int("dcrl_emitter: ga_batch_size", ga_batch_size)
    low, high = (np.asarray(b, np.float32) for b in descriptor_bounds)
    d = max(low.size, high.size)  # a scalar bound broadcasts to the other's length
    low, high = np.broadcast_to(low, (d,)), np.broadcast_to(high, (d,))
    if variation is None and mutation is None:
        variation = IsoLineVariation(iso_sigma=iso_sigma, line_sigma=line_sigma)
    ga = (
        ga_emitter(ga_batch_size, variation=variation, mutation=mutation, selector=selector)
        if ga_batch_size
        else None
    )
    return DCRLEmitter(
        ga_batch_size=ga_batch_size,
        pg_batch_size=pg_batch_size,
        ai_batch_size=ai_batch_size,
        batch_size=ga_batch_size + pg_batch_size + ai_batch_size,
        ga=ga,
        td3=td3,
        hparams=hparams,
        descriptor_low=low,
        descriptor_high=high,
        lengthscale=lengthscale,
        reward_offset=reward_offset,
        pg_lr=pg_lr,
        critic_steps=critic_steps,
        pg_steps=pg_steps,
        buffer_size=buffer_size,
        selector=selector,
        actor_evals=actor_evals,
        scorer=scorer,
        axis_name=axis_name,
    )
