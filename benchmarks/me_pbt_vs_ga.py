"""Evidence for ME-PBT over any agent: ME-PBT with PPO (or TD3 / SAC) against GA-only MAP-Elites
on the deceptive point maze (walls), at equal evaluations.

Both arms score ``--batch`` candidates per iteration (ME-PBT: half PBT agents, half GA
children) for ``--iterations`` iterations, each candidate by one 100-step episode, into the
same 128-cell CVT of the maze's final positions. The GA arm evolves `DeterministicPolicy`
genotypes (64, 64) with iso+line-DD (0.005, 0.05), as the ME-PBT arm's GA half does; the ME-PBT
arm also trains its agents between evaluations (``--train-iterations`` iterations per
generation: rollouts for PPO), which evaluations do not count. Prints the final QD-score and
coverage per seed and arm, and their medians.

Usage: python benchmarks/me_pbt_vs_ga.py [--agent ppo] [--seeds 0 1 2] [--iterations 40]
"""

import argparse
import statistics
import time

import equinox as eqx
import jax.random as jr

import eqx_qd as q
from eqx_qd import jobs


def me_pbt(agent: str, seed: int, iterations: int, batch: int, train_iterations: int):
    config = jobs.MEPBTConfig(
        agent=agent, iterations=iterations, pg_population_size=batch // 2,
        ga_population_size=batch - batch // 2, num_training_iterations=train_iterations,
        seed=seed,
    )  # fmt: skip
    result = jobs.run(config, None, progress=False, plots=False)
    return result.last["qd_score"], result.last["coverage"]


def ga_only(seed: int, iterations: int, batch: int):
    env = q.envs.PointMaze()
    emitter = q.MixingEmitter(
        batch_size=batch, variation_percentage=1.0,
        variation=q.IsoLineVariation(iso_sigma=0.005, line_sigma=0.05),
    )  # fmt: skip
    scorer = q.PolicyScorer(env)
    algo = q.MAPElites(emitter, scorer, scorer.qd_offset)
    cvt_key, pop_key, init_key, run_key = jr.split(jr.key(seed), 4)  # as the ME-PBT job draws
    low, high = env.descriptor_bounds
    cells = q.CVTTessellation.from_kmeans(128, 2, low, high, num_samples=50_000, key=cvt_key)
    genotypes = eqx.filter_vmap(lambda k: q.rl.DeterministicPolicy(2, 2, (64, 64), key=k))(
        jr.split(pop_key, batch)
    )
    state, _ = eqx.filter_jit(algo.init)(genotypes, cells, key=init_key)
    state, history = q.run(algo, state, iterations, key=run_key)
    return float(history.qd_score[-1]), float(history.coverage[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--agent", default="ppo", choices=["ppo", "td3", "sac"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--iterations", type=int, default=40)
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--train-iterations", type=int, default=25)
    a = p.parse_args()
    finals: dict[str, list[tuple[float, float]]] = {f"me-pbt ({a.agent})": [], "ga only": []}
    for seed in a.seeds:
        t = time.perf_counter()
        finals[f"me-pbt ({a.agent})"].append(
            me_pbt(a.agent, seed, a.iterations, a.batch, a.train_iterations)
        )
        t_me = time.perf_counter() - t
        t = time.perf_counter()
        finals["ga only"].append(ga_only(seed, a.iterations, a.batch))
        t_ga = time.perf_counter() - t
        (me_qd, me_cov), (ga_qd, ga_cov) = (arm[-1] for arm in finals.values())
        print(
            f"seed {seed}: me-pbt QD-score {me_qd:.1f} coverage {me_cov:.3f} ({t_me:.0f} s); "
            f"ga only QD-score {ga_qd:.1f} coverage {ga_cov:.3f} ({t_ga:.0f} s)"
        )
    for arm, values in finals.items():
        qd, cov = zip(*values)
        print(
            f"{arm:14s} QD-score {', '.join(f'{v:.1f}' for v in qd)} (median "
            f"{statistics.median(qd):.1f}); coverage {', '.join(f'{v:.3f}' for v in cov)} "
            f"(median {statistics.median(cov):.3f})"
        )


if __name__ == "__main__":
    main()
