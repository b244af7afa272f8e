import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, strategies as st

import eqx_qd as q


T = 12
gae = jax.jit(q.rl.gae)


def slow_gae(rewards, values, next_values, terminated, truncated, gamma, lam):
    """The textbook definition, one step at a time, for one environment."""
    adv = np.zeros(T)
    for t in range(T):
        total, discount = 0.0, 1.0
        for k in range(t, T):
            bootstrap = 0.0 if terminated[k] else next_values[k]
            delta = rewards[k] + gamma * bootstrap - values[k]
            total += discount * delta
            if terminated[k] or truncated[k]:
                break
            discount *= gamma * lam
        adv[t] = total
    return adv


floats = st.floats(-5, 5, allow_subnormal=False, width=32)


@given(
    rewards=st.lists(floats, min_size=T, max_size=T),
    values=st.lists(floats, min_size=T, max_size=T),
    next_values=st.lists(floats, min_size=T, max_size=T),
    ends=st.lists(st.sampled_from([0, 1, 2]), min_size=T, max_size=T),  # none / term / trunc
    gamma=st.floats(0.5, 1.0),
    lam=st.floats(0.0, 1.0),
)
def test_gae_matches_the_definition(rewards, values, next_values, ends, gamma, lam):
    ends = np.asarray(ends)
    terminated, truncated = (ends == 1).astype(np.float32), (ends == 2).astype(np.float32)
    args = [np.asarray(x, np.float32) for x in (rewards, values, next_values)]
    adv, targets = gae(*args, terminated, truncated, np.float32(gamma), np.float32(lam))
    expected = slow_gae(*args, terminated, truncated, gamma, lam)
    np.testing.assert_allclose(adv, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(targets, expected + args[1], rtol=1e-4, atol=1e-4)


def test_gae_batches_over_trailing_axes():
    key = jax.random.key(0)
    r, v, nv = jax.random.normal(key, (3, T, 4, 2))
    term = jnp.zeros((T, 4, 2)).at[5].set(1.0)
    trunc = jnp.zeros((T, 4, 2)).at[-1].set(1.0)
    adv, _ = gae(r, v, nv, term, trunc, 0.99, 0.95)
    one, _ = gae(r[:, 1, 0], v[:, 1, 0], nv[:, 1, 0], term[:, 1, 0], trunc[:, 1, 0], 0.99, 0.95)
    np.testing.assert_allclose(adv[:, 1, 0], one, rtol=1e-6)
