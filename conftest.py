"""What every pytest run in this repository shares (`tests/`, `benchmarks/tests/`, the
notebooks): the compile options of its programs, set before JAX starts.

The suite compiles thousands of small programs and runs most of them briefly, so most of its
time is XLA's compiler (`benchmarks/README.md`, "The test suite's time"). Two options cut it
by more than half: XLA's backend optimisation level 0 (its default is 3), and the CPU
backend's older fusion code generator (`xla_cpu_use_fusion_emitters=false`, which the
package's own programs ask for: `eqx_qd/_compile.py`). Values are those of the same
operations, up to float rounding; only the machine code differs. The processes the tests
launch inherit them (`tests/launched.py`); notebooks at a smoke size keep them, at full
length they get the user's own flags back (`notebooks/conftest.py`). `XLA_FLAGS` naming an
option keeps its choice: ``XLA_FLAGS=--xla_backend_optimization_level=3 pytest``."""

import os


SUITE_XLA_FLAGS = {"xla_backend_optimization_level": "0", "xla_cpu_use_fusion_emitters": "false"}
_user = os.environ.get("XLA_FLAGS", "")
_added = [f"--{k}={v}" for k, v in SUITE_XLA_FLAGS.items() if k not in _user]
if _added:
    os.environ["EQX_QD_USER_XLA_FLAGS"] = _user
    os.environ["XLA_FLAGS"] = " ".join([_user, *_added]).strip()
