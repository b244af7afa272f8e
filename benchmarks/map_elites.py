"""MAP-Elites throughput benchmark (the QDax / pyribs anchor workload).

Rastrigin on R^dim (y = 10x - 5), descriptor clip(x[:2], 0, 1), initial x ~ U[0,1]^dim,
iso+line-DD (0.005 / 0.05), uniform parent selection, genotypes not clipped, CVT or grid cells,
``iters`` iterations in one jitted ``lax.scan``. Compile time is measured apart (AOT lower +
compile); the steady state is the median of ``--repeats`` runs of the compiled scan, each from
the same initial state and key.

    python benchmarks/map_elites.py --task rastrigin --dim 100 --cells 1024 --batch 1024 \
        --iters 200 [--centroids FILE.npy] [--grid] --json OUT
"""

import argparse
import json
import resource
import statistics
import time

import equinox as eqx
import jax
import jax.random as jr

import eqx_qd as q
from eqx_qd import jobs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="rastrigin", choices=["rastrigin", "sphere", "arm"])
    p.add_argument("--dim", type=int, default=100)
    p.add_argument("--cells", type=int, default=1024, help="CVT cells (grid: total, a square)")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--centroids", help=".npy centroids (else k-means on --cvt-samples)")
    p.add_argument("--cvt-samples", type=int, default=50_000)
    p.add_argument("--grid", action="store_true")
    p.add_argument("--full-search", action="store_true", help="CVT without the bucket index")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json")
    a = p.parse_args()

    task = jobs.make_task(a.task, genotype_dim=a.dim)
    key = jr.key(a.seed)
    cvt_key, pop_key, init_key, run_key = jr.split(key, 4)
    centroids_s = centroids_warm_s = None
    if a.grid:
        side = round(a.cells**0.5)
        cells = q.GridTessellation((side, side), 0.0, 1.0)
    elif a.centroids:
        cells = q.CVTTessellation.load(a.centroids)
    else:
        t0 = time.perf_counter()
        c = jax.block_until_ready(
            q.cvt_centroids(a.cells, 2, num_samples=a.cvt_samples, key=cvt_key)
        )
        centroids_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        jax.block_until_ready(q.cvt_centroids(a.cells, 2, num_samples=a.cvt_samples, key=cvt_key))
        centroids_warm_s = time.perf_counter() - t0
        cells = q.CVTTessellation(c)
    if a.full_search and not a.grid:
        cells = q.CVTTessellation(cells.centroids, index_min_cells=2**31 - 1)

    emitter = q.MixingEmitter(
        batch_size=a.batch,
        variation_percentage=1.0,
        variation=q.IsoLineVariation(0.005, 0.05),
    )
    algo = q.MAPElites(emitter, task, task.qd_offset)
    genotypes = task.init_genotypes(a.batch, key=pop_key)
    t0 = time.perf_counter()
    state, _ = jax.block_until_ready(eqx.filter_jit(algo.init)(genotypes, cells, key=init_key))
    init_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    lowered = q.run.lower(algo, state, a.iters, key=run_key)  # with the package's XLA options
    lower_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t0

    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        final, history = jax.block_until_ready(compiled(algo, state, a.iters, key=run_key))
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    last = {k: float(v[-1]) for k, v in history.as_dict().items()}
    res = {
        "bench": "map_elites",
        "library": f"eqx_qd {q.__version__}",
        "jax": jax.__version__,
        "task": a.task,
        "dim": a.dim,
        "cells": cells.num_cells,
        "tessellation": "grid" if a.grid else "cvt",
        "bucket_index": not a.grid and cells.bucket_index is not None,
        "batch": a.batch,
        "iters": a.iters,
        "seed": a.seed,
        "centroids_s": centroids_s,
        "centroids_warm_s": centroids_warm_s,
        "init_s": init_s,
        "lower_s": lower_s,
        "compile_s": compile_s,
        "run_s": times,
        "s_per_iter": med / a.iters,
        "evals_per_s": a.batch * a.iters / med,
        "qd_score": last["qd_score"],
        "coverage": last["coverage"],
        "max_fitness": last["max_fitness"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if centroids_s is not None:
        print(f"centroids ({a.cells} from {a.cvt_samples}): {centroids_s:.3f} s first call, "
              f"{centroids_warm_s:.3f} s warm")  # fmt: skip
    print(f"init {init_s:.3f} s | lower {lower_s:.3f} s | compile {compile_s:.3f} s")
    print(f"run x{a.repeats}: " + ", ".join(f"{t:.4f}" for t in times) + " s")
    print(f"{1e3 * res['s_per_iter']:.3f} ms/iter, {res['evals_per_s']:,.0f} evals/s (median)")
    print(
        f"QD-score {res['qd_score']:.6g} | coverage {100 * res['coverage']:.1f}% | "
        f"max fitness {res['max_fitness']:.4f} | peak RSS {res['peak_rss_mb']:.0f} MiB"
    )
    print("JSON " + json.dumps(res))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
