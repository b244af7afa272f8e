"""The PBT job (`eqx-qd run pbt`): a population of a registered agent on a registered
environment, with a run folder and plots of what PBT chose for every member."""

import dataclasses
import typing
from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax.random as jr
import numpy as np

from .._validate import fraction, positive_int
from ..rl._pbt import (
    init_population,
    PBT,
    place_members,
    population_without_optimiser_states,
)
from ..rl._spaces import log_uniform_learning_rates, Uniform
from ._agent_options import build_agent, training_env
from ._blocks import AgentOptions, default_of, RunOptions, search_spaces
from ._config import option
from ._distributed import job_mesh, population_devices, to_host
from ._folder import RunFolder
from ._job import register_job, RunResult
from ._loop import Chunk, LoopJob
from ._registry import make_env
from ._resume import RunClock


@dataclasses.dataclass(frozen=True)
class PBTConfig(AgentOptions, RunOptions):
    """Settings of the PBT job (`jobs.run`, `eqx-qd run pbt`). The defaults train 8 SAC agents
    on the open point maze; `agent` takes any registered agent (`td3`, `sac`, `ppo` or
    yours). `best_fraction` / `worse_fraction` follow QDax (counts are
    `int(fraction * population_size)` and must not round to zero). The agent options are
    passed to the agent's factory; setting one it does not take is an error."""

    JOB: ClassVar[str] = "pbt"

    agent: str = default_of(AgentOptions, "agent", "sac")
    env: str = default_of(AgentOptions, "env", "point_maze_open")
    num_envs: int = default_of(AgentOptions, "num_envs", 8)
    grad_updates_per_step: float = default_of(AgentOptions, "grad_updates_per_step", 0.25)
    buffer_size: int = default_of(AgentOptions, "buffer_size", 50_000)
    rollout_length: int = default_of(AgentOptions, "rollout_length", 32)
    minibatch_size: int = default_of(AgentOptions, "minibatch_size", 128)
    population_size: int = option(8, "PBT members", check=positive_int)
    rounds: int = option(10, "train / evaluate / exploit rounds", check=positive_int)
    iterations_per_round: int = option(
        200,
        "training iterations per round (off-policy: one step of every environment; ppo: one "
        "rollout and its epochs)",
        check=positive_int,
    )
    best_fraction: float = option(0.2, "fraction of the population copied from", check=fraction)
    worse_fraction: float = option(0.4, "fraction of the population replaced", check=fraction)
    explore: str = option("resample", "resample or perturb the copies' hyperparameters")
    log_uniform_lr: bool = option(False, "draw learning rates log-uniformly")
    eval_episodes: int = option(4, "evaluation episodes per member and round", check=positive_int)
    checkpoint_every: int = option(
        1, "rounds between checkpoints (and one at the end)", check=positive_int
    )
    devices: int | None = option(
        None,
        "devices to split the population over, population_size / devices members each (on a "
        "CPU, host devices are made); none: as many as divide population_size, at most one per "
        "CPU core",
        check=positive_int,
    )

    def check(self) -> None:
        super().check()  # the agent options
        self.build_pbt(None)  # the counts (and explore), with a message naming the fraction
        if self.devices is not None and self.population_size % self.devices:
            raise ValueError(
                f"devices ({self.devices}) must divide population_size "
                f"({self.population_size}): every device trains as many members"
            )

    def build_pbt(self, spaces) -> PBT:
        """The `PBT` of this config's counts over `spaces` (`None`: only the counts are
        checked, over a stand-in space)."""
        stand_in = {"_": Uniform(0.0, 1.0)}
        return PBT.from_fractions(
            self.population_size,
            self.best_fraction,
            self.worse_fraction,
            stand_in if spaces is None else spaces,
            self.explore,
        )


def build_pbt_run(config: PBTConfig):
    """The environment, the agent, its search spaces and the `PBT` the config describes."""
    env = make_env(config.env, episode_length=config.episode_length)
    agent = build_agent(config, env)
    spaces = search_spaces(config, agent)
    if config.log_uniform_lr:
        spaces = log_uniform_learning_rates(spaces)
    return env, agent, spaces, config.build_pbt(spaces)


_PROGRESS_HEADER = ["round", "env_steps", "wall_s", "mean_return", "max_return", "min_return"]


class _PBTPlan(typing.NamedTuple):
    config: PBTConfig
    env: Any
    agent: Any
    pbt: PBT
    init: Callable[[], Any]
    round_keys: list[Any]
    names: list[str]
    train_env: Any  # the environment the agents train on (`training_env`)
    mesh: Any  # the devices the members are split over (`None`: one device)


class _PBTJob(LoopJob[_PBTPlan, Any]):
    """Train the population for `rounds` rounds; after each, evaluate every member and apply
    PBT (not after the last).

    The members are split over `devices` devices (each trains its own, its replay buffer on
    its device); the ranking, exploit and explore see the whole population, and a copied
    member moves with its buffer. By default (`devices` none) the job takes as many devices as
    divide `population_size`, at most one per CPU core (`population_devices`; `eqx-qd` makes a
    host device per core). The results are those of one device up to float rounding
    (`train_population_sharded`), which training amplifies over a run: `devices = 1` gives one
    device's numbers on any machine.

    The folder holds `config.toml`, `progress.csv` (per round: env steps, `wall_s`
    (seconds spent running, over resumes), mean / max / min return), `hparams.csv` (per
    round and member: its hyperparameters, return, and the member it was copied from next),
    `population.eqx` (the final agent states without optimiser states), `returns.png` and
    `hparams.png`. `RunResult.state` is the final population. A checkpoint holds the whole
    population, so a run resumes on another device count (the members split anew).
    """

    name = "pbt"
    config_cls = PBTConfig
    logs = {"progress.csv": "round", "hparams.csv": "round"}
    resume_may_change = ("rounds", "devices")  # a checkpoint holds the whole population
    unit = "round"
    step_offset = -1  # round r's rows and checkpoint say r
    help = "PBT over any registered agent (default: 8 SAC agents on the open point maze)"
    multi_process = True

    def best(self, metrics) -> float:
        return float(np.mean(metrics["mean_return"]))

    def plan(self, config: PBTConfig) -> _PBTPlan:
        env, agent, spaces, pbt = build_pbt_run(config)
        train_env = training_env(config, env)
        init_key, loop_key = jr.split(jr.key(config.seed))
        init = lambda: init_population(
            agent, train_env, spaces, config.population_size, key=init_key
        )
        # A longer run's first round keys are the same (splits keep their prefix).
        round_keys = list(jr.split(loop_key, config.rounds))
        names = sorted(eqx.filter_eval_shape(lambda: agent.init(key=jr.key(0))).hparams.names())
        mesh = job_mesh(population_devices(config.devices, config.population_size))
        return _PBTPlan(config, env, agent, pbt, init, round_keys, names, train_env, mesh)

    def headers(self, plan: _PBTPlan) -> dict[str, list[str]]:
        hparams = ["round", "member", *plan.names, "return", "next_copied_from"]
        return {"progress.csv": _PROGRESS_HEADER, "hparams.csv": hparams}

    def like(self, plan: _PBTPlan) -> Any:
        return eqx.filter_eval_shape(plan.init)

    def total(self, config: PBTConfig) -> int:
        return config.rounds

    def bar(self, row) -> dict[str, float]:
        return {"mean": row["mean_return"], "max": row["max_return"]}

    def start(self, plan: _PBTPlan, clock: RunClock) -> Chunk:
        return Chunk(place_members(plan.init(), plan.mesh), 0, {})

    def resumed_state(self, plan: _PBTPlan, resumed) -> Any:
        pop, r = resumed.state, resumed.step
        if not resumed.metrics["exploited"] and r + 1 < plan.config.rounds:
            # The run was lengthened after its last round, which had no PBT step: take it.
            rows = [row for row in resumed.logs["hparams.csv"] if row[0] == r]
            returns = np.asarray([row[-2] for row in rows], np.float32)
            exploit_key = jr.split(plan.round_keys[r], 3)[2]  # as `PBT.round` splits it
            pop, sources = plan.pbt.exploit(pop, returns, key=exploit_key)
            for row, s in zip(rows, np.asarray(sources).tolist()):
                row[-1] = s
        return place_members(pop, plan.mesh)

    def advance(self, plan: _PBTPlan, pop, step: int, clock: RunClock) -> Chunk:
        config, r = plan.config, step
        # One program per step (`groups=1`): the job splits a population by devices
        # (`--devices`), and one device's numbers are what `--devices 1` asks for. No exploit
        # after the last round.
        pop, done = plan.pbt.round(
            plan.agent,
            plan.train_env,
            plan.env,
            pop,
            config.iterations_per_round,
            config.eval_episodes,
            exploit=r < config.rounds - 1,
            groups=1,
            mesh=plan.mesh,
            key=plan.round_keys[r],
        )
        # Gathered from every process's devices in a multi-process run (a collective).
        done = to_host(done)
        table, returns, source = done.hparams, np.asarray(done.returns), np.asarray(done.sources)
        env_steps = int(np.sum(np.asarray(done.env_steps)))
        wall = clock()
        stats = [returns.mean(), returns.max(), returns.min()]
        progress = [r, env_steps, wall, *[float(v) for v in stats]]
        values = [np.asarray(table[n]).tolist() for n in plan.names]
        members = zip(range(config.population_size), *values, returns.tolist(), source.tolist())
        hparams = [[r, *member] for member in members]
        # The checkpoint records whether this round's PBT step was taken (not after the last).
        metrics = dict(zip(_PROGRESS_HEADER, progress)) | {"exploited": r + 1 < config.rounds}
        rows = {"progress.csv": [progress], "hparams.csv": hparams}
        return Chunk(pop, r + 1, rows, metrics)

    def finish(self, plan: _PBTPlan, folder, pop, logs, plots: bool) -> RunResult:
        header = self.headers(plan)
        progress_columns = {
            k: np.asarray([r[j] for r in logs["progress.csv"]])
            for j, k in enumerate(_PROGRESS_HEADER)
        }
        rows = logs["hparams.csv"]
        table = {k: np.asarray([r[j] for r in rows]) for j, k in enumerate(header["hparams.csv"])}
        shape = (len(logs["progress.csv"]), plan.config.population_size)
        returns = table["return"].astype(np.float32).reshape(shape)
        hparams = {n: table[n].reshape(shape) for n in plan.names}
        pop = to_host(pop)  # every process, in step
        if folder is not None:
            stored = population_without_optimiser_states(plan.agent, pop).agent_state
            folder.write_eqx("population.eqx", stored)
            if plots:
                from ..plotting import plot_hparams, plot_population_returns

                folder.write_figure("returns.png", plot_population_returns(returns))
                folder.write_figure("hparams.png", plot_hparams(hparams))
        return RunResult(
            plan.config,
            None if folder is None else folder.path,
            progress_columns,
            pop,
            tables={"hparams": table},
        )

    def load(self, folder: RunFolder, config) -> RunResult:
        _, agent, _, _ = build_pbt_run(config)
        like = eqx.filter_eval_shape(
            lambda: eqx.filter_vmap(lambda k: agent.empty_optimiser_states(agent.init(key=k)))(
                jr.split(jr.key(0), config.population_size)
            )
        )
        states = folder.read_eqx("population.eqx", like)
        return RunResult(
            config,
            folder.path,
            folder.read_columns("progress.csv"),
            states,
            tables={"hparams": folder.read_columns("hparams.csv")},
        )

    def summary(self, result: RunResult) -> str:
        last = result.last
        return (
            f"done: {result.config.rounds} rounds, final mean return {last['mean_return']:.6g} "
            f"(max {last['max_return']:.6g})"
        )


register_job(_PBTJob())
