"""Run drivers around the library: job configs, run folders, checkpoints, registries by name and
progress reporting. This is the only part of eqx_qd that writes files or shows progress bars;
the `eqx-qd` command is generated from it.

```python
from eqx_qd import jobs

result = jobs.run(jobs.MAPElitesConfig(iterations=100), "runs/demo")
again = jobs.load_run("runs/demo")  # config, progress columns, repertoire
summary = jobs.report(["runs/seed0", "runs/seed1", ...], "runs/report")  # over seeds
```
"""

from .._extras import require as _require


_require("jobs", "eqx_qd.jobs (and the eqx-qd command)")

from . import checks as checks
from ._aurora import aurora_figures as aurora_figures, AuroraConfig as AuroraConfig
from ._checkpoints import (
    Checkpoint as Checkpoint,
    list_checkpoints as list_checkpoints,
    mean_return as mean_return,
    records_of as records_of,
    restore_checkpoint as restore_checkpoint,
    save_checkpoint as save_checkpoint,
)
from ._compile_cache import (
    default_compile_cache as default_compile_cache,
    use_compile_cache as use_compile_cache,
)
from ._config import JobConfig as JobConfig, option as option
from ._dcrl_me import DCRLMEConfig as DCRLMEConfig
from ._distributed import population_devices as population_devices
from ._external import ExternalConfig as ExternalConfig
from ._folder import (
    atomic_write as atomic_write,
    deserialise as deserialise,
    load_repertoire as load_repertoire,
    RunFolder as RunFolder,
    save_repertoire as save_repertoire,
    serialise as serialise,
)
from ._ippo import (
    IPPOConfig as IPPOConfig,
    train_ippo as train_ippo,
    TrainingLog as TrainingLog,
)
from ._job import (
    default_run_folder as default_run_folder,
    Job as Job,
    JOBS as JOBS,
    load_run as load_run,
    read_config as read_config,
    register_job as register_job,
    run as run,
    RunResult as RunResult,
    Translator as Translator,
)
from ._launch import Launch as Launch, launch as launch, load_plugins as load_plugins
from ._loop import Chunk as Chunk, LoopJob as LoopJob, Rows as Rows
from ._map_elites import MAPElitesConfig as MAPElitesConfig
from ._me_pbt import MEPBTConfig as MEPBTConfig
from ._mees import MEESConfig as MEESConfig
from ._mome import MO_TASKS as MO_TASKS, MOMEConfig as MOMEConfig
from ._pbt import PBTConfig as PBTConfig
from ._pgame import PGAMEConfig as PGAMEConfig
from ._policy_qd import (
    policy_by_id as policy_by_id,
    PolicyQDJob as PolicyQDJob,
    PolicyQDOptions as PolicyQDOptions,
)
from ._progress import Progress as Progress
from ._qdpg import QDPGConfig as QDPGConfig
from ._registry import (
    AGENTS as AGENTS,
    EMITTERS as EMITTERS,
    ENVIRONMENTS as ENVIRONMENTS,
    make_agent as make_agent,
    make_emitter as make_emitter,
    make_env as make_env,
    make_task as make_task,
    Registry as Registry,
    TASKS as TASKS,
)
from ._replay import Replay as Replay, replay as replay
from ._report import (
    group_of as group_of,
    mann_whitney as mann_whitney,
    read_curves as read_curves,
    read_peer_curves as read_peer_curves,
    Report as Report,
    report as report,
)
from ._resume import (
    fork_run as fork_run,
    read_log as read_log,
    resume as resume,
    RunClock as RunClock,
)
from ._sinks import (
    LogSink as LogSink,
    TensorBoardSink as TensorBoardSink,
    WandbSink as WandbSink,
)
from ._status import run_status as run_status


# What `from eqx_qd.jobs import *` takes: the names above (tests/test_guards.py).
__all__ = [
    "AGENTS",
    "atomic_write",
    "aurora_figures",
    "AuroraConfig",
    "Checkpoint",
    "checks",
    "Chunk",
    "DCRLMEConfig",
    "default_compile_cache",
    "default_run_folder",
    "deserialise",
    "EMITTERS",
    "ENVIRONMENTS",
    "ExternalConfig",
    "fork_run",
    "group_of",
    "IPPOConfig",
    "Job",
    "JobConfig",
    "JOBS",
    "launch",
    "Launch",
    "list_checkpoints",
    "load_plugins",
    "load_repertoire",
    "load_run",
    "LogSink",
    "LoopJob",
    "make_agent",
    "make_emitter",
    "make_env",
    "make_task",
    "mann_whitney",
    "MAPElitesConfig",
    "mean_return",
    "MEESConfig",
    "MEPBTConfig",
    "MO_TASKS",
    "MOMEConfig",
    "option",
    "PBTConfig",
    "PGAMEConfig",
    "policy_by_id",
    "PolicyQDJob",
    "PolicyQDOptions",
    "population_devices",
    "Progress",
    "QDPGConfig",
    "read_config",
    "read_curves",
    "read_log",
    "read_peer_curves",
    "records_of",
    "register_job",
    "Registry",
    "replay",
    "Replay",
    "report",
    "Report",
    "restore_checkpoint",
    "resume",
    "Rows",
    "run",
    "run_status",
    "RunClock",
    "RunFolder",
    "RunResult",
    "save_checkpoint",
    "save_repertoire",
    "serialise",
    "TASKS",
    "TensorBoardSink",
    "train_ippo",
    "TrainingLog",
    "Translator",
    "use_compile_cache",
    "WandbSink",
]
