"""What every settings section shares: strictness, and refusals that name their key."""

from __future__ import annotations

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationInfo,
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
    model_config = ConfigDict(extra="forbid", frozen=True)


def secret_from_env(info: ValidationInfo, name: str) -> str:
    env: dict[str, str] = (info.context or {}).get("env", {})
    value = env.get(name)
    if not value:
        raise ValueError(f"environment variable {name} is not set (or empty)")
    return value
