"""What the policy-search QD jobs share (`pgame`, `dcrl-me`, `mees`): their common options, the
task, GA operators, policies and CVT built from them, the jitted chunk of iterations, the CSV
schemas of their run folders and their figures.
"""

import dataclasses
import hashlib
import os
import typing
from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._compile import jit
from .._custom_types import PRNGKey
from .._emitters.base import Origin
from .._map_elites import MAPElites, MAPElitesState, StepInfo
from .._metrics import QDMetrics
from .._misc import filter_scan, tree_take
from .._qdrl.scoring import ChunkedScorer, DiscardDead, PolicyScorer, reevaluate
from .._repertoire import AddStatus, MAPElitesRepertoire
from .._sampling import CorrectedMetrics, ESTIMATORS
from .._sharded import init_mapped, step_mapped
from .._tessellation import CVTTessellation
from .._validate import finite, fraction, non_negative, non_negative_int, positive_int
from .._variation import (
    AbstractMutation,
    AbstractVariation,
    GaussianMutation,
    IsoLineVariation,
    PolynomialMutation,
    SBXCrossover,
    UniformMutation,
)
from ..envs._base import AbstractQDEnv
from ..rl._layers import INITS
from ..rl._policies import DeterministicPolicy
from ..rl._td3 import TD3
from . import checks
from ._blocks import RepertoireOptions, RunOptions
from ._config import option
from ._distributed import job_mesh, to_host
from ._folder import RunFolder, user_cache_dir
from ._job import RunResult, Translator
from ._loop import Chunk, LoopJob
from ._qd_outputs import (
    corrected_figures,
    CORRECTED_NAMES,
    corrected_row,
    corrector,
    read_qd_run,
    read_repertoire,
    repertoire_axes,
)
from ._registry import ENVIRONMENTS, make_env
from ._resume import RunClock


CROSSOVER_OPS = ("iso_dd", "sbx", "none")
MUTATION_OPS = ("polynomial_mutation", "gaussian_mutation", "uniform_mutation", "none")


@dataclasses.dataclass(frozen=True)
class PolicyQDOptions(RepertoireOptions, RunOptions):
    """What the policy-search QD jobs share (`pgame`, `dcrl-me`, `mees`): the task and its
    noise, the CVT, the budget, the GA's operators, the policies' networks, the TD3 critic's
    settings and the outputs' periods. Each job's config adds its own keys and defaults."""

    env: str = option("walker2d_uni", "registered QD environment", check=ENVIRONMENTS.check("qd"))
    num_descriptors: int | None = option(None, "descriptor dimensions (checked against the env)")
    cells: int = option(256, "CVT cells", check=positive_int)
    evaluations: int = option(10_000, "evaluation budget", check=positive_int)
    batch_size: int = option(64, "candidates per iteration", check=positive_int)
    random_init: int = option(256, "random policies evaluated first", check=positive_int)
    init_batch_size: int = option(128, "random policies scored at once", check=positive_int)
    critic_steps: int = option(300, "critic steps per iteration", check=non_negative_int)
    pg_steps: int = option(10, "policy-gradient steps per offspring", check=non_negative_int)
    minibatch_size: int = option(256, "transitions per critic / PG step", check=positive_int)
    discount: float = option(0.99, "TD3 discount", check=fraction)
    tau: float = option(0.005, "TD3 target update rate", check=fraction)
    policy_noise: float = option(0.2, "TD3 target policy noise", check=non_negative)
    noise_clip: float = option(0.5, "TD3 target noise clip", check=non_negative)
    policy_delay: int = option(2, "critic steps per actor step", check=positive_int)
    pg_lr: float = option(0.001, "policy-gradient variation learning rate", check=non_negative)
    iso_sigma: float = option(0.005, "iso+line-DD isotropic noise", check=non_negative)
    line_sigma: float = option(0.05, "iso+line-DD line noise", check=non_negative)
    crossover_op: str = option(
        "iso_dd", "GA two-parent operator", check=checks.one_of(*CROSSOVER_OPS)
    )
    mutation_op: str = option(
        "none",
        "GA mutation (after the crossover, if any)",
        check=checks.one_of(*MUTATION_OPS),
    )
    mutation_rate: float = option(0.05, "probability that a gene mutates", check=fraction)
    crossover_rate: float = option(0.75, "probability that an sbx gene crosses", check=fraction)
    eta_m: float = option(5.0, "polynomial mutation's distribution index", check=non_negative)
    eta_c: float = option(10.0, "sbx's distribution index", check=non_negative)
    sigma: float = option(0.2, "gaussian mutation's standard deviation", check=non_negative)
    max_uniform: float = option(0.1, "uniform mutation's half-width", check=non_negative)
    min_genotype: float | None = option(
        None, "lower bound of every gene (none: no bound)", check=finite
    )
    max_genotype: float | None = option(
        None, "upper bound of every gene (none: no bound)", check=finite
    )
    hidden: tuple[int, ...] = option((64, 64), "policy hidden layer widths")
    normalise: bool = option(False, "layer normalisation in the policy")
    affine: bool = option(False, "with normalise: learned scale and shift, layers without bias")
    cvt_samples: int = option(20_000, "uniform samples for CVT k-means", check=positive_int)
    use_cached_cvt: bool = option(
        False,
        "reuse cached centroids (computed once per cells, dim and cvt_samples with "
        "seed 0, so every seed shares them, as the repo's CVT folder)",
    )
    centroids: str | None = option(
        None, "read the centroids from a .npy or text file (the repo's CVT/centroids_K_D.dat)"
    )
    insert_dead: bool = option(
        True,
        "insert solutions whose episode ended early (the paper's setting; off: they are "
        "evaluated, stored in the replay buffer, but not inserted)",
    )
    snapshot_every: int = option(2_000, "evaluations between archive snapshots", check=positive_int)
    checkpoint_every: int = option(
        2_000,
        "evaluations between checkpoints of the whole state (and one at the end)",
        check=positive_int,
    )
    episode_length: int = option(100, "steps per episode", check=positive_int)
    critic_hidden: tuple[int, ...] = option((256, 256), "critic hidden layer widths")
    critic_lr: float = option(3e-4, "critic learning rate", check=non_negative)
    buffer_size: int = option(200_000, "replay buffer capacity", check=positive_int)
    reset_noise: bool = option(True, "random initial states (stochastic task)")
    obs_noise: float = option(0.0, "observation noise std (stochastic task)", check=non_negative)
    samples: int = option(
        1,
        "episodes per candidate, their --estimator estimate kept (MAP-Elites-sampling; the "
        "evaluations budget counts candidates, env_steps every episode)",
        check=positive_int,
    )
    estimator: str = option(
        "mean",
        "what a candidate's samples come to: mean, median, mode or closest",
        check=checks.one_of(*ESTIMATORS),
    )
    fitness_noise: float = option(
        0.0, "std of gaussian noise on each episode's return (stochastic task)", check=non_negative
    )
    descriptor_noise: float = option(
        0.0,
        "std of gaussian noise on each descriptor coordinate (stochastic task)",
        check=non_negative,
    )
    deterministic: bool = option(
        False, "no reset, observation, fitness or descriptor noise (QDax's tasks)"
    )
    reevaluations: int = option(
        10, "re-evaluations of the best for its averaged fitness", check=positive_int
    )
    corrected_reevaluations: int = option(
        0,
        "at each snapshot's row, score every elite this many times again and log the corrected "
        "QD-score, coverage, max fitness and reproducibility (0: not; costs that many episodes "
        "per cell)",
        check=non_negative_int,
    )
    policy_init: str = option(
        "xavier_uniform",
        "the policies' initial weights: xavier_uniform (the repository's actors), "
        "lecun_uniform with zero biases (QDax), uniform (+-1/sqrt(fan_in))",
        check=checks.one_of(*INITS),
    )
    critic_init: str = option(
        "uniform",
        "the critic's initial weights: uniform (the repository's, PyTorch's default), "
        "lecun_uniform (QDax), xavier_uniform",
        check=checks.one_of(*INITS),
    )

    devices: int = option(
        1,
        "devices to spread each batch over, batch_size / devices each, with a data-parallel "
        "critic (on a CPU, host devices are made)",
        check=positive_int,
    )

    def check_devices(self, counts: Mapping[str, int], learner: bool = True) -> None:
        """Refuse a device count that does not divide `random_init`, `counts` (the job's
        batch parts) or, with a `learner`, the replay buffer and the minibatch, or that leaves
        a device's random policies in part chunks, naming the option."""
        n = self.devices
        shared = {"random_init": self.random_init, **counts}
        if learner:
            shared |= {"buffer_size": self.buffer_size, "minibatch_size": self.minibatch_size}
        for name, value in shared.items():
            if value % n:
                raise ValueError(
                    f"devices ({n}) must divide {name} ({value}): every device takes as many"
                )
        if n > 1 and (self.random_init // n) % self.init_batch_size:
            raise ValueError(
                f"init_batch_size ({self.init_batch_size}) must divide each device's "
                f"random_init ({self.random_init} / {n} devices)"
            )

    def check(self) -> None:
        super().check()
        if self.repertoire == "grid":
            raise ValueError(
                f"repertoire: {self.JOB}'s cells are a CVT; choose cvt, dns or unstructured"
            )
        for name in ("hidden", "critic_hidden"):
            widths = getattr(self, name)
            if not widths or min(widths) < 1:
                raise ValueError(f"{name} must list positive layer widths, got {list(widths)}")
        if self.random_init % self.init_batch_size:
            raise ValueError(
                f"random_init ({self.random_init}) must be a multiple of init_batch_size "
                f"({self.init_batch_size})"
            )
        if self.evaluations < self.random_init + self.evaluations_per_iteration:
            raise ValueError(
                f"evaluations ({self.evaluations}) leaves no iteration after random_init "
                f"({self.random_init}): one takes {self.evaluations_per_iteration}"
            )
        if self.cvt_samples < self.cells:
            raise ValueError(f"cvt_samples ({self.cvt_samples}) must be at least cells")
        if self.crossover_op == "none" and self.mutation_op == "none":
            raise ValueError("crossover_op and mutation_op are both 'none': the GA has no operator")
        bounds = (self.min_genotype, self.max_genotype)
        if self.mutation_op == "polynomial_mutation" and None in bounds:
            raise ValueError(
                "mutation_op 'polynomial_mutation' needs min_genotype and max_genotype (ours is "
                "Deb's bounded form, which scales the perturbation by the bounds)"
            )
        if None not in bounds and self.min_genotype >= self.max_genotype:  # type: ignore
            raise ValueError(
                f"min_genotype ({self.min_genotype}) must be below max_genotype "
                f"({self.max_genotype})"
            )
        if self.affine and not self.normalise:
            raise ValueError("affine needs normalise (it sets the layer normalisations' scale)")
        if self.samples == 1 and self.estimator != "mean":
            raise ValueError(
                f"estimator {self.estimator!r} chooses among a candidate's samples: give "
                "samples above 1"
            )
        for name in ("obs_noise", "fitness_noise", "descriptor_noise"):
            if self.deterministic and getattr(self, name) > 0:
                raise ValueError(
                    f"deterministic and {name} = {getattr(self, name)} contradict each other: "
                    "a deterministic task has no noise to add"
                )
        if self.use_cached_cvt and self.centroids is not None:
            raise ValueError("use_cached_cvt and centroids both choose the centroids: give one")

    @property
    def evaluations_per_iteration(self) -> int:
        """The evaluations one iteration costs: its batch (MAP-Elites-ES adds its samples)."""
        return self.batch_size

    @property
    def num_iterations(self) -> int:
        return (self.evaluations - self.random_init) // self.evaluations_per_iteration


SMOKE_SIZES: dict[str, Any] = dict(
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
"""The policy-search jobs' smoke sizes (`--preset smoke`): a run of a minute or two through
every part of the loop, to try a change, not to see learning."""


def build_policy_env(config: PolicyQDOptions) -> AbstractQDEnv:
    """The config's environment with its episode length and noise settings."""
    return make_env(
        config.env,
        episode_length=config.episode_length,
        reset_noise=config.reset_noise and not config.deterministic,
        obs_noise=0.0 if config.deterministic else config.obs_noise,
    )


def build_policy_scorer(
    config: PolicyQDOptions, env: AbstractQDEnv, sampled: bool = True
) -> PolicyScorer:
    """The scorer of policies on `env` with the config's fitness and descriptor noise and,
    when `sampled`, its `samples` episodes per candidate and their `estimator`."""
    return PolicyScorer(
        env,
        fitness_noise=config.fitness_noise,
        descriptor_noise=config.descriptor_noise,
        num_samples=config.samples if sampled else 1,
        estimator=config.estimator if sampled else "mean",
    )


def ga_operators(
    config: PolicyQDOptions,
) -> tuple[AbstractVariation | None, AbstractMutation | None]:
    """The GA's two-parent operator and mutation from `crossover_op` / `mutation_op` and
    their parameters (either may be `None`), bounded by `min_genotype` / `max_genotype`."""
    bounds = dict(min_genotype=config.min_genotype, max_genotype=config.max_genotype)
    variation: AbstractVariation | None = {
        "iso_dd": lambda: IsoLineVariation(config.iso_sigma, config.line_sigma, **bounds),
        "sbx": lambda: SBXCrossover(config.eta_c, config.crossover_rate, **bounds),
        "none": lambda: None,
    }[config.crossover_op]()
    mutation: AbstractMutation | None = {
        "polynomial_mutation": lambda: PolynomialMutation(
            config.eta_m, config.mutation_rate, config.min_genotype, config.max_genotype
        ),
        "gaussian_mutation": lambda: GaussianMutation(config.sigma, config.mutation_rate, **bounds),
        "uniform_mutation": lambda: UniformMutation(
            config.max_uniform, config.mutation_rate, **bounds
        ),
        "none": lambda: None,
    }[config.mutation_op]()
    return variation, mutation


def policy_agent(
    config: PolicyQDOptions, env: AbstractQDEnv, *, critic_target_every_step: bool = False
) -> TD3:
    """The TD3 agent that defines a policy-search job's policies and critic (after checking
    `num_descriptors` against `env`)."""
    if config.num_descriptors is not None and config.num_descriptors != env.descriptor_size:
        raise ValueError(
            f"num_descriptors is {config.num_descriptors} but {config.env!r} has "
            f"{env.descriptor_size} descriptors"
        )
    return TD3(
        observation_size=env.observation_size,
        action_size=env.action_size,
        policy_hidden=config.hidden,
        critic_hidden=config.critic_hidden,
        minibatch_size=config.minibatch_size,
        policy_delay=config.policy_delay,
        policy_layer_norm=config.normalise,
        policy_affine=config.affine,
        policy_init=config.policy_init,
        critic_init=config.critic_init,
        critic_target_every_step=critic_target_every_step,
    )


def policy_tessellation(
    config: PolicyQDOptions, env: AbstractQDEnv, *, key: PRNGKey
) -> CVTTessellation:
    """The run's CVT: read from `centroids`; with `use_cached_cvt`, the cached
    centroids for these `cells`, descriptor bounds and `cvt_samples` (computed with a
    fixed key on first use and stored, so every seed shares them); else k-means with `key`."""
    d, (low, high) = env.descriptor_size, env.descriptor_bounds
    if config.centroids is not None:
        path = config.centroids
        if not os.path.isfile(path):
            raise ValueError(f"centroids {path!r} does not exist")
        try:
            tess = CVTTessellation.load(path)
        except (ValueError, TypeError) as e:
            raise ValueError(f"centroids: {e}") from e
        if tess.centroids.shape != (config.cells, d):
            raise ValueError(
                f"centroids {path!r} holds centroids of shape {tess.centroids.shape}; "
                f"cells {config.cells} of {config.env!r}'s {d} descriptors need "
                f"({config.cells}, {d})"
            )
        return tess
    compute = lambda k: CVTTessellation.from_kmeans(
        config.cells, d, low, high, num_samples=config.cvt_samples, key=k
    )
    if not config.use_cached_cvt:
        return compute(key)
    bounds = np.concatenate([np.broadcast_to(low, (d,)), np.broadcast_to(high, (d,))])
    tag = hashlib.sha256(np.asarray(bounds, np.float32).tobytes()).hexdigest()[:8]
    cache = RunFolder(user_cache_dir("cvt"))  # ~/.cache/eqx_qd/cvt
    name = f"centroids_{config.cells}_{d}_{config.cvt_samples}_{tag}.npy"
    if cache.exists(name):
        tess = CVTTessellation.load(cache.file(name))
        if tess.centroids.shape == (config.cells, d):
            return tess
    tess = compute(jr.key(0))
    cache.write_npy(name, tess.centroids)
    return tess


_CORRECTED_KEY = 0xC0
"""What the seed's key is folded with for the corrected figures' reevaluations."""


def _plain_scorer(algo: MAPElites):
    """The scorer without `DiscardDead` (re-evaluations score every episode, as the repo's),
    one episode per genotype (each re-evaluation is one evaluation)."""
    fn = algo.scoring_fn
    fn = fn.scorer if isinstance(fn, DiscardDead) else fn
    return fn.one_sample if isinstance(fn, PolicyScorer) else fn


def _chunk_length(config: PolicyQDOptions) -> int:
    """Iterations per jitted call: about `snapshot_every` evaluations, preferring a divisor of
    the number of iterations so that a single program is compiled."""
    per = config.evaluations_per_iteration
    chunk = min(max(1, config.snapshot_every // per), config.num_iterations)
    divisors = [d for d in range(1, chunk + 1) if config.num_iterations % d == 0]
    return divisors[-1] if 2 * divisors[-1] >= chunk else chunk


class IterationLog(eqx.Module):
    """What one iteration records: metrics, per-candidate info, and the re-evaluated best."""

    metrics: QDMetrics
    info: StepInfo
    reeval_fitness: jax.Array
    reeval_descriptor: jax.Array
    plain_qd_score: jax.Array
    corrected: CorrectedMetrics | None = None


class SnapshotFigures(eqx.Module):
    """When and how the corrected figures are taken inside a chunk: at the iteration whose
    evaluations (`first + iteration * batch`) pass a multiple of `period`, every elite scored
    `num` more times with `jr.fold_in(key, evaluations)`; the same rows whatever the chunks."""

    num: int = eqx.field(static=True)
    period: int = eqx.field(static=True)
    first: int = eqx.field(static=True)
    batch: int = eqx.field(static=True)
    key: PRNGKey

    def at(self, algo: MAPElites, state: MAPElitesState) -> CorrectedMetrics:
        """The state's corrected figures where its iteration passes a snapshot, else NaN."""
        evals = self.first + state.iteration * self.batch
        passes = evals // self.period > (evals - self.batch) // self.period
        take = lambda e: corrected_figures(
            _plain_scorer(algo), self.num, algo.qd_offset, self.key, e, evals
        )
        skipped = jax.tree.map(
            lambda x: jnp.full(x.shape, jnp.nan if x.dtype.kind == "f" else -1, x.dtype),
            jax.eval_shape(take, state.elites),
        )
        return jax.lax.cond(passes, take, lambda e: skipped, state.elites)


def _plain_qd_score(repertoire: MAPElitesRepertoire) -> jax.Array:
    """The paper's QD-score: the plain sum of the stored fitnesses (no offset)."""
    f = repertoire.fitnesses
    return jnp.sum(jnp.where(jnp.isfinite(f), f, 0.0))


def _best_reevaluation(algo: MAPElites, repertoire: MAPElitesRepertoire, n: int, key: PRNGKey):
    genotype = tree_take(repertoire.genotypes, jnp.argmax(repertoire.fitnesses)[None])
    re = reevaluate(_plain_scorer(algo), genotype, n, key=key)
    return re.fitness_mean[0], re.descriptor_mean[0]


@jit(donate="all-except-first")  # the old state's buffers (replay buffer) reused
def _run_chunk(
    algo: MAPElites,
    state: MAPElitesState,
    keys: jax.Array,
    reevaluations: int,
    mesh: Any = None,
    snapshots: SnapshotFigures | None = None,
):
    def body(s, k):
        step_key, reeval_key = jr.split(k)
        s, metrics, info = algo.step(s, key=step_key)
        fit, desc = _best_reevaluation(algo, s.elites, reevaluations, reeval_key)
        corrected = None if snapshots is None else snapshots.at(algo, s)
        return s, IterationLog(metrics, info, fit, desc, _plain_qd_score(s.elites), corrected)

    if mesh is None:
        return filter_scan(body, state, keys)
    # Every device steps its share; the records are equal on all of them (gathered batches,
    # replicated repertoire, the same re-evaluation keys).
    return step_mapped(lambda s, ks: filter_scan(body, s, ks), state, keys, mesh=mesh)


@jit
def _init(algo, init_algo, genotypes, repertoire, result, key, reevaluations, mesh=None):
    init_key, reeval_key = jr.split(key)

    def init(g, rep, res, k, rk):
        state, metrics = init_algo.init(g, rep, key=k, result=res)
        fit, desc = _best_reevaluation(algo, state.elites, reevaluations, rk)
        return state, (metrics, fit, desc, _plain_qd_score(state.elites))

    args = (repertoire, result, init_key, reeval_key)
    if mesh is None:
        state, out = init(genotypes, *args)
    else:  # each device scores its share of the random policies
        state, out = init_mapped(init, genotypes, *args, mesh=mesh)
    return (state, *out)


_TYPE_NAMES = {int(t): t.name.lower() for t in Origin}


def _progress_header(d: int, corrected: bool = False) -> list[str]:
    return [
        "evaluations",
        "env_steps",
        "wall_s",
        "num_filled",
        "coverage",
        "qd_score",
        "plain_qd_score",
        "max_fitness",
        "mean_fitness",
        "median_fitness",
        "p5_fitness",
        "p95_fitness",
        "averaged_max_fitness",
        *[f"averaged_max_descriptor_{i}" for i in range(d)],
        *(CORRECTED_NAMES if corrected else ()),
    ]


def _progress_row(
    evals: int, steps: int, wall: float, m: dict[str, float], plain: float, fit: float, desc
) -> list:
    return [
        evals,
        steps,
        wall,
        int(m["num_filled"]),
        m["coverage"],
        m["qd_score"],
        plain,
        m["max_fitness"],
        m["mean_fitness"],
        m["median_fitness"],
        m["p5_fitness"],
        m["p95_fitness"],
        fit,
        *np.asarray(desc).tolist(),
    ]


def _actors_header(d: int) -> list[str]:
    return [
        "evaluations",
        "id",
        "fitness",
        *[f"descriptor_{i}" for i in range(d)],
        "centroid",
        "parent_1",
        "parent_2",
        "type",
        "novel",
        "delta_fitness",
    ]


def _actor_rows(evals: int, info: dict[str, np.ndarray]) -> list[list]:
    rows = []
    for j in np.flatnonzero(info["status"] != int(AddStatus.NOT_ADDED)):
        rows.append(
            [
                evals,
                int(info["ids"][j]),
                float(info["fitnesses"][j]),
                *info["descriptors"][j].tolist(),
                int(info["cell"][j]),
                int(info["parent1"][j]),
                int(info["parent2"][j]),
                _TYPE_NAMES[int(info["kind"][j])],
                bool(info["status"][j] == int(AddStatus.NEW)),
                float(info["delta"][j]),
            ]
        )
    return rows


def _archive_rows(repertoire: MAPElitesRepertoire) -> tuple[list[str], list[list]]:
    fit = np.asarray(repertoire.fitnesses)
    desc = np.asarray(repertoire.descriptors)
    ids = np.asarray(repertoire.extra)
    header = ["fitness", "centroid", *[f"descriptor_{i}" for i in range(desc.shape[1])], "id"]
    rows = [
        [float(fit[c]), int(c), *desc[c].tolist(), int(ids[c])]
        for c in np.flatnonzero(np.isfinite(fit))
    ]
    return header, rows


class PolicyQDPlan(typing.NamedTuple):
    config: PolicyQDOptions
    env: AbstractQDEnv
    algo: MAPElites
    tessellation: CVTTessellation
    init_args: tuple
    run_keys: jax.Array
    mesh: Any  # the devices each batch is spread over (`None`: one device)
    snapshots: "SnapshotFigures | None" = None  # the corrected figures' settings


class PolicyQDJob(LoopJob[PolicyQDPlan, MAPElitesState]):
    """A policy-search QD job, given as data: one class runs PGA-MAP-Elites, DCRL-MAP-Elites,
    DCG-ME and MAP-Elites-ES, which differ only in their config (and what an iteration costs,
    `evaluations_per_iteration`), how they build the algorithm and how they count environment
    steps. Each registers an instance (`jobs/_pgame.py`, `jobs/_dcrl_me.py`, `jobs/_mees.py`);
    a user's variant is one more instance, not a subclass.

    The run: `random_init` random policies (scored `init_batch_size` at a time), then batches
    of `batch_size` until `evaluations`, in jitted chunks of about `snapshot_every` evaluations
    (one compile); each chunk's rows are appended to the logs, so a long run can be watched
    while it goes. The folder holds `config.toml`, `progress.csv`, `actors.csv` (one row per
    actor that entered the archive, with its parents and origin), `archive_<evals>.csv`,
    `repertoire.eqx` (the final actors; `load_run` reads it back), `centroids.npy` and the
    plots `repertoire.png`, `progress.png` and `fitness_density.png`.

    **Arguments:**

    - `name`, `config_cls`, `help`, `description`, `translator`: as every `Job`.
    - `make`: `(config, env) -> (MAPElites, TD3)`, the algorithm (with lineage) and the TD3
      agent whose policies are the genotypes.
    - `env_steps`: `(config, evaluations) -> int`, the environment steps taken after that
      many evaluations (the `env_steps` column).
    """

    logs = {"progress.csv": "evaluations", "actors.csv": "evaluations"}
    step_files = (r"archive_(\d+)\.csv",)
    resume_may_change = ("evaluations",)
    unit = "evals"
    elite_ids = "actors.csv lists every id ever added, archive_<evals>.csv each snapshot's"
    checkpoint_at_start = True  # the random initialisation is costly: keep it
    multi_process = True

    def __init__(
        self,
        *,
        name: str,
        config_cls: type[PolicyQDOptions],
        make: Callable[[Any, AbstractQDEnv], tuple[MAPElites, TD3]],
        env_steps: Callable[[Any, int], int],
        help: str,
        description: str = "",
        translator: Translator | None = None,
    ):
        self.name, self.config_cls = name, config_cls
        self.make, self.env_steps = make, env_steps
        self.help, self.description, self.translator = help, description, translator

    def plan(self, config: PolicyQDOptions) -> PolicyQDPlan:
        mesh = job_mesh(config.devices)  # before the folder
        env = build_policy_env(config)
        algo, td3 = self.make(config, env)
        init_algo = MAPElites(
            algo.emitter,
            ChunkedScorer(algo.scoring_fn, config.init_batch_size),
            algo.qd_offset,
            lineage=True,
            axis_name=algo.axis_name,
        )
        cvt_key, pop_key, init_key, run_key = jr.split(jr.key(config.seed), 4)
        tessellation = policy_tessellation(config, env, key=cvt_key)  # (a bad file: no folder)
        genotypes = eqx.filter_vmap(lambda k: td3.init_policy(key=k))(
            jr.split(pop_key, config.random_init)
        )
        largest = max(config.batch_size * config.devices, config.random_init)
        repertoire = config.repertoire_for(tessellation, env.descriptor_size, largest_batch=largest)
        result = config.result_for(tessellation)
        init_args = (
            algo,
            init_algo,
            genotypes,
            repertoire,
            result,
            init_key,
            config.reevaluations,
            mesh,
        )
        run_keys = jr.split(run_key, config.num_iterations)
        snapshots = None
        if config.corrected_reevaluations > 0:  # keys of their own: the run's are unchanged
            snapshots = SnapshotFigures(
                config.corrected_reevaluations,
                config.snapshot_every,
                config.random_init,
                config.evaluations_per_iteration,
                jr.fold_in(jr.key(config.seed), _CORRECTED_KEY),
            )
        return PolicyQDPlan(config, env, algo, tessellation, init_args, run_keys, mesh, snapshots)

    def headers(self, plan: PolicyQDPlan) -> dict[str, list[str]]:
        d = plan.env.descriptor_size
        corrected = plan.snapshots is not None
        return {"progress.csv": _progress_header(d, corrected), "actors.csv": _actors_header(d)}

    def like(self, plan: PolicyQDPlan) -> MAPElitesState:
        return eqx.filter_eval_shape(_init, *plan.init_args)[0]

    def total(self, config: PolicyQDOptions) -> int:
        # The last batch's evaluations: the budget, less what does not fill a batch.
        return config.random_init + config.num_iterations * config.evaluations_per_iteration

    def opened(self, plan: PolicyQDPlan, folder: RunFolder) -> None:
        folder.write_npy("centroids.npy", plan.tessellation.centroids)

    def start(self, plan: PolicyQDPlan, clock: RunClock) -> Chunk:
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
        if plan.snapshots is not None:  # the first row: the random policies' figures
            snap = plan.snapshots
            figures = corrector(
                _plain_scorer(plan.algo), snap.num, plan.algo.qd_offset, key=snap.key
            )
            row += corrected_row(figures(state, evals))
        return Chunk(state, evals, {"progress.csv": [row], "actors.csv": actors})

    def advance(self, plan: PolicyQDPlan, state, step: int, clock: RunClock) -> Chunk:
        config, evals = plan.config, step
        chunk = _chunk_length(config)
        per = config.evaluations_per_iteration
        done = (evals - config.random_init) // per
        # Chunks end on multiples of `chunk`, wherever the run (re)started.
        n = min(chunk - done % chunk, config.num_iterations - done)
        state, logs = _run_chunk(
            plan.algo,
            state,
            plan.run_keys[done : done + n],
            config.reevaluations,
            plan.mesh,
            plan.snapshots,
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
            evals += per
            m = {k: float(v[i]) for k, v in metrics.items()}
            steps, wall = self.env_steps(config, evals), clock()
            fit, desc = float(reeval_fit[i]), reeval_desc[i]
            progress.append(_progress_row(evals, steps, wall, m, float(plain_qd[i]), fit, desc))
            actors.extend(_actor_rows(evals, {k: v[i] for k, v in columns.items()}))
        if plan.snapshots is not None:  # NaN but at the iterations that pass a snapshot
            corrected = to_host(logs.corrected)
            for i, row in enumerate(progress):
                row += corrected_row(jax.tree.map(lambda x: x[i], corrected))
        return Chunk(state, evals, {"progress.csv": progress, "actors.csv": actors})

    def resumed_state(self, plan: PolicyQDPlan, resumed) -> MAPElitesState:
        return resumed.state_on(plan.mesh)

    def after_chunk(self, plan: PolicyQDPlan, folder, state, before: int, step: int) -> None:
        # A snapshot at the first chunk's end past each multiple of snapshot_every, and the end.
        period = plan.config.snapshot_every
        if step // period > before // period or step >= self.total(plan.config):
            elites = to_host(state.elites)  # on every process (a collective), written by one
            if folder is not None:
                folder.write_csv(f"archive_{step}.csv", *_archive_rows(elites))

    def finish(self, plan: PolicyQDPlan, folder, state, logs, plots: bool) -> RunResult:
        header = _progress_header(plan.env.descriptor_size, plan.snapshots is not None)
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
        return PolicyScorer(build_policy_env(config))

    def load(self, folder: RunFolder, config) -> RunResult:
        env = build_policy_env(config)
        _, td3 = self.make(config, env)
        repertoire = read_repertoire(folder, lambda: td3.init_policy(key=jr.key(0)), with_ids=True)
        return read_qd_run(folder, config, repertoire, ("actors",))

    def summary(self, result: RunResult) -> str:
        last = result.last
        return (
            f"done: {int(last['evaluations'])} evaluations, QD-score {last['qd_score']:.6g}, "
            f"{int(last['num_filled'])} cells ({100 * last['coverage']:.1f}%), "
            f"max fitness {last['max_fitness']:.6g} "
            f"(averaged over {result.config.reevaluations} re-evaluations: "
            f"{last['averaged_max_fitness']:.6g})"
        )


def _write_plots(folder: RunFolder, repertoire: MAPElitesRepertoire, prog, env) -> None:
    from ..plotting import plot_fitness_density, plot_metrics, plot_repertoire

    # Any number of descriptors: beyond two, one panel per pair (ant_uni has four).
    folder.write_figure("repertoire.png", plot_repertoire(repertoire, **repertoire_axes(env)))
    curves = {
        "evaluations": prog["evaluations"],
        "env_steps": prog["env_steps"],
        "qd_score": prog["qd_score"],
        "coverage": prog["coverage"],
        "max_fitness": prog["max_fitness"],
        "mean_fitness": prog["mean_fitness"],
    }
    fig = plot_metrics(curves, "evaluations", "env_steps")  # the paper's axis, and QDax's
    fig.axes[2].plot(prog["evaluations"], prog["averaged_max_fitness"], label="averaged (re-evals)")
    fig.axes[2].legend()
    folder.write_figure("progress.png", fig)
    density = plot_fitness_density([np.asarray(repertoire.fitnesses)])
    folder.write_figure("fitness_density.png", density)


def policy_by_id(repertoire: MAPElitesRepertoire, actor_id: int) -> DeterministicPolicy:
    """The actor of `repertoire` whose id (stored as its `extra`) is `actor_id` (from
    `actors.csv` or an archive snapshot)."""
    ids = np.asarray(repertoire.extra)
    filled = np.isfinite(np.asarray(repertoire.fitnesses))
    where = np.flatnonzero((ids == actor_id) & filled)
    if where.size == 0:
        raise KeyError(f"no actor with id {actor_id} in the final archive")
    return tree_take(repertoire.genotypes, int(where[0]))
