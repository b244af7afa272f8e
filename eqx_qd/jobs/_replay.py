"""`eqx-qd replay RUN`: play one elite of a QD run folder again, and write what it does there
(brax's HTML viewer of the episode, a trajectory plot for tasks played in a plane)."""

import dataclasses
import os
from typing import Any

import jax
import jax.random as jr
import numpy as np

from .._compile import jit
from .._misc import tree_take
from ..envs._base import AbstractRenderable, EnvState
from ..envs._rollout import Episode
from ._folder import RunFolder
from ._job import Job, JOBS, read_config


@dataclasses.dataclass(frozen=True)
class Replay:
    """One elite played again (`replay`).

    **Fields:**

    - `id`: the elite's id (the `id` column of the run's actors and archive files; its cell
      index where the run kept no ids).
    - `cell`: its cell in the repertoire.
    - `stored_fitness`, `stored_descriptor`: what the repertoire holds for it.
    - `episode_return`, `descriptor`, `steps`: what the replayed episode gave (on a
      deterministic task, the stored values up to float32 rounding, which brax's contacts can
      amplify: `PolicyScorer.replay`).
    - `episode`: the `Episode`; `states`: the environment's states, `steps + 1` of them
      (`rollout_states`, cut to the episode).
    - `files`: what was written into the run folder, by kind (`html`, `png`).
    """

    id: int
    cell: int
    stored_fitness: float
    stored_descriptor: np.ndarray
    episode_return: float
    descriptor: np.ndarray
    steps: int
    episode: Episode
    states: EnvState
    files: dict[str, str]

    def summary(self) -> str:
        """One line: which elite, its stored and replayed fitness, and the files."""
        desc = ", ".join(f"{d:.3g}" for d in self.descriptor)
        text = (
            f"elite {self.id} (cell {self.cell}): stored fitness {self.stored_fitness:.6g}, "
            f"replayed return {self.episode_return:.6g} over {self.steps} steps, descriptor "
            f"({desc})"
        )
        return text + "".join(f"\nwrote {path}" for path in self.files.values())


def _choose(
    repertoire: Any, folder: str, id: int | None, cell: int | None, ids_where: str = ""
) -> int:
    """The cell of the elite asked for: by id, by cell, or the best (`ids_where`: where the
    job lists the ids, for the hint)."""
    fitnesses = np.asarray(repertoire.fitnesses)
    filled = np.isfinite(fitnesses)
    if not filled.any():
        raise ValueError(f"run folder {folder!r} has an empty repertoire: nothing to replay")
    if id is not None and cell is not None:
        raise ValueError("choose the elite by id or by cell, not both")
    best = np.argsort(np.where(filled, -fitnesses, np.inf))[: min(5, int(filled.sum()))]
    if cell is not None:
        if not 0 <= cell < fitnesses.size or not filled[cell]:
            raise ValueError(
                f"cell {cell} of {folder!r} holds no elite (the repertoire has "
                f"{fitnesses.size} cells; the best elites are in cells {best.tolist()})"
            )
        return cell
    if id is None:
        return int(best[0])
    if repertoire.extra is None:
        raise ValueError(f"run folder {folder!r} kept no elite ids: choose the elite by cell")
    ids = np.asarray(repertoire.extra)
    (hits,) = np.nonzero(filled & (ids == id))
    if hits.size == 0:
        raise ValueError(
            f"no elite with id {id} in {folder!r}'s final repertoire (ids of the best: "
            f"{ids[best].tolist()}{'; ' + ids_where if ids_where else ''})"
        )
    return int(hits[0])


def _replayable() -> list[str]:
    return [name for name, job in JOBS.items() if type(job).scorer is not Job.scorer]


@jit
def _play(scorer, genotype, key):
    return scorer.replay(genotype, key=key)


def replay(
    folder: str | os.PathLike,
    *,
    id: int | None = None,
    cell: int | None = None,
    seed: int = 0,
    write: bool = True,
) -> Replay:
    """Play one elite of a QD run folder (PGA-ME or ME-PBT: runs whose elites play an
    environment) again, as its scoring played it.

    **Arguments:**

    - `folder`: the run folder.
    - `id`: the elite's id (PGA-ME: the `id` column of `actors.csv` and `archive_*.csv`;
      ME-PBT: `load_run(folder).repertoire.extra`), or `cell` its cell; neither: the best
      elite.
    - `seed`: the episode's key (it matters on stochastic tasks only).
    - `write`: write `replay_<id>.html` (brax's viewer of the episode, for brax tasks) and
      `replay_<id>.png` (the path in the plane, for tasks whose state descriptor is a
      position: mazes, traps, omni tasks) into the folder.

    **Returns:** the `Replay`.
    """
    run_folder = RunFolder(folder, create=False)
    config = read_config(run_folder)
    job = JOBS[config.JOB]
    scorer = job.scorer(config)
    if scorer is None:
        raise ValueError(
            f"{os.fspath(folder)!r} is a {config.JOB} run: its elites play no environment "
            f"(replay reads the runs of {', '.join(_replayable())})"
        )
    repertoire = job.load(run_folder, config).repertoire
    c = _choose(repertoire, os.fspath(folder), id, cell, job.elite_ids)
    elite_id = c if repertoire.extra is None else int(np.asarray(repertoire.extra)[c])
    episode, states = _play(scorer, tree_take(repertoire.genotypes, c), jr.key(seed))
    env = scorer.env
    steps = int(episode.lengths)
    descriptor = np.asarray(env.descriptor(episode.transitions.next_state_desc, episode.valid))
    states = jax.tree.map(lambda x: x[: steps + 1], states)
    files: dict[str, str] = {}
    if write:
        if isinstance(env, AbstractRenderable):
            files["html"] = run_folder.file(f"replay_{elite_id}.html")
            run_folder.write_text(f"replay_{elite_id}.html", env.render_html(states))
        if env.arena is not None:
            from ..plotting import plot_trajectories

            fig = plot_trajectories(env, np.asarray(states.state_desc))
            fig.axes[0].set_title(
                f"{getattr(env, 'name', type(env).__name__)}: elite {elite_id}, return "
                f"{float(episode.returns):.4g}",
                fontsize="medium",
            )
            fig.tight_layout()
            files["png"] = run_folder.file(f"replay_{elite_id}.png")
            run_folder.write_figure(f"replay_{elite_id}.png", fig)
    return Replay(
        elite_id,
        c,
        float(np.asarray(repertoire.fitnesses)[c]),
        np.asarray(repertoire.descriptors)[c],
        float(episode.returns),
        descriptor,
        steps,
        episode,
        states,
        files,
    )
