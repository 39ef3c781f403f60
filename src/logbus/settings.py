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


def coerce_scalar(name: str, current: Any, value: Any) -> Any:
    """A setting's value from TOML or text, typed like its default (bool, int, float or text)."""
    if isinstance(current, bool):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(f"{name} must be true or false, not {value!r}")
        return text in ("true", "1", "yes")
    if isinstance(current, int):
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be an integer, not {value!r}") from None
    if isinstance(current, float):
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a number, not {value!r}") from None
    return None if value is None else str(value)


def split_address(address: str) -> tuple[str, int]:
    """host:port (IPv6 hosts in brackets) -> (host, port); ValueError otherwise."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"address must be host:port, not {address!r}")
    return host.strip("[]"), int(port)
