"""The PGA-MAP-Elites job: the original repo's config arguments, its loop and its output files.

`run_pgame` writes one run folder: ``config.toml``, ``progress.csv`` (one row per batch),
``actors.csv`` (one row per actor added to the archive, with its parents), an
``archive_<evals>.csv`` snapshot every ``save_period`` evaluations, the final actors'
parameters (``repertoire.eqx``, read back by `load_pgame_run`), ``centroids.npy`` and plots.
"""

import csv
import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._custom_types import PRNGKey
from .._emitters.base import ActorType
from .._emitters.mixing import MixingEmitter
from .._emitters.quality_pg import pgame_emitter
from .._envs.base import AbstractQDEnv
from .._envs.brax import make_env
from .._io import atomic_write, load_repertoire, save_repertoire
from .._map_elites import MAPElites, MAPElitesState, StepInfo
from .._metrics import QDMetrics
from .._misc import filter_scan, tree_take
from .._repertoire import AddStatus, MapElitesRepertoire
from .._rl.networks import DeterministicPolicy
from .._rl.td3 import TD3, TD3HParams
from .._scoring import PolicyScorer, reevaluate
from .._tessellation import CVTTessellation
from .._variation import IsoLineVariation
from ._config import TomlConfig


@dataclasses.dataclass(frozen=True)
class PGAMEConfig(TomlConfig):
    """PGA-MAP-Elites settings. Field names follow the original repo's arguments; the defaults
    are the GECCO 2021 paper's (1e6 evaluations of 1000-step episodes: an HPC budget).
    `PGAMEConfig.local` is a small preset that runs on a laptop CPU in minutes.

    Ours, beyond the repo's arguments: ``episode_length``, ``critic_hidden``, ``critic_lr``,
    ``greedy_lr``, ``buffer_size``, ``reset_noise`` / ``obs_noise`` (stochastic tasks),
    ``num_reevals`` (the "10" of the averaged max fitness) and ``gradient_op`` (the repo's
    switch: ``False`` gives plain MAP-Elites with the same GA, budget and outputs).
    """

    TABLE: ClassVar[str] = "pgame"

    env: str = "walker2d_uni"
    seed: int = 0
    dim_map: int | None = None  # descriptor dimensions; checked against the env when given
    n_niches: int = 1024
    max_evals: int = 1_000_000
    eval_batch_size: int = 100
    random_init: int = 500
    init_batch_size: int = 100
    proportion_evo: float = 0.5
    nr_of_steps_crit: int = 300
    nr_of_steps_act: int = 10
    train_batch_size: int = 256
    discount: float = 0.99
    tau: float = 0.005
    policy_noise: float = 0.2
    noise_clip: float = 0.5
    policy_freq: int = 2
    lr: float = 0.001
    iso_sigma: float = 0.005
    line_sigma: float = 0.05
    neurons_list: Sequence[int] = (128, 128)
    cvt_samples: int = 100_000
    save_period: int = 10_000
    gradient_op: bool = True
    episode_length: int = 1000
    critic_hidden: Sequence[int] = (256, 256)
    critic_lr: float = 3e-4
    greedy_lr: float = 3e-4
    buffer_size: int = 1_000_000
    reset_noise: bool = False
    obs_noise: float = 0.0
    num_reevals: int = 10

    def __post_init__(self):
        object.__setattr__(self, "neurons_list", tuple(int(n) for n in self.neurons_list))
        object.__setattr__(self, "critic_hidden", tuple(int(n) for n in self.critic_hidden))
        positive = (
            "n_niches", "max_evals", "eval_batch_size", "random_init", "init_batch_size",
            "train_batch_size", "policy_freq", "cvt_samples", "save_period", "episode_length",
            "buffer_size", "num_reevals",
        )  # fmt: skip
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        for name in ("nr_of_steps_crit", "nr_of_steps_act"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name, low, high in (
            ("proportion_evo", 0.0, 1.0),
            ("discount", 0.0, 1.0),
            ("tau", 0.0, 1.0),
        ):
            if not low <= getattr(self, name) <= high:
                raise ValueError(f"{name} must lie in [{low}, {high}], got {getattr(self, name)}")
        for name in ("policy_noise", "noise_clip", "lr", "iso_sigma", "line_sigma", "obs_noise",
                     "critic_lr", "greedy_lr"):  # fmt: skip
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.neurons_list or not self.critic_hidden:
            raise ValueError("neurons_list and critic_hidden need at least one layer")
        if self.random_init % self.init_batch_size:
            raise ValueError(
                f"random_init ({self.random_init}) must be a multiple of init_batch_size "
                f"({self.init_batch_size})"
            )
        if self.max_evals < self.random_init + self.eval_batch_size:
            raise ValueError(
                f"max_evals ({self.max_evals}) leaves no batch after random_init "
                f"({self.random_init}) with eval_batch_size {self.eval_batch_size}"
            )
        if self.cvt_samples < self.n_niches:
            raise ValueError(f"cvt_samples ({self.cvt_samples}) must be at least n_niches")
        if self.gradient_op and self.eval_batch_size < 2:
            raise ValueError("with gradient_op, eval_batch_size needs 2 slots or more")

    @classmethod
    def local(cls, **overrides: Any) -> "PGAMEConfig":
        """A preset that runs here in about two minutes (walker2d_uni, 100-step episodes, 10k
        evaluations, 256 cells), like the repo's ``local_config.txt``."""
        values: dict[str, Any] = dict(
            env="walker2d_uni", n_niches=256, max_evals=10_000, eval_batch_size=64,
            random_init=256, init_batch_size=128, neurons_list=(64, 64), cvt_samples=20_000,
            save_period=2_000, episode_length=100, buffer_size=200_000,
        )  # fmt: skip
        values.update(overrides)
        return cls(**values)

    @property
    def num_iterations(self) -> int:
        return (self.max_evals - self.random_init) // self.eval_batch_size


def make_pgame_env(config: PGAMEConfig) -> AbstractQDEnv:
    if config.env == "point_maze":
        return make_env(
            "point_maze",
            length=config.episode_length,
            reset_noise=0.05 if config.reset_noise else 0.0,
            obs_noise=config.obs_noise,
        )
    return make_env(
        config.env,
        episode_length=config.episode_length,
        reset_noise=config.reset_noise,
        obs_noise=config.obs_noise,
    )


def make_pgame(config: PGAMEConfig, env: AbstractQDEnv) -> tuple[MAPElites, TD3]:
    """The algorithm (`MAPElites` with lineage) and the TD3 agent that defines the policies."""
    if config.dim_map is not None and config.dim_map != env.descriptor_size:
        raise ValueError(
            f"dim_map is {config.dim_map} but {config.env!r} has {env.descriptor_size} descriptors"
        )
    td3 = TD3(
        observation_size=env.observation_size,
        action_size=env.action_size,
        policy_hidden=config.neurons_list,
        critic_hidden=config.critic_hidden,
        batch_size=config.train_batch_size,
        policy_delay=config.policy_freq,
    )
    scorer = PolicyScorer(env)
    if config.gradient_op:
        hparams = TD3HParams(
            policy_lr=config.greedy_lr,
            critic_lr=config.critic_lr,
            discount=config.discount,
            tau=config.tau,
            policy_noise=config.policy_noise,
            noise_clip=config.noise_clip,
        )
        emitter = pgame_emitter(
            batch_size=config.eval_batch_size,
            proportion_evo=config.proportion_evo,
            td3=td3,
            hparams=hparams,
            num_critic_steps=config.nr_of_steps_crit,
            num_pg_steps=config.nr_of_steps_act,
            pg_lr=config.lr,
            buffer_size=config.buffer_size,
            iso_sigma=config.iso_sigma,
            line_sigma=config.line_sigma,
        )
    else:
        emitter = MixingEmitter(
            batch_size=config.eval_batch_size,
            variation_percentage=1.0,
            variation=IsoLineVariation(config.iso_sigma, config.line_sigma),
        )
    return MAPElites(emitter, scorer, scorer.qd_offset, lineage=True), td3


class ChunkedScorer(eqx.Module):
    """Scores a large population in sequential chunks (the repo's ``init_batch_size``)."""

    scorer: PolicyScorer
    chunk: int = eqx.field(static=True)

    def __call__(self, genotypes, *, key: PRNGKey):
        n = jax.tree.leaves(eqx.filter(genotypes, eqx.is_array))[0].shape[0]
        k = n // self.chunk
        split = lambda x: x.reshape((k, self.chunk) + x.shape[1:]) if eqx.is_array(x) else x
        dyn, static = eqx.partition(jax.tree.map(split, genotypes), eqx.is_array)

        def one(args):
            d, kk = args
            return self.scorer(eqx.combine(d, static), key=kk)

        out = jax.lax.map(one, (dyn, jr.split(key, k)))
        return jax.tree.map(lambda x: x.reshape((n,) + x.shape[2:]), out)


def _chunk_length(config: PGAMEConfig) -> int:
    """Iterations per jitted call: about ``save_period`` evaluations, preferring a divisor of
    the number of iterations so that a single program is compiled."""
    chunk = min(max(1, config.save_period // config.eval_batch_size), config.num_iterations)
    divisors = [d for d in range(1, chunk + 1) if config.num_iterations % d == 0]
    return divisors[-1] if 2 * divisors[-1] >= chunk else chunk


class IterationLog(eqx.Module):
    """What one iteration records: metrics, per-candidate info, and the re-evaluated best."""

    metrics: QDMetrics
    info: StepInfo
    reeval_fitness: jax.Array
    reeval_descriptor: jax.Array


def _best_reevaluation(algo: MAPElites, repertoire: MapElitesRepertoire, n: int, key: PRNGKey):
    genotype = tree_take(repertoire.genotypes, jnp.argmax(repertoire.fitnesses)[None])
    re = reevaluate(algo.scoring_fn, genotype, n, key=key)
    return re.fitness_mean[0], re.descriptor_mean[0]


@eqx.filter_jit
def _run_chunk(algo: MAPElites, state: MAPElitesState, keys: jax.Array, num_reevals: int):
    def body(s, k):
        step_key, reeval_key = jr.split(k)
        s, metrics, info = algo.step(s, key=step_key)
        fit, desc = _best_reevaluation(algo, s.repertoire, num_reevals, reeval_key)
        return s, IterationLog(metrics, info, fit, desc)

    return filter_scan(body, state, keys)


@eqx.filter_jit
def _init(algo, init_algo, genotypes, tessellation, key, num_reevals):
    init_key, reeval_key = jr.split(key)
    state, metrics = init_algo.init(genotypes, tessellation, key=init_key)
    fit, desc = _best_reevaluation(algo, state.repertoire, num_reevals, reeval_key)
    return state, metrics, fit, desc


_TYPE_NAMES = {int(t): t.name.lower() for t in ActorType}


def _progress_header(d: int) -> list[str]:
    return [
        "evaluations", "coverage", "coverage_fraction", "qd_score", "max_fitness",
        "mean_fitness", "median_fitness", "p5_fitness", "p95_fitness", "averaged_max_fitness",
        *[f"averaged_max_descriptor_{i}" for i in range(d)],
    ]  # fmt: skip


def _progress_row(evals: int, m: dict[str, float], fit: float, desc) -> list:
    return [
        evals, int(m["num_filled"]), m["coverage"], m["qd_score"], m["max_fitness"],
        m["mean_fitness"], m["median_fitness"], m["p5_fitness"], m["p95_fitness"], fit,
        *np.asarray(desc).tolist(),
    ]  # fmt: skip


def _actors_header(d: int) -> list[str]:
    return [
        "evaluations", "id", "fitness", *[f"descriptor_{i}" for i in range(d)], "centroid",
        "parent_1", "parent_2", "type", "novel", "delta_fitness",
    ]  # fmt: skip


def _actor_rows(evals: int, info: dict[str, np.ndarray]) -> list[list]:
    rows = []
    for j in np.flatnonzero(info["status"] != int(AddStatus.NOT_ADDED)):
        rows.append([
            evals, int(info["ids"][j]), float(info["fitnesses"][j]),
            *info["descriptors"][j].tolist(), int(info["cell"][j]), int(info["parent1"][j]),
            int(info["parent2"][j]), _TYPE_NAMES[int(info["kind"][j])],
            bool(info["status"][j] == int(AddStatus.NEW)), float(info["delta"][j]),
        ])  # fmt: skip
    return rows


def _write_archive(path: str, repertoire: MapElitesRepertoire) -> None:
    fit = np.asarray(repertoire.fitnesses)
    desc = np.asarray(repertoire.descriptors)
    ids = np.asarray(repertoire.extra)

    def write(f):
        w = csv.writer(f)
        w.writerow(
            ["fitness", "centroid", *[f"descriptor_{i}" for i in range(desc.shape[1])], "id"]
        )
        for c in np.flatnonzero(np.isfinite(fit)):
            w.writerow([float(fit[c]), int(c), *desc[c].tolist(), int(ids[c])])

    atomic_write(path, write, text=True)


@dataclasses.dataclass
class PGAMEResult:
    state: MAPElitesState
    progress: dict[str, np.ndarray]
    folder: str | None


def run_pgame(
    config: PGAMEConfig,
    out_dir: str | os.PathLike | None = None,
    progress: bool = True,
    plots: bool = True,
) -> PGAMEResult:
    """Run PGA-MAP-Elites (or plain MAP-Elites with ``gradient_op=False``) for ``max_evals``
    evaluations: ``random_init`` random policies, then batches of ``eval_batch_size``.

    Iterations run in jitted chunks of ``save_period // eval_batch_size`` (one compile); the
    files are written after every chunk, so a long run can be watched while it goes.
    """
    from tqdm.auto import tqdm

    env = make_pgame_env(config)
    algo, td3 = make_pgame(config, env)
    init_algo = MAPElites(
        algo.emitter, ChunkedScorer(algo.scoring_fn, config.init_batch_size), algo.qd_offset,
        lineage=True,
    )  # fmt: skip
    key = jr.key(config.seed)
    cvt_key, pop_key, init_key, run_key = jr.split(key, 4)
    low, high = env.descriptor_bounds
    tessellation = CVTTessellation.from_kmeans(
        config.n_niches, env.descriptor_size, low, high, num_samples=config.cvt_samples,
        key=cvt_key,
    )  # fmt: skip
    genotypes = eqx.filter_vmap(lambda k: td3.init_policy(key=k))(
        jr.split(pop_key, config.random_init)
    )
    d = env.descriptor_size
    folder = None if out_dir is None else os.fspath(out_dir)
    files: dict[str, Any] = {}
    if folder is not None:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "config.toml"), "w") as f:
            f.write(config.to_toml())
        np.save(os.path.join(folder, "centroids.npy"), np.asarray(tessellation.centroids))
        for name, header in (("progress", _progress_header(d)), ("actors", _actors_header(d))):
            fh = open(os.path.join(folder, f"{name}.csv"), "w", newline="")
            files[name] = (fh, csv.writer(fh))
            files[name][1].writerow(header)
    history: list[list] = []

    def emit_rows(rows_progress, rows_actors):
        history.extend(rows_progress)
        if files:
            files["progress"][1].writerows(rows_progress)
            files["actors"][1].writerows(rows_actors)
            for fh, _ in files.values():
                fh.flush()

    bar = tqdm(total=config.max_evals, disable=not progress, desc="pga-me", unit="evals")
    try:
        state, metrics, fit, desc = _init(
            algo, init_algo, genotypes, tessellation, init_key, config.num_reevals
        )
        evals = config.random_init
        m = {k: float(v) for k, v in metrics.as_dict().items()}
        # The random actors that entered the archive: every filled cell holds one.
        rep = state.repertoire
        filled = np.flatnonzero(np.isfinite(np.asarray(rep.fitnesses)))
        ids, fits, descs = (np.asarray(x) for x in (rep.extra, rep.fitnesses, rep.descriptors))
        init_actors = [
            [evals, int(ids[c]), float(fits[c]), *descs[c].tolist(), int(c), -1, -1, "random",
             True, float("inf")]
            for c in filled
        ]  # fmt: skip
        emit_rows([_progress_row(evals, m, float(fit), desc)], init_actors)
        bar.update(evals)
        chunk = _chunk_length(config)
        done, next_save = 0, config.save_period
        run_keys = jr.split(run_key, config.num_iterations)
        while done < config.num_iterations:
            n = min(chunk, config.num_iterations - done)
            state, logs = _run_chunk(algo, state, run_keys[done : done + n], config.num_reevals)
            metrics_np = {k: np.asarray(v) for k, v in logs.metrics.as_dict().items()}
            lineage = logs.info.emit_extra
            columns = {
                "ids": logs.info.ids, "fitnesses": logs.info.fitnesses,
                "descriptors": logs.info.descriptors, "cell": logs.info.add_info.cell,
                "status": logs.info.add_info.status, "delta": logs.info.add_info.delta,
                "parent1": lineage.parent1, "parent2": lineage.parent2, "kind": lineage.kind,
            }  # fmt: skip
            columns = {k: np.asarray(v) for k, v in columns.items()}
            reeval_fit, reeval_desc = (
                np.asarray(logs.reeval_fitness),
                np.asarray(logs.reeval_descriptor),
            )
            rows_p, rows_a = [], []
            for i in range(n):
                evals += config.eval_batch_size
                m = {k: float(v[i]) for k, v in metrics_np.items()}
                rows_p.append(_progress_row(evals, m, float(reeval_fit[i]), reeval_desc[i]))
                rows_a.extend(_actor_rows(evals, {k: v[i] for k, v in columns.items()}))
            emit_rows(rows_p, rows_a)
            done += n
            bar.update(n * config.eval_batch_size)
            bar.set_postfix(qd=f"{history[-1][3]:.4g}", max=f"{history[-1][4]:.4g}")
            if folder is not None and (evals >= next_save or done == config.num_iterations):
                _write_archive(os.path.join(folder, f"archive_{evals}.csv"), state.repertoire)
                while next_save <= evals:
                    next_save += config.save_period
    finally:
        bar.close()
        for fh, _ in files.values():
            fh.close()
    header = _progress_header(d)
    table = np.asarray(history, dtype=np.float64)
    prog = {h: table[:, j] for j, h in enumerate(header)}
    if folder is not None:
        save_repertoire(os.path.join(folder, "repertoire.eqx"), state.repertoire)
        if plots:
            _write_plots(folder, state.repertoire, prog)
    return PGAMEResult(state, prog, folder)


def _write_plots(folder: str, repertoire: MapElitesRepertoire, prog: Mapping) -> None:
    from ..plotting import plot_fitness_density, plot_metrics, save_figure, save_repertoire_plot

    save_repertoire_plot(folder, repertoire)
    curves = {
        "evaluations": prog["evaluations"],
        "qd_score": prog["qd_score"],
        "coverage": prog["coverage_fraction"],
        "max_fitness": prog["max_fitness"],
        "mean_fitness": prog["mean_fitness"],
    }
    fig = plot_metrics(curves)
    fig.axes[2].plot(prog["evaluations"], prog["averaged_max_fitness"], label="averaged (re-evals)")
    fig.axes[2].legend()
    save_figure(folder, "progress.png", fig)
    save_figure(
        folder, "fitness_density.png", plot_fitness_density([np.asarray(repertoire.fitnesses)])
    )


def read_csv(path: str | os.PathLike) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def load_pgame_run(folder: str | os.PathLike):
    """``(config, repertoire, progress)`` of a run folder; the repertoire's genotypes are the
    final actors as a stacked `DeterministicPolicy` (``extra`` holds their ids)."""
    folder = os.fspath(folder)
    config = PGAMEConfig.from_toml(os.path.join(folder, "config.toml"))
    env = make_pgame_env(config)
    _, td3 = make_pgame(config, env)
    tess = CVTTessellation.load(os.path.join(folder, "centroids.npy"))
    like = MapElitesRepertoire.empty(tess, td3.init_policy(key=jr.key(0)), jnp.zeros((), jnp.int32))
    repertoire = load_repertoire(os.path.join(folder, "repertoire.eqx"), like)
    rows = read_csv(os.path.join(folder, "progress.csv"))
    progress = {k: np.asarray([float(r[k]) for r in rows]) for k in rows[0]}
    return config, repertoire, progress


def policy_by_id(repertoire: MapElitesRepertoire, actor_id: int) -> DeterministicPolicy:
    """The stored actor with this id (from ``actors.csv`` or an archive snapshot)."""
    ids = np.asarray(repertoire.extra)
    filled = np.isfinite(np.asarray(repertoire.fitnesses))
    where = np.flatnonzero((ids == actor_id) & filled)
    if where.size == 0:
        raise KeyError(f"no actor with id {actor_id} in the final archive")
    return tree_take(repertoire.genotypes, int(where[0]))
