"""What the collectives cost beside the work they serve, on N host devices (issue 45).

Weak scaling means nothing on a 2-core CPU (N host devices share its cores), so this times
each job's exchange against the training chunk it follows, both on the same mesh:

- **PBT** (the `pbt` job's defaults: 8 SAC agents on the open point maze, 8 environments each,
  200 iterations per round): one round's training (`rl.train_population_sharded`) against
  the PBT step after it (`PBT.update` over the split population: ranking, copies that move
  whole runs between devices, explore) and the re-placement of the members.
- **IPPO** (the `ippo` job's defaults: 4 agents on LineTargets, 64 environments, rollouts of 64,
  8 minibatches, 4 + 4 epochs): one data-parallel iteration (`rl.train_data_parallel`)
  against the same number of gradient all-reduces alone (one per minibatch step, the actors'
  and critics' gradients).

PGA-ME's critic has its own script (`sharded_critic.py`). Medians of `--rounds` calls after a
compile call.

Usage: python benchmarks/collectives.py [--devices 4] [--rounds 5] [--only pbt,ippo]
"""

import argparse
import json
import os
import statistics
import sys
import time


def _median_s(fn, rounds):
    import jax

    jax.block_until_ready(fn())  # compile
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--only", default="pbt,ippo")
    a = p.parse_args(sys.argv[1:])
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    if jax.config.jax_platforms == "cpu":
        jax.config.update("jax_num_cpu_devices", a.devices)
    import equinox as eqx
    import jax.numpy as jnp
    import jax.random as jr
    from jax.sharding import NamedSharding, PartitionSpec as P

    import eqx_qd as q
    from eqx_qd import jobs
    from eqx_qd._misc import place_on

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from compare import _machine

    mesh = q.device_mesh(a.devices)
    out = {"devices": a.devices, "machine": _machine()}
    print(out["machine"], flush=True)
    chosen = a.only.split(",")

    if "pbt" in chosen:
        from eqx_qd.jobs._agent_options import training_env
        from eqx_qd.jobs._pbt import build_pbt_run

        config = jobs.PBTConfig(devices=a.devices)
        env, agent, spaces, pbt = build_pbt_run(config)
        env = training_env(config, env)
        pop = q.rl.init_population(agent, env, spaces, config.population_size, key=jr.key(0))
        members = NamedSharding(mesh, P("p"))
        pop = place_on(pop, members)
        n = config.iterations_per_round
        train = lambda: q.rl.train_population_sharded(agent, env, pop, n, mesh=mesh, key=jr.key(1))[
            0
        ]
        trained = train()
        returns = jnp.arange(config.population_size, dtype=jnp.float32)

        def exchange():
            new, _ = pbt.update(trained, returns, key=jr.key(2))
            return place_on(new, members)

        t_train, t_exchange = _median_s(train, a.rounds), _median_s(exchange, a.rounds)
        out["pbt"] = {
            "train_round_s": round(t_train, 4),
            "exchange_s": round(t_exchange, 4),
            "exchange_share": round(t_exchange / (t_train + t_exchange), 4),
        }
        print(
            f"PBT   round of {n} iterations {t_train:8.3f} s   exchange {t_exchange:8.4f} s "
            f"({100 * t_exchange / (t_train + t_exchange):.2f}% of the round)",
            flush=True,
        )

    if "ippo" in chosen:
        config = jobs.IPPOConfig(devices=a.devices)
        env = config.build_env()
        agent = config.build_agent(env)
        state = agent.init(config.hparams(), key=jr.key(0))
        run = agent.init_run(env, state, key=jr.key(1))
        iterate = lambda: q.rl.train_data_parallel(agent, env, run, 1, mesh=mesh, key=jr.key(2))
        steps = (config.actor_epochs + config.critic_epochs) * config.num_minibatches
        grads = eqx.filter((state.actor, state.critic), eqx.is_array)

        def reduce(g):
            def body(g, _):
                return jax.tree.map(lambda x: jax.lax.pmean(x * 0.999, "p"), g), None

            g, _ = jax.lax.scan(body, g, None, length=steps)
            return jax.tree.map(lambda x: x[None], g)

        mapped = jax.jit(
            jax.shard_map(reduce, mesh=mesh, in_specs=P(), out_specs=P("p"), check_vma=False)
        )
        t_iter = _median_s(lambda: iterate()[0].agent_state.actor, a.rounds)
        t_reduce = _median_s(lambda: mapped(grads), a.rounds)
        out["ippo"] = {
            "iteration_s": round(t_iter, 4),
            "all_reduces_s": round(t_reduce, 4),
            "all_reduce_share": round(t_reduce / t_iter, 4),
            "all_reduces_per_iteration": steps,
        }
        print(
            f"IPPO  iteration {t_iter:8.3f} s   its {steps} gradient all-reduces alone "
            f"{t_reduce:8.4f} s ({100 * t_reduce / t_iter:.2f}%)",
            flush=True,
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
