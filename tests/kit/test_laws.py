"""The testing kit's laws: every built-in emitter keeps them, every planted bug breaks the law
it was planted for, by name."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from planted import (
    Bounces,
    Fine,
    GrowingState,
    Normalising,
    PLANTED_AGENTS,
    PLANTED_EMITTERS,
    PLANTED_ENVS,
    PLANTED_RANKERS,
    PLANTED_REPERTOIRES,
    SimpleGrid,
    Walk,
)
from user_agent import DDPG

import eqx_qd as q
from eqx_qd import jobs
from eqx_qd._emitters.rankers import RANKERS
from eqx_qd.testing import (
    AGENT_LAWS,
    check_agent,
    check_emitter,
    check_env,
    check_ranker,
    check_repertoire,
    EMITTER_LAWS,
    ENV_LAWS,
    LawBroken,
    RANKER_LAWS,
    REPERTOIRE_LAWS,
)


DIM = 4
POPULATION = jnp.asarray(np.random.default_rng(0).normal(size=(6, DIM)), jnp.float32)
TASK = jobs.make_task("projected_sphere", genotype_dim=DIM)


def _builtin(name: str) -> q.AbstractEmitter:
    if name in ("iso_line", "gaussian"):
        return jobs.make_emitter(name, batch_size=6)
    if name == "composed":
        return q.ComposedEmitter(
            [
                jobs.make_emitter("iso_line", batch_size=4),
                jobs.make_emitter("gaussian", batch_size=2),
            ]
        )
    if name == "bandit":
        pool = [jobs.make_emitter("cma_me", batch_size=4, task=TASK, num_emitters=1)] * 3
        return q.BanditEmitter(pool, 2)
    if name in ("og_map_elites", "omg_mega"):
        return jobs.make_emitter(name, batch_size=6, task=TASK)
    return jobs.make_emitter(name, batch_size=6, task=TASK, num_emitters=2)


BUILTIN = [
    "iso_line",
    "gaussian",
    "cma_me",
    "cma_mae",
    "cma_mega",
    "cma_maega",
    "og_map_elites",
    "omg_mega",
    "composed",
    "bandit",
]


# The bandit's law runs in the whole suite (its members' emitters are in the fast tier).
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.slow] * (n == "bandit")) for n in BUILTIN]
)
def test_builtin_emitters_keep_every_law(name):
    emitter = _builtin(name)
    differentiates = ("cma_mega", "cma_maega", "og_map_elites", "omg_mega")
    scoring = TASK if name in differentiates else None
    check_emitter(emitter, POPULATION, scoring_fn=scoring, max_examples=5)


@pytest.mark.slow  # (the fast tier's budget: issue 68)
def test_the_qd_rl_emitters_keep_every_law():
    """PGA-ME's (GA + policy gradients + the greedy actor) and ME-PBT's, on policies scored
    by their episodes (tiny sizes: the laws' programs compile once each)."""
    maze = q.envs.PointMaze(walls=False, length=6)
    cells = q.GridTessellation((4, 4), minval=-1.0, maxval=1.0)
    td3 = q.rl.TD3(observation_size=2, action_size=2, policy_hidden=(8,), critic_hidden=(8,),
                   minibatch_size=8, num_envs=2, buffer_size=64)  # fmt: skip
    pgame = q.pgame_emitter(
        batch_size=4, ga_fraction=0.5, td3=td3, hparams=q.rl.TD3HParams(), critic_steps=2,
        pg_steps=2, pg_lr=1e-3, buffer_size=256,
    )  # fmt: skip
    policies = eqx.filter_vmap(lambda k: td3.init_policy(key=k))(jr.split(jr.key(0), 6))
    check_emitter(pgame, policies, tessellation=cells, scoring_fn=q.PolicyScorer(maze),
                  max_examples=2)  # fmt: skip
    config = q.PBTEmitterConfig(
        pg_population_size=2, ga_population_size=2, num_training_iterations=1,
        fraction_best_to_replace_from=0.5, fraction_to_replace_from_best=0.5,
        fraction_to_replace_from_samples=0.0,
    )  # fmt: skip
    mepbt = q.PBTEmitter(td3, maze, config, td3.hparam_spaces, q.IsoLineVariation(0.01, 0.1))
    genotypes = mepbt.initial_genotypes(6, key=jr.key(1))
    check_emitter(mepbt, genotypes, tessellation=cells,
                  scoring_fn=q.PolicyScorer(maze, agent=td3), max_examples=2)  # fmt: skip


@pytest.mark.slow
def test_qdpg_emitter_keeps_every_law():
    """QDPG's (quality and diversity policy gradients, their greedy actors, a GA), on policies
    scored by their episodes in the maze, whose state descriptors are positions."""
    maze = q.envs.PointMaze(walls=False, length=6)
    cells = q.GridTessellation((4, 4), minval=-1.0, maxval=1.0)
    td3 = q.rl.TD3(observation_size=2, action_size=2, policy_hidden=(8,), critic_hidden=(8,),
                   minibatch_size=8)  # fmt: skip
    qdpg = q.qdpg_emitter(
        quality_batch_size=2, diversity_batch_size=2, ga_batch_size=1,
        diversity=q.DiversityReward(k=3, scaling=1.0, acceptance_threshold=0.05, archive_size=64),
        td3=td3, hparams=q.rl.TD3HParams(), critic_steps=2, pg_steps=2, pg_lr=1e-3,
        buffer_size=256,
    )  # fmt: skip
    policies = eqx.filter_vmap(lambda k: td3.init_policy(key=k))(jr.split(jr.key(0), 6))
    check_emitter(qdpg, policies, tessellation=cells, scoring_fn=q.PolicyScorer(maze),
                  max_examples=2)  # fmt: skip


@pytest.mark.slow
def test_dcrl_me_emitter_keeps_every_law():
    """DCRL-ME's (GA + conditioned policy gradients + injected actors), on policies scored by
    their episodes (a test of its own: the suite's two workers share the QD x RL laws)."""
    maze = q.envs.PointMaze(walls=False, length=6)
    cells = q.GridTessellation((4, 4), minval=-1.0, maxval=1.0)
    td3 = q.rl.TD3(observation_size=2, action_size=2, policy_hidden=(8,), critic_hidden=(8,),
                   minibatch_size=8, num_envs=2, buffer_size=64)  # fmt: skip
    dcrl = q.dcrl_emitter(
        td3=td3, hparams=q.rl.TD3HParams(), descriptor_bounds=maze.descriptor_bounds,
        ga_batch_size=2, pg_batch_size=1, ai_batch_size=1, critic_steps=2, pg_steps=2,
        buffer_size=256, reward_offset=maze.reward_offset,
    )  # fmt: skip
    policies = eqx.filter_vmap(lambda k: td3.init_policy(key=k))(jr.split(jr.key(0), 6))
    check_emitter(dcrl, policies, tessellation=cells, scoring_fn=q.PolicyScorer(maze),
                  max_examples=2)  # fmt: skip


def test_the_docs_emitter_keeps_every_law():
    check_emitter(Fine(batch_size=5), POPULATION, max_examples=5)


@pytest.mark.parametrize("planted", list(PLANTED_EMITTERS), ids=lambda c: c.__name__)
def test_each_planted_emitter_breaks_its_law_by_name(planted):
    law = PLANTED_EMITTERS[planted]
    with pytest.raises(LawBroken) as caught:
        check_emitter(planted(batch_size=5), POPULATION, max_examples=10)
    assert caught.value.law == law, str(caught.value)
    assert f"law {law!r} broken" in str(caught.value) and "case: filled cells" in str(caught.value)


def test_laws_are_named_and_checked():
    assert set(EMITTER_LAWS) == {"batch", "finite", "same_key", "state", "lineage"}
    with pytest.raises(ValueError, match=r"unknown laws \['shape'\]"):
        check_emitter(Fine(batch_size=5), POPULATION, laws=["shape"])
    with pytest.raises(TypeError, match="AbstractEmitter"):  # ours, or beartype's under pytest
        check_emitter(object(), POPULATION)
    # One law alone runs alone: the planted state bug passes the batch law.

    check_emitter(GrowingState(batch_size=5), POPULATION, laws=["batch"], max_examples=3)


GENOTYPE = jnp.zeros(DIM, jnp.float32)
GRID = q.GridTessellation((4, 4), 0.0, 1.0)


def _repertoire(name: str) -> q.AbstractRepertoire:
    if name == "grid":
        return q.MAPElitesRepertoire.empty(GRID, GENOTYPE)
    if name == "grid_with_ids":
        return q.MAPElitesRepertoire.empty(GRID, GENOTYPE, jnp.zeros((), jnp.int32))
    if name == "cvt":
        centroids = jr.uniform(jr.key(0), (12, 2))
        return q.MAPElitesRepertoire.empty(q.CVTTessellation(centroids), GENOTYPE)
    if name == "categorical":
        cells = q.CategoricalTessellation([(0.0, 0.5, 1.0), (-1.0, 3.0)])
        return q.MAPElitesRepertoire.empty(cells, GENOTYPE)
    if name == "annealing":  # CMA-MAE's archive
        return q.MAPElitesRepertoire.empty(GRID, GENOTYPE, learning_rate=0.5, threshold_min=-50.0)
    if name == "dns":
        return q.DNSRepertoire.empty(8, GENOTYPE, 2, k=2)
    return q.UnstructuredRepertoire.empty(8, GENOTYPE, 2, k=2, novelty_threshold=0.1)


@pytest.mark.parametrize(
    "name", ["grid", "grid_with_ids", "cvt", "categorical", "annealing", "dns", "unstructured"]
)
def test_builtin_repertoires_keep_every_law_that_applies(name):
    check_repertoire(_repertoire(name), max_examples=10)


def test_the_docs_repertoire_keeps_every_law():
    check_repertoire(SimpleGrid.create(DIM), elitist=True, max_examples=10)


# The fast tier keeps one planted repertoire (the cheapest); the whole suite all of them.
@pytest.mark.parametrize(
    "planted",
    [
        pytest.param(c, marks=[pytest.mark.slow] * (c.__name__ != "StoresNaN"))
        for c in PLANTED_REPERTOIRES
    ],
    ids=lambda c: c.__name__,
)
def test_each_planted_repertoire_breaks_its_law_by_name(planted):
    law = PLANTED_REPERTOIRES[planted]
    with pytest.raises(LawBroken) as caught:
        elitist = getattr(planted, "elitist", True)
        check_repertoire(planted.create(DIM), elitist=elitist, max_examples=30)
    assert caught.value.law == law, str(caught.value)
    assert "case: first batch" in str(caught.value)


def test_repertoire_laws_are_named_and_checked():
    assert list(REPERTOIRE_LAWS) == [
        "finite", "from_candidates", "elitist", "never_dominated_away", "fronts", "reference",
        "order", "select", "checkpoint",
    ]  # fmt: skip
    with pytest.raises(ValueError, match=r"\['elitist'\] do not apply .*elitist=False"):
        check_repertoire(_repertoire("dns"), laws=["elitist"])
    with pytest.raises(ValueError, match=r"unknown laws \['sorted'\]"):
        check_repertoire(_repertoire("grid"), laws=["sorted"])


# ------------------------------------------------------------------------- agents and envs

MAZE = q.envs.PointMaze(walls=False, length=8)
TEAM = q.envs.TimeLimit(q.envs.LineTargets(n=2, size=6), 8)
OFF = dict(observation_size=2, action_size=2, minibatch_size=8, num_envs=2, buffer_size=32)
AGENTS = {
    "td3": (q.rl.TD3(**OFF, policy_hidden=(8,), critic_hidden=(8,)), MAZE),
    "sac": (q.rl.SAC(**OFF, policy_hidden=(8,), critic_hidden=(8,)), MAZE),
    "ppo": (q.rl.PPO(observation_size=2, action_size=2, rollout_length=4, num_envs=2,
                     num_minibatches=2, actor_hidden=(8,), critic_hidden=(8,)), MAZE),
    "ippo": (q.rl.IPPO.for_env(TEAM, rollout_length=4, num_envs=2, num_minibatches=2,
                               actor_hidden=(8,), critic_hidden=(8,)), TEAM),
    "ddpg": (DDPG(**OFF, hidden=8), MAZE),
}  # fmt: skip


# The fast tier keeps the user's off-policy agent (the on-policy ones run their contract there,
# `tests/rl/test_contract.py`); the whole suite all five.
@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=[pytest.mark.slow] * (n != "ddpg")) for n in AGENTS],
)
def test_builtin_agents_and_the_users_ddpg_keep_every_law(name):
    agent, env = AGENTS[name]
    check_agent(agent, env, max_examples=2)


@pytest.mark.slow
def test_the_normalising_base_of_a_planted_agent_keeps_every_law():
    check_agent(Normalising(DDPG(**OFF, hidden=8)), MAZE, max_examples=2)


@pytest.mark.parametrize("planted", list(PLANTED_AGENTS), ids=lambda c: c.__name__)
def test_each_planted_agent_breaks_its_law_by_name(planted):
    law = PLANTED_AGENTS[planted]
    agent = planted(DDPG(**OFF, hidden=8))
    with pytest.raises(LawBroken) as caught:
        check_agent(agent, MAZE, max_examples=2)
    assert caught.value.law == law, str(caught.value)


ENVS = {
    "point_maze": q.envs.PointMaze(length=12),
    "point_maze_noisy": q.envs.PointMaze(length=12, reset_noise=0.05, obs_noise=0.01),
    "line_targets": TEAM,
    "walk": Walk(),
    "single_agent_view": q.envs.SingleAgentView(q.envs.PointMaze(length=12)),
    "kheperax": q.envs.KheperaxMaze(length=12),
    "kheperax_noisy_quad": q.envs.KheperaxMaze(
        "snake",
        "final_distance",
        quad=True,
        length=12,
        laser_noise=0.01,
        wheel_noise=0.005,
        reset_noise=0.01,
    ),
}


@pytest.mark.parametrize("name", ENVS)
def test_builtin_environments_keep_every_law(name):
    check_env(ENVS[name], max_examples=5)


@pytest.mark.brax
def test_brax_tasks_keep_every_law():
    check_env(q.envs.BraxQDEnv("ant_omni", episode_length=12), max_examples=2)
    check_env(q.envs.BraxMultiAgentEnv("walker2d_2x3", episode_length=12), max_examples=2)


@pytest.mark.parametrize("planted", list(PLANTED_ENVS), ids=lambda c: c.__name__)
def test_each_planted_environment_breaks_its_law_by_name(planted):
    law = PLANTED_ENVS[planted]
    with pytest.raises(LawBroken) as caught:
        check_env(planted(), max_examples=10)
    assert caught.value.law == law, str(caught.value)
    assert "case: seed" in str(caught.value)


def test_a_termination_that_does_not_stick_is_the_episodes_end_everywhere():
    """`terminated` is the step's flag; it need not stick (brax's `done` and the point maze's
    do not): every consumer ends the episode at the first one. A walk that bounces off its
    end (the flag drops on the next step) keeps every law; played into the end at full speed,
    `rollout` marks the steps after the first termination invalid and `evaluate_episodes`
    stops there."""
    env = Bounces(length=12)
    check_env(env, max_examples=3)
    right = _Constant(jnp.ones((1,)))

    def steps(state, k):
        state = env.step(state, right(state.obs), key=k)
        return state, state.terminated

    start = env.reset(key=jr.key(0))
    flags = np.asarray(jax.lax.scan(steps, start, jr.split(jr.key(1), 12))[1])
    first = int(np.argmax(flags > 0))
    assert flags[first] == 1.0 and (flags[first + 1 :] == 0).any()  # it does not stick
    episode = eqx.filter_jit(lambda k: q.envs.rollout(env, right, key=k))(jr.key(0))
    np.testing.assert_array_equal(np.asarray(episode.valid), np.arange(12) <= first)
    stats = q.envs.evaluate_episodes(env, lambda obs, k: right(obs), 2, key=jr.key(0))
    np.testing.assert_array_equal(stats.lengths, [first + 1] * 2)
    assert bool(np.all(stats.terminated))


class _Constant(q.rl.AbstractPolicy):
    value: jax.Array

    def __call__(self, obs):
        return self.value


# The novelty and density rankers' laws run in the whole suite (`test_beyond_cells.py` and
# `test_guided.py` check them against their references in the fast tier).
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=[pytest.mark.slow] * (n in ("novelty", "nslc", "density")))
        for n in RANKERS
    ],
)
def test_builtin_rankers_keep_every_law(name):
    """Every built-in ranker puts failed candidates last (issue 76, item 1: `imp`, `obj`,
    `rd`, `novelty` and `nslc` had put them first; the law then found `obj` and `rd` ranking a
    candidate whose fitness or descriptor alone failed ahead of others)."""
    repertoire = None
    if name in ("novelty", "nslc"):
        repertoire = q.UnstructuredRepertoire.empty(
            8, jnp.zeros(1), 2, k=2, novelty_threshold=0.1, local_competition=True
        )
    if name == "density":
        cells = q.GridTessellation((4, 4), 0.0, 1.0)
        repertoire = q.DensityRepertoire.empty(
            cells, jnp.zeros(1), bandwidth=0.2, buffer_size=16, key=jax.random.key(0)
        )
    check_ranker(q.ranker(name), repertoire=repertoire, max_examples=30)


@pytest.mark.parametrize("planted", list(PLANTED_RANKERS), ids=lambda c: c.__name__)
def test_each_planted_ranker_breaks_its_law_by_name(planted):
    law = PLANTED_RANKERS[planted]
    with pytest.raises(LawBroken) as caught:
        check_ranker(planted(), max_examples=30)
    assert caught.value.law == law, str(caught.value)
    assert "case: batch" in str(caught.value)


def test_every_law_has_a_planted_class_that_it_catches():
    """A law without a planted bug could return before checking anything and the suite would
    not know (issue 76, item 10). The exception: `pbt` checks PBT's copy of whole runs, which
    an agent has no hook to change (PBT draws hyperparameters inside the agent's own spaces)."""
    planted = (PLANTED_EMITTERS, PLANTED_REPERTOIRES, PLANTED_RANKERS, PLANTED_AGENTS, PLANTED_ENVS)
    laws = (EMITTER_LAWS, REPERTOIRE_LAWS, RANKER_LAWS, AGENT_LAWS, ENV_LAWS)
    missing = [law for names, p in zip(laws, planted) for law in names if law not in p.values()]
    assert missing == ["pbt"]


def test_agent_and_env_laws_are_named():
    assert list(AGENT_LAWS) == ["storage", "genome", "deterministic", "retrace", "population",
                                "pbt"]  # fmt: skip
    assert list(ENV_LAWS) == ["shapes", "deterministic", "autoreset", "bounds"]
    with pytest.raises(ValueError, match=r"check_env: unknown laws \['sticky'\]"):
        check_env(Walk(), laws=["sticky"])


def test_the_kit_without_hypothesis_says_what_to_install(monkeypatch):
    """`eqx_qd.testing` needs hypothesis; without it, the error says so and how to install
    it (it had been a bare `No module named 'hypothesis'`: issue 76, item 8)."""
    import importlib
    import sys

    for name in [m for m in sys.modules if m == "eqx_qd.testing" or m.startswith("eqx_qd._laws")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "hypothesis", None)
    with pytest.raises(
        ImportError, match=r"eqx_qd.testing needs hypothesis, .*: pip install 'eqx_qd\[testing\]'"
    ):
        importlib.import_module("eqx_qd.testing")
