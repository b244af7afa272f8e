"""MOME-PGX and the multi-objective policy tasks: vector rewards through rollouts, scoring and
the replay rows of one objective; the brax bi- and tri-objective tasks against brax's own
metrics; a learning run on a user's own multi-objective environment; bad input named."""

import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqx_qd as q
from eqx_qd.envs import AbstractMultiObjectiveQDEnv, EnvState


@typing.final
class Sprint(AbstractMultiObjectiveQDEnv):
    """A point in the plane: each step moves it by a tenth of the action; objectives: the
    step along x (forward) and minus the squared action (energy); descriptor: the final
    position. A user's own multi-objective environment, in pure JAX."""

    length: int = eqx.field(default=10, static=True)

    @property
    def observation_size(self) -> int:
        return 2

    @property
    def action_size(self) -> int:
        return 2

    @property
    def state_descriptor_size(self) -> int:
        return 2

    @property
    def episode_length(self) -> int:
        return self.length

    @property
    def descriptor_names(self) -> tuple[str, ...]:
        return ("final x", "final y")

    @property
    def arena(self):
        return None

    @property
    def descriptor_size(self) -> int:
        return 2

    @property
    def descriptor_bounds(self):
        return (-1.0, -1.0), (1.0, 1.0)

    @property
    def reward_offset(self) -> float:
        return 3.0

    @property
    def objective_names(self) -> tuple[str, ...]:
        return ("forward", "energy")

    @property
    def reference_point(self) -> tuple[float, ...]:
        return (-0.1 * self.length - 1.0, -2.0 * self.length - 1.0)

    def descriptor(self, state_descs, valid):
        return jnp.clip(q.envs.final_descriptor(state_descs, valid), -1.0, 1.0)

    def reset(self, *, key) -> EnvState:
        zero = jnp.zeros((2,), jnp.float32)
        return EnvState(zero, zero, zero, jnp.zeros(()), zero)

    def step(self, state, action, *, key) -> EnvState:
        action = jnp.clip(action, -1.0, 1.0)
        pos = state.physics + 0.1 * action
        reward = jnp.stack([0.1 * action[0], -jnp.sum(action**2)])
        return EnvState(pos, pos, reward, jnp.zeros(()), pos)


ENV = Sprint()
TD3 = q.rl.TD3(observation_size=2, action_size=2, policy_hidden=(8,), critic_hidden=(32, 32),
               minibatch_size=32)  # fmt: skip
CELLS = q.GridTessellation((4, 4), minval=-1.0, maxval=1.0)


def _policies(n: int, seed: int = 0):
    return eqx.filter_vmap(lambda k: TD3.init_policy(key=k))(jr.split(jr.key(seed), n))


def test_a_users_environment_keeps_the_laws_and_scores_vectors():
    from eqx_qd.testing import check_env

    check_env(ENV, max_examples=3)
    fitnesses, descriptors, extra = q.PolicyScorer(ENV)(_policies(4), key=jr.key(1))
    assert fitnesses.shape == (4, 2) and descriptors.shape == (4, 2)
    reward = extra.episodes.transitions.reward
    assert reward.shape == (4, ENV.length, 2)
    np.testing.assert_allclose(fitnesses, reward.sum(axis=1), rtol=1e-6)
    # Each objective's column is what a policy-gradient emitter of that objective stores.
    for objective in range(2):
        rows, valid = q.episode_transitions(extra, objective=objective)
        np.testing.assert_array_equal(rows.reward, reward[..., objective].reshape(-1))
        assert valid.shape == (4 * ENV.length,)


def test_one_objective_is_named_where_a_learner_needs_one():
    _, _, extra = q.PolicyScorer(ENV)(_policies(2), key=jr.key(1))
    with pytest.raises(ValueError, match=r"2 objectives' rewards; say which .*objective=1"):
        q.episode_transitions(extra)
    with pytest.raises(ValueError, match=r"objective must be .*<= 1|at most 1|objective"):
        q.episode_transitions(extra, objective=2)
    plain = q.envs.PointMaze(walls=False, length=5)
    _, _, one = q.PolicyScorer(plain)(_policies(2), key=jr.key(1))
    with pytest.raises(ValueError, match="one reward per step"):
        q.episode_transitions(one, objective=0)
    with pytest.raises(ValueError, match="num_objectives"):
        q.mome_pgx_emitter(num_objectives=1, ga_batch_size=2, pg_batch_size=2, td3=TD3,
                           hparams=q.rl.TD3HParams(), critic_steps=1, pg_steps=1, pg_lr=1e-3,
                           buffer_size=10)  # fmt: skip


def _run(algorithm: str, iterations: int):
    scorer = q.PolicyScorer(ENV)
    if algorithm == "mome_pgx":
        emitter = q.mome_pgx_emitter(
            num_objectives=2, ga_batch_size=8, pg_batch_size=4, td3=TD3,
            hparams=q.rl.TD3HParams(), critic_steps=20, pg_steps=10, pg_lr=3e-3,
            buffer_size=4000,
        )  # fmt: skip
    else:
        emitter = q.MixingEmitter(
            batch_size=16, variation_percentage=1.0, variation=q.IsoLineVariation(0.005, 0.05)
        )
    algo = q.MOME(emitter, scorer, jnp.asarray(ENV.reference_point), front_length=4)
    crowding = algorithm == "mome_pgx"
    archive = q.ParetoRepertoire.empty(
        CELLS, jax.tree.map(lambda x: x[0], _policies(1)), 2, 4, crowding=crowding
    )
    state, first = eqx.filter_jit(algo.init)(_policies(16), archive, key=jr.key(2))
    state, history = eqx.filter_jit(q.run_mome)(algo, state, iterations, key=jr.key(3))
    return state, first, history


@pytest.mark.slow  # the fast tier's budget; fast siblings: the scoring and rows tests above
def test_mome_pgx_learns_and_beats_mome_on_the_forward_objective():
    state, first, history = _run("mome_pgx", 15)
    _, _, mome_history = _run("mome", 15)
    score = np.asarray(history.moqd_score)
    assert score[-1] > 1.4 * float(first.moqd_score), (float(first.moqd_score), score[-1])
    # The forward objective's critic pushes policies along x faster than the GA alone does.
    forward = np.nanmax(np.where(np.isfinite(state.repertoire.objectives[:, 0]),
                                 state.repertoire.objectives[:, 0], np.nan))  # fmt: skip
    assert forward > 0.5 * 0.1 * ENV.length  # half the largest forward return there is
    assert score[-1] > np.asarray(mome_history.moqd_score)[-1]
    emitter_state = state.emitter_state
    buffers = [s.buffer for s in emitter_state[1:]]  # after the GA's
    assert all(int(b.size) > 0 for b in buffers)


@pytest.mark.brax
def test_brax_objectives_are_braxs_own_metrics():
    from eqx_qd.envs import BraxMultiObjectiveEnv, MO_BRAX_TASKS
    from eqx_qd.testing import check_env

    env = BraxMultiObjectiveEnv("hopper_multi3", episode_length=20)
    assert env.objective_names == ("forward", "jump", "energy") and env.num_objectives == 3
    assert env.reference_point == pytest.approx((-50 * 0.02, -1 * 0.02, -3 * 0.02))
    weights = jr.normal(jr.key(0), (env.observation_size, env.action_size))
    policy = lambda obs: jnp.tanh(obs @ weights)
    episode, states = eqx.filter_jit(q.envs.rollout_states)(env, policy, key=jr.key(1))
    metrics = states.physics.metrics
    reward = np.asarray(episode.transitions.reward)
    valid = np.asarray(episode.valid) > 0
    assert reward.shape == (20, 3) and valid.any()
    after = lambda x: np.asarray(x)[1:][valid]  # the state each valid step reached
    np.testing.assert_array_equal(reward[valid, 0], after(metrics["reward_forward"]))
    np.testing.assert_array_equal(reward[valid, 2], after(metrics["reward_ctrl"]))
    height = after(states.physics.pipeline_state.x.pos[:, 0, 2])
    start = float(states.physics.pipeline_state.x.pos[0, 0, 2])
    np.testing.assert_allclose(reward[valid, 1], np.maximum(height - start, 0.0), atol=1e-6)
    # brax's own reward is forward + energy + the healthy bonus.
    total = reward[valid][:, [0, 2]].sum(-1) + after(metrics["reward_healthy"])
    np.testing.assert_allclose(total, after(states.physics.reward), rtol=1e-5, atol=1e-5)
    assert np.all(reward[valid, 2] <= 0.0) and np.all(reward[valid, 1] >= 0.0)
    # The descriptor is the single-objective task's: the same episode's feet contacts.
    assert env.base.name == "hopper_uni" and env.descriptor_bounds == ((0.0,), (1.0,))
    assert set(MO_BRAX_TASKS) >= {"walker2d_multi", "ant_multi", "hopper_multi3"}
    check_env(env, laws=["shapes"], max_examples=1)
    with pytest.raises(ValueError, match="unknown multi-objective brax task 'walker'"):
        BraxMultiObjectiveEnv("walker")
