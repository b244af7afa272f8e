#!/usr/bin/env bash
# The Extract-QD Framework's ordering on the noisy arm at equal evaluation budget: vanilla
# MAP-Elites (640 candidates per iteration), MAP-Elites-sampling (128 candidates x 5 samples,
# mean) and Extract-ME (640 per iteration, half of them elites re-scored, depth 8), each for
# ITERATIONS iterations (640 x 1,000 = 640,000 evaluations), over SEEDS, with 32 reevaluations
# every 50 iterations; `eqx-qd report` compares the groups on the corrected figures.
# The 8-joint noisy arm with QDax's noise (0.1 fitness, 0.1 descriptor, 0.05 genotype), QDax's
# CVT of 1,024 cells, iso+line-DD (0.005, 0.05). benchmarks/log/uncertain.md shows its output.
#
# Usage: bash benchmarks/extract_order.sh [OUT=runs/extract] [ITERATIONS=1000]
#        [SEEDS="1 2 3 4 5 6 7 8 9 10"]
set -euo pipefail
OUT=${OUT:-runs/extract}
ITERATIONS=${ITERATIONS:-1000}
SEEDS=${SEEDS:-1 2 3 4 5 6 7 8 9 10}
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=${EQX_QD_SHARED_BENCH:-$HERE/../../shared/bench}
common=(--task noisy_arm --genotype-dim 8 --centroids "$SHARED/qdax/centroids_cvt1024_2d.npy"
        --iterations "$ITERATIONS" --log-every 50 --reevaluations 32 --no-plots --no-progress)
for seed in $SEEDS; do
    eqx-qd run map-elites "${common[@]}" --batch-size 640 --seed "$seed" \
        --out "$OUT/vanilla-$seed"
    eqx-qd run map-elites "${common[@]}" --batch-size 128 --samples 5 --seed "$seed" \
        --out "$OUT/sampling-$seed"
    eqx-qd run map-elites "${common[@]}" --batch-size 640 --repertoire extract --seed "$seed" \
        --out "$OUT/extract-$seed"
done
eqx-qd report "$OUT"/vanilla-* "$OUT"/sampling-* "$OUT"/extract-* --out "$OUT-report"
