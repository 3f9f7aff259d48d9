"""How the gateway proves itself to an authorization server's token or introspection endpoint
(RFC 6749 §2.3.1): client_secret_basic in the Authorization header, or client_secret_post in
the form. Both the introspection of client tokens and the upstream identity modes use it."""

from __future__ import annotations

import base64
from urllib.parse import quote


def authenticate_client(
    method: str, client_id: str, secret: str, form: dict[str, str]
) -> dict[str, str]:
    """Headers for a request to the endpoint; with client_secret_post, `form` gains the pair."""
    headers = {"Accept": "application/json"}
    if method == "client_secret_basic":
        # RFC 6749 §2.3.1: each part form-encoded before the Basic encoding.
        pair = f"{quote(client_id, safe='')}:{quote(secret, safe='')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    else:
        form.update(client_id=client_id, client_secret=secret)
    return headers
