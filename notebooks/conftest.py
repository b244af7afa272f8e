"""The notebooks run as users run them: compiled without the XLA optimisation level that
tests/conftest.py sets for the tests (nbmake starts each kernel after this setup hook)."""

import os

import pytest


_SUITE_FLAGS = pytest.StashKey[str]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if "EQX_QD_USER_XLA_FLAGS" in os.environ:  # the tests' conftest added the level
        item.stash[_SUITE_FLAGS] = os.environ["XLA_FLAGS"]
        # The user's flags; empty where they had none (XLA reads an empty XLA_FLAGS as unset).
        os.environ["XLA_FLAGS"] = os.environ["EQX_QD_USER_XLA_FLAGS"]


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    if _SUITE_FLAGS in item.stash:
        os.environ["XLA_FLAGS"] = item.stash[_SUITE_FLAGS]
