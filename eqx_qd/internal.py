"""Helpers for extending eqx_qd: what the library's own modules use, for your emitters, agents
and environments.

- **dtypes**: `f32`, `i32`: converters that pin float32 / int32 arrays (use them for
  hyperparameter fields: no weak types, no retrace when a value changes).
- **pytrees of populations** (array leaves with a leading batch axis; non-array leaves such as an
  MLP's activation pass through): `batch_size_of`, `tree_take`, `tree_scatter`, `tree_slice`,
  `tree_concatenate`, `tree_zeros_batch`, `tree_all_gather`; `random_permutation` (a fast
  uniform shuffle, for minibatches).
- **loops over modules**: `filter_scan`, `filter_cond`, `filter_while_loop`: ``lax`` control
  flow whose carry may hold non-array leaves (checked unchanged).
- **optimisers**: `params_of`, `init_adam` / `apply_adam`, `init_clipped_adam` /
  `apply_clipped_adam`, `soft_update`: optax rebuilt from array hyperparameters inside the
  step, so nothing optax is stored in a module.
- **the agent contract**: `check_agent`, `check_spaces` (what `PBT` and `PBTEmitter` check of
  an agent, callable on yours), `check_off_policy_fields`.
- **validation** (`check`): the one family of tracer-tolerant input checks (``check.positive_int``,
  ``check.fraction``, ``check.in_range``, ``check.finite``...) every ``__check_init__`` uses.

Semi-public: documented and tested, but it may change faster than the top-level API.
"""

from . import _validate as check
from ._misc import (
    batch_size_of as batch_size_of,
    f32 as f32,
    filter_cond as filter_cond,
    filter_scan as filter_scan,
    filter_while_loop as filter_while_loop,
    i32 as i32,
    random_permutation as random_permutation,
    tree_all_gather as tree_all_gather,
    tree_concatenate as tree_concatenate,
    tree_scatter as tree_scatter,
    tree_slice as tree_slice,
    tree_take as tree_take,
    tree_zeros_batch as tree_zeros_batch,
)
from ._validate import is_concrete as is_concrete
from .rl._base import check_agent as check_agent, check_spaces as check_spaces
from .rl._off_policy import check_off_policy_fields as check_off_policy_fields
from .rl._optim import (
    apply_adam as apply_adam,
    apply_clipped_adam as apply_clipped_adam,
    init_adam as init_adam,
    init_clipped_adam as init_clipped_adam,
    params_of as params_of,
    soft_update as soft_update,
)


__all__ = [
    "apply_adam",
    "apply_clipped_adam",
    "batch_size_of",
    "check",
    "check_agent",
    "check_off_policy_fields",
    "check_spaces",
    "f32",
    "filter_cond",
    "filter_scan",
    "filter_while_loop",
    "i32",
    "init_adam",
    "init_clipped_adam",
    "is_concrete",
    "params_of",
    "random_permutation",
    "soft_update",
    "tree_all_gather",
    "tree_concatenate",
    "tree_scatter",
    "tree_slice",
    "tree_take",
    "tree_zeros_batch",
]
