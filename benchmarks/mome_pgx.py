"""MOME-PGX against MOME on a bi-objective brax task: the paper's ordering at a budget this CPU
allows, both on the same batch size, cells, fronts and evaluations.

MOME-PGX (Janmohamed, Pierrot and Cully, GECCO 2023) as its repository runs it, scaled down:
a batch of `ga + 2 * pg` candidates (the paper: 128 + 2 x 64) from iso+line-DD and one
policy-gradient emitter per objective (TD3 critics of 256 x 256, `critic_steps` and
`pg_steps` per iteration, the paper's 300 and 100), on `ParetoRepertoire(crowding=True)`.
MOME: every child by iso+line-DD (the paper's baseline: `crossover_percentage` 1), uniform
draws, the batch the same size. Both: policies of `hidden` units (the paper's 64 x 64), CVT
cells over the feet-contact rates, fronts of `front`, the task's reference point.

- `--seeds N --iters T --out F.json`: N seeds of each; per seed the final `MOQDMetrics`
  and the MOQD-score every `log_every` iterations; then medians and a one-sided Mann-Whitney
  U test (MOME-PGX's MOQD-score above MOME's).
- `--speed`: seconds per iteration of each, compile apart.

Usage: JAX_PLATFORMS=cpu python benchmarks/mome_pgx.py --seeds 5 --iters 100 --out F.json
"""

import argparse
import json
import statistics
import time

import numpy as np


def build(algorithm: str, args, seed: int):
    import equinox as eqx
    import jax.numpy as jnp
    import jax.random as jr

    import eqx_qd as q
    from eqx_qd.envs import BraxMultiObjectiveEnv
    from eqx_qd.rl import TD3, TD3HParams

    env = BraxMultiObjectiveEnv(args.task, episode_length=args.episode_length)
    scorer = q.PolicyScorer(env)
    td3 = TD3(
        observation_size=env.observation_size,
        action_size=env.action_size,
        policy_hidden=tuple(args.hidden),
        critic_hidden=(256, 256),
        minibatch_size=args.minibatch,
    )
    batch = args.ga + env.num_objectives * args.pg
    variation = q.IsoLineVariation(iso_sigma=0.005, line_sigma=0.05)
    if algorithm == "mome_pgx":
        emitter = q.mome_pgx_emitter(
            num_objectives=env.num_objectives,
            ga_batch_size=args.ga,
            pg_batch_size=args.pg,
            td3=td3,
            hparams=TD3HParams(policy_lr=3e-4, critic_lr=3e-4),
            critic_steps=args.critic_steps,
            pg_steps=args.pg_steps,
            pg_lr=1e-3,
            buffer_size=args.buffer,
            variation=variation,
        )
    else:
        emitter = q.MixingEmitter(batch_size=batch, variation_percentage=1.0, variation=variation)
    key = jr.key(seed)
    cvt_key, pop_key, init_key, run_key = jr.split(key, 4)
    low, high = env.descriptor_bounds
    centroids = q.cvt_centroids(
        args.cells, env.descriptor_size, low[0], high[0], num_samples=20_000, key=cvt_key
    )
    tessellation = q.CVTTessellation(centroids)
    policies = eqx.filter_vmap(lambda k: td3.init_policy(key=k))(jr.split(pop_key, batch))
    reference = jnp.asarray(env.reference_point)
    algo = q.MOME(emitter, scorer, reference, front_length=args.front)
    crowding = algorithm == "mome_pgx"
    genotype = jax_tree_first(policies)
    archive = q.ParetoRepertoire.empty(
        tessellation, genotype, env.num_objectives, args.front, crowding=crowding
    )
    return algo, policies, archive, init_key, run_key, batch


def jax_tree_first(tree):
    import equinox as eqx
    import jax

    return jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, tree)


def one_run(algorithm: str, args, seed: int) -> dict:
    import equinox as eqx
    import jax
    import jax.random as jr

    import eqx_qd as q

    algo, policies, archive, init_key, run_key, batch = build(algorithm, args, seed)
    init = eqx.filter_jit(lambda p, a, k: algo.init(p, a, key=k))
    state, _ = init(policies, archive, init_key)
    chunk = eqx.filter_jit(lambda s, k: q.run_mome(algo, s, args.log_every, key=k))
    history = []
    start = time.perf_counter()
    keys = jr.split(run_key, args.iters // args.log_every)
    for k in keys:
        state, metrics = chunk(state, k)
        history.append(float(jax.device_get(metrics.moqd_score[-1])))
    wall = time.perf_counter() - start
    final = {k: float(np.ravel(np.asarray(v))[-1]) for k, v in metrics.as_dict().items()}
    return {
        "algorithm": algorithm,
        "seed": seed,
        "evaluations": batch * (args.iters + 1),
        "wall_s": wall,
        "moqd_history": history,
        **final,
    }


def mann_whitney_greater(a, b) -> tuple[float, float]:
    """U of `a` over `b` and the one-sided exact p-value (no ties assumed beyond half counts)."""
    from scipy.stats import mannwhitneyu

    res = mannwhitneyu(a, b, alternative="greater", method="exact")
    return float(res.statistic), float(res.pvalue)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="walker2d_multi")
    parser.add_argument("--episode-length", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--ga", type=int, default=64)
    parser.add_argument("--pg", type=int, default=32)
    parser.add_argument("--cells", type=int, default=128)
    parser.add_argument("--front", type=int, default=50)
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    parser.add_argument("--critic-steps", type=int, default=300)
    parser.add_argument("--pg-steps", type=int, default=100)
    parser.add_argument("--minibatch", type=int, default=256)
    parser.add_argument("--buffer", type=int, default=1_000_000)
    parser.add_argument("--only", choices=["mome", "mome_pgx"], default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    runs = []
    algorithms = [args.only] if args.only else ["mome", "mome_pgx"]
    for seed in range(args.seeds):
        for algorithm in algorithms:
            run = one_run(algorithm, args, seed)
            runs.append(run)
            print(json.dumps({k: v for k, v in run.items() if k != "moqd_history"}), flush=True)
    summary = {"config": vars(args), "runs": runs}
    if len(algorithms) == 2:
        scores = {a: [r["moqd_score"] for r in runs if r["algorithm"] == a] for a in algorithms}
        hv = {a: [r["global_hypervolume"] for r in runs if r["algorithm"] == a] for a in algorithms}
        u, p = mann_whitney_greater(scores["mome_pgx"], scores["mome"])
        hu, hp = mann_whitney_greater(hv["mome_pgx"], hv["mome"])
        summary["medians"] = {a: statistics.median(s) for a, s in scores.items()}
        summary["hv_medians"] = {a: statistics.median(s) for a, s in hv.items()}
        summary["mann_whitney"] = {"moqd_u": u, "moqd_p": p, "hv_u": hu, "hv_p": hp}
        print(json.dumps({k: summary[k] for k in ("medians", "hv_medians", "mann_whitney")}))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
