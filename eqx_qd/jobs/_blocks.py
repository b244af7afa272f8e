"""Config blocks the jobs share: `RunOptions`, which every job's config has,
`AgentOptions`, which the jobs that train a registered agent have (PBT, ME-PBT), and
`RepertoireOptions`, which the QD jobs have (MAP-Elites, PGA-ME, ME-PBT), `CellOptions`
and `EmitterOptions`, the cells and the registered emitter of the MAP-Elites job, and
`NoiseOptions`, its sampling and corrected metrics. A config
inherits its blocks; `default_of` re-declares a block's field with the job's own default,
keeping its help and check, so a key means one thing in every job."""

import dataclasses
from typing import Any

import jax.numpy as jnp

from .._custom_types import PRNGKey
from .._machine import MATMUL_DTYPES
from .._repertoire import (
    AbstractRepertoire,
    DensityRepertoire,
    DiscountModelRepertoire,
    DNSRepertoire,
    ExtractRepertoire,
    LowSpreadRepertoire,
    SlidingBoundariesRepertoire,
    UnstructuredRepertoire,
)
from .._sampling import ESTIMATORS
from .._strategies import EVOLUTION_STRATEGIES
from .._tessellation import AbstractTessellation, GridTessellation
from .._validate import non_negative, non_negative_int, positive, positive_int
from ._config import JobConfig, option
from ._registry import AGENTS, EMITTERS, ENVIRONMENTS, restart_rule_value
from .checks import Choices


def default_of(block: type, name: str, default: Any) -> Any:
    """Field `name` of config block `block` (its help, check and aliases) with the job's own
    `default`: `num_envs: int = default_of(AgentOptions, "num_envs", 8)`."""
    field = block.__dataclass_fields__[name]  # type: ignore[attr-defined]
    return dataclasses.field(default=default, metadata=field.metadata)


def _one_of(*choices: str) -> Choices:
    def check(key: str, value: Any) -> None:
        if value not in choices:
            raise ValueError(f"{key}: unknown {value!r}; choose one of {', '.join(choices)}")

    return Choices(check, lambda: list(choices))


@dataclasses.dataclass(frozen=True)
class RunOptions(JobConfig):
    """What every job's config has: its `seed`, and how many checkpoints it keeps (when it
    checkpoints is the job's own `checkpoint_every`, in the unit of its logs)."""

    seed: int = option(0, "random seed")
    keep_checkpoints: int = option(2, "newest checkpoints kept", check=positive_int)


@dataclasses.dataclass(frozen=True)
class AgentOptions(JobConfig):
    """What a job that trains a registered agent passes it: the `agent` and its `env`, and
    the options the agent's factory takes among `hidden`, `minibatch_size`, `num_envs`,
    `buffer_size`, `grad_updates_per_step`, `rollout_length`, `target_entropy_scale`,
    `critic_target_every_step`, `same_start` and `matmul_dtype` (setting one the agent does
    not take is an error naming it)."""

    agent: str = option("td3", "registered agent", check=AGENTS.check())
    env: str = option("point_maze", "registered QD environment", check=ENVIRONMENTS.check("qd"))
    episode_length: int = option(100, "steps per episode", check=positive_int)
    num_envs: int = option(16, "parallel environments per agent", check=positive_int)
    grad_updates_per_step: float = option(
        1.0, "gradient steps per environment step (off-policy)", check=positive
    )
    buffer_size: int = option(
        100_000, "replay buffer capacity per agent (off-policy)", check=positive_int
    )
    rollout_length: int = option(16, "steps per rollout (ppo)", check=positive_int)
    hidden: tuple[int, ...] = option((64, 64), "hidden layer widths (policy and critic)")
    minibatch_size: int = option(256, "transitions per gradient step", check=positive_int)
    target_entropy_scale: float = option(
        1.0, "sac: target entropy = -scale x action size (QDax's PBT-SAC: 0.5)", check=positive
    )
    critic_target_every_step: bool = option(
        False,
        "td3: soft-update the target critic after every critic step, as QDax's PBT-TD3 (the "
        "TD3 paper's: with the policy, every second step)",
    )
    same_start: bool = option(
        False,
        "td3 / sac: train on the task with its reset noise, each training environment "
        "restarting every episode from the random first state it drew, as QDax's (scoring "
        "stays on the task)",
    )
    matmul_dtype: str = option(
        "float32",
        "td3 / sac: the hidden products' inputs: float32 | bfloat16 (rounded; faster on CPUs "
        "with AVX-512 BF16) | auto (bfloat16 where faster, float32 elsewhere; the log says "
        "which)",
        check=_one_of(*MATMUL_DTYPES),
    )
    fixed_hparams: str = option(
        "",
        "hyperparameters PBT leaves at the agent's default, comma-separated (QDax's PBT-TD3 "
        "keeps discount at 0.99: discount)",
    )

    def check(self) -> None:
        super().check()
        if not self.hidden or min(self.hidden) < 1:
            raise ValueError(f"hidden must list positive layer widths, got {list(self.hidden)}")
        names = [n.strip() for n in self.fixed_hparams.split(",") if n.strip()]
        if len(set(names)) != len(names):
            raise ValueError(f"fixed_hparams names a hyperparameter twice: {self.fixed_hparams!r}")
        from ._agent_options import agent_options

        agent_options(self)  # options the chosen agent does not take
        env = ENVIRONMENTS.get(self.env)
        if self.same_start and not (env.takes_any_option() or "reset_noise" in env.options()):
            raise ValueError(
                f"same_start: environment {self.env!r} takes no reset_noise option, so its "
                "training environments cannot draw random first states"
            )


@dataclasses.dataclass(frozen=True)
class RepertoireOptions(JobConfig):
    """Which repertoire a QD job keeps: one elite per cell (`cvt`; `grid` in the MAP-Elites
    job), a repertoire without cells (`dns`, `unstructured`) of `capacity` elites, or a grid
    whose boundaries move with the data (`sliding`, `cells` bins per descriptor); the last
    three are reported on a passive archive over the job's cells
    (`MAPElites.init(..., result=)`). `discount` (Discount Model Search) and `density`
    (Density Descent Search) keep the elites over the job's cells beside a model that guides
    the CMA emitters (the jobs with an `emitter`). `low_spread` is MAP-Elites Low-Spread's
    archive over the job's cells, `extract` Extract-ME's (`depth` solutions per cell, an
    `extraction` share of every batch re-scoring elites; the jobs with `samples`)."""

    repertoire: str = option(
        "cvt",
        "cvt | grid: one elite per cell; dns | unstructured: no cells (Dominated Novelty "
        "Search's population, novelty search's archive); sliding: pyribs' sliding-boundaries "
        "grid of cells bins per descriptor; the last three reported on a passive archive over "
        "the job's cells; discount: Discount Model Search's archive (give threshold_min); "
        "density: Density Descent Search's (emitter dds); low_spread: MAP-Elites Low-Spread's "
        "cells (give samples); extract: Extract-ME's cells with depth, elites re-scored",
        check=_one_of(
            "cvt",
            "grid",
            "dns",
            "unstructured",
            "sliding",
            "discount",
            "density",
            "low_spread",
            "extract",
        ),
    )
    depth: int = option(
        8, "extract: solutions a cell keeps, by estimated fitness", check=positive_int
    )
    extraction: float = option(
        0.5,
        "extract: share of each batch spent re-scoring elites drawn from the archive (the rest "
        "are offspring)",
    )
    capacity: int | None = option(
        None, "dns / unstructured: elites kept (default: as many as the job's cells)"
    )
    neighbours: int = option(
        3, "dns / unstructured: k nearest neighbours (dns: fitter ones)", check=positive_int
    )
    novelty_threshold: float = option(
        0.01, "unstructured: novelty a candidate needs to enter", check=positive
    )
    local_competition: bool = option(
        True, "unstructured: a candidate that is not novel may replace its worse nearest elite"
    )
    remap_frequency: int = option(
        100, "sliding: candidates between two remaps of the boundaries", check=positive_int
    )
    buffer_capacity: int | None = option(
        None, "sliding: recent candidates the boundaries follow (default: 1,000 or the batch)"
    )
    empty_points: int = option(
        100,
        "discount: centres of empty cells the model trains on each iteration",
        check=positive_int,
    )
    discount_epochs: int = option(
        5, "discount: most epochs of one training of the model", check=positive_int
    )
    discount_low: float | None = option(
        None, "discount: fitness read as 0 by the model (with discount_high; default: none)"
    )
    discount_high: float | None = option(
        None, "discount: fitness read as 1 by the model (pyribs' sphere: 0 and 100)"
    )
    bandwidth: float | None = option(
        None,
        "density: the kernel's width (default: a twentieth of the descriptor box's widest "
        "side, pyribs' 25.6 over the sphere's 512)",
    )
    density_buffer: int = option(
        10_000,
        "density: descriptors the density estimate keeps (a reservoir sample)",
        check=positive_int,
    )

    def check(self) -> None:
        super().check()
        if self.capacity is not None and self.capacity < 1:
            raise ValueError(f"capacity must be a positive integer, got {self.capacity}")
        if self.buffer_capacity is not None:
            positive_int("buffer_capacity", self.buffer_capacity)
        if self.bandwidth is not None:
            positive("bandwidth", self.bandwidth)
        if (self.discount_low is None) != (self.discount_high is None):
            raise ValueError("discount_low and discount_high go together (or neither)")
        if self.discount_low is not None and not self.discount_low < self.discount_high:  # type: ignore[operator]
            raise ValueError(
                f"discount_low ({self.discount_low}) must be below discount_high "
                f"({self.discount_high})"
            )
        if self.repertoire == "low_spread" and not isinstance(self, NoiseOptions):
            raise ValueError(
                "repertoire 'low_spread' inserts candidates by their samples: a job with "
                "samples (map-elites, external) runs it"
            )
        if self.repertoire == "extract" and not isinstance(self, NoiseOptions):
            raise ValueError(
                "repertoire 'extract' (Extract-ME) re-scores elites within the batch: a job "
                "with samples (map-elites, external) runs it"
            )
        if not 0.0 < self.extraction < 1.0:
            raise ValueError(
                f"extraction must be a share of the batch strictly between 0 and 1, got "
                f"{self.extraction}"
            )
        if self.repertoire != "extract":
            for name, default in (("depth", 8), ("extraction", 0.5)):
                if getattr(self, name) != default:
                    raise ValueError(
                        f"{name} is an option of repertoire 'extract' (Extract-ME), not of "
                        f"{self.repertoire!r}"
                    )
        if self.guided and not hasattr(self, "emitter"):
            raise ValueError(
                f"repertoire {self.repertoire!r} guides the CMA emitters' rankings: a job with "
                "an emitter (map-elites, external) runs it"
            )

    @property
    def guided(self) -> bool:
        """Whether the repertoire is Discount Model Search's or Density Descent Search's."""
        return self.repertoire in ("discount", "density")

    @property
    def cell_free(self) -> bool:
        """Whether the repertoire has no fixed cells (DNS, the unstructured archive, the
        sliding-boundaries grid): it is reported on a passive archive, and cannot anneal."""
        return self.repertoire in ("dns", "unstructured", "sliding")

    def repertoire_for(
        self,
        tessellation: AbstractTessellation,
        num_descriptors: int,
        *,
        largest_batch: int,
        key: PRNGKey | None = None,
    ) -> AbstractTessellation | AbstractRepertoire:
        """What `MAPElites.init` builds the repertoire from: the tessellation itself, or an
        empty DNS / unstructured repertoire of `capacity` (default: the tessellation's cells),
        or an empty sliding-boundaries grid (a grid's bins per descriptor, or about as many
        cells as a CVT's, over its extent; a buffer of `buffer_capacity`, by default pyribs'
        1,000 or `largest_batch`, the most candidates one insertion offers), or a discount /
        density archive over the tessellation (drawing from `key`), which `init` shapes after
        the initial population."""
        placeholder = jnp.zeros(())  # MAPElites.init re-shapes it (AbstractRepertoire.emptied)
        if self.repertoire == "low_spread":
            return LowSpreadRepertoire.empty(tessellation, placeholder)
        if self.repertoire == "extract":
            return ExtractRepertoire.empty(tessellation, placeholder, self.depth)
        if self.guided:
            if key is None:
                raise ValueError(f"repertoire {self.repertoire!r} draws random numbers: give key")
            if self.repertoire == "density":
                lower, upper = tessellation.extent
                bandwidth = self.bandwidth
                if bandwidth is None:
                    bandwidth = 0.05 * float(jnp.max(upper - lower))
                return DensityRepertoire.empty(
                    tessellation,
                    placeholder,
                    bandwidth=bandwidth,
                    buffer_size=self.density_buffer,
                    key=key,
                )
            low, high = self.discount_low, self.discount_high
            return DiscountModelRepertoire.empty(
                tessellation,
                placeholder,
                learning_rate=self.archive_learning_rate,  # type: ignore[attr-defined]
                threshold_min=self.threshold_min,  # type: ignore[attr-defined]
                empty_points=self.empty_points,
                train_epochs=self.discount_epochs,
                discount_range=None if low is None else (low, high),
                key=key,
            )
        if not self.cell_free:
            return tessellation
        capacity = self.capacity or tessellation.num_cells
        if self.repertoire == "sliding":
            if isinstance(tessellation, GridTessellation):
                dims = tessellation.bins
            else:
                dims = (max(1, round(tessellation.num_cells ** (1 / num_descriptors))),)
                dims = dims * num_descriptors
            buffer = self.buffer_capacity or max(1000, largest_batch)
            if buffer < largest_batch:
                raise ValueError(
                    f"buffer_capacity ({buffer}) must be at least the {largest_batch} candidates "
                    "one insertion offers: a batch would push its own candidates out"
                )
            lower, upper = tessellation.extent
            return SlidingBoundariesRepertoire.empty(
                dims,
                lower,
                upper,
                placeholder,
                remap_frequency=self.remap_frequency,
                buffer_capacity=buffer,
            )
        if self.repertoire == "dns":
            return DNSRepertoire.empty(capacity, placeholder, num_descriptors, k=self.neighbours)
        return UnstructuredRepertoire.empty(
            capacity,
            placeholder,
            num_descriptors,
            novelty_threshold=self.novelty_threshold,
            k=self.neighbours,
            local_competition=self.local_competition,
        )

    def result_for(self, tessellation: AbstractTessellation) -> AbstractTessellation | None:
        """The passive archive's tessellation of a run without cells, else `None`."""
        return tessellation if self.cell_free else None


@dataclasses.dataclass(frozen=True)
class CellOptions(JobConfig):
    """The cells of a MAP-Elites job: a CVT of `cells` cells (k-means over `cvt_samples`
    uniform points, or read from `centroids`), or a grid of `cells` bins per descriptor."""

    cells: int = option(1024, "CVT cells, or bins per descriptor with --grid", check=positive_int)
    grid: bool = option(False, "a regular grid instead of a CVT (the cells, or dns's result grid)")
    centroids: str | None = option(None, ".npy file of CVT centroids to use instead of k-means")
    cvt_samples: int = option(50_000, "uniform samples for CVT k-means", check=positive_int)

    def check(self) -> None:
        super().check()
        if not self.uses_grid and self.centroids is None and self.cvt_samples < self.cells:
            raise ValueError(f"cvt_samples ({self.cvt_samples}) must be at least cells")

    @property
    def uses_grid(self) -> bool:
        """Whether the cells (the passive result archive of a repertoire without cells) form
        a grid: `grid`, or `repertoire = "grid"`."""
        return self.grid or getattr(self, "repertoire", None) == "grid"


@dataclasses.dataclass(frozen=True)
class EmitterOptions(JobConfig):
    """The registered `emitter` of a MAP-Elites job and the options its factory takes (the
    GA's mutation, the CMA emitters' step size and number), with CMA-MAE's annealing."""

    emitter: str = option("iso_line", "registered emitter", check=EMITTERS.check())
    iso_sigma: float = option(0.005, "iso+line-DD isotropic noise (iso_line)", check=non_negative)
    line_sigma: float = option(0.05, "iso+line-DD line noise (iso_line)", check=non_negative)
    sigma: float = option(0.05, "gaussian mutation std (gaussian)", check=non_negative)
    sigma0: float | None = option(
        None, "CMA emitters' initial step size (default: cma_me / cma_mae 0.5, cma_mega 10)"
    )
    num_emitters: int = option(
        15, "CMA emitters side by side (the cma_* emitters share batch_size)", check=positive_int
    )
    es: str = option(
        "cma_es",
        "the CMA emitters' strategy (cma_me, cma_mae): cma_es (full covariance), sep_cma_es, "
        "lm_ma_es or openai_es (for genotypes too large for a covariance)",
        check=_one_of(*EVOLUTION_STRATEGIES),
    )
    es_vectors: int | None = option(
        None, "LM-MA-ES's direction vectors (lm_ma_es; default: the per-emitter batch)"
    )
    es_learning_rate: float | None = option(
        None, "OpenAI-ES's Adam learning rate (openai_es; default pyribs' 0.001)"
    )
    gradient_lr: float = option(1.0, "CMA-MEGA's gradient-ascent step (cma_mega)", check=positive)
    operator_sigma: float | None = option(
        None, "the gradient-operator emitters' elite perturbation (og_map_elites 0.5, omg_mega 0)"
    )
    gradient_sigma: float | None = option(
        None, "the gradient-operator emitters' gradient step (og_map_elites 0.5, omg_mega 10)"
    )
    restart_rule: str | None = option(
        None,
        "CMA emitters' restart rule: basic, no_improvement or a number of iterations "
        "without a new cell (default: the algorithm's, pyribs' sphere example's)",
    )
    archive_learning_rate: float = option(
        1.0, "CMA-MAE's archive learning rate, in [0, 1] (1 with threshold_min -inf: elitist)"
    )
    threshold_min: float = option(
        float("-inf"), "CMA-MAE's initial cell threshold (-inf: the elitist archive)"
    )

    def check(self) -> None:
        super().check()
        if getattr(self, "cell_free", False) and self.anneals:  # with RepertoireOptions
            raise ValueError(
                f"repertoire {self.repertoire!r} has no cells to anneal: CMA-MAE's "  # type: ignore[attr-defined]
                "archive_learning_rate / threshold_min need --repertoire cvt or grid"
            )
        if not 0.0 <= self.archive_learning_rate <= 1.0:
            raise ValueError(
                f"archive_learning_rate must lie in [0, 1], got {self.archive_learning_rate}"
            )
        if self.threshold_min == float("-inf") and self.archive_learning_rate != 1.0:
            raise ValueError("archive_learning_rate below 1 needs a finite threshold_min")
        if self.sigma0 is not None and not self.sigma0 > 0:
            raise ValueError(f"sigma0 must be positive, got {self.sigma0}")
        for key, value in (
            ("operator_sigma", self.operator_sigma),
            ("gradient_sigma", self.gradient_sigma),
        ):
            if value is not None:
                non_negative(key, value)
        for key, value, owner in (
            ("es_vectors", self.es_vectors, "lm_ma_es"),
            ("es_learning_rate", self.es_learning_rate, "openai_es"),
        ):
            if value is not None and self.es != owner:
                raise ValueError(f"{key} is an option of es {owner!r}; es is {self.es!r}")
            if value is not None and key == "es_vectors":
                positive_int(key, value)
            elif value is not None:
                positive(key, value)
        repertoire = getattr(self, "repertoire", None)  # with RepertoireOptions
        if repertoire in ("discount", "density") and self.emitter not in CMA_EMITTERS:
            raise ValueError(
                f"repertoire {repertoire!r} guides the CMA emitters' rankings: take emitter "
                f"{' or '.join(CMA_EMITTERS)}, not {self.emitter!r}"
            )
        if repertoire == "discount" and not self.anneals:
            raise ValueError(
                "repertoire 'discount' trains its model towards threshold_min: give a finite "
                "threshold_min (the paper's 0) and archive_learning_rate (its 0.1)"
            )
        if repertoire in ("low_spread", "extract") and self.anneals:
            raise ValueError(
                f"repertoire {repertoire!r} keeps the elites themselves: archive_learning_rate "
                "/ threshold_min (CMA-MAE's) do not apply"
            )
        if repertoire == "density" and self.anneals:
            raise ValueError(
                "repertoire 'density' keeps no thresholds: archive_learning_rate / "
                "threshold_min are CMA-MAE's and Discount Model Search's"
            )
        if self.emitter == "dds" and repertoire != "density":
            raise ValueError(
                "emitter 'dds' ranks by the density estimate of --repertoire density, not of "
                f"{repertoire!r}"
            )
        if self.es != "cma_es" and self.emitter not in CMA_EMITTERS:
            raise ValueError(
                f"es {self.es!r} is a choice of the {', '.join(CMA_EMITTERS)} emitters, not of "
                f"{self.emitter!r}"
            )
        if self.restart_rule is not None:
            if self.emitter not in CMA_EMITTERS:
                raise ValueError(
                    f"restart_rule is an option of the {', '.join(CMA_EMITTERS)} emitters, not "
                    f"of {self.emitter!r}"
                )
            restart_rule_value(self.restart_rule)

    @property
    def anneals(self) -> bool:
        """Whether the archive is CMA-MAE's (a finite `threshold_min`)."""
        return self.threshold_min != float("-inf")


CMA_EMITTERS = ("cma_me", "cma_mae", "dds")
"""The emitters that rank by what a discount or density archive reports."""


def search_spaces(config: AgentOptions, agent: Any) -> dict[str, Any]:
    """The agent's PBT spaces less those `config.fixed_hparams` names (each must be one of
    them: a name the agent does not explore is an error listing what it explores)."""
    spaces = dict(agent.hparam_spaces)
    for name in (n.strip() for n in config.fixed_hparams.split(",")):
        if not name:
            continue
        if name not in spaces:
            raise ValueError(
                f"fixed_hparams: agent {config.agent!r} does not explore {name!r}; it explores "
                f"{', '.join(sorted(spaces))}"
            )
        del spaces[name]
    if not spaces:
        raise ValueError("fixed_hparams leaves PBT nothing to explore")
    return spaces


@dataclasses.dataclass(frozen=True)
class NoiseOptions(JobConfig):
    """QD under noise in a job: `samples` scorings per candidate, of which the `estimator`
    estimate is kept (MAP-Elites-sampling, `Sampled`; the `evaluations` column counts every
    scoring), and `reevaluations`: at each logged row, every elite scored that many times again
    and the corrected figures logged beside the stored ones (`reevaluated`, median estimates:
    `corrected_qd_score`, `corrected_coverage`, `corrected_max_fitness`,
    `fitness_reproducibility`, `descriptor_reproducibility`)."""

    samples: int = option(
        1,
        "scorings per candidate, their --estimator estimate kept (MAP-Elites-sampling)",
        check=positive_int,
    )
    estimator: str = option(
        "mean",
        "what a candidate's samples come to: mean, median, mode or closest",
        check=_one_of(*ESTIMATORS),
    )
    reevaluations: int = option(
        0,
        "at each logged row, score every elite this many times again and log the corrected "
        "QD-score, coverage, max fitness and reproducibility (0: not)",
        check=non_negative_int,
    )

    def check(self) -> None:
        super().check()
        if getattr(self, "repertoire", None) == "low_spread" and self.samples == 1:
            raise ValueError(
                "repertoire 'low_spread' judges a candidate by the spread of its samples: give "
                "samples above 1 (ME-LS's 5, say)"
            )
        if getattr(self, "repertoire", None) == "extract" and getattr(self, "devices", 1) > 1:
            raise ValueError(
                "repertoire 'extract' (Extract-ME) runs on one device: each device would "
                "extract the same elites"
            )
        if self.samples == 1 and self.estimator != "mean":
            raise ValueError(
                f"estimator {self.estimator!r} chooses among a candidate's samples: give "
                "samples above 1"
            )
