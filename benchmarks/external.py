"""Evaluators outside JAX: what the driver adds to a batch, and the throughput of the pools.

Three measurements, medians over `--rounds` (compile and the pools' start apart):

1. **ask + tell** of one batch of 1,024 candidates of 100 genes (iso+line-DD, a 32 x 32 grid),
   the scores given: the time the JAX side adds to each batch, with the transfer of the
   genotypes to NumPy. Beside it pyribs 0.12's `Scheduler.ask` / `tell` on the same sizes
   (`GridArchive`, `IsoLineEmitter`, float32), in its own interpreter (`--ribs-python`).
2. **A no-op evaluator, batch 1,024**: the pools' own cost per batch (this process, two local
   processes, a Dask `LocalCluster` of two), and, on the same cluster, the per-candidate
   `client.map` + `gather` of pyribs' Dask examples.
3. **A 10 ms evaluator, 2 workers**: whole iterations (ask, evaluate, tell) of 200 candidates,
   in evaluations per second against the ideal 2 x 100.

Usage: python benchmarks/external.py [--rounds 3] [--ribs-python /tmp/ribs_venv/bin/python]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

from eqx_qd._compile import jit


def noop(genotype):
    """No work: the pools' own cost."""
    return 0.0, [float(genotype[0]) % 1.0, float(genotype[1]) % 1.0]


def ten_ms(genotype):
    """10 ms of a simulator (a sleep), then `noop`."""
    time.sleep(0.01)
    return noop(genotype)


def uneven(genotype):
    """2 to 38 ms (20 on average), by the genotype: evaluations of unequal cost."""
    time.sleep(0.002 + 0.036 * (abs(float(genotype[2])) % 1.0))
    return noop(genotype)


RIBS = r"""
import json, statistics, sys, time
import numpy as np
from ribs.archives import GridArchive
from ribs.emitters import IsoLineEmitter
from ribs.schedulers import Scheduler

rounds = int(sys.argv[1])
archive = GridArchive(solution_dim=100, dims=(32, 32), ranges=[(0, 1), (0, 1)], dtype=np.float32)
emitter = IsoLineEmitter(archive, x0=np.full(100, 0.5, np.float32), iso_sigma=0.005,
                         line_sigma=0.05, batch_size=1024)
scheduler = Scheduler(archive, [emitter])
rng = np.random.default_rng(0)
times = []
for r in range(rounds + 1):
    t = []
    for _ in range(20):
        start = time.perf_counter()
        x = scheduler.ask()
        scheduler.tell(-np.sum(x**2, axis=1), rng.uniform(size=(1024, 2)))
        t.append(time.perf_counter() - start)
    if r:  # the first round warms up
        times.append(statistics.median(t))
print(json.dumps(times))
"""


def ask_tell_ours(rounds: int) -> list[float]:
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    import eqx_qd as q
    from eqx_qd import external

    task = external.ExternalTask(noop, 100, 2)
    emitter = q.MixingEmitter(1024, 0.5, q.GaussianMutation(0.05), q.IsoLineVariation(0.005, 0.05))
    algo = q.MAPElites(emitter, task)
    cells = q.GridTessellation((32, 32), 0.0, 1.0)
    genotypes = task.init_genotypes(1024, key=jr.key(0))
    rng = np.random.default_rng(0)
    scores = lambda x: (
        jnp.asarray(-np.sum(x**2, axis=1)),
        jnp.asarray(rng.uniform(size=(1024, 2)), jnp.float32),
    )
    f, d = scores(np.asarray(genotypes))
    state, _ = eqx.filter_jit(algo.init_scored)(genotypes, d, f, cells, key=jr.key(1))
    ask, tell = jit(algo.ask), jit(algo.tell)  # as the external job compiles them
    keys = iter(jr.split(jr.key(2), 10_000))
    times = []
    for r in range(rounds + 1):
        t = []
        for _ in range(20):
            start = time.perf_counter()
            candidates, asked = ask(state, key=next(keys))
            x = np.asarray(candidates)  # to the evaluator
            f, d = scores(x)
            state, metrics, _ = tell(state, asked, candidates, d, f)
            jax.block_until_ready(metrics)
            t.append(time.perf_counter() - start)
        if r:
            times.append(statistics.median(t))
    return times


def pool_seconds(pool, evaluator, rows, repeats: int) -> float:
    pool.evaluate(evaluator, rows[:4], 2)  # the workers start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        ev = pool.evaluate(evaluator, rows, 2)
        times.append(time.perf_counter() - start)
        assert ev.failed == 0, ev.errors[:3]
    return statistics.median(times)


def client_map_seconds(client, evaluator, rows, repeats: int) -> float:
    """pyribs' Dask examples: one task per candidate, `client.map` then `client.gather`."""
    client.gather(client.map(evaluator, list(rows[:4]), pure=False))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        client.gather(client.map(evaluator, list(rows), pure=False))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def loop_rate(
    pool, evaluator, iterations: int, *, overlap: bool = False, batch: int = 200
) -> float:
    """Evaluations per second of whole iterations (ask, evaluate, tell) of `batch`
    candidates; with `overlap`, each batch asked before the previous one is told (the job's
    `--overlap`)."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    import eqx_qd as q
    from eqx_qd import external

    task = external.ExternalTask(evaluator, 100, 2)
    emitter = q.MixingEmitter(batch, 0.5, q.GaussianMutation(0.05), q.IsoLineVariation(0.005, 0.05))
    algo = q.MAPElites(emitter, task)
    genotypes = task.init_genotypes(batch, key=jr.key(0))
    first = pool.evaluate(evaluator, genotypes, 2)
    state, _ = eqx.filter_jit(algo.init_scored)(
        genotypes, jnp.asarray(first.descriptors), jnp.asarray(first.fitnesses),
        q.GridTessellation((32, 32), 0.0, 1.0), key=jr.key(1),
    )  # fmt: skip
    ask, tell = jit(algo.ask), jit(algo.tell)  # as the external job compiles them
    keys = jr.split(jr.key(2), iterations + 2)
    told = lambda s, a, c, ev: tell(s, a, c, jnp.asarray(ev.descriptors), jnp.asarray(ev.fitnesses))
    candidates, asked = ask(state, key=keys[0])  # compile apart
    jax.block_until_ready(told(state, asked, candidates, first))
    start = time.perf_counter()
    if overlap:
        candidates, asked = ask(state, key=keys[0])
        running = pool.submit(evaluator, candidates, 2)
        for i in range(iterations):
            following, following_asked = ask(state, key=keys[i + 1])
            queued = pool.submit(evaluator, following, 2) if i + 1 < iterations else None
            state, metrics, _ = told(state, asked, candidates, running.result())
            candidates, asked, running = following, following_asked, queued
    else:
        for key in keys[:iterations]:
            candidates, asked = ask(state, key=key)
            state, metrics, _ = told(
                state, asked, candidates, pool.evaluate(evaluator, candidates, 2)
            )
    jax.block_until_ready(metrics)
    return batch * iterations / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ribs-python", default="/tmp/ribs_venv/bin/python")
    args = parser.parse_args()
    from eqx_qd import external

    model = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next(
        (ln.split(":", 1)[1].strip() for ln in model.splitlines() if "Model name" in ln), "?"
    )
    print(f"CPU: {model}, {os.cpu_count()} cores; rounds: {args.rounds}\n")

    ours = statistics.median(ask_tell_ours(args.rounds))
    ribs = None
    if os.path.exists(args.ribs_python):
        done = subprocess.run(
            [args.ribs_python, "-c", RIBS, str(args.rounds)], capture_output=True, text=True
        )
        ribs = statistics.median(json.loads(done.stdout)) if done.returncode == 0 else None
        if ribs is None:
            print(done.stderr[-2000:], file=sys.stderr)
    print("| ask + tell, batch 1,024 x 100 genes, grid 32 x 32 | eqx_qd | pyribs 0.12 | ratio |")
    print("| --- | --- | --- | --- |")
    ratio = f"{ribs / ours:.2f}x faster" if ribs else "-"
    print(
        f"| ms per batch (median of {args.rounds} rounds x 20) | {1e3 * ours:.2f} | "
        f"{'-' if ribs is None else f'{1e3 * ribs:.2f}'} | {ratio} |\n"
    )

    rows = np.random.default_rng(0).uniform(size=(1024, 100)).astype(np.float32)
    print("| no-op evaluator, batch 1,024 | seconds per batch | per candidate |")
    print("| --- | --- | --- |")
    with external.SequentialPool() as pool:
        s = pool_seconds(pool, noop, rows, 2 * args.rounds + 1)
    print(f"| this process (`SequentialPool`) | {s:.4f} | {1e6 * s / 1024:.0f} us |")
    with external.ProcessPool(2) as pool:
        s = pool_seconds(pool, noop, rows, 2 * args.rounds + 1)
        rate_processes = loop_rate(pool, ten_ms, 5)
        rates = {
            (name, batch, overlap): statistics.median(
                loop_rate(pool, f, 5 if batch > 8 else 100, overlap=overlap, batch=batch)
                for _ in range(args.rounds)
            )
            for name, f in (("10 ms", ten_ms), ("2-38 ms", uneven))
            for batch in (200, 8)
            for overlap in (False, True)
        }
    print(f"| 2 local processes (`ProcessPool`) | {s:.4f} | {1e6 * s / 1024:.0f} us |")
    with external.DaskPool(workers=2) as pool:
        s = pool_seconds(pool, noop, rows, 2 * args.rounds + 1)
        m = client_map_seconds(pool.client, noop, rows, 2 * args.rounds + 1)
        rate_dask = loop_rate(pool, ten_ms, 5)
        m10 = client_map_seconds(pool.client, ten_ms, rows[:200], 3)
    print(f"| Dask `LocalCluster` of 2 (`DaskPool`, chunks) | {s:.4f} | {1e6 * s / 1024:.0f} us |")
    per = f"{1e6 * m / 1024:.0f} us"
    print(
        "| same cluster, `client.map` + `gather` per candidate (pyribs' examples) | "
        f"{m:.4f} | {per} |\n"
    )

    print("| 10 ms evaluator, 2 workers, batch 200 | evaluations / s | of the ideal 200 |")
    print("| --- | --- | --- |")
    print(
        f"| `ProcessPool(2)`, whole iterations | {rate_processes:.0f} | {rate_processes / 2:.0f}% |"
    )
    print(f"| `DaskPool(workers=2)`, whole iterations | {rate_dask:.0f} | {rate_dask / 2:.0f}% |")
    print(
        "| same cluster, `client.map` + `gather` (evaluation only) | "
        f"{200 / m10:.0f} | {100 / m10:.0f}% |"
    )

    print("\n| `ProcessPool(2)`, whole iterations | evaluations / s | overlap | gain |")
    print("| --- | --- | --- | --- |")
    for name, ideal in (("10 ms", 200.0), ("2-38 ms", 100.0)):
        for batch in (200, 8):
            plain, ahead = rates[(name, batch, False)], rates[(name, batch, True)]
            print(f"| {name} evaluator (ideal {ideal:.0f}), batch {batch} | {plain:.0f} | "
                  f"{ahead:.0f} | {ahead / plain:.3f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
