"""Evaluators outside JAX for the tests (not a test module): plain NumPy functions that the
pools' worker processes import by name, so they live in a module of their own."""

import hashlib
import os
import time

import numpy as np


def sphere(genotype):
    """Minus the squared norm; the first two genes as the descriptor."""
    g = np.asarray(genotype, np.float64)
    return -float(np.sum(g**2)), [float(g[0]), float(g[1])]


def slow_sphere(genotype):
    """`sphere` after 10 ms: a costly simulator."""
    time.sleep(0.01)
    return sphere(genotype)


def napping_sphere(genotype):
    """`sphere` after 200 ms."""
    time.sleep(0.2)
    return sphere(genotype)


def hangs_above_half(genotype):
    """Hangs (a minute) where the first gene is above 0.5."""
    if genotype[0] > 0.5:
        time.sleep(60)
    return sphere(genotype)


def hangs_when_marked(genotype):
    """Hangs (a minute) where the last gene is above 0.9; otherwise `sphere` at once."""
    if genotype[-1] > 0.9:
        time.sleep(60)
    return sphere(genotype)


def faulty(genotype):
    """Fails differently by the first gene's decile: raises, returns NaN, a descriptor of
    three values, a string, or works."""
    decile = int(10 * float(genotype[0]))
    if decile == 0:
        raise RuntimeError("the simulator diverged")
    if decile == 1:
        return float("nan"), [0.5, 0.5]
    if decile == 2:
        return 1.0, [0.1, 0.2, 0.3]
    if decile == 3:
        return "broken"
    return sphere(genotype)


def three_descriptors(genotype):
    return 0.0, [0.1, 0.2, 0.3]


def dies_once_above_half(genotype):
    """Kills its own process the first time it sees a genotype whose first gene is above
    0.5 (a marker file per genotype in $EQX_QD_TEST_MARKS), then works."""
    mark = os.path.join(
        os.environ["EQX_QD_TEST_MARKS"], hashlib.sha1(np.asarray(genotype).tobytes()).hexdigest()
    )
    if genotype[0] > 0.5 and not os.path.exists(mark):
        open(mark, "w").close()
        os._exit(9)
    return sphere(genotype)


def always_dies(genotype):
    os._exit(9)


CALLS = []
"""The genotypes `counted_arm` saw in this process."""


def counted_arm(genotype):
    """The NumPy arm, counting its calls; raises KeyboardInterrupt (a kill of the driver) at
    the call $EQX_QD_TEST_STOP_AT of this process."""
    from eqx_qd.external import arm

    CALLS.append(np.asarray(genotype).copy())
    stop = os.environ.get("EQX_QD_TEST_STOP_AT")
    if stop is not None and len(CALLS) == int(stop):
        raise KeyboardInterrupt
    return arm(genotype)


def noisy_sphere(genotype):
    """`sphere` with Gaussian noise (0.05) on the fitness and each descriptor: a simulator
    whose every run differs."""
    f, d = sphere(genotype)
    rng = np.random.default_rng()
    return f + 0.05 * float(rng.normal()), [x + 0.05 * float(rng.normal()) for x in d]
