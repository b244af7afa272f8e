"""Ready-made `check=` functions for `jobs.option`: each takes `(key, value)` and raises a
`ValueError` (a `TypeError` for a value of the wrong type) that names the key and the value,
so a bad option stops the command before the run folder is made (an option without a check
lets a bad value reach the computation).

```python
samples: int = jobs.option(64, "samples per iteration", check=checks.positive_int)
mode: str = jobs.option("fast", "how to run", check=checks.one_of("fast", "exact"))
rate: float = jobs.option(0.1, "mutation rate", check=checks.between(0.0, 1.0))
```
"""

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from .. import _validate


Check = Callable[[str, Any], None]
"""`check(key, value)`: raises `ValueError` or `TypeError` naming `key` when `value` will not
do."""


def positive_int(key: str, value: Any) -> None:
    """An integer of at least 1."""
    _validate.positive_int(key, value)


def non_negative_int(key: str, value: Any) -> None:
    """An integer of at least 0."""
    _validate.non_negative_int(key, value)


def positive(key: str, value: Any) -> None:
    """A finite number above 0."""
    _validate.positive(key, value)


def non_negative(key: str, value: Any) -> None:
    """A finite number of at least 0."""
    _validate.non_negative(key, value)


def between(low: float, high: float) -> Check:
    """A number in `[low, high]`."""

    def check(key: str, value: Any) -> None:
        _validate.in_range(key, value, low, high)

    return check


@dataclasses.dataclass(frozen=True)
class Choices:
    """A check whose valid values can be listed, which `--help` shows after the option's help:
    `check(key, value)` refuses the others, `names()` lists them (read when asked, so names a
    plugin registers later are listed too). `one_of` and the registries' checks are these."""

    check: Check
    names: Callable[[], Sequence[str]]

    def __call__(self, key: str, value: Any) -> None:
        self.check(key, value)


def one_of(*choices: Any) -> Choices:
    """One of `choices`."""

    def check(key: str, value: Any) -> None:
        _validate.one_of(key, value, choices)

    return Choices(check, lambda: [str(c) for c in choices])


# What `from eqx_qd.jobs.checks import *` takes: the names above (tests/test_guards.py).
__all__ = [
    "between",
    "Check",
    "Choices",
    "non_negative",
    "non_negative_int",
    "one_of",
    "positive",
    "positive_int",
]
