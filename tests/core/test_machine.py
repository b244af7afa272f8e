"""The machine the package reads at run time (`eqx_qd.internal.machine`), and the choice it drives:
`matmul_dtype="auto"`."""

import dataclasses
import subprocess
import sys

import jax.random as jr
import pytest
from hypothesis import given, strategies as st
from launched import launched_env

import eqx_qd as q
from eqx_qd import _machine


ZEN5 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512dq avx512_bf16 avx512_vnni

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512dq avx512_bf16 avx512_vnni
"""
ZEN3 = (
    "cpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC 7B13\nflags\t\t: sse4_2 avx avx2 fma\n"
)
ARM = "processor\t: 0\nFeatures\t: fp asimd sve sve2 bf16 i8mm\nCPU part\t: 0xd4f\n"


def test_cpuinfo_is_read_for_the_model_and_the_vector_features_that_pick_code_paths():
    assert _machine._parse_cpuinfo(ZEN5) == {
        "cpu": "AMD EPYC",
        "family": 26,
        "model": 2,
        "flags": ("avx2", "avx512f", "avx512_bf16"),
    }
    assert _machine._parse_cpuinfo(ZEN3) == {
        "cpu": "AMD EPYC 7B13",
        "family": 25,
        "model": 1,
        "flags": ("avx2",),
    }
    # Arm: no model name, family or model; its features line names SVE and BF16.
    assert _machine._parse_cpuinfo(ARM) == {
        "cpu": "",
        "family": None,
        "model": None,
        "flags": ("sve", "bf16"),
    }
    assert _machine._parse_cpuinfo("") == {"cpu": "", "family": None, "model": None, "flags": ()}


def _kind(backend="cpu", flags=("avx2",)):
    return q.internal.Machine(
        backend=backend,
        device="cpu" if backend == "cpu" else "NVIDIA H100 80GB HBM3",
        cpu="AMD EPYC",
        arch="x86_64",
        family=25,
        model=1,
        flags=flags,
        cores=2,
    )


@given(
    backend=st.sampled_from(["cpu", "gpu", "tpu"]),
    flags=st.lists(st.sampled_from(_machine.VECTOR_FLAGS), unique=True).map(tuple),
)
def test_bfloat16_products_are_taken_only_where_they_were_measured_faster(backend, flags):
    # Faster: CPUs with AVX-512 BF16 or AMX-BF16. Slower: AVX2 CPUs (0.74x) and the H100
    # (0.95x); elsewhere unmeasured, so float32 (an Arm CPU's bf16 included).
    here = _kind(backend, flags)
    faster = backend == "cpu" and ("avx512_bf16" in flags or "amx_bf16" in flags)
    assert here.fast_bfloat16 is faster


def test_auto_resolves_to_what_this_machine_runs_faster(monkeypatch):
    for flags, expected in (
        (("avx2", "avx512f", "avx512_bf16"), "bfloat16"),
        (("avx2",), "float32"),
    ):
        monkeypatch.setattr(_machine, "machine", lambda flags=flags: _kind("cpu", flags))
        assert _machine.resolve_matmul_dtype("auto") == expected
        assert _machine.resolve_matmul_dtype("float32") == "float32"
        assert _machine.resolve_matmul_dtype("bfloat16") == "bfloat16"
        # A network built with "auto" keeps what it took (first and last layers: float32).
        net = q.rl.MLP(3, 2, (8, 8), matmul_dtype="auto", key=jr.key(0))
        assert [d.matmul_dtype for d in net.layers] == ["float32", expected, "float32"]
        # So do an agent's networks; the agent keeps "auto" (its setting, not the machine's).
        sac = q.rl.SAC(observation_size=3, action_size=2, policy_hidden=(8, 8),
                       critic_hidden=(8, 8), matmul_dtype="auto")  # fmt: skip
        state = sac.init(key=jr.key(1))
        assert sac.matmul_dtype == "auto"
        assert state.policy.net.layers[1].matmul_dtype == expected
        assert state.critic.nets[0].layers[1].matmul_dtype == expected
    with pytest.raises(ValueError, match="Dense: matmul_dtype must be one of"):
        q.rl.Dense(2, 2, matmul_dtype="fast", key=jr.key(0))


def test_this_machine_is_described_in_one_line():
    here = q.internal.machine()
    assert here.backend == "cpu" and here.cores >= 1  # the suite runs on a CPU
    assert set(here.flags) <= set(_machine.VECTOR_FLAGS)
    line = str(here)
    assert line.startswith(f"{here.cpu} ({here.arch}")
    assert line.endswith(" on cpu") and f"{here.cores} cores" in line
    assert str(_kind("cpu", ())).startswith(
        "AMD EPYC (x86_64 family 25 model 1; none of avx2 avx512f"
    )
    gpu = dataclasses.replace(_kind("gpu"), family=None, model=None)
    assert str(gpu).startswith("AMD EPYC (x86_64; avx2; 2 cores), JAX ")
    assert str(gpu).endswith(" on gpu (NVIDIA H100 80GB HBM3)")


@pytest.mark.e2e
def test_host_devices_per_core_in_a_fresh_process_and_where_a_count_is_given():
    plain = "import eqx_qd as q, jax; "
    in_python = "import jax, eqx_qd as q; jax.config.update('jax_num_cpu_devices', 3); "
    then = (
        "n = q.internal.host_devices_per_core(); "
        "print(n, len(jax.devices()), q.internal.machine().cores)"
    )

    def run(script, **given):
        env = {
            **launched_env(),
            **given,
        }  # (launched_env keeps only the suite's compile options of XLA_FLAGS)
        done = subprocess.run([sys.executable, "-c", script + then], env=env,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return [int(x) for x in done.stdout.split()]

    count, devices, cores = run(plain)
    assert count == devices == cores  # one CPU device per core
    # A count already asked for stands: XLA_FLAGS, JAX_NUM_CPU_DEVICES, JAX's config.
    assert run(plain, XLA_FLAGS="--xla_force_host_platform_device_count=3")[:2] == [3, 3]
    assert run(plain, JAX_NUM_CPU_DEVICES="5")[:2] == [5, 5]
    assert run(in_python)[:2] == [3, 3]


@pytest.mark.e2e
def test_host_devices_per_core_after_jax_started_says_so():
    # The suite's process asked for 4 CPU devices (conftest): that count stands.
    assert q.internal.host_devices_per_core() == 4
    # A process where JAX started with its one CPU device, on a machine of more cores: too late.
    script = "import jax, eqx_qd as q; jax.devices(); print(q.internal.host_devices_per_core())"
    done = subprocess.run([sys.executable, "-c", script], env=launched_env(),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    cores = _machine.usable_cores()
    if cores == 1:
        assert done.returncode == 0 and done.stdout.split() == ["1"], done.stderr
    else:
        assert done.returncode != 0
        assert (
            f"host_devices_per_core: JAX has started with 1 CPU device(s); call it before "
            f"anything runs on JAX (right after the imports) to get {cores}, one per core"
        ) in done.stderr
