"""The sliding-boundaries archive's insertions: ours (`SlidingBoundariesRepertoire`) or pyribs'
(`SlidingBoundariesArchive`, `--peer ribs`, run with pyribs' interpreter), on the same
candidates: `--batches` batches of `--batch` 100-D candidates whose 2-D descriptors are
skewed (a normal and a gamma), into a 100 x 100 archive with pyribs' defaults (remap every 100
candidates, a buffer of 1,000). Prints one JSON line: seconds for all the batches (ours compiled
apart), the number of elites and the QD-score at the end (equal on both sides).

Usage: python benchmarks/sliding.py [--batches 20] [--batch 540] [--peer ribs]
"""

import argparse
import json
import time

import numpy as np


DIM, CELLS = 100, (100, 100)


def _batches(count: int, size: int):
    rng = np.random.default_rng(0)
    for _ in range(count):
        genotypes = rng.normal(size=(size, DIM)).astype(np.float32)
        fitnesses = rng.normal(size=size).astype(np.float32)
        descriptors = np.stack([rng.normal(0.3, 0.8, size), rng.gamma(2.0, 0.5, size)], 1).astype(
            np.float32
        )
        yield genotypes, descriptors, fitnesses


def ours(args) -> dict:
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    import eqx_qd as q

    archive = q.SlidingBoundariesRepertoire.empty(CELLS, (-1.0, 0.0), (1.0, 2.0), jnp.zeros(DIM))
    add = eqx.filter_jit(lambda r, g, d, f: r.add(g, d, f))
    data = [tuple(jnp.asarray(x) for x in b) for b in _batches(args.batches, args.batch)]
    t0 = time.perf_counter()
    compiled = add.lower(archive, *data[0]).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for g, d, f in data:
        archive, _ = compiled(archive, g, d, f)
    jax.block_until_ready(archive.fitnesses)
    seconds = time.perf_counter() - t0
    filled = np.isfinite(np.asarray(archive.fitnesses))
    return dict(
        side="eqx_qd", seconds=seconds, compile_s=compile_s, elites=int(filled.sum()),
        qd_score=float(np.asarray(archive.fitnesses)[filled].sum()),
    )  # fmt: skip


def ribs(args) -> dict:
    from ribs.archives import SlidingBoundariesArchive

    archive = SlidingBoundariesArchive(
        solution_dim=DIM, dims=CELLS, ranges=[(-1.0, 1.0), (0.0, 2.0)], dtype=np.float32
    )
    data = list(_batches(args.batches, args.batch))
    t0 = time.perf_counter()
    for g, d, f in data:
        archive.add(g, f, d)
    seconds = time.perf_counter() - t0
    objective = archive.data("objective")
    return dict(side="pyribs", seconds=seconds, elites=len(archive),
                qd_score=float(np.sum(objective)))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch", type=int, default=540)
    parser.add_argument("--peer", choices=["ribs"], default=None)
    args = parser.parse_args()
    print(json.dumps(ribs(args) if args.peer == "ribs" else ours(args)))


if __name__ == "__main__":
    main()
