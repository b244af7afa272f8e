"""The one family of input checks, used by every `__check_init__` and every job config.

Each check names what it checks (`TD3HParams.discount`, or a config key such as `cells`) and
the value it got. Checks are tracer-tolerant: inside `jit` / `vmap` a value cannot be read,
so it is not checked there (modules are validated when built eagerly, which is where users build
them; `eqx.tree_at` and transformations bypass `__init__` anyway). Array values are checked
element-wise, so a stacked population of hyperparameters is checked whole.
"""

import math
from collections.abc import Collection
from typing import Any

import equinox as eqx
import jax
import numpy as np


def is_concrete(x: Any) -> bool:
    """True when `x` holds a value that can be read now (not a tracer inside jit / vmap)."""
    return not isinstance(x, jax.core.Tracer)


def _values(value: Any) -> np.ndarray | None:
    """`value` as a float64 NumPy array, or `None` when it is traced (not checkable)."""
    if not is_concrete(value):
        return None
    return np.asarray(value, dtype=np.float64)


def _show(value: Any) -> str:
    arr = np.asarray(value)
    return repr(arr.item()) if arr.ndim == 0 else repr(arr.tolist())


def _interval(low: float, high: float) -> str:
    if math.isinf(high) and low == 0:
        return ">= 0"
    if math.isinf(high):
        return f">= {low}"
    return f"in [{low}, {high}]"


def finite(name: str, value: Any) -> None:
    """Every element of `value` is finite (no NaN, no +-inf)."""
    v = _values(value)
    if v is not None and not np.all(np.isfinite(v)):
        raise ValueError(f"{name} must be finite, got {_show(value)}")


def in_range(
    name: str, value: Any, low: float = -math.inf, high: float = math.inf, *, finite: bool = True
) -> None:
    """Every element of `value` lies in the closed interval `[low, high]` (and is finite
    unless `finite=False`; NaN always fails)."""
    v = _values(value)
    if v is None:
        return
    if finite and not np.all(np.isfinite(v)):
        raise ValueError(f"{name} must be finite and {_interval(low, high)}, got {_show(value)}")
    if not np.all((v >= low) & (v <= high)):
        if math.isinf(low) and math.isinf(high):
            raise ValueError(f"{name} must not be NaN, got {_show(value)}")
        if low == 0 and math.isinf(high):
            raise ValueError(f"{name} must be >= 0, got {_show(value)}")
        raise ValueError(f"{name} must lie in [{low}, {high}], got {_show(value)}")


def non_negative(name: str, value: Any, *, finite: bool = True) -> None:
    """Every element of `value` is `>= 0` (and finite unless `finite=False`)."""
    in_range(name, value, 0.0, math.inf, finite=finite)


def positive(name: str, value: Any, *, finite: bool = True) -> None:
    """Every element of `value` is `> 0` (and finite unless `finite=False`)."""
    v = _values(value)
    if v is None:
        return
    if (finite and not np.all(np.isfinite(v))) or not np.all(v > 0):
        raise ValueError(
            f"{name} must be positive{' and finite' if finite else ''}, got {_show(value)}"
        )


def fraction(name: str, value: Any) -> None:
    """Every element of `value` lies in `[0, 1]`."""
    in_range(name, value, 0.0, 1.0)


def integer(
    name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None
) -> None:
    """`value` is a Python (or NumPy) integer, not a bool, at least `minimum` and at most
    `maximum`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        if minimum == 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")
        if minimum == 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value}")


def positive_int(name: str, value: Any) -> None:
    """`value` is an integer `>= 1`."""
    integer(name, value, minimum=1)


def non_negative_int(name: str, value: Any) -> None:
    """`value` is an integer `>= 0`."""
    integer(name, value, minimum=0)


def one_of(name: str, value: Any, choices: Collection[Any]) -> None:
    """`value` is one of `choices`."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(map(repr, choices))}, got {value!r}")


def ordered(low_name: str, low: Any, high_name: str, high: Any, *, strict: bool = True) -> None:
    """`low < high` (`<=` unless `strict`) element-wise, when both can be read."""
    lo, hi = _values(low), _values(high)
    if lo is None or hi is None:
        return
    ok = np.all(lo < hi) if strict else np.all(lo <= hi)
    if not ok:
        sign = "<" if strict else "<="
        raise ValueError(
            f"{low_name} must be {sign} {high_name}, got {_show(low)} and {_show(high)}"
        )


def same_sizes(agent: Any, env: Any, where: str) -> None:
    """Refuse an `agent` whose observation or action size is not `env`'s, naming
    `where` and both sizes."""
    for size in ("observation_size", "action_size"):
        ours, theirs = getattr(agent, size), getattr(env, size)
        if ours != theirs:
            raise ValueError(
                f"{where}: the agent's {size} is {ours} but the environment's is {theirs}"
            )


def shape(name: str, value: Any, expected: tuple[int, ...]) -> None:
    """Refuse an array `value` whose shape is not `expected` (a static fact, so free under
    `jit`), naming `name`, the expected shape and the one received."""
    got = tuple(np.shape(value))
    if got != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)}, got {got}")


def rows(name: str, value: Any, row_shape: tuple[int, ...]) -> None:
    """Refuse an array `value` that is not a batch (a leading axis of any size) of rows of
    shape `row_shape`, naming `name` and both shapes (a static fact: free under `jit`)."""
    got = tuple(np.shape(value))
    shape(name, value, (got[0] if got else 0, *row_shape))


def same_rows(name: str, batch: Any, stored: Any, *, owner: str, noun: str = "rows") -> None:
    """Refuse a `batch` (leading batch axis) whose array leaves do not have the structure and
    the per-row shapes of `stored` (leading capacity axis), naming `name`, the leaf, the
    expected and the received shapes (static facts: free under `jit`)."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(eqx.filter(batch, eqx.is_array))
    stored_leaves, stored_def = jax.tree_util.tree_flatten_with_path(
        eqx.filter(stored, eqx.is_array)
    )
    if treedef != stored_def:
        raise ValueError(f"{name} must have the structure {owner} stores: {stored_def}")
    for (path, x), (_, s) in zip(leaves, stored_leaves):
        if x.shape[1:] != s.shape[1:]:
            raise ValueError(
                f"{name}{jax.tree_util.keystr(path)} must have {noun} of shape {s.shape[1:]} as "
                f"stored, got {x.shape[1:]}"
            )
