import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given, strategies as st

import eqx_qd as q


CAPACITY = 8
insert = eqx.filter_jit(lambda b, x: b.insert(x))
sample = eqx.filter_jit(lambda b, k: b.sample(64, key=k))


def _ids(start, n):
    """Items whose value is their global insertion number."""
    return {"id": jnp.arange(start, start + n, dtype=jnp.int32)}


@given(sizes=st.lists(st.integers(1, 11), min_size=1, max_size=6), seed=st.integers(0, 2**31 - 1))
def test_buffer_keeps_the_newest_items(sizes, seed):
    buf = q.rl.ReplayBuffer.empty(CAPACITY, {"id": jnp.zeros((), jnp.int32)})
    total = 0
    for n in sizes:
        buf = insert(buf, _ids(total, n))
        total += n
        assert int(buf.size) == min(total, CAPACITY)
    stored = set(np.asarray(buf.data["id"])[: int(buf.size)].tolist())
    newest = set(range(max(0, total - CAPACITY), total))
    assert stored == newest
    drawn = np.asarray(sample(buf, jr.key(seed))["id"])
    assert set(drawn.tolist()) <= newest


def test_vmapped_buffers_are_independent(getkey):
    make = lambda _: q.rl.ReplayBuffer.empty(4, jnp.zeros(2))
    bufs = eqx.filter_vmap(make)(jnp.arange(3))
    batches = jnp.arange(3 * 5 * 2, dtype=jnp.float32).reshape(3, 5, 2)
    bufs = eqx.filter_vmap(lambda b, x: b.insert(x))(bufs, batches)
    for i in range(3):
        one = q.rl.ReplayBuffer.empty(4, jnp.zeros(2)).insert(batches[i])
        np.testing.assert_array_equal(bufs.data[i], one.data)
        assert int(bufs.size[i]) == 4 and int(bufs.position[i]) == int(one.position)
    samples = eqx.filter_vmap(lambda b, k: b.sample(6, key=k))(bufs, jr.split(getkey(), 3))
    for i in range(3):
        assert set(map(tuple, np.asarray(samples[i]).tolist())) <= set(
            map(tuple, np.asarray(bufs.data[i]).tolist())
        )


def test_buffer_in_scan_and_transitions(getkey):
    t = q.envs.Transition(
        obs=jnp.zeros(3), action=jnp.zeros(2), reward=jnp.zeros(()), next_obs=jnp.zeros(3),
        terminated=jnp.zeros(()), truncated=jnp.zeros(()),
    )  # fmt: skip
    buf = q.rl.ReplayBuffer.empty(16, t)

    def step(b, i):
        x = jax.tree.map(lambda leaf: jnp.full((2,) + leaf.shape, i, jnp.float32), t)
        return b.insert(x), None

    buf, _ = jax.lax.scan(step, buf, jnp.arange(5.0))
    assert int(buf.size) == 10 and buf.data.obs.shape == (16, 3)
    batch = buf.sample(32, key=getkey())
    assert isinstance(batch, q.envs.Transition) and batch.reward.shape == (32,)
    assert float(batch.reward.max()) <= 4.0


def test_empty_buffer_errors():
    with pytest.raises(ValueError, match="capacity"):
        q.rl.ReplayBuffer.empty(0, jnp.zeros(1))
    buf = q.rl.ReplayBuffer.empty(4, jnp.zeros(1))
    with pytest.raises(ValueError, match="cannot sample from an empty replay buffer"):
        buf.sample(2, key=jr.key(0))
    # Compiled, no check (a host callback would keep the program out of the persistent
    # cache): the rows are NaN, and once something is inserted they are its.
    assert bool(jnp.all(jnp.isnan(sample(buf, jr.key(0)))))
    full = buf.insert(jnp.ones((1, 1)))
    np.testing.assert_array_equal(sample(full, jr.key(0)), np.ones((64, 1)))


masked_insert = eqx.filter_jit(lambda b, x, m: b.insert(x, mask=m))


@given(
    masks=st.lists(st.lists(st.booleans(), min_size=6, max_size=6), min_size=1, max_size=5),
)
def test_masked_insert_keeps_exactly_the_newest_kept_rows(masks):
    buf = q.rl.ReplayBuffer.empty(CAPACITY, {"id": jnp.zeros((), jnp.int32)})
    kept, total = [], 0
    for mask in masks:
        buf = masked_insert(buf, _ids(total, 6), jnp.asarray(mask, jnp.float32))
        kept += [total + i for i, m in enumerate(mask) if m]
        total += 6
        assert int(buf.size) == min(len(kept), CAPACITY)
    stored = np.asarray(buf.data["id"])[: int(buf.size)].tolist()
    assert set(stored) == set(kept[-CAPACITY:])
    # Kept rows go in order: the newest sits just before the write position.
    if kept:
        assert int(buf.data["id"][(int(buf.position) - 1) % CAPACITY]) == kept[-1]


def test_mask_shape_is_checked():
    buf = q.rl.ReplayBuffer.empty(CAPACITY, {"id": jnp.zeros((), jnp.int32)})
    with pytest.raises(ValueError, match="mask must have shape"):
        buf.insert(_ids(0, 3), mask=jnp.ones(4))


def test_sampling_draws_every_stored_row_and_nothing_else():
    # (Found by mutation testing: a draw range that skipped the first row, or reached one past
    # a single stored row, passed every other test.)
    buf = q.rl.ReplayBuffer.empty(CAPACITY, {"id": jnp.zeros((), jnp.int32)})
    one = insert(buf, _ids(7, 1))
    assert set(np.asarray(sample(one, jr.key(0))["id"]).tolist()) == {7}
    three = insert(buf, _ids(0, 3))
    drawn = np.asarray(sample(three, jr.key(1))["id"])
    assert set(drawn.tolist()) == {0, 1, 2}  # 64 draws: missing one has probability < 1e-10
