"""The agent contract, tested once for every agent: the built-in TD3, SAC, PPO and IPPO, and a
user's DDPG written outside the package (`user_agent.py`). Each goes through init, act, a
training chunk, storage / training forms, PBT (eager and jitted) and, on single-agent tasks,
one ME-PBT iteration."""

import dataclasses
import functools
import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jaxtyping import Array, Float, Int
from user_agent import DDPG, DDPGHParams

import eqx_qd as q
from eqx_qd.internal import tree_take


ENV = q.envs.PointMaze(walls=False, length=20)
SMALL = dict(observation_size=2, action_size=2)
OFF = dict(minibatch_size=8, num_envs=2, buffer_size=64)
AGENTS = {
    "td3": q.rl.TD3(**SMALL, **OFF, policy_hidden=(8,), critic_hidden=(8,)),
    "sac": q.rl.SAC(**SMALL, **OFF, policy_hidden=(8,), critic_hidden=(8,)),
    "ppo": q.rl.PPO(
        **SMALL,
        rollout_length=4,
        num_envs=2,
        num_minibatches=2,
        actor_hidden=(8,),
        critic_hidden=(8,),
    ),  # fmt: skip
    "ddpg": DDPG(**SMALL, **OFF, hidden=8),
}
TEAM = q.envs.TimeLimit(
    q.envs.LineTargets(n=2, size=6), 12
)  # IPPO's task: 2 agents, discrete actions
AGENTS["ippo"] = q.rl.IPPO.for_env(TEAM, rollout_length=4, num_envs=2, num_minibatches=2,
                                actor_hidden=(8,), critic_hidden=(8,))  # fmt: skip
ENVS = {name: TEAM if name == "ippo" else ENV for name in AGENTS}
SINGLE = [name for name in AGENTS if name != "ippo"]  # ME-PBT scores single-agent episodes
POP = 4


@functools.cache
def _population(name):
    agent, env = AGENTS[name], ENVS[name]
    pop = q.rl.init_population(agent, env, None, POP, key=jr.key(0))
    return q.rl.train_population(agent, env, pop, 2, key=jr.key(1))


def _leaves(tree):
    return [x for x in jax.tree.leaves(tree) if eqx.is_array(x)]


@pytest.mark.parametrize("name", AGENTS)
def test_every_agent_acts_trains_and_evaluates(name):
    agent = AGENTS[name]
    pop, metrics = _population(name)
    assert isinstance(pop, q.rl.AbstractTrainingRun)
    assert isinstance(pop.agent_state, q.rl.AbstractAgentState)
    assert isinstance(pop.agent_state.hparams, q.rl.AbstractHParams)
    assert metrics.reward.shape == (POP, 2) and metrics.losses
    assert np.all(np.asarray(pop.env_steps) > 0)
    state = tree_take(pop.agent_state, 0)
    env = ENVS[name]
    if name == "ippo":  # one observation per agent, one discrete action each
        obs, valid = jnp.zeros((2, env.observation_size), jnp.float32), lambda a: (a >= 0) & (a < 3)
    else:
        obs, valid = jnp.zeros(2, jnp.float32), lambda a: jnp.abs(a) <= 1.0
    for deterministic in (True, False):
        action = agent.act(state, obs, deterministic=deterministic, key=jr.key(2))
        assert action.shape == (2,) and bool(jnp.all(valid(action)))
    ev = q.rl.evaluate_population(agent, env, pop, 2, key=jr.key(3))
    assert ev.returns.shape == (POP, 2)
    assert (ev.descriptors is None) if name == "ippo" else ev.descriptors.shape == (POP, 2, 2)
    # The spaces name hyperparameters; every member's values lie inside them.
    for hp_name, space in agent.hparam_spaces.items():
        assert bool(jnp.all(space.contains(getattr(pop.agent_state.hparams, hp_name))))


@pytest.mark.parametrize("name", AGENTS)
def test_storage_and_training_forms(name):
    agent = AGENTS[name]
    pop, _ = _population(name)
    state = tree_take(pop.agent_state, 1)
    stored = agent.empty_optimiser_states(state)
    assert sum(x.nbytes for x in _leaves(stored)) < sum(x.nbytes for x in _leaves(state))
    back = agent.init_optimiser_states(stored)
    assert jax.tree.structure(back) == jax.tree.structure(state)
    # Targets (where the agent has them) equal the online networks after a reset.
    reset = agent.reset_targets(state)
    for field in ("target_policy", "target_critic"):
        if hasattr(reset, field):
            online = getattr(reset, field.removeprefix("target_"))
            assert bool(eqx.tree_equal(getattr(reset, field), online))
            assert bool(eqx.tree_equal(getattr(back, field), online))
    # The genome round-trips, and replacing it changes exactly the genome.
    genome = agent.genome(state)
    moved = jax.tree.map(lambda x: x + 1.0 if eqx.is_inexact_array(x) else x, genome)
    new = agent.with_genome(state, moved)
    assert bool(eqx.tree_equal(agent.genome(new), moved))
    assert bool(eqx.tree_equal(new.hparams, state.hparams))


@pytest.mark.parametrize("name", AGENTS)
def test_pbt_over_every_agent_eager_and_jitted(name):
    agent = AGENTS[name]
    pop, _ = _population(name)
    returns = jnp.asarray([3.0, jnp.nan, 1.0, 2.0], jnp.float32)
    pbt = q.rl.PBT(POP, 1, 2, agent.hparam_spaces)
    eager, info = pbt.update(pop, returns, key=jr.key(4))
    jitted, jinfo = eqx.filter_jit(lambda p, r, k: pbt.update(p, r, key=k))(pop, returns, jr.key(4))
    assert bool(eqx.tree_equal(eager, jitted))
    # NaN ranks last and is replaced first; the best (member 0) is the only source.
    assert sorted(np.asarray(info.replaced).tolist()) == [1, 2]
    assert np.asarray(info.sources).tolist() == [0, 0]
    genome = lambda p, i: agent.genome(tree_take(p.agent_state, i))
    assert bool(eqx.tree_equal(genome(eager, 1), genome(pop, 0)))
    assert bool(eqx.tree_equal(genome(eager, 0), genome(pop, 0)))  # the best is kept
    assert bool(eqx.tree_equal(genome(eager, 3), genome(pop, 3)))


@pytest.mark.parametrize("name", SINGLE)
def test_me_pbt_over_every_agent(name):
    agent = AGENTS[name]
    config = q.PBTEmitterConfig(
        pg_population_size=4, ga_population_size=2, num_training_iterations=1,
        fraction_best_to_replace_from=0.25, fraction_to_replace_from_best=0.25,
        fraction_to_replace_from_samples=0.25,
    )  # fmt: skip
    emitter = q.PBTEmitter(agent, ENV, config, agent.hparam_spaces, q.IsoLineVariation(0.01, 0.1))
    scorer = q.PolicyScorer(ENV, agent=agent)
    algo = q.MAPElites(emitter, scorer, scorer.qd_offset, lineage=True)
    cells = q.GridTessellation((4, 4), minval=-1.0, maxval=1.0)
    genotypes = emitter.initial_genotypes(6, key=jr.key(5))
    state, _ = eqx.filter_jit(algo.init)(genotypes, cells, key=jr.key(6))
    state, metrics = eqx.filter_jit(lambda s, k: algo.update(s, key=k))(state, jr.key(7))
    assert int(metrics.num_filled) >= 1
    stored = state.repertoire.genotypes
    # The repertoire holds storage forms: the structure of the initial genotypes.
    assert jax.tree.structure(stored) == jax.tree.structure(genotypes)
    assert int(state.emitter_state.training_env_steps) > 0


def test_changing_hyperparameter_values_never_retraces():
    agent = AGENTS["ppo"]
    pop, _ = _population("ppo")
    traces = []

    @eqx.filter_jit
    def chunk(p, k):
        traces.append(1)
        return q.rl.train_population(agent, ENV, p, 1, key=k)

    chunk(pop, jr.key(0))
    lr = pop.agent_state.hparams.actor_lr
    other = eqx.tree_at(lambda p: p.agent_state.hparams.actor_lr, pop, lr * 2.0)
    chunk(other, jr.key(0))
    assert len(traces) == 1


# --------------------------------------------------------------------------- contract errors


def test_forgetting_part_of_the_contract_fails_at_construction():
    class NoGenome(q.rl.AbstractOffPolicyAgent):
        observation_size: int = 2
        action_size: int = 2
        normalise_observations: bool = False
        minibatch_size: int = 4
        num_envs: int = 2
        buffer_size: int = 8
        grad_updates_per_step: float = 1.0

        init = DDPG.init
        act = DDPG.act
        update = DDPG.update
        empty_optimiser_states = DDPG.empty_optimiser_states
        init_optimiser_states = DDPG.init_optimiser_states

    with pytest.raises(TypeError, match="genome"):
        NoGenome()

    class NoBuffer(q.rl.AbstractOffPolicyAgent):  # forgets the buffer_size field
        observation_size: int = 2
        action_size: int = 2
        normalise_observations: bool = False
        minibatch_size: int = 4
        num_envs: int = 2
        grad_updates_per_step: float = 1.0

        init = DDPG.init
        act = DDPG.act
        update = DDPG.update
        empty_optimiser_states = DDPG.empty_optimiser_states
        init_optimiser_states = DDPG.init_optimiser_states
        reset_targets = DDPG.reset_targets
        genome = DDPG.genome
        with_genome = DDPG.with_genome

    with pytest.raises(TypeError, match="buffer_size"):
        NoBuffer()

    class NoTargetReset(q.rl.AbstractOffPolicyAgent):  # forgets reset_targets: no silent default
        observation_size: int = 2
        action_size: int = 2
        normalise_observations: bool = False
        minibatch_size: int = 4
        num_envs: int = 2
        buffer_size: int = 8
        grad_updates_per_step: float = 1.0

        init = DDPG.init
        act = DDPG.act
        update = DDPG.update
        empty_optimiser_states = DDPG.empty_optimiser_states
        init_optimiser_states = DDPG.init_optimiser_states
        genome = DDPG.genome
        with_genome = DDPG.with_genome

    with pytest.raises(TypeError, match="reset_targets"):
        NoTargetReset()


def test_hyperparameters_must_be_float32_arrays():
    class Loose(q.rl.AbstractHParams):
        lr: float = 1e-3  # no converter: a Python float would retrace per value

        def default_spaces(self):
            return {"lr": q.rl.Uniform(1e-4, 1e-2)}

    with pytest.raises(TypeError, match=r"Loose.lr must be a float32 array"):
        Loose()

    # A user's class is checked like the library's: finite, in the range its hparam declares,
    # a number (the error names the field), and with converter=f32 (no range) at least finite.
    class Declared(q.rl.AbstractHParams):
        lr: Float[Array, ""] = q.rl.hparam(1e-3, low=0.0)
        discount: Float[Array, ""] = q.rl.hparam(0.99, low=0.0, high=1.0)

        def default_spaces(self):
            return {}

    with pytest.raises(ValueError, match=r"Declared.discount must lie in \[0.0, 1.0\], got -0.5"):
        Declared(discount=-0.5)
    with pytest.raises(ValueError, match=r"Declared.lr must be finite"):
        Declared(lr=float("nan"))
    with pytest.raises(TypeError, match=r"Declared.lr must be a float32 array \(a number\)"):
        Declared(lr="fast")
    with pytest.raises(ValueError, match=r"DDPGHParams.tau must lie in \[0.0, 1.0\]"):
        DDPGHParams(tau=2.0)

    class Converted(q.rl.AbstractHParams):  # declared with a plain converter: no range
        lr: Float[Array, ""] = eqx.field(default=1e-3, converter=q.rl.f32)

        def default_spaces(self):
            return {}

    with pytest.raises(ValueError, match=r"Converted.lr must be finite"):
        Converted(lr=float("inf"))
    with pytest.raises(TypeError, match=r"Converted.lr must be a float32 array \(a number\)"):
        Converted(lr="fast")  # NumPy's own error named no field
    stacked = eqx.filter_vmap(lambda d: Declared(discount=d))(jnp.asarray([0.9, 0.99]))
    assert stacked.discount.shape == (2,) and stacked.lr.dtype == jnp.float32
    assert DDPGHParams().names() == ("policy_lr", "critic_lr", "discount", "tau", "noise")


def test_pbt_refuses_empty_spaces_and_foreign_names():
    with pytest.raises(ValueError, match="PBT.spaces is empty"):
        q.rl.PBT(4, 1, 2, {})
    agent = AGENTS["ddpg"]
    with pytest.raises(ValueError, match="spaces are empty"):
        q.rl.init_population(agent, ENV, {}, 4, key=jr.key(0))
    with pytest.raises(ValueError, match=r"spaces name \['alpha_lr'\], which DDPGHParams"):
        q.rl.init_population(agent, ENV, {"alpha_lr": q.rl.Uniform(0.0, 1.0)}, 4, key=jr.key(0))
    wide = dataclasses.replace(agent, observation_size=3)
    with pytest.raises(ValueError, match="observation_size is 3 but the environment's is 2"):
        q.rl.init_population(wide, ENV, None, 4, key=jr.key(0))


@typing.final
class KeyedRun(q.rl.AbstractTrainingRun):
    """A training run that carries its own typed key (as IPPO's state does)."""

    agent_state: q.rl.AbstractAgentState
    env_steps: Int[Array, ""]
    key: jax.Array


def test_pbt_update_works_eagerly_on_runs_holding_typed_keys():
    pop, _ = _population("ddpg")
    keyed = KeyedRun(pop.agent_state, pop.env_steps, jr.split(jr.key(9), POP))
    pbt = q.rl.PBT(POP, 1, 1, AGENTS["ddpg"].hparam_spaces)
    new, info = pbt.update(keyed, jnp.arange(POP, dtype=jnp.float32), key=jr.key(10))
    (worst,) = np.asarray(info.replaced).tolist()
    assert worst == 0
    assert bool(jnp.all(jr.key_data(new.key[0]) == jr.key_data(keyed.key[3])))


@functools.cache
def _jitted_pbt(name):
    pbt = q.rl.PBT(POP, 1, 2, AGENTS[name].hparam_spaces)
    return pbt, eqx.filter_jit(lambda p, r, k: pbt.update(p, r, key=k))


@pytest.mark.parametrize("name", AGENTS)
@settings(max_examples=8)
@given(
    returns=st.lists(
        st.one_of(st.floats(-100, 100, allow_subnormal=False), st.just(float("nan"))),
        min_size=POP,
        max_size=POP,
    ),
    seed=st.integers(0, 999),
)
def test_pbt_properties_over_any_population(name, returns, seed):
    pop, _ = _population(name)
    pbt, update = _jitted_pbt(name)
    values = np.asarray(returns, np.float32)  # what PBT sees (tiny float64s tie at 0)
    new, info = update(pop, jnp.asarray(values), jr.key(seed))
    ranked = np.where(np.isnan(values), -np.inf, values)  # NaN ranks last
    replaced, sources = np.asarray(info.replaced), np.asarray(info.sources)
    kept = np.setdiff1d(np.arange(POP), replaced)
    assert len(set(replaced.tolist())) == 2
    assert ranked[replaced].max() <= ranked[kept].min()
    assert np.all(ranked[sources] == ranked.max())  # the best set is the single best
    assert not set(sources.tolist()) & set(replaced.tolist())  # the best set is never replaced
    for i in range(POP):
        after = tree_take(new, i)
        if i in replaced:
            source = tree_take(pop, int(sources[replaced.tolist().index(i)]))
            # A copy of the whole run but its explored hyperparameters, which lie in the spaces.
            like = eqx.tree_at(lambda r: r.agent_state.hparams, after, source.agent_state.hparams)
            assert bool(eqx.tree_equal(like, source))
            for hp_name, space in pbt.spaces.items():
                assert bool(space.contains(getattr(after.agent_state.hparams, hp_name)))
        else:
            assert bool(eqx.tree_equal(after, tree_take(pop, i)))


def test_shapes_that_disagree_with_the_agent_are_named():
    for name in ("td3", "sac", "ppo"):
        agent = AGENTS[name]
        state = tree_take(_population(name)[0].agent_state, 0)
        with pytest.raises(ValueError, match=r"\.act: obs must have shape \(2,\), got \(3,\)"):
            agent.act(state, jnp.zeros(3, jnp.float32), key=jr.key(0))
    ippo = AGENTS["ippo"]
    state = tree_take(_population("ippo")[0].agent_state, 0)
    with pytest.raises(ValueError, match=r"IPPO.act: obs must have shape \(2, \d+\), got \(3,"):
        ippo.act(state, jnp.zeros((3, TEAM.observation_size), jnp.float32), key=jr.key(0))
    td3 = AGENTS["td3"]
    state = tree_take(_population("td3")[0].agent_state, 0)
    state = td3.init_optimiser_states(state)
    z = lambda *shape: jnp.zeros(shape, jnp.float32)
    wide = q.envs.Transition(z(4, 2), z(4, 3), z(4), z(4, 2), z(4), z(4))
    with pytest.raises(ValueError, match=r"TD3.update: batch.action must have shape \(4, 2\)"):
        td3.update(state, wide, key=jr.key(0))
    buffer = q.rl.ReplayBuffer.empty(8, q.envs.Transition(z(2), z(2), z(), z(2), z(), z()))
    with pytest.raises(
        ValueError, match=r"batch\.obs must have items of shape \(2,\) as stored, got \(3,\)"
    ):
        buffer.insert(q.envs.Transition(z(4, 3), z(4, 2), z(4), z(4, 3), z(4), z(4)))
    assert int(buffer.size) == 0  # nothing stored changed
