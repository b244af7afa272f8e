#!/usr/bin/env bash
# OG-MAP-Elites and OMG-MEGA, ours (the job's presets of pyribs' sphere protocol) and pyribs
# 0.12's (benchmarks/cma.py --peer ribs --out), over seeds, compared by `eqx-qd report`.
# docs/results/scalable_cma.md shows its output beside the scalable strategies'.
#
# Usage: bash benchmarks/dqd_seeds.sh [OUT=runs/dqd] [ITERATIONS=500] [SEEDS="1 2 3 4 5"]
#        with RIBS_PYTHON=/tmp/ribs_venv/bin/python (pyribs' virtualenv)
set -euo pipefail
OUT=${OUT:-runs/dqd}
ITERATIONS=${ITERATIONS:-500}
SEEDS=${SEEDS:-1 2 3 4 5}
RIBS_PYTHON=${RIBS_PYTHON:-/tmp/ribs_venv/bin/python}
HERE=$(cd "$(dirname "$0")" && pwd)
for algorithm in og_map_elites omg_mega; do
    for seed in $SEEDS; do
        eqx-qd run map-elites --preset "${algorithm//_/-}" --iterations "$ITERATIONS" \
            --seed "$seed" --out "$OUT/eqx_qd-$algorithm-$seed" --no-plots --no-progress
        "$RIBS_PYTHON" "$HERE/cma.py" "$algorithm" --iterations "$ITERATIONS" \
            --seed "$seed" --peer ribs --out "$OUT/pyribs-$algorithm-$seed"
    done
done
eqx-qd report "$OUT"/eqx_qd-* "$OUT"/pyribs-* --out "$OUT-report"
