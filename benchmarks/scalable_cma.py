"""CMA-MAE at the size full CMA-ES cannot hold: the projected sphere over `--dim` variables
(100,000 by default), ours or pyribs' (`--peer ribs`, run with pyribs' interpreter), with a
scalable strategy (`--es`, LM-MA-ES by default).

A `--cells` x `--cells` grid (20 x 20: at 100,000 variables each archive's genotypes are 160 MB;
pyribs' 100 x 100 would be 4 GB per archive), `--emitters` strategies of `--batch` candidates,
CMA-MAE's archive learning rate 0.01 and threshold 0, sigma0 0.5, x0 = 0. Prints one JSON line:
seconds per iteration (compile apart for ours, numba's compile apart for pyribs), the emitter
state's bytes, QD-score and coverage of the result archive, the process's peak RSS, and (ours)
what full CMA-ES says when asked for the same population.

Usage: python benchmarks/scalable_cma.py [--dim 100000] [--es lm_ma_es] [--iterations 50]
       /tmp/ribs_venv/bin/python benchmarks/scalable_cma.py --peer ribs
"""

import argparse
import json
import resource
import time

import numpy as np


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def ours(args) -> dict:
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    import eqx_qd as q
    from eqx_qd._es_base import tree_bytes

    task = q.ProjectedSphere(args.dim)
    bound = args.dim / 2 * 5.12
    cells = q.GridTessellation((args.cells, args.cells), -bound, bound)
    make = lambda es: q.EvolutionStrategyEmitter(
        jnp.zeros(args.dim), 0.5, num_emitters=args.emitters, emitter_batch_size=args.batch,
        ranker="imp", selection_rule="mu", restart_rule="basic", es=es,
    )  # fmt: skip
    try:
        make("cma_es")
        refused = None
    except ValueError as e:
        refused = str(e)
    algo = q.MAPElites(make(args.es), task, archive_learning_rate=0.01, threshold_min=0.0)
    state, _ = algo.init(task.init_genotypes(1, key=jr.key(args.seed)), cells, key=jr.key(0))
    key = jr.key(args.seed + 1)
    t0 = time.perf_counter()
    compiled = q.run.lower(algo, state, args.iterations, key=key).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state, metrics = compiled(algo, state, args.iterations, key=key)
    jax.block_until_ready(metrics)
    seconds = time.perf_counter() - t0
    return dict(
        side="eqx_qd", es=args.es, dim=args.dim, iterations=args.iterations,
        s_per_iter=seconds / args.iterations, compile_s=compile_s,
        emitter_state_mib=tree_bytes(state.emitter_state) / 2**20,
        qd_score=float(metrics.qd_score[-1]), coverage=float(metrics.coverage[-1]),
        peak_rss_mib=_peak_rss_mib(), cma_es=refused,
    )  # fmt: skip


def _sphere(x):
    dim = x.shape[1]
    shift = 0.4 * 5.12
    worst = (-5.12 - shift) ** 2 * dim
    objective = (np.sum((x - shift) ** 2, axis=1) - worst) / (0.0 - worst) * 100
    c = x.copy()
    out = (c < -5.12) | (c > 5.12)
    c[out] = 5.12 / c[out]
    return objective, np.stack([c[:, : dim // 2].sum(1), c[:, dim // 2 :].sum(1)], axis=1)


def ribs(args) -> dict:
    from ribs.archives import GridArchive
    from ribs.emitters import EvolutionStrategyEmitter
    from ribs.emitters.opt import _get_es
    from ribs.schedulers import Scheduler

    bound = args.dim / 2 * 5.12
    ranges = [(-bound, bound)] * 2
    dims = (args.cells, args.cells)
    archive = GridArchive(solution_dim=args.dim, dims=dims, ranges=ranges, seed=args.seed,
                          threshold_min=0, learning_rate=0.01, dtype=np.float32)  # fmt: skip
    result = GridArchive(solution_dim=args.dim, dims=dims, ranges=ranges, dtype=np.float32)
    emitters = [
        EvolutionStrategyEmitter(archive, x0=np.zeros(args.dim), sigma0=0.5,
                                 batch_size=args.batch, seed=s, es=args.es, ranker="imp",
                                 selection_rule="mu", restart_rule="basic")
        for s in np.random.SeedSequence(args.seed).spawn(args.emitters)
    ]  # fmt: skip
    scheduler = Scheduler(archive, emitters, result)
    warm = _get_es(args.es, sigma0=0.5, solution_dim=args.dim, batch_size=args.batch, seed=0)
    warm.reset(np.zeros(args.dim))  # numba compiles on the first generation: compile apart
    x = warm.ask()
    warm.tell(np.arange(args.batch), np.zeros(args.batch), args.batch // 2)
    t0 = time.perf_counter()
    for _ in range(args.iterations):
        x = scheduler.ask()
        objective, measures = _sphere(x)
        scheduler.tell(objective, measures)
    seconds = time.perf_counter() - t0
    stats = scheduler.result_archive.stats
    return dict(
        side="pyribs", es=args.es, dim=args.dim, iterations=args.iterations,
        s_per_iter=seconds / args.iterations, qd_score=float(stats.qd_score),
        coverage=float(stats.coverage), peak_rss_mib=_peak_rss_mib(),
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=100_000)
    parser.add_argument("--es", default="lm_ma_es", choices=["sep_cma_es", "lm_ma_es", "openai_es"])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--cells", type=int, default=20)
    parser.add_argument("--emitters", type=int, default=5)
    parser.add_argument("--batch", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--peer", choices=["ribs"], default=None)
    args = parser.parse_args()
    print(json.dumps(ribs(args) if args.peer == "ribs" else ours(args)))


if __name__ == "__main__":
    main()
