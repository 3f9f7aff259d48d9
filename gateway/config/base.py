"""What every settings section shares: strictness, and refusals that name their key."""

from __future__ import annotations

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationInfo,
)
from pydantic_core import PydanticCustomError


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
