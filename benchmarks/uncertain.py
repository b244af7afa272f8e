"""Sampling estimators, spreads and corrected metrics: ours against QDax 0.5's functions on the
same inputs and the same keys.

QDax's side (`--peer qdax`, run with QDax's interpreter) scores fixed genotypes on its noisy
arm (`noisy_arm_scoring_function`, fitness and descriptor noise 0.1, gene noise 0.05): 16
samples each through `multi_sample_scoring_function`, every extractor of `utils/sampling.py`
on them, a repertoire over 64 fixed centroids, and `reevaluation_reproducibility_function`
with 32 reevaluations; it writes inputs and outputs to an `.npz`. Ours (`--check FILE`) runs
`internal.sample_scores`, `internal.estimate`, `internal.spread`, `q.reevaluated` and
`q.corrected_metrics` with the same keys and prints the largest differences.

The keys are shared: QDax 0.5 runs on JAX 0.4.28, whose threefry draws are those of newer
JAX with `jax_threefry_partitionable` off, which our side sets. QDax's reproducibility
function splits its key once before sampling; ours is given that split key.

`--speed` times MAP-Elites-sampling on each side instead (`SPEED`), `--speed --mels` ME-LS
(QDax's `MELS` and `MELSRepertoire`; ours `LowSpreadRepertoire`) at the same sizes.

Usage: JAX_PLATFORMS=cpu /tmp/qdax_venv/bin/python benchmarks/uncertain.py --peer qdax --out F
       python benchmarks/uncertain.py --check F.npz
       [JAX_PLATFORMS=cpu /tmp/qdax_venv/bin/python] benchmarks/uncertain.py --speed [--peer qdax]
"""

import argparse
import json
import os
import time

import numpy as np


NUM, DIM, SAMPLES, REEVALS, CELLS = 256, 8, 16, 32, 64
NOISE = dict(fitness=0.1, descriptor=0.1, genotype=0.05)  # QDax's noisy_arm test settings
EXTRACTORS = ("average", "median", "mode", "closest")  # ours: mean, median, mode, closest
SPREAD_NAMES = ("std", "mad", "iqr")


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    genotypes = rng.uniform(size=(NUM, DIM)).astype(np.float32)
    centroids = rng.uniform(size=(CELLS, 2)).astype(np.float32)
    return genotypes, centroids


def _mean_distance(samples: np.ndarray, picks: np.ndarray) -> np.ndarray:
    """Per row, the mean Euclidean distance from its pick to its samples (float64)."""
    x = samples.reshape(len(samples), samples.shape[1], -1).astype(np.float64)
    p = picks.reshape(len(samples), 1, -1).astype(np.float64)
    return np.mean(np.linalg.norm(x - p, axis=-1), axis=1)


def qdax(out: str) -> None:
    import functools

    import jax
    import jax.numpy as jnp
    from qdax.core.containers.mapelites_repertoire import MapElitesRepertoire
    from qdax.tasks.arm import noisy_arm_scoring_function
    from qdax.utils import sampling
    from qdax.utils.uncertainty_metrics import reevaluation_reproducibility_function

    genotypes, centroids = _inputs()
    scoring = functools.partial(
        noisy_arm_scoring_function, fit_variance=NOISE["fitness"],
        desc_variance=NOISE["descriptor"], params_variance=NOISE["genotype"],
    )  # fmt: skip
    g = jnp.asarray(genotypes)
    all_f, all_d, _ = sampling.multi_sample_scoring_function(g, jax.random.key(1), scoring, SAMPLES)
    saved = dict(genotypes=genotypes, centroids=centroids, all_f=all_f, all_d=all_d)
    for name in EXTRACTORS:
        saved[f"est_f_{name}"] = getattr(sampling, name)(all_f)
        saved[f"est_d_{name}"] = getattr(sampling, name)(all_d)
    for name in SPREAD_NAMES:
        saved[f"spread_f_{name}"] = getattr(sampling, name)(all_f)
        saved[f"spread_d_{name}"] = getattr(sampling, name)(all_d)
    f, d, _ = scoring(g, jax.random.key(2))
    repertoire = MapElitesRepertoire.init(g, f, d, jnp.asarray(centroids))
    empty = MapElitesRepertoire.init(g, jnp.full_like(f, -jnp.inf), d, jnp.asarray(centroids))
    corrected, fit_rep, desc_rep = reevaluation_reproducibility_function(
        repertoire, jax.random.key(3), empty, scoring, REEVALS
    )
    filled = repertoire.fitnesses > -jnp.inf
    saved.update(
        rep_genotypes=repertoire.genotypes, rep_fitnesses=repertoire.fitnesses,
        rep_descriptors=repertoire.descriptors, corrected_fitnesses=corrected.fitnesses,
        fit_reproducibility=fit_rep.fitnesses, desc_reproducibility=desc_rep.fitnesses,
        corrected_qd_score=jnp.sum(jnp.where(corrected.fitnesses > -jnp.inf,
                                             corrected.fitnesses + 1.0, 0.0)),
        mean_fit_reproducibility=jnp.mean(fit_rep.fitnesses, where=filled),
        mean_desc_reproducibility=jnp.mean(desc_rep.fitnesses, where=filled),
    )  # fmt: skip
    np.savez(out, **{k: np.asarray(v) for k, v in saved.items()})
    print(json.dumps({"side": "qdax", "out": out}))


def check(path: str) -> dict:
    import jax

    jax.config.update("jax_threefry_partitionable", False)  # JAX 0.4.28's draws
    import jax.numpy as jnp
    import jax.random as jr

    import eqx_qd as q
    from eqx_qd import internal

    ref = dict(np.load(path))
    task = q.Noisy(q.Arm(DIM), NOISE["fitness"], NOISE["descriptor"], NOISE["genotype"])
    s = internal.sample_scores(task, jnp.asarray(ref["genotypes"]), SAMPLES, key=jr.key(1))
    gaps = {
        "samples_fitness": np.max(np.abs(np.asarray(s.fitnesses) - ref["all_f"])),
        "samples_descriptor": np.max(np.abs(np.asarray(s.descriptors) - ref["all_d"])),
    }
    ours = {"average": "mean"}
    for name in EXTRACTORS:
        for which, x in (("f", ref["all_f"]), ("d", ref["all_d"])):
            got = np.asarray(internal.estimate(jnp.asarray(x), ours.get(name, name)))
            want = ref[f"est_{which}_{name}"]
            if name == "closest":
                # Ties are real: with an even number of scalar samples the two middle ones are
                # equally close on average, and each side picks by its rounding. Compared: the
                # mean distance of the pick to the row's samples (float64), and the picks.
                gaps[f"closest_{which}_picks_differ"] = int(np.sum(np.any(
                    np.abs(got - want).reshape(len(x), -1) > 1e-6, axis=1)))  # fmt: skip
                got, want = _mean_distance(x, got), _mean_distance(x, want)
            gaps[f"{name}_{which}"] = np.max(np.abs(got - want))
    for name in SPREAD_NAMES:
        for which, x in (("f", ref["all_f"]), ("d", ref["all_d"])):
            got = np.asarray(internal.spread(jnp.asarray(x), name))
            gaps[f"{name}_{which}"] = np.max(np.abs(got - ref[f"spread_{which}_{name}"]))
    repertoire = q.MAPElitesRepertoire(
        genotypes=jnp.asarray(ref["rep_genotypes"]),
        fitnesses=jnp.asarray(ref["rep_fitnesses"][:, 0]),
        descriptors=jnp.asarray(ref["rep_descriptors"]),
        tessellation=q.CVTTessellation(ref["centroids"]),
    )
    _, sampling_key = jr.split(jr.key(3))  # QDax's reproducibility function splits once
    again = q.reevaluated(repertoire, task, REEVALS, key=sampling_key)
    m = q.corrected_metrics(again, 1.0)
    want = ref["corrected_fitnesses"][:, 0]
    got = np.asarray(again.repertoire.fitnesses)
    assert np.array_equal(np.isfinite(got), np.isfinite(want)), "the filled cells differ"
    finite = np.isfinite(want)
    gaps["corrected_fitnesses"] = np.max(np.abs(got[finite] - want[finite]))
    gaps["corrected_qd_score"] = abs(float(m.qd_score) - float(ref["corrected_qd_score"]))
    gaps["fitness_reproducibility"] = abs(
        float(m.fitness_reproducibility) - float(ref["mean_fit_reproducibility"])
    )
    gaps["descriptor_reproducibility"] = abs(
        float(m.descriptor_reproducibility) - float(ref["mean_desc_reproducibility"])
    )
    out = {k: float(v) for k, v in gaps.items()}
    out["corrected_qd_score"] = float(m.qd_score)
    out["qdax_corrected_qd_score"] = float(ref["corrected_qd_score"])
    out["largest_gap"] = float(max(v for k, v in gaps.items() if not k.endswith("differ")))
    return out


SPEED = dict(dim=100, candidates=128, samples=8, iterations=200)
"""`--speed`: MAP-Elites-sampling on the 100-joint noisy arm, 128 candidates x 8 samples (1,024
scorings) per iteration over QDax's CVT of 1,024 cells, iso+line-DD (0.005, 0.05), 200
iterations in one compiled loop, compile apart, medians of `--rounds`."""
SHARED_BENCH = os.environ.get(
    "EQX_QD_SHARED_BENCH",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "bench"),
)
CENTROIDS = os.path.join(SHARED_BENCH, "qdax", "centroids_cvt1024_2d.npy")


def _timed(run, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return times


def speed_qdax(rounds: int, mels: bool = False) -> dict:
    import functools

    import jax
    import jax.numpy as jnp
    from qdax.core.emitters.mutation_operators import isoline_variation
    from qdax.core.emitters.standard_emitters import MixingEmitter
    from qdax.core.map_elites import MAPElites
    from qdax.tasks.arm import noisy_arm_scoring_function
    from qdax.utils.metrics import default_qd_metrics
    from qdax.utils.sampling import sampling

    noisy = functools.partial(
        noisy_arm_scoring_function, fit_variance=NOISE["fitness"],
        desc_variance=NOISE["descriptor"], params_variance=NOISE["genotype"],
    )  # fmt: skip
    scoring = functools.partial(sampling, scoring_fn=noisy, num_samples=SPEED["samples"])
    emitter = MixingEmitter(
        mutation_fn=None, variation_percentage=1.0, batch_size=SPEED["candidates"],
        variation_fn=functools.partial(isoline_variation, iso_sigma=0.005, line_sigma=0.05),
    )  # fmt: skip
    metrics = functools.partial(default_qd_metrics, qd_offset=1.0)
    algo = MAPElites(scoring, emitter, metrics)
    if mels:  # ME-LS: its algorithm samples the noisy arm itself
        from qdax.core.mels import MELS

        algo = MELS(noisy, emitter, metrics, SPEED["samples"])
    genotypes = jax.random.uniform(jax.random.key(0), (SPEED["candidates"], SPEED["dim"]))
    centroids = jnp.asarray(np.load(CENTROIDS))
    repertoire, emitter_state, _ = jax.jit(algo.init)(genotypes, centroids, jax.random.key(1))

    def loop(repertoire, emitter_state, key):
        (repertoire, _, _), metrics = jax.lax.scan(
            algo.scan_update, (repertoire, emitter_state, key), (), length=SPEED["iterations"]
        )
        return repertoire.fitnesses, metrics["qd_score"]

    t0 = time.perf_counter()
    compiled = jax.jit(loop).lower(repertoire, emitter_state, jax.random.key(2)).compile()
    compile_s = time.perf_counter() - t0
    out = {}
    times = _timed(
        lambda: out.update(r=jax.block_until_ready(
            compiled(repertoire, emitter_state, jax.random.key(2)))), rounds,
    )  # fmt: skip
    return dict(side="qdax", mels=mels, seconds=float(np.median(times)), rounds=times,
                compile_s=compile_s, qd_score=float(out["r"][1][-1]))  # fmt: skip


def speed_ours(rounds: int, mels: bool = False) -> dict:
    import jax
    import jax.random as jr

    import eqx_qd as q

    noisy = q.Noisy(q.Arm(SPEED["dim"]), NOISE["fitness"], NOISE["descriptor"], NOISE["genotype"])
    task = q.Sampled(noisy, SPEED["samples"])
    emitter = q.MixingEmitter(
        SPEED["candidates"],
        1.0,
        variation=q.IsoLineVariation(0.005, 0.05),  # unclipped, as QDax
    )
    algo = q.MAPElites(emitter, task)
    cells = q.CVTTessellation(np.load(CENTROIDS))
    genotypes = jr.uniform(jr.key(0), (SPEED["candidates"], SPEED["dim"]))
    archive = q.LowSpreadRepertoire.empty(cells, genotypes[0]) if mels else cells
    state, _ = algo.init(genotypes, archive, key=jr.key(1))
    key = jr.key(2)
    t0 = time.perf_counter()
    compiled = q.run.lower(algo, state, SPEED["iterations"], key=key).compile()
    compile_s = time.perf_counter() - t0
    out = {}
    times = _timed(
        lambda: out.update(r=jax.block_until_ready(compiled(algo, state, SPEED["iterations"],
                                                            key=key))), rounds,
    )  # fmt: skip
    return dict(side="eqx_qd", mels=mels, seconds=float(np.median(times)), rounds=times,
                compile_s=compile_s, qd_score=float(out["r"][1].qd_score[-1]))  # fmt: skip


MELS_RUN = dict(dim=8, candidates=128, samples=5, reevaluations=32, log_every=50)
"""`--mels`: ME-LS on the 8-joint noisy arm (QDax's noise), 128 candidates x 5 samples (the
ME-LS example's count) per iteration over QDax's CVT of 1,024 cells, iso+line-DD (0.005,
0.05), the corrected figures (32 reevaluations, median) every 50 iterations. Ours is the
MAP-Elites job (`mels_seeds.sh`); this is QDax's side, written as a peer run folder."""


def mels_qdax(seed: int, iterations: int, out: str) -> dict:
    import csv
    import functools

    import jax
    import jax.numpy as jnp
    from qdax.core.containers.mapelites_repertoire import MapElitesRepertoire
    from qdax.core.emitters.mutation_operators import isoline_variation
    from qdax.core.emitters.standard_emitters import MixingEmitter
    from qdax.core.mels import MELS
    from qdax.tasks.arm import noisy_arm_scoring_function
    from qdax.utils.metrics import default_qd_metrics
    from qdax.utils.uncertainty_metrics import reevaluation_function

    noisy = functools.partial(
        noisy_arm_scoring_function, fit_variance=NOISE["fitness"],
        desc_variance=NOISE["descriptor"], params_variance=NOISE["genotype"],
    )  # fmt: skip
    emitter = MixingEmitter(
        mutation_fn=None, variation_percentage=1.0, batch_size=MELS_RUN["candidates"],
        variation_fn=functools.partial(isoline_variation, iso_sigma=0.005, line_sigma=0.05),
    )  # fmt: skip
    metrics = functools.partial(default_qd_metrics, qd_offset=1.0)
    algo = MELS(noisy, emitter, metrics, MELS_RUN["samples"])
    centroids = jnp.asarray(np.load(CENTROIDS))
    key = jax.random.key(seed)
    key, k_genes, k_init = jax.random.split(key, 3)
    genotypes = jax.random.uniform(k_genes, (MELS_RUN["candidates"], MELS_RUN["dim"]))
    repertoire, emitter_state, _ = algo.init(genotypes, centroids, k_init)

    @jax.jit
    def chunk(repertoire, emitter_state, key):
        (repertoire, emitter_state, key), _ = jax.lax.scan(
            algo.scan_update, (repertoire, emitter_state, key), (), length=MELS_RUN["log_every"]
        )
        return repertoire, emitter_state, key

    @jax.jit
    def corrected(repertoire, key):
        plain = MapElitesRepertoire(
            genotypes=repertoire.genotypes, fitnesses=repertoire.fitnesses,
            descriptors=repertoire.descriptors, centroids=repertoire.centroids,
            extra_scores=repertoire.extra_scores, keys_extra_scores=repertoire.keys_extra_scores,
        )  # fmt: skip
        empty = MapElitesRepertoire.init(
            genotypes=plain.genotypes, fitnesses=jnp.full_like(plain.fitnesses, -jnp.inf),
            descriptors=plain.descriptors, centroids=centroids,
        )  # fmt: skip
        again = reevaluation_function(plain, key, empty, noisy, MELS_RUN["reevaluations"])
        return default_qd_metrics(again, 1.0)

    per_iteration = MELS_RUN["candidates"] * MELS_RUN["samples"]
    rows = []

    def log(step, repertoire, key):
        m, c = metrics(repertoire), corrected(repertoire, jax.random.fold_in(key, step))
        rows.append([per_iteration * (step + 1), float(m["qd_score"]),
                     float(m["coverage"]) / 100, float(m["max_fitness"]),
                     float(c["qd_score"]), float(c["coverage"]) / 100,
                     float(c["max_fitness"])])  # fmt: skip

    log(0, repertoire, key)
    for step in range(MELS_RUN["log_every"], iterations + 1, MELS_RUN["log_every"]):
        repertoire, emitter_state, key = chunk(repertoire, emitter_state, key)
        log(step, repertoire, key)
    os.makedirs(out, exist_ok=True)
    about = {"library": "QDax 0.5.0", "algorithm": f"ME-LS, {MELS_RUN['samples']} samples",
             "task": "noisy_arm"}  # fmt: skip
    with open(os.path.join(out, "peer.json"), "w") as f:
        json.dump(about, f)
    with open(os.path.join(out, "progress.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["evaluations", "qd_score", "coverage", "max_fitness",
                         "corrected_qd_score", "corrected_coverage",
                         "corrected_max_fitness"])  # fmt: skip
        writer.writerows(rows)
    np.save(os.path.join(out, "fitnesses.npy"), np.asarray(repertoire.fitnesses, np.float64))
    return dict(side="qdax", seed=seed, qd_score=rows[-1][1], corrected_qd_score=rows[-1][4])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", choices=["qdax"], default=None)
    parser.add_argument("--out", help="QDax's side: the .npz to write")
    parser.add_argument("--check", help="ours: the .npz QDax's side wrote")
    parser.add_argument("--speed", action="store_true", help="time MAP-Elites-sampling")
    parser.add_argument("--rounds", type=int, default=1, help="--speed: timed runs (median)")
    parser.add_argument("--mels", action="store_true", help="QDax's ME-LS run (--out FOLDER)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--iterations", type=int, default=1000)
    args = parser.parse_args()
    if args.mels and not args.speed:
        if args.peer != "qdax" or not args.out:
            parser.error("--mels is QDax's side: give --peer qdax --out FOLDER (ours: the job)")
        print(json.dumps(mels_qdax(args.seed, args.iterations, args.out)))
        return
    if args.speed:
        run = speed_qdax if args.peer == "qdax" else speed_ours
        print(json.dumps(run(args.rounds, args.mels)))
        return
    if args.peer == "qdax":
        if not args.out:
            parser.error("--peer qdax writes its figures: give --out FILE.npz")
        qdax(args.out)
        return
    if not args.check:
        parser.error("give --check FILE.npz (written by --peer qdax)")
    print(json.dumps(check(args.check), indent=1))


if __name__ == "__main__":
    main()
