"""The CVT lookup alone: the bucket index against the full search, by cells and batch.

For each number of cells, CVT centroids in 2-D (`cvt_centroids`, k-means on uniform samples),
then `index` of `--steps` batches of uniform descriptors in one compiled scan, with the index
(`CVTTessellation(c, index_min_cells=1)`) and with the full search (`index_min_cells` huge),
timed after compiling apart, median of `--repeats` calls. It is what `CVTTessellation`'s
default choice (`index_min_cells=None`: by JAX's backend) is read from. The two agree but on
near-ties, where the full search's float32 matrix product rounds (`agree`: the share of equal
cells among 8 descriptors of every batch).

Usage: python benchmarks/cvt_search.py [--cells 1024,4096,8192,16384] [--batch 1024,16384]
"""

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp
import jax.random as jr

import eqx_qd as q


def _timed(cells: q.CVTTessellation, batch: int, steps: int, repeats: int, key):
    @jax.jit
    def lookups(cells, key):
        def one(total, k):
            idx = cells.index(jr.uniform(k, (batch, 2)))
            return total + jnp.sum(idx), idx[:8]

        return jax.lax.scan(one, jnp.int32(0), jr.split(key, steps))

    t0 = time.perf_counter()
    compiled = lookups.lower(cells, key).compile()
    compile_s = time.perf_counter() - t0
    out = jax.block_until_ready(compiled(cells, key))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(cells, key))
        times.append(time.perf_counter() - t0)
    return statistics.median(times), compile_s, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cells", default="1024,4096,8192,16384")
    p.add_argument("--batch", default="1024,16384")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    kind = jax.devices()[0].device_kind
    print(f"backend {jax.default_backend()} ({kind}), jax {jax.__version__}")
    rows = []
    for n in (int(x) for x in a.cells.split(",")):
        c = q.cvt_centroids(n, 2, num_samples=max(50_000, 5 * n), key=jr.key(n))
        indexed = q.CVTTessellation(c, index_min_cells=1)
        full = q.CVTTessellation(c, index_min_cells=2**31 - 1)
        default = q.CVTTessellation(c)
        for b in (int(x) for x in a.batch.split(",")):
            t_idx, c_idx, out_idx = _timed(indexed, b, a.steps, a.repeats, jr.key(1))
            t_full, c_full, out_full = _timed(full, b, a.steps, a.repeats, jr.key(1))
            agree = float(jnp.mean(out_idx[1] == out_full[1]))
            row = {
                "cells": n, "batch": b, "index_s": t_idx, "full_s": t_full,
                "index_over_full": t_full / t_idx, "compile_index_s": c_idx,
                "compile_full_s": c_full, "agree": agree,
                "indexed": indexed.bucket_index is not None,
                "default_indexes": default.bucket_index is not None,
            }  # fmt: skip
            rows.append(row)
            print(
                f"cells {n:>6} batch {b:>6}: index {1e3 * t_idx:8.2f} ms, full {1e3 * t_full:8.2f}"
                f" ms for {a.steps} lookups; index speed-up {t_full / t_idx:5.2f}x; agree "
                f"{agree:.3f}; the default "
                + ("indexes" if row["default_indexes"] else "searches all"),
                flush=True,
            )
    print("JSON " + json.dumps({"backend": jax.default_backend(), "rows": rows}))


if __name__ == "__main__":
    main()
