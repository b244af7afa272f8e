"""The notebooks run as users run them: compiled without the XLA optimisation level that
tests/conftest.py sets for the tests (nbmake starts each kernel after this setup hook)."""

import os

import pytest


_suite_flags: list[str | None] = []


def _set(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if "EQX_QD_USER_XLA_FLAGS" in os.environ:  # the tests' conftest added the level
        _suite_flags.append(os.environ.get("XLA_FLAGS"))
        _set("XLA_FLAGS", os.environ["EQX_QD_USER_XLA_FLAGS"] or None)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    if _suite_flags:
        _set("XLA_FLAGS", _suite_flags.pop())
