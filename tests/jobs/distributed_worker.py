"""One process of the two-process ME-PBT run of `test_distributed.py` (not a test module).

``python tests/jobs/distributed_worker.py PORT PROCESS_ID OUT ITERATIONS [resume]``: joins the run
at 127.0.0.1:PORT with two host devices, runs (or resumes) the ME-PBT job in OUT/run, and
saves this process's view of the final repertoire as OUT/process-<id>.npz.
"""

import sys

import jax


port, pid, out, iterations = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
resume = sys.argv[5:] == ["resume"]
jax.config.update("jax_num_cpu_devices", 2)

from eqx_qd.jobs import _distributed  # noqa: E402


_distributed.initialize(f"127.0.0.1:{port}", 2, pid)

import numpy as np  # noqa: E402

from eqx_qd import jobs  # noqa: E402


sys.path[:0] = ["tests/jobs", "tests"]  # the test module, and what it imports
from test_distributed import TINY  # noqa: E402


config = jobs.MEPBTConfig(**{**TINY, "iterations": iterations, "devices": 4})
result = jobs.run(config, f"{out}/run", progress=False, plots=False, resume=resume)
rep = result.repertoire  # gathered onto every process by the job
np.savez(
    f"{out}/process-{pid}.npz",
    fitnesses=np.asarray(rep.fitnesses),
    descriptors=np.asarray(rep.descriptors),
    ids=np.asarray(rep.extra),
    processes=jax.process_count(),
    devices=len(jax.devices()),
    folder=str(result.folder),
)
