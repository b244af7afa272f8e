"""Memory of one ME-PBT emitter update over D host devices: XLA's temporary bytes for the
best-set exchange in one step (`fraction_sort_exchange=1.0`) and in QDax's chunks (0.1).

    python benchmarks/exchange_memory.py 8

TD3 on the point maze, 10 agents per device with buffers of 100,000 transitions (QDax's ME-PBT
sizes), 0.1 of them in the best set (k = the number of devices).
"""

import sys

import jax


DEVICES = int(sys.argv[1]) if len(sys.argv) > 1 else 8
jax.config.update("jax_num_cpu_devices", DEVICES)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jax.random as jr  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import eqx_qd as q  # noqa: E402


def measure(fraction: float) -> tuple[float, float]:
    env = q.envs.PointMaze(length=100)
    agent = q.rl.TD3(
        observation_size=2, action_size=2, policy_hidden=(64, 64), critic_hidden=(64, 64),
        minibatch_size=256, num_envs=4, buffer_size=100_000,
    )  # fmt: skip
    config = q.PBTEmitterConfig(
        pg_population_size=10, ga_population_size=2, num_training_iterations=1,
        fraction_best_to_replace_from=0.1, fraction_to_replace_from_best=0.2,
        fraction_to_replace_from_samples=0.4, num_devices=DEVICES,
        fraction_sort_exchange=fraction,
    )  # fmt: skip
    variation = q.IsoLineVariation(0.01, 0.1)
    emitter = q.PBTEmitter(agent, env, config, agent.hparam_spaces, variation, axis_name="p")
    scorer = q.PolicyScorer(env, agent=agent)
    algo = q.MAPElites(emitter, scorer, scorer.qd_offset, axis_name="p")
    mesh = q.device_mesh(DEVICES)
    cells = q.GridTessellation((6, 6), minval=-1.0, maxval=1.0)
    genotypes = emitter.initial_genotypes(12 * DEVICES, key=jr.key(1))
    state, _ = q.init_sharded(algo, genotypes, cells, mesh=mesh, key=jr.key(2))
    dyn, static = eqx.partition(state.emitter_state, eqx.is_array)

    def body(d, repertoire, f, k):
        local = eqx.combine(jax.tree.map(lambda x: x[0], d), static)
        stand_ins = q.internal.tree_slice(repertoire.genotypes, 0, 12)
        descriptors = jnp.zeros((12, 2), jnp.float32)
        info = repertoire.add(stand_ins, descriptors, f[0])[1]
        new = emitter.state_update(
            local, repertoire, stand_ins, descriptors, f[0], None, add_info=info, key=k
        )
        return jax.tree.map(lambda x: x[None], eqx.filter(new, eqx.is_array))

    specs = dict(in_specs=(P("p"), P(), P("p"), P()), out_specs=P("p"), check_vma=False)
    mapped = jax.shard_map(body, mesh=mesh, **specs)
    fitnesses = jr.normal(jr.key(5), (DEVICES, 12))
    lowered = jax.jit(mapped).lower(dyn, state.repertoire, fitnesses, jr.key(4))
    temp = lowered.compile().memory_analysis().temp_size_in_bytes
    population = eqx.filter(state.emitter_state.population, eqx.is_array)
    one_run = sum(x[0, 0].nbytes for x in jax.tree.leaves(population))
    return temp / 2**20, one_run / 2**20


for fraction in (1.0, 0.1):
    temp, one = measure(fraction)
    print(f"{DEVICES} devices, fraction_sort_exchange {fraction}: temporary {temp:.1f} MiB "
          f"(one agent's run with its buffer: {one:.2f} MiB)")  # fmt: skip
