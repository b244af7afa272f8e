"""The agent contract beyond its laws. The laws (`tests/kit/test_laws.py`, over TD3, SAC, PPO,
IPPO and a user's DDPG written outside the package, `user_agent.py`) check the storage and
training forms, the genome, determinism, retracing, populations and PBT's copies; here, for
the same agents: acting, training and evaluating through the population functions, one
ME-PBT iteration on single-agent tasks, the errors of a contract left incomplete, and
hyperparameters and shapes refused by name."""

import dataclasses
import functools
import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
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
# ME-PBT scores single-agent episodes (TD3: test_me_pbt.py::test_me_pbt_keeps_its_invariants).
SINGLE = [name for name in AGENTS if name not in ("ippo", "td3")]
POP = 4


@functools.cache
def _population(name):
    agent, env = AGENTS[name], ENVS[name]
    pop = q.rl.init_population(agent, env, None, POP, key=jr.key(0))
    return q.rl.train_population(agent, env, pop, 2, key=jr.key(1))


def _leaves(tree):
    return [x for x in jax.tree.leaves(tree) if eqx.is_array(x)]


# The fast tier keeps every agent but SAC (TD3 trains off-policy there); the whole suite all.
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.slow] * (n == "sac")) for n in AGENTS]
)
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


# The fast tier keeps the user's agent; the whole suite every one.
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.slow] * (n != "ddpg")) for n in SINGLE]
)
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
