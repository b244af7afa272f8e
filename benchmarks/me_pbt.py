"""ME-PBT seconds per iteration and TD3 grad steps/s on the point maze (issue 4 target: >= 1.25x
QDax's ``shared/bench/qdax/bench_mepbt.py --hidden 64 64 --train-steps 400``).

Workload: 10 PBT-TD3 agents + 10 GA children per iteration, 16 envs per agent, 400 env steps per
agent per iteration (25 training iterations, one TD3 step per env step: 16 per iteration), TD3
batch 256, networks (64, 64), buffer 1e5 per agent, CVT 128 cells, each candidate scored by one
100-step episode. One device. QDax's point maze is a different task (its own walls and reward),
so grad steps/s is the workload-independent figure.

Usage: python benchmarks/me_pbt.py [--loops 3] [--train-steps 400]
"""

import argparse
import json
import statistics
import time

import equinox as eqx
import jax
import jax.random as jr

import eqx_qd as q


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pg-pop", type=int, default=10)
    p.add_argument("--ga-pop", type=int, default=10)
    p.add_argument("--env-batch", type=int, default=16)
    p.add_argument("--train-steps", type=int, default=400)
    p.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    p.add_argument("--td3-batch", type=int, default=256)
    p.add_argument("--buffer", type=int, default=100_000)
    p.add_argument("--centroids", type=int, default=128)
    p.add_argument("--loops", type=int, default=3, help="ME iterations, the first one compiles")
    a = p.parse_args()

    env = q.envs.PointMaze()
    agent = q.rl.TD3(
        observation_size=2, action_size=2, policy_hidden=tuple(a.hidden),
        critic_hidden=tuple(a.hidden), minibatch_size=a.td3_batch, num_envs=a.env_batch,
        buffer_size=a.buffer, grad_updates_per_step=1.0,
    )  # fmt: skip
    iters = a.train_steps // a.env_batch
    config = q.PBTEmitterConfig(
        pg_population_size=a.pg_pop, ga_population_size=a.ga_pop, num_training_iterations=iters,
    )  # fmt: skip
    emitter = q.PBTEmitter(agent, env, config, agent.hparam_spaces, q.IsoLineVariation(0.005, 0.05))
    scorer = q.PolicyScorer(env, agent=agent)
    algo = q.MAPElites(emitter, scorer, scorer.qd_offset, lineage=True)
    cells = q.CVTTessellation.from_kmeans(a.centroids, 2, -1.0, 1.0, key=jr.key(0))

    t0 = time.perf_counter()
    genotypes = emitter.initial_genotypes(a.pg_pop + a.ga_pop, key=jr.key(1))
    state, m0 = jax.block_until_ready(eqx.filter_jit(algo.init)(genotypes, cells, key=jr.key(2)))
    t_init = time.perf_counter() - t0
    step = eqx.filter_jit(lambda s, k: algo.update(s, key=k))
    times = []
    for i, k in enumerate(jr.split(jr.key(3), a.loops)):
        t0 = time.perf_counter()
        state, m = jax.block_until_ready(step(state, k))
        times.append(time.perf_counter() - t0)
        print(
            f"iter {i}: {times[-1]:.2f} s | QD-score {float(m.qd_score):.1f}, "
            f"coverage {100 * float(m.coverage):.2f}%, max fitness {float(m.max_fitness):.2f}"
        )
    t = statistics.median(times[1:]) if len(times) > 1 else times[0]
    grad_steps = a.pg_pop * iters * a.env_batch
    env_steps = a.pg_pop * a.train_steps + (a.pg_pop + a.ga_pop) * env.episode_length
    print(f"jax {jax.__version__} | point maze | pg {a.pg_pop} + ga {a.ga_pop} | hidden {a.hidden}")
    print(f"init (incl. compile) {t_init:.2f} s | first iteration (incl. compile) {times[0]:.2f} s")
    print(f"steady s/iter (median): {t:.3f}")
    print(f"TD3 grad steps/s (sum over agents): {grad_steps / t:,.0f}")
    print(f"env steps/s (train + eval): {env_steps / t:,.0f}")
    print(
        f"bytes per repertoire cell (agent state, no optimiser): "
        f"{q.internal.bytes_per_cell(state.repertoire):,}"
    )
    res = {
        "bench": "me_pbt_td3", "pg_pop": a.pg_pop, "ga_pop": a.ga_pop, "hidden": a.hidden,
        "train_steps": a.train_steps, "jax": jax.__version__, "init_s": t_init,
        "iter_times_s": times, "s_per_iter": t, "td3_grad_steps_per_s": grad_steps / t,
    }  # fmt: skip
    print("JSON " + json.dumps(res))


if __name__ == "__main__":
    main()
