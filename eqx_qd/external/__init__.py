"""Evaluators outside JAX: a user's Python function scores the candidates that
`MAPElites.ask` proposes, and `MAPElites.tell` takes the scores back.

- `evaluate_one`, `Outcome`, `Status`, `Evaluations`: one candidate's evaluation, checked
  where it ran, and a batch of them as arrays for `tell`.
- `SequentialPool`, `ProcessPool`, `DaskPool`: where a batch runs (this process, local
  processes, a Dask cluster), failures recorded per candidate, never raised.
- `ExternalTask`: the evaluator's shapes and bounds, and a scoring function for the compiled
  loop; `arm`, a NumPy example evaluator; `load_evaluator`, a function by its
  `package.module:function` name.

The job `eqx-qd run external` drives these with checkpoints, logs and resume.
"""

from ._evaluations import (
    evaluate_one as evaluate_one,
    Evaluations as Evaluations,
    Evaluator as Evaluator,
    evaluator_name as evaluator_name,
    load_evaluator as load_evaluator,
    Outcome as Outcome,
    Status as Status,
)
from ._pools import (
    AbstractPool as AbstractPool,
    DaskPool as DaskPool,
    ProcessPool as ProcessPool,
    SequentialPool as SequentialPool,
)
from ._task import arm as arm, ExternalTask as ExternalTask


# What `from eqx_qd.external import *` takes: the names above (tests/test_guards.py).
__all__ = [
    "AbstractPool",
    "arm",
    "DaskPool",
    "evaluate_one",
    "Evaluations",
    "Evaluator",
    "evaluator_name",
    "ExternalTask",
    "load_evaluator",
    "Outcome",
    "ProcessPool",
    "SequentialPool",
    "Status",
]
