#!/usr/bin/env bash
# CMA-ME, CMA-MAE and CMA-MEGA, ours (the jobs' presets of pyribs' sphere protocol) and
# pyribs 0.12's (benchmarks/cma.py --peer ribs --out), over seeds, compared by `eqx-qd report`:
# medians and quartiles, and two-sided Mann-Whitney U p-values between every pair of groups.
# docs/results/cma.md shows its output.
#
# Usage: bash benchmarks/cma_seeds.sh [OUT=runs/cma] [ITERATIONS=500] [SEEDS="1 2 3 4 5"]
#        with RIBS_PYTHON=/tmp/ribs_venv/bin/python (pyribs' virtualenv)
set -euo pipefail
OUT=${OUT:-runs/cma}
ITERATIONS=${ITERATIONS:-500}
SEEDS=${SEEDS:-1 2 3 4 5}
RIBS_PYTHON=${RIBS_PYTHON:-/tmp/ribs_venv/bin/python}
HERE=$(cd "$(dirname "$0")" && pwd)
for algorithm in me mae mega; do
    for seed in $SEEDS; do
        eqx-qd run map-elites --preset "cma-$algorithm" --iterations "$ITERATIONS" \
            --seed "$seed" --out "$OUT/eqx_qd-$algorithm-$seed" --no-plots --no-progress
        "$RIBS_PYTHON" "$HERE/cma.py" "cma_$algorithm" --iterations "$ITERATIONS" \
            --seed "$seed" --peer ribs --out "$OUT/pyribs-$algorithm-$seed"
    done
done
eqx-qd report "$OUT"/eqx_qd-* "$OUT"/pyribs-* --out "$OUT-report"
