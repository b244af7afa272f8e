"""benchmarks/compare.py: the rows' commands, and its change to QDax's SAC script, run on a
small stand-in for that script (the real one needs QDax and ../shared, which CI lacks)."""

import argparse
import importlib.util
import json
import os
import sys

import pytest


HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..")


@pytest.fixture(scope="module")
def compare():
    spec = importlib.util.spec_from_file_location("compare", os.path.join(BENCH, "compare.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The lines of QDax's bench_pbt_sac.py the split goes into, around a vmapped "train function"
# called the way that script calls it (lowered, compiled, then called with the population).
STAND_IN = """import json
import jax
import jax.numpy as jnp


def main():
    def one(w, x):
        return jnp.tanh(x @ w).sum(), 2.0 * w

    train_fn = jax.vmap(one)
    train_fn = jax.jit(train_fn)
    w = jnp.arange(8 * 3 * 3, dtype=jnp.float32).reshape(8, 3, 3) / 50.0
    x = jnp.linspace(-1.0, 1.0, 8 * 5 * 3, dtype=jnp.float32).reshape(8, 5, 3)
    compiled = train_fn.lower(w, x).compile()
    s, w2 = compiled(w, x)
    out = {"s": s.tolist(), "w": w2.tolist(), "devices": jax.device_count()}
    print("JSON " + json.dumps(out))


if __name__ == "__main__":
    main()
"""


def test_sac_rows_commands(compare):
    args = argparse.Namespace(qdax_python="/peer/python")
    scripts = {
        "bench_pbt_sac.py": "/c/plain.py",
        "bench_pbt_sac_split.py": "/c/split.py",
        "bench_pbt_sac_v2.py": "/c/v2.py",
    }
    sac = os.path.join(compare.HERE, "sac.py")
    one = {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}
    expected = {
        "sac": ([sac, "--matmul-dtype", "float32"], {}, "/c/plain.py", {}),
        "sac_one": ([sac, "--matmul-dtype", "float32", "--groups", "1"], {}, "/c/plain.py", {}),
        "sacbf16": ([sac, "--matmul-dtype", "bfloat16"], {}, "/c/plain.py", {}),
        "sacx2": (
            [sac, "--matmul-dtype", "float32", "--devices", "2"],
            one,
            "/c/split.py",
            {**one, "EQX_QD_COMPARE_DEVICES": "2"},
        ),
        "sacbf16x2": (
            [sac, "--matmul-dtype", "bfloat16", "--devices", "2"],
            one,
            "/c/split.py",
            {**one, "EQX_QD_COMPARE_DEVICES": "2"},
        ),
        "sac_job": ([sac, "--matmul-dtype", "float32", "--devices", "auto"], {}, "/c/plain.py", {}),
        "sac_v2": ([sac, "--matmul-dtype", "float32"], {}, "/c/v2.py", {}),
    }
    for name, (ours, ours_env, script, peer_env) in expected.items():
        commands = compare._versus_commands(name, args, scripts)
        assert commands["eqx_qd"] == ([sys.executable, *ours], ours_env), name
        assert commands["QDax 0.5.0"] == (["/peer/python", script], peer_env), name
        row = compare.VERSUS[name]
        # QDax's script reports the mean over its steady calls: the row reads it as a median.
        theirs = {"grad_steps_per_s_total_over_pop": 100.0, "train_call_times_s": [9, 1, 1, 2]}
        assert row.read_theirs(theirs) == pytest.approx(100.0 * (4 / 3))
        assert row.read_ours({"grad_steps_per_s": 7.0}) == 7.0


def test_patch_sac_refuses_a_script_without_its_lines(compare):
    assert compare._patch_sac(STAND_IN.replace("    train_fn = jax.jit(train_fn)\n", "")) is None
    assert compare._patch_sac(STAND_IN.replace("def main():", "def run():")) is None
    # The helper goes in place of the two blank lines before main: a script without them too.
    assert compare._patch_sac(STAND_IN.replace("\n\ndef main():", "def main():")) is None


def test_sac_v2_copy_imports_brax_v2_tasks_in_place_of_v1(compare):
    script = "import argparse\nimport qdax.tasks.brax.v1 as environments\nenv = environments\n"
    patched = compare._patch_sac_v2(script)
    assert patched is not None
    assert "qdax.tasks.brax.v1" not in patched
    assert patched.splitlines()[1].startswith("import qdax.tasks.brax.v2 as environments")
    assert patched.splitlines()[0] == "import argparse" and patched.endswith("env = environments\n")
    assert compare._patch_sac_v2(script.replace(".v1 ", ".v0 ")) is None


def test_peer_copies_hold_the_patched_sac_scripts(compare, tmp_path, monkeypatch):
    # A stand-in of ../shared/bench with the files _peer_copies reads.
    shared = tmp_path / "shared"
    for d in ("pyribs", "qdax"):
        (shared / d).mkdir(parents=True)
    (shared / "pyribs" / "bench_ribs.py").write_text("")
    (shared / "qdax" / "bench_me.py").write_text("import jax\n")
    (shared / "qdax" / "centroids_cvt1024_2d.npy").write_text("")
    for name in ("bench_pgame.py", "bench_mepbt.py"):
        (shared / "qdax" / name).write_text("")
    sac = STAND_IN.replace(
        "import json\n", "import json\nimport qdax.tasks.brax.v1 as environments\n"
    )
    (shared / "qdax" / "bench_pbt_sac.py").write_text(sac)
    monkeypatch.setattr(compare, "SHARED", str(shared))
    out = tmp_path / "copies"
    out.mkdir()
    scripts = compare._peer_copies(str(out))
    with open(scripts["bench_pbt_sac_v2.py"]) as f:
        assert f.read() == compare._patch_sac_v2(sac)
    with open(scripts["bench_pbt_sac_split.py"]) as f:
        assert f.read() == compare._patch_sac(sac)
    with open(scripts["bench_pbt_sac.py"]) as f:
        assert f.read() == sac


def test_patched_script_splits_over_devices_and_agrees(compare, tmp_path):
    patched = compare._patch_sac(STAND_IN)
    assert patched is not None and "_over_devices" in patched
    (tmp_path / "plain.py").write_text(STAND_IN)
    (tmp_path / "split.py").write_text(patched)
    plain = compare._run([sys.executable, str(tmp_path / "plain.py")], timeout=100)
    inert = compare._run([sys.executable, str(tmp_path / "split.py")], timeout=100)
    env = {"EQX_QD_COMPARE_DEVICES": "2"}  # the script adds the host devices to XLA_FLAGS
    split = compare._run([sys.executable, str(tmp_path / "split.py")], timeout=100, env=env)
    assert plain is not None and inert is not None and split is not None
    assert plain["devices"] == inert["devices"] == 1 and split["devices"] == 2
    assert inert == plain
    assert split["s"] == pytest.approx(plain["s"], rel=1e-6)
    assert split["w"] == plain["w"]


def test_tables_from_saved_runs_and_the_platform_each_run_gets(compare, tmp_path, capsys):
    # Runs saved by --jsonl (one cut short: the CMA row has ours alone) print as tables.
    runs = [
        {"round": 1, "workload": "cvt1024", "who": "eqx_qd",
         "result": {"evals_per_s": 400.0, "max_fitness": -1.0}},
        {"round": 1, "workload": "cvt1024", "who": "pyribs f32",
         "result": {"evals_per_s": 100.0, "max_fitness": -2.0}},
        {"round": 1, "workload": "cma_me", "who": "eqx_qd",
         "result": {"seconds": 2.0, "compile_s": 1.0}},
    ]  # fmt: skip
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    compare._tables_from([str(path)])
    out = capsys.readouterr().out
    assert "| CVT 1,024 (QDax's centroids) | 400 | 100 | failed | **4.00x** |" in out
    assert "| CMA-ME, 100-D projected sphere, 100 x 100, 15 x 36 | s / 500 iterations | 2 |" in out
    assert "| n/a |" in out  # no peer run: no ratio
    # Each run's JAX_PLATFORMS: pinned (cpu by default), or left to JAX with "default".
    script = tmp_path / "platform.py"
    script.write_text(
        'import json, os\nprint(json.dumps({"p": os.environ.get("JAX_PLATFORMS")}))\n'
    )
    assert compare._run([sys.executable, str(script)], timeout=60) == {"p": "cpu"}
    assert compare._run([sys.executable, str(script)], 60, platform="cuda") == {"p": "cuda"}
    assert compare._run([sys.executable, str(script)], 60, platform="default") == {"p": None}


@pytest.mark.e2e
def test_background_load_runs_beside_the_script_at_lowest_priority(compare, tmp_path, capsys):
    # The script sees the busy processes compare.py started (children of compare.py's process,
    # at nice 19) while it runs; none is left once the run is over. (Only the busy loops: the
    # test process may have other children, another test's process pool among them.)
    script = tmp_path / "siblings.py"
    script.write_text(
        "import json, os, subprocess\n"
        "me, parent = os.getpid(), os.getppid()\n"
        "out = subprocess.run(['ps', '-o', 'pid=,ni=,args=', '--ppid', str(parent)],\n"
        "                     capture_output=True, text=True).stdout.splitlines()\n"
        "rows = [line.split(None, 2) for line in out]\n"
        "busy = [n for pid, n, args in rows if int(pid) != me and 'while True' in args]\n"
        "nice = sorted(int(n) for n in busy)\n"
        "print(json.dumps({'nice': nice}))\n"
    )
    children = set(os.listdir("/proc"))
    assert compare._run([sys.executable, str(script)], 60, background=2) == {"nice": [19, 19]}
    assert compare._run([sys.executable, str(script)], 60) == {"nice": []}
    left = {p for p in set(os.listdir("/proc")) - children if p.isdigit()}
    busy = [p for p in left if "while True" in _cmdline(p)]
    assert busy == []
    # Saved runs say what ran beside them.
    row = {"round": 1, "workload": "cma_me", "who": "eqx_qd", "result": {"seconds": 2.0},
           "background_load": 1}  # fmt: skip
    path = tmp_path / "loaded.jsonl"
    path.write_text(json.dumps(row) + "\n")
    compare._tables_from([str(path)])
    out = capsys.readouterr().out
    assert "medians over the runs of each side, beside 1 busy process(es)\n" in out


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read()
    except OSError:
        return ""
