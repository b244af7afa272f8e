"""Do bfloat16 hidden products change what SAC and TD3 learn? Learning curves, float32 beside
bfloat16 (`SAC` / `TD3` ``matmul_dtype``), same seeds, same keys, same budget.

Task: `PointMaze(walls=False)` (random play scores about -160, heading straight to the goal
about -14). Networks (256, 256) as in `sac.py`, batch 256, 8 envs per agent, 0.25 gradient
steps per env step, default hyperparameters. A population of ``--pop`` agents (one seed each,
trained together by `train_population`) per agent kind and matmul type; after each of
``--rounds`` rounds of ``--iters`` iterations every agent is evaluated (4 deterministic
episodes). The initial weights and every key are the same in both arms, so two curves differ
only by the products' rounding. Prints the curves (population mean, and min / max over
agents) and each arm's steady seconds per round.

Usage: python benchmarks/bf16_curves.py [--agents sac td3] [--pop 8] [--rounds 6] [--iters 250]
"""

import argparse
import json
import statistics
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

import eqx_qd as q


def make_agent(name: str, matmul_dtype: str) -> q.rl.AbstractAgent:
    sizes = dict(
        observation_size=2, action_size=2, policy_hidden=(256, 256), critic_hidden=(256, 256),
        minibatch_size=256, num_envs=8, buffer_size=50_000, grad_updates_per_step=0.25,
        matmul_dtype=matmul_dtype,
    )  # fmt: skip
    return q.rl.SAC(**sizes) if name == "sac" else q.rl.TD3(**sizes)


def curve(agent: q.rl.AbstractAgent, pop_size: int, rounds: int, iters: int, seed: int) -> dict:
    env = q.envs.PointMaze(walls=False)
    init_key, loop_key = jr.split(jr.key(seed))
    # Default hyperparameters for every agent: the seeds alone differ.
    init = eqx.filter_jit(
        eqx.filter_vmap(
            lambda k: agent.init_run(env, agent.init(key=jr.split(k)[0]), key=jr.split(k)[1])
        )
    )
    pop = init(jr.split(init_key, pop_size))
    means, lows, highs, times = [], [], [], []
    for k in jr.split(loop_key, rounds):
        train_key, eval_key = jr.split(k)
        t0 = time.perf_counter()
        pop, _ = jax.block_until_ready(q.rl.train_population(agent, env, pop, iters, key=train_key))
        times.append(time.perf_counter() - t0)
        returns = q.rl.evaluate_population(agent, env, pop, 4, key=eval_key).returns.mean(axis=1)
        means.append(float(jnp.mean(returns)))
        lows.append(float(jnp.min(returns)))
        highs.append(float(jnp.max(returns)))
    return {"mean": means, "min": lows, "max": highs, "round_s": times}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--agents", nargs="+", default=["sac", "td3"], choices=["sac", "td3"])
    p.add_argument("--pop", type=int, default=8)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--iters", type=int, default=250)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    results = {}
    for name in a.agents:
        for dtype in ("float32", "bfloat16"):
            res = curve(make_agent(name, dtype), a.pop, a.rounds, a.iters, a.seed)
            results[f"{name} {dtype}"] = res
            steady = statistics.median(res["round_s"][1:] or res["round_s"])
            print(
                f"{name} {dtype:8s}: mean return per round "
                + " ".join(f"{m:7.1f}" for m in res["mean"])
                + f" | last round min {res['min'][-1]:.1f} max {res['max'][-1]:.1f}"
                + f" | {steady:.2f} s per round (first {res['round_s'][0]:.1f} s)",
                flush=True,
            )
    print("JSON " + json.dumps(results))


if __name__ == "__main__":
    main()
