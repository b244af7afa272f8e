"""`SlidingBoundariesRepertoire` against pyribs 0.12's `SlidingBoundariesArchive`, written out
in NumPy one candidate at a time (checked against pyribs itself on nine seeds when written):
the statuses and values every insertion reports, the boundaries after each remap, and the
elites kept, equal fitnesses included."""

import bisect

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_qd as q


DIMS, LOWER, UPPER, FREQ, CAP, EPS = (5, 4), (-1.0, 0.0), (1.0, 2.0), 7, 20, np.float32(1e-6)


class _Reference:
    """pyribs' archive, one candidate at a time: a buffer of the last `CAP` candidates, a
    remap on every `FREQ`-th (quantile boundaries, the archive emptied and refilled from its
    elites in the order their cells were filled, then the buffer, the newest last, each
    insertion clipped to the bounds from before the remap)."""

    def __init__(self):
        self.edges = [np.linspace(lo, hi, d + 1).astype(np.float32)
                      for d, lo, hi in zip(DIMS, LOWER, UPPER)]  # fmt: skip
        self.lower = np.asarray(LOWER, np.float32)
        self.upper = np.asarray(UPPER, np.float32)
        self.cells = {}  # cell -> (fitness, descriptor, genotype), in the order filled
        self.buffer, self.seen = [], 0

    def cell(self, d):
        d = np.clip(d + EPS, self.lower, self.upper - EPS)
        coords = [max(0, bisect.bisect_left(list(e[:n]), x) - 1)
                  for e, n, x in zip(self.edges, DIMS, d)]  # fmt: skip
        return int(np.ravel_multi_index(coords, DIMS))

    def insert(self, f, d, g):
        c = self.cell(d)
        held = self.cells.get(c)
        current = held[0] if held else np.float32(0.0)
        status = 0
        if held is None or f > current:
            status = 1 if held else 2
            self.cells[c] = (f, d, g)  # a replaced cell keeps its place in the order
        return status, np.float32(f - current)

    def add(self, f, d, g):
        self.buffer.append((f, d, g))
        self.buffer = self.buffer[-CAP:]
        self.seen += 1
        if self.seen % FREQ:
            return self.insert(f, d, g)
        n = len(self.buffer)
        for i, size in enumerate(DIMS):
            ranked = np.sort([b[1][i] for b in self.buffer])
            self.edges[i] = np.asarray(
                [ranked[(j * n) // size] for j in range(size)] + [ranked[-1]], np.float32
            )
        old = list(self.cells.values())
        self.cells = {}
        for f_, d_, g_ in old + self.buffer[:-1]:
            self.insert(f_, d_, g_)
        out = self.insert(f, d, g)
        self.lower = np.asarray([e[0] for e in self.edges], np.float32)
        self.upper = np.asarray([e[-1] for e in self.edges], np.float32)
        return out


ADD = eqx.filter_jit(lambda r, g, d, f: r.add(g, d, f))


def _empty(remap_frequency=FREQ, buffer_capacity=CAP):
    return q.SlidingBoundariesRepertoire.empty(
        DIMS, LOWER, UPPER, jnp.zeros(3), remap_frequency=remap_frequency,
        buffer_capacity=buffer_capacity,
    )  # fmt: skip


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_insertion_and_remap_is_pyribs(seed):
    rng = np.random.default_rng(seed)
    ours = _empty()
    ref = _Reference()
    for _ in range(6):  # 54 candidates: 7 remaps, the buffer full and wrapping from the 20th
        g = rng.normal(size=(9, 3)).astype(np.float32)
        f = np.round(rng.normal(size=9), 1).astype(np.float32)  # rounded: equal fitnesses
        d = np.stack([rng.normal(0.3, 0.8, 9), rng.gamma(2.0, 0.5, 9)], 1).astype(np.float32)
        ours, info = ADD(ours, jnp.asarray(g), jnp.asarray(d), jnp.asarray(f))
        want = [ref.add(f[i], d[i], g[i]) for i in range(9)]
        np.testing.assert_array_equal(info.status, [w[0] for w in want])
        np.testing.assert_allclose(info.value, [w[1] for w in want], atol=1e-6)
        for i, size in enumerate(DIMS):
            np.testing.assert_array_equal(ours.boundaries[i, : size + 1], ref.edges[i])
        fitnesses = np.full(20, -np.inf, np.float32)
        for c, (f_, _, g_) in ref.cells.items():
            fitnesses[c] = f_
            np.testing.assert_array_equal(ours.genotypes[c], g_)
        np.testing.assert_array_equal(ours.fitnesses, fitnesses)
    assert int(ours.seen) == 54 and int(ours.buffer_count) == CAP


def test_failed_candidates_are_refused_before_the_buffer():
    ours = _empty(remap_frequency=FREQ)
    d = jnp.asarray([[0.1, 0.5], [jnp.nan, 0.5], [0.2, 1.0]])
    f = jnp.asarray([1.0, 2.0, -jnp.inf])
    ours, info = ADD(ours, jnp.zeros((3, 3)), d, f)
    np.testing.assert_array_equal(info.status, [2, 0, 0])
    np.testing.assert_array_equal(info.cell, [int(ours.cell_of(d[:1])[0]), -1, -1])
    assert int(ours.seen) == 1 and int(ours.buffer_count) == 1
    assert int(ours.num_filled) == 1


def test_emptied_keeps_the_settings_and_the_first_bounds():
    ours = _empty(remap_frequency=2)
    d = jnp.asarray([[0.1, 0.5], [0.3, 0.6], [0.2, 1.0]])
    ours, _ = ADD(ours, jnp.zeros((3, 3)), d, jnp.ones(3))
    again = ours.emptied(jnp.zeros(5))
    assert again.genotypes.shape == (20, 5) and int(again.num_filled) == 0
    assert again.remap_frequency == 2 and again.buffer_capacity == CAP
    np.testing.assert_array_equal(again.extent[0], LOWER)
    np.testing.assert_array_equal(again.extent[1], UPPER)
    assert not np.array_equal(ours.extent[0], LOWER)  # ours remapped


@pytest.mark.slow
def test_map_elites_runs_on_it(getkey):
    task = q.Arm(4)
    archive = q.SlidingBoundariesRepertoire.empty(
        (6, 6), 0.0, 1.0, jnp.zeros(4), remap_frequency=16, buffer_capacity=64
    )
    emitter = q.MixingEmitter(batch_size=16, variation_percentage=0.0,
                              mutation=q.GaussianMutation(sigma=0.1))  # fmt: skip
    algo = q.MAPElites(emitter, task)
    state, _ = algo.init(task.init_genotypes(16, key=getkey()), archive, key=getkey())
    state, metrics = q.run(algo, state, 10, key=getkey())
    assert int(state.repertoire.num_filled) > 3
    assert int(state.repertoire.seen) == 16 * 11
    assert bool(jnp.all(jnp.diff(metrics.coverage) >= -1.0))


def test_bad_input_is_named():
    archive = _empty(buffer_capacity=4)
    with pytest.raises(ValueError, match=r"a batch of 5 candidates is larger than the buffer"):
        archive.add(jnp.zeros((5, 3)), jnp.zeros((5, 2)), jnp.zeros(5))
    with pytest.raises(ValueError, match=r"dims must be a non-empty sequence of positive ints"):
        q.SlidingBoundariesRepertoire.empty((0, 3), 0.0, 1.0, jnp.zeros(3))
    with pytest.raises(ValueError, match=r"remap_frequency"):
        q.SlidingBoundariesRepertoire.empty((3,), 0.0, 1.0, jnp.zeros(3), remap_frequency=0)
    with pytest.raises(ValueError, match=r"lower"):
        q.SlidingBoundariesRepertoire.empty((3,), 1.0, 0.0, jnp.zeros(3))
