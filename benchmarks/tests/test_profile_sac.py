"""benchmarks/profile_sac.py: its reading of a profiler trace (threads, nesting, categories,
compile stages) on hand-made traces, and on a real trace of a small jitted program."""

import gzip
import importlib.util
import json
import os

import jax
import jax.numpy as jnp
import pytest


BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


@pytest.fixture(scope="module")
def prof():
    path = os.path.join(BENCH, "profile_sac.py")
    spec = importlib.util.spec_from_file_location("profile_sac", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _event(name, ts, dur, tid):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def _trace(*events):
    meta = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "tf_XLAEigen/1"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 3, "args": {"name": "tf_XLAEigen/2"}},
    ]
    return {"traceEvents": meta + list(events)}


# Thread 2: dot.1 [0, 100) with fusion.7 nested in [20, 50), then a gap, then copy.3 [150, 200).
# Thread 3: a wrapper over everything, and dot.2 [0, 60). Python's thread: ignored.
TRACE = _trace(
    _event("ThunkExecutor::Execute", 0, 200, 3),
    _event("dot.1", 0, 100, 2),
    _event("add_maximum_fusion.7", 20, 30, 2),
    _event("copy.3", 150, 50, 2),
    _event("dot.2", 0, 60, 3),
    _event("end: dot.2", 60, 1, 3),
    _event("dot.9", 0, 1000, 1),
)


def test_threads_and_busy_share(prof):
    threads = prof.operation_events(TRACE)
    assert sorted(t[1] for t in threads) == [2, 3]  # Python's thread left out
    assert [e["name"] for e in threads[(1, 3)]] == ["dot.2"]  # wrapper and marker left out
    assert prof.busy_time(threads[(1, 2)]) == 150.0  # [0, 100) and [150, 200); nested once
    assert prof.busy_time(threads[(1, 3)]) == 60.0
    assert prof.busy_time([]) == 0.0


def test_exclusive_times_subtract_what_ran_nested(prof):
    threads = prof.operation_events(TRACE)
    assert prof.exclusive_times(threads[(1, 2)]) == {
        "dot": 70.0, "add_maximum_fusion": 30.0, "copy": 50.0
    }  # fmt: skip
    summary = prof.summarise(TRACE, wall_us=200.0, steps=2)
    assert summary["busy_share"] == {"2": 0.75, "3": 0.3}
    assert summary["us_per_step"] == {"dot": 65.0, "copy": 25.0, "add_maximum_fusion": 15.0}
    assert list(summary["us_per_step"]) == ["dot", "copy", "add_maximum_fusion"]


def test_category_drops_only_the_instance_number(prof):
    assert prof.category("dot.1047") == "dot"
    assert prof.category("ynn_fusion") == "ynn_fusion"
    assert prof.category("exponential_log-plus-one_fusion.2") == "exponential_log-plus-one_fusion"


def test_compile_stages(prof):
    trace = _trace(
        _event("HLO passes through layout assignment (jit_f)", 0, 2_000_000, 1),
        _event("HLO passes after layout assignment (jit_f)", 0, 500_000, 1),
        _event("Codegen", 0, 3_000_000, 1),
        _event("PjRtCpuClient::Compile", 0, 6_000_000, 1),
    )
    assert prof.compile_events(trace) == {
        "HLO passes": 2.5, "code generation": 3.0, "XLA in all": 6.0
    }  # fmt: skip


def test_load_trace_names_a_folder_without_one(prof, tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        prof.load_trace(str(tmp_path))
    (tmp_path / "a").mkdir()
    with gzip.open(tmp_path / "a" / "x.trace.json.gz", "wt") as f:
        json.dump(TRACE, f)
    assert prof.load_trace(str(tmp_path)) == TRACE


def test_a_real_trace_of_a_product(prof, tmp_path):
    # JAX's own profiler output: the product shows up on a pool thread, as a `dot` or a
    # library fusion, and the pool is busy for part of the call.
    f = jax.jit(lambda x, w: jnp.tanh(x @ w))
    x = jnp.ones((256, 256))
    f(x, x).block_until_ready()
    jax.profiler.start_trace(str(tmp_path), create_perfetto_trace=True)
    for _ in range(5):
        f(x, x).block_until_ready()
    jax.profiler.stop_trace()
    summary = prof.summarise(prof.load_trace(str(tmp_path)), wall_us=1e9, steps=5)
    kinds = summary["us_per_step"]
    assert any(k == "dot" or "_fusion" in k for k in kinds), kinds
    assert all(v >= 0 for v in kinds.values())
    assert summary["busy_share"] and all(0 < v < 1 for v in summary["busy_share"].values())


def test_sac_s_compile_is_the_training_program_s_and_what_compiles_after_it():
    # benchmarks/sac.py's first call: the training program's XLA compile ends at 8 s (started
    # at 0), then the groups run and the small join programs compile at 30 s.
    path = os.path.join(BENCH, "sac.py")
    spec = importlib.util.spec_from_file_location("sac_bench", path)
    sac = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sac)
    compiles = [(1.0, 0.2), (8.0, 5.5), (30.0, 0.01), (30.1, 0.02)]
    assert sac._compile_seconds(compiles, 0.0) == pytest.approx(8.03)
    assert sac._compile_seconds([(9.0, 6.0)], 1.0) == pytest.approx(8.0)
    assert sac._compile_seconds([], 3.0) == 0.0
