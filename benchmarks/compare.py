"""eqx_qd beside its peers, back to back, in one command: one table of throughputs and ratios.

MAP-Elites: our benchmark (`benchmarks/map_elites.py`) and the peers' scripts of
``../shared/bench`` (pyribs 0.12 float32, QDax 0.5.0) on the anchor workload (rastrigin-100,
isoline 0.005 / 0.05, batch 1024, 200 iterations in one compiled loop) for several archives,
and the first call of the CVT k-means (ours against QDax's sklearn). RL: our `sac.py`,
`pga_me.py` and `me_pbt.py` against QDax's `bench_pbt_sac.py`, `bench_pgame.py` and
`bench_mepbt.py` on the same sizes, and `ppo.py` (jaxagents' network layout and update: the
same work) against jaxagents' `bench_ippo.py` on cart-pole and the twin cart-pole. Each peer
runs in its own virtualenv as ``../shared/bench/README.md`` installs it. Rounds alternate who
goes first, so drift on a shared machine hits every side alike; each cell is the median over
rounds. Run it with nothing else on the machine: a 2-core CPU measures what runs beside it.

The peers' scripts are copied into a temporary folder and run from there (``../shared`` is
read-only; QDax's writes its centroids beside itself). QDax's MAP-Elites script gets one
change, made in the copy: it loads the same centroids as the others when a
``centroids_cvt<N>_2d.npy`` sits beside it, as our GPU session's copy did, instead of computing
its own k-means (except in the ``kmeans`` workload, which times that k-means).

Usage: python benchmarks/compare.py [--rounds 3] [--only cvt1024,grid,sac,ippo]
       [--qdax-python /tmp/qdax_venv/bin/python] [--ribs-python /tmp/ribs_venv/bin/python]
       [--jaxagents-python /tmp/jaxagents_venv/bin/python] [--platform cpu|cuda|default]
       [--peers pyribs,QDax,jaxagents|none] [--jsonl runs.jsonl] [--tables-from a.jsonl ...]
       [--background-load [N]]

``--platform`` (default cpu) is where JAX runs, for every side. ``--peers`` runs only the peers
named (a row whose peer is left out gets ours alone): on a GPU machine where only pyribs
installs, ``--platform default --peers pyribs``. ``--jsonl`` appends every run's result as it
ends, so a run cut short keeps what it measured; ``--tables-from a.jsonl [b.jsonl ...]`` prints
the tables of such files and runs nothing. ``EQX_QD_SHARED_BENCH`` names a copy of
``../shared/bench`` where that folder is not beside the checkout. ``--background-load`` runs
every side beside N busy processes at nice 19 (bare: 1), started before each run and killed
after it: how a default fares on a shared node, beside low-priority jobs.

Workloads: cvt1024, grid, cvt4096, cvt10000 (MAP-Elites); kmeans; sac, sac_one (ours as one
program, ``train_population(groups=1)``), sacbf16 (ours with bfloat16 hidden products), sacx2,
sacbf16x2 (both sides on 2 host devices, one core each; QDax's script patched in the copy to
``jax.pmap`` its train function), sac_job (ours split as the PBT job splits a population by
default, one host device per core; QDax as it ships), sac_v2 (QDax's SAC script on brax v2
spring, the physics ours runs: its copy imports ``qdax.tasks.brax.v2``
instead of ``v1``), pgame,
dcrl_me (QDax: our ``peers/qdax_dcrl_me.py``, no peer script covers it; QDax on brax v1 as
the pgame row),
dcrl_me_v2 (QDax on brax v2 spring, the physics ours runs), mees (QDax: our
``peers/qdax_mees.py``, on brax v2 spring), qdpg (QDax: our ``peers/qdax_qdpg.py``, on brax
v2 spring), aurora (QDax: our ``peers/qdax_aurora.py``, on brax v2 spring), mepbt (QDax); ppo, ippo
(jaxagents); cma_me, cma_mae, cma_mega (pyribs' sphere protocol, ``cma.py``), cma_me_qdax,
sep_cma_mae, lm_ma_mae, openai_es_mae (CMA-MAE with pyribs' scalable strategies),
og_map_elites, omg_mega (pyribs' gradient-operator emitter), dms, dds (its Discount Model
Search and Density Descent Search); sampling, mels (MAP-Elites-sampling and ME-LS on QDax's
noisy arm, ``uncertain.py --speed [--mels]``);
dns, dns_add, dns_add10k (QDax's repository DNS: ``$EQX_QD_QDAX_HEAD``, see ``dns.py``),
dns_ribs (pyribs' ``DNSArchive``); mome (QDax's MOME example, ``mome.py --speed``); kheperax
(Kheperax's standard maze in QDax's virtualenv, ``kheperax_maze.py --speed``).
The default runs the MAP-Elites rows and k-means; ``--only all`` runs everything
(about 120 minutes for 3 rounds on a 2-core CPU). Prints the machine (``lscpu``'s model name,
family and model number, and its vector flags among avx2, avx512f, avx512_bf16 and amx_bf16),
the date, then Markdown tables; each RL run's figure goes to stderr as it ends.
"""

import argparse
import contextlib
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import typing


HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get(  # the peers' scripts and centroids (a copy, where ../shared is not)
    "EQX_QD_SHARED_BENCH", os.path.normpath(os.path.join(HERE, "..", "..", "shared", "bench"))
)

# MAP-Elites: name -> (row title, centroids file or None for the grid, cells)
WORKLOADS = {
    "cvt1024": ("CVT 1,024 (QDax's centroids)", "qdax/centroids_cvt1024_2d.npy", 1024),
    "grid": ("grid 32x32", None, 1024),
    "cvt4096": ("CVT 4,096 (pyribs' centroids)", "pyribs/centroids_cvt4096_2d.npy", 4096),
    "cvt10000": ("CVT 10,000 (pyribs' centroids)", "pyribs/centroids_cvt10000_2d.npy", 10000),
}

_QDAX_PATCH_AT = (
    "    else:\n        key, subkey = jax.random.split(key)\n"
    "        centroids = compute_cvt_centroids("
)
_QDAX_PATCH = (
    '    elif os.path.exists(os.path.join(HERE, f"centroids_cvt{a.centroids}_2d.npy")) and not '
    'os.environ.get("EQX_QD_COMPARE_KMEANS"):\n'
    "        key, subkey = jax.random.split(key)  # compare.py: the others' centroids, loaded\n"
    '        path = os.path.join(HERE, f"centroids_cvt{a.centroids}_2d.npy")\n'
    "        centroids = jnp.asarray(np.load(path))\n"
    '        cname = f"cvt{a.centroids}"\n'
)

# QDax's SAC script, split over host devices the way QDax's own multi-device examples do it:
# ``jax.pmap`` of its population-vmapped train function over a leading device axis (inert
# unless ``EQX_QD_COMPARE_DEVICES`` > 1). The timed call includes moving the states (the replay
# buffers, ~100 MB) onto the devices and back: tens of milliseconds in a call of ~40 s.
_SAC_SPLIT_AT = "import jax\n"
_SAC_SPLIT = """import os  # compare.py: EQX_QD_COMPARE_DEVICES host devices, agents split
_DEVICES = int(os.environ.get("EQX_QD_COMPARE_DEVICES", "1"))
if _DEVICES > 1:
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={_DEVICES}"
    )
"""
_SAC_SPLIT_FN = """

def _over_devices(fn, d):
    \"\"\"fn (vmapped over agents) run by jax.pmap on d devices, d-fold fewer agents each.\"\"\"
    import types
    split = lambda t: jax.tree_util.tree_map(lambda x: x.reshape((d, -1) + x.shape[1:]), t)
    join = lambda t: jax.tree_util.tree_map(lambda x: jnp.reshape(x, (-1,) + x.shape[2:]), t)
    assert jax.device_count() == d, f"asked for {d} host devices, JAX has {jax.device_count()}"
    pf = jax.pmap(fn)

    def lower(*args):
        compiled = pf.lower(*split(args)).compile()
        return types.SimpleNamespace(compile=lambda: lambda *a: join(compiled(*split(a))))

    return types.SimpleNamespace(lower=lower)


def main():"""
_SAC_SPLIT_MAIN = "\n\ndef main():"  # _SAC_SPLIT_FN goes in its place, ending with it
_SAC_SPLIT_JIT = "    train_fn = jax.jit(train_fn)\n"
_SAC_SPLIT_PMAP = (
    "    train_fn = jax.jit(train_fn) if _DEVICES == 1 else _over_devices(train_fn, _DEVICES)\n"
)


# QDax's SAC script on brax v2's spring pipeline (the physics ours runs) instead of the legacy
# brax v1 engine it ships with: QDax's v2 task module has the same ``create`` (brax v2's
# auto-reset also restarts each sub-environment from its own random first state).
_SAC_V1 = "import qdax.tasks.brax.v1 as environments\n"
_SAC_V2 = "import qdax.tasks.brax.v2 as environments  # compare.py: brax v2 spring\n"


def _patch_sac_v2(text: str) -> str | None:
    """QDax's SAC script on brax v2 spring, or None where it no longer imports its v1 tasks."""
    return text.replace(_SAC_V1, _SAC_V2, 1) if _SAC_V1 in text else None


def _patch_sac(text: str) -> str | None:
    """QDax's SAC script with the device split added, or None where the script no longer has
    the lines the change goes into."""
    if any(line not in text for line in (_SAC_SPLIT_AT, _SAC_SPLIT_MAIN, _SAC_SPLIT_JIT)):
        return None
    text = text.replace(_SAC_SPLIT_AT, _SAC_SPLIT + _SAC_SPLIT_AT, 1)
    text = text.replace(_SAC_SPLIT_MAIN, _SAC_SPLIT_FN, 1)
    return text.replace(_SAC_SPLIT_JIT, _SAC_SPLIT_PMAP, 1)


_VECTOR_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
"""The vector extensions whose presence changes which code paths win (`benchmarks/README.md`)."""


def _machine() -> str:
    """``lscpu``'s model name, CPU family and model number, and which of `_VECTOR_FLAGS` the
    CPU has, so that every figure says which kind of machine it came from."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    fields = {}
    for line in out.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields.setdefault(name.strip(), value.strip())
    model = fields.get("Model name", "unknown CPU")
    kind = ", ".join(
        f"{label} {fields[name]}"
        for name, label in (("CPU family", "family"), ("Model", "model"))
        if name in fields
    )
    flags = set(fields.get("Flags", "").split())
    vector = " ".join(f for f in _VECTOR_FLAGS if f in flags) or "none of " + "/".join(
        _VECTOR_FLAGS
    )
    return f"{model} ({kind}; {vector}), {os.cpu_count()} logical CPUs"


def _accelerator() -> str:
    """The GPU's name as ``nvidia-smi`` gives it (empty where there is none)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""
    return f" ({out.splitlines()[0]})" if out else ""


def _peer_copies(folder: str) -> dict[str, str]:
    """The peers' scripts copied into ``folder`` (QDax's MAP-Elites patched there), with the
    centroids. The k-means workload gets a copy of its own: QDax's script saves the centroids
    it computes beside itself, which must not replace the shared ones the others load."""
    scripts = {}
    ribs = os.path.join(folder, "pyribs")
    qdax = os.path.join(folder, "qdax")
    kmeans = os.path.join(folder, "qdax_kmeans")
    for d in (ribs, qdax, kmeans):
        os.makedirs(d)
    shutil.copy(os.path.join(SHARED, "pyribs", "bench_ribs.py"), ribs)
    for name in os.listdir(os.path.join(SHARED, "pyribs")):
        if name.endswith(".npy"):
            shutil.copy(os.path.join(SHARED, "pyribs", name), qdax)  # QDax loads them too
    with open(os.path.join(SHARED, "qdax", "bench_me.py")) as f:
        text = f.read()
    if _QDAX_PATCH_AT in text:
        text = text.replace(_QDAX_PATCH_AT, _QDAX_PATCH + _QDAX_PATCH_AT, 1)
    if "import jax.numpy as jnp" not in text:
        text = text.replace("import jax\n", "import jax\nimport jax.numpy as jnp\n", 1)
    for d in (qdax, kmeans):
        with open(os.path.join(d, "bench_me.py"), "w") as f:
            f.write(text)
    shutil.copy(os.path.join(SHARED, "qdax", "centroids_cvt1024_2d.npy"), qdax)
    for name in ("bench_pbt_sac.py", "bench_pgame.py", "bench_mepbt.py"):
        shutil.copy(os.path.join(SHARED, "qdax", name), qdax)
        scripts[name] = os.path.join(qdax, name)
    with open(scripts["bench_pbt_sac.py"]) as f:
        original = f.read()
    patched = {"bench_pbt_sac_split.py": _patch_sac(original),
               "bench_pbt_sac_v2.py": _patch_sac_v2(original)}  # fmt: skip
    for name, text in patched.items():
        if text is not None:  # else main refuses the rows that need it
            scripts[name] = os.path.join(qdax, name)
            with open(scripts[name], "w") as f:
                f.write(text)
    scripts["pyribs"] = os.path.join(ribs, "bench_ribs.py")
    scripts["qdax"] = os.path.join(qdax, "bench_me.py")
    scripts["qdax_kmeans"] = os.path.join(kmeans, "bench_me.py")
    scripts["jaxagents"] = os.path.join(SHARED, "jaxagents", "bench_ippo.py")  # writes nothing
    return scripts


_BUSY = "while True:\n    pass\n"


@contextlib.contextmanager
def _background_load(processes: int, niceness: int = 19):
    """``processes`` busy Python loops at ``niceness`` for the length of the block: the
    low-priority jobs (test runs, data loaders) beside which researchers run on shared nodes."""
    started = []
    try:
        for _ in range(processes):
            proc = subprocess.Popen(
                [sys.executable, "-c", _BUSY],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            started.append(proc)
            # From here, not in the child (``preexec_fn``): a fork under JAX's threads warns.
            os.setpriority(os.PRIO_PROCESS, proc.pid, niceness)
        yield
    finally:
        for proc in started:
            proc.kill()
        for proc in started:
            proc.wait()


def _run(
    cmd: list[str],
    timeout: int,
    env: dict[str, str] | None = None,
    platform: str = "cpu",
    background: int = 0,
) -> dict | None:
    """The script's result: its last ``JSON {...}`` line, or a last line that is JSON. JAX runs
    on `platform` (``JAX_PLATFORMS``; ``default``: JAX's own choice, a GPU where there is one),
    beside ``background`` busy processes at the lowest priority (`_background_load`)."""
    base = dict(os.environ)
    if platform == "default":
        base.pop("JAX_PLATFORMS", None)
    else:
        base["JAX_PLATFORMS"] = platform
    env = {**base, **(env or {})}
    try:
        with _background_load(background):
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        print(f"  timed out: {' '.join(cmd[:3])} ...", file=sys.stderr)
        return None
    lines = done.stdout.strip().splitlines()
    for line in reversed(lines):
        if line.startswith("JSON "):
            return json.loads(line[5:])
    if done.returncode == 0 and lines and lines[-1].startswith("{"):
        return json.loads(lines[-1])
    print(f"  no result from {' '.join(cmd[:3])} ...: {done.stderr[-800:]}", file=sys.stderr)
    return None


def _rate(res: dict) -> float:
    """Evaluations per second, as the median over timed runs where a script timed several (QDax's
    prints its best run; ours prints the median)."""
    times = res.get("run_times_s")
    if times:
        return res["batch_size"] * res["iters"] / statistics.median(times)
    return float(res["evals_per_s"])


def _max_fitness(res: dict) -> float:
    return float(res.get("max_fitness", res.get("final_max_fitness", float("nan"))))


def _map_elites_commands(name: str, args, scripts) -> dict[str, tuple[list[str], dict]]:
    _, centroids, cells = WORKLOADS[name]
    ours = [sys.executable, os.path.join(HERE, "map_elites.py"), "--repeats", "3"]
    ribs = [args.ribs_python, scripts["pyribs"], "--dtype", "float32"]
    qdax = [args.qdax_python, scripts["qdax"], "--repeats", "3"]
    if centroids is None:  # the 32x32 grid
        ours += ["--grid", "--cells", str(cells)]
        ribs += ["--grid"]
        qdax += ["--grid", "--centroids", str(cells)]
    else:
        path = os.path.join(SHARED, centroids)
        ours += ["--centroids", path, "--cells", str(cells)]
        ribs += ["--centroids", path]
        qdax += ["--centroids", str(cells)]
    return {"eqx_qd": (ours, {}), "pyribs f32": (ribs, {}), "QDax 0.5.0": (qdax, {})}


class _Versus(typing.NamedTuple):
    """One workload against one peer: how to run each side and what to read from each."""

    title: str
    measure: str  # what the number is
    higher_is_better: bool
    peer: str
    ours: typing.Callable[[typing.Any, dict], list[str]]
    theirs: typing.Callable[[typing.Any, dict], list[str]]
    read_ours: typing.Callable[[dict], float]
    read_theirs: typing.Callable[[dict], float]
    compile_ours: typing.Callable[[dict], float]
    compile_theirs: typing.Callable[[dict], float]
    peer_env: dict = {}
    ours_env: dict = {}


_PPO_STEPS = 10 * 128 * 64  # jaxagents' bench_ippo.py: 10 updates of 64 envs x 128 steps


def _as_median(rate: float, times: list[float]) -> float:
    """A rate a QDax script took over the mean of its steady ``times``, over their median."""
    return rate * statistics.mean(times) / statistics.median(times)


def _jaxagents_median(res: dict) -> float:
    return _PPO_STEPS / statistics.median(res["train"]["steady_call_all_s"])


def _ppo(task: str, agent: str, title: str) -> _Versus:
    return _Versus(
        title, "env steps/s", True, "jaxagents 0.2.5",
        lambda a, s: [sys.executable, os.path.join(HERE, "ppo.py"), "--tasks", task, "--layout",
                      "joint", "--convention", "jaxagents", "--repeats", "5"],
        lambda a, s: [a.jaxagents_python, s["jaxagents"], "--agent", agent, "--n-steps", "10",
                      "--reps", "5", "--raw-iters", "1280"],
        lambda r: r[task]["train_env_steps_per_s"], _jaxagents_median,
        lambda r: r[task]["train_compile_s"], lambda r: r["train"]["compile_s_est"],
    )  # fmt: skip


_SPLIT_FLAGS = {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}  # one core per device


def _sac(
    title: str,
    dtype: str,
    devices: int | str = 1,
    script: str = "bench_pbt_sac.py",
    groups: int | None = None,
) -> _Versus:
    """A SAC row: our ``sac.py`` with its hidden products in ``dtype`` against QDax's
    ``bench_pbt_sac.py`` (float32). With ``devices`` > 1 both sides split the 8 agents over that
    many host devices (ours: shard_map; QDax: its train function under ``jax.pmap``, the patched
    copy), Eigen's threads off on both so that each device has one core. With ``"auto"`` ours
    splits them as the PBT job does by default (one host device per core) and QDax runs its
    script as it ships, on one device. ``script`` names QDax's (``bench_pbt_sac_v2.py``: its
    copy on brax v2 spring). ``groups`` passes ours ``--groups`` (``train_population``'s groups
    on one device; its default: one per core that divides the population)."""
    ours = [os.path.join(HERE, "sac.py"), "--matmul-dtype", dtype]
    if groups is not None:
        ours += ["--groups", str(groups)]
    ours_env, peer_env = {}, {}
    if devices == "auto":
        ours += ["--devices", "auto"]
    elif devices > 1:
        ours += ["--devices", str(devices)]
        script, ours_env = "bench_pbt_sac_split.py", _SPLIT_FLAGS
        peer_env = {**_SPLIT_FLAGS, "EQX_QD_COMPARE_DEVICES": str(devices)}
    return _Versus(
        title, "SAC grad steps/s", True, "QDax 0.5.0",
        lambda a, s: [sys.executable, *ours], lambda a, s: [a.qdax_python, s[script]],
        lambda r: r["grad_steps_per_s"],
        lambda r: _as_median(r["grad_steps_per_s_total_over_pop"], r["train_call_times_s"][1:]),
        lambda r: r["train_compile_s"], lambda r: r["train_compile_time_s"],
        peer_env, ours_env,
    )  # fmt: skip


_SPLIT_TITLE = "SAC population as above, split over 2 host devices (ours {}, QDax float32)"


def _cma(algorithm: str, title: str, peer: str = "pyribs 0.12", es: str = "cma_es") -> _Versus:
    """A CMA-family row: ``cma.py`` on pyribs' sphere protocol (100-D, 100 x 100 grid, 15 x 36),
    500 iterations, ours against pyribs' (or QDax's CMA-ME), with the strategy ``es``; seconds,
    compile apart for ours (and numba's for pyribs' strategies)."""
    ours = [os.path.join(HERE, "cma.py"), algorithm, "--iterations", "500", "--es", es]
    python = (lambda a: a.ribs_python) if peer.startswith("pyribs") else (lambda a: a.qdax_python)
    flag = "ribs" if peer.startswith("pyribs") else "qdax"
    return _Versus(
        title, "s / 500 iterations", False, peer,
        lambda a, s: [sys.executable, *ours], lambda a, s: [python(a), *ours, "--peer", flag],
        lambda r: r["seconds"], lambda r: r["seconds"],
        lambda r: r["compile_s"], lambda r: r.get("compile_s", float("nan")),
    )  # fmt: skip


def _dns(workload: str, title: str, peer: str, capacity: int = 1024) -> _Versus:
    """A DNS row: ``dns.py`` ours against pyribs' ``DNSArchive`` or QDax's repository DNS
    (its ``qdax`` package from a ``git archive`` in ``$EQX_QD_QDAX_HEAD``, default
    ``/tmp/qdax_head``, on the QDax 0.5 virtualenv's interpreter); seconds."""
    ours = [os.path.join(HERE, "dns.py"), workload, "--capacity", str(capacity)]
    ribs = peer.startswith("pyribs")
    python = (lambda a: a.ribs_python) if ribs else (lambda a: a.qdax_python)
    env = {} if ribs else {"PYTHONPATH": os.environ.get("EQX_QD_QDAX_HEAD", "/tmp/qdax_head")}
    return _Versus(
        title, "s", False, peer,
        lambda a, s: [sys.executable, *ours],
        lambda a, s: [python(a), *ours, "--peer", "ribs" if ribs else "qdax"],
        lambda r: r["seconds"], lambda r: r["seconds"],
        lambda r: r.get("compile_s", float("nan")), lambda r: r.get("compile_s", float("nan")),
        env,
    )  # fmt: skip


def _sampling(title: str, *more: str) -> _Versus:
    """The MAP-Elites-sampling row: ``uncertain.py --speed`` (noisy arm, 100 joints, 128
    candidates x 8 samples, QDax's CVT of 1,024 cells, 200 iterations), ours against QDax
    0.5's ``sampling`` scoring in its ``MAPElites``; seconds, compile apart on both sides."""
    ours = [os.path.join(HERE, "uncertain.py"), "--speed", *more]
    return _Versus(
        title, "s / 200 iterations", False, "QDax 0.5.0",
        lambda a, s: [sys.executable, *ours], lambda a, s: [a.qdax_python, *ours, "--peer", "qdax"],
        lambda r: r["seconds"], lambda r: r["seconds"],
        lambda r: r["compile_s"], lambda r: r["compile_s"],
    )  # fmt: skip


_DNS_LOOP = "DNS loop, rastrigin-100, population 1,024, k 3, 128 iso-line offspring, 200 its"
_DNS_ADD = "DNS add: 128 candidates into a full population of {:,}, 2-D descriptors"

VERSUS = {
    "kmeans": _Versus(
        "CVT k-means, 1,024 cells from 50,000 samples, first call (compile included)",
        "s", False, "QDax 0.5.0 (sklearn)",
        lambda a, s: [sys.executable, os.path.join(HERE, "map_elites.py"), "--cells", "1024",
                      "--iters", "2", "--repeats", "1"],
        lambda a, s: [a.qdax_python, s["qdax_kmeans"], "--centroids", "1024", "--iters", "2",
                      "--repeats", "1"],
        lambda r: r["centroids_s"], lambda r: r["centroid_time_s"],
        lambda r: float("nan"), lambda r: float("nan"),
        {"EQX_QD_COMPARE_KMEANS": "1"},
    ),
    "sac": _sac("SAC population, hopper, 8 agents x 16 envs, (256, 256), batch 256", "float32"),
    "sac_one": _sac(
        "SAC population as above, ours in one program (`train_population(groups=1)`; its "
        "default trains one group per core side by side)",
        "float32",
        groups=1,
    ),
    "sacbf16": _sac(
        "SAC population as above, our hidden products in bfloat16 (QDax: float32)", "bfloat16"
    ),
    "sacx2": _sac(_SPLIT_TITLE.format("float32"), "float32", devices=2),
    "sac_job": _sac(
        "SAC population as above, ours over one host device per core as `eqx-qd run pbt` "
        "splits it (QDax: one device, its script as it ships)",
        "float32",
        devices="auto",
    ),
    "sacbf16x2": _sac(_SPLIT_TITLE.format("bfloat16"), "bfloat16", devices=2),
    "sac_v2": _sac(
        "SAC population as above, QDax on brax v2 spring (the physics ours runs; QDax's script "
        "ships on the legacy brax v1 engine)",
        "float32",
        script="bench_pbt_sac_v2.py",
    ),
    "pgame": _Versus(
        "PGA-ME, walker2d_uni, 64 offspring, 300 critic + 100 PG steps per iteration",
        "s/iter", False, "QDax 0.5.0",
        lambda a, s: [sys.executable, os.path.join(HERE, "pga_me.py")],
        lambda a, s: [a.qdax_python, s["bench_pgame.py"]],
        lambda r: r["s_per_iter"], lambda r: r["s_per_iter"],
        lambda r: r["compile_s"], lambda r: r["compile_time_s"],
    ),
    "dcrl_me": _Versus(
        "DCRL-ME, walker2d_uni, 64 = 32 GA + 16 PG + 16 injected, 300 critic + 100 PG steps",
        "s/iter", False, "QDax 0.5.0",
        lambda a, s: [sys.executable, os.path.join(HERE, "dcrl_me.py")],
        lambda a, s: [a.qdax_python, os.path.join(HERE, "peers", "qdax_dcrl_me.py")],
        lambda r: r["s_per_iter"], lambda r: r["s_per_iter"],
        lambda r: r["compile_s"], lambda r: r["compile_time_s"],
    ),
    "dcrl_me_v2": _Versus(
        "DCRL-ME as above, QDax on brax v2 spring (the physics ours runs)",
        "s/iter", False, "QDax 0.5.0",
        lambda a, s: [sys.executable, os.path.join(HERE, "dcrl_me.py")],
        lambda a, s: [a.qdax_python, os.path.join(HERE, "peers", "qdax_dcrl_me.py"),
                      "--brax", "v2"],
        lambda r: r["s_per_iter"], lambda r: r["s_per_iter"],
        lambda r: r["compile_s"], lambda r: r["compile_time_s"],
    ),
    "mees": _Versus(
        "MAP-Elites-ES, walker2d_uni (brax v2 spring on both sides), 200 ES samples, 30 "
        "generations",
        "s/iter", False, "QDax 0.5.0",
        lambda a, s: [sys.executable, os.path.join(HERE, "mees.py")],
        lambda a, s: [a.qdax_python, os.path.join(HERE, "peers", "qdax_mees.py")],
        lambda r: r["s_per_iter"], lambda r: r["s_per_iter"],
        lambda r: r["compile_s"], lambda r: r["compile_time_s"],
    ),
    "qdpg": _Versus(
        "QDPG, walker2d_uni (brax v2 spring on both sides), 12 quality + 11 diversity PG + 11 "
        "GA, 300 critic + 50 PG steps per learner, 5 iterations",
        "s/iter", False, "QDax 0.5.0",
        lambda a, s: [sys.executable, os.path.join(HERE, "qdpg.py"), "--iters", "5"],
        lambda a, s: [a.qdax_python, os.path.join(HERE, "peers", "qdax_qdpg.py"), "--iters",
                      "5"],
        lambda r: r["s_per_iter"], lambda r: r["s_per_iter"],
        lambda r: r["compile_s"], lambda r: r["compile_time_s"],
    ),
    "aurora": _Versus(
        "AURORA, walker2d_uni (brax v2 spring on both sides), batches of 100, 100-step "
        "episodes, 512-slot archive, 6 loops of 5 (trainings at loops 2 and 6 included)",
        "s/iter", False, "QDax 0.5.0",
        lambda a, s: [sys.executable, os.path.join(HERE, "aurora.py"), "--loops", "6",
                      "--target", "512"],
        lambda a, s: [a.qdax_python, os.path.join(HERE, "peers", "qdax_aurora.py"), "--loops",
                      "6", "--target", "512"],
        lambda r: r["s_per_iter"], lambda r: r["s_per_iter"],
        lambda r: r["first_loop_s"], lambda r: r["first_loop_s"],
    ),
    "mepbt": _Versus(
        "ME-PBT, point maze, 10 PBT-TD3 + 10 GA, (64, 64), 400 steps per agent",
        "TD3 grad steps/s", True, "QDax 0.5.0",
        lambda a, s: [sys.executable, os.path.join(HERE, "me_pbt.py"), "--loops", "4"],
        lambda a, s: [a.qdax_python, s["bench_mepbt.py"], "--hidden", "64", "64",
                      "--train-steps", "400"],
        lambda r: r["td3_grad_steps_per_s"],
        lambda r: _as_median(r["td3_grad_steps_per_s_total"], r["iter_times_s"][1:]),
        lambda r: r["iter_times_s"][0], lambda r: r["first_iter_s_incl_compile"],
    ),
    "cma_me": _cma("cma_me", "CMA-ME, 100-D projected sphere, 100 x 100, 15 x 36"),
    "cma_mae": _cma("cma_mae", "CMA-MAE (lr 0.01), as above"),
    "cma_mega": _cma("cma_mega", "CMA-MEGA (gradient ascent), as above"),
    "cma_me_qdax": _cma("cma_me", "CMA-ME as above, QDax's improvement emitters", "QDax 0.5.0"),
    "sep_cma_mae": _cma("cma_mae", "CMA-MAE with sep-CMA-ES, as above", es="sep_cma_es"),
    "lm_ma_mae": _cma("cma_mae", "CMA-MAE with LM-MA-ES, as above", es="lm_ma_es"),
    "openai_es_mae": _cma("cma_mae", "CMA-MAE with OpenAI-ES, as above", es="openai_es"),
    "og_map_elites": _cma("og_map_elites", "OG-MAP-Elites, as above, 270 points + 270 steps"),
    "omg_mega": _cma("omg_mega", "OMG-MEGA, as above, 270 points + 270 steps"),
    "dms": _cma("dms", "Discount Model Search, as above (pyribs with PyTorch)"),
    "dds": _cma("dds", "Density Descent Search, as above (KDE of 10,000 descriptors)"),
    "sampling": _sampling("MAP-Elites-sampling, noisy arm (100 joints), 128 x 8, CVT 1,024"),
    "mels": _sampling("ME-LS, as above", "--mels"),
    "mome": _Versus(
        "MOME, QDax's example: bi-objective rastrigin-100, CVT 64, fronts of 50, batch 100",
        "ms / iteration", False, "QDax 0.5.0",
        lambda a, s: [sys.executable, os.path.join(HERE, "mome.py"), "--speed"],
        lambda a, s: [a.qdax_python, os.path.join(HERE, "mome.py"), "--speed", "--peer", "qdax"],
        lambda r: r["ms_per_iteration"], lambda r: r["ms_per_iteration"],
        lambda r: r["compile_s"], lambda r: r["compile_s"],
    ),
    "kheperax": _Versus(
        "Kheperax standard maze, 1,000 random policies x 1,000 steps",
        "s / batch", False, "QDax 0.5.0 + Kheperax 0.2.0",
        lambda a, s: [sys.executable, os.path.join(HERE, "kheperax_maze.py"), "--speed"],
        lambda a, s: [a.qdax_python, os.path.join(HERE, "kheperax_maze.py"), "--speed",
                      "--peer", "kheperax"],
        lambda r: r["s_per_batch"], lambda r: r["s_per_batch"],
        lambda r: float("nan"), lambda r: float("nan"),
    ),
    "dns": _dns("loop", _DNS_LOOP, "QDax repository"),
    "dns_ribs": _dns("loop", _DNS_LOOP, "pyribs 0.12"),
    "dns_add": _dns("insert", _DNS_ADD.format(1024), "QDax repository"),
    "dns_add10k": _dns("insert", _DNS_ADD.format(10_000), "QDax repository", 10_000),
    "ppo": _ppo("cartpole", "ppo", "PPO, cart-pole, 64 envs x 128 steps, (64, 64)"),
    "ippo": _ppo("twin_cartpole", "ippo2", "IPPO, twin cart-pole, jaxagents' joint network"),
}  # fmt: skip
DEFAULT = [*WORKLOADS, "kmeans"]


def _versus_commands(name: str, args, scripts) -> dict[str, tuple[list[str], dict]]:
    v = VERSUS[name]
    return {
        "eqx_qd": (v.ours(args, scripts), v.ours_env),
        v.peer: (v.theirs(args, scripts), v.peer_env),
    }


def _print_map_elites(chosen: list[str], results: dict) -> None:
    print("| MAP-Elites, rastrigin-100, batch 1024 | eqx_qd evals/s | pyribs f32 | QDax 0.5.0 "
          "| eqx_qd / best peer | max fitness (ours / pyribs / QDax) |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- |")
    for w in chosen:
        runs = results[w]
        rate = {who: statistics.median(_rate(x) for x in rs) for who, rs in runs.items()}
        best = {who: statistics.median(_max_fitness(x) for x in rs) for who, rs in runs.items()}
        peers = [rate[k] for k in ("pyribs f32", "QDax 0.5.0") if k in rate]
        ratio = f"{rate['eqx_qd'] / max(peers):.2f}x" if "eqx_qd" in rate and peers else "n/a"
        cells = [f"{rate[k]:,.0f}" if k in rate else "failed" for k in
                 ("eqx_qd", "pyribs f32", "QDax 0.5.0")]  # fmt: skip
        fits = " / ".join(f"{best[k]:.1f}" if k in best else "-" for k in
                          ("eqx_qd", "pyribs f32", "QDax 0.5.0"))  # fmt: skip
        print(f"| {WORKLOADS[w][0]} | " + " | ".join(cells) + f" | **{ratio}** | {fits} |")


def _num(x: float) -> str:
    if x != x:  # NaN
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _print_run(w: str, who: str, res: dict) -> None:
    """One run's headline figure on stderr (the spread between rounds is worth seeing)."""
    if w not in VERSUS:
        return
    v = VERSUS[w]
    try:
        value = float((v.read_ours if who == "eqx_qd" else v.read_theirs)(res))
    except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError):
        return
    print(f"  {who}: {_num(value)} {v.measure}", file=sys.stderr, flush=True)


def _print_versus(chosen: list[str], results: dict) -> None:
    print("| workload | measure | eqx_qd | peer | peer's | speed, ours / peer's | compile s "
          "(ours / peer's) |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for w in chosen:
        v, runs = VERSUS[w], results[w]

        def med(who, read):
            values = []
            for r in runs.get(who, []):
                try:
                    values.append(float(read(r)))
                except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError):
                    pass
            return statistics.median(values) if values else float("nan")

        ours, theirs = med("eqx_qd", v.read_ours), med(v.peer, v.read_theirs)
        speed = ours / theirs if v.higher_is_better else theirs / ours
        compile_ = f"{_num(med('eqx_qd', v.compile_ours))} / {_num(med(v.peer, v.compile_theirs))}"
        ratio = "n/a" if speed != speed else f"**{speed:.2f}x**"
        print(f"| {v.title} | {v.measure} | {_num(ours)} | {v.peer} | {_num(theirs)} | {ratio} "
              f"| {compile_} |")  # fmt: skip


def _print_tables(chosen: list[str], results: dict) -> None:
    map_elites = [w for w in chosen if w in WORKLOADS]
    versus = [w for w in chosen if w in VERSUS]
    if map_elites:
        print()
        _print_map_elites(map_elites, results)
    if versus:
        print()
        _print_versus(versus, results)


def _tables_from(paths: list[str]) -> None:
    """The tables of runs saved by ``--jsonl`` (workloads in the order they first ran)."""
    results: dict[str, dict[str, list[dict]]] = {}
    rows = []
    for path in paths:
        with open(path) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    for row in rows:
        results.setdefault(row["workload"], {}).setdefault(row["who"], [])
        results[row["workload"]][row["who"]].append(row["result"])
    loads = sorted({row.get("background_load", 0) for row in rows})
    beside = "" if loads == [0] else f", beside {'/'.join(map(str, loads))} busy process(es)"
    if len(loads) > 1:
        beside += " (such runs pooled)"
    print(f"runs of {', '.join(paths)}: medians over the runs of each side{beside}")
    _print_tables([w for w in results if w in WORKLOADS or w in VERSUS], results)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", default=",".join(DEFAULT), help="workloads, comma-separated, or all")
    p.add_argument("--qdax-python", default="/tmp/qdax_venv/bin/python")
    p.add_argument("--ribs-python", default="/tmp/ribs_venv/bin/python")
    p.add_argument("--jaxagents-python", default="/tmp/jaxagents_venv/bin/python")
    p.add_argument("--timeout", type=int, default=900, help="seconds per script run")
    p.add_argument("--platform", default="cpu", help="JAX_PLATFORMS for every run, or default")
    p.add_argument("--peers", default="pyribs,QDax,jaxagents", help="peers to run, or none")
    p.add_argument("--jsonl", help="append each run's result to this file as it ends")
    p.add_argument(
        "--background-load", type=int, nargs="?", const=1, default=0, metavar="N",
        help="N busy processes at nice 19 beside every run, ours and the peers' (bare: 1)",
    )  # fmt: skip
    p.add_argument("--tables-from", nargs="+", help="print the tables of --jsonl files only")
    args = p.parse_args()
    if args.background_load < 0:
        p.error(f"--background-load must be 0 or more busy processes, got {args.background_load}")
    if args.tables_from:
        _tables_from(args.tables_from)
        return
    pythons = {"pyribs": args.ribs_python, "QDax": args.qdax_python,
               "jaxagents": args.jaxagents_python}  # fmt: skip
    wanted = set() if args.peers == "none" else {x.strip() for x in args.peers.split(",") if x}
    if wanted - set(pythons):
        p.error(f"unknown peers {sorted(wanted - set(pythons))}; known: {sorted(pythons)}")
    known = [*WORKLOADS, *VERSUS]
    chosen = known if args.only == "all" else [w.strip() for w in args.only.split(",") if w]
    unknown = [w for w in chosen if w not in known]
    if unknown:
        p.error(f"unknown workloads {unknown}; known: {known} (or all)")
    peers = {VERSUS[w].peer.split()[0] for w in chosen if w in VERSUS}  # "QDax", "jaxagents"
    if any(w in WORKLOADS for w in chosen):
        peers |= {"pyribs", "QDax"}
    needs = {who: pythons[who] for who in peers & wanted}  # the chosen workloads' peers only
    for who, python in needs.items():
        if not os.path.exists(python):
            p.error(
                f"no {who} virtualenv at {python} (install it as ../shared/bench/README.md says)"
            )

    started = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    results: dict[str, dict[str, list[dict]]] = {w: {} for w in chosen}
    with tempfile.TemporaryDirectory(prefix="eqx_qd_compare_") as folder:
        scripts = _peer_copies(folder)
        versus = [w for w in chosen if w in VERSUS]
        split = [w for w in versus if "EQX_QD_COMPARE_DEVICES" in VERSUS[w].peer_env]
        if split and "bench_pbt_sac_split.py" not in scripts:
            p.error(
                f"{split}: QDax's bench_pbt_sac.py no longer has the lines compare.py changes to "
                "split it over devices"
            )
        if "sac_v2" in versus and "bench_pbt_sac_v2.py" not in scripts:
            p.error("sac_v2: QDax's bench_pbt_sac.py no longer imports qdax.tasks.brax.v1")
        for r in range(args.rounds):
            for w in chosen:
                make = _map_elites_commands if w in WORKLOADS else _versus_commands
                commands = [
                    (who, c) for who, c in make(w, args, scripts).items()
                    if who == "eqx_qd" or who.split()[0] in wanted
                ]  # fmt: skip
                if r % 2:  # alternate who goes first
                    commands.reverse()
                for who, (cmd, env) in commands:
                    print(f"round {r + 1}/{args.rounds}: {w} {who}", file=sys.stderr, flush=True)
                    res = _run(cmd, args.timeout, env, args.platform, args.background_load)
                    if res is not None:
                        results[w].setdefault(who, []).append(res)
                        _print_run(w, who, res)
                        if args.jsonl:
                            with open(args.jsonl, "a") as f:
                                row = {"round": r + 1, "workload": w, "who": who, "result": res,
                                       "background_load": args.background_load}  # fmt: skip
                                f.write(json.dumps(row) + "\n")

    where = "" if args.platform == "cpu" else f", JAX_PLATFORMS={args.platform}{_accelerator()}"
    if args.background_load:
        where += f", beside {args.background_load} busy process(es) at nice 19"
    print(f"{started}, {_machine()}{where}; medians of {args.rounds} rounds, back to back")
    _print_tables(chosen, results)


if __name__ == "__main__":
    main()
