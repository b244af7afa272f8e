import gc
import os


os.environ.setdefault("JAX_PLATFORMS", "cpu")
# In-process CLI runs leave the user's compilation cache alone (test_cli turns it on apart).
os.environ["EQX_QD_COMPILE_CACHE"] = "off"
# The compile options of the suite's programs are set for every run in the repository by the
# top-level conftest.py, before JAX starts.


import equinox as eqx
import jax
import jax.random as jr
import pytest
from hypothesis import settings


# Four host devices for the multi-device tests, in-process (as Equinox's tests do); set before
# JAX starts its backends. Single-device code runs on the first.
jax.config.update("jax_num_cpu_devices", 4)
jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

settings.register_profile("eqx_qd", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("eqx_qd")


@pytest.fixture(autouse=True, scope="module")
def _drop_compiled_programs():
    """Every compiled XLA CPU program holds memory mappings, and a process may hold 65,530 of
    them (Linux's ``vm.max_map_count``): an xdist worker that kept every module's programs
    reached 62,000 and its neighbour aborted inside XLA's compiler. Programs are reused within
    a module; after it, they go."""
    yield
    jax.clear_caches()
    gc.collect()


@pytest.fixture
def getkey():
    counter = iter(range(10**9))
    base = jr.key(1234)
    return lambda: jr.fold_in(base, next(counter))


@pytest.fixture(scope="session")
def jit_add():
    """One jitted `add` shared by all repertoire tests (compiled once per shape)."""
    return eqx.filter_jit(lambda rep, g, d, f: rep.add(g, d, f))
