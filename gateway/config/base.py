"""What every settings section shares: strictness, refusals that name their key, and the
bounded read of the files the settings name."""

from __future__ import annotations

import functools
import os
import stat
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError

#: The most a ttl, a time limit or an interval may be: a century. Much longer ones overflow
#: the dates and timers they become (dates end at year 9999), and a century means "never".
CENTURY_MS = 100 * 365 * 86_400_000
CENTURY_SECONDS = CENTURY_MS // 1000
#: The most a cap on a caller's tasks or sessions may be, far past any use: the stores count
#: against it in SQL, whose integers end at 2**63 (one beyond failed every creation).
MOST_COUNTED = 1_000_000_000


class ConfigError(Exception):
    """The configuration cannot be used; the message names the file and the key."""


def refusal(key: str, message: str) -> PydanticCustomError:
    """A model's refusal that `parse_settings` reports at `key` inside the model's path."""
    return PydanticCustomError("config_key", message, {"key": key})


class Section(BaseModel):
    # YAML reads `.inf` and `.nan` as floats, and a string such as "inf" or "1e400" becomes
    # one: an endless timeout or rate would pass `gt=0`, and NaN fails every comparison
    # silently, so no setting may be anything but a finite number.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_not_yes_or_no(cls, data: Any) -> Any:
        # Lax validation reads `true` as 1 and `false` as 0: a number written as a yes or no
        # (a careless edit, a value meant for the key beside it) would run as a 1 ms poll
        # interval or a cap of no tasks at all.
        if isinstance(data, dict):
            numeric = _numeric_keys(cls)
            for key, value in data.items():
                if isinstance(value, bool) and key in numeric:
                    raise refusal(key, "a number is expected, not true or false")
        return data


_NUMBERS = (int, float)


@functools.cache
def _numeric_keys(model: type[BaseModel]) -> frozenset[str]:
    """The keys of `model` (as a file writes them) whose values are numbers, never yes/no."""
    return frozenset(
        field.alias or name
        for name, field in model.model_fields.items()
        if _is_number(field.annotation)
    )


def _is_number(annotation: Any) -> bool:
    """An int or a float, alone or with None (or another type that is not a bool)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        choices = typing.get_args(annotation)
        return bool not in choices and any(_is_number(choice) for choice in choices)
    if typing.get_origin(annotation) is typing.Annotated:
        return _is_number(typing.get_args(annotation)[0])
    return annotation in _NUMBERS


def secret_from_env(info: ValidationInfo, name: str) -> str:
    env: dict[str, str] = (info.context or {}).get("env", {})
    value = env.get(name)
    if not value:
        raise ValueError(f"environment variable {name} is not set (or empty)")
    return value


def read_regular_file(path: str | Path, limit: int) -> bytes:
    """The bytes of the regular file at `path`.

    Raises:
        OSError: it cannot be opened or read.
        ValueError: it is not a regular file, or is larger than `limit` bytes.
    """

    # Non-blocking, so that a FIFO is opened without waiting for a writer: a blocked read
    # would hold the reload lock, and shutdown waits for its thread. A regular file reads the
    # same either way, and a terminal is not taken as the process's own.
    def opener(name: str, flags: int) -> int:
        return os.open(name, flags | os.O_NONBLOCK | os.O_NOCTTY)

    with open(path, "rb", opener=opener) as file:  # noqa: PTH123 - Path.open has no opener
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise ValueError("not a regular file")
        data = file.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit} bytes")
    return data
