"""CMA-ME / CMA-MAE / CMA-MEGA / OG-MAP-Elites / OMG-MEGA on pyribs' sphere protocol: ours, or
pyribs' (`--peer ribs`, run with pyribs' interpreter), for one algorithm and a number of
iterations.

The protocol of pyribs' `examples/sphere.py`: the 100-D projected sphere, a 100 x 100 grid over
`+-256`, 15 emitters x 36 candidates per iteration (CMA-MEGA: 35 branches and `theta`),
CMA-MAE's archive learning rate 0.01 and threshold 0, x0 = 0. Prints one JSON line: the
algorithm, the seconds of the timed iterations (compile apart for ours), QD-score and coverage.
With `--out`, pyribs' run is also written as a peer run folder (its result archive every 50
iterations and at the end) that `eqx-qd report` compares with the jobs' runs
(`benchmarks/cma_seeds.sh`).

`--es` runs CMA-ME / CMA-MAE with another strategy (pyribs' `es`: sep_cma_es, lm_ma_es,
openai_es; each at pyribs' defaults), on both sides. `--square-roots eigh` has our CMA-ES
refresh its square roots by eigendecompositions (pyribs' way) instead of Newton steps;
`--float32` gives pyribs float32 archives, so its CMA-ES runs in float32, as ours does.

`dms` and `dds` are the example's Discount Model Search and Density Descent Search: CMA-MAE's
emitters on a discount model (learning rate 0.1, threshold 0, the MLP 128 x 128 trained on
[0, 100] read as [0, 1], 100 empty points; pyribs needs PyTorch) and sigma0 1.5 emitters
ranked by a KDE of 10,000 recent descriptors (bandwidth 25.6), each beside the 100 x 100 result
grid the emitters restart from.

Usage: python benchmarks/cma.py [cma_me|cma_mae|cma_mega|og_map_elites|omg_mega|dms|dds]
       [--iterations 500] [--seed 0]
       [--es cma_es|sep_cma_es|lm_ma_es|openai_es] [--square-roots newton|eigh] [--float32]
       /tmp/ribs_venv/bin/python benchmarks/cma.py cma_me --peer ribs [--out FOLDER]
       JAX_PLATFORMS=cpu /tmp/qdax_venv/bin/python benchmarks/cma.py cma_me --peer qdax
"""

import argparse
import json
import time

import numpy as np


DIM, CELLS, EMITTERS, BATCH = 100, (100, 100), 15, 36
# pyribs' sphere example's gradient-operator settings: sigma, sigma_g, measure_gradients,
# normalize_grad; one emitter of 270 points and their 270 steps.
GRADIENT_OPERATORS = {
    "og_map_elites": (0.5, 0.5, False, False),
    "omg_mega": (0.0, 10.0, True, True),
}
BOUND = DIM / 2 * 5.12


def ours(
    algorithm: str, iterations: int, seed: int, es: str = "cma_es", square_roots: str = "newton"
) -> dict:
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    import eqx_qd as q

    task = q.ProjectedSphere(DIM)
    cells = q.GridTessellation(CELLS, -BOUND, BOUND)
    x0 = jnp.zeros(DIM)
    annealing = {}
    roots = square_roots if es == "cma_es" else None  # an option of CMA-ES only
    if algorithm == "cma_me":
        emitter = q.EvolutionStrategyEmitter(
            x0, 0.5, num_emitters=EMITTERS, emitter_batch_size=BATCH, es=es,
            square_roots=roots,
        )  # fmt: skip
    elif algorithm == "cma_mae":
        emitter = q.EvolutionStrategyEmitter(
            x0, 0.5, num_emitters=EMITTERS, emitter_batch_size=BATCH,
            ranker="imp", selection_rule="mu", restart_rule="basic", es=es,
            square_roots=roots,
        )  # fmt: skip
        annealing = dict(archive_learning_rate=0.01, threshold_min=0.0)
    elif algorithm in ("dms", "dds"):
        emitter = None  # below, with its archive
    elif algorithm in GRADIENT_OPERATORS:
        sigma, sigma_g, measure_gradients, normalize_grad = GRADIENT_OPERATORS[algorithm]
        emitter = q.GradientOperatorEmitter(
            task, x0, sigma=sigma, sigma_g=sigma_g, measure_gradients=measure_gradients,
            normalize_grad=normalize_grad, branches=EMITTERS * BATCH // 2,
        )  # fmt: skip
    else:
        emitter = q.GradientArborescenceEmitter(
            task, x0, 10.0, 1.0, num_descriptors=2, num_emitters=EMITTERS, branches=BATCH - 1,
            selection_rule="mu", optimizer="gradient_ascent",
        )  # fmt: skip
    repertoire = cells
    if algorithm in ("dms", "dds"):
        dds = algorithm == "dds"
        emitter = q.EvolutionStrategyEmitter(
            x0, 1.5 if dds else 0.5, num_emitters=EMITTERS, emitter_batch_size=BATCH,
            ranker="density" if dds else "imp", selection_rule="mu", restart_rule="basic",
            square_roots=square_roots,
        )  # fmt: skip
        if dds:
            repertoire = q.DensityRepertoire.empty(
                cells, x0, bandwidth=25.6, buffer_size=10_000, key=jr.key(seed + 2)
            )
        else:
            repertoire = q.DiscountModelRepertoire.empty(
                cells, x0, learning_rate=0.1, threshold_min=0.0, discount_range=(0.0, 100.0),
                key=jr.key(seed + 2),
            )  # fmt: skip
    algo = q.MAPElites(emitter, task, **annealing)
    state, _ = algo.init(task.init_genotypes(1, key=jr.key(seed)), repertoire, key=jr.key(seed))
    key = jr.key(seed + 1)
    t0 = time.perf_counter()
    compiled = q.run.lower(algo, state, iterations, key=key).compile()  # compile apart
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state, metrics = compiled(algo, state, iterations, key=key)
    jax.block_until_ready(metrics)
    seconds = time.perf_counter() - t0
    return dict(
        side="eqx_qd", algorithm=algorithm, es=es, iterations=iterations, seconds=seconds,
        compile_s=compile_s, qd_score=float(metrics.qd_score[-1]),
        coverage=float(metrics.coverage[-1]),
    )  # fmt: skip


def _sphere(x):
    shift = 0.4 * 5.12
    worst = (-5.12 - shift) ** 2 * DIM
    objective = (np.sum((x - shift) ** 2, axis=1) - worst) / (0.0 - worst) * 100
    c = x.copy()
    out = (c < -5.12) | (c > 5.12)
    c[out] = 5.12 / c[out]
    measures = np.stack([c[:, : DIM // 2].sum(1), c[:, DIM // 2 :].sum(1)], axis=1)
    derivative = np.ones(x.shape)
    derivative[out] = -5.12 / np.square(x[out])
    first = np.arange(DIM) < DIM // 2
    jac = np.stack([-2 * (x - shift), derivative * first, derivative * ~first], axis=1)
    return objective, measures, jac


LOG_PERIOD = 50  # the jobs' CMA presets log every 50 iterations too
_NAMES = {
    "cma_me": "CMA-ME",
    "cma_mae": "CMA-MAE",
    "cma_mega": "CMA-MEGA",
    "og_map_elites": "OG-MAP-Elites",
    "omg_mega": "OMG-MEGA",
    "dms": "DMS",
    "dds": "DDS",
}


def _write_peer_run(
    out: str, library: str, algorithm: str, rows: list, fitnesses, es: str = "cma_es"
) -> None:
    """A peer run folder that `eqx-qd report` reads beside the jobs' runs
    (`eqx_qd.jobs.read_peer_curves`): peer.json, progress.csv, fitnesses.npy."""
    import csv
    import os

    os.makedirs(out, exist_ok=True)
    name = _NAMES[algorithm] + ("" if es == "cma_es" else f" ({es})")  # as `eqx-qd report`
    about = {"library": library, "algorithm": name, "task": "projected_sphere"}
    with open(os.path.join(out, "peer.json"), "w") as f:
        json.dump(about, f)
    with open(os.path.join(out, "progress.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["evaluations", "qd_score", "coverage", "max_fitness"])
        writer.writerows([[int(e), float(q), float(c), float(m)] for e, q, c, m in rows])
    np.save(os.path.join(out, "fitnesses.npy"), np.asarray(fitnesses, np.float64))


def _warm_up(es: str) -> None:
    """One generation of a throwaway pyribs strategy `es`, so numba's compiles of its helpers
    fall outside the timed loop (as our compile does)."""
    from ribs.emitters.opt import _get_es

    opt = _get_es(es, sigma0=0.5, solution_dim=DIM, batch_size=BATCH, seed=0)
    opt.reset(np.zeros(DIM))
    x = opt.ask()
    order = np.argsort(-_sphere(x)[0])
    opt.tell(order, _sphere(x)[0][order], BATCH // 2)
    opt.check_stop(_sphere(x)[0][order])


def _guide(algorithm: str, result, seed: int):
    """pyribs' archive that guides DMS or DDS beside `result` (the example's settings)."""
    if algorithm == "dds":
        from ribs.archives import DensityArchive

        return DensityArchive(
            measure_dim=2, buffer_size=10_000, density_method="kde", bandwidth=25.6, seed=seed
        )
    import torch
    from ribs.archives import DiscountArchive
    from ribs.discount_models import DiscountModelManager, MLP

    torch.manual_seed(seed)  # the MLP's initialisation and the minibatch shuffles
    model = MLP([[2, 128], [128, 128], [128, 1]], torch.nn.ReLU)
    manager = DiscountModelManager(
        model, torch.optim.Adam(model.parameters(), lr=0.001, betas=(0.9, 0.999)),
        torch.device("cpu"), train_epochs=5, train_cutoff_loss=0.05, train_batch_size=32,
        normalize_measures="negative_one_one", measures_low=[-BOUND] * 2,
        measures_high=[BOUND] * 2, normalize_discount="zero_one", discount_low=0.0,
        discount_high=100.0,
    )  # fmt: skip
    return DiscountArchive(
        solution_dim=DIM, measure_dim=2, learning_rate=0.1, threshold_min=0,
        discount_model_manager=manager, result_archive=result, init_train_points=1000,
        empty_points=100, seed=seed,
    )  # fmt: skip


def ribs(
    algorithm: str,
    iterations: int,
    seed: int,
    out: str | None = None,
    es: str = "cma_es",
    float32: bool = False,
) -> dict:
    from ribs.archives import GridArchive
    from ribs.emitters import (
        EvolutionStrategyEmitter,
        GradientArborescenceEmitter,
        GradientOperatorEmitter,
    )
    from ribs.schedulers import Scheduler

    ranges = [(-BOUND, BOUND)] * 2
    kw = dict(threshold_min=0, learning_rate=0.01) if algorithm == "cma_mae" else {}
    dtype = dict(dtype=np.float32) if float32 else {}
    archive = GridArchive(solution_dim=DIM, dims=CELLS, ranges=ranges, seed=seed, **kw, **dtype)
    result = GridArchive(solution_dim=DIM, dims=CELLS, ranges=ranges, **dtype) if kw else None
    seeds = np.random.SeedSequence(seed).spawn(EMITTERS)
    guided = algorithm in ("dms", "dds")
    if guided:  # the emitters restart from the result archive (pass_result_archive_to_emitters)
        result = GridArchive(solution_dim=DIM, dims=CELLS, ranges=ranges, seed=seed, **dtype)
        archive = _guide(algorithm, result, seed)
    dqd = algorithm in ("cma_mega", *GRADIENT_OPERATORS)
    if algorithm in GRADIENT_OPERATORS:
        sigma, sigma_g, measure_gradients, normalize_grad = GRADIENT_OPERATORS[algorithm]
        emitters = [
            GradientOperatorEmitter(archive, sigma=sigma, sigma_g=sigma_g, x0=np.zeros(DIM),
                                    measure_gradients=measure_gradients,
                                    normalize_grad=normalize_grad,
                                    batch_size=EMITTERS * BATCH // 2, seed=seeds[0])
        ]  # fmt: skip
    elif algorithm == "cma_mega":
        emitters = [
            GradientArborescenceEmitter(archive, x0=np.zeros(DIM), sigma0=10.0, lr=1.0,
                                        grad_opt="gradient_ascent", selection_rule="mu",
                                        batch_size=BATCH - 1, seed=s)
            for s in seeds
        ]  # fmt: skip
    else:
        rules = (
            dict(ranker="imp", selection_rule="mu", restart_rule="basic")
            if algorithm in ("cma_mae", "dms")
            else dict(ranker="2imp", selection_rule="filter", restart_rule="no_improvement")
        )
        if algorithm == "dds":
            rules = dict(ranker="density", selection_rule="mu", restart_rule="basic")
        emitters = [
            EvolutionStrategyEmitter(result if guided else archive, x0=np.zeros(DIM),
                                     sigma0=1.5 if algorithm == "dds" else 0.5,
                                     batch_size=BATCH, seed=s, es=es, **rules)
            for s in seeds
        ]  # fmt: skip
    scheduler = Scheduler(archive, emitters, result)
    _warm_up(es)  # numba compiles the strategies' helpers on first call: compile apart
    if algorithm == "dms":
        archive.init_discount_model()
    rows = []  # the --out folder's progress: evaluations, qd_score, coverage, max_fitness
    t0 = time.perf_counter()
    for i in range(iterations):
        if dqd:
            x = scheduler.ask_dqd()
            objective, measures, jac = _sphere(x)
            scheduler.tell_dqd(objective, measures, jac)
        x = scheduler.ask()
        objective, measures, _ = _sphere(x)
        scheduler.tell(objective, measures)
        if algorithm == "dms":
            archive.train_discount_model()  # after tell, as pyribs' example
        if out and ((i + 1) % LOG_PERIOD == 0 or i + 1 == iterations):
            st = scheduler.result_archive.stats
            rows.append((EMITTERS * BATCH * (i + 1), st.qd_score, st.coverage, st.obj_max))
    seconds = time.perf_counter() - t0
    stats = scheduler.result_archive.stats
    if out:
        from ribs import __version__ as ribs_version

        data = scheduler.result_archive.data(["index", "objective"])
        fitnesses = np.full(CELLS[0] * CELLS[1], -np.inf)
        fitnesses[data["index"]] = data["objective"]
        _write_peer_run(out, f"pyribs {ribs_version}", algorithm, rows, fitnesses, es)
    return dict(
        side="pyribs", algorithm=algorithm, es=es, iterations=iterations, seconds=seconds,
        qd_score=float(stats.qd_score), coverage=float(stats.coverage),
    )  # fmt: skip


def qdax(algorithm: str, iterations: int, seed: int) -> dict:
    """QDax 0.5's CMA-ME on the same protocol: 15 `CMAImprovementEmitter`s of 36 in a
    `MultiEmitter` (QDax's improvement emitter ranks new cells first, then by improvement)."""
    import functools

    import jax
    import jax.numpy as jnp
    from qdax.core.containers.mapelites_repertoire import compute_euclidean_centroids
    from qdax.core.emitters.cma_improvement_emitter import CMAImprovementEmitter
    from qdax.core.emitters.multi_emitter import MultiEmitter
    from qdax.core.map_elites import MAPElites
    from qdax.utils.metrics import default_qd_metrics

    if algorithm != "cma_me":
        raise SystemExit("QDax 0.5 runs cma_me here (its CMA-MEGA needs gradients by hand)")
    centroids = compute_euclidean_centroids(grid_shape=CELLS, minval=-BOUND, maxval=BOUND)

    def scoring(x, key):
        shift = 0.4 * 5.12
        worst = (-5.12 - shift) ** 2 * DIM
        objective = (jnp.sum((x - shift) ** 2, axis=1) - worst) / (0.0 - worst) * 100
        folded = jnp.where(jnp.abs(x) > 5.12, 5.12 / x, x)
        half = DIM // 2
        measures = jnp.stack([folded[:, :half].sum(1), folded[:, half:].sum(1)], axis=1)
        return objective, measures, {}

    emitter = MultiEmitter(
        tuple(CMAImprovementEmitter(BATCH, DIM, centroids, sigma_g=0.5) for _ in range(EMITTERS))
    )
    algo = MAPElites(scoring, emitter, functools.partial(default_qd_metrics, qd_offset=0.0))
    key = jax.random.key(seed)
    repertoire, state, _ = jax.jit(algo.init)(jnp.zeros((1, DIM)), centroids, key)

    def run(repertoire, state, key):
        (repertoire, state, key), metrics = jax.lax.scan(
            algo.scan_update, (repertoire, state, key), (), length=iterations
        )
        return repertoire, metrics

    t0 = time.perf_counter()
    compiled = jax.jit(run).lower(repertoire, state, key).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    repertoire, metrics = jax.block_until_ready(compiled(repertoire, state, key))
    seconds = time.perf_counter() - t0
    return dict(
        side="qdax", algorithm=algorithm, iterations=iterations, seconds=seconds,
        compile_s=compile_s, qd_score=float(metrics["qd_score"][-1]),
        coverage=float(metrics["coverage"][-1]) / 100,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("algorithm", nargs="?", default="cma_me", choices=list(_NAMES))
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--peer", choices=["ribs", "qdax"], default=None)
    parser.add_argument("--out", help="pyribs' run as a peer run folder for eqx-qd report")
    parser.add_argument("--es", default="cma_es",
                        choices=["cma_es", "sep_cma_es", "lm_ma_es", "openai_es"])  # fmt: skip
    parser.add_argument("--square-roots", default="newton", choices=["newton", "eigh"],
                        help="ours: how CMA-ES refreshes C^1/2 and C^-1/2")  # fmt: skip
    parser.add_argument("--float32", action="store_true",
                        help="pyribs: float32 archives (and so float32 strategies)")  # fmt: skip
    args = parser.parse_args()
    if args.es != "cma_es" and args.algorithm not in ("cma_me", "cma_mae"):
        parser.error("--es is a choice of cma_me and cma_mae")
    if args.out and args.peer != "ribs":
        parser.error("--out writes pyribs' runs (ours: eqx-qd run map-elites --preset cma-me)")
    if args.peer == "ribs":
        run = ribs(args.algorithm, args.iterations, args.seed, args.out, args.es, args.float32)
        print(json.dumps(run))
        return
    if args.peer == "qdax":
        print(json.dumps(qdax(args.algorithm, args.iterations, args.seed)))
        return
    print(json.dumps(ours(args.algorithm, args.iterations, args.seed, args.es, args.square_roots)))


if __name__ == "__main__":
    main()
