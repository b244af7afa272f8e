"""Plots that return matplotlib figures: repertoire heatmaps (grid and CVT, rasterised), QD
metric curves, cumulative fitness density, PBT hyperparameters and returns, learning curves,
trajectories in a task's arena, Pareto fronts and the per-cell hypervolume map.

A public namespace of its own (`from eqx_qd import plotting`) so that `import eqx_qd` does not
import matplotlib. Nothing here writes files: the jobs save figures through their run folder.
"""

from collections.abc import Mapping, Sequence

from ._extras import require as _require


_require("plot", "eqx_qd.plotting")

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from jaxtyping import ArrayLike
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ._metrics import per_cell_hypervolumes
from ._pareto import non_dominated
from ._repertoire import (
    AbstractMultiObjectiveRepertoire,
    AbstractRepertoire,
    MAPElitesRepertoire,
    ParetoRepertoire,
)
from ._tessellation import GridTessellation
from .envs._base import AbstractQDEnv


def _default_bounds(repertoire: AbstractRepertoire) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(repertoire, MAPElitesRepertoire):
        lo, hi = (np.asarray(x, np.float64) for x in repertoire.extent)
        pad = 0.05 * (hi - lo)
        return lo - pad, hi + pad
    tess = repertoire.tessellation
    if isinstance(tess, GridTessellation):
        return np.asarray(tess.minval, np.float64), np.asarray(tess.maxval, np.float64)
    centroids = np.asarray(repertoire.centroids, np.float64)
    lo, hi = centroids.min(axis=0), centroids.max(axis=0)
    # Voronoi regions reach past the outermost centroids: pad by about half a cell's width.
    width = np.where(hi > lo, hi - lo, 1.0)
    pad = width / (2 * centroids.shape[0] ** (1 / centroids.shape[1]))
    return lo - pad, hi + pad


def _per_axis(value: ArrayLike | Sequence[float], d: int, name: str) -> np.ndarray:
    out = np.asarray(value, np.float64)
    if out.ndim == 0:
        return np.full((d,), float(out))
    if out.shape != (d,):
        raise ValueError(f"plot_repertoire: {name} must be a scalar or {d} values, got {value!r}")
    return out


def plot_repertoire(
    repertoire: AbstractRepertoire,
    ax: Axes | None = None,
    bounds: tuple[ArrayLike | Sequence[float], ArrayLike | Sequence[float]] | None = None,
    resolution: int = 400,
    cmap: str = "viridis",
    values: ArrayLike | None = None,
    label: str = "fitness",
    log_scale: bool = False,
    vmin: float | None = None,
    vmax: float | None = None,
    descriptor_names: Sequence[str] | None = None,
) -> Figure:
    """Heatmap of the elites' fitness (or of `values`, one per cell) over the descriptor space.

    With 1 or 2 descriptors the image is rasterised: each pixel (sampled at its centre) takes
    the value of its cell, so CVT cells appear as their Voronoi regions and grid cells as
    rectangles of any shape; empty cells stay white. With 3 or more, one panel per pair of
    descriptors shows the elites' stored descriptors as points, coloured alike. A repertoire
    without cells (`DNSRepertoire`, `UnstructuredRepertoire`) is drawn as its elites'
    descriptors, coloured points (one descriptor: fitness against it), pairs beyond two.

    **Arguments:**

    - `repertoire`: any repertoire.
    - `ax`: the axes to draw on (a new figure by default; 1 or 2 descriptors only).
    - `bounds`: `(low, high)` of the drawn box, each a scalar or one value per descriptor
      (default: the grid's bounds, or the CVT centroids' range padded by half a cell; without
      cells, the stored descriptors' range padded by 5%).
    - `resolution`: pixels per side; `cmap`: the colour map.
    - `values`: what colours each filled cell (`(num_cells,)`; default: its fitness), named
      `label`; `log_scale` colours by its logarithm (learning rates).
    - `vmin`, `vmax`: the colour scale's limits (default: the shown values' range): give two
      plots the same limits to compare them.
    - `descriptor_names`: axis labels, one per descriptor.

    **Returns:** the figure.
    """
    d = repertoire.num_descriptors
    names = list(descriptor_names) if descriptor_names is not None else None
    if names is None:
        names = ["descriptor"] if d == 1 else [f"descriptor {i + 1}" for i in range(d)]
    elif len(names) != d:
        raise ValueError(f"plot_repertoire: descriptor_names must hold {d} names, got {names!r}")
    lo, hi = _default_bounds(repertoire)
    if bounds is not None:
        lo, hi = _per_axis(bounds[0], d, "bounds[0]"), _per_axis(bounds[1], d, "bounds[1]")
    if not np.all(hi > lo):
        raise ValueError(f"plot_repertoire: bounds must have low < high, got {lo} and {hi}")
    fit = np.asarray(repertoire.fitnesses)
    shown = fit if values is None else np.where(np.isfinite(fit), np.asarray(values), np.nan)
    if log_scale:
        shown = np.log10(np.where(shown > 0, shown, np.nan))
        label = f"log10 {label}"
    finite = shown[np.isfinite(shown)]
    low, high = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
    vmin, vmax = low if vmin is None else vmin, high if vmax is None else vmax
    filled = int(np.isfinite(fit).sum())
    cell_free = not isinstance(repertoire, MAPElitesRepertoire)
    title = f"repertoire: {filled}/{fit.size} {'slots' if cell_free else 'cells'} filled"
    if d > 2:
        return _plot_pairs(repertoire, shown, lo, hi, names, cmap, vmin, vmax, label, title, ax)
    fig = ax.figure if ax is not None else plt.figure(figsize=(5.2, 4.2) if d == 2 else (6, 3))
    ax = ax if ax is not None else fig.add_subplot()
    if cell_free:
        keep = np.isfinite(shown)
        points = np.asarray(repertoire.descriptors)[keep]
        if d == 2:
            dots = ax.scatter(
                points[:, 0], points[:, 1], c=shown[keep], s=6, cmap=cmap, vmin=vmin, vmax=vmax
            )
            ax.set_ylim(lo[1], hi[1])
            ax.set_ylabel(names[1])
            fig.colorbar(dots, ax=ax, label=label)
        else:
            ax.scatter(points[:, 0], shown[keep], s=6)
            ax.set_ylabel(label)
        ax.set_xlim(lo[0], hi[0])
        ax.set_xlabel(names[0])
        ax.set_title(title)
        fig.tight_layout()
        return fig
    tess = repertoire.tessellation
    # Pixel centres, one axis per descriptor.
    axes = [lo[i] + (np.arange(resolution) + 0.5) * (hi[i] - lo[i]) / resolution for i in range(d)]
    if d == 2:
        xx, yy = np.meshgrid(*axes)
        pixels = np.stack([xx.ravel(), yy.ravel()], axis=-1)
    else:
        pixels = axes[0][:, None]
    cells = np.asarray(tess.index(jnp.asarray(pixels, jnp.float32)))
    pixel_values = np.where(np.isfinite(shown[cells]), shown[cells], np.nan)
    if d == 2:
        image = ax.imshow(
            pixel_values.reshape(resolution, resolution),
            origin="lower",
            extent=(lo[0], hi[0], lo[1], hi[1]),
            aspect="auto",
            cmap=cmap,
            vmin=vmin,
            vmax=vmax,
            interpolation="nearest",
        )
        ax.set_xlabel(names[0])
        ax.set_ylabel(names[1])
        fig.colorbar(image, ax=ax, label=label)
    else:
        ax.plot(axes[0], pixel_values)
        ax.set_ylim(vmin, vmax)
        ax.set_xlabel(names[0])
        ax.set_ylabel(label)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_hypervolume_map(
    repertoire: ParetoRepertoire,
    reference_point: ArrayLike,
    ax: Axes | None = None,
    **kwargs,
) -> Figure:
    """Heatmap of each cell's hypervolume (MOME's per-cell MOQD-score) over the descriptor
    space: `plot_repertoire` of `repertoire`'s cells, coloured by the hypervolume of their
    fronts with respect to `reference_point` `(num_objectives,)`; empty cells stay white.
    `ax` and `**kwargs` (`bounds`, `cmap`, `vmin`, `vmax`, `descriptor_names`...) go to
    `plot_repertoire`. **Returns:** the figure."""
    if not isinstance(repertoire, ParetoRepertoire):
        raise TypeError(
            f"plot_hypervolume_map: repertoire must be a ParetoRepertoire, got "
            f"{type(repertoire).__name__}"
        )
    volumes = per_cell_hypervolumes(repertoire, jnp.asarray(reference_point, jnp.float32))
    occupied = np.asarray(repertoire.occupied)
    n = repertoire.num_cells
    cells = MAPElitesRepertoire(
        genotypes=jnp.zeros((n, 1)),
        fitnesses=jnp.asarray(np.where(occupied, np.asarray(volumes), -np.inf), jnp.float32),
        descriptors=repertoire.front_descriptors[:, 0],
        tessellation=repertoire.tessellation,
    )
    kwargs.setdefault("label", "hypervolume")
    fig = plot_repertoire(cells, ax=ax, **kwargs)
    drawn = ax if ax is not None else fig.axes[0]
    drawn.set_title(f"hypervolume per cell: {int(occupied.sum())}/{n} cells hold a front")
    return fig


def plot_pareto_fronts(
    repertoire: AbstractMultiObjectiveRepertoire,
    cells: Sequence[int] | None = None,
    ax: Axes | None = None,
    with_global: bool = True,
    objective_names: Sequence[str] | None = None,
) -> Figure:
    """The solutions `repertoire` stores, in the plane of its two objectives: each cell's
    front in its own colour (a `ParetoRepertoire`; only `cells` when given), or a
    population's solutions, and with `with_global` the global Pareto front of everything
    stored as a black staircase. `ax`: the axes to draw on (a new figure by default);
    `objective_names`: the two axis labels. **Returns:** the figure."""
    if not isinstance(repertoire, AbstractMultiObjectiveRepertoire):
        raise TypeError(
            "plot_pareto_fronts: repertoire must be an AbstractMultiObjectiveRepertoire, got "
            f"{type(repertoire).__name__}"
        )
    if repertoire.num_objectives != 2:
        raise ValueError(
            f"plot_pareto_fronts draws two objectives, the repertoire keeps "
            f"{repertoire.num_objectives}"
        )
    names = list(objective_names) if objective_names is not None else ["objective 1", "objective 2"]
    if len(names) != 2:
        raise ValueError(f"plot_pareto_fronts: objective_names must hold 2 names, got {names!r}")
    fig = ax.figure if ax is not None else plt.figure(figsize=(5.2, 4.2))
    ax = ax if ax is not None else fig.add_subplot()
    objectives = np.asarray(repertoire.objectives)
    filled = np.all(np.isfinite(objectives), axis=-1)
    if isinstance(repertoire, ParetoRepertoire):
        length = repertoire.front_length
        owner = np.arange(objectives.shape[0]) // length
        chosen = range(repertoire.num_cells) if cells is None else list(cells)
        for c in chosen:
            if not 0 <= c < repertoire.num_cells:
                raise ValueError(
                    f"plot_pareto_fronts: cell {c} is not one of the {repertoire.num_cells} cells"
                )
        keep = filled & np.isin(owner, list(chosen))
        colour = plt.get_cmap("Spectral")(owner[keep] / max(1, repertoire.num_cells - 1))
        ax.scatter(objectives[keep, 0], objectives[keep, 1], s=8, c=colour)
        title = f"fronts of {len(set(owner[keep].tolist()))} cells"
    else:
        ax.scatter(objectives[filled, 0], objectives[filled, 1], s=8)
        title = f"population: {int(filled.sum())} solutions"
    if with_global and filled.any():
        front_mask = np.asarray(non_dominated(jnp.asarray(objectives), jnp.asarray(filled)))
        front = objectives[front_mask]
        front = front[np.argsort(front[:, 0])]
        label = f"global front ({len(front)})"
        ax.step(front[:, 0], front[:, 1], where="post", color="black", lw=1.2, label=label)
        ax.legend(loc="lower left")
    ax.set_xlabel(names[0])
    ax.set_ylabel(names[1])
    ax.set_title(title)
    fig.tight_layout()
    return fig


def _plot_pairs(repertoire, shown, lo, hi, names, cmap, vmin, vmax, label, title, ax) -> Figure:
    """Descriptors 3 and up: a lower-triangular grid, one panel per pair (i < j)."""
    if ax is not None:
        raise ValueError("plot_repertoire: with more than 2 descriptors it draws its own figure")
    d = len(names)
    keep = np.isfinite(shown)
    points = np.asarray(repertoire.descriptors)[keep]
    colours = shown[keep]
    fig, axes = plt.subplots(d - 1, d - 1, figsize=(2.6 * (d - 1) + 1, 2.4 * (d - 1)))
    scatter = None
    for row in range(d - 1):
        for col in range(d - 1):
            panel = axes[row, col]
            i, j = col, row + 1  # x: descriptor i, y: descriptor j
            if i >= j:
                panel.axis("off")
                continue
            scatter = panel.scatter(
                points[:, i], points[:, j], c=colours, s=4, cmap=cmap, vmin=vmin, vmax=vmax
            )
            panel.set_xlim(lo[i], hi[i])
            panel.set_ylim(lo[j], hi[j])
            if row == d - 2:
                panel.set_xlabel(names[i])
            if col == 0:
                panel.set_ylabel(names[j])
    if scatter is not None:
        fig.colorbar(scatter, ax=axes, label=label)
    fig.suptitle(title)
    return fig


_PANELS = (
    ("qd_score", "QD-score"),
    ("coverage", "coverage"),
    ("max_fitness", "max fitness"),
    ("mean_fitness", "mean fitness"),
)
_MOQD_PANELS = (
    ("moqd_score", "MOQD-score"),
    ("global_hypervolume", "global hypervolume"),
    ("coverage", "coverage"),
    ("max_sum_scores", "max sum of objectives"),
)


def plot_metrics(
    history: Mapping[str, Sequence[float] | ArrayLike],
    x_key: str = "evaluations",
    top_key: str | None = None,
) -> Figure:
    """QD-score, coverage, max and mean fitness against `history[x_key]` (a multi-objective
    history, with `moqd_score`: MOQD-score, global hypervolume, coverage and max sum of
    objectives); with `top_key`
    (e.g. `"env_steps"`, increasing with `x_key`) a second scale on top of each panel, so
    the curves read against both (evaluations and environment steps, as QDax plots them)."""
    fig, axes = plt.subplots(2, 2, figsize=(9, 6.4 if top_key else 6))
    x = np.asarray(history[x_key], np.float64)
    top = None if top_key is None else np.asarray(history[top_key], np.float64)
    if top is not None and (
        len(top) != len(x) or np.any(np.diff(x) <= 0) or np.any(np.diff(top) < 0)
    ):
        raise ValueError(f"plot_metrics: {top_key!r} must grow with {x_key!r}, one value per row")
    panels = _MOQD_PANELS if "moqd_score" in history else _PANELS
    for ax, (key, label) in zip(axes.ravel(), panels):
        ax.plot(x, np.asarray(history[key]))
        ax.set_title(label)
        ax.set_xlabel(x_key)
        ax.grid(alpha=0.3)
        if top is not None and len(x) > 1:
            forward = lambda v, top=top: np.interp(v, x, top)
            backward = lambda v, top=top: np.interp(v, top, x)
            second = ax.secondary_xaxis("top", functions=(forward, backward))
            second.set_xlabel(top_key, fontsize="small")
            # Ticks within the logged range only (the mapping is flat beyond its ends).
            ticks = MaxNLocator(5).tick_values(top[0], top[-1])
            second.set_xticks(ticks[(ticks >= top[0]) & (ticks <= top[-1])])
    fig.tight_layout()
    return fig


def plot_fitness_density(
    fitnesses: Sequence[np.ndarray],
    label: str | None = None,
    ax: Axes | None = None,
    bins: int = 100,
) -> Figure:
    """Cumulative fitness density: for each fitness `f`, the number of archive solutions with
    fitness at least `f`, averaged over runs (one array of per-cell fitnesses per run; empty
    cells are `-inf`). To compare algorithms, call it once per algorithm on the same `ax`,
    each with its own `label`; `bins` fitness values are drawn between the lowest and the
    highest.
    """
    fig = ax.figure if ax is not None else plt.figure(figsize=(5.5, 3.8))
    ax = ax if ax is not None else fig.add_subplot()
    runs = [np.asarray(f, np.float64) for f in fitnesses]
    finite = np.concatenate([f[np.isfinite(f)] for f in runs]) if runs else np.zeros(0)
    if finite.size == 0:
        raise ValueError("plot_fitness_density needs at least one filled cell")
    grid = np.linspace(finite.min(), finite.max(), bins)
    counts = np.mean([(f[np.isfinite(f)][None, :] >= grid[:, None]).sum(1) for f in runs], axis=0)
    ax.plot(grid, counts, label=label)
    ax.set_xlabel("fitness")
    ax.set_ylabel("solutions with at least this fitness")
    ax.grid(alpha=0.3)
    if label is not None:
        ax.legend()
    return fig


def plot_hparams(hparams: Mapping[str, np.ndarray], x_label: str = "round") -> Figure:
    """One panel per explored hyperparameter: each member's value per round (what PBT chose),
    against `x_label`.

    `hparams` maps names to `(rounds, population)` arrays; hyperparameters that never
    changed are left out (all are drawn when none changed). Learning rates use a log scale.
    """
    varying = [n for n in sorted(hparams) if np.ptp(np.asarray(hparams[n])) > 0]
    names = varying or sorted(hparams)
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows), squeeze=False)
    for ax, name in zip(axes.ravel(), names):
        values = np.asarray(hparams[name])
        ax.plot(np.arange(values.shape[0]), values, marker=".", lw=1)
        ax.set_title(name)
        ax.set_xlabel(x_label)
        if name.endswith("_lr"):
            ax.set_yscale("log")
    for ax in axes.ravel()[len(names) :]:
        ax.axis("off")
    fig.tight_layout()
    return fig


def plot_population_returns(returns: np.ndarray) -> Figure:
    """Each member's evaluation return per round (grey) and the population mean (blue);
    `returns` is `(rounds, population)`."""
    returns = np.asarray(returns)
    rounds = np.arange(returns.shape[0])
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for m in range(returns.shape[1]):
        ax.plot(rounds, returns[:, m], color="grey", alpha=0.4, lw=1)
    ax.plot(rounds, returns.mean(axis=1), color="C0", lw=2, label="population mean")
    ax.set_xlabel("round")
    ax.set_ylabel("evaluation return")
    ax.legend()
    fig.tight_layout()
    return fig


def plot_learning_curve(
    env_steps: np.ndarray, mean_return: np.ndarray, std_return: np.ndarray
) -> Figure:
    """`mean_return` (with a +-`std_return` band) against `env_steps`, one point per
    evaluation."""
    x, mean, std = (np.asarray(a) for a in (env_steps, mean_return, std_return))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(x, mean, color="C0", lw=2, label="mean return")
    ax.fill_between(x, mean - std, mean + std, color="C0", alpha=0.2, label="+- 1 std")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("evaluation return")
    ax.legend()
    fig.tight_layout()
    return fig


def plot_repertoire_hparams(
    repertoire: MAPElitesRepertoire,
    hparams: Mapping[str, ArrayLike],
    resolution: int = 200,
    bounds: tuple[ArrayLike | Sequence[float], ArrayLike | Sequence[float]] | None = None,
    descriptor_names: Sequence[str] | None = None,
) -> Figure:
    """One heatmap per hyperparameter: the repertoire coloured by each elite's value (as
    QDax's ME-PBT notebook draws it). `hparams` maps names to `(num_cells,)` arrays;
    learning rates (`*_lr`) are coloured by their logarithm; `resolution` pixels per
    side; `bounds` and `descriptor_names` as `plot_repertoire`'s."""
    names = list(hparams)
    if not names:
        raise ValueError("plot_repertoire_hparams needs at least one hyperparameter")
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.8 * rows), squeeze=False)
    for ax, name in zip(axes.ravel(), names):
        plot_repertoire(
            repertoire,
            ax=ax,
            resolution=resolution,
            values=np.asarray(hparams[name]),
            label=name,
            log_scale=name.endswith("_lr"),
            bounds=bounds,
            descriptor_names=descriptor_names,
        )
        ax.set_title(name)
    for ax in axes.ravel()[len(names) :]:
        ax.axis("off")
    fig.tight_layout()
    return fig


def plot_hparams_distribution(
    hparams: Mapping[str, ArrayLike], x: ArrayLike | None = None, x_label: str = "env steps"
) -> Figure:
    """The population's hyperparameters over time: per hyperparameter, the median (line), the
    interquartile range (dark band) and the range (light band) over the members.

    `hparams` maps names to `(steps, members)` arrays; `x` (`(steps,)`, default the
    step index) is drawn against `x_label`. Hyperparameters that never changed are left out
    (all are drawn when none changed). Learning rates use a log scale.
    """
    varying = [n for n in sorted(hparams) if np.ptp(np.asarray(hparams[n])) > 0]
    names = varying or sorted(hparams)
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows), squeeze=False)
    for ax, name in zip(axes.ravel(), names):
        values = np.asarray(hparams[name], np.float64)
        steps = np.arange(values.shape[0]) if x is None else np.asarray(x)
        low, q1, median, q3, high = np.percentile(values, [0, 25, 50, 75, 100], axis=1)
        ax.fill_between(steps, low, high, color="C0", alpha=0.15, lw=0, label="range")
        ax.fill_between(steps, q1, q3, color="C0", alpha=0.35, lw=0, label="quartiles")
        ax.plot(steps, median, color="C0", lw=1.5, label="median")
        ax.set_title(name)
        ax.set_xlabel(x_label if x is not None else "step")
        if name.endswith("_lr"):
            ax.set_yscale("log")
    axes.ravel()[0].legend(fontsize="small")
    for ax in axes.ravel()[len(names) :]:
        ax.axis("off")
    fig.tight_layout()
    return fig


def plot_trajectories(
    env: AbstractQDEnv,
    positions: ArrayLike,
    valid: ArrayLike | None = None,
    *,
    labels: Sequence[str] | None = None,
    colors: ArrayLike | Sequence[float] | None = None,
    color_label: str = "",
    ax: Axes | None = None,
) -> Figure:
    """Paths in the plane of a task whose state descriptor is an (x, y) position (`env.arena`:
    mazes, traps, omni tasks), over its walls, goal and descriptor box.

    `positions`: `(time, 2)` or `(paths, time, 2)`, e.g. an episode's
    `transitions.next_state_desc`; `valid` (same leading axes) cuts each path where its
    episode ended. Each path starts with a circle and ends with a cross (its descriptor).
    `labels` name the paths in a legend; `colors` (one value per path, e.g. the fitness)
    colour them through a colour bar labelled `color_label`. Drawn on `ax` when given.
    """
    arena = env.arena
    if arena is None:
        raise ValueError(
            f"{type(env).__name__} {getattr(env, 'name', '')!r} has no arena: its state "
            "descriptor is not a position in the plane (feet contacts?); a brax robot can be "
            "rendered instead (BraxQDEnv.render_html)"
        )
    xy = np.asarray(positions, np.float64)
    if xy.ndim == 2:
        xy = xy[None]
    if xy.ndim != 3 or xy.shape[-1] != 2:
        raise ValueError(
            f"positions must be (time, 2) or (paths, time, 2), got {np.shape(positions)}"
        )
    mask = (
        np.ones(xy.shape[:2], bool)
        if valid is None
        else np.asarray(valid).reshape(xy.shape[:2]) > 0
    )
    if labels is not None and len(labels) != len(xy):
        raise ValueError(f"{len(labels)} labels for {len(xy)} paths")
    fig = None
    low, high = (np.asarray(b, np.float64) for b in env.descriptor_bounds)
    if ax is None:  # the figure takes the arena's shape (the axes keep equal scales)
        tall = float(np.clip((high[1] - low[1]) / (high[0] - low[0]), 0.3, 2.0))
        fig, ax = plt.subplots(figsize=(6.0, 1.2 + 5.0 * tall))
    ax.add_patch(plt.Rectangle(low, *(high - low), fill=False, ls="--", lw=1, ec="0.5"))
    for x0, y0, x1, y1 in arena.walls:
        if arena.wall_radius > 0:
            ax.add_patch(_capsule((x0, y0), (x1, y1), arena.wall_radius))
        else:
            ax.plot([x0, x1], [y0, y1], color="0.2", lw=3, solid_capstyle="round")
    if arena.goal is not None:
        ax.plot(*arena.goal, marker="*", ms=16, color="gold", mec="k", ls="", label="goal")
    values = None if colors is None else np.asarray(colors, np.float64).reshape(len(xy))
    cmap = plt.get_cmap("viridis")
    norm = None if values is None else plt.Normalize(np.min(values), np.max(values))
    for i, (path, keep) in enumerate(zip(xy, mask)):
        path = path[: max(int(keep.sum()), 1)]  # the valid steps (a prefix)
        color = f"C{i % 10}" if values is None else cmap(norm(values[i]))
        label = None if labels is None else labels[i]
        ax.plot(path[:, 0], path[:, 1], color=color, lw=1.5, label=label)
        ax.plot(*path[0], marker="o", ms=4, color=color)
        ax.plot(*path[-1], marker="x", ms=7, mew=2, color=color)
    if values is not None:
        bar = plt.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax)
        bar.set_label(color_label)
    # The box, widened to paths that left it (their descriptors are clipped to the box).
    drawn = xy[mask] if mask.any() else xy[:, :1].reshape(-1, 2)
    finite = drawn[np.all(np.isfinite(drawn), axis=1)]
    lo = np.minimum(low, finite.min(axis=0)) if len(finite) else low
    hi = np.maximum(high, finite.max(axis=0)) if len(finite) else high
    margin = 0.04 * (hi - lo)
    ax.set_xlim(lo[0] - margin[0], hi[0] + margin[0])
    ax.set_ylim(lo[1] - margin[1], hi[1] + margin[1])
    ax.set_aspect("equal")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    if labels is not None or arena.goal is not None:
        ax.legend(fontsize="small", loc="best")
    if fig is not None:
        fig.tight_layout()
    return ax.figure


def _capsule(a, b, radius: float):
    """A wall of half-thickness `radius` around the segment `a` - `b` (a stadium)."""
    from matplotlib.patches import Polygon

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    angle = np.arctan2(*(b - a)[::-1])
    turn = angle + np.linspace(-np.pi / 2, np.pi / 2, 16)  # the half circle around `b`
    arc = lambda t: radius * np.stack([np.cos(t), np.sin(t)], -1)
    return Polygon(
        np.concatenate([b + arc(turn), a + arc(turn + np.pi)]), closed=True, color="0.25"
    )


# What `from eqx_qd.plotting import *` takes: the names above (tests/test_guards.py).
__all__ = [
    "plot_fitness_density",
    "plot_hparams",
    "plot_hparams_distribution",
    "plot_hypervolume_map",
    "plot_learning_curve",
    "plot_metrics",
    "plot_pareto_fronts",
    "plot_population_returns",
    "plot_repertoire",
    "plot_repertoire_hparams",
    "plot_trajectories",
]
