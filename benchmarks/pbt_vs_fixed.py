"""Evidence for PBT: 8 agents with PBT against the same 8 agents with their initial
hyperparameters kept fixed (same initial population, same keys, same budget).

Task: `PointMaze(walls=False)`. ``--agent sac``: SAC (64, 64), batch 128, 8 envs per agent,
0.25 gradient steps per env step, QDax's SAC ranges. ``--agent ppo``: PPO (64, 64), rollouts of
32 steps in 8 envs, 2 minibatches, `PPO_SPACES`. ``--rounds`` rounds of ``--iters`` iterations
(an environment step of every env for SAC, a rollout and its epochs for PPO); after each round
every agent is evaluated (4 deterministic episodes) and, in the PBT arm, `PBT.update` replaces
the worst 3 by copies of the best 1 (QDax's 0.2 / 0.4 fractions of 8) with resampled
hyperparameters. Prints the final mean return of the population per seed and arm.

Usage: python benchmarks/pbt_vs_fixed.py [--agent sac|ppo] [--seeds 0 1 2] [--rounds 8]
[--iters 200]
"""

import argparse
import statistics

import jax.numpy as jnp
import jax.random as jr

import eqx_qd as q


def make_agent(name: str) -> q.rl.AbstractAgent:
    if name == "ppo":
        return q.rl.PPO(observation_size=2, action_size=2, rollout_length=32, num_envs=8,
                     num_minibatches=2)  # fmt: skip
    return q.rl.SAC(observation_size=2, action_size=2, policy_hidden=(64, 64),
                 critic_hidden=(64, 64), minibatch_size=128, num_envs=8, buffer_size=50_000,
                 grad_updates_per_step=0.25)  # fmt: skip


def run(
    agent: q.rl.AbstractAgent, seed: int, use_pbt: bool, rounds: int, iters: int, explore: str
) -> list[float]:
    env = q.envs.PointMaze(walls=False)
    key = jr.key(seed)
    init_key, loop_key = jr.split(key)
    pop = q.rl.init_population(agent, env, None, 8, key=init_key)
    pbt = q.rl.PBT.from_fractions(8, 0.2, 0.4, agent.hparam_spaces, explore=explore)
    curve = []
    for r, k in enumerate(jr.split(loop_key, rounds)):
        train_key, eval_key, pbt_key = jr.split(k, 3)
        pop, _ = q.rl.train_population(agent, env, pop, iters, key=train_key)
        returns = q.rl.evaluate_population(agent, env, pop, 4, key=eval_key).returns.mean(axis=1)
        curve.append(float(jnp.mean(returns)))
        if use_pbt and r < rounds - 1:
            pop, _ = pbt.update(pop, returns, key=pbt_key)
    return curve


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--agent", default="sac", choices=["sac", "ppo"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--explore", default="resample", choices=["resample", "perturb"])
    a = p.parse_args()
    finals = {"pbt": [], "fixed": []}
    agent = make_agent(a.agent)
    for seed in a.seeds:
        for arm in ("pbt", "fixed"):
            curve = run(agent, seed, arm == "pbt", a.rounds, a.iters, a.explore)
            finals[arm].append(curve[-1])
            print(
                f"seed {seed} {arm:5s}: mean return per round "
                + " ".join(f"{c:7.1f}" for c in curve)
            )
    for arm, values in finals.items():
        print(
            f"{arm:5s} final mean return: {', '.join(f'{v:.1f}' for v in values)} "
            f"(median {statistics.median(values):.1f})"
        )


if __name__ == "__main__":
    main()
