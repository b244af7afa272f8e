"""Dominated Novelty Search: ours, pyribs' `DNSArchive` (`--peer ribs`) or QDax's
`DominatedNoveltyRepertoire` (`--peer qdax`, from its repository: not in the 0.5.0 release).

Two workloads, each printing one JSON line:

- `loop`: the whole DNS run. Rastrigin on 100 genes in `[0, 1]` (QDax's definition, fitness
  `-(10 n + sum(y^2 - 10 cos(2 pi y)))`, `y = 10 x - 5`), descriptors the first two genes; a
  population of 1,024 (k = 3), 128 iso-line offspring per iteration (sigma 0.005 / 0.05), an
  initial population of 128 uniform genotypes, 200 iterations. Seconds of the iterations,
  compile apart (ours and QDax).
- `insert`: one `add` of 128 candidates into a full population of `--capacity` (2-D
  descriptors), median of 5 calls after a warm-up: what the k-nearest-fitter search costs.

Usage: python benchmarks/dns.py loop|insert [--capacity 1024] [--seed 0]
       /tmp/ribs_venv/bin/python benchmarks/dns.py loop --peer ribs
       JAX_PLATFORMS=cpu PYTHONPATH=/tmp/qdax_head /tmp/qdax_venv/bin/python benchmarks/dns.py \
           loop --peer qdax        (/tmp/qdax_head: `git archive HEAD qdax` of QDax's repository)
"""

import argparse
import json
import statistics
import time

import numpy as np


DIM, CAPACITY, BATCH, K, ITERATIONS = 100, 1024, 128, 3, 200
ISO, LINE = 0.005, 0.05


def _rastrigin_np(x):
    y = 10.0 * x - 5.0
    f = -(10.0 * x.shape[-1] + np.sum(y**2 - 10.0 * np.cos(2.0 * np.pi * y), axis=-1))
    return f, np.clip(x[:, :2], 0.0, 1.0)


def _median_call(call, repeats=5):
    call()  # warm-up (compiles ours and QDax's)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def ours(workload: str, capacity: int, seed: int) -> dict:
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    import eqx_qd as q

    key = jr.key(seed)
    if workload == "insert":
        k1, k2, k3, k4 = jr.split(key, 4)
        rep = q.DNSRepertoire.empty(capacity, jnp.zeros(DIM), 2, k=K)
        rep, _ = eqx.filter_jit(lambda r, g, d, f: r.add(g, d, f))(
            rep,
            jnp.zeros((capacity, DIM)),
            jr.uniform(k1, (capacity, 2)),
            jr.normal(k2, (capacity,)),
        )
        add = eqx.filter_jit(lambda r, g, d, f: r.add(g, d, f)[0].fitnesses)
        args = (rep, jnp.zeros((BATCH, DIM)), jr.uniform(k3, (BATCH, 2)), jr.normal(k4, (BATCH,)))
        seconds = _median_call(lambda: jax.block_until_ready(add(*args)))
        return {"peer": "eqx_qd", "workload": "insert", "capacity": capacity, "seconds": seconds}
    task = q.Rastrigin(DIM)
    emitter = q.MixingEmitter(BATCH, 1.0, variation=q.IsoLineVariation(ISO, LINE, 0.0, 1.0))
    algo = q.MAPElites(emitter, task)
    init_key, run_key = jr.split(key)
    genotypes = jr.uniform(init_key, (BATCH, DIM))
    empty = q.DNSRepertoire.empty(CAPACITY, genotypes[0], 2, k=K)
    state, _ = algo.init(genotypes, empty, key=init_key)
    t0 = time.perf_counter()
    compiled = q.run.lower(algo, state, ITERATIONS, key=run_key).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state, metrics = compiled(algo, state, ITERATIONS, key=run_key)
    jax.block_until_ready(metrics)
    seconds = time.perf_counter() - t0
    fit = np.asarray(state.repertoire.fitnesses)
    return {
        "peer": "eqx_qd", "workload": "loop", "seconds": seconds, "compile_s": compile_s,
        "mean_fitness": float(np.mean(fit[np.isfinite(fit)])), "max_fitness": float(fit.max()),
    }  # fmt: skip


def ribs(workload: str, capacity: int, seed: int) -> dict:
    from ribs.archives import DNSArchive
    from ribs.emitters import IsoLineEmitter
    from ribs.schedulers import Scheduler

    rng = np.random.default_rng(seed)
    if workload == "insert":
        archive = DNSArchive(
            solution_dim=DIM, measure_dim=2, capacity=capacity, k_neighbors=K, dtype=np.float32
        )
        archive.add(
            np.zeros((capacity, DIM)), rng.normal(size=capacity), rng.uniform(size=(capacity, 2))
        )
        batch = (np.zeros((BATCH, DIM)), rng.normal(size=BATCH), rng.uniform(size=(BATCH, 2)))
        full = archive.data()

        def call():  # the same full population every time
            archive.clear()
            archive.add(full["solution"], full["objective"], full["measures"])
            t0 = time.perf_counter()
            archive.add(*batch)
            return time.perf_counter() - t0

        call()
        seconds = statistics.median(call() for _ in range(5))
        return {"peer": "pyribs", "workload": "insert", "capacity": capacity, "seconds": seconds}
    archive = DNSArchive(
        solution_dim=DIM, measure_dim=2, capacity=CAPACITY, k_neighbors=K, dtype=np.float32
    )
    x = rng.uniform(size=(BATCH, DIM)).astype(np.float32)
    f, d = _rastrigin_np(x)
    archive.add(x, f, d)
    emitter = IsoLineEmitter(
        archive, iso_sigma=ISO, line_sigma=LINE, x0=np.full(DIM, 0.5), batch_size=BATCH,
        bounds=[(0.0, 1.0)] * DIM, seed=seed,
    )  # fmt: skip
    scheduler = Scheduler(archive, [emitter])
    t0 = time.perf_counter()
    for _ in range(ITERATIONS):
        x = scheduler.ask()
        f, d = _rastrigin_np(x)
        scheduler.tell(f, d)
    seconds = time.perf_counter() - t0
    fit = archive.data("objective")
    return {
        "peer": "pyribs", "workload": "loop", "seconds": seconds,
        "mean_fitness": float(np.mean(fit)), "max_fitness": float(np.max(fit)),
    }  # fmt: skip


def qdax(workload: str, capacity: int, seed: int) -> dict:
    import functools

    import jax
    import jax.numpy as jnp
    from qdax.core.containers.dns_repertoire import DominatedNoveltyRepertoire
    from qdax.core.dns import DominatedNoveltySearch
    from qdax.core.emitters.mutation_operators import isoline_variation
    from qdax.core.emitters.standard_emitters import MixingEmitter

    key = jax.random.key(seed)
    if workload == "insert":
        k1, k2, k3, k4 = jax.random.split(key, 4)
        rep = DominatedNoveltyRepertoire.init(
            jnp.zeros((capacity, DIM)), jax.random.normal(k2, (capacity,)),
            jax.random.uniform(k1, (capacity, 2)), capacity, K,
        )  # fmt: skip
        args = (
            jnp.zeros((BATCH, DIM)),
            jax.random.uniform(k3, (BATCH, 2)),
            jax.random.normal(k4, (BATCH,)),
        )
        seconds = _median_call(lambda: jax.block_until_ready(rep.add(*args).fitnesses))
        return {"peer": "qdax", "workload": "insert", "capacity": capacity, "seconds": seconds}

    def scoring(x, key):
        y = 10.0 * x - 5.0
        f = -(10.0 * DIM + jnp.sum(y**2 - 10.0 * jnp.cos(2.0 * jnp.pi * y), axis=-1))
        return f, jnp.clip(x[:, :2], 0.0, 1.0), {}

    variation = functools.partial(
        isoline_variation, iso_sigma=ISO, line_sigma=LINE, minval=0.0, maxval=1.0
    )
    emitter = MixingEmitter(
        mutation_fn=None, variation_fn=variation, variation_percentage=1.0, batch_size=BATCH
    )
    dns = DominatedNoveltySearch(scoring, emitter, lambda r: {}, CAPACITY, K)
    init_key, run_key = jax.random.split(key)
    genotypes = jax.random.uniform(init_key, (BATCH, DIM))
    repertoire, emitter_state, init_metrics = dns.init(genotypes, init_key)

    @jax.jit
    def run(repertoire, emitter_state, key):
        def body(carry, k):
            r, e = carry
            r, e, _ = dns.update(r, e, k)
            return (r, e), None

        (r, e), _ = jax.lax.scan(
            body, (repertoire, emitter_state), jax.random.split(key, ITERATIONS)
        )
        return r

    t0 = time.perf_counter()
    compiled = run.lower(repertoire, emitter_state, run_key).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    repertoire = jax.block_until_ready(compiled(repertoire, emitter_state, run_key))
    seconds = time.perf_counter() - t0
    fit = np.asarray(repertoire.fitnesses).ravel()
    return {
        "peer": "qdax", "workload": "loop", "seconds": seconds, "compile_s": compile_s,
        "mean_fitness": float(np.mean(fit[np.isfinite(fit)])), "max_fitness": float(fit.max()),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=["loop", "insert"])
    parser.add_argument("--capacity", type=int, default=CAPACITY)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--peer", choices=["ribs", "qdax"], default=None)
    args = parser.parse_args()
    run = {None: ours, "ribs": ribs, "qdax": qdax}[args.peer]
    print(json.dumps(run(args.workload, args.capacity, args.seed)))


if __name__ == "__main__":
    main()
