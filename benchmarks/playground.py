"""MuJoCo Playground QD tasks: their feet contacts against MuJoCo's own, and their speed beside
the brax walker's.

`--contacts` plays fixed-seed episodes of random linear policies on each `*_uni` task and
replays every step in MuJoCo (C, float64) from the MJX state before it with the same controls:
it counts the steps whose feet-on-floor contacts agree, and sorts the others by why (a floor
contact within 3 mm of touching; a contact MuJoCo finds on a pair MJX's collision budget left
out, so that the two steps part). `--speed` times a batch of episodes of
`--envs` environments (env steps per second, medians of `--rounds`, compile apart) on
`playground_walker_uni` and brax's `walker2d_uni` back to back, and prints one JSON line per
task:

    JAX_PLATFORMS=cpu python benchmarks/playground.py --contacts [--episodes 10 --length 100]
    JAX_PLATFORMS=cpu python benchmarks/playground.py --speed [--envs 64 --length 100]
    JAX_PLATFORMS=cpu python benchmarks/playground.py --laws  # check_env on every QD task

`--impl warp --tasks playground_humanoid_omni` times the omni task on Warp (a GPU; the `*_uni`
tasks read MJX's jax contacts and run on `jax` only).
"""

import argparse
import json
import statistics
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import eqx_qd as q
from eqx_qd import jobs


UNI = ("playground_walker_uni", "playground_hopper_uni", "playground_cheetah_uni")


def _player(env, scale: float = 0.5):
    @eqx.filter_jit
    def play(key):
        policy_key, key = jr.split(key)
        weights = scale * jr.normal(policy_key, (env.observation_size, env.action_size))
        return q.envs.rollout_states(env, lambda obs: jnp.tanh(obs @ weights), key=key)

    return play


def replay(env, physics, actions, valid):
    """Per valid step of an MJX episode, MuJoCo's own (C, float64) step from the MJX state
    before it with the same controls: whether each foot touches the floor there, why a foot
    that disagrees with the MJX step may (`near`: a floor contact of that foot within 3 mm of
    touching on either side; `unseen`: MuJoCo touches on a geom pair that MJX did not collide,
    its models' `max_geom_pairs` / `max_contact_points` budget, so the steps part) and the
    distance of the nearest floor contact of that foot. `physics` is the episode's stacked
    MJX data (`rollout_states`), `actions` its actions, `valid` its mask."""
    import mujoco

    model = env.playground_env.mj_model
    data = mujoco.MjData(model)
    floor, feet = env._floor, env._feet
    qpos, qvel, warm = (np.asarray(getattr(physics, f)) for f in ("qpos", "qvel", "qacc_warmstart"))
    contact = physics._impl.contact
    geom1, geom2, dist = (np.asarray(a) for a in (contact.geom1, contact.geom2, contact.dist))
    rows = []
    for t in np.flatnonzero(valid):
        data.qpos[:], data.qvel[:], data.qacc_warmstart[:] = qpos[t], qvel[t], warm[t]
        data.ctrl[:] = np.clip(actions[t], -1.0, 1.0)
        for _ in range(env.playground_env.n_substeps):
            mujoco.mj_step(model, data)
        theirs = [(frozenset(c.geom.tolist()), float(c.dist)) for c in data.contact[: data.ncon]]
        mine = [
            (frozenset((int(a), int(b))), float(d))
            for a, b, d in zip(*(x[t + 1] for x in (geom1, geom2, dist)))
        ]
        seen = {g for g, _ in mine}
        touches, gaps = [], []
        for foot in feet:
            on_floor = [d for g, d in theirs if floor in g and g & set(foot)]
            touches.append(any(d <= 0 for d in on_floor))
            near = on_floor + [d for g, d in mine if floor in g and g & set(foot)]
            gaps.append(min(abs(d) for d in near) if near else float("inf"))
        unseen = any(d <= 0 and g not in seen for g, d in theirs)
        rows.append((t, np.asarray(touches, np.float32), gaps, unseen))
    return rows


def contacts(name: str, episodes: int, length: int) -> dict:
    env = jobs.make_env(name, episode_length=length)
    play = _player(env)
    steps = agree = near = unseen = other = 0
    gaps = []
    for seed in range(episodes):
        episode, states = play(jr.key(seed))
        ours = np.asarray(states.state_desc)[1:]
        actions = np.asarray(episode.transitions.action)
        for t, theirs, gap, budget in replay(
            env, states.physics.data, actions, np.asarray(episode.valid) > 0
        ):
            steps += 1
            differ = np.flatnonzero(ours[t] != theirs)
            if differ.size == 0:
                agree += 1
                continue
            worst = max(gap[i] for i in differ)
            gaps.append(worst)
            if worst < 3e-3:
                near += 1
            elif budget:
                unseen += 1
            else:
                other += 1
    return {
        "task": name,
        "steps": steps,
        "agree": agree,
        "agree_fraction": round(agree / steps, 4),
        "differ_within_3mm": near,
        "differ_mjx_left_a_contact_out": unseen,
        "differ_unexplained": other,
        "gaps_mm": sorted(round(1e3 * g, 2) for g in gaps),
    }


def speed(name: str, num_envs: int, length: int, rounds: int, impl: str | None) -> dict:
    options = {"episode_length": length}
    if impl is not None and name.startswith("playground"):
        options["impl"] = impl
    env = jobs.make_env(name, **options)

    @eqx.filter_jit
    def batch(key):
        # One policy per environment: a deterministic task played by one shared policy would
        # be the same episode 64 times, which vmap computes once.
        def one(k):  # what depends on every step: the return and the descriptor
            policy_key, k = jr.split(k)
            weights = 0.5 * jr.normal(policy_key, (env.observation_size, env.action_size))
            episode = q.envs.rollout(env, lambda obs: jnp.tanh(obs @ weights), key=k)
            descriptor = env.descriptor(episode.transitions.next_state_desc, episode.valid)
            return jnp.sum(episode.transitions.reward), descriptor

        return jax.vmap(one)(jr.split(key, num_envs))

    start = time.perf_counter()
    jax.block_until_ready(batch(jr.key(0)))
    compile_s = time.perf_counter() - start
    times = []
    for r in range(rounds):
        start = time.perf_counter()
        jax.block_until_ready(batch(jr.key(r + 1)))
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    dt = float(getattr(getattr(env, "playground_env", None), "dt", 0.0)) or float(
        getattr(getattr(env, "brax_env", None), "dt", 0.0)
    )
    return {
        "task": name,
        "impl": getattr(env, "impl", getattr(env, "backend", "")),
        "envs": num_envs,
        "length": length,
        "compile_s": round(compile_s, 2),
        "batch_s": round(seconds, 4),
        "env_steps_per_s": round(num_envs * length / seconds),
        "control_dt_s": dt,
        "simulated_s_per_s": round(num_envs * length * dt / seconds, 1),
    }


def laws(name: str, length: int) -> dict:
    """`check_env` on task `name` (episodes of `length` steps, two seeds per law)."""
    from eqx_qd.testing import check_env

    start = time.perf_counter()
    check_env(jobs.make_env(name, episode_length=length), max_examples=2)
    return {"task": name, "laws": "kept", "seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contacts", action="store_true")
    parser.add_argument("--speed", action="store_true")
    parser.add_argument("--laws", action="store_true", help="check_env on every QD task")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--length", type=int, default=100)
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--impl", default=None, help="MJX physics for the Playground side")
    parser.add_argument(
        "--tasks", nargs="*", default=None, help="default: the uni tasks / both walkers"
    )
    args = parser.parse_args()
    if args.contacts:
        for name in args.tasks or UNI:
            print(json.dumps(contacts(name, args.episodes, args.length)), flush=True)
    if args.laws:
        for name in args.tasks or q.envs.PLAYGROUND_QD_TASKS:
            print(json.dumps(laws(name, 8)), flush=True)
    if args.speed:
        for name in args.tasks or ("playground_walker_uni", "walker2d_uni"):
            print(json.dumps(speed(name, args.envs, args.length, args.rounds, args.impl)))


if __name__ == "__main__":
    main()
