"""What every job config shares: construction from a mapping or a TOML file, and TOML output."""

import dataclasses
import json
import os
import tomllib
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar


_C = TypeVar("_C", bound="TomlConfig")


class TomlConfig:
    """Mixin for frozen dataclass configs. ``TABLE`` names the optional TOML table (e.g.
    ``[pgame]``) that may hold the keys instead of the top level."""

    TABLE: ClassVar[str] = ""

    @classmethod
    def from_mapping(cls: type[_C], values: Mapping[str, Any]) -> _C:
        """A config from keys and values; unknown keys are an error that names them."""
        unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})  # type: ignore[arg-type]
        if unknown:
            raise ValueError(f"unknown config keys: {', '.join(unknown)}")
        return cls(**values)

    @classmethod
    def from_toml(cls: type[_C], path: str | os.PathLike, **overrides: Any) -> _C:
        """Read a TOML file (top-level keys, or the ``TABLE`` table); ``overrides`` win."""
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except OSError as e:
            raise ValueError(f"cannot read config {os.fspath(path)!r}: {e.strerror}") from e
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"config {os.fspath(path)!r} is not valid TOML: {e}") from e
        return cls.from_mapping({**data.get(cls.TABLE, data), **overrides})

    def to_toml(self) -> str:
        lines = []
        for key, value in dataclasses.asdict(self).items():  # type: ignore[call-overload]
            if value is not None:
                value = list(value) if isinstance(value, tuple) else value
                lines.append(f"{key} = {json.dumps(value)}")
        return "\n".join(lines) + "\n"
