"""MAP-Elites-ES seconds per generation and compile time, and its final QD-score, coverage and
max fitness, beside QDax's (`benchmarks/peers/qdax_mees.py`, the same sizes; issue 75's
targets: 1.25x QDax's speed, 5-seed medians not worse).

Workload: walker2d_uni (brax spring), 100-step episodes from one fixed initial state (QDax's
notebook: deterministic), policies (64, 64) with lecun initialisation, one initial policy,
`--samples` mirrored ES samples a generation with QDax's notebook's settings (sigma 0.02, Adam
0.01, L2 0.02, 10 steps a parent, explore / exploit), the offspring scored once, CVT 256, and
`--iters` generations in one `lax.scan` compiled ahead of time so that compile and run times
are apart. The QD-score takes QDax's offset (its reward offset times the episode length) on
both sides.

`--qdax-novelty-rows` makes novelty count one row past the archive's last written one, as
QDax's mask does (an unwritten zero row until the archive is full): an experiment on where our
fix and QDax part, not a library option.

Usage: python benchmarks/mees.py [--env walker2d_uni] [--iters 30] [--samples 200]
       [--seed 42] [--repeats 1] [--qdax-novelty-rows]
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


QDAX_REWARD_OFFSET = {"walker2d_uni": 1.413, "ant_uni": 3.24, "hopper_uni": 0.9}
"""QDax's `reward_offset` of the tasks (its QD-score offset per step)."""


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="walker2d_uni")
    p.add_argument("--episode-length", type=int, default=100)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--samples", type=int, default=200)
    p.add_argument("--centroids", type=int, default=256)
    p.add_argument("--cvt-samples", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--qdax-novelty-rows", action="store_true")
    a = p.parse_args()
    if a.qdax_novelty_rows:
        from eqx_qd._emitters import me_es

        ours = me_es.novelty
        me_es.novelty = lambda d, archive, count, k: ours(d, archive, count + 1, k)

    t_start = time.perf_counter()
    env = jobs.make_env(a.env, episode_length=a.episode_length)  # no reset noise: one start
    scorer = q.PolicyScorer(env)
    td3 = q.rl.TD3(
        observation_size=env.observation_size,
        action_size=env.action_size,
        policy_hidden=(64, 64),
        critic_hidden=(8,),
        policy_init="lecun_uniform",
    )
    emitter = q.MEESEmitter(
        scorer,
        num_descriptors=env.descriptor_size,
        archive_size=a.iters,
        sample_number=a.samples,
    )
    offset = QDAX_REWARD_OFFSET[a.env] * a.episode_length
    algo = q.MAPElites(emitter, scorer, offset)
    key = jr.key(a.seed)
    low, high = env.descriptor_bounds
    cells = q.CVTTessellation.from_kmeans(
        a.centroids, env.descriptor_size, low, high, key=key, num_samples=a.cvt_samples
    )
    genotypes = eqx.filter_vmap(lambda k: td3.init_policy(key=k))(jr.split(key, 1))
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
    res = {
        "bench": "mees", "side": "eqx_qd", "env": a.env, "iters": a.iters,
        "samples": a.samples, "seed": a.seed, "centroids": a.centroids, "jax": jax.__version__,
        "qdax_novelty_rows": a.qdax_novelty_rows,
        "init_s": t_init, "lower_s": t_lower, "compile_s": t_compile, "run_times_s": times,
        "s_per_iter": min(times) / a.iters,
        "qd_score": float(jnp.sum(jnp.where(filled, fit + offset, 0.0))),
        "coverage": float(jnp.mean(filled)), "max_fitness": float(jnp.max(fit)),
        "qd_offset": offset, "wall_total_s": time.perf_counter() - t_start,
    }  # fmt: skip
    print(f"eqx_qd MEES {a.env} (brax {env.backend}) {a.samples} samples, {a.iters} generations")
    print(f"compile {t_compile:.2f} s, run {times} s, {min(times) / a.iters:.3f} s/iter")
    print("JSON " + json.dumps(res))


if __name__ == "__main__":
    main()
