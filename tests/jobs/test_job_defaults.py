"""Every registered job's default runs: the config the command runs without options, its budget
cut to a few iterations (rounds, batches), and nothing else changed. A default that cannot be
built, whose sizes do not fit together, or whose first iterations fail is caught here, not by a
newcomer's first command. Slow tier: the defaults are laptop-sized, not test-sized."""

import numpy as np
import pytest

from eqx_qd import jobs
from eqx_qd.jobs import Progress


def _after_random_start(job: str, batches: int) -> dict[str, int]:
    defaults = jobs.JOBS[job].default_values()
    return {"evaluations": defaults["random_init"] + batches * defaults["batch_size"]}


FEW = {
    "map-elites": lambda: {"iterations": 4},
    "external": lambda: {"iterations": 2},
    "ippo": lambda: {"iterations": 2},
    "me-pbt": lambda: {"iterations": 2},
    "mome": lambda: {"iterations": 4},
    "pbt": lambda: {"rounds": 2},
    "pgame": lambda: _after_random_start("pgame", 2),
    "dcrl-me": lambda: _after_random_start("dcrl-me", 2),
    "mees": lambda: {"evaluations": 1 + 201},  # the random policy and one generation
    "qdpg": lambda: _after_random_start("qdpg", 2),
    "aurora": lambda: _after_random_start("aurora", 2),
}
"""Each built-in job's budget keys, cut to a few of its steps."""

BRAX = {"pgame", "dcrl-me", "mees", "aurora"}
"""The defaults on brax tasks."""


def test_every_built_in_job_has_a_short_default_run_here():
    builtin = {n for n, job in jobs.JOBS.items() if type(job).__module__.startswith("eqx_qd.")}
    assert builtin == set(FEW), "a new job needs its few-iterations budget in FEW"


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=[pytest.mark.slow] + ([pytest.mark.brax] if n in BRAX else []))
        for n in sorted(FEW)
    ],
)
def test_the_default_config_runs_a_few_iterations(name):
    job = jobs.JOBS[name]
    short = FEW[name]()
    config = job.default_config(**short)
    default = job.default_config()
    changed = {k for k in job.config_cls.keys() if getattr(config, k) != getattr(default, k)}
    assert changed == set(short)  # the default, but for its budget
    result = jobs.run(config, None, progress=Progress(show=False), plots=False)
    assert result.config == config and len(next(iter(result.progress.values()))) >= 2
    numbers = [v for v in result.progress.values() if v.dtype.kind == "f"]
    assert numbers and all(np.isfinite(v).all() for v in numbers), result.progress
