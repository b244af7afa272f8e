"""The machine the package computes on (`machine`): JAX's backend, the CPU and its vector
features, read at run time, for the choices whose faster code path depends on the machine
(`matmul_dtype="auto"`; `jobs._choices.machine_choices` says every such pick in a job's log) and
for the record a run folder keeps of where it ran."""

import dataclasses
import functools
import os
import platform
import re
from typing import Any

import jax


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the system tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def most_dividing(population_size: int, limit: int) -> int:
    """The largest count, at most `limit`, that divides `population_size`: the rule of
    `population_devices` (devices; callers that must know it before JAX starts) and of
    `rl.train_population`'s groups."""
    return max(d for d in range(1, min(limit, population_size) + 1) if population_size % d == 0)


def _count_given() -> int | None:
    """The CPU device count already asked for, if one is: by `XLA_FLAGS`
    (`--xla_force_host_platform_device_count`), or by JAX's `jax_num_cpu_devices` (set from
    Python or by `JAX_NUM_CPU_DEVICES`)."""
    flags = os.environ.get("XLA_FLAGS", "")
    found = re.search(r"xla_force_host_platform_device_count=(\d+)", flags)
    if found:
        return int(found.group(1))
    value = jax.config.jax_num_cpu_devices  # type: ignore[attr-defined]
    return value if value > 0 else None


def host_devices_per_core() -> int:
    """Give JAX one CPU device per usable core, the layout `eqx-qd run pbt` takes on a CPU, so
    that a population splits over the cores from Python too: `rl.train_population_sharded`
    over `device_mesh()`, or `jobs.run` of a `PBTConfig` (whose `devices` none takes as many as
    divide the population). Returns the CPU device count JAX will have.

    Call it first, before anything runs on JAX: JAX fixes its devices when its backends start,
    which is why `rl.train_population` cannot choose them itself. A count already asked for
    stands: `XLA_FLAGS`' `--xla_force_host_platform_device_count`, `JAX_NUM_CPU_DEVICES`, or
    `jax.config.update("jax_num_cpu_devices", n)`. Called
    after the backends started with another count, it raises, saying so. On a GPU machine the
    CPU devices are made, and computations stay on the GPU.
    """
    given = _count_given()
    if given is not None:
        return given
    cores = usable_cores()
    try:
        jax.config.update("jax_num_cpu_devices", cores)
    except RuntimeError:  # the backends have started: fine if they already have the count
        have = len(jax.devices("cpu"))
        if have != cores:
            raise RuntimeError(
                f"host_devices_per_core: JAX has started with {have} CPU device(s); call it "
                f"before anything runs on JAX (right after the imports) to get {cores}, one "
                "per core"
            ) from None
    return cores


VECTOR_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "sve", "bf16")
"""The CPU features whose presence changes which code path wins (x86: AVX2, AVX-512,
AVX-512 BF16, AMX-BF16; Arm: SVE, BF16), as `/proc/cpuinfo` names them."""


@dataclasses.dataclass(frozen=True)
class Machine:
    """The machine the package computes on, as far as its per-machine choices need it.

    **Fields:** `backend` (JAX's default backend: `"cpu"`, `"gpu"`, `"tpu"`), `device` (its
    first device's kind), `cpu` (the CPU's model name), `arch` (`platform.machine()`),
    `family` and `model` (the x86 CPU family and model numbers; `None` elsewhere), `flags`
    (which of `VECTOR_FLAGS` the CPU has) and `cores` (the CPU cores this process may use).
    `str(machine)` is one line for a log.
    """

    backend: str
    device: str
    cpu: str
    arch: str
    family: int | None
    model: int | None
    flags: tuple[str, ...]
    cores: int

    @property
    def fast_bfloat16(self) -> bool:
        """Whether products with bfloat16 inputs run faster here than float32 ones: on a CPU
        with AVX-512 BF16 or AMX-BF16 (the SAC population 1.26x float32's speed on AMD EPYC
        family 25 model 17, 1.03-1.05x on family 26 model 2). Not on an AVX2 CPU (the
        products took 0.74x float32's speed) nor on the GPU measured (an H100: 0.95x); not on
        other kinds, which are unmeasured (`benchmarks/log/compare-and-tuning.md`,
        `benchmarks/log/epyc-family26-model2.md`). Read from the CPU's features, not timed: a
        timed pick could differ between two runs on one machine."""
        return self.backend == "cpu" and bool({"avx512_bf16", "amx_bf16"} & set(self.flags))

    def __str__(self) -> str:
        kind = f"{self.arch}"
        if self.family is not None:
            kind += f" family {self.family} model {self.model}"
        flags = " ".join(self.flags) or "none of " + " ".join(VECTOR_FLAGS)
        where = self.backend if self.backend == "cpu" else f"{self.backend} ({self.device})"
        return f"{self.cpu} ({kind}; {flags}; {self.cores} cores), JAX {jax.__version__} on {where}"


def _parse_cpuinfo(text: str) -> dict[str, Any]:
    """The first processor's model name, family, model and `VECTOR_FLAGS` in `/proc/cpuinfo`'s
    text (x86: `model name`, `cpu family`, `model`, `flags`; Arm: `Features`)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields.setdefault(name.strip().lower(), value.strip())

    def number(name: str) -> int | None:
        value = fields.get(name, "")
        return int(value) if value.isdigit() else None

    have = set((fields.get("flags") or fields.get("features") or "").split())
    return {
        "cpu": fields.get("model name") or fields.get("hardware") or "",
        "family": number("cpu family"),
        "model": number("model"),
        "flags": tuple(f for f in VECTOR_FLAGS if f in have),
    }


@functools.cache
def _cpu() -> dict[str, Any]:
    """`_parse_cpuinfo` of this machine's `/proc/cpuinfo` (Linux; elsewhere the model name
    `platform` gives and no flags), read once per process."""
    try:
        with open("/proc/cpuinfo") as f:
            found = _parse_cpuinfo(f.read())
    except OSError:
        found = {"cpu": "", "family": None, "model": None, "flags": ()}
    if not found["cpu"]:
        found["cpu"] = platform.processor() or "unknown CPU"
    return found


def machine() -> Machine:
    """This machine (`Machine`): JAX's default backend and device, the CPU and its vector
    features. Starts JAX's backend if it has not started."""
    return Machine(
        backend=jax.default_backend(),
        device=jax.devices()[0].device_kind,
        arch=platform.machine() or "unknown",
        cores=usable_cores(),
        **_cpu(),
    )


MATMUL_DTYPES = ("float32", "bfloat16", "auto")
"""The `matmul_dtype` values networks accept: the inputs' type of their hidden products, or
`"auto"`: bfloat16 where `Machine.fast_bfloat16`, float32 elsewhere."""


def resolve_matmul_dtype(matmul_dtype: str) -> str:
    """`matmul_dtype` with `"auto"` replaced by what this machine runs faster
    (`Machine.fast_bfloat16`); `"float32"` and `"bfloat16"` are returned as they are."""
    if matmul_dtype != "auto":
        return matmul_dtype
    return "bfloat16" if machine().fast_bfloat16 else "float32"


def memory_bytes() -> int:
    """The memory an array of the default device may take: the accelerator's limit where JAX
    reports one (`memory_stats()["bytes_limit"]`), else the host's physical memory."""
    try:
        stats = jax.devices()[0].memory_stats() or {}
    except Exception:  # a backend without memory statistics
        stats = {}
    if "bytes_limit" in stats:
        return int(stats["bytes_limit"])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
