"""ME-PBT over a mesh of 1 and 4 CPU devices (in subprocesses: the device count is fixed when
JAX starts)."""

import json
import os
import subprocess
import sys

import pytest


SCRIPT = r"""
import json, os, sys
import jax, jax.numpy as jnp, jax.random as jr, numpy as np
import eqx_qd as q

D = int(sys.argv[1])
env = q.PointMaze(length=30)
agent = q.TD3(observation_size=2, action_size=2, policy_hidden=(16,), critic_hidden=(16,),
              batch_size=16)
cfg = q.PBTEmitterConfig(
    pg_population_size=4, ga_population_size=2, num_training_iterations=2, env_batch_size=2,
    buffer_size=200, fraction_best_to_replace_from=0.25, fraction_to_replace_from_best=0.25,
    fraction_to_replace_from_samples=0.25)
emitter = q.PBTEmitter(agent, env, cfg, agent.hparam_spaces, q.IsoLineVariation(0.01, 0.1),
                       axis_name="p")
scorer = q.PolicyScorer(env, agent=agent)
algo = q.MAPElites(emitter, scorer, scorer.qd_offset, lineage=True, axis_name="p")
mesh = q.device_mesh(D)
cells = q.GridTessellation((6, 6), minval=-1.0, maxval=1.0)
state, first = q.init_sharded(algo, emitter.initial_genotypes(6 * D, key=jr.key(1)), cells,
                              key=jr.key(2), mesh=mesh)
state, hist = q.run_sharded(algo, state, 3, key=jr.key(3), mesh=mesh)
hp = state.emitter_state.population.agent_state.hparams
in_range = all(bool(jnp.all(space.contains(getattr(hp, name))))
               for name, space in agent.hparam_spaces.items())
ids = np.asarray(state.repertoire.extra)[np.isfinite(np.asarray(state.repertoire.fitnesses))]
pop = q.init_population(agent, env, None, 4, key=jr.key(5), env_batch_size=2, buffer_size=64)
pop, tm = q.train_population_sharded(agent, env, pop, 3, key=jr.key(6), mesh=mesh)
print(json.dumps({
    "devices": len(jax.devices()),
    "first_filled": int(first.num_filled),
    "filled": np.asarray(hist.num_filled).tolist(),
    "qd": np.asarray(hist.qd_score).tolist(),
    "best_returns": np.asarray(state.emitter_state.best_returns).tolist(),
    "pop_shape": list(state.emitter_state.population.env_steps.shape),
    "evaluations": int(state.evaluations),
    "in_range": in_range,
    "max_id": int(ids.max()),
    "sharded_env_steps": np.asarray(pop.env_steps).tolist(),
    "sharded_metrics_shape": list(tm.reward.shape),
}))
"""


def _run(devices: int) -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(devices)],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("devices", [1, 4])
def test_me_pbt_over_a_mesh_keeps_its_invariants(devices):
    r = _run(devices)
    assert r["devices"] == devices
    assert r["pop_shape"] == [devices, 4]  # population size kept, per device
    # The repertoire is the same on every device and never loses a cell.
    assert all(row == r["filled"][0] for row in r["filled"])
    assert all(row == r["qd"][0] for row in r["qd"])
    filled = [r["first_filled"], *r["filled"][0]]
    assert filled == sorted(filled)
    # Every device ends with the same best set (here one agent: fraction 0.25 of 4).
    assert all(row == r["best_returns"][0] for row in r["best_returns"])
    assert r["in_range"]
    # Each device scores 6 candidates per iteration and 6 at init; ids count them all.
    assert r["evaluations"] == devices * 6 * 4
    assert r["max_id"] < r["evaluations"]
    # A population of 4 agents split over the devices: each stepped 2 envs x 3 iterations.
    assert r["sharded_env_steps"] == [6, 6, 6, 6]
    assert r["sharded_metrics_shape"] == [4, 3]


def test_me_pbt_command_on_two_devices(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text(
        "pg_population_size = 4\nga_population_size = 2\nnum_training_iterations = 2\n"
        "env_batch_size = 2\nbuffer_size = 200\nhidden = [8]\nbatch_size = 8\n"
        "fraction_best_to_replace_from = 0.25\nfraction_to_replace_from_best = 0.25\n"
        "fraction_to_replace_from_samples = 0.25\ncells = 16\ncvt_samples = 1000\n"
        "episode_length = 20\niterations = 2\n"
    )
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    cmd = [sys.executable, "-m", "eqx_qd.cli", "run", "me-pbt", "--config", str(config),
           "--devices", "2", "--out", str(out), "--no-progress", "--no-plots"]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "done: 36 evaluations" in done.stdout  # 2 devices x 6 x (init + 2 iterations)
    with open(out / "hparams.csv") as f:
        assert len(f.read().strip().splitlines()) == 1 + 3 * 8  # 2 devices x 4 agents
