"""The PGA-MAP-Elites job: the original repo's config arguments, its loop and its output files.

The job writes one run folder: `config.toml`, `progress.csv` (one row per batch),
`actors.csv` (one row per actor added to the archive, with its parents), an
`archive_<evals>.csv` snapshot every `snapshot_every` evaluations, the final actors'
parameters (`repertoire.eqx`, read back by `load_run`), `centroids.npy` and plots.
"""

import dataclasses
import os
import typing
from collections.abc import Mapping
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.random as jr
import numpy as np

from .._emitters.mixing import ga_emitter
from .._map_elites import MAPElites, MAPElitesState
from .._qdrl.pga_me import CONVENTIONS, pgame_emitter
from .._qdrl.scoring import ChunkedScorer, DiscardDead, PolicyScorer
from .._tessellation import CVTTessellation
from .._validate import fraction, non_negative, positive_int
from ..envs._base import AbstractQDEnv
from ..rl._td3 import TD3, TD3HParams
from ._config import option
from ._distributed import job_mesh, to_host
from ._folder import RunFolder
from ._job import register_job, RunResult
from ._loop import Chunk, LoopJob
from ._policy_qd import (
    _actor_rows,
    _actors_header,
    _archive_rows,
    _choice as _choice,
    _chunk_length,
    _init,
    _progress_header,
    _progress_row,
    _run_chunk,
    _write_plots,
    CROSSOVER_OPS as CROSSOVER_OPS,
    ga_operators as ga_operators,
    make_pgame_env as make_pgame_env,
    MUTATION_OPS as MUTATION_OPS,
    pgame_tessellation as pgame_tessellation,
    policy_agent as policy_agent,
    policy_by_id as policy_by_id,
    PolicyQDOptions as PolicyQDOptions,
)
from ._qd_outputs import read_qd_run, read_repertoire
from ._resume import RunClock


@dataclasses.dataclass(frozen=True)
class PGAMEConfig(PolicyQDOptions):
    """PGA-MAP-Elites settings, in the house's words (the original repository's names are
    read from its own files: `read_original_config`, `--config-file`; `REPO_NAMES` maps them).
    The defaults are a local run, minutes on a laptop CPU (walker2d_uni, 100-step episodes,
    10k evaluations, 256 cells); `PGAMEConfig.preset("paper")` (`--preset paper`) is the GECCO
    2021 paper's setting (1e6 evaluations of 1000-step episodes, 1024 cells: an HPC budget),
    and `--preset smoke` a run of a minute or two that goes through every part.

    Tasks are stochastic by default, as the paper's were (random initial states:
    `reset_noise`; `obs_noise` adds observation noise), so the averaged max fitness and the
    fitness loss of the re-evaluated best mean something; `deterministic` turns both off.

    Ours, beyond the repo's arguments: `episode_length`, `critic_hidden`, `critic_lr`,
    `greedy_lr`, `buffer_size`, `reset_noise` / `obs_noise` / `deterministic`,
    `num_reevals` (the "10" of the averaged max fitness) and `convention` (`"original"`:
    the repo's batch split, greedy-actor start and critic warm-up; `"qdax"`: QDax's),
    `policy_init` / `critic_init` (the repo's Xavier actors and PyTorch-default critic by
    default; `lecun_uniform` for both is QDax's). `gradient_op` is the repo's switch: `False`
    gives plain MAP-Elites with the same GA, budget and outputs. The repo's `num_cpu` /
    `num_cpu_var` have no counterpart (evaluation is vectorised) and are accepted only in its
    own config files.
    """

    JOB: ClassVar[str] = "pgame"

    ga_fraction: float = option(0.5, "fraction of each batch from the GA", check=fraction)
    greedy_lr: float = option(3e-4, "greedy actor learning rate", check=non_negative)
    n_species: int = option(
        1, "species-archive cells (1 only: the paper's setting)", check=positive_int
    )
    gradient_op: bool = option(
        True, "policy-gradient variation (off: GA only)", aliases=("--no-gradient",)
    )
    convention: str = option(
        "original",
        "batch split, greedy start and critic warm-up",
        check=_choice(CONVENTIONS),
    )

    def check(self) -> None:
        super().check()
        n = self.devices
        self.check_devices({"batch_size": self.batch_size}, learner=self.gradient_op)
        if self.gradient_op and self.batch_size // n < 2:
            raise ValueError(
                "with gradient_op, batch_size needs 2 slots or more"
                + (f" on each of the {n} devices" if n > 1 else "")
            )
        if self.n_species != 1:
            raise ValueError(
                f"n_species is {self.n_species}: only 1 is supported (the GECCO paper's setting, "
                "one greedy actor); the species archive of several greedy actors is not built"
            )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "PGAMEConfig":
        """As `JobConfig.from_mapping`; the repository's arguments that have no counterpart
        here (`num_cpu`, `num_cpu_var`, `save_path`) are refused with the reason."""
        for name, why in _UNUSED.items():
            if name in values:
                raise ValueError(f"config key {name!r} is not used by this job: {why}")
        return super().from_mapping(values)


PAPER_PRESET: dict[str, Any] = dict(
    cells=1024,
    evaluations=1_000_000,
    batch_size=100,
    random_init=500,
    init_batch_size=100,
    hidden=(128, 128),
    cvt_samples=100_000,
    snapshot_every=10_000,
    checkpoint_every=10_000,
    episode_length=1000,
    buffer_size=1_000_000,
)
"""The GECCO 2021 paper's setting: the keys that differ from the local defaults."""

SMOKE_PRESET: dict[str, Any] = dict(
    episode_length=20,
    cells=32,
    cvt_samples=2_000,
    evaluations=64 + 4 * 32,
    batch_size=32,
    random_init=64,
    init_batch_size=64,
    critic_steps=20,
    pg_steps=5,
    minibatch_size=32,
    hidden=(16, 16),
    critic_hidden=(32, 32),
    buffer_size=10_000,
    snapshot_every=64,
    checkpoint_every=64,
)
"""A run of a minute or two through every part (random start, GA and policy-gradient
children, the greedy actor, snapshots, checkpoints): to try a change, not to see learning."""

PGAMEConfig.PRESETS = {"paper": PAPER_PRESET, "smoke": SMOKE_PRESET}


def make_pgame(config: PGAMEConfig, env: AbstractQDEnv) -> tuple[MAPElites, TD3]:
    """The algorithm (`MAPElites` with lineage) and the TD3 agent that defines the policies.
    With `devices > 1`, both run on the mesh axis `"p"`: each device's emitter takes
    `batch_size / devices` candidates and keeps `buffer_size / devices` transitions."""
    td3 = policy_agent(config, env)
    n = config.devices
    axis = "p" if n > 1 else None
    scorer = PolicyScorer(env)
    variation, mutation = ga_operators(config)
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
            batch_size=config.batch_size // n,
            proportion_evo=config.ga_fraction,
            td3=td3,
            hparams=hparams,
            num_critic_steps=config.critic_steps,
            num_pg_steps=config.pg_steps,
            pg_lr=config.pg_lr,
            buffer_size=config.buffer_size // n,
            variation=variation,
            mutation=mutation,
            convention=config.convention,
            axis_name=axis,
        )
    else:
        emitter = ga_emitter(config.batch_size // n, variation=variation, mutation=mutation)
    scoring = scorer if config.insert_dead else DiscardDead(scorer)
    algo = MAPElites(emitter, scoring, scorer.qd_offset, lineage=True, axis_name=axis)
    return algo, td3


class _PGAMEPlan(typing.NamedTuple):
    config: PolicyQDOptions
    env: AbstractQDEnv
    algo: MAPElites
    tessellation: CVTTessellation
    init_args: tuple
    run_keys: jax.Array
    mesh: Any  # the devices each batch is spread over (`None`: one device)


class _PGAMEJob(LoopJob[_PGAMEPlan, MAPElitesState]):
    """Run PGA-MAP-Elites (or plain MAP-Elites with `gradient_op=False`) for `evaluations`
    evaluations: `random_init` random policies, then batches of `batch_size`.

    Iterations run in jitted chunks of about `snapshot_every` evaluations (one compile); each
    chunk's rows are appended to the logs, so a long run can be watched while it goes. The
    folder holds `config.toml`, `progress.csv`, `actors.csv`, `archive_<evals>.csv`,
    `repertoire.eqx` (the final actors; `load_run` reads it back), `centroids.npy` and the
    plots `repertoire.png`, `progress.png` and `fitness_density.png`.
    """

    name = "pgame"
    config_cls = PGAMEConfig
    logs = {"progress.csv": "evaluations", "actors.csv": "evaluations"}
    step_files = (r"archive_(\d+)\.csv",)
    resume_may_change = ("evaluations",)
    unit = "evals"
    elite_ids = "actors.csv lists every id ever added, archive_<evals>.csv each snapshot's"
    checkpoint_at_start = True  # the random initialisation is costly: keep it
    multi_process = True
    help = "PGA-MAP-Elites (default: walker2d_uni, 10k evaluations of 100 steps)"
    description = (
        "The defaults are a local run (minutes on a laptop CPU); --preset paper starts from the "
        "GECCO 2021 paper's setting, --config-file from a file of the original repository. "
        "Options override all three."
    )

    original_config_help = (
        "a config file of the PGA-MAP-Elites repository (--key=value lines, e.g. its "
        "configure_experiment/QDWalker_config.txt), read with that repository's defaults; "
        "options override it"
    )

    def read_original_config(self, path: str) -> tuple[dict[str, Any], list[str]]:
        return read_original_config(path)

    def env_steps(self, config, evals: int) -> int:
        """Environment steps after `evals` evaluations: full episodes, QDax's accounting."""
        return evals * config.episode_length

    def make(self, config, env: AbstractQDEnv) -> tuple[MAPElites, TD3]:
        """The algorithm and the TD3 agent that defines the policies (`make_pgame`)."""
        return make_pgame(config, env)

    def plan(self, config: PolicyQDOptions) -> _PGAMEPlan:
        mesh = job_mesh(getattr(config, "devices", 1))  # before the folder
        env = make_pgame_env(config)
        algo, td3 = self.make(config, env)
        init_algo = MAPElites(
            algo.emitter,
            ChunkedScorer(algo.scoring_fn, config.init_batch_size),
            algo.qd_offset,
            lineage=True,
            axis_name=algo.axis_name,
        )
        cvt_key, pop_key, init_key, run_key = jr.split(jr.key(config.seed), 4)
        tessellation = pgame_tessellation(config, env, key=cvt_key)  # (a bad file: no folder)
        genotypes = eqx.filter_vmap(lambda k: td3.init_policy(key=k))(
            jr.split(pop_key, config.random_init)
        )
        repertoire = config.repertoire_for(tessellation, env.descriptor_size)
        result = config.result_for(tessellation)
        init_args = (
            algo,
            init_algo,
            genotypes,
            repertoire,
            result,
            init_key,
            config.num_reevals,
            mesh,
        )
        run_keys = jr.split(run_key, config.num_iterations)
        return _PGAMEPlan(config, env, algo, tessellation, init_args, run_keys, mesh)

    def headers(self, plan: _PGAMEPlan) -> dict[str, list[str]]:
        d = plan.env.descriptor_size
        return {"progress.csv": _progress_header(d), "actors.csv": _actors_header(d)}

    def like(self, plan: _PGAMEPlan) -> MAPElitesState:
        return eqx.filter_eval_shape(_init, *plan.init_args)[0]

    def total(self, config: PolicyQDOptions) -> int:
        # The last batch's evaluations: the budget, less what does not fill a batch.
        return config.random_init + config.num_iterations * config.batch_size

    def opened(self, plan: _PGAMEPlan, folder: RunFolder) -> None:
        folder.write_npy("centroids.npy", plan.tessellation.centroids)

    def start(self, plan: _PGAMEPlan, clock: RunClock) -> Chunk:
        config = plan.config
        state, *out = _init(*plan.init_args)
        # Gathered onto every process in a multi-process run (a collective).
        (metrics, fit, desc, plain), rep = to_host((out, state.elites))
        evals = config.random_init
        m = {k: float(v) for k, v in metrics.as_dict().items()}
        # The random actors that entered the archive: every filled cell holds one (`rep`:
        # without cells, the passive CVT).
        ids, fits, descs = (np.asarray(x) for x in (rep.extra, rep.fitnesses, rep.descriptors))
        actors = [
            [evals, int(ids[c]), float(fits[c]), *descs[c].tolist(), int(c)]
            + [-1, -1, "random", True, float("inf")]
            for c in np.flatnonzero(np.isfinite(fits))
        ]
        steps = self.env_steps(config, evals)
        row = _progress_row(evals, steps, clock(), m, float(plain), float(fit), desc)
        return Chunk(state, evals, {"progress.csv": [row], "actors.csv": actors})

    def advance(self, plan: _PGAMEPlan, state, step: int, clock: RunClock) -> Chunk:
        config, evals = plan.config, step
        chunk = _chunk_length(config)
        done = (evals - config.random_init) // config.batch_size
        # Chunks end on multiples of `chunk`, wherever the run (re)started.
        n = min(chunk - done % chunk, config.num_iterations - done)
        state, logs = _run_chunk(
            plan.algo, state, plan.run_keys[done : done + n], config.num_reevals, plan.mesh
        )
        logs = to_host(logs)  # every process, in step
        metrics = {k: np.asarray(v) for k, v in logs.metrics.as_dict().items()}
        lineage = logs.info.emit_extra
        columns = {
            "ids": logs.info.ids,
            "fitnesses": logs.info.fitnesses,
            "descriptors": logs.info.descriptors,
            "cell": logs.info.add_info.cell,
            "status": logs.info.add_info.status,
            "delta": logs.info.add_info.delta,
            "parent1": lineage.parent1,
            "parent2": lineage.parent2,
            "kind": lineage.kind,
        }
        columns = {k: np.asarray(v) for k, v in columns.items()}
        reeval_fit, reeval_desc, plain_qd = (
            np.asarray(x)
            for x in (logs.reeval_fitness, logs.reeval_descriptor, logs.plain_qd_score)
        )
        progress, actors = [], []
        for i in range(n):
            evals += config.batch_size
            m = {k: float(v[i]) for k, v in metrics.items()}
            steps, wall = self.env_steps(config, evals), clock()
            fit, desc = float(reeval_fit[i]), reeval_desc[i]
            progress.append(_progress_row(evals, steps, wall, m, float(plain_qd[i]), fit, desc))
            actors.extend(_actor_rows(evals, {k: v[i] for k, v in columns.items()}))
        return Chunk(state, evals, {"progress.csv": progress, "actors.csv": actors})

    def resumed_state(self, plan: _PGAMEPlan, resumed) -> MAPElitesState:
        return resumed.state_on(plan.mesh)

    def after_chunk(self, plan: _PGAMEPlan, folder, state, before: int, step: int) -> None:
        # A snapshot at the first chunk's end past each multiple of snapshot_every, and the end.
        period = plan.config.snapshot_every
        if step // period > before // period or step >= self.total(plan.config):
            elites = to_host(state.elites)  # on every process (a collective), written by one
            if folder is not None:
                folder.write_csv(f"archive_{step}.csv", *_archive_rows(elites))

    def finish(self, plan: _PGAMEPlan, folder, state, logs, plots: bool) -> RunResult:
        header = _progress_header(plan.env.descriptor_size)
        table = np.asarray(logs["progress.csv"], dtype=np.float64)
        prog = {h: table[:, j] for j, h in enumerate(header)}
        state = to_host(state)  # every process, in step (the whole state on each)
        elites = state.elites
        if folder is not None:
            folder.write_eqx("repertoire.eqx", elites)
            if plots:
                _write_plots(folder, elites, prog, plan.env)
        return RunResult(plan.config, None if folder is None else folder.path, prog, state, elites)

    def scorer(self, config) -> PolicyScorer:
        return PolicyScorer(make_pgame_env(config))

    def load(self, folder: RunFolder, config) -> RunResult:
        env = make_pgame_env(config)
        _, td3 = self.make(config, env)
        repertoire = read_repertoire(folder, lambda: td3.init_policy(key=jr.key(0)), with_ids=True)
        return read_qd_run(folder, config, repertoire, ("actors",))

    def summary(self, result: RunResult) -> str:
        last = result.last
        return (
            f"done: {int(last['evaluations'])} evaluations, QD-score {last['qd_score']:.6g}, "
            f"{int(last['num_filled'])} cells ({100 * last['coverage']:.1f}%), "
            f"max fitness {last['max_fitness']:.6g} "
            f"(averaged over {result.config.num_reevals} re-evaluations: "
            f"{last['averaged_max_fitness']:.6g})"
        )


register_job(_PGAMEJob())


# ------------------------------------------------ the repository's own config files, as written
ORIGINAL_DEFAULTS: dict[str, str | bool] = {
    "env": "QDAntBulletEnv-v0",
    "seed": "0",
    "save_path": ".",
    "dim_map": "4",
    "n_niches": "1296",
    "n_species": "1",
    "max_evals": "1e6",
    "mutation_op": "None",
    "crossover_op": "iso_dd",
    "min_genotype": "False",
    "max_genotype": "False",
    "mutation_rate": "0.05",
    "crossover_rate": "0.75",
    "eta_m": "5.0",
    "eta_c": "10.0",
    "sigma": "0.2",
    "iso_sigma": "0.01",
    "line_sigma": "0.2",
    "max_uniform": "0.1",
    "cvt_samples": "100000",
    "eval_batch_size": "100",
    "random_init": "500",
    "init_batch_size": "100",
    "save_period": "10000",
    "num_cpu": "32",
    "num_cpu_var": "32",
    "use_cached_cvt": False,
    "not_discard_dead": False,
    "neurons_list": "128 128",
    "train_batch_size": "256",
    "discount": "0.99",
    "tau": "0.005",
    "policy_noise": "0.2",
    "noise_clip": "0.5",
    "policy_freq": "2",
    "nr_of_steps_crit": "300",
    "nr_of_steps_act": "10",
    "proportion_evo": "0.5",
    "normalise": False,
    "affine": False,
    "gradient_op": False,
    "lr": "0.001",
}
"""The repository's `main.py` argument defaults (as its parser reads them: text, or `False`
for a flag left out), which apply to every argument a config file does not set."""

REPO_NAMES: dict[str, str] = {
    "n_niches": "cells",
    "neurons_list": "hidden",
    "nr_of_steps_crit": "critic_steps",
    "nr_of_steps_act": "pg_steps",
    "eval_batch_size": "batch_size",
    "train_batch_size": "minibatch_size",
    "max_evals": "evaluations",
    "dim_map": "num_descriptors",
    "save_period": "snapshot_every",
    "proportion_evo": "ga_fraction",
    "not_discard_dead": "insert_dead",
    "policy_freq": "policy_delay",
    "lr": "pg_lr",
}
"""The repository's argument names that `PGAMEConfig` calls otherwise, and our names (the
others are the same). Its config files are read with these; a TOML file or run folder
written with them (before the house vocabulary) is read too (`JobConfig.RENAMED`)."""

PGAMEConfig.RENAMED = {**REPO_NAMES, "centroids_file": "centroids"}

ORIGINAL_ENVS = {
    "QDWalker2DBulletEnv-v0": "walker2d_uni",
    "QDHalfCheetahBulletEnv-v0": "halfcheetah_uni",
    "QDHopperBulletEnv-v0": "hopper_uni",
    "QDAntBulletEnv-v0": "ant_uni",
}
"""The repository's QDgym tasks and the brax tasks that stand in for them."""

_UNUSED = {
    "num_cpu": "evaluation is vectorised by JAX, not spread over processes",
    "num_cpu_var": "variation is vectorised by JAX, not spread over processes",
    "save_path": "the run folder is --out",
}


def read_original_config(path: str | os.PathLike) -> tuple[dict[str, Any], list[str]]:
    """Read one of the PGA-MAP-Elites repository's config files (one command-line token per
    line: `--key=value`, a bare `--flag`, or `--key` then its value on the next line) as
    its `main.py` would, defaults included (`ORIGINAL_DEFAULTS`).

    **Returns:** the `PGAMEConfig` keys (the repository's names in ours: `REPO_NAMES`) and
    values, over the paper's setting for the keys it has no argument for (`episode_length`,
    `buffer_size`: `PAPER_PRESET`), and notes for the user: how each QDgym task is stood in
    for, and the arguments that have no counterpart here. An unknown argument, a
    flag given a value or a value that does not parse is a `ValueError` naming the line.
    """
    path = os.fspath(path)
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read config file {path!r}: {e}") from e
    given: dict[str, str | bool] = {}
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        where = f"config file {path!r}, line {number}"
        if pending is not None and not line.startswith("--"):
            given[pending[1]], pending = line, None
            continue
        if not line.startswith("--"):
            raise ValueError(f"{where}: expected --argument, got {line!r}")
        name, sep, value = line[2:].partition("=")
        if name not in ORIGINAL_DEFAULTS:
            raise ValueError(f"{where}: unknown argument --{name}")
        flag = ORIGINAL_DEFAULTS[name] is False
        if flag and sep:
            raise ValueError(f"{where}: --{name} is a flag and takes no value, got {value!r}")
        pending = None
        if flag:
            given[name] = True
        elif sep:
            given[name] = value
        else:
            pending = (number, name)
    if pending is not None:
        raise ValueError(f"config file {path!r}, line {pending[0]}: --{pending[1]} has no value")
    args = {**ORIGINAL_DEFAULTS, **given}
    notes = [f"{name}: not used ({why})" for name, why in _UNUSED.items() if name in given]
    values: dict[str, Any] = {}
    for name, text in args.items():
        if name in _UNUSED:
            continue
        try:
            values[REPO_NAMES.get(name, name)] = _original_value(name, text)
        except ValueError:
            raise ValueError(
                f"config file {path!r}: --{name}={text!r} is not a valid value"
            ) from None
    env = values["env"]
    if env in ORIGINAL_ENVS:
        values["env"] = ORIGINAL_ENVS[env]
        notes.append(
            f"env: {env} runs as {values['env']} (a brax task: other physics and fitness scale)"
        )
    return {**PAPER_PRESET, **values}, notes


def _original_value(name: str, text: str | bool) -> Any:
    if isinstance(text, bool):
        return text
    if name in ("mutation_op", "crossover_op"):
        return "none" if text in ("None", "False", "") else text
    if name in ("min_genotype", "max_genotype"):
        return None if text in ("False", "None") else float(text)
    if name == "neurons_list":
        return tuple(int(t) for t in text.split())
    if name in ("env",):
        return text
    field_type = typing.get_type_hints(PGAMEConfig)[REPO_NAMES.get(name, name)]
    if field_type in (int, int | None):
        number = float(text)  # "1e6", as the repository's max_evals default
        if number != int(number):
            raise ValueError(text)
        return int(number)
    return float(text)
