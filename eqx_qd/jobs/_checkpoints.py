"""Checkpoints of training states in a run folder: `checkpoints/<step>.eqx` (the whole state,
typed keys included) beside `<step>.json` (its evaluation metrics), written atomically, listed,
and restored by "latest" or "best"."""

import os
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ._folder import RunFolder


CHECKPOINTS = "checkpoints"
_CKPT = re.compile(r"^(\d{10})\.eqx$")
_RECORD = re.compile(r"^(\d{10})\.json$")


class Checkpoint(typing.NamedTuple):
    """One complete checkpoint: its step (IPPO: the update count), path and metrics."""

    step: int
    path: str
    metrics: dict[str, np.ndarray]


def _folder(directory: str | os.PathLike | RunFolder, *, create: bool) -> RunFolder:
    if isinstance(directory, RunFolder):
        return directory
    return RunFolder(directory, create=create)


def save_checkpoint(
    directory: str | os.PathLike | RunFolder,
    step: int,
    state: Any,
    metrics: Mapping[str, Any],
    *,
    keep: int | None = None,
    records: bool = False,
) -> str:
    """Write `state` and `metrics` (JSON-able values) as checkpoint `step` of the run
    folder `directory`; with `keep`, then remove all but the newest `keep` checkpoints
    (with `records`, only their states: their metrics stay, the run's record, `records_of`).

    The metrics land first and the state second, each atomically, so every `.eqx` present is
    complete and has its metrics beside it; an old checkpoint loses its `.eqx` before its
    metrics. **Returns:** the path of the `.eqx` file.
    """
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
        raise ValueError(f"keep must be a positive int, got {keep!r}")
    folder = _folder(directory, create=True).subfolder(CHECKPOINTS)
    stem = f"{int(step):010d}"
    folder.write_json(stem + ".json", {"step": int(step), **metrics})
    folder.write_eqx(stem + ".eqx", state)
    if keep is not None:
        for old in list_checkpoints(directory)[:-keep]:
            os.remove(old.path)
            if not records:
                os.remove(old.path[: -len(".eqx")] + ".json")
    return folder.file(stem + ".eqx")


def list_checkpoints(directory: str | os.PathLike | RunFolder) -> list[Checkpoint]:
    """The complete checkpoints of a run folder, oldest first (none when it has none)."""
    root = _folder(directory, create=False)
    if not root.exists(CHECKPOINTS):
        return []
    folder = root.subfolder(CHECKPOINTS, create=False)
    out = []
    for name in sorted(os.listdir(folder.path)):
        match = _CKPT.match(name)
        if match:
            raw = folder.read_json(name[:-4] + ".json")
            metrics = {k: np.asarray(v) for k, v in raw.items() if k != "step"}
            out.append(Checkpoint(int(match.group(1)), folder.file(name), metrics))
    return out


def records_of(directory: str | os.PathLike | RunFolder) -> list[tuple[int, dict[str, Any]]]:
    """Every checkpoint's metrics by step, oldest first, those whose state was pruned too."""
    root = _folder(directory, create=False)
    if not root.exists(CHECKPOINTS):
        return []
    folder = root.subfolder(CHECKPOINTS, create=False)
    return [
        (int(name[:10]), {k: v for k, v in folder.read_json(name).items() if k != "step"})
        for name in sorted(os.listdir(folder.path))
        if _RECORD.match(name)
    ]


def mean_return(metrics: Mapping[str, np.ndarray]) -> float:
    """The default "best" criterion: the mean of the `returns` metric."""
    return float(np.mean(metrics["returns"]))


def restore_checkpoint(
    directory: str | os.PathLike | RunFolder,
    like: Any,
    *,
    which: str = "latest",
    criterion: Callable[[Mapping[str, np.ndarray]], float] = mean_return,
) -> tuple[Any, Checkpoint]:
    """Load from the run folder `directory` the `"latest"` checkpoint, or (`which="best"`)
    the one with the highest `criterion` of its metrics.

    `like` gives the structure: a state of the same agent (`agent.init(key=...)`).
    **Returns:** the state and its `Checkpoint`.
    """
    checkpoints = list_checkpoints(directory)
    if not checkpoints:
        raise FileNotFoundError(f"no checkpoints under {_folder(directory, create=False).path!r}")
    if which == "latest":
        chosen = checkpoints[-1]
    elif which == "best":
        scores = np.asarray([criterion(c.metrics) for c in checkpoints], np.float64)
        if not np.any(np.isfinite(scores)):
            name = getattr(criterion, "__name__", repr(criterion))
            raise ValueError(
                f"no checkpoint of {os.fspath(getattr(directory, 'path', directory))!r} has a "
                f"finite {name} (every one gave NaN or inf): choose which='latest' or another "
                "criterion"
            )
        chosen = checkpoints[int(np.nanargmax(np.where(np.isfinite(scores), scores, np.nan)))]
    else:
        raise ValueError(f"which must be 'latest' or 'best', got {which!r}")
    folder = _folder(directory, create=False).subfolder(CHECKPOINTS, create=False)
    try:
        return folder.read_eqx(os.path.basename(chosen.path), like), chosen
    except (ValueError, RuntimeError, EOFError) as e:
        raise ValueError(
            f"checkpoint {chosen.path!r} does not fit the template state ({e}); build `like` "
            "with the same agent (environment, sizes, shared_params, joint_network, "
            "normalise_observations) "
            "and hyperparameter shapes as the run"
        ) from e
