"""Pytree helpers used across the package: array-only indexing and scattering (non-array leaves
such as an MLP's activation pass through), and `scan` / `cond` / `while_loop` over carries
that hold non-array leaves. Public through `eqx_qd.internal`."""

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PyTree, Shaped

from ._custom_types import PRNGKey


_T = TypeVar("_T")
_Y = TypeVar("_Y")


def f32(x: ArrayLike) -> Array:
    """Converter pinning a float32 array (avoids weak types and Python-float retraces)."""
    return jnp.asarray(x, jnp.float32)


def i32(x: ArrayLike) -> Array:
    """Converter pinning an int32 array."""
    return jnp.asarray(x, jnp.int32)


def is_none(x: object) -> bool:
    """`x is None`: the `is_leaf` that lets `eqx.tree_at` replace (or put back) fields
    that hold `None`, such as a stored state's optimiser states."""
    return x is None


def batch_size_of(tree: PyTree) -> int:
    """Leading-axis size shared by the array leaves of `tree`."""
    leaves = [x for x in jax.tree.leaves(tree) if eqx.is_array(x)]
    if not leaves:
        raise ValueError("the pytree has no array leaves, so it has no batch axis")
    sizes = {x.shape[0] if x.ndim else None for x in leaves}
    if len(sizes) != 1 or None in sizes:
        raise ValueError(f"array leaves must share a leading batch axis; got leading sizes {sizes}")
    return sizes.pop()


def random_permutation(n: int, *, key: PRNGKey) -> Int[Array, " {n}"]:
    """A uniformly random permutation of `range(n)` (int32), for reshuffling minibatches.

    Each round sorts one uint32 array: the round's random bits above, each position's index in
    the low bits. XLA's CPU sorts one integer operand several times faster than the key-value
    sort behind `jax.random.permutation` (`benchmarks/log/measurements-behind-the-code.md`).
    Items whose random bits tie keep the previous round's order, so rounds are added until a
    pair tied in every round is unlikely (probability at most 2**-9 over all pairs); with fewer
    than 8 random bits left (over 2**24 items) it falls back to `jax.random.permutation`.
    """
    if n <= 1:
        return jnp.arange(n, dtype=jnp.int32)
    index_bits = (n - 1).bit_length()
    random_bits = 32 - index_bits
    if random_bits < 8:
        return jax.random.permutation(key, n).astype(jnp.int32)
    # n^2 / 2 pairs, each tied in every round with probability 2^-(rounds * random_bits).
    rounds = -(-(2 * index_bits + 8) // random_bits)
    low = jnp.uint32(2**index_bits - 1)
    position = jnp.arange(n, dtype=jnp.uint32)
    perm = None
    for k in jax.random.split(key, rounds):
        packed = (jax.random.bits(k, (n,), jnp.uint32) & ~low) | position
        order = jax.lax.sort(packed) & low
        perm = order if perm is None else perm[order]  # the first round needs no gather
    return perm.astype(jnp.int32)


def most_frequent(x: Shaped[Array, "batch n ..."]) -> Shaped[Array, "batch ..."]:
    """Per row of `x` (and per trailing coordinate), the most frequent of its `n` values along
    axis 1; the smallest among equally frequent ones (the first of `jnp.unique`'s sorted values
    with the top count, as QDax's modes take it). Pairwise counts: for a few values per row."""
    counts = jnp.sum(x[:, :, None] == x[:, None, :], axis=2)
    top = counts == jnp.max(counts, axis=1, keepdims=True)
    fill = jnp.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).max
    return jnp.min(jnp.where(top, x, fill), axis=1)


def tree_take(tree: _T, idx: Int[Array, "..."] | int) -> _T:
    """Index the leading axis of every array leaf of `tree` with `idx` (an int or an int
    array); non-array leaves pass through (P8: `x[idx]` fails on an MLP's activation)."""
    return jax.tree.map(lambda x: x[idx] if eqx.is_array(x) else x, tree)


def tree_scatter(tree: _T, idx: Int[Array, " batch"], values: _T) -> _T:
    """Write the rows of `values` into `tree` at `idx` along the leading axis;
    out-of-range indices are dropped (a cheap way to skip rows)."""

    def put(x, v):
        if not eqx.is_array(x):
            return x
        if v.dtype != x.dtype:  # typed keys have no astype; they only ever meet their own dtype
            v = v.astype(x.dtype)
        return x.at[idx].set(v, mode="drop")

    return jax.tree.map(put, tree, values)


def tree_concatenate(trees: Sequence[_T]) -> _T:
    """Concatenate pytrees of one structure along the leading axis of their array leaves."""
    return jax.tree.map(lambda *xs: jnp.concatenate(xs) if eqx.is_array(xs[0]) else xs[0], *trees)


def tree_slice(tree: _T, start: int, stop: int) -> _T:
    """Rows `start:stop` of every array leaf of `tree` (static bounds)."""
    return jax.tree.map(lambda x: x[start:stop] if eqx.is_array(x) else x, tree)


def tree_all_gather(tree: _T, axis_name: str | None) -> _T:
    """Concatenate every device's rows of the array leaves of `tree` over the mapped axis
    `axis_name` (inside `shard_map`); the identity when `axis_name` is `None`."""
    if axis_name is None:
        return tree
    gather = lambda x: jax.lax.all_gather(x, axis_name, tiled=True)
    return jax.tree.map(lambda x: gather(x) if eqx.is_array(x) else x, tree)


def tree_top_k(
    tree: _T, values: Float[Array, " n"], k: int, *, chunk: int, axis_name: str | None
) -> tuple[_T, Float[Array, " {k}"]]:
    """The `k` rows of `tree` (a batch of `n` rows) with the largest `values` among every
    device's rows over the mapped axis `axis_name` (inside `shard_map`; this device's alone
    when `None`), best first, ties in the order (device, row), and their values; every device
    gets the same. Fewer than `k` rows in all: the rest are copies of a row, valued `-inf`.

    The global top `k` lies in the union of every device's local top `k`, so only those are
    gathered: `chunk` local ranks at a time (a loop, so one chunk's rows are alive at once,
    the rows being whole training runs), each merged into the running best. The same set and
    order whatever `chunk`; padding rows (past a device's top `k`) and placeholders sort after
    every real row and never survive a merge."""
    n = values.shape[0]
    m = min(k, n)
    chunk = min(chunk, m)
    steps = -(-m // chunk)
    local = jnp.argsort(-values, stable=True)[:m]
    local = jnp.concatenate([local, jnp.zeros(steps * chunk - m, local.dtype)])
    if axis_name is None:
        device, devices = jnp.asarray(0, jnp.int32), 1
    else:
        device = jnp.asarray(jax.lax.axis_index(axis_name), jnp.int32)
        devices = jax.lax.axis_size(axis_name)

    def gather(i):
        rows = jax.lax.dynamic_slice(local, (i * chunk,), (chunk,))
        ranks = i * chunk + jnp.arange(chunk, dtype=jnp.int32)
        real = ranks < m
        found = jnp.where(real, values[rows], -jnp.inf)
        owner = jnp.where(real, device, devices)  # padding: after every device
        return tree_all_gather((tree_take(tree, rows), found, owner, ranks), axis_name)

    def merge(found, best):
        if best is not None:
            found = tree_concatenate([best, found])
        _, found_values, owners, ranks = found
        order = jnp.lexsort((ranks, owners, -found_values))[:k]
        return tree_take(found, order)

    first = gather(0)
    best = merge(first, None)
    if best[1].shape[0] < k:  # too few rows yet: placeholders, sorted last
        short = k - best[1].shape[0]
        filler = (
            tree_take(first[0], jnp.zeros(short, jnp.int32)),
            jnp.full(short, -jnp.inf, jnp.float32),
            jnp.full(short, devices + 1, jnp.int32),
            jnp.zeros(short, jnp.int32),
        )
        best = tree_concatenate([best, filler])
    if steps > 1:
        dynamic, fixed = eqx.partition(best, eqx.is_array)
        dynamic = jax.lax.fori_loop(
            1,
            steps,
            lambda i, d: eqx.filter(merge(gather(i), eqx.combine(d, fixed)), eqx.is_array),
            dynamic,
        )
        best = eqx.combine(dynamic, fixed)
    return best[0], best[1]


def tree_zeros_batch(example: _T, n: int) -> _T:
    """A batch of `n` zero rows shaped like one unbatched `example`."""
    return jax.tree.map(
        lambda x: jnp.zeros((n,) + jnp.shape(x), jnp.result_type(x)) if eqx.is_array(x) else x,
        example,
    )


def filter_scan(
    f: Callable[[_T, Any], tuple[_T, _Y]], init: _T, xs: PyTree, length: int | None = None
) -> tuple[_T, _Y]:
    """`jax.lax.scan` of `f(carry, x) -> (carry, y)` from `init` over `xs` (or
    `length` steps), whose carry may hold non-array leaves (functions, Python scalars).

    The static part of the carry is split off once and must come back unchanged from `f`.
    """
    dynamic, static = eqx.partition(init, eqx.is_array)

    def body(carry, x):
        out, y = f(eqx.combine(carry, static), x)
        new_dynamic, new_static = eqx.partition(out, eqx.is_array)
        _check_static(new_static, static, "scan carry")
        return new_dynamic, y

    dynamic, ys = jax.lax.scan(body, dynamic, xs, length=length)
    return eqx.combine(dynamic, static), ys


def _check_static(new_static: Any, static: Any, where: str) -> None:
    if not eqx.tree_equal(new_static, static):
        raise ValueError(f"the non-array part of the {where} changed inside the loop")


def filter_cond(
    pred: ArrayLike, true_fun: Callable[..., _T], false_fun: Callable[..., _T], *operands: Any
) -> _T:
    """`jax.lax.cond`: `true_fun(*operands)` if `pred` else `false_fun(*operands)`, where
    operands and results may hold non-array leaves.

    Both branches must return the same non-array part (checked at trace time).
    """
    dynamic, static = eqx.partition(operands, eqx.is_array)
    statics: list[Any] = []

    def branch(fun):
        def run(d):
            out_dynamic, out_static = eqx.partition(fun(*eqx.combine(d, static)), eqx.is_array)
            statics.append(out_static)
            return out_dynamic

        return run

    out = jax.lax.cond(pred, branch(true_fun), branch(false_fun), dynamic)
    _check_static(statics[1], statics[0], "cond's result (the branches disagree)")
    return eqx.combine(out, statics[0])


def filter_while_loop(cond_fun: Callable[[_T], Any], body_fun: Callable[[_T], _T], init: _T) -> _T:
    """`jax.lax.while_loop`: `body_fun` from `init` while `cond_fun` holds, where the
    carry may hold non-array leaves; `body_fun` must return the same non-array part it was
    given (checked at trace time)."""
    dynamic, static = eqx.partition(init, eqx.is_array)

    def body(d):
        new_dynamic, new_static = eqx.partition(body_fun(eqx.combine(d, static)), eqx.is_array)
        _check_static(new_static, static, "while_loop carry")
        return new_dynamic

    out = jax.lax.while_loop(lambda d: cond_fun(eqx.combine(d, static)), body, dynamic)
    return eqx.combine(out, static)


def place_on(tree: _T, sharding: Any) -> _T:
    """`tree`'s arrays laid out with `sharding` (a `NamedSharding`), whether they are host
    values, arrays on one device, or arrays already spread over the mesh. Across processes,
    every process gives the same values for a host or one-device array and keeps its own
    devices' parts (`jax.device_put` cannot take those to other processes' devices); typed
    keys travel as their data."""
    import numpy as np

    def put(x: Any) -> Any:
        if not eqx.is_array(x):
            return x
        is_key = jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
        data = jax.random.key_data(x) if is_key else x
        if isinstance(data, jax.Array) and not data.is_fully_addressable:
            placed = jax.device_put(data, sharding)
        else:
            host = np.asarray(data)
            placed = jax.make_array_from_callback(host.shape, sharding, lambda i: host[i])
        return jax.random.wrap_key_data(placed, impl=jax.random.key_impl(x)) if is_key else placed

    return jax.tree.map(put, tree)


def from_first_device(tree: _T, axis_name: str) -> _T:
    """`tree` as the first device along `axis_name` holds it, on every device (inside
    `shard_map`): one all-gather per array."""
    take = lambda x: jax.lax.all_gather(x, axis_name)[0] if eqx.is_array(x) else x
    return jax.tree.map(take, tree)


def device_share(minibatch_size: int, axis_name: str | None, where: str) -> int:
    """Each device's rows of a data-parallel minibatch of `minibatch_size` over `axis_name`
    (inside `shard_map`; all of them without an axis). A size the devices cannot share is
    refused, naming `where`."""
    if axis_name is None:
        return minibatch_size
    devices = jax.lax.axis_size(axis_name)
    if minibatch_size % devices:
        raise ValueError(
            f"{where}: td3.minibatch_size ({minibatch_size}) must split over the {devices} "
            f"devices of axis {axis_name!r} (a multiple of the count)"
        )
    return minibatch_size // devices


def poison_if_empty(tree, empty: Bool[Array, ""]):
    """`tree` with every floating leaf NaN where `empty`: what a draw from an empty store
    (repertoire, replay buffer) gives inside a compiled program.

    The check there is not an error: `eqx.error_if` reports through a host callback, and a
    program holding one is never written to JAX's persistent compilation cache (every job's
    second process compiled it again) and fails on a machine without a CPU device
    (`JAX_PLATFORMS=cuda`). NaN propagates instead: offspring of NaN parents score NaN and
    are never stored, a learner trained on NaN rows shows NaN losses. Called eagerly, the
    stores raise a `ValueError` first."""

    def poison(x):
        if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating):
            return jnp.where(empty, jnp.nan, x)
        return x

    return jax.tree.map(poison, tree)
