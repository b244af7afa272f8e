"""One candidate's evaluation by a user's Python function, and a batch of them.

The evaluator is any Python callable `evaluator(genotype) -> (fitness, descriptor)`: a float
and a sequence of `num_descriptors` floats, for one genotype (a NumPy array). What it returns
is checked here, in the process that ran it, so that a bad return is recorded against its
candidate (`Status.INVALID`, with the reason) rather than failing the batch.
"""

import contextlib
import dataclasses
import enum
import importlib
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np


Evaluator = Callable[[np.ndarray], tuple[float, Sequence[float]]]
"""`evaluator(genotype) -> (fitness, descriptor)`, for one genotype."""


class Status(enum.IntEnum):
    """How a candidate's evaluation ended. Every status but `OK` gives the candidate a
    fitness of -inf and NaN descriptors: the repertoire refuses it."""

    OK = 0
    """The evaluator returned a finite fitness and descriptor of the right width."""
    ERROR = 1
    """The evaluator raised an exception (kept as the error)."""
    TIMEOUT = 2
    """The evaluation ran past the pool's timeout and was stopped."""
    INVALID = 3
    """The evaluator returned something that is not a finite `(fitness, descriptor)` of the
    run's width (the error says what)."""
    CRASHED = 4
    """The process evaluating it died (killed, out of memory, a crash in C) more times than
    the pool's `retries`."""

    @property
    def label(self) -> str:
        """The lower-case name written to logs: `ok`, `error`, `timeout`, ..."""
        return self.name.lower()


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One candidate's evaluation: its `status`, `fitness` (-inf unless `OK`), `descriptor`
    (`(num_descriptors,)`, NaN unless `OK`), the `seconds` it took, the `attempts` made (more
    than 1 when a dead worker's candidate was run again) and the `error` (empty when `OK`)."""

    status: Status
    fitness: float
    descriptor: tuple[float, ...]
    seconds: float
    attempts: int = 1
    error: str = ""

    @classmethod
    def failed(
        cls, status: Status, error: str, num_descriptors: int, seconds: float, attempts: int = 1
    ) -> "Outcome":
        """A failed evaluation: -inf fitness, NaN descriptor, the `error` kept."""
        nan = (math.nan,) * num_descriptors
        return cls(Status(status), -math.inf, nan, float(seconds), attempts, error)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able record (the journal of a run); `from_json` reads it back."""
        return dict(
            status=self.status.label,
            fitness=self.fitness,
            descriptor=list(self.descriptor),
            seconds=self.seconds,
            attempts=self.attempts,
            error=self.error,
        )

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> "Outcome":
        status = Status[str(record["status"]).upper()]
        descriptor = tuple(float(x) for x in record["descriptor"])
        return cls(
            status,
            float(record["fitness"]),
            descriptor,
            float(record["seconds"]),
            int(record["attempts"]),
            str(record["error"]),
        )


@dataclasses.dataclass(frozen=True)
class Evaluations:
    """A batch's outcomes as arrays, in the order of the candidates (whatever order they
    finished in): `fitnesses` `(n,)` float32 (-inf where failed), `descriptors`
    `(n, num_descriptors)` float32 (NaN where failed), `status` `(n,)` int8 (`Status`),
    `seconds` `(n,)`, `attempts` `(n,)` and `errors` (n strings, empty when `OK`).
    `fitnesses` and `descriptors` go to `MAPElites.tell` as they are."""

    fitnesses: np.ndarray
    descriptors: np.ndarray
    status: np.ndarray
    seconds: np.ndarray
    attempts: np.ndarray
    errors: tuple[str, ...]

    @classmethod
    def of(cls, outcomes: Sequence[Outcome], num_descriptors: int) -> "Evaluations":
        """The batch of `outcomes`, each with `num_descriptors` descriptors."""
        n = len(outcomes)
        descriptors = np.full((n, num_descriptors), np.nan, np.float32)
        for i, o in enumerate(outcomes):
            descriptors[i] = o.descriptor
        return cls(
            np.asarray([o.fitness for o in outcomes], np.float32).reshape(n),
            descriptors,
            np.asarray([int(o.status) for o in outcomes], np.int8).reshape(n),
            np.asarray([o.seconds for o in outcomes], np.float64).reshape(n),
            np.asarray([o.attempts for o in outcomes], np.int32).reshape(n),
            tuple(o.error for o in outcomes),
        )

    @property
    def failed(self) -> int:
        """How many candidates did not end `OK`."""
        return int(np.sum(self.status != Status.OK))

    def outcome(self, i: int) -> Outcome:
        """Candidate `i`'s `Outcome`."""
        return Outcome(
            Status(int(self.status[i])),
            float(self.fitnesses[i]),
            tuple(float(x) for x in self.descriptors[i]),
            float(self.seconds[i]),
            int(self.attempts[i]),
            self.errors[i],
        )


def evaluator_name(evaluator: Any) -> str:
    """How errors name an evaluator: `module:qualname` where it has one."""
    inner = getattr(evaluator, "func", evaluator)  # functools.partial
    module = getattr(inner, "__module__", None)
    name = getattr(inner, "__qualname__", None) or type(inner).__name__
    return f"{module}:{name}" if module else repr(evaluator)


def load_evaluator(spec: str) -> Evaluator:
    """The function `spec` names, `"package.module:function"` (the current directory is
    searched too, as for `python -m`). Errors name what is missing."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"evaluator {spec!r}: expected 'package.module:function'")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"evaluator {spec!r}: cannot import {module_name!r} ({e})") from e
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ValueError(f"evaluator {spec!r}: {module_name!r} has no {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"evaluator {spec!r} is not callable: {type(target).__name__}")
    return target


class _Timeout(BaseException):
    """Raised in the evaluating thread when its alarm rings (a BaseException, so that the
    evaluator's own `except Exception` does not swallow it)."""


@contextlib.contextmanager
def alarm(seconds: float | None) -> Iterator[bool]:
    """Within the block, raise `_Timeout` after `seconds` (POSIX main thread only; elsewhere
    nothing happens). Yields whether the alarm is set."""
    usable = (
        seconds is not None
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield False
        return

    def ring(signum, frame):
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, float(seconds))
    try:
        yield True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, previous)


def _scalar(x: Any) -> float:
    a = np.asarray(x, dtype=np.float64)
    if a.size != 1:
        raise ValueError(f"a fitness of shape {a.shape}, not a number")
    return float(a.reshape(()))


def evaluate_one(
    evaluator: Evaluator,
    genotype: np.ndarray,
    num_descriptors: int,
    timeout: float | int | None = None,
) -> Outcome:
    """Run `evaluator` on one `genotype` and check what it returns: a finite fitness and a
    finite descriptor of `num_descriptors` values (`Status.OK`); an exception (`ERROR`), a
    bad return (`INVALID`) or, where this thread can set an alarm, a run past `timeout`
    seconds (`TIMEOUT`) are recorded with the reason. This is what every pool runs, in the
    process that evaluates."""
    start = time.perf_counter()
    name = evaluator_name(evaluator)
    elapsed = lambda: time.perf_counter() - start
    try:
        with alarm(timeout):
            returned = evaluator(genotype)
    except _Timeout:
        return Outcome.failed(
            Status.TIMEOUT,
            f"{name} ran past the timeout of {timeout:g} s",
            num_descriptors,
            elapsed(),
        )
    except Exception as e:  # the evaluator's failure is its candidate's, not the run's
        return Outcome.failed(Status.ERROR, f"{type(e).__name__}: {e}", num_descriptors, elapsed())
    seconds = elapsed()
    try:
        fitness_in, descriptor_in = returned
        fitness = _scalar(fitness_in)
        descriptor = np.asarray(descriptor_in, dtype=np.float64)
    except (TypeError, ValueError) as e:
        return Outcome.failed(
            Status.INVALID,
            f"{name} must return (fitness, descriptor); got {type(returned).__name__} ({e})",
            num_descriptors,
            seconds,
        )
    if descriptor.shape != (num_descriptors,):
        return Outcome.failed(
            Status.INVALID,
            f"{name} returned a descriptor of shape {descriptor.shape}; the run has "
            f"{num_descriptors} descriptors",
            num_descriptors,
            seconds,
        )
    if not math.isfinite(fitness) or not np.all(np.isfinite(descriptor)):
        return Outcome.failed(
            Status.INVALID,
            f"{name} returned a non-finite fitness {fitness} or descriptor {descriptor.tolist()}",
            num_descriptors,
            seconds,
        )
    return Outcome(Status.OK, fitness, tuple(descriptor.tolist()), seconds)
