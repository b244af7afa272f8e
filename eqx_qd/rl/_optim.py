"""Optimiser plumbing shared by the agents: the parameters an optimiser sees, Adam (plain, or after
gradient clipping) rebuilt from array hyperparameters at every step, and soft target updates.

No optax object is ever stored in a module: the transformation is rebuilt inside the traced step
from the (traced) hyperparameter arrays, so a new learning rate reuses the compiled program and a
population can hold one learning rate per member. Public through `eqx_qd.internal`.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, PyTree


def params_of(module: PyTree) -> PyTree:
    """The inexact array leaves of `module` (what an optimiser updates); the rest is `None`."""
    return eqx.filter(module, eqx.is_inexact_array)


def _adam(learning_rate: Float[Array, ""]) -> optax.GradientTransformation:
    return optax.adam(learning_rate)


def init_adam(module: PyTree) -> PyTree:
    """A fresh Adam state (zero moments) for the parameters of `module`. Adam's state does not
    depend on the learning rate, so one state serves any rate `apply_adam` is later given."""
    return _adam(jnp.zeros((), jnp.float32)).init(params_of(module))


def apply_adam(
    module: PyTree, grads: PyTree, opt_state: PyTree, learning_rate: Float[Array, ""]
) -> tuple[PyTree, PyTree]:
    """One Adam step on `module` with gradients `grads` (shaped like `params_of(module)`),
    from optimiser state `opt_state`, at `learning_rate`.

    **Returns:** the updated module and optimiser state.
    """
    with jax.numpy_dtype_promotion("standard"):
        updates, opt_state = _adam(learning_rate).update(grads, opt_state, params_of(module))
        return eqx.apply_updates(module, updates), opt_state


def _clipped_adam(
    learning_rate: Float[Array, ""], max_grad_norm: Float[Array, ""], eps: float = 1e-5
) -> optax.GradientTransformation:
    clip = optax.clip_by_global_norm(max_grad_norm)
    return optax.chain(clip, optax.adam(learning_rate, eps=eps))


def init_clipped_adam(module: PyTree) -> PyTree:
    """A fresh state for Adam after clipping by global norm (PPO's optimiser). The state does
    not depend on Adam's `eps`, which `apply_clipped_adam` takes."""
    zero = jnp.zeros((), jnp.float32)
    return _clipped_adam(zero, zero).init(params_of(module))


def apply_clipped_adam(
    module: PyTree,
    grads: PyTree,
    opt_state: PyTree,
    learning_rate: Float[Array, ""],
    max_grad_norm: Float[Array, ""],
    eps: float = 1e-5,
) -> tuple[PyTree, PyTree]:
    """Clip `grads` to global norm `max_grad_norm`, then one Adam step (its denominator's
    `eps`: 1e-5 as in PPO's common implementations; optax's own default is 1e-8) on `module`
    from `opt_state` at `learning_rate`.

    **Returns:** the updated module and optimiser state.
    """
    with jax.numpy_dtype_promotion("standard"):
        updates, opt_state = _clipped_adam(learning_rate, max_grad_norm, eps).update(
            grads, opt_state, params_of(module)
        )
        return eqx.apply_updates(module, updates), opt_state


def soft_update(target: PyTree, online: PyTree, tau: Float[Array, ""]) -> PyTree:
    """`target <- (1 - tau) * target + tau * online` on the inexact array leaves (Polyak
    averaging of target networks); other leaves are kept from `target`."""
    return jax.tree.map(
        lambda t, o: (1.0 - tau) * t + tau * o if eqx.is_inexact_array(t) else t, target, online
    )
