#!/usr/bin/env bash
# The Discount Model Search paper's ordering on its 10-D linear-projection task (the 100-D
# sphere, descriptors the sums of 10 blocks of 10 genes, a CVT of 10,000 cells): DMS against
# CMA-MAE (and DDS) at equal evaluations, ours only, over seeds, by `eqx-qd report`
# (two-sided Mann-Whitney). The paper runs 10,000 iterations of 540; ITERATIONS says this run's.
# docs/results/guided.md shows its output.
#
# Usage: bash benchmarks/dms_ordering.sh [OUT=runs/dms10d] [ITERATIONS=2000]
#        [SEEDS="1 2 3 4 5"] [PRESETS="dms-10d cma-mae-10d dds-10d"]
set -euo pipefail
OUT=${OUT:-runs/dms10d}
ITERATIONS=${ITERATIONS:-2000}
SEEDS=${SEEDS:-1 2 3 4 5}
PRESETS=${PRESETS:-dms-10d cma-mae-10d dds-10d}
for preset in $PRESETS; do
    for seed in $SEEDS; do
        eqx-qd run map-elites --preset "$preset" --iterations "$ITERATIONS" \
            --seed "$seed" --out "$OUT/$preset-$seed" --no-plots --no-progress
    done
done
eqx-qd report "$OUT"/* --out "$OUT-report"
