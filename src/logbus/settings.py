"""Layered settings shared by every logbus process: defaults < TOML file < environment < flags."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Collection, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def load_layered(
    cls: type[T],
    what: str,
    env_prefix: str,
    coerce: Callable[[str, Any, Any], Any],
    toml_path: Path | None,
    env: Mapping[str, str] | None,
    overrides: Mapping[str, Any],
    *,
    not_from_env: Collection[str] = (),
    unset: Callable[[Any], bool] = lambda v: v is None,
) -> T:
    """Build the dataclass `cls`: each field from the highest layer that sets it, through `coerce(name,
    default, value)`. Environment variables are `env_prefix + NAME`; an override for which `unset` is
    true (a flag not given) is ignored; an unknown setting in any layer is an error naming `what`."""
    values: dict[str, Any] = {}
    if toml_path is not None:
        with open(toml_path, "rb") as f:
            values.update(tomllib.load(f))
    env = os.environ if env is None else env
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    for name in names:
        key = env_prefix + name.upper()
        if key in env and name not in not_from_env:
            values[name] = env[key]
    values.update({k: v for k, v in overrides.items() if not unset(v)})
    unknown = set(values) - set(names)
    if unknown:
        raise ValueError(f"unknown {what} setting(s): {', '.join(sorted(unknown))}")
    config = cls()
    for name in names:
        if name in values:
            setattr(config, name, coerce(name, getattr(config, name), values[name]))
    return config
