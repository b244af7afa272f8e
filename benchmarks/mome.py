"""MOME on QDax's MOME example settings, ours beside QDax 0.5's.

The example (`examples/mome.ipynb`, also `tests/core_test/mome_test.py`): bi-objective
Rastrigin on 100 genes in [-2, 4] with lags 0 and 2.2, descriptors the first two genes,
64 CVT cells, fronts of 50, batch 100, every child by crossover (`crossover_percentage` 1:
QDax's `polynomial_crossover` with `proportion_var_to_change` 0.5; ours
`UniformCrossover(1 - exp(-0.5))`, the same expected share of genes), metrics every
iteration.

- `--speed`: seconds per iteration of a 1,000-iteration scan, compile apart (the first call
  compiles and runs, the next three are timed; their median is printed, and the first call
  less that median as the compile time).
- `--seeds N --iters T --out F.npz`: N runs of T iterations; the final fronts' objectives
  `(N, 64, 50, 2)` go to `F.npz`, and QDax's side also stores QDax's `default_moqd_metrics`
  of each final archive with the task's reference point and with the example's `(-150, -150)`.
- `--check OURS.npz QDAX.npz`: our `moqd_metrics` of both sides' final archives with the task's
  reference point (medians, Mann-Whitney U), and the equality of our metrics with QDax's on
  QDax's own archives.

Usage: [JAX_PLATFORMS=cpu /tmp/qdax_venv/bin/python] benchmarks/mome.py --speed [--peer qdax]
       ... --seeds 5 --iters 1000 --out F.npz [--peer qdax]
       python benchmarks/mome.py --check OURS.npz QDAX.npz
"""

import argparse
import json
import math
import statistics
import time
from functools import partial

import numpy as np


GENES, CELLS, FRONT, BATCH, LAG, LOW, HIGH = 100, 64, 50, 100, 2.2, -2.0, 4.0
EXAMPLE_REFERENCE = (-150.0, -150.0)


def task_reference() -> np.ndarray:
    """The reference point of our `MultiObjectiveRastrigin` (below every genotype in bounds)."""
    lags = np.array([0.0, LAG])
    reach = np.maximum(np.abs(LOW - lags), np.abs(HIGH - lags))
    return (-GENES * (reach**2 + 20.0) - 1.0).astype(np.float32)


def ours(seed: int):
    import jax

    import eqx_qd as q

    task = q.MultiObjectiveRastrigin(genotype_dim=GENES, lags=(0.0, LAG), minval=LOW, maxval=HIGH)
    key = jax.random.key(seed)
    cvt_key, init_key, run_key = jax.random.split(key, 3)
    tess = q.CVTTessellation(q.cvt_centroids(CELLS, 2, LOW, HIGH, num_samples=20_000, key=cvt_key))
    emitter = q.MixingEmitter(
        batch_size=BATCH,
        variation_percentage=1.0,
        variation=q.UniformCrossover(1.0 - math.exp(-0.5)),
    )
    algo = q.MOME(emitter, task, task.reference_point, front_length=FRONT)
    genotypes = task.init_genotypes(BATCH, key=init_key)
    state, _ = jax.jit(lambda g, k: algo.init(g, tess, key=k))(genotypes, init_key)

    def run(iters, k):
        final, history = q.run_mome(algo, state, iters, key=k)
        jax.block_until_ready(history)
        return np.asarray(final.repertoire.front_objectives)

    return run, run_key


def qdax(seed: int):
    import jax
    import jax.numpy as jnp
    from qdax.core.containers.mapelites_repertoire import compute_cvt_centroids
    from qdax.core.emitters.mutation_operators import polynomial_crossover, polynomial_mutation
    from qdax.core.emitters.standard_emitters import MixingEmitter
    from qdax.core.mome import MOME
    from qdax.utils.metrics import default_moqd_metrics

    def scoring(genotypes, key):
        def one(lag):
            y = genotypes - lag
            return -(GENES * 10 + jnp.sum(y**2 - 10 * jnp.cos(2 * jnp.pi * y), axis=1))

        return jnp.stack([one(0.0), one(LAG)], axis=-1), genotypes[:, :2], {}

    key = jax.random.key(seed)
    key, init_key, cvt_key = jax.random.split(key, 3)
    genotypes = jax.random.uniform(init_key, (BATCH, GENES), minval=LOW, maxval=HIGH)
    emitter = MixingEmitter(
        mutation_fn=partial(
            polynomial_mutation, eta=1, minval=LOW, maxval=HIGH, proportion_to_mutate=0.6
        ),
        variation_fn=partial(polynomial_crossover, proportion_var_to_change=0.5),
        variation_percentage=1.0,
        batch_size=BATCH,
    )
    centroids = compute_cvt_centroids(
        num_descriptors=2, num_init_cvt_samples=20_000, num_centroids=CELLS,
        minval=LOW, maxval=HIGH, key=cvt_key,
    )  # fmt: skip
    metrics_fn = partial(default_moqd_metrics, reference_point=jnp.asarray(EXAMPLE_REFERENCE))
    mome = MOME(scoring, emitter, metrics_fn, pareto_front_max_length=FRONT)
    repertoire, emitter_state, _ = mome.init(genotypes, centroids, key)

    @partial(jax.jit, static_argnums=0)
    def scan(iters, k):
        (final, _, _), history = jax.lax.scan(
            mome.scan_update, (repertoire, emitter_state, k), (), length=iters
        )
        return final, history

    def run(iters, k):
        final, history = scan(iters, k)
        jax.block_until_ready(history)
        run.last = final
        return np.asarray(final.fitnesses)

    return run, key


def qdax_metrics(fronts: np.ndarray, reference) -> dict:
    """QDax 0.5's `default_moqd_metrics` of an archive holding `fronts` (MOQD-score summed)."""
    import jax.numpy as jnp
    from qdax.core.containers.mome_repertoire import MOMERepertoire
    from qdax.utils.metrics import default_moqd_metrics

    cells, length = fronts.shape[:2]
    rep = MOMERepertoire(
        genotypes=jnp.zeros((cells, length, 1)),
        fitnesses=jnp.asarray(fronts),
        descriptors=jnp.zeros((cells, length, 2)),
        centroids=jnp.zeros((cells, 2)),
        extra_scores={},
        keys_extra_scores=(),
    )
    m = default_moqd_metrics(rep, jnp.asarray(reference, jnp.float32))
    per_cell = np.asarray(m["moqd_score"])
    return {
        "moqd_score": float(np.sum(per_cell[np.isfinite(per_cell)])),
        "global_hypervolume": float(m["global_hypervolume"]),
        "max_hypervolume": float(m["max_hypervolume"]),
        "max_sum_scores": float(m["max_sum_scores"]),
        "coverage": float(m["coverage"]) / 100.0,
        "num_solutions": int(m["number_solutions"]),
    }


def our_metrics(fronts: np.ndarray, reference) -> dict:
    import jax.numpy as jnp

    import eqx_qd as q

    cells, length = fronts.shape[:2]
    tess = q.CVTTessellation(jnp.zeros((cells, 2)) + jnp.arange(cells)[:, None])
    rep = q.ParetoRepertoire(
        jnp.zeros((cells, length, 1)), jnp.asarray(fronts, jnp.float32),
        jnp.zeros((cells, length, 2)), tess,
    )  # fmt: skip
    m = q.moqd_metrics(rep, jnp.asarray(reference, jnp.float32))
    return {k: float(v) for k, v in m.as_dict().items()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--peer", choices=["qdax"])
    p.add_argument("--speed", action="store_true")
    p.add_argument("--seeds", type=int, default=0)
    p.add_argument("--iters", type=int, default=1000)
    p.add_argument("--out")
    p.add_argument("--check", nargs=2)
    a = p.parse_args()
    if a.check:
        return check(*a.check)
    import jax

    side = qdax if a.peer else ours
    if a.speed:
        run, key = side(0)
        t0 = time.perf_counter()
        run(a.iters, key)
        compile_s = time.perf_counter() - t0
        times = []
        for i in range(3):
            t0 = time.perf_counter()
            run(a.iters, jax.random.fold_in(key, i + 1))
            times.append(time.perf_counter() - t0)
        median = statistics.median(times)
        out = {"side": a.peer or "ours", "iters": a.iters, "seconds": median,
               "ms_per_iteration": 1e3 * median / a.iters, "times": times,
               "first_call_s": compile_s, "compile_s": compile_s - median}  # fmt: skip
        print("JSON " + json.dumps(out))
        return
    fronts, theirs_task, theirs_example = [], [], []
    for seed in range(a.seeds):
        run, key = side(seed)
        f = run(a.iters, key)
        fronts.append(f)
        if a.peer:
            theirs_task.append(list(qdax_metrics(f, task_reference()).values()))
            theirs_example.append(list(qdax_metrics(f, EXAMPLE_REFERENCE).values()))
        print(f"seed {seed} done", flush=True)
    np.savez(
        a.out, fronts=np.stack(fronts), qdax_task=np.asarray(theirs_task),
        qdax_example=np.asarray(theirs_example),
    )  # fmt: skip


def check(ours_file: str, qdax_file: str) -> None:
    from scipy.stats import mannwhitneyu

    mine, theirs = np.load(ours_file), np.load(qdax_file)
    ref = task_reference()
    names = ("moqd_score", "global_hypervolume", "max_hypervolume", "max_sum_scores",
             "coverage", "num_solutions")  # fmt: skip
    ours_m = [our_metrics(f, ref) for f in mine["fronts"]]
    qdax_m = [our_metrics(f, ref) for f in theirs["fronts"]]
    print(
        f"reference point {ref.tolist()} (the task's; QDax's example (-150, -150) bounds no front)"
    )
    print(f"{'metric':20s} {'ours median':>16s} {'QDax median':>16s}  p (two-sided U)")
    for n in names:
        x, y = [m[n] for m in ours_m], [m[n] for m in qdax_m]
        pval = mannwhitneyu(x, y, alternative="two-sided").pvalue if len(x) > 1 else float("nan")
        print(f"{n:20s} {statistics.median(x):16.6g} {statistics.median(y):16.6g}  {pval:.3g}")
    worst = 0.0
    for f, row in zip(theirs["fronts"], theirs["qdax_task"]):
        mine_row = our_metrics(f, ref)
        for n, v in zip(names, row):
            worst = max(worst, abs(mine_row[n] - v) / max(1.0, abs(v)))
    print(
        f"our metrics on QDax's archives against QDax's, task reference: max rel diff {worst:.2e}"
    )
    for f, row in zip(theirs["fronts"][:1], theirs["qdax_example"][:1]):
        mine_row = our_metrics(f, EXAMPLE_REFERENCE)
        print("example reference (-150, -150), seed 0, ours / QDax:",
              {n: (mine_row[n], v) for n, v in zip(names, row)})  # fmt: skip


if __name__ == "__main__":
    main()
