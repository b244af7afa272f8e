"""How MAP-Elites' throughput grows with the work: evaluations per second against the batch size
(CVT 1,024 cells) and against the number of cells (batch 1,024), eqx_qd beside pyribs 0.12
float32, back to back at every point.

The anchor workload otherwise (rastrigin-100, isoline 0.005 / 0.05, uniform parents, 200
iterations in one compiled loop for ours, 200 ask / tell rounds for pyribs). The batch sweep
uses QDax's 1,024 centroids; the cells sweep uses centroids drawn uniformly in the unit square
(seed 0), the same file for both libraries, since k-means at 65,536 cells from 50,000 samples is
not defined. Each point runs ours then pyribs (alternating the order per round) in fresh
processes; a point's figure is the median of its rounds.

Usage: python benchmarks/scaling.py [--rounds 1] [--ribs-python /tmp/ribs_venv/bin/python]
       [--batches 64,256,1024,4096,16384] [--cells 256,1024,4096,16384,65536]
       [--out benchmarks/scaling.png] [--json OUT]

Prints the machine, a Markdown table per sweep, and draws both sweeps into one figure.
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile

import numpy as np


HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "bench"))
sys.path.insert(0, HERE)
from compare import _machine, _run  # noqa: E402


def _point(args, centroids: str, cells: int, batch: int, first: str) -> dict[str, float]:
    ours = [sys.executable, os.path.join(HERE, "map_elites.py"), "--centroids", centroids,
            "--cells", str(cells), "--batch", str(batch), "--repeats", "3"]  # fmt: skip
    ribs = [args.ribs_python, os.path.join(SHARED, "pyribs", "bench_ribs.py"), "--dtype",
            "float32", "--centroids", centroids, "--batch", str(batch)]  # fmt: skip
    order = [("eqx_qd", ours), ("pyribs f32", ribs)]
    if first != "eqx_qd":
        order.reverse()
    out = {}
    for who, cmd in order:
        res = _run(cmd, args.timeout)
        if res is not None:
            out[who] = float(res["evals_per_s"])  # ours: the median of its repeats
    return out


def _sweep(args, points: list[tuple[str, int, int]]) -> list[dict[str, float]]:
    rounds: list[list[dict[str, float]]] = [[] for _ in points]
    for r in range(args.rounds):
        for i, (centroids, cells, batch) in enumerate(points):
            first = "eqx_qd" if r % 2 == 0 else "pyribs f32"
            print(f"round {r + 1}: cells {cells}, batch {batch}", file=sys.stderr, flush=True)
            rounds[i].append(_point(args, centroids, cells, batch, first))
    return [
        {who: statistics.median(p[who] for p in runs if who in p)
         for who in ("eqx_qd", "pyribs f32") if any(who in p for p in runs)}
        for runs in rounds
    ]  # fmt: skip


def _table(name: str, xs: list[int], rows: list[dict[str, float]]) -> None:
    print(f"| {name} | " + " | ".join(f"{x:,}" for x in xs) + " |")
    print("| --- |" + " --- |" * len(xs))
    for who in ("eqx_qd", "pyribs f32"):
        print(f"| {who} evals/s | " + " | ".join(f"{r.get(who, float('nan')):,.0f}" for r in rows)
              + " |")  # fmt: skip
    ratios = [r["eqx_qd"] / r["pyribs f32"] if len(r) == 2 else float("nan") for r in rows]
    print("| eqx_qd / pyribs | " + " | ".join(f"**{x:.2f}x**" for x in ratios) + " |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--ribs-python", default="/tmp/ribs_venv/bin/python")
    p.add_argument("--batches", default="64,256,1024,4096,16384")
    p.add_argument("--cells", default="256,1024,4096,16384,65536")
    p.add_argument("--out", default=os.path.join(HERE, "scaling.png"))
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--json")
    args = p.parse_args()
    if not os.path.exists(args.ribs_python):
        p.error(f"no pyribs virtualenv at {args.ribs_python} (see ../shared/bench/README.md)")
    batches = [int(b) for b in args.batches.split(",")]
    cells = [int(c) for c in args.cells.split(",")]
    started = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    qdax_1024 = os.path.join(SHARED, "qdax", "centroids_cvt1024_2d.npy")
    with tempfile.TemporaryDirectory(prefix="eqx_qd_scaling_") as folder:
        files = {}
        for n in cells:
            files[n] = os.path.join(folder, f"uniform_{n}.npy")
            np.save(files[n], np.random.default_rng(0).uniform(size=(n, 2)).astype(np.float32))
        by_batch = _sweep(args, [(qdax_1024, 1024, b) for b in batches])
        by_cells = _sweep(args, [(files[n], n, 1024) for n in cells])

    print(f"{started}, {_machine()}; medians of {args.rounds} round(s), back to back")
    print()
    _table("batch (CVT 1,024)", batches, by_batch)
    print()
    _table("cells (uniform centroids, batch 1,024)", cells, by_cells)
    if args.json:
        with open(args.json, "w") as f:
            record = {"batches": batches, "by_batch": by_batch, "cells": cells,
                      "by_cells": by_cells, "machine": _machine(), "date": started}  # fmt: skip
            json.dump(record, f)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for ax, xs, rows, label in ((axes[0], batches, by_batch, "batch size (CVT 1,024 cells)"),
                                (axes[1], cells, by_cells, "cells (batch 1,024)")):  # fmt: skip
        for who, style in (("eqx_qd", "o-"), ("pyribs f32", "s--")):
            ax.plot(xs, [r.get(who, np.nan) for r in rows], style, label=who)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("evaluations / s")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"MAP-Elites, rastrigin-100: {_machine()}, {started}", fontsize=9)
    fig.savefig(args.out, dpi=120)
    print(f"\nfigure: {args.out}")


if __name__ == "__main__":
    main()
