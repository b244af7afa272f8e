"""The compile cache from Python (`jobs.use_compile_cache`): a second process running the same
programs compiles none of them."""

import json
import os
import subprocess
import sys

import pytest


SCRIPT = """
import collections, json, sys
import jax, jax.numpy as jnp, jax.random as jr
from eqx_qd import jobs
jobs.use_compile_cache(sys.argv[1])
events = collections.Counter()
jax.monitoring.register_event_listener(lambda name, **kw: events.update([name]))
import eqx_qd as q
task = q.Rastrigin(8)
emitter = q.EvolutionStrategyEmitter(jnp.zeros(8), 0.5, num_emitters=2, emitter_batch_size=4)
algo = q.MAPElites(emitter, task)
cells = q.GridTessellation((5, 5), *task.descriptor_bounds)
state, _ = algo.init(task.init_genotypes(4, key=jr.key(0)), cells, key=jr.key(1))
jax.block_until_ready(q.run(algo, state, 3, key=jr.key(2))[1].qd_score)
# A GA draws its parents from the repertoire, TD3 its rows from a replay buffer: their checks
# of an empty store once were host callbacks, and kept every such program out of the cache.
iso_line = q.IsoLineVariation(0.01, 0.1)
ga = q.MixingEmitter(batch_size=8, variation_percentage=1.0, variation=iso_line)
algo = q.MAPElites(ga, task)
state, _ = algo.init(task.init_genotypes(8, key=jr.key(3)), cells, key=jr.key(4))
jax.block_until_ready(q.run(algo, state, 3, key=jr.key(5))[1].qd_score)
buffer = q.rl.ReplayBuffer.empty(16, jnp.zeros(3)).insert(jnp.ones((4, 3)))
jax.block_until_ready(jax.jit(lambda b, k: b.sample(8, key=k))(buffer, jr.key(6)))
print(json.dumps({k.rsplit("/", 1)[-1]: v for k, v in events.items() if "cache" in k}))
"""


@pytest.mark.e2e
def test_a_second_process_compiles_nothing(tmp_path):
    """CMA-ME's programs each compile in a fraction of a second, under JAX's one-second
    threshold: `jax_compilation_cache_dir` alone kept almost none, and a second process
    compiled them all again (issue 76, item 7). With `use_compile_cache`, every program of
    the second process is a cache hit, a GA's and a replay buffer's among them (their
    empty-store checks were host callbacks, which JAX never writes to the cache)."""
    cache = tmp_path / "cache"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # the suite's own (conftest.py)

    def run() -> dict:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(cache)], env=env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = run()
    assert first["cache_misses"] > 10  # programs compiled, and written
    assert len(os.listdir(cache)) >= first["cache_misses"] - 1
    second = run()
    assert second.get("cache_misses", 0) == 0, second
    assert second["cache_hits"] == second["compile_requests_use_cache"] > 10
