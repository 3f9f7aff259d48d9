"""Loading: the YAML file read, `${VAR}` references replaced, the result validated.

`load_settings(path)` reads YAML, replaces `${VAR}` references with environment values, and
validates the result; every failure names the file and the key path. Components receive
their slice of the settings, never `os.environ`. `load_admin(path)` reads the admin section
alone, for the operator's command.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    ValidationError,
)
from pydantic_core import ErrorDetails

from gateway.config.base import ConfigError, read_regular_file
from gateway.config.routes import demo_route
from gateway.config.sections import AdminConfig
from gateway.config.settings import Settings
from gateway.config.suggest import nearest_key

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: No configuration is this large; a bigger file is refused before it is read.
_MAX_FILE_BYTES = 16 * 1024 * 1024
#: The most values (mappings, lists and scalars) a file may hold once its aliases are
#: expanded: about what 16 MiB of API keys hold (20,000 keys are 100,000 values), and far
#: short of what an alias bomb ("billion laughs") of a few hundred bytes expands to.
_MAX_VALUES = 1_000_000
#: A key longer than this is shown cut (and never matched against the valid ones).
_SHOWN_KEY_CHARS = 80
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _substitute_env(value: Any, where: str, env: dict[str, str], unset: list[str]) -> Any:
    """`value` with its `${VAR}`s replaced; each one not in `env` is added to `unset` (as
    "KEY PATH: ..."), so that one run names them all."""
    if isinstance(value, dict):
        return {
            k: _substitute_env(v, f"{where}.{k}" if where else str(k), env, unset)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_substitute_env(v, f"{where}[{i}]", env, unset) for i, v in enumerate(value)]
    if isinstance(value, str):

        def lookup(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in env:
                unset.append(f"{where}: environment variable {name} is not set")
                return ""
            return env[name]

        return _ENV_REF.sub(lookup, value)
    return value


def _unset_secrets(value: Any, where: str, env: dict[str, str], unset: list[str]) -> None:
    """Adds to `unset` every `*_env` key (key_env, secret_env, client_secret_env,
    bearer_token_env: each names the variable holding a secret) whose variable is unset or
    empty. Validation names these too, but only once every `${VAR}` could be replaced."""
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            if isinstance(key, str) and key.endswith("_env") and isinstance(item, str):
                if _ENV_NAME.fullmatch(item) and not env.get(item):
                    unset.append(f"{path}: environment variable {item} is not set (or empty)")
            else:
                _unset_secrets(item, path, env, unset)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _unset_secrets(item, f"{where}[{i}]", env, unset)


def _key_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += (
            f"[{part}]" if isinstance(part, int) else (f".{_shown(part)}" if out else _shown(part))
        )
    return out or "(top level)"


def _shown(key: str) -> str:
    """A key as a terminal may print it: a mistyped one can hold anything, even NUL or an
    escape sequence, and any length."""
    if key.isprintable() and len(key) <= _SHOWN_KEY_CHARS:
        return key
    escaped = key[: _SHOWN_KEY_CHARS + 1].encode("unicode_escape").decode("ascii")
    return escaped[:_SHOWN_KEY_CHARS] + ("..." if len(escaped) > _SHOWN_KEY_CHARS else "")


def parse_settings(data: Any, source: str, env: dict[str, str] | None = None) -> Settings:
    """Validate decoded YAML.

    Raises:
        ConfigError: naming `source` and the offending key.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys")
    env = dict(os.environ) if env is None else env
    unset: list[str] = []
    substituted = _substitute_env(data, "", env, unset)
    if unset:
        _unset_secrets(data, "", env, unset)
        raise ConfigError("\n".join(f"{source}: {line}" for line in unset))
    try:
        return Settings.model_validate(substituted, context={"env": env})
    except ValidationError as exc:
        errors = exc.errors()
        # A route that fails validation also makes `routes` look empty; report only the cause.
        if any(e["type"] != "too_short" for e in errors):
            errors = [e for e in errors if e["type"] != "too_short"]
        raise _refused(source, errors) from None


def _refused(source: str, errors: list[ErrorDetails], within: tuple[str, ...] = ()) -> ConfigError:
    """One line per error: the file, the key path (inside the section `within`), the message."""
    return ConfigError(
        "\n".join(
            f"{source}: {_key_path(loc)}: {msg}"
            for loc, msg in (_explained(err, within) for err in errors)
        )
    )


def _explained(err: ErrorDetails, within: tuple[str, ...]) -> tuple[tuple[int | str, ...], str]:
    """The key path (from the top of the file) and message of one validation error, in the
    terms of the YAML file."""
    loc, kind = (*within, *err["loc"]), err["type"]
    # Model-level validators report at the model's path with a "Value error, " prefix.
    msg = err["msg"].removeprefix("Value error, ")
    if kind == "config_key":  # see refusal
        loc = (*loc, str(err.get("ctx", {})["key"]))
    elif kind == "extra_forbidden":
        meant = nearest_key(Settings, loc)
        msg = "unknown key" + (f" (did you mean `{meant}`?)" if meant else "")
    elif loc == ("routes",) and kind in ("missing", "too_short"):
        msg = "required: list at least one route (the demo runs only when no --config is given)"
    elif kind == "missing":
        msg = "required"
    elif kind == "finite_number":
        msg = "a finite number is expected, not infinity or NaN (.inf, .nan)"
    elif kind in ("tuple_type", "list_type"):
        # Never the value itself: after ${VAR} substitution it may hold a secret.
        msg = "a list is expected"
        if loc[-1:] == ("command",):
            msg += " (program and arguments, e.g. [python, -m, server])"
        if isinstance(err["input"], str):
            msg += ", not a single string"
    return loc, msg


def load_settings(path: str | Path | None) -> Settings:
    """Load settings from a YAML file, or, when `path` is None, the built-in defaults, which
    serve the bundled demo (the same as config/gateway.yaml).

    Raises:
        ConfigError: unreadable file, bad YAML or invalid settings.
    """
    if path is None:
        return Settings(routes=(demo_route(),))
    data = _read(path)
    try:
        return parse_settings(data, str(path))
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a configuration") from None


def load_admin(path: str | Path) -> AdminConfig | None:
    """The file's `admin` section alone (None without one): what the operator's command
    needs, without the clients' secrets the rest of the file may name.

    Raises:
        ConfigError: unreadable file, bad YAML or an invalid admin section.
    """
    data = _read(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys")
    section = data.get("admin")
    if section is None:
        return None
    env = dict(os.environ)
    unset: list[str] = []
    try:
        section = _substitute_env(section, "admin", env, unset)
    except RecursionError:
        raise ConfigError(f"{path}: admin: nested too deeply to be a configuration") from None
    if unset:
        raise ConfigError("\n".join(f"{path}: {line}" for line in unset))
    try:
        return AdminConfig.model_validate(section, context={"env": env})
    except ValidationError as exc:
        raise _refused(str(path), exc.errors(), ("admin",)) from None


def _read(path: str | Path) -> Any:
    """The file's YAML, decoded.

    Raises:
        ConfigError: unreadable file, bad YAML, or more values than a configuration holds.
    """
    try:
        raw = read_regular_file(path, _MAX_FILE_BYTES)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}: not a configuration") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    data = _decoded(text, path)
    try:
        values = _expanded_size(data, {})
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a configuration") from None
    if values > _MAX_VALUES:
        raise ConfigError(
            f"{path}: more than {_MAX_VALUES} values once its aliases are expanded: "
            "not a configuration"
        )
    return data


def _expanded_size(value: Any, sizes: dict[int, int]) -> int:
    """How many values `value` holds once its aliases are expanded (counting stops just past
    the bound).

    The bound is on this rather than on the number of aliases: anchors shared by many routes
    are fair use, and the expanded tree is what substitution and validation walk. The loader
    makes an alias the very object of its anchor, so `sizes` (by object id) counts each once:
    the count takes as long as the file, not as its expansion.
    """
    if not isinstance(value, dict | list):
        return 1
    known = sizes.get(id(value))
    if known is not None:
        return known
    total = 1 + len(value) if isinstance(value, dict) else 1
    for child in value.values() if isinstance(value, dict) else value:
        total += _expanded_size(child, sizes) if isinstance(child, dict | list) else 1
        if total > _MAX_VALUES:
            break
    sizes[id(value)] = total
    return total


def _decoded(text: str, path: str | Path) -> Any:
    """`text` read as YAML; a ConfigError when it is not."""
    # libyaml's parser when PyYAML has it (its wheels do): the pure-Python one takes seconds
    # for a file of thousands of API keys. A file it refuses is read again by the pure-Python
    # one, whose messages say more, except when it is nested past libyaml's limit: the
    # pure-Python scanner takes time that grows with the square of the depth to say so too.
    try:
        return yaml.load(text, Loader=_FAST_LOADER)  # noqa: S506 - a safe loader
    except yaml.MarkedYAMLError as exc:
        if exc.problem == "exceeded maximum nesting depth":
            raise ConfigError(f"{path}: nested too deeply to be a configuration") from None
    except yaml.YAMLError:
        pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {_yaml_problem(exc)}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a configuration") from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    # PyYAML's own text quotes the offending line, which may hold a secret: keep the positions.
    if not isinstance(exc, yaml.MarkedYAMLError):
        return type(exc).__name__

    def at(mark: yaml.Mark | None) -> str:
        return "" if mark is None else f"line {mark.line + 1}, column {mark.column + 1}"

    text = ": ".join(p for p in (at(exc.problem_mark), exc.problem or "syntax error") if p)
    if exc.context:
        text += f" ({exc.context}{' at ' + at(exc.context_mark) if exc.context_mark else ''})"
    return text
