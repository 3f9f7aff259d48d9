"""A route as an OAuth 2.1 protected resource (MCP authorization; RFC 9728, 8707 and 6750).

The route's resource identifier is PUBLIC_URL + its path. Its metadata document is served at
the RFC 9728 well-known URL built from that identifier, and every 401 and 403 points there
(`resource_metadata`), so a client that knows only the route's URL finds the authorization
server, registers, and asks for a token for exactly this resource. Tokens are accepted for
that resource alone (or, where the operator says so, for the gateway as a whole).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

from gateway.config import OAuthConfig

WELL_KNOWN = "/.well-known/oauth-protected-resource"


def metadata_path(resource: str) -> str:
    """Where RFC 9728 section 3.1 puts the metadata of `resource`: the well-known prefix
    inserted between the host and the resource's path."""
    return WELL_KNOWN + urlsplit(resource).path


def metadata_url(resource: str) -> str:
    url = urlsplit(resource)
    return urlunsplit((url.scheme, url.netloc, metadata_path(resource), "", ""))


def scopes_of(claims: Mapping[str, object]) -> frozenset[str]:
    """The scopes a token grants: `scope` (RFC 9068, space-separated) or `scp` (a list, as
    some identity providers write it).

    Raises:
        ValueError: the claim is there but of the wrong type.
    """
    for claim in ("scope", "scp"):
        value = claims.get(claim)
        if value is None:
            continue
        if isinstance(value, str):
            return frozenset(value.split())
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return frozenset(value)
        raise ValueError(f"claim {claim} must be a string or a list of strings")
    return frozenset()


class ProtectedResource:
    """One route's resource identifier, metadata and scope rules."""

    def __init__(
        self,
        config: OAuthConfig,
        http_path: str,
        name: str,
        route_scopes: Iterable[str] = (),
        tool_scopes: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        self.resource = config.public_url + http_path
        self.metadata_path = metadata_path(self.resource)
        self.metadata_url = metadata_url(self.resource)
        #: Token audiences accepted here (RFC 8707): this resource, or also the gateway's.
        self.audiences = (self.resource,) + ((config.public_url,) if config.shared_resource else ())
        self.required = frozenset(config.required_scopes) | frozenset(route_scopes)
        self.tool_scopes = {tool: frozenset(s) for tool, s in (tool_scopes or {}).items()}
        self.config = config
        supported = config.scopes_supported
        if supported is None:
            supported = tuple(sorted(self.required.union(*self.tool_scopes.values())))
        self.scopes_supported = supported
        self.metadata = metadata_document(self.resource, config, supported, name)

    def needed(self, tool: str | None = None) -> frozenset[str]:
        """The scopes a request needs: the route's, and the tool's for a tools/call."""
        return self.required | self.tool_scopes.get(tool or "", frozenset())

    def challenge(
        self, error: str | None = None, description: str | None = None, tool: str | None = None
    ) -> str:
        """The WWW-Authenticate value of a 401 (no `error` when no credentials were sent, as
        RFC 6750 section 3.1 asks) or of a 403 `insufficient_scope`."""
        params = [f'resource_metadata="{self.metadata_url}"']
        scope = " ".join(sorted(self.needed(tool)))
        if scope:
            params.append(f'scope="{scope}"')
        if error is not None:
            params.append(f'error="{error}"')
        if description is not None:
            quoted = description.replace("\\", "/").replace('"', "'")
            params.append(f'error_description="{quoted}"')
        return "Bearer " + ", ".join(params)


def shared_metadata(resources: Iterable[ProtectedResource]) -> tuple[str, bytes] | None:
    """The root-form path and document of the gateway as a whole, when routes share it
    (`oauth.shared_resource`; the config ensures they share one `oauth` section)."""
    shared = [r for r in resources if r.config.shared_resource]
    if not shared:
        return None
    config = shared[0].config
    scopes = config.scopes_supported
    if scopes is None:
        scopes = tuple(sorted(set().union(*(r.scopes_supported for r in shared))))
    document = metadata_document(config.public_url, config, scopes, "mcp-task-gateway")
    return metadata_path(config.public_url), document


def metadata_document(
    resource: str, config: OAuthConfig, scopes: Iterable[str], name: str
) -> bytes:
    """The RFC 9728 document for `resource`, as sent."""
    document: dict[str, object] = {
        "resource": resource,
        "authorization_servers": list(config.servers),
        "bearer_methods_supported": ["header"],
        "resource_name": name,
    }
    if scopes := list(scopes):
        document["scopes_supported"] = scopes
    return json.dumps(document, indent=2).encode()
