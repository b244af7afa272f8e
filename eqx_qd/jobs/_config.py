"""Job configs: frozen dataclasses whose fields are typed, documented and checked, read from TOML
or built from options, and written back as TOML.

A field is declared with `option`: its default, a help line (the command line's `--help`) and
an optional check from `eqx_qd.internal` (`check.positive_int`...). Values are checked against
the field's type before the checks run (a string where a bool is expected is an error naming the
key, not a truthy value), so every error names the key it is about.
"""

import dataclasses
import json
import math
import os
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar


_C = TypeVar("_C", bound="JobConfig")


def option(
    default: Any,
    help: str,
    *,
    check: Callable[[str, Any], None] | None = None,
    aliases: tuple[str, ...] = (),
) -> Any:
    """A config field: `default`, a one-line `help` and an optional `check(name, value)`.

    `aliases` are extra command-line spellings (`--iters` for `--iterations`).
    """
    return dataclasses.field(
        default=default, metadata={"help": help, "check": check, "aliases": aliases}
    )


def _is_optional(tp: Any) -> tuple[bool, Any]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return True, args[0]
    return False, tp


def describe_type(tp: Any) -> str:
    """`int`, `float`, `bool`, `str`, `list of int` (optionally `or none`)."""
    optional, tp = _is_optional(tp)
    if typing.get_origin(tp) is tuple:
        (item, _) = typing.get_args(tp)
        text = f"list of {item.__name__}"
    else:
        text = tp.__name__
    return text + (" or none" if optional else "")


def coerce(name: str, tp: Any, value: Any) -> Any:
    """`value` as the type `tp` of config key `name` (ints widen to floats, lists become
    tuples), or a `TypeError` naming the key, the type expected and the value received."""
    optional, inner = _is_optional(tp)
    if value is None:
        if optional:
            return None
        raise TypeError(f"config key {name!r} must be {describe_type(tp)}, got nothing")
    bad = TypeError(
        f"config key {name!r} must be {describe_type(tp)}, got {value!r} ({type(value).__name__})"
    )
    if inner is bool:
        if not isinstance(value, bool):
            raise bad
        return value
    if inner is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
        return value
    if inner is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        return float(value)
    if inner is str:
        if not isinstance(value, str):
            raise bad
        return value
    if typing.get_origin(inner) is tuple:
        (item, _) = typing.get_args(inner)
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise bad
        try:
            return tuple(coerce(name, item, v) for v in value)
        except TypeError:
            raise bad from None
    raise TypeError(f"config key {name!r} has an unsupported type {tp!r}")  # a library bug


class JobConfig:
    """Base of the jobs' configs (frozen dataclasses).

    `JOB` names the job: the `eqx-qd run` command and the TOML table (`[map-elites]`) that
    may hold the keys. `check` holds the checks that involve several keys.
    """

    JOB: ClassVar[str] = ""
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {}
    """Named values over the defaults (the defaults are a run's local size; `paper`: the
    published setting), for `preset` and `--preset NAME`."""
    RENAMED: ClassVar[dict[str, str]] = {}
    """Keys by an earlier name and the name they have now: a TOML file (an older run
    folder's `config.toml`) is read with them renamed; anywhere else the old name is an error
    that gives the new one."""

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = coerce(f.name, hints[f.name], getattr(self, f.name))
            object.__setattr__(self, f.name, value)
            field_check = f.metadata.get("check")
            if field_check is not None and value is not None:
                field_check(f.name, value)
        self.check()

    def check(self) -> None:
        """Checks across several keys (none by default)."""

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The config's keys, in field order."""
        return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    @classmethod
    def preset(cls: type[_C], name: str, **overrides: Any) -> _C:
        """The config of preset `name` (one of `PRESETS`), `overrides` over it."""
        if name not in cls.PRESETS:
            known = ", ".join(sorted(cls.PRESETS)) or "none"
            raise ValueError(f"{cls.__name__} has no preset {name!r}; its presets: {known}")
        return cls.from_mapping({**cls.PRESETS[name], **overrides})

    @classmethod
    def from_mapping(cls: type[_C], values: Mapping[str, Any]) -> _C:
        """A config from keys and values; unknown keys are an error that names them."""
        renamed = [f"{k} is {cls.RENAMED[k]}" for k in values if k in cls.RENAMED]
        if renamed:
            raise ValueError(f"renamed config keys: {'; '.join(renamed)} here")
        unknown = sorted(set(values) - set(cls.keys()))
        if unknown:
            raise ValueError(f"unknown config keys: {', '.join(unknown)}")
        hints = typing.get_type_hints(cls)
        return cls(**{k: coerce(k, hints[k], v) for k, v in values.items()})

    @classmethod
    def from_toml(cls: type[_C], path: str | os.PathLike, **overrides: Any) -> _C:
        """Read a TOML file: top-level keys, or keys under the job's table (`[pgame]`), not
        both. `overrides` win over the file."""
        path = os.fspath(path)
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except OSError as e:
            raise ValueError(f"cannot read config {path!r}: {e.strerror}") from e
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"config {path!r} is not valid TOML: {e}") from e
        if cls.JOB in data and isinstance(data[cls.JOB], dict):
            beside = sorted(k for k in data if k != cls.JOB)
            if beside:
                raise ValueError(
                    f"config {path!r} has keys outside its [{cls.JOB}] table: {', '.join(beside)}"
                )
            data = data[cls.JOB]
        data = {cls.RENAMED.get(k, k): v for k, v in data.items()}  # an older folder's names
        return cls.from_mapping({**data, **overrides})

    def to_toml(self) -> str:
        """The config as a TOML `[JOB]` table (keys set to `None` are left out)."""
        lines = [f"[{self.JOB}]"]
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is not None:
                value = list(value) if isinstance(value, tuple) else value
                lines.append(f"{f.name} = {_toml(value)}")
        return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    """A TOML value: JSON's, but infinities as TOML writes them (`inf`, `-inf`)."""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return json.dumps(value)


def job_of_toml(path: str | os.PathLike) -> str | None:
    """The job whose table a TOML file holds (`[pgame]` -> `"pgame"`), if exactly one. A file
    that is not TOML is a `ValueError` naming it."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"config {os.fspath(path)!r} is not valid TOML: {e}") from e
    tables = [k for k, v in data.items() if isinstance(v, dict)]
    return tables[0] if len(tables) == 1 and len(data) == 1 else None
