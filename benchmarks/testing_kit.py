"""How long `eqx_qd.testing`'s laws take per class, at their default example counts, compile
included (what a user waits for the first time they check a class): every built-in emitter,
repertoire, agent and a few environments. One process, classes one after another.

Usage: python benchmarks/testing_kit.py [--json OUT]
"""

import argparse
import json
import os
import sys
import time

import equinox as eqx
import jax.numpy as jnp
import numpy as np

import eqx_qd as q
from eqx_qd import jobs
from eqx_qd.testing import check_agent, check_emitter, check_env, check_repertoire


sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from user_agent import DDPG  # noqa: E402  (the docs' user agent, outside the package)


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    a = p.parse_args()
    dim = 4
    population = jnp.asarray(np.random.default_rng(0).normal(size=(6, dim)), jnp.float32)
    task = jobs.make_task("projected_sphere", genotype_dim=dim)
    rows = {}
    for name in ("iso_line", "gaussian", "cma_me", "cma_mae", "cma_mega", "cma_maega"):
        if name.startswith("cma"):
            emitter = jobs.make_emitter(name, batch_size=6, task=task, num_emitters=2)
        else:
            emitter = jobs.make_emitter(name, batch_size=6)
        scoring = task if name in ("cma_mega", "cma_maega") else None
        rows[f"emitter {name}"] = timed(lambda: check_emitter(emitter, population,
                                                              scoring_fn=scoring))  # fmt: skip
    grid = q.GridTessellation((4, 4), 0.0, 1.0)
    genotype = jnp.zeros(dim)
    repertoires = {
        "grid": q.MAPElitesRepertoire.empty(grid, genotype),
        "annealing": q.MAPElitesRepertoire.empty(grid, genotype, learning_rate=0.5,
                                                 threshold_min=-50.0),
        "dns": q.DNSRepertoire.empty(8, genotype, 2, k=2),
        "unstructured": q.UnstructuredRepertoire.empty(8, genotype, 2, k=2,
                                                       novelty_threshold=0.1),
    }  # fmt: skip
    for name, rep in repertoires.items():
        rows[f"repertoire {name}"] = timed(lambda: check_repertoire(rep))
    maze = q.envs.PointMaze(walls=False, length=8)
    team = q.envs.TimeLimit(q.envs.LineTargets(n=2, size=6), 8)
    off = dict(observation_size=2, action_size=2, minibatch_size=8, num_envs=2, buffer_size=32)
    agents = {
        "td3": (q.rl.TD3(**off, policy_hidden=(8,), critic_hidden=(8,)), maze),
        "sac": (q.rl.SAC(**off, policy_hidden=(8,), critic_hidden=(8,)), maze),
        "ppo": (q.rl.PPO(observation_size=2, action_size=2, rollout_length=4, num_envs=2,
                         num_minibatches=2, actor_hidden=(8,), critic_hidden=(8,)), maze),
        "ippo": (q.rl.IPPO.for_env(team, rollout_length=4, num_envs=2, num_minibatches=2,
                                   actor_hidden=(8,), critic_hidden=(8,)), team),
        "ddpg (user)": (DDPG(**off, hidden=8), maze),
    }  # fmt: skip
    for name, (agent, env) in agents.items():
        rows[f"agent {name}"] = timed(lambda: check_agent(agent, env))
    envs = {
        "point_maze": q.envs.PointMaze(length=12),
        "line_targets": team,
        "brax ant_omni": q.envs.BraxQDEnv("ant_omni", episode_length=12),
    }
    for name, env in envs.items():
        rows[f"env {name}"] = timed(lambda: check_env(env))
    for name, seconds in rows.items():
        print(f"{name:28s} {seconds:6.1f} s", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    eqx.clear_caches()


if __name__ == "__main__":
    main()
