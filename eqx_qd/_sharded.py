"""MAP-Elites (and ME-PBT, MOME) over a mesh of devices with `jax.shard_map`.

The repertoire is replicated: each device emits and scores its own batch, then inserts the
gathered batches of all devices, so every copy stays equal. Emitter states are per device
(stacked on a leading device axis outside the map). The same code runs on 1 device and on N.
"""

import equinox as eqx
import jax
import jax.random as jr
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jaxtyping import Array, Key

from . import _validate as check
from ._compile import jit
from ._custom_types import PRNGKey
from ._map_elites import MAPElites, MAPElitesState
from ._metrics import MOQDMetrics, QDMetrics
from ._misc import batch_size_of, filter_scan, is_none, place_on
from ._mome import MOME, MOMEState
from ._repertoire import AbstractRepertoire
from ._tessellation import AbstractTessellation


def device_mesh(num_devices: int | None = None, axis_name: str = "p") -> Mesh:
    """A 1-D mesh over the first `num_devices` devices (all by default), its axis named
    `axis_name` (the emitter's and `MAPElites`' `axis_name`)."""
    devices = jax.devices()
    n = len(devices) if num_devices is None else num_devices
    if not 1 <= n <= len(devices):
        raise ValueError(f"asked for {n} devices, {len(devices)} available")
    return Mesh(np.array(devices[:n]), (axis_name,))


def _check(algo: MAPElites | MOME, mesh: Mesh) -> str:
    (axis,) = mesh.axis_names
    if algo.axis_name != axis:
        raise ValueError(
            f"the algorithm's axis_name is {algo.axis_name!r}; build it with "
            f"axis_name={axis!r} (and the emitter's too) to run over this mesh"
        )
    return axis


def _split(state: MAPElitesState | MOMEState):
    """(replicated part, per-device emitter state) as (dynamic, static) pairs."""
    rest = eqx.tree_at(lambda s: s.emitter_state, state, None, is_leaf=is_none)
    return eqx.partition(rest, eqx.is_array), eqx.partition(state.emitter_state, eqx.is_array)


def _join(rest, emitter_state) -> MAPElitesState | MOMEState:
    return eqx.tree_at(lambda s: s.emitter_state, rest, emitter_state, is_leaf=is_none)


_add_axis = lambda tree: jax.tree.map(lambda x: x[None], tree)
_drop_axis = lambda tree: jax.tree.map(lambda x: x[0], tree)


def init_sharded(
    algo: MAPElites | MOME,
    genotypes,
    tessellation: AbstractTessellation | AbstractRepertoire,
    *,
    mesh: Mesh,
    key: PRNGKey,
    result: AbstractTessellation | None = None,
) -> tuple[MAPElitesState | MOMEState, QDMetrics | MOQDMetrics]:
    """`algo.init` over `mesh`: `genotypes` (leading axis divisible by the number of
    devices) are split among the devices, and the repertoire (over `tessellation`, or the
    repertoire given there, with the optional passive `result` grid as in `MAPElites.init`)
    holds every device's initial population. The returned state's emitter state has a
    leading device axis. `algo` (and its emitter) must use the mesh's axis name."""
    _check(algo, mesh)
    n, devices = batch_size_of(genotypes), mesh.devices.size
    if n % devices:
        raise ValueError(
            f"init_sharded: genotypes must have a leading axis divisible by the mesh's "
            f"{devices} devices, got {n}"
        )
    init = lambda share, k: algo.init(share, tessellation, key=k, result=result)
    return jit(lambda g, k: init_mapped(init, g, k, mesh=mesh))(genotypes, key)


def run_sharded(
    algo: MAPElites | MOME,
    state: MAPElitesState | MOMEState,
    num_iterations: int,
    *,
    mesh: Mesh,
    key: PRNGKey,
) -> tuple[MAPElitesState | MOMEState, QDMetrics | MOQDMetrics]:
    """`num_iterations` iterations of `algo.update` in one `lax.scan` on every device of
    `mesh`, from `state` (as `init_sharded` returns it). Iteration `i` uses
    `jax.random.split(key, num_iterations)[i]`.

    Returns the state (replicated repertoire, per-device emitter states) and the metrics
    history with a leading device axis: every row is the same, since the repertoires are.
    """
    check.positive_int("run_sharded: num_iterations", num_iterations)
    return scan_sharded(algo, state, mesh=mesh, keys=jr.split(key, num_iterations))


def scan_sharded(
    algo: MAPElites | MOME, state: MAPElitesState | MOMEState, *, mesh: Mesh, keys: Key[Array, " n"]
) -> tuple[MAPElitesState | MOMEState, QDMetrics | MOQDMetrics]:
    """`run_sharded` of `algo` from `state` on `mesh`, with the iterations' keys given:
    `keys` `(n,)`, one per iteration (a job that resumes mid-way derives each iteration's
    key from its index)."""
    _check(algo, mesh)
    if not eqx.is_array(keys) or keys.ndim != 1 or keys.shape[0] < 1:
        raise ValueError(
            f"scan_sharded: keys must be a 1-D array of keys, one per iteration, got "
            f"{getattr(keys, 'shape', type(keys).__name__)}"
        )
    (rest_dyn, rest_static), (es_dyn, es_static) = _split(state)
    rest_dyn, es_dyn, history = _run_mapped(
        algo, rest_dyn, es_dyn, keys, mesh, rest_static, es_static
    )
    return _join(eqx.combine(rest_dyn, rest_static), eqx.combine(es_dyn, es_static)), history


@jit
def _run_mapped(algo, rest_dyn, es_dyn, keys, mesh, rest_static, es_static):
    (axis,) = mesh.axis_names

    def body(rest, es, ks):
        state = _join(eqx.combine(rest, rest_static), eqx.combine(_drop_axis(es), es_static))
        state, history = filter_scan(lambda s, kk: algo.update(s, key=kk), state, ks)
        (new_rest, _), (new_es, _) = _split(state)
        return new_rest, _add_axis(new_es), _add_axis(history)

    mapped = jax.shard_map(
        body,
        mesh=mesh,
        in_specs=(P(), P(axis), P()),
        out_specs=(P(), P(axis), P(axis)),
        check_vma=False,
    )
    return mapped(rest_dyn, es_dyn, keys)


def place_sharded(state: MAPElitesState | MOMEState, *, mesh: Mesh) -> MAPElitesState | MOMEState:
    """Lay `state` out on `mesh` as `init_sharded` returns it (repertoire replicated,
    emitter state split along its leading device axis), from host arrays holding the whole
    state: a checkpoint read back. Across processes, each process gives the whole state and
    keeps its own devices' parts."""
    (axis,) = mesh.axis_names
    (rest_dyn, rest_static), (es_dyn, es_static) = _split(state)
    devices = mesh.devices.size
    for leaf in jax.tree.leaves(es_dyn):
        if leaf.ndim == 0 or leaf.shape[0] != devices:
            raise ValueError(
                f"place_sharded: state.emitter_state needs a leading axis of the mesh's "
                f"{devices} devices on every array, got shape {leaf.shape}"
            )

    rest = place_on(rest_dyn, NamedSharding(mesh, P()))
    es = place_on(es_dyn, NamedSharding(mesh, P(axis)))
    return _join(eqx.combine(rest, rest_static), eqx.combine(es, es_static))


def init_mapped(fn, genotypes, *args, mesh: Mesh):
    """Inside a jitted function: `fn(share, *args)` on every device of `mesh`, `share` its
    part of `genotypes` (split along the leading axis), `args` whole, where `fn` returns
    `(state, out)`: a `MAPElitesState` of an algorithm on the mesh's axis (replicated
    repertoire) and anything equal on every device (metrics, re-evaluations). Returns the
    state laid out as `init_sharded` returns it, and `out` (`init_sharded` is this with
    `algo.init`)."""
    (axis,) = mesh.axis_names
    g_dyn, g_static = eqx.partition(genotypes, eqx.is_array)
    a_dyn, a_static = eqx.partition(args, eqx.is_array)
    statics = {}

    def body(g, a):
        state, out = fn(eqx.combine(g, g_static), *eqx.combine(a, a_static))
        (rest_dyn, statics["rest"]), (es_dyn, statics["es"]) = _split(state)
        out_dyn, statics["out"] = eqx.partition(out, eqx.is_array)
        return rest_dyn, _add_axis(es_dyn), out_dyn

    mapped = jax.shard_map(
        body, mesh=mesh, in_specs=(P(axis), P()), out_specs=(P(), P(axis), P()), check_vma=False
    )
    rest_dyn, es_dyn, out_dyn = mapped(g_dyn, a_dyn)
    state = _join(eqx.combine(rest_dyn, statics["rest"]), eqx.combine(es_dyn, statics["es"]))
    return state, eqx.combine(out_dyn, statics["out"])


def step_mapped(fn, state: MAPElitesState | MOMEState, *args, mesh: Mesh):
    """Inside a jitted function: `fn(state, *args)` on every device of `mesh`, `state` laid
    out as `init_sharded` returns it, `args` whole, where `fn` returns `(new_state, out)`
    with `out` equal on every device (a scan of `MAPElites.step` on the mesh's axis and its
    records). Returns the new state in the same layout, and `out`."""
    (axis,) = mesh.axis_names
    (rest_dyn, rest_static), (es_dyn, es_static) = _split(state)
    a_dyn, a_static = eqx.partition(args, eqx.is_array)
    statics = {}

    def body(rest, es, a):
        s = _join(eqx.combine(rest, rest_static), eqx.combine(_drop_axis(es), es_static))
        s, out = fn(s, *eqx.combine(a, a_static))
        (new_rest, _), (new_es, _) = _split(s)
        out_dyn, statics["out"] = eqx.partition(out, eqx.is_array)
        return new_rest, _add_axis(new_es), out_dyn

    mapped = jax.shard_map(
        body,
        mesh=mesh,
        in_specs=(P(), P(axis), P()),
        out_specs=(P(), P(axis), P()),
        check_vma=False,
    )
    rest_dyn, es_dyn, out_dyn = mapped(rest_dyn, es_dyn, a_dyn)
    state = _join(eqx.combine(rest_dyn, rest_static), eqx.combine(es_dyn, es_static))
    return state, eqx.combine(out_dyn, statics["out"])
