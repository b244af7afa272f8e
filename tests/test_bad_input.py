"""Bad input at the public entry points that earlier checks did not reach: each case asserts the
error type and that the message names the argument (and, for shapes, the shape received).

Under pytest the whole package is also checked by jaxtyping + beartype, which would often refuse
these inputs first. A user does not run under that hook, so this module switches it off
(``jaxtyping_disable``, read at call time) and tests the library's own checks, the errors users
get; every other test module keeps the hook on. The checks run before anything is computed,
so no case here compiles a program of its own, and the modules are immutable, so a refused call
leaves every stored value as it was (the stateful stores, the repertoire and the replay buffer,
assert that explicitly in their own tests).
"""

import functools
import math

import jax.numpy as jnp
import jax.random as jr
import jaxtyping
import pytest
from hypothesis import given, strategies as st

import eqx_qd as q
from eqx_qd._qdrl import pga_me
from eqx_qd.rl import _pbt


KEY = jr.key(0)
ENV = q.envs.PointMaze(walls=False)
SMALL = dict(policy_hidden=(4,), critic_hidden=(4,), minibatch_size=4)


@pytest.fixture(autouse=True)
def _without_the_annotation_hook():
    jaxtyping.config.update("jaxtyping_disable", True)
    yield
    jaxtyping.config.update("jaxtyping_disable", False)


def _raises(fn, *names: str):
    """``fn()`` raises a ValueError or TypeError whose message names each of ``names``."""
    with pytest.raises((ValueError, TypeError)) as info:
        fn()
    message = str(info.value)
    for name in names:
        assert name in message, f"{name!r} not in {message!r}"
    return message


@functools.cache
def _td3(obs: int = 2) -> q.rl.TD3:
    return q.rl.TD3(observation_size=obs, action_size=2, num_envs=2, buffer_size=8, **SMALL)


@functools.cache
def _off_policy_state() -> q.rl.OffPolicyRun:
    return _td3().init_run(ENV, _td3().init(key=KEY), key=KEY)


@functools.cache
def _population():
    return q.rl.init_population(_td3(), ENV, None, 3, key=KEY)


@functools.cache
def _ippo() -> q.rl.IPPO:
    env = q.envs.TimeLimit(q.envs.LineTargets(n=2, size=8), 16)
    return q.rl.IPPO.for_env(env, rollout_length=4, num_envs=2, num_minibatches=1, actor_epochs=1,
                          critic_epochs=1)  # fmt: skip


def _repertoire() -> q.MAPElitesRepertoire:
    tess = q.GridTessellation((2, 2), 0.0, 1.0)
    g, d, f = jnp.zeros((2, 3)), jnp.full((2, 2), 0.3), jnp.zeros(2)
    return q.init_repertoire(tess, g, d, f)[0]


# ----------------------------------------------------------------------------- QD core


def test_gae_refuses_mismatched_shapes_and_discounts():
    x = jnp.zeros((5, 3))
    ok = dict(rewards=x, values=x, next_values=x, terminated=x, truncated=x)
    for name in ("values", "next_values", "terminated", "truncated"):
        bad = dict(ok, **{name: jnp.zeros((5, 4))})
        _raises(lambda: q.rl.gae(**bad, gamma=0.9, gae_lambda=0.9), name, "(5, 4)")
    _raises(lambda: q.rl.gae(**ok, gamma=1.5, gae_lambda=0.9), "gamma")
    _raises(lambda: q.rl.gae(**ok, gamma=0.9, gae_lambda=math.nan), "gae_lambda")


def test_qd_metrics_refuses_a_non_finite_or_non_scalar_offset():
    rep = _repertoire()
    _raises(lambda: q.qd_metrics(rep, math.inf), "qd_offset")
    _raises(lambda: q.qd_metrics(rep, jnp.zeros(2)), "qd_offset", "(2,)")


def test_selectors_refuse_bad_counts_and_shapes():
    fit = jnp.array([0.0, -jnp.inf, 1.0])
    for sel in (q.UniformSelector(), q.FitnessProportionalSelector()):
        name = type(sel).__name__
        _raises(lambda: sel.indices(fit, 0, key=KEY), name, "num")
        _raises(lambda: sel.indices(fit.reshape(3, 1), 2, key=KEY), name, "fitnesses")
    for eps in (0.0, -1.0, math.inf, math.nan):
        _raises(lambda: q.FitnessProportionalSelector(eps=eps), "FitnessProportionalSelector.eps")


@pytest.mark.parametrize("task", [q.Rastrigin(genotype_dim=4), q.Sphere(genotype_dim=4), q.Arm(4)])
def test_tasks_refuse_genotypes_of_another_width(task):
    _raises(lambda: task(jnp.zeros((3, 5)), key=KEY), type(task).__name__, "genotypes", "(3, 5)")
    _raises(lambda: task(jnp.zeros(4), key=KEY), "genotypes")


def test_map_elites_refuses_bad_fields_and_run_lengths():
    emitter = q.MixingEmitter(
        batch_size=2, variation_percentage=0.0, mutation=q.GaussianMutation(sigma=0.1)
    )
    task = q.Sphere(genotype_dim=3)
    _raises(lambda: q.MAPElites(None, task), "MAPElites.emitter")
    _raises(lambda: q.MAPElites(emitter, 3), "MAPElites.scoring_fn")
    _raises(lambda: q.MAPElites(emitter, task, qd_offset=math.nan), "MAPElites.qd_offset")
    algo = q.MAPElites(emitter, task)
    state = q.MAPElitesState(_repertoire(), None, 0, 2)
    _raises(lambda: q.run(algo, state, 0, key=KEY), "num_iterations")


def test_sharded_runs_refuse_an_uneven_split():
    mesh = q.device_mesh(2)
    emitter = q.MixingEmitter(
        batch_size=2, variation_percentage=0.0, mutation=q.GaussianMutation(sigma=0.1)
    )
    algo = q.MAPElites(emitter, q.Sphere(genotype_dim=3), axis_name="p")
    tess = q.GridTessellation((2, 2), 0.0, 1.0)
    _raises(
        lambda: q.init_sharded(algo, jnp.zeros((3, 3)), tess, mesh=mesh, key=KEY),
        "genotypes", "2 devices", "got 3",
    )  # fmt: skip


# ----------------------------------------------------------------------------- operators


def test_operators_refuse_mismatched_parents():
    x1 = {"a": jnp.zeros((4, 3)), "b": jnp.zeros((4, 2))}
    wrong_shape = {"a": jnp.zeros((4, 3)), "b": jnp.zeros((4, 5))}
    wrong_tree = {"a": jnp.zeros((4, 3))}
    for op in (q.IsoLineVariation(0.1, 0.1), q.SBXCrossover(10.0)):
        name = type(op).__name__
        _raises(lambda: op(x1, wrong_shape, key=KEY), name, "x2['b']", "(4, 5)")
        _raises(lambda: op(x1, wrong_tree, key=KEY), name, "x2", "structure")


NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])


@given(value=NON_FINITE, which=st.sampled_from(["min_genotype", "max_genotype"]))
def test_operators_refuse_non_finite_bounds(value, which):
    bounds = {"min_genotype": -1.0, "max_genotype": 1.0}
    bounds[which] = value
    _raises(lambda: q.GaussianMutation(0.1, **bounds), f"GaussianMutation.{which}")
    _raises(lambda: q.SBXCrossover(1.0, **bounds), f"SBXCrossover.{which}")
    _raises(lambda: q.IsoLineVariation(0.1, 0.1, **bounds), f"IsoLineVariation.{which}")
    _raises(lambda: q.PolynomialMutation(1.0, 0.5, **bounds), f"PolynomialMutation.{which}")
    _raises(lambda: q.UniformMutation(0.1, **bounds), f"UniformMutation.{which}")


@given(value=st.one_of(NON_FINITE, st.floats(max_value=-1e-6, min_value=-1e6)))
def test_operators_refuse_bad_parameters(value):
    _raises(lambda: q.GaussianMutation(sigma=value), "GaussianMutation.sigma")
    _raises(lambda: q.UniformMutation(max_uniform=value), "UniformMutation.max_uniform")
    _raises(lambda: q.IsoLineVariation(value, 0.1), "IsoLineVariation.iso_sigma")
    _raises(lambda: q.IsoLineVariation(0.1, value), "IsoLineVariation.line_sigma")
    _raises(lambda: q.SBXCrossover(eta_c=value), "SBXCrossover.eta_c")
    _raises(lambda: q.PolynomialMutation(value, 0.5, 0.0, 1.0), "PolynomialMutation.eta_m")
    rate = 1.0 - value  # above 1 (or non-finite)
    _raises(lambda: q.GaussianMutation(0.1, mutation_rate=rate), "GaussianMutation.mutation_rate")
    _raises(lambda: q.UniformMutation(0.1, mutation_rate=rate), "UniformMutation.mutation_rate")
    _raises(lambda: q.SBXCrossover(1.0, crossover_rate=rate), "SBXCrossover.crossover_rate")


def test_polynomial_mutation_requires_its_bounds():
    _raises(lambda: q.PolynomialMutation(1.0, 0.5, None, 1.0), "PolynomialMutation.min_genotype")
    _raises(
        lambda: q.PolynomialMutation(1.0, 0.5, 1.0, 0.0),
        "PolynomialMutation.min_genotype", "PolynomialMutation.max_genotype",
    )  # fmt: skip


# ----------------------------------------------------------------------------- networks


NETWORKS = {
    "MLP": (lambda: q.rl.MLP(3, 2, [4], key=KEY), lambda n, x: n(x), "x"),
    "DeterministicPolicy": (
        lambda: q.rl.DeterministicPolicy(3, 2, [4], key=KEY),
        lambda n, x: n(x),
        "obs",
    ),
    "TanhGaussianPolicy": (
        lambda: q.rl.TanhGaussianPolicy(3, 2, [4], key=KEY),
        lambda n, x: n.sample(x, key=KEY),
        "obs",
    ),
    "CategoricalActor": (
        lambda: q.rl.CategoricalActor(3, 2, [4], key=KEY),
        lambda n, x: n.sample(x, key=KEY),
        "obs",
    ),
    "GaussianActor": (
        lambda: q.rl.GaussianActor(3, 2, [4], key=KEY),
        lambda n, x: n.mode(x),
        "obs",
    ),
    "ValueCritic": (lambda: q.rl.ValueCritic(3, [4], key=KEY), lambda n, x: n(x), "obs"),
    "QCritics": (
        lambda: q.rl.QCritics(3, 2, [4], key=KEY),
        lambda n, x: n(x, jnp.zeros(2)),
        "obs and action",
    ),
}


BATCHED = {"MLP", "DeterministicPolicy", "TanhGaussianPolicy"}  # also take (..., 3)


@functools.cache
def _network(name):
    return NETWORKS[name][0]()


@pytest.mark.parametrize("name", sorted(NETWORKS))
@given(shape=st.lists(st.integers(1, 5), min_size=0, max_size=2).map(tuple))
def test_networks_refuse_inputs_of_another_shape(name, shape):
    net, call, arg = _network(name), NETWORKS[name][1], NETWORKS[name][2]
    if shape == (3,) or (name in BATCHED and shape[-1:] == (3,)):
        call(net, jnp.zeros(shape))  # the right shape (or a batch of them) goes through
        return
    _raises(lambda: call(net, jnp.zeros(shape)), arg, str(shape))


def test_network_constructors_name_the_bad_size():
    _raises(lambda: q.rl.MLP(3, 0, [4], key=KEY), "MLP", "out_size")
    _raises(lambda: q.rl.MLP(3, 2, [4, 0], key=KEY), "MLP", "hidden[1]")
    _raises(lambda: q.rl.DeterministicPolicy(0, 2, [4], key=KEY), "DeterministicPolicy", "obs_size")
    _raises(
        lambda: q.rl.TanhGaussianPolicy(2, 0, [4], key=KEY), "TanhGaussianPolicy", "action_size"
    )
    _raises(lambda: q.rl.QCritics(2, 2, [4], num_critics=0, key=KEY), "QCritics", "num_critics")
    _raises(lambda: q.rl.CategoricalActor(2, 0, [4], key=KEY), "CategoricalActor", "num_actions")
    _raises(
        lambda: q.rl.GaussianActor(2, 2, [4], init_log_std=math.inf, key=KEY),
        "GaussianActor", "init_log_std",
    )  # fmt: skip
    _raises(lambda: q.rl.ValueCritic(2, [-1], key=KEY), "ValueCritic", "hidden[0]")
    _raises(
        lambda: q.rl.JointActor(0, 2, 2, [4], discrete=True, key=KEY), "JointActor", "num_agents"
    )
    _raises(lambda: q.rl.JointValueCritic(2, 0, [4], key=KEY), "JointValueCritic", "obs_size")


def test_joint_networks_and_actions_refuse_other_shapes():
    actor = q.rl.JointActor(2, 3, 2, [4], discrete=False, key=KEY)
    critic = q.rl.JointValueCritic(2, 3, [4], key=KEY)
    _raises(lambda: actor.mode(jnp.zeros((3, 3))), "JointActor", "obs", "(3, 3)")
    _raises(lambda: critic(jnp.zeros(6)), "JointValueCritic", "obs", "(6,)")
    gauss = _network("GaussianActor")
    _raises(lambda: gauss.log_prob(jnp.zeros(3), jnp.zeros(3)), "action", "(3,)")


def test_running_normaliser_refuses_bad_sizes_and_batches():
    _raises(lambda: q.rl.RunningNormaliser.create(0), "dim")
    _raises(lambda: q.rl.RunningNormaliser.create(3, eps=math.nan), "RunningNormaliser.eps")
    _raises(lambda: q.rl.RunningNormaliser.create(3, clip=0.0), "RunningNormaliser.clip")
    norm = q.rl.RunningNormaliser.create(3)
    _raises(lambda: norm.update(jnp.zeros((5, 4))), "batch", "(5, 4)")
    _raises(lambda: norm.normalise(jnp.zeros((2, 4))), "x", "(2, 4)")


# ----------------------------------------------------------------------------- environments


@pytest.mark.parametrize("fn", [q.envs.mean_descriptor, q.envs.final_descriptor])
def test_descriptor_functions_refuse_mismatched_shapes(fn):
    _raises(lambda: fn(jnp.zeros((5, 2)), jnp.ones(4)), fn.__name__, "valid", "(4,)")
    _raises(lambda: fn(jnp.zeros(5), jnp.ones(5)), fn.__name__, "state_descs", "(5,)")


# ----------------------------------------------------------------------------- agents and PBT


def test_training_loops_refuse_an_agent_of_other_sizes():
    state, other = _off_policy_state(), _td3(obs=3)
    calls = {
        "train_iteration": lambda: other.train(ENV, state, 1, key=KEY),
        "warmup": lambda: other.warmup(ENV, state, 1, key=KEY),
        "init_run": lambda: other.init_run(ENV, state.agent_state, key=KEY),
        "evaluate": lambda: other.evaluate(ENV, state.agent_state, 1, key=KEY),
    }
    for where, call in calls.items():
        _raises(call, where, "observation_size is 3", "environment's is 2")


def test_training_loops_refuse_non_positive_counts():
    agent, state = _td3(), _off_policy_state()
    _raises(lambda: agent.train(ENV, state, 0, key=KEY), "train: num_iterations")
    _raises(lambda: agent.warmup(ENV, state, -1, key=KEY), "warmup: num_iterations")
    _raises(lambda: agent.evaluate(ENV, state.agent_state, 0, key=KEY), "num_episodes")
    _raises(
        lambda: q.rl.TD3(observation_size=2, action_size=2, grad_updates_per_step=math.inf),
        "TD3.grad_updates_per_step",
    )


def test_population_functions_refuse_bad_arguments():
    agent, population = _td3(), _population()
    other = _td3(obs=3)
    _raises(lambda: q.rl.train_population(other, ENV, population, 1, key=KEY), "train_population")
    _raises(lambda: q.rl.train_population(agent, ENV, population, 0, key=KEY), "num_iterations")
    _raises(
        lambda: q.rl.evaluate_population(other, ENV, population, 1, key=KEY), "evaluate_population"
    )
    _raises(lambda: q.rl.evaluate_population(agent, ENV, population, 0, key=KEY), "num_episodes")
    explore = lambda h, k: h
    slots = jnp.array([0, 1], jnp.int32)
    _raises(
        lambda: _pbt.copy_into(population, population, slots.reshape(2, 1), explore, key=KEY),
        "slots", "(2, 1)",
    )  # fmt: skip
    _raises(
        lambda: _pbt.copy_into(population, population, jnp.array([0.0, 1.0]), explore, key=KEY),
        "slots", "float32",
    )  # fmt: skip
    _raises(
        lambda: _pbt.copy_into(population, population, jnp.arange(4), explore, key=KEY),
        "4 slots", "population of 3",
    )  # fmt: skip
    stripped = _pbt.population_without_optimiser_states(agent, population)
    _raises(lambda: _pbt.copy_into(population, stripped, slots, explore, key=KEY), "pool")


def test_hparam_functions_refuse_bad_spaces_and_factors():
    hparams = q.rl.TD3HParams()
    _raises(
        lambda: q.rl.sample_hparams(hparams, {"policy_lr": 0.1}, key=KEY), "spaces['policy_lr']"
    )
    _raises(
        lambda: q.rl.sample_hparams(hparams, {"nope": q.rl.Uniform(0.0, 1.0)}, key=KEY),
        "sample_hparams", "nope",
    )  # fmt: skip
    spaces = {"policy_lr": q.rl.Uniform(1e-4, 1e-3)}
    _raises(lambda: q.rl.perturb_hparams(hparams, spaces, factors=(0.8, -1.2), key=KEY), "factors")
    _raises(lambda: q.rl.perturb_hparams(hparams, spaces, factors=(), key=KEY), "factors")
    _raises(lambda: q.rl.log_uniform_learning_rates([1, 2]), "spaces")


def test_pgame_emitter_names_its_bad_arguments():
    td3 = _td3()
    common = dict(td3=td3, hparams=q.rl.TD3HParams(), critic_steps=1, pg_steps=1,
                  pg_lr=1e-3, buffer_size=8)  # fmt: skip
    _raises(lambda: q.pgame_emitter(batch_size=1, ga_fraction=0.5, **common), "batch_size")
    _raises(lambda: q.pgame_emitter(batch_size=4, ga_fraction=1.5, **common), "ga_fraction")
    _raises(
        lambda: q.pgame_emitter(batch_size=4, ga_fraction=0.5, convention="x", **common),
        "pgame_emitter: convention",
    )
    _raises(lambda: pga_me.pgame_split(1, 0.5, "original"), "pgame_split: batch_size")
    _raises(lambda: pga_me.pgame_split(4, math.nan, "original"), "pgame_split: ga_fraction")
    _raises(lambda: pga_me.pgame_split(4, 0.5, "torch"), "pgame_split: convention")
    sbx = q.SBXCrossover(eta_c=1.0)
    _raises(lambda: q.MutatedVariation(sbx, sbx), "mutation")
    _raises(
        lambda: q.MutatedVariation(q.GaussianMutation(0.1), q.GaussianMutation(0.1)), "variation"
    )


def test_ippo_refuses_negative_counts_and_another_team():
    agent, env = _ippo(), q.envs.TimeLimit(q.envs.LineTargets(n=2, size=8), 16)
    state = agent.init(key=KEY)
    run = agent.init_run(env, state, key=KEY)
    _raises(lambda: agent.train(env, run, -1, key=KEY), "IPPO.train: num_iterations")
    _raises(lambda: agent.evaluate(env, state, 0, key=KEY), "evaluate: num_episodes")
    _raises(lambda: agent.init_run(q.envs.LineTargets(n=3), state, key=KEY), "num_agents is 2", "3")
    _raises(
        lambda: agent.init_run(q.envs.PointMaze(), state, key=KEY), "IPPO.init_run", "PointMaze"
    )
    ppo = q.rl.PPO(observation_size=2, action_size=2, rollout_length=4, num_envs=2)
    _raises(lambda: ppo.init_run(env, ppo.init(key=KEY), key=KEY), "PPO.init_run", "TimeLimit")


def test_agent_and_emitter_constructors_name_the_bad_field():
    _raises(lambda: q.rl.SAC(observation_size=2, action_size=2, init_alpha=0.0), "SAC.init_alpha")
    _raises(lambda: q.rl.SAC(observation_size=0, action_size=2), "SAC.observation_size")
    _raises(lambda: q.rl.PPO(observation_size=2, action_size=2, num_envs=0), "PPO.num_envs")
    _raises(lambda: q.rl.PPO(observation_size=2, action_size=-1), "PPO.action_size")
    common = dict(td3=_td3(), hparams=q.rl.TD3HParams(), critic_steps=1, pg_steps=1,
                  buffer_size=8, pg_lr=1e-3)  # fmt: skip
    _raises(lambda: q.QualityPGEmitter(batch_size=0, **common), "QualityPGEmitter.batch_size")
    _raises(
        lambda: q.QualityPGEmitter(batch_size=2, **dict(common, pg_lr=math.nan)),
        "QualityPGEmitter.pg_lr",
    )
    _raises(
        lambda: q.QualityPGEmitter(batch_size=2, **dict(common, buffer_size=0)),
        "QualityPGEmitter.buffer_size",
    )
    _raises(lambda: q.envs.BraxMultiAgentEnv("no_such_task"), "no_such_task", "known")
    _raises(lambda: q.envs.BraxMultiAgentEnv("ant_4x2", episode_length=0), "episode_length")


def test_init_repertoire_and_helpers_refuse_what_they_cannot_read():
    tess = q.GridTessellation((2, 2), 0.0, 1.0)
    g, f = jnp.zeros((2, 3)), jnp.zeros(2)
    _raises(lambda: q.init_repertoire(tess, g, jnp.zeros((2, 3)), f), "descriptors", "(2, 3)")
    _raises(lambda: q.init_repertoire(tess, g, jnp.zeros((2, 2)), jnp.zeros(3)), "fitnesses")
    _raises(lambda: q.internal.bytes_per_cell(g), "bytes_per_cell", "MAPElitesRepertoire")
    _raises(lambda: q.parent_ids(g), "parent_ids", "Elites")
    _raises(lambda: q.episode_transitions(None), "episode_transitions", "ScoringExtra")
    _raises(lambda: q.rl.hparams_table(g), "hparams_table", "population")
    _raises(
        lambda: _pbt.population_without_optimiser_states(_td3(), g),
        "population_without_optimiser_states", "population",
    )  # fmt: skip
    from eqx_qd.jobs._ippo import summarise

    _raises(lambda: summarise(jnp.zeros(3), axis=2), "axis 2")


def test_nearest_centroid_and_training_reset_name_their_arguments():
    c = jnp.zeros((4, 2))
    _raises(lambda: q.nearest_centroid(jnp.zeros((3, 3)), c), "points", "(batch, 2)", "(3, 3)")
    _raises(lambda: q.nearest_centroid(jnp.zeros(2), c), "points", "(2,)")
    _raises(lambda: q.nearest_centroid(jnp.zeros((3, 2)), jnp.zeros(4)), "centroids", "(4,)")
    _raises(lambda: q.envs.training_reset(None, key=KEY), "training_reset", "AbstractBaseEnv")


def test_environment_wrappers_and_meshes_refuse_the_wrong_kind():
    _raises(
        lambda: q.envs.SingleAgentView(q.envs.LineTargets()), "SingleAgentView.env", "LineTargets"
    )
    _raises(lambda: q.envs.TimeLimit(ENV, 5), "TimeLimit.env", "PointMaze")
    _raises(lambda: q.device_mesh(0), "0 devices")
    _raises(lambda: q.device_mesh(1000), "1000 devices")
