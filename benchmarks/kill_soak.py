"""Kill soak: ``kill -9`` every job's command at random moments, resume it, and check that no
run is lost.

For each job, a small config runs once uninterrupted (the reference); then the command is
started on a run folder and killed with SIGKILL after a random delay, again and again, each
time with ``--resume`` (a run that finished before its kill is compared and a new one starts;
one killed before it wrote its ``config.toml`` had not begun, and starts again). After the last
kill the run is resumed to its end. A run is lost when a resume fails or its
final outputs (``progress.csv`` and the saved state) differ from the reference's, byte for
byte (but for the logs' wall-clock column). Prints one row per job.

```bash
python benchmarks/kill_soak.py --kills 50                 # every job, 50 kills each
python benchmarks/kill_soak.py --jobs map-elites --kills 5 --max-delay 6
```
"""

import argparse
import csv
import filecmp
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time


SMALL = {
    "map-elites": [
        "--task", "sphere", "--genotype-dim", "3", "--cells", "64", "--cvt-samples", "2000",
        "--batch-size", "64", "--iterations", "20000", "--log-every", "50",
        "--checkpoint-every", "500",
    ],
    "pgame": [
        "--env", "point_maze", "--evaluations", "1984", "--random-init", "64",
        "--init-batch-size", "32", "--batch-size", "32", "--cells", "64",
        "--cvt-samples", "5000", "--snapshot-every", "160", "--checkpoint-every", "160",
        "--critic-steps", "20", "--pg-steps", "5", "--hidden", "16",
        "--critic-hidden", "32,32", "--minibatch-size", "32", "--buffer-size", "10000",
        "--episode-length", "50", "--deterministic",
    ],
    "me-pbt": [
        "--pg-population-size", "4", "--ga-population-size", "2",
        "--num-training-iterations", "2", "--num-envs", "2", "--buffer-size", "200",
        "--hidden", "8", "--minibatch-size", "8", "--fraction-best-to-replace-from", "0.25",
        "--fraction-to-replace-from-best", "0.25", "--fraction-to-replace-from-samples", "0.25",
        "--cells", "16", "--cvt-samples", "1000", "--episode-length", "20",
        "--iterations", "40", "--checkpoint-every", "2",
    ],
    "pbt": [
        "--population-size", "4", "--rounds", "30", "--agent", "td3",
        "--iterations-per-round", "3", "--num-envs", "2", "--hidden", "8",
        "--minibatch-size", "8", "--buffer-size", "200", "--episode-length", "20",
        "--eval-episodes", "2", "--best-fraction", "0.25", "--worse-fraction", "0.25",
    ],
    "ippo": [
        "--num-agents", "2", "--size", "6", "--episode-length", "8", "--rollout-length", "8",
        "--num-envs", "4", "--num-minibatches", "2", "--iterations", "60",
        "--eval-frequency", "2", "--eval-episodes", "4",
    ],
}  # fmt: skip

# What must be byte-equal to the reference at the end of a run.
OUTPUTS = {
    "map-elites": ["progress.csv", "repertoire.eqx"],
    "pgame": ["progress.csv", "actors.csv", "repertoire.eqx"],
    "me-pbt": ["progress.csv", "hparams.csv", "repertoire.eqx"],
    "pbt": ["progress.csv", "hparams.csv", "population.eqx"],
    "ippo": ["progress.csv"],
}


def _command(job: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "eqx_qd.cli", "run", job, *extra, "--no-progress", "--no-plots"]


def _rows_without_wall_clock(path: str) -> list[list[str]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    drop = rows[0].index("wall_s") if rows and "wall_s" in rows[0] else None
    return [[c for j, c in enumerate(r) if j != drop] for r in rows]


def _same(reference: str, folder: str, job: str) -> bool:
    """Byte for byte; CSVs but for their wall-clock column (seconds spent running)."""
    for name in OUTPUTS[job]:
        a, b = os.path.join(reference, name), os.path.join(folder, name)
        if name.endswith(".csv"):
            if _rows_without_wall_clock(a) != _rows_without_wall_clock(b):
                return False
        elif not filecmp.cmp(a, b, shallow=False):
            return False
    return True


def soak(job: str, kills: int, min_delay: float, max_delay: float, root: str, seed: int):
    rng = random.Random(seed)
    env = {**os.environ, "XDG_CACHE_HOME": os.path.join(root, "cache")}
    reference = os.path.join(root, f"{job}-reference")
    t0 = time.perf_counter()
    subprocess.run(_command(job, *SMALL[job], "--out", reference), env=env, check=True,
                   capture_output=True, timeout=900)  # fmt: skip
    reference_s = time.perf_counter() - t0
    runs = completed = lost = killed = 0
    folder, fresh = None, True
    while killed < kills:
        if folder is None:
            runs += 1
            folder, fresh = os.path.join(root, f"{job}-run{runs}"), True
        args = SMALL[job] + ["--out", folder] if fresh else ["--resume", folder]
        proc = subprocess.Popen(_command(job, *args), env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)  # fmt: skip
        fresh = False
        try:
            _, err = proc.communicate(timeout=rng.uniform(min_delay, max_delay))
            # It ended before its kill: finished (compare) or failed (lost).
            if proc.returncode == 0 and _same(reference, folder, job):
                completed += 1
            else:
                lost += 1
                print(f"  {job}: run {runs} lost: rc {proc.returncode}: {err.decode()[-500:]}")
            folder = None
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=60)
            killed += 1
            # Killed before the run wrote its config.toml: nothing ran, so it starts afresh.
            fresh = not os.path.exists(os.path.join(folder, "config.toml"))
    if folder is not None:  # the last run, to its end (afresh if it had not begun)
        args = SMALL[job] + ["--out", folder] if fresh else ["--resume", folder]
        done = subprocess.run(_command(job, *args), env=env, capture_output=True, timeout=900)
        if done.returncode == 0 and _same(reference, folder, job):
            completed += 1
        else:
            lost += 1
            print(f"  {job}: run {runs} lost: rc {done.returncode}: {done.stderr.decode()[-500:]}")
    return {
        "job": job, "kills": killed, "runs": runs, "completed": completed, "lost": lost,
        "reference_s": round(reference_s, 1),
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", default=",".join(SMALL), help="comma-separated job names")
    p.add_argument(
        "--kills", type=int, default=50, help="SIGKILLs per job (runs that end first do not count)"
    )
    p.add_argument("--min-delay", type=float, default=1.0, help="seconds before a kill, least")
    p.add_argument("--max-delay", type=float, default=12.0, help="seconds before a kill, most")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep", action="store_true", help="keep the run folders")
    p.add_argument("--json", help="write the rows here")
    a = p.parse_args()
    root = tempfile.mkdtemp(prefix="kill-soak-")
    rows = []
    try:
        print(f"{'job':<11} {'kills':>5} {'runs':>4} {'completed':>9} {'lost':>4} {'ref s':>6}")
        for job in a.jobs.split(","):
            row = soak(job, a.kills, a.min_delay, a.max_delay, root, a.seed)
            rows.append(row)
            print(f"{job:<11} {row['kills']:>5} {row['runs']:>4} {row['completed']:>9} "
                  f"{row['lost']:>4} {row['reference_s']:>6}", flush=True)  # fmt: skip
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
