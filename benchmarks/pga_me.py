"""PGA-MAP-Elites seconds per iteration and compile time (issue 5 target: <= 0.8x QDax on both).

Workload of ``shared/bench/qdax/bench_pgame.py``: walker2d_uni (brax spring here), episode 100,
64 offspring per iteration (32 GA iso+line-DD + 31 policy-gradient + 1 greedy actor), policy
(64, 64), critic (256, 256), TD3 batch 256, 300 critic steps + 100 PG steps per iteration,
buffer 1e6, CVT 1024 cells from 50k samples, 10 iterations in one ``lax.scan``, compiled ahead
of time so that compile and run times are apart.

Usage: python benchmarks/pga_me.py [--env walker2d_uni] [--iters 10] [--repeats 1]
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
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--centroids", type=int, default=1024)
    p.add_argument("--cvt-samples", type=int, default=50_000)
    p.add_argument("--critic-steps", type=int, default=300)
    p.add_argument("--pg-steps", type=int, default=100)
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
        minibatch_size=256,
    )
    hparams = q.rl.TD3HParams(critic_lr=3e-4, policy_lr=3e-4, discount=0.99, tau=0.005)
    emitter = q.pgame_emitter(
        batch_size=a.batch,
        ga_fraction=0.5,
        td3=td3,
        hparams=hparams,
        critic_steps=a.critic_steps,
        pg_steps=a.pg_steps,
        pg_lr=1e-3,
        buffer_size=a.buffer,
    )
    algo = q.MAPElites(emitter, scorer, scorer.qd_offset, lineage=True)

    key = jr.key(a.seed)
    t0 = time.perf_counter()
    low, high = env.descriptor_bounds
    cells = q.CVTTessellation.from_kmeans(
        a.centroids, env.descriptor_size, low, high, key=key, num_samples=a.cvt_samples
    )
    t_cvt = time.perf_counter() - t0

    genotypes = eqx.filter_vmap(lambda k: td3.init_policy(key=k))(jr.split(key, a.batch))
    t0 = time.perf_counter()
    state, init_metrics = jax.block_until_ready(
        eqx.filter_jit(algo.init)(genotypes, cells, key=jr.fold_in(key, 1))
    )
    t_init = time.perf_counter() - t0

    t0 = time.perf_counter()
    lowered = q.run.lower(algo, state, a.iters, key=jr.fold_in(key, 2))
    t_lower = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = lowered.compile()
    t_compile = time.perf_counter() - t0

    run_times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        final, history = jax.block_until_ready(
            compiled(algo, state, a.iters, key=jr.fold_in(key, 2))
        )
        run_times.append(time.perf_counter() - t0)
    best = min(run_times)
    print(
        f"jax {jax.__version__} | {a.env} (brax {env.backend}) | batch {a.batch} | "
        f"{a.critic_steps} critic + {a.pg_steps} PG steps/iter | {a.iters} iters"
    )
    print(f"centroids (cvt{a.centroids}) : {t_cvt:.2f} s")
    print(f"init (jit + {a.batch} rollouts)  : {t_init:.2f} s")
    print(f"trace+lower scan           : {t_lower:.2f} s")
    print(f"XLA compile scan           : {t_compile:.2f} s")
    print(f"run {a.iters} iters            : {', '.join(f'{t:.2f}' for t in run_times)} s")
    print(f"steady-state s/iter        : {best / a.iters:.3f} s")
    print(f"env steps/s (eval)         : {a.batch * a.episode_length * a.iters / best:,.0f}")
    print(f"critic grad steps/s        : {a.critic_steps * a.iters / best:,.1f}")
    print(
        f"init  QD-score/cov/max     : {float(init_metrics.qd_score):.1f} / "
        f"{100 * float(init_metrics.coverage):.2f}% / {float(init_metrics.max_fitness):.2f}"
    )
    print(
        f"final QD-score/cov/max     : {float(history.qd_score[-1]):.1f} / "
        f"{100 * float(history.coverage[-1]):.2f}% / {float(history.max_fitness[-1]):.2f}"
    )
    print(f"wall total                 : {time.perf_counter() - t_start:.1f} s")
    res = {
        "bench": "pgame", "env": a.env, "batch": a.batch, "iters": a.iters,
        "critic_steps": a.critic_steps, "pg_steps": a.pg_steps, "jax": jax.__version__,
        "centroids_s": t_cvt, "init_s": t_init, "lower_s": t_lower, "compile_s": t_compile,
        "run_times_s": run_times, "s_per_iter": best / a.iters,
        "final_qd_score": float(history.qd_score[-1]),
        "final_max_fitness": float(history.max_fitness[-1]),
    }  # fmt: skip
    print("JSON " + json.dumps(res))


if __name__ == "__main__":
    main()
