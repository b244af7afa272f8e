"""An archive measured in a task's hand-written descriptor space, the same way for every side
(NumPy only: QDax's virtualenv imports it too): its elites on a grid of [0, 1]^d, the best of
each cell."""

import numpy as np


def grid_figures(descriptors, fitnesses, offset, bins):
    """QD-score (each cell's best fitness plus `offset`, summed) and coverage of the elites
    (finite fitness and descriptor) on a grid of `bins` per axis of [0, 1]^d."""
    descriptors, fitnesses = np.asarray(descriptors), np.asarray(fitnesses)
    ok = np.isfinite(fitnesses) & np.all(np.isfinite(descriptors), axis=1)
    cells = np.clip((descriptors[ok] * bins).astype(int), 0, bins - 1)
    best = {}
    for c, f in zip(map(tuple, cells), fitnesses[ok]):
        best[c] = max(best.get(c, -np.inf), f)
    return float(sum(f + offset for f in best.values())), len(best) / bins ** descriptors.shape[1]
