"""Where a batch is evaluated: in this process, on a local process pool (pebble), or on a Dask
cluster (`dask.distributed`).

Every pool has one method, `evaluate`, that takes a batch of genotypes and gives back its
`Evaluations` in the candidates' order, whatever order the results arrive in. A failed
candidate never fails the batch: an exception, a bad return, a timeout or a dead worker is
recorded against it (`Status`), and a candidate whose worker died is run again (by the
process pool up to its `retries` times, by Dask up to its `allowed-failures`). `on_result`
hears of each candidate as it finishes (a job's journal), and `done` gives candidates
already evaluated (a resumed batch) that are not run again.
"""

import abc
import collections
import concurrent.futures
import dataclasses
import logging
import multiprocessing
import os
import pickle
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ._evaluations import evaluate_one, Evaluations, evaluator_name, Outcome, Status


OnResult = Callable[[int, Outcome], None]
"""`on_result(index, outcome)`: called in the driver as each candidate finishes."""


def _rows(genotypes: Any) -> np.ndarray:
    rows = np.asarray(genotypes)
    if rows.ndim < 1 or rows.shape[0] == 0:
        raise ValueError(f"genotypes must be a non-empty batch, got shape {rows.shape}")
    return rows


def _check_timeout(timeout: float | int | None) -> float | None:
    if timeout is not None and not (float(timeout) > 0):
        raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout}")
    return None if timeout is None else float(timeout)


def _refuse_while_a_worker_starts(owner: str) -> None:
    """A pool opened while a worker process imports the main script (the `spawn` start
    method re-runs the script's top level in each worker) would start workers of its own:
    refuse it with what to do, not multiprocessing's bootstrapping error."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(
            f"{owner} was opened while a worker process was starting: the workers import your "
            "script, so the code that opens the pool must run only in the main process. Put "
            'it under `if __name__ == "__main__":`'
        )


class AbstractPool(abc.ABC):
    """Evaluates batches of candidates with a Python evaluator (module docstring). Use as a
    context manager, or call `close` when done (a process pool or a cluster it started is
    shut down)."""

    _threads: concurrent.futures.ThreadPoolExecutor | None = None
    """Where `submit` waits for its batches (two at a time), made at the first."""
    _closing: bool = False
    """Set by `close`: outcomes that arrive after it (the cancelled tasks') are dropped,
    never reported, so a journal never records a shutdown as a failure."""

    def evaluate(
        self,
        evaluator: Callable[[np.ndarray], Any],
        genotypes: Any,
        num_descriptors: int,
        *,
        timeout: float | int | None = None,
        done: Mapping[int, Outcome] | None = None,
        on_result: OnResult | None = None,
    ) -> Evaluations:
        """Evaluate each row of `genotypes` (`(n, ...)`, a NumPy or JAX array) with
        `evaluator(genotype) -> (fitness, descriptor)`.

        **Arguments:**

        - `evaluator`: the user's function (a module-level function for processes and
          clusters, which import it by name).
        - `genotypes`: the batch, one candidate per row.
        - `num_descriptors`: the width every descriptor must have.
        - `timeout`: seconds a candidate may run before it is stopped (`Status.TIMEOUT`).
        - `done`: outcomes of candidates already evaluated, by index: kept, not run again.
        - `on_result`: called with `(index, outcome)` as each remaining candidate finishes.

        **Returns:** the batch's `Evaluations`, in the order of the rows.
        """
        rows = _rows(genotypes)
        timeout = _check_timeout(timeout)
        if self._closing:
            raise RuntimeError(f"{type(self).__name__} is closed: make a new one")
        outcomes: dict[int, Outcome] = dict(done or {})
        todo = [i for i in range(rows.shape[0]) if i not in outcomes]
        if todo:
            for i, outcome in self._run(evaluator, rows, todo, int(num_descriptors), timeout):
                if self._closing:
                    raise RuntimeError(f"{type(self).__name__} was closed during the batch")
                outcomes[i] = outcome
                if on_result is not None:
                    on_result(i, outcome)
        missing = [i for i in range(rows.shape[0]) if i not in outcomes]
        if missing:  # a pool's own bug, never the evaluator's
            raise RuntimeError(f"{type(self).__name__} lost candidates {missing[:5]}")
        return Evaluations.of([outcomes[i] for i in range(rows.shape[0])], int(num_descriptors))

    @abc.abstractmethod
    def _run(
        self,
        evaluator: Callable[[np.ndarray], Any],
        rows: np.ndarray,
        todo: Sequence[int],
        num_descriptors: int,
        timeout: float | None,
    ) -> Iterator[tuple[int, Outcome]]:
        """Evaluate the rows `todo`, yielding `(index, outcome)` as each finishes."""

    @property
    @abc.abstractmethod
    def workers(self) -> int:
        """How many candidates run at once."""

    def submit(
        self,
        evaluator: Callable[[np.ndarray], Any],
        genotypes: Any,
        num_descriptors: int,
        *,
        timeout: float | int | None = None,
        done: Mapping[int, Outcome] | None = None,
        on_result: OnResult | None = None,
    ) -> concurrent.futures.Future:
        """`evaluate` without waiting (`evaluator`, `genotypes`, `num_descriptors`, `timeout`,
        `done` and `on_result` as there): a future of the batch's `Evaluations`. A batch
        submitted while another runs queues behind it on the workers, so they go on from one
        to the next without waiting for the driver (the external job's `overlap`); on Dask
        with a `timeout`, a candidate waits in the driver for a free worker. In this
        process (`SequentialPool`) the batch is evaluated before `submit` returns."""
        rows = _rows(genotypes)
        self._prepare(evaluator)
        if self._threads is None:
            self._threads = concurrent.futures.ThreadPoolExecutor(2, "eqx-qd-batch")
        return self._threads.submit(
            self.evaluate,
            evaluator,
            rows,
            num_descriptors,
            timeout=timeout,
            done=done,
            on_result=on_result,
        )

    def _prepare(self, evaluator: Any) -> None:
        """What must happen in the caller's thread before a batch runs in another."""

    def close(self) -> None:
        """Release the pool's processes or cluster (a no-op where it has none). A batch
        still running is abandoned, its late outcomes never reported."""

    def _close_threads(self) -> None:
        self._closing = True
        if self._threads is not None:
            # A batch still running ends once the pool's workers are gone; nobody waits for it.
            self._threads.shutdown(wait=False, cancel_futures=True)
            self._threads = None

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class SequentialPool(AbstractPool):
    """Evaluates one candidate after another in this process. A timeout interrupts the
    evaluator with a POSIX alarm, which only the main thread can set and which cannot stop
    code in C that holds the interpreter: use `ProcessPool` for those."""

    @property
    def workers(self) -> int:
        return 1

    def submit(
        self, evaluator, genotypes, num_descriptors, *, timeout=None, done=None, on_result=None
    ) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:  # here, in this thread: the alarm of a timeout needs the main thread
            future.set_result(
                self.evaluate(
                    evaluator,
                    genotypes,
                    num_descriptors,
                    timeout=timeout,
                    done=done,
                    on_result=on_result,
                )
            )
        except Exception as e:
            future.set_exception(e)
        return future

    def _run(self, evaluator, rows, todo, num_descriptors, timeout):
        for i in todo:
            yield i, evaluate_one(evaluator, rows[i], num_descriptors, timeout)


def _check_picklable(evaluator: Any, where: str) -> None:
    try:
        pickle.dumps(evaluator)
    except Exception as e:
        raise TypeError(
            f"{where} runs the evaluator in other processes, which import it by name: give a "
            f"module-level function (package.module:function), not {evaluator_name(evaluator)} "
            f"({type(e).__name__}: {e})"
        ) from e


class ProcessPool(AbstractPool):
    """Evaluates on `workers` local processes (pebble's `ProcessPool`, started with
    `start_method`, by default `spawn`: a fork of a process that runs JAX is unsafe). A
    candidate past its `timeout` has its process killed and replaced (`Status.TIMEOUT`); a
    process that dies (killed, a crash in C) has its candidate run again, at most `retries`
    times, then recorded `Status.CRASHED`. Workers are started at the first batch and kept
    until `close`. Each worker imports the main script: in a script, open the pool under
    `if __name__ == "__main__":` (a pool opened at a script's top level is refused in the
    workers, with that advice)."""

    def __init__(self, workers: int = 2, *, retries: int = 1, start_method: str = "spawn"):
        if int(workers) < 1:
            raise ValueError(f"ProcessPool.workers must be at least 1, got {workers}")
        _refuse_while_a_worker_starts("ProcessPool")
        if int(retries) < 0:
            raise ValueError(f"ProcessPool.retries must be non-negative, got {retries}")
        try:
            import pebble
        except ImportError as e:  # pragma: no cover - an optional extra
            raise ImportError("ProcessPool needs pebble: pip install 'eqx_qd[external]'") from e
        self._workers, self.retries = int(workers), int(retries)
        self._pebble = pebble
        self._context = multiprocessing.get_context(start_method)
        self._pool: Any = None

    @property
    def workers(self) -> int:
        return self._workers

    def _ensure(self) -> Any:
        if self._pool is None or not self._pool.active:
            self._pool = self._pebble.ProcessPool(max_workers=self._workers, context=self._context)
        return self._pool

    def _prepare(self, evaluator: Any) -> None:
        _check_picklable(evaluator, "ProcessPool")
        self._ensure()

    def _run(self, evaluator, rows, todo, num_descriptors, timeout):
        _check_picklable(evaluator, "ProcessPool")
        pool = self._ensure()
        attempts = collections.Counter[int]()
        name = evaluator_name(evaluator)

        def submit(i: int) -> concurrent.futures.Future:
            attempts[i] += 1
            future = pool.schedule(
                evaluate_one, args=(evaluator, rows[i], num_descriptors), timeout=timeout
            )
            future.index = i  # type: ignore[attr-defined]
            future.submitted = time.perf_counter()  # type: ignore[attr-defined]
            return future

        pending = {submit(i) for i in todo}
        while pending:
            finished, pending = concurrent.futures.wait(
                pending, return_when=concurrent.futures.FIRST_COMPLETED
            )
            for future in finished:
                i = future.index
                seconds = time.perf_counter() - future.submitted
                try:
                    outcome = future.result()
                except concurrent.futures.TimeoutError:
                    outcome = Outcome.failed(
                        Status.TIMEOUT,
                        f"{name} ran past the timeout of {timeout:g} s",
                        num_descriptors,
                        seconds,
                        attempts[i],
                    )
                except self._pebble.ProcessExpired as e:
                    if attempts[i] <= self.retries:
                        pending.add(submit(i))
                        continue
                    outcome = Outcome.failed(
                        Status.CRASHED,
                        f"the worker process died {attempts[i]} times (last exit code "
                        f"{e.exitcode})",
                        num_descriptors,
                        seconds,
                        attempts[i],
                    )
                except Exception as e:  # e.g. a return value that cannot be pickled
                    outcome = Outcome.failed(
                        Status.ERROR,
                        f"{type(e).__name__}: {e}",
                        num_descriptors,
                        seconds,
                        attempts[i],
                    )
                else:
                    outcome = dataclasses.replace(outcome, attempts=attempts[i])
                yield i, outcome

    def close(self) -> None:
        self._closing = True
        if self._pool is not None:
            self._pool.stop()
            self._pool.join()
            self._pool = None
        self._close_threads()


def evaluate_many(
    evaluator: Callable[[np.ndarray], Any], rows: np.ndarray, num_descriptors: int
) -> list[Outcome]:
    """`evaluate_one` on each row of `rows`: a chunk of a batch, one task on a cluster."""
    return [evaluate_one(evaluator, row, num_descriptors) for row in rows]


_RUNNING: dict[str, float] = {}
"""In a Dask worker's process: when each timed task there started running (`time.monotonic`),
by its token, while it runs."""


def _evaluate_started(
    evaluator: Callable[[np.ndarray], Any], rows: np.ndarray, num_descriptors: int, token: str
) -> list[Outcome]:
    """`evaluate_many` on a Dask worker, with its start recorded in `_RUNNING`, so that the
    driver times it from when it runs, not from when it was queued (`DaskPool`)."""
    _RUNNING[token] = time.monotonic()
    try:
        return evaluate_many(evaluator, rows, num_descriptors)
    finally:
        _RUNNING.pop(token, None)


def _running_for() -> dict[str, float]:
    """In a Dask worker's process: how long each timed task there has been running, in its
    own clock (no clocks compared between machines)."""
    now = time.monotonic()
    return {token: now - t0 for token, t0 in list(_RUNNING.items())}


def _reruns(keys: Sequence[str], dask_scheduler: Any = None) -> dict[str, int]:
    """On the Dask scheduler: how many of each task's workers died while running it (Dask
    reruns it on another worker each time, up to its `allowed-failures`)."""
    tasks = dask_scheduler.tasks
    return {k: int(tasks[k].suspicious) if k in tasks else 0 for k in keys}


class DaskPool(AbstractPool):
    """Evaluates on a Dask cluster (`dask.distributed`): the scheduler at `scheduler`
    (`"tcp://host:8786"`), a `distributed.Client` you made, or, with `None`, a `LocalCluster`
    of `workers` single-threaded processes started here and closed by `close`.

    Without a `timeout` the batch goes to the cluster at once, in tasks of `chunk_size`
    candidates (default: four tasks per worker thread, for a cluster's per-task cost of a
    millisecond or so); a task whose worker dies is rerun by Dask on another, up to its
    `distributed.scheduler.allowed-failures` (3 by default), then recorded `Status.CRASHED`.

    With a `timeout`, each candidate is sent to a worker thread with nothing else to run
    (pinned there, so that nothing queues behind it), and records on its worker when it
    starts running; the driver asks the workers how long their tasks have run (every `poll`
    seconds at most, and when the first could reach the timeout), so a candidate's clock
    starts when it runs, never while it waits for a worker being restarted. A candidate past
    the timeout is cancelled and its worker ended (its nanny starts another): `Status.TIMEOUT`,
    within `poll` seconds of it, and only that candidate is touched. A candidate whose worker
    dies under it is sent to another, up to `allowed-failures` times, each run timed afresh,
    then recorded `Status.CRASHED`; a batch whose cluster has had no worker alive for
    `worker_wait` seconds records what is left `Status.CRASHED`. The `LocalCluster` the pool
    starts never gives up on a lost worker while the pool is open (Dask's
    `distributed.deploy.lost-worker-timeout`, 15 s by default, would close for good a nanny
    whose replacement worker was starting then); a `LocalCluster` of your own that the pool ends
    workers of wants that setting raised as well (`dask.config.set`).

    `attempts` is the number of workers a candidate was run on (one plus the reruns). The
    evaluator must be importable on the workers (a module-level function of an installed
    package or of a module on their path), and so must `eqx_qd` where a timeout is given."""

    def __init__(
        self,
        scheduler: Any = None,
        *,
        workers: int = 2,
        chunk_size: int | None = None,
        poll: float = 0.25,
        worker_wait: float = 120.0,
    ):
        if chunk_size is not None and int(chunk_size) < 1:
            raise ValueError(f"DaskPool.chunk_size must be at least 1, got {chunk_size}")
        if not float(poll) > 0:
            raise ValueError(f"DaskPool.poll must be a positive number of seconds, got {poll}")
        try:
            import dask
            import distributed
        except ImportError as e:  # pragma: no cover - an optional extra
            raise ImportError("DaskPool needs distributed: pip install 'eqx_qd[external]'") from e
        self._distributed = distributed
        self.chunk_size = None if chunk_size is None else int(chunk_size)
        self.poll = float(poll)
        self.worker_wait = float(worker_wait)
        self.reruns = int(dask.config.get("distributed.scheduler.allowed-failures", 3))
        """How many times a candidate whose worker died is run again, with a timeout."""
        self._ended: set[str] = set()
        self._pinned: collections.Counter[str] = collections.Counter()
        """Timed candidates on each worker, over every batch running (`submit`)."""
        self._lock = threading.Lock()
        self._cluster = None
        if isinstance(scheduler, distributed.Client):
            self.client, self._owns_client = scheduler, False
        elif scheduler is None:
            if int(workers) < 1:
                raise ValueError(f"DaskPool.workers must be at least 1, got {workers}")
            _refuse_while_a_worker_starts("DaskPool")
            # A LocalCluster closes for good the nanny of a worker gone for this long when no
            # worker of its name is back at that moment; ending a worker at each hang, the
            # pool meets that moment often, and the cluster would dwindle to no worker.
            self._config = dask.config.set({"distributed.deploy.lost-worker-timeout": "1000d"})
            self._cluster = distributed.LocalCluster(
                n_workers=int(workers),
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.CRITICAL,
            )
            self.client, self._owns_client = distributed.Client(self._cluster), True
        elif isinstance(scheduler, str):
            self.client, self._owns_client = distributed.Client(scheduler), True
        else:
            raise TypeError(
                "DaskPool.scheduler must be an address, a distributed.Client or None, got "
                f"{type(scheduler).__name__}"
            )

    def _alive(self) -> tuple[set[str], dict[str, int]]:
        """The workers the scheduler lists, and the threads of those `_end` did not end."""
        threads = self.client.nthreads()
        self._ended &= set(threads)
        return set(threads), {a: n for a, n in threads.items() if a not in self._ended}

    @property
    def workers(self) -> int:
        """Worker threads, less those of workers the pool ended that the scheduler still
        lists."""
        return max(1, sum(self._alive()[1].values()))

    def _end(self, address: str) -> None:
        """End the worker process at `address` (its nanny starts a new one): a hung
        evaluation cannot be stopped any other way, a thread is not interruptible, and a
        graceful restart would wait for it."""
        self._ended.add(address)
        try:
            self.client.run(os._exit, 1, workers=[address])
        except Exception:  # the connection closes as the worker ends
            pass

    def _running(self) -> dict[str, float]:
        """How long each timed task has been running, by token (the longest, should two
        workers report one)."""
        try:
            reports = self.client.run(_running_for, on_error="ignore")
        except Exception:  # a worker ending as it is asked
            return {}
        running: dict[str, float] = {}
        for report in reports.values():
            if isinstance(report, dict):
                for token, seconds in report.items():
                    running[token] = max(seconds, running.get(token, 0.0))
        return running

    def _attempts(self, futures: Sequence[Any]) -> dict[Any, int]:
        """The runs each finished task took (Dask's reruns after a worker died, plus one)."""
        try:
            reruns = self.client.run_on_scheduler(_reruns, [f.key for f in futures])
        except Exception:
            reruns = {}
        return {f: 1 + reruns.get(f.key, 0) for f in futures}

    def _outcomes(self, done, started, attempts, num_descriptors):
        """The outcomes of the finished tasks `done` (each in `started` as its candidates'
        indices and its start), `attempts` runs each."""
        dist = self._distributed
        for future in done:
            indices, t0 = started.pop(future)[:2]
            seconds = time.perf_counter() - t0
            try:
                results = future.result()
            except dist.KilledWorker as e:
                error, status, runs = f"the workers running it died: {e}", Status.CRASHED, -1
            except Exception as e:  # e.g. an evaluator the workers cannot import
                error, status, runs = f"{type(e).__name__}: {e}", Status.ERROR, 0
            else:
                for i, outcome in zip(indices, results):
                    yield i, dataclasses.replace(outcome, attempts=attempts[future])
                continue
            for i in indices:
                yield (
                    i,
                    Outcome.failed(
                        status, error, num_descriptors, seconds, attempts[future] + runs
                    ),
                )

    def _run(self, evaluator, rows, todo, num_descriptors, timeout):
        if timeout is None:
            yield from self._run_chunks(evaluator, rows, todo, num_descriptors)
        else:
            yield from self._run_timed(evaluator, rows, todo, num_descriptors, timeout)

    def _run_chunks(self, evaluator, rows, todo, num_descriptors):
        """The whole batch at once, in chunks: the cluster queues them."""
        size = self.chunk_size or max(1, -(-len(todo) // (4 * self.workers)))
        started = {}
        for j in range(0, len(todo), size):
            indices = list(todo[j : j + size])
            future = self.client.submit(
                evaluate_many, evaluator, rows[indices], num_descriptors, pure=False
            )
            started[future] = (indices, time.perf_counter())
        for batch in self._distributed.as_completed(list(started)).batches():
            done = list(batch)
            yield from self._outcomes(done, started, self._attempts(done), num_descriptors)

    def _run_timed(self, evaluator, rows, todo, num_descriptors, timeout):
        """One candidate per idle worker thread, pinned there, each timed from when it runs.

        No reference to a finished task outlives its outcome: Dask keeps a referenced result
        in its worker's memory, and recomputes it when that worker is ended, on a worker that
        is gone."""
        dist = self._distributed
        name = evaluator_name(evaluator)
        queue = collections.deque(todo)
        runs = collections.Counter[int]()  # workers each candidate was sent to
        started: dict[Any, tuple[int, float, str, str]] = {}  # index, t0, token, worker

        def send(i: int, address: str) -> None:
            """Run candidate `i` on the worker at `address`, and only there: nothing queues
            behind a candidate that may hang, on a worker that may be ended."""
            runs[i] += 1
            token = uuid.uuid4().hex
            future = self.client.submit(
                _evaluate_started,
                evaluator,
                rows[[i]],
                num_descriptors,
                token,
                pure=False,
                workers=[address],
                allow_other_workers=False,
            )
            started[future] = (i, time.perf_counter(), token, address)
            self._pinned[address] += 1

        def release(future: Any, cancel: bool = False) -> tuple[int, float, str, str]:
            entry = started.pop(future)
            if cancel:
                future.cancel()
            future.release()
            with self._lock:
                self._pinned[entry[3]] -= 1
            return entry

        def lost(future: Any) -> Iterator[tuple[int, Outcome]]:
            """The candidate's worker died under it: run it again elsewhere, or give up."""
            i, t0 = release(future, cancel=True)[:2]
            if runs[i] <= self.reruns:
                queue.appendleft(i)
            else:
                yield (
                    i,
                    Outcome.failed(
                        Status.CRASHED,
                        f"the workers running it died {runs[i]} times",
                        num_descriptors,
                        time.perf_counter() - t0,
                        runs[i],
                    ),
                )

        def finish(future: Any) -> Iterator[tuple[int, Outcome]]:
            try:  # (a result lost with its worker would be waited for forever)
                results = future.result(timeout=30.0)
            except (TimeoutError, dist.TimeoutError):
                yield from lost(future)
                return
            except Exception as e:  # e.g. an evaluator the workers cannot import
                i, t0 = release(future)[:2]
                seconds, error = time.perf_counter() - t0, f"{type(e).__name__}: {e}"
                yield i, Outcome.failed(Status.ERROR, error, num_descriptors, seconds, runs[i])
                return
            i = release(future)[0]
            yield i, dataclasses.replace(results[0], attempts=runs[i])

        def gone(listed: set[str]) -> Iterator[tuple[int, Outcome]]:
            """The candidates whose worker died under them (not one the pool ended)."""
            for future in [f for f, e in started.items() if e[3] not in listed]:
                if not future.done():  # (one that finished first is reported as it is)
                    yield from lost(future)

        def late(running: dict[str, float]) -> Iterator[tuple[int, Outcome]]:
            """The candidates past the timeout: cancelled, their workers ended."""
            for future in [f for f, e in started.items() if running.get(e[2], 0.0) >= timeout]:
                if future.done():
                    continue  # (it finished as it was found late: its outcome stands)
                i, _, token, address = release(future, cancel=True)
                self._end(address)
                yield (
                    i,
                    Outcome.failed(
                        Status.TIMEOUT,
                        f"{name} ran past the timeout of {timeout:g} s",
                        num_descriptors,
                        running[token],
                        runs[i],
                    ),
                )

        def stranded() -> Iterator[tuple[int, Outcome]]:
            """What is left on a cluster without workers (all ended, none restarted)."""
            error = f"no Dask worker was alive for {self.worker_wait:g} s to run it"
            while started:
                i, t0 = release(next(iter(started)), cancel=True)[:2]
                seconds = time.perf_counter() - t0
                yield i, Outcome.failed(Status.CRASHED, error, num_descriptors, seconds, runs[i])
            while queue:
                yield queue.popleft(), Outcome.failed(Status.CRASHED, error, num_descriptors, 0.0)

        running: dict[str, float] = {}  # token -> seconds run, as of `asked`
        asked = time.perf_counter()
        alone_since: float | None = None  # since when no worker has been alive
        try:
            while queue or started:
                listed, alive = self._alive()
                yield from gone(listed)
                if alive:
                    alone_since = None
                elif alone_since is None:
                    alone_since = time.perf_counter()
                elif time.perf_counter() - alone_since > self.worker_wait:
                    yield from stranded()
                    return
                with self._lock:  # (another batch may be filling the same workers)
                    for address, threads in alive.items():
                        while queue and self._pinned[address] < threads:
                            send(queue.popleft(), address)
                # Wake at a completion, when the longest-running task may reach the timeout,
                # or at the next poll for tasks not yet seen running.
                since = time.perf_counter() - asked
                left = [
                    timeout - running[e[2]] - since for e in started.values() if e[2] in running
                ]
                wait_s = min([self.poll, *left]) if left else self.poll
                try:
                    done = dist.wait(
                        list(started), timeout=max(wait_s, 0.01), return_when="FIRST_COMPLETED"
                    ).done
                except (TimeoutError, dist.TimeoutError):
                    done = set()
                finished = bool(done)
                while done:
                    yield from finish(done.pop())
                if not started or (finished and time.perf_counter() - asked < self.poll):
                    continue  # (completions keep coming: ask the workers once per poll)
                running, asked = self._running(), time.perf_counter()
                yield from late(running)
        finally:  # (a batch abandoned midway frees its workers for the next)
            while started:
                release(next(iter(started)), cancel=True)

    def close(self) -> None:
        self._close_threads()
        if self._owns_client:
            self.client.close()
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
            self._config.__exit__(None, None, None)  # (the setting as it was before)
