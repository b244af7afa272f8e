"""Registries by name: environments, pure-JAX tasks, agents and emitters, for the jobs.

A job config names what it runs (`env = "walker2d_uni"`, `agent = "td3"`); the registry
turns the name into a module. Register your own factory and every job that takes that kind of
thing accepts its name:

```python
from eqx_qd import jobs

@jobs.ENVIRONMENTS.register("my_maze", help="my 2-D maze")
def _(*, episode_length: int = 100, reset_noise: bool = False, obs_noise: float = 0.0):
    return MyMaze(length=episode_length)
```

Factories take keyword options only; a job passes the options it has, and an option the
factory does not take is an error that names it.
"""

import dataclasses
import inspect
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

import jax

from .._benchmark_tasks import (
    ArchimedeanSpiral,
    Checkered,
    DeceptiveEvolvability,
    EmptyCircle,
    Islands,
    SelfSimilar,
    SPIRAL_DESCRIPTORS,
    SPIRAL_GENES,
    Square,
)
from .._emitters.base import AbstractEmitter
from .._emitters.evolution_strategy import EvolutionStrategyEmitter
from .._emitters.gradient_arborescence import GradientArborescenceEmitter
from .._emitters.gradient_operator import GradientOperatorEmitter
from .._emitters.mixing import MixingEmitter
from .._tasks import AbstractTask, Arm, Noisy, ProjectedSphere, Rastrigin, Sphere
from .._variation import GaussianMutation, IsoLineVariation
from ..envs._base import AbstractEnv
from ..envs._brax import BraxQDEnv, QD_BRAX_TASKS
from ..envs._brax_multi_agent import BraxMultiAgentEnv, MA_BRAX_TASKS
from ..envs._kheperax import KHEPERAX_MAPS, KheperaxMaze
from ..envs._line_targets import LineTargets
from ..envs._multi_agent import AbstractMultiAgentEnv, TimeLimit
from ..envs._playground import PLAYGROUND_QD_TASKS, PlaygroundQDEnv
from ..envs._point_maze import PointMaze
from ..rl._base import AbstractAgent
from ..rl._off_policy import AbstractOffPolicyAgent
from ..rl._ppo import PPO
from ..rl._sac import SAC
from ..rl._td3 import TD3
from .checks import Choices


_F = TypeVar("_F", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True)
class Entry:
    """One registered factory: its name, the factory, a help line and tags (`"qd"`,
    `"multi_agent"`) that jobs use to say which entries they accept."""

    name: str
    factory: Callable[..., Any]
    help: str
    tags: frozenset[str]

    def options(self) -> list[str]:
        params = inspect.signature(self.factory).parameters.values()
        return [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]

    def takes_any_option(self) -> bool:
        """Whether the factory takes `**options` (every option is passed to it)."""
        params = inspect.signature(self.factory).parameters.values()
        return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


class Registry(Generic[_F]):
    """Factories by name, for one kind of thing (`what`: "environment", "agent", ...)."""

    def __init__(self, what: str):
        self.what = what
        self._entries: dict[str, Entry] = {}

    def register(
        self, name: str, factory: _F | None = None, *, help: str = "", tags: tuple[str, ...] = ()
    ) -> Any:
        """Register `factory` under `name` (or use as a decorator), with a `help` line
        and `tags` (which jobs accept it). Re-registering a name replaces the previous
        factory."""

        def add(f: _F) -> _F:
            self._entries[name] = Entry(name, f, help, frozenset(tags))
            return f

        return add if factory is None else add(factory)

    def names(self, tag: str | None = None) -> list[str]:
        """Registered names, in registration order (only those tagged `tag`, if given)."""
        return [n for n, e in self._entries.items() if tag is None or tag in e.tags]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries.values())

    def get(self, name: str, tag: str | None = None) -> Entry:
        """The entry named `name` (among those tagged `tag`, if given); an unknown name is
        an error listing the known ones."""
        known = self.names(tag)
        if name not in known:
            kind = f"{tag.replace('_', '-')} {self.what}" if tag else self.what
            hint = ""
            if name not in self._entries:  # not a tag mismatch: maybe a plugin's name
                hint = (
                    f"; a plugin's {self.what}? import the module that registers it "
                    "(eqx-qd --plugin MODULE ...)"
                )
            raise ValueError(f"unknown {kind} {name!r}; known: {', '.join(known)}{hint}")
        return self._entries[name]

    def check(self, tag: str | None = None) -> Choices:
        """A config-field check: the value must be a registered name (tagged `tag`); `--help`
        lists the names."""

        def check(key: str, value: Any) -> None:
            try:
                self.get(value, tag)
            except ValueError as e:
                raise ValueError(f"{key}: {e}") from None

        return Choices(check, lambda: self.names(tag))

    def make(self, name: str, *args: Any, tag: str | None = None, **options: Any) -> Any:
        """Build the thing named `name` (among those tagged `tag`) with `args` and
        `options` (keyword options of its factory)."""
        entry = self.get(name, tag)
        extra = sorted(set(options) - set(entry.options()))
        if extra and not entry.takes_any_option():
            raise ValueError(
                f"{self.what} {name!r} takes no option {', '.join(extra)}; its options: "
                f"{', '.join(entry.options()) or 'none'}"
            )
        return entry.factory(*args, **options)


ENVIRONMENTS: Registry[Callable[..., AbstractEnv | AbstractMultiAgentEnv]] = Registry("environment")
"""Environments. Tags: `qd` (an `AbstractQDEnv`: PGA-ME, PBT, ME-PBT, and IPPO as one agent)
and `multi_agent` (an `AbstractMultiAgentEnv`: IPPO)."""

TASKS: Registry[Callable[..., AbstractTask]] = Registry("task")
"""Pure-JAX QD tasks (scoring functions with bounds and offsets): the MAP-Elites job."""

AGENTS: Registry[Callable[..., AbstractAgent]] = Registry("agent")
"""Agents for PBT and ME-PBT: `factory(env, *, options...) -> AbstractAgent`. A job passes
the options of its config the factory takes (from `hidden`, `minibatch_size`,
`num_envs`, `buffer_size`, `grad_updates_per_step`, `rollout_length`,
`target_entropy_scale`, `critic_target_every_step`, `same_start`; `**options` takes them
all); setting one the chosen agent does not
take is an error naming it."""

EMITTERS: Registry[Callable[..., AbstractEmitter]] = Registry("emitter")
"""Emitters for the MAP-Elites job: `factory(*, batch_size, ...)`."""


def make_env(name: str, **options: Any) -> AbstractEnv | AbstractMultiAgentEnv:
    """The environment registered as `name`, built with `options`."""
    return ENVIRONMENTS.make(name, **options)


def make_task(name: str, **options: Any) -> AbstractTask:
    """The pure-JAX task registered as `name`, built with `options`."""
    return TASKS.make(name, **options)


def make_agent(name: str, env: Any, **options: Any) -> AbstractAgent:
    """The agent registered as `name`, sized for `env`, built with `options`."""
    return AGENTS.make(name, env, **options)


def make_emitter(name: str, **options: Any) -> AbstractEmitter:
    """The emitter registered as `name`, built with `options`."""
    return EMITTERS.make(name, **options)


# -------------------------------------------------------------------------------- built-ins


def _point_maze(walls: bool) -> Callable[..., PointMaze]:
    def make(
        *, episode_length: int = 100, reset_noise: bool = False, obs_noise: float = 0.0
    ) -> PointMaze:
        # With reset noise the start is drawn within 0.05 of its usual place.
        return PointMaze(
            walls=walls,
            length=episode_length,
            reset_noise=0.05 if reset_noise else 0.0,
            obs_noise=obs_noise,
        )

    return make


ENVIRONMENTS.register(
    "point_maze",
    _point_maze(True),
    help="pure-JAX deceptive point maze (final-position descriptor)",
    tags=("qd",),
)
ENVIRONMENTS.register(
    "point_maze_open",
    _point_maze(False),
    help="the point maze without walls (an easy task)",
    tags=("qd",),
)


def _kheperax(maze: str, task: str, quad: bool) -> Callable[..., KheperaxMaze]:
    def make(
        *, episode_length: int = 1000, reset_noise: bool = False, obs_noise: float = 0.0
    ) -> KheperaxMaze:
        # With reset noise the start is drawn within 0.01 of Kheperax's; obs noise is its
        # lasers' sensor noise.
        return KheperaxMaze(
            maze=maze,
            task=task,
            quad=quad,
            length=episode_length,
            reset_noise=0.01 if reset_noise else 0.0,
            laser_noise=obs_noise,
        )

    return make


_KHEPERAX_TASKS = {
    "plain": "minus the squared wheel speeds",
    "target": "reward minus the distance to the target",
    "final_distance": "the final distance to the target",
}
for _quad in (False, True):
    for _maze in KHEPERAX_MAPS:
        for _task, _what in _KHEPERAX_TASKS.items():
            _env_name = "_".join(
                ["kheperax", *(["quad"] if _quad else []), _maze]
                + ([] if _task == "plain" else [_task])
            )
            ENVIRONMENTS.register(
                _env_name,
                _kheperax(_maze, _task, _quad),
                help=f"Kheperax's {'quad ' if _quad else ''}{_maze} maze, {_what}",
                tags=("qd",),
            )


def _brax_qd(name: str) -> Callable[..., BraxQDEnv]:
    def make(
        *, episode_length: int = 1000, reset_noise: bool = False, obs_noise: float = 0.0
    ) -> BraxQDEnv:
        return BraxQDEnv(
            name, episode_length=episode_length, reset_noise=reset_noise, obs_noise=obs_noise
        )

    return make


for _name, _spec in QD_BRAX_TASKS.items():
    _what = "final (x, y)" if _spec.omni else "feet contacts"
    _walls = " (deceptive: walls)" if _spec.walls else ""
    ENVIRONMENTS.register(
        _name,
        _brax_qd(_name),
        help=f"brax {_spec.robot}, {_what} descriptor{_walls}",
        tags=("qd",),
    )


def _playground_qd(name: str) -> Callable[..., PlaygroundQDEnv]:
    def make(
        *,
        episode_length: int = 1000,
        reset_noise: bool = False,
        obs_noise: float = 0.0,
        impl: str = "auto",
    ) -> PlaygroundQDEnv:
        return PlaygroundQDEnv(
            name,
            episode_length=episode_length,
            reset_noise=reset_noise,
            obs_noise=obs_noise,
            impl=impl,
        )

    return make


for _name, _pg in PLAYGROUND_QD_TASKS.items():
    _what = "feet contacts" if _pg.feet else "final (x, y)"
    ENVIRONMENTS.register(
        _name,
        _playground_qd(_name),
        help=f"MuJoCo Playground {_pg.robot} ({_pg.env}'s reward), {_what} descriptor; "
        "extra: playground",
        tags=("qd",),
    )


def _line_targets(
    *, episode_length: int = 40, num_agents: int = 4, size: int = 16
) -> AbstractMultiAgentEnv:
    return TimeLimit(LineTargets(n=num_agents, size=size), episode_length)


ENVIRONMENTS.register(
    "line_targets",
    _line_targets,
    help="pure-JAX discrete cooperative task on a line",
    tags=("multi_agent",),
)


def _brax_ma(name: str) -> Callable[..., BraxMultiAgentEnv]:
    def make(*, episode_length: int = 1000) -> BraxMultiAgentEnv:
        return BraxMultiAgentEnv(name, episode_length=episode_length)

    return make


for _name, _split in MA_BRAX_TASKS.items():
    ENVIRONMENTS.register(
        _name,
        _brax_ma(_name),
        help=f"brax {_split.robot}, {len(_split.groups)} agents",
        tags=("multi_agent",),
    )


for _name, _cls, _dim in (
    ("rastrigin", Rastrigin, 100),
    ("sphere", Sphere, 100),
    ("arm", Arm, 8),
    ("projected_sphere", ProjectedSphere, 100),
):

    def _task(*, genotype_dim: int = _dim, _cls: type[AbstractTask] = _cls) -> AbstractTask:
        return _cls(genotype_dim=genotype_dim)  # type: ignore[call-arg]

    TASKS.register(_name, _task, help=(_cls.__doc__ or "").split("\n")[0])


def _noisy_arm(*, genotype_dim: int = 8) -> AbstractTask:
    return Noisy(Arm(genotype_dim), fitness_noise=0.1, descriptor_noise=0.1, genotype_noise=0.05)


TASKS.register(
    "noisy_arm",
    _noisy_arm,
    help="the arm with QDax's noisy_arm noise: fitness and descriptor sd 0.1, genes sd 0.05",
)

for _k in (10, 20, 50):

    def _projected(*, genotype_dim: int = 100, _k: int = _k) -> AbstractTask:
        return ProjectedSphere(genotype_dim=genotype_dim, descriptor_dim=_k)

    TASKS.register(
        f"projected_sphere_{_k}d",
        _projected,
        help=f"the projected sphere with {_k} descriptors (Discount Model Search's {_k}-D LP)",
    )


for _name, _cls, _help in (
    ("square", Square, "fitness 1 - prod(x), descriptors sin(5x)"),
    ("checkered", Checkered, "fitness prod(sin(50x)), descriptors sin(5x)"),
    ("empty_circle", EmptyCircle, "fitness a ring around the centre, descriptors sin(40x)"),
    ("islands", Islands, "fitness prod(x), descriptors the genes rounded to tenths"),
):

    def _hypervolume(*, genotype_dim: int = 2, _cls: type[AbstractTask] = _cls) -> AbstractTask:
        return _cls(genotype_dim=genotype_dim)  # type: ignore[call-arg]

    TASKS.register(_name, _hypervolume, help=f"Mouret's hypervolume function {_name}: {_help}")


def _continuous_islands(*, genotype_dim: int = 2) -> AbstractTask:
    return Islands(genotype_dim=genotype_dim, continuous=True)


TASKS.register(
    "continuous_islands",
    _continuous_islands,
    help="Mouret's islands with continuous descriptors x - sin(20 pi x) / (20 pi)",
)


def _fixed_size(name: str, size: int, genotype_dim: int) -> None:
    if genotype_dim != size:
        raise ValueError(
            f"task {name!r} has {size} gene{'s' if size > 1 else ''} per genotype; "
            f"genotype_dim {genotype_dim} asks for another size"
        )


for _genes in SPIRAL_GENES:
    for _descriptor in SPIRAL_DESCRIPTORS:
        _spiral_name = f"archimedean_spiral_{_genes}_{_descriptor}"

        def _spiral(
            *, genotype_dim: int = 1, _g: str = _genes, _d: str = _descriptor, _n=_spiral_name
        ) -> AbstractTask:
            _fixed_size(_n, 1, genotype_dim)
            return ArchimedeanSpiral(genes=_g, descriptor=_d)

        TASKS.register(
            _spiral_name,
            _spiral,
            help=f"the QD-suite's Archimedean spiral, the {_genes.replace('_', ' ')} as gene, "
            f"{_descriptor} descriptor (fitness 1)",
        )


def _ssf(*, genotype_dim: int = 1) -> AbstractTask:
    return SelfSimilar(genotype_dim=genotype_dim)


TASKS.register(
    "ssf",
    _ssf,
    help="the QD-suite's self-similar function: the norm, frozen on ever longer plateaus",
)


def _deceptive(*, genotype_dim: int = 2) -> AbstractTask:
    _fixed_size("deceptive_evolvability", 2, genotype_dim)
    return DeceptiveEvolvability()


TASKS.register(
    "deceptive_evolvability",
    _deceptive,
    help="the QD-suite's deceptive evolvability: a 2-gene mixture of two Gaussian hills",
)


def _off_policy(cls: type[AbstractOffPolicyAgent], **fixed: Any) -> Callable[..., AbstractAgent]:
    def make(
        env: Any,
        *,
        hidden: tuple[int, ...] = (256, 256),
        minibatch_size: int = 256,
        num_envs: int = 16,
        buffer_size: int = 100_000,
        grad_updates_per_step: float = 1.0,
        same_start: bool = False,
        matmul_dtype: str = "float32",
    ) -> AbstractAgent:
        return cls(
            observation_size=env.observation_size,
            action_size=env.action_size,
            policy_hidden=hidden,
            critic_hidden=hidden,
            minibatch_size=minibatch_size,
            num_envs=num_envs,
            buffer_size=buffer_size,
            grad_updates_per_step=grad_updates_per_step,
            same_start=same_start,
            matmul_dtype=matmul_dtype,
            **fixed,
        )

    return make


def _sac(
    env: Any,
    *,
    hidden: tuple[int, ...] = (256, 256),
    minibatch_size: int = 256,
    num_envs: int = 16,
    buffer_size: int = 100_000,
    grad_updates_per_step: float = 1.0,
    target_entropy_scale: float = 1.0,
    same_start: bool = False,
    matmul_dtype: str = "float32",
) -> AbstractAgent:
    make = _off_policy(SAC, target_entropy_scale=target_entropy_scale)
    return make(
        env,
        hidden=hidden,
        minibatch_size=minibatch_size,
        num_envs=num_envs,
        buffer_size=buffer_size,
        grad_updates_per_step=grad_updates_per_step,
        same_start=same_start,
        matmul_dtype=matmul_dtype,
    )


def _ppo(
    env: Any,
    *,
    hidden: tuple[int, ...] = (64, 64),
    minibatch_size: int = 256,
    num_envs: int = 16,
    rollout_length: int = 64,
) -> AbstractAgent:
    samples = rollout_length * num_envs
    if minibatch_size < 1 or samples % minibatch_size:
        raise ValueError(
            f"ppo: rollout_length x num_envs = {samples} samples per update do not split into "
            f"minibatches of minibatch_size={minibatch_size}"
        )
    return PPO(
        observation_size=env.observation_size,
        action_size=env.action_size,
        rollout_length=rollout_length,
        num_envs=num_envs,
        num_minibatches=samples // minibatch_size,
        actor_hidden=hidden,
        critic_hidden=hidden,
    )


def _td3(
    env: Any,
    *,
    hidden: tuple[int, ...] = (256, 256),
    minibatch_size: int = 256,
    num_envs: int = 16,
    buffer_size: int = 100_000,
    grad_updates_per_step: float = 1.0,
    critic_target_every_step: bool = False,
    same_start: bool = False,
    matmul_dtype: str = "float32",
) -> AbstractAgent:
    make = _off_policy(TD3, critic_target_every_step=critic_target_every_step)
    return make(
        env,
        hidden=hidden,
        minibatch_size=minibatch_size,
        num_envs=num_envs,
        buffer_size=buffer_size,
        grad_updates_per_step=grad_updates_per_step,
        same_start=same_start,
        matmul_dtype=matmul_dtype,
    )


AGENTS.register("td3", _td3, help="TD3 (twin critics, delayed policy updates; off-policy)")
AGENTS.register("sac", _sac, help="SAC (entropy-regularised, automatic temperature; off-policy)")
AGENTS.register(
    "ppo", _ppo, help="PPO (clipped surrogate, GAE, KL early stop; a rollout per iteration)"
)


def _iso_line(*, batch_size: int, iso_sigma: float = 0.005, line_sigma: float = 0.05):
    return MixingEmitter(
        batch_size=batch_size,
        variation_percentage=1.0,
        variation=IsoLineVariation(iso_sigma=iso_sigma, line_sigma=line_sigma),
    )


def _gaussian(*, batch_size: int, sigma: float = 0.05):
    return MixingEmitter(
        batch_size=batch_size, variation_percentage=0.0, mutation=GaussianMutation(sigma=sigma)
    )


EMITTERS.register(
    "iso_line", _iso_line, help="GA with iso+line-DD variation (iso_sigma, line_sigma)"
)
EMITTERS.register("gaussian", _gaussian, help="GA with gaussian mutation (sigma)")


def _per_emitter(batch_size: int, num_emitters: int, name: str) -> int:
    if batch_size % num_emitters:
        raise ValueError(
            f"emitter {name}: batch_size ({batch_size}) must be a multiple of num_emitters "
            f"({num_emitters})"
        )
    return batch_size // num_emitters


def restart_rule_value(text: str) -> str | int:
    """`--restart-rule` as the emitter takes it: `basic`, `no_improvement`, or a positive
    number of iterations."""
    if text in ("basic", "no_improvement"):
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(
            f"restart_rule must be basic, no_improvement or a positive integer, got {text!r}"
        )
    return value


# pyribs' sphere example's rules for each algorithm (ranker, selection, restart).
CMA_RULES = {
    "cma_me": ("2imp", "filter", "no_improvement"),
    "cma_mae": ("imp", "mu", "basic"),
    "cma_mega": ("2imp", "mu", "no_improvement"),
    "cma_maega": ("imp", "filter", "basic"),
    "dds": ("density", "mu", "basic"),
}


def _cma(name: str, default_sigma0: float = 0.5) -> Callable[..., AbstractEmitter]:
    ranker, selection, restart = CMA_RULES[name]

    def make(
        *,
        batch_size: int,
        task: AbstractTask,
        sigma0: float = default_sigma0,
        num_emitters: int = 15,
        es: str = "cma_es",
        es_vectors: int | None = None,
        es_learning_rate: float | None = None,
        restart_rule: str | None = None,
    ) -> AbstractEmitter:
        per = _per_emitter(batch_size, num_emitters, name)
        x0 = task.init_genotypes(1, key=jax.random.key(0))[0]
        options: dict[str, Any] = {}
        if es_vectors is not None:
            options["n_vectors"] = es_vectors
        if es_learning_rate is not None:
            options["learning_rate"] = es_learning_rate
        return EvolutionStrategyEmitter(
            x0,
            sigma0,
            num_emitters=num_emitters,
            emitter_batch_size=per,
            ranker=ranker,
            selection_rule=selection,
            restart_rule=restart if restart_rule is None else restart_rule_value(restart_rule),
            es=es,
            es_options=options,
        )

    return make


def _cma_gradient(name: str) -> Callable[..., AbstractEmitter]:
    ranker, selection, restart = CMA_RULES[name]

    def make(
        *,
        batch_size: int,
        task: AbstractTask,
        sigma0: float = 10.0,
        num_emitters: int = 15,
        gradient_lr: float = 1.0,
    ) -> AbstractEmitter:
        per = _per_emitter(batch_size, num_emitters, name)
        x0 = task.init_genotypes(1, key=jax.random.key(0))[0]
        return GradientArborescenceEmitter(
            task,
            x0,
            sigma0,
            gradient_lr,
            num_descriptors=task.num_descriptors,
            num_emitters=num_emitters,
            branches=per - 1,
            ranker=ranker,
            selection_rule=selection,
            restart_rule=restart,
            optimizer="gradient_ascent",
        )

    return make


# pyribs' sphere example's settings for the gradient-operator emitters (sigma, sigma_g,
# measure_gradients, normalize_grad).
GRADIENT_OPERATOR_RULES = {
    "og_map_elites": (0.5, 0.5, False, False),
    "omg_mega": (0.0, 10.0, True, True),
}


def _gradient_operator(name: str) -> Callable[..., AbstractEmitter]:
    sigma_default, sigma_g_default, measure_gradients, normalize_grad = GRADIENT_OPERATOR_RULES[
        name
    ]

    def make(
        *,
        batch_size: int,
        task: AbstractTask,
        operator_sigma: float | None = None,
        gradient_sigma: float | None = None,
    ) -> AbstractEmitter:
        if batch_size % 2:
            raise ValueError(
                f"emitter {name}: batch_size ({batch_size}) must be even (half points, half "
                "their gradient steps)"
            )
        x0 = task.init_genotypes(1, key=jax.random.key(0))[0]
        return GradientOperatorEmitter(
            task,
            x0,
            sigma=sigma_default if operator_sigma is None else operator_sigma,
            sigma_g=sigma_g_default if gradient_sigma is None else gradient_sigma,
            measure_gradients=measure_gradients,
            normalize_grad=normalize_grad,
            branches=batch_size // 2,
        )

    return make


EMITTERS.register(
    "og_map_elites",
    _gradient_operator("og_map_elites"),
    help="OG-MAP-Elites: elites + N(0, 0.5^2), then a 0.5 step along the fitness gradient",
)
EMITTERS.register(
    "omg_mega",
    _gradient_operator("omg_mega"),
    help="OMG-MEGA: elites stepped by a random mix (sigma_g 10) of normalised fitness and "
    "descriptor gradients",
)
EMITTERS.register(
    "cma_me",
    _cma("cma_me"),
    help="CMA-ME: CMA-ES emitters (es: or sep_cma_es, lm_ma_es, openai_es), 2imp / filter / "
    "no_improvement",
)
EMITTERS.register(
    "cma_mae",
    _cma("cma_mae"),
    help="CMA-MAE's emitters (imp / mu / basic); give archive_learning_rate and threshold_min",
)
EMITTERS.register(
    "dds",
    _cma("dds", default_sigma0=1.5),
    help="Density Descent Search's emitters (density / mu / basic, sigma0 1.5); take "
    "--repertoire density",
)
EMITTERS.register(
    "cma_mega",
    _cma_gradient("cma_mega"),
    help="CMA-MEGA: gradient arborescence by autodiff, 2imp / mu / no_improvement",
)
EMITTERS.register(
    "cma_maega",
    _cma_gradient("cma_maega"),
    help="CMA-MAEGA's emitters (imp / filter / basic); give archive_learning_rate, threshold_min",
)
