"""What the QD jobs write and read back: the repertoire, its centroids, the progress columns,
the figures, and a one-line summary."""

from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._compile import jit
from .._custom_types import PRNGKey
from .._repertoire import AbstractRepertoireOverCells, ExtractRepertoire, MAPElitesRepertoire
from .._sampling import corrected_metrics, CorrectedMetrics, reevaluated
from .._tessellation import AbstractTessellation, CVTTessellation
from ..envs._base import AbstractQDEnv
from ._config import JobConfig
from ._distributed import to_host
from ._folder import RunFolder
from ._job import PROGRESS_FILE, RunResult


CORRECTED_NAMES = (
    "corrected_qd_score",
    "corrected_coverage",
    "corrected_max_fitness",
    "fitness_reproducibility",
    "descriptor_reproducibility",
)
"""The columns a QD job's reevaluations add to `progress.csv` (`CorrectedMetrics`' figures)."""


def corrected_figures(scorer, num: int, qd_offset, key, elites, at) -> CorrectedMetrics:
    """`elites` (an Extract-ME archive: its layer 0) scored `num` more times by `scorer` with
    `jr.fold_in(key, at)` (`reevaluated`, median estimates): their `CorrectedMetrics` with
    `qd_offset`. Pure: jit it, or call it in a scan."""
    if isinstance(elites, ExtractRepertoire):  # the elites, the depth aside
        elites = elites.to_map_elites()
    again = reevaluated(elites, scorer, num, key=jr.fold_in(key, at))
    return corrected_metrics(again, qd_offset)


_corrected_jit = jit(corrected_figures)


def corrector(
    scorer: Callable, num: int, qd_offset: float | jax.Array, *, key: PRNGKey
) -> Callable[[Any, int], CorrectedMetrics]:
    """`(state, at) -> CorrectedMetrics`: the state's elites (`state.elites`; an Extract-ME
    archive's layer 0) scored `num` more times by `scorer` with `jr.fold_in(key, at)`
    (`reevaluated`, median estimates), the corrected figures with `qd_offset`: what a QD job
    logs at its rows, the same after a resume (one compiled program for every row and run)."""

    def figures(state, at: int) -> CorrectedMetrics:
        elites = to_host(state.elites)
        at = jnp.asarray(at, jnp.int32)  # traced: one program for every row
        return to_host(_corrected_jit(scorer, num, qd_offset, key, elites, at))

    return figures


def corrected_row(corrected: CorrectedMetrics | None) -> list[float]:
    """The `CORRECTED_NAMES` columns of one row: `corrected`'s figures, or NaN for a row
    without them."""
    if corrected is None:
        return [float("nan")] * len(CORRECTED_NAMES)
    return [
        float(np.asarray(getattr(corrected, k.removeprefix("corrected_")))) for k in CORRECTED_NAMES
    ]


def as_written(repertoire: Any) -> Any:
    """The repertoire a QD job writes, plots and reads back: ME-LS's and Extract-ME's elites as
    a `MAPElitesRepertoire` over the same cells (their spreads, depth and counts stay in the
    checkpoints); any other as it is."""
    if isinstance(repertoire, AbstractRepertoireOverCells):
        return repertoire.to_map_elites()
    return repertoire


def write_qd_outputs(
    folder: RunFolder,
    repertoire: MAPElitesRepertoire,
    progress: Mapping[str, Any],
    *,
    plots: bool,
    x_key: str = "evaluations",
    top_key: str | None = None,
    env: AbstractQDEnv | None = None,
) -> None:
    """`progress.csv`, `repertoire.eqx`, `centroids.npy` and, with `plots`,
    `repertoire.png` (over `env`'s descriptor box, its axes named by `env`) and
    `progress.png` (against `x_key`, with `top_key` on top)."""
    folder.write_columns(PROGRESS_FILE, progress)
    folder.write_eqx("repertoire.eqx", repertoire)
    folder.write_npy("centroids.npy", repertoire.centroids)
    if plots:
        from ..plotting import plot_metrics, plot_repertoire

        folder.write_figure("repertoire.png", plot_repertoire(repertoire, **repertoire_axes(env)))
        folder.write_figure("progress.png", plot_metrics(progress, x_key, top_key))


def repertoire_axes(env: AbstractQDEnv | None) -> dict[str, Any]:
    """`plot_repertoire`'s `bounds` and `descriptor_names` from a task (none without)."""
    if env is None:
        return {}
    return {"bounds": env.descriptor_bounds, "descriptor_names": env.descriptor_names}


def read_repertoire(
    folder: RunFolder,
    make_genotype: Callable[[], Any],
    *,
    tessellation: AbstractTessellation | None = None,
    with_ids: bool = False,
) -> MAPElitesRepertoire:
    """`repertoire.eqx` of a QD run. `make_genotype()` builds one genotype (only its
    shapes are used: it runs under `eqx.filter_eval_shape`); the tessellation defaults to the
    folder's `centroids.npy`; `with_ids` when the run tracked lineage."""
    tess = tessellation or CVTTessellation(folder.read_npy("centroids.npy"))

    def template():
        import jax.numpy as jnp

        extra = jnp.zeros((), jnp.int32) if with_ids else None
        return MAPElitesRepertoire.empty(tess, make_genotype(), extra)

    like = eqx.filter_eval_shape(template)
    return folder.read_eqx("repertoire.eqx", like)


def read_qd_run(
    folder: RunFolder, config: JobConfig, repertoire: MAPElitesRepertoire, tables=()
) -> RunResult:
    """The `RunResult` of a QD run folder: progress, the repertoire, and the named tables."""
    return RunResult(
        config,
        folder.path,
        folder.read_columns(PROGRESS_FILE),
        None,
        repertoire,
        {name: folder.read_columns(f"{name}.csv") for name in tables},
    )


def qd_summary(result: RunResult) -> str:
    """The QD jobs' last line: evaluations, QD-score, coverage and max fitness."""
    last = result.last
    return (
        f"done: {int(last['evaluations'])} evaluations, QD-score {last['qd_score']:.6g}, "
        f"coverage {100 * last['coverage']:.1f}%, max fitness {last['max_fitness']:.6g}"
    )


def hparams_columns(
    step: str, hparams: Mapping[str, np.ndarray], *, first: int = 0, **extra: np.ndarray
):
    """Long-format columns of per-member hyperparameters: `step` (counted from `first`) and
    `member`, then one column per hyperparameter (`hparams` maps names to `(steps, members)`
    arrays), then the `extra` columns (same shape)."""
    names = sorted(hparams)
    steps, members = np.shape(hparams[names[0]])
    columns = {
        step: np.repeat(np.arange(first, first + steps), members),
        "member": np.tile(np.arange(members), steps),
    }
    for name in names:
        columns[name] = np.asarray(hparams[name], np.float64).reshape(-1)
    for name, values in extra.items():
        columns[name] = np.asarray(values).reshape(-1)
    return columns
