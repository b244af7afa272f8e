"""eqx_qd beside its peers, back to back, in one command: one table of throughputs and ratios.

Runs our MAP-Elites benchmark (`benchmarks/map_elites.py`) and the peers' scripts of
``../shared/bench`` (pyribs 0.12 float32, QDax 0.5.0), each in its own virtualenv as
``../shared/bench/README.md`` installs them, on the anchor workload (rastrigin-100, isoline
0.005 / 0.05, batch 1024, 200 iterations in one compiled loop) for several archives. Rounds
alternate who goes first, so drift on a shared machine hits every side alike; each cell of the
table is the median over rounds, and the ratio is ours over the faster peer. Run it with
nothing else on the machine: a 2-core CPU measures what runs beside it.

The peers' scripts are copied into a temporary folder and run from there (``../shared`` is
read-only; QDax's writes its centroids beside itself). QDax's gets one change, made in the copy:
it loads the same centroids as the others when a ``centroids_cvt<N>_2d.npy`` sits beside it,
as our GPU session's copy did, instead of computing its own k-means.

Usage: python benchmarks/compare.py [--rounds 3] [--only cvt1024,grid]
       [--qdax-python /tmp/qdax_venv/bin/python] [--ribs-python /tmp/ribs_venv/bin/python]

Prints the machine (``lscpu``'s model name), the date, then a Markdown table.
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile


HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "bench"))

# name -> (our arguments, pyribs arguments, QDax arguments, centroids file or None)
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
    '    elif os.path.exists(os.path.join(HERE, f"centroids_cvt{a.centroids}_2d.npy")):\n'
    "        key, subkey = jax.random.split(key)  # compare.py: the others' centroids, loaded\n"
    '        path = os.path.join(HERE, f"centroids_cvt{a.centroids}_2d.npy")\n'
    "        centroids = jnp.asarray(np.load(path))\n"
    '        cname = f"cvt{a.centroids}"\n'
)


def _machine() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30).stdout
        model = next(
            line.split(":", 1)[1].strip()
            for line in out.splitlines()
            if line.startswith("Model name")
        )
    except (OSError, StopIteration, subprocess.SubprocessError):
        model = "unknown CPU"
    return f"{model}, {os.cpu_count()} logical CPUs"


def _peer_copies(folder: str) -> dict[str, str]:
    """The peers' scripts copied into ``folder`` (QDax's patched there), with the centroids."""
    scripts = {}
    ribs = os.path.join(folder, "pyribs")
    qdax = os.path.join(folder, "qdax")
    os.makedirs(ribs)
    os.makedirs(qdax)
    shutil.copy(os.path.join(SHARED, "pyribs", "bench_ribs.py"), ribs)
    for name in os.listdir(os.path.join(SHARED, "pyribs")):
        if name.endswith(".npy"):
            shutil.copy(os.path.join(SHARED, "pyribs", name), qdax)  # QDax loads them too
    text = open(os.path.join(SHARED, "qdax", "bench_me.py")).read()
    if _QDAX_PATCH_AT in text:
        text = text.replace(_QDAX_PATCH_AT, _QDAX_PATCH + _QDAX_PATCH_AT, 1)
    if "import jax.numpy as jnp" not in text:
        text = text.replace("import jax\n", "import jax\nimport jax.numpy as jnp\n", 1)
    with open(os.path.join(qdax, "bench_me.py"), "w") as f:
        f.write(text)
    shutil.copy(os.path.join(SHARED, "qdax", "centroids_cvt1024_2d.npy"), qdax)
    scripts["pyribs"] = os.path.join(ribs, "bench_ribs.py")
    scripts["qdax"] = os.path.join(qdax, "bench_me.py")
    return scripts


def _run(cmd: list[str], timeout: int) -> dict | None:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        print(f"  timed out: {' '.join(cmd[:3])} ...", file=sys.stderr)
        return None
    for line in done.stdout.splitlines():
        if line.startswith("JSON "):
            return json.loads(line[5:])
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


def _commands(name: str, args, scripts) -> dict[str, list[str]]:
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
    return {"eqx_qd": ours, "pyribs f32": ribs, "QDax 0.5.0": qdax}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", default=",".join(WORKLOADS), help="workloads, comma-separated")
    p.add_argument("--qdax-python", default="/tmp/qdax_venv/bin/python")
    p.add_argument("--ribs-python", default="/tmp/ribs_venv/bin/python")
    p.add_argument("--timeout", type=int, default=600, help="seconds per script run")
    args = p.parse_args()
    chosen = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = [w for w in chosen if w not in WORKLOADS]
    if unknown:
        p.error(f"unknown workloads {unknown}; known: {list(WORKLOADS)}")
    for who, python in (("QDax", args.qdax_python), ("pyribs", args.ribs_python)):
        if not os.path.exists(python):
            p.error(
                f"no {who} virtualenv at {python} (install it as ../shared/bench/README.md says)"
            )

    started = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    results: dict[str, dict[str, list[dict]]] = {w: {} for w in chosen}
    with tempfile.TemporaryDirectory(prefix="eqx_qd_compare_") as folder:
        scripts = _peer_copies(folder)
        for r in range(args.rounds):
            for w in chosen:
                commands = list(_commands(w, args, scripts).items())
                if r % 2:  # alternate who goes first
                    commands.reverse()
                for who, cmd in commands:
                    print(f"round {r + 1}/{args.rounds}: {w} {who}", file=sys.stderr, flush=True)
                    res = _run(cmd, args.timeout)
                    if res is not None:
                        results[w].setdefault(who, []).append(res)

    print(f"{started}, {_machine()}; medians of {args.rounds} rounds, back to back")
    print()
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


if __name__ == "__main__":
    main()
