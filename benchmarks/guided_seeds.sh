#!/usr/bin/env bash
# Discount Model Search and Density Descent Search, ours (the map-elites job's dms / dds
# presets) and pyribs 0.12's (benchmarks/cma.py dms|dds --peer ribs --out), over seeds, compared
# by `eqx-qd report`: pyribs' examples/sphere.py `dms` and `dds` settings (the 100-D projected
# sphere, a 100 x 100 result grid, 15 emitters x 36). pyribs' DMS needs PyTorch in its
# virtualenv (`pip install torch`). docs/results/guided.md shows its output.
#
# Usage: bash benchmarks/guided_seeds.sh [OUT=runs/guided] [ITERATIONS=1000]
#        [SEEDS="1 2 3 4 5"] [ALGORITHMS="dms dds"]
#        with RIBS_PYTHON=/tmp/ribs_venv/bin/python (pyribs' virtualenv)
set -euo pipefail
OUT=${OUT:-runs/guided}
ITERATIONS=${ITERATIONS:-1000}
SEEDS=${SEEDS:-1 2 3 4 5}
ALGORITHMS=${ALGORITHMS:-dms dds}
RIBS_PYTHON=${RIBS_PYTHON:-/tmp/ribs_venv/bin/python}
HERE=$(cd "$(dirname "$0")" && pwd)
for algorithm in $ALGORITHMS; do
    for seed in $SEEDS; do
        eqx-qd run map-elites --preset "$algorithm" --iterations "$ITERATIONS" \
            --seed "$seed" --out "$OUT/eqx_qd-$algorithm-$seed" --no-plots --no-progress
        "$RIBS_PYTHON" "$HERE/cma.py" "$algorithm" --iterations "$ITERATIONS" \
            --seed "$seed" --peer ribs --out "$OUT/pyribs-$algorithm-$seed"
    done
done
eqx-qd report "$OUT"/eqx_qd-* "$OUT"/pyribs-* --out "$OUT-report"
