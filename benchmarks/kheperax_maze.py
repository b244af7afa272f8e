"""Our Kheperax mazes (`q.envs.KheperaxMaze`) against Kheperax 0.2.0, on the same policies.

Kheperax's side draws 1,000 random policies per task the way its examples do (its MLP, one
hidden layer of 8, lecun-uniform kernels and zero biases, `policy_network.init` on split
keys), scores them with its scoring function and writes the parameters with the fitnesses and
descriptors; ours reads the parameters into an Equinox policy of the same product
(`x @ kernel + bias`, ReLU, then tanh), scores them with `q.PolicyScorer` and compares. Both
sides time one evaluation of the whole batch (medians of `--rounds`, compile apart):

    JAX_PLATFORMS=cpu /tmp/qdax_venv/bin/python benchmarks/kheperax_maze.py --peer kheperax \\
        --out /tmp/kheperax_peer.npz [--tasks standard ...] (default: all)
    JAX_PLATFORMS=cpu python benchmarks/kheperax_maze.py --check /tmp/kheperax_peer.npz

A task name is `<map>[_quad][_target | _final_distance]` (`--tasks all`: the 18 of them).
`--speed` times the standard maze alone on either side and prints one `JSON` line (the
`kheperax` row of `benchmarks/compare.py`).
"""

import argparse
import json
import statistics
import time

import numpy as np


MAPS = ("standard", "pointmaze", "snake")
KINDS = ("plain", "target", "final_distance")
ALL = [
    "_".join([m, *(["quad"] if quad else []), *([] if k == "plain" else [k])])
    for quad in (False, True)
    for m in MAPS
    for k in KINDS
]


def parse(name: str) -> tuple[str, bool, str]:
    parts = name.split("_")
    maze, rest = parts[0], parts[1:]
    quad = bool(rest) and rest[0] == "quad"
    rest = rest[1:] if quad else rest
    return maze, quad, "_".join(rest) or "plain"


def _median_time(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peer(names: list[str], num: int, length: int, rounds: int) -> dict[str, np.ndarray]:
    import dataclasses

    import jax
    import jax.numpy as jnp
    from kheperax.tasks.config import KheperaxConfig
    from kheperax.tasks.final_distance import FinalDistKheperaxTask
    from kheperax.tasks.main import KheperaxTask
    from kheperax.tasks.quad import make_quad_config
    from kheperax.tasks.target import TargetKheperaxConfig, TargetKheperaxTask

    out = {}
    for name in names:
        maze, quad, kind = parse(name)
        if kind == "plain":
            config, cls = KheperaxConfig.get_default_for_map(maze), KheperaxTask
        else:
            config = TargetKheperaxConfig.get_default_for_map(maze)
            cls = TargetKheperaxTask if kind == "target" else FinalDistKheperaxTask
        config = dataclasses.replace(config, episode_length=length)
        if quad:
            config = make_quad_config(config)
        env, network, scoring = cls.create_default_task(config, random_key=jax.random.key(0))
        keys = jax.random.split(jax.random.key(1), num)
        params = jax.vmap(network.init)(keys, jnp.zeros((num, env.observation_size)))
        score = jax.jit(scoring)
        key = jax.random.key(2)
        start = time.perf_counter()
        f, d, _, _ = jax.block_until_ready(score(params, key))
        compile_s = time.perf_counter() - start
        seconds = _median_time(lambda: jax.block_until_ready(score(params, key)), rounds)
        layers = params["params"]
        for i in range(2):
            out[f"{name}/kernel_{i}"] = np.asarray(layers[f"Dense_{i}"]["kernel"])
            out[f"{name}/bias_{i}"] = np.asarray(layers[f"Dense_{i}"]["bias"])
        out[f"{name}/fitness"], out[f"{name}/descriptors"] = np.asarray(f), np.asarray(d)
        out[f"{name}/seconds"] = np.float64(seconds)
        print(f"{name}: {seconds:.3f} s per batch of {num} (first call {compile_s:.1f} s)")
    return out


def _random_kheperax_params(num: int) -> dict[str, np.ndarray]:
    """Policies as Kheperax draws them (lecun-uniform kernels, zero biases), from NumPy."""
    rng = np.random.default_rng(0)
    out = {}
    for i, (n_in, n_out) in enumerate([(5, 8), (8, 2)]):
        limit = np.sqrt(3.0 / n_in)
        out[f"speed/kernel_{i}"] = rng.uniform(-limit, limit, (num, n_in, n_out)).astype("f4")
        out[f"speed/bias_{i}"] = np.zeros((num, n_out), np.float32)
    return out


def ours(data, name: str, length: int, rounds: int):
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    import eqx_qd as q

    class Policy(eqx.Module):  # Kheperax's MLP as a product of the same layout
        kernels: tuple
        biases: tuple

        def __call__(self, obs):
            h = jax.nn.relu(obs @ self.kernels[0] + self.biases[0])
            return jnp.tanh(h @ self.kernels[1] + self.biases[1])

    policies = Policy(
        tuple(jnp.asarray(data[f"{name}/kernel_{i}"]) for i in range(2)),
        tuple(jnp.asarray(data[f"{name}/bias_{i}"]) for i in range(2)),
    )
    maze, quad, kind = parse("standard" if name == "speed" else name)
    env = q.envs.KheperaxMaze(maze=maze, task=kind, quad=quad, length=length)
    scorer = q.PolicyScorer(env)
    score = eqx.filter_jit(lambda s, p: s(p, key=jr.key(2))[:2])
    start = time.perf_counter()
    f, d = jax.block_until_ready(score(scorer, policies))
    compile_s = time.perf_counter() - start
    seconds = _median_time(lambda: jax.block_until_ready(score(scorer, policies)), rounds)
    return np.asarray(f), np.asarray(d), seconds, compile_s


def check(path: str, length: int, rounds: int, only: list[str] | None = None) -> None:
    data = np.load(path)
    names = sorted({k.split("/")[0] for k in data.files}, key=ALL.index)
    names = [n for n in names if only is None or n in only]
    print("| task | policies | agree (1e-5) | max abs diff fitness | max abs diff descriptor "
          "| Kheperax s / batch | ours s / batch | speed-up |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in names:
        f, d, seconds, _ = ours(data, name, length, rounds)
        tf, td = data[f"{name}/fitness"], data[f"{name}/descriptors"]
        close_f = np.isclose(f, tf, rtol=1e-5, atol=1e-5)
        close_d = np.isclose(d, td, rtol=1e-5, atol=1e-5).all(axis=1)
        agree = close_f & close_d
        peer_s = float(data[f"{name}/seconds"])
        print(
            f"| `{name}` | {len(f):,} | {agree.sum():,} ({agree.mean():.1%}) | "
            f"{np.max(np.abs(f - tf)):.2e} | {np.max(np.abs(d - td)):.2e} | {peer_s:.3f} | "
            f"{seconds:.3f} | {peer_s / seconds:.2f}x |"
        )
        differing = np.flatnonzero(~agree)
        if len(differing):
            np.save(f"/tmp/kheperax_differing_{name}.npy", differing)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--peer", choices=["kheperax"])
    p.add_argument("--out")
    p.add_argument("--check")
    p.add_argument("--tasks", nargs="+", default=None)
    p.add_argument("--num", type=int, default=1000)
    p.add_argument("--length", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--speed", action="store_true")
    a = p.parse_args()
    names = ALL if a.tasks in (None, ["all"]) else a.tasks
    if a.speed:
        if a.peer:
            r = peer(["standard"], a.num, a.length, a.rounds)
            seconds = float(r["standard/seconds"])
        else:
            seconds = ours(_random_kheperax_params(a.num), "speed", a.length, a.rounds)[2]
        print("JSON " + json.dumps({"s_per_batch": seconds, "policies": a.num}))
    elif a.peer:
        np.savez_compressed(a.out, **peer(names, a.num, a.length, a.rounds))
        print(f"wrote {a.out}")
    else:
        check(a.check, a.length, a.rounds, None if a.tasks in (None, ["all"]) else a.tasks)


if __name__ == "__main__":
    main()
