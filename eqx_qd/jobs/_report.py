"""Multi-seed reports over QD run folders, the way the PGA-MAP-Elites paper reports its results:
curves with the median and interquartile range over seeds, the cumulative fitness density
averaged over seeds, a table of final medians, and two-sided Mann-Whitney U p-values between
algorithms.

Runs are grouped by algorithm and task (`group_of`); within a group, runs differ by seed.
Another library's runs take part as peer run folders (`read_peer_curves`), one group per library.
"""

import dataclasses
import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._folder import RunFolder
from ._job import load_run, RunResult
from ._status import run_status


REPORT_METRICS = (
    "qd_score",
    "moqd_score",
    "global_hypervolume",
    "plain_qd_score",
    "coverage",
    "max_fitness",
    "averaged_max_fitness",
    "corrected_qd_score",
    "corrected_coverage",
    "corrected_max_fitness",
)
"""The curves and final values a report compares, where the runs log them (`coverage` as a
fraction of the cells; `plain_qd_score` and `averaged_max_fitness` are PGA-ME's; the
`corrected_` figures, the repertoire reevaluated, those of runs with `reevaluations`;
`moqd_score` and `global_hypervolume` the multi-objective job's)."""

P_METHODS = ("auto", "exact", "asymptotic")


_CMA = {
    "cma_me": "CMA-ME",
    "cma_mae": "CMA-MAE",
    "cma_mega": "CMA-MEGA",
    "cma_maega": "CMA-MAEGA",
    "og_map_elites": "OG-MAP-Elites",
    "omg_mega": "OMG-MEGA",
    "dds": "DDS",
}
_WITHOUT_CELLS = {"dns": "DNS", "unstructured": "novelty archive", "sliding": "sliding boundaries"}


def group_of(result: RunResult) -> str:
    """A run's group: its algorithm and task (`PGA-ME on walker2d_uni`). The PGA-ME job
    without its policy gradients (`gradient_op = false`) is `MAP-Elites`; the DCRL-ME job
    without actor injection (`ai_batch_size = 0`) is `DCG-ME`; a MAP-Elites job
    is named by its emitter (`CMA-ME`, ..., `MAP-Elites` for the GA, its emitter added when
    not iso-line), its strategy when not full CMA-ES (`CMA-MAE (lm_ma_es)`) and its
    repertoire (`DNS` for the GA on a DNS population, `CMA-ME (DNS)`,
    `MAP-Elites (novelty archive)`); CMA-MAE's emitters on a discount archive are `DMS`
    (`DMS (lm_ma_es)`), the `dds` emitter on a density archive `DDS`; the mees job is
    `ME-ES` (`ME-ES (exploit)` for one phase only), the qdpg job `QDPG`, the aurora job
    `AURORA` (`PGA-AURORA` with `gradient_op`); with `samples`,
    `MAP-Elites, 4 samples (median)` (`PGA-ME, 4 samples (mean)`); on a low-spread archive
    `ME-LS, 5 samples`; on an Extract-ME archive `Extract-ME, depth 8, 0.5 extracted`. The
    external job is named as the MAP-Elites job, on its evaluator (`MAP-Elites on
    eqx_qd.external:arm`)."""
    config = result.config
    job = config.JOB
    if job in ("pgame", "dcrl-me", "mees", "qdpg", "aurora"):
        if job == "pgame":
            algorithm = "PGA-ME" if config.gradient_op else "MAP-Elites"  # type: ignore[attr-defined]
        elif job == "mees":  # MAP-Elites-ES, its variant when not both phases
            mode = config.mode  # type: ignore[attr-defined]
            algorithm = "ME-ES" if mode == "explore_exploit" else f"ME-ES ({mode})"
        elif job == "qdpg":
            algorithm = "QDPG"
        elif job == "aurora":
            algorithm = "PGA-AURORA" if config.gradient_op else "AURORA"  # type: ignore[attr-defined]
        else:
            algorithm = "DCRL-ME" if config.ai_batch_size else "DCG-ME"  # type: ignore[attr-defined]
        if getattr(config, "samples", 1) > 1:  # MAP-Elites-sampling of policies
            algorithm = f"{algorithm}, {config.samples} samples ({config.estimator})"  # type: ignore[attr-defined]
    elif job in ("map-elites", "external"):  # the external job: MAP-Elites over its evaluator
        emitter = getattr(config, "emitter", "iso_line")
        algorithm = _CMA.get(
            emitter, "MAP-Elites" if emitter == "iso_line" else f"MAP-Elites ({emitter})"
        )
        if getattr(config, "es", "cma_es") != "cma_es":
            algorithm = f"{algorithm} ({config.es})"  # type: ignore[attr-defined]
        repertoire = getattr(config, "repertoire", "cvt")
        if repertoire == "discount":  # DMS: CMA-MAE's emitters on a discount model
            algorithm = algorithm.replace("CMA-MAE", "DMS") + (
                "" if emitter == "cma_mae" else " (discount model)"
            )
        elif repertoire == "density" and emitter != "dds":
            algorithm = f"{algorithm} (density archive)"
        kind = _WITHOUT_CELLS.get(repertoire)
        if kind == "DNS" and algorithm == "MAP-Elites":
            algorithm = "DNS"
        elif kind is not None:
            algorithm = f"{algorithm} ({kind})"
        samples = getattr(config, "samples", 1)
        if repertoire == "low_spread":  # ME-LS: the cells by the samples, their spread
            name = "ME-LS" if algorithm == "MAP-Elites" else f"{algorithm} (low spread)"
            algorithm = f"{name}, {samples} samples"
        elif repertoire == "extract":  # Extract-ME: depth and the share re-scored
            name = "Extract-ME" if algorithm == "MAP-Elites" else f"{algorithm} (extract)"
            algorithm = f"{name}, depth {config.depth}, {config.extraction:g} extracted"  # type: ignore[attr-defined]
            if samples > 1:
                algorithm += f", {samples} samples ({config.estimator})"  # type: ignore[attr-defined]
        elif samples > 1:  # MAP-Elites-sampling: the samples and their estimate
            algorithm = f"{algorithm}, {samples} samples ({config.estimator})"  # type: ignore[attr-defined]
    elif job == "mome":  # the multi-objective job: its algorithm
        from ._mome import ALGORITHMS

        algorithm = ALGORITHMS[config.algorithm]  # type: ignore[attr-defined]
    else:
        algorithm = {"me-pbt": "ME-PBT"}.get(job, job)
    task = (
        getattr(config, "env", None)
        or getattr(config, "task", None)
        or getattr(config, "evaluator", None)
    )
    return f"{algorithm} on {task}" if task else algorithm


def _coverage(progress: dict[str, np.ndarray]) -> np.ndarray | None:
    if "coverage_fraction" in progress:  # PGA-ME folders of earlier versions: "coverage" counted
        return progress["coverage_fraction"]
    return progress.get("coverage")


X_AXES = {"evaluations": "evaluations", "env_steps": "environment steps"}
"""What report curves can run against, and their axis labels."""


@dataclasses.dataclass
class RunCurves:
    """One run as a report reads it: its group, folder, the metric curves against evaluations
    (and environment steps, for runs that log them), and its final archive's fitnesses
    (`-inf` for empty cells)."""

    group: str
    folder: str
    evaluations: np.ndarray
    curves: dict[str, np.ndarray]
    fitnesses: np.ndarray
    env_steps: np.ndarray | None = None

    def axis(self, x: str) -> np.ndarray:
        """The run's `"evaluations"` or `"env_steps"` column."""
        values = {"evaluations": self.evaluations, "env_steps": self.env_steps}.get(x)
        if x not in X_AXES:
            raise ValueError(f"x must be one of {list(X_AXES)}, got {x!r}")
        if values is None:
            raise ValueError(
                f"run folder {self.folder!r} logs no environment steps (a {self.group} run): "
                "compare it against evaluations"
            )
        return values

    @property
    def fitness_loss(self) -> float:
        """The paper's fitness loss, in percent: how much the best elite's fitness drops when
        it is re-evaluated, `100 * (max - averaged max) / |max|` at the end (`nan` for
        runs without re-evaluations)."""
        if "averaged_max_fitness" not in self.curves:
            return float("nan")
        best, again = self.curves["max_fitness"][-1], self.curves["averaged_max_fitness"][-1]
        return float(100.0 * (best - again) / abs(best)) if best != 0 else float("nan")


PEER_FILE = "peer.json"
"""The file that makes a folder a run of another library (`read_peer_curves`)."""


def read_peer_curves(folder: str | os.PathLike) -> RunCurves:
    """A run of another library (pyribs, QDax, your own code), in the form a report reads
    beside the jobs' run folders:

    - `peer.json`: `{"library": ..., "algorithm": ..., "task": ...}`; the group is
      `"<algorithm> on <task> (<library>)"`, so the same algorithm from two libraries is two
      groups that the report tests against each other.
    - `progress.csv`: an `evaluations` column and any of `REPORT_METRICS`, one row per logged
      step, on the jobs' scales (`coverage` a fraction).
    - `fitnesses.npy`: the final archive's fitness per cell, `-inf` (or NaN) where empty.

    A missing file, key or column is a `ValueError` naming it."""
    folder = os.fspath(folder)
    run = RunFolder(folder, create=False)  # a reader: makes no folder, removes no file
    for name in (PEER_FILE, "progress.csv", "fitnesses.npy"):
        if not os.path.isfile(run.file(name)):
            raise ValueError(f"peer run folder {folder!r} has no {name}")
    about = run.read_json(PEER_FILE)  # not JSON: a ValueError naming the file
    missing = [k for k in ("library", "algorithm", "task") if not isinstance(about.get(k), str)]
    if missing:
        raise ValueError(f"peer run folder {folder!r}: {PEER_FILE} lacks {missing} (strings)")
    progress = run.read_columns("progress.csv")
    evaluations = progress.get("evaluations")
    if evaluations is None or evaluations.dtype.kind != "f" or len(evaluations) == 0:
        raise ValueError(
            f"peer run folder {folder!r}: progress.csv needs a numeric evaluations column "
            "with at least one row"
        )
    curves = {
        name: np.asarray(progress[name], np.float64)
        for name in REPORT_METRICS
        if name in progress and progress[name].dtype.kind == "f"
    }
    if not curves:
        raise ValueError(
            f"peer run folder {folder!r}: progress.csv has none of {list(REPORT_METRICS)}"
        )
    fitnesses = np.asarray(run.read_npy("fitnesses.npy"), np.float64).reshape(-1)
    group = f"{about['algorithm']} on {about['task']} ({about['library']})"
    return RunCurves(group, folder, evaluations, curves, np.nan_to_num(fitnesses, nan=-np.inf))


def read_curves(folder: str | os.PathLike) -> RunCurves:
    """A QD run folder's curves and final fitnesses: a job's, or another library's run
    (`read_peer_curves`, a folder with `peer.json`). A folder that is neither a finished QD run
    nor a peer run is a `ValueError` naming it."""
    folder = os.fspath(folder)
    if os.path.isfile(os.path.join(folder, PEER_FILE)):
        return read_peer_curves(folder)
    status = run_status(folder).get("status")
    if status not in ("finished", "unknown"):
        raise ValueError(f"run folder {folder!r} is {status}, not finished")
    result = load_run(folder)
    if result.repertoire is None:
        raise ValueError(
            f"run folder {folder!r} holds a {result.config.JOB} run, not a QD run (no repertoire)"
        )
    progress = result.progress
    if len(progress.get("evaluations", ())) == 0:
        raise ValueError(
            f"run folder {folder!r}: its progress.csv has no complete row (a file cut by a "
            "kill, or written by hand?)"
        )
    curves = {}
    for name in REPORT_METRICS:
        values = _coverage(progress) if name == "coverage" else progress.get(name)
        if values is not None:
            curves[name] = np.asarray(values, np.float64)
    steps = progress.get("env_steps")
    return RunCurves(
        group_of(result),
        folder,
        np.asarray(progress["evaluations"], np.float64),
        curves,
        np.asarray(result.repertoire.fitnesses, np.float64),
        None if steps is None else np.asarray(steps, np.float64),
    )


@dataclasses.dataclass
class GroupStats:
    """A group's curves over seeds on a grid of `x_name` (`"evaluations"` or `"env_steps"`)
    values `x`: the median and quartiles per metric (`(len(x),)` each) over the `count` runs
    that reach each value, and each run's final value (`finals[metric]`, one per run)."""

    name: str
    runs: list[RunCurves]
    x_name: str
    x: np.ndarray
    median: dict[str, np.ndarray]
    q1: dict[str, np.ndarray]
    q3: dict[str, np.ndarray]
    finals: dict[str, np.ndarray]
    count: np.ndarray | None = None


def group_stats(
    name: str, runs: Sequence[RunCurves], x: str = "evaluations", *, truncate: bool = False
) -> GroupStats:
    """Median and quartiles over `runs` of every metric they all log, against `x`
    (`"evaluations"` or `"env_steps"`).

    By default the grid is the union of the runs' values of `x`: at each value, the runs whose
    logs span it (interpolated linearly between their rows) give the median and quartiles, so
    past the shortest run's end the curves are over the runs that go on (`count` says how
    many), and each run's final value is its own last row. With `truncate`, every run is read
    on the shortest run's values and its final value is taken at that run's end: a comparison
    at equal budget."""
    axes = [r.axis(x) for r in runs]
    if truncate:
        grid = min(axes, key=lambda a: a[-1])
    else:
        grid = np.unique(np.concatenate(axes))
    metrics = [m for m in REPORT_METRICS if all(m in r.curves for r in runs)]

    def on_grid(axis: np.ndarray, values: np.ndarray) -> np.ndarray:
        inside = (grid >= axis[0]) & (grid <= axis[-1])
        return np.where(inside, np.interp(grid, axis, values), np.nan)

    stacked = {m: np.stack([on_grid(a, r.curves[m]) for a, r in zip(axes, runs)]) for m in metrics}
    if truncate:
        finals = {m: stacked[m][:, -1] for m in metrics}
    else:
        finals = {m: np.asarray([r.curves[m][-1] for r in runs]) for m in metrics}
    if "averaged_max_fitness" in metrics:
        finals["fitness_loss"] = np.asarray([r.fitness_loss for r in runs])
    reach = np.stack([(grid >= a[0]) & (grid <= a[-1]) for a in axes])
    with warnings.catch_warnings():  # a metric that is NaN in every run at some value
        warnings.simplefilter("ignore", RuntimeWarning)
        median = {m: np.nanmedian(v, axis=0) for m, v in stacked.items()}
        q1 = {m: np.nanpercentile(v, 25, axis=0) for m, v in stacked.items()}
        q3 = {m: np.nanpercentile(v, 75, axis=0) for m, v in stacked.items()}
    return GroupStats(name, list(runs), x, grid, median, q1, q3, finals, reach.sum(axis=0))


def length_notes(groups: Sequence[GroupStats], *, truncate: bool = False) -> list[str]:
    """One line per group whose runs end at different values of its `x`, naming each run
    and where it ends, and how the report read them."""
    notes = []
    for g in groups:
        ends = [float(r.axis(g.x_name)[-1]) for r in g.runs]
        if len(set(ends)) < 2:
            continue
        runs = ", ".join(f"{r.folder} ends at {e:g}" for r, e in zip(g.runs, ends))
        label = X_AXES[g.x_name]
        if truncate:
            how = f"every run is cut at {min(ends):g} {label} (truncate), its final values there"
        else:
            how = (
                "final values are each run's own last row; past "
                f"{min(ends):g} {label} the curves are over the runs that go on"
            )
        notes.append(f"{g.name}: runs of unequal length ({runs}): {how}")
    return notes


def mann_whitney(a: np.ndarray, b: np.ndarray, method: str = "auto") -> float:
    """Two-sided Mann-Whitney U p-value of samples `a` and `b` (scipy; non-finite values
    are dropped, `nan` if a sample is then empty). `method` `"asymptotic"`
    (without continuity correction) is what the paper's tables used; `"auto"` is exact for
    small samples without ties."""
    from scipy.stats import mannwhitneyu

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if len(a) == 0 or len(b) == 0:
        return float("nan")
    kwargs: dict[str, Any] = {"alternative": "two-sided", "method": method}
    if method == "asymptotic":
        kwargs["use_continuity"] = False
    return float(mannwhitneyu(a, b, **kwargs).pvalue)


@dataclasses.dataclass
class Report:
    """What `report` computed: the groups (in the order first met), per final metric the
    p-value of every pair of groups (`p_values[metric][(a, b)]`), and `notes` on runs of
    unequal length."""

    groups: list[GroupStats]
    p_values: dict[str, dict[tuple[str, str], float]]
    notes: list[str] = dataclasses.field(default_factory=list)
    """How runs of unequal length were read (`length_notes`), for the reader to see."""

    def table(self) -> str:
        """The final medians (with quartiles) of every group, as a Markdown table."""
        metrics = _final_metrics(self.groups)
        lines = [
            "| group | runs | " + " | ".join(metrics) + " |",
            "| --- | --- | " + " | ".join("---" for _ in metrics) + " |",
        ]
        for g in self.groups:
            cells = []
            for m in metrics:
                v = g.finals.get(m)
                if v is None:
                    cells.append("")
                else:
                    q1, med, q3 = np.nanpercentile(v, [25, 50, 75])
                    cells.append(f"{med:.4g} [{q1:.4g}, {q3:.4g}]")
            lines.append(f"| {g.name} | {len(g.runs)} | " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def p_value_tables(self) -> str:
        """One Markdown table of p-values per metric (rows and columns: the groups)."""
        names = [g.name for g in self.groups]
        out = []
        for metric, pairs in self.p_values.items():
            out.append(f"#### {metric}\n")
            out.append("| | " + " | ".join(names) + " |")
            out.append("| --- | " + " | ".join("---" for _ in names) + " |")
            for a in names:
                row = [f"{pairs[(a, b)]:.3g}" if (a, b) in pairs else "" for b in names]
                out.append(f"| {a} | " + " | ".join(row) + " |")
            out.append("")
        return "\n".join(out)


def _final_metrics(groups: Sequence[GroupStats]) -> list[str]:
    order = [*REPORT_METRICS, "fitness_loss"]
    return [m for m in order if any(m in g.finals for g in groups)]


def report(
    folders: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike | None = None,
    *,
    x: str = "evaluations",
    p_method: str = "auto",
    plots: bool = True,
    truncate: bool = False,
) -> Report:
    """Compare QD runs: read every run folder of `folders`, group them (`group_of`), and
    compute the median and interquartile range over seeds, the final medians and the p-values
    between groups (`mann_whitney` with `p_method`: `"auto"`, `"exact"` or
    `"asymptotic"`). Curves run against `x`: `"evaluations"` (every QD run) or
    `"env_steps"` (PGA-ME and ME-PBT runs, as QDax plots them). Runs of unequal length are
    each read to their own end (their final values are their last rows), or, with
    `truncate`, all cut at the shortest run's end (`group_stats`); `Report.notes` and
    `report.md` say which runs differ.

    With `out_dir`, write there `report.md` (the tables), `finals.csv` (each run's final
    values), `p_values.csv` (with two groups or more) and, with `plots`, `curves.png`
    (median and IQR per group) and `fitness_density.png` (the cumulative fitness density
    averaged over seeds).
    """
    if not folders:
        raise ValueError("report needs at least one run folder")
    if p_method not in P_METHODS:
        raise ValueError(f"p_method must be one of {list(P_METHODS)}, got {p_method!r}")
    if x not in X_AXES:
        raise ValueError(f"x must be one of {list(X_AXES)}, got {x!r}")
    runs = [read_curves(f) for f in folders]
    by_group: dict[str, list[RunCurves]] = {}
    for r in runs:
        by_group.setdefault(r.group, []).append(r)
    groups = [group_stats(name, rs, x, truncate=truncate) for name, rs in by_group.items()]
    p_values: dict[str, dict[tuple[str, str], float]] = {}
    for metric in _final_metrics(groups):
        pairs = {}
        for a in groups:
            for b in groups:
                if a is not b and metric in a.finals and metric in b.finals:
                    pairs[(a.name, b.name)] = mann_whitney(
                        a.finals[metric], b.finals[metric], p_method
                    )
        p_values[metric] = pairs
    result = Report(groups, p_values, length_notes(groups, truncate=truncate))
    if out_dir is not None:
        _write(RunFolder(out_dir), result, p_method, plots)
    return result


def _write(folder: RunFolder, result: Report, p_method: str, plots: bool) -> None:
    header = ["group", "folder", *_final_metrics(result.groups)]
    rows = []
    for g in result.groups:
        for i, r in enumerate(g.runs):
            rows.append(
                [
                    g.name,
                    r.folder,
                    *(float(g.finals[m][i]) if m in g.finals else "" for m in header[2:]),
                ]
            )
    folder.write_csv("finals.csv", header, rows)
    several = len(result.groups) > 1
    if several:
        folder.write_csv(
            "p_values.csv",
            ["metric", "group_a", "group_b", "p_value"],
            [[m, a, b, p] for m, pairs in result.p_values.items() for (a, b), p in pairs.items()],
        )
    method = {
        "auto": "exact for small samples without ties, else asymptotic",
        "exact": "exact",
        "asymptotic": "asymptotic, no continuity correction",
    }[p_method]
    n = len(result.groups)
    text = (
        "# Report\n\n"
        f"{sum(len(g.runs) for g in result.groups)} runs in {n} group{'s' if several else ''}. "
        "Final values: median [first quartile, third quartile] over the runs of each group.\n\n"
        f"{result.table()}\n\n"
    )
    if result.notes:
        text += "".join(f"Note: {note}.\n\n" for note in result.notes)
    if several:
        text += f"## Two-sided Mann-Whitney U p-values ({method})\n\n{result.p_value_tables()}"
    else:  # p-values compare groups: one group has none
        text += "One group: no p-values (they compare groups; give the runs of another).\n"
    folder.write_text("report.md", text)
    if plots:
        folder.write_figure("curves.png", plot_report_curves(result))
        folder.write_figure("fitness_density.png", plot_report_density(result))


def plot_report_curves(result: Report):
    """One panel per metric: each group's median over seeds, its interquartile range shaded."""
    import matplotlib.pyplot as plt

    metrics = [m for m in REPORT_METRICS if any(m in g.median for g in result.groups)]
    cols = min(3, len(metrics))
    rows = -(-len(metrics) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.4 * rows), squeeze=False)
    for ax in axes.flat[len(metrics) :]:
        ax.set_visible(False)
    for ax, metric in zip(axes.flat, metrics):
        for g in result.groups:
            if metric not in g.median:
                continue
            (line,) = ax.plot(g.x, g.median[metric], label=g.name)
            ax.fill_between(
                g.x, g.q1[metric], g.q3[metric], alpha=0.25, color=line.get_color(), linewidth=0
            )
        ax.set_title(metric)
        ax.set_xlabel(X_AXES[result.groups[0].x_name])
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_report_density(result: Report):
    """The cumulative fitness density of each group's final archives, averaged over seeds."""
    import matplotlib.pyplot as plt

    from ..plotting import plot_fitness_density

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for g in result.groups:
        plot_fitness_density([r.fitnesses for r in g.runs], label=g.name, ax=ax)
    return fig
