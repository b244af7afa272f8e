"""DCRL-MAP-Elites seconds per iteration and compile time, beside QDax's
(`benchmarks/peers/qdax_dcrl_me.py`, the same sizes; issue 44's target: 1.25x QDax on both).

Workload: walker2d_uni (brax spring here), 100-step episodes, 64 candidates per iteration
(32 GA iso+line-DD + 16 policy-gradient + 16 injected actors), policies (64, 64), the
conditioned critic (256, 256), minibatch 100, 300 critic steps and 100 policy-gradient steps per
iteration, buffer 1e6, CVT 1024 from 50k samples, 10 iterations in one `lax.scan` compiled ahead
of time so that compile and run times are apart.

Usage: python benchmarks/dcrl_me.py [--env walker2d_uni] [--iters 10] [--repeats 1]
"""

import argparse
import json
import time

import equinox as eqx
import jax
import jax.random as jr

import eqx_qd as q
from eqx_qd import jobs


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="walker2d_uni")
    p.add_argument("--episode-length", type=int, default=100)
    p.add_argument("--ga", type=int, default=32)
    p.add_argument("--pg", type=int, default=16)
    p.add_argument("--ai", type=int, default=16)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--centroids", type=int, default=1024)
    p.add_argument("--cvt-samples", type=int, default=50_000)
    p.add_argument("--critic-steps", type=int, default=300)
    p.add_argument("--pg-steps", type=int, default=100)
    p.add_argument("--minibatch", type=int, default=100)
    p.add_argument("--buffer", type=int, default=1_000_000)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()

    t_start = time.perf_counter()
    env = jobs.make_env(a.env, episode_length=a.episode_length)
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
    emitter = q.dcrl_emitter(
        td3=td3,
        hparams=q.rl.TD3HParams(critic_lr=3e-4, policy_lr=3e-4, discount=0.99, tau=0.005),
        descriptor_bounds=env.descriptor_bounds,
        ga_batch_size=a.ga,
        pg_batch_size=a.pg,
        ai_batch_size=a.ai,
        critic_steps=a.critic_steps,
        pg_steps=a.pg_steps,
        pg_lr=5e-3,
        buffer_size=a.buffer,
    )
    algo = q.MAPElites(emitter, scorer, scorer.qd_offset, lineage=True)
    batch = a.ga + a.pg + a.ai

    key = jr.key(a.seed)
    t0 = time.perf_counter()
    low, high = env.descriptor_bounds
    cells = q.CVTTessellation.from_kmeans(
        a.centroids, env.descriptor_size, low, high, key=key, num_samples=a.cvt_samples
    )
    t_cvt = time.perf_counter() - t0
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
        _, history = jax.block_until_ready(compiled(algo, state, a.iters, key=jr.fold_in(key, 2)))
        times.append(time.perf_counter() - t0)
    best = min(times)
    res = {
        "bench": "dcrl_me", "side": "eqx_qd", "env": a.env, "batch": batch,
        "split": [a.ga, a.pg, a.ai], "iters": a.iters, "critic_steps": a.critic_steps,
        "pg_steps": a.pg_steps, "jax": jax.__version__, "centroids_s": t_cvt, "init_s": t_init,
        "lower_s": t_lower, "compile_s": t_compile, "run_times_s": times,
        "s_per_iter": best / a.iters, "final_qd_score": float(history.qd_score[-1]),
        "final_max_fitness": float(history.max_fitness[-1]),
        "wall_total_s": time.perf_counter() - t_start,
    }  # fmt: skip
    print(f"eqx_qd DCRL-ME {a.env} (brax {env.backend}) batch {batch} = {a.ga}/{a.pg}/{a.ai}")
    print(f"compile {t_compile:.2f} s (+ lower {t_lower:.2f} s), run {times} s, "
          f"{best / a.iters:.3f} s/iter")  # fmt: skip
    print("JSON " + json.dumps(res))


if __name__ == "__main__":
    main()
