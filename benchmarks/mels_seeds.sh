#!/usr/bin/env bash
# MAP-Elites Low-Spread over seeds, ours (the map-elites job, --repertoire low_spread) and
# QDax 0.5's (benchmarks/uncertain.py --mels --peer qdax), compared by `eqx-qd report` on the
# stored and the corrected figures: the 8-joint noisy arm with QDax's noise, 128 candidates x
# 5 samples per iteration, QDax's CVT of 1,024 cells, iso+line-DD (0.005, 0.05), 32
# reevaluations every 50 iterations. benchmarks/log/uncertain.md shows its output.
#
# Usage: bash benchmarks/mels_seeds.sh [OUT=runs/mels] [ITERATIONS=1000] [SEEDS="1 2 3 4 5"]
#        with QDAX_PYTHON=/tmp/qdax_venv/bin/python (QDax's virtualenv)
set -euo pipefail
OUT=${OUT:-runs/mels}
ITERATIONS=${ITERATIONS:-1000}
SEEDS=${SEEDS:-1 2 3 4 5}
QDAX_PYTHON=${QDAX_PYTHON:-/tmp/qdax_venv/bin/python}
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=${EQX_QD_SHARED_BENCH:-$HERE/../../shared/bench}
for seed in $SEEDS; do
    eqx-qd run map-elites --task noisy_arm --genotype-dim 8 --repertoire low_spread --samples 5 \
        --batch-size 128 --centroids "$SHARED/qdax/centroids_cvt1024_2d.npy" \
        --iterations "$ITERATIONS" --log-every 50 --reevaluations 32 --seed "$seed" \
        --out "$OUT/eqx_qd-mels-$seed" --no-plots --no-progress
    JAX_PLATFORMS=cpu "$QDAX_PYTHON" "$HERE/uncertain.py" --mels --peer qdax --seed "$seed" \
        --iterations "$ITERATIONS" --out "$OUT/qdax-mels-$seed"
done
eqx-qd report "$OUT"/eqx_qd-* "$OUT"/qdax-* --out "$OUT-report"
