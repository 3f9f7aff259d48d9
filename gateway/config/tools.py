"""A route's curated tools (`routes[].tools`): which a client sees, under what name, and
with what description. Every name here is the client's (after `rename`), as are the names in
`tasks.tools`, `tasks.repeatable` and `tool_scopes`."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from gateway.config.base import Section, refusal

#: Entries a list or map under `tools:` may hold: far past any real server's tools, and a
#: bound on what each tools/list and tools/call page scans.
MAX_ENTRIES = 1000
#: The tool-name rule of the 2025-11-25 tools page: 1 to 128 of these characters. A name the
#: gateway gives (a rename target) keeps it; a name the upstream gives is taken as it comes.
CLIENT_NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,128}$"


def _text(value: str) -> str:
    if not value:
        raise ValueError("must not be empty")
    if "\x00" in value:
        raise ValueError("must not contain NUL")
    return value


def _client_name(value: str) -> str:
    if not re.fullmatch(CLIENT_NAME_PATTERN, value):
        raise ValueError(
            f"{value[:200]!r} is not a tool name the spec allows: 1 to 128 of A-Z a-z 0-9 _ - ."
        )
    return value


Text = Annotated[str, Field(max_length=1024), AfterValidator(_text)]
ClientName = Annotated[str, AfterValidator(_client_name)]


class ToolsConfig(Section):
    #: Globs (fnmatch) on the client's name; None: every tool.
    allow: tuple[Text, ...] | None = Field(None, max_length=MAX_ENTRIES)
    #: Globs on the client's name; a denied tool is hidden even if allowed.
    deny: tuple[Text, ...] = Field((), max_length=MAX_ENTRIES)
    #: upstream name -> the name a client sees and calls.
    rename: dict[Text, ClientName] = Field(default_factory=dict, max_length=MAX_ENTRIES)
    #: client name -> the description tools/list gives instead of the upstream's.
    describe: dict[Text, Annotated[str, Field(max_length=65_536)]] = Field(
        default_factory=dict, max_length=MAX_ENTRIES
    )

    @model_validator(mode="after")
    def _targets_unique(self) -> ToolsConfig:
        seen: dict[str, str] = {}
        for source, target in self.rename.items():
            if target in seen:
                raise refusal(
                    "rename",
                    f"gives {target!r} to both {seen[target]!r} and {source!r}: "
                    "a client name must be unique on the route",
                )
            seen[target] = source
        return self

    @property
    def curated(self) -> bool:
        return bool(self.allow is not None or self.deny or self.rename or self.describe)
