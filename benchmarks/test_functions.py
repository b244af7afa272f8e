"""Our benchmark tasks against QDax 0.5's functions of the same name, on the same genotypes.

The genotypes come from NumPy's generator (seed 0, the same in both virtualenvs), drawn in
each function's domain (noisy_arm's noise on the same key, with JAX's partitionable
threefry, the default since JAX 0.5, on QDax's side too). QDax's side writes its fitnesses
and descriptors; ours reads them and reports, per function, the largest differences and
how many genotypes agree within `1e-5 + 1e-5 |x|` (the issue's "equal on 10,000 random
genotypes"):

    JAX_PLATFORMS=cpu /tmp/qdax_venv/bin/python benchmarks/test_functions.py --peer qdax \\
        --out /tmp/qdax_functions.npz
    JAX_PLATFORMS=cpu python benchmarks/test_functions.py --check /tmp/qdax_functions.npz \\
        [--sample 64 --write tests/core/data/qdax_functions.npz]

`--write` keeps the first `--sample` genotypes of each function with QDax's outputs: the
suite's test (`tests/core/test_benchmark_tasks.py`) checks ours against them without QDax.
"""

import argparse
import math

import numpy as np


NUM = 10_000
SPIRAL_LENGTH = 0.005 * (40 * math.pi * math.sqrt(1 + (40 * math.pi) ** 2))
SPIRAL_LENGTH += 0.005 * math.log(40 * math.pi + math.sqrt(1 + (40 * math.pi) ** 2))

# name -> (genotype size, low, high): uniform draws in [low, high]^size.
CASES = {
    "rastrigin": (10, 0.0, 1.0),
    "sphere": (10, 0.0, 1.0),
    "arm": (8, 0.0, 1.0),
    "noisy_arm": (8, 0.0, 1.0),
    "square": (2, 0.0, 1.0),
    "checkered": (2, 0.0, 1.0),
    "empty_circle": (2, 0.0, 1.0),
    "non_continous_islands": (2, 0.0, 1.0),
    "continous_islands": (2, 0.0, 1.0),
    "square_5d": (5, 0.0, 1.0),
    "spiral_angle_euclidean": (1, 0.0, 40 * math.pi),
    "spiral_angle_geodesic": (1, 0.0, 40 * math.pi),
    "spiral_arc_length_euclidean": (1, 0.0, SPIRAL_LENGTH),
    "spiral_arc_length_geodesic": (1, 0.0, SPIRAL_LENGTH),
    "ssf_1": (1, -700.0, 700.0),
    "ssf_2": (2, -700.0, 700.0),
    "deceptive_evolvability": (2, 50.0 - 3 * math.sqrt(1e3), 150.0 + 3 * math.sqrt(1e3)),
}
NOISE = (0.1, 0.1, 0.05)  # the jobs' noisy_arm: fitness, descriptor, gene standard deviations


def genotypes() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        name: rng.uniform(low, high, (NUM, size)).astype(np.float32)
        for name, (size, low, high) in CASES.items()
    }


def qdax_side() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    import jax
    import jax.numpy as jnp

    # JAX 0.5 made the partitionable threefry the default; QDax's pin (0.4.28) draws with the
    # older one. The same setting on both sides: noisy_arm's draws are the same bits.
    jax.config.update("jax_threefry_partitionable", True)
    from qdax.tasks import arm, hypervolume_functions as hv, qd_suite, standard_functions as sf

    def vmapped(fn):
        return lambda g, key: (*jax.vmap(fn)(g), {})

    fns = {
        "rastrigin": sf.rastrigin_scoring_function,
        "sphere": sf.sphere_scoring_function,
        "arm": arm.arm_scoring_function,
        "noisy_arm": lambda g, key: arm.noisy_arm_scoring_function(g, key, *NOISE),
        "square": hv.square_scoring_function,
        "checkered": hv.checkered_scoring_function,
        "empty_circle": hv.empty_circle_scoring_function,
        "non_continous_islands": hv.non_continous_islands_scoring_function,
        "continous_islands": hv.continous_islands_scoring_function,
        "square_5d": hv.square_scoring_function,
        "spiral_angle_euclidean": qd_suite.archimedean_spiral_v0_angle_euclidean_task,
        "spiral_angle_geodesic": qd_suite.archimedean_spiral_v0_angle_geodesic_task,
        "spiral_arc_length_euclidean": qd_suite.archimedean_spiral_v0_arc_length_euclidean_task,
        "spiral_arc_length_geodesic": qd_suite.archimedean_spiral_v0_arc_length_geodesic_task,
        "ssf_1": qd_suite.ssf_v0_param_size_1_task,
        "ssf_2": qd_suite.ssf_v0_param_size_2_task,
        "deceptive_evolvability": qd_suite.deceptive_evolvability_v0_task,
    }
    out = {}
    for name, g in genotypes().items():
        fn = fns[name]
        score = fn.scoring_function if hasattr(fn, "scoring_function") else fn
        f, d, _ = jax.jit(score)(jnp.asarray(g), jax.random.key(7))
        out[name] = (np.asarray(f), np.asarray(d))
    return out


def our_tasks() -> dict:
    import eqx_qd as q

    spiral = q.ArchimedeanSpiral
    return {
        "rastrigin": q.Rastrigin(10),
        "sphere": q.Sphere(10),
        "arm": q.Arm(8),
        "noisy_arm": q.Noisy(q.Arm(8), *NOISE),
        "square": q.Square(2),
        "checkered": q.Checkered(2),
        "empty_circle": q.EmptyCircle(2),
        "non_continous_islands": q.Islands(2),
        "continous_islands": q.Islands(2, continuous=True),
        "square_5d": q.Square(5),
        "spiral_angle_euclidean": spiral("angle", "euclidean"),
        "spiral_angle_geodesic": spiral("angle", "geodesic"),
        "spiral_arc_length_euclidean": spiral("arc_length", "euclidean"),
        "spiral_arc_length_geodesic": spiral("arc_length", "geodesic"),
        "ssf_1": q.SelfSimilar(1),
        "ssf_2": q.SelfSimilar(2),
        "deceptive_evolvability": q.DeceptiveEvolvability(),
    }


def our_side(names=None, drawn=None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    import equinox as eqx
    import jax.random as jr

    tasks, drawn = our_tasks(), drawn or genotypes()
    out = {}
    for name in names or tasks:
        f, d, _ = eqx.filter_jit(lambda t, g: t(g, key=jr.key(7)))(tasks[name], drawn[name])
        out[name] = (np.asarray(f), np.asarray(d))
    return out


def agree(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """Per genotype: every value within 1e-5 + 1e-5 |theirs| (NaN only against NaN)."""
    close = np.isclose(ours, theirs, rtol=1e-5, atol=1e-5, equal_nan=True)
    return close.reshape(len(close), -1).all(axis=1)


def check(path: str, sample: int, write: str | None) -> None:
    theirs = np.load(path)
    drawn = genotypes()
    mine = our_side()
    print("| function | genotypes | agree | max abs diff (fitness) | max abs diff (descriptors) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    kept = {}
    for name, (f, d) in mine.items():
        tf, td = theirs[f"{name}/fitness"], theirs[f"{name}/descriptors"]
        ok = agree(f, tf) & agree(d, td)
        df, dd = np.nanmax(np.abs(f - tf)), np.nanmax(np.abs(d - td))
        print(f"| `{name}` | {len(f):,} | {ok.sum():,} | {df:.2e} | {dd:.2e} |")
        kept[f"{name}/genotypes"] = drawn[name][:sample]
        kept[f"{name}/fitness"] = tf[:sample]
        kept[f"{name}/descriptors"] = td[:sample]
    if write:
        np.savez_compressed(write, **kept)
        print(f"wrote the first {sample} genotypes of each function to {write}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--peer", choices=["qdax"])
    p.add_argument("--out")
    p.add_argument("--check")
    p.add_argument("--sample", type=int, default=64)
    p.add_argument("--write")
    a = p.parse_args()
    if a.peer:
        out = qdax_side()
        np.savez_compressed(
            a.out,
            **{
                f"{n}/{k}": v
                for n, fd in out.items()
                for k, v in zip(("fitness", "descriptors"), fd)
            },
        )
        print(f"wrote {a.out}")
    else:
        check(a.check, a.sample, a.write)


if __name__ == "__main__":
    main()
