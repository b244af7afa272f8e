"""A job as a user's plugin module writes one: a (1 + lambda) hill climber on a registered
pure-JAX task, run by the jobs' driver (``eqx-qd --plugin user_job run hill-climb``). It says
what is its own (its config, how to build and advance the run, its outputs); the driver starts,
resumes, logs and checkpoints it as it does the library's jobs."""

import dataclasses
import typing
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float

from eqx_qd import jobs


@dataclasses.dataclass(frozen=True)
class HillClimbConfig(jobs.JobConfig):
    """A (1 + lambda) hill climber's settings."""

    JOB: ClassVar[str] = "hill-climb"

    task: str = jobs.option("sphere", "pure-JAX task", check=jobs.TASKS.check())
    genotype_dim: int = jobs.option(8, "genes per genotype", check=jobs.checks.positive_int)
    offspring: int = jobs.option(16, "children per iteration", check=jobs.checks.positive_int)
    sigma: float = jobs.option(0.05, "mutation standard deviation", check=jobs.checks.positive)
    iterations: int = jobs.option(300, "iterations", check=jobs.checks.positive_int)
    log_every: int = jobs.option(5, "iterations per logged row", check=jobs.checks.positive_int)
    seed: int = jobs.option(0, "random seed")
    checkpoint_every: int = jobs.option(
        20, "iterations between checkpoints", check=jobs.checks.positive_int
    )
    keep_checkpoints: int = jobs.option(
        2, "newest checkpoints kept (0: all)", check=jobs.checks.non_negative_int
    )


class Climber(eqx.Module):
    """The climber: the best genotype so far and its fitness."""

    best: Float[Array, " genotype_dim"]
    fitness: Float[Array, ""]


@eqx.filter_jit
def climb(task, climber: Climber, sigma, offspring: int, keys) -> Climber:
    """One iteration per key: `offspring` Gaussian children, the best replaces the parent if
    it is at least as good."""

    def step(c, key):
        mutation_key, score_key = jr.split(key)
        noise = jr.normal(mutation_key, (offspring, c.best.shape[0]))
        children = jnp.clip(c.best[None] + sigma * noise, 0.0, 1.0)
        fitness, _, _ = task(children, key=score_key)
        i = jnp.argmax(fitness)
        better = fitness[i] >= c.fitness
        return Climber(
            jnp.where(better, children[i], c.best), jnp.where(better, fitness[i], c.fitness)
        ), None

    return jax.lax.scan(step, climber, keys)[0]


class Plan(typing.NamedTuple):
    config: HillClimbConfig
    task: typing.Any
    start_key: typing.Any
    keys: typing.Any


HEADER = ["iteration", "fitness", "wall_s"]


class HillClimbJob(jobs.LoopJob[Plan, Climber]):
    """The hill climber for `iterations` iterations: `progress.csv` (the best fitness every
    `log_every` iterations) and `best.npy` (the final genotype)."""

    name = "hill-climb"
    config_cls = HillClimbConfig
    help = "a (1 + lambda) hill climber (a user's job, tests/jobs/user_job.py)"
    logs = {"progress.csv": "iteration"}
    resume_may_change = ("iterations",)

    def best(self, metrics) -> float:
        return float(metrics["fitness"])

    def plan(self, config):
        task = jobs.make_task(config.task, genotype_dim=config.genotype_dim)
        start_key, run_key = jr.split(jr.key(config.seed))
        return Plan(config, task, start_key, jr.split(run_key, config.iterations))

    def headers(self, plan):
        return {"progress.csv": HEADER}

    def like(self, plan):
        return eqx.filter_eval_shape(self._fresh, plan)

    def total(self, config):
        return config.iterations

    def _fresh(self, plan):
        genotype = plan.task.init_genotypes(1, key=plan.start_key)
        fitness, _, _ = plan.task(genotype, key=plan.start_key)
        return Climber(genotype[0], fitness[0])

    def start(self, plan, clock):
        climber = self._fresh(plan)
        return jobs.Chunk(climber, 0, {"progress.csv": [[0, float(climber.fitness), clock()]]})

    def advance(self, plan, climber, step, clock):
        config = plan.config
        n = min(config.log_every - step % config.log_every, config.iterations - step)
        sigma = jnp.float32(config.sigma)
        climber = climb(plan.task, climber, sigma, config.offspring, plan.keys[step : step + n])
        row = [step + n, float(climber.fitness), clock()]
        return jobs.Chunk(climber, step + n, {"progress.csv": [row]})

    def finish(self, plan, folder, climber, logs, plots):
        if folder is not None:
            folder.write_npy("best.npy", climber.best)
        columns = {
            k: np.asarray([r[j] for r in logs["progress.csv"]]) for j, k in enumerate(HEADER)
        }
        return jobs.RunResult(
            plan.config, None if folder is None else folder.path, columns, climber
        )

    def load(self, folder, config):
        progress = folder.read_columns("progress.csv")
        best = jnp.asarray(folder.read_npy("best.npy"))
        return jobs.RunResult(
            config, folder.path, progress, Climber(best, jnp.float32(progress["fitness"][-1]))
        )

    def summary(self, result):
        return f"done: best fitness {result.last['fitness']:.6g}"


jobs.register_job(HillClimbJob())
