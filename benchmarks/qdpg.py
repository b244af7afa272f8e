"""QDPG seconds per iteration and compile time, and its final QD-score, coverage and max
fitness, beside QDax's (`benchmarks/peers/qdax_qdpg.py`, the same sizes; issue 75's targets:
1.25x QDax's speed, 5-seed medians not worse).

Workload: QDax's `examples/qdpg.ipynb` scaled down alike on both sides: walker2d_uni (brax
spring) with random initial states, 100-step episodes, policies (64, 64) with lecun
initialisation, batches of `--quality` + `--diversity` + `--ga` (12 + 11 + 11 by default: the
notebook's 34 / 33 / 33 over three), TD3 critics (256, 256) with QDax's settings (300 critic
steps, targets after every critic step, greedy actors every 2), `--pg-steps` policy-gradient
steps on minibatches of `--minibatch`, the archive's threshold 0.1 and 10,000 rows, the reward's
5 neighbours, CVT 1024, and `--iters` iterations in one `lax.scan` compiled ahead of time so
that compile and run times are apart. The QD-score takes QDax's offset (its reward offset times
the episode length) on both sides.

Usage: python benchmarks/qdpg.py [--env walker2d_uni] [--iters 20] [--seed 42] [--repeats 1]
"""

import argparse
import json
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

import eqx_qd as q
from eqx_qd import jobs


QDAX_REWARD_OFFSET = {"walker2d_uni": 1.413, "ant_uni": 3.24, "hopper_uni": 0.9, "ant_omni": 3.0}
"""QDax's `reward_offset` of the tasks (its QD-score offset per step)."""


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="walker2d_uni")
    p.add_argument("--episode-length", type=int, default=100)
    p.add_argument("--quality", type=int, default=12)
    p.add_argument("--diversity", type=int, default=11)
    p.add_argument("--ga", type=int, default=11)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--centroids", type=int, default=1024)
    p.add_argument("--cvt-samples", type=int, default=50_000)
    p.add_argument("--critic-steps", type=int, default=300)
    p.add_argument("--pg-steps", type=int, default=50)
    p.add_argument("--minibatch", type=int, default=100)
    p.add_argument("--buffer", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--repeats", type=int, default=1)
    a = p.parse_args()

    t_start = time.perf_counter()
    env = jobs.make_env(a.env, episode_length=a.episode_length, reset_noise=True)
    scorer = q.PolicyScorer(env)
    td3 = q.rl.TD3(
        observation_size=env.observation_size,
        action_size=env.action_size,
        policy_hidden=(64, 64),
        critic_hidden=(256, 256),
        minibatch_size=a.minibatch,
        policy_init="lecun_uniform",
        critic_init="lecun_uniform",
        critic_target_every_step=True,
    )
    reward = q.DiversityReward(k=5, scaling=1.0, acceptance_threshold=0.1, archive_size=10_000)
    emitter = q.qdpg_emitter(
        quality_batch_size=a.quality,
        diversity_batch_size=a.diversity,
        ga_batch_size=a.ga,
        diversity=reward,
        td3=td3,
        hparams=q.rl.TD3HParams(critic_lr=3e-4, policy_lr=3e-4, discount=0.99, tau=0.005),
        critic_steps=a.critic_steps,
        pg_steps=a.pg_steps,
        pg_lr=1e-3,
        buffer_size=a.buffer,
    )
    offset = QDAX_REWARD_OFFSET[a.env] * a.episode_length
    algo = q.MAPElites(emitter, scorer, offset)
    batch = a.quality + a.diversity + a.ga
    key = jr.key(a.seed)
    low, high = env.descriptor_bounds
    cells = q.CVTTessellation.from_kmeans(
        a.centroids, env.descriptor_size, low, high, key=key, num_samples=a.cvt_samples
    )
    genotypes = eqx.filter_vmap(lambda k: td3.init_policy(key=k))(jr.split(key, batch))
    t0 = time.perf_counter()
    state, _ = jax.block_until_ready(
        eqx.filter_jit(algo.init)(genotypes, cells, key=jr.fold_in(key, 1))
    )
    t_init = time.perf_counter() - t0
    t0 = time.perf_counter()
    lowered = q.run.lower(algo, state, a.iters, key=jr.fold_in(key, 2))
    t_lower = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = lowered.compile()
    t_compile = time.perf_counter() - t0
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        end, history = jax.block_until_ready(compiled(algo, state, a.iters, key=jr.fold_in(key, 2)))
        times.append(time.perf_counter() - t0)
    fit = end.repertoire.fitnesses
    filled = jnp.isfinite(fit)
    diversity = end.emitter_state[1]
    sample = diversity.buffer.sample(1000, key=jr.key(0))
    rewards = reward(diversity.archive, sample.state_desc)
    actor = jax.tree.leaves(eqx.filter(diversity.td3.policy, eqx.is_array))
    actor_finite = all(bool(jnp.all(jnp.isfinite(x))) for x in actor)
    res = {
        "bench": "qdpg", "side": "eqx_qd", "env": a.env, "iters": a.iters,
        "split": [a.quality, a.diversity, a.ga], "critic_steps": a.critic_steps,
        "pg_steps": a.pg_steps, "seed": a.seed, "centroids": a.centroids,
        "jax": jax.__version__, "init_s": t_init, "lower_s": t_lower, "compile_s": t_compile,
        "run_times_s": times, "s_per_iter": min(times) / a.iters,
        "qd_score": float(jnp.sum(jnp.where(filled, fit + offset, 0.0))),
        "coverage": float(jnp.mean(filled)), "max_fitness": float(jnp.max(fit)),
        "qd_offset": offset, "archive_rows": int(diversity.archive.rows.size),
        "diversity_reward_median": float(jnp.median(rewards)),
        "diversity_actor_finite": actor_finite,
        "wall_total_s": time.perf_counter() - t_start,
    }  # fmt: skip
    print(f"eqx_qd QDPG {a.env} (brax {env.backend}) {a.quality}/{a.diversity}/{a.ga}, "
          f"{a.iters} iters")  # fmt: skip
    print(f"compile {t_compile:.2f} s, run {times} s, {min(times) / a.iters:.3f} s/iter")
    print("JSON " + json.dumps(res))


if __name__ == "__main__":
    main()
