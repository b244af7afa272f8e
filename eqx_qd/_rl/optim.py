"""Optimiser plumbing shared by the agents: the parameters an optimiser sees, Adam (plain, or
after gradient clipping) rebuilt from array hyperparameters at every step, soft target updates,
and hyperparameter range checks."""

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, PyTree

from .._misc import is_concrete


def _check_ranges(module: eqx.Module, ranges: dict[str, tuple[float, float]]) -> None:
    """Raise a ValueError naming the first concrete hyperparameter outside its range."""
    for name, (low, high) in ranges.items():
        value = getattr(module, name)
        if is_concrete(value) and not bool(jnp.all((value >= low) & (value <= high))):
            raise ValueError(
                f"{type(module).__name__}.{name} must lie in [{low}, {high}], got {value}"
            )


def _adam(learning_rate: Float[Array, ""]) -> optax.GradientTransformation:
    # Rebuilt from the (traced) learning rate at every step; Adam's state does not depend on it.
    return optax.adam(learning_rate)


def _params(module: PyTree) -> PyTree:
    return eqx.filter(module, eqx.is_inexact_array)


def _init_opt(module: PyTree) -> PyTree:
    return _adam(jnp.zeros((), jnp.float32)).init(_params(module))


def _apply_adam(module, grads, opt_state, learning_rate):
    with jax.numpy_dtype_promotion("standard"):
        updates, opt_state = _adam(learning_rate).update(grads, opt_state, _params(module))
        return eqx.apply_updates(module, updates), opt_state


def soft_update(target: PyTree, online: PyTree, tau: Float[Array, ""]) -> PyTree:
    """``target <- (1 - tau) * target + tau * online`` on the inexact array leaves."""
    return jax.tree.map(
        lambda t, o: (1.0 - tau) * t + tau * o if eqx.is_inexact_array(t) else t, target, online
    )


def _clipped_adam(learning_rate: Float[Array, ""], max_grad_norm: Float[Array, ""]):
    # Rebuilt from (traced) arrays at every step; the state's structure depends on neither.
    clip = optax.clip_by_global_norm(max_grad_norm)
    return optax.chain(clip, optax.adam(learning_rate, eps=1e-5))


def _init_clipped_adam(module: PyTree) -> PyTree:
    zero = jnp.zeros((), jnp.float32)
    return _clipped_adam(zero, zero).init(_params(module))


def _apply_clipped_adam(module, grads, opt_state, learning_rate, max_grad_norm):
    with jax.numpy_dtype_promotion("standard"):
        updates, opt_state = _clipped_adam(learning_rate, max_grad_norm).update(
            grads, opt_state, _params(module)
        )
        return eqx.apply_updates(module, updates), opt_state
