"""The notebooks as the test suite runs them: every cell of each, at the smoke size that its
one `SMOKE` line reads from `EQX_QD_SMOKE` (1 here unless given), so each takes seconds while
a user running it gets its full length. ``EQX_QD_SMOKE=0 pytest -n 2 --nbmake notebooks``
runs them at full length, compiled as users' programs are: with the user's XLA_FLAGS, not the
optimisation level and code generator that the top-level conftest.py asks for (at full
length, the brax notebook's training ran past nbmake's 300 s per cell at level 0). A smoke
run, which is mostly compiling, keeps the suite's flags (about half its time). nbmake starts
each kernel after this setup hook, with the environment of that moment."""

import os

import pytest


os.environ.setdefault("EQX_QD_SMOKE", "1")
_SUITE_FLAGS = pytest.StashKey[str]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    full = os.environ["EQX_QD_SMOKE"] != "1"
    if full and "EQX_QD_USER_XLA_FLAGS" in os.environ:  # the top-level conftest added flags
        item.stash[_SUITE_FLAGS] = os.environ["XLA_FLAGS"]
        # The user's flags; empty where they had none (XLA reads an empty XLA_FLAGS as unset).
        os.environ["XLA_FLAGS"] = os.environ["EQX_QD_USER_XLA_FLAGS"]


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    if _SUITE_FLAGS in item.stash:
        os.environ["XLA_FLAGS"] = item.stash[_SUITE_FLAGS]


KERNEL_RACE = "Kernel died before replying to kernel_info"
"""What starting a notebook's kernel raises when another kernel took its port: jupyter_client
picks free ports and releases them before the kernel binds them, so two xdist workers starting
kernels at once can collide (`ZMQError: Address already in use`; nbmake issue 129)."""


def once_more_on_a_kernel_race(runtest):
    """`runtest` run again, once, when its kernel died before it started (`KERNEL_RACE`): the
    port race above is not the notebook's failure. Any other error, or a second race, stays."""

    def run():
        try:
            runtest()
        except Exception as e:  # noqa: BLE001 - only the race is retried, the rest re-raised
            if KERNEL_RACE not in str(e):
                raise
            runtest()

    return run


def pytest_collection_modifyitems(items):
    for item in items:
        if getattr(item, "nbmake", False):
            item.runtest = once_more_on_a_kernel_race(item.runtest)
