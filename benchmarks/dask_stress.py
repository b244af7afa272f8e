"""Dask timeouts under load: a `DaskPool(workers=2)` evaluates batches of 64 candidates, 3 of
which hang, with a 0.5 s timeout, while `--burners` busy processes load the CPU. Each hang
ends a worker, and the candidates queued meanwhile wait for its replacement. Prints, per
batch, the statuses of the hangs and of the others and the attempts: every hang should be
TIMEOUT and every other candidate OK on its first run, attempts 1 (issue 76, item 2; the
suite's test of it, in tests/external, burns one core for one batch).

Usage: python benchmarks/dask_stress.py [--burners 2] [--batches 3]
(run from the repository root: `tests/external_evaluators.py` is the evaluator)
"""

import argparse
import collections
import os
import subprocess
import sys
import time

import numpy as np


def main(burners: int, batches: int) -> None:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "tests"))
    import external_evaluators as evs

    from eqx_qd import external as ex

    rng = np.random.default_rng(0)
    rows = (0.9 * rng.uniform(size=(64, 4))).astype(np.float32)
    hangs = np.zeros(64, bool)
    hangs[[5, 30, 51]] = True
    rows[hangs, -1] = 0.95
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(burners)]
    try:
        with ex.DaskPool(workers=2) as pool:
            for b in range(batches):
                t0 = time.perf_counter()
                out = pool.evaluate(evs.hangs_when_marked, rows, 2, timeout=0.5)
                names = lambda s: dict(collections.Counter(ex.Status(x).name for x in s))  # noqa: E731
                print(
                    f"batch {b}: {time.perf_counter() - t0:.1f} s, "
                    f"hangs {names(out.status[hangs])}, others {names(out.status[~hangs])}, "
                    f"attempts {dict(collections.Counter(out.attempts.tolist()))}",
                    flush=True,
                )
    finally:
        for p in busy:
            p.kill()
            p.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burners", type=int, default=2)
    parser.add_argument("--batches", type=int, default=3)
    args = parser.parse_args()
    main(args.burners, args.batches)
