"""One process of the two-process runs of `test_distributed.py` (not a test module).

``python tests/jobs/distributed_worker.py PORT PROCESS_ID OUT ITERATIONS [resume]``: joins the
run at 127.0.0.1:PORT with two host devices (`jobs.launch`, as a user's script would), runs the
MAP-Elites job in OUT/map-elites for ITERATIONS - 2 iterations, or with ``resume`` resumes it
to ITERATIONS - 1 and runs the ME-PBT job in OUT/run for ITERATIONS iterations and the PBT,
PGA-ME, IPPO and MOME jobs in OUT/<job> for ITERATIONS - 1 rounds, batches and iterations, and saves
this process's view of their results as OUT/process-<id>.npz (ME-PBT's repertoire) and
OUT/<job>-<id>.npz (logs and final states).
"""

import sys

import jax
import numpy as np

from eqx_qd import jobs


port, pid, out, iterations = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
resume = sys.argv[5:] == ["resume"]
# Launched from Python as the command launches it: two host devices here (four in all), joined.
jobs.launch(
    devices=4, coordinator=f"127.0.0.1:{port}", num_processes=2, process_id=pid, compile_cache=False
)


sys.path[:0] = ["tests/jobs", "tests"]  # the test module, and what it imports
from test_distributed import (  # noqa: E402
    ippo_config,
    map_elites_config,
    mome_config,
    PBT_TINY,
    pgame_config,
    saved_run,
    TINY,
)


# MAP-Elites is stopped after ITERATIONS - 2 iterations and resumed to ITERATIONS - 1.
config = map_elites_config(iterations - (1 if resume else 2))
result = jobs.run(config, f"{out}/map-elites", progress=False, plots=False, resume=resume)
np.savez(f"{out}/map-elites-{pid}.npz", folder=str(result.folder), **saved_run(result))

if resume:  # the others run once, fresh
    config = jobs.MEPBTConfig(**{**TINY, "iterations": iterations, "devices": 4})
    result = jobs.run(config, f"{out}/run", progress=False, plots=False)
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

    config = jobs.PBTConfig(**{**PBT_TINY, "rounds": iterations - 1, "devices": 4})
    result = jobs.run(config, f"{out}/pbt", progress=False, plots=False)
    np.savez(f"{out}/pbt-{pid}.npz", folder=str(result.folder), **saved_run(result))

    config = pgame_config(iterations - 1)
    result = jobs.run(config, f"{out}/pgame", progress=False, plots=False)
    np.savez(f"{out}/pgame-{pid}.npz", folder=str(result.folder), **saved_run(result))

    config = ippo_config(iterations - 1)
    result = jobs.run(config, f"{out}/ippo", progress=False, plots=False)
    np.savez(f"{out}/ippo-{pid}.npz", folder=str(result.folder), **saved_run(result))

    result = jobs.run(mome_config(iterations - 1), f"{out}/mome", progress=False, plots=False)
    np.savez(f"{out}/mome-{pid}.npz", folder=str(result.folder), **saved_run(result))
